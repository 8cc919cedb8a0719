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
 * Each request goes to the next upstream in turn (round-robin), skipping one
 * that failed (refused, reset, timed out, sent garbage) fail_threshold times
 * in a row, for fail_timeout_ms. Fields that belong to one hop (Connection
 * and those it names, Keep-Alive, TE, Transfer-Encoding, Upgrade, Proxy-*)
 * are removed both ways; the request is framed anew (Content-Length where
 * the front knows it, else chunked) and carries X-Forwarded-For (appended
 * to), X-Forwarded-Proto, X-Forwarded-Host and Forwarded (RFC 7239). An
 * answer is streamed as it comes (chunked on an HTTP/1.1 front). Before
 * anything reached the client, a refused or failed connection is retried
 * on the next upstream (up to max_tries) when the request body is held
 * whole (a route that does not stream bodies) and the method is idempotent,
 * or no byte of it left; then 502 (refused, reset, garbage) or 504 (a
 * timeout) with a body that says which. After the head reached the client,
 * an upstream failure closes the client's connection, so a cut answer never
 * looks whole.
 *
 * Routed with xHttpServerRouteStreaming, request bodies stream to the
 * upstream as they arrive, the client paused while the upstream is behind;
 * with xHttpServerRoute they are read whole first (max_body_size).
 *
 * An auth subrequest (auth_url) may gate every request; a PROXY protocol
 * header (proxy_protocol) may tell the upstream whom it is for.
 *
 * Upstreams may speak HTTP/2 (conf.upstream.protocol): every request of a
 * worker multiplexed on one connection per upstream, trailers kept, so gRPC
 * passes through (grpc-status and grpc-message end to end).
 *
 * Not yet: WebSocket and extended CONNECT, least-connections and hashing,
 * active health checks. */
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
    /** 1 or 2: each upstream connection opens with a PROXY protocol header
     *  of that version (HAProxy's proxy-protocol.txt) naming the client as
     *  the front saw it (after a trusted PROXY header at the front) and the
     *  front address it reached; a kept-alive connection then carries only
     *  that client's requests. 0: none. Not with HTTP/2 upstreams
     *  (xHttpProxyCreate: XERR_INVALID). */
    unsigned proxy_protocol;
    /** The auth subrequest (like nginx's auth_request): before each request
     *  goes upstream, auth_url ("http[s]://host:port", the upstream
     *  settings above) is asked with the request's method, its target (or
     *  auth_target), the fields the upstream would get plus
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
