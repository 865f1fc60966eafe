/*-------------------------------------------------------------------------
 *
 * args.c
 *	  The argument checks every SQL-callable function of the extension
 *	  shares (scope, key, writability, the idempotency.autocommit_claims
 *	  check: would a claim commit before the work it guards, in a
 *	  statement of its own outside a transaction block?), the expiry of a new record (a ttl argument, or the setting
 *	  idempotency.default_ttl, both defined here), the fingerprint digest,
 *	  and idem_status_is_valid, the CHECK of idem_records.status.  Calls no
 *	  other file of src/; called by the files with SQL-callable functions
 *	  on records, machines and guards (claim.c, batch.c, lease.c,
 *	  records.c, token.c, transition.c, guard.c) and by module.c's
 *	  _PG_init (idem_args_init).
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
 *	  - Both settings are defined at every load, preloaded or not (see
 *	    module.c).
 *	  - Where a call can see how its ttl argument was written (a literal of
 *	    the statement a client sent), a bare number ('7', 7 seconds) is
 *	    refused; a ttl that arrives as a value cannot be told from
 *	    '7 seconds', so one shorter than a minute is refused unless the
 *	    statement writes it with its unit (idem_check_ttl_arg).
 *	  - Memory: validated arguments and digests are in the caller's
 *	    context.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "commands/prepare.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "nodes/plannodes.h"
#include "parser/parser.h"
#include "tcop/pquery.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/portal.h"
#include "utils/timestamp.h"

#include "idempotency.h"

PG_FUNCTION_INFO_V1(idem_status_is_valid);

/* idempotency.default_ttl, as text and as parsed by its check hook. */
static char *default_ttl_string = NULL;

typedef struct TtlSetting
{
	bool		infinite;
	Interval	ttl;
} TtlSetting;

static TtlSetting *default_ttl = NULL;

/* idempotency.autocommit_claims: what a claim that commits on its own does */
typedef enum AutocommitClaims
{
	AUTOCOMMIT_CLAIMS_ALLOW,
	AUTOCOMMIT_CLAIMS_WARN,
	AUTOCOMMIT_CLAIMS_ERROR
} AutocommitClaims;

static const struct config_enum_entry autocommit_claims_options[] = {
	{"allow", AUTOCOMMIT_CLAIMS_ALLOW, false},
	{"warn", AUTOCOMMIT_CLAIMS_WARN, false},
	{"error", AUTOCOMMIT_CLAIMS_ERROR, false},
	{NULL, 0, false}
};

static int	autocommit_claims = AUTOCOMMIT_CLAIMS_ERROR;

/*
 * Is str (len bytes) a number without a unit: blanks, an optional sign,
 * digits with an optional fraction, blanks?  As an interval that is a
 * number of seconds ('7' is 7 seconds).
 */
