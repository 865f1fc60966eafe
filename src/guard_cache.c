/*-------------------------------------------------------------------------
 *
 * guard_cache.c
 *	  The per-backend cache of the triggers that idem_guard installs: for
 *	  each trigger OID, what its arguments and the guarded table say
 *	  (attribute numbers, types, role, the machine's name and a
 *	  generation-checked pointer to the compiled machine, the history
 *	  plan), used by guard_trigger.c at every firing.  On a Citus shard the
 *	  entry names the distributed table, in messages and history, and keeps
 *	  the shard's hash range.  What a real guard trigger is, guard_shape.c
 *	  decides.
 *
 *	  Cache: trigger OID -> GuardEntry *, a dynahash in CacheMemoryContext,
 *	  reached through fn_extra without a hash lookup.  The relcache callback
 *	  marks an invalidated relation's entries stale (ALTER TABLE, CREATE and
 *	  DROP TRIGGER, GRANT, DROP TABLE); they are rebuilt or freed at the
 *	  next trigger call, never inside the callback.  An entry built while an
 *	  invalidation arrived is used once, not kept valid.  Per row there is
 *	  no catalog access.
 *
 *	  Invariant (docs/security.md, "re-entrancy is counted, not flagged"):
 *	  an entry in use is counted busy, since user code inside the trigger
 *	  (history casts, triggers, policies) can fire it again, nested; a busy
 *	  entry is never freed: a stale one moves to the orphan list and a later
 *	  sweep frees it once nobody uses it.
 *
 *	  Column identity: the column the trigger depends on in pg_depend
 *	  (through its WHEN condition), which follows renames; the name in the
 *	  arguments must still name it, else the guard refuses to run, so a
 *	  renamed column and a new one of the old name are never confused.
 *	  Errors of a build are raised inside the user's statement and worded
 *	  by guard_error.c ("guarded update of public.orders").
 *
 *	  Locking: none of its own; an entry is built while the statement holds
 *	  its lock on the table, so the descriptor cannot change under it.
 *	  Memory: each entry in its own context under CacheMemoryContext; its
 *	  log plan is a saved SPI plan.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/sysattr.h"
#include "access/xact.h"
#include "catalog/indexing.h"
#include "catalog/objectaddress.h"
#include "catalog/pg_depend.h"
#include "catalog/pg_class.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "common/hashfn.h"
#include "common/int.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "nodes/bitmapset.h"
#include "nodes/nodeFuncs.h"
#include "parser/parse_func.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/syscache.h"
#include "utils/xid8.h"

#include "idempotency.h"
#include "citus.h"
#include "guard.h"
#include "machine.h"

/* The hash entry: the trigger's OID and its entry, allocated apart. */
typedef struct GuardSlot
{
	Oid			tgoid;			/* hash key */
	GuardEntry *entry;
} GuardSlot;

static HTAB *guard_cache = NULL;
static bool guard_cache_dirty = false;
static uint64 guard_sweeps = 0;	/* entries may have been removed */
static GuardEntry *guard_orphans = NULL;	/* stale, busy, out of the hash */

/* fn_extra of the trigger function: the entry, without a hash lookup. */
typedef struct GuardCallCache
{
	Oid			tgoid;
	uint64		sweeps;
	GuardEntry *entry;
} GuardCallCache;

/* ------------------------------------------------------------------------
 * The trigger cache
 * ------------------------------------------------------------------------
 */

/* Relcache callback: mark the entries of relid (or all) stale; free nothing. */
static void
guard_cache_callback(Oid relid)
{
	HASH_SEQ_STATUS seq;
	GuardSlot  *slot;

	if (guard_cache == NULL)
		return;
	hash_seq_init(&seq, guard_cache);
	while ((slot = (GuardSlot *) hash_seq_search(&seq)) != NULL)
	{
		GuardEntry *e = slot->entry;

		if (!OidIsValid(relid) || e->relid == relid)
		{
			e->valid = false;
			e->stale = true;
			guard_cache_dirty = true;
		}
	}
}

/* Subscribe the cache to relcache invalidations (module.c's _PG_init). */
void
idem_guard_cache_init(void)
{
	idem_relcache_subscribe(guard_cache_callback);
}

