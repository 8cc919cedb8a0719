/* prometheus.c — counters as Prometheus exposition text, and the pieces
 * the other metrics are written with. */
#include "xhttp/observe/prometheus.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    static const char *const protocols[XHTTP_METRIC_PROTOCOLS] = {"http/1.0", "http/1.1", "http/2", "http/3"};
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

static bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

static bool is_name_rest(const char *s) {
    for (; *s; s++)
        if (!is_name_start(*s) && !(*s >= '0' && *s <= '9')) return false;
    return true;
}

bool xPrometheusIsMetricName(const char *name) { return is_name_start(name[0]) && is_name_rest(name + 1); }

bool xPrometheusIsLabelName(const char *name) {
    return is_name_start(name[0]) && is_name_rest(name + 1) && strncmp(name, "__", 2) != 0;
}

/* Appends s with '\\' and line feeds escaped, and '"' too when quoted: the
 * escaping of help text and of label values. */
static xErrno append_escaped(xBuffer *out, xStr s, bool quoted) {
    xErrno err = xBufferReserve(out, s.len * 2);
    if (err != XOK) return err;
    char *p = out->data + out->len;
    for (size_t i = 0; i < s.len; i++) {
        char c = s.data[i];
        if (c == '\\' || c == '\n' || (quoted && c == '"')) {
            *p++ = '\\';
            *p++ = c == '\n' ? 'n' : c;
        } else {
            *p++ = c;
        }
    }
    out->len = (size_t)(p - out->data);
    return XOK;
}

xErrno xPrometheusAppendHeader(xBuffer *out, const char *name, const char *help, const char *type) {
    xErrno err = add(out, "# HELP %s%s", name, *help ? " " : "");
    if (err == XOK) err = append_escaped(out, xStrFromC(help), false);
    if (err == XOK) err = add(out, "\n# TYPE %s %s\n", name, type);
    return err;
}

xErrno xPrometheusAppendLabelValue(xBuffer *out, xStr s) { return append_escaped(out, s, true); }

xErrno xPrometheusAppendDouble(xBuffer *out, double v) {
    if (isnan(v)) return xBufferAppend(out, "NaN", 3);
    if (isinf(v)) return xBufferAppend(out, v > 0 ? "+Inf" : "-Inf", 4);
    /* Whole numbers below 2^53 are exact as integers: 10, not 1e+01. */
    if (v == floor(v) && fabs(v) < 9007199254740992.0) return add(out, "%.0f", v);
    char text[32];
    int n = 0;
    /* The fewest digits that read back as v: 0.1, not 0.10000000000000001. */
    for (int digits = 1; digits <= 17; digits++) {
        n = snprintf(text, sizeof text, "%.*g", digits, v);
        if (strtod(text, NULL) == v) break;
    }
    return xBufferAppend(out, text, (size_t)n);
}

xErrno xPrometheusAppendU64(xBuffer *out, uint64_t v) { return add(out, "%" PRIu64, v); }
