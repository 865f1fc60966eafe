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
    EXECUTE pg_catalog.format('GRANT SELECT, INSERT, DELETE ON TABLE %I.idem_outbox TO %s', nsp, role);
    EXECUTE pg_catalog.format('GRANT USAGE ON SEQUENCE %I.idem_outbox_position_seq TO %s', nsp, role);
    EXECUTE pg_catalog.format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE %I.idem_outbox_subscriptions TO %s', nsp, role);
    EXECUTE pg_catalog.format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE %I.idem_outbox_deliveries TO %s', nsp, role);
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
    EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %I.idem_outbox FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON SEQUENCE %I.idem_outbox_position_seq FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %I.idem_outbox_subscriptions FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %I.idem_outbox_deliveries FROM %s', nsp, role);
END
$$;

COMMENT ON FUNCTION @extschema@.idem_revoke(pg_catalog.regrole) IS
    'Take back what idem_grant gave role (the schema''s USAGE stays: other objects may need it)';

REVOKE ALL ON FUNCTION @extschema@.idem_grant(pg_catalog.regrole, pg_catalog.text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_revoke(pg_catalog.regrole) FROM PUBLIC;

--------------------------------------------------------------------------
-- HTTP Idempotency-Key semantics (docs/http.md)
--------------------------------------------------------------------------

-- The HTTP face of idem_claim, in SQL and PL/pgSQL only, so that the
-- portable edition has it unchanged.  A request is begun with
-- idem_http_begin inside the handler's transaction, and its response is
-- stored with idem_http_finish in that same transaction: the response
-- commits or rolls back with the handler's writes.  Outcomes and their
-- answers (draft-ietf-httpapi-idempotency-key-header):
--   proceed       run the handler
--   replay        the stored status, allow-listed headers and body bytes,
--                 plus Idempotent-Replayed: true
--   in_flight     409 with Retry-After: another transaction holds the key
--   mismatch      422: the key was used with another method, path or body
--   missing_key   400: the route requires a key and none was sent
--   invalid_key   400: the header is not a valid key
--   no_response   409: the key was used, but no response was stored
-- Errors for the client are application/problem+json bodies (RFC 9457).
-- A request in flight is recognised without waiting: idem_http_begin
-- takes a transaction-level advisory lock on the key (try, never wait),
-- held until the handler's transaction ends.

-- What idem_http_begin answers, and what a handler sends.
CREATE TYPE @extschema@.idem_http_response AS (
    action  pg_catalog.text,
    status  pg_catalog.int4,
    headers pg_catalog.jsonb,
    body    pg_catalog.bytea,
    problem pg_catalog.jsonb
);

COMMENT ON TYPE @extschema@.idem_http_response IS
    'An answer of idem_http_begin: action (proceed, replay, in_flight, mismatch, missing_key, invalid_key, no_response) and, except for proceed, the HTTP status, headers and body to send';

-- The key of an Idempotency-Key header value: a Structured Field String
-- ("...", RFC 8941; \" and \\ unescaped), or, leniently, a bare run of
-- visible ASCII characters not starting with a quote (what most clients
-- send).  NULL for NULL, a blank value, or an invalid one: anything else,
-- including two values joined by a comma, and keys longer than 255
-- characters.  Plain SQL without SET, fully qualified, so that the
-- planner inlines it.
CREATE FUNCTION @extschema@.idem_http_parse_key(value pg_catalog.text)
RETURNS pg_catalog.text
LANGUAGE sql IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE
AS $$
SELECT CASE
    WHEN pg_catalog.btrim(value, E' \t') OPERATOR(pg_catalog.~) '^[\x21\x23-\x7e][\x21-\x7e]*$'
         AND pg_catalog.length(pg_catalog.btrim(value, E' \t')) OPERATOR(pg_catalog.<=) 255
        THEN pg_catalog.btrim(value, E' \t')
    WHEN pg_catalog.btrim(value, E' \t') OPERATOR(pg_catalog.~) '^"([\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])+"$'
         AND pg_catalog.length(pg_catalog.regexp_replace(pg_catalog.btrim(value, E' \t'), '\\(.)', '\1', 'g'))
             OPERATOR(pg_catalog.<=) 257
        THEN pg_catalog.regexp_replace(pg_catalog.btrim(value, E' \t'), '^"|\\(["\\])|"$', '\1', 'g')
END
$$;

COMMENT ON FUNCTION @extschema@.idem_http_parse_key(pg_catalog.text) IS
    'The idempotency key of an Idempotency-Key header value (a quoted Structured Field String, or a bare run of visible ASCII), 1 to 255 characters; NULL when blank or invalid';

-- A problem response (RFC 9457): status, headers (Content-Type
-- application/problem+json, and the given ones) and the body, ready to
-- send.  code names the problem: its type is docs_url#code (docs_url
-- defaults to the draft), or about:blank without a code.
CREATE FUNCTION @extschema@.idem_http_problem(
    status pg_catalog.int4,
    title pg_catalog.text,
    detail pg_catalog.text DEFAULT NULL,
    code pg_catalog.text DEFAULT NULL,
    docs_url pg_catalog.text DEFAULT NULL,
    headers pg_catalog.jsonb DEFAULT NULL)
RETURNS @extschema@.idem_http_response
LANGUAGE plpgsql IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p jsonb;
    r @extschema@.idem_http_response;
BEGIN
    IF status IS NULL OR title IS NULL THEN
        RAISE EXCEPTION 'idem_http_problem: status and title must not be NULL'
            USING ERRCODE = '22004',
                  DETAIL = 'A problem document needs the HTTP status it is sent with and a short title.',
                  HINT = 'Pass both, for example idem_http_problem(500, ''Internal Server Error'').';
    END IF;
    IF status < 400 OR status > 599 THEN
        RAISE EXCEPTION 'idem_http_problem: status % is not an error status', status
            USING ERRCODE = '22023',
                  DETAIL = 'Problem documents describe errors: the status must be between 400 and 599.',
                  HINT = 'Send a success or a redirect as an ordinary response.';
    END IF;
    IF headers IS NOT NULL AND jsonb_typeof(headers) <> 'object' THEN
        RAISE EXCEPTION 'idem_http_problem: headers must be a JSON object'
            USING ERRCODE = '22023',
                  DETAIL = format('The headers given are a JSON %s.', jsonb_typeof(headers)),
                  HINT = 'Pass an object of header names and values, for example ''{"Retry-After": "1"}''.';
    END IF;
    p := jsonb_build_object(
        'type', CASE WHEN code IS NULL THEN 'about:blank'
                     ELSE coalesce(docs_url, 'https://datatracker.ietf.org/doc/draft-ietf-httpapi-idempotency-key-header/')
                          || '#' || code END,
        'title', title,
        'status', status);
    IF detail IS NOT NULL THEN
        p := p || jsonb_build_object('detail', detail);
    END IF;
    IF code IS NOT NULL THEN
        p := p || jsonb_build_object('code', code);
    END IF;
    r.action := 'problem';
    r.status := status;
    r.headers := coalesce(headers, '{}'::jsonb) || '{"content-type": "application/problem+json"}'::jsonb;
    r.body := convert_to(p::text, 'UTF8');
    r.problem := p;
    RETURN r;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_http_problem(pg_catalog.int4, pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.jsonb) IS
    'An application/problem+json response (RFC 9457) with status, title and detail, ready to send: action ''problem'', status, headers, body bytes and the problem as jsonb';

-- The stored form of a response: {"http": 1, "status": n, "headers":
-- {lower-case name: value or [values]}, "body": base64 or null}.  Only
-- headers named in allow_headers are kept (NULL: the default list); a
-- header name that is not an HTTP token, a value with a control
-- character (CR, LF: a header injection on replay), a status outside
-- 200-599 are errors.
CREATE FUNCTION @extschema@.idem_http_result(
    status pg_catalog.int4,
    headers pg_catalog.jsonb DEFAULT NULL,
    body pg_catalog.bytea DEFAULT NULL,
    allow_headers pg_catalog.text[] DEFAULT NULL)
RETURNS pg_catalog.jsonb
LANGUAGE plpgsql IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    allow text[];
    kept jsonb := '{}';
    pairs jsonb;
    n text;
    ln text;
    v jsonb;
    t text;
    vals text[];
BEGIN
    IF NOT (status BETWEEN 200 AND 599) OR status IS NULL OR jsonb_typeof(headers) <> 'object' THEN
        IF status IS NULL THEN
            RAISE EXCEPTION 'idem_http_result: status must not be NULL'
                USING ERRCODE = '22004',
                      DETAIL = 'A stored response needs the HTTP status it was sent with.',
                      HINT = 'Pass the status code, for example 201.';
        END IF;
        IF NOT (status BETWEEN 200 AND 599) THEN
            RAISE EXCEPTION 'idem_http_result: status % is not a final HTTP status', status
                USING ERRCODE = '22023',
                      DETAIL = 'Only final responses (200 to 599) can be stored and replayed.',
                      HINT = 'Store the response the handler sends last, not an interim 1xx.';
        END IF;
        RAISE EXCEPTION 'idem_http_result: headers must be a JSON object'
            USING ERRCODE = '22023',
                  DETAIL = format('The headers given are a JSON %s.', jsonb_typeof(headers)),
                  HINT = 'Pass an object of header names and values, for example ''{"Content-Type": "application/json"}''.';
    END IF;
    IF headers <> '{}' THEN
        -- Names are tokens, so no allowed name holds a comma.
        allow := CASE WHEN allow_headers IS NULL
                      THEN '{cache-control,content-disposition,content-language,content-location,content-type,etag,expires,last-modified,link,location,preference-applied,retry-after,vary}'::text[]
                      ELSE string_to_array(lower(array_to_string(allow_headers, ',')), ',') END;
        -- [{"key": ..., "value": ..., "id": ...}, ...]: plain expressions
        -- from here on, no query per header.
        pairs := jsonb_path_query_array(headers, '$.keyvalue()');
        FOR i IN 0 .. jsonb_array_length(pairs) - 1 LOOP
            n := pairs -> i ->> 'key';
            ln := lower(n);
            IF ln !~ '^[-!#$%&''*+.^_`|~0-9a-z]+$' THEN
                RAISE EXCEPTION 'idem_http_result: invalid header name "%"', n
                    USING ERRCODE = '22023',
                          DETAIL = 'A header name is a token: letters, digits and !#$%&''*+-.^_`|~ only.',
                          HINT = 'Check the names of the headers passed.';
            END IF;
            v := pairs -> i -> 'value';
            t := jsonb_typeof(v);
            IF t IN ('string', 'number', 'boolean') THEN
                vals := ARRAY[v #>> '{}'];
            ELSIF t = 'array' AND NOT jsonb_path_exists(v, '$[*] ? (@.type() != "string" && @.type() != "number" && @.type() != "boolean")') THEN
                vals := ARRAY(SELECT x #>> '{}' FROM jsonb_array_elements(v) WITH ORDINALITY AS a(x, o) ORDER BY o);
            ELSIF t = 'null' THEN
                CONTINUE;
            ELSE
                RAISE EXCEPTION 'idem_http_result: invalid value of header "%"', n
                    USING ERRCODE = '22023',
                          DETAIL = CASE WHEN t = 'array' THEN 'An array of header values may hold strings, numbers and booleans only.'
                                        ELSE format('The value is a JSON %s.', t) END,
                          HINT = 'Pass a string, or an array of strings for a repeated header.';
            END IF;
            IF array_to_string(vals, ' ') ~ '[\x01-\x08\x0a-\x1f\x7f]' THEN
                RAISE EXCEPTION 'idem_http_result: control character in the value of header "%"', n
                    USING ERRCODE = '22023',
                          DETAIL = 'A header value may not contain CR, LF or other control characters: replayed, they would split the response.',
                          HINT = 'Remove the control characters from the value.';
            END IF;
            IF ln = ANY (allow) THEN
                kept := kept || jsonb_build_object(ln, CASE WHEN t = 'array' THEN to_jsonb(vals) ELSE to_jsonb(vals[1]) END);
            END IF;
        END LOOP;
    END IF;
    RETURN jsonb_build_object('http', 1, 'status', status, 'headers', kept,
                              'body', translate(encode(body, 'base64'), E'\n', ''));
END
$$;

COMMENT ON FUNCTION @extschema@.idem_http_result(pg_catalog.int4, pg_catalog.jsonb, pg_catalog.bytea, pg_catalog.text[]) IS
    'The stored form of an HTTP response (status, allow-listed headers, body bytes as base64), for idem_complete or idem_finish; idem_http_begin replays it';

CREATE FUNCTION @extschema@.idem_http_begin(
    key pg_catalog.text,
    method pg_catalog.text,
    path pg_catalog.text,
    body pg_catalog.bytea DEFAULT NULL,
    scope pg_catalog.text DEFAULT 'http',
    require_key pg_catalog.bool DEFAULT true,
    ttl pg_catalog.interval DEFAULT NULL,
    content_type pg_catalog.text DEFAULT NULL,
    docs_url pg_catalog.text DEFAULT NULL,
    retry_after pg_catalog.int4 DEFAULT 1)
RETURNS @extschema@.idem_http_response
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    k text;
    canon bytea;
    fp text;
    rec @extschema@.idem_record;
    locked bool;
    stored jsonb;
    r @extschema@.idem_http_response;
BEGIN
    -- (Few expressions on the common path: PL/pgSQL prepares each one
    -- anew in every transaction.)
    IF method IS NULL OR path IS NULL OR scope IS NULL OR require_key IS NULL OR retry_after IS NULL OR retry_after < 0 THEN
        IF retry_after < 0 THEN
            RAISE EXCEPTION 'idem_http_begin: retry_after must not be negative'
                USING ERRCODE = '22023',
                      DETAIL = format('retry_after is %s seconds.', retry_after),
                      HINT = 'Pass the number of seconds a client should wait before it retries a request in flight.';
        END IF;
        RAISE EXCEPTION 'idem_http_begin: method, path, scope, require_key and retry_after must not be NULL'
            USING ERRCODE = '22004',
                  DETAIL = 'The request is identified by its method and path within the scope.',
                  HINT = 'Pass the request''s method and path; leave out the arguments that have defaults.';
    END IF;

    k := @extschema@.idem_http_parse_key(key);
    IF k IS NULL THEN
        IF key IS NULL OR btrim(key, E' \t') = '' THEN
            IF require_key THEN
                r := @extschema@.idem_http_problem(400, 'Idempotency-Key is missing',
                    format('%s %s requires an Idempotency-Key header.', upper(method), path),
                    'idempotency-key-missing', docs_url);
                r.action := 'missing_key';
                RETURN r;
            END IF;
            r.action := 'proceed';
            RETURN r;
        END IF;
        r := @extschema@.idem_http_problem(400, 'Idempotency-Key is invalid',
            'The Idempotency-Key header must hold one key of 1 to 255 visible ASCII characters, best a quoted string such as "8e03978e-40d5-43e8-bc93-6894a57f9324".',
            'idempotency-key-invalid', docs_url);
        r.action := 'invalid_key';
        RETURN r;
    END IF;

    -- The fingerprint of the request: method, path and the body's
    -- canonical form (a JSON body as jsonb's text, so key order and
    -- whitespace do not count; any other body as its bytes).
    canon := coalesce(body, ''::bytea);
    IF content_type ~* '^\s*application/([^;]*\+)?json\s*(;|$)' THEN
        BEGIN
            canon := convert_to(convert_from(canon, 'UTF8')::jsonb::text, 'UTF8');
        EXCEPTION WHEN data_exception THEN
            NULL;    -- not JSON after all: its bytes are its canonical form
        END;
    END IF;
    fp := 'idem-http/1 ' || encode(sha256(convert_to(upper(btrim(method)) || E'\n' || path || E'\n', 'UTF8') || canon), 'hex');

    -- Another transaction working on the key holds this lock until it
    -- ends; taking it never waits.  Without it, the record decides: a
    -- completed one is replayed (a concurrent replay may hold the lock),
    -- anything else is in flight.
    locked := pg_try_advisory_xact_lock(hashtextextended(scope || E'\n' || k, 7655));

    FOR attempt IN 1 .. 2 LOOP
        rec := @extschema@.idem_lookup(scope, k);
        IF rec.status IS NULL AND locked THEN
            -- The common case: a new key.  (false: a claim made without
            -- the lock committed meanwhile; look again.)
            IF @extschema@.idem_claim(scope, k, ttl, fp) THEN
                PERFORM set_config('idem_http.claim', scope || E'\n' || k, true);
                r.action := 'proceed';
                RETURN r;
            END IF;
            CONTINUE;
        END IF;
        -- idem_claim stores the SHA-256 of the fingerprint's text.
        IF rec.fingerprint <> sha256(convert_to(fp, getdatabaseencoding())) THEN
            r := @extschema@.idem_http_problem(422, 'Idempotency-Key is already used',
                'This Idempotency-Key was used for a request with another method, path or body; a key may not be reused for a different request.',
                'idempotency-key-mismatch', docs_url);
            r.action := 'mismatch';
            RETURN r;
        END IF;
        IF rec.status IN ('completed', 'failed') THEN
            stored := rec.result;
            IF jsonb_typeof(stored -> 'status') = 'number' AND stored ? 'http' THEN
                r.action := 'replay';
                r.status := (stored ->> 'status')::int4;
                r.headers := coalesce(stored -> 'headers', '{}') || '{"idempotent-replayed": "true"}'::jsonb;
                r.body := decode(stored ->> 'body', 'base64');
                RETURN r;
            END IF;
        END IF;
        IF rec.status IN ('completed', 'failed', 'issued', 'consumed')
           OR (rec.status = 'claimed' AND current_setting('idem_http.claim', true) IS DISTINCT FROM scope || E'\n' || k) THEN
            r := @extschema@.idem_http_problem(409, 'Idempotency-Key is already used',
                'A request with this Idempotency-Key was processed, but no response was stored, so it cannot be replayed.',
                'idempotency-key-used', docs_url);
            r.action := 'no_response';
            RETURN r;
        END IF;
        IF rec.status = 'claimed' THEN
            r.action := 'proceed';    -- claimed earlier in this transaction
            RETURN r;
        END IF;
        IF NOT locked OR (rec.status = 'in_progress' AND rec.locked_until > clock_timestamp()) THEN
            r := @extschema@.idem_http_problem(409, 'A request with this Idempotency-Key is in progress',
                'The first request with this Idempotency-Key has not finished yet; retry after the time given in Retry-After.',
                'idempotency-key-in-flight', docs_url,
                jsonb_build_object('retry-after', retry_after::text));
            r.action := 'in_flight';
            RETURN r;
        END IF;
        -- No live record, a retryable failure or a lease that ran out:
        -- claim it (false only when a claim that did not take the lock
        -- committed meanwhile: look again).
        IF @extschema@.idem_claim(scope, k, ttl, fp) THEN
            PERFORM set_config('idem_http.claim', scope || E'\n' || k, true);
            r.action := 'proceed';
            RETURN r;
        END IF;
    END LOOP;
    r := @extschema@.idem_http_problem(409, 'A request with this Idempotency-Key is in progress',
        'The first request with this Idempotency-Key has not finished yet; retry after the time given in Retry-After.',
        'idempotency-key-in-flight', docs_url,
        jsonb_build_object('retry-after', retry_after::text));
    r.action := 'in_flight';
    RETURN r;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_http_begin(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.bytea, pg_catalog.text, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.text, pg_catalog.int4) IS
    'Begin an HTTP request with an Idempotency-Key in the handler''s transaction: proceed (the key is claimed), or the response to send (replay, in_flight 409, mismatch 422, missing_key or invalid_key 400, no_response 409)';

CREATE FUNCTION @extschema@.idem_http_finish(
    key pg_catalog.text,
    status pg_catalog.int4,
    headers pg_catalog.jsonb DEFAULT NULL,
    body pg_catalog.bytea DEFAULT NULL,
    scope pg_catalog.text DEFAULT 'http',
    allow_headers pg_catalog.text[] DEFAULT NULL)
RETURNS pg_catalog.void
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    k text;
BEGIN
    k := @extschema@.idem_http_parse_key(key);
    IF k IS NULL THEN
        IF key IS NULL OR btrim(key, E' \t') = '' THEN
            RETURN;    -- a request without a key (require_key false): nothing to store
        END IF;
        RAISE EXCEPTION 'idem_http_finish: invalid Idempotency-Key header value'
            USING ERRCODE = '22023',
                  DETAIL = 'The key is one value of 1 to 255 visible ASCII characters, bare or as a quoted string.',
                  HINT = 'Pass the header value that idem_http_begin answered proceed for.';
    END IF;
    PERFORM @extschema@.idem_complete(scope, k,
        @extschema@.idem_http_result(status, headers, body, allow_headers));
END
$$;

COMMENT ON FUNCTION @extschema@.idem_http_finish(pg_catalog.text, pg_catalog.int4, pg_catalog.jsonb, pg_catalog.bytea, pg_catalog.text, pg_catalog.text[]) IS
    'Store the response of a request begun with idem_http_begin (status, allow-listed headers, body bytes) with its key, in the handler''s transaction; nothing for a request without a key';

--------------------------------------------------------------------------
-- PostgREST (docs/http.md#postgrest)
--------------------------------------------------------------------------

-- Raise r as PostgREST's custom error (SQLSTATE PGRST): the status and
-- headers in DETAIL, a body of PostgREST's own shape (code, message,
-- details, hint) in MESSAGE.  PostgREST sends application/json with it;
-- the problem's fields are mapped onto those four.
CREATE FUNCTION @extschema@.idem_http_postgrest_raise(r @extschema@.idem_http_response)
RETURNS pg_catalog.void
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    hdrs jsonb;
    msg jsonb;
BEGIN
    IF r.status IS NULL THEN
        RAISE EXCEPTION 'idem_http_postgrest_raise: the response has no status'
            USING ERRCODE = '22004',
                  DETAIL = format('Action %s carries no response to send.', coalesce(r.action, 'NULL')),
                  HINT = 'Raise only the answers of idem_http_begin whose action is not proceed.';
    END IF;
    SELECT coalesce(jsonb_object_agg(e.key, CASE WHEN jsonb_typeof(e.value) = 'array'
                                                 THEN to_jsonb(array_to_string(ARRAY(SELECT jsonb_array_elements_text(e.value)), ', '))
                                                 ELSE e.value END), '{}')
      INTO hdrs
      FROM jsonb_each(coalesce(r.headers, '{}')) AS e
     WHERE e.key <> 'content-type';
    IF r.problem IS NOT NULL THEN
        msg := jsonb_build_object('code', coalesce(r.problem ->> 'code', r.status::text),
                                  'message', r.problem ->> 'title',
                                  'details', r.problem ->> 'detail',
                                  'hint', 'See ' || (r.problem ->> 'type'));
    ELSE
        msg := jsonb_build_object('code', 'idempotent-replayed',
                                  'message', 'This request was already processed: its stored status and headers are replayed.',
                                  'details', 'PostgREST cannot send the stored body from here; an RPC function can (docs/http.md).',
                                  'hint', NULL);
    END IF;
    RAISE SQLSTATE 'PGRST'
        USING MESSAGE = msg::text,
              DETAIL = jsonb_build_object('status', r.status, 'headers', hdrs)::text;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_http_postgrest_raise(@extschema@.idem_http_response) IS
    'Raise an answer of idem_http_begin as PostgREST''s custom error (SQLSTATE PGRST): its status and headers, and the problem as PostgREST''s code, message, details and hint';

-- PostgREST's db-pre-request function: for the methods named (POST and
-- PATCH by default), 400 without a valid key where one is required, 409
-- while a request with the key is in flight.  For a table or view it
-- takes the claim itself (PostgREST gives the pre-request no body: the
-- fingerprint is the method and path) and answers 422, and 409 for a
-- key already used.  For an RPC (/rpc/...) the function's call of
-- idem_http_postgrest_rpc takes the claim, with its arguments.
CREATE FUNCTION @extschema@.idem_http_postgrest_pre_request(
    scope pg_catalog.text DEFAULT 'http',
    require_key pg_catalog.bool DEFAULT true,
    methods pg_catalog.text[] DEFAULT '{POST,PATCH}',
    ttl pg_catalog.interval DEFAULT NULL,
    docs_url pg_catalog.text DEFAULT NULL)
RETURNS pg_catalog.void
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    m text := upper(nullif(current_setting('request.method', true), ''));
    p text := nullif(current_setting('request.path', true), '');
    h text := nullif(current_setting('request.headers', true), '');
    raw text;
    k text;
    r @extschema@.idem_http_response;
BEGIN
    IF m IS NULL OR p IS NULL OR NOT m = ANY (methods) THEN
        RETURN;
    END IF;
    raw := h::json ->> 'idempotency-key';
    IF p !~ '^/rpc/' THEN
        r := @extschema@.idem_http_begin(raw, m, p, NULL, scope, require_key, ttl, NULL, docs_url);
        IF r.action = 'proceed' THEN
            IF raw IS NOT NULL THEN
                PERFORM set_config('idem_http.postgrest',
                    jsonb_build_object('scope', scope, 'key', raw)::text, true);
            END IF;
            RETURN;
        END IF;
        PERFORM @extschema@.idem_http_postgrest_raise(r);
    END IF;
    -- An RPC: the key is checked and locked here; the claim waits for the
    -- function's arguments (idem_http_postgrest_rpc).
    IF raw IS NULL OR btrim(raw, E' \t') = '' THEN
        IF require_key THEN
            r := @extschema@.idem_http_problem(400, 'Idempotency-Key is missing',
                format('%s %s requires an Idempotency-Key header.', m, p),
                'idempotency-key-missing', docs_url);
            PERFORM @extschema@.idem_http_postgrest_raise(r);
        END IF;
        RETURN;
    END IF;
    k := @extschema@.idem_http_parse_key(raw);
    IF k IS NULL THEN
        r := @extschema@.idem_http_begin(raw, m, p, NULL, scope, require_key, ttl, NULL, docs_url);
        PERFORM @extschema@.idem_http_postgrest_raise(r);
    END IF;
    IF NOT pg_try_advisory_xact_lock(hashtextextended(scope || E'\n' || k, 7655)) THEN
        r := @extschema@.idem_http_problem(409, 'A request with this Idempotency-Key is in progress',
            'The first request with this Idempotency-Key has not finished yet; retry after the time given in Retry-After.',
            'idempotency-key-in-flight', docs_url, '{"retry-after": "1"}');
        PERFORM @extschema@.idem_http_postgrest_raise(r);
    END IF;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_http_postgrest_pre_request(pg_catalog.text, pg_catalog.bool, pg_catalog.text[], pg_catalog.interval, pg_catalog.text) IS
    'PostgREST db-pre-request: reads request.method, request.path and request.headers; 400 without a valid Idempotency-Key, 409 in flight; claims the key for tables and views (422 on reuse), leaves RPCs to idem_http_postgrest_rpc';

-- The first call of an idempotent RPC function under PostgREST, with the
-- function's arguments as its body: proceed (do the work, then
-- idem_http_postgrest_finish), or replay (response.status and
-- response.headers are set: return the body), or PostgREST's error for
-- 400, 409 and 422.
CREATE FUNCTION @extschema@.idem_http_postgrest_rpc(
    args pg_catalog.jsonb,
    scope pg_catalog.text DEFAULT 'http',
    require_key pg_catalog.bool DEFAULT true,
    ttl pg_catalog.interval DEFAULT NULL,
    docs_url pg_catalog.text DEFAULT NULL)
RETURNS @extschema@.idem_http_response
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    m text := upper(coalesce(nullif(current_setting('request.method', true), ''), 'POST'));
    p text := coalesce(nullif(current_setting('request.path', true), ''), '');
    h text := nullif(current_setting('request.headers', true), '');
    raw text := h::json ->> 'idempotency-key';
    r @extschema@.idem_http_response;
BEGIN
    IF m IN ('GET', 'HEAD') THEN
        r.action := 'proceed';    -- a read: nothing to make idempotent
        RETURN r;
    END IF;
    r := @extschema@.idem_http_begin(raw, m, p, convert_to(coalesce(args, 'null')::text, 'UTF8'),
                                     scope, require_key, ttl, NULL, docs_url);
    IF r.action = 'proceed' THEN
        IF raw IS NOT NULL THEN
            PERFORM set_config('idem_http.postgrest',
                jsonb_build_object('scope', scope, 'key', raw)::text, true);
        END IF;
        RETURN r;
    END IF;
    IF r.action = 'replay' THEN
        PERFORM set_config('response.status', r.status::text, true);
        PERFORM set_config('response.headers',
            coalesce((SELECT jsonb_agg(jsonb_build_object(e.key, v.value) ORDER BY e.key, v.n)
                        FROM jsonb_each(r.headers) AS e,
                             LATERAL (SELECT x AS value, o AS n
                                        FROM jsonb_array_elements_text(CASE jsonb_typeof(e.value)
                                                 WHEN 'array' THEN e.value
                                                 ELSE jsonb_build_array(e.value) END)
                                             WITH ORDINALITY AS a(x, o)) AS v),
                     '[]')::text, true);
        RETURN r;
    END IF;
    PERFORM @extschema@.idem_http_postgrest_raise(r);
    RETURN r;    -- not reached
END
$$;

COMMENT ON FUNCTION @extschema@.idem_http_postgrest_rpc(pg_catalog.jsonb, pg_catalog.text, pg_catalog.bool, pg_catalog.interval, pg_catalog.text) IS
    'Begin an idempotent PostgREST RPC with its arguments as the body: proceed, or replay (response.status and response.headers set: return the body), or PostgREST''s error for 400, 409 and 422';

-- The last call of an idempotent RPC (or of a trigger on a table endpoint):
-- stores the response with the key the request was begun with and sets
-- response.status and response.headers, so that the first answer and
-- its replays agree.  Without a key it only sets them.
CREATE FUNCTION @extschema@.idem_http_postgrest_finish(
    status pg_catalog.int4,
    headers pg_catalog.jsonb DEFAULT NULL,
    body pg_catalog.bytea DEFAULT NULL,
    allow_headers pg_catalog.text[] DEFAULT NULL)
RETURNS pg_catalog.void
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    claim jsonb := nullif(current_setting('idem_http.postgrest', true), '')::jsonb;
BEGIN
    IF claim IS NOT NULL THEN
        PERFORM @extschema@.idem_http_finish(claim ->> 'key', status, headers, body,
                                             claim ->> 'scope', allow_headers);
    ELSE
        PERFORM @extschema@.idem_http_result(status, headers, body, allow_headers);    -- the same checks
    END IF;
    PERFORM set_config('response.status', status::text, true);
    IF headers IS NOT NULL AND headers <> '{}' THEN
        PERFORM set_config('response.headers',
            (SELECT jsonb_agg(jsonb_build_object(e.key, v.value) ORDER BY e.key, v.n)
               FROM jsonb_each(headers) AS e,
                    LATERAL (SELECT x AS value, o AS n
                               FROM jsonb_array_elements_text(CASE jsonb_typeof(e.value)
                                        WHEN 'array' THEN e.value
                                        ELSE jsonb_build_array(e.value) END)
                                    WITH ORDINALITY AS a(x, o)) AS v)::text, true);
    END IF;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_http_postgrest_finish(pg_catalog.int4, pg_catalog.jsonb, pg_catalog.bytea, pg_catalog.text[]) IS
    'Store the response of a PostgREST request begun by idem_http_postgrest_rpc or the pre-request (in its transaction) and set response.status and response.headers to it';

-- Like idem_claim, executable by every role: what a caller may do is
-- decided by its privileges on idem_records (idem_grant).
GRANT EXECUTE ON FUNCTION
    @extschema@.idem_http_parse_key(pg_catalog.text),
    @extschema@.idem_http_problem(pg_catalog.int4, pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.jsonb),
    @extschema@.idem_http_result(pg_catalog.int4, pg_catalog.jsonb, pg_catalog.bytea, pg_catalog.text[]),
    @extschema@.idem_http_begin(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.bytea, pg_catalog.text, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.text, pg_catalog.int4),
    @extschema@.idem_http_finish(pg_catalog.text, pg_catalog.int4, pg_catalog.jsonb, pg_catalog.bytea, pg_catalog.text, pg_catalog.text[]),
    @extschema@.idem_http_postgrest_raise(@extschema@.idem_http_response),
    @extschema@.idem_http_postgrest_pre_request(pg_catalog.text, pg_catalog.bool, pg_catalog.text[], pg_catalog.interval, pg_catalog.text),
    @extschema@.idem_http_postgrest_rpc(pg_catalog.jsonb, pg_catalog.text, pg_catalog.bool, pg_catalog.interval, pg_catalog.text),
    @extschema@.idem_http_postgrest_finish(pg_catalog.int4, pg_catalog.jsonb, pg_catalog.bytea, pg_catalog.text[])
TO PUBLIC;

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

CREATE FUNCTION @extschema@.idem_transition_strict(
    machine pg_catalog.text,
    from_state pg_catalog.text,
    to_state pg_catalog.text)
RETURNS pg_catalog.text
AS 'MODULE_PATHNAME', 'idem_transition_strict'
LANGUAGE C STABLE CALLED ON NULL INPUT PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.idem_transition_strict(pg_catalog.text, pg_catalog.text, pg_catalog.text) IS
    'to_state when machine declares from_state -> to_state; error ID006 when they are equal and no such move is declared (a repeated event), ID004 otherwise';

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
-- Outbox and inbox (docs/outbox.md)
--------------------------------------------------------------------------

-- Written once, in SQL and PL/pgSQL, for both editions (the portable
-- edition copies this file unchanged).  Every function is SECURITY
-- INVOKER and qualifies every object, operator, function and type it
-- uses (no SET search_path: the hot paths stay inlinable and cheap), so a
-- hostile search_path changes nothing.  Consequence: the schema's name is
-- written into the bodies, so these functions do not follow an ALTER
-- SCHEMA ... RENAME of the extension's schema (the C functions do).
--
-- Advisory locks (two-key form, first key a class of this file):
--   1229213506 ('IDOB')  publish: (topic, aggregate), held until commit,
--                        so that the messages of one aggregate take their
--                        positions in commit order
--   1229213510 ('IDOF')  fetch: (consumer, topic, aggregate), tried, held
--                        by a fetch until its transaction ends

-- Settings per topic.  A topic without a row relays through the table and
-- keeps acknowledged messages 7 days.  Readable by everybody (idem_publish
-- reads it; a topic's settings are no secret); written by
-- idem_outbox_topic, which is not public.
CREATE TABLE @extschema@.idem_outbox_topics (
    topic      pg_catalog.text COLLATE pg_catalog."C" NOT NULL,
    relay      pg_catalog.text COLLATE pg_catalog."C" NOT NULL DEFAULT 'table',
    retention  pg_catalog.interval NOT NULL DEFAULT '7 days',
    updated_at pg_catalog.timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT idem_outbox_topics_pkey PRIMARY KEY (topic),
    CONSTRAINT idem_outbox_topics_relay_check CHECK
        (relay OPERATOR(pg_catalog.=) ANY ('{table,message,both}'::pg_catalog.text[])),
    CONSTRAINT idem_outbox_topics_retention_check CHECK
        (retention OPERATOR(pg_catalog.>=) '0'::pg_catalog.interval)
);

COMMENT ON TABLE @extschema@.idem_outbox_topics IS
    'Outbox settings per topic: relay (table, message or both) and retention of acknowledged messages; a topic without a row uses table and 7 days';

REVOKE ALL ON TABLE @extschema@.idem_outbox_topics FROM PUBLIC;
GRANT SELECT ON TABLE @extschema@.idem_outbox_topics TO PUBLIC;

SELECT pg_catalog.pg_extension_config_dump('@extschema@.idem_outbox_topics', '');

-- The messages.  Shaped for Debezium's outbox event router (id uuid,
-- topic as its route.by.field, aggregate as its table.field.event.key,
-- type, payload jsonb; docs/outbox.md gives the connector settings), read
-- by the pull API below.  Rows are only ever inserted (by idem_publish)
-- and deleted (by idem_outbox_purge), never updated: the state of each
-- consumer lives in idem_outbox_deliveries.
CREATE TABLE @extschema@.idem_outbox (
    id         pg_catalog.uuid NOT NULL,
    topic      pg_catalog.text COLLATE pg_catalog."C" NOT NULL,
    aggregate  pg_catalog.text COLLATE pg_catalog."C",
    type       pg_catalog.text,
    payload    pg_catalog.jsonb,
    headers    pg_catalog.jsonb,
    scope      pg_catalog.text COLLATE pg_catalog."C",
    key        pg_catalog.text COLLATE pg_catalog."C" NOT NULL,
    seq        pg_catalog.int4 NOT NULL,
    position   pg_catalog.int8 GENERATED BY DEFAULT AS IDENTITY
               (SEQUENCE NAME @extschema@.idem_outbox_position_seq CACHE 1),
    xact_id    pg_catalog.xid8 NOT NULL,
    created_at pg_catalog.timestamptz NOT NULL,
    CONSTRAINT idem_outbox_pkey PRIMARY KEY (id)
);

-- Consumers scan from their horizon (a transaction id) up; the purge
-- scans each topic from its oldest transaction.
CREATE INDEX idem_outbox_topic_xact_idx
    ON @extschema@.idem_outbox (topic, xact_id);

-- A fetch reads one aggregate's messages above its group's horizon, then
-- puts them in position order: the cost of a run is the aggregate's
-- backlog, not the topic's.  Messages without an aggregate are runs of
-- their own, found by the index above.
CREATE INDEX idem_outbox_topic_aggregate_idx
    ON @extschema@.idem_outbox (topic, aggregate, xact_id)
    WHERE aggregate IS NOT NULL;

COMMENT ON TABLE @extschema@.idem_outbox IS
    'Messages published with idem_publish, one row per message id; exists if and only if the publishing transaction committed';
COMMENT ON COLUMN @extschema@.idem_outbox.id IS
    'Message id: idem_outbox_id(topic, key, scope, seq), the same for every publication of the same claim (or explicit key), topic and seq';
COMMENT ON COLUMN @extschema@.idem_outbox.aggregate IS
    'Ordering key: the messages of one (topic, aggregate) are delivered in commit order; Debezium''s event key';
COMMENT ON COLUMN @extschema@.idem_outbox.scope IS
    'Scope of the claim the message was published for; NULL for a message published with an explicit key';
COMMENT ON COLUMN @extschema@.idem_outbox.key IS
    'Key of the claim the message was published for, or the explicit key';
COMMENT ON COLUMN @extschema@.idem_outbox.position IS
    'Order of publication; within one (topic, aggregate) it is the commit order';
COMMENT ON COLUMN @extschema@.idem_outbox.xact_id IS
    'Top-level transaction id of the publication, as pg_current_xact_id() returns it';
COMMENT ON COLUMN @extschema@.idem_outbox.created_at IS
    'Start of the publishing transaction (now())';

REVOKE ALL ON TABLE @extschema@.idem_outbox FROM PUBLIC;
REVOKE ALL ON SEQUENCE @extschema@.idem_outbox_position_seq FROM PUBLIC;

SELECT pg_catalog.pg_extension_config_dump('@extschema@.idem_outbox', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.idem_outbox_position_seq', '');

-- Consumer groups and the topics they read.  horizon: every message of the
-- topic published by a transaction whose id is below it is acknowledged
-- by the consumer (or predates the subscription); it only grows.
CREATE TABLE @extschema@.idem_outbox_subscriptions (
    consumer   pg_catalog.text COLLATE pg_catalog."C" NOT NULL,
    topic      pg_catalog.text COLLATE pg_catalog."C" NOT NULL,
    horizon    pg_catalog.xid8 NOT NULL,
    created_at pg_catalog.timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT idem_outbox_subscriptions_pkey PRIMARY KEY (consumer, topic)
);

COMMENT ON TABLE @extschema@.idem_outbox_subscriptions IS
    'Consumer groups of the pull API and their topics (idem_outbox_subscribe); horizon: messages of transactions below it are acknowledged';

REVOKE ALL ON TABLE @extschema@.idem_outbox_subscriptions FROM PUBLIC;

SELECT pg_catalog.pg_extension_config_dump('@extschema@.idem_outbox_subscriptions', '');

-- One row per message handed out to (or acknowledged by) a consumer group,
-- at or above its horizon; rows below it are deleted as the horizon moves.
CREATE TABLE @extschema@.idem_outbox_deliveries (
    consumer     pg_catalog.text COLLATE pg_catalog."C" NOT NULL,
    id           pg_catalog.uuid NOT NULL,
    topic        pg_catalog.text COLLATE pg_catalog."C" NOT NULL,
    xact_id      pg_catalog.xid8 NOT NULL,
    attempts     pg_catalog.int4 NOT NULL DEFAULT 0,
    leased_until pg_catalog.timestamptz,
    acked_at     pg_catalog.timestamptz,
    CONSTRAINT idem_outbox_deliveries_pkey PRIMARY KEY (consumer, id)
);

COMMENT ON TABLE @extschema@.idem_outbox_deliveries IS
    'Messages handed out by idem_outbox_fetch (leased_until, attempts) or acknowledged (acked_at), per consumer group';

REVOKE ALL ON TABLE @extschema@.idem_outbox_deliveries FROM PUBLIC;

SELECT pg_catalog.pg_extension_config_dump('@extschema@.idem_outbox_deliveries', '');

--------------------------------------------------------------------------
-- Message ids and the claims of the current transaction
--------------------------------------------------------------------------

-- A UUID (version 8, RFC 9562): 120 bits of the SHA-256 of a string of
-- the arguments, each prefixed with its length in characters, in UTF-8,
-- so that the same arguments give the same id in every database.  scope
-- NULL: an explicit key (a name space apart from every claim's).  One
-- expression, so that the planner inlines it.
CREATE FUNCTION @extschema@.idem_outbox_id(
    topic pg_catalog.text,
    key pg_catalog.text,
    scope pg_catalog.text DEFAULT NULL,
    seq pg_catalog.int4 DEFAULT 0)
RETURNS pg_catalog.uuid
LANGUAGE sql STABLE CALLED ON NULL INPUT PARALLEL SAFE
AS $$
    SELECT pg_catalog.overlay(pg_catalog.overlay(pg_catalog.encode(pg_catalog.substr(pg_catalog.sha256(
               pg_catalog.convert_to(
                   'idempotency.outbox.v1'
                   OPERATOR(pg_catalog.||) COALESCE(':claim:' OPERATOR(pg_catalog.||) pg_catalog.length($3)
                                                    OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) $3, ':key')
                   OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) pg_catalog.length($2)
                   OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) $2
                   OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) pg_catalog.length($1)
                   OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) $1
                   OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) $4,
                   'UTF8')), 1, 16), 'hex'),
               '8', 13, 1), '8', 17, 1)::pg_catalog.uuid
