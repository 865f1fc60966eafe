/*-------------------------------------------------------------------------
 *
 * idempotency.h
 *	  The one private header of the idempotency extension: the SQLSTATEs
 *	  it raises, its GUC variables, the record status names, and one
 *	  section per file of src/, in the order a call walks through them.
 *
 *	  Files and their concerns:
 *	    idempotency.c    module load, five of the ten settings (the others
 *	                     are stats.c's and worker.c's), input validation
 *	                     shared by all
 *	    shard.c          records with a shard key (co-location on Citus):
 *	                     its type, the F_at twins' shim, the statements'
 *	                     rewrite
 *	    query.c          prepared SPI plans per backend; idem_spi_connect;
 *	                     set-returning setup (idem_srf_begin)
 *	    spi_read.c       checked reads of idem_records' values from SPI
 *	                     results (type and NULL, 55000); calls no other file
 *	    claim.c          deciding one key: idem_claim, and the decision
 *	                     (fast path verdict, SPI insert/read/takeover,
 *	                     duplicate log and counts) that idem_claim_many and
 *	                     idem_begin share
 *	    direct.c         the fast path's mechanism: speculative insertion
 *	                     into idem_records without SPI
 *	    direct_table.c   is idem_records as the install script made it
 *	                     (shape, constraints, primary key)?
 *	    citus.c          what Citus's catalogs say (tables, shards, local
 *	                     placements); errors for what does not hold on
 *	                     Citus yet
 *	    citus_local.c    the fast path on this node's shard of a key
 *	    batch.c          idem_claim_many: batch claims in canonical key order
 *	    lease.c          idem_begin, idem_heartbeat, idem_finish, idem_fail,
 *	                     idem_await: two-phase records with fenced leases
 *	    records.c        idem_complete, idem_lookup, idem_release,
 *	                     idem_purge, idem_summary
 *	    token.c          idem_token_issue, idem_token_consume: one-time tokens
 *	    machine.c        state machines: compiling a definition, questions
 *	                     on a compiled machine
 *	    machine_cache.c  the per-backend machine cache, idem_machines_trigger
 *	    transition.c     idem_machine_define/drop, idem_can_transition,
 *	                     idem_transition, idem_sources, idem_guard_allows
 *	    guard_cache.c    the per-backend cache of guard triggers
 *	    guard_trigger.c  idem_guard_trigger: a guard at run time
 *	    guard.c          idem_guard, idem_unguard: the guard installer
 *	    stats.c          idem_stats counters in shared memory, pending counts
 *	                     per transaction, idem_stats, idem_stats_reset, and
 *	                     the setting idempotency.stats_max_scopes
 *	    worker.c         background purge: launcher and per-database
 *	                     workers, and the settings idempotency.purge*
 *	  batch.c, lease.c, records.c, token.c and transition.c export only
 *	  SQL-callable functions, so they have no section below.
 *	  The call graph has no cycle: shard.c and machine.c call no other
 *	  file, query.c calls only shard.c; stats.c and worker.c call only
 *	  query.c, so idempotency.c's _PG_init may call their init functions;
 *	  claim.c calls direct.c, which calls direct_table.c and citus.c
 *	  (neither calls another file) and citus_local.c (which calls only
 *	  citus.c), and batch.c and lease.c call claim.c; the files with F_at twins (claim.c, records.c,
 *	  lease.c, token.c, batch.c) call shard.c; the state machines form the
 *	  chain machine.c <- machine_cache.c <- transition.c -> guard.c, and
 *	  guard_trigger.c -> guard_cache.c -> machine_cache.c; machine_cache.c,
 *	  guard.c, guard_cache.c and guard_trigger.c also call citus.c;
 *	  claim.c, lease.c, records.c, batch.c, stats.c and direct.c read
 *	  idem_records through spi_read.c.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDEMPOTENCY_H
#define IDEMPOTENCY_H

#include "postgres.h"

#include "compat.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "nodes/execnodes.h"
#include "commands/trigger.h"
#include "utils/jsonb.h"
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

/* GUCs defined in idempotency.c (stats.c and worker.c define their own) */
extern bool idem_log_duplicates;
extern bool idem_direct_claim_enabled;
extern int	idem_max_attempts;

/*
 * SQL condition under which a live record may be taken over by a new
 * owner: it expired, it failed with a retryable error, or its lease ran
 * out.  The alias is r; "now" names the parameter holding the caller's
 * clock.  One definition for idem_claim, idem_begin and idem_claim_many.
 */
