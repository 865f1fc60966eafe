-- Portable body (docs/managed.md) of idem_claim_many, the batch claim of
-- sql/idempotency_batch.sql, whose C is src/batch.c (its SPI path: the
-- portable edition has no fast path).  Rules of the bodies: see
-- records.sql.
--
-- Lock order (deadlock freedom), as the C: the distinct keys are sorted
-- bytewise (COLLATE "C", the order of the primary key), and every wait
-- happens while the call holds only keys that sort before the one waited
-- for.  So the work is split as src/batch.c splits it:
--   1. one read, without locks or waits, of the records the keys have: a
--      live one that cannot be taken over is a duplicate, answered false
--      without touching its row (a redelivered batch writes nothing);
--   2. one INSERT ... ON CONFLICT DO UPDATE (the primary key) over the other
--      keys in sorted order (ORDER BY the ordinality of the sorted array:
--      ModifyTable processes its input in order), whose DO UPDATE takes
--      over an expired, retryable or abandoned record and whose waits all
--      happen key by key in that order;
--   3. a key step 2 neither inserted nor took over had a record that
--      became live meanwhile; its row is locked by this transaction now,
--      and it is settled as idem_claim settles a key (claim_one), without
--      a wait.
-- One clock reading per call decides expiry for every key.

-- claim_one: _claimed := whether this transaction now owns (_scope,
-- _key), claimed as idem_claim claims it (src/claim.c, claim_internal) at
-- the call's clock now_ with expiry expires and fingerprint digest fp;
-- fname names the caller in errors.
-- portable-fragment: claim_one
FRAGMENT AS $$
DECLARE
    _rounds pg_catalog.int4 := 0;
    _invisible pg_catalog.int4 := 0;
    _status pg_catalog.text;
    _fp pg_catalog.bytea;
    _created pg_catalog.timestamptz;
    _expires pg_catalog.timestamptz;
    _locked pg_catalog.timestamptz;
    _setting pg_catalog.text;
BEGIN
    _claimed := NULL;
    WHILE _claimed IS NULL LOOP
        _rounds := _rounds OPERATOR(pg_catalog.+) 1;
        IF _rounds OPERATOR(pg_catalog.>) 16 THEN
            IF pg_catalog.row_security_active('@extschema@.idem_records'::pg_catalog.regclass) THEN
                RAISE EXCEPTION '%: row-level security does not let the current role take over the record for this key', fname
                    USING ERRCODE = '42501',
                          DETAIL = pg_catalog.format('Key "%s" in scope "%s" has an expired, retryable or abandoned record that the role may read but not update.', _key, _scope),
                          HINT = 'Check the UPDATE policies on idem_records for this role and scope.';
            END IF;
            RAISE EXCEPTION '%: could not take over the record for this key', fname
                USING ERRCODE = '40001',
                      DETAIL = pg_catalog.format('Key "%s" in scope "%s" was found claimable 16 times, but updating it changed no row.', _key, _scope),
                      HINT = 'Retry the transaction; if this persists, look for a trigger on idem_records that skips updates.';
        END IF;

        INSERT INTO @extschema@.idem_records AS r
            (scope, key, status, fingerprint, created_at, updated_at, expires_at)
        VALUES (_scope, _key, 'claimed', fp, now_, now_, expires)
        ON CONFLICT ON CONSTRAINT idem_records_pkey DO NOTHING;
        IF FOUND THEN
            _claimed := true;
            EXIT;
        END IF;

        SELECT r.status, r.fingerprint, r.created_at, r.expires_at, r.locked_until
          INTO _status, _fp, _created, _expires, _locked
          FROM @extschema@.idem_records AS r
         WHERE r.scope OPERATOR(pg_catalog.=) (_scope COLLATE pg_catalog."C")
           AND r.key OPERATOR(pg_catalog.=) (_key COLLATE pg_catalog."C");
        IF NOT FOUND THEN
            _invisible := _invisible OPERATOR(pg_catalog.+) 1;
            IF _invisible OPERATOR(pg_catalog.>) 10 THEN
                RAISE EXCEPTION '%: a record for this key exists but is not visible to the current role', fname
                    USING ERRCODE = '42501',
                          DETAIL = pg_catalog.format('Key "%s" in scope "%s" is held by a row that row-level security hides.', _key, _scope),
                          HINT = 'Check the row-level security policies on idem_records.';
            END IF;
            CONTINUE;
        END IF;

        IF _expires OPERATOR(pg_catalog.>) now_ THEN
            IF fp IS NOT NULL AND _fp IS NOT NULL AND fp OPERATOR(pg_catalog.<>) _fp THEN
                RAISE EXCEPTION '%: idempotency key reused with a different request', fname
                    USING ERRCODE = 'ID001',
                          DETAIL = pg_catalog.format('Key "%s" in scope "%s" was first claimed at %s with a different fingerprint.', _key, _scope, _created),
                          HINT = 'Use a new key for a different request, or send the same request again.';
            END IF;
            IF _status OPERATOR(pg_catalog.<>) 'retryable'
               AND NOT (_status OPERATOR(pg_catalog.=) 'in_progress'
                        AND _locked IS NOT NULL AND _locked OPERATOR(pg_catalog.<=) now_) THEN
                _setting := pg_catalog.current_setting('idempotency.log_duplicates', true);
                IF _setting IS NOT NULL AND _setting OPERATOR(pg_catalog.<>) '' AND _setting::pg_catalog.bool THEN
                    RAISE LOG 'idempotency: duplicate claim of key "%" in scope "%", first claimed at %, status %',
                        _key, _scope, _created, _status;
                END IF;
                _claimed := false;
                EXIT;
            END IF;
        END IF;

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
         WHERE r.scope OPERATOR(pg_catalog.=) (_scope COLLATE pg_catalog."C")
           AND r.key OPERATOR(pg_catalog.=) (_key COLLATE pg_catalog."C")
           AND (r.expires_at OPERATOR(pg_catalog.<=) now_
                OR r.status OPERATOR(pg_catalog.=) 'retryable'
                OR (r.status OPERATOR(pg_catalog.=) 'in_progress'
                    AND r.locked_until OPERATOR(pg_catalog.<=) now_));
        IF FOUND THEN
            _claimed := true;
        END IF;
    END LOOP;
