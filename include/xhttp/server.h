/* xhttp/server.h — xKit's HTTP server.
 *
 * Two ways to run a server:
 *  - on workers it owns: xHttpServerCreate(NULL, &conf), then xHttpServerRun.
 *    Each worker is a thread with its own event loop and its own SO_REUSEPORT
 *    listening socket; a connection lives on the worker that accepted it and
 *    its handlers run there.
 *  - on a caller's loop: xHttpServerCreate(loop, &conf), then xEventLoopRun.
 *
 * Handlers run on a worker's loop thread and must not block. A handler answers
 * with xHttpResponseSend, or streams with xHttpResponseWrite / xHttpResponseEnd,
 * now or later from the same loop (the request and response stay valid until
 * the response ends). Routes must be added before the server starts.
 *
 * A handler normally runs once the whole body has arrived (xHttpRequestBody).
 * A route added with xHttpServerRouteStreaming runs its handler as soon as the
 * head has arrived instead, and the body comes to an xHttpBodyReader in pieces,
 * with backpressure: while the reader is paused, the client is held back. */
#ifndef XHTTP_SERVER_H
#define XHTTP_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <xbase/errno.h>
#include <xbase/event.h>
#include <xbase/str.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct xHttpServer xHttpServer;
typedef struct xHttpRequest xHttpRequest;
typedef struct xHttpResponse xHttpResponse;

/** Handles one request; arg is what was given to xHttpServerRoute. */
typedef void (*xHttpHandler)(xHttpRequest *req, xHttpResponse *res, void *arg);

/** Takes one piece of a streamed request body: de-chunked on HTTP/1.1, a DATA
 *  payload (or several) on HTTP/2. data is valid during the call only. The
 *  last call has end set, possibly with len 0; none follows it. arg is what
 *  was given to xHttpRequestReadBody. */
typedef void (*xHttpBodyReader)(xHttpRequest *req, xHttpResponse *res, const char *data, size_t len, bool end,
                                void *arg);

/** Protocols a server speaks; HTTP/2 without TLS is told apart from HTTP/1.1
 *  by its connection preface, or reached by "Upgrade: h2c". */
enum {
    XHTTP_PROTO_HTTP1 = 1u << 0,
    XHTTP_PROTO_HTTP2 = 1u << 1,
};

/** Server settings. Start from xHttpServerConfInit's defaults; fields are
 *  only ever added at the end, and a library newer than the caller's header
 *  reads only what the caller's version has (defaults for the rest). */
typedef struct xHttpServerConf {
    size_t struct_size;               /**< the caller's sizeof, set by xHttpServerConfInit */
    int workers;                      /**< threads for xHttpServerRun; 0: the CPUs this
                                           process may run on (sched_getaffinity) */
    size_t max_request_line;          /**< bytes, else 414 (default 8 KiB) */
    size_t max_header_size;           /**< bytes of the whole head, else 431 (8 KiB) */
    size_t max_headers;               /**< header fields, else 431 (100) */
    size_t max_body_size;             /**< request body bytes, else 413 (1 MiB) */
    uint32_t header_timeout_ms;       /**< to receive a whole head once it began (10 s) */
    uint32_t body_timeout_ms;         /**< between body reads while one is expected (30 s) */
    uint32_t idle_timeout_ms;         /**< keep-alive wait for the next request (60 s) */
    uint32_t send_timeout_ms;         /**< a client that takes none of a pending response
                                           for this long is dropped (60 s) */
    uint32_t shutdown_timeout_ms;     /**< graceful stop deadline (10 s) */
    uint32_t max_connections;         /**< per worker; beyond it new ones are closed (10000) */
    unsigned protocols;               /**< XHTTP_PROTO_* bits (both) */
    uint32_t http2_max_streams;       /**< SETTINGS_MAX_CONCURRENT_STREAMS (256) */
    uint32_t http2_window;            /**< stream and connection receive windows (16 MiB) */
    uint32_t http2_reset_burst;       /**< stream resets a client may make at once … */
    uint32_t http2_reset_rate;        /**< … and per second after that, before GOAWAY
                                           (1000 and 33: CVE-2023-44487, rapid reset) */
    uint32_t http2_max_continuations; /**< CONTINUATION frames per header block (8:
                                      CVE-2024-27316) */
    uint32_t http2_max_control_queue; /**< PING/SETTINGS acks waiting for a client
                                      that does not read, before GOAWAY (1000) */
    bool handle_signals;              /**< xHttpServerRun stops on SIGINT/SIGTERM,
                                           reloads TLS certificates on SIGHUP and reopens
                                           the access log on SIGUSR1 (true);
                                           they are blocked in the creating thread from
                                           Create until Destroy */
    xIoBackend io;                    /**< the workers' I/O backend (XIO_DEFAULT: XK_IO,
                                           else io_uring, else epoll); a caller's loop
                                           keeps its own */
} xHttpServerConf;

/** Fills the first size bytes of conf with the defaults noted above; size is
 *  the caller's sizeof(xHttpServerConf). Call xHttpServerConfInit instead. */
void xHttpServerConfInitSized(xHttpServerConf *conf, size_t size);

/** Fills conf with the defaults noted above. */
static inline void xHttpServerConfInit(xHttpServerConf *conf) {
    xHttpServerConfInitSized(conf, sizeof *conf);
}

/** Creates a server. loop NULL: the server owns conf->workers loops, started
 *  by xHttpServerRun. loop set: the server lives on that loop only, and
 *  xHttpServerDestroy leaves the loop to its owner. conf is copied (the
 *  caller may free it at once); NULL means the defaults. Returns NULL on
 *  allocation failure. */
