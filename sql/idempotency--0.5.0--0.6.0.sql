-- idempotency 0.5.0 -> 0.6.0: hardening, round three; safe defaults.
-- The same objects are in the sql/idempotency*.sql sources of a fresh
-- 0.6.0 install.

\echo Use "ALTER EXTENSION idempotency UPDATE TO '0.6.0'" to load this file. \quit

-- outbox: isolation per topic and group; row locks, no public advisory
-- locks; no name resolved through a caller's search_path; bounded leases
-- and retentions; a group's progress as one row per run (a position per
-- aggregate), so that a fetch reads only what it hands out.  Every
-- message, every group's progress and every lease stay (converted below).
-- (idem_grant and idem_revoke are replaced at the end of this section.)

DROP INDEX @extschema@.idem_outbox_topic_xact_idx;
DROP INDEX @extschema@.idem_outbox_topic_aggregate_idx;
-- A run's messages in order: one aggregate's from a position up.  (The
-- purge walks the table by its primary key.)
CREATE INDEX idem_outbox_topic_aggregate_idx
    ON @extschema@.idem_outbox (topic, aggregate, position)
    WHERE aggregate IS NOT NULL;

-- One row per (topic, aggregate) ever published to: the aggregate's
-- lock.  idem_publish writes it (INSERT ... ON CONFLICT DO UPDATE) before
-- its message, and holds the row lock until its transaction ends.
CREATE TABLE @extschema@.idem_outbox_aggregates (
    topic      pg_catalog.text COLLATE pg_catalog."C" NOT NULL,
    aggregate  pg_catalog.text COLLATE pg_catalog."C" NOT NULL,
    published  pg_catalog.int8 NOT NULL DEFAULT 1,
    CONSTRAINT idem_outbox_aggregates_pkey PRIMARY KEY (topic, aggregate)
);

COMMENT ON TABLE @extschema@.idem_outbox_aggregates IS
    'The aggregates published to, one row each: the row idem_publish locks until commit so that one aggregate''s messages take their positions in commit order; published counts the publications';

REVOKE ALL ON TABLE @extschema@.idem_outbox_aggregates FROM PUBLIC;

SELECT pg_catalog.pg_extension_config_dump('@extschema@.idem_outbox_aggregates', '');

-- Where idem_outbox_purge goes on: the id it examined last (it walks the
-- table by primary key, a bounded number of rows per call, and wraps).
CREATE TABLE @extschema@.idem_outbox_purge_hand (
    one        pg_catalog.bool NOT NULL DEFAULT true,
    last_id    pg_catalog.uuid,
    CONSTRAINT idem_outbox_purge_hand_pkey PRIMARY KEY (one),
    CONSTRAINT idem_outbox_purge_hand_one_check CHECK (one)
);

COMMENT ON TABLE @extschema@.idem_outbox_purge_hand IS
    'Internal (idem_outbox_purge): the id of the last message examined; the next call goes on from there';

REVOKE ALL ON TABLE @extschema@.idem_outbox_purge_hand FROM PUBLIC;

COMMENT ON TABLE @extschema@.idem_outbox IS
    'Messages published with idem_publish, one row per message id; exists if and only if the publishing transaction committed';
COMMENT ON COLUMN @extschema@.idem_outbox.id IS
    'Message id: idem_outbox_id(topic, key, scope, seq), the same for every publication of the same claim (or explicit key), topic and seq';
COMMENT ON COLUMN @extschema@.idem_outbox.aggregate IS
    'Ordering key: the messages of one (topic, aggregate) are delivered in commit order; Debezium''s event key';
COMMENT ON COLUMN @extschema@.idem_outbox.scope IS
    'Scope of the claim the message was published for; NULL for a message published with an explicit key';
COMMENT ON COLUMN @extschema@.idem_outbox.key IS
    'Key of the claim the message was published for, or the explicit key';
COMMENT ON COLUMN @extschema@.idem_outbox.position IS
    'Order of publication; within one (topic, aggregate) it is the commit order';
COMMENT ON COLUMN @extschema@.idem_outbox.xact_id IS
    'Top-level transaction id of the publication, as pg_current_xact_id() returns it';
COMMENT ON COLUMN @extschema@.idem_outbox.created_at IS
    'Start of the publishing transaction (now())';

REVOKE ALL ON TABLE @extschema@.idem_outbox FROM PUBLIC;
REVOKE ALL ON SEQUENCE @extschema@.idem_outbox_position_seq FROM PUBLIC;

SELECT pg_catalog.pg_extension_config_dump('@extschema@.idem_outbox', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.idem_outbox_position_seq', '');

INSERT INTO @extschema@.idem_outbox_aggregates (topic, aggregate, published)
SELECT o.topic, o.aggregate, pg_catalog.count(*)
  FROM @extschema@.idem_outbox o
 WHERE o.aggregate IS NOT NULL
 GROUP BY o.topic, o.aggregate;

UPDATE @extschema@.idem_outbox_topics
   SET retention = '100 years'::pg_catalog.interval
 WHERE retention OPERATOR(pg_catalog.>) '100 years'::pg_catalog.interval;
ALTER TABLE @extschema@.idem_outbox_topics
    DROP CONSTRAINT idem_outbox_topics_retention_check,
    ADD CONSTRAINT idem_outbox_topics_retention_check CHECK
        (retention OPERATOR(pg_catalog.>=) '0'::pg_catalog.interval
         AND retention OPERATOR(pg_catalog.<=) '100 years'::pg_catalog.interval);

COMMENT ON TABLE @extschema@.idem_outbox_subscriptions IS
    'Consumer groups of the pull API and their topics (idem_outbox_subscribe); horizon: the oldest transaction running at the subscription, 0 from the start';

-- idem_publish finds the groups of its topic.
CREATE INDEX idem_outbox_subscriptions_topic_idx
    ON @extschema@.idem_outbox_subscriptions (topic);

-- A consumer group's progress, one row per run: the messages of one
-- (topic, aggregate), or one message without an aggregate (lone), that
-- the group has not acknowledged.  Made by idem_publish for every group
-- subscribed to the topic (or by idem_outbox_subscribe from the start);
-- a group's progress in an aggregate is a position (acked), because the
-- aggregate's messages are delivered in position order, so a lease and an
-- acknowledgement are per run, not per message.  available_at: the run
-- is free from then on; in the future while a lease holds it; 'infinity'
-- when it has nothing to deliver (parked: idem_publish frees it again).
-- A fetch takes free runs from the index on (consumer, available_at)
-- with FOR UPDATE SKIP LOCKED: it never reads a leased run, a parked one
-- or another group's.
CREATE TABLE @extschema@.idem_outbox_runs (
    consumer     pg_catalog.text COLLATE pg_catalog."C" NOT NULL,
    topic        pg_catalog.text COLLATE pg_catalog."C" NOT NULL,
    aggregate    pg_catalog.text COLLATE pg_catalog."C",
    lone         pg_catalog.uuid,
    acked        pg_catalog.int8 NOT NULL,
    acked_ahead  pg_catalog.int8[],
    available_at pg_catalog.timestamptz NOT NULL,
    leased_upto  pg_catalog.int8,
    handed_upto  pg_catalog.int8 NOT NULL DEFAULT -1,
    attempts     pg_catalog.int4 NOT NULL DEFAULT 0,
    CONSTRAINT idem_outbox_runs_key UNIQUE NULLS NOT DISTINCT (topic, aggregate, lone, consumer),
    CONSTRAINT idem_outbox_runs_kind_check CHECK ((aggregate IS NULL) OPERATOR(pg_catalog.<>) (lone IS NULL))
);
CREATE INDEX idem_outbox_runs_ready
    ON @extschema@.idem_outbox_runs (consumer, available_at, acked);

COMMENT ON TABLE @extschema@.idem_outbox_runs IS
    'Per consumer group, its runs (an aggregate''s messages, or one message without an aggregate) with something unacknowledged: acknowledged up to position acked (and acked_ahead), leased until available_at, parked when that is infinity';

REVOKE ALL ON TABLE @extschema@.idem_outbox_runs FROM PUBLIC;

SELECT pg_catalog.pg_extension_config_dump('@extschema@.idem_outbox_runs', '');

-- Each group's progress of 0.5.0 as runs: per aggregate (and per message
-- without one) with an unacknowledged message at or above the group's
-- horizon, the position before its first unacknowledged message, what is
-- acknowledged beyond it, and the lease of what is leased.
WITH state AS (
    SELECT s.consumer, o.topic, o.aggregate, o.id, o.position, o.created_at,
           d.acked_at IS NOT NULL AS acked, d.attempts,
           CASE WHEN d.acked_at IS NULL AND d.leased_until OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
                THEN d.leased_until END AS leased_until
      FROM @extschema@.idem_outbox_subscriptions s
      JOIN @extschema@.idem_outbox o
        ON o.topic OPERATOR(pg_catalog.=) s.topic
       AND o.xact_id OPERATOR(pg_catalog.>=) s.horizon
      LEFT JOIN @extschema@.idem_outbox_deliveries d
        ON d.consumer OPERATOR(pg_catalog.=) s.consumer
       AND d.id OPERATOR(pg_catalog.=) o.id
), head AS (
    SELECT st.consumer, st.topic, st.aggregate,
           CASE WHEN st.aggregate IS NULL THEN st.id END AS lone,
           pg_catalog.min(st.position) FILTER (WHERE NOT st.acked) AS first_open
      FROM state st
     GROUP BY st.consumer, st.topic, st.aggregate, CASE WHEN st.aggregate IS NULL THEN st.id END
)
INSERT INTO @extschema@.idem_outbox_runs
       (consumer, topic, aggregate, lone, acked, acked_ahead, available_at, leased_upto, handed_upto, attempts)
SELECT h.consumer, h.topic, h.aggregate, h.lone,
       h.first_open OPERATOR(pg_catalog.-) 1,
       (SELECT pg_catalog.array_agg(st.position ORDER BY st.position) FROM state st
         WHERE h.lone IS NULL
           AND st.consumer OPERATOR(pg_catalog.=) h.consumer AND st.topic OPERATOR(pg_catalog.=) h.topic
           AND st.aggregate OPERATOR(pg_catalog.=) h.aggregate
           AND st.acked AND st.position OPERATOR(pg_catalog.>) h.first_open),
       COALESCE(l.until, l.oldest, pg_catalog.now()),
       l.leased_upto, COALESCE(l.handed_upto, -1), COALESCE(l.attempts, 0)
  FROM head h
  CROSS JOIN LATERAL (
       SELECT pg_catalog.max(st.leased_until) AS until,
              pg_catalog.max(st.position) FILTER (WHERE st.leased_until IS NOT NULL) AS leased_upto,
              pg_catalog.max(st.position) FILTER (WHERE st.attempts OPERATOR(pg_catalog.>) 0) AS handed_upto,
              pg_catalog.max(st.attempts) FILTER (WHERE NOT st.acked) AS attempts,
              pg_catalog.min(st.created_at) FILTER (WHERE NOT st.acked) AS oldest
         FROM state st
        WHERE st.consumer OPERATOR(pg_catalog.=) h.consumer AND st.topic OPERATOR(pg_catalog.=) h.topic
          AND ((h.lone IS NULL AND st.aggregate OPERATOR(pg_catalog.=) h.aggregate)
               OR (h.lone IS NOT NULL AND st.id OPERATOR(pg_catalog.=) h.lone))) AS l
 WHERE h.first_open IS NOT NULL;

