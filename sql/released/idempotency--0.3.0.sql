-- idempotency: exactly-once helpers for PostgreSQL.
--
-- This file is the core of the install script; the Makefile joins it with
-- the other sources listed in SQL_SOURCES into idempotency--VERSION.sql.
-- Every object is created in @extschema@; every function is SECURITY
-- INVOKER (the default), so privileges and row-level security on
-- idem_records apply to callers exactly as to direct SQL.

\echo Use "CREATE EXTENSION idempotency" to load this file. \quit

--------------------------------------------------------------------------
-- Records
--------------------------------------------------------------------------

-- The status names a record may have: the CHECK constraint below calls
-- this C function rather than comparing with an array constant, because
-- PostgreSQL re-reads a CHECK's stored expression at every INSERT and
-- UPDATE, and the array's is twenty times longer than a function call's.
CREATE FUNCTION @extschema@.idem_status_is_valid(status pg_catalog.text)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'idem_status_is_valid'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.idem_status_is_valid(pg_catalog.text) IS
    'True for the status names of idem_records: claimed, in_progress, completed, failed, retryable, issued, consumed';

CREATE TABLE @extschema@.idem_records (
    scope        pg_catalog.text COLLATE pg_catalog."C" NOT NULL,
    key          pg_catalog.text COLLATE pg_catalog."C" NOT NULL,
    status       pg_catalog.text COLLATE pg_catalog."C" NOT NULL,
    fingerprint  pg_catalog.bytea,
    result       pg_catalog.jsonb,
    created_at   pg_catalog.timestamptz NOT NULL,
    updated_at   pg_catalog.timestamptz NOT NULL,
    expires_at   pg_catalog.timestamptz NOT NULL,
    locked_until pg_catalog.timestamptz,
    token        pg_catalog.int8,
    attempts     pg_catalog.int4 NOT NULL DEFAULT 0,
    lease        pg_catalog.interval,
    CONSTRAINT idem_records_pkey PRIMARY KEY (scope, key),
    CONSTRAINT idem_records_status_check CHECK (@extschema@.idem_status_is_valid(status))
);

CREATE INDEX idem_records_expires_at_idx
    ON @extschema@.idem_records (expires_at);

COMMENT ON TABLE @extschema@.idem_records IS
    'Idempotency records, one per (scope, key); written by idem_claim and idem_begin';

REVOKE ALL ON TABLE @extschema@.idem_records FROM PUBLIC;

SELECT pg_catalog.pg_extension_config_dump('@extschema@.idem_records', '');

-- Fencing tokens of leases (idem_begin): one sequence, so a token is
-- greater than every token issued before it, for any key, even across
-- expiry and purge.  Dumped, so a restore never reissues a token.
CREATE SEQUENCE @extschema@.idem_token_seq AS pg_catalog.int8 MINVALUE 1 NO CYCLE;

COMMENT ON SEQUENCE @extschema@.idem_token_seq IS
    'Fencing tokens for idem_begin leases';

REVOKE ALL ON SEQUENCE @extschema@.idem_token_seq FROM PUBLIC;

SELECT pg_catalog.pg_extension_config_dump('@extschema@.idem_token_seq', '');

-- The public shape of a record, returned by idem_lookup and idem_await.
CREATE TYPE @extschema@.idem_record AS (
    scope        pg_catalog.text,
    key          pg_catalog.text,
    status       pg_catalog.text,
    fingerprint  pg_catalog.bytea,
    result       pg_catalog.jsonb,
    created_at   pg_catalog.timestamptz,
    updated_at   pg_catalog.timestamptz,
    expires_at   pg_catalog.timestamptz,
    locked_until pg_catalog.timestamptz,
    token        pg_catalog.int8,
    attempts     pg_catalog.int4
);

COMMENT ON TYPE @extschema@.idem_record IS
    'An idempotency record as returned by idem_lookup and idem_await';

