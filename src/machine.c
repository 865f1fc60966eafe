/*-------------------------------------------------------------------------
 *
 * machine.c
 *	  The questions asked of a compiled state machine (is it a state, is it
 *	  initial, is a transition declared, the lists and hints for messages),
 *	  the check of a machine's name, and THE rule of a table guard:
 *	  idem_guard_verdict, which both the WHEN condition (idem_guard_allows)
 *	  and the trigger that explains a refusal ask, so they cannot disagree.
 *
 *	  Cost: a check is two name searches and one index search: no catalog
 *	  access, no SPI, no lock, no allocation (the lists for messages allocate
 *	  in the caller's context).  Messages list at most STATE_LIST_NAMES names
 *	  (and about STATE_LIST_BYTES bytes), then "and N more".  Compiling
 *	  (machine_parse.c, machine_compile.c) is near-linear and cancellable,
 *	  within IDEM_MAX_MACHINE_STATES and IDEM_MAX_MACHINE_TRANSITIONS.
 *
 *	  Visibility: a compiled machine is a value; which definition it came
 *	  from, and when that is replaced, is machine_cache.c's concern.  Memory:
 *	  a machine lives in a memory context of its own (idem_machine_free,
 *	  idem_machine_set_parent).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "idempotency.h"
#include "machine.h"

/* At most this many names in a list of states in a message ... */
#define STATE_LIST_NAMES	20
/* ... and no more names once the list is this long (bytes). */
#define STATE_LIST_BYTES	1000

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
		int			c = idem_name_cmp(m->states[mid].name, m->states[mid].len, state, len);

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

/*
 * The states idx[0 .. n) (idx NULL: states 0 .. n - 1), quoted and
 * comma-separated: at most STATE_LIST_NAMES of them, and none more once
 * the list would pass STATE_LIST_BYTES (the first is always there), then
 * " and N more".  A message stays short whatever the machine's size.
 */
static void
append_state_list(StringInfo buf, const IdemMachine *m, const int *idx, int n)
{
	int			start = buf->len;
	int			i;

	for (i = 0; i < n; i++)
	{
		const IdemState *st = &m->states[idx ? idx[i] : i];

		if (i > 0 && (i >= STATE_LIST_NAMES ||
					  buf->len - start + st->len + 4 > STATE_LIST_BYTES))
		{
			appendStringInfo(buf, " and %d more", n - i);
			return;
		}
		appendStringInfo(buf, "%s\"%s\"", i > 0 ? ", " : "", st->name);
	}
}

/*
 * All states, quoted and comma-separated, in bytewise order (bounded:
 * append_state_list).
 */
char *
idem_machine_state_list(const IdemMachine *m)
{
	StringInfoData buf;

	initStringInfo(&buf);
	append_state_list(&buf, m, NULL, m->nstates);
	return buf.data;
}

/*
 * The initial states, quoted and comma-separated, in declared order
 * (bounded: append_state_list).
 */
char *
idem_machine_initial_list(const IdemMachine *m)
{
	StringInfoData buf;

	initStringInfo(&buf);
	append_state_list(&buf, m, m->initial, m->ninitial);
	return buf.data;
}

/*
 * A hint sentence naming the allowed targets of from (bounded:
 * append_state_list), or saying it is terminal.
 */
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

/*
 * The one rule of a guard, for idem_guard_allows (the WHEN condition) and
 * guard_trigger.c (which explains a refusal): the verdict on a row whose
 * status goes from `from` to `to` (NULL pointers for NULL values), or, for
 * an INSERT, enters the machine with `to`.  Values are compared bytewise.
 * Pure: no catalog access, no allocation.
 */
IdemGuardVerdict
idem_guard_verdict(const IdemMachine *m, const text *from, const text *to,
				   bool insert)
{
	int			f;
	int			t;

	t = to == NULL ? -1 :
		idem_machine_state(m, VARDATA_ANY(to), VARSIZE_ANY_EXHDR(to));
	if (insert || from == NULL)
	{
		if (!insert && to == NULL)
			return IDEM_GUARD_UNCHANGED;
		return t >= 0 && idem_machine_is_initial(m, t) ?
			IDEM_GUARD_ALLOWED : IDEM_GUARD_BAD_INITIAL;
	}
	if (to != NULL && VARSIZE_ANY_EXHDR(from) == VARSIZE_ANY_EXHDR(to) &&
		memcmp(VARDATA_ANY(from), VARDATA_ANY(to), VARSIZE_ANY_EXHDR(to)) == 0)
		return IDEM_GUARD_UNCHANGED;
	if (t < 0)
		return IDEM_GUARD_UNKNOWN_TO;
	f = idem_machine_state(m, VARDATA_ANY(from), VARSIZE_ANY_EXHDR(from));
	if (f < 0)
		return IDEM_GUARD_UNKNOWN_FROM;
	return idem_machine_allows(m, f, t) ? IDEM_GUARD_ALLOWED : IDEM_GUARD_UNDECLARED;
}
