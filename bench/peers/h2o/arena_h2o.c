/* The arena's h2o entry as `xkbench arena` runs it: a small C program on libh2o (Debian's
 * libh2o-evloop-dev 2.2.5), built the way HttpArena's frameworks/h2o is, so that h2o is measured
 * with C handlers rather than mruby. One thread, one evloop, the four ports of ARENA_PORTS
 * ("h1,tls-h1,h2c,tls-h2": cleartext HTTP/1.1 with h2c by prior knowledge on both cleartext
 * ports, TLS with ALPN h2 or http/1.1 on both TLS ports), the data from DATA_DIR and the
 * certificate from CERTS_DIR (server.crt, server.key), as the arena mounts them.
 *
 *   GET|POST /baseline11, /baseline2  the sum of every integer query value (and a POST's body)
 *   GET /pipeline                     "ok"
 *   GET /json/{count}?m={m}           the first count items of dataset.json with "total", serialized
 *                                     per request from the items parsed at start
 *   GET /static/<file>                libh2o's file handler, the .br/.gz twins on disk
 *
 * Built by xkbench (xkbench/arena_peers.py) with
 *   cc -O2 -DH2O_USE_LIBUV=0 arena_h2o.c -lh2o-evloop -lssl -lcrypto -lz -lm
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <h2o.h>

enum { PORT_H1, PORT_TLS_H1, PORT_H2C, PORT_TLS_H2, PORT_COUNT };
enum { MAX_ITEMS = 64, MAX_TAGS = 16, MAX_JSON_COUNT = 50 };

/* A span of the dataset's text: strings are kept as they are written there, escapes included,
 * which is how they are written back. */
typedef struct {
    const char *at;
    size_t len;
} Span;

typedef struct {
    long long id, price, quantity, ratingScore, ratingCount;
    int active;
    Span name, category;
    Span tags[MAX_TAGS];
    size_t tagCount;
} Item;

static Item items[MAX_ITEMS];
static size_t itemCount;
static h2o_globalconf_t config;
static h2o_context_t context;
static h2o_accept_ctx_t plainAccept, tlsAccept;

/* --- dataset.json: an array of flat items, each with tags[] and rating{} -------------------- */

typedef struct {
    const char *at, *end;
    int failed;
} Reader;

static void skipSpace(Reader *r) {
    while (r->at < r->end && (*r->at == ' ' || *r->at == '\n' || *r->at == '\r' || *r->at == '\t')) r->at++;
}

static int expect(Reader *r, char c) {
    skipSpace(r);
    if (r->at < r->end && *r->at == c) {
        r->at++;
        return 1;
    }
    r->failed = 1;
    return 0;
}

static int peek(Reader *r, char c) {
    skipSpace(r);
    return r->at < r->end && *r->at == c;
}

static Span readString(Reader *r) {
    Span s = {NULL, 0};
    if (!expect(r, '"')) return s;
    s.at = r->at;
    while (r->at < r->end && *r->at != '"') r->at += *r->at == '\\' ? 2 : 1;
    if (r->at >= r->end) {
        r->failed = 1;
        return s;
    }
    s.len = (size_t)(r->at - s.at);
    r->at++;
    return s;
}

static long long readInteger(Reader *r) {
    skipSpace(r);
    char *end;
    long long value = strtoll(r->at, &end, 10);
    if (end == r->at) r->failed = 1;
    r->at = end;
    return value;
}

static int readBool(Reader *r) {
    skipSpace(r);
    if ((size_t)(r->end - r->at) >= 4 && memcmp(r->at, "true", 4) == 0) {
        r->at += 4;
        return 1;
    }
    if ((size_t)(r->end - r->at) >= 5 && memcmp(r->at, "false", 5) == 0) {
        r->at += 5;
        return 0;
    }
    r->failed = 1;
    return 0;
}

static int named(Span key, const char *name) {
    return key.len == strlen(name) && memcmp(key.at, name, key.len) == 0;
}

static void readRating(Reader *r, Item *item) {
    expect(r, '{');
    while (!r->failed && !peek(r, '}')) {
        Span key = readString(r);
        expect(r, ':');
        if (named(key, "score"))
            item->ratingScore = readInteger(r);
        else if (named(key, "count"))
            item->ratingCount = readInteger(r);
        else
            r->failed = 1;
        if (peek(r, ',')) r->at++;
    }
    expect(r, '}');
}

