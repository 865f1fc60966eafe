/*-------------------------------------------------------------------------
 *
 * query.c
 *	  A per-backend cache of prepared SPI plans for the SQL the extension runs
 *	  on its own tables, the lookup of the extension's schema, and what every
 *	  SQL-running function shares: idem_spi_connect, and the setup of a
 *	  materialized set-returning result (idem_check_srf, idem_srf_begin: the
 *	  tuplestore lives in the per-query context, so rows built in SPI's memory
 *	  are copied into it).
 *
 *	  Why: idem_claim and friends run once per business transaction, so they
 *	  must not parse, plan or scan catalogs per call: each statement is
 *	  prepared once per backend, and the plan cache replans it as needed.
 *
 *	  Search path: every statement names the extension's schema ("@extschema@"
 *	  becomes the quoted name of the schema of the *calling function*) and
 *	  every operator, function and type with pg_catalog, so nothing in the
 *	  caller's search_path changes what runs.
 *
 *	  Schema cache: function OID -> schema OID, a small direct-mapped table
 *	  cleared by a syscache callback on pg_proc (so DROP EXTENSION, then
 *	  CREATE EXTENSION in another schema, is seen at once); a plan of another
 *	  schema than the caller's is prepared again.  The schema's name is in each
 *	  plan's text, so a callback on pg_namespace (ALTER SCHEMA ... RENAME)
 *	  marks every plan stale, prepared again on its next use.  Rule: a
 *	  callback only writes that mark; a plan is never freed in an invalidation.
 *
 *	  Shard keys: a statement marked IDEM_REWRITTEN_PER_SHARD is prepared from
 *	  shard.c's rewritten text while idem_records has a shard_key column (the
 *	  key as one more parameter, its type remembered), and again when the
 *	  column comes or goes; run without a current shard key it fails (55000).
 *
 *	  Locking and visibility: the callers' (SPI_execute_plan in their
 *	  transaction, a fresh snapshot per statement in READ COMMITTED);
 *	  preparing takes planning's catalog locks.  Memory: plans in
 *	  SPI_keepplan's contexts (under CacheMemoryContext); query texts in the
 *	  caller's context, not kept.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_namespace.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "nodes/pg_list.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "idempotency.h"

#define SCHEMA_CACHE_SIZE 64

typedef struct SchemaCacheEntry
{
	Oid			fn_oid;
	Oid			nsp;
} SchemaCacheEntry;

static SchemaCacheEntry schema_cache[SCHEMA_CACHE_SIZE];

/*
 * The function whose call asked idem_extension_schema last: the function
 * running now, which a rewritten statement's 55000 names (shard.c).
 */
static Oid	caller_fn_oid = InvalidOid;

/* Every IdemQuery that has been prepared in this backend (static structs). */
static List *prepared_queries = NIL;

static void
schema_cache_reset(Datum arg, int cacheid, uint32 hashvalue)
{
	memset(schema_cache, 0, sizeof(schema_cache));
}

/* A schema was renamed, dropped or changed: re-prepare every query. */
static void
prepared_queries_reset(Datum arg, int cacheid, uint32 hashvalue)
{
	ListCell   *lc;

	foreach(lc, prepared_queries)
		((IdemQuery *) lfirst(lc))->nsp = InvalidOid;
}

/* Called once from _PG_init. */
void
idem_query_init(void)
{
	CacheRegisterSyscacheCallback(PROCOID, schema_cache_reset, (Datum) 0);
	CacheRegisterSyscacheCallback(NAMESPACEOID, prepared_queries_reset, (Datum) 0);
}

/*
 * The schema the calling SQL function belongs to, which is the schema the
 * extension was created in.  One syscache probe per function OID per
 * backend; later calls are an array lookup.
 */
Oid
idem_extension_schema(FunctionCallInfo fcinfo)
{
	Oid			fn_oid = fcinfo->flinfo->fn_oid;
	SchemaCacheEntry *e = &schema_cache[fn_oid % SCHEMA_CACHE_SIZE];
	Oid			nsp;

	caller_fn_oid = fn_oid;
	if (e->fn_oid == fn_oid && OidIsValid(fn_oid))
		return e->nsp;

	nsp = get_func_namespace(fn_oid);
	if (!OidIsValid(nsp))
		elog(ERROR, "cache lookup failed for function %u", fn_oid);
	e->fn_oid = fn_oid;
	e->nsp = nsp;
	return nsp;
}

/* The query text with @extschema@ replaced by the quoted schema name. */
static char *
expand_query(const char *sql, Oid nsp)
{
	const char *marker = "@extschema@";
	size_t		mlen = strlen(marker);
	char	   *nspname = get_namespace_name(nsp);
	const char *quoted;
	StringInfoData buf;
	const char *p = sql;
	const char *hit;

	if (nspname == NULL)
		elog(ERROR, "cache lookup failed for schema %u", nsp);
	quoted = quote_identifier(nspname);

	initStringInfo(&buf);
	while ((hit = strstr(p, marker)) != NULL)
	{
		appendBinaryStringInfo(&buf, p, hit - p);
		appendStringInfoString(&buf, quoted);
		p = hit + mlen;
	}
	appendStringInfoString(&buf, p);
	return buf.data;
}

/*
 * The saved plan for q in schema nsp, preparing it on first use.  Must be
 * called between SPI_connect and SPI_finish.
 */