CREATE OR REPLACE VIEW @extschema@.idem_outbox_backlog WITH (security_invoker = true) AS
    SELECT s.consumer::pg_catalog.text AS consumer,
           s.topic::pg_catalog.text AS topic,
           COALESCE(pg_catalog.sum(m.n), 0)::pg_catalog.int8 AS unacknowledged,
           COALESCE(pg_catalog.sum(m.leased), 0)::pg_catalog.int8 AS leased,
           pg_catalog.min(m.oldest) AS oldest,
           pg_catalog.max(m.attempts) AS max_attempts,
           s.horizon
      FROM @extschema@.idem_outbox_subscriptions s
      LEFT JOIN LATERAL (
           SELECT pg_catalog.count(o.id) AS n,
                  pg_catalog.count(o.id) FILTER (
                      WHERE r.available_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
                        AND r.available_at OPERATOR(pg_catalog.<) 'infinity'::pg_catalog.timestamptz
                        AND o.position OPERATOR(pg_catalog.<=) r.leased_upto) AS leased,
                  pg_catalog.min(o.created_at) AS oldest,
                  pg_catalog.max(r.attempts) FILTER (WHERE r.attempts OPERATOR(pg_catalog.>) 0) AS attempts
             FROM @extschema@.idem_outbox_runs r
             JOIN @extschema@.idem_outbox o
               ON o.topic OPERATOR(pg_catalog.=) r.topic
              AND ((r.lone IS NOT NULL AND o.id OPERATOR(pg_catalog.=) r.lone)
                   OR (r.lone IS NULL AND o.aggregate OPERATOR(pg_catalog.=) r.aggregate
                       AND o.position OPERATOR(pg_catalog.>) r.acked
                       AND NOT COALESCE(o.position OPERATOR(pg_catalog.=) ANY (r.acked_ahead), false)))
            WHERE r.consumer OPERATOR(pg_catalog.=) s.consumer
              AND r.topic OPERATOR(pg_catalog.=) s.topic) AS m ON true
     GROUP BY s.consumer, s.topic, s.horizon;

COMMENT ON VIEW @extschema@.idem_outbox_backlog IS
    'Per consumer group and topic: messages not acknowledged yet, how many are leased, the oldest, the most delivery attempts, the horizon';

-- Public: what a role sees is decided by its privileges on the tables.
DROP FUNCTION @extschema@.idem_outbox_advance(pg_catalog.text);
-- (out of its extension first, so that it also leaves pg_extension.extconfig;
-- the portable edition's plain script has no extension)
DO $$
DECLARE
    ext pg_catalog.name;
BEGIN
    SELECT e.extname INTO ext
      FROM pg_catalog.pg_depend d
      JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) d.refobjid
     WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
       AND d.objid OPERATOR(pg_catalog.=) '@extschema@.idem_outbox_deliveries'::pg_catalog.regclass::pg_catalog.oid
       AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
       AND d.deptype OPERATOR(pg_catalog.=) 'e';
    IF FOUND THEN
        EXECUTE pg_catalog.format('ALTER EXTENSION %I DROP TABLE @extschema@.idem_outbox_deliveries', ext);
    END IF;
END
$$;
DROP TABLE @extschema@.idem_outbox_deliveries;

-- Isolation between applications: the grants, row-level security.
CREATE TABLE @extschema@.idem_outbox_grants (
    role       pg_catalog.regrole NOT NULL,
    privilege  pg_catalog.text COLLATE pg_catalog."C" NOT NULL,
    topic      pg_catalog.text COLLATE pg_catalog."C",
    consumer   pg_catalog.text COLLATE pg_catalog."C",
    CONSTRAINT idem_outbox_grants_privilege_check CHECK
        (privilege OPERATOR(pg_catalog.=) ANY ('{publish,consume}'::pg_catalog.text[])),
    CONSTRAINT idem_outbox_grants_consumer_check CHECK
        (privilege OPERATOR(pg_catalog.=) 'consume' OR consumer IS NULL)
);

CREATE UNIQUE INDEX idem_outbox_grants_key
    ON @extschema@.idem_outbox_grants (role, privilege, topic, consumer) NULLS NOT DISTINCT;

COMMENT ON TABLE @extschema@.idem_outbox_grants IS
    'Outbox rights (idem_outbox_grant): role may publish to topic, or read topic as consumer group consumer; NULL is every topic or every group';

REVOKE ALL ON TABLE @extschema@.idem_outbox_grants FROM PUBLIC;
GRANT SELECT ON TABLE @extschema@.idem_outbox_grants TO PUBLIC;

SELECT pg_catalog.pg_extension_config_dump('@extschema@.idem_outbox_grants', '');

ALTER TABLE @extschema@.idem_outbox ENABLE ROW LEVEL SECURITY;
ALTER TABLE @extschema@.idem_outbox_aggregates ENABLE ROW LEVEL SECURITY;
ALTER TABLE @extschema@.idem_outbox_subscriptions ENABLE ROW LEVEL SECURITY;
ALTER TABLE @extschema@.idem_outbox_runs ENABLE ROW LEVEL SECURITY;

-- Publishers see the messages of their topics (a duplicate publication
-- reads the first) and insert only messages of their topics whose id is
-- the one idem_outbox_id gives (no message can take another's future id).
CREATE POLICY idem_outbox_publisher_read ON @extschema@.idem_outbox
    FOR SELECT
    USING (EXISTS (SELECT FROM @extschema@.idem_outbox_grants g
                    WHERE g.privilege OPERATOR(pg_catalog.=) 'publish'
                      AND (g.topic IS NULL OR g.topic OPERATOR(pg_catalog.=) idem_outbox.topic)
                      AND pg_catalog.pg_has_role(g.role::pg_catalog.oid, 'USAGE')));
CREATE POLICY idem_outbox_publisher_insert ON @extschema@.idem_outbox
    FOR INSERT
    WITH CHECK (EXISTS (SELECT FROM @extschema@.idem_outbox_grants g
                         WHERE g.privilege OPERATOR(pg_catalog.=) 'publish'
                           AND (g.topic IS NULL OR g.topic OPERATOR(pg_catalog.=) idem_outbox.topic)
                           AND pg_catalog.pg_has_role(g.role::pg_catalog.oid, 'USAGE'))
                AND id OPERATOR(pg_catalog.=) @extschema@.idem_outbox_id(topic::pg_catalog.text, key::pg_catalog.text,
                                                                         scope::pg_catalog.text, seq));
-- Consumers read the messages of the topics they may read as some group.
CREATE POLICY idem_outbox_consumer_read ON @extschema@.idem_outbox
    FOR SELECT
    USING (EXISTS (SELECT FROM @extschema@.idem_outbox_grants g
                    WHERE g.privilege OPERATOR(pg_catalog.=) 'consume'
                      AND (g.topic IS NULL OR g.topic OPERATOR(pg_catalog.=) idem_outbox.topic)
                      AND pg_catalog.pg_has_role(g.role::pg_catalog.oid, 'USAGE')));
-- The aggregates' lock rows: publishers of the topic write them;
-- consumers of the topic may only lock them FOR SHARE (a fetch parks a
-- drained run under that lock, so that no publication slips past it).
CREATE POLICY idem_outbox_aggregates_publisher ON @extschema@.idem_outbox_aggregates
    USING (EXISTS (SELECT FROM @extschema@.idem_outbox_grants g
                    WHERE g.privilege OPERATOR(pg_catalog.=) 'publish'
                      AND (g.topic IS NULL OR g.topic OPERATOR(pg_catalog.=) idem_outbox_aggregates.topic)
                      AND pg_catalog.pg_has_role(g.role::pg_catalog.oid, 'USAGE')));
CREATE POLICY idem_outbox_aggregates_consumer_read ON @extschema@.idem_outbox_aggregates
    FOR SELECT
    USING (EXISTS (SELECT FROM @extschema@.idem_outbox_grants g
                    WHERE g.privilege OPERATOR(pg_catalog.=) 'consume'
                      AND (g.topic IS NULL OR g.topic OPERATOR(pg_catalog.=) idem_outbox_aggregates.topic)
                      AND pg_catalog.pg_has_role(g.role::pg_catalog.oid, 'USAGE')));
CREATE POLICY idem_outbox_aggregates_consumer_lock ON @extschema@.idem_outbox_aggregates
    FOR UPDATE
    USING (EXISTS (SELECT FROM @extschema@.idem_outbox_grants g
                    WHERE g.privilege OPERATOR(pg_catalog.=) 'consume'
                      AND (g.topic IS NULL OR g.topic OPERATOR(pg_catalog.=) idem_outbox_aggregates.topic)
                      AND pg_catalog.pg_has_role(g.role::pg_catalog.oid, 'USAGE')))
    WITH CHECK (false);
-- A group's subscriptions and runs: the roles that may read the topic as
-- that group.  Publishers of the topic see its subscriptions and make or
-- free the groups' runs of what they publish.
CREATE POLICY idem_outbox_subscriptions_consumer ON @extschema@.idem_outbox_subscriptions
    USING (EXISTS (SELECT FROM @extschema@.idem_outbox_grants g
                    WHERE g.privilege OPERATOR(pg_catalog.=) 'consume'
                      AND (g.topic IS NULL OR g.topic OPERATOR(pg_catalog.=) idem_outbox_subscriptions.topic)
                      AND (g.consumer IS NULL OR g.consumer OPERATOR(pg_catalog.=) idem_outbox_subscriptions.consumer)
                      AND pg_catalog.pg_has_role(g.role::pg_catalog.oid, 'USAGE')));
CREATE POLICY idem_outbox_subscriptions_publisher ON @extschema@.idem_outbox_subscriptions
    FOR SELECT
    USING (EXISTS (SELECT FROM @extschema@.idem_outbox_grants g
                    WHERE g.privilege OPERATOR(pg_catalog.=) 'publish'
                      AND (g.topic IS NULL OR g.topic OPERATOR(pg_catalog.=) idem_outbox_subscriptions.topic)
                      AND pg_catalog.pg_has_role(g.role::pg_catalog.oid, 'USAGE')));
CREATE POLICY idem_outbox_runs_consumer ON @extschema@.idem_outbox_runs
    USING (EXISTS (SELECT FROM @extschema@.idem_outbox_grants g
                    WHERE g.privilege OPERATOR(pg_catalog.=) 'consume'
                      AND (g.topic IS NULL OR g.topic OPERATOR(pg_catalog.=) idem_outbox_runs.topic)
                      AND (g.consumer IS NULL OR g.consumer OPERATOR(pg_catalog.=) idem_outbox_runs.consumer)
                      AND pg_catalog.pg_has_role(g.role::pg_catalog.oid, 'USAGE')));
CREATE POLICY idem_outbox_runs_publisher_read ON @extschema@.idem_outbox_runs
    FOR SELECT
    USING (EXISTS (SELECT FROM @extschema@.idem_outbox_grants g
                    WHERE g.privilege OPERATOR(pg_catalog.=) 'publish'
                      AND (g.topic IS NULL OR g.topic OPERATOR(pg_catalog.=) idem_outbox_runs.topic)
                      AND pg_catalog.pg_has_role(g.role::pg_catalog.oid, 'USAGE')));
CREATE POLICY idem_outbox_runs_publisher_insert ON @extschema@.idem_outbox_runs
    FOR INSERT
    WITH CHECK (EXISTS (SELECT FROM @extschema@.idem_outbox_grants g
                    WHERE g.privilege OPERATOR(pg_catalog.=) 'publish'
                      AND (g.topic IS NULL OR g.topic OPERATOR(pg_catalog.=) idem_outbox_runs.topic)
                      AND pg_catalog.pg_has_role(g.role::pg_catalog.oid, 'USAGE')));
CREATE POLICY idem_outbox_runs_publisher_free ON @extschema@.idem_outbox_runs
    FOR UPDATE
    USING (EXISTS (SELECT FROM @extschema@.idem_outbox_grants g
                    WHERE g.privilege OPERATOR(pg_catalog.=) 'publish'
                      AND (g.topic IS NULL OR g.topic OPERATOR(pg_catalog.=) idem_outbox_runs.topic)
                      AND pg_catalog.pg_has_role(g.role::pg_catalog.oid, 'USAGE')))
    WITH CHECK (EXISTS (SELECT FROM @extschema@.idem_outbox_grants g
                    WHERE g.privilege OPERATOR(pg_catalog.=) 'publish'
                      AND (g.topic IS NULL OR g.topic OPERATOR(pg_catalog.=) idem_outbox_runs.topic)
                      AND pg_catalog.pg_has_role(g.role::pg_catalog.oid, 'USAGE')));

-- Roles that idem_grant gave the outbox in 0.5.0 keep what they had: every
-- topic and every group (docs/security.md says how to narrow it).
INSERT INTO @extschema@.idem_outbox_grants (role, privilege)
SELECT DISTINCT a.grantee::pg_catalog.regrole, v.privilege
  FROM pg_catalog.pg_class c
 CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) AS a
  JOIN (VALUES ('idem_outbox', 'publish'), ('idem_outbox_subscriptions', 'consume')) AS v(rel, privilege)
    ON v.rel OPERATOR(pg_catalog.=) c.relname::pg_catalog.text
 WHERE c.relnamespace OPERATOR(pg_catalog.=) '@extschema@'::pg_catalog.regnamespace
   AND a.privilege_type OPERATOR(pg_catalog.=) 'INSERT'
   AND a.grantee OPERATOR(pg_catalog.<>) 0::pg_catalog.oid
   AND a.grantee OPERATOR(pg_catalog.<>) c.relowner;
