/*-------------------------------------------------------------------------
 *
 * guard.c
 *	  The guard installer: idem_guard installs C triggers that enforce a
 *	  state machine (machine.c) on a status column, whatever SQL touches
 *	  the table; idem_unguard removes them; idem_guards_of_machine lists
 *	  them for idem_machine_drop (transition.c).  The triggers' run time is
 *	  guard_trigger.c, their cache guard_cache.c.
 *
 *	  A guard on column c of table t, machine m, is a set of triggers, all
 *	  running idem_guard_trigger(m, c, version column or '', role):
 *	    idem_guard_check_<c>    AFTER UPDATE
 *	                            WHEN (NOT idem_guard_allows(m, OLD.c, NEW.c)
 *	                                  [OR c changed AND NEW.v <> OLD.v + 1])
 *	    idem_guard_insert_<c>   AFTER INSERT
 *	                            WHEN (NEW.c IS NULL OR
 *	                                  NOT idem_guard_allows(m, NULL, NEW.c))
 *	    idem_guard_version_<c>  BEFORE UPDATE WHEN (c changed)  (version v)
 *	    idem_guard_log_<c>      AFTER UPDATE WHEN (c changed)   (history)
 *	    idem_guard_lognew_<c>   AFTER INSERT                    (history)
 *	    idem_guard_children_<c> BEFORE UPDATE FOR EACH STATEMENT (not Citus)
 *	  The check lives in the WHEN condition, which PostgreSQL evaluates
 *	  while it saves the trigger event: a legal row costs one call of
 *	  idem_guard_allows (a cached machine, two binary searches) and no
 *	  queued event, no re-fetch of the row, no trigger call.  Only a row
 *	  that breaks the machine fires idem_guard_trigger, which finds out why
 *	  and raises ID004 at the end of the statement, rolling it back.
 *	  Being AFTER and not UPDATE OF c, the check sees the row as written,
 *	  after every BEFORE trigger, whether or not the UPDATE names the
 *	  column, and only rows really written.  Rules (transition.c:
 *	  idem_guard_verdict): an INSERT, or an UPDATE from NULL, must use an
 *	  initial state; an UPDATE that changes the value must follow a
 *	  declared transition; the same value always passes.  The version
 *	  trigger sets the version column to the old version + 1 on every
 *	  change (and the check refuses a change the version did not follow:
 *	  a BEFORE trigger after it changed the status); the log triggers
 *	  append each change (inserts included, from NULL) to
 *	  idem_transition_log through a saved plan; the children trigger
 *	  refuses an UPDATE that reaches an unguarded inheritance child.  Every
 *	  row trigger's WHEN names the guarded column, so it depends on it
 *	  (pg_depend): that is how the triggers are found, and how the
 *	  trigger knows its column through renames (guard_cache.c).
 *
 *	  Invariant (issue 20): generated SQL binds only to the extension's
 *	  and pg_catalog's objects: functions schema-qualified, operators as
 *	  OPERATOR(pg_catalog.x), every argument cast to the declared type, so
 *	  no overload a role with CREATE on some schema made beforehand can
 *	  capture a call.  Only real guards (guard_cache.c's
 *	  idem_guard_trigger_is_real) count for idem_unguard and
 *	  idem_machine_drop.
 *
 *	  pg_trigger is the only registry: dropping the table drops the guard,
 *	  and DROP EXTENSION ... CASCADE drops the triggers (without CASCADE it
 *	  refuses, as for any dependent object); dropping the status column
 *	  needs CASCADE too, and drops them.  idem_unguard and idem_guard find
 *	  a guard's triggers by function and by their dependency on the status
 *	  column (pg_depend), not by name, so renames do not lose them.  The
 *	  arguments are names, not attribute numbers, so that a dump restores
 *	  them correctly; after renaming a guarded column, call idem_guard
 *	  again to refresh them.
 *
 *	  Cache: see guard_cache.c.  Per row there is no catalog access and
 *	  no SPI except the history INSERT.
 *
 *	  Locking: idem_guard takes ShareRowExclusiveLock on the table (as
 *	  CREATE TRIGGER does) and idem_unguard AccessExclusiveLock (as DROP
 *	  TRIGGER does), after checking the TRIGGER privilege so that nobody
 *	  can lock a table they may not guard.  On Citus, Citus takes its own
 *	  locks on the shards for the trigger DDL and create_distributed_table.
 *
 *	  Partitioned tables are refused: a row moved to another partition is
 *	  inserted there anew, which would have to be an initial state.  A
 *	  table with inheritance children is refused unless every child is
 *	  guarded alike (an UPDATE of the parent reaches their rows).
 *
 *	  Citus (docs/citus.md): on a hash-distributed table the same triggers
 *	  are created through Citus, with citus.enable_unsafe_triggers set for
 *	  the duration of the call only (a GUC nest level, as a function's SET
 *	  clause), so that
 *	  Citus creates them on every shard placement; idem_unguard drops them
 *	  the same way.  With history, the log trigger takes a fifth argument,
 *	  the history table <table>_transitions that idem_guard creates (or
 *	  reuses) co-located with the guarded table, distributed by a first
 *	  column like the table's distribution column; guard_trigger.c writes
 *	  each change into its shard co-located with the row's.  Other Citus
 *	  tables (reference, Citus local, ...) are refused (citus.c), and so is
 *	  the distribution column as status or version column.
 *
 *	  Visibility: the triggers are created and dropped through SPI in the
 *	  caller's transaction, so a guard appears or goes away at its commit,
 *	  like any CREATE TRIGGER; idem_guards_of_machine reads pg_trigger with
 *	  the statement's snapshot (READ COMMITTED: a guard committed while
 *	  idem_machine_drop waited is seen).
 *
 *	  Memory: names and statements are built in the caller's context; SPI
 *	  releases its own at SPI_finish.  Nothing is kept across calls.
 *
 *-------------------------------------------------------------------------
 */#include "postgres.h"

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

