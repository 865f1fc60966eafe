#!/usr/bin/env bash
# `make bench`: the benchmark of issue 6.  Not a test: it measures and
# prints, and asserts nothing about timing.  See bench/README.md.
#
# One command: builds the current tree into a private copy of the
# PostgreSQL installation (so that concurrent `make install`s by others
# cannot change what is measured half-way), starts a throwaway cluster,
# loads data, and runs each pair A/B with pgbench, interleaved (A, B, A,
# B, ...), under synchronous_commit = off and on.  Prints the medians, the
# ratio A/B against the issue's bar, WAL bytes per operation, and bytes per
# record of idem_records against the hand-written table.
#
# Environment (defaults in brackets):
#   BENCH_SECONDS      duration of every measured pgbench run [8]
#   BENCH_ROUNDS       rounds of A, B per pair and setting [3]
#   BENCH_CLIENTS      pgbench clients (and threads) [2]
#   BENCH_WARMUP       seconds of unmeasured A and B before each pair [2]
#   BENCH_PAIRS        subset of: new dup business overhead batch scale
#                      purge transition (default: all of them), plus the
#                      optional scale_sql (the hand-written table at scale)
#                      and batch_stmts (B as BENCH_BATCH_KEYS statements)
#   BENCH_SYNC         synchronous_commit settings to run ["off on"]
#   BENCH_SCALE_ROWS   live records for "scale" and bytes/record [10000000]
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
# The full run takes about 17 minutes on 2 quiet cores (20 with the
# profile), more on a busy machine.  Quick mode (about 8 minutes; 4 with
# BENCH_SYNC=off):
#   BENCH_SECONDS=3 BENCH_WARMUP=1 BENCH_SCALE_ROWS=1000000 make bench
set -u
. "$(dirname "$0")/../test/harness.sh"

BENCH_SECONDS=${BENCH_SECONDS:-8}
BENCH_ROUNDS=${BENCH_ROUNDS:-3}
BENCH_CLIENTS=${BENCH_CLIENTS:-2}
BENCH_WARMUP=${BENCH_WARMUP:-2}
BENCH_PAIRS=${BENCH_PAIRS:-new dup business overhead batch scale purge transition}
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
for p in $BENCH_PAIRS; do
    case $p in new|dup|business|overhead|batch|batch_stmts|scale|scale_sql|purge|transition|none) ;;
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
stop_purger() { [ -z "${PURGER_PID:-}" ] || kill "$PURGER_PID" 2>/dev/null; }
idem_work_trap stop_purger

log() { idem_log "$(date +%H:%M:%S) $*"; }

# A private installation (test/harness.sh): nothing on the system is written.
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
      "maintenance_work_mem = 1GB" "max_connections = 60")
[ "$BENCH_PRELOAD" = 1 ] && conf+=("shared_preload_libraries = 'idempotency'")
log "starting the cluster"
idem_cluster_start "$WORK/cluster" "${conf[@]}"

q() { # db sql... -> unaligned, tuples only
    local db=$1; shift
    idem_psql -At -d "$db" "$@"
}

for db in bench scale; do
    q postgres -c "CREATE DATABASE $db" >/dev/null || idem_die "CREATE DATABASE $db failed"
    q "$db" -c "CREATE EXTENSION idempotency" >/dev/null \
        || idem_die "CREATE EXTENSION idempotency failed (see above)"
    q "$db" -f "$S/schema.sql" >/dev/null || idem_die "loading bench/schema.sql failed"
    if [ "$BENCH_BASELINE_CHECK" = 1 ]; then
        # idem_records' own CHECK, copied from the catalog.
        q "$db" -c "DO \$\$ BEGIN EXECUTE (SELECT format('ALTER TABLE bench_claims ADD CONSTRAINT bench_claims_status_check %s',
                        pg_get_constraintdef(oid)) FROM pg_constraint
                     WHERE conrelid = 'idem_records'::regclass AND contype = 'c'); END \$\$" >/dev/null \
            || idem_die "adding the CHECK to bench_claims failed"
    fi
    if [ "$BENCH_BASELINE_INDEX" = 1 ]; then
        q "$db" -c "CREATE INDEX bench_claims_expires_at_idx ON bench_claims (expires_at)" >/dev/null \
            || idem_die "adding the expires_at index to bench_claims failed"
    fi
