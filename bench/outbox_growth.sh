#!/usr/bin/env bash
# Is idem_outbox bounded when the background purge runs?  Not
# a test: it measures and prints.
#
#   bash bench/outbox_growth.sh
#
# Builds the checkout into a private installation and starts a throwaway
# cluster with the library preloaded and the background purge on
# (idempotency.purge_databases = 'growth', purge_naptime 1s; autovacuum
# on, as in production).  Topic 'g' keeps acknowledged messages
# OUTBOX_RETENTION.  For OUTBOX_SECONDS, producers (pgbench, 2 clients: a
# claim and idem_publish, 50 aggregates) and consumers (pgbench, 2 clients:
# idem_outbox_fetch('fast', 100) and an ack per message) run at once, and
# a third group 'slow' stops reading after OUTBOX_SLOW_STOP seconds (a
# lagging group: what it has not acknowledged must stay).  Every
# OUTBOX_SAMPLE seconds one line: messages published so far, rows and
# bytes of idem_outbox and idem_outbox_deliveries, what 'slow' has not
# acknowledged.  At the end: the same after the producers stopped, 'slow'
# unsubscribed and two purge rounds.
#
# Environment: OUTBOX_SECONDS [60], OUTBOX_RETENTION ['5 seconds'],
# OUTBOX_SAMPLE [5], OUTBOX_SLOW_STOP [20], OUTBOX_RATE [300: producer
# transactions a second, pgbench -R, so that the consumers can keep up;
# 0: as fast as they go]; BENCH_BUILD=0 uses the installed extension.
set -u
. "$(dirname "$0")/../test/scripts/harness.sh"

SECONDS_=${OUTBOX_SECONDS:-60}
RETENTION=${OUTBOX_RETENTION:-5 seconds}
SAMPLE=${OUTBOX_SAMPLE:-5}
SLOW_STOP=${OUTBOX_SLOW_STOP:-20}
RATE=${OUTBOX_RATE:-300}

idem_setup
WORK=$(idem_workdir) || idem_die "mktemp failed"
idem_work_trap
IDEM_PRIVATE_BUILD=${BENCH_BUILD:-1} idem_private_install "$WORK"
idem_cluster_start "$WORK/cluster" "shared_preload_libraries = 'idempotency'" \
    "idempotency.purge_databases = 'growth'" "idempotency.purge_naptime = 1s" \
    "synchronous_commit = off" "log_min_messages = log" "track_functions = pl"
REV=$(git -C "$IDEM_TOP" rev-parse --short HEAD 2>/dev/null || echo unknown)

q() { idem_psql -At -d growth "$@"; }
idem_psql -d postgres -c "CREATE DATABASE growth" >/dev/null || idem_die "CREATE DATABASE failed"
q -c "CREATE EXTENSION idempotency" \
  -c "SELECT idem_outbox_topic('g', retention => '$RETENTION')" \
  -c "SELECT idem_outbox_subscribe('fast', 'g')" \
  -c "SELECT idem_outbox_subscribe('slow', 'g')" >/dev/null || idem_die "setup failed"

S=$WORK/scripts
mkdir -p "$S"
cat >"$S/produce.pgbench" <<'PGB'
\set k random(1, 9000000000000000000)
\set a random(1, 50)
BEGIN;
SELECT idem_claim('growth', :k::text) AS claimed \gset
\if :claimed
SELECT idem_publish('g', jsonb_build_object('k', :k::text), aggregate => :a::text) IS NOT NULL AS published \gset
\endif
COMMIT;
PGB
cat >"$S/consume.pgbench" <<'PGB'
SELECT count(idem_outbox_ack('fast', f.id)) FROM idem_outbox_fetch('fast', 100) AS f;
\sleep 20 ms
PGB
cat >"$S/slow.pgbench" <<'PGB'
SELECT count(idem_outbox_ack('slow', f.id)) FROM idem_outbox_fetch('slow', 100) AS f;
\sleep 20 ms
PGB
[ "$(id -u)" -ne 0 ] || chown -R postgres: "$S"
pgb() { # seconds clients script [rate]
    local rate=()
    [ "${4:-0}" = 0 ] || rate=(-R "$4")
    idem_as_pg pgbench -n -h "$IDEM_PGHOST" -p "$IDEM_PGPORT" -U postgres -T "$1" -c "$2" -j "$2" \
        "${rate[@]}" -f "$S/$3" growth >"$WORK/$3.out" 2>&1
}

