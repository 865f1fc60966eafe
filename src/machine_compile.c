/*-------------------------------------------------------------------------
 *
 * machine_compile.c
 *	  Compiling a state machine definition (idem_machine_compile): a jsonb
 *	  object {"initial": [...], "transitions": {"state": [...], ...}},
 *	  validated completely and turned into the compiled form machine.h
 *	  describes.  Called by transition.c (idem_machine_define) and
 *	  machine_cache.c (loading a machine, and the row trigger on
 *	  idem_machines, so that a direct INSERT or UPDATE, or a restore,
 *	  cannot store a malformed machine either).  Calls no other file of
 *	  src/.
 *
 *	  Size: a machine has at most IDEM_MAX_MACHINE_STATES states and
 *	  IDEM_MAX_MACHINE_TRANSITIONS transitions (54000 beyond).  The
 *	  transitions, the initial states and the keys are counted from the
 *	  jsonb headers before any name is read, so that what is sorted is
 *	  bounded whatever the definition; the states exactly once interned.
 *
 *	  Invariant: per-element work in compiles is near-linear and
 *	  cancellable.  Every loop over the elements of a definition is O(n)
 *	  or O(n log n) in its size (names are interned by one merge sort, so
 *	  no input is a worst case; no per-source work is sized by the number
 *	  of states: one array of marks serves every source; the sorted
 *	  targets come from a counting sort), and calls CHECK_FOR_INTERRUPTS,
 *	  so that statement_timeout and pg_cancel_backend stop a compile at
 *	  once.
 *
 *	  Locking and visibility: none; a compiled machine is a value.
 *
 *	  Memory: compiling works in a memory context of its own under the
 *	  caller's, deleted when the compile ends; the compiled machine lives
 *	  in a memory context of its own (idem_machine_free,
 *	  idem_machine_set_parent), so a cache can keep it or drop it whole.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"

#include "idempotency.h"
#include "machine.h"

/* ------------------------------------------------------------------------
 * Compiling a definition
 *
 * Every name of the definition is an occurrence: the initial states, then
 * the keys of "transitions", then every target, in this order.  Their
 * indexes (once interned) are one int array, ix, in the same order, so
 * that an occurrence knows where its index goes by its position alone.
 * Interning sorts the occurrences (a merge sort: O(n log n) for every
 * input), numbers the distinct names in that order and writes each
 * occurrence's number to ix.  The rest is linear in the definition.
 * ------------------------------------------------------------------------
 */

typedef struct NameRef
{
	const char *p;				/* points into the jsonb, not terminated */
	int			len;
} NameRef;

typedef struct NameOcc
{
	const char *p;				/* points into the jsonb, not terminated */
	int32		len;
	int32		pos;			/* its position in occ and in ix */
} NameOcc;

/*
 * A definition on its way to a compiled machine: the names point into the
 * jsonb (not terminated); state indexes are into all[], the interned
 * states.
 */
typedef struct Draft
{
	const char *fname;
	char		mname[IDEM_MAX_MACHINE_BYTES + 1];
	int			namelen;
	int			ninitial;
	int			nsources;		/* the keys of "transitions" */
	int			ntrans;			/* the targets of all of them */
	int			nocc;			/* ninitial + nsources + ntrans */
	NameOcc    *occ;			/* the names in the order of ix */
	int		   *ix;				/* state index of every occurrence: */
	int		   *initial_idx;	/* ... ix: "initial" as declared */
	int		   *src_state;		/* ... ix + ninitial: the keys */
	int		   *to;				/* ... ix + ninitial + nsources: targets */
	int		   *src_off;		/* targets of key i: to[src_off[i] ..
								 * src_off[i + 1]) in declared order */
	NameRef    *all;			/* every state once, sorted bytewise */
	int			nstates;
	int		   *src_of;			/* the key of each state, or -1 */
	bool	   *seen;			/* initial, then: reachable */
} Draft;

static void
malformed(const char *fname, const char *machine, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("%s: malformed definition of machine \"%s\"", fname, machine),
			 errdetail_internal("%s", detail),
			 errhint("A definition looks like {\"initial\": [\"a\"], \"transitions\": {\"a\": [\"b\"], \"b\": []}}.")));
}

