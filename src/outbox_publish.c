/*-------------------------------------------------------------------------
 *
 * outbox_publish.c
 *	  idem_publish in the C edition: a fast path for the common publication
 *	  (to a topic relayed by the table) that writes the message without SPI,
 *	  and otherwise the shared SQL body, idem_publish_sql, called with the
 *	  same arguments.
 *
 *	  Rule: the fast path writes what idem_publish_sql would write, or
 *	  declines having written nothing the body would not; every error of a
 *	  publication is the body's.  It takes a message bound to the one claim
 *	  this transaction holds with the default ttl, to a claim named by
 *	  scope => and key =>, or to an explicit key, to a topic relayed through
 *	  the table only, and whose id is not taken: an aggregate of a pulled
 *	  topic after the aggregate's lock (outbox_order.c), and a topic with
 *	  groups with their runs (outbox_runs.c).
 *	  It declines when idempotency.direct_publish is off; under REPEATABLE
 *	  READ or SERIALIZABLE; in a read-only transaction; for a claim without
 *	  a transaction id (there is none); and where outbox_read.c declines
 *	  (row-level security, privileges, a table or index not as installed).
 *
 *	  Locking: the tables as the body's statements lock them (outbox_read.c);
 *	  a snapshot taken after idem_outbox's lock, as an INSERT's own is (a
 *	  publisher that reads a topic as not pulled writes before the owner's
 *	  idem_outbox_topic(pull => true) commits, or sees it), and a new one
 *	  after the aggregate's lock, as the body's INSERT takes it (the topic
 *	  and its groups are read under it).  A claim's id is looked for
 *	  under it, then inserted plainly (no other transaction can publish it);
 *	  an explicit key's as ON CONFLICT DO NOTHING does, declining when the
 *	  id is taken.  The insertion runs the executor's permission check (so
 *	  ExecutorCheckPerms_hook sees an INSERT), NOT NULL and CHECK
 *	  constraints; a trigger or rule on idem_outbox makes it decline.
 *	  Visibility: a CommandCounterIncrement before each snapshot, as SPI
 *	  makes before a statement, so a claim written earlier in the same
 *	  statement is seen; the message carries the current command id, marked
 *	  used.  Memory: a private executor state, freed before returning; the
 *	  rest per call.  The body's calls count as the executor counts a call.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/sysattr.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/dependency.h"
#include "catalog/pg_am.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_index.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "executor/executor.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/rls.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"
#include "utils/xid8.h"

#include "idempotency.h"
#include "compat.h"
#include "outbox.h"

PG_FUNCTION_INFO_V1(idem_publish);

/* The arguments of idem_publish, in order. */
enum
{
	ARG_TOPIC, ARG_PAYLOAD, ARG_KEY, ARG_AGGREGATE, ARG_HEADERS, ARG_SCOPE,
	ARG_TYPE, ARG_SEQ, NARGS
};

/* idempotency.direct_publish: may idem_publish take the fast path at all? */
static bool direct_publish = true;

static bool publish_fast(FunctionCallInfo fcinfo, Oid nsp, Datum *result);
static Datum publish_sql(FunctionCallInfo fcinfo, Oid nsp);

/*
 * Define idempotency.direct_publish and subscribe the cache to relcache
 * invalidations (module.c's _PG_init).
 */
void
idem_publish_init(void)
{
	DefineCustomBoolVariable("idempotency.direct_publish",
							 "Lets idem_publish write a message without SPI where it can.",
							 "Off: every publication runs the SQL body (for diagnosis; slower, same results).",
							 &direct_publish,
							 true,
							 PGC_USERSET,
							 0,
							 NULL,
							 NULL,
							 NULL);
	idem_outbox_read_init();
}

/*
 * idem_publish(topic, payload, key, aggregate, headers, scope, type, seq):
 * the fast path, or the SQL body.
 */
Datum
idem_publish(PG_FUNCTION_ARGS)
{
	Oid			nsp = idem_extension_schema(fcinfo);
	Datum		result;

	if (publish_fast(fcinfo, nsp, &result))
		PG_RETURN_DATUM(result);
	return publish_sql(fcinfo, nsp);
}

/*
 * Call idem_publish_sql of schema nsp (the same eight arguments, by their
 * declared types) with the caller's arguments and return its result.
 */
