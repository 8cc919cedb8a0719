/* websocket.c — WebSocket routes: their settings, the opening handshake and
 * its answer on either protocol (websocket.h). The session that follows is
 * session.c's, over a transport of its own file. */
#include "xhttp/websocket/websocket.h"

#include <openssl/sha.h>
#include <stdlib.h>
#include <string.h>

#include "xbase/mem/sized.h"
#include "xbase/text/base64.h"
#include "xhttp/core/exchange.h"
#include "xhttp/core/tokens.h"
#include "xhttp/websocket/session.h"

#define XWS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
#define XWS_KEY_LEN 24 /* base64 of the 16 random bytes (RFC 6455 §4.1) */

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

void xWsRouteFree(void *route) { free(route); }

/* ---- The handshake over HTTP/1.1 (RFC 6455 §4) ---- */

/* 0 when req is a valid opening handshake, else the status to answer it
 * with; *key gets the client's key. */
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
    /* A handshake carries no body, and only HTTP/1.1 switches (HTTP/2 uses
     * the extended CONNECT instead, RFC 9113 §8.2.2 forbids Upgrade). */
    xStr length;
    if (req->body.len || xHttpRequestHeader(req, "transfer-encoding", &length) ||
        strcmp(req->protocol, "HTTP/1.1") != 0)
        return 400;
    return 0;
}

static void accept_key(xStr key, char out[28]) {
    char text[XWS_KEY_LEN + sizeof XWS_GUID];
    memcpy(text, key.data, XWS_KEY_LEN);
    memcpy(text + XWS_KEY_LEN, XWS_GUID, sizeof XWS_GUID - 1);
    unsigned char digest[SHA_DIGEST_LENGTH];
    SHA1((const unsigned char *)text, XWS_KEY_LEN + sizeof XWS_GUID - 1, digest);
    xBase64Encode(digest, sizeof digest, out);
}

/* The 101's fields: what was agreed. */
static xErrno add_switch_fields(xHttpResponse *res, xStr key, const char *protocol, const char *ext) {
    char accept[29];
    accept_key(key, accept);
    accept[28] = '\0';
    xErrno err = xHttpResponseAddHeader(res, "Upgrade", "websocket");
    if (err == XOK) err = xHttpResponseAddHeader(res, "Sec-WebSocket-Accept", accept);
    if (err == XOK && *protocol) err = xHttpResponseAddHeader(res, "Sec-WebSocket-Protocol", protocol);
    if (err == XOK && *ext) err = xHttpResponseAddHeader(res, "Sec-WebSocket-Extensions", ext);
    return err;
}

/* A valid handshake: on_open decides; accepted, the exchange answers 101
 * and the connection is the session's after this batch. 0, or the status
 * to answer instead. */
static int switch_to_session(xHttpRequest *req, xHttpResponse *res, const xWsRoute *route, xStr key) {
    xWebSocket *ws = xWsCreate(&xWsConnectionTransport, req->loop, route);
    if (!ws) return 500;
    char ext[XWS_MAX_EXTENSION];
    int status = xWsOpen(ws, req, ext);
    if (status) return status;
    if (add_switch_fields(res, key, ws->protocol, ext) != XOK ||
        xHttpExchangeSwitch(xHttpExchangeOfResponse(res), &xWsConnectionTakeover, ws) != XOK) {
        xWsConnectionTakeover.drop(ws);
        return 500;
    }
    return 0;
}

void xWsRouteHandler(xHttpRequest *req, xHttpResponse *res, void *arg) {
    xStr key, version;
    int status = check_handshake(req, &key);
    if (status == 0 && (status = switch_to_session(req, res, arg, key)) == 0) return;
    if (status == 426) {
        /* Upgrade is HTTP/1.1's alone: an HTTP/2 or HTTP/3 response may not
         * carry it (RFC 9113 §8.2.2, RFC 9114 §4.2). */
        if (strncmp(xHttpRequestProtocol(req), "HTTP/1.", 7) == 0)
            xHttpResponseAddHeader(res, "Upgrade", "websocket");
        if (xHttpRequestHeader(req, "sec-websocket-version", &version))
            xHttpResponseAddHeader(res, "Sec-WebSocket-Version", "13");
    }
    static const char upgrade_required[] = "This resource speaks WebSocket (RFC 6455) only.\n";
    static const char bad[] = "Bad WebSocket handshake.\n";
    xHttpResponseSetStatus(res, status);
    if (status == 426) {
        xHttpResponseAddHeader(res, "Content-Type", "text/plain");
        xHttpResponseSend(res, upgrade_required, sizeof upgrade_required - 1);
    } else if (status == 400) {
        xHttpResponseAddHeader(res, "Content-Type", "text/plain");
        xHttpResponseSend(res, bad, sizeof bad - 1);
    } else {
        xHttpResponseSend(res, NULL, 0); /* on_open's refusal: its status says it */
    }
}

/* ---- The handshake over an extended CONNECT (RFC 8441) ---- */

/* 0 when req is a valid opening handshake the protocol can carry, else the
 * status to answer it with. */
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

void xWsTunnelHandler(xHttpRequest *req, xHttpResponse *res, void *arg) {
    xHttpExchange *ex = xHttpExchangeOfResponse(res);
    int status = check_tunnel(ex, res);
    xWebSocket *ws = status ? NULL : xWsCreate(&xWsTunnelTransport, req->loop, arg);
    if (!status && !ws) status = 500;
    char ext[XWS_MAX_EXTENSION];
    if (!status) status = xWsOpen(ws, req, ext);
    if (!status) {
        /* RFC 8441 §5: 200 with what was agreed, and no Sec-WebSocket-Accept. */
        if (*ws->protocol) xHttpResponseAddHeader(res, "Sec-WebSocket-Protocol", ws->protocol);
        if (*ext) xHttpResponseAddHeader(res, "Sec-WebSocket-Extensions", ext);
        xWsTunnelStart(ws, ex);
        return;
    }
    static const char bad[] = "Bad WebSocket handshake.\n";
    xHttpResponseSetStatus(res, status);
    xHttpResponseAddHeader(res, "Content-Type", "text/plain");
    xHttpResponseSend(res, bad, sizeof bad - 1);
}
