-- State machines: idem_machine_define, idem_machine_drop,
-- idem_can_transition, idem_transition and idem_guard_allows; every error
-- with its SQLSTATE; the per-backend cache and its invalidation.
-- Creates machines whose names start with "t_" and drops them at the end.

\getenv abs_srcdir PG_ABS_SRCDIR
\set try_sql :abs_srcdir '/helpers/try.sql'
\i :try_sql

-- err(statement): SQLSTATE, message, detail and hint of its error.
CREATE FUNCTION pg_temp.err(stmt text, OUT code text, OUT message text,
                            OUT detail text, OUT hint text)
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE stmt;
    code := 'no error';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
                            detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
END
$$;

SELECT count(*) AS machines_before FROM idem_machines WHERE machine LIKE 't\_%';

--------------------------------------------------------------------------
-- Defining
--------------------------------------------------------------------------

SELECT idem_machine_define('t_order', '{
    "initial": ["pending_payment"],
    "transitions": {"pending_payment": ["paid", "cancelled"],
                    "paid": ["shipped", "refunded"],
                    "shipped": ["delivered"]}}');
SELECT machine, definition FROM idem_machines WHERE machine = 't_order';

-- idem_can_transition is true exactly for the declared pairs: every pair
-- of the six states, only the five declared ones are true.
WITH s(state) AS (VALUES ('pending_payment'), ('paid'), ('cancelled'),
                         ('shipped'), ('refunded'), ('delivered'))
SELECT f.state AS from_state, t.state AS to_state
FROM s f, s t
WHERE idem_can_transition('t_order', f.state, t.state)
ORDER BY 1, 2;
WITH s(state) AS (VALUES ('pending_payment'), ('paid'), ('cancelled'),
                         ('shipped'), ('refunded'), ('delivered'))
SELECT count(*) FILTER (WHERE idem_can_transition('t_order', f.state, t.state)) AS declared,
       count(*) FILTER (WHERE NOT idem_can_transition('t_order', f.state, t.state)) AS not_declared
FROM s f, s t;

-- idem_transition: the target when declared, the state itself when the
-- event repeats (from = to, even for a terminal state).
SELECT idem_transition('t_order', 'pending_payment', 'paid') AS declared,
       idem_transition('t_order', 'paid', 'paid') AS repeated,
       idem_transition('t_order', 'delivered', 'delivered') AS repeated_terminal;

-- An undeclared transition is ID004; the detail names machine, from and
-- to, the hint lists the allowed targets or says the state is terminal.
\x on
SELECT * FROM pg_temp.err($$SELECT idem_transition('t_order', 'paid', 'cancelled')$$);
SELECT * FROM pg_temp.err($$SELECT idem_transition('t_order', 'cancelled', 'paid')$$);
SELECT * FROM pg_temp.err($$SELECT idem_transition('t_order', 'pending_payment', 'delivered')$$);
-- Unknown state names: 22023, listing the states.
SELECT * FROM pg_temp.err($$SELECT idem_transition('t_order', 'paid', 'payed')$$);
SELECT * FROM pg_temp.err($$SELECT idem_can_transition('t_order', 'Paid', 'shipped')$$);
-- Unknown machine: 42704.
SELECT * FROM pg_temp.err($$SELECT idem_can_transition('t_nope', 'a', 'b')$$);
\x off

-- Every error of the checking functions.
SELECT pg_temp.try(s) AS result FROM (VALUES
    ($$SELECT idem_can_transition(NULL, 'paid', 'shipped')$$),
    ($$SELECT idem_transition(NULL, 'paid', 'shipped')$$),
    ($$SELECT idem_transition('t_order', NULL, 'paid')$$),
    ($$SELECT idem_transition('t_order', 'paid', NULL)$$),
    ($$SELECT idem_can_transition('', 'paid', 'shipped')$$),
    ($$SELECT idem_transition('', 'paid', 'shipped')$$),
    ($$SELECT idem_can_transition(repeat('m', 64), 'paid', 'shipped')$$),
    ($$SELECT idem_can_transition('t_nope', 'paid', 'shipped')$$),
    ($$SELECT idem_transition('t_nope', 'paid', 'shipped')$$),
    ($$SELECT idem_can_transition('t_order', 'paid', 'nope')$$),
    ($$SELECT idem_can_transition('t_order', 'nope', 'paid')$$),
    ($$SELECT idem_transition('t_order', 'nope', 'nope')$$),
    ($$SELECT idem_can_transition('t_order', '', 'paid')$$)
) AS t(s);

