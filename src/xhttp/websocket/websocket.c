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
#include "xhttp/core/exchange.h"
#include "xhttp/core/tokens.h"
#include "xhttp/websocket/deflate.h"
#include "xhttp/websocket/frame.h"

#define XWS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
#define XWS_KEY_LEN 24 /* base64 of the 16 random bytes (RFC 6455 §4.1) */
#define XWS_MAX_PROTOCOL 64
#define XWS_MAX_EXTENSION 160

/* What carries a WebSocket's frames: an HTTP/1.1 connection it took over,
 * or an HTTP/2 stream (RFC 8441). The frame logic above them calls only
 * these; each transport is a section at the end of this file. */
typedef struct xWsTransport {
    xBuffer *(*input)(xWebSocket *ws);          /* bytes received and not yet read; NULL once closed */
    bool (*fill)(xWebSocket *ws);               /* reads more into input; false: nothing more now */
    char *(*reserve)(xWebSocket *ws, size_t n); /* room to queue n bytes, or NULL */
    void (*commit)(xWebSocket *ws, size_t n);
    /* Queues data by reference; release(arg) runs once it is out, or at once. */
    xErrno (*write_ref)(xWebSocket *ws, const void *data, size_t len, void (*release)(void *), void *arg);
    void (*flush)(xWebSocket *ws);
    /* Flushes; true when output still waits for the peer: reading pauses
     * until the transport calls output_taken. */
    bool (*hold)(xWebSocket *ws);
    size_t (*pending)(const xWebSocket *ws);          /* queued bytes the peer has not taken */
    bool (*open)(const xWebSocket *ws);               /* frames may still come and go */
    void (*set_timeout)(xWebSocket *ws, uint32_t ms); /* calls timeout(ws) then; 0: none */
    void (*finish)(xWebSocket *ws);                   /* ends once what is queued is out */
    void (*abort)(xWebSocket *ws);                    /* ends now */
    void (*retain)(xWebSocket *ws);
    void (*release)(xWebSocket *ws);
} xWsTransport;

