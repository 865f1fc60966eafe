/*-------------------------------------------------------------------------
 *
 * spi_read.c
 *	  Checked reads of the extension's own table: the one way a function of
 *	  the extension takes a value out of the result of one of its
 *	  statements on idem_records (claim.c, lease.c, records.c, batch.c,
 *	  stats.c), and the errors the fast path (claim_direct.c) raises for the same
 *	  faults in the records it reads without SQL.
 *
 *	  Why: the statements are prepared once per backend and replanned by
 *	  the plan cache after an ALTER TABLE, so they keep running on a table
 *	  a DBA has changed.  Once status is an enum (ALTER COLUMN status TYPE
 *	  ... USING), SELECT r.status returns an enum's OID, a by-value Datum,
 *	  where the reader expects a pointer to a text; once DROP NOT NULL lets
 *	  a NULL in (the status CHECK is STRICT, so it lets NULL pass), the
 *	  reader gets a null pointer.  Either was a segmentation fault, which
 *	  restarts the whole server.
 *
 *	  Invariants:
 *	  - No value is read before its result column has been found to be of
 *	    the type the install script gave the column of idem_records it
 *	    comes from, or of a domain over that type (same representation).
 *	    A type merely binary compatible (varchar for text, timestamp for
 *	    timestamptz) is refused as well: the installed shape is what
 *	    counts, as for the fast path (claim_table.c), which declines on
 *	    any other column type.
 *	  - A column the install script makes NOT NULL is read with
 *	    idem_spi_read_required or idem_spi_read_cstring, which refuse a
 *	    NULL; any other with idem_spi_read, whose caller handles NULL.
 *	  - Either refusal is ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE (55000),
 *	    naming idem_records and the column, with a hint to restore the
 *	    column as the install script made it.  A row or column number out
 *	    of the result is a bug of the caller (elog).
 *	  - Cost: a comparison of type OIDs and a NULL test per value read.
 *	    The catalogs are consulted only when the types differ (the base
 *	    type of a domain, in the syscache) and to word an error.
 *
 *	  Memory: values are SPI's (in the result's memory) but for
 *	  idem_spi_read_cstring's string, palloc'd in the current context.
 *	  No locks.  Calls no other file of src/.
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