static Datum
publish_sql(FunctionCallInfo fcinfo, Oid nsp)
{
	static const Oid types[NARGS] = {
		TEXTOID, JSONBOID, TEXTOID, TEXTOID, JSONBOID, TEXTOID, TEXTOID, INT4OID
	};
	oidvector  *argtypes = buildoidvector(types, NARGS);
	Oid			fn;
	FmgrInfo	flinfo;
	PgStat_FunctionCallUsage usage;
	Datum		result;

	LOCAL_FCINFO(sub, NARGS);

	fn = GetSysCacheOid3(PROCNAMEARGSNSP, Anum_pg_proc_oid,
						 CStringGetDatum("idem_publish_sql"),
						 PointerGetDatum(argtypes), ObjectIdGetDatum(nsp));
	if (!OidIsValid(fn))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("idem_publish: function idem_publish_sql is missing from schema \"%s\"",
						get_namespace_name(nsp)),
				 errdetail("idem_publish runs it for every publication its fast path does not take."),
				 errhint("Reinstall the extension (DROP EXTENSION idempotency; CREATE EXTENSION idempotency).")));
	fmgr_info(fn, &flinfo);
	InitFunctionCallInfoData(*sub, &flinfo, NARGS, fcinfo->fncollation, NULL, NULL);
	for (int i = 0; i < NARGS; i++)
		sub->args[i] = fcinfo->args[i];
	/* Counted as the executor counts a call (track_functions = pl). */
	pgstat_init_function_usage(sub, &usage);
	result = FunctionCallInvoke(sub);
	pgstat_end_function_usage(&usage, true);
	fcinfo->isnull = sub->isnull;
	return result;
}

/* ------------------------------------------------------------------------
 * The fast path
 * ------------------------------------------------------------------------
 */

/* A text argument's bytes, or -1 when it is NULL. */
static int
arg_len(FunctionCallInfo fcinfo, int argno, text **out)
{
	if (PG_ARGISNULL(argno))
	{
		*out = NULL;
		return -1;
	}
	*out = PG_GETARG_TEXT_PP(argno);
	return VARSIZE_ANY_EXHDR(*out);
}

/*
 * The message id: idem_outbox_id(topic, key, scope, seq), the SHA-256 of
 * the same string, made in the database encoding and converted to UTF-8.
 */
static pg_uuid_t *
message_id(text *topic, text *key, text *scope, int32 seq)
{
	StringInfoData s;
	char	   *utf8;
	uint8		digest[PG_SHA256_DIGEST_LENGTH];
	pg_uuid_t  *id = (pg_uuid_t *) palloc(sizeof(pg_uuid_t));

	initStringInfo(&s);
	appendStringInfoString(&s, "idempotency.outbox.v1");
	if (scope != NULL)
	{
		appendStringInfo(&s, ":claim:%d:", pg_mbstrlen_with_len(VARDATA_ANY(scope), VARSIZE_ANY_EXHDR(scope)));
		appendBinaryStringInfo(&s, VARDATA_ANY(scope), VARSIZE_ANY_EXHDR(scope));
	}
	else
		appendStringInfoString(&s, ":key");
	appendStringInfo(&s, ":%d:", pg_mbstrlen_with_len(VARDATA_ANY(key), VARSIZE_ANY_EXHDR(key)));
	appendBinaryStringInfo(&s, VARDATA_ANY(key), VARSIZE_ANY_EXHDR(key));
	appendStringInfo(&s, ":%d:", pg_mbstrlen_with_len(VARDATA_ANY(topic), VARSIZE_ANY_EXHDR(topic)));
	appendBinaryStringInfo(&s, VARDATA_ANY(topic), VARSIZE_ANY_EXHDR(topic));
	appendStringInfo(&s, ":%d", seq);

	utf8 = pg_server_to_any(s.data, s.len, PG_UTF8);
	idem_sha256(utf8, strlen(utf8), digest);
	memcpy(id->data, digest, UUID_LEN);
	/* overlay(... '8' at hex digits 13 and 17): the version and variant. */
	id->data[6] = (id->data[6] & 0x0F) | 0x80;
	id->data[8] = (id->data[8] & 0x0F) | 0x80;
	return id;
}

/*
 * The arguments into p, when the body would accept them all and the claim
 * is the transaction's one or a named one: else false (the body decides).
 */
