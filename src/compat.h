/*-------------------------------------------------------------------------
 *
 * compat.h
 *	  Every difference between the PostgreSQL major versions this extension
 *	  builds against (15 to 19) lives here, so that the rest of src/ is
 *	  written against one API.
 *
 *	  Invariant: no other file tests PG_VERSION_NUM.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDEM_COMPAT_H
#define IDEM_COMPAT_H

#include "postgres.h"

#include "utils/guc.h"
#include "utils/timestamp.h"

#if PG_VERSION_NUM < 150000
#error "idempotency supports PostgreSQL 15 to 19"
#endif

/*
 * InitMaterializedSRF is SetSingleFuncCall in 15.0 (renamed in 15.1, which
 * keeps the old name as an alias).
 */
#include "funcapi.h"
#if PG_VERSION_NUM < 150001
#define InitMaterializedSRF(fcinfo, flags) SetSingleFuncCall((fcinfo), (flags))
#endif

/* SHA-256 through the pg_cryptohash API (which may use OpenSSL). */
#include "common/cryptohash.h"
#include "common/sha2.h"

static inline void
idem_sha256(const void *data, size_t len, uint8 *out)
{
	pg_cryptohash_ctx *ctx = pg_cryptohash_create(PG_SHA256);

	if (ctx == NULL ||
		pg_cryptohash_init(ctx) < 0 ||
		pg_cryptohash_update(ctx, (const uint8 *) data, len) < 0 ||
		pg_cryptohash_final(ctx, out, PG_SHA256_DIGEST_LENGTH) < 0)
		elog(ERROR, "could not compute SHA-256 digest");
	pg_cryptohash_free(ctx);
}

/*
 * The "extra" a GUC check hook hands to its assign hook: from 16 on, GUC
 * frees it with guc_free (its own memory context), before with free().
 */
static inline void *
idem_guc_extra_alloc(size_t size)
{
#if PG_VERSION_NUM >= 160000
	return guc_malloc(LOG, size);
#else
	return malloc(size);
#endif
}

static inline void
idem_guc_extra_free(void *p)
{
#if PG_VERSION_NUM >= 160000
	guc_free(p);
#else
	free(p);
#endif
}

/* Infinite intervals exist from 17 on. */
#if PG_VERSION_NUM >= 170000
#define IDEM_INTERVAL_IS_INFINITE(i) (INTERVAL_IS_NOBEGIN(i) || INTERVAL_IS_NOEND(i))
#define IDEM_INTERVAL_IS_PLUS_INFINITY(i) INTERVAL_IS_NOEND(i)
#else
#define IDEM_INTERVAL_IS_INFINITE(i) false
#define IDEM_INTERVAL_IS_PLUS_INFINITY(i) false
#endif

/*
 * Parse text as an interval without throwing.  16 has soft errors; before
 * it, the parse error is caught and discarded (interval_in holds no
 * resources, so no subtransaction is needed).
 */
#if PG_VERSION_NUM >= 160000
#include "nodes/miscnodes.h"
#endif
#include "utils/builtins.h"
#include "utils/memutils.h"

static inline bool
idem_parse_interval(const char *str, Interval *out)
{
#if PG_VERSION_NUM >= 160000
	ErrorSaveContext escontext = {T_ErrorSaveContext};
	Datum		d;

	if (!DirectInputFunctionCallSafe(interval_in, (char *) str, InvalidOid, -1,
									 (Node *) &escontext, &d))
		return false;
	*out = *DatumGetIntervalP(d);
	return true;
#else
	MemoryContext oldcxt = CurrentMemoryContext;
	volatile bool ok = true;

	PG_TRY();
	{
		Datum		d = DirectFunctionCall3(interval_in, CStringGetDatum(str),
											ObjectIdGetDatum(InvalidOid),
											Int32GetDatum(-1));

		*out = *DatumGetIntervalP(d);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(oldcxt);
		FlushErrorState();
		ok = false;
	}
	PG_END_TRY();
	return ok;
#endif
}

