-- idempotency 0.3.0 -> 0.4.0: hardening and access.
--   * idem_machines_trigger is no longer executable by PUBLIC (it checks
--     that it fires on the extension's own idem_machines, too);
--   * idem_grant(role, access) and idem_revoke(role) grant an application
--     role what it needs;
--   * two comments corrected;
--   * idem_distribute(shard_key, colocate_with, delegate) makes the tables
--     Citus tables, and the F_at twins address records distributed by a
--     shard key;
--   * idem_sources(machine, to_state), for guarded UPDATEs on Citus.
-- The same objects are in sql/idempotency_machine.sql,
-- sql/idempotency_grant.sql, sql/idempotency_citus.sql and
-- sql/idempotency_shard.sql, the sources of a fresh 0.4.0 install.

\echo Use "ALTER EXTENSION idempotency UPDATE TO '0.4.0'" to load this file. \quit

REVOKE ALL ON FUNCTION @extschema@.idem_machines_trigger() FROM PUBLIC;

COMMENT ON FUNCTION @extschema@.idem_machine_define(pg_catalog.text, pg_catalog.jsonb) IS
    'Create or replace a state machine: {"initial": [states], "transitions": {state: [targets]}}';
COMMENT ON FUNCTION @extschema@.idem_machine_drop(pg_catalog.text) IS
    'Delete a state machine; refused while a guard uses it';

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

-- Citus: idem_distribute(shard_key, colocate_with, delegate) (sql/idempotency_citus.sql, docs/citus.md).
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

-- Citus: guards on distributed tables (sql/idempotency_machine.sql,
-- docs/citus.md).  idem_guard on a distributed table puts its triggers on
-- every shard and keeps history in a table co-located with it (C code, no
-- catalog change); idem_sources serves the guarded UPDATE that moves a row
-- only when the move is legal, which Citus accepts (no column reference in
-- the call).  Public: it only reads definitions.
CREATE FUNCTION @extschema@.idem_sources(
    machine pg_catalog.text,
    to_state pg_catalog.text)
RETURNS pg_catalog.text[]
AS 'MODULE_PATHNAME', 'idem_sources'
LANGUAGE C STABLE CALLED ON NULL INPUT PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.idem_sources(pg_catalog.text, pg_catalog.text) IS
    'The states from which machine declares a transition to to_state; for UPDATE ... WHERE status = ANY (idem_sources(machine, to_state)), on Citus too';


-- Citus: cluster-wide statistics
-- idem_cluster_stats() (sql/idempotency_citus_stats.sql, docs/citus.md): the
-- idem_stats counters of every node, collected from the coordinator; not
-- public (pg_monitor, as idem_stats).
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
