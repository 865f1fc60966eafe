/*-------------------------------------------------------------------------
 *
 * stats.c
 *	  Statistics of outcomes per (database, scope): the shared-memory counters
 *	  behind the idem_stats view, the per-backend pending counts that feed
 *	  them, and idem_stats() and idem_stats_reset().  Only with the library in
 *	  shared_preload_libraries (stats_active); otherwise idem_stats_add
 *	  returns at once and idem_stats() and idem_stats_reset() fail (55000).
 *
 *	  Counting rules (the callers report events as they happen):
 *	  - Effects (claimed, takeovers and of them owner_gone_takeovers and
 *	    unknown_takeovers, completed, failed, purged) change
 *	    idem_records and count only if they commit: pending per subtransaction
 *	    level, handed to the parent when it commits, dropped when it rolls
 *	    back, added to shared memory at XACT_EVENT_COMMIT (durable and visible;
 *	    at PRE_COMMIT the transaction could still fail), dropped on abort.
 *	  - Observations (duplicates, in_progress_conflicts,
 *	    fingerprint_mismatches) change nothing, and callers typically roll
 *	    back after one, so they count whether or not the transaction commits
 *	    (pending at level 0, flushed at commit or abort).
 *	  - PREPARE TRANSACTION flushes at XACT_EVENT_PREPARE: the outcome is
 *	    decided later, maybe in another session, so ROLLBACK PREPARED counts.
 *
 *	  Shared memory: a fixed-size hash of (dbid, scope) -> counters, room for
 *	  idempotency.stats_max_scopes pairs plus an overflow entry (InvalidOid,
 *	  "*") that takes the counts of new pairs once the table is full.  No
 *	  eviction; idem_stats_reset() empties it; nothing survives a restart.
 *	  Locking: one LWLock (tranche "idempotency"): shared to look entries up,
 *	  add to their counters (atomics) and read them; exclusive to create or
 *	  remove entries and to reset.  A flush takes it shared once, and
 *	  exclusive once more only for a new pair.
 *
 *	  Memory: pending counts are a backend-local hash in TopMemoryContext,
 *	  emptied at each transaction end.  Rule: the flush at commit must not
 *	  fail (an error after the commit record can become a PANIC): it
 *	  allocates nothing, creates entries with HASH_ENTER_NULL and falls back
 *	  to the overflow entry.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "idempotency.h"
#include "spi_read.h"

PG_FUNCTION_INFO_V1(idem_stats);
PG_FUNCTION_INFO_V1(idem_stats_reset);

#define STATS_TRANCHE		"idempotency"
#define OVERFLOW_SCOPE		"*"

/* The counters idem_stats declared in 0.5.0: claimed ... purged. */
#define STATS_NKINDS_0_5	(IDEM_STAT_PURGED + 1)

/* idempotency.stats_max_scopes */
static int	stats_max_scopes = 1000;

/* True in every process of a server that preloaded the library. */
static bool stats_active = false;

/*
 * Observations count whether or not the transaction commits; effects only
 * if it does.  (See the header comment.)
 */
static const bool stat_is_observation[IDEM_STAT_NKINDS] = {
	[IDEM_STAT_CLAIMED] = false,
	[IDEM_STAT_DUPLICATE] = true,
	[IDEM_STAT_IN_PROGRESS_CONFLICT] = true,
	[IDEM_STAT_FINGERPRINT_MISMATCH] = true,
	[IDEM_STAT_TAKEOVER] = false,
	[IDEM_STAT_COMPLETED] = false,
	[IDEM_STAT_FAILED] = false,
	[IDEM_STAT_PURGED] = false,
	[IDEM_STAT_OWNER_GONE_TAKEOVER] = false,
	[IDEM_STAT_UNKNOWN_TAKEOVER] = false,
};

/* Shared memory: the key is zero-padded, so it can be hashed as bytes. */
typedef struct StatsKey
{
	Oid			dbid;
	char		scope[IDEM_MAX_SCOPE_BYTES + 1];
} StatsKey;

