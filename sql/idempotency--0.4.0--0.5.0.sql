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

-- HTTP Idempotency-Key (issue 25): the objects of sql/idempotency_http.sql.

--------------------------------------------------------------------------
-- HTTP Idempotency-Key semantics (docs/http.md)
--------------------------------------------------------------------------

-- The HTTP face of idem_claim, in SQL and PL/pgSQL only, so that the
-- portable edition has it unchanged.  A request is begun with
-- idem_http_begin inside the handler's transaction, and its response is
-- stored with idem_http_finish in that same transaction: the response
-- commits or rolls back with the handler's writes.  Outcomes and their
-- answers (draft-ietf-httpapi-idempotency-key-header):
--   proceed       run the handler
--   replay        the stored status, allow-listed headers and body bytes,
--                 plus Idempotent-Replayed: true
--   in_flight     409 with Retry-After: another transaction holds the key
--   mismatch      422: the key was used with another method, path or body
--   missing_key   400: the route requires a key and none was sent
--   invalid_key   400: the header is not a valid key
--   no_response   409: the key was used, but no response was stored
-- Errors for the client are application/problem+json bodies (RFC 9457).
-- A request in flight is recognised without waiting: idem_http_begin
-- takes a transaction-level advisory lock on the key (try, never wait),
-- held until the handler's transaction ends.

-- What idem_http_begin answers, and what a handler sends.
CREATE TYPE @extschema@.idem_http_response AS (
    action  pg_catalog.text,
    status  pg_catalog.int4,
    headers pg_catalog.jsonb,
    body    pg_catalog.bytea,
    problem pg_catalog.jsonb
);

COMMENT ON TYPE @extschema@.idem_http_response IS
    'An answer of idem_http_begin: action (proceed, replay, in_flight, mismatch, missing_key, invalid_key, no_response) and, except for proceed, the HTTP status, headers and body to send';

-- The key of an Idempotency-Key header value: a Structured Field String
-- ("...", RFC 8941; \" and \\ unescaped), or, leniently, a bare run of
-- visible ASCII characters not starting with a quote (what most clients
-- send).  NULL for NULL, a blank value, or an invalid one: anything else,
-- including two values joined by a comma, and keys longer than 255
-- characters.  Plain SQL without SET, fully qualified, so that the
-- planner inlines it.
CREATE FUNCTION @extschema@.idem_http_parse_key(value pg_catalog.text)
RETURNS pg_catalog.text
LANGUAGE sql IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE
AS $$
SELECT CASE
    WHEN pg_catalog.btrim(value, E' \t') OPERATOR(pg_catalog.~) '^[\x21\x23-\x7e][\x21-\x7e]*$'
         AND pg_catalog.length(pg_catalog.btrim(value, E' \t')) OPERATOR(pg_catalog.<=) 255
        THEN pg_catalog.btrim(value, E' \t')
    WHEN pg_catalog.btrim(value, E' \t') OPERATOR(pg_catalog.~) '^"([\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])+"$'
         AND pg_catalog.length(pg_catalog.regexp_replace(pg_catalog.btrim(value, E' \t'), '\\(.)', '\1', 'g'))
             OPERATOR(pg_catalog.<=) 257
        THEN pg_catalog.regexp_replace(pg_catalog.btrim(value, E' \t'), '^"|\\(["\\])|"$', '\1', 'g')
END
$$;

COMMENT ON FUNCTION @extschema@.idem_http_parse_key(pg_catalog.text) IS
    'The idempotency key of an Idempotency-Key header value (a quoted Structured Field String, or a bare run of visible ASCII), 1 to 255 characters; NULL when blank or invalid';

-- A problem response (RFC 9457): status, headers (Content-Type
-- application/problem+json, and the given ones) and the body, ready to
-- send.  code names the problem: its type is docs_url#code (docs_url
-- defaults to the draft), or about:blank without a code.
CREATE FUNCTION @extschema@.idem_http_problem(
    status pg_catalog.int4,
    title pg_catalog.text,
    detail pg_catalog.text DEFAULT NULL,
    code pg_catalog.text DEFAULT NULL,
    docs_url pg_catalog.text DEFAULT NULL,
    headers pg_catalog.jsonb DEFAULT NULL)
