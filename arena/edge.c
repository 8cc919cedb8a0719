/* edge.c — the edge of xKit's HttpArena stacks (../shared/arena/CONTRACT.md in
 * the xKit workspace, "The stacks"): the `proxy` of gateway-64 and gateway-h3
 * and the `edge` of production-stack, in front of the entry (main.c) as the
 * `server`. Written on xKit's public API only, as the entry is.
 *
 *   EDGE_PORT (8443)  TLS with ALPN h2 (and http/1.1); with EDGE_HTTP3=1 also
 *                     HTTP/3 on the UDP port of the same number
 *   GET /static/...   DATA_DIR/static from disk, .br/.gz twins as the client prefers them
 *   /api/...          with AUTH_URL: each request first asked of the auth
 *                     service (AUTH_TARGET, default /_auth, with the client's
 *                     fields, as GET: AUTH_METHOD), its 401 passed back, its
 *                     X-User-Id passed on; then to the server
 *   anything else     to the server (UPSTREAM, default http://127.0.0.1:8080) over
 *                     kept-alive HTTP/1.1 (or h2c with UPSTREAM_PROTOCOL=h2c: each
 *                     worker's requests streams of one connection): /baseline2,
 *                     /json/{n}, /async-db, /public/...
 *
 * Environment: DATA_DIR (default /data), CERTS_DIR (server.crt and server.key;
 * default /certs), EDGE_HOST (default "::", IPv6 and IPv4 both; 0.0.0.0 where the
 * host has no IPv6), EDGE_PORT, EDGE_HTTP3, UPSTREAM, UPSTREAM_PROTOCOL (http/1.1 or h2c),
 * UPSTREAM_CONNECTIONS (per worker, default 256), AUTH_URL (unset: no auth, as the gateway profiles),
 * AUTH_TARGET, AUTH_METHOD. Workers: one per CPU this process may run on.
 *
 * Nothing dynamic is cached: every proxied answer is the server's, and the
 * server compresses /json itself (the client's Accept-Encoding goes up), so the
 * edge compresses nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <xhttp/proxy.h>
#include <xhttp/server.h>
#include <xhttp/static.h>
#include <xhttp/tls.h>

/* Connections a worker takes: the gateway profiles hold 1,024 per edge. */
#define MAX_CONNECTIONS_PER_WORKER 65536

/* The two ways a request leaves the edge: straight to the server, or after the auth service said yes. */
typedef struct Edge {
    xHttpProxy *server;    /* /public/..., /baseline2, /json, /async-db, the rest */
    xHttpProxy *with_auth; /* /api/...; NULL without AUTH_URL */
    xHttpStatic *static_files;
} Edge;

static Edge edge;

static const char *env_or(const char *name, const char *fallback) {
    const char *v = getenv(name);
    return v && *v ? v : fallback;
}

static xErrno worker_start(xHttpWorker *worker, void *arg) {
    (void)arg;
    xErrno err = xHttpProxyWorkerStart(edge.server, worker);
    if (err == XOK && edge.with_auth && (err = xHttpProxyWorkerStart(edge.with_auth, worker)) != XOK)
        xHttpProxyWorkerStop(edge.server, worker);
    return err;
}

static void worker_stop(xHttpWorker *worker, void *arg) {
    (void)arg;
    if (edge.with_auth) xHttpProxyWorkerStop(edge.with_auth, worker);
    xHttpProxyWorkerStop(edge.server, worker);
}

/* The proxy to the server; with auth_url, one that asks the auth service first. */
static bool make_proxy(xHttpServer *server, const char *auth_url, xHttpProxy **out) {
    static const char *const auth_copy[] = {"X-User-Id"};
    const char *upstream = env_or("UPSTREAM", "http://127.0.0.1:8080");
    xHttpProxyConf conf;
    xHttpProxyConfInit(&conf);
    conf.upstreams = &upstream;
    conf.num_upstreams = 1;
    /* One server on the same host: a pool as deep as the requests the clients keep in flight
     * (h2load's -m32 on each connection), all kept alive between bursts. */
    unsigned connections = (unsigned)atoi(env_or("UPSTREAM_CONNECTIONS", "256"));
    conf.upstream.max_conns = conf.upstream.max_idle = connections ? connections : 256;
    conf.upstream.max_queue = 65536;
    if (strcmp(env_or("UPSTREAM_PROTOCOL", "http/1.1"), "h2c") == 0)
        conf.upstream.protocol = XHTTP_UPSTREAM_HTTP2;
    /* The server reads no forwarding fields (X-Forwarded-*, Forwarded): none are written, as the
     * arena's nginx edges write none. */
    conf.forwarded_headers = false;
    if (auth_url) {
        conf.auth_url = auth_url;
        conf.auth_target = env_or("AUTH_TARGET", "/_auth");
        conf.auth_method = env_or("AUTH_METHOD", "GET");
        conf.auth_copy = auth_copy;
        conf.num_auth_copy = 1;
    }
    xErrno err = xHttpProxyCreate(server, &conf, out);
    if (err != XOK)
        fprintf(stderr, "edge: %s%s: %s\n", upstream, auth_url ? " (with auth)" : "", xErrnoString(err));
    return err == XOK;
}

