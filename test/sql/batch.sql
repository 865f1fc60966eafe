-- Claims here stand alone in autocommit (idempotency.autocommit_claims
-- defaults to error; test/sql/silent_traps.sql tests that).
SET idempotency.autocommit_claims = allow;
-- idem_claim_many (batch claims): results in array order,
-- repeated keys, takeover of expired/retryable/abandoned records, the
-- canonical (bytewise) claim order, TTLs, set-returning contexts, and
-- every error path.
TRUNCATE idem_records;

\getenv abs_srcdir PG_ABS_SRCDIR
\set try_sql :abs_srcdir '/helpers/try.sql'
\i :try_sql
SET idem_test.try_detail = on;

--------------------------------------------------------------------------
-- Fresh keys: one row per element in array order; a repeated key is
-- true only at its first occurrence.
--------------------------------------------------------------------------
SELECT * FROM idem_claim_many('b', ARRAY['k3', 'k1', 'k2', 'k1', 'k3', 'k3']);

-- One record per distinct key, claimed, no fingerprint.
SELECT key, status, fingerprint IS NULL AS no_fp, result IS NULL AS no_result,
       attempts, created_at = updated_at AS same_times
FROM idem_records WHERE scope = 'b' ORDER BY key;

-- A second batch: known keys are duplicates, new ones are claimed.
SELECT * FROM idem_claim_many('b', ARRAY['k2', 'k4', 'k1', 'k4']);

-- Scopes are independent.
SELECT * FROM idem_claim_many('other', ARRAY['k1', 'k2']);

-- idem_claim and idem_claim_many see each other's records.
SELECT idem_claim('b', 'k4') AS claim_of_batch_key;
SELECT idem_claim('b', 'single') AS single;
SELECT * FROM idem_claim_many('b', ARRAY['single', 'k5']);

-- Inside one transaction the batch sees the transaction's own claims,
-- and a rollback undoes the whole batch.
BEGIN;
SELECT idem_claim('b', 'tx1') AS tx1;
SELECT * FROM idem_claim_many('b', ARRAY['tx2', 'tx1', 'tx2']);
ROLLBACK;
SELECT count(*) AS after_rollback FROM idem_records WHERE key LIKE 'tx%';
SELECT * FROM idem_claim_many('b', ARRAY['tx1', 'tx2']);

-- The empty array claims nothing and returns no rows.
SELECT * FROM idem_claim_many('b', '{}');
SELECT count(*) AS rows FROM idem_claim_many('b', ARRAY[]::text[]);

-- The empty scope is the default scope, as in idem_claim(key).
SELECT * FROM idem_claim_many('', ARRAY['dflt']);
SELECT idem_claim('dflt') AS default_scope_claim;

TRUNCATE idem_records;

--------------------------------------------------------------------------
-- Canonical order: the distinct keys are inserted in bytewise order (as
-- COLLATE "C"), whatever the array order.  After TRUNCATE the heap is
-- empty, so the physical order of the rows is the order of the inserts.
--------------------------------------------------------------------------
SELECT * FROM idem_claim_many('o', ARRAY['b', 'é', 'ab', 'B', 'a b', 'a', 'b', 'aa']);
SELECT key FROM idem_records ORDER BY ctid;
SELECT array_agg(key ORDER BY ctid) = array_agg(key ORDER BY key COLLATE "C")
       AS inserted_in_bytewise_order
FROM idem_records;

-- A larger batch in reverse order: still one insert pass in sorted order.
TRUNCATE idem_records;
SELECT count(*) FILTER (WHERE claimed) AS claimed, count(*) AS rows
FROM idem_claim_many('o', ARRAY(SELECT 'k' || lpad(i::text, 4, '0')
                                FROM generate_series(1000, 1, -1) AS i));
SELECT array_agg(key ORDER BY ctid) = array_agg(key ORDER BY key COLLATE "C")
       AS inserted_in_bytewise_order,
       min(key) AS first_key, max(key) AS last_key
FROM idem_records;
-- Half known, half new, in array order.
SELECT count(*) FILTER (WHERE claimed) AS claimed, count(*) AS rows,
       bool_and(claimed = (key > 'k1000')) AS new_ones_claimed
