/*-------------------------------------------------------------------------
 *
 * guard_cache.c
 *	  The per-backend cache of the triggers that idem_guard installs: for
 *	  each trigger OID, what its arguments and the guarded table say
 *	  (attribute numbers, types, role, the machine's name and a
 *	  generation-checked pointer to the compiled machine, the history
 *	  plan).  Used by guard_trigger.c at every firing.
 *
 *	  Calls: machine.c and machine_cache.c (idem_check_machine_name,
 *	  idem_machine_get), citus.c (is the firing relation a Citus shard: then
 *	  the entry names the distributed table, in messages and history, and
 *	  keeps the shard's hash range for the history); called by
 *	  guard_trigger.c only.
 *
 *	  Cache: trigger OID -> GuardEntry, in a dynahash in
 *	  CacheMemoryContext, found through fn_extra without a hash lookup.  A
 *	  relcache callback marks the entries of an invalidated relation stale
 *	  (ALTER TABLE, CREATE/DROP TRIGGER and DROP TABLE all invalidate it);
 *	  they are rebuilt or freed at the next trigger call, never inside the
 *	  callback, and never while their log plan is executing (busy).  An
 *	  entry built while an invalidation arrived is used once, not kept
 *	  valid.  Per row there is no catalog access.
 *
 *	  Errors met while building an entry (a guarded column renamed,
 *	  dropped or retyped since idem_guard) are raised inside the user's
 *	  statement, so their messages begin with what the user did
 *	  ("guarded update of public.orders"), not with idem_guard.
 *
 *	  Locking: none of its own; an entry is built while the trigger's
 *	  statement holds its lock on the table, so the descriptor it reads
 *	  cannot change under it.
 *
 *	  Memory: each entry's strings and arrays live in its own context
 *	  under CacheMemoryContext; its log plan is a saved SPI plan.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/sysattr.h"
#include "access/xact.h"
#include "catalog/objectaddress.h"
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
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/syscache.h"
#include "utils/xid8.h"

#include "idempotency.h"

static HTAB *guard_cache = NULL;
static bool guard_cache_dirty = false;
static uint64 guard_sweeps = 0;	/* entries may have been removed */

/* fn_extra of the trigger function: the entry, without a hash lookup. */
typedef struct GuardCallCache
{
	Oid			tgoid;
	uint64		sweeps;
	GuardEntry *entry;
} GuardCallCache;
static bool guard_callback_registered = false;

/* ------------------------------------------------------------------------
 * The trigger cache
 * ------------------------------------------------------------------------
 */

/* Relcache callback: mark the entries of relid (or all) stale; free nothing. */
static void
guard_cache_callback(Oid relid)
{
	HASH_SEQ_STATUS seq;
	GuardEntry *e;

	if (guard_cache == NULL)
		return;
	hash_seq_init(&seq, guard_cache);
	while ((e = (GuardEntry *) hash_seq_search(&seq)) != NULL)
	{
		if (!OidIsValid(relid) || e->relid == relid)
		{
			e->valid = false;
			e->stale = true;
			guard_cache_dirty = true;
		}
	}
}

static void
guard_entry_release(GuardEntry *e)
{
	if (e->log_plan != NULL)
	{
		SPI_freeplan(e->log_plan);
		e->log_plan = NULL;
	}
	if (e->cxt != NULL)
	{
		MemoryContextDelete(e->cxt);
		e->cxt = NULL;
	}
	e->m = NULL;
}

/* Free the stale entries that are not in use. */
static void
guard_cache_sweep(void)
{
	HASH_SEQ_STATUS seq;
	GuardEntry *e;
	bool		kept = false;

	hash_seq_init(&seq, guard_cache);
	while ((e = (GuardEntry *) hash_seq_search(&seq)) != NULL)
	{
		if (e->valid)
			continue;
		if (e->busy)
		{
			kept = true;
			continue;
		}
		guard_entry_release(e);
		hash_search(guard_cache, &e->tgoid, HASH_REMOVE, NULL);
	}
	guard_cache_dirty = kept;
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

/* 39P01: the firing trigger is not one idem_guard made. */
void
idem_not_a_guard(Trigger *tg)
{
	ereport(ERROR,
			(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
			 errmsg("idem_guard_trigger: trigger \"%s\" was not created by idem_guard()",
					tg->tgname),
			 errhint("Install guards with idem_guard().")));
}

/* The version column of a version trigger's entry: by name, integer or bigint. */
static void
guard_entry_version(GuardEntry *e, TriggerData *td, const char *table)
{
	TupleDesc	desc = RelationGetDescr(td->tg_relation);
	const char *version = td->tg_trigger->tgargs[2];
	Form_pg_attribute attr;

	e->version_att = column_of(desc, version);
	if (e->version_att == InvalidAttrNumber)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("%s: version column \"%s\" of table %s does not exist",
						idem_guard_doing(td, table), version, e->table_name),
				 errhint("After renaming a guarded column, install the guard again with idem_guard().")));
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
 * The role of a trigger, from its arguments as idem_guard wrote them (a
 * fifth only for the log trigger of a guard on a Citus distributed table:
 * its history table); 39P01 for anything else.
 */
