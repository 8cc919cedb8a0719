/* exchange.c — the handler-facing request and response, and routing. */
#include "xhttp/core/exchange.h"
#include "xhttp/core/tokens.h"

#include <stdlib.h>
#include <string.h>

#include <xhttp/tls.h>

#include "xbase/mem/sized.h"

#include "xnet/address.h"
#include "xhttp/core/cookie.h"
#include "xhttp/core/finished.h"
#include "xhttp/core/forwarded.h"

/* Exchanges kept for reuse per worker; beyond this they go back to malloc. */
#define XEXCHANGE_POOL_MAX 1024

xHttpExchange *xHttpExchangeAcquire(xHttpContext *ctx) {
    xHttpExchange *ex = ctx->free_exchanges;
    if (ex) {
        ctx->free_exchanges = ex->next_free;
        ctx->free_exchange_count--;
    } else if (!(ex = calloc(1, sizeof *ex))) {
        return NULL;
    }
    xBuffer headers = ex->res.headers, trailers = ex->res.trailers; /* reuse their storage */
    headers.len = trailers.len = 0;
    memset(&ex->req, 0, sizeof ex->req);
    memset(&ex->res, 0, sizeof ex->res);
    ex->res.headers = headers;
    ex->res.trailers = trailers;
    ex->res.status = 200;
    ex->req.loop = ctx->net.loop;
    if (ctx->on_finished) ex->req.start_us = xEventLoopNowUs(ctx->net.loop);
    ex->router = ctx->router;
    ex->route_memo = &ctx->route_memo;
    ex->routed = false;
    ex->match.num_params = 0;
    ex->streams_body = ex->body_paused = ex->body_ended = false;
    ex->reader = NULL;
    ex->reader_arg = NULL;
    ex->taker = NULL;
    ex->filter = ctx->filter;
    ex->filter_state = NULL;
    ex->tunnel = (xHttpTunnel){0};
    ex->log_fields.len = 0;
    ex->next_free = NULL;
    return ex;
}

bool xHttpExchangeReserveFields(xHttpContext *ctx, xHttpExchange *ex) {
    if (ex->fields_cap >= ctx->conf->max_headers) return true;
    xHttpField *fields = realloc(ex->fields, ctx->conf->max_headers * sizeof *fields);
    if (!fields) return false;
    ex->fields = fields;
    ex->fields_cap = ctx->conf->max_headers;
    return true;
}

void xHttpExchangeRelease(xHttpContext *ctx, xHttpExchange *ex) {
    if (ex->filter_state) ex->filter->drop(ex);
    if (ex->req.kept) {
        free(ex->req.kept);
        ex->req.kept = NULL;
    }
    if (ctx->free_exchange_count >= XEXCHANGE_POOL_MAX) {
        xBufferFree(&ex->res.headers);
        xBufferFree(&ex->res.trailers);
        xBufferFree(&ex->log_fields);
        free(ex->fields);
        free(ex);
        return;
    }
    ex->next_free = ctx->free_exchanges;
    ctx->free_exchanges = ex;
    ctx->free_exchange_count++;
}

void xHttpExchangePoolDestroy(xHttpContext *ctx) {
    while (ctx->free_exchanges) {
        xHttpExchange *ex = ctx->free_exchanges;
        ctx->free_exchanges = ex->next_free;
        xBufferFree(&ex->res.headers);
        xBufferFree(&ex->res.trailers);
        xBufferFree(&ex->log_fields);
        free(ex->fields);
        free(ex);
    }
    ctx->free_exchange_count = 0;
}

xRouteResult xHttpExchangeRoute(xHttpExchange *ex) {
    if (ex->routed) return ex->route;
    ex->route = xRouterMatchMemo(ex->router, ex->route_memo, ex->req.method, ex->req.path, &ex->match);
    ex->routed = true;
    /* Kept as offsets: a protocol may move the request's bytes (HTTP/1.1
     * compacts its buffer) between routing and dispatch. */
    for (size_t i = 0; i < ex->match.num_params; i++)
        ex->param_at[i] = (size_t)(ex->match.params[i].value.data - ex->req.path.data);
    return ex->route;
}

void xHttpExchangeRouteAndKeep(xHttpExchange *ex, xHttpKeptRoute *kept) {
    if (xHttpExchangeRoute(ex) != XROUTE_FOUND || ex->match.num_params) return;
    *kept = (xHttpKeptRoute){ex->router, ex->match.handler, ex->match.arg};
}

