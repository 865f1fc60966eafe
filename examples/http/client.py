#!/usr/bin/env python3
"""A client that retries, driving one of the example servers
(examples/http/express/server.js, examples/http/python/server.py) through
what an Idempotency-Key is for.  Standard library only.

    python3 examples/http/client.py [--server-log FILE] -- SERVER COMMAND...

It starts the server (with PORT set to a free port and
IDEM_EXAMPLE_CRASH_KEY=crash-1), waits for "listening on", and sends:

  1. a request and its retry                         -> 201, then replayed
  2. the same request from 8 clients at once; each   -> one execution, seven
     retries on 409 after Retry-After                   replays, one answer
  3. the key of 1 with another body                  -> 422 problem
  4. no Idempotency-Key                              -> 400 problem
  5. crash-1: the server commits, then dies before   -> the retry (to a
     it answers                                         restarted server) is
                                                        replayed
  6. a response that is not UTF-8, and its retry     -> the same bytes
  7. a handler that fails once (500, rolled back)    -> the retry runs it

Run twice against the same database, every answer of the second run is a
replay.  examples/run.sh checks the output and the database.
"""
import hashlib
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time

CRASH_KEY = "crash-1"


class Server:
    def __init__(self, command, log):
        self.command, self.log, self.proc, self.port = command, log, None, None

    def start(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        env = dict(os.environ, PORT=str(self.port), IDEM_EXAMPLE_CRASH_KEY=CRASH_KEY)
        self.proc = subprocess.Popen(self.command, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, bufsize=1)
        line = self.proc.stdout.readline()
        self.log.write(line)
        if not line.startswith("listening on"):
            self.log.write(self.proc.stdout.read())
            raise SystemExit(f"the server did not start: {line.strip()!r}")
        threading.Thread(target=self._copy, args=(self.proc,), daemon=True).start()

    def _copy(self, proc):
        for line in proc.stdout:
            self.log.write(line)
            self.log.flush()

    def wait(self):
        return self.proc.wait(timeout=30)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def post(server, path, key, body, content_type="application/json"):
    """(status, headers with lower-case names, body bytes)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    headers = {"Content-Type": content_type}
    if key is not None:
        headers["Idempotency-Key"] = f'"{key}"'      # a Structured Field String, as the draft asks
    try:
        conn.request("POST", path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def describe(status, headers, body):
    if headers.get("content-type", "").startswith("application/problem+json"):
        text = f"{json.loads(body)['title']} (problem+json)"
    else:
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            text = "bytes " + body.hex(" ")
    replayed = " (replayed)" if headers.get("idempotent-replayed") == "true" else ""
    extra = f" Retry-After: {headers['retry-after']}" if status == 409 and "retry-after" in headers else ""
    if "location" in headers:
        extra += f" Location: {headers['location']}"
    return f"{status} {text}{extra}{replayed}"


def show(server, path, key, body, **kw):
    status, headers, out = post(server, path, key, body, **kw)
    label = body.decode() if body else ""
    print(f"  POST {path} key={key or '(none)'} {label} -> {describe(status, headers, out)}".replace("  ->", " ->"), flush=True)
    return status, headers, out


def storm(server, key, body, clients=8):
    """clients send the same request at once; each retries on 409 after Retry-After."""
    results = [None] * clients
    conflicts = [0] * clients
    start = threading.Barrier(clients)

    def client(i):
        start.wait()
        for _ in range(60):
            status, headers, out = post(server, "/orders", key, body)
            if status != 409:
                results[i] = (status, headers, out)
                return
            conflicts[i] += 1
            time.sleep(float(headers.get("retry-after", "1")))
        results[i] = (409, {}, b"gave up")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, (status, headers, out) in enumerate(results):
        print(f"  client {i + 1}: POST /orders key={key} -> {describe(status, headers, out)}", flush=True)
    executed = sum(1 for s, h, _ in results if s == 201 and h.get("idempotent-replayed") != "true")
    replayed = sum(1 for s, h, _ in results if h.get("idempotent-replayed") == "true")
    distinct = len({out for _, _, out in results})
    print(f"  {clients} clients: {executed} executed, {replayed} replayed, {distinct} distinct answer(s)"
          f" ({sum(conflicts)} answers 409 on the way)", flush=True)


def main(argv):
    log_path = None
    if argv[:1] == ["--server-log"]:
        log_path, argv = argv[1], argv[2:]
    if argv[:1] != ["--"] or len(argv) < 2:
        raise SystemExit("usage: client.py [--server-log FILE] -- SERVER COMMAND...")
    log = open(log_path, "a") if log_path else open(os.devnull, "w")
    server = Server(argv[1:], log)
    server.start()
    try:
        print("1) A request, then its retry (the first answer was lost).", flush=True)
        order = b'{"item": "book", "qty": 1}'
        show(server, "/orders", "order-1", order)
        show(server, "/orders", "order-1", b'{"qty":1,"item":"book"}')   # the same JSON, other spacing

        print("2) Eight clients send the same request at once.", flush=True)
        storm(server, "storm-1", b'{"item": "pen", "qty": 8}')

        print("3) The key of 1) with another body.", flush=True)
        show(server, "/orders", "order-1", b'{"item": "book", "qty": 2}')

        print("4) No Idempotency-Key.", flush=True)
        show(server, "/orders", None, order)

        print("5) The server commits, then dies before it answers; the client retries.", flush=True)
        try:
            show(server, "/orders", CRASH_KEY, b'{"item": "lamp", "qty": 1}')
        except (ConnectionError, http.client.HTTPException, OSError) as e:
            server.wait()
            print(f"  POST /orders key={CRASH_KEY} -> no answer ({type(e).__name__}): the server died", flush=True)
            server.start()
            print("  server restarted", flush=True)
            show(server, "/orders", CRASH_KEY, b'{"item": "lamp", "qty": 1}')

        print("6) A response that is not UTF-8, and its retry.", flush=True)
        first = show(server, "/receipts", "receipt-1", b"", content_type="application/octet-stream")
        again = show(server, "/receipts", "receipt-1", b"", content_type="application/octet-stream")
        same = first[2] == again[2]
        print(f"  identical bytes: {'yes' if same else 'no'} (sha256 {hashlib.sha256(again[2]).hexdigest()[:16]})",
              flush=True)

        print("7) The handler fails once (500: rolled back, nothing stored); the client retries.", flush=True)
        show(server, "/flaky", "flaky-1", b"{}")
        show(server, "/flaky", "flaky-1", b"{}")
    finally:
        server.stop()
        log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
