# The HTTP Idempotency-Key examples (docs/http.md), for examples/run.sh,
# which sources this file and calls check_http; it uses run.sh's helpers
# (new_db, run_example, expect_sql, expect_count, problem, report) and
# variables (WORK, EXAMPLES, PYTHON, TOP).
#
# examples/http/client.py drives a server through every case of the
# Idempotency-Key: a retry replayed, 8 clients at once (one execution), a
# changed body (422), no key (400), a crash between the commit and the
# answer (the retry to the restarted server is replayed), a response that
# is not UTF-8 (the same bytes), a failing handler (500, rolled back, the
# retry runs it).  Each server runs twice against its own database: the
# second run must only replay.  Checked in the database: one row per key
# and route, every key completed with the status first sent.
# shellcheck shell=bash disable=SC2154  # db, WORK, EXAMPLES, PYTHON: set by examples/run.sh

http_expected_rows="crash-1:orders:1,flaky-1:flaky:1,order-1:orders:1,receipt-1:receipts:1,storm-1:orders:1"
http_expected_records="crash-1:completed:201,flaky-1:completed:201,order-1:completed:201,receipt-1:completed:200,storm-1:completed:201"
http_rows="SELECT string_agg(request_key || ':' || route || ':' || n, ',' ORDER BY request_key)
             FROM (SELECT request_key, route, count(*) AS n FROM http_orders GROUP BY 1, 2) c"
http_records="SELECT string_agg(key || ':' || status || ':' || (result ->> 'status'), ',' ORDER BY key)
                FROM idem_records WHERE scope = 'example-api'"

# http_run NAME LOG1 LOG2 SERVERLOG SERVER-COMMAND...: both runs and their checks.
http_run() {
    local name=$1 out1=$2 out2=$3 slog=$4; shift 4
    new_db "http_$name" || return
    PGDATABASE=$db run_example "$out1" "$PYTHON" examples/http/client.py --server-log "$slog" -- "$@" || return
    expect_sql "$db" "one row per key and route" "$http_rows" "$http_expected_rows"
    expect_sql "$db" "every key completed with its first status" "$http_records" "$http_expected_records"
    expect_count "$out1" "first request executed" '^  POST /orders key=order-1 \{"item": "book", "qty": 1\} -> 201 \{.*\} Location: /orders/[0-9]+$' 1
    expect_count "$out1" "its retry replayed" '^  POST /orders key=order-1 \{"qty":1,"item":"book"\} -> 201 \{.*\} Location: /orders/[0-9]+ \(replayed\)$' 1
    [ "$(grep -E '^  POST /orders key=order-1 .* -> 201 ' "$out1" | sed -E 's/ \(replayed\)$//; s/^.* -> //' | sort -u | wc -l)" = 1 ] \
        || problem "the replay of order-1 differs from the first answer (status, body or Location)"
    expect_count "$out1" "8 clients answered 201" '^  client [1-8]: POST /orders key=storm-1 -> 201 ' 8
    expect_count "$out1" "8 clients: one execution" '^  8 clients: 1 executed, 7 replayed, 1 distinct answer\(s\) ' 1
    expect_count "$out1" "changed body" '^  POST /orders key=order-1 \{"item": "book", "qty": 2\} -> 422 Idempotency-Key is already used \(problem\+json\)$' 1
    expect_count "$out1" "no key" '^  POST /orders key=\(none\) .* -> 400 Idempotency-Key is missing \(problem\+json\)$' 1
    expect_count "$out1" "crash before the answer" '^  POST /orders key=crash-1 -> no answer ' 1
    expect_count "$out1" "crash: the retry replayed" '^  POST /orders key=crash-1 .* -> 201 \{.*\} Location: /orders/[0-9]+ \(replayed\)$' 1
    expect_count "$slog" "the server crashed after its commit" '^crashing after the commit of "crash-1"' 1
    expect_count "$out1" "binary response" '^  POST /receipts key=receipt-1 -> 200 bytes ff fe 00 80 ' 2
    expect_count "$out1" "binary response replayed" '^  POST /receipts key=receipt-1 -> 200 bytes .* \(replayed\)$' 1
    expect_count "$out1" "binary bytes identical" '^  identical bytes: yes ' 1
    expect_count "$out1" "failing handler: 500" '^  POST /flaky key=flaky-1 \{\} -> 500 Internal Server Error \(problem\+json\)$' 1
    expect_count "$out1" "failing handler: the retry runs" '^  POST /flaky key=flaky-1 \{\} -> 201 done$' 1
    # Everything once more: only replays (and the 422 and 400), no new row.
    PGDATABASE=$db run_example "$out2" "$PYTHON" examples/http/client.py --server-log "$slog" -- "$@" || return
    expect_count "$out2" "second run executes nothing" ' -> 2[0-9][0-9] .*[^)]$' 0
    expect_count "$out2" "second run replays" ' -> 2[0-9][0-9] .* \(replayed\)$' 15
    expect_count "$out2" "second run: 8 clients replayed" '^  8 clients: 0 executed, 8 replayed, 1 distinct answer\(s\) ' 1
    expect_count "$out2" "second run: no crash" 'no answer' 0
    expect_sql "$db" "rows after the second run" "$http_rows" "$http_expected_rows"
}

check_http() {
    local app=$WORK/http-express out0=$WORK/http-npm-ci.out
    local e1=$WORK/http-express-run1.out e2=$WORK/http-express-run2.out es=$WORK/http-express-server.out
    local p1=$WORK/http-python-run1.out p2=$WORK/http-python-run2.out ps=$WORK/http-python-server.out
    # Express: a copy of the directory, so node_modules stays out of the
    # checkout; npm ci installs what package-lock.json pins.
    mkdir -p "$app"
    cp "$EXAMPLES/http/express/package.json" "$EXAMPLES/http/express/package-lock.json" \
       "$EXAMPLES/http/express/server.js" "$app/"
    if ! (cd "$app" && npm ci --no-audit --no-fund --loglevel=error) >"$out0" 2>&1; then
        problem "npm ci failed for examples/http/express"
    else
        http_run express "$e1" "$e2" "$es" node "$app/server.js"
    fi
    report "example http/express/server.js" "$out0" "$e1" "$e2" "$es"
    # Python: the standard library's http.server and Debian's psycopg2
    # (no FastAPI: PyPI is not reachable where these tests run).
    http_run python "$p1" "$p2" "$ps" "$PYTHON" examples/http/python/server.py
    report "example http/python/server.py" "$p1" "$p2" "$ps"
}
