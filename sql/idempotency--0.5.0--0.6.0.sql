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
-- upgrade, generated from this script, gets the new bodies of idem_guard
-- and idem_unguard (a DECLARE ... record resolved through the caller's
-- search_path); idem_claim_many's is declared again below.
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
-- (idem_grant and idem_revoke, with the define and outbox levels, are
-- replaced whole in the outbox section below.)

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

CREATE OR REPLACE FUNCTION @extschema@.idem_begin(
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

-- outbox: isolation per topic and group; row locks, no public advisory
-- locks; no name resolved through a caller's search_path; bounded leases
-- and retentions; a group's progress as one row per run (a position per
-- aggregate), so that a fetch reads only what it hands out.  Every
-- message, every group's progress and every lease stay (converted below).
-- (idem_grant and idem_revoke are replaced at the end of this section.)

DROP INDEX @extschema@.idem_outbox_topic_xact_idx;
DROP INDEX @extschema@.idem_outbox_topic_aggregate_idx;
ALTER TABLE @extschema@.idem_outbox
    ADD COLUMN pulled pg_catalog.bool NOT NULL DEFAULT true;
ALTER TABLE @extschema@.idem_outbox_topics
    ADD COLUMN pull pg_catalog.bool NOT NULL DEFAULT true;
COMMENT ON TABLE @extschema@.idem_outbox_topics IS
    'Outbox settings per topic: relay (table, message or both), retention of acknowledged messages, and whether consumer groups may read it (pull); a topic without a row uses table, 7 days and pull';
-- A run's messages in order: one aggregate's from a position up, of the
-- messages consumer groups read (pulled).  (The purge walks the table by
-- its primary key.)
CREATE INDEX idem_outbox_topic_aggregate_idx
    ON @extschema@.idem_outbox (topic, aggregate, position)
    WHERE aggregate IS NOT NULL AND pulled;

-- One row per (topic, aggregate) ever published to: the aggregate's
-- lock.  idem_publish locks it (SELECT ... FOR NO KEY UPDATE; the first
-- publication inserts it) before its message and holds the lock until its
-- transaction ends.  The row is never updated: a lock writes one small
-- WAL record and no new row version.
CREATE TABLE @extschema@.idem_outbox_aggregates (
    topic      pg_catalog.text COLLATE pg_catalog."C" NOT NULL,
    aggregate  pg_catalog.text COLLATE pg_catalog."C" NOT NULL,
    CONSTRAINT idem_outbox_aggregates_pkey PRIMARY KEY (topic, aggregate)
);

COMMENT ON TABLE @extschema@.idem_outbox_aggregates IS
    'The aggregates published to, one row each: the row idem_publish locks until commit so that one aggregate''s messages take their positions in commit order';


REVOKE ALL ON TABLE @extschema@.idem_outbox_aggregates FROM PUBLIC;

SELECT pg_catalog.pg_extension_config_dump('@extschema@.idem_outbox_aggregates', '');

-- Where idem_outbox_purge goes on: the id it examined last (it walks the
-- table by primary key, a bounded number of rows per call, and wraps).
CREATE TABLE @extschema@.idem_outbox_purge_hand (
    one        pg_catalog.bool NOT NULL DEFAULT true,
    last_id    pg_catalog.uuid,
    CONSTRAINT idem_outbox_purge_hand_pkey PRIMARY KEY (one),
    CONSTRAINT idem_outbox_purge_hand_one_check CHECK (one)
);

COMMENT ON TABLE @extschema@.idem_outbox_purge_hand IS
    'Internal (idem_outbox_purge): the id of the last message examined; the next call goes on from there';

REVOKE ALL ON TABLE @extschema@.idem_outbox_purge_hand FROM PUBLIC;

COMMENT ON TABLE @extschema@.idem_outbox IS
    'Messages published with idem_publish, one row per message id; exists if and only if the publishing transaction committed';
COMMENT ON COLUMN @extschema@.idem_outbox.id IS
    'Message id: idem_outbox_id(topic, key, scope, seq), the same for every publication of the same claim (or explicit key), topic and seq';
COMMENT ON COLUMN @extschema@.idem_outbox.aggregate IS
    'Ordering key: the messages of one (topic, aggregate) are delivered in commit order; Debezium''s event key';
COMMENT ON COLUMN @extschema@.idem_outbox.scope IS
    'Scope of the claim the message was published for; NULL for a message published with an explicit key';
COMMENT ON COLUMN @extschema@.idem_outbox.key IS
    'Key of the claim the message was published for, or the explicit key';
COMMENT ON COLUMN @extschema@.idem_outbox.position IS
    'Order of publication; among the pulled messages of one (topic, aggregate) it is the commit order';
COMMENT ON COLUMN @extschema@.idem_outbox.xact_id IS
    'Top-level transaction id of the publication, as pg_current_xact_id() returns it';
COMMENT ON COLUMN @extschema@.idem_outbox.created_at IS
    'Start of the publishing transaction (now())';
COMMENT ON COLUMN @extschema@.idem_outbox.pulled IS
    'The message is for consumer groups too (its topic''s pull setting when it was published); false: for the table''s relay only, without the aggregate''s lock, and its position is only the order of publication';

REVOKE ALL ON TABLE @extschema@.idem_outbox FROM PUBLIC;
REVOKE ALL ON SEQUENCE @extschema@.idem_outbox_position_seq FROM PUBLIC;

SELECT pg_catalog.pg_extension_config_dump('@extschema@.idem_outbox', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.idem_outbox_position_seq', '');

INSERT INTO @extschema@.idem_outbox_aggregates (topic, aggregate)
SELECT o.topic, o.aggregate
  FROM @extschema@.idem_outbox o
 WHERE o.aggregate IS NOT NULL
 GROUP BY o.topic, o.aggregate;

UPDATE @extschema@.idem_outbox_topics
   SET retention = '100 years'::pg_catalog.interval
 WHERE retention OPERATOR(pg_catalog.>) '100 years'::pg_catalog.interval;
ALTER TABLE @extschema@.idem_outbox_topics
    DROP CONSTRAINT idem_outbox_topics_retention_check,
    ADD CONSTRAINT idem_outbox_topics_retention_check CHECK
        (retention OPERATOR(pg_catalog.>=) '0'::pg_catalog.interval
         AND retention OPERATOR(pg_catalog.<=) '100 years'::pg_catalog.interval);

COMMENT ON TABLE @extschema@.idem_outbox_subscriptions IS
    'Consumer groups of the pull API and their topics (idem_outbox_subscribe); horizon: the oldest transaction running at the subscription, 0 from the start';

-- idem_publish finds the groups of its topic.
CREATE INDEX idem_outbox_subscriptions_topic_idx
    ON @extschema@.idem_outbox_subscriptions (topic);

-- A consumer group's progress, one row per run: the messages of one
-- (topic, aggregate), or one message without an aggregate (lone), that
-- the group has not acknowledged.  Made by idem_publish for every group
-- subscribed to the topic (or by idem_outbox_subscribe from the start);
-- a group's progress in an aggregate is a position (acked), because the
-- aggregate's messages are delivered in position order, so a lease and an
-- acknowledgement are per run, not per message.  available_at: the run
-- is free from then on; in the future while a lease holds it; 'infinity'
-- when it has nothing to deliver (parked: idem_publish frees it again).
-- A fetch takes free runs from the index on (consumer, available_at)
-- with FOR UPDATE SKIP LOCKED: it never reads a leased run, a parked one
-- or another group's.
CREATE TABLE @extschema@.idem_outbox_runs (
    consumer     pg_catalog.text COLLATE pg_catalog."C" NOT NULL,
    topic        pg_catalog.text COLLATE pg_catalog."C" NOT NULL,
    aggregate    pg_catalog.text COLLATE pg_catalog."C",
    lone         pg_catalog.uuid,
    acked        pg_catalog.int8 NOT NULL,
    acked_ahead  pg_catalog.int8[],
    available_at pg_catalog.timestamptz NOT NULL,
    leased_upto  pg_catalog.int8,
    handed_upto  pg_catalog.int8 NOT NULL DEFAULT -1,
    attempts     pg_catalog.int4 NOT NULL DEFAULT 0,
    CONSTRAINT idem_outbox_runs_key UNIQUE NULLS NOT DISTINCT (topic, aggregate, lone, consumer),
    CONSTRAINT idem_outbox_runs_kind_check CHECK ((aggregate IS NULL) OPERATOR(pg_catalog.<>) (lone IS NULL))
);
CREATE INDEX idem_outbox_runs_ready
    ON @extschema@.idem_outbox_runs (consumer, available_at, acked);

COMMENT ON TABLE @extschema@.idem_outbox_runs IS
    'Per consumer group, its runs (an aggregate''s messages, or one message without an aggregate) with something unacknowledged: acknowledged up to position acked (and acked_ahead), leased until available_at, parked when that is infinity';

REVOKE ALL ON TABLE @extschema@.idem_outbox_runs FROM PUBLIC;

SELECT pg_catalog.pg_extension_config_dump('@extschema@.idem_outbox_runs', '');

-- Each group's progress of 0.5.0 as runs: per aggregate (and per message
-- without one) with an unacknowledged message at or above the group's
-- horizon, the position before its first unacknowledged message, what is
-- acknowledged beyond it, and the lease of what is leased.
WITH state AS (
    SELECT s.consumer, o.topic, o.aggregate, o.id, o.position, o.created_at,
           d.acked_at IS NOT NULL AS acked, d.attempts,
           CASE WHEN d.acked_at IS NULL AND d.leased_until OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
                THEN d.leased_until END AS leased_until
      FROM @extschema@.idem_outbox_subscriptions s
      JOIN @extschema@.idem_outbox o
        ON o.topic OPERATOR(pg_catalog.=) s.topic
       AND o.xact_id OPERATOR(pg_catalog.>=) s.horizon
      LEFT JOIN @extschema@.idem_outbox_deliveries d
        ON d.consumer OPERATOR(pg_catalog.=) s.consumer
       AND d.id OPERATOR(pg_catalog.=) o.id
), head AS (
    SELECT st.consumer, st.topic, st.aggregate,
           CASE WHEN st.aggregate IS NULL THEN st.id END AS lone,
           pg_catalog.min(st.position) FILTER (WHERE NOT st.acked) AS first_open
      FROM state st
     GROUP BY st.consumer, st.topic, st.aggregate, CASE WHEN st.aggregate IS NULL THEN st.id END
)
INSERT INTO @extschema@.idem_outbox_runs
       (consumer, topic, aggregate, lone, acked, acked_ahead, available_at, leased_upto, handed_upto, attempts)
SELECT h.consumer, h.topic, h.aggregate, h.lone,
       h.first_open OPERATOR(pg_catalog.-) 1,
       (SELECT pg_catalog.array_agg(st.position ORDER BY st.position) FROM state st
         WHERE h.lone IS NULL
           AND st.consumer OPERATOR(pg_catalog.=) h.consumer AND st.topic OPERATOR(pg_catalog.=) h.topic
           AND st.aggregate OPERATOR(pg_catalog.=) h.aggregate
           AND st.acked AND st.position OPERATOR(pg_catalog.>) h.first_open),
       COALESCE(l.until, l.oldest, pg_catalog.now()),
       l.leased_upto, COALESCE(l.handed_upto, -1), COALESCE(l.attempts, 0)
  FROM head h
  CROSS JOIN LATERAL (
       SELECT pg_catalog.max(st.leased_until) AS until,
              pg_catalog.max(st.position) FILTER (WHERE st.leased_until IS NOT NULL) AS leased_upto,
              pg_catalog.max(st.position) FILTER (WHERE st.attempts OPERATOR(pg_catalog.>) 0) AS handed_upto,
              pg_catalog.max(st.attempts) FILTER (WHERE NOT st.acked) AS attempts,
              pg_catalog.min(st.created_at) FILTER (WHERE NOT st.acked) AS oldest
         FROM state st
        WHERE st.consumer OPERATOR(pg_catalog.=) h.consumer AND st.topic OPERATOR(pg_catalog.=) h.topic
          AND ((h.lone IS NULL AND st.aggregate OPERATOR(pg_catalog.=) h.aggregate)
               OR (h.lone IS NOT NULL AND st.id OPERATOR(pg_catalog.=) h.lone))) AS l
 WHERE h.first_open IS NOT NULL;

CREATE OR REPLACE VIEW @extschema@.idem_outbox_backlog WITH (security_invoker = true) AS
    SELECT s.consumer::pg_catalog.text AS consumer,
           s.topic::pg_catalog.text AS topic,
           COALESCE(pg_catalog.sum(m.n), 0)::pg_catalog.int8 AS unacknowledged,
           COALESCE(pg_catalog.sum(m.leased), 0)::pg_catalog.int8 AS leased,
           pg_catalog.min(m.oldest) AS oldest,
           pg_catalog.max(m.attempts) AS max_attempts,
           s.horizon
      FROM @extschema@.idem_outbox_subscriptions s
      LEFT JOIN LATERAL (
           SELECT pg_catalog.count(o.id) AS n,
                  pg_catalog.count(o.id) FILTER (
                      WHERE r.available_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
                        AND r.available_at OPERATOR(pg_catalog.<) 'infinity'::pg_catalog.timestamptz
                        AND o.position OPERATOR(pg_catalog.<=) r.leased_upto) AS leased,
                  pg_catalog.min(o.created_at) AS oldest,
                  pg_catalog.max(r.attempts) FILTER (WHERE r.attempts OPERATOR(pg_catalog.>) 0) AS attempts
             FROM @extschema@.idem_outbox_runs r
             JOIN @extschema@.idem_outbox o
               ON o.topic OPERATOR(pg_catalog.=) r.topic
              AND o.pulled
              AND ((r.lone IS NOT NULL AND o.id OPERATOR(pg_catalog.=) r.lone)
                   OR (r.lone IS NULL AND o.aggregate OPERATOR(pg_catalog.=) r.aggregate
                       AND o.position OPERATOR(pg_catalog.>) r.acked
                       AND NOT COALESCE(o.position OPERATOR(pg_catalog.=) ANY (r.acked_ahead), false)))
            WHERE r.consumer OPERATOR(pg_catalog.=) s.consumer
              AND r.topic OPERATOR(pg_catalog.=) s.topic) AS m ON true
     GROUP BY s.consumer, s.topic, s.horizon;

