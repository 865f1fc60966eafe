/*-------------------------------------------------------------------------
 *
 * guard_trigger.c
 *	  The run time of a table guard, inside the user's own INSERT or
 *	  UPDATE of a guarded table: idem_guard_allows, the function of the
 *	  triggers' WHEN condition (a legal row costs this one call), and
 *	  idem_guard_trigger, which fires only when that said no.  Both apply
 *	  the one rule of a guard, idem_guard_verdict (machine.c).
 *
 *	  Roles (the fourth trigger argument): "check" finds out why and raises
 *	  ID004 (worded by guard_error.c), or 27000 when the version did not
 *	  follow the status; "version" (BEFORE UPDATE) sets the version column
 *	  to the old version + 1 on each change of the status; "children" (per
 *	  statement) refuses an UPDATE reaching an unguarded inheritance child;
 *	  "log" appends each change to idem_transition_log through a saved
 *	  plan, or, on a Citus shard, to the placement on this node of the
 *	  history table's co-located shard (the fifth argument): a local INSERT
 *	  in the shard's own transaction, never a distributed query.  A trigger
 *	  that is not a real guard (guard_shape.c) raises 39P01.
 *
 *	  Errors are raised inside the user's statement, which rolls back;
 *	  messages begin with what the user did ("guarded update of <table>"),
 *	  since the user never called idem_guard.  Locking and visibility: none
 *	  beyond the statement's; the history INSERT runs through SPI in the
 *	  same transaction, committing or rolling back with its change.
 *
 *	  Invariants (docs/security.md, "pinned or copied" and "re-entrancy is
 *	  counted"): user code runs inside this trigger (a cast to json of the
 *	  key in the history INSERT, triggers and policies that INSERT fires)
 *	  and can fire it again, nested.  Each call counts its entry busy and
 *	  pins the machines (PG_TRY), so a nested call that invalidates them
 *	  frees nothing the outer call still uses; column values are fetched
 *	  (detoasted) before the machine is looked up.  idem_guard_allows keeps
 *	  its machine in fn_extra, checked against the generation.
 *
 *	  Memory: per-row work in the trigger's call context; the history plan
 *	  and the entry belong to guard_cache.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/sysattr.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/objectaddress.h"
#include "catalog/pg_class.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "common/hashfn.h"
#include "common/int.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "nodes/bitmapset.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/syscache.h"
#include "utils/varlena.h"
#include "utils/xid8.h"

#include "idempotency.h"
#include "citus.h"
#include "guard.h"
#include "machine.h"

PG_FUNCTION_INFO_V1(idem_guard_trigger);
PG_FUNCTION_INFO_V1(idem_guard_allows);

/*
 * idem_guard_allows(machine text, old_status text, new_status text)
 *   RETURNS boolean
 *
 * The rule of a guard (idem_guard_verdict, machine.c), evaluated in the
 * WHEN condition of the triggers guard_install.c creates: true when the
 * value is unchanged (bytewise, NULL included), when old_status is NULL
 * and new_status is an initial state, or when old_status -> new_status is
 * declared; false otherwise, values that are not states included (the
 * trigger then fires and explains).  Fails with
 * 22004 (NULL machine), 22023/22001 (bad machine name), 42704 (no such
 * machine).
 */
Datum
idem_guard_allows(PG_FUNCTION_ARGS)
{
	text	   *args[3];
	IdemMachine *m;
	bool		result;

	idem_call_text_args(fcinfo, args, 3);
	m = idem_machine_of_call(fcinfo, "idem_guard_allows");
	result = idem_guard_verdict(m, args[1], args[2], false) <= IDEM_GUARD_UNCHANGED;
	idem_machine_unpin();
	PG_RETURN_BOOL(result);
}

/* ------------------------------------------------------------------------
 * The checks
 * ------------------------------------------------------------------------
 */

static text *
status_value(HeapTuple tuple, GuardEntry *e, TupleDesc desc)
{
	bool		isnull;
	Datum		d = heap_getattr(tuple, e->status_att, desc, &isnull);

	return isnull ? NULL : DatumGetTextPP(d);
}

