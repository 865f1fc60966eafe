-- Claims here stand alone in autocommit (idempotency.autocommit_claims
-- defaults to error; test/sql/silent_traps.sql tests that).
SET idempotency.autocommit_claims = allow;
-- One-time tokens and throttle windows: idem_token_issue,
-- idem_token_consume, how tokens meet the other functions, and every
-- error path.
TRUNCATE idem_records;

\getenv abs_srcdir PG_ABS_SRCDIR
\set try_sql :abs_srcdir '/helpers/try.sql'
\i :try_sql
SET idem_test.try_detail = on;

--------------------------------------------------------------------------
-- Issue: 32 lowercase hexadecimal digits, never the same twice, stored
-- as an 'issued' record of the scope that expires after ttl.
--------------------------------------------------------------------------
SELECT idem_token_issue('form') ~ '^[0-9a-f]{32}$' AS well_formed;

CREATE TEMP TABLE issued AS
SELECT idem_token_issue('many') AS t FROM generate_series(1, 2000);
SELECT count(*) AS tokens, count(DISTINCT t) AS distinct_tokens FROM issued;
-- Every hexadecimal digit occurs at each of the 32 positions: all 128
-- bits vary (a missing digit somewhere has odds below 1e-50).
SELECT count(DISTINCT (i, substr(t, i, 1))) AS position_digit_pairs
FROM issued, generate_series(1, 32) AS i;
SELECT count(*) AS records FROM idem_records r JOIN issued ON r.key = issued.t
WHERE r.scope = 'many' AND r.status = 'issued';
DROP TABLE issued;

SELECT idem_token_issue('form') AS tok \gset
SELECT status, expires_at - created_at AS ttl, updated_at = created_at AS fresh,
       fingerprint IS NULL AS no_fp, result IS NULL AS no_result,
       locked_until IS NULL AS no_lease, attempts
FROM idem_records WHERE scope = 'form' AND key = :'tok';

-- ttl: default 10 minutes, or as given (an interval of any form).
SELECT idem_token_issue('ttl') IS NOT NULL AS default_ttl,
       idem_token_issue('ttl', '1 day') IS NOT NULL AS one_day,
       idem_token_issue('ttl', ttl => '45 seconds') IS NOT NULL AS named;
SELECT expires_at - created_at AS ttl FROM idem_records
WHERE scope = 'ttl' ORDER BY 1;

--------------------------------------------------------------------------
-- Consume: true exactly once, then false.  (updated_at is moved back
-- first, to see that consumption sets it.)
--------------------------------------------------------------------------
UPDATE idem_records SET updated_at = '2000-01-01'
WHERE scope = 'form' AND key = :'tok';
SELECT idem_token_consume('form', :'tok') AS first;
SELECT idem_token_consume('form', :'tok') AS second;
SELECT idem_token_consume('form', :'tok') AS third;
-- The record stays (consumed) until it expires; its expiry is unchanged.
SELECT status, updated_at > '2000-01-01' AS updated,
       expires_at - created_at AS ttl
FROM idem_records WHERE scope = 'form' AND key = :'tok';

-- Wrong scope: false, and the token is still good in its own scope.
SELECT idem_token_issue('form') AS tok2 \gset
SELECT idem_token_consume('other', :'tok2') AS wrong_scope;
SELECT idem_token_consume('', :'tok2') AS default_scope;
SELECT idem_token_consume('form', :'tok2') AS right_scope;

-- Unknown (well-formed) token: false, and nothing is written.
SELECT idem_token_consume('form', '0123456789abcdef0123456789abcdef') AS unknown;
SELECT count(*) AS unknown_records FROM idem_records
WHERE key = '0123456789abcdef0123456789abcdef';

-- Expired (simulated by moving expires_at back): false, record untouched.
SELECT idem_token_issue('form') AS tok3 \gset
UPDATE idem_records SET expires_at = now() - interval '1 second'
WHERE scope = 'form' AND key = :'tok3';
SELECT idem_token_consume('form', :'tok3') AS expired;
SELECT status FROM idem_records WHERE scope = 'form' AND key = :'tok3';

-- Transactions: a consume rolled back leaves the token unused; an issue
-- rolled back leaves no token.
SELECT idem_token_issue('form') AS tok4 \gset
BEGIN;
SELECT idem_token_consume('form', :'tok4') AS in_rolled_back_tx;
SELECT idem_token_consume('form', :'tok4') AS again_same_tx;
ROLLBACK;
SELECT idem_token_consume('form', :'tok4') AS after_rollback;
BEGIN;
SELECT idem_token_issue('form') AS tok5 \gset
ROLLBACK;
SELECT idem_token_consume('form', :'tok5') AS issue_rolled_back;

-- Issued and consumed in one transaction.
BEGIN;
SELECT idem_token_issue('form') AS tok6 \gset
SELECT idem_token_consume('form', :'tok6') AS same_tx;
COMMIT;

