/* websocket.c — the handshake and WebSocket connections (websocket.h). */
#include "xhttp/websocket/websocket.h"

#include <errno.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xbase/mem/sized.h"
#include "xbase/text/base64.h"
#include "xhttp/core/context.h"
#include "xhttp/core/tokens.h"
#include "xhttp/websocket/deflate.h"
#include "xhttp/websocket/frame.h"

#define XWS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
#define XWS_KEY_LEN 24 /* base64 of the 16 random bytes (RFC 6455 §4.1) */
#define XWS_MAX_PROTOCOL 64
#define XWS_MAX_EXTENSION 160

struct xWebSocket {
    xConn *conn;
    const xWsRoute *route;
    xWsReader reader;
    xWsDeflate *deflate; /* permessage-deflate, when negotiated */
    void *user;
    uint64_t last_input_ms;
    bool in_batch;      /* reading: sends are flushed once the batch is done */
    bool waiting_flush; /* reading stopped until the client takes our output */
    bool reading_done;  /* a close was received or the client broke the protocol */
    bool close_sent;
    bool told; /* on_close ran */
    bool ping_sent;
    char protocol[XWS_MAX_PROTOCOL];
};

/* ---- Settings ---- */

void xWebSocketConfInitSized(xWebSocketConf *conf, size_t size) {
    xWebSocketConf defaults = {
        .max_message_size = 1u << 20,
        .max_pending = 256u << 10,
        .idle_timeout_ms = 60000,
        .close_timeout_ms = 5000,
        .deflate_level = 1,
        .deflate_max_window_bits = 15,
        .deflate_mem_level = 8,
    };
    xSizedInit(conf, size, &defaults, sizeof defaults);
}

xWsRoute *xWsRouteCreate(const xWebSocketConf *conf, void *arg, xErrno *err) {
    *err = XERR_INVALID;
    if (!conf) return NULL;
    xWsRoute *route = calloc(1, sizeof *route);
    if (!route) {
        *err = XERR_NOMEM;
        return NULL;
    }
    xWebSocketConfInit(&route->conf);
    xSizedAdopt(&route->conf, conf, sizeof route->conf);
    route->arg = arg;
    const xWebSocketConf *c = &route->conf;
    if (!c->on_message || c->max_message_size == 0 || c->max_pending == 0 || c->deflate_max_window_bits < 9 ||
        c->deflate_max_window_bits > 15 || c->deflate_mem_level < 1 || c->deflate_mem_level > 9 ||
        c->deflate_level < 0 || c->deflate_level > 9) {
        free(route);
        return NULL;
    }
    return route;
}

void xWsRouteFree(xWsRoute *route) { free(route); }

/* ---- The handshake ---- */

/* 0 when req is a valid RFC 6455 opening handshake, else the status to
 * answer it with; *key gets the client's key. */
static int check_handshake(const xHttpRequest *req, xStr *key) {
    xStr upgrade, connection, version;
    if (!xHttpRequestHeader(req, "upgrade", &upgrade) || !xHttpListHasToken(upgrade, "websocket")) return 426;
    if (!xHttpRequestHeader(req, "connection", &connection) || !xHttpListHasToken(connection, "upgrade"))
        return 400;
    if (!xHttpRequestHeader(req, "sec-websocket-version", &version) || !xStrEqualsC(version, "13"))
        return 426;
    unsigned char raw[18];
    if (!xHttpRequestHeader(req, "sec-websocket-key", key) || key->len != XWS_KEY_LEN ||
        xBase64Decode(key->data, key->len, raw, sizeof raw) != 16)
        return 400;
    return 0;
}

void xWsRouteHandler(xHttpRequest *req, xHttpResponse *res, void *arg) {
    xStr key;
    int status = check_handshake(req, &key);
    xStr version;
    if (status == 0) status = 400; /* a handshake with a body, or not on HTTP/1.1 */
    if (status == 426) {
        /* Upgrade is HTTP/1.1's alone: an HTTP/2 response may not carry it (RFC 9113 §8.2.2). */
        if (strcmp(xHttpRequestProtocol(req), "HTTP/2") != 0)
            xHttpResponseAddHeader(res, "Upgrade", "websocket");
        if (xHttpRequestHeader(req, "sec-websocket-version", &version))
            xHttpResponseAddHeader(res, "Sec-WebSocket-Version", "13");
    }
    static const char upgrade_required[] = "This resource speaks WebSocket (RFC 6455) only.\n";
    static const char bad[] = "Bad WebSocket handshake.\n";
    xHttpResponseSetStatus(res, status);
    xHttpResponseAddHeader(res, "Content-Type", "text/plain");
    if (status == 426)
        xHttpResponseSend(res, upgrade_required, sizeof upgrade_required - 1);
    else
        xHttpResponseSend(res, bad, sizeof bad - 1);
}

