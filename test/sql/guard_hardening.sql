-- Hardening, round two: guards and machines against application roles,
-- table owners and roles with CREATE on the extension's schema.  Each
-- section is one class of finding; each crashed the server,
-- escalated a role or let a status past a guard before 0.5.0.
SET statement_timeout = '20s';
\set SHOW_CONTEXT never

\getenv abs_srcdir PG_ABS_SRCDIR
\set try_sql :abs_srcdir '/helpers/try.sql'
\i :try_sql

SELECT idem_machine_define('gh_order', '{"initial": ["new"], "transitions": {"new": ["paid", "cancelled"], "paid": ["refunded"]}}');

CREATE ROLE regress_gh_app;
SELECT idem_grant('regress_gh_app');
GRANT CREATE ON SCHEMA public TO regress_gh_app;
GRANT EXECUTE ON FUNCTION idem_guard(regclass, name, text, name, boolean) TO regress_gh_app;
GRANT EXECUTE ON FUNCTION idem_unguard(regclass, name) TO regress_gh_app;

--------------------------------------------------------------------------
-- 1. Generated SQL binds only to the extension's objects.  A role with
--    CREATE on the extension's schema defines better-matching overloads of
--    idem_guard_allows for every status type idem_guard accepts (text,
--    varchar, domains over them) and of the operators the WHEN conditions
--    use, before a superuser guards its tables: the guards never call them
--    (they would let every value through and record the call).
--------------------------------------------------------------------------
SET ROLE regress_gh_app;
CREATE TABLE gh_captured (fn text);
GRANT INSERT ON gh_captured TO PUBLIC;
CREATE DOMAIN gh_dom_text AS text;
CREATE DOMAIN gh_dom_vc AS varchar(20);
CREATE FUNCTION public.idem_guard_allows(m text, o varchar, n varchar) RETURNS boolean
    LANGUAGE plpgsql AS $$ BEGIN INSERT INTO gh_captured VALUES ('varchar'); RETURN true; END $$;
CREATE FUNCTION public.idem_guard_allows(m text, o gh_dom_text, n gh_dom_text) RETURNS boolean
    LANGUAGE plpgsql AS $$ BEGIN INSERT INTO gh_captured VALUES ('dom_text'); RETURN true; END $$;
CREATE FUNCTION public.idem_guard_allows(m text, o gh_dom_vc, n gh_dom_vc) RETURNS boolean
    LANGUAGE plpgsql AS $$ BEGIN INSERT INTO gh_captured VALUES ('dom_vc'); RETURN true; END $$;
CREATE FUNCTION public.idem_guard_allows(m varchar, o varchar, n varchar) RETURNS boolean
    LANGUAGE plpgsql AS $$ BEGIN INSERT INTO gh_captured VALUES ('varchar3'); RETURN true; END $$;
CREATE FUNCTION public.gh_ne(a varchar, b varchar) RETURNS boolean
    LANGUAGE plpgsql AS $$ BEGIN INSERT INTO gh_captured VALUES ('<>'); RETURN a::text <> b::text; END $$;
CREATE OPERATOR public.<> (LEFTARG = varchar, RIGHTARG = varchar, FUNCTION = public.gh_ne);
CREATE TABLE gh_text (id int PRIMARY KEY, status text, version int NOT NULL DEFAULT 0);
CREATE TABLE gh_vc (id int PRIMARY KEY, status varchar(20), version int NOT NULL DEFAULT 0);
CREATE TABLE gh_dt (id int PRIMARY KEY, status gh_dom_text, version int NOT NULL DEFAULT 0);
CREATE TABLE gh_dv (id int PRIMARY KEY, status gh_dom_vc, version int NOT NULL DEFAULT 0);
RESET ROLE;
-- The superuser guards them (with version and history: every trigger).
SELECT idem_guard(t, 'status', 'gh_order', 'version', true)
  FROM unnest(ARRAY['gh_text', 'gh_vc', 'gh_dt', 'gh_dv']::regclass[]) t;
