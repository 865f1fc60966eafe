-- Portable bodies (docs/managed.md) of the table guards of
-- sql/idempotency_machine.sql, whose C is src/guard.c (idem_guard,
-- idem_unguard), src/guard_cache.c (what a real guard trigger is, the
-- column it watches) and src/guard_trigger.c (the trigger).  Rules of the
-- bodies: see records.sql; the machine: machine.sql.
--
-- idem_guard creates the very triggers the C edition creates: the same
-- names, events, WHEN conditions (text for text) and arguments, calling
-- @extschema@.idem_guard_trigger and @extschema@.idem_guard_allows, so a
-- dump restores them into either edition.  The check is the WHEN
-- condition: a legal row calls idem_guard_allows once and fires nothing;
-- an illegal one fires idem_guard_trigger, which finds out why and raises
-- ID004 (or 27000).  With no cache, the trigger reads what the C keeps per
-- trigger (pg_trigger, pg_depend, pg_attribute) at each firing, and reads
-- and writes the row's columns by name through EXECUTE (never by casting
-- the whole row, which would run a user's casts for every column).

-- tgargs: an SQL expression, the arguments of the pg_trigger row t as a
-- text[] (pg_trigger.tgargs holds them NUL-terminated, in the database
-- encoding).
-- portable-fragment: tgargs
FRAGMENT AS $$
ARRAY(SELECT pg_catalog.convert_from(pg_catalog.substring(t.tgargs, z.s, z.e OPERATOR(pg_catalog.-) z.s),
                                     pg_catalog.getdatabaseencoding())
        FROM (SELECT COALESCE(pg_catalog.lag(b.i) OVER (ORDER BY b.i), 0) OPERATOR(pg_catalog.+) 1 AS s, b.i AS e
                FROM pg_catalog.generate_series(1, pg_catalog.length(t.tgargs)) AS b(i)
               WHERE pg_catalog.get_byte(t.tgargs, b.i OPERATOR(pg_catalog.-) 1) OPERATOR(pg_catalog.=) 0) AS z
       ORDER BY z.s)
$$;

-- guard_role: an SQL expression, the role of a trigger of
-- idem_guard_trigger when it is shaped as idem_guard makes that role's
-- trigger, else NULL: the one definition of a real guard trigger
-- (src/guard_shape.c, idem_guard_trigger_is_real).  Reads the columns of
-- g: g_tgtype (int4), g_nattr (UPDATE OF columns), g_qual (tgqual),
-- g_shape (guard_shape of it), g_args (text[]), g_allows (the OID of
-- idem_guard_allows).
--   check     AFTER ROW, INSERT or UPDATE, WHEN exactly as idem_guard
--             writes it for the machine of its arguments
--   version   BEFORE ROW UPDATE, WHEN
--   log       AFTER ROW, INSERT or UPDATE, WHEN (a fifth argument: Citus)
--   children  BEFORE STATEMENT UPDATE, no WHEN
-- A check's WHEN condition is compared whole, as its stored node tree
-- (pg_trigger.tgqual, through guard_shape), with the tree of the
-- condition idem_guard writes on the columns it names (INSERT; UPDATE
-- without or with a version column, as the arguments say): a condition
-- that merely calls idem_guard_allows (AND false, say) is no guard.  The
-- operators are pg_catalog's by OID: 85 bool <>, 531 text <>, 411 and 518
-- int8 and int4 <>, 688 and 551 int8 + int4 and int4 + int4.  The one
-- text constant is the machine's name (its bytes after the varlena
-- header, read from the tree).
-- portable-fragment: guard_role
FRAGMENT AS $$
CASE WHEN g.g_args IS NULL
          OR COALESCE(pg_catalog.array_length(g.g_args, 1), 0) OPERATOR(pg_catalog.<) 4
          OR COALESCE(pg_catalog.array_length(g.g_args, 1), 0) OPERATOR(pg_catalog.>) 5
          OR NOT (g.g_args[4] OPERATOR(pg_catalog.=) ANY ('{check,version,log,children}'::pg_catalog.text[]))
          OR (pg_catalog.array_length(g.g_args, 1) OPERATOR(pg_catalog.=) 5 AND g.g_args[4] OPERATOR(pg_catalog.<>) 'log')
          OR (g.g_tgtype OPERATOR(pg_catalog.&) 104) OPERATOR(pg_catalog.<>) 0
          OR g.g_nattr OPERATOR(pg_catalog.<>) 0
          OR ((g.g_tgtype OPERATOR(pg_catalog.&) 4) OPERATOR(pg_catalog.<>) 0)
             OPERATOR(pg_catalog.=) ((g.g_tgtype OPERATOR(pg_catalog.&) 16) OPERATOR(pg_catalog.<>) 0)
     THEN NULL
     WHEN g.g_args[4] OPERATOR(pg_catalog.=) 'check' THEN
          CASE WHEN (g.g_tgtype OPERATOR(pg_catalog.&) 1) OPERATOR(pg_catalog.<>) 0
                    AND (g.g_tgtype OPERATOR(pg_catalog.&) 2) OPERATOR(pg_catalog.=) 0
                    AND g.g_qual IS NOT NULL
                    AND g.g_shape OPERATOR(pg_catalog.~) pg_catalog.replace(pg_catalog.replace(
                        CASE WHEN (g.g_tgtype OPERATOR(pg_catalog.&) 4) OPERATOR(pg_catalog.<>) 0 THEN
                                 '^\{BOOLEXPR :boolop or :args \(\{NULLTEST :arg V2\.([1-9][0-9]*) :nulltesttype 0 G\}'
                                 ' \{BOOLEXPR :boolop not :args \(\{FUNCEXPR :funcid A G:args \(C N V2\.\1\)\}\)\}\)\}$'
                             WHEN g.g_args[3] OPERATOR(pg_catalog.=) '' THEN
                                 '^\{BOOLEXPR :boolop not :args \(\{FUNCEXPR :funcid A G:args'
                                 ' \(C V1\.([1-9][0-9]*) V2\.\1\)\}\)\}$'
                             ELSE
                                 '^\{BOOLEXPR :boolop or :args \(\{BOOLEXPR :boolop not :args \(\{FUNCEXPR :funcid A G:args'
                                 ' \(C V1\.([1-9][0-9]*) V2\.\1\)\}\)\} \{BOOLEXPR :boolop and :args \('
                                 '\{BOOLEXPR :boolop or :args \(\{OPEXPR :opno 85 G:args \(\{NULLTEST :arg V1\.\1 :nulltesttype 0 G\}'
                                 ' \{NULLTEST :arg V2\.\1 :nulltesttype 0 G\}\)\} \{OPEXPR :opno 531 G:args \(V1\.\1 V2\.\1\)\}\)\}'
                                 ' \{OPEXPR :opno (?:411|518) G:args \(V2\.([1-9][0-9]*) \{OPEXPR :opno (?:688|551) G:args'
                                 ' \(V1\.\2 ONE\)\}\)\}\)\}\)\}$'
                        END, 'G', '[^{}()]*'), ' A ', ' ' OPERATOR(pg_catalog.||) g.g_allows::pg_catalog.text OPERATOR(pg_catalog.||) ' ')
                    AND EXISTS (
                        SELECT FROM pg_catalog.regexp_matches(g.g_qual,
                                    '\{FUNCEXPR :funcid ([0-9]+) [^{}]*:args \(\{CONST :consttype 25 [^{}]*:constisnull false [^{}]*:constvalue ([0-9]+) \[ ([-0-9 ]*)\]',
                                    'g') AS q(m),
                               LATERAL (SELECT pg_catalog.decode(pg_catalog.string_agg(
                                                   pg_catalog.lpad(pg_catalog.to_hex(u.b::pg_catalog.int4 OPERATOR(pg_catalog.&) 255), 2, '0'),
                                                   '' ORDER BY u.n), 'hex') AS bytes
                                          FROM pg_catalog.unnest(pg_catalog.string_to_array(pg_catalog.btrim(q.m[3]), ' '))
                                               WITH ORDINALITY AS u(b, n)) AS v,
                               LATERAL (SELECT pg_catalog.convert_to(g.g_args[1], pg_catalog.getdatabaseencoding()) AS name) AS w
                         WHERE q.m[1]::pg_catalog.oid OPERATOR(pg_catalog.=) g.g_allows
                           AND pg_catalog.length(v.bytes) OPERATOR(pg_catalog.-) pg_catalog.length(w.name)
                               OPERATOR(pg_catalog.=) ANY ('{1,4}'::pg_catalog.int4[])
                           AND pg_catalog.substring(v.bytes, pg_catalog.length(v.bytes) OPERATOR(pg_catalog.-)
                                                    pg_catalog.length(w.name) OPERATOR(pg_catalog.+) 1)
                               OPERATOR(pg_catalog.=) w.name)
               THEN 'check' END
     WHEN g.g_args[4] OPERATOR(pg_catalog.=) 'version' THEN
          CASE WHEN (g.g_tgtype OPERATOR(pg_catalog.&) 1) OPERATOR(pg_catalog.<>) 0
                    AND (g.g_tgtype OPERATOR(pg_catalog.&) 2) OPERATOR(pg_catalog.<>) 0
                    AND (g.g_tgtype OPERATOR(pg_catalog.&) 16) OPERATOR(pg_catalog.<>) 0
                    AND g.g_qual IS NOT NULL THEN 'version' END
     WHEN g.g_args[4] OPERATOR(pg_catalog.=) 'log' THEN
          CASE WHEN (g.g_tgtype OPERATOR(pg_catalog.&) 1) OPERATOR(pg_catalog.<>) 0
                    AND (g.g_tgtype OPERATOR(pg_catalog.&) 2) OPERATOR(pg_catalog.=) 0
                    AND g.g_qual IS NOT NULL THEN 'log' END
     ELSE CASE WHEN (g.g_tgtype OPERATOR(pg_catalog.&) 1) OPERATOR(pg_catalog.=) 0
                    AND (g.g_tgtype OPERATOR(pg_catalog.&) 2) OPERATOR(pg_catalog.<>) 0
                    AND (g.g_tgtype OPERATOR(pg_catalog.&) 16) OPERATOR(pg_catalog.<>) 0
                    AND g.g_qual IS NULL THEN 'children' END
