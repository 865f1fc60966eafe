-- Portable bodies (docs/managed.md) of the state machines of
-- sql/idempotency_machine.sql, whose C is src/machine.c (validating a
-- definition), src/machine_cache.c (reading it, and the trigger on
-- idem_machines) and src/transition.c (the questions).  Rules of the
-- bodies: see records.sql.
--
-- No compiled form, no cache: every call reads the definition from
-- idem_machines (one index probe) and answers with jsonb operators, which
-- compare names bytewise as the C does:
--   - a declared transition from -> to:  definition->'transitions'->from ? to
--   - an initial state:                  definition->'initial' ? s
--   - a state at all (only on the way to an error, where the C would name
--     it "not a state"): initial, a key of "transitions", or a target.
-- So a check costs what reading one row costs, whatever the machine's
-- size for a small machine; a machine of thousands of states is read
-- (detoasted) whole at every call: see docs/managed.md.
-- Visibility: the definition is read with the caller's snapshot (a STABLE
-- function cannot take a newer one); the C edition reads the latest
-- committed definition when its cache is invalidated.  Listed in
-- exceptions.txt (behaviour machine-snapshot).
-- Messages, details, hints and the order of checks are src/machine.c's;
-- lists of states name at most 20 of them (and about 1000 bytes), then
-- "and N more", as its append_state_list.

-- machine_name_check: the machine name mname (not NULL) is 1 to 63 bytes
-- (src/machine.c, idem_check_machine_name); fname names the caller.
-- portable-fragment: machine_name_check
FRAGMENT AS $$
IF pg_catalog.octet_length(mname) OPERATOR(pg_catalog.=) 0 THEN
    RAISE EXCEPTION '%: machine name must not be empty', fname USING ERRCODE = '22023';
END IF;
IF pg_catalog.octet_length(mname) OPERATOR(pg_catalog.>) 63 THEN
    RAISE EXCEPTION '%: machine name is too long', fname
        USING ERRCODE = '22001',
              DETAIL = pg_catalog.format('The name is %s bytes; the limit is %s bytes.',
                                         pg_catalog.octet_length(mname), 63);
END IF;
$$;

-- machine_load: def := the definition of machine mname (checked by
-- machine_name_check), from idem_machines; 55000 when a DBA retyped the
-- column, 42704 when there is none (src/machine_cache.c, machine_load).
-- portable-fragment: machine_load
FRAGMENT AS $$
DECLARE
    _type pg_catalog.regtype;
