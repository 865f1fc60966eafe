/*-------------------------------------------------------------------------
 *
 * claim_direct.c
 *	  The fast path of idem_claim: the executor's speculative insertion (what
 *	  INSERT ... ON CONFLICT DO NOTHING runs) without SPI's statement per step,
 *	  and a duplicate's record read from the conflicting tuple itself.
 *
 *	  Rule: the semantics are the SPI path's (claim.c), step by step.  The
 *	  primary key is probed with a dirty snapshot, waiting for a writer of the
 *	  same key under lock_timeout and statement_timeout; the tuple is inserted
 *	  with a speculative token, and a conflict found at index insertion kills
 *	  it and starts again, as ExecInsert does.  A record to take over is left
 *	  to the SPI path, whose UPDATE re-checks the newest row version.
 *	  Constraints are checked once, before the first insertion; their
 *	  evaluation is skipped only when the install script's status CHECK is
 *	  the only CHECK and every NOT NULL column has a value.  A NULL read where
 *	  the install script has NOT NULL is spi_read.c's 55000.
 *
 *	  It declines (idem_direct_open returns NULL; the caller takes the SPI
 *	  path, always correct) when idempotency.direct_claim is off; under
 *	  REPEATABLE READ or SERIALIZABLE (40001, predicate locks); for a role
 *	  without table-wide INSERT and SELECT, or under row-level security; when
 *	  idem_records is not an ordinary table as installed (claim_table.c);
 *	  when Citus manages it, but for one key on its shard's node
 *	  (claim_citus_local.c).
 *
 *	  Every open runs the executor's permission check, so
 *	  ExecutorCheckPerms_hook (pgaudit, sepgsql) sees an INSERT.  Locking:
 *	  RowExclusiveLock on the table and its indexes to transaction end; the
 *	  speculative insertion lock only between heap and index insertion.
 *	  Cache: the OID of idem_records, and whether Citus manages it, until a
 *	  relcache invalidation of it or of all; privileges, row security and
 *	  layout are checked at every open.  Visibility: the tuple carries the
 *	  current command id, marked used, so the next CommandCounterIncrement
 *	  shows it, and a later probe in the same statement sees it at once (a
 *	  duplicate, as with SPI).  Memory: a private executor state freed before
 *	  returning; values handed back are copied out.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/relation.h"
#include "access/sysattr.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_index.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_language.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/rls.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "idempotency.h"
#include "citus.h"
#include "claim.h"
#include "spi_read.h"

/* An open fast path: idem_records, its indexes and an executor state. */
struct IdemDirect
{
	Oid			nsp;
	Relation	rel;
	EState	   *estate;
	ResultRelInfo *rri;
	Datum		claimed;		/* the text 'claimed' */
	TupleTableSlot *slot;		/* the record to insert */
	TupleTableSlot *existing;	/* a conflicting record */
	List	   *arbiters;		/* the primary key */
};

/* idempotency.direct_claim: may claims take the fast path at all? */
static bool direct_claim = true;

/*
 * The OID of idem_records in records_nsp, or InvalidOid: looked up by name
 * once, forgotten by the relcache callback below when that relation (or
 * the whole relcache) is invalidated.
 */
static Oid	records_nsp = InvalidOid;
static Oid	records_relid = InvalidOid;

/*
 * Whether Citus manages records_relid (records_citus), valid while
 * records_citus_known: forgotten with the OID.
 */
static bool records_citus_known = false;
static bool records_citus = false;

static bool direct_usable(Relation rel);
static Relation direct_records(Oid nsp);
static IdemDirect *direct_open_rel(Oid nsp, Relation rel);
static void store_claim(IdemDirect *d, text *scope, text *key, TimestampTz now,
						TimestampTz expires, bytea *fp, bool *nulls);
static void read_record(TupleTableSlot *slot, IdemRecordState *rec,
						MemoryContext into);
