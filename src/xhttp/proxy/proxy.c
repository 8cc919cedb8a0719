/* proxy.c — the reverse-proxy handler (<xhttp/proxy.h>): an upstream picked
 * from the group, the request's fields cleaned and added to, its body passed
 * on (whole or streamed with backpressure), the answer streamed back, and
 * failures turned into retries, 502s and 504s.
 *
 * One xProxyCall per proxied request, from the handler to the response's
 * end or the client's leaving. Only the public request and response API is
 * used: a slow client holds the upstream back through the response's drain
 * signal (xHttpResponsePending, xHttpResponseOnDrain) instead of filling
 * memory, and a failure after the head resets the response. */
#include <xhttp/proxy.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>

#include <xhttp/request.h>
#include <xhttp/response.h>

#include "xbase/text/base64.h"
#include "xhttp/core/context.h"
#include "xhttp/core/exchange.h"
#include "xhttp/core/finished.h"
#include "xhttp/core/tokens.h"
#include "xhttp/proxy/auth.h"
#include "xhttp/proxy/preface.h"
#include "xhttp/client/client_splice.h"
#include "xnet/connection.h"
#include "xnet/splice.h"

/* Output waiting for the client beyond which the upstream is no longer read,
 * and the level it must fall to before it is read again. */
#define PROXY_FRONT_HIGH (1u << 20)
#define PROXY_FRONT_LOW (256u << 10)
#define PROXY_MAX_FIELDS 128
/* Request bodies from this size are spliced (conf.splice_min's default):
 * below it, the two copies cost less than the pipe's four system calls. */
#define PROXY_SPLICE_MIN (32u << 10)
#define PROXY_FIELD_TEXT 8192 /* a name or value handed to the response, with its NUL */
#if defined(__SANITIZE_ADDRESS__)
#define PROXY_SPARE_CALLS 0 /* ASan sees a call used after its end only if it is freed */
#else
/* Ended calls a worker keeps for its next requests, as many as it has in
 * flight under a hundred clients: a call is 8 KiB, which malloc otherwise
 * took from its bins and gave back on every request. */
#define PROXY_SPARE_CALLS 128
#endif

typedef struct xProxyUpstream {
    xHttpUpstream *upstream;
    /* Passive health, shared by the workers: a racy count is good enough. */
    _Atomic unsigned failures;
    _Atomic uint64_t down_until_ms;
    _Atomic bool check_failed;  /* the last active health check did not pass */
    _Atomic unsigned in_flight; /* requests on it now, all workers: least-connections */
} xProxyUpstream;

typedef struct xProxyHealth xProxyHealth;

/* One upstream's health check in a round: its request while it is out. */
typedef struct xProxyProbe {
    xProxyHealth *health;
    size_t index;
    xHttpClientRequest *req;
    bool passed; /* a 2xx head came */
} xProxyProbe;

/* Active health checks, run by worker 0's client on its loop: a round of
 * probes every interval, each cut at the round's deadline. */
struct xProxyHealth {
    xHttpProxy *proxy;
    xHttpClient *client;
    xEventLoop *loop;
    xTimer round;
    xTimer deadline;
    xProxyProbe *probes;
};

typedef struct xProxyCall xProxyCall;

/* A worker's ended calls, kept for its next requests (PROXY_SPARE_CALLS). */
typedef struct xProxySpares {
    xProxyCall *head; /* linked by next_spare */
    unsigned count;
} xProxySpares;

struct xHttpProxy {
    xProxyUpstream *ups;
    size_t num_ups;
    xHttpProxyConf conf;
    xHttpClient **clients; /* one per worker, made and used on its thread */
    int num_workers;
    _Atomic size_t next; /* round-robin */
    char *hash_header;   /* conf's copies */
    char *health_path;
    xProxyHealth health;
    xProxyAuth *auth;     /* the auth subrequest's service, or NULL */
    xProxySpares *spares; /* one per worker, used on its thread */
};

/* Which protocol switch a request asks the upstream for. */
typedef enum xProxyUpgrade {
    PROXY_NO_UPGRADE,
    PROXY_WEBSOCKET_HTTP1, /* GET with Upgrade: websocket */
    PROXY_WEBSOCKET_H2,    /* RFC 8441: CONNECT with :protocol websocket, sent up as the GET */
} xProxyUpgrade;

typedef struct xProxyCall {
    xHttpProxy *proxy;
    int worker;             /* whose spares it goes back to */
    xProxyCall *next_spare; /* while it is one */
    xHttpRequest *req;
    xHttpResponse *res;
    xHttpClient *client;
    xHttpClientRequest *up_req; /* NULL between tries and once it ended */
    size_t up_index;
    bool counted; /* up_req is in its upstream's in_flight */
    unsigned tries;
    bool streams_body; /* the front body arrives through a reader */
    bool body_started; /* a byte of the body went to an upstream: no retry */
    bool body_ended;   /* the front body's last piece came */
    bool front_paused; /* the front body is held while the upstream is behind */
    bool head_out;     /* the answer's head went to the client (with its first body bytes) */
    /* Calls into the front's response under way (FRONT): one that finds the
     * client gone aborts the exchange at once, and the abort then leaves the
     * call to be ended after it returns (abandoned). */
    unsigned busy;
    bool abandoned;
    /* A WebSocket handshake passed on. From HTTP/1.1, after the upstream's
     * 101, front is the client's connection, a byte relay to the upstream's
     * tunnel, and req and res are gone; from h2 (an extended CONNECT), the
     * stream carries the bytes as a body both ways. */
    xProxyUpgrade upgrade;
    char ws_key[32]; /* the handshake's Sec-WebSocket-Key, made for an extended CONNECT */
    xConn *front;
    bool front_held; /* not reading the client while the upstream takes its bytes */
    bool up_held;    /* the upstream paused while the client takes ours */
    size_t num_fields;
    size_t num_checked; /* the first of fields: the front's, which its parser held to HTTP/1.1's rules */
    char detail[160];   /* the upstream client's words on its last failure */
    size_t preface_len;
    xProxyAuthCheck *auth_check; /* the auth subrequest under way */
    /* The front body spliced to the upstream: the pipe its bytes pass
     * through (rd -1: none yet), from the front connection's worker. */
    xPipe pipe;
    xNetContext *pipe_net;
    bool splices;  /* the front body may be spliced (splice_min, a Content-Length) */
    bool end_owed; /* the front body ended while the pipe still held bytes */
    /* The upstream's response body spliced to the client: its pipe (rd -1:
     * none yet), from the worker's spares (pipe_net's). */
    xPipe down_pipe;
    bool down_end_owed; /* the upstream's body ended while down_pipe still held bytes */
    /* Not zeroed (call_new): written before they are read. */
    xHttpClientField fields[PROXY_MAX_FIELDS];
    char added[1024];                  /* the X-Forwarded-* and Forwarded values */
    uint8_t preface[XPROXY_WRITE_MAX]; /* the PROXY header for a new upstream connection */
    char auth_text[2048];              /* the values it copied onto the request */
} xProxyCall;

/* A call for worker's request, with everything zero but its fields' room:
 * 5 KiB of zeroes a request is what calloc cost. */
static xProxyCall *call_new(xHttpProxy *proxy, int worker) {
    xProxySpares *spares = &proxy->spares[worker];
    xProxyCall *call = spares->head;
    if (call) {
        spares->head = call->next_spare;
        spares->count--;
    } else {
        call = malloc(sizeof *call);
    }
    if (!call) return NULL;
    memset(call, 0, offsetof(xProxyCall, fields));
    call->pipe = (xPipe){.rd = -1, .wr = -1};
    call->down_pipe = (xPipe){.rd = -1, .wr = -1};
    call->proxy = proxy;
    call->worker = worker;
    return call;
}

static void free_spares(xProxySpares *spares) {
    while (spares->head) {
        xProxyCall *call = spares->head;
        spares->head = call->next_spare;
        free(call);
    }
    spares->count = 0;
}

