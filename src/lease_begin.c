/*-------------------------------------------------------------------------
 *
 * lease_begin.c
 *	  idem_begin: start work on a key under a lease (the model of leases,
 *	  tokens, bound sessions and the unknown outcome is lease.c's header).
 *
 *	  idem_begin runs claim.c's decision (idem_claim_spi) with its own
 *	  statements and maps the outcome to 'acquired', 'in_progress',
 *	  'completed' or 'failed'.  Takeovers (expired record, retryable
 *	  failure, lease run out) are UPDATEs that re-check the takeover
 *	  condition on the newest row version, so of two racing workers exactly
 *	  one acquires.  A live lease bound to a session that is gone
 *	  (lease_await.c, idem_session_alive) is taken over by the same UPDATE,
 *	  whose WHERE then names that dead owner: a record that changed in
 *	  between is looked at again.
 *
 *	  On a catalog not yet updated to 0.6.0 (idem_records_current false:
 *	  the library was installed, ALTER EXTENSION UPDATE not yet run) the
 *	  legacy statements run: the ones 0.5.0 ran, with no owner and no mark.
 *
 *	  Memory: everything is in the caller's context or SPI's, which
 *	  SPI_finish releases; the result is copied out with SPI_datumTransfer.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "idempotency.h"
#include "citus.h"
#include "claim.h"
#include "spi_read.h"

PG_FUNCTION_INFO_V1(idem_begin);

/*
 * idem_begin's parameters: idem_claim_params's five ($1 scope, $2 key, $3
 * fingerprint digest, $4 now, $5 expiry), then $6 the lease's end, $7 the
 * lease, $8 and $9 the owner session of a bound lease (NULL: unbound),
 * $10 and $11 an owner session found gone (NULL: none), $12 the token on
 * Citus.
 */
#define BEGIN_NPARAMS 12
#define BEGIN_TYPES \
	TEXTOID, TEXTOID, BYTEAOID, TIMESTAMPTZOID, TIMESTAMPTZOID, \
	TIMESTAMPTZOID, INTERVALOID, INT4OID, TIMESTAMPTZOID, INT4OID, \
	TIMESTAMPTZOID

static IdemQuery q_begin_insert = {
	"INSERT INTO @extschema@.idem_records AS r"
	" (scope, key, status, fingerprint, created_at, updated_at, expires_at,"
	"  locked_until, token, attempts, lease, owner_pid, owner_start)"
	" VALUES ($1, $2, 'in_progress', $3, $4, $4, $5, $6,"
	"  pg_catalog.nextval('@extschema@.idem_token_seq'::pg_catalog.regclass), 1, $7,"
	"  $8, $9)"
	" ON CONFLICT (scope, key) DO NOTHING"
	" RETURNING r.token, r.attempts, false",
	9, {TEXTOID, TEXTOID, BYTEAOID, TIMESTAMPTZOID, TIMESTAMPTZOID,
	TIMESTAMPTZOID, INTERVALOID, INT4OID, TIMESTAMPTZOID},
	IDEM_REWRITTEN_PER_SHARD
};

static IdemQuery q_begin_read = {
	"SELECT r.status, r.fingerprint, r.created_at, r.expires_at,"
	"       r.locked_until, r.result, r.owner_pid, r.owner_start"
	" FROM @extschema@.idem_records r"
	" WHERE r.scope OPERATOR(pg_catalog.=) $1 AND r.key OPERATOR(pg_catalog.=) $2",
	2, {TEXTOID, TEXTOID},
	IDEM_REWRITTEN_PER_SHARD
};

/*
 * Take over an expired, retryable or abandoned record, or a live lease
 * whose owner session ($10, $11) is gone.  $4 is now; token is the SQL of
 * its new token.  An in-progress lease taken over after its mark
 * (effect_started_at) leaves its attempt in effect_unknown_attempt.
 * BEGIN_TAKEOVER_CORE is the statement of a catalog not yet updated to
 * 0.6.0, which has none of that (set and where empty).
 */
#define BEGIN_TAKEOVER_CORE(token, set, where, returning) \
	"UPDATE @extschema@.idem_records r" \
	" SET status = 'in_progress', locked_until = $6, lease = $7," \
	"     token = " token "," \
	"     updated_at = $4, result = NULL," \
	"     attempts = CASE WHEN r.expires_at OPERATOR(pg_catalog.<=) $4 THEN 1" \
	"                ELSE r.attempts OPERATOR(pg_catalog.+) 1 END," \
	"     created_at = CASE WHEN r.expires_at OPERATOR(pg_catalog.<=) $4 THEN $4" \
	"                  ELSE r.created_at END," \
	"     expires_at = CASE WHEN r.expires_at OPERATOR(pg_catalog.<=) $4 THEN $5" \
	"                  ELSE r.expires_at END," \
	"     fingerprint = CASE WHEN r.expires_at OPERATOR(pg_catalog.<=) $4 THEN $3" \
	"                   ELSE COALESCE(r.fingerprint, $3) END" \
	set \
	" WHERE r.scope OPERATOR(pg_catalog.=) $1 AND r.key OPERATOR(pg_catalog.=) $2" \
	" AND (" IDEM_CLAIMABLE_SQL where ")" \
	" RETURNING " returning

