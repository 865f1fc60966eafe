# Sourced by bench/run.sh (not run on its own): the Citus pairs "citus",
# "citus_dup", "citus_at", "citus_at_dup", "citus_at_typed" and
# "citus_business".  They run on a cluster of their own, started here the
# first time a Citus pair runs: a coordinator and two workers on this
# machine (three servers of the private installation, on local TCP ports),
# each with shared_preload_libraries = 'citus' (and idempotency with
# BENCH_PRELOAD=1), database bench with the citus and idempotency
# extensions, the workers joined with citus_add_node.  On the coordinator,
# idem_distribute() distributes idem_records, and the hand-written
# baseline bench_claims (bench/schema.sql) is distributed by the same
# column, co-located with it: the same columns, the same distribution, the
# same shards.  In database bench_at, idem_distribute(shard_key =>
# 'bigint') gives idem_records a bigint shard_key and distributes it by
# that (the co-location of docs/citus.md), and bench_claims is made LIKE
# idem_records (its columns, defaults, NOT NULLs; its primary key, no
# CHECK, no other index) and distributed by shard_key, co-located: the
# pairs citus_at* compare idem_claim_at(shard_key, ...) with the INSERT
# that writes the same row.  pgbench connects to the coordinator.
#
# While a Citus pair runs, citus_enter points run.sh's cluster variables
# (IDEM_PGHOST, IDEM_PGPORT, IDEM_PGDATA) at the coordinator and
# BENCH_PGDATAS at the three data directories, so that q, pgb and the CPU
# accounting work on it unchanged; citus_leave points them back.
# shellcheck shell=bash

CITUS_NODES=()      # "datadir sockdir port" of the coordinator, then the workers
CITUS_STATE=        # "" (not started), up, or "missing" (citus.so not installed)

CITUS_AT=           # "" or "missing" (no idem_claim_at in this tree)

citus_pair() { case $1 in citus|citus_dup|citus_at|citus_at_dup|citus_at_typed|citus_business) return 0;; esac; return 1; }

citus_installed() { # citus.so in the private copy of pkglibdir
    [ -f "$WORK/pg$("$IDEM_PG_CONFIG" --pkglibdir)/citus.so" ]
}

citus_node_psql() { # index sql...
    local d s p
    read -r d s p <<<"${CITUS_NODES[$1]}"
    shift
    idem_as_pg psql -X -q -v ON_ERROR_STOP=1 -At -h "$s" -p "$p" -U postgres -d "${CITUS_DB:-bench}" "$@"
}

citus_at_psql() { CITUS_DB=bench_at citus_node_psql 0 "$@"; }

citus_all() { # sql: run on every node
    local i
    for i in "${!CITUS_NODES[@]}"; do citus_node_psql "$i" -c "$1" >/dev/null || return 1; done
}