RETURNS @extschema@.idem_http_response
LANGUAGE plpgsql IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p jsonb;
    r @extschema@.idem_http_response;
BEGIN
    IF status IS NULL OR title IS NULL THEN
        RAISE EXCEPTION 'idem_http_problem: status and title must not be NULL'
            USING ERRCODE = '22004',
                  DETAIL = 'A problem document needs the HTTP status it is sent with and a short title.',
                  HINT = 'Pass both, for example idem_http_problem(500, ''Internal Server Error'').';
    END IF;
    IF status < 400 OR status > 599 THEN
        RAISE EXCEPTION 'idem_http_problem: status % is not an error status', status
            USING ERRCODE = '22023',
                  DETAIL = 'Problem documents describe errors: the status must be between 400 and 599.',
                  HINT = 'Send a success or a redirect as an ordinary response.';
    END IF;
    IF headers IS NOT NULL AND jsonb_typeof(headers) <> 'object' THEN
        RAISE EXCEPTION 'idem_http_problem: headers must be a JSON object'
            USING ERRCODE = '22023',
                  DETAIL = format('The headers given are a JSON %s.', jsonb_typeof(headers)),
                  HINT = 'Pass an object of header names and values, for example ''{"Retry-After": "1"}''.';
    END IF;
    p := jsonb_build_object(
        'type', CASE WHEN code IS NULL THEN 'about:blank'
                     ELSE coalesce(docs_url, 'https://datatracker.ietf.org/doc/draft-ietf-httpapi-idempotency-key-header/')
                          || '#' || code END,
        'title', title,
        'status', status);
    IF detail IS NOT NULL THEN
        p := p || jsonb_build_object('detail', detail);
    END IF;
    IF code IS NOT NULL THEN
        p := p || jsonb_build_object('code', code);
    END IF;
    r.action := 'problem';
    r.status := status;
    r.headers := coalesce(headers, '{}'::jsonb) || '{"content-type": "application/problem+json"}'::jsonb;
    r.body := convert_to(p::text, 'UTF8');
    r.problem := p;
    RETURN r;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_http_problem(pg_catalog.int4, pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.jsonb) IS
    'An application/problem+json response (RFC 9457) with status, title and detail, ready to send: action ''problem'', status, headers, body bytes and the problem as jsonb';

-- The stored form of a response: {"http": 1, "status": n, "headers":
-- {lower-case name: value or [values]}, "body": base64 or null}.  Only
-- headers named in allow_headers are kept (NULL: the default list); a
-- header name that is not an HTTP token, a value with a control
-- character (CR, LF: a header injection on replay), a status outside
-- 200-599 are errors.
CREATE FUNCTION @extschema@.idem_http_result(
    status pg_catalog.int4,
    headers pg_catalog.jsonb DEFAULT NULL,
    body pg_catalog.bytea DEFAULT NULL,
    allow_headers pg_catalog.text[] DEFAULT NULL)
RETURNS pg_catalog.jsonb
LANGUAGE plpgsql IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    allow text[];
    kept jsonb := '{}';
    pairs jsonb;
    n text;
    ln text;
    v jsonb;
    t text;
    vals text[];
