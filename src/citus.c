/*-------------------------------------------------------------------------
 *
 * citus.c
 *	  What the extension needs to know about Citus, read from Citus's own
 *	  catalogs (pg_dist_partition, pg_dist_shard, pg_dist_local_group) without
 *	  linking to Citus: is a table managed by Citus and how it is distributed,
 *	  is a relation a shard of a given table, which local relation is this
 *	  node's placement of a reference table's shard or of the shard co-located
 *	  with another (same shardminvalue, named as Citus's AppendShardIdToName
 *	  names it), is this node the coordinator; and the errors for what does not
 *	  work on Citus yet (docs/citus.md).
 *
 *	  Without the citus extension in the database every question answers false
 *	  after one syscache look-up (get_extension_oid), and nothing is refused.
 *
 *	  Locking: each catalog is opened with AccessShareLock for one scan and
 *	  closed at once.  Memory: the caller's context; nothing is kept here, so a
 *	  caller on a hot path caches the answer itself, until a relcache
 *	  invalidation of the table (Citus sends one whenever a table's
 *	  pg_dist_partition row changes).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/pg_namespace.h"
#include "commands/extension.h"
#include "common/hashfn.h"
#include "mb/pg_wchar.h"
#include "nodes/primnodes.h"
#include "nodes/readfuncs.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "idempotency.h"
#include "citus.h"

/* A scan of one of Citus's catalogs (citus_scan_begin .. citus_scan_end). */
typedef struct CitusScan
{
	Relation	rel;
	SysScanDesc scan;
} CitusScan;

/*
 * Begin a scan of pg_catalog.<catalog> for the rows whose attribute att
 * equals value (by eqproc), through the index of that name when it
 * exists; rows come from systable_getnext(cs->scan).  False when there is
 * no such catalog (nothing is open then).  The catalog is opened with
 * AccessShareLock, closed with the scan by citus_scan_end.
 */
static bool
citus_scan_begin(CitusScan *cs, const char *catalog, const char *index,
				 AttrNumber att, RegProcedure eqproc, Datum value)
{
	Oid			catalog_oid = get_relname_relid(catalog, PG_CATALOG_NAMESPACE);
	Oid			index_oid;
	ScanKeyData skey;

	if (!OidIsValid(catalog_oid))
		return false;
	index_oid = get_relname_relid(index, PG_CATALOG_NAMESPACE);
	cs->rel = table_open(catalog_oid, AccessShareLock);
	ScanKeyInit(&skey, att, BTEqualStrategyNumber, eqproc, value);
	cs->scan = systable_beginscan(cs->rel, index_oid, OidIsValid(index_oid), NULL,
								  1, &skey);
	return true;
}

static void
citus_scan_end(CitusScan *cs)
{
	systable_endscan(cs->scan);
	table_close(cs->rel, AccessShareLock);
}

/*
 * Is relid a table that Citus manages (distributed, reference or Citus
 * local: a row of pg_catalog.pg_dist_partition)?  False without the citus
 * extension in this database.  Reads the catalog: callers cache.
 */
bool
idem_citus_table(Oid relid)
{
	char		method;
	AttrNumber	distatt;
	int32		colocation;

	return idem_citus_partition(relid, &method, &distatt, &colocation);
}

/*
 * Citus's name for the placement of shard shardid of a relation called
 * name, as Citus's AppendShardIdToName makes it: name_<shardid>, or, when
 * that does not fit in NAMEDATALEN, name clipped, a hash of the whole
 * name, then _<shardid>.  out has NAMEDATALEN bytes.
 */
void
idem_citus_shard_name(char *out, const char *name, int64 shardid)
{
	char		suffix[NAMEDATALEN];
	int			len = strlen(name);
	int			slen;

	snprintf(suffix, sizeof(suffix), "_" INT64_FORMAT, shardid);
	slen = strlen(suffix);
	if (len < NAMEDATALEN - slen)
		snprintf(out, NAMEDATALEN, "%s%s", name, suffix);
	else
		snprintf(out, NAMEDATALEN, "%.*s_%.8x%s",
				 pg_mbcliplen(name, len, NAMEDATALEN - slen - 10), name,
				 hash_bytes((const unsigned char *) name, len), suffix);
}

