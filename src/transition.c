/*-------------------------------------------------------------------------
 *
 * transition.c
 *	  The SQL API of state machines: idem_machine_define and
 *	  idem_machine_drop (the definitions in idem_machines),
 *	  idem_can_transition, idem_transition, idem_transition_strict and
 *	  idem_sources (asking a machine).  The rule of a table guard,
 *	  idem_guard_allows, lives beside the trigger (guard_trigger.c).
 *
 *	  Calls: machine_cache.c for the machine of a call
 *	  (idem_machine_of_call), machine.c's questions, machine_compile.c
 *	  (a definition checked before it is written), guard_install.c
 *	  (idem_guards_of_machine) when a machine is dropped, args.c and
 *	  query.c; nothing calls back into this file.
 *
 *	  Cache: each call site keeps the machine it used last in fn_extra,
 *	  valid while idem_machine_generation (machine_cache.c) is unchanged,
 *	  so a repeated call with the same name costs one memcmp.
 *
 *	  Locking and visibility: idem_machine_define and idem_machine_drop
 *	  write idem_machines through SPI in the caller's transaction (row locks
 *	  as any INSERT ... ON CONFLICT or DELETE) and register the relcache
 *	  invalidation that makes every backend drop its cache after commit.
 *	  The questions take no lock and read no table once the machine is
 *	  cached.
 *
 *	  Memory: a machine in fn_extra belongs to the cache, or, in parallel
 *	  mode, to fn_mcxt for the rest of the query.  Every argument is
 *	  fetched (detoasted: that opens the TOAST table, takes a lock and
 *	  accepts invalidations) before the machine is looked up, and the
 *	  machine is pinned (idem_machine_pin) from the lookup to the return,
 *	  so a cache reset in between retires it instead of freeing it under
 *	  us (idem_machine_of_call pins, every function unpins before it returns; an
 *	  error leaves the pin to the end of the transaction).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/parallel.h"
#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"

#include "idempotency.h"
#include "guard.h"
#include "machine.h"

PG_FUNCTION_INFO_V1(idem_machine_define);
PG_FUNCTION_INFO_V1(idem_machine_drop);
PG_FUNCTION_INFO_V1(idem_can_transition);
PG_FUNCTION_INFO_V1(idem_transition);
PG_FUNCTION_INFO_V1(idem_transition_strict);
PG_FUNCTION_INFO_V1(idem_sources);

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
/* The machine-name argument: not NULL (22004), then idem_check_machine_name. */
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
 * SQL-callable functions
 * ------------------------------------------------------------------------
 */

/* The state named by a text argument; 22023 when it is not a state. */
static int
state_arg(const IdemMachine *m, text *t, const char *fname)
{
	int			s = idem_machine_state(m, VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));

	if (s < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s: \"%s\" is not a state of machine \"%s\"",
						fname, text_to_cstring(t), idem_machine_name(m)),
				 errdetail("The states of machine \"%s\" are %s.",
						   idem_machine_name(m), idem_machine_state_list(m))));
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
	text	   *args[3];
	IdemMachine *m;
	int			from;
	int			to;
	bool		result;

	idem_call_text_args(fcinfo, args, 3);
	m = idem_machine_of_call(fcinfo, fname);
	if (args[1] == NULL || args[2] == NULL)
		result = false;
	else
	{
		from = state_arg(m, args[1], fname);
		to = state_arg(m, args[2], fname);
		result = idem_machine_allows(m, from, to);
	}
	idem_machine_unpin();
	PG_RETURN_BOOL(result);
}

/*
 * A repeated transition in idem_transition (an undeclared move from a
 * state to itself) gives a WARNING: the state is returned unchanged, so an
 * UPDATE that sets other columns with it (paid = paid + 100) applies them
 * again for a repeated event, without an error.  idem_transition_strict is
 * the form that refuses; a status-only UPDATE that repeats on purpose can
 * move the row WHERE idem_can_transition(...) instead.
 */
static void
warn_repeat(IdemMachine *m, int state)
{
	ereport(WARNING,
			(errmsg("idem_transition: repeated transition to \"%s\" keeps the row's state, and the rest of the statement runs",
					idem_machine_state_name(m, state)),
			 errdetail("Machine \"%s\" does not declare a transition from \"%s\" to itself, so idem_transition returns the state unchanged: an UPDATE that also sets other columns (paid = paid + 100) applies them again for a repeated event.",
					   idem_machine_name(m), idem_machine_state_name(m, state)),
			 errhint("Use idem_transition_strict, which refuses the repeat (ID006), or move the row only WHERE idem_can_transition(...).")));
}

/*
 * The body of idem_transition and idem_transition_strict: to_state when
 * from_state -> to_state is declared.  When the two are equal and the
 * machine does not declare the move (a repeated event), idem_transition
 * returns from_state unchanged and idem_transition_strict raises ID006.
 * Fails with 22004 (any argument NULL), 22023/22001 (bad machine name),
 * 42704 (no such machine), 22023 (from_state or to_state is not a state
 * of it), ID004 (the transition is not declared; the hint lists the
 * allowed targets), ID006 (strict only: the repeat).
 */
