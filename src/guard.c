/*-------------------------------------------------------------------------
 *
 * guard.c
 *	  Table guards: idem_guard installs C triggers that enforce a state
 *	  machine (machine.c) on a status column, whatever SQL touches the
 *	  table; idem_unguard removes them.
 *
 *	  A guard on column c of table t, machine m, is a set of row triggers,
 *	  all running idem_guard_trigger(m, c, version column or '', role):
 *	    idem_guard_check_<c>    AFTER UPDATE OF c
 *	                            WHEN (NOT idem_guard_allows(m, OLD.c, NEW.c))
 *	    idem_guard_insert_<c>   AFTER INSERT
 *	                            WHEN (NEW.c IS NULL OR
 *	                                  NOT idem_guard_allows(m, NULL, NEW.c))
 *	    idem_guard_version_<c>  BEFORE UPDATE OF c, v       (version column v)
 *	                            WHEN (OLD.c, NEW.c differ, by pg_catalog operators)
 *	    idem_guard_log_<c>      AFTER INSERT OR UPDATE OF c (history)
 *	  The check lives in the WHEN condition, which PostgreSQL evaluates
 *	  while it saves the trigger event: a legal row costs one call of
 *	  idem_guard_allows (a cached machine, two binary searches) and no
 *	  queued event, no re-fetch of the row, no trigger call.  Only a row
 *	  that breaks the machine fires idem_guard_trigger, which finds out why
 *	  and raises ID004 at the end of the statement, rolling it back.
 *	  Being AFTER, the check sees the row as written, after every BEFORE
 *	  trigger, and only rows really written (not those ON CONFLICT or a
 *	  BEFORE trigger skipped).  Rules (machine.c: idem_guard_allows): an
 *	  INSERT, or an UPDATE from NULL, must use an initial state; an UPDATE
 *	  that changes the value must follow a declared transition; the same
 *	  value always passes.  The version trigger sets the version column to
 *	  the old version + 1 on every change; the log trigger appends each
 *	  change (inserts included, from NULL) to idem_transition_log through a
 *	  saved plan.
 *
 *	  pg_trigger is the only registry: dropping the table drops the guard,
 *	  and DROP EXTENSION ... CASCADE drops the triggers (without CASCADE it
 *	  refuses, as for any dependent object); dropping the status column
 *	  needs CASCADE too, and drops them.  idem_unguard and idem_guard find
 *	  a guard's triggers by function and by their dependency on the status
 *	  column (pg_depend), not by name, so renames do not lose them.  The
 *	  arguments are names, not attribute numbers, so that a dump restores
 *	  them correctly; after renaming a guarded column, call idem_guard
 *	  again to refresh them.
 *
 *	  Cache: trigger OID -> entry (attribute numbers, types, machine
 *	  pointer, log plan), in a dynahash in CacheMemoryContext, found
 *	  through fn_extra without a hash lookup.  A relcache callback marks
 *	  the entries of an invalidated relation stale (ALTER TABLE,
 *	  CREATE/DROP TRIGGER and DROP TABLE all invalidate it); they are
 *	  rebuilt or freed at the next trigger call, never inside the callback,
 *	  and never while their log plan is executing.  Per row there is no
 *	  catalog access and no SPI except the history INSERT.
 *
 *	  Locking: idem_guard takes ShareRowExclusiveLock on the table (as
 *	  CREATE TRIGGER does) and idem_unguard AccessExclusiveLock (as DROP
 *	  TRIGGER does), after checking the TRIGGER privilege so that nobody
 *	  can lock a table they may not guard.
 *
 *	  Partitioned tables are refused: a row moved to another partition is
 *	  inserted there anew, which would have to be an initial state.
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

PG_FUNCTION_INFO_V1(idem_guard);
PG_FUNCTION_INFO_V1(idem_unguard);
PG_FUNCTION_INFO_V1(idem_guard_trigger);

#define GUARD_PREFIX	"idem_guard_"

/* The fourth trigger argument. */
#define ROLE_CHECK		"check"
#define ROLE_VERSION	"version"
#define ROLE_LOG		"log"
#define GUARD_NARGS		4

typedef enum GuardRole
{
	GUARD_CHECK,
	GUARD_VERSION,
	GUARD_LOG
} GuardRole;

typedef struct GuardEntry
{
	Oid			tgoid;			/* hash key */
	bool		valid;			/* usable as is */
	bool		stale;			/* invalidated since the build started */
	bool		busy;			/* its log plan is executing */
	Oid			relid;
	MemoryContext cxt;			/* the strings and arrays below */
	AttrNumber	status_att;
	AttrNumber	version_att;	/* 0: no version column */
	bool		version_int8;
	GuardRole	role;
	int			machine_len;
	char		machine[IDEM_MAX_MACHINE_BYTES + 1];
	IdemMachine *m;				/* valid while m_gen is current */
	uint64		m_gen;
	char	   *table_name;		/* schema-qualified, quoted as needed */
	char	   *status_name;
	/* history (AFTER trigger only) */
	int			npk;
	AttrNumber *pk_atts;
	SPIPlanPtr	log_plan;
} GuardEntry;

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

