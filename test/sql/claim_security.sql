-- Claims here stand alone in autocommit (idempotency.autocommit_claims
-- defaults to error; test/sql/silent_traps.sql tests that).
SET idempotency.autocommit_claims = allow;
-- Security: a hostile search_path cannot hijack the functions' SQL; the
-- functions run with the caller's privileges (SECURITY INVOKER), so table
-- privileges and row-level security policies on idem_records apply.
TRUNCATE idem_records;
\set SHOW_CONTEXT never

\getenv abs_srcdir PG_ABS_SRCDIR
\set try_sql :abs_srcdir '/helpers/try.sql'
\i :try_sql

--------------------------------------------------------------------------
-- search_path hijack.  This comes first in the file, so the functions'
-- statements are prepared (on first use in the session) under the hostile
-- search_path.
--------------------------------------------------------------------------
CREATE SCHEMA regress_claim_hijack;
-- Decoys with the names the extension uses, each failing loudly if used.
CREATE TABLE regress_claim_hijack.idem_records (LIKE public.idem_records);
CREATE FUNCTION regress_claim_hijack.trap() RETURNS trigger
LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'hijacked: decoy table written'; END $$;
CREATE TRIGGER trap BEFORE INSERT OR UPDATE OR DELETE ON regress_claim_hijack.idem_records
FOR EACH ROW EXECUTE FUNCTION regress_claim_hijack.trap();
CREATE TYPE regress_claim_hijack.idem_record AS (hijacked boolean);
CREATE FUNCTION regress_claim_hijack.text_eq(text, text) RETURNS boolean
LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'hijacked: text ='; END $$;
CREATE OPERATOR regress_claim_hijack.= (LEFTARG = text, RIGHTARG = text,
                                        FUNCTION = regress_claim_hijack.text_eq);
CREATE FUNCTION regress_claim_hijack.ts_cmp(timestamptz, timestamptz) RETURNS boolean
LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'hijacked: timestamptz comparison'; END $$;
CREATE OPERATOR regress_claim_hijack.<= (LEFTARG = timestamptz, RIGHTARG = timestamptz,
                                         FUNCTION = regress_claim_hijack.ts_cmp);
CREATE OPERATOR regress_claim_hijack.> (LEFTARG = timestamptz, RIGHTARG = timestamptz,
                                        FUNCTION = regress_claim_hijack.ts_cmp);
CREATE FUNCTION regress_claim_hijack.tid_eq(tid, tid) RETURNS boolean
LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'hijacked: tid ='; END $$;
CREATE OPERATOR regress_claim_hijack.= (LEFTARG = tid, RIGHTARG = tid,
                                        FUNCTION = regress_claim_hijack.tid_eq);
CREATE FUNCTION regress_claim_hijack.now() RETURNS timestamptz
LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'hijacked: now()'; END $$;
-- A temporary table is searched before everything else.
CREATE TEMP TABLE idem_records (LIKE public.idem_records);
CREATE TRIGGER trap BEFORE INSERT OR UPDATE OR DELETE ON pg_temp.idem_records
FOR EACH ROW EXECUTE FUNCTION regress_claim_hijack.trap();

-- The hostile schema ahead of pg_catalog; the extension's schema last.
SET search_path = regress_claim_hijack, pg_catalog, public;
SELECT public.idem_claim('hijack', 'k1') AS owned,
       public.idem_claim('hijack', 'k1') AS duplicate,
       public.idem_claim('default-scope-key') AS one_arg;
SELECT public.idem_claim('hijack', 'k2', '1 hour', 'fp') AS owned,
       public.idem_claim('hijack', 'k2', '1 hour', 'fp') AS duplicate;
SELECT public.idem_complete('hijack', 'k1', '{"replay": 1}');
SELECT (public.idem_lookup('hijack', 'k1')).result AS replay,
       pg_catalog.pg_typeof(public.idem_lookup('hijack', 'k1')) AS type;
SELECT public.idem_release('hijack', 'k2') AS released;
UPDATE public.idem_records r SET expires_at = pg_catalog.now() OPERATOR(pg_catalog.-) interval '1 day'
WHERE r.key OPERATOR(pg_catalog.=) 'default-scope-key';
SELECT public.idem_claim('default-scope-key') AS expired_taken_over;
UPDATE public.idem_records r SET expires_at = pg_catalog.now() OPERATOR(pg_catalog.-) interval '1 day'
WHERE r.key OPERATOR(pg_catalog.=) 'default-scope-key';
SELECT public.idem_purge() AS purged;
-- The extension's schema not in the search_path at all.
SET search_path = regress_claim_hijack, pg_catalog;
SELECT public.idem_claim('hijack', 'k3') AS owned, public.idem_claim('hijack', 'k3') AS duplicate;
RESET search_path;
-- Everything went to the real table, nothing to the decoys.
SELECT scope, key, status FROM public.idem_records ORDER BY scope, key;
SELECT (SELECT count(*) FROM regress_claim_hijack.idem_records) AS decoy_rows,
       (SELECT count(*) FROM pg_temp.idem_records) AS temp_rows;
DROP TABLE pg_temp.idem_records;
SET client_min_messages = warning;
DROP SCHEMA regress_claim_hijack CASCADE;
RESET client_min_messages;
TRUNCATE idem_records;

