/* client.h — an HTTP/1.1 client on a worker's loop: upstreams, per-worker
 * keep-alive pools, timeouts, bodies streamed both ways.
 *
 * An xHttpUpstream is one origin (http://host:port), made once and shared by
 * every worker. An xHttpClient belongs to one loop (one worker: make it in
 * the worker's start hook, xHttpServerOnWorker) and keeps, per upstream, a
 * pool of kept-alive connections, opens more up to a limit and queues
 * requests beyond it. A request is started with its head, fed its body with
 * Write/End, and answers through callbacks on the same loop: on_head, then
 * on_body pieces, then on_end with the trailers, or on_error at any point.
 * After on_end or on_error (or Cancel) the request handle is gone.
 *
 * Host names are resolved on the loop (c-ares), never blocking it.
 *
 * https:// upstreams are verified (chain and name) unless told otherwise.
 *
 * HTTP/2 upstreams (conf.protocol) multiplex every request of a worker on
 * one connection, with flow control both ways and trailers, through the
 * same callbacks; after the upstream's GOAWAY, that connection finishes its
 * streams while a new one takes the next requests. A stream the upstream refused (RST_STREAM REFUSED_STREAM,
 * or past a GOAWAY's last stream id) was not processed (RFC 9113 §8.7), so
 * it is sent again whatever its method, up to 3 times, while its body is
 * held whole (up to 64 KiB); then it fails RESET. An answer whose DATA
 * runs past or stops short of its Content-Length, or comes after a head
 * that allows none (HEAD, 204, 304), is BAD_RESPONSE (RFC 9113 §8.1.1). */
#ifndef XHTTP_CLIENT_H
#define XHTTP_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <xbase/errno.h>
#include <xbase/event.h>
#include <xbase/str.h>

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default)

/** One origin, shared by every worker; immutable once made. */
typedef struct xHttpUpstream xHttpUpstream;

/** One loop's client: its pools of connections, one per upstream it used. */
typedef struct xHttpClient xHttpClient;

/** One request in flight, from xHttpClientStart to its on_end or on_error. */
typedef struct xHttpClientRequest xHttpClientRequest;

/** Why a request failed; each timeout has its own. */
typedef enum xHttpClientError {
    XHTTP_CLIENT_REFUSED = 1,        /**< the connection could not be made (refused, unreachable) */
    XHTTP_CLIENT_CONNECT_TIMEOUT,    /**< no connection within connect_timeout_ms */
    XHTTP_CLIENT_SEND_TIMEOUT,       /**< the upstream took none of the request for send_timeout_ms */
    XHTTP_CLIENT_FIRST_BYTE_TIMEOUT, /**< no response byte within first_byte_timeout_ms of the request */
    XHTTP_CLIENT_IDLE_TIMEOUT,       /**< the response stalled for idle_timeout_ms */
    XHTTP_CLIENT_TOTAL_TIMEOUT,      /**< the whole exchange took over total_timeout_ms */
    XHTTP_CLIENT_RESET,              /**< the connection closed or reset before the response ended */
    XHTTP_CLIENT_BAD_RESPONSE,       /**< the upstream sent what is not a valid HTTP/1.1 response */
    XHTTP_CLIENT_NO_MEMORY,          /**< an allocation failed */
    XHTTP_CLIENT_RESOLVE,            /**< the upstream's name did not resolve (no such name, no answer) */
    XHTTP_CLIENT_TLS,                /**< the TLS handshake failed (the certificate did not verify, ...) */
} xHttpClientError;

/** The error in words ("connect timeout"). */
const char *xHttpClientErrorString(xHttpClientError error);

/** True for the errors that are timeouts (a proxy answers them 504). */
static inline bool xHttpClientErrorIsTimeout(xHttpClientError error) {
    return error >= XHTTP_CLIENT_CONNECT_TIMEOUT && error <= XHTTP_CLIENT_TOTAL_TIMEOUT;
}

