/*-------------------------------------------------------------------------
 *
 * machine.c
 *	  State machine definitions: validating a definition and compiling it
 *	  (idem_machine_compile), and the questions asked of a compiled machine
 *	  (is it a state, is it initial, is a transition declared, the lists
 *	  and hints for messages).  The first link of the state-machine chain:
 *	  machine.c <- machine_cache.c <- transition.c, guard_cache.c,
 *	  guard_trigger.c, guard.c.  It calls no other file of the chain.
 *
 *	  A definition is a jsonb object {"initial": [...], "transitions":
 *	  {"state": [...], ...}}.  It is validated completely before anything is
 *	  written (idem_machine_define), and again by a row trigger on
 *	  idem_machines (machine_cache.c) so that a direct INSERT or UPDATE, or
 *	  a restore, cannot store a malformed machine either.
 *
 *	  Compiled form: the states are interned in one array sorted bytewise
 *	  (binary search by name); each state has its targets as indexes, in
 *	  declared order for messages and sorted for binary search.  A check is
 *	  two name searches and one index search; no catalog access, no SPI,
 *	  no locks.
 *
 *	  Visibility: a compiled machine is a value; which definition it was
 *	  compiled from, and when that is replaced, is machine_cache.c's
 *	  concern.
 *
 *	  Memory: compiling works in the caller's context; the compiled machine
 *	  lives in a memory context of its own (idem_machine_free,
 *	  idem_machine_set_parent), so a cache can keep it or drop it whole.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"

#include "idempotency.h"

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
 * A definition on its way to a compiled machine: the names point into the
 * jsonb (not terminated); indexes are into all[], the interned states.
 */
typedef struct Draft
{
	const char *fname;
	char		mname[IDEM_MAX_MACHINE_BYTES + 1];
	int			namelen;
	NameRef    *initial;		/* as declared */
	int			ninitial;
	RawSource  *sources;		/* the keys of "transitions", as declared */
	int			nsources;
	NameRef    *all;			/* every state once, sorted bytewise */
	int			nstates;
	int		   *initial_idx;	/* initial[i] as an index into all */
	int		  **adj;			/* targets of each state, declared order */
	int		   *nadj;
	bool	   *seen;			/* initial, then: reachable */
} Draft;

/* The top level: an object with exactly "initial" and "transitions". */
static void
draft_top(Draft *d, Jsonb *def, JsonbValue *initial_v, JsonbValue *trans_v)
{
	JsonbIterator *it;
	JsonbIteratorToken tok;
	JsonbValue	v;
	bool		have_initial = false;
	bool		have_trans = false;

	if (JB_ROOT_IS_SCALAR(def) || !JB_ROOT_IS_OBJECT(def))
	{
		const char *kind = "array";

		if (JB_ROOT_IS_SCALAR(def))
		{
			JsonbValue	scalar;

			if (JsonbExtractScalar(&def->root, &scalar))
				kind = value_kind(&scalar);
		}
		malformed(d->fname, d->mname,
				  psprintf("The definition is a JSON %s; it must be an object.", kind));
	}

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
			*initial_v = v;
			have_initial = true;
		}
		else if (strcmp(key, "transitions") == 0)
		{
			*trans_v = v;
			have_trans = true;
		}
		else
			malformed(d->fname, d->mname,
					  psprintf("The key \"%s\" is not allowed; a definition has exactly the keys \"initial\" and \"transitions\".",
							   key));
	}
	if (!have_initial)
		malformed(d->fname, d->mname, "The definition has no \"initial\" key.");
	if (!have_trans)
		malformed(d->fname, d->mname, "The definition has no \"transitions\" key.");
}

