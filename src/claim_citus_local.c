/*-------------------------------------------------------------------------
 *
 * claim_citus_local.c
 *	  The fast claim path on a Citus node that holds the key's shard.  Citus
 *	  runs each statement of a claim on a worker by planning it for the
 *	  distributed table, deparsing it for the shard and planning it again,
 *	  which costs more than the claim.  When this node holds the only
 *	  placement of the key's shard (a call Citus delegated here, see
 *	  idem_distribute, or one made on that worker), the claim instead writes
 *	  into the shard relation idem_records_<shardid> through claim_direct.c.
 *
 *	  It is as safe as the local execution it replaces by doing, in order:
 *	  - find the shard from the key as Citus does (hashtext with collation
 *	    "C", the range of pg_dist_shard that holds the hash);
 *	  - take Citus's shard metadata lock (LockShardDistributionMetadata:
 *	    ShareLock by every write, ExclusiveLock by moves and splits) before
 *	    trusting the placement, then accept invalidations: a move committed
 *	    before is seen, one that starts after waits for this transaction;
 *	  - require the shard's only placement, on this node's group;
 *	  - set the local execution status to "required", as Citus's own local
 *	    write does, so later statements on that shard run locally and see the
 *	    record; if Citus already reached this node's placements over a
 *	    connection (status "disabled"), decline.
 *	  The three Citus functions come from load_external_function, for Citus 13
 *	  only (extversion "13.x", whose signatures were read) and with
 *	  citus.enable_local_execution on; Citus built for PostgreSQL 16 and later
 *	  exports none of them (-fvisibility=hidden), so there the path always
 *	  declines.  Declining, or anything unexpected, leaves the claim to SQL
 *	  through Citus, which is always correct.
 *
 *	  Cache: the shard ranges of idem_records and whether each shard's only
 *	  placement is local, in TopMemoryContext until a relcache invalidation of
 *	  idem_records (Citus sends one when its shards or placements change) or
 *	  of all.  Locking: the metadata ShareLock and the shard's RowExclusiveLock
 *	  are held to transaction end, as by Citus's local INSERT; catalogs are
 *	  read with AccessShareLock, released at once, under a catalog snapshot
 *	  taken after the metadata lock.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/table.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "fmgr.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "idempotency.h"
#include "citus.h"
#include "claim.h"

/* Citus 13's enum LocalExecutionStatus (local_executor.h). */
#define CITUS_LOCAL_EXECUTION_REQUIRED 0
#define CITUS_LOCAL_EXECUTION_DISABLED 2

typedef void (*lock_metadata_fn) (int64 shardId, LOCKMODE lockMode);
typedef int (*get_status_fn) (void);
typedef void (*set_status_fn) (int status);

static bool citus_fns_loaded = false;
static lock_metadata_fn citus_lock_metadata = NULL;
static get_status_fn citus_get_status = NULL;
static set_status_fn citus_set_status = NULL;

/* One shard of idem_records: its hash range, id, and where it lives. */
typedef struct ShardRange
{
	int32		min;
	int32		max;
	int64		shardid;
	bool		local;			/* the only placement is on this node */
} ShardRange;

static Oid	ranges_relid = InvalidOid;	/* InvalidOid: not loaded */
static bool ranges_usable = false;	/* hash-distributed by key, "C" */
static ShardRange *ranges = NULL;
static int	nranges = 0;

static Oid	ranges_loading = InvalidOid;	/* being loaded */
static bool ranges_forgotten = false;	/* invalidated since the load began */

static void
ranges_forget(Oid relid)
{
	if (relid == InvalidOid || relid == ranges_relid)
		ranges_relid = InvalidOid;
	if (relid == InvalidOid || relid == ranges_loading)
		ranges_forgotten = true;
}

/* Subscribe the cache to relcache invalidations (module.c's _PG_init). */
void
idem_citus_local_init(void)
{
	idem_relcache_subscribe(ranges_forget);
}

