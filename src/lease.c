/*-------------------------------------------------------------------------
 *
 * lease.c
 *	  Two-phase records for work with outside side effects: idem_begin,
 *	  idem_heartbeat, idem_finish, idem_fail and idem_await.
 *
 *	  Model: idem_begin, committed on its own, records the key as
 *	  'in_progress' with a lease (locked_until) and a fencing token taken
 *	  from idem_token_seq, so every token is greater than any issued before
 *	  it for any key, across expiry, purge and dump/restore.  Only the
 *	  holder of the current token may heartbeat, finish or fail the record;
 *	  every such call is one UPDATE whose WHERE clause names the token, so
 *	  a stale worker whose lease was taken over changes nothing and gets
 *	  ID003 (lease lost).
 *
 *	  Locking and visibility: the dedup decision is made by the primary key
 *	  through INSERT ... ON CONFLICT DO NOTHING, exactly as in idem_claim:
 *	  idem_begin runs claim.c's decision (idem_claim_spi) with its own
 *	  statements and maps the outcome to 'acquired', 'in_progress',
 *	  'completed' or 'failed'.  Takeovers (expired record, retryable
 *	  failure, lease run out) are UPDATEs that re-check the takeover condition on the newest
 *	  row version, so of two racing workers exactly one acquires.
 *	  idem_await holds no lock while it waits: it polls the record with a
 *	  fresh snapshot per look (READ COMMITTED), sleeping on its latch, and
 *	  stays interruptible (statement_timeout, cancel, postmaster death).
 *
 *	  The setting idempotency.max_attempts (how many retryable failures
 *	  before a record is failed for good) is defined here, from module.c's
 *	  _PG_init (idem_lease_init).  Calls claim.c, claim_direct.c
 *	  (idem_records_citus), citus.c, query.c, spi_read.c, shard.c (the
 *	  _at twins), args.c, stats.c; nothing calls back.
 *
 *	  Memory: everything is in the caller's context or SPI's, which
 *	  SPI_finish releases; results are copied out with SPI_datumTransfer.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "idempotency.h"
#include "citus.h"
#include "claim.h"
#include "spi_read.h"

PG_FUNCTION_INFO_V1(idem_begin);
PG_FUNCTION_INFO_V1(idem_heartbeat);
PG_FUNCTION_INFO_V1(idem_finish);
PG_FUNCTION_INFO_V1(idem_fail);
PG_FUNCTION_INFO_V1(idem_await);

/* idempotency.max_attempts: retryable failures before a record is failed */
static int	max_attempts = 0;

/* Define idempotency.max_attempts (module.c's _PG_init). */
void
idem_lease_init(void)
{
	DefineCustomIntVariable("idempotency.max_attempts",
							"Retryable failures after which a leased record becomes permanently failed.",
							"0 means unlimited.",
							&max_attempts,
							0,
							0,
							INT_MAX,
							PGC_USERSET,
							0,
							NULL,
							NULL,
							NULL);
}

/* idem_await's longest sleep between two looks at the record. */
#define AWAIT_MAX_NAP_MS 100

/* Shared by every token-checked UPDATE: the caller still holds the lease. */
#define HOLDS_LEASE_SQL \
	" WHERE r.scope OPERATOR(pg_catalog.=) $1 AND r.key OPERATOR(pg_catalog.=) $2" \
	" AND r.status OPERATOR(pg_catalog.=) 'in_progress'" \
	" AND r.token OPERATOR(pg_catalog.=) $3" \
	" AND r.expires_at OPERATOR(pg_catalog.>) $4"

static IdemQuery q_begin_insert = {
	"INSERT INTO @extschema@.idem_records AS r"
	" (scope, key, status, fingerprint, created_at, updated_at, expires_at,"
	"  locked_until, token, attempts, lease)"
	" VALUES ($1, $2, 'in_progress', $3, $4, $4, $5, $6,"
	"  pg_catalog.nextval('@extschema@.idem_token_seq'::pg_catalog.regclass), 1, $7)"
	" ON CONFLICT (scope, key) DO NOTHING"
	" RETURNING r.token",
	7, {TEXTOID, TEXTOID, BYTEAOID, TIMESTAMPTZOID, TIMESTAMPTZOID,
	TIMESTAMPTZOID, INTERVALOID},
	IDEM_REWRITTEN_PER_SHARD
};