static bool
is_bare_number(const char *str, size_t len)
{
	size_t		i = 0;
	bool		digits = false;

	while (i < len && isspace((unsigned char) str[i]))
		i++;
	if (i < len && (str[i] == '+' || str[i] == '-'))
		i++;
	while (i < len && isdigit((unsigned char) str[i]))
	{
		digits = true;
		i++;
	}
	if (i < len && str[i] == '.')
	{
		i++;
		while (i < len && isdigit((unsigned char) str[i]))
		{
			digits = true;
			i++;
		}
	}
	while (i < len && isspace((unsigned char) str[i]))
		i++;
	return digits && i == len;
}

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

	/* '7' is 7 seconds: a ttl must name its unit. */
	if (is_bare_number(*newval, strlen(*newval)))
	{
		idem_guc_extra_free(parsed);
		GUC_check_errdetail("An interval without a unit counts seconds: \"%s\" would keep keys %s seconds.",
							*newval, *newval);
		GUC_check_errhint("Name the unit, for example '7 days' (or '%s seconds' if seconds are meant).",
						  *newval);
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

/*
 * idempotency.default_ttl: false when it is infinity, else true with the
 * interval in *ttl (idem_publish's look for this transaction's claims).
 */
bool
idem_default_ttl(Interval *ttl)
{
	Assert(default_ttl != NULL);
	if (default_ttl->infinite)
		return false;
	*ttl = default_ttl->ttl;
	return true;
}

/*
 * Define idempotency.default_ttl and idempotency.autocommit_claims
 * (module.c's _PG_init).
 */
void
idem_args_init(void)
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

	DefineCustomEnumVariable("idempotency.autocommit_claims",
							 "What a claim that commits on its own does: error (the default), warn or allow.",
							 "A claim made by a statement of its own outside a transaction block that writes nothing else (a SELECT, also of a function that claims) commits before the work it guards; "
							 "if that work fails, every retry of the event is skipped.",
							 &autocommit_claims,
							 AUTOCOMMIT_CLAIMS_ERROR,
							 autocommit_claims_options,
							 PGC_USERSET,
							 0,
							 NULL,
							 NULL,
							 NULL);
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
 * Is the call fcinfo made by the query the active portal runs itself, not
 * by a function, procedure or DO block that query calls?  The portal's
 * executor keeps its state (and the FmgrInfo of every call it makes) in a
 * memory context made in the portal's own; a function's queries run in
 * contexts of their own (SPI, SQL functions, PL/pgSQL's simple
 * expressions), further down.  The query's text is then the portal's
 * sourceText.
 */
static bool
called_by_portal_query(FunctionCallInfo fcinfo)
{
	Portal		portal = ActivePortal;
	FmgrInfo   *flinfo = fcinfo->flinfo;

	return portal != NULL && portal->sourceText != NULL &&
		flinfo != NULL && flinfo->fn_mcxt != NULL &&
		flinfo->fn_mcxt->parent == portal->portalContext;
}

/*
 * Does the client's statement stmt (a raw parse tree) carry the work of
 * the claims it makes, so that they commit with it: a statement that
 * writes itself (INSERT, UPDATE, DELETE, MERGE, a SELECT with a
 * data-modifying WITH or INTO, CREATE TABLE AS), or a program that runs
 * whole on the server and hands no claim's answer back to a later
 * statement (DO, CALL: the procedure's own COMMITs are its decision)?
 * EXECUTE is judged by the statement it runs, EXPLAIN by the one it
 * explains.  A plain SELECT (of idem_claim, or of a function that calls
 * it) does not: its claims commit before any later statement's work.
 * *cacheable is cleared when the answer depends on more than the text (a
 * prepared statement may be replaced).
 */
static bool
statement_carries_work(Node *stmt, bool *cacheable)
{
	switch (nodeTag(stmt))
	{
		case T_InsertStmt:
		case T_UpdateStmt:
		case T_DeleteStmt:
		case T_MergeStmt:
		case T_CreateTableAsStmt:
		case T_DoStmt:
		case T_CallStmt:
			return true;
		case T_SelectStmt:
			{
				SelectStmt *select = (SelectStmt *) stmt;
				ListCell   *lc;

				if (select->intoClause != NULL)
					return true;
				if (select->withClause != NULL)
					foreach(lc, select->withClause->ctes)
					{
						CommonTableExpr *cte = lfirst_node(CommonTableExpr, lc);

						if (!IsA(cte->ctequery, SelectStmt))
							return true;
					}
				return false;
			}
		case T_ExplainStmt:
			return statement_carries_work(((ExplainStmt *) stmt)->query, cacheable);
		case T_ExecuteStmt:
			{
				PreparedStatement *ps;

				*cacheable = false;
				ps = FetchPreparedStatement(((ExecuteStmt *) stmt)->name, false);
				if (ps == NULL || ps->plansource->raw_parse_tree == NULL)
					return true;
				return statement_carries_work(ps->plansource->raw_parse_tree->stmt,
											  cacheable);
			}
		default:
			/* Other utility statements: not judged. */
			return true;
	}
}

/*
 * Is the text a client sent (debug_query_string) one statement that does
 * not carry the work of its claims (statement_carries_work)?  False when
 * it cannot be parsed (a fast-path function call) or holds other than
 * one statement.  The answer for a text is kept until the next text: the
 * rows of one statement ask once.
 */
static bool
client_statement_is_bare(void)
{
	static char *cached_text = NULL;
	static bool cached_answer = false;
	MemoryContext cxt;
	MemoryContext oldcxt = CurrentMemoryContext;
	volatile bool answer = false;
	volatile bool cacheable = true;

	if (cached_text != NULL && strcmp(cached_text, debug_query_string) == 0)
		return cached_answer;

	cxt = AllocSetContextCreate(CurrentMemoryContext, "idempotency autocommit check",
								ALLOCSET_SMALL_SIZES);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		List	   *stmts = raw_parser(debug_query_string, RAW_PARSE_DEFAULT);
		bool		stable = true;

		answer = list_length(stmts) == 1 &&
			!statement_carries_work(linitial_node(RawStmt, stmts)->stmt, &stable);
		cacheable = stable;
	}
	PG_CATCH();
	{
		/* Not SQL the parser takes: not judged.  Nothing ran but parsing. */
		MemoryContextSwitchTo(oldcxt);
		FlushErrorState();
		answer = false;
		cacheable = false;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(oldcxt);
	MemoryContextDelete(cxt);

	if (cacheable)
	{
		if (cached_text != NULL)
			pfree(cached_text);
		cached_text = MemoryContextStrdup(TopMemoryContext, debug_query_string);
		cached_answer = answer;
	}
	return answer;
}

/*
 * Whether a claim made now commits on its own, before the work it guards:
 * the transaction is no transaction block (no BEGIN, and not several
 * statements sent in one query string, which run as one implicit block),
 * and the statement the client sent does not carry the work itself
 * (client_statement_is_bare), however deep in functions the claim is
 * made: SELECT my_wrapper(key) is judged as SELECT idem_claim(key).  Not
 * judged: a call without a client statement (a background worker), and a
 * call a Citus node makes on behalf of a client (a delegated idem_claim:
 * Citus names those connections "citus_internal gpid=..."; the client's
 * own session decided whether the call was autocommit).  The first
 * statement of an extended-protocol pipeline runs before the server knows
 * what follows it, so it is judged as autocommit too.  In a subtransaction
 * (a PL/pgSQL block with EXCEPTION, a savepoint) the block state of the
 * top transaction cannot be read: the transaction counts as autocommit
 * when it began with the client's current message (its start timestamp is
 * the statement's, as for a simple query outside BEGIN), so a claim in an
 * exception block under an extended-protocol Execute is not judged.
 */
static bool
claim_commits_alone(void)
{
	if (debug_query_string == NULL)
		return false;
	if (IsSubTransaction())
	{
		if (GetCurrentTransactionStartTimestamp() != GetCurrentStatementStartTimestamp())
			return false;
	}
	else if (IsTransactionBlock())
		return false;
	if (application_name != NULL &&
		strncmp(application_name, "citus_internal gpid=", 20) == 0)
		return false;
	return client_statement_is_bare();
}

/*
 * idempotency.autocommit_claims: under 'error', the default, an ERROR
 * (25P01), under 'warn' a WARNING, when a claim made by fname would
 * commit on its own (claim_commits_alone); nothing under 'allow'.  Inside
 * a transaction block this costs one test; in autocommit, one parse of
 * the client's statement per statement.  Called before anything is
 * written, by every function that writes a claim a later statement acts
 * on: idem_claim (and so idem_inbox and idem_http_begin, which call it),
 * idem_claim_many and idem_token_consume.  Not by idem_begin, whose lease
 * is meant to commit on its own (a failed worker's lease runs out).
 */
void
idem_check_autocommit_claim(FunctionCallInfo fcinfo, const char *fname)
{
	if (autocommit_claims == AUTOCOMMIT_CLAIMS_ALLOW || !claim_commits_alone())
		return;
	ereport(autocommit_claims == AUTOCOMMIT_CLAIMS_ERROR ? ERROR : WARNING,
			(errcode(ERRCODE_NO_ACTIVE_SQL_TRANSACTION),
			 errmsg("%s: the claim commits on its own", fname),
			 errdetail("The call is part of a statement of its own outside a transaction block that writes nothing else, so the claim commits before the work it guards: if that work fails, every retry of the event finds the key claimed and skips it."),
			 errhint("Claim in the transaction that does the work (BEGIN, %s, the work, COMMIT), or in the statement that writes it; where a claim is meant to stand alone, set idempotency.autocommit_claims to allow (for one function: ALTER FUNCTION ... SET idempotency.autocommit_claims = allow).",
					 fname)));
}

/*
 * How a ttl argument (argument argno of the call, whose value is ttl) was
 * written, when the call can see it: the argument is a constant of the
 * query the active portal runs (called_by_portal_query: a statement a
 * client sent, an EXECUTE, a query a PL/pgSQL FOR loop reads), whose text
 * at the constant's location is a quoted literal that gives the same
 * interval.  A quoted number without a unit, ttl => '7', which is 7
 * seconds, is refused (22023); true for a literal that names its unit;
 * false when the call cannot see a literal (a parameter, a variable of a
 * function, an expression, a constant in a function's body).  An F_at
 * twin calls its F with its own expression, whose first argument (the
 * shard key) F does not have.
 */
static bool
ttl_literal_with_unit(FunctionCallInfo fcinfo, int argno, Interval *ttl,
					  const char *fname)
{
	FmgrInfo   *flinfo = fcinfo->flinfo;
	List	   *args;
	int			skip;
	Node	   *arg;
	Const	   *c;
	const char *src;
	size_t		srclen;
	const char *start;
	const char *end;
	char	   *number;
	Interval	parsed;

	if (flinfo == NULL || flinfo->fn_expr == NULL || !IsA(flinfo->fn_expr, FuncExpr))
		return false;
	args = ((FuncExpr *) flinfo->fn_expr)->args;
	skip = list_length(args) - PG_NARGS();
	if (skip < 0 || argno + skip >= list_length(args))
		return false;
	arg = (Node *) list_nth(args, argno + skip);
	if (!IsA(arg, Const))
		return false;
	c = (Const *) arg;
	if (c->constisnull || c->location < 0 || !called_by_portal_query(fcinfo))
		return false;

	src = ActivePortal->sourceText;
	srclen = strlen(src);
	if ((size_t) c->location >= srclen || src[c->location] != '\'')
		return false;
	start = src + c->location + 1;
	end = memchr(start, '\'', srclen - (start - src));
	if (end == NULL)
		return false;
	number = pnstrdup(start, end - start);
	if (!idem_parse_interval(number, &parsed) ||
		!DatumGetBool(DirectFunctionCall2(interval_eq, IntervalPGetDatum(&parsed),
										  IntervalPGetDatum(ttl))))
		return false;
	if (!is_bare_number(start, end - start))
		return true;
	/* The number without the blanks around it, for the messages. */
	while (isspace((unsigned char) *start))
		start++;
	while (end > start && isspace((unsigned char) end[-1]))
		end--;
	number = pnstrdup(start, end - start);
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("%s: ttl '%s' has no unit", fname, number),
			 errdetail("An interval without a unit counts seconds: '%s' would keep the key %s seconds.",
					   number, number),
			 errhint("Name the unit, for example ttl => '7 days' (or '%s seconds' if seconds are meant).",
					 number)));
	return false;				/* not reached */
}

