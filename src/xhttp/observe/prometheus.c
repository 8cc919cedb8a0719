/* prometheus.c — counters as Prometheus exposition text. */
#include "xhttp/observe/prometheus.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

/* Appends one printf-formatted piece. */
static xErrno add(xBuffer *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static xErrno add(xBuffer *out, const char *fmt, ...) {
    char line[512]; /* every piece here is shorter */
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    return xBufferAppend(out, line, n < (int)sizeof line ? (size_t)n : sizeof line - 1);
}

/* One metric without labels. */
static xErrno metric(xBuffer *out, const char *name, const char *type, const char *help, uint64_t value) {
    return add(out, "# HELP %s %s\n# TYPE %s %s\n%s %" PRIu64 "\n", name, help, name, type, name, value);
}

xErrno xPrometheusFormat(const xHttpMetrics *m, xBuffer *out) {
    static const char *const protocols[XHTTP_METRIC_PROTOCOLS] = {"http/1.0", "http/1.1", "http/2"};
    xErrno err = add(out, "# HELP xkit_requests_total Responses ended, by protocol and status class.\n"
                          "# TYPE xkit_requests_total counter\n");
    for (int p = 0; err == XOK && p < XHTTP_METRIC_PROTOCOLS; p++)
        for (int c = 0; err == XOK && c < XHTTP_METRIC_STATUS_CLASSES; c++)
            err = add(out, "xkit_requests_total{protocol=\"%s\",status=\"%dxx\"} %" PRIu64 "\n", protocols[p],
                      c + 1, m->requests[p][c]);
    if (err == XOK)
        err = metric(out, "xkit_received_bytes_total", "counter", "Bytes received, after TLS decryption.",
                     m->bytes_in);
    if (err == XOK)
        err = metric(out, "xkit_sent_bytes_total", "counter", "Bytes sent, before TLS encryption.",
                     m->bytes_out);
    if (err == XOK)
        err = metric(out, "xkit_connections_open", "gauge", "Connections open now.", m->connections_open);
    if (err == XOK)
        err = metric(out, "xkit_connections_accepted_total", "counter", "Connections accepted and served.",
                     m->connections_accepted);
    if (err == XOK)
        err = add(out,
                  "# HELP xkit_tls_handshakes_total TLS handshakes, by result.\n"
                  "# TYPE xkit_tls_handshakes_total counter\n"
                  "xkit_tls_handshakes_total{result=\"ok\"} %" PRIu64 "\n"
                  "xkit_tls_handshakes_total{result=\"failed\"} %" PRIu64 "\n",
                  m->tls_handshakes, m->tls_failures);
    if (err == XOK)
        err = metric(out, "xkit_http2_streams_total", "counter", "HTTP/2 request streams opened.",
                     m->http2_streams);
    return err;
}
