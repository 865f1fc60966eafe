-- Leases bound to a session (idem_begin's bind_to_session) and the
-- unknown outcome (idem_effect_started).  One session here: a gone owner
-- is a record whose owner has this backend's pid but another start time,
-- which is what a later backend reusing a dead owner's pid looks like.
-- Sessions that really die are test/t/027_lease_owner.pl's.  Tokens,
-- pids and times are compared, never printed.
TRUNCATE idem_records;
SET statement_timeout = '60s';
\set SHOW_CONTEXT never

\getenv abs_srcdir PG_ABS_SRCDIR
\set try_sql :abs_srcdir '/helpers/try.sql'
\i :try_sql

CREATE TEMP TABLE tok (name text PRIMARY KEY, token bigint);

-- 1. Unbound (the default): no owner is recorded; the first attempt.
INSERT INTO tok SELECT 'u', token FROM idem_begin('s', 'unbound');
SELECT outcome, attempt, effect_unknown FROM idem_begin('s', 'unbound');
SELECT owner_pid IS NULL AS no_owner, owner_start IS NULL AS no_start,
       effect_started_at IS NULL AS unmarked, effect_unknown_attempt
  FROM idem_records WHERE key = 'unbound';

-- 2. Bound: the owner is this session (pid and backend start).
SELECT outcome, attempt, effect_unknown
  FROM idem_begin('s', 'bound', bind_to_session => true);
SELECT r.owner_pid = pg_backend_pid() AS my_pid,
       r.owner_start = a.backend_start AS my_start
  FROM idem_records r, pg_stat_activity a
 WHERE r.key = 'bound' AND a.pid = pg_backend_pid();
SELECT pg_temp.try($$SELECT outcome FROM idem_begin('s', 'nullbind', bind_to_session => NULL)$$) AS null_bind;

-- The owner lives (it is this session): the lease's time rules, no takeover.
SELECT outcome FROM idem_begin('s', 'bound', bind_to_session => true);
SELECT (idem_await('s', 'bound', '0 seconds')).status AS await_now;

-- 3. The owner session is gone (its pid is now another backend's: this
--    one, started at another time): idem_begin takes the lease over at
--    once, though minutes of it are left.  Before the mark: a clean retry.
--    With idempotency.log_duplicates, one line says so (not a duplicate).
UPDATE idem_records SET owner_start = owner_start - interval '1 day' WHERE key = 'bound';
SELECT (r).status AS awaited_status, (r).locked_until > now() + interval '4 minutes' AS minutes_left
  FROM (SELECT idem_await('s', 'bound', '4 minutes') AS r) x;
SET idempotency.log_duplicates = on;
SET client_min_messages = log;
INSERT INTO tok SELECT 'b2', token FROM idem_begin('s', 'bound', bind_to_session => true);
RESET client_min_messages;
RESET idempotency.log_duplicates;
SELECT t.token IS NOT NULL AS acquired, r.attempts, r.effect_unknown_attempt,
       r.locked_until > now() + interval '4 minutes' AS fresh_lease
  FROM idem_records r, tok t WHERE r.key = 'bound' AND t.name = 'b2';

-- 4. Mark, then the owner is gone: the next owner is told the outside
--    effect is unknown, with the attempt number.
CREATE TEMP TABLE mark AS
  SELECT idem_effect_started('s', 'bound', (SELECT token FROM tok WHERE name = 'b2')) AS at;
SELECT m.at = r.effect_started_at AS mark_returned
  FROM mark m, idem_records r WHERE r.key = 'bound';
-- marking again keeps the first mark
SELECT idem_effect_started('s', 'bound', (SELECT token FROM tok WHERE name = 'b2'))
       = (SELECT at FROM mark) AS mark_kept;
UPDATE idem_records SET owner_start = owner_start - interval '1 day' WHERE key = 'bound';
SELECT outcome, attempt, effect_unknown
  FROM idem_begin('s', 'bound', bind_to_session => true);
SELECT attempts, effect_unknown_attempt, effect_started_at IS NULL AS unmarked
  FROM idem_records WHERE key = 'bound';
-- the unknown stays known to every later attempt, marked or not
UPDATE idem_records SET owner_start = owner_start - interval '1 day' WHERE key = 'bound';
SELECT outcome, attempt, effect_unknown
  FROM idem_begin('s', 'bound', bind_to_session => true);
SELECT (idem_lookup('s', 'bound')).effect_unknown_attempt AS lookup_unknown;

-- The old owner's token is fenced off.
SELECT pg_temp.try($$SELECT idem_finish('s', 'bound', (SELECT token FROM tok WHERE name = 'b2'))$$) AS old_owner_finish;
SELECT pg_temp.try($$SELECT idem_effect_started('s', 'bound', (SELECT token FROM tok WHERE name = 'b2'))$$) AS old_owner_mark;

-- 5. A bound lease is marked only from its own session.
INSERT INTO tok SELECT 'o', token FROM idem_begin('s', 'other', bind_to_session => true);
UPDATE idem_records SET owner_pid = owner_pid + 1 WHERE key = 'other';
SELECT pg_temp.try($$SELECT idem_effect_started('s', 'other', (SELECT token FROM tok WHERE name = 'o')) IS NOT NULL$$) AS other_session_mark;
SELECT effect_started_at IS NULL AS unmarked FROM idem_records WHERE key = 'other';

-- 6. By time (unbound): before the mark a clean retry, after it unknown.
INSERT INTO tok SELECT 't1', token FROM idem_begin('s', 'timed', '1 millisecond');
SELECT pg_sleep(0.01);
SELECT outcome, attempt, effect_unknown FROM idem_begin('s', 'timed', '1 millisecond');
UPDATE tok SET token = (SELECT token FROM idem_records WHERE key = 'timed') WHERE name = 't1';
SELECT idem_effect_started('s', 'timed', (SELECT token FROM tok WHERE name = 't1')) IS NOT NULL AS marked;
SELECT pg_sleep(0.01);
SELECT outcome, attempt, effect_unknown FROM idem_begin('s', 'timed');

-- 7. Mark, then finish: nothing is unknown; the record keeps the mark.
INSERT INTO tok SELECT 'f', token FROM idem_begin('s', 'finished');
SELECT idem_effect_started('s', 'finished', (SELECT token FROM tok WHERE name = 'f')) IS NOT NULL AS marked;
SELECT idem_finish('s', 'finished', (SELECT token FROM tok WHERE name = 'f'), '{"ok": true}');
SELECT outcome, result, attempt, effect_unknown FROM idem_begin('s', 'finished');
SELECT status, effect_started_at IS NOT NULL AS marked, effect_unknown_attempt
  FROM idem_records WHERE key = 'finished';

-- 8. Mark, then a retryable failure: the owner answered for the attempt,
--    so the retry is clean.
INSERT INTO tok SELECT 'r', token FROM idem_begin('s', 'retried');
SELECT idem_effect_started('s', 'retried', (SELECT token FROM tok WHERE name = 'r')) IS NOT NULL AS marked;
SELECT idem_fail('s', 'retried', (SELECT token FROM tok WHERE name = 'r'), '{"e": 1}', true);
SELECT outcome, attempt, effect_unknown FROM idem_begin('s', 'retried');

-- 9. Errors of idem_effect_started.
SELECT pg_temp.try($$SELECT idem_effect_started('s', 'never', 1)$$) AS never_begun;
SELECT pg_temp.try($$SELECT idem_effect_started('s', 'unbound', NULL)$$) AS null_token;
SELECT pg_temp.try($$SELECT idem_effect_started(NULL, 'unbound', 1)$$) AS null_scope;
SELECT pg_temp.try($$SELECT idem_effect_started('s', 'finished', (SELECT token FROM tok WHERE name = 'f'))$$) AS finished;

-- 10. idem_claim_many takes over a marked lease as idem_claim does: the
--     attempt is recorded as unknown, the mark and the owner go; through
--     the fast path (READ COMMITTED) and the set-based steps (REPEATABLE READ).
INSERT INTO tok SELECT 'm1', token FROM idem_begin('s', 'many1', '1 millisecond');
SELECT idem_effect_started('s', 'many1', (SELECT token FROM tok WHERE name = 'm1')) IS NOT NULL AS marked;
INSERT INTO tok SELECT 'm2', token FROM idem_begin('s', 'many2', '1 millisecond', bind_to_session => true);
SELECT idem_effect_started('s', 'many2', (SELECT token FROM tok WHERE name = 'm2')) IS NOT NULL AS marked;
SELECT pg_sleep(0.01);
BEGIN;
SELECT * FROM idem_claim_many('s', ARRAY['many1']);
COMMIT;
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT * FROM idem_claim_many('s', ARRAY['many3', 'many2']);
COMMIT;
SELECT key, status, attempts, effect_unknown_attempt, effect_started_at IS NULL AS unmarked,
       owner_pid IS NULL AS no_owner
  FROM idem_records WHERE key LIKE 'many%' ORDER BY key;

DROP TABLE tok, mark;
TRUNCATE idem_records;
