/* over_connection.c — a WebSocket session's transport over an HTTP/1.1
 * connection taken over after its 101: frames are read from and written to
 * the connection itself, and the session ends with it.
 *
 * The request that switched stays with the session, so the session is
 * counted and logged as that request's exchange when it ends: status 101,
 * its duration, and what went each way. */
#include "xhttp/websocket/session.h"

#include <errno.h>
#include <string.h>

#include "xhttp/core/context.h"
#include "xhttp/core/finished.h"

static xBuffer *conn_input(xWebSocket *ws) { return xConnOpen(ws->conn) ? &ws->conn->in : NULL; }

/* Nothing more comes now: a read buffer with nothing left in it goes back to
 * the pool, so an idle session holds none, and the next read, of whichever
 * session, takes the block the last one left in the cache. */
static bool conn_wait(xConn *conn) {
    if (conn->in.len == 0) xBufferPoolRelease(&conn->net->buffers, &conn->in);
    return false;
}

/* Reads what the socket has; false when nothing more comes now. */
static bool conn_fill(xWebSocket *ws) {
    xConn *conn = ws->conn;
    xBuffer *in = &conn->in;
    if (!conn->readable) return conn_wait(conn);
    if (!in->data && xBufferPoolAcquire(&conn->net->buffers, in) != XOK) {
        xWsFail(ws, XWS_CLOSE_INTERNAL);
        return false;
    }
    ssize_t n = xConnRecv(conn, in->data + in->len, in->cap - in->len);
    if (n > 0) {
        in->len += (size_t)n;
        xWsHeard(ws);
        return true;
    }
    if (n < 0 && errno == EINTR) return true;
    if (n < 0 && errno == EAGAIN) return conn_wait(conn);
    xWsTell(ws, XWS_CLOSE_ABNORMAL, (xStr){"", 0}); /* gone without a close */
    xConnClose(conn);
    return false;
}

static char *conn_reserve(xWebSocket *ws, size_t n) { return xConnReserve(ws->conn, n); }

static void conn_commit(xWebSocket *ws, size_t n) { xConnCommit(ws->conn, n); }

static xErrno conn_write_ref(xWebSocket *ws, const void *data, size_t len, void (*release)(void *),
                             void *arg) {
    return xConnWriteRef(ws->conn, data, len, release, arg);
}

static void conn_flush(xWebSocket *ws) { xConnFlushSoon(ws->conn); }

static bool conn_hold(xWebSocket *ws) {
    xConnFlush(ws->conn);
    return !xConnClosed(ws->conn) && xConnWriteBlocked(ws->conn); /* on_flushed resumes */
}

static size_t conn_pending(const xWebSocket *ws) { return xConnPending(ws->conn); }

/* No connection yet while on_open decides. */
static bool conn_open(const xWebSocket *ws) { return ws->conn && xConnOpen(ws->conn); }

/* While output is blocked the connection's send timeout rules. */
static void conn_set_timeout(xWebSocket *ws, uint32_t ms) {
    if (!xConnWriteBlocked(ws->conn) && !xConnLingering(ws->conn)) xConnSetTimeout(ws->conn, ms);
}

static void conn_finish(xWebSocket *ws) { xConnCloseAfterFlush(ws->conn); }

static void conn_abort(xWebSocket *ws) { xConnClose(ws->conn); }

static void conn_retain(xWebSocket *ws) { xConnRetain(ws->conn); }

static void conn_release(xWebSocket *ws) { xConnRelease(ws->conn); }

const xWsTransport xWsConnectionTransport = {
    .input = conn_input,
    .fill = conn_fill,
    .reserve = conn_reserve,
    .commit = conn_commit,
    .write_ref = conn_write_ref,
    .flush = conn_flush,
    .hold = conn_hold,
    .pending = conn_pending,
    .open = conn_open,
    .set_timeout = conn_set_timeout,
    .finish = conn_finish,
    .abort = conn_abort,
    .retain = conn_retain,
    .release = conn_release,
};

/* ---- The connection's protocol ---- */

static void on_readable(xConn *conn) { xWsProcess(conn->proto_state); }

static void on_flushed(xConn *conn) { xWsOutputTaken(conn->proto_state); }

static void on_timeout(xConn *conn) { xWsTimeout(conn->proto_state); }

static void on_drain(xConn *conn) { xWsBeginClose(conn->proto_state, XWS_CLOSE_GOING_AWAY, "", 0); }

/* The session is over: on_close hears of it (if no close did), and the
 * request that opened it is counted and logged. */
static void on_close(xConn *conn) {
    xWebSocket *ws = conn->proto_state;
    xWsTell(ws, XWS_CLOSE_ABNORMAL, (xStr){"", 0});
    if (!ws->ex) return;
    xHttpExchangeFinished(ws->ex, 101, ws->stats.bytes_out);
    xHttpExchangeRelease(xHttpContextOf(conn), ws->ex);
    ws->ex = NULL;
}

static void on_free(xConn *conn) { xWsFree(conn->proto_state); }

static const xConnProtocol session_protocol = {
    .on_readable = on_readable,
    .on_flushed = on_flushed,
    .on_timeout = on_timeout,
    .on_drain = on_drain,
    .on_close = on_close,
    .on_free = on_free,
};

/* ---- Taking over ---- */

/* After the batch that sent the 101: conn->in[start,) holds the client's
 * first frames. The request's views point into conn->in, which frames now
 * fill: where a log will name the request at the end, they move out first. */
static bool take_over(xConn *conn, xHttpExchange *ex, size_t start, void *arg) {
    xWebSocket *ws = arg;
    xHttpContext *ctx = xHttpContextOf(conn);
    ws->conn = conn;
    ws->ex = ex;
    ex->res.session = &ws->stats;
    if (ctx->on_finished && xHttpExchangeKeepRequest(ex) != XOK) {
        /* Logged now, without what the session will carry. */
        ex->res.session = NULL;
        xHttpExchangeFinished(ex, 101, 0);
        xHttpExchangeRelease(ctx, ex);
        ws->ex = NULL;
    }
    xBuffer *in = &conn->in;
    if (start) {
        memmove(in->data, in->data + start, in->len - start);
        in->len -= start;
    }
    xWsHeard(ws);
    xConnSetProtocol(conn, &session_protocol, ws);
    if (!xConnClosed(conn)) xConnFlush(conn);
    xWsArmTimer(ws);
    return true;
}

/* The 101 never went (the connection closed first). */
static void drop(void *arg) {
    xWebSocket *ws = arg;
    xWsTell(ws, XWS_CLOSE_ABNORMAL, (xStr){"", 0});
    xWsFree(ws);
}

const xHttpTakeover xWsConnectionTakeover = {.start = take_over, .drop = drop};