END
$$;

-- guard_shape: an SQL expression, the stored WHEN condition of the
-- pg_trigger row t (tgqual) with what guard_role does not compare
-- abstracted: no parse locations; a column of OLD or NEW as V1.n or V2.n
-- (n its attribute number), also when relabelled to text (a cast of a
-- varchar or a domain over text or varchar); a non-null text constant
-- as C, a null one as N, the int4 constant 1 as ONE.
-- portable-fragment: guard_shape
FRAGMENT AS $$
pg_catalog.regexp_replace(pg_catalog.regexp_replace(pg_catalog.regexp_replace(
pg_catalog.regexp_replace(pg_catalog.regexp_replace(pg_catalog.regexp_replace(
    t.tgqual::pg_catalog.text, ' :location -?[0-9]+', '', 'g'),
    '\{VAR :varno ([12]) :varattno ([1-9][0-9]*) [^{}]*:varlevelsup 0( [^{}]*)?\}', 'V\1.\2', 'g'),
    '\{RELABELTYPE :arg (V[12]\.[0-9]+) :resulttype 25 [^{}]*\}', '\1', 'g'),
    '\{CONST :consttype 25 [^{}]*:constisnull false [^{}]*\}', 'C', 'g'),
    '\{CONST :consttype 25 [^{}]*:constisnull true [^{}]*\}', 'N', 'g'),
    '\{CONST :consttype 23 [^{}]*:constisnull false :constvalue 4 \[ (1 0 0 0( 0 0 0 0)?|(0 0 0 0 )?0 0 0 1) \]\}', 'ONE', 'g')
$$;

-- guard_triggers: an SQL subquery (alias it g), the triggers of
-- idem_guard_trigger with what guard_role reads, and g_tgoid, g_relid,
-- g_tgname, g_enabled, g_table (schema-qualified, quoted), g_checked (of a
-- real check: the attribute number of the column its condition checks,
-- the first one g_shape names).
-- portable-fragment: guard_triggers
FRAGMENT AS $$
(SELECT t.oid AS g_tgoid, t.tgrelid AS g_relid, t.tgname::pg_catalog.text AS g_tgname,
        t.tgenabled AS g_enabled, t.tgtype::pg_catalog.int4 AS g_tgtype,
        COALESCE(pg_catalog.cardinality(t.tgattr::pg_catalog.int2[]), 0) AS g_nattr,
        t.tgqual::pg_catalog.text AS g_qual,
        @@guard_shape@@
        AS g_shape,
        pg_catalog.substring(
            @@guard_shape@@
            , 'V[12]\.([0-9]+)')::pg_catalog.int2 AS g_checked,
        @@tgargs@@
        AS g_args,
        '@extschema@.idem_guard_allows(pg_catalog.text,pg_catalog.text,pg_catalog.text)'::pg_catalog.regprocedure::pg_catalog.oid AS g_allows,
        pg_catalog.format('%I.%I', n.nspname, c.relname) AS g_table
   FROM pg_catalog.pg_trigger AS t
   JOIN pg_catalog.pg_class AS c ON c.oid OPERATOR(pg_catalog.=) t.tgrelid
   JOIN pg_catalog.pg_namespace AS n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
  WHERE t.tgfoid OPERATOR(pg_catalog.=) '@extschema@.idem_guard_trigger()'::pg_catalog.regprocedure)
$$;

-- guards_of_machine: users := the guards that enforce machine mname
-- ('column "c" of table s.t, ...', the column a check's condition checks,
-- by its name now), or NULL: one per real UPDATE check trigger
-- (src/guard_install.c, idem_guards_of_machine), read with the
-- statement's snapshot.
-- portable-fragment: guards_of_machine
FRAGMENT AS $$
SELECT pg_catalog.string_agg(pg_catalog.format('column "%s" of table %s',
                                               (SELECT a.attname FROM pg_catalog.pg_attribute AS a
                                                 WHERE a.attrelid OPERATOR(pg_catalog.=) g.g_relid
                                                   AND a.attnum OPERATOR(pg_catalog.=) g.g_checked),
                                               g.g_table), ', '
                             ORDER BY g.g_table, g.g_tgname)
  INTO users
  FROM
       @@guard_triggers@@
       AS g
 WHERE (g.g_tgtype OPERATOR(pg_catalog.&) 16) OPERATOR(pg_catalog.<>) 0
   AND g.g_args[1] OPERATOR(pg_catalog.=) (mname COLLATE pg_catalog."C")
   AND
       @@guard_role@@
       OPERATOR(pg_catalog.=) 'check';
