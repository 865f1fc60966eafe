-- Portable bodies (docs/managed.md) of the core claim API: the C symbols of
-- sql/idempotency.sql, whose C is src/claim.c, src/records.c and
-- src/args.c.  sql/portable/generate.pl puts each block below in
-- place of `AS 'MODULE_PATHNAME', 'SYMBOL' LANGUAGE C` in the shared
-- declaration, which keeps the name, arguments, defaults, result and
-- labels; a block is only `-- portable: SYMBOL`, LANGUAGE and AS.
--
-- Rules every body follows, as the C does:
--   - Messages, details, hints and SQLSTATEs are copied from the C, in the
--     same order of checks (scope, key, the other arguments, read-only).
--   - Everything runs in the caller's transaction, without a
--     subtransaction (no EXCEPTION clause, except around an interval
--     addition that may overflow, which writes nothing), and without
--     SET search_path (a label the C declarations do not have): every
--     table is @extschema@-qualified, every operator is
--     OPERATOR(pg_catalog.x), every function and type pg_catalog-qualified,
--     and arguments are qualified with the function's name where a column
--     of the same name is in scope.  A key compared with a column is cast
--     COLLATE "C", as the column is (the caller's collation is ignored).
--   - "now" is clock_timestamp(): the moment of the call (the C's
--     GetCurrentTimestamp), not the start of the transaction.
--   - The settings idempotency.default_ttl, log_duplicates and
--     max_attempts are read with current_setting(name, true) (without the
--     C library they are placeholders: see docs/managed.md).

-- idem_status_is_valid(status text), the CHECK of idem_records.
-- PL/pgSQL, not SQL: the executor would inline an SQL body into the CHECK
-- and so parse it again at every INSERT and UPDATE (a third of a claim's
-- time); a PL/pgSQL body is compiled once per session.
-- portable: idem_status_is_valid
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN status OPERATOR(pg_catalog.=) ANY
        ('{claimed,in_progress,completed,failed,retryable,issued,consumed}'::pg_catalog.text[]);
END
$$;

-- idem_claim(key text): idem_claim('', key), as the C's
-- idem_claim_default_scope (the default ttl, no fingerprint).
-- portable: idem_claim_default_scope
LANGUAGE plpgsql
AS $$
BEGIN
    -- The key is checked there, with the same messages.
    RETURN @extschema@.idem_claim(''::pg_catalog.text, key, NULL::pg_catalog.interval, NULL::pg_catalog.text);
END
$$;

-- short_ttl: refuse (22023) a ttl under a minute (no years, months or
-- days) unless the client's statement (current_query()) writes it as a
-- literal with its unit, as the C's idem_check_ttl_arg: '7' as a bound
-- parameter, a PREPARE parameter, a variable or a cast is 7 seconds.
-- Works on the caller's ttl; the caller's name, the fragment's argument,
-- in the message.
-- portable-fragment: short_ttl
FRAGMENT AS $$
IF ttl OPERATOR(pg_catalog.<) '1 minute'::pg_catalog.interval
   AND ttl OPERATOR(pg_catalog.>) '0'::pg_catalog.interval
   AND pg_catalog.date_part('year', ttl) OPERATOR(pg_catalog.=) 0
   AND pg_catalog.date_part('month', ttl) OPERATOR(pg_catalog.=) 0
   AND pg_catalog.date_part('day', ttl) OPERATOR(pg_catalog.=) 0
   AND NOT EXISTS (
       SELECT FROM pg_catalog.regexp_matches(pg_catalog.current_query(),
                       '''(\s*(?:[-+]?[0-9.]+\s*(?:us|usecs?|microseconds?|ms|msecs?|milliseconds?|s|secs?|seconds?)|[0-9]+:[0-9]+(?::[0-9.]+)?)\s*)''', 'gi') AS m
        WHERE m[1]::pg_catalog.interval OPERATOR(pg_catalog.=) ttl) THEN
    RAISE EXCEPTION '{{ARG}}: ttl % is shorter than a minute', ttl
        USING ERRCODE = '22023',
              DETAIL = 'A ttl under a minute that arrives as a value is refused: a number without a unit (''7'', as a parameter, a variable or a cast) counts seconds, and the value no longer shows whether seconds were meant.',
              HINT = 'Name the unit when the value is made, for example ''7 days''; for a window under a minute, write it in the statement (ttl => ''30 seconds'') or set idempotency.default_ttl (SET LOCAL idempotency.default_ttl = ''30 seconds'') and pass no ttl.';
END IF;
$$;

-- expiry: expires := now_ + the ttl (span := ttl, or the setting
-- idempotency.default_ttl, or 7 days; 'infinity' as set), as the C's
-- idem_expiry and idem_add_interval (src/args.c), unless expires is set
-- already; the caller's name, the fragment's argument, in the errors.
-- Works on the caller's ttl, now_, expires, span and setting.
-- portable-fragment: expiry
FRAGMENT AS $$
span := ttl;
IF span IS NULL AND expires IS NULL THEN
    setting := pg_catalog.current_setting('idempotency.default_ttl', true);
    IF setting IS NULL OR setting OPERATOR(pg_catalog.=) '' THEN
        -- The default: 7 days cannot leave the range of timestamptz.
        span := '7 days';
        expires := now_ OPERATOR(pg_catalog.+) span;
    ELSIF pg_catalog.lower(setting) OPERATOR(pg_catalog.=) 'infinity' THEN
        expires := 'infinity';
    ELSE
        -- A placeholder setting is checked when used, not when set
        -- (a subtransaction only when idempotency.default_ttl is set).
        BEGIN
            span := setting::pg_catalog.interval;
        EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow
                       OR interval_field_overflow THEN
            RAISE EXCEPTION 'invalid value for parameter "idempotency.default_ttl": "%"', setting
                USING ERRCODE = '22023',
                      DETAIL = pg_catalog.format('"%s" is not a valid interval.', setting),
                      HINT = 'Use an interval such as ''7 days'', or ''infinity''.';
        END;
        IF span OPERATOR(pg_catalog.<=) '0'::pg_catalog.interval THEN
            RAISE EXCEPTION 'invalid value for parameter "idempotency.default_ttl": "%"', setting
                USING ERRCODE = '22023', DETAIL = 'The default TTL must be positive.';
        END IF;
    END IF;
END IF;
IF expires IS NULL THEN
    -- Fields this small cannot leave the range of timestamptz: no
    -- subtransaction on the usual path.
    IF pg_catalog.abs(pg_catalog.date_part('year', span)) OPERATOR(pg_catalog.<) 1000
       AND pg_catalog.abs(pg_catalog.date_part('day', span)) OPERATOR(pg_catalog.<) 300000
       AND pg_catalog.abs(pg_catalog.date_part('hour', span)) OPERATOR(pg_catalog.<) 7000000 THEN
        expires := now_ OPERATOR(pg_catalog.+) span;
    ELSE
        BEGIN
            expires := now_ OPERATOR(pg_catalog.+) span;
        EXCEPTION WHEN datetime_field_overflow THEN
            -- The hint for a ttl without negative fields (months, days, time).
            IF pg_catalog.date_part('year', span) OPERATOR(pg_catalog.>=) 0
               AND pg_catalog.date_part('month', span) OPERATOR(pg_catalog.>=) 0
               AND pg_catalog.date_part('day', span) OPERATOR(pg_catalog.>=) 0
               AND pg_catalog.date_part('hour', span) OPERATOR(pg_catalog.>=) 0
               AND pg_catalog.date_part('minute', span) OPERATOR(pg_catalog.>=) 0
               AND pg_catalog.date_part('second', span) OPERATOR(pg_catalog.>=) 0 THEN
                RAISE EXCEPTION '{{ARG}}: ttl is out of range'
                    USING ERRCODE = '22023',
                          DETAIL = pg_catalog.format('The ttl given was %s; the resulting time is outside the range of timestamptz.', span),
                          HINT = 'To keep keys forever, set idempotency.default_ttl to ''infinity'' and pass no ttl.';
            END IF;
            RAISE EXCEPTION '{{ARG}}: ttl is out of range'
                USING ERRCODE = '22023',
                      DETAIL = pg_catalog.format('The ttl given was %s; the resulting time is outside the range of timestamptz.', span);
        END;
    END IF;
    IF expires OPERATOR(pg_catalog.<=) now_ THEN
        RAISE EXCEPTION '{{ARG}}: ttl must be positive'
            USING ERRCODE = '22023', DETAIL = pg_catalog.format('The ttl given was %s.', span);
    END IF;
END IF;
$$;

-- autocommit: idempotency.autocommit_claims, as src/args.c's
-- idem_check_autocommit_claim, as far as PL/pgSQL can tell (docs/managed.md,
-- behaviour autocommit-claims).  The setting must be allow, warn or error
-- (22023 otherwise; unset is error).  A claim commits on its own when its
-- transaction began with the current client message (transaction_timestamp()
-- = statement_timestamp(): exact for a simple query, never true for an
-- extended-protocol Execute, whose transaction began at its Parse or Bind)
-- and that message, current_query() without its string literals and
-- comments, is one statement (no ';' inside: several statements run as one
-- implicit block) that writes nothing: it begins with SELECT, VALUES, TABLE,
-- WITH or EXPLAIN and names no INSERT, UPDATE, DELETE, MERGE or INTO, or is
-- an EXECUTE of such a prepared statement.  The caller's name, the
-- fragment's argument, in the message.
-- portable-fragment: autocommit
FRAGMENT AS $$
DECLARE
    ac_mode pg_catalog.text := pg_catalog.lower(pg_catalog.current_setting('idempotency.autocommit_claims', true));
    ac_text pg_catalog.text;
    ac_word pg_catalog.text;
    ac_name pg_catalog.text;
BEGIN
    IF ac_mode OPERATOR(pg_catalog.<>) ALL ('{"",allow,warn,error}'::pg_catalog.text[]) THEN
        RAISE EXCEPTION 'invalid value for parameter "idempotency.autocommit_claims": "%"',
                        pg_catalog.current_setting('idempotency.autocommit_claims', true)
            USING ERRCODE = '22023', HINT = 'Available values: allow, warn, error.';
    END IF;
    IF pg_catalog.transaction_timestamp() OPERATOR(pg_catalog.=) pg_catalog.statement_timestamp()
       AND COALESCE(ac_mode, '') OPERATOR(pg_catalog.<>) 'allow' THEN
        ac_text := pg_catalog.current_query();
        FOR ac_round IN 1 .. 2 LOOP
            ac_text := pg_catalog.regexp_replace(ac_text, '''([^'']|'''')*''', '''''', 'g');
            ac_text := pg_catalog.regexp_replace(ac_text, '--[^\n]*', ' ', 'g');
            ac_text := pg_catalog.regexp_replace(ac_text, '/\*.*?\*/', ' ', 'g');
            ac_text := pg_catalog.btrim(ac_text, E' \t\r\n;');
            -- A statement prepared with PREPARE shows its PREPARE.
            ac_text := pg_catalog.regexp_replace(ac_text,
                           '^prepare\s+("[^"]*"|\w+)\s*(\([^)]*\))?\s+as\s+', '', 'i');
            EXIT WHEN ac_text IS NULL OR pg_catalog.strpos(ac_text, ';') OPERATOR(pg_catalog.>) 0;
            ac_word := pg_catalog.lower(pg_catalog.substring(ac_text, '^[A-Za-z]+'));
            IF ac_word OPERATOR(pg_catalog.=) 'execute' AND ac_round OPERATOR(pg_catalog.=) 1 THEN
                ac_name := pg_catalog.substring(ac_text, '^[A-Za-z]+\s+("[^"]*"|\w+)');
                ac_name := CASE WHEN pg_catalog.left(ac_name, 1) OPERATOR(pg_catalog.=) '"'
                                THEN pg_catalog.btrim(ac_name, '"') ELSE pg_catalog.lower(ac_name) END;
                SELECT p.statement INTO ac_text FROM pg_catalog.pg_prepared_statements AS p
                 WHERE p.name OPERATOR(pg_catalog.=) ac_name;
                CONTINUE;
            END IF;
            IF ac_word OPERATOR(pg_catalog.=) ANY ('{select,values,table,with,explain}'::pg_catalog.text[])
               AND ac_text OPERATOR(pg_catalog.!~*) '\m(insert|update|delete|merge|into)\M' THEN
                IF ac_mode OPERATOR(pg_catalog.=) 'warn' THEN
                    RAISE WARNING '{{ARG}}: the claim commits on its own'
                        USING ERRCODE = '25P01',
                              DETAIL = 'The call is part of a statement of its own outside a transaction block that writes nothing else, so the claim commits before the work it guards: if that work fails, every retry of the event finds the key claimed and skips it.',
                              HINT = 'Claim in the transaction that does the work (BEGIN, {{ARG}}, the work, COMMIT), or in the statement that writes it; where a claim is meant to stand alone, set idempotency.autocommit_claims to allow (for one function: ALTER FUNCTION ... SET idempotency.autocommit_claims = allow).';
                ELSE
                    RAISE EXCEPTION '{{ARG}}: the claim commits on its own'
                        USING ERRCODE = '25P01',
                              DETAIL = 'The call is part of a statement of its own outside a transaction block that writes nothing else, so the claim commits before the work it guards: if that work fails, every retry of the event finds the key claimed and skips it.',
                              HINT = 'Claim in the transaction that does the work (BEGIN, {{ARG}}, the work, COMMIT), or in the statement that writes it; where a claim is meant to stand alone, set idempotency.autocommit_claims to allow (for one function: ALTER FUNCTION ... SET idempotency.autocommit_claims = allow).';
                END IF;
            END IF;
            EXIT;
        END LOOP;
    END IF;
END;
$$;

-- idem_claim(scope, key, ttl, fingerprint): src/claim.c's claim_internal
-- and idem_claim_spi.  INSERT ... ON CONFLICT DO NOTHING decides through
-- the primary key (it waits for an uncommitted claim of the key, and
-- under REPEATABLE READ or SERIALIZABLE raises 40001 for a record
-- committed after the snapshot); on a conflict the record is read (a new
-- snapshot per statement in READ COMMITTED), and a live one is a
-- duplicate (or ID001), an expired, retryable or abandoned one is taken
-- over by an UPDATE that re-checks that condition on the newest row
-- version.  16 rounds without progress: 42501 or 40001, as the C.
--
-- The common cases take a shorter way through the same statements: a
-- PL/pgSQL function builds each expression it evaluates anew in every
-- transaction, and one claim is often a transaction of its own, so the
-- fewer expressions the better (test/portable/bench.sh).  When every
-- argument is plainly valid and the expiry is the default or a ttl of
-- ordinary size, the INSERT runs at once; a new key is claimed, and on a
-- conflict one SELECT classifies the record: a live one that may not be
-- taken over, with no fingerprint on either side and no duplicate to
-- log, is a duplicate.  Anything else (a takeover, a fingerprint to
-- compare, a duplicate to log, an invisible record, an argument to
-- refuse) goes the long way below, with the same clock reading, whose
-- statements repeat those two.  The commonest call (no ttl, no
-- fingerprint, idempotency.default_ttl unset) has a branch of its own,
-- whose INSERT has no expression to build for either: every expression
-- costs its construction once per transaction (12 % fewer
-- instructions than one branch for all, docs/performance.md).
-- portable: idem_claim
LANGUAGE plpgsql
AS $$
DECLARE
    now_ pg_catalog.timestamptz;
    expires pg_catalog.timestamptz;
    setting pg_catalog.text;
    span pg_catalog.interval;
    fp pg_catalog.bytea;
    rounds pg_catalog.int4;
    invisible pg_catalog.int4;
    rec_status pg_catalog.text;
    rec_fp pg_catalog.bytea;
    rec_created pg_catalog.timestamptz;
    rec_expires pg_catalog.timestamptz;
    rec_locked pg_catalog.timestamptz;
    verdict pg_catalog.text;
BEGIN
    @@autocommit(idem_claim)@@

    -- A null scope or key makes the test null: the long way.
    IF pg_catalog.octet_length(key) OPERATOR(pg_catalog.<=) 1024
       AND pg_catalog.octet_length(key) OPERATOR(pg_catalog.>=) 1
       AND pg_catalog.octet_length(scope) OPERATOR(pg_catalog.<=) 128
       AND pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.<>) 'on' THEN
        now_ := pg_catalog.clock_timestamp();
        IF ttl IS NULL AND fingerprint IS NULL
           AND pg_catalog.current_setting('idempotency.default_ttl', true) IS NULL THEN
            -- The commonest call: no ttl, no fingerprint, no default_ttl.
            INSERT INTO @extschema@.idem_records AS r
                (scope, key, status, fingerprint, created_at, updated_at, expires_at)
            VALUES (idem_claim.scope, idem_claim.key, 'claimed', NULL::pg_catalog.bytea, now_, now_,
                    now_ OPERATOR(pg_catalog.+) '7 days'::pg_catalog.interval)
            ON CONFLICT ON CONSTRAINT idem_records_pkey DO NOTHING;
            IF FOUND THEN
                RETURN true;
            END IF;
            SELECT CASE WHEN r.expires_at OPERATOR(pg_catalog.<=) now_
                             OR r.status OPERATOR(pg_catalog.=) 'retryable'
                             OR (r.status OPERATOR(pg_catalog.=) 'in_progress'
                                 AND r.locked_until OPERATOR(pg_catalog.<=) now_) THEN 'claimable'
                        WHEN r.fingerprint IS NOT NULL THEN 'fingerprint'
                        WHEN COALESCE(pg_catalog.current_setting('idempotency.log_duplicates', true), '')
                             OPERATOR(pg_catalog.<>) '' THEN 'log'
                        ELSE 'duplicate' END
              INTO verdict
              FROM @extschema@.idem_records AS r
             WHERE r.scope OPERATOR(pg_catalog.=) (idem_claim.scope COLLATE pg_catalog."C")
               AND r.key OPERATOR(pg_catalog.=) (idem_claim.key COLLATE pg_catalog."C");
            IF verdict OPERATOR(pg_catalog.=) 'duplicate' THEN
                RETURN false;
            END IF;
            -- The expiry inserted above, for the long way.
            expires := now_ OPERATOR(pg_catalog.+) '7 days'::pg_catalog.interval;
        ELSE
            expires := CASE WHEN ttl IS NULL THEN
                                CASE WHEN COALESCE(pg_catalog.current_setting('idempotency.default_ttl', true), '') OPERATOR(pg_catalog.=) ''
                                     THEN now_ OPERATOR(pg_catalog.+) '7 days'::pg_catalog.interval END
                            WHEN ttl OPERATOR(pg_catalog.>=) '1 minute'::pg_catalog.interval
                                 AND pg_catalog.abs(pg_catalog.date_part('year', ttl)) OPERATOR(pg_catalog.<) 1000
                                 AND pg_catalog.abs(pg_catalog.date_part('day', ttl)) OPERATOR(pg_catalog.<) 300000
                                 AND pg_catalog.abs(pg_catalog.date_part('hour', ttl)) OPERATOR(pg_catalog.<) 7000000
                            THEN now_ OPERATOR(pg_catalog.+) ttl END;
            IF expires OPERATOR(pg_catalog.>) now_ THEN
                INSERT INTO @extschema@.idem_records AS r
                    (scope, key, status, fingerprint, created_at, updated_at, expires_at)
                VALUES (idem_claim.scope, idem_claim.key, 'claimed',
                        CASE WHEN idem_claim.fingerprint IS NOT NULL
                             THEN pg_catalog.sha256(pg_catalog.convert_to(idem_claim.fingerprint, pg_catalog.getdatabaseencoding())) END,
                        now_, now_, expires)
                ON CONFLICT ON CONSTRAINT idem_records_pkey DO NOTHING;
                IF FOUND THEN
                    RETURN true;
                END IF;
                SELECT CASE WHEN r.expires_at OPERATOR(pg_catalog.<=) now_
                                 OR r.status OPERATOR(pg_catalog.=) 'retryable'
                                 OR (r.status OPERATOR(pg_catalog.=) 'in_progress'
                                     AND r.locked_until OPERATOR(pg_catalog.<=) now_) THEN 'claimable'
                            WHEN idem_claim.fingerprint IS NOT NULL OR r.fingerprint IS NOT NULL THEN 'fingerprint'
                            WHEN COALESCE(pg_catalog.current_setting('idempotency.log_duplicates', true), '')
                                 OPERATOR(pg_catalog.<>) '' THEN 'log'
                            ELSE 'duplicate' END
                  INTO verdict
                  FROM @extschema@.idem_records AS r
                 WHERE r.scope OPERATOR(pg_catalog.=) (idem_claim.scope COLLATE pg_catalog."C")
                   AND r.key OPERATOR(pg_catalog.=) (idem_claim.key COLLATE pg_catalog."C");
                IF verdict OPERATOR(pg_catalog.=) 'duplicate' THEN
                    RETURN false;
                END IF;
            ELSE
                expires := NULL;
            END IF;
        END IF;
    END IF;

    -- The long way: src/claim.c step by step.
    IF scope IS NULL THEN
        RAISE EXCEPTION 'idem_claim: scope must not be null'
            USING ERRCODE = '22004', HINT = 'Use the empty string for the default scope.';
    END IF;
    IF pg_catalog.octet_length(scope) OPERATOR(pg_catalog.>) 128 THEN
        RAISE EXCEPTION 'idem_claim: scope is too long'
            USING ERRCODE = '22001',
                  DETAIL = pg_catalog.format('The scope is %s bytes; the limit is 128 bytes.', pg_catalog.octet_length(scope));
    END IF;
    IF key IS NULL THEN
        RAISE EXCEPTION 'idem_claim: key must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.octet_length(key) OPERATOR(pg_catalog.=) 0 THEN
        RAISE EXCEPTION 'idem_claim: key must not be empty' USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.octet_length(key) OPERATOR(pg_catalog.>) 1024 THEN
        RAISE EXCEPTION 'idem_claim: key is too long'
            USING ERRCODE = '22001',
                  DETAIL = pg_catalog.format('The key is %s bytes; the limit is 1024 bytes.', pg_catalog.octet_length(key)),
                  HINT = 'Hash long natural keys, for example with sha256(), and use the digest as the key.';
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idem_claim() in a read-only transaction' USING ERRCODE = '25006';
    END IF;

    -- One clock reading per call (the short way may have taken it).
    IF now_ IS NULL THEN
        now_ := pg_catalog.clock_timestamp();
    END IF;

    -- The expiry (src/args.c, idem_expiry and idem_add_interval).
    @@short_ttl(idem_claim)@@
    @@expiry(idem_claim)@@

    IF fingerprint IS NOT NULL THEN
        fp := pg_catalog.sha256(pg_catalog.convert_to(fingerprint, pg_catalog.getdatabaseencoding()));
    END IF;

    rounds := 0;
    invisible := 0;
    LOOP
        rounds := rounds OPERATOR(pg_catalog.+) 1;
        IF rounds OPERATOR(pg_catalog.>) 16 THEN
            IF pg_catalog.row_security_active('@extschema@.idem_records'::pg_catalog.regclass) THEN
                RAISE EXCEPTION 'idem_claim: row-level security does not let the current role take over the record for this key'
                    USING ERRCODE = '42501',
                          DETAIL = pg_catalog.format('Key "%s" in scope "%s" has an expired, retryable or abandoned record that the role may read but not update.', key, scope),
                          HINT = 'Check the UPDATE policies on idem_records for this role and scope.';
            END IF;
            RAISE EXCEPTION 'idem_claim: could not take over the record for this key'
                USING ERRCODE = '40001',
                      DETAIL = pg_catalog.format('Key "%s" in scope "%s" was found claimable 16 times, but updating it changed no row.', key, scope),
                      HINT = 'Retry the transaction; if this persists, look for a trigger on idem_records that skips updates.';
        END IF;

        INSERT INTO @extschema@.idem_records AS r
            (scope, key, status, fingerprint, created_at, updated_at, expires_at)
        VALUES (idem_claim.scope, idem_claim.key, 'claimed', fp, now_, now_, expires)
        ON CONFLICT ON CONSTRAINT idem_records_pkey DO NOTHING;
        IF FOUND THEN
            RETURN true;
        END IF;

        -- The key exists (or existed a moment ago): read it.
        SELECT r.status, r.fingerprint, r.created_at, r.expires_at, r.locked_until
          INTO rec_status, rec_fp, rec_created, rec_expires, rec_locked
          FROM @extschema@.idem_records AS r
         WHERE r.scope OPERATOR(pg_catalog.=) (idem_claim.scope COLLATE pg_catalog."C")
           AND r.key OPERATOR(pg_catalog.=) (idem_claim.key COLLATE pg_catalog."C");
        IF NOT FOUND THEN
            -- Deleted since the INSERT saw it, or hidden by row-level security.
            invisible := invisible OPERATOR(pg_catalog.+) 1;
            IF invisible OPERATOR(pg_catalog.>) 10 THEN
                RAISE EXCEPTION 'idem_claim: a record for this key exists but is not visible to the current role'
                    USING ERRCODE = '42501',
                          DETAIL = pg_catalog.format('Key "%s" in scope "%s" is held by a row that row-level security hides.', key, scope),
                          HINT = 'Check the row-level security policies on idem_records.';
            END IF;
            CONTINUE;
        END IF;

        IF rec_expires OPERATOR(pg_catalog.>) now_ THEN
            IF fp IS NOT NULL AND rec_fp IS NOT NULL AND fp OPERATOR(pg_catalog.<>) rec_fp THEN
                RAISE EXCEPTION 'idem_claim: idempotency key reused with a different request'
                    USING ERRCODE = 'ID001',
                          DETAIL = pg_catalog.format('Key "%s" in scope "%s" was first claimed at %s with a different fingerprint.', key, scope, rec_created),
                          HINT = 'Use a new key for a different request, or send the same request again.';
            END IF;
            IF rec_status OPERATOR(pg_catalog.<>) 'retryable'
               AND NOT (rec_status OPERATOR(pg_catalog.=) 'in_progress'
                        AND rec_locked IS NOT NULL AND rec_locked OPERATOR(pg_catalog.<=) now_) THEN
                setting := pg_catalog.current_setting('idempotency.log_duplicates', true);
                IF setting IS NOT NULL AND setting OPERATOR(pg_catalog.<>) '' AND setting::pg_catalog.bool THEN
                    RAISE LOG 'idempotency: duplicate claim of key "%" in scope "%", first claimed at %, status %',
                        key, scope, rec_created, rec_status;
                END IF;
                RETURN false;
            END IF;
        END IF;

        -- Expired, retryable or abandoned: take it over.
        UPDATE @extschema@.idem_records AS r
           SET status = 'claimed', fingerprint = fp, result = NULL,
               created_at = now_, updated_at = now_, expires_at = expires,
               locked_until = NULL, token = NULL,
               attempts = CASE WHEN r.expires_at OPERATOR(pg_catalog.<=) now_
                          THEN 0 ELSE r.attempts END,
               -- a lease taken over after its mark: its effect is unknown
               effect_unknown_attempt = CASE WHEN r.expires_at OPERATOR(pg_catalog.<=) now_ THEN NULL
                                        WHEN r.status OPERATOR(pg_catalog.=) 'in_progress'
                                         AND r.effect_started_at IS NOT NULL THEN r.attempts
                                        ELSE r.effect_unknown_attempt END,
               effect_started_at = NULL, owner_pid = NULL, owner_start = NULL
         WHERE r.scope OPERATOR(pg_catalog.=) (idem_claim.scope COLLATE pg_catalog."C")
           AND r.key OPERATOR(pg_catalog.=) (idem_claim.key COLLATE pg_catalog."C")
           AND (r.expires_at OPERATOR(pg_catalog.<=) now_
                OR r.status OPERATOR(pg_catalog.=) 'retryable'
                OR (r.status OPERATOR(pg_catalog.=) 'in_progress'
                    AND r.locked_until OPERATOR(pg_catalog.<=) now_));
        IF FOUND THEN
            RETURN true;
        END IF;
        -- Somebody else changed it first; look again.
    END LOOP;
