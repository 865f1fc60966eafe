/*-------------------------------------------------------------------------
 *
 * idempotency.c
 *	  Module load (_PG_init, which also lets stats.c, worker.c and query.c
 *	  set themselves up), four of the nine idempotency.* settings
 *	  (default_ttl, log_duplicates, max_attempts, direct_claim; stats.c
 *	  defines stats_max_scopes and worker.c the four purge_* settings), the
 *	  argument validation that every SQL-callable function of the extension
 *	  shares.
 *
 *	  Invariants:
 *	  - Validation happens before any SPI call or write, so bad input never
 *	    leaves a partial effect.  Lengths are counted in bytes of the
 *	    detoasted (uncompressed) value.
 *	  - Writing functions call idem_check_writable first: in a read-only
 *	    transaction (which includes every transaction on a hot standby) they
 *	    fail with SQLSTATE 25006 and a message naming the function.
 *	  - GUC state is per backend; nothing here touches shared memory, takes
 *	    a lock or reads a table (visibility does not arise).
 *	  - Memory: validated arguments and digests are in the caller's
 *	    context.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/timestamp.h"

#include "idempotency.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

/* idempotency.default_ttl, as text and as parsed by its check hook. */
static char *default_ttl_string = NULL;

typedef struct TtlSetting
{
	bool		infinite;
	Interval	ttl;
} TtlSetting;

static TtlSetting *default_ttl = NULL;

bool		idem_direct_claim_enabled = true;
bool		idem_log_duplicates = false;
int			idem_max_attempts = 0;

/*
 * Parse a TTL setting: a positive interval, or "infinity".  Never throws:
 * a bad value is reported through GUC_check_errdetail.
 */
static bool
check_default_ttl(char **newval, void **extra, GucSource source)
{
	TtlSetting *parsed;
	Interval	ttl;
	Interval	zero;

	parsed = (TtlSetting *) idem_guc_extra_alloc(sizeof(TtlSetting));
	if (parsed == NULL)
		return false;
	memset(parsed, 0, sizeof(TtlSetting));

	if (pg_strcasecmp(*newval, "infinity") == 0)
	{
		parsed->infinite = true;
		*extra = parsed;
		return true;
	}

	if (!idem_parse_interval(*newval, &ttl))
	{
		idem_guc_extra_free(parsed);
		GUC_check_errdetail("\"%s\" is not a valid interval.", *newval);
		GUC_check_errhint("Use an interval such as '7 days', or 'infinity'.");
		return false;
	}

	/*
	 * Positive as a whole, as idem_claim's ttl argument: '1 day -1 hour' is
	 * fine.  (Months count as 30 days here; idem_add_interval still checks
	 * each expiry it computes.)
	 */
	memset(&zero, 0, sizeof(zero));
	if (!DatumGetBool(DirectFunctionCall2(interval_gt,
										  IntervalPGetDatum(&ttl),
										  IntervalPGetDatum(&zero))))
	{
		idem_guc_extra_free(parsed);
		GUC_check_errdetail("The default TTL must be positive.");
		return false;
	}

	parsed->ttl = ttl;
	*extra = parsed;
	return true;
}

static void
assign_default_ttl(const char *newval, void *extra)
{
	default_ttl = (TtlSetting *) extra;
}

/* The forget functions of the caches (direct.c, shard.c, citus_local.c...). */
#define IDEM_MAX_RELCACHE_SUBSCRIBERS 8
static IdemRelcacheForget relcache_subscribers[IDEM_MAX_RELCACHE_SUBSCRIBERS];
static int	n_relcache_subscribers = 0;

static void
relcache_dispatch(Datum arg, Oid relid)
{
	for (int i = 0; i < n_relcache_subscribers; i++)
		relcache_subscribers[i] (relid);
}

/*
 * Have forget(relid) called at every relcache invalidation (relid
 * InvalidOid: all relations).  Idempotent; a cache calls it before it
 * first fills itself.
 */
void
idem_relcache_subscribe(IdemRelcacheForget forget)
{
	for (int i = 0; i < n_relcache_subscribers; i++)
		if (relcache_subscribers[i] == forget)
			return;
	if (n_relcache_subscribers == IDEM_MAX_RELCACHE_SUBSCRIBERS)
		elog(ERROR, "too many relcache subscribers");
	relcache_subscribers[n_relcache_subscribers++] = forget;
}

