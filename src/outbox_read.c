/*-------------------------------------------------------------------------
 *
 * outbox_read.c
 *	  What idem_publish's fast path (outbox_publish.c) reads: the outbox's
 *	  tables opened and checked, the claim of this transaction, the topic's
 *	  settings and groups, and whether a message id is taken; each with the
 *	  test the SQL body (idem_publish_sql) makes, or none (then it declines).
 *
 *	  Locking: RowExclusiveLock on idem_outbox first, then AccessShareLock on
 *	  idem_outbox_topics (the caller takes its snapshot and reads the topic),
 *	  then on idem_records and idem_outbox_subscriptions, RowShareLock on
 *	  idem_outbox_aggregates for the aggregate's lock, RowExclusiveLock on
 *	  idem_outbox_runs for a topic with groups, and AccessShareLock on the
 *	  indexes read, each to transaction end, as the body's statements take
 *	  them.  Every table is opened by OID and checked for its name,
 *	  schema and kind after the lock; each index for its table, columns and
 *	  access method.  Row-level security that applies to the caller, or a
 *	  missing SELECT, makes the open decline.
 *	  Cache: per schema, the tables' OIDs, the position sequence and whether
 *	  Citus manages one of the outbox's tables or idem_records, until a relcache
 *	  invalidation of one of the tables or of all (an invalidation during
 *	  the open leaves the answer to this call only).
 *	  Visibility: every read is an index scan under the caller's snapshot;
 *	  a claim is this transaction's when its xmin is one of the
 *	  transaction's own ids (the only in-progress xmin a snapshot shows).
 *	  Memory: what is returned is copied into the current context.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/dependency.h"
#include "catalog/pg_am.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_index.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/rls.h"
#include "utils/timestamp.h"

#include "idempotency.h"
#include "citus.h"
#include "claim.h"
#include "compat.h"
#include "outbox.h"

/* A column the fast path reads or writes: its name and type. */
typedef struct OutboxColumn
{
	const char *name;
	Oid			type;
} OutboxColumn;

/* What checked_index requires of an index beyond its columns. */
typedef enum IndexKind
{
	INDEX_PLAIN,				/* nothing */
	INDEX_KEY,					/* unique, immediate, on exactly the columns */
	INDEX_KEY_NULLS_NOT_DISTINCT	/* and NULLS NOT DISTINCT */
} IndexKind;

/* The columns of idem_outbox in OB_* order. */
static const OutboxColumn outbox_columns[OB_NCOLUMNS] =
{
	{"id", UUIDOID},
	{"topic", TEXTOID},
	{"aggregate", TEXTOID},
	{"type", TEXTOID},
	{"payload", JSONBOID},
	{"headers", JSONBOID},
	{"scope", TEXTOID},
	{"key", TEXTOID},
	{"seq", INT4OID},
	{"position", INT8OID},
	{"xact_id", XID8OID},
	{"created_at", TIMESTAMPTZOID},
	{"pulled", BOOLOID},
};

static const char *const table_names[NTABLES] = {
	"idem_outbox", "idem_outbox_topics", "idem_records", "idem_outbox_subscriptions",
	"idem_outbox_aggregates", "idem_outbox_runs"
};

/* The lock each table is opened with: the body's statements'. */
static const LOCKMODE table_locks[NTABLES] = {
	RowExclusiveLock, AccessShareLock, AccessShareLock, AccessShareLock, RowShareLock,
	RowExclusiveLock
};

/* The columns of idem_outbox_runs in RUN_* order. */
static const OutboxColumn run_columns[RUN_NCOLUMNS] =
{
	{"consumer", TEXTOID},
	{"topic", TEXTOID},
	{"aggregate", TEXTOID},
	{"lone", UUIDOID},
	{"acked", INT8OID},
	{"available_at", TIMESTAMPTZOID},
};

/*
 * Per schema (the last one used): the tables' OIDs, idem_outbox's position
 * sequence and whether Citus manages idem_outbox or idem_records; forgotten
 * by a relcache invalidation of any of the tables, or of all.
 */
static Oid	cache_nsp = InvalidOid;
static Oid	cache_relid[NTABLES];
static Oid	cache_seq = InvalidOid;
static bool cache_citus_known = false;
static bool cache_citus = false;

static void outbox_forget(Oid relid);

/* Subscribe the cache to relcache invalidations (idem_publish_init). */
void
idem_outbox_read_init(void)
{
	idem_relcache_subscribe(outbox_forget);
}

