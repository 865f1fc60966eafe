-- Only the exact shape is a guard, in the portable edition too (the plain
-- script, which test/sql/guard_hardening.sql does not run on): a check
-- trigger whose WHEN condition calls idem_guard_allows for the machine as
-- a guard's does but enforces nothing neither blocks idem_machine_drop,
-- nor is a guard for idem_unguard; one that checks another column than
-- its arguments name is a guard of that column, not of the named one (no
-- guarded inheritance child); a real guard still counts.
\set SHOW_CONTEXT never
SELECT idem_machine_define('pgs_m', '{"initial": ["new"], "transitions": {"new": ["paid"]}}');
CREATE TABLE pgs_look (id int PRIMARY KEY, status text, other text);
CREATE TRIGGER l1 AFTER UPDATE ON pgs_look FOR EACH ROW
    WHEN (idem_guard_allows('pgs_m', OLD.status, NEW.status) AND false)
    EXECUTE FUNCTION idem_guard_trigger('pgs_m', 'status', '', 'check');
CREATE TRIGGER l2 AFTER UPDATE ON pgs_look FOR EACH ROW
    WHEN ((NOT idem_guard_allows('pgs_m'::pg_catalog.text, (OLD.status)::pg_catalog.text,
                                 (NEW.status)::pg_catalog.text)) AND OLD.id OPERATOR(pg_catalog.<) 0)
    EXECUTE FUNCTION idem_guard_trigger('pgs_m', 'status', '', 'check');
CREATE TRIGGER l3 AFTER INSERT ON pgs_look FOR EACH ROW
    WHEN ((NEW.status IS NULL) AND (NOT idem_guard_allows('pgs_m'::pg_catalog.text,
                                   NULL::pg_catalog.text, (NEW.status)::pg_catalog.text)))
    EXECUTE FUNCTION idem_guard_trigger('pgs_m', 'status', '', 'check');
INSERT INTO pgs_look VALUES (1, 'new', 'new');
UPDATE pgs_look SET status = 'nowhere';
SELECT idem_machine_drop('pgs_m');
SELECT idem_machine_define('pgs_m', '{"initial": ["new"], "transitions": {"new": ["paid"]}}');
SELECT idem_unguard('pgs_look', 'status');
CREATE TABLE pgs_parent (id int, status text, other text);
CREATE TABLE pgs_child () INHERITS (pgs_parent);
CREATE TRIGGER c1 AFTER UPDATE ON pgs_child FOR EACH ROW
    WHEN ((NOT idem_guard_allows('pgs_m'::pg_catalog.text, (OLD.other)::pg_catalog.text,
                                 (NEW.other)::pg_catalog.text)))
    EXECUTE FUNCTION idem_guard_trigger('pgs_m', 'status', '', 'check');
SELECT idem_guard('pgs_parent', 'status', 'pgs_m');
-- Real guards, with and without a version, on text and varchar: counted.
CREATE TABLE pgs_real (id int PRIMARY KEY, status varchar(20), version bigint NOT NULL DEFAULT 0);
SELECT idem_guard('pgs_child', 'status', 'pgs_m');
SELECT idem_guard('pgs_parent', 'status', 'pgs_m');
SELECT idem_guard('pgs_real', 'status', 'pgs_m', 'version');
SELECT idem_machine_drop('pgs_m');
INSERT INTO pgs_real VALUES (1, 'new');
UPDATE pgs_real SET status = 'nowhere';
UPDATE pgs_real SET status = 'paid';
SELECT status, version FROM pgs_real;
SELECT idem_unguard('pgs_real', 'status');
SELECT idem_unguard('pgs_parent', 'status');
SELECT idem_unguard('pgs_child', 'status');
SELECT idem_machine_drop('pgs_m');
SELECT idem_unguard('pgs_child', 'other');
SELECT idem_machine_drop('pgs_m');
DROP TABLE pgs_look, pgs_parent, pgs_child, pgs_real;