/* Is the citus extension of this database at version 13.x? */
static bool
citus_is_13(void)
{
	Relation	rel;
	ScanKeyData skey;
	SysScanDesc scan;
	HeapTuple	tup;
	bool		ok = false;

	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&skey, Anum_pg_extension_extname, BTEqualStrategyNumber,
				F_NAMEEQ, CStringGetDatum("citus"));
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &skey);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
	{
		bool		isnull;
		Datum		v = heap_getattr(tup, Anum_pg_extension_extversion,
									 RelationGetDescr(rel), &isnull);

		ok = !isnull && strncmp(TextDatumGetCString(v), "13.", 3) == 0;
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return ok;
}

/* Find Citus's three functions once per backend; false without them. */
static bool
citus_fns(void)
{
	if (!citus_fns_loaded)
	{
		citus_fns_loaded = true;
		if (citus_is_13())
		{
			citus_lock_metadata = (lock_metadata_fn)
				load_external_function("citus", "LockShardDistributionMetadata", false, NULL);
			citus_get_status = (get_status_fn)
				load_external_function("citus", "GetCurrentLocalExecutionStatus", false, NULL);
			citus_set_status = (set_status_fn)
				load_external_function("citus", "SetLocalExecutionStatus", false, NULL);
		}
	}
	return citus_lock_metadata != NULL && citus_get_status != NULL &&
		citus_set_status != NULL;
}

/*
 * The attribute number of column name of a Citus catalog: by name, because Citus's
 * upgrades drop columns (pg_dist_shard's fourth is a dropped one).
 */
static AttrNumber
catalog_att(Relation rel, const char *name)
{
	AttrNumber	att = get_attnum(RelationGetRelid(rel), name);

	if (att == InvalidAttrNumber)
		elog(ERROR, "column \"%s\" of Citus catalog %s not found", name,
			 RelationGetRelationName(rel));
	return att;
}

/* Rows of a pg_dist_* catalog whose (oid or int8) column att is v. */
static SysScanDesc
scan_catalog(Relation rel, const char *index, AttrNumber att, Oid proc, Datum v,
			 ScanKey skey)
{
	Oid			indexid = get_relname_relid(index, PG_CATALOG_NAMESPACE);

	ScanKeyInit(skey, att, BTEqualStrategyNumber, proc, v);
	return systable_beginscan(rel, indexid, OidIsValid(indexid), NULL, 1, skey);
}

/* Is records hash-distributed by its column key, text "C"? */
static bool
distributed_by_key(Relation records)
{
	char		method;
	AttrNumber	distatt;
	int32		colocation;
	Form_pg_attribute key;

	if (!idem_citus_partition(RelationGetRelid(records), &method, &distatt, &colocation) ||
		method != 'h' || distatt != IDEM_COL_KEY ||
		RelationGetDescr(records)->natts < IDEM_COL_KEY)
		return false;
	key = TupleDescAttr(RelationGetDescr(records), IDEM_COL_KEY - 1);
	return key->atttypid == TEXTOID && key->attcollation == C_COLLATION_OID;
}

