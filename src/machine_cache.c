/*-------------------------------------------------------------------------
 *
 * machine_cache.c
 *	  The per-backend cache of compiled state machines (idem_machine_get),
 *	  loaded from idem_machines; the trigger on that table, which validates
 *	  what is stored and invalidates every backend's cache; and the machine of
 *	  a SQL call's first argument (idem_machine_of_call, kept in fn_extra).
 *
 *	  Cache: name -> compiled machine, a dynahash in CacheMemoryContext, each
 *	  machine in a context of its own, compiled on first use from the
 *	  definition read through SPI with the latest snapshot.  On Citus, once
 *	  idem_machines is a reference table, it is read from this node's
 *	  placement by a heap scan under the same snapshot rules: a guard's
 *	  trigger runs on a shard, where Citus refuses a query on a Citus table.
 *	  Every placement holds every committed definition, and the statement
 *	  trigger fires on each.  Without a local placement (a coordinator
 *	  outside the metadata): SPI.
 *
 *	  Invalidation: every change of idem_machines (define, drop, direct DML
 *	  through the statement trigger) registers a relcache invalidation of it,
 *	  received by other backends after the commit and by ours at the next
 *	  command.  The callback drops the whole cache and bumps
 *	  idem_machine_generation, which holders of machine pointers (fn_extra,
 *	  guard_cache.c's entries) compare before each use.  A definition read
 *	  with a snapshot older than an invalidation processed during the read is
 *	  used once, not cached; in parallel mode the query's snapshot is used and
 *	  nothing is cached beyond the query.  Visibility: like catalog entries,
 *	  definitions take effect by commit order, not by the caller's snapshot:
 *	  another session's from the next transaction on, one's own at once.
 *
 *	  Pins: a callback never frees a machine; it moves the cached ones under
 *	  retired_cxt, freed when no pin is held (idem_machine_pin and
 *	  idem_machine_unpin count holders, nested calls included) and at every
 *	  transaction end, which also resets the count after an error.
 *	  Invariant: a machine pointer used across anything that may accept
 *	  invalidations (detoasting, SPI, catalog access, a lock, user code) is
 *	  pinned for that time.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/dependency.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "commands/trigger.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "idempotency.h"
#include "citus.h"
#include "machine.h"

PG_FUNCTION_INFO_V1(idem_machines_trigger);

typedef struct MachineEntry
{
	char		name[IDEM_MAX_MACHINE_BYTES + 1];	/* key, zero padded */
	IdemMachine *machine;
} MachineEntry;

/* Bumped whenever the cache is dropped; see idempotency.h. */
uint64		idem_machine_generation = 1;

static HTAB *machine_cache = NULL;
static IdemMachine *last_machine = NULL;	/* the last one found, if cached */
static uint64 last_generation = 0;
static Oid	machines_relid = InvalidOid;	/* idem_machines */
static Oid	machines_nsp = InvalidOid;	/* its schema */
static bool callback_registered = false;
static MemoryContext retired_cxt = NULL;	/* machines dropped while pinned */
static bool retired_any = false;
static int	machine_pins = 0;
static IdemQuery q_machine_load = {
	"SELECT m.definition FROM @extschema@.idem_machines m"
	" WHERE m.machine OPERATOR(pg_catalog.=) $1",
	1, {TEXTOID}
};
/* ------------------------------------------------------------------------
 * The per-backend cache
 * ------------------------------------------------------------------------
 */

static void
machine_cache_reset(void)
{
	if (machine_cache != NULL)
	{
		HASH_SEQ_STATUS seq;
		MachineEntry *e;

		/* Retired, not freed: a caller may hold one (see the header). */
		hash_seq_init(&seq, machine_cache);
		while ((e = (MachineEntry *) hash_seq_search(&seq)) != NULL)
		{
			idem_machine_set_parent(e->machine, retired_cxt);
			retired_any = true;
		}
		hash_destroy(machine_cache);
		machine_cache = NULL;
	}
	last_machine = NULL;
	idem_machine_generation++;
}

/* Relcache callback: any invalidation of idem_machines drops the cache. */
static void
machine_cache_callback(Oid relid)
{
	if (!OidIsValid(relid) || relid == machines_relid)
	{
		machine_cache_reset();
		machines_relid = InvalidOid;
		machines_nsp = InvalidOid;
	}
}

