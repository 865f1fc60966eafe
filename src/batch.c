/*-------------------------------------------------------------------------
 *
 * batch.c
 *	  idem_claim_many: claim many keys of one scope in one call, for message
 *	  consumers that receive their input in batches.  Each distinct key is
 *	  claimed as idem_claim(scope, key, ttl) would, in the caller's
 *	  transaction; results come in array order, a repeated key claimed at
 *	  most once (at its first occurrence).  Every element is validated
 *	  before anything is read or written: a bad one leaves no effect.
 *
 *	  Lock order (deadlock freedom), which a change must keep: the distinct
 *	  keys are sorted bytewise (memcmp, then length: COLLATE "C" and the
 *	  primary key's order), and every wait happens while this call holds
 *	  only keys that sort before the one waited for, so two batches that
 *	  share keys queue behind each other whatever their arrays' order.
 *	  Hence the work: the fast path (claim_direct.c: READ COMMITTED, a
 *	  plain idem_records) takes the keys one by one in sorted order; else
 *	  three set-based steps (batch_claim_sets): a read without waits finds
 *	  the duplicates, left untouched (a redelivered batch writes nothing);
 *	  one INSERT ... ON CONFLICT DO UPDATE, in sorted order, inserts or
 *	  takes over the rest, every wait inside it; a key that became live
 *	  meanwhile is left locked by it and settled by claim.c without a wait.
 *
 *	  Visibility: a live record that an uncommitted transaction is
 *	  releasing is a duplicate where idem_claim would wait (both answers
 *	  right for their moment; no wait keeps the read out of the lock
 *	  order).  In REPEATABLE READ and SERIALIZABLE a record committed after
 *	  the snapshot raises 40001, as idem_claim's INSERT does.  A record
 *	  that row-level security hides is never claimed twice (42501).
 *
 *	  Statistics are counted as idem_claim counts them (stats.c), once per
 *	  batch.  One clock reading per call decides expiry for every key and
 *	  is the created_at of every record written.  Memory: the keys, their
 *	  sorted index and the results live in the caller's context, SPI's is
 *	  released by SPI_finish, the result tuplestore is per query; no state
 *	  across calls, no subtransaction.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "idempotency.h"
#include "claim.h"
#include "spi_read.h"

PG_FUNCTION_INFO_V1(idem_claim_many);

/* The takeover condition of idem_claim, with $3 as the call's clock. */
#define BATCH_CLAIMABLE_SQL IDEM_CLAIMABLE_SQL_AT("$3")

/*
 * Step 1: the records of the keys of $2, each with whether it may be taken
 * over (a NULL locked_until makes an in_progress record unclaimable, as in
 * idem_claim, hence IS TRUE).  Those that may not are duplicates.  One
 * primary key probe per key: the LATERAL ... LIMIT 1 keeps the planner
 * from turning this into a scan of the whole scope (which "key = ANY ($2)"
 * invites when the statistics of the scope are stale).
 */
static IdemQuery q_many_live = {
	"SELECT k.key, r.status, r.created_at, r.claimable"
	" FROM pg_catalog.unnest($2) AS k(key)"
	" CROSS JOIN LATERAL ("
	"   SELECT r.status, r.created_at, " BATCH_CLAIMABLE_SQL " IS TRUE AS claimable"
	"   FROM @extschema@.idem_records r"
	"   WHERE r.scope OPERATOR(pg_catalog.=) $1"
	"   AND r.key OPERATOR(pg_catalog.=) k.key"
	"   LIMIT 1) AS r",
	3, {TEXTOID, TEXTARRAYOID, TIMESTAMPTZOID}
};

/*
 * Step 2: insert or take over the keys of $2, in array order (the caller
 * passes them sorted).  RETURNING lists the keys this statement claimed,
 * each with whether an earlier attempt's outside effect is unknown: a
 * lease taken over after its mark (effect_started_at) leaves its attempt in
 * effect_unknown_attempt, as idem_claim's takeover does (claim.c).
 * MANY_CLAIM_CORE(set, returning) with set empty and returning false is the
 * statement of a catalog not yet updated to 0.6.0.
 */