/* 54000: more states than IDEM_MAX_MACHINE_STATES (at least n unless exact). */
static void
too_many_states(const Draft *d, int64 n, bool exact)
{
	ereport(ERROR,
			(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
			 errmsg("%s: machine \"%s\" has too many states", d->fname, d->mname),
			 exact ?
			 errdetail("The machine has " INT64_FORMAT " states; the limit is %d states.",
					   n, IDEM_MAX_MACHINE_STATES) :
			 errdetail("The machine has at least " INT64_FORMAT " states; the limit is %d states.",
					   n, IDEM_MAX_MACHINE_STATES)));
}

/* 54000: more transitions than IDEM_MAX_MACHINE_TRANSITIONS. */
static void
too_many_transitions(const Draft *d, int64 n)
{
	ereport(ERROR,
			(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
			 errmsg("%s: machine \"%s\" has too many transitions", d->fname, d->mname),
			 errdetail("The machine declares " INT64_FORMAT " transitions; the limit is %d transitions.",
					   n, IDEM_MAX_MACHINE_TRANSITIONS)));
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

static bool
is_array(const JsonbValue *v)
{
	return v->type == jbvBinary && JsonContainerIsArray(v->val.binary.data);
}

/*
 * How messages name an array of state names: "initial" (key NULL) or the
 * targets of state key.  Built only for a message.
 */
static char *
array_what(const NameRef *key)
{
	if (key == NULL)
		return pstrdup("\"initial\"");
	return psprintf("The targets of state \"%s\"", pnstrdup(key->p, key->len));
}

/* 22023 unless v is an array (of state names, checked by parse_names). */
static void
check_name_array(const Draft *d, const JsonbValue *v, const NameRef *key)
{
	if (!is_array(v))
		malformed(d->fname, d->mname,
				  psprintf("%s must be an array of state names, not a JSON %s.",
						   array_what(key), value_kind(v)));
}

/*
 * The elements of a JSON array of state names (checked by
 * check_name_array) as occurrences out[0 ..], at positions pos ..;
 * returns how many: the size of the array, which out has room for.  key
 * names the array in messages (NULL: "initial").  Every element must be a
 * non-empty string.
 */
static int
parse_names(Draft *d, const JsonbValue *v, const NameRef *key,
			NameOcc *out, int pos)
{
	JsonbIterator *it;
	JsonbValue	elem;
	JsonbIteratorToken tok;
	int			cap = JsonContainerSize(v->val.binary.data);
	int			n = 0;

	it = JsonbIteratorInit(v->val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &elem, true)) != WJB_DONE)
	{
		NameOcc    *o;

		CHECK_FOR_INTERRUPTS();
		if (tok != WJB_ELEM)
			continue;
		if (elem.type != jbvString)
			malformed(d->fname, d->mname,
					  psprintf("%s must contain only strings; element %d is a JSON %s.",
							   array_what(key), n + 1, value_kind(&elem)));
		if (elem.val.string.len == 0)
			malformed(d->fname, d->mname,
					  psprintf("%s must not contain an empty state name.",
							   array_what(key)));
		if (n >= cap)
			elog(ERROR, "jsonb array has more elements than its header says");
		o = &out[n];
		o->p = elem.val.string.val;
		o->len = elem.val.string.len;
		o->pos = pos + n;
		n++;
	}
	return n;
}

static inline int
occ_cmp(const NameOcc *a, const NameOcc *b)
{
	return idem_name_cmp(a->p, a->len, b->p, b->len);
}

/*
 * Sort a[0 .. n) bytewise by name: a top-down merge sort (tmp holds n / 2
 * elements), O(n log n) comparisons for every input, with an insertion
 * sort for short runs and no merge when the halves are already in order
 * (so sorted input costs O(n)).
 */
static void
occ_sort(NameOcc *a, NameOcc *tmp, int n)
{
	int			mid;
	int			i;
	int			j;
	int			k;

	if (n <= 16)
	{
		for (i = 1; i < n; i++)
		{
			NameOcc		x = a[i];

			for (j = i; j > 0 && occ_cmp(&a[j - 1], &x) > 0; j--)
				a[j] = a[j - 1];
			a[j] = x;
		}
		return;
	}
	CHECK_FOR_INTERRUPTS();
	mid = n / 2;
	occ_sort(a, tmp, mid);
	occ_sort(a + mid, tmp, n - mid);
	if (occ_cmp(&a[mid - 1], &a[mid]) <= 0)
		return;
	/* Merge tmp (the left half) and a[mid ..] into a: k < j throughout. */
	memcpy(tmp, a, sizeof(NameOcc) * mid);
	i = 0;
	j = mid;
	k = 0;
	while (i < mid && j < n)
	{
		CHECK_FOR_INTERRUPTS();
		if (occ_cmp(&a[j], &tmp[i]) < 0)
			a[k++] = a[j++];
		else
			a[k++] = tmp[i++];
	}
	while (i < mid)
		a[k++] = tmp[i++];
}

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

	/* At most two keys are accepted: the first other one fails. */
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
		pfree(key);
	}
	if (!have_initial)
		malformed(d->fname, d->mname, "The definition has no \"initial\" key.");
	if (!have_trans)
		malformed(d->fname, d->mname, "The definition has no \"transitions\" key.");
}

