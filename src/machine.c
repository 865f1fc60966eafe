/*-------------------------------------------------------------------------
 *
 * machine.c
 *	  State machines: their definitions in the table idem_machines, the
 *	  per-backend cache of compiled machines, and the SQL-callable
 *	  functions idem_machine_define, idem_machine_drop, idem_can_transition,
 *	  idem_transition, and idem_guard_allows (the rule of a table guard,
 *	  evaluated in the WHEN condition of the triggers guard.c installs).
 *
 *	  A definition is a jsonb object {"initial": [...], "transitions":
 *	  {"state": [...], ...}}.  It is validated completely before anything is
 *	  written (machine_compile), and again by a row trigger on idem_machines
 *	  so that a direct INSERT or UPDATE, or a restore, cannot store a
 *	  malformed machine either.
 *
 *	  Compiled form: the states are interned in one array sorted bytewise
 *	  (binary search by name); each state has its targets as indexes, in
 *	  declared order for messages and sorted for binary search.  A check is
 *	  two name searches and one index search; no catalog access, no SPI.
 *
 *	  Cache: machine name -> compiled machine, in a dynahash in
 *	  CacheMemoryContext; each machine has its own memory context.  A
 *	  machine is compiled on first use in a backend from the definition read
 *	  through SPI with the latest snapshot.
 *
 *	  Invalidation: every change of idem_machines (idem_machine_define,
 *	  idem_machine_drop, and any direct DML through a statement trigger)
 *	  registers a relcache invalidation of idem_machines.  It is
 *	  transactional: other backends receive it after the commit, at their
 *	  next transaction start or lock acquisition; our own backend at the
 *	  next command (and on abort).  A relcache callback drops the whole
 *	  cache and bumps idem_machine_generation, which holders of machine
 *	  pointers (fn_extra here, trigger entries in guard.c) compare before
 *	  each use.  A definition read with a snapshot older than an
 *	  invalidation processed during the read is used once and not cached,
 *	  so the cache never keeps a definition older than a change it has
 *	  been told about.  In parallel mode (where the latest snapshot cannot
 *	  be taken) the query's snapshot is used and nothing is cached beyond
 *	  the query.
 *
 *	  Visibility: like catalog entries, definitions take effect by commit
 *	  order, not by the caller's snapshot: a session sees another's
 *	  committed redefinition from its next transaction on (sooner if it
 *	  takes a new lock), and its own uncommitted definition at once.
 *
 *	  Memory: the cache lives in CacheMemoryContext.  Callbacks only free
 *	  memory; nothing in this file holds a cached pointer across a call
 *	  that could process invalidations (SPI, catalog access).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/dependency.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "commands/trigger.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "idempotency.h"

PG_FUNCTION_INFO_V1(idem_machine_define);
PG_FUNCTION_INFO_V1(idem_machine_drop);
PG_FUNCTION_INFO_V1(idem_can_transition);
PG_FUNCTION_INFO_V1(idem_transition);
PG_FUNCTION_INFO_V1(idem_guard_allows);
PG_FUNCTION_INFO_V1(idem_machines_trigger);

typedef struct IdemState
{
	char	   *name;			/* NUL-terminated */
	int			len;			/* bytes, without the NUL */
	bool		initial;
	int			ntargets;
	int		   *targets;		/* state indexes in declared order */
	int		   *sorted;			/* the same, ascending */
} IdemState;

struct IdemMachine
{
	char		name[IDEM_MAX_MACHINE_BYTES + 1];
	MemoryContext cxt;			/* holds this struct and everything below */
	int			nstates;
	IdemState  *states;			/* sorted bytewise by name */
	int			ninitial;
	int		   *initial;		/* initial states in declared order */
};

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

static IdemQuery q_machine_load = {
	"SELECT m.definition FROM @extschema@.idem_machines m"
	" WHERE m.machine OPERATOR(pg_catalog.=) $1",
	1, {TEXTOID}
};

