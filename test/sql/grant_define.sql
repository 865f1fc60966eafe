-- idem_grant(role, 'define'): an application role that does not own the
-- extension (on a managed service: not the owner, and no superuser
-- anywhere) defines its own machines and guards its own tables; without
-- the level it cannot, and idem_revoke takes it back.  Runs on both
-- editions.

\getenv abs_srcdir PG_ABS_SRCDIR
\set try_sql :abs_srcdir '/helpers/try.sql'
\i :try_sql

CREATE ROLE idem_definer;
CREATE SCHEMA gd_app AUTHORIZATION idem_definer;
SELECT idem_grant('idem_definer');

-- 'write' is not enough to define or to guard.
SET ROLE idem_definer;
SELECT pg_temp.try($$SELECT idem_machine_define('gd_order', '{"initial": ["new"], "transitions": {"new": ["paid"]}}')$$);
CREATE TABLE gd_app.orders (id int PRIMARY KEY, status text NOT NULL);
SELECT pg_temp.try($$SELECT idem_guard('gd_app.orders', 'status', 'gd_order')$$);
RESET ROLE;

-- 'define': machines, guards on the role's own tables, history.
SELECT idem_grant('idem_definer', 'define');
SET ROLE idem_definer;
SELECT idem_machine_define('gd_order', '{"initial": ["new"], "transitions": {"new": ["paid"], "paid": ["shipped"]}}');
SELECT idem_guard('gd_app.orders', 'status', 'gd_order', history => true);
INSERT INTO gd_app.orders VALUES (1, 'new');
UPDATE gd_app.orders SET status = 'paid' WHERE id = 1;
SELECT pg_temp.try($$UPDATE gd_app.orders SET status = 'new' WHERE id = 1$$);
SELECT pg_temp.try($$INSERT INTO gd_app.orders VALUES (2, 'shipped')$$);
SELECT idem_machine_define('gd_order', '{"initial": ["new"], "transitions": {"new": ["paid", "cancelled"], "paid": ["shipped"]}}');
UPDATE gd_app.orders SET status = 'shipped' WHERE id = 1;
SELECT id, status FROM gd_app.orders ORDER BY id;
-- A table the role does not own stays out of reach.
RESET ROLE;
CREATE TABLE gd_not_mine (id int, status text);
SET ROLE idem_definer;
SELECT pg_temp.try($$SELECT idem_guard('gd_not_mine', 'status', 'gd_order')$$);
SELECT idem_unguard('gd_app.orders', 'status');
SELECT idem_machine_drop('gd_order');
RESET ROLE;

-- idem_revoke takes 'define' back; the definitions stay readable.
SELECT idem_revoke('idem_definer');
SET ROLE idem_definer;
SELECT pg_temp.try($$SELECT idem_machine_define('gd_again', '{"initial": ["a"], "transitions": {}}')$$);
SELECT pg_temp.try($$INSERT INTO idem_machines VALUES ('gd_again', '{}')$$);
SELECT count(*) >= 0 AS machines_readable FROM idem_machines;
RESET ROLE;

-- An unknown level says which ones exist.
\set SHOW_CONTEXT never
SELECT idem_grant('idem_definer', 'admin');
\set SHOW_CONTEXT errors

DROP TABLE gd_app.orders, gd_not_mine;
DROP SCHEMA gd_app;
REVOKE ALL ON SCHEMA public FROM idem_definer;
DROP OWNED BY idem_definer;
DROP ROLE idem_definer;
