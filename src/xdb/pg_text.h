/* pg_text.h — PostgreSQL's text output read as numbers and booleans, and
 * numbers written as parameters: the only bytes from the server the pool
 * interprets itself (everything else is libpq's). Strict: a value that is not
 * entirely one number is refused, so a getter never returns a number made from
 * part of a column. Internal. */
#ifndef XDB_PG_TEXT_H
#define XDB_PG_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** Reads int2/int4/int8 output ("-42") of length bytes: an optional '-', then
 *  1 to 19 digits, within int64. */
bool xPgParseInt64(const char *text, size_t length, int64_t *out);

/** Reads float4/float8/numeric output: a decimal number with optional
 *  exponent, or "NaN", "Infinity", "-Infinity". */
bool xPgParseDouble(const char *text, size_t length, double *out);

/** Reads bool output: "t" or "f". */
bool xPgParseBool(const char *text, size_t length, bool *out);

/** Writes value as decimal text into out (at least 24 bytes), NUL-terminated;
 *  returns the length. */
size_t xPgFormatInt64(int64_t value, char *out);

/** Writes value as text PostgreSQL reads back to the same double into out
 *  (at least 32 bytes), NUL-terminated; returns the length. */
size_t xPgFormatDouble(double value, char *out);

#endif