BEGIN
    IF NOT (status BETWEEN 200 AND 599) OR status IS NULL OR jsonb_typeof(headers) <> 'object' THEN
        IF status IS NULL THEN
            RAISE EXCEPTION 'idem_http_result: status must not be NULL'
                USING ERRCODE = '22004',
                      DETAIL = 'A stored response needs the HTTP status it was sent with.',
                      HINT = 'Pass the status code, for example 201.';
        END IF;
        IF NOT (status BETWEEN 200 AND 599) THEN
            RAISE EXCEPTION 'idem_http_result: status % is not a final HTTP status', status
                USING ERRCODE = '22023',
                      DETAIL = 'Only final responses (200 to 599) can be stored and replayed.',
                      HINT = 'Store the response the handler sends last, not an interim 1xx.';
        END IF;
        RAISE EXCEPTION 'idem_http_result: headers must be a JSON object'
            USING ERRCODE = '22023',
                  DETAIL = format('The headers given are a JSON %s.', jsonb_typeof(headers)),
                  HINT = 'Pass an object of header names and values, for example ''{"Content-Type": "application/json"}''.';
    END IF;
    IF headers <> '{}' THEN
        -- Names are tokens, so no allowed name holds a comma.
        allow := CASE WHEN allow_headers IS NULL
                      THEN '{cache-control,content-disposition,content-language,content-location,content-type,etag,expires,last-modified,link,location,preference-applied,retry-after,vary}'::text[]
                      ELSE string_to_array(lower(array_to_string(allow_headers, ',')), ',') END;
        -- [{"key": ..., "value": ..., "id": ...}, ...]: plain expressions
        -- from here on, no query per header.
        pairs := jsonb_path_query_array(headers, '$.keyvalue()');
        FOR i IN 0 .. jsonb_array_length(pairs) - 1 LOOP
            n := pairs -> i ->> 'key';
            ln := lower(n);
            IF ln !~ '^[-!#$%&''*+.^_`|~0-9a-z]+$' THEN
                RAISE EXCEPTION 'idem_http_result: invalid header name "%"', n
                    USING ERRCODE = '22023',
                          DETAIL = 'A header name is a token: letters, digits and !#$%&''*+-.^_`|~ only.',
                          HINT = 'Check the names of the headers passed.';
            END IF;
            v := pairs -> i -> 'value';
            t := jsonb_typeof(v);
            IF t IN ('string', 'number', 'boolean') THEN
                vals := ARRAY[v #>> '{}'];
            ELSIF t = 'array' AND NOT jsonb_path_exists(v, '$[*] ? (@.type() != "string" && @.type() != "number" && @.type() != "boolean")') THEN
                vals := ARRAY(SELECT x #>> '{}' FROM jsonb_array_elements(v) WITH ORDINALITY AS a(x, o) ORDER BY o);
            ELSIF t = 'null' THEN
                CONTINUE;
            ELSE
                RAISE EXCEPTION 'idem_http_result: invalid value of header "%"', n
                    USING ERRCODE = '22023',
                          DETAIL = CASE WHEN t = 'array' THEN 'An array of header values may hold strings, numbers and booleans only.'
                                        ELSE format('The value is a JSON %s.', t) END,
                          HINT = 'Pass a string, or an array of strings for a repeated header.';
            END IF;
            IF array_to_string(vals, ' ') ~ '[\x01-\x08\x0a-\x1f\x7f]' THEN
                RAISE EXCEPTION 'idem_http_result: control character in the value of header "%"', n
                    USING ERRCODE = '22023',
                          DETAIL = 'A header value may not contain CR, LF or other control characters: replayed, they would split the response.',
                          HINT = 'Remove the control characters from the value.';
            END IF;
            IF ln = ANY (allow) THEN
                kept := kept || jsonb_build_object(ln, CASE WHEN t = 'array' THEN to_jsonb(vals) ELSE to_jsonb(vals[1]) END);
            END IF;
        END LOOP;
    END IF;
    RETURN jsonb_build_object('http', 1, 'status', status, 'headers', kept,
                              'body', translate(encode(body, 'base64'), E'\n', ''));
END
$$;

COMMENT ON FUNCTION @extschema@.idem_http_result(pg_catalog.int4, pg_catalog.jsonb, pg_catalog.bytea, pg_catalog.text[]) IS
    'The stored form of an HTTP response (status, allow-listed headers, body bytes as base64), for idem_complete or idem_finish; idem_http_begin replays it';

CREATE FUNCTION @extschema@.idem_http_begin(
    key pg_catalog.text,
    method pg_catalog.text,
    path pg_catalog.text,
    body pg_catalog.bytea DEFAULT NULL,
    scope pg_catalog.text DEFAULT 'http',
    require_key pg_catalog.bool DEFAULT true,
    ttl pg_catalog.interval DEFAULT NULL,
    content_type pg_catalog.text DEFAULT NULL,
    docs_url pg_catalog.text DEFAULT NULL,
    retry_after pg_catalog.int4 DEFAULT 1)
RETURNS @extschema@.idem_http_response
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    k text;
    canon bytea;
    fp text;
    rec @extschema@.idem_record;
    locked bool;
    stored jsonb;
    r @extschema@.idem_http_response;
BEGIN
    -- (Few expressions on the common path: PL/pgSQL prepares each one
    -- anew in every transaction.)
    IF method IS NULL OR path IS NULL OR scope IS NULL OR require_key IS NULL OR retry_after IS NULL OR retry_after < 0 THEN
        IF retry_after < 0 THEN
            RAISE EXCEPTION 'idem_http_begin: retry_after must not be negative'
                USING ERRCODE = '22023',
                      DETAIL = format('retry_after is %s seconds.', retry_after),
                      HINT = 'Pass the number of seconds a client should wait before it retries a request in flight.';
        END IF;
        RAISE EXCEPTION 'idem_http_begin: method, path, scope, require_key and retry_after must not be NULL'
            USING ERRCODE = '22004',
                  DETAIL = 'The request is identified by its method and path within the scope.',
                  HINT = 'Pass the request''s method and path; leave out the arguments that have defaults.';
    END IF;

    k := @extschema@.idem_http_parse_key(key);
    IF k IS NULL THEN
        IF key IS NULL OR btrim(key, E' \t') = '' THEN
            IF require_key THEN
                r := @extschema@.idem_http_problem(400, 'Idempotency-Key is missing',
                    format('%s %s requires an Idempotency-Key header.', upper(method), path),
                    'idempotency-key-missing', docs_url);
                r.action := 'missing_key';
                RETURN r;
            END IF;
            r.action := 'proceed';
            RETURN r;
        END IF;
        r := @extschema@.idem_http_problem(400, 'Idempotency-Key is invalid',
            'The Idempotency-Key header must hold one key of 1 to 255 visible ASCII characters, best a quoted string such as "8e03978e-40d5-43e8-bc93-6894a57f9324".',
            'idempotency-key-invalid', docs_url);
        r.action := 'invalid_key';
        RETURN r;
    END IF;

    -- The fingerprint of the request: method, path and the body's
    -- canonical form (a JSON body as jsonb's text, so key order and
    -- whitespace do not count; any other body as its bytes).
    canon := coalesce(body, ''::bytea);
    IF content_type ~* '^\s*application/([^;]*\+)?json\s*(;|$)' THEN
        BEGIN
            canon := convert_to(convert_from(canon, 'UTF8')::jsonb::text, 'UTF8');
        EXCEPTION WHEN data_exception THEN
            NULL;    -- not JSON after all: its bytes are its canonical form
        END;
    END IF;
    fp := 'idem-http/1 ' || encode(sha256(convert_to(upper(btrim(method)) || E'\n' || path || E'\n', 'UTF8') || canon), 'hex');

    -- Another transaction working on the key holds this lock until it
    -- ends; taking it never waits.  Without it, the record decides: a
    -- completed one is replayed (a concurrent replay may hold the lock),
    -- anything else is in flight.
    locked := pg_try_advisory_xact_lock(hashtextextended(scope || E'\n' || k, 7655));

    FOR attempt IN 1 .. 2 LOOP
        rec := @extschema@.idem_lookup(scope, k);
        IF rec.status IS NULL AND locked THEN
            -- The common case: a new key.  (false: a claim made without
            -- the lock committed meanwhile; look again.)
            IF @extschema@.idem_claim(scope, k, ttl, fp) THEN
                PERFORM set_config('idem_http.claim', scope || E'\n' || k, true);
                r.action := 'proceed';
                RETURN r;
            END IF;
            CONTINUE;
        END IF;
        -- idem_claim stores the SHA-256 of the fingerprint's text.
        IF rec.fingerprint <> sha256(convert_to(fp, getdatabaseencoding())) THEN
            r := @extschema@.idem_http_problem(422, 'Idempotency-Key is already used',
                'This Idempotency-Key was used for a request with another method, path or body; a key may not be reused for a different request.',
                'idempotency-key-mismatch', docs_url);
            r.action := 'mismatch';
            RETURN r;
        END IF;
        IF rec.status IN ('completed', 'failed') THEN
            stored := rec.result;
            IF jsonb_typeof(stored -> 'status') = 'number' AND stored ? 'http' THEN
                r.action := 'replay';
                r.status := (stored ->> 'status')::int4;
                r.headers := coalesce(stored -> 'headers', '{}') || '{"idempotent-replayed": "true"}'::jsonb;
                r.body := decode(stored ->> 'body', 'base64');
                RETURN r;
            END IF;
        END IF;
        IF rec.status IN ('completed', 'failed', 'issued', 'consumed')
           OR (rec.status = 'claimed' AND current_setting('idem_http.claim', true) IS DISTINCT FROM scope || E'\n' || k) THEN
            r := @extschema@.idem_http_problem(409, 'Idempotency-Key is already used',
                'A request with this Idempotency-Key was processed, but no response was stored, so it cannot be replayed.',
                'idempotency-key-used', docs_url);
            r.action := 'no_response';
            RETURN r;
        END IF;
        IF rec.status = 'claimed' THEN
            r.action := 'proceed';    -- claimed earlier in this transaction
            RETURN r;
        END IF;
        IF NOT locked OR (rec.status = 'in_progress' AND rec.locked_until > clock_timestamp()) THEN
            r := @extschema@.idem_http_problem(409, 'A request with this Idempotency-Key is in progress',
                'The first request with this Idempotency-Key has not finished yet; retry after the time given in Retry-After.',
                'idempotency-key-in-flight', docs_url,
                jsonb_build_object('retry-after', retry_after::text));
            r.action := 'in_flight';
            RETURN r;
        END IF;
        -- No live record, a retryable failure or a lease that ran out:
        -- claim it (false only when a claim that did not take the lock
        -- committed meanwhile: look again).
        IF @extschema@.idem_claim(scope, k, ttl, fp) THEN
            PERFORM set_config('idem_http.claim', scope || E'\n' || k, true);
            r.action := 'proceed';
            RETURN r;
        END IF;
    END LOOP;
    r := @extschema@.idem_http_problem(409, 'A request with this Idempotency-Key is in progress',
        'The first request with this Idempotency-Key has not finished yet; retry after the time given in Retry-After.',
        'idempotency-key-in-flight', docs_url,
        jsonb_build_object('retry-after', retry_after::text));
    r.action := 'in_flight';
    RETURN r;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_http_begin(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.bytea, pg_catalog.text, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.text, pg_catalog.int4) IS
    'Begin an HTTP request with an Idempotency-Key in the handler''s transaction: proceed (the key is claimed), or the response to send (replay, in_flight 409, mismatch 422, missing_key or invalid_key 400, no_response 409)';

CREATE FUNCTION @extschema@.idem_http_finish(
    key pg_catalog.text,
    status pg_catalog.int4,
    headers pg_catalog.jsonb DEFAULT NULL,
    body pg_catalog.bytea DEFAULT NULL,
    scope pg_catalog.text DEFAULT 'http',
    allow_headers pg_catalog.text[] DEFAULT NULL)
RETURNS pg_catalog.void
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    k text;
BEGIN
    k := @extschema@.idem_http_parse_key(key);
    IF k IS NULL THEN
        IF key IS NULL OR btrim(key, E' \t') = '' THEN
            RETURN;    -- a request without a key (require_key false): nothing to store
        END IF;
        RAISE EXCEPTION 'idem_http_finish: invalid Idempotency-Key header value'
            USING ERRCODE = '22023',
                  DETAIL = 'The key is one value of 1 to 255 visible ASCII characters, bare or as a quoted string.',
                  HINT = 'Pass the header value that idem_http_begin answered proceed for.';
    END IF;
    PERFORM @extschema@.idem_complete(scope, k,
        @extschema@.idem_http_result(status, headers, body, allow_headers));
END
$$;

COMMENT ON FUNCTION @extschema@.idem_http_finish(pg_catalog.text, pg_catalog.int4, pg_catalog.jsonb, pg_catalog.bytea, pg_catalog.text, pg_catalog.text[]) IS
    'Store the response of a request begun with idem_http_begin (status, allow-listed headers, body bytes) with its key, in the handler''s transaction; nothing for a request without a key';

--------------------------------------------------------------------------
-- PostgREST (docs/http.md#postgrest)
--------------------------------------------------------------------------

-- Raise r as PostgREST's custom error (SQLSTATE PGRST): the status and
-- headers in DETAIL, a body of PostgREST's own shape (code, message,
-- details, hint) in MESSAGE.  PostgREST sends application/json with it;
-- the problem's fields are mapped onto those four.
CREATE FUNCTION @extschema@.idem_http_postgrest_raise(r @extschema@.idem_http_response)
RETURNS pg_catalog.void
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    hdrs jsonb;
    msg jsonb;
BEGIN
    IF r.status IS NULL THEN
        RAISE EXCEPTION 'idem_http_postgrest_raise: the response has no status'
            USING ERRCODE = '22004',
                  DETAIL = format('Action %s carries no response to send.', coalesce(r.action, 'NULL')),
                  HINT = 'Raise only the answers of idem_http_begin whose action is not proceed.';
    END IF;
    SELECT coalesce(jsonb_object_agg(e.key, CASE WHEN jsonb_typeof(e.value) = 'array'
                                                 THEN to_jsonb(array_to_string(ARRAY(SELECT jsonb_array_elements_text(e.value)), ', '))
                                                 ELSE e.value END), '{}')
      INTO hdrs
      FROM jsonb_each(coalesce(r.headers, '{}')) AS e
     WHERE e.key <> 'content-type';
    IF r.problem IS NOT NULL THEN
        msg := jsonb_build_object('code', coalesce(r.problem ->> 'code', r.status::text),
                                  'message', r.problem ->> 'title',
                                  'details', r.problem ->> 'detail',
                                  'hint', 'See ' || (r.problem ->> 'type'));
    ELSE
        msg := jsonb_build_object('code', 'idempotent-replayed',
                                  'message', 'This request was already processed: its stored status and headers are replayed.',
                                  'details', 'PostgREST cannot send the stored body from here; an RPC function can (docs/http.md).',
                                  'hint', NULL);
    END IF;
    RAISE SQLSTATE 'PGRST'
        USING MESSAGE = msg::text,
              DETAIL = jsonb_build_object('status', r.status, 'headers', hdrs)::text;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_http_postgrest_raise(@extschema@.idem_http_response) IS
    'Raise an answer of idem_http_begin as PostgREST''s custom error (SQLSTATE PGRST): its status and headers, and the problem as PostgREST''s code, message, details and hint';

-- PostgREST's db-pre-request function: for the methods named (POST and
-- PATCH by default), 400 without a valid key where one is required, 409
-- while a request with the key is in flight.  For a table or view it
-- takes the claim itself (PostgREST gives the pre-request no body: the
-- fingerprint is the method and path) and answers 422, and 409 for a
-- key already used.  For an RPC (/rpc/...) the function's call of
-- idem_http_postgrest_rpc takes the claim, with its arguments.
CREATE FUNCTION @extschema@.idem_http_postgrest_pre_request(
    scope pg_catalog.text DEFAULT 'http',
    require_key pg_catalog.bool DEFAULT true,
    methods pg_catalog.text[] DEFAULT '{POST,PATCH}',
    ttl pg_catalog.interval DEFAULT NULL,
    docs_url pg_catalog.text DEFAULT NULL)
RETURNS pg_catalog.void
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    m text := upper(nullif(current_setting('request.method', true), ''));
    p text := nullif(current_setting('request.path', true), '');
    h text := nullif(current_setting('request.headers', true), '');
    raw text;
    k text;
    r @extschema@.idem_http_response;
BEGIN
    IF m IS NULL OR p IS NULL OR NOT m = ANY (methods) THEN
        RETURN;
    END IF;
    raw := h::json ->> 'idempotency-key';
    IF p !~ '^/rpc/' THEN
        r := @extschema@.idem_http_begin(raw, m, p, NULL, scope, require_key, ttl, NULL, docs_url);
        IF r.action = 'proceed' THEN
            IF raw IS NOT NULL THEN
                PERFORM set_config('idem_http.postgrest',
                    jsonb_build_object('scope', scope, 'key', raw)::text, true);
            END IF;
            RETURN;
        END IF;
        PERFORM @extschema@.idem_http_postgrest_raise(r);
    END IF;
    -- An RPC: the key is checked and locked here; the claim waits for the
    -- function's arguments (idem_http_postgrest_rpc).
    IF raw IS NULL OR btrim(raw, E' \t') = '' THEN
        IF require_key THEN
            r := @extschema@.idem_http_problem(400, 'Idempotency-Key is missing',
                format('%s %s requires an Idempotency-Key header.', m, p),
                'idempotency-key-missing', docs_url);
            PERFORM @extschema@.idem_http_postgrest_raise(r);
        END IF;
        RETURN;
    END IF;
    k := @extschema@.idem_http_parse_key(raw);
    IF k IS NULL THEN
        r := @extschema@.idem_http_begin(raw, m, p, NULL, scope, require_key, ttl, NULL, docs_url);
        PERFORM @extschema@.idem_http_postgrest_raise(r);
    END IF;
    IF NOT pg_try_advisory_xact_lock(hashtextextended(scope || E'\n' || k, 7655)) THEN
        r := @extschema@.idem_http_problem(409, 'A request with this Idempotency-Key is in progress',
            'The first request with this Idempotency-Key has not finished yet; retry after the time given in Retry-After.',
            'idempotency-key-in-flight', docs_url, '{"retry-after": "1"}');
        PERFORM @extschema@.idem_http_postgrest_raise(r);
    END IF;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_http_postgrest_pre_request(pg_catalog.text, pg_catalog.bool, pg_catalog.text[], pg_catalog.interval, pg_catalog.text) IS
    'PostgREST db-pre-request: reads request.method, request.path and request.headers; 400 without a valid Idempotency-Key, 409 in flight; claims the key for tables and views (422 on reuse), leaves RPCs to idem_http_postgrest_rpc';

-- The first call of an idempotent RPC function under PostgREST, with the
-- function's arguments as its body: proceed (do the work, then
-- idem_http_postgrest_finish), or replay (response.status and
-- response.headers are set: return the body), or PostgREST's error for
-- 400, 409 and 422.
CREATE FUNCTION @extschema@.idem_http_postgrest_rpc(
    args pg_catalog.jsonb,
    scope pg_catalog.text DEFAULT 'http',
    require_key pg_catalog.bool DEFAULT true,
    ttl pg_catalog.interval DEFAULT NULL,
    docs_url pg_catalog.text DEFAULT NULL)
