-- Claims here stand alone in autocommit (idempotency.autocommit_claims
-- defaults to error; test/sql/silent_traps.sql tests that).
SET idempotency.autocommit_claims = allow;
-- Two-phase commit: a claim (or completion, or release) inside a prepared
-- transaction behaves like any write: it holds the key until COMMIT
-- PREPARED or ROLLBACK PREPARED, and others wait for it (here: until
-- lock_timeout or statement_timeout, with their normal errors).
TRUNCATE idem_records;
\set SHOW_CONTEXT never

\getenv abs_srcdir PG_ABS_SRCDIR
\set try_sql :abs_srcdir '/helpers/try.sql'
\i :try_sql

-- Prepared, then committed: the key is taken.
BEGIN;
SELECT idem_claim('2pc', 'a', NULL, 'request a') AS owned;
PREPARE TRANSACTION 'regress_claim_2pc_a';
SELECT idem_lookup('2pc', 'a') IS NULL AS not_yet_visible;
SET lock_timeout = '100ms';
SELECT pg_temp.try($$SELECT idem_claim('2pc', 'a')$$) AS while_prepared;
RESET lock_timeout;
SET statement_timeout = '100ms';
SELECT idem_claim('2pc', 'a') AS while_prepared;
\echo :LAST_ERROR_SQLSTATE
RESET statement_timeout;
COMMIT PREPARED 'regress_claim_2pc_a';
SELECT idem_claim('2pc', 'a') AS after_commit;
SELECT pg_temp.try($$SELECT idem_claim('2pc', 'a', NULL, 'request b')$$) AS other_request;
SELECT status FROM idem_records WHERE key = 'a';

-- Prepared, then rolled back: the key is free.
BEGIN;
SELECT idem_claim('2pc', 'b') AS owned;
PREPARE TRANSACTION 'regress_claim_2pc_b';
ROLLBACK PREPARED 'regress_claim_2pc_b';
SELECT idem_claim('2pc', 'b') AS after_rollback;

-- Completion and release in prepared transactions.
BEGIN;
SELECT idem_claim('2pc', 'c') AS owned;
SELECT idem_complete('2pc', 'c', '{"paid": true}');
PREPARE TRANSACTION 'regress_claim_2pc_c';
COMMIT PREPARED 'regress_claim_2pc_c';
SELECT (idem_lookup('2pc', 'c')).result AS replay;
BEGIN;
SELECT idem_release('2pc', 'c') AS released;
PREPARE TRANSACTION 'regress_claim_2pc_d';
SELECT (idem_lookup('2pc', 'c')).status AS still_visible;
COMMIT PREPARED 'regress_claim_2pc_d';
SELECT idem_lookup('2pc', 'c') IS NULL AS released_now,
       idem_claim('2pc', 'c') AS claimed_again;

-- Purge of an expired record in a prepared transaction.
UPDATE idem_records SET expires_at = now() - interval '1 day' WHERE key = 'b';
BEGIN;
SELECT idem_purge() AS purged;
PREPARE TRANSACTION 'regress_claim_2pc_e';
COMMIT PREPARED 'regress_claim_2pc_e';
SELECT key FROM idem_records ORDER BY key;
SELECT count(*) AS prepared_left FROM pg_prepared_xacts WHERE gid LIKE 'regress_claim_2pc%';

DROP FUNCTION pg_temp.try(text);
TRUNCATE idem_records;