COMMENT ON VIEW @extschema@.idem_outbox_backlog IS
    'Per consumer group and topic: messages not acknowledged yet, how many are leased, the oldest, the most delivery attempts, the horizon';

-- Public: what a role sees is decided by its privileges on the tables.
DROP FUNCTION @extschema@.idem_outbox_advance(pg_catalog.text);
-- (out of its extension first, so that it also leaves pg_extension.extconfig;
-- the portable edition's plain script has no extension)
DO $$
DECLARE
    ext pg_catalog.name;
BEGIN
    SELECT e.extname INTO ext
      FROM pg_catalog.pg_depend d
      JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) d.refobjid
     WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
       AND d.objid OPERATOR(pg_catalog.=) '@extschema@.idem_outbox_deliveries'::pg_catalog.regclass::pg_catalog.oid
       AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
       AND d.deptype OPERATOR(pg_catalog.=) 'e';
    IF FOUND THEN
        EXECUTE pg_catalog.format('ALTER EXTENSION %I DROP TABLE @extschema@.idem_outbox_deliveries', ext);
    END IF;
END
$$;
DROP TABLE @extschema@.idem_outbox_deliveries;

-- Isolation between applications: the grants, row-level security.
CREATE TABLE @extschema@.idem_outbox_grants (
    role       pg_catalog.regrole NOT NULL,
    privilege  pg_catalog.text COLLATE pg_catalog."C" NOT NULL,
    topic      pg_catalog.text COLLATE pg_catalog."C",
    consumer   pg_catalog.text COLLATE pg_catalog."C",
    CONSTRAINT idem_outbox_grants_privilege_check CHECK
        (privilege OPERATOR(pg_catalog.=) ANY ('{publish,consume}'::pg_catalog.text[])),
    CONSTRAINT idem_outbox_grants_consumer_check CHECK
        (privilege OPERATOR(pg_catalog.=) 'consume' OR consumer IS NULL)
);

CREATE UNIQUE INDEX idem_outbox_grants_key
    ON @extschema@.idem_outbox_grants (role, privilege, topic, consumer) NULLS NOT DISTINCT;

COMMENT ON TABLE @extschema@.idem_outbox_grants IS
    'Outbox rights (idem_outbox_grant): role may publish to topic, or read topic as consumer group consumer; NULL is every topic or every group';

REVOKE ALL ON TABLE @extschema@.idem_outbox_grants FROM PUBLIC;
GRANT SELECT ON TABLE @extschema@.idem_outbox_grants TO PUBLIC;

SELECT pg_catalog.pg_extension_config_dump('@extschema@.idem_outbox_grants', '');

ALTER TABLE @extschema@.idem_outbox ENABLE ROW LEVEL SECURITY;
ALTER TABLE @extschema@.idem_outbox_aggregates ENABLE ROW LEVEL SECURITY;
ALTER TABLE @extschema@.idem_outbox_subscriptions ENABLE ROW LEVEL SECURITY;
ALTER TABLE @extschema@.idem_outbox_runs ENABLE ROW LEVEL SECURITY;

-- Publishers see the messages of their topics (a duplicate publication
-- reads the first) and insert only messages of their topics whose id is
-- the one idem_outbox_id gives (no message can take another's future id).
CREATE POLICY idem_outbox_publisher_read ON @extschema@.idem_outbox
    FOR SELECT
    USING (EXISTS (SELECT FROM @extschema@.idem_outbox_grants g
                    WHERE g.privilege OPERATOR(pg_catalog.=) 'publish'
                      AND (g.topic IS NULL OR g.topic OPERATOR(pg_catalog.=) idem_outbox.topic)
                      AND pg_catalog.pg_has_role(g.role::pg_catalog.oid, 'USAGE')));
CREATE POLICY idem_outbox_publisher_insert ON @extschema@.idem_outbox
    FOR INSERT
    WITH CHECK (EXISTS (SELECT FROM @extschema@.idem_outbox_grants g
                         WHERE g.privilege OPERATOR(pg_catalog.=) 'publish'
                           AND (g.topic IS NULL OR g.topic OPERATOR(pg_catalog.=) idem_outbox.topic)
                           AND pg_catalog.pg_has_role(g.role::pg_catalog.oid, 'USAGE'))
                AND id OPERATOR(pg_catalog.=) @extschema@.idem_outbox_id(topic::pg_catalog.text, key::pg_catalog.text,
                                                                         scope::pg_catalog.text, seq));
-- Consumers read the messages of the topics they may read as some group.
CREATE POLICY idem_outbox_consumer_read ON @extschema@.idem_outbox
    FOR SELECT
    USING (EXISTS (SELECT FROM @extschema@.idem_outbox_grants g
                    WHERE g.privilege OPERATOR(pg_catalog.=) 'consume'
                      AND (g.topic IS NULL OR g.topic OPERATOR(pg_catalog.=) idem_outbox.topic)
                      AND pg_catalog.pg_has_role(g.role::pg_catalog.oid, 'USAGE')));
-- The aggregates' lock rows: publishers of the topic write them;
-- consumers of the topic may only lock them FOR SHARE (a fetch parks a
-- drained run under that lock, so that no publication slips past it).
CREATE POLICY idem_outbox_aggregates_publisher ON @extschema@.idem_outbox_aggregates
    USING (EXISTS (SELECT FROM @extschema@.idem_outbox_grants g
                    WHERE g.privilege OPERATOR(pg_catalog.=) 'publish'
                      AND (g.topic IS NULL OR g.topic OPERATOR(pg_catalog.=) idem_outbox_aggregates.topic)
                      AND pg_catalog.pg_has_role(g.role::pg_catalog.oid, 'USAGE')));
CREATE POLICY idem_outbox_aggregates_consumer_read ON @extschema@.idem_outbox_aggregates
    FOR SELECT
    USING (EXISTS (SELECT FROM @extschema@.idem_outbox_grants g
                    WHERE g.privilege OPERATOR(pg_catalog.=) 'consume'
                      AND (g.topic IS NULL OR g.topic OPERATOR(pg_catalog.=) idem_outbox_aggregates.topic)
                      AND pg_catalog.pg_has_role(g.role::pg_catalog.oid, 'USAGE')));
CREATE POLICY idem_outbox_aggregates_consumer_lock ON @extschema@.idem_outbox_aggregates
    FOR UPDATE
    USING (EXISTS (SELECT FROM @extschema@.idem_outbox_grants g
                    WHERE g.privilege OPERATOR(pg_catalog.=) 'consume'
                      AND (g.topic IS NULL OR g.topic OPERATOR(pg_catalog.=) idem_outbox_aggregates.topic)
                      AND pg_catalog.pg_has_role(g.role::pg_catalog.oid, 'USAGE')))
    WITH CHECK (false);
-- A group's subscriptions and runs: the roles that may read the topic as
-- that group.  Publishers of the topic see its subscriptions and make or
-- free the groups' runs of what they publish.
CREATE POLICY idem_outbox_subscriptions_consumer ON @extschema@.idem_outbox_subscriptions
    USING (EXISTS (SELECT FROM @extschema@.idem_outbox_grants g
                    WHERE g.privilege OPERATOR(pg_catalog.=) 'consume'
                      AND (g.topic IS NULL OR g.topic OPERATOR(pg_catalog.=) idem_outbox_subscriptions.topic)
                      AND (g.consumer IS NULL OR g.consumer OPERATOR(pg_catalog.=) idem_outbox_subscriptions.consumer)
                      AND pg_catalog.pg_has_role(g.role::pg_catalog.oid, 'USAGE')));
CREATE POLICY idem_outbox_subscriptions_publisher ON @extschema@.idem_outbox_subscriptions
    FOR SELECT
    USING (EXISTS (SELECT FROM @extschema@.idem_outbox_grants g
                    WHERE g.privilege OPERATOR(pg_catalog.=) 'publish'
                      AND (g.topic IS NULL OR g.topic OPERATOR(pg_catalog.=) idem_outbox_subscriptions.topic)
                      AND pg_catalog.pg_has_role(g.role::pg_catalog.oid, 'USAGE')));
CREATE POLICY idem_outbox_runs_consumer ON @extschema@.idem_outbox_runs
    USING (EXISTS (SELECT FROM @extschema@.idem_outbox_grants g
                    WHERE g.privilege OPERATOR(pg_catalog.=) 'consume'
                      AND (g.topic IS NULL OR g.topic OPERATOR(pg_catalog.=) idem_outbox_runs.topic)
                      AND (g.consumer IS NULL OR g.consumer OPERATOR(pg_catalog.=) idem_outbox_runs.consumer)
                      AND pg_catalog.pg_has_role(g.role::pg_catalog.oid, 'USAGE')));
CREATE POLICY idem_outbox_runs_publisher_read ON @extschema@.idem_outbox_runs
    FOR SELECT
    USING (EXISTS (SELECT FROM @extschema@.idem_outbox_grants g
                    WHERE g.privilege OPERATOR(pg_catalog.=) 'publish'
                      AND (g.topic IS NULL OR g.topic OPERATOR(pg_catalog.=) idem_outbox_runs.topic)
                      AND pg_catalog.pg_has_role(g.role::pg_catalog.oid, 'USAGE')));
CREATE POLICY idem_outbox_runs_publisher_insert ON @extschema@.idem_outbox_runs
    FOR INSERT
    WITH CHECK (EXISTS (SELECT FROM @extschema@.idem_outbox_grants g
                    WHERE g.privilege OPERATOR(pg_catalog.=) 'publish'
                      AND (g.topic IS NULL OR g.topic OPERATOR(pg_catalog.=) idem_outbox_runs.topic)
                      AND pg_catalog.pg_has_role(g.role::pg_catalog.oid, 'USAGE')));
CREATE POLICY idem_outbox_runs_publisher_free ON @extschema@.idem_outbox_runs
    FOR UPDATE
    USING (EXISTS (SELECT FROM @extschema@.idem_outbox_grants g
                    WHERE g.privilege OPERATOR(pg_catalog.=) 'publish'
                      AND (g.topic IS NULL OR g.topic OPERATOR(pg_catalog.=) idem_outbox_runs.topic)
                      AND pg_catalog.pg_has_role(g.role::pg_catalog.oid, 'USAGE')))
    WITH CHECK (EXISTS (SELECT FROM @extschema@.idem_outbox_grants g
                    WHERE g.privilege OPERATOR(pg_catalog.=) 'publish'
                      AND (g.topic IS NULL OR g.topic OPERATOR(pg_catalog.=) idem_outbox_runs.topic)
                      AND pg_catalog.pg_has_role(g.role::pg_catalog.oid, 'USAGE')));

-- Roles that idem_grant gave the outbox in 0.5.0 keep what they had: every
-- topic and every group (docs/security.md says how to narrow it).
INSERT INTO @extschema@.idem_outbox_grants (role, privilege)
SELECT DISTINCT a.grantee::pg_catalog.regrole, v.privilege
  FROM pg_catalog.pg_class c
 CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) AS a
  JOIN (VALUES ('idem_outbox', 'publish'), ('idem_outbox_subscriptions', 'consume')) AS v(rel, privilege)
    ON v.rel OPERATOR(pg_catalog.=) c.relname::pg_catalog.text
 WHERE c.relnamespace OPERATOR(pg_catalog.=) '@extschema@'::pg_catalog.regnamespace
   AND a.privilege_type OPERATOR(pg_catalog.=) 'INSERT'
   AND a.grantee OPERATOR(pg_catalog.<>) 0::pg_catalog.oid
   AND a.grantee OPERATOR(pg_catalog.<>) c.relowner;
DO $$
DECLARE
    g pg_catalog.record;
BEGIN
    FOR g IN SELECT r.role, r.privilege FROM @extschema@.idem_outbox_grants r
    LOOP
        IF g.privilege OPERATOR(pg_catalog.=) 'publish' THEN
            EXECUTE pg_catalog.format('GRANT SELECT, INSERT, UPDATE ON TABLE @extschema@.idem_outbox_aggregates TO %s', g.role);
            EXECUTE pg_catalog.format('GRANT SELECT ON TABLE @extschema@.idem_outbox_subscriptions TO %s', g.role);
            EXECUTE pg_catalog.format('GRANT SELECT, INSERT, UPDATE (available_at) ON TABLE @extschema@.idem_outbox_runs TO %s', g.role);
        ELSE
            EXECUTE pg_catalog.format('GRANT SELECT, UPDATE (published) ON TABLE @extschema@.idem_outbox_aggregates TO %s', g.role);
            EXECUTE pg_catalog.format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE @extschema@.idem_outbox_runs TO %s', g.role);
        END IF;
    END LOOP;
END
$$;


CREATE OR REPLACE FUNCTION @extschema@.idem_xact_claims(
    OUT scope pg_catalog.text,
    OUT key pg_catalog.text)