/*
 * The row of pg_catalog.pg_dist_partition of relid, or false (not a Citus
 * table, or no citus extension).  *method: partmethod ('h' hash, 'n' none:
 * reference and Citus local tables, ...); *distatt: the distribution
 * column (0 when there is none); *colocation: colocationid.
 */
bool
idem_citus_partition(Oid relid, char *method, AttrNumber *distatt, int32 *colocation)
{
	CitusScan	cs;
	HeapTuple	tup;
	bool		found = false;

	if (!OidIsValid(get_extension_oid("citus", true)) ||
		!citus_scan_begin(&cs, "pg_dist_partition", "pg_dist_partition_logical_relid_index",
						  1, F_OIDEQ, ObjectIdGetDatum(relid)))
		return false;
	tup = systable_getnext(cs.scan);
	if (HeapTupleIsValid(tup))
	{
		TupleDesc	desc = RelationGetDescr(cs.rel);
		bool		isnull;
		Datum		d;

		found = true;
		d = heap_getattr(tup, 2, desc, &isnull);	/* partmethod "char" */
		*method = isnull ? '\0' : DatumGetChar(d);
		*distatt = 0;
		d = heap_getattr(tup, 3, desc, &isnull);	/* partkey: a Var, as nodeToString wrote it */
		if (!isnull)
		{
			Node	   *key = stringToNode(TextDatumGetCString(d));

			if (key != NULL && IsA(key, Var))
				*distatt = ((Var *) key)->varattno;
		}
		d = heap_getattr(tup, 4, desc, &isnull);	/* colocationid */
		*colocation = isnull ? 0 : DatumGetInt32(d);
	}
	citus_scan_end(&cs);
	return found;
}

/*
 * fname (idem_guard, idem_unguard) on relid: true when it is a Citus
 * hash-distributed table (the guard goes on every shard, guard.c), false
 * when Citus does not manage it; refused (0A000) for the other kinds of
 * Citus table: a reference table's row is changed on every node, and its
 * history could not be co-located; a Citus local table is not tested.
 */
bool
idem_citus_guardable(Oid relid, const char *table, const char *fname)
{
	char		method;
	AttrNumber	distatt;
	int32		colocation;

	if (!idem_citus_partition(relid, &method, &distatt, &colocation))
		return false;
	if (method == 'h' && distatt > 0)
		return true;
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("%s: table %s is a Citus table that is not hash-distributed", fname, table),
			 errdetail("Guards on Citus tables are supported on distributed tables with a distribution column only, not on reference, Citus local, append or single-shard tables."),
			 errhint("Distribute the table with create_distributed_table(table, column), or keep it out of Citus; see docs/citus.md.")));
	return false;				/* keep the compiler quiet */
}

/*
 * Is rel the placement on this node of a shard of a Citus table?  Its
 * name is Citus's name for a shard id that pg_catalog.pg_dist_shard has,
 * and it is in the schema of that shard's table.  Then *logical is the
 * table, *shardid the shard and *minvalue its shardminvalue (NULL for a
 * reference table; palloc'd in the caller's context), each when not NULL.
 * False without the citus extension.
 */