/* "initial" and "transitions" as names, not yet interned. */
static void
draft_parse(Draft *d, JsonbValue *initial_v, JsonbValue *trans_v)
{
	JsonbIterator *it;
	JsonbIteratorToken tok;
	JsonbValue	v;

	d->initial = parse_name_array(initial_v, "\"initial\"", &d->ninitial,
								  d->fname, d->mname);
	if (d->ninitial == 0)
		malformed(d->fname, d->mname, "\"initial\" must name at least one state.");

	if (trans_v->type != jbvBinary || JsonContainerIsArray(trans_v->val.binary.data))
		malformed(d->fname, d->mname,
				  psprintf("\"transitions\" must be an object mapping each state to an array of target states, not a JSON %s.",
						   value_kind(trans_v)));

	d->sources = palloc(sizeof(RawSource) * Max(JsonContainerSize(trans_v->val.binary.data), 1));
	d->nsources = 0;
	it = JsonbIteratorInit(trans_v->val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		RawSource  *src;
		char	   *what;

		if (tok != WJB_KEY)
			continue;
		src = &d->sources[d->nsources++];
		src->from.p = v.val.string.val;
		src->from.len = v.val.string.len;
		if (src->from.len == 0)
			malformed(d->fname, d->mname, "\"transitions\" has an empty state name as a key.");
		tok = JsonbIteratorNext(&it, &v, true);
		Assert(tok == WJB_VALUE);
		what = psprintf("The targets of state \"%s\"", ref_cstring(src->from));
		src->targets = parse_name_array(&v, what, &src->ntargets, d->fname, d->mname);
	}
}

/* Intern every name: sort, then drop duplicates. */
static void
draft_intern(Draft *d)
{
	int			nall = d->ninitial + d->nsources;
	int			i;
	int			j;

	for (i = 0; i < d->nsources; i++)
		nall += d->sources[i].ntargets;
	d->all = palloc(sizeof(NameRef) * nall);
	nall = 0;
	for (i = 0; i < d->ninitial; i++)
		d->all[nall++] = d->initial[i];
	for (i = 0; i < d->nsources; i++)
	{
		d->all[nall++] = d->sources[i].from;
		for (j = 0; j < d->sources[i].ntargets; j++)
			d->all[nall++] = d->sources[i].targets[j];
	}
	qsort(d->all, nall, sizeof(NameRef), nameref_qsort_cmp);
	d->nstates = 0;
	for (i = 0; i < nall; i++)
		if (d->nstates == 0 ||
			name_cmp(d->all[d->nstates - 1].p, d->all[d->nstates - 1].len,
					 d->all[i].p, d->all[i].len) != 0)
			d->all[d->nstates++] = d->all[i];
}

/* Initial states and adjacency as indexes, with no duplicates. */
static void
draft_edges(Draft *d)
{
	int			i;
	int			j;

	d->seen = palloc0(sizeof(bool) * d->nstates);
	d->initial_idx = palloc(sizeof(int) * d->ninitial);
	for (i = 0; i < d->ninitial; i++)
	{
		int			s = ref_index(d->all, d->nstates, d->initial[i]);

		if (d->seen[s])
			malformed(d->fname, d->mname,
					  psprintf("The state \"%s\" appears twice in \"initial\".",
							   ref_cstring(d->initial[i])));
		d->seen[s] = true;
		d->initial_idx[i] = s;
	}

	d->adj = palloc0(sizeof(int *) * d->nstates);
	d->nadj = palloc0(sizeof(int) * d->nstates);
	for (i = 0; i < d->nsources; i++)
	{
		RawSource  *src = &d->sources[i];
		int			from = ref_index(d->all, d->nstates, src->from);
		bool	   *dup = palloc0(sizeof(bool) * d->nstates);

		d->adj[from] = palloc(sizeof(int) * Max(src->ntargets, 1));
		for (j = 0; j < src->ntargets; j++)
		{
			int			to = ref_index(d->all, d->nstates, src->targets[j]);

			if (dup[to])
				malformed(d->fname, d->mname,
						  psprintf("The state \"%s\" lists the target \"%s\" twice.",
								   ref_cstring(src->from),
								   ref_cstring(src->targets[j])));
			dup[to] = true;
			d->adj[from][d->nadj[from]++] = to;
		}
		pfree(dup);
	}
}