static bool
read_args(FunctionCallInfo fcinfo, OutboxWrite *p)
{
	int			len;

	if (!direct_publish || IsolationUsesXactSnapshot() || XactReadOnly)
		return false;
	len = arg_len(fcinfo, ARG_TOPIC, &p->topic);
	if (len < 1 || len > 128)
		return false;
	len = arg_len(fcinfo, ARG_KEY, &p->key);
	if (len == 0 || len > 1024)
		return false;
	len = arg_len(fcinfo, ARG_AGGREGATE, &p->aggregate);
	if (len == 0 || len > 1024)
		return false;
	if (!PG_ARGISNULL(ARG_HEADERS) && !JB_ROOT_IS_OBJECT(PG_GETARG_JSONB_P(ARG_HEADERS)))
		return false;
	len = arg_len(fcinfo, ARG_SCOPE, &p->scope);
	if (len > 128 || (p->scope != NULL && p->key == NULL))
		return false;
	p->explicit_key = p->scope == NULL && p->key != NULL;
	/* Without a transaction id, this transaction holds no claim. */
	if (!p->explicit_key && !FullTransactionIdIsValid(GetTopFullTransactionIdIfAny()))
		return false;
	if (PG_ARGISNULL(ARG_SEQ) || (p->seq = PG_GETARG_INT32(ARG_SEQ)) < 0)
		return false;
	return true;
}

/* The message's values, in outbox_columns order. */
static void
message_values(FunctionCallInfo fcinfo, OutboxWrite *p, pg_uuid_t *id,
			   Datum *values, bool *nulls)
{
	values[OB_ID] = UUIDPGetDatum(id);
	values[OB_TOPIC] = PointerGetDatum(p->topic);
	values[OB_AGGREGATE] = PointerGetDatum(p->aggregate);
	values[OB_TYPE] = PG_ARGISNULL(ARG_TYPE) ? (Datum) 0 : PG_GETARG_DATUM(ARG_TYPE);
	values[OB_PAYLOAD] = PG_ARGISNULL(ARG_PAYLOAD) ? (Datum) 0 : PG_GETARG_DATUM(ARG_PAYLOAD);
	values[OB_HEADERS] = PG_ARGISNULL(ARG_HEADERS) ? (Datum) 0 : PG_GETARG_DATUM(ARG_HEADERS);
	values[OB_SCOPE] = PointerGetDatum(p->scope);
	values[OB_KEY] = PointerGetDatum(p->key);
	values[OB_SEQ] = Int32GetDatum(p->seq);
	p->position = nextval_internal(p->seq_oid, false);
	values[OB_POSITION] = Int64GetDatum(p->position);
	values[OB_XACT_ID] = FullTransactionIdGetDatum(GetTopFullTransactionId());
	values[OB_CREATED_AT] = TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
	values[OB_PULLED] = BoolGetDatum(p->pull);
	for (int c = 0; c < OB_NCOLUMNS; c++)
		nulls[c] = false;
	nulls[OB_AGGREGATE] = p->aggregate == NULL;
	nulls[OB_SCOPE] = p->scope == NULL;	/* an explicit key */
	nulls[OB_TYPE] = PG_ARGISNULL(ARG_TYPE);
	nulls[OB_PAYLOAD] = PG_ARGISNULL(ARG_PAYLOAD);
	nulls[OB_HEADERS] = PG_ARGISNULL(ARG_HEADERS);
}

/*
 * Insert the message as an INSERT does: the executor's permission check,
 * NOT NULL and CHECK constraints, the heap tuple and its index entries
 * (the unique id waits for a concurrent writer of it, then 23505; an
 * explicit key's, as ON CONFLICT DO NOTHING).  False, having written
 * nothing visible, when the permission check says no or an explicit key's
 * id is taken.
 */