static void
outbox_forget(Oid relid)
{
	bool		hit = !OidIsValid(relid);

	for (int i = 0; i < NTABLES && !hit; i++)
		hit = relid == cache_relid[i];
	if (hit)
	{
		cache_nsp = InvalidOid;
		for (int i = 0; i < NTABLES; i++)
			cache_relid[i] = InvalidOid;
		cache_seq = InvalidOid;
		cache_citus_known = false;
	}
}

/*
 * Open table i of schema nsp with lockmode, checked for its name and schema
 * after the lock (the OID cached, or looked up by name): NULL when there is
 * none.  A cache invalidated while locking is looked up again next call.
 */
static Relation
open_table(Oid nsp, int i, LOCKMODE lockmode)
{
	Relation	rel;

	if (!OidIsValid(cache_relid[i]))
	{
		cache_relid[i] = get_relname_relid(table_names[i], nsp);
		if (!OidIsValid(cache_relid[i]))
			return NULL;
	}
	rel = try_relation_open(cache_relid[i], lockmode);
	if (rel != NULL &&
		(RelationGetNamespace(rel) != nsp ||
		 rel->rd_rel->relkind != RELKIND_RELATION ||
		 strcmp(RelationGetRelationName(rel), table_names[i]) != 0))
	{
		relation_close(rel, lockmode);
		rel = NULL;
	}
	if (rel == NULL)
		cache_relid[i] = InvalidOid;
	return rel;
}

/*
 * The OID of index name of rel in schema nsp, locked (AccessShareLock, as
 * the scan takes it), when it is a plain btree index of rel on the table
 * columns cols (in order, first; nothing else is checked of later columns),
 * and, for a key (an arbiter of ON CONFLICT), unique on exactly them, not
 * deferrable and, if asked, NULLS NOT DISTINCT; else InvalidOid.
 */
static Oid
checked_index(Relation rel, Oid nsp, const char *name, const AttrNumber *cols, int ncols,
			  IndexKind kind)
{
	Oid			oid = get_relname_relid(name, nsp);
	Relation	idx;
	bool		ok;

	if (!OidIsValid(oid))
		return InvalidOid;
	idx = try_relation_open(oid, AccessShareLock);
	if (idx == NULL)
		return InvalidOid;
	ok = idx->rd_rel->relkind == RELKIND_INDEX &&
		idx->rd_rel->relam == BTREE_AM_OID &&
		idx->rd_index->indrelid == RelationGetRelid(rel) &&
		idx->rd_index->indisvalid &&
		idx->rd_index->indnkeyatts >= ncols &&
		heap_attisnull(idx->rd_indextuple, Anum_pg_index_indexprs, NULL) &&
		heap_attisnull(idx->rd_indextuple, Anum_pg_index_indpred, NULL) &&
		(kind == INDEX_PLAIN ||
		 (idx->rd_index->indisunique && idx->rd_index->indimmediate &&
		  idx->rd_index->indnkeyatts == ncols &&
		  (kind == INDEX_KEY || idx->rd_index->indnullsnotdistinct)));
	for (int i = 0; ok && i < ncols; i++)
		ok = idx->rd_index->indkey.values[i] == cols[i];
	relation_close(idx, NoLock);
	return ok ? oid : InvalidOid;
}

/* The attribute number of column name of type typid in rel, or 0. */
static AttrNumber
column(Relation rel, const char *name, Oid typid)
{
	TupleDesc	desc = RelationGetDescr(rel);

	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (!att->attisdropped && strcmp(NameStr(att->attname), name) == 0)
			return att->atttypid == typid ? att->attnum : 0;
	}
	return 0;
}

/*
 * Is idem_outbox as installed: the columns of outbox_columns in order (a
 * dropped column may come between), no other, no trigger, rule, generated
 * column, partitioning?  Its position sequence (the identity's) into *seq.
 */
static bool
outbox_shape_ok(Relation rel, Oid *seq)
{
	TupleDesc	desc = RelationGetDescr(rel);
	int			next = 0;

	if (rel->rd_rel->relispartition || rel->trigdesc != NULL || rel->rd_rules != NULL ||
		(desc->constr != NULL && desc->constr->has_generated_stored))
		return false;
	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (att->attisdropped)
			continue;
		if (next == OB_NCOLUMNS || att->atttypid != outbox_columns[next].type ||
			strcmp(NameStr(att->attname), outbox_columns[next].name) != 0)
			return false;
		if (next == OB_POSITION && att->attidentity != ATTRIBUTE_IDENTITY_BY_DEFAULT)
			return false;
		if (next == OB_POSITION && att->attnum != i + 1)
			return false;
		next++;
	}
	if (next != OB_NCOLUMNS)
		return false;
	if (!OidIsValid(cache_seq))
		cache_seq = IDEM_IDENTITY_SEQUENCE(rel, OB_POSITION + 1);
	*seq = cache_seq;
	return OidIsValid(*seq);
}