/* Free an entry that nobody uses: its plan, and its context (itself). */
static void
guard_entry_release(GuardEntry *e)
{
	Assert(e->busy == 0);
	if (e->log_plan != NULL)
	{
		SPI_freeplan(e->log_plan);
		e->log_plan = NULL;
	}
	MemoryContextDelete(e->cxt);
}

/*
 * Take the stale entry of slot out of the hash: freed now when nobody uses
 * it, else put on the orphan list for a later sweep.
 */
static void
guard_entry_retire(GuardSlot *slot)
{
	GuardEntry *e = slot->entry;

	if (e->busy > 0)
	{
		e->orphan_next = guard_orphans;
		guard_orphans = e;
	}
	else
		guard_entry_release(e);
	hash_search(guard_cache, &slot->tgoid, HASH_REMOVE, NULL);
	guard_sweeps++;				/* fn_extra pointers to it are void */
}

/* Free the stale entries and the orphans that are not in use. */
static void
guard_cache_sweep(void)
{
	HASH_SEQ_STATUS seq;
	GuardSlot  *slot;
	GuardEntry **link = &guard_orphans;

	hash_seq_init(&seq, guard_cache);
	while ((slot = (GuardSlot *) hash_seq_search(&seq)) != NULL)
		if (!slot->entry->valid)
			guard_entry_retire(slot);
	while (*link != NULL)
	{
		GuardEntry *e = *link;

		if (e->busy > 0)
			link = &e->orphan_next;
		else
		{
			*link = e->orphan_next;
			guard_entry_release(e);
		}
	}
	guard_cache_dirty = (guard_orphans != NULL);
	guard_sweeps++;
}

/* attnum of a live column of desc called name, or InvalidAttrNumber. */
static AttrNumber
column_of(TupleDesc desc, const char *name)
{
	int			i;

	for (i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute a = TupleDescAttr(desc, i);

		if (!a->attisdropped && strcmp(NameStr(a->attname), name) == 0)
			return i + 1;
	}
	return InvalidAttrNumber;
}

/* The version column of an entry: integer or bigint (42804). */
static AttrNumber guard_column(TriggerData *td, GuardEntry *e, Bitmapset *deps,
							   int argno, const char *what, const char *table);

static void
guard_entry_version(GuardEntry *e, TriggerData *td, Bitmapset *deps, const char *table)
{
	TupleDesc	desc = RelationGetDescr(td->tg_relation);
	const char *version = td->tg_trigger->tgargs[2];
	Form_pg_attribute attr;

	e->version_att = guard_column(td, e, deps, 2, "version", table);
	attr = TupleDescAttr(desc, e->version_att - 1);
	if (attr->atttypid != INT4OID && attr->atttypid != INT8OID)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("%s: version column \"%s\" of table %s must be of type integer or bigint",
						idem_guard_doing(td, table), version, e->table_name),
				 errdetail("The column is of type %s.", format_type_be(attr->atttypid))));
	e->version_int8 = (attr->atttypid == INT8OID);
}

/*
 * The columns of relid that trigger tgoid depends on (pg_depend: its WHEN
 * condition's columns), as attribute numbers.
 */
static Bitmapset *
trigger_columns(Oid tgoid, Oid relid)
{
	Relation	dep = table_open(DependRelationId, AccessShareLock);
	ScanKeyData key[2];
	SysScanDesc scan;
	HeapTuple	tup;
	Bitmapset  *cols = NULL;

	ScanKeyInit(&key[0], Anum_pg_depend_classid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(TriggerRelationId));
	ScanKeyInit(&key[1], Anum_pg_depend_objid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(tgoid));
	scan = systable_beginscan(dep, DependDependerIndexId, true, NULL, 2, key);
	while (HeapTupleIsValid(tup = systable_getnext(scan)))
	{
		Form_pg_depend d = (Form_pg_depend) GETSTRUCT(tup);

		if (d->refclassid == RelationRelationId && d->refobjid == relid &&
			d->refobjsubid > 0)
			cols = bms_add_member(cols, d->refobjsubid);
	}
	systable_endscan(scan);
	table_close(dep, AccessShareLock);
	return cols;
}

/*
 * The column of a guard trigger's entry named by its argument argno (the
 * status or the version column): found by name, and, for a row trigger,
 * the very column its WHEN condition depends on (a column renamed since
 * idem_guard, and a new one of the old name, are not taken for each
 * other).  42703 when there is none, 55000 when the name has moved to
 * another column.
 */
