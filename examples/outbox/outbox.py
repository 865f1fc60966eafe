#!/usr/bin/env python3
"""An order service tells a shipping service that orders were paid,
exactly once, through the outbox and the inbox (docs/outbox.md).

Producer (the order service), one transaction per payment callback:

    BEGIN;
    SELECT idem_claim('payment-callback', event_id);   -- false: a retry
    UPDATE orders SET status = 'paid' ...;             -- only when true
    SELECT idem_publish('orders', payload, aggregate => 'order-42');
    COMMIT;                                            -- message iff commit

Consumer (the shipping service), a group of workers:

    SELECT ... FROM idem_outbox_fetch('shipping', 5, '1 second');  -- leases
    -- per message, one transaction:
    BEGIN; SELECT idem_inbox('shipping', id); INSERT INTO shipments ...; COMMIT;
    SELECT idem_outbox_ack('shipping', id);

What goes wrong on purpose: a callback delivered twice (its retry cannot
publish again: ID020), a worker that crashes after applying a message and
before acknowledging it (its lease runs out, another worker gets the
message again and the inbox recognises it), workers running concurrently
(one aggregate is never with two of them).  Both services use the same
database here; in real life the shipping service talks to the order
service's database only for fetch and ack, and has its own inbox.

Connection settings come from the libpq environment (PGHOST, PGDATABASE,
...).  Needs psycopg2 (Debian: python3-psycopg2).  Run:

    PGDATABASE=mydb python3 examples/outbox/outbox.py
"""

import sys
import threading
import time

import psycopg2
import psycopg2.errors  # noqa: F401  (pgcode of the errors)

SETUP = """
CREATE EXTENSION IF NOT EXISTS idempotency;
CREATE TABLE IF NOT EXISTS orders (
    id     int PRIMARY KEY,
    status text NOT NULL DEFAULT 'new'
);
INSERT INTO orders (id) VALUES (1), (2), (3), (4) ON CONFLICT DO NOTHING;
-- The shipping service's effect.  No unique constraint on message_id: the
-- inbox is what keeps a message from being applied twice.
CREATE TABLE IF NOT EXISTS shipments (
    message_id uuid NOT NULL,
    order_id   int NOT NULL,
    worker     text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
SELECT idem_outbox_subscribe('shipping', 'orders');
"""

# Payment callbacks as the gateway delivers them: evt-2 twice.
CALLBACKS = [("evt-1", 1), ("evt-2", 2), ("evt-2", 2), ("evt-3", 3), ("evt-4", 4)]

_print_lock = threading.Lock()


def say(who, text):
    with _print_lock:
        print(f"  [{who}] {text}", flush=True)


def payment_callback(conn, event_id, order_id):
    """The order service's handler: claim, work, publish, one transaction."""
    with conn, conn.cursor() as cur:
        cur.execute("SELECT idem_claim('payment-callback', %s)", (event_id,))
        if not cur.fetchone()[0]:
            say("orders", f"{event_id}: a retry, already done")
            # A careless handler publishes anyway: refused, nothing written.
            cur.execute("SAVEPOINT careless")
            try:
                cur.execute("SELECT idem_publish('orders', '{}')")
            except psycopg2.Error as err:
                say("orders", f"{event_id}: publishing again is refused ({err.pgcode})")
                cur.execute("ROLLBACK TO SAVEPOINT careless")
            return
        cur.execute("UPDATE orders SET status = 'paid' WHERE id = %s", (order_id,))
        cur.execute(
            "SELECT idem_publish('orders', jsonb_build_object('order', %s, 'status', 'paid'),"
            " aggregate => 'order-' || %s, type => 'OrderPaid')",
            (order_id, order_id))
        say("orders", f"{event_id}: order {order_id} paid, message {cur.fetchone()[0]}")


class WorkerCrash(Exception):
    """Stands for a crash after a message was applied, before its ack."""


def work(name, crash_after_apply=False, idle_rounds=10):
    """A worker of the consumer group 'shipping'."""
    conn = psycopg2.connect("")
    conn.autocommit = True  # fetch and ack each commit at once
    idle = 0
    try:
        while idle < idle_rounds:
            with conn.cursor() as cur:
                cur.execute("SELECT id, aggregate, payload, attempts"
                            " FROM idem_outbox_fetch('shipping', 5, '1 second')")
                batch = cur.fetchall()
            if not batch:
                idle += 1
                time.sleep(0.2)
                continue
            idle = 0
            for message_id, aggregate, payload, attempts in batch:
                with conn.cursor() as cur:
                    cur.execute("BEGIN")
                    cur.execute("SELECT idem_inbox('shipping', %s)", (message_id,))
                    if cur.fetchone()[0]:
                        cur.execute("INSERT INTO shipments (message_id, order_id, worker)"
                                    " VALUES (%s, %s, %s)",
                                    (message_id, payload["order"], name))
                        say(name, f"{aggregate}: shipment created (attempt {attempts})")
                    else:
                        say(name, f"{aggregate}: applied before, skipped (attempt {attempts})")
                    cur.execute("COMMIT")
                    if crash_after_apply:
                        raise WorkerCrash()
                    cur.execute("SELECT idem_outbox_ack('shipping', %s)", (message_id,))
    except WorkerCrash:
        say(name, "crashed after applying, before acknowledging")
    finally:
        conn.close()


def main():
    conn = psycopg2.connect("")
    with conn, conn.cursor() as cur:
        cur.execute(SETUP)

    print("1) The order service takes the payment callbacks (evt-2 twice).")
    for event_id, order_id in CALLBACKS:
        payment_callback(conn, event_id, order_id)

    print("2) A shipping worker crashes after its first message.")
    work("worker-1", crash_after_apply=True)

    print("3) Two workers at once; the crashed worker's messages come back.")
    threads = [threading.Thread(target=work, args=(name,))
               for name in ("worker-2", "worker-3")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    with conn, conn.cursor() as cur:
        cur.execute("SELECT count(*), count(DISTINCT message_id), count(DISTINCT order_id)"
                    " FROM shipments")
        shipments, messages, orders = cur.fetchone()
        cur.execute("SELECT count(*) FROM orders WHERE status = 'paid'")
        paid = cur.fetchone()[0]
        cur.execute("SELECT unacknowledged FROM idem_outbox_backlog"
                    " WHERE consumer = 'shipping'")
        left = cur.fetchone()[0]
    conn.close()
    print(f"Paid orders: {paid}; shipments: {shipments} for {messages} messages"
          f" and {orders} orders; unacknowledged: {left}.")
    return 0 if shipments == messages == orders == paid and left == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