static IdemQuery q_machine_upsert = {
	"INSERT INTO @extschema@.idem_machines AS m (machine, definition, updated_at)"
	" VALUES ($1, $2, pg_catalog.now())"
	" ON CONFLICT ON CONSTRAINT idem_machines_pkey DO UPDATE"
	" SET definition = EXCLUDED.definition, updated_at = EXCLUDED.updated_at",
	2, {TEXTOID, JSONBOID}
};

static IdemQuery q_machine_delete = {
	"DELETE FROM @extschema@.idem_machines m"
	" WHERE m.machine OPERATOR(pg_catalog.=) $1",
	1, {TEXTOID}
};

/* ------------------------------------------------------------------------
 * Names
 * ------------------------------------------------------------------------
 */

/* Bytewise order of two counted strings (the order of collation "C"). */
static int
name_cmp(const char *a, int alen, const char *b, int blen)
{
	int			c = memcmp(a, b, Min(alen, blen));

	if (c != 0)
		return c;
	return (alen > blen) - (alen < blen);
}

/*
 * A machine name must be 1 to IDEM_MAX_MACHINE_BYTES bytes: 22023 when
 * empty, 22001 when too long.
 */
void
idem_check_machine_name(const char *name, int len, const char *fname)
{
	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s: machine name must not be empty", fname)));
	if (len > IDEM_MAX_MACHINE_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("%s: machine name is too long", fname),
				 errdetail("The name is %d bytes; the limit is %d bytes.",
						   len, IDEM_MAX_MACHINE_BYTES)));
}

/* The machine-name argument: not NULL (22004), then as above. */
static text *
machine_arg(FunctionCallInfo fcinfo, int argno, const char *fname)
{
	text	   *name;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s: machine must not be null", fname)));
	name = PG_GETARG_TEXT_PP(argno);
	idem_check_machine_name(VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name), fname);
	return name;
}

/* ------------------------------------------------------------------------
 * Compiling a definition
 * ------------------------------------------------------------------------
 */

typedef struct NameRef
{
	const char *p;				/* points into the jsonb, not terminated */
	int			len;
} NameRef;

typedef struct RawSource
{
	NameRef		from;
	int			ntargets;
	NameRef    *targets;
} RawSource;

static void
malformed(const char *fname, const char *machine, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("%s: malformed definition of machine \"%s\"", fname, machine),
			 errdetail_internal("%s", detail),
			 errhint("A definition looks like {\"initial\": [\"a\"], \"transitions\": {\"a\": [\"b\"], \"b\": []}}.")));
}

static const char *
value_kind(const JsonbValue *v)
{
	switch (v->type)
	{
		case jbvNull:
			return "null";
		case jbvString:
			return "string";
		case jbvNumeric:
			return "number";
		case jbvBool:
			return "boolean";
		case jbvBinary:
			return JsonContainerIsArray(v->val.binary.data) ? "array" : "object";
		default:
			return "value";
	}
}

static char *
ref_cstring(NameRef r)
{
	return pnstrdup(r.p, r.len);
}

/*
 * The elements of a JSON array of state names.  what names the array in
 * messages.  Every element must be a non-empty string.
 */
static NameRef *
parse_name_array(const JsonbValue *v, const char *what, int *count,
				 const char *fname, const char *machine)
{
	JsonbIterator *it;
	JsonbValue	elem;
	JsonbIteratorToken tok;
	NameRef    *names;
	int			n = 0;
	int			cap;

	if (v->type != jbvBinary || !JsonContainerIsArray(v->val.binary.data))
		malformed(fname, machine,
				  psprintf("%s must be an array of state names, not a JSON %s.",
						   what, value_kind(v)));

	cap = Max(JsonContainerSize(v->val.binary.data), 1);
	names = palloc(sizeof(NameRef) * cap);

	it = JsonbIteratorInit(v->val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &elem, true)) != WJB_DONE)
	{
		if (tok != WJB_ELEM)
			continue;
		if (elem.type != jbvString)
			malformed(fname, machine,
					  psprintf("%s must contain only strings; element %d is a JSON %s.",
							   what, n + 1, value_kind(&elem)));
		if (elem.val.string.len == 0)
			malformed(fname, machine,
					  psprintf("%s must not contain an empty state name.", what));
		Assert(n < cap);
		names[n].p = elem.val.string.val;
		names[n].len = elem.val.string.len;
		n++;
	}
	*count = n;
	return names;
}

