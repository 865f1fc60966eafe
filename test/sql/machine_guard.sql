-- Table guards: idem_guard, idem_unguard and their triggers;
-- version columns, history, several guards at once, hostile names, what
-- dropping a table, a column, a machine or the extension leaves behind.
-- Creates tables and machines starting with "g_" and drops them.

\getenv abs_srcdir PG_ABS_SRCDIR
\set try_sql :abs_srcdir '/helpers/try.sql'
\i :try_sql

CREATE FUNCTION pg_temp.err(stmt text, OUT code text, OUT message text,
                            OUT detail text, OUT hint text, OUT tab text,
                            OUT col text)
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE stmt;
    code := 'no error';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
                            detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT,
                            tab = TABLE_NAME, col = COLUMN_NAME;
END
$$;

-- The triggers of the idempotency extension's functions on a table.
CREATE FUNCTION pg_temp.guards(tbl regclass) RETURNS SETOF text
LANGUAGE sql AS $$
    SELECT pg_get_triggerdef(t.oid)
    FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid
    WHERE t.tgrelid = tbl AND p.proname = 'idem_guard_trigger'
    ORDER BY t.tgname
$$;

SELECT idem_machine_define('g_order', '{
    "initial": ["pending_payment"],
    "transitions": {"pending_payment": ["paid", "cancelled"],
                    "paid": ["shipped", "refunded"],
                    "shipped": ["delivered"]}}');

CREATE TABLE g_orders (
    id      int PRIMARY KEY,
    status  text NOT NULL DEFAULT 'pending_payment',
    note    text,
    version int NOT NULL DEFAULT 0
);
-- A trigger of the user's own, which the guard must leave alone.
CREATE FUNCTION g_noop() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NULL; END';
CREATE TRIGGER g_user_trigger AFTER UPDATE ON g_orders
    FOR EACH ROW EXECUTE FUNCTION g_noop();

--------------------------------------------------------------------------
-- Errors of idem_guard and idem_unguard
--------------------------------------------------------------------------

CREATE VIEW g_view AS SELECT * FROM g_orders;
CREATE TABLE g_parted (id int, status text) PARTITION BY RANGE (id);
SELECT pg_temp.try(s) AS result FROM (VALUES
    ($$SELECT idem_guard(NULL, 'status', 'g_order')$$),
    ($$SELECT idem_guard('g_orders', NULL, 'g_order')$$),
    ($$SELECT idem_guard('g_orders', 'status', NULL)$$),
    ($$SELECT idem_guard('g_orders', 'status', 'g_order', NULL, NULL)$$),
    ($$SELECT idem_guard('g_orders', 'status', '')$$),
    ($$SELECT idem_guard('g_orders', 'status', repeat('m', 64))$$),
    ($$SELECT idem_guard('g_nope', 'status', 'g_order')$$),
    ($$SELECT idem_guard('g_view', 'status', 'g_order')$$),
    ($$SELECT idem_guard('g_parted', 'status', 'g_order')$$),
    ($$SELECT idem_guard('g_orders', 'nope', 'g_order')$$),
    ($$SELECT idem_guard('g_orders', 'ctid', 'g_order')$$),
    ($$SELECT idem_guard('g_orders', 'id', 'g_order')$$),
    ($$SELECT idem_guard('g_orders', 'status', 'g_order', 'nope')$$),
    ($$SELECT idem_guard('g_orders', 'status', 'g_order', 'note')$$),
    ($$SELECT idem_guard('g_orders', 'status', 'g_order', 'status')$$),
    ($$SELECT idem_guard('g_orders', 'status', 'g_nope')$$),
    ($$SELECT idem_unguard(NULL, 'status')$$),
    ($$SELECT idem_unguard('g_orders', NULL)$$),
    ($$SELECT idem_unguard('g_orders', 'status')$$),
    ($$SELECT idem_unguard('g_orders', 'nope')$$),
    ($$SELECT idem_unguard('g_view', 'status')$$)
) AS t(s);
DROP VIEW g_view;
DROP TABLE g_parted;
-- Nothing was installed by the failed calls.
SELECT count(*) AS guard_triggers FROM pg_temp.guards('g_orders');