/*
 * "initial" and "transitions" as occurrences, not yet interned.  The size
 * limits are checked from the array and object headers before any name
 * is read: the number of transitions exactly (a pass over the keys, not
 * into their arrays), the number of states as far as the headers tell
 * (the initial states are distinct, and so are the keys).
 */
static void
draft_parse(Draft *d, JsonbValue *initial_v, JsonbValue *trans_v)
{
	JsonbContainer *trans;
	JsonbIterator *it;
	JsonbIteratorToken tok;
	JsonbValue	v;
	NameOcc    *initial;
	int64		ntrans = 0;
	int			i;
	int			e;

	check_name_array(d, initial_v, NULL);
	d->ninitial = JsonContainerSize(initial_v->val.binary.data);
	if (d->ninitial > IDEM_MAX_MACHINE_STATES)
		too_many_states(d, d->ninitial, false);
	initial = palloc(sizeof(NameOcc) * Max(d->ninitial, 1));
	i = parse_names(d, initial_v, NULL, initial, 0);
	Assert(i == d->ninitial);
	if (d->ninitial == 0)
		malformed(d->fname, d->mname, "\"initial\" must name at least one state.");

	if (trans_v->type != jbvBinary || JsonContainerIsArray(trans_v->val.binary.data))
		malformed(d->fname, d->mname,
				  psprintf("\"transitions\" must be an object mapping each state to an array of target states, not a JSON %s.",
						   value_kind(trans_v)));
	trans = trans_v->val.binary.data;
	d->nsources = JsonContainerSize(trans);
	if (d->nsources > IDEM_MAX_MACHINE_STATES)
		too_many_states(d, d->nsources, false);

	/* The number of transitions, from the headers of the target arrays. */
	it = JsonbIteratorInit(trans);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		CHECK_FOR_INTERRUPTS();
		if (tok == WJB_VALUE && is_array(&v))
			ntrans += JsonContainerSize(v.val.binary.data);
	}
	if (ntrans > IDEM_MAX_MACHINE_TRANSITIONS)
		too_many_transitions(d, ntrans);
	d->ntrans = (int) ntrans;

	/* Bounded by the limits now: 1.2 million occurrences at most. */
	d->nocc = d->ninitial + d->nsources + d->ntrans;
	d->occ = palloc(sizeof(NameOcc) * Max(d->nocc, 1));
	d->ix = palloc(sizeof(int) * Max(d->nocc, 1));
	d->initial_idx = d->ix;
	d->src_state = d->ix + d->ninitial;
	d->to = d->src_state + d->nsources;
	d->src_off = palloc(sizeof(int) * (d->nsources + 1));

	memcpy(d->occ, initial, sizeof(NameOcc) * d->ninitial);
	pfree(initial);

	i = 0;
	e = 0;
	it = JsonbIteratorInit(trans);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		NameOcc    *key;
		NameRef		keyref;

		CHECK_FOR_INTERRUPTS();
		if (tok != WJB_KEY)
			continue;
		Assert(i < d->nsources);
		key = &d->occ[d->ninitial + i];
		key->p = v.val.string.val;
		key->len = v.val.string.len;
		key->pos = d->ninitial + i;
		if (key->len == 0)
			malformed(d->fname, d->mname, "\"transitions\" has an empty state name as a key.");
		keyref.p = key->p;
		keyref.len = key->len;
		tok = JsonbIteratorNext(&it, &v, true);
		Assert(tok == WJB_VALUE);
		check_name_array(d, &v, &keyref);
		d->src_off[i] = e;
		e += parse_names(d, &v, &keyref, &d->occ[d->ninitial + d->nsources + e],
						 d->ninitial + d->nsources + e);
		i++;
	}
	Assert(i == d->nsources && e == d->ntrans);
	d->src_off[d->nsources] = e;
}