RETURNS @extschema@.idem_http_response
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    m text := upper(coalesce(nullif(current_setting('request.method', true), ''), 'POST'));
    p text := coalesce(nullif(current_setting('request.path', true), ''), '');
    h text := nullif(current_setting('request.headers', true), '');
    raw text := h::json ->> 'idempotency-key';
    r @extschema@.idem_http_response;
BEGIN
    IF m IN ('GET', 'HEAD') THEN
        r.action := 'proceed';    -- a read: nothing to make idempotent
        RETURN r;
    END IF;
    r := @extschema@.idem_http_begin(raw, m, p, convert_to(coalesce(args, 'null')::text, 'UTF8'),
                                     scope, require_key, ttl, NULL, docs_url);
    IF r.action = 'proceed' THEN
        IF raw IS NOT NULL THEN
            PERFORM set_config('idem_http.postgrest',
                jsonb_build_object('scope', scope, 'key', raw)::text, true);
        END IF;
        RETURN r;
    END IF;
    IF r.action = 'replay' THEN
        PERFORM set_config('response.status', r.status::text, true);
        PERFORM set_config('response.headers',
            coalesce((SELECT jsonb_agg(jsonb_build_object(e.key, v.value) ORDER BY e.key, v.n)
                        FROM jsonb_each(r.headers) AS e,
                             LATERAL (SELECT x AS value, o AS n
                                        FROM jsonb_array_elements_text(CASE jsonb_typeof(e.value)
                                                 WHEN 'array' THEN e.value
                                                 ELSE jsonb_build_array(e.value) END)
                                             WITH ORDINALITY AS a(x, o)) AS v),
                     '[]')::text, true);
        RETURN r;
    END IF;
    PERFORM @extschema@.idem_http_postgrest_raise(r);
    RETURN r;    -- not reached
