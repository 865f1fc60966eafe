/*-------------------------------------------------------------------------
 *
 * direct.c
 *	  The fast path of idem_claim: the executor's speculative insertion
 *	  (the mechanism behind INSERT ... ON CONFLICT DO NOTHING), called
 *	  directly instead of through SPI, and a duplicate's record read from
 *	  the conflicting tuple itself.
 *
 *	  Why: a claim through SPI runs a whole statement (plan cache lookup,
 *	  executor start and end, a snapshot, a portal) inside the caller's
 *	  statement, and a duplicate runs two (the INSERT that meets the
 *	  conflict, then a SELECT that reads the row).  Here one call opens the
 *	  table and its indexes, probes the primary key, and either inserts the
 *	  record or reads the one that is there.
 *
 *	  Semantics are those of the SPI path in claim.c, step by step:
 *	  ExecCheckIndexConstraints probes the primary key with a dirty
 *	  snapshot, waiting for a transaction that is inserting or deleting the
 *	  same key (honouring lock_timeout and statement_timeout), exactly as
 *	  ON CONFLICT's pre-check does; with no conflict the tuple is inserted
 *	  with a speculative token and its index entries are made, and a
 *	  conflict found only then (a concurrent inserter won the race) kills
 *	  the tuple and starts again, as ExecInsert does.  A conflicting record
 *	  is committed, or this transaction's own: the caller decides with the
 *	  same rules as the SPI path whether it is a duplicate; a record that
 *	  can be taken over is left to the SPI path, whose UPDATE re-checks the
 *	  condition on the newest row version.
 *
 *	  Constraints: checked once before the first insertion, as an INSERT
 *	  checks them, and not for a duplicate.  PostgreSQL re-reads and
 *	  compiles a CHECK's stored expression at every insertion; the CHECK
 *	  the extension puts on status (idem_status_is_valid(status)) accepts
 *	  the 'claimed' inserted here, so when it is the only CHECK and every
 *	  NOT NULL column has a value, evaluating is skipped.  Any other
 *	  constraint is evaluated with ExecConstraints, with its usual error.
 *
 *	  When the fast path declines (the caller then takes the SPI path,
 *	  which is always correct): idempotency.direct_claim is off;
 *	  REPEATABLE READ and SERIALIZABLE (the SPI path raises 40001 on a
 *	  record committed after the snapshot, and takes SSI's predicate
 *	  locks); a role without table-wide INSERT and SELECT on idem_records
 *	  (the executor's permission check below, ExecCheckRTPerms or
 *	  ExecCheckPermissions, says no: SPI then raises the permission error,
 *	  or uses column privileges);
 *	  row-level security in force for the role; triggers, rules, stored
 *	  generated columns, column defaults or a column layout other than the
 *	  extension's on idem_records (a DBA's change must behave as plain SQL
 *	  would); an idem_records that is not an ordinary table; an
 *	  idem_records that Citus manages (a distributed, reference or Citus
 *	  local table: a row of pg_catalog.pg_dist_partition), whose local
 *	  relation is a shell without the data (the SPI path's SQL is routed
 *	  by Citus to the shard).
 *
 *	  Permissions: every open runs the executor's own permission check for
 *	  INSERT and SELECT of the columns it writes and reads, so
 *	  ExecutorCheckPerms_hook (pgaudit's object audit, sepgsql) sees a
 *	  direct claim as it sees the INSERT of the SPI path.
 *
 *	  Locking: the table is opened with RowExclusiveLock, as an INSERT
 *	  does, and kept until the end of the transaction; its indexes are
 *	  opened by ExecOpenIndices (RowExclusiveLock).  The speculative
 *	  insertion lock is held only between the heap insertion and the index
 *	  insertions.
 *
 *	  Catalog: the OID of idem_records is looked up by name once per
 *	  backend and kept until a relcache invalidation of that table (or of
 *	  all); a table dropped meanwhile is noticed when opening it.  Whether
 *	  Citus manages it is found at the same time and kept as long (Citus
 *	  invalidates a table's relcache entry whenever its pg_dist_partition
 *	  row changes; without the citus extension it costs one look-up in
 *	  pg_extension per invalidation).  The privilege, row-level security
 *	  and layout checks are made at every open, as an INSERT makes them at
 *	  every statement.
 *
 *	  Visibility: the new tuple carries the current command id, which is
 *	  marked used, so the next CommandCounterIncrement (the next statement,
 *	  or SPI's next writing statement, such as idem_complete's in the same
 *	  statement) makes it visible; the dirty-snapshot probe of a later call
 *	  sees it at once, so a second claim of the same key in one statement is
 *	  a duplicate, as with SPI.
 *
 *	  Memory: everything is allocated in a private executor state, freed
 *	  before returning; the existing record's values that are handed back
 *	  are copied into the caller's memory context.
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
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/rls.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "idempotency.h"

/* The columns of idem_records, in order, as the install script makes them. */
static const struct
{
	const char *name;
	Oid			type;
}			record_columns[] =
{
	{"scope", TEXTOID},
	{"key", TEXTOID},
	{"status", TEXTOID},
	{"fingerprint", BYTEAOID},
	{"result", JSONBOID},
	{"created_at", TIMESTAMPTZOID},
	{"updated_at", TIMESTAMPTZOID},
	{"expires_at", TIMESTAMPTZOID},
	{"locked_until", TIMESTAMPTZOID},
	{"token", INT8OID},
	{"attempts", INT4OID},
	{"lease", INTERVALOID},
};

