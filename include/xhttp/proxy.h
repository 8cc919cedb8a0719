/* proxy.h — a reverse proxy as a route handler, on the upstream client
 * (<xhttp/client.h>): requests from any front protocol (HTTP/1.1, h2, h2c,
 * TLS) passed to a group of HTTP/1.1 upstreams and their answers streamed
 * back.
 *
 *     xHttpProxyConf conf;
 *     xHttpProxyConfInit(&conf);
 *     const char *urls[] = {"http://10.0.0.2:8080", "http://10.0.0.3:8080"};
 *     conf.upstreams = urls;
 *     conf.num_upstreams = 2;
 *     xHttpProxy *proxy;
 *     xHttpProxyCreate(server, &conf, &proxy);
 *     xHttpProxyUseWorkerHooks(server, proxy);  // or call WorkerStart/Stop from your own hooks
 *     xHttpServerRouteStreaming(server, "/api/\*", xHttpProxyHandler, proxy);
 *
 * Each request goes to the next upstream in turn (round-robin; or the one
 * with the fewest requests in flight, or one picked by a hash of the
 * client's address or of a header, by setting), skipping one that failed
 * (refused, reset, timed out, sent garbage) fail_threshold times in a row,
 * for fail_timeout_ms, and one that failed its active health check (a GET
 * of health_path every health_interval_ms, by setting) until it passes. Fields that belong to one hop
 * (Connection and those it names, Keep-Alive, TE, Transfer-Encoding, Upgrade, Proxy-*) are removed both ways;
 * the request is framed anew (Content-Length where the front knows it, else chunked) and carries
 * X-Forwarded-For (appended to), X-Forwarded-Proto, X-Forwarded-Host and Forwarded (RFC 7239). An answer is
 * streamed as it comes (chunked on an HTTP/1.1 front). Before anything reached the client, a refused or
 * failed connection is retried on the next upstream (up to max_tries) when the request body is held whole (a
 * route that does not stream bodies) and the method is idempotent, or no byte of it left; then 502 (refused,
 * reset, garbage) or 504 (a timeout) with a body that says which. After the head reached the client, an
 * upstream failure resets the response (the HTTP/2 stream alone, or the HTTP/1.1 connection), so a cut answer
 * never looks whole. An answer whose length the upstream gave keeps it (Content-Length, a HEAD's included);
 * others are chunked on an HTTP/1.1 front. Output is read from the upstream
 * only while the client takes it (under 1 MiB waiting for it, counting
 * bytes HTTP/2 flow control holds), and a request body only while the
 * upstream takes it, so memory per proxied request stays bounded whichever
 * side is slow. As a server's fallback for 405 too
 * (xHttpServerRouteMethodNotAllowed), the server's Allow field is dropped.
 *
 * Routed with xHttpServerRouteStreaming, request bodies stream to the
 * upstream as they arrive, the client paused while the upstream is behind;
 * with xHttpServerRoute they are read whole first (max_body_size). A large
 * body of known length streamed between cleartext HTTP/1.1 sockets, either
 * way, is spliced (splice_min).
 *
 * A WebSocket handshake from an HTTP/1.1 client (GET with Upgrade: websocket)
 * is passed on with its Upgrade field; after the upstream's 101 the client
 * gets the 101 with the upstream's fields and the proxy relays bytes both
 * ways, reading each side only while the other keeps up. An h2 client's
 * extended CONNECT (RFC 8441, :protocol websocket) on a streaming route goes
 * up as that handshake (a key of the proxy's own); after the 101 the stream
 * answers 200 and carries the bytes as its body both ways.
 *
 * An auth subrequest (auth_url) may gate every request; a PROXY protocol
 * header (proxy_protocol) may tell the upstream whom it is for.
 *
 * Upstreams may speak HTTP/2 (conf.upstream.protocol): every request of a
 * worker multiplexed on one connection per upstream, trailers kept, so gRPC
 * passes through (grpc-status and grpc-message end to end). A stream the
 * upstream refused is sent again by the client (<xhttp/client.h>), whatever
 * the method. */
#ifndef XHTTP_PROXY_H
#define XHTTP_PROXY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <xhttp/client.h>
#include <xhttp/server.h>

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default)

/** A group of upstreams and the per-worker clients that reach them. */
typedef struct xHttpProxy xHttpProxy;

/** How a request's upstream is chosen among those not taken out. */
typedef enum xHttpProxyBalance {
    XHTTP_PROXY_ROUND_ROBIN = 0, /**< each in turn */
    XHTTP_PROXY_LEAST_CONN,      /**< the fewest requests in flight (all workers together) */
    XHTTP_PROXY_HASH_ADDRESS,    /**< by the client's address: a client keeps its upstream while it is up */
    XHTTP_PROXY_HASH_HEADER,     /**< by hash_header's value (absent: round-robin) */
} xHttpProxyBalance;

