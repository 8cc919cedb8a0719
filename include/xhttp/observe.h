/* xhttp/observe.h — what an xKit HTTP server tells its operator: access logs
 * and metrics.
 *
 * The access log writes one line per request, as each response ends, in the
 * common or combined log format or as JSON; a WebSocket session's line is
 * written when the session ends (status 101 over HTTP/1.1, 200 over HTTP/2,
 * its duration, and its frame bytes sent as its bytes). Each worker appends its lines to
 * a buffer of its own and writes them in batches (when the buffer fills, or
 * a timer after flush_ms), never on its own request's path, and at the
 * server's destroy; a graceful stop loses nothing. Without an access log the
 * request path pays one predictable branch.
 *
 * Counters are always kept, per worker, with no lock: requests by protocol
 * and status class, bytes, connections, TLS handshakes and HTTP/2 streams.
 * xHttpServerMetrics sums them; xHttpServerMetricsRoute serves them in the
 * Prometheus text format. */
#ifndef XHTTP_OBSERVE_H
#define XHTTP_OBSERVE_H

#include <stddef.h>
#include <stdint.h>

#include <xbase/errno.h>
#include <xhttp/server.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What this header declares is libxkit.so's API: exported, where the rest is hidden. */
#pragma GCC visibility push(default)

/** How an access log line looks. Text fields come as the client sent them,
 *  escaped so that no client can end a field or a line: in the common and
 *  combined formats '"', '\' and bytes below 0x20 or from 0x7f are written
 *  "\xHH", as nginx does; in JSON strings are escaped per RFC 8259 and a byte
 *  that is not part of valid UTF-8 is written as the code point of the same
 *  number ("\u00HH"). */
typedef enum xHttpLogFormat {
    /** host - - [time] "METHOD target PROTOCOL" status bytes */
    XHTTP_LOG_COMMON,
    /** common, then "referer" "user-agent" ("-" when absent) */
    XHTTP_LOG_COMBINED,
    /** One object per line: time (RFC 3339), remote_addr, remote_port, method,
     *  target, protocol, status, bytes, duration_ms, referer, user_agent, tls
     *  (its version, e.g. "TLSv1.3"); absent values are null. A WebSocket
     *  session's line adds "websocket": {messages_in, messages_out, bytes_in,
     *  bytes_out}, its data messages and frame bytes each way. */
    XHTTP_LOG_JSON,
} xHttpLogFormat;

/** Access log settings. Start from xHttpAccessLogOptsInit; fields are only
 *  ever added at the end. */
typedef struct xHttpAccessLogOpts {
    size_t struct_size;    /**< the caller's sizeof, set by xHttpAccessLogOptsInit */
    const char *path;      /**< file to append to (created 0644; copied), or NULL
                                to write to fd */
    int fd;                /**< with path NULL: where lines go (e.g. 1 for stdout);
                                the caller's, left open, and kept open by the caller
                                until xHttpServerDestroy (-1) */
    xHttpLogFormat format; /**< XHTTP_LOG_COMBINED */
    size_t buffer_size;    /**< a worker writes once it holds this many bytes (64 KiB) */
    uint32_t flush_ms;     /**< and at the latest this long after a line (100 ms) */
} xHttpAccessLogOpts;

/** Fills the first size bytes of opts with the defaults noted above; size is
 *  the caller's sizeof. Call xHttpAccessLogOptsInit instead. */
void xHttpAccessLogOptsInitSized(xHttpAccessLogOpts *opts, size_t size);

/** Fills opts with the defaults noted above. */
static inline void xHttpAccessLogOptsInit(xHttpAccessLogOpts *opts) {
    xHttpAccessLogOptsInitSized(opts, sizeof *opts);
}

/** Turns the access log on, before xHttpServerRun; opts is copied. With a
 *  path, each worker opens it (O_APPEND) now: XERR_SYS when it cannot, with
 *  the reason in xHttpServerLastError. XERR_STATE when running or already on,
 *  XERR_INVALID for neither path nor fd. */
xErrno xHttpServerAccessLog(xHttpServer *server, const xHttpAccessLogOpts *opts);

/** Reopens the access log's path, for log rotation: each worker writes what
 *  it holds to the old file, then opens the path anew. With
 *  conf.handle_signals, SIGUSR1 does this. Callable from any thread (not from
 *  a signal handler); the workers reopen on their own threads soon after.
 *  XOK without an access log or when it writes to a caller's fd. */
xErrno xHttpServerReopenLogs(xHttpServer *server);

/** Protocols and status classes, the indexes of xHttpMetrics.requests. */
enum {
    XHTTP_METRIC_HTTP10,
    XHTTP_METRIC_HTTP11,
    XHTTP_METRIC_HTTP2,
    XHTTP_METRIC_PROTOCOLS,
    XHTTP_METRIC_STATUS_CLASSES = 5, /**< 1xx … 5xx at 0 … 4 (600-999 count as 5xx) */
};

/** The server's counters, summed over its workers. Each is exact; the sum is
 *  not taken at one instant, so totals may be a few requests apart. Fields
 *  are only ever added at the end. */
typedef struct xHttpMetrics {
    size_t struct_size; /**< the caller's sizeof, set by xHttpServerMetrics */
    /** Responses ended, by protocol and status class; a client gone before the
     *  head was sent counts as 499 (4xx), as nginx logs it. */
    uint64_t requests[XHTTP_METRIC_PROTOCOLS][XHTTP_METRIC_STATUS_CLASSES];
    uint64_t bytes_in;             /**< bytes received (after TLS decryption) */
    uint64_t bytes_out;            /**< bytes sent (before TLS encryption) */
    uint64_t connections_open;     /**< connections open now */
    uint64_t connections_accepted; /**< connections accepted and served */
    uint64_t tls_handshakes;       /**< TLS handshakes completed */
    uint64_t tls_failures;         /**< TLS handshakes failed or timed out */
    uint64_t http2_streams;        /**< HTTP/2 request streams opened */
} xHttpMetrics;

/** Fills the first size bytes of out (the caller's sizeof). Call
 *  xHttpServerMetrics instead. */
void xHttpServerMetricsSized(const xHttpServer *server, xHttpMetrics *out, size_t size);

/** Fills out with the sums of every worker's counters; from any thread. */
static inline void xHttpServerMetrics(const xHttpServer *server, xHttpMetrics *out) {
    xHttpServerMetricsSized(server, out, sizeof *out);
}

/** Serves the counters at GET path ("/metrics") in the Prometheus text
 *  exposition format (version 0.0.4), e.g.
 *  xkit_requests_total{protocol="http/1.1",status="2xx"} 42. path is copied.
 *  Same errors as xHttpServerRoute. */
xErrno xHttpServerMetricsRoute(xHttpServer *server, const char *path);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
