/* xbase/json.h — JSON both ways: a writer that appends to an xBuffer, and a
 * reader that parses a buffer into a read-only tree a handler walks.
 *
 * The writer is built for responses made per request: no tree, no
 * allocation of its own, one pass over each string. It places commas and
 * colons itself, so a caller only says what comes next:
 *
 *     xJsonWriter w;
 *     xJsonInit(&w, &buf);
 *     xJsonBeginObject(&w);
 *     xJsonKey(&w, "count", 5);
 *     xJsonInt(&w, 3);
 *     xJsonEndObject(&w);
 *     if (xJsonFinish(&w) != XOK) ...
 *
 * Errors are sticky: after the first one (out of memory, a string that is
 * not UTF-8, a number JSON cannot hold, nesting too deep or out of order)
 * every call does nothing and xJsonFinish returns it. What was appended
 * before the error stays in the buffer; a caller that failed drops it.
 *
 * The reader (below the writer) checks the whole input against RFC 8259
 * before a handler sees any of it, and keeps every value in one block:
 *
 *     xJsonDoc doc;
 *     xJsonDocInit(&doc, NULL, 0);
 *     if (xJsonDocParse(&doc, body.data, body.len) != XOK) ... xJsonDocError(&doc)->reason
 *     const xJsonValue *item = xJsonDocRoot(&doc);
 *     xStr name;
 *     int64_t price;
 *     if (xJsonGetString(xJsonObjectGet(item, "name"), &name) != XOK ||
 *         xJsonGetInt64(xJsonObjectGet(item, "price"), &price) != XOK) ... 400
 *     xJsonDocFree(&doc);
 */
#ifndef XBASE_JSON_H
#define XBASE_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <xbase/buffer.h>
#include <xbase/errno.h>
#include <xbase/str.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What this header declares is libxkit.so's API: exported, where the rest is hidden. */
#pragma GCC visibility push(default)

/** Objects and arrays nest at most this deep (deeper: XERR_LIMIT). */
#define XJSON_MAX_DEPTH 64

/** A writer's state; fill it with xJsonInit. Fields are private. */
typedef struct xJsonWriter {
    xBuffer *out;
    uint64_t has_items; /* bit d: the container at depth d has an element */
    uint64_t is_object; /* bit d: the container at depth d is an object */
    unsigned depth;     /* open containers */
    bool after_key;     /* a key was written; its value comes next */
    bool done;          /* a whole top-level value was written */
    xErrno err;         /* the first error, or XOK */
} xJsonWriter;

/** Starts a writer appending one JSON value to out (borrowed; its existing
 *  bytes are kept). */
void xJsonInit(xJsonWriter *w, xBuffer *out);

/** Opens and closes an object or an array. */
void xJsonBeginObject(xJsonWriter *w);
void xJsonEndObject(xJsonWriter *w);
void xJsonBeginArray(xJsonWriter *w);
void xJsonEndArray(xJsonWriter *w);

/** Writes a member name inside an object; its value is the next call.
 *  len bytes of UTF-8, escaped as needed (may contain NUL). */
void xJsonKey(xJsonWriter *w, const char *key, size_t len);

/** Writes a string value: len bytes of UTF-8, escaped as needed. Bytes that
 *  are not UTF-8 are XERR_INVALID, so the output always parses back to the
 *  caller's bytes. */
void xJsonString(xJsonWriter *w, const char *s, size_t len);

/** Writes an integer. */
void xJsonInt(xJsonWriter *w, int64_t v);
void xJsonUint(xJsonWriter *w, uint64_t v);

/** Writes a number in the fewest digits that read back as exactly v; NaN
 *  and infinities, which JSON cannot hold, are XERR_INVALID. */
void xJsonDouble(xJsonWriter *w, double v);

/** Writes true, false or null. */
void xJsonBool(xJsonWriter *w, bool v);
void xJsonNull(xJsonWriter *w);

/** Writes len bytes the caller vouches are one valid JSON value, as they are
 *  (a value serialized once and reused). */
void xJsonRaw(xJsonWriter *w, const char *json, size_t len);

/** XOK when exactly one whole value was written; else the first error,
 *  or XERR_STATE for a value left open or never begun. */
xErrno xJsonFinish(const xJsonWriter *w);

/* ---- The reader ---- */

/** What a value is. XJSON_MISSING is the type of NULL: what a lookup that
 *  found nothing returns, so lookups chain without checks in between. */
typedef enum xJsonType {
    XJSON_MISSING = 0,
    XJSON_NULL,
    XJSON_BOOL,
    XJSON_NUMBER,
    XJSON_STRING,
    XJSON_ARRAY,
    XJSON_OBJECT,
} xJsonType;

/** One value of a parsed document, read through the functions below; it
 *  lives in its document's block until the next parse or xJsonDocFree. */
typedef struct xJsonValue xJsonValue;

/** The largest input xJsonDocParse takes unless xJsonDocLimits says
 *  otherwise: the server's default max_body_size. */
#define XJSON_READ_MAX_SIZE ((size_t)1 << 20)

/** Why a parse failed, and where. */
typedef struct xJsonError {
    xErrno err;         /**< XOK, XERR_INVALID (not JSON), XERR_LIMIT (too deep or too
                             large) or XERR_NOMEM */
    size_t offset;      /**< the byte of the input where the parse stopped */
    size_t line;        /**< that byte's line, from 1 */
    size_t column;      /**< and its column in bytes, from 1 */
    const char *reason; /**< static text, e.g. "a string with no closing quote"; "" for XOK */
} xJsonError;

/** A parsed document and the memory its values live in; fill it with
 *  xJsonDocInit. Fields are private. */