static const xHttpClientHandlers upstream_handlers;
static bool start_try(xProxyCall *call);

/* ---- Settings, the group and the workers ---- */

void xHttpProxyConfInit(xHttpProxyConf *conf) {
    *conf = (xHttpProxyConf){.struct_size = sizeof *conf,
                             .fail_threshold = 1,
                             .fail_timeout_ms = 10000,
                             .max_tries = 2,
                             .forwarded_headers = true,
                             .health_path = "/",
                             .splice_min = PROXY_SPLICE_MIN};
    xHttpUpstreamConfInit(&conf->upstream);
}

void xHttpProxyDestroy(xHttpProxy *proxy) {
    if (!proxy) return;
    for (size_t i = 0; i < proxy->num_ups; i++) xHttpUpstreamDestroy(proxy->ups[i].upstream);
    free(proxy->ups);
    free(proxy->clients);
    for (int i = 0; proxy->spares && i < proxy->num_workers; i++) free_spares(&proxy->spares[i]);
    free(proxy->spares);
    free(proxy->hash_header);
    free(proxy->health_path);
    free(proxy->health.probes);
    xProxyAuthDestroy(proxy->auth);
    free(proxy);
}

xErrno xHttpProxyCreate(xHttpServer *server, const xHttpProxyConf *conf, xHttpProxy **out) {
    *out = NULL;
    if (!conf || conf->num_upstreams == 0 || !conf->upstreams) return XERR_INVALID;
    /* A PROXY header names one client; an HTTP/2 connection carries them all. */
    if (conf->proxy_protocol && conf->upstream.protocol == XHTTP_UPSTREAM_HTTP2) return XERR_INVALID;
    xHttpProxy *proxy = calloc(1, sizeof *proxy);
    if (!proxy) return XERR_NOMEM;
    xHttpProxyConfInit(&proxy->conf);
    memcpy(&proxy->conf, conf,
           conf->struct_size < sizeof proxy->conf ? conf->struct_size : sizeof proxy->conf);
    proxy->num_workers = xHttpServerWorkerCount(server) > 0 ? xHttpServerWorkerCount(server) : 1;
    proxy->clients = calloc((size_t)proxy->num_workers, sizeof *proxy->clients);
    proxy->spares = calloc((size_t)proxy->num_workers, sizeof *proxy->spares);
    proxy->ups = calloc(conf->num_upstreams, sizeof *proxy->ups);
    proxy->health.probes = calloc(conf->num_upstreams, sizeof *proxy->health.probes);
    const xHttpProxyConf *c = &proxy->conf;
    if (c->balance == XHTTP_PROXY_HASH_HEADER && (!c->hash_header || !*c->hash_header)) {
        xHttpProxyDestroy(proxy);
        return XERR_INVALID;
    }
    proxy->hash_header = c->hash_header ? strdup(c->hash_header) : NULL;
    proxy->health_path = strdup(c->health_path && *c->health_path ? c->health_path : "/");
    if (!proxy->clients || !proxy->spares || !proxy->ups || !proxy->health.probes || !proxy->health_path ||
        (c->hash_header && !proxy->hash_header)) {
        xHttpProxyDestroy(proxy);
        return XERR_NOMEM;
    }
    for (size_t i = 0; i < conf->num_upstreams; i++) {
        xErrno err = xHttpUpstreamCreate(conf->upstreams[i], &proxy->conf.upstream, &proxy->ups[i].upstream);
        if (err != XOK) {
            xHttpProxyDestroy(proxy);
            return err;
        }
        proxy->num_ups++;
    }
    xErrno err = xProxyAuthCreate(&proxy->conf, &proxy->auth);
    if (err != XOK) {
        xHttpProxyDestroy(proxy);
        return err;
    }
    if (proxy->conf.max_tries == 0) proxy->conf.max_tries = 1;
    *out = proxy;
    return XOK;
}

static void health_start(xProxyHealth *health, xHttpClient *client, xEventLoop *loop);
static void health_stop(xProxyHealth *health);

xErrno xHttpProxyWorkerStart(xHttpProxy *proxy, xHttpWorker *worker) {
    int i = xHttpWorkerIndex(worker);
    if (i < 0 || i >= proxy->num_workers) return XERR_INVALID;
    if (!proxy->clients[i] && !(proxy->clients[i] = xHttpClientCreate(xHttpWorkerLoop(worker))))
        return XERR_NOMEM;
    if (i == 0 && proxy->conf.health_interval_ms)
        health_start(&proxy->health, proxy->clients[i], xHttpWorkerLoop(worker));
    return XOK;
}

void xHttpProxyWorkerStop(xHttpProxy *proxy, xHttpWorker *worker) {
    int i = xHttpWorkerIndex(worker);
    if (i < 0 || i >= proxy->num_workers) return;
    if (i == 0) health_stop(&proxy->health);
    xHttpClientDestroy(proxy->clients[i]);
    proxy->clients[i] = NULL;
    free_spares(&proxy->spares[i]);
}

static xErrno start_hook(xHttpWorker *worker, void *arg) { return xHttpProxyWorkerStart(arg, worker); }
static void stop_hook(xHttpWorker *worker, void *arg) { xHttpProxyWorkerStop(arg, worker); }

xErrno xHttpProxyUseWorkerHooks(xHttpServer *server, xHttpProxy *proxy) {
    return xHttpServerOnWorker(server, start_hook, stop_hook, proxy);
}

void xHttpProxyStats(const xHttpProxy *proxy, const xHttpWorker *worker, size_t i, xHttpClientStats *stats) {
    int w = xHttpWorkerIndex(worker);
    *stats = (xHttpClientStats){0};
    if (w >= 0 && w < proxy->num_workers && proxy->clients[w] && i < proxy->num_ups)
        xHttpClientGetStats(proxy->clients[w], proxy->ups[i].upstream, stats);
}

/* ---- Active health checks ---- */

static void probe_done(xProxyProbe *probe, bool passed) {
    probe->req = NULL;
    probe->health->proxy->ups[probe->index].check_failed = !passed;
}

static void on_probe_head(xHttpClientRequest *req, const xHttpClientResponse *res, void *arg) {
    (void)req;
    xProxyProbe *probe = arg;
    probe->passed = res->status >= 200 && res->status < 300;
}

static void on_probe_end(xHttpClientRequest *req, const xHttpClientField *trailers, size_t n, void *arg) {
    (void)req, (void)trailers, (void)n;
    xProxyProbe *probe = arg;
    probe_done(probe, probe->passed);
}

static void on_probe_error(xHttpClientRequest *req, xHttpClientError error, bool started, void *arg) {
    (void)req, (void)error, (void)started;
    probe_done(arg, false);
}

static const xHttpClientHandlers probe_handlers = {
    .on_head = on_probe_head,
    .on_end = on_probe_end,
    .on_error = on_probe_error,
};

/* A probe still out at the deadline fails. */
static void on_health_deadline(xEventLoop *loop, xTimer *timer, void *arg) {
    (void)loop, (void)timer;
    xProxyHealth *health = arg;
    for (size_t i = 0; i < health->proxy->num_ups; i++) {
        xProxyProbe *probe = &health->probes[i];
        if (!probe->req) continue;
        xHttpClientRequestCancel(probe->req);
        probe_done(probe, false);
    }
}

static void on_health_round(xEventLoop *loop, xTimer *timer, void *arg) {
    xProxyHealth *health = arg;
    xHttpProxy *proxy = health->proxy;
    on_health_deadline(loop, &health->deadline, health); /* the last round's stragglers */
    xHttpClientRequestOpts o;
    xHttpClientRequestOptsInit(&o);
    o.target = xStrFromC(proxy->health_path);
    o.handlers = &probe_handlers;
    for (size_t i = 0; i < proxy->num_ups; i++) {
        xProxyProbe *probe = &health->probes[i];
        *probe = (xProxyProbe){.health = health, .index = i};
        o.arg = probe;
        if (xHttpClientStart(health->client, proxy->ups[i].upstream, &o, &probe->req) != XOK)
            probe_done(probe, false);
    }
    uint32_t timeout =
        proxy->conf.health_timeout_ms ? proxy->conf.health_timeout_ms : proxy->conf.health_interval_ms;
    xTimerStart(loop, &health->deadline, timeout);
    xTimerStart(loop, timer, proxy->conf.health_interval_ms);
}

