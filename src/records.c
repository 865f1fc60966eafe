/*-------------------------------------------------------------------------
 *
 * records.c
 *	  The one-phase API on the records table: idem_claim, idem_complete,
 *	  idem_lookup, idem_release and idem_purge.
 *
 *	  Atomicity: every statement runs through SPI in the caller's
 *	  transaction, so a claim commits or rolls back with the business
 *	  writes around it.  No subtransaction is started.
 *
 *	  Concurrency (idem_claim): the dedup decision is made by the primary
 *	  key of idem_records through INSERT ... ON CONFLICT DO NOTHING, i.e.
 *	  speculative insertion.  A key held by another transaction's
 *	  uncommitted insert makes the INSERT wait for that transaction (as a
 *	  unique index does, honouring lock_timeout and statement_timeout); if
 *	  it commits we see a conflict, if it aborts our insert goes in.  A
 *	  conflict is found before any heap tuple is written, so a duplicate
 *	  leaves no dead tuple, assigns no transaction id and writes no WAL.
 *	  After a conflict the row is read with a fresh snapshot (READ
 *	  COMMITTED) or the transaction snapshot (REPEATABLE READ and
 *	  SERIALIZABLE, where the INSERT itself raises 40001 if the conflicting
 *	  row was committed after the snapshot).  A row that is expired, a
 *	  retryable failure, or a lease that ran out is taken over with an
 *	  UPDATE that re-checks the same condition on the newest row version
 *	  (EvalPlanQual), so two takers cannot both win.
 *
 *	  Time: "now" is the wall clock at the call (GetCurrentTimestamp), not
 *	  the transaction start, so expiry is counted from the call.
 *
 *	  Memory: arguments and results are in the caller's context; SPI's
 *	  per-call memory is released by SPI_finish.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/rls.h"
#include "utils/timestamp.h"

#include "idempotency.h"

PG_FUNCTION_INFO_V1(idem_claim);
PG_FUNCTION_INFO_V1(idem_claim_default_scope);
PG_FUNCTION_INFO_V1(idem_complete);
PG_FUNCTION_INFO_V1(idem_lookup);
PG_FUNCTION_INFO_V1(idem_release);
PG_FUNCTION_INFO_V1(idem_purge);

/* How often a conflicting but invisible row is retried before giving up. */
#define CLAIM_MAX_INVISIBLE_RETRIES 10

static IdemQuery q_claim_insert = {
	"INSERT INTO @extschema@.idem_records AS r"
	" (scope, key, status, fingerprint, created_at, updated_at, expires_at)"
	" VALUES ($1, $2, 'claimed', $3, $4, $4, $5)"
	" ON CONFLICT (scope, key) DO NOTHING",
	5, {TEXTOID, TEXTOID, BYTEAOID, TIMESTAMPTZOID, TIMESTAMPTZOID}
};

static IdemQuery q_claim_read = {
	"SELECT r.status, r.fingerprint, r.created_at, r.expires_at, r.locked_until"
	" FROM @extschema@.idem_records r"
	" WHERE r.scope OPERATOR(pg_catalog.=) $1 AND r.key OPERATOR(pg_catalog.=) $2",
	2, {TEXTOID, TEXTOID}
};

static IdemQuery q_claim_takeover = {
	"UPDATE @extschema@.idem_records r"
	" SET status = 'claimed', fingerprint = $3, result = NULL,"
	"     created_at = $4, updated_at = $4, expires_at = $5,"
	"     locked_until = NULL, token = NULL,"
	"     attempts = CASE WHEN r.expires_at OPERATOR(pg_catalog.<=) $4"
	"                THEN 0 ELSE r.attempts END"
	" WHERE r.scope OPERATOR(pg_catalog.=) $1 AND r.key OPERATOR(pg_catalog.=) $2"
	" AND " IDEM_CLAIMABLE_SQL,
	5, {TEXTOID, TEXTOID, BYTEAOID, TIMESTAMPTZOID, TIMESTAMPTZOID}
};