typedef struct xJsonDoc {
    xJsonValue *values;     /* the block: the caller's memory or one allocation */
    size_t capacity;        /* its size in values */
    size_t count;           /* values used by the last parse */
    void *caller_memory;    /* what xJsonDocInit was given, aligned */
    size_t caller_capacity; /* its size in values */
    size_t max_size;
    unsigned max_depth;
    bool parsed; /* the last parse succeeded: values[0] is the root */
    xJsonError error;
} xJsonDoc;

/** Starts an empty document with the default limits (XJSON_READ_MAX_SIZE
 *  bytes, XJSON_MAX_DEPTH levels). memory (size bytes, may be NULL) is the
 *  caller's, e.g. on the stack: a parse places its values there while they
 *  fit, and otherwise in one block of its own, grown as needed and kept for
 *  the next parse until xJsonDocFree. A value takes 16 bytes; a string with
 *  escapes takes its decoded bytes besides, rounded up to 16. */
void xJsonDocInit(xJsonDoc *doc, void *memory, size_t size);

/** Sets the largest input (in bytes, at most 4 GiB - 1) and the deepest
 *  nesting (1 is a lone array or object; 0 allows only scalars) later
 *  parses accept; beyond them a parse fails with XERR_LIMIT. */
void xJsonDocLimits(xJsonDoc *doc, size_t max_size, unsigned max_depth);

/** Parses len bytes of JSON text (RFC 8259: any value at the top, only
 *  whitespace around it) into doc, replacing what it held. XOK, or
 *  XERR_INVALID, XERR_LIMIT or XERR_NOMEM with xJsonDocError saying where
 *  and why. Strict: no trailing commas, comments, byte-order mark, leading
 *  zeros or bare control characters; strings must be UTF-8 (RFC 3629: no
 *  overlong forms or surrogates) with valid escapes, and a \u escape of a
 *  UTF-16 surrogate must be one half of a pair; member names must be unique
 *  within their object (RFC 7493, I-JSON). Numbers may be of any size:
 *  their text is kept, and the getters say whether a value fits.
 *  The values borrow json: strings without escapes and every number are
 *  views into it, so it must outlive the document (a request body does,
 *  for the handler's call). Escaped strings are decoded into the block. */
xErrno xJsonDocParse(xJsonDoc *doc, const char *json, size_t len);

/** The last parse's top-level value; NULL unless it succeeded. */
const xJsonValue *xJsonDocRoot(const xJsonDoc *doc);

/** Why the last parse failed (err XOK when it did not). */
const xJsonError *xJsonDocError(const xJsonDoc *doc);

/** Frees the block a parse allocated (never the caller's memory); the
 *  values are gone. The document keeps its memory and limits for another
 *  parse, and may be freed again. */
void xJsonDocFree(xJsonDoc *doc);

/** The type of v; XJSON_MISSING for NULL. */
xJsonType xJsonTypeOf(const xJsonValue *v);

/** The elements of an array or the members of an object; 0 otherwise. */
size_t xJsonSize(const xJsonValue *v);

/** The value of obj's member named key (NUL-terminated, or len bytes, which
 *  may hold NUL), compared byte for byte with the decoded name; NULL when
 *  obj is not an object or has no such member. Walks the members in order. */
const xJsonValue *xJsonObjectGetN(const xJsonValue *obj, const char *key, size_t len);
static inline const xJsonValue *xJsonObjectGet(const xJsonValue *obj, const char *key) {
    return xJsonObjectGetN(obj, key, strlen(key)); /* a literal's length is known when compiled */
}

/** Element index of an array (walking to it: iterate to visit them all);
 *  NULL when arr is not an array or is shorter. */
const xJsonValue *xJsonArrayGet(const xJsonValue *arr, size_t index);

/** Typed getters: XOK and *out set, XERR_INVALID (and *out untouched) when
 *  v is NULL or of another type, XERR_LIMIT when the number does not fit.
 *  xJsonGetInt64 and xJsonGetUint64 take integers as written (no fraction
 *  or exponent: 1.0 and 1e2 are XERR_INVALID) and convert exactly.
 *  xJsonGetDouble takes any number, correctly rounded (beyond DBL_MAX:
 *  XERR_LIMIT; below the smallest subnormal: 0). xJsonGetString gives the
 *  decoded bytes, which may hold NUL, as a view into the input or the
 *  block. xJsonGetDouble may also say XERR_NOMEM: a number of 64 bytes or
 *  more is copied to be read. */
xErrno xJsonGetInt64(const xJsonValue *v, int64_t *out);
xErrno xJsonGetUint64(const xJsonValue *v, uint64_t *out);
xErrno xJsonGetDouble(const xJsonValue *v, double *out);
xErrno xJsonGetString(const xJsonValue *v, xStr *out);
xErrno xJsonGetBool(const xJsonValue *v, bool *out);

/** True when v is JSON's null (not when v is NULL). */
bool xJsonIsNull(const xJsonValue *v);

/** A number's text as it was written (e.g. "-12.50e3"); empty otherwise. */
xStr xJsonNumberText(const xJsonValue *v);

/** A walk over an array's elements or an object's members, in the order
 *  written; fill it with xJsonIterInit. Fields are private. */
typedef struct xJsonIter {
    const xJsonValue *next;
    size_t left;
    bool members;
} xJsonIter;

/** Starts a walk over v (an array or object; anything else walks nothing). */
void xJsonIterInit(xJsonIter *it, const xJsonValue *v);

/** The next element: true with *value set (and *key, when key is not NULL,
 *  the member's decoded name, or empty for an array element); false at the
 *  end. */
bool xJsonIterNext(xJsonIter *it, xStr *key, const xJsonValue **value);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