static void health_start(xProxyHealth *health, xHttpClient *client, xEventLoop *loop) {
    health->proxy = (xHttpProxy *)((char *)health - offsetof(xHttpProxy, health));
    health->client = client;
    health->loop = loop;
    xTimerInit(&health->round, on_health_round, health);
    xTimerInit(&health->deadline, on_health_deadline, health);
    xTimerStart(loop, &health->round, 0); /* the first round at once */
}

static void health_stop(xProxyHealth *health) {
    if (!health->loop) return;
    on_health_deadline(health->loop, &health->deadline, health);
    xTimerStop(health->loop, &health->round);
    xTimerStop(health->loop, &health->deadline);
    health->loop = NULL;
}

/* ---- Passive health and the choice of upstream ---- */

static bool usable(const xProxyUpstream *u, uint64_t now_ms) {
    return u->down_until_ms <= now_ms && !u->check_failed;
}

/* FNV-1a: spreads addresses and header values well enough over a few upstreams. */
static size_t hash_of(xStr key) {
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < key.len; i++) h = (h ^ (unsigned char)key.data[i]) * 1099511628211ull;
    return (size_t)(h ^ (h >> 32));
}

/* Where the walk for an upstream starts: the next in turn, or the key's
 * place for hashing; the least loaded usable one for least-connections
 * (*chosen set). */
static size_t first_choice(xProxyCall *call, uint64_t now_ms, bool *chosen) {
    xHttpProxy *proxy = call->proxy;
    *chosen = false;
    switch (proxy->conf.balance) {
    case XHTTP_PROXY_LEAST_CONN: {
        size_t start = proxy->next++, best = start % proxy->num_ups;
        unsigned best_load = ~0u;
        for (size_t k = 0; k < proxy->num_ups; k++) {
            size_t i = (start + k) % proxy->num_ups;
            unsigned load = proxy->ups[i].in_flight;
            if (usable(&proxy->ups[i], now_ms) && load < best_load)
                best = i, best_load = load, *chosen = true;
        }
        return best;
    }
    case XHTTP_PROXY_HASH_ADDRESS: {
        xHttpPeer peer;
        if (xHttpRequestPeer(call->req, &peer)) return hash_of(xStrFromC(peer.address));
        break;
    }
    case XHTTP_PROXY_HASH_HEADER: {
        xStr v;
        if (xHttpRequestHeader(call->req, proxy->hash_header, &v)) return hash_of(v);
        break;
    }
    case XHTTP_PROXY_ROUND_ROBIN: break;
    }
    return proxy->next++;
}

/* The first usable upstream from the balance's choice on; all out: the
 * choice itself. */
static size_t pick(xProxyCall *call, uint64_t now_ms) {
    xHttpProxy *proxy = call->proxy;
    bool chosen;
    size_t first = first_choice(call, now_ms, &chosen);
    if (chosen) return first;
    for (size_t k = 0; k < proxy->num_ups; k++) {
        size_t i = (first + k) % proxy->num_ups;
        if (usable(&proxy->ups[i], now_ms)) return i;
    }
    return first % proxy->num_ups;
}

/* The call's upstream request is over (ended, failed or cancelled). */
static void up_done(xProxyCall *call) {
    call->up_req = NULL;
    if (call->counted) call->proxy->ups[call->up_index].in_flight--;
    call->counted = false;
}

static void note_failure(xProxyCall *call) {
    xProxyUpstream *u = &call->proxy->ups[call->up_index];
    if (++u->failures >= call->proxy->conf.fail_threshold) {
        u->down_until_ms = xEventLoopNowMs(xHttpRequestLoop(call->req)) + call->proxy->conf.fail_timeout_ms;
        u->failures = 0;
    }
}

static void note_success(xProxyCall *call) {
    xProxyUpstream *u = &call->proxy->ups[call->up_index];
    if (u->failures) u->failures = 0;
}

/* ---- The request's fields ---- */

/* name, any case, against a lower-case literal: the length first, so that
 * most fields are told apart without a call. */
#define NAME_IS(name, lower)                                                                                 \
    ((name).len == sizeof(lower) - 1 && xHttpSameLower((name).data, lower, sizeof(lower) - 1))

/* RFC 9110 §7.6.1: fields for one hop only, never passed on. */
static bool hop_by_hop(xStr name) {
    switch (name.len) {
    case 2: return NAME_IS(name, "te");
    case 7:
        return NAME_IS(name, "upgrade") || NAME_IS(name, "trailer") || xHttpSameLower(name.data, "proxy-", 6);
    case 10:
        return NAME_IS(name, "connection") || NAME_IS(name, "keep-alive") ||
               xHttpSameLower(name.data, "proxy-", 6);
    case 14: return NAME_IS(name, "http2-settings") || xHttpSameLower(name.data, "proxy-", 6);
    case 17: return NAME_IS(name, "transfer-encoding") || xHttpSameLower(name.data, "proxy-", 6);
    default: return name.len >= 6 && xHttpSameLower(name.data, "proxy-", 6);
    }
}

/* Whether a message's fields hold a Connection field (which may name more
 * hop-by-hop fields): most hold none, and then no field needs the look. */
static bool has_connection(const xHttpClientField *fields, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (NAME_IS(fields[i].name, "connection")) return true;
    return false;
}

/* Whether name is one of the fields the message's Connection fields list. */
static bool named_by_connection(xStr name, const xHttpClientField *fields, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (!xHttpNameEquals(fields[i].name, "connection")) continue;
        char token[64];
        if (name.len >= sizeof token) continue;
        memcpy(token, name.data, name.len);
        for (size_t j = 0; j < name.len; j++)
            if (token[j] >= 'A' && token[j] <= 'Z') token[j] = (char)(token[j] + 32);
        token[name.len] = '\0';
        if (xHttpListHasToken(fields[i].value, token)) return true;
    }
    return false;
}

/* n: 0 when the request has no Connection field (has_connection). */
static bool dropped_from_request(xStr name, const xHttpClientField *all, size_t n) {
    return hop_by_hop(name) || (n && named_by_connection(name, all, n)) || NAME_IS(name, "content-length") ||
           (name.len && name.data[0] == ':') || NAME_IS(name, "x-forwarded-proto") ||
           NAME_IS(name, "x-forwarded-host");
}

/* Appends "name: value" to the call's fields; false when they are full. */
static bool add_named_field(xProxyCall *call, xStr name, xStr value) {
    if (call->num_fields == PROXY_MAX_FIELDS) return false;
    call->fields[call->num_fields++] = (xHttpClientField){name, value};
    return true;
}

static bool add_field(xProxyCall *call, const char *name, xStr value) {
    return add_named_field(call, xStrFromC(name), value);
}

/* A literal name's length is known where it is written. */
#define ADD_FIELD_LIT(call, lit, ...) add_named_field(call, (xStr){lit, sizeof(lit) - 1}, __VA_ARGS__)

/* Appends n bytes at *p if they fit before end; false (and nothing) if not. */
static bool append(char **p, const char *end, const char *bytes, size_t n) {
    if ((size_t)(end - *p) < n) return false;
    memcpy(*p, bytes, n);
    *p += n;
    return true;
}

#define APPEND_LIT(p, end, lit) append(p, end, lit, sizeof(lit) - 1)

/* Formats the forwarding fields into call->added; views into it. Written by
 * hand: snprintf cost more than the rest of the fields together. */
