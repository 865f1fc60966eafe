/*-------------------------------------------------------------------------
 *
 * claim_table.c
 *	  Is idem_records as the install script made it?  The questions the fast
 *	  claim path (claim_direct.c) asks of the table before it writes into it
 *	  without SQL: its shape (kind, columns, defaults, triggers, rules), its
 *	  constraints and its primary key.  Rule: any change a DBA makes that a
 *	  plain INSERT would honour must make one of them say no, so that the
 *	  claim runs as SQL.
 *
 *	  Memory: the stored forms of the extension's status CHECK and of the
 *	  attempts default are kept in TopMemoryContext once seen; the CHECK's is
 *	  forgotten when any function changes (a syscache callback on pg_proc), so
 *	  a replaced idem_status_is_valid is looked at again.  Everything else is
 *	  read from the relcache entry the caller holds open.  Locking: none here.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_language.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "nodes/execnodes.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "idempotency.h"
#include "claim.h"

/* The columns of idem_records, in order, as the install script makes them. */
static const struct
{
	const char *name;
	Oid			type;
}			record_columns[] =
{
	{"scope", TEXTOID},
	{"key", TEXTOID},
	{"status", TEXTOID},
	{"fingerprint", BYTEAOID},
	{"result", JSONBOID},
	{"created_at", TIMESTAMPTZOID},
	{"updated_at", TIMESTAMPTZOID},
	{"expires_at", TIMESTAMPTZOID},
	{"locked_until", TIMESTAMPTZOID},
	{"token", INT8OID},
	{"attempts", INT4OID},
	{"lease", INTERVALOID},
	{"owner_pid", INT4OID},
	{"owner_start", TIMESTAMPTZOID},
	{"effect_started_at", TIMESTAMPTZOID},
	{"effect_unknown_attempt", INT4OID},
};

StaticAssertDecl(lengthof(record_columns) == IDEM_NCOLUMNS, "record_columns and IDEM_NCOLUMNS differ");

/*
 * The stored default of attempts as the install script makes it (0), once
 * seen; in TopMemoryContext.  Compared as text: the same default has the
 * same stored form.
 */
static char *known_default = NULL;

/*
 * Are the column defaults of idem_records those of the install script?
 * Only attempts has one (0), which the fast path writes itself; a default
 * a DBA adds or changes on a column the claim's INSERT does not name
 * (result, locked_until, token, attempts, lease) would be applied by the
 * SPI path's INSERT, so the fast path declines then.  Defaults on the
 * columns the INSERT names are never used by either path.
 */
static bool
defaults_are_own(TupleDesc desc)
{
	TupleConstr *constr = desc->constr;
	int			i;

	if (constr == NULL)
		return true;
	for (i = 0; i < constr->num_defval; i++)
	{
		AttrDefault *def = &constr->defval[i];
		Node	   *expr;

		switch (def->adnum)
		{
			case IDEM_COL_SCOPE:
			case IDEM_COL_KEY:
			case IDEM_COL_STATUS:
			case IDEM_COL_FINGERPRINT:
			case IDEM_COL_CREATED_AT:
			case IDEM_COL_UPDATED_AT:
			case IDEM_COL_EXPIRES_AT:
				continue;		/* always given */
			case IDEM_COL_ATTEMPTS:
				if (known_default != NULL && strcmp(def->adbin, known_default) == 0)
					continue;
				expr = stringToNode(def->adbin);
				if (IsA(expr, Const) && ((Const *) expr)->consttype == INT4OID &&
					!((Const *) expr)->constisnull &&
					DatumGetInt32(((Const *) expr)->constvalue) == 0)
				{
					if (known_default == NULL)
						known_default = MemoryContextStrdup(TopMemoryContext, def->adbin);
					continue;
				}
				return false;
			default:
				return false;
		}
	}
	return true;
}

/*
 * Is rel shaped as the install script makes idem_records, so that the fast
 * path's insertion does exactly what the SPI path's INSERT would: an
 * ordinary, unpartitioned table without triggers, rules or stored
 * generated columns, with the install script's columns (names, types,
 * order) and column defaults.  (Row-level security and Citus are
 * claim_direct.c's to check.)
 */
bool
idem_records_shape_ok(Relation rel)
{
	TupleDesc	desc = RelationGetDescr(rel);
	int			i;

	if (rel->rd_rel->relkind != RELKIND_RELATION ||
		rel->rd_rel->relispartition ||
		rel->trigdesc != NULL ||
		rel->rd_rules != NULL ||
		desc->natts != (int) IDEM_NCOLUMNS ||
		(desc->constr != NULL && desc->constr->has_generated_stored))
		return false;

	for (i = 0; i < (int) IDEM_NCOLUMNS; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (att->attisdropped || att->atttypid != record_columns[i].type ||
			strcmp(NameStr(att->attname), record_columns[i].name) != 0)
			return false;
	}
	return defaults_are_own(desc);
}