$$;

COMMENT ON FUNCTION @extschema@.idem_outbox_id(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.int4) IS
    'The message id idem_publish gives: a UUID from the SHA-256 of topic, key, scope (NULL for an explicit key) and seq; NULL when topic, key or seq is NULL';

GRANT EXECUTE ON FUNCTION @extschema@.idem_outbox_id(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.int4) TO PUBLIC;

-- The full (64-bit) transaction id of the 32-bit xid within 2^31 of near
-- (a transaction id of the current transaction): how the xmin of a row
-- this transaction may have written is given to pg_xact_status.
CREATE FUNCTION @extschema@.idem_xid8_near(x pg_catalog.xid, near pg_catalog.xid8)
RETURNS pg_catalog.xid8
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT ($2::pg_catalog.text::pg_catalog.int8
            OPERATOR(pg_catalog.+) ((($1::pg_catalog.text::pg_catalog.int8
                                     OPERATOR(pg_catalog.-) ($2::pg_catalog.text::pg_catalog.int8 OPERATOR(pg_catalog.%) 4294967296))
                                    OPERATOR(pg_catalog.+) 6442450944) OPERATOR(pg_catalog.%) 4294967296)
            OPERATOR(pg_catalog.-) 2147483648)::pg_catalog.text::pg_catalog.xid8
