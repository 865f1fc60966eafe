-- idem_publish's fast path (src/outbox_publish.c): which publications take
-- it, which it leaves to idem_publish_sql, and that both write the same
-- message.  Whether the SQL body ran is read from
-- pg_stat_xact_user_functions (track_functions = pl): "sql" is its calls
-- in the transaction, 0 for the fast path.
SET idempotency.autocommit_claims = allow;
\set SHOW_CONTEXT never
\getenv abs_srcdir PG_ABS_SRCDIR
\set try_sql :abs_srcdir '/helpers/try.sql'
\i :try_sql
SET idem_test.try_detail = on;
SET track_functions = pl;
TRUNCATE idem_outbox, idem_outbox_topics, idem_outbox_subscriptions, idem_outbox_runs, idem_outbox_aggregates;
DELETE FROM idem_records WHERE scope LIKE 'od-%';
SELECT idem_outbox_topic('od-relay', pull => false);

CREATE FUNCTION pg_temp.sql_calls() RETURNS bigint LANGUAGE sql AS $$
    SELECT COALESCE(sum(calls), 0) FROM pg_stat_xact_user_functions WHERE funcname = 'idem_publish_sql'
$$;

-- Every published row against what idem_publish_sql would write: the id
-- from idem_outbox_id, the claim, the transaction and its start.
CREATE TABLE pg_temp.seen (id uuid, xact xid8, started timestamptz, path text);
CREATE FUNCTION pg_temp.publish(path text, topic text, aggregate text DEFAULT NULL,
                                scope text DEFAULT NULL, key text DEFAULT NULL, seq int DEFAULT 0)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    id uuid;
    calls bigint := pg_temp.sql_calls();
BEGIN
    id := idem_publish(topic, jsonb_build_object('n', 1), key => key, aggregate => aggregate,
                       headers => jsonb_build_object('h', 'v'), scope => scope, type => 'T', seq => seq);
    INSERT INTO pg_temp.seen VALUES (id, pg_current_xact_id(), now(), path);
    RETURN CASE WHEN pg_temp.sql_calls() > calls THEN 'sql' ELSE 'fast' END;
END
$$;

--------------------------------------------------------------------------
-- Taken: the transaction's one claim, a named one or an explicit key, to a
-- topic without a group, relayed by the table.
--------------------------------------------------------------------------
BEGIN;
SELECT idem_claim('od-a', 'k1');
SELECT pg_temp.publish('pull false, aggregate', 'od-relay', 'acct-1');
COMMIT;
BEGIN;
SELECT idem_claim('od-a', 'k2');
SELECT pg_temp.publish('default topic, no aggregate', 'od-plain');
COMMIT;
BEGIN;
SELECT idem_claim('od-a', 'k3'), idem_claim('od-b', 'k3');
SELECT pg_temp.publish('named claim', 'od-relay', 'acct-1', 'od-b', 'k3');
SELECT pg_temp.publish('named claim, seq 1', 'od-relay', 'acct-1', 'od-b', 'k3', 1);
COMMIT;
-- An explicit key needs no claim (nor a transaction id); published again,
-- by a later transaction, it is the body's NULL.
BEGIN;
SELECT pg_temp.publish('explicit key', 'od-relay', 'acct-1', key => 'explicit-1');
COMMIT;
SELECT pg_temp.try($$SELECT idem_publish('od-relay', '{}', key => 'explicit-1')$$) AS explicit_again;
-- Not ASCII: the id is hashed from UTF-8 with lengths in characters.
BEGIN;
SELECT idem_claim('od-ü', 'ключ-4');
SELECT pg_temp.publish('multibyte', 'od-relay', 'счёт');
COMMIT;
-- A claim made in the same statement is seen.
BEGIN;
SELECT idem_claim('od-a', 'k5') AND pg_temp.publish('same statement', 'od-relay', 'acct-2') = 'fast' AS fast;
COMMIT;

