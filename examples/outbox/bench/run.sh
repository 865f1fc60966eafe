#!/usr/bin/env bash
# The outbox benchmark.  Not a test: it measures and prints.
#
#   bash examples/outbox/bench/run.sh
#
# Builds the checkout into a private installation and a throwaway cluster
# (fsync on, synchronous_commit off, as make bench), then:
#   1. the business transaction of bench/business_claim.pgbench (a claim,
#      an UPDATE, a ledger INSERT) as
#        A claim.pgbench    no event
#        B publish.pgbench  + idem_publish (claim found by itself, aggregate)
#        C insert.pgbench   + a hand-written INSERT into a table of
#                             idem_outbox's shape
#      interleaved A, B, C for OUTBOX_BENCH_ROUNDS rounds; tps and the
#      ratios B/A, B/C, C/A per round;
#   2. fetch + ack: 4 consumers (consume.pgbench, max 100) draining the
#      backlog the rounds left (group subscribed from the start);
#   3. steady state: OUTBOX_BENCH_CLIENTS producers (B) and 4 consumers
#      (max 10) at once: producer tps, messages acknowledged a second, the
#      backlog at the end.
# Environment: OUTBOX_BENCH_SECONDS [10] per run, OUTBOX_BENCH_ROUNDS [2],
# OUTBOX_BENCH_CLIENTS [2] producers; KEEP_WORK=1 keeps the work directory.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../../../test/scripts/harness.sh"

T=${OUTBOX_BENCH_SECONDS:-10}
ROUNDS=${OUTBOX_BENCH_ROUNDS:-2}
CLIENTS=${OUTBOX_BENCH_CLIENTS:-2}

idem_setup
WORK=$(idem_workdir)
idem_work_trap
idem_private_install "$WORK"
idem_cluster_start "$WORK/cluster" "fsync = on" "synchronous_commit = off" \
    "shared_buffers = 512MB" "max_wal_size = 8GB" "checkpoint_timeout = 1d" "autovacuum = off"

S=$WORK/scripts
mkdir -p "$S"
cp "$HERE"/*.pgbench "$HERE"/schema.sql "$S/"
[ "$(id -u)" -ne 0 ] || chown -R postgres: "$S"

q() { idem_psql -At -d bench "$@"; }
idem_psql -d postgres -c "CREATE DATABASE bench" >/dev/null || idem_die "CREATE DATABASE failed"
q -c "CREATE EXTENSION idempotency" -f "$S/schema.sql" >/dev/null || idem_die "schema failed"

pgb() { # pgbench args... -> its output
    idem_as_pg pgbench -n -h "$IDEM_PGHOST" -p "$IDEM_PGPORT" -U postgres "$@" bench 2>&1
}
tps_of() { sed -n 's/^tps = \([0-9.]*\).*/\1/p'; }
# CPU time of the server's exited children (the backends of a pgbench run,
# reaped by the postmaster when it ends), in clock ticks: less sensitive
# than tps to what else the machine runs.
PM=$(head -1 "$IDEM_PGDATA/postmaster.pid")
reaped_ticks() { awk '{ print $16 + $17 }' "/proc/$PM/stat"; }
HZ=$(getconf CLK_TCK)

declare -A tps cpu
for r in $(seq 1 "$ROUNDS"); do
    for s in claim publish insert; do
        q -c "VACUUM" -c "CHECKPOINT" >/dev/null
        sleep 0.5
        t0=$(reaped_ticks)
        out=$(pgb -c "$CLIENTS" -j "$CLIENTS" -T "$T" -f "$S/$s.pgbench")
        sleep 0.5
        t1=$(reaped_ticks)
        n=$(echo "$out" | sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p')
        tps[$s,$r]=$(echo "$out" | tps_of)
        cpu[$s,$r]=$(awk -v d=$((t1 - t0)) -v n="$n" -v hz="$HZ" 'BEGIN { printf "%.1f", d / hz * 1e6 / n }')
        idem_log "round $r $s: ${tps[$s,$r]} tps, ${cpu[$s,$r]} us of backend CPU per transaction"
    done
done
echo
echo "business transaction, $CLIENTS clients, $T s per run: tps, and backend CPU per transaction (us)"
printf '%-6s %-5s %12s %12s %12s %8s %8s %8s\n' round "" "A claim" "B publish" "C insert" B/A B/C C/A
for r in $(seq 1 "$ROUNDS"); do
    for m in tps cpu; do
        if [ $m = tps ]; then a=${tps[claim,$r]}; b=${tps[publish,$r]}; c=${tps[insert,$r]}
        else a=${cpu[claim,$r]}; b=${cpu[publish,$r]}; c=${cpu[insert,$r]}; fi
        awk -v r="$r" -v m="$m" -v a="$a" -v b="$b" -v c="$c" \
            'BEGIN { printf "%-6s %-5s %12.1f %12.1f %12.1f %8.2f %8.2f %8.2f\n", r, m, a, b, c, b / a, b / c, c / a }'
    done
done

# 2. Draining the backlog with 4 consumers.
q -c "SELECT idem_outbox_subscribe('bench', 'accounts', from_start => true)" >/dev/null
before=$(q -c "SELECT unacknowledged FROM idem_outbox_backlog WHERE consumer = 'bench'")
out=$(pgb -c 4 -j 4 -T "$T" -D max=100 -f "$S/consume.pgbench")
after=$(q -c "SELECT unacknowledged FROM idem_outbox_backlog WHERE consumer = 'bench'")
echo
echo "fetch + ack, 4 consumers, max 100, from a backlog of $before: $(( (before - after) / T )) messages/s" \
     "($(echo "$out" | tps_of) fetches/s; $after left)"

# 3. Producers and consumers at once, the group starting empty.
q -c "SELECT idem_outbox_unsubscribe('bench', 'accounts')" \
  -c "SELECT idem_outbox_subscribe('bench', 'accounts')" >/dev/null
acked0=$(q -c "SELECT count(*) FROM idem_outbox")
pgb -c 4 -j 4 -T "$T" -D max=10 -f "$S/consume.pgbench" >"$WORK/consumers.out" &
cpid=$!
prod=$(pgb -c "$CLIENTS" -j "$CLIENTS" -T "$T" -f "$S/publish.pgbench" | tps_of)
wait "$cpid"
published=$(( $(q -c "SELECT count(*) FROM idem_outbox") - acked0 ))
left=$(q -c "SELECT unacknowledged FROM idem_outbox_backlog WHERE consumer = 'bench'")
echo "steady: $CLIENTS producers at $prod tps ($published messages), 4 consumers (max 10):" \
     "$(( (published - left) / T )) messages/s acknowledged, backlog at the end $left"