/* Subscribe the cache to relcache invalidations (module.c's _PG_init). */
void
idem_machine_cache_init(void)
{
	idem_relcache_subscribe(machine_cache_callback);
}

/* Free the retired machines; only when nobody holds a pin. */
static void
machine_retired_free(void)
{
	if (retired_any && machine_pins == 0)
	{
		MemoryContextReset(retired_cxt);
		retired_any = false;
	}
}

/* At every transaction end no call of ours runs: no pin can be held. */
static void
machine_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			machine_pins = 0;
			machine_retired_free();
			break;
		default:
			break;
	}
}

/*
 * Pin the machines a caller is about to use across anything that may
 * accept invalidations: until the matching idem_machine_unpin (or the
 * end of the transaction, after an error), a cache reset retires them
 * instead of freeing them.  Counted, so nested calls (user code inside
 * ours that calls us again) keep the outer call's machines alive.
 */
void
idem_machine_pin(void)
{
	machine_pins++;
}

void
idem_machine_unpin(void)
{
	if (machine_pins > 0)
		machine_pins--;
	machine_retired_free();
}

/* Register the callbacks once and know the OID of idem_machines in nsp. */
static void
machine_cache_prepare(Oid nsp)
{
	Oid			relid;

	if (!callback_registered)
	{
		/* Created here, never in a callback, which must not allocate. */
		retired_cxt = AllocSetContextCreate(CacheMemoryContext,
											"idempotency retired machines",
											ALLOCSET_SMALL_SIZES);
		RegisterXactCallback(machine_xact_callback, NULL);
		callback_registered = true;
	}
	if (OidIsValid(machines_relid) && machines_nsp == nsp)
		return;

	if (OidIsValid(machines_nsp) && machines_nsp != nsp)
		machine_cache_reset();
	relid = get_relname_relid("idem_machines", nsp);
	if (!OidIsValid(relid))
		elog(ERROR, "idempotency: table idem_machines is missing from schema %u", nsp);
	machines_relid = relid;
	machines_nsp = nsp;
}

/* The OID of idem_machines in nsp (for invalidations by transition.c). */
Oid
idem_machines_relid(Oid nsp)
{
	machine_cache_prepare(nsp);
	return machines_relid;
}

/*
 * Read the definition of a machine from placement, this node's placement
 * of idem_machines as a Citus reference table, with a scan of the heap
 * (no SPI, no planner, so no Citus executor: the same on a shard, inside
 * a guard's trigger, as anywhere else); NULL when there is none.  The
 * snapshot is the latest one outside parallel mode (*fresh), else the
 * query's.  The definitions are readable by PUBLIC, so no privilege is
 * checked.
 */
static Jsonb *
machine_read_placement(Oid placement, text *name, bool *fresh)
{
	Relation	rel = table_open(placement, AccessShareLock);
	TupleDesc	desc = RelationGetDescr(rel);
	int			name_att = SPI_fnumber(desc, "machine");
	int			def_att = SPI_fnumber(desc, "definition");
	Snapshot	snap;
	ScanKeyData skey;
	SysScanDesc scan;
	HeapTuple	tup;
	Jsonb	   *def = NULL;

	if (name_att <= 0 || def_att <= 0 ||
		TupleDescAttr(desc, name_att - 1)->atttypid != TEXTOID ||
		TupleDescAttr(desc, def_att - 1)->atttypid != JSONBOID)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("idempotency: the placement \"%s\" of idem_machines has lost its machine text or definition jsonb column",
						RelationGetRelationName(rel))));
	*fresh = !IsInParallelMode();
	snap = RegisterSnapshot(*fresh ? GetLatestSnapshot() : GetActiveSnapshot());
	/* texteq under collation "C" (ScanKeyInit's), the column's collation. */
	ScanKeyInit(&skey, name_att, BTEqualStrategyNumber, F_TEXTEQ,
				PointerGetDatum(name));
	scan = systable_beginscan(rel, InvalidOid, false, snap, 1, &skey);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
	{
		bool		isnull;
		Datum		d = heap_getattr(tup, def_att, desc, &isnull);

		if (!isnull)
			def = DatumGetJsonbPCopy(d);
	}
	systable_endscan(scan);
	UnregisterSnapshot(snap);
	table_close(rel, AccessShareLock);
	return def;
}