#define NCOLUMNS lengthof(record_columns)

/* Attribute numbers (1-based) of the columns used here. */
#define COL_SCOPE			1
#define COL_KEY				2
#define COL_STATUS			3
#define COL_FINGERPRINT		4
#define COL_CREATED_AT		6
#define COL_UPDATED_AT		7
#define COL_EXPIRES_AT		8
#define COL_LOCKED_UNTIL	9
#define COL_ATTEMPTS		11

/*
 * The stored default of attempts as the install script makes it (0), once
 * seen; in TopMemoryContext.  Compared as text: the same default has the
 * same stored form.
 */
static char *known_default = NULL;

/*
 * Are the column defaults of idem_records those of the install script?
 * Only attempts has one (0), which the fast path writes itself; a default
 * a DBA adds or changes on a column the claim's INSERT does not name
 * (result, locked_until, token, attempts, lease) would be applied by the
 * SPI path's INSERT, so the fast path declines then.  Defaults on the
 * columns the INSERT names are never used by either path.
 */
static bool
defaults_are_own(TupleDesc desc)
{
	TupleConstr *constr = desc->constr;
	int			i;

	if (constr == NULL)
		return true;
	for (i = 0; i < constr->num_defval; i++)
	{
		AttrDefault *def = &constr->defval[i];
		Node	   *expr;

		switch (def->adnum)
		{
			case COL_SCOPE:
			case COL_KEY:
			case COL_STATUS:
			case COL_FINGERPRINT:
			case COL_CREATED_AT:
			case COL_UPDATED_AT:
			case COL_EXPIRES_AT:
				continue;		/* always given */
			case COL_ATTEMPTS:
				if (known_default != NULL && strcmp(def->adbin, known_default) == 0)
					continue;
				expr = stringToNode(def->adbin);
				if (IsA(expr, Const) && ((Const *) expr)->consttype == INT4OID &&
					!((Const *) expr)->constisnull &&
					DatumGetInt32(((Const *) expr)->constvalue) == 0)
				{
					if (known_default == NULL)
						known_default = MemoryContextStrdup(TopMemoryContext, def->adbin);
					continue;
				}
				return false;
			default:
				return false;
		}
	}
	return true;
}

static bool records_is_citus(Relation rel);

/*
 * May the fast path write to rel?  Only when a plain INSERT by the current
 * role would do exactly what it does: see the header comment.
 */
static bool
direct_usable(Relation rel)
{
	TupleDesc	desc = RelationGetDescr(rel);
	Oid			relid = RelationGetRelid(rel);
	int			i;

	if (rel->rd_rel->relkind != RELKIND_RELATION ||
		rel->rd_rel->relispartition ||
		rel->trigdesc != NULL ||
		rel->rd_rules != NULL ||
		desc->natts != (int) NCOLUMNS ||
		(desc->constr != NULL && desc->constr->has_generated_stored) ||
		records_is_citus(rel))
		return false;

	for (i = 0; i < (int) NCOLUMNS; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (att->attisdropped || att->atttypid != record_columns[i].type ||
			strcmp(NameStr(att->attname), record_columns[i].name) != 0)
			return false;
	}

	if (!defaults_are_own(desc))
		return false;

	return check_enable_rls(relid, InvalidOid, true) == RLS_NONE;
}