/* Every state must be initial or reachable from an initial state. */
static void
draft_check_reachable(Draft *d)
{
	int		   *queue = palloc(sizeof(int) * d->nstates);
	int			qhead = 0;
	int			qtail = 0;
	int			i;
	int			j;

	for (i = 0; i < d->nstates; i++)
		if (d->seen[i])
			queue[qtail++] = i;
	while (qhead < qtail)
	{
		int			s = queue[qhead++];

		for (j = 0; j < d->nadj[s]; j++)
			if (!d->seen[d->adj[s][j]])
			{
				d->seen[d->adj[s][j]] = true;
				queue[qtail++] = d->adj[s][j];
			}
	}
	for (i = 0; i < d->nstates; i++)
		if (!d->seen[i])
			malformed(d->fname, d->mname,
					  psprintf("The state \"%s\" is neither initial nor reachable from an initial state.",
							   ref_cstring(d->all[i])));
}

/* The compiled machine of a checked draft, in its own context. */
static IdemMachine *
draft_build(Draft *d)
{
	MemoryContext cxt;
	MemoryContext old;
	IdemMachine *m;
	int			i;

	cxt = AllocSetContextCreate(CurrentMemoryContext, "idempotency machine",
								ALLOCSET_SMALL_SIZES);
	old = MemoryContextSwitchTo(cxt);
	m = palloc0(sizeof(IdemMachine));
	memcpy(m->name, d->mname, d->namelen + 1);
	m->cxt = cxt;
	m->nstates = d->nstates;
	m->states = palloc0(sizeof(IdemState) * d->nstates);
	for (i = 0; i < d->nstates; i++)
	{
		IdemState  *st = &m->states[i];
		int			n = d->nadj[i];

		st->name = pnstrdup(d->all[i].p, d->all[i].len);
		st->len = d->all[i].len;
		st->ntargets = n;
		if (n > 0)
		{
			st->targets = palloc(sizeof(int) * n);
			memcpy(st->targets, d->adj[i], sizeof(int) * n);
			st->sorted = palloc(sizeof(int) * n);
			memcpy(st->sorted, d->adj[i], sizeof(int) * n);
			qsort(st->sorted, n, sizeof(int), int_qsort_cmp);
		}
	}
	m->ninitial = d->ninitial;
	m->initial = palloc(sizeof(int) * d->ninitial);
	for (i = 0; i < d->ninitial; i++)
	{
		m->initial[i] = d->initial_idx[i];
		m->states[d->initial_idx[i]].initial = true;
	}
	MemoryContextSetIdentifier(cxt, m->name);
	MemoryContextSwitchTo(old);
	return m;
}

/*
 * Validate a definition and compile it.  The result lives in a new memory
 * context under CurrentMemoryContext; the caller may re-parent it
 * (idem_machine_set_parent) or free it (idem_machine_free).  The work
 * space is in the caller's context.  Every problem fails with 22023 and a
 * detail saying exactly what is wrong.
 */
IdemMachine *
idem_machine_compile(const char *name, int namelen, Jsonb *def, const char *fname)
{
	Draft		d;
	JsonbValue	initial_v;
	JsonbValue	trans_v;

	memset(&d, 0, sizeof(d));
	d.fname = fname;
	d.namelen = namelen;
	memcpy(d.mname, name, namelen);
	d.mname[namelen] = '\0';

	draft_top(&d, def, &initial_v, &trans_v);
	draft_parse(&d, &initial_v, &trans_v);
	draft_intern(&d);
	draft_edges(&d);
	draft_check_reachable(&d);
	return draft_build(&d);
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

/* The name of state number state. */
const char *
idem_machine_state_name(const IdemMachine *m, int state)
{
	return m->states[state].name;
}

/* The number of states; they are numbered 0 .. n - 1 in bytewise order of names. */
int
idem_machine_nstates(const IdemMachine *m)
{
	return m->nstates;
}

/* Free a compiled machine and everything it holds. */
void
idem_machine_free(IdemMachine *m)
{
	MemoryContextDelete(m->cxt);
}

/* Move a compiled machine (its whole context) under parent. */
void
idem_machine_set_parent(IdemMachine *m, MemoryContext parent)
{
	MemoryContextSetParent(m->cxt, parent);
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