static int
nameref_qsort_cmp(const void *a, const void *b)
{
	const NameRef *x = (const NameRef *) a;
	const NameRef *y = (const NameRef *) b;

	return name_cmp(x->p, x->len, y->p, y->len);
}

static int
int_qsort_cmp(const void *a, const void *b)
{
	int			x = *(const int *) a;
	int			y = *(const int *) b;

	return (x > y) - (x < y);
}

/* Index of a name known to be among the sorted unique names. */
static int
ref_index(const NameRef *names, int n, NameRef r)
{
	int			lo = 0;
	int			hi = n - 1;

	while (lo <= hi)
	{
		int			mid = lo + (hi - lo) / 2;
		int			c = name_cmp(names[mid].p, names[mid].len, r.p, r.len);

		if (c == 0)
			return mid;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	elog(ERROR, "state name vanished while compiling a machine");
	return -1;					/* keep the compiler quiet */
}

/*
 * Validate a definition and compile it.  The result lives in a new memory
 * context under CurrentMemoryContext; the caller may re-parent it.  Every
 * problem fails with 22023 and a detail saying exactly what is wrong.
 */
static IdemMachine *
machine_compile(const char *name, int namelen, Jsonb *def, const char *fname)
{
	char		mname[IDEM_MAX_MACHINE_BYTES + 1];
	JsonbIterator *it;
	JsonbIteratorToken tok;
	JsonbValue	v;
	JsonbValue	initial_v;
	JsonbValue	trans_v;
	bool		have_initial = false;
	bool		have_trans = false;
	NameRef    *initial;
	int			ninitial;
	RawSource  *sources;
	int			nsources = 0;
	NameRef    *all;
	int			nall = 0;
	int			nstates;
	int		   *initial_idx;
	bool	   *seen;
	int		   *queue;
	int			qhead = 0;
	int			qtail = 0;
	int		  **adj;
	int		   *nadj;
	MemoryContext cxt;
	MemoryContext old;
	IdemMachine *m;
	int			i;
	int			j;

	memcpy(mname, name, namelen);
	mname[namelen] = '\0';

	if (JB_ROOT_IS_SCALAR(def) || !JB_ROOT_IS_OBJECT(def))
	{
		const char *kind = "array";

		if (JB_ROOT_IS_SCALAR(def))
		{
			JsonbValue	scalar;

			if (JsonbExtractScalar(&def->root, &scalar))
				kind = value_kind(&scalar);
		}
		malformed(fname, mname,
				  psprintf("The definition is a JSON %s; it must be an object.", kind));
	}

	/* Top level: exactly the keys "initial" and "transitions". */
	it = JsonbIteratorInit(&def->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		char	   *key;

		if (tok != WJB_KEY)
			continue;
		key = pnstrdup(v.val.string.val, v.val.string.len);
		tok = JsonbIteratorNext(&it, &v, true);
		Assert(tok == WJB_VALUE);
		if (strcmp(key, "initial") == 0)
		{
			initial_v = v;
			have_initial = true;
		}
		else if (strcmp(key, "transitions") == 0)
		{
			trans_v = v;
			have_trans = true;
		}
		else
			malformed(fname, mname,
					  psprintf("The key \"%s\" is not allowed; a definition has exactly the keys \"initial\" and \"transitions\".",
							   key));
	}
	if (!have_initial)
		malformed(fname, mname, "The definition has no \"initial\" key.");
	if (!have_trans)
		malformed(fname, mname, "The definition has no \"transitions\" key.");

	initial = parse_name_array(&initial_v, "\"initial\"", &ninitial, fname, mname);
	if (ninitial == 0)
		malformed(fname, mname, "\"initial\" must name at least one state.");

	if (trans_v.type != jbvBinary || JsonContainerIsArray(trans_v.val.binary.data))
		malformed(fname, mname,
				  psprintf("\"transitions\" must be an object mapping each state to an array of target states, not a JSON %s.",
						   value_kind(&trans_v)));

	sources = palloc(sizeof(RawSource) * Max(JsonContainerSize(trans_v.val.binary.data), 1));
	it = JsonbIteratorInit(trans_v.val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		RawSource  *src;
		char	   *what;

		if (tok != WJB_KEY)
			continue;
		src = &sources[nsources++];
		src->from.p = v.val.string.val;
		src->from.len = v.val.string.len;
		if (src->from.len == 0)
			malformed(fname, mname, "\"transitions\" has an empty state name as a key.");
		tok = JsonbIteratorNext(&it, &v, true);
		Assert(tok == WJB_VALUE);
		what = psprintf("The targets of state \"%s\"", ref_cstring(src->from));
		src->targets = parse_name_array(&v, what, &src->ntargets, fname, mname);
	}

	/* Intern every name: sort, then drop duplicates. */
	nall = ninitial + nsources;
	for (i = 0; i < nsources; i++)
		nall += sources[i].ntargets;
	all = palloc(sizeof(NameRef) * nall);
	nall = 0;
	for (i = 0; i < ninitial; i++)
		all[nall++] = initial[i];
	for (i = 0; i < nsources; i++)
	{
		all[nall++] = sources[i].from;
		for (j = 0; j < sources[i].ntargets; j++)
			all[nall++] = sources[i].targets[j];
	}
	qsort(all, nall, sizeof(NameRef), nameref_qsort_cmp);
	nstates = 0;
	for (i = 0; i < nall; i++)
		if (nstates == 0 ||
			name_cmp(all[nstates - 1].p, all[nstates - 1].len, all[i].p, all[i].len) != 0)
			all[nstates++] = all[i];

	/* Initial states, no duplicates. */
	seen = palloc0(sizeof(bool) * nstates);
	initial_idx = palloc(sizeof(int) * ninitial);
	for (i = 0; i < ninitial; i++)
	{
		int			s = ref_index(all, nstates, initial[i]);

		if (seen[s])
			malformed(fname, mname,
					  psprintf("The state \"%s\" appears twice in \"initial\".",
							   ref_cstring(initial[i])));
		seen[s] = true;
		initial_idx[i] = s;
	}

	/* Adjacency, no duplicate targets. */
	adj = palloc0(sizeof(int *) * nstates);
	nadj = palloc0(sizeof(int) * nstates);
	for (i = 0; i < nsources; i++)
	{
		int			from = ref_index(all, nstates, sources[i].from);
		bool	   *dup = palloc0(sizeof(bool) * nstates);

		adj[from] = palloc(sizeof(int) * Max(sources[i].ntargets, 1));
		for (j = 0; j < sources[i].ntargets; j++)
		{
			int			to = ref_index(all, nstates, sources[i].targets[j]);

			if (dup[to])
				malformed(fname, mname,
						  psprintf("The state \"%s\" lists the target \"%s\" twice.",
								   ref_cstring(sources[i].from),
								   ref_cstring(sources[i].targets[j])));
			dup[to] = true;
			adj[from][nadj[from]++] = to;
		}
		pfree(dup);
	}

	/* Every state must be initial or reachable from an initial state. */
	queue = palloc(sizeof(int) * nstates);
	for (i = 0; i < nstates; i++)
		if (seen[i])
			queue[qtail++] = i;
	while (qhead < qtail)
	{
		int			s = queue[qhead++];

		for (j = 0; j < nadj[s]; j++)
			if (!seen[adj[s][j]])
			{
				seen[adj[s][j]] = true;
				queue[qtail++] = adj[s][j];
			}
	}
	for (i = 0; i < nstates; i++)
		if (!seen[i])
			malformed(fname, mname,
					  psprintf("The state \"%s\" is neither initial nor reachable from an initial state.",
							   ref_cstring(all[i])));

	/* Build the compiled machine in its own context. */
	cxt = AllocSetContextCreate(CurrentMemoryContext, "idempotency machine",
								ALLOCSET_SMALL_SIZES);
	old = MemoryContextSwitchTo(cxt);
	m = palloc0(sizeof(IdemMachine));
	memcpy(m->name, mname, namelen + 1);
	m->cxt = cxt;
	m->nstates = nstates;
	m->states = palloc0(sizeof(IdemState) * nstates);
	for (i = 0; i < nstates; i++)
	{
		IdemState  *st = &m->states[i];

		st->name = pnstrdup(all[i].p, all[i].len);
		st->len = all[i].len;
		st->ntargets = nadj[i];
		if (nadj[i] > 0)
		{
			st->targets = palloc(sizeof(int) * nadj[i]);
			memcpy(st->targets, adj[i], sizeof(int) * nadj[i]);
			st->sorted = palloc(sizeof(int) * nadj[i]);
			memcpy(st->sorted, adj[i], sizeof(int) * nadj[i]);
			qsort(st->sorted, nadj[i], sizeof(int), int_qsort_cmp);
		}
	}
	m->ninitial = ninitial;
	m->initial = palloc(sizeof(int) * ninitial);
	for (i = 0; i < ninitial; i++)
	{
		m->initial[i] = initial_idx[i];
		m->states[initial_idx[i]].initial = true;
	}
	MemoryContextSetIdentifier(cxt, m->name);
	MemoryContextSwitchTo(old);

	return m;
}

/* ------------------------------------------------------------------------
 * Queries on a compiled machine (no catalog access, no SPI)
 * ------------------------------------------------------------------------
 */

const char *
idem_machine_name(const IdemMachine *m)
{
	return m->name;
}

/* Index of the state named by (state, len), or -1 when it is not a state. */
int
idem_machine_state(const IdemMachine *m, const char *state, int len)
{
	int			lo = 0;
	int			hi = m->nstates - 1;

	while (lo <= hi)
	{
		int			mid = lo + (hi - lo) / 2;
		int			c = name_cmp(m->states[mid].name, m->states[mid].len, state, len);

		if (c == 0)
			return mid;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return -1;
}

bool
idem_machine_is_initial(const IdemMachine *m, int state)
{
	return m->states[state].initial;
}

/* Is from -> to declared? */
bool
idem_machine_allows(const IdemMachine *m, int from, int to)
{
	const IdemState *st = &m->states[from];
	int			lo = 0;
	int			hi = st->ntargets - 1;

	while (lo <= hi)
	{
		int			mid = lo + (hi - lo) / 2;

		if (st->sorted[mid] == to)
			return true;
		if (st->sorted[mid] < to)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return false;
}

static void
append_state_list(StringInfo buf, const IdemMachine *m, const int *idx, int n)
{
	int			i;

	for (i = 0; i < n; i++)
		appendStringInfo(buf, "%s\"%s\"", i > 0 ? ", " : "",
						 m->states[idx ? idx[i] : i].name);
}

/* All states, quoted and comma-separated, in bytewise order. */
char *
idem_machine_state_list(const IdemMachine *m)
{
	StringInfoData buf;

	initStringInfo(&buf);
	append_state_list(&buf, m, NULL, m->nstates);
	return buf.data;
}

/* The initial states, quoted and comma-separated, in declared order. */
char *
idem_machine_initial_list(const IdemMachine *m)
{
	StringInfoData buf;

	initStringInfo(&buf);
	append_state_list(&buf, m, m->initial, m->ninitial);
	return buf.data;
}

/* A hint sentence naming the allowed targets of from, or saying it is terminal. */
char *
idem_machine_targets_hint(const IdemMachine *m, int from)
{
	const IdemState *st = &m->states[from];
	StringInfoData buf;

	initStringInfo(&buf);
	if (st->ntargets == 0)
		appendStringInfo(&buf, "\"%s\" is a terminal state of machine \"%s\": no transition leaves it.",
						 st->name, m->name);
	else
	{
		appendStringInfo(&buf, "From \"%s\" the allowed targets are ", st->name);
		append_state_list(&buf, m, st->targets, st->ntargets);
		appendStringInfoChar(&buf, '.');
	}
	return buf.data;
}

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

		hash_seq_init(&seq, machine_cache);
		while ((e = (MachineEntry *) hash_seq_search(&seq)) != NULL)
			MemoryContextDelete(e->machine->cxt);
		hash_destroy(machine_cache);
		machine_cache = NULL;
	}
	last_machine = NULL;
	idem_machine_generation++;
}

/* Relcache callback: any invalidation of idem_machines drops the cache. */
static void
machine_cache_callback(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == machines_relid)
	{
		machine_cache_reset();
		machines_relid = InvalidOid;
		machines_nsp = InvalidOid;
	}
}