#define MANY_CLAIM_CORE(set, returning) \
	"INSERT INTO @extschema@.idem_records AS r" \
	" (scope, key, status, created_at, updated_at, expires_at)" \
	" SELECT $1, k.key, 'claimed', $3, $3, $4" \
	" FROM pg_catalog.unnest($2) WITH ORDINALITY AS k(key, n)" \
	" ORDER BY k.n" \
	" ON CONFLICT (scope, key) DO UPDATE" \
	" SET status = 'claimed', fingerprint = NULL, result = NULL," \
	"     created_at = $3, updated_at = $3, expires_at = $4," \
	"     locked_until = NULL, token = NULL," \
	"     attempts = CASE WHEN r.expires_at OPERATOR(pg_catalog.<=) $3" \
	"                THEN 0 ELSE r.attempts END" \
	set \
	" WHERE " BATCH_CLAIMABLE_SQL \
	" RETURNING r.key, " returning

static IdemQuery q_many_claim = {
	MANY_CLAIM_CORE(
		"," IDEM_UNKNOWN_ATTEMPT_SET_AT("$3") ","
		" effect_started_at = NULL, owner_pid = NULL, owner_start = NULL",
		"r.effect_unknown_attempt IS NOT NULL"),
	4, {TEXTOID, TEXTARRAYOID, TIMESTAMPTZOID, TIMESTAMPTZOID}
};

static IdemQuery q_many_claim_legacy = {
	MANY_CLAIM_CORE("", "false"),
	4, {TEXTOID, TEXTARRAYOID, TIMESTAMPTZOID, TIMESTAMPTZOID}
};

/* What became of a distinct key. */
#define KEY_PENDING		0		/* no record seen yet */
#define KEY_CLAIMED		1
#define KEY_DUPLICATE	2
#define KEY_CLAIMABLE	3		/* pending, with a record step 1 may take over */

/* One array element, for sorting. */
typedef struct BatchKey
{
	Datum		key;			/* the element, a text */
	const char *data;			/* bytes of the key */
	int			len;			/* their number */
	int			pos;			/* 0-based position in the array */
} BatchKey;

/* Bytewise order only (as COLLATE "C"): for bsearch among the distinct keys. */
static int
batch_bytes_cmp(const void *a, const void *b)
{
	const BatchKey *ka = (const BatchKey *) a;
	const BatchKey *kb = (const BatchKey *) b;
	int			c = memcmp(ka->data, kb->data, Min(ka->len, kb->len));

	if (c != 0)
		return c;
	return (ka->len > kb->len) - (ka->len < kb->len);
}

/* Bytewise order of the keys, then array position: for sorting them. */
static int
batch_key_cmp(const void *a, const void *b)
{
	const BatchKey *ka = (const BatchKey *) a;
	const BatchKey *kb = (const BatchKey *) b;
	int			c = batch_bytes_cmp(a, b);

	if (c != 0)
		return c;
	return (ka->pos > kb->pos) - (ka->pos < kb->pos);
}

/*
 * The index among the m sorted distinct keys of the key in column 1 of
 * SPI result row "row" (one of the keys given, or idem_records.key).
 * Every key a statement returns is one it was given.
 */
static int
batch_find(BatchKey *distinct, int m, int row)
{
	Datum		d = idem_spi_read_required(SPI_tuptable, row, 1, TEXTOID, "key");
	text	   *t;
	BatchKey	probe;
	BatchKey   *hit;

	t = DatumGetTextPP(d);
	probe.key = d;
	probe.data = VARDATA_ANY(t);
	probe.len = VARSIZE_ANY_EXHDR(t);
	probe.pos = 0;
	hit = (BatchKey *) bsearch(&probe, distinct, m, sizeof(BatchKey),
							   batch_bytes_cmp);
	if (hit == NULL)
		elog(ERROR, "idem_claim_many: statement returned a key it was not given");
	return hit - distinct;
}

