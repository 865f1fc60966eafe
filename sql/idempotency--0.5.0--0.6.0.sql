-- idempotency 0.5.0 -> 0.6.0: hardening, round three; safe defaults.
-- The same objects are in the sql/idempotency*.sql sources of a fresh
-- 0.6.0 install.

\echo Use "ALTER EXTENSION idempotency UPDATE TO '0.6.0'" to load this file. \quit

-- Portable bodies qualified throughout (docs/security.md, invariant 8): the
-- C edition's declarations unchanged, so that the portable edition's
-- upgrade, generated from this script, gets the new bodies of
-- idem_claim_many, idem_guard and idem_unguard (a DECLARE ... record
-- resolved through the caller's search_path).
CREATE OR REPLACE FUNCTION @extschema@.idem_claim_many(
    scope pg_catalog.text,
    keys pg_catalog.text[],
    ttl pg_catalog.interval DEFAULT NULL)
RETURNS TABLE (key pg_catalog.text, claimed pg_catalog.bool)
AS 'MODULE_PATHNAME', 'idem_claim_many'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
ROWS 100;

CREATE OR REPLACE FUNCTION @extschema@.idem_guard(
    tbl pg_catalog.regclass,
    status_column pg_catalog.name,
    machine pg_catalog.text,
    version_column pg_catalog.name DEFAULT NULL,
    history pg_catalog.bool DEFAULT false)
RETURNS pg_catalog.void
AS 'MODULE_PATHNAME', 'idem_guard'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION @extschema@.idem_unguard(
    tbl pg_catalog.regclass,
    status_column pg_catalog.name)
RETURNS pg_catalog.void
AS 'MODULE_PATHNAME', 'idem_unguard'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

-- Only the exact shape is a guard (docs/security.md, invariant 5): the C
-- edition's declarations unchanged, so that the portable edition's
-- upgrade gets the new bodies of idem_guard_trigger and idem_machine_drop
-- (idem_guard and idem_unguard are above).
CREATE OR REPLACE FUNCTION @extschema@.idem_machine_drop(machine pg_catalog.text)
RETURNS pg_catalog.void
AS 'MODULE_PATHNAME', 'idem_machine_drop'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION @extschema@.idem_guard_trigger()
RETURNS trigger
AS 'MODULE_PATHNAME', 'idem_guard_trigger'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

-- Outbox functions declare pg_catalog.record (docs/security.md, invariant
-- 8): 'x record' in a body without SET search_path resolved through the
-- caller's search_path, which a role could point at a type of its own
-- (a superuser's session, or the background purge calling
-- idem_outbox_purge).  The bodies of sql/idempotency_outbox.sql.
CREATE OR REPLACE FUNCTION @extschema@.idem_outbox_advance(consumer pg_catalog.text)
RETURNS pg_catalog.void
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
AS $$
DECLARE
    s pg_catalog.record;
    h pg_catalog.xid8;
BEGIN
    FOR s IN
        SELECT s2.consumer, s2.topic, s2.horizon
          FROM @extschema@.idem_outbox_subscriptions s2
         WHERE idem_outbox_advance.consumer IS NULL
            OR s2.consumer OPERATOR(pg_catalog.=) (idem_outbox_advance.consumer COLLATE pg_catalog."C")
         ORDER BY s2.consumer, s2.topic
           FOR UPDATE SKIP LOCKED
    LOOP
        SELECT LEAST(pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot()),
                     (SELECT o.xact_id FROM @extschema@.idem_outbox o
                       WHERE o.topic OPERATOR(pg_catalog.=) s.topic
                         AND o.xact_id OPERATOR(pg_catalog.>=) s.horizon
                         AND (SELECT d.acked_at FROM @extschema@.idem_outbox_deliveries d
                               WHERE d.consumer OPERATOR(pg_catalog.=) s.consumer
                                 AND d.id OPERATOR(pg_catalog.=) o.id) IS NULL
                       ORDER BY o.xact_id LIMIT 1))
          INTO h;
        IF h OPERATOR(pg_catalog.>) s.horizon THEN
            UPDATE @extschema@.idem_outbox_subscriptions s3 SET horizon = h
             WHERE s3.consumer OPERATOR(pg_catalog.=) s.consumer
               AND s3.topic OPERATOR(pg_catalog.=) s.topic;
            DELETE FROM @extschema@.idem_outbox_deliveries d
             WHERE d.consumer OPERATOR(pg_catalog.=) s.consumer
               AND d.topic OPERATOR(pg_catalog.=) s.topic
               AND d.xact_id OPERATOR(pg_catalog.<) h;
        END IF;
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.idem_outbox_fetch(
    consumer pg_catalog.text,
    max pg_catalog.int4 DEFAULT 100,
    lease pg_catalog.interval DEFAULT '30 seconds')