static IdemQuery q_begin_read = {
	"SELECT r.status, r.fingerprint, r.created_at, r.expires_at,"
	"       r.locked_until, r.result"
	" FROM @extschema@.idem_records r"
	" WHERE r.scope OPERATOR(pg_catalog.=) $1 AND r.key OPERATOR(pg_catalog.=) $2",
	2, {TEXTOID, TEXTOID},
	IDEM_REWRITTEN_PER_SHARD
};

/*
 * Take over an expired, retryable or abandoned record.  $4 is now; token
 * is the SQL of its new token.
 */
#define BEGIN_TAKEOVER_SQL(token) \
	"UPDATE @extschema@.idem_records r" \
	" SET status = 'in_progress', locked_until = $6, lease = $7," \
	"     token = " token "," \
	"     updated_at = $4, result = NULL," \
	"     attempts = CASE WHEN r.expires_at OPERATOR(pg_catalog.<=) $4 THEN 1" \
	"                ELSE r.attempts OPERATOR(pg_catalog.+) 1 END," \
	"     created_at = CASE WHEN r.expires_at OPERATOR(pg_catalog.<=) $4 THEN $4" \
	"                  ELSE r.created_at END," \
	"     expires_at = CASE WHEN r.expires_at OPERATOR(pg_catalog.<=) $4 THEN $5" \
	"                  ELSE r.expires_at END," \
	"     fingerprint = CASE WHEN r.expires_at OPERATOR(pg_catalog.<=) $4 THEN $3" \
	"                   ELSE COALESCE(r.fingerprint, $3) END" \
	" WHERE r.scope OPERATOR(pg_catalog.=) $1 AND r.key OPERATOR(pg_catalog.=) $2" \
	" AND " IDEM_CLAIMABLE_SQL \
	" RETURNING r.token"

static IdemQuery q_begin_takeover = {
	BEGIN_TAKEOVER_SQL("pg_catalog.nextval('@extschema@.idem_token_seq'::pg_catalog.regclass)"),
	7, {TEXTOID, TEXTOID, BYTEAOID, TIMESTAMPTZOID, TIMESTAMPTZOID,
	TIMESTAMPTZOID, INTERVALOID},
	IDEM_REWRITTEN_PER_SHARD
};

/*
 * The same on Citus (idem_records distributed), which refuses a volatile
 * function in a distributed UPDATE: the token is drawn from idem_token_seq
 * on this node first and passed as $8 (a takeover that then finds nothing
 * to take leaves a gap, as an INSERT that meets a conflict does).
 */
static IdemQuery q_begin_takeover_citus = {
	BEGIN_TAKEOVER_SQL("$8"),
	8, {TEXTOID, TEXTOID, BYTEAOID, TIMESTAMPTZOID, TIMESTAMPTZOID,
	TIMESTAMPTZOID, INTERVALOID, INT8OID},
	IDEM_REWRITTEN_PER_SHARD
};

/*
 * idem_begin's takeover statement for this round: on Citus, the one whose
 * token was drawn here first, as $8 (values[7]).
 */
static IdemQuery *
begin_takeover_for(Oid nsp, Datum *values)
{
	if (!idem_records_citus(nsp))
		return &q_begin_takeover;
	values[7] = Int64GetDatum(nextval_internal(get_relname_relid("idem_token_seq", nsp),
											   true));
	return &q_begin_takeover_citus;
}

/* idem_begin's statements for idem_claim_spi (claim.c). */
static const IdemClaimPlan begin_plan = {
	&q_begin_insert, &q_begin_read, &q_begin_takeover, begin_takeover_for, "begin"
};