DO $$
DECLARE
    g pg_catalog.record;
BEGIN
    FOR g IN SELECT r.role, r.privilege FROM @extschema@.idem_outbox_grants r
    LOOP
        IF g.privilege OPERATOR(pg_catalog.=) 'publish' THEN
            EXECUTE pg_catalog.format('GRANT SELECT, INSERT, UPDATE ON TABLE @extschema@.idem_outbox_aggregates TO %s', g.role);
            EXECUTE pg_catalog.format('GRANT SELECT ON TABLE @extschema@.idem_outbox_subscriptions TO %s', g.role);
            EXECUTE pg_catalog.format('GRANT SELECT, INSERT, UPDATE (available_at) ON TABLE @extschema@.idem_outbox_runs TO %s', g.role);
        ELSE
            EXECUTE pg_catalog.format('GRANT SELECT, UPDATE (published) ON TABLE @extschema@.idem_outbox_aggregates TO %s', g.role);
            EXECUTE pg_catalog.format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE @extschema@.idem_outbox_runs TO %s', g.role);
        END IF;
    END LOOP;
END
$$;


CREATE OR REPLACE FUNCTION @extschema@.idem_xact_claims(
    OUT scope pg_catalog.text,
    OUT key pg_catalog.text)
RETURNS SETOF pg_catalog.record
LANGUAGE plpgsql VOLATILE STRICT PARALLEL RESTRICTED
ROWS 1
AS $$
DECLARE
    top pg_catalog.xid8 := pg_catalog.pg_current_xact_id_if_assigned();
    setting pg_catalog.text;
    span pg_catalog.interval;
    lo pg_catalog.timestamptz;
    hi pg_catalog.timestamptz;
BEGIN
    IF top IS NULL THEN
        RETURN;    -- no transaction id: this transaction wrote nothing
    END IF;
    setting := pg_catalog.current_setting('idempotency.default_ttl', true);
    IF setting IS NULL OR setting OPERATOR(pg_catalog.=) '' THEN
        span := '7 days';
    ELSIF pg_catalog.lower(setting) OPERATOR(pg_catalog.=) 'infinity' THEN
        lo := 'infinity';
        hi := 'infinity';
    ELSE
        span := setting::pg_catalog.interval;
    END IF;
    IF lo IS NULL THEN
        lo := pg_catalog.now() OPERATOR(pg_catalog.+) span;
        hi := pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) span;
    END IF;
    RETURN QUERY
        SELECT r.scope::pg_catalog.text, r.key::pg_catalog.text
          FROM @extschema@.idem_records r
         WHERE r.expires_at OPERATOR(pg_catalog.>=) lo
           AND r.expires_at OPERATOR(pg_catalog.<=) hi
           AND CASE WHEN r.updated_at OPERATOR(pg_catalog.<) pg_catalog.now()
                      OR NOT r.status OPERATOR(pg_catalog.=) ANY ('{claimed,in_progress,completed}'::pg_catalog.text[])
                    THEN false
                    WHEN r.xmin OPERATOR(pg_catalog.=) pg_catalog.xid(top) THEN true
                    ELSE COALESCE(pg_catalog.pg_xact_status(((top)::pg_catalog.text::pg_catalog.int8
                                OPERATOR(pg_catalog.+) ((((r.xmin)::pg_catalog.text::pg_catalog.int8
                                    OPERATOR(pg_catalog.-) ((top)::pg_catalog.text::pg_catalog.int8 OPERATOR(pg_catalog.%) 4294967296))
                                   OPERATOR(pg_catalog.+) 6442450944) OPERATOR(pg_catalog.%) 4294967296)
                                OPERATOR(pg_catalog.-) 2147483648)::pg_catalog.text::pg_catalog.xid8)
                                  OPERATOR(pg_catalog.=) 'in progress', false) END
         ORDER BY 1, 2;
    -- (idem_publish runs the same query inline.)
END
$$;

COMMENT ON FUNCTION @extschema@.idem_xact_claims() IS
    'The (scope, key) records this transaction claimed with the default ttl (idem_claim, idem_claim_many, idem_begin); what idem_publish binds a message to';

CREATE OR REPLACE FUNCTION @extschema@.idem_outbox_grant(
    role pg_catalog.regrole,
    privilege pg_catalog.text,
    topic pg_catalog.text DEFAULT NULL,
    consumer pg_catalog.text DEFAULT NULL)
RETURNS pg_catalog.void
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp pg_catalog.text := (SELECT n.nspname FROM pg_catalog.pg_extension e
                            JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace
                            WHERE e.extname OPERATOR(pg_catalog.=) 'idempotency');
BEGIN
    IF idem_outbox_grant.role IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_grant: role must not be null' USING ERRCODE = '22004';
    END IF;
    IF idem_outbox_grant.privilege IS NULL
       OR NOT idem_outbox_grant.privilege OPERATOR(pg_catalog.=) ANY ('{publish,consume}'::pg_catalog.text[]) THEN
        RAISE EXCEPTION 'idem_outbox_grant: unknown privilege "%"', idem_outbox_grant.privilege
            USING ERRCODE = '22023',
                  DETAIL = 'The privilege is ''publish'' (idem_publish to the topic) or ''consume'' (subscribe, fetch and acknowledge as the consumer group).';
    END IF;
    IF idem_outbox_grant.privilege OPERATOR(pg_catalog.=) 'publish' AND idem_outbox_grant.consumer IS NOT NULL THEN
        RAISE EXCEPTION 'idem_outbox_grant: a publish grant names no consumer group' USING ERRCODE = '22023';
    END IF;
    EXECUTE pg_catalog.format('GRANT USAGE ON SCHEMA %I TO %s', nsp, idem_outbox_grant.role);
    IF idem_outbox_grant.privilege OPERATOR(pg_catalog.=) 'publish' THEN
        EXECUTE pg_catalog.format('GRANT SELECT, INSERT ON TABLE %I.idem_outbox TO %s', nsp, idem_outbox_grant.role);
        EXECUTE pg_catalog.format('GRANT USAGE ON SEQUENCE %I.idem_outbox_position_seq TO %s', nsp, idem_outbox_grant.role);
        EXECUTE pg_catalog.format('GRANT SELECT, INSERT, UPDATE ON TABLE %I.idem_outbox_aggregates TO %s', nsp, idem_outbox_grant.role);
        EXECUTE pg_catalog.format('GRANT SELECT ON TABLE %I.idem_outbox_subscriptions TO %s', nsp, idem_outbox_grant.role);
        EXECUTE pg_catalog.format('GRANT SELECT, INSERT, UPDATE (available_at) ON TABLE %I.idem_outbox_runs TO %s', nsp, idem_outbox_grant.role);
    ELSE
        EXECUTE pg_catalog.format('GRANT SELECT ON TABLE %I.idem_outbox TO %s', nsp, idem_outbox_grant.role);
        EXECUTE pg_catalog.format('GRANT SELECT, UPDATE (published) ON TABLE %I.idem_outbox_aggregates TO %s', nsp, idem_outbox_grant.role);
        EXECUTE pg_catalog.format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE %I.idem_outbox_subscriptions TO %s', nsp, idem_outbox_grant.role);
        EXECUTE pg_catalog.format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE %I.idem_outbox_runs TO %s', nsp, idem_outbox_grant.role);
    END IF;
    EXECUTE pg_catalog.format(
        'INSERT INTO %I.idem_outbox_grants (role, privilege, topic, consumer) VALUES ($1, $2, $3, $4)'
        ' ON CONFLICT (role, privilege, topic, consumer) DO NOTHING', nsp)
        USING idem_outbox_grant.role, idem_outbox_grant.privilege, idem_outbox_grant.topic, idem_outbox_grant.consumer;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_outbox_grant(pg_catalog.regrole, pg_catalog.text, pg_catalog.text, pg_catalog.text) IS
    'Let role publish to topic (''publish'') or read topic as consumer group consumer (''consume''); NULL topic or consumer: every one';