-- An aggregate of a pulled topic: the aggregate's lock, its row inserted
-- by the first publication, locked by the next, also in one transaction.
BEGIN;
SELECT idem_claim('od-a', 'k6');
SELECT pg_temp.publish('pulled topic, aggregate (its first)', 'od-plain', 'acct-1');
COMMIT;
BEGIN;
SELECT idem_claim('od-a', 'k6b');
SELECT pg_temp.publish('pulled topic, aggregate (locked)', 'od-plain', 'acct-1'),
       pg_temp.publish('pulled topic, aggregate, seq 1', 'od-plain', 'acct-1', seq => 1),
       pg_temp.publish('pulled topic, another aggregate', 'od-plain', 'acct-2', seq => 2);
SELECT locktype, mode FROM pg_locks
 WHERE pid = pg_backend_pid() AND relation = 'idem_outbox_aggregates'::regclass;
COMMIT;
SELECT aggregate FROM idem_outbox_aggregates WHERE topic = 'od-plain' ORDER BY aggregate;
-- Their entries in the ordering index, read through it.
BEGIN;
SET LOCAL enable_seqscan = off;
SET LOCAL enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT aggregate, position FROM idem_outbox
 WHERE topic = 'od-plain' AND aggregate IS NOT NULL AND pulled ORDER BY topic, aggregate, position;
SELECT aggregate, seq FROM idem_outbox
 WHERE topic = 'od-plain' AND aggregate IS NOT NULL AND pulled ORDER BY topic, aggregate, position;
COMMIT;

--------------------------------------------------------------------------
-- Left to idem_publish_sql: logical messages, groups, and every error
-- (the fast path raises none: it declines, and the body reports).
--------------------------------------------------------------------------
-- A trigger on idem_outbox_aggregates: the body's INSERT would fire it.
CREATE FUNCTION pg_temp.no_op() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
CREATE TRIGGER od_agg BEFORE INSERT ON idem_outbox_aggregates FOR EACH ROW EXECUTE FUNCTION pg_temp.no_op();
BEGIN;
SELECT idem_claim('od-a', 'k6c');
SELECT pg_temp.publish('a trigger on idem_outbox_aggregates', 'od-plain', 'acct-3');
COMMIT;
DROP TRIGGER od_agg ON idem_outbox_aggregates;
SELECT idem_outbox_topic('od-msg', relay => 'both');
BEGIN;
SELECT idem_claim('od-a', 'k6d');
-- (the body's error: the fast path writes no logical message)
SELECT pg_temp.try($$SELECT idem_publish('od-msg', '{}') IS NOT NULL$$) AS logical_message;
ROLLBACK;
-- A trigger on idem_outbox_runs: the body's INSERT would fire it.
SELECT idem_outbox_subscribe('od-group', 'od-plain'), idem_outbox_subscribe('od-group2', 'od-plain');
CREATE TRIGGER od_runs BEFORE INSERT ON idem_outbox_runs FOR EACH ROW EXECUTE FUNCTION pg_temp.no_op();
BEGIN;
SELECT idem_claim('od-a', 'k6e');
SELECT pg_temp.publish('a trigger on idem_outbox_runs', 'od-plain', 'acct-6');
COMMIT;
DROP TRIGGER od_runs ON idem_outbox_runs;

--------------------------------------------------------------------------
-- Consumer groups: each gets a run (of the aggregate, from the message;
-- or of the message alone), as the body makes it, and a parked run of the
-- aggregate is freed.
--------------------------------------------------------------------------
BEGIN;
SELECT idem_claim('od-a', 'k7');
SELECT pg_temp.publish('a group, no aggregate (its run)', 'od-plain'),
       pg_temp.publish('a group, an aggregate (its run)', 'od-plain', 'acct-4', seq => 1),
       pg_temp.publish('a group, the aggregate again', 'od-plain', 'acct-4', seq => 2);
COMMIT;
SET idempotency.direct_publish = off;
BEGIN;
SELECT idem_claim('od-a', 'k7b');
SELECT pg_temp.publish('a group, no aggregate, the body', 'od-plain'),
       pg_temp.publish('a group, an aggregate, the body', 'od-plain', 'acct-5', seq => 1);
COMMIT;
RESET idempotency.direct_publish;
-- Both paths' runs: from their message on (acked is the position before
-- it), free since the publication, every other column its default.
SELECT r.consumer, o.key, o.seq, r.aggregate, r.lone IS NOT NULL AS lone,
       r.acked = o.position - 1 AS from_it, r.available_at = o.created_at AS free,
       r.acked_ahead, r.leased_upto, r.handed_upto, r.attempts
  FROM idem_outbox_runs r JOIN idem_outbox o
    ON o.topic = r.topic
   AND (o.id = r.lone OR (r.lone IS NULL AND o.aggregate = r.aggregate AND o.position = r.acked + 1))
 WHERE r.topic = 'od-plain' AND o.key IN ('k7', 'k7b')
 ORDER BY o.key, o.seq, r.consumer;