/*
 * Intern every name: sort the occurrences, number the distinct names in
 * that order, and write each occurrence's number to ix.
 */
static void
draft_intern(Draft *d)
{
	NameOcc    *tmp = palloc(sizeof(NameOcc) * Max(d->nocc / 2 + 1, 1));
	int			k;

	occ_sort(d->occ, tmp, d->nocc);
	pfree(tmp);

	d->all = palloc(sizeof(NameRef) * Max(d->nocc, 1));
	d->nstates = 0;
	for (k = 0; k < d->nocc; k++)
	{
		const NameOcc *o = &d->occ[k];

		CHECK_FOR_INTERRUPTS();
		if (k == 0 || occ_cmp(&d->occ[k - 1], o) != 0)
		{
			d->all[d->nstates].p = o->p;
			d->all[d->nstates].len = o->len;
			d->nstates++;
		}
		d->ix[o->pos] = d->nstates - 1;
	}
	if (d->nstates > IDEM_MAX_MACHINE_STATES)
		too_many_states(d, d->nstates, true);
}

static char *
state_cstring(const Draft *d, int s)
{
	return pnstrdup(d->all[s].p, d->all[s].len);
}

/*
 * No state twice in "initial", no target twice for a state.  One array of
 * marks for all the keys: mark[s] == i + 1 when key i names target s.
 */
static void
draft_check_duplicates(Draft *d)
{
	int		   *mark;
	int			i;
	int			e;

	d->seen = palloc0(sizeof(bool) * d->nstates);
	for (i = 0; i < d->ninitial; i++)
	{
		int			s = d->initial_idx[i];

		CHECK_FOR_INTERRUPTS();
		if (d->seen[s])
			malformed(d->fname, d->mname,
					  psprintf("The state \"%s\" appears twice in \"initial\".",
							   state_cstring(d, s)));
		d->seen[s] = true;
	}

	mark = palloc0(sizeof(int) * d->nstates);
	d->src_of = palloc(sizeof(int) * d->nstates);
	memset(d->src_of, -1, sizeof(int) * d->nstates);
	for (i = 0; i < d->nsources; i++)
	{
		CHECK_FOR_INTERRUPTS();
		d->src_of[d->src_state[i]] = i;
		for (e = d->src_off[i]; e < d->src_off[i + 1]; e++)
		{
			int			to = d->to[e];

			CHECK_FOR_INTERRUPTS();
			if (mark[to] == i + 1)
				malformed(d->fname, d->mname,
						  psprintf("The state \"%s\" lists the target \"%s\" twice.",
								   state_cstring(d, d->src_state[i]),
								   state_cstring(d, to)));
			mark[to] = i + 1;
		}
	}
	pfree(mark);
}

/* Every state must be initial or reachable from an initial state. */
static void
draft_check_reachable(Draft *d)
{
	int		   *queue = palloc(sizeof(int) * d->nstates);
	int			qhead = 0;
	int			qtail = 0;
	int			i;
	int			e;

	for (i = 0; i < d->nstates; i++)
	{
		CHECK_FOR_INTERRUPTS();
		if (d->seen[i])
			queue[qtail++] = i;
	}
	while (qhead < qtail)
	{
		int			src = d->src_of[queue[qhead++]];

		CHECK_FOR_INTERRUPTS();
		if (src < 0)
			continue;
		for (e = d->src_off[src]; e < d->src_off[src + 1]; e++)
		{
			CHECK_FOR_INTERRUPTS();
			if (!d->seen[d->to[e]])
			{
				d->seen[d->to[e]] = true;
				queue[qtail++] = d->to[e];
			}
		}
	}
	for (i = 0; i < d->nstates; i++)
	{
		CHECK_FOR_INTERRUPTS();
		if (!d->seen[i])
			malformed(d->fname, d->mname,
					  psprintf("The state \"%s\" is neither initial nor reachable from an initial state.",
							   state_cstring(d, i)));
	}
	pfree(queue);
}

/*
 * The compiled machine of a checked draft, in a new context under parent.
 * The targets of key i in ascending order come from a counting sort of
 * all the transitions by target: O(states + transitions).
 */
