-- Claims here stand alone in autocommit (idempotency.autocommit_claims
-- defaults to error; test/sql/silent_traps.sql tests that).
SET idempotency.autocommit_claims = allow;
-- Records with a shard key (as idem_distribute(shard_key =>) makes them on
-- Citus; made by hand here, as in shard_key.sql): each function without
-- _at refuses with 55000, and its message names it and its hint names its
-- own twin, with the twin's arguments (docs/citus.md).
TRUNCATE idem_records;
ALTER TABLE idem_records ADD COLUMN shard_key bigint NOT NULL,
    DROP CONSTRAINT idem_records_pkey,
    ADD CONSTRAINT idem_records_pkey PRIMARY KEY (shard_key, scope, key);
\set VERBOSITY default
SELECT idem_claim('hint', 'k');
SELECT idem_claim('k');
SELECT * FROM idem_claim_many('hint', ARRAY['k', 'k2']);
SELECT idem_complete('hint', 'k', '{}');
SELECT idem_lookup('hint', 'k');
SELECT idem_release('hint', 'k');
SELECT * FROM idem_begin('hint', 'k');
SELECT idem_heartbeat('hint', 'k', 1);
SELECT idem_finish('hint', 'k', 1, '{}');
SELECT idem_fail('hint', 'k', 1);
SELECT idem_await('hint', 'k', '10 milliseconds');
SELECT idem_token_issue('hint');
SELECT idem_token_consume('hint', repeat('0', 32));
-- Each of them, in a PL/pgSQL block that reads the hint: the twin it
-- names exists, and is the function's name with _at.
DO $$
DECLARE
    calls text[] := ARRAY[
        'idem_claim(''hint'', ''k'')', 'idem_claim(''k'')',
        'idem_claim_many(''hint'', ARRAY[''k''])', 'idem_complete(''hint'', ''k'', ''{}'')',
        'idem_lookup(''hint'', ''k'')', 'idem_release(''hint'', ''k'')',
        'idem_begin(''hint'', ''k'')', 'idem_heartbeat(''hint'', ''k'', 1)',
        'idem_finish(''hint'', ''k'', 1)', 'idem_fail(''hint'', ''k'', 1)',
        'idem_await(''hint'', ''k'', ''10 milliseconds'')', 'idem_token_issue(''hint'')',
        'idem_token_consume(''hint'', repeat(''0'', 32))'];
    c text;
    hint text;
    twin text;
BEGIN
    FOREACH c IN ARRAY calls LOOP
        BEGIN
            EXECUTE 'SELECT ' || c;
            RAISE EXCEPTION '% did not fail', c;
        EXCEPTION WHEN object_not_in_prerequisite_state THEN
            GET STACKED DIAGNOSTICS hint = PG_EXCEPTION_HINT;
        END;
        twin := substring(hint FROM '^Call (idem_[a-z_]+)\(');
        IF twin IS DISTINCT FROM split_part(c, '(', 1) || '_at'
           OR to_regproc(twin) IS NULL THEN
            RAISE EXCEPTION '%: hint names %: %', c, twin, hint;
        END IF;
    END LOOP;
    RAISE NOTICE 'every hint names its own twin';
END
$$;
-- Back to the install script's shape.
TRUNCATE idem_records;
ALTER TABLE idem_records DROP CONSTRAINT idem_records_pkey,
    DROP COLUMN shard_key,
    ADD CONSTRAINT idem_records_pkey PRIMARY KEY (scope, key);
SELECT idem_claim('hint', 'k') AS plain_again;
TRUNCATE idem_records;
