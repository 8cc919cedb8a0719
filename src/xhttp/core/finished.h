/* finished.h — the end of an exchange as counters and the access log see it.
 *
 * Called as a response ends (sent whole, ended, or abandoned by its client),
 * before the protocol may recycle the exchange; once per exchange. Counting
 * is a few plain instructions; the access log is one branch when off. */
#ifndef XHTTP_CORE_FINISHED_H
#define XHTTP_CORE_FINISHED_H

#include "xhttp/core/exchange.h"

/* The counters' protocol index from the request's protocol name. Only
 * HTTP/2 answers a request it could not fill in (protocol still NULL). */
static inline int xHttpProtocolIndex(const char *protocol) {
    if (!protocol || protocol[5] == '2') return XHTTP_METRIC_HTTP2;
    if (protocol[5] == '3') return XHTTP_METRIC_HTTP3;
    return protocol[7] == '0' ? XHTTP_METRIC_HTTP10 : XHTTP_METRIC_HTTP11;
}

/** Counts ex's response, status as it goes out (499: its client left before
 *  the head), and tells the access log. body_len: the body bytes given. */
static inline void xHttpExchangeFinished(xHttpExchange *ex, int status, uint64_t body_len) {
    if (ex->res.finished) return;
    ex->res.finished = true;
    xHttpContext *ctx = xHttpContextOf(ex->req.conn);
    int class = status / 100 - 1;
    if (class > XHTTP_METRIC_STATUS_CLASSES - 1) class = XHTTP_METRIC_STATUS_CLASSES - 1;
    xCounterAdd(&ctx->counters.requests[xHttpProtocolIndex(ex->req.protocol)][class], 1);
    if (ctx->on_finished) ctx->on_finished(ctx->on_finished_arg, ex, status, body_len);
}

#endif