/*
 * Shared memory and LWLock tranche requests of a library loaded by
 * shared_preload_libraries are made from shmem_request_hook.  Call this
 * from _PG_init; *prev receives the hook it displaces, which request()
 * must call first.
 */
#include "miscadmin.h"

typedef void (*idem_shmem_request_fn) (void);

static inline void
idem_shmem_request_install(idem_shmem_request_fn request,
						   idem_shmem_request_fn *prev)
{
	*prev = shmem_request_hook;
	shmem_request_hook = request;
}

/*
 * A fixed-size hash table in shared memory: 19 dropped the separate
 * initial size.
 */
#include "storage/shmem.h"

#if PG_VERSION_NUM >= 190000
#define IDEM_SHMEM_INIT_HASH(name, size, ctl, flags) \
	ShmemInitHash((name), (size), (ctl), (flags))
#else
#define IDEM_SHMEM_INIT_HASH(name, size, ctl, flags) \
	ShmemInitHash((name), (size), (size), (ctl), (flags))
#endif

/*
 * The executor calls of the direct claim path (claim_direct.c).  16 added
 * onlySummarizing to ExecInsertIndexTuples and moved permissions out of
 * the range table entry (RTEPermissionInfo, ExecCheckPermissions); 18
 * gave ExecCheckIndexConstraints the TID of the tuple being updated and
 * ExecInitRangeTable the unpruned relations; 19 turned
 * ExecInsertIndexTuples' flags into a bit mask and reordered its
 * arguments.
 */
#include "executor/executor.h"
#include "parser/parse_relation.h"

/*
 * A function that does not return: pg_noreturn before the declaration
 * from 18 on (19 has no pg_attribute_noreturn any more), the attribute
 * before it too for 15 to 17 (GCC and Clang accept it there).
 */
#if PG_VERSION_NUM >= 180000
#define IDEM_NORETURN pg_noreturn
#else
#define IDEM_NORETURN pg_attribute_noreturn()
#endif

#if PG_VERSION_NUM >= 190000
#define IDEM_EXEC_INSERT_INDEX_TUPLES(rri, slot, estate, specConflict, arbiters) \
	ExecInsertIndexTuples((rri), (estate), EIIT_NO_DUPE_ERROR, (slot), (arbiters), (specConflict))
#elif PG_VERSION_NUM >= 160000
#define IDEM_EXEC_INSERT_INDEX_TUPLES(rri, slot, estate, specConflict, arbiters) \
	ExecInsertIndexTuples((rri), (slot), (estate), false, true, (specConflict), (arbiters), false)
#else
#define IDEM_EXEC_INSERT_INDEX_TUPLES(rri, slot, estate, specConflict, arbiters) \
	ExecInsertIndexTuples((rri), (slot), (estate), false, true, (specConflict), (arbiters))
#endif

/* The index entries of a plain INSERT's new tuple (a duplicate is 23505). */
#if PG_VERSION_NUM >= 190000
#define IDEM_EXEC_INSERT_INDEX_TUPLES_PLAIN(rri, slot, estate) \
	ExecInsertIndexTuples((rri), (estate), 0, (slot), NIL, NULL)
#elif PG_VERSION_NUM >= 160000
#define IDEM_EXEC_INSERT_INDEX_TUPLES_PLAIN(rri, slot, estate) \
	ExecInsertIndexTuples((rri), (slot), (estate), false, false, NULL, NIL, false)
#else
#define IDEM_EXEC_INSERT_INDEX_TUPLES_PLAIN(rri, slot, estate) \
	ExecInsertIndexTuples((rri), (slot), (estate), false, false, NULL, NIL)
#endif

/* The sequence of an identity column: 17 takes the relation, not its OID. */
#if PG_VERSION_NUM >= 170000
#define IDEM_IDENTITY_SEQUENCE(rel, attnum) getIdentitySequence((rel), (attnum), true)
#else
#define IDEM_IDENTITY_SEQUENCE(rel, attnum) getIdentitySequence(RelationGetRelid(rel), (attnum), true)
#endif