-- No trigger depends on a function or operator outside pg_catalog and the
-- extension.
SELECT count(*) AS foreign_dependencies
  FROM pg_trigger t JOIN pg_depend d ON d.classid = 'pg_trigger'::regclass AND d.objid = t.oid
 WHERE t.tgrelid IN ('gh_text'::regclass, 'gh_vc'::regclass, 'gh_dt'::regclass, 'gh_dv'::regclass)
   AND ((d.refclassid = 'pg_proc'::regclass
         AND d.refobjid NOT IN (SELECT objid FROM pg_depend WHERE refobjid = (SELECT oid FROM pg_extension WHERE extname = 'idempotency'))
         AND (SELECT pronamespace FROM pg_proc WHERE oid = d.refobjid) <> 'pg_catalog'::regnamespace)
     OR (d.refclassid = 'pg_operator'::regclass
         AND (SELECT oprnamespace FROM pg_operator WHERE oid = d.refobjid) <> 'pg_catalog'::regnamespace));
SET ROLE regress_gh_app;
INSERT INTO gh_text VALUES (1, 'new');
INSERT INTO gh_vc VALUES (1, 'new');
INSERT INTO gh_dt VALUES (1, 'new');
INSERT INTO gh_dv VALUES (1, 'new');
SELECT pg_temp.try(format('UPDATE %s SET status = %L', t, 'refunded')) AS illegal_move, t
  FROM unnest(ARRAY['gh_text', 'gh_vc', 'gh_dt', 'gh_dv']) t;
SELECT pg_temp.try(format('INSERT INTO %s VALUES (2, %L)', t, 'paid')) AS illegal_start, t
  FROM unnest(ARRAY['gh_text', 'gh_vc', 'gh_dt', 'gh_dv']) t;
SELECT pg_temp.try(format('UPDATE %s SET status = %L', t, 'paid')) AS legal_move, t
  FROM unnest(ARRAY['gh_text', 'gh_vc', 'gh_dt', 'gh_dv']) t;
SELECT 'gh_text' AS t, status, version FROM gh_text UNION ALL
SELECT 'gh_vc', status, version FROM gh_vc UNION ALL
SELECT 'gh_dt', status, version FROM gh_dt UNION ALL
SELECT 'gh_dv', status, version FROM gh_dv;
SELECT count(*) AS captured_calls FROM gh_captured;
RESET ROLE;
SELECT table_name, from_state, to_state FROM idem_transition_log
 WHERE table_name LIKE '%gh_%' ORDER BY id;
DROP TABLE gh_text, gh_vc, gh_dt, gh_dv;
DROP OPERATOR public.<> (varchar, varchar);
DROP FUNCTION public.gh_ne(varchar, varchar);
DROP FUNCTION public.idem_guard_allows(text, varchar, varchar);
DROP FUNCTION public.idem_guard_allows(text, gh_dom_text, gh_dom_text);
DROP FUNCTION public.idem_guard_allows(text, gh_dom_vc, gh_dom_vc);
DROP FUNCTION public.idem_guard_allows(varchar, varchar, varchar);

--------------------------------------------------------------------------
-- 2. Re-entrancy: user code that runs inside a guard's trigger (here a
--    cast of the row key to json, called by the history INSERT) makes the
--    trigger's cache entry stale (GRANT on the table), resets the machine
--    cache (idem_machine_define) and fires the same trigger again, nested.
--    The outer call's entry and plan stayed in use: the server crashed
--    (freeing the running plan).  Now the entry is counted busy.
--------------------------------------------------------------------------
SET ROLE regress_gh_app;
CREATE TYPE gh_key AS ENUM ('a', 'b', 'c', 'd');
CREATE TABLE gh_re (id gh_key PRIMARY KEY, status text);
CREATE FUNCTION gh_key_json(k gh_key) RETURNS json LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('gh.nest', true) = 'same' THEN
        GRANT SELECT ON gh_re TO PUBLIC;
        UPDATE gh_re SET status = status WHERE id <> k;
    END IF;
    IF current_setting('gh.nest', true) = 'move' THEN
        GRANT SELECT ON gh_re TO PUBLIC;
        UPDATE gh_re SET status = 'paid' WHERE status = 'new' AND id <> k;
    END IF;
    RETURN to_json(k::text);