PG_FUNCTION_INFO_V1(idem_guard);
PG_FUNCTION_INFO_V1(idem_unguard);

#define GUARD_PREFIX	"idem_guard_"

/*
 * The triggers of idem_guard_trigger on a table, with what tells whether
 * they belong to the guard of one of its columns ($3): a row trigger
 * depends on the column (through its WHEN condition or, made by 0.4.0,
 * UPDATE OF), whatever the column or the triggers are called now; the
 * statement trigger ("children") names the column in its arguments.
 */
static IdemQuery q_guard_triggers = {
	"SELECT t.tgname::pg_catalog.text, t.tgtype::pg_catalog.int4, t.tgnargs::pg_catalog.int4,"
	"       t.tgargs, t.tgqual::pg_catalog.text,"
	"       pg_catalog.cardinality(t.tgattr::pg_catalog.int2[]),"
	"       EXISTS (SELECT FROM pg_catalog.pg_depend d"
	"   WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_trigger'::pg_catalog.regclass"
	"   AND d.objid OPERATOR(pg_catalog.=) t.oid"
	"   AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass"
	"   AND d.refobjid OPERATOR(pg_catalog.=) t.tgrelid"
	"   AND d.refobjsubid OPERATOR(pg_catalog.=) $3)"
	" FROM pg_catalog.pg_trigger t"
	" JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) t.tgfoid"
	" WHERE t.tgrelid OPERATOR(pg_catalog.=) $2"
	" AND p.pronamespace OPERATOR(pg_catalog.=) $1"
	" AND p.proname OPERATOR(pg_catalog.=) 'idem_guard_trigger'"
	" ORDER BY 1",
	3, {OIDOID, OIDOID, INT4OID}
};

/* Every trigger of idem_guard_trigger in the database, with its shape. */
static IdemQuery q_guards_all = {
	"SELECT t.tgargs, t.tgtype::pg_catalog.int4,"
	"       pg_catalog.format('%I.%I', n.nspname, c.relname),"
	"       t.tgnargs::pg_catalog.int4, t.tgqual::pg_catalog.text,"
	"       pg_catalog.cardinality(t.tgattr::pg_catalog.int2[])"
	" FROM pg_catalog.pg_trigger t"
	" JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) t.tgfoid"
	" JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) t.tgrelid"
	" JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace"
	" WHERE p.pronamespace OPERATOR(pg_catalog.=) $1"
	" AND p.proname OPERATOR(pg_catalog.=) 'idem_guard_trigger'"
	" ORDER BY 3, t.tgname",
	1, {OIDOID}
};
/*
 * Split pg_trigger.tgargs into its n NUL-terminated strings; false when
 * there are fewer than n.
 */