typedef struct StatsEntry
{
	StatsKey	key;
	pg_atomic_uint64 counts[IDEM_STAT_NKINDS];
} StatsEntry;

typedef struct StatsShared
{
	LWLock	   *lock;
	TimestampTz stats_reset;	/* protected by lock */
} StatsShared;

static StatsShared *stats_shared = NULL;
static HTAB *stats_htab = NULL;

/* Pending counts of this backend's transaction, by (level, scope). */
typedef struct PendingKey
{
	int			level;			/* 0: observations; else nesting level */
	char		scope[IDEM_MAX_SCOPE_BYTES + 1];
} PendingKey;

typedef struct PendingEntry
{
	PendingKey	key;
	int64		counts[IDEM_STAT_NKINDS];
} PendingEntry;

static HTAB *pending = NULL;

static idem_shmem_request_fn prev_shmem_request = NULL;
static shmem_startup_hook_type prev_shmem_startup = NULL;

static Size
stats_shmem_size(void)
{
	return add_size(MAXALIGN(sizeof(StatsShared)),
					hash_estimate_size(stats_max_scopes + 1, sizeof(StatsEntry)));
}

static void
stats_shmem_request(void)
{
	if (prev_shmem_request)
		prev_shmem_request();
	RequestAddinShmemSpace(stats_shmem_size());
	RequestNamedLWLockTranche(STATS_TRANCHE, 1);
}

static void
entry_zero(StatsEntry *e, bool init)
{
	int			i;

	for (i = 0; i < IDEM_STAT_NKINDS; i++)
	{
		if (init)
			pg_atomic_init_u64(&e->counts[i], 0);
		else
			pg_atomic_write_u64(&e->counts[i], 0);
	}
}

static void
stats_key(StatsKey *key, Oid dbid, const char *scope, int len)
{
	memset(key, 0, sizeof(StatsKey));
	key->dbid = dbid;
	memcpy(key->scope, scope, Min(len, IDEM_MAX_SCOPE_BYTES));
}

static void
stats_shmem_startup(void)
{
	bool		found;
	HASHCTL		ctl;

	if (prev_shmem_startup)
		prev_shmem_startup();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);

	stats_shared = ShmemInitStruct("idempotency stats", sizeof(StatsShared), &found);
	if (!found)
	{
		stats_shared->lock = &(GetNamedLWLockTranche(STATS_TRANCHE))->lock;
		stats_shared->stats_reset = GetCurrentTimestamp();
	}

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(StatsKey);
	ctl.entrysize = sizeof(StatsEntry);
	stats_htab = IDEM_SHMEM_INIT_HASH("idempotency stats hash", stats_max_scopes + 1,
									  &ctl, HASH_ELEM | HASH_BLOBS);

	if (!found)
	{
		StatsKey	key;
		StatsEntry *e;

		stats_key(&key, InvalidOid, OVERFLOW_SCOPE, strlen(OVERFLOW_SCOPE));
		e = (StatsEntry *) hash_search(stats_htab, &key, HASH_ENTER, NULL);
		entry_zero(e, true);
	}

	LWLockRelease(AddinShmemInitLock);
}

/*
 * Add the pending counts to shared memory and forget them; with
 * observations_only, forget the effects instead of adding them.  Never
 * throws (see the header comment).
 */
