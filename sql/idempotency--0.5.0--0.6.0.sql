-- idempotency 0.5.0 -> 0.6.0: hardening, round three; safe defaults.
-- The same objects are in the sql/idempotency*.sql sources of a fresh
-- 0.6.0 install.

\echo Use "ALTER EXTENSION idempotency UPDATE TO '0.6.0'" to load this file. \quit

-- maintenance: idem_maintain() purges the records and the outbox in one
-- call; idem_maintenance notes each run (idem_maintain and the background
-- worker); idem_purge_worker() and the view idem_health tell whether
-- anything purges the database, and what to do when nothing does.

-- When each part of the maintenance last ran and what it removed, written
-- by idem_maintain() and by the background worker's rounds, read by
-- idem_health.  One row per part; not dumped (a restored database has
-- not been purged yet).
CREATE TABLE @extschema@.idem_maintenance (
    part         pg_catalog.text COLLATE pg_catalog."C" NOT NULL,
    last_run     pg_catalog.timestamptz NOT NULL,
    last_removed pg_catalog.int8 NOT NULL,
    run_by       pg_catalog.text NOT NULL,
    CONSTRAINT idem_maintenance_pkey PRIMARY KEY (part),
    CONSTRAINT idem_maintenance_part_check CHECK
        (part OPERATOR(pg_catalog.=) ANY (ARRAY['records', 'outbox']::pg_catalog.text[]))
);

COMMENT ON TABLE @extschema@.idem_maintenance IS
    'When the purge of the records and of the outbox last ran, and what it removed; written by idem_maintain and the background worker, read through idem_health';

REVOKE ALL ON TABLE @extschema@.idem_maintenance FROM PUBLIC;
GRANT SELECT ON TABLE @extschema@.idem_maintenance TO PUBLIC;

-- Everything the extension stores that expires, in one call: the expired
-- records (idem_purge) and the outbox messages past their retention that
-- every consumer group acknowledged (idem_outbox_purge), up to batch_size
-- each; notes the run in idem_maintenance.  What a scheduler (pg_cron)
-- calls where no background worker runs.  Not public: run by the
-- extension's owner (or a role granted the privileges of both purges and
-- this function).
CREATE FUNCTION @extschema@.idem_maintain(
    batch_size pg_catalog.int4 DEFAULT 10000,
    OUT records pg_catalog.int8,
    OUT outbox pg_catalog.int8)
RETURNS record
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    who pg_catalog.text := 'idem_maintain() by ' OPERATOR(pg_catalog.||) pg_catalog.quote_ident(current_user::pg_catalog.text);
BEGIN
    IF idem_maintain.batch_size IS NULL THEN
        RAISE EXCEPTION 'idem_maintain: batch_size must not be null' USING ERRCODE = '22004';
    END IF;
    records := @extschema@.idem_purge(idem_maintain.batch_size);
    INSERT INTO @extschema@.idem_maintenance AS m (part, last_run, last_removed, run_by)
    VALUES ('records'::pg_catalog.text, pg_catalog.clock_timestamp(), records, who)
    ON CONFLICT (part) DO UPDATE
       SET last_run = excluded.last_run, last_removed = excluded.last_removed, run_by = excluded.run_by;
    outbox := @extschema@.idem_outbox_purge(idem_maintain.batch_size);
    INSERT INTO @extschema@.idem_maintenance AS m (part, last_run, last_removed, run_by)
    VALUES ('outbox'::pg_catalog.text, pg_catalog.clock_timestamp(), outbox, who)
    ON CONFLICT (part) DO UPDATE
       SET last_run = excluded.last_run, last_removed = excluded.last_removed, run_by = excluded.run_by;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_maintain(pg_catalog.int4) IS
    'Purge up to batch_size expired records and up to batch_size acknowledged outbox messages past their retention, and note the run for idem_health; what to schedule where no background worker runs';

REVOKE ALL ON FUNCTION @extschema@.idem_maintain(pg_catalog.int4) FROM PUBLIC;

