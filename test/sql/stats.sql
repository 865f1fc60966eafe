-- Claims here stand alone in autocommit (idempotency.autocommit_claims
-- defaults to error; test/sql/silent_traps.sql tests that).
SET idempotency.autocommit_claims = allow;
-- Statistics and the summary.  make test preloads the library
-- (expected/stats.out): the counters count.  On a server that does not
-- (expected/stats_1.out, e.g. make installcheck elsewhere), idem_stats and
-- idem_stats_reset refuse with 55000 and say how to enable them, counting
-- is a no-op that leaves the claim functions working.  idem_summary works
-- either way, as the caller.  More counting rules (rollbacks, savepoints,
-- 2PC, overflow) are in test/t/006_stats.pl.
TRUNCATE idem_records;

\getenv abs_srcdir PG_ABS_SRCDIR
\set try_sql :abs_srcdir '/helpers/try.sql'
\i :try_sql

-- The counters of one scope, from a reset: two claims and a duplicate,
-- a lease begun and finished, a fingerprint mismatch, an expired record
-- taken over, a lease taken over after its mark (unknown) and one whose
-- bound owner session is gone (its start time changed: what a later
-- backend with the dead owner's pid looks like), and a purge.  (Without
-- the preload: the 55000 errors.)
SELECT pg_temp.try($$SELECT idem_stats_reset() IS NOT NULL$$) AS reset;
SELECT idem_claim('stats-count', 'k1') AS k1, idem_claim('stats-count', 'k2', NULL, 'fp') AS k2;
SELECT idem_claim('stats-count', 'k1') AS k1_again;
SELECT pg_temp.try($$SELECT idem_claim('stats-count', 'k2', NULL, 'other')$$) AS mismatch;
SELECT idem_finish('stats-count', 'job', token) FROM idem_begin('stats-count', 'job');
SELECT idem_effect_started('stats-count', 'marked', token) IS NOT NULL AS marked
  FROM idem_begin('stats-count', 'marked', lease => '1 millisecond');
SELECT outcome FROM idem_begin('stats-count', 'bound', bind_to_session => true);
UPDATE idem_records SET owner_start = owner_start - interval '1 day' WHERE scope = 'stats-count' AND key = 'bound';
SELECT pg_sleep(0.01);
SELECT outcome, effect_unknown FROM idem_begin('stats-count', 'marked')
UNION ALL
SELECT outcome, effect_unknown FROM idem_begin('stats-count', 'bound');
UPDATE idem_records SET expires_at = now() - interval '1 second' WHERE scope = 'stats-count' AND key = 'k2';
SELECT idem_claim('stats-count', 'k2') AS taken_over;
UPDATE idem_records SET expires_at = now() - interval '1 second' WHERE scope = 'stats-count' AND key = 'k1';
SELECT idem_purge() AS purged;
SELECT pg_temp.try($$SELECT concat_ws(' ', claimed, duplicates, in_progress_conflicts, fingerprint_mismatches,
                                      takeovers, owner_gone_takeovers, unknown_takeovers,
                                      completed, failed, purged)
                      FROM idem_stats WHERE scope = 'stats-count'$$) AS counters;

-- Without shared_preload_libraries: a clear error, with detail and hint.
SELECT scope, claimed, duplicates FROM idem_stats ORDER BY scope;
SELECT pg_temp.try($$SELECT count(*) FROM idem_stats$$) AS result
UNION ALL
SELECT pg_temp.try($$SELECT idem_stats_reset() IS NOT NULL$$);

-- ... and the functions that count still work (counting is a no-op).
SELECT idem_claim('stats-noop', 'k1') AS claimed,
       idem_claim('stats-noop', 'k1') AS duplicate;
SELECT outcome FROM idem_begin('stats-noop', 'job');

-- Without preload only the reloadable settings exist (purge_databases and
-- stats_max_scopes are fixed at server start, so they are defined only
-- while the library is preloaded); none of them can be SET in a session.
SELECT name, setting, unit, context FROM pg_catalog.pg_settings
WHERE name IN ('idempotency.purge_databases', 'idempotency.purge_naptime',
               'idempotency.purge_batch_size', 'idempotency.purge_delay',
               'idempotency.stats_max_scopes')
ORDER BY name;
SELECT pg_temp.try($$SET idempotency.purge_naptime = '5s'$$) AS result
UNION ALL
SELECT pg_temp.try($$SET idempotency.stats_max_scopes = 5$$);

-- Privileges: idem_stats is for pg_monitor (and whoever is granted it),
-- idem_stats_reset for superusers (and whoever is granted it),
-- idem_summary for everyone, subject to the privileges on idem_records.
SELECT has_table_privilege('public', 'idem_stats', 'SELECT') AS public_stats,
       has_function_privilege('public', 'idem_stats()', 'EXECUTE') AS public_stats_fn,
       has_function_privilege('public', 'idem_stats_reset()', 'EXECUTE') AS public_reset,
       has_table_privilege('pg_monitor', 'idem_stats', 'SELECT') AS monitor_stats,
       has_function_privilege('pg_monitor', 'idem_stats_reset()', 'EXECUTE') AS monitor_reset,
       has_table_privilege('public', 'idem_summary', 'SELECT') AS public_summary;

