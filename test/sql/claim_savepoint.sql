-- Claims here stand alone in autocommit (idempotency.autocommit_claims
-- defaults to error; test/sql/silent_traps.sql tests that).
SET idempotency.autocommit_claims = allow;
-- Subtransactions: a claim made under a savepoint that is rolled back is
-- undone (the key is free again), one made before it is kept; exception
-- blocks in PL/pgSQL behave the same.
TRUNCATE idem_records;

-- Rolled back to a savepoint taken before the claim: the key is free.
BEGIN;
SAVEPOINT before_claim;
SELECT idem_claim('sp', 'a') AS owned;
SELECT (idem_lookup('sp', 'a')).status AS in_savepoint;
ROLLBACK TO SAVEPOINT before_claim;
SELECT idem_lookup('sp', 'a') IS NULL AS gone;
SELECT idem_claim('sp', 'a') AS free_again, idem_claim('sp', 'a') AS then_duplicate;
COMMIT;
SELECT key, status FROM idem_records WHERE scope = 'sp' ORDER BY key;

-- Claimed before the savepoint: rolling back the savepoint keeps it.
BEGIN;
SELECT idem_claim('sp', 'b') AS owned;
SAVEPOINT after_claim;
SELECT idem_claim('sp', 'b') AS duplicate_in_savepoint;
SELECT idem_complete('sp', 'b', '"inner"');
ROLLBACK TO SAVEPOINT after_claim;
SELECT idem_claim('sp', 'b') AS still_duplicate;
SELECT status, result IS NULL AS completion_undone FROM idem_records WHERE key = 'b';
COMMIT;
SELECT status FROM idem_records WHERE key = 'b';

-- A released savepoint keeps its claims.
BEGIN;
SAVEPOINT s1;
SELECT idem_claim('sp', 'c') AS owned;
RELEASE SAVEPOINT s1;
COMMIT;
SELECT count(*) AS c_rows FROM idem_records WHERE key = 'c';

-- Nested savepoints: only the rolled-back level is undone.
BEGIN;
SAVEPOINT outer_sp;
SELECT idem_claim('sp', 'd1') AS owned_d1;
SAVEPOINT inner_sp;
SELECT idem_claim('sp', 'd2') AS owned_d2;
ROLLBACK TO SAVEPOINT inner_sp;
SELECT idem_claim('sp', 'd1') AS d1_duplicate, idem_claim('sp', 'd3') AS owned_d3;
COMMIT;
SELECT key FROM idem_records WHERE key LIKE 'd%' ORDER BY key;

-- A release undone by a savepoint rollback: the record is back.
BEGIN;
SAVEPOINT before_release;
SELECT idem_release('sp', 'a') AS released;
SELECT idem_claim('sp', 'a', '1 hour') AS reclaimed;
ROLLBACK TO SAVEPOINT before_release;
SELECT idem_claim('sp', 'a') AS duplicate_again;
COMMIT;
SELECT key, expires_at = created_at + interval '7 days' AS original_record
FROM idem_records WHERE key = 'a';

-- PL/pgSQL exception blocks are subtransactions too: business work that
-- fails after the claim frees the key; the caller can retry.
CREATE TABLE claim_savepoint_work (k text PRIMARY KEY, attempt int);
CREATE FUNCTION claim_savepoint_process(k text, attempt int, fail boolean) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    BEGIN
        IF NOT idem_claim('work', k) THEN
            RETURN 'duplicate';
        END IF;
        INSERT INTO claim_savepoint_work VALUES (k, attempt);
        IF fail THEN
            RAISE EXCEPTION 'business failure';
        END IF;
        RETURN 'done';
    EXCEPTION WHEN raise_exception THEN
        RETURN 'failed: ' || SQLERRM;
    END;
END
$$;
SELECT claim_savepoint_process('job-1', 1, true) AS attempt_1;
SELECT idem_lookup('work', 'job-1') IS NULL AS key_free;
SELECT claim_savepoint_process('job-1', 2, false) AS attempt_2;
SELECT claim_savepoint_process('job-1', 3, false) AS attempt_3;
SELECT k, attempt FROM claim_savepoint_work ORDER BY k;
DROP FUNCTION claim_savepoint_process(text, int, boolean);
DROP TABLE claim_savepoint_work;

TRUNCATE idem_records;