/* Register the callback once and know the OID of idem_machines in nsp. */
static void
machine_cache_prepare(Oid nsp)
{
	Oid			relid;

	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(machine_cache_callback, (Datum) 0);
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

/* The OID of idem_machines in nsp (for invalidations). */
static Oid
machines_table(Oid nsp)
{
	machine_cache_prepare(nsp);
	return machines_relid;
}

/*
 * Read the definition of a machine, copied into the caller's memory
 * context; 42704 when there is none.  *fresh is set when it was read with
 * the latest snapshot (outside parallel mode).
 */
static Jsonb *
machine_load(Oid nsp, const char *name, int len, const char *fname, bool *fresh)
{
	MemoryContext caller = CurrentMemoryContext;
	Datum		values[1];
	SPIPlanPtr	plan;
	int			rc;
	Jsonb	   *def = NULL;

	values[0] = PointerGetDatum(cstring_to_text_with_len(name, len));

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
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("%s: machine \"%s\" does not exist", fname,
						pnstrdup(name, len)),
				 errhint("Define it with idem_machine_define().")));
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
		memcmp(last_machine->name, name, len) == 0 && last_machine->name[len] == '\0')
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
	m = machine_compile(name, len, def, fname);

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
		MemoryContextDelete(m->cxt);
		*cached = true;
		return e->machine;
	}
	MemoryContextSetParent(m->cxt, CacheMemoryContext);
	e->machine = m;
	*cached = true;
	last_machine = m;
	last_generation = idem_machine_generation;
	return m;
}

