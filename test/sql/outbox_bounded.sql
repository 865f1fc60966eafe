-- Work and locks per call bounded by what the call hands out
-- (docs/security.md, Outbox): a fetch over thousands of runs whose head
-- is leased reads none of them and takes no lock for them (0.5.0 took an
-- advisory lock per run visited and ran out of shared memory); the purge
-- examines batch_size messages per call, going on where the last stopped.
\set SHOW_CONTEXT never
TRUNCATE idem_outbox, idem_outbox_topics, idem_outbox_subscriptions, idem_outbox_runs,
         idem_outbox_aggregates, idem_outbox_purge_hand;
SELECT idem_outbox_subscribe('bnd', 'bnd', from_start => true);
-- 8,000 aggregates, one message each, all leased
SELECT count(idem_publish('bnd', '{}', key => 'h' || i, aggregate => 'a' || i))
FROM generate_series(1, 8000) AS i;
SELECT count(*) AS leased FROM idem_outbox_fetch('bnd', 8000, '1 hour');
-- a second message in each: every run's head is leased
SELECT count(idem_publish('bnd', '{}', key => 't' || i, aggregate => 'a' || i))
FROM generate_series(1, 8000) AS i;
-- the fetch hands out nothing, and holds no lock per run
BEGIN;
SELECT count(*) AS fetched FROM idem_outbox_fetch('bnd');
SELECT count(*) < 20 AS few_locks FROM pg_locks WHERE pid = pg_backend_pid();
COMMIT;
-- one free run among them: exactly its messages
SELECT idem_outbox_ack('bnd', idem_outbox_id('bnd', 'h17')) AS acked;
BEGIN;
SELECT aggregate, attempts FROM idem_outbox_fetch('bnd');
SELECT count(*) < 20 AS few_locks FROM pg_locks WHERE pid = pg_backend_pid();
COMMIT;
SELECT consumer, unacknowledged, leased FROM idem_outbox_backlog;

-- The purge walks the table by primary key, batch_size messages a call.
SELECT idem_outbox_topic('bnd', retention => '0');
SELECT idem_outbox_purge(1) AS purged;
SELECT (SELECT last_id FROM idem_outbox_purge_hand) = (SELECT id FROM idem_outbox ORDER BY id LIMIT 1) AS hand_at_first;
SELECT idem_outbox_purge(100) AS purged;
SELECT (SELECT last_id FROM idem_outbox_purge_hand) =
       (SELECT id FROM idem_outbox ORDER BY id OFFSET 100 LIMIT 1) AS hand_at_101st;
-- acknowledged everything: a pass deletes it all, then the hand wraps
SELECT idem_outbox_ack_many('bnd', ARRAY(SELECT id FROM idem_outbox)) AS acked;
SELECT sum(idem_outbox_purge(5000)) AS purged FROM generate_series(1, 5);
SELECT count(*) AS left_over, (SELECT last_id FROM idem_outbox_purge_hand) IS NULL AS wrapped FROM idem_outbox;

SELECT idem_outbox_unsubscribe('bnd', 'bnd');
TRUNCATE idem_outbox, idem_outbox_topics, idem_outbox_subscriptions, idem_outbox_runs,
         idem_outbox_aggregates, idem_outbox_purge_hand;
