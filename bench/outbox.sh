# Sourced by bench/run.sh (not run on its own): the outbox pairs
# (docs/outbox.md, docs/performance.md#outbox).  Everything about them is
# here; run.sh calls these functions from its generic code (one hook line
# each: pair names, database, script, clients, operations per transaction,
# setup, preparation of a run, the extra column, the report's legend).
# shellcheck shell=bash
#
#   outbox        A: the "business" transaction (a claim, an UPDATE, a
#                 ledger INSERT) with idem_publish of one message (the
#                 claim found by itself, the account as aggregate);
#                 B: the same with the claim only (business_claim.pgbench)
#   outbox_sql    A: as outbox A, the topic relayed to Debezium only
#                 (pull => false; BENCH_OUTBOX_PULL); B: the claim and a
#                 hand-written INSERT into a Debezium-shaped table
#                 (bench_outbox: id uuid from gen_random_uuid(), primary
#                 key only)
#   outbox_fetch2 A: as outbox_fetch, the clients split over two groups
#                 of the same topic (ops: both groups' messages; the extra
#                 column gives each group's); B: the same queue
#   outbox_fetch  A: idem_outbox_fetch(group, BENCH_OUTBOX_FETCH) + one
#                 idem_outbox_ack_many of the batch; B: a hand-written queue,
#                 SELECT ... ORDER BY position LIMIT ... FOR UPDATE SKIP
#                 LOCKED and DELETE of the same rows, one statement; both
#                 with BENCH_OUTBOX_CONSUMERS clients on the same
#                 BENCH_OUTBOX_MESSAGES preloaded messages (idem_outbox
#                 written by transactions of 100 messages,
#                 BENCH_OUTBOX_AGGREGATES aggregates), a fresh copy for each
#                 run; ops = messages consumed during the run (counted in
#                 the database after it; the extra column also says how
#                 many were left)
#
# Environment (defaults in brackets):
#   BENCH_OUTBOX_MESSAGES    preloaded messages of outbox_fetch [2000000; the
#                            queue takes some 200,000 a second here]
#   BENCH_OUTBOX_FETCH       max per fetch (and per queue batch) [100]
#   BENCH_OUTBOX_CONSUMERS   pgbench clients of outbox_fetch [4]
#   BENCH_OUTBOX_AGGREGATES  aggregates of the preloaded messages [1000]
#   BENCH_OUTBOX_PULL        the topic's pull setting in outbox_sql: off
#                            (Debezium only, as its B) or on (consumer
#                            groups may read it, as in outbox) [off]
#   BENCH_OUTBOX_EDITION     c, or portable: every side of the outbox pairs
#                            in databases made with the portable edition's
#                            plain script (built from the private copy,
#                            BENCH_BUILD=1) instead of CREATE EXTENSION [c]

BENCH_OUTBOX_MESSAGES=${BENCH_OUTBOX_MESSAGES:-2000000}
BENCH_OUTBOX_FETCH=${BENCH_OUTBOX_FETCH:-100}
BENCH_OUTBOX_CONSUMERS=${BENCH_OUTBOX_CONSUMERS:-4}
BENCH_OUTBOX_AGGREGATES=${BENCH_OUTBOX_AGGREGATES:-1000}
BENCH_OUTBOX_EDITION=${BENCH_OUTBOX_EDITION:-c}
BENCH_OUTBOX_PULL=${BENCH_OUTBOX_PULL:-off}
case $BENCH_OUTBOX_PULL in on|off) ;; *) idem_die "BENCH_OUTBOX_PULL must be on or off (got '$BENCH_OUTBOX_PULL')";; esac
case $BENCH_OUTBOX_EDITION in c|portable) ;; *) idem_die "BENCH_OUTBOX_EDITION must be c or portable (got '$BENCH_OUTBOX_EDITION')";; esac
for v in BENCH_OUTBOX_MESSAGES BENCH_OUTBOX_FETCH BENCH_OUTBOX_CONSUMERS BENCH_OUTBOX_AGGREGATES; do
    case ${!v} in ''|*[!0-9]*|0) idem_die "$v must be a positive integer (got '${!v}')";; esac
done

outbox_pair() { case $1 in outbox|outbox_sql|outbox_fetch|outbox_fetch2) return 0;; esac; return 1; }

