/*-------------------------------------------------------------------------
 *
 * lease.c
 *	  Two-phase records for work with outside side effects: idem_heartbeat,
 *	  idem_effect_started, idem_finish and idem_fail here; idem_begin in
 *	  lease_begin.c, idem_await and the session check in lease_await.c.
 *
 *	  Model: idem_begin, committed on its own, records the key as
 *	  'in_progress' with a lease (locked_until) and a fencing token from
 *	  idem_token_seq, greater than any issued before for any key, across
 *	  expiry, purge and dump/restore.  Only the holder of the current token
 *	  may heartbeat, finish or fail the record: each is one UPDATE whose
 *	  WHERE names the token, so a stale worker whose lease was taken over
 *	  changes nothing and gets ID003 (lease lost).
 *
 *	  Locking and visibility: the key's primary key decides, as for
 *	  idem_claim; takeovers re-check their condition on the newest row
 *	  version, so of two racing workers exactly one acquires.
 *
 *	  Sessions (bind_to_session): the record names its owner by owner_pid
 *	  and owner_start, which no later backend shares and a restart ends.
 *	  A live bound lease whose owner is gone is taken over at once, by the
 *	  UPDATE whose WHERE names that dead owner; an unbound lease, or one
 *	  whose owner lives, is taken over by time only.
 *
 *	  The unknown outcome: idem_effect_started stamps effect_started_at on
 *	  the current attempt; a takeover of a lease so marked records it in
 *	  effect_unknown_attempt (kept until the record expires), and
 *	  idem_begin tells every later owner effect_unknown.
 *
 *	  idempotency.max_attempts (retryable failures before a record is
 *	  failed for good) is defined here, at every load.  Memory: the
 *	  caller's context or SPI's, which SPI_finish releases; results are
 *	  copied out with SPI_datumTransfer.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "idempotency.h"
#include "spi_read.h"

PG_FUNCTION_INFO_V1(idem_heartbeat);
PG_FUNCTION_INFO_V1(idem_finish);
PG_FUNCTION_INFO_V1(idem_fail);
PG_FUNCTION_INFO_V1(idem_effect_started);

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

/* Shared by every token-checked UPDATE: the caller still holds the lease. */
#define HOLDS_LEASE_SQL \
	" WHERE r.scope OPERATOR(pg_catalog.=) $1 AND r.key OPERATOR(pg_catalog.=) $2" \
	" AND r.status OPERATOR(pg_catalog.=) 'in_progress'" \
	" AND r.token OPERATOR(pg_catalog.=) $3" \
	" AND r.expires_at OPERATOR(pg_catalog.>) $4"

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

static IdemQuery q_effect_started = {
	"UPDATE @extschema@.idem_records r"
	" SET effect_started_at = COALESCE(r.effect_started_at, $4), updated_at = $4"
	HOLDS_LEASE_SQL
	" RETURNING r.effect_started_at, r.owner_pid, r.owner_start",
	4, {TEXTOID, TEXTOID, INT8OID, TIMESTAMPTZOID},
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
 * Refuse (55000) to mark the lease of (scope, key) from a session other
 * than the one it is bound to (SPI_tuptable's row: effect_started_at,
 * owner_pid, owner_start): that session's end would let the lease be
 * taken over while this worker performs the effect.
 */
static void
effect_check_owner(const char *fname, text *scope, text *key)
{
	bool		pid_null;
	bool		start_null;
	Datum		pid = idem_spi_read(SPI_tuptable, 0, 2, INT4OID, "owner_pid", &pid_null);
	Datum		start = idem_spi_read(SPI_tuptable, 0, 3, TIMESTAMPTZOID, "owner_start",
									  &start_null);

	if (pid_null || start_null ||
		(DatumGetInt32(pid) == MyProcPid &&
		 DatumGetTimestampTz(start) == MyStartTimestamp))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("%s: the lease is bound to another session", fname),
			 errdetail("Key \"%s\" in scope \"%s\" was begun with bind_to_session by the session of process %d started at %s; this is process %d.",
					   text_to_cstring(key), text_to_cstring(scope),
					   DatumGetInt32(pid),
					   timestamptz_to_str(DatumGetTimestampTz(start)), MyProcPid),
			 errhint("Work on a bound lease in the session that began it; a worker that reconnects, or runs behind a transaction pooler, begins without bind_to_session.")));
}

/*
 * idem_effect_started(scope text, key text, token bigint) RETURNS timestamptz
 *
 * Mark that the worker holding the lease is about to perform its outside
 * effect, and return the mark's time (the first mark of this attempt,
 * when called again).  Committed before the effect, it makes a takeover
 * of this attempt tell the next owner that the effect is unknown.  Fails
 * with 22004/22023/22001 (bad arguments), 25006 (read-only), ID002/ID003
 * (no record, lease lost), 55000 (a lease bound to another session).
 */
Datum
idem_effect_started(PG_FUNCTION_ARGS)
{
	const char *fname = "idem_effect_started";
	text	   *scope = idem_arg_scope(fcinfo, 0, fname);
	text	   *key = idem_arg_key(fcinfo, 1, fname);
	int64		token = arg_token(fcinfo, 2, fname);
	Oid			nsp = idem_extension_schema(fcinfo);
	TimestampTz now;
	TimestampTz mark;
	Datum		values[4];

	idem_check_writable(fname);
	now = GetCurrentTimestamp();
	lease_params(values, scope, key, token, now);

	idem_spi_connect();
	if (idem_query_exec(&q_effect_started, nsp, values, NULL, false, 0) == 0)
		lease_lost(nsp, fname, scope, key, token, now, true);
	effect_check_owner(fname, scope, key);
	mark = DatumGetTimestampTz(idem_spi_read_required(SPI_tuptable, 0, 1, TIMESTAMPTZOID,
													  "effect_started_at"));
	SPI_finish();
	PG_RETURN_TIMESTAMPTZ(mark);
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

/* The F_at twins of this file (IDEM_SHARD_TWIN, idempotency.h). */
IDEM_SHARD_TWIN(idem_heartbeat);
IDEM_SHARD_TWIN(idem_finish);
IDEM_SHARD_TWIN(idem_fail);
IDEM_SHARD_TWIN(idem_effect_started);