static void forget_records_relid(Oid relid);
static bool records_is_citus(Relation rel);
static Relation open_records(Oid nsp);
static Bitmapset *record_access_cols(void);

/*
 * Define idempotency.direct_claim, and subscribe the cached OID of
 * idem_records to relcache invalidations (module.c's _PG_init).
 */
void
idem_direct_init(void)
{
	DefineCustomBoolVariable("idempotency.direct_claim",
							 "Lets idem_claim insert and read records without SPI where it can.",
							 "Off: every claim runs its statements through SPI (for diagnosis; slower, same results).",
							 &direct_claim,
							 true,
							 PGC_USERSET,
							 0,
							 NULL,
							 NULL,
							 NULL);
	idem_relcache_subscribe(forget_records_relid);
}

/* ------------------------------------------------------------------------
 * The fast path: open, insert or find, close
 * ------------------------------------------------------------------------
 */

/*
 * Open the fast path for claims in the extension's schema nsp: NULL when
 * it does not apply (see the header comment; nothing is left open then).
 * Otherwise idem_records stays locked (RowExclusiveLock) to the end of the
 * transaction, as by an INSERT, and the caller must idem_direct_close()
 * the result.  Allocates in the current memory context.
 *
 * With key not NULL (a claim of one key), for an idem_records that Citus
 * distributes by key, on the node that holds the key's shard: the fast
 * path then writes into the shard relation (claim_citus_local.c).  idem_records
 * is opened once either way.
 */
IdemDirect *
idem_direct_open(Oid nsp, text *key)
{
	Relation	rel = direct_records(nsp);
	Relation	shard;

	if (rel == NULL)
		return NULL;
	if (direct_usable(rel))
		return direct_open_rel(nsp, rel);
	shard = key != NULL && records_is_citus(rel) ? idem_citus_local_shard(rel, key) : NULL;
	table_close(rel, NoLock);
	if (shard == NULL)
		return NULL;
	/* A shard is no Citus table itself: the other checks of direct_usable. */
	if (!idem_records_shape_ok(shard) ||
		check_enable_rls(RelationGetRelid(shard), InvalidOid, true) != RLS_NONE)
	{
		table_close(shard, NoLock);
		return NULL;
	}
	return direct_open_rel(nsp, shard);
}

/*
 * Insert a 'claimed' record for (scope, key) through the open fast path d,
 * or find the record that is there.  now, expires and fp (NULL: none) are
 * the new record's created_at/updated_at, expires_at and fingerprint.
 *
 * Returns IDEM_DIRECT_INSERTED when the record was inserted, or
 * IDEM_DIRECT_CONFLICT when a committed (or own) record holds the key (its
 * state is in *rec, allocated in the caller's memory context).  Errors are
 * those of an INSERT: 55P03/57014 while waiting for another transaction's
 * claim of the key, 23505 from a unique index a DBA added, 23514 from a
 * CHECK a DBA added; and 55000 for a conflicting record with NULL in a
 * column the install script makes NOT NULL (read_record).  The caller has
 * checked that the transaction is not read-only (25006).
 */
