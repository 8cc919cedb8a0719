/* session.c — a WebSocket session's frames, both ways, over its transport
 * (session.h), and the xWebSocket calls of <xhttp/websocket.h>. */
#include "xhttp/websocket/session.h"

#include <stdlib.h>
#include <string.h>

#include "xhttp/core/tokens.h"
#include "xhttp/websocket/utf8.h"

#define XWS_CACHE_LINE 64

static const xStr no_reason = {"", 0};

/* ---- Lifetime and the opening ---- */

xWebSocket *xWsCreate(const xWsTransport *tr, xEventLoop *loop, const xWsRoute *route) {
    /* On a line of its own, so its hot front spans the fewest lines. */
    xWebSocket *ws =
        aligned_alloc(XWS_CACHE_LINE, (sizeof *ws + XWS_CACHE_LINE - 1) & ~(size_t)(XWS_CACHE_LINE - 1));
    if (!ws) return NULL;
    memset(ws, 0, sizeof *ws);
    ws->tr = tr;
    ws->loop = loop;
    ws->route = route;
    ws->reader.max_message = route->conf.max_message_size;
    return ws;
}

void xWsFree(xWebSocket *ws) {
    xBufferFree(&ws->in);
    xBufferFree(&ws->out);
    xWsReaderFree(&ws->reader);
    xWsDeflateDestroy(ws->deflate);
    free(ws);
}