$$;

-- rel_guarded: an SQL expression, true when the relation whose OID is the
-- value of _rel carries a real, enabled UPDATE check trigger of machine
-- _machine on a column called _column (src/guard_cache.c,
-- idem_rel_guarded).
-- portable-fragment: rel_guarded
FRAGMENT AS $$
EXISTS (SELECT FROM
                    @@guard_triggers@@
                    AS g
         WHERE g.g_relid OPERATOR(pg_catalog.=) _rel
           AND g.g_enabled OPERATOR(pg_catalog.<>) 'D'
           AND (g.g_tgtype OPERATOR(pg_catalog.&) 16) OPERATOR(pg_catalog.<>) 0
           AND g.g_args[1] OPERATOR(pg_catalog.=) (_machine COLLATE pg_catalog."C")
           AND g.g_args[2] OPERATOR(pg_catalog.=) (_column COLLATE pg_catalog."C")
           AND
               @@guard_role@@
               OPERATOR(pg_catalog.=) 'check'
           -- Its condition checks the column of that name, not another.
           AND EXISTS (SELECT FROM pg_catalog.pg_attribute AS a
                        WHERE a.attrelid OPERATOR(pg_catalog.=) g.g_relid
                          AND a.attnum OPERATOR(pg_catalog.=) g.g_checked
                          AND a.attname OPERATOR(pg_catalog.=) _column::pg_catalog.name))
$$;

