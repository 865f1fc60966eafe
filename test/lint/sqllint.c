/*
 * sqllint.c: a lint-only helper (never installed, never shipped) that
 * exposes PostgreSQL's own raw parser to test/scripts/sqllint.pl.
 *
 * sqllint_parse(text, mode int4) returns the raw parse tree of the text,
 * parsed in the given RawParseMode (0: statements; 1: a type name; 2: a
 * PL/pgSQL expression), as nodeToString() writes it (with locations).  The raw tree is
 * what the grammar saw, before any name is looked up, so it tells exactly
 * whether a function, type or operator name was written schema-qualified.
 *
 * Before PostgreSQL 16, nodeToString() cannot write most utility
 * statements; of those, the lint needs only CREATE FUNCTION/PROCEDURE and
 * DO, which are written here in the same notation (the fields the lint
 * reads); every other utility statement is written as {OTHER}.  Parse
 * errors are raised as usual (the caller catches them).
 *
 * Invariants: no catalog access, no side effects; loaded only into the
 * throwaway cluster test/scripts/lint.sh starts.
 */
#include "postgres.h"

#include "fmgr.h"
#include "lib/stringinfo.h"
#include "nodes/parsenodes.h"
#include "nodes/pg_list.h"
#include "parser/parser.h"
#include "utils/builtins.h"

PG_MODULE_MAGIC;

/* From PostgreSQL 16 on, nodeToString() leaves the locations out. */
#if PG_VERSION_NUM >= 160000
#define node_string(n) nodeToStringWithLocations(n)
#else
#define node_string(n) nodeToString(n)
#endif

PG_FUNCTION_INFO_V1(sqllint_parse);

static void
out_node(StringInfo buf, const char *field, const void *node)
{
	appendStringInfo(buf, " :%s ", field);
	if (node == NULL)
		appendStringInfoString(buf, "<>");
	else
		appendStringInfoString(buf, node_string(node));
}

static void out_statement(StringInfo buf, Node *stmt);

#if PG_VERSION_NUM < 160000
/* The statements of a WITH that are not SELECT, after their owner. */
static void
out_with(StringInfo buf, const WithClause *with)
{
	ListCell   *lc;

	if (with == NULL)
		return;
	foreach(lc, with->ctes)
	{
		CommonTableExpr *cte = lfirst_node(CommonTableExpr, lc);

		if (!IsA(cte->ctequery, SelectStmt))
		{
			appendStringInfoString(buf, " {CTEDML :ctename ");
			appendStringInfoString(buf, node_string(makeString(cte->ctename)));
			appendStringInfoString(buf, " :stmt ");
			out_statement(buf, cte->ctequery);
			appendStringInfoString(buf, "}");
		}
	}
}
#endif

static void
out_string(StringInfo buf, const char *field, const char *s)
{
	out_node(buf, field, s ? (void *) makeString(pstrdup(s)) : NULL);
}

/* The options of CREATE FUNCTION and DO the lint reads. */
static void
out_options(StringInfo buf, const char *field, const List *options)
{
	ListCell   *lc;

	appendStringInfo(buf, " :%s (", field);
	foreach(lc, options)
	{
		DefElem    *d = lfirst_node(DefElem, lc);

		appendStringInfoString(buf, "{DEFELEM");
		out_string(buf, "defname", d->defname);
		if (d->arg && IsA(d->arg, VariableSetStmt))
		{
			VariableSetStmt *v = (VariableSetStmt *) d->arg;

			appendStringInfoString(buf, " :arg {VARIABLESETSTMT");
			out_string(buf, "name", v->name);
			appendStringInfo(buf, " :kind %d", (int) v->kind);
			out_node(buf, "args", v->args);
			appendStringInfoString(buf, "}");
		}
		else if (d->arg && (IsA(d->arg, String) || IsA(d->arg, List)))
			out_node(buf, "arg", d->arg);
		appendStringInfo(buf, " :location %d}", d->location);
	}
	appendStringInfoString(buf, ")");
}