RETURNS SETOF pg_catalog.record
LANGUAGE plpgsql VOLATILE STRICT PARALLEL RESTRICTED
ROWS 1
AS $$
DECLARE
    top pg_catalog.xid8 := pg_catalog.pg_current_xact_id_if_assigned();
    setting pg_catalog.text;
    span pg_catalog.interval;
    lo pg_catalog.timestamptz;
    hi pg_catalog.timestamptz;
BEGIN
    IF top IS NULL THEN
        RETURN;    -- no transaction id: this transaction wrote nothing
    END IF;
    setting := pg_catalog.current_setting('idempotency.default_ttl', true);
    IF setting IS NULL OR setting OPERATOR(pg_catalog.=) '' THEN
        span := '7 days';
    ELSIF pg_catalog.lower(setting) OPERATOR(pg_catalog.=) 'infinity' THEN
        lo := 'infinity';
        hi := 'infinity';
    ELSE
        span := setting::pg_catalog.interval;
    END IF;
    IF lo IS NULL THEN
        lo := pg_catalog.now() OPERATOR(pg_catalog.+) span;
        hi := pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) span;
    END IF;
    RETURN QUERY
        SELECT r.scope::pg_catalog.text, r.key::pg_catalog.text
          FROM @extschema@.idem_records r
         WHERE r.expires_at OPERATOR(pg_catalog.>=) lo
           AND r.expires_at OPERATOR(pg_catalog.<=) hi
           AND CASE WHEN r.updated_at OPERATOR(pg_catalog.<) pg_catalog.now()
                      OR NOT r.status OPERATOR(pg_catalog.=) ANY ('{claimed,in_progress,completed}'::pg_catalog.text[])
                    THEN false
                    WHEN r.xmin OPERATOR(pg_catalog.=) pg_catalog.xid(top) THEN true
                    ELSE COALESCE(pg_catalog.pg_xact_status(((top)::pg_catalog.text::pg_catalog.int8
                                OPERATOR(pg_catalog.+) ((((r.xmin)::pg_catalog.text::pg_catalog.int8
                                    OPERATOR(pg_catalog.-) ((top)::pg_catalog.text::pg_catalog.int8 OPERATOR(pg_catalog.%) 4294967296))
                                   OPERATOR(pg_catalog.+) 6442450944) OPERATOR(pg_catalog.%) 4294967296)
                                OPERATOR(pg_catalog.-) 2147483648)::pg_catalog.text::pg_catalog.xid8)
                                  OPERATOR(pg_catalog.=) 'in progress', false) END
         ORDER BY 1, 2;
    -- (idem_publish runs the same query inline.)
END
$$;

COMMENT ON FUNCTION @extschema@.idem_xact_claims() IS
    'The (scope, key) records this transaction claimed with the default ttl (idem_claim, idem_claim_many, idem_begin); what idem_publish binds a message to';

CREATE OR REPLACE FUNCTION @extschema@.idem_outbox_grant(
    role pg_catalog.regrole,
    privilege pg_catalog.text,
    topic pg_catalog.text DEFAULT NULL,
    consumer pg_catalog.text DEFAULT NULL)
RETURNS pg_catalog.void
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp pg_catalog.text := (SELECT n.nspname FROM pg_catalog.pg_extension e
                            JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace
                            WHERE e.extname OPERATOR(pg_catalog.=) 'idempotency');
BEGIN
    IF idem_outbox_grant.role IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_grant: role must not be null' USING ERRCODE = '22004';
    END IF;
    IF idem_outbox_grant.privilege IS NULL
       OR NOT idem_outbox_grant.privilege OPERATOR(pg_catalog.=) ANY ('{publish,consume}'::pg_catalog.text[]) THEN
        RAISE EXCEPTION 'idem_outbox_grant: unknown privilege "%"', idem_outbox_grant.privilege
            USING ERRCODE = '22023',
                  DETAIL = 'The privilege is ''publish'' (idem_publish to the topic) or ''consume'' (subscribe, fetch and acknowledge as the consumer group).';
    END IF;
    IF idem_outbox_grant.privilege OPERATOR(pg_catalog.=) 'publish' AND idem_outbox_grant.consumer IS NOT NULL THEN
        RAISE EXCEPTION 'idem_outbox_grant: a publish grant names no consumer group' USING ERRCODE = '22023';
    END IF;
    EXECUTE pg_catalog.format('GRANT USAGE ON SCHEMA %I TO %s', nsp, idem_outbox_grant.role);
    IF idem_outbox_grant.privilege OPERATOR(pg_catalog.=) 'publish' THEN
        EXECUTE pg_catalog.format('GRANT SELECT, INSERT ON TABLE %I.idem_outbox TO %s', nsp, idem_outbox_grant.role);
        EXECUTE pg_catalog.format('GRANT USAGE ON SEQUENCE %I.idem_outbox_position_seq TO %s', nsp, idem_outbox_grant.role);
        EXECUTE pg_catalog.format('GRANT SELECT, INSERT, UPDATE ON TABLE %I.idem_outbox_aggregates TO %s', nsp, idem_outbox_grant.role);
        EXECUTE pg_catalog.format('GRANT SELECT ON TABLE %I.idem_outbox_subscriptions TO %s', nsp, idem_outbox_grant.role);
        EXECUTE pg_catalog.format('GRANT SELECT, INSERT, UPDATE (available_at) ON TABLE %I.idem_outbox_runs TO %s', nsp, idem_outbox_grant.role);
    ELSE
        EXECUTE pg_catalog.format('GRANT SELECT ON TABLE %I.idem_outbox TO %s', nsp, idem_outbox_grant.role);
        EXECUTE pg_catalog.format('GRANT SELECT, UPDATE (aggregate) ON TABLE %I.idem_outbox_aggregates TO %s', nsp, idem_outbox_grant.role);
        EXECUTE pg_catalog.format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE %I.idem_outbox_subscriptions TO %s', nsp, idem_outbox_grant.role);
        EXECUTE pg_catalog.format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE %I.idem_outbox_runs TO %s', nsp, idem_outbox_grant.role);
    END IF;
    EXECUTE pg_catalog.format(
        'INSERT INTO %I.idem_outbox_grants (role, privilege, topic, consumer) VALUES ($1, $2, $3, $4)'
        ' ON CONFLICT (role, privilege, topic, consumer) DO NOTHING', nsp)
        USING idem_outbox_grant.role, idem_outbox_grant.privilege, idem_outbox_grant.topic, idem_outbox_grant.consumer;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_outbox_grant(pg_catalog.regrole, pg_catalog.text, pg_catalog.text, pg_catalog.text) IS
    'Let role publish to topic (''publish'') or read topic as consumer group consumer (''consume''); NULL topic or consumer: every one';

REVOKE ALL ON FUNCTION @extschema@.idem_outbox_grant(pg_catalog.regrole, pg_catalog.text, pg_catalog.text, pg_catalog.text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION @extschema@.idem_outbox_revoke(
    role pg_catalog.regrole,
    privilege pg_catalog.text DEFAULT NULL,
    topic pg_catalog.text DEFAULT NULL,
    consumer pg_catalog.text DEFAULT NULL)
RETURNS pg_catalog.int4
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp pg_catalog.text := (SELECT n.nspname FROM pg_catalog.pg_extension e
                            JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace
                            WHERE e.extname OPERATOR(pg_catalog.=) 'idempotency');
    n pg_catalog.int4;
    left_ pg_catalog.bool;
BEGIN
    IF idem_outbox_revoke.role IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_revoke: role must not be null' USING ERRCODE = '22004';
    END IF;
    EXECUTE pg_catalog.format(
        'DELETE FROM %I.idem_outbox_grants g WHERE g.role OPERATOR(pg_catalog.=) $1'
        ' AND ($2 IS NULL OR g.privilege OPERATOR(pg_catalog.=) $2)'
        ' AND ($3 IS NULL OR g.topic OPERATOR(pg_catalog.=) $3)'
        ' AND ($4 IS NULL OR g.consumer OPERATOR(pg_catalog.=) $4)', nsp)
        USING idem_outbox_revoke.role, idem_outbox_revoke.privilege, idem_outbox_revoke.topic, idem_outbox_revoke.consumer;
    GET DIAGNOSTICS n = ROW_COUNT;
    EXECUTE pg_catalog.format('SELECT EXISTS (SELECT FROM %I.idem_outbox_grants g WHERE g.role OPERATOR(pg_catalog.=) $1)', nsp)
        INTO left_ USING idem_outbox_revoke.role;
    IF NOT left_ THEN
        EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %I.idem_outbox, %I.idem_outbox_aggregates, %I.idem_outbox_subscriptions, %I.idem_outbox_runs FROM %s',
                                  nsp, nsp, nsp, nsp, idem_outbox_revoke.role);
        EXECUTE pg_catalog.format('REVOKE ALL ON SEQUENCE %I.idem_outbox_position_seq FROM %s', nsp, idem_outbox_revoke.role);
    END IF;
    RETURN n;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_outbox_revoke(pg_catalog.regrole, pg_catalog.text, pg_catalog.text, pg_catalog.text) IS
    'Take back idem_outbox_grant grants of role (NULL privilege, topic or consumer: any); the table privileges go with the last; returns how many were removed';

REVOKE ALL ON FUNCTION @extschema@.idem_outbox_revoke(pg_catalog.regrole, pg_catalog.text, pg_catalog.text, pg_catalog.text) FROM PUBLIC;

CREATE FUNCTION @extschema@.idem_publish_sql(
    topic pg_catalog.text,
    payload pg_catalog.jsonb,
    key pg_catalog.text DEFAULT NULL,
    aggregate pg_catalog.text DEFAULT NULL,
    headers pg_catalog.jsonb DEFAULT NULL,
    scope pg_catalog.text DEFAULT NULL,
    type pg_catalog.text DEFAULT NULL,
    seq pg_catalog.int4 DEFAULT 0)
RETURNS pg_catalog.uuid
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
AS $$
DECLARE
    top pg_catalog.xid8;
    c_scope pg_catalog.text := idem_publish_sql.scope;
    c_key pg_catalog.text := idem_publish_sql.key;
    found_scope pg_catalog.text;
    mine pg_catalog.bool;
    nclaims pg_catalog.int4 := 0;
    setting pg_catalog.text;
    span pg_catalog.interval;
    lo pg_catalog.timestamptz;
    hi pg_catalog.timestamptz;
    msg_id pg_catalog.uuid;
    how pg_catalog.text;
    existing pg_catalog.xid8;
    pos_ pg_catalog.int8;
    subscribed pg_catalog.bool;
    ordered_ pg_catalog.bool;
