-- Claims here stand alone in autocommit (idempotency.autocommit_claims
-- defaults to error; test/sql/silent_traps.sql tests that).
SET idempotency.autocommit_claims = allow;
-- idem_claim's fast path (src/claim_direct.c) and its SPI path give the same
-- answers; the fast path writes nothing for a duplicate, and steps aside
-- (or evaluates everything) when a DBA has changed idem_records.
TRUNCATE idem_records;

-- The same story under both paths: new key, duplicate, duplicate with the
-- same fingerprint, fingerprint mismatch, expired record taken over,
-- retryable failure taken over, a key claimed twice in one statement.
CREATE FUNCTION regress_claim_story(tag text) RETURNS TABLE (step text, answer text)
LANGUAGE plpgsql AS $$
BEGIN
  step := 'new';       answer := idem_claim(tag, 'k1', NULL, 'req')::text; RETURN NEXT;
  step := 'duplicate'; answer := idem_claim(tag, 'k1')::text; RETURN NEXT;
  step := 'same fp';   answer := idem_claim(tag, 'k1', NULL, 'req')::text; RETURN NEXT;
  BEGIN
    PERFORM idem_claim(tag, 'k1', NULL, 'other');
    step := 'other fp'; answer := 'no error'; RETURN NEXT;
  EXCEPTION WHEN OTHERS THEN
    step := 'other fp'; answer := SQLSTATE; RETURN NEXT;
  END;
  UPDATE idem_records SET expires_at = now() - interval '1 second'
   WHERE scope = tag AND key = 'k1';
  step := 'expired';   answer := idem_claim(tag, 'k1', NULL, 'other')::text; RETURN NEXT;
  UPDATE idem_records SET status = 'retryable' WHERE scope = tag AND key = 'k1';
  step := 'retryable'; answer := idem_claim(tag, 'k1')::text; RETURN NEXT;
  step := 'twice';
  SELECT format('%s %s', idem_claim(tag, 'k2'), idem_claim(tag, 'k2')) INTO answer;
  RETURN NEXT;
END $$;

SET idempotency.direct_claim = on;
SELECT * FROM regress_claim_story('direct');
SET idempotency.direct_claim = off;
SELECT * FROM regress_claim_story('spi');
RESET idempotency.direct_claim;

-- The records are alike too (attempts, fingerprint, status).
SELECT scope, key, status, attempts, fingerprint IS NOT NULL AS has_fp,
       expires_at > created_at AS live
FROM idem_records ORDER BY key, scope;
DROP FUNCTION regress_claim_story(text);

-- A duplicate takes no transaction id (so it writes nothing).
SELECT idem_claim('direct', 'dup') AS first;
BEGIN;
SELECT idem_claim('direct', 'dup') AS again;
SELECT pg_current_xact_id_if_assigned() IS NULL AS no_xid;
COMMIT;

-- A trigger a DBA puts on idem_records fires: the fast path steps aside.
CREATE FUNCTION regress_claim_notice() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE NOTICE 'trigger saw key %', NEW.key; RETURN NEW; END $$;
CREATE TRIGGER regress_claim_notice BEFORE INSERT ON idem_records
  FOR EACH ROW EXECUTE FUNCTION regress_claim_notice();
SELECT idem_claim('direct', 'with-trigger') AS claimed;
DROP TRIGGER regress_claim_notice ON idem_records;
DROP FUNCTION regress_claim_notice();

-- A rule is not bypassed either: the claim takes the SPI path, whose
-- INSERT ... ON CONFLICT PostgreSQL refuses on a table with rules (0A000).
CREATE TABLE regress_rule_log (key text);
CREATE RULE regress_claim_also AS ON INSERT TO idem_records
  DO ALSO INSERT INTO regress_rule_log VALUES (NEW.key);
\set VERBOSITY sqlstate
SELECT idem_claim('direct', 'with-rule') AS claimed;
\set VERBOSITY default
DROP RULE regress_claim_also ON idem_records;
DROP TABLE regress_rule_log;

-- A CHECK a DBA adds is enforced (23514), and only on insertion: the
-- duplicate of an existing key is still just a duplicate.
ALTER TABLE idem_records ADD CONSTRAINT regress_no_forbidden
  CHECK (key <> 'forbidden') NOT VALID;
\set VERBOSITY sqlstate
SELECT idem_claim('direct', 'forbidden');
\set VERBOSITY default
SELECT idem_claim('direct', 'allowed') AS allowed;
ALTER TABLE idem_records DROP CONSTRAINT regress_no_forbidden;

-- A unique index a DBA adds (here a partial one) is enforced (23505);
-- the primary key stays the arbiter of duplicates.
CREATE UNIQUE INDEX regress_key_alone ON idem_records (key) WHERE key LIKE 'allow%';
\set VERBOSITY sqlstate
SELECT idem_claim('elsewhere', 'allowed');
\set VERBOSITY default
SELECT idem_claim('direct', 'allowed') AS duplicate;
SELECT idem_claim('elsewhere', 'not-covered') AS outside_the_predicate;
DROP INDEX regress_key_alone;

-- The status CHECK is not evaluated for a claim only while it is the
-- extension's own C function: replaced by one that refuses 'claimed', it
-- is evaluated (and fails) at once, in this session too.
CREATE OR REPLACE FUNCTION idem_status_is_valid(status text) RETURNS boolean
  LANGUAGE sql IMMUTABLE STRICT AS $$ SELECT status <> 'claimed' $$;
\set VERBOSITY sqlstate
SELECT idem_claim('direct', 'refused');
\set VERBOSITY default
CREATE OR REPLACE FUNCTION idem_status_is_valid(status text) RETURNS boolean
  AS '$libdir/idempotency', 'idem_status_is_valid'
  LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
SELECT idem_claim('direct', 'refused') AS accepted_again;

-- The status check itself.
SELECT s, idem_status_is_valid(s)
FROM unnest(ARRAY['claimed', 'in_progress', 'completed', 'failed', 'retryable',
                  'issued', 'consumed', 'Claimed', 'claimed ', '', NULL]) AS s;

-- REPEATABLE READ takes the SPI path, with the same answers.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT idem_claim('direct', 'rr') AS new, idem_claim('direct', 'rr') AS dup;
COMMIT;

TRUNCATE idem_records;
