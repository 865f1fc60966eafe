# The outbox example (docs/outbox.md), for examples/run.sh, which sources
# this file and calls check_outbox; it uses run.sh's helpers (new_db,
# run_example, expect_sql, expect_count, problem, report) and variables
# (WORK, PYTHON).
#
# examples/outbox/outbox.py runs the whole pattern: the producer claims a
# payment callback and publishes in the claim's transaction (a callback
# delivered twice publishes once; publishing anyway is refused with
# ID020); the consumer group fetches with leases, applies each message
# through idem_inbox, then acknowledges; one worker crashes after applying
# and before acknowledging, the message comes back and the inbox skips it.
# Checked in the database: one message per paid order, with the id derived
# from its claim; one shipment per message (no unique constraint helps:
# only the inbox); everything acknowledged.  The second run (every
# callback delivered again, workers run again) must change nothing.
# shellcheck shell=bash disable=SC2154  # db, WORK, PYTHON: set by examples/run.sh

outbox_messages="SELECT string_agg(r.key || ':' || (o.payload ->> 'order') || ':' || o.aggregate, ',' ORDER BY r.key)
                   FROM idem_outbox o
                   JOIN idem_records r
                     ON r.scope = 'payment-callback' AND o.id = idem_outbox_id('orders', r.key, r.scope)"
outbox_shipments="SELECT count(*) || '/' || count(DISTINCT message_id) || '/' || count(DISTINCT order_id)
                    FROM shipments"

check_outbox() {
    local out1=$WORK/outbox-run1.out out2=$WORK/outbox-run2.out
    if new_db outbox && PGDATABASE=$db run_example "$out1" "$PYTHON" examples/outbox/outbox.py; then
        expect_sql "$db" "one message per paid order, id from its claim" "$outbox_messages" \
            "evt-1:1:order-1,evt-2:2:order-2,evt-3:3:order-3,evt-4:4:order-4"
        expect_sql "$db" "nothing else in the outbox" "SELECT count(*) FROM idem_outbox" "4"
        expect_sql "$db" "shipments/messages/orders" "$outbox_shipments" "4/4/4"
        expect_sql "$db" "each shipment is of a published message" \
            "SELECT count(*) FROM shipments s JOIN idem_outbox o ON o.id = s.message_id
              WHERE (o.payload ->> 'order')::int = s.order_id" "4"
        expect_sql "$db" "inbox records" \
            "SELECT count(*) FROM idem_records r JOIN idem_outbox o ON r.key = o.id::text
              WHERE r.scope = 'inbox:shipping'" "4"
        expect_sql "$db" "everything acknowledged" \
            "SELECT unacknowledged FROM idem_outbox_backlog WHERE consumer = 'shipping'" "0"
        expect_count "$out1" "four orders paid and published" '^  \[orders\] evt-[1-4]: order [1-4] paid, message [0-9a-f-]{36}$' 4
        expect_count "$out1" "the duplicate callback" '^  \[orders\] evt-2: a retry, already done$' 1
        expect_count "$out1" "publishing again refused" '^  \[orders\] evt-2: publishing again is refused \(ID020\)$' 1
        expect_count "$out1" "the crash" '^  \[worker-1\] crashed after applying, before acknowledging$' 1
        expect_count "$out1" "shipments created" ': shipment created \(attempt [0-9]+\)$' 4
        expect_count "$out1" "the redelivery recognised by the inbox" \
            '^  \[worker-[23]\] order-[1-4]: applied before, skipped \(attempt [2-9]\)$' 1
        expect_count "$out1" "summary" \
            '^Paid orders: 4; shipments: 4 for 4 messages and 4 orders; unacknowledged: 0\.$' 1
        # Every callback once more, workers again: nothing may change.
        if PGDATABASE=$db run_example "$out2" "$PYTHON" examples/outbox/outbox.py; then
            expect_count "$out2" "second run: every callback a retry" '^  \[orders\] evt-[1-4]: a retry, already done$' 5
            expect_count "$out2" "second run: nothing published" ' paid, message ' 0
            expect_count "$out2" "second run: nothing applied" 'shipment created' 0
            expect_sql "$db" "messages after the second run" "SELECT count(*) FROM idem_outbox" "4"
            expect_sql "$db" "shipments after the second run" "$outbox_shipments" "4/4/4"
        fi
    fi
    report "example outbox/outbox.py" "$out1" "$out2"
}