/** A proxy's settings; start from xHttpProxyConfInit. */
typedef struct xHttpProxyConf {
    size_t struct_size;
    const char *const *upstreams; /**< "http://host:port" each (copied) */
    size_t num_upstreams;
    xHttpUpstreamConf upstream; /**< every upstream's pool and timeouts */
    unsigned fail_threshold;    /**< 1: failures in a row that take an upstream out */
    uint32_t fail_timeout_ms;   /**< 10 s: how long it stays out */
    unsigned max_tries;         /**< 2: upstreams tried for one request, where it may be retried */
    bool forwarded_headers;     /**< true: add X-Forwarded-* and Forwarded */
    xHttpProxyBalance balance;  /**< round-robin */
    const char *hash_header;    /**< XHTTP_PROXY_HASH_HEADER's field name (copied) */
    /** Active health checks: every health_interval_ms (0: none) one worker
     *  sends GET health_path to each upstream; one that does not answer 2xx
     *  within health_timeout_ms (0: the interval) is out until it does. */
    const char *health_path; /**< "/" by default (copied) */
    uint32_t health_interval_ms;
    uint32_t health_timeout_ms;
    /** 1 or 2: each upstream connection opens with a PROXY protocol header
     *  of that version (HAProxy's proxy-protocol.txt) naming the client as
     *  the front saw it (after a trusted PROXY header at the front) and the
     *  front address it reached; a kept-alive connection then carries only
     *  that client's requests. 0: none. Not with HTTP/2 upstreams
     *  (xHttpProxyCreate: XERR_INVALID). */
    unsigned proxy_protocol;
    /** The auth subrequest (like nginx's auth_request): before each request
     *  goes upstream, auth_url ("http[s]://host:port", the upstream
     *  settings above) is asked with the request's method (or auth_method), its target
     *  (or auth_target), the fields the upstream would get plus
     *  X-Original-Method and X-Original-URI, and no body. A 2xx lets it
     *  through with the answer's fields named in auth_copy added (the
     *  client's own fields of those names are always removed); 401 or 403
     *  is the client's answer, with the service's WWW-Authenticate; another
     *  status is 502 (the service misbehaved); a service that cannot be
     *  asked (refused, timed out, an invalid answer) is 503. Nothing is
     *  cached. NULL: no subrequest. */
    const char *auth_url;
    const char *auth_target;      /**< NULL: the request's own path and query */
    const char *const *auth_copy; /**< field names, up to 8 (copied) */
    size_t num_auth_copy;
    /** The subrequest's method (copied): NULL, the request's own; "GET" asks
     *  as nginx's auth_request does, for a service that answers GET only
     *  (X-Original-Method still says the request's). */
    const char *auth_method;
    /** Request bodies of at least this many bytes (a Content-Length, on a
     *  streaming route, from an HTTP/1.1 client in cleartext to an HTTP/1.1
     *  upstream in cleartext) pass from the client's socket to the
     *  upstream's with splice(2), never copied into user space: what came
     *  with the head goes first, the rest moves socket → pipe → socket
     *  through a worker's spare pipes. Such a request is never retried once
     *  its body has begun to go (as any streamed body). Response bodies
     *  too: an HTTP/1.1 upstream's answer with a Content-Length of at
     *  least this many bytes, to an HTTP/1.1 client in cleartext, that the
     *  response filter (compression) leaves alone (xHttpResponseFiltered:
     *  the filter codes the others, chunked), moves upstream socket →
     *  pipe → client socket, the upstream paused while the client's socket
     *  is full. 0: never. */
    size_t splice_min;
} xHttpProxyConf;

/** Fills conf with the defaults noted above (no upstreams). */
void xHttpProxyConfInit(xHttpProxyConf *conf);

/** Makes a proxy for server's workers; every upstream resolved now
 *  (xHttpUpstreamCreate). XERR_INVALID (no upstream, or a bad URL),
 *  XERR_ADDR, XERR_NOMEM. */
xErrno xHttpProxyCreate(xHttpServer *server, const xHttpProxyConf *conf, xHttpProxy **out);

/** Makes the worker's client; from a worker start hook (xHttpServerOnWorker). */
xErrno xHttpProxyWorkerStart(xHttpProxy *proxy, xHttpWorker *worker);

/** Closes the worker's client; from the worker's stop hook. */
void xHttpProxyWorkerStop(xHttpProxy *proxy, xHttpWorker *worker);

/** Sets server's worker hooks to the two above, for a server with no hooks
 *  of its own (xHttpServerOnWorker's errors). */
xErrno xHttpProxyUseWorkerHooks(xHttpServer *server, xHttpProxy *proxy);

/** The route handler; arg is the xHttpProxy. */
void xHttpProxyHandler(xHttpRequest *req, xHttpResponse *res, void *arg);

/** What the worker's client did with upstream i, for tests and metrics. */
void xHttpProxyStats(const xHttpProxy *proxy, const xHttpWorker *worker, size_t i, xHttpClientStats *stats);

/** Frees the proxy, after the server is destroyed (every worker stopped). */
void xHttpProxyDestroy(xHttpProxy *proxy);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif

#endif
