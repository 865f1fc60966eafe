/*-------------------------------------------------------------------------
 *
 * records.c
 *	  The rest of the one-phase API on the records table, after a claim
 *	  (claim.c): idem_complete, idem_lookup, idem_release and idem_purge,
 *	  and idem_summary, the per-scope overview of idem_records.
 *
 *	  Atomicity: every statement here runs through SPI (query.c's prepared
 *	  plans) in the caller's transaction, so it commits or rolls back with
 *	  the business writes around it.  No subtransaction is started.  (The
 *	  fast path of idem_claim, claim_direct.c, is claim.c's concern; nothing
 *	  here bypasses SPI.)
 *
 *	  Locking: idem_complete and idem_release update or delete one row by
 *	  its primary key, waiting for a concurrent writer of that row as any
 *	  UPDATE or DELETE does; idem_purge takes its batch FOR UPDATE SKIP
 *	  LOCKED, so it never waits for a claim; idem_lookup and idem_summary
 *	  only read (they work on a hot standby).
 *
 *	  Time: "now" is the wall clock at the call (GetCurrentTimestamp), not
 *	  the transaction start, so expiry is counted from the call.
 *
 *	  Memory: arguments and results are in the caller's context; SPI's
 *	  per-call memory is released by SPI_finish, results are copied out
 *	  with SPI_datumTransfer.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "idempotency.h"
#include "claim.h"
#include "spi_read.h"

PG_FUNCTION_INFO_V1(idem_complete);
PG_FUNCTION_INFO_V1(idem_lookup);
PG_FUNCTION_INFO_V1(idem_release);
PG_FUNCTION_INFO_V1(idem_purge);
PG_FUNCTION_INFO_V1(idem_summary);

static IdemQuery q_complete = {
	"UPDATE @extschema@.idem_records r"
	" SET status = 'completed', result = $3, updated_at = $4"
	" WHERE r.scope OPERATOR(pg_catalog.=) $1 AND r.key OPERATOR(pg_catalog.=) $2"
	" AND r.expires_at OPERATOR(pg_catalog.>) $4"
	" AND r.status OPERATOR(pg_catalog.=) 'claimed'",
	4, {TEXTOID, TEXTOID, JSONBOID, TIMESTAMPTZOID},
	IDEM_REWRITTEN_PER_SHARD
};

static IdemQuery q_status = {
	"SELECT r.status, r.expires_at OPERATOR(pg_catalog.>) $3"
	" FROM @extschema@.idem_records r"
	" WHERE r.scope OPERATOR(pg_catalog.=) $1 AND r.key OPERATOR(pg_catalog.=) $2",
	3, {TEXTOID, TEXTOID, TIMESTAMPTZOID},
	IDEM_REWRITTEN_PER_SHARD
};

static IdemQuery q_lookup = {
	"SELECT ROW(r.scope, r.key, r.status, r.fingerprint, r.result,"
	"           r.created_at, r.updated_at, r.expires_at,"
	"           r.locked_until, r.token, r.attempts, r.owner_pid, r.owner_start,"
	"           r.effect_started_at, r.effect_unknown_attempt)::@extschema@.idem_record"
	" FROM @extschema@.idem_records r"
	" WHERE r.scope OPERATOR(pg_catalog.=) $1 AND r.key OPERATOR(pg_catalog.=) $2"
	" AND r.expires_at OPERATOR(pg_catalog.>) $3",
	3, {TEXTOID, TEXTOID, TIMESTAMPTZOID},
	IDEM_REWRITTEN_PER_SHARD
};

/* The same on a catalog not yet updated to 0.6.0 (idem_records_current). */
static IdemQuery q_lookup_legacy = {
	"SELECT ROW(r.scope, r.key, r.status, r.fingerprint, r.result,"
	"           r.created_at, r.updated_at, r.expires_at,"
	"           r.locked_until, r.token, r.attempts)::@extschema@.idem_record"
	" FROM @extschema@.idem_records r"
	" WHERE r.scope OPERATOR(pg_catalog.=) $1 AND r.key OPERATOR(pg_catalog.=) $2"
	" AND r.expires_at OPERATOR(pg_catalog.>) $3",
	3, {TEXTOID, TEXTOID, TIMESTAMPTZOID},
	IDEM_REWRITTEN_PER_SHARD
};

