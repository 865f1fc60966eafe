/*-------------------------------------------------------------------------
 *
 * outbox.c
 *	  idem_publish: publish a message of the outbox in the caller's
 *	  transaction (docs/outbox.md).  The rest of the outbox (topics, groups,
 *	  fetch, acknowledgements, purge) is SQL (sql/idempotency_outbox.sql);
 *	  the portable edition's idem_publish is the PL/pgSQL body of
 *	  sql/portable/outbox.sql, and this file does what it does, statement
 *	  by statement, with the same SQL and the same errors.  It is C because
 *	  publishing runs once per business transaction: here the arguments are
 *	  checked, the message id derived and the branches taken without
 *	  PL/pgSQL's interpreter, and the two statements of the usual path
 *	  (find the claim, lock the aggregate and insert) are prepared once per
 *	  backend (query.c).
 *
 *	  Locking, as the body's: the aggregate's row of idem_outbox_aggregates
 *	  is locked FOR NO KEY UPDATE (inserted by the first publication) before
 *	  the message takes its position, and held to transaction end, so one
 *	  aggregate's positions follow commit order; a topic relayed by logical
 *	  messages only takes no lock.  Visibility: every statement runs with
 *	  the caller's role and a fresh snapshot in READ COMMITTED, so row-level
 *	  security (idem_outbox_grant) applies as to any INSERT.  The claim a
 *	  message belongs to is a record this transaction (or one of its live
 *	  subtransactions) wrote, told by its xmin.  Memory: the message id is
 *	  allocated in the caller's context; SPI's is released by SPI_finish.
 *	  No state across calls but the prepared plans.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "mb/pg_wchar.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"
#include "utils/xid8.h"

#include "idempotency.h"
#include "compat.h"
#include "spi_read.h"

PG_FUNCTION_INFO_V1(idem_publish);

/*
 * Is the record a claim of this transaction?  $3 the transaction's start
 * (now()), $4 its top-level id: written by it or by one of its
 * subtransactions still in progress (pg_xact_status of the xmin widened
 * to an xid8 next to $4), and live as a claim.
 */
#define PUBLISH_MINE_SQL(r) \
	"CASE WHEN " r ".updated_at OPERATOR(pg_catalog.<) $3" \
	"       OR NOT " r ".status OPERATOR(pg_catalog.=) ANY ('{claimed,in_progress,completed}'::pg_catalog.text[])" \
	"     THEN false" \
	"     WHEN " r ".xmin OPERATOR(pg_catalog.=) pg_catalog.xid($4) THEN true" \
	"     ELSE COALESCE(pg_catalog.pg_xact_status((($4)::pg_catalog.text::pg_catalog.int8" \
	"            OPERATOR(pg_catalog.+) ((((" r ".xmin)::pg_catalog.text::pg_catalog.int8" \
	"                OPERATOR(pg_catalog.-) (($4)::pg_catalog.text::pg_catalog.int8 OPERATOR(pg_catalog.%) 4294967296))" \
	"               OPERATOR(pg_catalog.+) 6442450944) OPERATOR(pg_catalog.%) 4294967296)" \
	"            OPERATOR(pg_catalog.-) 2147483648)::pg_catalog.text::pg_catalog.xid8)" \
	"          OPERATOR(pg_catalog.=) 'in progress', false) END"

/* The relay of topic $N: NULL (no row: the table), table, message or both. */
#define PUBLISH_RELAY_SQL(n) \
	"(SELECT t.relay FROM @extschema@.idem_outbox_topics t" \
	" WHERE t.topic OPERATOR(pg_catalog.=) (" n " COLLATE pg_catalog.\"C\"))"

/* The named claim ($1 scope, $2 key): this transaction's?  And topic $5's relay. */
static IdemQuery q_named = {
	"SELECT COALESCE((SELECT " PUBLISH_MINE_SQL("r")
	"  FROM @extschema@.idem_records r"
	"  WHERE r.scope OPERATOR(pg_catalog.=) ($1 COLLATE pg_catalog.\"C\")"
	"  AND r.key OPERATOR(pg_catalog.=) ($2 COLLATE pg_catalog.\"C\")), false),"
	" " PUBLISH_RELAY_SQL("$5"),
	5, {TEXTOID, TEXTOID, TIMESTAMPTZOID, XID8OID, TEXTOID}
};

