/*-------------------------------------------------------------------------
 *
 * outbox_runs.c
 *	  The consumer groups' runs on idem_publish's fast path: what the SQL
 *	  body does after a message of a topic that groups read, in C.  Every
 *	  group gets a run of the message's aggregate from this message, or a
 *	  run of the message alone, as INSERT ... ON CONFLICT DO NOTHING (a run
 *	  that exists keeps its progress).  A parked run of the aggregate
 *	  (nothing to deliver: available_at 'infinity') is freed (available_at
 *	  = now()).
 *
 *	  Locking: RowExclusiveLock on idem_outbox_runs (outbox_read.c).  A
 *	  parked run found under the caller's snapshot is locked FOR NO KEY
 *	  UPDATE, waiting.  A concurrent update is followed to the row's last
 *	  version, which is tested again, as READ COMMITTED's recheck of an
 *	  UPDATE does; a run deleted meanwhile (its group unsubscribed) is left.
 *	  The update is ExecSimpleRelationUpdate, PostgreSQL's own single-row
 *	  update (constraints, index entries).  Under the aggregate's lock, no
 *	  fetch parks a run of the aggregate: it takes the aggregate's row FOR
 *	  SHARE first.
 *	  Permissions: the executor's check, once, before the message is
 *	  written, of the INSERT's columns and of the UPDATE's (SELECT of the
 *	  columns it tests, UPDATE of available_at).
 *	  Defaults: the columns the INSERT does not name get their defaults,
 *	  prepared once per publication and evaluated per row, as the INSERT's.
 *	  Memory: a private executor state, from idem_outbox_runs_begin to
 *	  idem_outbox_runs_end.
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
#include "rewrite/rewriteHandler.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "idempotency.h"
#include "compat.h"
#include "outbox.h"

/*
 * Before anything is written: the executor's permission check of what
 * idem_outbox_runs_make does, and its executor state into p.  False when
 * the check says no.
 */
bool
idem_outbox_runs_begin(OutboxWrite *p)
{
	Relation	rel = p->rels[T_RUNS];
	EState	   *estate = CreateExecutorState();
	RangeTblEntry *rte = makeNode(RangeTblEntry);
	Bitmapset  *inserted = NULL;
	Bitmapset  *selected = NULL;
	Bitmapset  *updated = NULL;
	AclMode		perms = ACL_INSERT;

	for (int c = 0; c < RUN_NCOLUMNS; c++)
		inserted = bms_add_member(inserted, p->r_atts[c] - FirstLowInvalidHeapAttributeNumber);
	if (p->aggregate != NULL)
	{
		/* UPDATE ... SET available_at WHERE topic, aggregate, lone, available_at */
		perms |= ACL_SELECT | ACL_UPDATE;
		selected = bms_add_member(selected, p->r_atts[RUN_TOPIC] - FirstLowInvalidHeapAttributeNumber);
		selected = bms_add_member(selected, p->r_atts[RUN_AGGREGATE] - FirstLowInvalidHeapAttributeNumber);
		selected = bms_add_member(selected, p->r_atts[RUN_LONE] - FirstLowInvalidHeapAttributeNumber);
		selected = bms_add_member(selected, p->r_atts[RUN_AVAILABLE_AT] - FirstLowInvalidHeapAttributeNumber);
		updated = bms_make_singleton(p->r_atts[RUN_AVAILABLE_AT] - FirstLowInvalidHeapAttributeNumber);
	}
	rte->rtekind = RTE_RELATION;
	rte->relid = RelationGetRelid(rel);
	rte->relkind = rel->rd_rel->relkind;
	rte->rellockmode = RowExclusiveLock;
	if (!idem_exec_init_range_table_cols(estate, rte, perms, selected, inserted, updated))
	{
		FreeExecutorState(estate);
		return false;
	}
	p->runs_estate = estate;
	return true;
}

/* Free what idem_outbox_runs_begin made, if anything. */
void
idem_outbox_runs_end(OutboxWrite *p)
{
	if (p->runs_estate == NULL)
		return;
	ExecResetTupleTable(p->runs_estate->es_tupleTable, false);
	FreeExecutorState(p->runs_estate);
	p->runs_estate = NULL;
}