bool xHttpExchangeRouteByKept(xHttpExchange *ex, const xHttpKeptRoute *kept) {
    if (!kept->router || kept->router != ex->router) return false;
    ex->route = XROUTE_FOUND;
    ex->match.handler = kept->handler;
    ex->match.arg = kept->arg;
    ex->match.num_params = 0;
    ex->match.allow = (xStr){"", 0};
    ex->routed = true;
    return true;
}

bool xHttpExchangeStreams(xHttpExchange *ex) {
    return xHttpExchangeRoute(ex) == XROUTE_FOUND &&
           ((const xHttpRouteTarget *)ex->match.handler)->streams_body;
}

void xHttpExchangeDispatch(xHttpExchange *ex) {
    xRouteResult found = xHttpExchangeRoute(ex);
    if (found == XROUTE_FOUND) {
        const xHttpRouteTarget *target = ex->match.handler;
        for (size_t i = 0; i < ex->match.num_params; i++)
            ex->match.params[i].value.data = ex->req.path.data + ex->param_at[i];
        ex->req.params = ex->match.params;
        ex->req.num_params = ex->match.num_params;
        ex->streams_body = target->streams_body;
        if (target->unfiltered) ex->filter = NULL;
        target->handler(&ex->req, &ex->res, target->arg);
        return;
    }
    const xHttpOwnAnswers *answers = xHttpContextOf(ex->req.conn)->answers;
    const xHttpRouteTarget *fallback = answers->not_found;
    int status = 404;
    if (found == XROUTE_METHOD_NOT_ALLOWED) {
        /* One reservation for the line: three appends cost a proxied
         * request (a fallback under a route of another method) more. */
        xStr allow = ex->match.allow;
        xBuffer *h = &ex->res.headers;
        if (xBufferReserve(h, 7 + allow.len + 2) == XOK) {
            char *p = h->data + h->len;
            memcpy(p, "Allow: ", 7);
            memcpy(p + 7, allow.data, allow.len);
            memcpy(p + 7 + allow.len, "\r\n", 2);
            h->len += 7 + allow.len + 2;
        }
        fallback = answers->not_allowed;
        status = 405;
    }
    if (!fallback) {
        xHttpExchangeSendStatus(ex, status);
        return;
    }
    ex->res.status = status; /* the handler's to change */
    if (fallback->unfiltered) ex->filter = NULL;
    fallback->handler(&ex->req, &ex->res, fallback->arg);
}

void xHttpExchangeDeliverBody(xHttpExchange *ex, const char *data, size_t len, bool end) {
    ex->body_ended = end;
    ex->reader(&ex->req, &ex->res, data, len, end, ex->reader_arg);
}

void xHttpExchangeSendStatus(xHttpExchange *ex, int status) {
    char line[64];
    xStr content_type;
    xStr body = xHttpOwnErrorBody(xHttpContextOf(ex->req.conn)->answers, status, line, &content_type);
    ex->res.status = status;
    xBufferAppend(&ex->res.headers, content_type.data, content_type.len);
    xHttpExchangeFinished(ex, status, body.len);
    ex->ops->send(ex, body.data, body.len, true, NULL, NULL);
}

xErrno xHttpExchangeSwitch(xHttpExchange *ex, const xHttpTakeover *to, void *arg) {
    if (!ex->ops->switch_protocols || ex->res.head_sent || ex->res.ended || ex->res.aborted)
        return XERR_STATE;
    ex->res.status = 101;
    return ex->ops->switch_protocols(ex, to, arg);
}

/* Copies s to *at and points s there. */
static void keep_view(xStr *s, char **at) {
    if (s->len) memcpy(*at, s->data, s->len);
    s->data = *at;
    *at += s->len;
}

