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
#include "xnet/proxy.h"
#include "xhttp/core/date.h"
#include "xhttp/core/router.h"
#include "xhttp/core/worker.h"

typedef struct xHttpExchange xHttpExchange;
typedef struct xHttpTakeover xHttpTakeover;

/** Protocol changes HTTP/1.1 may ask for. upgrade/ implements them; it sits
 *  above the protocols, so they reach it only through this table. */
typedef struct xHttpUpgrades {
    /** ex's request asked for "Upgrade:" (has_body: with a body). When a
     *  protocol it names can take the connection, adds the 101's fields to
     *  ex->res and returns who takes it, with *arg for them; HTTP/1.1 sends
     *  the 101 and hands over after the batch. NULL: serve the request as it
     *  is (a WebSocket route's handler may still switch, through the
     *  exchange). */
    const xHttpTakeover *(*offer)(xConn *conn, xHttpExchange *ex, bool has_body, void **arg);
} xHttpUpgrades;

/** What a worker's requests did, beside its connections' xNetCounters:
 *  written by the worker, read from any thread (xCounter). */
typedef struct xHttpCounters {
    xCounter requests[XHTTP_METRIC_PROTOCOLS][XHTTP_METRIC_STATUS_CLASSES];
    xCounter http2_streams; /* request streams opened */
} xHttpCounters;

/** Told of every request as its response ends (observe/'s duration
 *  histograms and access log; set by server.c, which names every layer):
 *  status as logged, body_len the body bytes the handler gave. The
 *  request's views are still valid. */
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
    /** Optional (NULL: the filter codes only what passes through it), for a
     *  handler that keeps coded bodies of its own (static files): the
     *  codings, XHTTP_COMPRESS_* bits, the filter would give a whole body of
     *  len bytes with this Content-Type value; 0: none. */
    unsigned (*codings_for)(const struct xHttpFilter *filter, xStr content_type, uint64_t len);
    /** Set with codings_for: body coded whole in coding (one of its bits)
     *  into a buffer of malloc's, the caller's to free; NULL when that fails
     *  or saves nothing. */
    void *(*code_whole)(struct xHttpFilter *filter, unsigned coding, const void *body, size_t len,
                        size_t *out_len);
    /** Optional (NULL: it may code any streamed body), before a streamed
     *  body's first byte: decides now, from the head as it stands and a body
     *  of len bytes (UINT64_MAX: not known), what write would decide at its
     *  first call. True: it codes the body (its fields set, ex->filter_state
     *  ready); false: it leaves the response alone, its fields as they would
     *  be (Vary), and ex->filter NULL. */
    bool (*start)(xHttpExchange *ex, uint64_t len);
} xHttpFilter;

/** A body of the server's own, in place of the reason phrase it answers
 *  status with (xHttpServerErrorBody). */
typedef struct xHttpErrorBody {
    int status;         /* 0: any 4xx or 5xx without a body of its own */
    char *content_type; /* "Content-Type: ...\r\n" */
    size_t content_type_len;
    char *body;
    size_t len;
} xHttpErrorBody;

/** What the server says in the answers it writes itself, set before it runs
 *  and read by every worker: the Server field, who answers requests no route
 *  takes, and the bodies of its error answers. */
/* The part of the Server line copied in one fixed-size block. */
#define XHTTP_SERVER_LINE_BLOCK 32

typedef struct xHttpOwnAnswers {
    char server_line[96]; /* "Server: xkit\r\n", or "" for none; zeros after it */
    size_t server_line_len;
    xStr server_name;                           /* its value, for HTTP/2 */
    const struct xHttpRouteTarget *not_found;   /* NULL: the server's 404 */
    const struct xHttpRouteTarget *not_allowed; /* NULL: the server's 405 */
    xHttpErrorBody *error_bodies;
    size_t num_error_bodies;
} xHttpOwnAnswers;

/** The answers of a server nobody configured: "Server: xkit", 404 and 405
 *  of the server's own, reason phrases as bodies. */
