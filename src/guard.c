/*-------------------------------------------------------------------------
 *
 * guard.c
 *	  The guard installer: idem_guard installs C triggers that enforce a
 *	  state machine on a status column, whatever SQL touches the table;
 *	  idem_unguard removes them.  This file checks the arguments, the table
 *	  and its columns; the triggers (check, insert, version, log, lognew,
 *	  children) and their WHEN conditions are tabled in docs/reference.md.
 *	  The check lives in the WHEN condition, so a legal row costs one call
 *	  of idem_guard_allows and queues no event; only a row that breaks the
 *	  machine fires the trigger, which raises ID004 at statement end.
 *
 *	  Invariant (docs/security.md, "a guard sees every change of its
 *	  column"): the check is AFTER and never UPDATE OF, so it sees the row
 *	  as written after every BEFORE trigger and a status such a trigger
 *	  set; the version is checked against the status there too; every row
 *	  trigger's WHEN names the column, so pg_depend follows it by attribute
 *	  through renames; a table with inheritance children is refused unless
 *	  every child is guarded alike, a partitioned table always (a row moved
 *	  to another partition is a new insert).  Generated SQL binds only to
 *	  our objects and pg_catalog's; only real guards (guard_shape.c) count
 *	  for idem_unguard and idem_machine_drop.
 *
 *	  pg_trigger is the only registry: a guard goes with its table, its
 *	  column (CASCADE) or the extension (CASCADE), and is found by function
 *	  and dependency, never by name.  Arguments are names, so a dump
 *	  restores them; after renaming a guarded column, call idem_guard again.
 *
 *	  Locking: the TRIGGER privilege is checked first, so nobody can lock a
 *	  table they may not guard; then idem_guard takes ShareRowExclusiveLock
 *	  (as CREATE TRIGGER), idem_unguard AccessExclusiveLock (DROP TRIGGER).
 *	  Citus (docs/citus.md): only hash-distributed tables, not by the status
 *	  or version column; citus.enable_unsafe_triggers is set for the call
 *	  only (a GUC nest level); history goes to a co-located
 *	  <table>_transitions.  Visibility: DDL through SPI in the caller's
 *	  transaction, so a guard appears or goes at its commit.  Memory: the
 *	  caller's context and SPI's; nothing is kept across calls.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/table.h"
#include "access/sysattr.h"
#include "access/xact.h"
#include "catalog/objectaddress.h"
#include "catalog/pg_class.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "common/hashfn.h"
#include "common/int.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "nodes/bitmapset.h"
#include "parser/parse_func.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/ruleutils.h"
#include "utils/syscache.h"
#include "utils/xid8.h"

#include "idempotency.h"
#include "citus.h"
#include "guard.h"
#include "machine.h"

PG_FUNCTION_INFO_V1(idem_guard);
PG_FUNCTION_INFO_V1(idem_unguard);

static Oid	guard_args(FunctionCallInfo fcinfo, GuardSpec *g, text **machine,
					   bool *history, const char *fname);
static AttrNumber guard_columns(Oid relid, const GuardSpec *g, bool citus,
								AttrNumber *distatt, int32 *colocation,
								const char *fname);
static char *name_arg(FunctionCallInfo fcinfo, int argno, const char *what,
					  const char *fname);
static char *lock_guarded_table(Oid relid, LOCKMODE mode, const char *fname);
static AttrNumber user_column(Oid relid, const char *table, const char *column,
							  const char *fname);
static AttrNumber version_column(Oid relid, const char *table,
								 const char *version_col, AttrNumber status_att,
								 const char *fname);
static void check_children_guarded(Oid relid, Oid nsp, const char *table,
								   const char *column, const char *machine,
								   const char *fname);

/*
 * idem_guard(tbl regclass, status_column name, machine text,
 *            version_column name DEFAULT NULL, history boolean DEFAULT false)
 *   RETURNS void
 *
 * Installs (or replaces) the guard of tbl.status_column: from now on every
 * INSERT and every UPDATE of the column must follow machine.  Rows already
 * in the table are not checked.  Fails with 22004 (NULL tbl, status_column,
 * machine or history), 22023/22001 (bad machine name), 25006 (read-only
 * transaction), 42501 (no TRIGGER privilege on tbl), 42809 (not a table),
 * 0A000 (partitioned table), 42703 (no such column), 42804 (status not
 * text/varchar, version not integer/bigint), 22023 (version column is the
 * status column), 42704 (no such machine); on Citus, 0A000 (a Citus table
 * that is not hash-distributed, or the distribution column as status or
 * version column) and 42P07 (<table>_transitions exists and is not its
 * history table).
 */
