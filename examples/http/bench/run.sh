#!/usr/bin/env bash
# The HTTP API's cost: a handler transaction with idem_http_begin
# and idem_http_finish (http.pgbench) against the same transaction with a
# bare idem_claim and idem_complete (claim.pgbench), pgbench, interleaved
# A, B, A, B.  Not a test: it prints transactions per second and the
# ratio.  Runs against the server of the libpq environment (PGHOST,
# PGPORT, PGUSER), in a database of its own that it creates and drops.
#   HTTP_BENCH_SECONDS [10]  HTTP_BENCH_ROUNDS [2]  HTTP_BENCH_CLIENTS [2]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
secs=${HTTP_BENCH_SECONDS:-10}; rounds=${HTTP_BENCH_ROUNDS:-2}; clients=${HTTP_BENCH_CLIENTS:-2}
db=idem_http_bench_$$
psql -X -q -d postgres -c "CREATE DATABASE $db"
trap 'psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)"' EXIT
psql -X -q -d "$db" -v ON_ERROR_STOP=1 <<'SQL'
CREATE EXTENSION idempotency;
CREATE TABLE bench_accounts (aid int PRIMARY KEY, balance bigint NOT NULL DEFAULT 0);
INSERT INTO bench_accounts SELECT g FROM generate_series(1, 100000) g;
VACUUM ANALYZE bench_accounts;
SQL
tps() { pgbench -n -c "$clients" -j "$clients" -T "$1" -f "$here/$2" "$db" 2>&1 | sed -n 's/^tps = \([0-9.]*\).*/\1/p'; }
tps 2 http.pgbench >/dev/null; tps 2 claim.pgbench >/dev/null      # warm-up
a=(); b=()
for r in $(seq "$rounds"); do
    a+=("$(tps "$secs" http.pgbench)"); b+=("$(tps "$secs" claim.pgbench)")
    echo "round $r: http ${a[-1]} tps, bare claim ${b[-1]} tps, ratio $(echo "scale=3; ${a[-1]} / ${b[-1]}" | bc)"
done
sa=0; sb=0
for x in "${a[@]}"; do sa=$(echo "$sa + $x" | bc); done
for x in "${b[@]}"; do sb=$(echo "$sb + $x" | bc); done
echo "mean: http $(echo "scale=1; $sa / $rounds" | bc) tps, bare claim $(echo "scale=1; $sb / $rounds" | bc) tps, ratio http/bare $(echo "scale=3; $sa / $sb" | bc)"