static IdemQuery q_complete = {
	"UPDATE @extschema@.idem_records r"
	" SET status = 'completed', result = $3, updated_at = $4"
	" WHERE r.scope OPERATOR(pg_catalog.=) $1 AND r.key OPERATOR(pg_catalog.=) $2"
	" AND r.expires_at OPERATOR(pg_catalog.>) $4"
	" AND r.status OPERATOR(pg_catalog.=) 'claimed'",
	4, {TEXTOID, TEXTOID, JSONBOID, TIMESTAMPTZOID}
};

static IdemQuery q_status = {
	"SELECT r.status, r.expires_at OPERATOR(pg_catalog.>) $3"
	" FROM @extschema@.idem_records r"
	" WHERE r.scope OPERATOR(pg_catalog.=) $1 AND r.key OPERATOR(pg_catalog.=) $2",
	3, {TEXTOID, TEXTOID, TIMESTAMPTZOID}
};

static IdemQuery q_lookup = {
	"SELECT ROW(r.scope, r.key, r.status, r.fingerprint, r.result,"
	"           r.created_at, r.updated_at, r.expires_at,"
	"           r.locked_until, r.token, r.attempts)::@extschema@.idem_record"
	" FROM @extschema@.idem_records r"
	" WHERE r.scope OPERATOR(pg_catalog.=) $1 AND r.key OPERATOR(pg_catalog.=) $2"
	" AND r.expires_at OPERATOR(pg_catalog.>) $3",
	3, {TEXTOID, TEXTOID, TIMESTAMPTZOID}
};

static IdemQuery q_release = {
	"DELETE FROM @extschema@.idem_records r"
	" WHERE r.scope OPERATOR(pg_catalog.=) $1 AND r.key OPERATOR(pg_catalog.=) $2"
	" AND NOT (r.status OPERATOR(pg_catalog.=) 'in_progress'"
	"          AND r.locked_until OPERATOR(pg_catalog.>) $3"
	"          AND r.expires_at OPERATOR(pg_catalog.>) $3)"
	" RETURNING r.expires_at OPERATOR(pg_catalog.>) $3",
	3, {TEXTOID, TEXTOID, TIMESTAMPTZOID}
};

static IdemQuery q_leased = {
	"SELECT 1 FROM @extschema@.idem_records r"
	" WHERE r.scope OPERATOR(pg_catalog.=) $1 AND r.key OPERATOR(pg_catalog.=) $2"
	" AND r.status OPERATOR(pg_catalog.=) 'in_progress'"
	" AND r.locked_until OPERATOR(pg_catalog.>) $3"
	" AND r.expires_at OPERATOR(pg_catalog.>) $3",
	3, {TEXTOID, TEXTOID, TIMESTAMPTZOID}
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

/* Column value of the current SPI result row, or NULL. */
static inline Datum
spi_col(int row, int col, bool *isnull)
{
	return SPI_getbinval(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, col, isnull);
}

/*
 * Raise the fingerprint-mismatch error for a live record whose stored
 * digest differs from the one given.  Shared with the lease functions.
 */
void
idem_fingerprint_mismatch(const char *fname, text *scope, text *key,
						  TimestampTz first_claimed)
{
	idem_stats_count(scope, IDEM_STAT_FINGERPRINT_MISMATCH);
	ereport(ERROR,
			(errcode(ERRCODE_IDEM_FINGERPRINT_MISMATCH),
			 errmsg("%s: idempotency key reused with a different request", fname),
			 errdetail("Key \"%s\" in scope \"%s\" was first claimed at %s with a different fingerprint.",
					   text_to_cstring(key), text_to_cstring(scope),
					   idem_timestamptz_cstring(first_claimed)),
			 errhint("Use a new key for a different request, or send the same request again.")));
}

/*
 * A takeover of (scope, key) that made no progress: the UPDATE taking the
 * record over changed no row IDEM_MAX_TAKEOVER_ROUNDS times in a row,
 * although a fresh read found it claimable each time.  Row-level security
 * that lets the role see a record but not update it does that (42501);
 * otherwise a trigger on idem_records that skips updates, or other
 * transactions changing the record at every turn (40001, retry).  Shared
 * with idem_begin.
 */
void
idem_takeover_stuck(Oid nsp, const char *fname, text *scope, text *key)
{
	Oid			relid = get_relname_relid("idem_records", nsp);

	if (OidIsValid(relid) && check_enable_rls(relid, InvalidOid, true) == RLS_ENABLED)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("%s: row-level security does not let the current role take over the record for this key",
						fname),
				 errdetail("Key \"%s\" in scope \"%s\" has an expired, retryable or abandoned record that the role may read but not update.",
						   text_to_cstring(key), text_to_cstring(scope)),
				 errhint("Check the UPDATE policies on idem_records for this role and scope.")));
	ereport(ERROR,
			(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
			 errmsg("%s: could not take over the record for this key", fname),
			 errdetail("Key \"%s\" in scope \"%s\" was found claimable %d times, but updating it changed no row.",
					   text_to_cstring(key), text_to_cstring(scope), IDEM_MAX_TAKEOVER_ROUNDS),
			 errhint("Retry the transaction; if this persists, look for a trigger on idem_records that skips updates.")));
}

