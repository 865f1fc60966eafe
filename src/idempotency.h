/*-------------------------------------------------------------------------
 *
 * idempotency.h
 *	  The shared header of the idempotency extension: its SQLSTATEs, limits and
 *	  record statuses, the few interfaces nearly every file uses (argument
 *	  checks, the relcache dispatcher, prepared statements, shard keys,
 *	  statistics), and the init functions _PG_init calls that have no header
 *	  of their own concern.  Rule: it stays under 200 lines (make lint).
 *
 *	  What only some files share has a header of its own, by concern:
 *	    claim.h    deciding one key
 *	    citus.h    Citus's catalogs and the fast path on a shard
 *	    machine.h  state machines (machine_draft.h: parsing to compiling only)
 *	    guard.h    table guards
 *	    spi_read.h checked reads of idem_records from SPI results
 *	    compat.h   every difference between PostgreSQL 15 and 19
 *	  docs/internals.md maps the files and which calls which.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDEMPOTENCY_H
#define IDEMPOTENCY_H

#include "postgres.h"

#include "compat.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/timestamp.h"

/*
 * SQLSTATEs of this extension (class "ID", implementation-defined).
 * Every one is documented in the README's reference.
 */
#define ERRCODE_IDEM_FINGERPRINT_MISMATCH	MAKE_SQLSTATE('I','D','0','0','1')
#define ERRCODE_IDEM_NO_RECORD				MAKE_SQLSTATE('I','D','0','0','2')
#define ERRCODE_IDEM_LEASE_LOST				MAKE_SQLSTATE('I','D','0','0','3')
#define ERRCODE_IDEM_ILLEGAL_TRANSITION		MAKE_SQLSTATE('I','D','0','0','4')
#define ERRCODE_IDEM_WRONG_STATUS			MAKE_SQLSTATE('I','D','0','0','5')
#define ERRCODE_IDEM_REPEATED_TRANSITION	MAKE_SQLSTATE('I','D','0','0','6')

/* Limits on identifiers, in bytes of the server encoding. */
#define IDEM_MAX_KEY_BYTES		1024
#define IDEM_MAX_SCOPE_BYTES	128

/* Record statuses (the CHECK constraint on idem_records lists the same). */
#define IDEM_STATUS_CLAIMED		"claimed"
#define IDEM_STATUS_IN_PROGRESS	"in_progress"
#define IDEM_STATUS_COMPLETED	"completed"
#define IDEM_STATUS_FAILED		"failed"
#define IDEM_STATUS_RETRYABLE	"retryable"
#define IDEM_STATUS_ISSUED		"issued"	/* one-time token, not yet used */
#define IDEM_STATUS_CONSUMED	"consumed"	/* one-time token, used */

/* Init functions (module.c's _PG_init): settings, shared memory, callbacks. */
extern void idem_args_init(void);
extern void idem_lease_init(void);
extern void idem_stats_init(void);
extern void idem_worker_init(void);
extern void idem_purge_round_init(void);
extern bool idem_purge_round(const char *dbname);
extern void idem_query_init(void);
extern void idem_relcache_init(void);
extern void idem_shard_init(void);
extern void idem_publish_init(void);

/*
 * lease_await.c: is the session of backend pid, started then, still
 * there?  Has idem_records of a schema the columns of 0.6.0?
 */
extern bool idem_session_alive(int32 pid, TimestampTz started);
extern bool idem_records_current(Oid nsp);

/* args.c: the argument checks every SQL-callable function shares. */
extern text *idem_arg_scope(FunctionCallInfo fcinfo, int argno, const char *fname);
extern text *idem_arg_key(FunctionCallInfo fcinfo, int argno, const char *fname);
extern void idem_check_key(text *key, const char *fname);
extern void idem_check_writable(const char *fname);
extern void idem_check_autocommit_claim(FunctionCallInfo fcinfo, const char *fname);
extern void idem_check_ttl_arg(FunctionCallInfo fcinfo, int argno, Interval *ttl,
							   const char *fname);
extern TimestampTz idem_expiry(FunctionCallInfo fcinfo, int argno,
							   TimestampTz now, const char *fname);
extern TimestampTz idem_add_interval(TimestampTz base, Interval *span,
									 const char *what, const char *fname);
extern bytea *idem_fingerprint_digest(FunctionCallInfo fcinfo, int argno);
extern bool idem_default_ttl(Interval *ttl);
extern char *idem_timestamptz_cstring(TimestampTz ts);

/* Same bytes?  (Fingerprint digests: stored against given.) */
static inline bool
idem_bytea_equal(bytea *a, bytea *b)
{
	return VARSIZE_ANY_EXHDR(a) == VARSIZE_ANY_EXHDR(b) &&
		memcmp(VARDATA_ANY(a), VARDATA_ANY(b), VARSIZE_ANY_EXHDR(a)) == 0;
}

