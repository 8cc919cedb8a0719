/* client.c — the HTTP/1.1 upstream client (<xhttp/client.h>): upstreams,
 * per-loop pools of kept-alive connections, requests and their timeouts.
 *
 * A connection (xClientConn) is connecting (its own watch and timer, until
 * the socket is writable), then an xConn of the client's own network
 * context, idle in its pool or carrying one request. A request is queued,
 * then attached to a connection: its head and body go into the connection's
 * output queue, the response is read in place in the connection's read
 * buffer with the strict response parser (http1/http1_parser.h) and handed
 * to the caller piece by piece. One timer per request runs the timeout of
 * the phase it is in, a second the total. Any error closes the connection:
 * only a response read to its end, from a request sent whole, gives a
 * connection back to the pool. */
#include <xhttp/client.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "xhttp/client/client_internal.h"
#include "xhttp/client/client_splice.h"
#include "xnet/splice.h"
#include "xhttp/core/tokens.h"

_Static_assert(sizeof(xHttpClientField) == sizeof(xHttp1Header), "a response field is the parser's");

static const xConnProtocol client_protocol;
static void attach(xHttpClientRequest *req, xClientConn *cc);
static void fail(xHttpClientRequest *req, xHttpClientError error);
static void read_response(xClientConn *cc);
static bool start_connect(xClientConn *cc);

/* ---- Errors and settings ---- */

const char *xHttpClientErrorString(xHttpClientError error) {
    switch (error) {
    case XHTTP_CLIENT_REFUSED: return "connection refused";
    case XHTTP_CLIENT_CONNECT_TIMEOUT: return "connect timeout";
    case XHTTP_CLIENT_SEND_TIMEOUT: return "send timeout";
    case XHTTP_CLIENT_FIRST_BYTE_TIMEOUT: return "first byte timeout";
    case XHTTP_CLIENT_IDLE_TIMEOUT: return "idle timeout";
    case XHTTP_CLIENT_TOTAL_TIMEOUT: return "total timeout";
    case XHTTP_CLIENT_RESET: return "connection closed before the response ended";
    case XHTTP_CLIENT_BAD_RESPONSE: return "invalid response";
    case XHTTP_CLIENT_NO_MEMORY: return "out of memory";
    case XHTTP_CLIENT_RESOLVE: return "name did not resolve";
    case XHTTP_CLIENT_TLS: return "TLS handshake failed";
    }
    return "unknown error";
}

void xHttpUpstreamConfInit(xHttpUpstreamConf *conf) {
    *conf = (xHttpUpstreamConf){.struct_size = sizeof *conf,
                                .connect_timeout_ms = 5000,
                                .send_timeout_ms = 30000,
                                .first_byte_timeout_ms = 60000,
                                .idle_timeout_ms = 60000,
                                .keepalive_ms = 30000,
                                .max_idle = 32,
                                .max_conns = 256,
                                .max_queue = 4096,
                                .max_head_size = 32u << 10,
                                .max_fields = 100,
                                .resolve_timeout_ms = 5000,
                                .tls_verify = true};
}

void xHttpClientRequestOptsInit(xHttpClientRequestOpts *opts) {
    *opts = (xHttpClientRequestOpts){.struct_size = sizeof *opts, .method = {"GET", 3}, .target = {"/", 1}};
}

/* ---- Upstreams ---- */

/* The length of url's scheme with its "://" (http or https), 0 for another. */
static size_t scheme_len(const char *url) {
    return strncmp(url, "http://", 7) == 0 ? 7 : strncmp(url, "https://", 8) == 0 ? 8 : 0;
}

/* Splits "http[s]://host[:port]" into host and port (80 or 443 by default). */
static bool split_url(const char *url, char *host, size_t host_cap, char *port, size_t port_cap) {
    size_t skip = scheme_len(url);
    if (!skip) return false;
    const char *h = url + skip, *end = h + strcspn(h, "/");
    if (*end == '/' && end[1] != '\0') return false; /* a path: not an origin */
    const char *colon = NULL, *host_end;
    if (*h == '[') {
        const char *close = memchr(h, ']', (size_t)(end - h));
        if (!close) return false;
        host_end = close;
        h++;
        if (close + 1 < end) colon = close[1] == ':' ? close + 1 : NULL;
        if (close + 1 < end && !colon) return false;
    } else {
        colon = memchr(h, ':', (size_t)(end - h));
        host_end = colon ? colon : end;
    }
    size_t hl = (size_t)(host_end - h), pl = colon ? (size_t)(end - colon - 1) : 3;
    if (hl == 0 || hl >= host_cap || pl == 0 || pl >= port_cap) return false;
    memcpy(host, h, hl);
    host[hl] = '\0';
    if (!colon) {
        snprintf(port, port_cap, "%s", skip == 8 ? "443" : "80");
        return true;
    }
    memcpy(port, colon + 1, pl);
    port[pl] = '\0';
    for (size_t i = 0; i < pl; i++)
        if (port[i] < '0' || port[i] > '9') return false;
    return atoi(port) > 0 && atoi(port) < 65536;
}

xErrno xHttpUpstreamCreate(const char *url, const xHttpUpstreamConf *conf, xHttpUpstream **out) {
    char host[256], port[8];
    *out = NULL;
    if (!url || !split_url(url, host, sizeof host, port, sizeof port)) return XERR_INVALID;
    xHttpUpstream *up = calloc(1, sizeof *up);
    if (!up) return XERR_NOMEM;
    xHttpUpstreamConfInit(&up->conf);
    if (conf)
        memcpy(&up->conf, conf, conf->struct_size < sizeof up->conf ? conf->struct_size : sizeof up->conf);
    up->conf.struct_size = sizeof up->conf;
    if (up->conf.max_head_size > CLIENT_BLOCK - 4096) up->conf.max_head_size = CLIENT_BLOCK - 4096;
    if (up->conf.max_fields == 0) up->conf.max_fields = 1;
    if (up->conf.max_conns == 0) up->conf.max_conns = 1;
    memcpy(up->host, host, sizeof up->host);
    up->h2 = up->conf.protocol == XHTTP_UPSTREAM_HTTP2;
    up->port = (uint16_t)atoi(port);
    /* An address literal needs no lookup; anything else is a name. */
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST},
                    *res = NULL;
    if (getaddrinfo(host, port, &hints, &res) == 0 && res) {
        up->literal = true;
        memcpy(&up->literal_addrs.addr[0], res->ai_addr, res->ai_addrlen);
        up->literal_addrs.len[0] = res->ai_addrlen;
        up->literal_addrs.count = 1;
        freeaddrinfo(res);
    }
    up->conf.resolvers = NULL;
    if (conf && conf->struct_size > offsetof(xHttpUpstreamConf, resolvers) && conf->resolvers &&
        !(up->conf.resolvers = strdup(conf->resolvers))) {
        free(up);
        return XERR_NOMEM;
    }
    if (up->conf.resolvers && !xResolverServersValid(up->conf.resolvers)) {
        xHttpUpstreamDestroy(up);
        return XERR_INVALID;
    }
    /* The CA file is read now; the name is the TLS context's own copy. */
    const char *ca_file = up->conf.tls_ca_file, *server_name = up->conf.tls_server_name;
    up->conf.tls_ca_file = up->conf.tls_server_name = NULL;
    if (scheme_len(url) == 8) {
        char why[256];
        up->tls = xClientTlsCreate(host, up->literal, server_name, ca_file, up->conf.tls_verify,
                                   up->conf.protocol == XHTTP_UPSTREAM_HTTP2, why, sizeof why);
        if (!up->tls) {
            xHttpUpstreamDestroy(up);
            return XERR_INVALID;
        }
    }
    const char *a = url + scheme_len(url);
    size_t alen = strcspn(a, "/");
    memcpy(up->authority, a, alen < sizeof up->authority ? alen : sizeof up->authority - 1);
    *out = up;
    return XOK;
}

void xHttpUpstreamDestroy(xHttpUpstream *upstream) {
    if (!upstream) return;
    free((char *)upstream->conf.resolvers);
    xClientTlsDestroy(upstream->tls);
    free(upstream);
}

const char *xHttpUpstreamAuthority(const xHttpUpstream *upstream) { return upstream->authority; }

/* ---- Clients and pools ---- */

xHttpClient *xHttpClientCreate(xEventLoop *loop) {
    xHttpClient *client = calloc(1, sizeof *client);
    if (!client) return NULL;
    client->loop = loop;
    /* No send timeout of the connection's own: the requests run theirs. */
    if (xNetContextInit(&client->net, loop, CLIENT_BLOCK, CLIENT_SPARE_BLOCKS, 0) != XOK) {
        free(client);
        return NULL;
    }
    return client;
}