END
$$;

-- idem_complete (src/records.c).
-- portable: idem_complete
LANGUAGE plpgsql
AS $$
DECLARE
    now_ pg_catalog.timestamptz;
    rec_status pg_catalog.text;
    rec_live pg_catalog.bool;
BEGIN
    IF scope IS NULL THEN
        RAISE EXCEPTION 'idem_complete: scope must not be null'
            USING ERRCODE = '22004', HINT = 'Use the empty string for the default scope.';
    END IF;
    IF pg_catalog.octet_length(scope) OPERATOR(pg_catalog.>) 128 THEN
        RAISE EXCEPTION 'idem_complete: scope is too long'
            USING ERRCODE = '22001',
                  DETAIL = pg_catalog.format('The scope is %s bytes; the limit is 128 bytes.', pg_catalog.octet_length(scope));
    END IF;
    IF key IS NULL THEN
        RAISE EXCEPTION 'idem_complete: key must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.octet_length(key) OPERATOR(pg_catalog.=) 0 THEN
        RAISE EXCEPTION 'idem_complete: key must not be empty' USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.octet_length(key) OPERATOR(pg_catalog.>) 1024 THEN
        RAISE EXCEPTION 'idem_complete: key is too long'
            USING ERRCODE = '22001',
                  DETAIL = pg_catalog.format('The key is %s bytes; the limit is 1024 bytes.', pg_catalog.octet_length(key)),
                  HINT = 'Hash long natural keys, for example with sha256(), and use the digest as the key.';
    END IF;
    IF idem_complete.result IS NULL THEN
        RAISE EXCEPTION 'idem_complete: result must not be null'
            USING ERRCODE = '22004',
                  DETAIL = 'A completed record is replayed from its result; a null result would replay nothing.',
                  HINT = 'Pass the response to replay; for a request with no response, pass ''{}'' or ''null''::jsonb.';
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idem_complete() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    now_ := pg_catalog.clock_timestamp();

    UPDATE @extschema@.idem_records AS r
       SET status = 'completed', result = idem_complete.result, updated_at = now_
     WHERE r.scope OPERATOR(pg_catalog.=) (idem_complete.scope COLLATE pg_catalog."C")
       AND r.key OPERATOR(pg_catalog.=) (idem_complete.key COLLATE pg_catalog."C")
       AND r.expires_at OPERATOR(pg_catalog.>) now_
       AND r.status OPERATOR(pg_catalog.=) 'claimed';
    IF FOUND THEN
        RETURN;
    END IF;

    SELECT r.status, r.expires_at OPERATOR(pg_catalog.>) now_
      INTO rec_status, rec_live
      FROM @extschema@.idem_records AS r
     WHERE r.scope OPERATOR(pg_catalog.=) (idem_complete.scope COLLATE pg_catalog."C")
       AND r.key OPERATOR(pg_catalog.=) (idem_complete.key COLLATE pg_catalog."C");
    IF NOT FOUND OR NOT rec_live THEN
        RAISE EXCEPTION 'idem_complete: no live idempotency record'
            USING ERRCODE = 'ID002',
                  DETAIL = pg_catalog.format('Key "%s" in scope "%s" has no record, or its record expired.', key, scope),
                  HINT = 'Call idem_claim() first, in the same transaction.';
    END IF;
    RAISE EXCEPTION 'idem_complete: idempotency record is not claimed'
        USING ERRCODE = 'ID005',
              DETAIL = pg_catalog.format('Key "%s" in scope "%s" has status "%s".', key, scope, rec_status),
              HINT = 'Only a record claimed with idem_claim() can be completed; a leased record is finished with idem_finish().';