static Datum
transition_internal(FunctionCallInfo fcinfo, bool strict, const char *fname)
{
	text	   *args[3];
	IdemMachine *m;
	int			from;
	int			to;

	idem_call_text_args(fcinfo, args, 3);
	m = idem_machine_of_call(fcinfo, fname);
	if (args[1] == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s: from_state must not be null", fname)));
	if (args[2] == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s: to_state must not be null", fname)));
	from = state_arg(m, args[1], fname);
	to = state_arg(m, args[2], fname);

	if (from == to && !strict)
	{
		if (!idem_machine_allows(m, from, to))
			warn_repeat(m, to);
		idem_machine_unpin();
		PG_RETURN_DATUM(PG_GETARG_DATUM(1));
	}
	if (idem_machine_allows(m, from, to))
	{
		idem_machine_unpin();
		PG_RETURN_DATUM(PG_GETARG_DATUM(2));
	}
	if (from == to)
		ereport(ERROR,
				(errcode(ERRCODE_IDEM_REPEATED_TRANSITION),
				 errmsg("%s: repeated transition to \"%s\"",
						fname, idem_machine_state_name(m, to)),
				 errdetail("The row is in state \"%s\" already, and machine \"%s\" does not declare a transition from \"%s\" to itself.",
						   idem_machine_state_name(m, to), idem_machine_name(m),
						   idem_machine_state_name(m, to)),
				 errhint("The event has been applied already: treat it as a duplicate (the statement wrote nothing).")));
	ereport(ERROR,
			(errcode(ERRCODE_IDEM_ILLEGAL_TRANSITION),
			 errmsg("%s: illegal transition from \"%s\" to \"%s\"",
					fname, idem_machine_state_name(m, from),
					idem_machine_state_name(m, to)),
			 errdetail("Machine \"%s\" does not allow the transition from \"%s\" to \"%s\".",
					   idem_machine_name(m), idem_machine_state_name(m, from),
					   idem_machine_state_name(m, to)),
			 errhint("%s", idem_machine_targets_hint(m, from))));
}

/*
 * idem_transition(machine text, from_state text, to_state text) RETURNS text
 *
 * to_state when from_state -> to_state is declared; from_state unchanged
 * when the two are equal (a repeated event: the rest of an UPDATE that
 * calls it in its SET clause still runs).  Fails as transition_internal.
 */
Datum
idem_transition(PG_FUNCTION_ARGS)
{
	return transition_internal(fcinfo, false, "idem_transition");
}

/*
 * idem_transition_strict(machine text, from_state text, to_state text)
 *   RETURNS text
 *
 * to_state when from_state -> to_state is declared, a declared move from
 * a state to itself included; otherwise an error: ID006 when the two are
 * equal (a repeated event, so that an UPDATE setting other columns with
 * it fails as a whole instead of applying them again), ID004 for any
 * other undeclared move.  Fails also as transition_internal.
 */
Datum
idem_transition_strict(PG_FUNCTION_ARGS)
{
	return transition_internal(fcinfo, true, "idem_transition_strict");
}

/*
 * idem_sources(machine text, to_state text) RETURNS text[]
 *
 * The states from which machine declares a transition to to_state, in
 * bytewise order of their names (empty when none).  Meant for the guarded
 * UPDATE that moves a row only when the move is legal, on Citus too, where
 * it is called without column references and so evaluated once on the
 * coordinator: UPDATE t SET status = 'paid' WHERE id = 1 AND status =
 * ANY (idem_sources('order', 'paid')).  Fails with 22004 (NULL machine or
 * to_state), 22023/22001 (bad machine name), 42704 (no such machine),
 * 22023 (to_state is not a state of it).
 */
Datum
idem_sources(PG_FUNCTION_ARGS)
{
	const char *fname = "idem_sources";
	text	   *args[2];
	IdemMachine *m;
	int			n;
	Datum	   *elems;
	int			count = 0;
	int			to;
	int			s;

	idem_call_text_args(fcinfo, args, 2);
	m = idem_machine_of_call(fcinfo, fname);
	if (args[1] == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s: to_state must not be null", fname)));
	to = state_arg(m, args[1], fname);
	n = idem_machine_nstates(m);
	elems = palloc(sizeof(Datum) * Max(n, 1));
	for (s = 0; s < n; s++)
		if (idem_machine_allows(m, s, to))
			elems[count++] = CStringGetTextDatum(idem_machine_state_name(m, s));
	idem_machine_unpin();
	PG_RETURN_ARRAYTYPE_P(construct_array(elems, count, TEXTOID, -1, false, TYPALIGN_INT));
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
	m = idem_machine_compile(VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name), def, fname);
	idem_machine_free(m);

	idem_check_writable(fname);

	values[0] = PointerGetDatum(name);
	values[1] = PointerGetDatum(def);

	idem_spi_connect();
	CacheInvalidateRelcacheByRelid(idem_machines_relid(nsp));
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
	CacheInvalidateRelcacheByRelid(idem_machines_relid(nsp));

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