-- Whether the background worker purges the current database: 'on',
-- 'paused' (idempotency.purge_naptime = 0), 'off' (not listed in
-- idempotency.purge_databases), 'not preloaded' (the library is not in
-- shared_preload_libraries), or 'portable' (the portable edition has no
-- worker).
CREATE FUNCTION @extschema@.idem_purge_worker()
RETURNS pg_catalog.text
AS 'MODULE_PATHNAME', 'idem_purge_worker'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.idem_purge_worker() IS
    'Whether a background worker purges this database: on, paused, off, not preloaded, or portable (no worker in the portable edition)';

-- One row per part that expires (records, outbox): when it was last
-- purged and by what, how many rows are past their expiry or retention,
-- what purges it (the background worker, a pg_cron job of the caller's
-- that calls idem_maintain, idem_purge or idem_outbox_purge, or nothing),
-- whether that is all right, and what to do when it is not.  Counts need
-- SELECT on the part's table (NULL without); pg_cron shows each role its
-- own jobs only.  Work: two index range scans, one row of cron.job and of
-- cron.job_run_details per part.
CREATE FUNCTION @extschema@.idem_health(
    OUT part pg_catalog.text,
    OUT last_purged pg_catalog.timestamptz,
    OUT last_removed pg_catalog.int8,
    OUT purged_by pg_catalog.text,
    OUT waiting pg_catalog.int8,
    OUT purger pg_catalog.text,
    OUT ok pg_catalog.bool,
    OUT hint pg_catalog.text)
RETURNS SETOF record
LANGUAGE plpgsql VOLATILE STRICT PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp pg_catalog.text := '@extschema@';
    worker pg_catalog.text := @extschema@.idem_purge_worker();
    listed pg_catalog.text := pg_catalog.current_setting('idempotency.purge_databases', true);
    job_id pg_catalog.int8;
    job_name pg_catalog.text;
    job_command pg_catalog.text;
    job_records pg_catalog.bool;
    job_outbox pg_catalog.bool;
    job_status pg_catalog.text;
    job_message pg_catalog.text;
    cron_visible pg_catalog.bool := CASE
        WHEN pg_catalog.to_regnamespace('cron') IS NULL THEN false
        WHEN NOT pg_catalog.has_schema_privilege('cron', 'USAGE') THEN false
        WHEN pg_catalog.to_regclass('cron.job') IS NULL
          OR pg_catalog.to_regclass('cron.job_run_details') IS NULL THEN false
        ELSE pg_catalog.has_table_privilege('cron.job', 'SELECT')
         AND pg_catalog.has_table_privilege('cron.job_run_details', 'SELECT') END;
    schedule pg_catalog.text;
    p pg_catalog.text;
