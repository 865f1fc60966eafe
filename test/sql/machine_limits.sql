-- The size of a machine (security finding 8): at most 100000 states and
-- 1000000 transitions; beyond, 54000 with the counts and the limit, from
-- idem_machine_define and from a direct write to idem_machines alike.  A
-- machine at both limits is defined and answered.  Messages that list
-- states name at most 20 of them (and about 1000 bytes), then "and N more".
--
-- Not tested here, because pg_regress cannot do it deterministically (no
-- timing assertions): that the compile is near-linear and cancellable.
-- machine_compile.c calls CHECK_FOR_INTERRUPTS in every loop over a definition's
-- elements; the figures (compile times, statement_timeout) are measured
-- by hand, see the header of src/machine_compile.c.
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

SELECT name,
       jsonb_array_length(def -> 'initial') AS initial,
       (SELECT count(*) FROM jsonb_object_keys(def -> 'transitions')) AS keys,
       (SELECT sum(jsonb_array_length(v)) FROM jsonb_each(def -> 'transitions') AS e(k, v)) AS transitions
FROM l_defs ORDER BY name;

--------------------------------------------------------------------------
-- At the limits: 100000 states, 1000000 transitions.
--------------------------------------------------------------------------

SELECT idem_machine_define('l_max', def) FROM l_defs WHERE name = 'at_limit';

SELECT idem_can_transition('l_max', 's0', 's1') AS first,
       idem_can_transition('l_max', 's0', 's10') AS tenth,
       idem_can_transition('l_max', 's0', 's11') AS eleventh,
       idem_can_transition('l_max', 's99999', 's0') AS around,
       idem_can_transition('l_max', 's99999', 's9') AS around_tenth,
       idem_can_transition('l_max', 's5', 's4') AS backwards,
       idem_transition('l_max', 's41', 's50') AS transition;

-- Every declared pair of a sample of sources is true, the neighbours
-- around it false.
SELECT count(*) FILTER (WHERE idem_can_transition('l_max', 's' || i, 's' || ((i + j + 100000) % 100000)))
           AS declared,
       count(*) FILTER (WHERE idem_can_transition('l_max', 's' || i, 's' || ((i + j + 100000) % 100000))
                        = (j BETWEEN 1 AND 10)) AS as_expected,
       count(*) AS pairs
FROM generate_series(0, 99999, 997) i, generate_series(-2, 13) j;

-- The ten sources of a state, in bytewise order.
SELECT idem_sources('l_max', 's5') AS into_s5;

-- Messages stay short: the hint lists the ten targets, the detail of an
-- unknown state 20 of the 100000 states.
\x on
SELECT * FROM pg_temp.err($$SELECT idem_transition('l_max', 's7', 's99')$$);
SELECT * FROM pg_temp.err($$SELECT idem_can_transition('l_max', 's7', 'nope')$$);
\x off

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
SELECT pg_temp.try($$UPDATE idem_machines SET definition = d.def FROM l_defs d
                     WHERE machine = 'l_max' AND d.name = 'transition_over'$$) AS direct_update;
SELECT count(*) AS over_written FROM idem_machines WHERE machine = 'l_over';
SELECT idem_can_transition('l_max', 's0', 's500') AS still_the_old_definition;

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

SELECT idem_machine_drop(m) FROM (VALUES ('l_max'), ('l_wide'), ('l_long'), ('l_dup')) AS v(m);
SELECT count(*) AS machines_left FROM idem_machines WHERE machine LIKE 'l\_%';
