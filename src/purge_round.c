/*-------------------------------------------------------------------------
 *
 * purge_round.c
 *	  One round of the background purge in one database, run by a purge
 *	  worker (purge_worker.c owns the processes, the slots and the warning
 *	  about a database without the extension).
 *
 *	  A round runs idem_purge(idempotency.purge_batch_size) in the
 *	  extension's schema, one batch per transaction, committed after each,
 *	  idempotency.purge_delay apart (a large backlog takes a fraction of a
 *	  core and spreads its WAL), until a batch removes fewer rows than the
 *	  batch size; then idem_outbox_purge the same way.  One LOG line per
 *	  part with its total, when not zero.  The records come first, so an
 *	  outbox that fails to purge does not stop them (their batches are
 *	  committed by then).  The SQL-level idem_purge() does not purge the
 *	  outbox: a scheduler calls both, or idem_maintain().
 *
 *	  Rules a change must keep: the worker is a superuser, so it runs only
 *	  the extension's own functions: idem_outbox_purge(int4) only when it
 *	  is a member of the extension (an extension older than 0.5.0 has none:
 *	  that part is skipped quietly), idem_maintenance only when it is the
 *	  extension's own table.  After each part the round notes there when it
 *	  ran and what it removed (0.6.0 on), as idem_maintain() does, for the
 *	  view idem_health, in one short transaction of its own.
 *
 *	  Locking and visibility: those of the two SQL functions, each batch
 *	  with a fresh snapshot; both skip rows locked by other transactions,
 *	  so a round never waits for a claim, and a claim of a key being
 *	  deleted waits only for that batch's short transaction.  Memory: every
 *	  allocation is per transaction (one batch); the statements are
 *	  prepared once per process, which ends with the round.  Settings:
 *	  idempotency.purge_batch_size and purge_delay are defined here and
 *	  re-read on SIGHUP between two batches.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/interrupt.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/snapmgr.h"

#include "idempotency.h"

static int	purge_batch_size = 10000;
static int	purge_delay = 500;		/* milliseconds between two batches */

static IdemQuery q_extension_schema = {
	"SELECT e.extnamespace FROM pg_catalog.pg_extension e"
	" WHERE e.extname OPERATOR(pg_catalog.=) 'idempotency'",
	0, {InvalidOid}
};

static IdemQuery q_purge_call = {
	"SELECT @extschema@.idem_purge($1)",
	1, {INT4OID}
};

/*
 * The oid of the extension's idem_outbox_purge(int4) in schema $1 (0.5.0
 * on), no row when it has none: that very function, a member of the
 * extension, so that a function of that name someone else created in the
 * schema is never run by the worker (a superuser).  The worker calls it by
 * this oid, not by name: an overload with more (defaulted) arguments in
 * the schema would make a call by name ambiguous, and fail every round.
 */
static IdemQuery q_outbox_function = {
	"SELECT d.objid FROM pg_catalog.pg_namespace n"
	" JOIN pg_catalog.pg_depend d"
	"   ON d.objid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure(pg_catalog.format("
	"        '%I.idem_outbox_purge(pg_catalog.int4)', n.nspname))::pg_catalog.oid"
	" JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) d.refobjid"
	" WHERE n.oid OPERATOR(pg_catalog.=) $1"
	"   AND d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass"
	"   AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass"
	"   AND d.deptype OPERATOR(pg_catalog.=) 'e'"
	"   AND e.extname OPERATOR(pg_catalog.=) 'idempotency'",
	1, {OIDOID}
};

/*
 * Whether the extension in schema $1 has the table idem_maintenance (0.6.0
 * on) as a member: a table of that name that is not the extension's is
 * never written by the worker.
 */
static IdemQuery q_maintenance_present = {
	"SELECT EXISTS (SELECT FROM pg_catalog.pg_namespace n"
	" JOIN pg_catalog.pg_depend d"
	"   ON d.objid OPERATOR(pg_catalog.=) pg_catalog.to_regclass(pg_catalog.format("
	"        '%I.idem_maintenance', n.nspname))::pg_catalog.oid"
	" JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) d.refobjid"
	" WHERE n.oid OPERATOR(pg_catalog.=) $1"
	"   AND d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass"
	"   AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass"
	"   AND d.deptype OPERATOR(pg_catalog.=) 'e'"
	"   AND e.extname OPERATOR(pg_catalog.=) 'idempotency')",
	1, {OIDOID}
};