BEGIN
    schedule := pg_catalog.format('schedule SELECT %s.idem_maintain() every minute with pg_cron', nsp);
    FOREACH p IN ARRAY ARRAY['records', 'outbox']::pg_catalog.text[] LOOP
        part := p;
        SELECT m.last_run, m.last_removed, m.run_by INTO last_purged, last_removed, purged_by
          FROM @extschema@.idem_maintenance m WHERE m.part OPERATOR(pg_catalog.=) p;
        IF NOT FOUND THEN
            last_purged := NULL; last_removed := NULL; purged_by := NULL;
        END IF;
        waiting := NULL;
        IF p OPERATOR(pg_catalog.=) 'records' THEN
            IF pg_catalog.has_table_privilege('@extschema@.idem_records', 'SELECT') THEN
                SELECT pg_catalog.count(*) INTO waiting FROM @extschema@.idem_records r
                 WHERE r.expires_at OPERATOR(pg_catalog.<) pg_catalog.clock_timestamp();
            END IF;
        ELSIF pg_catalog.has_table_privilege('@extschema@.idem_outbox', 'SELECT') THEN
            SELECT pg_catalog.count(*) INTO waiting FROM @extschema@.idem_outbox o
              LEFT JOIN @extschema@.idem_outbox_topics t ON t.topic OPERATOR(pg_catalog.=) o.topic
             WHERE o.created_at OPERATOR(pg_catalog.<)
                   (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) COALESCE(t.retention, '7 days'::pg_catalog.interval));
        END IF;

        -- A pg_cron job in this database that purges this part.
        job_id := NULL; job_name := NULL; job_command := NULL; job_status := NULL; job_message := NULL;
        job_records := false; job_outbox := false;
        IF worker IS DISTINCT FROM 'on' AND cron_visible THEN
            EXECUTE $q$
                SELECT j.jobid::pg_catalog.int8, j.jobname::pg_catalog.text, j.command::pg_catalog.text,
                       j.command ~ 'idem_maintain|idem_purge\M',
                       j.command ~ 'idem_maintain|idem_outbox_purge',
                       d.status::pg_catalog.text, d.return_message::pg_catalog.text
                  FROM cron.job j
                  LEFT JOIN LATERAL (
                       SELECT r.status, r.return_message FROM cron.job_run_details r
                        WHERE r.jobid OPERATOR(pg_catalog.=) j.jobid
                        ORDER BY r.runid DESC LIMIT 1) d ON true
                 WHERE j.active
                   AND j.database OPERATOR(pg_catalog.=) pg_catalog.current_database()
                   AND j.command ~ 'idem_(maintain|purge|outbox_purge)'
                 ORDER BY (j.command ~ 'idem_maintain') DESC, j.jobid
                 LIMIT 1 $q$
              INTO job_id, job_name, job_command, job_records, job_outbox, job_status, job_message;
        END IF;

        IF worker OPERATOR(pg_catalog.=) 'on' THEN
            purger := 'background worker';
            ok := true;
            hint := NULL;
        ELSIF job_id IS NOT NULL AND (CASE WHEN p OPERATOR(pg_catalog.=) 'records' THEN job_records ELSE job_outbox END) THEN
            purger := pg_catalog.format('pg_cron job %s: %s', COALESCE(job_name, job_id::pg_catalog.text), job_command);
            ok := job_status IS DISTINCT FROM 'failed';
            hint := CASE WHEN ok THEN NULL ELSE pg_catalog.format(
                'The last run of the pg_cron job failed: %s. Fix its command (%s), under the same job name.',
                COALESCE(pg_catalog.rtrim(job_message, E'\n'), 'no message'), schedule) END;
        ELSE
            purger := 'none';
            ok := false;
            IF job_id IS NOT NULL THEN
                hint := pg_catalog.format('The pg_cron job %s purges the records only (%s): %s instead, which purges the outbox too.',
                    COALESCE(job_name, job_id::pg_catalog.text), job_command, schedule);
            ELSIF worker OPERATOR(pg_catalog.=) 'portable' THEN
                hint := pg_catalog.format('The portable edition has no background worker: %s, as the extension''s owner (docs/managed.md).', schedule);
            ELSIF worker OPERATOR(pg_catalog.=) 'not preloaded' AND COALESCE(listed, '') OPERATOR(pg_catalog.<>) '' THEN
                hint := pg_catalog.format('idempotency.purge_databases is set (%s), but idempotency is not in shared_preload_libraries, so no worker runs: add it there and restart, or %s.', listed, schedule);
            ELSIF worker OPERATOR(pg_catalog.=) 'paused' THEN
                hint := 'idempotency.purge_naptime is 0, which stops the background worker: set it above 0 and reload.';
            ELSE
                hint := pg_catalog.format('Nothing purges this database: list it in idempotency.purge_databases (with idempotency in shared_preload_libraries) and restart, or %s.', schedule);
            END IF;
            IF NOT cron_visible AND pg_catalog.to_regnamespace('cron') IS NOT NULL THEN
                hint := hint OPERATOR(pg_catalog.||) ' (This role cannot read cron.job, so a pg_cron job is not seen.)';
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_health() IS
    'Per part (records, outbox): when it was last purged, rows past their expiry waiting, what purges it and whether that is all right, with a hint when not; read through the idem_health view';

GRANT EXECUTE ON FUNCTION @extschema@.idem_health() TO PUBLIC;

