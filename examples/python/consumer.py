#!/usr/bin/env python3
"""A message consumer that applies every message exactly once.

Message brokers deliver *at least* once: a consumer that crashes before it
acknowledges gets the batch again, a producer that retries publishes the
same message twice, and a batch whose visibility timeout ran out goes to a
second consumer while the first is still working on it.

This consumer handles each batch in ONE transaction:

    BEGIN;
    SELECT key, claimed FROM idem_claim_many('wallet-topups', ARRAY[ids]);
    -- apply only the messages whose claimed is true
    COMMIT;   -- the claims commit together with the credits
    -- then acknowledge the batch to the broker

If anything fails before COMMIT, the claims roll back with the credits,
and the redelivered batch is processed as if it were new.  If a second
consumer claims the same keys at the same time, it waits for the first
one's transaction and then sees them as duplicates.

The broker is simulated in this file so that the program runs on its own;
in real code the batch would come from Kafka, RabbitMQ, SQS, ...

Connection settings come from the standard libpq environment variables
(PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD, ...).  Needs psycopg2
(Debian: python3-psycopg2) and the idempotency extension installed on the
server.  Run:

    PGDATABASE=mydb python3 examples/python/consumer.py
"""

import sys
import threading
import time

import psycopg2

SCOPE = "wallet-topups"  # the consumer group: one namespace of message ids

# Run once per database; a real application does this in its migrations.
# There is deliberately no UNIQUE constraint on wallet_entries.message_id:
# the claim is what keeps a message from being booked twice (and
# examples/run.sh checks that it does).
SETUP = """
CREATE EXTENSION IF NOT EXISTS idempotency;
CREATE TABLE IF NOT EXISTS wallets (
    owner   text PRIMARY KEY,
    balance numeric NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS wallet_entries (
    message_id text NOT NULL,
    owner      text NOT NULL REFERENCES wallets,
    amount     numeric NOT NULL,
    booked_at  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO wallets (owner) VALUES ('alice'), ('bob') ON CONFLICT DO NOTHING;
"""

# The messages the producer published: wallet top-ups.
MESSAGES = {
    "m-1": ("alice", 10), "m-2": ("bob", 20), "m-3": ("alice", 5),
    "m-4": ("bob", 7), "m-5": ("alice", 1), "m-6": ("bob", 3),
    "m-7": ("alice", 2), "m-8": ("bob", 4),
}

_print_lock = threading.Lock()


def say(consumer, text):
    with _print_lock:
        print(f"  [{consumer}] {text}", flush=True)


class ConsumerCrash(Exception):
    """Stands for a crash, a lost connection or a bug after some work."""


def consume_batch(conn, consumer, message_ids, crash_before_commit=False,
                  work_seconds=0.0):
    """Process one delivered batch; return normally only when committed.

    The caller acknowledges the batch to the broker after this returns.
    """
    say(consumer, f"received batch {', '.join(message_ids)}")
    # psycopg2: "with conn" is one transaction, committed when the block
    # ends normally and rolled back when it raises.
    with conn:
        with conn.cursor() as cur:
            # One round trip claims the whole batch.  Rows come back in
            # array order; a key repeated inside the batch is claimed only
            # at its first occurrence.
            cur.execute(
                "SELECT key, claimed FROM idem_claim_many(%s, %s::text[])",
                (SCOPE, list(message_ids)),
            )
            for message_id, claimed in cur.fetchall():
                if not claimed:
                    say(consumer, f"message {message_id}: duplicate, skipped")
                    continue
                owner, amount = MESSAGES[message_id]
                cur.execute(
                    "UPDATE wallets SET balance = balance + %s WHERE owner = %s",
                    (amount, owner),
                )
                cur.execute(
                    "INSERT INTO wallet_entries (message_id, owner, amount)"
                    " VALUES (%s, %s, %s)",
                    (message_id, owner, amount),
                )
                say(consumer, f"message {message_id}: credited {amount} to {owner}")
            time.sleep(work_seconds)  # more work in the same transaction
            if crash_before_commit:
                raise ConsumerCrash("crashed before commit")
    say(consumer, "batch committed and acknowledged")


def deliver(conn, consumer, message_ids, **kwargs):
    """What the broker client does: redeliver until the consumer succeeds."""
    while True:
        try:
            consume_batch(conn, consumer, message_ids, **kwargs)
            return
        except ConsumerCrash as crash:
            say(consumer, f"{crash}: transaction rolled back (claims included), "
                          "batch not acknowledged, the broker redelivers it")
            kwargs["crash_before_commit"] = False


def concurrent_delivery(message_ids):
    """The same batch handed to two consumers at the same moment."""
    start = threading.Barrier(2)
    errors = []

    def run(name):
        conn = psycopg2.connect("")
        try:
            start.wait()
            # The first consumer holds its claims for a moment before it
            # commits; the second one's idem_claim_many waits for it.
            consume_batch(conn, name, message_ids, work_seconds=0.3)
        except Exception as exc:  # report, then fail the program
            errors.append(exc)
        finally:
            conn.close()

    threads = [threading.Thread(target=run, args=(name,))
               for name in ("consumer-1", "consumer-2")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def main():
    conn = psycopg2.connect("")  # libpq reads PGHOST, PGPORT, ... itself
    with conn, conn.cursor() as cur:
        cur.execute(SETUP)

    print("1) A first batch.")
    deliver(conn, "consumer-1", ["m-1", "m-2", "m-3"])

    print("2) The consumer crashes before it commits; the broker redelivers.")
    deliver(conn, "consumer-1", ["m-3", "m-4", "m-5"], crash_before_commit=True)

    print("3) The producer published m-6 twice, and m-1 is redelivered late.")
    deliver(conn, "consumer-1", ["m-6", "m-6", "m-1"])

    print("4) A batch is handed to two consumers at once.")
    concurrent_delivery(["m-7", "m-8"])

    with conn, conn.cursor() as cur:
        cur.execute("SELECT owner, balance FROM wallets ORDER BY owner")
        balances = ", ".join(f"{owner}={balance}" for owner, balance in cur.fetchall())
        cur.execute("SELECT count(*), count(DISTINCT message_id) FROM wallet_entries")
        entries, distinct = cur.fetchone()
    conn.close()
    print(f"Balances: {balances}; {entries} wallet entries for {distinct} distinct messages.")
    return 0 if entries == distinct else 1


if __name__ == "__main__":
    sys.exit(main())