/*
 * The claims of this transaction with the default ttl, as idem_xact_claims
 * finds them (expiry between $1 and $2: the default ttl after the
 * transaction's start and after now), at most two; and topic $5's relay.
 */
static IdemQuery q_found = {
	"SELECT x.n, x.scope, x.key, " PUBLISH_RELAY_SQL("$5")
	" FROM (SELECT pg_catalog.count(*)::pg_catalog.int4 AS n,"
	"              pg_catalog.min(y.scope) AS scope, pg_catalog.min(y.key) AS key"
	"         FROM (SELECT r.scope, r.key FROM @extschema@.idem_records r"
	"                WHERE r.expires_at OPERATOR(pg_catalog.>=) $1"
	"                  AND r.expires_at OPERATOR(pg_catalog.<=) $2"
	"                  AND " PUBLISH_MINE_SQL("r")
	"                LIMIT 2) y) x",
	5, {TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID, XID8OID, TEXTOID}
};

/* An explicit key's topic $1: its relay. */
static IdemQuery q_topic = {
	"SELECT " PUBLISH_RELAY_SQL("$1"),
	1, {TEXTOID}
};

/* The aggregate's lock ($1 topic, $2 aggregate), and its first publication. */
#define PUBLISH_LOCK_SQL(topic, aggregate) \
	"SELECT FROM @extschema@.idem_outbox_aggregates a" \
	" WHERE a.topic OPERATOR(pg_catalog.=) (" topic " COLLATE pg_catalog.\"C\")" \
	" AND a.aggregate OPERATOR(pg_catalog.=) (" aggregate " COLLATE pg_catalog.\"C\")" \
	" FOR NO KEY UPDATE"

static IdemQuery q_lock = {
	PUBLISH_LOCK_SQL("$1", "$2"),
	2, {TEXTOID, TEXTOID}
};

static IdemQuery q_lock_first = {
	"INSERT INTO @extschema@.idem_outbox_aggregates AS a (topic, aggregate)"
	" VALUES ($1, $2) ON CONFLICT ON CONSTRAINT idem_outbox_aggregates_pkey DO NOTHING",
	2, {TEXTOID, TEXTOID}
};

/*
 * The message ($1 id, $2 topic, $3 aggregate, $4 type, $5 payload, $6
 * headers, $7 scope, $8 key, $9 seq); then its position and whether a
 * group reads its topic.  A claim's message (the _claim statements): a
 * look-up of the id and a plain INSERT, as no other transaction can
 * publish it meanwhile (it would have to hold the claim's record); an
 * explicit key's: ON CONFLICT (id).  The _locked statements take the
 * aggregate's lock first, in the same statement: the row comes from the
 * lock's CTE l, or from f, the aggregate's first publication, so the
 * position is drawn under the lock.  They insert nothing when a concurrent
 * first publication inserted the aggregate's row (f waited for it and
 * inserted nothing) or the id is there; the caller then takes the lock on
 * its own (q_lock, q_lock_first) and runs the plain statement.  Whether
 * a group reads the topic: the first topic from it on in the index, not
 * EXISTS (... topic = ...), whose generic plan scans the whole table when
 * other topics have very many groups.
 */
#define PUBLISH_INSERT(with, from, extra_where, conflict) \
	with \
	"INSERT INTO @extschema@.idem_outbox AS o" \
	" (id, topic, aggregate, type, payload, headers, scope, key, seq, xact_id, created_at)" \
	" SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9," \
	"        pg_catalog.pg_current_xact_id(), pg_catalog.now()" \
	from \
	extra_where \
	conflict \
	" RETURNING o.position," \
	" COALESCE((SELECT s.topic FROM @extschema@.idem_outbox_subscriptions s" \
	"   WHERE s.topic OPERATOR(pg_catalog.>=) o.topic" \
	"   ORDER BY s.topic LIMIT 1) OPERATOR(pg_catalog.=) o.topic, false)"

#define PUBLISH_WITH_LOCK \
	"WITH l AS (" PUBLISH_LOCK_SQL("$2", "$3") ")," \
	" f AS (INSERT INTO @extschema@.idem_outbox_aggregates AS a (topic, aggregate)" \
	"       SELECT $2, $3 WHERE NOT EXISTS (SELECT FROM l)" \
	"       ON CONFLICT ON CONSTRAINT idem_outbox_aggregates_pkey DO NOTHING" \
	"       RETURNING a.topic) "