SPIPlanPtr
idem_query_plan(IdemQuery *q, Oid nsp)
{
	SPIPlanPtr	plan;
	char	   *sql;
	Oid			shard_type = q->rewritten_per_shard ? idem_shard_type(nsp) : InvalidOid;
	Oid			argtypes[IDEM_MAX_ARGS + 1];
	int			nargs = q->nargs;

	if (q->plan != NULL && q->nsp == nsp && q->shard_type == shard_type)
		return q->plan;

	if (q->plan != NULL)
	{
		SPI_freeplan(q->plan);
		q->plan = NULL;
	}

	sql = expand_query(q->sql, nsp);
	memcpy(argtypes, q->argtypes, sizeof(q->argtypes));
	if (OidIsValid(shard_type))
	{
		sql = idem_shard_rewrite(sql, nargs + 1);
		argtypes[nargs++] = shard_type;
	}
	plan = SPI_prepare(sql, nargs, argtypes);
	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed for \"%s\": %s",
			 sql, SPI_result_code_string(SPI_result));
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "SPI_keepplan failed");
	pfree(sql);

	if (!list_member_ptr(prepared_queries, q))
	{
		MemoryContext oldcxt = MemoryContextSwitchTo(TopMemoryContext);

		prepared_queries = lappend(prepared_queries, q);
		MemoryContextSwitchTo(oldcxt);
	}

	q->plan = plan;
	q->nsp = nsp;
	q->shard_type = shard_type;
	return plan;
}

/*
 * A permission error on one of the extension's own objects, raised by one
 * of its statements: say what to grant instead of showing the statement.
 * The caller has copied the error into edata and flushed it.
 */
static void
rethrow_permission_error(ErrorData *edata, const char *sql)
{
	const char *role = GetUserNameFromId(GetUserId(), true);
	bool		reads = pg_strncasecmp(sql, "SELECT", 6) == 0;

	edata->hint = psprintf("As the extension's owner, run: SELECT idem_grant(%s%s);",
						   quote_literal_cstr(quote_identifier(role ? role : "role")),
						   reads ? ", 'read'" : "");
	edata->context = NULL;
	edata->internalquery = NULL;
	edata->internalpos = 0;
	ReThrowError(edata);
}

/*
 * Run plan, prepared for q, with the given arguments; the error handling of
 * idem_query_exec.
 */
static int
query_run(IdemQuery *q, SPIPlanPtr plan, Datum *values, const char *nulls,
		  bool read_only, long count)
{
	MemoryContext cxt = CurrentMemoryContext;
	int			rc = 0;

	PG_TRY();
	{
		rc = SPI_execute_plan(plan, values, nulls, read_only, count);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		if (edata->sqlerrcode != ERRCODE_INSUFFICIENT_PRIVILEGE ||
			edata->message == NULL || strstr(edata->message, " idem_") == NULL ||
			edata->hint != NULL)
		{
			FreeErrorData(edata);
			PG_RE_THROW();
		}
		FlushErrorState();
		rethrow_permission_error(edata, q->sql);
	}
	PG_END_TRY();
	if (rc < 0)
		elog(ERROR, "SPI_execute_plan failed: %s", SPI_result_code_string(rc));
	return (int) SPI_processed;
}

/*
 * Execute q with the given arguments; returns SPI_processed.  Errors from
 * the statement (lock timeouts, serialization failures, constraint
 * violations) propagate unchanged, but for a permission error on the
 * extension's own objects, which gets a hint naming idem_grant.  A
 * rewritten_per_shard statement on records with a shard key gets the
 * current shard key as its last argument, or fails with 55000 outside an
 * F_at call, naming the twin of the function running (shard.c).  A
 * negative SPI result code is a bug.
 */
int
idem_query_exec(IdemQuery *q, Oid nsp, Datum *values, const char *nulls,
				bool read_only, long count)
{
	SPIPlanPtr	plan = idem_query_plan(q, nsp);
	Datum		shard_values[IDEM_MAX_ARGS + 1];
	char		shard_nulls[IDEM_MAX_ARGS + 1];
	Datum		key;

	if (!OidIsValid(q->shard_type))
		return query_run(q, plan, values, nulls, read_only, count);

	if (!idem_shard_current(&key))
		idem_shard_refuse(caller_fn_oid, nsp);
	memcpy(shard_values, values, q->nargs * sizeof(Datum));
	shard_values[q->nargs] = key;
	if (nulls != NULL)
		memcpy(shard_nulls, nulls, q->nargs);
	else
		memset(shard_nulls, ' ', q->nargs);
	shard_nulls[q->nargs] = ' ';
	return query_run(q, plan, shard_values, shard_nulls, read_only, count);
}

/*
 * Connect to SPI, for every function of the extension that runs SQL.
 * SPI_connect fails only when it is misused (a can't-happen).
 */
void
idem_spi_connect(void)
{
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
}

/*
 * Fail with 0A000 unless the caller can take a materialized set: the
 * check every set-returning function of the extension makes first, with
 * a message naming it.
 */
void
idem_check_srf(FunctionCallInfo fcinfo, const char *fname)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	if (rsinfo == NULL || !IsA(rsinfo, ReturnSetInfo) ||
		(rsinfo->allowedModes & SFRM_Materialize) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("%s: set-valued function called in context that cannot accept a set",
						fname)));
}

/*
 * Set up a materialized result of natts columns (InitMaterializedSRF):
 * on return rsinfo->setResult is a tuplestore and rsinfo->setDesc its
 * descriptor, both in the query's per-query memory, so rows put there
 * from SPI's memory are copied.  Fails as idem_check_srf.
 */
ReturnSetInfo *
idem_srf_begin(FunctionCallInfo fcinfo, const char *fname, int natts)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	idem_check_srf(fcinfo, fname);
	InitMaterializedSRF(fcinfo, 0);
	if (rsinfo->setDesc->natts != natts)
		elog(ERROR, "%s: expected %d result columns, got %d",
			 fname, natts, rsinfo->setDesc->natts);
	return rsinfo;
}