void xWsTell(xWebSocket *ws, uint16_t code, xStr reason) {
    if (ws->told) return;
    ws->told = true;
    if (ws->route->conf.on_close) ws->route->conf.on_close(ws, code, reason, ws->route->arg);
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

int xWsOpen(xWebSocket *ws, const xHttpRequest *req, char ext[XWS_MAX_EXTENSION]) {
    const xWsRoute *route = ws->route;
    xWebSocketOpen open = {.req = req};
    if (!xHttpRequestHeader(req, "sec-websocket-protocol", &open.protocols)) open.protocols = no_reason;
    int status = route->conf.on_open ? route->conf.on_open(ws, &open, route->arg) : 0;
    bool accepted = status == 0;
    if (status == 0 && open.protocol) {
        size_t n = strlen(open.protocol);
        if (n >= XWS_MAX_PROTOCOL || !xHttpListHasToken(open.protocols, open.protocol))
            status = 500; /* on_open picked something the client did not offer */
        else
            memcpy(ws->protocol, open.protocol, n + 1);
    }
    if (status == 0 && !negotiate_deflate(ws, req, ext, XWS_MAX_EXTENSION)) status = 500;
    if (status == 0) return 0;
    if (status < 400 || status > 599) status = 500;
    if (accepted) xWsTell(ws, XWS_CLOSE_ABNORMAL, no_reason); /* on_open said yes: it hears the end */
    xWsFree(ws);
    return status;
}

/* ---- Frames out ---- */

static void flush_unless_reading(xWebSocket *ws) {
    if (!ws->in_batch) ws->tr->flush(ws);
}

static bool may_send(const xWebSocket *ws) { return ws->state == XWS_OPEN && ws->tr->open(ws); }

/* Queues one frame whose payload is copied, its header written in place. */
static xErrno put_frame(xWebSocket *ws, unsigned opcode, bool rsv1, const void *data, size_t len) {
    char *p = ws->tr->reserve(ws, XWS_MAX_HEADER + len);
    if (!p) return XERR_NOMEM;
    size_t h = xWsWriteHeader((uint8_t *)p, opcode, true, rsv1, len);
    if (len) memcpy(p + h, data, len);
    ws->tr->commit(ws, h + len);
    ws->stats.bytes_out += h + len;
    return XOK;
}

/* Queues a frame whose payload is the caller's, by reference: release(arg)
 * runs once it is out, or at once on error. */
static xErrno put_frame_ref(xWebSocket *ws, unsigned opcode, const void *data, size_t len,
                            void (*release)(void *), void *arg) {
    uint8_t head[XWS_MAX_HEADER];
    size_t h = xWsWriteHeader(head, opcode, true, false, len);
    char *p = ws->tr->reserve(ws, h);
    if (!p) {
        release(arg);
        return XERR_NOMEM;
    }
    memcpy(p, head, h);
    ws->tr->commit(ws, h);
    ws->stats.bytes_out += h + len;
    return ws->tr->write_ref(ws, data, len, release, arg);
}

/* Our close: after it nothing but the client's close is waited for. */
static xErrno put_close(xWebSocket *ws, uint16_t code, const char *reason, size_t reason_len) {
    char payload[XWS_MAX_CONTROL] = {0};
    size_t n = 0;
    if (code != XWS_CLOSE_NO_STATUS) {
        payload[0] = (char)(code >> 8);
        payload[1] = (char)code;
        if (reason_len) memcpy(payload + 2, reason, reason_len);
        n = 2 + reason_len;
    }
    if (ws->state == XWS_OPEN) ws->state = XWS_CLOSE_SENT;
    return put_frame(ws, XWS_OP_CLOSE, false, payload, n);
}

static xErrno send_message(xWebSocket *ws, unsigned opcode, const void *data, size_t len,
                           void (*release)(void *), void *release_arg) {
    xErrno err = may_send(ws) ? XOK : XERR_CLOSED;
    bool compressed = false;
    if (err == XOK && ws->deflate && len > 0) { /* an empty message is sent as it is (RFC 7692 §6) */
        const char *zipped;
        size_t zipped_len;
        if (xWsDeflateCompress(ws->deflate, data, len, &zipped, &zipped_len)) {
            data = zipped;
            len = zipped_len;
            compressed = true;
        } else {
            err = XERR_NOMEM;
        }
    }
    if (err == XOK && release && !compressed) {
        err = put_frame_ref(ws, opcode, data, len, release, release_arg);
        release = NULL; /* released by now, or once sent */
    } else if (err == XOK) {
        err = put_frame(ws, opcode, compressed, data, len);
    }
    if (release) release(release_arg);
    if (err != XOK) return err;
    ws->stats.messages_out++;
    flush_unless_reading(ws);
    return XOK;
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
    if (!may_send(ws)) return XERR_CLOSED;
    xErrno err = put_frame(ws, XWS_OP_PING, false, data, len);
    if (err == XOK) flush_unless_reading(ws);
    return err;
}

xErrno xWsBeginClose(xWebSocket *ws, uint16_t code, const char *reason, size_t reason_len) {
    if (!may_send(ws)) return XERR_CLOSED;
    xErrno err = put_close(ws, code, reason, reason_len);
    ws->tr->set_timeout(ws, ws->route->conf.close_timeout_ms);
    flush_unless_reading(ws);
    return err;
}

xErrno xWebSocketClose(xWebSocket *ws, uint16_t code, const char *reason) {
    size_t n = reason ? strlen(reason) : 0;
    if (n > XWS_MAX_CONTROL - 2 || !xWsCloseCodeValid(code) || code == 1015 || !xUtf8Valid(reason, n))
        return XERR_INVALID;
    return xWsBeginClose(ws, code, reason, n);
}

size_t xWebSocketPending(const xWebSocket *ws) { return ws->tr->open(ws) ? ws->tr->pending(ws) : 0; }

const char *xWebSocketProtocol(const xWebSocket *ws) { return ws->protocol; }

void xWebSocketSetUserData(xWebSocket *ws, void *data) { ws->user = data; }

void *xWebSocketUserData(const xWebSocket *ws) { return ws->user; }

xEventLoop *xWebSocketLoop(const xWebSocket *ws) { return ws->loop; }

void xWebSocketRetain(xWebSocket *ws) { ws->tr->retain(ws); }

void xWebSocketRelease(xWebSocket *ws) { ws->tr->release(ws); }

/* ---- Frames in ---- */

/* Reading is over: our close answers the client's (or says why we stop,
 * unless ours went already), and the transport ends once it is out. */
static void stop_reading(xWebSocket *ws, uint16_t code, const char *reason, size_t reason_len) {
    if (ws->state == XWS_OPEN) put_close(ws, code, reason, reason_len);
    ws->state = XWS_DONE;
}

void xWsFail(xWebSocket *ws, uint16_t code) {
    stop_reading(ws, code, NULL, 0);
    xWsTell(ws, code, no_reason);
    ws->tr->finish(ws);
}

static void on_message(xWebSocket *ws, xWsEvent *ev) {
    if (ws->state != XWS_OPEN) return; /* closing: data is no longer delivered */
    char *data = ev->data;
    size_t len = ev->len;
    if (ev->compressed) {
        int code = xWsDeflateInflate(ws->deflate, data, len, ws->route->conf.max_message_size, &data, &len);
        if (code) {
            xWsFail(ws, (uint16_t)code);
            return;
        }
        if (!ev->binary && !xUtf8Valid(data, len)) {
            xWsFail(ws, XWS_CLOSE_BAD_DATA);
            return;
        }
    }
    ws->stats.messages_in++;
    ws->route->conf.on_message(ws, data ? data : "", len, ev->binary, ws->route->arg);
}

static void on_close_frame(xWebSocket *ws, xWsEvent *ev) {
    xStr reason = ev->len > 2 ? (xStr){ev->data + 2, ev->len - 2} : no_reason;
    stop_reading(ws, ev->code, reason.data, reason.len);
    xWsTell(ws, ev->code, reason);
    ws->tr->finish(ws);
}

static void handle(xWebSocket *ws, xWsEvent *ev) {
    switch (ev->type) {
    case XWS_EV_MESSAGE: on_message(ws, ev); break;
    case XWS_EV_PING:
        if (ws->state == XWS_OPEN && put_frame(ws, XWS_OP_PONG, false, ev->data, ev->len) != XOK) {
            xWsFail(ws, XWS_CLOSE_INTERNAL);
            break;
        }
        if (ws->route->conf.on_ping) ws->route->conf.on_ping(ws, ev->data, ev->len, ws->route->arg);
        break;
    case XWS_EV_PONG: break;
    case XWS_EV_CLOSE: on_close_frame(ws, ev); break;
    case XWS_EV_FAIL: xWsFail(ws, ev->code); break;
    case XWS_EV_NEED_MORE: break;
    }
}

/* Whether the session reads on, while its transport does (its input is
 * there). */
static bool may_read(const xWebSocket *ws) { return ws->state != XWS_DONE && !ws->waiting_flush; }

/* Takes every complete event from the transport's input; false once
 * reading must stop. The input is asked for again after each event, as
 * handling one may end the transport. */
static bool drain_input(xWebSocket *ws) {
    xBuffer *in;
    size_t pos = 0;
    while ((in = ws->tr->input(ws)) && may_read(ws) && pos < in->len) {
        xWsEvent ev;
        size_t n = xWsReaderNext(&ws->reader, in->data + pos, in->len - pos, &ev);
        pos += n;
        ws->stats.bytes_in += n; /* before handling: a close may end the session and its count */
        if (ev.type == XWS_EV_NEED_MORE && n == 0) break;
        handle(ws, &ev);
        /* Backpressure: read no more until the client takes some. */
        if (ws->tr->pending(ws) > ws->route->conf.max_pending && ws->tr->open(ws) && ws->tr->hold(ws))
            ws->waiting_flush = true;
    }
    if (!in) return false;
    in->len -= pos;
    if (pos && in->len) memmove(in->data, in->data + pos, in->len); /* a frame begun */
    return may_read(ws);
}

void xWsProcess(xWebSocket *ws) {
    ws->tr->retain(ws);
    ws->in_batch = true;
    while (drain_input(ws) && ws->tr->fill(ws)) {
    }
    ws->in_batch = false;
    if (ws->tr->open(ws)) ws->tr->flush(ws);
    ws->tr->release(ws);
}

/* ---- Timers ---- */

void xWsArmTimer(xWebSocket *ws) {
    const xWebSocketConf *conf = &ws->route->conf;
    if (!may_send(ws)) return;
    uint32_t next = conf->idle_timeout_ms;
    if (conf->ping_interval_ms && !ws->ping_sent && (!next || conf->ping_interval_ms < next))
        next = conf->ping_interval_ms;
    uint64_t idle = xEventLoopNowMs(ws->loop) - ws->last_input_ms;
    ws->tr->set_timeout(ws, !next ? 0 : next > idle ? (uint32_t)(next - idle) : 1);
}

void xWsTimeout(xWebSocket *ws) {
    const xWebSocketConf *conf = &ws->route->conf;
    if (ws->state != XWS_OPEN) { /* the client never answered our close */
        xWsTell(ws, XWS_CLOSE_ABNORMAL, no_reason);
        ws->tr->abort(ws);
        return;
    }
    uint64_t idle = xEventLoopNowMs(ws->loop) - ws->last_input_ms;
    if (conf->idle_timeout_ms && idle >= conf->idle_timeout_ms) {
        xWsBeginClose(ws, XWS_CLOSE_GOING_AWAY, "idle", 4);
        return;
    }
    if (conf->ping_interval_ms && !ws->ping_sent && idle >= conf->ping_interval_ms) {
        ws->ping_sent = true;
        if (put_frame(ws, XWS_OP_PING, false, NULL, 0) == XOK) ws->tr->flush(ws);
    }
    xWsArmTimer(ws);
}

void xWsOutputTaken(xWebSocket *ws) {
    if (ws->state != XWS_OPEN)
        ws->tr->set_timeout(ws, ws->route->conf.close_timeout_ms);
    else
        xWsArmTimer(ws);
    if (!ws->waiting_flush) return;
    ws->waiting_flush = false;
    xWsProcess(ws);
}

void xWsHeard(xWebSocket *ws) {
    ws->last_input_ms = xEventLoopNowMs(ws->loop);
    ws->ping_sent = false;
}