static IdemQuery q_heartbeat = {
	"UPDATE @extschema@.idem_records r"
	" SET locked_until = $4 OPERATOR(pg_catalog.+) COALESCE($5, r.lease),"
	"     lease = COALESCE($5, r.lease), updated_at = $4"
	HOLDS_LEASE_SQL
	" AND COALESCE($5, r.lease) IS NOT NULL"
	" RETURNING r.locked_until",
	5, {TEXTOID, TEXTOID, INT8OID, TIMESTAMPTZOID, INTERVALOID},
	IDEM_REWRITTEN_PER_SHARD
};

static IdemQuery q_finish = {
	"UPDATE @extschema@.idem_records r"
	" SET status = 'completed', result = $5, locked_until = NULL, updated_at = $4"
	HOLDS_LEASE_SQL,
	5, {TEXTOID, TEXTOID, INT8OID, TIMESTAMPTZOID, JSONBOID},
	IDEM_REWRITTEN_PER_SHARD
};

static IdemQuery q_fail = {
	"UPDATE @extschema@.idem_records r"
	" SET status = CASE WHEN $6 AND ($7 OPERATOR(pg_catalog.=) 0"
	"                  OR r.attempts OPERATOR(pg_catalog.<) $7)"
	"             THEN 'retryable' ELSE 'failed' END,"
	"     result = $5, locked_until = NULL, updated_at = $4"
	HOLDS_LEASE_SQL,
	7, {TEXTOID, TEXTOID, INT8OID, TIMESTAMPTZOID, JSONBOID, BOOLOID, INT4OID},
	IDEM_REWRITTEN_PER_SHARD
};

static IdemQuery q_lease_state = {
	"SELECT r.status, r.token, r.expires_at OPERATOR(pg_catalog.>) $3, r.lease IS NULL"
	" FROM @extschema@.idem_records r"
	" WHERE r.scope OPERATOR(pg_catalog.=) $1 AND r.key OPERATOR(pg_catalog.=) $2",
	3, {TEXTOID, TEXTOID, TIMESTAMPTZOID},
	IDEM_REWRITTEN_PER_SHARD
};

static IdemQuery q_await_read = {
	"SELECT ROW(r.scope, r.key, r.status, r.fingerprint, r.result,"
	"           r.created_at, r.updated_at, r.expires_at,"
	"           r.locked_until, r.token, r.attempts)::@extschema@.idem_record,"
	"       r.status, r.locked_until"
	" FROM @extschema@.idem_records r"
	" WHERE r.scope OPERATOR(pg_catalog.=) $1 AND r.key OPERATOR(pg_catalog.=) $2"
	" AND r.expires_at OPERATOR(pg_catalog.>) $3",
	3, {TEXTOID, TEXTOID, TIMESTAMPTZOID},
	IDEM_REWRITTEN_PER_SHARD
};

/* The parameters the lease statements share: $1 scope, $2 key, $3 token, $4 now. */
static void
lease_params(Datum *values, text *scope, text *key, int64 token, TimestampTz now)
{
	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(key);
	values[2] = Int64GetDatum(token);
	values[3] = TimestampTzGetDatum(now);
}

/* The token argument: not NULL. */
static int64
arg_token(FunctionCallInfo fcinfo, int argno, const char *fname)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s: token must not be null", fname),
				 errhint("Pass the token idem_begin returned with outcome 'acquired'.")));
	return PG_GETARG_INT64(argno);
}

/*
 * Raise the error for a token-checked UPDATE that matched nothing, saying
 * why: ID002 when the key was never begun (no record at all), 22004 when a heartbeat gave no lease length and the record has
 * none (lease_given false), else ID003 (lease lost); 55000 when the
 * record cannot be read as the install script shapes it (spi_read.c).
 * Must be called inside the SPI connection.
 */
