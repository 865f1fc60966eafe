-- Claims here stand alone in autocommit (idempotency.autocommit_claims
-- defaults to error; test/sql/silent_traps.sql tests that).
SET idempotency.autocommit_claims = allow;
-- Read-only transactions (and so a hot standby, see test/t/003): every
-- writing function fails with 25006 and a message naming it, even when it
-- would have written nothing; idem_lookup works.
TRUNCATE idem_records;
\set SHOW_CONTEXT never

\getenv abs_srcdir PG_ABS_SRCDIR
\set try_sql :abs_srcdir '/helpers/try.sql'
\i :try_sql

SELECT idem_claim('ro', 'done') AS owned;
SELECT idem_complete('ro', 'done', '{"replay": true}');
SELECT idem_claim('ro', 'expired') AS owned;
UPDATE idem_records SET expires_at = now() - interval '1 day' WHERE key = 'expired';

BEGIN READ ONLY;
SELECT pg_temp.try(s) AS result FROM (VALUES
    ($$SELECT idem_claim('ro', 'new')$$),
    ($$SELECT idem_claim('new')$$),
    ($$SELECT idem_claim('ro', 'done')$$),
    ($$SELECT idem_claim('ro', 'new', '1 hour', 'fp')$$),
    ($$SELECT idem_complete('ro', 'done', '1')$$),
    ($$SELECT idem_release('ro', 'done')$$),
    ($$SELECT idem_release('ro', 'absent')$$),
    ($$SELECT idem_purge()$$),
    ($$SELECT idem_purge(1)$$),
    ($$SELECT (idem_lookup('ro', 'done')).result$$),
    ($$SELECT idem_lookup('ro', 'expired') IS NULL$$),
    ($$SELECT idem_lookup('ro', 'absent') IS NULL$$)
) AS t(s);
SELECT idem_claim('ro', 'new');
ROLLBACK;

-- The same with default_transaction_read_only, and with SET TRANSACTION.
SET default_transaction_read_only = on;
SELECT idem_purge();
SELECT (idem_lookup('ro', 'done')).status;
RESET default_transaction_read_only;
BEGIN;
SET TRANSACTION READ ONLY;
SELECT idem_release('ro', 'done');
ROLLBACK;

-- Nothing was changed.
SELECT key, status, expires_at > now() AS live FROM idem_records ORDER BY key;

DROP FUNCTION pg_temp.try(text);
TRUNCATE idem_records;