BEGIN READ ONLY;
SELECT pg_temp.try($$SELECT idem_guard('g_orders', 'status', 'g_order')$$) AS guard;
ROLLBACK;
BEGIN READ ONLY;
SELECT pg_temp.try($$SELECT idem_unguard('g_orders', 'status')$$) AS unguard;
ROLLBACK;

-- idem_guard and idem_unguard are not public; granted them, a role still
-- needs the TRIGGER privilege on the table (42501).
CREATE ROLE idem_guard_test_role;
SET ROLE idem_guard_test_role;
SELECT pg_temp.try($$SELECT idem_guard('g_orders', 'status', 'g_order')$$) AS guard,
       pg_temp.try($$SELECT idem_unguard('g_orders', 'status')$$) AS unguard;
RESET ROLE;
GRANT EXECUTE ON FUNCTION idem_guard(regclass, name, text, name, boolean),
                          idem_unguard(regclass, name) TO idem_guard_test_role;
SET ROLE idem_guard_test_role;
SELECT pg_temp.try($$SELECT idem_guard('g_orders', 'status', 'g_order')$$) AS guard,
       pg_temp.try($$SELECT idem_unguard('g_orders', 'status')$$) AS unguard;
RESET ROLE;
REVOKE EXECUTE ON FUNCTION idem_guard(regclass, name, text, name, boolean),
                           idem_unguard(regclass, name) FROM idem_guard_test_role;

--------------------------------------------------------------------------
-- The plain guard: an AFTER trigger whose WHEN condition is the check.
--------------------------------------------------------------------------

SELECT idem_guard('g_orders', 'status', 'g_order');
SELECT pg_temp.guards('g_orders');

INSERT INTO g_orders (id) VALUES (1), (2), (3);
INSERT INTO g_orders (id, status) VALUES (4, 'pending_payment');
-- Not an initial state: ID004, the whole statement fails.
\x on
SELECT * FROM pg_temp.err($$INSERT INTO g_orders (id, status) VALUES (5, 'pending_payment'), (6, 'paid')$$);
\x off
SELECT pg_temp.try(s) AS result FROM (VALUES
    ($$INSERT INTO g_orders (id, status) VALUES (7, 'shipped')$$),
    ($$INSERT INTO g_orders (id, status) VALUES (7, 'bogus')$$),
    ($$INSERT INTO g_orders (id, status) VALUES (7, '')$$)
) AS t(s);
SELECT id, status FROM g_orders ORDER BY id;

-- Declared transitions pass, whatever the statement looks like.
UPDATE g_orders SET status = 'paid' WHERE id = 1;
UPDATE g_orders SET status = CASE id WHEN 2 THEN 'cancelled' ELSE 'paid' END WHERE id IN (2, 3);
UPDATE g_orders SET status = 'shipped' WHERE status = 'paid';
-- The same value passes (a repeated event), even from a terminal state.
UPDATE g_orders SET status = 'cancelled' WHERE id = 2;
UPDATE g_orders SET status = status;
-- Other columns are not watched.
UPDATE g_orders SET note = 'gift' WHERE id = 1;
SELECT id, status, note FROM g_orders ORDER BY id;

-- Illegal changes: ID004 with machine, from and to in the detail, the
-- allowed targets in the hint, and the table and column as error fields.
\x on
SELECT * FROM pg_temp.err($$UPDATE g_orders SET status = 'pending_payment' WHERE id = 1$$);
SELECT * FROM pg_temp.err($$UPDATE g_orders SET status = 'paid' WHERE id = 2$$);
SELECT * FROM pg_temp.err($$UPDATE g_orders SET status = 'lost' WHERE id = 1$$);
\x off
-- One bad row fails the whole statement.
SELECT pg_temp.try($$UPDATE g_orders SET status = 'delivered' WHERE id IN (1, 3, 4)$$) AS result;
SELECT id, status FROM g_orders ORDER BY id;

-- INSERT ... ON CONFLICT: the insert path and the update path are both
-- guarded; a row skipped by DO NOTHING is not checked.
INSERT INTO g_orders (id, status) VALUES (1, 'pending_payment')
    ON CONFLICT (id) DO UPDATE SET status = 'delivered';