$$;

COMMENT ON FUNCTION @extschema@.idem_xid8_near(pg_catalog.xid, pg_catalog.xid8) IS
    'Internal (idem_xact_claims, idem_publish): the 64-bit transaction id of the 32-bit x nearest to near';

-- The records the current transaction claimed: written by it (or by one of
-- its subtransactions that did not roll back) through idem_claim,
-- idem_claim_many or idem_begin, with the default ttl.  Found without a C
-- hook: the claim's expires_at is its wall-clock time plus
-- idempotency.default_ttl, between now() + ttl and clock_timestamp() +
-- ttl, a range of the purge index; a row of that range is this
-- transaction's when it was written during it (updated_at) by one of its
-- transaction ids (xmin: the top-level one, or one that is in progress and
-- visible, which only this transaction's own can be).  A claim with a ttl
-- of its own, or one that took over a record that had not expired, is not
-- found: idem_publish then needs scope => and key =>.  (With a C hook
-- noting each true claim, this function would find them all; see
-- docs/outbox.md.)
CREATE FUNCTION @extschema@.idem_xact_claims(
    OUT scope pg_catalog.text,
    OUT key pg_catalog.text)
RETURNS SETOF record
LANGUAGE plpgsql VOLATILE STRICT PARALLEL RESTRICTED
ROWS 1
AS $$
DECLARE
    top pg_catalog.xid8 := pg_catalog.pg_current_xact_id_if_assigned();
    setting pg_catalog.text;
    span pg_catalog.interval;
    lo pg_catalog.timestamptz;
    hi pg_catalog.timestamptz;
BEGIN
    IF top IS NULL THEN
        RETURN;    -- no transaction id: this transaction wrote nothing
    END IF;
    setting := pg_catalog.current_setting('idempotency.default_ttl', true);
    IF setting IS NULL OR setting OPERATOR(pg_catalog.=) '' THEN
        span := '7 days';
    ELSIF pg_catalog.lower(setting) OPERATOR(pg_catalog.=) 'infinity' THEN
        lo := 'infinity';
        hi := 'infinity';
    ELSE
        span := setting::pg_catalog.interval;
    END IF;
    IF lo IS NULL THEN
        lo := pg_catalog.now() OPERATOR(pg_catalog.+) span;
        hi := pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) span;
    END IF;
    RETURN QUERY
        SELECT r.scope::pg_catalog.text, r.key::pg_catalog.text
          FROM @extschema@.idem_records r
         WHERE r.expires_at OPERATOR(pg_catalog.>=) lo
           AND r.expires_at OPERATOR(pg_catalog.<=) hi
           AND CASE WHEN r.updated_at OPERATOR(pg_catalog.<) pg_catalog.now()
                      OR NOT r.status OPERATOR(pg_catalog.=) ANY ('{claimed,in_progress,completed}'::pg_catalog.text[])
                    THEN false
                    WHEN r.xmin OPERATOR(pg_catalog.=) pg_catalog.xid(top) THEN true
                    ELSE COALESCE(pg_catalog.pg_xact_status(@extschema@.idem_xid8_near(r.xmin, top))
                                  OPERATOR(pg_catalog.=) 'in progress', false) END
         ORDER BY 1, 2;
    -- (idem_publish runs the same query inline.)