/*
 * The stored expression (ccbin) of idem_records' CHECK constraint once it
 * has been found to be the extension's own status check, or NULL; in
 * TopMemoryContext.  Reset when any function changes (syscache callback),
 * so a replaced idem_status_is_valid is looked at again.
 */
static char *known_check = NULL;
static bool known_check_callback = false;

static void
forget_known_check(Datum arg, int cacheid, uint32 hashvalue)
{
	if (known_check != NULL)
		pfree(known_check);
	known_check = NULL;
}

/* Is funcid the C function idem_status_is_valid of this library in nsp? */
static bool
is_status_check_function(Oid funcid, Oid nsp)
{
	HeapTuple	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(funcid));
	Form_pg_proc proc;
	bool		isnull;
	Datum		d;
	bool		ok = false;

	if (!HeapTupleIsValid(tup))
		return false;
	proc = (Form_pg_proc) GETSTRUCT(tup);
	if (proc->prolang == ClanguageId && proc->pronamespace == nsp &&
		proc->pronargs == 1 && proc->proisstrict)
	{
		d = SysCacheGetAttr(PROCOID, tup, Anum_pg_proc_prosrc, &isnull);
		ok = !isnull && strcmp(TextDatumGetCString(d), "idem_status_is_valid") == 0;
		d = SysCacheGetAttr(PROCOID, tup, Anum_pg_proc_probin, &isnull);
		ok = ok && !isnull &&
			strcmp(TextDatumGetCString(d), "$libdir/idempotency") == 0;
	}
	ReleaseSysCache(tup);
	return ok;
}

/*
 * Do the constraints of idem_records hold for the record about to be
 * inserted (nulls: which of its columns are NULL), without evaluating
 * them?  True when every NOT NULL column has a value and the only CHECK
 * is the extension's idem_status_is_valid(status), which accepts the
 * 'claimed' inserted here.  PostgreSQL would re-read and compile that
 * CHECK at every insertion; any other constraint makes this false and the
 * caller evaluates them all with ExecConstraints.
 */
static bool
constraints_hold(Relation rel, Oid nsp, const bool *nulls)
{
	TupleDesc	desc = RelationGetDescr(rel);
	TupleConstr *constr = desc->constr;
	const char *ccbin;
	Node	   *expr;
	FuncExpr   *f;
	int			i;

	for (i = 0; i < desc->natts; i++)
		if (TupleDescAttr(desc, i)->attnotnull && nulls[i])
			return false;
	if (constr == NULL || constr->num_check == 0)
		return true;
	if (constr->num_check != 1)
		return false;

	ccbin = constr->check[0].ccbin;
	if (known_check != NULL && strcmp(ccbin, known_check) == 0)
		return true;

	expr = stringToNode(ccbin);
	if (!IsA(expr, FuncExpr))
		return false;
	f = (FuncExpr *) expr;
	if (list_length(f->args) != 1 || !IsA(linitial(f->args), Var) ||
		((Var *) linitial(f->args))->varattno != COL_STATUS ||
		!is_status_check_function(f->funcid, nsp))
		return false;

	if (!known_check_callback)
	{
		CacheRegisterSyscacheCallback(PROCOID, forget_known_check, (Datum) 0);
		known_check_callback = true;
	}
	if (known_check != NULL)
		pfree(known_check);
	known_check = MemoryContextStrdup(TopMemoryContext, ccbin);
	return true;
}

/*
 * Is the primary key of the opened relation a plain unique index on
 * (scope, key), the arbiter of the claim?
 */
static bool
primary_key_is_scope_key(ResultRelInfo *rri)
{
	Oid			pk = IDEM_PRIMARY_KEY_INDEX(rri->ri_RelationDesc);
	int			i;

	if (!OidIsValid(pk))
		return false;
	for (i = 0; i < rri->ri_NumIndices; i++)
	{
		Form_pg_index index = rri->ri_IndexRelationDescs[i]->rd_index;

		if (index->indexrelid == pk)
			return index->indisunique && index->indimmediate &&
				index->indnkeyatts == 2 &&
				index->indkey.values[0] == COL_SCOPE &&
				index->indkey.values[1] == COL_KEY &&
				rri->ri_IndexRelationInfo[i]->ii_Expressions == NIL &&
				rri->ri_IndexRelationInfo[i]->ii_Predicate == NIL;
	}
	return false;
}