/* ON CONFLICT's pre-check of the arbiter indexes for a new tuple. */
static inline bool
idem_exec_check_index_constraints(ResultRelInfo *rri, TupleTableSlot *slot,
								  EState *estate, ItemPointer conflict,
								  List *arbiters)
{
#if PG_VERSION_NUM >= 180000
	ItemPointerData invalid;

	ItemPointerSetInvalid(&invalid);
	return ExecCheckIndexConstraints(rri, slot, estate, conflict, &invalid, arbiters);
#else
	return ExecCheckIndexConstraints(rri, slot, estate, conflict, arbiters);
#endif
}

/* The primary key of a relation: 18 added "deferrable_ok". */
#if PG_VERSION_NUM >= 180000
#define IDEM_PRIMARY_KEY_INDEX(rel) RelationGetPrimaryKeyIndex((rel), false)
#else
#define IDEM_PRIMARY_KEY_INDEX(rel) RelationGetPrimaryKeyIndex(rel)
#endif

/*
 * The executor's permission check of perms on the one relation rte, with
 * the columns selected, inserted and updated (attribute numbers offset by
 * FirstLowInvalidHeapAttributeNumber), as ExecutorStart makes it:
 * ExecutorCheckPerms_hook (pgaudit, sepgsql) sees the access.  The
 * permission infos (16 on) into *perminfos.
 */
static inline bool
idem_exec_check_perms(RangeTblEntry *rte, AclMode perms, Bitmapset *selected,
					  Bitmapset *inserted, Bitmapset *updated, List **perminfos)
{
	List	   *rtable = list_make1(rte);
#if PG_VERSION_NUM >= 160000
	RTEPermissionInfo *pi;

	*perminfos = NIL;
	pi = addRTEPermissionInfo(perminfos, rte);
	pi->requiredPerms = perms;
	pi->selectedCols = selected;
	pi->insertedCols = inserted;
	pi->updatedCols = updated;
	return ExecCheckPermissions(rtable, *perminfos, false);
#else
	*perminfos = NIL;
	rte->requiredPerms = perms;
	rte->selectedCols = selected;
	rte->insertedCols = inserted;
	rte->updatedCols = updated;
	return ExecCheckRTPerms(rtable, false);
#endif
}

/*
 * The range table of an executor state of our own for the one relation
 * rte, after idem_exec_check_perms.  Returns false, with nothing
 * initialised, when the check fails.
 */
static inline bool
idem_exec_init_range_table_cols(EState *estate, RangeTblEntry *rte, AclMode perms,
								Bitmapset *selected, Bitmapset *inserted,
								Bitmapset *updated)
{
	List	   *perminfos;

	if (!idem_exec_check_perms(rte, perms, selected, inserted, updated, &perminfos))
		return false;
#if PG_VERSION_NUM >= 180000
	ExecInitRangeTable(estate, list_make1(rte), perminfos, bms_make_singleton(1));
#elif PG_VERSION_NUM >= 160000
	ExecInitRangeTable(estate, list_make1(rte), perminfos);
#else
	ExecInitRangeTable(estate, list_make1(rte));
#endif
	return true;
}

/*
 * idem_exec_init_range_table_cols for perms on the columns in cols: they
 * count as selected and, for ACL_INSERT, as inserted.
 */
static inline bool
idem_exec_init_range_table(EState *estate, RangeTblEntry *rte, AclMode perms,
						   Bitmapset *cols)
{
	return idem_exec_init_range_table_cols(estate, rte, perms,
										   (perms & ACL_SELECT) ? cols : NULL,
										   (perms & ACL_INSERT) ? cols : NULL,
										   NULL);
}

/*
 * The backend status of the idx-th backend (1-based) of this backend's
 * snapshot of them (pgstat_read_current_status): 16 renamed
 * pgstat_fetch_stat_local_beentry to pgstat_get_local_beentry_by_index.
 */
#include "utils/backend_status.h"

static inline LocalPgBackendStatus *
idem_local_beentry(int idx)
{
#if PG_VERSION_NUM >= 160000
	return pgstat_get_local_beentry_by_index(idx);
#else
	return pgstat_fetch_stat_local_beentry(idx);
#endif
}

#endif							/* IDEM_COMPAT_H */
