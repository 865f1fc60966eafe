-- Claims here stand alone in autocommit (idempotency.autocommit_claims
-- defaults to error; test/sql/silent_traps.sql tests that).
SET idempotency.autocommit_claims = allow;
-- Tenant separation with row-level security (docs/security.md): a role
-- per tenant, each allowed one scope, the scope named after the role.
-- Whatever a tenant calls, it never reads, claims, completes, releases,
-- purges or leases another tenant's records.
TRUNCATE idem_records;
SET statement_timeout = '20s';
\set SHOW_CONTEXT never

\getenv abs_srcdir PG_ABS_SRCDIR
\set try_sql :abs_srcdir '/helpers/try.sql'
\i :try_sql

CREATE ROLE regress_tenant_a;
CREATE ROLE regress_tenant_b;
SELECT idem_grant('regress_tenant_a'), idem_grant('regress_tenant_b');
ALTER TABLE idem_records ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_scope ON idem_records
    USING (scope = current_user::text)
    WITH CHECK (scope = current_user::text);

-- Tenant a's records: a claimed key, a completed one with a result, an
-- expired one, and a lease.
SET ROLE regress_tenant_a;
SELECT idem_claim('regress_tenant_a', 'claimed') AS a_claim;
SELECT idem_claim('regress_tenant_a', 'done') AS a_claim_done;
SELECT idem_complete('regress_tenant_a', 'done', '{"secret": "a"}');
SELECT idem_claim('regress_tenant_a', 'old', '1 microsecond') AS a_claim_old;
CREATE TEMP TABLE a_lease AS SELECT token FROM idem_begin('regress_tenant_a', 'job');
GRANT SELECT ON a_lease TO regress_tenant_b;
RESET ROLE;
SELECT pg_sleep(0.01);

-- Tenant b tries everything on a's scope.
SET ROLE regress_tenant_b;
SELECT pg_temp.try($$SELECT idem_claim('regress_tenant_a', 'claimed')$$) AS claim_taken_key;
SELECT pg_temp.try($$SELECT idem_claim('regress_tenant_a', 'fresh')$$) AS claim_new_key;
SELECT pg_temp.try($$SELECT idem_claim('regress_tenant_a', 'old')$$) AS claim_expired;
SELECT pg_temp.try($$SELECT count(*) FROM idem_claim_many('regress_tenant_a', ARRAY['claimed', 'x'])$$) AS claim_many;
SELECT pg_temp.try($$SELECT idem_lookup('regress_tenant_a', 'done')::text$$) AS lookup;
SELECT pg_temp.try($$SELECT idem_complete('regress_tenant_a', 'claimed', '{"forged": true}')::text$$) AS complete;
SELECT pg_temp.try($$SELECT idem_release('regress_tenant_a', 'claimed')::text$$) AS release;
SELECT pg_temp.try($$SELECT outcome FROM idem_begin('regress_tenant_a', 'job')$$) AS begin_leased;
SELECT pg_temp.try($$SELECT idem_heartbeat('regress_tenant_a', 'job', (SELECT token FROM a_lease))::text$$) AS heartbeat;
SELECT pg_temp.try($$SELECT idem_finish('regress_tenant_a', 'job', (SELECT token FROM a_lease), '{"forged": true}')::text$$) AS finish;
SELECT pg_temp.try($$SELECT idem_fail('regress_tenant_a', 'job', (SELECT token FROM a_lease))::text$$) AS fail;
SELECT pg_temp.try($$SELECT idem_purge()::text$$) AS purge;
SELECT count(*) AS b_sees FROM idem_records;
-- b's own scope works.
SELECT idem_claim('regress_tenant_b', 'claimed') AS b_claim;
RESET ROLE;

-- a's records are exactly as a left them.
SELECT key, status, result, token IS NOT NULL AS leased
FROM idem_records WHERE scope = 'regress_tenant_a' ORDER BY key;
SELECT scope, count(*) FROM idem_records GROUP BY scope ORDER BY scope;

-- Cleanup
DROP POLICY tenant_scope ON idem_records;
ALTER TABLE idem_records DISABLE ROW LEVEL SECURITY;
SELECT idem_revoke('regress_tenant_a'), idem_revoke('regress_tenant_b');
DROP TABLE a_lease;
REVOKE USAGE ON SCHEMA public FROM regress_tenant_a, regress_tenant_b;
DROP ROLE regress_tenant_a, regress_tenant_b;
TRUNCATE idem_records;
RESET statement_timeout;
