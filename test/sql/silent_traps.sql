-- The mistakes that lose or double money without an error, and the forms
-- that are safe against them:
-- 1. a payment delivered twice, as two events with different ids, moves
--    an order to paid with idem_transition in SET and credits it twice;
--    idem_transition_strict (ID006), and a WHERE clause with
--    idem_can_transition or status = ANY (idem_sources(...)), credit once;
-- 2. a claim in autocommit followed by a business write that fails loses
--    the event; a claim in the transaction of the work does not, and
--    idempotency.autocommit_claims = warn | error points at the first;
-- 3. ttl => '7' is 7 seconds: refused (22023) where the literal is seen;
-- 4. the settings that need the preload are known in every session (this
--    suite runs preloaded; docs/troubleshooting.md shows the other case).
-- Creates the machine st_order, the table st_orders, the functions
-- st_pay and st_pay_all and records in the scopes st-*; removes them.

SELECT idem_machine_define('st_order', '{
  "initial": ["pending_payment"],
  "transitions": {
    "pending_payment": ["paid", "cancelled"],
    "paid":            ["shipped", "refunded"]
  }}');
CREATE TABLE st_orders (
  id     int PRIMARY KEY,
  status text NOT NULL DEFAULT 'pending_payment',
  paid   numeric NOT NULL DEFAULT 0 CHECK (paid <= 1000)
);
INSERT INTO st_orders (id) VALUES (1), (2), (3), (4), (5), (6);

-- 1. Each order's payment arrives twice, as events evt-N-a and evt-N-b:
-- the claims of the event ids both succeed, so only the status change can
-- stop the second credit.

-- The trap: idem_transition returns 'paid' for paid -> paid, and the rest
-- of the UPDATE runs again.
BEGIN;
SELECT idem_claim('st-callback', 'evt-1-a');
UPDATE st_orders SET status = idem_transition('st_order', status, 'paid'),
                     paid = paid + 100 WHERE id = 1;
COMMIT;
BEGIN;
SELECT idem_claim('st-callback', 'evt-1-b');
UPDATE st_orders SET status = idem_transition('st_order', status, 'paid'),
                     paid = paid + 100 WHERE id = 1;
COMMIT;

-- idem_transition_strict: the repeat is ID006 and the UPDATE, with its
-- credit, fails as a whole (the claim of evt-2-b with it).
BEGIN;
SELECT idem_claim('st-callback', 'evt-2-a');
UPDATE st_orders SET status = idem_transition_strict('st_order', status, 'paid'),
                     paid = paid + 100 WHERE id = 2;
COMMIT;
BEGIN;
SELECT idem_claim('st-callback', 'evt-2-b');
UPDATE st_orders SET status = idem_transition_strict('st_order', status, 'paid'),
                     paid = paid + 100 WHERE id = 2;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT idem_lookup('st-callback', 'evt-2-b') IS NULL AS repeat_claim_rolled_back;

-- A WHERE clause that asks the machine: the repeat updates no row.
BEGIN;
SELECT idem_claim('st-callback', 'evt-3-a');
UPDATE st_orders SET status = 'paid', paid = paid + 100
 WHERE id = 3 AND idem_can_transition('st_order', status, 'paid');
COMMIT;
BEGIN;
SELECT idem_claim('st-callback', 'evt-3-b');
UPDATE st_orders SET status = 'paid', paid = paid + 100
 WHERE id = 3 AND idem_can_transition('st_order', status, 'paid');
COMMIT;

-- The same with idem_sources (the form for Citus).
UPDATE st_orders SET status = 'paid', paid = paid + 100
 WHERE id = 4 AND status = ANY (idem_sources('st_order', 'paid'));
UPDATE st_orders SET status = 'paid', paid = paid + 100
 WHERE id = 4 AND status = ANY (idem_sources('st_order', 'paid'));

SELECT id, status, paid FROM st_orders WHERE id <= 4 ORDER BY id;

-- idem_transition_strict otherwise answers as idem_transition: a legal
-- move, an illegal one (ID004, not ID006), NULL and unknown states.
SELECT idem_transition_strict('st_order', 'paid', 'shipped') AS legal;
SELECT idem_transition_strict('st_order', 'cancelled', 'paid');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_transition_strict('st_order', 'cancelled', 'cancelled');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_transition_strict('st_order', NULL, 'paid');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_transition_strict('st_order', 'paid', 'lost');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_transition_strict('no_such_machine', 'paid', 'paid');
\echo :LAST_ERROR_SQLSTATE

-- A move from a state to itself that the machine declares is a legal
-- move, not a repeat: strict lets it through (as idem_can_transition).
SELECT idem_machine_define('st_loop', '{
  "initial": ["active"], "transitions": {"active": ["active", "closed"]}}');
SELECT idem_transition_strict('st_loop', 'active', 'active') AS declared_loop,
       idem_can_transition('st_loop', 'active', 'active') AS can;
SELECT idem_machine_drop('st_loop');

-- 2. The lost event.  st_pay claims the event and credits the order; the
-- CHECK (paid <= 1000) makes a credit of 5000 fail.
CREATE FUNCTION st_pay(event text, order_id int, amount numeric) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT idem_claim('st-pay', event) THEN
        RETURN 'duplicate';
    END IF;
    UPDATE st_orders SET paid = paid + amount WHERE id = order_id;
    RETURN 'credited';
END
$$;

