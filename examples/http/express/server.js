'use strict';
/*
 * Idempotency-Key for Express routes, kept in PostgreSQL with the route's
 * own writes (docs/http.md).
 *
 *   idempotent(handler) wraps a route.  For every request it opens one
 *   transaction and runs:
 *     idem_http_begin(key, method, path, body)   -> proceed, or the answer
 *                                                   to send as it is:
 *                                                   replay, 409, 422, 400
 *     handler(db, req)                           -> { status, headers, body }
 *     idem_http_finish(key, status, headers, body)   -- same transaction
 *     COMMIT, then send
 *   so the response is stored if and only if the handler's writes commit.
 *   A handler that throws, or answers 5xx, is rolled back: nothing is
 *   stored and the client's retry runs it again (the 5xx policy of
 *   docs/http.md).  A duplicate sent while the first is running gets 409
 *   with Retry-After at once, without waiting.
 *
 * Routes of this example (the same as examples/http/python/server.py):
 *   POST /orders    {"item": ..., "qty": ...} -> 201, Location, JSON body
 *   POST /receipts  -> 200 application/octet-stream, bytes that are not UTF-8
 *   POST /flaky     -> the handler throws on its first call in this process
 *
 * Connection settings come from the libpq environment variables (PGHOST,
 * PGPORT, PGUSER, PGDATABASE, PGPASSWORD), which node-postgres reads.  It
 * listens on 127.0.0.1:$PORT and prints "listening on PORT".  For the
 * crash test, IDEM_EXAMPLE_CRASH_KEY names a key: after committing that
 * request the server kills itself (SIGKILL) before it answers.
 *
 *   cd examples/http/express && npm ci && PGDATABASE=mydb PORT=8080 node server.js
 */

const express = require('express');
const { Pool } = require('pg');

const pool = new Pool({ max: 12 });
const SCOPE = 'example-api';          // one namespace of keys for this API
const CRASH_KEY = process.env.IDEM_EXAMPLE_CRASH_KEY || null;

const SETUP = `
CREATE EXTENSION IF NOT EXISTS idempotency;
CREATE TABLE IF NOT EXISTS http_orders (
    id          bigserial PRIMARY KEY,
    request_key text,
    route       text NOT NULL,
    item        text,
    qty         int
)`;

// ---------------------------------------------------------------------------
// The middleware.
// ---------------------------------------------------------------------------

function problem(status, title, detail) {
  return pool.query('SELECT status, headers, body FROM idem_http_problem($1, $2, $3)',
                    [status, title, detail]).then(({ rows: [r] }) => r);
}

// Node's own setHeader: Express's res.set would add a charset to the
// Content-Type, and the answer would not be the one stored.
function send(res, { status, headers, body }) {
  res.statusCode = status;
  for (const [name, value] of Object.entries(headers || {})) res.setHeader(name, value);
  res.end(body == null ? undefined : body);
}

function idempotent(handler) {
  return async (req, res) => {
    const key = req.get('Idempotency-Key') ?? null;
    const body = Buffer.isBuffer(req.body) ? req.body : null;
    const db = await pool.connect();
    let answer;
    try {
      await db.query('BEGIN');
      const { rows: [r] } = await db.query(
        'SELECT action, status, headers, body FROM idem_http_begin($1, $2, $3, $4, scope => $5, content_type => $6)',
        [key, req.method, req.originalUrl, body, SCOPE, req.get('Content-Type') ?? null]);
      if (r.action !== 'proceed') {
        await db.query('ROLLBACK');
        return send(res, r);                  // replay, 409, 422 or 400, ready to send
      }
      try {
        answer = await handler(db, req);
      } catch (err) {
        console.error(`handler error: ${err.message}`);
        answer = null;
      }
      if (answer === null || answer.status >= 500) {
        // The 5xx policy: roll the handler's writes back with the claim;
        // nothing is stored, and the retry runs the handler again.
        await db.query('ROLLBACK');
        return send(res, answer || await problem(500, 'Internal Server Error',
                                                 'The request failed and was rolled back; it is safe to retry it.'));
      }
      await db.query('SELECT idem_http_finish($1, $2, $3, $4, scope => $5)',
                     [key, answer.status, answer.headers, answer.body, SCOPE]);
      await db.query('COMMIT');
    } catch (err) {
      await db.query('ROLLBACK').catch(() => {});
      console.error(`database error: ${err.message}`);
      return send(res, await problem(500, 'Internal Server Error', 'The request failed; it is safe to retry it.'));
    } finally {
      db.release();
    }
    if (CRASH_KEY !== null && key !== null && key.replace(/^"|"$/g, '') === CRASH_KEY) {
      console.log(`crashing after the commit of ${key}, before answering`);
      process.kill(process.pid, 'SIGKILL');
      return;
    }
    send(res, answer);
  };
}

// ---------------------------------------------------------------------------
// The routes: their writes use db, the request's transaction.
// ---------------------------------------------------------------------------

let flakyFailed = false;

async function createOrder(db, req) {
  const { item, qty } = JSON.parse(req.body.toString('utf8'));
  const { rows: [{ id }] } = await db.query(
    'INSERT INTO http_orders (request_key, route, item, qty) VALUES (idem_http_parse_key($1), $2, $3, $4) RETURNING id',
    [req.get('Idempotency-Key'), 'orders', item, qty]);
  await db.query('SELECT pg_sleep(0.3)');   // the rest of the work: time for duplicates to arrive
  return {
    status: 201,
    headers: { 'Content-Type': 'application/json', Location: `/orders/${id}` },
    body: Buffer.from(JSON.stringify({ order: Number(id), item, qty })),
  };
}

async function createReceipt(db, req) {
  const { rows: [{ id }] } = await db.query(
    "INSERT INTO http_orders (request_key, route) VALUES (idem_http_parse_key($1), 'receipts') RETURNING id",
    [req.get('Idempotency-Key')]);
  // Not UTF-8: 0xff 0xfe, a NUL, a lone continuation byte.
  return {
    status: 200,
    headers: { 'Content-Type': 'application/octet-stream' },
    body: Buffer.concat([Buffer.from([0xff, 0xfe, 0x00, 0x80]), Buffer.from(`receipt ${id}`)]),
  };
}

async function flaky(db, req) {
  await db.query("INSERT INTO http_orders (request_key, route) VALUES (idem_http_parse_key($1), 'flaky')",
                 [req.get('Idempotency-Key')]);
  if (!flakyFailed) {
    flakyFailed = true;
    throw new Error('the first call fails after its write');
  }
  return { status: 201, headers: { 'Content-Type': 'text/plain' }, body: Buffer.from('done') };
}

const app = express();
app.set('etag', false);
app.use(express.raw({ type: () => true, limit: '1mb' }));
app.post('/orders', idempotent(createOrder));
app.post('/receipts', idempotent(createReceipt));
app.post('/flaky', idempotent(flaky));

async function main() {
  await pool.query(SETUP);
  const server = app.listen(Number(process.env.PORT || 0), '127.0.0.1', () => {
    console.log(`listening on ${server.address().port}`);
  });
  const stop = () => server.close(() => pool.end());
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main().catch((err) => { console.error(err); process.exit(1); });