IdemDirectResult
idem_direct_insert(IdemDirect *d, text *scope, text *key, TimestampTz now,
				   TimestampTz expires, bytea *fp, IdemRecordState *rec)
{
	MemoryContext caller = CurrentMemoryContext;
	EState	   *estate = d->estate;
	TupleTableSlot *slot = d->slot;
	bool		nulls[IDEM_NCOLUMNS];
	IdemDirectResult result;
	bool		checked = false;

	ResetPerTupleExprContext(estate);
	store_claim(d, scope, key, now, expires, fp, nulls);

	for (;;)
	{
		ItemPointerData conflict;
		bool		spec_conflict = false;
		uint32		token;
		List	   *recheck;

		CHECK_FOR_INTERRUPTS();

		/* Waits for an in-progress inserter or deleter of the key. */
		if (!idem_exec_check_index_constraints(d->rri, slot, estate, &conflict, d->arbiters))
		{
			if (!table_tuple_fetch_row_version(d->rel, &conflict, SnapshotAny, d->existing))
				elog(ERROR, "idempotency: conflicting tuple (%u,%u) of idem_records not found",
					 ItemPointerGetBlockNumber(&conflict),
					 ItemPointerGetOffsetNumber(&conflict));
			read_record(d->existing, rec, caller);
			ExecClearTuple(d->existing);
			result = IDEM_DIRECT_CONFLICT;
			break;
		}

		/*
		 * Constraints are checked before the first insertion, as an INSERT
		 * does, but not for a duplicate, which writes nothing.
		 */
		if (!checked)
		{
			if (!idem_records_constraints_hold(d->rel, d->nsp, nulls))
				ExecConstraints(d->rri, slot, estate);
			checked = true;
		}

		/* As an INSERT: the command id is marked used, an xid assigned. */
		estate->es_output_cid = GetCurrentCommandId(true);
		token = SpeculativeInsertionLockAcquire(GetCurrentTransactionId());
		table_tuple_insert_speculative(d->rel, slot, estate->es_output_cid, 0, NULL, token);
		recheck = IDEM_EXEC_INSERT_INDEX_TUPLES(d->rri, slot, estate,
												&spec_conflict, d->arbiters);
		table_tuple_complete_speculative(d->rel, slot, token, !spec_conflict);
		SpeculativeInsertionLockRelease(GetCurrentTransactionId());

		if (spec_conflict)
		{
			/*
			 * A concurrent claim of the key won the race between the probe
			 * and our index entry: our tuple is dead; look again (and wait
			 * for that claim's transaction, as ExecInsert does).
			 */
			list_free(recheck);
			continue;
		}

		/*
		 * Otherwise only a deferrable unique or exclusion constraint asks
		 * for a recheck, and such a constraint comes with a trigger, which
		 * made direct_usable() decline.
		 */
		if (recheck != NIL)
			elog(ERROR, "idempotency: unexpected deferred index constraint on idem_records");
		result = IDEM_DIRECT_INSERTED;
		break;
	}

	return result;
}

/* Release what idem_direct_open took, but the table's lock. */
void
idem_direct_close(IdemDirect *d)
{
	ExecCloseIndices(d->rri);
	ExecResetTupleTable(d->estate->es_tupleTable, false);
	FreeExecutorState(d->estate);
	table_close(d->rel, NoLock);
	pfree(d);
}

/*
 * Is idem_records of schema nsp a Citus table?  The cached answer of the
 * direct path; idem_records stays locked (RowExclusiveLock) as by the
 * INSERT or DELETE that follows.  False when there is none (SPI then
 * reports it).
 */
bool
idem_records_citus(Oid nsp)
{
	Relation	rel = open_records(nsp);
	bool		citus;

	if (rel == NULL)
		return false;
	citus = records_is_citus(rel);
	table_close(rel, NoLock);
	return citus;
}

/* ------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------
 */
/* idem_records open for the fast path, or NULL when it is off. */
static Relation
direct_records(Oid nsp)
{
	if (!direct_claim || IsolationUsesXactSnapshot())
		return NULL;
	return open_records(nsp);
}
/*
 * May the fast path write to rel?  Only when a plain INSERT by the current
 * role would do exactly what it does: see the header comment.
 */
static bool
direct_usable(Relation rel)
{
	return idem_records_shape_ok(rel) && !records_is_citus(rel) &&
		check_enable_rls(RelationGetRelid(rel), InvalidOid, true) == RLS_NONE;
}

/*
 * The rest of idem_direct_open, on rel (idem_records or its local shard,
 * open with RowExclusiveLock, usable): NULL when the executor's
 * permission check or the primary key says no.
 */
