/*-------------------------------------------------------------------------
 *
 * machine_parse.c
 *	  Reading a state machine definition, the jsonb {"initial": [...],
 *	  "transitions": {"state": [...], ...}}, into a Draft (machine_draft.h):
 *	  its form checked (22023, with a detail saying exactly what is wrong),
 *	  its sizes counted from the jsonb headers before any name is read (54000
 *	  beyond IDEM_MAX_MACHINE_STATES or IDEM_MAX_MACHINE_TRANSITIONS), every
 *	  name an occurrence pointing into the jsonb.
 *
 *	  Invariant: every loop over the elements of a definition is linear in its
 *	  size and calls CHECK_FOR_INTERRUPTS.  Locking and visibility: none.
 *	  Memory: the compile's work context (machine_compile.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "idempotency.h"
#include "machine_draft.h"

void
idem_draft_malformed(const char *fname, const char *machine, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("%s: malformed definition of machine \"%s\"", fname, machine),
			 errdetail_internal("%s", detail),
			 errhint("A definition looks like {\"initial\": [\"a\"], \"transitions\": {\"a\": [\"b\"], \"b\": []}}.")));
}

/* 54000: more states than IDEM_MAX_MACHINE_STATES (at least n unless exact). */
void
idem_draft_too_many_states(const Draft *d, int64 n, bool exact)
{
	ereport(ERROR,
			(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
			 errmsg("%s: machine \"%s\" has too many states", d->fname, d->mname),
			 exact ?
			 errdetail("The machine has " INT64_FORMAT " states; the limit is %d states.",
					   n, IDEM_MAX_MACHINE_STATES) :
			 errdetail("The machine has at least " INT64_FORMAT " states; the limit is %d states.",
					   n, IDEM_MAX_MACHINE_STATES)));
}

/* 54000: more transitions than IDEM_MAX_MACHINE_TRANSITIONS. */
void
idem_draft_too_many_transitions(const Draft *d, int64 n)
{
	ereport(ERROR,
			(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
			 errmsg("%s: machine \"%s\" has too many transitions", d->fname, d->mname),
			 errdetail("The machine declares " INT64_FORMAT " transitions; the limit is %d transitions.",
					   n, IDEM_MAX_MACHINE_TRANSITIONS)));
}

static const char *
value_kind(const JsonbValue *v)
{
	switch (v->type)
	{
		case jbvNull:
			return "null";
		case jbvString:
			return "string";
		case jbvNumeric:
			return "number";
		case jbvBool:
			return "boolean";
		case jbvBinary:
			return JsonContainerIsArray(v->val.binary.data) ? "array" : "object";
		default:
			return "value";
	}
}

static bool
is_array(const JsonbValue *v)
{
	return v->type == jbvBinary && JsonContainerIsArray(v->val.binary.data);
}

/*
 * How messages name an array of state names: "initial" (key NULL) or the
 * targets of state key.  Built only for a message.
 */
static char *
array_what(const NameRef *key)
{
	if (key == NULL)
		return pstrdup("\"initial\"");
	return psprintf("The targets of state \"%s\"", pnstrdup(key->p, key->len));
}

/* 22023 unless v is an array (of state names, checked by parse_names). */
static void
check_name_array(const Draft *d, const JsonbValue *v, const NameRef *key)
{
	if (!is_array(v))
		idem_draft_malformed(d->fname, d->mname,
				  psprintf("%s must be an array of state names, not a JSON %s.",
						   array_what(key), value_kind(v)));
}

/*
 * The elements of a JSON array of state names (checked by
 * check_name_array) as occurrences out[0 ..], at positions pos ..;
 * returns how many: the size of the array, which out has room for.  key
 * names the array in messages (NULL: "initial").  Every element must be a
 * non-empty string.
 */
static int
parse_names(Draft *d, const JsonbValue *v, const NameRef *key,
			NameOcc *out, int pos)
{
	JsonbIterator *it;
	JsonbValue	elem;
	JsonbIteratorToken tok;
	int			cap = JsonContainerSize(v->val.binary.data);
	int			n = 0;

	it = JsonbIteratorInit(v->val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &elem, true)) != WJB_DONE)
	{
		NameOcc    *o;

		CHECK_FOR_INTERRUPTS();
		if (tok != WJB_ELEM)
			continue;
		if (elem.type != jbvString)
			idem_draft_malformed(d->fname, d->mname,
					  psprintf("%s must contain only strings; element %d is a JSON %s.",
							   array_what(key), n + 1, value_kind(&elem)));
		if (elem.val.string.len == 0)
			idem_draft_malformed(d->fname, d->mname,
					  psprintf("%s must not contain an empty state name.",
							   array_what(key)));
		if (n >= cap)
			elog(ERROR, "jsonb array has more elements than its header says");
		o = &out[n];
		o->p = elem.val.string.val;
		o->len = elem.val.string.len;
		o->pos = pos + n;
		n++;
	}
	return n;
}