#define BEGIN_TAKEOVER_SQL(token) \
	BEGIN_TAKEOVER_CORE(token, \
		"," \
		IDEM_UNKNOWN_ATTEMPT_SET_AT("$4") "," \
		" effect_started_at = NULL, owner_pid = $8, owner_start = $9", \
		" OR (r.status OPERATOR(pg_catalog.=) 'in_progress'" \
		"     AND r.owner_pid OPERATOR(pg_catalog.=) $10" \
		"     AND r.owner_start OPERATOR(pg_catalog.=) $11)", \
		"r.token, r.attempts, r.effect_unknown_attempt IS NOT NULL")

#define BEGIN_TAKEOVER_LEGACY_SQL(token) \
	BEGIN_TAKEOVER_CORE(token, "", "", "r.token, r.attempts, false")

#define BEGIN_NEXTVAL "pg_catalog.nextval('@extschema@.idem_token_seq'::pg_catalog.regclass)"

static IdemQuery q_begin_takeover = {
	BEGIN_TAKEOVER_SQL(BEGIN_NEXTVAL), 11, {BEGIN_TYPES}, IDEM_REWRITTEN_PER_SHARD
};

/*
 * The same on Citus (idem_records distributed), which refuses a volatile
 * function in a distributed UPDATE: the token is drawn from idem_token_seq
 * on this node first and passed as $12 (a takeover that then finds nothing
 * to take leaves a gap, as an INSERT that meets a conflict does).
 */
static IdemQuery q_begin_takeover_citus = {
	BEGIN_TAKEOVER_SQL("$12"), 12, {BEGIN_TYPES, INT8OID}, IDEM_REWRITTEN_PER_SHARD
};

/*
 * idem_begin's statements on a catalog not yet updated to 0.6.0
 * (idem_records_current false: between installing this library and ALTER
 * EXTENSION UPDATE), with the same parameters, $8 to $11 unused: no
 * owner, no mark.
 */
static IdemQuery q_begin_insert_legacy = {
	"INSERT INTO @extschema@.idem_records AS r"
	" (scope, key, status, fingerprint, created_at, updated_at, expires_at,"
	"  locked_until, token, attempts, lease)"
	" VALUES ($1, $2, 'in_progress', $3, $4, $4, $5, $6,"
	"  " BEGIN_NEXTVAL ", 1, $7)"
	" ON CONFLICT (scope, key) DO NOTHING"
	" RETURNING r.token, r.attempts, false",
	7, {TEXTOID, TEXTOID, BYTEAOID, TIMESTAMPTZOID, TIMESTAMPTZOID,
	TIMESTAMPTZOID, INTERVALOID},
	IDEM_REWRITTEN_PER_SHARD
};

static IdemQuery q_begin_read_legacy = {
	"SELECT r.status, r.fingerprint, r.created_at, r.expires_at,"
	"       r.locked_until, r.result"
	" FROM @extschema@.idem_records r"
	" WHERE r.scope OPERATOR(pg_catalog.=) $1 AND r.key OPERATOR(pg_catalog.=) $2",
	2, {TEXTOID, TEXTOID},
	IDEM_REWRITTEN_PER_SHARD
};

static IdemQuery q_begin_takeover_legacy = {
	BEGIN_TAKEOVER_LEGACY_SQL(BEGIN_NEXTVAL), 7,
	{TEXTOID, TEXTOID, BYTEAOID, TIMESTAMPTZOID, TIMESTAMPTZOID,
	TIMESTAMPTZOID, INTERVALOID},
	IDEM_REWRITTEN_PER_SHARD
};

static IdemQuery q_begin_takeover_legacy_citus = {
	BEGIN_TAKEOVER_LEGACY_SQL("$12"), 12, {BEGIN_TYPES, INT8OID}, IDEM_REWRITTEN_PER_SHARD
};

/*
 * idem_begin's takeover statement for this round: on Citus, the one whose
 * token was drawn here first, as $12 (values[11]).
 */
static IdemQuery *
begin_takeover_for(Oid nsp, Datum *values)
{
	if (!idem_records_citus(nsp))
		return &q_begin_takeover;
	values[11] = Int64GetDatum(nextval_internal(get_relname_relid("idem_token_seq", nsp),
												true));
	return &q_begin_takeover_citus;
}