static void add_forwarding(xProxyCall *call, xStr prior_xff, xStr prior_forwarded, xStr host) {
    xHttpPeer peer;
    bool known = xHttpRequestPeer(call->req, &peer);
    const char *addr = known ? peer.address : "unknown";
    size_t addr_len = strlen(addr);
    bool v6 = known && peer.family == AF_INET6; /* the text has colons: quoted and bracketed */
    const char *proto = xHttpRequestScheme(call->req);
    size_t proto_len = strlen(proto);
    char *p = call->added, *end = call->added + sizeof call->added, *start = p;
    bool ok = append(&p, end, prior_xff.data, prior_xff.len) &&
              (!prior_xff.len || APPEND_LIT(&p, end, ", ")) && append(&p, end, addr, addr_len);
    if (!ok) return;
    ADD_FIELD_LIT(call, "X-Forwarded-For", (xStr){start, (size_t)(p - start)});
    ADD_FIELD_LIT(call, "X-Forwarded-Proto", (xStr){proto, proto_len});
    if (host.len) ADD_FIELD_LIT(call, "X-Forwarded-Host", host);
    start = p;
    ok = append(&p, end, prior_forwarded.data, prior_forwarded.len) &&
         (!prior_forwarded.len || APPEND_LIT(&p, end, ", ")) && APPEND_LIT(&p, end, "for=") &&
         (!v6 || APPEND_LIT(&p, end, "\"[")) && append(&p, end, addr, addr_len) &&
         (!v6 || APPEND_LIT(&p, end, "]\"")) && APPEND_LIT(&p, end, ";proto=") &&
         append(&p, end, proto, proto_len);
    if (!ok) return;
    /* host= only when it is a token or fits a quoted string plainly. */
    bool plain = host.len && host.len < 200 && memchr(host.data, '"', host.len) == NULL &&
                 memchr(host.data, '\\', host.len) == NULL;
    char *before_host = p;
    if (plain && !(APPEND_LIT(&p, end, ";host=\"") && append(&p, end, host.data, host.len) &&
                   APPEND_LIT(&p, end, "\"")))
        p = before_host;
    ADD_FIELD_LIT(call, "Forwarded", (xStr){start, (size_t)(p - start)});
}

/* The request's fields as the upstream gets them. False: too many. */
static bool build_fields(xProxyCall *call) {
    xHttpRequest *req = call->req;
    size_t n = xHttpRequestHeaderCount(req);
    if (n > PROXY_MAX_FIELDS - 8) return false;
    xHttpClientField all[PROXY_MAX_FIELDS];
    for (size_t i = 0; i < n; i++) xHttpRequestHeaderAt(req, i, &all[i].name, &all[i].value);
    xStr xff = {"", 0}, forwarded = {"", 0}, host = {"", 0};
    size_t listed = has_connection(all, n) ? n : 0;
    for (size_t i = 0; i < n; i++) {
        xStr name = all[i].name;
        if (NAME_IS(name, "host")) host = all[i].value;
        if (call->upgrade == PROXY_WEBSOCKET_HTTP1 && NAME_IS(name, "upgrade")) {
            call->fields[call->num_fields++] = all[i]; /* the client adds Connection: upgrade */
            continue;
        }
        if (dropped_from_request(name, all, listed)) continue;
        if (call->proxy->conf.forwarded_headers && NAME_IS(name, "x-forwarded-for")) {
            xff = all[i].value; /* the first only: a list in one field, as proxies write it */
            continue;
        }
        if (call->proxy->conf.forwarded_headers && NAME_IS(name, "forwarded")) {
            forwarded = all[i].value;
            continue;
        }
        call->fields[call->num_fields++] = all[i];
    }
    if (call->proxy->conf.forwarded_headers) add_forwarding(call, xff, forwarded, host);
    /* The front's fields need no second check when its parser held them to
     * HTTP/1.1's rules, and neither do the forwarding fields: literal names,
     * values made of those fields' values, literals and an address we
     * formatted. What follows (a WebSocket key) the client checks. */
    if (req->fields_plain) call->num_checked = call->num_fields;
    if (call->upgrade == PROXY_WEBSOCKET_H2) {
        /* RFC 8441 §5: the key and the Upgrade field are the hop's own. */
        uint8_t raw[16];
        if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) return false;
        size_t key_len = xBase64Encode(raw, sizeof raw, call->ws_key);
        ADD_FIELD_LIT(call, "Upgrade", (xStr){"websocket", 9});
        ADD_FIELD_LIT(call, "Sec-WebSocket-Key", (xStr){call->ws_key, key_len});
    }
    return true;
}

/* ---- Answering the client ---- */

/* Calls into the front's response, where a write that finds the client gone
 * aborts the exchange at once: on_front_abort then leaves the call to be
 * ended here, after the call returns, instead of freeing it under us. */
#define FRONT(call, expr)                                                                                    \
    do {                                                                                                     \
        (call)->busy++;                                                                                      \
        expr;                                                                                                \
        (call)->busy--;                                                                                      \
    } while (0)

static void end_call(xProxyCall *call) {
    if (call->pipe_net) xNetPipeRelease(call->pipe_net, &call->pipe); /* closed when bytes are left in it */
    if (call->pipe_net) xNetPipeRelease(call->pipe_net, &call->down_pipe);
    xProxySpares *spares = &call->proxy->spares[call->worker];
    if ((int)spares->count >= PROXY_SPARE_CALLS) { /* int: under ASan the limit is 0 */
        free(call);
        return;
    }
    call->next_spare = spares->head;
    spares->head = call;
    spares->count++;
}

/* A streamed front body's pieces that arrive after the answer are dropped. */
static void discard_body(xHttpRequest *req, xHttpResponse *res, const char *data, size_t len, bool end,
                         void *arg) {
    (void)req, (void)res, (void)data, (void)len, (void)end, (void)arg;
}

static void stop_reading_front(xProxyCall *call) {
    if (!call->streams_body || call->body_ended) return;
    xHttpRequestReadBody(call->req, discard_body, NULL);
    if (call->front_paused) xHttpRequestResumeBody(call->req);
}

/* 502 or 504 with a body that names the upstream and what went wrong. */
static void answer_failure(xProxyCall *call, xHttpClientError error) {
    int status = xHttpClientErrorIsTimeout(error) ? 504 : 502;
    char body[512];
    int n = snprintf(body, sizeof body, "%d %s: upstream %s: %s%s%s\n", status, xHttpStatusReason(status),
                     xHttpUpstreamAuthority(call->proxy->ups[call->up_index].upstream),
                     xHttpClientErrorString(error), call->detail[0] ? ": " : "", call->detail);
    xHttpResponse *res = call->res;
    stop_reading_front(call);
    xHttpResponseClearHeaders(res); /* a 405 fallback's Allow is not ours to send */
    xHttpResponseSetStatus(res, status);
    xHttpResponseAddHeader(res, "Content-Type", "text/plain; charset=utf-8");
    FRONT(call, xHttpResponseSend(res, body, (size_t)n));
    end_call(call);
}

/* Copies a view into a NUL-terminated string for the response API. */
static const char *cstr(char *buf, xStr s) {
    size_t n = s.len < PROXY_FIELD_TEXT - 1 ? s.len : PROXY_FIELD_TEXT - 1;
    memcpy(buf, s.data, n);
    buf[n] = '\0';
    return buf;
}

static void switch_front(xProxyCall *call, const xHttpClientResponse *r);
static void open_h2_tunnel(xProxyCall *call, const xHttpClientResponse *r);

static xClientTake take_up_body(xHttpClientRequest *up, xConn *from, uint64_t left, size_t *took, void *arg);

