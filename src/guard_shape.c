/*-------------------------------------------------------------------------
 *
 * guard_shape.c
 *	  The one definition of a guard trigger's shape: the WHEN conditions of
 *	  a guard's check triggers as idem_guard writes them (guard_install.c
 *	  creates the triggers with them), and what a real guard trigger is
 *	  (idem_guard_trigger_is_real), which the trigger itself (39P01),
 *	  idem_guard and its trigger (inheritance children), idem_unguard and
 *	  idem_machine_drop all apply.
 *
 *	  Invariant (docs/security.md, "only real guards count"): a check
 *	  trigger counts only when its whole WHEN condition is the one
 *	  idem_guard writes for the machine and columns of its arguments: the
 *	  stored tree (pg_trigger.tgqual) is compared with equal() to the
 *	  generated text analysed as CreateTrigger analyses it, never searched
 *	  for a call of idem_guard_allows (a condition that calls it AND false
 *	  enforces nothing).  The generated SQL binds only to the extension's
 *	  and pg_catalog's objects (schema-qualified, every argument cast).
 *
 *	  Locking: a check trigger's shape opens its table with
 *	  AccessShareLock (held to the end of the transaction; its callers
 *	  mostly hold a stronger lock already).  Memory: a parse of the
 *	  condition in a short-lived context of its own.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "parser/parse_clause.h"
#include "parser/parse_collate.h"
#include "parser/parse_func.h"
#include "parser/parse_relation.h"
#include "parser/parser.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "idempotency.h"
#include "guard.h"

/* The role named by a trigger's fourth argument; false when none. */
static bool
role_of(const char *arg, GuardRole *role)
{
	if (strcmp(arg, IDEM_GUARD_ROLE_CHECK) == 0)
		*role = GUARD_CHECK;
	else if (strcmp(arg, IDEM_GUARD_ROLE_VERSION) == 0)
		*role = GUARD_VERSION;
	else if (strcmp(arg, IDEM_GUARD_ROLE_LOG) == 0)
		*role = GUARD_LOG;
	else if (strcmp(arg, IDEM_GUARD_ROLE_CHILDREN) == 0)
		*role = GUARD_CHILDREN;
	else
		return false;
	return true;
}

/*
 * The SQL that says the status column qcol (quoted) changed, NULLs
 * included, by pg_catalog operators only.
 */
char *
idem_guard_changed_sql(const char *qcol)
{
	return psprintf("((OLD.%s IS NULL) OPERATOR(pg_catalog.<>) (NEW.%s IS NULL)"
					" OR (OLD.%s)::pg_catalog.text OPERATOR(pg_catalog.<>) (NEW.%s)::pg_catalog.text)",
					qcol, qcol, qcol, qcol);
}

/*
 * The WHEN condition of a check trigger as idem_guard writes it (the text
 * between "WHEN (" and ")"): of the INSERT trigger when insert, else of the
 * UPDATE trigger, with the version's lag when version_col is not NULL.
 * qnsp is the extension's schema, quoted.  Every call and operator is
 * schema-qualified and every argument cast to the declared type
 * (pg_catalog.text), so that no overload made beforehand (say
 * idem_guard_allows(text, varchar, varchar)) can capture the call.
 */
char *
idem_guard_check_when(const char *qnsp, const char *machine, const char *status_col,
					  const char *version_col, bool insert)
{
	const char *qcol = quote_identifier(status_col);
	const char *qmachine = quote_literal_cstr(machine);
	const char *qver;

	if (insert)
		return psprintf("(NEW.%s IS NULL) OR (NOT %s.idem_guard_allows(%s::pg_catalog.text,"
						" NULL::pg_catalog.text, (NEW.%s)::pg_catalog.text))",
						qcol, qnsp, qmachine, qcol);
	if (version_col == NULL)
		return psprintf("(NOT %s.idem_guard_allows(%s::pg_catalog.text,"
						" (OLD.%s)::pg_catalog.text, (NEW.%s)::pg_catalog.text))",
						qnsp, qmachine, qcol, qcol);
	qver = quote_identifier(version_col);
	return psprintf("(NOT %s.idem_guard_allows(%s::pg_catalog.text,"
					" (OLD.%s)::pg_catalog.text, (NEW.%s)::pg_catalog.text))"
					" OR (%s AND (NEW.%s OPERATOR(pg_catalog.<>) (OLD.%s OPERATOR(pg_catalog.+) 1)))",
					qnsp, qmachine, qcol, qcol, idem_guard_changed_sql(qcol), qver, qver);
}

/*
 * SQL expression text parsed and analysed as CreateTrigger analyses a
 * WHEN condition on rel (OLD is range table entry 1, NEW 2).
 */