outbox_side_db() { # pair side
    case $1 in outbox_fetch|outbox_fetch2) echo outbox_fetch;; *) echo outbox;; esac
}

outbox_side_script() { # pair side
    case $1/$2 in
        outbox/A|outbox_sql/A) echo outbox_publish.pgbench;;
        outbox/B) echo business_claim.pgbench;;
        outbox_sql/B) echo outbox_insert.pgbench;;
        outbox_fetch/A) echo outbox_fetch.pgbench;;
        outbox_fetch/B|outbox_fetch2/B) echo outbox_queue.pgbench;;
        outbox_fetch2/A) echo outbox_fetch2.pgbench;;
    esac
}

outbox_clients() { # pair
    case $1 in outbox_fetch|outbox_fetch2) echo "$BENCH_OUTBOX_CONSUMERS";; *) echo "$BENCH_CLIENTS";; esac
}

outbox_ops_per_tx() { # pair: 1 (outbox_fetch's operations are messages, see outbox_after_run)
    echo 1
}

outbox_what() { # pair
    [ "$BENCH_OUTBOX_EDITION" = c ] || printf 'portable edition: '
    case $1 in
        outbox) echo "tx/s: claim + UPDATE + INSERT with idem_publish vs the claim only";;
        outbox_sql) echo "tx/s: the same with idem_publish (topic pull $BENCH_OUTBOX_PULL) vs a hand-written INSERT into a Debezium-shaped table";;
        outbox_fetch) echo "messages/s, $BENCH_OUTBOX_CONSUMERS clients: idem_outbox_fetch($BENCH_OUTBOX_FETCH) + acks vs SKIP LOCKED + DELETE queue, $BENCH_OUTBOX_MESSAGES preloaded";;
        outbox_fetch2) echo "messages/s, $BENCH_OUTBOX_CONSUMERS clients split over two groups of one topic (all groups' messages) vs the same queue";;
    esac
}