static IdemQuery *
begin_takeover_legacy_for(Oid nsp, Datum *values)
{
	if (!idem_records_citus(nsp))
		return &q_begin_takeover_legacy;
	values[11] = Int64GetDatum(nextval_internal(get_relname_relid("idem_token_seq", nsp),
												true));
	return &q_begin_takeover_legacy_citus;
}

/* idem_begin's statements for idem_claim_spi (claim.c), and the legacy ones. */
static const IdemClaimPlan begin_plan = {
	&q_begin_insert, &q_begin_read, &q_begin_takeover, begin_takeover_for, "begin", 3, false
};

static const IdemClaimPlan begin_plan_legacy = {
	&q_begin_insert_legacy, &q_begin_read_legacy, &q_begin_takeover_legacy,
	begin_takeover_legacy_for, "begin", 0, false
};

/* What begin_take_from_gone did. */
typedef enum BeginGone
{
	BEGIN_OWNER_HERE,			/* unbound, or its owner session lives */
	BEGIN_GONE_TAKEN,			/* the owner was gone: taken over */
	BEGIN_GONE_RACED			/* the owner was gone, but the record changed */
} BeginGone;

/*
 * After idem_claim_spi found a live lease in progress (its read's row in
 * SPI_tuptable): when the lease is bound to a session that is gone, take
 * it over with values' parameters, naming that owner as $10 and $11 so
 * that the UPDATE re-checks it on the newest row version.  Counted (and
 * logged) when taken; SPI_tuptable then holds the takeover's row.
 */
static BeginGone
begin_take_from_gone(Oid nsp, text *scope, text *key, Datum *values, char *nulls)
{
	bool		pid_null;
	bool		start_null;
	Datum		pid = idem_spi_read(SPI_tuptable, 0, 7, INT4OID, "owner_pid", &pid_null);
	Datum		start = idem_spi_read(SPI_tuptable, 0, 8, TIMESTAMPTZOID, "owner_start",
									  &start_null);
	IdemQuery  *takeover;
	bool		taken;

	if (pid_null || start_null ||
		idem_session_alive(DatumGetInt32(pid), DatumGetTimestampTz(start)))
		return BEGIN_OWNER_HERE;

	SPI_freetuptable(SPI_tuptable);
	values[9] = pid;
	values[10] = start;
	nulls[9] = nulls[10] = ' ';
	takeover = begin_takeover_for(nsp, values);
	taken = idem_query_exec(takeover, nsp, values, nulls, false, 0) == 1;
	nulls[9] = nulls[10] = 'n';
	if (!taken)
	{
		SPI_freetuptable(SPI_tuptable);
		return BEGIN_GONE_RACED;
	}
	/*
	 * Not an in-progress conflict after all: take back the one that
	 * idem_claim_spi counted for the live lease (pending in this backend
	 * until the transaction ends, so the two cancel out there).
	 */
	idem_stats_add(scope, IDEM_STAT_IN_PROGRESS_CONFLICT, -1);
	idem_stats_count(scope, IDEM_STAT_CLAIMED);
	idem_count_takeover("idem_begin", scope, key, true,
						DatumGetBool(idem_spi_read_required(SPI_tuptable, 0, 3, BOOLOID,
															"effect_unknown")));
	return BEGIN_GONE_TAKEN;
}

/*
 * Decide idem_begin's (scope, key) with values' parameters: 'acquired'
 * with out[1], out[3] and out[4] from the acquiring statement's row
 * (token, attempt, effect_unknown), else the duplicate's outcome, with
 * its result in out[2] (copied out of SPI).  Inside the SPI connection.
 */
static const char *
begin_decide(Oid nsp, text *scope, text *key, Datum *values, char *nulls,
			 TimestampTz now, bytea *fp, Datum *out, bool *outnull)
{
	const char *fname = "idem_begin";
	IdemRecordState rec;
	BeginGone	gone = BEGIN_OWNER_HERE;
	int			rounds = 0;
	bool		current = idem_records_current(nsp);

	for (;;)
	{
		if (++rounds > IDEM_MAX_TAKEOVER_ROUNDS)
			idem_takeover_stuck(nsp, fname, scope, key);
		if (idem_claim_spi(current ? &begin_plan : &begin_plan_legacy, nsp, scope,
						   key, values, nulls, now, fp, fname,
						   &rec) == IDEM_CLAIM_ACQUIRED)
			break;
		if (strcmp(rec.status, IDEM_STATUS_IN_PROGRESS) != 0)
		{
			/* failed, or completed (or claimed by idem_claim): replay the result */
			out[2] = idem_spi_read(SPI_tuptable, 0, 6, JSONBOID, "result", &outnull[2]);
			if (!outnull[2])
				out[2] = SPI_datumTransfer(out[2], false, -1);
			return strcmp(rec.status, IDEM_STATUS_FAILED) == 0 ? "failed" : "completed";
		}
		gone = current ? begin_take_from_gone(nsp, scope, key, values, nulls) :
			BEGIN_OWNER_HERE;
		if (gone == BEGIN_OWNER_HERE)
		{
			idem_log_duplicate("begin", scope, key, rec.created_at, rec.status);
			return "in_progress";
		}
		if (gone == BEGIN_GONE_TAKEN)
			break;
		/* Another worker changed the record first: look again. */
	}

	out[1] = idem_spi_read(SPI_tuptable, 0, 1, INT8OID, "token", &outnull[1]);
	out[3] = idem_spi_read(SPI_tuptable, 0, 2, INT4OID, "attempts", &outnull[3]);
	out[4] = idem_spi_read(SPI_tuptable, 0, 3, BOOLOID, "effect_unknown_attempt",
						   &outnull[4]);
	return "acquired";
}

