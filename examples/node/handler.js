'use strict';
/*
 * POST /payments, made safe to retry with an Idempotency-Key header.
 *
 * Clients retry: a timeout, a dropped connection or an impatient user sends
 * the same request again, sometimes while the first one is still running.
 * Charging the card is a side effect outside the database, so it cannot be
 * rolled back with a transaction.  The handler therefore uses a lease:
 *
 *   idem_begin(scope, key, lease, fingerprint => request)   -- autocommit
 *     acquired     -> charge the card, then idem_finish(..., token, response)
 *     completed    -> replay the stored response; the card is not charged again
 *     failed       -> replay the stored error
 *     in_progress  -> idem_await(...) the original, then replay its response
 *   reusing a key for a different request  -> SQLSTATE ID001 -> 422
 *
 * A transient gateway error is recorded with idem_fail(retryable => true):
 * the client's retry acquires the key again and charges the card then.
 *
 * Connection settings come from the standard environment variables
 * (PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD), which node-postgres
 * reads itself.  The server listens on 127.0.0.1 on a free port, and the
 * bottom of this file plays a client that retries.  Run:
 *
 *   cd examples/node && npm ci && PGDATABASE=mydb node handler.js
 */

const http = require('node:http');
const { setTimeout: sleep } = require('node:timers/promises');
const { Pool } = require('pg');

const pool = new Pool({ max: 5 });

const SCOPE = 'POST /payments';   // one namespace of keys per endpoint
const LEASE = '30 seconds';       // longer than a gateway call can take
const AWAIT = '10 seconds';       // how long a duplicate waits for the original

// Run once per database; a real application does this in its migrations.
const SETUP = `
CREATE EXTENSION IF NOT EXISTS idempotency;
CREATE TABLE IF NOT EXISTS gateway_charges (
    id          bigserial PRIMARY KEY,
    request_key text NOT NULL,
    amount      numeric NOT NULL,
    card        text NOT NULL,
    charged_at  timestamptz NOT NULL DEFAULT now()
)`;

// ---------------------------------------------------------------------------
// The outside world: a card gateway.  Simulated here; it keeps its own
// record of every charge (gateway_charges, written outside any transaction
// of the handler), so that double charges would show.
// ---------------------------------------------------------------------------

const flakyCards = new Set(['tok_flaky']);   // time out on the first attempt

class CardDeclined extends Error {}

async function chargeCard(requestKey, { amount, card }) {
  await sleep(200);                                   // the network round trip
  if (card === 'tok_declined') throw new CardDeclined('card declined');
  if (flakyCards.delete(card)) throw new Error('gateway timeout');
  const { rows } = await pool.query(
    'INSERT INTO gateway_charges (request_key, amount, card) VALUES ($1, $2, $3) RETURNING id',
    [requestKey, amount, card]);
  return `ch_${rows[0].id}`;
}

// ---------------------------------------------------------------------------
// The handler.
// ---------------------------------------------------------------------------

async function handlePayment(req, res) {
  const key = req.headers['idempotency-key'];
  if (!key) return send(res, 400, { error: 'Idempotency-Key header required' });
  const request = await readJson(req);

  // Autocommit (no BEGIN): other requests with the same key must see it
  // in progress at once.  The fingerprint makes a reused key with a
  // different body an error; jsonb normalises key order and spacing.
  let begun;
  try {
    ({ rows: [begun] } = await pool.query(
      'SELECT outcome, token, result FROM idem_begin($1, $2, $3::interval, NULL, $4::jsonb::text)',
      [SCOPE, key, LEASE, JSON.stringify(request)]));
  } catch (err) {
    if (err.code === 'ID001') {
      return send(res, 422, { error: 'Idempotency-Key already used for a different request' });
    }
    throw err;
  }

  switch (begun.outcome) {
    case 'acquired':
      return execute(res, key, begun.token, request);
    case 'completed':
    case 'failed':
      return replay(res, begun.result);
    case 'in_progress': {
      // The original request is still running: wait for it (holding no
      // lock), then answer what it answered.
      const { rows: [record] } = await pool.query(
        'SELECT status, result FROM idem_await($1, $2, $3::interval)', [SCOPE, key, AWAIT]);
      if (record.status === 'completed' || record.status === 'failed') {
        return replay(res, record.result);
      }
      return send(res, 409, { error: 'a request with this Idempotency-Key is in progress' },
                  { 'Retry-After': '1' });
    }
    default:
      throw new Error(`unexpected outcome ${begun.outcome}`);
  }
}