void
_PG_init(void)
{
	DefineCustomStringVariable("idempotency.default_ttl",
							   "Retention of an idempotency key when idem_claim is given no ttl.",
							   "A positive interval, or 'infinity' to keep keys forever.",
							   &default_ttl_string,
							   "7 days",
							   PGC_USERSET,
							   0,
							   check_default_ttl,
							   assign_default_ttl,
							   NULL);

	DefineCustomBoolVariable("idempotency.log_duplicates",
							 "Logs one line for each duplicate claim of an idempotency key.",
							 NULL,
							 &idem_log_duplicates,
							 false,
							 PGC_SUSET,
							 0,
							 NULL,
							 NULL,
							 NULL);

	DefineCustomIntVariable("idempotency.max_attempts",
							"Retryable failures after which a leased record becomes permanently failed.",
							"0 means unlimited.",
							&idem_max_attempts,
							0,
							0,
							INT_MAX,
							PGC_USERSET,
							0,
							NULL,
							NULL,
							NULL);

	DefineCustomBoolVariable("idempotency.direct_claim",
							 "Lets idem_claim insert and read records without SPI where it can.",
							 "Off: every claim runs its statements through SPI (for diagnosis; slower, same results).",
							 &idem_direct_claim_enabled,
							 true,
							 PGC_USERSET,
							 0,
							 NULL,
							 NULL,
							 NULL);

	idem_stats_init();
	idem_worker_init();

	MarkGUCPrefixReserved("idempotency");

	idem_query_init();
	CacheRegisterRelcacheCallback(relcache_dispatch, (Datum) 0);
}

/*
 * The scope argument: not NULL, at most IDEM_MAX_SCOPE_BYTES bytes.  The
 * empty string is the default scope.
 */
text *
idem_arg_scope(FunctionCallInfo fcinfo, int argno, const char *fname)
{
	text	   *scope;
	size_t		len;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s: scope must not be null", fname),
				 errhint("Use the empty string for the default scope.")));

	scope = PG_GETARG_TEXT_PP(argno);
	len = VARSIZE_ANY_EXHDR(scope);
	if (len > IDEM_MAX_SCOPE_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("%s: scope is too long", fname),
				 errdetail("The scope is %zu bytes; the limit is %d bytes.",
						   len, IDEM_MAX_SCOPE_BYTES)));
	return scope;
}

/* Length and emptiness checks of a key already known not to be NULL. */
void
idem_check_key(text *key, const char *fname)
{
	size_t		len = VARSIZE_ANY_EXHDR(key);

	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s: key must not be empty", fname)));
	if (len > IDEM_MAX_KEY_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("%s: key is too long", fname),
				 errdetail("The key is %zu bytes; the limit is %d bytes.",
						   len, IDEM_MAX_KEY_BYTES),
				 errhint("Hash long natural keys, for example with sha256(), and use the digest as the key.")));
}

/* The key argument: not NULL, not empty, at most IDEM_MAX_KEY_BYTES bytes. */
text *
idem_arg_key(FunctionCallInfo fcinfo, int argno, const char *fname)
{
	text	   *key;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s: key must not be null", fname)));
	key = PG_GETARG_TEXT_PP(argno);
	idem_check_key(key, fname);
	return key;
}

/* Fail with 25006 in a read-only transaction (and so on a hot standby). */
void
idem_check_writable(const char *fname)
{
	if (XactReadOnly)
		PreventCommandIfReadOnly(psprintf("%s()", fname));
}

/*
 * base + span, failing with 22023 unless the result is later than base
 * and within the range of timestamptz.  (timestamptz_pl_interval reports
 * an out-of-range result as 22008 "timestamp out of range", which names
 * neither the function nor the argument; that error is replaced.  Nothing
 * runs after the catch but the new ereport, so no subtransaction is
 * needed.)
 */
