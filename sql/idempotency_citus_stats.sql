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
    OUT owner_gone_takeovers pg_catalog.int8,
    OUT unknown_takeovers pg_catalog.int8,
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
                   s.owner_gone_takeovers, s.unknown_takeovers, s.completed, s.failed, s.purged, s.stats_reset
              FROM pg_catalog.json_to_recordset(node.result::pg_catalog.json) AS s(
                   dbid pg_catalog.oid, datname pg_catalog.name, scope pg_catalog.text,
                   claimed pg_catalog.int8, duplicates pg_catalog.int8,
                   in_progress_conflicts pg_catalog.int8, fingerprint_mismatches pg_catalog.int8,
                   takeovers pg_catalog.int8, owner_gone_takeovers pg_catalog.int8,
                   unknown_takeovers pg_catalog.int8, completed pg_catalog.int8, failed pg_catalog.int8,
                   purged pg_catalog.int8, stats_reset pg_catalog.timestamptz)
             ORDER BY s.datname, s.scope;
    END LOOP;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_cluster_stats() IS
    'Citus: the idem_stats counters of every node of the cluster, one row per node, database and scope (docs/citus.md)';

REVOKE ALL ON FUNCTION @extschema@.idem_cluster_stats() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.idem_cluster_stats() TO pg_monitor;
