/* context.h — what every HTTP connection of one worker shares: the network
 * context below it (loop, pools, connections), the server's settings and
 * routes (read-only), and pooled exchanges. One per worker thread, so nothing
 * here needs a lock. */
#ifndef XHTTP_CORE_CONTEXT_H
#define XHTTP_CORE_CONTEXT_H

#include <stdbool.h>
#include <stddef.h>

#include <xhttp/observe.h>
#include <xhttp/server.h>

#include "xbase/mem/counter.h"
#include "xnet/connection.h"
#include "xhttp/core/date.h"
#include "xhttp/core/router.h"

typedef struct xHttpExchange xHttpExchange;

/** Protocol changes HTTP/1.1 may ask for. upgrade/ implements them; it sits
 *  above the protocols, so they reach it only through this table. */
typedef struct xHttpUpgrades {
    /** req asked for "Upgrade:". When a protocol it names can be served,
     *  queues the 101 and returns what the switch needs; NULL: serve req as
     *  it is. */
    void *(*offer)(xConn *conn, const xHttpRequest *req, bool has_body);
    /** Hands conn over after the batch that answered 101; conn->in[start,)
     *  holds what followed the request, req is still valid. Frees pending.
     *  False when the new protocol could not start: conn is still the
     *  caller's. */
    bool (*take)(xConn *conn, void *pending, const xHttpRequest *req, size_t start);
    /** Frees a pending switch that will not happen. */
    void (*drop)(void *pending);
} xHttpUpgrades;

/** What a worker's requests did, beside its connections' xNetCounters:
 *  written by the worker, read from any thread (xCounter). */
typedef struct xHttpCounters {
    xCounter requests[XHTTP_METRIC_PROTOCOLS][XHTTP_METRIC_STATUS_CLASSES];
    xCounter http2_streams; /* request streams opened */
} xHttpCounters;

/** Told of every request as its response ends (observe/'s access log; set by
 *  server.c, which names every layer): status as logged, body_len the body
 *  bytes the handler gave. The request's views are still valid. */
typedef void (*xHttpFinishedFn)(void *arg, const xHttpExchange *ex, int status, uint64_t body_len);
/** A response filter (compression): filter/ fills one per worker and core's
 *  response calls go through it, before the protocol's framing, when a
 *  worker has one. Each call ends in ex->ops, with the body as it is or
 *  transformed. */
typedef struct xHttpFilter {
    /** The whole body at once; the arguments are xHttpExchangeOps.send's. */
    xErrno (*send)(xHttpExchange *ex, const void *body, size_t len, bool copy, void (*release)(void *),
                   void *release_arg);
    /** A piece of a streamed body. */
    xErrno (*write)(xHttpExchange *ex, const void *data, size_t len);
    /** The end of a streamed body. */
    xErrno (*end)(xHttpExchange *ex);
    /** Frees ex->filter_state of a response that will not end through the
     *  filter (the client left). */
    void (*drop)(xHttpExchange *ex);
} xHttpFilter;

typedef struct xHttpContext {
    xNetContext net; /* first: a connection's net is its HTTP context */
    const xHttpServerConf *conf;
    const xRouter *router;
    const xHttpUpgrades *upgrades;
    xHttpFilter *filter;           /* this worker's response filter; NULL: none */
    xHttpExchange *free_exchanges; /* pooled request/response objects */
    size_t free_exchange_count;
    xHttpDateCache date; /* this worker's Date header */
    bool draining;       /* graceful stop in progress */
    void *owner;         /* the worker that owns this context */
    xHttpCounters counters;
    xHttpFinishedFn on_finished; /* NULL: no access log, one branch per request */
    void *on_finished_arg;
} xHttpContext;

/** The HTTP context of a connection an HTTP protocol serves. */
static inline xHttpContext *xHttpContextOf(const xConn *conn) { return (xHttpContext *)conn->net; }

#endif