REVOKE ALL ON FUNCTION @extschema@.idem_outbox_grant(pg_catalog.regrole, pg_catalog.text, pg_catalog.text, pg_catalog.text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION @extschema@.idem_outbox_revoke(
    role pg_catalog.regrole,
    privilege pg_catalog.text DEFAULT NULL,
    topic pg_catalog.text DEFAULT NULL,
    consumer pg_catalog.text DEFAULT NULL)
RETURNS pg_catalog.int4
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp pg_catalog.text := (SELECT n.nspname FROM pg_catalog.pg_extension e
                            JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace
                            WHERE e.extname OPERATOR(pg_catalog.=) 'idempotency');
    n pg_catalog.int4;
    left_ pg_catalog.bool;
BEGIN
    IF idem_outbox_revoke.role IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_revoke: role must not be null' USING ERRCODE = '22004';
    END IF;
    EXECUTE pg_catalog.format(
        'DELETE FROM %I.idem_outbox_grants g WHERE g.role OPERATOR(pg_catalog.=) $1'
        ' AND ($2 IS NULL OR g.privilege OPERATOR(pg_catalog.=) $2)'
        ' AND ($3 IS NULL OR g.topic OPERATOR(pg_catalog.=) $3)'
        ' AND ($4 IS NULL OR g.consumer OPERATOR(pg_catalog.=) $4)', nsp)
        USING idem_outbox_revoke.role, idem_outbox_revoke.privilege, idem_outbox_revoke.topic, idem_outbox_revoke.consumer;
    GET DIAGNOSTICS n = ROW_COUNT;
    EXECUTE pg_catalog.format('SELECT EXISTS (SELECT FROM %I.idem_outbox_grants g WHERE g.role OPERATOR(pg_catalog.=) $1)', nsp)
        INTO left_ USING idem_outbox_revoke.role;
    IF NOT left_ THEN
        EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %I.idem_outbox, %I.idem_outbox_aggregates, %I.idem_outbox_subscriptions, %I.idem_outbox_runs FROM %s',
                                  nsp, nsp, nsp, nsp, idem_outbox_revoke.role);
        EXECUTE pg_catalog.format('REVOKE ALL ON SEQUENCE %I.idem_outbox_position_seq FROM %s', nsp, idem_outbox_revoke.role);
    END IF;
    RETURN n;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_outbox_revoke(pg_catalog.regrole, pg_catalog.text, pg_catalog.text, pg_catalog.text) IS
    'Take back idem_outbox_grant grants of role (NULL privilege, topic or consumer: any); the table privileges go with the last; returns how many were removed';

REVOKE ALL ON FUNCTION @extschema@.idem_outbox_revoke(pg_catalog.regrole, pg_catalog.text, pg_catalog.text, pg_catalog.text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION @extschema@.idem_publish(
    topic pg_catalog.text,
    payload pg_catalog.jsonb,
    key pg_catalog.text DEFAULT NULL,
    aggregate pg_catalog.text DEFAULT NULL,
    headers pg_catalog.jsonb DEFAULT NULL,
    scope pg_catalog.text DEFAULT NULL,
    type pg_catalog.text DEFAULT NULL,
    seq pg_catalog.int4 DEFAULT 0)
RETURNS pg_catalog.uuid
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
AS $$
DECLARE
    top pg_catalog.xid8;
    c_scope pg_catalog.text := idem_publish.scope;
    c_key pg_catalog.text := idem_publish.key;
    found_scope pg_catalog.text;
    mine pg_catalog.bool;
    nclaims pg_catalog.int4 := 0;
    setting pg_catalog.text;
    span pg_catalog.interval;
    lo pg_catalog.timestamptz;
    hi pg_catalog.timestamptz;
    msg_id pg_catalog.uuid;
    how pg_catalog.text;
    existing pg_catalog.xid8;
    pos_ pg_catalog.int8;
    subscribed pg_catalog.bool;
BEGIN
    -- Arguments, in order; the detailed checks only when one fails (one
    -- expression on the usual path).
    IF idem_publish.topic IS NULL
       OR pg_catalog.octet_length(idem_publish.topic) OPERATOR(pg_catalog.<) 1
       OR pg_catalog.octet_length(idem_publish.topic) OPERATOR(pg_catalog.>) 128
       OR pg_catalog.octet_length(c_key) OPERATOR(pg_catalog.<) 1
       OR pg_catalog.octet_length(c_key) OPERATOR(pg_catalog.>) 1024
       OR pg_catalog.octet_length(idem_publish.aggregate) OPERATOR(pg_catalog.<) 1
       OR pg_catalog.octet_length(idem_publish.aggregate) OPERATOR(pg_catalog.>) 1024
       OR pg_catalog.jsonb_typeof(idem_publish.headers) OPERATOR(pg_catalog.<>) 'object'
       OR pg_catalog.octet_length(c_scope) OPERATOR(pg_catalog.>) 128
       OR (c_scope IS NOT NULL AND c_key IS NULL)
       OR idem_publish.seq IS NULL OR idem_publish.seq OPERATOR(pg_catalog.<) 0
       OR pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        IF idem_publish.topic IS NULL THEN
            RAISE EXCEPTION 'idem_publish: topic must not be null' USING ERRCODE = '22004';
        END IF;
        IF pg_catalog.octet_length(idem_publish.topic) OPERATOR(pg_catalog.=) 0 THEN
            RAISE EXCEPTION 'idem_publish: topic must not be empty' USING ERRCODE = '22023';
        END IF;
        IF pg_catalog.octet_length(idem_publish.topic) OPERATOR(pg_catalog.>) 128 THEN
            RAISE EXCEPTION 'idem_publish: topic is too long'
                USING ERRCODE = '22001',
                      DETAIL = pg_catalog.format('The topic is %s bytes; the limit is 128 bytes.', pg_catalog.octet_length(idem_publish.topic));
        END IF;
        IF c_key IS NOT NULL THEN
            IF pg_catalog.octet_length(c_key) OPERATOR(pg_catalog.=) 0 THEN
                RAISE EXCEPTION 'idem_publish: key must not be empty' USING ERRCODE = '22023';
            END IF;
            IF pg_catalog.octet_length(c_key) OPERATOR(pg_catalog.>) 1024 THEN
                RAISE EXCEPTION 'idem_publish: key is too long'
                    USING ERRCODE = '22001',
                          DETAIL = pg_catalog.format('The key is %s bytes; the limit is 1024 bytes.', pg_catalog.octet_length(c_key)),
                          HINT = 'Hash long natural keys, for example with sha256(), and use the digest as the key.';
            END IF;
        END IF;
        IF idem_publish.aggregate IS NOT NULL THEN
            IF pg_catalog.octet_length(idem_publish.aggregate) OPERATOR(pg_catalog.=) 0 THEN
                RAISE EXCEPTION 'idem_publish: aggregate must not be empty'
                    USING ERRCODE = '22023', HINT = 'Pass NULL for a message without an aggregate.';
            END IF;
            IF pg_catalog.octet_length(idem_publish.aggregate) OPERATOR(pg_catalog.>) 1024 THEN
                RAISE EXCEPTION 'idem_publish: aggregate is too long'
                    USING ERRCODE = '22001',
                          DETAIL = pg_catalog.format('The aggregate is %s bytes; the limit is 1024 bytes.', pg_catalog.octet_length(idem_publish.aggregate));
            END IF;
        END IF;
        IF idem_publish.headers IS NOT NULL
           AND pg_catalog.jsonb_typeof(idem_publish.headers) OPERATOR(pg_catalog.<>) 'object' THEN
            RAISE EXCEPTION 'idem_publish: headers must be a JSON object'
                USING ERRCODE = '22023',
                      DETAIL = pg_catalog.format('The headers given are a JSON %s.', pg_catalog.jsonb_typeof(idem_publish.headers));
        END IF;
        IF c_scope IS NOT NULL THEN
            IF pg_catalog.octet_length(c_scope) OPERATOR(pg_catalog.>) 128 THEN
                RAISE EXCEPTION 'idem_publish: scope is too long'
                    USING ERRCODE = '22001',
                          DETAIL = pg_catalog.format('The scope is %s bytes; the limit is 128 bytes.', pg_catalog.octet_length(c_scope));
            END IF;
            IF c_key IS NULL THEN
                RAISE EXCEPTION 'idem_publish: key must not be null when scope is given'
                    USING ERRCODE = '22004',
                          HINT = 'Name the claim with scope => and key =>, as given to idem_claim.';
            END IF;
        END IF;
        IF idem_publish.seq IS NULL THEN
            RAISE EXCEPTION 'idem_publish: seq must not be null' USING ERRCODE = '22004';
        END IF;
        IF idem_publish.seq OPERATOR(pg_catalog.<) 0 THEN
            RAISE EXCEPTION 'idem_publish: seq must not be negative'
                USING ERRCODE = '22023', DETAIL = pg_catalog.format('The seq given was %s.', idem_publish.seq);
        END IF;
        IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
            RAISE EXCEPTION 'cannot execute idem_publish() in a read-only transaction' USING ERRCODE = '25006';
        END IF;

    END IF;

    -- The claim the message belongs to.
    IF c_scope IS NOT NULL THEN
        -- Named: it must be a record this transaction wrote (see
        -- idem_xact_claims for how that is told).
        top := pg_catalog.pg_current_xact_id_if_assigned();
        IF top IS NOT NULL THEN
            SELECT CASE WHEN r2.updated_at OPERATOR(pg_catalog.<) pg_catalog.now()
                          OR NOT r2.status OPERATOR(pg_catalog.=) ANY ('{claimed,in_progress,completed}'::pg_catalog.text[])
                        THEN false
                        WHEN r2.xmin OPERATOR(pg_catalog.=) pg_catalog.xid(top) THEN true
                        ELSE COALESCE(pg_catalog.pg_xact_status(((top)::pg_catalog.text::pg_catalog.int8
                                OPERATOR(pg_catalog.+) ((((r2.xmin)::pg_catalog.text::pg_catalog.int8
                                    OPERATOR(pg_catalog.-) ((top)::pg_catalog.text::pg_catalog.int8 OPERATOR(pg_catalog.%) 4294967296))
                                   OPERATOR(pg_catalog.+) 6442450944) OPERATOR(pg_catalog.%) 4294967296)
                                OPERATOR(pg_catalog.-) 2147483648)::pg_catalog.text::pg_catalog.xid8)
                                      OPERATOR(pg_catalog.=) 'in progress', false) END
              INTO mine
              FROM @extschema@.idem_records r2
             WHERE r2.scope OPERATOR(pg_catalog.=) (c_scope COLLATE pg_catalog."C")
               AND r2.key OPERATOR(pg_catalog.=) (c_key COLLATE pg_catalog."C");
        END IF;
        IF mine IS NULL OR NOT mine THEN
            RAISE EXCEPTION 'idem_publish: this transaction holds no claim of the key'
                USING ERRCODE = 'ID020',
                      DETAIL = pg_catalog.format('Key "%s" in scope "%s" was not claimed by this transaction: idem_claim returned false for it, or was not called.', c_key, c_scope),
                      HINT = 'Publish only after idem_claim() returned true, in the same transaction; a duplicate has published its message already.';
        END IF;
    ELSIF c_key IS NULL THEN
        -- Found: the one claim of this transaction, as idem_xact_claims()
        -- finds it (the same query, inline: a call costs as much again).
        top := pg_catalog.pg_current_xact_id_if_assigned();
        IF top IS NOT NULL THEN
            setting := pg_catalog.current_setting('idempotency.default_ttl', true);
            IF setting IS NULL OR setting OPERATOR(pg_catalog.=) '' THEN
                span := '7 days';
            ELSIF pg_catalog.lower(setting) OPERATOR(pg_catalog.=) 'infinity' THEN
                lo := 'infinity';
                hi := 'infinity';
            ELSE
                span := setting::pg_catalog.interval;
            END IF;
            IF lo IS NULL THEN
                lo := pg_catalog.now() OPERATOR(pg_catalog.+) span;
                hi := pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) span;
            END IF;
            SELECT pg_catalog.count(*)::pg_catalog.int4, pg_catalog.min(x.scope), pg_catalog.min(x.key)
              INTO nclaims, found_scope, c_key
              FROM (SELECT r.scope, r.key
                      FROM @extschema@.idem_records r
                     WHERE r.expires_at OPERATOR(pg_catalog.>=) lo
                       AND r.expires_at OPERATOR(pg_catalog.<=) hi
                       AND CASE WHEN r.updated_at OPERATOR(pg_catalog.<) pg_catalog.now()
                                  OR NOT r.status OPERATOR(pg_catalog.=) ANY ('{claimed,in_progress,completed}'::pg_catalog.text[])
                                THEN false
                                WHEN r.xmin OPERATOR(pg_catalog.=) pg_catalog.xid(top) THEN true
                                ELSE COALESCE(pg_catalog.pg_xact_status(((top)::pg_catalog.text::pg_catalog.int8
                                OPERATOR(pg_catalog.+) ((((r.xmin)::pg_catalog.text::pg_catalog.int8
                                    OPERATOR(pg_catalog.-) ((top)::pg_catalog.text::pg_catalog.int8 OPERATOR(pg_catalog.%) 4294967296))
                                   OPERATOR(pg_catalog.+) 6442450944) OPERATOR(pg_catalog.%) 4294967296)
                                OPERATOR(pg_catalog.-) 2147483648)::pg_catalog.text::pg_catalog.xid8)
                                              OPERATOR(pg_catalog.=) 'in progress', false) END
                     LIMIT 2) x;
        END IF;
        IF nclaims OPERATOR(pg_catalog.=) 0 THEN
            RAISE EXCEPTION 'idem_publish: this transaction holds no claim'
                USING ERRCODE = 'ID020',
                      DETAIL = 'No record claimed with the default ttl was written by this transaction: idem_claim returned false, or was not called.',
                      HINT = 'Publish only after idem_claim() returned true, in the same transaction; for a claim with a ttl of its own, name it with scope => and key =>; without a claim, pass key =>.';
        END IF;
        IF nclaims OPERATOR(pg_catalog.>) 1 THEN
            RAISE EXCEPTION 'idem_publish: this transaction holds several claims'
                USING ERRCODE = 'ID020',
                      DETAIL = 'The message id cannot be derived from one claim.',
                      HINT = 'Name the claim the message belongs to with scope => and key =>.';
        END IF;
        c_scope := found_scope;
    END IF;

    -- idem_outbox_id(topic, c_key, c_scope, seq), written out: a call of
    -- one of our functions by name could be made ambiguous by an overload
    -- with more (defaulted) arguments in our schema (docs/security.md).
    msg_id := pg_catalog.overlay(pg_catalog.overlay(pg_catalog.encode(pg_catalog.substr(pg_catalog.sha256(
                  pg_catalog.convert_to(
                      'idempotency.outbox.v1'
                      OPERATOR(pg_catalog.||) COALESCE(':claim:' OPERATOR(pg_catalog.||) pg_catalog.length(c_scope)
                                                       OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) c_scope, ':key')
                      OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) pg_catalog.length(c_key)
                      OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) c_key
                      OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) pg_catalog.length(idem_publish.topic)
                      OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) idem_publish.topic
                      OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) idem_publish.seq,
                      'UTF8')), 1, 16), 'hex'),
                  '8', 13, 1), '8', 17, 1)::pg_catalog.uuid;

    -- The aggregate's lock: its row in idem_outbox_aggregates, taken (and
    -- written) before the position is drawn and held until this
    -- transaction ends, so that the messages of one aggregate take their
    -- positions in commit order.  A row lock on our own table: only roles
    -- that may publish to the topic can take it (docs/security.md).  A
    -- topic relayed by logical messages only writes no row, and needs no
    -- order in the table.  Then the message; the topic's relay comes back
    -- with the row.
    IF idem_publish.aggregate IS NOT NULL THEN
        INSERT INTO @extschema@.idem_outbox_aggregates AS a (topic, aggregate)
        SELECT idem_publish.topic, idem_publish.aggregate
         WHERE NOT EXISTS (SELECT FROM @extschema@.idem_outbox_topics t
                            WHERE t.topic OPERATOR(pg_catalog.=) (idem_publish.topic COLLATE pg_catalog."C")
                              AND t.relay OPERATOR(pg_catalog.=) 'message')
        ON CONFLICT ON CONSTRAINT idem_outbox_aggregates_pkey DO UPDATE
           SET published = a.published OPERATOR(pg_catalog.+) 1;
    END IF;
    INSERT INTO @extschema@.idem_outbox AS o
           (id, topic, aggregate, type, payload, headers, scope, key, seq, xact_id, created_at)
    SELECT msg_id, idem_publish.topic, idem_publish.aggregate, idem_publish.type,
           idem_publish.payload, idem_publish.headers, c_scope, c_key, idem_publish.seq,
           pg_catalog.pg_current_xact_id(), pg_catalog.now()
     WHERE NOT EXISTS (SELECT FROM @extschema@.idem_outbox_topics t
                        WHERE t.topic OPERATOR(pg_catalog.=) (idem_publish.topic COLLATE pg_catalog."C")
                          AND t.relay OPERATOR(pg_catalog.=) 'message')
    ON CONFLICT (id) DO NOTHING
    RETURNING o.position,
              (SELECT t.relay FROM @extschema@.idem_outbox_topics t
                WHERE t.topic OPERATOR(pg_catalog.=) o.topic),
              EXISTS (SELECT FROM @extschema@.idem_outbox_subscriptions s
                       WHERE s.topic OPERATOR(pg_catalog.=) o.topic)
         INTO pos_, how, subscribed;
    IF FOUND THEN
        IF subscribed THEN
            -- The pull API: every group of the topic gets a run of this
            -- message's aggregate (from this message: whatever came before
            -- is acknowledged or predates the group), or of the message
            -- alone; a parked run (drained) is freed.  Under the aggregate's
            -- lock, so no fetch parks the run past this message.
            INSERT INTO @extschema@.idem_outbox_runs AS r (consumer, topic, aggregate, lone, acked, available_at)
            SELECT s.consumer, idem_publish.topic, idem_publish.aggregate,
                   CASE WHEN idem_publish.aggregate IS NULL THEN msg_id END,
                   pos_ OPERATOR(pg_catalog.-) 1, pg_catalog.now()
              FROM @extschema@.idem_outbox_subscriptions s
             WHERE s.topic OPERATOR(pg_catalog.=) (idem_publish.topic COLLATE pg_catalog."C")
            ON CONFLICT ON CONSTRAINT idem_outbox_runs_key DO NOTHING;
            IF idem_publish.aggregate IS NOT NULL THEN
                UPDATE @extschema@.idem_outbox_runs r
                   SET available_at = pg_catalog.now()
                 WHERE r.topic OPERATOR(pg_catalog.=) (idem_publish.topic COLLATE pg_catalog."C")
                   AND r.aggregate OPERATOR(pg_catalog.=) (idem_publish.aggregate COLLATE pg_catalog."C")
                   AND r.lone IS NULL
                   AND r.available_at OPERATOR(pg_catalog.=) 'infinity'::pg_catalog.timestamptz;
            END IF;
        END IF;
        IF how IS NULL OR how OPERATOR(pg_catalog.=) 'table' THEN
            RETURN msg_id;
        END IF;
    ELSE
        SELECT t.relay INTO how FROM @extschema@.idem_outbox_topics t
         WHERE t.topic OPERATOR(pg_catalog.=) (idem_publish.topic COLLATE pg_catalog."C");
        IF how IS NULL OR how OPERATOR(pg_catalog.<>) 'message' THEN
            -- A message with this id is in the table.
            SELECT o.xact_id INTO existing FROM @extschema@.idem_outbox o
             WHERE o.id OPERATOR(pg_catalog.=) msg_id;
            IF existing OPERATOR(pg_catalog.=) pg_catalog.pg_current_xact_id() THEN
                RAISE EXCEPTION 'idem_publish: message already published by this transaction'
                    USING ERRCODE = 'ID021',
                          DETAIL = pg_catalog.format('Message %s (topic "%s", seq %s) was published earlier in this transaction.', msg_id, idem_publish.topic, idem_publish.seq),
                          HINT = 'Give each message of one claim and topic its own seq => 0, 1, 2, ...';
            END IF;
            -- Published by an earlier transaction: a duplicate, nothing written.
            RETURN NULL;
        END IF;
    END IF;

    -- Relayed (also) by a logical decoding message.
    IF pg_catalog.current_setting('wal_level') OPERATOR(pg_catalog.<>) 'logical' THEN
        RAISE EXCEPTION 'idem_publish: topic "%" relays through logical decoding messages, which need wal_level = logical', idem_publish.topic
            USING ERRCODE = '55000',
                  DETAIL = pg_catalog.format('wal_level is %s; the message would be decoded by nobody.', pg_catalog.current_setting('wal_level')),
                  HINT = 'Set wal_level = logical and restart, or relay the topic through the table: SELECT idem_outbox_topic(topic, relay => ''table'').';
    END IF;
    PERFORM pg_catalog.pg_logical_emit_message(true, 'idempotency.outbox',
        pg_catalog.jsonb_build_object(
            'id', msg_id, 'topic', idem_publish.topic, 'aggregate', idem_publish.aggregate,
            'type', idem_publish.type, 'headers', idem_publish.headers,
            'payload', idem_publish.payload, 'scope', c_scope, 'key', c_key,
            'seq', idem_publish.seq)::pg_catalog.text);
    RETURN msg_id;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_publish(pg_catalog.text, pg_catalog.jsonb, pg_catalog.text, pg_catalog.text, pg_catalog.jsonb, pg_catalog.text, pg_catalog.text, pg_catalog.int4) IS
    'Publish a message in the current transaction (it exists if and only if the transaction commits), bound to this transaction''s claim or to an explicit key; returns its id, NULL when an earlier transaction published it';

