
--------------------------------------------------------------------------
-- One-time tokens (src/token.c)
--------------------------------------------------------------------------

CREATE FUNCTION @extschema@.idem_token_issue(
    scope pg_catalog.text,
    ttl pg_catalog.interval DEFAULT '10 minutes'::pg_catalog.interval)
RETURNS pg_catalog.text
AS 'MODULE_PATHNAME', 'idem_token_issue'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_token_issue(pg_catalog.text, pg_catalog.interval) IS
    'Issue a one-time token for scope, valid for ttl: 32 lowercase hexadecimal digits (128 random bits)';

CREATE FUNCTION @extschema@.idem_token_consume(
    scope pg_catalog.text,
    token pg_catalog.text)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'idem_token_consume'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_token_consume(pg_catalog.text, pg_catalog.text) IS
    'Use a one-time token of scope: true exactly once, false when unknown, expired, already used or issued for another scope';
