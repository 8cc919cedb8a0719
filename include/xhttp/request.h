/* xhttp/request.h — what a handler reads of a request: its method, path,
 * query, headers and body, the client's address, cookies, and percent
 * decoding.
 *
 * The views a request hands out point into the connection's buffers and stay
 * valid until the request's response ends. A body arrives whole before the
 * handler runs (xHttpRequestBody), or, on a route added with
 * xHttpServerRouteStreaming, piece by piece to an xHttpBodyReader, with the
 * client held back while the reader is paused. <xhttp/server.h> includes
 * this header. */
#ifndef XHTTP_REQUEST_H
#define XHTTP_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <xbase/errno.h>
#include <xbase/event.h>
#include <xbase/str.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What this header declares is libxkit.so's API: exported, where the rest is hidden. */
#pragma GCC visibility push(default)

typedef struct xHttpRequest xHttpRequest;
typedef struct xHttpResponse xHttpResponse;
typedef struct xHttpWorker xHttpWorker;

/** Takes one piece of a streamed request body: de-chunked on HTTP/1.1, a DATA
 *  payload (or several) on HTTP/2. data is valid during the call only. The
 *  last call has end set, possibly with len 0; none follows it. arg is what
 *  was given to xHttpRequestReadBody. */
typedef void (*xHttpBodyReader)(xHttpRequest *req, xHttpResponse *res, const char *data, size_t len, bool end,
                                void *arg);

/** The method, e.g. "GET". */
xStr xHttpRequestMethod(const xHttpRequest *req);

/** The path without the query, as sent (not percent-decoded). */
xStr xHttpRequestPath(const xHttpRequest *req);

/** The raw query string without '?'; empty when absent. */
xStr xHttpRequestQuery(const xHttpRequest *req);

/** Finds query parameter name (raw, not percent-decoded). A key without '='
 *  has an empty value. Returns false when absent. */
bool xHttpRequestQueryParam(const xHttpRequest *req, const char *name, xStr *value);

/** The value captured by route parameter ":name" (or "*"); empty when absent. */
xStr xHttpRequestParam(const xHttpRequest *req, const char *name);

/** Finds a header, name compared case-insensitively. Returns false when absent. */
bool xHttpRequestHeader(const xHttpRequest *req, const char *name, xStr *value);

/** Number of header fields, and the i-th one, for iterating. */
size_t xHttpRequestHeaderCount(const xHttpRequest *req);
bool xHttpRequestHeaderAt(const xHttpRequest *req, size_t i, xStr *name, xStr *value);

/** The whole request body (de-chunked); empty when there is none, and on a
 *  streaming route. */
xStr xHttpRequestBody(const xHttpRequest *req);

/** On a streaming route: sets who takes the body. Pieces that arrived before
 *  wait for it, and so does the client, held by flow control. Called from the
 *  handler, the first piece comes after the handler returns; called later, it
 *  may come before this returns. XERR_STATE on other routes or after the end. */
xErrno xHttpRequestReadBody(xHttpRequest *req, xHttpBodyReader reader, void *arg);

/** True on a streaming route while the body is still to come through
 *  xHttpRequestReadBody (not all of it was delivered yet). */
bool xHttpRequestBodyStreams(const xHttpRequest *req);

/** Holds back further pieces until xHttpRequestResumeBody. Meanwhile the client
 *  is held back too: HTTP/1.1 stops reading the socket, HTTP/2 stops reopening
 *  the stream's flow-control window, so at most a window of body waits here
 *  (other streams on the connection go on). */
void xHttpRequestPauseBody(xHttpRequest *req);

/** Resumes a paused body; pieces that wait may be delivered before it returns
 *  (unless called from the handler or the reader, which get them after). */
void xHttpRequestResumeBody(xHttpRequest *req);

/** "HTTP/1.0", "HTTP/1.1", "HTTP/2" or "HTTP/3". */
const char *xHttpRequestProtocol(const xHttpRequest *req);

/** The loop the request is served on, for timers and deferred work. */
xEventLoop *xHttpRequestLoop(const xHttpRequest *req);

/* ---- The worker and its blocking work ---- */

/** The worker serving the request (<xhttp/server.h>: its index, its loop). */
xHttpWorker *xHttpRequestWorker(const xHttpRequest *req);

/** That worker's own pointer, as its start hook set it (xHttpServerOnWorker),
 *  else NULL: per-worker state a handler uses without a lock. */
void *xHttpRequestWorkerData(const xHttpRequest *req);

/** Runs on a thread of the server's blocking pool, off the loop: it must not
 *  touch the request, the response or the loop. */
