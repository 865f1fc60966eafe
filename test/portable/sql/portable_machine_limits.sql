-- The size limits of a state machine on the portable edition (listed in
-- sql/portable/exceptions.txt: test/sql/machine_limits.sql, whose machine
-- at the limits is too slow to check there): the same 54000 errors, with
-- the counts and the limit, from idem_machine_define and from a direct
-- write to idem_machines, and the same bounded lists of states in
-- messages ("and N more").  The statements are machine_limits.sql's, so
-- the expected output is that test's for them.
-- Creates machines and a table starting with "l_" and drops them.

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

-- The definitions, built once: "s0" .. "s99999", each with the next ten
-- around the ring as targets ("s99999": "s0" .. "s9"), "s0" initial.
CREATE TEMP TABLE l_defs (name text PRIMARY KEY, def jsonb NOT NULL);
INSERT INTO l_defs
SELECT 'at_limit',
       ('{"initial": ["s0"], "transitions": {'
        || string_agg(format('"s%s": ["s%s", "s%s", "s%s", "s%s", "s%s", "s%s", "s%s", "s%s", "s%s", "s%s"]', i,
                             (i + 1) % 100000, (i + 2) % 100000, (i + 3) % 100000,
                             (i + 4) % 100000, (i + 5) % 100000, (i + 6) % 100000,
                             (i + 7) % 100000, (i + 8) % 100000, (i + 9) % 100000,
                             (i + 10) % 100000), ', ')
        || '}}')::jsonb
FROM generate_series(0, 99999) i;
-- One transition more: "s0" gets an eleventh target.
INSERT INTO l_defs
SELECT 'transition_over',
       jsonb_set(def, '{transitions,s0}', (def #> '{transitions,s0}') || '["s500"]')
FROM l_defs WHERE name = 'at_limit';
-- One state more, and it is only a target: a chain "s0" -> ... ->
-- "s99999" -> "s100000" (100001 states, 100000 transitions).
INSERT INTO l_defs
SELECT 'state_over',
       jsonb_build_object('initial', '["s0"]'::jsonb,
                          'transitions', jsonb_object_agg('s' || i, jsonb_build_array('s' || (i + 1))))
FROM generate_series(0, 99999) i;
-- 100001 initial states; 100001 keys of "transitions".
INSERT INTO l_defs
SELECT 'initial_over',
       jsonb_build_object('initial', jsonb_agg('s' || i), 'transitions', '{}'::jsonb)
FROM generate_series(0, 100000) i;
INSERT INTO l_defs
SELECT 'keys_over',
       jsonb_build_object('initial', '["s0"]'::jsonb,
                          'transitions', jsonb_object_agg('s' || i, '[]'::jsonb))
FROM generate_series(0, 100000) i;

--------------------------------------------------------------------------
-- One beyond: 54000, nothing written.
--------------------------------------------------------------------------

\x on
SELECT d.name, e.*
FROM l_defs d,
     pg_temp.err(format('SELECT idem_machine_define(%L, def) FROM l_defs WHERE name = %L',
                        'l_over', d.name)) e
WHERE d.name <> 'at_limit'
ORDER BY d.name;
\x off
SELECT count(*) AS over_written FROM idem_machines WHERE machine = 'l_over';

-- A direct write to idem_machines is checked by the same rules.
SELECT d.name,
       pg_temp.try(format('INSERT INTO idem_machines (machine, definition) SELECT %L, def FROM l_defs WHERE name = %L',
                          'l_over', d.name)) AS direct_insert
FROM l_defs d WHERE d.name IN ('transition_over', 'state_over') ORDER BY d.name;
SELECT count(*) AS over_written FROM idem_machines WHERE machine = 'l_over';

--------------------------------------------------------------------------
-- Bounded lists in messages, on small machines.
--------------------------------------------------------------------------

-- 25 targets: the hint names 20, then "and 5 more"; 26 states.
SELECT idem_machine_define('l_wide', jsonb_build_object(
    'initial', (SELECT jsonb_agg(format('i%s', g)) FROM generate_series(10, 34) g),
    'transitions', jsonb_build_object(
        'hub', (SELECT jsonb_agg(format('t%s', g)) FROM generate_series(10, 34) g),
        'i10', '["hub"]'::jsonb)));
\x on
SELECT * FROM pg_temp.err($$SELECT idem_transition('l_wide', 'hub', 'i10')$$);
SELECT * FROM pg_temp.err($$SELECT idem_can_transition('l_wide', 'hub', 'nope')$$);
\x off

-- The initial states, in the message of a guard: 20 of the 25.
CREATE TABLE l_rows (id int PRIMARY KEY, status text);
SELECT idem_guard('l_rows', 'status', 'l_wide');
\x on
SELECT * FROM pg_temp.err($$INSERT INTO l_rows VALUES (1, 'hub')$$);
\x off
SELECT idem_unguard('l_rows', 'status');
DROP TABLE l_rows;

-- Long names: the list stops at about 1000 bytes, but names one.
SELECT idem_machine_define('l_long', jsonb_build_object(
    'initial', jsonb_build_array(repeat('a', 600)),
    'transitions', jsonb_build_object(
        repeat('a', 600), jsonb_build_array(repeat('b', 600), repeat('c', 600)),
        repeat('b', 600), '["d"]'::jsonb)));
SELECT length(e.detail) AS detail_bytes, left(e.detail, 40) AS detail_starts,
       right(e.detail, 16) AS detail_ends
FROM pg_temp.err($$SELECT idem_can_transition('l_long', 'd', 'nope')$$) e;
SELECT length(e.hint) AS hint_bytes, left(e.hint, 10) AS hint_starts,
       right(e.hint, 16) AS hint_ends
FROM pg_temp.err(format('SELECT idem_transition(%L, %L, %L)', 'l_long', repeat('a', 600), 'd')) e;

--------------------------------------------------------------------------
-- Duplicates are still found per source, whatever other sources list.
--------------------------------------------------------------------------

SET idem_test.try_detail = on;
SELECT pg_temp.try(d) AS result FROM (VALUES
    ($$SELECT idem_machine_define('l_dup', '{"initial": ["a"], "transitions": {"a": ["b", "c"], "b": ["c", "a"], "c": ["a", "b"]}}')$$),
    ($$SELECT idem_machine_define('l_dup', '{"initial": ["a"], "transitions": {"a": ["b", "c"], "b": ["c", "a", "d", "c"], "c": []}}')$$),
    ($$SELECT idem_machine_define('l_dup', '{"initial": ["a", "b", "a"], "transitions": {}}')$$)
) AS t(d);
RESET idem_test.try_detail;
SELECT idem_sources('l_dup', 'a') AS into_a, idem_sources('l_dup', 'c') AS into_c;

--------------------------------------------------------------------------
-- Clean up.
--------------------------------------------------------------------------

SELECT idem_machine_drop(m) FROM (VALUES ('l_wide'), ('l_long'), ('l_dup')) AS v(m);
SELECT count(*) AS machines_left FROM idem_machines WHERE machine LIKE 'l\_%';
