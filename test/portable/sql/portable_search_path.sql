-- The portable bodies run without SET search_path (the hot paths stay
-- cheap), so every type, operator and function they name must be
-- qualified: a superuser whose search_path puts a schema of another role
-- before pg_catalog (ALTER DATABASE ... SET search_path = public,
-- pg_catalog, say) must run nothing of that role's.  sp_mallory makes a
-- type "record" whose field is a domain with a CHECK calling its
-- function (a DECLARE x record; used to find it), domains named after
-- the base types, operators over them and functions named after the
-- pg_catalog functions the bodies call, all of which log to sp_evil.ran;
-- and, in the extension's schema, an overload of idem_guard_allows a
-- WHEN condition without casts would resolve to.  Then the superuser
-- calls every entry point with that search_path, and nothing may be
-- logged.
CREATE ROLE sp_mallory;
GRANT CREATE ON SCHEMA public TO sp_mallory;
CREATE SCHEMA sp_evil AUTHORIZATION sp_mallory;
SET ROLE sp_mallory;
CREATE TABLE sp_evil.ran (what pg_catalog.text);
GRANT INSERT ON sp_evil.ran TO PUBLIC;
CREATE FUNCTION sp_evil.pwn(what pg_catalog.text) RETURNS pg_catalog.bool
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    INSERT INTO sp_evil.ran VALUES (what || ' as ' || current_user);
    RETURN true;
END $$;
CREATE DOMAIN sp_evil.trap AS pg_catalog.text CHECK (sp_evil.pwn('record'));
-- Shaped as the rows idem_claim_many reads (a call that succeeds keeps
-- what the trap did).
CREATE TYPE sp_evil.record AS (key sp_evil.trap, n pg_catalog.int8, status sp_evil.trap,
                               created_at pg_catalog.timestamptz, claimable pg_catalog.bool);
-- Domains named after base types.
DO $$
DECLARE
    t pg_catalog.text;
BEGIN
    FOREACH t IN ARRAY '{text,name,int2,int4,int8,oid,bool,jsonb,timestamptz,interval,bytea,regclass,regtype,regprocedure,regnamespace,char,varchar,uuid,xid8,numeric,float8}'::pg_catalog.text[] LOOP
        EXECUTE pg_catalog.format('CREATE DOMAIN sp_evil.%I AS pg_catalog.%I CHECK (sp_evil.pwn(%L))',
                                  t, t, 'type ' || t);
    END LOOP;
END $$;
-- Operators over the base types, named as pg_catalog's.
DO $$
DECLARE
    o pg_catalog.record;
    n pg_catalog.int4 := 0;
BEGIN
    FOR o IN
        SELECT p.oprname, p.oprleft::pg_catalog.regtype AS l, p.oprright::pg_catalog.regtype AS r,
               p.oprresult::pg_catalog.regtype AS res
          FROM pg_catalog.pg_operator AS p
          JOIN pg_catalog.pg_type AS rt ON rt.oid = p.oprright
         WHERE p.oprnamespace = 'pg_catalog'::pg_catalog.regnamespace
           AND rt.typtype = 'b' AND p.oprleft <> 0 AND p.oprcode <> 0
           AND (SELECT lt.typtype FROM pg_catalog.pg_type AS lt WHERE lt.oid = p.oprleft) = 'b'
           AND p.oprleft::pg_catalog.regtype::pg_catalog.text = ANY ('{text,name,smallint,integer,bigint,oid,boolean,jsonb,"timestamp with time zone",interval,bytea,"\"char\"","text[]","smallint[]","character varying"}')
           AND p.oprright::pg_catalog.regtype::pg_catalog.text = ANY ('{text,name,smallint,integer,bigint,oid,boolean,jsonb,"timestamp with time zone",interval,bytea,"\"char\"","text[]","smallint[]","character varying"}')
    LOOP
        n := n + 1;
        EXECUTE pg_catalog.format('CREATE FUNCTION sp_evil.op%s(%s, %s) RETURNS %s LANGUAGE plpgsql'
                                  ' SET search_path = pg_catalog, pg_temp'
                                  ' AS $f$BEGIN PERFORM sp_evil.pwn(%L); RETURN NULL; END$f$',
                                  n, o.l, o.r, o.res, pg_catalog.format('operator %s(%s, %s)', o.oprname, o.l, o.r));
        EXECUTE pg_catalog.format('CREATE OPERATOR sp_evil.%s (LEFTARG = %s, RIGHTARG = %s, FUNCTION = sp_evil.op%s)',
                                  o.oprname, o.l, o.r, n);
    END LOOP;