static void on_up_head(xHttpClientRequest *up, const xHttpClientResponse *r, void *arg) {
    xProxyCall *call = arg;
    note_success(call);
    if (r->status == 101 && call->upgrade == PROXY_WEBSOCKET_H2) {
        open_h2_tunnel(call, r);
        return;
    }
    if (r->status == 101) {
        switch_front(call, r);
        return;
    }
    xHttpResponseClearHeaders(call->res); /* a 405 fallback's Allow is the upstream's to say */
    xHttpResponseSetStatus(call->res, r->status);
    size_t listed = has_connection(r->fields, r->num_fields) ? r->num_fields : 0;
    for (size_t i = 0; i < r->num_fields; i++) {
        xStr n = r->fields[i].name;
        if (hop_by_hop(n) || (listed && named_by_connection(n, r->fields, listed)) ||
            NAME_IS(n, "content-length") || NAME_IS(n, "date"))
            continue;
        if (r->fields_checked)
            xHttpResponseAddCheckedField(call->res, n, r->fields[i].value);
        else
            xHttpResponseAddField(call->res, n, r->fields[i].value);
    }
    /* The upstream's length goes on as it is (a HEAD's answer keeps the
     * length a GET would have); otherwise the front frames it (chunked). */
    /* A body the front's filter transforms (compression) is framed by the
     * front (chunked) and written; any other keeps the upstream's length and
     * may be spliced. The filter decides for this response alone. */
    bool filtered = r->content_length >= 0 && xHttpResponseFiltered(call->res, (uint64_t)r->content_length);
    if (r->content_length >= 0 && !filtered) xHttpResponseSetLength(call->res, (uint64_t)r->content_length);
    size_t splice_min = call->proxy->conf.splice_min;
    if (splice_min && !filtered && r->content_length >= 0 && (uint64_t)r->content_length >= splice_min &&
        call->upgrade == PROXY_NO_UPGRADE)
        xHttpClientRequestTakeBody(up, take_up_body, call);
}

/* The client took enough of what waited for it: read the upstream again. */
static void on_front_drained(xHttpResponse *res, void *arg) {
    (void)res;
    xProxyCall *call = arg;
    if (call->up_req) xHttpClientRequestResume(call->up_req);
}

static void relay_to_front(xProxyCall *call, const char *data, size_t len);
static void relay_ended(xProxyCall *call);

static void on_up_body(xHttpClientRequest *up, const char *data, size_t len, void *arg) {
    xProxyCall *call = arg;
    if (call->front) {
        relay_to_front(call, data, len);
        return;
    }
    call->head_out = true;
    FRONT(call, xHttpResponseWrite(call->res, data, len));
    if (call->abandoned) {
        end_call(call);
        return;
    }
    if (xHttpResponsePending(call->res) >= PROXY_FRONT_HIGH &&
        xHttpResponseOnDrain(call->res, PROXY_FRONT_LOW, on_front_drained, call))
        xHttpClientRequestPause(up);
}

static void on_up_end(xHttpClientRequest *up, const xHttpClientField *trailers, size_t n, void *arg) {
    (void)up;
    xProxyCall *call = arg;
    up_done(call);
    if (call->front) {
        relay_ended(call);
        return;
    }
    if (call->down_pipe.held) {
        call->down_end_owed =
            true; /* the client takes the pipe's last bytes first (on_front_flushed_spliced) */
        return;
    }
    static __thread char name[PROXY_FIELD_TEXT], value[PROXY_FIELD_TEXT];
    for (size_t i = 0; i < n; i++) {
        if (hop_by_hop(trailers[i].name) || xHttpNameEquals(trailers[i].name, "content-length")) continue;
        xHttpResponseAddTrailer(call->res, cstr(name, trailers[i].name), cstr(value, trailers[i].value));
    }
    stop_reading_front(call);
    FRONT(call, xHttpResponseEnd(call->res));
    end_call(call);
}

/* Where pushing a pipe's bytes on left them. */
typedef enum xPipeDrain {
    PIPE_EMPTY,
    PIPE_WAITS, /* the receiving socket is full, or busy with what came first: its drain follows */
    PIPE_GONE,  /* the request failed, and the call ended (or is to end) within */
} xPipeDrain;

/* ---- The response body spliced: upstream socket → pipe → client socket ----
 *
 * A Content-Length answer of splice_min bytes or more: what the upstream
 * client read with the head went to the client written (on_up_body); the
 * rest is taken off the upstream's socket by take_up_body (the client asks
 * it where it would read), into the call's down_pipe, and from there into
 * the client's socket once nothing written is queued before it. A full
 * client socket pauses the upstream until on_front_flushed_spliced; the
 * send timeout applies to the client as for written bytes. */

/* The client's side failed under a splice without its abort (a response
 * that cannot take the bytes any more): cut it, as a failed write does. */
static void cut_front(xProxyCall *call) {
    xHttpClientRequestCancel(call->up_req);
    up_done(call);
    FRONT(call, xHttpResponseReset(call->res));
    call->abandoned = true;
}

static void on_front_flushed_spliced(xHttpResponse *res, void *arg);

/* Pushes down_pipe's bytes to the client's socket. PIPE_GONE: the client is
 * gone, the call abandoned (the caller ends it). */
static xPipeDrain drain_down(xProxyCall *call) {
    xHttpExchange *ex = xHttpExchangeOfResponse(call->res);
    while (call->down_pipe.held) {
        xConn *sink = NULL;
        xErrno err;
        FRONT(call, err = xHttpExchangeSpliceSink(ex, &sink));
        if (call->abandoned) return PIPE_GONE;
        if (err != XOK) {
            cut_front(call);
            return PIPE_GONE;
        }
        if (!sink) {
            xHttpExchangeOnFlushed(ex, on_front_flushed_spliced, call);
            return PIPE_WAITS;
        }
        ssize_t w = xConnSpliceOut(sink, &call->down_pipe);
        if (w > 0) {
            xHttpExchangeSpliced(ex, (size_t)w);
            continue;
        }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && errno == EAGAIN) { /* full: the connection waits for room, and says so */
            xHttpExchangeOnFlushed(ex, on_front_flushed_spliced, call);
            return PIPE_WAITS;
        }
        FRONT(call, xConnClose(sink)); /* the client closed or reset: its abort ends the call */
        if (!call->abandoned) cut_front(call);
        return PIPE_GONE;
    }
    return PIPE_EMPTY;
}

/* The client's socket took what was queued and has room: the pipe's bytes
 * go on, then the upstream is read again (or the answer ends). */
static void on_front_flushed_spliced(xHttpResponse *res, void *arg) {
    (void)res;
    xProxyCall *call = arg;
    xPipeDrain d = drain_down(call);
    if (d == PIPE_GONE) {
        end_call(call);
        return;
    }
    if (d == PIPE_WAITS) return;
    if (call->down_end_owed) {
        call->down_end_owed = false;
        stop_reading_front(call);
        FRONT(call, xHttpResponseEnd(call->res));
        end_call(call);
        return;
    }
    if (call->up_req) xHttpClientRequestResume(call->up_req);
}

/* The upstream client's xHttpClientBodyTaker: left body bytes are still in
 * from's socket and none in its buffer. */
static xClientTake take_up_body(xHttpClientRequest *up, xConn *from, uint64_t left, size_t *took, void *arg) {
    xProxyCall *call = arg;
    *took = 0;
    xPipeDrain d = drain_down(call); /* what it took before goes first */
    if (d == PIPE_GONE) {
        end_call(call);
        return XCLIENT_TAKE_LATER;
    }
    if (d == PIPE_WAITS) {
        xHttpClientRequestPause(up);
        return XCLIENT_TAKE_LATER;
    }
    xConn *sink = NULL;
    xErrno err;
    FRONT(call, err = xHttpExchangeSpliceSink(xHttpExchangeOfResponse(call->res), &sink));
    if (call->abandoned) {
        end_call(call);
        return XCLIENT_TAKE_LATER;
    }
    if (err != XOK || (call->down_pipe.rd < 0 && xNetPipeAcquire(from->net, &call->down_pipe) != XOK)) {
        xHttpClientRequestTakeBody(up, NULL, NULL); /* TLS, HTTP/2 or 3, a filter: written as it comes */
        return XCLIENT_TAKE_READ;
    }
    call->pipe_net = from->net;
    call->head_out = true;
    if (!sink) {
        xHttpExchangeOnFlushed(xHttpExchangeOfResponse(call->res), on_front_flushed_spliced, call);
        xHttpClientRequestPause(up);
        return XCLIENT_TAKE_LATER;
    }
    ssize_t n = xConnSpliceIn(from, &call->down_pipe, left < SIZE_MAX ? (size_t)left : SIZE_MAX);
    if (n == 0) return XCLIENT_TAKE_ENDED;
    if (n < 0) {
        if (errno == EAGAIN) return XCLIENT_TAKE_LATER; /* drained: the upstream's next edge */
        if (errno == EALREADY || errno == EINTR) return XCLIENT_TAKE_READ;
        return XCLIENT_TAKE_ENDED;
    }
    *took = (size_t)n;
    d = drain_down(call);
    if (d == PIPE_GONE) {
        end_call(call);
        return XCLIENT_TOOK;
    }
    /* The last bytes need no more reading: on_up_end waits for the pipe. */
    if (d == PIPE_WAITS && (uint64_t)n < left) xHttpClientRequestPause(up);
    return XCLIENT_TOOK;
}