static GuardRole
guard_role(Trigger *tg)
{
	GuardRole	role = GUARD_CHECK;

	if (tg->tgnargs != IDEM_GUARD_NARGS && tg->tgnargs != IDEM_GUARD_NARGS + 1)
		idem_not_a_guard(tg);
	if (strcmp(tg->tgargs[3], IDEM_GUARD_ROLE_CHECK) == 0)
		role = GUARD_CHECK;
	else if (strcmp(tg->tgargs[3], IDEM_GUARD_ROLE_VERSION) == 0)
		role = GUARD_VERSION;
	else if (strcmp(tg->tgargs[3], IDEM_GUARD_ROLE_LOG) == 0)
		role = GUARD_LOG;
	else
		idem_not_a_guard(tg);
	if (tg->tgnargs > IDEM_GUARD_NARGS && role != GUARD_LOG)
		idem_not_a_guard(tg);
	return role;
}

/* The cache entry of the firing trigger, built on first use. */
static GuardEntry *
guard_entry(TriggerData *td)
{
	Trigger    *tg = td->tg_trigger;
	Relation	rel = td->tg_relation;
	TupleDesc	desc = RelationGetDescr(rel);
	GuardEntry *e;
	Form_pg_attribute attr;
	MemoryContext old;
	bool		found;
	char	   *nspname;
	char	   *table;
	Oid			logical = InvalidOid;
	char	   *shard_min = NULL;

	if (guard_cache != NULL && !guard_cache_dirty)
	{
		e = (GuardEntry *) hash_search(guard_cache, &tg->tgoid, HASH_FIND, NULL);
		if (e != NULL && e->valid)
			return e;
	}

	if (!guard_callback_registered)
	{
		idem_relcache_subscribe(guard_cache_callback);
		guard_callback_registered = true;
	}
	if (guard_cache == NULL)
	{
		HASHCTL		ctl;

		memset(&ctl, 0, sizeof(ctl));
		ctl.keysize = sizeof(Oid);
		ctl.entrysize = sizeof(GuardEntry);
		ctl.hcxt = CacheMemoryContext;
		guard_cache = hash_create("idempotency guards", 16, &ctl,
								  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	if (guard_cache_dirty)
		guard_cache_sweep();

	e = (GuardEntry *) hash_search(guard_cache, &tg->tgoid, HASH_ENTER, &found);
	if (found && e->valid)
		return e;
	if (!found)
	{
		memset(((char *) e) + sizeof(Oid), 0, sizeof(GuardEntry) - sizeof(Oid));
	}
	else
		guard_entry_release(e);
	e->valid = false;
	e->stale = false;
	e->relid = RelationGetRelid(rel);

	e->role = guard_role(tg);

	/* On a Citus shard, messages and history name the distributed table. */
	e->on_shard = idem_citus_shard_rel(rel, &logical, NULL, &shard_min);
	if (e->on_shard)
		table = quote_qualified_identifier(get_namespace_name(get_rel_namespace(logical)),
										   get_rel_name(logical));
	else
	{
		nspname = get_namespace_name(RelationGetNamespace(rel));
		table = quote_qualified_identifier(nspname, RelationGetRelationName(rel));
	}

	/*
	 * The status column: the one UPDATE OF column when there is one (it
	 * survives renames), else by name.
	 */
	if (tg->tgnattr == 1)
		e->status_att = tg->tgattr[0];
	else
		e->status_att = column_of(desc, tg->tgargs[1]);
	if (e->status_att <= 0 || e->status_att > desc->natts ||
		TupleDescAttr(desc, e->status_att - 1)->attisdropped)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("%s: status column \"%s\" of table %s does not exist",
						idem_guard_doing(td, table), tg->tgargs[1], table),
				 errhint("After renaming a guarded column, install the guard again with idem_guard().")));
	attr = TupleDescAttr(desc, e->status_att - 1);
	e->machine_len = strlen(tg->tgargs[0]);
	idem_check_machine_name(tg->tgargs[0], e->machine_len,
							idem_guard_doing(td, table));
	memcpy(e->machine, tg->tgargs[0], e->machine_len + 1);

	e->cxt = AllocSetContextCreate(CacheMemoryContext, "idempotency guard",
								   ALLOCSET_SMALL_SIZES);
	old = MemoryContextSwitchTo(e->cxt);
	e->table_name = pstrdup(table);
	e->status_name = pstrdup(NameStr(attr->attname));
	e->shard_min = shard_min ? pstrdup(shard_min) : NULL;
	e->history_table = tg->tgnargs > IDEM_GUARD_NARGS ? pstrdup(tg->tgargs[4]) : NULL;
	MemoryContextSwitchTo(old);

	{
		Oid			base = getBaseType(attr->atttypid);

		if (base != TEXTOID && base != VARCHAROID)
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("%s: status column \"%s\" of table %s must be of type text or varchar",
							idem_guard_doing(td, table), e->status_name, e->table_name),
					 errdetail("The column is of type %s.", format_type_be(attr->atttypid)),
					 errhint("Install the guard again with idem_guard() after fixing the column.")));
	}

	if (e->role == GUARD_VERSION)
		guard_entry_version(e, td, table);

	/* Valid unless an invalidation arrived during the build. */
	e->valid = !e->stale;
	return e;
}

/*
 * The prefix of an error raised inside the user's statement on table (a
 * quoted, qualified name): what the user did, "guarded update of t" or
 * "guarded insert into t".
 */
char *
idem_guard_doing(TriggerData *td, const char *table)
{
	return psprintf("guarded %s %s",
					TRIGGER_FIRED_BY_INSERT(td->tg_event) ? "insert into" : "update of",
					table);
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

	e = guard_entry(td);
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
