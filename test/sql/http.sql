-- Claims here stand alone in autocommit (idempotency.autocommit_claims
-- defaults to error; test/sql/silent_traps.sql tests that).
SET idempotency.autocommit_claims = allow;
-- HTTP Idempotency-Key semantics (sql/idempotency_http.sql, docs/http.md):
-- idem_http_begin's outcomes (proceed, replay byte for byte, in flight
-- 409, mismatch 422, missing or invalid key 400, no stored response 409),
-- idem_http_finish and the allow-listed headers, the 5xx policy, the
-- problem documents, and the PostgREST functions driven by the request.*
-- settings exactly as PostgREST sets them (set_config(name, value, true)
-- in the request's transaction; PostgREST itself is not installed here).
-- Two transactions in flight at once: test/specs/http_inflight.spec.
TRUNCATE idem_records;
\set SHOW_CONTEXT never

\getenv abs_srcdir PG_ABS_SRCDIR
\set try_sql :abs_srcdir '/helpers/try.sql'
\i :try_sql
SET idem_test.try_detail = on;

-- One line per answer: action, status, headers, and the problem's code or
-- the body (escape encoding: non-ASCII bytes as \ooo).
CREATE FUNCTION pg_temp.show(r idem_http_response) RETURNS text
LANGUAGE sql AS $$
    SELECT concat_ws(' ', r.action, r.status, r.headers::text,
                     coalesce(r.problem ->> 'code', encode(r.body, 'escape'), '(no body)'))
$$;

-- Keys: a quoted Structured Field String, or leniently a bare token;
-- NULL for blank, invalid, joined (two headers) or too long values.
SELECT v AS header_value, idem_http_parse_key(v) AS key
  FROM (VALUES ('"8e03978e-40d5-43e8"'), ('abc-123'), ('  "spaced"  '), ('"a\"b\\c"'),
               ('"k1", "k2"'), ('k1, k2'), ('""'), (''), ('"unterminated'),
               ('"tab	inside"'), ('"é"'), ('bare"quote')) AS t(v);
SELECT idem_http_parse_key(repeat('a', 255)) IS NOT NULL AS max_len,
       idem_http_parse_key(repeat('a', 256)) IS NULL AS too_long,
       idem_http_parse_key(NULL) IS NULL AS null_is_null;

--------------------------------------------------------------------------
-- proceed, finish, replay
--------------------------------------------------------------------------
CREATE TABLE http_orders (id int PRIMARY KEY, request_key text, item text);

-- The first request proceeds; the handler writes and stores its response
-- in the same transaction.  Set-Cookie and Date are not allow-listed.
BEGIN;
SELECT pg_temp.show(idem_http_begin('"order-1"', 'post', '/orders', '{"item": "book", "qty": 2}',
                                    content_type => 'application/json'));
INSERT INTO http_orders VALUES (1, 'order-1', 'book');
SELECT idem_http_finish('"order-1"', 201,
    '{"Content-Type": "application/json", "Location": "/orders/1", "Set-Cookie": "s=1",
      "Date": "Tue, 01 Dec 2026 10:00:00 GMT", "Link": ["</a>; rel=a", "</b>; rel=b"], "ETag": null}',
    convert_to('{"id":1,  "item":"book"}', 'UTF8'));
COMMIT;
SELECT status, result FROM idem_records WHERE scope = 'http' AND key = 'order-1';

-- The retry (keys in another order, other spacing: the same JSON) is
-- replayed: stored status, the kept headers plus Idempotent-Replayed, the
-- body's bytes unchanged.  Nothing is written.
SELECT pg_temp.show(idem_http_begin('"order-1"', 'POST', '/orders', '{"qty":2,"item":"book"}',
                                    content_type => 'application/json; charset=utf-8'));
SELECT body = convert_to('{"id":1,  "item":"book"}', 'UTF8') AS byte_exact
  FROM idem_http_begin('order-1', 'POST', '/orders', '{"qty":2,"item":"book"}', content_type => 'application/json');
SELECT count(*) AS orders FROM http_orders;