static void
lease_lost(Oid nsp, const char *fname, text *scope, text *key, int64 token,
		   TimestampTz now, bool lease_given)
{
	Datum		values[3];
	char	   *why;
	char	   *status;
	Datum		cur;
	bool		cur_null;
	bool		live;
	bool		no_lease;

	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(key);
	values[2] = TimestampTzGetDatum(now);

	if (idem_query_exec(&q_lease_state, nsp, values, NULL, false, 1) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_IDEM_NO_RECORD),
				 errmsg("%s: key was never begun", fname),
				 errdetail("Key \"%s\" in scope \"%s\" has no record.",
						   text_to_cstring(key), text_to_cstring(scope)),
				 errhint("Call idem_begin first and pass the token it returns; a record purged after its expiry is gone too.")));

	status = idem_spi_read_cstring(SPI_tuptable, 0, 1, "status");
	cur = idem_spi_read(SPI_tuptable, 0, 2, INT8OID, "token", &cur_null);
	live = DatumGetBool(idem_spi_read_required(SPI_tuptable, 0, 3, BOOLOID, "expires_at"));
	no_lease = DatumGetBool(idem_spi_read_required(SPI_tuptable, 0, 4, BOOLOID, "lease"));
	if (!live)
		why = psprintf("Key \"%s\" in scope \"%s\" has no live record.",
					   text_to_cstring(key), text_to_cstring(scope));
	else if (strcmp(status, IDEM_STATUS_IN_PROGRESS) == 0 && !cur_null &&
			 DatumGetInt64(cur) == token && !lease_given && no_lease)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s: the record has no lease length, so one must be given", fname),
				 errdetail("Key \"%s\" in scope \"%s\" has a NULL lease column.",
						   text_to_cstring(key), text_to_cstring(scope)),
				 errhint("Pass the lease, as in idem_heartbeat(scope, key, token, '5 minutes').")));
	else if (strcmp(status, IDEM_STATUS_IN_PROGRESS) == 0 && !cur_null)
		why = psprintf("Key \"%s\" in scope \"%s\" is now leased with token " INT64_FORMAT ", not " INT64_FORMAT ".",
					   text_to_cstring(key), text_to_cstring(scope),
					   DatumGetInt64(cur), token);
	else
		why = psprintf("Key \"%s\" in scope \"%s\" is no longer in progress: its status is \"%s\".",
					   text_to_cstring(key), text_to_cstring(scope), status);

	ereport(ERROR,
			(errcode(ERRCODE_IDEM_LEASE_LOST),
			 errmsg("%s: lease lost", fname),
			 errdetail_internal("%s", why),
			 errhint("Another worker took the key over after the lease ran out, or the work was already finished; do not apply this worker's result.")));
}

/*
 * idem_begin(scope text, key text, lease interval DEFAULT '5 minutes',
 *            ttl interval DEFAULT NULL, fingerprint text DEFAULT NULL)
 *   RETURNS TABLE (outcome text, token bigint, result jsonb)
 *
 * Start work on (scope, key) under a lease.  One row: 'acquired' with a
 * new token; 'in_progress' (someone else holds a live lease); 'completed'
 * with the stored result; 'failed' with the stored error.  Meant to be
 * committed on its own.  Fails with 22004/22023/22001 (bad scope, key,
 * lease or ttl, as idem_claim), 25006 (read-only), ID001 (fingerprint
 * mismatch), 40001 (REPEATABLE READ/SERIALIZABLE conflict, or a takeover
 * that makes no progress), 42501 (a record row-level security hides or
 * does not let the role update), 55000 (a record of an idem_records whose
 * columns a DBA changed), as idem_claim (claim.c's idem_claim_spi).
 */
