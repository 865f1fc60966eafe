#!/usr/bin/env bash
# WAL bytes per published message, by relation.  Not a test: it measures
# and prints (docs/performance.md#outbox).
#
#   bash bench/outbox_wal.sh
#
# Builds the checkout into a private installation (as make bench) and a
# throwaway cluster, then runs OUTBOX_WAL_N single-session transactions of
# make bench's outbox_sql shape (a claim of a 19-digit key, an account's
# UPDATE and a ledger INSERT) for each side, OUTBOX_WAL_ROUNDS times,
# interleaved:
#   pulled    idem_publish to a topic consumer groups may read (the
#             default), the account (of OUTBOX_WAL_AGGREGATES) as the
#             aggregate;
#   debezium  the same to a topic set to pull => false;
#   hand      a hand-written INSERT into a Debezium-shaped table (id uuid
#             from gen_random_uuid(), primary key only), as outbox_sql's B.
# Each side is warmed up first (every aggregate has earlier messages and
# its lock row).  Per side and round it prints the bytes of the WAL
# records (pg_waldump, full-page images left out: they depend on the time
# since the checkpoint) of each relation of the outbox, per transaction.
#
# Environment: OUTBOX_WAL_N [2000], OUTBOX_WAL_ROUNDS [2],
# OUTBOX_WAL_AGGREGATES [1000]; BENCH_BUILD=0 uses the installed extension.
set -u
. "$(dirname "$0")/../test/scripts/harness.sh"

N=${OUTBOX_WAL_N:-2000}
ROUNDS=${OUTBOX_WAL_ROUNDS:-2}
AGGS=${OUTBOX_WAL_AGGREGATES:-1000}
for v in "$N" "$ROUNDS" "$AGGS"; do
    case $v in ''|*[!0-9]*|0) idem_die "OUTBOX_WAL_N, _ROUNDS and _AGGREGATES must be positive integers";; esac
done

idem_setup
WORK=$(idem_workdir) || idem_die "mktemp failed"
idem_work_trap
IDEM_PRIVATE_BUILD=${BENCH_BUILD:-1} idem_private_install "$WORK"
idem_cluster_start "$WORK/cluster" "fsync = on" "synchronous_commit = off" \
    "shared_buffers = 1GB" "max_wal_size = 16GB" "checkpoint_timeout = 1d" "autovacuum = off"
REV=$(git -C "$IDEM_TOP" rev-parse --short HEAD 2>/dev/null || echo unknown)

q() { idem_psql -At -d obw "$@"; }
idem_psql -d postgres -c "CREATE DATABASE obw" >/dev/null || idem_die "CREATE DATABASE failed"
q -c "CREATE EXTENSION idempotency" >/dev/null || idem_die "CREATE EXTENSION failed"
q -f "$IDEM_TOP/bench/schema.sql" >/dev/null || idem_die "bench/schema.sql failed"
q >/dev/null <<SQL || idem_die "the helpers failed"
-- After bench/schema.sql (accounts, ledger, the hand-written bench_outbox).
INSERT INTO bench_accounts (id) SELECT g FROM generate_series(1, $AGGS) g;
SELECT idem_outbox_topic('accountd', pull => false);
-- n transactions of one side, each committed.
CREATE PROCEDURE side(s text, n int)
LANGUAGE plpgsql AS \$\$
DECLARE k text; a int; amount int;
BEGIN
    FOR i IN 1 .. n LOOP
        k := (1000000000000000000 + (random() * 8000000000000000000)::int8)::text;
        a := 1 + (random() * ($AGGS - 1))::int;
        amount := 1 + (random() * 999)::int;
        IF idem_claim('bench', k) THEN
            UPDATE bench_accounts SET balance = balance + amount WHERE id = a;
            INSERT INTO bench_ledger (event, account, amount) VALUES (k, a, amount);
            IF s = 'hand' THEN
                INSERT INTO bench_outbox (aggregatetype, aggregateid, type, payload)
                VALUES ('accounts', a::text, 'Credited', jsonb_build_object('account', a, 'amount', amount));
            ELSE
                PERFORM idem_publish(CASE s WHEN 'pulled' THEN 'accountp' ELSE 'accountd' END,
                                     jsonb_build_object('account', a, 'amount', amount),
                                     aggregate => a::text, type => 'Credited');
            END IF;
        END IF;
        COMMIT;
    END LOOP;
END \$\$;
SQL
for s in pulled debezium hand; do
    q -c "CALL side('$s', $((3 * AGGS)))" >/dev/null || idem_die "the warm-up of $s failed"
done
q -c "CHECKPOINT" >/dev/null

rels="idem_outbox idem_outbox_pkey idem_outbox_topic_aggregate_idx idem_outbox_aggregates idem_outbox_aggregates_pkey idem_outbox_position_seq bench_outbox bench_outbox_pkey"
declare -A node
for r in $rels; do
    node[$r]=$(q -c "SELECT pg_relation_filenode('$r')") || idem_die "no relation $r"
done
db=$(q -c "SELECT oid FROM pg_database WHERE datname = 'obw'")

echo
echo "== WAL bytes per message (tree $REV$([ -n "$(git -C "$IDEM_TOP" status --porcelain 2>/dev/null)" ] && echo ' + uncommitted changes'))"
echo "PostgreSQL $("$IDEM_BINDIR/postgres" --version | awk '{ print $3 }'); $N transactions per side and round, $AGGS aggregates; record bytes without full-page images, per transaction"
for round in $(seq 1 "$ROUNDS"); do
    for s in pulled debezium hand; do
        lsn0=$(q -c "SELECT pg_current_wal_insert_lsn()")
        q -c "CALL side('$s', $N)" >/dev/null || idem_die "side $s failed"
        lsn1=$(q -c "SELECT pg_current_wal_insert_lsn()")
        idem_as_pg pg_waldump -p "$IDEM_PGDATA/pg_wal" -s "$lsn0" -e "$lsn1" >"$WORK/wal.txt" 2>/dev/null
        line="round $round $(printf '%-9s' "$s")"; total=0
        for r in $rels; do
            b=$(grep " rel [0-9]*/$db/${node[$r]} " "$WORK/wal.txt" \
                | sed -E 's/.*len \(rec\/tot\): *([0-9]+)\/.*/\1/' | awk '{ s += $1 } END { print s + 0 }')
            [ "$b" -eq 0 ] || line="$line  $r $((b / N))"
            total=$((total + b))
        done
        echo "$line  total $((total / N))"
    done
done