// We own the key: do the work once, store the response for replay.
async function execute(res, key, token, request) {
  let response;
  try {
    const charge = await chargeCard(key, request);
    response = { status: 201, body: { charge, amount: request.amount } };
  } catch (err) {
    if (!(err instanceof CardDeclined)) {
      // Transient: a retry may succeed, so let the next request with this
      // key acquire it again (retryable => true) and tell the client so.
      const answer = { status: 503, body: { error: err.message } };
      await pool.query('SELECT idem_fail($1, $2, $3, $4::jsonb, true)',
                       [SCOPE, key, token, JSON.stringify(answer)]);
      return send(res, answer.status, answer.body, { 'Retry-After': '1' });
    }
    // Permanent: store the answer; retries get it replayed.
    response = { status: 402, body: { error: err.message } };
    await pool.query('SELECT idem_fail($1, $2, $3, $4::jsonb, false)',
                     [SCOPE, key, token, JSON.stringify(response)]);
    return send(res, response.status, response.body);
  }
  // The token fences: had our lease run out and another request taken the
  // key over, idem_finish would raise ID003 and store nothing.
  await pool.query('SELECT idem_finish($1, $2, $3, $4::jsonb)',
                   [SCOPE, key, token, JSON.stringify(response)]);
  return send(res, response.status, response.body);
}

function replay(res, stored) {
  return send(res, stored.status, stored.body, { 'Idempotent-Replayed': 'true' });
}

function send(res, status, body, headers = {}) {
  res.writeHead(status, { 'Content-Type': 'application/json', ...headers });
  res.end(JSON.stringify(body));
}

async function readJson(req) {
  let text = '';
  for await (const chunk of req) text += chunk;
  return JSON.parse(text || '{}');
}

const server = http.createServer((req, res) => {
  if (req.method !== 'POST' || req.url !== '/payments') {
    return send(res, 404, { error: 'not found' });
  }
  handlePayment(req, res).catch((err) => {
    console.error(`handler error: ${err.message}`);
    if (!res.headersSent) send(res, 500, { error: 'internal error' });
  });
});

// ---------------------------------------------------------------------------
// A client that retries, to show the handler at work.
// ---------------------------------------------------------------------------

function post(key, body) {
  return new Promise((resolve, reject) => {
    const payload = JSON.stringify(body);
    const req = http.request({
      host: '127.0.0.1',
      port: server.address().port,
      method: 'POST',
      path: '/payments',
      headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key },
    }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk) => { text += chunk; });
      res.on('end', () => {
        const replayed = res.headers['idempotent-replayed'] === 'true' ? ' (replayed)' : '';
        const line = `  POST /payments key=${key} ${payload} -> ${res.statusCode} ${text}${replayed}`;
        resolve({ status: res.statusCode, line });
      });
    });
    req.on('error', reject);
    req.end(payload);
  });
}

async function show(...requests) {
  for (const { line } of await Promise.all(requests)) console.log(line);
}

async function main() {
  await pool.query(SETUP);
  server.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));

  console.log('1) A payment, then the client retries it (its first answer got lost).');
  await show(post('req-1', { amount: 25, card: 'tok_visa' }));
  await show(post('req-1', { amount: 25, card: 'tok_visa' }));

  console.log('2) A double click: the same request twice at the same moment.');
  await show(post('req-2', { amount: 40, card: 'tok_visa' }),
             post('req-2', { amount: 40, card: 'tok_visa' }));

  console.log('3) A key reused for a different request.');
  await show(post('req-1', { amount: 99, card: 'tok_visa' }));

  console.log('4) The gateway times out; the client retries.');
  await show(post('req-3', { amount: 10, card: 'tok_flaky' }));
  await show(post('req-3', { amount: 10, card: 'tok_flaky' }));

  console.log('5) The card is declined; the client retries anyway.');
  await show(post('req-4', { amount: 70, card: 'tok_declined' }));
  await show(post('req-4', { amount: 70, card: 'tok_declined' }));

  const { rows: [{ charges, keys }] } = await pool.query(
    'SELECT count(*)::int AS charges, count(DISTINCT request_key)::int AS keys FROM gateway_charges');
  console.log(`The gateway made ${charges} charges for ${keys} distinct idempotency keys.`);
}

main()
  .then(() => { process.exitCode = 0; })
  .catch((err) => { console.error(err); process.exitCode = 1; })
  .finally(() => { server.close(); return pool.end(); });
