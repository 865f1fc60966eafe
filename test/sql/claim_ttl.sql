-- Claims here stand alone in autocommit (idempotency.autocommit_claims
-- defaults to error; test/sql/silent_traps.sql tests that).
SET idempotency.autocommit_claims = allow;
-- TTLs: the default (7 days), idempotency.default_ttl, infinity, expiry
-- counted from the call, and expired records counting as absent before
-- they are purged.  No timestamp is printed: they are compared.
TRUNCATE idem_records;

-- A default set before the library is loaded (a placeholder until then)
-- is checked and used once it is.
SET idempotency.default_ttl = '3 hours';
SELECT idem_claim('ttl', 'set-before-load') AS owned;
SHOW idempotency.default_ttl;
SELECT expires_at = created_at + interval '3 hours' AS three_hours
FROM idem_records WHERE key = 'set-before-load';
RESET idempotency.default_ttl;
DELETE FROM idem_records;

-- No ttl, or a NULL ttl: idempotency.default_ttl, 7 days by default.
SHOW idempotency.default_ttl;
SELECT idem_claim('default-1') AS one_arg, idem_claim('ttl', 'default-2') AS no_ttl,
       idem_claim('ttl', 'default-3', NULL) AS null_ttl,
       idem_claim('ttl', 'default-4', NULL, 'fp') AS null_ttl_fp;
SELECT key, expires_at = created_at + interval '7 days' AS seven_days
FROM idem_records ORDER BY key;

-- An explicit ttl.
SELECT idem_claim('ttl', 'explicit', '90 minutes') AS owned;
SELECT expires_at = created_at + interval '90 minutes' AS ttl_applied
FROM idem_records WHERE key = 'explicit';

-- A changed default applies to later claims without a ttl.
SET idempotency.default_ttl = '2 hours';
SELECT idem_claim('ttl', 'two-hours') AS owned, idem_claim('one-arg-two-hours') AS one_arg;
SELECT key, expires_at = created_at + interval '2 hours' AS two_hours
FROM idem_records WHERE key LIKE '%two-hours' ORDER BY key;

-- infinity keeps keys forever: expires_at is infinity (claim_purge shows
-- that purge never removes such a record).
SET idempotency.default_ttl = 'infinity';
SELECT idem_claim('ttl', 'forever') AS owned, idem_claim('one-arg-forever') AS one_arg;
SELECT key, expires_at, isfinite(expires_at) AS finite
FROM idem_records WHERE key LIKE '%forever' ORDER BY key;
SELECT (idem_lookup('ttl', 'forever')).expires_at;
RESET idempotency.default_ttl;
SHOW idempotency.default_ttl;

-- Expiry is counted from the moment of the call, not from the start of
-- the transaction.
BEGIN;
SELECT pg_sleep(0.2);
SELECT idem_claim('ttl', 'late-in-xact', '1 hour') AS owned;
SELECT created_at > now() AS after_xact_start,
       created_at <= clock_timestamp() AS not_in_future,
       expires_at = created_at + interval '1 hour' AS from_the_call
FROM idem_records WHERE key = 'late-in-xact';
COMMIT;

-- A short ttl runs out: the record still exists until purged, but it
-- counts as absent.
SELECT idem_claim('ttl', 'short', '1 second', 'first request') AS owned;
SELECT idem_claim('ttl', 'short') AS duplicate_while_live;
SELECT (idem_lookup('ttl', 'short')).status AS live_status;
SELECT created_at AS first_created FROM idem_records WHERE key = 'short' \gset
SELECT pg_sleep(1.1);
SELECT count(*) AS rows_still_there FROM idem_records WHERE key = 'short';
SELECT idem_lookup('ttl', 'short') IS NULL AS lookup_null;
-- ... so it can be claimed again, with any fingerprint, and the record is
-- started afresh.
SELECT idem_claim('ttl', 'short', '1 hour', 'second request') AS claimed_again;
SELECT status, created_at > :'first_created' AS new_created_at,
       updated_at = created_at AS fresh, result IS NULL AS no_result,
       fingerprint = sha256('second request'::bytea) AS new_fingerprint,
       expires_at = created_at + interval '1 hour' AS new_expiry
FROM idem_records WHERE key = 'short';
SELECT count(*) AS rows_for_key FROM idem_records WHERE key = 'short';

-- A completed record that expires loses its result when the key is claimed
-- again (moving expires_at into the past stands for waiting).
SELECT idem_claim('ttl', 'completed-then-expired') AS owned;
SELECT idem_complete('ttl', 'completed-then-expired', '{"charge": 42}');
SELECT (idem_lookup('ttl', 'completed-then-expired')).result AS replay;
UPDATE idem_records SET expires_at = now() - interval '1 second'
WHERE key = 'completed-then-expired';
SELECT idem_lookup('ttl', 'completed-then-expired') IS NULL AS lookup_null;
SELECT idem_release('ttl', 'completed-then-expired') AS released_expired;
SELECT idem_claim('ttl', 'completed-then-expired') AS claimed_again;
SELECT status, result IS NULL AS no_result
FROM idem_records WHERE key = 'completed-then-expired';

-- Expired in the same way, then claimed again: takeover, not a duplicate.
UPDATE idem_records SET expires_at = now() - interval '1 second'
WHERE key = 'completed-then-expired';
SELECT idem_claim('ttl', 'completed-then-expired') AS claimed_again,
       idem_claim('ttl', 'completed-then-expired') AS then_duplicate;

TRUNCATE idem_records;