static bool
same_value(text *a, text *b)
{
	if (a == NULL || b == NULL)
		return a == b;
	return VARSIZE_ANY_EXHDR(a) == VARSIZE_ANY_EXHDR(b) &&
		memcmp(VARDATA_ANY(a), VARDATA_ANY(b), VARSIZE_ANY_EXHDR(a)) == 0;
}

/* newtuple with the version column set to the old version + 1. */
static HeapTuple
bump_version(GuardEntry *e, TriggerData *td, HeapTuple oldtuple, HeapTuple newtuple)
{
	Relation	rel = td->tg_relation;
	TupleDesc	desc = RelationGetDescr(rel);
	bool		isnull;
	Datum		d = heap_getattr(oldtuple, e->version_att, desc, &isnull);
	int			col = e->version_att;
	bool		newnull = false;
	Datum		val;
	const char *vname = NameStr(TupleDescAttr(desc, e->version_att - 1)->attname);

	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s: version column \"%s\" of table %s is null",
						idem_guard_doing(td, e->table_name), vname, e->table_name),
				 errdetail("A status change increments the version, and a null version cannot be incremented."),
				 errhint("Give the column a NOT NULL constraint and a default, for example 0."),
				 errtablecol(rel, e->version_att)));
	if (e->version_int8)
	{
		int64		v;

		if (pg_add_s64_overflow(DatumGetInt64(d), 1, &v))
			ereport(ERROR,
					(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
					 errmsg("%s: version column \"%s\" of table %s is out of range",
							idem_guard_doing(td, e->table_name), vname, e->table_name),
					 errtablecol(rel, e->version_att)));
		val = Int64GetDatum(v);
	}
	else
	{
		int32		v;

		if (pg_add_s32_overflow(DatumGetInt32(d), 1, &v))
			ereport(ERROR,
					(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
					 errmsg("%s: version column \"%s\" of table %s is out of range",
							idem_guard_doing(td, e->table_name), vname, e->table_name),
					 errtablecol(rel, e->version_att)));
		val = Int32GetDatum(v);
	}
	return heap_modify_tuple_by_cols(newtuple, desc, 1, &col, &val, &newnull);
}

/*
 * The version of a row whose status changed must be the old version + 1:
 * the version trigger (BEFORE) sets it, unless a BEFORE trigger that fires
 * after it changed the status (or the version) again.  27000 then.
 */
static void
guard_check_version(GuardEntry *e, TriggerData *td)
{
	Relation	rel = td->tg_relation;
	TupleDesc	desc = RelationGetDescr(rel);
	bool		oldnull;
	bool		newnull;
	Datum		o = heap_getattr(td->tg_trigtuple, e->version_att, desc, &oldnull);
	Datum		n = heap_getattr(td->tg_newtuple, e->version_att, desc, &newnull);
	bool		bumped;

	if (oldnull || newnull)
		bumped = false;
	else if (e->version_int8)
		bumped = DatumGetInt64(o) < PG_INT64_MAX && DatumGetInt64(n) == DatumGetInt64(o) + 1;
	else
		bumped = DatumGetInt32(o) < PG_INT32_MAX && DatumGetInt32(n) == DatumGetInt32(o) + 1;
	if (!bumped)
		ereport(ERROR,
				(errcode(ERRCODE_TRIGGERED_DATA_CHANGE_VIOLATION),
				 errmsg("%s: the status changed but version column \"%s\" did not advance by one",
						idem_guard_doing(td, e->table_name),
						NameStr(TupleDescAttr(desc, e->version_att - 1)->attname)),
				 errdetail("A BEFORE trigger that fires after the guard's version trigger changed the status or the version column of table %s.",
						   e->table_name),
				 errhint("Rename that trigger so that it sorts before \"idem_guard_version_%s\" (BEFORE triggers fire in name order), or set the status in the UPDATE itself.",
						 e->status_name),
				 errtablecol(rel, e->version_att)));
}

/*
 * Check the change td's row makes to the status column, failing with
 * ID004 when the machine does not allow it (idem_guard_verdict, the rule
 * of the WHEN condition too), and with 27000 when the status changed but
 * the version column did not advance.
 */