bool
idem_citus_shard_rel(Relation rel, Oid *logical, int64 *shardid, char **minvalue)
{
	const char *name = RelationGetRelationName(rel);
	const char *sep = strrchr(name, '_');
	char	   *end;
	int64		id;
	CitusScan	cs;
	HeapTuple	tup;
	bool		found = false;

	if (sep == NULL || sep[1] == '\0' || !OidIsValid(get_extension_oid("citus", true)))
		return false;
	errno = 0;
	id = strtoi64(sep + 1, &end, 10);
	if (errno != 0 || *end != '\0' || id <= 0)
		return false;

	/* shardid (attribute 2) is an int8; logicalrelid (1) a regclass. */
	if (!citus_scan_begin(&cs, "pg_dist_shard", "pg_dist_shard_shardid_index",
						  2, F_INT8EQ, Int64GetDatum(id)))
		return false;
	tup = systable_getnext(cs.scan);
	if (HeapTupleIsValid(tup))
	{
		TupleDesc	desc = RelationGetDescr(cs.rel);
		bool		isnull;
		Datum		d = heap_getattr(tup, 1, desc, &isnull);
		Oid			table = isnull ? InvalidOid : DatumGetObjectId(d);
		char	   *lname = OidIsValid(table) ? get_rel_name(table) : NULL;
		char		expect[NAMEDATALEN];

		if (lname != NULL && get_rel_namespace(table) == RelationGetNamespace(rel) &&
			table != RelationGetRelid(rel))
		{
			idem_citus_shard_name(expect, lname, id);
			found = strcmp(expect, name) == 0;
		}
		if (found && logical != NULL)
			*logical = table;
		if (found && shardid != NULL)
			*shardid = id;
		if (found && minvalue != NULL)
		{
			d = heap_getattr(tup, 5, desc, &isnull);	/* shardminvalue text */
			*minvalue = isnull ? NULL : TextDatumGetCString(d);
		}
	}
	citus_scan_end(&cs);
	return found;
}

/*
 * Is rel a Citus shard (a placement on this node) of the table logical?
 * False without the citus extension.
 */
bool
idem_citus_shard_of(Relation rel, Oid logical)
{
	Oid			table;

	return OidIsValid(logical) && idem_citus_shard_rel(rel, &table, NULL, NULL) &&
		table == logical;
}

/*
 * The placement on this node of a shard of the Citus table logical: the
 * shard whose shardminvalue is minvalue (the shard co-located with
 * another table's shard of that minvalue), or, when minvalue is NULL, its
 * only shard (a reference table).  InvalidOid when there is no such shard
 * or this node holds no placement of it, and without the citus extension.
 */
Oid
idem_citus_local_placement(Oid logical, const char *minvalue)
{
	CitusScan	cs;
	HeapTuple	tup;
	int64		shardid = 0;
	int			n = 0;
	char	   *lname;
	char		name[NAMEDATALEN];

	if (!OidIsValid(get_extension_oid("citus", true)) ||
		!citus_scan_begin(&cs, "pg_dist_shard", "pg_dist_shard_logical_relid_index",
						  1, F_OIDEQ, ObjectIdGetDatum(logical)))
		return InvalidOid;
	while (HeapTupleIsValid(tup = systable_getnext(cs.scan)))
	{
		TupleDesc	desc = RelationGetDescr(cs.rel);
		bool		isnull;
		Datum		d;

		if (minvalue != NULL)
		{
			d = heap_getattr(tup, 5, desc, &isnull);	/* shardminvalue text */
			if (isnull || strcmp(TextDatumGetCString(d), minvalue) != 0)
				continue;
		}
		d = heap_getattr(tup, 2, desc, &isnull);	/* shardid */
		if (!isnull)
		{
			shardid = DatumGetInt64(d);
			n++;
		}
	}
	citus_scan_end(&cs);

	lname = get_rel_name(logical);
	if (n != 1 || lname == NULL)
		return InvalidOid;
	idem_citus_shard_name(name, lname, shardid);
	return get_relname_relid(name, get_rel_namespace(logical));
}

/*
 * This node's Citus group (pg_catalog.pg_dist_local_group: 0 on the
 * coordinator), or -1 without Citus's catalogs.  Reads the catalog:
 * callers that need it often cache it.
 */
int32
idem_citus_local_group(void)
{
	Oid			catalog = get_relname_relid("pg_dist_local_group", PG_CATALOG_NAMESPACE);
	Relation	rel;
	SysScanDesc scan;
	HeapTuple	tup;
	int32		group = -1;

	if (!OidIsValid(catalog))
		return -1;
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
	return group;
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
	int32		group;

	if (!records_citus)
		return;
	group = idem_citus_local_group();
	if (group > 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("%s: fencing tokens are issued on the Citus coordinator only", fname),
				 errdetail("This node is a Citus worker (group %d); its idem_token_seq is its own, so a token drawn here could be below one the coordinator issued for the same key.", group),
				 errhint("Call %s through the coordinator.", fname)));
}