/*
 * The defaults of the columns of idem_outbox_runs the INSERT does not
 * name, prepared once per publication: an expression per attribute, or
 * NULL (no default; a named or dropped column).
 */
static ExprState **
run_defaults(OutboxWrite *p, EState *estate)
{
	TupleDesc	desc = RelationGetDescr(p->rels[T_RUNS]);
	ExprState **defaults = palloc0(desc->natts * sizeof(ExprState *));
	bool	   *named = palloc0(desc->natts * sizeof(bool));

	for (int c = 0; c < RUN_NCOLUMNS; c++)
		named[p->r_atts[c] - 1] = true;
	for (int a = 0; a < desc->natts; a++)
	{
		Node	   *def = named[a] || TupleDescAttr(desc, a)->attisdropped ? NULL
			: build_column_default(p->rels[T_RUNS], a + 1);

		if (def != NULL)
			defaults[a] = ExecPrepareExpr((Expr *) def, estate);
	}
	pfree(named);
	return defaults;
}

/*
 * The run of group consumer into slot: the columns the INSERT names, and
 * the others' defaults, evaluated per row.
 */
static void
run_values(OutboxWrite *p, EState *estate, ExprState **defaults, TupleTableSlot *slot,
		   text *consumer, pg_uuid_t *id)
{
	int			natts = RelationGetDescr(p->rels[T_RUNS])->natts;
	ExprContext *econtext = GetPerTupleExprContext(estate);

	ExecClearTuple(slot);
	for (int a = 0; a < natts; a++)
	{
		slot->tts_values[a] = (Datum) 0;
		slot->tts_isnull[a] = true;
		if (defaults[a] != NULL)
			slot->tts_values[a] = ExecEvalExprSwitchContext(defaults[a], econtext,
															&slot->tts_isnull[a]);
	}
#define SET_RUN(c, v, null) \
	(slot->tts_values[p->r_atts[c] - 1] = (v), slot->tts_isnull[p->r_atts[c] - 1] = (null))
	SET_RUN(RUN_CONSUMER, PointerGetDatum(consumer), false);
	SET_RUN(RUN_TOPIC, PointerGetDatum(p->topic), false);
	SET_RUN(RUN_AGGREGATE, PointerGetDatum(p->aggregate), p->aggregate == NULL);
	SET_RUN(RUN_LONE, UUIDPGetDatum(id), p->aggregate != NULL);
	SET_RUN(RUN_ACKED, Int64GetDatum(p->position - 1), false);
	SET_RUN(RUN_AVAILABLE_AT, TimestampTzGetDatum(GetCurrentTransactionStartTimestamp()), false);
#undef SET_RUN
	ExecStoreVirtualTuple(slot);
}

/*
 * The tuple ids of the aggregate's parked runs under snap: runs of the
 * aggregate (not lone) with available_at 'infinity'.
 */
static List *
parked_runs(OutboxWrite *p, Snapshot snap)
{
	Relation	rel = p->rels[T_RUNS];
	ScanKeyData skey[2];
	SysScanDesc scan;
	HeapTuple	tup;
	List	   *tids = NIL;

	/* The leading columns of idem_outbox_runs_key. */
	ScanKeyEntryInitialize(&skey[0], 0, p->r_atts[RUN_TOPIC], BTEqualStrategyNumber,
						   InvalidOid, C_COLLATION_OID, F_TEXTEQ, PointerGetDatum(p->topic));
	ScanKeyEntryInitialize(&skey[1], 0, p->r_atts[RUN_AGGREGATE], BTEqualStrategyNumber,
						   InvalidOid, C_COLLATION_OID, F_TEXTEQ, PointerGetDatum(p->aggregate));
	scan = systable_beginscan(rel, p->idx_runs, true, snap, 2, skey);
	while ((tup = systable_getnext(scan)) != NULL)
	{
		bool		lone_null;
		bool		at_null;
		Datum		at;

		(void) heap_getattr(tup, p->r_atts[RUN_LONE], RelationGetDescr(rel), &lone_null);
		at = heap_getattr(tup, p->r_atts[RUN_AVAILABLE_AT], RelationGetDescr(rel), &at_null);
		if (lone_null && !at_null && TIMESTAMP_IS_NOEND(DatumGetTimestampTz(at)))
		{
			ItemPointer tid = palloc(sizeof(ItemPointerData));

			*tid = tup->t_self;
			tids = lappend(tids, tid);
		}
	}
	systable_endscan(scan);
	return tids;
}