#define IDEM_CLAIMABLE_SQL_AT(now) \
	"(r.expires_at OPERATOR(pg_catalog.<=) " now \
	" OR r.status OPERATOR(pg_catalog.=) 'retryable'" \
	" OR (r.status OPERATOR(pg_catalog.=) 'in_progress'" \
	"     AND r.locked_until OPERATOR(pg_catalog.<=) " now "))"
#define IDEM_CLAIMABLE_SQL IDEM_CLAIMABLE_SQL_AT("$4")

/*
 * The counters of idem_stats, in the order of its columns.  See stats.c
 * for when each is counted (effects only when the transaction commits,
 * observations always).
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
	IDEM_STAT_NKINDS
} IdemStatKind;

/* idempotency.c: validation shared by the SQL-callable functions */
/* One relcache callback for every cache of the extension (idempotency.c). */
typedef void (*IdemRelcacheForget) (Oid relid);
extern void idem_relcache_subscribe(IdemRelcacheForget forget);

extern text *idem_arg_scope(FunctionCallInfo fcinfo, int argno, const char *fname);
extern text *idem_arg_key(FunctionCallInfo fcinfo, int argno, const char *fname);
extern void idem_check_key(text *key, const char *fname);
extern void idem_check_writable(const char *fname);
extern void idem_check_autocommit_claim(FunctionCallInfo fcinfo, const char *fname);
extern TimestampTz idem_expiry(FunctionCallInfo fcinfo, int argno,
							   TimestampTz now, const char *fname);
extern TimestampTz idem_add_interval(TimestampTz base, Interval *span,
									 const char *what, const char *fname);
extern bytea *idem_fingerprint_digest(FunctionCallInfo fcinfo, int argno);
extern char *idem_timestamptz_cstring(TimestampTz ts);

/* Same bytes?  (Fingerprint digests: stored against given.) */
static inline bool
idem_bytea_equal(bytea *a, bytea *b)
{
	return VARSIZE_ANY_EXHDR(a) == VARSIZE_ANY_EXHDR(b) &&
		memcmp(VARDATA_ANY(a), VARDATA_ANY(b), VARSIZE_ANY_EXHDR(a)) == 0;
}

/*
 * query.c: prepared SPI plans, one per IdemQuery, kept for the life of the
 * backend and re-prepared when the extension's schema changes.  The text
 * may use "@extschema@", replaced by the quoted name of the schema the
 * calling function lives in.
 */
#define IDEM_MAX_ARGS 8

typedef struct IdemQuery
{
	const char *sql;
	int			nargs;
	Oid			argtypes[IDEM_MAX_ARGS];
	bool		keyed;			/* addresses one record by $1 scope, $2 key */
	Oid			nsp;			/* schema the plan was prepared for */
	Oid			shard_type;		/* keyed: the shard key's type it was
								 * prepared for (shard.c), or InvalidOid */
	SPIPlanPtr	plan;
} IdemQuery;

extern Oid	idem_extension_schema(FunctionCallInfo fcinfo);
extern SPIPlanPtr idem_query_plan(IdemQuery *q, Oid nsp);
extern int	idem_query_exec(IdemQuery *q, Oid nsp, Datum *values,
							const char *nulls, bool read_only, long count);
extern void idem_query_init(void);
extern void idem_spi_connect(void);
extern void idem_check_srf(FunctionCallInfo fcinfo, const char *fname);
extern ReturnSetInfo *idem_srf_begin(FunctionCallInfo fcinfo, const char *fname,
									 int natts);

/*
 * shard.c: records with a shard key (idem_distribute(shard_key => type));
 * the F_at twins of the record functions.
 */
extern Oid	idem_shard_type(Oid nsp);
extern bool idem_shard_current(Datum *value);
extern Datum idem_shard_call(FunctionCallInfo fcinfo, Oid nsp, PGFunction target,
							 const char *fname);
extern char *idem_shard_rewrite(const char *sql, int param);
IDEM_NORETURN extern void idem_shard_refuse(Oid fn_oid, Oid nsp);

/*
 * claim.c: deciding one key (idem_claim; the decision idem_claim_many and
 * idem_begin share).
 */

/* An open fast path of claims (direct.c). */
typedef struct IdemDirect IdemDirect;