--------------------------------------------------------------------------
-- One-phase claims
--------------------------------------------------------------------------

CREATE FUNCTION @extschema@.idem_claim(key pg_catalog.text)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'idem_claim_default_scope'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_claim(pg_catalog.text) IS
    'Claim key in the default scope for this transaction; true when this transaction owns it, false for a duplicate';

CREATE FUNCTION @extschema@.idem_claim(
    scope pg_catalog.text,
    key pg_catalog.text,
    ttl pg_catalog.interval DEFAULT NULL,
    fingerprint pg_catalog.text DEFAULT NULL)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'idem_claim'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_claim(pg_catalog.text, pg_catalog.text, pg_catalog.interval, pg_catalog.text) IS
    'Claim (scope, key) for this transaction; true when this transaction owns it, false for a duplicate';

CREATE FUNCTION @extschema@.idem_complete(
    scope pg_catalog.text,
    key pg_catalog.text,
    result pg_catalog.jsonb)
RETURNS pg_catalog.void
AS 'MODULE_PATHNAME', 'idem_complete'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_complete(pg_catalog.text, pg_catalog.text, pg_catalog.jsonb) IS
    'Mark a claimed record completed and store its result for replay';

CREATE FUNCTION @extschema@.idem_lookup(
    scope pg_catalog.text,
    key pg_catalog.text)
RETURNS @extschema@.idem_record
AS 'MODULE_PATHNAME', 'idem_lookup'
LANGUAGE C STABLE CALLED ON NULL INPUT PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.idem_lookup(pg_catalog.text, pg_catalog.text) IS
    'The live record of (scope, key), or NULL when absent or expired';

CREATE FUNCTION @extschema@.idem_release(
    scope pg_catalog.text,
    key pg_catalog.text)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'idem_release'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_release(pg_catalog.text, pg_catalog.text) IS
    'Delete the record of (scope, key) so it can be claimed again; true when a live record was removed';

CREATE FUNCTION @extschema@.idem_purge(batch_size pg_catalog.int4 DEFAULT 10000)
RETURNS pg_catalog.int8
AS 'MODULE_PATHNAME', 'idem_purge'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_purge(pg_catalog.int4) IS
    'Delete up to batch_size expired records, skipping locked rows; returns the number removed';

--------------------------------------------------------------------------
-- Batch claims (src/batch.c)
--------------------------------------------------------------------------

CREATE FUNCTION @extschema@.idem_claim_many(
    scope pg_catalog.text,
    keys pg_catalog.text[],
    ttl pg_catalog.interval DEFAULT NULL)
RETURNS TABLE (key pg_catalog.text, claimed pg_catalog.bool)
AS 'MODULE_PATHNAME', 'idem_claim_many'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
ROWS 100;

COMMENT ON FUNCTION @extschema@.idem_claim_many(pg_catalog.text, pg_catalog.text[], pg_catalog.interval) IS
    'Claim every key of the array in scope for this transaction, as idem_claim would; one row per element, in array order, claimed true only at the first occurrence of a key this call claimed';

--------------------------------------------------------------------------
-- Two-phase records with leases and fencing tokens
--------------------------------------------------------------------------

CREATE FUNCTION @extschema@.idem_begin(
    scope pg_catalog.text,
    key pg_catalog.text,
    lease pg_catalog.interval DEFAULT '5 minutes',
    ttl pg_catalog.interval DEFAULT NULL,
    fingerprint pg_catalog.text DEFAULT NULL,
    OUT outcome pg_catalog.text,
    OUT token pg_catalog.int8,
    OUT result pg_catalog.jsonb)
RETURNS record
AS 'MODULE_PATHNAME', 'idem_begin'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_begin(pg_catalog.text, pg_catalog.text, pg_catalog.interval, pg_catalog.interval, pg_catalog.text) IS
    'Start work on (scope, key) under a lease: acquired (with a fencing token), in_progress, completed or failed';

