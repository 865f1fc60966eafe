-- Claims here stand alone in autocommit (idempotency.autocommit_claims
-- defaults to error; test/sql/silent_traps.sql tests that).
SET idempotency.autocommit_claims = allow;
-- Fingerprints: a digest of the request is stored on first claim (never
-- the request itself); a later claim of the same live key with a
-- different non-NULL fingerprint fails with ID001 and changes nothing.
TRUNCATE idem_records;
SET TimeZone = 'UTC';
SET DateStyle = 'ISO, YMD';
\set SHOW_CONTEXT never

\getenv abs_srcdir PG_ABS_SRCDIR
\set try_sql :abs_srcdir '/helpers/try.sql'
\i :try_sql

-- The stored fingerprint is the SHA-256 digest of the text given.
SELECT idem_claim('pay', 'order-7', NULL, '{"amount": 100, "to": "alice"}') AS owned;
SELECT fingerprint = sha256(convert_to('{"amount": 100, "to": "alice"}', 'UTF8')) AS is_sha256,
       octet_length(fingerprint) AS bytes,
       position(convert_to('alice', 'UTF8') IN fingerprint) = 0 AS request_not_stored
FROM idem_records WHERE key = 'order-7';

-- The same request again: a duplicate, no error.
SELECT idem_claim('pay', 'order-7', NULL, '{"amount": 100, "to": "alice"}') AS same_request;
-- No fingerprint: a duplicate, not checked.
SELECT idem_claim('pay', 'order-7') AS no_fingerprint;
SELECT idem_claim('pay', 'order-7', '1 hour', NULL) AS null_fingerprint;

-- A different request under the same key: ID001, with the scope, the key
-- and the first-claimed time in the detail (made fixed here).
UPDATE idem_records SET created_at = '2024-01-02 03:04:05+00', updated_at = '2024-01-02 03:04:05+00'
WHERE key = 'order-7';
SELECT status, fingerprint, created_at, updated_at, expires_at, xmin
FROM idem_records WHERE key = 'order-7' \gset before_
SELECT idem_claim('pay', 'order-7', NULL, '{"amount": 999, "to": "mallory"}');
SELECT pg_temp.try($$SELECT idem_claim('pay', 'order-7', NULL, '{"amount": 999, "to": "mallory"}')$$) AS result;
-- Fingerprints compare as exact bytes.
SELECT pg_temp.try($$SELECT idem_claim('pay', 'order-7', NULL, '{"amount": 100, "to": "Alice"}')$$) AS result;
SELECT pg_temp.try($$SELECT idem_claim('pay', 'order-7', NULL, '')$$) AS result;
-- Nothing was changed by the failed claims.
SELECT status = :'before_status' AS same_status,
       fingerprint = :'before_fingerprint' AS same_fingerprint,
       created_at = :'before_created_at' AS same_created,
       updated_at = :'before_updated_at' AS same_updated,
       expires_at = :'before_expires_at' AS same_expires,
       xmin::text = :'before_xmin' AS same_row_version
FROM idem_records WHERE key = 'order-7';

-- A mismatch in the transaction that made the claim is an error too (the
-- first-claimed time in the detail is hidden: it is not fixed here); the
-- transaction is aborted, so its claim goes away.
BEGIN;
SELECT idem_claim('pay', 'order-8', NULL, 'request A') AS owned;
SELECT idem_claim('pay', 'order-8', NULL, 'request A') AS same_in_xact;
\set VERBOSITY terse
SELECT idem_claim('pay', 'order-8', NULL, 'request B');
\set VERBOSITY default
ROLLBACK;
SELECT count(*) AS rows_for_order_8 FROM idem_records WHERE key = 'order-8';

-- A completed record is checked the same way, and keeps its result.
SELECT idem_claim('pay', 'order-9', NULL, 'request A') AS owned;
SELECT idem_complete('pay', 'order-9', '{"receipt": 9}');
SELECT pg_temp.try($$SELECT idem_claim('pay', 'order-9', NULL, 'request B')$$) AS result;
SELECT idem_claim('pay', 'order-9', NULL, 'request A') AS same_request;
SELECT status, result FROM idem_records WHERE key = 'order-9';

-- The empty string is a fingerprint (unlike NULL).
SELECT idem_claim('pay', 'order-10', NULL, '') AS owned;
SELECT fingerprint = sha256(''::bytea) AS empty_digest FROM idem_records WHERE key = 'order-10';
SELECT pg_temp.try($$SELECT idem_claim('pay', 'order-10', NULL, 'x')$$) AS result;

-- A key first claimed without a fingerprint has nothing to compare: later
-- claims with one are plain duplicates, and nothing is stored.
SELECT idem_claim('pay', 'order-11') AS owned;
SELECT idem_claim('pay', 'order-11', NULL, 'request A') AS duplicate;
SELECT fingerprint IS NULL AS still_no_fingerprint FROM idem_records WHERE key = 'order-11';

-- Scopes are separate: the same key with another request elsewhere is fine.
SELECT idem_claim('refund', 'order-7', NULL, 'another request') AS other_scope;

DROP FUNCTION pg_temp.try(text);
TRUNCATE idem_records;