END;
$$;

-- idem_claim_many (src/batch.c): every element validated first (its
-- subscript in the message), then the three steps above over the sorted
-- distinct keys, then one row per element in array order, claimed true
-- only at the first occurrence of a key this call claimed.
-- portable: idem_claim_many
LANGUAGE plpgsql
AS $$
DECLARE
    fname pg_catalog.text := 'idem_claim_many';
    _scope pg_catalog.text := idem_claim_many.scope;
    _keys pg_catalog.text[] := idem_claim_many.keys;
    _key pg_catalog.text;
    _lbound pg_catalog.int4;
    _pos pg_catalog.int8;
    _len pg_catalog.int4;
    _isnull pg_catalog.bool;
    now_ pg_catalog.timestamptz;
    expires pg_catalog.timestamptz;
    setting pg_catalog.text;
    span pg_catalog.interval;
    fp pg_catalog.bytea;
    _sorted pg_catalog.text[];
    _pending pg_catalog.text[];
    _claimed_keys pg_catalog.text[];
    _claimed pg_catalog.bool;
    _r pg_catalog.record;
BEGIN
    IF _scope IS NULL THEN
        RAISE EXCEPTION 'idem_claim_many: scope must not be null'
            USING ERRCODE = '22004', HINT = 'Use the empty string for the default scope.';
    END IF;
    IF pg_catalog.octet_length(_scope) OPERATOR(pg_catalog.>) 128 THEN
        RAISE EXCEPTION 'idem_claim_many: scope is too long'
            USING ERRCODE = '22001',
                  DETAIL = pg_catalog.format('The scope is %s bytes; the limit is 128 bytes.', pg_catalog.octet_length(_scope));
    END IF;
    IF _keys IS NULL THEN
        RAISE EXCEPTION 'idem_claim_many: keys must not be null'
            USING ERRCODE = '22004', HINT = 'Pass an empty array to claim nothing.';
    END IF;
    IF pg_catalog.array_ndims(_keys) OPERATOR(pg_catalog.>) 1 THEN
        RAISE EXCEPTION 'idem_claim_many: keys must be a one-dimensional array'
            USING ERRCODE = '22023',
                  DETAIL = pg_catalog.format('The array given has %s dimensions.', pg_catalog.array_ndims(_keys));
    END IF;
    _lbound := COALESCE(pg_catalog.array_lower(_keys, 1), 1);
    SELECT u.n, u.k IS NULL, pg_catalog.octet_length(u.k) INTO _pos, _isnull, _len
      FROM pg_catalog.unnest(_keys) WITH ORDINALITY AS u(k, n)
     WHERE u.k IS NULL OR pg_catalog.octet_length(u.k) OPERATOR(pg_catalog.=) 0
        OR pg_catalog.octet_length(u.k) OPERATOR(pg_catalog.>) 1024
     ORDER BY u.n LIMIT 1;
    IF FOUND THEN
        _pos := _pos OPERATOR(pg_catalog.+) _lbound OPERATOR(pg_catalog.-) 1;
        IF _isnull THEN
            RAISE EXCEPTION 'idem_claim_many: key must not be null'
                USING ERRCODE = '22004', DETAIL = pg_catalog.format('Array element keys[%s] is null.', _pos);
        ELSIF _len OPERATOR(pg_catalog.=) 0 THEN
            RAISE EXCEPTION 'idem_claim_many: key must not be empty'
                USING ERRCODE = '22023', DETAIL = pg_catalog.format('Array element keys[%s] is the empty string.', _pos);
        ELSE
            RAISE EXCEPTION 'idem_claim_many: key is too long'
                USING ERRCODE = '22001',
                      DETAIL = pg_catalog.format('Array element keys[%s] is %s bytes; the limit is 1024 bytes.', _pos, _len),
                      HINT = 'Hash long natural keys, for example with sha256(), and use the digest as the key.';
        END IF;
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idem_claim_many() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    @@autocommit(idem_claim_many)@@

    now_ := pg_catalog.clock_timestamp();

    -- The expiry (src/args.c, idem_expiry and idem_add_interval).
    @@short_ttl(idem_claim_many)@@
    @@expiry(idem_claim_many)@@

    -- The distinct keys, bytewise.
    _sorted := ARRAY(SELECT DISTINCT u.k COLLATE pg_catalog."C" FROM pg_catalog.unnest(_keys) AS u(k) ORDER BY 1);
    IF pg_catalog.cardinality(_sorted) OPERATOR(pg_catalog.>) 0 THEN
        -- Step 1: live records are duplicates; their rows are not touched.
        _pending := '{}';
        _claimed_keys := '{}';
        setting := pg_catalog.current_setting('idempotency.log_duplicates', true);
        FOR _r IN
            SELECT k.key, k.n, r.status, r.created_at, r.claimable
              FROM pg_catalog.unnest(_sorted) WITH ORDINALITY AS k(key, n)
              LEFT JOIN LATERAL (
                   SELECT r.status, r.created_at,
                          (r.expires_at OPERATOR(pg_catalog.<=) now_
                           OR r.status OPERATOR(pg_catalog.=) 'retryable'
                           OR (r.status OPERATOR(pg_catalog.=) 'in_progress'
                               AND r.locked_until OPERATOR(pg_catalog.<=) now_)) IS TRUE AS claimable
                     FROM @extschema@.idem_records AS r
                    WHERE r.scope OPERATOR(pg_catalog.=) (_scope COLLATE pg_catalog."C")
                      AND r.key OPERATOR(pg_catalog.=) k.key
                    LIMIT 1) AS r ON true
             ORDER BY k.n
        LOOP
            IF _r.status IS NULL OR _r.claimable THEN
                _pending := _pending OPERATOR(pg_catalog.||) _r.key;
            ELSIF setting IS NOT NULL AND setting OPERATOR(pg_catalog.<>) '' AND setting::pg_catalog.bool THEN
                RAISE LOG 'idempotency: duplicate claim of key "%" in scope "%", first claimed at %, status %',
                    _r.key, _scope, _r.created_at, _r.status;
            END IF;
        END LOOP;

        -- Step 2: insert or take over the rest, in sorted order.
        IF pg_catalog.cardinality(_pending) OPERATOR(pg_catalog.>) 0 THEN
            WITH c AS (
                INSERT INTO @extschema@.idem_records AS r
                    (scope, key, status, created_at, updated_at, expires_at)
                SELECT _scope, k.key, 'claimed', now_, now_, expires
                  FROM pg_catalog.unnest(_pending) WITH ORDINALITY AS k(key, n)
                 ORDER BY k.n
                ON CONFLICT ON CONSTRAINT idem_records_pkey DO UPDATE
                   SET status = 'claimed', fingerprint = NULL, result = NULL,
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
                 WHERE (r.expires_at OPERATOR(pg_catalog.<=) now_
                        OR r.status OPERATOR(pg_catalog.=) 'retryable'
                        OR (r.status OPERATOR(pg_catalog.=) 'in_progress'
                            AND r.locked_until OPERATOR(pg_catalog.<=) now_))
                RETURNING r.key)
            SELECT pg_catalog.array_agg(c.key) INTO _claimed_keys FROM c;
            _claimed_keys := COALESCE(_claimed_keys, '{}');

            -- Step 3: keys whose rows step 2 found live (and left locked).
            IF pg_catalog.cardinality(_claimed_keys) OPERATOR(pg_catalog.<) pg_catalog.cardinality(_pending) THEN
                FOR _key IN
                    SELECT p.k FROM pg_catalog.unnest(_pending) WITH ORDINALITY AS p(k, n)
                     WHERE NOT (p.k COLLATE pg_catalog."C" OPERATOR(pg_catalog.=) ANY (_claimed_keys))
                     ORDER BY p.n
                LOOP
                    @@claim_one@@
                    IF _claimed THEN
                        _claimed_keys := _claimed_keys OPERATOR(pg_catalog.||) _key;
                    END IF;
                END LOOP;
            END IF;
        END IF;
    END IF;

    -- One row per element, in array order.
    RETURN QUERY
    SELECT u.k,
           u.n OPERATOR(pg_catalog.=) pg_catalog.min(u.n) OVER (PARTITION BY u.k COLLATE pg_catalog."C")
           AND c.k IS NOT NULL
      FROM pg_catalog.unnest(_keys) WITH ORDINALITY AS u(k, n)
      LEFT JOIN pg_catalog.unnest(_claimed_keys) AS c(k)
        ON c.k OPERATOR(pg_catalog.=) (u.k COLLATE pg_catalog."C")
     ORDER BY u.n;
END
$$;