/* The attribute number of idem_outbox's column c (after outbox_shape_ok). */
AttrNumber
idem_outbox_att(Relation rel, int c)
{
	return column(rel, outbox_columns[c].name, outbox_columns[c].type);
}

/*
 * Is the record in slot a claim of this transaction: written by one of its
 * live transaction ids (the only in-progress xmin a snapshot shows), during
 * it, in a status a claim leaves?  (idem_publish_sql's test.)
 */
static bool
record_is_mine(HeapTuple tup, TupleDesc desc, TimestampTz xact_start)
{
	bool		isnull;
	Datum		d;
	char	   *status;

	if (!TransactionIdIsCurrentTransactionId(HeapTupleHeaderGetXmin(tup->t_data)))
		return false;
	d = heap_getattr(tup, IDEM_COL_UPDATED_AT, desc, &isnull);
	if (isnull || DatumGetTimestampTz(d) < xact_start)
		return false;
	d = heap_getattr(tup, IDEM_COL_STATUS, desc, &isnull);
	if (isnull)
		return false;
	status = TextDatumGetCString(d);
	return strcmp(status, IDEM_STATUS_CLAIMED) == 0 ||
		strcmp(status, IDEM_STATUS_IN_PROGRESS) == 0 ||
		strcmp(status, IDEM_STATUS_COMPLETED) == 0;
}

/*
 * The one claim of this transaction with the default ttl, into *scope and
 * *key (in the current context): false when there is none, or more than
 * one (idem_publish_sql then raises ID020).  Scans the expiries between
 * now() + ttl and clock_timestamp() + ttl, as idem_xact_claims does.
 */
static bool
found_claim(Relation records, Oid index, Snapshot snap, text **scope, text **key)
{
	Interval	ttl;
	TimestampTz xact_start = GetCurrentTransactionStartTimestamp();
	TimestampTz lo;
	TimestampTz hi;
	ScanKeyData skey[2];
	SysScanDesc scan;
	HeapTuple	tup;
	int			n = 0;

	if (idem_default_ttl(&ttl))
	{
		lo = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval,
													 TimestampTzGetDatum(xact_start),
													 IntervalPGetDatum(&ttl)));
		hi = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval,
													 TimestampTzGetDatum(GetCurrentTimestamp()),
													 IntervalPGetDatum(&ttl)));
	}
	else
	{
		TIMESTAMP_NOEND(lo);
		TIMESTAMP_NOEND(hi);
	}
	ScanKeyInit(&skey[0], IDEM_COL_EXPIRES_AT, BTGreaterEqualStrategyNumber,
				F_TIMESTAMPTZ_GE, TimestampTzGetDatum(lo));
	ScanKeyInit(&skey[1], IDEM_COL_EXPIRES_AT, BTLessEqualStrategyNumber,
				F_TIMESTAMPTZ_LE, TimestampTzGetDatum(hi));
	scan = systable_beginscan(records, index, true, snap, 2, skey);
	while (n < 2 && (tup = systable_getnext(scan)) != NULL)
	{
		bool		isnull;

		if (!record_is_mine(tup, RelationGetDescr(records), xact_start))
			continue;
		if (n++ == 0)
		{
			*scope = DatumGetTextPCopy(heap_getattr(tup, IDEM_COL_SCOPE, RelationGetDescr(records), &isnull));
			if (isnull)
				n = 2;			/* not as installed: let the body say so */
			*key = DatumGetTextPCopy(heap_getattr(tup, IDEM_COL_KEY, RelationGetDescr(records), &isnull));
			if (isnull)
				n = 2;
		}
	}
	systable_endscan(scan);
	return n == 1;
}