SELECT pg_temp.try($$INSERT INTO g_orders (id) VALUES (4) ON CONFLICT (id) DO UPDATE SET status = 'shipped'$$) AS upsert_illegal;
INSERT INTO g_orders (id, status) VALUES (4, 'shipped') ON CONFLICT (id) DO NOTHING;
-- COPY is guarded too.
\set VERBOSITY terse
COPY g_orders (id, status) FROM stdin;
8	pending_payment
9	refunded
\.
\set VERBOSITY default
COPY g_orders (id, status) FROM stdin;
8	pending_payment
\.
SELECT id, status FROM g_orders ORDER BY id;

-- Legal rows never fire the trigger function: the check is the WHEN
-- condition (idem_guard_allows); only an illegal row fires it.
SET track_functions = 'all';
BEGIN;
INSERT INTO g_orders (id) SELECT g FROM generate_series(100, 199) g;
UPDATE g_orders SET status = 'paid' WHERE id BETWEEN 100 AND 199;
SELECT p.proname, s.calls
FROM pg_stat_xact_user_functions s JOIN pg_proc p ON p.oid = s.funcid
WHERE p.proname IN ('idem_guard_trigger', 'idem_guard_allows')
ORDER BY 1;
ROLLBACK;
RESET track_functions;

-- A redefinition is enforced at once: rows in a state the machine no
-- longer has can keep it, but not leave it.
SELECT idem_machine_define('g_order', '{
    "initial": ["pending_payment"],
    "transitions": {"pending_payment": ["paid", "cancelled"],
                    "paid": ["shipped", "refunded"]}}');
\x on
SELECT * FROM pg_temp.err($$UPDATE g_orders SET status = 'delivered' WHERE id = 3$$);
\x off
UPDATE g_orders SET status = 'shipped' WHERE id = 3;
SELECT idem_machine_define('g_order', '{
    "initial": ["pending_payment"],
    "transitions": {"pending_payment": ["paid", "cancelled"],
                    "paid": ["shipped", "refunded"],
                    "shipped": ["delivered"]}}');

-- NULL statuses (in a nullable column): a row enters the machine only in
-- an initial state, and cannot leave it for NULL.
CREATE TABLE g_loose (id int PRIMARY KEY, status varchar(20));
INSERT INTO g_loose VALUES (1, NULL), (2, 'paid');
SELECT idem_guard('g_loose', 'status', 'g_order');
SELECT pg_temp.try(s) AS result FROM (VALUES
    ($$INSERT INTO g_loose VALUES (3, NULL)$$),
    ($$UPDATE g_loose SET status = 'paid' WHERE id = 1$$),
    ($$UPDATE g_loose SET status = 'pending_payment' WHERE id = 1$$),
    ($$UPDATE g_loose SET status = NULL WHERE id = 1$$),
    ($$UPDATE g_loose SET status = 'shipped' WHERE id = 2$$),
    ($$UPDATE g_loose SET status = NULL WHERE id = 2$$)
) AS t(s);
SELECT id, status FROM g_loose ORDER BY id;

--------------------------------------------------------------------------
-- Version column: every status change sets it to the old version + 1.
--------------------------------------------------------------------------

SELECT idem_guard('g_orders', 'status', 'g_order', 'version');
SELECT pg_temp.guards('g_orders');
UPDATE g_orders SET version = 0;
UPDATE g_orders SET status = 'paid' WHERE id = 4;
UPDATE g_orders SET status = 'paid' WHERE id = 4;       -- same value: no change
UPDATE g_orders SET note = 'n', version = 7 WHERE id = 8; -- no status change
UPDATE g_orders SET status = 'paid', version = 42 WHERE id = 8; -- overridden
SELECT pg_temp.try($$UPDATE g_orders SET status = 'pending_payment' WHERE id = 4$$) AS illegal;
-- Optimistic locking: the caller compares the version it read.
UPDATE g_orders SET status = 'shipped' WHERE id = 4 AND version = 1;
UPDATE g_orders SET status = 'delivered' WHERE id = 4 AND version = 1;
SELECT id, status, version FROM g_orders WHERE id IN (4, 8) ORDER BY id;
-- A NULL version cannot be incremented; nor can one at the maximum.
CREATE TABLE g_versioned (id int PRIMARY KEY, status text, v int, w bigint NOT NULL DEFAULT 0);
INSERT INTO g_versioned VALUES (1, 'pending_payment', NULL), (2, 'pending_payment', 2147483647);
SELECT idem_guard('g_versioned', 'status', 'g_order', 'v');
\x on
SELECT * FROM pg_temp.err($$UPDATE g_versioned SET status = 'paid' WHERE id = 1$$);
SELECT * FROM pg_temp.err($$UPDATE g_versioned SET status = 'paid' WHERE id = 2$$);
\x off
-- bigint versions work the same.
SELECT idem_guard('g_versioned', 'status', 'g_order', 'w');
UPDATE g_versioned SET status = 'paid';
SELECT id, status, v, w FROM g_versioned ORDER BY id;
-- The version column cannot be dropped while the guard uses it.
SELECT pg_temp.try($$ALTER TABLE g_versioned DROP COLUMN w$$) AS drop_version;
DROP TABLE g_versioned;

