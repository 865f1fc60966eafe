-- Hardening of the HTTP layer (docs/security.md#http): the fingerprint is
-- unambiguous and includes how the body was read, records stored with
-- 0.5.0's fingerprint are still recognised, a stored response is replayed
-- only as idem_http_result would store it (idem_http_check), the
-- never-stored headers cannot be allowed, header names that differ only
-- in case are refused, a bare key with a comma is invalid.  The overloads
-- a database owner can plant, and advisory locks: test/t/026_http_hostile.pl.
TRUNCATE idem_records;
\set SHOW_CONTEXT never

\getenv abs_srcdir PG_ABS_SRCDIR
\set try_sql :abs_srcdir '/helpers/try.sql'
\i :try_sql
SET idem_test.try_detail = on;

CREATE FUNCTION pg_temp.show(r idem_http_response) RETURNS text
LANGUAGE sql AS $$
    SELECT concat_ws(' ', r.action, r.status, r.headers::text,
                     coalesce(r.problem ->> 'code', encode(r.body, 'escape'), '(no body)'))
$$;
-- Begin, store a response, commit: the first request of a key.
CREATE FUNCTION pg_temp.first(k text, method text, path text, body bytea, ct text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    r idem_http_response := idem_http_begin(k, method, path, body, content_type => ct);
BEGIN
    IF r.action = 'proceed' THEN
        PERFORM idem_http_finish(k, 201, '{"content-type": "text/plain"}', 'first');
    END IF;
    RETURN r.action;
END
$$;

--------------------------------------------------------------------------
-- The fingerprint: length-prefixed parts, the body's reading included
--------------------------------------------------------------------------
-- A path ending in LF against a body starting with it, a method ending in
-- LF against the path: other requests, 422.
BEGIN; SELECT pg_temp.first('fp-1', 'POST', E'/a\n', 'b', NULL); COMMIT;
SELECT pg_temp.show(idem_http_begin('fp-1', 'POST', '/a', E'\nb'));
BEGIN; SELECT pg_temp.first('fp-2', E'POST\n/a', '', NULL, NULL); COMMIT;
SELECT pg_temp.show(idem_http_begin('fp-2', 'POST', E'/a\n'));
-- The same canonical bytes read as JSON and as text: 422 both ways; a
-- JSON body's own media type counts (merge-patch is another request),
-- its parameters do not; for a text body they do (the charset).
BEGIN; SELECT pg_temp.first('fp-3', 'POST', '/o', '{"a": 1}', 'application/json'); COMMIT;
SELECT pg_temp.show(idem_http_begin('fp-3', 'POST', '/o', '{"a": 1}', content_type => 'text/plain'));
SELECT pg_temp.show(idem_http_begin('fp-3', 'POST', '/o', '{"a": 1}'));
SELECT pg_temp.show(idem_http_begin('fp-3', 'POST', '/o', '{"a": 1}', content_type => 'application/merge-patch+json'));
SELECT pg_temp.show(idem_http_begin('fp-3', 'POST', '/o', '{"a":1}', content_type => 'Application/JSON; charset=utf-8'));
BEGIN; SELECT pg_temp.first('fp-4', 'POST', '/o', 'x', 'text/plain; charset=utf-8'); COMMIT;
SELECT pg_temp.show(idem_http_begin('fp-4', 'POST', '/o', 'x', content_type => 'text/plain;charset=UTF-8'));
SELECT pg_temp.show(idem_http_begin('fp-4', 'POST', '/o', 'x', content_type => 'text/plain; charset=latin1'));
-- The function itself: version 2 by default, version 1 is 0.5.0's format.
SELECT idem_http_fingerprint('POST', '/a', 'b') AS v2, idem_http_fingerprint('post ', '/a', 'b', version => 1) AS v1;
SELECT pg_temp.try($$SELECT idem_http_fingerprint('POST', '/a', version => 3)$$);
SELECT pg_temp.try($$SELECT idem_http_fingerprint(NULL, '/a')$$);

-- A record stored by 0.5.0 (a version 1 fingerprint) is replayed to the
-- same request after the upgrade, and another request is still 422.
BEGIN;
SELECT idem_claim('http', 'old-1', NULL, idem_http_fingerprint('POST', '/o', '{"b": 2, "a": 1}', 'application/json', 1));
SELECT idem_complete('http', 'old-1', idem_http_result(201, '{"content-type": "text/plain"}', 'stored by 0.5.0'));
COMMIT;
SELECT pg_temp.show(idem_http_begin('old-1', 'POST', '/o', '{"a":1,"b":2}', content_type => 'application/json'));
SELECT pg_temp.show(idem_http_begin('old-1', 'POST', '/o', '{"a":1,"b":3}', content_type => 'application/json'));
-- A retryable failure of a 0.5.0 request is taken over, keeping its format.
BEGIN;
SELECT outcome FROM idem_begin('http', 'old-2', fingerprint => idem_http_fingerprint('POST', '/o', 'x', NULL, 1));
COMMIT;
SELECT idem_fail('http', 'old-2', (SELECT token FROM idem_records WHERE scope = 'http' AND key = 'old-2'));
BEGIN;
SELECT pg_temp.show(idem_http_begin('old-2', 'POST', '/o', 'x'));
ROLLBACK;

--------------------------------------------------------------------------
-- Replay checks what storing checks
--------------------------------------------------------------------------
-- Results written by idem_complete (or any role with UPDATE on
-- idem_records), not by idem_http_result: only the valid one is
-- replayed; the others are no_response, and none is an error.
CREATE FUNCTION pg_temp.stored(k text, result jsonb) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM idem_claim('http', k, NULL, idem_http_fingerprint('POST', '/s'));
    PERFORM idem_complete('http', k, result);
    RETURN k;
END
$$;
BEGIN;
SELECT pg_temp.stored(k, r::jsonb)
  FROM (VALUES
    ('valid',      '{"http": 1, "status": 200, "headers": {"location": "/a"}, "body": "b2s="}'),
    ('no-body',    '{"http": 1, "status": 204, "headers": {}, "body": null}'),
    ('status-101', '{"http": 1, "status": 101, "headers": {}, "body": null}'),
    ('status-txt', '{"http": 1, "status": "200", "headers": {}, "body": null}'),
    ('status-frac','{"http": 1, "status": 200.5, "headers": {}, "body": null}'),
    ('status-big', '{"http": 1, "status": 1e10, "headers": {}, "body": null}'),
    ('cookie',     '{"http": 1, "status": 200, "headers": {"set-cookie": "s=1"}, "body": null}'),
    ('framing',    '{"http": 1, "status": 200, "headers": {"content-length": "5"}, "body": null}'),
    ('crlf-value', '{"http": 1, "status": 200, "headers": {"location": "/a\r\nSet-Cookie: s=1"}, "body": null}'),
    ('crlf-name',  '{"http": 1, "status": 200, "headers": {"x\r\nset-cookie": "s=1"}, "body": null}'),
    ('upper-name', '{"http": 1, "status": 200, "headers": {"Location": "/a"}, "body": null}'),
    ('hdr-array',  '{"http": 1, "status": 200, "headers": [["location", "/a"]], "body": null}'),
    ('hdr-object', '{"http": 1, "status": 200, "headers": {"location": {"a": 1}}, "body": null}'),
    ('no-headers', '{"http": 1, "status": 200, "body": null}'),
    ('bad-base64', '{"http": 1, "status": 200, "headers": {}, "body": "not base64!"}'),
    ('body-num',   '{"http": 1, "status": 200, "headers": {}, "body": 1234}'),
    ('extra-key',  '{"http": 1, "status": 200, "headers": {}, "body": null, "x": 1}')) AS t(k, r);
COMMIT;
SELECT k, pg_temp.show(idem_http_begin(k, 'POST', '/s'))
  FROM (VALUES ('valid'), ('no-body'), ('status-101'), ('status-txt'), ('status-frac'), ('status-big'),
               ('cookie'), ('framing'), ('crlf-value'), ('crlf-name'), ('upper-name'), ('hdr-array'),
               ('hdr-object'), ('no-headers'), ('bad-base64'), ('body-num'), ('extra-key')) AS t(k);
-- A stored response made valid by an UPDATE is replayed again.
UPDATE idem_records SET result = jsonb_set(result, '{status}', '201') WHERE scope = 'http' AND key = 'status-101';
SELECT pg_temp.show(idem_http_begin('status-101', 'POST', '/s'));

-- The check itself: the stored form, or what is wrong.
SELECT idem_http_check(200, '{"Location": "/a", "X-Id": "1"}', 'b2s=', NULL);
SELECT idem_http_check(200, '{"Location": "/a"}', 'b2s', NULL) -> 'error' ->> 'message' AS bad_body;
-- The never-stored headers cannot be allowed; names that differ only in
-- case are one header given twice.
SELECT pg_temp.try($$SELECT idem_http_result(200, '{"Set-Cookie": "s=1"}', allow_headers => ARRAY['Set-Cookie'])$$);
SELECT pg_temp.try($$SELECT idem_http_result(200, '{}', allow_headers => ARRAY['location', 'Transfer-Encoding'])$$);
SELECT pg_temp.try($$SELECT idem_http_result(200, '{"Location": "/a", "location": "/b"}')$$);
SELECT pg_temp.try($$SELECT idem_http_result(200, '{"X-A": "1", "x-a": null}')$$);
SELECT pg_temp.try($$SELECT idem_http_finish('never', 200, '{"ETag": "1", "etag": "2"}')$$);
-- '{*}' keeps every header but the never-stored ones (what a replay
-- checks with).
SELECT idem_http_result(200, '{"X-Trace": "1", "Set-Cookie": "s=1", "Connection": "close"}', allow_headers => '{*}');

--------------------------------------------------------------------------
-- Keys: a bare key with a comma is two joined headers
--------------------------------------------------------------------------
SELECT v AS header_value, idem_http_parse_key(v) AS key
  FROM (VALUES ('k1,k2'), ('k1, k2'), ('"k1,k2"'), (',k'), ('k,')) AS t(v);
SELECT pg_temp.show(idem_http_begin('k1,k2', 'POST', '/o'));

--------------------------------------------------------------------------
-- No advisory lock; the claim marker names scope and key unambiguously
--------------------------------------------------------------------------
BEGIN;
SELECT pg_temp.show(idem_http_begin('lock-1', 'POST', '/o'));
SELECT count(*) AS advisory_locks FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid();
SELECT current_setting('idem_http.claim') AS marker;
SELECT current_setting('lock_timeout') AS lock_timeout_restored;
ROLLBACK;
BEGIN;
SET LOCAL lock_timeout = '7s';
SELECT pg_temp.show(idem_http_begin('lock-2', 'POST', '/o'));
SELECT current_setting('lock_timeout') AS lock_timeout_restored;
ROLLBACK;
