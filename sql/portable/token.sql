-- Portable bodies (docs/managed.md) of the one-time tokens of
-- sql/idempotency_token.sql, whose C is src/token.c.  Rules of the bodies:
-- see records.sql.
--
-- A token is 128 random bits as 32 lowercase hexadecimal digits, as in
-- the C edition, and its random bits come from the same source,
-- pg_strong_random, through the core function gen_random_uuid()
-- (PostgreSQL 13 and later; no pgcrypto needed): a version 4 UUID has 122
-- random bits, all but the version digit (the 13th hexadecimal digit) and
-- the two variant bits (in the 17th).  A token is the 30 wholly random
-- digits of one UUID (120 bits) followed by 2 wholly random digits of
-- another (8 bits).

-- idem_token_issue (src/token.c): a new token inserted as an 'issued'
-- record of the scope, tried again (at most 4 times in all) when the key
-- is taken, which 128 random bits make beyond belief.
-- portable: idem_token_issue
LANGUAGE plpgsql
AS $$
DECLARE
    now_ pg_catalog.timestamptz;
    expires pg_catalog.timestamptz;
    _token pg_catalog.text;
    _a pg_catalog.text;
    _b pg_catalog.text;
BEGIN
    IF scope IS NULL THEN
        RAISE EXCEPTION 'idem_token_issue: scope must not be null'
            USING ERRCODE = '22004', HINT = 'Use the empty string for the default scope.';
    END IF;
    IF pg_catalog.octet_length(scope) OPERATOR(pg_catalog.>) 128 THEN
        RAISE EXCEPTION 'idem_token_issue: scope is too long'
            USING ERRCODE = '22001',
                  DETAIL = pg_catalog.format('The scope is %s bytes; the limit is 128 bytes.', pg_catalog.octet_length(scope));
    END IF;
    IF ttl IS NULL THEN
        RAISE EXCEPTION 'idem_token_issue: ttl must not be null'
            USING ERRCODE = '22004', HINT = 'Omit ttl for the default of 10 minutes.';
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idem_token_issue() in a read-only transaction' USING ERRCODE = '25006';
    END IF;

    now_ := pg_catalog.clock_timestamp();
    @@short_ttl(idem_token_issue)@@
    -- now + ttl (src/args.c, idem_add_interval).
    IF pg_catalog.abs(pg_catalog.date_part('year', ttl)) OPERATOR(pg_catalog.<) 1000
       AND pg_catalog.abs(pg_catalog.date_part('day', ttl)) OPERATOR(pg_catalog.<) 300000
       AND pg_catalog.abs(pg_catalog.date_part('hour', ttl)) OPERATOR(pg_catalog.<) 7000000 THEN
        expires := now_ OPERATOR(pg_catalog.+) ttl;
    ELSE
        BEGIN
            expires := now_ OPERATOR(pg_catalog.+) ttl;
        EXCEPTION WHEN datetime_field_overflow THEN
            IF pg_catalog.date_part('year', ttl) OPERATOR(pg_catalog.>=) 0
               AND pg_catalog.date_part('month', ttl) OPERATOR(pg_catalog.>=) 0
               AND pg_catalog.date_part('day', ttl) OPERATOR(pg_catalog.>=) 0
               AND pg_catalog.date_part('hour', ttl) OPERATOR(pg_catalog.>=) 0
               AND pg_catalog.date_part('minute', ttl) OPERATOR(pg_catalog.>=) 0
               AND pg_catalog.date_part('second', ttl) OPERATOR(pg_catalog.>=) 0 THEN
                RAISE EXCEPTION 'idem_token_issue: ttl is out of range'
                    USING ERRCODE = '22023',
                          DETAIL = pg_catalog.format('The ttl given was %s; the resulting time is outside the range of timestamptz.', ttl),
                          HINT = 'To keep keys forever, set idempotency.default_ttl to ''infinity'' and pass no ttl.';
            END IF;
            RAISE EXCEPTION 'idem_token_issue: ttl is out of range'
                USING ERRCODE = '22023',
                      DETAIL = pg_catalog.format('The ttl given was %s; the resulting time is outside the range of timestamptz.', ttl);
        END;
    END IF;
    IF expires OPERATOR(pg_catalog.<=) now_ THEN
        RAISE EXCEPTION 'idem_token_issue: ttl must be positive'
            USING ERRCODE = '22023', DETAIL = pg_catalog.format('The ttl given was %s.', ttl);
    END IF;

    FOR _attempt IN 1 .. 4 LOOP
        _a := pg_catalog.replace(pg_catalog.gen_random_uuid()::pg_catalog.text, '-', '');
        _b := pg_catalog.replace(pg_catalog.gen_random_uuid()::pg_catalog.text, '-', '');
        -- Digits 1-12, 14-16 and 18-32 of the first (all random), 1-2 of the second.
        _token := pg_catalog.substr(_a, 1, 12) OPERATOR(pg_catalog.||) pg_catalog.substr(_a, 14, 3)
                  OPERATOR(pg_catalog.||) pg_catalog.substr(_a, 18, 15) OPERATOR(pg_catalog.||) pg_catalog.substr(_b, 1, 2);
        INSERT INTO @extschema@.idem_records AS r
            (scope, key, status, created_at, updated_at, expires_at)
        VALUES (idem_token_issue.scope, _token, 'issued', now_, now_, expires)
        ON CONFLICT ON CONSTRAINT idem_records_pkey DO NOTHING;
        IF FOUND THEN
            RETURN _token;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'idem_token_issue: every generated token was already taken' USING ERRCODE = 'XX000';