/*
 * The triggers of idem_guard_trigger on a table that depend on one of its
 * columns (each guard trigger does, through UPDATE OF or WHEN): the
 * triggers of the guard of that column, whatever the column or the
 * triggers are called now.
 */
static IdemQuery q_guard_triggers = {
	"SELECT t.tgname::pg_catalog.text"
	" FROM pg_catalog.pg_trigger t"
	" JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) t.tgfoid"
	" WHERE t.tgrelid OPERATOR(pg_catalog.=) $2"
	" AND p.pronamespace OPERATOR(pg_catalog.=) $1"
	" AND p.proname OPERATOR(pg_catalog.=) 'idem_guard_trigger'"
	" AND EXISTS (SELECT FROM pg_catalog.pg_depend d"
	"   WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_trigger'::pg_catalog.regclass"
	"   AND d.objid OPERATOR(pg_catalog.=) t.oid"
	"   AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass"
	"   AND d.refobjid OPERATOR(pg_catalog.=) t.tgrelid"
	"   AND d.refobjsubid OPERATOR(pg_catalog.=) $3)"
	" ORDER BY 1",
	3, {OIDOID, OIDOID, INT4OID}
};

/* Every trigger of idem_guard_trigger in the database, with its arguments. */
static IdemQuery q_guards_all = {
	"SELECT t.tgargs, t.tgtype::pg_catalog.int4,"
	"       pg_catalog.format('%I.%I', n.nspname, c.relname)"
	" FROM pg_catalog.pg_trigger t"
	" JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) t.tgfoid"
	" JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) t.tgrelid"
	" JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace"
	" WHERE p.pronamespace OPERATOR(pg_catalog.=) $1"
	" AND p.proname OPERATOR(pg_catalog.=) 'idem_guard_trigger'"
	" ORDER BY 3, t.tgname",
	1, {OIDOID}
};

/*
 * Split pg_trigger.tgargs into its n NUL-terminated strings; false when
 * there are fewer than n.
 */
static bool
split_tgargs(bytea *args, char **out, int n)
{
	char	   *p = VARDATA_ANY(args);
	char	   *end = p + VARSIZE_ANY_EXHDR(args);
	int			i;

	for (i = 0; i < n; i++)
	{
		char	   *nul = memchr(p, '\0', end - p);

		if (nul == NULL)
			return false;
		out[i] = pnstrdup(p, nul - p);
		p = nul + 1;
	}
	return true;
}

/* ------------------------------------------------------------------------
 * The trigger cache
 * ------------------------------------------------------------------------
 */

/* Relcache callback: mark the entries of relid (or all) stale; free nothing. */
static void
guard_cache_callback(Datum arg, Oid relid)
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

static void
not_a_guard(Trigger *tg)
{
	ereport(ERROR,
			(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
			 errmsg("idem_guard_trigger: trigger \"%s\" was not created by idem_guard()",
					tg->tgname),
			 errhint("Install guards with idem_guard().")));
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
	const char *version;
	bool		found;
	char	   *nspname;
	char	   *table;

	if (guard_cache != NULL && !guard_cache_dirty)
	{
		e = (GuardEntry *) hash_search(guard_cache, &tg->tgoid, HASH_FIND, NULL);
		if (e != NULL && e->valid)
			return e;
	}

	if (!guard_callback_registered)
	{
		CacheRegisterRelcacheCallback(guard_cache_callback, (Datum) 0);
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

	/* Arguments, as idem_guard wrote them. */
	if (tg->tgnargs != GUARD_NARGS)
		not_a_guard(tg);
	if (strcmp(tg->tgargs[3], ROLE_CHECK) == 0)
		e->role = GUARD_CHECK;
	else if (strcmp(tg->tgargs[3], ROLE_VERSION) == 0)
		e->role = GUARD_VERSION;
	else if (strcmp(tg->tgargs[3], ROLE_LOG) == 0)
		e->role = GUARD_LOG;
	else
		not_a_guard(tg);
	nspname = get_namespace_name(RelationGetNamespace(rel));
	table = quote_qualified_identifier(nspname, RelationGetRelationName(rel));

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
				 errmsg("idem_guard: status column \"%s\" of table %s does not exist",
						tg->tgargs[1], table),
				 errhint("After renaming a guarded column, install the guard again with idem_guard().")));
	attr = TupleDescAttr(desc, e->status_att - 1);
	e->machine_len = strlen(tg->tgargs[0]);
	idem_check_machine_name(tg->tgargs[0], e->machine_len, "idem_guard");
	memcpy(e->machine, tg->tgargs[0], e->machine_len + 1);

	e->cxt = AllocSetContextCreate(CacheMemoryContext, "idempotency guard",
								   ALLOCSET_SMALL_SIZES);
	old = MemoryContextSwitchTo(e->cxt);
	e->table_name = pstrdup(table);
	e->status_name = pstrdup(NameStr(attr->attname));
	MemoryContextSwitchTo(old);

	{
		Oid			base = getBaseType(attr->atttypid);

		if (base != TEXTOID && base != VARCHAROID)
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("idem_guard: status column \"%s\" of table %s must be of type text or varchar",
							e->status_name, e->table_name),
					 errdetail("The column is of type %s.", format_type_be(attr->atttypid)),
					 errhint("Install the guard again with idem_guard() after fixing the column.")));
	}

	version = tg->tgargs[2];
	if (e->role == GUARD_VERSION)
	{
		e->version_att = column_of(desc, version);
		if (e->version_att == InvalidAttrNumber)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("idem_guard: version column \"%s\" of table %s does not exist",
							version, e->table_name),
					 errhint("After renaming a guarded column, install the guard again with idem_guard().")));
		attr = TupleDescAttr(desc, e->version_att - 1);
		if (attr->atttypid != INT4OID && attr->atttypid != INT8OID)
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("idem_guard: version column \"%s\" of table %s must be of type integer or bigint",
							version, e->table_name),
					 errdetail("The column is of type %s.", format_type_be(attr->atttypid))));
		e->version_int8 = (attr->atttypid == INT8OID);
	}

	/* Valid unless an invalidation arrived during the build. */
	e->valid = !e->stale;
	return e;
}