static IdemQuery q_release = {
	"DELETE FROM @extschema@.idem_records r"
	" WHERE r.scope OPERATOR(pg_catalog.=) $1 AND r.key OPERATOR(pg_catalog.=) $2"
	" AND NOT (r.status OPERATOR(pg_catalog.=) 'in_progress'"
	"          AND r.locked_until OPERATOR(pg_catalog.>) $3"
	"          AND r.expires_at OPERATOR(pg_catalog.>) $3)"
	" RETURNING r.expires_at OPERATOR(pg_catalog.>) $3",
	3, {TEXTOID, TEXTOID, TIMESTAMPTZOID},
	IDEM_REWRITTEN_PER_SHARD
};

static IdemQuery q_leased = {
	"SELECT 1 FROM @extschema@.idem_records r"
	" WHERE r.scope OPERATOR(pg_catalog.=) $1 AND r.key OPERATOR(pg_catalog.=) $2"
	" AND r.status OPERATOR(pg_catalog.=) 'in_progress'"
	" AND r.locked_until OPERATOR(pg_catalog.>) $3"
	" AND r.expires_at OPERATOR(pg_catalog.>) $3",
	3, {TEXTOID, TEXTOID, TIMESTAMPTZOID},
	IDEM_REWRITTEN_PER_SHARD
};

static IdemQuery q_purge = {
	"DELETE FROM @extschema@.idem_records r"
	" WHERE r.ctid OPERATOR(pg_catalog.=) ANY (ARRAY("
	"   SELECT p.ctid FROM @extschema@.idem_records p"
	"   WHERE p.expires_at OPERATOR(pg_catalog.<=) $1"
	"   ORDER BY p.expires_at LIMIT $2"
	"   FOR UPDATE SKIP LOCKED))"
	" AND r.expires_at OPERATOR(pg_catalog.<=) $1"
	" RETURNING r.scope",
	2, {TIMESTAMPTZOID, INT4OID}
};

/*
 * The same on Citus (idem_records distributed): Citus runs neither FOR
 * UPDATE nor a ctid list across shards, so the batch is picked by
 * (scope, key) into an intermediate result and deleted shard by shard; a
 * row locked by another transaction is waited for instead of skipped, and
 * re-checked after.
 */
static IdemQuery q_purge_citus = {
	"DELETE FROM @extschema@.idem_records r"
	" USING (SELECT c.scope, c.key FROM @extschema@.idem_records c"
	"   WHERE c.expires_at OPERATOR(pg_catalog.<=) $1"
	"   ORDER BY c.expires_at LIMIT $2) b"
	" WHERE r.key OPERATOR(pg_catalog.=) b.key AND r.scope OPERATOR(pg_catalog.=) b.scope"
	" AND r.expires_at OPERATOR(pg_catalog.<=) $1"
	" RETURNING r.scope",
	2, {TIMESTAMPTZOID, INT4OID}
};

/* The same with a shard key (shard.c): Citus joins shards by it. */
static IdemQuery q_purge_citus_shard = {
	"DELETE FROM @extschema@.idem_records r"
	" USING (SELECT c.shard_key, c.scope, c.key FROM @extschema@.idem_records c"
	"   WHERE c.expires_at OPERATOR(pg_catalog.<=) $1"
	"   ORDER BY c.expires_at LIMIT $2) b"
	" WHERE r.shard_key OPERATOR(pg_catalog.=) b.shard_key"
	" AND r.key OPERATOR(pg_catalog.=) b.key AND r.scope OPERATOR(pg_catalog.=) b.scope"
	" AND r.expires_at OPERATOR(pg_catalog.<=) $1"
	" RETURNING r.scope",
	2, {TIMESTAMPTZOID, INT4OID}
};