/** What an upstream is spoken to in. */
typedef enum xHttpUpstreamProtocol {
    XHTTP_UPSTREAM_HTTP1 = 0, /**< HTTP/1.1, a pool of connections, one request on each at a time */
    XHTTP_UPSTREAM_HTTP2,     /**< HTTP/2: h2c by prior knowledge on http://, h2 by ALPN on https://;
                                   one connection per worker carries every request as a stream */
} xHttpUpstreamProtocol;

/** An upstream's settings; start from xHttpUpstreamConfInit. Counts are per
 *  worker (per xHttpClient); a timeout of 0 is none. */
typedef struct xHttpUpstreamConf {
    size_t struct_size;
    uint32_t connect_timeout_ms;    /**< 5 s */
    uint32_t send_timeout_ms;       /**< 30 s: the socket took nothing of the request */
    uint32_t first_byte_timeout_ms; /**< 60 s: from the request's last byte queued to the response's first */
    uint32_t idle_timeout_ms;       /**< 60 s: between two reads of a response */
    uint32_t total_timeout_ms;      /**< 0: from xHttpClientStart to the response's end */
    uint32_t keepalive_ms;          /**< 30 s: an idle pooled connection is closed after this */
    unsigned max_idle;              /**< 32 idle connections kept */
    unsigned max_conns;             /**< 256 connections open (idle, busy and connecting) */
    unsigned max_queue;             /**< 4096 requests waiting for a connection; beyond, Start fails */
    size_t max_head_size;           /**< 32 KiB: a larger response head is BAD_RESPONSE */
    unsigned max_fields;            /**< 100 response fields (and trailers) */
    /** Name resolution (a host that is not an address literal), on the
     *  worker's loop with c-ares: A and AAAA, /etc/hosts first. */
    const char *resolvers;        /**< NULL: /etc/resolv.conf's; else "ip[:port],..." (copied) */
    uint32_t resolve_interval_ms; /**< 0: the answer's TTL (at least 1 s); how long addresses are used
                                       before a new connection has them looked up again */
    uint32_t resolve_timeout_ms;  /**< 5 s: one try of a lookup (two tries, then the server's next) */
    /** TLS (an https:// upstream): OpenSSL's client, TLS 1.2 or 1.3, ALPN
     *  http/1.1. The certificate must chain to a trusted CA and name the
     *  host (a DNS name, or the IP address of an address literal); SNI
     *  carries the name. A session the upstream issues is offered by the
     *  pool's next connections (resumption). */
    const char *tls_ca_file;        /**< NULL: the system's store; else a PEM file of trusted CAs (read at
                                         xHttpUpstreamCreate) */
    const char *tls_server_name;    /**< NULL: the URL's host; else the name checked and sent as SNI */
    xHttpUpstreamProtocol protocol; /**< XHTTP_UPSTREAM_HTTP1 */
    bool tls_verify;                /**< true. false accepts any certificate from anyone: UNSAFE, for
                                         tests and trusted networks only (the traffic can be read and
                                         changed by whoever sits on the path) */
} xHttpUpstreamConf;

/** Fills conf with the defaults noted above. */
void xHttpUpstreamConfInit(xHttpUpstreamConf *conf);

/** Makes an upstream from "http://host[:port]" (no path; port 80 by
 *  default). host is an IPv4 or bracketed IPv6 address, or a name: each
 *  client looks it up on its own loop when it first needs a connection, and
 *  again once the addresses are older than resolve_interval_ms (or their
 *  TTL), using the old ones meanwhile. A new connection tries the
 *  addresses in turn, from the last that worked, while connect(2) fails at
 *  once (refused, unreachable). A name that does not resolve fails the
 *  requests waiting for it with XHTTP_CLIENT_RESOLVE; one whose resolver
 *  never answers, with CONNECT_TIMEOUT (the lookup counts as connecting).
 *  "https://host[:port]" (port 443) speaks TLS (the tls_* settings).
 *  conf NULL: the defaults. XERR_INVALID (bad URL, resolvers that are no
 *  list of addresses, or an https:// URL whose CA file cannot be read),
 *  XERR_NOMEM. */
