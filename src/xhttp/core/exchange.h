/* exchange.h — one request and its response, independent of the protocol.
 *
 * A protocol (HTTP/1.1, HTTP/2) fills in the request, calls
 * xHttpExchangeDispatch, and turns the handler's response calls into its own
 * framing through xHttpExchangeOps. Handlers only ever see xHttpRequest and
 * xHttpResponse, so they serve every protocol unchanged. */
#ifndef XHTTP_CORE_EXCHANGE_H
#define XHTTP_CORE_EXCHANGE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <xbase/buffer.h>
#include <xhttp/server.h>

#include "xhttp/core/context.h"
#include "xhttp/core/field.h"
#include "xhttp/core/router.h"

/** What a session carried over an exchange that became one (a WebSocket,
 *  after its 101 or its extended CONNECT's 200): kept by the session, read
 *  when the exchange finishes, for its log line. */
typedef struct xHttpSessionStats {
    uint64_t messages_in, messages_out; /* data messages each way */
    uint64_t bytes_in, bytes_out;       /* the session's own bytes (its frames) each way */
} xHttpSessionStats;

/** Who takes a connection over after a 101. */
typedef struct xHttpTakeover {
    /** Called once the batch that sent the 101 is done: conn->in[start,)
     *  holds what followed the request, and ex is the taker's from now on (it
     *  finishes and releases it). False: the new protocol could not start,
     *  and the connection is closed. */
    bool (*start)(xConn *conn, xHttpExchange *ex, size_t start, void *arg);
    /** The switch will not happen (the connection closed first): frees arg. */
    void (*drop)(void *arg);
} xHttpTakeover;

/** How a protocol frames a response. Each gets the exchange; the response's
 *  status and header lines are in ex->res. */
typedef struct xHttpExchangeOps {
    /** The whole body at once. copy: body is the caller's and must be copied
     *  before returning; otherwise release(release_arg) once it is sent. */
    xErrno (*send)(xHttpExchange *ex, const void *body, size_t len, bool copy, void (*release)(void *),
                   void *release_arg);
    /** The whole body from len bytes of file fd at offset, read as the
     *  client takes them; release(release_arg) once they are sent or dropped
     *  (it closes fd), at once when the answer has no body. */
    xErrno (*send_file)(xHttpExchange *ex, int fd, off_t offset, size_t len, void (*release)(void *),
                        void *release_arg);
    /** A piece of a streamed body; the head goes first on the first call. */
    xErrno (*write)(xHttpExchange *ex, const void *data, size_t len);
    /** The end of a streamed body. */
    xErrno (*end)(xHttpExchange *ex);
    /** A streaming route's body may flow again (a reader was set, or resumed):
     *  deliver what waits, unless a delivery is already under way. */
    void (*body_wanted)(xHttpExchange *ex);
    /** Sends a 101 with the response's fields and hands the connection to
     *  to->start(.., arg) once the batch that dispatched the request is done.
     *  NULL where the protocol has no such switch (HTTP/2 carries tunnels on
     *  streams instead, through xHttpTunnel). */
    xErrno (*switch_protocols)(xHttpExchange *ex, const xHttpTakeover *to, void *arg);
    /** Streamed body bytes written and not yet taken by the client
     *  (xHttpResponsePending). */
    size_t (*pending)(const xHttpExchange *ex);
    /** A drain callback was armed (ex->res.on_drain): see that the protocol
     *  hears when its output moves, and calls xHttpExchangeCheckDrain then. */
    void (*watch_drain)(xHttpExchange *ex);
    /** The connection a streamed response's next body bytes may be spliced
     *  to (xnet/splice.h), its head sent first: *sink, or NULL while what
     *  was written before is still queued (wait with
     *  xHttpExchangeOnFlushed). XERR_INVALID where the bytes must pass
     *  through user space (TLS, a body not framed by its Content-Length).
     *  NULL where the protocol frames every byte (HTTP/2, HTTP/3). */
    xErrno (*splice_sink)(xHttpExchange *ex, xConn **sink);
    /** Cuts the response (xHttpResponseReset): the HTTP/2 stream reset, the
     *  HTTP/1.1 connection closed; the exchange is released as by end. */
    void (*reset)(xHttpExchange *ex);
} xHttpExchangeOps;

