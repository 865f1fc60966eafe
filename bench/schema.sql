-- Objects of the benchmark (bench/run.sh), created in every database it
-- uses, after CREATE EXTENSION idempotency.  Not part of the extension.

-- The hand-written baseline, as the project's bar defines it: PRIMARY KEY (scope,
-- key) plus the columns of idem_records (types, collations, NOT NULLs,
-- default).  No CHECK on status (bench/run.sh adds idem_records' CHECK
-- with BENCH_BASELINE_CHECK=1) and no index on expires_at (bytes per record
-- are reported per index, so the cost of idem_records' purge index is
-- visible separately).
CREATE TABLE bench_claims (
    scope        text COLLATE "C" NOT NULL,
    key          text COLLATE "C" NOT NULL,
    status       text COLLATE "C" NOT NULL,
    fingerprint  bytea,
    result       jsonb,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    locked_until timestamptz,
    token        int8,
    attempts     int4 NOT NULL DEFAULT 0,
    lease        interval,
    CONSTRAINT bench_claims_pkey PRIMARY KEY (scope, key)
);

-- The business transaction of the "business" pair: credit an account and
-- append to a ledger, guarded by a claim of the event's key.
CREATE TABLE bench_accounts (
    id      int PRIMARY KEY,
    balance bigint NOT NULL DEFAULT 0
);

CREATE TABLE bench_ledger (
    id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event   text NOT NULL,
    account int NOT NULL,
    amount  bigint NOT NULL,
    at      timestamptz NOT NULL DEFAULT now()
);

-- Orders of the "transition" pair.
CREATE TABLE bench_orders (
    id     int PRIMARY KEY,
    status text NOT NULL,
    amount numeric NOT NULL DEFAULT 10
);

-- bench_load(tbl, scope, rows, key_prefix, key_step, first_created, last_created)
--
-- Appends rows records to tbl (idem_records or bench_claims) the way
-- idem_claim writes them: status 'claimed', created_at = updated_at
-- spread evenly from first_created to last_created, expires_at 7 days
-- later.  Key number i (1..rows) is key_prefix || (i * key_step).
--
-- Fast: the table's indexes (and the constraints they back) are dropped,
-- the rows inserted with one INSERT ... SELECT, and the indexes rebuilt
-- from their own definitions (pg_get_constraintdef / pg_get_indexdef),
-- so whatever indexes the table has now are rebuilt as they were.  A
-- rebuilt b-tree is packed (fillfactor 90) where one grown by random
-- inserts is about 70 % full; both tables are loaded the same way.
CREATE FUNCTION bench_load(tbl regclass, p_scope text, p_rows bigint,
                           p_prefix text, p_step bigint,
                           p_first timestamptz, p_last timestamptz)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    defs text[] := '{}';
    d    text;
    r    record;
BEGIN
    FOR r IN SELECT c.conname, pg_get_constraintdef(c.oid) AS def
               FROM pg_constraint c
              WHERE c.conrelid = tbl AND c.contype IN ('p', 'u', 'x')
    LOOP
        defs := defs || format('ALTER TABLE %s ADD CONSTRAINT %I %s', tbl, r.conname, r.def);
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', tbl, r.conname);
    END LOOP;
    FOR r IN SELECT i.indexrelid::regclass AS idx, pg_get_indexdef(i.indexrelid) AS def
               FROM pg_index i
              WHERE i.indrelid = tbl
    LOOP
        defs := defs || r.def;
        EXECUTE format('DROP INDEX %s', r.idx);
    END LOOP;

    EXECUTE format(
        'INSERT INTO %s (scope, key, status, created_at, updated_at, expires_at)
         SELECT $1, $2 || (i * $3)::text, ''claimed'', t, t, t + interval ''7 days''
           FROM generate_series(1::bigint, $4) AS i,
                LATERAL (SELECT $5 + ($6 - $5) * (i::float8 / $4)) AS c(t)', tbl)
    USING p_scope, p_prefix, p_step, p_rows, p_first, p_last;

    FOREACH d IN ARRAY defs LOOP
        EXECUTE d;
    END LOOP;
END $$;

-- A hand-written outbox as Debezium's outbox event router reads it: the
-- baseline of the outbox_sql pair (bench/outbox.sh) and of
-- bench/outbox_wal.sh.
CREATE TABLE bench_outbox (
    id            uuid NOT NULL DEFAULT gen_random_uuid() PRIMARY KEY,
    aggregatetype text NOT NULL,
    aggregateid   text NOT NULL,
    type          text NOT NULL,
    payload       jsonb,
    created_at    timestamptz NOT NULL DEFAULT now()
);

-- Sizes of a table: heap (main fork), toast, each index (main fork), and
-- pg_total_relation_size (all of them with their free space and
-- visibility maps).
CREATE FUNCTION bench_sizes(tbl regclass)
RETURNS TABLE (relation text, bytes bigint) LANGUAGE sql AS $$
    SELECT 'heap', pg_relation_size(tbl)
    UNION ALL
    SELECT 'toast', coalesce(pg_total_relation_size(NULLIF(c.reltoastrelid, 0)), 0)
      FROM pg_class c WHERE c.oid = tbl
    UNION ALL
    (SELECT i.indexrelid::regclass::text, pg_relation_size(i.indexrelid)
       FROM pg_index i WHERE i.indrelid = tbl ORDER BY 1)
    UNION ALL
    SELECT 'total', pg_total_relation_size(tbl)
$$;