CREATE OR REPLACE FUNCTION @extschema@.idem_outbox_topic(
    topic pg_catalog.text,
    relay pg_catalog.text DEFAULT NULL,
    retention pg_catalog.interval DEFAULT NULL)
RETURNS pg_catalog.void
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
AS $$
BEGIN
    IF idem_outbox_topic.topic IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_topic: topic must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.octet_length(idem_outbox_topic.topic) OPERATOR(pg_catalog.=) 0 THEN
        RAISE EXCEPTION 'idem_outbox_topic: topic must not be empty' USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.octet_length(idem_outbox_topic.topic) OPERATOR(pg_catalog.>) 128 THEN
        RAISE EXCEPTION 'idem_outbox_topic: topic is too long'
            USING ERRCODE = '22001',
                  DETAIL = pg_catalog.format('The topic is %s bytes; the limit is 128 bytes.', pg_catalog.octet_length(idem_outbox_topic.topic));
    END IF;
    IF idem_outbox_topic.relay IS NOT NULL
       AND NOT idem_outbox_topic.relay OPERATOR(pg_catalog.=) ANY ('{table,message,both}'::pg_catalog.text[]) THEN
        RAISE EXCEPTION 'idem_outbox_topic: unknown relay "%"', idem_outbox_topic.relay
            USING ERRCODE = '22023',
                  DETAIL = 'The relay is ''table'' (the table idem_outbox), ''message'' (a logical decoding message) or ''both''.';
    END IF;
    IF idem_outbox_topic.retention OPERATOR(pg_catalog.<) '0'::pg_catalog.interval THEN
        RAISE EXCEPTION 'idem_outbox_topic: retention must not be negative'
            USING ERRCODE = '22023', DETAIL = pg_catalog.format('The retention given was %s.', idem_outbox_topic.retention);
    END IF;
    IF idem_outbox_topic.retention OPERATOR(pg_catalog.>) '100 years'::pg_catalog.interval THEN
        RAISE EXCEPTION 'idem_outbox_topic: retention must be at most 100 years'
            USING ERRCODE = '22023', DETAIL = pg_catalog.format('The retention given was %s.', idem_outbox_topic.retention),
                  HINT = 'A retention is finite: acknowledged messages are deleted once it has passed.';
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idem_outbox_topic() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    INSERT INTO @extschema@.idem_outbox_topics AS t (topic, relay, retention, updated_at)
    VALUES (idem_outbox_topic.topic,
            COALESCE(idem_outbox_topic.relay, 'table'),
            COALESCE(idem_outbox_topic.retention, '7 days'::pg_catalog.interval),
            pg_catalog.now())
    ON CONFLICT ON CONSTRAINT idem_outbox_topics_pkey DO UPDATE
       SET relay = COALESCE(idem_outbox_topic.relay, t.relay),
           retention = COALESCE(idem_outbox_topic.retention, t.retention),
           updated_at = pg_catalog.now();