END
$$;
CREATE CAST (gh_key AS json) WITH FUNCTION gh_key_json(gh_key);
SELECT idem_guard('gh_re', 'status', 'gh_order', history => true);
INSERT INTO gh_re VALUES ('a', 'new'), ('b', 'new'), ('c', 'new');
-- b: new -> paid; its history's key cast rewrites the other rows' status
-- unchanged (the statement of the original report).
SET gh.nest = same;
SELECT pg_temp.try($$UPDATE gh_re SET status = 'paid' WHERE id = 'b'$$) AS nested_same;
SET gh.nest = move;
-- a: new -> cancelled; its history's key cast moves c to paid, whose
-- history (the same trigger, nested) casts its key again.
SELECT pg_temp.try($$UPDATE gh_re SET status = 'cancelled' WHERE id = 'a'$$) AS nested_update;
SELECT id, status FROM gh_re ORDER BY id;
-- The same while the machine cache is reset inside (a committed-looking
-- redefinition in our own transaction), and an illegal move nested.
RESET ROLE;
CREATE OR REPLACE FUNCTION gh_key_json(k gh_key) RETURNS json LANGUAGE plpgsql AS $$
BEGIN
    GRANT SELECT ON gh_re TO PUBLIC;
    PERFORM idem_machine_define('gh_order', (SELECT definition FROM idem_machines WHERE machine = 'gh_order'));
    IF k = 'd' THEN
        UPDATE gh_re SET status = 'new' WHERE id = 'a';
    END IF;
    RETURN to_json(k::text);
END
$$;
SELECT pg_temp.try($$INSERT INTO gh_re VALUES ('d', 'new')$$) AS nested_illegal;
SELECT id, status FROM gh_re ORDER BY id;
RESET ROLE;
SELECT row_key, from_state, to_state FROM idem_transition_log
 WHERE table_name = 'public.gh_re' ORDER BY id;
DROP TABLE gh_re;
DROP CAST (gh_key AS json);
DROP FUNCTION gh_key_json(gh_key);
DROP TYPE gh_key;

--------------------------------------------------------------------------
-- 3. A status changed however the row changes: a BEFORE trigger that
--    derives it (the UPDATE does not name the column), a rule, and the
--    version and history that follow the same rule.
--------------------------------------------------------------------------
SET ROLE regress_gh_app;
CREATE TABLE gh_b (id int PRIMARY KEY, status text, amount int, version int NOT NULL DEFAULT 0);
SELECT idem_guard('gh_b', 'status', 'gh_order', 'version', true);
INSERT INTO gh_b VALUES (1, 'new', 0), (2, 'new', 0);
-- A trigger that sorts after the guard's own BEFORE trigger.
CREATE FUNCTION gh_derive() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.amount < 0 THEN NEW.status := 'refunded-by-trigger'; END IF;
    IF NEW.amount > 0 THEN NEW.status := 'paid'; END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER zz_derive BEFORE UPDATE ON gh_b FOR EACH ROW EXECUTE FUNCTION gh_derive();