#define PUBLISH_FROM_LOCK " FROM (SELECT FROM l UNION ALL SELECT FROM f) AS g"
#define PUBLISH_NOT_THERE \
	" WHERE NOT EXISTS (SELECT FROM @extschema@.idem_outbox o2" \
	" WHERE o2.id OPERATOR(pg_catalog.=) $1)"
#define PUBLISH_ON_CONFLICT " ON CONFLICT (id) DO NOTHING"
#define PUBLISH_INSERT_ARGS \
	9, {UUIDOID, TEXTOID, TEXTOID, TEXTOID, JSONBOID, JSONBOID, TEXTOID, TEXTOID, INT4OID}

static IdemQuery q_insert_claim = {
	PUBLISH_INSERT("", "", PUBLISH_NOT_THERE, ""), PUBLISH_INSERT_ARGS
};

static IdemQuery q_insert_claim_locked = {
	PUBLISH_INSERT(PUBLISH_WITH_LOCK, PUBLISH_FROM_LOCK, PUBLISH_NOT_THERE, ""), PUBLISH_INSERT_ARGS
};

static IdemQuery q_insert_key = {
	PUBLISH_INSERT("", "", "", PUBLISH_ON_CONFLICT), PUBLISH_INSERT_ARGS
};

static IdemQuery q_insert_key_locked = {
	PUBLISH_INSERT(PUBLISH_WITH_LOCK, PUBLISH_FROM_LOCK, "", PUBLISH_ON_CONFLICT), PUBLISH_INSERT_ARGS
};

/*
 * The pull API: every group of topic $1 gets a run of aggregate $2 (from
 * position $4, this message), or of message $3 alone; a parked run of the
 * aggregate is freed.  Under the aggregate's lock, so no fetch parks the
 * run past this message.
 */
static IdemQuery q_runs = {
	"INSERT INTO @extschema@.idem_outbox_runs AS r (consumer, topic, aggregate, lone, acked, available_at)"
	" SELECT s.consumer, $1, $2, $3, $4 OPERATOR(pg_catalog.-) 1, pg_catalog.now()"
	"   FROM @extschema@.idem_outbox_subscriptions s"
	"  WHERE s.topic OPERATOR(pg_catalog.=) ($1 COLLATE pg_catalog.\"C\")"
	" ON CONFLICT ON CONSTRAINT idem_outbox_runs_key DO NOTHING",
	4, {TEXTOID, TEXTOID, UUIDOID, INT8OID}
};

static IdemQuery q_unpark = {
	"UPDATE @extschema@.idem_outbox_runs r SET available_at = pg_catalog.now()"
	" WHERE r.topic OPERATOR(pg_catalog.=) ($1 COLLATE pg_catalog.\"C\")"
	"   AND r.aggregate OPERATOR(pg_catalog.=) ($2 COLLATE pg_catalog.\"C\")"
	"   AND r.lone IS NULL"
	"   AND r.available_at OPERATOR(pg_catalog.=) 'infinity'::pg_catalog.timestamptz",
	2, {TEXTOID, TEXTOID}
};

/* Nothing inserted: did this transaction write message $1? */
static IdemQuery q_ours = {
	"SELECT o.xact_id OPERATOR(pg_catalog.=) pg_catalog.pg_current_xact_id()"
	"  FROM @extschema@.idem_outbox o WHERE o.id OPERATOR(pg_catalog.=) $1",
	1, {UUIDOID}
};

/* Relayed (also) by a logical decoding message. */
static IdemQuery q_emit = {
	"SELECT FROM pg_catalog.pg_logical_emit_message(true, 'idempotency.outbox',"
	" pg_catalog.jsonb_build_object("
	"   'id', $1, 'topic', $2, 'aggregate', $3, 'type', $4, 'headers', $6,"
	"   'payload', $5, 'scope', $7, 'key', $8, 'seq', $9)::pg_catalog.text)",
	PUBLISH_INSERT_ARGS
};

/* The arguments, in the order of the declaration. */
enum
{
	ARG_TOPIC, ARG_PAYLOAD, ARG_KEY, ARG_AGGREGATE, ARG_HEADERS, ARG_SCOPE,
	ARG_TYPE, ARG_SEQ, PUBLISH_NARGS
};

static void publish_check_args(FunctionCallInfo fcinfo);
static void publish_message_id(text *topic, text *scope, text *key, int32 seq,
							   pg_uuid_t *id);