/* Is the run in slot (all its attributes fetched) parked, of the aggregate? */
static bool
still_parked(OutboxWrite *p, TupleTableSlot *slot)
{
	int			lone = p->r_atts[RUN_LONE] - 1;
	int			at = p->r_atts[RUN_AVAILABLE_AT] - 1;

	return slot->tts_isnull[lone] && !slot->tts_isnull[at] &&
		TIMESTAMP_IS_NOEND(DatumGetTimestampTz(slot->tts_values[at]));
}

/*
 * UPDATE idem_outbox_runs SET available_at = now() of the aggregate's
 * parked runs, with READ COMMITTED's recheck (header).
 */
static void
free_parked(OutboxWrite *p, ResultRelInfo *rri, EState *estate, Snapshot snap)
{
	Relation	rel = p->rels[T_RUNS];
	int			natts = RelationGetDescr(rel)->natts;
	List	   *tids = parked_runs(p, snap);
	TupleTableSlot *old;
	TupleTableSlot *new;
	ListCell   *lc;

	if (tids == NIL)
		return;
	old = table_slot_create(rel, &estate->es_tupleTable);
	new = table_slot_create(rel, &estate->es_tupleTable);
	foreach(lc, tids)
	{
		TM_FailureData tmfd;

		if (table_tuple_lock(rel, (ItemPointer) lfirst(lc), snap, old, estate->es_output_cid,
							 LockTupleNoKeyExclusive, LockWaitBlock,
							 TUPLE_LOCK_FLAG_FIND_LAST_VERSION, &tmfd) != TM_Ok)
			continue;			/* deleted: its group unsubscribed */
		slot_getallattrs(old);
		if (!still_parked(p, old))
			continue;
		ExecClearTuple(new);
		memcpy(new->tts_values, old->tts_values, natts * sizeof(Datum));
		memcpy(new->tts_isnull, old->tts_isnull, natts * sizeof(bool));
		new->tts_values[p->r_atts[RUN_AVAILABLE_AT] - 1] =
			TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
		ExecStoreVirtualTuple(new);
		ExecSimpleRelationUpdate(rri, estate, NULL, old, new);
	}
}

/*
 * After the message (p->position) is written: every group's run, and the
 * aggregate's parked runs freed, as the body's INSERT and UPDATE under snap.
 */
void
idem_outbox_runs_make(OutboxWrite *p, pg_uuid_t *id, Snapshot snap)
{
	EState	   *estate = p->runs_estate;
	Relation	rel = p->rels[T_RUNS];
	ResultRelInfo *rri = makeNode(ResultRelInfo);
	TupleTableSlot *slot;
	ExprState **defaults;
	ListCell   *lc;

	estate->es_snapshot = snap;
	estate->es_output_cid = GetCurrentCommandId(true);
	InitResultRelInfo(rri, rel, 1, NULL, 0);
	ExecOpenIndices(rri, true);
	slot = table_slot_create(rel, &estate->es_tupleTable);
	defaults = run_defaults(p, estate);
	foreach(lc, p->groups)
	{
		run_values(p, estate, defaults, slot, (text *) lfirst(lc), id);
		if (rel->rd_att->constr != NULL)
			ExecConstraints(rri, slot, estate);
		/* A run that exists keeps its progress (ON CONFLICT DO NOTHING). */
		(void) idem_insert_speculative(rri, slot, estate, p->idx_runs);
		ResetPerTupleExprContext(estate);
	}
	if (p->aggregate != NULL)
		free_parked(p, rri, estate, snap);
	ExecCloseIndices(rri);
}
