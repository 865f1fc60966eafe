-- Claims here stand alone in autocommit (idempotency.autocommit_claims
-- defaults to error; test/sql/silent_traps.sql tests that).
SET idempotency.autocommit_claims = allow;
-- The F_at twins (sql/idempotency_shard.sql) on one node, where
-- idem_records has no shard key: each refuses with 55000 and says what to
-- call instead; a NULL shard key is refused first only where there is a
-- shard key.  With a shard_key column (as idem_distribute(shard_key =>)
-- adds on Citus, test/t/023_citus_shard_key.pl) they address records by
-- (shard_key, scope, key), and the functions without _at refuse.
TRUNCATE idem_records;
\set VERBOSITY terse
SELECT idem_claim_at(1, 'shard', 'k');
SELECT idem_lookup_at(1, 'shard', 'k');
SELECT * FROM idem_claim_many_at(1, 'shard', ARRAY['k']);
SELECT idem_claim_at(NULL::int, 'shard', 'k');
-- The twins exist for every function that addresses one record.
SELECT p.proname
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE p.proname LIKE 'idem\_%\_at' AND n.nspname = 'public'
ORDER BY 1;
-- Every twin is a C function whose first argument is "any".
SELECT count(*) FILTER (WHERE p.proargtypes[0] = '"any"'::regtype AND l.lanname = 'c') AS ok,
       count(*) AS twins
FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
WHERE p.proname LIKE 'idem\_%\_at';

-- A records table with a shard key, by hand (idem_distribute does this on
-- Citus): the twins work on one node too, and the plain calls refuse.
ALTER TABLE idem_records ADD COLUMN shard_key bigint NOT NULL,
    DROP CONSTRAINT idem_records_pkey,
    ADD CONSTRAINT idem_records_pkey PRIMARY KEY (shard_key, scope, key);
SELECT idem_claim_at(1, 'shard', 'k') AS first, idem_claim_at(1, 'shard', 'k') AS again,
       idem_claim_at('2', 'shard', 'k') AS other_shard;
SELECT shard_key, scope, key, status FROM idem_records ORDER BY shard_key;
SELECT idem_complete_at(1, 'shard', 'k', '{"r": 1}');
SELECT (idem_lookup_at(1, 'shard', 'k')).result;
SELECT idem_claim('shard', 'k');
SELECT idem_claim_at(NULL::int, 'shard', 'k');
SELECT idem_claim_at('x', 'shard', 'k');
SELECT * FROM idem_claim_many_at(1, 'shard', ARRAY['k', 'k2']);
SELECT idem_release_at(1, 'shard', 'k2');
-- Back to the install script's shape: the plain calls work again.
TRUNCATE idem_records;
ALTER TABLE idem_records DROP CONSTRAINT idem_records_pkey,
    DROP COLUMN shard_key,
    ADD CONSTRAINT idem_records_pkey PRIMARY KEY (scope, key);
SELECT idem_claim('shard', 'k') AS plain_again;
TRUNCATE idem_records;
