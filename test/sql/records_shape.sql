-- Claims here stand alone in autocommit (idempotency.autocommit_claims
-- defaults to error; test/sql/silent_traps.sql tests that).
SET idempotency.autocommit_claims = allow;
-- idem_records changed by a DBA (security finding 7): every function that
-- reads the table through SPI, and the fast path of idem_claim, read it
-- through checked accessors (src/spi_read.c).  A NULL planted after
-- ALTER ... DROP NOT NULL, or a column retyped, is a clean 55000 naming
-- the column.  Before 0.5.0 most of these readers crashed the server
-- (signal 11) and the others took a wrong value.  Runs in a database of
-- its own: it changes idem_records.
\set regress_db :DBNAME
CREATE DATABASE regress_records_shape_db;
\c regress_records_shape_db
SET idempotency.autocommit_claims = allow;
SET client_min_messages = warning;
CREATE EXTENSION idempotency;
SET statement_timeout = '20s';
\set SHOW_CONTEXT never

\getenv abs_srcdir PG_ABS_SRCDIR
\set try_sql :abs_srcdir '/helpers/try.sql'
\i :try_sql

-- An application role, as in the report: it may write the records.
CREATE ROLE regress_shape_app;
SELECT idem_grant('regress_shape_app');

--------------------------------------------------------------------------
-- 1. DROP NOT NULL on status, then a NULL status (the CHECK on status is
--    STRICT, so it lets NULL pass).
--------------------------------------------------------------------------
SELECT idem_claim('shape', 'claimed') AS claimed;
CREATE TABLE tok (name text PRIMARY KEY, token bigint);
GRANT ALL ON tok TO regress_shape_app;
INSERT INTO tok SELECT 'leased', token FROM idem_begin('shape', 'leased', '1 minute');
ALTER TABLE idem_records ALTER COLUMN status DROP NOT NULL;
SET ROLE regress_shape_app;
UPDATE idem_records SET status = NULL WHERE scope = 'shape';
RESET ROLE;

-- The whole error once: message, detail and hint.
\set VERBOSITY default
SET idempotency.direct_claim = off;
SELECT idem_claim('shape', 'claimed');
RESET idempotency.direct_claim;
\set VERBOSITY sqlstate
SELECT idem_claim('shape', 'claimed');
\set VERBOSITY default

-- Every reader, on the fast path and through SPI.
SELECT pg_temp.try($$SELECT idem_claim('shape', 'claimed')$$) AS claim_fast;
SET idempotency.direct_claim = off;
SELECT pg_temp.try($$SELECT idem_claim('shape', 'claimed')$$) AS claim_spi;
-- (A new key is inserted without reading anything.)
SELECT pg_temp.try($$SELECT idem_claim('shape', 'other')$$) AS claim_spi_new_key;
SELECT pg_temp.try($$SELECT string_agg(claimed::text, ',') FROM idem_claim_many('shape', ARRAY['new', 'claimed'])$$) AS claim_many_spi;
RESET idempotency.direct_claim;
SELECT pg_temp.try($$SELECT string_agg(claimed::text, ',') FROM idem_claim_many('shape', ARRAY['new', 'claimed'])$$) AS claim_many_fast;
SELECT pg_temp.try($$SELECT outcome FROM idem_begin('shape', 'claimed')$$) AS begin;
SELECT pg_temp.try($$SELECT idem_complete('shape', 'claimed', '{}')::text$$) AS complete;
SELECT pg_temp.try($$SELECT idem_heartbeat('shape', 'leased', (SELECT token FROM tok))::text$$) AS heartbeat;
SELECT pg_temp.try($$SELECT idem_finish('shape', 'leased', (SELECT token FROM tok))::text$$) AS finish;
SELECT pg_temp.try($$SELECT idem_fail('shape', 'leased', (SELECT token FROM tok))::text$$) AS fail;
SELECT pg_temp.try($$SELECT idem_await('shape', 'leased', '0')::text$$) AS await;
SELECT pg_temp.try($$SELECT idem_await('shape', 'claimed', '0')::text$$) AS await_claimed;
-- The application role meets the same error.
SET ROLE regress_shape_app;
SELECT pg_temp.try($$SELECT idem_claim('shape', 'claimed')$$) AS claim_as_app;
RESET ROLE;
-- Those that only pass the record on, or decide in SQL, do as SQL does:
-- idem_lookup returns the NULL, idem_release finds no live lease but no
-- record it may release either, idem_summary counts the row.
SELECT (idem_lookup('shape', 'claimed')).status IS NULL AS lookup_null_status;
SELECT idem_release('shape', 'claimed') AS released;
SELECT records, claimed, in_progress FROM idem_summary() WHERE scope = 'shape';
-- idem_purge reads the scope of what it deletes.
UPDATE idem_records SET expires_at = now() - interval '1 second'
WHERE scope = 'shape' AND key = 'claimed';
SELECT idem_purge() AS purged;