Datum
idem_guard(PG_FUNCTION_ARGS)
{
	const char *fname = "idem_guard";
	Oid			nsp = idem_extension_schema(fcinfo);
	Oid			relid;
	GuardSpec	g;
	text	   *machine;
	bool		history;
	AttrNumber	status_att;
	bool		cached;
	bool		citus;
	AttrNumber	distatt = 0;
	int32		colocation = 0;
	int			level = 0;

	relid = guard_args(fcinfo, &g, &machine, &history, fname);
	idem_check_writable(fname);

	g.table = lock_guarded_table(relid, ShareRowExclusiveLock, fname);
	citus = idem_citus_guardable(relid, g.table, fname);
	status_att = guard_columns(relid, &g, citus, &distatt, &colocation, fname);

	/* The machine must exist (42704); it is compiled into the cache. */
	(void) idem_machine_get(nsp, VARDATA_ANY(machine), VARSIZE_ANY_EXHDR(machine),
							fname, &cached);

	g.qnsp = quote_identifier(get_namespace_name(nsp));
	g.machine = text_to_cstring(machine);
	g.qmachine = quote_literal_cstr(g.machine);

	/* Inheritance children are reached by an UPDATE: they need the guard. */
	if (!citus && has_subclass(relid))
		check_children_guarded(relid, nsp, g.table, g.status_col,
							   text_to_cstring(machine), fname);

	idem_spi_connect();
	if (citus)
		level = idem_guard_citus_begin();
	if (citus && history)
		g.history_table = idem_guard_history_table(relid, g.table, distatt, colocation, fname);

	idem_guard_drop_triggers(relid, nsp, status_att, g.status_col, g.table);
	idem_guard_create_triggers(&g, history, !citus);

	if (citus)
		idem_guard_citus_end(level);
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * idem_unguard(tbl regclass, status_column name) RETURNS void
 *
 * Removes the guard of tbl.status_column: every trigger idem_guard made
 * for it, whatever they are called now.  Fails with 22004 (NULL
 * argument), 25006 (read-only transaction), 42501 (no TRIGGER privilege,
 * or not the owner), 42809 (not a table), 42704 (the column has no guard).
 */
Datum
idem_unguard(PG_FUNCTION_ARGS)
{
	const char *fname = "idem_unguard";
	Oid			nsp = idem_extension_schema(fcinfo);
	Oid			relid;
	char	   *status_col;
	char	   *table;
	AttrNumber	status_att;
	bool		citus;
	int			level = 0;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s: tbl must not be null", fname)));
	relid = PG_GETARG_OID(0);
	status_col = name_arg(fcinfo, 1, "status_column", fname);

	idem_check_writable(fname);

	table = lock_guarded_table(relid, AccessExclusiveLock, fname);
	/* Any Citus table: a guard copied to its shards is removed from them. */
	citus = idem_citus_table(relid);
	status_att = user_column(relid, table, status_col, fname);

	idem_spi_connect();
	if (citus)
		level = idem_guard_citus_begin();
	if (idem_guard_drop_triggers(relid, nsp, status_att, status_col, table) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("%s: column \"%s\" of table %s has no guard",
						fname, status_col, table)));
	if (citus)
		idem_guard_citus_end(level);
	SPI_finish();
	PG_RETURN_VOID();
}

static char *
name_arg(FunctionCallInfo fcinfo, int argno, const char *what, const char *fname)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s: %s must not be null", fname, what)));
	return pstrdup(NameStr(*PG_GETARG_NAME(argno)));
}

/*
 * Check the TRIGGER privilege, then lock the table and return its
 * schema-qualified, quoted name.  42501 without privilege, 42P01 when the
 * table vanished, 42809 when it is not a table, 0A000 when partitioned.
 */
static char *
lock_guarded_table(Oid relid, LOCKMODE mode, const char *fname)
{
	AclResult	acl;
	char		relkind;
	char	   *relname;
	char	   *nspname;

	relname = get_rel_name(relid);
	if (relname == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("%s: relation with OID %u does not exist", fname, relid)));
	relkind = get_rel_relkind(relid);
	acl = pg_class_aclcheck(relid, GetUserId(), ACL_TRIGGER);
	if (acl != ACLCHECK_OK)
		aclcheck_error(acl, get_relkind_objtype(relkind), relname);

	LockRelationOid(relid, mode);
	if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(relid)))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("%s: relation \"%s\" was dropped", fname, relname)));

	relkind = get_rel_relkind(relid);
	nspname = get_namespace_name(get_rel_namespace(relid));
	relname = get_rel_name(relid);
	if (relkind == RELKIND_PARTITIONED_TABLE)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("%s: partitioned table %s cannot be guarded", fname,
						quote_qualified_identifier(nspname, relname)),
				 errdetail("A row moved to another partition is inserted there anew, which a guard would have to reject."),
				 errhint("Guard the partitions, and do not move rows between them.")));
	if (relkind != RELKIND_RELATION)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("%s: %s is not a table", fname,
						quote_qualified_identifier(nspname, relname))));
	return quote_qualified_identifier(nspname, relname);
}

/* attnum of a user column, or 42703. */
static AttrNumber
user_column(Oid relid, const char *table, const char *column, const char *fname)
{
	AttrNumber	att = get_attnum(relid, column);

	if (att <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("%s: column \"%s\" of table %s does not exist",
						fname, column, table)));
	return att;
}
/*
 * The attnum of the version column of a guard on the status column
 * status_att: a user column other than the status, integer or bigint
 * (42703, 22023, 42804).
 */
