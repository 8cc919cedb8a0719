/* upgrade.c — choosing and changing a connection's protocol (upgrade.h). */
#include "xhttp/upgrade/upgrade.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xhttp/core/exchange.h"
#include "xhttp/core/tokens.h"
#include "xhttp/http1/http1.h"
#include "xhttp/http2/http2.h"
#include "xhttp/websocket/websocket.h"

/* HTTP2-Settings carries a few 6-byte settings; more is not a real client. */
#define XUPGRADE_MAX_H2C_SETTINGS 192

/* ---- Plans ---- */

static const struct {
    const char *name;
    unsigned proto_bit;
    xHttpProtocol speaks;
} alpn_known[] = {
    {"h2", XHTTP_PROTO_HTTP2, XHTTP_SPEAKS_HTTP2},
    {"http/1.1", XHTTP_PROTO_HTTP1, XHTTP_SPEAKS_HTTP1},
    {"http/1.0", XHTTP_PROTO_HTTP1, XHTTP_SPEAKS_HTTP1}, /* as nginx accepts it */
};
_Static_assert(sizeof alpn_known / sizeof alpn_known[0] <= XTLS_ALPN_NAMES,
               "a listener can offer every name this server knows");

static bool add_alpn(xUpgradePlan *plan, const char *name, size_t n, unsigned protocols, char *err,
                     size_t err_len) {
    for (size_t k = 0; k < sizeof alpn_known / sizeof alpn_known[0]; k++) {
        if (strlen(alpn_known[k].name) != n || memcmp(alpn_known[k].name, name, n) != 0) continue;
        if (!(protocols & alpn_known[k].proto_bit)) break;
        for (size_t i = 0; i < plan->num_alpn; i++)
            if (plan->alpn[i] == alpn_known[k].name) return true; /* named twice */
        if (plan->num_alpn == XTLS_ALPN_NAMES) return true;
        plan->alpn[plan->num_alpn] = alpn_known[k].name;
        plan->by_alpn[plan->num_alpn++] = alpn_known[k].speaks;
        return true;
    }
    snprintf(err, err_len, "tls: ALPN protocol '%.*s' is not one this server speaks", (int)n, name);
    return false;
}

void xUpgradePlanCleartext(xUpgradePlan *plan, unsigned protocols) {
    bool h1 = protocols & XHTTP_PROTO_HTTP1, h2 = protocols & XHTTP_PROTO_HTTP2;
    *plan = (xUpgradePlan){.cleartext = h1 && h2 ? XHTTP_SPEAKS_EITHER
                                        : h2     ? XHTTP_SPEAKS_HTTP2
                                                 : XHTTP_SPEAKS_HTTP1};
}

bool xUpgradePlanListener(xUpgradePlan *plan, unsigned protocols, const char *alpn, char *err,
                          size_t err_len) {
    bool h1 = protocols & XHTTP_PROTO_HTTP1, h2 = protocols & XHTTP_PROTO_HTTP2;
    xUpgradePlanCleartext(plan, protocols);
    if (!alpn) alpn = !h2 ? "http/1.1,http/1.0" : !h1 ? "h2" : "h2,http/1.1,http/1.0";
    for (const char *p = alpn; *p;) {
        size_t n = strcspn(p, ", ");
        if (n > 0 && !add_alpn(plan, p, n, protocols, err, err_len)) return false;
        p += n;
        p += strspn(p, ", ");
    }
    if (plan->num_alpn == 0) {
        snprintf(err, err_len, "tls: the ALPN list offers no protocol");
        return false;
    }
    /* Without ALPN a client gets HTTP/1.1 if we offer it, else HTTP/2. */
    plan->without_alpn = XHTTP_SPEAKS_HTTP2;
    for (size_t i = 0; i < plan->num_alpn; i++)
        if (plan->by_alpn[i] == XHTTP_SPEAKS_HTTP1) plan->without_alpn = XHTTP_SPEAKS_HTTP1;
    return true;
}

/* ---- Starting a connection ---- */

static bool start(xConn *conn, xHttpProtocol speaks) {
    return speaks == XHTTP_SPEAKS_HTTP2 ? xHttp2Start(conn, 0, NULL) : xHttp1Start(conn);
}

static bool on_tls_established(xConn *conn, int alpn, void *arg) {
    const xUpgradePlan *plan = arg;
    return start(conn, alpn >= 0 ? plan->by_alpn[alpn] : plan->without_alpn);
}