# The scripts, written into $S (run.sh's script directory) once.
outbox_scripts() {
    cat >"$S/outbox_publish.pgbench" <<'PGB'
-- pair "outbox" and "outbox_sql" (A), bench/outbox.sh: business_claim.pgbench's
-- transaction and one message with idem_publish (the claim found by
-- itself, the account as the aggregate).
\set k random(1, 9000000000000000000)
\set acct random(1, :accounts)
\set amount random(1, 1000)
BEGIN;
SELECT idem_claim('bench', :k) AS claimed \gset
\if :claimed
UPDATE bench_accounts SET balance = balance + :amount WHERE id = :acct;
INSERT INTO bench_ledger (event, account, amount) VALUES (:k, :acct, :amount);
SELECT idem_publish('accounts', jsonb_build_object('account', :acct::int, 'amount', :amount::int),
                    aggregate => :acct::text, type => 'Credited') IS NOT NULL AS published \gset
\endif
COMMIT;
PGB
    cat >"$S/outbox_insert.pgbench" <<'PGB'
-- pair "outbox_sql" (B), bench/outbox.sh: the same transaction, the event
-- written by a hand-written INSERT into a Debezium-shaped table.
\set k random(1, 9000000000000000000)
\set acct random(1, :accounts)
\set amount random(1, 1000)
BEGIN;
SELECT idem_claim('bench', :k) AS claimed \gset
\if :claimed
UPDATE bench_accounts SET balance = balance + :amount WHERE id = :acct;
INSERT INTO bench_ledger (event, account, amount) VALUES (:k, :acct, :amount);
INSERT INTO bench_outbox (aggregatetype, aggregateid, type, payload)
VALUES ('accounts', :acct::text, 'Credited', jsonb_build_object('account', :acct::int, 'amount', :amount::int));
\endif
COMMIT;
PGB
    cat >"$S/outbox_fetch.pgbench" <<PGB
-- pair "outbox_fetch" (A), bench/outbox.sh: one consumer step, fetch up to
-- $BENCH_OUTBOX_FETCH messages of group 'bench' and acknowledge the batch
-- with one idem_outbox_ack_many (the work in between is nothing here).
SELECT idem_outbox_ack_many('bench', ARRAY(SELECT f.id FROM idem_outbox_fetch('bench', $BENCH_OUTBOX_FETCH) AS f)) AS acked;
PGB
    cat >"$S/outbox_fetch2.pgbench" <<PGB
-- pair "outbox_fetch2" (A), bench/outbox.sh: as outbox_fetch, the clients
-- split over two groups reading the same topic ('bench', 'bench2').
\\if :client_id % 2 = 0
SELECT idem_outbox_ack_many('bench', ARRAY(SELECT f.id FROM idem_outbox_fetch('bench', $BENCH_OUTBOX_FETCH) AS f)) AS acked;
\\else
SELECT idem_outbox_ack_many('bench2', ARRAY(SELECT f.id FROM idem_outbox_fetch('bench2', $BENCH_OUTBOX_FETCH) AS f)) AS acked;
\\endif
PGB
    cat >"$S/outbox_queue.pgbench" <<PGB
-- pair "outbox_fetch" (B), bench/outbox.sh: the hand-written queue, the
-- oldest $BENCH_OUTBOX_FETCH rows nobody holds, locked and deleted.
WITH m AS (SELECT q.position FROM bench_queue q ORDER BY q.position LIMIT $BENCH_OUTBOX_FETCH FOR UPDATE SKIP LOCKED),
     d AS (DELETE FROM bench_queue q USING m WHERE q.position = m.position RETURNING q.id, q.payload)
SELECT count(*) AS taken FROM d;
PGB
    cat >"$S/outbox_schema.sql" <<'SQL'
-- The outbox pairs' own objects (bench/outbox.sh), after bench/schema.sql
-- (which has the hand-written outbox, bench_outbox).
-- The hand-written queue of outbox_fetch.
CREATE TABLE bench_queue (
    position  bigint PRIMARY KEY,
    id        uuid NOT NULL,
    aggregate text,
    payload   jsonb
);
-- n messages of topic t into idem_outbox, per_xact a transaction (real
-- transaction ids), and the same into bench_queue.
CREATE PROCEDURE bench_outbox_load(t text, n int, per_xact int, aggs int)
LANGUAGE plpgsql AS $$
DECLARE i int := 0;
BEGIN
    WHILE i < n LOOP
        INSERT INTO idem_outbox (id, topic, aggregate, type, payload, key, seq, xact_id, created_at)
        SELECT idem_outbox_id(t, 'm' || g), t, 'a' || (g % aggs), 'Preloaded',
               jsonb_build_object('n', g), 'm' || g, 0, pg_current_xact_id(), now()
          FROM generate_series(i, least(i + per_xact, n) - 1) g;
        i := i + per_xact;
        COMMIT;
    END LOOP;
    INSERT INTO bench_queue (position, id, aggregate, payload)
    SELECT o.position, o.id, o.aggregate, o.payload FROM idem_outbox o;
END $$;
SQL
    [ "$(id -u)" -ne 0 ] || chown postgres: "$S"/outbox_*
}

# The portable edition's plain script, built once (run.sh builds it too
# when a portable_* pair is listed).
outbox_portable_script() {
    case ${PORTABLE_SCRIPT:-} in ''|missing) ;; *) return 0;; esac
    [ "$BENCH_BUILD" = 1 ] || { PORTABLE_SCRIPT=missing; return 1; }
    make -C "$WORK/build" -s PG_CONFIG=/nonexistent portable >"$WORK/portable.log" 2>&1 \
        || { cat "$WORK/portable.log" >&2; PORTABLE_SCRIPT=missing; return 1; }
    local v f
    v=$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$WORK/build/idempotency.control")
    f=$WORK/build/build/portable/idempotency-portable--$v.sql    # not the upgrade script
    [ -f "$f" ] || { echo "bench/outbox.sh: $f was not built" >&2; PORTABLE_SCRIPT=missing; return 1; }
    PORTABLE_SCRIPT=$S/$(basename "$f")
    cp "$f" "$PORTABLE_SCRIPT"
    [ "$(id -u)" -ne 0 ] || chown postgres: "$PORTABLE_SCRIPT"
}

# make_template for the edition of BENCH_OUTBOX_EDITION.
outbox_make_template() { # name psql-args...
    [ "$BENCH_OUTBOX_EDITION" = portable ] || { make_template "$@"; return; }
    local db=$1; shift
    [ "$(q postgres -c "SELECT count(*) FROM pg_database WHERE datname = '$db'")" = 0 ] || return 0
    portable_db "$db" && q "$db" "$@" >/dev/null
}