RETURNS TABLE (
    id pg_catalog.uuid,
    topic pg_catalog.text,
    aggregate pg_catalog.text,
    type pg_catalog.text,
    payload pg_catalog.jsonb,
    headers pg_catalog.jsonb,
    created_at pg_catalog.timestamptz,
    attempts pg_catalog.int4)
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
ROWS 100
AS $$
DECLARE
    now_ pg_catalog.timestamptz;
    until_ pg_catalog.timestamptz;
    taken pg_catalog.uuid[] := '{}';
    got pg_catalog.uuid[];
    ids pg_catalog.uuid[];
    sub pg_catalog.record;
    cand pg_catalog.record;
    seen pg_catalog.text[];
    run_key pg_catalog.text;
    last_x pg_catalog.xid8;
    last_pos pg_catalog.int8;
    n pg_catalog.int4;
    chunk pg_catalog.int4;
BEGIN
    IF idem_outbox_fetch.consumer IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_fetch: consumer must not be null' USING ERRCODE = '22004';
    END IF;
    IF idem_outbox_fetch.max IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_fetch: max must not be null' USING ERRCODE = '22004';
    END IF;
    IF idem_outbox_fetch.max OPERATOR(pg_catalog.<) 1 THEN
        RAISE EXCEPTION 'idem_outbox_fetch: max must be at least 1'
            USING ERRCODE = '22023', DETAIL = pg_catalog.format('The max given was %s.', idem_outbox_fetch.max);
    END IF;
    IF idem_outbox_fetch.lease IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_fetch: lease must not be null' USING ERRCODE = '22004';
    END IF;
    IF idem_outbox_fetch.lease OPERATOR(pg_catalog.<=) '0'::pg_catalog.interval THEN
        RAISE EXCEPTION 'idem_outbox_fetch: lease must be positive'
            USING ERRCODE = '22023', DETAIL = pg_catalog.format('The lease given was %s.', idem_outbox_fetch.lease);
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idem_outbox_fetch() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    IF pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed' THEN
        RAISE EXCEPTION 'idem_outbox_fetch: cannot fetch in a REPEATABLE READ or SERIALIZABLE transaction'
            USING ERRCODE = '25000',
                  DETAIL = 'Each step must see what other consumers committed since the previous one.',
                  HINT = 'Call idem_outbox_fetch in autocommit or in a READ COMMITTED transaction.';
    END IF;
    IF NOT EXISTS (SELECT FROM @extschema@.idem_outbox_subscriptions s
                    WHERE s.consumer OPERATOR(pg_catalog.=) (idem_outbox_fetch.consumer COLLATE pg_catalog."C")) THEN
        RAISE EXCEPTION 'idem_outbox_fetch: consumer "%" is not subscribed to any topic', idem_outbox_fetch.consumer
            USING ERRCODE = '42704',
                  HINT = 'Subscribe it first: SELECT idem_outbox_subscribe(consumer, topic).';
    END IF;
    now_ := pg_catalog.clock_timestamp();
    until_ := now_ OPERATOR(pg_catalog.+) idem_outbox_fetch.lease;

    PERFORM @extschema@.idem_outbox_advance(idem_outbox_fetch.consumer);

    -- The runs: per (topic, aggregate), the consumer's unacknowledged
    -- messages in position order (commit order); a message without an
    -- aggregate is a run of its own.  Every unacknowledged message is at or
    -- above the horizon.  The runs are found from the horizon up, in
    -- transaction order (the index on (topic, xact_id)), chunk by chunk,
    -- among the messages neither acknowledged nor leased to someone else,
    -- until max messages are taken: the cost follows what is handed out
    -- (and what is leased or acknowledged above the horizon), not the
    -- backlog.  Topics in the order of their horizons (the oldest
    -- unacknowledged first).  A message's delivery is looked up by the
    -- primary key, one message at a time (scalar subqueries, LATERAL ...
    -- LIMIT 1), never as a join: planned on the statistics of new tables,
    -- such a join read all of a group's deliveries for every message.
    chunk := GREATEST(idem_outbox_fetch.max OPERATOR(pg_catalog.*) 2, 200);
    <<topics>>
    FOR sub IN
        SELECT s.topic, s.horizon
          FROM @extschema@.idem_outbox_subscriptions s
         WHERE s.consumer OPERATOR(pg_catalog.=) (idem_outbox_fetch.consumer COLLATE pg_catalog."C")
         ORDER BY s.horizon, s.topic
    LOOP
        seen := '{}';
        last_x := sub.horizon;
        last_pos := -1;
        LOOP
            n := 0;
            FOR cand IN
                SELECT o.id, o.aggregate, o.xact_id, o.position
                  FROM @extschema@.idem_outbox o
                 WHERE o.topic OPERATOR(pg_catalog.=) (sub.topic COLLATE pg_catalog."C")
                   AND o.xact_id OPERATOR(pg_catalog.>=) last_x
                   AND (o.xact_id OPERATOR(pg_catalog.>) last_x OR o.position OPERATOR(pg_catalog.>) last_pos)
                   AND NOT COALESCE((
                       SELECT d.acked_at IS NOT NULL OR d.leased_until OPERATOR(pg_catalog.>) now_
                         FROM @extschema@.idem_outbox_deliveries d
                        WHERE d.consumer OPERATOR(pg_catalog.=) (idem_outbox_fetch.consumer COLLATE pg_catalog."C")
                          AND d.id OPERATOR(pg_catalog.=) o.id), false)
                 ORDER BY o.xact_id, o.position
                 LIMIT chunk
            LOOP
                n := n OPERATOR(pg_catalog.+) 1;
                last_x := cand.xact_id;
                last_pos := cand.position;
                run_key := CASE WHEN cand.aggregate IS NULL THEN 'i' OPERATOR(pg_catalog.||) cand.id::pg_catalog.text
                                ELSE 'a' OPERATOR(pg_catalog.||) cand.aggregate END;
                CONTINUE WHEN run_key OPERATOR(pg_catalog.=) ANY (seen);
                seen := seen OPERATOR(pg_catalog.||) run_key;
                -- One fetch at a time per run (others skip it), then the run
                -- as it is now (a new snapshot: what other fetches and
                -- acknowledgements committed meanwhile): acknowledged
                -- messages drop out, and it is taken up to the first message
                -- leased to someone else.
                CONTINUE WHEN NOT pg_catalog.pg_try_advisory_xact_lock(1229213510,
                    pg_catalog.hashtext(idem_outbox_fetch.consumer OPERATOR(pg_catalog.||) pg_catalog.chr(10)
                                        OPERATOR(pg_catalog.||) sub.topic OPERATOR(pg_catalog.||) pg_catalog.chr(10)
                                        OPERATOR(pg_catalog.||) COALESCE(cand.aggregate, cand.id::pg_catalog.text)));
                IF cand.aggregate IS NULL THEN
                    ids := ARRAY[cand.id];
                ELSE
                    -- The aggregate's messages above the horizon (the index
                    -- on (topic, aggregate, xact_id)), sorted by position
                    -- (OFFSET 0 keeps the sort below the filter), then the
                    -- acknowledged ones skipped one probe at a time (a
                    -- scalar subquery, not a join: it stays lazy, in that
                    -- order) until enough are found.
                    SELECT pg_catalog.array_agg(r.id ORDER BY r.position) INTO ids
                      FROM (SELECT o.id, o.position
                              FROM (SELECT o2.id, o2.position
                                      FROM @extschema@.idem_outbox o2
                                     WHERE o2.topic OPERATOR(pg_catalog.=) (sub.topic COLLATE pg_catalog."C")
                                       AND o2.aggregate OPERATOR(pg_catalog.=) (cand.aggregate COLLATE pg_catalog."C")
                                       AND o2.xact_id OPERATOR(pg_catalog.>=) sub.horizon
                                     ORDER BY o2.position
                                    OFFSET 0) o
                             WHERE (SELECT d.acked_at
                                      FROM @extschema@.idem_outbox_deliveries d
                                     WHERE d.consumer OPERATOR(pg_catalog.=) (idem_outbox_fetch.consumer COLLATE pg_catalog."C")
                                       AND d.id OPERATOR(pg_catalog.=) o.id) IS NULL
                             LIMIT idem_outbox_fetch.max OPERATOR(pg_catalog.-) pg_catalog.cardinality(taken)) r;
                END IF;
                WITH cur AS (
                    SELECT u.id, u.n, o.topic, o.xact_id,
                           pg_catalog.bool_and(d.leased_until IS NULL OR d.leased_until OPERATOR(pg_catalog.<=) now_)
                               OVER (ORDER BY u.n) AS free
                      FROM pg_catalog.unnest(ids) WITH ORDINALITY AS u(id, n)
                      JOIN @extschema@.idem_outbox o ON o.id OPERATOR(pg_catalog.=) u.id
                      LEFT JOIN LATERAL (
                           SELECT d2.leased_until, d2.acked_at
                             FROM @extschema@.idem_outbox_deliveries d2
                            WHERE d2.consumer OPERATOR(pg_catalog.=) (idem_outbox_fetch.consumer COLLATE pg_catalog."C")
                              AND d2.id OPERATOR(pg_catalog.=) u.id
                            LIMIT 1) d ON true
                     WHERE d.acked_at IS NULL
                ), ins AS (
                    INSERT INTO @extschema@.idem_outbox_deliveries AS d
                           (consumer, id, topic, xact_id, attempts, leased_until)
                    SELECT idem_outbox_fetch.consumer, cur.id, cur.topic, cur.xact_id, 1, until_
                      FROM cur
                     WHERE cur.free
                     ORDER BY cur.n
                     LIMIT idem_outbox_fetch.max OPERATOR(pg_catalog.-) pg_catalog.cardinality(taken)
                    ON CONFLICT ON CONSTRAINT idem_outbox_deliveries_pkey DO UPDATE
                       SET attempts = d.attempts OPERATOR(pg_catalog.+) 1,
                           leased_until = excluded.leased_until
                     WHERE d.acked_at IS NULL
                       AND (d.leased_until IS NULL OR d.leased_until OPERATOR(pg_catalog.<=) now_)
                    RETURNING d.id
                )
                SELECT pg_catalog.array_agg(ins.id) INTO got FROM ins;
                IF got IS NOT NULL THEN
                    taken := taken OPERATOR(pg_catalog.||) got;
                END IF;
                EXIT topics WHEN pg_catalog.cardinality(taken) OPERATOR(pg_catalog.>=) idem_outbox_fetch.max;
            END LOOP;
            EXIT WHEN n OPERATOR(pg_catalog.<) chunk;
        END LOOP;
    END LOOP;

    RETURN QUERY
        SELECT o.id, o.topic::pg_catalog.text, o.aggregate::pg_catalog.text, o.type, o.payload,
               o.headers, o.created_at, d.attempts
          FROM @extschema@.idem_outbox o
          JOIN @extschema@.idem_outbox_deliveries d
            ON d.consumer OPERATOR(pg_catalog.=) (idem_outbox_fetch.consumer COLLATE pg_catalog."C")
           AND d.id OPERATOR(pg_catalog.=) o.id
         WHERE o.id OPERATOR(pg_catalog.=) ANY (taken)
         ORDER BY o.position;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.idem_outbox_ack(
    consumer pg_catalog.text,
    id pg_catalog.uuid)