END
$$;

-- idem_token_consume (src/token.c): one UPDATE of an 'issued', live
-- record to 'consumed'; of concurrent consumers exactly one gets true
-- (the others wait for its row lock and re-check, READ COMMITTED; 40001
-- under REPEATABLE READ or SERIALIZABLE).
-- portable: idem_token_consume
LANGUAGE plpgsql
AS $$
DECLARE
    now_ pg_catalog.timestamptz;
BEGIN
    IF scope IS NULL THEN
        RAISE EXCEPTION 'idem_token_consume: scope must not be null'
            USING ERRCODE = '22004', HINT = 'Use the empty string for the default scope.';
    END IF;
    IF pg_catalog.octet_length(scope) OPERATOR(pg_catalog.>) 128 THEN
        RAISE EXCEPTION 'idem_token_consume: scope is too long'
            USING ERRCODE = '22001',
                  DETAIL = pg_catalog.format('The scope is %s bytes; the limit is 128 bytes.', pg_catalog.octet_length(scope));
    END IF;
    IF token IS NULL THEN
        RAISE EXCEPTION 'idem_token_consume: token must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.octet_length(token) OPERATOR(pg_catalog.<>) 32
       OR token COLLATE pg_catalog."C" OPERATOR(pg_catalog.!~) '^[0-9a-f]*$' THEN
        RAISE EXCEPTION 'idem_token_consume: token is malformed'
            USING ERRCODE = '22023',
                  DETAIL = 'A token is 32 lowercase hexadecimal digits, as returned by idem_token_issue().';
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idem_token_consume() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    @@autocommit(idem_token_consume)@@
    now_ := pg_catalog.clock_timestamp();
    UPDATE @extschema@.idem_records AS r
       SET status = 'consumed', updated_at = now_
     WHERE r.scope OPERATOR(pg_catalog.=) (idem_token_consume.scope COLLATE pg_catalog."C")
       AND r.key OPERATOR(pg_catalog.=) (idem_token_consume.token COLLATE pg_catalog."C")
       AND r.status OPERATOR(pg_catalog.=) 'issued'
       AND r.expires_at OPERATOR(pg_catalog.>) now_;
    RETURN FOUND;
END
$$;