/* Is shardid's only placement in group? */
static bool
placement_is_only_local(int64 shardid, int32 group)
{
	Relation	rel = table_open(get_relname_relid("pg_dist_placement", PG_CATALOG_NAMESPACE),
								 AccessShareLock);
	ScanKeyData skey;
	SysScanDesc scan = scan_catalog(rel, "pg_dist_placement_shardid_index",
									catalog_att(rel, "shardid"),
									F_INT8EQ, Int64GetDatum(shardid), &skey);
	AttrNumber	groupid = catalog_att(rel, "groupid");
	HeapTuple	tup;
	int			n = 0;
	bool		local = false;

	while (HeapTupleIsValid(tup = systable_getnext(scan)))
	{
		bool		isnull;

		n++;
		local = DatumGetInt32(heap_getattr(tup, groupid, RelationGetDescr(rel), &isnull)) == group;
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return n == 1 && local;
}

/* Load the shard ranges of relid (already known distributed by key). */
static void
load_ranges(Oid relid)
{
	Relation	rel = table_open(get_relname_relid("pg_dist_shard", PG_CATALOG_NAMESPACE),
								 AccessShareLock);
	ScanKeyData skey;
	SysScanDesc scan = scan_catalog(rel, "pg_dist_shard_logical_relid_index",
									catalog_att(rel, "logicalrelid"),
									F_OIDEQ, ObjectIdGetDatum(relid), &skey);
	AttrNumber	att_id = catalog_att(rel, "shardid");
	AttrNumber	att_min = catalog_att(rel, "shardminvalue");
	AttrNumber	att_max = catalog_att(rel, "shardmaxvalue");
	HeapTuple	tup;
	int32		group = idem_citus_local_group();
	int			cap = 16;
	ShardRange *made = MemoryContextAlloc(TopMemoryContext, cap * sizeof(ShardRange));
	int			n = 0;

	while (HeapTupleIsValid(tup = systable_getnext(scan)))
	{
		bool		nullmin;
		bool		nullmax;
		bool		isnull;
		Datum		min = heap_getattr(tup, att_min, RelationGetDescr(rel), &nullmin);
		Datum		max = heap_getattr(tup, att_max, RelationGetDescr(rel), &nullmax);

		if (nullmin || nullmax)
			continue;
		if (n == cap)
		{
			cap *= 2;
			made = repalloc(made, cap * sizeof(ShardRange));
		}
		made[n].min = pg_strtoint32(TextDatumGetCString(min));
		made[n].max = pg_strtoint32(TextDatumGetCString(max));
		made[n].shardid = DatumGetInt64(heap_getattr(tup, att_id, RelationGetDescr(rel), &isnull));
		made[n].local = false;
		n++;
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);

	for (int i = 0; i < n; i++)
		made[i].local = placement_is_only_local(made[i].shardid, group);
	if (ranges != NULL)
		pfree(ranges);
	ranges = made;
	nranges = n;
}

/* The range of hash h, or NULL. */
static ShardRange *
find_range(int32 h)
{
	for (int i = 0; i < nranges; i++)
		if (ranges[i].min <= h && h <= ranges[i].max)
			return &ranges[i];
	return NULL;
}

/* The cached range of key's shard in records, loading the cache; or NULL. */
static ShardRange *
range_of(Relation records, text *key)
{
	Oid			relid = RelationGetRelid(records);
	int32		h;

	if (ranges_relid != relid)
	{
		ranges_forgotten = false;
		ranges_loading = relid;
		ranges_usable = distributed_by_key(records);
		if (ranges_usable)
			load_ranges(relid);

		/*
		 * Loading reads catalogs, which may accept invalidations: ranges
		 * loaded while one arrived are used for this call only (the caller
		 * looks again under Citus's metadata lock) and loaded anew next
		 * time.
		 */
		ranges_relid = ranges_forgotten ? InvalidOid : relid;
		ranges_loading = InvalidOid;
	}
	if (!ranges_usable)
		return NULL;
	h = DatumGetInt32(DirectFunctionCall1Coll(hashtext, C_COLLATION_OID,
											  PointerGetDatum(key)));
	return find_range(h);
}

/*
 * The shard relation of idem_records (records, a Citus table, open) that
 * holds key, opened with RowExclusiveLock, when this node holds its only
 * placement and the fast path may write into it (see the header comment);
 * otherwise NULL, and the claim runs as SQL.
 */
Relation
idem_citus_local_shard(Relation records, text *key)
{
	const char *local_execution;
	ShardRange *r;
	int64		shardid;
	char		relname[NAMEDATALEN];
	Oid			relid;

	if (!citus_fns())
		return NULL;
	local_execution = GetConfigOption("citus.enable_local_execution", true, false);
	if (local_execution == NULL || strcmp(local_execution, "on") != 0)
		return NULL;
	r = range_of(records, key);
	if (r == NULL || !r->local)
		return NULL;
	if (citus_get_status() == CITUS_LOCAL_EXECUTION_DISABLED)
		return NULL;

	/* Citus's write lock on the shard's metadata, then a fresh look. */
	shardid = r->shardid;
	citus_lock_metadata(shardid, ShareLock);
	AcceptInvalidationMessages();
	r = range_of(records, key);
	if (r == NULL || !r->local || r->shardid != shardid)
		return NULL;

	idem_citus_shard_name(relname, RelationGetRelationName(records), shardid);
	relid = get_relname_relid(relname, RelationGetNamespace(records));
	if (!OidIsValid(relid))
		return NULL;
	citus_set_status(CITUS_LOCAL_EXECUTION_REQUIRED);
	return try_relation_open(relid, RowExclusiveLock);
}
