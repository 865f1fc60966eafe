-- catalog.sql: one line per object of the idempotency extension in the
-- schema :'schema', for the catalog-parity check of test/scripts/portable.sh
-- (C edition against portable edition):
--     KIND:NAME <tab> ATTRIBUTES
-- Functions: identity arguments, arguments with defaults, result, kind,
-- volatility, strictness, parallel label, security definer, leakproof,
-- set-returning, ROWS, SET options, comment, privileges.  Not compared,
-- by design (the portable edition changes exactly these): the language,
-- the body (prosrc, probin) and the cost (sql/portable/exceptions.txt,
-- "catalog-attribute" lines, which test/scripts/portable.sh passes as :'ignore').
-- Tables, views, sequences, types: columns (type, collation, NOT NULL,
-- default, identity), constraints, indexes, triggers, options, comments,
-- privileges.  The owner is written OWNER, so that an extension created by
-- a superuser and one created by a pgtle_admin role compare equal.
\pset format unaligned
\pset tuples_only on
\pset fieldsep '\t'
SET search_path = pg_catalog;

WITH nsp AS (
    SELECT oid FROM pg_namespace WHERE nspname = :'schema'
),
ignore AS (
    SELECT unnest(string_to_array(:'ignore', ',')) AS attr
),
-- Privileges as "grantee=privileges" sorted, the owner written OWNER.
acl(objoid, owner, acl) AS (
    SELECT oid, proowner, proacl FROM pg_proc WHERE pronamespace IN (SELECT oid FROM nsp)
    UNION ALL
    SELECT oid, relowner, relacl FROM pg_class WHERE relnamespace IN (SELECT oid FROM nsp)
),
acl_items AS (
    SELECT a.objoid,
           CASE WHEN e.grantee = 0 THEN 'PUBLIC'
                WHEN e.grantee = a.owner THEN 'OWNER'
                ELSE pg_get_userbyid(e.grantee) END
           || '=' || e.privilege_type || CASE WHEN e.is_grantable THEN '*' ELSE '' END AS item
      FROM acl a
      LEFT JOIN LATERAL aclexplode(a.acl) e ON true
),
acl_text AS (
    SELECT objoid, coalesce(string_agg(item, ',' ORDER BY item), '(default)') AS acl
      FROM acl_items
     GROUP BY objoid
),
funcs AS (
    SELECT 'function:' || p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')' AS object,
           concat_ws(' | ',
               'args=' || pg_get_function_arguments(p.oid),
               'result=' || pg_get_function_result(p.oid),
               'kind=' || p.prokind::text,
               'volatile=' || p.provolatile::text,
               'strict=' || p.proisstrict,
               'parallel=' || p.proparallel::text,
               'secdef=' || p.prosecdef,
               'leakproof=' || p.proleakproof,
               'retset=' || p.proretset,
               'rows=' || p.prorows,
               'config=' || coalesce(array_to_string(p.proconfig, ','), ''),
               CASE WHEN 'lang' IN (SELECT attr FROM ignore) THEN NULL
                    ELSE 'lang=' || (SELECT lanname FROM pg_language WHERE oid = p.prolang) END,
               CASE WHEN 'cost' IN (SELECT attr FROM ignore) THEN NULL
                    ELSE 'cost=' || p.procost END,
               'comment=' || coalesce(obj_description(p.oid, 'pg_proc'), '(none)'),
               'acl=' || (SELECT acl FROM acl_text WHERE objoid = p.oid)) AS attrs
      FROM pg_proc p
     WHERE p.pronamespace IN (SELECT oid FROM nsp)
),
rels AS (
    SELECT CASE c.relkind WHEN 'r' THEN 'table' WHEN 'v' THEN 'view' WHEN 'S' THEN 'sequence'
                          WHEN 'c' THEN 'type' WHEN 'i' THEN 'index' ELSE 'relkind_' || c.relkind::text END
           || ':' || c.relname AS object,
           concat_ws(' | ',
               'columns=' || coalesce((
                   SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
                                     || CASE WHEN a.attcollation <> 0 AND a.attcollation <> t.typcollation
                                             THEN ' COLLATE ' || (SELECT collname FROM pg_collation WHERE oid = a.attcollation)
                                             ELSE '' END
                                     || CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END
                                     || CASE WHEN a.attidentity <> '' THEN ' IDENTITY ' || a.attidentity::text ELSE '' END
                                     || coalesce(' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid), '')
                                     || coalesce(' COMMENT ' || col_description(c.oid, a.attnum), ''),
                                     ', ' ORDER BY a.attnum)
                     FROM pg_attribute a
                     JOIN pg_type t ON t.oid = a.atttypid
                     LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
                    WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped), ''),
               'constraints=' || coalesce((
                   SELECT string_agg(co.conname || ' ' || pg_get_constraintdef(co.oid), '; ' ORDER BY co.conname)
                     FROM pg_constraint co WHERE co.conrelid = c.oid), ''),
               'indexes=' || coalesce((
                   SELECT string_agg(pg_get_indexdef(i.indexrelid), '; ' ORDER BY pg_get_indexdef(i.indexrelid))
                     FROM pg_index i WHERE i.indrelid = c.oid), ''),
               'view=' || CASE WHEN c.relkind = 'v' THEN pg_get_viewdef(c.oid) ELSE '' END,
               'sequence=' || coalesce((
                   SELECT format_type(s.seqtypid, NULL) || ' start ' || s.seqstart || ' inc ' || s.seqincrement
                          || ' min ' || s.seqmin || ' max ' || s.seqmax || ' cycle ' || s.seqcycle
                     FROM pg_sequence s WHERE s.seqrelid = c.oid), ''),
               'options=' || coalesce(array_to_string(c.reloptions, ','), '') || ' rls=' || c.relrowsecurity,
               'comment=' || coalesce(obj_description(c.oid, 'pg_class'), '(none)'),
               'acl=' || (SELECT acl FROM acl_text WHERE objoid = c.oid)) AS attrs
      FROM pg_class c
     WHERE c.relnamespace IN (SELECT oid FROM nsp) AND c.relkind <> 'i'
),
types AS (
    SELECT 'typecomment:' || t.typname AS object,
           'comment=' || coalesce(obj_description(t.oid, 'pg_type'), '(none)') AS attrs
      FROM pg_type t
     WHERE t.typnamespace IN (SELECT oid FROM nsp) AND t.typtype = 'c'
       AND t.typrelid IN (SELECT oid FROM pg_class WHERE relkind = 'c')
),
triggers AS (
    SELECT 'trigger:' || c.relname || '.' || tg.tgname AS object,
           pg_get_triggerdef(tg.oid) AS attrs
      FROM pg_trigger tg
      JOIN pg_class c ON c.oid = tg.tgrelid
     WHERE c.relnamespace IN (SELECT oid FROM nsp) AND NOT tg.tgisinternal
)
SELECT object, regexp_replace(attrs, '\s+', ' ', 'g')
  FROM (SELECT object, attrs FROM funcs
        UNION ALL SELECT object, attrs FROM rels
        UNION ALL SELECT object, attrs FROM types
        UNION ALL SELECT object, attrs FROM triggers) AS o
 ORDER BY 1, 2;