static void
guard_check(GuardEntry *e, FunctionCallInfo fcinfo, TriggerData *td)
{
	TupleDesc	desc = RelationGetDescr(td->tg_relation);
	bool		insert = TRIGGER_FIRED_BY_INSERT(td->tg_event);
	text	   *from = NULL;
	text	   *to;
	IdemMachine *m;
	IdemGuardVerdict v;

	/* Values first (detoasting accepts invalidations), then the machine. */
	to = status_value(insert ? td->tg_trigtuple : td->tg_newtuple, e, desc);
	if (!insert)
		from = status_value(td->tg_trigtuple, e, desc);
	m = idem_guard_machine(e, fcinfo, td);
	v = idem_guard_verdict(m, from, to, insert);
	idem_guard_refuse(e, m, td, from, to, v);
	if (!insert && v != IDEM_GUARD_UNCHANGED && e->version_att != InvalidAttrNumber)
		guard_check_version(e, td);
}

/* ------------------------------------------------------------------------
 * Inheritance children
 * ------------------------------------------------------------------------
 */

/*
 * BEFORE UPDATE, per statement ("children"): an UPDATE of a guarded table
 * with inheritance children reaches the children's rows, and row triggers
 * are not inherited: every child must carry the same guard (its own
 * triggers), else the UPDATE is refused (0A000).  Costs nothing while the
 * table has never had a child (relhassubclass).  A guard removed from the
 * table itself (its column dropped) leaves this trigger inert.
 */
static void
guard_children(FunctionCallInfo fcinfo, TriggerData *td)
{
	Relation	rel = td->tg_relation;
	Trigger    *tg = td->tg_trigger;
	Oid			allows;
	List	   *children;
	ListCell   *lc;

	if (!rel->rd_rel->relhassubclass)
		return;
	allows = idem_guard_allows_oid(idem_extension_schema(fcinfo));
	if (!idem_rel_guarded(rel, tg->tgfoid, allows, tg->tgargs[0], tg->tgargs[1]))
		return;
	children = find_all_inheritors(RelationGetRelid(rel), AccessShareLock, NULL);
	foreach(lc, children)
	{
		Oid			child = lfirst_oid(lc);
		Relation	c;
		bool		ok;

		if (child == RelationGetRelid(rel))
			continue;
		c = table_open(child, NoLock);	/* locked by find_all_inheritors */
		ok = idem_rel_guarded(c, tg->tgfoid, allows, tg->tgargs[0], tg->tgargs[1]);
		if (!ok)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("guarded update of %s: inheritance child %s has no guard",
							quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
													   RelationGetRelationName(rel)),
							quote_qualified_identifier(get_namespace_name(RelationGetNamespace(c)),
													   RelationGetRelationName(c))),
					 errdetail("An UPDATE of a table reaches the rows of its inheritance children, whose triggers do not inherit the guard of machine \"%s\" on column \"%s\".",
							   tg->tgargs[0], tg->tgargs[1]),
					 errhint("Guard the child too: SELECT idem_guard('%s', '%s', '%s').",
							 quote_qualified_identifier(get_namespace_name(RelationGetNamespace(c)),
														RelationGetRelationName(c)),
							 tg->tgargs[1], tg->tgargs[0])));
		table_close(c, NoLock);
	}
}

/* ------------------------------------------------------------------------
 * History
 * ------------------------------------------------------------------------
 */

/*
 * The history table of a guard on a Citus distributed table, as the
 * relation to insert into: on a shard, the placement on this node of the
 * history table's co-located shard (the same shardminvalue), found through
 * Citus's catalogs, so that the row and its history change on one shard,
 * in one local transaction, with no distributed query from the shard.
 * Sets e->dist_att to the guarded table's column that fills the history
 * table's first column (its distribution column, of the same name and
 * type), and *disttype to its type.
 */