END $$;
-- Functions named as the pg_catalog functions the bodies call.
DO $$
DECLARE
    f pg_catalog.record;
    n pg_catalog.int4 := 0;
BEGIN
    FOR f IN
        SELECT p.proname, pg_catalog.pg_get_function_identity_arguments(p.oid) AS args,
               p.prorettype::pg_catalog.regtype AS res
          FROM pg_catalog.pg_proc AS p
         WHERE p.pronamespace = 'pg_catalog'::pg_catalog.regnamespace AND p.prokind = 'f'
           AND NOT p.proretset AND p.provariadic = 0
           AND p.proname = ANY ('{abs,array_length,array_lower,array_ndims,btrim,cardinality,clock_timestamp,convert_from,convert_to,current_setting,date_part,decode,floor,format_type,gen_random_uuid,get_byte,getdatabaseencoding,has_table_privilege,hashtext,jsonb_array_length,jsonb_build_object,jsonb_path_exists,jsonb_typeof,length,lower,lpad,nextval,now,octet_length,pg_current_xact_id,pg_sleep,pg_typeof,quote_ident,quote_literal,regexp_split_to_array,replace,row_security_active,sha256,string_to_array,substr,substring,to_hex}')
           AND NOT EXISTS (SELECT FROM pg_catalog.unnest(p.proargtypes::pg_catalog.oid[] || p.prorettype) AS a(t)
                            JOIN pg_catalog.pg_type AS y ON y.oid = a.t WHERE y.typtype = 'p')
    LOOP
        n := n + 1;
        EXECUTE pg_catalog.format('CREATE FUNCTION sp_evil.%I(%s) RETURNS %s LANGUAGE plpgsql'
                                  ' SET search_path = pg_catalog, pg_temp'
                                  ' AS $f$BEGIN PERFORM sp_evil.pwn(%L); RETURN NULL; END$f$',
                                  f.proname, f.args, f.res, pg_catalog.format('function %s(%s)', f.proname, f.args));
    END LOOP;
END $$;
-- In the extension's schema: what an uncast WHEN condition of a guard on
-- a varchar column would call.
CREATE FUNCTION public.idem_guard_allows(pg_catalog.text, pg_catalog.varchar, pg_catalog.varchar)
RETURNS pg_catalog.bool LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$BEGIN RETURN sp_evil.pwn('idem_guard_allows(text, varchar, varchar)'); END$$;
RESET ROLE;
SELECT pg_catalog.count(*) > 100 AS many_traps FROM pg_catalog.pg_operator
 WHERE oprnamespace = 'sp_evil'::pg_catalog.regnamespace;

CREATE TABLE public.sp_orders (id pg_catalog.int4 PRIMARY KEY, status pg_catalog.varchar,
                               version pg_catalog.int8 NOT NULL DEFAULT 0);
CREATE TABLE public.sp_parent (id pg_catalog.int4 PRIMARY KEY, status pg_catalog.text);

-- The superuser, with sp_mallory's schema first.
SET search_path = sp_evil, pg_catalog, public;
SELECT idem_machine_define('sp_m', '{"initial": ["new"], "transitions": {"new": ["paid"], "paid": ["shipped"]}}');
SELECT idem_can_transition('sp_m', 'new', 'paid'), idem_transition('sp_m', 'new', 'paid'),
       idem_transition_strict('sp_m', 'new', 'paid');