citus_start_node() { # name
    local dir=$WORK/citus/$1 port preload=citus
    port=$(idem_free_port)
    [ "$BENCH_PRELOAD" = 1 ] && preload="citus,idempotency"
    idem_as_pg mkdir -p "$dir/sock"
    idem_as_pg initdb -D "$dir/data" -A trust -U postgres -E UTF8 --locale=C.UTF-8 >"$dir.initdb.log" 2>&1 \
        || { cat "$dir.initdb.log" >&2; return 1; }
    printf '%s\n' "listen_addresses = '127.0.0.1'" "unix_socket_directories = '$dir/sock'" \
        "port = $port" "shared_preload_libraries = '$preload'" "citus.node_conninfo = 'sslmode=disable'" \
        "max_connections = 100" "max_prepared_transactions = 20" "fsync = on" \
        "shared_buffers = $BENCH_CITUS_SHARED_BUFFERS" "max_wal_size = 8GB" "min_wal_size = 1GB" \
        "checkpoint_timeout = 1d" "autovacuum = off" "log_min_messages = warning" \
        "idempotency.autocommit_claims = allow" \
        | idem_as_pg tee -a "$dir/data/postgresql.conf" >/dev/null
    # BENCH_CITUS_CONF: more lines for every node, separated by ';'.
    [ -z "$BENCH_CITUS_CONF" ] || tr ';' '\n' <<<"$BENCH_CITUS_CONF" \
        | idem_as_pg tee -a "$dir/data/postgresql.conf" >/dev/null
    idem_as_pg pg_ctl -D "$dir/data" -l "$dir.log" -w -t 60 start >/dev/null \
        || { cat "$dir.log" >&2; return 1; }
    CITUS_NODES+=("$dir/data $dir/sock $port")
    idem_as_pg psql -X -q -v ON_ERROR_STOP=1 -h "$dir/sock" -p "$port" -U postgres -d postgres \
        -c "CREATE DATABASE bench" -c "CREATE DATABASE bench_at" >/dev/null || return 1
    local db
    for db in bench bench_at; do
        CITUS_DB=$db citus_node_psql $((${#CITUS_NODES[@]} - 1)) \
            -c "CREATE EXTENSION citus" -c "CREATE EXTENSION idempotency" >/dev/null || return 1
    done
}

citus_start() {
    log "starting the Citus cluster (a coordinator and two workers)"
    idem_as_pg mkdir -p "$WORK/citus"
    citus_start_node coord && citus_start_node worker1 && citus_start_node worker2 || return 1
    local i d s p db
    # Citus's metadata is per database: both join the nodes.
    for db in bench bench_at; do
        read -r d s p <<<"${CITUS_NODES[0]}"
        CITUS_DB=$db citus_node_psql 0 -c "SELECT citus_set_coordinator_host('127.0.0.1', $p)" >/dev/null || return 1
        for i in 1 2; do
            read -r d s p <<<"${CITUS_NODES[$i]}"
            CITUS_DB=$db citus_node_psql 0 -c "SELECT citus_add_node('127.0.0.1', $p)" >/dev/null || return 1
        done
    done
    # The baseline: bench/schema.sql's bench_claims, distributed by the
    # distribution column of idem_records and co-located with it.
    citus_node_psql 0 -c "SELECT idem_distribute()" -f "$S/schema.sql" \
        -c "SELECT create_distributed_table('bench_claims',
                (SELECT column_to_column_name(logicalrelid, partkey) FROM pg_dist_partition
                  WHERE logicalrelid = 'idem_records'::regclass),
                colocate_with => 'idem_records')" \
        -c "CREATE TABLE bench_cledger (key text COLLATE \"C\" NOT NULL, amount bigint NOT NULL)" \
        -c "SELECT create_distributed_table('bench_cledger', 'key', colocate_with => 'idem_records')" \
        >/dev/null || return 1
    baseline_extras "citus_node_psql 0"
    if [ "$(CITUS_DB=bench_at citus_node_psql 0 -c "SELECT to_regprocedure('idem_claim_at(\"any\",text,text,interval,text)') IS NOT NULL")" = t ]; then
        CITUS_DB=bench_at citus_node_psql 0 -c "SELECT idem_distribute(shard_key => 'bigint')" \
            -c "CREATE TABLE bench_claims (LIKE idem_records INCLUDING DEFAULTS)" \
            -c "DO \$\$ BEGIN EXECUTE (SELECT format('ALTER TABLE bench_claims ADD CONSTRAINT bench_claims_pkey %s',
                    pg_get_constraintdef(oid)) FROM pg_constraint
                 WHERE conrelid = 'idem_records'::regclass AND contype = 'p'); END \$\$" \
            -c "SELECT create_distributed_table('bench_claims', 'shard_key', colocate_with => 'idem_records')" \
            >/dev/null || return 1
        # The experiment of the optional pair citus_at_typed (the typed
        # twin): idem_claim_at's own C function under a signature whose shard
        # key is typed (bigint, the shard_key column's type) instead of
        # "any", made a distributed function co-located with idem_records
        # by its first argument, which Citus can then delegate to the
        # shard's worker as it delegates idem_claim by key.
        CITUS_DB=bench_at citus_node_psql 0 \
            -c "CREATE FUNCTION bench_claim_at_typed(shard_key bigint, scope text, key text,
                    ttl interval DEFAULT NULL, fingerprint text DEFAULT NULL) RETURNS boolean
                AS '\$libdir/idempotency', 'idem_claim_at' LANGUAGE C VOLATILE CALLED ON NULL INPUT" \
            -c "SELECT create_distributed_function('bench_claim_at_typed(bigint,text,text,interval,text)',
                    '\$1', colocate_with => 'idem_records')" >/dev/null || return 1
        baseline_extras citus_at_psql
    else
        CITUS_AT=missing
    fi
    CITUS_SHARDS=$(citus_node_psql 0 -c "SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'idem_records'::regclass")
    CITUS_DIST=$(citus_node_psql 0 -c "SELECT column_to_column_name(logicalrelid, partkey) FROM pg_dist_partition WHERE logicalrelid = 'idem_records'::regclass")
    CITUS_VERSION=$(citus_node_psql 0 -c "SELECT extversion FROM pg_extension WHERE extname = 'citus'")
}

