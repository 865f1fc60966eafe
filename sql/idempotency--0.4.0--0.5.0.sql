-- idempotency 0.4.0 -> 0.5.0: hardening, round two.
-- The same objects are in the sql/idempotency*.sql sources of a fresh
-- 0.5.0 install.

\echo Use "ALTER EXTENSION idempotency UPDATE TO '0.5.0'" to load this file. \quit

-- Every guard made by an earlier version is installed again (issue 20):
-- the new triggers fire on every UPDATE (not only UPDATE OF the column,
-- which missed a status a BEFORE trigger changed), cast every argument
-- of the WHEN conditions to pg_catalog.text (an overload of
-- idem_guard_allows could capture the old ones), follow the guarded
-- column by its attribute (pg_depend) and refuse unguarded inheritance
-- children.  The old triggers are refused by the new library (39P01), so
-- a guard that cannot be installed again (an inheritance child without a
-- guard, say) is reported with a WARNING and keeps refusing writes until
-- idem_guard() is called for it.  The status column is the one the old
-- check trigger watched (UPDATE OF), whatever it is called now.
DO $$
DECLARE
    g record;
BEGIN
    FOR g IN
        SELECT t.tgrelid::pg_catalog.regclass AS tbl,
               a.attname AS status_column,
               args[1] AS machine,
               NULLIF(args[3], '') AS version_column,
               EXISTS (SELECT FROM pg_catalog.pg_trigger l
                        WHERE l.tgrelid OPERATOR(pg_catalog.=) t.tgrelid
                          AND l.tgfoid OPERATOR(pg_catalog.=) t.tgfoid
                          AND l.tgattr[0] OPERATOR(pg_catalog.=) t.tgattr[0]
                          AND pg_catalog.encode(l.tgargs, 'escape') OPERATOR(pg_catalog.~) '\\000log\\000') AS history
          FROM pg_catalog.pg_trigger t
          JOIN pg_catalog.pg_attribute a
            ON a.attrelid OPERATOR(pg_catalog.=) t.tgrelid AND a.attnum OPERATOR(pg_catalog.=) t.tgattr[0]
          CROSS JOIN LATERAL (
               SELECT pg_catalog.array_agg(pg_catalog.replace(u.arg, '\\', '\') ORDER BY u.n) AS args
                 FROM pg_catalog.unnest(pg_catalog.string_to_array(pg_catalog.encode(t.tgargs, 'escape'), '\000'))
                      WITH ORDINALITY AS u(arg, n)) p
         WHERE t.tgfoid OPERATOR(pg_catalog.=) '@extschema@.idem_guard_trigger()'::pg_catalog.regprocedure
           AND t.tgnargs OPERATOR(pg_catalog.>=) 4
           AND args[4] OPERATOR(pg_catalog.=) 'check'
           AND (t.tgtype::pg_catalog.int4 OPERATOR(pg_catalog.&) 16) OPERATOR(pg_catalog.<>) 0
           AND pg_catalog.cardinality(t.tgattr::pg_catalog.int2[]) OPERATOR(pg_catalog.=) 1
         ORDER BY 1, 2
    LOOP
        BEGIN
            PERFORM @extschema@.idem_guard(g.tbl, g.status_column, g.machine,
                                           g.version_column, g.history);
        EXCEPTION WHEN OTHERS THEN
            RAISE WARNING 'idempotency 0.5.0: the guard of column "%" of table % could not be installed again: %',
                g.status_column, g.tbl, SQLERRM
                USING HINT = 'Its old triggers now refuse every write; fix the cause and call idem_guard() for it.';
        END;
    END LOOP;
END
$$;