/*
 * Copy the parts of the conflicting record that the claim decision needs
 * out of slot (which holds the tuple at *tid) into *rec, in the caller's
 * memory context.
 */
static void
read_record(TupleTableSlot *slot, IdemRecordState *rec, MemoryContext into)
{
	MemoryContext old;
	bool		isnull;
	Datum		d;

	old = MemoryContextSwitchTo(into);

	d = slot_getattr(slot, COL_STATUS, &isnull);
	rec->status = isnull ? pstrdup("") : TextDatumGetCString(d);

	d = slot_getattr(slot, COL_FINGERPRINT, &isnull);
	rec->fingerprint = isnull ? NULL : DatumGetByteaPCopy(d);

	d = slot_getattr(slot, COL_CREATED_AT, &isnull);
	rec->created_at = isnull ? 0 : DatumGetTimestampTz(d);

	d = slot_getattr(slot, COL_EXPIRES_AT, &isnull);
	rec->expires_at = isnull ? 0 : DatumGetTimestampTz(d);

	d = slot_getattr(slot, COL_LOCKED_UNTIL, &isnull);
	rec->has_lock = !isnull;
	rec->locked_until = isnull ? 0 : DatumGetTimestampTz(d);

	MemoryContextSwitchTo(old);
}

/*
 * The OID of idem_records in records_nsp, or InvalidOid: looked up by name
 * once, forgotten by the relcache callback below when that relation (or
 * the whole relcache) is invalidated.
 */
static Oid	records_nsp = InvalidOid;
static Oid	records_relid = InvalidOid;
static bool records_callback = false;

/*
 * Whether Citus manages records_relid (records_citus), valid while
 * records_citus_known: forgotten with the OID.
 */
static bool records_citus_known = false;
static bool records_citus = false;

static void
forget_records_relid(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == records_relid)
	{
		records_relid = InvalidOid;
		records_citus_known = false;
	}
}

/*
 * Is relid a table that Citus manages (distributed, reference or Citus
 * local: a row of pg_catalog.pg_dist_partition)?  False without the citus
 * extension in this database.  Reads the catalog: callers cache.
 */
