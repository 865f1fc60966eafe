/*-------------------------------------------------------------------------
 *
 * outbox_order.c
 *	  The aggregate's lock on idem_publish's fast path: what the SQL body
 *	  does before a message of a pulled topic with an aggregate (so that one
 *	  aggregate's messages take their positions in commit order), in C.  It
 *	  locks the aggregate's row of idem_outbox_aggregates FOR NO KEY UPDATE.
 *	  The first publication inserts that row instead, as INSERT ... ON
 *	  CONFLICT DO NOTHING does; so does the explicit key's message
 *	  (idem_insert_speculative).
 *
 *	  Locking: RowShareLock on idem_outbox_aggregates (outbox_read.c), and
 *	  RowExclusiveLock when it inserts the row.  The row is locked
 *	  LockTupleNoKeyExclusive, waiting, until the transaction ends.  A row
 *	  it inserted locks the same way: a locker waits for its inserter.
 *	  Visibility: the row is looked for under the caller's snapshot.  A row
 *	  found is committed, and nothing updates or deletes one (a DROP or
 *	  TRUNCATE waits for the table lock), so the lock returns TM_Ok; any
 *	  other result declines.  When no row is found, the insertion's probe
 *	  waits for a concurrent first publication.  If that one committed, the
 *	  fast path declines: its snapshot cannot see the row, and the body
 *	  looks again with a new one.  Declining leaves at most the lock, or
 *	  the row the body would have inserted.
 *	  Permissions: the executor's check, as for SELECT ... FOR NO KEY UPDATE
 *	  (SELECT, and UPDATE of some column) and for the INSERT.
 *	  Memory: a private executor state for the insertion, freed before
 *	  returning.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/sysattr.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_collation.h"
#include "executor/executor.h"
#include "storage/lmgr.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"

#include "idempotency.h"
#include "compat.h"
#include "outbox.h"

/*
 * INSERT ... ON CONFLICT DO NOTHING of the tuple in slot, as ExecInsert
 * runs it: a probe of the arbiter index that waits for an in-progress
 * writer of the key, then a speculative insertion.  False when the key is
 * taken, found by the probe or by the insertion (whose tuple is then
 * dead).
 */
bool
idem_insert_speculative(ResultRelInfo *rri, TupleTableSlot *slot, EState *estate, Oid index)
{
	List	   *arbiters = list_make1_oid(index);
	ItemPointerData conflict;
	bool		spec_conflict = false;
	uint32		token;
	List	   *recheck;

	if (!idem_exec_check_index_constraints(rri, slot, estate, &conflict, arbiters))
		return false;
	token = SpeculativeInsertionLockAcquire(GetCurrentTransactionId());
	table_tuple_insert_speculative(rri->ri_RelationDesc, slot, estate->es_output_cid, 0, NULL, token);
	recheck = IDEM_EXEC_INSERT_INDEX_TUPLES(rri, slot, estate, &spec_conflict, arbiters);
	table_tuple_complete_speculative(rri->ri_RelationDesc, slot, token, !spec_conflict);
	SpeculativeInsertionLockRelease(GetCurrentTransactionId());
	if (!spec_conflict && recheck != NIL)
		elog(ERROR, "idempotency: unexpected deferred index constraint on %s",
			 RelationGetRelationName(rri->ri_RelationDesc));
	return !spec_conflict;
}

/*
 * The range table entry of idem_outbox_aggregates, for a statement that
 * takes lockmode, and the columns it touches (topic, aggregate) into *cols.
 */
static RangeTblEntry *
aggregates_rte(OutboxWrite *p, LOCKMODE lockmode, Bitmapset **cols)
{
	Relation	rel = p->rels[T_AGGREGATES];
	RangeTblEntry *rte = makeNode(RangeTblEntry);

	*cols = bms_add_member(NULL, p->a_topic - FirstLowInvalidHeapAttributeNumber);
	*cols = bms_add_member(*cols, p->a_aggregate - FirstLowInvalidHeapAttributeNumber);
	rte->rtekind = RTE_RELATION;
	rte->relid = RelationGetRelid(rel);
	rte->relkind = rel->rd_rel->relkind;
	rte->rellockmode = lockmode;
	return rte;
}

