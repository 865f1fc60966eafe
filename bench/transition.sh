#!/usr/bin/env bash
# Benchmark of the state-machine half.  Not a test: it
# prints figures and the two ratios the project sets a bar for.
#
#  (1) point UPDATE, pgbench, A and B interleaved:
#      A  UPDATE bench_orders SET status = 'paid'
#         WHERE id = :id AND idem_can_transition('order', status, 'paid')
#      B  UPDATE bench_orders SET status = 'paid'
#         WHERE id = :id AND status = 'pending_payment'
#      Fairness: each run starts from the same freshly loaded table (all
#      rows 'pending_payment', vacuumed, checkpointed) and replays the same
#      pseudo-random row sequence (same --random-seed, fixed number of
#      transactions per client), so A and B update exactly the same rows;
#      the table is large enough that almost every UPDATE changes a row
#      (a repeated id updates 0 rows in both A and B alike).  Same clients,
#      same prepared protocol.  Bar: median tps(A) / median tps(B) >= 0.95.
#      Then, because separate runs on a shared machine drift, the same two
#      scripts run mixed in one pgbench run (each transaction picks A or B
#      at random), so both see exactly the same conditions; the ratio of
#      their median transaction latencies (pgbench -l), latency(B) /
#      latency(A), is the throughput ratio A/B for the same clients.
#      Median over the rounds.
#
#  (2) bulk UPDATE of all BULK_ROWS rows of two identical tables, back to back:
#      A  bulk_a, with idem_guard(bulk_a, status, order)
#      B  bulk_b, without a guard
#      Each round loads both tables (vacuumed, checkpointed), then times
#      the two UPDATEs one right after the other inside the server: wall
#      clock, and the CPU time of the backend (Linux /proc/self/schedstat).
#      Pairing the two measurements of a round cancels most of the drift
#      of a shared machine; the figure is the median over the rounds of
#      A/B - 1 (the ratio of the medians is printed too).  Bar: < +10%.
#      The same with a version column, and with version and history, is
#      printed for information.
#
#  Rounds alternate the order (A B, then B A, ...) so that a drift of the
#  machine's load favours neither side.
#
# Usage: bash bench/transition.sh
# Environment: ROUNDS (default 5), CLIENTS (2), TXNS per client (20000),
# ROWS (1000000), BULK_ROWS (100000), BULK_ROUNDS (7).
set -u
. "$(dirname "$0")/../test/scripts/harness.sh"

ROUNDS=${ROUNDS:-5}
CLIENTS=${CLIENTS:-2}
TXNS=${TXNS:-20000}
ROWS=${ROWS:-1000000}
BULK_ROWS=${BULK_ROWS:-100000}
BULK_ROUNDS=${BULK_ROUNDS:-7}
SEED=${SEED:-20240101}

idem_setup
idem_build_install

WORK=$(idem_workdir)
idem_work_trap

idem_cluster_start "$WORK/cluster" \
    "shared_buffers = 512MB" "max_wal_size = 8GB" "checkpoint_timeout = 1h" \
    "autovacuum = off" "synchronous_commit = off"

q() { idem_psql -At "$@"; }

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

q <<'SQL'
CREATE EXTENSION idempotency;
SELECT idem_machine_define('order', '{
  "initial": ["pending_payment"],
  "transitions": {"pending_payment": ["paid", "cancelled"],
                  "paid": ["shipped", "refunded"],
                  "shipped": ["delivered"]}}');
CREATE TABLE bench_orders (id int PRIMARY KEY, status text NOT NULL,
                           amount numeric NOT NULL DEFAULT 10);
SQL

cat > "$WORK/a.sql" <<SQL
\set id random(1, $ROWS)
UPDATE bench_orders SET status = 'paid' WHERE id = :id AND idem_can_transition('order', status, 'paid');
SQL
cat > "$WORK/b.sql" <<SQL
\set id random(1, $ROWS)
UPDATE bench_orders SET status = 'paid' WHERE id = :id AND status = 'pending_payment';
SQL
[ "$(id -u)" -ne 0 ] || chown postgres: "$WORK"/a.sql "$WORK"/b.sql