static void publish_append_part(StringInfo buf, text *part);
static const char *publish_read_text(int col, const char *column);
static const char *publish_find_claim(FunctionCallInfo fcinfo, Oid nsp, text *topic,
									  text **scope, text **key);
static void publish_check_ours(Oid nsp, pg_uuid_t *id, text *topic, int32 seq);
static void publish_emit(Oid nsp, text *topic, Datum *values, char *nulls);
static bool publish_insert(Oid nsp, bool locked, bool claim, Datum *values, char *nulls);

/* A text argument, or NULL. */
static inline text *
publish_text_arg(FunctionCallInfo fcinfo, int argno)
{
	return PG_ARGISNULL(argno) ? NULL : PG_GETARG_TEXT_PP(argno);
}

/*
 * idem_publish(topic text, payload jsonb, key text DEFAULT NULL,
 *              aggregate text DEFAULT NULL, headers jsonb DEFAULT NULL,
 *              scope text DEFAULT NULL, type text DEFAULT NULL,
 *              seq int4 DEFAULT 0) RETURNS uuid
 *
 * The message's id, or NULL when an earlier transaction published it.
 * Errors as docs/reference.md lists them: 22004, 22023, 22001 (arguments),
 * 25006 (read-only transaction), ID020 (no claim, or several), ID021
 * (published twice in this transaction), 55000 (a message-relayed topic
 * without wal_level = logical), and those of the statements (42501 from
 * row-level security).
 */
Datum
idem_publish(PG_FUNCTION_ARGS)
{
	text	   *topic;
	text	   *scope;
	text	   *key;
	text	   *aggregate;
	int32		seq;
	Oid			nsp = idem_extension_schema(fcinfo);
	pg_uuid_t  *id = (pg_uuid_t *) palloc(sizeof(pg_uuid_t));
	const char *relay;
	Datum		values[9];
	char		nulls[9];

	publish_check_args(fcinfo);
	topic = PG_GETARG_TEXT_PP(ARG_TOPIC);
	scope = publish_text_arg(fcinfo, ARG_SCOPE);
	key = publish_text_arg(fcinfo, ARG_KEY);
	aggregate = publish_text_arg(fcinfo, ARG_AGGREGATE);
	seq = PG_GETARG_INT32(ARG_SEQ);

	idem_spi_connect();
	relay = publish_find_claim(fcinfo, nsp, topic, &scope, &key);
	publish_message_id(topic, scope, key, seq, id);

	values[0] = UUIDPGetDatum(id);
	values[1] = PointerGetDatum(topic);
	values[2] = PointerGetDatum(aggregate);
	values[3] = PG_ARGISNULL(ARG_TYPE) ? (Datum) 0 : PG_GETARG_DATUM(ARG_TYPE);
	values[4] = PG_ARGISNULL(ARG_PAYLOAD) ? (Datum) 0 : PG_GETARG_DATUM(ARG_PAYLOAD);
	values[5] = PG_ARGISNULL(ARG_HEADERS) ? (Datum) 0 : PG_GETARG_DATUM(ARG_HEADERS);
	values[6] = PointerGetDatum(scope);
	values[7] = PointerGetDatum(key);
	values[8] = Int32GetDatum(seq);
	memset(nulls, ' ', sizeof(nulls));
	nulls[2] = aggregate == NULL ? 'n' : ' ';
	nulls[3] = PG_ARGISNULL(ARG_TYPE) ? 'n' : ' ';
	nulls[4] = PG_ARGISNULL(ARG_PAYLOAD) ? 'n' : ' ';
	nulls[5] = PG_ARGISNULL(ARG_HEADERS) ? 'n' : ' ';
	nulls[6] = scope == NULL ? 'n' : ' ';

	/*
	 * A topic relayed by logical messages only has no row in the table and
	 * takes no lock.  Else the aggregate's lock, then the message; one
	 * whose id is there already is an earlier transaction's (a duplicate:
	 * NULL, nothing written) or this one's (ID021).
	 */
	if (relay == NULL || strcmp(relay, "message") != 0)
	{
		if (!publish_insert(nsp, aggregate != NULL, scope != NULL, values, nulls))
		{
			publish_check_ours(nsp, id, topic, seq);
			SPI_finish();
			PG_RETURN_NULL();
		}
		if (relay == NULL || strcmp(relay, "table") == 0)
		{
			SPI_finish();
			PG_RETURN_UUID_P(id);
		}
	}
	publish_emit(nsp, topic, values, nulls);
	SPI_finish();
	PG_RETURN_UUID_P(id);
}