/* The machine of an entry, through its generation-checked pointer. */
static IdemMachine *
guard_machine(GuardEntry *e, FunctionCallInfo fcinfo)
{
	IdemMachine *m;
	bool		cached;

	if (e->m != NULL && e->m_gen == idem_machine_generation)
		return e->m;
	m = idem_machine_get(idem_extension_schema(fcinfo), e->machine,
						 e->machine_len, "idem_guard", &cached);
	if (cached)
	{
		e->m = m;
		e->m_gen = idem_machine_generation;
	}
	return m;
}

/* ------------------------------------------------------------------------
 * The checks
 * ------------------------------------------------------------------------
 */

/* A status value for messages: "quoted", or NULL. */
static char *
show(text *t)
{
	return t == NULL ? pstrdup("NULL") : psprintf("\"%s\"", text_to_cstring(t));
}

static int
state_of(IdemMachine *m, text *t)
{
	return t == NULL ? -1 : idem_machine_state(m, VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
}

static text *
status_value(HeapTuple tuple, GuardEntry *e, TupleDesc desc)
{
	bool		isnull;
	Datum		d = heap_getattr(tuple, e->status_att, desc, &isnull);

	return isnull ? NULL : DatumGetTextPP(d);
}

static bool
same_value(text *a, text *b)
{
	if (a == NULL || b == NULL)
		return a == b;
	return VARSIZE_ANY_EXHDR(a) == VARSIZE_ANY_EXHDR(b) &&
		memcmp(VARDATA_ANY(a), VARDATA_ANY(b), VARSIZE_ANY_EXHDR(a)) == 0;
}

/* A row entering the machine (INSERT, or UPDATE from NULL) with status to. */
static void
check_entry_state(GuardEntry *e, IdemMachine *m, Relation rel, text *to)
{
	int			s = state_of(m, to);

	if (s >= 0 && idem_machine_is_initial(m, s))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_IDEM_ILLEGAL_TRANSITION),
			 errmsg("idem_guard: illegal initial state %s", show(to)),
			 errdetail("Machine \"%s\" does not allow a row to start in %s (column \"%s\" of table %s).",
					   idem_machine_name(m), show(to), e->status_name, e->table_name),
			 errhint("The initial states are %s.", idem_machine_initial_list(m)),
			 errtablecol(rel, e->status_att)));
}