-- A default a DBA set on a column the INSERT does not name is the run's;
-- one on a column it names is not evaluated.
CREATE SEQUENCE od_seq;
ALTER TABLE idem_outbox_runs ALTER COLUMN attempts SET DEFAULT 7,
                             ALTER COLUMN acked SET DEFAULT nextval('od_seq');
BEGIN;
SELECT idem_claim('od-a', 'k7d');
SELECT pg_temp.publish('a group, DBA defaults', 'od-plain', 'acct-7');
COMMIT;
ALTER TABLE idem_outbox_runs ALTER COLUMN attempts SET DEFAULT 0, ALTER COLUMN acked DROP DEFAULT;
SELECT consumer, attempts FROM idem_outbox_runs
 WHERE topic = 'od-plain' AND aggregate = 'acct-7' ORDER BY consumer;
SELECT is_called AS acked_default_evaluated FROM od_seq;
DROP SEQUENCE od_seq;
-- A parked run (drained) is freed by the aggregate's next message.
UPDATE idem_outbox_runs SET available_at = 'infinity'
 WHERE topic = 'od-plain' AND aggregate = 'acct-4' AND consumer = 'od-group';
BEGIN;
SELECT idem_claim('od-a', 'k7c');
SELECT pg_temp.publish('a group, a parked run', 'od-plain', 'acct-4');
SELECT consumer, available_at = now() AS freed_now FROM idem_outbox_runs
 WHERE topic = 'od-plain' AND aggregate = 'acct-4' ORDER BY consumer;
COMMIT;
BEGIN;
SELECT idem_claim('od-a', 'k8');
SELECT pg_temp.publish('first', 'od-relay', 'acct-1');
SELECT pg_temp.try($$SELECT idem_publish('od-relay', '{}', aggregate => 'acct-1')$$) AS again;
SELECT pg_temp.try($$SELECT idem_publish('od-relay', '{}', key => 'explicit-2') IS NOT NULL$$) AS explicit_first,
       pg_temp.try($$SELECT idem_publish('od-relay', '{}', key => 'explicit-2')$$) AS explicit_twice;
