-- Claims here stand alone in autocommit (idempotency.autocommit_claims
-- defaults to error; test/sql/silent_traps.sql tests that).
SET idempotency.autocommit_claims = allow;
-- idem_claim basics: ownership, duplicates, the default scope, rollback,
-- exact-byte keys, and the cost of a duplicate (no XID, no dead tuple, no
-- subtransaction).
TRUNCATE idem_records;

-- First claim owns the key; a later transaction sees a duplicate.
SELECT idem_claim('order-1') AS first;
SELECT idem_claim('order-1') AS again;

-- The one-argument form is the default scope ''.
SELECT idem_claim('', 'order-1') AS same_key_default_scope;
SELECT idem_claim('shop', 'order-1') AS other_scope;
SELECT scope, key, status, fingerprint IS NULL AS no_fingerprint,
       result IS NULL AS no_result, created_at = updated_at AS untouched
FROM idem_records ORDER BY scope, key;

-- A second call in the same transaction returns false, never an error,
-- whichever form is used.
BEGIN;
SELECT idem_claim('s', 'twice') AS first, idem_claim('s', 'twice') AS second;
SELECT idem_claim('s', 'twice', '1 hour') AS third;
COMMIT;
SELECT count(*) FROM idem_records WHERE scope = 's' AND key = 'twice';

-- The record rolls back with the caller's transaction: the key is free.
BEGIN;
SELECT idem_claim('s', 'rolled-back') AS in_aborted_xact;
ROLLBACK;
SELECT count(*) AS rows_left FROM idem_records WHERE key = 'rolled-back';
SELECT idem_claim('s', 'rolled-back') AS free_again;

-- An error later in the transaction aborts the claim too.
BEGIN;
SELECT idem_claim('s', 'failed-later') AS claimed;
SELECT 1 / 0;
ROLLBACK;
SELECT idem_claim('s', 'failed-later') AS free_again;

-- Keys compare as exact bytes: case, trailing blanks and Unicode
-- normalization forms are different keys.
SELECT idem_claim('bytes', 'A') AS "A", idem_claim('bytes', 'a') AS "a",
       idem_claim('bytes', 'a ') AS "a ",
       idem_claim('bytes', U&'\00E9') AS nfc, idem_claim('bytes', U&'e\0301') AS nfd;
SELECT idem_claim('bytes', 'A') AS "A", idem_claim('bytes', 'a') AS "a",
       idem_claim('bytes', 'a ') AS "a ",
       idem_claim('bytes', U&'\00E9') AS nfc, idem_claim('bytes', U&'e\0301') AS nfd;
-- Scopes too.
SELECT idem_claim('Bytes', 'A') AS scope_case;
-- Even keys passed with a case-insensitive collation compare as bytes.
-- (expected/claim_basic_1.out is the output of a server built without ICU.)
CREATE COLLATION claim_basic_ci (provider = icu, locale = 'und-u-ks-level2',
                                 deterministic = false);
SELECT 'B' = 'b' COLLATE claim_basic_ci AS equal_under_collation,
       idem_claim('bytes', 'B' COLLATE claim_basic_ci) AS "B",
       idem_claim('bytes', 'b' COLLATE claim_basic_ci) AS "b";
DROP COLLATION claim_basic_ci;
SELECT count(*) AS byte_keys FROM idem_records WHERE scope = 'bytes';

-- Many keys in one statement.
SELECT count(*) FILTER (WHERE idem_claim('many', 'k' || (i % 5))) AS owned,
       count(*) AS calls
FROM generate_series(1, 20) AS i;

-- A duplicate in a fresh transaction assigns no transaction id and writes
-- no tuple (so it leaves no dead tuple behind); a successful claim inserts
-- exactly one.
BEGIN;
SELECT pg_stat_get_xact_tuples_inserted('idem_records'::regclass) AS ins0,
       pg_stat_get_xact_tuples_updated('idem_records'::regclass) AS upd0 \gset
SELECT idem_claim('order-1') AS duplicate, idem_claim('shop', 'order-1') AS duplicate2;
SELECT pg_current_xact_id_if_assigned() IS NULL AS no_xid,
       pg_stat_get_xact_tuples_inserted('idem_records'::regclass) - :ins0 AS inserted,
       pg_stat_get_xact_tuples_updated('idem_records'::regclass) - :upd0 AS updated;
SELECT idem_claim('fresh-key') AS owned;
SELECT pg_current_xact_id_if_assigned() IS NOT NULL AS has_xid,
       pg_stat_get_xact_tuples_inserted('idem_records'::regclass) - :ins0 AS inserted;
COMMIT;

-- No subtransaction per call: rows written by claims carry the top-level
-- transaction id as xmin (a subtransaction would have its own XID).
BEGIN;
SELECT idem_claim('xid', 'a') AND idem_claim('xid', 'b') AND idem_claim('xid', 'c') AS owned;
SELECT key, xmin::text = (pg_current_xact_id()::text::bigint % 4294967296)::text AS top_level_xmin
FROM idem_records WHERE scope = 'xid' ORDER BY key;
COMMIT;

-- The one-argument form reads no ttl or fingerprint argument that does not
-- exist, whatever the call's collation: a collation whose OID ends in a
-- zero byte once made it read garbage as a ttl and crash.
DO $$
DECLARE
    i integer;
    o oid;
BEGIN
    FOR i IN 1 .. 2000 LOOP
        CREATE COLLATION claim_basic_probe FROM "C";
        SELECT c.oid INTO o FROM pg_catalog.pg_collation c
        WHERE c.collname = 'claim_basic_probe' AND c.collnamespace = 'public'::regnamespace;
        IF o::int8 % 256 = 0 THEN
            ALTER COLLATION claim_basic_probe RENAME TO claim_basic_zero_byte;
            RETURN;
        END IF;
        DROP COLLATION claim_basic_probe;
    END LOOP;
    RAISE EXCEPTION 'no collation OID ending in a zero byte was assigned';
END
$$;
SELECT idem_claim('collated' COLLATE claim_basic_zero_byte) AS owned;
SELECT expires_at = created_at + interval '7 days' AS default_ttl,
       fingerprint IS NULL AS no_fingerprint
FROM idem_records WHERE scope = '' AND key = 'collated';
DROP COLLATION claim_basic_zero_byte;

TRUNCATE idem_records;