static xUpstreamPool *pool_of(xHttpClient *client, xHttpUpstream *upstream, bool make) {
    for (xUpstreamPool *p = client->pools; p; p = p->next)
        if (p->upstream == upstream) return p;
    if (!make) return NULL;
    xUpstreamPool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->upstream = upstream;
    p->client = client;
    if (upstream->literal) {
        p->addrs = upstream->literal_addrs;
        p->addr_state = XADDR_READY;
        p->addrs_until_ms = UINT64_MAX;
    }
    p->next = client->pools;
    client->pools = p;
    return p;
}

void xHttpClientGetStats(const xHttpClient *client, const xHttpUpstream *upstream, xHttpClientStats *stats) {
    *stats = (xHttpClientStats){0};
    const xUpstreamPool *p = pool_of((xHttpClient *)client, (xHttpUpstream *)upstream, false);
    if (!p) return;
    *stats = (xHttpClientStats){.connections_opened = p->connections_opened,
                                .requests = p->requests,
                                .reused = p->reused,
                                .open = p->open,
                                .idle = p->idle_count,
                                .queued = p->queued};
}

/* The pool's list a connection is on: idle or connecting. */
static xClientConn **list_of(xClientConn *cc) {
    return cc->state == XCC_IDLE ? &cc->pool->idle : &cc->pool->connecting;
}

static void list_push(xClientConn *cc) {
    xClientConn **head = list_of(cc);
    cc->prev = NULL;
    cc->next = *head;
    if (*head) (*head)->prev = cc;
    *head = cc;
    if (cc->state == XCC_IDLE) cc->pool->idle_count++;
}

static void list_unlink(xClientConn *cc) {
    xClientConn **head = list_of(cc);
    if (cc->prev)
        cc->prev->next = cc->next;
    else
        *head = cc->next;
    if (cc->next) cc->next->prev = cc->prev;
    cc->prev = cc->next = NULL;
    if (cc->state == XCC_IDLE) cc->pool->idle_count--;
}

static void drop_conn(xClientConn *cc);

static void free_request(xHttpClientRequest *req) {
    xHttpClient *client = req->client;
    xTimerStop(client->loop, &req->timer);
    xTimerStop(client->loop, &req->total_timer);
    /* HTTP/2's buffers go with every request: a spare keeps only what
     * new_request hands on (out and the fields' room). */
    if (req->h2_head.data) xBufferFree(&req->h2_head); /* none on HTTP/1.1: two calls to free(NULL) saved */
    if (req->h2_held.data) xBufferFree(&req->h2_held);
    /* int: under ASan the limit is 0, and an unsigned compare always false */
    if ((int)client->spare_count < CLIENT_SPARE_REQUESTS) {
        if (req->out.cap > CLIENT_SPARE_OUT) xBufferFree(&req->out);
        req->out.len = 0;
        req->next_queued = client->spare;
        client->spare = req;
        client->spare_count++;
        return;
    }
    xBufferFree(&req->out);
    free(req->fields);
    free(req);
}

/* A request's memory: a spare one if it has the room, else new. Only its
 * fields' room and out buffer are kept; the caller sets the rest. */
static xHttpClientRequest *new_request(xHttpClient *client, size_t max_fields) {
    xHttpClientRequest *req = client->spare;
    if (req && req->fields_cap >= max_fields) {
        client->spare = req->next_queued;
        client->spare_count--;
        return req;
    }
    req = malloc(sizeof *req);
    xHttp1Header *fields = req ? malloc(max_fields * sizeof *fields) : NULL;
    if (!fields) {
        free(req);
        return NULL;
    }
    req->fields = fields;
    req->fields_cap = max_fields;
    req->out = (xBuffer){0};
    return req;
}

static void free_spares(xHttpClient *client) {
    while (client->spare) {
        xHttpClientRequest *req = client->spare;
        client->spare = req->next_queued;
        xBufferFree(&req->out);
        free(req->fields);
        free(req);
    }
    client->spare_count = 0;
}

/* Queues req behind those waiting for a connection of p (or its HTTP/2 session). */
static void queue_last(xUpstreamPool *p, xHttpClientRequest *req) {
    if (p->queue_tail)
        p->queue_tail->next_queued = req;
    else
        p->queue_head = req;
    p->queue_tail = req;
    p->queued++;
}

/* Queues req before them: it was on its way already (a retry, a refused stream). */
static void queue_first(xUpstreamPool *p, xHttpClientRequest *req) {
    req->next_queued = p->queue_head;
    p->queue_head = req;
    if (!p->queue_tail) p->queue_tail = req;
    p->queued++;
}

static void unqueue(xHttpClientRequest *req) {
    xUpstreamPool *p = req->pool;
    xHttpClientRequest **at = &p->queue_head, *prev = NULL;
    while (*at && *at != req) {
        prev = *at;
        at = &(*at)->next_queued;
    }
    if (!*at) return;
    *at = req->next_queued;
    if (p->queue_tail == req) p->queue_tail = prev;
    p->queued--;
}

void xHttpClientDestroy(xHttpClient *client) {
    if (!client) return;
    client->destroying = true;
    for (xUpstreamPool *p = client->pools; p; p = p->next) {
        xResolverDestroy(p->resolver); /* its lookups end untold */
        p->resolver = NULL;
        while (p->queue_head) {
            xHttpClientRequest *req = p->queue_head;
            unqueue(req);
            free_request(req);
        }
    }
    /* Closing a connection frees its request (on_close, told nothing). */
    for (xUpstreamPool *p = client->pools; p; p = p->next) {
        while (p->idle) {
            xClientConn *cc = p->idle;
            list_unlink(cc);
            cc->state = XCC_BUSY;
            xConnClose(cc->conn);
        }
    }
    while (client->net.conns) {
        xClientConn *cc = client->net.conns->proto_state;
        if (cc->req) cc->req->cancelled = true;
        xConnClose(client->net.conns);
    }
    /* Connections still connecting have no xConn yet. */
    for (xUpstreamPool *p = client->pools; p; p = p->next) {
        while (p->connecting) {
            xClientConn *cc = p->connecting;
            if (cc->req) {
                cc->req->cc = NULL;
                free_request(cc->req);
                cc->req = NULL;
            }
            drop_conn(cc);
        }
    }
    for (xUpstreamPool *p = client->pools, *next; p; p = next) {
        next = p->next;
        if (p->tls_session) SSL_SESSION_free(p->tls_session);
        free(p);
    }
    free_spares(client);
    xNetContextDestroy(&client->net);
    free(client);
}

/* The request is over: freed now, or once the callback under way returns. */
static void release_req(xHttpClientRequest *req) {
    if (req->in_callback)
        req->free_owed = true;
    else
        free_request(req);
}

/* After a call into the caller: false when the request is over (freed if
 * nothing else holds it). */
static bool survived(xHttpClientRequest *req) {
    if (!req->cancelled) return true;
    if (!req->in_callback && req->free_owed) free_request(req);
    return false;
}

/* ---- Timers ---- */

static uint32_t phase_timeout(const xHttpClientRequest *req, xHttpClientError *error) {
    const xHttpUpstreamConf *c = &req->pool->upstream->conf;
    switch (req->phase) {
    case XREQ_CONNECTING: *error = XHTTP_CLIENT_CONNECT_TIMEOUT; return c->connect_timeout_ms;
    case XREQ_SENDING: *error = XHTTP_CLIENT_SEND_TIMEOUT; return c->send_timeout_ms;
    case XREQ_WAITING: *error = XHTTP_CLIENT_FIRST_BYTE_TIMEOUT; return c->first_byte_timeout_ms;
    case XREQ_RECEIVING: *error = XHTTP_CLIENT_IDLE_TIMEOUT; return req->paused ? 0 : c->idle_timeout_ms;
    default: return 0;
    }
}

static void arm_phase(xHttpClientRequest *req) {
    xHttpClientError error = XHTTP_CLIENT_RESET;
    uint32_t ms = phase_timeout(req, &error);
    if (ms)
        xTimerStart(req->client->loop, &req->timer, ms);
    else
        xTimerStop(req->client->loop, &req->timer);
}

static void enter(xHttpClientRequest *req, xRequestPhase phase) {
    req->phase = phase;
    arm_phase(req);
}

static void on_phase_timer(xEventLoop *loop, xTimer *timer, void *arg) {
    (void)loop, (void)timer;
    xHttpClientRequest *req = arg;
    xHttpClientError error = XHTTP_CLIENT_RESET;
    phase_timeout(req, &error);
    fail(req, error);
}

static void on_total_timer(xEventLoop *loop, xTimer *timer, void *arg) {
    (void)loop, (void)timer;
    fail(arg, XHTTP_CLIENT_TOTAL_TIMEOUT);
}