/* The top level: an object with exactly "initial" and "transitions". */
void
idem_draft_top(Draft *d, Jsonb *def, JsonbValue *initial_v, JsonbValue *trans_v)
{
	JsonbIterator *it;
	JsonbIteratorToken tok;
	JsonbValue	v;
	bool		have_initial = false;
	bool		have_trans = false;

	if (JB_ROOT_IS_SCALAR(def) || !JB_ROOT_IS_OBJECT(def))
	{
		const char *kind = "array";

		if (JB_ROOT_IS_SCALAR(def))
		{
			JsonbValue	scalar;

			if (JsonbExtractScalar(&def->root, &scalar))
				kind = value_kind(&scalar);
		}
		idem_draft_malformed(d->fname, d->mname,
				  psprintf("The definition is a JSON %s; it must be an object.", kind));
	}

	/* At most two keys are accepted: the first other one fails. */
	it = JsonbIteratorInit(&def->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		char	   *key;

		if (tok != WJB_KEY)
			continue;
		key = pnstrdup(v.val.string.val, v.val.string.len);
		tok = JsonbIteratorNext(&it, &v, true);
		Assert(tok == WJB_VALUE);
		if (strcmp(key, "initial") == 0)
		{
			*initial_v = v;
			have_initial = true;
		}
		else if (strcmp(key, "transitions") == 0)
		{
			*trans_v = v;
			have_trans = true;
		}
		else
			idem_draft_malformed(d->fname, d->mname,
					  psprintf("The key \"%s\" is not allowed; a definition has exactly the keys \"initial\" and \"transitions\".",
							   key));
		pfree(key);
	}
	if (!have_initial)
		idem_draft_malformed(d->fname, d->mname, "The definition has no \"initial\" key.");
	if (!have_trans)
		idem_draft_malformed(d->fname, d->mname, "The definition has no \"transitions\" key.");
}

/*
 * The number of transitions of "transitions" (trans), from the headers
 * of the target arrays, before any name is read; 54000 beyond the limit.
 */
static int
draft_count_transitions(Draft *d, JsonbContainer *trans)
{
	JsonbIterator *it;
	JsonbIteratorToken tok;
	JsonbValue	v;
	int64		ntrans = 0;

	it = JsonbIteratorInit(trans);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		CHECK_FOR_INTERRUPTS();
		if (tok == WJB_VALUE && is_array(&v))
			ntrans += JsonContainerSize(v.val.binary.data);
	}
	if (ntrans > IDEM_MAX_MACHINE_TRANSITIONS)
		idem_draft_too_many_transitions(d, ntrans);
	return (int) ntrans;
}

/*
 * The keys of "transitions" (trans) and their target arrays, into the
 * occurrences after the initial states: d->occ, d->src_off.  22023 for an
 * empty key or a target array that is not one of names.
 */
static void
draft_parse_sources(Draft *d, JsonbContainer *trans)
{
	JsonbIterator *it;
	JsonbIteratorToken tok;
	JsonbValue	v;
	int			i = 0;
	int			e = 0;

	it = JsonbIteratorInit(trans);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		NameOcc    *key;
		NameRef		keyref;

		CHECK_FOR_INTERRUPTS();
		if (tok != WJB_KEY)
			continue;
		Assert(i < d->nsources);
		key = &d->occ[d->ninitial + i];
		key->p = v.val.string.val;
		key->len = v.val.string.len;
		key->pos = d->ninitial + i;
		if (key->len == 0)
			idem_draft_malformed(d->fname, d->mname, "\"transitions\" has an empty state name as a key.");
		keyref.p = key->p;
		keyref.len = key->len;
		tok = JsonbIteratorNext(&it, &v, true);
		Assert(tok == WJB_VALUE);
		check_name_array(d, &v, &keyref);
		d->src_off[i] = e;
		e += parse_names(d, &v, &keyref, &d->occ[d->ninitial + d->nsources + e],
						 d->ninitial + d->nsources + e);
		i++;
	}
	Assert(i == d->nsources && e == d->ntrans);
	d->src_off[d->nsources] = e;
}

/*
 * "initial" and "transitions" as occurrences, not yet interned.  The size
 * limits are checked from the array and object headers before any name
 * is read: the number of transitions exactly (a pass over the keys, not
 * into their arrays), the number of states as far as the headers tell
 * (the initial states are distinct, and so are the keys).
 */
void
idem_draft_parse(Draft *d, JsonbValue *initial_v, JsonbValue *trans_v)
{
	JsonbContainer *trans;
	NameOcc    *initial;
	int			i PG_USED_FOR_ASSERTS_ONLY;

	check_name_array(d, initial_v, NULL);
	d->ninitial = JsonContainerSize(initial_v->val.binary.data);
	if (d->ninitial > IDEM_MAX_MACHINE_STATES)
		idem_draft_too_many_states(d, d->ninitial, false);
	initial = palloc(sizeof(NameOcc) * Max(d->ninitial, 1));
	i = parse_names(d, initial_v, NULL, initial, 0);
	Assert(i == d->ninitial);
	if (d->ninitial == 0)
		idem_draft_malformed(d->fname, d->mname, "\"initial\" must name at least one state.");

	if (trans_v->type != jbvBinary || JsonContainerIsArray(trans_v->val.binary.data))
		idem_draft_malformed(d->fname, d->mname,
				  psprintf("\"transitions\" must be an object mapping each state to an array of target states, not a JSON %s.",
						   value_kind(trans_v)));
	trans = trans_v->val.binary.data;
	d->nsources = JsonContainerSize(trans);
	if (d->nsources > IDEM_MAX_MACHINE_STATES)
		idem_draft_too_many_states(d, d->nsources, false);

	d->ntrans = draft_count_transitions(d, trans);

	/* Bounded by the limits now: 1.2 million occurrences at most. */
	d->nocc = d->ninitial + d->nsources + d->ntrans;
	d->occ = palloc(sizeof(NameOcc) * Max(d->nocc, 1));
	d->ix = palloc(sizeof(int) * Max(d->nocc, 1));
	d->initial_idx = d->ix;
	d->src_state = d->ix + d->ninitial;
	d->to = d->src_state + d->nsources;
	d->src_off = palloc(sizeof(int) * (d->nsources + 1));

	memcpy(d->occ, initial, sizeof(NameOcc) * d->ninitial);
	pfree(initial);

	draft_parse_sources(d, trans);
}