--------------------------------------------------------------------------
-- Privileges.  The functions are executable by everyone; the table is not
-- readable or writable by PUBLIC, and the functions grant nothing more.
--------------------------------------------------------------------------
CREATE ROLE regress_claim_nobody;
CREATE ROLE regress_claim_reader;
CREATE ROLE regress_claim_writer;
GRANT SELECT ON idem_records TO regress_claim_reader;
GRANT SELECT, INSERT, UPDATE, DELETE ON idem_records TO regress_claim_writer;
SELECT idem_claim('priv', 'existing') AS owned;
UPDATE idem_records SET expires_at = now() - interval '1 day' WHERE key = 'existing';
SELECT idem_claim('priv', 'existing') AS owned_again;

-- No privileges: every function fails with 42501.
SET ROLE regress_claim_nobody;
SELECT pg_temp.try(s) AS result FROM (VALUES
    ($$SELECT idem_claim('priv', 'k')$$),
    ($$SELECT idem_claim('k')$$),
    ($$SELECT idem_complete('priv', 'existing', '1')$$),
    ($$SELECT idem_lookup('priv', 'existing')$$),
    ($$SELECT idem_release('priv', 'existing')$$),
    ($$SELECT idem_purge()$$)
) AS t(s);
RESET ROLE;

-- Read only: lookup works, every writing function fails with 42501.
SET ROLE regress_claim_reader;
SELECT pg_temp.try(s) AS result FROM (VALUES
    ($$SELECT (idem_lookup('priv', 'existing')).status$$),
    ($$SELECT idem_claim('priv', 'k')$$),
    ($$SELECT idem_claim('priv', 'existing')$$),
    ($$SELECT idem_complete('priv', 'existing', '1')$$),
    ($$SELECT idem_release('priv', 'existing')$$),
    ($$SELECT idem_purge()$$)
) AS t(s);
RESET ROLE;

-- Read and write: everything works.
SET ROLE regress_claim_writer;
SELECT pg_temp.try(s) AS result FROM (VALUES
    ($$SELECT idem_claim('priv', 'k')$$),
    ($$SELECT idem_claim('priv', 'k')$$),
    ($$SELECT idem_complete('priv', 'k', '"done"')$$),
    ($$SELECT (idem_lookup('priv', 'k')).result$$),
    ($$SELECT idem_release('priv', 'existing')$$),
    ($$SELECT idem_purge()$$)
) AS t(s);
RESET ROLE;
SELECT scope, key, status FROM idem_records ORDER BY scope, key;
TRUNCATE idem_records;

--------------------------------------------------------------------------
-- Row-level security: one tenant per scope, the scope being the role name.
--------------------------------------------------------------------------
CREATE ROLE regress_claim_tenant_a;
CREATE ROLE regress_claim_tenant_b;
GRANT SELECT, INSERT, UPDATE, DELETE ON idem_records
    TO regress_claim_tenant_a, regress_claim_tenant_b;
ALTER TABLE idem_records ENABLE ROW LEVEL SECURITY;
CREATE POLICY regress_claim_tenant ON idem_records
    USING (scope = current_user) WITH CHECK (scope = current_user);

SET ROLE regress_claim_tenant_b;
SELECT idem_claim('regress_claim_tenant_b', 'order-1') AS b_owns,
       idem_claim('regress_claim_tenant_b', 'order-2', '1 hour') AS b_owns_2,
       idem_claim('regress_claim_tenant_b', 'order-3') AS b_owns_3;
SELECT idem_complete('regress_claim_tenant_b', 'order-1', '{"secret": "b"}');
RESET ROLE;
-- Tenant b's order-3 expires (moved into the past by the superuser).
UPDATE idem_records SET expires_at = now() - interval '1 day' WHERE key = 'order-3';

SET ROLE regress_claim_tenant_a;
-- Its own scope: fine.
SELECT idem_claim('regress_claim_tenant_a', 'order-1') AS a_owns,
       idem_claim('regress_claim_tenant_a', 'order-1') AS a_duplicate;
-- Another tenant's scope: claiming is refused by the policy ...
SELECT pg_temp.try(s) AS result FROM (VALUES
    ($$SELECT idem_claim('regress_claim_tenant_b', 'order-9')$$),
    ($$SELECT idem_claim('regress_claim_tenant_b', 'order-1')$$)
) AS t(s);
-- ... its records cannot be read, completed or removed ...
SELECT idem_lookup('regress_claim_tenant_b', 'order-1') IS NULL AS b_hidden;
SELECT pg_temp.try($$SELECT idem_complete('regress_claim_tenant_b', 'order-2', '1')$$) AS result;
SELECT idem_release('regress_claim_tenant_b', 'order-1') AS released_b;
-- ... and purge only sees this tenant's expired rows (none).
SELECT idem_purge() AS purged_by_a;
RESET ROLE;

-- Tenant b's records are untouched.
SELECT scope, key, status, result FROM idem_records ORDER BY scope, key;

SET ROLE regress_claim_tenant_b;
SELECT idem_claim('regress_claim_tenant_b', 'order-1') AS b_duplicate;
SELECT (idem_lookup('regress_claim_tenant_b', 'order-1')).result AS b_replay;
SELECT idem_lookup('regress_claim_tenant_a', 'order-1') IS NULL AS a_hidden;
SELECT idem_purge() AS purged_by_b;
RESET ROLE;
SELECT scope, key FROM idem_records ORDER BY scope, key;

DROP POLICY regress_claim_tenant ON idem_records;
ALTER TABLE idem_records DISABLE ROW LEVEL SECURITY;
REVOKE ALL ON idem_records FROM regress_claim_reader, regress_claim_writer,
    regress_claim_tenant_a, regress_claim_tenant_b;
DROP ROLE regress_claim_nobody, regress_claim_reader, regress_claim_writer,
    regress_claim_tenant_a, regress_claim_tenant_b;
DROP FUNCTION pg_temp.try(text);
TRUNCATE idem_records;