/* Is (scope, key) a claim of this transaction?  (idem_publish_sql's test.) */
static bool
named_claim(Relation records, Oid index, Snapshot snap, text *scope, text *key)
{
	ScanKeyData skey[2];
	SysScanDesc scan;
	HeapTuple	tup;
	bool		mine = false;

	ScanKeyEntryInitialize(&skey[0], 0, IDEM_COL_SCOPE, BTEqualStrategyNumber,
						   InvalidOid, C_COLLATION_OID, F_TEXTEQ, PointerGetDatum(scope));
	ScanKeyEntryInitialize(&skey[1], 0, IDEM_COL_KEY, BTEqualStrategyNumber,
						   InvalidOid, C_COLLATION_OID, F_TEXTEQ, PointerGetDatum(key));
	scan = systable_beginscan(records, index, true, snap, 2, skey);
	if ((tup = systable_getnext(scan)) != NULL)
		mine = record_is_mine(tup, RelationGetDescr(records),
							  GetCurrentTransactionStartTimestamp());
	systable_endscan(scan);
	return mine;
}

/* Does an index scan of one text equality find a row? */
static HeapTuple
text_probe(Relation rel, Oid index, AttrNumber att, Snapshot snap, text *value,
		   SysScanDesc *scan)
{
	ScanKeyData skey;

	ScanKeyEntryInitialize(&skey, 0, att, BTEqualStrategyNumber, InvalidOid,
						   C_COLLATION_OID, F_TEXTEQ, PointerGetDatum(value));
	*scan = systable_beginscan(rel, index, true, snap, 1, &skey);
	return systable_getnext(*scan);
}

/*
 * Open tables first to last of schema nsp into p->rels (those that are NULL
 * there), with the lock the body's statements take, checked for row-level
 * security and SELECT: false when the fast path does not apply (what was
 * opened stays in p->rels, for idem_outbox_close).
 */
static bool
open_tables(Oid nsp, OutboxWrite *p, int first, int last)
{
	for (int i = first; i <= last; i++)
	{
		if (p->rels[i] != NULL)
			continue;
		p->rels[i] = open_table(nsp, i, table_locks[i]);
		if (p->rels[i] == NULL)
			return false;
		if (check_enable_rls(RelationGetRelid(p->rels[i]), InvalidOid, true) == RLS_ENABLED ||
			(i != T_OUTBOX &&
			 pg_class_aclcheck(RelationGetRelid(p->rels[i]), GetUserId(), ACL_SELECT) != ACLCHECK_OK))
			return false;
	}
	return true;
}

/* Does Citus manage idem_outbox or idem_records?  (Cached per schema.) */
static bool
citus_managed(Oid nsp, OutboxWrite *p)
{
	bool		citus;

	if (cache_citus_known)
		return cache_citus;
	citus = idem_citus_table(RelationGetRelid(p->rels[T_OUTBOX])) ||
		idem_citus_table(RelationGetRelid(p->rels[T_RECORDS])) ||
		idem_citus_table(get_relname_relid(table_names[T_AGGREGATES], nsp)) ||
		idem_citus_table(get_relname_relid(table_names[T_RUNS], nsp));
	if (cache_nsp == nsp)
	{
		cache_citus = citus;
		cache_citus_known = true;
	}
	return citus;
}

/*
 * Open what the look at the topic needs, of schema nsp, into p: idem_outbox
 * first (its lock before any snapshot), then idem_outbox_topics and its
 * primary key.  False when the fast path does not apply (what was opened is
 * in p->rels, for idem_outbox_close).
 */
bool
idem_outbox_open_topic(Oid nsp, OutboxWrite *p)
{
	if (cache_nsp != nsp)
	{
		outbox_forget(InvalidOid);
		cache_nsp = nsp;
	}
	if (!open_tables(nsp, p, T_OUTBOX, T_TOPICS))
		return false;
	p->t_topic = column(p->rels[T_TOPICS], "topic", TEXTOID);
	p->t_relay = column(p->rels[T_TOPICS], "relay", TEXTOID);
	p->t_pull = column(p->rels[T_TOPICS], "pull", BOOLOID);
	if (!p->t_topic || !p->t_relay || !p->t_pull)
		return false;
	p->idx_topics = checked_index(p->rels[T_TOPICS], nsp, "idem_outbox_topics_pkey", &p->t_topic, 1, INDEX_KEY);
	return OidIsValid(p->idx_topics);
}

/*
 * Open and check the rest, after idem_outbox_open_topic: idem_records and
 * idem_outbox_subscriptions (AccessShareLock: it conflicts with neither
 * idem_outbox_topic's lock nor a subscription's, so taking it after the
 * snapshot changes nothing the reads see), the shapes, Citus, the indexes.
 */