BEGIN
    -- Arguments, in order; the detailed checks only when one fails (one
    -- expression on the usual path).
    IF idem_publish_sql.topic IS NULL
       OR pg_catalog.octet_length(idem_publish_sql.topic) OPERATOR(pg_catalog.<) 1
       OR pg_catalog.octet_length(idem_publish_sql.topic) OPERATOR(pg_catalog.>) 128
       OR pg_catalog.octet_length(c_key) OPERATOR(pg_catalog.<) 1
       OR pg_catalog.octet_length(c_key) OPERATOR(pg_catalog.>) 1024
       OR pg_catalog.octet_length(idem_publish_sql.aggregate) OPERATOR(pg_catalog.<) 1
       OR pg_catalog.octet_length(idem_publish_sql.aggregate) OPERATOR(pg_catalog.>) 1024
       OR pg_catalog.jsonb_typeof(idem_publish_sql.headers) OPERATOR(pg_catalog.<>) 'object'
       OR pg_catalog.octet_length(c_scope) OPERATOR(pg_catalog.>) 128
       OR (c_scope IS NOT NULL AND c_key IS NULL)
       OR idem_publish_sql.seq IS NULL OR idem_publish_sql.seq OPERATOR(pg_catalog.<) 0
       OR pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        IF idem_publish_sql.topic IS NULL THEN
            RAISE EXCEPTION 'idem_publish: topic must not be null' USING ERRCODE = '22004';
        END IF;
        IF pg_catalog.octet_length(idem_publish_sql.topic) OPERATOR(pg_catalog.=) 0 THEN
            RAISE EXCEPTION 'idem_publish: topic must not be empty' USING ERRCODE = '22023';
        END IF;
        IF pg_catalog.octet_length(idem_publish_sql.topic) OPERATOR(pg_catalog.>) 128 THEN
            RAISE EXCEPTION 'idem_publish: topic is too long'
                USING ERRCODE = '22001',
                      DETAIL = pg_catalog.format('The topic is %s bytes; the limit is 128 bytes.', pg_catalog.octet_length(idem_publish_sql.topic));
        END IF;
        IF c_key IS NOT NULL THEN
            IF pg_catalog.octet_length(c_key) OPERATOR(pg_catalog.=) 0 THEN
                RAISE EXCEPTION 'idem_publish: key must not be empty' USING ERRCODE = '22023';
            END IF;
            IF pg_catalog.octet_length(c_key) OPERATOR(pg_catalog.>) 1024 THEN
                RAISE EXCEPTION 'idem_publish: key is too long'
                    USING ERRCODE = '22001',
                          DETAIL = pg_catalog.format('The key is %s bytes; the limit is 1024 bytes.', pg_catalog.octet_length(c_key)),
                          HINT = 'Hash long natural keys, for example with sha256(), and use the digest as the key.';
            END IF;
        END IF;
        IF idem_publish_sql.aggregate IS NOT NULL THEN
            IF pg_catalog.octet_length(idem_publish_sql.aggregate) OPERATOR(pg_catalog.=) 0 THEN
                RAISE EXCEPTION 'idem_publish: aggregate must not be empty'
                    USING ERRCODE = '22023', HINT = 'Pass NULL for a message without an aggregate.';
            END IF;
            IF pg_catalog.octet_length(idem_publish_sql.aggregate) OPERATOR(pg_catalog.>) 1024 THEN
                RAISE EXCEPTION 'idem_publish: aggregate is too long'
                    USING ERRCODE = '22001',
                          DETAIL = pg_catalog.format('The aggregate is %s bytes; the limit is 1024 bytes.', pg_catalog.octet_length(idem_publish_sql.aggregate));
            END IF;
        END IF;
        IF idem_publish_sql.headers IS NOT NULL
           AND pg_catalog.jsonb_typeof(idem_publish_sql.headers) OPERATOR(pg_catalog.<>) 'object' THEN
            RAISE EXCEPTION 'idem_publish: headers must be a JSON object'
                USING ERRCODE = '22023',
                      DETAIL = pg_catalog.format('The headers given are a JSON %s.', pg_catalog.jsonb_typeof(idem_publish_sql.headers));
        END IF;
        IF c_scope IS NOT NULL THEN
            IF pg_catalog.octet_length(c_scope) OPERATOR(pg_catalog.>) 128 THEN
                RAISE EXCEPTION 'idem_publish: scope is too long'
                    USING ERRCODE = '22001',
                          DETAIL = pg_catalog.format('The scope is %s bytes; the limit is 128 bytes.', pg_catalog.octet_length(c_scope));
            END IF;
            IF c_key IS NULL THEN
                RAISE EXCEPTION 'idem_publish: key must not be null when scope is given'
                    USING ERRCODE = '22004',
                          HINT = 'Name the claim with scope => and key =>, as given to idem_claim.';
            END IF;
        END IF;
        IF idem_publish_sql.seq IS NULL THEN
            RAISE EXCEPTION 'idem_publish: seq must not be null' USING ERRCODE = '22004';
        END IF;
        IF idem_publish_sql.seq OPERATOR(pg_catalog.<) 0 THEN
            RAISE EXCEPTION 'idem_publish: seq must not be negative'
                USING ERRCODE = '22023', DETAIL = pg_catalog.format('The seq given was %s.', idem_publish_sql.seq);
        END IF;
        IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
            RAISE EXCEPTION 'cannot execute idem_publish() in a read-only transaction' USING ERRCODE = '25006';
        END IF;

    END IF;

    -- The claim the message belongs to.
    IF c_scope IS NOT NULL THEN
        -- Named: it must be a record this transaction wrote (see
        -- idem_xact_claims for how that is told).
        top := pg_catalog.pg_current_xact_id_if_assigned();
        IF top IS NOT NULL THEN
            SELECT CASE WHEN r2.updated_at OPERATOR(pg_catalog.<) pg_catalog.now()
                          OR NOT r2.status OPERATOR(pg_catalog.=) ANY ('{claimed,in_progress,completed}'::pg_catalog.text[])
                        THEN false
                        WHEN r2.xmin OPERATOR(pg_catalog.=) pg_catalog.xid(top) THEN true
                        ELSE COALESCE(pg_catalog.pg_xact_status(((top)::pg_catalog.text::pg_catalog.int8
                                OPERATOR(pg_catalog.+) ((((r2.xmin)::pg_catalog.text::pg_catalog.int8
                                    OPERATOR(pg_catalog.-) ((top)::pg_catalog.text::pg_catalog.int8 OPERATOR(pg_catalog.%) 4294967296))
                                   OPERATOR(pg_catalog.+) 6442450944) OPERATOR(pg_catalog.%) 4294967296)
                                OPERATOR(pg_catalog.-) 2147483648)::pg_catalog.text::pg_catalog.xid8)
                                      OPERATOR(pg_catalog.=) 'in progress', false) END
              INTO mine
              FROM @extschema@.idem_records r2
             WHERE r2.scope OPERATOR(pg_catalog.=) (c_scope COLLATE pg_catalog."C")
               AND r2.key OPERATOR(pg_catalog.=) (c_key COLLATE pg_catalog."C");
        END IF;
        IF mine IS NULL OR NOT mine THEN
            RAISE EXCEPTION 'idem_publish: this transaction holds no claim of the key'
                USING ERRCODE = 'ID020',
                      DETAIL = pg_catalog.format('Key "%s" in scope "%s" was not claimed by this transaction: idem_claim returned false for it, or was not called.', c_key, c_scope),
                      HINT = 'Publish only after idem_claim() returned true, in the same transaction; a duplicate has published its message already.';
        END IF;
    ELSIF c_key IS NULL THEN
        -- Found: the one claim of this transaction, as idem_xact_claims()
        -- finds it (the same query, inline: a call costs as much again).
        top := pg_catalog.pg_current_xact_id_if_assigned();
        IF top IS NOT NULL THEN
            setting := pg_catalog.current_setting('idempotency.default_ttl', true);
            IF setting IS NULL OR setting OPERATOR(pg_catalog.=) '' THEN
                span := '7 days';
            ELSIF pg_catalog.lower(setting) OPERATOR(pg_catalog.=) 'infinity' THEN
                lo := 'infinity';
                hi := 'infinity';
            ELSE
                span := setting::pg_catalog.interval;
            END IF;
            IF lo IS NULL THEN
                lo := pg_catalog.now() OPERATOR(pg_catalog.+) span;
                hi := pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) span;
            END IF;
            SELECT pg_catalog.count(*)::pg_catalog.int4, pg_catalog.min(x.scope), pg_catalog.min(x.key)
              INTO nclaims, found_scope, c_key
              FROM (SELECT r.scope, r.key
                      FROM @extschema@.idem_records r
                     WHERE r.expires_at OPERATOR(pg_catalog.>=) lo
                       AND r.expires_at OPERATOR(pg_catalog.<=) hi
                       AND CASE WHEN r.updated_at OPERATOR(pg_catalog.<) pg_catalog.now()
                                  OR NOT r.status OPERATOR(pg_catalog.=) ANY ('{claimed,in_progress,completed}'::pg_catalog.text[])
                                THEN false
                                WHEN r.xmin OPERATOR(pg_catalog.=) pg_catalog.xid(top) THEN true
                                ELSE COALESCE(pg_catalog.pg_xact_status(((top)::pg_catalog.text::pg_catalog.int8
                                OPERATOR(pg_catalog.+) ((((r.xmin)::pg_catalog.text::pg_catalog.int8
                                    OPERATOR(pg_catalog.-) ((top)::pg_catalog.text::pg_catalog.int8 OPERATOR(pg_catalog.%) 4294967296))
                                   OPERATOR(pg_catalog.+) 6442450944) OPERATOR(pg_catalog.%) 4294967296)
                                OPERATOR(pg_catalog.-) 2147483648)::pg_catalog.text::pg_catalog.xid8)
                                              OPERATOR(pg_catalog.=) 'in progress', false) END
                     LIMIT 2) x;
        END IF;
        IF nclaims OPERATOR(pg_catalog.=) 0 THEN
            RAISE EXCEPTION 'idem_publish: this transaction holds no claim'
                USING ERRCODE = 'ID020',
                      DETAIL = 'No record claimed with the default ttl was written by this transaction: idem_claim returned false, or was not called.',
                      HINT = 'Publish only after idem_claim() returned true, in the same transaction; for a claim with a ttl of its own, name it with scope => and key =>; without a claim, pass key =>.';
        END IF;
        IF nclaims OPERATOR(pg_catalog.>) 1 THEN
            RAISE EXCEPTION 'idem_publish: this transaction holds several claims'
                USING ERRCODE = 'ID020',
                      DETAIL = 'The message id cannot be derived from one claim.',
                      HINT = 'Name the claim the message belongs to with scope => and key =>.';
        END IF;
        c_scope := found_scope;
    END IF;

    -- idem_outbox_id(topic, c_key, c_scope, seq), written out: a call of
    -- one of our functions by name could be made ambiguous by an overload
    -- with more (defaulted) arguments in our schema (docs/security.md).
    msg_id := pg_catalog.overlay(pg_catalog.overlay(pg_catalog.encode(pg_catalog.substr(pg_catalog.sha256(
                  pg_catalog.convert_to(
                      'idempotency.outbox.v1'
                      OPERATOR(pg_catalog.||) COALESCE(':claim:' OPERATOR(pg_catalog.||) pg_catalog.length(c_scope)
                                                       OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) c_scope, ':key')
                      OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) pg_catalog.length(c_key)
                      OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) c_key
                      OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) pg_catalog.length(idem_publish_sql.topic)
                      OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) idem_publish_sql.topic
                      OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) idem_publish_sql.seq,
                      'UTF8')), 1, 16), 'hex'),
                  '8', 13, 1), '8', 17, 1)::pg_catalog.uuid;

    -- The aggregate's lock: its row in idem_outbox_aggregates, locked FOR
    -- NO KEY UPDATE (inserted by the first publication) before the
    -- position is drawn and held until this transaction ends, so that the
    -- messages of one aggregate take their positions in commit order.  A
    -- lock writes a small WAL record and no row version (an update would
    -- write one, and its index and pruning records).  A row lock on our
    -- own table: only roles that may publish to the topic can take it
    -- (docs/security.md).  Only for what consumer groups read: a topic
    -- relayed by logical messages only, or set to pull => false (the
    -- table's relay only, as Debezium reads it in commit order from the
    -- WAL), takes no lock, and its message no entry in the ordering index
    -- (pulled is false).
    ordered_ := idem_publish_sql.aggregate IS NOT NULL
                AND NOT EXISTS (SELECT FROM @extschema@.idem_outbox_topics t
                                 WHERE t.topic OPERATOR(pg_catalog.=) (idem_publish_sql.topic COLLATE pg_catalog."C")
                                   AND (t.relay OPERATOR(pg_catalog.=) 'message' OR NOT t.pull));
    -- Then the message, pulled unless its INSERT sees the topic not pulled
    -- and without a group (a group subscribed in a race with pull => false,
    -- under REPEATABLE READ, is served all the same); the topic's relay
    -- comes back with the row.  Without the lock, only a message not
    -- pulled: if the topic was set to pull (or got a group) since the look
    -- above, nothing is written and the second pass takes the lock (rare:
    -- idem_outbox_topic is the owner's).  A message of a claim this
    -- transaction holds (c_scope is set) cannot be published by another
    -- transaction meanwhile (it would have to write the claim's record,
    -- which this transaction holds): a look-up and a plain INSERT, without
    -- the confirmation record of ON CONFLICT.  Whether a group reads the
    -- topic: a range of the topic index bounded by the topic on both sides,
    -- in its order (which only the index gives cheaply), not EXISTS (...
    -- topic = ...), whose plan scans the whole table when other topics
    -- have very many groups; row-level security then filters only the
    -- topic's own rows.  Looked up once: a message written not pulled
    -- was written seeing no group.
    LOOP
        IF ordered_ THEN
            LOOP
                PERFORM FROM @extschema@.idem_outbox_aggregates a
                  WHERE a.topic OPERATOR(pg_catalog.=) (idem_publish_sql.topic COLLATE pg_catalog."C")
                    AND a.aggregate OPERATOR(pg_catalog.=) (idem_publish_sql.aggregate COLLATE pg_catalog."C")
                    FOR NO KEY UPDATE;
                EXIT WHEN FOUND;
                -- The first publication: a concurrent first one makes this
                -- wait for its end, insert nothing, and lock the row above.
                INSERT INTO @extschema@.idem_outbox_aggregates AS a (topic, aggregate)
                VALUES (idem_publish_sql.topic, idem_publish_sql.aggregate)
                ON CONFLICT ON CONSTRAINT idem_outbox_aggregates_pkey DO NOTHING;
                EXIT WHEN FOUND;
            END LOOP;
        END IF;
        IF c_scope IS NOT NULL THEN
            IF NOT EXISTS (SELECT FROM @extschema@.idem_outbox o WHERE o.id OPERATOR(pg_catalog.=) msg_id) THEN
                INSERT INTO @extschema@.idem_outbox AS o
                       (id, topic, aggregate, type, payload, headers, scope, key, seq, xact_id, created_at, pulled)
                SELECT msg_id, idem_publish_sql.topic, idem_publish_sql.aggregate, idem_publish_sql.type,
                       idem_publish_sql.payload, idem_publish_sql.headers, c_scope, c_key, idem_publish_sql.seq,
                       pg_catalog.pg_current_xact_id(), pg_catalog.now(), p.pulled
                  FROM (SELECT COALESCE(t.relay, 'table') AS relay,
                               COALESCE(t.pull, true)
                               OR COALESCE((SELECT true FROM @extschema@.idem_outbox_subscriptions s
                                            WHERE s.topic OPERATOR(pg_catalog.>=) (idem_publish_sql.topic COLLATE pg_catalog."C")
                                              AND s.topic OPERATOR(pg_catalog.<=) (idem_publish_sql.topic COLLATE pg_catalog."C")
                                            ORDER BY s.topic LIMIT 1), false) AS pulled
                          FROM (VALUES (1)) AS one(x)
                          LEFT JOIN @extschema@.idem_outbox_topics t
                            ON t.topic OPERATOR(pg_catalog.=) (idem_publish_sql.topic COLLATE pg_catalog."C")) AS p
                 WHERE p.relay OPERATOR(pg_catalog.<>) 'message'
                   AND (ordered_ OR idem_publish_sql.aggregate IS NULL OR NOT p.pulled)
                RETURNING o.position,
                          (SELECT t2.relay FROM @extschema@.idem_outbox_topics t2
                            WHERE t2.topic OPERATOR(pg_catalog.=) o.topic),
                          CASE WHEN o.pulled THEN COALESCE((SELECT true FROM @extschema@.idem_outbox_subscriptions s
                                                       WHERE s.topic OPERATOR(pg_catalog.>=) o.topic
                                                         AND s.topic OPERATOR(pg_catalog.<=) o.topic
                                                       ORDER BY s.topic LIMIT 1), false) ELSE false END
                     INTO pos_, how, subscribed;
            ELSE
                pos_ := NULL;
            END IF;
        ELSE
            INSERT INTO @extschema@.idem_outbox AS o
                   (id, topic, aggregate, type, payload, headers, scope, key, seq, xact_id, created_at, pulled)
            SELECT msg_id, idem_publish_sql.topic, idem_publish_sql.aggregate, idem_publish_sql.type,
                   idem_publish_sql.payload, idem_publish_sql.headers, c_scope, c_key, idem_publish_sql.seq,
                   pg_catalog.pg_current_xact_id(), pg_catalog.now(), p.pulled
              FROM (SELECT COALESCE(t.relay, 'table') AS relay,
                           COALESCE(t.pull, true)
                           OR COALESCE((SELECT true FROM @extschema@.idem_outbox_subscriptions s
                                        WHERE s.topic OPERATOR(pg_catalog.>=) (idem_publish_sql.topic COLLATE pg_catalog."C")
                                          AND s.topic OPERATOR(pg_catalog.<=) (idem_publish_sql.topic COLLATE pg_catalog."C")
                                        ORDER BY s.topic LIMIT 1), false) AS pulled
                      FROM (VALUES (1)) AS one(x)
                      LEFT JOIN @extschema@.idem_outbox_topics t
                        ON t.topic OPERATOR(pg_catalog.=) (idem_publish_sql.topic COLLATE pg_catalog."C")) AS p
             WHERE p.relay OPERATOR(pg_catalog.<>) 'message'
               AND (ordered_ OR idem_publish_sql.aggregate IS NULL OR NOT p.pulled)
            ON CONFLICT (id) DO NOTHING
            RETURNING o.position,
                      (SELECT t2.relay FROM @extschema@.idem_outbox_topics t2
                        WHERE t2.topic OPERATOR(pg_catalog.=) o.topic),
                      CASE WHEN o.pulled THEN COALESCE((SELECT true FROM @extschema@.idem_outbox_subscriptions s
                                                   WHERE s.topic OPERATOR(pg_catalog.>=) o.topic
                                                     AND s.topic OPERATOR(pg_catalog.<=) o.topic
                                                   ORDER BY s.topic LIMIT 1), false) ELSE false END
                 INTO pos_, how, subscribed;
        END IF;
        EXIT WHEN pos_ IS NOT NULL OR ordered_ OR idem_publish_sql.aggregate IS NULL;
        EXIT WHEN EXISTS (SELECT FROM @extschema@.idem_outbox o WHERE o.id OPERATOR(pg_catalog.=) msg_id)
               OR EXISTS (SELECT FROM @extschema@.idem_outbox_topics t
                           WHERE t.topic OPERATOR(pg_catalog.=) (idem_publish_sql.topic COLLATE pg_catalog."C")
                             AND t.relay OPERATOR(pg_catalog.=) 'message');
        ordered_ := true;
    END LOOP;
    IF pos_ IS NOT NULL THEN
        IF subscribed THEN
            -- The pull API: every group of the topic gets a run of this
            -- message's aggregate (from this message: whatever came before
            -- is acknowledged or predates the group), or of the message
            -- alone; a parked run (drained) is freed.  Under the aggregate's
            -- lock, so no fetch parks the run past this message.
            INSERT INTO @extschema@.idem_outbox_runs AS r (consumer, topic, aggregate, lone, acked, available_at)
            SELECT s.consumer, idem_publish_sql.topic, idem_publish_sql.aggregate,
                   CASE WHEN idem_publish_sql.aggregate IS NULL THEN msg_id END,
                   pos_ OPERATOR(pg_catalog.-) 1, pg_catalog.now()
              FROM @extschema@.idem_outbox_subscriptions s
             WHERE s.topic OPERATOR(pg_catalog.=) (idem_publish_sql.topic COLLATE pg_catalog."C")
            ON CONFLICT ON CONSTRAINT idem_outbox_runs_key DO NOTHING;
            IF idem_publish_sql.aggregate IS NOT NULL THEN
                UPDATE @extschema@.idem_outbox_runs r
                   SET available_at = pg_catalog.now()
                 WHERE r.topic OPERATOR(pg_catalog.=) (idem_publish_sql.topic COLLATE pg_catalog."C")
                   AND r.aggregate OPERATOR(pg_catalog.=) (idem_publish_sql.aggregate COLLATE pg_catalog."C")
                   AND r.lone IS NULL
                   AND r.available_at OPERATOR(pg_catalog.=) 'infinity'::pg_catalog.timestamptz;
            END IF;
        END IF;
        IF how IS NULL OR how OPERATOR(pg_catalog.=) 'table' THEN
            RETURN msg_id;
        END IF;
    ELSE
        SELECT t.relay INTO how FROM @extschema@.idem_outbox_topics t
         WHERE t.topic OPERATOR(pg_catalog.=) (idem_publish_sql.topic COLLATE pg_catalog."C");
        IF how IS NULL OR how OPERATOR(pg_catalog.<>) 'message' THEN
            -- A message with this id is in the table.
            SELECT o.xact_id INTO existing FROM @extschema@.idem_outbox o
             WHERE o.id OPERATOR(pg_catalog.=) msg_id;
            IF existing OPERATOR(pg_catalog.=) pg_catalog.pg_current_xact_id() THEN
                RAISE EXCEPTION 'idem_publish: message already published by this transaction'
                    USING ERRCODE = 'ID021',
                          DETAIL = pg_catalog.format('Message %s (topic "%s", seq %s) was published earlier in this transaction.', msg_id, idem_publish_sql.topic, idem_publish_sql.seq),
                          HINT = 'Give each message of one claim and topic its own seq => 0, 1, 2, ...';
            END IF;
            -- Published by an earlier transaction: a duplicate, nothing written.
            RETURN NULL;
        END IF;
    END IF;

    -- Relayed (also) by a logical decoding message.
    IF pg_catalog.current_setting('wal_level') OPERATOR(pg_catalog.<>) 'logical' THEN
        RAISE EXCEPTION 'idem_publish: topic "%" relays through logical decoding messages, which need wal_level = logical', idem_publish_sql.topic
            USING ERRCODE = '55000',
                  DETAIL = pg_catalog.format('wal_level is %s; the message would be decoded by nobody.', pg_catalog.current_setting('wal_level')),
                  HINT = 'Set wal_level = logical and restart, or relay the topic through the table: SELECT idem_outbox_topic(topic, relay => ''table'').';
    END IF;
    PERFORM pg_catalog.pg_logical_emit_message(true, 'idempotency.outbox',
        pg_catalog.jsonb_build_object(
            'id', msg_id, 'topic', idem_publish_sql.topic, 'aggregate', idem_publish_sql.aggregate,
            'type', idem_publish_sql.type, 'headers', idem_publish_sql.headers,
            'payload', idem_publish_sql.payload, 'scope', c_scope, 'key', c_key,
            'seq', idem_publish_sql.seq)::pg_catalog.text);
    RETURN msg_id;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_publish_sql(pg_catalog.text, pg_catalog.jsonb, pg_catalog.text, pg_catalog.text, pg_catalog.jsonb, pg_catalog.text, pg_catalog.text, pg_catalog.int4) IS
    'Internal (idem_publish): a publication in SQL, what idem_publish does where its fast path does not apply; the same arguments and result';

