/*-------------------------------------------------------------------------
 *
 * spi_read.c
 *	  Checked reads of the extension's own table: the one way a function takes
 *	  a value out of the result of one of its statements on idem_records, and
 *	  the errors claim_direct.c raises for the same faults in the records it
 *	  reads without SQL.
 *
 *	  Why: the statements are prepared once and replanned after an ALTER
 *	  TABLE, so they keep running on a table a DBA changed.  With status made
 *	  an enum (ALTER COLUMN ... TYPE), SELECT r.status returns a by-value
 *	  Datum where the reader expects a text pointer; after DROP NOT NULL (the
 *	  status CHECK is STRICT, so it lets NULL pass), a null pointer.  Either
 *	  was a segmentation fault, which restarts the whole server.
 *
 *	  Invariants:
 *	  - No value is read before its result column is found to be of the type
 *	    the install script gave the column it comes from, or a domain over it.
 *	    A type merely binary compatible (varchar, timestamp) is refused too:
 *	    the installed shape counts, as for the fast path (claim_table.c).
 *	  - A column the install script makes NOT NULL is read with
 *	    idem_spi_read_required or idem_spi_read_cstring, which refuse a NULL;
 *	    any other with idem_spi_read, whose caller handles NULL.
 *	  - Either refusal is 55000 (ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE)
 *	    naming idem_records and the column, with a hint to restore the column
 *	    as the install script made it.  A row or column out of the result is
 *	    the caller's bug (elog).
 *	  - Cost: a comparison of type OIDs and a NULL test per value; the
 *	    catalogs only when the types differ (a domain's base type, in the
 *	    syscache) and to word an error.
 *
 *	  Memory: values are SPI's, in the result's memory, but for
 *	  idem_spi_read_cstring's string, palloc'd in the current context.  No
 *	  locks.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

#include "spi_read.h"

/*
 * Column column of idem_records holds a NULL that the install script's
 * NOT NULL forbids.
 */
void
idem_records_column_null(const char *column)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("idempotency: column \"%s\" of idem_records is null", column),
			 errdetail("The install script makes the column NOT NULL; the extension cannot decide on a record without a value in it."),
			 errhint("Restore the column as the install script made it: give the rows where it is null a value, or delete them, then run ALTER TABLE idem_records ALTER COLUMN %s SET NOT NULL.",
					 quote_identifier(column))));
}

/*
 * Column column of idem_records is of type actual, not expected.  (The
 * install script's text columns, scope, key and status, are COLLATE "C".)
 */
void
idem_records_column_type(const char *column, Oid expected, Oid actual)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("idempotency: column \"%s\" of idem_records is not of type %s",
					column, format_type_be(expected)),
			 errdetail("The column is of type %s; the extension reads it as the install script made it.",
					   format_type_be(actual)),
			 errhint("Restore the column as the install script made it, with its constraints; for its type: ALTER TABLE idem_records ALTER COLUMN %s TYPE %s%s.",
					 quote_identifier(column), format_type_be(expected),
					 expected == TEXTOID ? " COLLATE \"C\"" : "")));
}

/* The type of column col of tt (1-based), which must exist. */
static inline Oid
result_type(SPITupleTable *tt, int col)
{
	if (tt == NULL || col < 1 || col > tt->tupdesc->natts)
		elog(ERROR, "idempotency: the statement's result has no column %d", col);
	return TupleDescAttr(tt->tupdesc, col - 1)->atttypid;
}

/*
 * Fail with 55000 unless column col of tt is of type, or of a domain over
 * it.  The domain's base type is looked up only when the types differ.
 */
void
idem_spi_check_type(SPITupleTable *tt, int col, Oid type, const char *column)
{
	Oid			actual = result_type(tt, col);

	if (likely(actual == type))
		return;
	if (getBaseType(actual) != type)
		idem_records_column_type(column, type, actual);
}

/*
 * Column col of row row of tt, of type (InvalidOid: the statement fixes
 * it); *isnull says whether it is NULL.
 */
Datum
idem_spi_read(SPITupleTable *tt, uint64 row, int col, Oid type,
			  const char *column, bool *isnull)
{
	if (OidIsValid(type))
		idem_spi_check_type(tt, col, type, column);
	else
		(void) result_type(tt, col);
	if (row >= tt->numvals)
		elog(ERROR, "idempotency: the statement's result has no row " UINT64_FORMAT,
			 row);
	return heap_getattr(tt->vals[row], col, tt->tupdesc, isnull);
}

/* The same for a column the install script makes NOT NULL. */
Datum
idem_spi_read_required(SPITupleTable *tt, uint64 row, int col, Oid type,
					   const char *column)
{
	bool		isnull;
	Datum		d = idem_spi_read(tt, row, col, type, column, &isnull);

	if (unlikely(isnull))
		idem_records_column_null(column);
	return d;
}

/* A text column the install script makes NOT NULL, as a C string. */
char *
idem_spi_read_cstring(SPITupleTable *tt, uint64 row, int col, const char *column)
{
	return TextDatumGetCString(idem_spi_read_required(tt, row, col, TEXTOID, column));
}
