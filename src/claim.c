/*-------------------------------------------------------------------------
 *
 * claim.c
 *	  The one owner of "decide one key": idem_claim, and the decision that
 *	  idem_claim_many (batch.c) and idem_begin (lease_begin.c) share with
 *	  it.  Callers differ only in their statements (an IdemClaimPlan) and
 *	  in how they map the outcome (IdemClaimOutcome, claim.h).
 *
 *	  Order: first the fast path (claim_direct.c's speculative insertion,
 *	  verdict by claim_verdict); when it declines or finds a record to take
 *	  over, the SQL path (idem_claim_spi): INSERT ... ON CONFLICT DO
 *	  NOTHING, then read the record; a live one is a duplicate (ID001 for
 *	  another fingerprint); an expired, retryable or abandoned one is taken
 *	  over by an UPDATE whose WHERE re-checks IDEM_CLAIMABLE_SQL on the
 *	  newest row version (EvalPlanQual), so two takers cannot both win.
 *	  Bounded: IDEM_MAX_TAKEOVER_ROUNDS takeovers that change no row give
 *	  up (idem_takeover_stuck); an invisible record is retried
 *	  CLAIM_MAX_INVISIBLE_RETRIES times, then 42501.  The verdict, duplicate
 *	  logging and a single key's statistics are counted here only.
 *
 *	  Atomicity: every statement runs in the caller's transaction (SPI or
 *	  the executor), so a claim commits or rolls back with the business
 *	  writes around it; no subtransaction is started.
 *
 *	  Locking and visibility: the primary key of idem_records decides.  A
 *	  key held by another transaction's uncommitted insert makes the INSERT
 *	  (or the fast path's probe) wait for it under lock_timeout and
 *	  statement_timeout.  A conflict is found before any heap tuple is
 *	  written: a duplicate leaves no dead tuple, no xid, no WAL.  After a
 *	  conflict the row is read with a fresh snapshot (READ COMMITTED) or
 *	  the transaction's (REPEATABLE READ, SERIALIZABLE: the INSERT itself
 *	  raises 40001 for a row committed after the snapshot).
 *
 *	  Time: "now" is the wall clock at the call (GetCurrentTimestamp), not
 *	  the transaction start.  Memory: arguments and results in the caller's
 *	  context; SPI's per-call memory goes at the caller's SPI_finish.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/rls.h"
#include "utils/timestamp.h"

#include "idempotency.h"
#include "claim.h"
#include "spi_read.h"

PG_FUNCTION_INFO_V1(idem_claim);
PG_FUNCTION_INFO_V1(idem_claim_default_scope);

/* The F_at twin of idem_claim (IDEM_SHARD_TWIN, idempotency.h). */
IDEM_SHARD_TWIN(idem_claim);

/* idempotency.log_duplicates */
static bool log_duplicates = false;

static bool claim_internal(FunctionCallInfo fcinfo, text *scope, text *key,
						   int ttl_argno, int fp_argno);
static bool claim_verdict(IdemRecordState *rec, text *scope, text *key,
						  TimestampTz now, bytea *fp, const char *fname,
						  const char *verb, bool log_in_progress);

/* How often a conflicting but invisible row is retried before giving up. */
#define CLAIM_MAX_INVISIBLE_RETRIES 10

/*
 * idem_claim's statements (claim_plan, for idem_claim_spi).  All three are
 * IDEM_REWRITTEN_PER_SHARD: when idem_records has a shard key, the text
 * that runs is not this one but idem_shard_rewrite's (shard.c; query.c
 * swaps it in at prepare time), which adds the F_at call's shard key as
 * one more parameter.
 */
static IdemQuery q_claim_insert = {
	"INSERT INTO @extschema@.idem_records AS r"
	" (scope, key, status, fingerprint, created_at, updated_at, expires_at)"
	" VALUES ($1, $2, 'claimed', $3, $4, $4, $5)"
	" ON CONFLICT (scope, key) DO NOTHING",
	5, {TEXTOID, TEXTOID, BYTEAOID, TIMESTAMPTZOID, TIMESTAMPTZOID},
	IDEM_REWRITTEN_PER_SHARD
};