/* nginx's kindness: a browser pointed at http:// on our TLS port gets a
 * readable answer instead of a dead connection. The request itself is left
 * unread, and discarded while the connection lingers. */
static void on_tls_plaintext(xConn *conn, void *arg) {
    static const char response[] = "HTTP/1.1 400 Bad Request\r\n"
                                   "Content-Type: text/plain\r\n"
                                   "Content-Length: 35\r\n"
                                   "Connection: close\r\n"
                                   "\r\n"
                                   "This port expects HTTPS, not HTTP.\n";
    if (xConnWrite(conn, response, sizeof response - 1) == XOK)
        xConnCloseAfterFlush(conn);
    else
        xConnClose(conn);
}

xTlsListen xUpgradeTlsListen(const xUpgradePlan *plan) {
    xTlsListen listen = {.num_alpn = plan->num_alpn,
                         .on_established = on_tls_established,
                         .on_plaintext = on_tls_plaintext,
                         .arg = (void *)plan};
    memcpy(listen.alpn, plan->alpn, sizeof listen.alpn);
    return listen;
}

/* A cleartext connection's protocol until its first bytes show what it
 * speaks, under the header timeout. With both protocols, HTTP/2 with prior
 * knowledge opens with its preface, which no HTTP/1.1 request can start
 * with; an HTTP/2-only server lets HTTP/2 judge whatever comes (a bad
 * preface gets GOAWAY). The state is the listener's plan. */
static void sniff(xConn *conn) {
    const xUpgradePlan *plan = conn->proto_state;
    /* A block to read into, with a partial preface's bytes if one waited. */
    if (xBufferPoolUnpark(&conn->net->buffers, &conn->in) != XOK) {
        xConnClose(conn);
        return;
    }
    size_t seen = 0; /* bytes of conn->in compared with the preface */
    for (;;) {
        seen = conn->in.len < XHTTP2_PREFACE_LEN ? conn->in.len : XHTTP2_PREFACE_LEN;
        if (conn->in.len > 0 && (plan->cleartext == XHTTP_SPEAKS_HTTP2 || seen == XHTTP2_PREFACE_LEN ||
                                 memcmp(conn->in.data, XHTTP2_PREFACE, seen) != 0))
            break;
        ssize_t n = xConnRecv(conn, conn->in.data + conn->in.len, conn->in.cap - conn->in.len);
        if (n < 0 && errno == EINTR) continue;
        if (n == 0 || (n < 0 && errno != EAGAIN)) {
            xConnClose(conn);
            return;
        }
        if (n < 0) break;
        conn->in.len += (size_t)n;
    }
    if (conn->in.len == 0) {
        xBufferPoolRelease(&conn->net->buffers, &conn->in);
        return;
    }
    bool h2 = plan->cleartext == XHTTP_SPEAKS_HTTP2 || memcmp(conn->in.data, XHTTP2_PREFACE, seen) == 0;
    if (h2 && plan->cleartext == XHTTP_SPEAKS_EITHER && seen < XHTTP2_PREFACE_LEN) {
        /* A client that stops within the preface may wait so until the
         * header timeout: its few bytes pin no block meanwhile. */
        xBufferPoolPark(&conn->net->buffers, &conn->in, 0); /* failing, they stay in the block */
        return;
    }
    if (!start(conn, h2 ? XHTTP_SPEAKS_HTTP2 : XHTTP_SPEAKS_HTTP1)) xConnClose(conn);
}

static void sniff_timeout(xConn *conn) { xConnClose(conn); }

static void sniff_nothing(xConn *conn) {}

static const xConnProtocol sniff_protocol = {sniff,         sniff_nothing, sniff_timeout,
                                             sniff_timeout, sniff_nothing, sniff_nothing};

bool xUpgradeAccept(xHttpContext *ctx, int fd, const xNetAddr *addr, const xUpgradePlan *plan) {
    if (plan->cleartext == XHTTP_SPEAKS_HTTP1) return xHttp1Accept(ctx, fd, addr);
    xConn *conn = xConnCreate(&ctx->net, fd, addr, &sniff_protocol, (void *)plan);
    if (!conn) return false;
    xConnSetTimeout(conn, ctx->conf->header_timeout_ms);
    return true;
}