/* The elements of the keys argument, validated (see idem_claim_many). */
static void
batch_arg_keys(FunctionCallInfo fcinfo, int argno, const char *fname,
			   Datum **elems, int *nelems, int *lbound)
{
	ArrayType  *keys;
	bool	   *nulls;
	int			i;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s: keys must not be null", fname),
				 errhint("Pass an empty array to claim nothing.")));

	keys = PG_GETARG_ARRAYTYPE_P(argno);
	if (ARR_ELEMTYPE(keys) != TEXTOID)
		elog(ERROR, "%s: keys is not an array of text", fname);
	if (ARR_NDIM(keys) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s: keys must be a one-dimensional array", fname),
				 errdetail("The array given has %d dimensions.", ARR_NDIM(keys))));
	*lbound = ARR_NDIM(keys) == 1 ? ARR_LBOUND(keys)[0] : 1;

	deconstruct_array(keys, TEXTOID, -1, false, TYPALIGN_INT,
					  elems, &nulls, nelems);

	for (i = 0; i < *nelems; i++)
	{
		text	   *key;
		size_t		len;

		CHECK_FOR_INTERRUPTS();
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("%s: key must not be null", fname),
					 errdetail("Array element keys[%d] is null.", *lbound + i)));

		key = DatumGetTextPP((*elems)[i]);
		len = VARSIZE_ANY_EXHDR(key);
		if (len == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("%s: key must not be empty", fname),
					 errdetail("Array element keys[%d] is the empty string.", *lbound + i)));
		if (len > IDEM_MAX_KEY_BYTES)
			ereport(ERROR,
					(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
					 errmsg("%s: key is too long", fname),
					 errdetail("Array element keys[%d] is %zu bytes; the limit is %d bytes.",
							   *lbound + i, len, IDEM_MAX_KEY_BYTES),
					 errhint("Hash long natural keys, for example with sha256(), and use the digest as the key.")));
		(*elems)[i] = PointerGetDatum(key);
	}
}

/*
 * The fast path (READ COMMITTED and a plain idem_records; see claim_direct.c)
 * instead of the three steps of batch_claim: each key in sorted order,
 * inserted or found by its primary key probe through the open fast path
 * direct; a record to take over goes through idem_claim_spi_plain's UPDATE at
 * once, so the order is kept.  Statistics are counted per key by claim.c.
 */
static void
batch_claim_direct(IdemDirect *direct, Oid nsp, text *scope, BatchKey *distinct,
				   int m, TimestampTz now, TimestampTz expires, char *state)
{
	const char *fname = "idem_claim_many";
	int			i;

	for (i = 0; i < m; i++)
	{
		text	   *key = (text *) DatumGetPointer(distinct[i].key);
		IdemClaimOutcome r;

		r = idem_claim_fast_through(direct, scope, key, now, expires, NULL, fname);
		if (r == IDEM_CLAIM_UNDECIDED)
			r = idem_claim_spi_plain(nsp, scope, key, now, expires, NULL, fname);
		state[i] = r == IDEM_CLAIM_ACQUIRED ? KEY_CLAIMED : KEY_DUPLICATE;
	}
}

/* The statistics of the set-based steps, counted once at the end. */
typedef struct BatchCounts
{
	int64		claimed;
	int64		takeover;
	int64		duplicate;
	int64		in_progress;
} BatchCounts;

/*
 * Claim, one by one in sorted order as idem_claim does through SPI, each
 * of the m sorted distinct keys of scope that no step decided yet (state
 * KEY_PENDING or KEY_CLAIMABLE).  idem_claim_spi_plain counts its own
 * statistics.
 */