END
$$;

COMMENT ON FUNCTION @extschema@.idem_outbox_topic(pg_catalog.text, pg_catalog.text, pg_catalog.interval) IS
    'Set the relay (table, message or both) and the retention of acknowledged messages of a topic; NULL keeps the current setting';

REVOKE ALL ON FUNCTION @extschema@.idem_outbox_topic(pg_catalog.text, pg_catalog.text, pg_catalog.interval) FROM PUBLIC;

CREATE OR REPLACE FUNCTION @extschema@.idem_outbox_subscribe(
    consumer pg_catalog.text,
    topic pg_catalog.text,
    from_start pg_catalog.bool DEFAULT false)
RETURNS pg_catalog.bool
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
AS $$
DECLARE
    h pg_catalog.xid8;
BEGIN
    IF idem_outbox_subscribe.consumer IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_subscribe: consumer must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.octet_length(idem_outbox_subscribe.consumer) OPERATOR(pg_catalog.=) 0 THEN
        RAISE EXCEPTION 'idem_outbox_subscribe: consumer must not be empty' USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.octet_length(idem_outbox_subscribe.consumer) OPERATOR(pg_catalog.>) 120 THEN
        RAISE EXCEPTION 'idem_outbox_subscribe: consumer is too long'
            USING ERRCODE = '22001',
                  DETAIL = pg_catalog.format('The consumer is %s bytes; the limit is 120 bytes.', pg_catalog.octet_length(idem_outbox_subscribe.consumer));
    END IF;
    IF idem_outbox_subscribe.topic IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_subscribe: topic must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.octet_length(idem_outbox_subscribe.topic) OPERATOR(pg_catalog.=) 0 THEN
        RAISE EXCEPTION 'idem_outbox_subscribe: topic must not be empty' USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.octet_length(idem_outbox_subscribe.topic) OPERATOR(pg_catalog.>) 128 THEN
        RAISE EXCEPTION 'idem_outbox_subscribe: topic is too long'
            USING ERRCODE = '22001',
                  DETAIL = pg_catalog.format('The topic is %s bytes; the limit is 128 bytes.', pg_catalog.octet_length(idem_outbox_subscribe.topic));
    END IF;
    IF idem_outbox_subscribe.from_start IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_subscribe: from_start must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idem_outbox_subscribe() in a read-only transaction' USING ERRCODE = '25006';
    END IF;

    -- From the start: a run for every aggregate (and every message
    -- without one) still in the table, from its first message.
    -- Otherwise none: idem_publish makes the group's runs from then on,
    -- each from the message that makes it.  The horizon is informational
    -- (the oldest transaction running at subscription).
    INSERT INTO @extschema@.idem_outbox_subscriptions AS s (consumer, topic, horizon, created_at)
    VALUES (idem_outbox_subscribe.consumer, idem_outbox_subscribe.topic,
            CASE WHEN idem_outbox_subscribe.from_start THEN '0'::pg_catalog.xid8
                 ELSE pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot()) END,
            pg_catalog.now())
    ON CONFLICT ON CONSTRAINT idem_outbox_subscriptions_pkey DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF idem_outbox_subscribe.from_start THEN
        INSERT INTO @extschema@.idem_outbox_runs (consumer, topic, aggregate, lone, acked, available_at)
        SELECT idem_outbox_subscribe.consumer, o.topic, o.aggregate,
               CASE WHEN o.aggregate IS NULL THEN o.id END,
               pg_catalog.min(o.position) OPERATOR(pg_catalog.-) 1, pg_catalog.min(o.created_at)
          FROM @extschema@.idem_outbox o
         WHERE o.topic OPERATOR(pg_catalog.=) (idem_outbox_subscribe.topic COLLATE pg_catalog."C")
         GROUP BY o.topic, o.aggregate, CASE WHEN o.aggregate IS NULL THEN o.id END
        ON CONFLICT ON CONSTRAINT idem_outbox_runs_key DO NOTHING;
    END IF;
    RETURN true;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_outbox_subscribe(pg_catalog.text, pg_catalog.text, pg_catalog.bool) IS
    'Subscribe consumer group consumer to topic: the messages published from now on, or every message still kept (from_start); false when it was subscribed already';

CREATE OR REPLACE FUNCTION @extschema@.idem_outbox_unsubscribe(
    consumer pg_catalog.text,
    topic pg_catalog.text)
RETURNS pg_catalog.bool
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
AS $$
BEGIN
    IF idem_outbox_unsubscribe.consumer IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_unsubscribe: consumer must not be null' USING ERRCODE = '22004';
    END IF;
    IF idem_outbox_unsubscribe.topic IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_unsubscribe: topic must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idem_outbox_unsubscribe() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    DELETE FROM @extschema@.idem_outbox_subscriptions s
     WHERE s.consumer OPERATOR(pg_catalog.=) (idem_outbox_unsubscribe.consumer COLLATE pg_catalog."C")
       AND s.topic OPERATOR(pg_catalog.=) (idem_outbox_unsubscribe.topic COLLATE pg_catalog."C");
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    DELETE FROM @extschema@.idem_outbox_runs r
     WHERE r.consumer OPERATOR(pg_catalog.=) (idem_outbox_unsubscribe.consumer COLLATE pg_catalog."C")
       AND r.topic OPERATOR(pg_catalog.=) (idem_outbox_unsubscribe.topic COLLATE pg_catalog."C");
    RETURN true;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_outbox_unsubscribe(pg_catalog.text, pg_catalog.text) IS
    'End the subscription of consumer group consumer to topic and forget its progress (its messages no longer hold back the purge); false when there was none';

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
    taken pg_catalog.int4 := 0;
    ids pg_catalog.uuid[] := '{}';
    tids pg_catalog.tid[] := '{}';
    gtids pg_catalog.tid[];
    atts pg_catalog.int4[] := '{}';
    run pg_catalog.record;
    got pg_catalog.uuid[];
    pos pg_catalog.int8[];
    n pg_catalog.int4;
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
    IF idem_outbox_fetch.lease OPERATOR(pg_catalog.>) '1 day'::pg_catalog.interval THEN
        RAISE EXCEPTION 'idem_outbox_fetch: lease must be at most 1 day'
            USING ERRCODE = '22023', DETAIL = pg_catalog.format('The lease given was %s.', idem_outbox_fetch.lease),
                  HINT = 'A lease is finite so that the messages of a consumer that crashed come back; acknowledge in time, or fetch fewer messages at a time.';
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

    -- Free runs of the group, the longest free first (the index on
    -- (consumer, available_at, acked)), each locked FOR UPDATE SKIP LOCKED:
    -- the one lock that keeps concurrent fetches of a group off each
    -- other's runs.  Leased and parked runs are never read (their
    -- available_at is in the future), nor another group's.  From each, its
    -- next messages in position order, up to what is left of max; then the
    -- run is leased as a whole until until_.  A run with nothing to deliver
    -- is parked (or, if a publisher holds its aggregate, put back at the end
    -- of the line: clock_timestamp() is after now_, so this fetch does not
    -- see it again).  Work and locks: one run per iteration, and every
    -- iteration but the drained ones hands messages out.
    LOOP
        SELECT r.ctid AS tid, r.topic, r.aggregate, r.lone, r.acked, r.acked_ahead, r.handed_upto, r.attempts
          INTO run
          FROM @extschema@.idem_outbox_runs r
         WHERE r.consumer OPERATOR(pg_catalog.=) (idem_outbox_fetch.consumer COLLATE pg_catalog."C")
           AND r.available_at OPERATOR(pg_catalog.<=) now_
         ORDER BY r.available_at, r.acked
         LIMIT 1
           FOR UPDATE SKIP LOCKED;
        EXIT WHEN NOT FOUND;
        IF run.lone IS NOT NULL THEN
            SELECT pg_catalog.array_agg(o.id), pg_catalog.array_agg(o.position), pg_catalog.array_agg(o.ctid)
              INTO got, pos, gtids
              FROM @extschema@.idem_outbox o
             WHERE o.id OPERATOR(pg_catalog.=) run.lone;
        ELSE
            SELECT pg_catalog.array_agg(x.id ORDER BY x.position), pg_catalog.array_agg(x.position ORDER BY x.position),
                   pg_catalog.array_agg(x.ctid ORDER BY x.position)
              INTO got, pos, gtids
              FROM (SELECT o.id, o.position, o.ctid
                      FROM @extschema@.idem_outbox o
                     WHERE o.topic OPERATOR(pg_catalog.=) run.topic
                       AND o.aggregate OPERATOR(pg_catalog.=) run.aggregate
                       AND o.position OPERATOR(pg_catalog.>) run.acked
                       AND NOT COALESCE(o.position OPERATOR(pg_catalog.=) ANY (run.acked_ahead), false)
                     ORDER BY o.position
                     LIMIT idem_outbox_fetch.max OPERATOR(pg_catalog.-) taken) x;
        END IF;
        IF got IS NULL THEN
            IF run.lone IS NOT NULL THEN
                -- its message is gone (unsubscribed and purged meanwhile)
                DELETE FROM @extschema@.idem_outbox_runs r
                 WHERE r.ctid OPERATOR(pg_catalog.=) run.tid;
            ELSIF EXISTS (SELECT FROM @extschema@.idem_outbox_aggregates a
                           WHERE a.topic OPERATOR(pg_catalog.=) run.topic
                             AND a.aggregate OPERATOR(pg_catalog.=) run.aggregate
                             FOR SHARE SKIP LOCKED)
                  AND NOT EXISTS (SELECT FROM @extschema@.idem_outbox o
                                   WHERE o.topic OPERATOR(pg_catalog.=) run.topic
                                     AND o.aggregate OPERATOR(pg_catalog.=) run.aggregate
                                     AND o.position OPERATOR(pg_catalog.>) run.acked
                                     AND NOT COALESCE(o.position OPERATOR(pg_catalog.=) ANY (run.acked_ahead), false)) THEN
                -- Drained, and no publisher of the aggregate is at work
                -- (under its lock, a new snapshot): park it; the next
                -- idem_publish for the aggregate frees it.
                UPDATE @extschema@.idem_outbox_runs r
                   SET available_at = 'infinity', acked_ahead = NULL, leased_upto = NULL
                 WHERE r.ctid OPERATOR(pg_catalog.=) run.tid;
            ELSE
                UPDATE @extschema@.idem_outbox_runs r
                   SET available_at = pg_catalog.clock_timestamp()
                 WHERE r.ctid OPERATOR(pg_catalog.=) run.tid;
            END IF;
            CONTINUE;
        END IF;
        n := pg_catalog.cardinality(got);
        -- attempts: one more than the run's for what an earlier lease
        -- handed out already, 1 for the rest
        atts := atts OPERATOR(pg_catalog.||) ARRAY(
            SELECT CASE WHEN p.p OPERATOR(pg_catalog.<=) run.handed_upto
                        THEN run.attempts OPERATOR(pg_catalog.+) 1 ELSE 1 END
              FROM pg_catalog.unnest(pos) WITH ORDINALITY AS p(p, k) ORDER BY p.k);
        ids := ids OPERATOR(pg_catalog.||) got;
        tids := tids OPERATOR(pg_catalog.||) gtids;
        UPDATE @extschema@.idem_outbox_runs r
           SET available_at = until_,
               leased_upto = pos[n],
               attempts = CASE WHEN pos[1] OPERATOR(pg_catalog.<=) r.handed_upto
                               THEN r.attempts OPERATOR(pg_catalog.+) 1 ELSE 1 END,
               handed_upto = GREATEST(r.handed_upto, pos[n])
         WHERE r.ctid OPERATOR(pg_catalog.=) run.tid;
        taken := taken OPERATOR(pg_catalog.+) n;
        EXIT WHEN taken OPERATOR(pg_catalog.>=) idem_outbox_fetch.max;
    END LOOP;

    -- The messages handed out, read again by their tuple ids (a message is
    -- never updated, and one not acknowledged is never deleted).
    RETURN QUERY
        SELECT o.id, o.topic::pg_catalog.text, o.aggregate::pg_catalog.text, o.type, o.payload,
               o.headers, o.created_at, u.att
          FROM ROWS FROM (pg_catalog.unnest(tids), pg_catalog.unnest(ids), pg_catalog.unnest(atts)) AS u(tid, id, att)
          JOIN @extschema@.idem_outbox o
            ON o.ctid OPERATOR(pg_catalog.=) u.tid AND o.id OPERATOR(pg_catalog.=) u.id
         ORDER BY o.position;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_outbox_fetch(pg_catalog.text, pg_catalog.int4, pg_catalog.interval) IS
    'Lease up to max unacknowledged messages of consumer group consumer''s topics for lease, in commit order per aggregate; a message whose lease runs out is handed out again';