Datum
idem_begin(PG_FUNCTION_ARGS)
{
	const char *fname = "idem_begin";
	text	   *scope = idem_arg_scope(fcinfo, 0, fname);
	text	   *key = idem_arg_key(fcinfo, 1, fname);
	Oid			nsp = idem_extension_schema(fcinfo);
	TupleDesc	tupdesc;
	TimestampTz now;
	TimestampTz expires;
	TimestampTz locked_until;
	Interval   *lease;
	bytea	   *fp;
	Datum		values[8];
	char		nulls[8] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	const char *outcome = NULL;
	Datum		token = (Datum) 0;
	bool		token_null = true;
	Datum		result = (Datum) 0;
	bool		result_null = true;
	IdemRecordState rec;
	Datum		out[3];
	bool		outnull[3];

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s: lease must not be null", fname)));
	lease = PG_GETARG_INTERVAL_P(2);

	idem_check_writable(fname);
	idem_refuse_citus_worker_tokens(idem_records_citus(nsp), fname);

	now = GetCurrentTimestamp();
	locked_until = idem_add_interval(now, lease, "lease", fname);
	expires = idem_expiry(fcinfo, 3, now, fname);
	fp = idem_fingerprint_digest(fcinfo, 4);

	idem_claim_params(values, nulls, scope, key, fp, now, expires);
	values[5] = TimestampTzGetDatum(locked_until);
	values[6] = IntervalPGetDatum(lease);

	idem_spi_connect();

	if (idem_claim_spi(&begin_plan, nsp, scope, key, values, nulls, now, fp,
					   fname, &rec) == IDEM_CLAIM_ACQUIRED)
	{
		outcome = "acquired";
		token = idem_spi_read(SPI_tuptable, 0, 1, INT8OID, "token", &token_null);
	}
	else if (strcmp(rec.status, IDEM_STATUS_IN_PROGRESS) == 0)
		outcome = "in_progress";
	else
	{
		/* failed, or completed (or claimed by idem_claim): replay the result */
		outcome = strcmp(rec.status, IDEM_STATUS_FAILED) == 0 ? "failed" : "completed";
		result = idem_spi_read(SPI_tuptable, 0, 6, JSONBOID, "result", &result_null);
		if (!result_null)
			result = SPI_datumTransfer(result, false, -1);
	}

	SPI_finish();

	out[0] = CStringGetTextDatum(outcome);
	outnull[0] = false;
	out[1] = token;
	outnull[1] = token_null;
	out[2] = result;
	outnull[2] = result_null;

	tupdesc = BlessTupleDesc(tupdesc);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, out, outnull)));
}

/*
 * idem_heartbeat(scope text, key text, token bigint,
 *                lease interval DEFAULT NULL) RETURNS timestamptz
 *
 * Extend the lease to now + lease (NULL: the length last given) and
 * return the new locked_until.  Fails with 22004 (NULL scope, key or
 * token), 22023/22001 (bad key or scope, lease not positive), 25006
 * (read-only), ID003 (lease lost: the token is no longer current).
 */