-- NULL states: idem_can_transition is false (NULL is no state, so nothing
-- is declared from or to it), for WHERE clauses over nullable columns.
SELECT idem_can_transition('t_order', NULL, 'paid') AS null_from,
       idem_can_transition('t_order', 'paid', NULL) AS null_to,
       idem_can_transition('t_order', NULL, NULL) AS both_null;
-- ... but the machine is still checked first.
SELECT pg_temp.try($$SELECT idem_can_transition('t_nope', NULL, NULL)$$) AS result;

-- idem_sources: the states from which a transition to the target is
-- declared, in bytewise order; empty for a state no transition enters.
SELECT v.to_state, idem_sources('t_order', v.to_state) AS sources
FROM (VALUES ('pending_payment'), ('paid'), ('cancelled'), ('shipped'),
             ('refunded'), ('delivered')) AS v(to_state)
ORDER BY 1;
SELECT idem_machine_define('t_multi', '{"initial": ["a"], "transitions": {"a": ["c"], "b": ["c"], "c": ["b", "c"]}}');
SELECT idem_sources('t_multi', 'c') AS into_c, idem_sources('t_multi', 'b') AS into_b;
SELECT idem_machine_drop('t_multi');
SELECT pg_temp.try(s) AS result FROM (VALUES
    ($$SELECT idem_sources(NULL, 'paid')$$),
    ($$SELECT idem_sources('t_order', NULL)$$),
    ($$SELECT idem_sources('t_nope', 'paid')$$),
    ($$SELECT idem_sources('t_order', 'nope')$$)
) AS t(s);

-- Machine names: 1 to 63 bytes, counted in bytes (é is two).
SELECT pg_temp.try(s) AS result FROM (VALUES
    ($$SELECT idem_machine_define(repeat('m', 63), '{"initial": ["a"], "transitions": {}}')$$),
    ($$SELECT idem_can_transition(repeat('m', 63), 'a', 'a')$$),
    ($$SELECT idem_machine_define(repeat('m', 64), '{"initial": ["a"], "transitions": {}}')$$),
    ($$SELECT idem_machine_define(repeat('é', 31) || 'mm', '{"initial": ["a"], "transitions": {}}')$$),
    ($$SELECT idem_machine_define('', '{"initial": ["a"], "transitions": {}}')$$),
    ($$SELECT idem_machine_define(NULL, '{"initial": ["a"], "transitions": {}}')$$),
    ($$SELECT idem_machine_define('t_x', NULL)$$),
    ($$SELECT idem_machine_drop(repeat('m', 63))$$),
    ($$SELECT idem_machine_drop(repeat('m', 64))$$),
    ($$SELECT idem_machine_drop('')$$),
    ($$SELECT idem_machine_drop(NULL)$$),
    ($$SELECT idem_machine_drop('t_nope')$$)
) AS t(s);

--------------------------------------------------------------------------
-- Malformed definitions: 22023 with a detail saying what is wrong, and
-- nothing written.
--------------------------------------------------------------------------