/*
 * The claim the message belongs to, into *scope and *key (a named one is
 * checked, else the transaction's one claim with the default ttl is
 * found; an explicit key has none), and the relay of the topic: NULL (no
 * row: the table), or its text, in SPI's memory.  ID020 when no claim.
 */
static const char *
publish_find_claim(FunctionCallInfo fcinfo, Oid nsp, text *topic, text **scope,
				   text **key)
{
	FullTransactionId top = GetTopFullTransactionIdIfAny();
	TimestampTz now = GetCurrentTransactionStartTimestamp();
	Datum		values[5];
	char		nulls[5];
	int32		nclaims;

	values[2] = TimestampTzGetDatum(now);
	values[3] = FullTransactionIdGetDatum(top);
	values[4] = PointerGetDatum(topic);
	memset(nulls, ' ', sizeof(nulls));
	/* No transaction id: it wrote nothing, and no record is its claim. */
	if (!FullTransactionIdIsValid(top))
		nulls[3] = 'n';

	if (*scope != NULL)
	{
		/* Named: it must be a record this transaction wrote. */
		values[0] = PointerGetDatum(*scope);
		values[1] = PointerGetDatum(*key);
		idem_query_exec(&q_named, nsp, values, nulls, false, 1);
		if (!DatumGetBool(idem_spi_read_required(SPI_tuptable, 0, 1, BOOLOID, "mine")))
			ereport(ERROR,
					(errcode(ERRCODE_IDEM_NO_CLAIM),
					 errmsg("idem_publish: this transaction holds no claim of the key"),
					 errdetail("Key \"%s\" in scope \"%s\" was not claimed by this transaction: idem_claim returned false for it, or was not called.",
							   text_to_cstring(*key), text_to_cstring(*scope)),
					 errhint("Publish only after idem_claim() returned true, in the same transaction; a duplicate has published its message already.")));
		return publish_read_text(2, "relay");
	}
	if (*key != NULL)
	{
		/* An explicit key. */
		idem_query_exec(&q_topic, nsp, values + 4, NULL, false, 1);
		return publish_read_text(1, "relay");
	}

	/* Found: the one claim of this transaction with the default ttl. */
	values[0] = TimestampTzGetDatum(idem_expiry(fcinfo, -1, now, "idem_publish"));
	values[1] = TimestampTzGetDatum(idem_expiry(fcinfo, -1, GetCurrentTimestamp(),
												"idem_publish"));
	idem_query_exec(&q_found, nsp, values, nulls, false, 1);
	nclaims = DatumGetInt32(idem_spi_read_required(SPI_tuptable, 0, 1, INT4OID, "n"));
	if (nclaims == 0)
		ereport(ERROR,
				(errcode(ERRCODE_IDEM_NO_CLAIM),
				 errmsg("idem_publish: this transaction holds no claim"),
				 errdetail("No record claimed with the default ttl was written by this transaction: idem_claim returned false, or was not called."),
				 errhint("Publish only after idem_claim() returned true, in the same transaction; for a claim with a ttl of its own, name it with scope => and key =>; without a claim, pass key =>.")));
	if (nclaims > 1)
		ereport(ERROR,
				(errcode(ERRCODE_IDEM_NO_CLAIM),
				 errmsg("idem_publish: this transaction holds several claims"),
				 errdetail("The message id cannot be derived from one claim."),
				 errhint("Name the claim the message belongs to with scope => and key =>.")));
	*scope = cstring_to_text(idem_spi_read_cstring(SPI_tuptable, 0, 2, "scope"));
	*key = cstring_to_text(idem_spi_read_cstring(SPI_tuptable, 0, 3, "key"));
	return publish_read_text(4, "relay");
}

/* Message id is in the table: ID021 if this transaction wrote it. */
static void
publish_check_ours(Oid nsp, pg_uuid_t *id, text *topic, int32 seq)
{
	Datum		value = UUIDPGetDatum(id);
	bool		isnull;
	Datum		ours;

	if (idem_query_exec(&q_ours, nsp, &value, NULL, false, 1) != 1)
		return;
	ours = idem_spi_read(SPI_tuptable, 0, 1, BOOLOID, "ours", &isnull);
	if (!isnull && DatumGetBool(ours))
		ereport(ERROR,
				(errcode(ERRCODE_IDEM_PUBLISHED_TWICE),
				 errmsg("idem_publish: message already published by this transaction"),
				 errdetail("Message %s (topic \"%s\", seq %d) was published earlier in this transaction.",
						   DatumGetCString(DirectFunctionCall1(uuid_out, value)),
						   text_to_cstring(topic), seq),
				 errhint("Give each message of one claim and topic its own seq => 0, 1, 2, ...")));
}