Datum
idem_heartbeat(PG_FUNCTION_ARGS)
{
	const char *fname = "idem_heartbeat";
	text	   *scope = idem_arg_scope(fcinfo, 0, fname);
	text	   *key = idem_arg_key(fcinfo, 1, fname);
	int64		token = arg_token(fcinfo, 2, fname);
	Oid			nsp = idem_extension_schema(fcinfo);
	TimestampTz now;
	Datum		values[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', ' '};
	Datum		d;
	TimestampTz until;
	bool		isnull;

	idem_check_writable(fname);
	now = GetCurrentTimestamp();

	lease_params(values, scope, key, token, now);
	if (PG_ARGISNULL(3))
	{
		values[4] = (Datum) 0;
		nulls[4] = 'n';
	}
	else
	{
		Interval   *lease = PG_GETARG_INTERVAL_P(3);

		(void) idem_add_interval(now, lease, "lease", fname);
		values[4] = IntervalPGetDatum(lease);
	}

	idem_spi_connect();
	if (idem_query_exec(&q_heartbeat, nsp, values, nulls, false, 0) == 0)
		lease_lost(nsp, fname, scope, key, token, now, !PG_ARGISNULL(3));
	/* NULL only if a trigger made it so: then what the row holds. */
	d = idem_spi_read(SPI_tuptable, 0, 1, TIMESTAMPTZOID, "locked_until", &isnull);
	until = isnull ? 0 : DatumGetTimestampTz(d);
	SPI_finish();

	if (isnull)
		PG_RETURN_NULL();
	PG_RETURN_TIMESTAMPTZ(until);
}

/*
 * The body of idem_finish (fail false) and idem_fail (fail true): settle
 * the record of (scope, key) whose lease token holds, with its result
 * (argument 3, NULL allowed), and for idem_fail whether the failure is
 * retryable (argument 4) under idempotency.max_attempts.  Counted as
 * completed or failed.  Errors as both functions say.
 */
static void
lease_settle(FunctionCallInfo fcinfo, const char *fname, bool fail)
{
	text	   *scope = idem_arg_scope(fcinfo, 0, fname);
	text	   *key = idem_arg_key(fcinfo, 1, fname);
	int64		token = arg_token(fcinfo, 2, fname);
	Oid			nsp = idem_extension_schema(fcinfo);
	TimestampTz now;
	Datum		values[7];
	char		nulls[7] = {' ', ' ', ' ', ' ', ' ', ' ', ' '};

	if (fail && PG_ARGISNULL(4))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s: retryable must not be null", fname)));

	idem_check_writable(fname);
	now = GetCurrentTimestamp();

	lease_params(values, scope, key, token, now);
	if (PG_ARGISNULL(3))
	{
		values[4] = (Datum) 0;
		nulls[4] = 'n';
	}
	else
		values[4] = PointerGetDatum(PG_GETARG_JSONB_P(3));
	if (fail)
	{
		values[5] = BoolGetDatum(PG_GETARG_BOOL(4));
		values[6] = Int32GetDatum(max_attempts);
	}

	idem_spi_connect();
	if (idem_query_exec(fail ? &q_fail : &q_finish, nsp, values, nulls, false, 0) == 0)
		lease_lost(nsp, fname, scope, key, token, now, true);
	idem_stats_count(scope, fail ? IDEM_STAT_FAILED : IDEM_STAT_COMPLETED);
	SPI_finish();
}

/*
 * idem_finish(scope text, key text, token bigint, result jsonb DEFAULT NULL)
 *   RETURNS void
 *
 * Mark the leased record completed and store result for replay.  Fails
 * with 22004/22023/22001 (bad arguments), 25006 (read-only), ID003 (lease
 * lost).
 */
Datum
idem_finish(PG_FUNCTION_ARGS)
{
	lease_settle(fcinfo, "idem_finish", false);
	PG_RETURN_VOID();
}

/*
 * idem_fail(scope text, key text, token bigint, error jsonb DEFAULT NULL,
 *           retryable boolean DEFAULT true) RETURNS void
 *
 * End the lease with a failure.  Retryable: the key is free for the next
 * idem_begin or idem_claim (status 'retryable'), unless
 * idempotency.max_attempts is set and reached, when the record becomes
 * 'failed'.  Not retryable: status 'failed' with the error kept for
 * replay.  Fails with 22004 (NULL scope, key, token or retryable),
 * 22023/22001, 25006 (read-only), ID003 (lease lost).
 */
Datum
idem_fail(PG_FUNCTION_ARGS)
{
	lease_settle(fcinfo, "idem_fail", true);
	PG_RETURN_VOID();
}

/*
 * The checks of idem_await's timeout (22004 NULL) and isolation level
 * (25000 under REPEATABLE READ or SERIALIZABLE: the snapshot would never
 * show a change), and the deadline: now + timeout.
 */
static TimestampTz
await_deadline(FunctionCallInfo fcinfo, const char *fname)
{
	Interval   *timeout;
	TimestampTz start;

	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s: timeout must not be null", fname)));

	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
				 errmsg("%s: cannot wait in a REPEATABLE READ or SERIALIZABLE transaction", fname),
				 errdetail("The transaction snapshot would never show the record change."),
				 errhint("Call idem_await in autocommit or in a READ COMMITTED transaction.")));

	timeout = PG_GETARG_INTERVAL_P(2);
	start = GetCurrentTimestamp();
	if (timeout->month == 0 && timeout->day == 0 && timeout->time == 0)
		return start;
	return idem_add_interval(start, timeout, "timeout", fname);
}

/*
 * One look of idem_await at the record of (values[0], values[1]) at now,
 * allocating in round (reset first): true when the wait is over (no
 * record: *isnull; a record no longer leased, or the deadline reached:
 * *result, copied out of SPI), false to wait on, *lease_end then being
 * the lease's end.
 */
