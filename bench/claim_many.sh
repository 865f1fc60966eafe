#!/usr/bin/env bash
# Side-by-side timing of idem_claim_many against idem_claim in a loop.
#
# Every transaction claims KEYS fresh keys (unique per transaction) in one
# scope, three ways:
#   many        one idem_claim_many call with all the keys
#   loop_sql    one statement calling idem_claim once per key
#   loop_stmt   one SELECT idem_claim(...) statement per key (client loop)
# and, for a redelivered batch whose keys are all known already:
#   many_dup    idem_claim_many of KEYS existing keys
#   loop_dup    one statement calling idem_claim once per existing key
# and, for reference, the floor of any batch that writes its records with
# SQL:
#   insert      a hand-written INSERT ... SELECT of KEYS new records
#
# The variants run interleaved, ROUNDS times, each round a pgbench run of
# TX transactions per variant on a freshly truncated table.  Prints the
# median transaction latency and time per key of each variant, and the
# per-key ratios loop/many.  The bar: loop_stmt / many >= 5 and
# loop_sql / many >= 5.
#
# Usage: bash bench/claim_many.sh        (KEYS=500 ROUNDS=7 TX=20 by default)
#        KEEP_WORK=1 keeps the work directory.
set -u
. "$(dirname "$0")/../test/scripts/harness.sh"

KEYS=${KEYS:-500}
ROUNDS=${ROUNDS:-7}
TX=${TX:-20}

idem_setup
idem_build_install

WORK=$(idem_workdir)
idem_work_trap

idem_cluster_start "$WORK/cluster"
idem_psql -d postgres -c "CREATE DATABASE bench" >/dev/null || idem_die "CREATE DATABASE failed"
idem_psql -d bench -c "CREATE EXTENSION idempotency" >/dev/null || idem_die "CREATE EXTENSION failed"

# pgbench scripts.  :p is random per transaction, so keys never repeat
# across transactions; keys within one transaction are p-1 .. p-KEYS.
S=$WORK/scripts
idem_as_pg mkdir -p "$S"
write() { idem_as_pg tee "$S/$1.sql" >/dev/null; }

write many <<EOF
\set p random(1, 1000000000000)
BEGIN;
SELECT count(*) FILTER (WHERE claimed) FROM idem_claim_many('bench',
    ARRAY(SELECT :p || '-' || i FROM generate_series(1, $KEYS) AS i));
COMMIT;
EOF

write loop_sql <<EOF
\set p random(1, 1000000000000)
BEGIN;
SELECT count(*) FILTER (WHERE idem_claim('bench', :p || '-' || i))
FROM generate_series(1, $KEYS) AS i;
COMMIT;
EOF

{
    echo '\set p random(1, 1000000000000)'
    echo 'BEGIN;'
    for i in $(seq 1 "$KEYS"); do
        echo "SELECT idem_claim('bench', :p || '-$i');"
    done
    echo 'COMMIT;'
} | write loop_stmt

write many_dup <<EOF
BEGIN;
SELECT count(*) FILTER (WHERE claimed) FROM idem_claim_many('dup',
    ARRAY(SELECT 'known-' || i FROM generate_series(1, $KEYS) AS i));
COMMIT;
EOF

write loop_dup <<EOF
BEGIN;
SELECT count(*) FILTER (WHERE idem_claim('dup', 'known-' || i))
FROM generate_series(1, $KEYS) AS i;
COMMIT;
EOF

write insert <<EOF
\set p random(1, 1000000000000)
BEGIN;
INSERT INTO idem_records (scope, key, status, created_at, updated_at, expires_at)
SELECT 'bench', :p || '-' || i, 'claimed', now(), now(), now() + interval '7 days'
FROM generate_series(1, $KEYS) AS i;
COMMIT;
EOF

variants="many loop_sql loop_stmt many_dup loop_dup insert"

# One pgbench run; prints the average transaction latency in ms.
run() { # variant
    idem_psql -d bench -c "TRUNCATE idem_records" \
        -c "SELECT count(*) FROM idem_claim_many('dup', ARRAY(SELECT 'known-' || i FROM generate_series(1, $KEYS) AS i))" \
        -c "VACUUM ANALYZE idem_records" >/dev/null
    idem_as_pg pgbench -n -M prepared -c 1 -t "$TX" -f "$S/$1.sql" \
        -h "$IDEM_PGHOST" -p "$IDEM_PGPORT" -U postgres bench 2>&1 |
        awk '/^latency average/ { print $4 }'
}

declare -A lat
idem_log "warm-up"
for v in $variants; do run "$v" >/dev/null; done

for r in $(seq 1 "$ROUNDS"); do
    line="round $r:"
    for v in $variants; do
        ms=$(run "$v")
        [ -n "$ms" ] || idem_die "pgbench failed for $v"
        lat[$v]="${lat[$v]:-} $ms"
        line="$line $v=${ms}ms"
    done
    idem_log "$line"
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

declare -A med
echo
printf '%-10s %14s %12s\n' variant "median tx ms" "us per key"
for v in $variants; do
    med[$v]=$(echo "${lat[$v]}" | median)
    awk -v v="$v" -v ms="${med[$v]}" -v n="$KEYS" \
        'BEGIN { printf "%-10s %14.3f %12.2f\n", v, ms, ms * 1000 / n }'
done
echo
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", a / b }'; }
echo "keys per transaction: $KEYS, rounds: $ROUNDS, transactions per round and variant: $TX"
echo "per-key ratio loop_stmt / many:    $(ratio "${med[loop_stmt]}" "${med[many]}")x"
echo "per-key ratio loop_sql / many:     $(ratio "${med[loop_sql]}" "${med[many]}")x"
echo "per-key ratio loop_dup / many_dup: $(ratio "${med[loop_dup]}" "${med[many_dup]}")x"
echo "many / insert (cost over a plain INSERT of the same rows): $(ratio "${med[many]}" "${med[insert]}")x"
echo "loop_sql / insert (the most any batch writing rows with SQL can gain): $(ratio "${med[loop_sql]}" "${med[insert]}")x"