/* An UPDATE from a non-NULL from to a different to. */
static void
check_transition(GuardEntry *e, IdemMachine *m, Relation rel, text *from, text *to)
{
	int			f = state_of(m, from);
	int			t = state_of(m, to);
	const char *mname = idem_machine_name(m);

	if (f >= 0 && t >= 0 && idem_machine_allows(m, f, t))
		return;

	if (t < 0)
		ereport(ERROR,
				(errcode(ERRCODE_IDEM_ILLEGAL_TRANSITION),
				 errmsg("idem_guard: illegal transition from %s to %s", show(from), show(to)),
				 errdetail("Machine \"%s\" does not allow the transition from %s to %s: %s is not a state of the machine (column \"%s\" of table %s).",
						   mname, show(from), show(to), show(to),
						   e->status_name, e->table_name),
				 errhint("The states of machine \"%s\" are %s.", mname,
						 idem_machine_state_list(m)),
				 errtablecol(rel, e->status_att)));
	if (f < 0)
		ereport(ERROR,
				(errcode(ERRCODE_IDEM_ILLEGAL_TRANSITION),
				 errmsg("idem_guard: illegal transition from %s to %s", show(from), show(to)),
				 errdetail("Machine \"%s\" does not allow the transition from %s to %s: the current value %s is not a state of the machine (column \"%s\" of table %s).",
						   mname, show(from), show(to), show(from),
						   e->status_name, e->table_name),
				 errhint("Add the state to the machine with idem_machine_define(), or leave the value unchanged."),
				 errtablecol(rel, e->status_att)));
	ereport(ERROR,
			(errcode(ERRCODE_IDEM_ILLEGAL_TRANSITION),
			 errmsg("idem_guard: illegal transition from %s to %s", show(from), show(to)),
			 errdetail("Machine \"%s\" does not allow the transition from %s to %s (column \"%s\" of table %s).",
					   mname, show(from), show(to), e->status_name, e->table_name),
			 errhint("%s", idem_machine_targets_hint(m, f)),
			 errtablecol(rel, e->status_att)));
}

/* newtuple with the version column set to the old version + 1. */
static HeapTuple
bump_version(GuardEntry *e, Relation rel, HeapTuple oldtuple, HeapTuple newtuple)
{
	TupleDesc	desc = RelationGetDescr(rel);
	bool		isnull;
	Datum		d = heap_getattr(oldtuple, e->version_att, desc, &isnull);
	int			col = e->version_att;
	bool		newnull = false;
	Datum		val;
	const char *vname = NameStr(TupleDescAttr(desc, e->version_att - 1)->attname);

	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("idem_guard: version column \"%s\" of table %s is null",
						vname, e->table_name),
				 errdetail("A status change increments the version, and a null version cannot be incremented."),
				 errhint("Give the column a NOT NULL constraint and a default, for example 0."),
				 errtablecol(rel, e->version_att)));
	if (e->version_int8)
	{
		int64		v;

		if (pg_add_s64_overflow(DatumGetInt64(d), 1, &v))
			ereport(ERROR,
					(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
					 errmsg("idem_guard: version column \"%s\" of table %s is out of range",
							vname, e->table_name),
					 errtablecol(rel, e->version_att)));
		val = Int64GetDatum(v);
	}
	else
	{
		int32		v;

		if (pg_add_s32_overflow(DatumGetInt32(d), 1, &v))
			ereport(ERROR,
					(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
					 errmsg("idem_guard: version column \"%s\" of table %s is out of range",
							vname, e->table_name),
					 errtablecol(rel, e->version_att)));
		val = Int32GetDatum(v);
	}
	return heap_modify_tuple_by_cols(newtuple, desc, 1, &col, &val, &newnull);
}

/*
 * Check the change td's row makes to the status column, failing with
 * ID004 when the machine does not allow it; false when it makes no change
 * (an UPDATE keeping the value).  The rules are those of
 * idem_guard_allows, which has usually let the row pass already.
 */
static bool
guard_check(GuardEntry *e, FunctionCallInfo fcinfo, TriggerData *td)
{
	Relation	rel = td->tg_relation;
	TupleDesc	desc = RelationGetDescr(rel);
	IdemMachine *m;
	text	   *from;
	text	   *to;

	if (TRIGGER_FIRED_BY_INSERT(td->tg_event))
	{
		to = status_value(td->tg_trigtuple, e, desc);
		m = guard_machine(e, fcinfo);
		check_entry_state(e, m, rel, to);
		return true;
	}

	from = status_value(td->tg_trigtuple, e, desc);
	to = status_value(td->tg_newtuple, e, desc);
	if (same_value(from, to))
		return false;

	m = guard_machine(e, fcinfo);
	if (from == NULL)
		check_entry_state(e, m, rel, to);
	else
		check_transition(e, m, rel, from, to);
	return true;
}

/* ------------------------------------------------------------------------
 * History
 * ------------------------------------------------------------------------
 */

/*
 * Prepare the INSERT into idem_transition_log for this entry's table:
 * $1 table, $2 column, $3 from, $4 to, $5 xact id, $6... the primary key
 * columns, turned into a jsonb object by jsonb_build_object (so each value
 * keeps its JSON type).  Called between SPI_connect and SPI_finish.
 */
