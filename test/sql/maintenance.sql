-- idem_maintain and idem_health: one call keeps every table that expires
-- bounded (the records and the outbox), and the health view says when
-- each was last purged, what waits, what purges it and what to do.
-- make test preloads the library without idempotency.purge_databases
-- (the worker is 'off' here); the portable edition has no worker
-- (test/portable/expected/maintenance.out).  The worker's side, and the
-- WARNING when purge_databases is set without the preload, are in
-- test/t/005_purge_worker.pl.
TRUNCATE idem_records;
DELETE FROM idem_outbox;
DELETE FROM idem_maintenance;

-- Never purged: nothing noted, and nothing purges this database.
SELECT part, last_purged, last_removed, purged_by, waiting, purger, ok
  FROM idem_health ORDER BY part;
SELECT part, regexp_replace(hint, '\S+\.idem_maintain', 'S.idem_maintain') AS hint
  FROM idem_health ORDER BY part;

-- Two expired records, one live; two outbox messages past their
-- retention on a topic nobody reads, one recent.
BEGIN;
SELECT idem_claim('maint', 'old-1') AND idem_claim('maint', 'old-2')
       AND idem_claim('maint', 'live') AS claimed;
COMMIT;
BEGIN;
SELECT count(*) AS published FROM (
    SELECT idem_publish('maint.topic', jsonb_build_object('n', i), key => 'm' || i)
      FROM generate_series(1, 3) AS i) p;
COMMIT;
UPDATE idem_records SET expires_at = now() - interval '1 hour' WHERE key LIKE 'old-%';
UPDATE idem_outbox SET created_at = now() - interval '8 days'
 WHERE payload->>'n' IN ('1', '2');
SELECT part, waiting FROM idem_health ORDER BY part;

-- idem_purge alone leaves the outbox as it is.
SELECT idem_purge() AS records_removed;
SELECT count(*) AS outbox_left FROM idem_outbox;

-- One call purges both, in batches of batch_size each.
UPDATE idem_records SET expires_at = now() - interval '1 hour' WHERE key = 'live';
SELECT records, outbox FROM idem_maintain(1);
SELECT records, outbox FROM idem_maintain();
SELECT records, outbox FROM idem_maintain();
SELECT count(*) AS records_left FROM idem_records;
SELECT count(*) AS outbox_left FROM idem_outbox;
SELECT part, last_purged IS NOT NULL AS noted, last_removed,
       purged_by = 'idem_maintain() by ' || quote_ident(current_user) AS by_maintain, waiting
  FROM idem_health ORDER BY part;
\set SHOW_CONTEXT never
SELECT idem_maintain(NULL);
\set SHOW_CONTEXT errors

-- Not public: it deletes.  The health view is, and counts what the role
-- may read (NULL otherwise).
CREATE ROLE idem_maint_reader;
SET ROLE idem_maint_reader;
SELECT idem_maintain();
SELECT part, waiting, ok FROM idem_health ORDER BY part;
RESET ROLE;
DROP ROLE idem_maint_reader;

-- What the view reads.
-- 'off' while preloaded without purge_databases; 'not preloaded' in the
-- version matrix's quick runs (shown as 'off' there, so one expected file
-- serves both); 'portable' in the portable edition.
SELECT CASE WHEN current_setting('shared_preload_libraries') LIKE '%idempotency%'
            THEN idem_purge_worker()
            ELSE replace(idem_purge_worker(), 'not preloaded', 'off') END AS worker_state;
SELECT pg_catalog.obj_description('idem_maintenance'::regclass) IS NOT NULL AS commented;