xErrno xHttpUpstreamCreate(const char *url, const xHttpUpstreamConf *conf, xHttpUpstream **out);

/** Frees an upstream once no client uses it any more (after the clients'
 *  destruction). */
void xHttpUpstreamDestroy(xHttpUpstream *upstream);

/** "host:port" as the URL gave it (the port only when given): the Host
 *  field a request to it carries by default. */
const char *xHttpUpstreamAuthority(const xHttpUpstream *upstream);

/** Makes a client on loop; used only from the loop's thread. */
xHttpClient *xHttpClientCreate(xEventLoop *loop);

/** Closes every connection and frees the client. Requests still in flight
 *  are dropped without a callback (cancel them first to be told nothing
 *  either way). */
void xHttpClientDestroy(xHttpClient *client);

/** What the client has done with one upstream on its loop, for tests and
 *  metrics. */
typedef struct xHttpClientStats {
    uint64_t connections_opened; /**< connect(2) calls made */
    uint64_t requests;           /**< requests started */
    uint64_t reused;             /**< requests sent on a kept-alive connection */
    unsigned open, idle, queued; /**< now */
} xHttpClientStats;

/** Fills stats for upstream (zeros when the client has not used it). */
void xHttpClientGetStats(const xHttpClient *client, const xHttpUpstream *upstream, xHttpClientStats *stats);

/** A header field; views into the caller's (request) or the client's
 *  (response) bytes. */
typedef struct xHttpClientField {
    xStr name;
    xStr value;
} xHttpClientField;

/** A response head, valid during on_head only. 1xx heads are read and
 *  skipped (a 101 is BAD_RESPONSE unless the request asked to upgrade). */
typedef struct xHttpClientResponse {
    int status;
    int minor_version; /**< 0 or 1 */
    xStr reason;
    const xHttpClientField *fields;
    size_t num_fields;
    int64_t content_length; /**< -1: not given (chunked, or until the upstream closes) */
    bool has_body;          /**< false for HEAD's answer, 204, 304 and Content-Length: 0 */
    /** Every field's name is a token and its value a field-value (RFC 9110
     *  §5.1, §5.5): an HTTP/1.1 upstream's, which the parser held to that.
     *  false: not known (an HTTP/2 upstream's values may hold control bytes). */
    bool fields_checked;
} xHttpClientResponse;

/** What a request tells its caller, on the client's loop. Exactly one of
 *  on_end and on_error ends a request (after on_head or before it), unless
 *  it is cancelled; the handle is invalid once it returns. */
typedef struct xHttpClientHandlers {
    void (*on_head)(xHttpClientRequest *req, const xHttpClientResponse *res, void *arg);
    /** A piece of the body (de-chunked), valid during the call. */
    void (*on_body)(xHttpClientRequest *req, const char *data, size_t len, void *arg);
    /** The response ended; trailers (a chunked body's) are valid during the call. */
    void (*on_end)(xHttpClientRequest *req, const xHttpClientField *trailers, size_t num_trailers, void *arg);
    /** The request failed; response_started: on_head was called. */
    void (*on_error)(xHttpClientRequest *req, xHttpClientError error, bool response_started, void *arg);
    /** Optional: the request body's queued bytes fell below
     *  XHTTP_CLIENT_BODY_LOW after having reached XHTTP_CLIENT_BODY_HIGH. */
    void (*on_body_wanted)(xHttpClientRequest *req, void *arg);
} xHttpClientHandlers;

/** A writer of the request body should stop once xHttpClientRequestPending
 *  reaches this, and wait for on_body_wanted. */
#define XHTTP_CLIENT_BODY_HIGH (256u << 10)
#define XHTTP_CLIENT_BODY_LOW (64u << 10)

/** A request's head and how its body comes; start from
 *  xHttpClientRequestOptsInit. Everything is copied by xHttpClientStart. */
