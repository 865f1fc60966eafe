/*-------------------------------------------------------------------------
 *
 * lease_await.c
 *	  idem_await, and the check that a lease's owner session still exists
 *	  (idem_session_alive), which idem_begin (lease_begin.c) shares.
 *
 *	  idem_await holds no lock while it waits: it polls the record with a
 *	  fresh snapshot per look (READ COMMITTED), sleeping on its latch, and
 *	  stays interruptible (statement_timeout, cancel, postmaster death).
 *	  A look ends the wait when the record is no longer in progress, its
 *	  lease has run out, or the lease is bound to a session that is gone.
 *
 *	  A session is named by its backend's pid and start time
 *	  (MyProcPid, MyStartTimestamp), which idem_begin stores in
 *	  owner_pid and owner_start of a bound lease.  It is alive while the
 *	  shared backend status array (utils/backend_status.h) holds an entry
 *	  with both: a later backend that reuses the pid has another start
 *	  time, and a server restart (crash or not) empties the array.  No
 *	  role can write that array, so none can make a live owner look gone;
 *	  a role that may UPDATE idem_records could end any lease already.
 *	  Reading it takes this backend's snapshot of the array afresh
 *	  (pgstat_clear_backend_activity_snapshot): the caller's view of
 *	  pg_stat_activity in the same transaction is refreshed with it.
 *
 *	  Memory: each look allocates in a context reset before the next;
 *	  the result is copied out with SPI_datumTransfer.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/backend_status.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "idempotency.h"
#include "spi_read.h"

PG_FUNCTION_INFO_V1(idem_await);

/* idem_await's longest sleep between two looks at the record. */
#define AWAIT_MAX_NAP_MS 100

static IdemQuery q_await_read = {
	"SELECT ROW(r.scope, r.key, r.status, r.fingerprint, r.result,"
	"           r.created_at, r.updated_at, r.expires_at,"
	"           r.locked_until, r.token, r.attempts, r.owner_pid, r.owner_start,"
	"           r.effect_started_at, r.effect_unknown_attempt)::@extschema@.idem_record,"
	"       r.status, r.locked_until, r.owner_pid, r.owner_start"
	" FROM @extschema@.idem_records r"
	" WHERE r.scope OPERATOR(pg_catalog.=) $1 AND r.key OPERATOR(pg_catalog.=) $2"
	" AND r.expires_at OPERATOR(pg_catalog.>) $3",
	3, {TEXTOID, TEXTOID, TIMESTAMPTZOID},
	IDEM_REWRITTEN_PER_SHARD
};

/* The same on a catalog not yet updated to 0.6.0 (no owner, no mark). */
static IdemQuery q_await_read_legacy = {
	"SELECT ROW(r.scope, r.key, r.status, r.fingerprint, r.result,"
	"           r.created_at, r.updated_at, r.expires_at,"
	"           r.locked_until, r.token, r.attempts)::@extschema@.idem_record,"
	"       r.status, r.locked_until, NULL::pg_catalog.int4, NULL::pg_catalog.timestamptz"
	" FROM @extschema@.idem_records r"
	" WHERE r.scope OPERATOR(pg_catalog.=) $1 AND r.key OPERATOR(pg_catalog.=) $2"
	" AND r.expires_at OPERATOR(pg_catalog.>) $3",
	3, {TEXTOID, TEXTOID, TIMESTAMPTZOID},
	IDEM_REWRITTEN_PER_SHARD
};

/*
 * Does idem_records of schema nsp have the columns 0.6.0 added (owner_pid
 * ... effect_unknown_attempt, and idem_record with them)?  False between
 * installing this library and ALTER EXTENSION idempotency UPDATE: the
 * functions then run the statements of the catalog they find.
 */
bool
idem_records_current(Oid nsp)
{
	Oid			rel = get_relname_relid("idem_records", nsp);

	return OidIsValid(rel) &&
		get_attnum(rel, "effect_unknown_attempt") != InvalidAttrNumber;
}

/*
 * Is the session of backend pid, started at started, still there?  This
 * session always is; another one when the backend status array holds an
 * entry with its pid and start time.
 */
bool
idem_session_alive(int32 pid, TimestampTz started)
{
	int			n;
	int			i;

	if (pid == MyProcPid && started == MyStartTimestamp)
		return true;

	pgstat_clear_backend_activity_snapshot();
	n = pgstat_fetch_stat_numbackends();
	for (i = 1; i <= n; i++)
	{
		LocalPgBackendStatus *l = idem_local_beentry(i);

		if (l != NULL && l->backendStatus.st_procpid == pid &&
			l->backendStatus.st_proc_start_timestamp == started)
			return true;
	}
	return false;
}

/*
 * For await_look, in_progress with a live lease: is the lease bound to a
 * session that is gone (SPI_tuptable's row: owner_pid, owner_start)?
 */
static bool
await_owner_gone(void)
{
	bool		pid_null;
	bool		start_null;
	Datum		pid = idem_spi_read(SPI_tuptable, 0, 4, INT4OID, "owner_pid", &pid_null);
	Datum		start = idem_spi_read(SPI_tuptable, 0, 5, TIMESTAMPTZOID, "owner_start",
									  &start_null);

	return !pid_null && !start_null &&
		!idem_session_alive(DatumGetInt32(pid), DatumGetTimestampTz(start));
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
 * record: *isnull; a record no longer leased, a lease whose bound owner
 * session is gone, or the deadline reached: *result, copied out of SPI),
 * false to wait on, *lease_end then being the lease's end.
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
	if (idem_query_exec(idem_records_current(nsp) ? &q_await_read : &q_await_read_legacy,
						nsp, values, NULL, false, 1) == 0)
	{
		MemoryContextSwitchTo(old);
		*isnull = true;
		return true;
	}

	status = idem_spi_read_cstring(SPI_tuptable, 0, 2, "status");
	d = idem_spi_read(SPI_tuptable, 0, 3, TIMESTAMPTZOID, "locked_until", &snull);
	*lease_end = snull ? 0 : DatumGetTimestampTz(d);
	done = strcmp(status, IDEM_STATUS_IN_PROGRESS) != 0 || snull ||
		*lease_end <= now || now >= deadline || await_owner_gone();
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
 * lease runs out, the session a bound lease belongs to is gone, or
 * timeout passes; return the record as it then stands
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

/* The F_at twin of idem_await (IDEM_SHARD_TWIN, idempotency.h). */
IDEM_SHARD_TWIN(idem_await);
