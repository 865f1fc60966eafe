/*-------------------------------------------------------------------------
 *
 * guard_install.c
 *	  The triggers of a table guard in pg_trigger, for the installer
 *	  (guard.c): finding them (by function and by their dependency on the
 *	  status column, never by name), creating them with SQL that binds
 *	  only to the extension's and pg_catalog's objects, dropping them,
 *	  Citus's history table of a guard on a distributed table, and
 *	  idem_guards_of_machine, the list idem_machine_drop (transition.c)
 *	  refuses with.  guard.c's header describes the triggers and why.
 *
 *	  A found trigger counts only if guard_shape.c's
 *	  idem_guard_trigger_is_real says so, and the check triggers' WHEN
 *	  conditions are guard_shape.c's: the one definition of the shape.
 *
 *	  Invariant (docs/security.md, "generated SQL binds only to our
 *	  objects"): generated SQL binds only to the extension's
 *	  and pg_catalog's objects: functions schema-qualified, operators as
 *	  OPERATOR(pg_catalog.x), every argument cast to the declared type, so
 *	  no overload a role with CREATE on some schema made beforehand can
 *	  capture a call.
 *
 *	  Locking: the caller (guard.c) holds the table's lock; CREATE and
 *	  DROP TRIGGER take their own.  On Citus, citus.enable_unsafe_triggers
 *	  is set for the duration of the call only (a GUC nest level,
 *	  idem_guard_citus_begin and _end).
 *
 *	  Visibility: everything runs through SPI in the caller's transaction
 *	  (inside its SPI_connect); pg_trigger is read with the statement's
 *	  snapshot.  Memory: names and statements in the caller's context.
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
	"       pg_catalog.cardinality(t.tgattr::pg_catalog.int2[]), t.tgrelid"
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
 * UPDATE OF columns): is it a real guard trigger (guard_shape.c's one
 * definition), and of which role; a check's column in *att?  Its arguments in *args (nargs of them).
 */
static bool
spi_trigger_is_real(Oid relid, HeapTuple tup, TupleDesc desc, int tgtype_col, int nargs_col,
					int args_col, int qual_col, int nattr_col, Oid allows,
					char ***args, int *nargs, GuardRole *role, AttrNumber *att)
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
	return idem_guard_trigger_is_real(relid, (int16) tgtype, nattr, qual, *nargs, *args,
									  allows, role, att);
}

/*
 * DROP every trigger of the guard of (relid, att), whose column is called
 * column; returns how many of them are real guard checks of an UPDATE (0:
 * the column has no guard, whatever else calls idem_guard_trigger on it).
 * Inside SPI.
 */
int
idem_guard_drop_triggers(Oid relid, Oid nsp, AttrNumber att, const char *column,
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
		AttrNumber	checked = InvalidAttrNumber;
		int			tgtype;

		depends = DatumGetBool(catalog_col(tup, desc, 7, BOOLOID, &isnull));
		tgtype = DatumGetInt32(catalog_col(tup, desc, 2, INT4OID, &isnull));
		is_real = spi_trigger_is_real(relid, tup, desc, 2, 3, 4, 5, 6, allows, &args, &nargs,
									  &role, &checked);
		if (TRIGGER_FOR_ROW(tgtype) ? !depends :
			!(nargs >= IDEM_GUARD_NARGS && strcmp(args[3], IDEM_GUARD_ROLE_CHILDREN) == 0 &&
			  strcmp(args[1], column) == 0))
			continue;
		/* A real check of this column (not of another it also names). */
		if (is_real && role == GUARD_CHECK && TRIGGER_FOR_UPDATE(tgtype) && checked == att)
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

/*
 * CREATE TRIGGER the triggers of guard g (see the header).  Inside SPI.
 *
 * Generated SQL is code: every call and operator in it is the extension's
 * or pg_catalog's, named with its schema, and every argument is cast to
 * the declared type (pg_catalog.text), so that no overload a role with
 * CREATE on some schema made beforehand (idem_guard_allows(text, varchar,
 * varchar), say) can capture the call: an exact match always wins.
 */
void
idem_guard_create_triggers(const GuardSpec *g, bool history, bool children)
{
	const char *qcol = quote_identifier(g->status_col);
	/* The status changed (NULLs included), by pg_catalog operators only. */
	const char *changed = idem_guard_changed_sql(qcol);
	char	   *func = psprintf("%s.idem_guard_trigger(%s, %s, %s, ", g->qnsp, g->qmachine,
								quote_literal_cstr(g->status_col),
								quote_literal_cstr(g->version_col ? g->version_col : ""));
	const char *qver = g->version_col ? quote_identifier(g->version_col) : NULL;

	/*
	 * No UPDATE OF: it misses a status that a BEFORE trigger changed, or an
	 * UPDATE that does not name the column.  The WHEN conditions are
	 * evaluated on the row as written, after every BEFORE trigger.  The
	 * checks' conditions come from guard_cache.c, which compares a check
	 * trigger's with them (only the exact shape is a guard).
	 */
	create_guard_trigger(psprintf("CREATE TRIGGER %s AFTER UPDATE ON %s FOR EACH ROW"
								  " WHEN (%s)"
								  " EXECUTE FUNCTION %s'" IDEM_GUARD_ROLE_CHECK "')",
								  quote_identifier(guard_trigger_name("check", g->status_col)),
								  g->table,
								  idem_guard_check_when(g->qnsp, g->machine, g->status_col,
														g->version_col, false),
								  func));
	create_guard_trigger(psprintf("CREATE TRIGGER %s AFTER INSERT ON %s FOR EACH ROW"
								  " WHEN (%s)"
								  " EXECUTE FUNCTION %s'" IDEM_GUARD_ROLE_CHECK "')",
								  quote_identifier(guard_trigger_name("insert", g->status_col)),
								  g->table,
								  idem_guard_check_when(g->qnsp, g->machine, g->status_col,
														NULL, true),
								  func));
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
 * until idem_guard_citus_end(level).  The caller's citus.multi_shard_modify_mode
 * is kept: Citus refuses to switch a transaction that ran a parallel
 * query to sequential DDL.
 */
int
idem_guard_citus_begin(void)
{
	int			level = NewGUCNestLevel();

	(void) set_config_option("citus.enable_unsafe_triggers", "on", PGC_USERSET,
							 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	return level;
}

void
idem_guard_citus_end(int level)
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
char *
idem_guard_history_table(Oid relid, const char *table, AttrNumber distatt,
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
		Oid			relid = DatumGetObjectId(catalog_col(tup, desc, 7, OIDOID, &isnull));
		AttrNumber	checked = InvalidAttrNumber;

		if (!spi_trigger_is_real(relid, tup, desc, 2, 4, 1, 5, 6, allows, &args, &nargs,
								 &role, &checked) ||
			role != GUARD_CHECK || strcmp(args[0], machine) != 0)
			continue;
		tgtype = DatumGetInt32(catalog_col(tup, desc, 2, INT4OID, &isnull));
		if (!TRIGGER_FOR_UPDATE(tgtype))
			continue;
		/* The column its condition checks, by its name now. */
		appendStringInfo(&buf, "%scolumn \"%s\" of table %s",
						 found++ > 0 ? ", " : "", get_attname(relid, checked, false),
						 SPI_getvalue(tup, desc, 3));
	}
	return found > 0 ? buf.data : NULL;
}