static AttrNumber
version_column(Oid relid, const char *table, const char *version_col,
			   AttrNumber status_att, const char *fname)
{
	AttrNumber	version_att = user_column(relid, table, version_col, fname);
	Oid			type;

	if (version_att == status_att)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s: the version column must differ from the status column",
						fname)));
	type = get_atttype(relid, version_att);
	if (type != INT4OID && type != INT8OID)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("%s: version column \"%s\" must be of type integer or bigint",
						fname, version_col),
				 errdetail("Column \"%s\" of table %s is of type %s.",
						   version_col, table, format_type_be(type))));
	return version_att;
}

/*
 * Every inheritance child (at any depth) of relid must carry the guard of
 * machine on its column called column (made by idem_guard on the child
 * first): an UPDATE of relid reaches the children's rows, and their
 * triggers are their own.  0A000 otherwise.  The guard's statement
 * trigger ("children") checks the same at every UPDATE, for children
 * added later.
 */
static void
check_children_guarded(Oid relid, Oid nsp, const char *table, const char *column,
					   const char *machine, const char *fname)
{
	List	   *fname_list = list_make1(makeString(get_namespace_name(nsp)));
	Oid			trigfunc;
	Oid			allows = idem_guard_allows_oid(nsp);
	List	   *kids = find_all_inheritors(relid, AccessShareLock, NULL);
	ListCell   *lc;

	fname_list = lappend(fname_list, makeString("idem_guard_trigger"));
	trigfunc = LookupFuncName(fname_list, 0, NULL, false);

	foreach(lc, kids)
	{
		Oid			kid = lfirst_oid(lc);
		Relation	c;
		char	   *name;

		if (kid == relid)
			continue;
		c = table_open(kid, NoLock);	/* locked by find_all_inheritors */
		if (!idem_rel_guarded(c, trigfunc, allows, machine, column))
		{
			name = quote_qualified_identifier(get_namespace_name(RelationGetNamespace(c)),
											  RelationGetRelationName(c));
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("%s: inheritance child %s of %s has no guard", fname, name, table),
					 errdetail("An UPDATE of %s reaches the rows of its inheritance children, whose triggers do not inherit a guard.",
							   table),
					 errhint("Guard each child first: SELECT idem_guard('%s', '%s', '%s').",
							 name, column, machine)));
		}
		table_close(c, NoLock);
	}
}

/*
 * The arguments of idem_guard: the table's OID (returned), the status
 * and version columns' names into *g, the machine's name (checked) and
 * the history flag.  22004 for a NULL tbl, status_column, machine or
 * history; 22023/22001 for a bad machine name.
 */
static Oid
guard_args(FunctionCallInfo fcinfo, GuardSpec *g, text **machine, bool *history,
		   const char *fname)
{
	Oid			relid;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s: tbl must not be null", fname)));
	relid = PG_GETARG_OID(0);
	memset(g, 0, sizeof(*g));
	g->status_col = name_arg(fcinfo, 1, "status_column", fname);
	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s: machine must not be null", fname)));
	*machine = PG_GETARG_TEXT_PP(2);
	idem_check_machine_name(VARDATA_ANY(*machine), VARSIZE_ANY_EXHDR(*machine), fname);
	if (!PG_ARGISNULL(3))
		g->version_col = pstrdup(NameStr(*PG_GETARG_NAME(3)));
	if (PG_ARGISNULL(4))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s: history must not be null", fname)));
	*history = PG_GETARG_BOOL(4);
	return relid;
}

/*
 * The status column of guard g on the locked table relid (returned): a
 * user column of type text or varchar (42703, 42804), and its version
 * column (version_column's checks); on Citus (citus), neither may be the
 * distribution column (0A000), which goes to *distatt with the table's
 * co-location group.
 */
static AttrNumber
guard_columns(Oid relid, const GuardSpec *g, bool citus, AttrNumber *distatt,
			  int32 *colocation, const char *fname)
{
	AttrNumber	status_att;
	AttrNumber	version_att = 0;
	Oid			type;
	char		method;

	status_att = user_column(relid, g->table, g->status_col, fname);
	type = get_atttype(relid, status_att);
	if (getBaseType(type) != TEXTOID && getBaseType(type) != VARCHAROID)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("%s: status column \"%s\" must be of type text or varchar",
						fname, g->status_col),
				 errdetail("Column \"%s\" of table %s is of type %s.",
						   g->status_col, g->table, format_type_be(type))));
	if (g->version_col != NULL)
		version_att = version_column(relid, g->table, g->version_col, status_att, fname);
	if (citus)
	{
		(void) idem_citus_partition(relid, &method, distatt, colocation);
		if (status_att == *distatt || version_att == *distatt)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("%s: column \"%s\" is the distribution column of %s",
							fname, get_attname(relid, *distatt, false), g->table),
					 errdetail("Citus does not let an UPDATE change the distribution column, so it can be neither the status nor the version column of a guard.")));
	}
	return status_att;
}
