/*-------------------------------------------------------------------------
 *
 * token.c
 *	  One-time tokens: idem_token_issue and idem_token_consume, for form
 *	  tokens, e-mail confirmation links and other single-use permissions.
 *
 *	  Storage: a token is a record of idem_records keyed by the token text in
 *	  the scope it was issued for, with status 'issued', then 'consumed'.  It
 *	  keeps its expiry either way and idem_purge removes it once expired, so a
 *	  used token stays used as long as it would have been valid.  Visibility:
 *	  other sessions see a token once the issuing transaction commits; until
 *	  then their consume returns false.
 *
 *	  Token text: TOKEN_BYTES bytes (128 bits) of pg_strong_random, as
 *	  lowercase hexadecimal; idem_token_consume refuses any other shape with
 *	  22023 before any SQL runs.
 *
 *	  Atomicity and locking: consuming is one UPDATE ... WHERE status =
 *	  'issued' AND the record is live.  Of concurrent consumers one updates
 *	  the row; the others wait for it, re-check its committed version (READ
 *	  COMMITTED), find 'consumed', update nothing (keeping the row locked to
 *	  their transaction's end) and return false; if the winner rolls back,
 *	  the next waiter gets the token.  Under REPEATABLE READ or SERIALIZABLE
 *	  the waiters fail with 40001.  Everything runs in the caller's
 *	  transaction: a consume rolled back leaves the token unused.  Issuing
 *	  locks only its own new row.
 *
 *	  Time: "now" is the wall clock at the call (GetCurrentTimestamp), as in
 *	  idem_claim.  Memory: the caller's context; SPI's is released by
 *	  SPI_finish.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "idempotency.h"

PG_FUNCTION_INFO_V1(idem_token_issue);
PG_FUNCTION_INFO_V1(idem_token_consume);

/* Random bytes in a token, and its length as hexadecimal text. */
#define TOKEN_BYTES		16
#define TOKEN_CHARS		(2 * TOKEN_BYTES)

/*
 * How many fresh tokens idem_token_issue tries when the key is already
 * taken in the scope.  With 128 random bits a single retry is already
 * beyond belief; exhausting them means the random source is broken.
 */
#define TOKEN_MAX_ATTEMPTS 4

static IdemQuery q_token_insert = {
	"INSERT INTO @extschema@.idem_records AS r"
	" (scope, key, status, created_at, updated_at, expires_at)"
	" VALUES ($1, $2, 'issued', $3, $3, $4)"
	" ON CONFLICT (scope, key) DO NOTHING",
	4, {TEXTOID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID},
	IDEM_REWRITTEN_PER_SHARD
};

static IdemQuery q_token_consume = {
	"UPDATE @extschema@.idem_records r"
	" SET status = 'consumed', updated_at = $3"
	" WHERE r.scope OPERATOR(pg_catalog.=) $1 AND r.key OPERATOR(pg_catalog.=) $2"
	" AND r.status OPERATOR(pg_catalog.=) 'issued'"
	" AND r.expires_at OPERATOR(pg_catalog.>) $3",
	3, {TEXTOID, TEXTOID, TIMESTAMPTZOID},
	IDEM_REWRITTEN_PER_SHARD
};

/*
 * Fill token (a text of TOKEN_CHARS bytes) with a new token: TOKEN_BYTES
 * strong random bytes as lowercase hex.
 */
static void
token_generate(text *token, const char *fname)
{
	static const char hex[] = "0123456789abcdef";
	uint8		raw[TOKEN_BYTES];
	char	   *buf = VARDATA(token);
	int			i;

	if (!pg_strong_random(raw, sizeof(raw)))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("%s: could not generate random values", fname)));
	for (i = 0; i < TOKEN_BYTES; i++)
	{
		buf[2 * i] = hex[raw[i] >> 4];
		buf[2 * i + 1] = hex[raw[i] & 0x0f];
	}
}