/*
 * Decide a claim against an existing record: returns true when the record
 * can be taken over (expired, a retryable failure, or a lease that ran
 * out), false when the claim is a duplicate (then counted and, with
 * idempotency.log_duplicates, logged).  Raises ID001 for a live record
 * whose stored fingerprint differs from fp.
 */
static bool
claim_verdict(IdemRecordState *rec, text *scope, text *key, TimestampTz now,
			  bytea *fp, const char *fname)
{
	bool		live = rec->expires_at > now;

	if (live && fp != NULL && rec->fingerprint != NULL &&
		!idem_bytea_equal(fp, rec->fingerprint))
		idem_fingerprint_mismatch(fname, scope, key, rec->created_at);

	if (live &&
		strcmp(rec->status, IDEM_STATUS_RETRYABLE) != 0 &&
		!(strcmp(rec->status, IDEM_STATUS_IN_PROGRESS) == 0 &&
		  rec->has_lock && rec->locked_until <= now))
	{
		/* A duplicate. */
		if (idem_log_duplicates)
			ereport(LOG,
					(errmsg("idempotency: duplicate claim of key \"%s\" in scope \"%s\", first claimed at %s, status %s",
							text_to_cstring(key), text_to_cstring(scope),
							idem_timestamptz_cstring(rec->created_at), rec->status),
					 errhidestmt(true)));
		idem_stats_count(scope, strcmp(rec->status, IDEM_STATUS_IN_PROGRESS) == 0 ?
						 IDEM_STAT_IN_PROGRESS_CONFLICT : IDEM_STAT_DUPLICATE);
		return false;
	}
	return true;
}

/* The answer of idem_claim_direct for what the fast path did. */
static int
direct_outcome(IdemDirectResult result, IdemRecordState *rec, text *scope,
			   text *key, TimestampTz now, bytea *fp, const char *fname)
{
	switch (result)
	{
		case IDEM_DIRECT_INSERTED:
			idem_stats_count(scope, IDEM_STAT_CLAIMED);
			return 1;
		case IDEM_DIRECT_CONFLICT:
			return claim_verdict(rec, scope, key, now, fp, fname) ? -1 : 0;
		case IDEM_DIRECT_DECLINED:
			break;
	}
	return -1;
}

/*
 * The fast path of a claim (direct.c), without SPI: 1 when this transaction
 * now owns the key, 0 for a duplicate, -1 when undecided (the fast path
 * does not apply, or the record must be taken over): then the SPI path
 * decides.  Errors as idem_claim.
 */
int
idem_claim_direct(Oid nsp, text *scope, text *key, TimestampTz now,
				  TimestampTz expires, bytea *fp, const char *fname)
{
	IdemRecordState rec;

	return direct_outcome(idem_direct_claim(nsp, scope, key, now, expires, fp, &rec),
						  &rec, scope, key, now, fp, fname);
}

/*
 * idem_claim_direct through a fast path d that the caller opened (and
 * closes, also after an error here: the transaction's abort releases it).
 */
int
idem_claim_direct_in(IdemDirect *d, text *scope, text *key, TimestampTz now,
					 TimestampTz expires, bytea *fp, const char *fname)
{
	IdemRecordState rec;

	return direct_outcome(idem_direct_claim_key(d, scope, key, now, expires, fp, &rec),
						  &rec, scope, key, now, fp, fname);
}