-- A body that is not UTF-8 (NUL, 0xff, a lone continuation byte) comes
-- back byte for byte.
BEGIN;
SELECT pg_temp.show(idem_http_begin('bin-1', 'POST', '/receipts', '\x00ff80c328'::bytea));
SELECT idem_http_finish('bin-1', 200, '{"Content-Type": "application/octet-stream"}',
                        '\xfffe0000c3288000ff'::bytea);
COMMIT;
SELECT action, status, headers, body, body = '\xfffe0000c3288000ff'::bytea AS byte_exact
  FROM idem_http_begin('bin-1', 'POST', '/receipts', '\x00ff80c328'::bytea);
-- ... and its request body is compared as bytes.
SELECT pg_temp.show(idem_http_begin('bin-1', 'POST', '/receipts', '\x00ff80c329'::bytea));

-- A JSON content type with a body that is not JSON: its bytes count.
BEGIN;
SELECT pg_temp.show(idem_http_begin('notjson', 'POST', '/orders', 'not json', content_type => 'application/json'));
SELECT idem_http_finish('notjson', 400, '{"content-type": "text/plain"}', 'malformed JSON');
COMMIT;
SELECT pg_temp.show(idem_http_begin('notjson', 'POST', '/orders', 'not json', content_type => 'application/json'));
SELECT pg_temp.show(idem_http_begin('notjson', 'POST', '/orders', 'not  json', content_type => 'application/json'));

-- An empty and a NULL body are the same request; a NULL response body
-- (204) is replayed as NULL, an empty one as empty.
BEGIN;
SELECT pg_temp.show(idem_http_begin('empty-1', 'DELETE', '/orders/1', NULL));
SELECT idem_http_finish('empty-1', 204);
COMMIT;
SELECT pg_temp.show(idem_http_begin('empty-1', 'DELETE', '/orders/1', ''));
BEGIN;
SELECT pg_temp.show(idem_http_begin('empty-2', 'POST', '/ping', ''));
SELECT idem_http_finish('empty-2', 200, NULL, '');
COMMIT;
SELECT pg_temp.show(idem_http_begin('empty-2', 'POST', '/ping'));

--------------------------------------------------------------------------
-- 422: the key reused for another request
--------------------------------------------------------------------------
SELECT pg_temp.show(idem_http_begin('order-1', 'POST', '/orders', '{"item": "book", "qty": 3}', content_type => 'application/json'));
SELECT pg_temp.show(idem_http_begin('order-1', 'POST', '/refunds', '{"item": "book", "qty": 2}', content_type => 'application/json'));
SELECT pg_temp.show(idem_http_begin('order-1', 'PUT', '/orders', '{"item": "book", "qty": 2}', content_type => 'application/json'));
-- Without the JSON content type the body's bytes differ: also 422.
SELECT pg_temp.show(idem_http_begin('order-1', 'POST', '/orders', '{"item": "book", "qty": 2}'));
-- The whole answer: a problem document, ready to send.
SELECT status, headers, convert_from(body, 'UTF8')::jsonb = problem AS body_is_problem,
       jsonb_pretty(problem) AS problem
  FROM idem_http_begin('order-1', 'POST', '/orders', '{}', content_type => 'application/json',
                       docs_url => 'https://api.example.com/docs/idempotency');

--------------------------------------------------------------------------
-- 400: missing or invalid key
--------------------------------------------------------------------------
SELECT pg_temp.show(idem_http_begin(NULL, 'POST', '/orders', '{}'));
SELECT pg_temp.show(idem_http_begin('  ', 'POST', '/orders', '{}'));
SELECT problem ->> 'detail' AS detail FROM idem_http_begin(NULL, 'post', '/orders');
SELECT pg_temp.show(idem_http_begin('k1, k2', 'POST', '/orders', '{}'));
SELECT pg_temp.show(idem_http_begin(repeat('x', 256), 'POST', '/orders', '{}'));
-- An invalid key is refused even where no key is required.
SELECT pg_temp.show(idem_http_begin('"k1", "k2"', 'POST', '/orders', '{}', require_key => false));
-- No key where none is required: proceed, nothing claimed, and
-- idem_http_finish without a key stores nothing.
BEGIN;
SELECT pg_temp.show(idem_http_begin(NULL, 'POST', '/search', '{}', require_key => false));
SELECT idem_http_finish(NULL, 200, '{}', 'results');
SELECT count(*) AS records FROM idem_records WHERE scope = 'http' AND key LIKE 'search%';
COMMIT;

