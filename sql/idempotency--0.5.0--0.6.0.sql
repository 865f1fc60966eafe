-- idempotency 0.5.0 -> 0.6.0: hardening, round three; safe defaults.
-- The same objects are in the sql/idempotency*.sql sources of a fresh
-- 0.6.0 install.

\echo Use "ALTER EXTENSION idempotency UPDATE TO '0.6.0'" to load this file. \quit

-- outbox: no lock any role can squat, no name resolved through a caller's
-- search_path, bounded leases and retentions (docs/security.md, Outbox).
-- Every message, every group's horizon and delivery and every lease stay.

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
ALTER TABLE @extschema@.idem_outbox_deliveries ENABLE ROW LEVEL SECURITY;

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
-- The aggregates' lock rows: publishers of the topic.
CREATE POLICY idem_outbox_aggregates_publisher ON @extschema@.idem_outbox_aggregates
    USING (EXISTS (SELECT FROM @extschema@.idem_outbox_grants g
                    WHERE g.privilege OPERATOR(pg_catalog.=) 'publish'
                      AND (g.topic IS NULL OR g.topic OPERATOR(pg_catalog.=) idem_outbox_aggregates.topic)
                      AND pg_catalog.pg_has_role(g.role::pg_catalog.oid, 'USAGE')));
-- A group's subscriptions and deliveries: the roles that may read the
-- topic as that group.
CREATE POLICY idem_outbox_subscriptions_consumer ON @extschema@.idem_outbox_subscriptions
    USING (EXISTS (SELECT FROM @extschema@.idem_outbox_grants g
                    WHERE g.privilege OPERATOR(pg_catalog.=) 'consume'
                      AND (g.topic IS NULL OR g.topic OPERATOR(pg_catalog.=) idem_outbox_subscriptions.topic)
                      AND (g.consumer IS NULL OR g.consumer OPERATOR(pg_catalog.=) idem_outbox_subscriptions.consumer)
                      AND pg_catalog.pg_has_role(g.role::pg_catalog.oid, 'USAGE')));
