-- idempotency 0.5.0 -> 0.6.0: hardening, round three; safe defaults.
-- The same objects are in the sql/idempotency*.sql sources of a fresh
-- 0.6.0 install.

\echo Use "ALTER EXTENSION idempotency UPDATE TO '0.6.0'" to load this file. \quit

-- HTTP: the Idempotency-Key layer hardened (docs/security.md#http).  Every
-- call of our functions is schema-qualified with every argument cast (the
-- pre-request passed untyped arguments that a text overload in a writable
-- schema could take); no advisory lock (a claim with a 1 ms lock_timeout
-- recognises a request in flight); a stored response is replayed only when
-- idem_http_check, the check idem_http_result stores through, accepts it;
-- the fingerprint is length-prefixed and includes how the body was read
-- (idem_http_fingerprint, version 2; records of 0.5.0 are verified with
-- version 1); a bare key with a comma is invalid; header names that
-- differ only in case are refused; set-cookie and hop-by-hop headers can
-- never be allowed.  The same objects as in sql/idempotency_http.sql.

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

-- The key of an Idempotency-Key header value: a Structured Field String
-- ("...", RFC 8941; \" and \\ unescaped), or, leniently, a bare run of
-- visible ASCII characters without a comma, not starting with a quote
-- (what most clients send).  NULL for NULL, a blank value, or an invalid
-- one: anything else, including two values joined by a comma with or
-- without a space (what a proxy makes of two headers), and keys longer
-- than 255 characters.  A key holding a comma must be quoted.  Plain SQL
-- without SET, fully qualified, so that the planner inlines it.
CREATE OR REPLACE FUNCTION @extschema@.idem_http_parse_key(value pg_catalog.text)
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

-- The stored form of a response (idem_http_check), or its error raised.
CREATE OR REPLACE FUNCTION @extschema@.idem_http_result(
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

CREATE OR REPLACE FUNCTION @extschema@.idem_http_begin(
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
                r.action := 'proceed';    -- claimed earlier in this transaction
                RETURN r;
            END IF;
            IF rec.status = 'in_progress' AND rec.locked_until > clock_timestamp() THEN
                EXIT;    -- a live lease: in flight
            END IF;
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
            r.action := 'proceed';
            RETURN r;
        END IF;
    END LOOP;
    r := @extschema@.idem_http_problem(409::pg_catalog.int4, 'A request with this Idempotency-Key is in progress'::pg_catalog.text,
        'The first request with this Idempotency-Key has not finished yet; retry after the time given in Retry-After.'::pg_catalog.text,
        'idempotency-key-in-flight'::pg_catalog.text, docs_url::pg_catalog.text,
        jsonb_build_object('retry-after', retry_after::text)::pg_catalog.jsonb);
    r.action := 'in_flight';
    RETURN r;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_http_begin(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.bytea, pg_catalog.text, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.text, pg_catalog.int4) IS
    'Begin an HTTP request with an Idempotency-Key in the handler''s transaction: proceed (the key is claimed), or the response to send (replay, in_flight 409, mismatch 422, missing_key or invalid_key 400, no_response 409)';

CREATE OR REPLACE FUNCTION @extschema@.idem_http_finish(
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

-- PostgREST's db-pre-request function: for the methods named (POST and
-- PATCH by default), 400 without a valid key where one is required.  For
-- a table or view it takes the claim itself (PostgREST gives the
-- pre-request no body: the fingerprint is the method and path) and
-- answers 409 while a request with the key is in flight, 422, and 409
-- for a key already used.  For an RPC (/rpc/...) the function's call of
-- idem_http_postgrest_rpc takes the claim, with its arguments, and
-- answers those.
CREATE OR REPLACE FUNCTION @extschema@.idem_http_postgrest_pre_request(
    scope pg_catalog.text DEFAULT 'http',
    require_key pg_catalog.bool DEFAULT true,
    methods pg_catalog.text[] DEFAULT '{POST,PATCH}',
    ttl pg_catalog.interval DEFAULT NULL,
    docs_url pg_catalog.text DEFAULT NULL)

-- maintenance: idem_maintain() purges the records and the outbox in one
-- call; idem_maintenance notes each run (idem_maintain and the background
-- worker); idem_purge_worker() and the view idem_health tell whether
-- anything purges the database, and what to do when nothing does.

-- When each part of the maintenance last ran and what it removed, written
-- by idem_maintain() and by the background worker's rounds, read by
-- idem_health.  One row per part; not dumped (a restored database has
-- not been purged yet).
CREATE TABLE @extschema@.idem_maintenance (
    part         pg_catalog.text COLLATE pg_catalog."C" NOT NULL,
    last_run     pg_catalog.timestamptz NOT NULL,
    last_removed pg_catalog.int8 NOT NULL,
    run_by       pg_catalog.text NOT NULL,
    CONSTRAINT idem_maintenance_pkey PRIMARY KEY (part),
    CONSTRAINT idem_maintenance_part_check CHECK
        (part OPERATOR(pg_catalog.=) ANY (ARRAY['records', 'outbox']::pg_catalog.text[]))
);

COMMENT ON TABLE @extschema@.idem_maintenance IS
    'When the purge of the records and of the outbox last ran, and what it removed; written by idem_maintain and the background worker, read through idem_health';

REVOKE ALL ON TABLE @extschema@.idem_maintenance FROM PUBLIC;
GRANT SELECT ON TABLE @extschema@.idem_maintenance TO PUBLIC;

-- Everything the extension stores that expires, in one call: the expired
-- records (idem_purge) and the outbox messages past their retention that
-- every consumer group acknowledged (idem_outbox_purge), up to batch_size
-- each; notes the run in idem_maintenance.  What a scheduler (pg_cron)
-- calls where no background worker runs.  Not public: run by the
-- extension's owner (or a role granted the privileges of both purges and
-- this function).
CREATE FUNCTION @extschema@.idem_maintain(
    batch_size pg_catalog.int4 DEFAULT 10000,
    OUT records pg_catalog.int8,
    OUT outbox pg_catalog.int8)
RETURNS record
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    who pg_catalog.text := 'idem_maintain() by ' OPERATOR(pg_catalog.||) pg_catalog.quote_ident(current_user::pg_catalog.text);
BEGIN
    IF idem_maintain.batch_size IS NULL THEN
        RAISE EXCEPTION 'idem_maintain: batch_size must not be null' USING ERRCODE = '22004';
    END IF;
    records := @extschema@.idem_purge(idem_maintain.batch_size);
    INSERT INTO @extschema@.idem_maintenance AS m (part, last_run, last_removed, run_by)
    VALUES ('records'::pg_catalog.text, pg_catalog.clock_timestamp(), records, who)
    ON CONFLICT (part) DO UPDATE
       SET last_run = excluded.last_run, last_removed = excluded.last_removed, run_by = excluded.run_by;
    outbox := @extschema@.idem_outbox_purge(idem_maintain.batch_size);
    INSERT INTO @extschema@.idem_maintenance AS m (part, last_run, last_removed, run_by)
    VALUES ('outbox'::pg_catalog.text, pg_catalog.clock_timestamp(), outbox, who)
    ON CONFLICT (part) DO UPDATE
       SET last_run = excluded.last_run, last_removed = excluded.last_removed, run_by = excluded.run_by;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_maintain(pg_catalog.int4) IS
    'Purge up to batch_size expired records and up to batch_size acknowledged outbox messages past their retention, and note the run for idem_health; what to schedule where no background worker runs';

REVOKE ALL ON FUNCTION @extschema@.idem_maintain(pg_catalog.int4) FROM PUBLIC;

-- Whether the background worker purges the current database: 'on',
-- 'paused' (idempotency.purge_naptime = 0), 'off' (not listed in
-- idempotency.purge_databases), 'not preloaded' (the library is not in
-- shared_preload_libraries), or 'portable' (the portable edition has no
-- worker).
CREATE FUNCTION @extschema@.idem_purge_worker()
RETURNS pg_catalog.text
AS 'MODULE_PATHNAME', 'idem_purge_worker'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.idem_purge_worker() IS
    'Whether a background worker purges this database: on, paused, off, not preloaded, or portable (no worker in the portable edition)';

-- One row per part that expires (records, outbox): when it was last
-- purged and by what, how many rows are past their expiry or retention,
-- what purges it (the background worker, a pg_cron job of the caller's
-- that calls idem_maintain, idem_purge or idem_outbox_purge, or nothing),
-- whether that is all right, and what to do when it is not.  Counts need
-- SELECT on the part's table (NULL without); pg_cron shows each role its
-- own jobs only.  Work: two index range scans, one row of cron.job and of
-- cron.job_run_details per part.
CREATE FUNCTION @extschema@.idem_health(
    OUT part pg_catalog.text,
    OUT last_purged pg_catalog.timestamptz,
    OUT last_removed pg_catalog.int8,
    OUT purged_by pg_catalog.text,
    OUT waiting pg_catalog.int8,
    OUT purger pg_catalog.text,
    OUT ok pg_catalog.bool,
    OUT hint pg_catalog.text)
RETURNS SETOF record
LANGUAGE plpgsql VOLATILE STRICT PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp pg_catalog.text := '@extschema@';
    worker pg_catalog.text := @extschema@.idem_purge_worker();
    listed pg_catalog.text := pg_catalog.current_setting('idempotency.purge_databases', true);
    job_id pg_catalog.int8;
    job_name pg_catalog.text;
    job_command pg_catalog.text;
    job_records pg_catalog.bool;
    job_outbox pg_catalog.bool;
    job_status pg_catalog.text;
    job_message pg_catalog.text;
    cron_visible pg_catalog.bool := CASE
        WHEN pg_catalog.to_regnamespace('cron') IS NULL THEN false
        WHEN NOT pg_catalog.has_schema_privilege('cron', 'USAGE') THEN false
        WHEN pg_catalog.to_regclass('cron.job') IS NULL
          OR pg_catalog.to_regclass('cron.job_run_details') IS NULL THEN false
        ELSE pg_catalog.has_table_privilege('cron.job', 'SELECT')
         AND pg_catalog.has_table_privilege('cron.job_run_details', 'SELECT') END;
    schedule pg_catalog.text;
    p pg_catalog.text;
BEGIN
    schedule := pg_catalog.format('schedule SELECT %s.idem_maintain() every minute with pg_cron', nsp);
    FOREACH p IN ARRAY ARRAY['records', 'outbox']::pg_catalog.text[] LOOP
        part := p;
        SELECT m.last_run, m.last_removed, m.run_by INTO last_purged, last_removed, purged_by
          FROM @extschema@.idem_maintenance m WHERE m.part OPERATOR(pg_catalog.=) p;
        IF NOT FOUND THEN
            last_purged := NULL; last_removed := NULL; purged_by := NULL;
        END IF;
        waiting := NULL;
        IF p OPERATOR(pg_catalog.=) 'records' THEN
            IF pg_catalog.has_table_privilege('@extschema@.idem_records', 'SELECT') THEN
                SELECT pg_catalog.count(*) INTO waiting FROM @extschema@.idem_records r
                 WHERE r.expires_at OPERATOR(pg_catalog.<) pg_catalog.clock_timestamp();
            END IF;
        ELSIF pg_catalog.has_table_privilege('@extschema@.idem_outbox', 'SELECT') THEN
            SELECT pg_catalog.count(*) INTO waiting FROM @extschema@.idem_outbox o
              LEFT JOIN @extschema@.idem_outbox_topics t ON t.topic OPERATOR(pg_catalog.=) o.topic
             WHERE o.created_at OPERATOR(pg_catalog.<)
                   (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) COALESCE(t.retention, '7 days'::pg_catalog.interval));
        END IF;

        -- A pg_cron job in this database that purges this part.
        job_id := NULL; job_name := NULL; job_command := NULL; job_status := NULL; job_message := NULL;
        job_records := false; job_outbox := false;
        IF worker IS DISTINCT FROM 'on' AND cron_visible THEN
            EXECUTE $q$
                SELECT j.jobid::pg_catalog.int8, j.jobname::pg_catalog.text, j.command::pg_catalog.text,
                       j.command ~ 'idem_maintain|idem_purge\M',
                       j.command ~ 'idem_maintain|idem_outbox_purge',
                       d.status::pg_catalog.text, d.return_message::pg_catalog.text
                  FROM cron.job j
                  LEFT JOIN LATERAL (
                       SELECT r.status, r.return_message FROM cron.job_run_details r
                        WHERE r.jobid OPERATOR(pg_catalog.=) j.jobid
                        ORDER BY r.runid DESC LIMIT 1) d ON true
                 WHERE j.active
                   AND j.database OPERATOR(pg_catalog.=) pg_catalog.current_database()
                   AND j.command ~ 'idem_(maintain|purge|outbox_purge)'
                 ORDER BY (j.command ~ 'idem_maintain') DESC, j.jobid
                 LIMIT 1 $q$
              INTO job_id, job_name, job_command, job_records, job_outbox, job_status, job_message;
        END IF;

        IF worker OPERATOR(pg_catalog.=) 'on' THEN
            purger := 'background worker';
            ok := true;
            hint := NULL;
        ELSIF job_id IS NOT NULL AND (CASE WHEN p OPERATOR(pg_catalog.=) 'records' THEN job_records ELSE job_outbox END) THEN
            purger := pg_catalog.format('pg_cron job %s: %s', COALESCE(job_name, job_id::pg_catalog.text), job_command);
            ok := job_status IS DISTINCT FROM 'failed';
            hint := CASE WHEN ok THEN NULL ELSE pg_catalog.format(
                'The last run of the pg_cron job failed: %s. Fix its command (%s), under the same job name.',
                COALESCE(pg_catalog.rtrim(job_message, E'\n'), 'no message'), schedule) END;
        ELSE
            purger := 'none';
            ok := false;
            IF job_id IS NOT NULL THEN
                hint := pg_catalog.format('The pg_cron job %s purges the records only (%s): %s instead, which purges the outbox too.',
                    COALESCE(job_name, job_id::pg_catalog.text), job_command, schedule);
            ELSIF worker OPERATOR(pg_catalog.=) 'portable' THEN
                hint := pg_catalog.format('The portable edition has no background worker: %s, as the extension''s owner (docs/managed.md).', schedule);
            ELSIF worker OPERATOR(pg_catalog.=) 'not preloaded' AND COALESCE(listed, '') OPERATOR(pg_catalog.<>) '' THEN
                hint := pg_catalog.format('idempotency.purge_databases is set (%s), but idempotency is not in shared_preload_libraries, so no worker runs: add it there and restart, or %s.', listed, schedule);
            ELSIF worker OPERATOR(pg_catalog.=) 'paused' THEN
                hint := 'idempotency.purge_naptime is 0, which stops the background worker: set it above 0 and reload.';
            ELSE
                hint := pg_catalog.format('Nothing purges this database: list it in idempotency.purge_databases (with idempotency in shared_preload_libraries) and restart, or %s.', schedule);
            END IF;
            IF NOT cron_visible AND pg_catalog.to_regnamespace('cron') IS NOT NULL THEN
                hint := hint OPERATOR(pg_catalog.||) ' (This role cannot read cron.job, so a pg_cron job is not seen.)';
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_health() IS
    'Per part (records, outbox): when it was last purged, rows past their expiry waiting, what purges it and whether that is all right, with a hint when not; read through the idem_health view';

GRANT EXECUTE ON FUNCTION @extschema@.idem_health() TO PUBLIC;

CREATE VIEW @extschema@.idem_health AS
    SELECT h.part,
           h.last_purged,
           h.last_removed,
           h.purged_by,
           h.waiting,
           h.purger,
           h.ok,
           h.hint
      FROM @extschema@.idem_health() AS h;

COMMENT ON VIEW @extschema@.idem_health IS
    'Is anything keeping the tables bounded? Per part: last purge, rows waiting, the purger, ok, and what to do when not';

GRANT SELECT ON @extschema@.idem_health TO PUBLIC;

-- grant define: idem_grant(role, 'define') gives machines and guards
-- (idem_machines, idem_machine_define/_drop, idem_guard/_unguard);
-- idem_revoke takes them back.
CREATE OR REPLACE FUNCTION @extschema@.idem_grant(
    role pg_catalog.regrole,
    access pg_catalog.text DEFAULT 'write')
RETURNS pg_catalog.void
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp text := (SELECT n.nspname FROM pg_catalog.pg_extension e
                 JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace
                 WHERE e.extname OPERATOR(pg_catalog.=) 'idempotency');
BEGIN
    IF access IS DISTINCT FROM 'write' AND access IS DISTINCT FROM 'read'
       AND access IS DISTINCT FROM 'define' THEN
        RAISE EXCEPTION 'idem_grant: unknown access level "%"', access
            USING ERRCODE = '22023',
                  DETAIL = 'The access level is ''write'' (claims, leases, tokens, guarded tables), ''read'' (idem_lookup, idem_await) or ''define'' (''write'', and defining machines and guarding the role''s own tables).',
                  HINT = 'Call idem_grant(role), idem_grant(role, ''read'') or idem_grant(role, ''define'').';
    END IF;
    EXECUTE pg_catalog.format('GRANT USAGE ON SCHEMA %I TO %s', nsp, role);
    IF access OPERATOR(pg_catalog.=) 'read' THEN
        EXECUTE pg_catalog.format('GRANT SELECT ON TABLE %I.idem_records TO %s', nsp, role);
        RETURN;
    END IF;
    EXECUTE pg_catalog.format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE %I.idem_records TO %s', nsp, role);
    EXECUTE pg_catalog.format('GRANT USAGE ON SEQUENCE %I.idem_token_seq TO %s', nsp, role);
    EXECUTE pg_catalog.format('GRANT INSERT ON TABLE %I.idem_transition_log TO %s', nsp, role);
    EXECUTE pg_catalog.format('GRANT USAGE ON SEQUENCE %I.idem_transition_log_id_seq TO %s', nsp, role);
    EXECUTE pg_catalog.format('GRANT SELECT, INSERT, DELETE ON TABLE %I.idem_outbox TO %s', nsp, role);
    EXECUTE pg_catalog.format('GRANT USAGE ON SEQUENCE %I.idem_outbox_position_seq TO %s', nsp, role);
    EXECUTE pg_catalog.format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE %I.idem_outbox_subscriptions TO %s', nsp, role);
    EXECUTE pg_catalog.format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE %I.idem_outbox_deliveries TO %s', nsp, role);
    -- 'define': machines (idem_machines, whose triggers validate each
    -- write) and guards on tables the role owns (CREATE TRIGGER needs
    -- its TRIGGER privilege there).
    IF access OPERATOR(pg_catalog.=) 'define' THEN
        EXECUTE pg_catalog.format('GRANT INSERT, UPDATE, DELETE ON TABLE %I.idem_machines TO %s', nsp, role);
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %I.idem_machine_define(pg_catalog.text, pg_catalog.jsonb), %I.idem_machine_drop(pg_catalog.text) TO %s', nsp, nsp, role);
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %I.idem_guard(pg_catalog.regclass, pg_catalog.name, pg_catalog.text, pg_catalog.name, pg_catalog.bool), %I.idem_unguard(pg_catalog.regclass, pg_catalog.name) TO %s', nsp, nsp, role);
    END IF;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_grant(pg_catalog.regrole, pg_catalog.text) IS
    'Grant role what an application needs: ''write'' (default) for claims, leases, tokens and guarded tables with history, ''read'' for idem_lookup and idem_await, ''define'' for ''write'' and defining machines and guards';

CREATE OR REPLACE FUNCTION @extschema@.idem_revoke(role pg_catalog.regrole)
RETURNS pg_catalog.void
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp text := (SELECT n.nspname FROM pg_catalog.pg_extension e
                 JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace
                 WHERE e.extname OPERATOR(pg_catalog.=) 'idempotency');
BEGIN
    EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %I.idem_records FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON SEQUENCE %I.idem_token_seq FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %I.idem_transition_log FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON SEQUENCE %I.idem_transition_log_id_seq FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %I.idem_outbox FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON SEQUENCE %I.idem_outbox_position_seq FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %I.idem_outbox_subscriptions FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %I.idem_outbox_deliveries FROM %s', nsp, role);
    -- 'define' (SELECT on idem_machines stays PUBLIC's).
    EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %I.idem_machines FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %I.idem_machine_define(pg_catalog.text, pg_catalog.jsonb), %I.idem_machine_drop(pg_catalog.text) FROM %s', nsp, nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %I.idem_guard(pg_catalog.regclass, pg_catalog.name, pg_catalog.text, pg_catalog.name, pg_catalog.bool), %I.idem_unguard(pg_catalog.regclass, pg_catalog.name) FROM %s', nsp, nsp, role);
END
$$;

COMMENT ON FUNCTION @extschema@.idem_revoke(pg_catalog.regrole) IS
    'Take back what idem_grant gave role (the schema''s USAGE stays: other objects may need it)';

REVOKE ALL ON FUNCTION @extschema@.idem_grant(pg_catalog.regrole, pg_catalog.text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_revoke(pg_catalog.regrole) FROM PUBLIC;

-- citus hint: idem_distribute without Citus says what to do where Citus
-- cannot be loaded (a managed service), not only how to preload it.
CREATE OR REPLACE FUNCTION @extschema@.idem_distribute(
    shard_key pg_catalog.regtype DEFAULT NULL,
    colocate_with pg_catalog.regclass DEFAULT NULL,
    delegate pg_catalog.bool DEFAULT true)
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
                                         NULL::pg_catalog.text, docs_url::pg_catalog.text, 1::pg_catalog.int4);
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
CREATE OR REPLACE FUNCTION @extschema@.idem_http_postgrest_rpc(
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
                                     NULL::pg_catalog.text, docs_url::pg_catalog.text, 1::pg_catalog.int4);
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
CREATE OR REPLACE FUNCTION @extschema@.idem_http_postgrest_finish(
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

GRANT EXECUTE ON FUNCTION
    @extschema@.idem_http_check(pg_catalog.int4, pg_catalog.jsonb, pg_catalog.text, pg_catalog.text[]),
    @extschema@.idem_http_fingerprint(pg_catalog.text, pg_catalog.text, pg_catalog.bytea, pg_catalog.text, pg_catalog.int4)
TO PUBLIC;
-- HTTP: end.

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

-- Portable bodies qualified throughout (docs/security.md, invariant 8): the
-- C edition's declarations unchanged, so that the portable edition's
-- upgrade, generated from this script, gets the new bodies of
-- idem_claim_many, idem_guard and idem_unguard (a DECLARE ... record
-- resolved through the caller's search_path).

-- safe defaults: idempotency.autocommit_claims defaults to error and
-- judges every entry point that writes a claim (idem_claim, and so
-- idem_inbox and idem_http_begin, idem_claim_many, idem_token_consume), a
-- ttl under a minute that arrives as a value is refused.  The C edition's
-- objects are unchanged (the checks are in the library); the declarations
-- below give the portable edition's upgrade its new bodies.
CREATE OR REPLACE FUNCTION @extschema@.idem_claim(
    scope pg_catalog.text,
    key pg_catalog.text,
    ttl pg_catalog.interval DEFAULT NULL,
    fingerprint pg_catalog.text DEFAULT NULL)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'idem_claim'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION @extschema@.idem_claim_many(
    scope pg_catalog.text,
    keys pg_catalog.text[],
    ttl pg_catalog.interval DEFAULT NULL)
RETURNS TABLE (key pg_catalog.text, claimed pg_catalog.bool)
AS 'MODULE_PATHNAME', 'idem_claim_many'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
ROWS 100;

CREATE OR REPLACE FUNCTION @extschema@.idem_guard(
    tbl pg_catalog.regclass,
    status_column pg_catalog.name,
    machine pg_catalog.text,
    version_column pg_catalog.name DEFAULT NULL,
    history pg_catalog.bool DEFAULT false)
RETURNS pg_catalog.void
AS 'MODULE_PATHNAME', 'idem_guard'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION @extschema@.idem_unguard(
    tbl pg_catalog.regclass,
    status_column pg_catalog.name)
RETURNS pg_catalog.void
AS 'MODULE_PATHNAME', 'idem_unguard'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

-- Only the exact shape is a guard (docs/security.md, invariant 5): the C
-- edition's declarations unchanged, so that the portable edition's
-- upgrade gets the new bodies of idem_guard_trigger and idem_machine_drop
-- (idem_guard and idem_unguard are above).
CREATE OR REPLACE FUNCTION @extschema@.idem_machine_drop(machine pg_catalog.text)
RETURNS pg_catalog.void
AS 'MODULE_PATHNAME', 'idem_machine_drop'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION @extschema@.idem_guard_trigger()
RETURNS trigger
AS 'MODULE_PATHNAME', 'idem_guard_trigger'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

-- Outbox functions declare pg_catalog.record (docs/security.md, invariant
-- 8): 'x record' in a body without SET search_path resolved through the
-- caller's search_path, which a role could point at a type of its own
-- (a superuser's session, or the background purge calling
-- idem_outbox_purge).  The bodies of sql/idempotency_outbox.sql.
CREATE OR REPLACE FUNCTION @extschema@.idem_outbox_advance(consumer pg_catalog.text)
RETURNS pg_catalog.void
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
AS $$
DECLARE
    s pg_catalog.record;
    h pg_catalog.xid8;
BEGIN
    FOR s IN
        SELECT s2.consumer, s2.topic, s2.horizon
          FROM @extschema@.idem_outbox_subscriptions s2
         WHERE idem_outbox_advance.consumer IS NULL
            OR s2.consumer OPERATOR(pg_catalog.=) (idem_outbox_advance.consumer COLLATE pg_catalog."C")
         ORDER BY s2.consumer, s2.topic
           FOR UPDATE SKIP LOCKED
    LOOP
        SELECT LEAST(pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot()),
                     (SELECT o.xact_id FROM @extschema@.idem_outbox o
                       WHERE o.topic OPERATOR(pg_catalog.=) s.topic
                         AND o.xact_id OPERATOR(pg_catalog.>=) s.horizon
                         AND (SELECT d.acked_at FROM @extschema@.idem_outbox_deliveries d
                               WHERE d.consumer OPERATOR(pg_catalog.=) s.consumer
                                 AND d.id OPERATOR(pg_catalog.=) o.id) IS NULL
                       ORDER BY o.xact_id LIMIT 1))
          INTO h;
        IF h OPERATOR(pg_catalog.>) s.horizon THEN
            UPDATE @extschema@.idem_outbox_subscriptions s3 SET horizon = h
             WHERE s3.consumer OPERATOR(pg_catalog.=) s.consumer
               AND s3.topic OPERATOR(pg_catalog.=) s.topic;
            DELETE FROM @extschema@.idem_outbox_deliveries d
             WHERE d.consumer OPERATOR(pg_catalog.=) s.consumer
               AND d.topic OPERATOR(pg_catalog.=) s.topic
               AND d.xact_id OPERATOR(pg_catalog.<) h;
        END IF;
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.idem_outbox_fetch(
    consumer pg_catalog.text,
    max pg_catalog.int4 DEFAULT 100,
    lease pg_catalog.interval DEFAULT '30 seconds')
RETURNS TABLE (
    id pg_catalog.uuid,
    topic pg_catalog.text,
    aggregate pg_catalog.text,
    type pg_catalog.text,
    payload pg_catalog.jsonb,
    headers pg_catalog.jsonb,
    created_at pg_catalog.timestamptz,
    attempts pg_catalog.int4)
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
ROWS 100
AS $$
DECLARE
    now_ pg_catalog.timestamptz;
    until_ pg_catalog.timestamptz;
    taken pg_catalog.uuid[] := '{}';
    got pg_catalog.uuid[];
    ids pg_catalog.uuid[];
    sub pg_catalog.record;
    cand pg_catalog.record;
    seen pg_catalog.text[];
    run_key pg_catalog.text;
    last_x pg_catalog.xid8;
    last_pos pg_catalog.int8;
    n pg_catalog.int4;
    chunk pg_catalog.int4;
BEGIN
    IF idem_outbox_fetch.consumer IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_fetch: consumer must not be null' USING ERRCODE = '22004';
    END IF;
    IF idem_outbox_fetch.max IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_fetch: max must not be null' USING ERRCODE = '22004';
    END IF;
    IF idem_outbox_fetch.max OPERATOR(pg_catalog.<) 1 THEN
        RAISE EXCEPTION 'idem_outbox_fetch: max must be at least 1'
            USING ERRCODE = '22023', DETAIL = pg_catalog.format('The max given was %s.', idem_outbox_fetch.max);
    END IF;
    IF idem_outbox_fetch.lease IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_fetch: lease must not be null' USING ERRCODE = '22004';
    END IF;
    IF idem_outbox_fetch.lease OPERATOR(pg_catalog.<=) '0'::pg_catalog.interval THEN
        RAISE EXCEPTION 'idem_outbox_fetch: lease must be positive'
            USING ERRCODE = '22023', DETAIL = pg_catalog.format('The lease given was %s.', idem_outbox_fetch.lease);
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idem_outbox_fetch() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    IF pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed' THEN
        RAISE EXCEPTION 'idem_outbox_fetch: cannot fetch in a REPEATABLE READ or SERIALIZABLE transaction'
            USING ERRCODE = '25000',
                  DETAIL = 'Each step must see what other consumers committed since the previous one.',
                  HINT = 'Call idem_outbox_fetch in autocommit or in a READ COMMITTED transaction.';
    END IF;
    IF NOT EXISTS (SELECT FROM @extschema@.idem_outbox_subscriptions s
                    WHERE s.consumer OPERATOR(pg_catalog.=) (idem_outbox_fetch.consumer COLLATE pg_catalog."C")) THEN
        RAISE EXCEPTION 'idem_outbox_fetch: consumer "%" is not subscribed to any topic', idem_outbox_fetch.consumer
            USING ERRCODE = '42704',
                  HINT = 'Subscribe it first: SELECT idem_outbox_subscribe(consumer, topic).';
    END IF;
    now_ := pg_catalog.clock_timestamp();
    until_ := now_ OPERATOR(pg_catalog.+) idem_outbox_fetch.lease;

    PERFORM @extschema@.idem_outbox_advance(idem_outbox_fetch.consumer);

    -- The runs: per (topic, aggregate), the consumer's unacknowledged
    -- messages in position order (commit order); a message without an
    -- aggregate is a run of its own.  Every unacknowledged message is at or
    -- above the horizon.  The runs are found from the horizon up, in
    -- transaction order (the index on (topic, xact_id)), chunk by chunk,
    -- among the messages neither acknowledged nor leased to someone else,
    -- until max messages are taken: the cost follows what is handed out
    -- (and what is leased or acknowledged above the horizon), not the
    -- backlog.  Topics in the order of their horizons (the oldest
    -- unacknowledged first).  A message's delivery is looked up by the
    -- primary key, one message at a time (scalar subqueries, LATERAL ...
    -- LIMIT 1), never as a join: planned on the statistics of new tables,
    -- such a join read all of a group's deliveries for every message.
    chunk := GREATEST(idem_outbox_fetch.max OPERATOR(pg_catalog.*) 2, 200);
    <<topics>>
    FOR sub IN
        SELECT s.topic, s.horizon
          FROM @extschema@.idem_outbox_subscriptions s
         WHERE s.consumer OPERATOR(pg_catalog.=) (idem_outbox_fetch.consumer COLLATE pg_catalog."C")
         ORDER BY s.horizon, s.topic
    LOOP
        seen := '{}';
        last_x := sub.horizon;
        last_pos := -1;
        LOOP
            n := 0;
            FOR cand IN
                SELECT o.id, o.aggregate, o.xact_id, o.position
                  FROM @extschema@.idem_outbox o
                 WHERE o.topic OPERATOR(pg_catalog.=) (sub.topic COLLATE pg_catalog."C")
                   AND o.xact_id OPERATOR(pg_catalog.>=) last_x
                   AND (o.xact_id OPERATOR(pg_catalog.>) last_x OR o.position OPERATOR(pg_catalog.>) last_pos)
                   AND NOT COALESCE((
                       SELECT d.acked_at IS NOT NULL OR d.leased_until OPERATOR(pg_catalog.>) now_
                         FROM @extschema@.idem_outbox_deliveries d
                        WHERE d.consumer OPERATOR(pg_catalog.=) (idem_outbox_fetch.consumer COLLATE pg_catalog."C")
                          AND d.id OPERATOR(pg_catalog.=) o.id), false)
                 ORDER BY o.xact_id, o.position
                 LIMIT chunk
            LOOP
                n := n OPERATOR(pg_catalog.+) 1;
                last_x := cand.xact_id;
                last_pos := cand.position;
                run_key := CASE WHEN cand.aggregate IS NULL THEN 'i' OPERATOR(pg_catalog.||) cand.id::pg_catalog.text
                                ELSE 'a' OPERATOR(pg_catalog.||) cand.aggregate END;
                CONTINUE WHEN run_key OPERATOR(pg_catalog.=) ANY (seen);
                seen := seen OPERATOR(pg_catalog.||) run_key;
                -- One fetch at a time per run (others skip it), then the run
                -- as it is now (a new snapshot: what other fetches and
                -- acknowledgements committed meanwhile): acknowledged
                -- messages drop out, and it is taken up to the first message
                -- leased to someone else.
                CONTINUE WHEN NOT pg_catalog.pg_try_advisory_xact_lock(1229213510,
                    pg_catalog.hashtext(idem_outbox_fetch.consumer OPERATOR(pg_catalog.||) pg_catalog.chr(10)
                                        OPERATOR(pg_catalog.||) sub.topic OPERATOR(pg_catalog.||) pg_catalog.chr(10)
                                        OPERATOR(pg_catalog.||) COALESCE(cand.aggregate, cand.id::pg_catalog.text)));
                IF cand.aggregate IS NULL THEN
                    ids := ARRAY[cand.id];
                ELSE
                    -- The aggregate's messages above the horizon (the index
                    -- on (topic, aggregate, xact_id)), sorted by position
                    -- (OFFSET 0 keeps the sort below the filter), then the
                    -- acknowledged ones skipped one probe at a time (a
                    -- scalar subquery, not a join: it stays lazy, in that
                    -- order) until enough are found.
                    SELECT pg_catalog.array_agg(r.id ORDER BY r.position) INTO ids
                      FROM (SELECT o.id, o.position
                              FROM (SELECT o2.id, o2.position
                                      FROM @extschema@.idem_outbox o2
                                     WHERE o2.topic OPERATOR(pg_catalog.=) (sub.topic COLLATE pg_catalog."C")
                                       AND o2.aggregate OPERATOR(pg_catalog.=) (cand.aggregate COLLATE pg_catalog."C")
                                       AND o2.xact_id OPERATOR(pg_catalog.>=) sub.horizon
                                     ORDER BY o2.position
                                    OFFSET 0) o
                             WHERE (SELECT d.acked_at
                                      FROM @extschema@.idem_outbox_deliveries d
                                     WHERE d.consumer OPERATOR(pg_catalog.=) (idem_outbox_fetch.consumer COLLATE pg_catalog."C")
                                       AND d.id OPERATOR(pg_catalog.=) o.id) IS NULL
                             LIMIT idem_outbox_fetch.max OPERATOR(pg_catalog.-) pg_catalog.cardinality(taken)) r;
                END IF;
                WITH cur AS (
                    SELECT u.id, u.n, o.topic, o.xact_id,
                           pg_catalog.bool_and(d.leased_until IS NULL OR d.leased_until OPERATOR(pg_catalog.<=) now_)
                               OVER (ORDER BY u.n) AS free
                      FROM pg_catalog.unnest(ids) WITH ORDINALITY AS u(id, n)
                      JOIN @extschema@.idem_outbox o ON o.id OPERATOR(pg_catalog.=) u.id
                      LEFT JOIN LATERAL (
                           SELECT d2.leased_until, d2.acked_at
                             FROM @extschema@.idem_outbox_deliveries d2
                            WHERE d2.consumer OPERATOR(pg_catalog.=) (idem_outbox_fetch.consumer COLLATE pg_catalog."C")
                              AND d2.id OPERATOR(pg_catalog.=) u.id
                            LIMIT 1) d ON true
                     WHERE d.acked_at IS NULL
                ), ins AS (
                    INSERT INTO @extschema@.idem_outbox_deliveries AS d
                           (consumer, id, topic, xact_id, attempts, leased_until)
                    SELECT idem_outbox_fetch.consumer, cur.id, cur.topic, cur.xact_id, 1, until_
                      FROM cur
                     WHERE cur.free
                     ORDER BY cur.n
                     LIMIT idem_outbox_fetch.max OPERATOR(pg_catalog.-) pg_catalog.cardinality(taken)
                    ON CONFLICT ON CONSTRAINT idem_outbox_deliveries_pkey DO UPDATE
                       SET attempts = d.attempts OPERATOR(pg_catalog.+) 1,
                           leased_until = excluded.leased_until
                     WHERE d.acked_at IS NULL
                       AND (d.leased_until IS NULL OR d.leased_until OPERATOR(pg_catalog.<=) now_)
                    RETURNING d.id
                )
                SELECT pg_catalog.array_agg(ins.id) INTO got FROM ins;
                IF got IS NOT NULL THEN
                    taken := taken OPERATOR(pg_catalog.||) got;
                END IF;
                EXIT topics WHEN pg_catalog.cardinality(taken) OPERATOR(pg_catalog.>=) idem_outbox_fetch.max;
            END LOOP;
            EXIT WHEN n OPERATOR(pg_catalog.<) chunk;
        END LOOP;
    END LOOP;

    RETURN QUERY
        SELECT o.id, o.topic::pg_catalog.text, o.aggregate::pg_catalog.text, o.type, o.payload,
               o.headers, o.created_at, d.attempts
          FROM @extschema@.idem_outbox o
          JOIN @extschema@.idem_outbox_deliveries d
            ON d.consumer OPERATOR(pg_catalog.=) (idem_outbox_fetch.consumer COLLATE pg_catalog."C")
           AND d.id OPERATOR(pg_catalog.=) o.id
         WHERE o.id OPERATOR(pg_catalog.=) ANY (taken)
         ORDER BY o.position;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.idem_outbox_ack(
    consumer pg_catalog.text,
    id pg_catalog.uuid)
RETURNS pg_catalog.bool
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
AS $$
DECLARE
    m pg_catalog.record;
    h pg_catalog.xid8;
BEGIN
    IF idem_outbox_ack.consumer IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_ack: consumer must not be null' USING ERRCODE = '22004';
    END IF;
    IF idem_outbox_ack.id IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_ack: id must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idem_outbox_ack() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    SELECT o.topic, o.xact_id INTO m FROM @extschema@.idem_outbox o
     WHERE o.id OPERATOR(pg_catalog.=) idem_outbox_ack.id;
    IF NOT FOUND THEN
        RETURN false;    -- no such message (any more): purged after its acknowledgement
    END IF;
    SELECT s.horizon INTO h FROM @extschema@.idem_outbox_subscriptions s
     WHERE s.consumer OPERATOR(pg_catalog.=) (idem_outbox_ack.consumer COLLATE pg_catalog."C")
       AND s.topic OPERATOR(pg_catalog.=) m.topic;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'idem_outbox_ack: consumer "%" is not subscribed to topic "%"', idem_outbox_ack.consumer, m.topic
            USING ERRCODE = '42704',
                  DETAIL = pg_catalog.format('Message %s is of topic "%s".', idem_outbox_ack.id, m.topic),
                  HINT = 'Acknowledge with the consumer name given to idem_outbox_fetch.';
    END IF;
    IF m.xact_id OPERATOR(pg_catalog.<) h THEN
        RETURN false;    -- below the horizon: acknowledged already
    END IF;
    INSERT INTO @extschema@.idem_outbox_deliveries AS d
           (consumer, id, topic, xact_id, attempts, leased_until, acked_at)
    VALUES (idem_outbox_ack.consumer, idem_outbox_ack.id, m.topic, m.xact_id, 0, NULL,
            pg_catalog.clock_timestamp())
    ON CONFLICT ON CONSTRAINT idem_outbox_deliveries_pkey DO UPDATE
       SET acked_at = excluded.acked_at, leased_until = NULL
     WHERE d.acked_at IS NULL;
    RETURN FOUND;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.idem_outbox_purge(batch_size pg_catalog.int4 DEFAULT 10000)
RETURNS pg_catalog.int8
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
AS $$
DECLARE
    t pg_catalog.record;
    bound pg_catalog.xid8;
    keep pg_catalog.interval;
    n pg_catalog.int8;
    total pg_catalog.int8 := 0;
    now_ pg_catalog.timestamptz;
BEGIN
    IF idem_outbox_purge.batch_size IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_purge: batch_size must not be null' USING ERRCODE = '22004';
    END IF;
    IF idem_outbox_purge.batch_size OPERATOR(pg_catalog.<) 1 THEN
        RAISE EXCEPTION 'idem_outbox_purge: batch_size must be at least 1'
            USING ERRCODE = '22023', DETAIL = pg_catalog.format('The batch_size given was %s.', idem_outbox_purge.batch_size);
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idem_outbox_purge() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    now_ := pg_catalog.clock_timestamp();

    PERFORM @extschema@.idem_outbox_advance(NULL);

    -- The topics of the table, one index probe each.
    FOR t IN
        WITH RECURSIVE topics(topic) AS (
            (SELECT o.topic FROM @extschema@.idem_outbox o ORDER BY o.topic LIMIT 1)
            UNION ALL
            SELECT (SELECT o.topic FROM @extschema@.idem_outbox o
                     WHERE o.topic OPERATOR(pg_catalog.>) p.topic ORDER BY o.topic LIMIT 1)
              FROM topics p WHERE p.topic IS NOT NULL)
        SELECT x.topic FROM topics x WHERE x.topic IS NOT NULL
    LOOP
        EXIT WHEN total OPERATOR(pg_catalog.>=) idem_outbox_purge.batch_size;
        SELECT c.retention INTO keep FROM @extschema@.idem_outbox_topics c
         WHERE c.topic OPERATOR(pg_catalog.=) t.topic;
        IF keep IS NULL THEN
            keep := '7 days';
        END IF;
        SELECT pg_catalog.min(s.horizon) INTO bound FROM @extschema@.idem_outbox_subscriptions s
         WHERE s.topic OPERATOR(pg_catalog.=) t.topic;
        WITH head AS (
            SELECT o.id, o.created_at FROM @extschema@.idem_outbox o
             WHERE o.topic OPERATOR(pg_catalog.=) t.topic
               AND (bound IS NULL OR o.xact_id OPERATOR(pg_catalog.<) bound)
             ORDER BY o.xact_id
             LIMIT idem_outbox_purge.batch_size OPERATOR(pg_catalog.-) total
               FOR UPDATE SKIP LOCKED
        )
        DELETE FROM @extschema@.idem_outbox o
         USING head
         WHERE o.id OPERATOR(pg_catalog.=) head.id
           AND head.created_at OPERATOR(pg_catalog.<) (now_ OPERATOR(pg_catalog.-) keep);
        GET DIAGNOSTICS n = ROW_COUNT;
        total := total OPERATOR(pg_catalog.+) n;
        keep := NULL;
    END LOOP;
    RETURN total;

    nsp text := (SELECT n.nspname FROM pg_catalog.pg_extension e
                 JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace
                 WHERE e.extname OPERATOR(pg_catalog.=) 'idempotency');
    records regclass;
    machines regclass;
    column_now text;
    type_now regtype;
    want text := 'key';
    ddl text;
    failed text;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension e
                   WHERE e.extname OPERATOR(pg_catalog.=) 'citus') THEN
        RAISE EXCEPTION 'idem_distribute: the citus extension is not installed in this database'
            USING ERRCODE = '55000',
                  DETAIL = 'idem_distribute makes idem_records a Citus distributed table and idem_machines a Citus reference table.',
                  HINT = 'Without Citus (a managed service such as RDS or Cloud SQL cannot load it), do not call idem_distribute: idem_records works as an ordinary table. On a server you run: add citus to shared_preload_libraries (before idempotency), CREATE EXTENSION citus on every node and add the workers with citus_add_node (docs/citus.md).';
    END IF;
    records := pg_catalog.format('%I.idem_records', nsp)::pg_catalog.regclass;
    machines := pg_catalog.format('%I.idem_machines', nsp)::pg_catalog.regclass;

    SELECT pg_catalog.column_to_column_name(p.logicalrelid, p.partkey) INTO column_now
    FROM pg_catalog.pg_dist_partition p WHERE p.logicalrelid OPERATOR(pg_catalog.=) records;
    IF column_now IS NOT NULL THEN
        SELECT a.atttypid::pg_catalog.regtype INTO type_now FROM pg_catalog.pg_attribute a
        WHERE a.attrelid OPERATOR(pg_catalog.=) records AND a.attname OPERATOR(pg_catalog.=) column_now;
        IF idem_distribute.shard_key IS NOT NULL THEN
            want := 'shard_key';
        END IF;
        IF column_now OPERATOR(pg_catalog.<>) want
           OR (idem_distribute.shard_key IS NOT NULL AND type_now IS DISTINCT FROM idem_distribute.shard_key) THEN
            RAISE EXCEPTION 'idem_distribute: idem_records is distributed by % already', column_now
                USING ERRCODE = '55000',
                      DETAIL = pg_catalog.format('Its distribution column is %s of type %s; the records cannot be moved to another distribution column here.', column_now, type_now),
                      HINT = 'Call idem_distribute with the arguments it was first called with, or empty idem_records, undistribute it with undistribute_table and call idem_distribute again.';
        END IF;
    ELSIF idem_distribute.shard_key IS NULL THEN
        PERFORM pg_catalog.create_distributed_table(records, 'key',
            colocate_with => COALESCE(idem_distribute.colocate_with::pg_catalog.text, 'default'));
        IF idem_distribute.delegate THEN
            PERFORM pg_catalog.create_distributed_function(
                pg_catalog.format('%I.idem_claim(text,text,interval,text)', nsp)::pg_catalog.regprocedure,
                '$2', colocate_with => records::pg_catalog.text);
            PERFORM pg_catalog.create_distributed_function(
                pg_catalog.format('%I.idem_claim(text)', nsp)::pg_catalog.regprocedure,
                '$1', colocate_with => records::pg_catalog.text);
        END IF;
    ELSE
        IF EXISTS (SELECT FROM @extschema@.idem_records) THEN
            RAISE EXCEPTION 'idem_distribute: idem_records is not empty'
                USING ERRCODE = '55000',
                      DETAIL = 'A shard key can be added only to empty records: the existing records have no value for it.',
                      HINT = 'Distribute the records before the first claim, or release or purge them first.';
        END IF;
        -- The same change on every node: each node's idem_records (from its
        -- own CREATE EXTENSION) becomes a shell of the distributed table,
        -- and Citus plans a statement on a node against its shell.  The
        -- command does nothing where the column exists, so a second call
        -- after a failure finishes the job.
        ddl := pg_catalog.format(
            'DO $d$ BEGIN IF NOT EXISTS (SELECT FROM pg_catalog.pg_attribute'
            ' WHERE attrelid = %L::pg_catalog.regclass AND attname = ''shard_key'' AND NOT attisdropped) THEN'
            ' ALTER TABLE %I.idem_records ADD COLUMN shard_key %s NOT NULL,'
            ' DROP CONSTRAINT idem_records_pkey,'
            ' ADD CONSTRAINT idem_records_pkey PRIMARY KEY (shard_key, scope, key); END IF; END $d$',
            records::pg_catalog.text, nsp, idem_distribute.shard_key);
        EXECUTE ddl;
        SELECT pg_catalog.string_agg(r.nodename OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) r.nodeport
                                     OPERATOR(pg_catalog.||) ': ' OPERATOR(pg_catalog.||) r.result, '; ')
          INTO failed
          FROM pg_catalog.run_command_on_workers(ddl) r WHERE NOT r.success;
        IF failed IS NOT NULL THEN
            RAISE EXCEPTION 'idem_distribute: could not add the shard key on every worker'
                USING ERRCODE = '55000',
                      DETAIL = pg_catalog.format('Failed: %s.', failed),
                      HINT = 'Make sure every worker has the idempotency extension (CREATE EXTENSION idempotency) and call idem_distribute again.';
        END IF;
        PERFORM pg_catalog.create_distributed_table(records, 'shard_key',
            colocate_with => COALESCE(idem_distribute.colocate_with::pg_catalog.text, 'default'));
    END IF;

    IF NOT EXISTS (SELECT FROM pg_catalog.pg_dist_partition p
                   WHERE p.logicalrelid OPERATOR(pg_catalog.=) machines) THEN
        -- Its triggers (validation, cache invalidation) go to every
        -- placement: Citus copies triggers only when this is on.
        PERFORM pg_catalog.set_config('citus.enable_unsafe_triggers', 'on', true);
        PERFORM pg_catalog.create_reference_table(machines);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.idem_begin(
    scope pg_catalog.text,
    key pg_catalog.text,
    lease pg_catalog.interval DEFAULT '5 minutes',
    ttl pg_catalog.interval DEFAULT NULL,
    fingerprint pg_catalog.text DEFAULT NULL,
    OUT outcome pg_catalog.text,
    OUT token pg_catalog.int8,
    OUT result pg_catalog.jsonb)