/*
 * Claim one (scope, key) for the current transaction through SPI: the
 * heart of idem_claim, shared with idem_claim_many.  The caller has
 * validated the arguments, checked the transaction is writable and called
 * SPI_connect.  now and expires are the call's clock and the new record's
 * expiry; fp is the fingerprint digest or NULL.  Returns true when this
 * transaction now owns the key, false for a duplicate.  Errors as
 * idem_claim; a takeover that makes no progress in IDEM_MAX_TAKEOVER_ROUNDS
 * rounds raises idem_takeover_stuck's error.
 */
bool
idem_claim_one(Oid nsp, text *scope, text *key, TimestampTz now,
			   TimestampTz expires, bytea *fp, const char *fname)
{
	Datum		values[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', ' '};
	int			invisible = 0;
	int			rounds = 0;

	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(key);
	values[2] = PointerGetDatum(fp);
	if (fp == NULL)
		nulls[2] = 'n';
	values[3] = TimestampTzGetDatum(now);
	values[4] = TimestampTzGetDatum(expires);

	for (;;)
	{
		bool		isnull;
		Datum		d;
		IdemRecordState rec;

		CHECK_FOR_INTERRUPTS();
		if (++rounds > IDEM_MAX_TAKEOVER_ROUNDS)
			idem_takeover_stuck(nsp, fname, scope, key);

		if (idem_query_exec(&q_claim_insert, nsp, values, nulls, false, 0) == 1)
		{
			idem_stats_count(scope, IDEM_STAT_CLAIMED);
			return true;
		}

		/* The key exists (or existed a moment ago): read it. */
		if (idem_query_exec(&q_claim_read, nsp, values, NULL, false, 1) == 0)
		{
			/*
			 * Deleted since the INSERT saw it, or hidden from this role by
			 * row-level security.  Retry a bounded number of times.
			 */
			if (++invisible > CLAIM_MAX_INVISIBLE_RETRIES)
				ereport(ERROR,
						(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
						 errmsg("%s: a record for this key exists but is not visible to the current role",
								fname),
						 errdetail("Key \"%s\" in scope \"%s\" is held by a row that row-level security hides.",
								   text_to_cstring(key), text_to_cstring(scope)),
						 errhint("Check the row-level security policies on idem_records.")));
			continue;
		}

		rec.status = TextDatumGetCString(spi_col(0, 1, &isnull));
		d = spi_col(0, 2, &isnull);
		rec.fingerprint = isnull ? NULL : DatumGetByteaPP(d);
		rec.created_at = DatumGetTimestampTz(spi_col(0, 3, &isnull));
		rec.expires_at = DatumGetTimestampTz(spi_col(0, 4, &isnull));
		rec.locked_until = DatumGetTimestampTz(spi_col(0, 5, &isnull));
		rec.has_lock = !isnull;

		if (!claim_verdict(&rec, scope, key, now, fp, fname))
			return false;
		SPI_freetuptable(SPI_tuptable);

		/* Expired, retryable or abandoned: take it over. */
		if (idem_query_exec(&q_claim_takeover, nsp, values, nulls, false, 0) == 1)
		{
			idem_stats_count(scope, IDEM_STAT_CLAIMED);
			idem_stats_count(scope, IDEM_STAT_TAKEOVER);
			return true;
		}
		/* Somebody else changed it first; look again. */
	}
}

/* The body of both idem_claim variants. */
static bool
claim_internal(FunctionCallInfo fcinfo, text *scope, text *key,
			   int ttl_argno, int fp_argno)
{
	const char *fname = "idem_claim";
	Oid			nsp = idem_extension_schema(fcinfo);
	TimestampTz now;
	TimestampTz expires;
	bytea	   *fp;
	bool		claimed;

	idem_check_writable(fname);

	now = GetCurrentTimestamp();
	expires = idem_expiry(fcinfo, ttl_argno, now, fname);
	fp = idem_fingerprint_digest(fcinfo, fp_argno);

	/* Most claims are decided without SPI. */
	switch (idem_claim_direct(nsp, scope, key, now, expires, fp, fname))
	{
		case 1:
			return true;
		case 0:
			return false;
	}

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	claimed = idem_claim_one(nsp, scope, key, now, expires, fp, fname);
	SPI_finish();
	return claimed;
}

/*
 * idem_claim(scope text, key text, ttl interval DEFAULT NULL,
 *            fingerprint text DEFAULT NULL) RETURNS boolean
 *
 * True when the calling transaction now owns (scope, key); false for a
 * duplicate.  Fails with 22004 (NULL scope or key), 22023 (empty key,
 * ttl not positive), 22001 (key or scope too long), 22008 (ttl overflows
 * the timestamp range), 25006 (read-only transaction), ID001 (live key
 * claimed with a different fingerprint), 40001 (REPEATABLE READ or
 * SERIALIZABLE and a conflicting record committed after the snapshot),
 * 55P03/57014 (lock_timeout/statement_timeout while waiting).
 */
Datum
idem_claim(PG_FUNCTION_ARGS)
{
	text	   *scope = idem_arg_scope(fcinfo, 0, "idem_claim");
	text	   *key = idem_arg_key(fcinfo, 1, "idem_claim");

	PG_RETURN_BOOL(claim_internal(fcinfo, scope, key, 2, 3));
}

/*
 * idem_claim(key text) RETURNS boolean
 *
 * idem_claim('', key): the default scope, default ttl, no fingerprint.
 * Fails as idem_claim above.
 */
Datum
idem_claim_default_scope(PG_FUNCTION_ARGS)
{
	text	   *key = idem_arg_key(fcinfo, 0, "idem_claim");
	text	   *scope = cstring_to_text("");

	PG_RETURN_BOOL(claim_internal(fcinfo, scope, key, -1, -1));
}

/*
 * idem_complete(scope text, key text, result jsonb) RETURNS void
 *
 * Marks a claimed record completed and stores result (NULL allowed) for
 * replay.  Fails with 22004/22023/22001 as idem_claim, 25006 (read-only),
 * ID002 (no live record: absent, expired, or claimed by a transaction
 * that has not committed), ID005 (the record is not in status 'claimed':
 * already completed, failed, or in progress under a lease).
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

	idem_check_writable(fname);
	now = GetCurrentTimestamp();

	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(key);
	if (PG_ARGISNULL(2))
	{
		values[2] = (Datum) 0;
		nulls[2] = 'n';
	}
	else
		values[2] = PointerGetDatum(PG_GETARG_JSONB_P(2));
	values[3] = TimestampTzGetDatum(now);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");

	if (idem_query_exec(&q_complete, nsp, values, nulls, false, 0) == 0)
	{
		Datum		svalues[3] = {values[0], values[1], values[3]};
		bool		isnull;

		if (idem_query_exec(&q_status, nsp, svalues, NULL, false, 1) == 0 ||
			!DatumGetBool(spi_col(0, 2, &isnull)))
			ereport(ERROR,
					(errcode(ERRCODE_IDEM_NO_RECORD),
					 errmsg("%s: no live idempotency record", fname),
					 errdetail("Key \"%s\" in scope \"%s\" has no record, or its record expired.",
							   text_to_cstring(key), text_to_cstring(scope)),
					 errhint("Call idem_claim() first, in the same transaction.")));
		ereport(ERROR,
				(errcode(ERRCODE_IDEM_WRONG_STATUS),
				 errmsg("%s: idempotency record is not claimed", fname),
				 errdetail("Key \"%s\" in scope \"%s\" has status \"%s\".",
						   text_to_cstring(key), text_to_cstring(scope),
						   TextDatumGetCString(spi_col(0, 1, &isnull))),
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

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");

	if (idem_query_exec(&q_lookup, nsp, values, NULL, true, 1) == 1)
	{
		result = spi_col(0, 1, &isnull);
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
	bool		isnull;

	idem_check_writable(fname);

	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(key);
	values[2] = TimestampTzGetDatum(GetCurrentTimestamp());

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");

	if (idem_query_exec(&q_release, nsp, values, NULL, false, 0) == 1)
		removed = DatumGetBool(spi_col(0, 1, &isnull));
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
 * 22004 (NULL batch_size), 22023 (batch_size < 1), 25006 (read-only).
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

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	n = idem_query_exec(idem_records_citus(nsp) ? &q_purge_citus : &q_purge,
						nsp, values, NULL, false, 0);
	idem_stats_count_rows(IDEM_STAT_PURGED);
	SPI_finish();

	PG_RETURN_INT64((int64) n);
}