/* /static/<file> as the entry serves it (main.c): from disk each time, twins as preferred. */
static bool add_static(xHttpServer *server, const char *data_dir) {
    char root[4096];
    snprintf(root, sizeof root, "%s/static", data_dir);
    xHttpStaticConf conf;
    xHttpStaticConfInit(&conf);
    conf.root = root;
    conf.index = NULL;
    conf.keep_file_max = 0;
    conf.compress_on_the_fly = false;
    if (xHttpStaticCreate(&conf, &edge.static_files) != XOK) {
        fprintf(stderr, "edge: cannot serve %s\n", root);
        return false;
    }
    return xHttpServerRoute(server, "GET /static/*", xHttpStaticHandler, edge.static_files) == XOK;
}

static bool add_routes(xHttpServer *server, const char *data_dir) {
    const char *auth_url = getenv("AUTH_URL");
    if (auth_url && !*auth_url) auth_url = NULL;
    if (!make_proxy(server, NULL, &edge.server) ||
        (auth_url && !make_proxy(server, auth_url, &edge.with_auth)))
        return false;
    if (xHttpServerOnWorker(server, worker_start, worker_stop, NULL) != XOK || !add_static(server, data_dir))
        return false;
    if (edge.with_auth && xHttpServerRoute(server, "/api/*", xHttpProxyHandler, edge.with_auth) != XOK)
        return false;
    return xHttpServerRouteNotFound(server, xHttpProxyHandler, edge.server) == XOK &&
           xHttpServerRouteMethodNotAllowed(server, xHttpProxyHandler, edge.server) == XOK;
}

static xErrno listen_tls(xHttpServer *server, const char *host, uint16_t port, const char *certs_dir,
                         bool http3) {
    char cert[4096], key[4096];
    snprintf(cert, sizeof cert, "%s/server.crt", certs_dir);
    snprintf(key, sizeof key, "%s/server.key", certs_dir);
    xTlsConf tls;
    xTlsConfInit(&tls);
    tls.cert.cert_file = cert;
    tls.cert.key_file = key;
    tls.alpn = "h2,http/1.1";
    tls.http3 = http3;
    return xHttpServerListenTls(server, host, port, &tls);
}

/* Opens as many files as the hard limit allows: each client and upstream connection is one. */
static void raise_fd_limit(void) {
    struct rlimit lim;
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
        lim.rlim_cur = lim.rlim_max;
        setrlimit(RLIMIT_NOFILE, &lim);
    }
}

int main(void) {
    const char *data_dir = env_or("DATA_DIR", "/data"), *certs_dir = env_or("CERTS_DIR", "/certs");
    const char *host = getenv("EDGE_HOST");
    unsigned port = (unsigned)atoi(env_or("EDGE_PORT", "8443"));
    bool http3 = atoi(env_or("EDGE_HTTP3", "0")) != 0;
    if (port == 0 || port > 65535) {
        fprintf(stderr, "edge: EDGE_PORT must be a port number\n");
        return 2;
    }
    raise_fd_limit();
    xHttpServerConf conf;
    xHttpServerConfInit(&conf);
    conf.max_connections = MAX_CONNECTIONS_PER_WORKER;
    xHttpServer *server = xHttpServerCreate(NULL, &conf);
    bool ok = server && add_routes(server, data_dir);
    xErrno listened = XERR_STATE;
    if (ok && host && *host) {
        listened = listen_tls(server, host, (uint16_t)port, certs_dir, http3);
    } else if (ok) { /* localhost may be ::1 first: both families where the host has IPv6 */
        host = "::";
        if ((listened = listen_tls(server, host, (uint16_t)port, certs_dir, http3)) != XOK)
            listened = listen_tls(server, host = "0.0.0.0", (uint16_t)port, certs_dir, http3);
    }
    xErrno err = XERR_STATE;
    if (ok && listened == XOK) {
        /* The first line in the form every xKit server prints (the tests read it). */
        printf("listening on %s:%u (%d workers)\n", host, port, xHttpServerWorkerCount(server));
        printf("TLS h2%s; to %s%s\n", http3 ? " and h3" : "", env_or("UPSTREAM", "http://127.0.0.1:8080"),
               edge.with_auth ? ", /api/* asked of AUTH_URL first" : "");
        fflush(stdout);
        err = xHttpServerRun(server);
    } else if (server) {
        fprintf(stderr, "edge: %s\n", xHttpServerLastError(server));
    }
    if (server) xHttpServerDestroy(server);
    xHttpProxyDestroy(edge.server);
    xHttpProxyDestroy(edge.with_auth);
    xHttpStaticDestroy(edge.static_files);
    return err == XOK ? 0 : 1;
}