static void
out_statement(StringInfo buf, Node *stmt)
{
	switch (nodeTag(stmt))
	{
#if PG_VERSION_NUM >= 160000
		case T_SelectStmt:
		case T_InsertStmt:
		case T_UpdateStmt:
		case T_DeleteStmt:
		case T_MergeStmt:
		case T_CallStmt:
			appendStringInfoString(buf, node_string(stmt));
			break;
#else

			/*
			 * PostgreSQL 15 writes SELECT but not INSERT, UPDATE, DELETE
			 * (nor such a statement in a WITH): these are written field by
			 * field, and the statements of a WITH after their owner.
			 */
		case T_SelectStmt:
			appendStringInfoString(buf, node_string(stmt));
			out_with(buf, ((SelectStmt *) stmt)->withClause);
			break;
		case T_InsertStmt:
			{
				InsertStmt *i = (InsertStmt *) stmt;

				appendStringInfoString(buf, "{INSERT");
				out_node(buf, "relation", i->relation);
				out_node(buf, "cols", i->cols);
				appendStringInfoString(buf, " :selectStmt ");
				if (i->selectStmt)
					out_statement(buf, i->selectStmt);
				else
					appendStringInfoString(buf, "<>");
				if (i->onConflictClause)
				{
					OnConflictClause *oc = i->onConflictClause;

					appendStringInfoString(buf, " :onConflictClause {ONCONFLICT");
					if (oc->infer)
						out_node(buf, "inferWhere", oc->infer->whereClause);
					out_node(buf, "targetList", oc->targetList);
					out_node(buf, "whereClause", oc->whereClause);
					appendStringInfoString(buf, "}");
				}
				out_node(buf, "returningList", i->returningList);
				out_node(buf, "withClause", i->withClause);
				appendStringInfoString(buf, "}");
				out_with(buf, i->withClause);
				break;
			}
		case T_UpdateStmt:
			{
				UpdateStmt *u = (UpdateStmt *) stmt;

				appendStringInfoString(buf, "{UPDATE");
				out_node(buf, "relation", u->relation);
				out_node(buf, "targetList", u->targetList);
				out_node(buf, "whereClause", u->whereClause);
				out_node(buf, "fromClause", u->fromClause);
				out_node(buf, "returningList", u->returningList);
				out_node(buf, "withClause", u->withClause);
				appendStringInfoString(buf, "}");
				out_with(buf, u->withClause);
				break;
			}
		case T_DeleteStmt:
			{
				DeleteStmt *d = (DeleteStmt *) stmt;

				appendStringInfoString(buf, "{DELETE");
				out_node(buf, "relation", d->relation);
				out_node(buf, "usingClause", d->usingClause);
				out_node(buf, "whereClause", d->whereClause);
				out_node(buf, "returningList", d->returningList);
				out_node(buf, "withClause", d->withClause);
				appendStringInfoString(buf, "}");
				out_with(buf, d->withClause);
				break;
			}
		case T_CallStmt:
			appendStringInfoString(buf, "{CALL");
			out_node(buf, "funccall", ((CallStmt *) stmt)->funccall);
			appendStringInfoString(buf, "}");
			break;
#endif
		case T_CreateFunctionStmt:
			{
				CreateFunctionStmt *f = (CreateFunctionStmt *) stmt;
				ListCell   *lc;

				appendStringInfoString(buf, "{CREATEFUNCTIONSTMT");
				out_node(buf, "funcname", f->funcname);
				appendStringInfoString(buf, " :parameters (");
				foreach(lc, f->parameters)
				{
					FunctionParameter *p = lfirst_node(FunctionParameter, lc);

					appendStringInfoString(buf, "{FUNCTIONPARAMETER");
					out_string(buf, "name", p->name);
					appendStringInfo(buf, " :mode %c", (char) p->mode);
					out_node(buf, "argType", p->argType);
					out_node(buf, "defexpr", p->defexpr);
					appendStringInfoString(buf, "}");
				}
				appendStringInfoString(buf, ")");
				out_options(buf, "options", f->options);
				if (f->sql_body)
				{
					appendStringInfoString(buf, " :sql_body (");
					foreach(lc, (List *) f->sql_body)
					{
						Node	   *item = lfirst(lc);

						if (IsA(item, List))
						{
							ListCell   *lc2;

							foreach(lc2, (List *) item)
								out_statement(buf, lfirst(lc2));
						}
						else
							out_statement(buf, item);
					}
					appendStringInfoString(buf, ")");
				}
				appendStringInfoString(buf, "}");
				break;
			}
		case T_DoStmt:
			appendStringInfoString(buf, "{DOSTMT");
			out_options(buf, "args", ((DoStmt *) stmt)->args);
			appendStringInfoString(buf, "}");
			break;
		default:
			appendStringInfoString(buf, "{OTHER}");
			break;
	}
}

Datum
sqllint_parse(PG_FUNCTION_ARGS)
{
	char	   *sql = text_to_cstring(PG_GETARG_TEXT_PP(0));
	int32		mode = PG_GETARG_INT32(1);
	List	   *tree;
	ListCell   *lc;
	StringInfoData buf;

	if (mode < RAW_PARSE_DEFAULT || mode > RAW_PARSE_PLPGSQL_EXPR)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("sqllint_parse: mode %d is not a raw parse mode the lint uses", mode)));
	tree = raw_parser(sql, (RawParseMode) mode);
	if (mode != RAW_PARSE_DEFAULT)
		PG_RETURN_TEXT_P(cstring_to_text(node_string(tree)));
	initStringInfo(&buf);
	appendStringInfoString(&buf, "(");
	foreach(lc, tree)
	{
		RawStmt    *rs = lfirst_node(RawStmt, lc);

		appendStringInfoString(&buf, "{RAWSTMT :stmt ");
		out_statement(&buf, rs->stmt);
		appendStringInfo(&buf, " :stmt_location %d}", rs->stmt_location);
	}
	appendStringInfoString(&buf, ")");
	PG_RETURN_TEXT_P(cstring_to_text(buf.data));
}