BEGIN
    -- #> '{}' is the value itself, detoasted once here rather than at
    -- every use; a column retyped to json is assigned through its cast,
    -- then refused.
    SELECT pg_catalog.pg_typeof(m.definition), m.definition OPERATOR(pg_catalog.#>) '{}'::pg_catalog.text[]
      INTO _type, def
      FROM @extschema@.idem_machines AS m
     WHERE m.machine OPERATOR(pg_catalog.=) (mname COLLATE pg_catalog."C");
    IF NOT FOUND OR def IS NULL THEN
        RAISE EXCEPTION '%: machine "%" does not exist', fname, mname
            USING ERRCODE = '42704', HINT = 'Define it with idem_machine_define().';
    END IF;
    IF _type OPERATOR(pg_catalog.<>) 'pg_catalog.jsonb'::pg_catalog.regtype THEN
        RAISE EXCEPTION '%: column "definition" of idem_machines is not of type jsonb', fname
            USING ERRCODE = '55000',
                  DETAIL = pg_catalog.format('The column is of type %s; the extension reads it as the install script made it.',
                                             pg_catalog.format_type(_type, NULL)),
                  HINT = 'Restore the column: ALTER TABLE idem_machines ALTER definition TYPE jsonb USING definition::jsonb.';
    END IF;
END;
$$;

-- state_list: _list := the names _names (the first 21 of a list of
-- _total names, in order), quoted and comma-separated: at most 20 of them,
-- none more once the list would pass 1000 bytes (the first is always
-- there), then " and N more" (src/machine.c, append_state_list).
-- portable-fragment: state_list
FRAGMENT AS $$
_list := '';
FOR _i IN 1 .. COALESCE(pg_catalog.array_length(_names, 1), 0) LOOP
    IF _i OPERATOR(pg_catalog.>) 1
       AND (_i OPERATOR(pg_catalog.>) 20
            OR pg_catalog.octet_length(_list) OPERATOR(pg_catalog.+) pg_catalog.octet_length(_names[_i])
               OPERATOR(pg_catalog.+) 4 OPERATOR(pg_catalog.>) 1000) THEN
        _list := _list OPERATOR(pg_catalog.||) pg_catalog.format(' and %s more', _total OPERATOR(pg_catalog.-) (_i OPERATOR(pg_catalog.-) 1));
        EXIT;
    END IF;
    _list := _list OPERATOR(pg_catalog.||) CASE WHEN _i OPERATOR(pg_catalog.>) 1 THEN ', ' ELSE '' END
             OPERATOR(pg_catalog.||) '"' OPERATOR(pg_catalog.||) _names[_i] OPERATOR(pg_catalog.||) '"';
END LOOP;
$$;

-- all_states: _list := every state of def, bytewise order (state_list).
-- portable-fragment: all_states
FRAGMENT AS $$
SELECT pg_catalog.count(*),
       (pg_catalog.array_agg(s.name ORDER BY s.name COLLATE pg_catalog."C"))[1:21]
  INTO _total, _names
  FROM (SELECT i.x AS name FROM pg_catalog.jsonb_array_elements_text(def OPERATOR(pg_catalog.->) 'initial') AS i(x)
        UNION
        SELECT k.x FROM pg_catalog.jsonb_object_keys(def OPERATOR(pg_catalog.->) 'transitions') AS k(x)
        UNION
        SELECT t.x FROM pg_catalog.jsonb_each(def OPERATOR(pg_catalog.->) 'transitions') AS e(k, v),
                        pg_catalog.jsonb_array_elements_text(e.v) AS t(x)) AS s;
@@state_list@@
$$;

-- state_check: 22023 unless _state (not NULL) is a state of def, the
-- machine mname ("not a state", listing the states).
-- portable-fragment: state_check
FRAGMENT AS $$
IF NOT ((def OPERATOR(pg_catalog.->) 'initial') OPERATOR(pg_catalog.?) _state
        OR (def OPERATOR(pg_catalog.#>) ARRAY['transitions', _state]) IS NOT NULL
        OR pg_catalog.jsonb_path_exists(def, 'strict $.transitions.*[*] ? (@ == $s)',
                                        pg_catalog.jsonb_build_object('s', _state), true)) THEN
    DECLARE
        _names pg_catalog.text[];
        _total pg_catalog.int8;
        _list pg_catalog.text;
    BEGIN
        @@all_states@@
        RAISE EXCEPTION '%: "%" is not a state of machine "%"', fname, _state, mname
            USING ERRCODE = '22023',
                  DETAIL = pg_catalog.format('The states of machine "%s" are %s.', mname, _list);
    END;
END IF;
$$;

-- targets_hint: _hint := the sentence naming the targets of state _from
-- of def, in declared order, or saying that it is terminal
-- (src/machine.c, idem_machine_targets_hint).
-- portable-fragment: targets_hint
FRAGMENT AS $$
DECLARE
    _names pg_catalog.text[];
    _total pg_catalog.int8;
    _list pg_catalog.text;
    _targets pg_catalog.jsonb := def OPERATOR(pg_catalog.#>) ARRAY['transitions', _from];
BEGIN
    _total := COALESCE(pg_catalog.jsonb_array_length(_targets), 0);
    IF _total OPERATOR(pg_catalog.=) 0 THEN
        _hint := pg_catalog.format('"%s" is a terminal state of machine "%s": no transition leaves it.', _from, mname);
    ELSE
        _names := ARRAY(SELECT t.x FROM pg_catalog.jsonb_array_elements_text(_targets) WITH ORDINALITY AS t(x, n)
                         ORDER BY t.n LIMIT 21);
        @@state_list@@
        _hint := pg_catalog.format('From "%s" the allowed targets are %s.', _from, _list);
    END IF;
END;
$$;

-- machine_compile: validate def, the definition of machine mname, as
-- src/machine.c's idem_machine_compile does, with the same order of
-- checks (and so the same first complaint): the form from the top down,
-- the size limits (54000: 100000 states, 1000000 transitions, counted
-- from the array and object sizes first), duplicates, reachability.
-- Each check is one set-based query over the jsonb: near-linear in the
-- definition's size, and cancellable (statement_timeout).
-- portable-fragment: machine_compile
FRAGMENT AS $$
DECLARE
    _kind pg_catalog.text;
    _key pg_catalog.text;
    _init pg_catalog.jsonb;
    _trans pg_catalog.jsonb;
    _n pg_catalog.int8;
    _ntrans pg_catalog.int8;
    _pos pg_catalog.int8;
    _name pg_catalog.text;
    _name2 pg_catalog.text;
    _detail pg_catalog.text;
BEGIN
    _kind := pg_catalog.jsonb_typeof(def);
    IF _kind OPERATOR(pg_catalog.<>) 'object' THEN
        _detail := pg_catalog.format('The definition is a JSON %s; it must be an object.', _kind);
    END IF;
    IF _detail IS NULL THEN
        SELECT k.k INTO _key
          FROM pg_catalog.jsonb_object_keys(def) WITH ORDINALITY AS k(k, n)
         WHERE k.k COLLATE pg_catalog."C" OPERATOR(pg_catalog.<>) 'initial'
           AND k.k COLLATE pg_catalog."C" OPERATOR(pg_catalog.<>) 'transitions'
         ORDER BY k.n LIMIT 1;
        IF FOUND THEN
            _detail := pg_catalog.format('The key "%s" is not allowed; a definition has exactly the keys "initial" and "transitions".', _key);
        ELSIF NOT def OPERATOR(pg_catalog.?) 'initial' THEN
            _detail := 'The definition has no "initial" key.';
        ELSIF NOT def OPERATOR(pg_catalog.?) 'transitions' THEN
            _detail := 'The definition has no "transitions" key.';
        END IF;
    END IF;
    IF _detail IS NULL THEN
        _init := def OPERATOR(pg_catalog.->) 'initial';
        _trans := def OPERATOR(pg_catalog.->) 'transitions';
        IF pg_catalog.jsonb_typeof(_init) OPERATOR(pg_catalog.<>) 'array' THEN
            _detail := pg_catalog.format('"initial" must be an array of state names, not a JSON %s.', pg_catalog.jsonb_typeof(_init));
        END IF;
    END IF;
    IF _detail IS NULL THEN
        _n := pg_catalog.jsonb_array_length(_init);
        IF _n OPERATOR(pg_catalog.>) 100000 THEN
            RAISE EXCEPTION '%: machine "%" has too many states', fname, mname
                USING ERRCODE = '54000',
                      DETAIL = pg_catalog.format('The machine has at least %s states; the limit is %s states.', _n, 100000);
        END IF;
        SELECT a.n, pg_catalog.jsonb_typeof(a.x) INTO _pos, _kind
          FROM pg_catalog.jsonb_array_elements(_init) WITH ORDINALITY AS a(x, n)
         WHERE pg_catalog.jsonb_typeof(a.x) OPERATOR(pg_catalog.<>) 'string' OR a.x OPERATOR(pg_catalog.=) '""'::pg_catalog.jsonb
         ORDER BY a.n LIMIT 1;
        IF FOUND AND _kind OPERATOR(pg_catalog.<>) 'string' THEN
            _detail := pg_catalog.format('"initial" must contain only strings; element %s is a JSON %s.', _pos, _kind);
        ELSIF FOUND THEN
            _detail := '"initial" must not contain an empty state name.';
        ELSIF _n OPERATOR(pg_catalog.=) 0 THEN
            _detail := '"initial" must name at least one state.';
        ELSIF pg_catalog.jsonb_typeof(_trans) OPERATOR(pg_catalog.<>) 'object' THEN
            _detail := pg_catalog.format('"transitions" must be an object mapping each state to an array of target states, not a JSON %s.',
                                         pg_catalog.jsonb_typeof(_trans));
        END IF;
    END IF;
    IF _detail IS NULL THEN
        SELECT pg_catalog.count(*),
               COALESCE(pg_catalog.sum(pg_catalog.jsonb_array_length(e.v))
                        FILTER (WHERE pg_catalog.jsonb_typeof(e.v) OPERATOR(pg_catalog.=) 'array'), 0)
          INTO _n, _ntrans
          FROM pg_catalog.jsonb_each(_trans) AS e(k, v);
        IF _n OPERATOR(pg_catalog.>) 100000 THEN
            RAISE EXCEPTION '%: machine "%" has too many states', fname, mname
                USING ERRCODE = '54000',
                      DETAIL = pg_catalog.format('The machine has at least %s states; the limit is %s states.', _n, 100000);
        END IF;
        IF _ntrans OPERATOR(pg_catalog.>) 1000000 THEN
            RAISE EXCEPTION '%: machine "%" has too many transitions', fname, mname
                USING ERRCODE = '54000',
                      DETAIL = pg_catalog.format('The machine declares %s transitions; the limit is %s transitions.', _ntrans, 1000000);
        END IF;
        -- The first key (in the jsonb's order, as the C iterates) with a
        -- problem: an empty name, a value that is no array, an element
        -- that is no string or is empty; looked for only when a scan of
        -- the whole says there is one (the text of an array of non-empty
        -- strings: ["a", "b\"c"]).
        IF _trans OPERATOR(pg_catalog.?) ''
           OR EXISTS (SELECT FROM pg_catalog.jsonb_each(_trans) AS e(k, v)
                       WHERE e.v::pg_catalog.text OPERATOR(pg_catalog.!~)
                             '^\[("([^"\\]|\\.)+"(, "([^"\\]|\\.)+")*)?\]$') THEN
        SELECT e.k, pg_catalog.jsonb_typeof(e.v), b.n, b.t INTO _name, _kind, _pos, _key
          FROM pg_catalog.jsonb_each(_trans) WITH ORDINALITY AS e(k, v, n)
          LEFT JOIN LATERAL
               (SELECT a.n, pg_catalog.jsonb_typeof(a.x) AS t
                  FROM pg_catalog.jsonb_array_elements(CASE WHEN pg_catalog.jsonb_typeof(e.v) OPERATOR(pg_catalog.=) 'array'
                                                       THEN e.v END) WITH ORDINALITY AS a(x, n)
                 WHERE pg_catalog.jsonb_typeof(a.x) OPERATOR(pg_catalog.<>) 'string' OR a.x OPERATOR(pg_catalog.=) '""'::pg_catalog.jsonb
                 ORDER BY a.n LIMIT 1) AS b ON true
         WHERE e.k OPERATOR(pg_catalog.=) '' OR pg_catalog.jsonb_typeof(e.v) OPERATOR(pg_catalog.<>) 'array' OR b.n IS NOT NULL
         ORDER BY e.n LIMIT 1;
        IF FOUND THEN
            IF _name OPERATOR(pg_catalog.=) '' THEN
                _detail := '"transitions" has an empty state name as a key.';
            ELSIF _kind OPERATOR(pg_catalog.<>) 'array' THEN
                _detail := pg_catalog.format('The targets of state "%s" must be an array of state names, not a JSON %s.', _name, _kind);
            ELSIF _key OPERATOR(pg_catalog.<>) 'string' THEN
                _detail := pg_catalog.format('The targets of state "%s" must contain only strings; element %s is a JSON %s.', _name, _pos, _key);
            ELSE
                _detail := pg_catalog.format('The targets of state "%s" must not contain an empty state name.', _name);
            END IF;
        END IF;
        END IF;
    END IF;
    IF _detail IS NULL THEN
        -- Every name once (src/machine.c, draft_intern).
        SELECT pg_catalog.count(*) INTO _n
          FROM (SELECT i.x FROM pg_catalog.jsonb_array_elements_text(_init) AS i(x)
                UNION
                SELECT k.x FROM pg_catalog.jsonb_object_keys(_trans) AS k(x)
                UNION
                SELECT t.x FROM pg_catalog.jsonb_each(_trans) AS e(k, v),
                                pg_catalog.jsonb_array_elements_text(e.v) AS t(x)) AS s;
        IF _n OPERATOR(pg_catalog.>) 100000 THEN
            RAISE EXCEPTION '%: machine "%" has too many states', fname, mname
                USING ERRCODE = '54000',
                      DETAIL = pg_catalog.format('The machine has %s states; the limit is %s states.', _n, 100000);
        END IF;
        -- Duplicates: in "initial", then per key (src/machine.c,
        -- draft_check_duplicates), the first in declared order.
        SELECT d.x INTO _name
          FROM (SELECT i.x, i.n, pg_catalog.row_number() OVER (PARTITION BY i.x COLLATE pg_catalog."C" ORDER BY i.n) AS r
                  FROM pg_catalog.jsonb_array_elements_text(_init) WITH ORDINALITY AS i(x, n)) AS d
         WHERE d.r OPERATOR(pg_catalog.=) 2
         ORDER BY d.n LIMIT 1;
        IF FOUND THEN
            _detail := pg_catalog.format('The state "%s" appears twice in "initial".', _name);
        END IF;
    END IF;
    IF _detail IS NULL AND EXISTS (
           SELECT FROM pg_catalog.jsonb_each(_trans) AS e(k, v)
            WHERE pg_catalog.jsonb_array_length(e.v) OPERATOR(pg_catalog.<>)
                  (SELECT pg_catalog.count(DISTINCT t.x COLLATE pg_catalog."C")
                     FROM pg_catalog.jsonb_array_elements_text(e.v) AS t(x))) THEN
        SELECT d.k, d.x INTO _name, _name2
          FROM (SELECT e.n AS kn, e.k, t.x, t.n,
                       pg_catalog.row_number() OVER (PARTITION BY e.n, t.x COLLATE pg_catalog."C" ORDER BY t.n) AS r
                  FROM pg_catalog.jsonb_each(_trans) WITH ORDINALITY AS e(k, v, n),
                       pg_catalog.jsonb_array_elements_text(e.v) WITH ORDINALITY AS t(x, n)) AS d
         WHERE d.r OPERATOR(pg_catalog.=) 2
         ORDER BY d.kn, d.n LIMIT 1;
        IF FOUND THEN
            _detail := pg_catalog.format('The state "%s" lists the target "%s" twice.', _name, _name2);
        END IF;
    END IF;
    IF _detail IS NULL THEN
        -- Every state initial or reachable (src/machine.c,
        -- draft_check_reachable): the first that is not, bytewise.  The
        -- search follows each reached state's targets by key lookup.
        WITH RECURSIVE reach(s) AS (
            SELECT i.x FROM pg_catalog.jsonb_array_elements_text(_init) AS i(x)
            UNION
            SELECT t.x FROM reach AS r,
                   pg_catalog.jsonb_array_elements_text(_trans OPERATOR(pg_catalog.->) r.s) AS t(x)
        ), states(s) AS (
            SELECT k.x FROM pg_catalog.jsonb_object_keys(_trans) AS k(x)
            UNION
            SELECT t.x FROM pg_catalog.jsonb_each(_trans) AS e(k, v),
                            pg_catalog.jsonb_array_elements_text(e.v) AS t(x)
        )
        SELECT s.s INTO _name
          FROM states AS s
         WHERE NOT EXISTS (SELECT FROM reach AS r WHERE r.s OPERATOR(pg_catalog.=) s.s)
         ORDER BY s.s COLLATE pg_catalog."C" LIMIT 1;
        IF FOUND THEN
            _detail := pg_catalog.format('The state "%s" is neither initial nor reachable from an initial state.', _name);
        END IF;
    END IF;
    IF _detail IS NOT NULL THEN
        RAISE EXCEPTION '%: malformed definition of machine "%"', fname, mname
            USING ERRCODE = '22023', DETAIL = _detail,
                  HINT = 'A definition looks like {"initial": ["a"], "transitions": {"a": ["b"], "b": []}}.';
    END IF;
END;
$$;

-- idem_machines_trigger (src/machine_cache.c): on the extension's
-- idem_machines only (39P01 elsewhere), with its columns' types; row
-- level BEFORE INSERT OR UPDATE: validates the new row's definition as
-- idem_machine_define does (NULLs are left to the NOT NULL
-- constraints); statement level: nothing to do (there is no cache to
-- invalidate: every call reads the table).
-- portable: idem_machines_trigger
LANGUAGE plpgsql
AS $$
DECLARE
    fname pg_catalog.text := 'idem_machines';
    mname pg_catalog.text;
    def pg_catalog.jsonb;
BEGIN
    IF TG_RELID OPERATOR(pg_catalog.<>) '@extschema@.idem_machines'::pg_catalog.regclass
       OR EXISTS (SELECT FROM pg_catalog.pg_extension AS x
                   WHERE x.extname OPERATOR(pg_catalog.=) 'idempotency'
                     AND NOT EXISTS (SELECT FROM pg_catalog.pg_depend AS d
                                      WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
                                        AND d.objid OPERATOR(pg_catalog.=) TG_RELID
                                        AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
                                        AND d.refobjid OPERATOR(pg_catalog.=) x.oid
                                        AND d.deptype OPERATOR(pg_catalog.=) 'e')) THEN
        RAISE EXCEPTION 'idem_machines_trigger: may fire only on the extension''s table idem_machines'
            USING ERRCODE = '39P01',
                  DETAIL = pg_catalog.format('Trigger "%s" fired on table "%s".', TG_NAME, TG_TABLE_NAME),
                  HINT = 'Drop the trigger; define state machines with idem_machine_define().';
    END IF;
    IF (SELECT pg_catalog.count(*) FROM pg_catalog.pg_attribute AS a
         WHERE a.attrelid OPERATOR(pg_catalog.=) TG_RELID AND NOT a.attisdropped
           AND ((a.attname OPERATOR(pg_catalog.=) 'machine' AND a.atttypid OPERATOR(pg_catalog.=) 'pg_catalog.text'::pg_catalog.regtype)
                OR (a.attname OPERATOR(pg_catalog.=) 'definition' AND a.atttypid OPERATOR(pg_catalog.=) 'pg_catalog.jsonb'::pg_catalog.regtype)))
       OPERATOR(pg_catalog.<>) 2 THEN
        RAISE EXCEPTION 'idem_machines_trigger: table idem_machines has lost its machine text or definition jsonb column'
            USING ERRCODE = '39P01',
                  HINT = 'Reinstall the extension, or restore idem_machines from a dump.';
    END IF;
    IF TG_LEVEL OPERATOR(pg_catalog.=) 'STATEMENT' THEN
        RETURN NULL;
    END IF;
    IF TG_WHEN OPERATOR(pg_catalog.=) 'BEFORE' AND TG_OP OPERATOR(pg_catalog.=) ANY ('{INSERT,UPDATE}'::pg_catalog.text[]) THEN
        mname := NEW.machine;
        def := NEW.definition OPERATOR(pg_catalog.#>) '{}'::pg_catalog.text[];
        IF mname IS NOT NULL AND def IS NOT NULL THEN
            @@machine_name_check@@
            @@machine_compile@@
        END IF;
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'idem_machines_trigger: unsupported trigger event' USING ERRCODE = '39P01';
END
$$;

-- idem_machine_define (src/transition.c): validated completely first,
-- then written in one statement (INSERT ... ON CONFLICT DO UPDATE, whose
-- row trigger validates it again, as in the C edition).
-- portable: idem_machine_define
LANGUAGE plpgsql
AS $$
DECLARE
    fname pg_catalog.text := 'idem_machine_define';
    mname pg_catalog.text := machine;
    def pg_catalog.jsonb := definition OPERATOR(pg_catalog.#>) '{}'::pg_catalog.text[];
BEGIN
    IF mname IS NULL THEN
        RAISE EXCEPTION 'idem_machine_define: machine must not be null' USING ERRCODE = '22004';
    END IF;
    @@machine_name_check@@
    IF def IS NULL THEN
        RAISE EXCEPTION 'idem_machine_define: definition must not be null' USING ERRCODE = '22004';
    END IF;
    @@machine_compile@@
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idem_machine_define() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    INSERT INTO @extschema@.idem_machines AS m (machine, definition, updated_at)
    VALUES (mname, def, pg_catalog.now())
    ON CONFLICT ON CONSTRAINT idem_machines_pkey DO UPDATE
       SET definition = EXCLUDED.definition, updated_at = EXCLUDED.updated_at;
END
$$;

-- idem_machine_drop (src/transition.c): delete first, then look for the
-- guards that use the machine (a concurrent idem_guard that committed
-- while the DELETE waited for the row is then seen, READ COMMITTED);
-- only real guards count (guard.sql, guard_is_real).
-- portable: idem_machine_drop
LANGUAGE plpgsql
AS $$
DECLARE
    fname pg_catalog.text := 'idem_machine_drop';
    mname pg_catalog.text := machine;
    users pg_catalog.text;
BEGIN
    IF mname IS NULL THEN
        RAISE EXCEPTION 'idem_machine_drop: machine must not be null' USING ERRCODE = '22004';
    END IF;
    @@machine_name_check@@
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idem_machine_drop() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    DELETE FROM @extschema@.idem_machines AS m
     WHERE m.machine OPERATOR(pg_catalog.=) (mname COLLATE pg_catalog."C");
    IF NOT FOUND THEN
        RAISE EXCEPTION 'idem_machine_drop: machine "%" does not exist', mname USING ERRCODE = '42704';
    END IF;
    @@guards_of_machine@@
    IF users IS NOT NULL THEN
        RAISE EXCEPTION 'idem_machine_drop: machine "%" is used by guards', mname
            USING ERRCODE = '2BP01',
                  DETAIL = pg_catalog.format('Machine "%s" is enforced on %s.', mname, users),
                  HINT = 'Remove the guards with idem_unguard() first.';
    END IF;
END
$$;

-- idem_can_transition (src/transition.c): a declared transition is
-- answered by one key lookup; otherwise both states are checked (22023),
-- from_state first.
-- portable: idem_can_transition
LANGUAGE plpgsql
AS $$
DECLARE
    fname pg_catalog.text := 'idem_can_transition';
    mname pg_catalog.text := machine;
    def pg_catalog.jsonb;
    _state pg_catalog.text;
BEGIN
    IF mname IS NULL THEN
        RAISE EXCEPTION 'idem_can_transition: machine must not be null' USING ERRCODE = '22004';
    END IF;
    @@machine_name_check@@
    @@machine_load@@
    IF from_state IS NULL OR to_state IS NULL THEN
        RETURN false;
    END IF;
    IF (def OPERATOR(pg_catalog.#>) ARRAY['transitions', from_state]) OPERATOR(pg_catalog.?) to_state THEN
        RETURN true;
    END IF;
    _state := from_state;
    @@state_check@@
    _state := to_state;
    @@state_check@@
    RETURN false;
END
$$;

-- idem_transition (src/transition.c, transition_internal): to_state when
-- declared; from_state when the two are the same state; else ID004 with
-- the allowed targets in the hint.
-- portable: idem_transition
LANGUAGE plpgsql
AS $$
DECLARE
    fname pg_catalog.text := 'idem_transition';
    mname pg_catalog.text := machine;
    def pg_catalog.jsonb;
    _state pg_catalog.text;
    _from pg_catalog.text;
    _hint pg_catalog.text;
BEGIN
    IF mname IS NULL THEN
        RAISE EXCEPTION 'idem_transition: machine must not be null' USING ERRCODE = '22004';
    END IF;
    @@machine_name_check@@
    @@machine_load@@
    IF from_state IS NULL THEN
        RAISE EXCEPTION 'idem_transition: from_state must not be null' USING ERRCODE = '22004';
    END IF;
    IF to_state IS NULL THEN
        RAISE EXCEPTION 'idem_transition: to_state must not be null' USING ERRCODE = '22004';
    END IF;
    IF (def OPERATOR(pg_catalog.#>) ARRAY['transitions', from_state]) OPERATOR(pg_catalog.?) to_state THEN
        RETURN to_state;
    END IF;
    _state := from_state;
    @@state_check@@
    _state := to_state;
    @@state_check@@
    IF from_state COLLATE pg_catalog."C" OPERATOR(pg_catalog.=) to_state THEN
        -- A repeat warns, as the C's warn_repeat.
        RAISE WARNING 'idem_transition: repeated transition to "%" keeps the row''s state, and the rest of the statement runs', to_state
            USING DETAIL = pg_catalog.format('Machine "%s" does not declare a transition from "%s" to itself, so idem_transition returns the state unchanged: an UPDATE that also sets other columns (paid = paid + 100) applies them again for a repeated event.', mname, to_state),
                  HINT = 'Use idem_transition_strict, which refuses the repeat (ID006), or move the row only WHERE idem_can_transition(...).';
        RETURN from_state;
    END IF;
    _from := from_state;
    @@targets_hint@@
    RAISE EXCEPTION 'idem_transition: illegal transition from "%" to "%"', from_state, to_state
        USING ERRCODE = 'ID004',
              DETAIL = pg_catalog.format('Machine "%s" does not allow the transition from "%s" to "%s".', mname, from_state, to_state),
              HINT = _hint;
END
$$;

-- idem_transition_strict (src/transition.c, transition_internal): as
-- idem_transition, but a repeated event (the same state, no declared
-- self-transition) is ID006.
-- portable: idem_transition_strict
LANGUAGE plpgsql
AS $$
DECLARE
    fname pg_catalog.text := 'idem_transition_strict';
    mname pg_catalog.text := machine;
    def pg_catalog.jsonb;
    _state pg_catalog.text;
    _from pg_catalog.text;
    _hint pg_catalog.text;
BEGIN
    IF mname IS NULL THEN
        RAISE EXCEPTION 'idem_transition_strict: machine must not be null' USING ERRCODE = '22004';
    END IF;
    @@machine_name_check@@
    @@machine_load@@
    IF from_state IS NULL THEN
        RAISE EXCEPTION 'idem_transition_strict: from_state must not be null' USING ERRCODE = '22004';
    END IF;
    IF to_state IS NULL THEN
        RAISE EXCEPTION 'idem_transition_strict: to_state must not be null' USING ERRCODE = '22004';
    END IF;
    IF (def OPERATOR(pg_catalog.#>) ARRAY['transitions', from_state]) OPERATOR(pg_catalog.?) to_state THEN
        RETURN to_state;
    END IF;
    _state := from_state;
    @@state_check@@
    _state := to_state;
    @@state_check@@
    IF from_state COLLATE pg_catalog."C" OPERATOR(pg_catalog.=) to_state THEN
        RAISE EXCEPTION 'idem_transition_strict: repeated transition to "%"', to_state
            USING ERRCODE = 'ID006',
                  DETAIL = pg_catalog.format('The row is in state "%s" already, and machine "%s" does not declare a transition from "%s" to itself.',
                                             to_state, mname, to_state),
                  HINT = 'The event has been applied already: treat it as a duplicate (the statement wrote nothing).';
    END IF;
    _from := from_state;
    @@targets_hint@@
    RAISE EXCEPTION 'idem_transition_strict: illegal transition from "%" to "%"', from_state, to_state
        USING ERRCODE = 'ID004',
              DETAIL = pg_catalog.format('Machine "%s" does not allow the transition from "%s" to "%s".', mname, from_state, to_state),
              HINT = _hint;
END
$$;

-- idem_sources (src/transition.c): the keys whose targets name to_state,
-- bytewise order.
-- portable: idem_sources
LANGUAGE plpgsql
AS $$
DECLARE
    fname pg_catalog.text := 'idem_sources';
    mname pg_catalog.text := machine;
    def pg_catalog.jsonb;
    _state pg_catalog.text;
BEGIN
    IF mname IS NULL THEN
        RAISE EXCEPTION 'idem_sources: machine must not be null' USING ERRCODE = '22004';
    END IF;
    @@machine_name_check@@
    @@machine_load@@
    IF to_state IS NULL THEN
        RAISE EXCEPTION 'idem_sources: to_state must not be null' USING ERRCODE = '22004';
    END IF;
    _state := to_state;
    @@state_check@@
    RETURN ARRAY(SELECT e.k FROM pg_catalog.jsonb_each(def OPERATOR(pg_catalog.->) 'transitions') AS e(k, v)
                  WHERE e.v OPERATOR(pg_catalog.?) to_state
                  ORDER BY e.k COLLATE pg_catalog."C");
END
$$;

-- idem_guard_allows (src/transition.c, idem_guard_verdict): the rule of a
-- guard, in the WHEN condition of its triggers.  True when the value is
-- unchanged (bytewise, NULL included), when NULL becomes an initial
-- state, or when the transition is declared; false otherwise, values
-- that are no state included.  One row read, two key lookups.
-- portable: idem_guard_allows
LANGUAGE plpgsql
AS $$
DECLARE
    fname pg_catalog.text := 'idem_guard_allows';
    mname pg_catalog.text := machine;
    def pg_catalog.jsonb;
BEGIN
    IF mname IS NULL THEN
        RAISE EXCEPTION 'idem_guard_allows: machine must not be null' USING ERRCODE = '22004';
    END IF;
    @@machine_name_check@@
    @@machine_load@@
    IF old_status IS NULL THEN
        RETURN new_status IS NULL OR (def OPERATOR(pg_catalog.->) 'initial') OPERATOR(pg_catalog.?) new_status;
    END IF;
    IF new_status IS NULL THEN
        RETURN false;
    END IF;
    RETURN old_status COLLATE pg_catalog."C" OPERATOR(pg_catalog.=) new_status
        OR COALESCE((def OPERATOR(pg_catalog.#>) ARRAY['transitions', old_status]) OPERATOR(pg_catalog.?) new_status, false);
END
$$;
