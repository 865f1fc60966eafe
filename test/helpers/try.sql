-- pg_temp.try(statement), shared by test/sql/*.sql (see test/helpers/README):
-- "ok: " and the single result of a SELECT, "ok" for another statement,
-- or "SQLSTATE: message" (then " / detail" with idem_test.try_detail on).
CREATE FUNCTION pg_temp.try(stmt text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    res text;
    st text;
    msg text;
    det text;
BEGIN
    IF stmt !~* '^\s*select' THEN
        EXECUTE stmt;
        RETURN 'ok';
    END IF;
    EXECUTE stmt INTO res;
    RETURN 'ok: ' || coalesce(res, '(null)');
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
                            det = PG_EXCEPTION_DETAIL;
    IF coalesce(current_setting('idem_test.try_detail', true), 'off') = 'on' THEN
        RETURN st || ': ' || msg || coalesce(' / ' || nullif(det, ''), '');
    END IF;
    RETURN st || ': ' || msg;
END
$$;