static void
batch_claim_each(Oid nsp, text *scope, BatchKey *distinct, int m,
				 TimestampTz now, TimestampTz expires, char *state)
{
	int			i;

	for (i = 0; i < m; i++)
	{
		CHECK_FOR_INTERRUPTS();
		if (state[i] == KEY_CLAIMED || state[i] == KEY_DUPLICATE)
			continue;
		state[i] = idem_claim_spi_plain(nsp, scope,
										(text *) DatumGetPointer(distinct[i].key),
										now, expires, NULL, "idem_claim_many") ==
			IDEM_CLAIM_ACQUIRED ? KEY_CLAIMED : KEY_DUPLICATE;
	}
}

/*
 * Step 1: the keys (values[1], all m of them) whose records are live are
 * duplicates, counted and logged; their rows are not touched.  Marks the
 * keys with a record to take over KEY_CLAIMABLE.  One read, no locks and no
 * waits: in READ COMMITTED, a live record that an uncommitted transaction
 * is deleting or making claimable (idem_release, idem_fail) is a duplicate
 * here; in REPEATABLE READ a record visible in the snapshot decides even if
 * a concurrent transaction has since deleted it (both consistent with some
 * serial order).  A record a policy hides is not a duplicate here; step 2
 * or 3 then raises 42501, depending on the server version.
 */
static void
batch_step_live(Oid nsp, text *scope, BatchKey *distinct, int m, Datum *values,
				char *state, BatchCounts *counts)
{
	int			n = idem_query_exec(&q_many_live, nsp, values, NULL, false, 0);
	int			i;

	for (i = 0; i < n; i++)
	{
		int			k = batch_find(distinct, m, i);
		char	   *status;
		TimestampTz created_at;

		/* "... IS TRUE": never NULL */
		if (DatumGetBool(idem_spi_read_required(SPI_tuptable, i, 4, BOOLOID, "expires_at")))
		{
			state[k] = KEY_CLAIMABLE;
			continue;
		}
		state[k] = KEY_DUPLICATE;
		status = idem_spi_read_cstring(SPI_tuptable, i, 2, "status");
		created_at = DatumGetTimestampTz(idem_spi_read_required(SPI_tuptable, i, 3,
																TIMESTAMPTZOID, "created_at"));
		if (idem_duplicate_stat(status) == IDEM_STAT_IN_PROGRESS_CONFLICT)
			counts->in_progress++;
		else
			counts->duplicate++;
		idem_log_duplicate("claim", scope, (text *) DatumGetPointer(distinct[k].key),
						   created_at, status);
	}
}

/*
 * Step 2: insert or take over the npending keys of values[1], in sorted
 * order; returns how many it claimed.  A key it did not claim has a live
 * record (left locked), for step 3.  ModifyTable processes its input in
 * order (ORDER BY the ordinality), so every wait (for an uncommitted insert,
 * update or delete of a key, or its row lock) comes key by key in sorted
 * order; the DO UPDATE's WHERE is idem_claim's takeover condition.  Taking
 * over inside this statement, not in a later pass, is what keeps the order:
 * a later pass would wait for a small key while holding large ones.
 */
static int
batch_step_claim(Oid nsp, text *scope, BatchKey *distinct, int m,
				 Datum *values, char *state, BatchCounts *counts)
{
	IdemQuery  *q = idem_records_current(nsp) ? &q_many_claim : &q_many_claim_legacy;
	int			n = idem_query_exec(q, nsp, values, NULL, false, 0);
	int			i;

	for (i = 0; i < n; i++)
	{
		int			k = batch_find(distinct, m, i);

		/*
		 * A takeover if step 1 saw a claimable record.  (A record that came
		 * or went between the two statements can make this count wrong,
		 * never the answer.)  One whose earlier attempt's effect is unknown
		 * is counted and logged as idem_claim's.
		 */
		if (state[k] == KEY_CLAIMABLE)
		{
			if (DatumGetBool(idem_spi_read_required(SPI_tuptable, i, 2, BOOLOID,
													"effect_unknown")))
				idem_count_takeover("idem_claim_many", scope,
									(text *) DatumGetPointer(distinct[k].key),
									false, true);
			else
				counts->takeover++;
		}
		state[k] = KEY_CLAIMED;
	}
	counts->claimed += n;
	return n;
}