static IdemDirect *
direct_open_rel(Oid nsp, Relation rel)
{
	RangeTblEntry *rte;
	IdemDirect *d;

	d = (IdemDirect *) palloc(sizeof(IdemDirect));
	d->nsp = nsp;
	d->rel = rel;
	d->estate = CreateExecutorState();
	rte = makeNode(RangeTblEntry);
	rte->rtekind = RTE_RELATION;
	rte->relid = RelationGetRelid(rel);
	rte->relkind = rel->rd_rel->relkind;
	rte->rellockmode = RowExclusiveLock;
	if (!idem_exec_init_range_table(d->estate, rte, ACL_INSERT | ACL_SELECT,
									record_access_cols()))
	{
		FreeExecutorState(d->estate);
		table_close(rel, NoLock);
		pfree(d);
		return NULL;
	}

	d->claimed = CStringGetTextDatum(IDEM_STATUS_CLAIMED);
	d->rri = makeNode(ResultRelInfo);
	InitResultRelInfo(d->rri, rel, 1, NULL, 0);
	ExecOpenIndices(d->rri, true);
	d->slot = table_slot_create(rel, &d->estate->es_tupleTable);
	d->existing = table_slot_create(rel, &d->estate->es_tupleTable);

	if (!idem_records_pk_is_scope_key(d->rri))
	{
		idem_direct_close(d);
		return NULL;
	}
	d->arbiters = list_make1_oid(IDEM_PRIMARY_KEY_INDEX(rel));
	return d;
}

/*
 * Store the 'claimed' record of (scope, key) in d->slot, as a virtual
 * tuple; nulls (IDEM_NCOLUMNS) says which columns are NULL, for
 * idem_records_constraints_hold.
 */
static void
store_claim(IdemDirect *d, text *scope, text *key, TimestampTz now,
			TimestampTz expires, bytea *fp, bool *nulls)
{
	TupleTableSlot *slot = d->slot;
	Datum		values[IDEM_NCOLUMNS];

	memset(nulls, true, sizeof(bool) * IDEM_NCOLUMNS);
	values[IDEM_COL_SCOPE - 1] = PointerGetDatum(scope);
	values[IDEM_COL_KEY - 1] = PointerGetDatum(key);
	values[IDEM_COL_STATUS - 1] = d->claimed;
	values[IDEM_COL_FINGERPRINT - 1] = PointerGetDatum(fp);
	values[IDEM_COL_CREATED_AT - 1] = TimestampTzGetDatum(now);
	values[IDEM_COL_UPDATED_AT - 1] = TimestampTzGetDatum(now);
	values[IDEM_COL_EXPIRES_AT - 1] = TimestampTzGetDatum(expires);
	values[IDEM_COL_ATTEMPTS - 1] = Int32GetDatum(0);
	nulls[IDEM_COL_SCOPE - 1] = false;
	nulls[IDEM_COL_KEY - 1] = false;
	nulls[IDEM_COL_STATUS - 1] = false;
	nulls[IDEM_COL_FINGERPRINT - 1] = (fp == NULL);
	nulls[IDEM_COL_CREATED_AT - 1] = false;
	nulls[IDEM_COL_UPDATED_AT - 1] = false;
	nulls[IDEM_COL_EXPIRES_AT - 1] = false;
	nulls[IDEM_COL_ATTEMPTS - 1] = false;

	ExecClearTuple(slot);
	memcpy(slot->tts_values, values, sizeof(values));
	memcpy(slot->tts_isnull, nulls, sizeof(bool) * IDEM_NCOLUMNS);
	ExecStoreVirtualTuple(slot);
}

/*
 * Copy the parts of the conflicting record that the claim decision needs
 * out of slot (which holds the tuple at *tid) into *rec, in the caller's
 * memory context.  The column types are the install script's (the open
 * checked them: idem_records_shape_ok); a NULL in a column it makes NOT
 * NULL fails with 55000, as the SPI path's read does (spi_read.c).
 */