CREATE FUNCTION @extschema@.idem_heartbeat(
    scope pg_catalog.text,
    key pg_catalog.text,
    token pg_catalog.int8,
    lease pg_catalog.interval DEFAULT NULL)
RETURNS pg_catalog.timestamptz
AS 'MODULE_PATHNAME', 'idem_heartbeat'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_heartbeat(pg_catalog.text, pg_catalog.text, pg_catalog.int8, pg_catalog.interval) IS
    'Extend the lease held with token; returns the new end of the lease';

CREATE FUNCTION @extschema@.idem_finish(
    scope pg_catalog.text,
    key pg_catalog.text,
    token pg_catalog.int8,
    result pg_catalog.jsonb DEFAULT NULL)
RETURNS pg_catalog.void
AS 'MODULE_PATHNAME', 'idem_finish'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_finish(pg_catalog.text, pg_catalog.text, pg_catalog.int8, pg_catalog.jsonb) IS
    'Complete the leased record held with token and store its result for replay';

CREATE FUNCTION @extschema@.idem_fail(
    scope pg_catalog.text,
    key pg_catalog.text,
    token pg_catalog.int8,
    error pg_catalog.jsonb DEFAULT NULL,
    retryable pg_catalog.bool DEFAULT true)
RETURNS pg_catalog.void
AS 'MODULE_PATHNAME', 'idem_fail'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_fail(pg_catalog.text, pg_catalog.text, pg_catalog.int8, pg_catalog.jsonb, pg_catalog.bool) IS
    'End the lease held with token with a failure: retryable frees the key, otherwise the error is kept';

CREATE FUNCTION @extschema@.idem_await(
    scope pg_catalog.text,
    key pg_catalog.text,
    timeout pg_catalog.interval DEFAULT '30 seconds')
RETURNS @extschema@.idem_record
AS 'MODULE_PATHNAME', 'idem_await'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.idem_await(pg_catalog.text, pg_catalog.text, pg_catalog.interval) IS
    'Wait without locks until (scope, key) is no longer in progress, its lease runs out, or timeout passes; returns the record';

--------------------------------------------------------------------------
-- State machines and table guards (src/machine.c, src/guard.c)
--------------------------------------------------------------------------

-- Definitions.  Written by idem_machine_define / idem_machine_drop; a row
-- trigger validates direct writes too, and a statement trigger tells every
-- backend to drop its compiled copies.  Readable by everybody (the
-- definitions are no secret, and every caller of idem_can_transition or of
-- a guarded table needs them); writable only through grants.
CREATE TABLE @extschema@.idem_machines (
    machine    pg_catalog.text COLLATE pg_catalog."C" NOT NULL,
    definition pg_catalog.jsonb NOT NULL,
    updated_at pg_catalog.timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT idem_machines_pkey PRIMARY KEY (machine),
    CONSTRAINT idem_machines_machine_check CHECK
        (pg_catalog.octet_length(machine) OPERATOR(pg_catalog.>=) 1
         AND pg_catalog.octet_length(machine) OPERATOR(pg_catalog.<=) 63)
);

COMMENT ON TABLE @extschema@.idem_machines IS
    'State machine definitions, one per name; written by idem_machine_define and idem_machine_drop';

REVOKE ALL ON TABLE @extschema@.idem_machines FROM PUBLIC;
GRANT SELECT ON TABLE @extschema@.idem_machines TO PUBLIC;

SELECT pg_catalog.pg_extension_config_dump('@extschema@.idem_machines', '');

CREATE FUNCTION @extschema@.idem_machines_trigger()
RETURNS trigger
AS 'MODULE_PATHNAME', 'idem_machines_trigger'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_machines_trigger() IS
    'Trigger on idem_machines: validates each written definition and invalidates every session''s cache of compiled machines';