static IdemQuery q_note = {
	"INSERT INTO @extschema@.idem_maintenance AS m (part, last_run, last_removed, run_by)"
	" VALUES ($1, pg_catalog.clock_timestamp(), $2, 'background worker')"
	" ON CONFLICT (part) DO UPDATE SET last_run = excluded.last_run,"
	" last_removed = excluded.last_removed, run_by = excluded.run_by",
	2, {TEXTOID, INT8OID}
};

/* Called from _PG_init: defines purge_batch_size and purge_delay. */
void
idem_purge_round_init(void)
{
	DefineCustomIntVariable("idempotency.purge_batch_size",
							"Expired records the background worker deletes per transaction.",
							NULL,
							&purge_batch_size,
							10000,
							1,
							INT_MAX,
							PGC_SIGHUP,
							0,
							NULL,
							NULL,
							NULL);

	DefineCustomIntVariable("idempotency.purge_delay",
							"Pause of the background purge between two batches of a round.",
							"Keeps a large backlog from taking a whole core and flooding the WAL; 0 purges batch after batch.",
							&purge_delay,
							500,
							0,
							INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL,
							NULL,
							NULL);
}

/*
 * The first column of the first row of the current SPI result, which the
 * statement makes a non-NULL value of type: anything else is a bug.
 */
static Datum
spi_first_value(Oid type, const char *what)
{
	bool		isnull;
	Datum		d;

	if (SPI_tuptable == NULL || SPI_tuptable->numvals < 1 ||
		SPI_gettypeid(SPI_tuptable->tupdesc, 1) != type)
		elog(ERROR, "idempotency purge: unexpected result of %s", what);
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	if (isnull)
		elog(ERROR, "idempotency purge: %s is null", what);
	return d;
}

/* What one batch of a round found. */
typedef enum PurgeBatch
{
	BATCH_DONE,					/* ran; *removed is its count */
	BATCH_NO_EXTENSION,			/* the extension is not installed */
	BATCH_NO_FUNCTION			/* outbox: the extension has no outbox */
} PurgeBatch;

/*
 * The outbox's batch: idem_outbox_purge(batch) of the extension in schema
 * nsp, called by oid (q_outbox_function), with search_path pinned to
 * pg_catalog, pg_temp for this transaction, so that nothing in the
 * database's or role's search_path is resolved by the function as a
 * superuser.  BATCH_NO_FUNCTION when the extension has no outbox.
 */
static PurgeBatch
outbox_purge_call(Oid nsp, int batch, int64 *removed)
{
	Datum		values[1];
	Oid			fn;

	values[0] = ObjectIdGetDatum(nsp);
	if (idem_query_exec(&q_outbox_function, PG_CATALOG_NAMESPACE,
						values, NULL, true, 1) != 1)
		return BATCH_NO_FUNCTION;
	fn = DatumGetObjectId(spi_first_value(OIDOID, "the outbox lookup"));
	(void) set_config_option("search_path", "pg_catalog, pg_temp",
							 PGC_SUSET, PGC_S_SESSION, GUC_ACTION_LOCAL,
							 true, 0, false);
	*removed = DatumGetInt64(OidFunctionCall1(fn, Int32GetDatum(batch)));
	return BATCH_DONE;
}

/*
 * One batch in its own transaction: idem_purge(batch), or with outbox
 * idem_outbox_purge(batch), in the schema of the extension.
 */