/*
 * The stored expression (ccbin) of idem_records' CHECK constraint once it
 * has been found to be the extension's own status check, or NULL; in
 * TopMemoryContext.  Reset when any function changes (syscache callback),
 * so a replaced idem_status_is_valid is looked at again.
 */
static char *known_check = NULL;
static bool known_check_callback = false;

static void
forget_known_check(Datum arg, int cacheid, uint32 hashvalue)
{
	if (known_check != NULL)
		pfree(known_check);
	known_check = NULL;
}

/* Is funcid the C function idem_status_is_valid of this library in nsp? */
static bool
is_status_check_function(Oid funcid, Oid nsp)
{
	HeapTuple	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(funcid));
	Form_pg_proc proc;
	bool		isnull;
	Datum		d;
	bool		ok = false;

	if (!HeapTupleIsValid(tup))
		return false;
	proc = (Form_pg_proc) GETSTRUCT(tup);
	if (proc->prolang == ClanguageId && proc->pronamespace == nsp &&
		proc->pronargs == 1 && proc->proisstrict)
	{
		d = SysCacheGetAttr(PROCOID, tup, Anum_pg_proc_prosrc, &isnull);
		ok = !isnull && strcmp(TextDatumGetCString(d), "idem_status_is_valid") == 0;
		d = SysCacheGetAttr(PROCOID, tup, Anum_pg_proc_probin, &isnull);
		ok = ok && !isnull &&
			strcmp(TextDatumGetCString(d), "$libdir/idempotency") == 0;
	}
	ReleaseSysCache(tup);
	return ok;
}

/*
 * Do the constraints of idem_records hold for the record about to be
 * inserted (nulls: which of its columns are NULL), without evaluating
 * them?  True when every NOT NULL column has a value and the only CHECK
 * is the extension's idem_status_is_valid(status), which accepts the
 * 'claimed' inserted here.  PostgreSQL would re-read and compile that
 * CHECK at every insertion; any other constraint makes this false and the
 * caller evaluates them all with ExecConstraints.
 */
bool
idem_records_constraints_hold(Relation rel, Oid nsp, const bool *nulls)
{
	TupleDesc	desc = RelationGetDescr(rel);
	TupleConstr *constr = desc->constr;
	const char *ccbin;
	Node	   *expr;
	FuncExpr   *f;
	int			i;

	for (i = 0; i < desc->natts; i++)
		if (TupleDescAttr(desc, i)->attnotnull && nulls[i])
			return false;
	if (constr == NULL || constr->num_check == 0)
		return true;
	if (constr->num_check != 1)
		return false;

	ccbin = constr->check[0].ccbin;
	if (known_check != NULL && strcmp(ccbin, known_check) == 0)
		return true;

	expr = stringToNode(ccbin);
	if (!IsA(expr, FuncExpr))
		return false;
	f = (FuncExpr *) expr;
	if (list_length(f->args) != 1 || !IsA(linitial(f->args), Var) ||
		((Var *) linitial(f->args))->varattno != IDEM_COL_STATUS ||
		!is_status_check_function(f->funcid, nsp))
		return false;

	if (!known_check_callback)
	{
		CacheRegisterSyscacheCallback(PROCOID, forget_known_check, (Datum) 0);
		known_check_callback = true;
	}
	if (known_check != NULL)
		pfree(known_check);
	known_check = MemoryContextStrdup(TopMemoryContext, ccbin);
	return true;
}

/*
 * Is the primary key of the opened relation a plain unique index on
 * (scope, key), the arbiter of the claim?
 */
bool
idem_records_pk_is_scope_key(ResultRelInfo *rri)
{
	Oid			pk = IDEM_PRIMARY_KEY_INDEX(rri->ri_RelationDesc);
	int			i;

	if (!OidIsValid(pk))
		return false;
	for (i = 0; i < rri->ri_NumIndices; i++)
	{
		Form_pg_index index = rri->ri_IndexRelationDescs[i]->rd_index;

		if (index->indexrelid == pk)
			return index->indisunique && index->indimmediate &&
				index->indnkeyatts == 2 &&
				index->indkey.values[0] == IDEM_COL_SCOPE &&
				index->indkey.values[1] == IDEM_COL_KEY &&
				rri->ri_IndexRelationInfo[i]->ii_Expressions == NIL &&
				rri->ri_IndexRelationInfo[i]->ii_Predicate == NIL;
	}
	return false;
}