/* ------------------------------------------------------------------------
 * SQL-callable functions
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
 * The machine named by argument 0, through fn_extra: a repeated call with
 * the same name costs one memcmp until any definition changes.
 */
static IdemMachine *
call_machine(FunctionCallInfo fcinfo, const char *fname)
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
		MemoryContextSetParent(m->cxt, fcinfo->flinfo->fn_mcxt);
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

/* The state named by a text argument; 22023 when it is not a state. */
static int
state_arg(const IdemMachine *m, text *t, const char *fname)
{
	int			s = idem_machine_state(m, VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));

	if (s < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s: \"%s\" is not a state of machine \"%s\"",
						fname, text_to_cstring(t), m->name),
				 errdetail("The states of machine \"%s\" are %s.",
						   m->name, idem_machine_state_list(m))));
	return s;
}

/*
 * idem_can_transition(machine text, from_state text, to_state text)
 *   RETURNS boolean
 *
 * True exactly when from_state -> to_state is declared in machine.  NULL
 * from_state or to_state gives false (NULL is no state).  Fails with 22004
 * (NULL machine), 22023/22001 (empty or too long machine name), 42704
 * (no such machine), 22023 (from_state or to_state is not a state of it).
 */
Datum
idem_can_transition(PG_FUNCTION_ARGS)
{
	const char *fname = "idem_can_transition";
	IdemMachine *m = call_machine(fcinfo, fname);
	int			from;
	int			to;

	if (PG_ARGISNULL(1) || PG_ARGISNULL(2))
		PG_RETURN_BOOL(false);
	from = state_arg(m, PG_GETARG_TEXT_PP(1), fname);
	to = state_arg(m, PG_GETARG_TEXT_PP(2), fname);
	PG_RETURN_BOOL(idem_machine_allows(m, from, to));
}