reload_point() {
    q -c "TRUNCATE bench_orders" \
      -c "INSERT INTO bench_orders (id, status) SELECT g, 'pending_payment' FROM generate_series(1, $ROWS) g" \
      -c "VACUUM ANALYZE bench_orders" -c "CHECKPOINT" >/dev/null
}

run_point() { # script -> tps
    reload_point
    idem_as_pg pgbench -n -M prepared -h "$IDEM_PGHOST" -p "$IDEM_PGPORT" -U postgres \
        -c "$CLIENTS" -j "$CLIENTS" -t "$TXNS" --random-seed="$SEED" -f "$1" postgres 2>&1 \
        | sed -n 's/^tps = \([0-9.]*\) .*/\1/p'
}

idem_log "(1) point UPDATE: $ROUNDS rounds, $CLIENTS clients x $TXNS transactions, $ROWS rows"
: >"$WORK/p_a"; : >"$WORK/p_b"
for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) -eq 1 ]; then
        a=$(run_point "$WORK/a.sql"); b=$(run_point "$WORK/b.sql")
    else
        b=$(run_point "$WORK/b.sql"); a=$(run_point "$WORK/a.sql")
    fi
    echo "$a" >>"$WORK/p_a"; echo "$b" >>"$WORK/p_b"
    printf '   round %d: idem_can_transition %s tps, hand-written %s tps\n' "$r" "$a" "$b"
done
pa=$(median <"$WORK/p_a"); pb=$(median <"$WORK/p_b")

# Both scripts in one run -> "latency_a latency_b": median transaction
# latencies in ms, from the per-transaction log (field 3: latency in us,
# field 4: script number).
run_mixed() {
    reload_point
    idem_as_pg rm -f "$WORK"/mixlog*
    idem_as_pg sh -c "cd '$WORK' && pgbench -n -M prepared -h '$IDEM_PGHOST' -p '$IDEM_PGPORT' -U postgres \
        -c '$CLIENTS' -j '$CLIENTS' -t '$((2 * TXNS))' --random-seed='$SEED' \
        -l --log-prefix=mixlog -f '$WORK/a.sql@1' -f '$WORK/b.sql@1' postgres" >/dev/null 2>&1
    a=$(cat "$WORK"/mixlog* | awk '$4 == 0 { print $3 / 1000 }' | median)
    b=$(cat "$WORK"/mixlog* | awk '$4 == 1 { print $3 / 1000 }' | median)
    echo "$a $b"
}