sample() { # label
    q -F ' ' -c "SELECT '$1', (SELECT last_value FROM idem_outbox_position_seq),
                        (SELECT count(*) FROM idem_outbox), pg_total_relation_size('idem_outbox'),
                        (SELECT count(*) FROM idem_outbox_deliveries), pg_total_relation_size('idem_outbox_deliveries'),
                        (SELECT unacknowledged FROM idem_outbox_backlog WHERE consumer = 'slow')"
}

echo
echo "== idem_outbox with the background purge (tree $REV), retention '$RETENTION', producers at $RATE tx/s (0: unthrottled), $(nproc) cores, load $(cut -d ' ' -f 1 /proc/loadavg)"
printf '%-6s %10s %10s %12s %11s %12s %10s\n' "t (s)" published "outbox" "outbox bytes" "deliveries" "deliv. bytes" "slow lags"
pgb "$SECONDS_" 2 produce.pgbench "$RATE" &
P1=$!
pgb "$SECONDS_" 2 consume.pgbench &
P2=$!
pgb "$SLOW_STOP" 1 slow.pgbench &
P3=$!
t=0
while [ "$t" -lt "$SECONDS_" ]; do
    sleep "$SAMPLE"
    t=$((t + SAMPLE))
    sample "$t" | awk '{ printf "%-6s %10s %10s %12s %11s %12s %10s\n", $1, $2, $3, $4, $5, $6, $7 }'
done
wait "$P1" "$P2" "$P3"
grep -h '^tps' "$WORK"/*.out | sed 's/^/  pgbench: /'
q -c "SELECT idem_outbox_unsubscribe('slow', 'g')" >/dev/null
sleep 8
sample "end" | awk '{ printf "%-6s %10s %10s %12s %11s %12s %10s\n", $1, $2, $3, $4, $5, $6, $7 }'
echo "(end: producers stopped, 'slow' unsubscribed, 8 s of purge rounds)"
grep -c 'outbox messages in database' "$IDEM_CLUSTER_DIR/server.log" | sed 's/^/purge rounds that removed messages: /'
echo "time in the outbox's functions (track_functions = pl; ms in all, calls, ms a call):"
q -F ' ' -c "SELECT funcname, round(total_time), calls, round((total_time / calls)::numeric, 2)
               FROM pg_stat_user_functions WHERE funcname LIKE 'idem_%' ORDER BY total_time DESC" | sed 's/^/  /'

# Bytes per message, on a table of its own shape: 100,000 messages of the
# shape above (a 10-byte aggregate, a payload of about 30 bytes) written
# straight into an emptied idem_outbox, then VACUUM.
q -c "TRUNCATE idem_outbox, idem_outbox_deliveries" \
  -c "INSERT INTO idem_outbox (id, topic, aggregate, type, payload, key, seq, xact_id, created_at)
      SELECT idem_outbox_id('g', 'k' || g), 'g', 'account-' || (g % 50 + 10), NULL,
             jsonb_build_object('k', (g::int8 * 1000003)::text), (g::int8 * 1000003)::text, 0, pg_current_xact_id(), now()
        FROM generate_series(1, 100000) g" -c "VACUUM ANALYZE idem_outbox" >/dev/null
echo "bytes per message (100,000 written at once, then VACUUM):"
q -F ' ' -c "SELECT c.relname, round(pg_relation_size(c.oid) / 100000.0, 1)
               FROM pg_class c
              WHERE c.oid = 'idem_outbox'::regclass
                 OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = 'idem_outbox'::regclass)
              ORDER BY 1" | sed 's/^/  /'