static bool
await_look(Oid nsp, Datum *values, TimestampTz now, TimestampTz deadline,
		   MemoryContext round, TimestampTz *lease_end, Datum *result,
		   bool *isnull)
{
	bool		snull;
	char	   *status;
	Datum		d;
	MemoryContext old;
	bool		done;

	MemoryContextReset(round);
	old = MemoryContextSwitchTo(round);

	values[2] = TimestampTzGetDatum(now);
	if (idem_query_exec(&q_await_read, nsp, values, NULL, false, 1) == 0)
	{
		MemoryContextSwitchTo(old);
		*isnull = true;
		return true;
	}

	status = idem_spi_read_cstring(SPI_tuptable, 0, 2, "status");
	d = idem_spi_read(SPI_tuptable, 0, 3, TIMESTAMPTZOID, "locked_until", &snull);
	*lease_end = snull ? 0 : DatumGetTimestampTz(d);
	done = strcmp(status, IDEM_STATUS_IN_PROGRESS) != 0 || snull ||
		*lease_end <= now || now >= deadline;
	MemoryContextSwitchTo(old);
	if (done)
	{
		/* ROW(...)::idem_record: the statement fixes its type. */
		d = idem_spi_read(SPI_tuptable, 0, 1, InvalidOid, NULL, isnull);
		*result = SPI_datumTransfer(d, false, -1);
	}
	return done;
}

/*
 * idem_await(scope text, key text, timeout interval DEFAULT '30 seconds')
 *   RETURNS idem_record
 *
 * Wait, holding no lock, until the record is no longer in progress, its
 * lease runs out, or timeout passes; return the record as it then stands
 * (NULL when there is no live record).  Needs READ COMMITTED, where each
 * look takes a fresh snapshot.  Fails with 22004/22023/22001 (bad
 * arguments; timeout must not be negative), 25000 (REPEATABLE READ or
 * SERIALIZABLE), 55000 (a record of an idem_records whose columns a DBA
 * changed: spi_read.c), 57014 (statement_timeout or cancel).
 */
Datum
idem_await(PG_FUNCTION_ARGS)
{
	const char *fname = "idem_await";
	text	   *scope = idem_arg_scope(fcinfo, 0, fname);
	text	   *key = idem_arg_key(fcinfo, 1, fname);
	Oid			nsp = idem_extension_schema(fcinfo);
	TimestampTz deadline = await_deadline(fcinfo, fname);
	Datum		values[3];
	Datum		result = (Datum) 0;
	bool		isnull = true;
	long		nap_ms = 1;
	MemoryContext round;

	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(key);

	idem_spi_connect();

	/* What one look allocates is freed before the next. */
	round = AllocSetContextCreate(CurrentMemoryContext, "idem_await look",
								  ALLOCSET_SMALL_SIZES);
	for (;;)
	{
		TimestampTz now = GetCurrentTimestamp();
		TimestampTz lease_end;
		long		wait_ms;

		CHECK_FOR_INTERRUPTS();
		if (await_look(nsp, values, now, deadline, round, &lease_end,
					   &result, &isnull))
			break;
		SPI_freetuptable(SPI_tuptable);

		/*
		 * Sleep until the next look: 1 ms at first, doubling up to 100 ms,
		 * never past the deadline or the lease's end.  A set latch (a
		 * NOTIFY, say) only makes the look come earlier.
		 */
		wait_ms = Min(nap_ms, (long) ((Min(deadline, lease_end) - now) / 1000) + 1);
		nap_ms = Min(nap_ms * 2, AWAIT_MAX_NAP_MS);

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 wait_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
	MemoryContextDelete(round);

	SPI_finish();

	if (isnull)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(result);
}

/* The F_at twins of this file (IDEM_SHARD_TWIN, idempotency.h). */
IDEM_SHARD_TWIN(idem_begin);
IDEM_SHARD_TWIN(idem_heartbeat);
IDEM_SHARD_TWIN(idem_finish);
IDEM_SHARD_TWIN(idem_fail);
IDEM_SHARD_TWIN(idem_await);