CREATE VIEW @extschema@.idem_health AS
    SELECT h.part,
           h.last_purged,
           h.last_removed,
           h.purged_by,
           h.waiting,
           h.purger,
           h.ok,
           h.hint
      FROM @extschema@.idem_health() AS h;

COMMENT ON VIEW @extschema@.idem_health IS
    'Is anything keeping the tables bounded? Per part: last purge, rows waiting, the purger, ok, and what to do when not';

GRANT SELECT ON @extschema@.idem_health TO PUBLIC;

-- grant define: idem_grant(role, 'define') gives machines and guards
-- (idem_machines, idem_machine_define/_drop, idem_guard/_unguard);
-- idem_revoke takes them back.
CREATE OR REPLACE FUNCTION @extschema@.idem_grant(
    role pg_catalog.regrole,
    access pg_catalog.text DEFAULT 'write')
RETURNS pg_catalog.void
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp text := (SELECT n.nspname FROM pg_catalog.pg_extension e
                 JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace
                 WHERE e.extname OPERATOR(pg_catalog.=) 'idempotency');
BEGIN
    IF access IS DISTINCT FROM 'write' AND access IS DISTINCT FROM 'read'
       AND access IS DISTINCT FROM 'define' THEN
        RAISE EXCEPTION 'idem_grant: unknown access level "%"', access
            USING ERRCODE = '22023',
                  DETAIL = 'The access level is ''write'' (claims, leases, tokens, guarded tables), ''read'' (idem_lookup, idem_await) or ''define'' (''write'', and defining machines and guarding the role''s own tables).',
                  HINT = 'Call idem_grant(role), idem_grant(role, ''read'') or idem_grant(role, ''define'').';
    END IF;
    EXECUTE pg_catalog.format('GRANT USAGE ON SCHEMA %I TO %s', nsp, role);
    IF access OPERATOR(pg_catalog.=) 'read' THEN
        EXECUTE pg_catalog.format('GRANT SELECT ON TABLE %I.idem_records TO %s', nsp, role);
        RETURN;
    END IF;
    EXECUTE pg_catalog.format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE %I.idem_records TO %s', nsp, role);
    EXECUTE pg_catalog.format('GRANT USAGE ON SEQUENCE %I.idem_token_seq TO %s', nsp, role);
    EXECUTE pg_catalog.format('GRANT INSERT ON TABLE %I.idem_transition_log TO %s', nsp, role);
    EXECUTE pg_catalog.format('GRANT USAGE ON SEQUENCE %I.idem_transition_log_id_seq TO %s', nsp, role);
    EXECUTE pg_catalog.format('GRANT SELECT, INSERT, DELETE ON TABLE %I.idem_outbox TO %s', nsp, role);
    EXECUTE pg_catalog.format('GRANT USAGE ON SEQUENCE %I.idem_outbox_position_seq TO %s', nsp, role);
    EXECUTE pg_catalog.format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE %I.idem_outbox_subscriptions TO %s', nsp, role);
    EXECUTE pg_catalog.format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE %I.idem_outbox_deliveries TO %s', nsp, role);
    -- 'define': machines (idem_machines, whose triggers validate each
    -- write) and guards on tables the role owns (CREATE TRIGGER needs
    -- its TRIGGER privilege there).
    IF access OPERATOR(pg_catalog.=) 'define' THEN
        EXECUTE pg_catalog.format('GRANT INSERT, UPDATE, DELETE ON TABLE %I.idem_machines TO %s', nsp, role);
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %I.idem_machine_define(pg_catalog.text, pg_catalog.jsonb), %I.idem_machine_drop(pg_catalog.text) TO %s', nsp, nsp, role);
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %I.idem_guard(pg_catalog.regclass, pg_catalog.name, pg_catalog.text, pg_catalog.name, pg_catalog.bool), %I.idem_unguard(pg_catalog.regclass, pg_catalog.name) TO %s', nsp, nsp, role);
    END IF;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_grant(pg_catalog.regrole, pg_catalog.text) IS
    'Grant role what an application needs: ''write'' (default) for claims, leases, tokens and guarded tables with history, ''read'' for idem_lookup and idem_await, ''define'' for ''write'' and defining machines and guards';