/*
 * The three set-based steps of the header comment, for the m sorted
 * distinct keys of scope; the statistics of steps 1 and 2 are counted at
 * the end (a claim by step 2 is a takeover if step 1 saw a claimable
 * record; step 1's duplicates are logged and classified by claim.c's
 * idem_log_duplicate and idem_duplicate_stat).  Inside SPI.  Step 3 gets a
 * key that became live between steps 1 and 2 (a concurrent claim that
 * committed meanwhile): ON CONFLICT DO UPDATE left its row locked by this
 * transaction, so idem_claim_spi_plain (claim.c) settles it without a wait
 * and reports the duplicate as idem_claim does; the row stays locked until
 * the transaction ends.
 */
static void
batch_claim_sets(Oid nsp, text *scope, BatchKey *distinct, int m,
				 TimestampTz now, TimestampTz expires, char *state)
{
	Datum	   *datums = (Datum *) palloc(m * sizeof(Datum));
	Datum		values[4];
	int			npending;
	int			i;
	BatchCounts counts = {0, 0, 0, 0};

	for (i = 0; i < m; i++)
		datums[i] = distinct[i].key;
	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(construct_array(datums, m, TEXTOID, -1, false,
												TYPALIGN_INT));
	values[2] = TimestampTzGetDatum(now);
	values[3] = TimestampTzGetDatum(expires);

	batch_step_live(nsp, scope, distinct, m, values, state, &counts);

	npending = 0;
	for (i = 0; i < m; i++)
		if (state[i] != KEY_DUPLICATE)
			datums[npending++] = datums[i];
	if (npending > 0)
	{
		values[1] = PointerGetDatum(construct_array(datums, npending, TEXTOID,
													-1, false, TYPALIGN_INT));
		/* Step 3: keys whose rows step 2 found live (and left locked). */
		if (batch_step_claim(nsp, scope, distinct, m, values, state, &counts) < npending)
			batch_claim_each(nsp, scope, distinct, m, now, expires, state);
	}

	idem_stats_add(scope, IDEM_STAT_CLAIMED, counts.claimed);
	idem_stats_add(scope, IDEM_STAT_TAKEOVER, counts.takeover);
	idem_stats_add(scope, IDEM_STAT_DUPLICATE, counts.duplicate);
	idem_stats_add(scope, IDEM_STAT_IN_PROGRESS_CONFLICT, counts.in_progress);
}

/*
 * Claim the m sorted distinct keys of scope; on return state[i] is
 * KEY_CLAIMED or KEY_DUPLICATE for each.  See the header comment for the
 * three steps and why they keep the lock order.
 */
static void
batch_claim(Oid nsp, text *scope, BatchKey *distinct, int m,
			TimestampTz now, TimestampTz expires, char *state)
{
	IdemDirect *direct;

	idem_spi_connect();

	/* The fast path where it applies (see batch_claim_direct). */
	direct = idem_direct_open(nsp, NULL);
	if (direct != NULL)
	{
		batch_claim_direct(direct, nsp, scope, distinct, m, now, expires, state);
		idem_direct_close(direct);
	}

	/*
	 * idem_records distributed by Citus: Citus cannot plan the two steps
	 * below (an INSERT ... SELECT over a table function, a lateral
	 * subquery with LIMIT), so each key, in sorted order, is claimed as
	 * idem_claim does, a statement routed to its shard.  The keys are still
	 * locked in one order, whatever shard holds them, so two batches wait
	 * for each other rather than deadlock.  The same for records with a
	 * shard key (shard.c), whose statements are rewritten per shard.
	 */
	else if (idem_records_citus(nsp) || OidIsValid(idem_shard_type(nsp)))
		batch_claim_each(nsp, scope, distinct, m, now, expires, state);
	else
		batch_claim_sets(nsp, scope, distinct, m, now, expires, state);

	SPI_finish();
}