-- idem_publish: in C (outbox_publish.c), a fast path for a message of this
-- transaction's claim to a topic no consumer group reads in order (no
-- aggregate, or pull => false), and idem_publish_sql above for the rest;
-- the portable edition calls idem_publish_sql.
CREATE OR REPLACE FUNCTION @extschema@.idem_publish(
    topic pg_catalog.text,
    payload pg_catalog.jsonb,
    key pg_catalog.text DEFAULT NULL,
    aggregate pg_catalog.text DEFAULT NULL,
    headers pg_catalog.jsonb DEFAULT NULL,
    scope pg_catalog.text DEFAULT NULL,
    type pg_catalog.text DEFAULT NULL,
    seq pg_catalog.int4 DEFAULT 0)
RETURNS pg_catalog.uuid
AS 'MODULE_PATHNAME', 'idem_publish'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_publish(pg_catalog.text, pg_catalog.jsonb, pg_catalog.text, pg_catalog.text, pg_catalog.jsonb, pg_catalog.text, pg_catalog.text, pg_catalog.int4) IS
    'Publish a message in the current transaction (it exists if and only if the transaction commits), bound to this transaction''s claim or to an explicit key; returns its id, NULL when an earlier transaction published it';

DROP FUNCTION @extschema@.idem_outbox_topic(pg_catalog.text, pg_catalog.text, pg_catalog.interval);
CREATE FUNCTION @extschema@.idem_outbox_topic(
    topic pg_catalog.text,
    relay pg_catalog.text DEFAULT NULL,
    retention pg_catalog.interval DEFAULT NULL,
    pull pg_catalog.bool DEFAULT NULL)
RETURNS pg_catalog.void
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
AS $$
BEGIN
    IF idem_outbox_topic.topic IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_topic: topic must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.octet_length(idem_outbox_topic.topic) OPERATOR(pg_catalog.=) 0 THEN
        RAISE EXCEPTION 'idem_outbox_topic: topic must not be empty' USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.octet_length(idem_outbox_topic.topic) OPERATOR(pg_catalog.>) 128 THEN
        RAISE EXCEPTION 'idem_outbox_topic: topic is too long'
            USING ERRCODE = '22001',
                  DETAIL = pg_catalog.format('The topic is %s bytes; the limit is 128 bytes.', pg_catalog.octet_length(idem_outbox_topic.topic));
    END IF;
    IF idem_outbox_topic.relay IS NOT NULL
       AND NOT idem_outbox_topic.relay OPERATOR(pg_catalog.=) ANY ('{table,message,both}'::pg_catalog.text[]) THEN
        RAISE EXCEPTION 'idem_outbox_topic: unknown relay "%"', idem_outbox_topic.relay
            USING ERRCODE = '22023',
                  DETAIL = 'The relay is ''table'' (the table idem_outbox), ''message'' (a logical decoding message) or ''both''.';
    END IF;
    IF idem_outbox_topic.retention OPERATOR(pg_catalog.<) '0'::pg_catalog.interval THEN
        RAISE EXCEPTION 'idem_outbox_topic: retention must not be negative'
            USING ERRCODE = '22023', DETAIL = pg_catalog.format('The retention given was %s.', idem_outbox_topic.retention);
    END IF;
    IF idem_outbox_topic.retention OPERATOR(pg_catalog.>) '100 years'::pg_catalog.interval THEN
        RAISE EXCEPTION 'idem_outbox_topic: retention must be at most 100 years'
            USING ERRCODE = '22023', DETAIL = pg_catalog.format('The retention given was %s.', idem_outbox_topic.retention),
                  HINT = 'A retention is finite: acknowledged messages are deleted once it has passed.';
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idem_outbox_topic() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    IF NOT idem_outbox_topic.pull THEN
        -- No group may read a topic that is not pulled: wait for the
        -- subscriptions being made, keep new ones off until this
        -- transaction ends (idem_outbox_subscribe checks pull in the
        -- statement that subscribes), then look.
        LOCK TABLE @extschema@.idem_outbox_subscriptions IN SHARE ROW EXCLUSIVE MODE;
        IF EXISTS (SELECT FROM @extschema@.idem_outbox_subscriptions s
                    WHERE s.topic OPERATOR(pg_catalog.=) (idem_outbox_topic.topic COLLATE pg_catalog."C")) THEN
            RAISE EXCEPTION 'idem_outbox_topic: topic "%" has consumer groups', idem_outbox_topic.topic
                USING ERRCODE = '55000',
                      DETAIL = 'A topic that is not pulled keeps no order for consumer groups; its groups would get nothing more.',
                      HINT = 'Unsubscribe its groups first (idem_outbox_unsubscribe), or keep pull => true.';
        END IF;
    END IF;
    INSERT INTO @extschema@.idem_outbox_topics AS t (topic, relay, retention, updated_at, pull)
    VALUES (idem_outbox_topic.topic,
            COALESCE(idem_outbox_topic.relay, 'table'),
            COALESCE(idem_outbox_topic.retention, '7 days'::pg_catalog.interval),
            pg_catalog.now(),
            COALESCE(idem_outbox_topic.pull, true))
    ON CONFLICT ON CONSTRAINT idem_outbox_topics_pkey DO UPDATE
       SET relay = COALESCE(idem_outbox_topic.relay, t.relay),
           retention = COALESCE(idem_outbox_topic.retention, t.retention),
           pull = COALESCE(idem_outbox_topic.pull, t.pull),
           updated_at = pg_catalog.now();
END
$$;

COMMENT ON FUNCTION @extschema@.idem_outbox_topic(pg_catalog.text, pg_catalog.text, pg_catalog.interval, pg_catalog.bool) IS
    'Set the relay (table, message or both), the retention of acknowledged messages and pull (whether consumer groups may read it) of a topic; NULL keeps the current setting';