bool
idem_outbox_open_rest(Oid nsp, OutboxWrite *p)
{
	AttrNumber	cols[2];

	if (!open_tables(nsp, p, T_RECORDS, T_SUBSCRIPTIONS) ||
		!outbox_shape_ok(p->rels[T_OUTBOX], &p->seq_oid) ||
		!idem_records_shape_ok(p->rels[T_RECORDS]) ||
		citus_managed(nsp, p))
		return false;
	p->s_topic = column(p->rels[T_SUBSCRIPTIONS], "topic", TEXTOID);
	p->s_consumer = column(p->rels[T_SUBSCRIPTIONS], "consumer", TEXTOID);
	if (!p->s_topic || !p->s_consumer)
		return false;
	cols[0] = idem_outbox_att(p->rels[T_OUTBOX], OB_ID);
	p->idx_pkey = checked_index(p->rels[T_OUTBOX], nsp, "idem_outbox_pkey", cols, 1, INDEX_KEY);
	cols[0] = IDEM_COL_EXPIRES_AT;
	p->idx_expires = checked_index(p->rels[T_RECORDS], nsp, "idem_records_expires_at_idx", cols, 1, INDEX_PLAIN);
	cols[0] = IDEM_COL_SCOPE;
	cols[1] = IDEM_COL_KEY;
	p->idx_records_pkey = checked_index(p->rels[T_RECORDS], nsp, "idem_records_pkey", cols, 2, INDEX_KEY);
	p->idx_subs = checked_index(p->rels[T_SUBSCRIPTIONS], nsp,
								"idem_outbox_subscriptions_topic_idx", &p->s_topic, 1, INDEX_PLAIN);
	return OidIsValid(p->idx_pkey) && OidIsValid(p->idx_expires) &&
		OidIsValid(p->idx_records_pkey) && OidIsValid(p->idx_subs);
}

/*
 * Under snap: is the topic relayed by the table only?  Its pull into
 * p->pull, and into p->ordered whether this message takes the aggregate's
 * lock (an aggregate, and the topic pulled).  Looked at first: a logical
 * message is the body's.
 */
bool
idem_outbox_topic_table(OutboxWrite *p, Snapshot snap)
{
	SysScanDesc scan;
	HeapTuple	tup;
	bool		ok = true;

	p->pull = true;				/* a topic without a row: table, pull */
	tup = text_probe(p->rels[T_TOPICS], p->idx_topics, p->t_topic, snap, p->topic, &scan);
	if (tup != NULL)
	{
		TupleDesc	desc = RelationGetDescr(p->rels[T_TOPICS]);
		bool		relay_null;
		bool		pull_null;
		Datum		relay = heap_getattr(tup, p->t_relay, desc, &relay_null);
		Datum		pull = heap_getattr(tup, p->t_pull, desc, &pull_null);

		ok = !relay_null && !pull_null && strcmp(TextDatumGetCString(relay), "table") == 0;
		p->pull = ok && DatumGetBool(pull);
	}
	systable_endscan(scan);
	p->ordered = p->aggregate != NULL && p->pull;
	return ok;
}

/*
 * Under snap, after idem_outbox_open_rest: the topic's groups into
 * p->groups (in index order).  False when one is not as installed.
 */
bool
idem_outbox_read_groups(OutboxWrite *p, Snapshot snap)
{
	TupleDesc	desc = RelationGetDescr(p->rels[T_SUBSCRIPTIONS]);
	SysScanDesc scan;
	HeapTuple	tup;
	bool		ok = true;

	p->groups = NIL;
	tup = text_probe(p->rels[T_SUBSCRIPTIONS], p->idx_subs, p->s_topic, snap, p->topic, &scan);
	for (; ok && tup != NULL; tup = systable_getnext(scan))
	{
		bool		isnull;
		Datum		d = heap_getattr(tup, p->s_consumer, desc, &isnull);

		ok = !isnull;
		if (ok)
			p->groups = lappend(p->groups, DatumGetTextPCopy(d));
	}
	systable_endscan(scan);
	return ok;
}

/*
 * Under snap, after idem_outbox_open_rest: is the claim this transaction's
 * (found: into p->scope and p->key)?  An explicit key needs no claim.
 */
bool
idem_outbox_claim(OutboxWrite *p, Snapshot snap)
{
	if (p->explicit_key)
		return true;
	return p->scope != NULL
		? named_claim(p->rels[T_RECORDS], p->idx_records_pkey, snap, p->scope, p->key)
		: found_claim(p->rels[T_RECORDS], p->idx_expires, snap, &p->scope, &p->key);
}