END
$$;

COMMENT ON FUNCTION @extschema@.idem_xact_claims() IS
    'The (scope, key) records this transaction claimed with the default ttl (idem_claim, idem_claim_many, idem_begin); what idem_publish binds a message to';

--------------------------------------------------------------------------
-- Publishing
--------------------------------------------------------------------------

CREATE FUNCTION @extschema@.idem_publish(
    topic pg_catalog.text,
    payload pg_catalog.jsonb,
    key pg_catalog.text DEFAULT NULL,
    aggregate pg_catalog.text DEFAULT NULL,
    headers pg_catalog.jsonb DEFAULT NULL,
    scope pg_catalog.text DEFAULT NULL,
    type pg_catalog.text DEFAULT NULL,
    seq pg_catalog.int4 DEFAULT 0)
RETURNS pg_catalog.uuid
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
AS $$
DECLARE
    top pg_catalog.xid8;
    c_scope pg_catalog.text := idem_publish.scope;
    c_key pg_catalog.text := idem_publish.key;
    found_scope pg_catalog.text;
    mine pg_catalog.bool;
    nclaims pg_catalog.int4 := 0;
    setting pg_catalog.text;
    span pg_catalog.interval;
    lo pg_catalog.timestamptz;
    hi pg_catalog.timestamptz;
    msg_id pg_catalog.uuid;
    how pg_catalog.text;
    existing pg_catalog.xid8;