citus_stop() {
    local e d s p
    for e in "${CITUS_NODES[@]}"; do
        read -r d s p <<<"$e"
        [ -f "$d/postmaster.pid" ] || continue
        idem_as_pg pg_ctl -D "$d" -m fast -w -t 30 stop >/dev/null 2>&1 \
            || idem_as_pg pg_ctl -D "$d" -m immediate stop >/dev/null 2>&1
    done
    CITUS_NODES=()
}

# citus_enter SYNC: start the cluster the first time, set
# synchronous_commit on every node, point run.sh at the coordinator.
# Returns 1 (the pair skipped) when citus is not installed.
citus_enter() {
    local sync=$1 d s p e
    if [ -z "$CITUS_STATE" ]; then
        if ! citus_installed; then
            CITUS_STATE=missing
        else
            citus_start || idem_die "starting the Citus cluster failed"
            CITUS_STATE=up
        fi
    fi
    if [ "$CITUS_STATE" = missing ]; then
        # One line, however many Citus pairs were asked for.
        [[ " ${SKIPPED[*]} " == *"citus: skipped (citus not installed)"* ]] \
            || SKIPPED+=("citus: skipped (citus not installed)")
        return 1
    fi
    citus_all "ALTER SYSTEM SET synchronous_commit = $sync" && citus_all "SELECT pg_reload_conf()" \
        || idem_die "setting synchronous_commit on the Citus nodes failed"
    MAIN_PGHOST=$IDEM_PGHOST MAIN_PGPORT=$IDEM_PGPORT MAIN_PGDATA=$IDEM_PGDATA
    read -r d s p <<<"${CITUS_NODES[0]}"
    IDEM_PGHOST=$s IDEM_PGPORT=$p IDEM_PGDATA=$d
    BENCH_PGDATAS=$(for e in "${CITUS_NODES[@]}"; do echo "${e%% *}"; done)
    sleep 1
    [ "$(q bench -c "SHOW synchronous_commit")" = "$sync" ] || idem_die "synchronous_commit did not change to $sync on the coordinator"
    return 0
}

citus_leave() {
    [ -n "${MAIN_PGDATA:-}" ] || return 0
    IDEM_PGHOST=$MAIN_PGHOST IDEM_PGPORT=$MAIN_PGPORT IDEM_PGDATA=$MAIN_PGDATA
    MAIN_PGDATA=
    BENCH_PGDATAS=
}

# The WAL position of every node, and the bytes written between two of
# them (all nodes; the workers write nearly all of it).
citus_lsns() {
    local i
    for i in "${!CITUS_NODES[@]}"; do citus_node_psql "$i" -c "SELECT pg_current_wal_insert_lsn()"; done | tr '\n' ' '
}
citus_wal_diff() { # "lsns before" "lsns after"
    local a b
    a=$(echo "$1" | sed 's/ *$//; s/ /,/g')
    b=$(echo "$2" | sed 's/ *$//; s/ /,/g')
    citus_node_psql 0 -c "SELECT sum(pg_wal_lsn_diff(y::pg_lsn, x::pg_lsn))::bigint
                            FROM unnest('{$a}'::text[], '{$b}'::text[]) AS t(x, y)"
}

# Loading the duplicates of citus_dup: keys 1..BENCH_DUP_ROWS in both
# tables, as bench_load writes them (INSERT ... SELECT through the
# coordinator: Citus spreads the rows over the shards).
# In bench_at, key i has shard_key i.
citus_load_dups() { # database
    local t db=$1 col="" val=""
    [ "$db" = bench_at ] && col="shard_key, " val="i, "
    q "$db" -c "TRUNCATE idem_records, bench_claims" >/dev/null || return 1
    for t in idem_records bench_claims; do
        q "$db" -c "INSERT INTO $t (${col}scope, key, status, created_at, updated_at, expires_at)
                    SELECT ${val}'bench', i::text, 'claimed', now(), now(), now() + interval '7 days'
                      FROM generate_series(1, $BENCH_DUP_ROWS) AS i" >/dev/null || return 1
    done
    CITUS_DB=$db citus_all "VACUUM ANALYZE"
}
