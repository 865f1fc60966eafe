-- Claims here stand alone in autocommit (idempotency.autocommit_claims
-- defaults to error; test/sql/silent_traps.sql tests that).
SET idempotency.autocommit_claims = allow;
-- The outbox and the inbox: idem_outbox_id, idem_publish (bound
-- to the transaction's claim, to a named claim, or to an explicit key),
-- idem_xact_claims, idem_outbox_topic, the pull API (idem_outbox_subscribe,
-- idem_outbox_unsubscribe, idem_outbox_fetch, idem_outbox_ack, the view
-- idem_outbox_backlog), idem_inbox, idem_outbox_purge, and every error.
-- Message ids are derived from their arguments, so they are printed;
-- positions, transaction ids and times are not.  Errors are shown with
-- their detail through pg_temp.try; PL/pgSQL's CONTEXT lines are not shown
-- (SHOW_CONTEXT never), so both editions print the same.
\set SHOW_CONTEXT never
\getenv abs_srcdir PG_ABS_SRCDIR
\set try_sql :abs_srcdir '/helpers/try.sql'
\i :try_sql
SET idem_test.try_detail = on;
TRUNCATE idem_outbox, idem_outbox_topics, idem_outbox_subscriptions, idem_outbox_runs;
DELETE FROM idem_records WHERE scope LIKE 'ob-%' OR scope LIKE 'inbox:%';

--------------------------------------------------------------------------
-- Message ids: a version 8 UUID from the SHA-256 of the arguments; the
-- same arguments give the same id, any difference another one.
--------------------------------------------------------------------------
SELECT idem_outbox_id('orders', 'evt-1', 'ob-pay') AS claim_id,
       idem_outbox_id('orders', 'evt-1') AS key_id,
       idem_outbox_id('orders', 'evt-1', 'ob-pay', 1) AS seq_1;
SELECT count(DISTINCT id) AS distinct_ids, count(*) AS ids,
       bool_and(id::text ~ '^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-8[0-9a-f]{3}-[0-9a-f]{12}$') AS version_8
FROM (VALUES (idem_outbox_id('t', 'k', 's', 0)), (idem_outbox_id('t', 'k', 's', 1)),
             (idem_outbox_id('t', 'k', NULL, 0)), (idem_outbox_id('t', 'k', '', 0)),
             (idem_outbox_id('t2', 'k', 's', 0)), (idem_outbox_id('t', 'k2', 's', 0)),
             (idem_outbox_id('t', 'k', 's2', 0)),
             -- the lengths keep the parts apart
             (idem_outbox_id('t:1:k', 'k', 's', 0)), (idem_outbox_id('t', 'k:1:t', 's', 0)),
             (idem_outbox_id('t', 'k', 's:1:k', 0)), (idem_outbox_id('ü', 'k', 's', 0)),
             (idem_outbox_id('u', 'k', 's', 0))) AS v(id);
SELECT idem_outbox_id('t', 'k', 's', 0) = idem_outbox_id('t', 'k', 's') AS seq_default_0,
       idem_outbox_id(NULL, 'k') IS NULL AS null_topic,
       idem_outbox_id('t', NULL) IS NULL AS null_key,
       idem_outbox_id('t', 'k', NULL, NULL) IS NULL AS null_seq;

--------------------------------------------------------------------------
-- Publishing in the transaction of a claim: the message id comes from the
-- claim; the message exists if and only if the transaction commits.
--------------------------------------------------------------------------
BEGIN;
SELECT idem_claim('ob-pay', 'evt-1') AS claimed;
SELECT scope, key FROM idem_xact_claims();
SELECT idem_publish('orders.paid', '{"order": 42, "amount": 100}',
                    aggregate => 'order-42', type => 'OrderPaid',
                    headers => '{"trace": "t-1"}') AS id;
-- one message per topic, and more on one topic with seq
SELECT idem_publish('mail', '{"to": "a@example.com"}') AS mail_id;
SELECT idem_publish('orders.paid', '{"order": 42, "note": 2}', aggregate => 'order-42', seq => 1) AS second_id;
-- the same message again in this transaction is an error
SELECT pg_temp.try($$SELECT idem_publish('orders.paid', '{}', aggregate => 'order-42')$$);
COMMIT;
SELECT id = idem_outbox_id('orders.paid', 'evt-1', 'ob-pay') AS id_from_claim,
       topic, aggregate, type, payload, headers, scope, key, seq,
       xact_id IS NOT NULL AND created_at IS NOT NULL AS stamped
FROM idem_outbox ORDER BY position;

-- A duplicate (the claim returns false) cannot publish: ID020, found or named.
BEGIN;
SELECT idem_claim('ob-pay', 'evt-1') AS claimed;
SELECT pg_temp.try($$SELECT idem_publish('orders.paid', '{}', aggregate => 'order-42')$$);
ROLLBACK;
BEGIN;
SELECT idem_claim('ob-pay', 'evt-1') AS claimed;
SELECT pg_temp.try($$SELECT idem_publish('orders.paid', '{}', scope => 'ob-pay', key => 'evt-1')$$);
ROLLBACK;
-- nor can a transaction that claimed nothing, or claimed another key
SELECT pg_temp.try($$SELECT idem_publish('orders.paid', '{}')$$);
BEGIN;
SELECT idem_claim('ob-pay', 'evt-2') AS claimed;
SELECT pg_temp.try($$SELECT idem_publish('orders.paid', '{}', scope => 'ob-pay', key => 'evt-1')$$);
SELECT pg_temp.try($$SELECT idem_publish('orders.paid', '{}', scope => 'ob-pay', key => 'never')$$);
ROLLBACK;

-- A rolled-back transaction leaves no message; its retry publishes the
-- same id.
BEGIN;
SELECT idem_claim('ob-pay', 'evt-3') AS claimed;
SELECT idem_publish('orders.paid', '{"order": 43}', aggregate => 'order-43') AS id;
ROLLBACK;
SELECT count(*) AS messages_of_evt_3 FROM idem_outbox WHERE key = 'evt-3';
BEGIN;
SELECT idem_claim('ob-pay', 'evt-3') AS claimed;
SELECT idem_publish('orders.paid', '{"order": 43}', aggregate => 'order-43') AS id;
COMMIT;

-- Several claims in one transaction: the message names its claim.
BEGIN;
SELECT idem_claim('ob-pay', 'evt-4') AS a, idem_claim('ob-pay', 'evt-5') AS b;
SELECT scope, key FROM idem_xact_claims();
SELECT pg_temp.try($$SELECT idem_publish('orders.paid', '{}')$$);
SELECT idem_publish('orders.paid', '{"order": 44}', scope => 'ob-pay', key => 'evt-4') AS id_4,
       idem_publish('orders.paid', '{"order": 45}', scope => 'ob-pay', key => 'evt-5') AS id_5;
COMMIT;
-- batch claims too
BEGIN;
SELECT count(*) FILTER (WHERE claimed) AS claimed FROM idem_claim_many('ob-batch', ARRAY['m1', 'm2']);
SELECT scope, key FROM idem_xact_claims();
SELECT idem_publish('batch', '{}', scope => 'ob-batch', key => 'm2') = idem_outbox_id('batch', 'm2', 'ob-batch') AS named;
ROLLBACK;

-- A claim with a ttl of its own is not found by itself: name it.
BEGIN;
SELECT idem_claim('ob-pay', 'evt-6', ttl => '1 hour') AS claimed;
SELECT count(*) AS found FROM idem_xact_claims();
SELECT pg_temp.try($$SELECT idem_publish('orders.paid', '{}')$$);
SELECT idem_publish('orders.paid', '{"order": 46}', scope => 'ob-pay', key => 'evt-6') AS id;
COMMIT;
-- with idempotency.default_ttl changed, the claims that use it are found
BEGIN;
SET LOCAL idempotency.default_ttl = '2 hours';
SELECT idem_claim('ob-pay', 'evt-7') AS claimed;
SELECT scope, key FROM idem_xact_claims();
SET LOCAL idempotency.default_ttl = 'infinity';
SELECT idem_claim('ob-pay', 'evt-8') AS claimed;
SELECT scope, key FROM idem_xact_claims();
ROLLBACK;

-- Savepoints: a claim made in a released savepoint is this transaction's,
-- one made in a rolled-back savepoint is gone.
BEGIN;
SAVEPOINT a;
SELECT idem_claim('ob-pay', 'evt-9') AS claimed;
RELEASE a;
SAVEPOINT b;
SELECT idem_claim('ob-pay', 'evt-10') AS claimed;
SELECT scope, key FROM idem_xact_claims();
ROLLBACK TO b;
SELECT scope, key FROM idem_xact_claims();
SELECT idem_publish('orders.paid', '{"order": 49}') = idem_outbox_id('orders.paid', 'evt-9', 'ob-pay') AS from_savepoint;
SELECT pg_temp.try($$SELECT idem_publish('orders.paid', '{}', scope => 'ob-pay', key => 'evt-10')$$);
COMMIT;
-- a claim made in a function's exception block (a subtransaction)
CREATE FUNCTION pg_temp.claim_in_block(k text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    BEGIN
        RETURN idem_claim('ob-pay', k);
    EXCEPTION WHEN unique_violation THEN
        RETURN false;
    END;
END $$;
BEGIN;
SELECT pg_temp.claim_in_block('evt-11') AS claimed;
SELECT idem_publish('orders.paid', '{"order": 50}') = idem_outbox_id('orders.paid', 'evt-11', 'ob-pay') AS from_block;
COMMIT;

-- Leases: idem_begin's acquired record is a claim; so is a record
-- completed in the same transaction.
BEGIN;
SELECT outcome FROM idem_begin('ob-lease', 'job-1');
SELECT idem_publish('jobs', '{"job": 1}') = idem_outbox_id('jobs', 'job-1', 'ob-lease') AS from_lease;
ROLLBACK;
BEGIN;
SELECT idem_claim('ob-pay', 'evt-12') AS claimed;
SELECT idem_complete('ob-pay', 'evt-12', '{"ok": true}');
SELECT idem_publish('orders.paid', '{"order": 51}') = idem_outbox_id('orders.paid', 'evt-12', 'ob-pay') AS after_complete;
ROLLBACK;
-- A key released and claimed again publishes the same id: nothing is
-- written the second time, and the call returns NULL.
SELECT idem_release('ob-pay', 'evt-3') AS released;
BEGIN;
SELECT idem_claim('ob-pay', 'evt-3') AS claimed_again;
SELECT idem_publish('orders.paid', '{"order": 43, "again": true}', aggregate => 'order-43') IS NULL AS not_written;
COMMIT;
SELECT payload FROM idem_outbox WHERE key = 'evt-3';

-- Two-phase commit: a prepared transaction's message appears with COMMIT
-- PREPARED (none after ROLLBACK PREPARED), and it holds its aggregate's
-- lock until then.
BEGIN;
SELECT idem_claim('ob-2pc', 'a') AS claimed;
SELECT idem_publish('prepared', '{}', aggregate => 'P') = idem_outbox_id('prepared', 'a', 'ob-2pc') AS published;
PREPARE TRANSACTION 'ob_2pc_a';
BEGIN;
SELECT idem_claim('ob-2pc', 'b') AS claimed;
SET LOCAL lock_timeout = '100ms';
SELECT pg_temp.try($$SELECT idem_publish('prepared', '{}', aggregate => 'P')$$);
ROLLBACK;
SELECT count(*) AS before_commit FROM idem_outbox WHERE topic = 'prepared';
COMMIT PREPARED 'ob_2pc_a';
BEGIN;
SELECT idem_claim('ob-2pc', 'c') AS claimed;
SELECT idem_publish('prepared', '{}', aggregate => 'P') IS NOT NULL AS published;
PREPARE TRANSACTION 'ob_2pc_c';
ROLLBACK PREPARED 'ob_2pc_c';
SELECT key FROM idem_outbox WHERE topic = 'prepared';

--------------------------------------------------------------------------
-- Publishing with an explicit key: no claim needed; a second publication
-- of the key (and topic, seq) writes nothing and returns NULL.
--------------------------------------------------------------------------
SELECT idem_publish('stock', '{"sku": "A", "delta": -1}', key => 'stock-A-1', aggregate => 'A') AS id;
SELECT idem_publish('stock', '{"sku": "A", "delta": -1}', key => 'stock-A-1', aggregate => 'A') IS NULL AS duplicate;
SELECT idem_publish('stock', '{"sku": "A", "delta": -1}', key => 'stock-A-1', aggregate => 'A', seq => 1) IS NOT NULL AS other_seq;
SELECT idem_publish('stock', '{"other": true}', key => 'stock-A-1') IS NULL AS other_payload_same_key;
SELECT id = idem_outbox_id('stock', 'stock-A-1') AS key_id, scope, key, aggregate
FROM idem_outbox WHERE topic = 'stock' AND seq = 0;
-- an explicit key does not look at claims
BEGIN;
SELECT idem_claim('ob-pay', 'evt-13') AS claimed;
SELECT idem_publish('stock', '{}', key => 'evt-13') = idem_outbox_id('stock', 'evt-13') AS explicit_key;
ROLLBACK;
-- the default scope '' is a scope: named with scope => ''
BEGIN;
SELECT idem_claim('ob-default-scope') AS claimed;
SELECT idem_publish('misc', '{}', scope => '', key => 'ob-default-scope') = idem_outbox_id('misc', 'ob-default-scope', '') AS default_scope;
ROLLBACK;

--------------------------------------------------------------------------
-- idem_publish: errors
--------------------------------------------------------------------------
SELECT pg_temp.try($$SELECT idem_publish(NULL, '{}', key => 'k')$$);
SELECT pg_temp.try($$SELECT idem_publish('', '{}', key => 'k')$$);
SELECT pg_temp.try($$SELECT idem_publish(repeat('t', 129), '{}', key => 'k')$$);
SELECT pg_temp.try($$SELECT idem_publish(repeat('t', 128), '{}', key => 'k') IS NOT NULL$$) AS topic_128_bytes;
SELECT pg_temp.try($$SELECT idem_publish('t', '{}', key => '')$$);
SELECT pg_temp.try($$SELECT idem_publish('t', '{}', key => repeat('é', 513))$$);
SELECT pg_temp.try($$SELECT idem_publish('t', '{}', key => 'k', aggregate => '')$$);
SELECT pg_temp.try($$SELECT idem_publish('t', '{}', key => 'k', aggregate => repeat('a', 1025))$$);
SELECT pg_temp.try($$SELECT idem_publish('t', '{}', key => 'k', headers => '[1]')$$);
SELECT pg_temp.try($$SELECT idem_publish('t', '{}', key => 'k', headers => 'null')$$);
SELECT pg_temp.try($$SELECT idem_publish('t', '{}', scope => repeat('s', 129), key => 'k')$$);
SELECT pg_temp.try($$SELECT idem_publish('t', '{}', scope => 's')$$);
SELECT pg_temp.try($$SELECT idem_publish('t', '{}', key => 'k', seq => NULL)$$);
SELECT pg_temp.try($$SELECT idem_publish('t', '{}', key => 'k', seq => -1)$$);
-- a NULL payload is a message without a body (Debezium: a tombstone)
SELECT idem_publish('t', NULL, key => 'null-payload') IS NOT NULL AS null_payload;
BEGIN READ ONLY;
SELECT pg_temp.try($$SELECT idem_publish('t', '{}', key => 'k')$$);
ROLLBACK;

--------------------------------------------------------------------------
-- Topics: relay and retention
--------------------------------------------------------------------------
SELECT idem_outbox_topic('stock', retention => '1 day');
SELECT idem_outbox_topic('stock', relay => 'table');
SELECT idem_outbox_topic('events', relay => 'both', retention => '0');
SELECT topic, relay, retention FROM idem_outbox_topics ORDER BY topic;
SELECT pg_temp.try($$SELECT idem_outbox_topic(NULL)$$);
SELECT pg_temp.try($$SELECT idem_outbox_topic('')$$);
SELECT pg_temp.try($$SELECT idem_outbox_topic(repeat('t', 129))$$);
SELECT pg_temp.try($$SELECT idem_outbox_topic('t', relay => 'kafka')$$);
SELECT pg_temp.try($$SELECT idem_outbox_topic('t', retention => '-1 second')$$);
BEGIN READ ONLY;
SELECT pg_temp.try($$SELECT idem_outbox_topic('t')$$);
ROLLBACK;
-- A topic relayed through logical decoding messages needs wal_level =
-- logical (test/t/024_outbox.pl decodes them); with another wal_level the
-- publication fails and writes nothing.
SELECT CASE WHEN current_setting('wal_level') = 'logical'
            THEN r ~ '^ok: [0-9a-f-]{36}$'
            ELSE r = '55000: idem_publish: topic "events" relays through logical decoding messages, which need wal_level = logical / wal_level is '
                     || current_setting('wal_level') || '; the message would be decoded by nobody.' END AS as_expected
FROM pg_temp.try($$SELECT idem_publish('events', '{}', key => 'e-1')$$) AS r;
SELECT idem_outbox_topic('events', relay => 'table');

--------------------------------------------------------------------------
-- A topic for Debezium only (pull => false): a publication takes no lock
-- of its aggregate and writes no entry of the ordering index (pulled is
-- false); no consumer group may subscribe; set back to pull, groups get
-- what is published from then on, from_start included.
--------------------------------------------------------------------------
SELECT idem_outbox_topic('dbz', pull => false);
SELECT topic, relay, pull FROM idem_outbox_topics WHERE topic = 'dbz';
SELECT idem_publish('dbz', '{"n": 1}', key => 'dbz-1', aggregate => 'A') IS NOT NULL AS published;
SELECT idem_publish('dbz', '{"n": 1}', key => 'dbz-1', aggregate => 'A') IS NULL AS duplicate;
SELECT idem_publish('dbz', '{"n": 2}', key => 'dbz-2') IS NOT NULL AS published_lone;
SELECT key, pulled FROM idem_outbox WHERE topic = 'dbz' ORDER BY position;
SELECT count(*) AS aggregate_locks FROM idem_outbox_aggregates WHERE topic = 'dbz';
SELECT pg_temp.try($$SELECT idem_outbox_subscribe('dbz-group', 'dbz', from_start => true)$$);
SELECT count(*) AS subscriptions FROM idem_outbox_subscriptions WHERE topic = 'dbz';
-- back to pull: what comes next is ordered (and locked); from_start reads
-- only that
SELECT idem_outbox_topic('dbz', pull => true);
SELECT idem_publish('dbz', '{"n": 3}', key => 'dbz-3', aggregate => 'A') IS NOT NULL AS published;
SELECT key, pulled FROM idem_outbox WHERE topic = 'dbz' ORDER BY position;
SELECT count(*) AS aggregate_locks FROM idem_outbox_aggregates WHERE topic = 'dbz';
SELECT idem_outbox_subscribe('dbz-group', 'dbz', from_start => true) AS subscribed;
SELECT f.payload FROM idem_outbox_fetch('dbz-group') AS f;
-- a message that was not pulled is no group's to acknowledge
SELECT idem_outbox_ack('dbz-group', idem_outbox_id('dbz', 'dbz-1')) AS acked_unpulled;
SELECT consumer, unacknowledged FROM idem_outbox_backlog WHERE topic = 'dbz';
-- not while a group reads it
SELECT pg_temp.try($$SELECT idem_outbox_topic('dbz', pull => false)$$);
SELECT idem_outbox_unsubscribe('dbz-group', 'dbz');
SELECT idem_outbox_topic('dbz', pull => false);
DELETE FROM idem_outbox WHERE topic = 'dbz';
DELETE FROM idem_outbox_aggregates WHERE topic = 'dbz';
DELETE FROM idem_outbox_topics WHERE topic = 'dbz';

--------------------------------------------------------------------------
-- The pull API: subscriptions
--------------------------------------------------------------------------
TRUNCATE idem_outbox;
SELECT idem_outbox_subscribe('billing', 'orders') AS subscribed,
       idem_outbox_subscribe('billing', 'orders') AS again,
       idem_outbox_subscribe('audit', 'orders', from_start => true) AS audit;
SELECT pg_temp.try($$SELECT idem_outbox_subscribe(NULL, 't')$$);
SELECT pg_temp.try($$SELECT idem_outbox_subscribe('', 't')$$);
SELECT pg_temp.try($$SELECT idem_outbox_subscribe(repeat('c', 121), 't')$$);
SELECT pg_temp.try($$SELECT idem_outbox_subscribe(repeat('c', 120), 't')$$) AS consumer_120_bytes;
SELECT pg_temp.try($$SELECT idem_outbox_subscribe('c', NULL)$$);
SELECT pg_temp.try($$SELECT idem_outbox_subscribe('c', '')$$);
SELECT pg_temp.try($$SELECT idem_outbox_subscribe('c', repeat('t', 129))$$);
SELECT pg_temp.try($$SELECT idem_outbox_subscribe('c', 't', NULL)$$);
SELECT pg_temp.try($$SELECT idem_outbox_unsubscribe(NULL, 't')$$);
SELECT pg_temp.try($$SELECT idem_outbox_unsubscribe('c', NULL)$$);
SELECT idem_outbox_unsubscribe(repeat('c', 120), 't') AS unsubscribed,
       idem_outbox_unsubscribe(repeat('c', 120), 't') AS again;
BEGIN READ ONLY;
SELECT pg_temp.try($$SELECT idem_outbox_subscribe('c', 't')$$);
SELECT pg_temp.try($$SELECT idem_outbox_unsubscribe('c', 't')$$);
ROLLBACK;

--------------------------------------------------------------------------
-- Fetch and acknowledge: per aggregate in commit order, one lease per run
--------------------------------------------------------------------------
-- Ten messages, three aggregates (o1, o2, o3) and two without one.
SELECT count(idem_publish('orders', jsonb_build_object('n', i), key => 'o-' || i,
                          aggregate => CASE WHEN i % 5 = 0 THEN NULL ELSE 'o' || (i % 3 + 1) END))
FROM generate_series(1, 10) AS i;
-- A run is the unacknowledged messages of one aggregate, in order; runs
-- come oldest first.  Up to max messages.
SELECT aggregate, payload->>'n' AS n, attempts FROM idem_outbox_fetch('billing', 4, '1 hour');
-- o2 is leased: its next messages wait; o1 and o3 come, and the rest
SELECT aggregate, payload->>'n' AS n, attempts FROM idem_outbox_fetch('billing', lease => '1 hour');
SELECT aggregate, payload->>'n' AS n FROM idem_outbox_fetch('billing', lease => '1 hour');
SELECT consumer, topic, unacknowledged, leased, max_attempts FROM idem_outbox_backlog ORDER BY consumer;
-- acknowledging: true once, then false
SELECT idem_outbox_ack('billing', idem_outbox_id('orders', 'o-1')) AS first,
       idem_outbox_ack('billing', idem_outbox_id('orders', 'o-1')) AS again;
-- o2's first message is acknowledged, its next ones are still leased (the
-- run was handed out whole)
SELECT aggregate, payload->>'n' AS n FROM idem_outbox_fetch('billing', lease => '1 hour');
SELECT count(*) FILTER (WHERE idem_outbox_ack('billing', o.id)) AS acked
FROM idem_outbox o WHERE o.aggregate = 'o2';
-- another group reads the same messages independently
SELECT aggregate, payload->>'n' AS n FROM idem_outbox_fetch('audit', 100, '1 hour');
SELECT consumer, topic, unacknowledged, leased FROM idem_outbox_backlog ORDER BY consumer;

-- A lease that runs out hands the run out again, with attempts counted.
SELECT idem_outbox_subscribe('retry', 'orders', from_start => true);
SELECT count(*) FROM idem_outbox_fetch('retry', 100, '10 milliseconds');
SELECT pg_sleep(0.05);
SELECT aggregate, payload->>'n' AS n, attempts FROM idem_outbox_fetch('retry', 3, '1 hour');
-- a late acknowledgement of the first lease still counts
SELECT idem_outbox_ack('retry', idem_outbox_id('orders', 'o-1')) AS late_ack;
SELECT aggregate, payload->>'n' AS n, attempts FROM idem_outbox_fetch('retry', 100, '1 hour');

-- Acknowledging without fetching (skipping a message) is allowed; an
-- unknown id is false.
SELECT idem_outbox_subscribe('skipper', 'orders', from_start => true);
SELECT idem_outbox_ack('skipper', idem_outbox_id('orders', 'o-3')) AS skipped,
       idem_outbox_ack('skipper', '00000000-0000-8000-8000-000000000000') AS unknown;
SELECT aggregate, payload->>'n' AS n FROM idem_outbox_fetch('skipper', 2);

-- A subscription from now on skips what is there already.
SELECT idem_outbox_subscribe('late', 'orders') AS late;
SELECT count(*) AS nothing_old FROM idem_outbox_fetch('late');
SELECT idem_publish('orders', '{"n": 11}', key => 'o-11', aggregate => 'o1') IS NOT NULL AS published;
SELECT aggregate, payload->>'n' AS n FROM idem_outbox_fetch('late');

-- fetch and ack: errors
SELECT pg_temp.try($$SELECT count(*) FROM idem_outbox_fetch(NULL)$$);
SELECT pg_temp.try($$SELECT count(*) FROM idem_outbox_fetch('billing', NULL)$$);
SELECT pg_temp.try($$SELECT count(*) FROM idem_outbox_fetch('billing', 0)$$);
SELECT pg_temp.try($$SELECT count(*) FROM idem_outbox_fetch('billing', 1, NULL)$$);
SELECT pg_temp.try($$SELECT count(*) FROM idem_outbox_fetch('billing', 1, '0')$$);
SELECT pg_temp.try($$SELECT count(*) FROM idem_outbox_fetch('nobody')$$);
BEGIN READ ONLY;
SELECT pg_temp.try($$SELECT count(*) FROM idem_outbox_fetch('billing')$$);
SELECT pg_temp.try($$SELECT idem_outbox_ack('billing', idem_outbox_id('orders', 'o-1'))$$);
ROLLBACK;
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT pg_temp.try($$SELECT count(*) FROM idem_outbox_fetch('billing')$$);
ROLLBACK;
SELECT pg_temp.try($$SELECT idem_outbox_ack(NULL, idem_outbox_id('orders', 'o-1'))$$);
SELECT pg_temp.try($$SELECT idem_outbox_ack('billing', NULL)$$);
SELECT pg_temp.try($$SELECT idem_outbox_ack('nobody', idem_outbox_id('orders', 'o-1'))$$);

--------------------------------------------------------------------------
-- Inbox: a claim of the message id in the scope 'inbox:' || consumer
--------------------------------------------------------------------------
BEGIN;
SELECT idem_inbox('shipping', idem_outbox_id('orders', 'o-1')) AS first_delivery;
SELECT idem_inbox('shipping', idem_outbox_id('orders', 'o-1')) AS same_transaction;
COMMIT;
SELECT idem_inbox('shipping', idem_outbox_id('orders', 'o-1')) AS redelivery,
       idem_inbox('billing', idem_outbox_id('orders', 'o-1')) AS other_consumer;
SELECT scope, key = idem_outbox_id('orders', 'o-1')::text AS key_is_id, status
FROM idem_records WHERE scope LIKE 'inbox:%' ORDER BY scope;
-- a rolled-back delivery is delivered again
BEGIN;
SELECT idem_inbox('shipping', idem_outbox_id('orders', 'o-2')) AS applied;
ROLLBACK;
SELECT idem_inbox('shipping', idem_outbox_id('orders', 'o-2'), ttl => '1 hour', fingerprint => 'v1') AS applied_again;
SELECT expires_at - created_at AS ttl FROM idem_records
WHERE scope = 'inbox:shipping' AND key = idem_outbox_id('orders', 'o-2')::text;
SET idem_test.try_detail = off;   -- the detail has the time of the first claim
SELECT pg_temp.try($$SELECT idem_inbox('shipping', idem_outbox_id('orders', 'o-2'), fingerprint => 'v2')$$);
SET idem_test.try_detail = on;
SELECT pg_temp.try($$SELECT idem_inbox(NULL, idem_outbox_id('orders', 'o-2'))$$);
SELECT pg_temp.try($$SELECT idem_inbox('', idem_outbox_id('orders', 'o-2'))$$);
SELECT pg_temp.try($$SELECT idem_inbox(repeat('c', 121), idem_outbox_id('orders', 'o-2'))$$);
SELECT pg_temp.try($$SELECT idem_inbox(repeat('c', 120), idem_outbox_id('orders', 'o-2'))$$) AS consumer_120_bytes;
SELECT pg_temp.try($$SELECT idem_inbox('shipping', NULL)$$);
SELECT pg_temp.try($$SELECT idem_inbox('shipping', idem_outbox_id('orders', 'o-3'), ttl => '-1 day')$$);
BEGIN READ ONLY;
SELECT pg_temp.try($$SELECT idem_inbox('shipping', idem_outbox_id('orders', 'o-3'))$$);
ROLLBACK;

--------------------------------------------------------------------------
-- Retention: idem_outbox_purge deletes what is older than its topic's
-- retention and acknowledged by every group of its topic.
--------------------------------------------------------------------------
TRUNCATE idem_outbox, idem_outbox_subscriptions, idem_outbox_runs;
SELECT idem_outbox_topic('orders', retention => '0');
SELECT idem_outbox_subscribe('fast', 'orders'), idem_outbox_subscribe('slow', 'orders');
SELECT count(idem_publish('orders', jsonb_build_object('n', i), key => 'p-' || i, aggregate => 'a' || (i % 2)))
FROM generate_series(1, 6) AS i;
SELECT count(idem_publish('untracked', '{}', key => 'u-' || i)) FROM generate_series(1, 3) AS i;
SELECT idem_outbox_topic('untracked', retention => '0');
SELECT idem_publish('kept', '{}', key => 'kept-1') IS NOT NULL AS kept;
-- nothing acknowledged: only the topics nobody reads lose their old messages
SELECT idem_outbox_purge() AS purged;
SELECT topic, count(*) FROM idem_outbox GROUP BY topic ORDER BY topic;
-- 'fast' acknowledges everything, 'slow' nothing: nothing goes
SELECT count(*) FILTER (WHERE idem_outbox_ack('fast', f.id)) AS acked FROM idem_outbox_fetch('fast') AS f;
SELECT idem_outbox_purge() AS purged;
-- 'slow' acknowledges some: a lagging group never loses what it has not
-- acknowledged; what every group acknowledged goes
SELECT count(*) FILTER (WHERE idem_outbox_ack('slow', f.id)) AS acked FROM idem_outbox_fetch('slow', 2) AS f;
SELECT idem_outbox_purge() AS purged;
SELECT count(*) AS still_there FROM idem_outbox WHERE topic = 'orders';
SELECT count(*) AS slow_gets FROM idem_outbox_fetch('slow');
-- the rest of what it fetched, as one batch
SELECT idem_outbox_ack_many('slow', ARRAY(SELECT o.id FROM idem_outbox o WHERE o.topic = 'orders')) AS acked;
SELECT idem_outbox_purge(batch_size => 4) AS purged, idem_outbox_purge() AS rest;
SELECT topic, count(*) FROM idem_outbox GROUP BY topic ORDER BY topic;
-- each group's progress is one row per run, parked once drained
SELECT count(f.id) AS fetched FROM idem_outbox_subscriptions s, idem_outbox_fetch(s.consumer, 10) AS f;
SELECT consumer, count(*) AS runs, count(*) FILTER (WHERE available_at = 'infinity') AS parked
FROM idem_outbox_runs GROUP BY consumer ORDER BY consumer;
-- unsubscribing lets go of what a group held
SELECT idem_publish('orders', '{"n": 7}', key => 'p-7', aggregate => 'a1') IS NOT NULL AS published;
SELECT idem_outbox_purge() AS purged_while_subscribed;
SELECT idem_outbox_unsubscribe('slow', 'orders'), idem_outbox_unsubscribe('fast', 'orders');
SELECT idem_outbox_purge() AS purged_after;
SELECT pg_temp.try($$SELECT idem_outbox_purge(NULL)$$);
SELECT pg_temp.try($$SELECT idem_outbox_purge(0)$$);
BEGIN READ ONLY;
SELECT pg_temp.try($$SELECT idem_outbox_purge()$$);
ROLLBACK;

--------------------------------------------------------------------------
-- Privileges: nothing is granted to PUBLIC but reading the topics and
-- computing ids; what an application role needs, by hand.
--------------------------------------------------------------------------
CREATE ROLE regress_outbox_app;
SET ROLE regress_outbox_app;
SELECT pg_temp.try($$SELECT idem_publish('orders', '{}', key => 'priv-1')$$);
SELECT pg_temp.try($$SELECT idem_outbox_topic('orders', retention => '1 day')$$);
SELECT pg_temp.try($$SELECT count(*) FROM idem_outbox_topics$$) AS topics_readable;
SELECT pg_temp.try($$SELECT idem_outbox_id('t', 'k') IS NOT NULL$$) AS id_public;
RESET ROLE;
-- idem_grant gives claims (the inbox); idem_outbox_grant the outbox, per
-- topic and consumer group (test/sql/outbox_isolation.sql has the rest).
SELECT idem_grant('regress_outbox_app');
SELECT idem_outbox_grant('regress_outbox_app', 'publish', 'orders');
SELECT idem_outbox_grant('regress_outbox_app', 'consume', 'orders', 'app');
SET ROLE regress_outbox_app;
BEGIN;
SELECT idem_claim('ob-priv', 'k1') AS claimed;
SELECT idem_publish('orders', '{}') = idem_outbox_id('orders', 'k1', 'ob-priv') AS published;
COMMIT;
SELECT idem_outbox_subscribe('app', 'orders', from_start => true) AS subscribed;
SELECT count(*) FILTER (WHERE idem_outbox_ack('app', f.id)) AS acked FROM idem_outbox_fetch('app') AS f;
SELECT idem_inbox('app', idem_outbox_id('orders', 'k1', 'ob-priv')) AS inbox;
SELECT pg_temp.try($$DELETE FROM idem_outbox$$);
RESET ROLE;
SELECT idem_revoke('regress_outbox_app');
REVOKE USAGE ON SCHEMA public FROM regress_outbox_app;
DROP ROLE regress_outbox_app;

-- A publication for an aggregate that has its lock row locks the row and
-- writes no new version of it (no update: less WAL); the first one
-- inserts it.  Concurrent first publications: outbox_commit_order.spec.
SELECT idem_publish('ob-lock', '{}', key => 'l1', aggregate => 'L') IS NOT NULL AS first;
SELECT ctid AS lock_row FROM idem_outbox_aggregates WHERE topic = 'ob-lock' \gset
BEGIN;
SELECT idem_publish('ob-lock', '{}', key => 'l2', aggregate => 'L') IS NOT NULL AS second;
SELECT locktype, mode FROM pg_locks
 WHERE pid = pg_backend_pid() AND locktype = 'relation'
   AND relation = 'idem_outbox_aggregates'::regclass ORDER BY mode;
COMMIT;
SELECT ctid = :'lock_row' AS same_row_version, count(*) OVER () AS rows
  FROM idem_outbox_aggregates WHERE topic = 'ob-lock';

-- Publishing reads no more of idem_outbox_subscriptions when other topics
-- have many groups: an index probe, not a scan of the table.
INSERT INTO idem_outbox_subscriptions (consumer, topic, horizon)
SELECT 'skew' || i, 'ob-skew-other', '0' FROM generate_series(1, 5000) i;
ANALYZE idem_outbox_subscriptions;
BEGIN;
SELECT pg_stat_get_xact_numscans('idem_outbox_subscriptions'::regclass) AS scans_before \gset
SELECT idem_publish('ob-skew', '{}', key => 's1') IS NOT NULL AS published;
SELECT pg_stat_get_xact_numscans('idem_outbox_subscriptions'::regclass) - :scans_before AS seq_scans;
ROLLBACK;
DELETE FROM idem_outbox_subscriptions WHERE topic = 'ob-skew-other';

-- Catalog: the labels of the functions (test/t/024_outbox.pl checks that
-- pg_dump keeps the tables' rows).
SELECT p.oid::regprocedure AS function, p.provolatile AS vol, p.proisstrict AS strict,
       p.proparallel AS par, p.prosecdef AS secdef, p.proconfig AS config,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_execute
FROM pg_proc p
WHERE p.proname ~ '^idem_(outbox|publish|inbox|xact_claims|xid8_near)'
  AND p.pronamespace = (SELECT relnamespace FROM pg_class WHERE oid = 'idem_records'::regclass)
ORDER BY p.oid::regprocedure::text;

TRUNCATE idem_outbox, idem_outbox_topics, idem_outbox_subscriptions, idem_outbox_runs;
DELETE FROM idem_records WHERE scope LIKE 'ob-%' OR scope LIKE 'inbox:%';