/*
 * Open idem_outbox_aggregates of schema nsp (RowShareLock, as FOR NO KEY
 * UPDATE takes it) into p, after idem_outbox_open_rest: false when it is
 * not as installed (its two columns, no trigger, rule or partitioning; its
 * primary key), or row-level security or a missing SELECT keeps it from
 * the fast path.
 */
bool
idem_outbox_open_aggregates(Oid nsp, OutboxWrite *p)
{
	Relation	rel;
	TupleDesc	desc;
	int			live = 0;
	AttrNumber	cols[2];

	if (!open_tables(nsp, p, T_AGGREGATES, T_AGGREGATES))
		return false;
	rel = p->rels[T_AGGREGATES];
	desc = RelationGetDescr(rel);
	for (int i = 0; i < desc->natts; i++)
		live += !TupleDescAttr(desc, i)->attisdropped;
	if (live != 2 || rel->rd_rel->relispartition || rel->trigdesc != NULL ||
		rel->rd_rules != NULL)
		return false;
	p->a_topic = column(rel, "topic", TEXTOID);
	p->a_aggregate = column(rel, "aggregate", TEXTOID);
	if (!p->a_topic || !p->a_aggregate)
		return false;
	cols[0] = p->a_topic;
	cols[1] = p->a_aggregate;
	p->idx_aggregates = checked_index(rel, nsp, "idem_outbox_aggregates_pkey", cols, 2, INDEX_KEY);
	return OidIsValid(p->idx_aggregates);
}

/*
 * Open idem_outbox_runs of schema nsp (RowExclusiveLock) into p, after
 * idem_outbox_open_rest: false when it is not as installed (the columns
 * the fast path writes, no trigger, rule, partitioning, identity or
 * generated column; its key on (topic, aggregate, lone, consumer)), or
 * row-level security or a missing SELECT keeps it from the fast path.
 */
bool
idem_outbox_open_runs(Oid nsp, OutboxWrite *p)
{
	Relation	rel;
	TupleDesc	desc;
	AttrNumber	cols[4];

	if (!open_tables(nsp, p, T_RUNS, T_RUNS))
		return false;
	rel = p->rels[T_RUNS];
	desc = RelationGetDescr(rel);
	if (rel->rd_rel->relispartition || rel->trigdesc != NULL || rel->rd_rules != NULL ||
		(desc->constr != NULL && desc->constr->has_generated_stored))
		return false;
	for (int i = 0; i < desc->natts; i++)
		if (TupleDescAttr(desc, i)->attidentity != '\0')
			return false;
	for (int c = 0; c < RUN_NCOLUMNS; c++)
		if ((p->r_atts[c] = column(rel, run_columns[c].name, run_columns[c].type)) == 0)
			return false;
	cols[0] = p->r_atts[RUN_TOPIC];
	cols[1] = p->r_atts[RUN_AGGREGATE];
	cols[2] = p->r_atts[RUN_LONE];
	cols[3] = p->r_atts[RUN_CONSUMER];
	/* NULLS NOT DISTINCT: one run per lone message or aggregate. */
	p->idx_runs = checked_index(rel, nsp, "idem_outbox_runs_key", cols, 4,
								INDEX_KEY_NULLS_NOT_DISTINCT);
	return OidIsValid(p->idx_runs);
}

/* Is there a message id under snap?  (ID021, or a duplicate: the body's.) */
bool
idem_outbox_id_taken(OutboxWrite *p, Snapshot snap, pg_uuid_t *id)
{
	ScanKeyData skey;
	SysScanDesc scan;
	bool		taken;

	ScanKeyInit(&skey, idem_outbox_att(p->rels[T_OUTBOX], OB_ID), BTEqualStrategyNumber,
				F_UUID_EQ, UUIDPGetDatum(id));
	scan = systable_beginscan(p->rels[T_OUTBOX], p->idx_pkey, true, snap, 1, &skey);
	taken = systable_getnext(scan) != NULL;
	systable_endscan(scan);
	return taken;
}

/* Close what idem_outbox_open_topic and _rest opened; the locks stay. */
void
idem_outbox_close(OutboxWrite *p)
{
	for (int i = NTABLES - 1; i >= 0; i--)
		if (p->rels[i] != NULL)
			table_close(p->rels[i], NoLock);
}