static bool
split_tgargs(bytea *args, char **out, int n)
{
	char	   *p = VARDATA_ANY(args);
	char	   *end = p + VARSIZE_ANY_EXHDR(args);
	int			i;

	for (i = 0; i < n; i++)
	{
		char	   *nul = memchr(p, '\0', end - p);

		if (nul == NULL)
			return false;
		out[i] = pnstrdup(p, nul - p);
		p = nul + 1;
	}
	return true;
}
/* ------------------------------------------------------------------------
 * idem_guard, idem_unguard
 * ------------------------------------------------------------------------
 */

/*
 * "idem_guard_<role>_<column>", or, when that does not fit in NAMEDATALEN,
 * the column clipped (on a character boundary) followed by a hash of the
 * whole column name, so that long names stay distinct and deterministic.
 * The role comes first: no role is a prefix of another, so the triggers of
 * two columns (say x and x_log) can never share a name.
 */
static char *
guard_trigger_name(const char *role, const char *column)
{
	int			collen = strlen(column);
	char	   *head = psprintf("%s%s_", GUARD_PREFIX, role);
	char	   *tail;
	int			room;

	if (strlen(head) + collen < NAMEDATALEN)
		return psprintf("%s%s", head, column);

	tail = psprintf("_%08x", hash_bytes((const unsigned char *) column, collen));
	room = NAMEDATALEN - 1 - strlen(head) - strlen(tail);
	return psprintf("%s%.*s%s", head, pg_mbcliplen(column, collen, room), column, tail);
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
 * Column col of a row our query over pg_catalog returned, of type type
 * (can't-happen otherwise: the catalogs' shapes are PostgreSQL's).
 */
static Datum
catalog_col(HeapTuple tup, TupleDesc desc, int col, Oid type, bool *isnull)
{
	if (SPI_gettypeid(desc, col) != type)
		elog(ERROR, "column %d of a catalog query has type %u, not %u",
			 col, SPI_gettypeid(desc, col), type);
	return SPI_getbinval(tup, desc, col, isnull);
}

/*
 * A pg_trigger row of idem_guard_trigger as the SPI queries above return
 * it (columns from first: tgtype, tgnargs, tgargs, tgqual, number of
 * UPDATE OF columns): is it a real guard trigger (guard_cache.c's one
 * definition), and of which role?  Its arguments in *args (nargs of them).
 */
static bool
spi_trigger_is_real(HeapTuple tup, TupleDesc desc, int tgtype_col, int nargs_col,
					int args_col, int qual_col, int nattr_col, Oid allows,
					char ***args, int *nargs, GuardRole *role)
{
	bool		isnull;
	Datum		d;
	char	   *qual;
	int			tgtype;
	int			nattr;

	tgtype = DatumGetInt32(catalog_col(tup, desc, tgtype_col, INT4OID, &isnull));
	*nargs = DatumGetInt32(catalog_col(tup, desc, nargs_col, INT4OID, &isnull));
	d = catalog_col(tup, desc, args_col, BYTEAOID, &isnull);
	*args = palloc0(sizeof(char *) * (Max(*nargs, 0) + 1));
	if (isnull || *nargs < IDEM_GUARD_NARGS ||
		!split_tgargs(DatumGetByteaPP(d), *args, *nargs))
		return false;
	d = catalog_col(tup, desc, qual_col, TEXTOID, &isnull);
	qual = isnull ? NULL : TextDatumGetCString(d);
	nattr = DatumGetInt32(catalog_col(tup, desc, nattr_col, INT4OID, &isnull));
	if (isnull)
		nattr = 0;
	return idem_guard_trigger_is_real((int16) tgtype, nattr, qual, *nargs, *args,
									  allows, role);
}

/*
 * DROP every trigger of the guard of (relid, att), whose column is called
 * column; returns how many of them are real guard checks of an UPDATE (0:
 * the column has no guard, whatever else calls idem_guard_trigger on it).
 * Inside SPI.
 */
static int
drop_guard_triggers(Oid relid, Oid nsp, AttrNumber att, const char *column,
					const char *table)
{
	Datum		values[3];
	int			n;
	int			i;
	int			ndrop = 0;
	int			real = 0;
	char	  **names;
	Oid			allows = idem_guard_allows_oid(nsp);

	values[0] = ObjectIdGetDatum(nsp);
	values[1] = ObjectIdGetDatum(relid);
	values[2] = Int32GetDatum((int32) att);
	n = idem_query_exec(&q_guard_triggers, nsp, values, NULL, false, 0);
	names = palloc(sizeof(char *) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		bool		depends;
		bool		is_real;
		char	  **args;
		int			nargs;
		GuardRole	role = GUARD_CHECK;
		int			tgtype;

		depends = DatumGetBool(catalog_col(tup, desc, 7, BOOLOID, &isnull));
		tgtype = DatumGetInt32(catalog_col(tup, desc, 2, INT4OID, &isnull));
		is_real = spi_trigger_is_real(tup, desc, 2, 3, 4, 5, 6, allows, &args, &nargs, &role);
		if (TRIGGER_FOR_ROW(tgtype) ? !depends :
			!(nargs >= IDEM_GUARD_NARGS && strcmp(args[3], IDEM_GUARD_ROLE_CHILDREN) == 0 &&
			  strcmp(args[1], column) == 0))
			continue;
		if (is_real && role == GUARD_CHECK && TRIGGER_FOR_UPDATE(tgtype))
			real++;
		names[ndrop++] = SPI_getvalue(tup, desc, 1);
	}
	for (i = 0; i < ndrop; i++)
	{
		char	   *sql = psprintf("DROP TRIGGER %s ON %s",
								   quote_identifier(names[i]), table);

		if (SPI_execute(sql, false, 0) != SPI_OK_UTILITY)
			elog(ERROR, "SPI_execute failed: %s", sql);
	}
	return real;
}

static void
create_guard_trigger(const char *sql)
{
	if (SPI_execute(sql, false, 0) != SPI_OK_UTILITY)
		elog(ERROR, "SPI_execute failed: %s", sql);
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

/* A guard to create: the names create_guard_triggers puts into SQL. */
typedef struct GuardSpec
{
	char	   *table;			/* schema-qualified, quoted */
	char	   *status_col;
	char	   *version_col;	/* NULL: none */
	const char *qnsp;
	char	   *qmachine;		/* a literal */
	char	   *history_table;	/* NULL: idem_transition_log; else quoted name */
} GuardSpec;

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
 * CREATE TRIGGER the triggers of guard g (see the header).  Inside SPI.
 *
 * Generated SQL is code: every call and operator in it is the extension's
 * or pg_catalog's, named with its schema, and every argument is cast to
 * the declared type (pg_catalog.text), so that no overload a role with
 * CREATE on some schema made beforehand (idem_guard_allows(text, varchar,
 * varchar), say) can capture the call: an exact match always wins.
 */
static void
create_guard_triggers(const GuardSpec *g, bool history, bool children)
{
	const char *qcol = quote_identifier(g->status_col);
	const char *oldv = psprintf("(OLD.%s)::pg_catalog.text", qcol);
	const char *newv = psprintf("(NEW.%s)::pg_catalog.text", qcol);
	/* The status changed (NULLs included), by pg_catalog operators only. */
	const char *changed = psprintf("((OLD.%s IS NULL) OPERATOR(pg_catalog.<>) (NEW.%s IS NULL)"
								   " OR %s OPERATOR(pg_catalog.<>) %s)",
								   qcol, qcol, oldv, newv);
	const char *allows = psprintf("%s.idem_guard_allows(%s::pg_catalog.text, ",
								  g->qnsp, g->qmachine);
	char	   *func = psprintf("%s.idem_guard_trigger(%s, %s, %s, ", g->qnsp, g->qmachine,
								quote_literal_cstr(g->status_col),
								quote_literal_cstr(g->version_col ? g->version_col : ""));
	const char *qver = g->version_col ? quote_identifier(g->version_col) : NULL;
	/* A version that did not advance with the status (27000). */
	const char *version_lag = g->version_col == NULL ? "" :
		psprintf(" OR (%s AND (NEW.%s OPERATOR(pg_catalog.<>) (OLD.%s OPERATOR(pg_catalog.+) 1)))",
				 changed, qver, qver);

	/*
	 * No UPDATE OF: it misses a status that a BEFORE trigger changed, or an
	 * UPDATE that does not name the column.  The WHEN conditions are
	 * evaluated on the row as written, after every BEFORE trigger.
	 */
	create_guard_trigger(psprintf("CREATE TRIGGER %s AFTER UPDATE ON %s FOR EACH ROW"
								  " WHEN ((NOT %s%s, %s))%s)"
								  " EXECUTE FUNCTION %s'" IDEM_GUARD_ROLE_CHECK "')",
								  quote_identifier(guard_trigger_name("check", g->status_col)),
								  g->table, allows, oldv, newv, version_lag, func));
	create_guard_trigger(psprintf("CREATE TRIGGER %s AFTER INSERT ON %s FOR EACH ROW"
								  " WHEN ((NEW.%s IS NULL) OR (NOT %sNULL::pg_catalog.text, %s)))"
								  " EXECUTE FUNCTION %s'" IDEM_GUARD_ROLE_CHECK "')",
								  quote_identifier(guard_trigger_name("insert", g->status_col)),
								  g->table, qcol, allows, newv, func));
	/* Its WHEN names the version column too: the trigger depends on it. */
	if (g->version_col != NULL)
		create_guard_trigger(psprintf("CREATE TRIGGER %s BEFORE UPDATE ON %s FOR EACH ROW"
									  " WHEN (%s AND (OLD.%s IS NULL OR OLD.%s IS NOT NULL))"
									  " EXECUTE FUNCTION %s'" IDEM_GUARD_ROLE_VERSION "')",
									  quote_identifier(guard_trigger_name("version", g->status_col)),
									  g->table, changed, qver, qver, func));
	/* On Citus, the log triggers name their co-located history table. */
	if (history)
	{
		const char *hist = g->history_table ?
			psprintf(", %s", quote_literal_cstr(g->history_table)) : "";

		create_guard_trigger(psprintf("CREATE TRIGGER %s AFTER UPDATE ON %s FOR EACH ROW"
									  " WHEN (%s)"
									  " EXECUTE FUNCTION %s'" IDEM_GUARD_ROLE_LOG "'%s)",
									  quote_identifier(guard_trigger_name("log", g->status_col)),
									  g->table, changed, func, hist));
		/* Every insert is logged; the WHEN names the column (pg_depend). */
		create_guard_trigger(psprintf("CREATE TRIGGER %s AFTER INSERT ON %s FOR EACH ROW"
									  " WHEN (NEW.%s IS NULL OR NEW.%s IS NOT NULL)"
									  " EXECUTE FUNCTION %s'" IDEM_GUARD_ROLE_LOG "'%s)",
									  quote_identifier(guard_trigger_name("lognew", g->status_col)),
									  g->table, qcol, qcol, func, hist));
	}
	/* Inheritance children must carry the guard too (not on Citus). */
	if (children)
		create_guard_trigger(psprintf("CREATE TRIGGER %s BEFORE UPDATE ON %s FOR EACH STATEMENT"
									  " EXECUTE FUNCTION %s'" IDEM_GUARD_ROLE_CHILDREN "')",
									  quote_identifier(guard_trigger_name("children", g->status_col)),
									  g->table, func));
}

/* ------------------------------------------------------------------------
 * Guards on Citus distributed tables
 * ------------------------------------------------------------------------
 */

/*
 * Let Citus put the triggers on every shard (citus.enable_unsafe_triggers)
 * until citus_guc_end(level).  The caller's citus.multi_shard_modify_mode
 * is kept: Citus refuses to switch a transaction that ran a parallel
 * query to sequential DDL.
 */
static int
citus_guc_begin(void)
{
	int			level = NewGUCNestLevel();

	(void) set_config_option("citus.enable_unsafe_triggers", "on", PGC_USERSET,
							 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	return level;
}

static void
citus_guc_end(int level)
{
	AtEOXact_GUC(true, level);
}

static void
spi_run(const char *sql, int expect)
{
	if (SPI_execute(sql, false, 0) != expect)
		elog(ERROR, "SPI_execute failed: %s", sql);
}

/*
 * The history table of a guard on the Citus distributed table relid
 * (distribution column distatt, co-location group colocation): created
 * when missing as <table>_transitions in the table's schema (clipped and
 * hashed as trigger names are when too long), distributed by a first
 * column of the same name, type and collation as distatt and co-located
 * with relid, so that a row and its history are on one shard; reused when
 * it exists and is such a table (else 42P07).  Not public.  Returns its
 * schema-qualified, quoted name.  Inside SPI.
 */
static char *
citus_history_table(Oid relid, const char *table, AttrNumber distatt,
					int32 colocation, const char *fname)
{
	Oid			nspid = get_rel_namespace(relid);
	char	   *relname = get_rel_name(relid);
	char	   *hname;
	char	   *qname;
	char	   *distcol = get_attname(relid, distatt, false);
	Oid			existing;
	Oid			typid;
	int32		typmod;
	Oid			collid;

	hname = strlen(relname) + strlen("_transitions") < NAMEDATALEN ?
		psprintf("%s_transitions", relname) :
		psprintf("%.*s_%08x_transitions",
				 pg_mbcliplen(relname, strlen(relname), NAMEDATALEN - 1 - 21), relname,
				 hash_bytes((const unsigned char *) relname, strlen(relname)));
	qname = quote_qualified_identifier(get_namespace_name(nspid), hname);
	existing = get_relname_relid(hname, nspid);
	if (OidIsValid(existing))
	{
		char		method;
		AttrNumber	att;
		int32		coloc;
		char	   *first = get_attname(existing, 1, true);

		if (!idem_citus_partition(existing, &method, &att, &coloc) || method != 'h' ||
			att != 1 || coloc != colocation || first == NULL || strcmp(first, distcol) != 0)
			ereport(ERROR,
					(errcode(ERRCODE_DUPLICATE_TABLE),
					 errmsg("%s: relation %s exists and is not the history table of %s",
							fname, qname, table),
					 errdetail("The history of a guard on a distributed table goes to %s, distributed by its first column \"%s\" and co-located with %s.",
							   qname, distcol, table),
					 errhint("Rename or drop %s, or call idem_guard with history => false.", qname)));
		return qname;
	}

	get_atttypetypmodcoll(relid, distatt, &typid, &typmod, &collid);
	spi_run(psprintf("CREATE TABLE %s (%s %s%s%s NOT NULL,"
					 " table_name pg_catalog.text NOT NULL,"
					 " status_column pg_catalog.text NOT NULL,"
					 " row_key pg_catalog.jsonb,"
					 " from_state pg_catalog.text,"
					 " to_state pg_catalog.text,"
					 " changed_at pg_catalog.timestamptz NOT NULL,"
					 " logged_at pg_catalog.timestamptz NOT NULL,"
					 " xact_id pg_catalog.xid8 NOT NULL)",
					 qname, quote_identifier(distcol),
					 format_type_extended(typid, typmod,
										  FORMAT_TYPE_TYPEMOD_GIVEN | FORMAT_TYPE_FORCE_QUALIFY),
					 OidIsValid(collid) ? " COLLATE " : "",
					 OidIsValid(collid) ? generate_collation_name(collid) : ""),
			SPI_OK_UTILITY);
	spi_run(psprintf("REVOKE ALL ON TABLE %s FROM PUBLIC", qname), SPI_OK_UTILITY);
	spi_run(psprintf("COMMENT ON TABLE %s IS %s", qname,
					 quote_literal_cstr(psprintf("Status changes of %s (idem_guard with history), co-located with it", table))),
			SPI_OK_UTILITY);
	spi_run(psprintf("SELECT pg_catalog.create_distributed_table(%s::pg_catalog.regclass, %s,"
					 " colocate_with => %s)",
					 quote_literal_cstr(qname), quote_literal_cstr(distcol),
					 quote_literal_cstr(table)),
			SPI_OK_SELECT);
	spi_run(psprintf("CREATE INDEX ON %s (%s, logged_at)", qname, quote_identifier(distcol)),
			SPI_OK_UTILITY);
	return qname;
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
	AttrNumber	version_att = 0;
	Oid			type;
	bool		cached;
	bool		citus;
	char		method;
	AttrNumber	distatt = 0;
	int32		colocation = 0;
	int			level = 0;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s: tbl must not be null", fname)));
	relid = PG_GETARG_OID(0);
	memset(&g, 0, sizeof(g));
	g.status_col = name_arg(fcinfo, 1, "status_column", fname);
	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s: machine must not be null", fname)));
	machine = PG_GETARG_TEXT_PP(2);
	idem_check_machine_name(VARDATA_ANY(machine), VARSIZE_ANY_EXHDR(machine), fname);
	if (!PG_ARGISNULL(3))
		g.version_col = pstrdup(NameStr(*PG_GETARG_NAME(3)));
	if (PG_ARGISNULL(4))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s: history must not be null", fname)));
	history = PG_GETARG_BOOL(4);

	idem_check_writable(fname);

	g.table = lock_guarded_table(relid, ShareRowExclusiveLock, fname);
	citus = idem_citus_guardable(relid, g.table, fname);

	status_att = user_column(relid, g.table, g.status_col, fname);
	type = get_atttype(relid, status_att);
	if (getBaseType(type) != TEXTOID && getBaseType(type) != VARCHAROID)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("%s: status column \"%s\" must be of type text or varchar",
						fname, g.status_col),
				 errdetail("Column \"%s\" of table %s is of type %s.",
						   g.status_col, g.table, format_type_be(type))));
	if (g.version_col != NULL)
		version_att = version_column(relid, g.table, g.version_col, status_att, fname);
	if (citus)
	{
		(void) idem_citus_partition(relid, &method, &distatt, &colocation);
		if (status_att == distatt || version_att == distatt)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("%s: column \"%s\" is the distribution column of %s",
							fname, get_attname(relid, distatt, false), g.table),
					 errdetail("Citus does not let an UPDATE change the distribution column, so it can be neither the status nor the version column of a guard.")));
	}

	/* The machine must exist (42704); it is compiled into the cache. */
	(void) idem_machine_get(nsp, VARDATA_ANY(machine), VARSIZE_ANY_EXHDR(machine),
							fname, &cached);

	g.qnsp = quote_identifier(get_namespace_name(nsp));
	g.qmachine = quote_literal_cstr(text_to_cstring(machine));

	/* Inheritance children are reached by an UPDATE: they need the guard. */
	if (!citus && has_subclass(relid))
		check_children_guarded(relid, nsp, g.table, g.status_col,
							   text_to_cstring(machine), fname);

	idem_spi_connect();
	if (citus)
		level = citus_guc_begin();
	if (citus && history)
		g.history_table = citus_history_table(relid, g.table, distatt, colocation, fname);

	drop_guard_triggers(relid, nsp, status_att, g.status_col, g.table);
	create_guard_triggers(&g, history, !citus);

	if (citus)
		citus_guc_end(level);
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
		level = citus_guc_begin();
	if (drop_guard_triggers(relid, nsp, status_att, status_col, table) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("%s: column \"%s\" of table %s has no guard",
						fname, status_col, table)));
	if (citus)
		citus_guc_end(level);
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * The guards that enforce machine, as a sentence fragment for messages
 * ("column "status" of table public.orders, ..."), or NULL when there are
 * none.  Called by idem_machine_drop between SPI_connect and SPI_finish.
 */