CREATE TRIGGER idem_machines_validate
    BEFORE INSERT OR UPDATE ON @extschema@.idem_machines
    FOR EACH ROW EXECUTE FUNCTION @extschema@.idem_machines_trigger();

CREATE TRIGGER idem_machines_invalidate
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON @extschema@.idem_machines
    FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.idem_machines_trigger();

-- History of guarded status columns (idem_guard(..., history => true)).
CREATE TABLE @extschema@.idem_transition_log (
    id            pg_catalog.int8 GENERATED BY DEFAULT AS IDENTITY
                  (SEQUENCE NAME @extschema@.idem_transition_log_id_seq),
    table_name    pg_catalog.text NOT NULL,
    status_column pg_catalog.text NOT NULL,
    row_key       pg_catalog.jsonb,
    from_state    pg_catalog.text,
    to_state      pg_catalog.text,
    changed_at    pg_catalog.timestamptz NOT NULL DEFAULT pg_catalog.now(),
    xact_id       pg_catalog.xid8 NOT NULL,
    CONSTRAINT idem_transition_log_pkey PRIMARY KEY (id)
);

CREATE INDEX idem_transition_log_row_idx
    ON @extschema@.idem_transition_log (table_name, row_key);

COMMENT ON TABLE @extschema@.idem_transition_log IS
    'Status changes of tables guarded with history: table, primary key of the row, from, to, when, which transaction';
COMMENT ON COLUMN @extschema@.idem_transition_log.table_name IS
    'Schema-qualified name of the table at the time of the change';
COMMENT ON COLUMN @extschema@.idem_transition_log.row_key IS
    'Primary key of the row as a jsonb object {column: value}; NULL when the table has no primary key';
COMMENT ON COLUMN @extschema@.idem_transition_log.from_state IS
    'Status before the change; NULL for an inserted row';
COMMENT ON COLUMN @extschema@.idem_transition_log.changed_at IS
    'Start of the transaction that made the change (now())';
COMMENT ON COLUMN @extschema@.idem_transition_log.xact_id IS
    'Top-level transaction id of the change, as pg_current_xact_id() returns it';

-- Writers of guarded tables with history need INSERT here and USAGE on
-- the sequence; readers need SELECT.  Nothing is public.
REVOKE ALL ON TABLE @extschema@.idem_transition_log FROM PUBLIC;
REVOKE ALL ON SEQUENCE @extschema@.idem_transition_log_id_seq FROM PUBLIC;