/*
 * idem_transition(machine text, from_state text, to_state text) RETURNS text
 *
 * to_state when from_state -> to_state is declared; from_state unchanged
 * when the two are equal (a repeated event).  Fails with 22004 (any
 * argument NULL), 22023/22001 (bad machine name), 42704 (no such machine),
 * 22023 (from_state or to_state is not a state of it), ID004 (the
 * transition is not declared; the hint lists the allowed targets).
 */
Datum
idem_transition(PG_FUNCTION_ARGS)
{
	const char *fname = "idem_transition";
	IdemMachine *m = call_machine(fcinfo, fname);
	text	   *from_t;
	text	   *to_t;
	int			from;
	int			to;

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s: from_state must not be null", fname)));
	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s: to_state must not be null", fname)));
	from_t = PG_GETARG_TEXT_PP(1);
	to_t = PG_GETARG_TEXT_PP(2);
	from = state_arg(m, from_t, fname);
	to = state_arg(m, to_t, fname);

	if (from == to)
		PG_RETURN_DATUM(PG_GETARG_DATUM(1));
	if (!idem_machine_allows(m, from, to))
		ereport(ERROR,
				(errcode(ERRCODE_IDEM_ILLEGAL_TRANSITION),
				 errmsg("%s: illegal transition from \"%s\" to \"%s\"",
						fname, m->states[from].name, m->states[to].name),
				 errdetail("Machine \"%s\" does not allow the transition from \"%s\" to \"%s\".",
						   m->name, m->states[from].name, m->states[to].name),
				 errhint("%s", idem_machine_targets_hint(m, from))));
	PG_RETURN_DATUM(PG_GETARG_DATUM(2));
}

