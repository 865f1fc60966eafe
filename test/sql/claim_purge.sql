-- Claims here stand alone in autocommit (idempotency.autocommit_claims
-- defaults to error; test/sql/silent_traps.sql tests that).
SET idempotency.autocommit_claims = allow;
-- idem_purge: removes at most batch_size expired records per call, oldest
-- expiry first, and returns how many; live records and records that never
-- expire stay.  (Skipping locked rows is shown by the isolation spec
-- claim_purge_race.)
TRUNCATE idem_records;

-- Five expired records (expiry moved into the past, each a different
-- moment), three live ones, one that never expires.
SELECT count(*) FILTER (WHERE idem_claim('purge', 'expired-' || i)) AS claimed
FROM generate_series(1, 5) AS i;
UPDATE idem_records SET expires_at = now() - (6 - substr(key, 9)::int) * interval '1 minute'
WHERE key LIKE 'expired-%';
SELECT idem_claim('purge', 'live-1') AND idem_claim('purge', 'live-2', '1 hour')
       AND idem_claim('purge', 'live-3', '1 year') AS live_claimed;
SET idempotency.default_ttl = 'infinity';
SELECT idem_claim('purge', 'forever') AS forever_claimed;
RESET idempotency.default_ttl;
SELECT key, expires_at <= now() AS expired FROM idem_records ORDER BY expires_at, key;

-- Batches: the oldest expiries go first.
SELECT idem_purge(2) AS removed;
SELECT key FROM idem_records WHERE key LIKE 'expired-%' ORDER BY key;
SELECT idem_purge(1) AS removed;
SELECT key FROM idem_records WHERE key LIKE 'expired-%' ORDER BY key;
-- The default batch (10000) takes the rest; then there is nothing to do.
SELECT idem_purge() AS removed;
SELECT idem_purge() AS removed;
SELECT key FROM idem_records ORDER BY key;

-- A purge rolls back with its transaction.
UPDATE idem_records SET expires_at = now() - interval '1 hour' WHERE key = 'live-1';
BEGIN;
SELECT idem_purge(100) AS removed;
SELECT count(*) AS rows_in_xact FROM idem_records WHERE key = 'live-1';
ROLLBACK;
SELECT count(*) AS rows_after_rollback FROM idem_records WHERE key = 'live-1';
SELECT idem_purge(100) AS removed;

-- Many expired rows in several batches.
SELECT count(*) FILTER (WHERE idem_claim('bulk', 'k' || i)) AS claimed
FROM generate_series(1, 25) AS i;
UPDATE idem_records SET expires_at = now() - interval '1 day' WHERE scope = 'bulk';
SELECT idem_purge(10) AS first, idem_purge(10) AS second, idem_purge(10) AS third,
       idem_purge(10) AS fourth;
SELECT count(*) AS bulk_left FROM idem_records WHERE scope = 'bulk';

-- A purged key can be claimed afresh.
SELECT idem_claim('bulk', 'k1') AS claimed_after_purge;

-- Live and never-expiring records survived everything.
SELECT scope, key, expires_at > now() AS live FROM idem_records ORDER BY scope, key;

TRUNCATE idem_records;