/* ---- WebSocket passed through: bytes both ways after the upstream's 101 ---- */

/* An HTTP/1.1 WebSocket handshake (RFC 6455 §4.1) with no body, or its
 * HTTP/2 form (RFC 8441 §4: an extended CONNECT on a route that streams,
 * which alone can carry the bytes): the one switch passed on to the
 * upstream; any other Upgrade is dropped as a hop-by-hop field (h2c never
 * reaches an upstream). */
static xProxyUpgrade upgrade_asked(xHttpRequest *req) {
    xStr upgrade, connection, v;
    if (xStrEqualsC(xHttpRequestMethod(req), "CONNECT"))
        return xHttpRequestHeader(req, ":protocol", &v) && xStrEqualsC(v, "websocket") &&
                       xHttpRequestBodyStreams(req)
                   ? PROXY_WEBSOCKET_H2
                   : PROXY_NO_UPGRADE;
    bool asked =
        strcmp(xHttpRequestProtocol(req), "HTTP/1.1") == 0 && xStrEqualsC(xHttpRequestMethod(req), "GET") &&
        xHttpRequestHeader(req, "upgrade", &upgrade) && xHttpListHasToken(upgrade, "websocket") &&
        xHttpRequestHeader(req, "connection", &connection) && xHttpListHasToken(connection, "upgrade") &&
        !xHttpRequestHeader(req, "content-length", &v) && !xHttpRequestHeader(req, "transfer-encoding", &v);
    return asked ? PROXY_WEBSOCKET_HTTP1 : PROXY_NO_UPGRADE;
}

static void front_body(xHttpRequest *req, xHttpResponse *res, const char *data, size_t len, bool end,
                       void *arg);

/* The upstream switched for an extended CONNECT: the stream's 200 carries
 * the upstream's fields but those of the HTTP/1.1 handshake, and from now
 * the stream's body is the client's bytes and its answer the upstream's,
 * each read only while the other side keeps up (front_body, on_up_body). */
static void open_h2_tunnel(xProxyCall *call, const xHttpClientResponse *r) {
    static __thread char name[PROXY_FIELD_TEXT], value[PROXY_FIELD_TEXT];
    xHttpResponse *res = call->res;
    xHttpResponseClearHeaders(res);
    xHttpResponseSetStatus(res, 200);
    for (size_t i = 0; i < r->num_fields; i++) {
        xStr n = r->fields[i].name;
        if (hop_by_hop(n) || named_by_connection(n, r->fields, r->num_fields) || xHttpNameEquals(n, "date") ||
            xHttpNameEquals(n, "sec-websocket-accept"))
            continue;
        xHttpResponseAddHeader(res, cstr(name, n), cstr(value, r->fields[i].value));
    }
    call->streams_body = true;
    FRONT(call, xHttpResponseWrite(res, NULL, 0)); /* the head, the stream left open */
    if (call->abandoned) {
        end_call(call); /* the client reset the stream meanwhile: the request was cancelled */
        return;
    }
    xHttpRequestReadBody(call->req, front_body, call);
}

/* The client's bytes to the upstream, until the upstream holds enough
 * (on_up_body_wanted reads on) or the client has no more for now. */
static void relay_from_front(xProxyCall *call) {
    xConn *front = call->front;
    xBuffer *in = &front->in;
    while (call->up_req && xConnOpen(front) && front->readable) {
        if (xHttpClientRequestPending(call->up_req) >= XHTTP_CLIENT_BODY_HIGH) {
            call->front_held = true;
            break;
        }
        if (!in->data && xBufferPoolAcquire(&front->net->buffers, in) != XOK) {
            xConnClose(front);
            return;
        }
        ssize_t n = xConnRecv(front, in->data, in->cap);
        if (n > 0) {
            xHttpClientRequestWrite(call->up_req, in->data, (size_t)n);
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            xConnCloseAfterFlush(front); /* the client closed: so does the tunnel */
            return;
        }
    }
    if (!xConnClosed(front)) xBufferPoolRelease(&front->net->buffers, in);
}

static void relay_to_front(xProxyCall *call, const char *data, size_t len) {
    xConn *front = call->front;
    if (!xConnOpen(front)) return;
    xConnWrite(front, data, len);
    xConnFlush(front);
    if (call->up_req && xConnOpen(front) && xConnPending(front) >= PROXY_FRONT_HIGH) {
        call->up_held = true;
        xHttpClientRequestPause(call->up_req);
    }
}

/* The upstream closed its side (or failed): the client's goes after what it
 * has yet to take. */
static void relay_ended(xProxyCall *call) { xConnCloseAfterFlush(call->front); }

static void relay_readable(xConn *conn) { relay_from_front(conn->proto_state); }

static void relay_flushed(xConn *conn) {
    xProxyCall *call = conn->proto_state;
    if (!call->up_held || !call->up_req) return;
    call->up_held = false;
    xHttpClientRequestResume(call->up_req);
}

static void relay_timeout(xConn *conn) { (void)conn; }

static void relay_drain(xConn *conn) { xConnCloseAfterFlush(conn); }

static void relay_close(xConn *conn) {
    xProxyCall *call = conn->proto_state;
    xHttpClientRequestCancel(call->up_req);
    up_done(call);
}

static void relay_free(xConn *conn) { end_call(conn->proto_state); }

static const xConnProtocol relay_protocol = {
    .on_readable = relay_readable,
    .on_flushed = relay_flushed,
    .on_timeout = relay_timeout,
    .on_drain = relay_drain,
    .on_close = relay_close,
    .on_free = relay_free,
};

/* The 101 went to the client: its connection is the relay's. The exchange
 * is logged and released now (the relay keeps nothing of the request). */
static bool relay_start(xConn *conn, xHttpExchange *ex, size_t start, void *arg) {
    xProxyCall *call = arg;
    xHttpExchangeFinished(ex, 101, 0);
    xHttpExchangeRelease(xHttpContextOf(conn), ex);
    call->req = NULL;
    call->res = NULL;
    call->front = conn;
    xConnSetTimeout(conn, 0);
    xConnSetProtocol(conn, &relay_protocol, call);
    xBuffer *in = &conn->in;
    if (in->len > start && call->up_req)
        xHttpClientRequestWrite(call->up_req, in->data + start, in->len - start);
    in->len = 0;
    if (!xConnClosed(conn)) xConnFlush(conn);
    relay_from_front(call);
    return true;
}

/* The 101 never went: the client left first. */
static void relay_drop(void *arg) {
    xProxyCall *call = arg;
    xHttpClientRequestCancel(call->up_req);
    up_done(call);
    end_call(call);
}

static const xHttpTakeover relay_takeover = {.start = relay_start, .drop = relay_drop};

/* The upstream switched: the client gets its 101 with the upstream's fields
 * (Upgrade, Sec-WebSocket-Accept, -Protocol, -Extensions) and the relay
 * takes its connection. */