FROM idem_claim_many('o', ARRAY(SELECT 'k' || lpad(i::text, 4, '0')
                                FROM generate_series(501, 1500) AS i));

TRUNCATE idem_records;

--------------------------------------------------------------------------
-- A batch mixing new keys, a live key and an expired record: every key
-- gets idem_claim's answer, and no subtransaction is used (every row
-- carries the transaction's own id).
--------------------------------------------------------------------------
SELECT idem_claim('f', 'm10') AS m10;
INSERT INTO idem_records (scope, key, status, created_at, updated_at, expires_at)
VALUES ('f', 'm15', 'completed', now() - interval '2 days',
        now() - interval '2 days', now() - interval '1 day');
BEGIN;
SELECT string_agg(key || '=' || claimed, ' ' ORDER BY ord) AS results
FROM idem_claim_many('f', ARRAY(SELECT 'm' || lpad(i::text, 2, '0')
                                FROM generate_series(20, 1, -1) AS i))
     WITH ORDINALITY AS c(key, claimed, ord);
-- One record per key, the expired one taken over, all written with the
-- transaction's own id.
SELECT count(*) AS records, count(*) FILTER (WHERE status = 'claimed') AS claimed,
       count(DISTINCT key) AS keys,
       count(*) FILTER (WHERE xmin::text::bigint = txid_current() % 4294967296
                        AND key <> 'm10') AS by_general_path
FROM idem_records WHERE scope = 'f';
COMMIT;

-- A redelivered batch writes nothing and does not even get a transaction
-- id.
BEGIN;
SELECT count(*) FILTER (WHERE claimed) AS claimed, count(*) AS keys
FROM idem_claim_many('f', ARRAY(SELECT 'm' || lpad(i::text, 2, '0')
                                FROM generate_series(1, 20) AS i));
SELECT pg_current_xact_id_if_assigned() IS NULL AS wrote_nothing;
COMMIT;

-- Many batches in one transaction use no subtransaction: every row
-- carries the transaction's own id.
BEGIN;
SELECT count(*) FILTER (WHERE claimed) AS claimed
FROM generate_series(1, 33) AS b,
     LATERAL idem_claim_many('x', ARRAY(SELECT b || '-' || lpad(i::text, 2, '0')
                                        FROM generate_series(1, 16) AS i)) AS c;
SELECT count(DISTINCT xmin::text) AS xids,
       count(*) FILTER (WHERE xmin::text::bigint = txid_current() % 4294967296) AS top_level_rows,
       min(key) FILTER (WHERE xmin::text::bigint = txid_current() % 4294967296) AS first_top_level_key
FROM idem_records WHERE scope = 'x';
COMMIT;
-- And so does the next transaction.
BEGIN;
SELECT count(*) FILTER (WHERE claimed) AS claimed
FROM idem_claim_many('x', ARRAY(SELECT 'next-' || lpad(i::text, 2, '0')
                                FROM generate_series(1, 16) AS i));
SELECT count(*) FILTER (WHERE xmin::text::bigint = txid_current() % 4294967296) AS top_level_rows
FROM idem_records WHERE scope = 'x' AND key LIKE 'next-%';
COMMIT;

-- A batch inside a savepoint or a PL/pgSQL exception block goes when they
-- are rolled back.
BEGIN;
SAVEPOINT sp;
SELECT count(*) FILTER (WHERE claimed) AS claimed
FROM idem_claim_many('sp', ARRAY(SELECT 's' || lpad(i::text, 2, '0')
                                 FROM generate_series(1, 20) AS i));
ROLLBACK TO SAVEPOINT sp;
SELECT count(*) AS after_rollback_to_savepoint FROM idem_records WHERE scope = 'sp';
COMMIT;
DO $$
BEGIN
    PERFORM idem_claim_many('sp', ARRAY(SELECT 's' || lpad(i::text, 2, '0')
                                        FROM generate_series(1, 20) AS i));
    RAISE EXCEPTION 'undo' USING ERRCODE = 'P0001';
