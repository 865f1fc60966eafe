
--------------------------------------------------------------------------
-- Statistics (src/stats.c) and the summary of the records table
--------------------------------------------------------------------------

-- Counters kept in shared memory since the last reset; needs the library
-- in shared_preload_libraries (otherwise 55000).  Read through the view
-- below.  Not public: scope names of every database are shown to roles
-- with pg_read_all_stats (pg_monitor has it), the caller's database only
-- to other roles that are granted access.
CREATE FUNCTION @extschema@.idem_stats(
    OUT dbid pg_catalog.oid,
    OUT scope pg_catalog.text,
    OUT claimed pg_catalog.int8,
    OUT duplicates pg_catalog.int8,
    OUT in_progress_conflicts pg_catalog.int8,
    OUT fingerprint_mismatches pg_catalog.int8,
    OUT takeovers pg_catalog.int8,
    OUT completed pg_catalog.int8,
    OUT failed pg_catalog.int8,
    OUT purged pg_catalog.int8,
    OUT owner_gone_takeovers pg_catalog.int8,
    OUT unknown_takeovers pg_catalog.int8,
    OUT stats_reset pg_catalog.timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'idem_stats'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.idem_stats() IS
    'Idempotency counters per (database, scope) since the last reset; read them through the idem_stats view';

REVOKE ALL ON FUNCTION @extschema@.idem_stats() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.idem_stats() TO pg_monitor;

CREATE VIEW @extschema@.idem_stats AS
    SELECT s.dbid,
           d.datname,
           s.scope,
           s.claimed,
           s.duplicates,
           s.in_progress_conflicts,
           s.fingerprint_mismatches,
           s.takeovers,
           s.owner_gone_takeovers,
           s.unknown_takeovers,
           s.completed,
           s.failed,
           s.purged,
           s.stats_reset
      FROM @extschema@.idem_stats() AS s
      LEFT JOIN pg_catalog.pg_database AS d
        ON d.oid OPERATOR(pg_catalog.=) s.dbid;

COMMENT ON VIEW @extschema@.idem_stats IS
    'Idempotency outcomes per database and scope since the last idem_stats_reset(); needs shared_preload_libraries';

REVOKE ALL ON @extschema@.idem_stats FROM PUBLIC;
GRANT SELECT ON @extschema@.idem_stats TO pg_monitor;

CREATE FUNCTION @extschema@.idem_stats_reset()
RETURNS pg_catalog.timestamptz
AS 'MODULE_PATHNAME', 'idem_stats_reset'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_stats_reset() IS
    'Reset every idem_stats counter of every database; returns the new stats_reset time';

-- Superusers only, unless granted.
REVOKE ALL ON FUNCTION @extschema@.idem_stats_reset() FROM PUBLIC;

-- The summary reads idem_records as the calling role (SECURITY INVOKER, as
-- every function of the extension): the caller needs SELECT on
-- idem_records, and row-level security policies apply.  (A view reading
-- the table directly would read it with the privileges of its owner.)
CREATE FUNCTION @extschema@.idem_summary(
    OUT scope pg_catalog.text,
    OUT records pg_catalog.int8,
    OUT claimed pg_catalog.int8,
    OUT in_progress pg_catalog.int8,
    OUT completed pg_catalog.int8,
    OUT failed pg_catalog.int8,
    OUT retryable pg_catalog.int8,
    OUT issued pg_catalog.int8,
    OUT consumed pg_catalog.int8,
    OUT oldest_created_at pg_catalog.timestamptz,
    OUT expired pg_catalog.int8,
    OUT stuck pg_catalog.int8)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'idem_summary'
LANGUAGE C STABLE STRICT PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.idem_summary() IS
    'Records per scope by status, oldest record, expired records awaiting purge, in-progress records whose lease ran out; read through the idem_summary view';

-- Public: what a caller sees is decided by its privileges on idem_records.
GRANT EXECUTE ON FUNCTION @extschema@.idem_summary() TO PUBLIC;

CREATE VIEW @extschema@.idem_summary AS
    SELECT s.scope,
           s.records,
           s.claimed,
           s.in_progress,
           s.completed,
           s.failed,
           s.retryable,
           s.issued,
           s.consumed,
           s.oldest_created_at,
           s.expired,
           s.stuck
      FROM @extschema@.idem_summary() AS s;

COMMENT ON VIEW @extschema@.idem_summary IS
    'Per scope: records by status, oldest record, expired records awaiting purge, stuck leases; needs SELECT on idem_records, honours row-level security';

-- Public: what a role sees is decided by its privileges on idem_records.
GRANT SELECT ON @extschema@.idem_summary TO PUBLIC;

--------------------------------------------------------------------------
-- Maintenance: one call that keeps every table bounded, and its health
--------------------------------------------------------------------------

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
