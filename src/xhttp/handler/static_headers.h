/* static_headers.h — what the static file handler reads from a request and
 * names in its answer, as pure functions of their text: the path rules, the
 * media type table, a Range field and an entity-tag list. */
#ifndef XHTTP_HANDLER_STATIC_HEADERS_H
#define XHTTP_HANDLER_STATIC_HEADERS_H

#include <stdbool.h>
#include <stdint.h>

#include <xbase/str.h>

/** True when path (decoded, relative to the root) may be opened: no NUL, no
 *  "..", "." or empty segment (so no leading '/'), except that it may end in
 *  one '/'. The empty path is safe: the root itself. */
bool xHttpStaticPathIsSafe(xStr path);

/** The extension of the last segment of name, without its '.' ("css" for
 *  "a/b.min.css"); empty when that segment has no '.' after its start. */
xStr xHttpStaticExtension(xStr name);

/** The built-in Content-Type for an extension (compared without regard to
 *  case); "application/octet-stream" for any other. A static string. */
const char *xHttpStaticMediaType(xStr extension);

/** What a Range field asks of a file of a given size. */
typedef enum xHttpStaticRange {
    XSTATIC_RANGE_WHOLE,         /**< no usable single range: serve all (RFC 9110 §14.2
                                      lets a server ignore what it does not do) */
    XSTATIC_RANGE_PART,          /**< one satisfiable range: 206 */
    XSTATIC_RANGE_UNSATISFIABLE, /**< one range that starts at or beyond the end: 416 */
} xHttpStaticRange;

/** Reads a Range value: one "bytes=first-last", "bytes=first-" or
 *  "bytes=-suffix" range. For XSTATIC_RANGE_PART, *start and *len (>= 1) lie
 *  within size. Malformed values and several ranges are XSTATIC_RANGE_WHOLE. */
xHttpStaticRange xHttpStaticParseRange(xStr field, uint64_t size, uint64_t *start, uint64_t *len);

/** True when the If-None-Match value list names etag ("\"...\"") under the
 *  weak comparison (W/ ignored on both), or is "*". A malformed list matches
 *  what it names before the fault, and nothing after. */
bool xHttpStaticEtagListMatches(xStr list, xStr etag);

#endif
