-- Portable body (docs/managed.md) of idem_publish, whose C is
-- src/outbox_publish.c: the C edition's fast path left out, every
-- publication is the shared SQL body, idem_publish_sql of
-- sql/idempotency_outbox.sql, with the same arguments (each of its declared
-- type, so the call binds to our function only).  One SELECT, so the
-- planner inlines it into the caller's query.

-- portable: idem_publish
LANGUAGE sql
AS $$
SELECT @extschema@.idem_publish_sql($1, $2, $3, $4, $5, $6, $7, $8)
$$;
