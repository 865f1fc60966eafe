-- idempotency 0.2.0 -> 0.3.0: the CHECK constraint on idem_records.status
-- calls idem_status_is_valid() instead of comparing with an array
-- constant (PostgreSQL re-reads a CHECK's stored expression at every
-- INSERT and UPDATE; a function call is far shorter to read).  The same
-- objects are in sql/idempotency.sql, the source of a fresh 0.3.0 install.
--
-- Adding the constraint checks every existing row once (a sequential scan
-- of idem_records under an ACCESS EXCLUSIVE lock): on a large table, run
-- the update when a short pause of claims is acceptable, or purge first.

\echo Use "ALTER EXTENSION idempotency UPDATE TO '0.3.0'" to load this file. \quit

CREATE FUNCTION @extschema@.idem_status_is_valid(status pg_catalog.text)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'idem_status_is_valid'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.idem_status_is_valid(pg_catalog.text) IS
    'True for the status names of idem_records: claimed, in_progress, completed, failed, retryable, issued, consumed';

ALTER TABLE @extschema@.idem_records
    DROP CONSTRAINT idem_records_status_check,
    ADD CONSTRAINT idem_records_status_check CHECK (@extschema@.idem_status_is_valid(status));