--------------------------------------------------------------------------
-- 409: in flight, and used without a stored response
--------------------------------------------------------------------------
-- A live lease (idem_begin, another worker) is a request in flight.
SELECT outcome FROM idem_begin('http', 'leased-1', lease => '1 hour');
SELECT pg_temp.show(idem_http_begin('leased-1', 'POST', '/orders'));
SELECT pg_temp.show(idem_http_begin('leased-1', 'POST', '/orders', retry_after => 30));
SELECT problem ->> 'title' AS title FROM idem_http_begin('leased-1', 'POST', '/orders');
-- The lease's worker stores an HTTP response with idem_finish and
-- idem_http_result: the next request replays it.
SELECT idem_finish('http', 'leased-1', (SELECT token FROM idem_records WHERE scope = 'http' AND key = 'leased-1'),
                   idem_http_result(201, '{"content-type": "text/plain"}', convert_to('charged', 'UTF8')));
SELECT pg_temp.show(idem_http_begin('leased-1', 'POST', '/orders'));
-- A lease that ran out is taken over.
SELECT outcome FROM idem_begin('http', 'leased-2', lease => '1 millisecond');
SELECT pg_sleep(0.01);
BEGIN;
SELECT pg_temp.show(idem_http_begin('leased-2', 'POST', '/orders'));
SELECT status FROM idem_records WHERE scope = 'http' AND key = 'leased-2';
ROLLBACK;
-- The unknown outcome.  A lease that ran out after its worker marked the
-- outside effect started (idem_effect_started) may have charged: by
-- default 500 idempotency-key-outcome-unknown, nothing written, so every
-- retry gets the same answer; the record stays as it was.
SELECT idem_effect_started('http', 'unknown-1', token) IS NOT NULL AS marked
  FROM idem_begin('http', 'unknown-1', lease => '1 millisecond');
SELECT pg_sleep(0.01);
BEGIN;
SELECT pg_temp.show(idem_http_begin('unknown-1', 'POST', '/payments'));
ROLLBACK;
SELECT status, problem ->> 'type' AS type, problem ->> 'detail' AS detail
  FROM idem_http_begin('unknown-1', 'POST', '/payments', docs_url => 'https://api.example.com/idempotency');
SELECT status, effect_started_at IS NOT NULL AS marked, effect_unknown_attempt
  FROM idem_records WHERE scope = 'http' AND key = 'unknown-1';
