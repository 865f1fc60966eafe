/*-------------------------------------------------------------------------
 *
 * shard.c
 *	  Records with a shard key, for co-location on Citus (docs/citus.md,
 *	  "Co-location by a business key").  idem_distribute(shard_key => type)
 *	  adds a column shard_key of the user's type to idem_records, makes
 *	  (shard_key, scope, key) its primary key and distributes by it, so that a
 *	  customer's records sit on the shard of that customer's rows.  Every
 *	  function F(scope, key, ...) that addresses one record then needs the
 *	  shard key: its twin F_at(shard_key, scope, key, ...), one line
 *	  (IDEM_SHARD_TWIN, idempotency.h) in the file of its F.
 *	  - idem_shard_type: the type of idem_records.shard_key in a schema, or
 *	    InvalidOid without the column (the usual case, the only one without
 *	    Citus); one cached answer, forgotten on a relcache invalidation of
 *	    idem_records (ALTER TABLE ... ADD COLUMN sends one) or of all.
 *	  - idem_shard_call, the body of every F_at: converts its first argument
 *	    to the column's type, makes it the current shard key, calls F's C
 *	    function with the other arguments and the same flinfo (schema, result
 *	    type, set-returning context), and restores the previous key, also on
 *	    error.  Citus's error for a distributed query inside a query on a
 *	    shard becomes 0A000 naming the twin, with the working shape in its
 *	    hint: writing into the co-located shard there instead would hide the
 *	    write from Citus's commit.
 *	  - idem_shard_rewrite: a statement addressing one record by ($1 scope,
 *	    $2 key) with the shard key as one more parameter (WHERE, INSERT
 *	    columns and VALUES, ON CONFLICT arbiter); query.c prepares it instead
 *	    while the column exists.
 *	  - idem_shard_refuse: the 55000 of such a statement run without a current
 *	    shard key, naming the running function (the last one query.c found the
 *	    schema for) and in its hint that function's twin, with the twin's
 *	    argument names from pg_proc.
 *
 *	  Memory: the converted key lives in the caller's context for the call;
 *	  beyond it only the rewritten text and errors' texts.  Locking: none; the
 *	  catalog look-ups are syscache probes.  Visibility: a concurrent ALTER
 *	  TABLE is seen once it commits and its invalidation arrives.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "utils/catcache.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "idempotency.h"

/* The answer of idem_shard_type, for one schema. */
static bool shard_cache_valid = false;
static Oid	shard_cache_nsp = InvalidOid;
static Oid	shard_cache_type = InvalidOid;

/* The shard key of the F_at call running now, if any. */
static bool shard_current_set = false;
static Datum shard_current_value = (Datum) 0;

static Oid	shard_cache_relid = InvalidOid;	/* idem_records, when known */

/* Forget the answer when idem_records (or every relation) changes. */
static void
shard_cache_reset(Oid relid)
{
	if (!OidIsValid(relid) || relid == shard_cache_relid ||
		!OidIsValid(shard_cache_relid))
		shard_cache_valid = false;
}

/* Subscribe the cache to relcache invalidations (module.c's _PG_init). */
void
idem_shard_init(void)
{
	idem_relcache_subscribe(shard_cache_reset);
}

/*
 * The type of idem_records.shard_key in schema nsp, or InvalidOid when
 * idem_records has no such column.
 */
Oid
idem_shard_type(Oid nsp)
{
	Oid			relid;
	Oid			type = InvalidOid;

	if (shard_cache_valid && shard_cache_nsp == nsp)
		return shard_cache_type;

	relid = get_relname_relid("idem_records", nsp);
	shard_cache_relid = relid;
	if (OidIsValid(relid))
	{
		AttrNumber	attnum = get_attnum(relid, "shard_key");

		if (attnum != InvalidAttrNumber)
			type = get_atttype(relid, attnum);
	}
	shard_cache_nsp = nsp;
	shard_cache_type = type;
	shard_cache_valid = true;
	return type;
}

/* The current shard key: false when no F_at call is running. */
bool
idem_shard_current(Datum *value)
{
	*value = shard_current_value;
	return shard_current_set;
}

/* Argument 0 of fcinfo as a value of type coltype. */
static Datum
shard_convert(FunctionCallInfo fcinfo, Oid coltype, const char *fname)
{
	Oid			argtype = get_fn_expr_argtype(fcinfo->flinfo, 0);
	char	   *str;
	Oid			input;
	Oid			ioparam;

	if (!OidIsValid(argtype))
		elog(ERROR, "%s: could not determine the type of shard_key", fname);
	if (argtype == coltype)
		return PG_GETARG_DATUM(0);

	if (argtype == UNKNOWNOID)
		str = DatumGetCString(PG_GETARG_DATUM(0));
	else
	{
		Oid			output;
		bool		varlena;

		getTypeOutputInfo(argtype, &output, &varlena);
		str = OidOutputFunctionCall(output, PG_GETARG_DATUM(0));
	}
	getTypeInputInfo(coltype, &input, &ioparam);
	return OidInputFunctionCall(input, str, ioparam, -1);
}

