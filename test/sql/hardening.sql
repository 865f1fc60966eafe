-- Claims here stand alone in autocommit (idempotency.autocommit_claims
-- defaults to error; test/sql/silent_traps.sql tests that).
SET idempotency.autocommit_claims = allow;
-- Hardening: what a role that is not the extension can make its C
-- functions do.  Each case crashed the server, looped or was silently
-- different before 0.4.0.  Every wait below is bounded by
-- statement_timeout, so a regression fails with 57014 instead of hanging.
TRUNCATE idem_records;
SET statement_timeout = '20s';
\set SHOW_CONTEXT never

\getenv abs_srcdir PG_ABS_SRCDIR
\set try_sql :abs_srcdir '/helpers/try.sql'
\i :try_sql

--------------------------------------------------------------------------
-- 1. idem_machines_trigger on a table of the caller's, with columns of
--    other types: it crashed the server (signal 11).  EXECUTE is no
--    longer public, so CREATE TRIGGER fails for an ordinary role; a
--    superuser's trigger is refused when it fires (39P01).
--------------------------------------------------------------------------
SELECT has_function_privilege('public', 'idem_machines_trigger()', 'EXECUTE') AS public_execute;
CREATE ROLE regress_hard_nobody;
GRANT CREATE ON SCHEMA public TO regress_hard_nobody;
SET ROLE regress_hard_nobody;
CREATE TEMP TABLE hard_t (machine int, definition int);
SELECT pg_temp.try($$CREATE TRIGGER v BEFORE INSERT ON hard_t FOR EACH ROW EXECUTE FUNCTION idem_machines_trigger()$$) AS create_trigger;
RESET ROLE;
DROP TABLE hard_t;
REVOKE CREATE ON SCHEMA public FROM regress_hard_nobody;

CREATE TABLE hard_t (machine int, definition int);
CREATE TRIGGER v BEFORE INSERT ON hard_t FOR EACH ROW EXECUTE FUNCTION idem_machines_trigger();
CREATE TRIGGER s AFTER INSERT ON hard_t FOR EACH STATEMENT EXECUTE FUNCTION idem_machines_trigger();
SELECT pg_temp.try($$INSERT INTO hard_t VALUES (1, 2)$$) AS row_trigger;
DROP TRIGGER v ON hard_t;
SELECT pg_temp.try($$INSERT INTO hard_t VALUES (1, 2)$$) AS statement_trigger;
-- Even with the right column names and types, another table is refused.
CREATE TABLE hard_m (machine text, definition jsonb);
CREATE TRIGGER v BEFORE INSERT ON hard_m FOR EACH ROW EXECUTE FUNCTION idem_machines_trigger();
SELECT pg_temp.try($$INSERT INTO hard_m VALUES ('m', '{}')$$) AS lookalike;
DROP TABLE hard_t, hard_m;
-- The extension's own triggers still validate direct writes.
SELECT pg_temp.try($$INSERT INTO idem_machines (machine, definition) VALUES ('bad', '{"initial": 1}')$$) AS own_table;

-- idem_guard_trigger stays public (idem_guard's callers need it for
-- CREATE TRIGGER) and refuses a trigger idem_guard did not make.
CREATE TABLE hard_g (id int PRIMARY KEY, status int);
CREATE TRIGGER g AFTER UPDATE ON hard_g FOR EACH ROW
    EXECUTE FUNCTION idem_guard_trigger('m', 'status', '', 'check');
INSERT INTO hard_g VALUES (1, 1);
SELECT pg_temp.try($$UPDATE hard_g SET status = 2$$) AS guard_lookalike;
DROP TRIGGER g ON hard_g;
CREATE TRIGGER g BEFORE UPDATE ON hard_g FOR EACH ROW
    EXECUTE FUNCTION idem_guard_trigger('m', 'nosuch', 'status', 'version');
SELECT pg_temp.try($$UPDATE hard_g SET status = 3$$) AS guard_wrong_column;
-- A fifth argument (the history table) belongs to log triggers only.
DROP TRIGGER g ON hard_g;
CREATE TRIGGER g AFTER UPDATE ON hard_g FOR EACH ROW
    EXECUTE FUNCTION idem_guard_trigger('m', 'status', '', 'check', 'public.hard_g');
SELECT pg_temp.try($$UPDATE hard_g SET status = 4$$) AS guard_fifth_argument;
DROP TABLE hard_g;

