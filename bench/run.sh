#!/usr/bin/env bash
# `make bench`: the benchmark.  Not a test: it measures and
# prints, and asserts nothing about timing.  See bench/README.md.
#
# One command: builds the current tree into a private copy of the
# PostgreSQL installation (so that concurrent `make install`s by others
# cannot change what is measured half-way), starts a throwaway cluster,
# loads data, and runs each pair A/B with pgbench, interleaved (A, B, A,
# B, ...), under synchronous_commit = off and on.  Prints the medians, the
# ratio A/B against the project's bar, WAL bytes per operation, and bytes per
# record of idem_records against the hand-written table.
#
# Files: this one (settings, build, cluster, loading, the runs), then
# bench/profile.sh (BENCH_PROFILE=1) and bench/report.sh, sourced at the
# end: they run in this shell.
#
# Environment (defaults in brackets):
#   BENCH_SECONDS      duration of every measured pgbench run [8]
#   BENCH_ROUNDS       rounds of A, B per pair and setting [3]
#   BENCH_CLIENTS      pgbench clients (and threads) [2]
#   BENCH_WARMUP       seconds of unmeasured A and B before each pair [2]
#   BENCH_PAIRS        subset of: new dup business overhead batch scale
#                      purge transition (default: all of them), plus the
#                      optional scale_sql (the hand-written table at scale)
#                      and batch_stmts (B as BENCH_BATCH_KEYS statements);
#                      citus citus_dup citus_at citus_business: through a Citus
#                      coordinator, on a 3-node cluster of their own
#                      (bench/citus.sh; skipped with one line when citus.so
#                      is not installed), plus the optional citus_at_dup
#                      and citus_at_typed (a typed twin, delegated);
#                      outbox outbox_sql outbox_fetch: the outbox,
#                      everything about them in bench/outbox.sh;
#                      and, not in the default list, portable_new
#                      portable_dup portable_business portable_guard (or
#                      `portable` for the four): the portable edition (A)
#                      against the hand-written SQL (B) and the C edition
#                      (C), three sides interleaved A, B, C
#   BENCH_SYNC         synchronous_commit settings to run ["off on"]
#   BENCH_SCALE_ROWS   live records for "scale" and bytes/record, loaded
#                      when scale or scale_sql is among the pairs [10000000]
#   BENCH_DUP_ROWS     existing keys for "dup" [100000]
#   BENCH_PURGE_ROWS   backlog of expired records for "purge"
#                      [300000 per second of BENCH_SECONDS]
#   BENCH_PURGE_BATCH  idem_purge batch size [10000, the worker's default]
#   BENCH_PURGE_DELAY  pause between two batches, in ms [500, the worker's
#                      default idempotency.purge_delay; 0: back to back]
#   BENCH_BATCH_KEYS   keys per transaction in "batch" [500]
#   BENCH_ORDERS       rows of the "transition" table [1000000]
#   BENCH_ACCOUNTS     accounts of the "business" pair [100000]
#   BENCH_SHARED_BUFFERS  [2GB]
#   BENCH_CITUS_SHARED_BUFFERS  of each of the 3 Citus nodes [256MB]
#   BENCH_CITUS_CONF   more postgresql.conf lines for the Citus nodes,
#                      separated by ';' [none]
#   BENCH_BASELINE_CHECK  1: give the hand-written table idem_records' CHECK
#                      on status too [0: primary key and columns only]
#   BENCH_BASELINE_INDEX  1: give the hand-written table an index on
#                      expires_at too, as idem_records has for purging [0]
#   BENCH_PRELOAD      1: shared_preload_libraries = 'idempotency' [0]
#   BENCH_BUILD        0: benchmark the extension installed on the system
#                      instead of building the current tree [1]
#   BENCH_PROFILE      1: after the pairs (or alone with BENCH_PAIRS=none),
#                      profile one backend with perf: idem_claim and the
#                      hand-written INSERT, new and duplicate keys [0]
#   BENCH_PROFILE_SECONDS  about how long each profiled run lasts [10]
#   BENCH_PROFILE_ROUNDS   profiled runs of each variant, interleaved [2]
#   KEEP_WORK          1: keep the work directory (raw results, logs,
#                      profiles)
#
# The full run takes about 25 minutes on 2 quiet cores, 8 of them the
# Citus pairs (28 with the profile), more on a busy machine; the outbox
# pairs add about 7 minutes per synchronous_commit setting (2.5 of them
# loading outbox_fetch's messages, done once).  Quick mode
# (about 11 minutes; 5 with BENCH_SYNC=off):
#   BENCH_SECONDS=3 BENCH_WARMUP=1 BENCH_SCALE_ROWS=1000000 make bench
set -u
. "$(dirname "$0")/../test/scripts/harness.sh"
# The outbox pairs: their settings and functions, called below.
# shellcheck source=bench/outbox.sh
. "$IDEM_TOP/bench/outbox.sh"

