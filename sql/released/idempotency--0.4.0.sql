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
-- Citus (docs/citus.md)
--------------------------------------------------------------------------

-- Make the extension's tables Citus tables: idem_records distributed, and
-- idem_machines a reference table, copied to every node.
--   shard_key NULL (the default): idem_records is distributed by key; a
--     business table distributed by a text COLLATE "C" column holding the
--     key co-locates with it.
--   shard_key a type (bigint, integer, uuid, text...): idem_records gets
--     a column shard_key of that type, its primary key becomes
--     (shard_key, scope, key), and it is distributed by shard_key; the
--     F_at twins (sql/idempotency_shard.sql) then address records, so a
--     customer's claims sit on the shard of that customer's rows.  Only
--     while idem_records is empty: existing records have no shard key.
--   colocate_with: a distributed table to co-locate the records with (its
--     distribution column must have the type of key or shard_key), as
--     create_distributed_table's argument of that name; NULL: Citus's
--     default group.
--   delegate (records distributed by key only): make idem_claim a Citus
--     distributed function, distributed by its key argument, so that a
--     call outside a transaction block runs whole on the worker that holds
--     the key's shard (where the fast path writes into the shard) instead
--     of statement by statement from the coordinator.  Inside a
--     transaction block Citus does not delegate, and the call runs on the
--     coordinator as without it.  A delegated call uses the worker's
--     idempotency.* settings (docs/citus.md).
-- Run once on the coordinator, after CREATE EXTENSION citus and
-- idempotency on every node and citus_add_node for the workers; calling it
-- again with the same arguments does nothing.  The shard key column is
-- added on every node (their idem_records become the shells of the
-- distributed table).  idem_token_seq and idem_transition_log stay on the
-- coordinator (docs/citus.md says why).  Not public.
CREATE FUNCTION @extschema@.idem_distribute(
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
                  HINT = 'Add citus to shared_preload_libraries (before idempotency), run CREATE EXTENSION citus on every node and add the workers with citus_add_node; see docs/citus.md.';
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

COMMENT ON FUNCTION @extschema@.idem_distribute(pg_catalog.regtype, pg_catalog.regclass, pg_catalog.bool) IS
    'Citus: distribute idem_records (by key, or by a shard key of the given type for co-location), delegate idem_claim to the workers, and make idem_machines a reference table (docs/citus.md)';

REVOKE ALL ON FUNCTION @extschema@.idem_distribute(pg_catalog.regtype, pg_catalog.regclass, pg_catalog.bool) FROM PUBLIC;
--------------------------------------------------------------------------
-- Citus: cluster-wide statistics (docs/citus.md, docs/operations.md)
--------------------------------------------------------------------------

-- idem_stats is shared memory of one server; on a Citus cluster each node
-- counts the calls made there (through the coordinator: the coordinator).
-- idem_cluster_stats() collects the idem_stats view of every active
-- primary node (the coordinator too) with Citus's run_command_on_all_nodes,
-- one connection per node as the calling role, and answers one row per
-- node, database and scope.  A node that does not answer (down, the
-- library not preloaded there, no privilege) is an error naming the node,
-- not a missing row.  Without the citus extension: 55000.  Not public, as
-- idem_stats: pg_monitor (every node checks the caller's privileges on its
-- own idem_stats again).
CREATE FUNCTION @extschema@.idem_cluster_stats(
    OUT nodename pg_catalog.text,
    OUT nodeport pg_catalog.int4,
    OUT dbid pg_catalog.oid,
    OUT datname pg_catalog.name,
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
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp text := (SELECT n.nspname FROM pg_catalog.pg_extension e
                 JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace
                 WHERE e.extname OPERATOR(pg_catalog.=) 'idempotency');
    node record;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension e
                   WHERE e.extname OPERATOR(pg_catalog.=) 'citus') THEN
        RAISE EXCEPTION 'idem_cluster_stats: the citus extension is not installed in this database'
            USING ERRCODE = '55000',
                  DETAIL = 'idem_cluster_stats collects idem_stats from every node of a Citus cluster.',
                  HINT = 'On a single server, read the idem_stats view.';
    END IF;
    -- Each node answers one value: its idem_stats rows as a JSON array.
    FOR node IN
        SELECT coalesce(d.nodename, pg_catalog.current_setting('citus.local_hostname')) AS host,
               coalesce(d.nodeport, pg_catalog.current_setting('port')::pg_catalog.int4) AS port,
               r.success, r.result
          FROM pg_catalog.run_command_on_all_nodes(pg_catalog.format(
                   'SELECT COALESCE(pg_catalog.json_agg(s), ''[]'') FROM %I.idem_stats AS s', nsp)) AS r
          LEFT JOIN pg_catalog.pg_dist_node AS d ON d.nodeid OPERATOR(pg_catalog.=) r.nodeid
         ORDER BY 1, 2
    LOOP
        IF NOT node.success THEN
            RAISE EXCEPTION 'idem_cluster_stats: node %:% did not answer', node.host, node.port
                USING ERRCODE = '55000',
                      DETAIL = pg_catalog.format('The node said: %s', node.result),
                      HINT = 'Every node needs idempotency in shared_preload_libraries, the extension created in this database, and must let the calling role connect and read idem_stats.';
        END IF;
        RETURN QUERY
            SELECT node.host, node.port, s.dbid, s.datname, s.scope, s.claimed, s.duplicates,
                   s.in_progress_conflicts, s.fingerprint_mismatches, s.takeovers,
                   s.completed, s.failed, s.purged, s.stats_reset
              FROM pg_catalog.json_to_recordset(node.result::pg_catalog.json) AS s(
                   dbid pg_catalog.oid, datname pg_catalog.name, scope pg_catalog.text,
                   claimed pg_catalog.int8, duplicates pg_catalog.int8,
                   in_progress_conflicts pg_catalog.int8, fingerprint_mismatches pg_catalog.int8,
                   takeovers pg_catalog.int8, completed pg_catalog.int8, failed pg_catalog.int8,
                   purged pg_catalog.int8, stats_reset pg_catalog.timestamptz)
             ORDER BY s.datname, s.scope;
    END LOOP;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_cluster_stats() IS
    'Citus: the idem_stats counters of every node of the cluster, one row per node, database and scope (docs/citus.md)';

REVOKE ALL ON FUNCTION @extschema@.idem_cluster_stats() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.idem_cluster_stats() TO pg_monitor;
--------------------------------------------------------------------------
-- Granting an application role access
--------------------------------------------------------------------------

-- What an application role needs, in one call, so that nobody has to
-- collect GRANTs from the documentation.  Run by the extension's owner (a
-- superuser, or the role that created the extension): the GRANTs are
-- made with the caller's privileges.  Not public.
CREATE FUNCTION @extschema@.idem_grant(
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
    IF access IS DISTINCT FROM 'write' AND access IS DISTINCT FROM 'read' THEN
        RAISE EXCEPTION 'idem_grant: unknown access level "%"', access
            USING ERRCODE = '22023',
                  DETAIL = 'The access level is ''write'' (claims, leases, tokens, guarded tables) or ''read'' (idem_lookup, idem_await).',
                  HINT = 'Call idem_grant(role) or idem_grant(role, ''read'').';
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
END
$$;

COMMENT ON FUNCTION @extschema@.idem_grant(pg_catalog.regrole, pg_catalog.text) IS
    'Grant role what an application needs: ''write'' (default) for claims, leases, tokens and guarded tables with history, ''read'' for idem_lookup and idem_await';

CREATE FUNCTION @extschema@.idem_revoke(role pg_catalog.regrole)
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
END
$$;

COMMENT ON FUNCTION @extschema@.idem_revoke(pg_catalog.regrole) IS
    'Take back what idem_grant gave role (the schema''s USAGE stays: other objects may need it)';

REVOKE ALL ON FUNCTION @extschema@.idem_grant(pg_catalog.regrole, pg_catalog.text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_revoke(pg_catalog.regrole) FROM PUBLIC;

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
    'Create or replace a state machine: {"initial": [states], "transitions": {state: [targets]}}';

CREATE FUNCTION @extschema@.idem_machine_drop(machine pg_catalog.text)
RETURNS pg_catalog.void
AS 'MODULE_PATHNAME', 'idem_machine_drop'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_machine_drop(pg_catalog.text) IS
    'Delete a state machine; refused while a guard uses it';

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

CREATE FUNCTION @extschema@.idem_sources(
    machine pg_catalog.text,
    to_state pg_catalog.text)
RETURNS pg_catalog.text[]
AS 'MODULE_PATHNAME', 'idem_sources'
LANGUAGE C STABLE CALLED ON NULL INPUT PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.idem_sources(pg_catalog.text, pg_catalog.text) IS
    'The states from which machine declares a transition to to_state; for UPDATE ... WHERE status = ANY (idem_sources(machine, to_state)), on Citus too';

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
-- idem_guard_trigger stays executable by PUBLIC: a table owner allowed to
-- call idem_guard needs EXECUTE on it for CREATE TRIGGER, and it refuses
-- to run as anything but a guard idem_guard made.  idem_machines_trigger
-- is needed by nobody: its two triggers are made here, and PostgreSQL
-- checks EXECUTE only at CREATE TRIGGER.
REVOKE ALL ON FUNCTION @extschema@.idem_machines_trigger() FROM PUBLIC;
--------------------------------------------------------------------------
-- Records with a shard key (src/shard.c; docs/citus.md, "Co-location by
-- a business key")
--------------------------------------------------------------------------

-- Each function F(scope, key, ...) has a twin F_at(shard_key, scope, key,
-- ...) for idem_records distributed by a shard key of the user's type
-- (idem_distribute(shard_key => 'bigint') adds the column shard_key and
-- makes (shard_key, scope, key) the primary key).  shard_key is the
-- distribution value of the business row the key protects (a customer id,
-- say), so the record sits on that row's shard.  It is of any type that
-- converts to the column's type (its own, or through text: 42 for a
-- bigint column, '6f1c...'::text for a uuid one).  The twins keep the
-- arguments, results and errors of F, and add: 22004 (shard_key NULL),
-- 55000 (idem_records has no shard_key column), and the conversion's own
-- error (22P02) for a value the column's type does not accept.  F itself
-- on such records fails with 55000 and names its twin.

CREATE FUNCTION @extschema@.idem_claim_at(
    shard_key "any",
    scope pg_catalog.text,
    key pg_catalog.text,
    ttl pg_catalog.interval DEFAULT NULL,
    fingerprint pg_catalog.text DEFAULT NULL)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'idem_claim_at'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_claim_at("any", pg_catalog.text, pg_catalog.text, pg_catalog.interval, pg_catalog.text) IS
    'idem_claim for idem_records distributed by shard_key (idem_distribute(shard_key => type)): shard_key is the distribution value of the row the key protects';

CREATE FUNCTION @extschema@.idem_complete_at(
    shard_key "any",
    scope pg_catalog.text,
    key pg_catalog.text,
    result pg_catalog.jsonb)
RETURNS pg_catalog.void
AS 'MODULE_PATHNAME', 'idem_complete_at'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_complete_at("any", pg_catalog.text, pg_catalog.text, pg_catalog.jsonb) IS
    'idem_complete for idem_records distributed by shard_key (idem_distribute(shard_key => type)): shard_key is the distribution value of the row the key protects';

CREATE FUNCTION @extschema@.idem_lookup_at(
    shard_key "any",
    scope pg_catalog.text,
    key pg_catalog.text)
RETURNS @extschema@.idem_record
AS 'MODULE_PATHNAME', 'idem_lookup_at'
LANGUAGE C STABLE CALLED ON NULL INPUT PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.idem_lookup_at("any", pg_catalog.text, pg_catalog.text) IS
    'idem_lookup for idem_records distributed by shard_key (idem_distribute(shard_key => type)): shard_key is the distribution value of the row the key protects';

CREATE FUNCTION @extschema@.idem_release_at(
    shard_key "any",
    scope pg_catalog.text,
    key pg_catalog.text)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'idem_release_at'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_release_at("any", pg_catalog.text, pg_catalog.text) IS
    'idem_release for idem_records distributed by shard_key (idem_distribute(shard_key => type)): shard_key is the distribution value of the row the key protects';

CREATE FUNCTION @extschema@.idem_begin_at(
    shard_key "any",
    scope pg_catalog.text,
    key pg_catalog.text,
    lease pg_catalog.interval DEFAULT '5 minutes',
    ttl pg_catalog.interval DEFAULT NULL,
    fingerprint pg_catalog.text DEFAULT NULL,
    OUT outcome pg_catalog.text,
    OUT token pg_catalog.int8,
    OUT result pg_catalog.jsonb)
RETURNS record
AS 'MODULE_PATHNAME', 'idem_begin_at'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_begin_at("any", pg_catalog.text, pg_catalog.text, pg_catalog.interval, pg_catalog.interval, pg_catalog.text) IS
    'idem_begin for idem_records distributed by shard_key (idem_distribute(shard_key => type)): shard_key is the distribution value of the row the key protects';

CREATE FUNCTION @extschema@.idem_heartbeat_at(
    shard_key "any",
    scope pg_catalog.text,
    key pg_catalog.text,
    token pg_catalog.int8,
    lease pg_catalog.interval DEFAULT NULL)
RETURNS pg_catalog.timestamptz
AS 'MODULE_PATHNAME', 'idem_heartbeat_at'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_heartbeat_at("any", pg_catalog.text, pg_catalog.text, pg_catalog.int8, pg_catalog.interval) IS
    'idem_heartbeat for idem_records distributed by shard_key (idem_distribute(shard_key => type)): shard_key is the distribution value of the row the key protects';

CREATE FUNCTION @extschema@.idem_finish_at(
    shard_key "any",
    scope pg_catalog.text,
    key pg_catalog.text,
    token pg_catalog.int8,
    result pg_catalog.jsonb DEFAULT NULL)
RETURNS pg_catalog.void
AS 'MODULE_PATHNAME', 'idem_finish_at'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_finish_at("any", pg_catalog.text, pg_catalog.text, pg_catalog.int8, pg_catalog.jsonb) IS
    'idem_finish for idem_records distributed by shard_key (idem_distribute(shard_key => type)): shard_key is the distribution value of the row the key protects';

CREATE FUNCTION @extschema@.idem_fail_at(
    shard_key "any",
    scope pg_catalog.text,
    key pg_catalog.text,
    token pg_catalog.int8,
    error pg_catalog.jsonb DEFAULT NULL,
    retryable pg_catalog.bool DEFAULT true)
RETURNS pg_catalog.void
AS 'MODULE_PATHNAME', 'idem_fail_at'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_fail_at("any", pg_catalog.text, pg_catalog.text, pg_catalog.int8, pg_catalog.jsonb, pg_catalog.bool) IS
    'idem_fail for idem_records distributed by shard_key (idem_distribute(shard_key => type)): shard_key is the distribution value of the row the key protects';

CREATE FUNCTION @extschema@.idem_await_at(
    shard_key "any",
    scope pg_catalog.text,
    key pg_catalog.text,
    timeout pg_catalog.interval DEFAULT '30 seconds')
RETURNS @extschema@.idem_record
AS 'MODULE_PATHNAME', 'idem_await_at'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.idem_await_at("any", pg_catalog.text, pg_catalog.text, pg_catalog.interval) IS
    'idem_await for idem_records distributed by shard_key (idem_distribute(shard_key => type)): shard_key is the distribution value of the row the key protects';

CREATE FUNCTION @extschema@.idem_token_issue_at(
    shard_key "any",
    scope pg_catalog.text,
    ttl pg_catalog.interval DEFAULT '10 minutes'::pg_catalog.interval)
RETURNS pg_catalog.text
AS 'MODULE_PATHNAME', 'idem_token_issue_at'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_token_issue_at("any", pg_catalog.text, pg_catalog.interval) IS
    'idem_token_issue for idem_records distributed by shard_key (idem_distribute(shard_key => type)): shard_key is the distribution value of the row the key protects';

CREATE FUNCTION @extschema@.idem_token_consume_at(
    shard_key "any",
    scope pg_catalog.text,
    token pg_catalog.text)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'idem_token_consume_at'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_token_consume_at("any", pg_catalog.text, pg_catalog.text) IS
    'idem_token_consume for idem_records distributed by shard_key (idem_distribute(shard_key => type)): shard_key is the distribution value of the row the key protects';

CREATE FUNCTION @extschema@.idem_claim_many_at(
    shard_key "any",
    scope pg_catalog.text,
    keys pg_catalog.text[],
    ttl pg_catalog.interval DEFAULT NULL)
RETURNS TABLE (key pg_catalog.text, claimed pg_catalog.bool)
AS 'MODULE_PATHNAME', 'idem_claim_many_at'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
ROWS 100;

COMMENT ON FUNCTION @extschema@.idem_claim_many_at("any", pg_catalog.text, pg_catalog.text[], pg_catalog.interval) IS
    'idem_claim_many for idem_records distributed by shard_key (idem_distribute(shard_key => type)): shard_key is the distribution value of the row the key protects';

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
