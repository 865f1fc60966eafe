#!/usr/bin/env bash
# idem_outbox_fetch's latency against the backlog.  Not a test:
# it measures and prints.
#
#   bash bench/outbox_backlog.sh
#
# Builds the checkout into a private installation (as make bench) and a
# throwaway cluster, then for each size B (OUTBOX_BACKLOGS) and each kind
# (OUTBOX_KINDS) measures group 'me' of topic 't':
#   other   another group ('lag') has B unacknowledged messages of the
#           topic; 'me' keeps up: before each fetch, 100 new messages are
#           published (20 aggregates, one transaction each), then 'me'
#           fetches up to 100 and acknowledges them;
#   self    'me' itself has B unacknowledged messages and fetches up to 100
#           of them (then acknowledges them) at each step;
#   acked   B messages of 't' that 'me' has acknowledged (its runs
#           drained), then as other;
#   leased  B runs of 'me' leased (B messages in B aggregates, each run's
#           lease an hour ahead), then as other;
#   topics  B messages in B other topics, then as other;
#   groups  B other groups, each subscribed to another topic with one
#           free run, then as other;
#   open    as other, while another session keeps a transaction (with a
#           transaction id) open over the whole measurement.
# Messages and runs are written straight into the tables (a group
# subscribed from the start gets its runs for them), 100 messages per
# transaction (real transaction ids), 1,000 aggregates.  Prints the median
# and the 90th percentile of the fetch (ms) and of the batch
# acknowledgement (idem_outbox_ack_many), over OUTBOX_STEPS steps after 2
# unmeasured ones, and the locks the fetch's transaction held (the most in
# a step), and the time of a publication with its commit.  EXPLAIN of
# the last fetch is in the work directory with
# KEEP_WORK=1.
#
# Environment: OUTBOX_BACKLOGS ["0 100000 1000000"], OUTBOX_KINDS ["other
# self acked leased topics groups open"], OUTBOX_STEPS [20],
# OUTBOX_AGGREGATES [1000]; BENCH_BUILD=0 uses the installed extension.
set -u
. "$(dirname "$0")/../test/scripts/harness.sh"

BACKLOGS=${OUTBOX_BACKLOGS:-0 100000 1000000}
KINDS=${OUTBOX_KINDS:-other self acked leased topics groups open}
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
-- n messages of topic t (or of t || i, i < topics, when topics > 0)
-- straight into idem_outbox, per_xact a transaction.
CREATE PROCEDURE load_backlog(t text, n int, per_xact int, aggs int, tag text, topics int DEFAULT 0)
LANGUAGE plpgsql AS $$
DECLARE i int := 0;
BEGIN
    WHILE i < n LOOP
        INSERT INTO idem_outbox (id, topic, aggregate, type, payload, key, seq, xact_id, created_at)
        SELECT idem_outbox_id(x.topic, tag || g), x.topic, 'a' || (g % aggs), 'Backlog',
               jsonb_build_object('n', g), tag || g, 0, pg_current_xact_id(), now()
          FROM generate_series(i, least(i + per_xact, n) - 1) g,
               LATERAL (SELECT CASE WHEN topics > 0 THEN t || (g % topics) ELSE t END AS topic) x;
        i := i + per_xact;
        COMMIT;
    END LOOP;
END $$;
CREATE TABLE timings (backlog int, kind text, step int, fetch_ms float8, ack_ms float8, got int, locks int, pub_ms float8);
-- steps fetch + ack steps of group me; with fresh, 100 new messages first
-- (one transaction each, 20 aggregates).
CREATE PROCEDURE measure(backlog int, kind text, steps int, fresh boolean)
LANGUAGE plpgsql AS $$
DECLARE s int; k int; tp timestamptz; t0 timestamptz; t1 timestamptz; t2 timestamptz; ids uuid[]; nlocks int;
BEGIN
    FOR s IN 1 .. steps + 2 LOOP
        tp := clock_timestamp();
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
        SELECT count(*) INTO nlocks FROM pg_locks WHERE pid = pg_backend_pid();
        PERFORM idem_outbox_ack_many('me', coalesce(ids, '{}'));
        t2 := clock_timestamp();
        COMMIT;
        IF s > 2 THEN
            INSERT INTO timings VALUES (backlog, kind, s - 2,
                extract(epoch FROM t1 - t0) * 1000, extract(epoch FROM t2 - t1) * 1000,
                coalesce(cardinality(ids), 0), nlocks,
                CASE WHEN fresh THEN extract(epoch FROM t0 - tp) * 10 END);
            COMMIT;
        END IF;
    END LOOP;
END $$;
SQL