--------------------------------------------------------------------------
-- History: every change appended to idem_transition_log.
--------------------------------------------------------------------------

CREATE TABLE g_shipments (
    region text,
    num    bigint,
    state  text NOT NULL DEFAULT 'pending_payment',
    PRIMARY KEY (region, num)
);
SELECT idem_guard('g_shipments', 'state', 'g_order', history => true);
SELECT pg_temp.guards('g_shipments');
BEGIN;
INSERT INTO g_shipments (region, num) VALUES ('eu', 1), ('us', 2);
UPDATE g_shipments SET state = 'paid' WHERE num = 1;
SELECT pg_current_xact_id() AS xid, now() AS t0 \gset
COMMIT;
UPDATE g_shipments SET state = 'paid';              -- eu/1 unchanged, us/2 changes
UPDATE g_shipments SET state = state;               -- nothing changes
SELECT pg_temp.try($$UPDATE g_shipments SET state = 'delivered' WHERE num = 2$$) AS illegal_not_logged;
INSERT INTO g_shipments (region, num) VALUES ('eu', 1) ON CONFLICT DO NOTHING;
SELECT table_name, status_column, row_key, from_state, to_state,
       xact_id = :'xid'::xid8 AS in_first_transaction,
       changed_at = :'t0'::timestamptz AS at_its_start
FROM idem_transition_log WHERE table_name = 'public.g_shipments' ORDER BY id;

-- A table without a primary key logs a NULL row key; with a version
-- column, history is a separate trigger.
CREATE TABLE g_nokey (status text NOT NULL DEFAULT 'pending_payment',
                      version bigint NOT NULL DEFAULT 0);
SELECT idem_guard('g_nokey', 'status', 'g_order', 'version', true);
SELECT pg_temp.guards('g_nokey');
INSERT INTO g_nokey DEFAULT VALUES;
UPDATE g_nokey SET status = 'cancelled';
SELECT status, version FROM g_nokey;
SELECT row_key, from_state, to_state FROM idem_transition_log
WHERE table_name = 'public.g_nokey' ORDER BY id;
DROP TABLE g_nokey;

--------------------------------------------------------------------------
-- Several guards at once, re-guarding, and idem_unguard removing exactly
-- what idem_guard added.
--------------------------------------------------------------------------

SELECT idem_machine_define('g_payment', '{
    "initial": ["none"],
    "transitions": {"none": ["authorized"], "authorized": ["captured", "voided"]}}');
ALTER TABLE g_orders ADD COLUMN payment text NOT NULL DEFAULT 'none';
SELECT idem_guard('g_orders', 'payment', 'g_payment');
SELECT pg_temp.guards('g_orders');
UPDATE g_orders SET payment = 'authorized', status = 'paid' WHERE id = 8 AND false; -- no row
UPDATE g_orders SET payment = 'authorized' WHERE id = 1;
SELECT pg_temp.try($$UPDATE g_orders SET payment = 'captured', status = 'pending_payment' WHERE id = 1$$) AS status_illegal,
       pg_temp.try($$UPDATE g_orders SET payment = 'none', status = 'delivered' WHERE id = 1$$) AS payment_illegal;
SELECT id, status, payment FROM g_orders WHERE id = 1;

-- Re-guarding replaces the guard (here: no version column any more).
SELECT idem_guard('g_orders', 'status', 'g_order');
SELECT pg_temp.guards('g_orders');