--------------------------------------------------------------------------
-- 3. Row-level security that lets a role read and insert everywhere but
--    update only its own scope: a takeover of another scope's record
--    retried forever.  Now 42501, for idem_claim, idem_claim_many and
--    idem_begin alike.
--------------------------------------------------------------------------
CREATE ROLE regress_hard_tenant;
SELECT idem_grant('regress_hard_tenant');
ALTER TABLE idem_records ENABLE ROW LEVEL SECURITY;
CREATE POLICY hard_read ON idem_records FOR SELECT USING (true);
CREATE POLICY hard_insert ON idem_records FOR INSERT WITH CHECK (true);
CREATE POLICY hard_update ON idem_records FOR UPDATE
    USING (scope = current_setting('app.tenant', true))
    WITH CHECK (scope = current_setting('app.tenant', true));
INSERT INTO idem_records (scope, key, status, created_at, updated_at, expires_at)
VALUES ('other', 'expired', 'completed', now() - interval '2 days', now() - interval '2 days', now() - interval '1 day'),
       ('other', 'retry', 'retryable', now(), now(), now() + interval '1 day');
SET ROLE regress_hard_tenant;
SET app.tenant = 'mine';
SELECT pg_temp.try($$SELECT idem_claim('other', 'expired')$$) AS claim_expired;
SELECT pg_temp.try($$SELECT claimed FROM idem_claim_many('other', ARRAY['expired'])$$) AS claim_many;
SELECT pg_temp.try($$SELECT outcome FROM idem_begin('other', 'retry')$$) AS begin_retryable;
-- Its own scope works as before.
SELECT idem_claim('mine', 'k1') AS own_claim, idem_claim('mine', 'k1') AS own_duplicate;
RESET app.tenant;
RESET ROLE;
DROP POLICY hard_read ON idem_records;
DROP POLICY hard_insert ON idem_records;
DROP POLICY hard_update ON idem_records;
ALTER TABLE idem_records DISABLE ROW LEVEL SECURITY;
TRUNCATE idem_records;

--------------------------------------------------------------------------
-- 5. A column default a DBA sets on idem_records: the SPI path's INSERT
--    applies it, so the direct path must too (it now declines).
--------------------------------------------------------------------------
ALTER TABLE idem_records ALTER COLUMN result SET DEFAULT '{"by": "default"}';
ALTER TABLE idem_records ALTER COLUMN attempts SET DEFAULT 7;
SET idempotency.direct_claim = on;
SELECT idem_claim('defaults', 'direct') AS claimed;
SET idempotency.direct_claim = off;
SELECT idem_claim('defaults', 'spi') AS claimed;
RESET idempotency.direct_claim;
SELECT key, result, attempts FROM idem_records WHERE scope = 'defaults' ORDER BY key;
ALTER TABLE idem_records ALTER COLUMN result DROP DEFAULT;
ALTER TABLE idem_records ALTER COLUMN attempts SET DEFAULT 0;
-- The install script's own default again: the fast path is back (a
-- duplicate through it writes no transaction id).
BEGIN;
SELECT idem_claim('defaults', 'direct') AS claimed;
SELECT pg_current_xact_id_if_assigned() IS NULL AS no_xid;
COMMIT;

--------------------------------------------------------------------------
-- 6. A record whose lease is NULL (a manual write or a foreign restore):
--    idem_heartbeat without a lease set locked_until to NULL and returned
--    2000-01-01, and idem_begin then spun.
--------------------------------------------------------------------------
CREATE TEMP TABLE tok (name text PRIMARY KEY, token bigint);
INSERT INTO tok SELECT 'a', token FROM idem_begin('lease', 'nolease', '1 minute');
UPDATE idem_records SET lease = NULL WHERE scope = 'lease' AND key = 'nolease';
SELECT pg_temp.try($$SELECT idem_heartbeat('lease', 'nolease', (SELECT token FROM tok WHERE name = 'a'))$$) AS heartbeat_no_length;
SELECT locked_until IS NOT NULL AS still_locked FROM idem_records WHERE key = 'nolease';
SELECT idem_heartbeat('lease', 'nolease', (SELECT token FROM tok WHERE name = 'a'), '2 minutes') > now() AS heartbeat_given;
SELECT lease FROM idem_records WHERE key = 'nolease';
-- A lease without an end is held until the record expires: idem_begin
-- answers in_progress (as idem_claim answers false), it does not spin.
UPDATE idem_records SET locked_until = NULL WHERE key = 'nolease';
SELECT outcome FROM idem_begin('lease', 'nolease');
SELECT idem_claim('lease', 'nolease') AS claimed;

