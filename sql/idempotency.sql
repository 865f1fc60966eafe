-- idempotency: exactly-once helpers for PostgreSQL.
--
-- This file is the core of the install script; the Makefile joins it with
-- the other sources listed in SQL_SOURCES into idempotency--VERSION.sql.
-- Every object is created in @extschema@; every function is SECURITY
-- INVOKER (the default), so privileges and row-level security on
-- idem_records apply to callers exactly as to direct SQL.

\echo Use "CREATE EXTENSION idempotency" to load this file. \quit

-- One copy per database (docs/managed.md#one-copy-per-database): two
-- copies in two schemas would each accept the same key once, and which one
-- a call reached would depend on search_path.  Every edition's install runs
-- this first and refuses when it finds another: an extension named
-- idempotency or HANDLE@idempotency (the C edition, pg_tle, database.dev)
-- in another schema (the one being created has its row in @extschema@
-- already), the plain script's table idem_portable_version in any schema,
-- or idem_records in @extschema@.  Fully qualified: it runs before any
-- search_path is safe.
DO $_idem_one_copy_$
DECLARE
    here pg_catalog.oid := pg_catalog.to_regnamespace($nsp$@extschema@$nsp$::pg_catalog.text)::pg_catalog.oid;
    found_schema pg_catalog.text;
    found_edition pg_catalog.text;
    found_version pg_catalog.text;
BEGIN
    SELECT n.nspname::pg_catalog.text, e.extversion,
           CASE WHEN e.extname OPERATOR(pg_catalog.<>) 'idempotency'::pg_catalog.name
                THEN 'the portable edition, database.dev package '::pg_catalog.text OPERATOR(pg_catalog.||) e.extname::pg_catalog.text
                WHEN EXISTS (SELECT FROM pg_catalog.pg_proc AS p
                               JOIN pg_catalog.pg_language AS l ON l.oid OPERATOR(pg_catalog.=) p.prolang
                              WHERE p.pronamespace OPERATOR(pg_catalog.=) e.extnamespace
                                AND p.proname OPERATOR(pg_catalog.=) 'idem_claim'::pg_catalog.name
                                AND l.lanname OPERATOR(pg_catalog.=) 'c'::pg_catalog.name)
                THEN 'the C edition'::pg_catalog.text
                ELSE 'the portable edition, through pg_tle'::pg_catalog.text END
      INTO found_schema, found_version, found_edition
      FROM pg_catalog.pg_extension AS e
      JOIN pg_catalog.pg_namespace AS n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace
     WHERE e.extname OPERATOR(pg_catalog.~) '^(.+@)?idempotency$'::pg_catalog.text
       AND e.extnamespace OPERATOR(pg_catalog.<>) here
     ORDER BY e.oid LIMIT 1;
    IF found_schema IS NULL THEN
        SELECT n.nspname::pg_catalog.text, 'the portable edition, plain script'::pg_catalog.text
          INTO found_schema, found_edition
          FROM pg_catalog.pg_class AS c
          JOIN pg_catalog.pg_namespace AS n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
         WHERE c.relname OPERATOR(pg_catalog.=) 'idem_portable_version'::pg_catalog.name
           AND c.relkind OPERATOR(pg_catalog.=) 'r'::pg_catalog."char"
         ORDER BY c.oid LIMIT 1;
        IF found_schema IS NOT NULL THEN
            BEGIN
                EXECUTE pg_catalog.format('SELECT pg_catalog.max(v.version)::pg_catalog.text FROM %I.idem_portable_version AS v'::pg_catalog.text,
                                          found_schema)
                   INTO found_version;
            EXCEPTION WHEN insufficient_privilege OR undefined_column OR datatype_mismatch THEN
                found_version := NULL;
            END;
        END IF;
    END IF;
    IF found_schema IS NULL
       AND EXISTS (SELECT FROM pg_catalog.pg_class AS c
                    WHERE c.relnamespace OPERATOR(pg_catalog.=) here
                      AND c.relname OPERATOR(pg_catalog.=) 'idem_records'::pg_catalog.name) THEN
        SELECT n.nspname::pg_catalog.text, 'an unknown edition: its table idem_records is there'::pg_catalog.text
          INTO found_schema, found_edition
          FROM pg_catalog.pg_namespace AS n WHERE n.oid OPERATOR(pg_catalog.=) here;
    END IF;
    IF found_schema IS NOT NULL THEN
        RAISE EXCEPTION 'idempotency is installed in this database already'
            USING ERRCODE = '42710',
                  DETAIL = pg_catalog.format('Schema %I has idempotency %s (%s). A database has one copy: two would each accept the same key once, and which one a call reached would depend on search_path.'::pg_catalog.text,
                                             found_schema, COALESCE(found_version, 'of an unknown version'::pg_catalog.text), found_edition),
                  HINT = 'Use that copy (qualify the calls with its schema or put it on search_path), or upgrade it in place (ALTER EXTENSION ... UPDATE; the plain script: its idempotency-portable--A--B.sql upgrades). To change editions, move the records and drop it first (docs/managed.md, "Moving between editions").';
    END IF;
END
$_idem_one_copy_$;

--------------------------------------------------------------------------
-- Records
--------------------------------------------------------------------------

-- The status names a record may have: the CHECK constraint below calls
-- this C function rather than comparing with an array constant, because
-- PostgreSQL re-reads a CHECK's stored expression at every INSERT and
-- UPDATE, and the array's is twenty times longer than a function call's.
CREATE FUNCTION @extschema@.idem_status_is_valid(status pg_catalog.text)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'idem_status_is_valid'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.idem_status_is_valid(pg_catalog.text) IS
    'True for the status names of idem_records: claimed, in_progress, completed, failed, retryable, issued, consumed';

CREATE TABLE @extschema@.idem_records (
    scope        pg_catalog.text COLLATE pg_catalog."C" NOT NULL,
    key          pg_catalog.text COLLATE pg_catalog."C" NOT NULL,
    status       pg_catalog.text COLLATE pg_catalog."C" NOT NULL,
    fingerprint  pg_catalog.bytea,
    result       pg_catalog.jsonb,
    created_at   pg_catalog.timestamptz NOT NULL,
    updated_at   pg_catalog.timestamptz NOT NULL,
    expires_at   pg_catalog.timestamptz NOT NULL,
    locked_until pg_catalog.timestamptz,
    token        pg_catalog.int8,
    attempts     pg_catalog.int4 NOT NULL DEFAULT 0,
    lease        pg_catalog.interval,
    owner_pid    pg_catalog.int4,
    owner_start  pg_catalog.timestamptz,
    effect_started_at pg_catalog.timestamptz,
    effect_unknown_attempt pg_catalog.int4,
    CONSTRAINT idem_records_pkey PRIMARY KEY (scope, key),
    CONSTRAINT idem_records_status_check CHECK (@extschema@.idem_status_is_valid(status))
);

CREATE INDEX idem_records_expires_at_idx
    ON @extschema@.idem_records (expires_at);

COMMENT ON TABLE @extschema@.idem_records IS
    'Idempotency records, one per (scope, key); written by idem_claim and idem_begin';

REVOKE ALL ON TABLE @extschema@.idem_records FROM PUBLIC;

SELECT pg_catalog.pg_extension_config_dump('@extschema@.idem_records', '');

-- Fencing tokens of leases (idem_begin): one sequence, so a token is
-- greater than every token issued before it, for any key, even across
-- expiry and purge.  Dumped, so a restore never reissues a token.
CREATE SEQUENCE @extschema@.idem_token_seq AS pg_catalog.int8 MINVALUE 1 NO CYCLE;

COMMENT ON SEQUENCE @extschema@.idem_token_seq IS
    'Fencing tokens for idem_begin leases';

REVOKE ALL ON SEQUENCE @extschema@.idem_token_seq FROM PUBLIC;

SELECT pg_catalog.pg_extension_config_dump('@extschema@.idem_token_seq', '');

-- The public shape of a record, returned by idem_lookup and idem_await.
CREATE TYPE @extschema@.idem_record AS (
    scope        pg_catalog.text,
    key          pg_catalog.text,
    status       pg_catalog.text,
    fingerprint  pg_catalog.bytea,
    result       pg_catalog.jsonb,
    created_at   pg_catalog.timestamptz,
    updated_at   pg_catalog.timestamptz,
    expires_at   pg_catalog.timestamptz,
    locked_until pg_catalog.timestamptz,
    token        pg_catalog.int8,
    attempts     pg_catalog.int4,
    owner_pid    pg_catalog.int4,
    owner_start  pg_catalog.timestamptz,
    effect_started_at pg_catalog.timestamptz,
    effect_unknown_attempt pg_catalog.int4
);

COMMENT ON TYPE @extschema@.idem_record IS
    'An idempotency record as returned by idem_lookup and idem_await';

--------------------------------------------------------------------------
-- One-phase claims
--------------------------------------------------------------------------

CREATE FUNCTION @extschema@.idem_claim(key pg_catalog.text)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'idem_claim_default_scope'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_claim(pg_catalog.text) IS
    'Claim key in the default scope for this transaction; true when this transaction owns it, false for a duplicate';

CREATE FUNCTION @extschema@.idem_claim(
    scope pg_catalog.text,
    key pg_catalog.text,
    ttl pg_catalog.interval DEFAULT NULL,
    fingerprint pg_catalog.text DEFAULT NULL)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'idem_claim'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_claim(pg_catalog.text, pg_catalog.text, pg_catalog.interval, pg_catalog.text) IS
    'Claim (scope, key) for this transaction; true when this transaction owns it, false for a duplicate';

CREATE FUNCTION @extschema@.idem_complete(
    scope pg_catalog.text,
    key pg_catalog.text,
    result pg_catalog.jsonb)
RETURNS pg_catalog.void
AS 'MODULE_PATHNAME', 'idem_complete'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_complete(pg_catalog.text, pg_catalog.text, pg_catalog.jsonb) IS
    'Mark a claimed record completed and store its result for replay';

CREATE FUNCTION @extschema@.idem_lookup(
    scope pg_catalog.text,
    key pg_catalog.text)
RETURNS @extschema@.idem_record
AS 'MODULE_PATHNAME', 'idem_lookup'
LANGUAGE C STABLE CALLED ON NULL INPUT PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.idem_lookup(pg_catalog.text, pg_catalog.text) IS
    'The live record of (scope, key), or NULL when absent or expired';

CREATE FUNCTION @extschema@.idem_release(
    scope pg_catalog.text,
    key pg_catalog.text)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'idem_release'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_release(pg_catalog.text, pg_catalog.text) IS
    'Delete the record of (scope, key) so it can be claimed again; true when a live record was removed';

CREATE FUNCTION @extschema@.idem_purge(batch_size pg_catalog.int4 DEFAULT 10000)
RETURNS pg_catalog.int8
AS 'MODULE_PATHNAME', 'idem_purge'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_purge(pg_catalog.int4) IS
    'Delete up to batch_size expired records, skipping locked rows; returns the number removed';
