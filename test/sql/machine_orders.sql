-- Claims here stand alone in autocommit (idempotency.autocommit_claims
-- defaults to error; test/sql/silent_traps.sql tests that).
SET idempotency.autocommit_claims = allow;
-- The worked example of the README (doc/machine.md): an order lifecycle
-- pending_payment -> paid -> shipped -> delivered, with cancel and refund,
-- driven by deduplicated events.  Creates the machine "order", the table
-- orders, the function handle_order_event and records in scope
-- "order-events"; removes them all at the end.

SELECT idem_machine_define('order', '{
  "initial": ["pending_payment"],
  "transitions": {
    "pending_payment": ["paid", "cancelled"],
    "paid":            ["shipped", "refunded"],
    "shipped":         ["delivered"]
  }}');

CREATE TABLE orders (
  id      bigint PRIMARY KEY,
  status  text   NOT NULL DEFAULT 'pending_payment',
  version bigint NOT NULL DEFAULT 0
);
SELECT idem_guard('orders', 'status', 'order',
                  version_column => 'version', history => true);

-- An event handler: claim the event id (a redelivery is a no-op), then
-- move the order only if the machine allows it (a late or out-of-order
-- event changes nothing).  Both happen in the caller's transaction.
CREATE FUNCTION handle_order_event(event_id text, order_id bigint, target text)
RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    IF NOT idem_claim('order-events', event_id) THEN
        RETURN 'duplicate event';
    END IF;
    UPDATE orders SET status = target
    WHERE id = order_id AND idem_can_transition('order', status, target);
    IF NOT FOUND THEN
        RETURN 'ignored: ' || (SELECT status FROM orders WHERE id = order_id);
    END IF;
    RETURN 'now ' || target;
END
$$;

INSERT INTO orders (id) VALUES (1), (2), (3);

-- Order 1: the happy path, with a redelivered payment callback.
SELECT handle_order_event('evt-1', 1, 'paid');
SELECT handle_order_event('evt-1', 1, 'paid');          -- redelivery
SELECT handle_order_event('evt-2', 1, 'shipped');
SELECT handle_order_event('evt-3', 1, 'delivered');

-- Order 2: cancelled; the payment callback arrives late and cannot
-- revive it.
SELECT handle_order_event('evt-4', 2, 'cancelled');
SELECT handle_order_event('evt-5', 2, 'paid');

-- Order 3: paid, then refunded; shipping after the refund is ignored.
SELECT handle_order_event('evt-6', 3, 'paid');
SELECT handle_order_event('evt-7', 3, 'refunded');
SELECT handle_order_event('evt-8', 3, 'shipped');

-- idem_transition in SET: the same event twice is harmless, an illegal
-- one is an error.
UPDATE orders SET status = idem_transition('order', status, 'delivered') WHERE id = 1;
UPDATE orders SET status = idem_transition('order', status, 'paid') WHERE id = 2;
-- The guard stops a hand-written UPDATE that skips the functions.
UPDATE orders SET status = 'shipped' WHERE id = 3;

SELECT id, status, version FROM orders ORDER BY id;
SELECT row_key ->> 'id' AS order_id, from_state, to_state
FROM idem_transition_log WHERE table_name = 'public.orders'
ORDER BY (row_key ->> 'id')::int, id;

-- Clean up.
DROP FUNCTION handle_order_event(text, bigint, text);
DROP TABLE orders;
DELETE FROM idem_transition_log WHERE table_name = 'public.orders';
DELETE FROM idem_records WHERE scope = 'order-events';
SELECT idem_machine_drop('order');
