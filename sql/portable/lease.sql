-- Portable bodies (docs/managed.md) of the leases of
-- sql/idempotency_lease.sql, whose C is src/lease.c (and src/claim.c's
-- decision, which idem_begin shares with idem_claim).  Rules of the
-- bodies: see records.sql.  A token-checked UPDATE names the token in its
-- WHERE clause, so a worker whose lease was taken over changes nothing and
-- gets ID003; a takeover re-checks its condition on the newest row
-- version, so of two racing workers exactly one acquires.

-- idem_begin: idem_claim's decision with its own statements (src/claim.c
-- idem_claim_spi, src/lease.c begin_plan).
-- portable: idem_begin
LANGUAGE plpgsql
AS $$
DECLARE
    now_ pg_catalog.timestamptz;
    locked pg_catalog.timestamptz;
    expires pg_catalog.timestamptz;
    setting pg_catalog.text;
    span pg_catalog.interval;
    fp pg_catalog.bytea;
    rounds pg_catalog.int4 := 0;
    invisible pg_catalog.int4 := 0;
    rec_status pg_catalog.text;
    rec_fp pg_catalog.bytea;
    rec_created pg_catalog.timestamptz;
    rec_expires pg_catalog.timestamptz;
    rec_locked pg_catalog.timestamptz;
    rec_result pg_catalog.jsonb;
    -- A bound lease's owner session (pid, backend start), and one found gone.
    own_pid pg_catalog.int4;
    own_start pg_catalog.timestamptz;
    rec_owner_pid pg_catalog.int4;
    rec_owner_start pg_catalog.timestamptz;
    seen_start pg_catalog.timestamptz;
    gone_pid pg_catalog.int4;
    gone_start pg_catalog.timestamptz;