outbox_setup_pair() { # pair; 0 ok, 1 skip, 2 failure
    if ! has_function 'idem_publish(text,jsonb,text,text,jsonb,text,text,integer)'; then
        SKIPPED+=("$1: skipped: function idem_publish not installed")
        return 1
    fi
    if [ "$BENCH_OUTBOX_EDITION" = portable ] && ! outbox_portable_script; then
        SKIPPED+=("$1: skipped: the portable edition needs the private build (BENCH_BUILD=1); see above")
        return 1
    fi
    [ -f "$S/outbox_publish.pgbench" ] || outbox_scripts
    case $1 in
        outbox|outbox_sql)
            outbox_make_template outbox -f "$S/outbox_schema.sql" \
                -c "INSERT INTO bench_accounts (id) SELECT g FROM generate_series(1, $BENCH_ACCOUNTS) g" \
                -c "VACUUM ANALYZE bench_accounts" || return 2
            ;;
        outbox_fetch|outbox_fetch2)
            [ -z "${OUTBOX_TPL_DONE:-}" ] || return 0
            OUTBOX_TPL_DONE=1
            log "preparing database outbox_fetch_tpl ($BENCH_OUTBOX_MESSAGES messages)"
            outbox_make_template outbox_fetch_tpl -f "$S/outbox_schema.sql" \
                -c "CALL bench_outbox_load('accounts', $BENCH_OUTBOX_MESSAGES, 100, $BENCH_OUTBOX_AGGREGATES)" \
                -c "SELECT idem_outbox_subscribe('bench', 'accounts', from_start => true)" \
                -c "SELECT idem_outbox_subscribe('bench2', 'accounts', from_start => true)" \
                -c "VACUUM ANALYZE" || return 2
            copy_template outbox_fetch outbox_fetch_tpl || return 2
            ;;
    esac
    return 0
}

outbox_prepare_run() { # pair side
    case $1 in
        outbox|outbox_sql)
            local pull=true
            [ "$1/$BENCH_OUTBOX_PULL" != outbox_sql/off ] || pull=false
            q outbox -c "TRUNCATE idem_records, bench_ledger, idem_outbox, bench_outbox" \
                -c "SELECT idem_outbox_topic('accounts', pull => $pull)" \
                -c "VACUUM bench_accounts" >/dev/null;;
        outbox_fetch|outbox_fetch2)
            copy_template outbox_fetch outbox_fetch_tpl;;
    esac
}

# After a run (in run.sh's shell): OUTBOX_EXTRA, the extra column, and for
# outbox_fetch OUTBOX_CONSUMED, the messages consumed, which run.sh then
# counts as the run's operations (tps = consumed / seconds): a transaction
# of either side may take fewer than BENCH_OUTBOX_FETCH.
outbox_after_run() { # pair side
    local left
    OUTBOX_EXTRA=
    OUTBOX_CONSUMED=
    case $1 in outbox_fetch|outbox_fetch2) ;; *) return 0;; esac
    if [ "$1/$2" = outbox_fetch2/A ]; then
        local l1 l2
        l1=$(q outbox_fetch -c "SELECT unacknowledged FROM idem_outbox_backlog WHERE consumer = 'bench'")
        l2=$(q outbox_fetch -c "SELECT unacknowledged FROM idem_outbox_backlog WHERE consumer = 'bench2'")
        OUTBOX_CONSUMED=$((2 * BENCH_OUTBOX_MESSAGES - l1 - l2))
        OUTBOX_EXTRA="bench=$((BENCH_OUTBOX_MESSAGES - l1)) bench2=$((BENCH_OUTBOX_MESSAGES - l2))"
        return 0
    fi
    if [ "$2" = A ]; then
        left=$(q outbox_fetch -c "SELECT unacknowledged FROM idem_outbox_backlog WHERE consumer = 'bench'")
    else
        left=$(q outbox_fetch -c "SELECT count(*) FROM bench_queue")
    fi
    OUTBOX_CONSUMED=$((BENCH_OUTBOX_MESSAGES - left))
    OUTBOX_EXTRA="consumed=$OUTBOX_CONSUMED left=$left"
    [ "$left" -gt 0 ] || OUTBOX_EXTRA="$OUTBOX_EXTRA (backlog exhausted before the end: raise BENCH_OUTBOX_MESSAGES)"
}