idem_log "(1b) the same, mixed in one pgbench run: $ROUNDS rounds"
: >"$WORK/mix"
for r in $(seq 1 "$ROUNDS"); do
    m=$(run_mixed)
    echo "$m" | awk '{ printf "%.4f\n", $2 / $1 }' >>"$WORK/mix"
    printf '   round %d: latency idem_can_transition %s ms, hand-written %s ms\n' "$r" ${m% *} ${m#* }
done
pmix=$(median <"$WORK/mix")

# Two identical tables, bulk_a guarded by $1, bulk_b not, freshly loaded,
# vacuumed and checkpointed; then the UPDATE of each, back to back, in the
# order $2 ("ab" or "ba").  Prints "wall_a cpu_a wall_b cpu_b" (ms): wall
# clock, and the backend's CPU time from /proc/self/schedstat.
run_bulk_pair() {
    local first=bulk_a second=bulk_b
    [ "$2" = ba ] && { first=bulk_b; second=bulk_a; }
    q <<SQL | tail -n 1
SET client_min_messages = warning;
DROP TABLE IF EXISTS bulk_a, bulk_b;
CREATE TABLE bulk_a (id int PRIMARY KEY, status text NOT NULL,
                     version bigint NOT NULL DEFAULT 0, amount numeric NOT NULL DEFAULT 10);
CREATE TABLE bulk_b (LIKE bulk_a INCLUDING ALL);
INSERT INTO bulk_a (id, status) SELECT g, 'pending_payment' FROM generate_series(1, $BULK_ROWS) g;
INSERT INTO bulk_b SELECT * FROM bulk_a;
$1
TRUNCATE idem_transition_log;
VACUUM ANALYZE bulk_a;
VACUUM ANALYZE bulk_b;
CHECKPOINT;
CREATE TEMP TABLE t (tab text, wall numeric, cpu numeric);
SELECT split_part(pg_read_file('/proc/self/schedstat'), ' ', 1)::bigint AS c0,
       pg_catalog.clock_timestamp() AS t0 \gset
UPDATE $first SET status = 'paid';
INSERT INTO t SELECT '$first', extract(epoch FROM pg_catalog.clock_timestamp() - :'t0') * 1000,
       (split_part(pg_read_file('/proc/self/schedstat'), ' ', 1)::bigint - :c0) / 1e6;
SELECT split_part(pg_read_file('/proc/self/schedstat'), ' ', 1)::bigint AS c0,
       pg_catalog.clock_timestamp() AS t0 \gset
UPDATE $second SET status = 'paid';
INSERT INTO t SELECT '$second', extract(epoch FROM pg_catalog.clock_timestamp() - :'t0') * 1000,
       (split_part(pg_read_file('/proc/self/schedstat'), ' ', 1)::bigint - :c0) / 1e6;
SELECT string_agg(round(wall, 1) || ' ' || round(cpu, 1), ' ' ORDER BY tab) FROM t;
SQL
}

guard="SELECT idem_guard('bulk_a', 'status', 'order');"
guard_v="SELECT idem_guard('bulk_a', 'status', 'order', 'version');"
guard_vh="SELECT idem_guard('bulk_a', 'status', 'order', 'version', true);"

idem_log "(2) bulk UPDATE of $BULK_ROWS rows, guarded (A) and not (B) back to back: $BULK_ROUNDS rounds"
: >"$WORK/g"; : >"$WORK/gv"; : >"$WORK/gvh"
for r in $(seq 1 "$BULK_ROUNDS"); do
    [ $((r % 2)) -eq 1 ] && order=ab || order=ba
    g=$(run_bulk_pair "$guard" $order); echo "$g" >>"$WORK/g"
    gv=$(run_bulk_pair "$guard_v" $order); echo "$gv" >>"$WORK/gv"
    printf '   round %d (wall A, CPU A, wall B, CPU B): guard %s; guard+version %s\n' "$r" "$g" "$gv"
done
for r in 1 2 3; do
    run_bulk_pair "$guard_vh" ab >>"$WORK/gvh"
done

col() { awk -v c="$2" '{ print $c }' "$1" | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
cost() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.1f%%", (a / b - 1) * 100 }'; }
# median over the rounds of (A / B) of the same round, as a cost
paircost() { awk -v a="$2" -v b="$3" '{ print $a / $b }' "$1" | median | awk '{ printf "%+.1f%%", ($1 - 1) * 100 }'; }

echo
echo "== results (medians)"
printf '(1) point UPDATE: idem_can_transition %s tps, hand-written WHERE %s tps: ratio A/B = %s (bar >= 0.95)\n' \
    "$pa" "$pb" "$(ratio "$pa" "$pb")"
printf '    mixed runs: throughput ratio A/B = latency(B) / latency(A) = %s (bar >= 0.95)\n' "$pmix"
for k in 1 2; do
    [ $k = 1 ] && what="wall clock" || what="backend CPU"
    ka=$k; kb=$((k + 2))
    printf '(2) bulk UPDATE, %s: guard %s ms, no guard %s ms: ratio of medians A/B = %s, cost %s; median of per-round costs %s (bar < +10%%)\n' \
        "$what" "$(col "$WORK/g" $ka)" "$(col "$WORK/g" $kb)" \
        "$(ratio "$(col "$WORK/g" $ka)" "$(col "$WORK/g" $kb)")" \
        "$(cost "$(col "$WORK/g" $ka)" "$(col "$WORK/g" $kb)")" "$(paircost "$WORK/g" $ka $kb)"
    printf '    for information, median of per-round costs: guard + version %s, guard + version + history %s\n' \
        "$(paircost "$WORK/gv" $ka $kb)" "$(paircost "$WORK/gvh" $ka $kb)"
done