/* ---- Connections ---- */

static void conn_gone(xClientConn *cc) {
    xUpstreamPool *p = cc->pool;
    if (cc->state == XCC_IDLE || cc->state == XCC_CONNECTING) list_unlink(cc);
    cc->state = XCC_GONE;
    p->open--;
}

static void start_next_queued(xUpstreamPool *p);

/* A connection that will carry nothing more: its request (if any) was
 * detached first. */
static void drop_conn(xClientConn *cc) {
    if (cc->conn) {
        xConnClose(cc->conn); /* on_close accounts for it */
        return;
    }
    /* Still connecting (or waiting for addresses): no xConn owns it yet. */
    xUpstreamPool *p = cc->pool;
    if (cc->ssl) SSL_free(cc->ssl);
    if (cc->fd >= 0) {
        xEventLoopRemove(p->client->loop, cc->fd);
        close(cc->fd);
    }
    conn_gone(cc);
    free(cc);
    start_next_queued(p);
}

/* A connection is free: the next queued request takes it, else the pool,
 * else it closes. */
static bool same_preface(const xClientConn *cc, const xHttpClientRequest *req) {
    return cc->preface_len == req->preface_len && memcmp(cc->preface, req->preface, cc->preface_len) == 0;
}

static void conn_free_for_use(xClientConn *cc) {
    xUpstreamPool *p = cc->pool;
    cc->req = NULL;
    if (p->queue_head && !same_preface(cc, p->queue_head)) {
        /* Made for another client (PROXY): its slot goes to a new connection. */
        cc->state = XCC_BUSY;
        xConnClose(cc->conn);
        return;
    }
    if (p->queue_head) {
        xHttpClientRequest *next = p->queue_head;
        unqueue(next);
        p->reused++;
        attach(next, cc);
        return;
    }
    if (p->idle_count >= p->upstream->conf.max_idle) {
        cc->state = XCC_BUSY;
        xConnClose(cc->conn);
        return;
    }
    cc->state = XCC_IDLE;
    list_push(cc);
    cc->idle_since_ms = xEventLoopNowMs(p->client->loop);
    /* A keep-alive timer still running from an earlier spell in the pool
     * ends no later than one armed now would: it is left to fire and look
     * (on_timeout). Re-arming it as every request took the connection and
     * gave it back cost a wheel removal and insertion a request. */
    if (cc->keepalive_armed && !cc->conn->send_armed && xTimerActive(&cc->conn->timer)) return;
    xConnSetTimeout(cc->conn, p->upstream->conf.keepalive_ms);
    cc->keepalive_armed = true;
}

/* The socket's connect(2) ended: on to the name's next address after a
 * failure, else the TLS handshake (https), else the connection is made. */