static void
guard_log_prepare(GuardEntry *e, Relation rel, Oid nsp)
{
	TupleDesc	desc = RelationGetDescr(rel);
	Bitmapset  *pk = RelationGetIndexAttrBitmap(rel, INDEX_ATTR_BITMAP_PRIMARY_KEY);
	char	   *nspname = get_namespace_name(nsp);
	StringInfoData sql;
	Oid		   *argtypes;
	int			npk = bms_num_members(pk);
	int			x = -1;
	int			i = 0;
	SPIPlanPtr	plan;

	if (nspname == NULL)
		elog(ERROR, "cache lookup failed for schema %u", nsp);

	e->npk = npk;
	e->pk_atts = MemoryContextAlloc(e->cxt, sizeof(AttrNumber) * Max(npk, 1));
	argtypes = palloc(sizeof(Oid) * (5 + npk));
	argtypes[0] = TEXTOID;
	argtypes[1] = TEXTOID;
	argtypes[2] = TEXTOID;
	argtypes[3] = TEXTOID;
	argtypes[4] = XID8OID;

	initStringInfo(&sql);
	appendStringInfo(&sql,
					 "INSERT INTO %s.idem_transition_log"
					 " (table_name, status_column, row_key, from_state, to_state, xact_id)"
					 " VALUES ($1, $2, ",
					 quote_identifier(nspname));
	if (npk == 0)
		appendStringInfoString(&sql, "NULL");
	else
	{
		appendStringInfoString(&sql, "pg_catalog.jsonb_build_object(");
		while ((x = bms_next_member(pk, x)) >= 0)
		{
			AttrNumber	att = x + FirstLowInvalidHeapAttributeNumber;
			Form_pg_attribute a;

			if (att <= 0 || att > desc->natts)
				elog(ERROR, "primary key of \"%s\" has attribute number %d",
					 RelationGetRelationName(rel), att);
			a = TupleDescAttr(desc, att - 1);
			e->pk_atts[i] = att;
			argtypes[5 + i] = a->atttypid;
			appendStringInfo(&sql, "%s%s, $%d", i > 0 ? ", " : "",
							 quote_literal_cstr(NameStr(a->attname)), 6 + i);
			i++;
		}
		appendStringInfoChar(&sql, ')');
	}
	appendStringInfoString(&sql, ", $3, $4, $5)");

	plan = SPI_prepare(sql.data, 5 + npk, argtypes);
	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed for \"%s\": %s",
			 sql.data, SPI_result_code_string(SPI_result));
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "SPI_keepplan failed");
	e->log_plan = plan;
}

/* AFTER ROW: append the change, if there is one, to idem_transition_log. */
static void
guard_log(GuardEntry *e, FunctionCallInfo fcinfo, TriggerData *td)
{
	Relation	rel = td->tg_relation;
	TupleDesc	desc = RelationGetDescr(rel);
	HeapTuple	row;
	text	   *from = NULL;
	text	   *to;
	Datum	   *values;
	char	   *nulls;
	int			i;
	volatile int rc = 0;

	if (TRIGGER_FIRED_BY_INSERT(td->tg_event))
		row = td->tg_trigtuple;
	else
	{
		row = td->tg_newtuple;
		from = status_value(td->tg_trigtuple, e, desc);
	}
	to = status_value(row, e, desc);
	if (TRIGGER_FIRED_BY_UPDATE(td->tg_event) && same_value(from, to))
		return;

	idem_spi_connect();
	if (e->log_plan == NULL)
		guard_log_prepare(e, rel, idem_extension_schema(fcinfo));

	values = palloc(sizeof(Datum) * (5 + e->npk));
	nulls = palloc(5 + e->npk);
	memset(nulls, ' ', 5 + e->npk);
	values[0] = CStringGetTextDatum(e->table_name);
	values[1] = CStringGetTextDatum(e->status_name);
	values[2] = PointerGetDatum(from);
	if (from == NULL)
		nulls[2] = 'n';
	values[3] = PointerGetDatum(to);
	if (to == NULL)
		nulls[3] = 'n';
	values[4] = FullTransactionIdGetDatum(GetTopFullTransactionId());
	for (i = 0; i < e->npk; i++)
	{
		bool		isnull;

		values[5 + i] = heap_getattr(row, e->pk_atts[i], desc, &isnull);
		if (isnull)
			nulls[5 + i] = 'n';
	}

	e->busy = true;
	PG_TRY();
	{
		rc = SPI_execute_plan(e->log_plan, values, nulls, false, 0);
	}
	PG_FINALLY();
	{
		e->busy = false;
	}
	PG_END_TRY();
	if (rc != SPI_OK_INSERT)
		elog(ERROR, "SPI_execute_plan failed: %s", SPI_result_code_string(rc));
	SPI_finish();
}

/*
 * idem_guard_trigger() RETURNS trigger
 *
 * The trigger installed by idem_guard; not callable directly (39P01).
 * BEFORE: fails with ID004 (an illegal initial state or transition, or a
 * value that is not a state), 42704 (the machine was dropped), 22004/22003
 * (the version column is NULL or would overflow), 42804/42703 (a column
 * changed type or vanished since idem_guard).  AFTER: writes the history.
 */