/* relcache.c: one relcache callback for every cache of the extension. */
typedef void (*IdemRelcacheForget) (Oid relid);
extern void idem_relcache_subscribe(IdemRelcacheForget forget);

/*
 * query.c: prepared SPI plans, one per IdemQuery, kept for the life of the
 * backend and re-prepared when the extension's schema changes.  The text
 * may use "@extschema@", replaced by the quoted name of the schema the
 * calling function lives in.
 */
#define IDEM_MAX_ARGS 12

typedef struct IdemQuery
{
	const char *sql;
	int			nargs;
	Oid			argtypes[IDEM_MAX_ARGS];

	/*
	 * true (IDEM_REWRITTEN_PER_SHARD): the statement addresses one record
	 * by $1 scope, $2 key, and while idem_records has a shard_key column
	 * the text that runs is not sql but idem_shard_rewrite(sql) (shard.c),
	 * with the F_at call's shard key as one more parameter.
	 */
	bool		rewritten_per_shard;
	Oid			nsp;			/* schema the plan was prepared for */
	Oid			shard_type;		/* rewritten: the shard key's type it was
								 * prepared for, or InvalidOid */
	SPIPlanPtr	plan;
} IdemQuery;

/* The last field of an IdemQuery's initializer that sets rewritten_per_shard. */
#define IDEM_REWRITTEN_PER_SHARD true

extern Oid	idem_extension_schema(FunctionCallInfo fcinfo);
extern SPIPlanPtr idem_query_plan(IdemQuery *q, Oid nsp);
extern int	idem_query_exec(IdemQuery *q, Oid nsp, Datum *values,
							const char *nulls, bool read_only, long count);
extern void idem_spi_connect(void);
extern void idem_check_srf(FunctionCallInfo fcinfo, const char *fname);
extern ReturnSetInfo *idem_srf_begin(FunctionCallInfo fcinfo, const char *fname,
									 int natts);

/*
 * shard.c: records with a shard key (idem_distribute(shard_key => type));
 * the F_at twins of the record functions (IDEM_SHARD_TWIN).
 */
extern Oid	idem_shard_type(Oid nsp);
extern bool idem_shard_current(Datum *value);
extern Datum idem_shard_call(FunctionCallInfo fcinfo, Oid nsp, PGFunction target,
							 const char *fname);
extern char *idem_shard_rewrite(const char *sql, int param);
IDEM_NORETURN extern void idem_shard_refuse(Oid fn_oid, Oid nsp);

/*
 * The F_at twin of the SQL-callable function F (sql/idempotency_shard.sql):
 * F_at(shard_key "any", the arguments of F) is F for idem_records
 * distributed by a shard key; shard_key is the record's distribution
 * value.  Each fails as F does, and as idem_shard_call says (22004 NULL
 * shard_key, 55000 records without a shard key, the conversion's error).
 */
#define IDEM_SHARD_TWIN(f) \
	PG_FUNCTION_INFO_V1(f##_at); \
	Datum \
	f##_at(PG_FUNCTION_ARGS) \
	{ \
		return idem_shard_call(fcinfo, idem_extension_schema(fcinfo), f, \
							   #f "_at"); \
	} \
	extern int	no_such_variable

/*
 * stats.c: the counters of idem_stats, in the order of its columns (see
 * stats.c for when each is counted: effects only when the transaction
 * commits, observations always).
 */
typedef enum IdemStatKind
{
	IDEM_STAT_CLAIMED,				/* acquired: idem_claim true, idem_begin 'acquired' */
	IDEM_STAT_DUPLICATE,			/* a live record answered the call */
	IDEM_STAT_IN_PROGRESS_CONFLICT, /* a live lease answered the call */
	IDEM_STAT_FINGERPRINT_MISMATCH, /* ID001 raised */
	IDEM_STAT_TAKEOVER,				/* of the claimed: took over an existing record */
	IDEM_STAT_COMPLETED,			/* idem_complete, idem_finish */
	IDEM_STAT_FAILED,				/* idem_fail */
	IDEM_STAT_PURGED,				/* expired records deleted by idem_purge */
	IDEM_STAT_OWNER_GONE_TAKEOVER,	/* of the takeovers: the bound owner's session was gone */
	IDEM_STAT_UNKNOWN_TAKEOVER,		/* of the takeovers: the outside effect is unknown */
	IDEM_STAT_NKINDS
} IdemStatKind;

extern void idem_stats_add(text *scope, IdemStatKind kind, int64 n);
extern void idem_stats_count_rows(IdemStatKind kind);
#define idem_stats_count(scope, kind) idem_stats_add((scope), (kind), 1)

#endif							/* IDEMPOTENCY_H */