--------------------------------------------------------------------------
-- Tokens among the other records: a token is a live record, so claims of
-- its key are duplicates; only consumption changes it.
--------------------------------------------------------------------------
SELECT idem_token_issue('mix') AS mix \gset
SELECT idem_claim('mix', :'mix') AS claim_of_token_key;
SELECT key = :'mix' AS is_token, claimed
FROM idem_claim_many('mix', ARRAY[:'mix', 'other']);
SELECT (idem_lookup('mix', :'mix')).status AS lookup_status;
SELECT left(pg_temp.try(format('SELECT idem_complete(%L, %L, %L)', 'mix', :'mix', '{}')), 5)
    AS complete_of_token;
SELECT idem_token_consume('mix', :'mix') AS still_consumable;
-- A claimed key that looks like a token is not a token.
SELECT idem_claim('mix', 'ffffffffffffffffffffffffffffffff') AS claim;
SELECT idem_token_consume('mix', 'ffffffffffffffffffffffffffffffff') AS claimed_key;
-- Released: gone.
SELECT idem_token_issue('mix') AS mix2 \gset
SELECT idem_release('mix', :'mix2') AS released;
SELECT idem_token_consume('mix', :'mix2') AS after_release;
-- Expired tokens, used or not, are purged like any expired record.
UPDATE idem_records SET expires_at = now() - interval '1 second'
WHERE scope = 'mix' AND status IN ('issued', 'consumed');
SELECT idem_purge() AS purged;
SELECT key, status FROM idem_records WHERE scope = 'mix' ORDER BY key;

--------------------------------------------------------------------------
-- Throttle window: "one order per user per show per 5 seconds" is a
-- claim with a 5-second ttl; later claims are duplicates until the record
-- expires (simulated here by moving expires_at back), then the next claim
-- opens a new window.
--------------------------------------------------------------------------
SELECT idem_claim('throttle:order', 'user42:show7', ttl => '5 seconds') AS first;
SELECT idem_claim('throttle:order', 'user42:show7', ttl => '5 seconds') AS second;
SELECT idem_claim('throttle:order', 'user42:show8', ttl => '5 seconds') AS other_show;
SELECT expires_at - created_at AS window FROM idem_records
WHERE scope = 'throttle:order' AND key = 'user42:show7';
UPDATE idem_records SET expires_at = now() - interval '1 millisecond'
WHERE scope = 'throttle:order' AND key = 'user42:show7';
SELECT idem_claim('throttle:order', 'user42:show7', ttl => '5 seconds') AS next_window;

TRUNCATE idem_records;

--------------------------------------------------------------------------
-- Errors.
--------------------------------------------------------------------------
SELECT pg_temp.try(s) AS result FROM (VALUES
    ($$SELECT idem_token_issue(NULL)$$),
    ($$SELECT idem_token_issue('f', NULL)$$),
    ($$SELECT idem_token_issue(repeat('s', 129))$$),
    ($$SELECT idem_token_issue('f', '0 seconds')$$),
    ($$SELECT idem_token_issue('f', '-10 minutes')$$),
    ($$SELECT idem_token_issue('f', '300000 years')$$),
    ($$SELECT idem_token_consume(NULL, '0123456789abcdef0123456789abcdef')$$),
    ($$SELECT idem_token_consume('f', NULL)$$),
    ($$SELECT idem_token_consume(repeat('s', 129), '0123456789abcdef0123456789abcdef')$$)
) AS t(s);

-- Malformed tokens: 22023, whatever the scope.
SELECT t AS token, pg_temp.try(format('SELECT idem_token_consume(%L, %L)', 'f', t)) AS result
FROM (VALUES
    (''),
    ('0123456789abcdef0123456789abcde'),
    ('0123456789abcdef0123456789abcdef0'),
    ('0123456789ABCDEF0123456789ABCDEF'),
    ('0123456789abcdef0123456789abcdeg'),
    (' 123456789abcdef0123456789abcdef'),
    ('0123456789abcdef-123456789abcdef'),
    ('0123456789abcdef0123456789abcdé')
) AS m(t);

-- As the client sees them.
SELECT idem_token_consume('f', 'not-a-token');
SELECT idem_token_issue('f', NULL);
-- A malformed token is rejected even when a record has that key.
SELECT idem_claim('f', 'NOT-A-TOKEN') AS claim;
SELECT left(pg_temp.try($$SELECT idem_token_consume('f', 'NOT-A-TOKEN')$$), 5) AS consume;

-- Nothing was issued by the failed calls.
SELECT count(*) AS records FROM idem_records WHERE status = 'issued';

-- Read-only transactions: 25006 for both.
SELECT idem_token_issue('ro') AS ro \gset
BEGIN READ ONLY;
SELECT idem_token_issue('ro');
ROLLBACK;
BEGIN READ ONLY;
SELECT idem_token_consume('ro', :'ro');
ROLLBACK;
SELECT idem_token_consume('ro', :'ro') AS still_unused;

TRUNCATE idem_records;