static IdemMachine *
draft_build(Draft *d, MemoryContext parent)
{
	MemoryContext cxt;
	MemoryContext old;
	IdemMachine *m;
	int		   *count;
	int		   *bytarget;
	int		   *cursor;
	int		   *src_of_edge;
	Size		nbytes = 0;
	char	   *p;
	int			i;
	int			e;
	int			s;

	/* Transitions by target: count, prefix sums, place. */
	count = palloc0(sizeof(int) * (d->nstates + 1));
	for (e = 0; e < d->ntrans; e++)
	{
		CHECK_FOR_INTERRUPTS();
		count[d->to[e] + 1]++;
	}
	for (s = 0; s < d->nstates; s++)
	{
		CHECK_FOR_INTERRUPTS();
		count[s + 1] += count[s];
	}
	bytarget = palloc(sizeof(int) * Max(d->ntrans, 1));
	src_of_edge = palloc(sizeof(int) * Max(d->ntrans, 1));
	for (i = 0; i < d->nsources; i++)
	{
		CHECK_FOR_INTERRUPTS();
		for (e = d->src_off[i]; e < d->src_off[i + 1]; e++)
		{
			CHECK_FOR_INTERRUPTS();
			src_of_edge[e] = i;
			bytarget[count[d->to[e]]++] = e;
		}
	}
	cursor = palloc(sizeof(int) * (d->nsources + 1));
	memcpy(cursor, d->src_off, sizeof(int) * (d->nsources + 1));

	for (s = 0; s < d->nstates; s++)
	{
		CHECK_FOR_INTERRUPTS();
		nbytes += d->all[s].len + 1;
	}

	cxt = AllocSetContextCreate(parent, "idempotency machine",
								ALLOCSET_SMALL_SIZES);
	old = MemoryContextSwitchTo(cxt);
	m = palloc0(sizeof(IdemMachine));
	memcpy(m->name, d->mname, d->namelen + 1);
	m->cxt = cxt;
	m->nstates = d->nstates;
	m->states = palloc0(sizeof(IdemState) * d->nstates);
	m->names = palloc(nbytes);
	m->targets = palloc(sizeof(int) * Max(d->ntrans, 1));
	memcpy(m->targets, d->to, sizeof(int) * d->ntrans);
	m->sorted = palloc(sizeof(int) * Max(d->ntrans, 1));
	for (e = 0; e < d->ntrans; e++)
	{
		int			edge = bytarget[e];

		CHECK_FOR_INTERRUPTS();
		m->sorted[cursor[src_of_edge[edge]]++] = d->to[edge];
	}

	p = m->names;
	for (s = 0; s < d->nstates; s++)
	{
		IdemState  *st = &m->states[s];
		int			src = d->src_of[s];

		CHECK_FOR_INTERRUPTS();
		memcpy(p, d->all[s].p, d->all[s].len);
		p[d->all[s].len] = '\0';
		st->name = p;
		st->len = d->all[s].len;
		p += st->len + 1;
		if (src >= 0 && d->src_off[src + 1] > d->src_off[src])
		{
			st->ntargets = d->src_off[src + 1] - d->src_off[src];
			st->targets = m->targets + d->src_off[src];
			st->sorted = m->sorted + d->src_off[src];
		}
	}
	m->ninitial = d->ninitial;
	m->initial = palloc(sizeof(int) * d->ninitial);
	for (i = 0; i < d->ninitial; i++)
	{
		CHECK_FOR_INTERRUPTS();
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
 * space is a context of its own, deleted at the end (on an error, with
 * the caller's).  Every problem of form fails with 22023 and a detail
 * saying exactly what is wrong; a machine beyond the size limits with
 * 54000.
 */
IdemMachine *
idem_machine_compile(const char *name, int namelen, Jsonb *def, const char *fname)
{
	MemoryContext caller = CurrentMemoryContext;
	MemoryContext work;
	Draft		d;
	JsonbValue	initial_v;
	JsonbValue	trans_v;
	IdemMachine *m;

	work = AllocSetContextCreate(caller, "idempotency machine compile",
								 ALLOCSET_DEFAULT_SIZES);
	MemoryContextSwitchTo(work);

	memset(&d, 0, sizeof(d));
	d.fname = fname;
	d.namelen = namelen;
	memcpy(d.mname, name, namelen);
	d.mname[namelen] = '\0';

	draft_top(&d, def, &initial_v, &trans_v);
	draft_parse(&d, &initial_v, &trans_v);
	draft_intern(&d);
	draft_check_duplicates(&d);
	draft_check_reachable(&d);
	m = draft_build(&d, caller);

	MemoryContextSwitchTo(caller);
	MemoryContextDelete(work);
	return m;
}