END
$$;

-- idem_lookup (src/records.c): STABLE, so it reads with the caller's
-- snapshot, as the C's read-only SPI call does.
-- portable: idem_lookup
LANGUAGE plpgsql
AS $$
DECLARE
    rec @extschema@.idem_record;
BEGIN
    IF scope IS NULL THEN
        RAISE EXCEPTION 'idem_lookup: scope must not be null'
            USING ERRCODE = '22004', HINT = 'Use the empty string for the default scope.';
    END IF;
    IF pg_catalog.octet_length(scope) OPERATOR(pg_catalog.>) 128 THEN
        RAISE EXCEPTION 'idem_lookup: scope is too long'
            USING ERRCODE = '22001',
                  DETAIL = pg_catalog.format('The scope is %s bytes; the limit is 128 bytes.', pg_catalog.octet_length(scope));
    END IF;
    IF key IS NULL THEN
        RAISE EXCEPTION 'idem_lookup: key must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.octet_length(key) OPERATOR(pg_catalog.=) 0 THEN
        RAISE EXCEPTION 'idem_lookup: key must not be empty' USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.octet_length(key) OPERATOR(pg_catalog.>) 1024 THEN
        RAISE EXCEPTION 'idem_lookup: key is too long'
            USING ERRCODE = '22001',
                  DETAIL = pg_catalog.format('The key is %s bytes; the limit is 1024 bytes.', pg_catalog.octet_length(key)),
                  HINT = 'Hash long natural keys, for example with sha256(), and use the digest as the key.';
    END IF;

    SELECT r.scope, r.key, r.status, r.fingerprint, r.result, r.created_at, r.updated_at,
           r.expires_at, r.locked_until, r.token, r.attempts,
           r.owner_pid, r.owner_start, r.effect_started_at, r.effect_unknown_attempt
      INTO rec
      FROM @extschema@.idem_records AS r
     WHERE r.scope OPERATOR(pg_catalog.=) (idem_lookup.scope COLLATE pg_catalog."C")
       AND r.key OPERATOR(pg_catalog.=) (idem_lookup.key COLLATE pg_catalog."C")
       AND r.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp();
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    RETURN rec;
END
$$;

