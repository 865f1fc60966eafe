/*-------------------------------------------------------------------------
 *
 * purge_worker.c
 *	  Background purge of expired records in the databases listed in
 *	  idempotency.purge_databases: a launcher ("idempotency purge
 *	  launcher", a static background worker connected to no database,
 *	  registered by _PG_init when preloaded and the list is not empty)
 *	  and, every purge_naptime, one short-lived "idempotency purge worker"
 *	  per listed database that exists, accepts connections and has none
 *	  running.  That worker connects, runs one round (purge_round.c:
 *	  records first, then the outbox, a transaction per batch) and exits.
 *
 *	  Why not a static worker per database: one whose database is missing
 *	  is restarted forever (FATAL), and one never leaving its database
 *	  blocks DROP DATABASE, RENAME and TEMPLATE.  A missing or closed
 *	  database, or one without the extension, gets one WARNING, then quiet
 *	  looks ("warned" lives in shared memory: each round is a process).
 *
 *	  Errors: an ERROR in a worker is FATAL; it rolls back the batch and
 *	  ends the round, and the next starts a naptime later: a persistent
 *	  failure is reported once per naptime, never in a tight loop, never
 *	  restarting the server.  A dead launcher is restarted after
 *	  LAUNCHER_RESTART_SECONDS.
 *
 *	  Uniqueness: shared memory holds one slot per listed database with
 *	  its worker's pid (0: none), claimed by compare-and-swap before
 *	  connecting and freed on_shmem_exit; a worker finding its slot taken
 *	  exits.  The launcher starts one only for a free slot and when its
 *	  last one has stopped, so a restarted launcher starts no second one.
 *
 *	  Settings and signals: purge_databases is fixed at start; naptime is
 *	  re-read on SIGHUP (0 pauses).  SIGTERM is die(): both processes end
 *	  at the next CHECK_FOR_INTERRUPTS; every wait is WaitLatch with
 *	  WL_EXIT_ON_PM_DEATH.  purge_databases set without preloading starts
 *	  nothing and says so with a WARNING at load; idem_purge_worker() tells
 *	  a session the state.  Memory: the launcher's list and handles in
 *	  TopMemoryContext, a round's work in a context reset after each.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "port/atomics.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/varlena.h"

#include "idempotency.h"

PGDLLEXPORT void idem_purge_launcher_main(Datum main_arg);
PGDLLEXPORT void idem_purge_worker_main(Datum main_arg);

PG_FUNCTION_INFO_V1(idem_purge_worker);

#define LAUNCHER_TYPE	"idempotency purge launcher"
#define WORKER_TYPE		"idempotency purge worker"
#define LAUNCHER_RESTART_SECONDS 10

/* GUCs */
static char *purge_databases = NULL;
static int	purge_naptime = 60;		/* seconds; 0 = off */

/* Whether the library was loaded by shared_preload_libraries. */
static bool purge_preloaded = false;

/* Shared memory: one slot per listed database, in list order. */
typedef struct PurgeSlot
{
	pg_atomic_uint32 pid;		/* running purge worker, or 0 */
	bool		warned_no_extension;	/* written by the slot's holder only */
} PurgeSlot;

typedef struct PurgeShared
{
	int			nslots;
	PurgeSlot	slots[FLEXIBLE_ARRAY_MEMBER];
} PurgeShared;

static PurgeShared *purge_shared = NULL;
static int	purge_nslots = 0;	/* set in _PG_init when preloading */

static idem_shmem_request_fn prev_shmem_request = NULL;
static shmem_startup_hook_type prev_shmem_startup = NULL;

/* What the launcher last reported about a database (warn once each). */
typedef enum PurgeProblem
{
	PROBLEM_NONE,
	PROBLEM_MISSING,
	PROBLEM_NO_CONNECTIONS,
	PROBLEM_NO_WORKER_SLOT
} PurgeProblem;

typedef enum DatabaseState
{
	DATABASE_MISSING,
	DATABASE_NO_CONNECTIONS,
	DATABASE_OK
} DatabaseState;

/*
 * The list of idempotency.purge_databases, without repetitions, as a List
 * of names allocated in the current memory context; NULL (and *ok false)
 * when the syntax is invalid.
 */
static List *
database_list(const char *value, bool *ok)
{
	char	   *raw = pstrdup(value);
	List	   *names;
	List	   *result = NIL;
	ListCell   *lc;

	*ok = SplitIdentifierString(raw, ',', &names);
	if (!*ok)
		return NIL;
	foreach(lc, names)
	{
		char	   *name = (char *) lfirst(lc);
		ListCell   *lc2;
		bool		dup = false;

		foreach(lc2, result)
			dup |= (strcmp((char *) lfirst(lc2), name) == 0);
		if (!dup)
			result = lappend(result, name);
	}
	list_free(names);
	return result;
}