TimestampTz
idem_add_interval(TimestampTz base, Interval *span, const char *what,
				  const char *fname)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	volatile TimestampTz result = 0;

	if (IDEM_INTERVAL_IS_INFINITE(span))
	{
		if (IDEM_INTERVAL_IS_PLUS_INFINITY(span))
			return DT_NOEND;
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s: %s must be positive", fname, what),
				 errdetail("The %s given was -infinity.", what)));
	}

	PG_TRY();
	{
		result = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval,
														 TimestampTzGetDatum(base),
														 IntervalPGetDatum(span)));
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(oldcxt);
		edata = CopyErrorData();
		if (edata->sqlerrcode != ERRCODE_DATETIME_VALUE_OUT_OF_RANGE)
			PG_RE_THROW();
		FlushErrorState();
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s: %s is out of range", fname, what),
				 errdetail("The %s given was %s; the resulting time is outside the range of timestamptz.",
						   what,
						   DatumGetCString(DirectFunctionCall1(interval_out,
															   IntervalPGetDatum(span)))),
				 strcmp(what, "ttl") == 0 &&
				 span->month >= 0 && span->day >= 0 && span->time >= 0 ?
				 errhint("To keep keys forever, set idempotency.default_ttl to 'infinity' and pass no ttl.") : 0));
	}
	PG_END_TRY();

	if (result <= base)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s: %s must be positive", fname, what),
				 errdetail("The %s given was %s.", what,
						   DatumGetCString(DirectFunctionCall1(interval_out,
															   IntervalPGetDatum(span))))));
	return result;
}

/*
 * The expiry of a record written now: now + ttl argument, or now +
 * idempotency.default_ttl when the argument is NULL or when argno is
 * negative (a variant of the function without a ttl argument).
 * 'infinity' gives the timestamp infinity.
 */
TimestampTz
idem_expiry(FunctionCallInfo fcinfo, int argno, TimestampTz now,
			const char *fname)
{
	if (argno >= 0 && argno < PG_NARGS() && !PG_ARGISNULL(argno))
		return idem_add_interval(now, PG_GETARG_INTERVAL_P(argno), "ttl", fname);

	if (default_ttl == NULL)
		elog(ERROR, "idempotency.default_ttl is not initialised");
	if (default_ttl->infinite)
		return DT_NOEND;
	return idem_add_interval(now, &default_ttl->ttl, "ttl", fname);
}

/*
 * SHA-256 of the fingerprint argument as a bytea, or NULL when the
 * argument is NULL or absent (argno negative or past the last argument).
 * The raw request is never stored.
 */
bytea *
idem_fingerprint_digest(FunctionCallInfo fcinfo, int argno)
{
	text	   *fp;
	bytea	   *digest;

	if (argno < 0 || argno >= PG_NARGS() || PG_ARGISNULL(argno))
		return NULL;

	fp = PG_GETARG_TEXT_PP(argno);
	digest = (bytea *) palloc(VARHDRSZ + PG_SHA256_DIGEST_LENGTH);
	SET_VARSIZE(digest, VARHDRSZ + PG_SHA256_DIGEST_LENGTH);
	idem_sha256(VARDATA_ANY(fp), VARSIZE_ANY_EXHDR(fp), (uint8 *) VARDATA(digest));
	return digest;
}

/* A timestamptz as text in the session's DateStyle, for messages. */
char *
idem_timestamptz_cstring(TimestampTz ts)
{
	return DatumGetCString(DirectFunctionCall1(timestamptz_out,
											   TimestampTzGetDatum(ts)));
}

/*
 * idem_status_is_valid(status text) RETURNS boolean
 *
 * True when status is one of the record statuses (IDEM_STATUS_*): the
 * CHECK constraint of idem_records.  STRICT (NULL gives NULL, which a
 * CHECK accepts; the column is NOT NULL).  Never fails.
 */
PG_FUNCTION_INFO_V1(idem_status_is_valid);

Datum
idem_status_is_valid(PG_FUNCTION_ARGS)
{
	static const char *const statuses[] = {
		IDEM_STATUS_CLAIMED, IDEM_STATUS_IN_PROGRESS, IDEM_STATUS_COMPLETED,
		IDEM_STATUS_FAILED, IDEM_STATUS_RETRYABLE, IDEM_STATUS_ISSUED,
		IDEM_STATUS_CONSUMED
	};
	text	   *status = PG_GETARG_TEXT_PP(0);
	const char *s = VARDATA_ANY(status);
	size_t		len = VARSIZE_ANY_EXHDR(status);
	int			i;

	for (i = 0; i < lengthof(statuses); i++)
		if (strlen(statuses[i]) == len && memcmp(statuses[i], s, len) == 0)
			PG_RETURN_BOOL(true);
	PG_RETURN_BOOL(false);
}