CREATE OR REPLACE FUNCTION @extschema@.idem_revoke(role pg_catalog.regrole)
RETURNS pg_catalog.void
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp text := (SELECT n.nspname FROM pg_catalog.pg_extension e
                 JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace
                 WHERE e.extname OPERATOR(pg_catalog.=) 'idempotency');
BEGIN
    EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %I.idem_records FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON SEQUENCE %I.idem_token_seq FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %I.idem_transition_log FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON SEQUENCE %I.idem_transition_log_id_seq FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %I.idem_outbox FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON SEQUENCE %I.idem_outbox_position_seq FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %I.idem_outbox_subscriptions FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %I.idem_outbox_deliveries FROM %s', nsp, role);
    -- 'define' (SELECT on idem_machines stays PUBLIC's).
    EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %I.idem_machines FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %I.idem_machine_define(pg_catalog.text, pg_catalog.jsonb), %I.idem_machine_drop(pg_catalog.text) FROM %s', nsp, nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %I.idem_guard(pg_catalog.regclass, pg_catalog.name, pg_catalog.text, pg_catalog.name, pg_catalog.bool), %I.idem_unguard(pg_catalog.regclass, pg_catalog.name) FROM %s', nsp, nsp, role);
END
$$;

COMMENT ON FUNCTION @extschema@.idem_revoke(pg_catalog.regrole) IS
    'Take back what idem_grant gave role (the schema''s USAGE stays: other objects may need it)';