SELECT * FROM idem_sources('sp_m', 'paid');
SELECT idem_guard('public.sp_orders', 'status', 'sp_m', 'version', true);
SELECT idem_guard('public.sp_parent', 'status', 'sp_m');
-- (The test's own statements are qualified too.)
INSERT INTO public.sp_orders (id, status) VALUES (1, 'new');
UPDATE public.sp_orders SET status = 'paid' WHERE id OPERATOR(pg_catalog.=) 1;
UPDATE public.sp_orders SET status = 'new' WHERE id OPERATOR(pg_catalog.=) 1;
INSERT INTO public.sp_orders (id, status) VALUES (2, 'paid');
INSERT INTO public.sp_parent (id, status) VALUES (1, 'new');
UPDATE public.sp_parent SET status = 'paid';
UPDATE public.sp_parent SET status = 'x';
SELECT status FROM public.sp_parent;
SELECT status, version FROM public.sp_orders;
-- idem_unguard drops triggers: pg_tle's sql_drop event trigger (in every
-- database of test/scripts/portable.sh) declares a record too, and would
-- run the trap itself; replica mode keeps event triggers from firing.
SET session_replication_role = replica;
SELECT idem_unguard('public.sp_parent', 'status');
RESET session_replication_role;
SELECT idem_machine_drop('sp_m');
SET session_replication_role = replica;
SELECT idem_unguard('public.sp_orders', 'status');
RESET session_replication_role;
SELECT idem_machine_drop('sp_m');

BEGIN;
SELECT idem_claim('sp_k0');
SELECT idem_claim('sp', 'k1');
SELECT idem_claim('sp', 'k1');
SELECT idem_complete('sp', 'k1', '{"ok": true}');
SELECT status, result FROM idem_lookup('sp', 'k1');
SELECT * FROM idem_claim_many('sp', ARRAY['k1', 'k2', 'k3']);
SELECT * FROM idem_claim_many('sp', ARRAY['k2', 'k4'], '1 day');
SELECT idem_release('sp', 'k2');
SELECT outcome FROM idem_begin('sp', 'l1');
SELECT idem_heartbeat('sp', 'l1', (SELECT r.token FROM public.idem_records AS r WHERE r.scope OPERATOR(pg_catalog.=) 'sp' AND r.key OPERATOR(pg_catalog.=) 'l1')) IS NOT NULL AS beat;
SELECT idem_finish('sp', 'l1', (SELECT r.token FROM public.idem_records AS r WHERE r.scope OPERATOR(pg_catalog.=) 'sp' AND r.key OPERATOR(pg_catalog.=) 'l1'), '{"done": 1}');
SELECT outcome FROM idem_begin('sp', 'l2');
SELECT idem_fail('sp', 'l2', (SELECT r.token FROM public.idem_records AS r WHERE r.scope OPERATOR(pg_catalog.=) 'sp' AND r.key OPERATOR(pg_catalog.=) 'l2'), '{"e": 1}', false);
SELECT status FROM idem_await('sp', 'l1', '1 second');
SELECT idem_token_issue('sp') IS NOT NULL AS issued;
SELECT idem_token_consume('sp', idem_token_issue('sp'));
COMMIT;
SELECT scope, records FROM idem_summary() WHERE scope OPERATOR(pg_catalog.=) 'sp';
SELECT idem_purge() OPERATOR(pg_catalog.>=) 0 AS purged;
-- The outbox (SQL and PL/pgSQL in both editions).
SELECT idem_outbox_subscribe('sp_c', 'sp_t', true);
SELECT idem_publish('sp_t', '{"n": 1}', key => 'sp_k') IS NOT NULL AS published;
SELECT idem_outbox_ack('sp_c', f.id) FROM idem_outbox_fetch('sp_c') AS f;
SELECT idem_outbox_purge() OPERATOR(pg_catalog.>=) 0 AS outbox_purged;

RESET search_path;
-- Nothing of sp_mallory's ran.
SELECT * FROM sp_evil.ran;

SET client_min_messages = warning;
DROP TABLE public.sp_orders, public.sp_parent;
DELETE FROM idem_records WHERE scope IN ('sp', '');
DELETE FROM idem_transition_log WHERE table_name = 'public.sp_orders';
SELECT idem_outbox_unsubscribe('sp_c', 'sp_t');
DELETE FROM idem_outbox WHERE topic = 'sp_t';
DROP FUNCTION public.idem_guard_allows(pg_catalog.text, pg_catalog.varchar, pg_catalog.varchar);
DROP SCHEMA sp_evil CASCADE;
REVOKE CREATE ON SCHEMA public FROM sp_mallory;
DROP ROLE sp_mallory;