SELECT pg_catalog.pg_extension_config_dump('@extschema@.idem_transition_log', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.idem_transition_log_id_seq', '');

-- Defining machines

CREATE FUNCTION @extschema@.idem_machine_define(
    machine pg_catalog.text,
    definition pg_catalog.jsonb)
RETURNS pg_catalog.void
AS 'MODULE_PATHNAME', 'idem_machine_define'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_machine_define(pg_catalog.text, pg_catalog.jsonb) IS
    'Create or replace the state machine machine: {"initial": [states], "transitions": {state: [targets]}}';

CREATE FUNCTION @extschema@.idem_machine_drop(machine pg_catalog.text)
RETURNS pg_catalog.void
AS 'MODULE_PATHNAME', 'idem_machine_drop'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_machine_drop(pg_catalog.text) IS
    'Delete the state machine machine; refused while a guard uses it';

REVOKE ALL ON FUNCTION @extschema@.idem_machine_define(pg_catalog.text, pg_catalog.jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_machine_drop(pg_catalog.text) FROM PUBLIC;

-- Checking transitions (public: they only read definitions)

CREATE FUNCTION @extschema@.idem_can_transition(
    machine pg_catalog.text,
    from_state pg_catalog.text,
    to_state pg_catalog.text)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'idem_can_transition'
LANGUAGE C STABLE CALLED ON NULL INPUT PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.idem_can_transition(pg_catalog.text, pg_catalog.text, pg_catalog.text) IS
    'True exactly when machine declares the transition from_state -> to_state; false when either state is NULL';

CREATE FUNCTION @extschema@.idem_transition(
    machine pg_catalog.text,
    from_state pg_catalog.text,
    to_state pg_catalog.text)
RETURNS pg_catalog.text
AS 'MODULE_PATHNAME', 'idem_transition'
LANGUAGE C STABLE CALLED ON NULL INPUT PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.idem_transition(pg_catalog.text, pg_catalog.text, pg_catalog.text) IS
    'to_state when machine declares from_state -> to_state, from_state when they are equal; otherwise error ID004';

-- Guarding tables

-- The rule of a guard, used in the WHEN condition of its triggers; public
-- because every writer of a guarded table evaluates it.
CREATE FUNCTION @extschema@.idem_guard_allows(
    machine pg_catalog.text,
    old_status pg_catalog.text,
    new_status pg_catalog.text)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'idem_guard_allows'
LANGUAGE C STABLE CALLED ON NULL INPUT PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.idem_guard_allows(pg_catalog.text, pg_catalog.text, pg_catalog.text) IS
    'The rule a guard enforces: true when the status is unchanged, enters an initial state from NULL, or follows a declared transition';

CREATE FUNCTION @extschema@.idem_guard_trigger()
RETURNS trigger
AS 'MODULE_PATHNAME', 'idem_guard_trigger'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_guard_trigger() IS
    'Trigger installed by idem_guard: enforces a state machine on a status column';

CREATE FUNCTION @extschema@.idem_guard(
    tbl pg_catalog.regclass,
    status_column pg_catalog.name,
    machine pg_catalog.text,
    version_column pg_catalog.name DEFAULT NULL,
    history pg_catalog.bool DEFAULT false)
RETURNS pg_catalog.void
AS 'MODULE_PATHNAME', 'idem_guard'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_guard(pg_catalog.regclass, pg_catalog.name, pg_catalog.text, pg_catalog.name, pg_catalog.bool) IS
    'Enforce machine on tbl.status_column with a trigger; optionally increment version_column on each change and log changes to idem_transition_log';

CREATE FUNCTION @extschema@.idem_unguard(
    tbl pg_catalog.regclass,
    status_column pg_catalog.name)
RETURNS pg_catalog.void
AS 'MODULE_PATHNAME', 'idem_unguard'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_unguard(pg_catalog.regclass, pg_catalog.name) IS
    'Remove the guard that idem_guard installed on tbl.status_column';

REVOKE ALL ON FUNCTION @extschema@.idem_guard(pg_catalog.regclass, pg_catalog.name, pg_catalog.text, pg_catalog.name, pg_catalog.bool) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_unguard(pg_catalog.regclass, pg_catalog.name) FROM PUBLIC;
-- The trigger functions stay executable by PUBLIC: they can only run as
-- triggers, and a table owner allowed to call idem_guard needs EXECUTE on
-- idem_guard_trigger for CREATE TRIGGER.

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

--------------------------------------------------------------------------
-- One-time tokens (src/token.c)
--------------------------------------------------------------------------

CREATE FUNCTION @extschema@.idem_token_issue(
    scope pg_catalog.text,
    ttl pg_catalog.interval DEFAULT '10 minutes'::pg_catalog.interval)
RETURNS pg_catalog.text
AS 'MODULE_PATHNAME', 'idem_token_issue'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_token_issue(pg_catalog.text, pg_catalog.interval) IS
    'Issue a one-time token for scope, valid for ttl: 32 lowercase hexadecimal digits (128 random bits)';

CREATE FUNCTION @extschema@.idem_token_consume(
    scope pg_catalog.text,
    token pg_catalog.text)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'idem_token_consume'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_token_consume(pg_catalog.text, pg_catalog.text) IS
    'Use a one-time token of scope: true exactly once, false when unknown, expired, already used or issued for another scope';
