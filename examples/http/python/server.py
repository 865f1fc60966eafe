#!/usr/bin/env python3
"""Idempotency-Key for a Python HTTP service, kept in PostgreSQL with the
handler's own writes (docs/http.md).

The standard library's http.server and psycopg2 (Debian's python3-psycopg2):
the same middleware a FastAPI dependency or a Django middleware would be,
without packages from PyPI, which this project's test machines cannot
reach.  idempotent(handler) wraps a route; for every request it opens one
transaction and runs:

    idem_http_begin(key, method, path, body)  -> proceed, or the answer to
                                                 send as it is: replay,
                                                 409, 422, 400
    handler(cur, request)                     -> (status, headers, body)
    idem_http_finish(key, status, headers, body)   -- same transaction
    COMMIT, then send

so the response is stored if and only if the handler's writes commit.  A
handler that raises, or answers 5xx, is rolled back: nothing is stored and
the client's retry runs it again (the 5xx policy of docs/http.md).  A
duplicate sent while the first is running gets 409 with Retry-After at
once, without waiting.

Routes (the same as examples/http/express/server.js):
    POST /orders    {"item": ..., "qty": ...} -> 201, Location, JSON body
    POST /receipts  -> 200 application/octet-stream, bytes that are not UTF-8
    POST /flaky     -> the handler raises on its first call in this process

Connection settings come from the libpq environment variables (PGHOST,
PGPORT, PGUSER, PGDATABASE, PGPASSWORD).  It listens on 127.0.0.1:$PORT
and prints "listening on PORT".  For the crash test,
IDEM_EXAMPLE_CRASH_KEY names a key: after committing that request the
server kills itself (SIGKILL) before it answers.

    PGDATABASE=mydb PORT=8080 /usr/bin/python3 examples/http/python/server.py
"""
import json
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psycopg2
import psycopg2.extras
import psycopg2.pool

SCOPE = "example-api"                      # one namespace of keys for this API
CRASH_KEY = os.environ.get("IDEM_EXAMPLE_CRASH_KEY")

SETUP = """
CREATE EXTENSION IF NOT EXISTS idempotency;
CREATE TABLE IF NOT EXISTS http_orders (
    id          bigserial PRIMARY KEY,
    request_key text,
    route       text NOT NULL,
    item        text,
    qty         int
)"""

pool = psycopg2.pool.ThreadedConnectionPool(1, 12, "")


class Request:
    def __init__(self, method, path, headers, body):
        self.method, self.path, self.headers, self.body = method, path, headers, body


# ---------------------------------------------------------------------------
# The middleware.
# ---------------------------------------------------------------------------

def problem(cur, status, title, detail):
    cur.execute("SELECT status, headers, body FROM idem_http_problem(%s, %s, %s)", (status, title, detail))
    s, h, b = cur.fetchone()
    return s, h, bytes(b)


def idempotent(handler):
    def run(request):
        key = request.headers.get("Idempotency-Key")
        conn = pool.getconn()
        try:
            with conn.cursor() as cur:
                try:
                    cur.execute(
                        "SELECT action, status, headers, body FROM idem_http_begin(%s, %s, %s, %s,"
                        " scope => %s, content_type => %s)",
                        (key, request.method, request.path, psycopg2.Binary(request.body), SCOPE,
                         request.headers.get("Content-Type")))
                    action, status, headers, body = cur.fetchone()
                    if action != "proceed":
                        conn.rollback()
                        return status, headers, None if body is None else bytes(body)
                    try:
                        answer = handler(cur, request)
                    except Exception as e:  # the handler failed
                        print(f"handler error: {e}", flush=True)
                        conn.rollback()
                        answer = None
                    if answer is None or answer[0] >= 500:
                        # The 5xx policy: the handler's writes roll back with
                        # the claim; nothing is stored, the retry runs it again.
                        conn.rollback()
                        if answer is None:
                            answer = problem(cur, 500, "Internal Server Error",
                                             "The request failed and was rolled back; it is safe to retry it.")
                            conn.rollback()
                        return answer
                    status, headers, body = answer
                    cur.execute("SELECT idem_http_finish(%s, %s, %s, %s, scope => %s)",
                                (key, status, psycopg2.extras.Json(headers), psycopg2.Binary(body), SCOPE))
                    conn.commit()
                except psycopg2.Error as e:
                    conn.rollback()
                    print(f"database error: {e}", flush=True)
                    answer = problem(cur, 500, "Internal Server Error", "The request failed; it is safe to retry it.")
                    conn.rollback()
                    return answer
        finally:
            pool.putconn(conn)
        if CRASH_KEY is not None and key is not None and key.strip('"') == CRASH_KEY:
            print(f"crashing after the commit of {key}, before answering", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        return answer
    return run


# ---------------------------------------------------------------------------
# The routes: their writes use cur, the request's transaction.
# ---------------------------------------------------------------------------

flaky_failed = threading.Event()


def create_order(cur, request):
    order = json.loads(request.body)
    cur.execute("INSERT INTO http_orders (request_key, route, item, qty) VALUES (idem_http_parse_key(%s), 'orders', %s, %s) RETURNING id",
                (request.headers.get("Idempotency-Key"), order["item"], order["qty"]))
    (order_id,) = cur.fetchone()
    cur.execute("SELECT pg_sleep(0.3)")   # the rest of the work: time for duplicates to arrive
    body = json.dumps({"order": order_id, "item": order["item"], "qty": order["qty"]}).encode()
    return 201, {"Content-Type": "application/json", "Location": f"/orders/{order_id}"}, body


def create_receipt(cur, request):
    cur.execute("INSERT INTO http_orders (request_key, route) VALUES (idem_http_parse_key(%s), 'receipts') RETURNING id",
                (request.headers.get("Idempotency-Key"),))
    (receipt_id,) = cur.fetchone()
    # Not UTF-8: 0xff 0xfe, a NUL, a lone continuation byte.
    return 200, {"Content-Type": "application/octet-stream"}, b"\xff\xfe\x00\x80" + f"receipt {receipt_id}".encode()


def flaky(cur, request):
    cur.execute("INSERT INTO http_orders (request_key, route) VALUES (idem_http_parse_key(%s), 'flaky')",
                (request.headers.get("Idempotency-Key"),))
    if not flaky_failed.is_set():
        flaky_failed.set()
        raise RuntimeError("the first call fails after its write")
    return 201, {"Content-Type": "text/plain"}, b"done"


ROUTES = {
    ("POST", "/orders"): idempotent(create_order),
    ("POST", "/receipts"): idempotent(create_receipt),
    ("POST", "/flaky"): idempotent(flaky),
}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        route = ROUTES.get((self.command, self.path.split("?", 1)[0]))
        if route is None:
            status, headers, out = 404, {"Content-Type": "text/plain"}, b"not found"
        else:
            status, headers, out = route(Request(self.command, self.path, self.headers, body))
        self.send_response(status)
        for name, value in (headers or {}).items():
            for v in value if isinstance(value, list) else [value]:
                self.send_header(name, v)
        self.send_header("Content-Length", str(len(out or b"")))
        self.end_headers()
        if out:
            self.wfile.write(out)

    def log_message(self, *args):
        pass


def main():
    conn = pool.getconn()
    with conn.cursor() as cur:
        cur.execute(SETUP)
    conn.commit()
    pool.putconn(conn)
    server = ThreadingHTTPServer(("127.0.0.1", int(os.environ.get("PORT", "0"))), Handler)
    print(f"listening on {server.server_address[1]}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    server.serve_forever()
    pool.closeall()
    return 0


if __name__ == "__main__":
    sys.exit(main())