bool
idem_citus_table(Oid relid)
{
	Oid			catalog;
	Oid			index;
	Relation	pdp;
	ScanKeyData skey;
	SysScanDesc scan;
	bool		found;

	if (!OidIsValid(get_extension_oid("citus", true)))
		return false;
	catalog = get_relname_relid("pg_dist_partition", PG_CATALOG_NAMESPACE);
	if (!OidIsValid(catalog))
		return false;
	index = get_relname_relid("pg_dist_partition_logical_relid_index", PG_CATALOG_NAMESPACE);

	pdp = table_open(catalog, AccessShareLock);
	/* logicalrelid (attribute 1) is a regclass: compared as an oid. */
	ScanKeyInit(&skey, 1, BTEqualStrategyNumber, F_OIDEQ, ObjectIdGetDatum(relid));
	scan = systable_beginscan(pdp, index, OidIsValid(index), NULL, 1, &skey);
	found = HeapTupleIsValid(systable_getnext(scan));
	systable_endscan(scan);
	table_close(pdp, AccessShareLock);
	return found;
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

	if (!records_callback)
	{
		CacheRegisterRelcacheCallback(forget_records_relid, (Datum) 0);
		records_callback = true;
	}
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
		COL_SCOPE, COL_KEY, COL_STATUS, COL_FINGERPRINT, COL_CREATED_AT,
		COL_UPDATED_AT, COL_EXPIRES_AT, COL_LOCKED_UNTIL, COL_ATTEMPTS
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

/*
 * Open the fast path for claims in the extension's schema nsp: NULL when
 * it does not apply (see the header comment; nothing is left open then).
 * Otherwise idem_records stays locked (RowExclusiveLock) to the end of the
 * transaction, as by an INSERT, and the caller must idem_direct_close()
 * the result.  Allocates in the current memory context.
 */
IdemDirect *
idem_direct_open(Oid nsp)
{
	Relation	rel;
	RangeTblEntry *rte;
	IdemDirect *d;

	if (!idem_direct_claim_enabled || IsolationUsesXactSnapshot())
		return NULL;

	rel = open_records(nsp);
	if (rel == NULL)
		return NULL;
	if (!direct_usable(rel))
	{
		table_close(rel, NoLock);
		return NULL;
	}

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

	if (!primary_key_is_scope_key(d->rri))
	{
		idem_direct_close(d);
		return NULL;
	}
	d->arbiters = list_make1_oid(IDEM_PRIMARY_KEY_INDEX(rel));
	return d;
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
 * Insert a 'claimed' record for (scope, key) through the open fast path d,
 * or find the record that is there.  now, expires and fp (NULL: none) are
 * the new record's created_at/updated_at, expires_at and fingerprint.
 *
 * Returns IDEM_DIRECT_INSERTED when the record was inserted, or
 * IDEM_DIRECT_CONFLICT when a committed (or own) record holds the key (its
 * state is in *rec, allocated in the caller's memory context).  Errors are
 * those of an INSERT: 55P03/57014 while waiting for another transaction's
 * claim of the key, 23505 from a unique index a DBA added, 23514 from a
 * CHECK a DBA added.  The caller has checked that the transaction is not
 * read-only (25006).
 */
IdemDirectResult
idem_direct_claim_key(IdemDirect *d, text *scope, text *key, TimestampTz now,
					  TimestampTz expires, bytea *fp, IdemRecordState *rec)
{
	MemoryContext caller = CurrentMemoryContext;
	EState	   *estate = d->estate;
	TupleTableSlot *slot = d->slot;
	Datum		values[NCOLUMNS];
	bool		nulls[NCOLUMNS];
	IdemDirectResult result;
	bool		checked = false;

	ResetPerTupleExprContext(estate);

	memset(nulls, true, sizeof(nulls));
	values[COL_SCOPE - 1] = PointerGetDatum(scope);
	values[COL_KEY - 1] = PointerGetDatum(key);
	values[COL_STATUS - 1] = d->claimed;
	values[COL_FINGERPRINT - 1] = PointerGetDatum(fp);
	values[COL_CREATED_AT - 1] = TimestampTzGetDatum(now);
	values[COL_UPDATED_AT - 1] = TimestampTzGetDatum(now);
	values[COL_EXPIRES_AT - 1] = TimestampTzGetDatum(expires);
	values[COL_ATTEMPTS - 1] = Int32GetDatum(0);
	nulls[COL_SCOPE - 1] = false;
	nulls[COL_KEY - 1] = false;
	nulls[COL_STATUS - 1] = false;
	nulls[COL_FINGERPRINT - 1] = (fp == NULL);
	nulls[COL_CREATED_AT - 1] = false;
	nulls[COL_UPDATED_AT - 1] = false;
	nulls[COL_EXPIRES_AT - 1] = false;
	nulls[COL_ATTEMPTS - 1] = false;

	ExecClearTuple(slot);
	memcpy(slot->tts_values, values, sizeof(values));
	memcpy(slot->tts_isnull, nulls, sizeof(nulls));
	ExecStoreVirtualTuple(slot);

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
			if (!constraints_hold(d->rel, d->nsp, nulls))
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

/*
 * idem_direct_open, idem_direct_claim_key and idem_direct_close for one
 * key: IDEM_DIRECT_DECLINED when the fast path does not apply.
 */
IdemDirectResult
idem_direct_claim(Oid nsp, text *scope, text *key, TimestampTz now,
				  TimestampTz expires, bytea *fp, IdemRecordState *rec)
{
	IdemDirect *d = idem_direct_open(nsp);
	IdemDirectResult result;

	if (d == NULL)
		return IDEM_DIRECT_DECLINED;
	result = idem_direct_claim_key(d, scope, key, now, expires, fp, rec);
	idem_direct_close(d);
	return result;
}

/*
 * fname (idem_guard) on a table that Citus manages: refused up front.  The
 * guard's triggers would have to run on every shard (Citus refuses
 * triggers on distributed tables unless citus.enable_unsafe_triggers is
 * on), and a guard created only on the coordinator's shell table would
 * leave every UPDATE through the coordinator unguarded.
 */
void
idem_refuse_citus_table(Oid relid, const char *table, const char *fname)
{
	if (idem_citus_table(relid))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("%s: table %s is managed by Citus", fname, table),
				 errdetail("Guards on Citus tables are not supported yet: Citus does not put the guard's triggers on the shards, so updates would go through unguarded."),
				 errhint("Keep a guarded table out of Citus (neither distributed nor a reference or local table); docs/citus.md lists what works on Citus.")));
}

/*
 * Is rel a Citus shard (a placement on this node) of the table logical?
 * Its name is logical's followed by _<shard id>, in the same schema, and
 * pg_catalog.pg_dist_shard has that shard id for logical.  False without
 * the citus extension.
 */
bool
idem_citus_shard_of(Relation rel, Oid logical)
{
	const char *name = RelationGetRelationName(rel);
	const char *sep = strrchr(name, '_');
	char	   *lname;
	char	   *end;
	int64		shardid;
	Oid			catalog;
	Oid			index;
	Relation	pds;
	ScanKeyData skey;
	SysScanDesc scan;
	HeapTuple	tup;
	bool		found = false;

	if (!OidIsValid(logical) || sep == NULL || sep[1] == '\0' ||
		RelationGetNamespace(rel) != get_rel_namespace(logical) ||
		!OidIsValid(get_extension_oid("citus", true)))
		return false;
	lname = get_rel_name(logical);
	if (lname == NULL || strlen(lname) != (size_t) (sep - name) ||
		strncmp(name, lname, sep - name) != 0)
		return false;
	errno = 0;
	shardid = strtoi64(sep + 1, &end, 10);
	if (errno != 0 || *end != '\0' || shardid <= 0)
		return false;

	catalog = get_relname_relid("pg_dist_shard", PG_CATALOG_NAMESPACE);
	if (!OidIsValid(catalog))
		return false;
	index = get_relname_relid("pg_dist_shard_shardid_index", PG_CATALOG_NAMESPACE);
	pds = table_open(catalog, AccessShareLock);
	/* shardid (attribute 2) is an int8; logicalrelid (1) a regclass. */
	ScanKeyInit(&skey, 2, BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(shardid));
	scan = systable_beginscan(pds, index, OidIsValid(index), NULL, 1, &skey);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
	{
		bool		isnull;
		Datum		d = heap_getattr(tup, 1, RelationGetDescr(pds), &isnull);

		found = !isnull && DatumGetObjectId(d) == logical;
	}
	systable_endscan(scan);
	table_close(pds, AccessShareLock);
	return found;
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

/*
 * fname (idem_claim_many) while idem_records of schema nsp is a Citus
 * table: refused with a clear error.  Citus cannot plan the batch's
 * INSERT ... SELECT over the keys (a lateral subquery with LIMIT over a
 * table function), and a batch spread over shards would not wait in the
 * sorted key order that keeps batches free of deadlocks.
 */
void
idem_refuse_citus_records(Oid nsp, const char *fname)
{
	if (idem_records_citus(nsp))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("%s: not supported while idem_records is a Citus table", fname),
				 errdetail("Citus cannot run the batch's INSERT ... SELECT over the keys, and a batch spread over shards would not take its keys in the order that keeps batches free of deadlocks."),
				 errhint("Call idem_claim for each key in ascending key order (COLLATE \"C\") inside one transaction.")));
}

/*
 * fname (idem_begin) on a Citus node other than the coordinator while
 * idem_records of schema nsp is a Citus table: refused.  idem_token_seq
 * is a sequence of each node, so a token drawn on a worker could be below
 * one that the coordinator issued for the same key, and fencing would not
 * hold.  The node is the coordinator when pg_catalog.pg_dist_local_group
 * says group 0.
 */
void
idem_refuse_citus_worker_tokens(Oid nsp, const char *fname)
{
	Oid			catalog;
	Relation	rel;
	SysScanDesc scan;
	HeapTuple	tup;
	int32		group = 0;

	if (!idem_records_citus(nsp))
		return;
	catalog = get_relname_relid("pg_dist_local_group", PG_CATALOG_NAMESPACE);
	if (!OidIsValid(catalog))
		return;
	rel = table_open(catalog, AccessShareLock);
	scan = systable_beginscan(rel, InvalidOid, false, NULL, 0, NULL);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
	{
		bool		isnull;
		Datum		d = heap_getattr(tup, 1, RelationGetDescr(rel), &isnull);

		if (!isnull)
			group = DatumGetInt32(d);
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	if (group != 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("%s: fencing tokens are issued on the Citus coordinator only", fname),
				 errdetail("This node is a Citus worker (group %d); its idem_token_seq is its own, so a token drawn here could be below one the coordinator issued for the same key.", group),
				 errhint("Call %s through the coordinator.", fname)));
}
