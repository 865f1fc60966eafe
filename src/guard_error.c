/*-------------------------------------------------------------------------
 *
 * guard_error.c
 *	  The errors a table guard raises inside the user's own statement
 *	  (guard_trigger.c, guard_cache.c): the prefix every message begins
 *	  with, "guarded update of <table>" or "guarded insert into <table>"
 *	  (the user never called idem_guard), the refusal of a status change
 *	  (ID004, worded by the verdict of idem_guard_verdict, machine.c, the
 *	  same rule the WHEN condition applied), and the 39P01 of a trigger
 *	  that idem_guard did not make.  The states its messages list and
 *	  its hints are read from the machine itself (machine.c).
 *
 *	  Locking, visibility: none; the error rolls the user's statement
 *	  back.  Memory: messages are built in the trigger's call context.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "commands/trigger.h"
#include "utils/builtins.h"
#include "utils/rel.h"

#include "idempotency.h"
#include "guard.h"
#include "machine.h"

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

/* 39P01: the firing trigger is not one idem_guard made. */
void
idem_not_a_guard(Trigger *tg)
{
	ereport(ERROR,
			(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
			 errmsg("idem_guard_trigger: trigger \"%s\" was not created by idem_guard()",
					tg->tgname),
			 errhint("Install guards with idem_guard(); a guard made before 0.5.0 is renewed by ALTER EXTENSION idempotency UPDATE or by calling idem_guard() again.")));
}

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

/*
 * Raise ID004 for a refused change of the status from `from` to `to`
 * (verdict v, from idem_guard_verdict): the message says why.
 */
void
idem_guard_refuse(GuardEntry *e, IdemMachine *m, TriggerData *td, text *from, text *to,
			 IdemGuardVerdict v)
{
	Relation	rel = td->tg_relation;
	const char *mname = idem_machine_name(m);
	const char *doing = idem_guard_doing(td, e->table_name);

	switch (v)
	{
		case IDEM_GUARD_ALLOWED:
		case IDEM_GUARD_UNCHANGED:
			return;
		case IDEM_GUARD_BAD_INITIAL:
			ereport(ERROR,
					(errcode(ERRCODE_IDEM_ILLEGAL_TRANSITION),
					 errmsg("%s: illegal initial state %s", doing, show(to)),
					 errdetail("Machine \"%s\" does not allow a row to start in %s (column \"%s\" of table %s).",
							   mname, show(to), e->status_name, e->table_name),
					 errhint("The initial states are %s.", idem_machine_initial_list(m)),
					 errtablecol(rel, e->status_att)));
			break;
		case IDEM_GUARD_UNKNOWN_TO:
			ereport(ERROR,
					(errcode(ERRCODE_IDEM_ILLEGAL_TRANSITION),
					 errmsg("%s: illegal transition from %s to %s", doing, show(from), show(to)),
					 errdetail("Machine \"%s\" does not allow the transition from %s to %s: %s is not a state of the machine (column \"%s\" of table %s).",
							   mname, show(from), show(to), show(to),
							   e->status_name, e->table_name),
					 errhint("The states of machine \"%s\" are %s.", mname,
							 idem_machine_state_list(m)),
					 errtablecol(rel, e->status_att)));
			break;
		case IDEM_GUARD_UNKNOWN_FROM:
			ereport(ERROR,
					(errcode(ERRCODE_IDEM_ILLEGAL_TRANSITION),
					 errmsg("%s: illegal transition from %s to %s", doing, show(from), show(to)),
					 errdetail("Machine \"%s\" does not allow the transition from %s to %s: the current value %s is not a state of the machine (column \"%s\" of table %s).",
							   mname, show(from), show(to), show(from),
							   e->status_name, e->table_name),
					 errhint("Add the state to the machine with idem_machine_define(), or leave the value unchanged."),
					 errtablecol(rel, e->status_att)));
			break;
		case IDEM_GUARD_UNDECLARED:
			ereport(ERROR,
					(errcode(ERRCODE_IDEM_ILLEGAL_TRANSITION),
					 errmsg("%s: illegal transition from %s to %s", doing, show(from), show(to)),
					 errdetail("Machine \"%s\" does not allow the transition from %s to %s (column \"%s\" of table %s).",
							   mname, show(from), show(to), e->status_name, e->table_name),
					 errhint("%s", idem_machine_targets_hint(m, state_of(m, from))),
					 errtablecol(rel, e->status_att)));
			break;
	}
}