static void readItem(Reader *r, Item *item) {
    expect(r, '{');
    while (!r->failed && !peek(r, '}')) {
        Span key = readString(r);
        expect(r, ':');
        if (named(key, "id"))
            item->id = readInteger(r);
        else if (named(key, "name"))
            item->name = readString(r);
        else if (named(key, "category"))
            item->category = readString(r);
        else if (named(key, "price"))
            item->price = readInteger(r);
        else if (named(key, "quantity"))
            item->quantity = readInteger(r);
        else if (named(key, "active"))
            item->active = readBool(r);
        else if (named(key, "rating"))
            readRating(r, item);
        else if (named(key, "tags")) {
            expect(r, '[');
            while (!r->failed && !peek(r, ']') && item->tagCount < MAX_TAGS) {
                item->tags[item->tagCount++] = readString(r);
                if (peek(r, ',')) r->at++;
            }
            expect(r, ']');
        } else
            r->failed = 1;
        if (peek(r, ',')) r->at++;
    }
    expect(r, '}');
}

static int loadDataset(const char *path) {
    FILE *file = fopen(path, "rb");
    if (file == NULL) return -1;
    static char text[1 << 20];
    size_t len = fread(text, 1, sizeof(text), file);
    fclose(file);
    Reader r = {text, text + len, 0};
    expect(&r, '[');
    while (!r.failed && !peek(&r, ']') && itemCount < MAX_ITEMS) {
        readItem(&r, &items[itemCount++]);
        if (peek(&r, ',')) r.at++;
    }
    return r.failed || itemCount == 0 ? -1 : 0;
}

/* --- handlers ---------------------------------------------------------------------------------- */

/* The integer text spells, or 0: an optional '-' and digits only, as the contract sums them. */
static long long integerOf(const char *at, size_t len) {
    while (len > 0 &&
           (at[len - 1] == ' ' || at[len - 1] == '\n' || at[len - 1] == '\r' || at[len - 1] == '\t'))
        len--;
    while (len > 0 && (*at == ' ' || *at == '\n' || *at == '\r' || *at == '\t')) at++, len--;
    size_t i = len > 0 && *at == '-' ? 1 : 0;
    if (i == len) return 0;
    long long value = 0;
    for (size_t j = i; j < len; j++) {
        if (at[j] < '0' || at[j] > '9') return 0;
        value = value * 10 + (at[j] - '0');
    }
    return i ? -value : value;
}

static Span queryOf(h2o_req_t *req) {
    Span q = {NULL, 0};
    if (req->query_at != SIZE_MAX) {
        q.at = req->path.base + req->query_at + 1;
        q.len = req->path.len - req->query_at - 1;
    }
    return q;
}

/* Calls visit(value, state) for each name=value pair of the query whose name is name, or of every
 * pair when name is NULL. */
static void eachQueryValue(Span query, const char *name, void (*visit)(const char *, size_t, void *),
                           void *state) {
    const char *at = query.at, *end = query.at + query.len;
    size_t nameLen = name ? strlen(name) : 0;
    while (at != NULL && at < end) {
        const char *amp = memchr(at, '&', (size_t)(end - at));
        const char *pairEnd = amp ? amp : end;
        const char *eq = memchr(at, '=', (size_t)(pairEnd - at));
        if (eq != NULL && (name == NULL || ((size_t)(eq - at) == nameLen && memcmp(at, name, nameLen) == 0)))
            visit(eq + 1, (size_t)(pairEnd - eq - 1), state);
        at = pairEnd + 1;
    }
}

static void addValue(const char *at, size_t len, void *sum) { *(long long *)sum += integerOf(at, len); }

static void setValue(const char *at, size_t len, void *value) { *(long long *)value = integerOf(at, len); }

static long long querySum(Span query) {
    long long sum = 0;
    eachQueryValue(query, NULL, addValue, &sum);
    return sum;
}

static void respond(h2o_req_t *req, const char *type, size_t typeLen, char *body, size_t len) {
    static h2o_generator_t generator = {NULL, NULL};
    req->res.status = 200;
    req->res.reason = "OK";
    req->res.content_length = len;
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, type, typeLen);
    h2o_start_response(req, &generator);
    h2o_iovec_t buf = h2o_iovec_init(body, len);
    h2o_send(req, &buf, 1, H2O_SEND_STATE_FINAL);
}