static void
read_record(TupleTableSlot *slot, IdemRecordState *rec, MemoryContext into)
{
	MemoryContext old;
	bool		isnull;
	Datum		d;

	old = MemoryContextSwitchTo(into);

	d = slot_getattr(slot, IDEM_COL_STATUS, &isnull);
	if (isnull)
		idem_records_column_null("status");
	rec->status = TextDatumGetCString(d);

	d = slot_getattr(slot, IDEM_COL_FINGERPRINT, &isnull);
	rec->fingerprint = isnull ? NULL : DatumGetByteaPCopy(d);

	d = slot_getattr(slot, IDEM_COL_CREATED_AT, &isnull);
	if (isnull)
		idem_records_column_null("created_at");
	rec->created_at = DatumGetTimestampTz(d);

	d = slot_getattr(slot, IDEM_COL_EXPIRES_AT, &isnull);
	if (isnull)
		idem_records_column_null("expires_at");
	rec->expires_at = DatumGetTimestampTz(d);

	d = slot_getattr(slot, IDEM_COL_LOCKED_UNTIL, &isnull);
	rec->has_lock = !isnull;
	rec->locked_until = isnull ? 0 : DatumGetTimestampTz(d);

	MemoryContextSwitchTo(old);
}
static void
forget_records_relid(Oid relid)
{
	if (!OidIsValid(relid) || relid == records_relid)
	{
		records_relid = InvalidOid;
		records_citus_known = false;
	}
}

/*
 * Does Citus manage rel, the idem_records that open_records() opened?
 * Found once per relcache invalidation of it and kept with its OID.  An
 * invalidation that arrived while opening it, or arrives during the
 * look-up (catalog locks accept invalidations), has forgotten the OID:
 * the answer, from a catalog snapshot taken after it, then serves this
 * call only.
 */
static bool
records_is_citus(Relation rel)
{
	bool		citus;

	if (records_citus_known && RelationGetRelid(rel) == records_relid)
		return records_citus;
	citus = idem_citus_table(RelationGetRelid(rel));
	if (RelationGetRelid(rel) == records_relid)
	{
		records_citus = citus;
		records_citus_known = true;
	}
	return citus;
}

/*
 * Open idem_records of schema nsp with RowExclusiveLock, or return NULL
 * when there is none (the caller then declines; SPI reports the error).
 */
static Relation
open_records(Oid nsp)
{
	Relation	rel;

	if (records_nsp != nsp || !OidIsValid(records_relid))
	{
		records_relid = get_relname_relid("idem_records", nsp);
		records_nsp = nsp;
		if (!OidIsValid(records_relid))
			return NULL;
	}

	/* Dropped (or its OID reused) since the look-up: look again next time. */
	rel = try_relation_open(records_relid, RowExclusiveLock);
	if (rel != NULL &&
		(RelationGetNamespace(rel) != nsp ||
		 strcmp(RelationGetRelationName(rel), "idem_records") != 0))
	{
		relation_close(rel, RowExclusiveLock);
		rel = NULL;
	}
	if (rel == NULL)
		records_relid = InvalidOid;
	return rel;
}

/*
 * The columns a claim writes or reads, as the executor's permission check
 * takes them (offset by FirstLowInvalidHeapAttributeNumber); built once,
 * in TopMemoryContext.
 */
static Bitmapset *
record_access_cols(void)
{
	static const AttrNumber cols[] = {
		IDEM_COL_SCOPE, IDEM_COL_KEY, IDEM_COL_STATUS, IDEM_COL_FINGERPRINT, IDEM_COL_CREATED_AT,
		IDEM_COL_UPDATED_AT, IDEM_COL_EXPIRES_AT, IDEM_COL_LOCKED_UNTIL, IDEM_COL_ATTEMPTS
	};
	static Bitmapset *b = NULL;

	if (b == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
		Bitmapset  *made = NULL;
		int			i;

		for (i = 0; i < (int) lengthof(cols); i++)
			made = bms_add_member(made, cols[i] - FirstLowInvalidHeapAttributeNumber);
		MemoryContextSwitchTo(old);
		b = made;
	}
	return b;
}
