-- Claims here stand alone in autocommit (idempotency.autocommit_claims
-- defaults to error; test/sql/silent_traps.sql tests that).
SET idempotency.autocommit_claims = allow;
-- Bad input to the core functions: every error path gets a clear
-- message with the standard SQLSTATE, and leaves nothing behind.
TRUNCATE idem_records;

\getenv abs_srcdir PG_ABS_SRCDIR
\set try_sql :abs_srcdir '/helpers/try.sql'
\i :try_sql

-- NULL scope or key: 22004, for every function.
SELECT pg_temp.try(s) AS result FROM (VALUES
    ($$SELECT idem_claim(NULL)$$),
    ($$SELECT idem_claim(NULL, 'k')$$),
    ($$SELECT idem_claim('s', NULL)$$),
    ($$SELECT idem_claim(NULL, NULL, '1 hour', 'fp')$$),
    ($$SELECT idem_complete(NULL, 'k', '{}')$$),
    ($$SELECT idem_complete('s', NULL, '{}')$$),
    ($$SELECT idem_lookup(NULL, 'k')$$),
    ($$SELECT idem_lookup('s', NULL)$$),
    ($$SELECT idem_release(NULL, 'k')$$),
    ($$SELECT idem_release('s', NULL)$$)
) AS t(s);

-- Empty key: 22023 (the empty scope is the default scope, and valid).
SELECT pg_temp.try(s) AS result FROM (VALUES
    ($$SELECT idem_claim('')$$),
    ($$SELECT idem_claim('s', '')$$),
    ($$SELECT idem_complete('s', '', '{}')$$),
    ($$SELECT idem_lookup('s', '')$$),
    ($$SELECT idem_release('s', '')$$)
) AS t(s);

-- Lengths are counted in bytes: a key of 1024 bytes and a scope of 128
-- bytes are accepted together (no btree size error) ...
SELECT idem_claim(repeat('s', 128), repeat('k', 1024)) AS ascii_limits,
       idem_claim(repeat('é', 64), repeat('é', 512)) AS multibyte_limits;
SELECT octet_length(scope) AS scope_bytes, octet_length(key) AS key_bytes
FROM idem_records ORDER BY scope;
-- ... one more byte is 22001, even when the character count is far below
-- the limit (é is two bytes in UTF8).
SELECT pg_temp.try(s) AS result FROM (VALUES
    ($$SELECT idem_claim(repeat('k', 1025))$$),
    ($$SELECT idem_claim('s', repeat('k', 1025))$$),
    ($$SELECT idem_claim('s', repeat('é', 512) || 'k')$$),
    ($$SELECT idem_claim(repeat('s', 129), 'k')$$),
    ($$SELECT idem_claim(repeat('é', 64) || 's', 'k')$$),
    ($$SELECT idem_complete(repeat('s', 129), 'k', '{}')$$),
    ($$SELECT idem_complete('s', repeat('k', 1025), '{}')$$),
    ($$SELECT idem_lookup(repeat('s', 129), 'k')$$),
    ($$SELECT idem_lookup('s', repeat('k', 1025))$$),
    ($$SELECT idem_release(repeat('s', 129), 'k')$$),
    ($$SELECT idem_release('s', repeat('k', 1025))$$),
    ($$SELECT idem_claim('s', repeat('k', 100000))$$)
) AS t(s);
-- The full error, with its detail and hint.
\set SHOW_CONTEXT never
SELECT idem_claim('s', repeat('é', 513));
SELECT idem_claim(repeat('é', 65), 'k');

-- Lengths are counted before compression: a long key stored compressed in
-- a table (far below 1024 bytes on disk) is still too long.
CREATE TABLE claim_errors_keys (k text);
INSERT INTO claim_errors_keys VALUES (repeat('0123456789', 500));
SELECT pg_column_size(k) < 1024 AS stored_compressed, octet_length(k) AS bytes
FROM claim_errors_keys;
SELECT pg_temp.try($$SELECT idem_claim('s', k) FROM claim_errors_keys$$) AS result;
SELECT pg_temp.try($$SELECT idem_claim(k, 'k') FROM claim_errors_keys$$) AS result;
DROP TABLE claim_errors_keys;

-- ttl must be positive: 22023.
SELECT pg_temp.try(s) AS result FROM (VALUES
    ($$SELECT idem_claim('s', 'k', '0')$$),
    ($$SELECT idem_claim('s', 'k', '-1 second')$$),
    ($$SELECT idem_claim('s', 'k', '-1 day')$$),
    ($$SELECT idem_claim('s', 'k', '1 month -40 days')$$),
    ($$SELECT idem_claim('s', 'k', '1000000 years')$$),
    ($$SELECT idem_claim('s', 'k', '-1000000 years')$$)
) AS t(s);
SELECT idem_claim('s', 'k', '-5 minutes');
SELECT idem_claim('s', 'k', '1000000 years');
-- A positive interval with a negative part is fine.
SELECT idem_claim('s', 'mixed', '1 day -1 hour') AS owned;
SELECT expires_at = created_at + interval '1 day -1 hour' AS ttl_applied
FROM idem_records WHERE scope = 's' AND key = 'mixed';

-- batch_size: 22004 when NULL, 22023 when below 1.
SELECT pg_temp.try(s) AS result FROM (VALUES
    ($$SELECT idem_purge(NULL)$$),
    ($$SELECT idem_purge(0)$$),
    ($$SELECT idem_purge(-1)$$),
    ($$SELECT idem_purge(1)$$)
) AS t(s);
SELECT idem_purge(0);

-- Nothing above wrote a record, except the three successful claims.
SELECT left(scope, 10) AS scope_prefix, left(key, 10) AS key_prefix, status
FROM idem_records ORDER BY scope, key;

-- GUC values are checked: idempotency.default_ttl must be a positive
-- interval or infinity (22023 otherwise), and the bad value is not taken.
SET idempotency.default_ttl = '0';
SET idempotency.default_ttl = '-1 day';
SET idempotency.default_ttl = 'forever';
SET idempotency.default_ttl = '1 month -40 days';
SHOW idempotency.default_ttl;
-- As for the ttl argument, a positive interval with a negative part is fine.
SET idempotency.default_ttl = '1 day -1 hour';
SHOW idempotency.default_ttl;
SELECT idem_claim('s', 'guc-mixed') AS owned;
SELECT expires_at = created_at + interval '1 day -1 hour' AS default_ttl_applied
FROM idem_records WHERE scope = 's' AND key = 'guc-mixed';
SELECT pg_temp.try($$SELECT set_config('idempotency.default_ttl', '0', false)$$) AS result;
SET idempotency.default_ttl = 'INFINITY';
SHOW idempotency.default_ttl;
RESET idempotency.default_ttl;
-- Misspelt settings in the reserved prefix are rejected.
SET idempotency.default_tll = '1 day';

-- idempotency.log_duplicates is superuser-only: 42501 for others.
CREATE ROLE regress_claim_errors_user;
SET ROLE regress_claim_errors_user;
SHOW idempotency.log_duplicates;
SELECT pg_temp.try($$SELECT set_config('idempotency.log_duplicates', 'on', false)$$) AS result;
RESET ROLE;
DROP ROLE regress_claim_errors_user;

DROP FUNCTION pg_temp.try(text);
TRUNCATE idem_records;