static AttrNumber
guard_column(TriggerData *td, GuardEntry *e, Bitmapset *deps, int argno,
			 const char *what, const char *table)
{
	TupleDesc	desc = RelationGetDescr(td->tg_relation);
	const char *name = td->tg_trigger->tgargs[argno];
	AttrNumber	att = column_of(desc, name);

	if (att == InvalidAttrNumber)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("%s: %s column \"%s\" of table %s does not exist",
						idem_guard_doing(td, table), what, name, table),
				 errhint("After renaming a guarded column, install the guard again with idem_guard().")));
	if (e->role != GUARD_CHILDREN && !bms_is_member(att, deps))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("%s: %s column \"%s\" of table %s is not the column the guard was installed on",
						idem_guard_doing(td, table), what, name, table),
				 errdetail("Trigger \"%s\" watches another column: the guarded column was renamed, and \"%s\" is a column added since.",
						   td->tg_trigger->tgname, name),
				 errhint("Install the guard again with idem_guard() on the column you mean, and remove the old one with idem_unguard().")));
	return att;
}

/*
 * The valid cache entry of trigger tgoid, or NULL (creating the cache, and
 * sweeping it after invalidations, first).  An entry whose build failed
 * is retired.
 */
static GuardEntry *
guard_cache_lookup(Oid tgoid)
{
	GuardSlot  *slot;

	if (guard_cache != NULL && !guard_cache_dirty)
	{
		slot = (GuardSlot *) hash_search(guard_cache, &tgoid, HASH_FIND, NULL);
		if (slot != NULL && slot->entry->valid)
			return slot->entry;
	}

	if (guard_cache == NULL)
	{
		HASHCTL		ctl;

		memset(&ctl, 0, sizeof(ctl));
		ctl.keysize = sizeof(Oid);
		ctl.entrysize = sizeof(GuardSlot);
		ctl.hcxt = CacheMemoryContext;
		guard_cache = hash_create("idempotency guards", 16, &ctl,
								  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	if (guard_cache_dirty)
		guard_cache_sweep();

	slot = (GuardSlot *) hash_search(guard_cache, &tgoid, HASH_FIND, NULL);
	if (slot != NULL && slot->entry->valid)
		return slot->entry;
	if (slot != NULL)
		guard_entry_retire(slot);	/* a build that failed */
	return NULL;
}

/*
 * A new, not yet valid entry for trigger tg of rel (role role), in the
 * cache, in a memory context of its own.
 */
static GuardEntry *
guard_entry_new(Trigger *tg, Relation rel, GuardRole role)
{
	MemoryContext cxt;
	GuardEntry *e;
	GuardSlot  *slot;
	bool		found;

	cxt = AllocSetContextCreate(CacheMemoryContext, "idempotency guard",
								ALLOCSET_SMALL_SIZES);
	e = MemoryContextAllocZero(cxt, sizeof(GuardEntry));
	e->cxt = cxt;
	e->tgoid = tg->tgoid;
	slot = (GuardSlot *) hash_search(guard_cache, &tg->tgoid, HASH_ENTER, &found);
	slot->entry = e;
	e->valid = false;
	e->stale = false;
	e->relid = RelationGetRelid(rel);
	e->role = role;
	return e;
}

/*
 * The status column of entry e (the first trigger argument names it,
 * deps says which columns the trigger depends on), its machine's name,
 * and the names of messages and history, on table (quoted, qualified).
 * 42804 when the column is no longer text or varchar.
 */
static void
guard_entry_status(GuardEntry *e, TriggerData *td, Bitmapset *deps,
				   const char *table, const char *shard_min)
{
	Trigger    *tg = td->tg_trigger;
	Form_pg_attribute attr;
	MemoryContext old;
	Oid			base;

	e->status_att = guard_column(td, e, deps, 1, "status", table);
	attr = TupleDescAttr(RelationGetDescr(td->tg_relation), e->status_att - 1);
	e->machine_len = strlen(tg->tgargs[0]);
	idem_check_machine_name(tg->tgargs[0], e->machine_len,
							idem_guard_doing(td, table));
	memcpy(e->machine, tg->tgargs[0], e->machine_len + 1);

	old = MemoryContextSwitchTo(e->cxt);
	e->table_name = pstrdup(table);
	e->status_name = pstrdup(NameStr(attr->attname));
	e->shard_min = shard_min ? pstrdup(shard_min) : NULL;
	e->history_table = tg->tgnargs > IDEM_GUARD_NARGS ? pstrdup(tg->tgargs[4]) : NULL;
	MemoryContextSwitchTo(old);

	base = getBaseType(attr->atttypid);
	if (base != TEXTOID && base != VARCHAROID)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("%s: status column \"%s\" of table %s must be of type text or varchar",
						idem_guard_doing(td, table), e->status_name, e->table_name),
				 errdetail("The column is of type %s.", format_type_be(attr->atttypid)),
				 errhint("Install the guard again with idem_guard() after fixing the column.")));
}