static Node *
guard_when_tree(Relation rel, const char *expr)
{
	char	   *sql = psprintf("SELECT %s", expr);
	RawStmt    *raw = linitial_node(RawStmt, raw_parser(sql, RAW_PARSE_DEFAULT));
	ResTarget  *target = linitial_node(ResTarget, castNode(SelectStmt, raw->stmt)->targetList);
	ParseState *pstate = make_parsestate(NULL);
	ParseNamespaceItem *nsitem;
	Node	   *when;

	pstate->p_sourcetext = sql;
	nsitem = addRangeTableEntryForRelation(pstate, rel, AccessShareLock,
										   makeAlias("old", NIL), false, false);
	addNSItemToQuery(pstate, nsitem, false, true, true);
	nsitem = addRangeTableEntryForRelation(pstate, rel, AccessShareLock,
										   makeAlias("new", NIL), false, false);
	addNSItemToQuery(pstate, nsitem, false, true, true);
	when = transformWhereClause(pstate, target->val, EXPR_KIND_TRIGGER_WHEN, "WHEN");
	assign_expr_collations(pstate, when);
	free_parsestate(pstate);
	return when;
}

/*
 * Can column att of rel be the status column (version: the version
 * column) of a guard, so that the WHEN text naming it parses?  The types
 * idem_guard accepts; never a dropped or system column.
 */
static bool
guard_when_column(Relation rel, AttrNumber att, bool version)
{
	Form_pg_attribute attr;
	Oid			base;

	if (att <= 0 || att > RelationGetNumberOfAttributes(rel))
		return false;
	attr = TupleDescAttr(RelationGetDescr(rel), att - 1);
	if (attr->attisdropped)
		return false;
	if (version)
		return attr->atttypid == INT4OID || attr->atttypid == INT8OID;
	base = getBaseType(attr->atttypid);
	return base == TEXTOID || base == VARCHAROID;
}

/*
 * Is the WHEN condition qual of a check trigger on relid (an INSERT
 * trigger when insert) exactly the one idem_guard writes for the machine
 * and version of its arguments?  The whole tree is compared (equal(),
 * which ignores only parse locations) with the generated text analysed
 * as CreateTrigger does, for the columns the condition names (the status
 * column, and the version column when the arguments name one), under
 * their current names: a column renamed since still matches, and the
 * trigger then finds the rename (55000).  A condition that merely
 * contains a call of idem_guard_allows (AND false, say) is no guard.
 */
static bool
guard_when_is_exact(Oid relid, const char *qual, bool insert, char **args, Oid allows,
					AttrNumber *status_att)
{
	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext, "idempotency guard shape",
											  ALLOCSET_SMALL_SIZES);
	MemoryContext old = MemoryContextSwitchTo(cxt);
	Node	   *stored = (Node *) stringToNode(qual);
	bool		version = !insert && args[2][0] != '\0';
	AttrNumber	atts[2] = {InvalidAttrNumber, InvalidAttrNumber};
	int			natts = 0;
	bool		exact = false;
	ListCell   *lc;
	Relation	rel = NULL;
	char	   *qnsp;

	/* The columns the condition names: one, or two with a version. */
	foreach(lc, pull_var_clause(stored, 0))
	{
		Var		   *v = lfirst_node(Var, lc);

		if (v->varlevelsup != 0 || v->varattno <= 0 || (natts == 2 &&
			atts[0] != v->varattno && atts[1] != v->varattno))
		{
			natts = 3;			/* not a guard's */
			break;
		}
		if (natts == 0 || (atts[0] != v->varattno && natts == 1))
			atts[natts++] = v->varattno;
	}
	qnsp = get_namespace_name(get_func_namespace(allows));
	if (natts == (version ? 2 : 1) && qnsp != NULL)
		rel = try_relation_open(relid, AccessShareLock);
	/* The status column first, then the other order. */
	for (int i = 0; rel != NULL && !exact && i < natts; i++)
	{
		AttrNumber	status = atts[i];
		AttrNumber	ver = version ? atts[1 - i] : InvalidAttrNumber;

		if (!guard_when_column(rel, status, false) ||
			(version && !guard_when_column(rel, ver, true)))
			continue;
		exact = equal(stored,
					  guard_when_tree(rel,
									  idem_guard_check_when(quote_identifier(qnsp), args[0],
															get_attname(relid, status, false),
															version ? get_attname(relid, ver, false) : NULL,
															insert)));
		if (exact && status_att != NULL)
			*status_att = status;
	}
	if (rel != NULL)
		relation_close(rel, NoLock);
	MemoryContextSwitchTo(old);
	MemoryContextDelete(cxt);
	return exact;
}