-- idem_unguard removes exactly the guard of one column: the other guard
-- and the user's own trigger stay.
SELECT idem_unguard('g_orders', 'payment');
SELECT pg_temp.guards('g_orders');
SELECT tgname FROM pg_trigger WHERE tgrelid = 'g_orders'::regclass ORDER BY tgname;
UPDATE g_orders SET payment = 'none' WHERE id = 1;
SELECT idem_unguard('g_orders', 'status');
SELECT tgname FROM pg_trigger WHERE tgrelid = 'g_orders'::regclass ORDER BY tgname;
UPDATE g_orders SET status = 'pending_payment' WHERE id = 1;

--------------------------------------------------------------------------
-- Hostile and long names
--------------------------------------------------------------------------

CREATE SCHEMA "g s;chema";
CREATE TABLE "g s;chema"."or""ders; DROP TABLE g_orders; --" (
    "id" int PRIMARY KEY,
    "st""at us; --" text NOT NULL
);
SELECT idem_machine_define('g_o''rder; --', '{"initial": ["new"], "transitions": {"new": ["done"]}}');
SELECT idem_guard('"g s;chema"."or""ders; DROP TABLE g_orders; --"', 'st"at us; --', 'g_o''rder; --', history => true);
SELECT pg_temp.guards('"g s;chema"."or""ders; DROP TABLE g_orders; --"');
INSERT INTO "g s;chema"."or""ders; DROP TABLE g_orders; --" VALUES (1, 'new');
UPDATE "g s;chema"."or""ders; DROP TABLE g_orders; --" SET "st""at us; --" = 'done';
\x on
SELECT * FROM pg_temp.err($$UPDATE "g s;chema"."or""ders; DROP TABLE g_orders; --" SET "st""at us; --" = 'new'$$);
\x off
SELECT table_name, status_column, row_key, from_state, to_state FROM idem_transition_log
WHERE table_name LIKE '"g s;chema".%' ORDER BY id;
SELECT idem_unguard('"g s;chema"."or""ders; DROP TABLE g_orders; --"', 'st"at us; --');
SELECT count(*) AS left_over FROM pg_temp.guards('"g s;chema"."or""ders; DROP TABLE g_orders; --"');
SELECT count(*) AS g_orders_still_there FROM g_orders;
DROP SCHEMA "g s;chema" CASCADE;
SELECT idem_machine_drop('g_o''rder; --');