BEGIN
    -- Arguments, in order; the detailed checks only when one fails (one
    -- expression on the usual path).
    IF idem_publish.topic IS NULL
       OR pg_catalog.octet_length(idem_publish.topic) OPERATOR(pg_catalog.<) 1
       OR pg_catalog.octet_length(idem_publish.topic) OPERATOR(pg_catalog.>) 128
       OR pg_catalog.octet_length(c_key) OPERATOR(pg_catalog.<) 1
       OR pg_catalog.octet_length(c_key) OPERATOR(pg_catalog.>) 1024
       OR pg_catalog.octet_length(idem_publish.aggregate) OPERATOR(pg_catalog.<) 1
       OR pg_catalog.octet_length(idem_publish.aggregate) OPERATOR(pg_catalog.>) 1024
       OR pg_catalog.jsonb_typeof(idem_publish.headers) OPERATOR(pg_catalog.<>) 'object'
       OR pg_catalog.octet_length(c_scope) OPERATOR(pg_catalog.>) 128
       OR (c_scope IS NOT NULL AND c_key IS NULL)
       OR idem_publish.seq IS NULL OR idem_publish.seq OPERATOR(pg_catalog.<) 0
       OR pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        IF idem_publish.topic IS NULL THEN
            RAISE EXCEPTION 'idem_publish: topic must not be null' USING ERRCODE = '22004';
        END IF;
        IF pg_catalog.octet_length(idem_publish.topic) OPERATOR(pg_catalog.=) 0 THEN
            RAISE EXCEPTION 'idem_publish: topic must not be empty' USING ERRCODE = '22023';
        END IF;
        IF pg_catalog.octet_length(idem_publish.topic) OPERATOR(pg_catalog.>) 128 THEN
            RAISE EXCEPTION 'idem_publish: topic is too long'
                USING ERRCODE = '22001',
                      DETAIL = pg_catalog.format('The topic is %s bytes; the limit is 128 bytes.', pg_catalog.octet_length(idem_publish.topic));
        END IF;
        IF c_key IS NOT NULL THEN
            IF pg_catalog.octet_length(c_key) OPERATOR(pg_catalog.=) 0 THEN
                RAISE EXCEPTION 'idem_publish: key must not be empty' USING ERRCODE = '22023';
            END IF;
            IF pg_catalog.octet_length(c_key) OPERATOR(pg_catalog.>) 1024 THEN
                RAISE EXCEPTION 'idem_publish: key is too long'
                    USING ERRCODE = '22001',
                          DETAIL = pg_catalog.format('The key is %s bytes; the limit is 1024 bytes.', pg_catalog.octet_length(c_key)),
                          HINT = 'Hash long natural keys, for example with sha256(), and use the digest as the key.';
            END IF;
        END IF;
        IF idem_publish.aggregate IS NOT NULL THEN
            IF pg_catalog.octet_length(idem_publish.aggregate) OPERATOR(pg_catalog.=) 0 THEN
                RAISE EXCEPTION 'idem_publish: aggregate must not be empty'
                    USING ERRCODE = '22023', HINT = 'Pass NULL for a message without an aggregate.';
            END IF;
            IF pg_catalog.octet_length(idem_publish.aggregate) OPERATOR(pg_catalog.>) 1024 THEN
                RAISE EXCEPTION 'idem_publish: aggregate is too long'
                    USING ERRCODE = '22001',
                          DETAIL = pg_catalog.format('The aggregate is %s bytes; the limit is 1024 bytes.', pg_catalog.octet_length(idem_publish.aggregate));
            END IF;
        END IF;
        IF idem_publish.headers IS NOT NULL
           AND pg_catalog.jsonb_typeof(idem_publish.headers) OPERATOR(pg_catalog.<>) 'object' THEN
            RAISE EXCEPTION 'idem_publish: headers must be a JSON object'
                USING ERRCODE = '22023',
                      DETAIL = pg_catalog.format('The headers given are a JSON %s.', pg_catalog.jsonb_typeof(idem_publish.headers));
        END IF;
        IF c_scope IS NOT NULL THEN
            IF pg_catalog.octet_length(c_scope) OPERATOR(pg_catalog.>) 128 THEN
                RAISE EXCEPTION 'idem_publish: scope is too long'
                    USING ERRCODE = '22001',
                          DETAIL = pg_catalog.format('The scope is %s bytes; the limit is 128 bytes.', pg_catalog.octet_length(c_scope));
            END IF;
            IF c_key IS NULL THEN
                RAISE EXCEPTION 'idem_publish: key must not be null when scope is given'
                    USING ERRCODE = '22004',
                          HINT = 'Name the claim with scope => and key =>, as given to idem_claim.';
            END IF;
        END IF;
        IF idem_publish.seq IS NULL THEN
            RAISE EXCEPTION 'idem_publish: seq must not be null' USING ERRCODE = '22004';
        END IF;
        IF idem_publish.seq OPERATOR(pg_catalog.<) 0 THEN
            RAISE EXCEPTION 'idem_publish: seq must not be negative'
                USING ERRCODE = '22023', DETAIL = pg_catalog.format('The seq given was %s.', idem_publish.seq);
        END IF;
        IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
            RAISE EXCEPTION 'cannot execute idem_publish() in a read-only transaction' USING ERRCODE = '25006';
        END IF;

    END IF;

    -- The claim the message belongs to.
    IF c_scope IS NOT NULL THEN
        -- Named: it must be a record this transaction wrote (see
        -- idem_xact_claims for how that is told).
        top := pg_catalog.pg_current_xact_id_if_assigned();
        IF top IS NOT NULL THEN
            SELECT CASE WHEN r2.updated_at OPERATOR(pg_catalog.<) pg_catalog.now()
                          OR NOT r2.status OPERATOR(pg_catalog.=) ANY ('{claimed,in_progress,completed}'::pg_catalog.text[])
                        THEN false
                        WHEN r2.xmin OPERATOR(pg_catalog.=) pg_catalog.xid(top) THEN true
                        ELSE COALESCE(pg_catalog.pg_xact_status(@extschema@.idem_xid8_near(r2.xmin, top))
                                      OPERATOR(pg_catalog.=) 'in progress', false) END
              INTO mine
              FROM @extschema@.idem_records r2
             WHERE r2.scope OPERATOR(pg_catalog.=) (c_scope COLLATE pg_catalog."C")
               AND r2.key OPERATOR(pg_catalog.=) (c_key COLLATE pg_catalog."C");
        END IF;
        IF mine IS NULL OR NOT mine THEN
            RAISE EXCEPTION 'idem_publish: this transaction holds no claim of the key'
                USING ERRCODE = 'ID020',
                      DETAIL = pg_catalog.format('Key "%s" in scope "%s" was not claimed by this transaction: idem_claim returned false for it, or was not called.', c_key, c_scope),
                      HINT = 'Publish only after idem_claim() returned true, in the same transaction; a duplicate has published its message already.';
        END IF;
    ELSIF c_key IS NULL THEN
        -- Found: the one claim of this transaction, as idem_xact_claims()
        -- finds it (the same query, inline: a call costs as much again).
        top := pg_catalog.pg_current_xact_id_if_assigned();
        IF top IS NOT NULL THEN
            setting := pg_catalog.current_setting('idempotency.default_ttl', true);
            IF setting IS NULL OR setting OPERATOR(pg_catalog.=) '' THEN
                span := '7 days';
            ELSIF pg_catalog.lower(setting) OPERATOR(pg_catalog.=) 'infinity' THEN
                lo := 'infinity';
                hi := 'infinity';
            ELSE
                span := setting::pg_catalog.interval;
            END IF;
            IF lo IS NULL THEN
                lo := pg_catalog.now() OPERATOR(pg_catalog.+) span;
                hi := pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) span;
            END IF;
            SELECT pg_catalog.count(*)::pg_catalog.int4, pg_catalog.min(x.scope), pg_catalog.min(x.key)
              INTO nclaims, found_scope, c_key
              FROM (SELECT r.scope, r.key
                      FROM @extschema@.idem_records r
                     WHERE r.expires_at OPERATOR(pg_catalog.>=) lo
                       AND r.expires_at OPERATOR(pg_catalog.<=) hi
                       AND CASE WHEN r.updated_at OPERATOR(pg_catalog.<) pg_catalog.now()
                                  OR NOT r.status OPERATOR(pg_catalog.=) ANY ('{claimed,in_progress,completed}'::pg_catalog.text[])
                                THEN false
                                WHEN r.xmin OPERATOR(pg_catalog.=) pg_catalog.xid(top) THEN true
                                ELSE COALESCE(pg_catalog.pg_xact_status(@extschema@.idem_xid8_near(r.xmin, top))
                                              OPERATOR(pg_catalog.=) 'in progress', false) END
                     LIMIT 2) x;
        END IF;
        IF nclaims OPERATOR(pg_catalog.=) 0 THEN
            RAISE EXCEPTION 'idem_publish: this transaction holds no claim'
                USING ERRCODE = 'ID020',
                      DETAIL = 'No record claimed with the default ttl was written by this transaction: idem_claim returned false, or was not called.',
                      HINT = 'Publish only after idem_claim() returned true, in the same transaction; for a claim with a ttl of its own, name it with scope => and key =>; without a claim, pass key =>.';
        END IF;
        IF nclaims OPERATOR(pg_catalog.>) 1 THEN
            RAISE EXCEPTION 'idem_publish: this transaction holds several claims'
                USING ERRCODE = 'ID020',
                      DETAIL = 'The message id cannot be derived from one claim.',
                      HINT = 'Name the claim the message belongs to with scope => and key =>.';
        END IF;
        c_scope := found_scope;
    END IF;

    msg_id := @extschema@.idem_outbox_id(idem_publish.topic, c_key, c_scope, idem_publish.seq);

    -- One statement on the usual path: unless the topic relays by logical
    -- messages only, take the aggregate's lock (held until this
    -- transaction ends, so that the messages of one aggregate take their
    -- positions in commit order: the position is drawn under it) and
    -- insert; the topic's relay comes back with the row.
    INSERT INTO @extschema@.idem_outbox AS o
           (id, topic, aggregate, type, payload, headers, scope, key, seq, xact_id, created_at)
    SELECT msg_id, idem_publish.topic, idem_publish.aggregate, idem_publish.type,
           idem_publish.payload, idem_publish.headers, c_scope, c_key, idem_publish.seq,
           pg_catalog.pg_current_xact_id(), pg_catalog.now()
     WHERE NOT EXISTS (SELECT FROM @extschema@.idem_outbox_topics t
                        WHERE t.topic OPERATOR(pg_catalog.=) (idem_publish.topic COLLATE pg_catalog."C")
                          AND t.relay OPERATOR(pg_catalog.=) 'message')
       AND (idem_publish.aggregate IS NULL
            OR EXISTS (SELECT FROM pg_catalog.pg_advisory_xact_lock(1229213506,
                           pg_catalog.hashtext(idem_publish.topic OPERATOR(pg_catalog.||) pg_catalog.chr(10)
                                               OPERATOR(pg_catalog.||) idem_publish.aggregate))))
    ON CONFLICT (id) DO NOTHING
    RETURNING (SELECT t.relay FROM @extschema@.idem_outbox_topics t
                WHERE t.topic OPERATOR(pg_catalog.=) o.topic)
         INTO how;
    IF FOUND THEN
        IF how IS NULL OR how OPERATOR(pg_catalog.=) 'table' THEN
            RETURN msg_id;
        END IF;
    ELSE
        SELECT t.relay INTO how FROM @extschema@.idem_outbox_topics t
         WHERE t.topic OPERATOR(pg_catalog.=) (idem_publish.topic COLLATE pg_catalog."C");
        IF how IS NULL OR how OPERATOR(pg_catalog.<>) 'message' THEN
            -- A message with this id is in the table.
            SELECT o.xact_id INTO existing FROM @extschema@.idem_outbox o
             WHERE o.id OPERATOR(pg_catalog.=) msg_id;
            IF existing OPERATOR(pg_catalog.=) pg_catalog.pg_current_xact_id() THEN
                RAISE EXCEPTION 'idem_publish: message already published by this transaction'
                    USING ERRCODE = 'ID021',
                          DETAIL = pg_catalog.format('Message %s (topic "%s", seq %s) was published earlier in this transaction.', msg_id, idem_publish.topic, idem_publish.seq),
                          HINT = 'Give each message of one claim and topic its own seq => 0, 1, 2, ...';
            END IF;
            -- Published by an earlier transaction: a duplicate, nothing written.
            RETURN NULL;
        END IF;
    END IF;

    -- Relayed (also) by a logical decoding message.
    IF pg_catalog.current_setting('wal_level') OPERATOR(pg_catalog.<>) 'logical' THEN
        RAISE EXCEPTION 'idem_publish: topic "%" relays through logical decoding messages, which need wal_level = logical', idem_publish.topic
            USING ERRCODE = '55000',
                  DETAIL = pg_catalog.format('wal_level is %s; the message would be decoded by nobody.', pg_catalog.current_setting('wal_level')),
                  HINT = 'Set wal_level = logical and restart, or relay the topic through the table: SELECT idem_outbox_topic(topic, relay => ''table'').';
    END IF;
    PERFORM pg_catalog.pg_logical_emit_message(true, 'idempotency.outbox',
        pg_catalog.jsonb_build_object(
            'id', msg_id, 'topic', idem_publish.topic, 'aggregate', idem_publish.aggregate,
            'type', idem_publish.type, 'headers', idem_publish.headers,
            'payload', idem_publish.payload, 'scope', c_scope, 'key', c_key,
            'seq', idem_publish.seq)::pg_catalog.text);
    RETURN msg_id;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_publish(pg_catalog.text, pg_catalog.jsonb, pg_catalog.text, pg_catalog.text, pg_catalog.jsonb, pg_catalog.text, pg_catalog.text, pg_catalog.int4) IS
    'Publish a message in the current transaction (it exists if and only if the transaction commits), bound to this transaction''s claim or to an explicit key; returns its id, NULL when an earlier transaction published it';