CREATE POLICY idem_outbox_deliveries_consumer ON @extschema@.idem_outbox_deliveries
    USING (EXISTS (SELECT FROM @extschema@.idem_outbox_grants g
                    WHERE g.privilege OPERATOR(pg_catalog.=) 'consume'
                      AND (g.topic IS NULL OR g.topic OPERATOR(pg_catalog.=) idem_outbox_deliveries.topic)
                      AND (g.consumer IS NULL OR g.consumer OPERATOR(pg_catalog.=) idem_outbox_deliveries.consumer)
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
    r pg_catalog.regrole;
BEGIN
    FOR r IN SELECT g.role FROM @extschema@.idem_outbox_grants g
              WHERE g.privilege OPERATOR(pg_catalog.=) 'publish'
    LOOP
        EXECUTE pg_catalog.format('GRANT SELECT, INSERT, UPDATE ON TABLE @extschema@.idem_outbox_aggregates TO %s', r);
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
    ELSE
        EXECUTE pg_catalog.format('GRANT SELECT ON TABLE %I.idem_outbox TO %s', nsp, idem_outbox_grant.role);
        EXECUTE pg_catalog.format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE %I.idem_outbox_subscriptions TO %s', nsp, idem_outbox_grant.role);
        EXECUTE pg_catalog.format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE %I.idem_outbox_deliveries TO %s', nsp, idem_outbox_grant.role);
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
        EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %I.idem_outbox, %I.idem_outbox_aggregates, %I.idem_outbox_subscriptions, %I.idem_outbox_deliveries FROM %s',
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
    RETURNING (SELECT t.relay FROM @extschema@.idem_outbox_topics t
                WHERE t.topic OPERATOR(pg_catalog.=) o.topic)
         INTO how;
    IF FOUND THEN
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

COMMENT ON FUNCTION @extschema@.idem_outbox_advance(pg_catalog.text) IS
    'Internal (idem_outbox_fetch, idem_outbox_purge): move the horizons of consumer''s subscriptions (all when NULL) past what it acknowledged';

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

    DECLARE
        adv pg_catalog.record;
        h pg_catalog.xid8;
    BEGIN
    -- idem_outbox_advance(consumer), written out (a call by name could be made
    -- ambiguous: docs/security.md).
        FOR adv IN
            SELECT s2.consumer, s2.topic, s2.horizon
              FROM @extschema@.idem_outbox_subscriptions s2
             WHERE idem_outbox_fetch.consumer IS NULL
                OR s2.consumer OPERATOR(pg_catalog.=) (idem_outbox_fetch.consumer COLLATE pg_catalog."C")
             ORDER BY s2.consumer, s2.topic
               FOR UPDATE SKIP LOCKED
        LOOP
            SELECT LEAST(pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot()),
                         (SELECT o.xact_id FROM @extschema@.idem_outbox o
                           WHERE o.topic OPERATOR(pg_catalog.=) adv.topic
                             AND o.xact_id OPERATOR(pg_catalog.>=) adv.horizon
                             AND (SELECT d.acked_at FROM @extschema@.idem_outbox_deliveries d
                                   WHERE d.consumer OPERATOR(pg_catalog.=) adv.consumer
                                     AND d.id OPERATOR(pg_catalog.=) o.id) IS NULL
                           ORDER BY o.xact_id LIMIT 1))
              INTO h;
            IF h OPERATOR(pg_catalog.>) adv.horizon THEN
                UPDATE @extschema@.idem_outbox_subscriptions s3 SET horizon = h
                 WHERE s3.consumer OPERATOR(pg_catalog.=) adv.consumer
                   AND s3.topic OPERATOR(pg_catalog.=) adv.topic;
                DELETE FROM @extschema@.idem_outbox_deliveries d
                 WHERE d.consumer OPERATOR(pg_catalog.=) adv.consumer
                   AND d.topic OPERATOR(pg_catalog.=) adv.topic
                   AND d.xact_id OPERATOR(pg_catalog.<) h;
            END IF;
        END LOOP;
    END;

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

COMMENT ON FUNCTION @extschema@.idem_outbox_ack(pg_catalog.text, pg_catalog.uuid) IS
    'Acknowledge message id for consumer group consumer: it is not handed out to the group again; true when this call acknowledged it, false when it was already';

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

    DECLARE
        adv pg_catalog.record;
        h pg_catalog.xid8;
    BEGIN
    -- idem_outbox_advance(NULL), written out (a call by name could be made
    -- ambiguous: docs/security.md).
        FOR adv IN
            SELECT s2.consumer, s2.topic, s2.horizon
              FROM @extschema@.idem_outbox_subscriptions s2
             WHERE NULL::pg_catalog.text IS NULL
                OR s2.consumer OPERATOR(pg_catalog.=) (NULL::pg_catalog.text COLLATE pg_catalog."C")
             ORDER BY s2.consumer, s2.topic
               FOR UPDATE SKIP LOCKED
        LOOP
            SELECT LEAST(pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot()),
                         (SELECT o.xact_id FROM @extschema@.idem_outbox o
                           WHERE o.topic OPERATOR(pg_catalog.=) adv.topic
                             AND o.xact_id OPERATOR(pg_catalog.>=) adv.horizon
                             AND (SELECT d.acked_at FROM @extschema@.idem_outbox_deliveries d
                                   WHERE d.consumer OPERATOR(pg_catalog.=) adv.consumer
                                     AND d.id OPERATOR(pg_catalog.=) o.id) IS NULL
                           ORDER BY o.xact_id LIMIT 1))
              INTO h;
            IF h OPERATOR(pg_catalog.>) adv.horizon THEN
                UPDATE @extschema@.idem_outbox_subscriptions s3 SET horizon = h
                 WHERE s3.consumer OPERATOR(pg_catalog.=) adv.consumer
                   AND s3.topic OPERATOR(pg_catalog.=) adv.topic;
                DELETE FROM @extschema@.idem_outbox_deliveries d
                 WHERE d.consumer OPERATOR(pg_catalog.=) adv.consumer
                   AND d.topic OPERATOR(pg_catalog.=) adv.topic
                   AND d.xact_id OPERATOR(pg_catalog.<) h;
            END IF;
        END LOOP;
    END;

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

COMMENT ON FUNCTION @extschema@.idem_outbox_purge(pg_catalog.int4) IS
    'Delete up to batch_size messages older than their topic''s retention that every consumer group of their topic has acknowledged; returns the number removed';

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
    EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %I.idem_outbox_deliveries FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %I.idem_outbox_aggregates FROM %s', nsp, role);
    EXECUTE pg_catalog.format('DELETE FROM %I.idem_outbox_grants g WHERE g.role OPERATOR(pg_catalog.=) $1', nsp) USING role;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_revoke(pg_catalog.regrole) IS
    'Take back what idem_grant and idem_outbox_grant gave role (the schema''s USAGE stays: other objects may need it)';

REVOKE ALL ON FUNCTION @extschema@.idem_grant(pg_catalog.regrole, pg_catalog.text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_revoke(pg_catalog.regrole) FROM PUBLIC;

