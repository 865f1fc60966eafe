
--------------------------------------------------------------------------
-- Two-phase records with leases and fencing tokens
--------------------------------------------------------------------------

CREATE FUNCTION @extschema@.idem_begin(
    scope pg_catalog.text,
    key pg_catalog.text,
    lease pg_catalog.interval DEFAULT '5 minutes',
    ttl pg_catalog.interval DEFAULT NULL,
    fingerprint pg_catalog.text DEFAULT NULL,
    bind_to_session pg_catalog.bool DEFAULT false,
    OUT outcome pg_catalog.text,
    OUT token pg_catalog.int8,
    OUT result pg_catalog.jsonb,
    OUT attempt pg_catalog.int4,
    OUT effect_unknown pg_catalog.bool)
RETURNS record
AS 'MODULE_PATHNAME', 'idem_begin'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_begin(pg_catalog.text, pg_catalog.text, pg_catalog.interval, pg_catalog.interval, pg_catalog.text, pg_catalog.bool) IS
    'Start work on (scope, key) under a lease, optionally bound to this session: acquired (with a fencing token, the attempt, and whether an earlier attempt''s outside effect is unknown), in_progress, completed or failed';

CREATE FUNCTION @extschema@.idem_heartbeat(
    scope pg_catalog.text,
    key pg_catalog.text,
    token pg_catalog.int8,
    lease pg_catalog.interval DEFAULT NULL)
RETURNS pg_catalog.timestamptz
AS 'MODULE_PATHNAME', 'idem_heartbeat'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_heartbeat(pg_catalog.text, pg_catalog.text, pg_catalog.int8, pg_catalog.interval) IS
    'Extend the lease held with token; returns the new end of the lease';

CREATE FUNCTION @extschema@.idem_finish(
    scope pg_catalog.text,
    key pg_catalog.text,
    token pg_catalog.int8,
    result pg_catalog.jsonb DEFAULT NULL)
RETURNS pg_catalog.void
AS 'MODULE_PATHNAME', 'idem_finish'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_finish(pg_catalog.text, pg_catalog.text, pg_catalog.int8, pg_catalog.jsonb) IS
    'Complete the leased record held with token and store its result for replay';

CREATE FUNCTION @extschema@.idem_fail(
    scope pg_catalog.text,
    key pg_catalog.text,
    token pg_catalog.int8,
    error pg_catalog.jsonb DEFAULT NULL,
    retryable pg_catalog.bool DEFAULT true)
RETURNS pg_catalog.void
AS 'MODULE_PATHNAME', 'idem_fail'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_fail(pg_catalog.text, pg_catalog.text, pg_catalog.int8, pg_catalog.jsonb, pg_catalog.bool) IS
    'End the lease held with token with a failure: retryable frees the key, otherwise the error is kept';

CREATE FUNCTION @extschema@.idem_await(
    scope pg_catalog.text,
    key pg_catalog.text,
    timeout pg_catalog.interval DEFAULT '30 seconds')
RETURNS @extschema@.idem_record
AS 'MODULE_PATHNAME', 'idem_await'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.idem_await(pg_catalog.text, pg_catalog.text, pg_catalog.interval) IS
    'Wait without locks until (scope, key) is no longer in progress, its lease runs out, or timeout passes; returns the record';

CREATE FUNCTION @extschema@.idem_effect_started(
    scope pg_catalog.text,
    key pg_catalog.text,
    token pg_catalog.int8)
RETURNS pg_catalog.timestamptz
AS 'MODULE_PATHNAME', 'idem_effect_started'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_effect_started(pg_catalog.text, pg_catalog.text, pg_catalog.int8) IS
    'Mark that the lease held with token is about to perform its outside effect: a takeover after the mark tells the next owner the effect is unknown; returns the time of the mark';