CREATE OR REPLACE FUNCTION @extschema@.idem_outbox_ack(
    consumer pg_catalog.text,
    id pg_catalog.uuid)
RETURNS pg_catalog.bool
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
AS $$
DECLARE
    m pg_catalog.record;
    r pg_catalog.record;
    mine pg_catalog.int8[];
    ahead pg_catalog.int8[];
    seq pg_catalog.int8[];
    new_acked pg_catalog.int8;
    k pg_catalog.int4;
    done pg_catalog.int4 := 0;
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
    -- Per run (in a fixed order, so that two batches cannot deadlock): lock
    -- the group's run, note the positions it had not acknowledged, then
    -- move its position over the run's next messages while they are
    -- acknowledged; a run whose lease is all acknowledged is free again.
    -- Work: the messages given, and per run one range of the index on
    -- (topic, aggregate, position) no longer than what is acknowledged
    -- ahead of its position.
    FOR m IN
        SELECT o.topic, o.aggregate, CASE WHEN o.aggregate IS NULL THEN o.id END AS lone,
               pg_catalog.array_agg(DISTINCT o.position) AS ps
          FROM @extschema@.idem_outbox o
         WHERE o.id OPERATOR(pg_catalog.=) ANY (ARRAY[idem_outbox_ack.id])
         GROUP BY 1, 2, 3
         ORDER BY 1, 2, 3
    LOOP
        IF NOT EXISTS (SELECT FROM @extschema@.idem_outbox_subscriptions s
                        WHERE s.consumer OPERATOR(pg_catalog.=) (idem_outbox_ack.consumer COLLATE pg_catalog."C")
                          AND s.topic OPERATOR(pg_catalog.=) m.topic) THEN
            RAISE EXCEPTION 'idem_outbox_ack: consumer "%" is not subscribed to topic "%"', idem_outbox_ack.consumer, m.topic
                USING ERRCODE = '42704',
                      DETAIL = pg_catalog.format('Message %s is of topic "%s".', idem_outbox_ack.id, m.topic),
                      HINT = 'Acknowledge with the consumer name given to idem_outbox_fetch.';
        END IF;
        IF m.lone IS NULL THEN
            SELECT rr.ctid AS tid, rr.acked, rr.acked_ahead INTO r
              FROM @extschema@.idem_outbox_runs rr
             WHERE rr.topic OPERATOR(pg_catalog.=) m.topic
               AND rr.aggregate OPERATOR(pg_catalog.=) m.aggregate AND rr.lone IS NULL
               AND rr.consumer OPERATOR(pg_catalog.=) (idem_outbox_ack.consumer COLLATE pg_catalog."C")
               FOR UPDATE;
        ELSE
            SELECT rr.ctid AS tid, rr.acked, rr.acked_ahead INTO r
              FROM @extschema@.idem_outbox_runs rr
             WHERE rr.topic OPERATOR(pg_catalog.=) m.topic
               AND rr.aggregate IS NULL AND rr.lone OPERATOR(pg_catalog.=) m.lone
               AND rr.consumer OPERATOR(pg_catalog.=) (idem_outbox_ack.consumer COLLATE pg_catalog."C")
               FOR UPDATE;
        END IF;
        -- no run: acknowledged already, or published before the subscription
        CONTINUE WHEN NOT FOUND;
        IF m.lone IS NOT NULL THEN
            DELETE FROM @extschema@.idem_outbox_runs rr WHERE rr.ctid OPERATOR(pg_catalog.=) r.tid;
            done := done OPERATOR(pg_catalog.+) 1;
            CONTINUE;
        END IF;
        mine := ARRAY(SELECT p.p FROM pg_catalog.unnest(m.ps) AS p(p)
                       WHERE p.p OPERATOR(pg_catalog.>) r.acked
                         AND NOT COALESCE(p.p OPERATOR(pg_catalog.=) ANY (r.acked_ahead), false));
        CONTINUE WHEN pg_catalog.cardinality(mine) OPERATOR(pg_catalog.=) 0;
        done := done OPERATOR(pg_catalog.+) pg_catalog.cardinality(mine);
        ahead := COALESCE(r.acked_ahead, '{}'::pg_catalog.int8[]) OPERATOR(pg_catalog.||) mine;
        SELECT pg_catalog.array_agg(x.position ORDER BY x.position) INTO seq
          FROM (SELECT o.position FROM @extschema@.idem_outbox o
                 WHERE o.topic OPERATOR(pg_catalog.=) m.topic
                   AND o.aggregate OPERATOR(pg_catalog.=) m.aggregate
                   AND o.position OPERATOR(pg_catalog.>) r.acked
                 ORDER BY o.position
                 LIMIT pg_catalog.cardinality(ahead) OPERATOR(pg_catalog.+) 1) x;
        new_acked := r.acked;
        ahead := ARRAY(SELECT p.p FROM pg_catalog.unnest(ahead) AS p(p) ORDER BY p.p);
        IF seq[1:pg_catalog.cardinality(ahead)] OPERATOR(pg_catalog.=) ahead THEN
            -- the usual case: what is acknowledged is the run's next messages
            new_acked := seq[pg_catalog.cardinality(ahead)];
        ELSE
            FOR k IN 1 .. COALESCE(pg_catalog.cardinality(seq), 0) LOOP
                EXIT WHEN NOT seq[k] OPERATOR(pg_catalog.=) ANY (ahead);
                new_acked := seq[k];
            END LOOP;
        END IF;
        ahead := ARRAY(SELECT p.p FROM pg_catalog.unnest(ahead) AS p(p)
                        WHERE p.p OPERATOR(pg_catalog.>) new_acked ORDER BY p.p);
        UPDATE @extschema@.idem_outbox_runs rr
           SET acked = new_acked,
               acked_ahead = CASE WHEN pg_catalog.cardinality(ahead) OPERATOR(pg_catalog.=) 0 THEN NULL ELSE ahead END,
               available_at = CASE WHEN rr.available_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
                                        AND rr.available_at OPERATOR(pg_catalog.<) 'infinity'::pg_catalog.timestamptz
                                        AND new_acked OPERATOR(pg_catalog.>=) rr.leased_upto
                                   THEN pg_catalog.clock_timestamp() ELSE rr.available_at END,
               attempts = CASE WHEN new_acked OPERATOR(pg_catalog.>=) rr.handed_upto THEN 0 ELSE rr.attempts END
         WHERE rr.ctid OPERATOR(pg_catalog.=) r.tid;
    END LOOP;
    RETURN done OPERATOR(pg_catalog.>) 0;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_outbox_ack(pg_catalog.text, pg_catalog.uuid) IS
    'Acknowledge message id for consumer group consumer: it is not handed out to the group again; true when this call acknowledged it, false when it was already';

CREATE OR REPLACE FUNCTION @extschema@.idem_outbox_ack_many(
    consumer pg_catalog.text,
    ids pg_catalog.uuid[])
RETURNS pg_catalog.int4
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
AS $$
DECLARE
    m pg_catalog.record;
    r pg_catalog.record;
    mine pg_catalog.int8[];
    ahead pg_catalog.int8[];
    seq pg_catalog.int8[];
    new_acked pg_catalog.int8;
    k pg_catalog.int4;
    done pg_catalog.int4 := 0;
