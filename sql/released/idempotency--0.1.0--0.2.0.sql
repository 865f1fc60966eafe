-- idempotency 0.1.0 -> 0.2.0: statistics (idem_stats, idem_stats_reset) and
-- the summary view idem_summary.  The same objects are in
-- sql/idempotency_stats.sql, the source of a fresh 0.2.0 install.

\echo Use "ALTER EXTENSION idempotency UPDATE TO '0.2.0'" to load this file. \quit

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