/* 42704: machine (name, len) does not exist. */
static void
machine_missing(const char *name, int len, const char *fname)
{
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_OBJECT),
			 errmsg("%s: machine \"%s\" does not exist", fname,
					pnstrdup(name, len)),
			 errhint("Define it with idem_machine_define().")));
}

/*
 * Read the definition of a machine, copied into the caller's memory
 * context; 42704 when there is none.  *fresh is set when it was read with
 * the latest snapshot (outside parallel mode).  When idem_machines is a
 * Citus reference table with a placement on this node, the placement is
 * read directly (machine_read_placement), else idem_machines through SPI.
 */
static Jsonb *
machine_load(Oid nsp, const char *name, int len, const char *fname, bool *fresh)
{
	MemoryContext caller = CurrentMemoryContext;
	Datum		values[1];
	SPIPlanPtr	plan;
	int			rc;
	Jsonb	   *def = NULL;
	Oid			placement = idem_citus_local_placement(machines_relid, NULL);

	values[0] = PointerGetDatum(cstring_to_text_with_len(name, len));
	if (OidIsValid(placement))
	{
		def = machine_read_placement(placement, DatumGetTextPP(values[0]), fresh);
		if (def == NULL)
			machine_missing(name, len, fname);
		return def;
	}

	idem_spi_connect();
	plan = idem_query_plan(&q_machine_load, nsp);
	if (IsInParallelMode())
	{
		rc = SPI_execute_plan(plan, values, NULL, true, 1);
		*fresh = false;
	}
	else
	{
		rc = SPI_execute_snapshot(plan, values, NULL, GetLatestSnapshot(),
								  InvalidSnapshot, true, false, 1);
		*fresh = true;
	}
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "SPI_execute failed: %s", SPI_result_code_string(rc));
	/* Never reinterpret a column a DBA retyped (jsonb is read as jsonb). */
	if (SPI_gettypeid(SPI_tuptable->tupdesc, 1) != JSONBOID)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("%s: column \"definition\" of idem_machines is not of type jsonb", fname),
				 errdetail("The column is of type %s; the extension reads it as the install script made it.",
						   format_type_be(SPI_gettypeid(SPI_tuptable->tupdesc, 1))),
				 errhint("Restore the column: ALTER TABLE idem_machines ALTER definition TYPE jsonb USING definition::jsonb.")));
	if (SPI_processed == 1)
	{
		bool		isnull;
		Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
									  1, &isnull);

		if (!isnull)
		{
			MemoryContext old = MemoryContextSwitchTo(caller);

			def = DatumGetJsonbPCopy(d);
			MemoryContextSwitchTo(old);
		}
	}
	SPI_finish();

	if (def == NULL)
		machine_missing(name, len, fname);
	return def;
}

/*
 * The compiled machine called name (len bytes) in the extension schema
 * nsp: from the cache, or read and compiled.  Fails with 22023/22001 for a
 * bad name, 42704 when the machine does not exist, 22023 when its stored
 * definition is malformed.  See idempotency.h for *cached.
 */