SELECT pg_temp.try($$UPDATE gh_b SET amount = -1 WHERE id = 1$$) AS derived_not_a_state;
-- A legal derived move after the version trigger ran: the version did
-- not follow, so the guard refuses it (27000) rather than let it lag.
SELECT pg_temp.try($$UPDATE gh_b SET amount = 5 WHERE id = 1$$) AS derived_after_version;
-- Fired before the guard's trigger (name order): checked, versioned, logged.
DROP TRIGGER zz_derive ON gh_b;
CREATE TRIGGER a_derive BEFORE UPDATE ON gh_b FOR EACH ROW EXECUTE FUNCTION gh_derive();
SELECT pg_temp.try($$UPDATE gh_b SET amount = 5 WHERE id = 1$$) AS derived_before_version;
SELECT pg_temp.try($$UPDATE gh_b SET amount = -1 WHERE id = 2$$) AS derived_illegal;
SELECT id, status, version FROM gh_b ORDER BY id;
DROP TRIGGER a_derive ON gh_b;
-- Through a rule on a view.
CREATE VIEW gh_bv AS SELECT id, status FROM gh_b;
CREATE RULE gh_bv_upd AS ON UPDATE TO gh_bv DO INSTEAD
    UPDATE gh_b SET status = NEW.status WHERE id = OLD.id;
SELECT pg_temp.try($$UPDATE gh_bv SET status = 'new' WHERE id = 1$$) AS rule_backwards;
SELECT pg_temp.try($$UPDATE gh_bv SET status = 'refunded' WHERE id = 1$$) AS rule_legal;
SELECT id, status, version FROM gh_b ORDER BY id;
RESET ROLE;
SELECT row_key, from_state, to_state FROM idem_transition_log
 WHERE table_name = 'public.gh_b' ORDER BY id;
DROP VIEW gh_bv;
DROP TABLE gh_b;
DROP FUNCTION gh_derive();

--------------------------------------------------------------------------
-- 4. Inheritance: a child's rows are reached by an UPDATE of the parent,
--    and triggers are not inherited.  A parent with an unguarded child is
--    refused at idem_guard and at every UPDATE (a child added later).
--------------------------------------------------------------------------
SET ROLE regress_gh_app;
CREATE TABLE gh_parent (id int PRIMARY KEY, status text);
SELECT idem_guard('gh_parent', 'status', 'gh_order');
CREATE TABLE gh_child () INHERITS (gh_parent);
INSERT INTO gh_child VALUES (10, 'new');
SELECT pg_temp.try($$UPDATE gh_parent SET status = 'bogus' WHERE id = 10$$) AS through_parent;
SELECT pg_temp.try($$UPDATE gh_parent SET status = 'paid' WHERE id = 10$$) AS legal_through_parent;
SELECT pg_temp.try($$SELECT idem_guard('gh_parent', 'status', 'gh_order')$$) AS guard_parent_again;
SELECT idem_guard('gh_child', 'status', 'gh_order');
SELECT pg_temp.try($$UPDATE gh_parent SET status = 'bogus' WHERE id = 10$$) AS child_guarded;
SELECT pg_temp.try($$UPDATE gh_parent SET status = 'paid' WHERE id = 10$$) AS child_legal;
SELECT tableoid::regclass, id, status FROM gh_parent;
-- A grandchild added later.
CREATE TABLE gh_grandchild () INHERITS (gh_child);
SELECT pg_temp.try($$UPDATE gh_parent SET status = 'refunded' WHERE id = 10$$) AS grandchild_unguarded;
DROP TABLE gh_grandchild;
SELECT pg_temp.try($$UPDATE gh_parent SET status = 'refunded' WHERE id = 10$$) AS grandchild_gone;
DROP TABLE gh_child, gh_parent;
RESET ROLE;

