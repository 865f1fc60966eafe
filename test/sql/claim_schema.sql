-- Claims here stand alone in autocommit (idempotency.autocommit_claims
-- defaults to error; test/sql/silent_traps.sql tests that).
SET idempotency.autocommit_claims = allow;
-- CREATE EXTENSION ... SCHEMA: every object goes to the schema given, the
-- functions work with that schema outside the search_path, and one session
-- follows the extension when it is dropped and created elsewhere, or when
-- its schema is renamed.  Runs in a database of its own.
\set regress_db :DBNAME
CREATE DATABASE regress_claim_schema_db;
\c regress_claim_schema_db
SET idempotency.autocommit_claims = allow;
SET client_min_messages = warning;

CREATE SCHEMA "Idem Schema";
CREATE EXTENSION idempotency SCHEMA "Idem Schema";
-- Every member is in the schema given.
SELECT count(*) > 10 AS has_members,
       count(*) FILTER (WHERE n.nspname <> 'Idem Schema') AS elsewhere
FROM pg_depend d
JOIN pg_extension e ON e.oid = d.refobjid AND d.refclassid = 'pg_extension'::regclass
LEFT JOIN pg_proc p ON d.classid = 'pg_proc'::regclass AND p.oid = d.objid
LEFT JOIN pg_class c ON d.classid = 'pg_class'::regclass AND c.oid = d.objid
LEFT JOIN pg_type t ON d.classid = 'pg_type'::regclass AND t.oid = d.objid
LEFT JOIN pg_namespace n ON n.oid = coalesce(p.pronamespace, c.relnamespace, t.typnamespace)
WHERE e.extname = 'idempotency' AND d.deptype = 'e';
SELECT count(*) AS in_public FROM pg_class WHERE relname LIKE 'idem\_%'
  AND relnamespace = 'public'::regnamespace;

-- The search_path does not contain the schema: the functions still work.
SET search_path = public;
SELECT "Idem Schema".idem_claim('s', 'k') AS owned,
       "Idem Schema".idem_claim('s', 'k') AS duplicate,
       "Idem Schema".idem_claim('k') AS one_arg;
SELECT "Idem Schema".idem_complete('s', 'k', '{"r": 1}');
SELECT ("Idem Schema".idem_lookup('s', 'k')).result AS replay,
       pg_typeof("Idem Schema".idem_lookup('s', 'k')) AS type;
SELECT "Idem Schema".idem_release('', 'k') AS released;
UPDATE "Idem Schema".idem_records SET expires_at = now() - interval '1 day';
SELECT "Idem Schema".idem_purge() AS purged;

-- Renamed schema: the same session follows it.
SELECT "Idem Schema".idem_claim('s', 'before-rename') AS owned;
ALTER SCHEMA "Idem Schema" RENAME TO idem_renamed;
SELECT idem_renamed.idem_claim('s', 'before-rename') AS duplicate,
       idem_renamed.idem_claim('s', 'after-rename') AS owned,
       idem_renamed.idem_claim('one-arg-after-rename') AS one_arg;
SELECT idem_renamed.idem_complete('s', 'after-rename', '2');
SELECT (idem_renamed.idem_lookup('s', 'after-rename')).result AS replay;
SELECT idem_renamed.idem_release('s', 'after-rename') AS released;
SELECT idem_renamed.idem_purge() AS purged;
SELECT scope, key FROM idem_renamed.idem_records ORDER BY scope, key;

-- Dropped and created in another schema: the same session follows it.
DROP EXTENSION idempotency;
CREATE SCHEMA idem_other;
CREATE EXTENSION idempotency SCHEMA idem_other;
SELECT idem_other.idem_claim('s', 'before-rename') AS owned_in_new_table,
       idem_other.idem_claim('k') AS one_arg;
SELECT (idem_other.idem_lookup('s', 'before-rename')).status;
SELECT scope, key FROM idem_other.idem_records ORDER BY scope, key;
-- ... and created again in the same schema.
DROP EXTENSION idempotency;
CREATE EXTENSION idempotency SCHEMA idem_other;
SELECT idem_other.idem_claim('s', 'before-rename') AS owned_in_new_table;
SELECT count(*) AS records FROM idem_other.idem_records;

\c :regress_db
DROP DATABASE regress_claim_schema_db;