-- The lease stored no fingerprint: another body gets the same answer.
SELECT pg_temp.show(idem_http_begin('unknown-1', 'POST', '/payments', '{"amount": 2}'));
-- A handler that can reconcile opts in: the key is claimed (the takeover
-- records the unknown attempt, as idem_begin's does); begun again in the
-- transaction, the same answer.  Rolled back, the unknown stands.
BEGIN;
SELECT pg_temp.show(idem_http_begin('unknown-1', 'POST', '/payments', on_unknown => 'reconcile'));
SELECT status, effect_started_at IS NULL AS unmarked, (idem_lookup('http', 'unknown-1')).effect_unknown_attempt
  FROM idem_records WHERE scope = 'http' AND key = 'unknown-1';
SELECT pg_temp.show(idem_http_begin('unknown-1', 'POST', '/payments', on_unknown => 'reconcile'));
ROLLBACK;
SELECT pg_temp.show(idem_http_begin('unknown-1', 'POST', '/payments'));
-- Reconciled (the gateway knew the charge) and stored: replayed after.
BEGIN;
SELECT pg_temp.show(idem_http_begin('unknown-1', 'POST', '/payments', on_unknown => 'reconcile'));
SELECT idem_http_finish('unknown-1', 201, '{"content-type": "text/plain"}', 'charged once');
COMMIT;
SELECT pg_temp.show(idem_http_begin('unknown-1', 'POST', '/payments'));
-- Marked, then finished: the stored response, nothing unknown.  A live
-- marked lease is in flight.  Unmarked and run out (leased-2 above): proceed.
SELECT idem_finish('http', 'marked-1', token, idem_http_result(201, NULL, 'done'))
  FROM (SELECT idem_effect_started('http', 'marked-1', token), token
          FROM idem_begin('http', 'marked-1')) AS b;
SELECT pg_temp.show(idem_http_begin('marked-1', 'POST', '/payments'));
SELECT idem_effect_started('http', 'marked-2', token) IS NOT NULL AS marked
  FROM idem_begin('http', 'marked-2', lease => '1 hour');
SELECT pg_temp.show(idem_http_begin('marked-2', 'POST', '/payments'));
SELECT pg_temp.show(idem_http_begin('marked-2', 'POST', '/payments', on_unknown => 'reconcile'));
-- on_unknown is refuse or reconcile.
SELECT pg_temp.try($$SELECT idem_http_begin('unknown-1', 'POST', '/payments', on_unknown => 'retry')$$);
SELECT pg_temp.try($$SELECT idem_http_begin('unknown-1', 'POST', '/payments', on_unknown => NULL)$$);
-- A permanent failure stored in the HTTP shape (a declined card, 402) is
-- replayed; a retryable one lets the retry proceed.
SELECT outcome FROM idem_begin('http', 'failed-1');
SELECT idem_fail('http', 'failed-1', (SELECT token FROM idem_records WHERE scope = 'http' AND key = 'failed-1'),
                 idem_http_result(402, '{"content-type": "text/plain"}', 'card declined'), retryable => false);
SELECT pg_temp.show(idem_http_begin('failed-1', 'POST', '/payments'));
SELECT outcome FROM idem_begin('http', 'failed-2');
SELECT idem_fail('http', 'failed-2', (SELECT token FROM idem_records WHERE scope = 'http' AND key = 'failed-2'));
BEGIN;
SELECT pg_temp.show(idem_http_begin('failed-2', 'POST', '/payments'));
ROLLBACK;
-- A key claimed and committed without a stored response (a plain
-- idem_claim, or a handler that forgot idem_http_finish): 409, not
-- replayable, and not executed again.
SELECT idem_claim('http', 'bare-1');
SELECT pg_temp.show(idem_http_begin('bare-1', 'POST', '/orders'));
-- A result that is not an HTTP response (idem_complete by other code).
BEGIN;
SELECT idem_claim('http', 'other-1');
SELECT idem_complete('http', 'other-1', '{"status": "done"}');
COMMIT;
SELECT pg_temp.show(idem_http_begin('other-1', 'POST', '/orders'));
-- Begun twice in one transaction: the second proceeds too (the key is
-- this transaction's); in a rolled-back savepoint the claim is gone.
BEGIN;
SELECT pg_temp.show(idem_http_begin('twice-1', 'POST', '/orders'));
SELECT pg_temp.show(idem_http_begin('twice-1', 'POST', '/orders'));
SELECT pg_temp.show(idem_http_begin('twice-1', 'POST', '/orders', 'other body'));
SAVEPOINT s;
SELECT pg_temp.show(idem_http_begin('twice-2', 'POST', '/orders'));
ROLLBACK TO SAVEPOINT s;
SELECT idem_lookup('http', 'twice-2') IS NULL AS released,
       current_setting('idem_http.claim', true) = '["http", "twice-1"]' AS marker_restored;
COMMIT;
SELECT pg_temp.show(idem_http_begin('twice-1', 'POST', '/orders'));

--------------------------------------------------------------------------
-- The 5xx policy: the transaction decides
--------------------------------------------------------------------------
-- A handler that fails rolls back: its writes and the claim go together,
-- nothing is stored, and the retry runs the handler again.
BEGIN;
SELECT pg_temp.show(idem_http_begin('fail-1', 'POST', '/orders', '{"item": "pen"}', content_type => 'application/json'));
INSERT INTO http_orders VALUES (2, 'fail-1', 'pen');
SELECT 1 / 0;    -- the handler's error
ROLLBACK;
BEGIN;
SELECT pg_temp.show(idem_http_begin('fail-1', 'POST', '/orders', '{"item": "pen"}', content_type => 'application/json'));
INSERT INTO http_orders VALUES (2, 'fail-1', 'pen');
SELECT idem_http_finish('fail-1', 201, '{"content-type": "application/json"}', '{"id":2}');
COMMIT;
SELECT id, request_key FROM http_orders ORDER BY id;
-- A 5xx that the handler commits (its writes committed with it) is stored
-- and replayed like any response, as Stripe does.
BEGIN;
SELECT pg_temp.show(idem_http_begin('fivexx-1', 'POST', '/orders'));
SELECT idem_http_finish('fivexx-1', 503, '{"Retry-After": "5", "content-type": "text/plain"}', 'upstream down');
COMMIT;
SELECT pg_temp.show(idem_http_begin('fivexx-1', 'POST', '/orders'));

--------------------------------------------------------------------------
-- Errors
--------------------------------------------------------------------------
SELECT pg_temp.try($$SELECT idem_http_begin('k', NULL, '/orders')$$);
SELECT pg_temp.try($$SELECT idem_http_begin('k', 'POST', NULL)$$);
SELECT pg_temp.try($$SELECT idem_http_begin('k', 'POST', '/orders', scope => NULL)$$);
SELECT pg_temp.try($$SELECT idem_http_begin('k', 'POST', '/orders', retry_after => -1)$$);
SELECT pg_temp.try($$SELECT idem_http_begin('k', 'POST', '/orders', scope => repeat('s', 129))$$);
SELECT pg_temp.try($$SELECT idem_http_begin('k', 'POST', '/orders', ttl => '-1 day')$$);
SELECT pg_temp.try($$SELECT idem_http_finish('k1, k2', 200)$$);
SELECT pg_temp.try($$SELECT idem_http_finish('never-begun', 200)$$);
SELECT pg_temp.try($$SELECT idem_http_finish('order-1', 200)$$);
SELECT pg_temp.try($$SELECT idem_http_result(NULL)$$);
SELECT pg_temp.try($$SELECT idem_http_result(101)$$);
SELECT pg_temp.try($$SELECT idem_http_result(600)$$);
SELECT pg_temp.try($$SELECT idem_http_result(200, '["x"]')$$);
SELECT pg_temp.try($$SELECT idem_http_result(200, '{"Bad Name": "x"}')$$);
SELECT pg_temp.try($$SELECT idem_http_result(200, '{"Location": "/a\r\nSet-Cookie: s=1"}')$$);
SELECT pg_temp.try($$SELECT idem_http_result(200, '{"Location": {"a": 1}}')$$);
SELECT pg_temp.try($$SELECT idem_http_result(200, '{"Link": ["</a>", {"b": 1}]}')$$);
SELECT pg_temp.try($$SELECT idem_http_problem(NULL, 'x')$$);
SELECT pg_temp.try($$SELECT idem_http_problem(200, 'OK')$$);
SELECT pg_temp.try($$SELECT idem_http_problem(500, 'x', headers => '[]')$$);
-- Header values: numbers and booleans become strings, tabs are allowed;
-- a custom allow-list replaces the default one (names compared in lower
-- case).
SELECT idem_http_result(200, '{"Retry-After": 5, "X-Flag": true, "Vary": "a,\tb", "Content-Type": "text/plain"}',
                        allow_headers => ARRAY['Retry-After', 'X-FLAG', 'vary']);
-- idem_http_problem: about:blank without a code; headers merged.
SELECT pg_temp.show(idem_http_problem(500, 'Internal Server Error', 'The handler failed.'));
SELECT pg_temp.show(idem_http_problem(503, 'Unavailable', code => 'down', headers => '{"retry-after": "9"}'));

--------------------------------------------------------------------------
-- Privileges: what idem_grant gives is enough
--------------------------------------------------------------------------
CREATE ROLE regress_http_app;
CREATE ROLE regress_http_nobody;
SELECT idem_grant('regress_http_app');
SET ROLE regress_http_app;
BEGIN;
SELECT pg_temp.show(idem_http_begin('role-1', 'POST', '/orders'));
SELECT idem_http_finish('role-1', 200, '{}', 'ok');
COMMIT;
SELECT pg_temp.show(idem_http_begin('role-1', 'POST', '/orders'));
RESET ROLE;
SET ROLE regress_http_nobody;
SELECT left(pg_temp.try($$SELECT idem_http_begin('role-2', 'POST', '/orders')$$), 53) AS no_privilege;
RESET ROLE;
SELECT idem_revoke('regress_http_app');
DROP OWNED BY regress_http_app;    -- USAGE on the schema, which idem_revoke leaves
DROP ROLE regress_http_app;
DROP ROLE regress_http_nobody;

--------------------------------------------------------------------------
-- PostgREST: the request.* settings as PostgREST sets them
--------------------------------------------------------------------------
-- What PostgREST runs before the pre-request, in the request's
-- transaction (src/PostgREST/Query/PreQuery.hs: set_config(..., true));
-- header names are lower case.
CREATE FUNCTION pg_temp.request(method text, path text, headers jsonb) RETURNS void
LANGUAGE sql AS $$
    SELECT set_config('request.method', method, true), set_config('request.path', path, true),
           set_config('request.headers', headers::text, true)
$$;
-- An RPC function made idempotent: its arguments are the body.
CREATE FUNCTION http_create_order(item text, qty int) RETURNS json
LANGUAGE plpgsql AS $$
DECLARE
    r idem_http_response;
    new_id int;
    answer json;
BEGIN
    r := idem_http_postgrest_rpc(jsonb_build_object('item', item, 'qty', qty), scope => 'api');
    IF r.action = 'replay' THEN
        RETURN convert_from(r.body, 'UTF8')::json;
    END IF;
    new_id := (SELECT coalesce(max(id), 0) + 1 FROM http_orders);
    INSERT INTO http_orders VALUES (new_id, 'rpc', item);
    answer := json_build_object('id', new_id, 'item', item);
    PERFORM idem_http_postgrest_finish(201,
        jsonb_build_object('Content-Type', 'application/json', 'Location', '/orders?id=eq.' || new_id),
        convert_to(answer::text, 'UTF8'));
    RETURN answer;
END
$$;
CREATE FUNCTION pg_temp.pre_request() RETURNS void
LANGUAGE sql AS $$ SELECT idem_http_postgrest_pre_request(scope => 'api') $$;

-- POST /rpc/http_create_order with a key: proceeds; PostgREST would send
-- the function's result with response.status and response.headers.
BEGIN;
SELECT pg_temp.request('POST', '/rpc/http_create_order', '{"idempotency-key": "\"rpc-1\"", "content-type": "application/json"}');
SELECT pg_temp.pre_request();
SELECT http_create_order('lamp', 1);
SELECT current_setting('response.status') AS status, current_setting('response.headers') AS headers;
COMMIT;
-- The retry: replayed by the function (the same body), with the stored
-- status and headers and Idempotent-Replayed; nothing written.
BEGIN;
SELECT pg_temp.request('POST', '/rpc/http_create_order', '{"idempotency-key": "\"rpc-1\""}');
SELECT pg_temp.pre_request();
SELECT http_create_order('lamp', 1);
SELECT current_setting('response.status') AS status, current_setting('response.headers') AS headers;
ROLLBACK;
SELECT count(*) AS lamp_orders FROM http_orders WHERE item = 'lamp';
-- The same key with other arguments: PostgREST's custom error, 422.
BEGIN;
SELECT pg_temp.request('POST', '/rpc/http_create_order', '{"idempotency-key": "\"rpc-1\""}');
SELECT pg_temp.pre_request();
SELECT pg_temp.try($$SELECT http_create_order('lamp', 2)$$);
ROLLBACK;
-- No key, and an invalid one: 400 from the pre-request.
BEGIN;
SELECT pg_temp.request('POST', '/rpc/http_create_order', '{"content-type": "application/json"}');
SELECT pg_temp.try($$SELECT pg_temp.pre_request()$$);
ROLLBACK;
BEGIN;
SELECT pg_temp.request('POST', '/rpc/http_create_order', '{"idempotency-key": "a b"}');
SELECT pg_temp.try($$SELECT pg_temp.pre_request()$$);
ROLLBACK;
-- In flight (a live lease on the key): 409 with Retry-After, from the
-- function.
SELECT outcome FROM idem_begin('api', 'rpc-2', lease => '1 hour');
BEGIN;
SELECT pg_temp.request('POST', '/rpc/http_create_order', '{"idempotency-key": "rpc-2"}');
SELECT pg_temp.pre_request();
SELECT pg_temp.try($$SELECT http_create_order('desk', 1)$$);
ROLLBACK;
-- A read is not made idempotent: GET passes the pre-request and the
-- function proceeds without a key.
BEGIN;
SELECT pg_temp.request('GET', '/rpc/http_create_order', '{}');
SELECT pg_temp.pre_request();
SELECT (idem_http_postgrest_rpc('{}')).action;
ROLLBACK;
-- A table endpoint: the pre-request claims the key itself (fingerprint:
-- method and path, PostgREST gives it no body) and PostgREST's INSERT
-- commits with the claim.  The retry is refused with 409 (no response
-- was stored: PostgREST cannot replay a table's response), another path
-- with the key with 422.
BEGIN;
SELECT pg_temp.request('POST', '/http_orders', '{"idempotency-key": "tbl-1"}');
SELECT pg_temp.pre_request();
INSERT INTO http_orders VALUES (100, 'tbl-1', 'chair');
COMMIT;
BEGIN;
SELECT pg_temp.request('POST', '/http_orders', '{"idempotency-key": "tbl-1"}');
SELECT pg_temp.try($$SELECT pg_temp.pre_request()$$);
ROLLBACK;
BEGIN;
SELECT pg_temp.request('PATCH', '/http_orders', '{"idempotency-key": "tbl-1"}');
SELECT pg_temp.try($$SELECT pg_temp.pre_request()$$);
ROLLBACK;
BEGIN;
SELECT pg_temp.request('POST', '/http_orders', '{}');
SELECT pg_temp.try($$SELECT pg_temp.pre_request()$$);
ROLLBACK;
-- Methods not listed pass; without PostgREST's settings it does nothing.
BEGIN;
SELECT pg_temp.request('DELETE', '/http_orders', '{}');
SELECT pg_temp.pre_request();
ROLLBACK;
SELECT idem_http_postgrest_pre_request();
-- A stored response met by the pre-request (a table endpoint whose
-- trigger stored one): status and headers replayed in PostgREST's error,
-- which cannot carry the body.
BEGIN;
SELECT pg_temp.request('POST', '/http_orders', '{"idempotency-key": "tbl-2"}');
SELECT pg_temp.pre_request();
SELECT idem_http_postgrest_finish(201, '{"Location": "/http_orders?id=eq.101"}');
COMMIT;
BEGIN;
SELECT pg_temp.request('POST', '/http_orders', '{"idempotency-key": "tbl-2"}');
SELECT pg_temp.try($$SELECT pg_temp.pre_request()$$);
ROLLBACK;
-- idem_http_postgrest_finish without a key sets the response only;
-- idem_http_postgrest_raise of an answer without a status is refused.
BEGIN;
SELECT idem_http_postgrest_finish(200, '{"Link": ["</a>", "</b>"]}');
SELECT current_setting('response.status') AS status, current_setting('response.headers') AS headers;
ROLLBACK;
SELECT pg_temp.try($$SELECT idem_http_postgrest_raise(ROW('proceed', NULL, NULL, NULL, NULL)::idem_http_response)$$);

DROP FUNCTION http_create_order(text, int);
DROP TABLE http_orders;