/*
 * idem_begin(scope text, key text, lease interval DEFAULT '5 minutes',
 *            ttl interval DEFAULT NULL, fingerprint text DEFAULT NULL,
 *            bind_to_session boolean DEFAULT false)
 *   RETURNS TABLE (outcome text, token bigint, result jsonb,
 *                  attempt integer, effect_unknown boolean)
 *
 * Start work on (scope, key) under a lease.  One row: 'acquired' with a
 * new token, the attempt's number and whether an earlier attempt was
 * taken over after marking its outside effect started (effect_unknown);
 * 'in_progress' (someone else holds a live lease); 'completed' with the
 * stored result; 'failed' with the stored error.  bind_to_session binds
 * the lease to this session: when the session ends, the next idem_begin
 * takes the lease over without waiting for its end.  Meant to be
 * committed on its own.  Fails with 22004/22023/22001 (bad scope, key,
 * lease, ttl or bind_to_session, as idem_claim), 25006 (read-only),
 * ID001 (fingerprint mismatch), 40001 (REPEATABLE READ/SERIALIZABLE
 * conflict, or a takeover that makes no progress), 42501 (a record
 * row-level security hides or does not let the role update), 55000 (a
 * record of an idem_records whose columns a DBA changed), as idem_claim
 * (claim.c's idem_claim_spi).
 */
Datum
idem_begin(PG_FUNCTION_ARGS)
{
	const char *fname = "idem_begin";
	text	   *scope = idem_arg_scope(fcinfo, 0, fname);
	text	   *key = idem_arg_key(fcinfo, 1, fname);
	Oid			nsp = idem_extension_schema(fcinfo);
	TupleDesc	tupdesc;
	TimestampTz now;
	TimestampTz expires;
	TimestampTz locked_until;
	Interval   *lease;
	bytea	   *fp;
	Datum		values[BEGIN_NPARAMS];
	char		nulls[BEGIN_NPARAMS];
	const char *outcome;
	Datum		out[5] = {0};
	bool		outnull[5] = {false, true, true, true, true};

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s: lease must not be null", fname)));
	lease = PG_GETARG_INTERVAL_P(2);
	if (PG_NARGS() > 5 && PG_ARGISNULL(5))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s: bind_to_session must not be null", fname)));

	idem_check_writable(fname);
	idem_refuse_citus_worker_tokens(idem_records_citus(nsp), fname);

	now = GetCurrentTimestamp();
	locked_until = idem_add_interval(now, lease, "lease", fname);
	expires = idem_expiry(fcinfo, 3, now, fname);
	fp = idem_fingerprint_digest(fcinfo, 4);

	memset(nulls, 'n', sizeof(nulls));
	memset(nulls, ' ', 9);
	/* $12: the token a Citus takeover draws first (begin_takeover_for) */
	nulls[11] = ' ';
	idem_claim_params(values, nulls, scope, key, fp, now, expires);
	values[5] = TimestampTzGetDatum(locked_until);
	values[6] = IntervalPGetDatum(lease);
	if (PG_NARGS() > 5 && PG_GETARG_BOOL(5))
	{
		values[7] = Int32GetDatum(MyProcPid);
		values[8] = TimestampTzGetDatum(MyStartTimestamp);
	}
	else
		nulls[7] = nulls[8] = 'n';

	idem_spi_connect();
	outcome = begin_decide(nsp, scope, key, values, nulls, now, fp, out, outnull);
	SPI_finish();

	out[0] = CStringGetTextDatum(outcome);
	tupdesc = BlessTupleDesc(tupdesc);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, out, outnull)));
}

/* The F_at twin of idem_begin (IDEM_SHARD_TWIN, idempotency.h). */
IDEM_SHARD_TWIN(idem_begin);