char *
idem_guards_of_machine(Oid nsp, const char *machine)
{
	Datum		values[1];
	StringInfoData buf;
	int			n;
	int			i;
	int			found = 0;
	Oid			allows;

	values[0] = ObjectIdGetDatum(nsp);
	n = idem_query_exec(&q_guards_all, nsp, values, NULL, false, 0);
	allows = idem_guard_allows_oid(nsp);

	initStringInfo(&buf);
	for (i = 0; i < n; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		char	  **args;
		int			nargs;
		GuardRole	role;
		bool		isnull;
		int			tgtype;

		/* Only real guards count: one line per guard, its UPDATE check. */
		if (!spi_trigger_is_real(tup, desc, 2, 4, 1, 5, 6, allows, &args, &nargs, &role) ||
			role != GUARD_CHECK || strcmp(args[0], machine) != 0)
			continue;
		tgtype = DatumGetInt32(catalog_col(tup, desc, 2, INT4OID, &isnull));
		if (!TRIGGER_FOR_UPDATE(tgtype))
			continue;
		appendStringInfo(&buf, "%scolumn \"%s\" of table %s",
						 found++ > 0 ? ", " : "", args[1],
						 SPI_getvalue(tup, desc, 3));
	}
	return found > 0 ? buf.data : NULL;
}