RETURNS pg_catalog.bool
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
AS $$
DECLARE
    m pg_catalog.record;
    h pg_catalog.xid8;
BEGIN
    IF idem_outbox_ack.consumer IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_ack: consumer must not be null' USING ERRCODE = '22004';
    END IF;
    IF idem_outbox_ack.id IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_ack: id must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idem_outbox_ack() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    SELECT o.topic, o.xact_id INTO m FROM @extschema@.idem_outbox o
     WHERE o.id OPERATOR(pg_catalog.=) idem_outbox_ack.id;
    IF NOT FOUND THEN
        RETURN false;    -- no such message (any more): purged after its acknowledgement
    END IF;
    SELECT s.horizon INTO h FROM @extschema@.idem_outbox_subscriptions s
     WHERE s.consumer OPERATOR(pg_catalog.=) (idem_outbox_ack.consumer COLLATE pg_catalog."C")
       AND s.topic OPERATOR(pg_catalog.=) m.topic;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'idem_outbox_ack: consumer "%" is not subscribed to topic "%"', idem_outbox_ack.consumer, m.topic
            USING ERRCODE = '42704',
                  DETAIL = pg_catalog.format('Message %s is of topic "%s".', idem_outbox_ack.id, m.topic),
                  HINT = 'Acknowledge with the consumer name given to idem_outbox_fetch.';
    END IF;
    IF m.xact_id OPERATOR(pg_catalog.<) h THEN
        RETURN false;    -- below the horizon: acknowledged already
    END IF;
    INSERT INTO @extschema@.idem_outbox_deliveries AS d
           (consumer, id, topic, xact_id, attempts, leased_until, acked_at)
    VALUES (idem_outbox_ack.consumer, idem_outbox_ack.id, m.topic, m.xact_id, 0, NULL,
            pg_catalog.clock_timestamp())
    ON CONFLICT ON CONSTRAINT idem_outbox_deliveries_pkey DO UPDATE
       SET acked_at = excluded.acked_at, leased_until = NULL
     WHERE d.acked_at IS NULL;
    RETURN FOUND;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.idem_outbox_purge(batch_size pg_catalog.int4 DEFAULT 10000)