static char *
guard_history_target(GuardEntry *e, TriggerData *td, Oid *disttype)
{
	Relation	rel = td->tg_relation;
	const char *doing = idem_guard_doing(td, e->table_name);
	List	   *names = textToQualifiedNameList(cstring_to_text(e->history_table));
	Oid			hist = RangeVarGetRelid(makeRangeVarFromNameList(names), NoLock, true);
	Oid			target = hist;
	Relation	h;
	Form_pg_attribute first = NULL;
	int			i;
	char	   *name;

	/* Citus creates a table's metadata on the workers when it commits. */
	if (!OidIsValid(hist))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("%s: history table %s does not exist on this node",
						doing, e->history_table),
				 errdetail("A history table that idem_guard created is known to the workers once its transaction commits."),
				 errhint("Commit the transaction that called idem_guard before writing the table; if the history table was dropped, install the guard again with idem_guard().")));
	if (e->on_shard)
		target = idem_citus_local_placement(hist, e->shard_min);
	if (!OidIsValid(target))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("%s: history table %s has no shard on this node co-located with the row",
						doing, e->history_table),
				 errdetail("The history of a guard on a distributed table is written to the shard of its history table that is co-located with the row's shard."),
				 errhint("Keep the history table co-located with the guarded table, or install the guard again with idem_guard().")));
	h = table_open(target, AccessShareLock);
	for (i = 0; i < RelationGetDescr(h)->natts && first == NULL; i++)
		if (!TupleDescAttr(RelationGetDescr(h), i)->attisdropped)
			first = TupleDescAttr(RelationGetDescr(h), i);
	e->dist_att = first ? SPI_fnumber(RelationGetDescr(rel), NameStr(first->attname)) : 0;
	if (first == NULL || e->dist_att <= 0 ||
		TupleDescAttr(RelationGetDescr(rel), e->dist_att - 1)->atttypid != first->atttypid)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("%s: the first column of history table %s is not a column of the guarded table",
						doing, e->history_table),
				 errdetail("The first column of the history table holds the row's distribution column, of the same name and type."),
				 errhint("Install the guard again with idem_guard().")));
	*disttype = first->atttypid;
	name = quote_qualified_identifier(get_namespace_name(RelationGetNamespace(h)),
									  RelationGetRelationName(h));
	table_close(h, AccessShareLock);
	return name;
}

/*
 * The row_key expression of the history INSERT, appended to sql: NULL
 * without a primary key, else jsonb_build_object of the key's columns,
 * parameters $6 on (their types into argtypes[5..], their attribute
 * numbers into e->pk_atts).
 */
static void
guard_log_row_key(GuardEntry *e, Relation rel, Bitmapset *pk, Oid *argtypes,
				  StringInfo sql)
{
	TupleDesc	desc = RelationGetDescr(rel);
	int			x = -1;
	int			i = 0;

	if (e->npk == 0)
	{
		appendStringInfoString(sql, "NULL");
		return;
	}
	appendStringInfoString(sql, "pg_catalog.jsonb_build_object(");
	while ((x = bms_next_member(pk, x)) >= 0)
	{
		AttrNumber	att = x + FirstLowInvalidHeapAttributeNumber;
		Form_pg_attribute a;

		if (att <= 0 || att > desc->natts)
			elog(ERROR, "primary key of \"%s\" has attribute number %d",
				 RelationGetRelationName(rel), att);
		a = TupleDescAttr(desc, att - 1);
		e->pk_atts[i] = att;
		argtypes[5 + i] = a->atttypid;
		appendStringInfo(sql, "%s%s, $%d", i > 0 ? ", " : "",
						 quote_literal_cstr(NameStr(a->attname)), 6 + i);
		i++;
	}
	appendStringInfoChar(sql, ')');
}

/*
 * Prepare the INSERT into idem_transition_log for this entry's table:
 * $1 table, $2 column, $3 from, $4 to, $5 xact id, $6... the primary key
 * columns, turned into a jsonb object by jsonb_build_object (so each value
 * keeps its JSON type).  For a guard on a Citus distributed table, the
 * INSERT goes to its history table (guard_history_target), whose first
 * column takes the row's distribution column as the last parameter, and
 * logged_at the clock.  Called between SPI_connect and SPI_finish.
 */