/*
 * idem_guard_allows(machine text, old_status text, new_status text)
 *   RETURNS boolean
 *
 * The rule of a guard (guard.c), evaluated in the WHEN condition of its
 * triggers: true when the value is unchanged (bytewise, NULL included),
 * when old_status is NULL and new_status is an initial state, or when
 * old_status -> new_status is declared; false otherwise, values that are
 * not states included (the trigger then fires and explains).  Fails with
 * 22004 (NULL machine), 22023/22001 (bad machine name), 42704 (no such
 * machine).
 */
Datum
idem_guard_allows(PG_FUNCTION_ARGS)
{
	IdemMachine *m = call_machine(fcinfo, "idem_guard_allows");
	text	   *from;
	text	   *to;
	int			f;
	int			t;

	if (PG_ARGISNULL(2))
		PG_RETURN_BOOL(PG_ARGISNULL(1));
	to = PG_GETARG_TEXT_PP(2);
	t = idem_machine_state(m, VARDATA_ANY(to), VARSIZE_ANY_EXHDR(to));
	if (PG_ARGISNULL(1))
		PG_RETURN_BOOL(t >= 0 && m->states[t].initial);

	from = PG_GETARG_TEXT_PP(1);
	if (VARSIZE_ANY_EXHDR(from) == VARSIZE_ANY_EXHDR(to) &&
		memcmp(VARDATA_ANY(from), VARDATA_ANY(to), VARSIZE_ANY_EXHDR(to)) == 0)
		PG_RETURN_BOOL(true);
	if (t < 0)
		PG_RETURN_BOOL(false);
	f = idem_machine_state(m, VARDATA_ANY(from), VARSIZE_ANY_EXHDR(from));
	PG_RETURN_BOOL(f >= 0 && idem_machine_allows(m, f, t));
}