xErrno xHttpExchangeKeepRequest(xHttpExchange *ex) {
    xHttpRequest *req = &ex->req;
    size_t fields = req->num_headers * sizeof(xHttpField);
    size_t bytes = req->method.len + req->path.len + req->query.len;
    for (size_t i = 0; i < req->num_headers; i++)
        bytes += req->headers[i].name.len + req->headers[i].value.len;
    char *block = malloc(fields + bytes + 1);
    if (!block) return XERR_NOMEM;
    xHttpField *copy = (xHttpField *)block;
    char *at = block + fields;
    if (fields) memcpy(copy, req->headers, fields);
    for (size_t i = 0; i < req->num_headers; i++) {
        keep_view(&copy[i].name, &at);
        keep_view(&copy[i].value, &at);
    }
    keep_view(&req->method, &at);
    keep_view(&req->path, &at);
    keep_view(&req->query, &at);
    req->headers = copy;
    req->params = NULL; /* views into the old path, and of no use to a log line */
    req->num_params = 0;
    req->body = (xStr){"", 0};
    free(req->kept);
    req->kept = block;
    return XOK;
}

/* ---- Request accessors ---- */

static xHttpExchange *exchange_of_request(xHttpRequest *req) {
    return (xHttpExchange *)((char *)req - offsetof(xHttpExchange, req));
}

xErrno xHttpExchangeReadBodyTaking(xHttpExchange *ex, xHttpBodyReader reader, xHttpBodyTaker taker,
                                   void *arg) {
    if (!reader) return XERR_INVALID;
    if (!ex->streams_body || ex->body_ended) return XERR_STATE;
    ex->reader = reader;
    ex->reader_arg = arg;
    ex->taker = taker;
    ex->ops->body_wanted(ex);
    return XOK;
}

xErrno xHttpRequestReadBody(xHttpRequest *req, xHttpBodyReader reader, void *arg) {
    return xHttpExchangeReadBodyTaking(exchange_of_request(req), reader, NULL, arg);
}

bool xHttpRequestBodyStreams(const xHttpRequest *req) {
    const xHttpExchange *ex = exchange_of_request((xHttpRequest *)req);
    return ex->streams_body && !ex->body_ended;
}

void xHttpRequestPauseBody(xHttpRequest *req) { exchange_of_request(req)->body_paused = true; }

void xHttpRequestResumeBody(xHttpRequest *req) {
    xHttpExchange *ex = exchange_of_request(req);
    if (!ex->body_paused) return;
    ex->body_paused = false;
    if (ex->streams_body && ex->reader) ex->ops->body_wanted(ex);
}

xStr xHttpRequestMethod(const xHttpRequest *req) { return req->method; }
xStr xHttpRequestPath(const xHttpRequest *req) { return req->path; }
xStr xHttpRequestQuery(const xHttpRequest *req) { return req->query; }
xStr xHttpRequestBody(const xHttpRequest *req) { return req->body; }
const char *xHttpRequestProtocol(const xHttpRequest *req) { return req->protocol; }
xEventLoop *xHttpRequestLoop(const xHttpRequest *req) { return req->loop; }
size_t xHttpRequestHeaderCount(const xHttpRequest *req) { return req->num_headers; }

bool xHttpRequestQueryParam(const xHttpRequest *req, const char *name, xStr *value) {
    size_t name_len = strlen(name);
    const char *p = req->query.data, *end = p + req->query.len;
    while (p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *pair_end = amp ? amp : end;
        const char *eq = memchr(p, '=', (size_t)(pair_end - p));
        const char *key_end = eq ? eq : pair_end;
        if ((size_t)(key_end - p) == name_len && memcmp(p, name, name_len) == 0) {
            const char *v = eq ? eq + 1 : pair_end;
            value->data = v;
            value->len = (size_t)(pair_end - v);
            return true;
        }
        p = pair_end + 1;
    }
    return false;
}

xStr xHttpRequestParam(const xHttpRequest *req, const char *name) {
    xStr none = {"", 0};
    for (size_t i = 0; i < req->num_params; i++)
        if (xStrEqualsC(req->params[i].name, name)) return req->params[i].value;
    return none;
}

bool xHttpRequestHeader(const xHttpRequest *req, const char *name, xStr *value) {
    for (size_t i = 0; i < req->num_headers; i++) {
        if (xHttpNameEquals(req->headers[i].name, name)) {
            *value = req->headers[i].value;
            return true;
        }
    }
    return false;
}

bool xHttpRequestCookie(const xHttpRequest *req, const char *name, xStr *value) {
    xStr wanted = xStrFromC(name);
    for (size_t i = 0; i < req->num_headers; i++)
        if (xHttpNameEquals(req->headers[i].name, "cookie") &&
            xHttpCookieFind(req->headers[i].value, wanted, value))
            return true;
    return false;
}

