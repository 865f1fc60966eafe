-- Claims here stand alone in autocommit (idempotency.autocommit_claims
-- defaults to error; test/sql/silent_traps.sql tests that).
SET idempotency.autocommit_claims = allow;
-- idempotency.log_duplicates: off by default; when on, each duplicate claim
-- logs one LOG line with the scope, the key, the first-claimed time and the
-- status.  client_min_messages = log shows LOG lines here; first-claimed
-- times are made fixed.
TRUNCATE idem_records;
SET TimeZone = 'UTC';
SET DateStyle = 'ISO, YMD';
SET client_min_messages = log;

SELECT idem_claim('log', 'k1') AS owned;
SELECT idem_claim('log', 'k2') AS owned;
SELECT idem_complete('log', 'k2', '{"done": true}');
UPDATE idem_records SET created_at = '2024-05-06 07:08:09+00' WHERE key = 'k1';
UPDATE idem_records SET created_at = '2024-05-06 10:11:12.5+00' WHERE key = 'k2';

-- Off by default: duplicates log nothing.
SHOW idempotency.log_duplicates;
SELECT idem_claim('log', 'k1') AS duplicate_not_logged;

SET idempotency.log_duplicates = on;
-- One line per duplicate, with the record's status.
SELECT idem_claim('log', 'k1') AS duplicate;
SELECT idem_claim('log', 'k2', NULL, 'fp') AS duplicate_completed;
-- The default scope is shown as "".
SELECT idem_claim('k3') AS owned;
UPDATE idem_records SET created_at = '2024-05-06 13:14:15+00' WHERE key = 'k3';
SELECT idem_claim('k3') AS duplicate;
-- Each duplicate of a statement logs its own line.
SELECT count(*) FILTER (WHERE idem_claim('log', 'k1')) AS owned FROM generate_series(1, 3);
-- Claims that own the key log nothing, nor do expired records taken over.
SELECT idem_claim('log', 'k4') AS owned;
UPDATE idem_records SET expires_at = now() - interval '1 second' WHERE key = 'k1';
SELECT idem_claim('log', 'k1') AS taken_over;
-- A duplicate claim in the claiming transaction is logged too.
BEGIN;
SELECT idem_claim('log', 'k5') AS owned;
UPDATE idem_records SET created_at = '2024-05-06 16:17:18+00' WHERE key = 'k5';
SELECT idem_claim('log', 'k5') AS duplicate_in_xact;
COMMIT;
RESET idempotency.log_duplicates;
SELECT idem_claim('log', 'k5') AS duplicate_not_logged_again;

RESET client_min_messages;
TRUNCATE idem_records;
