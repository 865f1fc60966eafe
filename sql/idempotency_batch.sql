
--------------------------------------------------------------------------
-- Batch claims (src/batch.c)
--------------------------------------------------------------------------

CREATE FUNCTION @extschema@.idem_claim_many(
    scope pg_catalog.text,
    keys pg_catalog.text[],
    ttl pg_catalog.interval DEFAULT NULL)
RETURNS TABLE (key pg_catalog.text, claimed pg_catalog.bool)
AS 'MODULE_PATHNAME', 'idem_claim_many'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
ROWS 100;

COMMENT ON FUNCTION @extschema@.idem_claim_many(pg_catalog.text, pg_catalog.text[], pg_catalog.interval) IS
    'Claim every key of the array in scope for this transaction, as idem_claim would; one row per element, in array order, claimed true only at the first occurrence of a key this call claimed';