SELECT DISTINCT e.code, e.message, e.hint
FROM pg_temp.err($$SELECT idem_machine_define('t_bad', '[]')$$) e;
SELECT d AS definition, e.code, e.detail
FROM (VALUES
    ('[]'),
    ('"pending"'),
    ('42'),
    ('null'),
    ('{}'),
    ('{"initial": ["a"]}'),
    ('{"transitions": {}}'),
    ('{"initial": ["a"], "transitions": {}, "final": ["a"]}'),
    ('{"initial": "a", "transitions": {}}'),
    ('{"initial": [], "transitions": {}}'),
    ('{"initial": ["a", 1], "transitions": {}}'),
    ('{"initial": ["a", null], "transitions": {}}'),
    ('{"initial": [["a"]], "transitions": {}}'),
    ('{"initial": [""], "transitions": {}}'),
    ('{"initial": ["a", "a"], "transitions": {}}'),
    ('{"initial": ["a"], "transitions": []}'),
    ('{"initial": ["a"], "transitions": {"a": "b"}}'),
    ('{"initial": ["a"], "transitions": {"a": {"b": true}}}'),
    ('{"initial": ["a"], "transitions": {"a": ["b", true]}}'),
    ('{"initial": ["a"], "transitions": {"a": ["b", ""]}}'),
    ('{"initial": ["a"], "transitions": {"": ["a"]}}'),
    ('{"initial": ["a"], "transitions": {"a": ["b", "b"]}}'),
    ('{"initial": ["a"], "transitions": {"a": ["b"], "c": ["a"]}}'),
    ('{"initial": ["a"], "transitions": {"a": ["b"], "c": ["d"]}}'),
    ('{"initial": ["a"], "transitions": {"b": ["c"]}}')
) AS t(d), pg_temp.err(format('SELECT idem_machine_define(%L, %L)', 't_bad', d)) e;
SELECT count(*) AS bad_written FROM idem_machines WHERE machine = 't_bad';

-- Valid corner cases: several initial states, a self-transition (then
-- declared, so idem_can_transition says true), an explicit terminal state
-- with an empty list, a cycle, and states that are neither keys nor
-- initial but reachable.
SELECT idem_machine_define('t_corner', '{
    "initial": ["new", "imported"],
    "transitions": {"new": ["new", "open"], "imported": ["open"],
                    "open": ["closed", "archived"], "closed": ["open"],
                    "archived": []}}');
SELECT idem_can_transition('t_corner', 'new', 'new') AS declared_self,
       idem_can_transition('t_corner', 'open', 'open') AS undeclared_self,
       idem_transition('t_corner', 'open', 'open') AS repeated,
       idem_can_transition('t_corner', 'closed', 'open') AS cycle,
       idem_can_transition('t_corner', 'imported', 'open') AS second_initial;
\x on
SELECT * FROM pg_temp.err($$SELECT idem_transition('t_corner', 'archived', 'open')$$);
\x off

-- idem_guard_allows, the rule of a table guard: unchanged values (NULL
-- included) pass, NULL -> initial state passes, declared transitions
-- pass, and everything else is false, values that are not states too.
SELECT idem_guard_allows('t_order', 'paid', 'paid') AS same,
       idem_guard_allows('t_order', 'nope', 'nope') AS same_unknown,
       idem_guard_allows('t_order', NULL, NULL) AS both_null,
       idem_guard_allows('t_order', NULL, 'pending_payment') AS enter_initial,
       idem_guard_allows('t_order', NULL, 'paid') AS enter_other,
       idem_guard_allows('t_order', 'paid', 'shipped') AS declared,
       idem_guard_allows('t_order', 'paid', 'cancelled') AS undeclared,
       idem_guard_allows('t_order', 'paid', NULL) AS to_null,
       idem_guard_allows('t_order', 'paid', 'nope') AS to_unknown,
       idem_guard_allows('t_order', 'nope', 'paid') AS from_unknown;
SELECT pg_temp.try($$SELECT idem_guard_allows('t_nope', 'a', 'a')$$) AS result;

--------------------------------------------------------------------------
-- Redefinition replaces the machine, at once for this session; a failed
-- redefinition changes nothing; a rolled-back one is forgotten.
--------------------------------------------------------------------------

SELECT idem_machine_define('t_flow', '{"initial": ["a"], "transitions": {"a": ["b"]}}');
SELECT idem_can_transition('t_flow', 'a', 'b') AS a_b_v1;
SELECT idem_machine_define('t_flow', '{"initial": ["a"], "transitions": {"a": ["c"]}}');
SELECT idem_can_transition('t_flow', 'a', 'c') AS a_c_v2,
       pg_temp.try($$SELECT idem_can_transition('t_flow', 'a', 'b')$$) AS a_b_v2;
