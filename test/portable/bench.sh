#!/usr/bin/env bash
# test/portable/bench.sh: the portable edition's idem_claim against the
# hand-written INSERT ... ON CONFLICT DO NOTHING and against the C edition,
# side by side in one cluster (docs/managed.md).  Not a
# test: it measures and prints, and asserts nothing.
#
# One throwaway cluster of a private installation with the C edition (as
# `make bench` builds it): database bench_c has CREATE EXTENSION
# idempotency, database bench_p the portable plain script in public; both
# have bench/schema.sql (bench_claims, the hand-written table).  Each round
# runs, for new keys and for duplicates, the hand-written INSERT, the
# portable claim and the C claim (bench/*.pgbench: new_insert, new_claim,
# dup_insert, dup_claim), with pgbench -M prepared, alternating: the
# round's PBENCH_SECONDS per run are cut into PBENCH_SLICES slices, and the
# three take turns slice by slice, so that a change in the machine's load
# (a shared machine) falls on all three alike; a run's tps is its
# transactions over its seconds.
#   PBENCH_SECONDS [8]  PBENCH_SLICES [4]  PBENCH_ROUNDS [2]  PBENCH_CLIENTS [2]
#   PBENCH_DUP_ROWS [100000]  PBENCH_SYNC [off]: synchronous_commit
set -u
. "$(dirname "$0")/../harness.sh"

SECS=${PBENCH_SECONDS:-8}
SLICES=${PBENCH_SLICES:-4}
ROUNDS=${PBENCH_ROUNDS:-2}
CLIENTS=${PBENCH_CLIENTS:-2}
DUP_ROWS=${PBENCH_DUP_ROWS:-100000}
SYNC=${PBENCH_SYNC:-off}

idem_setup
WORK=$(idem_workdir)
idem_work_trap
idem_private_install "$WORK"
make -C "$WORK/build" -s PG_CONFIG=/nonexistent portable >/dev/null || idem_die "make portable failed"
mkdir -p "$WORK/s"
cp "$IDEM_TOP"/bench/new_insert.pgbench "$IDEM_TOP"/bench/new_claim.pgbench \
   "$IDEM_TOP"/bench/dup_insert.pgbench "$IDEM_TOP"/bench/dup_claim.pgbench \
   "$IDEM_TOP"/bench/schema.sql "$WORK"/build/build/portable/idempotency-portable--*.sql "$WORK/s/"
[ "$(id -u)" -ne 0 ] || chown -R postgres: "$WORK"
idem_cluster_start "$WORK/cluster" "shared_buffers = 512MB" "synchronous_commit = $SYNC"

idem_psql -c "CREATE DATABASE bench_c" -c "CREATE DATABASE bench_p" >/dev/null
idem_psql -d bench_c -c "CREATE EXTENSION idempotency" >/dev/null
idem_as_pg env PGOPTIONS="-c idempotency.install_schema=public" psql -X -q -v ON_ERROR_STOP=1 \
    -h "$IDEM_PGHOST" -p "$IDEM_PGPORT" -U postgres -d bench_p -f "$WORK"/s/idempotency-portable--*.sql
for db in bench_c bench_p; do
    idem_psql -d "$db" -f "$WORK/s/schema.sql" >/dev/null
    idem_psql -d "$db" \
        -c "SELECT bench_load('idem_records', 'bench', $DUP_ROWS, '', 1, now() - interval '1 hour', now())" \
        -c "SELECT bench_load('bench_claims', 'bench', $DUP_ROWS, '', 1, now() - interval '1 hour', now())" \
        -c "VACUUM ANALYZE" >/dev/null
done

run() { # db script seconds -> transactions
    idem_as_pg pgbench -n -M prepared -c "$CLIENTS" -j "$CLIENTS" -T "$3" -D dup_rows="$DUP_ROWS" \
        -h "$IDEM_PGHOST" -p "$IDEM_PGPORT" -U postgres -f "$WORK/s/$2" "$1" 2>&1 |
        sed -nE 's/^number of transactions actually processed: ([0-9]+).*/\1/p' | head -n 1
}
slice=$(awk -v s="$SECS" -v n="$SLICES" 'BEGIN { x = int(s / n); if (x < 1) x = 1; print x }')

echo "portable vs hand-written vs C: pgbench -M prepared -c $CLIENTS, $SLICES slices of $slice s each, alternating; synchronous_commit = $SYNC, PostgreSQL $IDEM_PG_MAJOR"
printf '%-6s %-5s %12s %12s %12s %16s %10s\n' round pair hand_tps portable_tps c_tps portable/hand c/hand
for r in $(seq 1 "$ROUNDS"); do
    for pair in new dup; do
        h=0; p=0; c=0
        for _ in $(seq 1 "$SLICES"); do
            h=$((h + $(run bench_p "${pair}_insert.pgbench" "$slice")))
            p=$((p + $(run bench_p "${pair}_claim.pgbench" "$slice")))
            c=$((c + $(run bench_c "${pair}_claim.pgbench" "$slice")))
        done
        t=$((SLICES * slice))
        printf '%-6s %-5s %12.0f %12.0f %12.0f %16s %10s\n' "$r" "$pair" \
            "$(awk -v a="$h" -v t="$t" 'BEGIN { print a / t }')" \
            "$(awk -v a="$p" -v t="$t" 'BEGIN { print a / t }')" \
            "$(awk -v a="$c" -v t="$t" 'BEGIN { print a / t }')" \
            "$(awk -v a="$p" -v b="$h" 'BEGIN { printf "%.2f", a / b }')" \
            "$(awk -v a="$c" -v b="$h" 'BEGIN { printf "%.2f", a / b }')"
    done
done