static void switch_front(xProxyCall *call, const xHttpClientResponse *r) {
    static __thread char name[PROXY_FIELD_TEXT], value[PROXY_FIELD_TEXT];
    xHttpResponse *res = call->res;
    xHttpResponseClearHeaders(res);
    for (size_t i = 0; i < r->num_fields; i++) {
        xStr n = r->fields[i].name;
        bool kept = xHttpNameEquals(n, "upgrade") || (!hop_by_hop(n) && !xHttpNameEquals(n, "date") &&
                                                      !named_by_connection(n, r->fields, r->num_fields));
        if (kept) xHttpResponseAddHeader(res, cstr(name, n), cstr(value, r->fields[i].value));
    }
    xHttpExchange *ex = xHttpExchangeOfResponse(res);
    if (xHttpExchangeSwitch(ex, &relay_takeover, call) == XOK) return;
    xHttpClientRequestCancel(call->up_req);
    up_done(call);
    answer_failure(call, XHTTP_CLIENT_BAD_RESPONSE);
}

static bool idempotent(xStr method) {
    return xStrEqualsC(method, "GET") || xStrEqualsC(method, "HEAD") || xStrEqualsC(method, "OPTIONS") ||
           xStrEqualsC(method, "PUT") || xStrEqualsC(method, "DELETE");
}

static void on_up_error(xHttpClientRequest *up, xHttpClientError error, bool started, void *arg) {
    (void)up;
    xProxyCall *call = arg;
    up_done(call);
    if (call->front) {
        relay_ended(call);
        return;
    }
    snprintf(call->detail, sizeof call->detail, "%s", xHttpClientRequestErrorDetail(up));
    note_failure(call);
    if (started && call->head_out) {
        /* The head went out: a cut body must not look whole to the client.
         * The response is reset (its HTTP/2 stream alone, or the HTTP/1.1
         * connection). */
        stop_reading_front(call);
        FRONT(call, xHttpResponseReset(call->res));
        end_call(call);
        return;
    }
    if (started) { /* the upstream answered, then failed (a malformed body) before the client had a byte */
        answer_failure(call, error);
        return;
    }
    bool nothing_sent = error == XHTTP_CLIENT_REFUSED || error == XHTTP_CLIENT_CONNECT_TIMEOUT;
    bool replayable = !call->streams_body && (nothing_sent || idempotent(xHttpRequestMethod(call->req)));
    if (replayable && call->tries < call->proxy->conf.max_tries && call->tries < call->proxy->num_ups &&
        start_try(call))
        return;
    answer_failure(call, error);
}

static xPipeDrain drain_pipe(xProxyCall *call);
static void relay_from_front(xProxyCall *call);

static void on_up_body_wanted(xHttpClientRequest *up, void *arg) {
    (void)up;
    xProxyCall *call = arg;
    if (call->front) {
        call->front_held = false;
        relay_from_front(call);
        return;
    }
    if (call->pipe.held) {
        if (drain_pipe(call) != PIPE_EMPTY) return;
        if (call->end_owed) {
            call->end_owed = false;
            xHttpClientRequestEnd(call->up_req);
            xNetPipeRelease(call->pipe_net, &call->pipe);
            return;
        }
    }
    if (call->front_paused) {
        call->front_paused = false;
        xHttpRequestResumeBody(call->req);
    }
}

static const xHttpClientHandlers upstream_handlers = {
    .on_head = on_up_head,
    .on_body = on_up_body,
    .on_end = on_up_end,
    .on_error = on_up_error,
    .on_body_wanted = on_up_body_wanted,
};

/* ---- The request going up ---- */

static void front_body(xHttpRequest *req, xHttpResponse *res, const char *data, size_t len, bool end,
                       void *arg) {
    (void)res;
    xProxyCall *call = arg;
    if (end) call->body_ended = true;
    if (!call->up_req) return;
    if (len) call->body_started = true;
    if (len && xHttpClientRequestWrite(call->up_req, data, len) != XOK) return;
    if (end && call->pipe.held) {
        call->end_owed = true; /* ended once the pipe is empty (on_up_body_wanted) */
    } else if (end) {
        xHttpClientRequestEnd(call->up_req);
        if (call->pipe_net) xNetPipeRelease(call->pipe_net, &call->pipe); /* for the worker's next body */
    } else if (xHttpClientRequestPending(call->up_req) >= XHTTP_CLIENT_BODY_HIGH) {
        call->front_paused = true;
        xHttpRequestPauseBody(req);
    }
}

/* ---- The request body spliced: client socket → pipe → upstream socket ----
 *
 * What the front read with the head went up through front_body, written,
 * as does what an io_uring loop received ahead before the head was read
 * (up to its ring of buffers; the taker hears EALREADY): bytes in memory
 * cannot be spliced. The rest of a large Content-Length body is taken off
 * the client's socket by take_front_body (the front protocol asks it where
 * it would read), into the call's pipe, and from there into the upstream's
 * socket once nothing written is queued before it. A full upstream pauses
 * the front body, as a full queue does for written bytes, until
 * on_up_body_wanted. */

static xPipeDrain drain_pipe(xProxyCall *call) {
    while (call->pipe.held) {
        xConn *sink;
        if (xHttpClientRequestSpliceSink(call->up_req, &sink) != XOK) return PIPE_GONE;
        if (!sink) return PIPE_WAITS;
        ssize_t w = xConnSpliceOut(sink, &call->pipe);
        /* A full socket waits for room (xConnSpliceOut); the next round
         * finds it so and has the request say when it drains. */
        if (w > 0 || (w < 0 && (errno == EAGAIN || errno == EINTR))) continue;
        /* The upstream closed or reset: as a failed send, its connection
         * closes, which fails the request, whose on_error ends the call. */
        xConnClose(sink);
        return PIPE_GONE;
    }
    return PIPE_EMPTY;
}

static xHttpTake pause_front(xProxyCall *call) {
    call->front_paused = true;
    xHttpRequestPauseBody(call->req);
    return XHTTP_TAKE_LATER;
}

/* The front protocol's xHttpBodyTaker: left body bytes are still in from's
 * socket and none in its buffer. */
static xHttpTake take_front_body(xHttpExchange *ex, xConn *from, uint64_t left, size_t *took, void *arg) {
    (void)ex;
    xProxyCall *call = arg;
    *took = 0;
    if (!call->up_req || !call->splices) return XHTTP_TAKE_READ;
    xPipeDrain d = drain_pipe(call); /* what it took before goes first */
    if (d == PIPE_GONE) return XHTTP_TAKE_LATER;
    if (d == PIPE_WAITS) return pause_front(call);
    xConn *sink;
    xErrno err = xHttpClientRequestSpliceSink(call->up_req, &sink);
    if (err == XERR_STATE) return XHTTP_TAKE_LATER; /* the call ended within */
    if (err != XOK) {
        call->splices = false; /* an upstream that needs the bytes (TLS, HTTP/2): written as they come */
        return XHTTP_TAKE_READ;
    }
    if (!sink) return pause_front(call);
    if (call->pipe.rd < 0) {
        if (xNetPipeAcquire(from->net, &call->pipe) != XOK) {
            call->splices = false;
            return XHTTP_TAKE_READ;
        }
        call->pipe_net = from->net;
    }
    ssize_t n = xConnSpliceIn(from, &call->pipe, left < SIZE_MAX ? (size_t)left : SIZE_MAX);
    if (n == 0) return XHTTP_TAKE_ENDED;
    if (n < 0) {
        if (errno == EAGAIN) return XHTTP_TAKE_LATER; /* drained: the front's next edge */
        if (errno == EALREADY || errno == EINTR) return XHTTP_TAKE_READ;
        return XHTTP_TAKE_ENDED;
    }
    *took = (size_t)n;
    call->body_started = true; /* no retry from here: the bytes are gone from the socket */
    xHttpClientRequestSpliced(call->up_req, (size_t)n);
    if (drain_pipe(call) == PIPE_WAITS) pause_front(call);
    return XHTTP_TOOK;
}

