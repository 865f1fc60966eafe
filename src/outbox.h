/*-------------------------------------------------------------------------
 *
 * outbox.h
 *	  idem_publish's fast path (outbox_publish.c), its reads of the outbox's
 *	  tables (outbox_read.c), the aggregate's lock (outbox_order.c) and the
 *	  consumer groups' runs (outbox_runs.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDEM_OUTBOX_H
#define IDEM_OUTBOX_H

#include "nodes/execnodes.h"
#include "utils/rel.h"
#include "utils/snapshot.h"
#include "utils/uuid.h"

/* The columns of idem_outbox, in order, as the install and upgrade make them. */
enum
{
	OB_ID, OB_TOPIC, OB_AGGREGATE, OB_TYPE, OB_PAYLOAD, OB_HEADERS, OB_SCOPE,
	OB_KEY, OB_SEQ, OB_POSITION, OB_XACT_ID, OB_CREATED_AT, OB_PULLED, OB_NCOLUMNS
};

/* The tables the fast path opens, in the order it locks them. */
enum
{
	T_OUTBOX, T_TOPICS, T_RECORDS, T_SUBSCRIPTIONS, T_AGGREGATES, T_RUNS, NTABLES
};

/* The columns of idem_outbox_runs that the fast path writes or tests. */
enum
{
	RUN_CONSUMER, RUN_TOPIC, RUN_AGGREGATE, RUN_LONE, RUN_ACKED, RUN_AVAILABLE_AT,
	RUN_NCOLUMNS
};

/* What the fast path reads and writes: the arguments, tables and indexes. */
typedef struct OutboxWrite
{
	text	   *topic;
	text	   *key;			/* given, or the claim's found */
	text	   *aggregate;
	text	   *scope;			/* given, or the claim's found */
	int32		seq;
	bool		explicit_key;	/* key without scope: no claim, ON CONFLICT */
	bool		pull;			/* the topic's setting */
	bool		ordered;		/* an aggregate of a pulled topic: its lock */
	List	   *groups;			/* the topic's consumer groups (text *) */
	int64		position;		/* the message's, once drawn */
	struct EState *runs_estate; /* the runs' writes (outbox_runs.c) */
	Relation	rels[NTABLES];
	Oid			seq_oid;		/* idem_outbox's position sequence */
	Oid			idx_pkey;		/* idem_outbox (id) */
	Oid			idx_expires;	/* idem_records (expires_at) */
	Oid			idx_records_pkey;	/* idem_records (scope, key) */
	Oid			idx_topics;		/* idem_outbox_topics (topic) */
	Oid			idx_subs;		/* idem_outbox_subscriptions (topic) */
	Oid			idx_aggregates;	/* idem_outbox_aggregates (topic, aggregate) */
	Oid			idx_runs;		/* idem_outbox_runs (topic, aggregate, lone, consumer) */
	AttrNumber	t_topic;		/* idem_outbox_topics.topic */
	AttrNumber	t_relay;
	AttrNumber	t_pull;
	AttrNumber	s_topic;		/* idem_outbox_subscriptions.topic */
	AttrNumber	s_consumer;
	AttrNumber	a_topic;		/* idem_outbox_aggregates.topic */
	AttrNumber	a_aggregate;
	AttrNumber	r_atts[RUN_NCOLUMNS];		/* idem_outbox_runs, in RUN_* order */
} OutboxWrite;


extern void idem_outbox_read_init(void);
extern bool idem_outbox_open_topic(Oid nsp, OutboxWrite *p);
extern bool idem_outbox_open_rest(Oid nsp, OutboxWrite *p);
extern void idem_outbox_close(OutboxWrite *p);
extern AttrNumber idem_outbox_att(Relation rel, int c);
extern bool idem_outbox_open_aggregates(Oid nsp, OutboxWrite *p);
extern bool idem_outbox_topic_table(OutboxWrite *p, Snapshot snap);
extern bool idem_outbox_read_groups(OutboxWrite *p, Snapshot snap);
extern bool idem_outbox_open_runs(Oid nsp, OutboxWrite *p);
extern bool idem_outbox_claim(OutboxWrite *p, Snapshot snap);
extern bool idem_outbox_id_taken(OutboxWrite *p, Snapshot snap, pg_uuid_t *id);

/* outbox_runs.c */
extern bool idem_outbox_runs_begin(OutboxWrite *p);
extern void idem_outbox_runs_make(OutboxWrite *p, pg_uuid_t *id, Snapshot snap);
extern void idem_outbox_runs_end(OutboxWrite *p);

/* outbox_order.c */
extern bool idem_outbox_lock_aggregate(OutboxWrite *p, Snapshot snap);
extern bool idem_insert_speculative(ResultRelInfo *rri, TupleTableSlot *slot,
									EState *estate, Oid index);

#endif							/* IDEM_OUTBOX_H */