/*
 * idem_claim_many(scope text, keys text[], ttl interval DEFAULT NULL)
 *   RETURNS TABLE (key text, claimed boolean)
 *
 * Claims each key of the array as idem_claim(scope, key, ttl) would, in the
 * caller's transaction, and returns one row per array element in array
 * order: claimed is true when this call claimed the key, false for a
 * duplicate and for every repetition of a key after its first occurrence.
 * An empty array gives no rows.  Keys are locked in sorted order, so
 * concurrent batches never deadlock among themselves.  No subtransaction
 * is used.
 *
 * Fails with 22004 (NULL scope, keys or element), 22023 (empty element,
 * multidimensional keys, ttl not positive), 22001 (element or scope too
 * long; 22023 too when the ttl overflows the timestamp range), 25006 (read-only
 * transaction), 40001 (REPEATABLE READ or SERIALIZABLE and a conflicting
 * record committed after the snapshot), 42501 (a record hidden by
 * row-level security), 55P03/57014 (lock_timeout/statement_timeout while
 * waiting for a concurrent claim of one of the keys), 55000 (a record of an
 * idem_records whose columns a DBA changed: spi_read.c).  An element's
 * error names its subscript.
 */
Datum
idem_claim_many(PG_FUNCTION_ARGS)
{
	const char *fname = "idem_claim_many";
	ReturnSetInfo *rsinfo;
	text	   *scope;
	Datum	   *elems;
	int			nelems;
	int			lbound;
	TimestampTz now;
	TimestampTz expires;
	BatchKey   *sorted;
	BatchKey   *distinct;
	int		   *group;			/* array position -> index in distinct */
	char	   *state;
	int			m;
	int			i;

	/* Refuse a context that takes no set before looking at the arguments. */
	idem_check_srf(fcinfo, fname);

	scope = idem_arg_scope(fcinfo, 0, fname);
	batch_arg_keys(fcinfo, 1, fname, &elems, &nelems, &lbound);

	idem_check_writable(fname);
	idem_check_autocommit_claim(fcinfo, fname);

	now = GetCurrentTimestamp();
	expires = idem_expiry(fcinfo, 2, now, fname);

	/* Sort, and number the distinct keys in sorted order. */
	sorted = (BatchKey *) palloc(Max(nelems, 1) * sizeof(BatchKey));
	distinct = (BatchKey *) palloc(Max(nelems, 1) * sizeof(BatchKey));
	group = (int *) palloc(Max(nelems, 1) * sizeof(int));
	for (i = 0; i < nelems; i++)
	{
		text	   *key = (text *) DatumGetPointer(elems[i]);

		sorted[i].key = elems[i];
		sorted[i].data = VARDATA_ANY(key);
		sorted[i].len = VARSIZE_ANY_EXHDR(key);
		sorted[i].pos = i;
	}
	qsort(sorted, nelems, sizeof(BatchKey), batch_key_cmp);

	m = 0;
	for (i = 0; i < nelems; i++)
	{
		if (m == 0 || batch_bytes_cmp(&sorted[i], &distinct[m - 1]) != 0)
			distinct[m++] = sorted[i];	/* first occurrence: lowest pos */
		group[sorted[i].pos] = m - 1;
	}

	state = (char *) palloc0(Max(m, 1));
	if (m > 0)
		batch_claim(idem_extension_schema(fcinfo), scope, distinct, m,
					now, expires, state);

	/* One row per element, in array order. */
	rsinfo = idem_srf_begin(fcinfo, fname, 2);

	for (i = 0; i < nelems; i++)
	{
		Datum		values[2];
		bool		nulls[2] = {false, false};
		int			k = group[i];

		values[0] = elems[i];
		values[1] = BoolGetDatum(distinct[k].pos == i &&
								 state[k] == KEY_CLAIMED);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}

	return (Datum) 0;
}

/* The F_at twins of this file (IDEM_SHARD_TWIN, idempotency.h). */
IDEM_SHARD_TWIN(idem_claim_many);