-- Heartbeats without a lease argument keep the lease and the lock.
INSERT INTO tok SELECT 'b', token FROM idem_begin('lease', 'beat', '1 minute');
SELECT idem_heartbeat('lease', 'beat', (SELECT token FROM tok WHERE name = 'b')) > now() AS first,
       idem_heartbeat('lease', 'beat', (SELECT token FROM tok WHERE name = 'b')) > now() AS second;
SELECT lease, locked_until > now() AS locked FROM idem_records WHERE key = 'beat';

-- idem_finish on a key never begun: its own message (ID002), not a lost lease.
SELECT pg_temp.try($$SELECT idem_finish('lease', 'never', 1)::text$$) AS finish_never_begun;

--------------------------------------------------------------------------
-- Blind spots of the suite: a retryable failure followed by idem_begin
-- without a fingerprint keeps the stored fingerprint, so a later
-- different payload is still refused (ID001).
--------------------------------------------------------------------------
INSERT INTO tok SELECT 'c', token FROM idem_begin('fp', 'k', '1 minute', NULL, 'payload-1');
SELECT idem_fail('fp', 'k', (SELECT token FROM tok WHERE name = 'c'), '{"e": 1}', true);
SELECT outcome FROM idem_begin('fp', 'k', '1 minute');
SELECT fingerprint = sha256('payload-1'::bytea) AS kept FROM idem_records WHERE scope = 'fp';
SELECT pg_temp.try($$SELECT outcome FROM idem_begin('fp', 'k', '1 minute', NULL, 'payload-2')$$) AS other_payload;

-- pg_dump keeps the records, the token sequence and the machines.
SELECT c.relname
FROM pg_extension e, unnest(e.extconfig) AS cfg(oid), pg_class c
WHERE e.extname = 'idempotency' AND c.oid = cfg.oid
ORDER BY c.relname;

--------------------------------------------------------------------------
-- Access: a role without grants gets a hint naming idem_grant, not the
-- extension's internal SQL; idem_grant and idem_revoke.
--------------------------------------------------------------------------
\set VERBOSITY default
SET ROLE regress_hard_nobody;
SELECT idem_claim('access', 'k');
SELECT idem_lookup('access', 'k');
RESET ROLE;
SELECT pg_temp.try($$SELECT idem_grant('regress_hard_nobody', 'admin')$$) AS unknown_level;
SELECT has_function_privilege('public', 'idem_grant(regrole, text)', 'EXECUTE') AS public_grant;
SELECT idem_grant('regress_hard_nobody', 'read');
SELECT has_table_privilege('regress_hard_nobody', 'idem_records', 'SELECT') AS can_read,
       has_table_privilege('regress_hard_nobody', 'idem_records', 'INSERT') AS can_write;
SELECT idem_grant('regress_hard_nobody');
SET ROLE regress_hard_nobody;
SELECT idem_claim('access', 'k') AS claimed;
SELECT outcome FROM idem_begin('access', 'lease');
RESET ROLE;
SELECT idem_revoke('regress_hard_nobody');
SELECT has_table_privilege('regress_hard_nobody', 'idem_records', 'SELECT') AS can_read;

-- A claim is seen by a writing function that follows it in the same
-- statement, on both paths.  (idem_lookup is STABLE: it sees the
-- statement's snapshot, so only the next statement sees the claim.)
SET idempotency.direct_claim = on;
SELECT idem_claim('vis', 'direct') AS claimed, idem_complete('vis', 'direct', '1')::text AS completed;
SET idempotency.direct_claim = off;
SELECT idem_claim('vis', 'spi') AS claimed, idem_complete('vis', 'spi', '1')::text AS completed;
RESET idempotency.direct_claim;
SELECT key, status FROM idem_records WHERE scope = 'vis' ORDER BY key;

-- Cleanup
SELECT idem_revoke('regress_hard_tenant');
REVOKE USAGE ON SCHEMA public FROM regress_hard_tenant, regress_hard_nobody;
DROP ROLE regress_hard_nobody, regress_hard_tenant;
TRUNCATE idem_records;
RESET statement_timeout;