static void
pending_flush(bool observations_only)
{
	HASH_SEQ_STATUS seq;
	PendingEntry *p;
	bool		missing = false;
	int			pass;

	if (pending == NULL || hash_get_num_entries(pending) == 0)
		return;

	for (pass = 0; pass < 2; pass++)
	{
		if (pass == 1 && !missing)
			break;
		if (stats_htab != NULL)
			LWLockAcquire(stats_shared->lock, pass == 0 ? LW_SHARED : LW_EXCLUSIVE);

		hash_seq_init(&seq, pending);
		while ((p = (PendingEntry *) hash_seq_search(&seq)) != NULL)
		{
			StatsKey	key;
			StatsEntry *e = NULL;
			int			i;

			if (stats_htab != NULL && (p->key.level == 0 || !observations_only))
			{
				stats_key(&key, MyDatabaseId, p->key.scope, strlen(p->key.scope));
				e = (StatsEntry *) hash_search(stats_htab, &key, HASH_FIND, NULL);
				if (e == NULL && pass == 0)
				{
					/* Created in the exclusive pass. */
					missing = true;
					continue;
				}
				if (e == NULL)
				{
					/* The overflow entry is one of the max + 1. */
					if (hash_get_num_entries(stats_htab) <= stats_max_scopes)
					{
						bool		found;

						e = (StatsEntry *) hash_search(stats_htab, &key,
													   HASH_ENTER_NULL, &found);
						if (e != NULL && !found)
							entry_zero(e, true);
					}
					if (e == NULL)
					{
						stats_key(&key, InvalidOid, OVERFLOW_SCOPE,
								  strlen(OVERFLOW_SCOPE));
						e = (StatsEntry *) hash_search(stats_htab, &key,
													   HASH_FIND, NULL);
					}
				}
			}

			if (e != NULL)
			{
				for (i = 0; i < IDEM_STAT_NKINDS; i++)
				{
					if (p->counts[i] == 0 ||
						(observations_only && !stat_is_observation[i]))
						continue;
					pg_atomic_fetch_add_u64(&e->counts[i], (uint64) p->counts[i]);
				}
			}
			(void) hash_search(pending, &p->key, HASH_REMOVE, NULL);
		}

		if (stats_htab != NULL)
			LWLockRelease(stats_shared->lock);
	}
}

/*
 * A subtransaction at nesting level `level` ended: hand its pending
 * effects (and those of any deeper level, already ended) to level - 1, or
 * drop them when it rolled back.  Level 0, the observations, is untouched.
 */
static void
pending_subxact_end(int level, bool commit)
{
	HASH_SEQ_STATUS seq;
	PendingEntry *p;

	if (pending == NULL || hash_get_num_entries(pending) == 0)
		return;

	/*
	 * Entries inserted during the scan are at level - 1, so whether the scan
	 * visits them does not matter; removing the current entry is allowed.
	 */
	hash_seq_init(&seq, pending);
	while ((p = (PendingEntry *) hash_seq_search(&seq)) != NULL)
	{
		if (p->key.level < level)
			continue;
		if (commit)
		{
			PendingKey	parent = p->key;
			PendingEntry *q;
			bool		found;
			int			i;

			parent.level = level - 1;
			q = (PendingEntry *) hash_search(pending, &parent, HASH_ENTER, &found);
			if (!found)
				memset(q->counts, 0, sizeof(q->counts));
			for (i = 0; i < IDEM_STAT_NKINDS; i++)
				q->counts[i] += p->counts[i];
		}
		(void) hash_search(pending, &p->key, HASH_REMOVE, NULL);
	}
}

static void
stats_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PREPARE:
			pending_flush(false);
			break;
		case XACT_EVENT_ABORT:
			pending_flush(true);
			break;
		default:
			break;
	}
}

static void
stats_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					   SubTransactionId parentSubid, void *arg)
{
	/* The ending subtransaction is still the current one here. */
	if (event == SUBXACT_EVENT_COMMIT_SUB)
		pending_subxact_end(GetCurrentTransactionNestLevel(), true);
	else if (event == SUBXACT_EVENT_ABORT_SUB)
		pending_subxact_end(GetCurrentTransactionNestLevel(), false);
}

/*
 * Called from _PG_init: defines idempotency.stats_max_scopes.  When the
 * library is being preloaded, also requests the shared memory and installs
 * the hooks and transaction callbacks.
 */