REVOKE ALL ON FUNCTION @extschema@.idem_outbox_topic(pg_catalog.text, pg_catalog.text, pg_catalog.interval, pg_catalog.bool) FROM PUBLIC;

CREATE OR REPLACE FUNCTION @extschema@.idem_outbox_subscribe(
    consumer pg_catalog.text,
    topic pg_catalog.text,
    from_start pg_catalog.bool DEFAULT false)
RETURNS pg_catalog.bool
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
AS $$
DECLARE
    h pg_catalog.xid8;
BEGIN
    IF idem_outbox_subscribe.consumer IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_subscribe: consumer must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.octet_length(idem_outbox_subscribe.consumer) OPERATOR(pg_catalog.=) 0 THEN
        RAISE EXCEPTION 'idem_outbox_subscribe: consumer must not be empty' USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.octet_length(idem_outbox_subscribe.consumer) OPERATOR(pg_catalog.>) 120 THEN
        RAISE EXCEPTION 'idem_outbox_subscribe: consumer is too long'
            USING ERRCODE = '22001',
                  DETAIL = pg_catalog.format('The consumer is %s bytes; the limit is 120 bytes.', pg_catalog.octet_length(idem_outbox_subscribe.consumer));
    END IF;
    IF idem_outbox_subscribe.topic IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_subscribe: topic must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.octet_length(idem_outbox_subscribe.topic) OPERATOR(pg_catalog.=) 0 THEN
        RAISE EXCEPTION 'idem_outbox_subscribe: topic must not be empty' USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.octet_length(idem_outbox_subscribe.topic) OPERATOR(pg_catalog.>) 128 THEN
        RAISE EXCEPTION 'idem_outbox_subscribe: topic is too long'
            USING ERRCODE = '22001',
                  DETAIL = pg_catalog.format('The topic is %s bytes; the limit is 128 bytes.', pg_catalog.octet_length(idem_outbox_subscribe.topic));
    END IF;
    IF idem_outbox_subscribe.from_start IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_subscribe: from_start must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idem_outbox_subscribe() in a read-only transaction' USING ERRCODE = '25006';
    END IF;

    -- From the start: a run for every aggregate (and every message
    -- without one) still in the table, from its first message pulled.
    -- Otherwise none: idem_publish makes the group's runs from then on,
    -- each from the message that makes it.  The horizon is informational
    -- (the oldest transaction running at subscription).  Only a topic
    -- that is pulled, as this statement sees it (idem_outbox_topic setting
    -- pull => false locks the table against it first).
    INSERT INTO @extschema@.idem_outbox_subscriptions AS s (consumer, topic, horizon, created_at)
    SELECT idem_outbox_subscribe.consumer, idem_outbox_subscribe.topic,
           CASE WHEN idem_outbox_subscribe.from_start THEN '0'::pg_catalog.xid8
                ELSE pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot()) END,
           pg_catalog.now()
     WHERE NOT EXISTS (SELECT FROM @extschema@.idem_outbox_topics t
                        WHERE t.topic OPERATOR(pg_catalog.=) (idem_outbox_subscribe.topic COLLATE pg_catalog."C")
                          AND NOT t.pull)
    ON CONFLICT ON CONSTRAINT idem_outbox_subscriptions_pkey DO NOTHING;
    IF NOT FOUND THEN
        IF EXISTS (SELECT FROM @extschema@.idem_outbox_subscriptions s
                    WHERE s.consumer OPERATOR(pg_catalog.=) (idem_outbox_subscribe.consumer COLLATE pg_catalog."C")
                      AND s.topic OPERATOR(pg_catalog.=) (idem_outbox_subscribe.topic COLLATE pg_catalog."C")) THEN
            RETURN false;
        END IF;
        RAISE EXCEPTION 'idem_outbox_subscribe: topic "%" is not pulled', idem_outbox_subscribe.topic
            USING ERRCODE = '55000',
                  DETAIL = 'The topic was set to pull => false: it is relayed by the table only (Debezium), without the order consumer groups need.',
                  HINT = 'Its owner sets it back with idem_outbox_topic(topic, pull => true); groups get what is published from then on.';
    END IF;
    IF idem_outbox_subscribe.from_start THEN
        INSERT INTO @extschema@.idem_outbox_runs (consumer, topic, aggregate, lone, acked, available_at)
        SELECT idem_outbox_subscribe.consumer, o.topic, o.aggregate,
               CASE WHEN o.aggregate IS NULL THEN o.id END,
               pg_catalog.min(o.position) OPERATOR(pg_catalog.-) 1, pg_catalog.min(o.created_at)
          FROM @extschema@.idem_outbox o
         WHERE o.topic OPERATOR(pg_catalog.=) (idem_outbox_subscribe.topic COLLATE pg_catalog."C")
           AND o.pulled
         GROUP BY o.topic, o.aggregate, CASE WHEN o.aggregate IS NULL THEN o.id END
        ON CONFLICT ON CONSTRAINT idem_outbox_runs_key DO NOTHING;
    END IF;
    RETURN true;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_outbox_subscribe(pg_catalog.text, pg_catalog.text, pg_catalog.bool) IS
    'Subscribe consumer group consumer to topic: the messages published from now on, or every message still kept (from_start); false when it was subscribed already';

CREATE OR REPLACE FUNCTION @extschema@.idem_outbox_unsubscribe(
    consumer pg_catalog.text,
    topic pg_catalog.text)
RETURNS pg_catalog.bool
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
AS $$
BEGIN
    IF idem_outbox_unsubscribe.consumer IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_unsubscribe: consumer must not be null' USING ERRCODE = '22004';
    END IF;
    IF idem_outbox_unsubscribe.topic IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_unsubscribe: topic must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idem_outbox_unsubscribe() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    DELETE FROM @extschema@.idem_outbox_subscriptions s
     WHERE s.consumer OPERATOR(pg_catalog.=) (idem_outbox_unsubscribe.consumer COLLATE pg_catalog."C")
       AND s.topic OPERATOR(pg_catalog.=) (idem_outbox_unsubscribe.topic COLLATE pg_catalog."C");
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    DELETE FROM @extschema@.idem_outbox_runs r
     WHERE r.consumer OPERATOR(pg_catalog.=) (idem_outbox_unsubscribe.consumer COLLATE pg_catalog."C")
       AND r.topic OPERATOR(pg_catalog.=) (idem_outbox_unsubscribe.topic COLLATE pg_catalog."C");
    RETURN true;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_outbox_unsubscribe(pg_catalog.text, pg_catalog.text) IS
    'End the subscription of consumer group consumer to topic and forget its progress (its messages no longer hold back the purge); false when there was none';

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
    taken pg_catalog.int4 := 0;
    ids pg_catalog.uuid[] := '{}';
    tids pg_catalog.tid[] := '{}';
    gtids pg_catalog.tid[];
    atts pg_catalog.int4[] := '{}';
    run pg_catalog.record;
    got pg_catalog.uuid[];
    pos pg_catalog.int8[];
    n pg_catalog.int4;
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
    IF idem_outbox_fetch.lease OPERATOR(pg_catalog.>) '1 day'::pg_catalog.interval THEN
        RAISE EXCEPTION 'idem_outbox_fetch: lease must be at most 1 day'
            USING ERRCODE = '22023', DETAIL = pg_catalog.format('The lease given was %s.', idem_outbox_fetch.lease),
                  HINT = 'A lease is finite so that the messages of a consumer that crashed come back; acknowledge in time, or fetch fewer messages at a time.';
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

    -- Free runs of the group, the longest free first (the index on
    -- (consumer, available_at, acked)), each locked FOR UPDATE SKIP LOCKED:
    -- the one lock that keeps concurrent fetches of a group off each
    -- other's runs.  Leased and parked runs are never read (their
    -- available_at is in the future), nor another group's.  From each, its
    -- next messages in position order, up to what is left of max; then the
    -- run is leased as a whole until until_.  A run with nothing to deliver
    -- is parked (or, if a publisher holds its aggregate, put back at the end
    -- of the line: clock_timestamp() is after now_, so this fetch does not
    -- see it again).  Work and locks: one run per iteration, and every
    -- iteration but the drained ones hands messages out.
    LOOP
        SELECT r.ctid AS tid, r.topic, r.aggregate, r.lone, r.acked, r.acked_ahead, r.handed_upto, r.attempts
          INTO run
          FROM @extschema@.idem_outbox_runs r
         WHERE r.consumer OPERATOR(pg_catalog.=) (idem_outbox_fetch.consumer COLLATE pg_catalog."C")
           AND r.available_at OPERATOR(pg_catalog.<=) now_
         ORDER BY r.available_at, r.acked
         LIMIT 1
           FOR UPDATE SKIP LOCKED;
        EXIT WHEN NOT FOUND;
        IF run.lone IS NOT NULL THEN
            SELECT pg_catalog.array_agg(o.id), pg_catalog.array_agg(o.position), pg_catalog.array_agg(o.ctid)
              INTO got, pos, gtids
              FROM @extschema@.idem_outbox o
             WHERE o.id OPERATOR(pg_catalog.=) run.lone;
        ELSE
            SELECT pg_catalog.array_agg(x.id ORDER BY x.position), pg_catalog.array_agg(x.position ORDER BY x.position),
                   pg_catalog.array_agg(x.ctid ORDER BY x.position)
              INTO got, pos, gtids
              FROM (SELECT o.id, o.position, o.ctid
                      FROM @extschema@.idem_outbox o
                     WHERE o.topic OPERATOR(pg_catalog.=) run.topic
                       AND o.aggregate OPERATOR(pg_catalog.=) run.aggregate
                       AND o.pulled
                       AND o.position OPERATOR(pg_catalog.>) run.acked
                       AND NOT COALESCE(o.position OPERATOR(pg_catalog.=) ANY (run.acked_ahead), false)
                     ORDER BY o.position
                     LIMIT idem_outbox_fetch.max OPERATOR(pg_catalog.-) taken) x;
        END IF;
        IF got IS NULL THEN
            IF run.lone IS NOT NULL THEN
                -- its message is gone (unsubscribed and purged meanwhile)
                DELETE FROM @extschema@.idem_outbox_runs r
                 WHERE r.ctid OPERATOR(pg_catalog.=) run.tid;
            ELSIF EXISTS (SELECT FROM @extschema@.idem_outbox_aggregates a
                           WHERE a.topic OPERATOR(pg_catalog.=) run.topic
                             AND a.aggregate OPERATOR(pg_catalog.=) run.aggregate
                             FOR SHARE SKIP LOCKED)
                  AND NOT EXISTS (SELECT FROM @extschema@.idem_outbox o
                                   WHERE o.topic OPERATOR(pg_catalog.=) run.topic
                                     AND o.aggregate OPERATOR(pg_catalog.=) run.aggregate
                                     AND o.pulled
                                     AND o.position OPERATOR(pg_catalog.>) run.acked
                                     AND NOT COALESCE(o.position OPERATOR(pg_catalog.=) ANY (run.acked_ahead), false)) THEN
                -- Drained, and no publisher of the aggregate is at work
                -- (under its lock, a new snapshot): park it; the next
                -- idem_publish for the aggregate frees it.
                UPDATE @extschema@.idem_outbox_runs r
                   SET available_at = 'infinity', acked_ahead = NULL, leased_upto = NULL
                 WHERE r.ctid OPERATOR(pg_catalog.=) run.tid;
            ELSE
                UPDATE @extschema@.idem_outbox_runs r
                   SET available_at = pg_catalog.clock_timestamp()
                 WHERE r.ctid OPERATOR(pg_catalog.=) run.tid;
            END IF;
            CONTINUE;
        END IF;
        n := pg_catalog.cardinality(got);
        -- attempts: one more than the run's for what an earlier lease
        -- handed out already, 1 for the rest
        atts := atts OPERATOR(pg_catalog.||) ARRAY(
            SELECT CASE WHEN p.p OPERATOR(pg_catalog.<=) run.handed_upto
                        THEN run.attempts OPERATOR(pg_catalog.+) 1 ELSE 1 END
              FROM pg_catalog.unnest(pos) WITH ORDINALITY AS p(p, k) ORDER BY p.k);
        ids := ids OPERATOR(pg_catalog.||) got;
        tids := tids OPERATOR(pg_catalog.||) gtids;
        UPDATE @extschema@.idem_outbox_runs r
           SET available_at = until_,
               leased_upto = pos[n],
               attempts = CASE WHEN pos[1] OPERATOR(pg_catalog.<=) r.handed_upto
                               THEN r.attempts OPERATOR(pg_catalog.+) 1 ELSE 1 END,
               handed_upto = GREATEST(r.handed_upto, pos[n])
         WHERE r.ctid OPERATOR(pg_catalog.=) run.tid;
        taken := taken OPERATOR(pg_catalog.+) n;
        EXIT WHEN taken OPERATOR(pg_catalog.>=) idem_outbox_fetch.max;
    END LOOP;

    -- The messages handed out, read again by their tuple ids (a message is
    -- never updated, and one not acknowledged is never deleted).
    RETURN QUERY
        SELECT o.id, o.topic::pg_catalog.text, o.aggregate::pg_catalog.text, o.type, o.payload,
               o.headers, o.created_at, u.att
          FROM ROWS FROM (pg_catalog.unnest(tids), pg_catalog.unnest(ids), pg_catalog.unnest(atts)) AS u(tid, id, att)
          JOIN @extschema@.idem_outbox o
            ON o.ctid OPERATOR(pg_catalog.=) u.tid AND o.id OPERATOR(pg_catalog.=) u.id
         ORDER BY o.position;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_outbox_fetch(pg_catalog.text, pg_catalog.int4, pg_catalog.interval) IS
    'Lease up to max unacknowledged messages of consumer group consumer''s topics for lease, in commit order per aggregate; a message whose lease runs out is handed out again';