static void accept_key(xStr key, char out[28]) {
    char text[XWS_KEY_LEN + sizeof XWS_GUID];
    memcpy(text, key.data, XWS_KEY_LEN);
    memcpy(text + XWS_KEY_LEN, XWS_GUID, sizeof XWS_GUID - 1);
    unsigned char digest[SHA_DIGEST_LENGTH];
    SHA1((const unsigned char *)text, XWS_KEY_LEN + sizeof XWS_GUID - 1, digest);
    xBase64Encode(digest, sizeof digest, out);
}

static void tell(xWebSocket *ws, uint16_t code, xStr reason);

static xWebSocket *ws_create(xConn *conn, const xWsRoute *route) {
    xWebSocket *ws = calloc(1, sizeof *ws);
    if (!ws) return NULL;
    ws->conn = conn;
    ws->route = route;
    ws->reader.max_message = route->conf.max_message_size;
    return ws;
}

static void ws_free(xWebSocket *ws) {
    xWsReaderFree(&ws->reader);
    xWsDeflateDestroy(ws->deflate);
    free(ws);
}

/* permessage-deflate, if enabled and offered: the response's extension line
 * in ext ("" when none). False on allocation failure. */
static bool negotiate_deflate(xWebSocket *ws, const xHttpRequest *req, char *ext, size_t cap) {
    ext[0] = '\0';
    const xWebSocketConf *conf = &ws->route->conf;
    if (!conf->deflate) return true;
    xWsDeflateParams params;
    for (size_t i = 0, n = xHttpRequestHeaderCount(req); i < n; i++) {
        xStr name, value;
        if (!xHttpRequestHeaderAt(req, i, &name, &value) ||
            !xHttpNameEquals(name, "sec-websocket-extensions") ||
            !xWsDeflateNegotiate(value, conf->deflate_max_window_bits, &params, ext, cap))
            continue;
        ws->deflate = xWsDeflateCreate(&params, conf->deflate_level, conf->deflate_mem_level);
        ws->reader.allow_compressed = true;
        return ws->deflate != NULL;
    }
    return true;
}

static void queue_refusal(xConn *conn, int status) {
    char line[96];
    int n = snprintf(line, sizeof line, "HTTP/1.1 %d \r\nContent-Length: 0\r\n\r\n", status);
    xConnWrite(conn, line, (size_t)n);
}

/* The 101 with what was agreed. */
static bool queue_switch(xConn *conn, xStr key, const char *protocol, const char *ext) {
    char accept[28];
    accept_key(key, accept);
    char head[512];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     "Sec-WebSocket-Accept: %.28s\r\n%s%s%s%s%s%s\r\n",
                     accept, *protocol ? "Sec-WebSocket-Protocol: " : "", protocol, *protocol ? "\r\n" : "",
                     *ext ? "Sec-WebSocket-Extensions: " : "", ext, *ext ? "\r\n" : "");
    return n > 0 && (size_t)n < sizeof head && xConnWrite(conn, head, (size_t)n) == XOK;
}

xWsOfferResult xWsOffer(xConn *conn, const xWsRoute *route, const xHttpRequest *req, xWebSocket **out) {
    xStr key;
    if (check_handshake(req, &key) != 0) return XWS_DECLINED;
    xWebSocket *ws = ws_create(conn, route);
    if (!ws) return XWS_DECLINED;
    xWebSocketOpen open = {.req = req};
    if (!xHttpRequestHeader(req, "sec-websocket-protocol", &open.protocols)) open.protocols = (xStr){"", 0};
    int status = route->conf.on_open ? route->conf.on_open(ws, &open, route->arg) : 0;
    bool accepted = status == 0;
    if (status == 0 && open.protocol) {
        size_t n = strlen(open.protocol);
        if (n >= XWS_MAX_PROTOCOL || !xHttpListHasToken(open.protocols, open.protocol))
            status = 500; /* on_open picked something the client did not offer */
        else
            memcpy(ws->protocol, open.protocol, n + 1);
    }
    char ext[XWS_MAX_EXTENSION];
    if (status == 0 && !negotiate_deflate(ws, req, ext, sizeof ext)) status = 500;
    if (status == 0 && !queue_switch(conn, key, ws->protocol, ext)) status = 500;
    if (status != 0) {
        if (status < 400 || status > 599) status = 500;
        if (accepted) tell(ws, XWS_CLOSE_ABNORMAL, (xStr){"", 0}); /* on_open said yes: it hears the end */
        ws_free(ws);
        queue_refusal(conn, status);
        return XWS_REFUSED;
    }
    *out = ws;
    return XWS_ACCEPTED;
}