-- NULL in the other NOT NULL columns a reader takes: created_at, expires_at.
ALTER TABLE idem_records ALTER COLUMN created_at DROP NOT NULL,
                         ALTER COLUMN expires_at DROP NOT NULL;
INSERT INTO idem_records (scope, key, status, created_at, updated_at, expires_at)
VALUES ('shape', 'new', 'claimed', NULL, now(), now() + interval '1 day');
SELECT pg_temp.try($$SELECT idem_claim('shape', 'new')$$) AS claim_fast_created_at;
SET idempotency.direct_claim = off;
SELECT pg_temp.try($$SELECT idem_claim('shape', 'new')$$) AS claim_spi_created_at;
RESET idempotency.direct_claim;
UPDATE idem_records SET created_at = now(), expires_at = NULL WHERE key = 'new';
SELECT pg_temp.try($$SELECT idem_claim('shape', 'new')$$) AS claim_fast_expires_at;
SET idempotency.direct_claim = off;
SELECT pg_temp.try($$SELECT idem_claim('shape', 'new')$$) AS claim_spi_expires_at;
RESET idempotency.direct_claim;
SELECT pg_temp.try($$SELECT idem_complete('shape', 'new', '{}')::text$$) AS complete_expires_at;
SELECT pg_temp.try($$SELECT idem_release('shape', 'new')$$) AS release_expires_at;
SELECT pg_temp.try($$SELECT idem_finish('shape', 'new', 1)::text$$) AS finish_expires_at;

-- Restored as the install script made it: everything works again.
DELETE FROM idem_records WHERE status IS NULL OR created_at IS NULL OR expires_at IS NULL;
ALTER TABLE idem_records ALTER COLUMN status SET NOT NULL,
                         ALTER COLUMN created_at SET NOT NULL,
                         ALTER COLUMN expires_at SET NOT NULL;
SELECT idem_claim('shape', 'again') AS owned, idem_claim('shape', 'again') AS duplicate;
TRUNCATE idem_records;

--------------------------------------------------------------------------
-- 2. status turned into an enum (its CHECK, which takes a text, dropped
--    first): every repeated claim crashed.
--------------------------------------------------------------------------
SELECT idem_claim('enum', 'claimed') AS claimed;
SELECT idem_claim('enum', 'completed') AS claimed, idem_complete('enum', 'completed', '{"r": 1}');
INSERT INTO tok SELECT 'enum', token FROM idem_begin('enum', 'leased', '1 minute');
CREATE TYPE regress_shape_status AS ENUM
    ('claimed', 'in_progress', 'completed', 'failed', 'retryable', 'issued', 'consumed');
ALTER TABLE idem_records DROP CONSTRAINT idem_records_status_check;
ALTER TABLE idem_records ALTER COLUMN status TYPE regress_shape_status
    USING status::regress_shape_status;