-- Settings of a topic (owner only: they change every publisher's relay).
CREATE FUNCTION @extschema@.idem_outbox_topic(
    topic pg_catalog.text,
    relay pg_catalog.text DEFAULT NULL,
    retention pg_catalog.interval DEFAULT NULL)
RETURNS pg_catalog.void
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
AS $$
BEGIN
    IF idem_outbox_topic.topic IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_topic: topic must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.octet_length(idem_outbox_topic.topic) OPERATOR(pg_catalog.=) 0 THEN
        RAISE EXCEPTION 'idem_outbox_topic: topic must not be empty' USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.octet_length(idem_outbox_topic.topic) OPERATOR(pg_catalog.>) 128 THEN
        RAISE EXCEPTION 'idem_outbox_topic: topic is too long'
            USING ERRCODE = '22001',
                  DETAIL = pg_catalog.format('The topic is %s bytes; the limit is 128 bytes.', pg_catalog.octet_length(idem_outbox_topic.topic));
    END IF;
    IF idem_outbox_topic.relay IS NOT NULL
       AND NOT idem_outbox_topic.relay OPERATOR(pg_catalog.=) ANY ('{table,message,both}'::pg_catalog.text[]) THEN
        RAISE EXCEPTION 'idem_outbox_topic: unknown relay "%"', idem_outbox_topic.relay
            USING ERRCODE = '22023',
                  DETAIL = 'The relay is ''table'' (the table idem_outbox), ''message'' (a logical decoding message) or ''both''.';
    END IF;
    IF idem_outbox_topic.retention OPERATOR(pg_catalog.<) '0'::pg_catalog.interval THEN
        RAISE EXCEPTION 'idem_outbox_topic: retention must not be negative'
            USING ERRCODE = '22023', DETAIL = pg_catalog.format('The retention given was %s.', idem_outbox_topic.retention);
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idem_outbox_topic() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    INSERT INTO @extschema@.idem_outbox_topics AS t (topic, relay, retention, updated_at)
    VALUES (idem_outbox_topic.topic,
            COALESCE(idem_outbox_topic.relay, 'table'),
            COALESCE(idem_outbox_topic.retention, '7 days'::pg_catalog.interval),
            pg_catalog.now())
    ON CONFLICT ON CONSTRAINT idem_outbox_topics_pkey DO UPDATE
       SET relay = COALESCE(idem_outbox_topic.relay, t.relay),
           retention = COALESCE(idem_outbox_topic.retention, t.retention),
           updated_at = pg_catalog.now();
END
$$;

COMMENT ON FUNCTION @extschema@.idem_outbox_topic(pg_catalog.text, pg_catalog.text, pg_catalog.interval) IS
    'Set the relay (table, message or both) and the retention of acknowledged messages of a topic; NULL keeps the current setting';

REVOKE ALL ON FUNCTION @extschema@.idem_outbox_topic(pg_catalog.text, pg_catalog.text, pg_catalog.interval) FROM PUBLIC;

--------------------------------------------------------------------------
-- The pull API: consumer groups, fetch with leases, acknowledgements
--------------------------------------------------------------------------

CREATE FUNCTION @extschema@.idem_outbox_subscribe(
    consumer pg_catalog.text,
    topic pg_catalog.text,
    from_start pg_catalog.bool DEFAULT false)
RETURNS pg_catalog.bool
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
AS $$
DECLARE
    h pg_catalog.xid8;
BEGIN
    IF idem_outbox_subscribe.consumer IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_subscribe: consumer must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.octet_length(idem_outbox_subscribe.consumer) OPERATOR(pg_catalog.=) 0 THEN
        RAISE EXCEPTION 'idem_outbox_subscribe: consumer must not be empty' USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.octet_length(idem_outbox_subscribe.consumer) OPERATOR(pg_catalog.>) 120 THEN
        RAISE EXCEPTION 'idem_outbox_subscribe: consumer is too long'
            USING ERRCODE = '22001',
                  DETAIL = pg_catalog.format('The consumer is %s bytes; the limit is 120 bytes.', pg_catalog.octet_length(idem_outbox_subscribe.consumer));
    END IF;
    IF idem_outbox_subscribe.topic IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_subscribe: topic must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.octet_length(idem_outbox_subscribe.topic) OPERATOR(pg_catalog.=) 0 THEN
        RAISE EXCEPTION 'idem_outbox_subscribe: topic must not be empty' USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.octet_length(idem_outbox_subscribe.topic) OPERATOR(pg_catalog.>) 128 THEN
        RAISE EXCEPTION 'idem_outbox_subscribe: topic is too long'
            USING ERRCODE = '22001',
                  DETAIL = pg_catalog.format('The topic is %s bytes; the limit is 128 bytes.', pg_catalog.octet_length(idem_outbox_subscribe.topic));
    END IF;
    IF idem_outbox_subscribe.from_start IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_subscribe: from_start must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idem_outbox_subscribe() in a read-only transaction' USING ERRCODE = '25006';
    END IF;

    -- From the start: every message still in the table.  Otherwise the
    -- messages committed from now on: transactions below the snapshot's
    -- xmin have ended, and the messages at or above it that this statement
    -- already sees count as acknowledged.  What this statement sees is a
    -- prefix of every aggregate (their positions are in commit order), so
    -- the consumer gets a suffix of each.
    INSERT INTO @extschema@.idem_outbox_subscriptions AS s (consumer, topic, horizon, created_at)
    VALUES (idem_outbox_subscribe.consumer, idem_outbox_subscribe.topic,
            CASE WHEN idem_outbox_subscribe.from_start THEN '0'::pg_catalog.xid8
                 ELSE pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot()) END,
            pg_catalog.now())
    ON CONFLICT ON CONSTRAINT idem_outbox_subscriptions_pkey DO NOTHING
    RETURNING s.horizon INTO h;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF NOT idem_outbox_subscribe.from_start THEN
        INSERT INTO @extschema@.idem_outbox_deliveries (consumer, id, topic, xact_id, attempts, acked_at)
        SELECT idem_outbox_subscribe.consumer, o.id, o.topic, o.xact_id, 0, pg_catalog.now()
          FROM @extschema@.idem_outbox o
         WHERE o.topic OPERATOR(pg_catalog.=) (idem_outbox_subscribe.topic COLLATE pg_catalog."C")
           AND o.xact_id OPERATOR(pg_catalog.>=) h
        ON CONFLICT ON CONSTRAINT idem_outbox_deliveries_pkey DO NOTHING;
    END IF;
    RETURN true;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_outbox_subscribe(pg_catalog.text, pg_catalog.text, pg_catalog.bool) IS
    'Subscribe consumer group consumer to topic: the messages committed from now on, or every message still kept (from_start); false when it was subscribed already';

CREATE FUNCTION @extschema@.idem_outbox_unsubscribe(
    consumer pg_catalog.text,
    topic pg_catalog.text)
RETURNS pg_catalog.bool
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
AS $$
BEGIN
    IF idem_outbox_unsubscribe.consumer IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_unsubscribe: consumer must not be null' USING ERRCODE = '22004';
    END IF;
    IF idem_outbox_unsubscribe.topic IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_unsubscribe: topic must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idem_outbox_unsubscribe() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    DELETE FROM @extschema@.idem_outbox_subscriptions s
     WHERE s.consumer OPERATOR(pg_catalog.=) (idem_outbox_unsubscribe.consumer COLLATE pg_catalog."C")
       AND s.topic OPERATOR(pg_catalog.=) (idem_outbox_unsubscribe.topic COLLATE pg_catalog."C");
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    DELETE FROM @extschema@.idem_outbox_deliveries d
     WHERE d.consumer OPERATOR(pg_catalog.=) (idem_outbox_unsubscribe.consumer COLLATE pg_catalog."C")
       AND d.topic OPERATOR(pg_catalog.=) (idem_outbox_unsubscribe.topic COLLATE pg_catalog."C");
    RETURN true;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_outbox_unsubscribe(pg_catalog.text, pg_catalog.text) IS
    'End the subscription of consumer group consumer to topic and forget its deliveries (its messages no longer hold back the purge); false when there was none';