EXCEPTION WHEN raise_exception THEN
    RAISE NOTICE 'batch of % keys rolled back', 20;
END
$$;
SELECT count(*) AS after_exception_block FROM idem_records WHERE scope = 'sp';
SELECT count(*) FILTER (WHERE claimed) AS claimed
FROM idem_claim_many('sp', ARRAY(SELECT 's' || lpad(i::text, 2, '0')
                                 FROM generate_series(1, 20) AS i));

TRUNCATE idem_records;

--------------------------------------------------------------------------
-- Existing records: what idem_claim may take over, idem_claim_many takes
-- over too (expired, retryable, in progress with a lease that ran out);
-- every other live record is a duplicate and is left untouched.
--------------------------------------------------------------------------
INSERT INTO idem_records (scope, key, status, fingerprint, result,
                          created_at, updated_at, expires_at,
                          locked_until, token, attempts)
VALUES
 ('t', 'expired',      'completed',   '\x01', '{"v": 1}', now() - interval '2 days',
  now() - interval '2 days', now() - interval '1 day', NULL, NULL, 3),
 ('t', 'retryable',    'retryable',   '\x02', NULL, now() - interval '1 hour',
  now() - interval '1 hour', now() + interval '1 day', NULL, 7, 2),
 ('t', 'lease_over',   'in_progress', '\x03', NULL, now() - interval '1 hour',
  now() - interval '1 hour', now() + interval '1 day', now() - interval '1 minute', 8, 1),
 ('t', 'lease_live',   'in_progress', '\x04', NULL, now() - interval '1 hour',
  now() - interval '1 hour', now() + interval '1 day', now() + interval '1 hour', 9, 1),
 ('t', 'lease_null',   'in_progress', NULL, NULL, now() - interval '1 hour',
  now() - interval '1 hour', now() + interval '1 day', NULL, NULL, 1),
 ('t', 'completed',    'completed',   NULL, '{"v": 2}', now() - interval '1 hour',
  now() - interval '1 hour', now() + interval '1 day', NULL, NULL, 0),
 ('t', 'failed',       'failed',      NULL, NULL, now() - interval '1 hour',
  now() - interval '1 hour', now() + interval '1 day', NULL, NULL, 4),
 ('t', 'claimed',      'claimed',     NULL, NULL, now() - interval '1 hour',
  now() - interval '1 hour', now() + interval '1 day', NULL, NULL, 0),
 ('t', 'issued_token', 'issued',      NULL, NULL, now() - interval '1 hour',
  now() - interval '1 hour', now() + interval '1 day', NULL, NULL, 0);

CREATE TEMP TABLE before AS SELECT * FROM idem_records;

SELECT * FROM idem_claim_many('t', ARRAY['completed', 'expired', 'lease_live',
    'retryable', 'failed', 'lease_over', 'claimed', 'lease_null',
    'issued_token', 'new', 'expired']);

-- Taken over: claimed afresh, old result, fingerprint, lease and token
-- cleared; attempts restart only after expiry (as in idem_claim).
SELECT key, status, fingerprint, result, locked_until, token, attempts,
       created_at > now() - interval '1 hour' AS fresh
FROM idem_records
WHERE key IN ('expired', 'retryable', 'lease_over', 'new')
ORDER BY key;

-- Duplicates: exactly as they were.
SELECT r.key, r IS NOT DISTINCT FROM b AS unchanged
FROM idem_records r JOIN before b USING (scope, key)
WHERE r.key NOT IN ('expired', 'retryable', 'lease_over')
ORDER BY r.key;

-- A duplicate has no row lock: it is not even touched (xmax unset).
SELECT key, xmax = 0 AS untouched FROM idem_records
WHERE key IN ('completed', 'lease_live', 'issued_token') ORDER BY key;

DROP TABLE before;
TRUNCATE idem_records;