Datum
idem_guard_trigger(PG_FUNCTION_ARGS)
{
	TriggerData *td;
	GuardEntry *e;
	GuardCallCache *cc;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("idem_guard_trigger: not called by the trigger manager")));
	td = (TriggerData *) fcinfo->context;
	if (!TRIGGER_FIRED_FOR_ROW(td->tg_event) ||
		!(TRIGGER_FIRED_BY_INSERT(td->tg_event) || TRIGGER_FIRED_BY_UPDATE(td->tg_event)))
		not_a_guard(td->tg_trigger);

	cc = (GuardCallCache *) fcinfo->flinfo->fn_extra;
	if (cc != NULL && cc->tgoid == td->tg_trigger->tgoid &&
		cc->sweeps == guard_sweeps && cc->entry->valid)
		e = cc->entry;
	else
	{
		e = guard_entry(td);
		if (cc == NULL)
		{
			cc = MemoryContextAlloc(fcinfo->flinfo->fn_mcxt, sizeof(GuardCallCache));
			fcinfo->flinfo->fn_extra = cc;
		}
		cc->tgoid = td->tg_trigger->tgoid;
		cc->sweeps = guard_sweeps;
		cc->entry = e;
	}

	switch (e->role)
	{
		case GUARD_CHECK:
			/* The WHEN condition said no: find out why, and fail. */
			if (TRIGGER_FIRED_BEFORE(td->tg_event))
				not_a_guard(td->tg_trigger);
			guard_check(e, fcinfo, td);
			break;
		case GUARD_VERSION:
			if (!TRIGGER_FIRED_BEFORE(td->tg_event) ||
				!TRIGGER_FIRED_BY_UPDATE(td->tg_event))
				not_a_guard(td->tg_trigger);
			if (same_value(status_value(td->tg_trigtuple, e, RelationGetDescr(td->tg_relation)),
						   status_value(td->tg_newtuple, e, RelationGetDescr(td->tg_relation))))
				return PointerGetDatum(td->tg_newtuple);
			return PointerGetDatum(bump_version(e, td->tg_relation,
												td->tg_trigtuple, td->tg_newtuple));
		case GUARD_LOG:
			if (TRIGGER_FIRED_BEFORE(td->tg_event))
				not_a_guard(td->tg_trigger);
			guard_log(e, fcinfo, td);
			break;
	}
	return PointerGetDatum(NULL);
}

/* ------------------------------------------------------------------------
 * idem_guard, idem_unguard
 * ------------------------------------------------------------------------
 */

/*
 * "idem_guard_<role>_<column>", or, when that does not fit in NAMEDATALEN,
 * the column clipped (on a character boundary) followed by a hash of the
 * whole column name, so that long names stay distinct and deterministic.
 * The role comes first: no role is a prefix of another, so the triggers of
 * two columns (say x and x_log) can never share a name.
 */
static char *
guard_trigger_name(const char *role, const char *column)
{
	int			collen = strlen(column);
	char	   *head = psprintf("%s%s_", GUARD_PREFIX, role);
	char	   *tail;
	int			room;

	if (strlen(head) + collen < NAMEDATALEN)
		return psprintf("%s%s", head, column);

	tail = psprintf("_%08x", hash_bytes((const unsigned char *) column, collen));
	room = NAMEDATALEN - 1 - strlen(head) - strlen(tail);
	return psprintf("%s%.*s%s", head, pg_mbcliplen(column, collen, room), column, tail);
}

/*
 * Check the TRIGGER privilege, then lock the table and return its
 * schema-qualified, quoted name.  42501 without privilege, 42P01 when the
 * table vanished, 42809 when it is not a table, 0A000 when partitioned.
 */
static char *
lock_guarded_table(Oid relid, LOCKMODE mode, const char *fname)
{
	AclResult	acl;
	char		relkind;
	char	   *relname;
	char	   *nspname;

	relname = get_rel_name(relid);
	if (relname == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("%s: relation with OID %u does not exist", fname, relid)));
	relkind = get_rel_relkind(relid);
	acl = pg_class_aclcheck(relid, GetUserId(), ACL_TRIGGER);
	if (acl != ACLCHECK_OK)
		aclcheck_error(acl, get_relkind_objtype(relkind), relname);

	LockRelationOid(relid, mode);
	if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(relid)))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("%s: relation \"%s\" was dropped", fname, relname)));

	relkind = get_rel_relkind(relid);
	nspname = get_namespace_name(get_rel_namespace(relid));
	relname = get_rel_name(relid);
	if (relkind == RELKIND_PARTITIONED_TABLE)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("%s: partitioned table %s cannot be guarded", fname,
						quote_qualified_identifier(nspname, relname)),
				 errdetail("A row moved to another partition is inserted there anew, which a guard would have to reject."),
				 errhint("Guard the partitions, and do not move rows between them.")));
	if (relkind != RELKIND_RELATION)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("%s: %s is not a table", fname,
						quote_qualified_identifier(nspname, relname))));
	return quote_qualified_identifier(nspname, relname);
}