/* idem_summary: $1 is the caller's "now", as for expiry everywhere. */
#define SUMMARY_COLUMNS 12

static IdemQuery q_summary = {
	"SELECT r.scope,"
	" pg_catalog.count(*),"
	" pg_catalog.count(*) FILTER (WHERE r.status OPERATOR(pg_catalog.=) 'claimed'),"
	" pg_catalog.count(*) FILTER (WHERE r.status OPERATOR(pg_catalog.=) 'in_progress'),"
	" pg_catalog.count(*) FILTER (WHERE r.status OPERATOR(pg_catalog.=) 'completed'),"
	" pg_catalog.count(*) FILTER (WHERE r.status OPERATOR(pg_catalog.=) 'failed'),"
	" pg_catalog.count(*) FILTER (WHERE r.status OPERATOR(pg_catalog.=) 'retryable'),"
	" pg_catalog.count(*) FILTER (WHERE r.status OPERATOR(pg_catalog.=) 'issued'),"
	" pg_catalog.count(*) FILTER (WHERE r.status OPERATOR(pg_catalog.=) 'consumed'),"
	" pg_catalog.min(r.created_at),"
	" pg_catalog.count(*) FILTER (WHERE r.expires_at OPERATOR(pg_catalog.<=) $1),"
	" pg_catalog.count(*) FILTER (WHERE r.status OPERATOR(pg_catalog.=) 'in_progress'"
	"   AND r.locked_until OPERATOR(pg_catalog.<=) $1"
	"   AND r.expires_at OPERATOR(pg_catalog.>) $1)"
	" FROM @extschema@.idem_records r"
	" GROUP BY r.scope",
	1, {TIMESTAMPTZOID}
};

/*
 * idem_complete(scope text, key text, result jsonb) RETURNS void
 *
 * Marks a claimed record completed and stores result for replay.  Fails
 * with 22004/22023/22001 as idem_claim, 22004 also for a NULL result
 * (completed with nothing to replay), 25006 (read-only),
 * ID002 (no live record: absent, expired, or claimed by a transaction
 * that has not committed), ID005 (the record is not in status 'claimed':
 * already completed, failed, or in progress under a lease), 55000 (the
 * record cannot be read as the install script shapes idem_records: a
 * column retyped, or NULL where it was NOT NULL; spi_read.c).
 */
Datum
idem_complete(PG_FUNCTION_ARGS)
{
	const char *fname = "idem_complete";
	text	   *scope = idem_arg_scope(fcinfo, 0, fname);
	text	   *key = idem_arg_key(fcinfo, 1, fname);
	Oid			nsp = idem_extension_schema(fcinfo);
	TimestampTz now;
	Datum		values[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};

	/*
	 * A NULL result would store "completed" with nothing to replay, and is
	 * most often a lookup that found nothing: refused.
	 */
	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s: result must not be null", fname),
				 errdetail("A completed record is replayed from its result; a null result would replay nothing."),
				 errhint("Pass the response to replay; for a request with no response, pass '{}' or 'null'::jsonb.")));
	idem_check_writable(fname);
	now = GetCurrentTimestamp();

	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(key);
	values[2] = PointerGetDatum(PG_GETARG_JSONB_P(2));
	values[3] = TimestampTzGetDatum(now);

	idem_spi_connect();

	if (idem_query_exec(&q_complete, nsp, values, nulls, false, 0) == 0)
	{
		Datum		svalues[3] = {values[0], values[1], values[3]};
		char	   *status;

		if (idem_query_exec(&q_status, nsp, svalues, NULL, false, 1) == 0 ||
			!DatumGetBool(idem_spi_read_required(SPI_tuptable, 0, 2, BOOLOID,
												 "expires_at")))
			ereport(ERROR,
					(errcode(ERRCODE_IDEM_NO_RECORD),
					 errmsg("%s: no live idempotency record", fname),
					 errdetail("Key \"%s\" in scope \"%s\" has no record, or its record expired.",
							   text_to_cstring(key), text_to_cstring(scope)),
					 errhint("Call idem_claim() first, in the same transaction.")));
		status = idem_spi_read_cstring(SPI_tuptable, 0, 1, "status");
		ereport(ERROR,
				(errcode(ERRCODE_IDEM_WRONG_STATUS),
				 errmsg("%s: idempotency record is not claimed", fname),
				 errdetail("Key \"%s\" in scope \"%s\" has status \"%s\".",
						   text_to_cstring(key), text_to_cstring(scope), status),
				 errhint("Only a record claimed with idem_claim() can be completed; a leased record is finished with idem_finish().")));
	}
	idem_stats_count(scope, IDEM_STAT_COMPLETED);

	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * idem_lookup(scope text, key text) RETURNS idem_record
 *
 * The live record, or NULL when there is none or it expired.  Read-only:
 * works on a hot standby.  Fails with 22004/22023/22001 as idem_claim.
 */