--------------------------------------------------------------------------
-- TTL: the ttl argument, else idempotency.default_ttl; expiry counts
-- from the call, the same for every key of the batch.
--------------------------------------------------------------------------
SELECT * FROM idem_claim_many('ttl', ARRAY['d1', 'd2']);
SELECT * FROM idem_claim_many('ttl', ARRAY['h1'], ttl => '1 hour');
SELECT * FROM idem_claim_many('ttl', ARRAY['n1'], NULL);
SET idempotency.default_ttl = '90 seconds';
SELECT * FROM idem_claim_many('ttl', ARRAY['g1']);
SET idempotency.default_ttl = 'infinity';
SELECT * FROM idem_claim_many('ttl', ARRAY['i1']);
RESET idempotency.default_ttl;
SELECT key, CASE WHEN expires_at <> 'infinity' THEN expires_at - created_at END AS ttl,
       expires_at = 'infinity' AS forever
FROM idem_records WHERE scope = 'ttl' ORDER BY key;
SELECT count(DISTINCT created_at) AS one_clock_per_batch
FROM idem_records WHERE key IN ('d1', 'd2');

TRUNCATE idem_records;

--------------------------------------------------------------------------
-- Set-returning contexts.
--------------------------------------------------------------------------
-- Two calls in one FROM (ROWS FROM evaluates them in order).
SELECT * FROM ROWS FROM (idem_claim_many('s', ARRAY['x1', 'x2']),
                         idem_claim_many('s', ARRAY['x2', 'x3']))
    AS t(key1, claimed1, key2, claimed2);

-- The same with larger batches; the second overlaps the first.
SELECT count(*) FILTER (WHERE claimed1) AS claimed1,
       count(*) FILTER (WHERE claimed2) AS claimed2,
       string_agg(key2, ',' ORDER BY key2) FILTER (WHERE NOT claimed2) AS duplicates2
FROM ROWS FROM (idem_claim_many('s', ARRAY(SELECT 'r' || lpad(i::text, 2, '0')
                                           FROM generate_series(1, 20) AS i)),
                idem_claim_many('s', ARRAY(SELECT 'r' || lpad(i::text, 2, '0')
                                           FROM generate_series(0, 38, 2) AS i)))
    AS t(key1, claimed1, key2, claimed2);

-- Once per outer row, through LATERAL.
SELECT b.id, c.key, c.claimed
FROM (VALUES (1, ARRAY['y1', 'y2']), (2, ARRAY['y2', 'y3']), (3, '{}')) AS b(id, keys)
CROSS JOIN LATERAL idem_claim_many('s', b.keys) AS c;

-- In the select list.
SELECT b.id, idem_claim_many('s', b.keys) AS result
FROM (VALUES (1, ARRAY['z1', 'z2']), (2, ARRAY['z2', 'z3'])) AS b(id, keys);

-- From PL/pgSQL, over a query's result.
DO $$
DECLARE
    r record;
    n int := 0;
BEGIN
    FOR r IN SELECT * FROM idem_claim_many('s', ARRAY['p1', 'p2', 'x1']) LOOP
        IF r.claimed THEN
            n := n + 1;
        END IF;
    END LOOP;
    RAISE NOTICE 'claimed % of 3', n;
END
$$;

-- Subscripts that do not start at 1 are fine.
SELECT * FROM idem_claim_many('s', '[0:2]={q0,q1,q0}'::text[]);

TRUNCATE idem_records;

--------------------------------------------------------------------------
-- Errors.  Every element is validated before anything is written.
--------------------------------------------------------------------------
SELECT pg_temp.try(s) AS result FROM (VALUES
    ($$SELECT count(*) FROM idem_claim_many(NULL, ARRAY['a'])$$),
    ($$SELECT count(*) FROM idem_claim_many('e', NULL)$$),
    ($$SELECT count(*) FROM idem_claim_many('e', ARRAY['a', NULL, 'c'])$$),
    ($$SELECT count(*) FROM idem_claim_many('e', ARRAY['a', 'b', ''])$$),
    ($$SELECT count(*) FROM idem_claim_many('e', '[0:2]={a,"",c}')$$),
    ($$SELECT count(*) FROM idem_claim_many('e', ARRAY['a', repeat('k', 1025)])$$),
    ($$SELECT count(*) FROM idem_claim_many('e', ARRAY['a', repeat('é', 513)])$$),
    ($$SELECT count(*) FROM idem_claim_many(repeat('s', 129), ARRAY['a'])$$),
    ($$SELECT count(*) FROM idem_claim_many('e', ARRAY[['a', 'b'], ['c', 'd']])$$),
    ($$SELECT count(*) FROM idem_claim_many('e', ARRAY['a'], '0 seconds')$$),
    ($$SELECT count(*) FROM idem_claim_many('e', ARRAY['a'], '-1 hour')$$),
    ($$SELECT count(*) FROM idem_claim_many('e', '{}', '-1 hour')$$),
    ($$SELECT count(*) FROM idem_claim_many('e', ARRAY['a'], '300000 years')$$)
) AS t(s);
-- Nothing was written by any of them.
SELECT count(*) AS records FROM idem_records;