bool xHttpRequestHeaderAt(const xHttpRequest *req, size_t i, xStr *name, xStr *value) {
    if (i >= req->num_headers) return false;
    *name = req->headers[i].name;
    *value = req->headers[i].value;
    return true;
}

/* ---- Response ---- */

/* Fields the server frames itself; letting a handler set them would allow it
 * to contradict the framing (and so smuggle a response). */
static bool is_reserved_field(xStr name) {
    switch (name.len) {
    case 4: return xHttpSameLower(name.data, "date", 4);
    case 10: return xHttpSameLower(name.data, "connection", 10);
    case 14: return xHttpSameLower(name.data, "content-length", 14);
    case 17: return xHttpSameLower(name.data, "transfer-encoding", 17);
    }
    return false;
}

void xHttpResponseSetStatus(xHttpResponse *res, int status) {
    if (!res->head_sent && status >= 100 && status <= 999) res->status = status;
}

/* Appends a checked field to lines as "Name: value\r\n" unless its name is
 * one the server writes itself; *server (when not NULL) is set if the field
 * is a Server field. */
static xErrno put_field(xBuffer *lines, xStr n, xStr v, bool *server) {
    if (n.len == 0 || is_reserved_field(n)) return XERR_INVALID;
    if (server && n.len == 6 && xHttpSameLower(n.data, "server", 6)) *server = true;
    xErrno err = xBufferReserve(lines, n.len + v.len + 4);
    if (err != XOK) return err;
    char *p = lines->data + lines->len;
    memcpy(p, n.data, n.len);
    p += n.len;
    *p++ = ':';
    *p++ = ' ';
    memcpy(p, v.data, v.len);
    p += v.len;
    *p++ = '\r';
    *p++ = '\n';
    lines->len = (size_t)(p - lines->data);
    return XOK;
}

/* The length of s's leading run of bytes in class (a byte table that does not
 * hold NUL), two bytes a step: a byte in the class is not the terminator, so
 * the one after it may be read. */
static size_t class_run(const char *s, const bool class[256]) {
    const unsigned char *p = (const unsigned char *)s;
    for (;;) {
        if (!class[p[0]]) return (size_t)(p - (const unsigned char *)s);
        if (!class[p[1]]) return (size_t)(p + 1 - (const unsigned char *)s);
        p += 2;
    }
}

/* Validates a field and appends it to lines (put_field). */
static xErrno append_field(xBuffer *lines, const char *name, const char *value, bool *server) {
    if (!name || !value) return XERR_INVALID;
    /* One pass over each string finds its end and checks it: neither class
     * holds NUL, so a scan stops at the terminator or at the first character
     * that does not belong, and only the terminator passes. */
    xStr n = {name, class_run(name, xHttpTokenChars)};
    size_t vl = class_run(value, xHttpFieldChars);
    if (name[n.len] || value[vl]) return XERR_INVALID;
    return put_field(lines, n, (xStr){value, vl}, server);
}

xErrno xHttpResponseAddHeader(xHttpResponse *res, const char *name, const char *value) {
    if (res->head_sent || res->ended) return XERR_STATE;
    return append_field(&res->headers, name, value, &res->own_server);
}

xErrno xHttpResponseAddField(xHttpResponse *res, xStr name, xStr value) {
    if (res->head_sent || res->ended) return XERR_STATE;
    for (size_t i = 0; i < name.len; i++)
        if (!xHttpIsTokenChar((unsigned char)name.data[i])) return XERR_INVALID;
    for (size_t i = 0; i < value.len; i++)
        if (!xHttpIsFieldChar((unsigned char)value.data[i])) return XERR_INVALID;
    return put_field(&res->headers, name, value, &res->own_server);
}

xErrno xHttpResponseAddCheckedField(xHttpResponse *res, xStr name, xStr value) {
    if (res->head_sent || res->ended) return XERR_STATE;
    return put_field(&res->headers, name, value, &res->own_server);
}

xErrno xHttpResponseClearHeaders(xHttpResponse *res) {
    if (res->head_sent || res->ended) return XERR_STATE;
    res->headers.len = 0;
    res->own_server = false;
    return XOK;
}

