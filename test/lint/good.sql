-- Known-good shapes: test/scripts/lint.sh's self-test requires sqllint.pl
-- to find nothing in this file.
CREATE FUNCTION @extschema@.lint_target(key pg_catalog.name, n pg_catalog.int4 DEFAULT 0)
RETURNS pg_catalog.int4 LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT n $$;

CREATE TABLE @extschema@.lint_table (k pg_catalog.text, v pg_catalog.int4);

CREATE FUNCTION @extschema@.lint_good(a pg_catalog.text, k pg_catalog.name)
RETURNS pg_catalog.int4
LANGUAGE plpgsql
AS $$
DECLARE
    x pg_catalog.record;
    r @extschema@.lint_table%ROWTYPE;
    v @extschema@.lint_table.v%TYPE;
    a2 a%TYPE := a;
    n pg_catalog.int4 := 0;
    c pg_catalog.text COLLATE pg_catalog."C";
    arr pg_catalog.int4[] := ARRAY[1, 2];
BEGIN
    n := pg_catalog.count(*) FROM @extschema@.lint_table;
    SELECT t.v INTO STRICT n FROM @extschema@.lint_table AS t
        WHERE t.k OPERATOR(pg_catalog.=) a AND t.v OPERATOR(pg_catalog.>) 0;
    UPDATE @extschema@.lint_table SET v = 1, k = a WHERE k OPERATOR(pg_catalog.~~) 'x%';
    IF COALESCE(a, 'x') IS NULL THEN
        n := GREATEST(n, 1);
    END IF;
    IF a OPERATOR(pg_catalog.=) ANY (SELECT t.k FROM @extschema@.lint_table AS t ORDER BY t.k) THEN
        n := 1;
    END IF;
    IF EXISTS (SELECT FROM @extschema@.lint_table) THEN
        n := CASE WHEN a IS NULL THEN 1 ELSE 2 END;
    END IF;
    arr[1] := 3;
    PERFORM pg_catalog.nextval('@extschema@.lint_seq');
    PERFORM '@extschema@.lint_table'::pg_catalog.regclass;
    PERFORM pg_catalog.length(a) FROM lint_table;  -- sqllint: allow unqualified -- the self-test of the allow comment
    FOR i IN REVERSE 3..1 BY 1 LOOP
        n := n OPERATOR(pg_catalog.-) i;
    END LOOP;
    FOR i IN 1 .. 3 LOOP
        n := n OPERATOR(pg_catalog.+) i;
    END LOOP;
    FOR x IN SELECT * FROM @extschema@.lint_table LOOP
        CONTINUE WHEN x.k IS NULL;
    END LOOP;
    WITH c1 AS (SELECT 1 AS one) SELECT c1.one INTO n FROM c1;
    RAISE NOTICE 'n is %', n USING ERRCODE = '01000';
    EXECUTE pg_catalog.format('SELECT pg_catalog.lower(%L) FROM %I.lint_table', a, 'public');
    n := @extschema@.lint_target(k, n);
    n := @extschema@.lint_target(key => k, n => 1::pg_catalog.int4);
    RETURN @extschema@.lint_target(CAST(NULL AS pg_catalog.name), $1::pg_catalog.int4);
END
$$;

CREATE FUNCTION @extschema@.lint_pinned(a pg_catalog.text)
RETURNS pg_catalog.int4
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    x record;
BEGIN
    IF a LIKE 'y%' AND upper(a) = 'X' THEN
        RETURN @extschema@.lint_target(a::name);
    END IF;
    RETURN @extschema@.lint_target('k'::pg_catalog.name, NULL::pg_catalog.int4);
END
$$;

SELECT @extschema@.lint_target('k'::pg_catalog.name);