static IdemQuery q_claim_read = {
	"SELECT r.status, r.fingerprint, r.created_at, r.expires_at, r.locked_until"
	" FROM @extschema@.idem_records r"
	" WHERE r.scope OPERATOR(pg_catalog.=) $1 AND r.key OPERATOR(pg_catalog.=) $2",
	2, {TEXTOID, TEXTOID},
	IDEM_REWRITTEN_PER_SHARD
};

/*
 * The takeover of idem_claim.  A lease taken over after its mark
 * (effect_started_at) leaves its attempt in effect_unknown_attempt, as
 * idem_begin's takeover does (lease_begin.c); the claim holds no lease, so
 * the mark and the owner session go.  CLAIM_TAKEOVER_CORE(set, returning)
 * with both empty is the statement of a catalog not yet updated to 0.6.0.
 */
#define CLAIM_TAKEOVER_CORE(set, returning) \
	"UPDATE @extschema@.idem_records r" \
	" SET status = 'claimed', fingerprint = $3, result = NULL," \
	"     created_at = $4, updated_at = $4, expires_at = $5," \
	"     locked_until = NULL, token = NULL," \
	"     attempts = CASE WHEN r.expires_at OPERATOR(pg_catalog.<=) $4" \
	"                THEN 0 ELSE r.attempts END" \
	set \
	" WHERE r.scope OPERATOR(pg_catalog.=) $1 AND r.key OPERATOR(pg_catalog.=) $2" \
	" AND " IDEM_CLAIMABLE_SQL \
	returning

static IdemQuery q_claim_takeover = {
	CLAIM_TAKEOVER_CORE(
		"," IDEM_UNKNOWN_ATTEMPT_SET_AT("$4") ","
		" effect_started_at = NULL, owner_pid = NULL, owner_start = NULL",
		" RETURNING r.effect_unknown_attempt IS NOT NULL"),
	5, {TEXTOID, TEXTOID, BYTEAOID, TIMESTAMPTZOID, TIMESTAMPTZOID},
	IDEM_REWRITTEN_PER_SHARD
};

static IdemQuery q_claim_takeover_legacy = {
	CLAIM_TAKEOVER_CORE("", ""),
	5, {TEXTOID, TEXTOID, BYTEAOID, TIMESTAMPTZOID, TIMESTAMPTZOID},
	IDEM_REWRITTEN_PER_SHARD
};

/* idem_claim's takeover for the catalog installed (lease_await.c). */
static IdemQuery *
claim_takeover_for(Oid nsp, Datum *values)
{
	return idem_records_current(nsp) ? &q_claim_takeover : &q_claim_takeover_legacy;
}

static const IdemClaimPlan claim_plan = {
	&q_claim_insert, &q_claim_read, &q_claim_takeover, claim_takeover_for, "claim", 1, true
};

/* Define idempotency.log_duplicates (module.c's _PG_init). */
void
idem_claim_init(void)
{
	DefineCustomBoolVariable("idempotency.log_duplicates",
							 "Logs one line for each duplicate claim of an idempotency key.",
							 NULL,
							 &log_duplicates,
							 false,
							 PGC_SUSET,
							 0,
							 NULL,
							 NULL,
							 NULL);
}

/* ------------------------------------------------------------------------
 * SQL-callable functions
 * ------------------------------------------------------------------------
 */

/*
 * idem_claim(scope text, key text, ttl interval DEFAULT NULL,
 *            fingerprint text DEFAULT NULL) RETURNS boolean
 *
 * True when the calling transaction now owns (scope, key); false for a
 * duplicate.  Fails with 22004 (NULL scope or key), 22023 (empty key,
 * ttl not positive), 22001 (key or scope too long), 22008 (ttl overflows
 * the timestamp range), 25006 (read-only transaction), ID001 (live key
 * claimed with a different fingerprint), 40001 (REPEATABLE READ or
 * SERIALIZABLE and a conflicting record committed after the snapshot, or
 * a takeover that makes no progress), 42501 (a record row-level security
 * hides or does not let the role update), 55000 (a record of an
 * idem_records whose columns a DBA changed: spi_read.c), 55P03/57014
 * (lock_timeout/statement_timeout while waiting), 25P01 (the claim would
 * commit on its own and idempotency.autocommit_claims is error; a WARNING
 * under warn), 22023 also for a ttl written as a bare number ('7').
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
 * The body of both idem_claim variants: the fast path (idem_claim_fast),
 * and the SQL path (idem_claim_spi_plain) when it leaves the claim
 * undecided.
 */