/*
 * The first publication of the aggregate: its row, inserted as INSERT ...
 * ON CONFLICT DO NOTHING.  False when the INSERT is not allowed or the row
 * was there (inserted by a transaction that committed after the snapshot).
 */
static bool
insert_aggregate(OutboxWrite *p)
{
	Relation	rel = p->rels[T_AGGREGATES];
	EState	   *estate;
	ResultRelInfo *rri;
	TupleTableSlot *slot;
	bool		inserted;
	Bitmapset  *cols;
	RangeTblEntry *rte = aggregates_rte(p, RowExclusiveLock, &cols);

	LockRelationOid(RelationGetRelid(rel), RowExclusiveLock);
	estate = CreateExecutorState();
	if (!idem_exec_init_range_table_cols(estate, rte, ACL_INSERT, NULL, cols, NULL))
	{
		FreeExecutorState(estate);
		return false;
	}
	rri = makeNode(ResultRelInfo);
	InitResultRelInfo(rri, rel, 1, NULL, 0);
	ExecOpenIndices(rri, true);
	slot = table_slot_create(rel, &estate->es_tupleTable);
	ExecClearTuple(slot);
	for (int a = 0; a < RelationGetDescr(rel)->natts; a++)
		slot->tts_isnull[a] = true;		/* dropped columns */
	slot->tts_values[p->a_topic - 1] = PointerGetDatum(p->topic);
	slot->tts_isnull[p->a_topic - 1] = false;
	slot->tts_values[p->a_aggregate - 1] = PointerGetDatum(p->aggregate);
	slot->tts_isnull[p->a_aggregate - 1] = false;
	ExecStoreVirtualTuple(slot);
	if (rel->rd_att->constr != NULL)
		ExecConstraints(rri, slot, estate);
	estate->es_output_cid = GetCurrentCommandId(true);
	inserted = idem_insert_speculative(rri, slot, estate, p->idx_aggregates);
	ExecCloseIndices(rri);
	ExecResetTupleTable(estate->es_tupleTable, false);
	FreeExecutorState(estate);
	return inserted;
}

/*
 * The aggregate's lock, after idem_outbox_open_aggregates: its row found
 * under snap and locked FOR NO KEY UPDATE (waiting for the transaction
 * that holds it), or inserted.  False when the fast path must decline
 * (header).
 */
bool
idem_outbox_lock_aggregate(OutboxWrite *p, Snapshot snap)
{
	Relation	rel = p->rels[T_AGGREGATES];
	Bitmapset  *cols;
	RangeTblEntry *rte = aggregates_rte(p, RowShareLock, &cols);
	List	   *perminfos;
	ScanKeyData skey[2];
	SysScanDesc scan;
	HeapTuple	tup;
	ItemPointerData tid;
	bool		found;
	TupleTableSlot *slot;
	TM_FailureData tmfd;
	TM_Result	res;

	/* SELECT ... FOR NO KEY UPDATE: SELECT of the columns, UPDATE of some. */
	if (!idem_exec_check_perms(rte, ACL_SELECT | ACL_UPDATE, cols, NULL, NULL, &perminfos))
		return false;
	ScanKeyEntryInitialize(&skey[0], 0, p->a_topic, BTEqualStrategyNumber,
						   InvalidOid, C_COLLATION_OID, F_TEXTEQ, PointerGetDatum(p->topic));
	ScanKeyEntryInitialize(&skey[1], 0, p->a_aggregate, BTEqualStrategyNumber,
						   InvalidOid, C_COLLATION_OID, F_TEXTEQ, PointerGetDatum(p->aggregate));
	scan = systable_beginscan(rel, p->idx_aggregates, true, snap, 2, skey);
	tup = systable_getnext(scan);
	found = tup != NULL;
	if (found)
		tid = tup->t_self;
	systable_endscan(scan);
	if (!found)
		return insert_aggregate(p);

	slot = table_slot_create(rel, NULL);
	res = table_tuple_lock(rel, &tid, snap, slot, GetCurrentCommandId(true),
						   LockTupleNoKeyExclusive, LockWaitBlock,
						   TUPLE_LOCK_FLAG_FIND_LAST_VERSION, &tmfd);
	ExecDropSingleTupleTableSlot(slot);
	return res == TM_Ok;
}