/* The state of an existing record that decides a claim (claim.c, direct.c). */
typedef struct IdemRecordState
{
	char	   *status;
	bytea	   *fingerprint;	/* NULL: none stored */
	TimestampTz created_at;
	TimestampTz expires_at;
	TimestampTz locked_until;
	bool		has_lock;		/* locked_until is not NULL */
} IdemRecordState;

/*
 * The statements of one kind of claim, for idem_claim_spi.  Parameters:
 * $1 scope, $2 key, $3 fingerprint digest, $4 now, $5 the expiry of a new
 * record (idem_claim_params), then the kind's own.
 * insert is an INSERT ... ON CONFLICT DO NOTHING (RETURNING allowed);
 * read selects status, fingerprint, created_at, expires_at, locked_until
 * (then any columns the caller reads on a duplicate); takeover is an
 * UPDATE whose WHERE includes IDEM_CLAIMABLE_SQL (RETURNING allowed).
 */
typedef struct IdemClaimPlan
{
	IdemQuery  *insert;
	IdemQuery  *read;
	IdemQuery  *takeover;
	/* NULL, or picks the takeover of a round (and may set its parameters) */
	IdemQuery  *(*takeover_for) (Oid nsp, Datum *values);
	const char *verb;			/* "claim", "begin": in the duplicate log line */
} IdemClaimPlan;

typedef enum IdemClaimOutcome
{
	IDEM_CLAIM_ACQUIRED,		/* inserted or taken over */
	IDEM_CLAIM_DUPLICATE		/* a live record answers the call */
} IdemClaimOutcome;

/*
 * A takeover (idem_claim, idem_claim_many, idem_begin) gives up after this
 * many rounds of read and UPDATE without progress, with idem_takeover_stuck.
 */
#define IDEM_MAX_TAKEOVER_ROUNDS 16

extern IdemClaimOutcome idem_claim_spi(const IdemClaimPlan *plan, Oid nsp,
									   text *scope, text *key, Datum *values,
									   const char *nulls, TimestampTz now,
									   bytea *fp, const char *fname,
									   IdemRecordState *rec);
extern void idem_claim_params(Datum *values, char *nulls, text *scope,
							  text *key, bytea *fp, TimestampTz now,
							  TimestampTz expires);
extern bool idem_claim_one(Oid nsp, text *scope, text *key, TimestampTz now,
						   TimestampTz expires, bytea *fp, const char *fname);
extern int	idem_claim_direct(Oid nsp, text *scope, text *key, TimestampTz now,
							  TimestampTz expires, bytea *fp, const char *fname);
extern int	idem_claim_direct_in(IdemDirect *d, text *scope, text *key,
								 TimestampTz now, TimestampTz expires, bytea *fp,
								 const char *fname);
extern void idem_takeover_stuck(Oid nsp, const char *fname, text *scope,
								text *key);
extern void idem_fingerprint_mismatch(const char *fname, text *scope, text *key,
									  TimestampTz first_claimed);
extern void idem_log_duplicate_line(const char *verb, text *scope, text *key,
									TimestampTz first_claimed, const char *status);

/*
 * With idempotency.log_duplicates, log that a call ("claim", "begin") met
 * the live record of (scope, key).  Inline, so that a duplicate costs one
 * test when the setting is off, as before it was shared.
 */
static inline void
idem_log_duplicate(const char *verb, text *scope, text *key,
				   TimestampTz first_claimed, const char *status)
{
	if (idem_log_duplicates)
		idem_log_duplicate_line(verb, scope, key, first_claimed, status);
}

/* The counter a duplicate with this status goes to. */
static inline IdemStatKind
idem_duplicate_stat(const char *status)
{
	return strcmp(status, IDEM_STATUS_IN_PROGRESS) == 0 ?
		IDEM_STAT_IN_PROGRESS_CONFLICT : IDEM_STAT_DUPLICATE;
}

/*
 * direct.c: the executor-level mechanism of the fast path (speculative
 * insertion without SPI); claim.c decides what it finds.
 */
typedef enum IdemDirectResult
{
	IDEM_DIRECT_DECLINED,		/* not applicable: nothing done, use SPI */
	IDEM_DIRECT_INSERTED,		/* the record was inserted */
	IDEM_DIRECT_CONFLICT		/* a committed or own record holds the key */
} IdemDirectResult;

extern IdemDirect *idem_direct_open(Oid nsp);
extern IdemDirectResult idem_direct_claim_key(IdemDirect *d, text *scope, text *key,
											  TimestampTz now, TimestampTz expires,
											  bytea *fp, IdemRecordState *rec);