xHttpServer *xHttpServerCreate(xEventLoop *loop, const xHttpServerConf *conf);

/** Adds a route. spec is "METHOD /pattern" or "/pattern" for any method; a
 *  pattern segment ":name" captures one segment, a final "*" the rest. GET
 *  routes also answer HEAD. Unknown path → 404; known path, other method →
 *  405 with Allow. spec is copied; arg is borrowed, passed to every call of
 *  handler, and must outlive the server. Returns XERR_INVALID, XERR_EXISTS or
 *  XERR_STATE (running). */
xErrno xHttpServerRoute(xHttpServer *server, const char *spec, xHttpHandler handler, void *arg);

/** Adds a route like xHttpServerRoute whose handler runs as soon as the
 *  request head has arrived; the body is not buffered (xHttpRequestBody stays
 *  empty) but read with xHttpRequestReadBody, and max_body_size does not apply.
 *  A client's "Expect: 100-continue" is answered when the handler first calls
 *  xHttpRequestReadBody, so a handler that refuses from the head alone never
 *  invites the body. If the response ends before the body does, the rest is
 *  discarded: HTTP/1.1 closes the connection after the response (whose head
 *  then says "Connection: close"); HTTP/2 resets the stream with NO_ERROR once
 *  the response is complete, which asks the client to stop sending. */
xErrno xHttpServerRouteStreaming(xHttpServer *server, const char *spec, xHttpHandler handler, void *arg);

/** Binds and listens on host:port (IPv4 or IPv6 literal or name; NULL or ""
 *  for every IPv4 address; port 0 picks a free one). Fails here, not later,
 *  when the address is in use: XERR_BUSY, XERR_ADDR, XERR_SYS. */
xErrno xHttpServerListen(xHttpServer *server, const char *host, uint16_t port);

/** Like xHttpServerListen, speaking only protocols (XHTTP_PROTO_* bits, all
 *  of them spoken by the server): XHTTP_PROTO_HTTP2 alone serves HTTP/2 with
 *  prior knowledge only, and an HTTP/1.1 request there gets no answer but a
 *  closed connection. XERR_INVALID for none, or one the server does not speak. */
xErrno xHttpServerListenProtocols(xHttpServer *server, const char *host, uint16_t port, unsigned protocols);

/** What went wrong in the last failed xHttpServerListen, xHttpServerListenTls
 *  or xHttpServerReloadTls, in words (e.g. "tls: key key.pem does not match
 *  certificate cert.pem"); "" after a success. Valid until the next such call. */
const char *xHttpServerLastError(const xHttpServer *server);

/** How many workers serve requests (1 on a caller's loop). */
int xHttpServerWorkerCount(const xHttpServer *server);

/** The port of the first listener (useful after listening on port 0), or 0. */
uint16_t xHttpServerPort(const xHttpServer *server);

/** The port of listener index (0 for the first added, plain or TLS), or 0. */
uint16_t xHttpServerListenerPort(const xHttpServer *server, int index);

/** Runs the workers and blocks until the server stops (xHttpServerStop, or a
 *  signal when conf.handle_signals). On a caller's loop it runs that loop. */
xErrno xHttpServerRun(xHttpServer *server);

/** Begins a graceful stop: listeners close, idle connections close, in-flight
 *  requests finish (answered with Connection: close), and everything ends by
 *  shutdown_timeout_ms. Callable from any thread and from a signal handler. */
void xHttpServerStop(xHttpServer *server);

/** Frees a server that is not running, with its workers' loops; a caller's
 *  loop (xHttpServerCreate's loop argument) is left alone, not destroyed. */
void xHttpServerDestroy(xHttpServer *server);

/* ---- The request: views valid until its response ends ---- */

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

/** Holds back further pieces until xHttpRequestResumeBody. Meanwhile the client
 *  is held back too: HTTP/1.1 stops reading the socket, HTTP/2 stops reopening
 *  the stream's flow-control window, so at most a window of body waits here
 *  (other streams on the connection go on). */
void xHttpRequestPauseBody(xHttpRequest *req);

/** Resumes a paused body; pieces that wait may be delivered before it returns
 *  (unless called from the handler or the reader, which get them after). */
void xHttpRequestResumeBody(xHttpRequest *req);

/** "HTTP/1.0", "HTTP/1.1" or "HTTP/2". */
const char *xHttpRequestProtocol(const xHttpRequest *req);

/** The loop the request is served on, for timers and deferred work. */
xEventLoop *xHttpRequestLoop(const xHttpRequest *req);

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
 *  they are unknown. The TCP peer: a proxy's forwarding headers are not read. */
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

/* ---- The response ---- */

/** Sets the status code (default 200). Before the head is sent. */
void xHttpResponseSetStatus(xHttpResponse *res, int status);

/** Adds a header; name and value are copied. Content-Length,
 *  Transfer-Encoding, Connection and Date are the server's and are refused
 *  (XERR_INVALID), as are names or values with bytes not allowed in a field.
 *  Returns XERR_STATE after the head is sent. */
xErrno xHttpResponseAddHeader(xHttpResponse *res, const char *name, const char *value);

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

/** Streams a piece of the body (chunked on HTTP/1.1); sends the head first. */
xErrno xHttpResponseWrite(xHttpResponse *res, const void *data, size_t len);

/** Ends a streamed response. */
xErrno xHttpResponseEnd(xHttpResponse *res);

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

#ifdef __cplusplus
}
#endif
#endif
