-- Known-bad shapes: test/scripts/lint.sh's self-test runs sqllint.pl on
-- this file and requires exactly the findings listed in bad.expected
-- (LINE and rule).  Every line below whose comment says bad: is one
-- the lint must report.
CREATE FUNCTION @extschema@.lint_target(key pg_catalog.name, n pg_catalog.int4 DEFAULT 0)
RETURNS pg_catalog.int4 LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT n $$;

-- A function without a pinned search_path.
CREATE FUNCTION @extschema@.lint_bad(a pg_catalog.text)
RETURNS pg_catalog.text
LANGUAGE plpgsql
AS $$
DECLARE
    x record;                                   -- bad: type
    r idem_records%ROWTYPE;                     -- bad: %ROWTYPE
    t text := 'x';                              -- bad: type
    c pg_catalog.text COLLATE "C";              -- bad: collation
BEGIN
    t := upper(a);                              -- bad: function
    IF a = 'x' THEN                             -- bad: operator
        RETURN a::text;                         -- bad: cast
    END IF;
    IF a LIKE 'y%' THEN RETURN NULL; END IF;    -- bad: LIKE
    IF a IS DISTINCT FROM 'z' THEN              -- bad: IS DISTINCT FROM
        t := CAST(NULLIF(a, a) AS citext);      -- bad: CAST, NULLIF
    END IF;
    PERFORM pg_catalog.length(a) FROM lint_table;  -- bad: relation
    EXECUTE pg_catalog.format('SELECT lower(%L)', a);  -- bad: dynamic SQL
    PERFORM pg_catalog.nextval('lint_seq');     -- bad: sequence name
    PERFORM 'lint_table'::pg_catalog.regclass;  -- bad: regclass name
    IF a IN (SELECT 'x'::pg_catalog.text) THEN  -- bad: IN (SELECT)
        RETURN a;
    END IF;
    RETURN @extschema@.lint_target(NULL);       -- bad: untyped NULL
END
$$;

-- The text/name shape: pinned, but the argument is cast to the wrong type
-- and the call is not @extschema@-qualified.
CREATE FUNCTION @extschema@.lint_pinned(a pg_catalog.text)
RETURNS pg_catalog.int4
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM lint_target(a::pg_catalog.name);            -- bad: unqualified-own
    PERFORM pg_catalog.count(*) FROM lint_table;        -- bad: relation (pg_temp)
    RETURN @extschema@.lint_target(a::pg_catalog.text); -- bad: untyped (text, not name)
END
$$;

CREATE FUNCTION @extschema@.lint_sql(a pg_catalog.name)
RETURNS pg_catalog.int4
LANGUAGE sql
AS $$
SELECT @extschema@.lint_target(a, 1)            -- bad: untyped literal
    WHERE a = ANY ('{}'::pg_catalog.name[])     -- bad: = ANY
$$;

CREATE FUNCTION @extschema@.lint_atomic(a pg_catalog.text)
RETURNS pg_catalog.int4
LANGUAGE sql
BEGIN ATOMIC
    SELECT @extschema@.lint_target(a::pg_catalog.name, length(a));  -- bad: function in BEGIN ATOMIC
END;

-- Top level (CREATE/ALTER EXTENSION) and a DO block.
SELECT @extschema@.lint_target('k'::pg_catalog.text);  -- bad: untyped
DO $$
BEGIN
    CASE pg_catalog.version()                   -- bad: simple CASE
    WHEN 'a' THEN NULL;
    ELSE NULL;
    END CASE;
    PERFORM @extschema@.lint_target('k');       -- bad: untyped literal
END
$$;