IdemMachine *
idem_machine_get(Oid nsp, const char *name, int len, const char *fname,
				 bool *cached)
{
	char		key[IDEM_MAX_MACHINE_BYTES + 1];
	MachineEntry *e;
	uint64		gen;
	Jsonb	   *def;
	IdemMachine *m;
	bool		fresh;
	bool		found;

	idem_check_machine_name(name, len, fname);

	/* The machine asked for last time: no hashing (every query asks anew). */
	if (last_machine != NULL && last_generation == idem_machine_generation &&
		machines_nsp == nsp && OidIsValid(machines_relid) &&
		memcmp(idem_machine_name(last_machine), name, len) == 0 &&
		idem_machine_name(last_machine)[len] == '\0')
	{
		*cached = true;
		return last_machine;
	}

	machine_cache_prepare(nsp);

	memset(key, 0, sizeof(key));
	memcpy(key, name, len);
	if (machine_cache != NULL)
	{
		e = (MachineEntry *) hash_search(machine_cache, key, HASH_FIND, NULL);
		if (e != NULL)
		{
			*cached = true;
			last_machine = e->machine;
			last_generation = idem_machine_generation;
			return e->machine;
		}
	}

	gen = idem_machine_generation;
	def = machine_load(nsp, name, len, fname, &fresh);
	m = idem_machine_compile(name, len, def, fname);

	*cached = false;
	if (!fresh || gen != idem_machine_generation || !OidIsValid(machines_relid))
		return m;				/* raced with an invalidation: use once */

	if (machine_cache == NULL)
	{
		HASHCTL		ctl;

		memset(&ctl, 0, sizeof(ctl));
		ctl.keysize = sizeof(key);
		ctl.entrysize = sizeof(MachineEntry);
		ctl.hcxt = CacheMemoryContext;
		machine_cache = hash_create("idempotency machines", 16, &ctl,
									HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	e = (MachineEntry *) hash_search(machine_cache, key, HASH_ENTER, &found);
	if (found)
	{
		/* Cannot happen without recursion; keep the entry we have. */
		idem_machine_free(m);
		*cached = true;
		return e->machine;
	}
	idem_machine_set_parent(m, CacheMemoryContext);
	e->machine = m;
	*cached = true;
	last_machine = m;
	last_generation = idem_machine_generation;
	return m;
}

/*
 * Refuse to run idem_machines_trigger anywhere but on the extension's own
 * idem_machines (or, once idem_distribute() made it a Citus reference
 * table, a placement of it on this node), with the columns and types the
 * install script gives it:
 * the function is reachable by any role that may create a trigger (on a
 * temporary table, say), and reads the columns as text and jsonb.  Fails
 * with 39P01 (trigger protocol violated).
 */
static void
check_machines_trigger(FunctionCallInfo fcinfo, TriggerData *td)
{
	Relation	rel = td->tg_relation;
	Oid			nsp = idem_extension_schema(fcinfo);
	TupleDesc	desc = RelationGetDescr(rel);
	int			name_att;
	int			def_att;

	Oid			machines = get_relname_relid("idem_machines", nsp);

	/* On Citus, a placement of the reference table idem_machines too. */
	if (RelationGetRelid(rel) != machines ?
		!idem_citus_shard_of(rel, machines) :
		getExtensionOfObject(RelationRelationId, RelationGetRelid(rel)) !=
		get_extension_oid("idempotency", true))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("idem_machines_trigger: may fire only on the extension's table idem_machines"),
				 errdetail("Trigger \"%s\" fired on table \"%s\".",
						   td->tg_trigger->tgname, RelationGetRelationName(rel)),
				 errhint("Drop the trigger; define state machines with idem_machine_define().")));

	name_att = SPI_fnumber(desc, "machine");
	def_att = SPI_fnumber(desc, "definition");
	if (name_att <= 0 || def_att <= 0 ||
		TupleDescAttr(desc, name_att - 1)->atttypid != TEXTOID ||
		TupleDescAttr(desc, def_att - 1)->atttypid != JSONBOID)
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("idem_machines_trigger: table idem_machines has lost its machine text or definition jsonb column"),
				 errhint("Reinstall the extension, or restore idem_machines from a dump.")));
}

/*
 * idem_machines_trigger() RETURNS trigger
 *
 * On idem_machines.  Row level, BEFORE INSERT OR UPDATE: validates the new
 * definition as idem_machine_define does (22023), so direct DML and
 * restores cannot store a malformed machine.  Statement level, AFTER any
 * change: registers the invalidation of every backend's cache.  Takes no
 * arguments.  Fails with 39P01 when not called by the trigger manager, on
 * another table than the extension's idem_machines, or for another event;
 * 22023 (or 22001) for a malformed definition or machine name.
 */