-- idem_release (src/records.c).
-- portable: idem_release
LANGUAGE plpgsql
AS $$
DECLARE
    now_ pg_catalog.timestamptz;
    removed pg_catalog.bool;
BEGIN
    IF scope IS NULL THEN
        RAISE EXCEPTION 'idem_release: scope must not be null'
            USING ERRCODE = '22004', HINT = 'Use the empty string for the default scope.';
    END IF;
    IF pg_catalog.octet_length(scope) OPERATOR(pg_catalog.>) 128 THEN
        RAISE EXCEPTION 'idem_release: scope is too long'
            USING ERRCODE = '22001',
                  DETAIL = pg_catalog.format('The scope is %s bytes; the limit is 128 bytes.', pg_catalog.octet_length(scope));
    END IF;
    IF key IS NULL THEN
        RAISE EXCEPTION 'idem_release: key must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.octet_length(key) OPERATOR(pg_catalog.=) 0 THEN
        RAISE EXCEPTION 'idem_release: key must not be empty' USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.octet_length(key) OPERATOR(pg_catalog.>) 1024 THEN
        RAISE EXCEPTION 'idem_release: key is too long'
            USING ERRCODE = '22001',
                  DETAIL = pg_catalog.format('The key is %s bytes; the limit is 1024 bytes.', pg_catalog.octet_length(key)),
                  HINT = 'Hash long natural keys, for example with sha256(), and use the digest as the key.';
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idem_release() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    now_ := pg_catalog.clock_timestamp();

    DELETE FROM @extschema@.idem_records AS r
     WHERE r.scope OPERATOR(pg_catalog.=) (idem_release.scope COLLATE pg_catalog."C")
       AND r.key OPERATOR(pg_catalog.=) (idem_release.key COLLATE pg_catalog."C")
       AND NOT (r.status OPERATOR(pg_catalog.=) 'in_progress'
                AND r.locked_until OPERATOR(pg_catalog.>) now_
                AND r.expires_at OPERATOR(pg_catalog.>) now_)
    RETURNING r.expires_at OPERATOR(pg_catalog.>) now_ INTO removed;
    IF FOUND THEN
        RETURN removed;
    END IF;

    -- The DELETE skipped a live lease?  (A row that is absent, or was
    -- deleted and claimed anew since the DELETE's snapshot, is not an
    -- error: nothing of the caller's was there to release.)
    PERFORM FROM @extschema@.idem_records AS r
      WHERE r.scope OPERATOR(pg_catalog.=) (idem_release.scope COLLATE pg_catalog."C")
        AND r.key OPERATOR(pg_catalog.=) (idem_release.key COLLATE pg_catalog."C")
        AND r.status OPERATOR(pg_catalog.=) 'in_progress'
        AND r.locked_until OPERATOR(pg_catalog.>) now_
        AND r.expires_at OPERATOR(pg_catalog.>) now_;
    IF FOUND THEN
        RAISE EXCEPTION 'idem_release: idempotency record is in progress under a lease'
            USING ERRCODE = 'ID005',
                  DETAIL = pg_catalog.format('Key "%s" in scope "%s" is held by a worker whose lease has not run out.', key, scope),
                  HINT = 'The lease holder ends it with idem_finish() or idem_fail(); otherwise wait for the lease to run out.';
    END IF;
    RETURN false;
END
$$;

-- idem_purge (src/records.c): the batch is taken FOR UPDATE SKIP LOCKED,
-- so a purge never waits for a claim.
-- portable: idem_purge
LANGUAGE plpgsql
AS $$
DECLARE
    now_ pg_catalog.timestamptz;
    n pg_catalog.int8;
BEGIN
    IF batch_size IS NULL THEN
        RAISE EXCEPTION 'idem_purge: batch_size must not be null' USING ERRCODE = '22004';
    END IF;
    IF batch_size OPERATOR(pg_catalog.<) 1 THEN
        RAISE EXCEPTION 'idem_purge: batch_size must be at least 1'
            USING ERRCODE = '22023', DETAIL = pg_catalog.format('The batch_size given was %s.', batch_size);
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idem_purge() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    now_ := pg_catalog.clock_timestamp();

    DELETE FROM @extschema@.idem_records AS r
     WHERE r.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(
           SELECT p.ctid FROM @extschema@.idem_records AS p
            WHERE p.expires_at OPERATOR(pg_catalog.<=) now_
            ORDER BY p.expires_at LIMIT batch_size
              FOR UPDATE SKIP LOCKED))
       AND r.expires_at OPERATOR(pg_catalog.<=) now_;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