static bool
claim_internal(FunctionCallInfo fcinfo, text *scope, text *key,
			   int ttl_argno, int fp_argno)
{
	const char *fname = "idem_claim";
	Oid			nsp = idem_extension_schema(fcinfo);
	TimestampTz now;
	TimestampTz expires;
	bytea	   *fp;
	IdemClaimOutcome outcome;

	idem_check_writable(fname);
	idem_check_autocommit_claim(fcinfo, fname);

	now = GetCurrentTimestamp();
	expires = idem_expiry(fcinfo, ttl_argno, now, fname);
	fp = idem_fingerprint_digest(fcinfo, fp_argno);

	/* Most claims are decided without SPI. */
	outcome = idem_claim_fast(nsp, scope, key, now, expires, fp, fname);
	if (outcome == IDEM_CLAIM_UNDECIDED)
	{
		idem_spi_connect();
		outcome = idem_claim_spi_plain(nsp, scope, key, now, expires, fp, fname);
		SPI_finish();
	}
	return outcome == IDEM_CLAIM_ACQUIRED;
}

/* ------------------------------------------------------------------------
 * The fast path (claim_direct.c): one key without SPI
 * ------------------------------------------------------------------------
 */

/* What the fast path found, decided: the outcome of idem_claim_fast*. */
static IdemClaimOutcome
fast_outcome(IdemDirectResult result, IdemRecordState *rec, text *scope,
			 text *key, TimestampTz now, bytea *fp, const char *fname)
{
	if (result == IDEM_DIRECT_INSERTED)
	{
		idem_stats_count(scope, IDEM_STAT_CLAIMED);
		return IDEM_CLAIM_ACQUIRED;
	}
	/* A record to take over is left to the SQL path's UPDATE. */
	return claim_verdict(rec, scope, key, now, fp, fname, "claim", true) ?
		IDEM_CLAIM_UNDECIDED : IDEM_CLAIM_DUPLICATE;
}

/*
 * Claim one key on the fast path (claim_direct.c), without SPI, opening and
 * closing it for this key: IDEM_CLAIM_ACQUIRED when this transaction now
 * owns the key, IDEM_CLAIM_DUPLICATE for a duplicate (counted and
 * logged), IDEM_CLAIM_UNDECIDED when the fast path does not apply or the
 * record must be taken over: the caller then takes the SQL path
 * (idem_claim_spi_plain).  Errors as idem_claim.
 */
IdemClaimOutcome
idem_claim_fast(Oid nsp, text *scope, text *key, TimestampTz now,
				TimestampTz expires, bytea *fp, const char *fname)
{
	IdemDirect *d = idem_direct_open(nsp, key);
	IdemRecordState rec;
	IdemDirectResult result;

	if (d == NULL)
		return IDEM_CLAIM_UNDECIDED;
	result = idem_direct_insert(d, scope, key, now, expires, fp, &rec);
	idem_direct_close(d);
	return fast_outcome(result, &rec, scope, key, now, fp, fname);
}

/*
 * idem_claim_fast through a fast path d that the caller opened for many
 * keys (idem_claim_many) and closes, also after an error here: the
 * transaction's abort releases it.
 */
IdemClaimOutcome
idem_claim_fast_through(IdemDirect *d, text *scope, text *key, TimestampTz now,
						TimestampTz expires, bytea *fp, const char *fname)
{
	IdemRecordState rec;
	IdemDirectResult result;

	result = idem_direct_insert(d, scope, key, now, expires, fp, &rec);
	return fast_outcome(result, &rec, scope, key, now, fp, fname);
}

/* ------------------------------------------------------------------------
 * The SQL path: statements through SPI
 * ------------------------------------------------------------------------
 */

/*
 * The parameters every IdemClaimPlan statement shares: $1 scope, $2 key,
 * $3 the fingerprint digest (NULL: none), $4 now, $5 the expiry of a new
 * record.  nulls must have room for them and be ' ' from $3 on.
 */