static int onBaseline(h2o_handler_t *self, h2o_req_t *req) {
    (void)self;
    long long sum = querySum(queryOf(req));
    if (h2o_memis(req->method.base, req->method.len, H2O_STRLIT("POST")) && req->entity.base != NULL)
        sum += integerOf(req->entity.base, req->entity.len);
    char *body = h2o_mem_alloc_pool(&req->pool, 24);
    int len = snprintf(body, 24, "%lld", sum);
    respond(req, H2O_STRLIT("text/plain"), body, (size_t)len);
    return 0;
}

static int onPipeline(h2o_handler_t *self, h2o_req_t *req) {
    (void)self;
    respond(req, H2O_STRLIT("text/plain"), (char *)"ok", 2);
    return 0;
}

typedef struct {
    char *at;
} Writer;

static void put(Writer *w, const char *text, size_t len) {
    memcpy(w->at, text, len);
    w->at += len;
}
#define PUT_LITERAL(w, s) put((w), (s), sizeof(s) - 1)

static void putInteger(Writer *w, long long value) { w->at += sprintf(w->at, "%lld", value); }

static void putString(Writer *w, Span s) {
    *w->at++ = '"';
    put(w, s.at, s.len);
    *w->at++ = '"';
}

static size_t itemBound(const Item *item) {
    size_t bound = 256 + item->name.len + item->category.len;
    for (size_t t = 0; t < item->tagCount; t++) bound += item->tags[t].len + 3;
    return bound;
}

static int onJson(h2o_handler_t *self, h2o_req_t *req) {
    (void)self;
    const char *at = req->path_normalized.base + sizeof("/json/") - 1;
    if (req->path_normalized.len < sizeof("/json/")) return -1;
    long long count = integerOf(at, req->path_normalized.len - (sizeof("/json/") - 1));
    if (count < 0) count = 0;
    if (count > (long long)itemCount) count = (long long)itemCount;
    long long m = 1;
    eachQueryValue(queryOf(req), "m", setValue, &m);
    size_t bound = 64;
    for (long long i = 0; i < count; i++) bound += itemBound(&items[i]);
    Writer w = {h2o_mem_alloc_pool(&req->pool, bound)};
    char *body = w.at;
    PUT_LITERAL(&w, "{\"items\":[");
    for (long long i = 0; i < count; i++) {
        const Item *item = &items[i];
        if (i > 0) PUT_LITERAL(&w, ",");
        PUT_LITERAL(&w, "{\"id\":");
        putInteger(&w, item->id);
        PUT_LITERAL(&w, ",\"name\":");
        putString(&w, item->name);
        PUT_LITERAL(&w, ",\"category\":");
        putString(&w, item->category);
        PUT_LITERAL(&w, ",\"price\":");
        putInteger(&w, item->price);
        PUT_LITERAL(&w, ",\"quantity\":");
        putInteger(&w, item->quantity);
        if (item->active)
            PUT_LITERAL(&w, ",\"active\":true,\"tags\":[");
        else
            PUT_LITERAL(&w, ",\"active\":false,\"tags\":[");
        for (size_t t = 0; t < item->tagCount; t++) {
            if (t > 0) PUT_LITERAL(&w, ",");
            putString(&w, item->tags[t]);
        }
        PUT_LITERAL(&w, "],\"rating\":{\"score\":");
        putInteger(&w, item->ratingScore);
        PUT_LITERAL(&w, ",\"count\":");
        putInteger(&w, item->ratingCount);
        PUT_LITERAL(&w, "},\"total\":");
        putInteger(&w, item->price * item->quantity * m);
        PUT_LITERAL(&w, "}");
    }
    PUT_LITERAL(&w, "],\"count\":");
    putInteger(&w, count);
    PUT_LITERAL(&w, "}");
    respond(req, H2O_STRLIT("application/json"), body, (size_t)(w.at - body));
    return 0;
}

static void registerHandler(h2o_hostconf_t *host, const char *path,
                            int (*onRequest)(h2o_handler_t *, h2o_req_t *)) {
    h2o_pathconf_t *pathconf = h2o_config_register_path(host, path, 0);
    h2o_handler_t *handler = h2o_create_handler(pathconf, sizeof(*handler));
    handler->on_req = onRequest;
}

/* --- listeners ----------------------------------------------------------------------------------- */

static void onAccept(h2o_socket_t *listener, const char *err) {
    if (err != NULL) return;
    h2o_socket_t *sock;
    while ((sock = h2o_evloop_socket_accept(listener)) != NULL) h2o_accept(listener->data, sock);
}