/** An extended CONNECT (RFC 8441) kept open as a tunnel past its response
 *  head: what the protocol carrying it and the handler holding it tell each
 *  other beyond xHttpExchangeOps (HTTP/2 carries WebSocket this way). */
typedef struct xHttpTunnel {
    /** Set by the protocol before dispatch when the request is a tunnel it
     *  can carry, else NULL: response bytes written and not yet framed
     *  (flow control holds them). */
    size_t (*pending)(const xHttpExchange *ex);
    /** Set by the holder while it waits; the protocol clears it and calls it
     *  once pending is 0. */
    void (*drained)(xHttpExchange *ex, void *arg);
    /** Set by the holder: the server stops gracefully, end the tunnel soon. */
    void (*stopping)(xHttpExchange *ex, void *arg);
    void *arg;
} xHttpTunnel;

/** What a body taker did (xHttpBodyTaker). */
typedef enum xHttpTake {
    XHTTP_TOOK,       /* bytes were taken off the socket (*took of them) */
    XHTTP_TAKE_LATER, /* none now: the socket is drained, or the taker paused the body until its sink has room
                       */
    XHTTP_TAKE_READ,  /* not this way now (bytes wait received ahead): read the socket as usual */
    XHTTP_TAKE_ENDED, /* the socket ended or failed: the body is cut short */
} xHttpTake;

/** A streaming route's reader that passes the body on unchanged may take the
 *  rest of a Content-Length body off the client's socket itself, without
 *  the bytes passing through user space (the proxy's splice): the protocol
 *  calls it where it would read the socket for more of the body, with
 *  nothing of the body left in its buffer, the bytes still to come (left)
 *  and the reader's arg, and counts *took of them as delivered; the reader
 *  then hears only the end (a piece of 0 bytes). It may end the exchange
 *  meanwhile (an upstream that failed). HTTP/1.1 in cleartext calls it;
 *  other protocols deliver every byte to the reader. */
typedef xHttpTake (*xHttpBodyTaker)(xHttpExchange *ex, xConn *from, uint64_t left, size_t *took, void *arg);

/** What a route leads to (the router's opaque handler). */
typedef struct xHttpRouteTarget {
    xHttpHandler handler;
    void *arg;
    bool streams_body;             /* runs at the head; the body follows in pieces */
    struct xHttpRouteTarget *next; /* the server's list, for freeing */
    bool unfiltered;               /* its responses bypass the worker's filter */
    void (*free_arg)(void *arg);   /* frees arg with the server (a WebSocket route's), or NULL */
    uint32_t route_index;          /* its label in the duration histograms (observe/metrics.h) */
} xHttpRouteTarget;

struct xHttpRequest {
    xStr method;
    xStr path;
    xStr query;
    xStr body;
    const char *protocol;
    const xHttpField *headers;
    size_t num_headers;
    xEventLoop *loop;
    const xRouteParam *params;
    size_t num_params;
    xConn *conn;       /* what it came on, for connection-level facts (TLS) */
    uint64_t start_us; /* loop time at its first byte; kept only while on_finished is set */
    char *kept;        /* xHttpExchangeKeepRequest's copy of the views, or NULL */
    /* Every field's name is a token and its value a field-value (RFC 9110
     * §5.1, §5.5): the protocol's parser checked them as HTTP/1.1 wants them,
     * so a proxy passing them on over HTTP/1.1 need not check them again. */
    bool fields_plain;
};

struct xHttpResponse {
    int status;
    xBuffer headers;  /* "Name: value\r\n" lines added by the handler */
    xBuffer trailers; /* the same, sent after a streamed body */
    bool head_sent;
    bool ended;
    bool aborted;           /* the client is gone; output is discarded */
    uint16_t blocking_jobs; /* xHttpRequestRunBlocking's under way: the handler holds on */
    void (*on_abort)(xHttpResponse *res, void *arg);
    void *on_abort_arg;
    uint64_t body_len;                /* streamed body bytes so far, for the log */
    bool finished;                    /* counted and logged (core/finished.h) */
    bool own_server;                  /* the handler set a Server field: the server's is left out */
    const xHttpSessionStats *session; /* set by a session the exchange became, else NULL */
    bool length_declared;             /* xHttpResponseSetLength: framed by declared_length */
    uint64_t declared_length;
    void (*on_drain)(xHttpResponse *res, void *arg); /* armed by xHttpResponseOnDrain, else NULL */
    void *on_drain_arg;
    size_t drain_low;
};