BEGIN
    IF idem_outbox_ack_many.consumer IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_ack_many: consumer must not be null' USING ERRCODE = '22004';
    END IF;
    IF idem_outbox_ack_many.ids IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_ack_many: ids must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idem_outbox_ack_many() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    -- Per run (in a fixed order, so that two batches cannot deadlock): lock
    -- the group's run, note the positions it had not acknowledged, then
    -- move its position over the run's next messages while they are
    -- acknowledged; a run whose lease is all acknowledged is free again.
    -- Work: the messages given, and per run one range of the index on
    -- (topic, aggregate, position) no longer than what is acknowledged
    -- ahead of its position.
    FOR m IN
        SELECT o.topic, o.aggregate, CASE WHEN o.aggregate IS NULL THEN o.id END AS lone,
               pg_catalog.array_agg(DISTINCT o.position) AS ps
          FROM @extschema@.idem_outbox o
         WHERE o.id OPERATOR(pg_catalog.=) ANY (idem_outbox_ack_many.ids)
         GROUP BY 1, 2, 3
         ORDER BY 1, 2, 3
    LOOP
        IF NOT EXISTS (SELECT FROM @extschema@.idem_outbox_subscriptions s
                        WHERE s.consumer OPERATOR(pg_catalog.=) (idem_outbox_ack_many.consumer COLLATE pg_catalog."C")
                          AND s.topic OPERATOR(pg_catalog.=) m.topic) THEN
            RAISE EXCEPTION 'idem_outbox_ack_many: consumer "%" is not subscribed to topic "%"', idem_outbox_ack_many.consumer, m.topic
                USING ERRCODE = '42704',
                      DETAIL = pg_catalog.format('A message given is of topic "%s".', m.topic),
                      HINT = 'Acknowledge with the consumer name given to idem_outbox_fetch.';
        END IF;
        IF m.lone IS NULL THEN
            SELECT rr.ctid AS tid, rr.acked, rr.acked_ahead INTO r
              FROM @extschema@.idem_outbox_runs rr
             WHERE rr.topic OPERATOR(pg_catalog.=) m.topic
               AND rr.aggregate OPERATOR(pg_catalog.=) m.aggregate AND rr.lone IS NULL
               AND rr.consumer OPERATOR(pg_catalog.=) (idem_outbox_ack_many.consumer COLLATE pg_catalog."C")
               FOR UPDATE;
        ELSE
            SELECT rr.ctid AS tid, rr.acked, rr.acked_ahead INTO r
              FROM @extschema@.idem_outbox_runs rr
             WHERE rr.topic OPERATOR(pg_catalog.=) m.topic
               AND rr.aggregate IS NULL AND rr.lone OPERATOR(pg_catalog.=) m.lone
               AND rr.consumer OPERATOR(pg_catalog.=) (idem_outbox_ack_many.consumer COLLATE pg_catalog."C")
               FOR UPDATE;
        END IF;
        -- no run: acknowledged already, or published before the subscription
        CONTINUE WHEN NOT FOUND;
        IF m.lone IS NOT NULL THEN
            DELETE FROM @extschema@.idem_outbox_runs rr WHERE rr.ctid OPERATOR(pg_catalog.=) r.tid;
            done := done OPERATOR(pg_catalog.+) 1;
            CONTINUE;
        END IF;
        mine := ARRAY(SELECT p.p FROM pg_catalog.unnest(m.ps) AS p(p)
                       WHERE p.p OPERATOR(pg_catalog.>) r.acked
                         AND NOT COALESCE(p.p OPERATOR(pg_catalog.=) ANY (r.acked_ahead), false));
        CONTINUE WHEN pg_catalog.cardinality(mine) OPERATOR(pg_catalog.=) 0;
        done := done OPERATOR(pg_catalog.+) pg_catalog.cardinality(mine);
        ahead := COALESCE(r.acked_ahead, '{}'::pg_catalog.int8[]) OPERATOR(pg_catalog.||) mine;
        SELECT pg_catalog.array_agg(x.position ORDER BY x.position) INTO seq
          FROM (SELECT o.position FROM @extschema@.idem_outbox o
                 WHERE o.topic OPERATOR(pg_catalog.=) m.topic
                   AND o.aggregate OPERATOR(pg_catalog.=) m.aggregate
                   AND o.position OPERATOR(pg_catalog.>) r.acked
                 ORDER BY o.position
                 LIMIT pg_catalog.cardinality(ahead) OPERATOR(pg_catalog.+) 1) x;
        new_acked := r.acked;
        ahead := ARRAY(SELECT p.p FROM pg_catalog.unnest(ahead) AS p(p) ORDER BY p.p);
        IF seq[1:pg_catalog.cardinality(ahead)] OPERATOR(pg_catalog.=) ahead THEN
            -- the usual case: what is acknowledged is the run's next messages
            new_acked := seq[pg_catalog.cardinality(ahead)];
        ELSE
            FOR k IN 1 .. COALESCE(pg_catalog.cardinality(seq), 0) LOOP
                EXIT WHEN NOT seq[k] OPERATOR(pg_catalog.=) ANY (ahead);
                new_acked := seq[k];
            END LOOP;
        END IF;
        ahead := ARRAY(SELECT p.p FROM pg_catalog.unnest(ahead) AS p(p)
                        WHERE p.p OPERATOR(pg_catalog.>) new_acked ORDER BY p.p);
        UPDATE @extschema@.idem_outbox_runs rr
           SET acked = new_acked,
               acked_ahead = CASE WHEN pg_catalog.cardinality(ahead) OPERATOR(pg_catalog.=) 0 THEN NULL ELSE ahead END,
               available_at = CASE WHEN rr.available_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
                                        AND rr.available_at OPERATOR(pg_catalog.<) 'infinity'::pg_catalog.timestamptz
                                        AND new_acked OPERATOR(pg_catalog.>=) rr.leased_upto
                                   THEN pg_catalog.clock_timestamp() ELSE rr.available_at END,
               attempts = CASE WHEN new_acked OPERATOR(pg_catalog.>=) rr.handed_upto THEN 0 ELSE rr.attempts END
         WHERE rr.ctid OPERATOR(pg_catalog.=) r.tid;
    END LOOP;
    RETURN done;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_outbox_ack_many(pg_catalog.text, pg_catalog.uuid[]) IS
    'Acknowledge messages ids (a fetched batch) for consumer group consumer, as idem_outbox_ack(consumer, id) each; returns how many this call acknowledged';

CREATE OR REPLACE FUNCTION @extschema@.idem_outbox_purge(batch_size pg_catalog.int4 DEFAULT 10000)
RETURNS pg_catalog.int8
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
AS $$
DECLARE
    hand pg_catalog.uuid;
    last_ pg_catalog.uuid;
    seen pg_catalog.int4;
    n pg_catalog.int8;
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
    SELECT h.last_id INTO hand FROM @extschema@.idem_outbox_purge_hand h FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO @extschema@.idem_outbox_purge_hand (one, last_id) VALUES (true, NULL)
        ON CONFLICT ON CONSTRAINT idem_outbox_purge_hand_pkey DO NOTHING;
    END IF;

    WITH cand AS (
        SELECT o.id, o.topic, o.aggregate, o.position, o.created_at
          FROM @extschema@.idem_outbox o
         WHERE hand IS NULL OR o.id OPERATOR(pg_catalog.>) hand
         ORDER BY o.id
         LIMIT idem_outbox_purge.batch_size
           FOR UPDATE SKIP LOCKED
    ), gone AS (
        DELETE FROM @extschema@.idem_outbox o
         USING cand c
         WHERE o.id OPERATOR(pg_catalog.=) c.id
           AND c.created_at OPERATOR(pg_catalog.<) (now_ OPERATOR(pg_catalog.-) COALESCE(
                   (SELECT t.retention FROM @extschema@.idem_outbox_topics t
                     WHERE t.topic OPERATOR(pg_catalog.=) c.topic), '7 days'::pg_catalog.interval))
           AND NOT EXISTS (
                   SELECT FROM @extschema@.idem_outbox_runs r
                    WHERE r.topic OPERATOR(pg_catalog.=) c.topic
                      AND r.aggregate OPERATOR(pg_catalog.=) c.aggregate
                      AND r.acked OPERATOR(pg_catalog.<) c.position
                      AND NOT COALESCE(c.position OPERATOR(pg_catalog.=) ANY (r.acked_ahead), false))
           AND NOT EXISTS (
                   SELECT FROM @extschema@.idem_outbox_runs r
                    WHERE c.aggregate IS NULL
                      AND r.topic OPERATOR(pg_catalog.=) c.topic
                      AND r.aggregate IS NULL
                      AND r.lone OPERATOR(pg_catalog.=) c.id)
        RETURNING 1
    )
    SELECT (SELECT pg_catalog.count(*) FROM gone), pg_catalog.count(*)::pg_catalog.int4,
           (pg_catalog.array_agg(c.id ORDER BY c.id DESC))[1]
      INTO n, seen, last_
      FROM cand c;
    UPDATE @extschema@.idem_outbox_purge_hand h
       SET last_id = CASE WHEN seen OPERATOR(pg_catalog.<) idem_outbox_purge.batch_size THEN NULL ELSE last_ END;
    RETURN n;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_outbox_purge(pg_catalog.int4) IS
    'Examine batch_size messages (going on from the previous call) and delete those older than their topic''s retention that every consumer group of their topic has acknowledged; returns the number removed';

CREATE OR REPLACE FUNCTION @extschema@.idem_grant(
    role pg_catalog.regrole,
    access pg_catalog.text DEFAULT 'write')
RETURNS pg_catalog.void
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp text := (SELECT n.nspname FROM pg_catalog.pg_extension e
                 JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace
                 WHERE e.extname OPERATOR(pg_catalog.=) 'idempotency');
BEGIN
    IF access IS DISTINCT FROM 'write' AND access IS DISTINCT FROM 'read' THEN
        RAISE EXCEPTION 'idem_grant: unknown access level "%"', access
            USING ERRCODE = '22023',
                  DETAIL = 'The access level is ''write'' (claims, leases, tokens, guarded tables) or ''read'' (idem_lookup, idem_await).',
                  HINT = 'Call idem_grant(role) or idem_grant(role, ''read'').';
    END IF;
    EXECUTE pg_catalog.format('GRANT USAGE ON SCHEMA %I TO %s', nsp, role);
    IF access OPERATOR(pg_catalog.=) 'read' THEN
        EXECUTE pg_catalog.format('GRANT SELECT ON TABLE %I.idem_records TO %s', nsp, role);
        RETURN;
    END IF;
    EXECUTE pg_catalog.format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE %I.idem_records TO %s', nsp, role);
    EXECUTE pg_catalog.format('GRANT USAGE ON SEQUENCE %I.idem_token_seq TO %s', nsp, role);
    EXECUTE pg_catalog.format('GRANT INSERT ON TABLE %I.idem_transition_log TO %s', nsp, role);
    EXECUTE pg_catalog.format('GRANT USAGE ON SEQUENCE %I.idem_transition_log_id_seq TO %s', nsp, role);
    -- The outbox is not part of 'write': publishing and consuming are
    -- granted per topic and consumer group with idem_outbox_grant.
END
$$;

COMMENT ON FUNCTION @extschema@.idem_grant(pg_catalog.regrole, pg_catalog.text) IS
    'Grant role what an application needs: ''write'' (default) for claims, leases, tokens and guarded tables with history, ''read'' for idem_lookup and idem_await';

CREATE OR REPLACE FUNCTION @extschema@.idem_revoke(role pg_catalog.regrole)
RETURNS pg_catalog.void
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp text := (SELECT n.nspname FROM pg_catalog.pg_extension e
                 JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace
                 WHERE e.extname OPERATOR(pg_catalog.=) 'idempotency');
BEGIN
    EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %I.idem_records FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON SEQUENCE %I.idem_token_seq FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %I.idem_transition_log FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON SEQUENCE %I.idem_transition_log_id_seq FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %I.idem_outbox FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON SEQUENCE %I.idem_outbox_position_seq FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %I.idem_outbox_subscriptions FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %I.idem_outbox_runs FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %I.idem_outbox_aggregates FROM %s', nsp, role);
    EXECUTE pg_catalog.format('DELETE FROM %I.idem_outbox_grants g WHERE g.role OPERATOR(pg_catalog.=) $1', nsp) USING role;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_revoke(pg_catalog.regrole) IS
    'Take back what idem_grant and idem_outbox_grant gave role (the schema''s USAGE stays: other objects may need it)';

REVOKE ALL ON FUNCTION @extschema@.idem_grant(pg_catalog.regrole, pg_catalog.text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_revoke(pg_catalog.regrole) FROM PUBLIC;