void
idem_claim_params(Datum *values, char *nulls, text *scope, text *key,
				  bytea *fp, TimestampTz now, TimestampTz expires)
{
	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(key);
	values[2] = PointerGetDatum(fp);
	if (fp == NULL)
		nulls[2] = 'n';
	values[3] = TimestampTzGetDatum(now);
	values[4] = TimestampTzGetDatum(expires);
}

/*
 * Decide (scope, key) through SPI with the statements of plan: insert,
 * else read, else take over, until one decides.  values and nulls are the
 * statements' parameters (idem_claim_params's five, then the plan's
 * own); fp is the digest or NULL.  The caller has
 * checked the arguments and that the transaction is writable, and is
 * connected to SPI.
 *
 * IDEM_CLAIM_ACQUIRED: the record was inserted or taken over (counted);
 * SPI_tuptable holds what that statement returned.  IDEM_CLAIM_DUPLICATE:
 * a live record answers the call (counted and logged); *rec is its state
 * and SPI_tuptable the read's row, whose further columns the caller may
 * read.  Errors: ID001, 42501 for a record row-level security hides,
 * idem_takeover_stuck's, 55000 for a record the read cannot take as the
 * install script shapes it (a column retyped, or NULL where the column
 * was NOT NULL: spi_read.c), and those of the statements.
 */
IdemClaimOutcome
idem_claim_spi(const IdemClaimPlan *plan, Oid nsp, text *scope, text *key,
			   Datum *values, const char *nulls, TimestampTz now, bytea *fp,
			   const char *fname, IdemRecordState *rec)
{
	int			invisible = 0;
	int			rounds = 0;

	for (;;)
	{
		bool		isnull;
		Datum		d;
		IdemQuery  *takeover;

		CHECK_FOR_INTERRUPTS();
		if (++rounds > IDEM_MAX_TAKEOVER_ROUNDS)
			idem_takeover_stuck(nsp, fname, scope, key);

		if (idem_query_exec(plan->insert, nsp, values, nulls, false, 0) == 1)
		{
			idem_stats_count(scope, IDEM_STAT_CLAIMED);
			return IDEM_CLAIM_ACQUIRED;
		}
		SPI_freetuptable(SPI_tuptable);

		/* The key exists (or existed a moment ago): read it. */
		if (idem_query_exec(plan->read, nsp, values, NULL, false, 1) == 0)
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

		rec->status = idem_spi_read_cstring(SPI_tuptable, 0, 1, "status");
		d = idem_spi_read(SPI_tuptable, 0, 2, BYTEAOID, "fingerprint", &isnull);
		rec->fingerprint = isnull ? NULL : DatumGetByteaPP(d);
		rec->created_at = DatumGetTimestampTz(idem_spi_read_required(SPI_tuptable, 0, 3,
																	 TIMESTAMPTZOID, "created_at"));
		rec->expires_at = DatumGetTimestampTz(idem_spi_read_required(SPI_tuptable, 0, 4,
																	 TIMESTAMPTZOID, "expires_at"));
		d = idem_spi_read(SPI_tuptable, 0, 5, TIMESTAMPTZOID, "locked_until", &isnull);
		rec->locked_until = isnull ? 0 : DatumGetTimestampTz(d);
		rec->has_lock = !isnull;

		if (!claim_verdict(rec, scope, key, now, fp, fname, plan->verb,
						   plan->log_in_progress))
			return IDEM_CLAIM_DUPLICATE;
		SPI_freetuptable(SPI_tuptable);

		/* Expired, retryable or abandoned: take it over. */
		takeover = plan->takeover_for ? plan->takeover_for(nsp, values) : plan->takeover;
		if (idem_query_exec(takeover, nsp, values, nulls, false, 0) == 1)
		{
			bool		unknown = false;

			if (plan->unknown_col > 0 && SPI_tuptable != NULL)
				unknown = DatumGetBool(idem_spi_read_required(SPI_tuptable, 0, plan->unknown_col,
															  BOOLOID, "effect_unknown"));
			idem_stats_count(scope, IDEM_STAT_CLAIMED);
			idem_count_takeover(fname, scope, key, false, unknown);
			return IDEM_CLAIM_ACQUIRED;
		}
		/* Somebody else changed it first; look again. */
		SPI_freetuptable(SPI_tuptable);
	}
}