SELECT pg_temp.try($$SELECT idem_machine_define('t_flow', '{"initial": ["a"], "transitions": {"z": ["a"]}}')$$) AS failed;
SELECT idem_can_transition('t_flow', 'a', 'c') AS a_c_still,
       definition FROM idem_machines WHERE machine = 't_flow';

BEGIN;
SELECT idem_machine_define('t_flow', '{"initial": ["a"], "transitions": {"a": ["d"]}}');
SELECT idem_can_transition('t_flow', 'a', 'd') AS a_d_in_transaction;
ROLLBACK;
SELECT idem_can_transition('t_flow', 'a', 'c') AS a_c_after_rollback,
       pg_temp.try($$SELECT idem_can_transition('t_flow', 'a', 'd')$$) AS a_d_after_rollback;

-- The same inside one statement's transaction, without a command boundary
-- after the definition: the cache must not keep the rolled-back machine.
BEGIN;
SELECT idem_machine_define('t_flow', '{"initial": ["a"], "transitions": {"a": ["e"]}}'),
       idem_can_transition('t_flow', 'a', 'e') AS a_e_same_statement;
ROLLBACK;
SELECT pg_temp.try($$SELECT idem_can_transition('t_flow', 'a', 'e')$$) AS a_e_after_rollback;

-- Direct DML on idem_machines is validated by the same rules and
-- invalidates the cache like idem_machine_define does.
UPDATE idem_machines SET definition = '{"initial": ["a"], "transitions": {"a": ["f"]}}'
WHERE machine = 't_flow';
SELECT idem_can_transition('t_flow', 'a', 'f') AS a_f_direct_update;
SELECT pg_temp.try($$UPDATE idem_machines SET definition = '{"initial": ["a"]}' WHERE machine = 't_flow'$$) AS direct_malformed;
SELECT pg_temp.try($$INSERT INTO idem_machines (machine, definition) VALUES ('t_direct', '[1]')$$) AS direct_insert;
SELECT pg_temp.try($$INSERT INTO idem_machines (machine, definition) VALUES ('', '{"initial": ["a"], "transitions": {}}')$$) AS direct_empty_name;
DELETE FROM idem_machines WHERE machine = 't_flow';
SELECT pg_temp.try($$SELECT idem_can_transition('t_flow', 'a', 'f')$$) AS after_direct_delete;

--------------------------------------------------------------------------
-- The cache: once a machine is compiled, checks do not read idem_machines
-- (the table's scan counters of this transaction do not move).
--------------------------------------------------------------------------

SELECT idem_can_transition('t_order', 'paid', 'shipped') AS warm;
BEGIN;
CREATE TEMP TABLE scans AS
SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) AS n
FROM pg_stat_xact_user_tables WHERE relid = 'idem_machines'::regclass;
SELECT count(*) FILTER (WHERE idem_can_transition('t_order', 'paid', 'shipped')) AS checks,
       count(*) FILTER (WHERE idem_transition('t_order', 'paid', 'shipped') = 'shipped') AS transitions
FROM generate_series(1, 2000);
SELECT (SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0)
        FROM pg_stat_xact_user_tables WHERE relid = 'idem_machines'::regclass)
       - (SELECT n FROM scans) AS table_scans_during_4000_checks;
-- A redefinition is read once, then cached again.
SELECT idem_machine_define('t_order', (SELECT definition FROM idem_machines WHERE machine = 't_order'));
CREATE TEMP TABLE scans2 AS
SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) AS n
FROM pg_stat_xact_user_tables WHERE relid = 'idem_machines'::regclass;
SELECT count(*) FILTER (WHERE idem_can_transition('t_order', 'paid', 'shipped')) AS checks
FROM generate_series(1, 2000);
SELECT (SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0)
        FROM pg_stat_xact_user_tables WHERE relid = 'idem_machines'::regclass)
       - (SELECT n FROM scans2) AS table_scans_after_redefinition;