static void
guard_log_prepare(GuardEntry *e, TriggerData *td, Oid nsp)
{
	Relation	rel = td->tg_relation;
	TupleDesc	desc = RelationGetDescr(rel);
	Bitmapset  *pk = RelationGetIndexAttrBitmap(rel, INDEX_ATTR_BITMAP_PRIMARY_KEY);
	char	   *nspname = get_namespace_name(nsp);
	StringInfoData sql;
	Oid		   *argtypes;
	int			npk = bms_num_members(pk);
	SPIPlanPtr	plan;
	Oid			disttype = InvalidOid;
	char	   *target = NULL;

	if (nspname == NULL)
		elog(ERROR, "cache lookup failed for schema %u", nsp);
	if (e->history_table != NULL)
		target = guard_history_target(e, td, &disttype);
	else if (e->on_shard)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("%s: this guard writes its history to idem_transition_log, which is not co-located with the shard",
						idem_guard_doing(td, e->table_name)),
				 errdetail("The guard was installed before the table was distributed."),
				 errhint("Install the guard again with idem_guard() on the distributed table: its history then goes to a table co-located with it.")));

	e->npk = npk;
	e->pk_atts = MemoryContextAlloc(e->cxt, sizeof(AttrNumber) * Max(npk, 1));
	argtypes = palloc(sizeof(Oid) * (6 + npk));
	argtypes[0] = TEXTOID;
	argtypes[1] = TEXTOID;
	argtypes[2] = TEXTOID;
	argtypes[3] = TEXTOID;
	argtypes[4] = XID8OID;
	argtypes[5 + npk] = disttype;

	initStringInfo(&sql);
	if (target != NULL)
		appendStringInfo(&sql,
						 "INSERT INTO %s (%s, table_name, status_column, row_key,"
						 " from_state, to_state, changed_at, logged_at, xact_id)"
						 " VALUES ($%d, $1, $2, ",
						 target,
						 quote_identifier(NameStr(TupleDescAttr(desc, e->dist_att - 1)->attname)),
						 6 + npk);
	else
		appendStringInfo(&sql,
						 "INSERT INTO %s.idem_transition_log"
						 " (table_name, status_column, row_key, from_state, to_state, xact_id)"
						 " VALUES ($1, $2, ",
						 quote_identifier(nspname));
	guard_log_row_key(e, rel, pk, argtypes, &sql);
	appendStringInfoString(&sql, target != NULL ?
						   ", $3, $4, pg_catalog.now(), pg_catalog.clock_timestamp(), $5)" :
						   ", $3, $4, $5)");

	plan = SPI_prepare(sql.data, 5 + npk + (target != NULL ? 1 : 0), argtypes);
	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed for \"%s\": %s",
			 sql.data, SPI_result_code_string(SPI_result));
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "SPI_keepplan failed");
	e->log_plan = plan;
}

/* AFTER ROW: append the change, if there is one, to idem_transition_log. */
static void
guard_log(GuardEntry *e, FunctionCallInfo fcinfo, TriggerData *td)
{
	Relation	rel = td->tg_relation;
	TupleDesc	desc = RelationGetDescr(rel);
	HeapTuple	row;
	text	   *from = NULL;
	text	   *to;
	Datum	   *values;
	char	   *nulls;
	int			i;
	int			rc;

	if (TRIGGER_FIRED_BY_INSERT(td->tg_event))
		row = td->tg_trigtuple;
	else
	{
		row = td->tg_newtuple;
		from = status_value(td->tg_trigtuple, e, desc);
	}
	to = status_value(row, e, desc);
	if (TRIGGER_FIRED_BY_UPDATE(td->tg_event) && same_value(from, to))
		return;

	idem_spi_connect();
	if (e->log_plan == NULL)
		guard_log_prepare(e, td, idem_extension_schema(fcinfo));

	values = palloc(sizeof(Datum) * (6 + e->npk));
	nulls = palloc(6 + e->npk);
	memset(nulls, ' ', 6 + e->npk);
	values[0] = CStringGetTextDatum(e->table_name);
	values[1] = CStringGetTextDatum(e->status_name);
	values[2] = PointerGetDatum(from);
	if (from == NULL)
		nulls[2] = 'n';
	values[3] = PointerGetDatum(to);
	if (to == NULL)
		nulls[3] = 'n';
	values[4] = FullTransactionIdGetDatum(GetTopFullTransactionId());
	for (i = 0; i < e->npk; i++)
	{
		bool		isnull;

		values[5 + i] = heap_getattr(row, e->pk_atts[i], desc, &isnull);
		if (isnull)
			nulls[5 + i] = 'n';
	}
	if (e->history_table != NULL)
	{
		bool		isnull;

		values[5 + e->npk] = heap_getattr(row, e->dist_att, desc, &isnull);
		if (isnull)
			nulls[5 + e->npk] = 'n';
	}

	/* User code may run in here (a cast to json of the key): see below. */
	rc = SPI_execute_plan(e->log_plan, values, nulls, false, 0);
	if (rc != SPI_OK_INSERT)
		elog(ERROR, "SPI_execute_plan failed: %s", SPI_result_code_string(rc));
	SPI_finish();
}