-- Move the horizons of consumer's subscriptions (every consumer's when
-- NULL) up to the oldest message it has not acknowledged, bounded by the
-- oldest running transaction (whose messages may still come), and forget
-- the deliveries below.  A subscription another session is moving is
-- skipped.  Used by idem_outbox_fetch and idem_outbox_purge.  Deliveries
-- are probed by primary key one message at a time (see idem_outbox_fetch).
CREATE FUNCTION @extschema@.idem_outbox_advance(consumer pg_catalog.text)
RETURNS pg_catalog.void
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
AS $$
DECLARE
    s record;
    h pg_catalog.xid8;
BEGIN
    FOR s IN
        SELECT s2.consumer, s2.topic, s2.horizon
          FROM @extschema@.idem_outbox_subscriptions s2
         WHERE idem_outbox_advance.consumer IS NULL
            OR s2.consumer OPERATOR(pg_catalog.=) (idem_outbox_advance.consumer COLLATE pg_catalog."C")
         ORDER BY s2.consumer, s2.topic
           FOR UPDATE SKIP LOCKED
    LOOP
        SELECT LEAST(pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot()),
                     (SELECT o.xact_id FROM @extschema@.idem_outbox o
                       WHERE o.topic OPERATOR(pg_catalog.=) s.topic
                         AND o.xact_id OPERATOR(pg_catalog.>=) s.horizon
                         AND (SELECT d.acked_at FROM @extschema@.idem_outbox_deliveries d
                               WHERE d.consumer OPERATOR(pg_catalog.=) s.consumer
                                 AND d.id OPERATOR(pg_catalog.=) o.id) IS NULL
                       ORDER BY o.xact_id LIMIT 1))
          INTO h;
        IF h OPERATOR(pg_catalog.>) s.horizon THEN
            UPDATE @extschema@.idem_outbox_subscriptions s3 SET horizon = h
             WHERE s3.consumer OPERATOR(pg_catalog.=) s.consumer
               AND s3.topic OPERATOR(pg_catalog.=) s.topic;
            DELETE FROM @extschema@.idem_outbox_deliveries d
             WHERE d.consumer OPERATOR(pg_catalog.=) s.consumer
               AND d.topic OPERATOR(pg_catalog.=) s.topic
               AND d.xact_id OPERATOR(pg_catalog.<) h;
        END IF;
    END LOOP;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_outbox_advance(pg_catalog.text) IS
    'Internal (idem_outbox_fetch, idem_outbox_purge): move the horizons of consumer''s subscriptions (all when NULL) past what it acknowledged';

CREATE FUNCTION @extschema@.idem_outbox_fetch(
    consumer pg_catalog.text,
    max pg_catalog.int4 DEFAULT 100,
    lease pg_catalog.interval DEFAULT '30 seconds')
RETURNS TABLE (
    id pg_catalog.uuid,
    topic pg_catalog.text,
    aggregate pg_catalog.text,
    type pg_catalog.text,
    payload pg_catalog.jsonb,
    headers pg_catalog.jsonb,
    created_at pg_catalog.timestamptz,
    attempts pg_catalog.int4)
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
ROWS 100
AS $$
DECLARE
    now_ pg_catalog.timestamptz;
    until_ pg_catalog.timestamptz;
    taken pg_catalog.uuid[] := '{}';
    got pg_catalog.uuid[];
    ids pg_catalog.uuid[];
    sub record;
    cand record;
    seen pg_catalog.text[];
    run_key pg_catalog.text;
    last_x pg_catalog.xid8;
    last_pos pg_catalog.int8;
    n pg_catalog.int4;
    chunk pg_catalog.int4;
BEGIN
    IF idem_outbox_fetch.consumer IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_fetch: consumer must not be null' USING ERRCODE = '22004';
    END IF;
    IF idem_outbox_fetch.max IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_fetch: max must not be null' USING ERRCODE = '22004';
    END IF;
    IF idem_outbox_fetch.max OPERATOR(pg_catalog.<) 1 THEN
        RAISE EXCEPTION 'idem_outbox_fetch: max must be at least 1'
            USING ERRCODE = '22023', DETAIL = pg_catalog.format('The max given was %s.', idem_outbox_fetch.max);
    END IF;
    IF idem_outbox_fetch.lease IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_fetch: lease must not be null' USING ERRCODE = '22004';
    END IF;
    IF idem_outbox_fetch.lease OPERATOR(pg_catalog.<=) '0'::pg_catalog.interval THEN
        RAISE EXCEPTION 'idem_outbox_fetch: lease must be positive'
            USING ERRCODE = '22023', DETAIL = pg_catalog.format('The lease given was %s.', idem_outbox_fetch.lease);
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idem_outbox_fetch() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    IF pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed' THEN
        RAISE EXCEPTION 'idem_outbox_fetch: cannot fetch in a REPEATABLE READ or SERIALIZABLE transaction'
            USING ERRCODE = '25000',
                  DETAIL = 'Each step must see what other consumers committed since the previous one.',
                  HINT = 'Call idem_outbox_fetch in autocommit or in a READ COMMITTED transaction.';
    END IF;
    IF NOT EXISTS (SELECT FROM @extschema@.idem_outbox_subscriptions s
                    WHERE s.consumer OPERATOR(pg_catalog.=) (idem_outbox_fetch.consumer COLLATE pg_catalog."C")) THEN
        RAISE EXCEPTION 'idem_outbox_fetch: consumer "%" is not subscribed to any topic', idem_outbox_fetch.consumer
            USING ERRCODE = '42704',
                  HINT = 'Subscribe it first: SELECT idem_outbox_subscribe(consumer, topic).';
    END IF;
    now_ := pg_catalog.clock_timestamp();
    until_ := now_ OPERATOR(pg_catalog.+) idem_outbox_fetch.lease;

    PERFORM @extschema@.idem_outbox_advance(idem_outbox_fetch.consumer);

    -- The runs: per (topic, aggregate), the consumer's unacknowledged
    -- messages in position order (commit order); a message without an
    -- aggregate is a run of its own.  Every unacknowledged message is at or
    -- above the horizon.  The runs are found from the horizon up, in
    -- transaction order (the index on (topic, xact_id)), chunk by chunk,
    -- among the messages neither acknowledged nor leased to someone else,
    -- until max messages are taken: the cost follows what is handed out
    -- (and what is leased or acknowledged above the horizon), not the
    -- backlog.  Topics in the order of their horizons (the oldest
    -- unacknowledged first).  A message's delivery is looked up by the
    -- primary key, one message at a time (scalar subqueries, LATERAL ...
    -- LIMIT 1), never as a join: planned on the statistics of new tables,
    -- such a join read all of a group's deliveries for every message.
    chunk := GREATEST(idem_outbox_fetch.max OPERATOR(pg_catalog.*) 2, 200);
    <<topics>>
    FOR sub IN
        SELECT s.topic, s.horizon
          FROM @extschema@.idem_outbox_subscriptions s
         WHERE s.consumer OPERATOR(pg_catalog.=) (idem_outbox_fetch.consumer COLLATE pg_catalog."C")
         ORDER BY s.horizon, s.topic
    LOOP
        seen := '{}';
        last_x := sub.horizon;
        last_pos := -1;
        LOOP
            n := 0;
            FOR cand IN
                SELECT o.id, o.aggregate, o.xact_id, o.position
                  FROM @extschema@.idem_outbox o
                 WHERE o.topic OPERATOR(pg_catalog.=) (sub.topic COLLATE pg_catalog."C")
                   AND o.xact_id OPERATOR(pg_catalog.>=) last_x
                   AND (o.xact_id OPERATOR(pg_catalog.>) last_x OR o.position OPERATOR(pg_catalog.>) last_pos)
                   AND NOT COALESCE((
                       SELECT d.acked_at IS NOT NULL OR d.leased_until OPERATOR(pg_catalog.>) now_
                         FROM @extschema@.idem_outbox_deliveries d
                        WHERE d.consumer OPERATOR(pg_catalog.=) (idem_outbox_fetch.consumer COLLATE pg_catalog."C")
                          AND d.id OPERATOR(pg_catalog.=) o.id), false)
                 ORDER BY o.xact_id, o.position
                 LIMIT chunk
            LOOP
                n := n OPERATOR(pg_catalog.+) 1;
                last_x := cand.xact_id;
                last_pos := cand.position;
                run_key := CASE WHEN cand.aggregate IS NULL THEN 'i' OPERATOR(pg_catalog.||) cand.id::pg_catalog.text
                                ELSE 'a' OPERATOR(pg_catalog.||) cand.aggregate END;
                CONTINUE WHEN run_key OPERATOR(pg_catalog.=) ANY (seen);
                seen := seen OPERATOR(pg_catalog.||) run_key;
                -- One fetch at a time per run (others skip it), then the run
                -- as it is now (a new snapshot: what other fetches and
                -- acknowledgements committed meanwhile): acknowledged
                -- messages drop out, and it is taken up to the first message
                -- leased to someone else.
                CONTINUE WHEN NOT pg_catalog.pg_try_advisory_xact_lock(1229213510,
                    pg_catalog.hashtext(idem_outbox_fetch.consumer OPERATOR(pg_catalog.||) pg_catalog.chr(10)
                                        OPERATOR(pg_catalog.||) sub.topic OPERATOR(pg_catalog.||) pg_catalog.chr(10)
                                        OPERATOR(pg_catalog.||) COALESCE(cand.aggregate, cand.id::pg_catalog.text)));
                IF cand.aggregate IS NULL THEN
                    ids := ARRAY[cand.id];
                ELSE
                    -- The aggregate's messages above the horizon (the index
                    -- on (topic, aggregate, xact_id)), sorted by position
                    -- (OFFSET 0 keeps the sort below the filter), then the
                    -- acknowledged ones skipped one probe at a time (a
                    -- scalar subquery, not a join: it stays lazy, in that
                    -- order) until enough are found.
                    SELECT pg_catalog.array_agg(r.id ORDER BY r.position) INTO ids
                      FROM (SELECT o.id, o.position
                              FROM (SELECT o2.id, o2.position
                                      FROM @extschema@.idem_outbox o2
                                     WHERE o2.topic OPERATOR(pg_catalog.=) (sub.topic COLLATE pg_catalog."C")
                                       AND o2.aggregate OPERATOR(pg_catalog.=) (cand.aggregate COLLATE pg_catalog."C")
                                       AND o2.xact_id OPERATOR(pg_catalog.>=) sub.horizon
                                     ORDER BY o2.position
                                    OFFSET 0) o
                             WHERE (SELECT d.acked_at
                                      FROM @extschema@.idem_outbox_deliveries d
                                     WHERE d.consumer OPERATOR(pg_catalog.=) (idem_outbox_fetch.consumer COLLATE pg_catalog."C")
                                       AND d.id OPERATOR(pg_catalog.=) o.id) IS NULL
                             LIMIT idem_outbox_fetch.max OPERATOR(pg_catalog.-) pg_catalog.cardinality(taken)) r;
                END IF;
                WITH cur AS (
                    SELECT u.id, u.n, o.topic, o.xact_id,
                           pg_catalog.bool_and(d.leased_until IS NULL OR d.leased_until OPERATOR(pg_catalog.<=) now_)
                               OVER (ORDER BY u.n) AS free
                      FROM pg_catalog.unnest(ids) WITH ORDINALITY AS u(id, n)
                      JOIN @extschema@.idem_outbox o ON o.id OPERATOR(pg_catalog.=) u.id
                      LEFT JOIN LATERAL (
                           SELECT d2.leased_until, d2.acked_at
                             FROM @extschema@.idem_outbox_deliveries d2
                            WHERE d2.consumer OPERATOR(pg_catalog.=) (idem_outbox_fetch.consumer COLLATE pg_catalog."C")
                              AND d2.id OPERATOR(pg_catalog.=) u.id
                            LIMIT 1) d ON true
                     WHERE d.acked_at IS NULL
                ), ins AS (
                    INSERT INTO @extschema@.idem_outbox_deliveries AS d
                           (consumer, id, topic, xact_id, attempts, leased_until)
                    SELECT idem_outbox_fetch.consumer, cur.id, cur.topic, cur.xact_id, 1, until_
                      FROM cur
                     WHERE cur.free
                     ORDER BY cur.n
                     LIMIT idem_outbox_fetch.max OPERATOR(pg_catalog.-) pg_catalog.cardinality(taken)
                    ON CONFLICT ON CONSTRAINT idem_outbox_deliveries_pkey DO UPDATE
                       SET attempts = d.attempts OPERATOR(pg_catalog.+) 1,
                           leased_until = excluded.leased_until
                     WHERE d.acked_at IS NULL
                       AND (d.leased_until IS NULL OR d.leased_until OPERATOR(pg_catalog.<=) now_)
                    RETURNING d.id
                )
                SELECT pg_catalog.array_agg(ins.id) INTO got FROM ins;
                IF got IS NOT NULL THEN
                    taken := taken OPERATOR(pg_catalog.||) got;
                END IF;
                EXIT topics WHEN pg_catalog.cardinality(taken) OPERATOR(pg_catalog.>=) idem_outbox_fetch.max;
            END LOOP;
            EXIT WHEN n OPERATOR(pg_catalog.<) chunk;
        END LOOP;
    END LOOP;

    RETURN QUERY
        SELECT o.id, o.topic::pg_catalog.text, o.aggregate::pg_catalog.text, o.type, o.payload,
               o.headers, o.created_at, d.attempts
          FROM @extschema@.idem_outbox o
          JOIN @extschema@.idem_outbox_deliveries d
            ON d.consumer OPERATOR(pg_catalog.=) (idem_outbox_fetch.consumer COLLATE pg_catalog."C")
           AND d.id OPERATOR(pg_catalog.=) o.id
         WHERE o.id OPERATOR(pg_catalog.=) ANY (taken)
         ORDER BY o.position;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_outbox_fetch(pg_catalog.text, pg_catalog.int4, pg_catalog.interval) IS
    'Lease up to max unacknowledged messages of consumer group consumer''s topics for lease, in commit order per aggregate; a message whose lease runs out is handed out again';