RETURNS pg_catalog.int8
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
AS $$
DECLARE
    t pg_catalog.record;
    bound pg_catalog.xid8;
    keep pg_catalog.interval;
    n pg_catalog.int8;
    total pg_catalog.int8 := 0;
    now_ pg_catalog.timestamptz;
BEGIN
    IF idem_outbox_purge.batch_size IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_purge: batch_size must not be null' USING ERRCODE = '22004';
    END IF;
    IF idem_outbox_purge.batch_size OPERATOR(pg_catalog.<) 1 THEN
        RAISE EXCEPTION 'idem_outbox_purge: batch_size must be at least 1'
            USING ERRCODE = '22023', DETAIL = pg_catalog.format('The batch_size given was %s.', idem_outbox_purge.batch_size);
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idem_outbox_purge() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    now_ := pg_catalog.clock_timestamp();

    PERFORM @extschema@.idem_outbox_advance(NULL);

    -- The topics of the table, one index probe each.
    FOR t IN
        WITH RECURSIVE topics(topic) AS (
            (SELECT o.topic FROM @extschema@.idem_outbox o ORDER BY o.topic LIMIT 1)
            UNION ALL
            SELECT (SELECT o.topic FROM @extschema@.idem_outbox o
                     WHERE o.topic OPERATOR(pg_catalog.>) p.topic ORDER BY o.topic LIMIT 1)
              FROM topics p WHERE p.topic IS NOT NULL)
        SELECT x.topic FROM topics x WHERE x.topic IS NOT NULL
    LOOP
        EXIT WHEN total OPERATOR(pg_catalog.>=) idem_outbox_purge.batch_size;
        SELECT c.retention INTO keep FROM @extschema@.idem_outbox_topics c
         WHERE c.topic OPERATOR(pg_catalog.=) t.topic;
        IF keep IS NULL THEN
            keep := '7 days';
        END IF;
        SELECT pg_catalog.min(s.horizon) INTO bound FROM @extschema@.idem_outbox_subscriptions s
         WHERE s.topic OPERATOR(pg_catalog.=) t.topic;
        WITH head AS (
            SELECT o.id, o.created_at FROM @extschema@.idem_outbox o
             WHERE o.topic OPERATOR(pg_catalog.=) t.topic
               AND (bound IS NULL OR o.xact_id OPERATOR(pg_catalog.<) bound)
             ORDER BY o.xact_id
             LIMIT idem_outbox_purge.batch_size OPERATOR(pg_catalog.-) total
               FOR UPDATE SKIP LOCKED
        )
        DELETE FROM @extschema@.idem_outbox o
         USING head
         WHERE o.id OPERATOR(pg_catalog.=) head.id
           AND head.created_at OPERATOR(pg_catalog.<) (now_ OPERATOR(pg_catalog.-) keep);
        GET DIAGNOSTICS n = ROW_COUNT;
        total := total OPERATOR(pg_catalog.+) n;
        keep := NULL;
    END LOOP;
    RETURN total;
END
$$;