typedef void (*xHttpBlockingWork)(void *arg);

/** Runs afterwards on the request's worker, where it answers (or hands the
 *  response on): status XOK when work ran, XERR_CLOSED when a graceful stop
 *  ran out of time before work could begin (the connection is closed then).
 *  If the client left meanwhile, xHttpResponseAborted(res) is true: its
 *  answer is discarded, and ending the response still releases the request. */
typedef void (*xHttpBlockingDone)(xHttpRequest *req, xHttpResponse *res, xErrno status, void *arg);

/** Hands work(arg) to the server's blocking pool and, once it has run,
 *  done(req, res, status, arg) to the request's worker. Meanwhile the request
 *  and response stay valid even if the client leaves: the response's abort
 *  callback is not called for it, done is told instead (so done always runs,
 *  and can free arg). A graceful stop waits for work under way; at its
 *  deadline, work still queued is cancelled (done told). On error done will
 *  not run and arg is the caller's: XERR_BUSY when the pool's queue is full,
 *  XERR_NOMEM, XERR_SYS (no thread), XERR_CLOSED (the server is being
 *  destroyed); with the pool's answer_busy (the default) the server has then
 *  answered 503 itself, unless the response had begun. XERR_INVALID (work or
 *  done NULL) and XERR_STATE (the response has ended) leave it alone. */
xErrno xHttpRequestRunBlocking(xHttpRequest *req, xHttpBlockingWork work, xHttpBlockingDone done, void *arg);

/* ---- The client and its values ---- */

/** Where a request came from. Fields are only ever added at the end; the
 *  library writes only what the caller's version has. */
typedef struct xHttpPeer {
    size_t struct_size;  /**< the caller's sizeof, set by xHttpRequestPeer */
    int family;          /**< AF_INET or AF_INET6 (<sys/socket.h>); an IPv4 client
                              of a dual-stack IPv6 listener is AF_INET */
    char address[46];    /**< the client's address as text, "192.0.2.7" or
                              "2001:db8::1" (INET6_ADDRSTRLEN), NUL-terminated */
    uint16_t port;       /**< the client's port */
    uint16_t local_port; /**< the port the client connected to: its listener's */
} xHttpPeer;

/** Fills the first size bytes of peer (the caller's sizeof(xHttpPeer)).
 *  Call xHttpRequestPeer instead. */
bool xHttpRequestPeerSized(const xHttpRequest *req, xHttpPeer *peer, size_t size);

/** Fills the caller's peer with the client's address and port and the local
 *  port, formatted now (the connection keeps them in binary); false when
 *  they are unknown. The TCP peer (the PROXY header's client, where one was
 *  read), or behind an HTTP proxy the server trusts (xHttpServerTrustForwarded)
 *  the client its X-Forwarded-For names, whose port is then 0 unless the
 *  entry carries one. */
static inline bool xHttpRequestPeer(const xHttpRequest *req, xHttpPeer *peer) {
    return xHttpRequestPeerSized(req, peer, sizeof *peer);
}

/** "https" when the request came over TLS, else "http" (static strings). */
const char *xHttpRequestScheme(const xHttpRequest *req);

/** Finds cookie name (compared exactly, case-sensitively) in the request's
 *  Cookie fields, all of them in order (HTTP/2 clients send one a cookie):
 *  RFC 6265 "name=value" pairs split by ';', spaces around them ignored,
 *  pairs without '=' skipped. The first match wins; value is a view into the
 *  request without the DQUOTEs that may surround it, not percent-decoded.
 *  Returns false when absent. */
bool xHttpRequestCookie(const xHttpRequest *req, const char *name, xStr *value);

/** Options for xHttpPercentDecode. */
enum {
    XHTTP_DECODE_PLUS_SPACE = 1u << 0, /**< '+' is ' ': query values and form fields,
                                            never paths */
    XHTTP_DECODE_REFUSE_NUL = 1u << 1, /**< "%00" is an error: for values that become
                                            C strings or file names */
};

/** Percent-decodes in (RFC 3986 §2.1) into out, which has room for cap bytes
 *  and may be in.data itself (decoding never lengthens); *out_len gets the
 *  decoded length, nothing is NUL-terminated. A '%' not followed by two hex
 *  digits (including one cut off at the end) is XERR_INVALID rather than
 *  kept as it is, so two readers can never disagree on what it means; so is
 *  "%00" under XHTTP_DECODE_REFUSE_NUL. XERR_LIMIT when cap is too small
 *  (cap >= in.len always suffices). On error out holds a partial result. */
xErrno xHttpPercentDecode(xStr in, char *out, size_t cap, unsigned flags, size_t *out_len);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