/* The twins, for a caller that has none (a can't-happen, see below). */
static const char *const shard_twins =
"idem_claim_at, idem_claim_many_at, idem_complete_at, idem_lookup_at, "
"idem_release_at, idem_begin_at, idem_heartbeat_at, idem_finish_at, "
"idem_fail_at, idem_await_at, idem_effect_started_at, idem_token_issue_at, "
"idem_token_consume_at";

/*
 * "twin(arg, ...)": the function twin of schema nsp with the names of its
 * input arguments, or NULL when nsp has no function of that name.  With
 * example, a call instead: example as the shard key, and the arguments
 * without a default only.
 */
static char *
shard_twin_signature(const char *twin, Oid nsp, const char *example)
{
	CatCList   *list = SearchSysCacheList1(PROCNAMEARGSNSP, CStringGetDatum(twin));
	StringInfoData buf;
	bool		found = false;
	int			i;

	initStringInfo(&buf);
	for (i = 0; i < list->n_members && !found; i++)
	{
		HeapTuple	tup = &list->members[i]->tuple;
		Form_pg_proc proc = (Form_pg_proc) GETSTRUCT(tup);
		Oid		   *types;
		char	  **names;
		char	   *modes;
		int			nargs;
		int			j;
		int			shown = 0;

		if (proc->pronamespace != nsp)
			continue;
		found = true;
		nargs = get_func_arg_info(tup, &types, &names, &modes);
		appendStringInfo(&buf, "%s(", twin);
		for (j = 0; j < nargs; j++)
		{
			if (modes != NULL && modes[j] != PROARGMODE_IN &&
				modes[j] != PROARGMODE_INOUT && modes[j] != PROARGMODE_VARIADIC)
				continue;
			if (example != NULL && shown >= proc->pronargs - proc->pronargdefaults)
				break;
			if (shown++ > 0)
				appendStringInfoString(&buf, ", ");
			if (example != NULL && shown == 1)
				appendStringInfoString(&buf, example);
			else if (names != NULL && names[j][0] != '\0')
				appendStringInfoString(&buf, names[j]);
			else
				appendStringInfo(&buf, "$%d", j + 1);
		}
		appendStringInfoChar(&buf, ')');
	}
	ReleaseSysCacheList(list);
	if (!found)
	{
		pfree(buf.data);
		return NULL;
	}
	return buf.data;
}

/*
 * Citus's error for a distributed query run from inside a query on a shard
 * (Citus 13's EnsureTaskExecutionAllowed, SQLSTATE XX000), as edata.
 */
static bool
shard_citus_nested(ErrorData *edata)
{
	static const char nested[] = "cannot execute a distributed query from a query on a shard";

	return edata->sqlerrcode == ERRCODE_INTERNAL_ERROR && edata->message != NULL &&
		strncmp(edata->message, nested, sizeof(nested) - 1) == 0;
}

/*
 * The body of F_at(shard_key "any", args of F...): call target (F's C
 * function) with args, shard_key being the current shard key meanwhile.
 * nsp is the extension's schema.  Fails with 22004 (shard_key NULL),
 * 55000 (idem_records has no shard_key column), the conversion's error
 * (22P02 and the like) for a value the column's type refuses, and F's
 * errors.
 */
Datum
idem_shard_call(FunctionCallInfo fcinfo, Oid nsp, PGFunction target,
				const char *fname)
{
	LOCAL_FCINFO(inner, FUNC_MAX_ARGS);
	Oid			coltype = idem_shard_type(nsp);
	bool		saved_set = shard_current_set;
	Datum		saved_value = shard_current_value;
	MemoryContext cxt = CurrentMemoryContext;
	Datum		result = (Datum) 0;
	int			i;

	if (!OidIsValid(coltype))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("%s: idem_records has no shard key", fname),
				 errdetail("The _at functions are for idem_records distributed by a shard key; these records are keyed by (scope, key) alone."),
				 errhint("Call the function without _at and without the shard key, or distribute the records with idem_distribute(shard_key => 'type'); see docs/citus.md.")));
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s: shard_key must not be null", fname),
				 errhint("Pass the distribution value of the row the key protects, for example the customer id.")));

	InitFunctionCallInfoData(*inner, fcinfo->flinfo, fcinfo->nargs - 1,
							 fcinfo->fncollation, fcinfo->context,
							 fcinfo->resultinfo);
	for (i = 1; i < fcinfo->nargs; i++)
		inner->args[i - 1] = fcinfo->args[i];

	shard_current_value = shard_convert(fcinfo, coltype, fname);
	shard_current_set = true;
	PG_TRY();
	{
		result = target(inner);
	}
	PG_CATCH();
	{
		ErrorData  *edata;
		char	   *example;

		shard_current_set = saved_set;
		shard_current_value = saved_value;
		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		if (!shard_citus_nested(edata))
		{
			FreeErrorData(edata);
			PG_RE_THROW();
		}
		FlushErrorState();
		example = shard_twin_signature(fname, nsp, "42");
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("%s: cannot run inside a query on a shard of a distributed table", fname),
				 errdetail("Citus runs the query that calls %s on the node of the shard, where the function's statements on idem_records would be a distributed query inside a query on a shard, which Citus refuses; a record written into the co-located shard there instead would be a write that Citus takes for a read and leaves out of its two-phase commit.", fname),
				 errhint("Call %s in a statement of its own, with the shard key as a value, for example SELECT %s; then query the table in the same transaction: with the records co-located with the table, both run on the shard's worker in one transaction.",
						 fname, example ? example : fname)));
	}
	PG_END_TRY();
	shard_current_set = saved_set;
	shard_current_value = saved_value;

	fcinfo->isnull = inner->isnull;
	return result;
}