\set VERBOSITY default
SELECT idem_claim('enum', 'claimed');
SELECT pg_temp.try($$SELECT idem_claim('enum', 'claimed')$$) AS claim_fast;
SET idempotency.direct_claim = off;
SELECT pg_temp.try($$SELECT idem_claim('enum', 'claimed')$$) AS claim_spi;
RESET idempotency.direct_claim;
SELECT pg_temp.try($$SELECT string_agg(claimed::text, ',') FROM idem_claim_many('enum', ARRAY['claimed', 'fresh'])$$) AS claim_many;
SELECT pg_temp.try($$SELECT outcome FROM idem_begin('enum', 'completed')$$) AS begin;
SELECT pg_temp.try($$SELECT idem_complete('enum', 'completed', '{}')::text$$) AS complete;
SELECT pg_temp.try($$SELECT idem_heartbeat('enum', 'leased', (SELECT token FROM tok WHERE name = 'enum') + 1)::text$$) AS heartbeat_lost;
SELECT pg_temp.try($$SELECT idem_await('enum', 'leased', '0')::text$$) AS await;
SELECT pg_temp.try($$SELECT outcome FROM idem_begin('enum', 'fresh-begin')$$) AS begin_new_key;
-- What writes without reading, or reads through SQL, works: a new key,
-- idem_complete of a claimed record, a lookup, tokens, the summary.
SELECT idem_claim('enum', 'new') AS new_key;
SELECT idem_complete('enum', 'new', '{"r": 2}');
SELECT (idem_lookup('enum', 'new')).status AS lookup_status;
SELECT idem_token_consume('enum', idem_token_issue('enum')) AS token_used;
SELECT records, completed FROM idem_summary() WHERE scope = 'enum';

-- Restored: text COLLATE "C" and the CHECK again.
ALTER TABLE idem_records ALTER COLUMN status TYPE text COLLATE "C";
ALTER TABLE idem_records ADD CONSTRAINT idem_records_status_check
    CHECK (idem_status_is_valid(status));
DROP TYPE regress_shape_status;
SELECT idem_claim('enum', 'claimed') AS duplicate,
       (SELECT outcome FROM idem_begin('enum', 'completed')) AS begin;
-- The fast path is back too: a duplicate through it writes nothing.
BEGIN;
SELECT idem_claim('enum', 'claimed') AS duplicate;
SELECT pg_current_xact_id_if_assigned() IS NULL AS no_xid;
COMMIT;
TRUNCATE idem_records;

--------------------------------------------------------------------------
-- 3. Other columns retyped.  A type with the same representation is
--    refused as well (varchar for text, timestamp for timestamptz): the
--    installed type is what counts.  A domain over it is not another
--    representation, and is read.
--------------------------------------------------------------------------
SELECT idem_claim('retype', 'claimed') AS claimed;
SELECT idem_claim('retype', 'completed') AS claimed, idem_complete('retype', 'completed', '{"r": 1}');
INSERT INTO tok SELECT 'retype', token FROM idem_begin('retype', 'leased', '1 minute');

-- result: the replay of idem_begin (a text read as a jsonb crashed).
ALTER TABLE idem_records ALTER COLUMN result TYPE text;
SELECT pg_temp.try($$SELECT outcome FROM idem_begin('retype', 'completed')$$) AS begin_result_text;
ALTER TABLE idem_records ALTER COLUMN result TYPE integer USING 7;
SELECT pg_temp.try($$SELECT outcome FROM idem_begin('retype', 'completed')$$) AS begin_result_int;
ALTER TABLE idem_records ALTER COLUMN result TYPE jsonb USING '{"r": 1}';