CREATE OR REPLACE FUNCTION @extschema@.idem_outbox_ack(
    consumer pg_catalog.text,
    id pg_catalog.uuid)
RETURNS pg_catalog.bool
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
AS $$
DECLARE
    m pg_catalog.record;
    r pg_catalog.record;
    mine pg_catalog.int8[];
    ahead pg_catalog.int8[];
    seq pg_catalog.int8[];
    new_acked pg_catalog.int8;
    k pg_catalog.int4;
    done pg_catalog.int4 := 0;
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
    -- Per run (in a fixed order, so that two batches cannot deadlock): lock
    -- the group's run, note the positions it had not acknowledged, then
    -- move its position over the run's next messages while they are
    -- acknowledged; a run whose lease is all acknowledged is free again.
    -- Work: the messages given, and per run one range of the index on
    -- (topic, aggregate, position) no longer than what is acknowledged
    -- ahead of its position.
    FOR m IN
        SELECT o.topic, o.aggregate, CASE WHEN o.aggregate IS NULL THEN o.id END AS lone,
               pg_catalog.array_agg(DISTINCT o.position) AS ps
          FROM @extschema@.idem_outbox o
         WHERE o.id OPERATOR(pg_catalog.=) ANY (ARRAY[idem_outbox_ack.id]) AND o.pulled
         GROUP BY 1, 2, 3
         ORDER BY 1, 2, 3
    LOOP
        IF NOT EXISTS (SELECT FROM @extschema@.idem_outbox_subscriptions s
                        WHERE s.consumer OPERATOR(pg_catalog.=) (idem_outbox_ack.consumer COLLATE pg_catalog."C")
                          AND s.topic OPERATOR(pg_catalog.=) m.topic) THEN
            RAISE EXCEPTION 'idem_outbox_ack: consumer "%" is not subscribed to topic "%"', idem_outbox_ack.consumer, m.topic
                USING ERRCODE = '42704',
                      DETAIL = pg_catalog.format('Message %s is of topic "%s".', idem_outbox_ack.id, m.topic),
                      HINT = 'Acknowledge with the consumer name given to idem_outbox_fetch.';
        END IF;
        IF m.lone IS NULL THEN
            SELECT rr.ctid AS tid, rr.acked, rr.acked_ahead INTO r
              FROM @extschema@.idem_outbox_runs rr
             WHERE rr.topic OPERATOR(pg_catalog.=) m.topic
               AND rr.aggregate OPERATOR(pg_catalog.=) m.aggregate AND rr.lone IS NULL
               AND rr.consumer OPERATOR(pg_catalog.=) (idem_outbox_ack.consumer COLLATE pg_catalog."C")
               FOR UPDATE;
        ELSE
            SELECT rr.ctid AS tid, rr.acked, rr.acked_ahead INTO r
              FROM @extschema@.idem_outbox_runs rr
             WHERE rr.topic OPERATOR(pg_catalog.=) m.topic
               AND rr.aggregate IS NULL AND rr.lone OPERATOR(pg_catalog.=) m.lone
               AND rr.consumer OPERATOR(pg_catalog.=) (idem_outbox_ack.consumer COLLATE pg_catalog."C")
               FOR UPDATE;
        END IF;
        -- no run: acknowledged already, or published before the subscription
        CONTINUE WHEN NOT FOUND;
        IF m.lone IS NOT NULL THEN
            DELETE FROM @extschema@.idem_outbox_runs rr WHERE rr.ctid OPERATOR(pg_catalog.=) r.tid;
            done := done OPERATOR(pg_catalog.+) 1;
            CONTINUE;
        END IF;
        mine := ARRAY(SELECT p.p FROM pg_catalog.unnest(m.ps) AS p(p)
                       WHERE p.p OPERATOR(pg_catalog.>) r.acked
                         AND NOT COALESCE(p.p OPERATOR(pg_catalog.=) ANY (r.acked_ahead), false));
        CONTINUE WHEN pg_catalog.cardinality(mine) OPERATOR(pg_catalog.=) 0;
        done := done OPERATOR(pg_catalog.+) pg_catalog.cardinality(mine);
        ahead := COALESCE(r.acked_ahead, '{}'::pg_catalog.int8[]) OPERATOR(pg_catalog.||) mine;
        SELECT pg_catalog.array_agg(x.position ORDER BY x.position) INTO seq
          FROM (SELECT o.position FROM @extschema@.idem_outbox o
                 WHERE o.topic OPERATOR(pg_catalog.=) m.topic
                   AND o.aggregate OPERATOR(pg_catalog.=) m.aggregate
                   AND o.pulled
                   AND o.position OPERATOR(pg_catalog.>) r.acked
                 ORDER BY o.position
                 LIMIT pg_catalog.cardinality(ahead) OPERATOR(pg_catalog.+) 1) x;
        new_acked := r.acked;
        ahead := ARRAY(SELECT p.p FROM pg_catalog.unnest(ahead) AS p(p) ORDER BY p.p);
        IF seq[1:pg_catalog.cardinality(ahead)] OPERATOR(pg_catalog.=) ahead THEN
            -- the usual case: what is acknowledged is the run's next messages
            new_acked := seq[pg_catalog.cardinality(ahead)];
        ELSE
            FOR k IN 1 .. COALESCE(pg_catalog.cardinality(seq), 0) LOOP
                EXIT WHEN NOT seq[k] OPERATOR(pg_catalog.=) ANY (ahead);
                new_acked := seq[k];
            END LOOP;
        END IF;
        ahead := ARRAY(SELECT p.p FROM pg_catalog.unnest(ahead) AS p(p)
                        WHERE p.p OPERATOR(pg_catalog.>) new_acked ORDER BY p.p);
        UPDATE @extschema@.idem_outbox_runs rr
           SET acked = new_acked,
               acked_ahead = CASE WHEN pg_catalog.cardinality(ahead) OPERATOR(pg_catalog.=) 0 THEN NULL ELSE ahead END,
               available_at = CASE WHEN rr.available_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
                                        AND rr.available_at OPERATOR(pg_catalog.<) 'infinity'::pg_catalog.timestamptz
                                        AND new_acked OPERATOR(pg_catalog.>=) rr.leased_upto
                                   THEN pg_catalog.clock_timestamp() ELSE rr.available_at END,
               attempts = CASE WHEN new_acked OPERATOR(pg_catalog.>=) rr.handed_upto THEN 0 ELSE rr.attempts END
         WHERE rr.ctid OPERATOR(pg_catalog.=) r.tid;
    END LOOP;
    RETURN done OPERATOR(pg_catalog.>) 0;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_outbox_ack(pg_catalog.text, pg_catalog.uuid) IS
    'Acknowledge message id for consumer group consumer: it is not handed out to the group again; true when this call acknowledged it, false when it was already';

CREATE OR REPLACE FUNCTION @extschema@.idem_outbox_ack_many(
    consumer pg_catalog.text,
    ids pg_catalog.uuid[])
RETURNS pg_catalog.int4
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
AS $$
DECLARE
    m pg_catalog.record;
    r pg_catalog.record;
    mine pg_catalog.int8[];
    ahead pg_catalog.int8[];
    seq pg_catalog.int8[];
    new_acked pg_catalog.int8;
    k pg_catalog.int4;
    done pg_catalog.int4 := 0;
BEGIN
    IF idem_outbox_ack_many.consumer IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_ack_many: consumer must not be null' USING ERRCODE = '22004';
    END IF;
    IF idem_outbox_ack_many.ids IS NULL THEN
        RAISE EXCEPTION 'idem_outbox_ack_many: ids must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idem_outbox_ack_many() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    -- Per run (in a fixed order, so that two batches cannot deadlock): lock
    -- the group's run, note the positions it had not acknowledged, then
    -- move its position over the run's next messages while they are
    -- acknowledged; a run whose lease is all acknowledged is free again.
    -- Work: the messages given, and per run one range of the index on
    -- (topic, aggregate, position) no longer than what is acknowledged
    -- ahead of its position.
    FOR m IN
        SELECT o.topic, o.aggregate, CASE WHEN o.aggregate IS NULL THEN o.id END AS lone,
               pg_catalog.array_agg(DISTINCT o.position) AS ps
          FROM @extschema@.idem_outbox o
         WHERE o.id OPERATOR(pg_catalog.=) ANY (idem_outbox_ack_many.ids) AND o.pulled
         GROUP BY 1, 2, 3
         ORDER BY 1, 2, 3
    LOOP
        IF NOT EXISTS (SELECT FROM @extschema@.idem_outbox_subscriptions s
                        WHERE s.consumer OPERATOR(pg_catalog.=) (idem_outbox_ack_many.consumer COLLATE pg_catalog."C")
                          AND s.topic OPERATOR(pg_catalog.=) m.topic) THEN
            RAISE EXCEPTION 'idem_outbox_ack_many: consumer "%" is not subscribed to topic "%"', idem_outbox_ack_many.consumer, m.topic
                USING ERRCODE = '42704',
                      DETAIL = pg_catalog.format('A message given is of topic "%s".', m.topic),
                      HINT = 'Acknowledge with the consumer name given to idem_outbox_fetch.';
        END IF;
        IF m.lone IS NULL THEN
            SELECT rr.ctid AS tid, rr.acked, rr.acked_ahead INTO r
              FROM @extschema@.idem_outbox_runs rr
             WHERE rr.topic OPERATOR(pg_catalog.=) m.topic
               AND rr.aggregate OPERATOR(pg_catalog.=) m.aggregate AND rr.lone IS NULL
               AND rr.consumer OPERATOR(pg_catalog.=) (idem_outbox_ack_many.consumer COLLATE pg_catalog."C")
               FOR UPDATE;
        ELSE
            SELECT rr.ctid AS tid, rr.acked, rr.acked_ahead INTO r
              FROM @extschema@.idem_outbox_runs rr
             WHERE rr.topic OPERATOR(pg_catalog.=) m.topic
               AND rr.aggregate IS NULL AND rr.lone OPERATOR(pg_catalog.=) m.lone
               AND rr.consumer OPERATOR(pg_catalog.=) (idem_outbox_ack_many.consumer COLLATE pg_catalog."C")
               FOR UPDATE;
        END IF;
        -- no run: acknowledged already, or published before the subscription
        CONTINUE WHEN NOT FOUND;
        IF m.lone IS NOT NULL THEN
            DELETE FROM @extschema@.idem_outbox_runs rr WHERE rr.ctid OPERATOR(pg_catalog.=) r.tid;
            done := done OPERATOR(pg_catalog.+) 1;
            CONTINUE;
        END IF;
        mine := ARRAY(SELECT p.p FROM pg_catalog.unnest(m.ps) AS p(p)
                       WHERE p.p OPERATOR(pg_catalog.>) r.acked
                         AND NOT COALESCE(p.p OPERATOR(pg_catalog.=) ANY (r.acked_ahead), false));
        CONTINUE WHEN pg_catalog.cardinality(mine) OPERATOR(pg_catalog.=) 0;
        done := done OPERATOR(pg_catalog.+) pg_catalog.cardinality(mine);
        ahead := COALESCE(r.acked_ahead, '{}'::pg_catalog.int8[]) OPERATOR(pg_catalog.||) mine;
        SELECT pg_catalog.array_agg(x.position ORDER BY x.position) INTO seq
          FROM (SELECT o.position FROM @extschema@.idem_outbox o
                 WHERE o.topic OPERATOR(pg_catalog.=) m.topic
                   AND o.aggregate OPERATOR(pg_catalog.=) m.aggregate
                   AND o.pulled
                   AND o.position OPERATOR(pg_catalog.>) r.acked
                 ORDER BY o.position
                 LIMIT pg_catalog.cardinality(ahead) OPERATOR(pg_catalog.+) 1) x;
        new_acked := r.acked;
        ahead := ARRAY(SELECT p.p FROM pg_catalog.unnest(ahead) AS p(p) ORDER BY p.p);
        IF seq[1:pg_catalog.cardinality(ahead)] OPERATOR(pg_catalog.=) ahead THEN
            -- the usual case: what is acknowledged is the run's next messages
            new_acked := seq[pg_catalog.cardinality(ahead)];
        ELSE
            FOR k IN 1 .. COALESCE(pg_catalog.cardinality(seq), 0) LOOP
                EXIT WHEN NOT seq[k] OPERATOR(pg_catalog.=) ANY (ahead);
                new_acked := seq[k];
            END LOOP;
        END IF;
        ahead := ARRAY(SELECT p.p FROM pg_catalog.unnest(ahead) AS p(p)
                        WHERE p.p OPERATOR(pg_catalog.>) new_acked ORDER BY p.p);
        UPDATE @extschema@.idem_outbox_runs rr
           SET acked = new_acked,
               acked_ahead = CASE WHEN pg_catalog.cardinality(ahead) OPERATOR(pg_catalog.=) 0 THEN NULL ELSE ahead END,
               available_at = CASE WHEN rr.available_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
                                        AND rr.available_at OPERATOR(pg_catalog.<) 'infinity'::pg_catalog.timestamptz
                                        AND new_acked OPERATOR(pg_catalog.>=) rr.leased_upto
                                   THEN pg_catalog.clock_timestamp() ELSE rr.available_at END,
               attempts = CASE WHEN new_acked OPERATOR(pg_catalog.>=) rr.handed_upto THEN 0 ELSE rr.attempts END
         WHERE rr.ctid OPERATOR(pg_catalog.=) r.tid;
    END LOOP;
    RETURN done;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_outbox_ack_many(pg_catalog.text, pg_catalog.uuid[]) IS
    'Acknowledge messages ids (a fetched batch) for consumer group consumer, as idem_outbox_ack(consumer, id) each; returns how many this call acknowledged';

