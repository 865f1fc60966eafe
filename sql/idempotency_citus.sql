--------------------------------------------------------------------------
-- Citus (docs/citus.md)
--------------------------------------------------------------------------

-- Make the extension's tables Citus tables, as far as what holds on Citus
-- today: idem_records distributed by key (co-locate a business table
-- distributed by a text column with colocate_with => 'idem_records'), and
-- idem_machines a reference table, copied to every node.  Run once on the
-- coordinator, after CREATE EXTENSION citus and idempotency on every node
-- and citus_add_node for the workers; calling it again does nothing for a
-- table that is a Citus table already.  idem_token_seq and
-- idem_transition_log stay on the coordinator (docs/citus.md says why).
-- Not public.
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