Datum
idem_machines_trigger(PG_FUNCTION_ARGS)
{
	TriggerData *td;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("idem_machines_trigger: not called by the trigger manager")));
	td = (TriggerData *) fcinfo->context;
	check_machines_trigger(fcinfo, td);

	if (TRIGGER_FIRED_FOR_STATEMENT(td->tg_event))
	{
		/* The caches follow idem_machines, also when this is its shard. */
		CacheInvalidateRelcacheByRelid(idem_machines_relid(idem_extension_schema(fcinfo)));
		return PointerGetDatum(NULL);
	}

	if (TRIGGER_FIRED_BEFORE(td->tg_event) &&
		(TRIGGER_FIRED_BY_INSERT(td->tg_event) || TRIGGER_FIRED_BY_UPDATE(td->tg_event)))
	{
		HeapTuple	tuple = TRIGGER_FIRED_BY_UPDATE(td->tg_event) ?
			td->tg_newtuple : td->tg_trigtuple;
		TupleDesc	desc = RelationGetDescr(td->tg_relation);
		int			name_att = SPI_fnumber(desc, "machine");
		int			def_att = SPI_fnumber(desc, "definition");
		Datum		name;
		Datum		def;
		bool		name_null;
		bool		def_null;

		name = heap_getattr(tuple, name_att, desc, &name_null);
		def = heap_getattr(tuple, def_att, desc, &def_null);

		/* NULLs are left to the NOT NULL constraints. */
		if (!name_null && !def_null)
		{
			text	   *t = DatumGetTextPP(name);
			IdemMachine *m;

			idem_check_machine_name(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t),
									"idem_machines");
			m = idem_machine_compile(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t),
								DatumGetJsonbP(def), "idem_machines");
			idem_machine_free(m);
		}
		return PointerGetDatum(tuple);
	}

	ereport(ERROR,
			(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
			 errmsg("idem_machines_trigger: unsupported trigger event")));
	return PointerGetDatum(NULL);	/* keep the compiler quiet */
}

/* ------------------------------------------------------------------------
 * The machine of a SQL call (transition.c, idem_guard_allows)
 * ------------------------------------------------------------------------
 */

/* Per-call-site cache in fn_extra: the last machine used. */
typedef struct CallCache
{
	uint64		gen;			/* idem_machine_generation when looked up */
	IdemMachine *machine;
	int			len;
	char		name[IDEM_MAX_MACHINE_BYTES + 1];
} CallCache;

/*
 * The text arguments 1 .. nargs - 1 of a call, fetched (detoasted) before
 * the machine is looked up; NULL for a NULL argument.
 */
void
idem_call_text_args(FunctionCallInfo fcinfo, text **args, int nargs)
{
	for (int i = 1; i < nargs; i++)
		args[i] = PG_ARGISNULL(i) ? NULL : PG_GETARG_TEXT_PP(i);
}

/*
 * The machine named by argument 0, through fn_extra: a repeated call with
 * the same name costs one memcmp until any definition changes.  Pinned
 * (idem_machine_pin): the caller unpins it before returning.  Fetch every
 * other argument first (idem_call_text_args).
 */
IdemMachine *
idem_machine_of_call(FunctionCallInfo fcinfo, const char *fname)
{
	CallCache  *cc = (CallCache *) fcinfo->flinfo->fn_extra;
	text	   *name;
	const char *p;
	int			len;
	IdemMachine *m;
	bool		cached;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s: machine must not be null", fname)));
	name = PG_GETARG_TEXT_PP(0);
	p = VARDATA_ANY(name);
	len = VARSIZE_ANY_EXHDR(name);

	idem_machine_pin();
	if (cc != NULL && cc->gen == idem_machine_generation &&
		cc->len == len && memcmp(cc->name, p, len) == 0)
		return cc->machine;

	m = idem_machine_get(idem_extension_schema(fcinfo), p, len, fname, &cached);
	if (!cached)
	{
		/*
		 * In parallel mode nothing is cached per backend: keep the machine
		 * for the rest of this query.  Otherwise it raced with an
		 * invalidation: use it for this call only.
		 */
		if (!IsInParallelMode())
			return m;
		idem_machine_set_parent(m, fcinfo->flinfo->fn_mcxt);
	}
	if (cc == NULL)
	{
		cc = MemoryContextAllocZero(fcinfo->flinfo->fn_mcxt, sizeof(CallCache));
		fcinfo->flinfo->fn_extra = cc;
	}
	cc->gen = idem_machine_generation;
	cc->machine = m;
	cc->len = len;
	memcpy(cc->name, p, len);
	return m;
}