extern const xHttpOwnAnswers xHttpDefaultAnswers;

/** The body status gets when the server answers it itself: *content_type is
 *  its "Content-Type: ...\r\n" line; by default the reason phrase on a line
 *  (written into line, which has room for the longest) as text/plain. */
xStr xHttpOwnErrorBody(const xHttpOwnAnswers *answers, int status, char line[64], xStr *content_type);

/** An HTTP/3 listener's advertisement (RFC 7838) on the TCP port of the same
 *  number: the line every response over that port carries, which HTTP/1.1
 *  writes as it is and HTTP/2 encodes with its Server and Date fields. */
typedef struct xHttpAltSvc {
    uint16_t port; /* the TCP listener's port (a request's conn->addr.local_port) */
    uint8_t len;
    char line[40]; /* "Alt-Svc: h3=\":PORT\"\r\n" */
} xHttpAltSvc;

#define XHTTP_MAX_ALT_SVC 8

typedef struct xHttpContext {
    xNetContext net; /* first: a connection's net is its HTTP context */
    const xHttpServerConf *conf;
    const xRouter *router;
    const xHttpUpgrades *upgrades;
    const xHttpOwnAnswers *answers; /* the server's, or xHttpDefaultAnswers */
    xHttpFilter *filter;            /* this worker's response filter; NULL: none */
    xHttpExchange *free_exchanges;  /* pooled request/response objects */
    size_t free_exchange_count;
    xHttpDateCache date;          /* this worker's Date header */
    xRouteMemo route_memo;        /* this worker's last route found (router.h) */
    bool draining;                /* graceful stop in progress */
    const xProxyTrust *forwarded; /* proxies whose X-Forwarded-For names the client; NULL: none */
    void *owner;                  /* the worker that owns this context */
    xHttpCounters counters;
    xHttpMetricShard *metrics;   /* this worker's cells of the application's metrics and the
                                    duration histograms (observe/); NULL: none */
    xHttpFinishedFn on_finished; /* NULL: no access log or histograms, one branch per request */
    void *on_finished_arg;
    xHttpWorker worker;                     /* what hooks and handlers see of this worker */
    xHttpAltSvc alt_svc[XHTTP_MAX_ALT_SVC]; /* TCP ports that advertise HTTP/3 */
    size_t alt_svc_count;                   /* 0: none, one branch per request */
} xHttpContext;

/** Prepares a worker's HTTP context on loop, as every worker's is made:
 *  conf and router are read-only and outlive it, upgrades is the protocol
 *  changes HTTP/1.1 may make (NULL: none); its network context's blocks hold
 *  a whole head. No filter, no log, no owner, worker 0 with no blocking
 *  pool: the caller sets those it needs. XERR_NOMEM leaves nothing to free. */
xErrno xHttpContextInit(xHttpContext *ctx, xEventLoop *loop, const xHttpServerConf *conf,
                        const xRouter *router, const xHttpUpgrades *upgrades);

/** Frees what xHttpContextInit made (the pooled exchanges too), once every
 *  connection is freed. */
void xHttpContextDestroy(xHttpContext *ctx);

/** A protocol's on_drain for a connection that has sent nothing yet: its
 *  timeout is shortened to XCONN_DRAIN_FRESH_MS (or the header timeout, if
 *  shorter), after which the protocol's on_timeout closes it as silent. */
void xHttpDrainFresh(xConn *conn);

/** The HTTP context of a connection an HTTP protocol serves. */
static inline xHttpContext *xHttpContextOf(const xConn *conn) { return (xHttpContext *)conn->net; }

/** The Alt-Svc line of the TCP port conn came to, or NULL when it has none;
 *  the caller checked ctx->alt_svc_count first (one branch without any). */
static inline const xHttpAltSvc *xHttpAltSvcOf(const xHttpContext *ctx, const xConn *conn) {
    for (size_t i = 0; i < ctx->alt_svc_count; i++)
        if (ctx->alt_svc[i].port == conn->addr.local_port) return &ctx->alt_svc[i];
    return NULL;
}

#endif