static int listenOn(unsigned port, h2o_accept_ctx_t *accept) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int on = 1;
    struct sockaddr_in addr = {
        .sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(0x7f000001)};
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) != 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on)) != 0 ||
        bind(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0 || listen(fd, 4096) != 0) {
        fprintf(stderr, "arena_h2o: cannot listen on 127.0.0.1:%u: %s\n", port, strerror(errno));
        return -1;
    }
    h2o_socket_t *sock = h2o_evloop_socket_create(context.loop, fd, H2O_SOCKET_FLAG_DONT_READ);
    sock->data = accept;
    h2o_socket_read_start(sock, onAccept);
    return 0;
}

static SSL_CTX *makeTlsContext(const char *certsDir) {
    char cert[4096], key[4096];
    snprintf(cert, sizeof(cert), "%s/server.crt", certsDir);
    snprintf(key, sizeof(key), "%s/server.key", certsDir);
    SSL_CTX *ssl = SSL_CTX_new(TLS_server_method());
    SSL_CTX_set_min_proto_version(ssl, TLS1_2_VERSION);
    SSL_CTX_set_options(ssl, SSL_OP_NO_COMPRESSION);
    if (SSL_CTX_use_certificate_chain_file(ssl, cert) != 1 ||
        SSL_CTX_use_PrivateKey_file(ssl, key, SSL_FILETYPE_PEM) != 1) {
        fprintf(stderr, "arena_h2o: cannot load %s and %s\n", cert, key);
        ERR_print_errors_fp(stderr);
        return NULL;
    }
    h2o_ssl_register_alpn_protocols(ssl, h2o_http2_alpn_protocols);
    return ssl;
}

static const char *envOr(const char *name, const char *fallback) {
    const char *value = getenv(name);
    return value && *value ? value : fallback;
}

int main(void) {
    unsigned ports[PORT_COUNT];
    if (sscanf(envOr("ARENA_PORTS", "8080,8081,8082,8443"), "%u,%u,%u,%u", &ports[PORT_H1],
               &ports[PORT_TLS_H1], &ports[PORT_H2C], &ports[PORT_TLS_H2]) != PORT_COUNT) {
        fprintf(stderr, "arena_h2o: ARENA_PORTS must list four ports\n");
        return 1;
    }
    const char *dataDir = envOr("DATA_DIR", "/data");
    char path[4096];
    snprintf(path, sizeof(path), "%s/dataset.json", dataDir);
    if (loadDataset(path) != 0) {
        fprintf(stderr, "arena_h2o: cannot read the items of %s\n", path);
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);

    h2o_config_init(&config);
    h2o_hostconf_t *host = h2o_config_register_host(&config, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    registerHandler(host, "/baseline11", onBaseline);
    registerHandler(host, "/baseline2", onBaseline);
    registerHandler(host, "/pipeline", onPipeline);
    registerHandler(host, "/json/", onJson);
    h2o_mimemap_t *types = h2o_mimemap_create();
    h2o_mimemap_define_mimetype(types, "js", "application/javascript", NULL);
    h2o_mimemap_define_mimetype(types, "webp", "image/webp", NULL);
    h2o_mimemap_define_mimetype(types, "woff2", "font/woff2", NULL);
    h2o_mimemap_define_mimetype(types, "svg", "image/svg+xml", NULL);
    snprintf(path, sizeof(path), "%s/static", dataDir);
    h2o_file_register(h2o_config_register_path(host, "/static", 0), path, NULL, types,
                      H2O_FILE_FLAG_SEND_COMPRESSED);
    h2o_mem_release_shared(types);

    h2o_context_init(&context, h2o_evloop_create(), &config);
    plainAccept = (h2o_accept_ctx_t){.ctx = &context, .hosts = config.hosts};
    tlsAccept = plainAccept;
    if ((tlsAccept.ssl_ctx = makeTlsContext(envOr("CERTS_DIR", "/certs"))) == NULL) return 1;
    if (listenOn(ports[PORT_H1], &plainAccept) != 0 || listenOn(ports[PORT_TLS_H1], &tlsAccept) != 0 ||
        listenOn(ports[PORT_H2C], &plainAccept) != 0 || listenOn(ports[PORT_TLS_H2], &tlsAccept) != 0)
        return 1;
    while (h2o_evloop_run(context.loop, INT32_MAX) == 0)
        ;
    return 0;
}