/* The OID of idem_guard_allows(text, text, text) in schema nsp. */
Oid
idem_guard_allows_oid(Oid nsp)
{
	Oid			argtypes[3] = {TEXTOID, TEXTOID, TEXTOID};
	char	   *nspname = get_namespace_name(nsp);

	List	   *name;

	if (nspname == NULL)
		elog(ERROR, "cache lookup failed for schema %u", nsp);
	name = list_make1(makeString(nspname));
	name = lappend(name, makeString("idem_guard_allows"));
	return LookupFuncName(name, 3, argtypes, false);
}

/*
 * Is a trigger of idem_guard_trigger (its type, number of UPDATE OF
 * columns, WHEN condition as stored in pg_trigger.tgqual, arguments) shaped
 * as idem_guard makes the trigger of its role?  The one definition of a
 * real guard trigger: the trigger refuses to run otherwise (39P01), and
 * idem_unguard and idem_machine_drop count nothing else.  allows is the
 * OID of the extension's idem_guard_allows: a check trigger's WHEN must be
 * the whole condition idem_guard writes on relid, which calls it for the
 * machine of its arguments (a check trigger's shape takes a lock on relid,
 * AccessShareLock, and a parse).  *role is set when true, and for a check
 * *status_att (unless NULL): the column its condition checks.
 *
 *	check     AFTER ROW, INSERT or UPDATE, WHEN exactly as idem_guard
 *	          writes it for the machine of its arguments (guard_when_is_exact)
 *	version   BEFORE ROW UPDATE, WHEN
 *	log       AFTER ROW, INSERT or UPDATE, WHEN (a fifth argument: Citus)
 *	children  BEFORE STATEMENT UPDATE, no WHEN
 * None has UPDATE OF columns (those miss a change made by a BEFORE
 * trigger); the row triggers' WHEN conditions name the status column, so
 * that they depend on it (pg_depend) and follow it through renames.
 */
bool
idem_guard_trigger_is_real(Oid relid, int16 tgtype, int tgnattr, const char *tgqual,
						   int nargs, char **args, Oid allows, GuardRole *role,
						   AttrNumber *status_att)
{
	bool		row = TRIGGER_FOR_ROW(tgtype);
	bool		before = TRIGGER_FOR_BEFORE(tgtype);
	bool		ins = TRIGGER_FOR_INSERT(tgtype);
	bool		upd = TRIGGER_FOR_UPDATE(tgtype);

	if (nargs < IDEM_GUARD_NARGS || nargs > IDEM_GUARD_NARGS + 1 ||
		!role_of(args[3], role))
		return false;
	if (nargs > IDEM_GUARD_NARGS && *role != GUARD_LOG)
		return false;
	if (TRIGGER_FOR_INSTEAD(tgtype) || TRIGGER_FOR_DELETE(tgtype) ||
		TRIGGER_FOR_TRUNCATE(tgtype) || tgnattr != 0 || ins == upd)
		return false;
	switch (*role)
	{
		case GUARD_CHECK:
			return row && !before && tgqual != NULL &&
				guard_when_is_exact(relid, tgqual, ins, args, allows, status_att);
		case GUARD_VERSION:
			return row && before && upd && tgqual != NULL;
		case GUARD_LOG:
			return row && !before && tgqual != NULL;
		case GUARD_CHILDREN:
			return !row && before && upd && tgqual == NULL;
	}
	return false;
}

/*
 * Does rel carry a real guard (its UPDATE check trigger, enabled) of
 * machine on a column called column?  From the relcache's trigger
 * descriptor; trigfunc is idem_guard_trigger, allows idem_guard_allows.
 */
bool
idem_rel_guarded(Relation rel, Oid trigfunc, Oid allows, const char *machine,
				 const char *column)
{
	TriggerDesc *trigdesc = rel->trigdesc;

	if (trigdesc == NULL)
		return false;
	for (int i = 0; i < trigdesc->numtriggers; i++)
	{
		Trigger    *t = &trigdesc->triggers[i];
		GuardRole	role;
		AttrNumber	att = InvalidAttrNumber;

		/* Its condition checks the column of that name, not another. */
		if (t->tgfoid == trigfunc && t->tgenabled != TRIGGER_DISABLED &&
			idem_guard_trigger_is_real(RelationGetRelid(rel), t->tgtype, t->tgnattr, t->tgqual,
									   t->tgnargs, t->tgargs, allows, &role, &att) &&
			role == GUARD_CHECK && TRIGGER_FOR_UPDATE(t->tgtype) &&
			strcmp(t->tgargs[0], machine) == 0 && strcmp(t->tgargs[1], column) == 0 &&
			att == get_attnum(RelationGetRelid(rel), column))
			return true;
	}
	return false;
}