--------------------------------------------------------------------------
-- 5. Renamed and re-added columns: the guard follows the column it was
--    installed on (as its WHEN condition does) and refuses to run when
--    its arguments' name now means another column.
--------------------------------------------------------------------------
SET ROLE regress_gh_app;
CREATE TABLE gh_r (id int PRIMARY KEY, status text);
SELECT idem_guard('gh_r', 'status', 'gh_order');
ALTER TABLE gh_r RENAME status TO legacy_status;
ALTER TABLE gh_r ADD COLUMN status text;
SELECT pg_temp.try($$INSERT INTO gh_r (id, legacy_status, status) VALUES (1, 'bogus', 'new')$$) AS renamed_insert;
SELECT pg_temp.try($$INSERT INTO gh_r (id, legacy_status, status) VALUES (2, 'new', 'new')$$) AS renamed_legal;
SELECT pg_temp.try($$UPDATE gh_r SET legacy_status = 'bogus'$$) AS renamed_update;
-- Installed again on the column's current name, it works again.
SELECT idem_unguard('gh_r', 'legacy_status');
SELECT idem_guard('gh_r', 'legacy_status', 'gh_order');
SELECT pg_temp.try($$INSERT INTO gh_r (id, legacy_status, status) VALUES (3, 'bogus', 'new')$$) AS reguarded_insert;
SELECT pg_temp.try($$UPDATE gh_r SET legacy_status = 'paid'$$) AS reguarded_update;
SELECT id, legacy_status FROM gh_r ORDER BY id;
DROP TABLE gh_r;
RESET ROLE;

--------------------------------------------------------------------------
-- 6. Only real guards count.  A role's decoy triggers calling
--    idem_guard_trigger (no WHEN, or a WHEN that never asks the machine)
--    neither run as guards, nor block idem_machine_drop, nor are a guard
--    for idem_unguard.  A real guard still blocks the drop.
--------------------------------------------------------------------------
SET ROLE regress_gh_app;
CREATE TABLE gh_decoy (id int PRIMARY KEY, status text);
CREATE TRIGGER d1 AFTER UPDATE ON gh_decoy FOR EACH ROW
    EXECUTE FUNCTION idem_guard_trigger('gh_order', 'status', '', 'check');
CREATE TRIGGER d2 AFTER UPDATE ON gh_decoy FOR EACH ROW WHEN (NEW.status IS DISTINCT FROM OLD.status)
    EXECUTE FUNCTION idem_guard_trigger('gh_order', 'status', '', 'check');
CREATE TRIGGER d3 AFTER INSERT OR UPDATE OF status ON gh_decoy FOR EACH ROW
    EXECUTE FUNCTION idem_guard_trigger('gh_order', 'status', '', 'log');
SELECT pg_temp.try($$INSERT INTO gh_decoy VALUES (1, 'new')$$) AS decoy_log;
DROP TRIGGER d3 ON gh_decoy;
INSERT INTO gh_decoy VALUES (1, 'new');
SELECT pg_temp.try($$UPDATE gh_decoy SET status = 'paid'$$) AS decoy_check;
SELECT pg_temp.try($$SELECT idem_unguard('gh_decoy', 'status')$$) AS unguard_decoy;
RESET ROLE;
SELECT idem_machine_define('gh_spare', '{"initial": ["new"], "transitions": {}}');
SET ROLE regress_gh_app;
CREATE TRIGGER d4 AFTER UPDATE ON gh_decoy FOR EACH ROW
    EXECUTE FUNCTION idem_guard_trigger('gh_spare', 'status', '', 'check');
RESET ROLE;
SELECT pg_temp.try($$SELECT idem_machine_drop('gh_spare')$$) AS drop_despite_decoys;
SET ROLE regress_gh_app;
CREATE TABLE gh_real (id int PRIMARY KEY, status text);
SELECT idem_guard('gh_real', 'status', 'gh_order');
RESET ROLE;
SELECT pg_temp.try($$SELECT idem_machine_drop('gh_order')$$) AS drop_real_guard;
DROP TABLE gh_decoy, gh_real;