RETURNS record
AS 'MODULE_PATHNAME', 'idem_begin'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION @extschema@.idem_token_issue(
    scope pg_catalog.text,
    ttl pg_catalog.interval DEFAULT '10 minutes'::pg_catalog.interval)
RETURNS pg_catalog.text
AS 'MODULE_PATHNAME', 'idem_token_issue'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION @extschema@.idem_token_consume(
    scope pg_catalog.text,
    token pg_catalog.text)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'idem_token_consume'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

-- safe defaults: idem_complete refuses a NULL result (22004); the C
-- declaration for the portable edition's new body.
CREATE OR REPLACE FUNCTION @extschema@.idem_complete(
    scope pg_catalog.text,
    key pg_catalog.text,
    result pg_catalog.jsonb)
RETURNS pg_catalog.void
AS 'MODULE_PATHNAME', 'idem_complete'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

-- safe defaults: idem_transition warns at a repeated transition (the C
-- edition once per session); the C declaration for the portable
-- edition's new body.
CREATE OR REPLACE FUNCTION @extschema@.idem_transition(
    machine pg_catalog.text,
    from_state pg_catalog.text,
    to_state pg_catalog.text)
RETURNS pg_catalog.text
AS 'MODULE_PATHNAME', 'idem_transition'
LANGUAGE C STABLE CALLED ON NULL INPUT PARALLEL SAFE;