Datum
idem_lookup(PG_FUNCTION_ARGS)
{
	const char *fname = "idem_lookup";
	text	   *scope = idem_arg_scope(fcinfo, 0, fname);
	text	   *key = idem_arg_key(fcinfo, 1, fname);
	Oid			nsp = idem_extension_schema(fcinfo);
	Datum		values[3];
	Datum		result = (Datum) 0;
	bool		isnull = true;

	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(key);
	values[2] = TimestampTzGetDatum(GetCurrentTimestamp());

	idem_spi_connect();

	if (idem_query_exec(idem_records_current(nsp) ? &q_lookup : &q_lookup_legacy,
						nsp, values, NULL, true, 1) == 1)
	{
		/* ROW(...)::idem_record: the statement fixes its type. */
		result = idem_spi_read(SPI_tuptable, 0, 1, InvalidOid, NULL, &isnull);
		if (!isnull)
			result = SPI_datumTransfer(result, false, -1);
	}

	SPI_finish();

	if (isnull)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(result);
}

/*
 * idem_release(scope text, key text) RETURNS boolean
 *
 * Deletes the record so the key can be claimed again; true when a live
 * record was removed.  Fails with 22004/22023/22001 as idem_claim, 25006
 * (read-only), ID005 (the record is in progress under a live lease: only
 * its owner may end it, with idem_finish or idem_fail).
 */
Datum
idem_release(PG_FUNCTION_ARGS)
{
	const char *fname = "idem_release";
	text	   *scope = idem_arg_scope(fcinfo, 0, fname);
	text	   *key = idem_arg_key(fcinfo, 1, fname);
	Oid			nsp = idem_extension_schema(fcinfo);
	Datum		values[3];
	bool		removed = false;

	idem_check_writable(fname);

	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(key);
	values[2] = TimestampTzGetDatum(GetCurrentTimestamp());

	idem_spi_connect();

	if (idem_query_exec(&q_release, nsp, values, NULL, false, 0) == 1)
		removed = DatumGetBool(idem_spi_read_required(SPI_tuptable, 0, 1, BOOLOID,
													  "expires_at"));
	else if (idem_query_exec(&q_leased, nsp, values, NULL, false, 1) == 1)
	{
		/*
		 * The DELETE skipped a live lease.  (A row that is absent, or was
		 * deleted and claimed anew since the DELETE's snapshot, is not
		 * an error: nothing of the caller's was there to release.)
		 */
		ereport(ERROR,
				(errcode(ERRCODE_IDEM_WRONG_STATUS),
				 errmsg("%s: idempotency record is in progress under a lease", fname),
				 errdetail("Key \"%s\" in scope \"%s\" is held by a worker whose lease has not run out.",
						   text_to_cstring(key), text_to_cstring(scope)),
				 errhint("The lease holder ends it with idem_finish() or idem_fail(); otherwise wait for the lease to run out.")));
	}

	SPI_finish();
	PG_RETURN_BOOL(removed);
}

