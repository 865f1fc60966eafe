/*-------------------------------------------------------------------------
 *
 * machine_draft.h
 *	  A state machine definition on its way to a compiled machine: what
 *	  machine_parse.c (reading the jsonb) and machine_compile.c (interning,
 *	  checking, building) share.  No other file includes it.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDEM_MACHINE_DRAFT_H
#define IDEM_MACHINE_DRAFT_H

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

/* machine_parse.c: the errors of a definition, and reading it */
IDEM_NORETURN extern void idem_draft_malformed(const char *fname, const char *machine,
											   const char *detail);
IDEM_NORETURN extern void idem_draft_too_many_states(const Draft *d, int64 n, bool exact);
IDEM_NORETURN extern void idem_draft_too_many_transitions(const Draft *d, int64 n);
extern void idem_draft_top(Draft *d, Jsonb *def, JsonbValue *initial_v,
						   JsonbValue *trans_v);
extern void idem_draft_parse(Draft *d, JsonbValue *initial_v, JsonbValue *trans_v);

#endif							/* IDEM_MACHINE_DRAFT_H */
