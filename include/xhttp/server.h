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
 * with backpressure: while the reader is paused, the client is held back.
 *
 * Stopping gracefully (SIGTERM or SIGINT with handle_signals, or
 * xHttpServerStop), in this order:
 *  1. xHttpServerStopping turns true and the health route
 *     (xHttpServerHealthRoute) answers 503.
 *  2. For stop_grace_ms (0 by default: this step is skipped) the server goes
 *     on accepting and serving, every HTTP/1.1 response with "Connection:
 *     close", so a load balancer's health check sees the 503 and moves its
 *     traffic elsewhere while nothing is refused.
 *  3. The listeners close: what the kernel had queued on them is accepted and
 *     served first. A connection that has sent nothing yet, or is in its TLS
 *     handshake, gets 250 ms more to send its first request; idle keep-alive
 *     connections close, but with a stop grace (a load balancer in front)
 *     they stay for the balancer to close or to use once more, answered with
 *     "Connection: close": closing one ourselves races a request the
 *     balancer may be sending on it; HTTP/2 connections get GOAWAY.
 *  4. Requests in flight finish (answered with "Connection: close"), and
 *     whatever is left when shutdown_timeout_ms has passed since step 3 is
 *     closed. xHttpServerRun returns.
 *
 * Restarting without dropping a request, the new copy before the old one
 * stops: with shared_port, a second process of the same user listens on the
 * same host:port while the first runs, and takes every new connection once
 * its workers have started; when the first closes its listeners (step 3),
 * the connections queued on them are handed to the second (Linux's
 * reuseport migration; see shared_port). Or the sockets are made once and passed
 * down: xHttpServerListenFd, and systemd's socket activation
 * (xHttpServerListenSystemd), where the socket outlives every copy. */
#ifndef XHTTP_SERVER_H
#define XHTTP_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <xbase/errno.h>
#include <xbase/event.h>
#include <xbase/str.h>
#include <xhttp/request.h>
#include <xhttp/response.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What this header declares is libxkit.so's API: exported, where the rest is hidden. */
#pragma GCC visibility push(default)

typedef struct xHttpServer xHttpServer;

/** Handles one request; arg is what was given to xHttpServerRoute. */
typedef void (*xHttpHandler)(xHttpRequest *req, xHttpResponse *res, void *arg);

/** Protocols a server speaks; HTTP/2 without TLS is told apart from HTTP/1.1
 *  by its connection preface (and reached by "Upgrade: h2c" only where
 *  xHttpServerConf.h2c_upgrade allows it). */
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
    bool h2c_upgrade;                 /**< an HTTP/1.1 request with "Upgrade: h2c" is
                                           answered 101 and served over HTTP/2 (false:
                                           served over HTTP/1.1, no 101). Off because a
                                           proxy in front that forwards Upgrade turns the
                                           connection into a tunnel it no longer reads,
                                           so its rules (deny /admin) stop applying to
                                           the HTTP/2 requests inside (h2c smuggling);
                                           RFC 9113 §3.1 deprecates the mechanism. HTTP/2
                                           with prior knowledge is unaffected */
    bool shared_port;                 /**< xHttpServerListen on a port where another
                                           process of the same user listens with
                                           shared_port too succeeds (SO_REUSEPORT):
                                           start the new copy, then stop the old
                                           (false: XERR_BUSY, so a second server by
                                           mistake is caught). A reuseport program the
                                           server attaches (Linux 5.14, CAP_BPF) gives
                                           new connections to the copy whose workers
                                           started last, so none reaches one as it
                                           stops, and a copy that stops hands the
                                           connections queued on its sockets to it.
                                           Without CAP_BPF the kernel spreads new
                                           connections over both copies, and the
                                           queued ones are handed over only with the
                                           sysctl net.ipv4.tcp_migrate_req=1; else they
                                           are reset, and the server logs a warning */
    uint32_t stop_grace_ms;           /**< a graceful stop serves and accepts this
                                           long, the health route saying 503, before
                                           it closes its listeners (0) */
    /* Lingering close, as nginx's lingering_close: a connection the server
     * closes (after a 400 or 413, a request it would not read, a TLS session
     * that ended) sends its last bytes and a FIN, then reads and drops what
     * the client still sends before closing; closed with input unread, the
     * kernel would answer that input with a reset that can destroy the
     * response the client has not read yet. */
    uint32_t lingering_time_ms;    /**< at most this long in all (5 s; 0:
                                        closed once the output is out) */
    uint32_t lingering_timeout_ms; /**< … and this long with nothing new (2 s; 0: no such limit) */
    size_t lingering_max_bytes;    /**< … and this much read and dropped (64 MiB) */
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

