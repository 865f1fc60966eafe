#!/usr/bin/env bash
# idem_outbox_fetch's latency against the backlog.  Not a test:
# it measures and prints.
#
#   bash bench/outbox_backlog.sh
#
# Builds the checkout into a private installation (as make bench) and a
# throwaway cluster, then for each backlog size B (OUTBOX_BACKLOGS):
#   other  another group ('lag') has B unacknowledged messages of the
#          topic; the measured group ('me') keeps up: before each fetch,
#          100 new messages are published (20 aggregates, one transaction
#          each), then 'me' fetches up to 100 and acknowledges them;
#   self   'me' itself has B unacknowledged messages and fetches up to 100
#          of them (then acknowledges them) at each step.
# The backlog is written straight into idem_outbox, 100 messages per
# transaction (real transaction ids), 1,000 aggregates.  Prints the median
# and the 90th percentile of the fetch (ms) and of the 100 acks, over
# OUTBOX_STEPS steps after 2 unmeasured ones, and what the plan of the
# fetch's run query looked like (EXPLAIN of the last step is in the work
# directory with KEEP_WORK=1).
#
# Environment: OUTBOX_BACKLOGS ["0 100000 1000000"], OUTBOX_STEPS [20],
# OUTBOX_AGGREGATES [1000]; BENCH_BUILD=0 uses the installed extension.
set -u
. "$(dirname "$0")/../test/scripts/harness.sh"

BACKLOGS=${OUTBOX_BACKLOGS:-0 100000 1000000}
STEPS=${OUTBOX_STEPS:-20}
AGGS=${OUTBOX_AGGREGATES:-1000}

idem_setup
WORK=$(idem_workdir) || idem_die "mktemp failed"
idem_work_trap
IDEM_PRIVATE_BUILD=${BENCH_BUILD:-1} idem_private_install "$WORK"
idem_cluster_start "$WORK/cluster" "fsync = on" "synchronous_commit = off" \
    "shared_buffers = 1GB" "max_wal_size = 16GB" "checkpoint_timeout = 1d" "autovacuum = off"
REV=$(git -C "$IDEM_TOP" rev-parse --short HEAD 2>/dev/null || echo unknown)

q() { idem_psql -At -d obl "$@"; }
idem_psql -d postgres -c "CREATE DATABASE obl" >/dev/null || idem_die "CREATE DATABASE failed"
q -c "CREATE EXTENSION idempotency" >/dev/null || idem_die "CREATE EXTENSION failed"
q >/dev/null <<'SQL' || idem_die "the helpers failed"
-- n messages of topic t straight into idem_outbox, per_xact a transaction.
CREATE PROCEDURE load_backlog(t text, n int, per_xact int, aggs int, tag text)
LANGUAGE plpgsql AS $$
DECLARE i int := 0;
BEGIN
    WHILE i < n LOOP
        INSERT INTO idem_outbox (id, topic, aggregate, type, payload, key, seq, xact_id, created_at)
        SELECT idem_outbox_id(t, tag || g), t, 'a' || (g % aggs), 'Backlog',
               jsonb_build_object('n', g), tag || g, 0, pg_current_xact_id(), now()
          FROM generate_series(i, least(i + per_xact, n) - 1) g;
        i := i + per_xact;
        COMMIT;
    END LOOP;