/*
 * Fail with 55000: fn_oid, a function without _at (the one running, as
 * query.c last saw it), ran a statement marked rewritten_per_shard on
 * records with a shard key (schema nsp).  The message names the function;
 * the hint its twin, with the twin's arguments, or every twin when the
 * function has none (no function without a twin runs such a statement: a
 * can't-happen).
 */
void
idem_shard_refuse(Oid fn_oid, Oid nsp)
{
	char	   *fname = OidIsValid(fn_oid) ? get_func_name(fn_oid) : NULL;
	char	   *twin = NULL;
	char	   *hint;

	if (fname != NULL && strcmp(fname, "idem_claim") == 0 && get_func_nargs(fn_oid) == 1)
		hint = pstrdup("Call idem_claim_at(shard_key, '', key) instead: idem_claim(key) with the shard key first, in the scope '' that idem_claim(key) claims in.");
	else
	{
		if (fname != NULL)
			twin = shard_twin_signature(psprintf("%s_at", fname), nsp, NULL);
		if (twin != NULL)
			hint = psprintf("Call %s instead: %s with the shard key first.", twin, fname);
		else
			hint = psprintf("Call the function's _at twin with the shard key first: %s.", shard_twins);
	}
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 fname != NULL ?
			 errmsg("%s: idem_records is distributed by a shard key", fname) :
			 errmsg("idem_records is distributed by a shard key"),
			 errdetail("idem_distribute(shard_key => ...) made (shard_key, scope, key) the identity of a record, so every call must say which shard key its key belongs to."),
			 errhint("%s", hint)));
	pg_unreachable();
}

/* buf gets src with every "from" replaced by "to"; the number replaced. */
static int
shard_replace(StringInfo buf, const char *src, const char *from, const char *to)
{
	size_t		flen = strlen(from);
	const char *p = src;
	const char *hit;
	int			n = 0;

	resetStringInfo(buf);
	while ((hit = strstr(p, from)) != NULL)
	{
		appendBinaryStringInfo(buf, p, hit - p);
		appendStringInfoString(buf, to);
		p = hit + flen;
		n++;
	}
	appendStringInfoString(buf, p);
	return n;
}

/*
 * The text of sql, a statement addressing one record by $1 scope and $2
 * key, with the shard key as parameter $param added wherever the record
 * is addressed.  A statement with nothing to rewrite is a bug.
 */
char *
idem_shard_rewrite(const char *sql, int param)
{
	static const char *const where_from =
		"r.scope OPERATOR(pg_catalog.=) $1 AND r.key OPERATOR(pg_catalog.=) $2";
	char	   *where_to = psprintf("r.shard_key OPERATOR(pg_catalog.=) $%d AND %s",
									param, where_from);
	char	   *values_to = psprintf("VALUES ($%d, $1, $2, ", param);
	const char *const from[] = {where_from, " (scope, key, ", "VALUES ($1, $2, ",
	"ON CONFLICT (scope, key)"};
	const char *const to[] = {where_to, " (shard_key, scope, key, ", values_to,
	"ON CONFLICT (shard_key, scope, key)"};
	StringInfoData a;
	StringInfoData b;
	int			n = 0;
	int			i;

	initStringInfo(&a);
	initStringInfo(&b);
	appendStringInfoString(&a, sql);
	for (i = 0; i < lengthof(from); i++)
	{
		n += shard_replace(&b, a.data, from[i], to[i]);
		resetStringInfo(&a);
		appendStringInfoString(&a, b.data);
	}
	if (n == 0)
		elog(ERROR, "statement addresses no record by scope and key: %s", sql);
	pfree(b.data);
	pfree(where_to);
	pfree(values_to);
	return a.data;
}