/* ---- Frames out ---- */

static void tell(xWebSocket *ws, uint16_t code, xStr reason) {
    if (ws->told) return;
    ws->told = true;
    if (ws->route->conf.on_close) ws->route->conf.on_close(ws, code, reason, ws->route->arg);
}

static void flush_unless_reading(xWebSocket *ws) {
    if (!ws->in_batch) xConnFlush(ws->conn);
}

/* Queues one frame whose payload is copied. */
static xErrno put_frame(xWebSocket *ws, unsigned opcode, bool rsv1, const void *data, size_t len) {
    uint8_t head[XWS_MAX_HEADER];
    size_t h = xWsWriteHeader(head, opcode, true, rsv1, len);
    char *p = xConnReserve(ws->conn, h + len);
    if (!p) return XERR_NOMEM;
    memcpy(p, head, h);
    if (len) memcpy(p + h, data, len);
    xConnCommit(ws->conn, h + len);
    return XOK;
}

static xErrno put_close(xWebSocket *ws, uint16_t code, const char *reason, size_t reason_len) {
    char payload[XWS_MAX_CONTROL] = {0};
    size_t n = 0;
    if (code != XWS_CLOSE_NO_STATUS) {
        payload[0] = (char)(code >> 8);
        payload[1] = (char)code;
        if (reason_len) memcpy(payload + 2, reason, reason_len);
        n = 2 + reason_len;
    }
    ws->close_sent = true;
    return put_frame(ws, XWS_OP_CLOSE, false, payload, n);
}

static xErrno send_message(xWebSocket *ws, unsigned opcode, const void *data, size_t len,
                           void (*release)(void *), void *release_arg) {
    xErrno err = XOK;
    bool rsv1 = false;
    if (ws->conn->closed || ws->close_sent) {
        err = XERR_CLOSED;
    } else if (ws->deflate && len > 0) { /* an empty message is sent as it is (RFC 7692 §6) */
        const char *zipped;
        size_t zipped_len;
        if (xWsDeflateCompress(ws->deflate, data, len, &zipped, &zipped_len)) {
            data = zipped;
            len = zipped_len;
            rsv1 = true;
        } else {
            err = XERR_NOMEM;
        }
    }
    if (err == XOK && release && !rsv1) {
        uint8_t head[XWS_MAX_HEADER];
        size_t h = xWsWriteHeader(head, opcode, true, false, len);
        err = xConnWrite(ws->conn, head, h);
        if (err == XOK) {
            err = xConnWriteRef(ws->conn, data, len, release, release_arg);
            release = NULL; /* the queue releases it now, even on error */
        }
    } else if (err == XOK) {
        err = put_frame(ws, opcode, rsv1, data, len);
    }
    if (release) release(release_arg);
    if (err == XOK) flush_unless_reading(ws);
    return err;
}

xErrno xWebSocketSendText(xWebSocket *ws, const char *data, size_t len) {
    return send_message(ws, XWS_OP_TEXT, data, len, NULL, NULL);
}

xErrno xWebSocketSendBinary(xWebSocket *ws, const void *data, size_t len) {
    return send_message(ws, XWS_OP_BINARY, data, len, NULL, NULL);
}

xErrno xWebSocketSendRef(xWebSocket *ws, const void *data, size_t len, bool binary, void (*release)(void *),
                         void *release_arg) {
    return send_message(ws, binary ? XWS_OP_BINARY : XWS_OP_TEXT, data, len, release, release_arg);
}

xErrno xWebSocketPing(xWebSocket *ws, const void *data, size_t len) {
    if (len > XWS_MAX_CONTROL) return XERR_INVALID;
    if (ws->conn->closed || ws->close_sent) return XERR_CLOSED;
    xErrno err = put_frame(ws, XWS_OP_PING, false, data, len);
    if (err == XOK) flush_unless_reading(ws);
    return err;
}

/* Sends our close and waits close_timeout_ms for the client's. */
static xErrno begin_close(xWebSocket *ws, uint16_t code, const char *reason, size_t reason_len) {
    if (ws->conn->closed || ws->close_sent) return XERR_CLOSED;
    xErrno err = put_close(ws, code, reason, reason_len);
    if (!ws->conn->write_blocked) xConnSetTimeout(ws->conn, ws->route->conf.close_timeout_ms);
    flush_unless_reading(ws);
    return err;
}