COMMIT;
BEGIN;
SELECT pg_temp.try($$SELECT idem_publish('od-relay', '{}', aggregate => 'acct-1')$$) AS no_claim;
SELECT idem_claim('od-a', 'k9'), idem_claim('od-a', 'k10');
SELECT pg_temp.try($$SELECT idem_publish('od-relay', '{}', aggregate => 'acct-1')$$) AS two_claims;
SELECT pg_temp.try($$SELECT idem_publish('od-relay', '{}', scope => 'od-a', key => 'k1')$$) AS not_this_transactions;
SELECT pg_temp.try($$SELECT idem_publish('od-relay', '{}', headers => '[1]')$$) AS bad_headers;
ROLLBACK;
-- A claim with a ttl of its own is not found, by either path.
BEGIN;
SELECT idem_claim('od-a', 'k11', ttl => '1 hour');
SELECT pg_temp.try($$SELECT idem_publish('od-relay', '{}')$$) AS own_ttl;
ROLLBACK;
-- REPEATABLE READ, and the setting off.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT idem_claim('od-a', 'k12');
SELECT pg_temp.publish('repeatable read', 'od-relay', 'acct-1');
COMMIT;
SET idempotency.direct_publish = off;
BEGIN;
SELECT idem_claim('od-a', 'k13');
SELECT pg_temp.publish('direct_publish off', 'od-relay', 'acct-1');
COMMIT;
RESET idempotency.direct_publish;
-- A trigger a DBA put on idem_outbox runs: the SQL body's INSERT fires it.
CREATE TABLE pg_temp.fired (id uuid);
CREATE FUNCTION pg_temp.note() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO pg_temp.fired VALUES (NEW.id); RETURN NEW; END $$;
CREATE TRIGGER od_note AFTER INSERT ON idem_outbox FOR EACH ROW EXECUTE FUNCTION pg_temp.note();
BEGIN;
SELECT idem_claim('od-a', 'k14');
SELECT pg_temp.publish('a trigger on idem_outbox', 'od-relay', 'acct-1');
COMMIT;
DROP TRIGGER od_note ON idem_outbox;
SELECT count(*) AS fired FROM pg_temp.fired;
BEGIN;
SELECT idem_claim('od-a', 'k15');
SELECT pg_temp.publish('trigger dropped', 'od-relay', 'acct-1');
COMMIT;
-- Row-level security applies to a role that is not the owner: the body
-- (its policies) decides.
CREATE ROLE od_app;
GRANT USAGE ON SCHEMA public TO od_app;
GRANT SELECT, INSERT ON idem_outbox TO od_app;
GRANT SELECT ON idem_records, idem_outbox_subscriptions TO od_app;
GRANT INSERT, UPDATE ON idem_records TO od_app;
SELECT idem_outbox_grant('od_app', 'publish', 'od-relay');
SET ROLE od_app;
BEGIN;
SELECT idem_claim('od-a', 'k16');
SELECT idem_publish('od-relay', '{}', aggregate => 'acct-1') = idem_outbox_id('od-relay', 'k16', 'od-a') AS published;
COMMIT;
SELECT pg_temp.try($$SELECT idem_claim('od-a', 'k17') AND idem_publish('od-other', '{}') IS NOT NULL$$) AS other_topic;
RESET ROLE;

--------------------------------------------------------------------------
-- Both paths wrote the same rows: every column as idem_publish_sql's.
--------------------------------------------------------------------------
SELECT s.path, o.topic, o.aggregate, o.scope, o.key, o.seq, o.pulled,
       o.id = idem_outbox_id(o.topic, o.key, o.scope, o.seq) AS id_ok,
       o.type = 'T' AND o.payload = '{"n": 1}' AND o.headers = '{"h": "v"}' AS body_ok,
       o.xact_id = s.xact AND o.created_at = s.started AS xact_ok,
       o.pulled = (o.aggregate IS NULL OR t.pull IS NOT FALSE) AS pulled_ok
FROM pg_temp.seen s JOIN idem_outbox o USING (id)
LEFT JOIN idem_outbox_topics t ON t.topic = o.topic
ORDER BY o.position;
-- Positions keep the order of publication across both paths.
SELECT bool_and(ordered) AS positions_ordered FROM (
    SELECT position > lag(position, 1, 0::bigint) OVER (ORDER BY xact_id, seq) AS ordered FROM idem_outbox) x;
SELECT count(*) AS messages, count(*) FILTER (WHERE pulled) AS pulled FROM idem_outbox;

DROP OWNED BY od_app;
DROP ROLE od_app;
TRUNCATE idem_outbox, idem_outbox_topics, idem_outbox_subscriptions, idem_outbox_runs, idem_outbox_aggregates;
DELETE FROM idem_records WHERE scope LIKE 'od-%';