-- fingerprint, created_at, expires_at, locked_until: the claim's read.
ALTER TABLE idem_records ALTER COLUMN fingerprint TYPE text;
SELECT pg_temp.try($$SELECT idem_claim('retype', 'claimed')$$) AS claim_fingerprint_text;
ALTER TABLE idem_records ALTER COLUMN fingerprint TYPE bytea USING NULL;
ALTER TABLE idem_records ALTER COLUMN created_at TYPE timestamp;
SELECT pg_temp.try($$SELECT idem_claim('retype', 'claimed')$$) AS claim_created_at_timestamp;
SELECT pg_temp.try($$SELECT count(*) FROM idem_summary()$$) AS summary_created_at_timestamp;
ALTER TABLE idem_records ALTER COLUMN created_at TYPE timestamptz;
ALTER TABLE idem_records ALTER COLUMN expires_at TYPE timestamp;
SELECT pg_temp.try($$SELECT idem_claim('retype', 'claimed')$$) AS claim_expires_at_timestamp;
ALTER TABLE idem_records ALTER COLUMN expires_at TYPE timestamptz;
ALTER TABLE idem_records ALTER COLUMN locked_until TYPE timestamp;
SELECT pg_temp.try($$SELECT idem_claim('retype', 'claimed')$$) AS claim_locked_until_timestamp;
SELECT pg_temp.try($$SELECT idem_await('retype', 'leased', '0')::text$$) AS await_locked_until_timestamp;
SELECT pg_temp.try($$SELECT idem_heartbeat('retype', 'leased', (SELECT token FROM tok WHERE name = 'retype'))::text$$) AS heartbeat_locked_until_timestamp;
ALTER TABLE idem_records ALTER COLUMN locked_until TYPE timestamptz;

-- token: idem_begin's new token, and the lease check.
ALTER TABLE idem_records ALTER COLUMN token TYPE integer;
SELECT pg_temp.try($$SELECT outcome FROM idem_begin('retype', 'new-lease')$$) AS begin_token_int;
SELECT pg_temp.try($$SELECT idem_finish('retype', 'leased', 1)::text$$) AS finish_token_int;
ALTER TABLE idem_records ALTER COLUMN token TYPE bigint;

-- key and scope as varchar: what idem_claim_many and idem_purge read back.
ALTER TABLE idem_records ALTER COLUMN key TYPE varchar(100);
SELECT pg_temp.try($$SELECT string_agg(claimed::text, ',') FROM idem_claim_many('retype', ARRAY['k1', 'k2'])$$) AS claim_many_key_varchar;
ALTER TABLE idem_records ALTER COLUMN key TYPE text COLLATE "C";
ALTER TABLE idem_records ALTER COLUMN scope TYPE varchar(100);
SELECT pg_temp.try($$SELECT idem_purge()$$) AS purge_scope_varchar;
SELECT pg_temp.try($$SELECT count(*) FROM idem_summary()$$) AS summary_scope_varchar;
ALTER TABLE idem_records ALTER COLUMN scope TYPE text COLLATE "C";

-- A domain over the installed type is read as that type.
CREATE DOMAIN regress_shape_text AS text CHECK (VALUE <> '');
ALTER TABLE idem_records ALTER COLUMN status TYPE regress_shape_text;
SELECT idem_claim('retype', 'claimed') AS duplicate,
       (SELECT outcome FROM idem_begin('retype', 'completed')) AS begin,
       (idem_await('retype', 'completed', '0')).status AS await_status;
ALTER TABLE idem_records ALTER COLUMN status TYPE text COLLATE "C";
DROP DOMAIN regress_shape_text;

-- As installed again: no error anywhere.
SELECT idem_claim('retype', 'claimed') AS duplicate,
       (SELECT outcome FROM idem_begin('retype', 'completed')) AS begin,
       idem_heartbeat('retype', 'leased', (SELECT token FROM tok WHERE name = 'retype')) > now() AS heartbeat,
       (SELECT string_agg(claimed::text, ',') FROM idem_claim_many('retype', ARRAY['claimed', 'k3'])) AS many;

\c :regress_db
DROP DATABASE regress_records_shape_db;
DROP ROLE regress_shape_app;