REVOKE ALL ON FUNCTION @extschema@.idem_grant(pg_catalog.regrole, pg_catalog.text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_revoke(pg_catalog.regrole) FROM PUBLIC;

-- citus hint: idem_distribute without Citus says what to do where Citus
-- cannot be loaded (a managed service), not only how to preload it.
CREATE OR REPLACE FUNCTION @extschema@.idem_distribute(
    shard_key pg_catalog.regtype DEFAULT NULL,
    colocate_with pg_catalog.regclass DEFAULT NULL,
    delegate pg_catalog.bool DEFAULT true)
RETURNS pg_catalog.void
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp text := (SELECT n.nspname FROM pg_catalog.pg_extension e
                 JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace
                 WHERE e.extname OPERATOR(pg_catalog.=) 'idempotency');
    records regclass;
    machines regclass;
    column_now text;
    type_now regtype;
    want text := 'key';
    ddl text;
    failed text;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension e
                   WHERE e.extname OPERATOR(pg_catalog.=) 'citus') THEN
        RAISE EXCEPTION 'idem_distribute: the citus extension is not installed in this database'
            USING ERRCODE = '55000',
                  DETAIL = 'idem_distribute makes idem_records a Citus distributed table and idem_machines a Citus reference table.',
                  HINT = 'Without Citus (a managed service such as RDS or Cloud SQL cannot load it), do not call idem_distribute: idem_records works as an ordinary table. On a server you run: add citus to shared_preload_libraries (before idempotency), CREATE EXTENSION citus on every node and add the workers with citus_add_node (docs/citus.md).';
    END IF;
    records := pg_catalog.format('%I.idem_records', nsp)::pg_catalog.regclass;
    machines := pg_catalog.format('%I.idem_machines', nsp)::pg_catalog.regclass;

    SELECT pg_catalog.column_to_column_name(p.logicalrelid, p.partkey) INTO column_now
    FROM pg_catalog.pg_dist_partition p WHERE p.logicalrelid OPERATOR(pg_catalog.=) records;
    IF column_now IS NOT NULL THEN
        SELECT a.atttypid::pg_catalog.regtype INTO type_now FROM pg_catalog.pg_attribute a
        WHERE a.attrelid OPERATOR(pg_catalog.=) records AND a.attname OPERATOR(pg_catalog.=) column_now;
        IF idem_distribute.shard_key IS NOT NULL THEN
            want := 'shard_key';
        END IF;
        IF column_now OPERATOR(pg_catalog.<>) want
           OR (idem_distribute.shard_key IS NOT NULL AND type_now IS DISTINCT FROM idem_distribute.shard_key) THEN
            RAISE EXCEPTION 'idem_distribute: idem_records is distributed by % already', column_now
                USING ERRCODE = '55000',
                      DETAIL = pg_catalog.format('Its distribution column is %s of type %s; the records cannot be moved to another distribution column here.', column_now, type_now),
                      HINT = 'Call idem_distribute with the arguments it was first called with, or empty idem_records, undistribute it with undistribute_table and call idem_distribute again.';
        END IF;
    ELSIF idem_distribute.shard_key IS NULL THEN
        PERFORM pg_catalog.create_distributed_table(records, 'key',
            colocate_with => COALESCE(idem_distribute.colocate_with::pg_catalog.text, 'default'));
        IF idem_distribute.delegate THEN
            PERFORM pg_catalog.create_distributed_function(
                pg_catalog.format('%I.idem_claim(text,text,interval,text)', nsp)::pg_catalog.regprocedure,
                '$2', colocate_with => records::pg_catalog.text);
            PERFORM pg_catalog.create_distributed_function(
                pg_catalog.format('%I.idem_claim(text)', nsp)::pg_catalog.regprocedure,
                '$1', colocate_with => records::pg_catalog.text);
        END IF;
    ELSE
        IF EXISTS (SELECT FROM @extschema@.idem_records) THEN
            RAISE EXCEPTION 'idem_distribute: idem_records is not empty'
                USING ERRCODE = '55000',
                      DETAIL = 'A shard key can be added only to empty records: the existing records have no value for it.',
                      HINT = 'Distribute the records before the first claim, or release or purge them first.';
        END IF;
        -- The same change on every node: each node's idem_records (from its
        -- own CREATE EXTENSION) becomes a shell of the distributed table,
        -- and Citus plans a statement on a node against its shell.  The
        -- command does nothing where the column exists, so a second call
        -- after a failure finishes the job.
        ddl := pg_catalog.format(
            'DO $d$ BEGIN IF NOT EXISTS (SELECT FROM pg_catalog.pg_attribute'
            ' WHERE attrelid = %L::pg_catalog.regclass AND attname = ''shard_key'' AND NOT attisdropped) THEN'
            ' ALTER TABLE %I.idem_records ADD COLUMN shard_key %s NOT NULL,'
            ' DROP CONSTRAINT idem_records_pkey,'
            ' ADD CONSTRAINT idem_records_pkey PRIMARY KEY (shard_key, scope, key); END IF; END $d$',
            records::pg_catalog.text, nsp, idem_distribute.shard_key);
        EXECUTE ddl;
        SELECT pg_catalog.string_agg(r.nodename OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) r.nodeport
                                     OPERATOR(pg_catalog.||) ': ' OPERATOR(pg_catalog.||) r.result, '; ')
          INTO failed
          FROM pg_catalog.run_command_on_workers(ddl) r WHERE NOT r.success;
        IF failed IS NOT NULL THEN
            RAISE EXCEPTION 'idem_distribute: could not add the shard key on every worker'
                USING ERRCODE = '55000',
                      DETAIL = pg_catalog.format('Failed: %s.', failed),
                      HINT = 'Make sure every worker has the idempotency extension (CREATE EXTENSION idempotency) and call idem_distribute again.';
        END IF;
        PERFORM pg_catalog.create_distributed_table(records, 'shard_key',
            colocate_with => COALESCE(idem_distribute.colocate_with::pg_catalog.text, 'default'));
    END IF;

    IF NOT EXISTS (SELECT FROM pg_catalog.pg_dist_partition p
                   WHERE p.logicalrelid OPERATOR(pg_catalog.=) machines) THEN
        -- Its triggers (validation, cache invalidation) go to every
        -- placement: Citus copies triggers only when this is on.
        PERFORM pg_catalog.set_config('citus.enable_unsafe_triggers', 'on', true);
        PERFORM pg_catalog.create_reference_table(machines);
    END IF;
END
$$;