END
$$;

COMMENT ON FUNCTION @extschema@.idem_http_postgrest_rpc(pg_catalog.jsonb, pg_catalog.text, pg_catalog.bool, pg_catalog.interval, pg_catalog.text) IS
    'Begin an idempotent PostgREST RPC with its arguments as the body: proceed, or replay (response.status and response.headers set: return the body), or PostgREST''s error for 400, 409 and 422';

-- The last call of an idempotent RPC (or of a trigger on a table endpoint):
-- stores the response with the key the request was begun with and sets
-- response.status and response.headers, so that the first answer and
-- its replays agree.  Without a key it only sets them.
CREATE FUNCTION @extschema@.idem_http_postgrest_finish(
    status pg_catalog.int4,
    headers pg_catalog.jsonb DEFAULT NULL,
    body pg_catalog.bytea DEFAULT NULL,
    allow_headers pg_catalog.text[] DEFAULT NULL)
RETURNS pg_catalog.void
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    claim jsonb := nullif(current_setting('idem_http.postgrest', true), '')::jsonb;
BEGIN
    IF claim IS NOT NULL THEN
        PERFORM @extschema@.idem_http_finish(claim ->> 'key', status, headers, body,
                                             claim ->> 'scope', allow_headers);
    ELSE
        PERFORM @extschema@.idem_http_result(status, headers, body, allow_headers);    -- the same checks
    END IF;
    PERFORM set_config('response.status', status::text, true);
    IF headers IS NOT NULL AND headers <> '{}' THEN
        PERFORM set_config('response.headers',
            (SELECT jsonb_agg(jsonb_build_object(e.key, v.value) ORDER BY e.key, v.n)
               FROM jsonb_each(headers) AS e,
                    LATERAL (SELECT x AS value, o AS n
                               FROM jsonb_array_elements_text(CASE jsonb_typeof(e.value)
                                        WHEN 'array' THEN e.value
                                        ELSE jsonb_build_array(e.value) END)
                                    WITH ORDINALITY AS a(x, o)) AS v)::text, true);
    END IF;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_http_postgrest_finish(pg_catalog.int4, pg_catalog.jsonb, pg_catalog.bytea, pg_catalog.text[]) IS
    'Store the response of a PostgREST request begun by idem_http_postgrest_rpc or the pre-request (in its transaction) and set response.status and response.headers to it';