-- The trap: the claim commits on its own, the credit then fails, and the
-- retry of the event (with the amount corrected) is skipped for good.
SELECT idem_claim('st-pay', 'evt-5');
UPDATE st_orders SET paid = paid + 5000 WHERE id = 5;
SELECT idem_claim('st-pay', 'evt-5') AS retry_claims;

-- The claim in the transaction of the work: the failure takes the claim
-- with it, and the retry does the work.
BEGIN;
SELECT idem_claim('st-pay', 'evt-6');
UPDATE st_orders SET paid = paid + 5000 WHERE id = 6;
ROLLBACK;
BEGIN;
SELECT idem_claim('st-pay', 'evt-6') AS retry_claims;
UPDATE st_orders SET paid = paid + 500 WHERE id = 6;
COMMIT;
-- So does a function that claims and writes (one statement, one
-- transaction, even in autocommit).
SELECT st_pay('evt-6-fn', 6, 5000);
SELECT st_pay('evt-6-fn', 6, 100) AS retry;
SELECT id, paid FROM st_orders WHERE id IN (5, 6) ORDER BY id;

-- idempotency.autocommit_claims: allow (the default) says nothing; warn
-- and error name the autocommit claim, before it writes anything.
SHOW idempotency.autocommit_claims;
SET idempotency.autocommit_claims = warn;
SELECT idem_claim('st-pay', 'evt-7');
SET idempotency.autocommit_claims = error;
SELECT idem_claim('st-pay', 'evt-8');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_claim('evt-8');
SELECT * FROM idem_claim('st-pay', 'evt-8');
SELECT idem_lookup('st-pay', 'evt-8') IS NULL AS nothing_written;

-- Not an autocommit claim, under error too: a transaction block, several
-- statements in one query string (an implicit block), a statement that
-- also writes, a function, a DO block, a procedure, a FOR loop of a
-- function, a Citus node's delegated call.
BEGIN;
SELECT idem_claim('st-pay', 'ok-block');
COMMIT;
SELECT idem_claim('st-pay', 'ok-implicit') AS claimed \; SELECT 1 AS one;
UPDATE st_orders SET paid = paid + 1 WHERE id = 5 AND idem_claim('st-pay', 'ok-update');
WITH w AS (UPDATE st_orders SET paid = paid + 1 WHERE id = 5 RETURNING id)
SELECT idem_claim('st-pay', 'ok-with') FROM w;
SELECT st_pay('ok-function', 5, 1);
DO $$ BEGIN PERFORM idem_claim('st-pay', 'ok-do'); END $$;
CREATE PROCEDURE st_pay_all() LANGUAGE plpgsql AS $$
BEGIN
    PERFORM idem_claim('st-pay', 'ok-call-1');
    COMMIT;
    PERFORM idem_claim('st-pay', 'ok-call-2');
END
$$;
CALL st_pay_all();
CREATE FUNCTION st_loop() RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    r record;
    n int := 0;
BEGIN
    FOR r IN SELECT idem_claim('st-pay', 'ok-loop-' || g) AS c FROM generate_series(1, 3) g LOOP
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;
SELECT st_loop();
SET application_name = 'citus_internal gpid=10000000001';
SELECT idem_claim('st-pay', 'ok-citus');
RESET application_name;
SELECT count(*) AS claimed FROM idem_records WHERE scope = 'st-pay' AND key LIKE 'ok-%';
RESET idempotency.autocommit_claims;

-- 3. ttl => '7' is 7 seconds: a bare number written in the statement is
-- refused; a unit, or a value that is not a literal, is taken as it is.
BEGIN;
SELECT idem_claim('st-ttl', 'k1', ttl => '7');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SELECT idem_claim('st-ttl', 'k1', ' 1.5 ');
ROLLBACK;
BEGIN;
SELECT idem_claim('st-ttl', 'k1', ttl => interval '7');
ROLLBACK;
BEGIN;
SELECT idem_claim_many('st-ttl', ARRAY['k1'], ttl => '30');
ROLLBACK;
BEGIN;
SELECT idem_begin('st-ttl', 'k1', ttl => '30');
ROLLBACK;
PREPARE st_prepared AS SELECT idem_claim('st-ttl', 'k1', ttl => '7');
BEGIN;
EXECUTE st_prepared;
ROLLBACK;
DEALLOCATE st_prepared;
BEGIN;
SELECT idem_claim('st-ttl', 'k2', ttl => '7 seconds') AS unit,
       idem_claim('st-ttl', 'k3', ttl => make_interval(days => 7)) AS value;
SELECT key, expires_at - created_at AS ttl FROM idem_records
 WHERE scope = 'st-ttl' ORDER BY key;
COMMIT;
SET idempotency.default_ttl = '7';
SET idempotency.default_ttl = 7;
SHOW idempotency.default_ttl;

-- 4. The settings read at server start are known: SET says they cannot
-- be changed in a session (55P02; the message differs with and without
-- the preload), not that the name is unknown under a reserved prefix.
\set VERBOSITY sqlstate
SET idempotency.purge_databases = 'shop';
SET idempotency.stats_max_scopes = 10;
\set VERBOSITY default
SELECT name, setting FROM pg_settings
 WHERE name IN ('idempotency.autocommit_claims', 'idempotency.purge_databases',
                'idempotency.stats_max_scopes')
 ORDER BY name;

DROP PROCEDURE st_pay_all();
DROP FUNCTION st_loop();
DROP FUNCTION st_pay(text, int, numeric);
DROP TABLE st_orders;
SELECT idem_machine_drop('st_order');
DELETE FROM idem_records WHERE scope LIKE 'st-%';
