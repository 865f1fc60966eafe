-- One copy per database: every edition's install refuses (42710) when any
-- edition of idempotency is installed already, so that two schemas never
-- both accept the same key.  Here: the plain script's marker (the table
-- idem_portable_version it leaves in its schema) in another schema, and a
-- leftover idem_records in the schema named.  The real plain script beside
-- each extension, both ways, is tested by test/scripts/portable.sh (steps
-- one-copy-*).  Runs in a database of its own.
\set regress_db :DBNAME
CREATE DATABASE regress_one_copy_db;
\c regress_one_copy_db
SET client_min_messages = warning;
\set SHOW_CONTEXT never

-- What the plain script (portable edition) leaves in its schema.
CREATE SCHEMA idem_plain;
CREATE TABLE idem_plain.idem_portable_version (
    version text NOT NULL, edition text NOT NULL, installed_at timestamptz NOT NULL DEFAULT now());
INSERT INTO idem_plain.idem_portable_version (version, edition) VALUES ('0.5.0', 'portable');
CREATE SCHEMA idem;
CREATE EXTENSION idempotency SCHEMA idem;
-- Nothing was created.
SELECT count(*) AS extensions FROM pg_extension WHERE extname = 'idempotency';
SELECT count(*) AS objects FROM pg_class WHERE relnamespace = 'idem'::regnamespace;

-- Without the marker, a leftover idem_records in the schema named.
DROP SCHEMA idem_plain CASCADE;
CREATE TABLE idem.idem_records (k text);
CREATE EXTENSION idempotency SCHEMA idem;
DROP TABLE idem.idem_records;

-- Then it installs, and works.
CREATE EXTENSION idempotency SCHEMA idem;
SELECT count(*) AS extensions FROM pg_extension WHERE extname = 'idempotency';
BEGIN;
SELECT idem.idem_claim('pay', 'e1') AS first;
COMMIT;

\c :regress_db
DROP DATABASE regress_one_copy_db;
