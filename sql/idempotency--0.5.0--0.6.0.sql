-- idempotency 0.5.0 -> 0.6.0: hardening, round three; safe defaults.
-- The same objects are in the sql/idempotency*.sql sources of a fresh
-- 0.6.0 install.

\echo Use "ALTER EXTENSION idempotency UPDATE TO '0.6.0'" to load this file. \quit

-- leases: bound to a session, and the unknown outcome.  idem_begin(...,
-- bind_to_session) records its owner session (owner_pid, owner_start) so
-- that a waiter takes the lease over once that session is gone;
-- idem_effect_started marks the moment before the outside effect, and a
-- takeover after it is recorded (effect_unknown_attempt) and reported by
-- idem_begin (attempt, effect_unknown).  Existing records and leases are
-- kept: the new columns are NULL (unbound, unmarked).  idem_begin and
-- idem_begin_at get a new argument and new result columns, so they are
-- dropped and created again (a view over idem_begin would stop the
-- update; grants on them are the defaults again).
ALTER TABLE @extschema@.idem_records
    ADD COLUMN owner_pid pg_catalog.int4,
    ADD COLUMN owner_start pg_catalog.timestamptz,
    ADD COLUMN effect_started_at pg_catalog.timestamptz,
    ADD COLUMN effect_unknown_attempt pg_catalog.int4;

ALTER TYPE @extschema@.idem_record
    ADD ATTRIBUTE owner_pid pg_catalog.int4,
    ADD ATTRIBUTE owner_start pg_catalog.timestamptz,
    ADD ATTRIBUTE effect_started_at pg_catalog.timestamptz,
    ADD ATTRIBUTE effect_unknown_attempt pg_catalog.int4;

DROP FUNCTION @extschema@.idem_begin(pg_catalog.text, pg_catalog.text, pg_catalog.interval, pg_catalog.interval, pg_catalog.text);

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

DROP FUNCTION @extschema@.idem_begin_at("any", pg_catalog.text, pg_catalog.text, pg_catalog.interval, pg_catalog.interval, pg_catalog.text);

CREATE FUNCTION @extschema@.idem_begin_at(
    shard_key "any",
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
AS 'MODULE_PATHNAME', 'idem_begin_at'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_begin_at("any", pg_catalog.text, pg_catalog.text, pg_catalog.interval, pg_catalog.interval, pg_catalog.text, pg_catalog.bool) IS
    'idem_begin for idem_records distributed by shard_key (idem_distribute(shard_key => type)): shard_key is the distribution value of the row the key protects';

CREATE FUNCTION @extschema@.idem_effect_started(
    scope pg_catalog.text,
    key pg_catalog.text,
    token pg_catalog.int8)
RETURNS pg_catalog.timestamptz
AS 'MODULE_PATHNAME', 'idem_effect_started'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_effect_started(pg_catalog.text, pg_catalog.text, pg_catalog.int8) IS
    'Mark that the lease held with token is about to perform its outside effect: a takeover after the mark tells the next owner the effect is unknown; returns the time of the mark';

CREATE FUNCTION @extschema@.idem_effect_started_at(
    shard_key "any",
    scope pg_catalog.text,
    key pg_catalog.text,
    token pg_catalog.int8)
RETURNS pg_catalog.timestamptz
AS 'MODULE_PATHNAME', 'idem_effect_started_at'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_effect_started_at("any", pg_catalog.text, pg_catalog.text, pg_catalog.int8) IS
    'idem_effect_started for idem_records distributed by shard_key (idem_distribute(shard_key => type)): shard_key is the distribution value of the row the key protects';

-- The portable bodies of these changed (they read the new columns).
CREATE OR REPLACE FUNCTION @extschema@.idem_await(
    scope pg_catalog.text,
    key pg_catalog.text,
    timeout pg_catalog.interval DEFAULT '30 seconds')
RETURNS @extschema@.idem_record
AS 'MODULE_PATHNAME', 'idem_await'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL RESTRICTED;

CREATE OR REPLACE FUNCTION @extschema@.idem_lookup(
    scope pg_catalog.text,
    key pg_catalog.text)
RETURNS @extschema@.idem_record
AS 'MODULE_PATHNAME', 'idem_lookup'
LANGUAGE C STABLE CALLED ON NULL INPUT PARALLEL RESTRICTED;
