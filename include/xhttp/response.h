/* xhttp/response.h — how a handler answers: the status and headers, then the
 * body whole (copied, by reference, or from a file) or streamed, with
 * trailers.
 *
 * A handler answers now or later from the same loop; the request and response
 * stay valid until the response ends, or until the abort callback returns
 * when the client leaves first. <xhttp/server.h> includes this header. */
#ifndef XHTTP_RESPONSE_H
#define XHTTP_RESPONSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <xbase/errno.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What this header declares is libxkit.so's API: exported, where the rest is hidden. */
#pragma GCC visibility push(default)

typedef struct xHttpRequest xHttpRequest;
typedef struct xHttpResponse xHttpResponse;

/** Sets the status code (default 200). Before the head is sent. */
void xHttpResponseSetStatus(xHttpResponse *res, int status);

/** Adds a header; name and value are copied. Content-Length,
 *  Transfer-Encoding, Connection and Date are the server's and are refused
 *  (XERR_INVALID), as are names or values with bytes not allowed in a field.
 *  Returns XERR_STATE after the head is sent. */
xErrno xHttpResponseAddHeader(xHttpResponse *res, const char *name, const char *value);

/** Drops every header added so far, the server's own for a fallback
 *  handler included (a 405's Allow): a handler that passes on another
 *  server's answer (a proxy) starts clean. XERR_STATE after the head. */
xErrno xHttpResponseClearHeaders(xHttpResponse *res);

/** Adds a trailer field to a streamed response, sent after the body: a
 *  chunked trailer on HTTP/1.1 (dropped for HTTP/1.0 clients), a trailing
 *  HEADERS frame on HTTP/2. Copied; same rules as xHttpResponseAddHeader;
 *  before End. */
xErrno xHttpResponseAddTrailer(xHttpResponse *res, const char *name, const char *value);

/** Sends the whole body (copied) with a Content-Length and ends the response. */
xErrno xHttpResponseSend(xHttpResponse *res, const void *body, size_t len);

/** Like xHttpResponseSend without copying: body must stay valid and
 *  unchanged until release(release_arg) is called (release may be NULL for
 *  static data). */
xErrno xHttpResponseSendRef(xHttpResponse *res, const void *body, size_t len, void (*release)(void *),
                            void *release_arg);

/** Answers with status and headers as set, and a body of len bytes of
 *  file fd from offset (Content-Length: len), read only as the client takes
 *  them: sendfile(2) on plain connections (and kTLS), pieces sealed by the
 *  record layer on TLS, DATA frames within the flow-control windows on
 *  HTTP/2; HEAD, 204 and 304 send none. release(release_arg) runs once the
 *  bytes are sent or dropped, or at once when there are none: it typically
 *  closes fd, which must stay open until then. A file that ends before
 *  offset + len cuts the response short (the connection, or the HTTP/2
 *  stream, is closed). XERR_STATE (release run) once the head is sent. */
xErrno xHttpResponseSendFile(xHttpResponse *res, int fd, off_t offset, size_t len, void (*release)(void *),
                             void *release_arg);

/** Streams a piece of the body (chunked on HTTP/1.1); sends the head first. */
xErrno xHttpResponseWrite(xHttpResponse *res, const void *data, size_t len);

/** Ends a streamed response. */
xErrno xHttpResponseEnd(xHttpResponse *res);

/** Before the head: the streamed body that follows is exactly len bytes, so
 *  the head carries Content-Length (content-length on HTTP/2) instead of
 *  chunked framing, and a HEAD's answer gets the length with no body (1xx,
 *  204 and 304 get none). A Write past len is refused (XERR_INVALID); an End
 *  short of it cuts the response (xHttpResponseReset), so a short body never
 *  looks whole. The worker's compression filter leaves such a response
 *  alone. XERR_STATE once the head is sent. */
xErrno xHttpResponseSetLength(xHttpResponse *res, uint64_t len);

/** Before the head, once its fields are set: decides now whether the
 *  worker's response filter (compression) transforms the streamed body of
 *  len bytes that follows (UINT64_MAX: not known), as it would decide at
 *  the first Write. True: it does (the length is not to be declared);
 *  false: the body goes as written (xHttpResponseSetLength may follow, and
 *  a proxy may splice it). A filter that cannot say counts as true. */
bool xHttpResponseFiltered(xHttpResponse *res, uint64_t len);

/** Streamed body bytes written and not yet taken by the client: queued on
 *  the connection (HTTP/1.1, plain or TLS), or held by the stream (HTTP/2:
 *  bytes waiting for flow-control window, or for the connection's output to
 *  drain). A writer that wants bounded memory stops writing once this
 *  passes its high-water mark and waits for xHttpResponseOnDrain. */
size_t xHttpResponsePending(const xHttpResponse *res);

/** Asks for fn(res, arg) once, on the loop, when xHttpResponsePending falls
 *  to low_water or below. True when armed; false when it already is that
 *  low (nothing will be called: write on), or the response ended or was
 *  aborted. A later call replaces the earlier one; fn NULL disarms. */
bool xHttpResponseOnDrain(xHttpResponse *res, size_t low_water, void (*fn)(xHttpResponse *res, void *arg),
                          void *arg);

/** Ends a response that cannot be completed (its source failed midway): on
 *  HTTP/2 the stream is reset (RST_STREAM INTERNAL_ERROR) and the
 *  connection's other streams go on; on HTTP/1.x the connection is closed,
 *  so a cut body never looks whole. Before the head, the client gets no
 *  answer at all (answer 5xx instead where that is still possible). The
 *  request and response are released as by End; the abort callback is not
 *  called. */
xErrno xHttpResponseReset(xHttpResponse *res);

/** True when the client went away; later writes are discarded, End still
 *  must be called to release the request (unless an abort callback is set). */
bool xHttpResponseAborted(const xHttpResponse *res);

/** For handlers that answer later: fn(res, arg) is called, on the loop, if
 *  the connection closes before the response ends (the client left, or a
 *  graceful stop ran out of time). The request and response are freed right
 *  after fn returns, so fn must cancel whatever would touch them later. */
void xHttpResponseOnAbort(xHttpResponse *res, void (*fn)(xHttpResponse *res, void *arg), void *arg);

/** The reason phrase for status ("Not Found"), or "Unknown". */
const char *xHttpStatusReason(int status);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