typedef struct xHttpClientRequestOpts {
    size_t struct_size;
    xStr method;                    /**< "GET" */
    xStr target;                    /**< "/path?query" */
    const xHttpClientField *fields; /**< sent as given; Host is added when absent. The client
                                         writes its own framing: give no Content-Length,
                                         Transfer-Encoding or Connection */
    size_t num_fields;
    int64_t body_length; /**< 0: no body; > 0: exactly that many bytes follow through Write;
                              -1: a body of unknown length, sent chunked */
    /** A kept-alive connection that the upstream closed before any response
     *  byte (it timed the connection out as the request left) is retried
     *  once on a fresh one, if the request is wholly held (up to 64 KiB).
     *  Defaults to true for GET, HEAD, OPTIONS, PUT and DELETE. */
    bool retry_on_stale;
    /** The request asks to switch protocols (a WebSocket handshake: its
     *  fields carry Upgrade; the client adds "Connection: upgrade"; no
     *  body). A 101 comes to on_head and the connection becomes the
     *  request's tunnel: on_body has the upstream's bytes as they come,
     *  Write sends bytes as they are, no timeout but the total runs, and
     *  on_end comes when the upstream closes. Any other answer is read as
     *  usual. */
    bool upgrade;
    const xHttpClientHandlers *handlers;
    void *arg;
    /** Bytes a new connection sends before anything else, TLS included: a
     *  PROXY protocol header saying whom the request is for. A kept-alive
     *  connection is reused only by requests with the same preface (none
     *  with none). Up to XHTTP_CLIENT_PREFACE_MAX bytes, copied. Not to an
     *  HTTP/2 upstream, whose one connection carries every request
     *  (XERR_INVALID). */
    const void *preface;
    size_t preface_len;
    /** How many of fields, from the first, are known to be well-formed
     *  (names tokens, values field-values: RFC 9110 §5.1, §5.5) because a
     *  server's parser checked them so (xHttpRequest fields passed on by a
     *  proxy): they are not checked again. Every other field is. 0: none. */
    size_t num_checked_fields;
} xHttpClientRequestOpts;

/** The longest preface a request may give. */
#define XHTTP_CLIENT_PREFACE_MAX 112

/** Fills opts with GET of "/" with no fields and no body. */
void xHttpClientRequestOptsInit(xHttpClientRequestOpts *opts);

/** Starts a request to upstream on client's loop: on a pooled connection, a
 *  new one, or queued for one. Callbacks never run within this call.
 *  XERR_LIMIT (the queue is full), XERR_INVALID (no handlers, a bad method or
 *  target), XERR_NOMEM. */
xErrno xHttpClientStart(xHttpClient *client, xHttpUpstream *upstream, const xHttpClientRequestOpts *opts,
                        xHttpClientRequest **out);

/** Queues a piece of the request body (copied). XERR_INVALID past the
 *  body_length given, XERR_STATE after End or once the request ended. */
xErrno xHttpClientRequestWrite(xHttpClientRequest *req, const void *data, size_t len);

/** Ends the request body. XERR_INVALID when a body_length was given and
 *  not all of it was written. A request with no body needs no End. */
xErrno xHttpClientRequestEnd(xHttpClientRequest *req);

/** During on_error: more on what failed, in words ("certificate verify
 *  failed: hostname mismatch", "svc.test: Domain name not found"), or "". */
const char *xHttpClientRequestErrorDetail(const xHttpClientRequest *req);

/** Body bytes queued and not yet taken by the upstream's socket. */
size_t xHttpClientRequestPending(const xHttpClientRequest *req);

/** Stops reading the response (its bytes wait in the socket, so the
 *  upstream is held by TCP); Resume reads on. The idle timeout does not
 *  run while paused. */
void xHttpClientRequestPause(xHttpClientRequest *req);
void xHttpClientRequestResume(xHttpClientRequest *req);

/** Drops the request: nothing is called afterwards. Its connection is
 *  closed unless it was idle-able already (a request still queued gives
 *  none up). Safe from within the request's own callbacks. */
void xHttpClientRequestCancel(xHttpClientRequest *req);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif

#endif