struct xHttpExchange {
    xHttpRequest req;
    xHttpResponse res;
    const xRouter *router;
    xRouteMemo *route_memo; /* the worker's (context.h), or NULL: none */
    bool routed;            /* route and match hold the routing, done once */
    xRouteResult route;
    xRouteMatch match;
    size_t param_at[XROUTER_MAX_PARAMS]; /* where each parameter sits in req.path */
    const xHttpExchangeOps *ops;
    void *proto;        /* the protocol's per-request owner */
    xHttpField *fields; /* room for conf->max_headers parsed fields */
    size_t fields_cap;
    bool streams_body; /* a streaming route: the body goes to reader */
    bool body_paused;
    bool body_ended; /* the reader had its last piece */
    xHttpBodyReader reader;
    void *reader_arg;
    xHttpBodyTaker taker; /* set with the reader (xHttpExchangeReadBodyTaking), or NULL */
    xHttpFilter *filter;  /* the worker's response filter, or NULL: none for this response */
    void *filter_state;   /* the filter's, while it transforms a streamed body */
    xHttpTunnel tunnel;   /* an extended CONNECT's, when the protocol carries one */
    xBuffer log_fields;   /* xHttpResponseLogField's: "key\0value\0" pairs */
    xHttpExchange *next_free;
};

/** The exchange a handler's response belongs to (its second member). */
static inline xHttpExchange *xHttpExchangeOfResponse(xHttpResponse *res) {
    return (xHttpExchange *)((char *)res - offsetof(xHttpExchange, res));
}

/** Calls the armed drain callback (disarming it) once the response's
 *  pending output is down to its low-water mark; protocols call it where
 *  their output moves. */
static inline void xHttpExchangeCheckDrain(xHttpExchange *ex) {
    xHttpResponse *res = &ex->res;
    if (!res->on_drain || ex->ops->pending(ex) > res->drain_low) return;
    void (*fn)(xHttpResponse *, void *) = res->on_drain;
    res->on_drain = NULL;
    fn(res, res->on_drain_arg);
}

/** Takes a reset exchange from ctx's pool (or malloc). NULL when out of memory. */
xHttpExchange *xHttpExchangeAcquire(xHttpContext *ctx);

/** Gives ex room for conf->max_headers request fields (kept while pooled).
 *  Apart from Acquire, so a protocol that routes at the head holds no field
 *  array while the body arrives. False when out of memory. */
bool xHttpExchangeReserveFields(xHttpContext *ctx, xHttpExchange *ex);

/** Returns an exchange to ctx's pool. */
void xHttpExchangeRelease(xHttpContext *ctx, xHttpExchange *ex);

/** Frees every pooled exchange. */
void xHttpExchangePoolDestroy(xHttpContext *ctx);

/** Routes the request (its method and path set) unless it already was; the
 *  result stays with the exchange, so a protocol that must know the route at
 *  the head (to stream a body, or refuse it) and dispatch later routes once. */
xRouteResult xHttpExchangeRoute(xHttpExchange *ex);

/** A route a protocol keeps for the next requests of the same method and path
 *  (HTTP/2's shared heads): found, without parameters, of one router. */
typedef struct xHttpKeptRoute {
    const xRouter *router; /* NULL: none kept */
    void *handler, *arg;
} xHttpKeptRoute;

/** Routes ex (xHttpExchangeRoute) and keeps its route in kept where it can be
 *  given again: found, without parameters (their views would be ex's). */
void xHttpExchangeRouteAndKeep(xHttpExchange *ex, xHttpKeptRoute *kept);

/** Routes ex by kept, which a request of the same method and path left, so the
 *  router is not searched again; false (ex unrouted) when kept is of another
 *  router or holds none. */
bool xHttpExchangeRouteByKept(xHttpExchange *ex, const xHttpKeptRoute *kept);

/** Routes the request of a shared head (HTTP/2's and HTTP/3's: one decoded head
 *  for every request whose field block is byte for byte the same) as its first
 *  request was routed, which routes it and keeps the route for the rest: the
 *  same method and path lead to the same route. Nothing when ex is routed. */