/* The message as a logical decoding message; 55000 without wal_level = logical. */
static void
publish_emit(Oid nsp, text *topic, Datum *values, char *nulls)
{
	const char *wal_level = GetConfigOption("wal_level", false, false);

	if (strcmp(wal_level, "logical") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("idem_publish: topic \"%s\" relays through logical decoding messages, which need wal_level = logical",
						text_to_cstring(topic)),
				 errdetail("wal_level is %s; the message would be decoded by nobody.", wal_level),
				 errhint("Set wal_level = logical and restart, or relay the topic through the table: SELECT idem_outbox_topic(topic, relay => 'table').")));
	idem_query_exec(&q_emit, nsp, values, nulls, false, 0);
}

/* Column col of the one row of SPI_tuptable: a text, or NULL; SPI's memory. */
static const char *
publish_read_text(int col, const char *column)
{
	bool		isnull;
	Datum		d = idem_spi_read(SPI_tuptable, 0, col, TEXTOID, column, &isnull);

	return isnull ? NULL : TextDatumGetCString(d);
}

/*
 * The aggregate's lock (when locked) and the message, from values and
 * nulls as the insert statements take them; then, for the pull API, the
 * runs of the topic's groups.  False when the message was not inserted:
 * its id is in the table.
 */
static bool
publish_insert(Oid nsp, bool locked, bool claim, Datum *values, char *nulls)
{
	int64		position;
	bool		subscribed;
	uint64		n = 0;

	if (locked)
	{
		/* The usual case: one statement. */
		n = idem_query_exec(claim ? &q_insert_claim_locked : &q_insert_key_locked,
							nsp, values, nulls, false, 0);
		if (n == 0)
		{
			/* Lock on its own, as the body does. */
			for (;;)
			{
				CHECK_FOR_INTERRUPTS();
				if (idem_query_exec(&q_lock, nsp, values + 1, NULL, false, 0) > 0)
					break;
				/* A concurrent first publication makes this wait for its end. */
				if (idem_query_exec(&q_lock_first, nsp, values + 1, NULL, false, 0) > 0)
					break;
			}
		}
	}
	if (n == 0)
		n = idem_query_exec(claim ? &q_insert_claim : &q_insert_key,
							nsp, values, nulls, false, 0);
	if (n == 0)
		return false;

	position = DatumGetInt64(idem_spi_read_required(SPI_tuptable, 0, 1, INT8OID, "position"));
	subscribed = DatumGetBool(idem_spi_read_required(SPI_tuptable, 0, 2, BOOLOID,
													 "subscribed"));
	if (subscribed)
	{
		Datum		runs[4];
		char		runs_nulls[4];

		runs[0] = values[1];
		runs[1] = values[2];
		runs[2] = values[0];
		runs[3] = Int64GetDatum(position);
		runs_nulls[0] = ' ';
		runs_nulls[1] = locked ? ' ' : 'n';
		runs_nulls[2] = locked ? 'n' : ' ';
		runs_nulls[3] = ' ';
		idem_query_exec(&q_runs, nsp, runs, runs_nulls, false, 0);
		if (locked)
			idem_query_exec(&q_unpark, nsp, runs, NULL, false, 0);
	}
	return true;
}

/* A text argument's length in bytes, if not NULL. */
static inline int
publish_len(FunctionCallInfo fcinfo, int argno)
{
	return VARSIZE_ANY_EXHDR(PG_GETARG_TEXT_PP(argno));
}

/*
 * The arguments, in the body's order: 22004, 22023, 22001, then 25006 for
 * a read-only transaction.
 */
