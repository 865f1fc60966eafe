#!/usr/bin/env bash
# `make demo`: a payment callback delivered three times, two of them at the
# same moment, credits the order exactly once.  Starts a throwaway cluster,
# tells the story, and cleans up (also when interrupted).
set -u
. "$(dirname "$0")/harness.sh"

idem_setup
idem_build_install

WORK=$(idem_workdir)
idem_work_trap

idem_log "starting a throwaway PostgreSQL cluster"
idem_cluster_start "$WORK/cluster"
idem_psql -d postgres -c "CREATE DATABASE shop" >/dev/null
psql_shop() { idem_psql -d shop "$@"; }

SETUP_SQL=$(cat <<'SQL'
CREATE EXTENSION idempotency;

CREATE TABLE orders (
    id         int PRIMARY KEY,
    amount     numeric NOT NULL,
    status     text NOT NULL,
    paid_total numeric NOT NULL DEFAULT 0
);
CREATE TABLE ledger (
    event_id text,
    order_id int,
    amount   numeric,
    at       timestamptz DEFAULT now()
);
INSERT INTO orders VALUES (42, 100.00, 'pending_payment'), (43, 100.00, 'pending_payment');
SQL
)
NAIVE_SQL=$(cat <<'SQL'
-- What many applications write: check the status, then act.  Two
-- deliveries that arrive together both see 'pending_payment'.
CREATE FUNCTION naive_payment_callback(p_event text, p_order int, p_amount numeric)
RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT status FROM orders WHERE id = p_order) <> 'pending_payment' THEN
        RETURN 'already paid: ignored';
    END IF;
    PERFORM pg_sleep(0.5);                 -- the gateway call, the business logic...
    UPDATE orders SET paid_total = paid_total + p_amount, status = 'paid' WHERE id = p_order;
    INSERT INTO ledger VALUES (p_event, p_order, p_amount);
    RETURN 'processed: credited ' || p_amount;
END $$;
SQL
)
GUARDED_SQL=$(cat <<'SQL'
-- The same handler with one line added: the dedup mark is written in the
-- handler's own transaction, so it commits or rolls back with the credit.
CREATE FUNCTION payment_callback(p_event text, p_order int, p_amount numeric)
RETURNS text LANGUAGE plpgsql
SET idempotency.autocommit_claims = allow   -- the claim and the credit are one call
AS $$
BEGIN
    IF NOT idem_claim('payment-callback', p_event,
                      fingerprint => jsonb_build_object('order', p_order, 'amount', p_amount)::text) THEN
        RETURN 'duplicate: ignored';
    END IF;
    PERFORM pg_sleep(0.5);                 -- the gateway call, the business logic...
    UPDATE orders SET paid_total = paid_total + p_amount, status = 'paid' WHERE id = p_order;
    INSERT INTO ledger VALUES (p_event, p_order, p_amount);
    RETURN 'processed: credited ' || p_amount;
END $$;
SQL
)
printf '%s\n%s\n%s\n' "$SETUP_SQL" "$NAIVE_SQL" "$GUARDED_SQL" | psql_shop >/dev/null \
    || idem_die "could not set up the demo database"

deliver() { # function event order -> what the handler returned
    psql_shop -tA -c "SELECT $1('$2', $3, 100.00)" 2>&1
}

# show SQL: the handler's source, indented
show() { printf '%s\n' "$1" | sed 's/^/      | /'; }

# Wait until a delivery of EVENT sits in the handler's pg_sleep (it has
# read the status, or claimed the event), so that the second concurrent
# delivery always arrives while the first is working.
wait_in_handler() { # event
    local n
    for _ in $(seq 1 100); do
        n=$(psql_shop -tA -c "SELECT count(*) FROM pg_stat_activity
                               WHERE datname = 'shop' AND wait_event = 'PgSleep'
                                 AND query LIKE '%''$1''%'")
        [ "$n" -ge 1 ] && return 0
        sleep 0.05
    done
    idem_die "the first delivery of $1 did not start"
}

plural() { # count word -> "1 entry" / "2 entries"
    if [ "$1" = 1 ]; then echo "$1 $2"; else echo "$1 $3"; fi
}

story() { # function order title source
    local fn=$1 order=$2 out1 out2 out3
    echo
    echo "$3"
    show "$4"
    echo "   The gateway sends callback evt_$order three times: twice at the same moment, once later."
    deliver "$fn" "evt_$order" "$order" >"$WORK/d1" &
    local p1=$!
    wait_in_handler "evt_$order"
    deliver "$fn" "evt_$order" "$order" >"$WORK/d2" &
    local p2=$!
    wait $p1 $p2
    out1=$(cat "$WORK/d1"); out2=$(cat "$WORK/d2")
    out3=$(deliver "$fn" "evt_$order" "$order")
    printf '   %-40s -> %s\n' "delivery 1 (concurrent, first to arrive)" "$out1" \
                              "delivery 2 (concurrent, while 1 works)" "$out2" \
                              "delivery 3 (a retry, later)" "$out3"
    local total credits
    total=$(psql_shop -tA -c "SELECT paid_total FROM orders WHERE id = $order")
    credits=$(psql_shop -tA -c "SELECT count(*) FROM ledger WHERE order_id = $order")
    echo "   Order $order costs 100.00; the customer was credited $total in $(plural "$credits" "ledger entry" "ledger entries")."
    if [ "$credits" = 1 ]; then
        echo "   => Credited exactly once."
    else
        echo "   => Credited $credits times: a double charge."
    fi
}

story naive_payment_callback 43 "1) A hand-written check-then-act handler:" "$NAIVE_SQL"
story payment_callback 42 "2) The same handler guarded by idem_claim('payment-callback', event_id):" "$GUARDED_SQL"

echo
echo "   The record kept for the event (scope, key, status, first claimed):"
psql_shop -tA -F ' | ' -c "SELECT scope, key, status, created_at::timestamp(0) FROM idem_records" \
    | sed 's/^/     /'

ok=$(psql_shop -tA -c "SELECT count(*) FROM ledger WHERE order_id = 42")
echo
if [ "$ok" = 1 ]; then
    echo "Demo finished: with idem_claim, three deliveries of one payment credited the order exactly once."
else
    echo "Demo FAILED: the guarded handler credited order 42 $ok times."
    exit 1
fi