extern void idem_direct_close(IdemDirect *d);
extern IdemDirectResult idem_direct_claim(Oid nsp, text *scope, text *key,
										  TimestampTz now, TimestampTz expires,
										  bytea *fp, IdemRecordState *rec);
extern bool idem_records_citus(Oid nsp);

/*
 * direct_table.c: is idem_records as the install script made it?  The
 * attribute numbers of its columns (1-based), as direct.c writes them.
 */
#define IDEM_COL_SCOPE			1
#define IDEM_COL_KEY			2
#define IDEM_COL_STATUS			3
#define IDEM_COL_FINGERPRINT	4
#define IDEM_COL_CREATED_AT		6
#define IDEM_COL_UPDATED_AT		7
#define IDEM_COL_EXPIRES_AT		8
#define IDEM_COL_LOCKED_UNTIL	9
#define IDEM_COL_ATTEMPTS		11
#define IDEM_NCOLUMNS			12

extern bool idem_records_shape_ok(Relation rel);
extern bool idem_records_constraints_hold(Relation rel, Oid nsp, const bool *nulls);
extern bool idem_records_pk_is_scope_key(ResultRelInfo *rri);

/*
 * citus.c: what Citus's catalogs say (false everywhere without Citus),
 * and the errors for what does not hold on Citus yet.
 */
extern bool idem_citus_table(Oid relid);
extern int32 idem_citus_local_group(void);
extern void idem_citus_shard_name(char *out, const char *name, int64 shardid);

/* citus_local.c: the fast path on this node's shard of a key. */
extern Relation idem_citus_local_shard(Relation records, text *key);
extern bool idem_citus_shard_of(Relation rel, Oid logical);
extern void idem_refuse_citus_worker_tokens(bool records_citus, const char *fname);
/* guards on distributed tables (guard.c, guard_cache.c, machine_cache.c) */
extern bool idem_citus_partition(Oid relid, char *method, AttrNumber *distatt,
								 int32 *colocation);
extern bool idem_citus_guardable(Oid relid, const char *table, const char *fname);
extern bool idem_citus_shard_rel(Relation rel, Oid *logical, int64 *shardid,
								 char **minvalue);
extern Oid	idem_citus_local_placement(Oid logical, const char *minvalue);

/*
 * machine.c: state machine definitions, compiled.
 */
/* Limit on machine names, in bytes (a CHECK on idem_machines says the same). */
#define IDEM_MAX_MACHINE_BYTES	63
/*
 * Limits on a machine's size (machine.c; docs/reference.md): at these
 * sizes a compile takes well under a second (54000 beyond).
 */
#define IDEM_MAX_MACHINE_STATES			100000
#define IDEM_MAX_MACHINE_TRANSITIONS	1000000

/*
 * A compiled state machine.  When idem_machine_get sets *cached, the
 * machine belongs to the per-backend cache in machine_cache.c and stays valid
 * until idem_machine_generation changes (a definition changed, in any
 * session); otherwise it lives in the caller's memory context and is for
 * the current call only.  A caller that uses a cached machine across
 * anything that may accept invalidations (detoasting an argument, SPI, a
 * catalog lookup, a lock, user code) pins it (idem_machine_pin) for that
 * time: an invalidation then retires the machine instead of freeing it.
 */
typedef struct IdemMachine IdemMachine;

extern uint64 idem_machine_generation;

extern void idem_check_machine_name(const char *name, int len, const char *fname);
extern IdemMachine *idem_machine_compile(const char *name, int namelen,
										 Jsonb *def, const char *fname);
extern void idem_machine_free(IdemMachine *m);
extern void idem_machine_set_parent(IdemMachine *m, MemoryContext parent);
extern const char *idem_machine_name(const IdemMachine *m);
extern const char *idem_machine_state_name(const IdemMachine *m, int state);
extern int	idem_machine_state(const IdemMachine *m, const char *state, int len);
extern bool idem_machine_is_initial(const IdemMachine *m, int state);
extern bool idem_machine_allows(const IdemMachine *m, int from, int to);
extern char *idem_machine_state_list(const IdemMachine *m);
extern char *idem_machine_initial_list(const IdemMachine *m);
extern char *idem_machine_targets_hint(const IdemMachine *m, int from);
extern int	idem_machine_nstates(const IdemMachine *m);