/*
 * Refuse (22023) a ttl argument shorter than a minute (no months or days,
 * less than 60 seconds) unless the statement the client sent writes it as
 * a literal with its unit (ttl_literal_with_unit): a number that reaches
 * the function as an interval ('7' as a bound parameter, a PREPARE
 * parameter, a variable, '7'::text::interval) counts seconds, and the
 * value no longer shows how it was written.  A bare number written in the
 * statement is refused whatever its size.  A window under a minute that is
 * meant stays possible: written in the statement ('30 seconds'), or as
 * idempotency.default_ttl, whose text is checked.
 */
void
idem_check_ttl_arg(FunctionCallInfo fcinfo, int argno, Interval *ttl,
				   const char *fname)
{
	char	   *shown;

	if (ttl_literal_with_unit(fcinfo, argno, ttl, fname))
		return;
	if (ttl->month != 0 || ttl->day != 0 || ttl->time <= 0 ||
		ttl->time >= 60 * USECS_PER_SEC)
		return;
	shown = DatumGetCString(DirectFunctionCall1(interval_out, IntervalPGetDatum(ttl)));
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("%s: ttl %s is shorter than a minute", fname, shown),
			 errdetail("A ttl under a minute that arrives as a value is refused: a number without a unit ('7', as a parameter, a variable or a cast) counts seconds, and the value no longer shows whether seconds were meant."),
			 errhint("Name the unit when the value is made, for example '7 days'; for a window under a minute, write it in the statement (ttl => '30 seconds') or set idempotency.default_ttl (SET LOCAL idempotency.default_ttl = '30 seconds') and pass no ttl.")));
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
 * 'infinity' gives the timestamp infinity.  Fails with 22023 for a ttl
 * that is not positive or reaches beyond timestamptz (idem_add_interval),
 * that is written as a bare number, or that is shorter than a minute and
 * not written with its unit (idem_check_ttl_arg).
 */
TimestampTz
idem_expiry(FunctionCallInfo fcinfo, int argno, TimestampTz now,
			const char *fname)
{
	if (argno >= 0 && argno < PG_NARGS() && !PG_ARGISNULL(argno))
	{
		Interval   *ttl = PG_GETARG_INTERVAL_P(argno);
		TimestampTz expires = idem_add_interval(now, ttl, "ttl", fname);

		idem_check_ttl_arg(fcinfo, argno, ttl, fname);
		return expires;
	}

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