/*
 * idem_purge(batch_size integer DEFAULT 10000) RETURNS bigint
 *
 * Deletes up to batch_size expired records, skipping rows locked by
 * concurrent transactions (a purge never waits for a claim), and returns
 * how many were removed.  A claim of one of the very keys this batch is
 * deleting waits for the batch to commit, then claims the key afresh.  Fails with
 * 22004 (NULL batch_size), 22023 (batch_size < 1), 25006 (read-only),
 * 55000 (scope is no longer a text column).
 */
Datum
idem_purge(PG_FUNCTION_ARGS)
{
	const char *fname = "idem_purge";
	Oid			nsp = idem_extension_schema(fcinfo);
	int32		batch;
	Datum		values[2];
	int			n;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s: batch_size must not be null", fname)));
	batch = PG_GETARG_INT32(0);
	if (batch < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s: batch_size must be at least 1", fname),
				 errdetail("The batch_size given was %d.", batch)));

	idem_check_writable(fname);

	values[0] = TimestampTzGetDatum(GetCurrentTimestamp());
	values[1] = Int32GetDatum(batch);

	idem_spi_connect();
	n = idem_query_exec(!idem_records_citus(nsp) ? &q_purge :
						OidIsValid(idem_shard_type(nsp)) ? &q_purge_citus_shard :
						&q_purge_citus,
						nsp, values, NULL, false, 0);
	/* The scopes deleted, for the statistics: checked with or without them. */
	if (SPI_tuptable != NULL)
		idem_spi_check_type(SPI_tuptable, 1, TEXTOID, "scope");
	idem_stats_count_rows(IDEM_STAT_PURGED);
	SPI_finish();

	PG_RETURN_INT64((int64) n);
}

/*
 * idem_summary(OUT scope text, OUT records bigint, OUT claimed bigint,
 *              OUT in_progress bigint, OUT completed bigint,
 *              OUT failed bigint, OUT retryable bigint, OUT issued bigint,
 *              OUT consumed bigint, OUT oldest_created_at timestamptz,
 *              OUT expired bigint, OUT stuck bigint) RETURNS SETOF record
 *
 * One row per scope of idem_records: rows by status (expired rows
 * included), the oldest created_at, rows expired and awaiting purge, and
 * in-progress rows whose lease ran out (stuck work nobody has taken over).
 * Scans the whole table, as the caller: needs no shared_preload_libraries,
 * but SELECT on idem_records, and row-level security applies.  Fails with
 * 42501 without that privilege, 0A000 where a set cannot be accepted,
 * 55000 (scope or created_at retyped).
 */
Datum
idem_summary(PG_FUNCTION_ARGS)
{
	const char *fname = "idem_summary";
	Oid			nsp = idem_extension_schema(fcinfo);
	ReturnSetInfo *rsinfo;
	Datum		arg[1];
	uint64		i;

	rsinfo = idem_srf_begin(fcinfo, fname, SUMMARY_COLUMNS);

	arg[0] = TimestampTzGetDatum(GetCurrentTimestamp());

	idem_spi_connect();
	(void) idem_query_exec(&q_summary, nsp, arg, NULL, true, 0);
	if (SPI_tuptable->tupdesc->natts != SUMMARY_COLUMNS)
		elog(ERROR, "%s: query returned %d columns", fname,
			 SPI_tuptable->tupdesc->natts);
	/* The columns taken from idem_records as they are (the rest count). */
	idem_spi_check_type(SPI_tuptable, 1, TEXTOID, "scope");
	idem_spi_check_type(SPI_tuptable, 10, TIMESTAMPTZOID, "created_at");
	for (i = 0; i < SPI_processed; i++)
	{
		Datum		values[SUMMARY_COLUMNS];
		bool		nulls[SUMMARY_COLUMNS];

		heap_deform_tuple(SPI_tuptable->vals[i], SPI_tuptable->tupdesc,
						  values, nulls);
		/* Copies the values into the tuplestore's memory. */
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	SPI_finish();

	return (Datum) 0;
}

/* The F_at twins of this file (IDEM_SHARD_TWIN, idempotency.h). */
IDEM_SHARD_TWIN(idem_complete);
IDEM_SHARD_TWIN(idem_lookup);
IDEM_SHARD_TWIN(idem_release);
