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
    bool started = speaks == XHTTP_SPEAKS_HTTP2 ? xHttp2Start(conn, 0, NULL) : xHttp1Start(conn);
    /* A stop that began while this one was still silent, or in its TLS
     * handshake, drains it as its protocol does. */
    if (started && xHttpContextOf(conn)->draining && !xConnClosed(conn) && conn->proto->on_drain)
        conn->proto->on_drain(conn);
    return started;
}

static bool on_tls_established(xConn *conn, int alpn, void *arg) {
    const xUpgradePlan *plan = arg;
    return start(conn, alpn >= 0 ? plan->by_alpn[alpn] : plan->without_alpn);
}

/* nginx's kindness: a browser pointed at http:// on our TLS port gets a
 * readable answer instead of a dead connection, counted and logged as any
 * refused request. */
static void on_tls_plaintext(xConn *conn, void *arg) {
    if (!xHttp1StartRefusing(conn, 400, "This port expects HTTPS, not HTTP.\n")) xConnClose(conn);
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

static const xConnProtocol sniff_protocol = {
    .on_readable = sniff,
    .on_timeout = sniff_timeout,
    .on_drain = xHttpDrainFresh, /* nothing said yet: its first request may be on its way */
};

bool xUpgradeAccept(xHttpContext *ctx, int fd, const xNetAddr *addr, const xUpgradePlan *plan) {
    if (plan->cleartext == XHTTP_SPEAKS_HTTP1) return xHttp1Accept(ctx, fd, addr);
    xConn *conn = xConnCreate(&ctx->net, fd, addr, &sniff_protocol, (void *)plan);
    if (!conn) return false;
    xConnSetTimeout(conn, ctx->conf->header_timeout_ms);
    return true;
}

/* ---- HTTP/1.1's Upgrade ---- */

/* "Upgrade: h2c" (RFC 7540 §3.2) on a request without a body, where
 * conf->h2c_upgrade allows it: answer 101 and let HTTP/2 serve this request as
 * stream 1, logged there. Anything off, and the request is simply served over
 * HTTP/1.1, as the RFC allows. Off by default: a proxy that forwards Upgrade
 * tunnels whatever follows a 101 without reading it, so the HTTP/2 requests
 * inside would pass its rules by (h2c smuggling). */
typedef struct xH2cSwitch {
    size_t settings_len;
    char settings[XUPGRADE_MAX_H2C_SETTINGS];
} xH2cSwitch;

static bool h2c_start(xConn *conn, xHttpExchange *ex, size_t start, void *arg) {
    xH2cSwitch *up = arg;
    const xHttpRequest *req = &ex->req;
    xHttp2Upgrade h2 = {up->settings, up->settings_len, req->method,     req->path,
                        req->query,   req->headers,     req->num_headers};
    bool ok = xHttp2Start(conn, start, &h2);
    free(up);
    if (ok) xHttpExchangeRelease(xHttpContextOf(conn), ex);
    return ok;
}

static const xHttpTakeover h2c_takeover = {.start = h2c_start, .drop = free};

static const xHttpTakeover *offer(xConn *conn, xHttpExchange *ex, bool has_body, void **arg) {
    xStr upgrade, settings;
    const xHttpRequest *req = &ex->req;
    /* h2c is cleartext only (RFC 9113 §3.1): over TLS, ALPN chose HTTP/1.1. */
    const xHttpServerConf *conf = xHttpContextOf(conn)->conf;
    if (has_body || !conf->h2c_upgrade || !(conf->protocols & XHTTP_PROTO_HTTP2) || conn->transport->secure ||
        !xHttpRequestHeader(req, "upgrade", &upgrade) || !xHttpListHasToken(upgrade, "h2c") ||
        !xHttpRequestHeader(req, "http2-settings", &settings) ||
        settings.len > XUPGRADE_MAX_H2C_SETTINGS * 4 / 3)
        return NULL;
    xH2cSwitch *up = malloc(sizeof *up);
    if (!up) return NULL;
    long n = xHttp2DecodeSettings(settings, up->settings, sizeof up->settings);
    if (n < 0 || xHttpResponseAddHeader(&ex->res, "Upgrade", "h2c") != XOK) {
        free(up);
        return NULL;
    }
    up->settings_len = (size_t)n;
    *arg = up;
    return &h2c_takeover;
}

const xHttpUpgrades xUpgradeRequests = {.offer = offer};
