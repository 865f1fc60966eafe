/*-------------------------------------------------------------------------
 *
 * machine.h
 *	  State machines: a definition compiled (machine_compile.c), the questions
 *	  a compiled machine answers and THE rule of a guard (machine.c), and the
 *	  per-backend cache of compiled machines (machine_cache.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDEM_MACHINE_H
#define IDEM_MACHINE_H

#include "idempotency.h"

#include "utils/jsonb.h"

/* Limit on machine names, in bytes (a CHECK on idem_machines says the same). */
#define IDEM_MAX_MACHINE_BYTES	63
/*
 * Limits on a machine's size (docs/reference.md): at these sizes a
 * compile takes well under a second (54000 beyond).
 */
#define IDEM_MAX_MACHINE_STATES			100000
#define IDEM_MAX_MACHINE_TRANSITIONS	1000000

/*
 * A compiled state machine.  When idem_machine_get sets *cached, the
 * machine belongs to the per-backend cache in machine_cache.c and stays valid
 * until idem_machine_generation changes (a definition changed, in any
 * session); otherwise it lives in the caller's memory context and is for
 * the current call only.  A caller that uses a cached machine across
 * anything that may accept invalidations (detoasting an argument, SPI, a
 * catalog lookup, a lock, user code) pins it (idem_machine_pin) for that
 * time: an invalidation then retires the machine instead of freeing it.
 */
typedef struct IdemMachine IdemMachine;

/*
 * The compiled form (only machine_compile.c, which builds it, and
 * machine.c, which answers questions on it, look inside): the states are
 * interned in one array sorted bytewise (binary search by name); each
 * state has its targets as indexes, in declared order for messages and
 * sorted for binary search.  Names and targets live in three flat arrays,
 * so a machine is a handful of allocations whatever its size.
 */
typedef struct IdemState
{
	char	   *name;			/* NUL-terminated, in IdemMachine.names */
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
	char	   *names;			/* every state name, each NUL-terminated */
	int		   *targets;		/* every state's targets, declared order */
	int		   *sorted;			/* every state's targets, ascending */
};

/* Bytewise order of two counted strings (the order of collation "C"). */
static inline int
idem_name_cmp(const char *a, int alen, const char *b, int blen)
{
	int			c = memcmp(a, b, Min(alen, blen));

	if (c != 0)
		return c;
	return (alen > blen) - (alen < blen);
}

/* machine_compile.c */
extern IdemMachine *idem_machine_compile(const char *name, int namelen,
										 Jsonb *def, const char *fname);

/* machine.c */
extern void idem_check_machine_name(const char *name, int len, const char *fname);
extern void idem_machine_free(IdemMachine *m);
extern void idem_machine_set_parent(IdemMachine *m, MemoryContext parent);
extern const char *idem_machine_name(const IdemMachine *m);
extern const char *idem_machine_state_name(const IdemMachine *m, int state);
extern int	idem_machine_state(const IdemMachine *m, const char *state, int len);
extern bool idem_machine_is_initial(const IdemMachine *m, int state);
extern bool idem_machine_allows(const IdemMachine *m, int from, int to);
extern char *idem_machine_state_list(const IdemMachine *m);
extern char *idem_machine_initial_list(const IdemMachine *m);
extern char *idem_machine_targets_hint(const IdemMachine *m, int from);
extern int	idem_machine_nstates(const IdemMachine *m);

/*
 * The rule of a guard, one verdict for the WHEN condition
 * (idem_guard_allows) and the trigger that explains a refusal
 * (guard_trigger.c, guard_error.c).
 */
typedef enum IdemGuardVerdict
{
	IDEM_GUARD_ALLOWED,			/* a declared transition, or initial state */
	IDEM_GUARD_UNCHANGED,		/* the same value (NULL included) */
	IDEM_GUARD_BAD_INITIAL,		/* entering (INSERT, or from NULL) not initial */
	IDEM_GUARD_UNKNOWN_TO,		/* the new value is not a state */
	IDEM_GUARD_UNKNOWN_FROM,	/* the old value is not a state */
	IDEM_GUARD_UNDECLARED		/* both states, no such transition */
} IdemGuardVerdict;

extern IdemGuardVerdict idem_guard_verdict(const IdemMachine *m, const text *from,
										   const text *to, bool insert);

/* machine_cache.c */
extern uint64 idem_machine_generation;

extern void idem_machine_cache_init(void);
extern IdemMachine *idem_machine_get(Oid nsp, const char *name, int len,
									 const char *fname, bool *cached);
extern IdemMachine *idem_machine_of_call(FunctionCallInfo fcinfo, const char *fname);
extern void idem_call_text_args(FunctionCallInfo fcinfo, text **args, int nargs);
/* Hold every machine in use across what may accept invalidations. */
extern void idem_machine_pin(void);
extern void idem_machine_unpin(void);
extern Oid	idem_machines_relid(Oid nsp);

#endif							/* IDEM_MACHINE_H */