-- The limits themselves are accepted (bytes, not characters).
SELECT count(*) FILTER (WHERE claimed) AS claimed
FROM idem_claim_many(repeat('s', 128), ARRAY[repeat('k', 1024), repeat('é', 512)]);

-- A message with its hint, as the client sees it.
SELECT * FROM idem_claim_many('e', ARRAY['ok', repeat('x', 2000)]);
SELECT * FROM idem_claim_many('e', NULL);

-- A read-only transaction: 25006, even for an empty batch.
BEGIN READ ONLY;
SELECT * FROM idem_claim_many('e', ARRAY['a']);
ROLLBACK;
BEGIN READ ONLY;
SELECT * FROM idem_claim_many('e', '{}');
ROLLBACK;

TRUNCATE idem_records;

--------------------------------------------------------------------------
-- idempotency.log_duplicates: one LOG line per duplicate, as idem_claim.
--------------------------------------------------------------------------
INSERT INTO idem_records (scope, key, status, created_at, updated_at, expires_at)
VALUES ('log', 'seen', 'completed', '2024-01-02 03:04:05+00',
        '2024-01-02 03:04:05+00', 'infinity');
SET idempotency.log_duplicates = on;
SET client_min_messages = log;
SELECT * FROM idem_claim_many('log', ARRAY['seen', 'fresh', 'seen']);
RESET client_min_messages;
RESET idempotency.log_duplicates;

TRUNCATE idem_records;

--------------------------------------------------------------------------
-- Row-level security: a record the caller cannot see still counts.  The
-- batch fails with 42501 rather than claim the key a second time, whether
-- the hidden record is live or expired.  (Only the SQLSTATE is shown: the
-- message depends on the server version, which decides where the policy
-- stops the statement.)
--------------------------------------------------------------------------
CREATE ROLE regress_idem_batch;
GRANT SELECT, INSERT, UPDATE, DELETE ON idem_records TO regress_idem_batch;
ALTER TABLE idem_records ENABLE ROW LEVEL SECURITY;
CREATE POLICY regress_batch_hide ON idem_records USING (result IS NULL);
INSERT INTO idem_records (scope, key, status, result, created_at, updated_at, expires_at)
VALUES ('rls', 'hidden_live', 'completed', '{}', now(), now(), now() + interval '1 day'),
       ('rls', 'hidden_expired', 'completed', '{}', now() - interval '2 days',
        now() - interval '2 days', now() - interval '1 day');
SET ROLE regress_idem_batch;
SELECT * FROM idem_claim_many('rls', ARRAY['open1', 'open2']);
SELECT left(pg_temp.try($$SELECT count(*) FROM idem_claim_many('rls', ARRAY['open3', 'hidden_live'])$$), 5)
    AS hidden_live;
SELECT left(pg_temp.try($$SELECT count(*) FROM idem_claim_many('rls', ARRAY['open3', 'hidden_expired'])$$), 5)
    AS hidden_expired;
RESET ROLE;
SELECT key, status FROM idem_records WHERE scope = 'rls' ORDER BY key;
DROP POLICY regress_batch_hide ON idem_records;
ALTER TABLE idem_records DISABLE ROW LEVEL SECURITY;
REVOKE ALL ON idem_records FROM regress_idem_batch;
DROP ROLE regress_idem_batch;

TRUNCATE idem_records;