static inline void xHttpExchangeRouteAsKept(xHttpExchange *ex, xHttpKeptRoute *kept) {
    if (ex->routed || xHttpExchangeRouteByKept(ex, kept)) return;
    xHttpExchangeRouteAndKeep(ex, kept);
}

/** True when the request leads to a streaming route (routing it if need be). */
bool xHttpExchangeStreams(xHttpExchange *ex);

/** Calls the route's handler, or answers 404/405 itself; routes first if
 *  the protocol has not. */
void xHttpExchangeDispatch(xHttpExchange *ex);

/** True when a streaming route's reader takes pieces now. */
static inline bool xHttpExchangeWantsBody(const xHttpExchange *ex) {
    return ex->reader && !ex->body_paused && !ex->body_ended && !ex->res.aborted;
}

/** The connection the streamed response's next body bytes may be spliced
 *  to, as the ops' splice_sink says; XERR_INVALID also where a filter
 *  (compression) may transform the body or its length was not declared
 *  (xHttpResponseSetLength), and XERR_STATE once the response ended. */
xErrno xHttpExchangeSpliceSink(xHttpExchange *ex, xConn **sink);

/** n body bytes were spliced to the sink: they count as written. */
static inline void xHttpExchangeSpliced(xHttpExchange *ex, size_t n) { ex->res.body_len += n; }

/** fn(res, arg) once the response's connection has sent all it holds and
 *  has room again (a splice found it full), from the loop, once. */
void xHttpExchangeOnFlushed(xHttpExchange *ex, void (*fn)(xHttpResponse *res, void *arg), void *arg);

/** xHttpRequestReadBody with a taker (xHttpBodyTaker) beside the reader:
 *  the protocol may let it take the rest of the body off the socket. */
xErrno xHttpExchangeReadBodyTaking(xHttpExchange *ex, xHttpBodyReader reader, xHttpBodyTaker taker,
                                   void *arg);

/** Hands a piece to the reader; the protocol checked xHttpExchangeWantsBody
 *  and keeps the exchange alive (or knows whether it is) after the call. */
void xHttpExchangeDeliverBody(xHttpExchange *ex, const char *data, size_t len, bool end);

/** Marks the response aborted and tells the handler, if it asked to know
 *  and no blocking work of its is under way (its done is told instead).
 *  Returns true when the handler was told: it has let go of the exchange. */
bool xHttpExchangeAbort(xHttpExchange *ex);

/** Answers with status and a short text body, e.g. for 404. */
void xHttpExchangeSendStatus(xHttpExchange *ex, int status);

/** From the handler, while its request is dispatched, or later from the
 *  loop (a proxy once its upstream said 101; HTTP/1.1 takes that from a
 *  route that read the request whole): answers 101 with the response's
 *  fields and hands the connection to `to` after the batch, or at once
 *  outside one (xHttpExchangeOps.switch_protocols). XERR_STATE where the
 *  protocol cannot switch, or the head is sent: the caller answers
 *  otherwise. */
xErrno xHttpExchangeSwitch(xHttpExchange *ex, const xHttpTakeover *to, void *arg);

/** Copies the request's method, target and fields out of the protocol's
 *  buffer, which a new protocol is about to reuse, and re-points the views,
 *  so a session's log line can name its request when it ends. The copy goes
 *  with the exchange's release. XERR_NOMEM: the views are left alone. */
xErrno xHttpExchangeKeepRequest(xHttpExchange *ex);

/** The client req came from, as handlers and logs see it: its connection's
 *  peer (the PROXY header's, where one was read), or behind a proxy the
 *  worker trusts, who X-Forwarded-For names (forwarded.h). */
void xHttpRequestClient(const xHttpRequest *req, xNetAddr *client);

/* xHttpResponseAddHeader for a name and value given as views (not
 * NUL-terminated), checked the same way: how the proxy passes on an
 * upstream's fields without copying each into a string first. */
xErrno xHttpResponseAddField(xHttpResponse *res, xStr name, xStr value);

/* The same for a field a parser has held to those rules already (an
 * HTTP/1.1 upstream's answer, xHttpClientResponse.fields_checked): its bytes
 * are not looked at again; the names the server frames itself are still
 * refused. */
xErrno xHttpResponseAddCheckedField(xHttpResponse *res, xStr name, xStr value);

#endif