done

has_function() { # signature -> 0 when installed
    [ "$(q bench -c "SELECT to_regprocedure('$1') IS NOT NULL")" = t ]
}

# ---------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------
load_bytes=()
if [ "$BENCH_SCALE_ROWS" -gt 0 ]; then
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
cpu_cluster() {
    local pm
    pm=$(head -n 1 "$IDEM_PGDATA/postmaster.pid")
    { echo "$pm"; ps -o pid= --ppid "$pm"; } | while read -r p; do
        cat "/proc/$p/stat" 2>/dev/null
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
    case $1/$2 in
        scale/A|scale_sql/A) echo scale;;
        purge/*) echo purge;;
        transition/*) echo orders;;
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
    case $1/$2 in
        new/A|scale/A|scale/B|purge/A|purge/B) echo new_claim.pgbench;;
        new/B|scale_sql/A|scale_sql/B) echo new_insert.pgbench;;
        dup/A) echo dup_claim.pgbench;;
        dup/B) echo dup_insert.pgbench;;
        business/A|overhead/A) echo business_claim.pgbench;;
        overhead/B) echo business_plain.pgbench;;
        business/B) echo business_insert.pgbench;;
        batch/A|batch_stmts/A) echo batch_many.pgbench;;
        batch_stmts/B) echo batch_stmts.pgbench;;
        batch/B) echo batch_loop.pgbench;;
        transition/A) echo transition_can.pgbench;;
        transition/B) echo transition_where.pgbench;;
    esac
}
# Operations per pgbench transaction (claims, keys, business transactions
# or updates): tps and WAL are reported per operation.
ops_per_tx() { case $1 in batch|batch_stmts) echo "$BENCH_BATCH_KEYS";; *) echo 1;; esac; }

setup_pair() { # pair: once per pair and setting; returns 1 to skip the pair
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
    esac || return 2
    q bench -c "CHECKPOINT" >/dev/null
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
    lsn0=$(q "$db" -c "SELECT pg_current_wal_insert_lsn()")
    cpu_settle
    cpu_sample
    read -r b0 t0 c0 m0 <<<"$CPU_SAMPLE"
    if [ "$pair" = purge ] && [ "$side" = A ]; then
        pgb purge purge_loop.pgbench "$secs" 1 "$out.purger" &
        PURGER_PID=$!
    fi
    pgb "$db" "$script" "$secs" "$BENCH_CLIENTS" "$out"
    if [ -n "${PURGER_PID:-}" ]; then
        wait "$PURGER_PID"
        PURGER_PID=
    fi
    lsn1=$(q "$db" -c "SELECT pg_current_wal_insert_lsn()")
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
    [ "$round" -gt 0 ] || return 0
    # WAL of the run: the LSN difference, minus what background processes
    # wrote meanwhile (the bgwriter's Standby/RUNNING_XACTS records), told
    # apart by pg_waldump.  pg_waldump reads the files, so the run's WAL is
    # flushed first: by a transaction with synchronous_commit = on that
    # writes WAL and has an xid (a transactional logical message; a
    # transaction that writes no WAL would commit asynchronously anyway).
    local walall rmgr
    walall=$(q "$db" -c "SELECT pg_wal_lsn_diff('$lsn1', '$lsn0')")
    rmgr=""
    if [ "$walall" -gt 0 ]; then
        q "$db" -c "SET synchronous_commit = on" \
            -c "SELECT pg_logical_emit_message(true, 'bench', 'flush')" >/dev/null
        idem_as_pg pg_waldump -p "$IDEM_PGDATA/pg_wal" -s "$lsn0" -e "$lsn1" --stats=record \
            >"$out.wal" 2>&1 || log "pg_waldump failed: $(tail -n 1 "$out.wal")"
        rmgr=$(awk '/^[A-Za-z0-9_]+\/[A-Za-z0-9_+]+ / {
                gsub(/\([^)]*\)/, ""); split($1, t, "/"); b[t[1]] += $5; n[t[1]] += $2 }
            END { for (r in b) printf "%s:%d:%d,", r, n[r], b[r] }' "$out.wal")
    fi
    wal=$(awk -v all="$walall" -v r="$rmgr" 'BEGIN {
        k = split(r, e, ","); other = 0; standby = 0
        for (i = 1; i <= k; i++) { if (e[i] == "") continue; split(e[i], f, ":")
            if (f[1] == "Standby") standby += f[3]; else other += f[2] }
        w = (other == 0) ? 0 : all - standby; print (w < 0) ? 0 : w }')
    tps=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$out")
    ntx=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$out")
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

for sync in $BENCH_SYNC; do
    [ "$BENCH_PAIRS" = none ] && break
    q postgres -c "ALTER SYSTEM SET synchronous_commit = $sync" -c "SELECT pg_reload_conf()" >/dev/null
    sleep 1
    [ "$(q bench -c "SHOW synchronous_commit")" = "$sync" ] || idem_die "synchronous_commit did not change to $sync"
    for pair in $BENCH_PAIRS; do
        setup_pair "$pair"
        case $? in
            0) ;;
            1) continue;;
            *) idem_die "setting up pair $pair failed";;
        esac
        log "pair $pair, synchronous_commit = $sync"
        run_side "$sync" "$pair" A 0 && run_side "$sync" "$pair" B 0 \
            || { SKIPPED+=("$pair ($sync): failed, see the log above"); continue; }
        failed=0
        for r in $(seq 1 "$BENCH_ROUNDS"); do
            run_side "$sync" "$pair" A "$r" && run_side "$sync" "$pair" B "$r" || { failed=1; break; }
        done
        [ "$failed" = 0 ] || SKIPPED+=("$pair ($sync): failed, see the log above")
    done
done

# ---------------------------------------------------------------------------
# Profile (BENCH_PROFILE=1): perf attached to the one backend of a
# one-client pgbench run of N transactions, synchronous_commit = off, for
# idem_claim and the hand-written INSERT, new keys and duplicates.  The
# script pauses before its first transaction, so the whole run is
# recorded; perf stops when the backend exits.  cpu-clock sampling (no
# hardware counters needed), call graphs by DWARF unwinding (the server is
# stripped: static functions show as addresses, but their exported
# callers and callees are named).  The event count of cpu-clock is CPU
# nanoseconds, so every share converts to CPU microseconds per operation.
# ---------------------------------------------------------------------------
PROFILE_VARIANTS="new_claim new_insert dup_claim dup_insert"
# Functions whose inclusive cost is tabulated (those the profile can name).
PROFILE_FUNCS="PostgresMain secure_read secure_write __GI_kill StartTransactionCommand
 CommitTransactionCommand PortalStart PortalRun standard_ExecutorStart ExecInitNode
 ExecInitModifyTable ExecOpenIndices standard_ExecutorRun standard_ExecutorEnd idem_claim
 SPI_connect SPI_finish SPI_execute_plan GetCachedPlan GetTransactionSnapshot
 LockAcquireExtended ExecConstraints stringToNode ExecCheckIndexConstraints
 _bt_search heap_insert heap_finish_speculative ExecInsertIndexTuples _bt_doinsert
 XLogInsert index_fetch_heap idem_expiry timestamptz_pl_interval
 AllocSetContextCreateInternal MemoryContextDelete"
if [ "$BENCH_PROFILE" = 1 ]; then
    command -v perf >/dev/null || idem_die "perf is not installed (apt-get install linux-perf)"
    P=$WORK/profile
    mkdir -p "$P"
    [ "$(id -u)" -ne 0 ] || chown postgres: "$P"
    q postgres -c "ALTER SYSTEM SET synchronous_commit = off" -c "SELECT pg_reload_conf()" >/dev/null
    sleep 1
    q bench -c "TRUNCATE idem_records, bench_claims" \
        -c "SELECT bench_load('idem_records', 'bench', $BENCH_DUP_ROWS, '', 1, now() - interval '1 hour', now())" \
        -c "SELECT bench_load('bench_claims', 'bench', $BENCH_DUP_ROWS, '', 1, now() - interval '1 hour', now())" \
        -c "VACUUM ANALYZE idem_records" -c "VACUUM ANALYZE bench_claims" -c "CHECKPOINT" >/dev/null \
        || idem_die "profile setup failed"
    for v in $PROFILE_VARIANTS; do
        # Calibrate: N transactions take about BENCH_PROFILE_SECONDS.
        pgb bench "$v.pgbench" 2 1 "$P/$v.calibrate" || idem_die "pgbench failed: $(tail -n 3 "$P/$v.calibrate")"
        n=$(awk -v t="$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$P/$v.calibrate")" \
            -v s="$BENCH_PROFILE_SECONDS" 'BEGIN { n = int(t * s); print (n < 1000) ? 1000 : n }')
        echo "$v $n" >>"$P/transactions"
        { printf '\\if :started = 0\n\\sleep 2 s\n\\set started 1\n\\endif\n'; cat "$S/$v.pgbench"; } >"$S/profile_$v.pgbench"
        [ "$(id -u)" -ne 0 ] || chown postgres: "$S/profile_$v.pgbench"
    done
    for r in $(seq 1 "$BENCH_PROFILE_ROUNDS"); do
        for v in $PROFILE_VARIANTS; do
            n=$(awk -v v="$v" '$1 == v { print $2 }' "$P/transactions")
            f=$P/$v.$r
            log "profiling $v, round $r: $n transactions, 1 client"
            idem_as_pg pgbench -n -M prepared -c 1 -t "$n" -D started=0 -D dup_rows="$BENCH_DUP_ROWS" \
                -h "$IDEM_PGHOST" -p "$IDEM_PGPORT" -U postgres -f "$S/profile_$v.pgbench" bench \
                >"$f.pgbench.out" 2>&1 &
            pg_pid=$!
            backend=""
            for _ in $(seq 1 100); do
                backend=$(q bench -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'pgbench' LIMIT 1")
                [ -n "$backend" ] && break
                sleep 0.02
            done
            [ -n "$backend" ] || idem_die "no pgbench backend to profile"
            perf record -q -e cpu-clock -F 700 --call-graph dwarf,8192 -p "$backend" \
                -o "$f.data" >"$f.perf.log" 2>&1
            wait "$pg_pid"
            pgb_ok "$f.pgbench.out" || idem_die "pgbench failed while profiling $v"
            perf report -i "$f.data" --children --sort symbol --stdio -g none >"$f.report" 2>/dev/null
            ns=$(sed -n 's/^# Event count (approx.): //p' "$f.report")
            grep -E '^ +[0-9]' "$f.report" >"$f.children.txt"
            echo "$v $r $n $ns $(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$f.pgbench.out")" >>"$P/summary"
            if [ "$r" = 1 ]; then
                perf report -i "$f.data" --no-children --sort dso,symbol --stdio -g none 2>/dev/null \
                    | grep -E '^ +[0-9]' | head -n 40 >"$P/$v.self.txt"
                perf report -i "$f.data" --no-children --sort dso --stdio -g none 2>/dev/null \
                    | grep -E '^ +[0-9]' >"$P/$v.dso.txt"
            fi
        done
    done
fi

# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print ""; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
col() { # sync pair side column -> values, one a line
    awk -F '\t' -v s="$1" -v p="$2" -v d="$3" -v c="$4" '$1 == s && $2 == p && $3 == d { print $c }' "$RAW"
}
walop() { # sync pair side -> WAL bytes per op of each round
    local n
    n=$(ops_per_tx "$2")
    awk -F '\t' -v s="$1" -v p="$2" -v d="$3" -v n="$n" \
        '$1 == s && $2 == p && $3 == d && $6 > 0 { printf "%.3f\n", $7 / ($6 * n) }' "$RAW"
}
cpuop() { # sync pair side -> server CPU microseconds per op of each round
    local n
    n=$(ops_per_tx "$2")
    awk -F '\t' -v s="$1" -v p="$2" -v d="$3" -v n="$n" -v hz="$CLK_TCK" \
        '$1 == s && $2 == p && $3 == d && $6 > 0 { printf "%.2f\n", $13 * 1e6 / hz / ($6 * n) }' "$RAW"
}
bar_of() {
    case $1 in
        new|dup|business) echo 1.0;;
        batch|batch_stmts) echo 5;;
        scale) echo 0.7;;
        purge) echo 0.9;;
        transition) echo 0.95;;
        *) echo -;;
    esac
}
what_of() {
    case $1 in
        new) echo "claims/s: idem_claim vs INSERT ON CONFLICT, new keys";;
        dup) echo "claims/s: the same, key exists";;
        business) echo "tx/s: UPDATE + INSERT guarded by the claim";;
        overhead) echo "tx/s: UPDATE + INSERT guarded by idem_claim vs unguarded (throughput kept)";;
        batch) echo "keys/s: idem_claim_many($BENCH_BATCH_KEYS) vs $BENCH_BATCH_KEYS idem_claim in 1 statement";;
        batch_stmts) echo "keys/s: idem_claim_many($BENCH_BATCH_KEYS) vs $BENCH_BATCH_KEYS statements";;
        scale) echo "claims/s: idem_claim, ${BENCH_SCALE_ROWS} live vs empty";;
        scale_sql) echo "claims/s: INSERT ON CONFLICT, ${BENCH_SCALE_ROWS} live vs empty";;
        purge) echo "claims/s: idem_claim with vs without a purge";;
        transition) echo "updates/s: idem_can_transition vs WHERE status";;
    esac
}

echo
echo "== idempotency benchmark (issue 6)"
echo "tree: $REV$([ "$DIRTY" -gt 0 ] && echo " + $DIRTY uncommitted/untracked paths")"
echo "machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), $(awk '/MemTotal/ { printf "%.0f GB", $2 / 1048576 }' /proc/meminfo) RAM, PostgreSQL $("$IDEM_BINDIR/postgres" --version | awk '{ print $3 }'), fsync on, shared_buffers $BENCH_SHARED_BUFFERS$([ "$BENCH_PRELOAD" = 1 ] && echo ", shared_preload_libraries = idempotency")"
echo "runs: $BENCH_CLIENTS clients, ${BENCH_SECONDS} s each, $BENCH_ROUNDS rounds interleaved A,B,A,B,..., warm-up ${BENCH_WARMUP} s; medians; pgbench -M prepared"
echo "baseline: bench_claims, PRIMARY KEY (scope, key) and the columns of idem_records$([ "$BENCH_BASELINE_CHECK" = 1 ] && echo ", and its CHECK on status (BENCH_BASELINE_CHECK=1)" || echo " (no CHECK; BENCH_BASELINE_CHECK=1 adds it)")$([ "$BENCH_BASELINE_INDEX" = 1 ] && echo ", and an index on expires_at (BENCH_BASELINE_INDEX=1)" || echo "; no index on expires_at (BENCH_BASELINE_INDEX=1 adds one)")"
if [ -s "$RAW" ]; then
    awk -F '\t' '{ b += $8; if (min == "" || $9 < min) min = $9; if ($9 > max) max = $9; n++ }
        END { printf "load: other work on the machine took %.0f%% of its CPU on average during the runs (1-minute load average %s .. %s)\n", b / n, min, max }' "$RAW"
fi
echo
printf '%-10s %-4s %9s %9s %6s %6s %-4s %8s %8s %7s %7s %6s  %s\n' \
    pair sync "A ops/s" "B ops/s" "A/B" bar "" "WAL/op A" "WAL/op B" "CPU A" "CPU B" "B/A" "measures"
for sync in $BENCH_SYNC; do
    for pair in $BENCH_PAIRS; do
        [ -n "$(col "$sync" "$pair" A 5)" ] || continue
        n=$(ops_per_tx "$pair")
        ta=$(col "$sync" "$pair" A 5 | median)
        tb=$(col "$sync" "$pair" B 5 | median)
        wa=$(walop "$sync" "$pair" A | median)
        wb=$(walop "$sync" "$pair" B | median)
        ca=$(cpuop "$sync" "$pair" A | median)
        cb=$(cpuop "$sync" "$pair" B | median)
        bar=$(bar_of "$pair")
        read -r oa ob ratio verdict < <(awk -v a="$ta" -v b="$tb" -v n="$n" -v bar="$bar" \
            -v pair="$pair" -v wa="$wa" 'BEGIN {
                r = a / b
                v = "-"
                if (bar != "-") {
                    v = (r >= bar) ? "pass" : "FAIL"
                    if (pair == "dup" && wa + 0 > 0) v = "FAIL"
                }
                printf "%.0f %.0f %.3f %s\n", a * n, b * n, r, v }')
        printf '%-10s %-4s %9s %9s %6.3f %6s %-4s %8.1f %8.1f %7.1f %7.1f %6.3f  %s\n' \
            "$pair" "$sync" "$oa" "$ob" "$ratio" ">=$bar" "$verdict" "$wa" "$wb" "$ca" "$cb" \
            "$(awk -v a="$ca" -v b="$cb" 'BEGIN { print (a > 0) ? b / a : 0 }')" "$(what_of "$pair")"
    done
done
for s in "${SKIPPED[@]}"; do echo "$s"; done
if [ -s "$RAW" ]; then
    echo "rounds (ops/s, in the order run; others = share of the machine's CPU taken by other work):"
    for sync in $BENCH_SYNC; do
        for pair in $BENCH_PAIRS; do
            [ -n "$(col "$sync" "$pair" A 5)" ] || continue
            n=$(ops_per_tx "$pair")
            printf '  %-10s %-4s A: %s  B: %s  others: %s\n' "$pair" "$sync" \
                "$(col "$sync" "$pair" A 5 | awk -v n="$n" '{ printf "%s%.0f", (NR > 1) ? " " : "", $1 * n }')" \
                "$(col "$sync" "$pair" B 5 | awk -v n="$n" '{ printf "%s%.0f", (NR > 1) ? " " : "", $1 * n }')" \
                "$(awk -F '\t' -v s="$sync" -v p="$pair" '$1 == s && $2 == p { printf "%s%s%%", (k++ > 0) ? " " : "", $8 }' "$RAW")"
        done
    done
fi
purge_info=$(awk -F '\t' '$2 == "purge" && $3 == "A" { print $1 ": " $10 }' "$RAW" | tr '\n' ';' | sed 's/;$//; s/;/; /g')
[ -z "$purge_info" ] || echo "purge A runs (records purged during the run, expired left): $purge_info"
echo "ops/s: claims per second (batch: keys per second; business: transactions; transition: updates),"
echo "       median over the rounds; A/B is the ratio of the medians.  WAL/op: median over the rounds"
echo "       of the WAL bytes of the run (pg_current_wal_insert_lsn before and after, minus background"
echo "       Standby records found by pg_waldump) / operations.  CPU A, CPU B: CPU microseconds per"
echo "       operation of the whole server (all its processes; pgbench excluded), median over the rounds;"
echo "       B/A > 1 means A costs the server less CPU than B.  Less sensitive to other load than ops/s."
if [ -s "$RAW" ]; then
    echo
    echo "WAL bytes per operation by resource manager (pg_waldump --stats, all rounds; records/op in brackets):"
    for sync in $BENCH_SYNC; do
        for pair in $BENCH_PAIRS; do
            for side in A B; do
                [ -n "$(col "$sync" "$pair" "$side" 5)" ] || continue
                awk -F '\t' -v s="$sync" -v p="$pair" -v d="$side" -v n="$(ops_per_tx "$pair")" '
                    $1 == s && $2 == p && $3 == d {
                        ops += $6 * n; k = split($11, e, ",")
                        for (i = 1; i <= k; i++) if (e[i] != "") { split(e[i], f, ":"); c[f[1]] += f[2]; b[f[1]] += f[3] } }
                    END { line = ""; tot = 0; k = split("Heap Heap2 Btree Transaction XLOG", o, " ")
                          for (r in b) if (!(r in seen) && r != "Standby") { tot += b[r]; seen[r] = 1 }
                          for (r in b) { known = 0; for (i = 1; i <= k; i++) if (o[i] == r) known = 1
                                         if (!known) o[++k] = r }
                          for (i = 1; i <= k; i++) { r = o[i]
                              if (r != "Standby" && (r in b) && b[r] / ops >= 0.05)
                                  line = line sprintf("  %s %.1f [%.2f]", r, b[r] / ops, c[r] / ops) }
                          printf "  %-10s %-4s %s: %.1f =%s\n", p, s, d, (ops > 0) ? tot / ops : 0, line }' "$RAW"
            done
        done
    done
fi

if [ "${#load_bytes[@]}" -gt 0 ]; then
    echo
    echo "bytes per record after loading $BENCH_SCALE_ROWS records into each table (bulk insert, indexes rebuilt, VACUUM ANALYZE); $LOAD_TIME:"
    printf '  %-14s %s\n' table "bytes/record: heap + each index = total (pg_total_relation_size)"
    for e in "${load_bytes[@]}"; do
        tbl=${e%%|*}
        rest=${e#*|}
        echo "$rest" | tr ';' '\n' | awk -v t="$tbl" -v n="$BENCH_SCALE_ROWS" '
            NF == 2 { if ($1 == "total") total = $2; else if ($1 == "toast") { if ($2 > 0) parts = parts sprintf(" + toast %.1f", $2 / n) }
                      else if ($1 == "heap") parts = sprintf("heap %.1f", $2 / n) parts
                      else parts = parts sprintf(" + %s %.1f", $1, $2 / n) }
            END { printf "  %-14s %s = %.1f\n", t, parts, total / n }'
    done
fi
grown=$(for side in A B; do
    awk -F '\t' -v d="$side" '$2 == "new" && $3 == d { split($10, a, "="); split(a[2], b, "/"); if (b[2] > 0) printf "%.1f\n", b[1] / b[2] }' "$RAW" | median
done | tr '\n' ' ')
if [ -n "${grown// /}" ]; then
    read -r ga gb <<<"$grown"
    printf 'bytes per record of the tables grown by the "new" runs (random keys inserted one by one, some ten thousand rows; median over all new runs): idem_records %.1f, bench_claims %.1f\n' "$ga" "$gb"
fi

if [ "$BENCH_PROFILE" = 1 ] && [ -s "$P/summary" ]; then
    echo
    echo "== profile: CPU microseconds per operation of one backend, inclusive of callees (perf cpu-clock,"
    echo "   1 client, synchronous_commit = off; median of $BENCH_PROFILE_ROUNDS interleaved runs per variant;"
    echo "   files in $P)"
    printf '  %-28s' "variant"
    for v in $PROFILE_VARIANTS; do printf ' %11s' "$v"; done
    echo
    printf '  %-28s' "tps of the profiled runs"
    for v in $PROFILE_VARIANTS; do
        printf ' %11s' "$(awk -v v="$v" '$1 == v { print $5 }' "$P/summary" | median | awk '{ printf "%.0f", $1 }')"
    done
    echo
    for f in $PROFILE_FUNCS; do
        line=$(printf '  %-28s' "$f")
        any=0
        for v in $PROFILE_VARIANTS; do
            us=$(awk -v v="$v" '$1 == v { print $2, $3, $4 }' "$P/summary" | while read -r r n ns; do
                    awk -v f="$f" -v n="$n" -v ns="$ns" '$4 == f {
                        gsub(/%/, "", $1); printf "%.2f\n", $1 / 100 * ns / 1000 / n; exit }' "$P/$v.$r.children.txt"
                 done | median | awk 'NF { printf "%.1f", $1 }')
            [ -z "$us" ] && us=- || any=1
            line="$line $(printf ' %10s' "$us")"
        done
        [ "$any" = 0 ] || echo "$line"
    done
    echo "  (PostgresMain = all CPU of the backend per operation; '-' = not in the profile)"
    for v in $PROFILE_VARIANTS; do
        echo
        echo "-- $v (first run): CPU by object, then the top functions by self time"
        sed 's/^/   /' "$P/$v.dso.txt" | head -n 6
        sed 's/^/   /' "$P/$v.self.txt" | head -n 20
    done
fi
echo
echo "total time: $(( $(date +%s) - T0 )) s"
