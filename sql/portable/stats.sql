-- Portable bodies (docs/managed.md) of the statistics functions of
-- sql/idempotency_stats.sql.  The counters of idem_stats live in shared
-- memory, which only a library loaded at server start can set up: the
-- portable edition has none, and answers as the C edition does on a server
-- without shared_preload_libraries, with 55000, but a message that says
-- why (listed in sql/portable/exceptions.txt).  idem_summary (records.sql)
-- counts what the table itself shows, and works in both editions.
-- Rules of the bodies: see records.sql.

-- portable: idem_stats
LANGUAGE plpgsql
AS $$
BEGIN
    RAISE EXCEPTION 'idem_stats: idempotency statistics are not being collected'
        USING ERRCODE = '55000',
              DETAIL = 'This is the portable edition of idempotency (SQL and PL/pgSQL), which cannot keep counters in shared memory.',
              HINT = 'Read the idem_summary view for what the records table shows; the counters need the C edition.';
END
$$;

-- portable: idem_stats_reset
LANGUAGE plpgsql
AS $$
BEGIN
    RAISE EXCEPTION 'idem_stats_reset: idempotency statistics are not being collected'
        USING ERRCODE = '55000',
              DETAIL = 'This is the portable edition of idempotency (SQL and PL/pgSQL), which cannot keep counters in shared memory.',
              HINT = 'Read the idem_summary view for what the records table shows; the counters need the C edition.';
END
$$;

-- The portable edition has no background worker (it needs a library in
-- shared_preload_libraries): idem_health tells what to schedule instead.
-- portable: idem_purge_worker
LANGUAGE sql
AS $$
SELECT 'portable'::pg_catalog.text
$$;