static PurgeBatch
purge_batch(bool outbox, int batch, int64 *removed)
{
	PurgeBatch	result = BATCH_NO_EXTENSION;
	Oid			nsp = InvalidOid;
	const char *fname = outbox ? "idem_outbox_purge" : "idem_purge";

	*removed = 0;
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	idem_spi_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING,
						   psprintf("SELECT %s(%d)", fname, batch));

	/*
	 * None of these statements reads idem_records or the outbox's tables:
	 * pg_extension.extnamespace, the oid looked up and both functions' results are
	 * NOT NULL, of the types asked for.
	 */
	if (idem_query_exec(&q_extension_schema, PG_CATALOG_NAMESPACE,
						NULL, NULL, true, 1) == 1)
		nsp = DatumGetObjectId(spi_first_value(OIDOID, "extnamespace"));
	if (OidIsValid(nsp))
	{
		Datum		values[1];

		result = BATCH_DONE;
		if (outbox)
			result = outbox_purge_call(nsp, batch, removed);
		else
		{
			values[0] = Int32GetDatum(batch);
			if (idem_query_exec(&q_purge_call, nsp, values, NULL, false, 1) != 1)
				elog(ERROR, "%s returned no row", fname);
			*removed = DatumGetInt64(spi_first_value(INT8OID, fname));
		}
	}

	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
	return result;
}

/*
 * Note in idem_maintenance that a part of the round ran and removed total
 * rows, in a transaction of its own; nothing when the extension has no
 * such table (before 0.6.0).
 */
static void
note_part(bool outbox, int64 total)
{
	Oid			nsp = InvalidOid;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	idem_spi_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
	if (idem_query_exec(&q_extension_schema, PG_CATALOG_NAMESPACE,
						NULL, NULL, true, 1) == 1)
		nsp = DatumGetObjectId(spi_first_value(OIDOID, "extnamespace"));
	if (OidIsValid(nsp))
	{
		Datum		values[2];

		values[0] = ObjectIdGetDatum(nsp);
		if (idem_query_exec(&q_maintenance_present, PG_CATALOG_NAMESPACE,
							values, NULL, true, 1) == 1 &&
			DatumGetBool(spi_first_value(BOOLOID, "the idem_maintenance lookup")))
		{
			values[0] = CStringGetTextDatum(outbox ? "outbox" : "records");
			values[1] = Int64GetDatum(total);
			(void) idem_query_exec(&q_note, nsp, values, NULL, false, 0);
		}
	}
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
}

/*
 * Batches of idem_purge, or with outbox of idem_outbox_purge, until one
 * removes fewer than the batch size, idempotency.purge_delay apart; *total
 * and *batches count what ran.  Returns the last batch's PurgeBatch.
 */
static PurgeBatch
purge_phase(bool outbox, int64 *total, int *batches)
{
	*total = 0;
	*batches = 0;
	for (;;)
	{
		int			batch;
		int64		removed;
		PurgeBatch	r;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		batch = purge_batch_size;

		r = purge_batch(outbox, batch, &removed);
		if (r != BATCH_DONE)
			return r;

		(*batches)++;
		*total += removed;
		if (removed < batch)
			return BATCH_DONE;

		/* Throttle: the next batch after idempotency.purge_delay. */
		if (purge_delay > 0)
		{
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 purge_delay, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
		}
	}
}

/*
 * One round in the current database (the database dbname of a purge
 * worker, purge_worker.c); see the header comment.  Returns false, having done
 * nothing, when the extension is not installed there.
 */
bool
idem_purge_round(const char *dbname)
{
	int64		total;
	int			batches;

	if (purge_phase(false, &total, &batches) == BATCH_NO_EXTENSION)
		return false;
	note_part(false, total);

	if (total > 0)
		ereport(LOG,
				(errmsg_plural("idempotency purge: removed " INT64_FORMAT " expired records in database \"%s\" (%d transaction)",
							   "idempotency purge: removed " INT64_FORMAT " expired records in database \"%s\" (%d transactions)",
							   batches, total, dbname, batches)));

	/* The outbox (0.5.0 on): acknowledged messages past their retention. */
	if (purge_phase(true, &total, &batches) == BATCH_DONE)
	{
		note_part(true, total);
		if (total > 0)
			ereport(LOG,
					(errmsg_plural("idempotency purge: removed " INT64_FORMAT " outbox messages in database \"%s\" (%d transaction)",
								   "idempotency purge: removed " INT64_FORMAT " outbox messages in database \"%s\" (%d transactions)",
								   batches, total, dbname, batches)));
	}
	return true;
}