xErrno xHttpResponseAddTrailer(xHttpResponse *res, const char *name, const char *value) {
    if (res->ended) return XERR_STATE;
    return append_field(&res->trailers, name, value, NULL);
}

xErrno xHttpResponseSend(xHttpResponse *res, const void *body, size_t len) {
    if (res->head_sent || res->ended) return XERR_STATE;
    xHttpExchange *ex = xHttpExchangeOfResponse(res);
    xHttpExchangeFinished(ex, res->status, len);
    if (ex->filter) return ex->filter->send(ex, body, len, true, NULL, NULL);
    return ex->ops->send(ex, body, len, true, NULL, NULL);
}

xErrno xHttpResponseSendRef(xHttpResponse *res, const void *body, size_t len, void (*release)(void *),
                            void *release_arg) {
    if (res->head_sent || res->ended) return XERR_STATE;
    xHttpExchange *ex = xHttpExchangeOfResponse(res);
    xHttpExchangeFinished(ex, res->status, len);
    if (ex->filter) return ex->filter->send(ex, body, len, false, release, release_arg);
    return ex->ops->send(ex, body, len, false, release, release_arg);
}

xErrno xHttpResponseWrite(xHttpResponse *res, const void *data, size_t len) {
    if (res->ended) return XERR_STATE;
    if (res->length_declared && len > res->declared_length - res->body_len) return XERR_INVALID;
    xHttpExchange *ex = xHttpExchangeOfResponse(res);
    res->body_len += len;
    if (ex->filter) return ex->filter->write(ex, data, len);
    return ex->ops->write(ex, data, len);
}

/* Whether the answer to ex carries a body at all (not HEAD's, 1xx, 204, 304). */
static bool answer_has_body(const xHttpExchange *ex) {
    return xHttpStatusHasBody(ex->res.status) && !xStrEqualsC(ex->req.method, "HEAD");
}

xErrno xHttpResponseEnd(xHttpResponse *res) {
    if (res->ended) return XERR_STATE;
    xHttpExchange *ex = xHttpExchangeOfResponse(res);
    /* A body shorter than its Content-Length said must not look whole. */
    if (res->length_declared && res->body_len != res->declared_length && answer_has_body(ex) && !res->aborted)
        return xHttpResponseReset(res);
    xHttpExchangeFinished(ex, res->status, res->body_len);
    if (ex->filter) return ex->filter->end(ex);
    return ex->ops->end(ex);
}

xErrno xHttpResponseSetLength(xHttpResponse *res, uint64_t len) {
    if (res->head_sent || res->ended) return XERR_STATE;
    xHttpExchange *ex = xHttpExchangeOfResponse(res);
    if (ex->filter_state) return XERR_STATE;
    ex->filter = NULL; /* a coded body would not be len bytes */
    res->length_declared = true;
    res->declared_length = len;
    return XOK;
}

bool xHttpResponseFiltered(xHttpResponse *res, uint64_t len) {
    xHttpExchange *ex = xHttpExchangeOfResponse(res);
    if (!ex->filter) return false;
    if (ex->filter_state || !ex->filter->start) return true;
    return ex->filter->start(ex, len);
}

size_t xHttpResponsePending(const xHttpResponse *res) {
    const xHttpExchange *ex = xHttpExchangeOfResponse((xHttpResponse *)res);
    return res->ended || res->aborted || !ex->ops->pending ? 0 : ex->ops->pending(ex);
}

bool xHttpResponseOnDrain(xHttpResponse *res, size_t low_water, void (*fn)(xHttpResponse *res, void *arg),
                          void *arg) {
    xHttpExchange *ex = xHttpExchangeOfResponse(res);
    res->on_drain = NULL;
    if (!fn || res->ended || res->aborted || !ex->ops->pending || ex->ops->pending(ex) <= low_water)
        return false;
    res->on_drain = fn;
    res->on_drain_arg = arg;
    res->drain_low = low_water;
    ex->ops->watch_drain(ex);
    /* Watching may have sent what was queued. */
    if (ex->ops->pending(ex) > low_water) return true;
    res->on_drain = NULL;
    return false;
}

xErrno xHttpExchangeSpliceSink(xHttpExchange *ex, xConn **sink) {
    *sink = NULL;
    if (ex->res.ended || ex->res.aborted) return XERR_STATE;
    if (ex->filter || !ex->ops->splice_sink || !ex->res.length_declared) return XERR_INVALID;
    return ex->ops->splice_sink(ex, sink);
}