/* ---- The answers the server writes itself ---- */

/** Sets the Server field of every response ("xkit" by default); NULL or ""
 *  leaves it out. A handler that adds a Server field replaces the server's
 *  for its response. name is copied. XERR_INVALID for a byte a field value
 *  may not hold or a name over 80 bytes, XERR_STATE (running). */
xErrno xHttpServerSetServerName(xHttpServer *server, const char *name);

/** Answers every request no route matches with handler instead of the
 *  server's own 404; the response's status is 404 when it is called (the
 *  handler may set another). A route for "/\*" would take them too, and
 *  also the 405s. NULL: the server's own again. XERR_STATE (running). */
xErrno xHttpServerRouteNotFound(xHttpServer *server, xHttpHandler handler, void *arg);

/** Answers every request whose path a route matches but whose method none
 *  does with handler instead of the server's own 405; the status is 405 and
 *  the Allow field set when it is called. NULL: the server's own again.
 *  XERR_STATE (running). */
xErrno xHttpServerRouteMethodNotAllowed(xHttpServer *server, xHttpHandler handler, void *arg);

/** Gives the answers the server writes itself with status (a malformed or
 *  oversized request, a timeout, 404 and 405 without a handler, static files'
 *  refusals) this body in place of the reason phrase, as content_type;
 *  status 0 applies to every 4xx and 5xx without a body of its own. Both are
 *  copied; set again, they replace the last. HEAD still gets no body.
 *  XERR_INVALID for a status outside 400-599 (or 0) or a bad content type,
 *  XERR_STATE (running). */
xErrno xHttpServerErrorBody(xHttpServer *server, int status, const char *content_type, const void *body,
                            size_t len);

/** Binds and listens on host:port (IPv4 or IPv6 literal or name; NULL or ""
 *  for every IPv4 address; port 0 picks a free one). Fails here, not later,
 *  when the address is in use: XERR_BUSY, XERR_ADDR, XERR_SYS. */
xErrno xHttpServerListen(xHttpServer *server, const char *host, uint16_t port);

/** Like xHttpServerListen, speaking only protocols (XHTTP_PROTO_* bits, all
 *  of them spoken by the server): XHTTP_PROTO_HTTP2 alone serves HTTP/2 with
 *  prior knowledge only, and an HTTP/1.1 request there gets no answer but a
 *  closed connection. XERR_INVALID for none, or one the server does not speak. */
xErrno xHttpServerListenProtocols(xHttpServer *server, const char *host, uint16_t port, unsigned protocols);

/** Listens on fd, a TCP socket bound (and listening, or then made to listen)
 *  by someone else: inherited from a parent, passed over a UNIX socket. The
 *  server takes fd (each worker gets its own descriptor of it, and fd is
 *  closed); the socket lives on where others hold it too, with what it has
 *  queued, so a copy of the server that stops loses nothing another copy
 *  holding it can accept. Speaks the server's protocols. XERR_INVALID for a
 *  negative fd; XERR_SYS for a descriptor that is not a bound TCP socket
 *  (xHttpServerLastError says why; fd is then the caller's still). */
xErrno xHttpServerListenFd(xHttpServer *server, int fd);

/** Listens on the sockets systemd passed this process (socket activation:
 *  LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES, read as sd_listen_fds(3) says,
 *  without libsystemd), each as xHttpServerListenFd would: those named name
 *  (FileDescriptorName= in the .socket unit; "unknown" when unnamed), or all
 *  of them when name is NULL; each socket is taken once, so a later call
 *  takes only others. *count gets how many were taken: 0 when systemd passed
 *  none (the caller then listens on its own address). */
xErrno xHttpServerListenSystemd(xHttpServer *server, const char *name, int *count);

/** What went wrong in the last failed xHttpServerListen, xHttpServerListenTls,
 *  xHttpServerReloadTls, or worker start (xHttpServerOnWorker), in words (e.g.
 *  "tls: key key.pem does not match certificate cert.pem"); "" after a
 *  success. Valid until the next such call. */