BEGIN
    IF scope IS NULL THEN
        RAISE EXCEPTION 'idem_begin: scope must not be null'
            USING ERRCODE = '22004', HINT = 'Use the empty string for the default scope.';
    END IF;
    IF pg_catalog.octet_length(scope) OPERATOR(pg_catalog.>) 128 THEN
        RAISE EXCEPTION 'idem_begin: scope is too long'
            USING ERRCODE = '22001',
                  DETAIL = pg_catalog.format('The scope is %s bytes; the limit is 128 bytes.', pg_catalog.octet_length(scope));
    END IF;
    IF key IS NULL THEN
        RAISE EXCEPTION 'idem_begin: key must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.octet_length(key) OPERATOR(pg_catalog.=) 0 THEN
        RAISE EXCEPTION 'idem_begin: key must not be empty' USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.octet_length(key) OPERATOR(pg_catalog.>) 1024 THEN
        RAISE EXCEPTION 'idem_begin: key is too long'
            USING ERRCODE = '22001',
                  DETAIL = pg_catalog.format('The key is %s bytes; the limit is 1024 bytes.', pg_catalog.octet_length(key)),
                  HINT = 'Hash long natural keys, for example with sha256(), and use the digest as the key.';
    END IF;
    IF lease IS NULL THEN
        RAISE EXCEPTION 'idem_begin: lease must not be null' USING ERRCODE = '22004';
    END IF;
    IF bind_to_session IS NULL THEN
        RAISE EXCEPTION 'idem_begin: bind_to_session must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idem_begin() in a read-only transaction' USING ERRCODE = '25006';
    END IF;

    now_ := pg_catalog.clock_timestamp();
    IF pg_catalog.abs(pg_catalog.date_part('year', lease)) OPERATOR(pg_catalog.<) 1000
       AND pg_catalog.abs(pg_catalog.date_part('day', lease)) OPERATOR(pg_catalog.<) 300000
       AND pg_catalog.abs(pg_catalog.date_part('hour', lease)) OPERATOR(pg_catalog.<) 7000000 THEN
        locked := now_ OPERATOR(pg_catalog.+) lease;
    ELSE
        BEGIN
            locked := now_ OPERATOR(pg_catalog.+) lease;
        EXCEPTION WHEN datetime_field_overflow THEN
            RAISE EXCEPTION 'idem_begin: lease is out of range'
                USING ERRCODE = '22023',
                      DETAIL = pg_catalog.format('The lease given was %s; the resulting time is outside the range of timestamptz.', lease);
        END;
    END IF;
    IF locked OPERATOR(pg_catalog.<=) now_ THEN
        RAISE EXCEPTION 'idem_begin: lease must be positive'
            USING ERRCODE = '22023', DETAIL = pg_catalog.format('The lease given was %s.', lease);
    END IF;

    -- The expiry (src/args.c, idem_expiry and idem_add_interval).
    @@short_ttl(idem_begin)@@
    @@expiry(idem_begin)@@

    IF fingerprint IS NOT NULL THEN
        fp := pg_catalog.sha256(pg_catalog.convert_to(fingerprint, pg_catalog.getdatabaseencoding()));
    END IF;
    -- Bound: this session's pid and start (its own row of
    -- pg_stat_activity is always visible to it).
    IF bind_to_session THEN
        own_pid := pg_catalog.pg_backend_pid();
        SELECT a.backend_start INTO own_start
          FROM pg_catalog.pg_stat_get_activity(own_pid) AS a;
    END IF;

    LOOP
        rounds := rounds OPERATOR(pg_catalog.+) 1;
        IF rounds OPERATOR(pg_catalog.>) 16 THEN
            IF pg_catalog.row_security_active('@extschema@.idem_records'::pg_catalog.regclass) THEN
                RAISE EXCEPTION 'idem_begin: row-level security does not let the current role take over the record for this key'
                    USING ERRCODE = '42501',
                          DETAIL = pg_catalog.format('Key "%s" in scope "%s" has an expired, retryable or abandoned record that the role may read but not update.', key, scope),
                          HINT = 'Check the UPDATE policies on idem_records for this role and scope.';
            END IF;
            RAISE EXCEPTION 'idem_begin: could not take over the record for this key'
                USING ERRCODE = '40001',
                      DETAIL = pg_catalog.format('Key "%s" in scope "%s" was found claimable 16 times, but updating it changed no row.', key, scope),
                      HINT = 'Retry the transaction; if this persists, look for a trigger on idem_records that skips updates.';
        END IF;

        INSERT INTO @extschema@.idem_records AS r
            (scope, key, status, fingerprint, created_at, updated_at, expires_at,
             locked_until, token, attempts, lease, owner_pid, owner_start)
        VALUES (idem_begin.scope, idem_begin.key, 'in_progress', fp, now_, now_, expires, locked,
                pg_catalog.nextval('@extschema@.idem_token_seq'::pg_catalog.regclass), 1, idem_begin.lease,
                own_pid, own_start)
        ON CONFLICT ON CONSTRAINT idem_records_pkey DO NOTHING
        RETURNING r.token, r.attempts, false
             INTO idem_begin.token, idem_begin.attempt, idem_begin.effect_unknown;
        IF FOUND THEN
            outcome := 'acquired';
            RETURN;
        END IF;

        SELECT r.status, r.fingerprint, r.created_at, r.expires_at, r.locked_until, r.result,
               r.owner_pid, r.owner_start
          INTO rec_status, rec_fp, rec_created, rec_expires, rec_locked, rec_result,
               rec_owner_pid, rec_owner_start
          FROM @extschema@.idem_records AS r
         WHERE r.scope OPERATOR(pg_catalog.=) (idem_begin.scope COLLATE pg_catalog."C")
           AND r.key OPERATOR(pg_catalog.=) (idem_begin.key COLLATE pg_catalog."C");
        IF NOT FOUND THEN
            invisible := invisible OPERATOR(pg_catalog.+) 1;
            IF invisible OPERATOR(pg_catalog.>) 10 THEN
                RAISE EXCEPTION 'idem_begin: a record for this key exists but is not visible to the current role'
                    USING ERRCODE = '42501',
                          DETAIL = pg_catalog.format('Key "%s" in scope "%s" is held by a row that row-level security hides.', key, scope),
                          HINT = 'Check the row-level security policies on idem_records.';
            END IF;
            CONTINUE;
        END IF;

        IF rec_expires OPERATOR(pg_catalog.>) now_ THEN
            IF fp IS NOT NULL AND rec_fp IS NOT NULL AND fp OPERATOR(pg_catalog.<>) rec_fp THEN
                RAISE EXCEPTION 'idem_begin: idempotency key reused with a different request'
                    USING ERRCODE = 'ID001',
                          DETAIL = pg_catalog.format('Key "%s" in scope "%s" was first claimed at %s with a different fingerprint.', key, scope, rec_created),
                          HINT = 'Use a new key for a different request, or send the same request again.';
            END IF;
            -- A live lease bound to a session that is gone (src/lease_await.c,
            -- idem_session_alive): gone when no backend has its pid, or one
            -- with another start has it.  A start this role may not see
            -- (another role's session, without pg_read_all_stats) proves
            -- nothing: the lease's time rules then.
            gone_pid := NULL;
            gone_start := NULL;
            IF rec_status OPERATOR(pg_catalog.=) 'in_progress' AND rec_owner_pid IS NOT NULL
               AND rec_owner_start IS NOT NULL
               AND NOT (rec_owner_pid OPERATOR(pg_catalog.=) own_pid
                        AND rec_owner_start OPERATOR(pg_catalog.=) own_start) THEN
                PERFORM pg_catalog.pg_stat_clear_snapshot();
                SELECT a.backend_start INTO seen_start
                  FROM pg_catalog.pg_stat_get_activity(rec_owner_pid) AS a;
                IF NOT FOUND OR seen_start OPERATOR(pg_catalog.<>) rec_owner_start THEN
                    gone_pid := rec_owner_pid;
                    gone_start := rec_owner_start;
                END IF;
            END IF;
            IF rec_status OPERATOR(pg_catalog.<>) 'retryable' AND gone_pid IS NULL
               AND NOT (rec_status OPERATOR(pg_catalog.=) 'in_progress'
                        AND rec_locked IS NOT NULL AND rec_locked OPERATOR(pg_catalog.<=) now_) THEN
                setting := pg_catalog.current_setting('idempotency.log_duplicates', true);
                IF setting IS NOT NULL AND setting OPERATOR(pg_catalog.<>) '' AND setting::pg_catalog.bool THEN
                    RAISE LOG 'idempotency: duplicate begin of key "%" in scope "%", first claimed at %, status %',
                        key, scope, rec_created, rec_status;
                END IF;
                IF rec_status OPERATOR(pg_catalog.=) 'in_progress' THEN
                    outcome := 'in_progress';
                ELSE
                    -- failed, or completed (or claimed by idem_claim): replay the result
                    outcome := CASE WHEN rec_status OPERATOR(pg_catalog.=) 'failed'
                                    THEN 'failed' ELSE 'completed' END;
                    result := rec_result;
                END IF;
                RETURN;
            END IF;
        END IF;

        -- Expired, retryable or abandoned: take it over.
        UPDATE @extschema@.idem_records AS r
           SET status = 'in_progress', locked_until = locked, lease = idem_begin.lease,
               token = pg_catalog.nextval('@extschema@.idem_token_seq'::pg_catalog.regclass),
               updated_at = now_, result = NULL,
               attempts = CASE WHEN r.expires_at OPERATOR(pg_catalog.<=) now_ THEN 1
                          ELSE r.attempts OPERATOR(pg_catalog.+) 1 END,
               created_at = CASE WHEN r.expires_at OPERATOR(pg_catalog.<=) now_ THEN now_
                            ELSE r.created_at END,
               expires_at = CASE WHEN r.expires_at OPERATOR(pg_catalog.<=) now_ THEN expires
                            ELSE r.expires_at END,
               fingerprint = CASE WHEN r.expires_at OPERATOR(pg_catalog.<=) now_ THEN fp
                             ELSE COALESCE(r.fingerprint, fp) END,
               effect_unknown_attempt = CASE WHEN r.expires_at OPERATOR(pg_catalog.<=) now_ THEN NULL
                                        WHEN r.status OPERATOR(pg_catalog.=) 'in_progress'
                                         AND r.effect_started_at IS NOT NULL THEN r.attempts
                                        ELSE r.effect_unknown_attempt END,
               effect_started_at = NULL, owner_pid = own_pid, owner_start = own_start
         WHERE r.scope OPERATOR(pg_catalog.=) (idem_begin.scope COLLATE pg_catalog."C")
           AND r.key OPERATOR(pg_catalog.=) (idem_begin.key COLLATE pg_catalog."C")
           AND (r.expires_at OPERATOR(pg_catalog.<=) now_
                OR r.status OPERATOR(pg_catalog.=) 'retryable'
                OR (r.status OPERATOR(pg_catalog.=) 'in_progress'
                    AND r.locked_until OPERATOR(pg_catalog.<=) now_)
                OR (r.status OPERATOR(pg_catalog.=) 'in_progress'
                    AND r.owner_pid OPERATOR(pg_catalog.=) gone_pid
                    AND r.owner_start OPERATOR(pg_catalog.=) gone_start))
        RETURNING r.token, r.attempts, r.effect_unknown_attempt IS NOT NULL
             INTO idem_begin.token, idem_begin.attempt, idem_begin.effect_unknown;
        IF FOUND THEN
            outcome := 'acquired';
            IF gone_pid IS NOT NULL OR idem_begin.effect_unknown THEN
                setting := pg_catalog.current_setting('idempotency.log_duplicates', true);
                IF setting IS NOT NULL AND setting OPERATOR(pg_catalog.<>) '' AND setting::pg_catalog.bool THEN
                    RAISE LOG 'idempotency: idem_begin took over key "%" in scope "%"%',
                        key, scope,
                        CASE WHEN gone_pid IS NOT NULL THEN ' from an owner session that is gone' ELSE '' END
                        OPERATOR(pg_catalog.||)
                        CASE WHEN idem_begin.effect_unknown
                             THEN '; the outside effect of an earlier attempt is unknown' ELSE '' END;
                END IF;
            END IF;
            RETURN;
        END IF;
    END LOOP;
END
$$;

-- idem_heartbeat (src/lease.c).
-- portable: idem_heartbeat
LANGUAGE plpgsql
AS $$
DECLARE
    now_ pg_catalog.timestamptz;
    probe pg_catalog.timestamptz;
    new_until pg_catalog.timestamptz;
    rec_status pg_catalog.text;
    rec_token pg_catalog.int8;
    rec_live pg_catalog.bool;
    rec_no_lease pg_catalog.bool;
    why pg_catalog.text;
BEGIN
    IF scope IS NULL THEN
        RAISE EXCEPTION 'idem_heartbeat: scope must not be null'
            USING ERRCODE = '22004', HINT = 'Use the empty string for the default scope.';
    END IF;
    IF pg_catalog.octet_length(scope) OPERATOR(pg_catalog.>) 128 THEN
        RAISE EXCEPTION 'idem_heartbeat: scope is too long'
            USING ERRCODE = '22001',
                  DETAIL = pg_catalog.format('The scope is %s bytes; the limit is 128 bytes.', pg_catalog.octet_length(scope));
    END IF;
    IF key IS NULL THEN
        RAISE EXCEPTION 'idem_heartbeat: key must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.octet_length(key) OPERATOR(pg_catalog.=) 0 THEN
        RAISE EXCEPTION 'idem_heartbeat: key must not be empty' USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.octet_length(key) OPERATOR(pg_catalog.>) 1024 THEN
        RAISE EXCEPTION 'idem_heartbeat: key is too long'
            USING ERRCODE = '22001',
                  DETAIL = pg_catalog.format('The key is %s bytes; the limit is 1024 bytes.', pg_catalog.octet_length(key)),
                  HINT = 'Hash long natural keys, for example with sha256(), and use the digest as the key.';
    END IF;
    IF token IS NULL THEN
        RAISE EXCEPTION 'idem_heartbeat: token must not be null'
            USING ERRCODE = '22004', HINT = 'Pass the token idem_begin returned with outcome ''acquired''.';
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idem_heartbeat() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    now_ := pg_catalog.clock_timestamp();
    IF lease IS NOT NULL THEN
        IF pg_catalog.abs(pg_catalog.date_part('year', lease)) OPERATOR(pg_catalog.<) 1000
           AND pg_catalog.abs(pg_catalog.date_part('day', lease)) OPERATOR(pg_catalog.<) 300000
           AND pg_catalog.abs(pg_catalog.date_part('hour', lease)) OPERATOR(pg_catalog.<) 7000000 THEN
            probe := now_ OPERATOR(pg_catalog.+) lease;
        ELSE
            BEGIN
                probe := now_ OPERATOR(pg_catalog.+) lease;
            EXCEPTION WHEN datetime_field_overflow THEN
                RAISE EXCEPTION 'idem_heartbeat: lease is out of range'
                    USING ERRCODE = '22023',
                          DETAIL = pg_catalog.format('The lease given was %s; the resulting time is outside the range of timestamptz.', lease);
            END;
        END IF;
        IF probe OPERATOR(pg_catalog.<=) now_ THEN
            RAISE EXCEPTION 'idem_heartbeat: lease must be positive'
                USING ERRCODE = '22023', DETAIL = pg_catalog.format('The lease given was %s.', lease);
        END IF;
    END IF;

    UPDATE @extschema@.idem_records AS r
       SET locked_until = now_ OPERATOR(pg_catalog.+) COALESCE(idem_heartbeat.lease, r.lease),
           lease = COALESCE(idem_heartbeat.lease, r.lease), updated_at = now_
     WHERE r.scope OPERATOR(pg_catalog.=) (idem_heartbeat.scope COLLATE pg_catalog."C")
       AND r.key OPERATOR(pg_catalog.=) (idem_heartbeat.key COLLATE pg_catalog."C")
       AND r.status OPERATOR(pg_catalog.=) 'in_progress'
       AND r.token OPERATOR(pg_catalog.=) idem_heartbeat.token
       AND r.expires_at OPERATOR(pg_catalog.>) now_
       AND COALESCE(idem_heartbeat.lease, r.lease) IS NOT NULL
    RETURNING r.locked_until INTO new_until;
    IF FOUND THEN
        RETURN new_until;
    END IF;
    -- Why the UPDATE matched nothing (src/lease.c, lease_lost).
    SELECT r.status, r.token, r.expires_at OPERATOR(pg_catalog.>) now_, r.lease IS NULL
      INTO rec_status, rec_token, rec_live, rec_no_lease
      FROM @extschema@.idem_records AS r
     WHERE r.scope OPERATOR(pg_catalog.=) (idem_heartbeat.scope COLLATE pg_catalog."C")
       AND r.key OPERATOR(pg_catalog.=) (idem_heartbeat.key COLLATE pg_catalog."C");
    IF NOT FOUND THEN
        RAISE EXCEPTION 'idem_heartbeat: key was never begun'
            USING ERRCODE = 'ID002',
                  DETAIL = pg_catalog.format('Key "%s" in scope "%s" has no record.', key, scope),
                  HINT = 'Call idem_begin first and pass the token it returns; a record purged after its expiry is gone too.';
    END IF;
    IF NOT rec_live THEN
        why := pg_catalog.format('Key "%s" in scope "%s" has no live record.', key, scope);
    ELSIF rec_status OPERATOR(pg_catalog.=) 'in_progress' AND rec_token IS NOT NULL
          AND rec_token OPERATOR(pg_catalog.=) idem_heartbeat.token AND NOT (idem_heartbeat.lease IS NOT NULL) AND rec_no_lease THEN
        RAISE EXCEPTION 'idem_heartbeat: the record has no lease length, so one must be given'
            USING ERRCODE = '22004',
                  DETAIL = pg_catalog.format('Key "%s" in scope "%s" has a NULL lease column.', key, scope),
                  HINT = 'Pass the lease, as in idem_heartbeat(scope, key, token, ''5 minutes'').';
    ELSIF rec_status OPERATOR(pg_catalog.=) 'in_progress' AND rec_token IS NOT NULL THEN
        why := pg_catalog.format('Key "%s" in scope "%s" is now leased with token %s, not %s.', key, scope, rec_token, idem_heartbeat.token);
    ELSE
        why := pg_catalog.format('Key "%s" in scope "%s" is no longer in progress: its status is "%s".', key, scope, rec_status);
    END IF;
    RAISE EXCEPTION 'idem_heartbeat: lease lost'
        USING ERRCODE = 'ID003', DETAIL = why,
              HINT = 'Another worker took the key over after the lease ran out, or the work was already finished; do not apply this worker''s result.';
END
$$;

-- idem_effect_started (src/lease.c): the token-checked UPDATE of
-- idem_finish, stamping the attempt's mark; a bound lease only from its
-- own session.
-- portable: idem_effect_started
LANGUAGE plpgsql
AS $$
DECLARE
    now_ pg_catalog.timestamptz;
    mark pg_catalog.timestamptz;
    rec_owner_pid pg_catalog.int4;
    rec_owner_start pg_catalog.timestamptz;
    own_start pg_catalog.timestamptz;
    rec_status pg_catalog.text;
    rec_token pg_catalog.int8;
    rec_live pg_catalog.bool;
    rec_no_lease pg_catalog.bool;
    why pg_catalog.text;
BEGIN
    IF scope IS NULL THEN
        RAISE EXCEPTION 'idem_effect_started: scope must not be null'
            USING ERRCODE = '22004', HINT = 'Use the empty string for the default scope.';
    END IF;
    IF pg_catalog.octet_length(scope) OPERATOR(pg_catalog.>) 128 THEN
        RAISE EXCEPTION 'idem_effect_started: scope is too long'
            USING ERRCODE = '22001',
                  DETAIL = pg_catalog.format('The scope is %s bytes; the limit is 128 bytes.', pg_catalog.octet_length(scope));
    END IF;
    IF key IS NULL THEN
        RAISE EXCEPTION 'idem_effect_started: key must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.octet_length(key) OPERATOR(pg_catalog.=) 0 THEN
        RAISE EXCEPTION 'idem_effect_started: key must not be empty' USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.octet_length(key) OPERATOR(pg_catalog.>) 1024 THEN
        RAISE EXCEPTION 'idem_effect_started: key is too long'
            USING ERRCODE = '22001',
                  DETAIL = pg_catalog.format('The key is %s bytes; the limit is 1024 bytes.', pg_catalog.octet_length(key)),
                  HINT = 'Hash long natural keys, for example with sha256(), and use the digest as the key.';
    END IF;
    IF token IS NULL THEN
        RAISE EXCEPTION 'idem_effect_started: token must not be null'
            USING ERRCODE = '22004', HINT = 'Pass the token idem_begin returned with outcome ''acquired''.';
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idem_effect_started() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    now_ := pg_catalog.clock_timestamp();

    UPDATE @extschema@.idem_records AS r
       SET effect_started_at = COALESCE(r.effect_started_at, now_), updated_at = now_
     WHERE r.scope OPERATOR(pg_catalog.=) (idem_effect_started.scope COLLATE pg_catalog."C")
       AND r.key OPERATOR(pg_catalog.=) (idem_effect_started.key COLLATE pg_catalog."C")
       AND r.status OPERATOR(pg_catalog.=) 'in_progress'
       AND r.token OPERATOR(pg_catalog.=) idem_effect_started.token
       AND r.expires_at OPERATOR(pg_catalog.>) now_
    RETURNING r.effect_started_at, r.owner_pid, r.owner_start
         INTO mark, rec_owner_pid, rec_owner_start;
    IF FOUND THEN
        IF rec_owner_pid IS NOT NULL AND rec_owner_start IS NOT NULL THEN
            SELECT a.backend_start INTO own_start
              FROM pg_catalog.pg_stat_get_activity(pg_catalog.pg_backend_pid()) AS a;
            IF rec_owner_pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()
               OR own_start IS NULL OR NOT (rec_owner_start OPERATOR(pg_catalog.=) own_start) THEN
                RAISE EXCEPTION 'idem_effect_started: the lease is bound to another session'
                    USING ERRCODE = '55000',
                          DETAIL = pg_catalog.format('Key "%s" in scope "%s" was begun with bind_to_session by the session of process %s started at %s; this is process %s.',
                                                     key, scope, rec_owner_pid, rec_owner_start, pg_catalog.pg_backend_pid()),
                          HINT = 'Work on a bound lease in the session that began it; a worker that reconnects, or runs behind a transaction pooler, begins without bind_to_session.';
            END IF;
        END IF;
        RETURN mark;
    END IF;
    -- Why the UPDATE matched nothing (src/lease.c, lease_lost).
    SELECT r.status, r.token, r.expires_at OPERATOR(pg_catalog.>) now_, r.lease IS NULL
      INTO rec_status, rec_token, rec_live, rec_no_lease
      FROM @extschema@.idem_records AS r
     WHERE r.scope OPERATOR(pg_catalog.=) (idem_effect_started.scope COLLATE pg_catalog."C")
       AND r.key OPERATOR(pg_catalog.=) (idem_effect_started.key COLLATE pg_catalog."C");
    IF NOT FOUND THEN
        RAISE EXCEPTION 'idem_effect_started: key was never begun'
            USING ERRCODE = 'ID002',
                  DETAIL = pg_catalog.format('Key "%s" in scope "%s" has no record.', key, scope),
                  HINT = 'Call idem_begin first and pass the token it returns; a record purged after its expiry is gone too.';
    END IF;
    IF NOT rec_live THEN
        why := pg_catalog.format('Key "%s" in scope "%s" has no live record.', key, scope);
    ELSIF rec_status OPERATOR(pg_catalog.=) 'in_progress' AND rec_token IS NOT NULL THEN
        why := pg_catalog.format('Key "%s" in scope "%s" is now leased with token %s, not %s.', key, scope, rec_token, idem_effect_started.token);
    ELSE
        why := pg_catalog.format('Key "%s" in scope "%s" is no longer in progress: its status is "%s".', key, scope, rec_status);
    END IF;
    RAISE EXCEPTION 'idem_effect_started: lease lost'
        USING ERRCODE = 'ID003', DETAIL = why,
              HINT = 'Another worker took the key over after the lease ran out, or the work was already finished; do not apply this worker''s result.';
END
$$;

-- idem_finish (src/lease.c).
-- portable: idem_finish
LANGUAGE plpgsql
AS $$
DECLARE
    now_ pg_catalog.timestamptz;
    rec_status pg_catalog.text;
    rec_token pg_catalog.int8;
    rec_live pg_catalog.bool;
    rec_no_lease pg_catalog.bool;
    why pg_catalog.text;
BEGIN
    IF scope IS NULL THEN
        RAISE EXCEPTION 'idem_finish: scope must not be null'
            USING ERRCODE = '22004', HINT = 'Use the empty string for the default scope.';
    END IF;
    IF pg_catalog.octet_length(scope) OPERATOR(pg_catalog.>) 128 THEN
        RAISE EXCEPTION 'idem_finish: scope is too long'
            USING ERRCODE = '22001',
                  DETAIL = pg_catalog.format('The scope is %s bytes; the limit is 128 bytes.', pg_catalog.octet_length(scope));
    END IF;
    IF key IS NULL THEN
        RAISE EXCEPTION 'idem_finish: key must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.octet_length(key) OPERATOR(pg_catalog.=) 0 THEN
        RAISE EXCEPTION 'idem_finish: key must not be empty' USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.octet_length(key) OPERATOR(pg_catalog.>) 1024 THEN
        RAISE EXCEPTION 'idem_finish: key is too long'
            USING ERRCODE = '22001',
                  DETAIL = pg_catalog.format('The key is %s bytes; the limit is 1024 bytes.', pg_catalog.octet_length(key)),
                  HINT = 'Hash long natural keys, for example with sha256(), and use the digest as the key.';
    END IF;
    IF token IS NULL THEN
        RAISE EXCEPTION 'idem_finish: token must not be null'
            USING ERRCODE = '22004', HINT = 'Pass the token idem_begin returned with outcome ''acquired''.';
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idem_finish() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    now_ := pg_catalog.clock_timestamp();

    UPDATE @extschema@.idem_records AS r
       SET status = 'completed', result = idem_finish.result, locked_until = NULL, updated_at = now_
     WHERE r.scope OPERATOR(pg_catalog.=) (idem_finish.scope COLLATE pg_catalog."C")
       AND r.key OPERATOR(pg_catalog.=) (idem_finish.key COLLATE pg_catalog."C")
       AND r.status OPERATOR(pg_catalog.=) 'in_progress'
       AND r.token OPERATOR(pg_catalog.=) idem_finish.token
       AND r.expires_at OPERATOR(pg_catalog.>) now_;
    IF FOUND THEN
        RETURN;
    END IF;
    -- Why the UPDATE matched nothing (src/lease.c, lease_lost).
    SELECT r.status, r.token, r.expires_at OPERATOR(pg_catalog.>) now_, r.lease IS NULL
      INTO rec_status, rec_token, rec_live, rec_no_lease
      FROM @extschema@.idem_records AS r
     WHERE r.scope OPERATOR(pg_catalog.=) (idem_finish.scope COLLATE pg_catalog."C")
       AND r.key OPERATOR(pg_catalog.=) (idem_finish.key COLLATE pg_catalog."C");
    IF NOT FOUND THEN
        RAISE EXCEPTION 'idem_finish: key was never begun'
            USING ERRCODE = 'ID002',
                  DETAIL = pg_catalog.format('Key "%s" in scope "%s" has no record.', key, scope),
                  HINT = 'Call idem_begin first and pass the token it returns; a record purged after its expiry is gone too.';
    END IF;
    IF NOT rec_live THEN
        why := pg_catalog.format('Key "%s" in scope "%s" has no live record.', key, scope);
    ELSIF rec_status OPERATOR(pg_catalog.=) 'in_progress' AND rec_token IS NOT NULL
          AND rec_token OPERATOR(pg_catalog.=) idem_finish.token AND NOT (true) AND rec_no_lease THEN
        RAISE EXCEPTION 'idem_finish: the record has no lease length, so one must be given'
            USING ERRCODE = '22004',
                  DETAIL = pg_catalog.format('Key "%s" in scope "%s" has a NULL lease column.', key, scope),
                  HINT = 'Pass the lease, as in idem_heartbeat(scope, key, token, ''5 minutes'').';
    ELSIF rec_status OPERATOR(pg_catalog.=) 'in_progress' AND rec_token IS NOT NULL THEN
        why := pg_catalog.format('Key "%s" in scope "%s" is now leased with token %s, not %s.', key, scope, rec_token, idem_finish.token);
    ELSE
        why := pg_catalog.format('Key "%s" in scope "%s" is no longer in progress: its status is "%s".', key, scope, rec_status);
    END IF;
    RAISE EXCEPTION 'idem_finish: lease lost'
        USING ERRCODE = 'ID003', DETAIL = why,
              HINT = 'Another worker took the key over after the lease ran out, or the work was already finished; do not apply this worker''s result.';
END
$$;

-- idem_fail (src/lease.c): idempotency.max_attempts is read as the C
-- reads its setting (0, the default, means unlimited).
-- portable: idem_fail
LANGUAGE plpgsql
AS $$
DECLARE
    now_ pg_catalog.timestamptz;
    setting pg_catalog.text;
    max_attempts pg_catalog.int4 := 0;
    rec_status pg_catalog.text;
    rec_token pg_catalog.int8;
    rec_live pg_catalog.bool;
    rec_no_lease pg_catalog.bool;
    why pg_catalog.text;
BEGIN
    IF scope IS NULL THEN
        RAISE EXCEPTION 'idem_fail: scope must not be null'
            USING ERRCODE = '22004', HINT = 'Use the empty string for the default scope.';
    END IF;
    IF pg_catalog.octet_length(scope) OPERATOR(pg_catalog.>) 128 THEN
        RAISE EXCEPTION 'idem_fail: scope is too long'
            USING ERRCODE = '22001',
                  DETAIL = pg_catalog.format('The scope is %s bytes; the limit is 128 bytes.', pg_catalog.octet_length(scope));
    END IF;
    IF key IS NULL THEN
        RAISE EXCEPTION 'idem_fail: key must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.octet_length(key) OPERATOR(pg_catalog.=) 0 THEN
        RAISE EXCEPTION 'idem_fail: key must not be empty' USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.octet_length(key) OPERATOR(pg_catalog.>) 1024 THEN
        RAISE EXCEPTION 'idem_fail: key is too long'
            USING ERRCODE = '22001',
                  DETAIL = pg_catalog.format('The key is %s bytes; the limit is 1024 bytes.', pg_catalog.octet_length(key)),
                  HINT = 'Hash long natural keys, for example with sha256(), and use the digest as the key.';
    END IF;
    IF token IS NULL THEN
        RAISE EXCEPTION 'idem_fail: token must not be null'
            USING ERRCODE = '22004', HINT = 'Pass the token idem_begin returned with outcome ''acquired''.';
    END IF;
    IF retryable IS NULL THEN
        RAISE EXCEPTION 'idem_fail: retryable must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idem_fail() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    now_ := pg_catalog.clock_timestamp();
    setting := pg_catalog.current_setting('idempotency.max_attempts', true);
    IF setting IS NOT NULL AND setting OPERATOR(pg_catalog.<>) '' THEN
        IF setting OPERATOR(pg_catalog.!~) '^\s*[0-9]{1,10}\s*$'
           OR setting::pg_catalog.int8 OPERATOR(pg_catalog.>) 2147483647 THEN
            RAISE EXCEPTION 'invalid value for parameter "idempotency.max_attempts": "%"', setting
                USING ERRCODE = '22023', HINT = 'Value must be an integer from 0 to 2147483647.';
        END IF;
        max_attempts := setting::pg_catalog.int4;
    END IF;

    UPDATE @extschema@.idem_records AS r
       SET status = CASE WHEN idem_fail.retryable AND (max_attempts OPERATOR(pg_catalog.=) 0
                              OR r.attempts OPERATOR(pg_catalog.<) max_attempts)
                    THEN 'retryable' ELSE 'failed' END,
           result = idem_fail.error, locked_until = NULL, updated_at = now_
     WHERE r.scope OPERATOR(pg_catalog.=) (idem_fail.scope COLLATE pg_catalog."C")
       AND r.key OPERATOR(pg_catalog.=) (idem_fail.key COLLATE pg_catalog."C")
       AND r.status OPERATOR(pg_catalog.=) 'in_progress'
       AND r.token OPERATOR(pg_catalog.=) idem_fail.token
       AND r.expires_at OPERATOR(pg_catalog.>) now_;
    IF FOUND THEN
        RETURN;
    END IF;
    -- Why the UPDATE matched nothing (src/lease.c, lease_lost).
    SELECT r.status, r.token, r.expires_at OPERATOR(pg_catalog.>) now_, r.lease IS NULL
      INTO rec_status, rec_token, rec_live, rec_no_lease
      FROM @extschema@.idem_records AS r
     WHERE r.scope OPERATOR(pg_catalog.=) (idem_fail.scope COLLATE pg_catalog."C")
       AND r.key OPERATOR(pg_catalog.=) (idem_fail.key COLLATE pg_catalog."C");
    IF NOT FOUND THEN
        RAISE EXCEPTION 'idem_fail: key was never begun'
            USING ERRCODE = 'ID002',
                  DETAIL = pg_catalog.format('Key "%s" in scope "%s" has no record.', key, scope),
                  HINT = 'Call idem_begin first and pass the token it returns; a record purged after its expiry is gone too.';
    END IF;
    IF NOT rec_live THEN
        why := pg_catalog.format('Key "%s" in scope "%s" has no live record.', key, scope);
    ELSIF rec_status OPERATOR(pg_catalog.=) 'in_progress' AND rec_token IS NOT NULL
          AND rec_token OPERATOR(pg_catalog.=) idem_fail.token AND NOT (true) AND rec_no_lease THEN
        RAISE EXCEPTION 'idem_fail: the record has no lease length, so one must be given'
            USING ERRCODE = '22004',
                  DETAIL = pg_catalog.format('Key "%s" in scope "%s" has a NULL lease column.', key, scope),
                  HINT = 'Pass the lease, as in idem_heartbeat(scope, key, token, ''5 minutes'').';
    ELSIF rec_status OPERATOR(pg_catalog.=) 'in_progress' AND rec_token IS NOT NULL THEN
        why := pg_catalog.format('Key "%s" in scope "%s" is now leased with token %s, not %s.', key, scope, rec_token, idem_fail.token);
    ELSE
        why := pg_catalog.format('Key "%s" in scope "%s" is no longer in progress: its status is "%s".', key, scope, rec_status);
    END IF;
    RAISE EXCEPTION 'idem_fail: lease lost'
        USING ERRCODE = 'ID003', DETAIL = why,
              HINT = 'Another worker took the key over after the lease ran out, or the work was already finished; do not apply this worker''s result.';
END
$$;

-- idem_await (src/lease.c): polls with a fresh snapshot per look (READ
-- COMMITTED; a VOLATILE function takes one per statement), sleeping 1 ms
-- at first, doubling up to 100 ms, never past the deadline or the end of
-- the lease; holds no lock; pg_sleep is interruptible (statement_timeout,
-- cancel).
-- portable: idem_await
LANGUAGE plpgsql
AS $$
DECLARE
    start_ pg_catalog.timestamptz;
    deadline pg_catalog.timestamptz;
    now_ pg_catalog.timestamptz;
    rec @extschema@.idem_record;
    seen_start pg_catalog.timestamptz;
    nap_ms pg_catalog.float8 := 1;
    wait_ms pg_catalog.float8;
BEGIN
    IF scope IS NULL THEN
        RAISE EXCEPTION 'idem_await: scope must not be null'
            USING ERRCODE = '22004', HINT = 'Use the empty string for the default scope.';
    END IF;
    IF pg_catalog.octet_length(scope) OPERATOR(pg_catalog.>) 128 THEN
        RAISE EXCEPTION 'idem_await: scope is too long'
            USING ERRCODE = '22001',
                  DETAIL = pg_catalog.format('The scope is %s bytes; the limit is 128 bytes.', pg_catalog.octet_length(scope));
    END IF;
    IF key IS NULL THEN
        RAISE EXCEPTION 'idem_await: key must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.octet_length(key) OPERATOR(pg_catalog.=) 0 THEN
        RAISE EXCEPTION 'idem_await: key must not be empty' USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.octet_length(key) OPERATOR(pg_catalog.>) 1024 THEN
        RAISE EXCEPTION 'idem_await: key is too long'
            USING ERRCODE = '22001',
                  DETAIL = pg_catalog.format('The key is %s bytes; the limit is 1024 bytes.', pg_catalog.octet_length(key)),
                  HINT = 'Hash long natural keys, for example with sha256(), and use the digest as the key.';
    END IF;
    IF timeout IS NULL THEN
        RAISE EXCEPTION 'idem_await: timeout must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed'
       AND pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read uncommitted' THEN
        RAISE EXCEPTION 'idem_await: cannot wait in a REPEATABLE READ or SERIALIZABLE transaction'
            USING ERRCODE = '25000',
                  DETAIL = 'The transaction snapshot would never show the record change.',
                  HINT = 'Call idem_await in autocommit or in a READ COMMITTED transaction.';
    END IF;
    start_ := pg_catalog.clock_timestamp();
    IF pg_catalog.date_part('year', timeout) OPERATOR(pg_catalog.=) 0
       AND pg_catalog.date_part('month', timeout) OPERATOR(pg_catalog.=) 0
       AND pg_catalog.date_part('day', timeout) OPERATOR(pg_catalog.=) 0
       AND pg_catalog.date_part('hour', timeout) OPERATOR(pg_catalog.=) 0
       AND pg_catalog.date_part('minute', timeout) OPERATOR(pg_catalog.=) 0
       AND pg_catalog.date_part('second', timeout) OPERATOR(pg_catalog.=) 0 THEN
        deadline := start_;
    ELSE
        IF pg_catalog.abs(pg_catalog.date_part('year', timeout)) OPERATOR(pg_catalog.<) 1000
           AND pg_catalog.abs(pg_catalog.date_part('day', timeout)) OPERATOR(pg_catalog.<) 300000
           AND pg_catalog.abs(pg_catalog.date_part('hour', timeout)) OPERATOR(pg_catalog.<) 7000000 THEN
            deadline := start_ OPERATOR(pg_catalog.+) timeout;
        ELSE
            BEGIN
                deadline := start_ OPERATOR(pg_catalog.+) timeout;
            EXCEPTION WHEN datetime_field_overflow THEN
                RAISE EXCEPTION 'idem_await: timeout is out of range'
                    USING ERRCODE = '22023',
                          DETAIL = pg_catalog.format('The timeout given was %s; the resulting time is outside the range of timestamptz.', timeout);
            END;
        END IF;
        IF deadline OPERATOR(pg_catalog.<=) start_ THEN
            RAISE EXCEPTION 'idem_await: timeout must be positive'
                USING ERRCODE = '22023', DETAIL = pg_catalog.format('The timeout given was %s.', timeout);
        END IF;
    END IF;

    LOOP
        now_ := pg_catalog.clock_timestamp();
        SELECT r.scope, r.key, r.status, r.fingerprint, r.result, r.created_at, r.updated_at,
               r.expires_at, r.locked_until, r.token, r.attempts,
               r.owner_pid, r.owner_start, r.effect_started_at, r.effect_unknown_attempt
          INTO rec
          FROM @extschema@.idem_records AS r
         WHERE r.scope OPERATOR(pg_catalog.=) (idem_await.scope COLLATE pg_catalog."C")
           AND r.key OPERATOR(pg_catalog.=) (idem_await.key COLLATE pg_catalog."C")
           AND r.expires_at OPERATOR(pg_catalog.>) now_;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
        IF rec.status OPERATOR(pg_catalog.<>) 'in_progress' OR rec.locked_until IS NULL
           OR rec.locked_until OPERATOR(pg_catalog.<=) now_ OR now_ OPERATOR(pg_catalog.>=) deadline THEN
            RETURN rec;
        END IF;
        -- A lease bound to a session that is gone (as in idem_begin).
        IF rec.owner_pid IS NOT NULL AND rec.owner_start IS NOT NULL THEN
            PERFORM pg_catalog.pg_stat_clear_snapshot();
            SELECT a.backend_start INTO seen_start
              FROM pg_catalog.pg_stat_get_activity(rec.owner_pid) AS a;
            IF NOT FOUND OR seen_start OPERATOR(pg_catalog.<>) rec.owner_start THEN
                RETURN rec;
            END IF;
        END IF;
        -- Sleep until the next look, never past the deadline or the lease's end.
        wait_ms := LEAST(nap_ms,
                         pg_catalog.floor(pg_catalog.date_part('epoch',
                             LEAST(deadline, rec.locked_until) OPERATOR(pg_catalog.-) now_)
                             OPERATOR(pg_catalog.*) 1000) OPERATOR(pg_catalog.+) 1);
        nap_ms := LEAST(nap_ms OPERATOR(pg_catalog.*) 2, 100);
        PERFORM pg_catalog.pg_sleep(wait_ms OPERATOR(pg_catalog./) 1000);
    END LOOP;
END
$$;