/* attnum of a user column, or 42703. */
static AttrNumber
user_column(Oid relid, const char *table, const char *column, const char *fname)
{
	AttrNumber	att = get_attnum(relid, column);

	if (att <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("%s: column \"%s\" of table %s does not exist",
						fname, column, table)));
	return att;
}

/* DROP every trigger of the guard of (relid, att); how many.  Inside SPI. */
static int
drop_guard_triggers(Oid relid, Oid nsp, AttrNumber att, const char *table)
{
	Datum		values[3];
	int			n;
	int			i;
	char	  **names;

	values[0] = ObjectIdGetDatum(nsp);
	values[1] = ObjectIdGetDatum(relid);
	values[2] = Int32GetDatum((int32) att);
	n = idem_query_exec(&q_guard_triggers, nsp, values, NULL, false, 0);
	names = palloc(sizeof(char *) * Max(n, 1));
	for (i = 0; i < n; i++)
		names[i] = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
	for (i = 0; i < n; i++)
	{
		char	   *sql = psprintf("DROP TRIGGER %s ON %s",
								   quote_identifier(names[i]), table);

		if (SPI_execute(sql, false, 0) != SPI_OK_UTILITY)
			elog(ERROR, "SPI_execute failed: %s", sql);
	}
	return n;
}

static void
create_guard_trigger(const char *sql)
{
	if (SPI_execute(sql, false, 0) != SPI_OK_UTILITY)
		elog(ERROR, "SPI_execute failed: %s", sql);
}

static char *
name_arg(FunctionCallInfo fcinfo, int argno, const char *what, const char *fname)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s: %s must not be null", fname, what)));
	return pstrdup(NameStr(*PG_GETARG_NAME(argno)));
}

/*
 * idem_guard(tbl regclass, status_column name, machine text,
 *            version_column name DEFAULT NULL, history boolean DEFAULT false)
 *   RETURNS void
 *
 * Installs (or replaces) the guard of tbl.status_column: from now on every
 * INSERT and every UPDATE of the column must follow machine.  Rows already
 * in the table are not checked.  Fails with 22004 (NULL tbl, status_column,
 * machine or history), 22023/22001 (bad machine name), 25006 (read-only
 * transaction), 42501 (no TRIGGER privilege on tbl), 42809 (not a table),
 * 0A000 (partitioned table), 42703 (no such column), 42804 (status not
 * text/varchar, version not integer/bigint), 22023 (version column is the
 * status column), 42704 (no such machine).
 */
