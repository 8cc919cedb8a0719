/* over_tunnel.c — a WebSocket session's transport over an exchange kept open
 * as a tunnel: an RFC 8441 extended CONNECT, which HTTP/2 carries on a
 * stream (xHttpTunnel), reached as a streaming route.
 *
 * The client's DATA reaches the stream's body reader, which appends it to
 * ws->in; frames gather in ws->out and go to the stream as one response
 * write. Backpressure pauses the body, so the stream's window stays closed
 * until the tunnel's output is framed (xHttpTunnel.drained). The exchange is
 * counted and logged by the protocol when the stream ends, with what the
 * session carried (ex->res.session). */
#include "xhttp/websocket/session.h"

static xBuffer *stream_input(xWebSocket *ws) { return ws->ex ? &ws->in : NULL; }

/* The body reader pushes input; there is nothing to pull. */
static bool stream_fill(xWebSocket *ws) { return false; }

static char *stream_reserve(xWebSocket *ws, size_t n) {
    return xBufferReserve(&ws->out, n) == XOK ? ws->out.data + ws->out.len : NULL;
}

static void stream_commit(xWebSocket *ws, size_t n) { ws->out.len += n; }

/* A stream's response write copies anyway: the reference goes at once. */
static xErrno stream_write_ref(xWebSocket *ws, const void *data, size_t len, void (*release)(void *),
                               void *arg) {
    xErrno err = xBufferAppend(&ws->out, data, len);
    release(arg);
    return err;
}

static void stream_flush(xWebSocket *ws) {
    if (!ws->ex || !ws->out.len) return;
    size_t n = ws->out.len;
    ws->out.len = 0;
    xHttpResponseWrite(&ws->ex->res, ws->out.data, n);
}

static void stream_drained(xHttpExchange *ex, void *arg) {
    xWebSocket *ws = arg;
    xWsOutputTaken(ws);
    if (ws->ex && !ws->waiting_flush) xHttpRequestResumeBody(&ws->ex->req);
}

static bool stream_hold(xWebSocket *ws) {
    stream_flush(ws);
    if (!ws->ex || !ws->ex->tunnel.pending(ws->ex)) return false;
    ws->ex->tunnel.drained = stream_drained;
    xHttpRequestPauseBody(&ws->ex->req);
    return true;
}

static size_t stream_pending(const xWebSocket *ws) {
    return ws->out.len + (ws->ex ? ws->ex->tunnel.pending(ws->ex) : 0);
}

static bool stream_open(const xWebSocket *ws) { return ws->ex != NULL; }

static void stream_set_timeout(xWebSocket *ws, uint32_t ms) {
    if (ms)
        xTimerStart(ws->loop, &ws->timer, ms);
    else
        xTimerStop(ws->loop, &ws->timer);
}

static void stream_retain(xWebSocket *ws) { ws->refs++; }

static void stream_release(xWebSocket *ws) {
    if (--ws->refs == 0) xWsFree(ws);
}

/* The stream is no longer ours: the exchange goes back to the protocol. */
static void stream_let_go(xWebSocket *ws) {
    ws->ex = NULL;
    xTimerStop(ws->loop, &ws->timer);
    stream_release(ws);
}

/* What is queued goes out, then the end of the stream: RFC 8441 §5.2's
 * orderly end. */
static void stream_finish(xWebSocket *ws) {
    xHttpExchange *ex = ws->ex;
    if (!ex) return;
    stream_retain(ws);
    ex->tunnel.drained = ex->tunnel.stopping = NULL;
    stream_flush(ws);
    if (ws->ex) { /* not reset while the last frames went */
        stream_let_go(ws);
        xHttpResponseEnd(&ex->res);
    }
    stream_release(ws);
}

const xWsTransport xWsTunnelTransport = {
    .input = stream_input,
    .fill = stream_fill,
    .reserve = stream_reserve,
    .commit = stream_commit,
    .write_ref = stream_write_ref,
    .flush = stream_flush,
    .hold = stream_hold,
    .pending = stream_pending,
    .open = stream_open,
    .set_timeout = stream_set_timeout,
    .finish = stream_finish,
    .abort = stream_finish,
    .retain = stream_retain,
    .release = stream_release,
};

static void stream_timeout(xEventLoop *loop, xTimer *timer, void *arg) {
    xWebSocket *ws = arg;
    stream_retain(ws);
    xWsTimeout(ws);
    stream_release(ws);
}

/* The client's DATA: read as a connection's bytes are. Its end without a
 * close frame is an abnormal end. */
static void stream_data(xHttpRequest *req, xHttpResponse *res, const char *data, size_t len, bool end,
                        void *arg) {
    xWebSocket *ws = arg;
    if (!ws->ex) return;
    stream_retain(ws);
    if (len) xWsHeard(ws);
    if (len && ws->state != XWS_DONE && xBufferAppend(&ws->in, data, len) != XOK)
        xWsFail(ws, XWS_CLOSE_INTERNAL);
    xWsProcess(ws);
    if (end && ws->ex) {
        xWsTell(ws, XWS_CLOSE_ABNORMAL, (xStr){"", 0});
        stream_finish(ws);
    }
    stream_release(ws);
}

/* RST_STREAM, or the connection went: the exchange is no longer ours. */
static void stream_aborted(xHttpResponse *res, void *arg) {
    xWebSocket *ws = arg;
    stream_retain(ws);
    stream_let_go(ws);
    xWsTell(ws, XWS_CLOSE_ABNORMAL, (xStr){"", 0});
    stream_release(ws);
}

static void stream_stopping(xHttpExchange *ex, void *arg) { xWsBeginClose(arg, XWS_CLOSE_GOING_AWAY, "", 0); }

bool xWsTunnelStart(xWebSocket *ws, xHttpExchange *ex) {
    ws->ex = ex;
    ws->refs = 1; /* the stream's, until the tunnel ends */
    xTimerInit(&ws->timer, stream_timeout, ws);
    ex->res.session = &ws->stats;
    ex->tunnel.stopping = stream_stopping;
    ex->tunnel.arg = ws;
    xHttpResponseOnAbort(&ex->res, stream_aborted, ws);
    xWsHeard(ws);
    stream_retain(ws);
    bool started = xHttpResponseWrite(&ex->res, NULL, 0) == XOK &&
                   xHttpRequestReadBody(&ex->req, stream_data, ws) == XOK;
    if (!started && ws->ex) {
        xWsTell(ws, XWS_CLOSE_ABNORMAL, (xStr){"", 0});
        stream_finish(ws);
    } else if (started) {
        xWsArmTimer(ws);
    }
    stream_release(ws);
    return started;
}