END $$;
CREATE TABLE timings (backlog int, kind text, step int, fetch_ms float8, ack_ms float8, got int);
-- steps fetch + ack steps of group me; with fresh, 100 new messages first
-- (one transaction each, 20 aggregates).
CREATE PROCEDURE measure(backlog int, kind text, steps int, fresh boolean)
LANGUAGE plpgsql AS $$
DECLARE s int; k int; t0 timestamptz; t1 timestamptz; t2 timestamptz; ids uuid[]; x uuid;
BEGIN
    FOR s IN 1 .. steps + 2 LOOP
        IF fresh THEN
            FOR k IN 1 .. 100 LOOP
                PERFORM idem_publish('t', '{}', key => kind || backlog || '-' || s || '-' || k,
                                     aggregate => 'f' || (k % 20));
                COMMIT;
            END LOOP;
        END IF;
        t0 := clock_timestamp();
        SELECT array_agg(f.id) INTO ids FROM idem_outbox_fetch('me', 100) f;
        t1 := clock_timestamp();
        FOREACH x IN ARRAY coalesce(ids, '{}') LOOP
            PERFORM idem_outbox_ack('me', x);
        END LOOP;
        t2 := clock_timestamp();
        COMMIT;
        IF s > 2 THEN
            INSERT INTO timings VALUES (backlog, kind, s - 2,
                extract(epoch FROM t1 - t0) * 1000, extract(epoch FROM t2 - t1) * 1000,
                coalesce(cardinality(ids), 0));
            COMMIT;
        END IF;
    END LOOP;
END $$;
SQL

for b in $BACKLOGS; do
    idem_log "$(date +%H:%M:%S) backlog $b: other group lagging"
    q -c "TRUNCATE idem_outbox, idem_outbox_subscriptions, idem_outbox_deliveries, idem_records" >/dev/null
    q -c "SELECT idem_outbox_subscribe('lag', 't', from_start => true)" >/dev/null
    q -c "CALL load_backlog('t', $b, 100, $AGGS, 'b')" -c "VACUUM ANALYZE idem_outbox" >/dev/null \
        || idem_die "loading failed"
    q -c "SELECT idem_outbox_subscribe('me', 't')" >/dev/null
    q -c "CALL measure($b, 'other', $STEPS, true)" >/dev/null || idem_die "measure failed"
    idem_log "$(date +%H:%M:%S) backlog $b: the group's own"
    q -c "TRUNCATE idem_outbox, idem_outbox_subscriptions, idem_outbox_deliveries, idem_records" >/dev/null
    q -c "SELECT idem_outbox_subscribe('me', 't', from_start => true)" >/dev/null
    q -c "CALL load_backlog('t', $b + ($STEPS + 2) * 100, 100, $AGGS, 'b')" -c "VACUUM ANALYZE idem_outbox" >/dev/null \
        || idem_die "loading failed"
    q -c "CALL measure($b, 'self', $STEPS, false)" >/dev/null || idem_die "measure failed"
    q -c "EXPLAIN (ANALYZE, BUFFERS) SELECT * FROM idem_outbox_fetch('me', 100)" >"$WORK/explain.$b" 2>&1
done

echo
echo "== idem_outbox_fetch against the backlog (tree $REV$([ -n "$(git -C "$IDEM_TOP" status --porcelain 2>/dev/null)" ] && echo ' + uncommitted changes'))"
echo "machine: $(nproc) cores, load average $(cut -d ' ' -f 1-3 /proc/loadavg); PostgreSQL $("$IDEM_BINDIR/postgres" --version | awk '{ print $3 }'); $AGGS aggregates in the backlog; $STEPS steps of fetch(max 100) + 100 acks"
q -c "SELECT format('%-8s %-6s %10s %10s %10s %10s %6s', 'backlog', 'kind', 'fetch p50', 'fetch p90', 'acks p50', 'acks p90', 'got')" \
  -c "SELECT format('%-8s %-6s %10s %10s %10s %10s %6s', backlog, kind,
                    round(percentile_cont(0.5) WITHIN GROUP (ORDER BY fetch_ms)::numeric, 1),
                    round(percentile_cont(0.9) WITHIN GROUP (ORDER BY fetch_ms)::numeric, 1),
                    round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ack_ms)::numeric, 1),
                    round(percentile_cont(0.9) WITHIN GROUP (ORDER BY ack_ms)::numeric, 1),
                    min(got))
        FROM timings GROUP BY backlog, kind ORDER BY kind, backlog"
echo "(ms per call of idem_outbox_fetch('me', 100), and for the 100 idem_outbox_ack calls after it; got: fewest messages a fetch returned)"