static bool
insert_message(FunctionCallInfo fcinfo, OutboxWrite *p, pg_uuid_t *id)
{
	Relation	rel = p->rels[T_OUTBOX];
	EState	   *estate = CreateExecutorState();
	RangeTblEntry *rte = makeNode(RangeTblEntry);
	Bitmapset  *cols_used = NULL;
	AttrNumber	atts[OB_NCOLUMNS];
	ResultRelInfo *rri;
	TupleTableSlot *slot;
	Datum		values[OB_NCOLUMNS];
	bool		nulls[OB_NCOLUMNS];
	bool		inserted = true;

	for (int c = 0; c < OB_NCOLUMNS; c++)
	{
		atts[c] = idem_outbox_att(rel, c);
		cols_used = bms_add_member(cols_used, atts[c] - FirstLowInvalidHeapAttributeNumber);
	}
	rte->rtekind = RTE_RELATION;
	rte->relid = RelationGetRelid(rel);
	rte->relkind = rel->rd_rel->relkind;
	rte->rellockmode = RowExclusiveLock;
	if (!idem_exec_init_range_table(estate, rte, ACL_INSERT | ACL_SELECT, cols_used))
	{
		FreeExecutorState(estate);
		return false;
	}
	rri = makeNode(ResultRelInfo);
	InitResultRelInfo(rri, rel, 1, NULL, 0);
	ExecOpenIndices(rri, p->explicit_key);
	slot = table_slot_create(rel, &estate->es_tupleTable);

	message_values(fcinfo, p, id, values, nulls);
	ExecClearTuple(slot);
	for (int a = 0; a < RelationGetDescr(rel)->natts; a++)
		slot->tts_isnull[a] = true;		/* dropped columns */
	for (int c = 0; c < OB_NCOLUMNS; c++)
	{
		slot->tts_values[atts[c] - 1] = values[c];
		slot->tts_isnull[atts[c] - 1] = nulls[c];
	}
	ExecStoreVirtualTuple(slot);

	if (rel->rd_att->constr != NULL)
		ExecConstraints(rri, slot, estate);
	estate->es_output_cid = GetCurrentCommandId(true);
	if (p->explicit_key)
		inserted = idem_insert_speculative(rri, slot, estate, p->idx_pkey);
	else
	{
		table_tuple_insert(rel, slot, estate->es_output_cid, 0, NULL);
		if (IDEM_EXEC_INSERT_INDEX_TUPLES_PLAIN(rri, slot, estate) != NIL)
			elog(ERROR, "idempotency: unexpected deferred index constraint on idem_outbox");
	}

	ExecCloseIndices(rri);
	ExecResetTupleTable(estate->es_tupleTable, false);
	FreeExecutorState(estate);
	return inserted;
}

/*
 * The aggregate's lock, then a new snapshot, as the body's INSERT takes
 * one after it (the active one is replaced): false when the fast path must
 * decline, or the topic or its groups under the new snapshot make it.
 */
static bool
lock_aggregate(Oid nsp, OutboxWrite *p)
{
	if (!idem_outbox_open_aggregates(nsp, p) ||
		!idem_outbox_lock_aggregate(p, GetActiveSnapshot()))
		return false;
	PopActiveSnapshot();
	CommandCounterIncrement();
	PushActiveSnapshot(GetTransactionSnapshot());
	return idem_outbox_topic_table(p, GetActiveSnapshot()) && p->ordered;
}

/*
 * The topic's groups under the active snapshot, and, when it has any (it
 * must be pulled), idem_outbox_runs opened and the runs' writes allowed.
 */
static bool
groups_ready(Oid nsp, OutboxWrite *p)
{
	if (!idem_outbox_read_groups(p, GetActiveSnapshot()))
		return false;
	return p->groups == NIL ||
		(p->pull && idem_outbox_open_runs(nsp, p) && idem_outbox_runs_begin(p));
}

/*
 * The fast path: true with the message's id in *result when it published
 * the message; false, having written nothing, when idem_publish_sql must.
 */
static bool
publish_fast(FunctionCallInfo fcinfo, Oid nsp, Datum *result)
{
	OutboxWrite p;
	pg_uuid_t  *id = NULL;
	bool		ok = false;

	memset(&p, 0, sizeof(p));
	if (!read_args(fcinfo, &p))
		return false;
	if (idem_outbox_open_topic(nsp, &p))
	{
		/* A snapshot for the reads, after idem_outbox's lock (header). */
		CommandCounterIncrement();
		PushActiveSnapshot(GetTransactionSnapshot());
		if (idem_outbox_topic_table(&p, GetActiveSnapshot()) &&
			idem_outbox_open_rest(nsp, &p) &&
			idem_outbox_claim(&p, GetActiveSnapshot()) &&
			(!p.ordered || lock_aggregate(nsp, &p)) &&
			groups_ready(nsp, &p))
		{
			id = message_id(p.topic, p.key, p.scope, p.seq);
			/* An explicit key is looked for by the insertion (ON CONFLICT). */
			ok = (p.explicit_key || !idem_outbox_id_taken(&p, GetActiveSnapshot(), id)) &&
				insert_message(fcinfo, &p, id);
			if (ok && p.groups != NIL)
				idem_outbox_runs_make(&p, id, GetActiveSnapshot());
		}
		PopActiveSnapshot();
	}
	idem_outbox_runs_end(&p);
	idem_outbox_close(&p);
	if (ok)
		*result = UUIDPGetDatum(id);
	return ok;
}