Datum
idem_guard(PG_FUNCTION_ARGS)
{
	const char *fname = "idem_guard";
	Oid			nsp = idem_extension_schema(fcinfo);
	Oid			relid;
	char	   *status_col;
	char	   *version_col = NULL;
	text	   *machine;
	bool		history;
	char	   *table;
	AttrNumber	status_att;
	Oid			type;
	const char *qnsp;
	const char *qcol;
	char	   *qmachine;
	char	   *func;
	bool		cached;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s: tbl must not be null", fname)));
	relid = PG_GETARG_OID(0);
	status_col = name_arg(fcinfo, 1, "status_column", fname);
	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s: machine must not be null", fname)));
	machine = PG_GETARG_TEXT_PP(2);
	idem_check_machine_name(VARDATA_ANY(machine), VARSIZE_ANY_EXHDR(machine), fname);
	if (!PG_ARGISNULL(3))
		version_col = pstrdup(NameStr(*PG_GETARG_NAME(3)));
	if (PG_ARGISNULL(4))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s: history must not be null", fname)));
	history = PG_GETARG_BOOL(4);

	idem_check_writable(fname);

	table = lock_guarded_table(relid, ShareRowExclusiveLock, fname);
	idem_refuse_citus_table(relid, table, fname);

	status_att = user_column(relid, table, status_col, fname);
	type = get_atttype(relid, status_att);
	if (getBaseType(type) != TEXTOID && getBaseType(type) != VARCHAROID)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("%s: status column \"%s\" must be of type text or varchar",
						fname, status_col),
				 errdetail("Column \"%s\" of table %s is of type %s.",
						   status_col, table, format_type_be(type))));
	if (version_col != NULL)
	{
		AttrNumber	version_att = user_column(relid, table, version_col, fname);

		if (version_att == status_att)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("%s: the version column must differ from the status column",
							fname)));
		type = get_atttype(relid, version_att);
		if (type != INT4OID && type != INT8OID)
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("%s: version column \"%s\" must be of type integer or bigint",
							fname, version_col),
					 errdetail("Column \"%s\" of table %s is of type %s.",
							   version_col, table, format_type_be(type))));
	}

	/* The machine must exist (42704); it is compiled into the cache. */
	(void) idem_machine_get(nsp, VARDATA_ANY(machine), VARSIZE_ANY_EXHDR(machine),
							fname, &cached);

	qnsp = quote_identifier(get_namespace_name(nsp));
	qcol = quote_identifier(status_col);
	qmachine = quote_literal_cstr(text_to_cstring(machine));
	func = psprintf("%s.idem_guard_trigger(%s, %s, %s, ", qnsp, qmachine,
					quote_literal_cstr(status_col),
					quote_literal_cstr(version_col ? version_col : ""));

	idem_spi_connect();

	drop_guard_triggers(relid, nsp, status_att, table);

	create_guard_trigger(psprintf("CREATE TRIGGER %s AFTER UPDATE OF %s ON %s FOR EACH ROW"
								  " WHEN (NOT %s.idem_guard_allows(%s, OLD.%s, NEW.%s))"
								  " EXECUTE FUNCTION %s'" ROLE_CHECK "')",
								  quote_identifier(guard_trigger_name("check", status_col)),
								  qcol, table, qnsp, qmachine, qcol, qcol, func));
	create_guard_trigger(psprintf("CREATE TRIGGER %s AFTER INSERT ON %s FOR EACH ROW"
								  " WHEN (NEW.%s IS NULL OR NOT %s.idem_guard_allows(%s, NULL, NEW.%s))"
								  " EXECUTE FUNCTION %s'" ROLE_CHECK "')",
								  quote_identifier(guard_trigger_name("insert", status_col)),
								  table, qcol, qnsp, qmachine, qcol, func));
	/* OF both columns, so that the version column cannot be dropped alone. */
	if (version_col != NULL)
		create_guard_trigger(psprintf("CREATE TRIGGER %s BEFORE UPDATE OF %s, %s ON %s FOR EACH ROW"
									  " WHEN ((OLD.%s IS NULL) OPERATOR(pg_catalog.<>) (NEW.%s IS NULL)"
									  " OR OLD.%s OPERATOR(pg_catalog.<>) NEW.%s)"
									  " EXECUTE FUNCTION %s'" ROLE_VERSION "')",
									  quote_identifier(guard_trigger_name("version", status_col)),
									  qcol, quote_identifier(version_col), table,
									  qcol, qcol, qcol, qcol, func));
	if (history)
		create_guard_trigger(psprintf("CREATE TRIGGER %s AFTER INSERT OR UPDATE OF %s ON %s"
									  " FOR EACH ROW EXECUTE FUNCTION %s'" ROLE_LOG "')",
									  quote_identifier(guard_trigger_name("log", status_col)),
									  qcol, table, func));

	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * idem_unguard(tbl regclass, status_column name) RETURNS void
 *
 * Removes the guard of tbl.status_column: every trigger idem_guard made
 * for it, whatever they are called now.  Fails with 22004 (NULL
 * argument), 25006 (read-only transaction), 42501 (no TRIGGER privilege,
 * or not the owner), 42809 (not a table), 42704 (the column has no guard).
 */
Datum
idem_unguard(PG_FUNCTION_ARGS)
{
	const char *fname = "idem_unguard";
	Oid			nsp = idem_extension_schema(fcinfo);
	Oid			relid;
	char	   *status_col;
	char	   *table;
	AttrNumber	status_att;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s: tbl must not be null", fname)));
	relid = PG_GETARG_OID(0);
	status_col = name_arg(fcinfo, 1, "status_column", fname);

	idem_check_writable(fname);

	table = lock_guarded_table(relid, AccessExclusiveLock, fname);
	status_att = user_column(relid, table, status_col, fname);

	idem_spi_connect();
	if (drop_guard_triggers(relid, nsp, status_att, table) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("%s: column \"%s\" of table %s has no guard",
						fname, status_col, table)));
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * The guards that enforce machine, as a sentence fragment for messages
 * ("column "status" of table public.orders, ..."), or NULL when there are
 * none.  Called by idem_machine_drop between SPI_connect and SPI_finish.
 */
char *
idem_guards_of_machine(Oid nsp, const char *machine)
{
	Datum		values[1];
	StringInfoData buf;
	int			n;
	int			i;
	int			found = 0;

	values[0] = ObjectIdGetDatum(nsp);
	n = idem_query_exec(&q_guards_all, nsp, values, NULL, false, 0);

	initStringInfo(&buf);
	for (i = 0; i < n; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		Datum		d = SPI_getbinval(tup, desc, 1, &isnull);
		char	   *args[GUARD_NARGS];
		int			tgtype;

		if (isnull || !split_tgargs(DatumGetByteaPP(d), args, GUARD_NARGS) ||
			strcmp(args[0], machine) != 0 || strcmp(args[3], ROLE_CHECK) != 0)
			continue;
		/* One line per guard: its UPDATE check trigger. */
		tgtype = DatumGetInt32(SPI_getbinval(tup, desc, 2, &isnull));
		if (!TRIGGER_FOR_UPDATE(tgtype))
			continue;
		appendStringInfo(&buf, "%scolumn \"%s\" of table %s",
						 found++ > 0 ? ", " : "", args[1],
						 SPI_getvalue(tup, desc, 3));
	}
	return found > 0 ? buf.data : NULL;
}