static void
publish_check_args(FunctionCallInfo fcinfo)
{
	bool		has_key = !PG_ARGISNULL(ARG_KEY);
	bool		has_scope = !PG_ARGISNULL(ARG_SCOPE);

	if (PG_ARGISNULL(ARG_TOPIC))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("idem_publish: topic must not be null")));
	if (publish_len(fcinfo, ARG_TOPIC) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("idem_publish: topic must not be empty")));
	if (publish_len(fcinfo, ARG_TOPIC) > 128)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("idem_publish: topic is too long"),
				 errdetail("The topic is %d bytes; the limit is 128 bytes.",
						   publish_len(fcinfo, ARG_TOPIC))));
	if (has_key && publish_len(fcinfo, ARG_KEY) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("idem_publish: key must not be empty")));
	if (has_key && publish_len(fcinfo, ARG_KEY) > 1024)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("idem_publish: key is too long"),
				 errdetail("The key is %d bytes; the limit is 1024 bytes.",
						   publish_len(fcinfo, ARG_KEY)),
				 errhint("Hash long natural keys, for example with sha256(), and use the digest as the key.")));
	if (!PG_ARGISNULL(ARG_AGGREGATE) && publish_len(fcinfo, ARG_AGGREGATE) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("idem_publish: aggregate must not be empty"),
				 errhint("Pass NULL for a message without an aggregate.")));
	if (!PG_ARGISNULL(ARG_AGGREGATE) && publish_len(fcinfo, ARG_AGGREGATE) > 1024)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("idem_publish: aggregate is too long"),
				 errdetail("The aggregate is %d bytes; the limit is 1024 bytes.",
						   publish_len(fcinfo, ARG_AGGREGATE))));
	if (!PG_ARGISNULL(ARG_HEADERS))
	{
		Jsonb	   *headers = PG_GETARG_JSONB_P(ARG_HEADERS);

		if (!JB_ROOT_IS_OBJECT(headers))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("idem_publish: headers must be a JSON object"),
					 errdetail("The headers given are a JSON %s.",
							   TextDatumGetCString(DirectFunctionCall1(jsonb_typeof,
																	   JsonbPGetDatum(headers))))));
	}
	if (has_scope && publish_len(fcinfo, ARG_SCOPE) > 128)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("idem_publish: scope is too long"),
				 errdetail("The scope is %d bytes; the limit is 128 bytes.",
						   publish_len(fcinfo, ARG_SCOPE))));
	if (has_scope && !has_key)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("idem_publish: key must not be null when scope is given"),
				 errhint("Name the claim with scope => and key =>, as given to idem_claim.")));
	if (PG_ARGISNULL(ARG_SEQ))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("idem_publish: seq must not be null")));
	if (PG_GETARG_INT32(ARG_SEQ) < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("idem_publish: seq must not be negative"),
				 errdetail("The seq given was %d.", PG_GETARG_INT32(ARG_SEQ))));
	idem_check_writable("idem_publish");
}

/* ":" then the part's length in characters, ":" and the part. */
static void
publish_append_part(StringInfo buf, text *part)
{
	const char *s = VARDATA_ANY(part);
	int			len = VARSIZE_ANY_EXHDR(part);

	appendStringInfo(buf, ":%d:", pg_mbstrlen_with_len(s, len));
	appendBinaryStringInfo(buf, s, len);
}

/*
 * idem_outbox_id(topic, key, scope, seq) (sql/idempotency_outbox.sql): the
 * first 16 bytes of the SHA-256 of the UTF-8 of
 * "idempotency.outbox.v1" ":claim:" len ":" scope (or ":key") ":" len ":"
 * key ":" len ":" topic ":" seq, lengths in characters, with the version
 * and variant digits of the text form set to 8.
 */
static void
publish_message_id(text *topic, text *scope, text *key, int32 seq, pg_uuid_t *id)
{
	StringInfoData buf;
	char	   *utf8;
	uint8		digest[PG_SHA256_DIGEST_LENGTH];

	initStringInfo(&buf);
	appendStringInfoString(&buf, "idempotency.outbox.v1");
	if (scope != NULL)
	{
		appendStringInfoString(&buf, ":claim");
		publish_append_part(&buf, scope);
	}
	else
		appendStringInfoString(&buf, ":key");
	publish_append_part(&buf, key);
	publish_append_part(&buf, topic);
	appendStringInfo(&buf, ":%d", seq);

	utf8 = pg_server_to_any(buf.data, buf.len, PG_UTF8);
	idem_sha256(utf8, strlen(utf8), digest);
	memcpy(id->data, digest, UUID_LEN);
	/* The 13th and 17th hex digits: the high nibbles of bytes 6 and 8. */
	id->data[6] = (id->data[6] & 0x0f) | 0x80;
	id->data[8] = (id->data[8] & 0x0f) | 0x80;
	pfree(buf.data);
}