/* The cache entry of the firing trigger, built on first use. */
static GuardEntry *
guard_entry(FunctionCallInfo fcinfo, TriggerData *td)
{
	Trigger    *tg = td->tg_trigger;
	Relation	rel = td->tg_relation;
	GuardEntry *e;
	char	   *table;
	Oid			logical = InvalidOid;
	char	   *shard_min = NULL;
	GuardRole	role;
	Bitmapset  *deps = NULL;

	e = guard_cache_lookup(tg->tgoid);
	if (e != NULL)
		return e;

	/* Only a trigger shaped as idem_guard makes it (39P01). */
	if (!idem_guard_trigger_is_real(RelationGetRelid(rel), tg->tgtype, tg->tgnattr, tg->tgqual,
									tg->tgnargs, tg->tgargs,
									idem_guard_allows_oid(idem_extension_schema(fcinfo)),
									&role, NULL))
		idem_not_a_guard(tg);
	if (role != GUARD_CHILDREN)
		deps = trigger_columns(tg->tgoid, RelationGetRelid(rel));

	e = guard_entry_new(tg, rel, role);

	/* On a Citus shard, messages and history name the distributed table. */
	e->on_shard = idem_citus_shard_rel(rel, &logical, NULL, &shard_min);
	if (e->on_shard)
		table = quote_qualified_identifier(get_namespace_name(get_rel_namespace(logical)),
										   get_rel_name(logical));
	else
		table = quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
										   RelationGetRelationName(rel));

	guard_entry_status(e, td, deps, table, shard_min);

	/* The version column: of the version trigger, and checked by the check. */
	if (tg->tgargs[2][0] != '\0' &&
		(role == GUARD_VERSION || (role == GUARD_CHECK && TRIGGER_FIRED_BY_UPDATE(td->tg_event))))
		guard_entry_version(e, td, deps, table);

	/* Valid unless an invalidation arrived during the build. */
	e->valid = !e->stale;
	return e;
}

/*
 * The machine of an entry, through its generation-checked pointer; 42704
 * when it was dropped.
 */
IdemMachine *
idem_guard_machine(GuardEntry *e, FunctionCallInfo fcinfo, TriggerData *td)
{
	IdemMachine *m;
	bool		cached;

	if (e->m != NULL && e->m_gen == idem_machine_generation)
		return e->m;
	m = idem_machine_get(idem_extension_schema(fcinfo), e->machine,
						 e->machine_len, idem_guard_doing(td, e->table_name),
						 &cached);
	if (cached)
	{
		e->m = m;
		e->m_gen = idem_machine_generation;
	}
	return m;
}

/*
 * The cache entry of the firing trigger, through fn_extra (no hash lookup
 * while nothing was invalidated), else built by guard_entry.
 */
GuardEntry *
idem_guard_entry(FunctionCallInfo fcinfo, TriggerData *td)
{
	GuardCallCache *cc = (GuardCallCache *) fcinfo->flinfo->fn_extra;
	GuardEntry *e;

	if (cc != NULL && cc->tgoid == td->tg_trigger->tgoid &&
		cc->sweeps == guard_sweeps && cc->entry->valid)
		return cc->entry;

	e = guard_entry(fcinfo, td);
	if (cc == NULL)
	{
		cc = MemoryContextAlloc(fcinfo->flinfo->fn_mcxt, sizeof(GuardCallCache));
		fcinfo->flinfo->fn_extra = cc;
	}
	cc->tgoid = td->tg_trigger->tgoid;
	cc->sweeps = guard_sweeps;
	cc->entry = e;
	return e;
}
