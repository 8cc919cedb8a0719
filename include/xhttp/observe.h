/* xhttp/observe.h — what an xKit HTTP server tells its operator: access logs
 * and metrics, the server's own and the application's.
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
 * Prometheus text format, with the request duration histograms by route
 * (xHttpServerRequestDurations) and the application's own counters, gauges
 * and histograms (xHttpServerAddMetric), each kept per worker the same way.
 *
 * A request's duration runs from the loop turn that read its first bytes (an
 * HTTP/2 request: its HEADERS) to the moment its response ended: its last
 * byte handed to the connection, which may still be sending it (a WebSocket
 * session's: the session's end). Measuring it costs a microsecond clock
 * sample per loop turn and one per request (CLOCK_MONOTONIC through the
 * vDSO), taken only while the access log or the histograms are on. */
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
 *  number ("\u00HH"). The handler's own fields (xHttpResponseLogField) come
 *  last, escaped the same way. The common formats carry no duration: they
 *  have no standard field for one; JSON has it to the microsecond. */
typedef enum xHttpLogFormat {
    /** host - - [time] "METHOD target PROTOCOL" status bytes, then the
     *  handler's fields as key="value" */
    XHTTP_LOG_COMMON,
    /** common, then "referer" "user-agent" ("-" when absent), then the
     *  handler's fields as key="value" */
    XHTTP_LOG_COMBINED,
    /** One object per line: time (RFC 3339), remote_addr, remote_port, method,
     *  target, protocol, status, bytes, duration_ms (whole milliseconds, cut
     *  down), duration_us (microseconds), referer, user_agent, tls (its
     *  version, e.g. "TLSv1.3"); absent values are null. A WebSocket
     *  session's line adds "websocket": {messages_in, messages_out, bytes_in,
     *  bytes_out}, its data messages and frame bytes each way. The handler's
     *  fields follow as string members. */
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

/** Adds key="value" to this request's access log line (both are copied),
 *  from its handler or later, until the response ends. key is 1 to 64 of
 *  [A-Za-z0-9_.-], none of the JSON format's own names (time, remote_addr,
 *  ..., websocket) and not one already added; value is any text, escaped as
 *  the format escapes a client's. A line carries at most 4 KiB of them.
 *  XERR_INVALID for a bad or repeated key, XERR_LIMIT past 4 KiB, XERR_STATE
 *  once the response has ended, XERR_NOMEM. Without an access log the field
 *  is kept and dropped with the request. */
xErrno xHttpResponseLogField(xHttpResponse *res, const char *key, const char *value);

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
    XHTTP_METRIC_HTTP3,
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
 *  xkit_requests_total{protocol="http/1.1",status="2xx"} 42, then the
 *  duration histograms and the application's metrics. path is copied.
 *  Same errors as xHttpServerRoute. */
xErrno xHttpServerMetricsRoute(xHttpServer *server, const char *path);

/** Keeps a histogram of request durations per route and status class on
 *  every worker, served as xkit_request_duration_seconds{route="GET
 *  /users/:id",status="2xx",le="0.001"}: route is the pattern the request
 *  matched, as it was added (a GET route's HEAD requests are its own), or
 *  "unmatched" for one that matched none (404, 405, refused before routing),
 *  so the series stay as few as the routes. Only the pairs seen so far are
 *  written. buckets: num_buckets upper bounds in seconds, increasing, each a
 *  whole number of microseconds from 1 us; NULL for 100 us, 250 us, 500 us,
 *  1, 2.5, 5, 10, 25, 50, 100, 250, 500 ms, 1, 2.5, 5 and 10 s. Before
 *  xHttpServerRun, once; routes added before or after count. XERR_STATE when
 *  running or already on, XERR_INVALID for bad buckets (at most 64),
 *  XERR_NOMEM. With it on, each request costs a clock sample and two
 *  counter adds; off, nothing. */
xErrno xHttpServerRequestDurations(xHttpServer *server, const double *buckets, size_t num_buckets);

/* ---- The application's own metrics ----
 *
 * A metric is registered before the server runs, with its label names and
 * every combination of label values it will use (its series, a fixed set:
 * what keeps /metrics small is knowing them up front), then updated from any
 * worker with no lock: each worker has its own cells (a shard), written only
 * on its thread with a plain load and store, and /metrics sums the shards.
 * A handler takes its request's shard (xHttpRequestMetricShard); code that
 * runs on a worker outside a request (a timer armed on its loop, a posted
 * call) keeps the shard it was given or takes it by worker index
 * (xHttpServerMetricShard).
 *
 * A gauge is per worker too: set and add change the calling worker's cell,
 * and /metrics writes the sum of the workers' values. Gauges that count
 * something each worker holds (requests in flight, queued jobs, open
 * sessions) need nothing more; a value that stands for the whole process (a
 * cache size, a configuration's generation) is set from one worker only, the
 * others left at 0. A single shared atomic would let any thread set it, but
 * would put a locked instruction and a shared cache line on the request path
 * of every worker that adds to it. */

/** A registered metric; the server owns it. */
typedef struct xHttpMetric xHttpMetric;

/** One worker's cells of every metric; written only on that worker's thread. */
typedef struct xHttpMetricShard xHttpMetricShard;

/** The kinds of metric. */
typedef enum xHttpMetricType {
    XHTTP_COUNTER,   /**< a count that only goes up (integer adds) */
    XHTTP_GAUGE,     /**< a value that goes up and down (per worker, summed) */
    XHTTP_HISTOGRAM, /**< observations counted in buckets, with their sum */
} xHttpMetricType;

/** What a metric is. Start from xHttpMetricOptsInit; fields are only ever
 *  added at the end. Everything is copied. */
typedef struct xHttpMetricOpts {
    size_t struct_size;              /**< the caller's sizeof, set by xHttpMetricOptsInit */
    xHttpMetricType type;            /**< XHTTP_COUNTER */
    const char *name;                /**< [a-zA-Z_][a-zA-Z0-9_]*, at most 128 bytes, not
                                          starting "xkit_" (the server's own); a
                                          counter's name ends in "_total" by convention */
    const char *help;                /**< one line of text for # HELP (NULL: none) */
    const char *const *label_names;  /**< num_labels names, [a-zA-Z_][a-zA-Z0-9_]*, not
                                          starting "__", not "le" on a histogram */
    size_t num_labels;               /**< at most 8 (0) */
    const char *const *label_values; /**< num_series rows of num_labels values, each
                                          valid UTF-8, no two rows the same; NULL when
                                          num_labels is 0 */
    size_t num_series;               /**< rows in label_values, at most 4096 (1: the one
                                          series of a metric without labels) */
    const double *buckets;           /**< a histogram's upper bounds, increasing and
                                          finite (+Inf is implicit); NULL for .005, .01,
                                          .025, .05, .1, .25, .5, 1, 2.5, 5 and 10 */
    size_t num_buckets;              /**< at most 64 */
} xHttpMetricOpts;

/** Fills the first size bytes of opts with the defaults noted above; size is
 *  the caller's sizeof. Call xHttpMetricOptsInit instead. */
void xHttpMetricOptsInitSized(xHttpMetricOpts *opts, size_t size);

/** Fills opts with the defaults noted above. */
static inline void xHttpMetricOptsInit(xHttpMetricOpts *opts) {
    xHttpMetricOptsInitSized(opts, sizeof *opts);
}

/** Registers a metric, before xHttpServerRun; /metrics writes it after the
 *  server's own, in the order added, with its series in the order given.
 *  *metric is valid until xHttpServerDestroy. XERR_STATE when running,
 *  XERR_INVALID for a name, label or bucket the Prometheus data model or the
 *  rules above refuse (the reason in xHttpServerLastError), XERR_EXISTS for
 *  a name already used (a histogram's _bucket, _sum and _count included),
 *  XERR_LIMIT past a limit above, XERR_NOMEM. */
xErrno xHttpServerAddMetric(xHttpServer *server, const xHttpMetricOpts *opts, xHttpMetric **metric);

/** The shard of the worker req runs on, for its handler and anything else on
 *  that worker's thread (valid until xHttpServerDestroy). */
xHttpMetricShard *xHttpRequestMetricShard(const xHttpRequest *req);

/** Worker i's shard (0 <= i < xHttpServerWorkerCount), or NULL; write to it
 *  only on that worker's thread. */
xHttpMetricShard *xHttpServerMetricShard(xHttpServer *server, int worker);

/* Updates: series is the row of label values (0 without labels). A NULL
 * shard, a series out of range or a metric of another type is ignored. On
 * the shard's worker thread only. */

/** Adds n to a counter. */
void xHttpCounterAdd(xHttpMetricShard *shard, const xHttpMetric *metric, size_t series, uint64_t n);

/** Sets this worker's part of a gauge to value. */
void xHttpGaugeSet(xHttpMetricShard *shard, const xHttpMetric *metric, size_t series, double value);

/** Adds delta (may be negative) to this worker's part of a gauge. */
void xHttpGaugeAdd(xHttpMetricShard *shard, const xHttpMetric *metric, size_t series, double delta);

/** Counts value in the first bucket whose bound is at least value and adds
 *  it to the sum; NaN is ignored. */
void xHttpHistogramObserve(xHttpMetricShard *shard, const xHttpMetric *metric, size_t series, double value);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