xErrno xWebSocketClose(xWebSocket *ws, uint16_t code, const char *reason) {
    size_t n = reason ? strlen(reason) : 0;
    if (n > XWS_MAX_CONTROL - 2 || !xWsCloseCodeValid(code) || code == 1015 || !xUtf8Valid(reason, n))
        return XERR_INVALID;
    return begin_close(ws, code, reason, n);
}

size_t xWebSocketPending(const xWebSocket *ws) { return ws->conn->closed ? 0 : xConnPending(ws->conn); }

const char *xWebSocketProtocol(const xWebSocket *ws) { return ws->protocol; }

void xWebSocketSetUserData(xWebSocket *ws, void *data) { ws->user = data; }

void *xWebSocketUserData(const xWebSocket *ws) { return ws->user; }

xEventLoop *xWebSocketLoop(const xWebSocket *ws) { return ws->conn->net->loop; }

void xWebSocketRetain(xWebSocket *ws) { xConnRetain(ws->conn); }

void xWebSocketRelease(xWebSocket *ws) { xConnRelease(ws->conn); }

/* ---- Frames in ---- */

/* The client broke the protocol (or we could not go on): our close goes
 * out, and the connection ends once it is sent. */
static void fail(xWebSocket *ws, uint16_t code) {
    ws->reading_done = true;
    if (!ws->close_sent) put_close(ws, code, NULL, 0);
    tell(ws, code, (xStr){"", 0});
    xConnCloseAfterFlush(ws->conn);
}

static void on_message(xWebSocket *ws, xWsEvent *ev) {
    if (ws->close_sent) return; /* closing: data is no longer delivered */
    char *data = ev->data;
    size_t len = ev->len;
    if (ev->compressed) {
        int code = xWsDeflateInflate(ws->deflate, data, len, ws->route->conf.max_message_size, &data, &len);
        if (code) {
            fail(ws, (uint16_t)code);
            return;
        }
        if (!ev->binary && !xUtf8Valid(data, len)) {
            fail(ws, XWS_CLOSE_BAD_DATA);
            return;
        }
    }
    ws->route->conf.on_message(ws, data ? data : "", len, ev->binary, ws->route->arg);
}

static void on_close_frame(xWebSocket *ws, xWsEvent *ev) {
    ws->reading_done = true;
    xStr reason = ev->len > 2 ? (xStr){ev->data + 2, ev->len - 2} : (xStr){"", 0};
    if (!ws->close_sent) put_close(ws, ev->code, ev->data + 2 * (ev->len > 2), ev->len > 2 ? ev->len - 2 : 0);
    tell(ws, ev->code, reason);
    xConnCloseAfterFlush(ws->conn);
}

static void handle(xWebSocket *ws, xWsEvent *ev) {
    switch (ev->type) {
    case XWS_EV_MESSAGE: on_message(ws, ev); break;
    case XWS_EV_PING:
        if (!ws->close_sent && put_frame(ws, XWS_OP_PONG, false, ev->data, ev->len) != XOK) {
            fail(ws, XWS_CLOSE_INTERNAL);
            break;
        }
        if (ws->route->conf.on_ping) ws->route->conf.on_ping(ws, ev->data, ev->len, ws->route->arg);
        break;
    case XWS_EV_PONG: break;
    case XWS_EV_CLOSE: on_close_frame(ws, ev); break;
    case XWS_EV_FAIL: fail(ws, ev->code); break;
    case XWS_EV_NEED_MORE: break;
    }
}

static bool may_read(const xWebSocket *ws) {
    return !ws->conn->closed && !ws->conn->close_after_flush && !ws->reading_done && !ws->waiting_flush;
}

/* Takes every complete event from conn->in; false once reading must stop. */
static bool drain_input(xWebSocket *ws) {
    xConn *conn = ws->conn;
    xBuffer *in = &conn->in;
    size_t pos = 0;
    while (may_read(ws) && pos < in->len) {
        xWsEvent ev;
        size_t n = xWsReaderNext(&ws->reader, in->data + pos, in->len - pos, &ev);
        pos += n;
        if (ev.type == XWS_EV_NEED_MORE && n == 0) break;
        handle(ws, &ev);
        if (!conn->closed && xConnPending(conn) > ws->route->conf.max_pending) {
            xConnFlush(conn); /* backpressure: read no more until the client takes some */
            if (conn->write_blocked) ws->waiting_flush = true;
        }
    }
    if (conn->closed) return false;
    if (pos) {
        memmove(in->data, in->data + pos, in->len - pos);
        in->len -= pos;
    }
    return may_read(ws);
}