BENCH_SECONDS=${BENCH_SECONDS:-8}
BENCH_ROUNDS=${BENCH_ROUNDS:-3}
BENCH_CLIENTS=${BENCH_CLIENTS:-2}
BENCH_WARMUP=${BENCH_WARMUP:-2}
BENCH_PAIRS=${BENCH_PAIRS:-new dup business overhead batch scale purge transition citus citus_dup citus_at citus_business outbox outbox_sql outbox_fetch}
BENCH_SYNC=${BENCH_SYNC:-off on}
BENCH_SCALE_ROWS=${BENCH_SCALE_ROWS:-10000000}
BENCH_DUP_ROWS=${BENCH_DUP_ROWS:-100000}
BENCH_PURGE_ROWS=${BENCH_PURGE_ROWS:-$((300000 * BENCH_SECONDS))}
BENCH_PURGE_BATCH=${BENCH_PURGE_BATCH:-10000}
BENCH_PURGE_DELAY=${BENCH_PURGE_DELAY:-500}
BENCH_BATCH_KEYS=${BENCH_BATCH_KEYS:-500}
BENCH_ORDERS=${BENCH_ORDERS:-1000000}
BENCH_ACCOUNTS=${BENCH_ACCOUNTS:-100000}
BENCH_SHARED_BUFFERS=${BENCH_SHARED_BUFFERS:-2GB}
BENCH_CITUS_SHARED_BUFFERS=${BENCH_CITUS_SHARED_BUFFERS:-256MB}
BENCH_CITUS_CONF=${BENCH_CITUS_CONF:-}
BENCH_PRELOAD=${BENCH_PRELOAD:-0}
BENCH_BASELINE_CHECK=${BENCH_BASELINE_CHECK:-0}
BENCH_BASELINE_INDEX=${BENCH_BASELINE_INDEX:-0}
BENCH_BUILD=${BENCH_BUILD:-1}
BENCH_PROFILE=${BENCH_PROFILE:-0}
BENCH_PROFILE_SECONDS=${BENCH_PROFILE_SECONDS:-10}
BENCH_PROFILE_ROUNDS=${BENCH_PROFILE_ROUNDS:-2}

for v in BENCH_SECONDS BENCH_ROUNDS BENCH_CLIENTS BENCH_WARMUP BENCH_SCALE_ROWS \
         BENCH_DUP_ROWS BENCH_PURGE_ROWS BENCH_PURGE_BATCH BENCH_PURGE_DELAY BENCH_BATCH_KEYS \
         BENCH_ORDERS BENCH_ACCOUNTS BENCH_PROFILE_SECONDS BENCH_PROFILE_ROUNDS; do
    case ${!v} in ''|*[!0-9]*) idem_die "$v must be a non-negative integer (got '${!v}')";; esac
done
[ "$BENCH_ROUNDS" -ge 1 ] && [ "$BENCH_CLIENTS" -ge 1 ] && [ "$BENCH_SECONDS" -ge 1 ] \
    || idem_die "BENCH_ROUNDS, BENCH_CLIENTS and BENCH_SECONDS must be at least 1"
BENCH_PAIRS=$(echo " $BENCH_PAIRS " | sed 's/ portable / portable_new portable_dup portable_business portable_guard /g; s/^ *//; s/ *$//')
for p in $BENCH_PAIRS; do
    outbox_pair "$p" && continue
    case $p in new|dup|business|overhead|batch|batch_stmts|scale|scale_sql|purge|transition|citus|citus_dup|citus_at|citus_at_dup|citus_at_typed|citus_business|portable_new|portable_dup|portable_business|portable_guard|none) ;;
        *) idem_die "unknown pair '$p' in BENCH_PAIRS";; esac
done
for s in $BENCH_SYNC; do
    case $s in on|off) ;; *) idem_die "BENCH_SYNC takes 'off' and/or 'on' (got '$s')";; esac
done
if [ "$BENCH_PROFILE" = 1 ]; then
    idem_setup linux-perf
else
    idem_setup
fi

T0=$(date +%s)
# The work directory, as idem_workdir makes it but under a prefix of its
# own: a clean-up of stale test directories (/tmp/idempotency.*) must not
# remove a benchmark that runs for twenty minutes.
WORK=$(mktemp -d "${TMPDIR:-/tmp}/idempotency-bench.XXXXXX") || idem_die "mktemp failed"
chmod 755 "$WORK"
[ "$(id -u)" -ne 0 ] || chown postgres: "$WORK"
# On exit: the purger, the Citus cluster (bench/citus.sh), then the
# harness stops the main cluster.
stop_purger() {
    [ -z "${PURGER_PID:-}" ] || kill "$PURGER_PID" 2>/dev/null
    citus_leave
    citus_stop
}
idem_work_trap stop_purger
# shellcheck source=bench/citus.sh
. "$IDEM_TOP/bench/citus.sh"

log() { idem_log "$(date +%H:%M:%S) $*"; }

# A private installation (test/scripts/harness.sh): nothing on the system is written.
IDEM_PRIVATE_BUILD=$BENCH_BUILD idem_private_install "$WORK"

REV=$(git -C "$IDEM_TOP" rev-parse --short HEAD 2>/dev/null || echo unknown)
DIRTY=$(git -C "$IDEM_TOP" status --porcelain 2>/dev/null | wc -l)
[ "$BENCH_BUILD" = 1 ] || REV="installed extension (BENCH_BUILD=0), tree at $REV"