reset() {
    q -c "TRUNCATE idem_outbox, idem_outbox_subscriptions, idem_outbox_runs, idem_outbox_aggregates, idem_records" >/dev/null \
        || idem_die "TRUNCATE failed"
}
load() { # n aggregates [topics]
    q -c "CALL load_backlog('$( [ $# -ge 3 ] && echo o || echo t)', $1, 100, $2, 'b', ${3:-0})" \
      -c "VACUUM ANALYZE idem_outbox" >/dev/null || idem_die "loading failed"
}
for b in $BACKLOGS; do
    for kind in $KINDS; do
        idem_log "$(date +%H:%M:%S) $b: $kind"
        reset
        fresh=true
        case $kind in
            other|open)
                load "$b" "$AGGS"
                q -c "SELECT idem_outbox_subscribe('lag', 't', from_start => true)" >/dev/null;;
            self)
                load $((b + (STEPS + 2) * 100)) "$AGGS"
                q -c "SELECT idem_outbox_subscribe('me', 't', from_start => true)" >/dev/null
                fresh=false;;
            acked)
                load "$b" "$AGGS"
                q -c "SELECT idem_outbox_subscribe('me', 't', from_start => true)" \
                  -c "UPDATE idem_outbox_runs r SET acked = m.p, available_at = 'infinity'
                        FROM (SELECT aggregate, max(position) AS p FROM idem_outbox GROUP BY aggregate) m
                       WHERE r.aggregate = m.aggregate" -c "VACUUM ANALYZE idem_outbox_runs" >/dev/null \
                    || idem_die "acknowledging failed";;
            leased)
                load "$b" "$((b > 0 ? b : 1))"
                q -c "SELECT idem_outbox_subscribe('me', 't', from_start => true)" \
                  -c "UPDATE idem_outbox_runs SET available_at = now() + interval '1 hour',
                             leased_upto = acked + 1, handed_upto = acked + 1, attempts = 1" \
                  -c "VACUUM ANALYZE idem_outbox_runs" >/dev/null || idem_die "leasing failed";;
            topics)
                load "$b" "$AGGS" "$b";;
            groups)
                q -c "INSERT INTO idem_outbox_subscriptions (consumer, topic, horizon)
                      SELECT 'g' || i, 'o', '0' FROM generate_series(1, $b) i" \
                  -c "INSERT INTO idem_outbox_runs (consumer, topic, aggregate, acked, available_at)
                      SELECT 'g' || i, 'o', 'x', 0, now() FROM generate_series(1, $b) i" \
                  -c "VACUUM ANALYZE idem_outbox_runs, idem_outbox_subscriptions" >/dev/null \
                    || idem_die "the groups failed";;
            *) idem_die "unknown kind $kind";;
        esac
        [ "$kind" = self ] || q -c "SELECT idem_outbox_subscribe('me', 't')" >/dev/null
        holder=
        if [ "$kind" = open ]; then
            idem_psql -d obl -c "BEGIN" -c "SELECT pg_current_xact_id()" -c "SELECT pg_sleep(3600)" >/dev/null 2>&1 &
            holder=$!
            sleep 1
        fi
        q -c "CALL measure($b, '$kind', $STEPS, $fresh)" >/dev/null || idem_die "measure failed"
        q -c "EXPLAIN (ANALYZE, BUFFERS) SELECT * FROM idem_outbox_fetch('me', 100)" >"$WORK/explain.$kind.$b" 2>&1
        if [ -n "$holder" ]; then
            q -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(3600)%' AND pid <> pg_backend_pid()" >/dev/null
            wait "$holder" 2>/dev/null
        fi
    done
done
echo
echo "== idem_outbox_fetch against the backlog (tree $REV$([ -n "$(git -C "$IDEM_TOP" status --porcelain 2>/dev/null)" ] && echo ' + uncommitted changes'))"
echo "machine: $(nproc) cores, load average $(cut -d ' ' -f 1-3 /proc/loadavg); PostgreSQL $("$IDEM_BINDIR/postgres" --version | awk '{ print $3 }'); $AGGS aggregates in the backlog; $STEPS steps of fetch(max 100) + ack_many"
q -c "SELECT format('%-8s %-6s %10s %10s %10s %10s %6s %6s %8s', 'size', 'kind', 'fetch p50', 'fetch p90', 'ack p50', 'ack p90', 'got', 'locks', 'pub p50')" \
  -c "SELECT format('%-8s %-6s %10s %10s %10s %10s %6s %6s %8s', backlog, kind,
                    round(percentile_cont(0.5) WITHIN GROUP (ORDER BY fetch_ms)::numeric, 1),
                    round(percentile_cont(0.9) WITHIN GROUP (ORDER BY fetch_ms)::numeric, 1),
                    round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ack_ms)::numeric, 1),
                    round(percentile_cont(0.9) WITHIN GROUP (ORDER BY ack_ms)::numeric, 1),
                    min(got), max(locks),
                    coalesce(round(percentile_cont(0.5) WITHIN GROUP (ORDER BY pub_ms)::numeric, 2)::text, '-'))
        FROM timings GROUP BY backlog, kind ORDER BY kind, backlog"
echo "(ms per call of idem_outbox_fetch('me', 100) and of the idem_outbox_ack_many of its batch; got: fewest messages a fetch returned; locks: most pg_locks rows of the fetching session after a fetch; pub: ms per idem_publish of the fresh messages, with its commit)"
