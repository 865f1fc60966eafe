
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
--   no_response   409: the key was used, but no replayable response was
--                 stored
--   unknown       500: the lease of the first attempt ran out after it
--                 marked its outside effect started (idem_effect_started)
--                 and before it stored a response: the effect may have
--                 happened.  Nothing is written, so every retry gets the
--                 same answer while the record stands.
--   reconcile     with on_unknown => 'reconcile' instead of unknown: the
--                 key is claimed; check the outside system by the key
--                 before repeating the effect
-- Errors for the client are application/problem+json bodies (RFC 9457).
--
-- Invariants (docs/security.md#http):
-- - Every call of one of our functions names its schema and casts every
--   argument to the declared type, so that no overload of the caller's
--   search_path or of a writable schema can bind instead; the PL/pgSQL
--   functions pin search_path = pg_catalog, pg_temp.
-- - No advisory lock: a request in flight is recognised by idem_claim
--   meeting the uncommitted record of another transaction within a
--   lock_timeout of 1 ms (a row lock on idem_records, which only roles
--   granted on it can take).
-- - A stored response is replayed only when idem_http_check, the check
--   idem_http_result stores through, accepts it unchanged.
-- - The fingerprint's parts are length-prefixed and include how the body
--   was read (idem_http_fingerprint).

-- What idem_http_begin answers, and what a handler sends.
CREATE TYPE @extschema@.idem_http_response AS (
    action  pg_catalog.text,
    status  pg_catalog.int4,
    headers pg_catalog.jsonb,
    body    pg_catalog.bytea,
    problem pg_catalog.jsonb
);

COMMENT ON TYPE @extschema@.idem_http_response IS
    'An answer of idem_http_begin: action (proceed, reconcile, replay, in_flight, mismatch, missing_key, invalid_key, no_response, unknown) and, except for proceed and reconcile, the HTTP status, headers and body to send';

-- The key of an Idempotency-Key header value: a Structured Field String
-- ("...", RFC 8941; \" and \\ unescaped), or, leniently, a bare run of
-- visible ASCII characters without a comma, not starting with a quote
-- (what most clients send).  NULL for NULL, a blank value, or an invalid
-- one: anything else, including two values joined by a comma with or
-- without a space (what a proxy makes of two headers), and keys longer
-- than 255 characters.  A key holding a comma must be quoted.  Plain SQL
-- without SET, fully qualified, so that the planner inlines it.
CREATE FUNCTION @extschema@.idem_http_parse_key(value pg_catalog.text)
RETURNS pg_catalog.text
LANGUAGE sql IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE
AS $$
SELECT CASE
    WHEN pg_catalog.btrim(value, E' \t'::pg_catalog.text) OPERATOR(pg_catalog.~) '^[\x21\x23-\x2b\x2d-\x7e][\x21-\x2b\x2d-\x7e]*$'::pg_catalog.text
         AND pg_catalog.length(pg_catalog.btrim(value, E' \t'::pg_catalog.text)) OPERATOR(pg_catalog.<=) 255
        THEN pg_catalog.btrim(value, E' \t'::pg_catalog.text)
    WHEN pg_catalog.btrim(value, E' \t'::pg_catalog.text) OPERATOR(pg_catalog.~) '^"([\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])+"$'::pg_catalog.text
         AND pg_catalog.length(pg_catalog.regexp_replace(pg_catalog.btrim(value, E' \t'::pg_catalog.text), '\\(.)'::pg_catalog.text, '\1'::pg_catalog.text, 'g'::pg_catalog.text))
             OPERATOR(pg_catalog.<=) 257
        THEN pg_catalog.regexp_replace(pg_catalog.btrim(value, E' \t'::pg_catalog.text), '^"|\\(["\\])|"$'::pg_catalog.text, '\1'::pg_catalog.text, 'g'::pg_catalog.text)
END
$$;

COMMENT ON FUNCTION @extschema@.idem_http_parse_key(pg_catalog.text) IS
    'The idempotency key of an Idempotency-Key header value (a quoted Structured Field String, or a bare run of visible ASCII without a comma), 1 to 255 characters; NULL when blank or invalid';
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

-- The one check of a response, for storing it and for replaying it:
-- status, headers, body (as base64 text) and the allow-list give the
-- stored form {"http": 1, "status": n, "headers": {lower-case name:
-- value or [values]}, "body": base64 or null}, or {"error": {sqlstate,
-- message, detail, hint}} naming the first thing wrong: a status outside
-- 200-599, headers that are not an object, a header name that is not an
-- HTTP token or that is given twice in different cases, a value that is
-- not a string (number, boolean) or an array of them, a control
-- character other than tab in a value (CR, LF: a header injection on
-- replay), an allow-list naming a header that is never stored, a body
-- that is not base64.  Only headers in allow_headers are kept (NULL: the
-- default list; '{*}': every header); the never-stored ones (set-cookie,
-- hop-by-hop and framing headers) are never kept and cannot be named in
-- the list.  idem_http_result raises the error; idem_http_begin replays
-- a stored result only when this function, with '{*}', gives it back
-- unchanged.
-- Errors are returned, not raised, so that a replay needs no
-- subtransaction.
CREATE FUNCTION @extschema@.idem_http_check(
    status pg_catalog.int4,
    headers pg_catalog.jsonb,
    body pg_catalog.text,
    allow_headers pg_catalog.text[])
RETURNS pg_catalog.jsonb
LANGUAGE plpgsql IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    never constant text[] := '{set-cookie,set-cookie2,content-length,transfer-encoding,connection,keep-alive,proxy-connection,upgrade,te,trailer,idempotent-replayed}';
    allow text[];
    kept jsonb := '{}';
    seen jsonb := '{}';
    pairs jsonb;
    n text;
    ln text;
    v jsonb;
    t text;
    vals text[];
BEGIN
    IF status IS NULL THEN
        RETURN jsonb_build_object('error', jsonb_build_object('sqlstate', '22004',
            'message', 'status must not be NULL',
            'detail', 'A stored response needs the HTTP status it was sent with.',
            'hint', 'Pass the status code, for example 201.'));
    END IF;
    IF NOT (status BETWEEN 200 AND 599) THEN
        RETURN jsonb_build_object('error', jsonb_build_object('sqlstate', '22023',
            'message', format('status %s is not a final HTTP status', status),
            'detail', 'Only final responses (200 to 599) can be stored and replayed.',
            'hint', 'Store the response the handler sends last, not an interim 1xx.'));
    END IF;
    IF jsonb_typeof(headers) <> 'object' THEN
        RETURN jsonb_build_object('error', jsonb_build_object('sqlstate', '22023',
            'message', 'headers must be a JSON object',
            'detail', format('The headers given are a JSON %s.', jsonb_typeof(headers)),
            'hint', 'Pass an object of header names and values, for example ''{"Content-Type": "application/json"}''.'));
    END IF;
    IF body !~ '^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$' THEN
        RETURN jsonb_build_object('error', jsonb_build_object('sqlstate', '22023',
            'message', 'the body is not base64',
            'detail', 'A stored body is the base64 of its bytes, without line breaks.',
            'hint', 'Store responses with idem_http_result.'));
    END IF;
    -- Names are tokens, so no allowed name holds a comma.
    allow := CASE WHEN allow_headers IS NULL
                  THEN '{cache-control,content-disposition,content-language,content-location,content-type,etag,expires,last-modified,link,location,preference-applied,retry-after,vary}'::text[]
                  ELSE string_to_array(lower(array_to_string(allow_headers, ',')), ',') END;
    IF allow && never THEN
        RETURN jsonb_build_object('error', jsonb_build_object('sqlstate', '22023',
            'message', format('header "%s" is never stored', (SELECT min(a) FROM unnest(allow) AS a WHERE a = ANY (never))),
            'detail', 'Set-Cookie would hand a session to whoever holds the key, and hop-by-hop and framing headers (Content-Length, Transfer-Encoding, Connection, ...) describe one connection, not the response.',
            'hint', 'Leave the header out of allow_headers.'));
    END IF;
    IF headers <> '{}' THEN
        -- [{"key": ..., "value": ..., "id": ...}, ...]: plain expressions
        -- from here on, no query per header.
        pairs := jsonb_path_query_array(headers, '$.keyvalue()');
        FOR i IN 0 .. jsonb_array_length(pairs) - 1 LOOP
            n := pairs -> i ->> 'key';
            ln := lower(n);
            IF ln !~ '^[-!#$%&''*+.^_`|~0-9a-z]+$' THEN
                RETURN jsonb_build_object('error', jsonb_build_object('sqlstate', '22023',
                    'message', format('invalid header name "%s"', n),
                    'detail', 'A header name is a token: letters, digits and !#$%&''*+-.^_`|~ only.',
                    'hint', 'Check the names of the headers passed.'));
            END IF;
            IF seen ? ln THEN
                RETURN jsonb_build_object('error', jsonb_build_object('sqlstate', '22023',
                    'message', format('header "%s" is given twice', n),
                    'detail', 'Header names are case-insensitive: names that differ only in case are one header.',
                    'hint', 'Give each header once; pass an array of values for a repeated header.'));
            END IF;
            seen := seen || jsonb_build_object(ln, true);
            v := pairs -> i -> 'value';
            t := jsonb_typeof(v);
            IF t IN ('string', 'number', 'boolean') THEN
                vals := ARRAY[v #>> '{}'];
            ELSIF t = 'array' AND NOT jsonb_path_exists(v, '$[*] ? (@.type() != "string" && @.type() != "number" && @.type() != "boolean")') THEN
                vals := ARRAY(SELECT x #>> '{}' FROM jsonb_array_elements(v) WITH ORDINALITY AS a(x, o) ORDER BY o);
            ELSIF t = 'null' THEN
                CONTINUE;
            ELSE
                RETURN jsonb_build_object('error', jsonb_build_object('sqlstate', '22023',
                    'message', format('invalid value of header "%s"', n),
                    'detail', CASE WHEN t = 'array' THEN 'An array of header values may hold strings, numbers and booleans only.'
                                   ELSE format('The value is a JSON %s.', t) END,
                    'hint', 'Pass a string, or an array of strings for a repeated header.'));
            END IF;
            IF array_to_string(vals, ' ') ~ '[\x01-\x08\x0a-\x1f\x7f]' THEN
                RETURN jsonb_build_object('error', jsonb_build_object('sqlstate', '22023',
                    'message', format('control character in the value of header "%s"', n),
                    'detail', 'A header value may not contain CR, LF or other control characters: replayed, they would split the response.',
                    'hint', 'Remove the control characters from the value.'));
            END IF;
            IF ln = ANY (allow) OR (allow = '{*}' AND NOT ln = ANY (never)) THEN
                kept := kept || jsonb_build_object(ln, CASE WHEN t = 'array' THEN to_jsonb(vals) ELSE to_jsonb(vals[1]) END);
            END IF;
        END LOOP;
    END IF;
    RETURN jsonb_build_object('http', 1, 'status', status, 'headers', kept, 'body', body);
END
$$;

COMMENT ON FUNCTION @extschema@.idem_http_check(pg_catalog.int4, pg_catalog.jsonb, pg_catalog.text, pg_catalog.text[]) IS
    'The check of an HTTP response shared by storing and replaying it: its stored form (status, allow-listed headers, base64 body), or {"error": {sqlstate, message, detail, hint}} naming what is wrong';

-- The stored form of a response (idem_http_check), or its error raised.
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
    v jsonb := @extschema@.idem_http_check(status::pg_catalog.int4,
                   coalesce(headers, '{}'::pg_catalog.jsonb)::pg_catalog.jsonb,
                   translate(encode(body, 'base64'), E'\n', '')::pg_catalog.text,
                   allow_headers::pg_catalog.text[]);
BEGIN
    IF v ? 'error' THEN
        RAISE EXCEPTION USING
            ERRCODE = v #>> '{error,sqlstate}',
            MESSAGE = 'idem_http_result: ' || (v #>> '{error,message}'),
            DETAIL = v #>> '{error,detail}',
            HINT = v #>> '{error,hint}';
    END IF;
    RETURN v;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_http_result(pg_catalog.int4, pg_catalog.jsonb, pg_catalog.bytea, pg_catalog.text[]) IS
    'The stored form of an HTTP response (status, allow-listed headers, body bytes as base64), for idem_complete or idem_finish; idem_http_begin replays it';

-- The fingerprint idem_http_begin claims a key with (version 2): SHA-256
-- over length-prefixed parts (the octet length as 4 bytes, then the
-- bytes): the method in upper case, the path, how the body was read
-- ("json" or "bytes"), the media type (for JSON its type/subtype in lower
-- case; otherwise the whole Content-Type in lower case without spaces
-- and tabs) and the body's canonical form (a JSON body as jsonb's text,
-- so key order and whitespace do not count; any other body as its
-- bytes).  Version 1 is 0.5.0's format (METHOD \n path \n body, no
-- lengths, no media type): idem_http_begin verifies records stored
-- before the upgrade with it.
CREATE FUNCTION @extschema@.idem_http_fingerprint(
    method pg_catalog.text,
    path pg_catalog.text,
    body pg_catalog.bytea DEFAULT NULL,
    content_type pg_catalog.text DEFAULT NULL,
    version pg_catalog.int4 DEFAULT 2)
RETURNS pg_catalog.text
LANGUAGE plpgsql IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    canon bytea := coalesce(body, ''::bytea);
    json bool := false;
    m bytea := convert_to(upper(btrim(method)), 'UTF8');
    p bytea := convert_to(path, 'UTF8');
    mode bytea;
    media bytea;
BEGIN
    IF method IS NULL OR path IS NULL OR version IS NULL OR version NOT IN (1, 2) THEN
        RAISE EXCEPTION 'idem_http_fingerprint: method and path must not be NULL, version must be 1 or 2'
            USING ERRCODE = CASE WHEN version NOT IN (1, 2) THEN '22023' ELSE '22004' END,
                  DETAIL = format('method %s, path %s, version %s.',
                                  coalesce(quote_literal(method), 'NULL'), coalesce(quote_literal(path), 'NULL'),
                                  coalesce(version::text, 'NULL')),
                  HINT = 'Pass the request''s method and path; version 2 is the current format, 1 the format of 0.5.0.';
    END IF;
    IF content_type ~* '^\s*application/([^;]*\+)?json\s*(;|$)' THEN
        BEGIN
            canon := convert_to(convert_from(canon, 'UTF8')::jsonb::text, 'UTF8');
            json := true;
        EXCEPTION WHEN data_exception THEN
            NULL;    -- not JSON after all: its bytes are its canonical form
        END;
    END IF;
    IF version = 1 THEN
        RETURN 'idem-http/1 ' || encode(sha256(m || '\x0a'::bytea || p || '\x0a'::bytea || canon), 'hex');
    END IF;
    mode := convert_to(CASE WHEN json THEN 'json' ELSE 'bytes' END, 'UTF8');
    media := convert_to(CASE WHEN json THEN lower(btrim(split_part(content_type, ';', 1), E' \t'))
                             ELSE coalesce(lower(translate(content_type, E' \t', '')), '') END, 'UTF8');
    RETURN 'idem-http/2 ' || encode(sha256(
        int4send(octet_length(m)) || m || int4send(octet_length(p)) || p ||
        int4send(octet_length(mode)) || mode || int4send(octet_length(media)) || media ||
        int4send(octet_length(canon)) || canon), 'hex');
END
$$;

COMMENT ON FUNCTION @extschema@.idem_http_fingerprint(pg_catalog.text, pg_catalog.text, pg_catalog.bytea, pg_catalog.text, pg_catalog.int4) IS
    'The fingerprint idem_http_begin claims a key with: SHA-256 over the length-prefixed method, path, body reading (json or bytes), media type and canonical body (version 2); version 1 is the format of 0.5.0';

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
    retry_after pg_catalog.int4 DEFAULT 1,
    on_unknown pg_catalog.text DEFAULT 'refuse')
RETURNS @extschema@.idem_http_response
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    k text;
    effect_unknown bool := false;
    fp text;
    old text;
    rec @extschema@.idem_record;
    claimed bool;
    saved text;
    stored jsonb;
    v jsonb;
    r @extschema@.idem_http_response;
BEGIN
    -- (Few expressions on the common path: PL/pgSQL prepares each one
    -- anew in every transaction.)
    IF method IS NULL OR path IS NULL OR scope IS NULL OR require_key IS NULL OR retry_after IS NULL OR retry_after < 0
       OR on_unknown IS NULL OR on_unknown NOT IN ('refuse', 'reconcile') THEN
        IF retry_after < 0 THEN
            RAISE EXCEPTION 'idem_http_begin: retry_after must not be negative'
                USING ERRCODE = '22023',
                      DETAIL = format('retry_after is %s seconds.', retry_after),
                      HINT = 'Pass the number of seconds a client should wait before it retries a request in flight.';
        END IF;
        IF on_unknown NOT IN ('refuse', 'reconcile') THEN
            RAISE EXCEPTION 'idem_http_begin: on_unknown must be refuse or reconcile'
                USING ERRCODE = '22023',
                      DETAIL = format('on_unknown is %s.', quote_literal(on_unknown)),
                      HINT = 'Pass reconcile only when the handler can check the outside system by the key before it repeats the effect.';
        END IF;
        RAISE EXCEPTION 'idem_http_begin: method, path, scope, require_key, retry_after and on_unknown must not be NULL'
            USING ERRCODE = '22004',
                  DETAIL = 'The request is identified by its method and path within the scope.',
                  HINT = 'Pass the request''s method and path; leave out the arguments that have defaults.';
    END IF;

    k := @extschema@.idem_http_parse_key(key::pg_catalog.text);
    IF k IS NULL THEN
        IF key IS NULL OR btrim(key, E' \t') = '' THEN
            IF require_key THEN
                r := @extschema@.idem_http_problem(400::pg_catalog.int4, 'Idempotency-Key is missing'::pg_catalog.text,
                    format('%s %s requires an Idempotency-Key header.', upper(method), path)::pg_catalog.text,
                    'idempotency-key-missing'::pg_catalog.text, docs_url::pg_catalog.text, NULL::pg_catalog.jsonb);
                r.action := 'missing_key';
                RETURN r;
            END IF;
            r.action := 'proceed';
            RETURN r;
        END IF;
        r := @extschema@.idem_http_problem(400::pg_catalog.int4, 'Idempotency-Key is invalid'::pg_catalog.text,
            'The Idempotency-Key header must hold one key of 1 to 255 visible ASCII characters, best a quoted string such as "8e03978e-40d5-43e8-bc93-6894a57f9324".'::pg_catalog.text,
            'idempotency-key-invalid'::pg_catalog.text, docs_url::pg_catalog.text, NULL::pg_catalog.jsonb);
        r.action := 'invalid_key';
        RETURN r;
    END IF;

    fp := @extschema@.idem_http_fingerprint(method::pg_catalog.text, path::pg_catalog.text, body::pg_catalog.bytea,
                                            content_type::pg_catalog.text, 2::pg_catalog.int4);
    FOR attempt IN 1 .. 2 LOOP
        rec := @extschema@.idem_lookup(scope::pg_catalog.text, k::pg_catalog.text);
        IF rec.status IS NOT NULL THEN
            -- idem_claim stores the SHA-256 of the fingerprint's text.  A
            -- record stored before 0.6.0 holds a version 1 fingerprint.
            -- (A record without one, from idem_claim or idem_begin, takes any.)
            IF rec.fingerprint <> sha256(convert_to(fp, getdatabaseencoding())) THEN
                old := @extschema@.idem_http_fingerprint(method::pg_catalog.text, path::pg_catalog.text, body::pg_catalog.bytea,
                                                         content_type::pg_catalog.text, 1::pg_catalog.int4);
                IF rec.fingerprint <> sha256(convert_to(old, getdatabaseencoding())) THEN
                    r := @extschema@.idem_http_problem(422::pg_catalog.int4, 'Idempotency-Key is already used'::pg_catalog.text,
                        'This Idempotency-Key was used for a request with another method, path or body; a key may not be reused for a different request.'::pg_catalog.text,
                        'idempotency-key-mismatch'::pg_catalog.text, docs_url::pg_catalog.text, NULL::pg_catalog.jsonb);
                    r.action := 'mismatch';
                    RETURN r;
                END IF;
                fp := old;    -- a claim taking the record over keeps its format
            END IF;
            IF rec.status IN ('completed', 'failed') AND rec.result ? 'http' THEN
                -- Replayed only as idem_http_result would store it.
                stored := rec.result;
                v := @extschema@.idem_http_check(
                    CASE WHEN jsonb_typeof(stored -> 'status') = 'number' AND (stored ->> 'status') ~ '^[0-9]{1,9}$'
                         THEN (stored ->> 'status')::int4 END::pg_catalog.int4,
                    (stored -> 'headers')::pg_catalog.jsonb,
                    (stored ->> 'body')::pg_catalog.text,
                    '{*}'::pg_catalog.text[]);
                IF v = stored THEN
                    r.action := 'replay';
                    r.status := (stored ->> 'status')::int4;
                    r.headers := (stored -> 'headers') || '{"idempotent-replayed": "true"}'::jsonb;
                    r.body := decode(stored ->> 'body', 'base64');
                    RETURN r;
                END IF;
            END IF;
            IF rec.status IN ('completed', 'failed', 'issued', 'consumed')
               OR (rec.status = 'claimed' AND current_setting('idem_http.claim', true) IS DISTINCT FROM jsonb_build_array(scope, k)::text) THEN
                r := @extschema@.idem_http_problem(409::pg_catalog.int4, 'Idempotency-Key is already used'::pg_catalog.text,
                    'A request with this Idempotency-Key was processed, but no response was stored, so it cannot be replayed.'::pg_catalog.text,
                    'idempotency-key-used'::pg_catalog.text, docs_url::pg_catalog.text, NULL::pg_catalog.jsonb);
                r.action := 'no_response';
                RETURN r;
            END IF;
            IF rec.status = 'claimed' THEN
                -- claimed earlier in this transaction: the same answer
                r.action := CASE WHEN on_unknown = 'reconcile' AND rec.effect_unknown_attempt IS NOT NULL
                                 THEN 'reconcile' ELSE 'proceed' END;
                RETURN r;
            END IF;
            IF rec.status = 'in_progress' AND rec.locked_until > clock_timestamp() THEN
                EXIT;    -- a live lease: in flight
            END IF;
            -- A lease that ran out after its mark: its effect may have
            -- happened.  (A retryable failure after that is a worker's
            -- verdict that a retry is safe: reconcile only if asked.)
            effect_unknown := rec.status = 'in_progress' AND rec.effect_started_at IS NOT NULL;
            IF effect_unknown AND on_unknown = 'refuse' THEN
                r := @extschema@.idem_http_problem(500::pg_catalog.int4, 'The outcome of the first request is unknown'::pg_catalog.text,
                    'The first request with this Idempotency-Key stopped after it began an outside effect and before it stored a response, so the effect may have happened. Check the resource before you retry; a retry with this key gets this answer until the server settles it or the key expires.'::pg_catalog.text,
                    'idempotency-key-outcome-unknown'::pg_catalog.text, docs_url::pg_catalog.text, NULL::pg_catalog.jsonb);
                r.action := 'unknown';
                RETURN r;
            END IF;
            effect_unknown := effect_unknown OR rec.effect_unknown_attempt IS NOT NULL;
        END IF;
        -- No live record, a retryable failure or a lease that ran out:
        -- claim it.  Another transaction holding the key (its record not
        -- committed yet) makes idem_claim wait: 1 ms of lock_timeout turns
        -- that wait into in_flight.  The setting is the caller's again
        -- after the claim (a subtransaction's error restores it itself).
        -- false: a claim committed meanwhile; look again.
        BEGIN
            saved := current_setting('lock_timeout');
            PERFORM set_config('lock_timeout', '1ms', true);
            claimed := @extschema@.idem_claim(scope::pg_catalog.text, k::pg_catalog.text,
                                              ttl::pg_catalog.interval, fp::pg_catalog.text);
            PERFORM set_config('lock_timeout', saved, true);
        EXCEPTION WHEN lock_not_available THEN
            EXIT;
        END;
        IF claimed THEN
            PERFORM set_config('idem_http.claim', jsonb_build_array(scope, k)::text, true);
            r.action := CASE WHEN effect_unknown AND on_unknown = 'reconcile' THEN 'reconcile' ELSE 'proceed' END;
            RETURN r;
        END IF;
        effect_unknown := false;
    END LOOP;
    r := @extschema@.idem_http_problem(409::pg_catalog.int4, 'A request with this Idempotency-Key is in progress'::pg_catalog.text,
        'The first request with this Idempotency-Key has not finished yet; retry after the time given in Retry-After.'::pg_catalog.text,
        'idempotency-key-in-flight'::pg_catalog.text, docs_url::pg_catalog.text,
        jsonb_build_object('retry-after', retry_after::text)::pg_catalog.jsonb);
    r.action := 'in_flight';
    RETURN r;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_http_begin(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.bytea, pg_catalog.text, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.text) IS
    'Begin an HTTP request with an Idempotency-Key in the handler''s transaction: proceed (the key is claimed), reconcile (claimed; an earlier attempt''s outside effect is unknown), or the response to send (replay, in_flight 409, mismatch 422, missing_key or invalid_key 400, no_response 409, unknown 500)';

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
    k := @extschema@.idem_http_parse_key(key::pg_catalog.text);
    IF k IS NULL THEN
        IF key IS NULL OR btrim(key, E' \t') = '' THEN
            RETURN;    -- a request without a key (require_key false): nothing to store
        END IF;
        RAISE EXCEPTION 'idem_http_finish: invalid Idempotency-Key header value'
            USING ERRCODE = '22023',
                  DETAIL = 'The key is one value of 1 to 255 visible ASCII characters, bare or as a quoted string.',
                  HINT = 'Pass the header value that idem_http_begin answered proceed for.';
    END IF;
    PERFORM @extschema@.idem_complete(scope::pg_catalog.text, k::pg_catalog.text,
        @extschema@.idem_http_result(status::pg_catalog.int4, headers::pg_catalog.jsonb, body::pg_catalog.bytea,
                                     allow_headers::pg_catalog.text[])::pg_catalog.jsonb);
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
-- PATCH by default), 400 without a valid key where one is required.  For
-- a table or view it takes the claim itself (PostgREST gives the
-- pre-request no body: the fingerprint is the method and path) and
-- answers 409 while a request with the key is in flight, 422, and 409
-- for a key already used.  For an RPC (/rpc/...) the function's call of
-- idem_http_postgrest_rpc takes the claim, with its arguments, and
-- answers those.
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
    r @extschema@.idem_http_response;
BEGIN
    IF m IS NULL OR p IS NULL OR NOT m = ANY (methods) THEN
        RETURN;
    END IF;
    raw := h::json ->> 'idempotency-key';
    IF p !~ '^/rpc/' THEN
        r := @extschema@.idem_http_begin(raw::pg_catalog.text, m::pg_catalog.text, p::pg_catalog.text, NULL::pg_catalog.bytea,
                                         scope::pg_catalog.text, require_key::pg_catalog.bool, ttl::pg_catalog.interval,
                                         NULL::pg_catalog.text, docs_url::pg_catalog.text, 1::pg_catalog.int4,
                                         'refuse'::pg_catalog.text);
        IF r.action = 'proceed' THEN
            IF raw IS NOT NULL THEN
                PERFORM set_config('idem_http.postgrest',
                    jsonb_build_object('scope', scope, 'key', raw)::text, true);
            END IF;
            RETURN;
        END IF;
        PERFORM @extschema@.idem_http_postgrest_raise(r::@extschema@.idem_http_response);
    END IF;
    -- An RPC: the key is checked here; the claim waits for the function's
    -- arguments (idem_http_postgrest_rpc), and so does the answer for a
    -- request in flight.
    IF raw IS NULL OR btrim(raw, E' \t') = '' THEN
        IF require_key THEN
            r := @extschema@.idem_http_problem(400::pg_catalog.int4, 'Idempotency-Key is missing'::pg_catalog.text,
                format('%s %s requires an Idempotency-Key header.', m, p)::pg_catalog.text,
                'idempotency-key-missing'::pg_catalog.text, docs_url::pg_catalog.text, NULL::pg_catalog.jsonb);
            PERFORM @extschema@.idem_http_postgrest_raise(r::@extschema@.idem_http_response);
        END IF;
        RETURN;
    END IF;
    IF @extschema@.idem_http_parse_key(raw::pg_catalog.text) IS NULL THEN
        r := @extschema@.idem_http_problem(400::pg_catalog.int4, 'Idempotency-Key is invalid'::pg_catalog.text,
            'The Idempotency-Key header must hold one key of 1 to 255 visible ASCII characters, best a quoted string such as "8e03978e-40d5-43e8-bc93-6894a57f9324".'::pg_catalog.text,
            'idempotency-key-invalid'::pg_catalog.text, docs_url::pg_catalog.text, NULL::pg_catalog.jsonb);
        PERFORM @extschema@.idem_http_postgrest_raise(r::@extschema@.idem_http_response);
    END IF;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_http_postgrest_pre_request(pg_catalog.text, pg_catalog.bool, pg_catalog.text[], pg_catalog.interval, pg_catalog.text) IS
    'PostgREST db-pre-request: reads request.method, request.path and request.headers; 400 without a valid Idempotency-Key; claims the key for tables and views (409 in flight, 422 on reuse), leaves RPCs to idem_http_postgrest_rpc';

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
    r := @extschema@.idem_http_begin(raw::pg_catalog.text, m::pg_catalog.text, p::pg_catalog.text,
                                     convert_to(coalesce(args, 'null')::text, 'UTF8')::pg_catalog.bytea,
                                     scope::pg_catalog.text, require_key::pg_catalog.bool, ttl::pg_catalog.interval,
                                     NULL::pg_catalog.text, docs_url::pg_catalog.text, 1::pg_catalog.int4,
                                     'refuse'::pg_catalog.text);
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
    PERFORM @extschema@.idem_http_postgrest_raise(r::@extschema@.idem_http_response);
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
        PERFORM @extschema@.idem_http_finish((claim ->> 'key')::pg_catalog.text, status::pg_catalog.int4,
                                             headers::pg_catalog.jsonb, body::pg_catalog.bytea,
                                             (claim ->> 'scope')::pg_catalog.text, allow_headers::pg_catalog.text[]);
    ELSE
        PERFORM @extschema@.idem_http_result(status::pg_catalog.int4, headers::pg_catalog.jsonb, body::pg_catalog.bytea,
                                             allow_headers::pg_catalog.text[]);    -- the same checks
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
    @extschema@.idem_http_check(pg_catalog.int4, pg_catalog.jsonb, pg_catalog.text, pg_catalog.text[]),
    @extschema@.idem_http_result(pg_catalog.int4, pg_catalog.jsonb, pg_catalog.bytea, pg_catalog.text[]),
    @extschema@.idem_http_fingerprint(pg_catalog.text, pg_catalog.text, pg_catalog.bytea, pg_catalog.text, pg_catalog.int4),
    @extschema@.idem_http_begin(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.bytea, pg_catalog.text, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.text),
    @extschema@.idem_http_finish(pg_catalog.text, pg_catalog.int4, pg_catalog.jsonb, pg_catalog.bytea, pg_catalog.text, pg_catalog.text[]),
    @extschema@.idem_http_postgrest_raise(@extschema@.idem_http_response),
    @extschema@.idem_http_postgrest_pre_request(pg_catalog.text, pg_catalog.bool, pg_catalog.text[], pg_catalog.interval, pg_catalog.text),
    @extschema@.idem_http_postgrest_rpc(pg_catalog.jsonb, pg_catalog.text, pg_catalog.bool, pg_catalog.interval, pg_catalog.text),
    @extschema@.idem_http_postgrest_finish(pg_catalog.int4, pg_catalog.jsonb, pg_catalog.bytea, pg_catalog.text[])
TO PUBLIC;