/* The token argument: not NULL, and exactly TOKEN_CHARS lowercase hex digits. */
static text *
token_arg(FunctionCallInfo fcinfo, int argno, const char *fname)
{
	text	   *token;
	const char *p;
	int			i;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s: token must not be null", fname)));

	token = PG_GETARG_TEXT_PP(argno);
	p = VARDATA_ANY(token);
	if (VARSIZE_ANY_EXHDR(token) != TOKEN_CHARS)
		i = -1;
	else
		for (i = 0; i < TOKEN_CHARS; i++)
			if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f')))
				break;
	if (i != TOKEN_CHARS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s: token is malformed", fname),
				 errdetail("A token is %d lowercase hexadecimal digits, as returned by idem_token_issue().",
						   TOKEN_CHARS)));
	return token;
}

/*
 * idem_token_issue(scope text, ttl interval DEFAULT '10 minutes')
 *   RETURNS text
 *
 * A new one-time token for scope, valid for ttl: 32 lowercase hexadecimal
 * digits encoding 128 random bits.  The token exists once the calling
 * transaction commits.  Fails with 22004 (NULL scope or ttl), 22001 (scope
 * too long), 22023 (ttl not positive), 22008 (ttl overflows the timestamp
 * range), 25006 (read-only transaction), XX000 (no strong random source).
 */
Datum
idem_token_issue(PG_FUNCTION_ARGS)
{
	const char *fname = "idem_token_issue";
	text	   *scope = idem_arg_scope(fcinfo, 0, fname);
	Oid			nsp = idem_extension_schema(fcinfo);
	TimestampTz now;
	TimestampTz expires;
	text	   *token;
	Datum		values[4];
	int			attempt;

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s: ttl must not be null", fname),
				 errhint("Omit ttl for the default of 10 minutes.")));

	idem_check_writable(fname);

	now = GetCurrentTimestamp();
	expires = idem_add_interval(now, PG_GETARG_INTERVAL_P(1), "ttl", fname);
	idem_check_ttl_arg(fcinfo, 1, PG_GETARG_INTERVAL_P(1), fname);

	/* Allocated here, not under SPI: it is the result. */
	token = (text *) palloc(VARHDRSZ + TOKEN_CHARS);
	SET_VARSIZE(token, VARHDRSZ + TOKEN_CHARS);

	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(token);
	values[2] = TimestampTzGetDatum(now);
	values[3] = TimestampTzGetDatum(expires);

	idem_spi_connect();
	for (attempt = 0;; attempt++)
	{
		if (attempt == TOKEN_MAX_ATTEMPTS)
			elog(ERROR, "%s: every generated token was already taken", fname);
		token_generate(token, fname);
		if (idem_query_exec(&q_token_insert, nsp, values, NULL, false, 0) == 1)
			break;
	}
	SPI_finish();

	PG_RETURN_TEXT_P(token);
}

/*
 * idem_token_consume(scope text, token text) RETURNS boolean
 *
 * True exactly once for a token issued for scope: when this call used it.
 * False for a token that is unknown, expired, already used, or issued for
 * another scope.  Fails with 22004 (NULL scope or token), 22023 (token not
 * of the shape idem_token_issue returns), 22001 (scope too long), 25006
 * (read-only transaction), 40001 (REPEATABLE READ or SERIALIZABLE and a
 * concurrent transaction consumed the token after the snapshot),
 * 55P03/57014 (lock_timeout/statement_timeout while a concurrent consumer
 * holds the token), 25P01 (the use would commit on its own and
 * idempotency.autocommit_claims is error: args.c).
 */
Datum
idem_token_consume(PG_FUNCTION_ARGS)
{
	const char *fname = "idem_token_consume";
	text	   *scope = idem_arg_scope(fcinfo, 0, fname);
	text	   *token = token_arg(fcinfo, 1, fname);
	Oid			nsp = idem_extension_schema(fcinfo);
	Datum		values[3];
	bool		consumed;

	idem_check_writable(fname);
	idem_check_autocommit_claim(fcinfo, fname);

	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(token);
	values[2] = TimestampTzGetDatum(GetCurrentTimestamp());

	idem_spi_connect();
	consumed = idem_query_exec(&q_token_consume, nsp, values, NULL, false, 0) == 1;
	SPI_finish();

	PG_RETURN_BOOL(consumed);
}

/* The F_at twins of this file (IDEM_SHARD_TWIN, idempotency.h). */
IDEM_SHARD_TWIN(idem_token_issue);
IDEM_SHARD_TWIN(idem_token_consume);
