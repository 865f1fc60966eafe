-- What CREATE EXTENSION idempotency creates: the records table
-- and its shape, the row type idem_record, the purge index, the dump
-- registration, naming, schema placement and SECURITY INVOKER.
-- Queries list only the objects the extension promises (or list violations), so
-- objects that later features add do not change this output.

-- The records table exposes at least these columns, with these types.
SELECT a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod) AS type,
       a.attnotnull AS not_null
FROM pg_catalog.pg_attribute a
WHERE a.attrelid = 'idem_records'::regclass
  AND a.attname IN ('scope', 'key', 'status', 'fingerprint', 'result',
                    'created_at', 'updated_at', 'expires_at')
ORDER BY a.attnum;

-- Keys and scopes compare as bytes: the columns use the "C" collation.
SELECT a.attname, c.collname
FROM pg_catalog.pg_attribute a
JOIN pg_catalog.pg_collation c ON c.oid = a.attcollation
WHERE a.attrelid = 'idem_records'::regclass AND a.attname IN ('scope', 'key')
ORDER BY a.attnum;

-- Primary key (scope, key).
SELECT con.conname,
       ARRAY(SELECT a.attname FROM unnest(con.conkey) WITH ORDINALITY k(n, i)
             JOIN pg_catalog.pg_attribute a
               ON a.attrelid = con.conrelid AND a.attnum = k.n
             ORDER BY k.i) AS columns
FROM pg_catalog.pg_constraint con
WHERE con.conrelid = 'idem_records'::regclass AND con.contype = 'p';

-- An index whose leading column is expires_at makes purging cheap.
SELECT count(*) AS expiry_indexes
FROM pg_catalog.pg_index i
JOIN pg_catalog.pg_attribute a
  ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
WHERE i.indrelid = 'idem_records'::regclass AND a.attname = 'expires_at';

-- ... and a purge of a few expired rows among many live ones uses it.
SET enable_seqscan = off;
EXPLAIN (COSTS OFF)
SELECT ctid FROM idem_records WHERE expires_at <= now() ORDER BY expires_at LIMIT 10;
RESET enable_seqscan;

-- Registered with pg_extension_config_dump, all rows (no filter).
SELECT c.relname, x.extcondition
FROM pg_catalog.pg_extension e,
     unnest(e.extconfig, e.extcondition) AS x(reloid, extcondition)
JOIN pg_catalog.pg_class c ON c.oid = x.reloid
WHERE e.extname = 'idempotency' AND c.relname = 'idem_records';

-- The public shape: idem_record has the record's columns, same types.
SELECT a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod) AS type
FROM pg_catalog.pg_attribute a
WHERE a.attrelid = (SELECT typrelid FROM pg_catalog.pg_type
                    WHERE oid = 'idem_record'::regtype)
  AND a.attname IN ('scope', 'key', 'status', 'fingerprint', 'result',
                    'created_at', 'updated_at', 'expires_at')
ORDER BY a.attnum;

-- The core functions, with their signatures and return types.
SELECT p.proname, pg_catalog.pg_get_function_arguments(p.oid) AS arguments,
       pg_catalog.format_type(p.prorettype, NULL) AS returns,
       p.provolatile, p.proisstrict
FROM pg_catalog.pg_proc p
WHERE p.pronamespace = 'public'::regnamespace
  AND p.proname IN ('idem_claim', 'idem_complete', 'idem_lookup',
                    'idem_release', 'idem_purge')
ORDER BY p.proname, p.pronargs;

-- Every member of the extension is named idem_* (no rows expected).
SELECT pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid) AS misnamed
FROM pg_catalog.pg_depend d
JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid
WHERE d.refclassid = 'pg_catalog.pg_extension'::regclass
  AND d.deptype = 'e' AND e.extname = 'idempotency'
  AND NOT (
    CASE d.classid
      WHEN 'pg_catalog.pg_proc'::regclass THEN
        (SELECT proname FROM pg_catalog.pg_proc WHERE oid = d.objid)
      WHEN 'pg_catalog.pg_class'::regclass THEN
        (SELECT relname FROM pg_catalog.pg_class WHERE oid = d.objid)
      WHEN 'pg_catalog.pg_type'::regclass THEN  -- an array type (a member from 19 on) is named _elem
        (SELECT pg_catalog.ltrim(typname, '_') FROM pg_catalog.pg_type WHERE oid = d.objid)
      ELSE 'idem_'
    END LIKE 'idem\_%');

-- Every member lives in the extension's schema (no rows expected).
SELECT pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid) AS elsewhere
FROM pg_catalog.pg_depend d
JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid
WHERE d.refclassid = 'pg_catalog.pg_extension'::regclass
  AND d.deptype = 'e' AND e.extname = 'idempotency'
  AND e.extnamespace IS DISTINCT FROM
    CASE d.classid
      WHEN 'pg_catalog.pg_proc'::regclass THEN
        (SELECT pronamespace FROM pg_catalog.pg_proc WHERE oid = d.objid)
      WHEN 'pg_catalog.pg_class'::regclass THEN
        (SELECT relnamespace FROM pg_catalog.pg_class WHERE oid = d.objid)
      WHEN 'pg_catalog.pg_type'::regclass THEN
        (SELECT typnamespace FROM pg_catalog.pg_type WHERE oid = d.objid)
      ELSE e.extnamespace
    END;

-- Every function is SECURITY INVOKER (no rows expected).
SELECT p.oid::regprocedure AS security_definer
FROM pg_catalog.pg_proc p
JOIN pg_catalog.pg_depend d
  ON d.classid = 'pg_catalog.pg_proc'::regclass AND d.objid = p.oid
     AND d.deptype = 'e'
JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid
WHERE e.extname = 'idempotency' AND p.prosecdef;

-- The records table is not readable or writable by PUBLIC.
SELECT has_table_privilege('public', 'idem_records', 'SELECT') AS public_select,
       has_table_privilege('public', 'idem_records', 'INSERT') AS public_insert,
       has_table_privilege('public', 'idem_records', 'DELETE') AS public_delete;