CREATE OR REPLACE FUNCTION @extschema@.idem_outbox_purge(batch_size pg_catalog.int4 DEFAULT 10000)
RETURNS pg_catalog.int8
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
AS $$
DECLARE
    hand pg_catalog.uuid;
    last_ pg_catalog.uuid;
    seen pg_catalog.int4;
    n pg_catalog.int8;
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
    SELECT h.last_id INTO hand FROM @extschema@.idem_outbox_purge_hand h FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO @extschema@.idem_outbox_purge_hand (one, last_id) VALUES (true, NULL)
        ON CONFLICT ON CONSTRAINT idem_outbox_purge_hand_pkey DO NOTHING;
    END IF;

    WITH cand AS (
        SELECT o.id, o.topic, o.aggregate, o.position, o.created_at, o.pulled
          FROM @extschema@.idem_outbox o
         WHERE hand IS NULL OR o.id OPERATOR(pg_catalog.>) hand
         ORDER BY o.id
         LIMIT idem_outbox_purge.batch_size
           FOR UPDATE SKIP LOCKED
    ), gone AS (
        DELETE FROM @extschema@.idem_outbox o
         USING cand c
         WHERE o.id OPERATOR(pg_catalog.=) c.id
           AND c.created_at OPERATOR(pg_catalog.<) (now_ OPERATOR(pg_catalog.-) COALESCE(
                   (SELECT t.retention FROM @extschema@.idem_outbox_topics t
                     WHERE t.topic OPERATOR(pg_catalog.=) c.topic), '7 days'::pg_catalog.interval))
           AND NOT EXISTS (
                   SELECT FROM @extschema@.idem_outbox_runs r
                    WHERE c.pulled
                      AND r.topic OPERATOR(pg_catalog.=) c.topic
                      AND r.aggregate OPERATOR(pg_catalog.=) c.aggregate
                      AND r.acked OPERATOR(pg_catalog.<) c.position
                      AND NOT COALESCE(c.position OPERATOR(pg_catalog.=) ANY (r.acked_ahead), false))
           AND NOT EXISTS (
                   SELECT FROM @extschema@.idem_outbox_runs r
                    WHERE c.aggregate IS NULL
                      AND r.topic OPERATOR(pg_catalog.=) c.topic
                      AND r.aggregate IS NULL
                      AND r.lone OPERATOR(pg_catalog.=) c.id)
        RETURNING 1
    )
    SELECT (SELECT pg_catalog.count(*) FROM gone), pg_catalog.count(*)::pg_catalog.int4,
           (pg_catalog.array_agg(c.id ORDER BY c.id DESC))[1]
      INTO n, seen, last_
      FROM cand c;
    UPDATE @extschema@.idem_outbox_purge_hand h
       SET last_id = CASE WHEN seen OPERATOR(pg_catalog.<) idem_outbox_purge.batch_size THEN NULL ELSE last_ END;
    RETURN n;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_outbox_purge(pg_catalog.int4) IS
    'Examine batch_size messages (going on from the previous call) and delete those older than their topic''s retention that every consumer group of their topic has acknowledged; returns the number removed';

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
    -- The outbox is not part of 'write': publishing and consuming are
    -- granted per topic and consumer group with idem_outbox_grant.
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
    EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %I.idem_outbox_runs FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %I.idem_outbox_aggregates FROM %s', nsp, role);
    EXECUTE pg_catalog.format('DELETE FROM %I.idem_outbox_grants g WHERE g.role OPERATOR(pg_catalog.=) $1', nsp) USING role;
    -- 'define' (SELECT on idem_machines stays PUBLIC's).
    EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %I.idem_machines FROM %s', nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %I.idem_machine_define(pg_catalog.text, pg_catalog.jsonb), %I.idem_machine_drop(pg_catalog.text) FROM %s', nsp, nsp, role);
    EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %I.idem_guard(pg_catalog.regclass, pg_catalog.name, pg_catalog.text, pg_catalog.name, pg_catalog.bool), %I.idem_unguard(pg_catalog.regclass, pg_catalog.name) FROM %s', nsp, nsp, role);
END
$$;

COMMENT ON FUNCTION @extschema@.idem_revoke(pg_catalog.regrole) IS
    'Take back what idem_grant and idem_outbox_grant gave role (the schema''s USAGE stays: other objects may need it)';

REVOKE ALL ON FUNCTION @extschema@.idem_grant(pg_catalog.regrole, pg_catalog.text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_revoke(pg_catalog.regrole) FROM PUBLIC;

-- inbox: idem_inbox's claim passes its scope typed.
CREATE OR REPLACE FUNCTION @extschema@.idem_inbox(
    consumer pg_catalog.text,
    message_id pg_catalog.uuid,
    ttl pg_catalog.interval DEFAULT NULL,
    fingerprint pg_catalog.text DEFAULT NULL)
RETURNS pg_catalog.bool
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
AS $$
BEGIN
    IF idem_inbox.consumer IS NULL THEN
        RAISE EXCEPTION 'idem_inbox: consumer must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.octet_length(idem_inbox.consumer) OPERATOR(pg_catalog.=) 0 THEN
        RAISE EXCEPTION 'idem_inbox: consumer must not be empty' USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.octet_length(idem_inbox.consumer) OPERATOR(pg_catalog.>) 120 THEN
        RAISE EXCEPTION 'idem_inbox: consumer is too long'
            USING ERRCODE = '22001',
                  DETAIL = pg_catalog.format('The consumer is %s bytes; the limit is 120 bytes.', pg_catalog.octet_length(idem_inbox.consumer));
    END IF;
    IF idem_inbox.message_id IS NULL THEN
        RAISE EXCEPTION 'idem_inbox: message_id must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idem_inbox() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    RETURN @extschema@.idem_claim(('inbox:' OPERATOR(pg_catalog.||) idem_inbox.consumer)::pg_catalog.text,
                                  idem_inbox.message_id::pg_catalog.text,
                                  idem_inbox.ttl, idem_inbox.fingerprint);
END
$$;

-- unknown outcome: idem_http_begin(..., on_unknown) answers a request
-- whose first attempt's lease ran out after its mark (idem_effect_started)
-- with unknown, a 500 (or reconcile, with the claim taken); idem_claim
-- records such a takeover in effect_unknown_attempt (in the library; the
-- portable body through the declaration of idem_claim above); idem_stats
-- counts owner_gone_takeovers and unknown_takeovers.  idem_http_begin gets
-- a new argument, idem_stats, its view and idem_cluster_stats new columns:
-- dropped and created again with their privileges (a view over them would
-- stop the update); the PostgREST functions pass the new argument.
DROP FUNCTION @extschema@.idem_http_begin(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.bytea, pg_catalog.text, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.text, pg_catalog.int4);

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

GRANT EXECUTE ON FUNCTION @extschema@.idem_http_begin(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.bytea, pg_catalog.text, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.text) TO PUBLIC;

COMMENT ON TYPE @extschema@.idem_http_response IS
    'An answer of idem_http_begin: action (proceed, reconcile, replay, in_flight, mismatch, missing_key, invalid_key, no_response, unknown) and, except for proceed and reconcile, the HTTP status, headers and body to send';

CREATE OR REPLACE FUNCTION @extschema@.idem_http_postgrest_pre_request(
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

DROP VIEW @extschema@.idem_stats;
DROP FUNCTION @extschema@.idem_stats();

CREATE FUNCTION @extschema@.idem_stats(
    OUT dbid pg_catalog.oid,
    OUT scope pg_catalog.text,
    OUT claimed pg_catalog.int8,
    OUT duplicates pg_catalog.int8,
    OUT in_progress_conflicts pg_catalog.int8,
    OUT fingerprint_mismatches pg_catalog.int8,
    OUT takeovers pg_catalog.int8,
    OUT completed pg_catalog.int8,
    OUT failed pg_catalog.int8,
    OUT purged pg_catalog.int8,
    OUT owner_gone_takeovers pg_catalog.int8,
    OUT unknown_takeovers pg_catalog.int8,
    OUT stats_reset pg_catalog.timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'idem_stats'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.idem_stats() IS
    'Idempotency counters per (database, scope) since the last reset; read them through the idem_stats view';

REVOKE ALL ON FUNCTION @extschema@.idem_stats() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.idem_stats() TO pg_monitor;

CREATE VIEW @extschema@.idem_stats AS
    SELECT s.dbid,
           d.datname,
           s.scope,
           s.claimed,
           s.duplicates,
           s.in_progress_conflicts,
           s.fingerprint_mismatches,
           s.takeovers,
           s.owner_gone_takeovers,
           s.unknown_takeovers,
           s.completed,
           s.failed,
           s.purged,
           s.stats_reset
      FROM @extschema@.idem_stats() AS s
      LEFT JOIN pg_catalog.pg_database AS d
        ON d.oid OPERATOR(pg_catalog.=) s.dbid;

COMMENT ON VIEW @extschema@.idem_stats IS
    'Idempotency outcomes per database and scope since the last idem_stats_reset(); needs shared_preload_libraries';

REVOKE ALL ON @extschema@.idem_stats FROM PUBLIC;
GRANT SELECT ON @extschema@.idem_stats TO pg_monitor;

DROP FUNCTION @extschema@.idem_cluster_stats();

CREATE FUNCTION @extschema@.idem_cluster_stats(
    OUT nodename pg_catalog.text,
    OUT nodeport pg_catalog.int4,
    OUT dbid pg_catalog.oid,
    OUT datname pg_catalog.name,
    OUT scope pg_catalog.text,
    OUT claimed pg_catalog.int8,
    OUT duplicates pg_catalog.int8,
    OUT in_progress_conflicts pg_catalog.int8,
    OUT fingerprint_mismatches pg_catalog.int8,
    OUT takeovers pg_catalog.int8,
    OUT owner_gone_takeovers pg_catalog.int8,
    OUT unknown_takeovers pg_catalog.int8,
    OUT completed pg_catalog.int8,
    OUT failed pg_catalog.int8,
    OUT purged pg_catalog.int8,
    OUT stats_reset pg_catalog.timestamptz)
RETURNS SETOF record
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp text := (SELECT n.nspname FROM pg_catalog.pg_extension e
                 JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace
                 WHERE e.extname OPERATOR(pg_catalog.=) 'idempotency');
    node record;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension e
                   WHERE e.extname OPERATOR(pg_catalog.=) 'citus') THEN
        RAISE EXCEPTION 'idem_cluster_stats: the citus extension is not installed in this database'
            USING ERRCODE = '55000',
                  DETAIL = 'idem_cluster_stats collects idem_stats from every node of a Citus cluster.',
                  HINT = 'On a single server, read the idem_stats view.';
    END IF;
    -- Each node answers one value: its idem_stats rows as a JSON array.
    FOR node IN
        SELECT coalesce(d.nodename, pg_catalog.current_setting('citus.local_hostname')) AS host,
               coalesce(d.nodeport, pg_catalog.current_setting('port')::pg_catalog.int4) AS port,
               r.success, r.result
          FROM pg_catalog.run_command_on_all_nodes(pg_catalog.format(
                   'SELECT COALESCE(pg_catalog.json_agg(s), ''[]'') FROM %I.idem_stats AS s', nsp)) AS r
          LEFT JOIN pg_catalog.pg_dist_node AS d ON d.nodeid OPERATOR(pg_catalog.=) r.nodeid
         ORDER BY 1, 2
    LOOP
        IF NOT node.success THEN
            RAISE EXCEPTION 'idem_cluster_stats: node %:% did not answer', node.host, node.port
                USING ERRCODE = '55000',
                      DETAIL = pg_catalog.format('The node said: %s', node.result),
                      HINT = 'Every node needs idempotency in shared_preload_libraries, the extension created in this database, and must let the calling role connect and read idem_stats.';
        END IF;
        RETURN QUERY
            SELECT node.host, node.port, s.dbid, s.datname, s.scope, s.claimed, s.duplicates,
                   s.in_progress_conflicts, s.fingerprint_mismatches, s.takeovers,
                   s.owner_gone_takeovers, s.unknown_takeovers, s.completed, s.failed, s.purged, s.stats_reset
              FROM pg_catalog.json_to_recordset(node.result::pg_catalog.json) AS s(
                   dbid pg_catalog.oid, datname pg_catalog.name, scope pg_catalog.text,
                   claimed pg_catalog.int8, duplicates pg_catalog.int8,
                   in_progress_conflicts pg_catalog.int8, fingerprint_mismatches pg_catalog.int8,
                   takeovers pg_catalog.int8, owner_gone_takeovers pg_catalog.int8,
                   unknown_takeovers pg_catalog.int8, completed pg_catalog.int8, failed pg_catalog.int8,
                   purged pg_catalog.int8, stats_reset pg_catalog.timestamptz)
             ORDER BY s.datname, s.scope;
    END LOOP;
END
$$;

COMMENT ON FUNCTION @extschema@.idem_cluster_stats() IS
    'Citus: the idem_stats counters of every node of the cluster, one row per node, database and scope (docs/citus.md)';

REVOKE ALL ON FUNCTION @extschema@.idem_cluster_stats() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.idem_cluster_stats() TO pg_monitor;
