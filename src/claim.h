/*-------------------------------------------------------------------------
 *
 * claim.h
 *	  Deciding one key: what the decision (claim.c), the fast path's mechanism
 *	  (claim_direct.c), the check of idem_records as installed (claim_table.c)
 *	  and the other callers of the decision share.
 *
 *	  A claim is decided in two places, tried in this order:
 *	    idem_claim_fast / idem_claim_fast_through (claim.c): the fast path
 *	      (claim_direct.c) without SPI: IDEM_CLAIM_ACQUIRED,
 *	      IDEM_CLAIM_DUPLICATE or IDEM_CLAIM_UNDECIDED ("take the SQL path");
 *	    idem_claim_spi (claim.c): the SQL path through SPI, with the
 *	      statements of an IdemClaimPlan; always decides.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDEM_CLAIM_H
#define IDEM_CLAIM_H

#include "idempotency.h"

#include "nodes/execnodes.h"
#include "utils/rel.h"

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
 * SET item of a takeover: a lease taken over after its mark
 * (effect_started_at) leaves its attempt in effect_unknown_attempt, kept
 * until the record expires.  One definition for idem_claim, idem_begin and
 * idem_claim_many; "now" as above.
 */
#define IDEM_UNKNOWN_ATTEMPT_SET_AT(now) \
	" effect_unknown_attempt = CASE WHEN r.expires_at OPERATOR(pg_catalog.<=) " now " THEN NULL" \
	"     WHEN r.status OPERATOR(pg_catalog.=) 'in_progress'" \
	"      AND r.effect_started_at IS NOT NULL THEN r.attempts" \
	"     ELSE r.effect_unknown_attempt END"

/* An open fast path of claims (claim_direct.c). */
typedef struct IdemDirect IdemDirect;

/* The state of an existing record that decides a claim (claim.c, claim_direct.c). */
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
 * All three are IDEM_REWRITTEN_PER_SHARD: on records with a shard key,
 * query.c runs idem_shard_rewrite's text of them (shard.c).
 */
typedef struct IdemClaimPlan
{
	IdemQuery  *insert;
	IdemQuery  *read;
	IdemQuery  *takeover;
	/* NULL, or picks the takeover of a round (and may set its parameters) */
	IdemQuery  *(*takeover_for) (Oid nsp, Datum *values);
	const char *verb;			/* "claim", "begin": in the duplicate log line */
	int			unknown_col;	/* the takeover's RETURNING column telling an
								 * unknown outcome (bool), 0: none */
	bool		log_in_progress;	/* false: the caller logs a live lease it
									 * meets (idem_begin, once it knows the
									 * owner session lives) */
} IdemClaimPlan;

typedef enum IdemClaimOutcome
{
	IDEM_CLAIM_ACQUIRED,		/* inserted or taken over */
	IDEM_CLAIM_DUPLICATE,		/* a live record answers the call */
	IDEM_CLAIM_UNDECIDED		/* fast path only: take the SQL path */
} IdemClaimOutcome;

/*
 * A takeover (idem_claim, idem_claim_many, idem_begin) gives up after this
 * many rounds of read and UPDATE without progress, with idem_takeover_stuck.
 */
#define IDEM_MAX_TAKEOVER_ROUNDS 16

/* claim.c */
extern void idem_claim_init(void);
extern IdemClaimOutcome idem_claim_fast(Oid nsp, text *scope, text *key,
										TimestampTz now, TimestampTz expires,
										bytea *fp, const char *fname);
extern IdemClaimOutcome idem_claim_fast_through(IdemDirect *d, text *scope,
												text *key, TimestampTz now,
												TimestampTz expires, bytea *fp,
												const char *fname);
extern IdemClaimOutcome idem_claim_spi(const IdemClaimPlan *plan, Oid nsp,
									   text *scope, text *key, Datum *values,
									   const char *nulls, TimestampTz now,
									   bytea *fp, const char *fname,
									   IdemRecordState *rec);
extern IdemClaimOutcome idem_claim_spi_plain(Oid nsp, text *scope, text *key,
											 TimestampTz now, TimestampTz expires,
											 bytea *fp, const char *fname);
extern void idem_claim_params(Datum *values, char *nulls, text *scope,
							  text *key, bytea *fp, TimestampTz now,
							  TimestampTz expires);
extern void idem_takeover_stuck(Oid nsp, const char *fname, text *scope,
								text *key);
extern void idem_fingerprint_mismatch(const char *fname, text *scope, text *key,
									  TimestampTz first_claimed);
extern void idem_count_takeover(const char *fname, text *scope, text *key,
								bool owner_gone, bool unknown);
extern void idem_log_duplicate(const char *verb, text *scope, text *key,
							   TimestampTz first_claimed, const char *status);

/* The counter a duplicate with this status goes to. */
static inline IdemStatKind
idem_duplicate_stat(const char *status)
{
	return strcmp(status, IDEM_STATUS_IN_PROGRESS) == 0 ?
		IDEM_STAT_IN_PROGRESS_CONFLICT : IDEM_STAT_DUPLICATE;
}

/*
 * claim_direct.c: the executor-level mechanism of the fast path (speculative
 * insertion without SPI); claim.c decides what it finds.
 */
typedef enum IdemDirectResult
{
	IDEM_DIRECT_INSERTED,		/* the record was inserted */
	IDEM_DIRECT_CONFLICT		/* a committed or own record holds the key */
} IdemDirectResult;

extern void idem_direct_init(void);
extern IdemDirect *idem_direct_open(Oid nsp, text *key);
extern IdemDirectResult idem_direct_insert(IdemDirect *d, text *scope, text *key,
										   TimestampTz now, TimestampTz expires,
										   bytea *fp, IdemRecordState *rec);
extern void idem_direct_close(IdemDirect *d);
extern bool idem_records_citus(Oid nsp);

/*
 * claim_table.c: is idem_records as the install script made it?  The
 * attribute numbers of its columns (1-based), as claim_direct.c writes them.
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
#define IDEM_NCOLUMNS			16

extern bool idem_records_shape_ok(Relation rel);
extern bool idem_records_constraints_hold(Relation rel, Oid nsp, const bool *nulls);
extern bool idem_records_pk_is_scope_key(ResultRelInfo *rri);

#endif							/* IDEM_CLAIM_H */
