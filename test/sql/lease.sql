-- Claims here stand alone in autocommit (idempotency.autocommit_claims
-- defaults to error; test/sql/silent_traps.sql tests that).
SET idempotency.autocommit_claims = allow;
-- Two-phase records: idem_begin, idem_heartbeat, idem_finish, idem_fail,
-- idem_await.  Tokens are compared, never printed (they come from a
-- sequence shared with other tests).
TRUNCATE idem_records;
CREATE TEMP TABLE tok (name text PRIMARY KEY, token bigint);

-- acquire: outcome, a token, no result
INSERT INTO tok SELECT 'a1', token FROM idem_begin('pay', 'order-1');
SELECT outcome, token IS NULL AS no_token, result FROM idem_begin('pay', 'order-1');
SELECT status, attempts, locked_until > now() AS leased, lease
  FROM idem_records WHERE key = 'order-1';
-- a live in-progress record is a duplicate to idem_claim
SELECT idem_claim('pay', 'order-1');
-- idem_complete and idem_release refuse a leased record
SELECT idem_complete('pay', 'order-1', '{}');
SELECT idem_release('pay', 'order-1');

-- heartbeat extends the lease; NULL lease reuses the stored length
SELECT idem_heartbeat('pay', 'order-1', (SELECT token FROM tok WHERE name = 'a1'), '1 hour')
       > now() + interval '59 minutes' AS extended;
SELECT lease FROM idem_records WHERE key = 'order-1';
SELECT idem_heartbeat('pay', 'order-1', (SELECT token FROM tok WHERE name = 'a1'))
       > now() + interval '59 minutes' AS extended_again;

-- a wrong token changes nothing (terse: the detail names token values)
\set VERBOSITY terse
SELECT idem_finish('pay', 'order-1', (SELECT token FROM tok WHERE name = 'a1') + 1000, '{"x":1}');
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default
SELECT status, result FROM idem_records WHERE key = 'order-1';

-- finish stores the result; begin then replays it
SELECT idem_finish('pay', 'order-1', (SELECT token FROM tok WHERE name = 'a1'), '{"charge":"ch_1"}');
SELECT outcome, token, result FROM idem_begin('pay', 'order-1');
SELECT (idem_lookup('pay', 'order-1')).status, (idem_lookup('pay', 'order-1')).locked_until;
-- finishing twice is a lost lease, not a second completion
SELECT idem_finish('pay', 'order-1', (SELECT token FROM tok WHERE name = 'a1'), '{"charge":"ch_2"}');
SELECT result FROM idem_records WHERE key = 'order-1';

-- a record completed by idem_claim/idem_complete is 'completed' to idem_begin
SELECT idem_claim('pay', 'order-2');
SELECT idem_complete('pay', 'order-2', '{"via":"claim"}');
SELECT outcome, result FROM idem_begin('pay', 'order-2');
-- claimed but never completed counts as done too
SELECT idem_claim('pay', 'order-3');
SELECT outcome, result FROM idem_begin('pay', 'order-3');

-- lease runs out: the next begin takes over with a greater token and the
-- stale worker is fenced off
INSERT INTO tok SELECT 'b1', token FROM idem_begin('pay', 'order-4', lease => '10 milliseconds');
SELECT pg_sleep(0.05);
INSERT INTO tok SELECT 'b2', token FROM idem_begin('pay', 'order-4') WHERE outcome = 'acquired';
SELECT (SELECT token FROM tok WHERE name = 'b2') > (SELECT token FROM tok WHERE name = 'b1') AS greater;
SELECT attempts FROM idem_records WHERE key = 'order-4';
\set VERBOSITY terse
SELECT idem_heartbeat('pay', 'order-4', (SELECT token FROM tok WHERE name = 'b1'));
\echo :LAST_ERROR_SQLSTATE
SELECT idem_finish('pay', 'order-4', (SELECT token FROM tok WHERE name = 'b1'), '{"stale":true}');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_fail('pay', 'order-4', (SELECT token FROM tok WHERE name = 'b1'));
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default
SELECT idem_finish('pay', 'order-4', (SELECT token FROM tok WHERE name = 'b2'), '{"fresh":true}');
SELECT status, result FROM idem_records WHERE key = 'order-4';

-- a lease that ran out is taken over by idem_claim too, fencing the worker
INSERT INTO tok SELECT 'c1', token FROM idem_begin('pay', 'order-5', lease => '10 milliseconds');
SELECT pg_sleep(0.05);
SELECT idem_claim('pay', 'order-5');
SELECT status, token FROM idem_records WHERE key = 'order-5';
SELECT idem_finish('pay', 'order-5', (SELECT token FROM tok WHERE name = 'c1'));