/*
 * Claim one (scope, key) for the current transaction through SPI, with
 * idem_claim's statements (claim_plan): the SQL path of idem_claim, shared
 * with idem_claim_many.  The caller has validated the arguments, checked
 * the transaction is writable and connected to SPI.  now and expires are
 * the call's clock and the new record's expiry; fp is the fingerprint
 * digest or NULL.  IDEM_CLAIM_ACQUIRED when this transaction now owns the
 * key, IDEM_CLAIM_DUPLICATE otherwise.  Errors as idem_claim_spi.
 */
IdemClaimOutcome
idem_claim_spi_plain(Oid nsp, text *scope, text *key, TimestampTz now,
					 TimestampTz expires, bytea *fp, const char *fname)
{
	Datum		values[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', ' '};
	IdemRecordState rec;

	idem_claim_params(values, nulls, scope, key, fp, now, expires);

	return idem_claim_spi(&claim_plan, nsp, scope, key, values, nulls, now,
						  fp, fname, &rec);
}

/* ------------------------------------------------------------------------
 * The decision on an existing record, and its errors and log line
 * ------------------------------------------------------------------------
 */

/*
 * Decide a claim against an existing record: returns true when the record
 * can be taken over (expired, a retryable failure, or a lease that ran
 * out), false when the claim is a duplicate (then counted, and logged
 * unless it is a live lease and not log_in_progress).  Raises ID001 for a
 * live record whose stored fingerprint differs from fp.  A NULL
 * locked_until holds an in_progress record until it expires.
 */
static bool
claim_verdict(IdemRecordState *rec, text *scope, text *key, TimestampTz now,
			  bytea *fp, const char *fname, const char *verb, bool log_in_progress)
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
		if (log_in_progress ||
			strcmp(rec->status, IDEM_STATUS_IN_PROGRESS) != 0)
			idem_log_duplicate(verb, scope, key, rec->created_at,
							   rec->status);
		idem_stats_count(scope, idem_duplicate_stat(rec->status));
		return false;
	}
	return true;
}

/*
 * With idempotency.log_duplicates, log that a call ("claim", "begin") met
 * the live record of (scope, key).
 */
void
idem_log_duplicate(const char *verb, text *scope, text *key,
				   TimestampTz first_claimed, const char *status)
{
	if (!log_duplicates)
		return;
	ereport(LOG,
			(errmsg("idempotency: duplicate %s of key \"%s\" in scope \"%s\", first claimed at %s, status %s",
					verb, text_to_cstring(key), text_to_cstring(scope),
					idem_timestamptz_cstring(first_claimed), status),
			 errhidestmt(true)));
}

/*
 * Count a takeover of (scope, key) by fname, because its bound owner's
 * session was gone (owner_gone) or by time, and whether the new owner is
 * told the outcome of an earlier attempt is unknown; with
 * idempotency.log_duplicates, log the first two kinds.
 */
void
idem_count_takeover(const char *fname, text *scope, text *key, bool owner_gone,
					bool unknown)
{
	idem_stats_count(scope, IDEM_STAT_TAKEOVER);
	if (owner_gone)
		idem_stats_count(scope, IDEM_STAT_OWNER_GONE_TAKEOVER);
	if (unknown)
		idem_stats_count(scope, IDEM_STAT_UNKNOWN_TAKEOVER);
	if (!log_duplicates || !(owner_gone || unknown))
		return;
	ereport(LOG,
			(errmsg("idempotency: %s took over key \"%s\" in scope \"%s\"%s%s",
					fname, text_to_cstring(key), text_to_cstring(scope),
					owner_gone ? " from an owner session that is gone" : "",
					unknown ? "; the outside effect of an earlier attempt is unknown" : ""),
			 errhidestmt(true)));
}

/*
 * Raise the fingerprint-mismatch error (ID001) for a live record whose
 * stored digest differs from the one given.
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
 * transactions changing the record at every turn (40001, retry).
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