void
idem_stats_init(void)
{
	/*
	 * A PGC_POSTMASTER setting can only be defined while preloading.  Loaded
	 * later, the library defines it as PGC_SIGHUP, which nothing reads: so
	 * that SET is refused as for a setting of postgresql.conf and ALTER
	 * SYSTEM accepts it, instead of both calling it unknown under the
	 * reserved prefix.
	 */
	DefineCustomIntVariable("idempotency.stats_max_scopes",
							"Maximum number of (database, scope) pairs tracked by idem_stats.",
							"Counts of further pairs go to one overflow row with scope '*'. "
							"Read at server start, with idempotency in shared_preload_libraries.",
							&stats_max_scopes,
							1000,
							1,
							1000000,
							process_shared_preload_libraries_in_progress ?
							PGC_POSTMASTER : PGC_SIGHUP,
							0,
							NULL,
							NULL,
							NULL);

	if (!process_shared_preload_libraries_in_progress)
		return;

	stats_active = true;
	idem_shmem_request_install(stats_shmem_request, &prev_shmem_request);
	prev_shmem_startup = shmem_startup_hook;
	shmem_startup_hook = stats_shmem_startup;
	RegisterXactCallback(stats_xact_callback, NULL);
	RegisterSubXactCallback(stats_subxact_callback, NULL);
}

/*
 * Count n events of kind in scope for the current transaction (see the
 * header comment for when they reach idem_stats).  A no-op without
 * shared_preload_libraries.  May throw only for lack of memory.
 */
void
idem_stats_add(text *scope, IdemStatKind kind, int64 n)
{
	PendingKey	key;
	PendingEntry *p;
	bool		found;

	if (!stats_active || n == 0)
		return;
	Assert(kind >= 0 && kind < IDEM_STAT_NKINDS);

	if (pending == NULL)
	{
		HASHCTL		ctl;

		memset(&ctl, 0, sizeof(ctl));
		ctl.keysize = sizeof(PendingKey);
		ctl.entrysize = sizeof(PendingEntry);
		ctl.hcxt = TopMemoryContext;
		pending = hash_create("idempotency pending stats", 16, &ctl,
							  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}

	memset(&key, 0, sizeof(key));
	key.level = stat_is_observation[kind] ? 0 : GetCurrentTransactionNestLevel();
	memcpy(key.scope, VARDATA_ANY(scope),
		   Min(VARSIZE_ANY_EXHDR(scope), IDEM_MAX_SCOPE_BYTES));

	p = (PendingEntry *) hash_search(pending, &key, HASH_ENTER, &found);
	if (!found)
		memset(p->counts, 0, sizeof(p->counts));
	p->counts[kind] += n;
}

/*
 * Count one event of kind per row of SPI_tuptable, for the scope in the
 * row's first column (idem_records.scope, a text; a NULL scope is not
 * counted).  For statements that touch many scopes at once, such as
 * idem_purge's DELETE ... RETURNING scope.
 */
void
idem_stats_count_rows(IdemStatKind kind)
{
	text	   *run = NULL;
	int64		runlen = 0;
	uint64		i;

	if (!stats_active || SPI_tuptable == NULL)
		return;

	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		Datum		d = idem_spi_read(SPI_tuptable, i, 1, TEXTOID, "scope", &isnull);
		text	   *scope;

		if (isnull)
			continue;
		scope = DatumGetTextPP(d);
		if (run != NULL &&
			VARSIZE_ANY_EXHDR(run) == VARSIZE_ANY_EXHDR(scope) &&
			memcmp(VARDATA_ANY(run), VARDATA_ANY(scope), VARSIZE_ANY_EXHDR(scope)) == 0)
		{
			runlen++;
			continue;
		}
		if (run != NULL)
			idem_stats_add(run, kind, runlen);
		run = scope;
		runlen = 1;
	}
	if (run != NULL)
		idem_stats_add(run, kind, runlen);
}

/* Fail with 55000 unless the counters exist. */
static void
stats_check_available(const char *fname)
{
	if (!stats_active || stats_htab == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("%s: idempotency statistics are not being collected", fname),
				 errdetail("Statistics are kept in shared memory, which the idempotency library can only set up when the server loads it at start."),
				 errhint("Add idempotency to shared_preload_libraries in postgresql.conf and restart the server.")));
}