/* Reads what the socket has; false when nothing more comes now. */
static bool fill(xWebSocket *ws) {
    xConn *conn = ws->conn;
    xBuffer *in = &conn->in;
    if (!conn->readable) return false;
    if (!in->data && xBufferPoolAcquire(&conn->net->buffers, in) != XOK) {
        fail(ws, XWS_CLOSE_INTERNAL);
        return false;
    }
    ssize_t n = xConnRecv(conn, in->data + in->len, in->cap - in->len);
    if (n > 0) {
        in->len += (size_t)n;
        ws->last_input_ms = xEventLoopNowMs(conn->net->loop);
        ws->ping_sent = false;
        return true;
    }
    if (n < 0 && errno == EINTR) return true;
    if (n < 0 && errno == EAGAIN) return false;
    tell(ws, XWS_CLOSE_ABNORMAL, (xStr){"", 0}); /* gone without a close */
    xConnClose(conn);
    return false;
}

static void arm_timer(xWebSocket *ws);

static void process(xWebSocket *ws) {
    xConn *conn = ws->conn;
    xConnRetain(conn);
    ws->in_batch = true;
    while (drain_input(ws) && fill(ws)) {
    }
    ws->in_batch = false;
    if (!conn->closed) {
        if (xConnPending(conn)) xConnFlush(conn);
        if (!conn->closed && conn->in.len == 0 && conn->in.data)
            xBufferPoolRelease(&conn->net->buffers, &conn->in);
    }
    xConnRelease(conn);
}

/* ---- Timers ---- */

/* The next check of an open connection: a ping or the idle limit, counted
 * from the last bytes the client sent. */
static void arm_timer(xWebSocket *ws) {
    xConn *conn = ws->conn;
    const xWebSocketConf *conf = &ws->route->conf;
    if (conn->closed || conn->lingering || conn->write_blocked || ws->close_sent) return;
    uint32_t next = conf->idle_timeout_ms;
    if (conf->ping_interval_ms && !ws->ping_sent && (!next || conf->ping_interval_ms < next))
        next = conf->ping_interval_ms;
    uint64_t idle = xEventLoopNowMs(conn->net->loop) - ws->last_input_ms;
    xConnSetTimeout(conn, !next ? 0 : next > idle ? (uint32_t)(next - idle) : 1);
}

static void on_timeout(xConn *conn) {
    xWebSocket *ws = conn->proto_state;
    const xWebSocketConf *conf = &ws->route->conf;
    if (ws->close_sent) { /* the client never answered our close */
        tell(ws, XWS_CLOSE_ABNORMAL, (xStr){"", 0});
        xConnClose(conn);
        return;
    }
    uint64_t idle = xEventLoopNowMs(conn->net->loop) - ws->last_input_ms;
    if (conf->idle_timeout_ms && idle >= conf->idle_timeout_ms) {
        begin_close(ws, XWS_CLOSE_GOING_AWAY, "idle", 4);
        return;
    }
    if (conf->ping_interval_ms && !ws->ping_sent && idle >= conf->ping_interval_ms) {
        ws->ping_sent = true;
        if (put_frame(ws, XWS_OP_PING, false, NULL, 0) == XOK) xConnFlush(conn);
    }
    arm_timer(ws);
}

/* ---- Connection events ---- */

static void on_readable(xConn *conn) { process(conn->proto_state); }

static void on_flushed(xConn *conn) {
    xWebSocket *ws = conn->proto_state;
    if (ws->close_sent)
        xConnSetTimeout(conn, ws->route->conf.close_timeout_ms);
    else
        arm_timer(ws);
    if (!ws->waiting_flush) return;
    ws->waiting_flush = false;
    process(ws);
}

static void on_drain(xConn *conn) { begin_close(conn->proto_state, XWS_CLOSE_GOING_AWAY, "", 0); }

static void on_close(xConn *conn) { tell(conn->proto_state, XWS_CLOSE_ABNORMAL, (xStr){"", 0}); }

static void on_free(xConn *conn) { ws_free(conn->proto_state); }

static const xConnProtocol ws_protocol = {on_readable, on_flushed, on_timeout, on_drain, on_close, on_free};

void xWsStart(xConn *conn, xWebSocket *ws, size_t start) {
    xBuffer *in = &conn->in;
    if (start) {
        memmove(in->data, in->data + start, in->len - start);
        in->len -= start;
    }
    ws->last_input_ms = xEventLoopNowMs(conn->net->loop);
    xConnSetProtocol(conn, &ws_protocol, ws);
    if (!conn->closed) xConnFlush(conn);
    arm_timer(ws);
}

void xWsDrop(xWebSocket *ws) {
    tell(ws, XWS_CLOSE_ABNORMAL, (xStr){"", 0});
    ws_free(ws);
}