const char *xHttpServerLastError(const xHttpServer *server);

/** Reads the PROXY protocol (HAProxy's, versions 1 and 2) on listener index
 *  (0 for the first added, plain or TLS), before TLS or HTTP, from clients
 *  whose address is in trusted_networks ("127.0.0.0/8, 10.0.0.0/8 ::1/128":
 *  IPv4 and IPv6 networks or single addresses, commas or spaces between, up
 *  to 32). A trusted client must open with a valid header (a load balancer
 *  set to send one that does not is misconfigured, and its requests would be
 *  taken for its own), else it is closed; the address and port the header
 *  carries are then the client's for handlers (xHttpRequestPeer), access
 *  logs and metrics. A LOCAL (v2) or UNKNOWN (v1) header, or one for an
 *  address family other than TCP over IPv4 or IPv6, leaves the connection's
 *  own. Anyone else connects as before and nothing of theirs is read as a
 *  header: a PROXY header from them is refused as any junk is (HTTP/1.1
 *  answers 400 and closes), never taken as an address. A header that has
 *  not all arrived within header_timeout_ms closes the connection. NULL turns it off. XERR_INVALID (no such
 * listener, or a list that is not networks: xHttpServerLastError says which), XERR_STATE (running). */
xErrno xHttpServerProxyProtocol(xHttpServer *server, int index, const char *trusted_networks);

/** Names who the client is behind HTTP proxies in trusted_networks (a list
 *  as xHttpServerProxyProtocol takes): for a request whose connection comes
 *  from one of them, the client handlers (xHttpRequestPeer) and the access
 *  log see is the right-most address in X-Forwarded-For (all its fields, in
 *  order, as one list; RFC 7239 Forwarded's for= where there is none) that is
 *  not itself in trusted_networks, its port where the entry carries one,
 *  else 0. What a trusted proxy appended is what it saw; what a client wrote
 *  is to its left and never reached past a hop that is not trusted. An entry
 *  that is not an address ends the walk at the hop before it. Other peers'
 *  fields are ignored. NULL turns it off. XERR_INVALID (a list that is not
 *  networks: xHttpServerLastError says which), XERR_STATE (running). */
xErrno xHttpServerTrustForwarded(xHttpServer *server, const char *trusted_networks);

/** Adds "GET path" (and HEAD): 200 "ok" while the server serves, 503
 *  "stopping" from the moment a graceful stop begins, for a load balancer's
 *  health check (see "Stopping gracefully" above and stop_grace_ms).
 *  XERR_INVALID for a path not starting with '/', else as xHttpServerRoute. */
xErrno xHttpServerHealthRoute(xHttpServer *server, const char *path);

/** Whether a graceful stop has begun (xHttpServerStop, or a stop signal):
 *  for a health handler of one's own. Callable from any thread. */
bool xHttpServerStopping(const xHttpServer *server);

/** How many workers serve requests (1 on a caller's loop). */
int xHttpServerWorkerCount(const xHttpServer *server);

/** The port of the first listener (useful after listening on port 0), or 0. */
uint16_t xHttpServerPort(const xHttpServer *server);

/** The port of listener index (0 for the first added, plain or TLS), or 0. */
uint16_t xHttpServerListenerPort(const xHttpServer *server, int index);

/* ---- Per-worker state ----
 * A worker's own things (a database connection, a client handle) live on its
 * thread: made when it starts, reached by its handlers without a lock, closed
 * when it stops. */

/** One worker, as its hooks and handlers see it. */
typedef struct xHttpWorker xHttpWorker;

/** Runs on the worker's thread, on its loop, before it accepts: may make
 *  per-worker state (xHttpWorkerSetData), add watches and timers to the
 *  worker's loop, and fail, returning an error (with words for
 *  xHttpServerLastError from xHttpWorkerSetError). */
typedef xErrno (*xHttpWorkerStartFn)(xHttpWorker *worker, void *arg);

/** Runs on the same thread once the worker's last request has finished (after
 *  a graceful stop has drained its connections and its blocking work has
 *  come back), so it may close what no request uses any more. */
typedef void (*xHttpWorkerStopFn)(xHttpWorker *worker, void *arg);