/*
 * idem_stats(OUT dbid oid, OUT scope text, OUT claimed bigint,
 *            OUT duplicates bigint, OUT in_progress_conflicts bigint,
 *            OUT fingerprint_mismatches bigint, OUT takeovers bigint,
 *            OUT completed bigint, OUT failed bigint, OUT purged bigint,
 *            OUT owner_gone_takeovers bigint, OUT unknown_takeovers bigint,
 *            OUT stats_reset timestamptz) RETURNS SETOF record
 *
 * One row per (database, scope) counted since the last reset, plus the
 * overflow row (dbid 0, scope '*') when it has counted anything.  Rows of
 * other databases only for roles with the privileges of pg_read_all_stats.
 * A catalog not yet updated to 0.6.0 declares the counters up to purged
 * only (STATS_NKINDS_0_5): those are returned.
 * Fails with 55000 without shared_preload_libraries, 0A000 when called
 * where a set cannot be accepted.
 */
Datum
idem_stats(PG_FUNCTION_ARGS)
{
	const char *fname = "idem_stats";
	ReturnSetInfo *rsinfo;
	TupleDesc	tupdesc;
	Tuplestorestate *tupstore;
	HASH_SEQ_STATUS seq;
	StatsEntry *e;
	TimestampTz reset;
	bool		all_databases;
	int			nkinds;

	idem_check_srf(fcinfo, fname);
	InitMaterializedSRF(fcinfo, 0);
	rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	stats_check_available(fname);
	tupdesc = rsinfo->setDesc;
	tupstore = rsinfo->setResult;
	nkinds = tupdesc->natts - 3;
	if (nkinds != IDEM_STAT_NKINDS && nkinds != STATS_NKINDS_0_5)
		elog(ERROR, "%s: expected %d result columns, got %d",
			 fname, 3 + IDEM_STAT_NKINDS, tupdesc->natts);

	all_databases = has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_STATS);

	LWLockAcquire(stats_shared->lock, LW_SHARED);
	reset = stats_shared->stats_reset;

	hash_seq_init(&seq, stats_htab);
	while ((e = (StatsEntry *) hash_seq_search(&seq)) != NULL)
	{
		Datum		values[3 + IDEM_STAT_NKINDS];
		bool		nulls[3 + IDEM_STAT_NKINDS];
		bool		overflow = !OidIsValid(e->key.dbid);
		bool		any = false;
		int			i;

		if (!overflow && e->key.dbid != MyDatabaseId && !all_databases)
			continue;

		memset(nulls, 0, sizeof(nulls));
		values[0] = ObjectIdGetDatum(e->key.dbid);
		values[1] = CStringGetTextDatum(e->key.scope);
		for (i = 0; i < nkinds; i++)
		{
			uint64		v = pg_atomic_read_u64(&e->counts[i]);

			any |= (v != 0);
			values[2 + i] = Int64GetDatum((int64) v);
		}
		values[2 + nkinds] = TimestampTzGetDatum(reset);

		if (overflow && !any)
			continue;
		tuplestore_putvalues(tupstore, tupdesc, values, nulls);
	}

	LWLockRelease(stats_shared->lock);

	return (Datum) 0;
}

/*
 * idem_stats_reset() RETURNS timestamptz
 *
 * Forget every counter of every database and return the new stats_reset
 * time.  Not executable by PUBLIC: superusers, or roles granted EXECUTE.
 * Fails with 55000 without shared_preload_libraries, 42501 without the
 * privilege (checked by the server before the call).
 */
Datum
idem_stats_reset(PG_FUNCTION_ARGS)
{
	HASH_SEQ_STATUS seq;
	StatsEntry *e;
	TimestampTz now;

	stats_check_available("idem_stats_reset");

	now = GetCurrentTimestamp();
	LWLockAcquire(stats_shared->lock, LW_EXCLUSIVE);
	hash_seq_init(&seq, stats_htab);
	while ((e = (StatsEntry *) hash_seq_search(&seq)) != NULL)
	{
		if (OidIsValid(e->key.dbid))
			(void) hash_search(stats_htab, &e->key, HASH_REMOVE, NULL);
		else
			entry_zero(e, false);
	}
	stats_shared->stats_reset = now;
	LWLockRelease(stats_shared->lock);

	PG_RETURN_TIMESTAMPTZ(now);
}