-- Look-alikes: a condition that calls idem_guard_allows for the machine
-- as a guard's does but enforces nothing (AND false; the call and more;
-- the call of the insert trigger ANDed away) is no guard either: only the
-- whole condition idem_guard writes counts, on UPDATE and on INSERT.  Nor
-- is a child whose check is on another column than its arguments name a
-- guarded child of a parent.
RESET ROLE;
SELECT idem_machine_define('gh_look', '{"initial": ["new"], "transitions": {"new": ["paid"]}}');
SET ROLE regress_gh_app;
CREATE TABLE gh_look (id int PRIMARY KEY, status text, other text);
CREATE TRIGGER l1 AFTER UPDATE ON gh_look FOR EACH ROW
    WHEN (idem_guard_allows('gh_look', OLD.status, NEW.status) AND false)
    EXECUTE FUNCTION idem_guard_trigger('gh_look', 'status', '', 'check');
CREATE TRIGGER l2 AFTER UPDATE ON gh_look FOR EACH ROW
    WHEN ((NOT idem_guard_allows('gh_look'::pg_catalog.text, (OLD.status)::pg_catalog.text,
                                 (NEW.status)::pg_catalog.text)) AND OLD.id OPERATOR(pg_catalog.<) 0)
    EXECUTE FUNCTION idem_guard_trigger('gh_look', 'status', '', 'check');
CREATE TRIGGER l3 AFTER INSERT ON gh_look FOR EACH ROW
    WHEN ((NEW.status IS NULL) AND (NOT idem_guard_allows('gh_look'::pg_catalog.text,
                                   NULL::pg_catalog.text, (NEW.status)::pg_catalog.text)))
    EXECUTE FUNCTION idem_guard_trigger('gh_look', 'status', '', 'check');
INSERT INTO gh_look VALUES (1, 'new', 'new');
SELECT pg_temp.try($$UPDATE gh_look SET status = 'nowhere'$$) AS look_alike_check;
RESET ROLE;
SELECT pg_temp.try($$SELECT idem_machine_drop('gh_look')$$) AS drop_despite_look_alikes;
SELECT idem_machine_define('gh_look', '{"initial": ["new"], "transitions": {"new": ["paid"]}}');
SET ROLE regress_gh_app;
SELECT pg_temp.try($$SELECT idem_unguard('gh_look', 'status')$$) AS unguard_look_alike;
CREATE TABLE gh_look_parent (id int, status text, other text);
CREATE TABLE gh_look_child () INHERITS (gh_look_parent);
CREATE TRIGGER c1 AFTER UPDATE ON gh_look_child FOR EACH ROW
    WHEN ((NOT idem_guard_allows('gh_look'::pg_catalog.text, (OLD.other)::pg_catalog.text,
                                 (NEW.other)::pg_catalog.text)))
    EXECUTE FUNCTION idem_guard_trigger('gh_look', 'status', '', 'check');
SELECT pg_temp.try($$SELECT idem_guard('gh_look_parent', 'status', 'gh_look')$$) AS parent_of_look_alike;
RESET ROLE;
DROP TABLE gh_look, gh_look_parent, gh_look_child;
SELECT idem_machine_drop('gh_look');

--------------------------------------------------------------------------
-- 7. idem_machines read through a checked column: a DBA who retypes the
--    definition gets a clear error, not a reinterpreted value.
--------------------------------------------------------------------------
ALTER TABLE idem_machines ALTER definition TYPE json USING definition::json;
SELECT pg_temp.try($$SELECT idem_can_transition('gh_order', 'new', 'paid')$$) AS retyped_definition;
ALTER TABLE idem_machines ALTER definition TYPE jsonb USING definition::jsonb;
SELECT idem_can_transition('gh_order', 'new', 'paid') AS restored;

SELECT idem_machine_drop('gh_order');
SELECT idem_revoke('regress_gh_app');
REVOKE ALL ON SCHEMA public FROM regress_gh_app;
REVOKE ALL ON FUNCTION idem_guard(regclass, name, text, name, boolean) FROM regress_gh_app;
REVOKE ALL ON FUNCTION idem_unguard(regclass, name) FROM regress_gh_app;
DROP DOMAIN gh_dom_text, gh_dom_vc;
DROP TABLE gh_captured;
DROP ROLE regress_gh_app;