# Scripts, readable by the cluster's OS user.
S=$WORK/scripts
mkdir -p "$S"
cp "$IDEM_TOP"/bench/*.pgbench "$IDEM_TOP"/bench/schema.sql "$S/" || idem_die "bench scripts missing"
# batch_stmts (B): one transaction of BENCH_BATCH_KEYS statements, each
# one round trip, with the keys of batch_loop.pgbench.
{
    echo "-- pair \"batch_stmts\" (B), generated by bench/run.sh: $BENCH_BATCH_KEYS idem_claim"
    echo "-- statements in one transaction, the same keys as batch_loop.pgbench."
    echo '\set p random(1, 9000000000000000000)'
    echo 'BEGIN;'
    for i in $(seq 1 "$BENCH_BATCH_KEYS"); do echo "SELECT idem_claim('bench', :p || '-$i');"; done
    echo 'COMMIT;'
} >"$S/batch_stmts.pgbench"
[ "$(id -u)" -ne 0 ] || chown -R postgres: "$S"

# ---------------------------------------------------------------------------
# The cluster.  fsync on (the harness turns it off for tests): the "on"
# setting of synchronous_commit must flush for real.  No checkpoint or
# autovacuum during a run: every run starts right after a CHECKPOINT, and
# tables are vacuumed explicitly where a pair needs it.
# ---------------------------------------------------------------------------
conf=("fsync = on" "shared_buffers = $BENCH_SHARED_BUFFERS" "max_wal_size = 32GB"
      "min_wal_size = 2GB" "checkpoint_timeout = 1d" "autovacuum = off"
      "maintenance_work_mem = 1GB" "max_connections = 60"
      # the new and dup pairs compare a claim of its own with the INSERT,
      # as 0.5.0 measured them; the business pair claims in a transaction
      "idempotency.autocommit_claims = allow")
[ "$BENCH_PRELOAD" = 1 ] && conf+=("shared_preload_libraries = 'idempotency'")
log "starting the cluster"
idem_cluster_start "$WORK/cluster" "${conf[@]}"

q() { # db sql... -> unaligned, tuples only
    local db=$1; shift
    idem_psql -At -d "$db" "$@"
}

# The optional extras of the hand-written table (BENCH_BASELINE_CHECK,
# BENCH_BASELINE_INDEX), through the psql command given (also used for
# the Citus coordinator, bench/citus.sh).
baseline_extras() { # "psql command"
    if [ "$BENCH_BASELINE_CHECK" = 1 ]; then
        # idem_records' own CHECK, copied from the catalog.
        $1 -c "DO \$\$ BEGIN EXECUTE (SELECT format('ALTER TABLE bench_claims ADD CONSTRAINT bench_claims_status_check %s',
                        pg_get_constraintdef(oid)) FROM pg_constraint
                     WHERE conrelid = 'idem_records'::regclass AND contype = 'c'); END \$\$" >/dev/null \
            || idem_die "adding the CHECK to bench_claims failed"
    fi
    if [ "$BENCH_BASELINE_INDEX" = 1 ]; then
        $1 -c "CREATE INDEX bench_claims_expires_at_idx ON bench_claims (expires_at)" >/dev/null \
            || idem_die "adding the expires_at index to bench_claims failed"
    fi
}

for db in bench scale; do
    q postgres -c "CREATE DATABASE $db" >/dev/null || idem_die "CREATE DATABASE $db failed"
    q "$db" -c "CREATE EXTENSION idempotency" >/dev/null \
        || idem_die "CREATE EXTENSION idempotency failed (see above)"
    q "$db" -f "$S/schema.sql" >/dev/null || idem_die "loading bench/schema.sql failed"
    baseline_extras "q $db"
done

# The portable edition (docs/managed.md) for the portable_*
# pairs: the plain script of the tree under test, built with `make
# portable` in the private copy of the checkout (no C involved), run into
# schema public of database bench_p of the same cluster, with
# bench/schema.sql (its own hand-written table).  The C edition stays in
# database bench.
portable_pair() { case $1 in portable_*) return 0;; *) return 1;; esac; }
PORTABLE_SCRIPT=
portable_db() { # db: create it with the portable edition and bench/schema.sql
    q postgres -c "CREATE DATABASE $1" >/dev/null &&
    idem_as_pg env PGOPTIONS="-c idempotency.install_schema=public" psql -X -q -v ON_ERROR_STOP=1 \
        -h "$IDEM_PGHOST" -p "$IDEM_PGPORT" -U postgres -d "$1" -f "$PORTABLE_SCRIPT" >/dev/null &&
    q "$1" -f "$S/schema.sql" >/dev/null
}
if [[ " $BENCH_PAIRS " == *" portable_"* ]]; then
    if [ "$BENCH_BUILD" = 1 ] && make -C "$WORK/build" -s PG_CONFIG=/nonexistent portable >"$WORK/portable.log" 2>&1; then
        # the install script of default_version, not the upgrade built beside it
        v=$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$WORK/build/idempotency.control")
        PORTABLE_SCRIPT=$S/idempotency-portable--$v.sql
        cp "$WORK/build/build/portable/idempotency-portable--$v.sql" "$PORTABLE_SCRIPT" \
            || idem_die "the portable script for $v was not built"
        [ "$(id -u)" -ne 0 ] || chown postgres: "$PORTABLE_SCRIPT"
        portable_db bench_p || idem_die "installing the portable edition into database bench_p failed"
        baseline_extras "q bench_p"
    else
        PORTABLE_SCRIPT=missing
        [ "$BENCH_BUILD" = 1 ] && cat "$WORK/portable.log" >&2
    fi
fi

has_function() { # signature -> 0 when installed
    [ "$(q bench -c "SELECT to_regprocedure('$1') IS NOT NULL")" = t ]
}

# ---------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------
load_bytes=()
# Only for the pairs that use it (BENCH_PAIRS=citus alone loads nothing).
if [ "$BENCH_SCALE_ROWS" -gt 0 ] && [[ " $BENCH_PAIRS " == *" scale "* || " $BENCH_PAIRS " == *" scale_sql "* ]]; then
    step=$((9000000000000000000 / BENCH_SCALE_ROWS))
    log "loading $BENCH_SCALE_ROWS records into idem_records and bench_claims (database scale, in parallel)"
    t0=$(date +%s.%N)
    # Key i is i * step: spread over the same range as the random keys of
    # the runs, so new keys land all over the index, as they would.
    for tbl in idem_records bench_claims; do
        q scale -c "SELECT bench_load('$tbl', 'bench', $BENCH_SCALE_ROWS, '', $step,
                                      now() - interval '6 days', now())" \
            >"$WORK/load_$tbl.log" 2>&1 &
    done
    wait -n || idem_die "loading failed: $(cat "$WORK"/load_*.log)"
    wait -n || idem_die "loading failed: $(cat "$WORK"/load_*.log)"
    t1=$(date +%s.%N)
    q scale -c "VACUUM ANALYZE idem_records" -c "VACUUM ANALYZE bench_claims" -c "CHECKPOINT" >/dev/null \
        || idem_die "VACUUM after loading failed"
    t2=$(date +%s.%N)
    LOAD_TIME=$(awk -v a="$t0" -v b="$t1" -v c="$t2" \
        'BEGIN { printf "load %.0f s (both tables in parallel), VACUUM ANALYZE + CHECKPOINT %.0f s", b - a, c - b }')
    log "$LOAD_TIME"
    for tbl in idem_records bench_claims; do
        load_bytes+=("$tbl|$(q scale -F ' ' -c "SELECT relation, bytes FROM bench_sizes('$tbl')" | tr '\n' ';')")
    done
fi

# ---------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------
# One line per measured run: sync pair side round tps transactions
# wal_bytes(attributed) others% load1 extra wal_by_rmgr wal_bytes(all)
# server_cpu_ticks
RAW=$WORK/raw.tsv
: >"$RAW"
SKIPPED=()

# CPU accounting, in clock ticks, to tell how much of the machine other
# work took during a run: busy time of the whole machine, minus the time of
# this cluster (the postmaster with its reaped children, and its live
# children) and of this script's own reaped children (pgbench, psql).
cpu_machine() { # -> "busy total"
    awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t }' /proc/stat
}
# BENCH_PGDATAS: the data directories of the cluster measured (the three
# nodes during a Citus pair), default IDEM_PGDATA.
cpu_cluster() {
    local pm d
    for d in ${BENCH_PGDATAS:-$IDEM_PGDATA}; do
        pm=$(head -n 1 "$d/postmaster.pid")
        { echo "$pm"; ps -o pid= --ppid "$pm"; } | while read -r p; do
            cat "/proc/$p/stat" 2>/dev/null
        done
    done | awk '{ s += $14 + $15 + $16 + $17 } END { print s + 0 }'
}
# The time of an exited backend reaches the postmaster's counters only
# some time after the process has vanished from /proc (up to about a second
# here), so a sample first waits until the cluster's count has stopped
# moving for half a second (at most 3 s).
cpu_settle() {
    local prev cur same=0 i
    prev=$(cpu_cluster)
    for i in $(seq 1 30); do
        sleep 0.1
        cur=$(cpu_cluster)
        if [ "$cur" = "$prev" ]; then
            same=$((same + 1))
            [ "$same" -lt 5 ] || return 0
        else
            same=0
        fi
        prev=$cur
    done
}
CLK_TCK=$(getconf CLK_TCK)
# Must run in this shell, not in a subshell: `times` reports the children
# of the shell it runs in.
cpu_sample() { # -> CPU_SAMPLE="machine_busy machine_total cluster self"
    times >"$WORK/times"
    CPU_SAMPLE="$(cpu_machine) $(cpu_cluster) $(awk -v hz="$CLK_TCK" 'NR == 2 {
        split($1, u, /[ms]/); split($2, s, /[ms]/)
        printf "%.0f\n", (u[1] * 60 + u[2] + s[1] * 60 + s[2]) * hz }' "$WORK/times")"
}

# pgbench DB SCRIPT SECONDS CLIENTS OUTFILE: one run; returns pgbench's status.
pgb() {
    local db=$1 script=$2 secs=$3 clients=$4 out=$5
    idem_as_pg pgbench -n -M prepared -c "$clients" -j "$clients" -T "$secs" \
        -D dup_rows="$BENCH_DUP_ROWS" -D accounts="$BENCH_ACCOUNTS" \
        -D keys="$BENCH_BATCH_KEYS" -D purge_batch="$BENCH_PURGE_BATCH" \
        -D purge_delay="$BENCH_PURGE_DELAY" \
        -D orders="$BENCH_ORDERS" \
        -h "$IDEM_PGHOST" -p "$IDEM_PGPORT" -U postgres -f "$S/$script" "$db" >"$out" 2>&1
}

pgb_ok() { # outfile -> 0 when the run completed without errors
    grep -q '^tps = ' "$1" && ! grep -qE 'aborted|error' "$1"
}

# Per pair: the script and database of each side, and the state every run
# starts from (prepare_<pair> SIDE).  Each run ends with a CHECKPOINT so
# that every run starts with the same full-page-write state.
side_db() { # pair side
    outbox_pair "$1" && { outbox_side_db "$@"; return; }
    case $1/$2 in
        scale/A|scale_sql/A) echo scale;;
        purge/*) echo purge;;
        transition/*) echo orders;;
        portable_guard/A) echo orders_p;;
        portable_guard/B) echo orders;;
        portable_guard/C) echo orders_c;;
        portable_*/C) echo bench;;
        portable_*/*) echo bench_p;;
        citus/*|citus_dup/*|citus_business/*) echo bench;;   # on the Citus coordinator
        citus_at/*|citus_at_dup/*|citus_at_typed/*) echo bench_at;;
        *) echo bench;;
    esac
}

# A database made once (extension, bench/schema.sql, then the SQL given),
# copied afresh for every run of a pair whose runs change much data: each
# run then starts from the same files.
make_template() { # name sql...
    local db=$1; shift
    [ "$(q postgres -c "SELECT count(*) FROM pg_database WHERE datname = '$db'")" = 0 ] || return 0
    q postgres -c "CREATE DATABASE $db" >/dev/null &&
    q "$db" -c "CREATE EXTENSION idempotency" -f "$S/schema.sql" "$@" >/dev/null
}
copy_template() { # name template
    q postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $1" \
        -c "CREATE DATABASE $1 TEMPLATE $2 STRATEGY FILE_COPY" >/dev/null
}
side_script() { # pair side
    outbox_pair "$1" && { outbox_side_script "$@"; return; }
    case $1/$2 in
        new/A|scale/A|scale/B|purge/A|purge/B|citus/A) echo new_claim.pgbench;;
        new/B|scale_sql/A|scale_sql/B|citus/B) echo new_insert.pgbench;;
        dup/A|citus_dup/A) echo dup_claim.pgbench;;
        dup/B|citus_dup/B) echo dup_insert.pgbench;;
        citus_at/A) echo citus_at_claim.pgbench;;
        citus_at/B) echo citus_at_insert.pgbench;;
        citus_at_typed/A) echo citus_at_typed_claim.pgbench;;
        citus_at_typed/B) echo citus_at_insert.pgbench;;
        citus_at_dup/A) echo citus_at_dup_claim.pgbench;;
        citus_at_dup/B) echo citus_at_dup_insert.pgbench;;
        citus_business/A) echo citus_business_claim.pgbench;;
        citus_business/B) echo citus_business_insert.pgbench;;
        business/A|overhead/A) echo business_claim.pgbench;;
        overhead/B) echo business_plain.pgbench;;
        business/B) echo business_insert.pgbench;;
        batch/A|batch_stmts/A) echo batch_many.pgbench;;
        batch_stmts/B) echo batch_stmts.pgbench;;
        batch/B) echo batch_loop.pgbench;;
        transition/A) echo transition_can.pgbench;;
        transition/B|portable_guard/B) echo transition_where.pgbench;;
        portable_new/A|portable_new/C) echo new_claim.pgbench;;
        portable_new/B) echo new_insert.pgbench;;
        portable_dup/A|portable_dup/C) echo dup_claim.pgbench;;
        portable_dup/B) echo dup_insert.pgbench;;
        portable_business/A|portable_business/C) echo business_claim.pgbench;;
        portable_business/B) echo business_insert.pgbench;;
        portable_guard/A|portable_guard/C) echo guard_update.pgbench;;
    esac
}
# Operations per pgbench transaction (claims, keys, business transactions
# or updates): tps and WAL are reported per operation.
ops_per_tx() {
    outbox_pair "$1" && { outbox_ops_per_tx "$1"; return; }
    case $1 in batch|batch_stmts) echo "$BENCH_BATCH_KEYS";; *) echo 1;; esac
}

setup_pair() { # pair: once per pair and setting; returns 1 to skip the pair
    outbox_pair "$1" && { outbox_setup_pair "$1"; return; }
    case $1 in
        dup)
            q bench -c "TRUNCATE idem_records, bench_claims" \
                -c "SELECT bench_load('idem_records', 'bench', $BENCH_DUP_ROWS, '', 1, now() - interval '1 hour', now())" \
                -c "SELECT bench_load('bench_claims', 'bench', $BENCH_DUP_ROWS, '', 1, now() - interval '1 hour', now())" \
                -c "VACUUM ANALYZE idem_records" -c "VACUUM ANALYZE bench_claims" >/dev/null || return 2
            ;;
        business|overhead)
            q bench -c "TRUNCATE bench_accounts" \
                -c "INSERT INTO bench_accounts (id) SELECT g FROM generate_series(1, $BENCH_ACCOUNTS) g" \
                -c "VACUUM ANALYZE bench_accounts" >/dev/null || return 2
            ;;
        batch|batch_stmts)
            if ! has_function 'idem_claim_many(text,text[],interval)'; then
                SKIPPED+=("$1: skipped: function idem_claim_many(text, text[], interval) not installed")
                return 1
            fi
            ;;
        scale|scale_sql)
            if [ "$BENCH_SCALE_ROWS" -eq 0 ]; then
                SKIPPED+=("$1: skipped: BENCH_SCALE_ROWS=0")
                return 1
            fi
            ;;
        transition)
            local f
            for f in 'idem_machine_define(text,jsonb)' 'idem_can_transition(text,text,text)'; do
                if ! has_function "$f"; then
                    SKIPPED+=("transition: skipped: function ${f/,/, } not installed")
                    return 1
                fi
            done
            log "preparing database orders_tpl ($BENCH_ORDERS orders)"
            make_template orders_tpl -c "SELECT idem_machine_define('order', '{
                \"initial\": [\"pending_payment\"],
                \"transitions\": {\"pending_payment\": [\"paid\", \"cancelled\"],
                                  \"paid\": [\"shipped\", \"refunded\"],
                                  \"shipped\": [\"delivered\"]}}')" \
                -c "INSERT INTO bench_orders (id, status) SELECT g, 'pending_payment' FROM generate_series(1, $BENCH_ORDERS) g" \
                -c "VACUUM ANALYZE bench_orders" || return 2
            copy_template orders orders_tpl || return 2
            ;;
        citus_dup)
            citus_load_dups bench || return 2
            ;;
        portable_*)
            if [ "$PORTABLE_SCRIPT" = missing ]; then
                SKIPPED+=("$1: skipped: the portable edition needs the private build (BENCH_BUILD=1); see above")
                return 1
            fi
            local db
            case $1 in
                portable_dup)
                    for db in bench_p bench; do
                        q "$db" -c "TRUNCATE idem_records, bench_claims" \
                            -c "SELECT bench_load('idem_records', 'bench', $BENCH_DUP_ROWS, '', 1, now() - interval '1 hour', now())" \
                            -c "SELECT bench_load('bench_claims', 'bench', $BENCH_DUP_ROWS, '', 1, now() - interval '1 hour', now())" \
                            -c "VACUUM ANALYZE idem_records" -c "VACUUM ANALYZE bench_claims" >/dev/null || return 2
                    done;;
                portable_business)
                    for db in bench_p bench; do
                        q "$db" -c "TRUNCATE bench_accounts" \
                            -c "INSERT INTO bench_accounts (id) SELECT g FROM generate_series(1, $BENCH_ACCOUNTS) g" \
                            -c "VACUUM ANALYZE bench_accounts" >/dev/null || return 2
                    done;;
                portable_guard)
                    # The same orders three times: unguarded (B, the
                    # hand-written WHERE status = ...), guarded by the C
                    # edition (C) and by the portable edition (A).
                    local machine="SELECT idem_machine_define('order', '{
                        \"initial\": [\"pending_payment\"],
                        \"transitions\": {\"pending_payment\": [\"paid\", \"cancelled\"],
                                          \"paid\": [\"shipped\", \"refunded\"],
                                          \"shipped\": [\"delivered\"]}}')"
                    local orders="INSERT INTO bench_orders (id, status) SELECT g, 'pending_payment' FROM generate_series(1, $BENCH_ORDERS) g"
                    log "preparing databases orders_tpl, orders_c_tpl, orders_p_tpl ($BENCH_ORDERS orders each)"
                    make_template orders_tpl -c "$machine" -c "$orders" -c "VACUUM ANALYZE bench_orders" || return 2
                    make_template orders_c_tpl -c "$machine" -c "$orders" \
                        -c "SELECT idem_guard('bench_orders', 'status', 'order')" -c "VACUUM ANALYZE bench_orders" || return 2
                    if [ "$(q postgres -c "SELECT count(*) FROM pg_database WHERE datname = 'orders_p_tpl'")" = 0 ]; then
                        portable_db orders_p_tpl && q orders_p_tpl -c "$machine" -c "$orders" \
                            -c "SELECT idem_guard('bench_orders', 'status', 'order')" -c "VACUUM ANALYZE bench_orders" >/dev/null || return 2
                    fi
                    for db in orders orders_c orders_p; do copy_template "$db" "${db}_tpl" || return 2; done;;
            esac
            ;;
        citus_at|citus_at_dup|citus_at_typed)
            if [ "$CITUS_AT" = missing ]; then
                SKIPPED+=("$1: skipped: function idem_claim_at(\"any\", text, text, interval, text) not installed")
                return 1
            fi
            [ "$1" = citus_at ] || citus_load_dups bench_at || return 2
            ;;
        purge)
            log "preparing database purge_tpl ($BENCH_PURGE_ROWS expired records)"
            make_template purge_tpl \
                -c "SELECT bench_load('idem_records', 'expired', $BENCH_PURGE_ROWS, 'x', 1,
                                      now() - interval '30 days', now() - interval '8 days')" \
                -c "VACUUM ANALYZE idem_records" || return 2
            copy_template purge purge_tpl || return 2
            ;;
    esac
    return 0
}

prepare_run() { # pair side
    outbox_pair "$1" && { outbox_prepare_run "$@" && q bench -c "CHECKPOINT" >/dev/null || return 2; return 0; }
    case $1 in
        new)
            q bench -c "TRUNCATE idem_records, bench_claims" >/dev/null;;
        dup) ;;
        business|overhead)
            q bench -c "TRUNCATE idem_records, bench_claims, bench_ledger" \
                -c "VACUUM bench_accounts" >/dev/null;;
        batch|batch_stmts)
            q bench -c "TRUNCATE idem_records" >/dev/null;;
        scale)
            [ "$2" = A ] || q bench -c "TRUNCATE idem_records" >/dev/null;;
        scale_sql)
            [ "$2" = A ] || q bench -c "TRUNCATE bench_claims" >/dev/null;;
        purge)
            # The same backlog of expired records for A and B; only A purges it.
            copy_template purge purge_tpl;;
        transition)
            copy_template orders orders_tpl;;
        citus)
            q bench -c "TRUNCATE idem_records, bench_claims" >/dev/null;;
        citus_business)
            q bench -c "TRUNCATE idem_records, bench_claims, bench_cledger" >/dev/null;;
        citus_at|citus_at_typed)
            q bench_at -c "TRUNCATE idem_records, bench_claims" >/dev/null;;
        citus_dup|citus_at_dup) ;;
        portable_new)
            q bench_p -c "TRUNCATE idem_records, bench_claims" >/dev/null &&
            q bench -c "TRUNCATE idem_records, bench_claims" >/dev/null;;
        portable_dup) ;;
        portable_business)
            q bench_p -c "TRUNCATE idem_records, bench_claims, bench_ledger" -c "VACUUM bench_accounts" >/dev/null &&
            q bench -c "TRUNCATE idem_records, bench_claims, bench_ledger" -c "VACUUM bench_accounts" >/dev/null;;
        portable_guard)
            copy_template "$(side_db "$1" "$2")" "$(side_db "$1" "$2")_tpl";;
    esac || return 2
    if citus_pair "$1"; then
        citus_all "CHECKPOINT"
    else
        q bench -c "CHECKPOINT" >/dev/null
    fi
}

# run_side SYNC PAIR SIDE ROUND (ROUND 0 = warm-up, not recorded)
run_side() {
    local sync=$1 pair=$2 side=$3 round=$4
    local db script out lsn0 lsn1 wal tps ntx b0 b1 t0 t1 c0 c1 m0 m1 extra="" expired0 expired1 secs
    db=$(side_db "$pair" "$side")
    script=$(side_script "$pair" "$side")
    out=$WORK/out/$sync.$pair.$side.$round
    secs=$BENCH_SECONDS
    [ "$round" -gt 0 ] || secs=$BENCH_WARMUP
    [ "$secs" -gt 0 ] || return 0
    if [ "$round" -gt 0 ]; then
        prepare_run "$pair" "$side" || { echo "prepare of $pair/$side failed" >"$out"; return 1; }
    fi
    if [ "$pair" = purge ] && [ "$side" = A ]; then
        expired0=$(q purge -c "SELECT count(*) FROM idem_records WHERE scope = 'expired'")
    fi
    if citus_pair "$pair"; then lsn0=$(citus_lsns); else lsn0=$(q "$db" -c "SELECT pg_current_wal_insert_lsn()"); fi
    cpu_settle
    cpu_sample
    read -r b0 t0 c0 m0 <<<"$CPU_SAMPLE"
    if [ "$pair" = purge ] && [ "$side" = A ]; then
        pgb purge purge_loop.pgbench "$secs" 1 "$out.purger" &
        PURGER_PID=$!
    fi
    pgb "$db" "$script" "$secs" "$(outbox_clients "$pair")" "$out"
    if [ -n "${PURGER_PID:-}" ]; then
        wait "$PURGER_PID"
        PURGER_PID=
    fi
    if citus_pair "$pair"; then lsn1=$(citus_lsns); else lsn1=$(q "$db" -c "SELECT pg_current_wal_insert_lsn()"); fi
    cpu_settle
    cpu_sample
    read -r b1 t1 c1 m1 <<<"$CPU_SAMPLE"
    if ! pgb_ok "$out"; then
        log "pgbench failed for $pair/$side ($sync):"
        grep -E 'error|abort' "$out" | head -n 5 >&2
        return 1
    fi
    if [ "$pair" = purge ] && [ "$side" = A ]; then
        expired1=$(q purge -c "SELECT count(*) FROM idem_records WHERE scope = 'expired'")
        extra="purged=$((expired0 - expired1)) left=$expired1"
        [ "$expired1" -gt 0 ] || extra="$extra (backlog exhausted before the end: raise BENCH_PURGE_ROWS)"
        pgb_ok "$out.purger" || extra="$extra purger-failed"
    fi
    if [ "$pair" = new ]; then
        # Bytes per record of a table grown by the claims of this run.
        local tbl=idem_records
        [ "$side" = B ] && tbl=bench_claims
        extra="rowbytes=$(q bench -c "SELECT pg_total_relation_size('$tbl') || '/' || count(*) FROM $tbl")"
    fi
    outbox_pair "$pair" && { outbox_after_run "$pair" "$side"; extra=$OUTBOX_EXTRA; }
    [ "$round" -gt 0 ] || return 0
    # WAL of the run: the LSN difference, minus what background processes
    # wrote meanwhile (the bgwriter's Standby/RUNNING_XACTS records), told
    # apart by pg_waldump.  pg_waldump reads the files, so the run's WAL is
    # flushed first: by a transaction with synchronous_commit = on that
    # writes WAL and has an xid (a transactional logical message; a
    # transaction that writes no WAL would commit asynchronously anyway).
    local walall rmgr
    rmgr=""
    if citus_pair "$pair"; then
        # All three nodes, without the breakdown by resource manager.
        walall=$(citus_wal_diff "$lsn0" "$lsn1")
    else
        walall=$(q "$db" -c "SELECT pg_wal_lsn_diff('$lsn1', '$lsn0')")
    fi
    if [ "$walall" -gt 0 ] && ! citus_pair "$pair"; then
        q "$db" -c "SET synchronous_commit = on" \
            -c "SELECT pg_logical_emit_message(true, 'bench', 'flush')" >/dev/null
        idem_as_pg pg_waldump -p "$IDEM_PGDATA/pg_wal" -s "$lsn0" -e "$lsn1" --stats=record \
            >"$out.wal" 2>&1 || log "pg_waldump failed: $(tail -n 1 "$out.wal")"
        rmgr=$(awk '/^[A-Za-z0-9_]+\/[A-Za-z0-9_+]+ / {
                gsub(/\([^)]*\)/, ""); split($1, t, "/"); b[t[1]] += $5; n[t[1]] += $2 }
            END { for (r in b) printf "%s:%d:%d,", r, n[r], b[r] }' "$out.wal")
    fi
    wal=$(awk -v all="$walall" -v r="$rmgr" -v citus="$(citus_pair "$pair" && echo 1)" 'BEGIN {
        if (citus) { print all; exit }
        k = split(r, e, ","); other = 0; standby = 0
        for (i = 1; i <= k; i++) { if (e[i] == "") continue; split(e[i], f, ":")
            if (f[1] == "Standby") standby += f[3]; else other += f[2] }
        w = (other == 0) ? 0 : all - standby; print (w < 0) ? 0 : w }')
    tps=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$out")
    ntx=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$out")
    if outbox_pair "$pair" && [ -n "$OUTBOX_CONSUMED" ]; then
        ntx=$OUTBOX_CONSUMED
        tps=$(awk -v n="$ntx" -v s="$secs" 'BEGIN { printf "%.2f", n / s }')
    fi
    local others load1
    others=$(awk -v b="$((b1 - b0))" -v t="$((t1 - t0))" -v c="$((c1 - c0))" -v m="$((m1 - m0))" \
        'BEGIN { o = (t > 0) ? 100 * (b - c - m) / t : 0; printf "%.0f", (o < 0) ? 0 : o }')
    load1=$(cut -d ' ' -f 1 /proc/loadavg)
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
        "$sync" "$pair" "$side" "$round" "$tps" "$ntx" "$wal" "$others" "$load1" "$extra" "$rmgr" "$walall" "$((c1 - c0))" >>"$RAW"
    log "   $pair $side round $round: $tps tps, $ntx tx, WAL $wal bytes, server CPU $(awk -v c="$((c1 - c0))" -v hz="$CLK_TCK" -v n="$ntx" 'BEGIN { printf "%.1f", c * 1e6 / hz / n }') us/tx; other work ${others}% of the machine, load $load1 $extra"
}

mkdir -p "$WORK/out"
[ "$(id -u)" -ne 0 ] || chown postgres: "$WORK/out"

# run_pair SYNC PAIR: set up, warm up, then the rounds A, B, A, B, ...
# (A, B, C, A, B, C, ... for a pair with a side C)
run_pair() {
    local sync=$1 pair=$2 failed=0 r
    setup_pair "$pair"
    case $? in
        0) ;;
        1) return 0;;
        *) idem_die "setting up pair $pair failed";;
    esac
    log "pair $pair, synchronous_commit = $sync"
    # A third side C (the portable pairs: the C edition) runs after B.
    local c=true
    [ -z "$(side_script "$pair" C)" ] || c="run_side $sync $pair C"
    run_side "$sync" "$pair" A 0 && run_side "$sync" "$pair" B 0 && $c 0 \
        || { SKIPPED+=("$pair ($sync): failed, see the log above"); return 0; }
    for r in $(seq 1 "$BENCH_ROUNDS"); do
        run_side "$sync" "$pair" A "$r" && run_side "$sync" "$pair" B "$r" && $c "$r" || { failed=1; break; }
    done
    [ "$failed" = 0 ] || SKIPPED+=("$pair ($sync): failed, see the log above")
}

for sync in $BENCH_SYNC; do
    [ "$BENCH_PAIRS" = none ] && break
    q postgres -c "ALTER SYSTEM SET synchronous_commit = $sync" -c "SELECT pg_reload_conf()" >/dev/null
    sleep 1
    [ "$(q bench -c "SHOW synchronous_commit")" = "$sync" ] || idem_die "synchronous_commit did not change to $sync"
    for pair in $BENCH_PAIRS; do
        if citus_pair "$pair"; then
            citus_enter "$sync" || continue
            run_pair "$sync" "$pair"
            citus_leave
        else
            run_pair "$sync" "$pair"
        fi
    done
done
citus_stop

# The profile (BENCH_PROFILE=1) and the report, one file each, sourced:
# they run in this shell, on its variables and functions.
# shellcheck source=bench/profile.sh
. "$IDEM_TOP/bench/profile.sh"
# shellcheck source=bench/report.sh
. "$IDEM_TOP/bench/report.sh"
