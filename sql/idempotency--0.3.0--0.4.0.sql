-- idempotency 0.3.0 -> 0.4.0: hardening and access.
--   * idem_machines_trigger is no longer executable by PUBLIC (it checks
--     that it fires on the extension's own idem_machines, too);
--   * idem_grant(role, access) and idem_revoke(role) grant an application
--     role what it needs;
--   * two comments corrected;
--   * idem_distribute() makes the tables Citus tables;
--   * idem_sources(machine, to_state), for guarded UPDATEs on Citus.
-- The same objects are in sql/idempotency_machine.sql,
-- sql/idempotency_grant.sql and sql/idempotency_citus.sql, the sources of a
-- fresh 0.4.0 install.

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

-- Citus: idem_distribute() (sql/idempotency_citus.sql, docs/citus.md).
-- Make the extension's tables Citus tables (idem_records distributed by key,
-- idem_machines a reference table); not public.
CREATE FUNCTION @extschema@.idem_distribute()
RETURNS pg_catalog.void
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp text := (SELECT n.nspname FROM pg_catalog.pg_extension e
                 JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace
                 WHERE e.extname OPERATOR(pg_catalog.=) 'idempotency');
    records regclass;
    machines regclass;
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
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_dist_partition p
                   WHERE p.logicalrelid OPERATOR(pg_catalog.=) records) THEN
        PERFORM pg_catalog.create_distributed_table(records, 'key');
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

COMMENT ON FUNCTION @extschema@.idem_distribute() IS
    'Citus: distribute idem_records by key and make idem_machines a reference table (docs/citus.md)';

REVOKE ALL ON FUNCTION @extschema@.idem_distribute() FROM PUBLIC;

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