static void on_connect_io(xEventLoop *loop, int fd, unsigned events, void *arg) {
    (void)events;
    xClientConn *cc = arg;
    xUpstreamPool *p = cc->pool;
    if (!cc->ssl) {
        int err = cc->connect_errno;
        socklen_t len = sizeof err;
        if (!err && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
        if (err == EINPROGRESS || err == EALREADY) return;
        if (err) {
            if (cc->addr_tries < p->addrs.count) { /* the name's next address */
                xEventLoopRemove(loop, fd);
                close(fd);
                cc->fd = -1;
                cc->addr_index++;
                if (start_connect(cc)) return;
            }
            fail(cc->req, XHTTP_CLIENT_REFUSED); /* closes the socket */
            return;
        }
        p->addr_first = cc->addr_index;
        /* The preface (a PROXY header) comes before anything else, TLS too;
         * a fresh socket takes its few dozen bytes whole. */
        if (cc->preface_len &&
            send(fd, cc->preface, cc->preface_len, MSG_NOSIGNAL) != (ssize_t)cc->preface_len) {
            fail(cc->req, XHTTP_CLIENT_RESET);
            return;
        }
        if (p->upstream->tls && !(cc->ssl = xClientTlsNew(p->upstream->tls, fd, &p->tls_session))) {
            fail(cc->req, XHTTP_CLIENT_NO_MEMORY);
            return;
        }
    }
    if (cc->ssl) {
        xHttpClientRequest *req = cc->req;
        switch (xClientTlsHandshake(cc->ssl, req->detail, sizeof req->detail)) {
        case XCTLS_WANT_READ: xEventLoopModify(loop, fd, XEV_READ); return;
        case XCTLS_WANT_WRITE: xEventLoopModify(loop, fd, XEV_WRITE); return;
        case XCTLS_FAILED: fail(req, XHTTP_CLIENT_TLS); return;
        case XCTLS_DONE: break;
        }
    }
    xEventLoopRemove(loop, fd);
    list_unlink(cc);
    cc->state = XCC_BUSY;
    SSL *ssl = cc->ssl;
    cc->ssl = NULL;
    cc->conn = xConnCreate(&p->client->net, fd, NULL, &client_protocol, cc);
    cc->fd = -1;
    if (!cc->conn) {
        if (ssl) SSL_free(ssl);
        xHttpClientRequest *req = cc->req;
        conn_gone(cc);
        free(cc);
        if (req) {
            req->cc = NULL;
            fail(req, XHTTP_CLIENT_NO_MEMORY);
        }
        start_next_queued(p);
        return;
    }
    if (ssl) xClientTlsAttach(cc->conn, ssl);
    if (p->upstream->h2) {
        if (!xClientH2Begin(cc)) xConnClose(cc->conn); /* its request hears RESET */
        return;
    }
    attach(cc->req, cc);
}

/* Starts connect(2) to the pool's address cc->addr_index (taken modulo
 * their count: a refresh may have changed them). False when no socket
 * could be made or watched. */
static bool start_connect(xClientConn *cc) {
    xUpstreamPool *p = cc->pool;
    cc->addr_index %= p->addrs.count;
    const struct sockaddr_storage *addr = &p->addrs.addr[cc->addr_index];
    int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    cc->fd = fd;
    cc->connect_errno = 0;
    cc->addr_tries++;
    p->connections_opened++;
    /* Refused at once, the error is said when the watch reports, on a
     * later turn: callbacks never run within Start. */
    if (connect(fd, (const struct sockaddr *)addr, p->addrs.len[cc->addr_index]) != 0 && errno != EINPROGRESS)
        cc->connect_errno = errno;
    if (xEventLoopAdd(p->client->loop, fd, XEV_WRITE, on_connect_io, cc) != XOK) {
        close(fd);
        cc->fd = -1;
        return false;
    }
    return true;
}

static void on_resolved(void *arg, const xResolvedAddrs *addrs, const char *error);

/* Starts a lookup of the upstream's name: the first (connections wait for
 * it) or a refresh (they use the addresses they have). */
static bool look_up(xUpstreamPool *p) {
    const xHttpUpstreamConf *c = &p->upstream->conf;
    if (!p->resolver &&
        !(p->resolver = xResolverCreate(p->client->loop, c->resolvers, c->resolve_timeout_ms)))
        return false;
    if (!xResolverLookup(p->resolver, p->upstream->host, p->upstream->port, on_resolved, p)) return false;
    p->lookup_gen++;
    if (p->addr_state == XADDR_READY)
        p->refreshing = true;
    else
        p->addr_state = XADDR_RESOLVING;
    return true;
}

/* The first connection waiting for lookup gen, or NULL. */
static xClientConn *waiting_for(xUpstreamPool *p, unsigned gen) {
    for (xClientConn *cc = p->connecting; cc; cc = cc->next)
        if (cc->fd < 0 && cc->wait_gen == gen) return cc;
    return NULL;
}

static void on_resolved(void *arg, const xResolvedAddrs *addrs, const char *error) {
    xUpstreamPool *p = arg;
    unsigned gen = p->lookup_gen;
    uint64_t now = xEventLoopNowMs(p->client->loop);
    p->refreshing = false;
    if (addrs) {
        p->addrs = *addrs;
        p->addr_first = 0;
        p->addr_state = XADDR_READY;
        uint64_t ttl_ms = (uint64_t)addrs->ttl_s * 1000;
        uint32_t interval = p->upstream->conf.resolve_interval_ms;
        p->addrs_until_ms = now + (interval ? interval : ttl_ms > 1000 ? ttl_ms : 1000);
    } else if (p->addr_state == XADDR_READY) {
        p->addrs_until_ms = now + 1000; /* the old addresses go on; asked again in a second */
    } else {
        p->addr_state = XADDR_NONE;
    }
    /* A failure frees the connection, and the next queued request may start
     * a lookup of its own (a later gen): those wait for it. */
    for (xClientConn *cc; (cc = waiting_for(p, gen));) {
        if (p->addr_state != XADDR_READY) {
            snprintf(cc->req->detail, sizeof cc->req->detail, "%.80s: %.70s", p->upstream->host, error);
            fail(cc->req, XHTTP_CLIENT_RESOLVE);
        } else if (!start_connect(cc))
            fail(cc->req, XHTTP_CLIENT_NO_MEMORY);
    }
}

/* Opens a connection for req: connect(2) to the first address to try, or
 * a wait for the name's first lookup. False when it could not even start
 * (req is told nothing). */
static bool open_conn(xUpstreamPool *p, xHttpClientRequest *req) {
    xClientConn *cc = calloc(1, sizeof *cc);
    if (!cc) return false;
    *cc = (xClientConn){
        .pool = p, .state = XCC_CONNECTING, .fd = -1, .req = req, .preface_len = req->preface_len};
    memcpy(cc->preface, req->preface, req->preface_len);
    list_push(cc);
    p->open++;
    req->cc = cc;
    enter(req, XREQ_CONNECTING);
    bool started;
    if (p->addr_state == XADDR_READY) {
        if (!p->refreshing && xEventLoopNowMs(p->client->loop) >= p->addrs_until_ms) look_up(p);
        cc->addr_index = p->addr_first;
        started = start_connect(cc);
    } else {
        started = p->addr_state == XADDR_RESOLVING || look_up(p);
        cc->wait_gen = p->lookup_gen;
    }
    if (!started) {
        list_unlink(cc);
        p->open--;
        req->cc = NULL;
        free(cc);
    }
    return started;
}

static void start_next_queued(xUpstreamPool *p) {
    if (p->upstream->h2) { /* one connection carries them all */
        if (!p->h2 && p->open == p->draining && p->queue_head) {
            xHttpClientRequest *req = xClientDequeue(p);
            if (!open_conn(p, req)) fail(req, XHTTP_CLIENT_NO_MEMORY);
        }
        return;
    }
    while (p->queue_head && p->open < p->upstream->conf.max_conns) {
        xHttpClientRequest *req = p->queue_head;
        unqueue(req);
        if (!open_conn(p, req)) {
            fail(req, XHTTP_CLIENT_NO_MEMORY);
            return;
        }
    }
}

/* ---- Requests: the head and body going out ---- */

static bool put(xBuffer *b, const void *bytes, size_t n) { return xBufferAppend(b, bytes, n) == XOK; }

static bool valid_token(xStr s) {
    const unsigned char *p = (const unsigned char *)s.data;
    unsigned ok = s.len > 0;
    size_t i = 0;
    /* Four bytes a round, their verdicts ANDed: one branch where a branch a
     * byte cost more than the rest of the field's way up. */
    for (; i + 4 <= s.len; i += 4)
        ok &= (unsigned)(xHttpIsTokenChar(p[i]) & xHttpIsTokenChar(p[i + 1]) & xHttpIsTokenChar(p[i + 2]) &
                         xHttpIsTokenChar(p[i + 3]));
    for (; i < s.len; i++) ok &= xHttpIsTokenChar(p[i]);
    return ok;
}

/* Whether none of the eight bytes at p is below 0x20 or 0x7F: a word that
 * may hold either (a tab, or a bad byte) is false. */
static bool plain_word(const char *p) {
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t w;
    memcpy(&w, p, 8);
    uint64_t del = w ^ (0x7f * ones);
    return !(((w - 0x20 * ones) & ~w & highs) | ((del - ones) & ~del & highs));
}

/* A field value holds no control character but HTAB (RFC 9110 §5.5). Eight
 * bytes at a time, the last eight (overlapping) for the tail: a value whose
 * words all pass is good at once; one that may hold a tab or a bad byte is
 * looked at byte by byte from the word that did not pass. */
static bool valid_value(xStr s) {
    size_t i = 0;
    if (s.len >= 8) {
        while (i + 8 <= s.len && plain_word(s.data + i)) i += 8;
        if (i + 8 > s.len && (i == s.len || plain_word(s.data + s.len - 8))) return true;
    }
    for (; i < s.len; i++)
        if (!xHttpIsFieldChar((unsigned char)s.data[i])) return false;
    return true;
}

static bool valid_target(xStr s) {
    if (s.len == 0) return false;
    for (size_t i = 0; i < s.len; i++)
        if ((unsigned char)s.data[i] <= 0x20 || (unsigned char)s.data[i] >= 0x7F) return false;
    return true;
}

/* Copies n bytes at p and returns the end. A head's pieces are mostly
 * short: up to 16 bytes go as two overlapping loads and stores, inline,
 * where a call to memcpy cost as much again as the copy (14 a request). */
static char *copy_out(char *p, const void *bytes, size_t n) {
    const char *s = bytes;
    if (n >= 8 && n <= 16) {
        uint64_t head, tail;
        memcpy(&head, s, 8);
        memcpy(&tail, s + n - 8, 8);
        memcpy(p, &head, 8);
        memcpy(p + n - 8, &tail, 8);
    } else if (n >= 4 && n < 8) {
        uint32_t head, tail;
        memcpy(&head, s, 4);
        memcpy(&tail, s + n - 4, 4);
        memcpy(p, &head, 4);
        memcpy(p + n - 4, &tail, 4);
    } else if (n < 4) {
        for (size_t i = 0; i < n; i++) p[i] = s[i];
    } else {
        memcpy(p, s, n);
    }
    return p + n;
}

#define COPY_LIT(p, lit) copy_out(p, lit, sizeof(lit) - 1)

/* Writes the request head into req->out; false when it is malformed. The
 * head is checked and measured first, then written into room reserved once:
 * a piece at a time through xBufferAppend cost more than the rest of Start. */
static bool write_head(xHttpClientRequest *req, const xHttpClientRequestOpts *o) {
    if (!valid_token(o->method) || !valid_target(o->target)) return false;
    size_t size = o->method.len + 1 + o->target.len + 11 + 2;
    bool host = false;
    for (size_t i = 0; i < o->num_fields; i++) {
        const xHttpClientField *f = &o->fields[i];
        if (i >= o->num_checked_fields && (!valid_token(f->name) || !valid_value(f->value))) return false;
        host |= f->name.len == 4 && xHttpSameLower(f->name.data, "host", 4);
        size += f->name.len + 2 + f->value.len + 2;
    }
    const char *authority = host ? "" : req->pool->upstream->authority;
    size_t authority_len = strlen(authority);
    char num[XHTTP_DECIMAL_MAX];
    size_t num_len =
        req->body_length > 0 ? (size_t)(xHttpPutDecimal(num, (uint64_t)req->body_length) - num) : 0;
    bool says_empty =
        req->body_length == 0 && (xStrEqualsC(o->method, "POST") || xStrEqualsC(o->method, "PUT"));
    size += (req->upgrade ? 21 : 0) + (host ? 0 : 6 + authority_len + 2) + (num_len ? 16 + num_len + 2 : 0) +
            (req->body_length < 0 ? 28 : 0) + (says_empty ? 19 : 0);
    xBuffer *b = &req->out;
    if (xBufferReserve(b, size) != XOK) return false;
    char *p = b->data + b->len;
    p = copy_out(p, o->method.data, o->method.len);
    *p++ = ' ';
    p = copy_out(p, o->target.data, o->target.len);
    p = COPY_LIT(p, " HTTP/1.1\r\n");
    for (size_t i = 0; i < o->num_fields; i++) {
        const xHttpClientField *f = &o->fields[i];
        p = copy_out(p, f->name.data, f->name.len);
        p = COPY_LIT(p, ": ");
        p = copy_out(p, f->value.data, f->value.len);
        p = COPY_LIT(p, "\r\n");
    }
    if (req->upgrade) p = COPY_LIT(p, "Connection: upgrade\r\n");
    if (!host) {
        p = COPY_LIT(p, "Host: ");
        p = copy_out(p, authority, authority_len);
        p = COPY_LIT(p, "\r\n");
    }
    if (num_len) {
        p = COPY_LIT(p, "Content-Length: ");
        p = copy_out(p, num, num_len);
        p = COPY_LIT(p, "\r\n");
    } else if (req->body_length < 0) {
        p = COPY_LIT(p, "Transfer-Encoding: chunked\r\n");
    } else if (says_empty) {
        p = COPY_LIT(p, "Content-Length: 0\r\n"); /* RFC 9110 §8.6: a body-less POST says so */
    }
    p = COPY_LIT(p, "\r\n");
    b->len = (size_t)(p - b->data);
    return true;
}

/* A whole request, small, going onto a connection with nothing queued: the
 * socket's buffer, empty but for what the upstream has answered, takes it at
 * once, so it is sent at the turn's end with every other request started in
 * the turn (on io_uring in the loop's one submission, not a send(2) each),
 * and counts as gone now: its first-byte timeout runs. */
#define CLIENT_SOON_MAX (8u << 10) /* well within a socket's least send buffer (16 KiB) */

static bool soon_whole(const xHttpClientRequest *req, xConn *conn) {
    return req->phase == XREQ_SENDING && req->body_ended && req->out_given == 0 &&
           req->out.len <= CLIENT_SOON_MAX && xConnPending(conn) == 0;
}

/* Gives the connection what it has not had of req->out, and moves the
 * phase on once every byte is queued and gone. */
static void push_out(xHttpClientRequest *req) {
    if (req->h2) {
        xClientH2Push(req);
        return;
    }
    xClientConn *cc = req->cc;
    if (!cc || !cc->conn || cc->state != XCC_BUSY || xConnClosed(cc->conn)) return;
    xConn *conn = cc->conn;
    bool whole_soon = soon_whole(req, conn);
    if (req->out.len > req->out_given) {
        if (xConnWrite(conn, req->out.data + req->out_given, req->out.len - req->out_given) != XOK) {
            fail(req, XHTTP_CLIENT_NO_MEMORY);
            return;
        }
        req->out_given = req->out.len;
        if (req->held_whole && req->out.len > CLIENT_REPLAY_MAX) req->held_whole = false;
        if (!req->held_whole) {
            xBufferConsume(&req->out, req->out.len);
            req->out_given = 0;
        }
    }
    if (whole_soon) {
        xConnFlushSoon(conn);
        enter(req, XREQ_WAITING);
        return;
    }
    if (xConnPending(conn)) { /* what came now, or body bytes Write gave it straight */
        /* A body still to be written may follow in this same turn (a body
         * held whole is written right after Start): the head waits for the
         * turn's end, so that it leaves with the body's first bytes in one
         * send, and one segment, instead of alone. */
        if (!req->body_ended) {
            xConnFlushSoon(conn);
        } else {
            xConnFlush(conn);
            if (req->cc != cc || xConnClosed(conn)) return;
        }
    }
    bool sent = req->body_ended && xConnPending(conn) == 0;
    if (req->phase == XREQ_SENDING && sent) {
        enter(req, XREQ_WAITING);
    } else if (req->phase == XREQ_SENDING) {
        arm_phase(req); /* progress restarts the send timeout */
    }
}

/* A writer held back at BODY_HIGH writes nothing more until on_flushed,
 * which the connection owes it once its queue has drained, however that
 * happens (xConnWaitFlushed). HTTP/2's DATA waits for its windows instead. */
static void wait_flushed(xHttpClientRequest *req) {
    xClientConn *cc = req->cc;
    if (req->wants_body && !req->h2 && cc && cc->conn && cc->state == XCC_BUSY) xConnWaitFlushed(cc->conn);
}

/* A writer held back at BODY_HIGH hears when the queue is down to BODY_LOW.
 * Not from within Write: only where the client itself moved bytes on. */
static void maybe_want_body(xHttpClientRequest *req) {
    if (!req->wants_body || xHttpClientRequestPending(req) >= XHTTP_CLIENT_BODY_LOW) return;
    req->wants_body = false;
    if (!req->handlers.on_body_wanted) return;
    CALL(req, req->handlers.on_body_wanted(req, req->arg));
    survived(req);
}

static void attach(xHttpClientRequest *req, xClientConn *cc) {
    req->cc = cc;
    cc->req = req;
    cc->state = XCC_BUSY;
    /* The keep-alive timer runs on (conn_free_for_use), harmless while the
     * connection is busy: a send that blocks re-arms the timer for itself. */
    if (cc->conn->send_armed || !cc->keepalive_armed) {
        xConnSetTimeout(cc->conn, 0);
        cc->keepalive_armed = false;
    }
    req->out_given = 0;
    req->phase = XREQ_SENDING;
    /* A whole request that leaves at the turn's end is WAITING as soon as
     * push_out has given it over: no send timeout is started for it first. */
    bool soon = soon_whole(req, cc->conn);
    if (!soon) arm_phase(req);
    /* A send that fails (push_out sends a whole body at once) closes the
     * connection, whose close ends req: held until done here. */
    req->in_callback++;
    push_out(req);
    req->in_callback--;
    if (!survived(req) || req->cc != cc) return;
    wait_flushed(req); /* its body came while the connection was being made */
    if (soon && req->phase == XREQ_SENDING) arm_phase(req); /* push_out stopped short of it */
    /* A response may already wait (an early answer), or EOF; either may end
     * req, which is held until it is seen whether it did. */
    if (cc->conn->readable) {
        req->in_callback++;
        read_response(cc);
        req->in_callback--;
        if (!survived(req)) return;
    }
    if (req->cc == cc) maybe_want_body(req);
}

static bool retries_by_default(xStr method) {
    return xStrEqualsC(method, "GET") || xStrEqualsC(method, "HEAD") || xStrEqualsC(method, "OPTIONS") ||
           xStrEqualsC(method, "PUT") || xStrEqualsC(method, "DELETE");
}

xErrno xHttpClientStart(xHttpClient *client, xHttpUpstream *upstream, const xHttpClientRequestOpts *opts,
                        xHttpClientRequest **out) {
    xHttpClientRequestOpts o;
    if (opts->struct_size >= sizeof o) {
        o = *opts;
    } else { /* an older caller's: what it does not know of keeps its default */
        xHttpClientRequestOptsInit(&o);
        memcpy(&o, opts, opts->struct_size);
    }
    *out = NULL;
    if (!o.handlers || !o.handlers->on_head || !o.handlers->on_end || !o.handlers->on_error)
        return XERR_INVALID;
    xUpstreamPool *p = pool_of(client, upstream, true);
    if (!p) return XERR_NOMEM;
    bool needs_conn = !p->idle && p->open >= upstream->conf.max_conns;
    if (needs_conn && p->queued >= upstream->conf.max_queue) return XERR_LIMIT;
    xHttpClientRequest *req = new_request(client, upstream->conf.max_fields);
    if (!req) return XERR_NOMEM;
    xBuffer kept_out = req->out;
    xHttp1Header *fields = req->fields;
    size_t fields_cap = req->fields_cap;
    /* Zeroed up to the detail and preface only: a compound literal for the
     * whole request zeroed (and copied) their 270 bytes on every request. */
    memset(req, 0, offsetof(xHttpClientRequest, detail));
    req->detail[0] = '\0';
    req->client = client;
    req->out = kept_out;
    req->fields = fields;
    req->fields_cap = fields_cap;
    req->pool = p;
    req->handlers = *o.handlers;
    req->arg = o.arg;
    req->body_length = o.body_length;
    req->body_ended = o.body_length == 0;
    req->retry_on_stale = o.retry_on_stale || retries_by_default(o.method);
    req->held_whole = true;
    req->head_request = xStrEqualsC(o.method, "HEAD");
    req->upgrade = o.upgrade && o.body_length == 0;
    req->body_left = -1;
    xTimerInit(&req->timer, on_phase_timer, req);
    xTimerInit(&req->total_timer, on_total_timer, req);
    if (o.preface_len > XHTTP_CLIENT_PREFACE_MAX) {
        free_request(req);
        return XERR_INVALID;
    }
    if (o.preface_len) memcpy(req->preface, o.preface, o.preface_len);
    req->preface_len = (uint8_t)o.preface_len;
    if (!write_head(req, &o)) {
        free_request(req);
        return XERR_INVALID;
    }
    if (upstream->h2 && req->preface_len) { /* one connection carries every client's streams */
        free_request(req);
        return XERR_INVALID;
    }
    if (upstream->h2) { /* checked as HTTP/1.1 would be; sent as HPACK */
        xBufferConsume(&req->out, req->out.len);
        req->h2 = true;
        req->retry_on_stale = false;
        if (!xClientH2EncodeHead(req, &o)) {
            free_request(req);
            return XERR_INVALID;
        }
    }
    p->requests++;
    if (upstream->conf.total_timeout_ms)
        xTimerStart(client->loop, &req->total_timer, upstream->conf.total_timeout_ms);
    *out = req;
    if (req->h2) {
        if (p->h2 && xClientH2Take(p->h2, req)) return XOK;
        if (!p->h2 && p->open == p->draining) { /* none, or only sessions past a GOAWAY */
            if (open_conn(p, req)) return XOK;
            *out = NULL;
            free_request(req);
            return XERR_NOMEM;
        }
        req->phase = XREQ_QUEUED;
        queue_last(p, req);
        return XOK;
    }
    xClientConn *cc = p->idle;
    while (cc && !same_preface(cc, req)) cc = cc->next;
    if (!cc && p->idle && p->open >= upstream->conf.max_conns) {
        /* Every slot is held, some by idle connections made for other
         * clients (PROXY): the oldest one gives its slot up. */
        xClientConn *oldest = p->idle;
        while (oldest->next) oldest = oldest->next;
        list_unlink(oldest);
        oldest->state = XCC_BUSY;
        xConnClose(oldest->conn);
    }
    if (cc) {
        list_unlink(cc);
        p->reused++;
        attach(req, cc);
    } else if (p->open < upstream->conf.max_conns) {
        if (!open_conn(p, req)) {
            *out = NULL;
            free_request(req);
            return XERR_NOMEM;
        }
    } else {
        req->phase = XREQ_QUEUED;
        queue_last(p, req);
    }
    return XOK;
}

const char *xHttpClientRequestErrorDetail(const xHttpClientRequest *req) { return req->detail; }

size_t xHttpClientRequestPending(const xHttpClientRequest *req) {
    if (req->h2) return req->out.len - req->out_given; /* DATA leaves as the windows allow */
    size_t held = req->out.len - req->out_given;
    const xClientConn *cc = req->cc;
    return held + (cc && cc->conn && cc->state == XCC_BUSY ? xConnPending(cc->conn) : 0);
}

/* A writer past BODY_HIGH is held back until on_flushed. */
static void note_pending(xHttpClientRequest *req) {
    if (xHttpClientRequestPending(req) < XHTTP_CLIENT_BODY_HIGH) return;
    req->wants_body = true;
    wait_flushed(req);
}

/* A tunnel's bytes go as they are. */
static xErrno tunnel_write(xHttpClientRequest *req, const void *data, size_t len) {
    if (len && !put(&req->out, data, len)) return XERR_NOMEM;
    push_out(req);
    note_pending(req);
    return XOK;
}

/* Whether framed body bytes can skip req->out: the request is on an
 * HTTP/1.1 connection that has had all of out, and they could not be held for
 * a retry anyway. HTTP/2 frames its DATA from out. */
static bool goes_straight(const xHttpClientRequest *req, size_t framed) {
    const xClientConn *cc = req->cc;
    return !req->h2 && cc && cc->conn && cc->state == XCC_BUSY && !xConnClosed(cc->conn) &&
           req->out_given == req->out.len && (!req->held_whole || req->out.len + framed > CLIENT_REPLAY_MAX);
}

xErrno xHttpClientRequestWrite(xHttpClientRequest *req, const void *data, size_t len) {
    if (req->phase == XREQ_TUNNEL && !req->cancelled) return tunnel_write(req, data, len);
    if (req->body_ended || req->cancelled) return XERR_STATE;
    if (len == 0) return XOK;
    if (req->body_length >= 0 && req->body_written + len > (uint64_t)req->body_length) return XERR_INVALID;
    char line[24];
    size_t line_len =
        req->body_length < 0 && !req->h2 ? (size_t)snprintf(line, sizeof line, "%zx\r\n", len) : 0;
    size_t framed = line_len + len + (line_len ? 2 : 0);
    xErrno err = XOK;
    if (goes_straight(req, framed)) {
        /* Past what a retry could resend: straight to the connection, one
         * copy less. */
        xConn *conn = req->cc->conn;
        req->held_whole = false;
        xBufferConsume(&req->out, req->out.len);
        req->out_given = 0;
        /* Sent at once behind what the connection holds (the head, when
         * it waited for the body: push_out), copied only where the socket
         * did not take it. */
        struct iovec pieces[3];
        int count = 0;
        if (line_len) pieces[count++] = (struct iovec){line, line_len};
        pieces[count++] = (struct iovec){(void *)data, len};
        if (line_len) pieces[count++] = (struct iovec){"\r\n", 2};
        /* A send that fails closes the connection, and its close fails
         * the request (on_error) within this call: held until it returns. */
        req->in_callback++;
        err = xConnWriteNow(conn, pieces, count);
        req->in_callback--;
        if (!survived(req)) return XERR_STATE;
        if (err != XOK && err != XERR_CLOSED) return XERR_NOMEM;
    } else if (!(put(&req->out, line, line_len) && put(&req->out, data, len) &&
                 (!line_len || put(&req->out, "\r\n", 2)))) {
        return XERR_NOMEM;
    }
    req->body_written += len;
    /* HTTP/2 ends the stream with the body's last byte: a known length
     * written whole needs no End. */
    if (req->h2 && req->body_length >= 0 && req->body_written == (uint64_t)req->body_length)
        req->body_ended = true;
    push_out(req);
    note_pending(req);
    return XOK;
}

xErrno xHttpClientRequestSpliceSink(xHttpClientRequest *req, xConn **sink) {
    *sink = NULL;
    xClientConn *cc = req->cc;
    if (req->cancelled || req->body_ended) return XERR_STATE;
    if (req->h2 || req->body_length < 0 || req->phase == XREQ_TUNNEL) return XERR_INVALID;
    if (!cc || !cc->conn || cc->state != XCC_BUSY || xConnClosed(cc->conn)) {
        req->wants_body = true; /* not connected yet: attach tells the caller */
        return XOK;
    }
    xConn *conn = cc->conn;
    if (!xConnSplices(conn)) return XERR_INVALID;
    if (!xConnSpliceReady(conn) || req->out.len > req->out_given) {
        /* What waits (the head, bytes written before) goes first, now where
         * the socket takes it; a failure fails req within the calls. */
        req->in_callback++;
        push_out(req);
        if (req->cc == cc && xConnPending(conn)) xConnFlush(conn); /* or owed after a send in flight */
        req->in_callback--;
        if (!survived(req)) return XERR_STATE;
        if (req->cc != cc || req->cancelled) return XERR_STATE;
        if (!xConnSpliceReady(conn) || req->out.len > req->out_given) {
            req->wants_body = true; /* on_flushed tells the caller */
            wait_flushed(req);
            return XOK;
        }
    }
    *sink = conn;
    return XOK;
}

void xHttpClientRequestSpliced(xHttpClientRequest *req, size_t n) {
    if (req->held_whole) {
        req->held_whole = false;
        xBufferConsume(&req->out, req->out.len);
        req->out_given = 0;
    }
    req->body_written += n;
    req->wants_body = true; /* what the socket does not take now waits for on_flushed */
    arm_phase(req);         /* progress: the send timeout starts again */
}

void xHttpClientRequestTakeBody(xHttpClientRequest *req, xHttpClientBodyTaker taker, void *arg) {
    req->body_taker = taker;
    req->body_taker_arg = arg;
}

xErrno xHttpClientRequestEnd(xHttpClientRequest *req) {
    if (req->phase == XREQ_TUNNEL) return XOK; /* a tunnel ends when either side closes */
    if (req->h2 && req->body_ended && req->body_length > 0 && !req->cancelled)
        return XOK; /* ended by Write */
    if (req->body_ended || req->cancelled) return XERR_STATE;
    if (req->body_length >= 0 && req->body_written != (uint64_t)req->body_length) return XERR_INVALID;
    if (req->body_length < 0 && !req->h2 && !put(&req->out, "0\r\n\r\n", 5)) return XERR_NOMEM;
    req->body_ended = true;
    push_out(req);
    return XOK;
}

/* ---- Requests: ending ---- */

/* Detaches req from its connection (closing it: its state is unknown) or
 * its queue. */
static void detach(xHttpClientRequest *req) {
    xTimerStop(req->client->loop, &req->timer);
    xTimerStop(req->client->loop, &req->total_timer);
    if (req->session) {
        xClientH2Detach(req);
        return;
    }
    xClientConn *cc = req->cc;
    req->cc = NULL;
    if (req->phase == XREQ_QUEUED) {
        unqueue(req);
        return;
    }
    if (!cc) return;
    cc->req = NULL;
    drop_conn(cc);
}

/* Retries a request the upstream dropped on a reused connection before it
 * answered: the race between its keep-alive timeout and our request. */
static bool retry(xHttpClientRequest *req) {
    if (!req->retry_on_stale || req->retried || !req->held_whole || req->started || !req->body_ended)
        return false;
    xUpstreamPool *p = req->pool;
    req->retried = true;
    req->out_given = 0;
    req->body = XBODY_HEAD;
    req->head_scanned = 0;
    if (p->open < p->upstream->conf.max_conns) return open_conn(p, req);
    req->phase = XREQ_QUEUED;
    queue_first(p, req);
    return true;
}

static void fail(xHttpClientRequest *req, xHttpClientError error) {
    if (req->cancelled) return;
    bool stale = req->cc && req->cc->carried && error == XHTTP_CLIENT_RESET;
    /* HTTP/2's one connection could not be made: what queued behind it
     * would wait a connect timeout each, in turn. One goes on trying (the
     * next connection, opened as this one is dropped); the rest fail now. */
    xUpstreamPool *p = req->pool;
    bool h2_unmade = req->h2 && req->cc && req->cc->state == XCC_CONNECTING;
    detach(req);
    if (stale && retry(req)) return;
    req->cancelled = true; /* nothing more reaches the caller */
    CALL(req, req->handlers.on_error(req, error, req->started, req->arg));
    release_req(req);
    for (xHttpClientRequest *next; h2_unmade && (next = xClientDequeue(p));) fail(next, error);
}

/* The response was read whole: the request leaves its connection (which
 * the caller gives back or closes), then hears on_end (call_end). */
static void detach_finished(xHttpClientRequest *req) {
    xClientConn *cc = req->cc;
    xTimerStop(req->client->loop, &req->timer);
    xTimerStop(req->client->loop, &req->total_timer);
    req->cc = NULL;
    cc->req = NULL;
    req->cancelled = true;
}

static void call_end(xHttpClientRequest *req, const xHttp1Header *trailers, size_t n) {
    CALL(req, req->handlers.on_end(req, (const xHttpClientField *)trailers, n, req->arg));
    release_req(req);
}

static void finish(xHttpClientRequest *req, const xHttp1Header *trailers, size_t n) {
    detach_finished(req);
    call_end(req, trailers, n);
}

void xHttpClientRequestCancel(xHttpClientRequest *req) {
    if (!req || req->cancelled) return;
    req->cancelled = true;
    detach(req);
    release_req(req);
}

void xHttpClientRequestPause(xHttpClientRequest *req) {
    if (req->cancelled || req->paused) return;
    req->paused = true;
    if (req->phase == XREQ_RECEIVING) arm_phase(req);
}

void xHttpClientRequestResume(xHttpClientRequest *req) {
    if (req->cancelled || !req->paused) return;
    req->paused = false;
    if (req->phase == XREQ_RECEIVING) arm_phase(req);
    if (req->session) {
        xClientH2Resume(req);
        return;
    }
    xClientConn *cc = req->cc;
    if (cc && cc->conn && (cc->conn->readable || cc->conn->in.len)) read_response(cc);
}

/* ---- Requests: the response coming in ---- */

/* After a head: how its body is read. */
static xBodyRead body_kind(const xHttp1Response *r, int64_t *left) {
    switch (r->body) {
    case XHTTP1_BODY_LENGTH: *left = r->content_length; return XBODY_LENGTH;
    case XHTTP1_BODY_CHUNKED: return XBODY_CHUNKED;
    case XHTTP1_BODY_UNTIL_CLOSE: return XBODY_UNTIL_CLOSE;
    default: return XBODY_DONE;
    }
}

/* A 101 to a request that asked for it: the connection is a tunnel from
 * here, read until the upstream closes; what followed the head is the new
 * protocol's first bytes. */
static bool take_switch(xHttpClientRequest *req, xConn *conn, const xHttp1Response *r, int n) {
    req->started = true;
    req->keep_alive = false;
    req->held_whole = false;
    xBufferConsume(&req->out, req->out.len); /* the head, sent: nothing to replay */
    req->out_given = 0;
    req->body = XBODY_UNTIL_CLOSE;
    enter(req, XREQ_TUNNEL);
    xHttpClientResponse head = {.status = 101,
                                .minor_version = r->minor_version,
                                .reason = r->reason,
                                .fields = (const xHttpClientField *)r->headers,
                                .num_fields = r->num_headers,
                                .content_length = -1,
                                .has_body = true,
                                .fields_checked = true};
    CALL(req, req->handlers.on_head(req, &head, req->arg));
    xBufferConsume(&conn->in, (size_t)n);
    return survived(req);
}

/* Reads a head at the front of in. False when it is not whole yet or the
 * request ended (failed, or cancelled by on_head). */
static bool take_head(xHttpClientRequest *req, xConn *conn) {
    const xHttpUpstreamConf *c = &req->pool->upstream->conf;
    xHttp1Limits limits = {
        .max_request_line = c->max_head_size, .max_head = c->max_head_size, .max_headers = c->max_fields};
    xHttp1Response r = {.headers = req->fields};
    int n =
        xHttp1ParseResponse(conn->in.data, conn->in.len, req->head_scanned, &r, &limits, req->head_request);
    if (n == XHTTP1_INCOMPLETE) {
        req->head_scanned = conn->in.len;
        return false;
    }
    if (n < 0 || (r.status == 101 && !req->upgrade)) {
        fail(req, XHTTP_CLIENT_BAD_RESPONSE);
        return false;
    }
    req->head_scanned = 0;
    if (r.status == 101) return take_switch(req, conn, &r, n);
    if (r.status < 200) { /* 100 Continue, 103 Early Hints: the answer follows */
        xBufferConsume(&conn->in, (size_t)n);
        return true;
    }
    req->keep_alive = r.keep_alive;
    req->body = body_kind(&r, &req->body_left);
    req->started = true;
    xHttpClientResponse head = {.status = r.status,
                                .minor_version = r.minor_version,
                                .reason = r.reason,
                                .fields = (const xHttpClientField *)r.headers,
                                .num_fields = r.num_headers,
                                .content_length = r.content_length,
                                .has_body = req->body != XBODY_DONE,
                                .fields_checked = true};
    if (req->body == XBODY_CHUNKED) req->chunked = (xHttp1Chunked){.stop_at_trailers = true};
    CALL(req, req->handlers.on_head(req, &head, req->arg));
    xBufferConsume(&conn->in, (size_t)n);
    return survived(req);
}

static bool deliver(xHttpClientRequest *req, const char *data, size_t len) {
    if (len && req->handlers.on_body) CALL(req, req->handlers.on_body(req, data, len, req->arg));
    return survived(req);
}

/* Whether a connection whose response was read whole holds more that no
 * request asked for: bytes an upstream sent past its response's length (a
 * spliced body is taken to its length and no further, so they stay in the
 * socket), or its close. Its next request would read them as its answer:
 * such a connection is closed, not pooled. Reads only where the socket may
 * hold something (a spliced body's end leaves it readable). */
static bool holds_more(xConn *conn) {
    if (!conn->readable) return false;
    char sink[1];
    ssize_t n = xConnRecv(conn, sink, sizeof sink);
    return !(n < 0 && (errno == EAGAIN || errno == EINTR));
}

/* Moves the response on with what conn->in holds. Returns false when the
 * request is over (ended, failed or cancelled) or needs more bytes. */
static bool advance_response(xHttpClientRequest *req, xConn *conn) {
    xBuffer *in = &conn->in;
    switch (req->body) {
    case XBODY_HEAD: return in->len && take_head(req, conn);
    case XBODY_LENGTH: {
        size_t n = (uint64_t)req->body_left < in->len ? (size_t)req->body_left : in->len;
        if (n == 0) return false;
        req->body_left -= (int64_t)n;
        if (!req->body_left) req->body = XBODY_DONE;
        bool on = deliver(req, in->data, n);
        if (on) xBufferConsume(in, n);
        return on;
    }
    case XBODY_UNTIL_CLOSE: {
        size_t n = in->len;
        if (n == 0) return false;
        bool on = deliver(req, in->data, n);
        if (on) xBufferConsume(in, n);
        return on;
    }
    case XBODY_CHUNKED: {
        if (in->len == 0) return false;
        size_t got = 0;
        ssize_t used = xHttp1ChunkedDecode(&req->chunked, in->data, in->len, in->data, &got,
                                           CLIENT_CHUNK_LINE, CLIENT_TRAILERS_MAX);
        if (used < 0) {
            fail(req, XHTTP_CLIENT_BAD_RESPONSE);
            return false;
        }
        if (req->chunked.at_trailers) req->body = XBODY_TRAILERS;
        bool on = deliver(req, in->data, got);
        if (on) xBufferConsume(in, (size_t)used);
        return on && (used > 0 || req->body == XBODY_TRAILERS);
    }
    case XBODY_TRAILERS: {
        size_t n;
        int t = xHttp1ParseTrailers(in->data, in->len, req->fields, req->pool->upstream->conf.max_fields, &n,
                                    CLIENT_TRAILERS_MAX);
        if (t == XHTTP1_INCOMPLETE) return false;
        if (t < 0) {
            fail(req, XHTTP_CLIENT_BAD_RESPONSE);
            return false;
        }
        /* The trailers' views stay in `in` during on_end; consumed after. */
        bool reuse = req->keep_alive && in->len == (size_t)t && req->body_ended && xConnPending(conn) == 0 &&
                     !holds_more(conn);
        xClientConn *cc = req->cc;
        finish(req, req->fields, n);
        xBufferConsume(in, (size_t)t);
        if (reuse) {
            cc->carried = true;
            conn_free_for_use(cc);
        } else {
            xConnClose(conn);
        }
        return false;
    }
    case XBODY_DONE: {
        xClientConn *cc = req->cc;
        bool reuse = req->keep_alive && in->len == 0 && req->body_ended && xConnPending(conn) == 0 &&
                     !holds_more(conn);
        if (!reuse) {
            finish(req, NULL, 0);
            xConnClose(conn);
            return false;
        }
        /* Back in the pool before on_end: the caller's next request, which
         * on_end may start (a proxy's client sending its next one), finds
         * it idle instead of opening another. */
        detach_finished(req);
        cc->carried = true;
        conn_free_for_use(cc);
        call_end(req, NULL, 0);
        return false;
    }
    }
    return false;
}

/* The upstream closed (n == 0) or reset (n < 0) its side. */
static void input_ended(xHttpClientRequest *req, xConn *conn, ssize_t n) {
    if (n == 0 && req->body == XBODY_UNTIL_CLOSE) {
        finish(req, NULL, 0);
        xConnClose(conn);
        return;
    }
    fail(req, XHTTP_CLIENT_RESET);
}

/* Where read_response would read more of a Content-Length body with none
 * of it buffered: whether the request's taker moves it on from the socket
 * itself (xHttpClientRequestTakeBody). Not asked of conn->readable: a short
 * read clears it (the socket was drained then), yet read_response reads on
 * wherever the taker is not asked, and an upstream sending faster than the
 * loop turns kept that read going to the body's end, every byte copied. The
 * taker finds a drained socket as a read would (EAGAIN), at the same cost. */
static bool body_takeable(const xHttpClientRequest *req, const xConn *conn) {
    return req->body_taker && req->body == XBODY_LENGTH && conn->in.len == 0 && xConnSplices(conn);
}

/* Offers the socket to the taker. Returns the step read_response takes:
 * TOOK (advance again), LATER (stop reading now), READ (read as usual);
 * ENDED has failed req. */
static xClientTake take_body(xHttpClientRequest *req, xConn *conn) {
    size_t took = 0;
    xClientTake r;
    CALL(req, r = req->body_taker(req, conn, (uint64_t)req->body_left, &took, req->body_taker_arg));
    if (!survived(req)) return XCLIENT_TAKE_LATER;
    if (took) {
        req->body_left -= (int64_t)took;
        if (!req->body_left) req->body = XBODY_DONE;
        req->phase = XREQ_RECEIVING;
        return XCLIENT_TOOK;
    }
    if (r == XCLIENT_TAKE_ENDED) {
        input_ended(req, conn, 0); /* short of its length: failed */
        return XCLIENT_TAKE_LATER;
    }
    return r == XCLIENT_TOOK ? XCLIENT_TAKE_LATER : r;
}

static void read_response(xClientConn *cc) {
    xConn *conn = cc->conn;
    xHttpClientRequest *req = cc->req;
    xConnRetain(conn);
    /* Bytes came: the idle timeout restarts, but only once they are read,
     * and only for a request they did not end (most end with one read). */
    bool progress = false;
    while (req && cc->req == req && !req->paused && !xConnClosed(conn)) {
        while (advance_response(req, conn) && cc->req == req && !req->paused) {
        }
        if (cc->req != req || req->paused || xConnClosed(conn)) break;
        if (body_takeable(req, conn)) {
            xClientTake r = take_body(req, conn);
            if (r == XCLIENT_TOOK) {
                progress = true;
                continue;
            }
            if (r == XCLIENT_TAKE_LATER) break;
        }
        if (xBufferPoolAcquire(&conn->net->buffers, &conn->in) != XOK) {
            fail(req, XHTTP_CLIENT_NO_MEMORY);
            break;
        }
        xBuffer *in = &conn->in;
        if (in->len == in->cap) {
            /* A head over the block never fits: max_head_size is below it. */
            fail(req, XHTTP_CLIENT_BAD_RESPONSE);
            break;
        }
        ssize_t n = xConnRecv(conn, in->data + in->len, in->cap - in->len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) break;
        if (n <= 0) {
            input_ended(req, conn, n);
            break;
        }
        in->len += (size_t)n;
        if (req->phase == XREQ_TUNNEL) continue; /* no idle timeout: a tunnel may rest */
        req->phase = XREQ_RECEIVING;
        progress = true;
    }
    if (progress && cc->req == req && req->phase == XREQ_RECEIVING && !xConnClosed(conn)) arm_phase(req);
    if (!xConnClosed(conn) && conn->in.len == 0) xBufferPoolRelease(&conn->net->buffers, &conn->in);
    xConnRelease(conn);
}

/* ---- The connection's protocol ---- */

/* An idle connection hears only its end (or junk, which ends it too). */
static void idle_readable(xClientConn *cc) {
    char sink[512];
    ssize_t n = xConnRecv(cc->conn, sink, sizeof sink);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    xConnClose(cc->conn);
}

static void on_readable(xConn *conn) {
    xClientConn *cc = conn->proto_state;
    if (cc->state == XCC_IDLE) {
        idle_readable(cc);
    } else if (cc->req) {
        read_response(cc);
    } else if (!xConnClosed(conn)) {
        idle_readable(cc);
    }
}

static void on_flushed(xConn *conn) {
    xClientConn *cc = conn->proto_state;
    xHttpClientRequest *req = cc->req;
    if (!req) return;
    push_out(req);
    if (req->cc == cc) maybe_want_body(req);
}

/* The connection's own timer: a pooled connection's keep-alive, which may
 * have been armed for an earlier spell in the pool (conn_free_for_use): the
 * connection closes once idle that long, else the timer waits out the rest. */
static void on_timeout(xConn *conn) {
    xClientConn *cc = conn->proto_state;
    cc->keepalive_armed = false;
    if (cc->state != XCC_IDLE) return;
    uint64_t idle = xEventLoopNowMs(cc->pool->client->loop) - cc->idle_since_ms;
    uint32_t keepalive = cc->pool->upstream->conf.keepalive_ms;
    if (idle >= keepalive) {
        xConnClose(conn);
        return;
    }
    xConnSetTimeout(conn, (uint32_t)(keepalive - idle));
    cc->keepalive_armed = true;
}

static void on_close(xConn *conn) {
    xClientConn *cc = conn->proto_state;
    xUpstreamPool *p = cc->pool;
    xHttpClientRequest *req = cc->req;
    conn_gone(cc);
    if (req) {
        cc->req = NULL;
        req->cc = NULL;
        if (req->cancelled) {
            release_req(req); /* the client is being destroyed: say nothing */
        } else {
            bool stale = cc->carried && !req->started;
            xTimerStop(p->client->loop, &req->timer);
            xTimerStop(p->client->loop, &req->total_timer);
            if (!(stale && retry(req))) {
                req->cancelled = true;
                CALL(req, req->handlers.on_error(req, XHTTP_CLIENT_RESET, req->started, req->arg));
                release_req(req);
            }
        }
    }
    start_next_queued(p);
}

static void on_free(xConn *conn) { free(conn->proto_state); }

static const xConnProtocol client_protocol = {
    .on_readable = on_readable,
    .on_flushed = on_flushed,
    .on_timeout = on_timeout,
    .on_close = on_close,
    .on_free = on_free,
};

/* ---- What h2.c shares (client_internal.h) ---- */

void xClientRelease(xHttpClientRequest *req) { release_req(req); }
bool xClientSurvived(xHttpClientRequest *req) { return survived(req); }
void xClientFail(xHttpClientRequest *req, xHttpClientError error) { fail(req, error); }
void xClientEnter(xHttpClientRequest *req, xRequestPhase phase) { enter(req, phase); }
void xClientArm(xHttpClientRequest *req) { arm_phase(req); }
void xClientMaybeWantBody(xHttpClientRequest *req) { maybe_want_body(req); }
void xClientStartQueued(xUpstreamPool *p) { start_next_queued(p); }

void xClientRequeue(xHttpClientRequest *req) {
    xUpstreamPool *p = req->pool;
    req->cc = NULL;
    enter(req, XREQ_QUEUED);
    queue_first(p, req);
    start_next_queued(p);
}

xHttpClientRequest *xClientDequeue(xUpstreamPool *p) {
    xHttpClientRequest *req = p->queue_head;
    if (req) unqueue(req);
    return req;
}

/* An HTTP/2 session's connection closed (its streams are told already). */
void xClientConnClosed(xClientConn *cc) {
    conn_gone(cc);
    start_next_queued(cc->pool);
}