-- Column names of 63 bytes: trigger names are clipped with a hash of the
-- whole name, so two long columns still get distinct triggers.
CREATE TABLE g_long (id int PRIMARY KEY,
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa1" text,
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa2" text);
SELECT idem_guard('g_long', 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa1', 'g_order', history => true);
SELECT idem_guard('g_long', 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa2', 'g_payment');
SELECT tgname, length(tgname) FROM pg_trigger WHERE tgrelid = 'g_long'::regclass ORDER BY tgname;
SELECT pg_temp.try($$INSERT INTO g_long VALUES (1, 'pending_payment', 'authorized')$$) AS second_illegal;
INSERT INTO g_long VALUES (1, 'pending_payment', 'none');
SELECT idem_unguard('g_long', 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa1');
SELECT tgname FROM pg_trigger WHERE tgrelid = 'g_long'::regclass ORDER BY tgname;
DROP TABLE g_long;

--------------------------------------------------------------------------
-- Renaming and dropping
--------------------------------------------------------------------------

-- After renaming the column, UPDATEs are still checked (the triggers
-- refer to the column, not to its name); idem_guard on the new name
-- refreshes the guard, finding the old triggers by column, and so does
-- idem_unguard.
SELECT idem_guard('g_orders', 'status', 'g_order');
ALTER TABLE g_orders RENAME COLUMN status TO state;
UPDATE g_orders SET state = 'paid' WHERE id = 1;
SELECT pg_temp.try($$UPDATE g_orders SET state = 'pending_payment' WHERE id = 1$$) AS after_rename;
SELECT idem_guard('g_orders', 'state', 'g_order');
SELECT pg_temp.guards('g_orders');
SELECT pg_temp.try($$UPDATE g_orders SET state = 'pending_payment' WHERE id = 1$$) AS after_reguard;
ALTER TABLE g_orders RENAME COLUMN state TO status;
SELECT idem_unguard('g_orders', 'status');
SELECT count(*) AS left_over FROM pg_temp.guards('g_orders');

-- A machine in use cannot be dropped; dropping it behind the guard's back
-- (direct DELETE) makes writes fail with 42704 instead of passing.
SELECT idem_guard('g_orders', 'status', 'g_order');
\x on
SELECT * FROM pg_temp.err($$SELECT idem_machine_drop('g_order')$$);
\x off
BEGIN;
DELETE FROM idem_machines WHERE machine = 'g_order';
SELECT pg_temp.try($$UPDATE g_orders SET status = 'shipped' WHERE id = 1$$) AS machine_gone;
ROLLBACK;

-- The status column cannot be dropped without CASCADE, which drops the
-- guard with it.
SELECT pg_temp.try($$ALTER TABLE g_orders DROP COLUMN status$$) AS drop_column;
ALTER TABLE g_orders DROP COLUMN status CASCADE;
SELECT count(*) AS left_over FROM pg_temp.guards('g_orders');

-- Dropping a guarded table leaves no trigger; a new table of the same name
-- is not guarded, and can be guarded afresh in the same session.
SELECT idem_guard('g_loose', 'status', 'g_order', history => true);
UPDATE g_loose SET status = 'shipped' WHERE id = 2;
DROP TABLE g_loose;
SELECT count(*) AS triggers_left
FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid
WHERE p.proname = 'idem_guard_trigger' AND t.tgrelid NOT IN ('g_shipments'::regclass);
CREATE TABLE g_loose (id int PRIMARY KEY, status text);
INSERT INTO g_loose VALUES (1, 'anything');
SELECT idem_guard('g_loose', 'status', 'g_order', history => true);
INSERT INTO g_loose VALUES (2, 'pending_payment');
SELECT pg_temp.try($$INSERT INTO g_loose VALUES (3, 'anything')$$) AS guarded_again;
SELECT row_key, from_state, to_state FROM idem_transition_log
WHERE table_name = 'public.g_loose' ORDER BY id;

-- pg_dump keeps the definitions and the history (extension config
-- tables, with the history's sequence).
SELECT c.relname, c.relkind
FROM pg_extension e, unnest(e.extconfig) AS x(oid) JOIN pg_class c ON c.oid = x.oid
WHERE e.extname = 'idempotency' AND c.relname IN
      ('idem_machines', 'idem_transition_log', 'idem_transition_log_id_seq')
ORDER BY 1;

--------------------------------------------------------------------------
-- Dropping the extension (in a database of its own): refused while guards
-- exist, and CASCADE removes their triggers, leaving the tables.
--------------------------------------------------------------------------

\set regress_db :DBNAME
CREATE DATABASE idem_machine_guard_dropext;
\c idem_machine_guard_dropext
SET client_min_messages = warning;
CREATE EXTENSION idempotency;
SELECT idem_machine_define('m', '{"initial": ["a"], "transitions": {"a": ["b"]}}');
CREATE TABLE t (id int PRIMARY KEY, status text, version int NOT NULL DEFAULT 0);
SELECT idem_guard('t', 'status', 'm', 'version', true);
INSERT INTO t VALUES (1, 'a');
\set VERBOSITY terse
DROP EXTENSION idempotency;
\set VERBOSITY default
DROP EXTENSION idempotency CASCADE;
SELECT count(*) AS triggers_left FROM pg_trigger WHERE tgrelid = 't'::regclass;
UPDATE t SET status = 'anything';
SELECT id, status, version FROM t;
\c :regress_db
DROP DATABASE idem_machine_guard_dropext;

--------------------------------------------------------------------------
-- Clean up
--------------------------------------------------------------------------

DROP TABLE g_orders, g_shipments, g_loose;
DROP FUNCTION g_noop();
DELETE FROM idem_transition_log WHERE table_name IN
    ('public.g_shipments', 'public.g_nokey', 'public.g_loose', 'public.g_long')
    OR table_name LIKE '"g s;chema".%';
SELECT idem_machine_drop('g_order');
SELECT idem_machine_drop('g_payment');
DROP ROLE idem_guard_test_role;
SELECT count(*) AS machines_left FROM idem_machines WHERE machine LIKE 'g\_%';
SELECT count(*) AS history_left FROM idem_transition_log WHERE table_name LIKE '%g\_%';