ROLLBACK;

-- Parallel workers compile the machine for themselves (PARALLEL SAFE).
CREATE TABLE t_par AS
SELECT g AS id, (ARRAY['pending_payment', 'paid', 'shipped'])[g % 3 + 1] AS status
FROM generate_series(1, 30000) g;
ANALYZE t_par;
BEGIN;
SET LOCAL parallel_setup_cost = 0;
SET LOCAL parallel_tuple_cost = 0;
SET LOCAL min_parallel_table_scan_size = 0;
SET LOCAL max_parallel_workers_per_gather = 2;
SELECT count(*) FILTER (WHERE idem_can_transition('t_order', status, 'paid')) AS can_pay,
       count(*) FILTER (WHERE idem_can_transition('t_order', status, 'shipped')) AS can_ship
FROM t_par;
ROLLBACK;
DROP TABLE t_par;

--------------------------------------------------------------------------
-- Read-only transactions (25006) and a hostile search_path.
--------------------------------------------------------------------------

BEGIN READ ONLY;
SELECT idem_can_transition('t_order', 'paid', 'shipped') AS read_only_check,
       idem_transition('t_order', 'paid', 'shipped') AS read_only_transition;
SELECT pg_temp.try($$SELECT idem_machine_define('t_ro', '{"initial": ["a"], "transitions": {}}')$$) AS define;
ROLLBACK;
BEGIN READ ONLY;
SELECT pg_temp.try($$SELECT idem_machine_drop('t_order')$$) AS drop;
ROLLBACK;

CREATE SCHEMA t_evil;
CREATE TABLE t_evil.idem_machines (machine text, definition jsonb);
INSERT INTO t_evil.idem_machines VALUES ('t_order', '{"initial": ["x"], "transitions": {"x": ["y"]}}');
CREATE FUNCTION t_evil.texteq_always(text, text) RETURNS boolean
    LANGUAGE sql IMMUTABLE AS 'SELECT true';
CREATE OPERATOR t_evil.= (LEFTARG = text, RIGHTARG = text, PROCEDURE = t_evil.texteq_always);
SET search_path = t_evil, pg_catalog, public;
SELECT public.idem_can_transition('t_order', 'paid', 'shipped') AS real_definition,
       public.idem_transition('t_order', 'paid', 'refunded') AS real_transition;
SELECT public.idem_machine_define('t_evil_test', '{"initial": ["a"], "transitions": {"a": ["b"]}}');
SELECT public.idem_can_transition('t_evil_test', 'a', 'b') AS defined_in_real_table;
SELECT public.idem_machine_drop('t_evil_test');
RESET search_path;
SELECT count(*) AS evil_rows FROM t_evil.idem_machines;
DROP SCHEMA t_evil CASCADE;

--------------------------------------------------------------------------
-- Privileges: definitions are readable by everybody, so any role can
-- check; defining and dropping are not public.
--------------------------------------------------------------------------

CREATE ROLE idem_machine_test_role;
SET ROLE idem_machine_test_role;
SELECT idem_can_transition('t_order', 'paid', 'shipped') AS unprivileged_check;
SELECT pg_temp.try($$SELECT idem_machine_define('t_priv', '{"initial": ["a"], "transitions": {}}')$$) AS define;
SELECT pg_temp.try($$SELECT idem_machine_drop('t_order')$$) AS drop;
SELECT pg_temp.try($$DELETE FROM idem_machines$$) AS direct_delete;
RESET ROLE;
DROP ROLE idem_machine_test_role;

--------------------------------------------------------------------------
-- Dropping
--------------------------------------------------------------------------

SELECT idem_machine_drop('t_order');
SELECT pg_temp.try($$SELECT idem_can_transition('t_order', 'paid', 'shipped')$$) AS after_drop,
       pg_temp.try($$SELECT idem_machine_drop('t_order')$$) AS drop_again;
SELECT idem_machine_drop('t_corner');
SELECT count(*) AS machines_after FROM idem_machines WHERE machine LIKE 't\_%' OR machine = repeat('m', 63);