CREATE ROLE regress_stats_nobody;
CREATE ROLE regress_stats_resetter;
GRANT EXECUTE ON FUNCTION idem_stats_reset() TO regress_stats_resetter;
SET ROLE regress_stats_nobody;
SELECT pg_temp.try($$SELECT count(*) FROM idem_stats$$) AS result
UNION ALL
SELECT pg_temp.try($$SELECT idem_stats_reset() IS NOT NULL$$)
UNION ALL
SELECT pg_temp.try($$SELECT count(*) FROM idem_summary$$);
RESET ROLE;
-- Granted: gets past the privilege check, to the missing preload.
SET ROLE regress_stats_resetter;
SELECT pg_temp.try($$SELECT idem_stats_reset() IS NOT NULL$$) AS result;
RESET ROLE;

-- idem_summary: one row per scope.  Rows with fixed timestamps, so the
-- output does not depend on the clock: '2000-...' is long past,
-- 'infinity' never comes.
TRUNCATE idem_records;
SELECT * FROM idem_summary;
INSERT INTO idem_records
    (scope, key, status, created_at, updated_at, expires_at, locked_until, token, attempts)
VALUES
    -- shop: one of each one-phase status, one completed record expired
    ('shop', 'a', 'claimed',     '2024-03-01 10:00+00', '2024-03-01 10:00+00', 'infinity', NULL, NULL, 0),
    ('shop', 'b', 'completed',   '2024-02-01 10:00+00', '2024-02-01 10:00+00', 'infinity', NULL, NULL, 0),
    ('shop', 'c', 'completed',   '2000-01-01 10:00+00', '2000-01-01 10:00+00', '2000-01-02 10:00+00', NULL, NULL, 0),
    ('shop', 'd', 'failed',      '2024-03-02 10:00+00', '2024-03-02 10:00+00', 'infinity', NULL, 1, 1),
    ('shop', 'e', 'retryable',   '2024-03-03 10:00+00', '2024-03-03 10:00+00', 'infinity', NULL, 2, 1),
    -- jobs: a live lease, a lease that ran out (stuck), an expired record
    -- whose lease also ran out (expired, not stuck: it is only garbage)
    ('jobs', 'live',  'in_progress', '2024-05-01 10:00+00', '2024-05-01 10:00+00', 'infinity', 'infinity', 3, 1),
    ('jobs', 'stuck', 'in_progress', '2024-04-01 10:00+00', '2024-04-01 10:00+00', 'infinity', '2024-04-01 10:05+00', 4, 1),
    ('jobs', 'gone',  'in_progress', '2001-01-01 10:00+00', '2001-01-01 10:00+00', '2001-01-02 10:00+00', '2001-01-01 10:05+00', 5, 1),
    -- forms: one-time tokens
    ('forms', 't1', 'issued',   '2024-06-01 10:00+00', '2024-06-01 10:00+00', 'infinity', NULL, NULL, 0),
    ('forms', 't2', 'consumed', '2024-06-02 10:00+00', '2024-06-02 10:00+00', 'infinity', NULL, NULL, 0),
    -- the default scope
    ('', 'x', 'claimed', '2024-07-01 10:00+00', '2024-07-01 10:00+00', 'infinity', NULL, NULL, 0);
SET timezone = 'UTC';
SELECT * FROM idem_summary ORDER BY scope;
-- The same through the function.
SELECT scope, records, expired, stuck FROM idem_summary() ORDER BY scope;
-- A record claimed through the API counts at once, and a purge empties
-- the expired column.
SELECT idem_claim('shop', 'f') AS claimed;
SELECT idem_purge() AS purged;
SELECT scope, records, claimed, expired, stuck FROM idem_summary ORDER BY scope;
RESET timezone;

-- idem_summary reads idem_records as the caller: no SELECT privilege, an
-- error; with it, row-level security decides which scopes are seen.
CREATE ROLE regress_stats_tenant;
GRANT SELECT ON idem_records TO regress_stats_tenant;
SET ROLE regress_stats_nobody;
SELECT pg_temp.try($$SELECT count(*) FROM idem_summary$$) AS result;
RESET ROLE;
ALTER TABLE idem_records ENABLE ROW LEVEL SECURITY;
CREATE POLICY regress_stats_shop ON idem_records TO regress_stats_tenant
    USING (scope = 'shop');
SET ROLE regress_stats_tenant;
SELECT scope, records FROM idem_summary ORDER BY scope;
RESET ROLE;

-- Cleanup
DROP POLICY regress_stats_shop ON idem_records;
ALTER TABLE idem_records DISABLE ROW LEVEL SECURITY;
REVOKE SELECT ON idem_records FROM regress_stats_tenant;
REVOKE EXECUTE ON FUNCTION idem_stats_reset() FROM regress_stats_resetter;
DROP ROLE regress_stats_nobody, regress_stats_resetter, regress_stats_tenant;
TRUNCATE idem_records;