void xHttpExchangeOnFlushed(xHttpExchange *ex, void (*fn)(xHttpResponse *res, void *arg), void *arg) {
    xHttpResponse *res = &ex->res;
    res->on_drain = fn;
    res->on_drain_arg = arg;
    res->drain_low = 0;
    ex->ops->watch_drain(ex);
}

xErrno xHttpResponseReset(xHttpResponse *res) {
    if (res->ended) return XERR_STATE;
    xHttpExchange *ex = xHttpExchangeOfResponse(res);
    res->on_drain = NULL;
    res->on_abort = NULL;                      /* the handler lets go here, not in a callback */
    if (res->aborted) return ex->ops->end(ex); /* the client is gone already: nothing to cut */
    xHttpExchangeFinished(ex, res->head_sent ? res->status : 499, res->body_len);
    ex->ops->reset(ex);
    return XOK;
}

bool xHttpResponseAborted(const xHttpResponse *res) { return res->aborted; }

void xHttpResponseOnAbort(xHttpResponse *res, void (*fn)(xHttpResponse *res, void *arg), void *arg) {
    res->on_abort = fn;
    res->on_abort_arg = arg;
}

bool xHttpExchangeAbort(xHttpExchange *ex) {
    ex->res.aborted = true;
    xHttpExchangeFinished(ex, ex->res.head_sent ? ex->res.status : 499, ex->res.body_len);
    if (!ex->res.on_abort || ex->res.blocking_jobs) return false;
    void (*fn)(xHttpResponse *, void *) = ex->res.on_abort;
    ex->res.on_abort = NULL; /* told once */
    fn(&ex->res, ex->res.on_abort_arg);
    return true;
}

const char *xHttpStatusReason(int status) {
    switch (status) {
    case 100: return "Continue";
    case 101: return "Switching Protocols";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 206: return "Partial Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 303: return "See Other";
    case 304: return "Not Modified";
    case 307: return "Temporary Redirect";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 416: return "Range Not Satisfiable";
    case 417: return "Expectation Failed";
    case 425: return "Too Early";
    case 426: return "Upgrade Required";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    }
    return "Unknown";
}

bool xHttpRequestTlsSized(const xHttpRequest *req, xTlsInfo *info, size_t size) {
    xTlsInfo full;
    if (!xConnTlsInfo(req->conn, &full)) return false;
    xSizedExport(info, size, &full, sizeof full);
    return true;
}

/* ---- The connection's facts ---- */

void xHttpRequestClient(const xHttpRequest *req, xNetAddr *client) {
    const xHttpContext *ctx = xHttpContextOf(req->conn); /* none for a connection made by hand */
    const xProxyTrust *trust = ctx ? ctx->forwarded : NULL;
    if (!trust) {
        *client = req->conn->addr;
        return;
    }
    xHttpForwardedClient(req->headers, req->num_headers, trust, &req->conn->addr, client);
}

/* The last address this thread wrote as text: a worker's requests come from
 * few clients, and a proxy asks for the text on every one (X-Forwarded-For). */
static _Thread_local struct {
    uint8_t family; /* 0: none yet */
    uint8_t bytes[16];
    char text[sizeof((xHttpPeer *)0)->address];
} last_peer;

bool xHttpRequestPeerSized(const xHttpRequest *req, xHttpPeer *peer, size_t size) {
    if (!req->conn) return false;
    xNetAddr client;
    xHttpRequestClient(req, &client);
    const xNetAddr *addr = &client;
    xHttpPeer full = {.family = addr->family, .port = addr->port, .local_port = addr->local_port};
    if (addr->family && addr->family == last_peer.family && memcmp(addr->bytes, last_peer.bytes, 16) == 0) {
        memcpy(full.address, last_peer.text, sizeof full.address);
    } else {
        if (!xNetAddrFormat(addr, full.address, sizeof full.address)) return false;
        last_peer.family = addr->family;
        memcpy(last_peer.bytes, addr->bytes, 16);
        memcpy(last_peer.text, full.address, sizeof full.address);
    }
    xSizedExport(peer, size, &full, sizeof full);
    return true;
}

const char *xHttpRequestScheme(const xHttpRequest *req) {
    return req->conn && req->conn->transport->secure ? "https" : "http";
}
