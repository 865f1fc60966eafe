-- Portable body (docs/managed.md) of idem_publish, the outbox's publish of
-- sql/idempotency_outbox.sql, whose C is src/outbox.c: the same statements
-- and errors.  Rules of the bodies: see records.sql.

-- portable: idem_publish
LANGUAGE plpgsql
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

    -- The aggregate's lock: its row in idem_outbox_aggregates, locked FOR
    -- NO KEY UPDATE (inserted by the first publication) before the
    -- position is drawn and held until this transaction ends, so that the
    -- messages of one aggregate take their positions in commit order.  A
    -- lock writes a small WAL record and no row version (an update would
    -- write one, and its index and pruning records).  A row lock on our
    -- own table: only roles that may publish to the topic can take it
    -- (docs/security.md).  A topic relayed by logical messages only takes
    -- no lock, and needs no order in the table.
    IF idem_publish.aggregate IS NOT NULL
       AND NOT EXISTS (SELECT FROM @extschema@.idem_outbox_topics t
                        WHERE t.topic OPERATOR(pg_catalog.=) (idem_publish.topic COLLATE pg_catalog."C")
                          AND t.relay OPERATOR(pg_catalog.=) 'message') THEN
        LOOP
            PERFORM FROM @extschema@.idem_outbox_aggregates a
              WHERE a.topic OPERATOR(pg_catalog.=) (idem_publish.topic COLLATE pg_catalog."C")
                AND a.aggregate OPERATOR(pg_catalog.=) (idem_publish.aggregate COLLATE pg_catalog."C")
                FOR NO KEY UPDATE;
            EXIT WHEN FOUND;
            -- The first publication: a concurrent first one makes this
            -- wait for its end, insert nothing, and lock the row above.
            INSERT INTO @extschema@.idem_outbox_aggregates AS a (topic, aggregate)
            VALUES (idem_publish.topic, idem_publish.aggregate)
            ON CONFLICT ON CONSTRAINT idem_outbox_aggregates_pkey DO NOTHING;
            EXIT WHEN FOUND;
        END LOOP;
    END IF;
    -- Then the message; the topic's relay comes back with the row.  A
    -- message of a claim this transaction holds (c_scope is set) cannot be
    -- published by another transaction meanwhile (it would have to write
    -- the claim's record, which this transaction holds): a look-up and a
    -- plain INSERT, without the confirmation record of ON CONFLICT.
    -- Whether a group reads the topic: the first topic from it on in the
    -- index, not EXISTS (... topic = ...), whose generic plan scans the
    -- whole table when other topics have very many groups.
    IF c_scope IS NOT NULL THEN
        IF NOT EXISTS (SELECT FROM @extschema@.idem_outbox o WHERE o.id OPERATOR(pg_catalog.=) msg_id) THEN
            INSERT INTO @extschema@.idem_outbox AS o
                   (id, topic, aggregate, type, payload, headers, scope, key, seq, xact_id, created_at)
            SELECT msg_id, idem_publish.topic, idem_publish.aggregate, idem_publish.type,
                   idem_publish.payload, idem_publish.headers, c_scope, c_key, idem_publish.seq,
                   pg_catalog.pg_current_xact_id(), pg_catalog.now()
             WHERE NOT EXISTS (SELECT FROM @extschema@.idem_outbox_topics t
                                WHERE t.topic OPERATOR(pg_catalog.=) (idem_publish.topic COLLATE pg_catalog."C")
                                  AND t.relay OPERATOR(pg_catalog.=) 'message')
            RETURNING o.position,
                      (SELECT t.relay FROM @extschema@.idem_outbox_topics t
                        WHERE t.topic OPERATOR(pg_catalog.=) o.topic),
                      COALESCE((SELECT s.topic FROM @extschema@.idem_outbox_subscriptions s
                                 WHERE s.topic OPERATOR(pg_catalog.>=) o.topic
                                 ORDER BY s.topic LIMIT 1) OPERATOR(pg_catalog.=) o.topic, false)
                 INTO pos_, how, subscribed;
        ELSE
            pos_ := NULL;
        END IF;
    ELSE
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
                  COALESCE((SELECT s.topic FROM @extschema@.idem_outbox_subscriptions s
                             WHERE s.topic OPERATOR(pg_catalog.>=) o.topic
                             ORDER BY s.topic LIMIT 1) OPERATOR(pg_catalog.=) o.topic, false)
             INTO pos_, how, subscribed;
    END IF;
    IF pos_ IS NOT NULL THEN
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