/* A streamed front body's length as the upstream is told it: the front's
 * Content-Length (its parser has checked it); none on an HTTP/1.x request
 * without Transfer-Encoding, or on an HTTP/2 GET, HEAD, OPTIONS or DELETE,
 * is no body; otherwise -1, sent chunked. */
static int64_t front_length(xHttpRequest *req) {
    xStr v;
    if (!xHttpRequestHeader(req, "content-length", &v)) {
        bool h1 = strncmp(xHttpRequestProtocol(req), "HTTP/1", 6) == 0;
        if (h1) return xHttpRequestHeader(req, "transfer-encoding", &v) ? -1 : 0;
        xStr m = xHttpRequestMethod(req);
        bool bodiless = xStrEqualsC(m, "GET") || xStrEqualsC(m, "HEAD") || xStrEqualsC(m, "OPTIONS") ||
                        xStrEqualsC(m, "DELETE");
        return bodiless ? 0 : -1;
    }
    if (v.len == 0 || v.len > 18) return -1;
    int64_t n = 0;
    for (size_t i = 0; i < v.len; i++) {
        if (v.data[i] < '0' || v.data[i] > '9') return -1;
        n = n * 10 + (v.data[i] - '0');
    }
    return n;
}

/* Sends the request to the next upstream. False when it could not start
 * (call->up_index names the last one tried). */
static bool start_try(xProxyCall *call) {
    xHttpRequest *req = call->req;
    call->up_index = pick(call, xEventLoopNowMs(xHttpRequestLoop(req)));
    call->tries++;
    xStr path = xHttpRequestPath(req), query = xHttpRequestQuery(req);
    char target_buf[8192];
    xStr target = path;
    if (query.len) {
        if (path.len + 1 + query.len > sizeof target_buf) return false;
        memcpy(target_buf, path.data, path.len);
        target_buf[path.len] = '?';
        memcpy(target_buf + path.len + 1, query.data, query.len);
        target = (xStr){target_buf, path.len + 1 + query.len};
    }
    xStr body = call->streams_body ? (xStr){"", 0} : xHttpRequestBody(req);
    xHttpClientRequestOpts o;
    xHttpClientRequestOptsInit(&o);
    o.method = call->upgrade == PROXY_WEBSOCKET_H2 ? (xStr){"GET", 3} : xHttpRequestMethod(req);
    o.target = target;
    o.fields = call->fields;
    o.num_fields = call->num_fields;
    o.num_checked_fields = call->num_checked;
    o.body_length = call->streams_body ? front_length(req) : (int64_t)body.len;
    if (call->streams_body && call->body_ended && o.body_length < 0) o.body_length = 0;
    o.retry_on_stale = !call->streams_body;
    o.upgrade = call->upgrade != PROXY_NO_UPGRADE;
    o.handlers = &upstream_handlers;
    o.arg = call;
    o.preface = call->preface;
    o.preface_len = call->preface_len;
    xHttpUpstream *up = call->proxy->ups[call->up_index].upstream;
    if (xHttpClientStart(call->client, up, &o, &call->up_req) != XOK) return false;
    call->proxy->ups[call->up_index].in_flight++;
    call->counted = true;
    /* A body read whole is ended at once: a request whose body never ended
     * cannot give its connection back to the pool. */
    if (!call->streams_body && body.len && xHttpClientRequestWrite(call->up_req, body.data, body.len) == XOK)
        xHttpClientRequestEnd(call->up_req);
    return true;
}

static void on_front_abort(xHttpResponse *res, void *arg) {
    (void)res;
    xProxyCall *call = arg;
    xProxyAuthCancel(call->auth_check);
    call->auth_check = NULL;
    xHttpClientRequestCancel(call->up_req);
    up_done(call);
    if (call->busy) {
        call->abandoned = true; /* ended by the FRONT call under way */
        return;
    }
    end_call(call);
}

/* The request goes to its first upstream, and a streamed body after it. */
static void go_upstream(xProxyCall *call) {
    if (!start_try(call)) {
        up_done(call);
        answer_failure(call, XHTTP_CLIENT_NO_MEMORY);
        return;
    }
    /* Only now: the reader may be handed pieces at once. */
    if (call->streams_body)
        xHttpExchangeReadBodyTaking(xHttpExchangeOfResponse(call->res), front_body,
                                    call->splices ? take_front_body : NULL, call);
}

/* The auth subrequest let the request through (with fields to add), or
 * says what the client is answered. */
static void on_auth_done(void *arg, const xProxyAuthVerdict *v) {
    xProxyCall *call = arg;
    call->auth_check = NULL;
    if (!v->allowed) {
        xHttpResponse *res = call->res;
        stop_reading_front(call);
        xHttpResponseClearHeaders(res);
        xHttpResponseSetStatus(res, v->status);
        if (v->challenge[0]) xHttpResponseAddHeader(res, "WWW-Authenticate", v->challenge);
        xHttpResponseAddHeader(res, "Content-Type", "text/plain; charset=utf-8");
        FRONT(call, xHttpResponseSend(res, v->message, strlen(v->message)));
        end_call(call);
        return;
    }
    size_t used = 0;
    for (size_t i = 0; i < v->num_copied && call->num_fields < PROXY_MAX_FIELDS; i++) {
        xStr value = v->copied[i].value;
        if (value.len > sizeof call->auth_text - used) break;
        memcpy(call->auth_text + used, value.data, value.len);
        add_field(call, v->copied[i].name.data, (xStr){call->auth_text + used, value.len});
        used += value.len;
    }
    go_upstream(call);
}

void xHttpProxyHandler(xHttpRequest *req, xHttpResponse *res, void *arg) {
    xHttpProxy *proxy = arg;
    int w = xHttpWorkerIndex(xHttpRequestWorker(req));
    xHttpClient *client = w >= 0 && w < proxy->num_workers ? proxy->clients[w] : NULL;
    xProxyCall *call = client ? call_new(proxy, w) : NULL;
    if (!call) {
        xHttpResponseSetStatus(res, 500);
        xHttpResponseSend(res, "500: the proxy has no client on this worker (xHttpProxyWorkerStart)\n", 68);
        return;
    }
    call->req = req;
    call->res = res;
    call->client = client;
    call->upgrade = upgrade_asked(req);
    if (!build_fields(call)) {
        end_call(call);
        xHttpResponseSetStatus(res, 431);
        xHttpResponseSend(res, "431: too many fields to pass on\n", 32);
        return;
    }
    /* A tunnel's bytes are read once the upstream switched (open_h2_tunnel). */
    call->streams_body = call->upgrade != PROXY_WEBSOCKET_H2 && xHttpRequestBodyStreams(req);
    /* Content-Length only: a chunked body's framing is checked, so its bytes pass through here. */
    int64_t length = call->streams_body && proxy->conf.splice_min ? front_length(req) : -1;
    call->splices =
        call->upgrade == PROXY_NO_UPGRADE && length > 0 && (uint64_t)length >= proxy->conf.splice_min;
    if (proxy->conf.proxy_protocol)
        call->preface_len = xProxyPreface(res, (int)proxy->conf.proxy_protocol, call->preface);
    xHttpResponseOnAbort(res, on_front_abort, call);
    if (proxy->auth) {
        call->num_fields = xProxyAuthStrip(proxy->auth, call->fields, call->num_fields, &call->num_checked);
        call->auth_check =
            xProxyAuthStart(proxy->auth, client, req, call->fields, call->num_fields, on_auth_done, call);
        if (!call->auth_check) {
            static const char unasked[] = "503 Service Unavailable: the auth service could not be asked\n";
            stop_reading_front(call);
            xHttpResponseSetStatus(res, 503);
            FRONT(call, xHttpResponseSend(res, unasked, sizeof unasked - 1));
            end_call(call);
        }
        return;
    }
    go_upstream(call);
}
