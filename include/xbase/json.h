/* xbase/json.h — a JSON writer that appends to an xBuffer.
 *
 * Built for responses made per request: no tree, no allocation of its own,
 * one pass over each string. The writer places commas and colons itself, so
 * a caller only says what comes next:
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
 * before the error stays in the buffer; a caller that failed drops it. */
#ifndef XBASE_JSON_H
#define XBASE_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <xbase/buffer.h>
#include <xbase/errno.h>

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

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