-- retryable failure frees the key; the next begin acquires and counts
INSERT INTO tok SELECT 'd1', token FROM idem_begin('pay', 'order-6');
SELECT idem_fail('pay', 'order-6', (SELECT token FROM tok WHERE name = 'd1'), '{"code":"timeout"}');
SELECT status, result, locked_until FROM idem_records WHERE key = 'order-6';
SELECT outcome FROM idem_begin('pay', 'order-6');
SELECT status, attempts FROM idem_records WHERE key = 'order-6';
-- idem_claim may take a retryable record too
INSERT INTO tok SELECT 'd3', token FROM idem_records WHERE key = 'order-6';
SELECT idem_fail('pay', 'order-6', (SELECT token FROM tok WHERE name = 'd3'));
SELECT idem_claim('pay', 'order-6');
SELECT status FROM idem_records WHERE key = 'order-6';

-- permanent failure keeps the error; retries get 'failed', not a second run
INSERT INTO tok SELECT 'e1', token FROM idem_begin('pay', 'order-7');
SELECT idem_fail('pay', 'order-7', (SELECT token FROM tok WHERE name = 'e1'), '{"code":"card_declined"}', false);
SELECT outcome, token, result FROM idem_begin('pay', 'order-7');
SELECT idem_claim('pay', 'order-7');

-- idempotency.max_attempts turns the last retryable failure into 'failed'
SET idempotency.max_attempts = 2;
INSERT INTO tok SELECT 'f1', token FROM idem_begin('pay', 'order-8');
SELECT idem_fail('pay', 'order-8', (SELECT token FROM tok WHERE name = 'f1'), '{"try":1}');
INSERT INTO tok SELECT 'f2', token FROM idem_begin('pay', 'order-8');
SELECT idem_fail('pay', 'order-8', (SELECT token FROM tok WHERE name = 'f2'), '{"try":2}');
SELECT status, attempts, result FROM idem_records WHERE key = 'order-8';
SELECT outcome, result FROM idem_begin('pay', 'order-8');
RESET idempotency.max_attempts;

-- fingerprints: same request replays, a different one is refused
SELECT outcome FROM idem_begin('pay', 'order-9', fingerprint => '{"amount":100}');
SELECT outcome FROM idem_begin('pay', 'order-9', fingerprint => '{"amount":100}');
\set VERBOSITY sqlstate
SELECT outcome FROM idem_begin('pay', 'order-9', fingerprint => '{"amount":999}');
-- same for idem_claim on a leased key
SELECT idem_claim('pay', 'order-9', fingerprint => '{"amount":999}');
\set VERBOSITY default

-- an expired record is absent: begin starts afresh
INSERT INTO tok SELECT 'g1', token FROM idem_begin('pay', 'order-10', ttl => '10 milliseconds');
SELECT pg_sleep(0.05);
SELECT outcome FROM idem_begin('pay', 'order-10');
SELECT attempts FROM idem_records WHERE key = 'order-10';

-- idem_await: returns at once when not in progress; NULL when absent;
-- after the timeout with the record as it stands
SELECT status, result FROM idem_await('pay', 'order-1');
SELECT idem_await('pay', 'no-such-key') IS NULL AS absent;
SELECT status FROM idem_await('pay', 'order-10', '20 milliseconds');
SELECT status FROM idem_await('pay', 'order-10', '0 seconds');
-- and when the lease runs out
SELECT outcome FROM idem_begin('pay', 'order-11', lease => '30 milliseconds');
SELECT status, locked_until <= clock_timestamp() AS lease_over FROM idem_await('pay', 'order-11', '10 seconds');

-- errors
\set VERBOSITY terse
SELECT * FROM idem_begin(NULL, 'k');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_begin('pay', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_begin('pay', '');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_begin('pay', 'k', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_begin('pay', 'k', '0 seconds');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_begin('pay', 'k', '-1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_begin('pay', 'k', '1 minute', '-1 day');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_heartbeat('pay', 'order-10', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_heartbeat('pay', 'order-10', 1, '-5 minutes');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_finish('pay', NULL, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_fail('pay', 'order-10', 1, NULL, NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_heartbeat('pay', 'never-begun', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_await('pay', 'k', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_await('pay', 'k', '-1 second');
\echo :LAST_ERROR_SQLSTATE
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT idem_await('pay', 'order-1');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN READ ONLY;
SELECT * FROM idem_begin('pay', 'k');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN READ ONLY;
SELECT idem_finish('pay', 'k', 1);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN READ ONLY;
SELECT status FROM idem_await('pay', 'order-1');
ROLLBACK;
\set VERBOSITY default

DROP TABLE tok;
TRUNCATE idem_records;
