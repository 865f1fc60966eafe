/*-------------------------------------------------------------------------
 *
 * citus.c
 *	  What the extension needs to know about Citus, read from Citus's own
 *	  catalogs (pg_dist_partition, pg_dist_shard, pg_dist_local_group) without
 *	  linking to Citus: is a table managed by Citus, is a relation a shard of
 *	  a given table, is this node the coordinator; and the errors for what
 *	  does not hold on Citus yet (docs/citus.md).
 *
 *	  Without the citus extension in the database every question answers
 *	  false after one syscache look-up (get_extension_oid), and nothing is
 *	  refused.
 *
 *	  Locking: each catalog is opened with AccessShareLock for the scan and
 *	  closed at once.  Memory: the caller's context; nothing is kept.
 *	  Callers cache answers where they are on a hot path (direct.c keeps
 *	  whether idem_records is a Citus table with its OID).
 *
 *	  This file calls no other file of src/: direct.c, batch.c (whether to
 *	  claim key by key), lease.c,
 *	  guard.c and machine_cache.c call it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/pg_namespace.h"
#include "commands/extension.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "idempotency.h"

/*
 * Is relid a table that Citus manages (distributed, reference or Citus
 * local: a row of pg_catalog.pg_dist_partition)?  False without the citus
 * extension in this database.  Reads the catalog: callers cache.
 */
bool
idem_citus_table(Oid relid)
{
	Oid			catalog;
	Oid			index;
	Relation	pdp;
	ScanKeyData skey;
	SysScanDesc scan;
	bool		found;

	if (!OidIsValid(get_extension_oid("citus", true)))
		return false;
	catalog = get_relname_relid("pg_dist_partition", PG_CATALOG_NAMESPACE);
	if (!OidIsValid(catalog))
		return false;
	index = get_relname_relid("pg_dist_partition_logical_relid_index", PG_CATALOG_NAMESPACE);

	pdp = table_open(catalog, AccessShareLock);
	/* logicalrelid (attribute 1) is a regclass: compared as an oid. */
	ScanKeyInit(&skey, 1, BTEqualStrategyNumber, F_OIDEQ, ObjectIdGetDatum(relid));
	scan = systable_beginscan(pdp, index, OidIsValid(index), NULL, 1, &skey);
	found = HeapTupleIsValid(systable_getnext(scan));
	systable_endscan(scan);
	table_close(pdp, AccessShareLock);
	return found;
}

/*
 * fname (idem_guard) on a table that Citus manages: refused up front.  The
 * guard's triggers would have to run on every shard (Citus refuses
 * triggers on distributed tables unless citus.enable_unsafe_triggers is
 * on), and a guard created only on the coordinator's shell table would
 * leave every UPDATE through the coordinator unguarded.
 */
void
idem_refuse_citus_table(Oid relid, const char *table, const char *fname)
{
	if (idem_citus_table(relid))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("%s: table %s is managed by Citus", fname, table),
				 errdetail("Guards on Citus tables are not supported yet: Citus does not put the guard's triggers on the shards, so updates would go through unguarded."),
				 errhint("Keep a guarded table out of Citus (neither distributed nor a reference or local table); docs/citus.md lists what works on Citus.")));
}

/*
 * Is rel a Citus shard (a placement on this node) of the table logical?
 * Its name is logical's followed by _<shard id>, in the same schema, and
 * pg_catalog.pg_dist_shard has that shard id for logical.  False without
 * the citus extension.
 */
bool
idem_citus_shard_of(Relation rel, Oid logical)
{
	const char *name = RelationGetRelationName(rel);
	const char *sep = strrchr(name, '_');
	char	   *lname;
	char	   *end;
	int64		shardid;
	Oid			catalog;
	Oid			index;
	Relation	pds;
	ScanKeyData skey;
	SysScanDesc scan;
	HeapTuple	tup;
	bool		found = false;

	if (!OidIsValid(logical) || sep == NULL || sep[1] == '\0' ||
		RelationGetNamespace(rel) != get_rel_namespace(logical) ||
		!OidIsValid(get_extension_oid("citus", true)))
		return false;
	lname = get_rel_name(logical);
	if (lname == NULL || strlen(lname) != (size_t) (sep - name) ||
		strncmp(name, lname, sep - name) != 0)
		return false;
	errno = 0;
	shardid = strtoi64(sep + 1, &end, 10);
	if (errno != 0 || *end != '\0' || shardid <= 0)
		return false;

	catalog = get_relname_relid("pg_dist_shard", PG_CATALOG_NAMESPACE);
	if (!OidIsValid(catalog))
		return false;
	index = get_relname_relid("pg_dist_shard_shardid_index", PG_CATALOG_NAMESPACE);
	pds = table_open(catalog, AccessShareLock);
	/* shardid (attribute 2) is an int8; logicalrelid (1) a regclass. */
	ScanKeyInit(&skey, 2, BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(shardid));
	scan = systable_beginscan(pds, index, OidIsValid(index), NULL, 1, &skey);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
	{
		bool		isnull;
		Datum		d = heap_getattr(tup, 1, RelationGetDescr(pds), &isnull);

		found = !isnull && DatumGetObjectId(d) == logical;
	}
	systable_endscan(scan);
	table_close(pds, AccessShareLock);
	return found;
}

/*
 * fname (idem_begin) on a Citus node other than the coordinator while
 * idem_records is a Citus table (records_citus): refused.  idem_token_seq
 * is a sequence of each node, so a token drawn on a worker could be below
 * one that the coordinator issued for the same key, and fencing would not
 * hold.  The node is the coordinator when pg_catalog.pg_dist_local_group
 * says group 0.
 */
void
idem_refuse_citus_worker_tokens(bool records_citus, const char *fname)
{
	Oid			catalog;
	Relation	rel;
	SysScanDesc scan;
	HeapTuple	tup;
	int32		group = 0;

	if (!records_citus)
		return;
	catalog = get_relname_relid("pg_dist_local_group", PG_CATALOG_NAMESPACE);
	if (!OidIsValid(catalog))
		return;
	rel = table_open(catalog, AccessShareLock);
	scan = systable_beginscan(rel, InvalidOid, false, NULL, 0, NULL);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
	{
		bool		isnull;
		Datum		d = heap_getattr(tup, 1, RelationGetDescr(rel), &isnull);

		if (!isnull)
			group = DatumGetInt32(d);
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	if (group != 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("%s: fencing tokens are issued on the Citus coordinator only", fname),
				 errdetail("This node is a Citus worker (group %d); its idem_token_seq is its own, so a token drawn here could be below one the coordinator issued for the same key.", group),
				 errhint("Call %s through the coordinator.", fname)));
}
