-- Claims here stand alone in autocommit (idempotency.autocommit_claims
-- defaults to error; test/sql/silent_traps.sql tests that).
SET idempotency.autocommit_claims = allow;
-- idem_complete, idem_lookup and idem_release: storing a result, replaying
-- it for duplicates, and freeing a key; with their errors ID002 and ID005.
TRUNCATE idem_records;
\set SHOW_CONTEXT never

\getenv abs_srcdir PG_ABS_SRCDIR
\set try_sql :abs_srcdir '/helpers/try.sql'
\i :try_sql

-- The replay pattern: do the work once, answer duplicates from the record.
CREATE TABLE claim_replay_payments (id serial PRIMARY KEY, order_key text, amount int);
CREATE FUNCTION claim_replay_pay(order_key text, amount int) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    payment_id int;
    answer jsonb;
BEGIN
    IF idem_claim('payments', order_key) THEN
        INSERT INTO claim_replay_payments (order_key, amount)
        VALUES (order_key, amount) RETURNING id INTO payment_id;
        answer := jsonb_build_object('payment', payment_id, 'amount', amount);
        PERFORM idem_complete('payments', order_key, answer);
        RETURN answer;
    END IF;
    RETURN (idem_lookup('payments', order_key)).result;
END
$$;
SELECT claim_replay_pay('o-1', 100) AS first_call;
SELECT claim_replay_pay('o-1', 100) AS retried;
SELECT claim_replay_pay('o-2', 250) AS other_order;
SELECT claim_replay_pay('o-1', 100) AS retried_again;
SELECT order_key, amount FROM claim_replay_payments ORDER BY id;
DROP FUNCTION claim_replay_pay(text, int);
DROP TABLE claim_replay_payments;

-- What a lookup returns: the record's fields, status 'completed' and the
-- result after idem_complete.
SELECT idem_claim('s', 'k1') AS owned;
SELECT r.scope, r.key, r.status, r.result, r.fingerprint,
       r.created_at = r.updated_at AS unchanged,
       r.expires_at = r.created_at + interval '7 days' AS expiry
FROM idem_lookup('s', 'k1') AS r;
SELECT pg_sleep(0.01);
SELECT idem_complete('s', 'k1', '{"ok": true, "items": [1, 2]}');
SELECT r.status, r.result, r.updated_at > r.created_at AS updated,
       r.expires_at = r.created_at + interval '7 days' AS expiry_kept
FROM idem_lookup('s', 'k1') AS r;
-- The row type is idem_record.
SELECT pg_typeof(idem_lookup('s', 'k1'));

-- Lookup of what has no live record: NULL.
SELECT idem_lookup('s', 'absent') IS NULL AS absent,
       idem_lookup('other-scope', 'k1') IS NULL AS other_scope,
       idem_lookup('S', 'k1') IS NULL AS scope_case,
       idem_lookup('s', 'K1') IS NULL AS key_case;

-- Completing in the claiming transaction; a NULL result is refused
-- (22004: test/sql/silent_traps.sql), a JSON null is a result.
BEGIN;
SELECT idem_claim('s', 'k2') AS owned;
SELECT idem_complete('s', 'k2', 'null');
SELECT (idem_lookup('s', 'k2')).status AS in_xact;
COMMIT;
SELECT status, result IS NULL AS null_result FROM idem_records WHERE key = 'k2';

-- A completion rolls back with its transaction.
SELECT idem_claim('s', 'k3') AS owned;
BEGIN;
SELECT idem_complete('s', 'k3', '"done"');
ROLLBACK;
SELECT status, result IS NULL AS no_result FROM idem_records WHERE key = 'k3';

-- Completing twice: ID005, the record is no longer 'claimed'.
SELECT pg_temp.try($$SELECT idem_complete('s', 'k1', '{"again": true}')$$) AS result;
SELECT idem_complete('s', 'k1', '{"again": true}');
SELECT result FROM idem_records WHERE key = 'k1';

-- Completing what has no live record: ID002.
SELECT pg_temp.try(s) AS result FROM (VALUES
    ($$SELECT idem_complete('s', 'never-claimed', '1')$$),
    ($$SELECT idem_complete('S', 'k3', '1')$$)
) AS t(s);
SELECT idem_complete('s', 'never-claimed', '1');
-- An expired record is no live record either.
SELECT idem_claim('s', 'k4') AS owned;
UPDATE idem_records SET expires_at = now() - interval '1 second' WHERE key = 'k4';
SELECT pg_temp.try($$SELECT idem_complete('s', 'k4', '1')$$) AS result;
SELECT status FROM idem_records WHERE key = 'k4';

-- Release: true when a live record was removed, and the key is free again.
SELECT idem_release('s', 'k1') AS released_completed,
       idem_release('s', 'k3') AS released_claimed,
       idem_release('s', 'never-claimed') AS released_absent;
SELECT idem_release('s', 'k1') AS released_twice;
SELECT key FROM idem_records WHERE scope = 's' ORDER BY key;
SELECT idem_claim('s', 'k1') AS claimed_again;
SELECT status, result IS NULL AS no_result FROM idem_records WHERE key = 'k1';
-- An expired record is removed as well, but it was no live record.
SELECT idem_release('s', 'k4') AS released_expired;
SELECT count(*) AS k4_rows FROM idem_records WHERE key = 'k4';
-- Completing a released key: ID002.
SELECT idem_release('s', 'k1') AS released;
SELECT pg_temp.try($$SELECT idem_complete('s', 'k1', '1')$$) AS result;

-- Release rolls back with its transaction; released and claimed again in
-- one transaction, the key is owned anew.
BEGIN;
SELECT idem_release('s', 'k2') AS released;
SELECT idem_lookup('s', 'k2') IS NULL AS gone_in_xact;
ROLLBACK;
SELECT status FROM idem_records WHERE key = 'k2';
BEGIN;
SELECT idem_claim('s', 'k5') AS owned, idem_release('s', 'k5') AS released;
SELECT idem_claim('s', 'k5') AS owned_again, idem_claim('s', 'k5') AS then_duplicate;
COMMIT;
SELECT count(*) AS k5_rows FROM idem_records WHERE key = 'k5';

DROP FUNCTION pg_temp.try(text);
TRUNCATE idem_records;
