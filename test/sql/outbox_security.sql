-- The outbox against a hostile database owner (docs/security.md, Outbox):
-- a role that may create objects in the extension's schema (here public)
-- and set the search_path of the database plants a type named record, a
-- domain whose CHECK runs its function, operators on the types our
-- functions compare, and an overload with one more (defaulted) argument
-- of every function of ours that is called from SQL.  Then a superuser
-- calls every entry point with that search_path: nothing of the
-- attacker's runs, and nothing fails because of it.  (The background
-- worker's round, with ALTER DATABASE ... SET search_path, is in
-- test/t/024_outbox.pl.)  Also: finite, bounded leases and retentions.
\set SHOW_CONTEXT never
\getenv abs_srcdir PG_ABS_SRCDIR
\set try_sql :abs_srcdir '/helpers/try.sql'
\i :try_sql
SET idem_test.try_detail = on;
TRUNCATE idem_outbox, idem_outbox_topics, idem_outbox_subscriptions, idem_outbox_runs,
         idem_outbox_aggregates;

CREATE ROLE regress_ob_attacker;
GRANT CREATE ON SCHEMA public TO regress_ob_attacker;
SET ROLE regress_ob_attacker;
CREATE TABLE public.ob_ran (fn text, who name, super boolean);
GRANT INSERT, SELECT ON public.ob_ran TO PUBLIC;
-- Notes who ran it, and whether that role is a superuser.
CREATE FUNCTION public.ob_evil(fn text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.ob_ran
    SELECT fn, current_user, r.rolsuper FROM pg_catalog.pg_roles r
     WHERE r.rolname OPERATOR(pg_catalog.=) current_user;
    RETURN true;
END $$;
CREATE DOMAIN public.ob_text AS text CHECK (public.ob_evil('domain'));
CREATE TYPE public.record AS (topic public.ob_text);
-- operators on the types the outbox compares
CREATE FUNCTION public.ob_xid8_eq(xid8, xid8) RETURNS boolean LANGUAGE sql
    AS $$ SELECT public.ob_evil('xid8 =') $$;
CREATE FUNCTION public.ob_xid8_lt(xid8, xid8) RETURNS boolean LANGUAGE sql
    AS $$ SELECT public.ob_evil('xid8 <') $$;
CREATE FUNCTION public.ob_uuid_eq(uuid, uuid) RETURNS boolean LANGUAGE sql
    AS $$ SELECT public.ob_evil('uuid =') $$;
CREATE FUNCTION public.ob_ts_minus(timestamptz, interval) RETURNS timestamptz LANGUAGE sql
    AS $$ SELECT CASE WHEN public.ob_evil('timestamptz -') THEN $1 END $$;
CREATE OPERATOR public.= (LEFTARG = xid8, RIGHTARG = xid8, FUNCTION = public.ob_xid8_eq);
CREATE OPERATOR public.< (LEFTARG = xid8, RIGHTARG = xid8, FUNCTION = public.ob_xid8_lt);
CREATE OPERATOR public.>= (LEFTARG = xid8, RIGHTARG = xid8, FUNCTION = public.ob_xid8_lt);
CREATE OPERATOR public.= (LEFTARG = uuid, RIGHTARG = uuid, FUNCTION = public.ob_uuid_eq);
CREATE OPERATOR public.- (LEFTARG = timestamptz, RIGHTARG = interval, FUNCTION = public.ob_ts_minus);
-- overloads, one more argument with a default, of what the outbox calls
CREATE FUNCTION public.idem_outbox_advance(consumer text, extra int DEFAULT 0) RETURNS void
    LANGUAGE sql AS $$ SELECT public.ob_evil('idem_outbox_advance') $$;
CREATE FUNCTION public.idem_outbox_id(topic text, key text, scope text DEFAULT NULL,
                                      seq int4 DEFAULT 0, extra int DEFAULT 0) RETURNS uuid
    LANGUAGE sql AS $$ SELECT CASE WHEN public.ob_evil('idem_outbox_id') THEN NULL::uuid END $$;
CREATE FUNCTION public.idem_xid8_near(x xid, near xid8, extra int DEFAULT 0) RETURNS xid8
    LANGUAGE sql AS $$ SELECT CASE WHEN public.ob_evil('idem_xid8_near') THEN near END $$;
RESET ROLE;

-- A superuser, with the attacker's search_path, calls every entry point.
SET search_path = public, pg_catalog;
SELECT idem_outbox_topic('sec', retention => '0');
SELECT idem_outbox_subscribe('sec-g', 'sec', from_start => true) AS subscribed;
BEGIN;
SELECT idem_claim('ob-sec', 'k1') AS claimed;
SELECT count(*) AS claims FROM idem_xact_claims();
SELECT idem_publish('sec', '{"n": 1}', aggregate => 'A') IS NOT NULL AS published;
SELECT idem_publish('sec', '{"n": 2}', aggregate => 'A', seq => 1) IS NOT NULL AS published;
SELECT idem_publish('sec', '{"n": 3}', seq => 2) IS NOT NULL AS published;
COMMIT;
SELECT idem_publish('sec', '{"n": 4}', key => 'k2', aggregate => 'B') IS NOT NULL AS published_by_key;
SELECT idem_publish('sec', '{"n": 4}', key => 'k2', aggregate => 'B') IS NULL AS duplicate;
SELECT payload->>'n' AS n, attempts FROM idem_outbox_fetch('sec-g', 10, '1 hour');
SELECT count(*) FILTER (WHERE idem_outbox_ack('sec-g', o.id)) AS acked
FROM idem_outbox o WHERE o.topic = 'sec';
SELECT consumer, unacknowledged FROM idem_outbox_backlog;
BEGIN;
SELECT idem_inbox('sec-g', '00000000-0000-8000-8000-000000000001') AS first;
COMMIT;
SELECT idem_outbox_purge() AS purged, idem_outbox_purge(1) AS purged_1;
SELECT idem_outbox_unsubscribe('sec-g', 'sec') AS unsubscribed;
RESET search_path;
-- nothing of the attacker's ran
SELECT count(*) AS attacker_ran FROM public.ob_ran;

-- An overload of idem_claim in the schema makes idem_inbox's call (and
-- the application's own calls of idem_claim) ambiguous: an error, never
-- the attacker's function.
SET ROLE regress_ob_attacker;
CREATE FUNCTION public.idem_claim(scope text, key text, ttl interval, fingerprint text,
                                  extra int DEFAULT 0) RETURNS boolean
    LANGUAGE sql AS $$ SELECT public.ob_evil('idem_claim') $$;
RESET ROLE;
SET idem_test.try_detail = off;
SELECT pg_temp.try($$SELECT idem_inbox('sec-g', '00000000-0000-8000-8000-000000000002')$$);
SET idem_test.try_detail = on;
SELECT count(*) AS attacker_ran FROM public.ob_ran;

DROP FUNCTION public.idem_claim(text, text, interval, text, int);
DROP FUNCTION public.idem_outbox_advance(text, int), public.idem_outbox_id(text, text, text, int4, int),
              public.idem_xid8_near(xid, xid8, int);
DROP OPERATOR public.= (xid8, xid8), public.< (xid8, xid8), public.>= (xid8, xid8),
              public.= (uuid, uuid), public.- (timestamptz, interval);
DROP FUNCTION public.ob_xid8_eq(xid8, xid8), public.ob_xid8_lt(xid8, xid8),
              public.ob_uuid_eq(uuid, uuid), public.ob_ts_minus(timestamptz, interval);
DROP TYPE public.record;
DROP DOMAIN public.ob_text;
DROP FUNCTION public.ob_evil(text);
DROP TABLE public.ob_ran;
REVOKE CREATE ON SCHEMA public FROM regress_ob_attacker;
DROP ROLE regress_ob_attacker;

--------------------------------------------------------------------------
-- Leases and retentions are finite and bounded: a clear 22023, never a
-- lease that never ends or a purge that fails with an out-of-range time.
--------------------------------------------------------------------------
SELECT idem_outbox_subscribe('sec-g', 'sec', from_start => true) AS subscribed;
SELECT pg_temp.try($$SELECT count(*) FROM idem_outbox_fetch('sec-g', 1, '1 day 1 second')$$);
SELECT pg_temp.try($$SELECT count(*) FROM idem_outbox_fetch('sec-g', 1, '100 years')$$);
SELECT pg_temp.try($$SELECT count(*) FROM idem_outbox_fetch('sec-g', 1, '1 day')$$) AS one_day;
SELECT CASE WHEN current_setting('server_version_num')::int >= 170000
            THEN pg_temp.try($$SELECT count(*) FROM idem_outbox_fetch('sec-g', 1, 'infinity')$$)
            ELSE '22023: idem_outbox_fetch: lease must be at most 1 day / The lease given was infinity.' END AS infinite_lease;
SELECT pg_temp.try($$SELECT idem_outbox_topic('sec', retention => '200000 years')$$);
SELECT pg_temp.try($$SELECT idem_outbox_topic('sec', retention => '100 years 1 day')$$);
SELECT pg_temp.try($$SELECT idem_outbox_topic('sec', retention => '100 years')$$) AS hundred_years;
SET idem_test.try_detail = off;   -- the detail shows the row, with its time
SELECT pg_temp.try($$INSERT INTO idem_outbox_topics (topic, retention) VALUES ('direct', '200000 years')$$);
SET idem_test.try_detail = on;
SELECT idem_outbox_purge() AS purge_still_works;
SELECT idem_outbox_unsubscribe('sec-g', 'sec') AS unsubscribed;

TRUNCATE idem_outbox, idem_outbox_topics, idem_outbox_subscriptions, idem_outbox_runs,
         idem_outbox_aggregates;
DELETE FROM idem_records WHERE scope LIKE 'ob-%' OR scope LIKE 'inbox:%';
