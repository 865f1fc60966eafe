/*-------------------------------------------------------------------------
 *
 * compat.h
 *	  Every difference between the PostgreSQL major versions this extension
 *	  builds against (13 to 17) lives here, so that the rest of src/ is
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

#if PG_VERSION_NUM < 130000
#error "idempotency requires PostgreSQL 13 or later"
#endif

/* GUC prefix reservation: renamed in 15. */
#if PG_VERSION_NUM < 150000
#define MarkGUCPrefixReserved(prefix) EmitWarningsOnPlaceholders(prefix)
#endif

/*
 * SHA-256.  14 introduced the pg_cryptohash API (which may use OpenSSL);
 * 13 only has the built-in implementation in common/sha2.h.
 */
#if PG_VERSION_NUM >= 140000
#include "common/cryptohash.h"
#include "common/sha2.h"
#else
#include "common/sha2.h"
#endif

static inline void
idem_sha256(const void *data, size_t len, uint8 *out)
{
#if PG_VERSION_NUM >= 140000
	pg_cryptohash_ctx *ctx = pg_cryptohash_create(PG_SHA256);

	if (ctx == NULL ||
		pg_cryptohash_init(ctx) < 0 ||
		pg_cryptohash_update(ctx, (const uint8 *) data, len) < 0 ||
		pg_cryptohash_final(ctx, out, PG_SHA256_DIGEST_LENGTH) < 0)
		elog(ERROR, "could not compute SHA-256 digest");
	pg_cryptohash_free(ctx);
#else
	pg_sha256_ctx ctx;

	pg_sha256_init(&ctx);
	pg_sha256_update(&ctx, (const uint8 *) data, len);
	pg_sha256_final(&ctx, out);
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
 * shared_preload_libraries.  From 15 on they must be made from
 * shmem_request_hook; before 15, directly in _PG_init.  Call this from
 * _PG_init: request() runs at the right moment either way.  *prev receives
 * the hook it displaces (NULL before 15), which request() must call first.
 */
#include "miscadmin.h"

typedef void (*idem_shmem_request_fn) (void);

static inline void
idem_shmem_request_install(idem_shmem_request_fn request,
						   idem_shmem_request_fn *prev)
{
#if PG_VERSION_NUM >= 150000
	*prev = shmem_request_hook;
	shmem_request_hook = request;
#else
	*prev = NULL;
	request();
#endif
}

/*
 * The executor calls of the direct claim path (direct.c).  14 gave
 * ExecInsertIndexTuples and ExecCheckIndexConstraints their ResultRelInfo
 * argument and the "update" flag; 16 added onlySummarizing and moved
 * permissions out of the range table entry.  On 13 the direct path is not
 * built: IDEM_HAVE_DIRECT_CLAIM is 0 and idem_claim always uses SPI.
 */
#include "executor/executor.h"
#if PG_VERSION_NUM >= 160000
#include "parser/parse_relation.h"
#endif

#if PG_VERSION_NUM >= 140000
#define IDEM_HAVE_DIRECT_CLAIM 1
#else
#define IDEM_HAVE_DIRECT_CLAIM 0
#endif

#if PG_VERSION_NUM >= 160000
#define IDEM_EXEC_INSERT_INDEX_TUPLES(rri, slot, estate, noDupErr, specConflict, arbiters) \
	ExecInsertIndexTuples((rri), (slot), (estate), false, (noDupErr), (specConflict), (arbiters), false)
#elif PG_VERSION_NUM >= 140000
#define IDEM_EXEC_INSERT_INDEX_TUPLES(rri, slot, estate, noDupErr, specConflict, arbiters) \
	ExecInsertIndexTuples((rri), (slot), (estate), false, (noDupErr), (specConflict), (arbiters))
#endif

/* The primary key of a relation: 18 added "deferrable_ok". */
#if PG_VERSION_NUM >= 180000
#define IDEM_PRIMARY_KEY_INDEX(rel) RelationGetPrimaryKeyIndex((rel), false)
#else
#define IDEM_PRIMARY_KEY_INDEX(rel) RelationGetPrimaryKeyIndex(rel)
#endif

/* A range table of the one relation rte, for an executor state of our own. */
static inline void
idem_exec_init_range_table(EState *estate, RangeTblEntry *rte)
{
#if PG_VERSION_NUM >= 160000
	List	   *perminfos = NIL;

	addRTEPermissionInfo(&perminfos, rte);
	ExecInitRangeTable(estate, list_make1(rte), perminfos);
#else
	ExecInitRangeTable(estate, list_make1(rte));
#endif
}

/* The predefined role pg_read_all_stats: renamed in 14. */
#if PG_VERSION_NUM < 140000
#define ROLE_PG_READ_ALL_STATS DEFAULT_ROLE_READ_ALL_STATS
#endif

#endif							/* IDEM_COMPAT_H */