/* transition.c: the rule of a guard, one verdict for WHEN and trigger. */
typedef enum IdemGuardVerdict
{
	IDEM_GUARD_ALLOWED,			/* a declared transition, or initial state */
	IDEM_GUARD_UNCHANGED,		/* the same value (NULL included) */
	IDEM_GUARD_BAD_INITIAL,		/* entering (INSERT, or from NULL) not initial */
	IDEM_GUARD_UNKNOWN_TO,		/* the new value is not a state */
	IDEM_GUARD_UNKNOWN_FROM,	/* the old value is not a state */
	IDEM_GUARD_UNDECLARED		/* both states, no such transition */
} IdemGuardVerdict;

extern IdemGuardVerdict idem_guard_verdict(const IdemMachine *m, const text *from,
										   const text *to, bool insert);

/* machine_cache.c */
extern IdemMachine *idem_machine_get(Oid nsp, const char *name, int len,
									 const char *fname, bool *cached);
/* Hold every machine in use across what may accept invalidations. */
extern void idem_machine_pin(void);
extern void idem_machine_unpin(void);
extern Oid	idem_machines_relid(Oid nsp);

/*
 * guard_cache.c, guard_trigger.c, guard.c: table guards.  A GuardEntry is
 * guard_cache.c's entry for one trigger.
 */
/*
 * The arguments of a guard trigger: machine, status column, version column
 * or '', role; a log trigger on a Citus distributed table has a fifth, its
 * history table (schema-qualified, quoted as needed).
 */
#define IDEM_GUARD_NARGS	4
/* The fourth trigger argument. */
#define IDEM_GUARD_ROLE_CHECK	"check"
#define IDEM_GUARD_ROLE_VERSION	"version"
#define IDEM_GUARD_ROLE_LOG		"log"
#define IDEM_GUARD_ROLE_CHILDREN	"children"

typedef enum GuardRole
{
	GUARD_CHECK,
	GUARD_VERSION,
	GUARD_LOG,
	GUARD_CHILDREN
} GuardRole;

typedef struct GuardEntry
{
	Oid			tgoid;			/* hash key */
	bool		valid;			/* usable as is */
	bool		stale;			/* invalidated since the build started */
	int			busy;			/* calls of its trigger running (nested
								 * through user code: counted) */
	struct GuardEntry *orphan_next; /* stale and busy: the orphan list */
	Oid			relid;
	MemoryContext cxt;			/* the strings and arrays below */
	AttrNumber	status_att;
	AttrNumber	version_att;	/* 0: no version column */
	bool		version_int8;
	GuardRole	role;
	int			machine_len;
	char		machine[IDEM_MAX_MACHINE_BYTES + 1];
	IdemMachine *m;				/* valid while m_gen is current */
	uint64		m_gen;
	char	   *table_name;		/* schema-qualified, quoted as needed; on a
								 * Citus shard, the distributed table's */
	char	   *status_name;
	/* on a Citus shard: its shardminvalue (NULL otherwise, or a reference table) */
	bool		on_shard;
	char	   *shard_min;
	/* history (AFTER trigger only); history_table NULL: idem_transition_log */
	char	   *history_table;
	AttrNumber	dist_att;		/* with history_table: the distribution column */
	int			npk;
	AttrNumber *pk_atts;
	SPIPlanPtr	log_plan;
} GuardEntry;

extern GuardEntry *idem_guard_entry(FunctionCallInfo fcinfo, TriggerData *td);
extern IdemMachine *idem_guard_machine(GuardEntry *e, FunctionCallInfo fcinfo,
									  TriggerData *td);
extern char *idem_guard_doing(TriggerData *td, const char *table);
extern void idem_not_a_guard(Trigger *tg);
extern char *idem_guards_of_machine(Oid nsp, const char *machine);
extern bool idem_guard_trigger_is_real(int16 tgtype, int tgnattr, const char *tgqual,
									   int nargs, char **args, Oid allows,
									   GuardRole *role);
extern Oid	idem_guard_allows_oid(Oid nsp);
extern bool idem_rel_guarded(Relation rel, Oid trigfunc, Oid allows,
							 const char *machine, const char *column);

/* stats.c (the enum IdemStatKind is above) */
extern void idem_stats_init(void);
extern void idem_stats_add(text *scope, IdemStatKind kind, int64 n);
extern void idem_stats_count_rows(IdemStatKind kind);
#define idem_stats_count(scope, kind) idem_stats_add((scope), (kind), 1)

/* worker.c */
extern void idem_worker_init(void);

#endif							/* IDEMPOTENCY_H */