-- idem_summary (src/records.c): one scan of idem_records as the caller.
-- portable: idem_summary
LANGUAGE plpgsql
AS $$
DECLARE
    now_ pg_catalog.timestamptz := pg_catalog.clock_timestamp();
BEGIN
    RETURN QUERY
    SELECT r.scope,
           pg_catalog.count(*),
           pg_catalog.count(*) FILTER (WHERE r.status OPERATOR(pg_catalog.=) 'claimed'),
           pg_catalog.count(*) FILTER (WHERE r.status OPERATOR(pg_catalog.=) 'in_progress'),
           pg_catalog.count(*) FILTER (WHERE r.status OPERATOR(pg_catalog.=) 'completed'),
           pg_catalog.count(*) FILTER (WHERE r.status OPERATOR(pg_catalog.=) 'failed'),
           pg_catalog.count(*) FILTER (WHERE r.status OPERATOR(pg_catalog.=) 'retryable'),
           pg_catalog.count(*) FILTER (WHERE r.status OPERATOR(pg_catalog.=) 'issued'),
           pg_catalog.count(*) FILTER (WHERE r.status OPERATOR(pg_catalog.=) 'consumed'),
           pg_catalog.min(r.created_at),
           pg_catalog.count(*) FILTER (WHERE r.expires_at OPERATOR(pg_catalog.<=) now_),
           pg_catalog.count(*) FILTER (WHERE r.status OPERATOR(pg_catalog.=) 'in_progress'
                                        AND r.locked_until OPERATOR(pg_catalog.<=) now_
                                        AND r.expires_at OPERATOR(pg_catalog.>) now_)
      FROM @extschema@.idem_records AS r
     GROUP BY r.scope;
END
$$;