/*
 * idem_guard_trigger() RETURNS trigger
 *
 * The trigger installed by idem_guard; not callable directly, and refusing
 * to run as anything but a trigger shaped as idem_guard makes it (39P01).
 * BEFORE: fails with ID004 (an illegal initial state or transition, or a
 * value that is not a state), 42704 (the machine was dropped), 22004/22003
 * (the version column is NULL or would overflow), 42804/42703 (a column
 * changed type or vanished since idem_guard), 55000 (the column the guard
 * watches was renamed and another took its name), 27000 (the status
 * changed after the version trigger ran), 0A000 (an UPDATE reaching an
 * unguarded inheritance child).  AFTER: writes the history; on a Citus
 * shard fails with 0A000 (a guard made before the table was distributed,
 * whose history would not be co-located), 55000 (the history table, or
 * its co-located shard, is not on this node), 42804 (its first column is
 * not the guarded table's distribution column).
 *
 * Re-entrancy: user code can run inside (a cast in the history INSERT, a
 * trigger or policy it fires) and fire this trigger again; the entry is
 * counted busy and the machines pinned for the whole call, so nothing a
 * nested call invalidates is freed under this one.
 */
Datum
idem_guard_trigger(PG_FUNCTION_ARGS)
{
	TriggerData *td;
	GuardEntry *e;
	volatile Datum result = PointerGetDatum(NULL);

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("idem_guard_trigger: not called by the trigger manager")));
	td = (TriggerData *) fcinfo->context;
	if (!(TRIGGER_FIRED_BY_INSERT(td->tg_event) || TRIGGER_FIRED_BY_UPDATE(td->tg_event)))
		idem_not_a_guard(td->tg_trigger);

	/* Per statement: only the children check, which needs no entry. */
	if (!TRIGGER_FIRED_FOR_ROW(td->tg_event))
	{
		Trigger    *tg = td->tg_trigger;
		GuardRole	role;

		if (!idem_guard_trigger_is_real(RelationGetRelid(td->tg_relation), tg->tgtype,
										tg->tgnattr, tg->tgqual,
										tg->tgnargs, tg->tgargs, InvalidOid, &role, NULL) ||
			role != GUARD_CHILDREN)
			idem_not_a_guard(tg);
		guard_children(fcinfo, td);
		return result;
	}

	e = idem_guard_entry(fcinfo, td);
	if (e->role == GUARD_CHILDREN)
		idem_not_a_guard(td->tg_trigger);

	e->busy++;
	idem_machine_pin();
	PG_TRY();
	{
		switch (e->role)
		{
			case GUARD_CHECK:
				/* The WHEN condition said no: find out why, and fail. */
				guard_check(e, fcinfo, td);
				break;
			case GUARD_VERSION:
				if (!same_value(status_value(td->tg_trigtuple, e, RelationGetDescr(td->tg_relation)),
								status_value(td->tg_newtuple, e, RelationGetDescr(td->tg_relation))))
					result = PointerGetDatum(bump_version(e, td,
														  td->tg_trigtuple, td->tg_newtuple));
				else
					result = PointerGetDatum(td->tg_newtuple);
				break;
			case GUARD_LOG:
				guard_log(e, fcinfo, td);
				break;
			case GUARD_CHILDREN:
				break;
		}
	}
	PG_FINALLY();
	{
		e->busy--;
		idem_machine_unpin();
	}
	PG_END_TRY();
	return result;
}