struct xWebSocket {
    const xWsTransport *tr;
    xConn *conn;       /* HTTP/1.1: the connection taken over */
    xHttpExchange *ex; /* HTTP/2: the stream's exchange, until the tunnel ends */
    xBuffer in, out;   /* HTTP/2: bytes from the stream not yet read; frames not yet written */
    xTimer timer;      /* HTTP/2: the idle, ping and close timer */
    unsigned refs;     /* HTTP/2: the stream's and xWebSocketRetain's */
    xEventLoop *loop;
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

static void timeout(xWebSocket *ws);

static xWebSocket *ws_create(const xWsTransport *tr, xEventLoop *loop, const xWsRoute *route) {
    xWebSocket *ws = calloc(1, sizeof *ws);
    if (!ws) return NULL;
    ws->tr = tr;
    ws->loop = loop;
    ws->route = route;
    ws->reader.max_message = route->conf.max_message_size;
    return ws;
}

static void ws_free(xWebSocket *ws) {
    xBufferFree(&ws->in);
    xBufferFree(&ws->out);
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

/* Asks on_open and negotiates what both sides agree on (subprotocol,
 * permessage-deflate, into ext): 0, or the status to refuse with. A refused
 * ws is freed here, its on_close run if on_open had said yes. */
static int open_ws(xWebSocket *ws, const xHttpRequest *req, char *ext, size_t cap) {
    const xWsRoute *route = ws->route;
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
    if (status == 0 && !negotiate_deflate(ws, req, ext, cap)) status = 500;
    if (status == 0) return 0;
    if (status < 400 || status > 599) status = 500;
    if (accepted) tell(ws, XWS_CLOSE_ABNORMAL, (xStr){"", 0}); /* on_open said yes: it hears the end */
    ws_free(ws);
    return status;
}

static const xWsTransport conn_transport;

xWsOfferResult xWsOffer(xConn *conn, const xWsRoute *route, const xHttpRequest *req, xWebSocket **out) {
    xStr key;
    if (check_handshake(req, &key) != 0) return XWS_DECLINED;
    xWebSocket *ws = ws_create(&conn_transport, conn->net->loop, route);
    if (!ws) return XWS_DECLINED;
    ws->conn = conn;
    char ext[XWS_MAX_EXTENSION];
    int status = open_ws(ws, req, ext, sizeof ext);
    if (status == 0 && !queue_switch(conn, key, ws->protocol, ext)) {
        tell(ws, XWS_CLOSE_ABNORMAL, (xStr){"", 0});
        ws_free(ws);
        status = 500;
    }
    if (status != 0) {
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
    if (!ws->in_batch) ws->tr->flush(ws);
}

/* Queues one frame whose payload is copied. */
static xErrno put_frame(xWebSocket *ws, unsigned opcode, bool rsv1, const void *data, size_t len) {
    uint8_t head[XWS_MAX_HEADER];
    size_t h = xWsWriteHeader(head, opcode, true, rsv1, len);
    char *p = ws->tr->reserve(ws, h + len);
    if (!p) return XERR_NOMEM;
    memcpy(p, head, h);
    if (len) memcpy(p + h, data, len);
    ws->tr->commit(ws, h + len);
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
    if (!ws->tr->open(ws) || ws->close_sent) {
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
        char *p = ws->tr->reserve(ws, h);
        err = p ? XOK : XERR_NOMEM;
        if (p) {
            memcpy(p, head, h);
            ws->tr->commit(ws, h);
            err = ws->tr->write_ref(ws, data, len, release, release_arg);
            release = NULL; /* the transport releases it now, even on error */
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
    if (!ws->tr->open(ws) || ws->close_sent) return XERR_CLOSED;
    xErrno err = put_frame(ws, XWS_OP_PING, false, data, len);
    if (err == XOK) flush_unless_reading(ws);
    return err;
}

/* Sends our close and waits close_timeout_ms for the client's. */
static xErrno begin_close(xWebSocket *ws, uint16_t code, const char *reason, size_t reason_len) {
    if (!ws->tr->open(ws) || ws->close_sent) return XERR_CLOSED;
    xErrno err = put_close(ws, code, reason, reason_len);
    ws->tr->set_timeout(ws, ws->route->conf.close_timeout_ms);
    flush_unless_reading(ws);
    return err;
}

xErrno xWebSocketClose(xWebSocket *ws, uint16_t code, const char *reason) {
    size_t n = reason ? strlen(reason) : 0;
    if (n > XWS_MAX_CONTROL - 2 || !xWsCloseCodeValid(code) || code == 1015 || !xUtf8Valid(reason, n))
        return XERR_INVALID;
    return begin_close(ws, code, reason, n);
}

size_t xWebSocketPending(const xWebSocket *ws) { return ws->tr->open(ws) ? ws->tr->pending(ws) : 0; }

const char *xWebSocketProtocol(const xWebSocket *ws) { return ws->protocol; }

void xWebSocketSetUserData(xWebSocket *ws, void *data) { ws->user = data; }

void *xWebSocketUserData(const xWebSocket *ws) { return ws->user; }

xEventLoop *xWebSocketLoop(const xWebSocket *ws) { return ws->loop; }

void xWebSocketRetain(xWebSocket *ws) { ws->tr->retain(ws); }

void xWebSocketRelease(xWebSocket *ws) { ws->tr->release(ws); }

/* ---- Frames in ---- */

/* The client broke the protocol (or we could not go on): our close goes
 * out, and the connection ends once it is sent. */
static void fail(xWebSocket *ws, uint16_t code) {
    ws->reading_done = true;
    if (!ws->close_sent) put_close(ws, code, NULL, 0);
    tell(ws, code, (xStr){"", 0});
    ws->tr->finish(ws);
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
    ws->tr->finish(ws);
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
    return ws->tr->open(ws) && !ws->reading_done && !ws->waiting_flush;
}

/* Takes every complete event from the transport's input; false once
 * reading must stop. */
static bool drain_input(xWebSocket *ws) {
    xBuffer *in = ws->tr->input(ws);
    size_t pos = 0;
    while (in && may_read(ws) && pos < in->len) {
        xWsEvent ev;
        size_t n = xWsReaderNext(&ws->reader, in->data + pos, in->len - pos, &ev);
        pos += n;
        if (ev.type == XWS_EV_NEED_MORE && n == 0) break;
        handle(ws, &ev);
        /* Backpressure: read no more until the client takes some. */
        if (ws->tr->open(ws) && ws->tr->pending(ws) > ws->route->conf.max_pending && ws->tr->hold(ws))
            ws->waiting_flush = true;
    }
    if (!(in = ws->tr->input(ws))) return false;
    if (pos) {
        memmove(in->data, in->data + pos, in->len - pos);
        in->len -= pos;
    }
    return may_read(ws);
}

static void process(xWebSocket *ws) {
    ws->tr->retain(ws);
    ws->in_batch = true;
    while (drain_input(ws) && ws->tr->fill(ws)) {
    }
    ws->in_batch = false;
    if (ws->tr->open(ws)) ws->tr->flush(ws);
    ws->tr->release(ws);
}

/* ---- Timers ---- */

/* The next check of an open connection: a ping or the idle limit, counted
 * from the last bytes the client sent. */
static void arm_timer(xWebSocket *ws) {
    const xWebSocketConf *conf = &ws->route->conf;
    if (!ws->tr->open(ws) || ws->close_sent) return;
    uint32_t next = conf->idle_timeout_ms;
    if (conf->ping_interval_ms && !ws->ping_sent && (!next || conf->ping_interval_ms < next))
        next = conf->ping_interval_ms;
    uint64_t idle = xEventLoopNowMs(ws->loop) - ws->last_input_ms;
    ws->tr->set_timeout(ws, !next ? 0 : next > idle ? (uint32_t)(next - idle) : 1);
}

static void timeout(xWebSocket *ws) {
    const xWebSocketConf *conf = &ws->route->conf;
    if (ws->close_sent) { /* the client never answered our close */
        tell(ws, XWS_CLOSE_ABNORMAL, (xStr){"", 0});
        ws->tr->abort(ws);
        return;
    }
    uint64_t idle = xEventLoopNowMs(ws->loop) - ws->last_input_ms;
    if (conf->idle_timeout_ms && idle >= conf->idle_timeout_ms) {
        begin_close(ws, XWS_CLOSE_GOING_AWAY, "idle", 4);
        return;
    }
    if (conf->ping_interval_ms && !ws->ping_sent && idle >= conf->ping_interval_ms) {
        ws->ping_sent = true;
        if (put_frame(ws, XWS_OP_PING, false, NULL, 0) == XOK) ws->tr->flush(ws);
    }
    arm_timer(ws);
}

/* The client took what was queued: timers restart from here, and reading
 * resumes if backpressure had stopped it. */
static void output_taken(xWebSocket *ws) {
    if (ws->close_sent)
        ws->tr->set_timeout(ws, ws->route->conf.close_timeout_ms);
    else
        arm_timer(ws);
    if (!ws->waiting_flush) return;
    ws->waiting_flush = false;
    process(ws);
}

/* The client's bytes came in: the idle count starts again. */
static void heard(xWebSocket *ws) {
    ws->last_input_ms = xEventLoopNowMs(ws->loop);
    ws->ping_sent = false;
}

/* ---- Transport: an HTTP/1.1 connection, taken over after its 101 ---- */

static xBuffer *conn_input(xWebSocket *ws) { return ws->conn->closed ? NULL : &ws->conn->in; }

/* Reads what the socket has; false when nothing more comes now. */
static bool conn_fill(xWebSocket *ws) {
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
        heard(ws);
        return true;
    }
    if (n < 0 && errno == EINTR) return true;
    if (n < 0 && errno == EAGAIN) {
        if (in->len == 0) xBufferPoolRelease(&conn->net->buffers, in);
        return false;
    }
    tell(ws, XWS_CLOSE_ABNORMAL, (xStr){"", 0}); /* gone without a close */
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
    return !ws->conn->closed && ws->conn->write_blocked; /* on_flushed resumes */
}

static size_t conn_pending(const xWebSocket *ws) { return xConnPending(ws->conn); }

static bool conn_open(const xWebSocket *ws) { return !ws->conn->closed && !ws->conn->close_after_flush; }

/* While output is blocked the connection's send timeout rules. */
static void conn_set_timeout(xWebSocket *ws, uint32_t ms) {
    if (!ws->conn->write_blocked && !ws->conn->lingering) xConnSetTimeout(ws->conn, ms);
}

static void conn_finish(xWebSocket *ws) { xConnCloseAfterFlush(ws->conn); }

static void conn_abort(xWebSocket *ws) { xConnClose(ws->conn); }

static void conn_retain(xWebSocket *ws) { xConnRetain(ws->conn); }

static void conn_release(xWebSocket *ws) { xConnRelease(ws->conn); }

static const xWsTransport conn_transport = {
    conn_input,   conn_fill, conn_reserve,     conn_commit, conn_write_ref, conn_flush,  conn_hold,
    conn_pending, conn_open, conn_set_timeout, conn_finish, conn_abort,     conn_retain, conn_release,
};

static void on_readable(xConn *conn) { process(conn->proto_state); }

static void on_flushed(xConn *conn) { output_taken(conn->proto_state); }

static void on_timeout(xConn *conn) { timeout(conn->proto_state); }

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
    heard(ws);
    xConnSetProtocol(conn, &ws_protocol, ws);
    if (!conn->closed) xConnFlush(conn);
    arm_timer(ws);
}

void xWsDrop(xWebSocket *ws) {
    tell(ws, XWS_CLOSE_ABNORMAL, (xStr){"", 0});
    ws_free(ws);
}

/* ---- Transport: an HTTP/2 stream (RFC 8441), through its exchange ---- */

/* The client's DATA reaches the stream's body reader, which appends it to
 * ws->in; frames gather in ws->out and go to the stream as one response
 * write. Backpressure pauses the body, so the stream's window stays
 * closed until the tunnel's output is framed (xHttpTunnel.drained). */

static xBuffer *stream_input(xWebSocket *ws) { return &ws->in; }

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
    output_taken(ws);
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
    if (--ws->refs == 0) ws_free(ws);
}

/* The stream is no longer ours: the exchange goes back to HTTP/2. */
static void stream_let_go(xWebSocket *ws) {
    ws->ex = NULL;
    xTimerStop(ws->loop, &ws->timer);
    stream_release(ws);
}

/* What is queued goes out, then END_STREAM: RFC 8441 §5.2's orderly end. */
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

static const xWsTransport stream_transport = {
    stream_input,  stream_fill,   stream_reserve, stream_commit,  stream_write_ref,
    stream_flush,  stream_hold,   stream_pending, stream_open,    stream_set_timeout,
    stream_finish, stream_finish, stream_retain,  stream_release,
};

static void stream_timeout(xEventLoop *loop, xTimer *timer, void *arg) {
    xWebSocket *ws = arg;
    stream_retain(ws);
    timeout(ws);
    stream_release(ws);
}

/* The client's DATA: read as the HTTP/1.1 connection's bytes are. Its end
 * without a close frame is an abnormal end. */
static void stream_data(xHttpRequest *req, xHttpResponse *res, const char *data, size_t len, bool end,
                        void *arg) {
    xWebSocket *ws = arg;
    if (!ws->ex) return;
    stream_retain(ws);
    if (len) heard(ws);
    if (len && !ws->reading_done && xBufferAppend(&ws->in, data, len) != XOK) fail(ws, XWS_CLOSE_INTERNAL);
    process(ws);
    if (end && ws->ex) {
        tell(ws, XWS_CLOSE_ABNORMAL, (xStr){"", 0});
        stream_finish(ws);
    }
    stream_release(ws);
}

/* RST_STREAM, or the connection went: the exchange is no longer ours. */
static void stream_aborted(xHttpResponse *res, void *arg) {
    xWebSocket *ws = arg;
    stream_retain(ws);
    stream_let_go(ws);
    tell(ws, XWS_CLOSE_ABNORMAL, (xStr){"", 0});
    stream_release(ws);
}

static void stream_stopping(xHttpExchange *ex, void *arg) { begin_close(arg, XWS_CLOSE_GOING_AWAY, "", 0); }

/* 0 when req is a valid RFC 8441 opening handshake the protocol can carry,
 * else the status to answer it with. */
static int check_tunnel(const xHttpExchange *ex, xHttpResponse *res) {
    xStr protocol, version;
    if (!ex->tunnel.pending || !xHttpRequestHeader(&ex->req, ":protocol", &protocol)) return 400;
    if (!xStrEqualsC(protocol, "websocket")) return 501; /* a protocol this route does not speak */
    if (!xHttpRequestHeader(&ex->req, "sec-websocket-version", &version) || !xStrEqualsC(version, "13")) {
        xHttpResponseAddHeader(res, "Sec-WebSocket-Version", "13");
        return 400;
    }
    return 0;
}

static void refuse_tunnel(xHttpResponse *res, int status) {
    static const char bad[] = "Bad WebSocket handshake.\n";
    xHttpResponseSetStatus(res, status);
    xHttpResponseAddHeader(res, "Content-Type", "text/plain");
    xHttpResponseSend(res, bad, sizeof bad - 1);
}

void xWsTunnelHandler(xHttpRequest *req, xHttpResponse *res, void *arg) {
    xHttpExchange *ex = xHttpExchangeOfResponse(res);
    int status = check_tunnel(ex, res);
    xWebSocket *ws = status ? NULL : ws_create(&stream_transport, req->loop, arg);
    if (!status && !ws) status = 500;
    char ext[XWS_MAX_EXTENSION];
    if (!status) status = open_ws(ws, req, ext, sizeof ext);
    if (status) {
        refuse_tunnel(res, status);
        return;
    }
    ws->ex = ex;
    ws->refs = 1; /* the stream's, until the tunnel ends */
    xTimerInit(&ws->timer, stream_timeout, ws);
    /* RFC 8441 §5: 200 with what was agreed, and no Sec-WebSocket-Accept. */
    if (*ws->protocol) xHttpResponseAddHeader(res, "Sec-WebSocket-Protocol", ws->protocol);
    if (*ext) xHttpResponseAddHeader(res, "Sec-WebSocket-Extensions", ext);
    ex->tunnel.stopping = stream_stopping;
    ex->tunnel.arg = ws;
    xHttpResponseOnAbort(res, stream_aborted, ws);
    heard(ws);
    stream_retain(ws);
    if (xHttpResponseWrite(res, NULL, 0) != XOK || xHttpRequestReadBody(req, stream_data, ws) != XOK) {
        if (ws->ex) {
            tell(ws, XWS_CLOSE_ABNORMAL, (xStr){"", 0});
            stream_finish(ws);
        }
    } else {
        arm_timer(ws);
    }
    stream_release(ws);
}