-- guarded_table: check the TRIGGER privilege on relid (42501, worded as
-- the server words it for the relation's kind), lock it in mode _mode
-- (as CREATE or DROP TRIGGER would; taken by LOCK TABLE when the caller
-- may, else left to the trigger DDL), and set _table to its
-- schema-qualified, quoted name; 42P01 when it is gone, 0A000 when
-- partitioned, 42809 when not a table (src/guard.c, lock_guarded_table).
-- portable-fragment: guarded_table
FRAGMENT AS $$
DECLARE
    _kind pg_catalog."char";
    _relname pg_catalog.text;
BEGIN
    SELECT c.relkind, c.relname INTO _kind, _relname FROM pg_catalog.pg_class AS c WHERE c.oid OPERATOR(pg_catalog.=) relid;
    IF NOT FOUND THEN
        RAISE EXCEPTION '%: relation with OID % does not exist', fname, relid USING ERRCODE = '42P01';
    END IF;
    IF NOT pg_catalog.has_table_privilege(relid, 'TRIGGER') THEN
        RAISE EXCEPTION 'permission denied for % %',
            CASE WHEN _kind OPERATOR(pg_catalog.=) 'v' THEN 'view'
                 WHEN _kind OPERATOR(pg_catalog.=) 'm' THEN 'materialized view'
                 WHEN _kind OPERATOR(pg_catalog.=) 'S' THEN 'sequence'
                 WHEN _kind OPERATOR(pg_catalog.=) 'f' THEN 'foreign table'
                 WHEN _kind OPERATOR(pg_catalog.=) 'c' THEN 'type'
                 WHEN _kind OPERATOR(pg_catalog.=) ANY ('{i,I}'::pg_catalog."char"[]) THEN 'index'
                 ELSE 'table' END,
            _relname
            USING ERRCODE = '42501';
    END IF;
    IF _kind OPERATOR(pg_catalog.=) ANY ('{r,p}'::pg_catalog."char"[])
       AND (pg_catalog.has_table_privilege(relid, 'UPDATE') OR pg_catalog.has_table_privilege(relid, 'DELETE')
            OR pg_catalog.has_table_privilege(relid, 'TRUNCATE')) THEN
        EXECUTE pg_catalog.format('LOCK TABLE ONLY %s IN %s MODE', relid::pg_catalog.regclass, _mode);
    END IF;
    SELECT c.relkind, pg_catalog.format('%I.%I', n.nspname, c.relname) INTO _kind, _table
      FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
     WHERE c.oid OPERATOR(pg_catalog.=) relid;
    IF NOT FOUND THEN
        RAISE EXCEPTION '%: relation "%" was dropped', fname, _relname USING ERRCODE = '42P01';
    END IF;
    IF _kind OPERATOR(pg_catalog.=) 'p' THEN
        RAISE EXCEPTION '%: partitioned table % cannot be guarded', fname, _table
            USING ERRCODE = '0A000',
                  DETAIL = 'A row moved to another partition is inserted there anew, which a guard would have to reject.',
                  HINT = 'Guard the partitions, and do not move rows between them.';
    END IF;
    IF _kind OPERATOR(pg_catalog.<>) 'r' THEN
        RAISE EXCEPTION '%: % is not a table', fname, _table USING ERRCODE = '42809';
    END IF;
END;
$$;

-- drop_guard: drop every trigger of the guard of column _att (called
-- _column) of relid (_table): the row triggers of idem_guard_trigger that
-- depend on the column, and its statement trigger ("children", naming
-- the column); _real := how many of them are real UPDATE checks
-- (src/guard.c, drop_guard_triggers).
-- portable-fragment: drop_guard
FRAGMENT AS $$
DECLARE
    _r pg_catalog.record;
BEGIN
    _real := 0;
    FOR _r IN
        SELECT g.g_tgname, g.g_tgtype,
               @@guard_role@@
               AS role, g.g_checked
          FROM
               @@guard_triggers@@
               AS g
         WHERE g.g_relid OPERATOR(pg_catalog.=) relid
           AND CASE WHEN (g.g_tgtype OPERATOR(pg_catalog.&) 1) OPERATOR(pg_catalog.<>) 0
                    THEN EXISTS (SELECT FROM pg_catalog.pg_depend AS d
                                  WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_trigger'::pg_catalog.regclass
                                    AND d.objid OPERATOR(pg_catalog.=) g.g_tgoid
                                    AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
                                    AND d.refobjid OPERATOR(pg_catalog.=) g.g_relid
                                    AND d.refobjsubid OPERATOR(pg_catalog.=) _att)
                    ELSE COALESCE(pg_catalog.array_length(g.g_args, 1), 0) OPERATOR(pg_catalog.>=) 4
                         AND g.g_args[4] OPERATOR(pg_catalog.=) 'children'
                         AND g.g_args[2] OPERATOR(pg_catalog.=) (_column COLLATE pg_catalog."C") END
         ORDER BY g.g_tgname
    LOOP
        -- A real check of this column (not of another it also names).
        IF _r.role OPERATOR(pg_catalog.=) 'check' AND _r.g_checked OPERATOR(pg_catalog.=) _att
           AND (_r.g_tgtype OPERATOR(pg_catalog.&) 16) OPERATOR(pg_catalog.<>) 0 THEN
            _real := _real OPERATOR(pg_catalog.+) 1;
        END IF;
        EXECUTE pg_catalog.format('DROP TRIGGER %I ON %s', _r.g_tgname, _table);
    END LOOP;
END;
$$;

-- user_column: _att := the attribute number of the user column _column of
-- relid (_table); 42703 when there is none (src/guard.c, user_column).
-- portable-fragment: user_column
FRAGMENT AS $$
SELECT a.attnum INTO _att FROM pg_catalog.pg_attribute AS a
 WHERE a.attrelid OPERATOR(pg_catalog.=) relid AND a.attname OPERATOR(pg_catalog.=) _column::pg_catalog.name
   AND NOT a.attisdropped AND a.attnum OPERATOR(pg_catalog.>) 0;
IF NOT FOUND THEN
    RAISE EXCEPTION '%: column "%" of table % does not exist', fname, _column, _table USING ERRCODE = '42703';
END IF;
$$;

-- trigger_name: _name := the name of the guard trigger of role _role on
-- column _column: "idem_guard_<role>_<column>", or, when that does not
-- fit in 63 bytes, the column clipped on a character boundary followed by
-- "_" and the hash of the whole column name in 8 hexadecimal digits
-- (src/guard.c, guard_trigger_name: PostgreSQL's hash_bytes, which is
-- hashtext's under a deterministic collation).
-- portable-fragment: trigger_name
FRAGMENT AS $$
DECLARE
    _head pg_catalog.text := 'idem_guard_' OPERATOR(pg_catalog.||) _role OPERATOR(pg_catalog.||) '_';
    _tail pg_catalog.text;
    _room pg_catalog.int4;
    _clip pg_catalog.text := '';
    _ch pg_catalog.text;
BEGIN
    IF pg_catalog.octet_length(_head) OPERATOR(pg_catalog.+) pg_catalog.octet_length(_column) OPERATOR(pg_catalog.<) 64 THEN
        _name := _head OPERATOR(pg_catalog.||) _column;
    ELSE
        _tail := '_' OPERATOR(pg_catalog.||) pg_catalog.lpad(pg_catalog.to_hex(pg_catalog.hashtext(_column COLLATE pg_catalog."C")), 8, '0');
        _room := 63 OPERATOR(pg_catalog.-) pg_catalog.octet_length(_head) OPERATOR(pg_catalog.-) pg_catalog.octet_length(_tail);
        FOREACH _ch IN ARRAY pg_catalog.regexp_split_to_array(_column, '') LOOP
            EXIT WHEN pg_catalog.octet_length(_clip) OPERATOR(pg_catalog.+) pg_catalog.octet_length(_ch) OPERATOR(pg_catalog.>) _room;
            _clip := _clip OPERATOR(pg_catalog.||) _ch;
        END LOOP;
        _name := _head OPERATOR(pg_catalog.||) _clip OPERATOR(pg_catalog.||) _tail;
    END IF;
END;
$$;

-- base_type: _base := the base type of the type _type (domains followed).
-- portable-fragment: base_type
FRAGMENT AS $$
_base := _type;
WHILE (SELECT y.typtype FROM pg_catalog.pg_type AS y WHERE y.oid OPERATOR(pg_catalog.=) _base) OPERATOR(pg_catalog.=) 'd' LOOP
    SELECT y.typbasetype INTO _base FROM pg_catalog.pg_type AS y WHERE y.oid OPERATOR(pg_catalog.=) _base;
END LOOP;
$$;

-- idem_guard (src/guard.c): the checks in the C's order, then the old
-- triggers of the column dropped and the guard's created, in the
-- caller's transaction.
-- portable: idem_guard
LANGUAGE plpgsql
AS $$
DECLARE
    fname pg_catalog.text := 'idem_guard';
    relid pg_catalog.oid := tbl;
    mname pg_catalog.text := machine;
    def pg_catalog.jsonb;
    _mode pg_catalog.text := 'SHARE ROW EXCLUSIVE';
    _table pg_catalog.text;
    _column pg_catalog.text;
    _status pg_catalog.text := status_column;
    _version pg_catalog.text := version_column;
    _att pg_catalog.int2;
    _status_att pg_catalog.int2;
    _type pg_catalog.oid;
    _base pg_catalog.oid;
    _real pg_catalog.int4;
    _rel pg_catalog.oid;
    _machine pg_catalog.text;
    _child pg_catalog.text;
    _qcol pg_catalog.text;
    _oldv pg_catalog.text;
    _newv pg_catalog.text;
    _changed pg_catalog.text;
    _allows pg_catalog.text;
    _func pg_catalog.text;
    _qver pg_catalog.text;
    _lag pg_catalog.text := '';
    _role pg_catalog.text;
    _name pg_catalog.text;
BEGIN
    IF relid IS NULL THEN
        RAISE EXCEPTION 'idem_guard: tbl must not be null' USING ERRCODE = '22004';
    END IF;
    IF _status IS NULL THEN
        RAISE EXCEPTION 'idem_guard: status_column must not be null' USING ERRCODE = '22004';
    END IF;
    IF mname IS NULL THEN
        RAISE EXCEPTION 'idem_guard: machine must not be null' USING ERRCODE = '22004';
    END IF;
    @@machine_name_check@@
    IF history IS NULL THEN
        RAISE EXCEPTION 'idem_guard: history must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idem_guard() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    @@guarded_table@@

    _column := _status;
    @@user_column@@
    _status_att := _att;
    SELECT a.atttypid INTO _type FROM pg_catalog.pg_attribute AS a
     WHERE a.attrelid OPERATOR(pg_catalog.=) relid AND a.attnum OPERATOR(pg_catalog.=) _status_att;
    @@base_type@@
    IF _base OPERATOR(pg_catalog.<>) 'pg_catalog.text'::pg_catalog.regtype
       AND _base OPERATOR(pg_catalog.<>) 'pg_catalog.varchar'::pg_catalog.regtype THEN
        RAISE EXCEPTION 'idem_guard: status column "%" must be of type text or varchar', _status
            USING ERRCODE = '42804',
                  DETAIL = pg_catalog.format('Column "%s" of table %s is of type %s.', _status, _table, pg_catalog.format_type(_type, NULL));
    END IF;
    IF _version IS NOT NULL THEN
        _column := _version;
        @@user_column@@
        IF _att OPERATOR(pg_catalog.=) _status_att THEN
            RAISE EXCEPTION 'idem_guard: the version column must differ from the status column' USING ERRCODE = '22023';
        END IF;
        SELECT a.atttypid INTO _type FROM pg_catalog.pg_attribute AS a
         WHERE a.attrelid OPERATOR(pg_catalog.=) relid AND a.attnum OPERATOR(pg_catalog.=) _att;
        IF _type OPERATOR(pg_catalog.<>) 'pg_catalog.int4'::pg_catalog.regtype
           AND _type OPERATOR(pg_catalog.<>) 'pg_catalog.int8'::pg_catalog.regtype THEN
            RAISE EXCEPTION 'idem_guard: version column "%" must be of type integer or bigint', _version
                USING ERRCODE = '42804',
                      DETAIL = pg_catalog.format('Column "%s" of table %s is of type %s.', _version, _table, pg_catalog.format_type(_type, NULL));
        END IF;
    END IF;

    -- The machine must exist (42704).
    @@machine_load@@

    -- Inheritance children are reached by an UPDATE: they need the guard.
    IF (SELECT c.relhassubclass FROM pg_catalog.pg_class AS c WHERE c.oid OPERATOR(pg_catalog.=) relid) THEN
        _machine := mname;
        _column := _status;
        FOR _rel, _child IN
            WITH RECURSIVE kids(oid, depth) AS (
                SELECT i.inhrelid, 1 FROM pg_catalog.pg_inherits AS i WHERE i.inhparent OPERATOR(pg_catalog.=) relid
                UNION
                SELECT i.inhrelid, k.depth OPERATOR(pg_catalog.+) 1
                  FROM kids AS k JOIN pg_catalog.pg_inherits AS i ON i.inhparent OPERATOR(pg_catalog.=) k.oid)
            SELECT k.oid, pg_catalog.format('%I.%I', n.nspname, c.relname)
              FROM (SELECT k.oid, pg_catalog.min(k.depth) AS depth FROM kids AS k GROUP BY k.oid) AS k
              JOIN pg_catalog.pg_class AS c ON c.oid OPERATOR(pg_catalog.=) k.oid
              JOIN pg_catalog.pg_namespace AS n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
             ORDER BY k.depth, k.oid
        LOOP
            IF NOT
               @@rel_guarded@@
               THEN
                RAISE EXCEPTION 'idem_guard: inheritance child % of % has no guard', _child, _table
                    USING ERRCODE = '0A000',
                          DETAIL = pg_catalog.format('An UPDATE of %s reaches the rows of its inheritance children, whose triggers do not inherit a guard.', _table),
                          HINT = pg_catalog.format('Guard each child first: SELECT idem_guard(''%s'', ''%s'', ''%s'').', _child, _status, mname);
            END IF;
        END LOOP;
    END IF;

    _column := _status;
    _att := _status_att;
    @@drop_guard@@

    -- The triggers, as src/guard.c's create_guard_triggers writes them.
    _qcol := pg_catalog.quote_ident(_status);
    _oldv := pg_catalog.format('(OLD.%s)::pg_catalog.text', _qcol);
    _newv := pg_catalog.format('(NEW.%s)::pg_catalog.text', _qcol);
    _changed := pg_catalog.format('((OLD.%s IS NULL) OPERATOR(pg_catalog.<>) (NEW.%s IS NULL) OR %s OPERATOR(pg_catalog.<>) %s)',
                                  _qcol, _qcol, _oldv, _newv);
    _allows := pg_catalog.format('%s.idem_guard_allows(%s::pg_catalog.text, ',
                                 pg_catalog.quote_ident((SELECT n.nspname FROM pg_catalog.pg_namespace AS n
                                                          WHERE n.oid OPERATOR(pg_catalog.=) $nsp$@extschema@$nsp$::pg_catalog.regnamespace)),
                                 pg_catalog.quote_literal(mname));
    _func := pg_catalog.format('%s.idem_guard_trigger(%s, %s, %s, ',
                               pg_catalog.quote_ident((SELECT n.nspname FROM pg_catalog.pg_namespace AS n
                                                        WHERE n.oid OPERATOR(pg_catalog.=) $nsp$@extschema@$nsp$::pg_catalog.regnamespace)),
                               pg_catalog.quote_literal(mname), pg_catalog.quote_literal(_status),
                               pg_catalog.quote_literal(COALESCE(_version, '')));
    IF _version IS NOT NULL THEN
        _qver := pg_catalog.quote_ident(_version);
        _lag := pg_catalog.format(' OR (%s AND (NEW.%s OPERATOR(pg_catalog.<>) (OLD.%s OPERATOR(pg_catalog.+) 1)))',
                                  _changed, _qver, _qver);
    END IF;
    _column := _status;

    _role := 'check';
    @@trigger_name@@
    EXECUTE pg_catalog.format('CREATE TRIGGER %s AFTER UPDATE ON %s FOR EACH ROW'
                              ' WHEN ((NOT %s%s, %s))%s)'
                              ' EXECUTE FUNCTION %s''check'')',
                              pg_catalog.quote_ident(_name), _table, _allows, _oldv, _newv, _lag, _func);
    _role := 'insert';
    @@trigger_name@@
    EXECUTE pg_catalog.format('CREATE TRIGGER %s AFTER INSERT ON %s FOR EACH ROW'
                              ' WHEN ((NEW.%s IS NULL) OR (NOT %sNULL::pg_catalog.text, %s)))'
                              ' EXECUTE FUNCTION %s''check'')',
                              pg_catalog.quote_ident(_name), _table, _qcol, _allows, _newv, _func);
    IF _version IS NOT NULL THEN
        _role := 'version';
        @@trigger_name@@
        EXECUTE pg_catalog.format('CREATE TRIGGER %s BEFORE UPDATE ON %s FOR EACH ROW'
                                  ' WHEN (%s AND (OLD.%s IS NULL OR OLD.%s IS NOT NULL))'
                                  ' EXECUTE FUNCTION %s''version'')',
                                  pg_catalog.quote_ident(_name), _table, _changed, _qver, _qver, _func);
    END IF;
    IF history THEN
        _role := 'log';
        @@trigger_name@@
        EXECUTE pg_catalog.format('CREATE TRIGGER %s AFTER UPDATE ON %s FOR EACH ROW'
                                  ' WHEN (%s)'
                                  ' EXECUTE FUNCTION %s''log'')',
                                  pg_catalog.quote_ident(_name), _table, _changed, _func);
        _role := 'lognew';
        @@trigger_name@@
        EXECUTE pg_catalog.format('CREATE TRIGGER %s AFTER INSERT ON %s FOR EACH ROW'
                                  ' WHEN (NEW.%s IS NULL OR NEW.%s IS NOT NULL)'
                                  ' EXECUTE FUNCTION %s''log'')',
                                  pg_catalog.quote_ident(_name), _table, _qcol, _qcol, _func);
    END IF;
    _role := 'children';
    @@trigger_name@@
    EXECUTE pg_catalog.format('CREATE TRIGGER %s BEFORE UPDATE ON %s FOR EACH STATEMENT'
                              ' EXECUTE FUNCTION %s''children'')',
                              pg_catalog.quote_ident(_name), _table, _func);
END
$$;

-- idem_unguard (src/guard.c): every trigger of the guard of the column,
-- whatever they are called now; 42704 when none of them is a real check.
-- portable: idem_unguard
LANGUAGE plpgsql
AS $$
DECLARE
    fname pg_catalog.text := 'idem_unguard';
    relid pg_catalog.oid := tbl;
    _mode pg_catalog.text := 'ACCESS EXCLUSIVE';
    _table pg_catalog.text;
    _column pg_catalog.text := status_column;
    _att pg_catalog.int2;
    _real pg_catalog.int4;
BEGIN
    IF relid IS NULL THEN
        RAISE EXCEPTION 'idem_unguard: tbl must not be null' USING ERRCODE = '22004';
    END IF;
    IF _column IS NULL THEN
        RAISE EXCEPTION 'idem_unguard: status_column must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idem_unguard() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    @@guarded_table@@
    @@user_column@@
    @@drop_guard@@
    IF _real OPERATOR(pg_catalog.=) 0 THEN
        RAISE EXCEPTION 'idem_unguard: column "%" of table % has no guard', _column, _table USING ERRCODE = '42704';
    END IF;
END
$$;

-- idem_guard_trigger (src/guard_trigger.c, src/guard_cache.c): refuses to
-- run as anything but a trigger shaped as idem_guard makes it (39P01);
-- finds the columns it watches through pg_depend (the column its WHEN
-- condition names follows renames; a name that now means another column
-- is 55000); then, by role: check (why the WHEN condition said no: ID004,
-- or 27000 when the version did not follow the status), version (old
-- version + 1 on every change), log (idem_transition_log), children (an
-- UPDATE reaching an unguarded inheritance child: 0A000).  Errors begin
-- with what the user did, "guarded update of <table>".
-- portable: idem_guard_trigger
LANGUAGE plpgsql
AS $$
DECLARE
    _role pg_catalog.text;
    _tgoid pg_catalog.oid;
    _args pg_catalog.text[];
    _deps pg_catalog.int2[];
    _table pg_catalog.text;
    _doing pg_catalog.text;
    fname pg_catalog.text;
    mname pg_catalog.text;
    def pg_catalog.jsonb;
    _status pg_catalog.text;
    _status_att pg_catalog.int2;
    _version pg_catalog.text;
    _version_att pg_catalog.int2;
    _type pg_catalog.oid;
    _base pg_catalog.oid;
    _from pg_catalog.text;
    _to pg_catalog.text;
    _verdict pg_catalog.text;
    _hint pg_catalog.text;
    _oldver pg_catalog.int8;
    _newver pg_catalog.int8;
    _max pg_catalog.int8;
    _key pg_catalog.text;
    _rel pg_catalog.oid;
    _machine pg_catalog.text;
    _column pg_catalog.text;
    _child pg_catalog.text;
BEGIN
    -- The children trigger fires for every UPDATE statement of a guarded
    -- table, which almost never has inheritance children: its common case
    -- first, in one catalog read (reading guard_role in full for it was
    -- nine tenths of a guarded one-row UPDATE).  The trigger's arguments
    -- are TG_ARGV (the relcache's split of pg_trigger.tgargs); tgtype & 127
    -- = 18 is BEFORE, UPDATE only, per statement, not INSTEAD OF, which is
    -- what guard_role asks of a children trigger (with no UPDATE OF
    -- columns and no WHEN).  Anything else takes the long way below.
    IF TG_LEVEL OPERATOR(pg_catalog.=) 'STATEMENT' AND TG_OP OPERATOR(pg_catalog.=) 'UPDATE'
       AND TG_NARGS OPERATOR(pg_catalog.=) 4 AND TG_ARGV[3] OPERATOR(pg_catalog.=) 'children' THEN
        PERFORM FROM pg_catalog.pg_trigger AS t
                JOIN pg_catalog.pg_class AS c ON c.oid OPERATOR(pg_catalog.=) t.tgrelid
          WHERE t.tgrelid OPERATOR(pg_catalog.=) TG_RELID AND t.tgname OPERATOR(pg_catalog.=) TG_NAME
            AND (t.tgtype::pg_catalog.int4 OPERATOR(pg_catalog.&) 127) OPERATOR(pg_catalog.=) 18
            AND COALESCE(pg_catalog.cardinality(t.tgattr::pg_catalog.int2[]), 0) OPERATOR(pg_catalog.=) 0
            AND t.tgqual IS NULL
            AND NOT c.relhassubclass;
        IF FOUND THEN
            RETURN NULL;
        END IF;
    END IF;
    _table := pg_catalog.format('%I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME);

    IF TG_OP OPERATOR(pg_catalog.<>) 'INSERT' AND TG_OP OPERATOR(pg_catalog.<>) 'UPDATE' THEN
        _role := NULL;
    ELSE
        SELECT g.g_tgoid, g.g_args,
               @@guard_role@@
          INTO _tgoid, _args, _role
          FROM
               @@guard_triggers@@
               AS g
         WHERE g.g_relid OPERATOR(pg_catalog.=) TG_RELID AND g.g_tgname OPERATOR(pg_catalog.=) TG_NAME;
    END IF;
    IF _role IS NULL OR (_role OPERATOR(pg_catalog.=) 'children') OPERATOR(pg_catalog.<>) (TG_LEVEL OPERATOR(pg_catalog.=) 'STATEMENT') THEN
        RAISE EXCEPTION 'idem_guard_trigger: trigger "%" was not created by idem_guard()', TG_NAME
            USING ERRCODE = '39P01',
                  HINT = 'Install guards with idem_guard(); a guard made before 0.5.0 is renewed by ALTER EXTENSION idempotency UPDATE or by calling idem_guard() again.';
    END IF;
    _doing := pg_catalog.format('guarded %s %s', CASE WHEN TG_OP OPERATOR(pg_catalog.=) 'INSERT' THEN 'insert into' ELSE 'update of' END, _table);

    -- Per statement: an UPDATE must not reach an unguarded inheritance
    -- child (inert while the table has none, or is no longer guarded).
    IF _role OPERATOR(pg_catalog.=) 'children' THEN
        IF NOT (SELECT c.relhassubclass FROM pg_catalog.pg_class AS c WHERE c.oid OPERATOR(pg_catalog.=) TG_RELID) THEN
            RETURN NULL;
        END IF;
        _machine := _args[1];
        _column := _args[2];
        _rel := TG_RELID;
        IF NOT
           @@rel_guarded@@
           THEN
            RETURN NULL;
        END IF;
        FOR _rel, _child IN
            WITH RECURSIVE kids(oid, depth) AS (
                SELECT i.inhrelid, 1 FROM pg_catalog.pg_inherits AS i WHERE i.inhparent OPERATOR(pg_catalog.=) TG_RELID
                UNION
                SELECT i.inhrelid, k.depth OPERATOR(pg_catalog.+) 1
                  FROM kids AS k JOIN pg_catalog.pg_inherits AS i ON i.inhparent OPERATOR(pg_catalog.=) k.oid)
            SELECT k.oid, pg_catalog.format('%I.%I', n.nspname, c.relname)
              FROM (SELECT k.oid, pg_catalog.min(k.depth) AS depth FROM kids AS k GROUP BY k.oid) AS k
              JOIN pg_catalog.pg_class AS c ON c.oid OPERATOR(pg_catalog.=) k.oid
              JOIN pg_catalog.pg_namespace AS n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
             ORDER BY k.depth, k.oid
        LOOP
            IF NOT
               @@rel_guarded@@
               THEN
                RAISE EXCEPTION 'guarded update of %: inheritance child % has no guard', _table, _child
                    USING ERRCODE = '0A000',
                          DETAIL = pg_catalog.format('An UPDATE of a table reaches the rows of its inheritance children, whose triggers do not inherit the guard of machine "%s" on column "%s".',
                                                     _machine, _column),
                          HINT = pg_catalog.format('Guard the child too: SELECT idem_guard(''%s'', ''%s'', ''%s'').', _child, _column, _machine);
            END IF;
        END LOOP;
        RETURN NULL;
    END IF;

    -- The columns: found by name, and the very ones the WHEN condition
    -- depends on (src/guard_cache.c, guard_column).
    _deps := ARRAY(SELECT d.refobjsubid::pg_catalog.int2 FROM pg_catalog.pg_depend AS d
                    WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_trigger'::pg_catalog.regclass
                      AND d.objid OPERATOR(pg_catalog.=) _tgoid
                      AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
                      AND d.refobjid OPERATOR(pg_catalog.=) TG_RELID
                      AND d.refobjsubid OPERATOR(pg_catalog.>) 0);
    _status := _args[2];
    SELECT a.attnum, a.atttypid INTO _status_att, _type FROM pg_catalog.pg_attribute AS a
     WHERE a.attrelid OPERATOR(pg_catalog.=) TG_RELID AND a.attname OPERATOR(pg_catalog.=) _status::pg_catalog.name
       AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped;
    IF NOT FOUND THEN
        RAISE EXCEPTION '%: status column "%" of table % does not exist', _doing, _status, _table
            USING ERRCODE = '42703',
                  HINT = 'After renaming a guarded column, install the guard again with idem_guard().';
    END IF;
    IF NOT (_status_att OPERATOR(pg_catalog.=) ANY (_deps)) THEN
        RAISE EXCEPTION '%: status column "%" of table % is not the column the guard was installed on', _doing, _status, _table
            USING ERRCODE = '55000',
                  DETAIL = pg_catalog.format('Trigger "%s" watches another column: the guarded column was renamed, and "%s" is a column added since.', TG_NAME, _status),
                  HINT = 'Install the guard again with idem_guard() on the column you mean, and remove the old one with idem_unguard().';
    END IF;
    fname := _doing;
    mname := _args[1];
    @@machine_name_check@@
    @@base_type@@
    IF _base OPERATOR(pg_catalog.<>) 'pg_catalog.text'::pg_catalog.regtype
       AND _base OPERATOR(pg_catalog.<>) 'pg_catalog.varchar'::pg_catalog.regtype THEN
        RAISE EXCEPTION '%: status column "%" of table % must be of type text or varchar', _doing, _status, _table
            USING ERRCODE = '42804',
                  DETAIL = pg_catalog.format('The column is of type %s.', pg_catalog.format_type(_type, NULL)),
                  HINT = 'Install the guard again with idem_guard() after fixing the column.';
    END IF;
    IF _args[3] OPERATOR(pg_catalog.<>) ''
       AND (_role OPERATOR(pg_catalog.=) 'version' OR (_role OPERATOR(pg_catalog.=) 'check' AND TG_OP OPERATOR(pg_catalog.=) 'UPDATE')) THEN
        _version := _args[3];
        SELECT a.attnum, a.atttypid INTO _version_att, _type FROM pg_catalog.pg_attribute AS a
         WHERE a.attrelid OPERATOR(pg_catalog.=) TG_RELID AND a.attname OPERATOR(pg_catalog.=) _version::pg_catalog.name
           AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped;
        IF NOT FOUND THEN
            RAISE EXCEPTION '%: version column "%" of table % does not exist', _doing, _version, _table
                USING ERRCODE = '42703',
                      HINT = 'After renaming a guarded column, install the guard again with idem_guard().';
        END IF;
        IF NOT (_version_att OPERATOR(pg_catalog.=) ANY (_deps)) THEN
            RAISE EXCEPTION '%: version column "%" of table % is not the column the guard was installed on', _doing, _version, _table
                USING ERRCODE = '55000',
                      DETAIL = pg_catalog.format('Trigger "%s" watches another column: the guarded column was renamed, and "%s" is a column added since.', TG_NAME, _version),
                      HINT = 'Install the guard again with idem_guard() on the column you mean, and remove the old one with idem_unguard().';
        END IF;
        IF _type OPERATOR(pg_catalog.<>) 'pg_catalog.int4'::pg_catalog.regtype
           AND _type OPERATOR(pg_catalog.<>) 'pg_catalog.int8'::pg_catalog.regtype THEN
            RAISE EXCEPTION '%: version column "%" of table % must be of type integer or bigint', _doing, _version, _table
                USING ERRCODE = '42804',
                      DETAIL = pg_catalog.format('The column is of type %s.', pg_catalog.format_type(_type, NULL));
        END IF;
        _max := CASE WHEN _type OPERATOR(pg_catalog.=) 'pg_catalog.int4'::pg_catalog.regtype
                     THEN 2147483647 ELSE 9223372036854775807 END;
    END IF;

    -- The status values: read by name, one field (no cast of the row).
    IF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' THEN
        EXECUTE pg_catalog.format('SELECT ($1).%I::pg_catalog.text, ($2).%I::pg_catalog.text', _status, _status)
           INTO _from, _to USING OLD, NEW;
    ELSE
        EXECUTE pg_catalog.format('SELECT ($1).%I::pg_catalog.text', _status) INTO _to USING NEW;
    END IF;

    IF _role OPERATOR(pg_catalog.=) 'version' THEN
        IF (_from IS NULL) OPERATOR(pg_catalog.=) (_to IS NULL)
           AND (_from IS NULL OR _from COLLATE pg_catalog."C" OPERATOR(pg_catalog.=) _to) THEN
            RETURN NEW;
        END IF;
        EXECUTE pg_catalog.format('SELECT ($1).%I::pg_catalog.int8', _version) INTO _oldver USING OLD;
        IF _oldver IS NULL THEN
            RAISE EXCEPTION '%: version column "%" of table % is null', _doing, _version, _table
                USING ERRCODE = '22004',
                      DETAIL = 'A status change increments the version, and a null version cannot be incremented.',
                      HINT = 'Give the column a NOT NULL constraint and a default, for example 0.',
                      SCHEMA = TG_TABLE_SCHEMA, TABLE = TG_TABLE_NAME, COLUMN = _version;
        END IF;
        IF _oldver OPERATOR(pg_catalog.>=) _max THEN
            RAISE EXCEPTION '%: version column "%" of table % is out of range', _doing, _version, _table
                USING ERRCODE = '22003',
                      SCHEMA = TG_TABLE_SCHEMA, TABLE = TG_TABLE_NAME, COLUMN = _version;
        END IF;
        RETURN pg_catalog.jsonb_populate_record(NEW, pg_catalog.jsonb_build_object(_version, _oldver OPERATOR(pg_catalog.+) 1));
    END IF;

    IF _role OPERATOR(pg_catalog.=) 'log' THEN
        IF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' AND (_from IS NULL) OPERATOR(pg_catalog.=) (_to IS NULL)
           AND (_from IS NULL OR _from COLLATE pg_catalog."C" OPERATOR(pg_catalog.=) _to) THEN
            RETURN NULL;
        END IF;
        -- The primary key as {column: value}, each value converted as
        -- jsonb_build_object converts it (in column order); NULL without
        -- a primary key.
        SELECT 'pg_catalog.jsonb_build_object(' OPERATOR(pg_catalog.||)
               pg_catalog.string_agg(pg_catalog.format('%L, ($6).%I', a.attname, a.attname), ', ' ORDER BY a.attnum)
               OPERATOR(pg_catalog.||) ')'
          INTO _key
          FROM pg_catalog.pg_index AS i
          JOIN pg_catalog.pg_attribute AS a ON a.attrelid OPERATOR(pg_catalog.=) i.indrelid
                                           AND a.attnum OPERATOR(pg_catalog.=) ANY (i.indkey::pg_catalog.int2[])
         WHERE i.indrelid OPERATOR(pg_catalog.=) TG_RELID AND i.indisprimary;
        EXECUTE pg_catalog.format('INSERT INTO @extschema@.idem_transition_log'
                                  ' (table_name, status_column, row_key, from_state, to_state, xact_id)'
                                  ' VALUES ($1, $2, %s, $3, $4, $5)', COALESCE(_key, 'NULL'))
          USING _table, _status, _from, _to, pg_catalog.pg_current_xact_id(), NEW;
        RETURN NULL;
    END IF;

    -- The check: the WHEN condition said no; find out why (src/transition.c,
    -- idem_guard_verdict) and refuse (src/guard_trigger.c, guard_refuse).
    @@machine_load@@
    IF TG_OP OPERATOR(pg_catalog.=) 'INSERT' OR _from IS NULL THEN
        IF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' AND _to IS NULL THEN
            _verdict := 'unchanged';
        ELSIF _to IS NOT NULL AND (def OPERATOR(pg_catalog.->) 'initial') OPERATOR(pg_catalog.?) _to THEN
            _verdict := 'allowed';
        ELSE
            _verdict := 'bad_initial';
        END IF;
    ELSIF _to IS NOT NULL AND _from COLLATE pg_catalog."C" OPERATOR(pg_catalog.=) _to THEN
        _verdict := 'unchanged';
    ELSIF _to IS NULL
          OR NOT ((def OPERATOR(pg_catalog.->) 'initial') OPERATOR(pg_catalog.?) _to
                  OR (def OPERATOR(pg_catalog.#>) ARRAY['transitions', _to]) IS NOT NULL
                  OR pg_catalog.jsonb_path_exists(def, 'strict $.transitions.*[*] ? (@ == $s)',
                                                  pg_catalog.jsonb_build_object('s', _to), true)) THEN
        _verdict := 'unknown_to';
    ELSIF NOT ((def OPERATOR(pg_catalog.->) 'initial') OPERATOR(pg_catalog.?) _from
               OR (def OPERATOR(pg_catalog.#>) ARRAY['transitions', _from]) IS NOT NULL
               OR pg_catalog.jsonb_path_exists(def, 'strict $.transitions.*[*] ? (@ == $s)',
                                               pg_catalog.jsonb_build_object('s', _from), true)) THEN
        _verdict := 'unknown_from';
    ELSIF (def OPERATOR(pg_catalog.#>) ARRAY['transitions', _from]) OPERATOR(pg_catalog.?) _to THEN
        _verdict := 'allowed';
    ELSE
        _verdict := 'undeclared';
    END IF;

    IF _verdict OPERATOR(pg_catalog.=) 'bad_initial' THEN
        DECLARE
            _names pg_catalog.text[];
            _total pg_catalog.int8;
            _list pg_catalog.text;
        BEGIN
            _names := ARRAY(SELECT i.x FROM pg_catalog.jsonb_array_elements_text(def OPERATOR(pg_catalog.->) 'initial') WITH ORDINALITY AS i(x, n)
                             ORDER BY i.n LIMIT 21);
            _total := pg_catalog.jsonb_array_length(def OPERATOR(pg_catalog.->) 'initial');
            @@state_list@@
            RAISE EXCEPTION '%: illegal initial state %', _doing, COALESCE('"' OPERATOR(pg_catalog.||) _to OPERATOR(pg_catalog.||) '"', 'NULL')
                USING ERRCODE = 'ID004',
                      DETAIL = pg_catalog.format('Machine "%s" does not allow a row to start in %s (column "%s" of table %s).',
                                                 mname, COALESCE('"' OPERATOR(pg_catalog.||) _to OPERATOR(pg_catalog.||) '"', 'NULL'), _status, _table),
                      HINT = pg_catalog.format('The initial states are %s.', _list),
                      SCHEMA = TG_TABLE_SCHEMA, TABLE = TG_TABLE_NAME, COLUMN = _status;
        END;
    ELSIF _verdict OPERATOR(pg_catalog.=) 'unknown_to' THEN
        DECLARE
            _names pg_catalog.text[];
            _total pg_catalog.int8;
            _list pg_catalog.text;
        BEGIN
            @@all_states@@
            RAISE EXCEPTION '%: illegal transition from % to %', _doing,
                    COALESCE('"' OPERATOR(pg_catalog.||) _from OPERATOR(pg_catalog.||) '"', 'NULL'),
                    COALESCE('"' OPERATOR(pg_catalog.||) _to OPERATOR(pg_catalog.||) '"', 'NULL')
                USING ERRCODE = 'ID004',
                      DETAIL = pg_catalog.format('Machine "%s" does not allow the transition from %s to %s: %s is not a state of the machine (column "%s" of table %s).',
                                                 mname, COALESCE('"' OPERATOR(pg_catalog.||) _from OPERATOR(pg_catalog.||) '"', 'NULL'),
                                                 COALESCE('"' OPERATOR(pg_catalog.||) _to OPERATOR(pg_catalog.||) '"', 'NULL'),
                                                 COALESCE('"' OPERATOR(pg_catalog.||) _to OPERATOR(pg_catalog.||) '"', 'NULL'), _status, _table),
                      HINT = pg_catalog.format('The states of machine "%s" are %s.', mname, _list),
                      SCHEMA = TG_TABLE_SCHEMA, TABLE = TG_TABLE_NAME, COLUMN = _status;
        END;
    ELSIF _verdict OPERATOR(pg_catalog.=) 'unknown_from' THEN
        RAISE EXCEPTION '%: illegal transition from "%" to "%"', _doing, _from, _to
            USING ERRCODE = 'ID004',
                  DETAIL = pg_catalog.format('Machine "%s" does not allow the transition from "%s" to "%s": the current value "%s" is not a state of the machine (column "%s" of table %s).',
                                             mname, _from, _to, _from, _status, _table),
                  HINT = 'Add the state to the machine with idem_machine_define(), or leave the value unchanged.',
                  SCHEMA = TG_TABLE_SCHEMA, TABLE = TG_TABLE_NAME, COLUMN = _status;
    ELSIF _verdict OPERATOR(pg_catalog.=) 'undeclared' THEN
        @@targets_hint@@
        RAISE EXCEPTION '%: illegal transition from "%" to "%"', _doing, _from, _to
            USING ERRCODE = 'ID004',
                  DETAIL = pg_catalog.format('Machine "%s" does not allow the transition from "%s" to "%s" (column "%s" of table %s).',
                                             mname, _from, _to, _status, _table),
                  HINT = _hint,
                  SCHEMA = TG_TABLE_SCHEMA, TABLE = TG_TABLE_NAME, COLUMN = _status;
    END IF;

    -- A change the version did not follow (a BEFORE trigger that fired
    -- after the guard's version trigger): 27000.
    IF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' AND _verdict OPERATOR(pg_catalog.<>) 'unchanged' AND _version IS NOT NULL THEN
        EXECUTE pg_catalog.format('SELECT ($1).%I::pg_catalog.int8, ($2).%I::pg_catalog.int8', _version, _version)
           INTO _oldver, _newver USING OLD, NEW;
        IF _oldver IS NULL OR _newver IS NULL OR _oldver OPERATOR(pg_catalog.>=) _max
           OR _newver OPERATOR(pg_catalog.<>) (_oldver OPERATOR(pg_catalog.+) 1) THEN
            RAISE EXCEPTION '%: the status changed but version column "%" did not advance by one', _doing, _version
                USING ERRCODE = '27000',
                      DETAIL = pg_catalog.format('A BEFORE trigger that fires after the guard''s version trigger changed the status or the version column of table %s.', _table),
                      HINT = pg_catalog.format('Rename that trigger so that it sorts before "idem_guard_version_%s" (BEFORE triggers fire in name order), or set the status in the UPDATE itself.', _status),
                      SCHEMA = TG_TABLE_SCHEMA, TABLE = TG_TABLE_NAME, COLUMN = _version;
        END IF;
    END IF;
    RETURN NULL;
END
$$;
