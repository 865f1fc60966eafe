/*-------------------------------------------------------------------------
 *
 * machine_compile.c
 *	  Compiling a state machine definition (idem_machine_compile): the jsonb
 *	  {"initial": [...], "transitions": {"state": [...], ...}}, read into a
 *	  Draft by machine_parse.c, then interned (every name numbered once),
 *	  checked (no state twice, every state reachable) and built into the form
 *	  machine.h describes.  Every definition stored in idem_machines goes
 *	  through it, also a direct INSERT, UPDATE or restore (the row trigger),
 *	  so no malformed machine is stored.
 *
 *	  Size: at most IDEM_MAX_MACHINE_STATES states and
 *	  IDEM_MAX_MACHINE_TRANSITIONS transitions (54000 beyond), counted from the
 *	  jsonb headers before any name is read, so that what is sorted is bounded
 *	  whatever the definition.
 *
 *	  Invariant: the work is near-linear and cancellable.  Every loop over the
 *	  elements of a definition is O(n) or O(n log n) in its size (names are
 *	  interned by one merge sort, so no input is a worst case; no per-source
 *	  work is sized by the number of states: one array of marks serves every
 *	  source; targets are sorted by a counting sort) and calls
 *	  CHECK_FOR_INTERRUPTS, so statement_timeout and pg_cancel_backend stop a
 *	  compile at once.
 *
 *	  Locking and visibility: none; a compiled machine is a value.  Memory:
 *	  the work in a context of its own under the caller's, deleted when the
 *	  compile ends; the machine in a context of its own (idem_machine_free,
 *	  idem_machine_set_parent), so a cache keeps or drops it whole.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"

#include "idempotency.h"
#include "machine_draft.h"

static int *draft_sorted_targets(Draft *d);
static void build_states(Draft *d, IdemMachine *m);

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
		idem_draft_too_many_states(d, d->nstates, true);
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
			idem_draft_malformed(d->fname, d->mname,
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
				idem_draft_malformed(d->fname, d->mname,
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
			idem_draft_malformed(d->fname, d->mname,
					  psprintf("The state \"%s\" is neither initial nor reachable from an initial state.",
							   state_cstring(d, i)));
	}
	pfree(queue);
}

/*
 * The compiled machine of a checked draft, in a new context under parent.
 * The targets of key i in ascending order come from a counting sort of
 * all the transitions by target (draft_sorted_targets).
 */
static IdemMachine *
draft_build(Draft *d, MemoryContext parent)
{
	MemoryContext cxt;
	MemoryContext old;
	IdemMachine *m;
	int		   *sorted = draft_sorted_targets(d);
	Size		nbytes = 0;
	int			s;

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
	memcpy(m->sorted, sorted, sizeof(int) * d->ntrans);
	build_states(d, m);
	MemoryContextSetIdentifier(cxt, m->name);
	MemoryContextSwitchTo(old);
	return m;
}

/*
 * Every key's targets in ascending order, the keys in declared order (as
 * d->to), in the current (work) context: a counting sort of all the
 * transitions by target, O(states + transitions).
 */
static int *
draft_sorted_targets(Draft *d)
{
	int		   *count;
	int		   *bytarget;
	int		   *cursor;
	int		   *src_of_edge;
	int		   *sorted;
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
	sorted = palloc(sizeof(int) * Max(d->ntrans, 1));
	for (e = 0; e < d->ntrans; e++)
	{
		int			edge = bytarget[e];

		CHECK_FOR_INTERRUPTS();
		sorted[cursor[src_of_edge[edge]]++] = d->to[edge];
	}
	return sorted;
}

/*
 * The states of m (names, targets, initial marks) from the checked draft,
 * in m's context (the current one).
 */
static void
build_states(Draft *d, IdemMachine *m)
{
	char	   *p = m->names;
	int			s;
	int			i;

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

	idem_draft_top(&d, def, &initial_v, &trans_v);
	idem_draft_parse(&d, &initial_v, &trans_v);
	draft_intern(&d);
	draft_check_duplicates(&d);
	draft_check_reachable(&d);
	m = draft_build(&d, caller);

	MemoryContextSwitchTo(caller);
	MemoryContextDelete(work);
	return m;
}
