-- Safe defaults in the portable edition: idempotency.autocommit_claims (docs/managed.md,
-- behaviour autocommit-claims): unset is error; a claim whose transaction
-- began with the current simple query and which is one statement writing
-- nothing else is refused (warned about under warn), through every entry
-- point that writes a claim; an unknown value is 22023 when a claim reads
-- it.  Creates the table pa_t and records in the scopes pa-* and
-- inbox:pa; removes them.
CREATE TABLE pa_t (x int);
SELECT idem_claim('pa-s', 'refused');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_claim('refused');
\echo :LAST_ERROR_SQLSTATE
-- A literal that looks like a statement changes nothing.
SELECT idem_claim('pa-s', 'update; delete');
\echo :LAST_ERROR_SQLSTATE
/* a comment */ SELECT -- another
  idem_claim('pa-s', 'refused-commented');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_claim_many('pa-s', ARRAY['refused-many']);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_token_consume('pa-s', idem_token_issue('pa-s'));
\echo :LAST_ERROR_SQLSTATE
SELECT idem_inbox('pa', '00000000-0000-0000-0000-000000000001');
\echo :LAST_ERROR_SQLSTATE
SELECT action FROM idem_http_begin('refused-http', 'POST', '/pa', scope => 'pa-s');
\echo :LAST_ERROR_SQLSTATE
PREPARE pa_claim(text) AS SELECT idem_claim('pa-s', $1);
EXECUTE pa_claim('refused-execute');
\echo :LAST_ERROR_SQLSTATE
CREATE FUNCTION pa_wrapper(k text) RETURNS boolean
LANGUAGE plpgsql AS $$ BEGIN RETURN idem_claim('pa-s', k); END $$;
SELECT pa_wrapper('refused-wrapper');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS nothing_written FROM idem_records WHERE key LIKE 'refused%' OR scope = 'inbox:pa';

-- Allowed: a transaction block, several statements in one query, a
-- statement that writes (also through EXECUTE), a DO block, allow.
BEGIN;
SELECT idem_claim('pa-s', 'ok-block');
SELECT pa_wrapper('ok-block-fn');
COMMIT;
SELECT idem_claim('pa-s', 'ok-implicit') AS claimed \; SELECT 1 AS one;
INSERT INTO pa_t SELECT 1 WHERE idem_claim('pa-s', 'ok-insert');
WITH w AS (INSERT INTO pa_t VALUES (2) RETURNING x)
SELECT idem_claim('pa-s', 'ok-with') FROM w;
PREPARE "Pa write"(text) AS INSERT INTO pa_t SELECT 3 WHERE pa_wrapper($1);
EXECUTE "Pa write"('ok-execute');
DO $$ BEGIN PERFORM idem_claim('pa-s', 'ok-do'); END $$;
ALTER FUNCTION pa_wrapper(text) SET idempotency.autocommit_claims = allow;
SELECT pa_wrapper('ok-function-allow');
ALTER FUNCTION pa_wrapper(text) RESET ALL;
SET idempotency.autocommit_claims = warn;
SELECT idem_claim('pa-s', 'ok-warn');
SET idempotency.autocommit_claims = allow;
SELECT idem_claim('pa-s', 'ok-allow');
SET idempotency.autocommit_claims = bogus;
BEGIN;
SELECT idem_claim('pa-s', 'bogus');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
RESET idempotency.autocommit_claims;
SELECT key FROM idem_records WHERE scope = 'pa-s' ORDER BY key;

DEALLOCATE pa_claim;
DEALLOCATE "Pa write";
DROP FUNCTION pa_wrapper(text);
DROP TABLE pa_t;
DELETE FROM idem_records WHERE scope LIKE 'pa-%' OR scope = 'inbox:pa';

-- A ttl under a minute that arrives as a value is refused unless the
-- statement writes it with its unit (as the C edition); written, or as
-- idempotency.default_ttl, it is taken.
PREPARE pa_ttl(interval) AS SELECT idem_claim('pa-ttl', 'k1', ttl => $1);
BEGIN;
EXECUTE pa_ttl('7');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
DEALLOCATE pa_ttl;
BEGIN;
SELECT idem_claim('pa-ttl', 'k1', ttl => '7'::text::interval);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SELECT * FROM idem_claim_many('pa-ttl', ARRAY['k1'], '59'::text::interval);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SELECT outcome FROM idem_begin('pa-ttl', 'k1', ttl => '7'::text::interval);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SELECT idem_token_issue('pa-ttl', '5'::text::interval) IS NOT NULL;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SELECT idem_claim('pa-ttl', 'k5', ttl => '30 seconds') AS written,
       idem_claim('pa-ttl', 'k6', ttl => '60'::text::interval) AS minute,
       idem_claim('pa-ttl', 'k8', ttl => '00:00:20') AS clock;
SET LOCAL idempotency.default_ttl = '30 seconds';
SELECT idem_claim('pa-ttl', 'k7') AS by_setting;
SELECT key, expires_at - created_at AS ttl FROM idem_records
 WHERE scope = 'pa-ttl' ORDER BY key;
ROLLBACK;

-- idem_complete refuses a NULL result (22004), as the C edition.
BEGIN;
SELECT idem_claim('pa-ttl', 'k9');
SELECT idem_complete('pa-ttl', 'k9', NULL);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