CREATE FUNCTION @extschema@.idem_outbox_ack(
    consumer pg_catalog.text,
    id pg_catalog.uuid)
RETURNS pg_catalog.bool
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
AS $$
DECLARE
    m record;
    h pg_catalog.xid8;
BEGIN
    IF idem_outbox_ack.consumer IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_ack: consumer must not be null' USING ERRCODE = '22004';
    END IF;
    IF idem_outbox_ack.id IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_ack: id must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idem_outbox_ack() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    SELECT o.topic, o.xact_id INTO m FROM @extschema@.idem_outbox o
     WHERE o.id OPERATOR(pg_catalog.=) idem_outbox_ack.id;
    IF NOT FOUND THEN
        RETURN false;    -- no such message (any more): purged after its acknowledgement
    END IF;
    SELECT s.horizon INTO h FROM @extschema@.idem_outbox_subscriptions s
     WHERE s.consumer OPERATOR(pg_catalog.=) (idem_outbox_ack.consumer COLLATE pg_catalog."C")
       AND s.topic OPERATOR(pg_catalog.=) m.topic;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'idem_outbox_ack: consumer "%" is not subscribed to topic "%"', idem_outbox_ack.consumer, m.topic
            USING ERRCODE = '42704',
                  DETAIL = pg_catalog.format('Message %s is of topic "%s".', idem_outbox_ack.id, m.topic),
                  HINT = 'Acknowledge with the consumer name given to idem_outbox_fetch.';
    END IF;
    IF m.xact_id OPERATOR(pg_catalog.<) h THEN
        RETURN false;    -- below the horizon: acknowledged already
    END IF;
    INSERT INTO @extschema@.idem_outbox_deliveries AS d
           (consumer, id, topic, xact_id, attempts, leased_until, acked_at)
    VALUES (idem_outbox_ack.consumer, idem_outbox_ack.id, m.topic, m.xact_id, 0, NULL,
            pg_catalog.clock_timestamp())
    ON CONFLICT ON CONSTRAINT idem_outbox_deliveries_pkey DO UPDATE
       SET acked_at = excluded.acked_at, leased_until = NULL
     WHERE d.acked_at IS NULL;
    RETURN FOUND;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_outbox_ack(pg_catalog.text, pg_catalog.uuid) IS
    'Acknowledge message id for consumer group consumer: it is not handed out to the group again; true when this call acknowledged it, false when it was already';

-- What each consumer group has not acknowledged yet.  security_invoker:
-- the caller's privileges on the tables apply, not the owner's.
CREATE VIEW @extschema@.idem_outbox_backlog WITH (security_invoker = true) AS
    SELECT s.consumer::pg_catalog.text AS consumer,
           s.topic::pg_catalog.text AS topic,
           pg_catalog.count(m.id) AS unacknowledged,
           pg_catalog.count(m.id) FILTER (WHERE m.leased_until OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()) AS leased,
           pg_catalog.min(m.created_at) AS oldest,
           pg_catalog.max(m.attempts) AS max_attempts,
           s.horizon
      FROM @extschema@.idem_outbox_subscriptions s
      LEFT JOIN LATERAL (
           SELECT o.id, o.created_at, d.leased_until, d.attempts
             FROM @extschema@.idem_outbox o
             LEFT JOIN @extschema@.idem_outbox_deliveries d
               ON d.consumer OPERATOR(pg_catalog.=) s.consumer
              AND d.id OPERATOR(pg_catalog.=) o.id
            WHERE o.topic OPERATOR(pg_catalog.=) s.topic
              AND o.xact_id OPERATOR(pg_catalog.>=) s.horizon
              AND d.acked_at IS NULL) AS m ON true
     GROUP BY s.consumer, s.topic, s.horizon;

COMMENT ON VIEW @extschema@.idem_outbox_backlog IS
    'Per consumer group and topic: messages not acknowledged yet, how many are leased, the oldest, the most delivery attempts, the horizon';

-- Public: what a role sees is decided by its privileges on the tables.
GRANT SELECT ON @extschema@.idem_outbox_backlog TO PUBLIC;

--------------------------------------------------------------------------
-- Inbox
--------------------------------------------------------------------------

-- The receiving side's dedup: a claim of the message id in the scope
-- 'inbox:' || consumer, in the caller's transaction, as idem_claim.
CREATE FUNCTION @extschema@.idem_inbox(
    consumer pg_catalog.text,
    message_id pg_catalog.uuid,
    ttl pg_catalog.interval DEFAULT NULL,
    fingerprint pg_catalog.text DEFAULT NULL)
RETURNS pg_catalog.bool
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
AS $$
BEGIN
    IF idem_inbox.consumer IS NULL THEN
        RAISE EXCEPTION 'idem_inbox: consumer must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.octet_length(idem_inbox.consumer) OPERATOR(pg_catalog.=) 0 THEN
        RAISE EXCEPTION 'idem_inbox: consumer must not be empty' USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.octet_length(idem_inbox.consumer) OPERATOR(pg_catalog.>) 120 THEN
        RAISE EXCEPTION 'idem_inbox: consumer is too long'
            USING ERRCODE = '22001',
                  DETAIL = pg_catalog.format('The consumer is %s bytes; the limit is 120 bytes.', pg_catalog.octet_length(idem_inbox.consumer));
    END IF;
    IF idem_inbox.message_id IS NULL THEN
        RAISE EXCEPTION 'idem_inbox: message_id must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idem_inbox() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    RETURN @extschema@.idem_claim('inbox:' OPERATOR(pg_catalog.||) idem_inbox.consumer,
                                  idem_inbox.message_id::pg_catalog.text,
                                  idem_inbox.ttl, idem_inbox.fingerprint);
END
$$;

COMMENT ON FUNCTION @extschema@.idem_inbox(pg_catalog.text, pg_catalog.uuid, pg_catalog.interval, pg_catalog.text) IS
    'Claim message_id for consumer in this transaction (idem_claim(''inbox:'' || consumer, message_id)): true the first time, false for a redelivery';

--------------------------------------------------------------------------
-- Retention
--------------------------------------------------------------------------

-- Deletes up to batch_size messages older than their topic's retention
-- that every consumer group subscribed to their topic has acknowledged
-- (they are below every horizon of the topic; the horizons are moved
-- first).  Each topic is read from its oldest transaction, batch_size
-- rows at most; rows another session holds are skipped.
CREATE FUNCTION @extschema@.idem_outbox_purge(batch_size pg_catalog.int4 DEFAULT 10000)
RETURNS pg_catalog.int8
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
AS $$
DECLARE
    t record;
    bound pg_catalog.xid8;
    keep pg_catalog.interval;
    n pg_catalog.int8;
    total pg_catalog.int8 := 0;
    now_ pg_catalog.timestamptz;
BEGIN
    IF idem_outbox_purge.batch_size IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_purge: batch_size must not be null' USING ERRCODE = '22004';
    END IF;
    IF idem_outbox_purge.batch_size OPERATOR(pg_catalog.<) 1 THEN
        RAISE EXCEPTION 'idem_outbox_purge: batch_size must be at least 1'
            USING ERRCODE = '22023', DETAIL = pg_catalog.format('The batch_size given was %s.', idem_outbox_purge.batch_size);
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idem_outbox_purge() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    now_ := pg_catalog.clock_timestamp();

    PERFORM @extschema@.idem_outbox_advance(NULL);

    -- The topics of the table, one index probe each.
    FOR t IN
        WITH RECURSIVE topics(topic) AS (
            (SELECT o.topic FROM @extschema@.idem_outbox o ORDER BY o.topic LIMIT 1)
            UNION ALL
            SELECT (SELECT o.topic FROM @extschema@.idem_outbox o
                     WHERE o.topic OPERATOR(pg_catalog.>) p.topic ORDER BY o.topic LIMIT 1)
              FROM topics p WHERE p.topic IS NOT NULL)
        SELECT x.topic FROM topics x WHERE x.topic IS NOT NULL
    LOOP
        EXIT WHEN total OPERATOR(pg_catalog.>=) idem_outbox_purge.batch_size;
        SELECT c.retention INTO keep FROM @extschema@.idem_outbox_topics c
         WHERE c.topic OPERATOR(pg_catalog.=) t.topic;
        IF keep IS NULL THEN
            keep := '7 days';
        END IF;
        SELECT pg_catalog.min(s.horizon) INTO bound FROM @extschema@.idem_outbox_subscriptions s
         WHERE s.topic OPERATOR(pg_catalog.=) t.topic;
        WITH head AS (
            SELECT o.id, o.created_at FROM @extschema@.idem_outbox o
             WHERE o.topic OPERATOR(pg_catalog.=) t.topic
               AND (bound IS NULL OR o.xact_id OPERATOR(pg_catalog.<) bound)
             ORDER BY o.xact_id
             LIMIT idem_outbox_purge.batch_size OPERATOR(pg_catalog.-) total
               FOR UPDATE SKIP LOCKED
        )
        DELETE FROM @extschema@.idem_outbox o
         USING head
         WHERE o.id OPERATOR(pg_catalog.=) head.id
           AND head.created_at OPERATOR(pg_catalog.<) (now_ OPERATOR(pg_catalog.-) keep);
        GET DIAGNOSTICS n = ROW_COUNT;
        total := total OPERATOR(pg_catalog.+) n;
        keep := NULL;
    END LOOP;
    RETURN total;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_outbox_purge(pg_catalog.int4) IS
    'Delete up to batch_size messages older than their topic''s retention that every consumer group of their topic has acknowledged; returns the number removed';
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