static bool
check_purge_databases(char **newval, void **extra, GucSource source)
{
	bool		ok;

	(void) database_list(*newval, &ok);
	if (!ok)
	{
		GUC_check_errdetail("List syntax is invalid.");
		GUC_check_errhint("Give a comma-separated list of database names; double-quote names with upper-case letters, commas or spaces.");
	}
	return ok;
}

static Size
purge_shmem_size(void)
{
	return add_size(offsetof(PurgeShared, slots),
					mul_size(purge_nslots, sizeof(PurgeSlot)));
}

static void
purge_shmem_request(void)
{
	if (prev_shmem_request)
		prev_shmem_request();
	RequestAddinShmemSpace(purge_shmem_size());
}

static void
purge_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup)
		prev_shmem_startup();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	purge_shared = ShmemInitStruct("idempotency purge", purge_shmem_size(), &found);
	if (!found)
	{
		int			i;

		purge_shared->nslots = purge_nslots;
		for (i = 0; i < purge_nslots; i++)
		{
			pg_atomic_init_u32(&purge_shared->slots[i].pid, 0);
			purge_shared->slots[i].warned_no_extension = false;
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

static void register_launcher(void);

/*
 * Called from _PG_init: defines idempotency.purge_naptime and
 * purge_databases (purge_round.c the other two); when the library is
 * being preloaded and purge_databases is not empty, also requests the
 * slots in shared memory and registers the launcher.
 */
void
idem_worker_init(void)
{
	DefineCustomIntVariable("idempotency.purge_naptime",
							"Time between two purge rounds of the background worker.",
							"0 turns the background purge off.",
							&purge_naptime,
							60,
							0,
							INT_MAX / 1000,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL,
							NULL,
							NULL);

	/*
	 * A PGC_POSTMASTER setting can only be defined while preloading.  Loaded
	 * later, the library defines it as PGC_SIGHUP, which nothing reads (no
	 * launcher runs): so that SET is refused as for a setting of
	 * postgresql.conf and ALTER SYSTEM accepts it, instead of both calling
	 * it unknown under the reserved prefix.
	 */
	DefineCustomStringVariable("idempotency.purge_databases",
							   "Databases whose expired idempotency records a background worker purges.",
							   "A comma-separated list of database names; empty (the default) disables the worker. "
							   "Read at server start, with idempotency in shared_preload_libraries.",
							   &purge_databases,
							   "",
							   process_shared_preload_libraries_in_progress ?
							   PGC_POSTMASTER : PGC_SIGHUP,
							   0,
							   check_purge_databases,
							   NULL,
							   NULL);

	if (process_shared_preload_libraries_in_progress)
	{
		purge_preloaded = true;
		register_launcher();
	}
	else if (purge_databases != NULL && purge_databases[0] != '\0')
		ereport(WARNING,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("idempotency.purge_databases is set, but idempotency is not in shared_preload_libraries: no background purge runs"),
				 errdetail("The purge worker starts only with the library loaded at server start; until then expired records and outbox messages are not removed."),
				 errhint("Add idempotency to shared_preload_libraries and restart the server, or schedule SELECT idem_maintain() (with pg_cron); the view idem_health shows what purges each database.")));
}

/*
 * idem_purge_worker(): whether a background worker purges the current
 * database: 'on' (preloaded, listed in purge_databases, purge_naptime
 * above 0), 'paused' (listed, naptime 0), 'off' (preloaded, not listed)
 * or 'not preloaded' (the library was loaded after startup: no worker
 * runs, whatever purge_databases says).  A list changed since startup
 * counts only after a restart, as for the launcher.
 */
Datum
idem_purge_worker(PG_FUNCTION_ARGS)
{
	const char *state = "off";

	if (!purge_preloaded)
		state = "not preloaded";
	else if (purge_shared != NULL)
	{
		char	   *dbname = get_database_name(MyDatabaseId);
		bool		ok;
		List	   *names = database_list(purge_databases, &ok);
		ListCell   *lc;

		foreach(lc, names)
		{
			if (dbname != NULL && strcmp((char *) lfirst(lc), dbname) == 0)
				state = purge_naptime > 0 ? "on" : "paused";
		}
	}
	PG_RETURN_TEXT_P(cstring_to_text(state));
}

/*
 * Preloading, with databases to purge: request the shared memory of the
 * workers' slots and register the launcher.
 */
static void
register_launcher(void)
{
	BackgroundWorker w;
	List	   *names;
	bool		ok;

	names = database_list(purge_databases, &ok);
	if (!ok || names == NIL)
		return;
	purge_nslots = list_length(names);

	idem_shmem_request_install(purge_shmem_request, &prev_shmem_request);
	prev_shmem_startup = shmem_startup_hook;
	shmem_startup_hook = purge_shmem_startup;

	memset(&w, 0, sizeof(w));
	w.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	w.bgw_start_time = BgWorkerStart_RecoveryFinished;
	w.bgw_restart_time = LAUNCHER_RESTART_SECONDS;
	strlcpy(w.bgw_library_name, "idempotency", BGW_MAXLEN);
	strlcpy(w.bgw_function_name, "idem_purge_launcher_main", BGW_MAXLEN);
	strlcpy(w.bgw_name, LAUNCHER_TYPE, BGW_MAXLEN);
	strlcpy(w.bgw_type, LAUNCHER_TYPE, BGW_MAXLEN);
	w.bgw_main_arg = (Datum) 0;
	w.bgw_notify_pid = 0;
	RegisterBackgroundWorker(&w);
}

/*
 * The state of each listed database, from a scan of pg_database (a shared
 * catalog, readable without a database connection).
 */
static void
database_states(List *names, DatabaseState *state)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tup;
	int			i;

	for (i = 0; i < list_length(names); i++)
		state[i] = DATABASE_MISSING;

	StartTransactionCommand();
	(void) GetTransactionSnapshot();
	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while (HeapTupleIsValid(tup = heap_getnext(scan, ForwardScanDirection)))
	{
		Form_pg_database db = (Form_pg_database) GETSTRUCT(tup);
		ListCell   *lc;

		i = 0;
		foreach(lc, names)
		{
			if (strcmp(NameStr(db->datname), (char *) lfirst(lc)) == 0)
				state[i] = db->datallowconn ? DATABASE_OK : DATABASE_NO_CONNECTIONS;
			i++;
		}
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	CommitTransactionCommand();

	MemoryContextSwitchTo(oldcxt);
}

/* Start a round in database number slotno; false when no slot was free. */
static bool
start_purge_worker(int slotno, const char *dbname, BackgroundWorkerHandle **handle)
{
	BackgroundWorker w;
	MemoryContext oldcxt;
	bool		ok;

	memset(&w, 0, sizeof(w));
	w.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	w.bgw_start_time = BgWorkerStart_RecoveryFinished;
	w.bgw_restart_time = BGW_NEVER_RESTART;
	strlcpy(w.bgw_library_name, MyBgworkerEntry->bgw_library_name, BGW_MAXLEN);
	strlcpy(w.bgw_function_name, "idem_purge_worker_main", BGW_MAXLEN);
	snprintf(w.bgw_name, BGW_MAXLEN, WORKER_TYPE " for database %s", dbname);
	strlcpy(w.bgw_type, WORKER_TYPE, BGW_MAXLEN);
	w.bgw_main_arg = Int32GetDatum(slotno);
	strlcpy(w.bgw_extra, dbname, BGW_EXTRALEN);
	w.bgw_notify_pid = MyProcPid;

	/* The handle outlives this round of the launcher. */
	oldcxt = MemoryContextSwitchTo(TopMemoryContext);
	ok = RegisterDynamicBackgroundWorker(&w, handle);
	MemoryContextSwitchTo(oldcxt);
	if (!ok)
		*handle = NULL;
	return ok;
}

/* One look at every listed database: start the rounds that are due. */
static void
launcher_round(List *names, BackgroundWorkerHandle **handles,
			   PurgeProblem *reported)
{
	DatabaseState *state = palloc(list_length(names) * sizeof(DatabaseState));
	ListCell   *lc;
	int			i;

	database_states(names, state);

	i = -1;
	foreach(lc, names)
	{
		const char *dbname = (const char *) lfirst(lc);
		PurgeProblem problem = PROBLEM_NONE;

		i++;

		/* The round started last time is still running. */
		if (handles[i] != NULL)
		{
			pid_t		pid;
			BgwHandleStatus st = GetBackgroundWorkerPid(handles[i], &pid);

			if (st == BGWH_STARTED || st == BGWH_NOT_YET_STARTED)
				continue;
			pfree(handles[i]);
			handles[i] = NULL;
		}
		/* A round started by an earlier launcher is still running. */
		if (pg_atomic_read_u32(&purge_shared->slots[i].pid) != 0)
			continue;

		if (state[i] == DATABASE_MISSING)
			problem = PROBLEM_MISSING;
		else if (state[i] == DATABASE_NO_CONNECTIONS)
			problem = PROBLEM_NO_CONNECTIONS;
		else if (!start_purge_worker(i, dbname, &handles[i]))
			problem = PROBLEM_NO_WORKER_SLOT;

		if (problem != PROBLEM_NONE && problem != reported[i])
		{
			if (problem == PROBLEM_MISSING)
				ereport(WARNING,
						(errmsg("idempotency purge: database \"%s\" does not exist", dbname),
						 errdetail("It is listed in idempotency.purge_databases; it is looked for again every idempotency.purge_naptime."),
						 errhint("Create the database, or remove it from idempotency.purge_databases.")));
			else if (problem == PROBLEM_NO_CONNECTIONS)
				ereport(WARNING,
						(errmsg("idempotency purge: database \"%s\" does not accept connections", dbname),
						 errdetail("It is listed in idempotency.purge_databases, but datallowconn is false."),
						 errhint("Remove it from idempotency.purge_databases.")));
			else
				ereport(WARNING,
						(errmsg("idempotency purge: could not start a purge worker for database \"%s\"", dbname),
						 errdetail("All background worker slots are in use; it is tried again every idempotency.purge_naptime."),
						 errhint("Raise max_worker_processes.")));
		}
		reported[i] = problem;
	}
}

/*
 * Main of the launcher (static background worker, no database).  Never
 * returns; ends on SIGTERM or postmaster death.
 */
void
idem_purge_launcher_main(Datum main_arg)
{
	List	   *names;
	bool		ok;
	int			n;
	BackgroundWorkerHandle **handles;
	PurgeProblem *reported;
	MemoryContext roundcxt;
	TimestampTz last_round = 0;
	bool		ran = false;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);

	names = database_list(purge_databases, &ok);
	n = list_length(names);
	if (purge_shared == NULL || n != purge_shared->nslots)
		elog(ERROR, "idempotency purge launcher: shared memory does not match idempotency.purge_databases");

	handles = (BackgroundWorkerHandle **) palloc0(n * sizeof(BackgroundWorkerHandle *));
	reported = (PurgeProblem *) palloc0(n * sizeof(PurgeProblem));
	roundcxt = AllocSetContextCreate(TopMemoryContext, "idempotency purge launcher",
									 ALLOCSET_DEFAULT_SIZES);

	for (;;)
	{
		int			events = WL_LATCH_SET | WL_EXIT_ON_PM_DEATH;
		long		timeout = -1;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}

		if (purge_naptime > 0)
		{
			TimestampTz now = GetCurrentTimestamp();
			TimestampTz next;

			if (!ran || now >= TimestampTzPlusMilliseconds(last_round,
														   purge_naptime * 1000L))
			{
				MemoryContext oldcxt = MemoryContextSwitchTo(roundcxt);

				launcher_round(names, handles, reported);
				MemoryContextSwitchTo(oldcxt);
				MemoryContextReset(roundcxt);
				pgstat_report_stat(false);
				last_round = now;
				ran = true;
			}
			next = TimestampTzPlusMilliseconds(last_round, purge_naptime * 1000L);
			now = GetCurrentTimestamp();
			timeout = next > now ? (long) ((next - now + 999) / 1000) : 0;
			events |= WL_TIMEOUT;
		}

		/* Also woken when a round starts or ends (bgw_notify_pid). */
		(void) WaitLatch(MyLatch, events, timeout, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}

/* on_shmem_exit: free the slot this worker holds. */
static void
release_slot(int code, Datum arg)
{
	uint32		expected = (uint32) MyProcPid;

	(void) pg_atomic_compare_exchange_u32(&purge_shared->slots[DatumGetInt32(arg)].pid,
										  &expected, 0);
}

/*
 * Main of a purge worker (dynamic background worker, one round in the
 * database named in bgw_extra, slot number in main_arg).  Exits when the
 * round is done, at once if another worker holds the slot.
 */
void
idem_purge_worker_main(Datum main_arg)
{
	int			slotno = DatumGetInt32(main_arg);
	char		dbname[NAMEDATALEN];
	PurgeSlot  *slot;
	uint32		expected = 0;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	strlcpy(dbname, MyBgworkerEntry->bgw_extra, sizeof(dbname));
	if (purge_shared == NULL || slotno < 0 || slotno >= purge_shared->nslots)
		elog(ERROR, "idempotency purge worker: no slot %d for database \"%s\"",
			 slotno, dbname);
	slot = &purge_shared->slots[slotno];

	if (!pg_atomic_compare_exchange_u32(&slot->pid, &expected, (uint32) MyProcPid))
		proc_exit(0);			/* another round is running in this database */
	on_shmem_exit(release_slot, Int32GetDatum(slotno));

	BackgroundWorkerInitializeConnection(dbname, NULL, 0);
	SetConfigOption("application_name", WORKER_TYPE, PGC_USERSET, PGC_S_SESSION);

	if (idem_purge_round(dbname))
		slot->warned_no_extension = false;
	else
	{
		if (!slot->warned_no_extension)
			ereport(WARNING,
					(errmsg("idempotency purge: extension \"idempotency\" is not installed in database \"%s\"",
							dbname),
					 errdetail("The database is listed in idempotency.purge_databases; until the extension is created there, it is skipped without further warnings."),
					 errhint("Run CREATE EXTENSION idempotency in the database, or remove it from idempotency.purge_databases.")));
		slot->warned_no_extension = true;
	}

	proc_exit(0);
}