/* ---- HTTP/1.1's Upgrade ---- */

/* A switch decided while the request was read, made after its batch. */
typedef struct xPendingSwitch {
    enum { XSWITCH_H2C, XSWITCH_WEBSOCKET, XSWITCH_REFUSED } to;
    xWebSocket *ws;
    long settings_len;
    char settings[XUPGRADE_MAX_H2C_SETTINGS];
} xPendingSwitch;

/* "Upgrade: h2c" (RFC 7540 §3.2) on a request without a body: answer 101 and
 * let HTTP/2 serve this request as stream 1. Anything off, and the request is
 * simply served over HTTP/1.1, as the RFC allows. */
static xPendingSwitch *offer_h2c(xConn *conn, const xHttpRequest *req, bool has_body, xStr upgrade) {
    xStr settings;
    /* h2c is cleartext only (RFC 9113 §3.1): over TLS, ALPN chose HTTP/1.1. */
    if (has_body || !(xHttpContextOf(conn)->conf->protocols & XHTTP_PROTO_HTTP2) || conn->transport->secure ||
        !xHttpListHasToken(upgrade, "h2c") || !xHttpRequestHeader(req, "http2-settings", &settings) ||
        settings.len > XUPGRADE_MAX_H2C_SETTINGS * 4 / 3)
        return NULL;
    xPendingSwitch *up = malloc(sizeof *up);
    if (!up) return NULL;
    up->to = XSWITCH_H2C;
    up->settings_len = xHttp2DecodeSettings(settings, up->settings, sizeof up->settings);
    static const char switching[] = "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n"
                                    "Upgrade: h2c\r\n\r\n";
    if (up->settings_len < 0 || xConnWrite(conn, switching, sizeof switching - 1) != XOK) {
        free(up);
        return NULL;
    }
    return up;
}

/* "Upgrade: websocket" (RFC 6455 §4) to a WebSocket route: the websocket
 * module checks it and answers 101, or on_open's refusal, after which
 * HTTP/1.1 goes on. Anything else is served as a request, which the route
 * answers 400 or 426. */
static xPendingSwitch *offer_websocket(xConn *conn, const xHttpRequest *req, bool has_body) {
    xRouteMatch match;
    if (has_body || !xStrEqualsC(req->method, "GET") ||
        xRouterMatch(xHttpContextOf(conn)->router, req->method, req->path, &match) != XROUTE_FOUND)
        return NULL;
    const xHttpRouteTarget *target = match.handler;
    if (!target->websocket) return NULL;
    xPendingSwitch *up = malloc(sizeof *up);
    if (!up) return NULL;
    xWsOfferResult result = xWsOffer(conn, target->websocket, req, &up->ws);
    if (result == XWS_DECLINED) {
        free(up);
        return NULL;
    }
    up->to = result == XWS_ACCEPTED ? XSWITCH_WEBSOCKET : XSWITCH_REFUSED;
    return up;
}

static void *offer(xConn *conn, const xHttpRequest *req, bool has_body) {
    xStr upgrade;
    if (!xHttpRequestHeader(req, "upgrade", &upgrade)) return NULL;
    if (xHttpListHasToken(upgrade, "websocket")) return offer_websocket(conn, req, has_body);
    return offer_h2c(conn, req, has_body, upgrade);
}

static bool take(xConn *conn, void *pending, const xHttpRequest *req, size_t start) {
    xPendingSwitch *up = pending;
    bool ok = true;
    if (up->to == XSWITCH_H2C) {
        xHttp2Upgrade h2 = {up->settings, (size_t)up->settings_len, req->method, req->path, req->query,
                            req->headers, req->num_headers};
        ok = xHttp2Start(conn, start, &h2);
    } else if (up->to == XSWITCH_WEBSOCKET) {
        xWsStart(conn, up->ws, start);
    } else { /* refused: HTTP/1.1 serves what followed the request */
        memmove(conn->in.data, conn->in.data + start, conn->in.len - start);
        conn->in.len -= start;
        ok = xHttp1Start(conn);
    }
    free(up);
    return ok;
}

static void drop(void *pending) {
    xPendingSwitch *up = pending;
    if (up->to == XSWITCH_WEBSOCKET) xWsDrop(up->ws);
    free(up);
}

const xHttpUpgrades xUpgradeRequests = {offer, take, drop};