-- Like idem_claim, executable by every role: what a caller may do is
-- decided by its privileges on idem_records (idem_grant).
GRANT EXECUTE ON FUNCTION
    @extschema@.idem_http_parse_key(pg_catalog.text),
    @extschema@.idem_http_problem(pg_catalog.int4, pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.jsonb),
    @extschema@.idem_http_result(pg_catalog.int4, pg_catalog.jsonb, pg_catalog.bytea, pg_catalog.text[]),
    @extschema@.idem_http_begin(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.bytea, pg_catalog.text, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.text, pg_catalog.int4),
    @extschema@.idem_http_finish(pg_catalog.text, pg_catalog.int4, pg_catalog.jsonb, pg_catalog.bytea, pg_catalog.text, pg_catalog.text[]),
    @extschema@.idem_http_postgrest_raise(@extschema@.idem_http_response),
    @extschema@.idem_http_postgrest_pre_request(pg_catalog.text, pg_catalog.bool, pg_catalog.text[], pg_catalog.interval, pg_catalog.text),
    @extschema@.idem_http_postgrest_rpc(pg_catalog.jsonb, pg_catalog.text, pg_catalog.bool, pg_catalog.interval, pg_catalog.text),
    @extschema@.idem_http_postgrest_finish(pg_catalog.int4, pg_catalog.jsonb, pg_catalog.bytea, pg_catalog.text[])
TO PUBLIC;

-- idem_transition_strict (issue 21): the objects added to sql/idempotency_machine.sql.
-- idem_transition that raises ID006 on a repeated event instead of
-- letting it through, so that an UPDATE setting other columns with it
-- (paid = paid + 100) fails as a whole on a repeat (docs/state-machines.md).
CREATE FUNCTION @extschema@.idem_transition_strict(
    machine pg_catalog.text,
    from_state pg_catalog.text,
    to_state pg_catalog.text)
RETURNS pg_catalog.text
AS 'MODULE_PATHNAME', 'idem_transition_strict'
LANGUAGE C STABLE CALLED ON NULL INPUT PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.idem_transition_strict(pg_catalog.text, pg_catalog.text, pg_catalog.text) IS
    'to_state when machine declares from_state -> to_state; error ID006 when they are equal and no such move is declared (a repeated event), ID004 otherwise';
