/*-------------------------------------------------------------------------
 *
 * spi_read.h
 *	  Checked reads of idem_records (spi_read.c): every value a function of
 *	  the extension takes from the result of one of its statements on its
 *	  own table goes through these, so that a DBA's ALTER TABLE ends in a
 *	  clear 55000 naming the column, never in a crash.
 *
 *	  tt is the result (SPI_tuptable), row its 0-based row, col the 1-based
 *	  column of the result; type is the type the install script gave the
 *	  column of idem_records the value comes from (or, for an expression
 *	  over it, the expression's type), and column that column's name, for
 *	  the error.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDEM_SPI_READ_H
#define IDEM_SPI_READ_H

#include "postgres.h"

#include "executor/spi.h"

#include "compat.h"

/*
 * A value that may be NULL (*isnull says).  type InvalidOid: a value whose
 * type the statement itself fixes (ROW(...)::idem_record), not checked;
 * column may then be NULL.
 */
extern Datum idem_spi_read(SPITupleTable *tt, uint64 row, int col, Oid type,
						   const char *column, bool *isnull);

/* A value of a column the install script makes NOT NULL. */
extern Datum idem_spi_read_required(SPITupleTable *tt, uint64 row, int col,
									Oid type, const char *column);

/* A text of a NOT NULL column, as a C string in the current context. */
extern char *idem_spi_read_cstring(SPITupleTable *tt, uint64 row, int col,
								   const char *column);

/* Fail unless column col of tt is of type (or a domain over it). */
extern void idem_spi_check_type(SPITupleTable *tt, int col, Oid type,
								const char *column);

/*
 * The errors themselves (55000), for a reader that has checked the type
 * some other way (the fast path, claim_direct.c: claim_table.c at open).
 */
IDEM_NORETURN extern void idem_records_column_null(const char *column);
IDEM_NORETURN extern void idem_records_column_type(const char *column, Oid expected,
												 Oid actual);

#endif							/* IDEM_SPI_READ_H */