/** Sets the hooks every worker runs, each with arg; either may be NULL; once
 *  per server. On the server's own workers start runs in xHttpServerRun, on
 *  each worker's thread, and no worker accepts before every start has
 *  returned; one that fails makes Run return its error (the others stop,
 *  each running stop, without serving). stop runs as each worker's thread
 *  ends. On a caller's loop start runs at once, within this call (which must
 *  come from the loop's thread, before it serves) and its error is this
 *  call's; stop runs in xHttpServerDestroy. A start that fails is not
 *  followed by stop. XERR_EXISTS (hooks set), XERR_STATE (running). */
xErrno xHttpServerOnWorker(xHttpServer *server, xHttpWorkerStartFn start, xHttpWorkerStopFn stop, void *arg);

/** The worker's index, 0 to xHttpServerWorkerCount - 1. */
int xHttpWorkerIndex(const xHttpWorker *worker);

/** The worker's loop: its handlers and its hooks run on it. */
xEventLoop *xHttpWorkerLoop(const xHttpWorker *worker);

/** The worker's own pointer: what its start set, else NULL. Also
 *  xHttpRequestWorkerData from its handlers (a WebSocket's on_open reaches
 *  it through its open->req). */
void *xHttpWorkerData(const xHttpWorker *worker);

/** Sets the worker's own pointer; borrowed, the worker's stop frees it. */
void xHttpWorkerSetData(xHttpWorker *worker, void *data);

/** From a start that fails: what xHttpServerLastError will say of it
 *  (copied; up to 200 bytes are kept). */
void xHttpWorkerSetError(xHttpWorker *worker, const char *message);

/* ---- Blocking work ----
 * A handler that must call something that blocks (password hashing, image
 * resizing, a blocking library) hands it to the server's pool with
 * xHttpRequestRunBlocking (<xhttp/request.h>) and answers when it is done. */

/** The blocking pool's settings. Start from xHttpBlockingOptsInit's
 *  defaults; fields are only ever added at the end. */
typedef struct xHttpBlockingOpts {
    size_t struct_size;     /**< the caller's sizeof, set by xHttpBlockingOptsInit */
    int threads;            /**< pool threads, shared by every worker, started as work
                                 first needs them (4) */
    size_t max_queued;      /**< work waiting for a thread, every worker's together;
                                 beyond it xHttpRequestRunBlocking refuses with
                                 XERR_BUSY (1024) */
    bool answer_busy;       /**< a refused xHttpRequestRunBlocking answers the request
                                 503 itself (true); false: the handler answers */
    uint32_t retry_after_s; /**< that 503's Retry-After, in seconds (1); 0: none */
} xHttpBlockingOpts;

/** Fills the first size bytes of opts (the caller's sizeof) with the
 *  defaults above. Call xHttpBlockingOptsInit instead. */
void xHttpBlockingOptsInitSized(xHttpBlockingOpts *opts, size_t size);

/** Fills opts with the defaults noted above. */
static inline void xHttpBlockingOptsInit(xHttpBlockingOpts *opts) {
    xHttpBlockingOptsInitSized(opts, sizeof *opts);
}

/** Sets the blocking pool's settings (a server without this call has the
 *  defaults); opts is copied. No thread starts before work needs one. Before
 *  the server runs and before any work was handed over: XERR_STATE after,
 *  XERR_INVALID for no thread or no room in the queue. */
xErrno xHttpServerBlockingPool(xHttpServer *server, const xHttpBlockingOpts *opts);

/** Runs the workers and blocks until the server stops (xHttpServerStop, or a
 *  signal when conf.handle_signals). On a caller's loop it runs that loop. */
xErrno xHttpServerRun(xHttpServer *server);

/** Begins a graceful stop, as "Stopping gracefully" above says: after
 *  stop_grace_ms listeners close, idle connections close, in-flight requests
 *  finish (answered with Connection: close), and everything ends by
 *  shutdown_timeout_ms. Callable from any thread and from a signal handler. */
void xHttpServerStop(xHttpServer *server);

/** Frees a server that is not running, with its workers' loops; a caller's
 *  loop (xHttpServerCreate's loop argument) is left alone, not destroyed.
 *  Blocking work still queued is cancelled and work still running waited
 *  for, each done told before the worker's stop hook runs. */
void xHttpServerDestroy(xHttpServer *server);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
