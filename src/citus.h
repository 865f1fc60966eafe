/*-------------------------------------------------------------------------
 *
 * citus.h
 *	  What Citus's catalogs say (citus.c; false everywhere without Citus), and
 *	  the fast path on this node's shard of a key (claim_citus_local.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDEM_CITUS_H
#define IDEM_CITUS_H

#include "idempotency.h"

#include "utils/rel.h"

/* citus.c */
extern bool idem_citus_table(Oid relid);
extern int32 idem_citus_local_group(void);
extern void idem_citus_shard_name(char *out, const char *name, int64 shardid);
extern void idem_refuse_citus_worker_tokens(bool records_citus, const char *fname);
/* guards on distributed tables (guard.c, guard_cache.c, machine_cache.c) */
extern bool idem_citus_partition(Oid relid, char *method, AttrNumber *distatt,
								 int32 *colocation);
extern bool idem_citus_guardable(Oid relid, const char *table, const char *fname);
extern bool idem_citus_shard_rel(Relation rel, Oid *logical, int64 *shardid,
								 char **minvalue);
extern Oid	idem_citus_local_placement(Oid logical, const char *minvalue);
extern bool idem_citus_shard_of(Relation rel, Oid logical);

/* claim_citus_local.c */
extern void idem_citus_local_init(void);
extern Relation idem_citus_local_shard(Relation records, text *key);

#endif							/* IDEM_CITUS_H */