/*
 * idem_machine_define(machine text, definition jsonb) RETURNS void
 *
 * Creates the machine, or replaces its definition in one statement.
 * Fails with 22004 (NULL argument), 22023/22001 (bad machine name), 22023
 * (malformed definition: the detail says what is wrong; nothing is
 * written), 25006 (read-only transaction), 42501 (no privilege on
 * idem_machines).
 */
Datum
idem_machine_define(PG_FUNCTION_ARGS)
{
	const char *fname = "idem_machine_define";
	text	   *name = machine_arg(fcinfo, 0, fname);
	Oid			nsp = idem_extension_schema(fcinfo);
	Jsonb	   *def;
	IdemMachine *m;
	Datum		values[2];

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s: definition must not be null", fname)));
	def = PG_GETARG_JSONB_P(1);

	/* Validate completely first; the compiled form is not kept. */
	m = machine_compile(VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name), def, fname);
	MemoryContextDelete(m->cxt);

	idem_check_writable(fname);

	values[0] = PointerGetDatum(name);
	values[1] = PointerGetDatum(def);

	idem_spi_connect();
	CacheInvalidateRelcacheByRelid(machines_table(nsp));
	idem_query_exec(&q_machine_upsert, nsp, values, NULL, false, 0);
	SPI_finish();

	PG_RETURN_VOID();
}

/*
 * idem_machine_drop(machine text) RETURNS void
 *
 * Deletes the machine.  Fails with 22004 (NULL), 22023/22001 (bad name),
 * 25006 (read-only transaction), 42704 (no such machine), 2BP01 (a guard
 * installed by idem_guard still uses it: the detail lists them), 42501 (no
 * privilege on idem_machines).
 */
Datum
idem_machine_drop(PG_FUNCTION_ARGS)
{
	const char *fname = "idem_machine_drop";
	text	   *name = machine_arg(fcinfo, 0, fname);
	Oid			nsp = idem_extension_schema(fcinfo);
	char	   *cname = text_to_cstring(name);
	char	   *users;
	Datum		values[1];

	idem_check_writable(fname);

	values[0] = PointerGetDatum(name);

	idem_spi_connect();
	CacheInvalidateRelcacheByRelid(machines_table(nsp));

	/*
	 * Delete first, then look for guards: a concurrent idem_guard that
	 * committed while we waited for the row is then seen (READ COMMITTED).
	 */
	if (idem_query_exec(&q_machine_delete, nsp, values, NULL, false, 0) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("%s: machine \"%s\" does not exist", fname, cname)));

	users = idem_guards_of_machine(nsp, cname);
	if (users != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
				 errmsg("%s: machine \"%s\" is used by guards", fname, cname),
				 errdetail("Machine \"%s\" is enforced on %s.", cname, users),
				 errhint("Remove the guards with idem_unguard() first.")));
	SPI_finish();

	PG_RETURN_VOID();
}

/*
 * idem_machines_trigger() RETURNS trigger
 *
 * On idem_machines.  Row level, BEFORE INSERT OR UPDATE: validates the new
 * definition as idem_machine_define does (22023), so direct DML and
 * restores cannot store a malformed machine.  Statement level, AFTER any
 * change: registers the invalidation of every backend's cache.
 */
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
		CacheInvalidateRelcacheByRelid(machines_table(idem_extension_schema(fcinfo)));
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
			m = machine_compile(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t),
								DatumGetJsonbP(def), "idem_machines");
			MemoryContextDelete(m->cxt);
		}
		return PointerGetDatum(tuple);
	}

	ereport(ERROR,
			(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
			 errmsg("idem_machines_trigger: unsupported trigger event")));
	return PointerGetDatum(NULL);	/* keep the compiler quiet */
}
