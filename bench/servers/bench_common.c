/* bench_common.c — the bench routes and flags (see bench_common.h). */
#include "bench_common.h"
#include "shared_handlers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <xbase/event.h>
#include <xbase/log.h>
#include <xhttp/observe.h>
#include <xhttp/proxy.h>
#include <xhttp/compress.h>
#include <xhttp/static.h>
#include <xhttp/tls.h>

#define ECHO_MAX_SIZE (16u << 20)
#define ECHO_MAX_BODY (64u << 20)
#define DELAY_MAX_MS 60000

/* One static block of 'x' answers every GET /echo without copying. */
static char echo_bytes[ECHO_MAX_SIZE];

static const char routes_text[] =
    "xKit bench server (the routes after POST /echo: with --test-routes only)\n"
    "GET  /ping                     pong\n"
    "GET  /echo?size=N              N bytes of 'x' (N <= 16 MiB)\n"
    "POST /echo                     the request body back\n"
    "POST /upload                   the body streamed in, never held whole: its size and CRC-32\n"
    "        [?hold_ms=N]            ... taking none of it for the first N ms\n"
    "        [&reject_after=N]       ... answering 413 once more than N bytes came\n"
    "        [&no_abort_callback=1]  ... finding out only when the hold ends that the client left\n"
    "GET  /delay?ms=N               'done' after N ms\n"
    "                                (with X-Echo: the method, path and fields, as read then)\n"
    "GET  /stream?chunks=N&size=M   a streamed body of N chunks of M bytes\n"
    "                  [&trailer=V]  ... followed by the trailer X-Stream-Trailer: V\n"
    "                  [&type=T]     ... as Content-Type T (application/octet-stream)\n"
    "GET  /tls                      how the connection is secured, as JSON\n"
    "GET  /whoami[?q=V&cookie=NAME] the client's address and ports, the scheme, V decoded\n"
    "                                and cookie NAME's value (default id), as JSON\n"
    "POST /benchmark.BenchmarkService/GetSum  gRPC (HTTP/2): SumRequest{int32 a=1; int32 b=2}\n"
    "                                -> SumReply{int32 result=1}\n"
    "GET  /json                     an 8 KiB JSON document (also without --test-routes\n"
    "                                when --compress is given)\n"
    "GET  /text?size=N              N bytes (<= 64 KiB) of text, sent whole:\n"
    "        [&type=T]               ... as Content-Type T (text/plain)\n"
    "        [&status=S]             ... with status S\n"
    "        [&encoding=E&etag=V]    ... with Content-Encoding E, with ETag V\n"
    "        [&cache=V]              ... with Cache-Control V\n"
    "        [&ref=1&no_compress=1]  ... with SendRef; never compressed (xHttpResponseNoCompress)\n"
    "GET  /drip?pieces=N&ms=M       N lines of text streamed, one each M ms\n"
    "GET  /blocking?ms=N            N ms (<= 10000) asleep on a blocking-pool thread, then\n"
    "                                the threads' ids as JSON (503 when the pool is full)\n"
    "GET  /worker                   with --worker-hooks: the worker's own state, as JSON\n"
    "GET  /uncompressed             4 KiB of text on a route added with\n"
    "                                xHttpServerRouteUncompressed\n"
    "GET  /static/*                 the files under --static DIR (with or without --test-routes)\n";

bool benchParseSize(xStr s, unsigned long max, unsigned long *out) {
    if (s.len == 0 || s.len > 10) return false;
    unsigned long v = 0;
    for (size_t i = 0; i < s.len; i++) {
        if (s.data[i] < '0' || s.data[i] > '9') return false;
        v = v * 10 + (unsigned long)(s.data[i] - '0');
    }
    if (v > max) return false;
    *out = v;
    return true;
}

static bool query_size(xHttpRequest *req, const char *name, unsigned long max, unsigned long *out) {
    xStr value;
    return xHttpRequestQueryParam(req, name, &value) && benchParseSize(value, max, out);
}

static void bad_request(xHttpResponse *res, const char *why) {
    xHttpResponseSetStatus(res, 400);
    xHttpResponseAddHeader(res, "Content-Type", "text/plain");
    xHttpResponseSend(res, why, strlen(why));
}

static void on_ping(xHttpRequest *req, xHttpResponse *res, void *arg) {
    xHttpResponseAddHeader(res, "Content-Type", "text/plain");
    xHttpResponseSendRef(res, "pong", 4, NULL, NULL);
}

static void on_echo_get(xHttpRequest *req, xHttpResponse *res, void *arg) {
    unsigned long size;
    if (!query_size(req, "size", ECHO_MAX_SIZE, &size)) {
        bad_request(res, "size must be an integer from 0 to 16777216\n");
        return;
    }
    xHttpResponseAddHeader(res, "Content-Type", "application/octet-stream");
    xHttpResponseSendRef(res, echo_bytes, size, NULL, NULL);
}

/* POST /upload: a streaming route. The body is checksummed piece by piece as
 * it arrives, so its size is unbounded and its memory is one piece. */
typedef struct Upload {
    xTimer hold; /* the pause a held upload ends with */
    xHttpRequest *req;
    xHttpResponse *res;
    xEventLoop *loop;
    uint64_t bytes, pieces, reject_after;
    uint32_t crc; /* CRC-32 (IEEE), as zlib and Python compute it */
    bool watched; /* an abort callback is set */
} Upload;

static uint32_t crc32_table[256];

static void crc32_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
        crc32_table[i] = c;
    }
}

static uint32_t crc32_update(uint32_t crc, const char *data, size_t len) {
    crc = ~crc;
    for (size_t i = 0; i < len; i++) crc = crc32_table[(crc ^ (unsigned char)data[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

static void upload_free(Upload *u) {
    xTimerStop(u->loop, &u->hold);
    free(u);
}

static void on_upload_abort(xHttpResponse *res, void *arg) { upload_free(arg); }

static void on_upload_piece(xHttpRequest *req, xHttpResponse *res, const char *data, size_t len, bool end,
                            void *arg) {
    Upload *u = arg;
    u->bytes += len;
    u->pieces += len > 0;
    u->crc = crc32_update(u->crc, data, len);
    char body[128];
    int n;
    if (u->reject_after && u->bytes > u->reject_after) {
        xHttpResponseSetStatus(res, 413);
        n = snprintf(body, sizeof body, "{\"error\":\"more than %llu bytes\"}\n",
                     (unsigned long long)u->reject_after);
    } else if (end) {
        n = snprintf(body, sizeof body, "{\"bytes\":%llu,\"pieces\":%llu,\"crc32\":\"%08x\"}\n",
                     (unsigned long long)u->bytes, (unsigned long long)u->pieces, u->crc);
    } else {
        return;
    }
    upload_free(u);
    xHttpResponseAddHeader(res, "Content-Type", "application/json");
    xHttpResponseSend(res, body, (size_t)n);
}

static void on_upload_hold_over(xEventLoop *loop, xTimer *timer, void *arg) {
    Upload *u = arg;
    xHttpRequest *req = u->req;
    xHttpResponse *res = u->res;
    bool watched = u->watched;
    xHttpRequestResumeBody(req); /* may deliver, answer and free u */
    if (watched || !xHttpResponseAborted(res)) return;
    /* Without an abort callback the request stays ours, views and all,
     * until we end it, even though the client has gone. */
    XLOG_INFO("upload to %.*s abandoned by its client", (int)xHttpRequestPath(req).len,
              xHttpRequestPath(req).data);
    free(u);
    xHttpResponseEnd(res);
}

static void on_upload(xHttpRequest *req, xHttpResponse *res, void *arg) {
    unsigned long hold_ms = 0, reject_after = 0;
    xStr value;
    if ((xHttpRequestQueryParam(req, "hold_ms", &value) && !benchParseSize(value, DELAY_MAX_MS, &hold_ms)) ||
        (xHttpRequestQueryParam(req, "reject_after", &value) &&
         !benchParseSize(value, 4000000000ul, &reject_after))) {
        bad_request(res, "hold_ms (<= 60000) and reject_after must be integers\n");
        return;
    }
    Upload *u = calloc(1, sizeof *u);
    if (!u) {
        xHttpResponseSetStatus(res, 503);
        xHttpResponseSend(res, NULL, 0);
        return;
    }
    u->req = req;
    u->res = res;
    u->loop = xHttpRequestLoop(req);
    u->reject_after = reject_after;
    u->watched = !xHttpRequestQueryParam(req, "no_abort_callback", &value);
    xTimerInit(&u->hold, on_upload_hold_over, u);
    if (u->watched) xHttpResponseOnAbort(res, on_upload_abort, u);
    xHttpRequestReadBody(req, on_upload_piece, u);
    if (hold_ms) {
        xHttpRequestPauseBody(req);
        xTimerStart(u->loop, &u->hold, hold_ms);
    }
}

static void on_index(xHttpRequest *req, xHttpResponse *res, void *arg) {
    xHttpResponseAddHeader(res, "Content-Type", "text/plain");
    xHttpResponseSendRef(res, routes_text, sizeof routes_text - 1, NULL, NULL);
}

typedef struct Delayed {
    xTimer timer;
    xHttpRequest *req;
    xHttpResponse *res;
    xEventLoop *loop;
} Delayed;

/* A delayed answer to a request with X-Echo: its method, path and fields as
 * the handler reads them once the delay is over, a line each, so tests see
 * that a request's views outlive what the protocol received after it. */
static size_t echo_request(const xHttpRequest *req, char *out, size_t cap) {
    xStr method = xHttpRequestMethod(req), path = xHttpRequestPath(req), name, value;
    int n = snprintf(out, cap, "%.*s %.*s\n", (int)method.len, method.data, (int)path.len, path.data);
    size_t len = n > 0 ? (size_t)n : 0;
    for (size_t i = 0; len < cap && xHttpRequestHeaderAt(req, i, &name, &value); i++) {
        n = snprintf(out + len, cap - len, "%.*s: %.*s\n", (int)name.len, name.data, (int)value.len,
                     value.data);
        len += n > 0 ? (size_t)n : 0;
    }
    return len < cap ? len : cap - 1;
}

static void on_delay_abort(xHttpResponse *res, void *arg) {
    Delayed *d = arg;
    xTimerStop(d->loop, &d->timer);
    free(d);
}

static void on_delay_done(xEventLoop *loop, xTimer *timer, void *arg) {
    Delayed *d = arg;
    char echo[2048];
    xStr asked;
    xHttpResponseAddHeader(d->res, "Content-Type", "text/plain");
    if (xHttpRequestHeader(d->req, "x-echo", &asked))
        xHttpResponseSend(d->res, echo, echo_request(d->req, echo, sizeof echo));
    else
        xHttpResponseSend(d->res, "done", 4);
    free(d);
}

static void on_delay(xHttpRequest *req, xHttpResponse *res, void *arg) {
    unsigned long ms;
    if (!query_size(req, "ms", DELAY_MAX_MS, &ms)) {
        bad_request(res, "ms must be an integer from 0 to 60000\n");
        return;
    }
    Delayed *d = malloc(sizeof *d);
    if (!d) {
        xHttpResponseSetStatus(res, 503);
        xHttpResponseSend(res, NULL, 0);
        return;
    }
    d->req = req;
    d->res = res;
    d->loop = xHttpRequestLoop(req);
    xHttpResponseOnAbort(res, on_delay_abort, d);
    xTimerInit(&d->timer, on_delay_done, d);
    xTimerStart(xHttpRequestLoop(req), &d->timer, ms);
}

/* Copies query parameter name, if present, into out as a C string. */
static bool query_text(xHttpRequest *req, const char *name, char *out, size_t cap) {
    xStr v;
    if (!xHttpRequestQueryParam(req, name, &v) || v.len >= cap) return false;
    memcpy(out, v.data, v.len);
    out[v.len] = '\0';
    return true;
}

static void on_stream(xHttpRequest *req, xHttpResponse *res, void *arg) {
    unsigned long chunks, size;
    if (!query_size(req, "chunks", 100000, &chunks) || !query_size(req, "size", 1u << 20, &size)) {
        bad_request(res, "chunks (<= 100000) and size (<= 1048576) are required\n");
        return;
    }
    char type[128] = "application/octet-stream";
    query_text(req, "type", type, sizeof type); /* a listed type is compressed with --compress */
    xHttpResponseAddHeader(res, "Content-Type", type);
    char *piece = malloc(size ? size : 1);
    for (unsigned long i = 0; piece && i < chunks; i++) {
        memset(piece, '0' + (int)(i % 10), size);
        xHttpResponseWrite(res, piece, size);
    }
    free(piece);
    xStr trailer;
    if (xHttpRequestQueryParam(req, "trailer", &trailer)) {
        char value[64];
        snprintf(value, sizeof value, "%.*s", (int)(trailer.len < 60 ? trailer.len : 60), trailer.data);
        xHttpResponseAddTrailer(res, "X-Stream-Trailer", value);
    }
    xHttpResponseEnd(res);
}

/* GET /tls: how this request's connection is secured, as JSON. */
static void on_tls(xHttpRequest *req, xHttpResponse *res, void *arg) {
    xTlsInfo info;
    char body[1024];
    int n;
    if (xHttpRequestTls(req, &info)) {
        /* Subjects are one-line X.509 names; drop what would break the JSON. */
        for (char *c = info.client_subject; *c; c++)
            if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20) *c = '?';
        n = snprintf(
            body, sizeof body,
            "{\"tls\":true,\"protocol\":\"%s\",\"version\":\"%s\",\"cipher\":\"%s\",\"alpn\":\"%s\","
            "\"sni\":\"%.200s\",\"resumed\":%s,\"ktls_send\":%s,\"ktls_recv\":%s,\"xkit_records\":%s,"
            "\"client_verified\":%s,\"client_subject\":\"%s\"}\n",
            xHttpRequestProtocol(req), info.version, info.cipher, info.alpn, info.server_name,
            info.resumed ? "true" : "false", info.ktls_send ? "true" : "false",
            info.ktls_recv ? "true" : "false", info.xkit_records ? "true" : "false",
            info.client_verified ? "true" : "false", info.client_subject);
    } else {
        n = snprintf(body, sizeof body, "{\"tls\":false,\"protocol\":\"%s\"}\n", xHttpRequestProtocol(req));
    }
    xHttpResponseAddHeader(res, "Content-Type", "application/json");
    xHttpResponseSend(res, body, n < (int)sizeof body ? (size_t)n : sizeof body - 1);
}

/* Appends v as a JSON string (quotes, backslashes and controls escaped) to
 * out, which has room for at least 6 * v.len + 3 bytes; returns the end. */
static char *put_json_string(char *out, xStr v) {
    *out++ = '"';
    for (size_t i = 0; i < v.len; i++) {
        unsigned char c = (unsigned char)v.data[i];
        if (c == '"' || c == '\\')
            out += sprintf(out, "\\%c", c);
        else if (c < 0x20)
            out += sprintf(out, "\\u%04x", c);
        else
            *out++ = (char)c;
    }
    *out++ = '"';
    return out;
}

/* GET /whoami[?q=V][&cookie=NAME]: who the client is as the server sees it,
 * as JSON: its address and port, the port it reached, the scheme and
 * protocol, q percent-decoded as a query value ('+' a space; null when
 * absent, false when malformed), and cookie NAME's value (default "id"). */
static void on_whoami(xHttpRequest *req, xHttpResponse *res, void *arg) {
    enum { MAX_VALUE = 256 };
    char body[1024 + 2 * (6 * MAX_VALUE + 3)], decoded[MAX_VALUE];
    xHttpPeer peer;
    if (!xHttpRequestPeer(req, &peer)) {
        xHttpResponseSetStatus(res, 500);
        xHttpResponseSend(res, "peer unknown\n", 13);
        return;
    }
    char *p = body + sprintf(body,
                             "{\"family\":\"%s\",\"address\":\"%s\",\"port\":%u,\"local_port\":%u,"
                             "\"scheme\":\"%s\",\"protocol\":\"%s\",\"q\":",
                             peer.family == AF_INET6 ? "ipv6" : "ipv4", peer.address, peer.port,
                             peer.local_port, xHttpRequestScheme(req), xHttpRequestProtocol(req));
    xStr q, cookie_name = xStrFromC("id"), cookie;
    size_t len;
    if (!xHttpRequestQueryParam(req, "q", &q))
        p += sprintf(p, "null");
    else if (xHttpPercentDecode(q, decoded, sizeof decoded, XHTTP_DECODE_PLUS_SPACE, &len) != XOK)
        p += sprintf(p, "false");
    else
        p = put_json_string(p, (xStr){decoded, len});
    p += sprintf(p, ",\"cookie\":");
    char name[64];
    if (xHttpRequestQueryParam(req, "cookie", &cookie_name)) {
        snprintf(name, sizeof name, "%.*s", (int)(cookie_name.len < 63 ? cookie_name.len : 63),
                 cookie_name.data);
    } else {
        snprintf(name, sizeof name, "id");
    }
    if (xHttpRequestCookie(req, name, &cookie))
        p = put_json_string(p, (xStr){cookie.data, cookie.len < MAX_VALUE ? cookie.len : MAX_VALUE});
    else
        p += sprintf(p, "null");
    p += sprintf(p, "}\n");
    xHttpResponseAddHeader(res, "Content-Type", "application/json");
    xHttpResponseSend(res, body, (size_t)(p - body));
}

/* --proxy-protocol NETWORKS: every listener reads the PROXY protocol from
 * those networks. */
static const char *proxy_networks;

/* --trust-forwarded NETWORKS, --health PATH, --listen-fd N: see benchListen. */
static const char *forwarded_networks;
static const char *health_path;
static long listen_fd = -1;

/* Set by --test-routes (the integration tests' harness passes it). */
static bool test_routes;
/* Set by --ws-deflate: /ws offers permessage-deflate. */
static bool ws_deflate;

/* ---- What compression measures and the tests check ---- */

#define JSON_SIZE 8192
#define TEXT_MAX (64u << 10)
#define DRIP_MAX_PIECES 1000

static char json_body[JSON_SIZE];
static size_t json_len;
static char text_bytes[TEXT_MAX];

/* The same document every run: an array of user records, as an API returns. */
static void make_bodies(void) {
    size_t n = 0;
    for (unsigned i = 0; n < JSON_SIZE - 160; i++)
        n += (size_t)snprintf(json_body + n, JSON_SIZE - n,
                              "%s{\"id\":%u,\"name\":\"user %u\",\"email\":\"user%u@example.com\","
                              "\"active\":%s,\"score\":%u,\"tags\":[\"t%u\",\"t%u\"]}",
                              i ? "," : "[", i, i * 7919 % 10007, i * 31 % 1009, i % 3 ? "true" : "false",
                              i * 7919 % 1000, i % 17, i % 5);
    json_body[n++] = ']';
    json_len = n;
    for (size_t i = 0; i < TEXT_MAX; i++) text_bytes[i] = json_body[i % json_len];
}

const char *benchJsonBody(size_t *len) {
    if (!json_len) make_bodies();
    *len = json_len;
    return json_body;
}

static void on_json(xHttpRequest *req, xHttpResponse *res, void *arg) {
    xHttpResponseAddHeader(res, "Content-Type", "application/json");
    xHttpResponseSendRef(res, json_body, json_len, NULL, NULL);
}

static void on_text(xHttpRequest *req, xHttpResponse *res, void *arg) {
    unsigned long size, status, flag;
    char type[128] = "text/plain", value[128];
    if (!query_size(req, "size", TEXT_MAX, &size)) {
        bad_request(res, "size must be an integer from 0 to 65536\n");
        return;
    }
    if (query_size(req, "status", 999, &status)) xHttpResponseSetStatus(res, (int)status);
    query_text(req, "type", type, sizeof type);
    xHttpResponseAddHeader(res, "Content-Type", type);
    if (query_text(req, "encoding", value, sizeof value))
        xHttpResponseAddHeader(res, "Content-Encoding", value);
    if (query_text(req, "etag", value, sizeof value)) xHttpResponseAddHeader(res, "ETag", value);
    if (query_text(req, "server", value, sizeof value)) xHttpResponseAddHeader(res, "Server", value);
    if (query_text(req, "cache", value, sizeof value)) xHttpResponseAddHeader(res, "Cache-Control", value);
    if (query_size(req, "no_compress", 1, &flag) && flag) xHttpResponseNoCompress(res);
    if (query_size(req, "ref", 1, &flag) && flag)
        xHttpResponseSendRef(res, text_bytes, size, NULL, NULL);
    else
        xHttpResponseSend(res, text_bytes, size);
}

static void on_uncompressed(xHttpRequest *req, xHttpResponse *res, void *arg) {
    xHttpResponseAddHeader(res, "Content-Type", "text/plain");
    xHttpResponseSendRef(res, text_bytes, 4096, NULL, NULL);
}

/* GET /drip: a streamed body written a line at a time, with a pause before
 * each, so a client can show it decodes each line before the next exists. */
typedef struct Drip {
    xTimer timer; /* the next piece */
    xHttpResponse *res;
    xEventLoop *loop;
    unsigned long pieces, sent, ms;
} Drip;

static void on_drip_abort(xHttpResponse *res, void *arg) {
    Drip *d = arg;
    xTimerStop(d->loop, &d->timer);
    free(d);
}

static void on_drip_tick(xEventLoop *loop, xTimer *timer, void *arg) {
    Drip *d = arg;
    char line[96];
    int n = snprintf(line, sizeof line, "piece %lu of %lu: the quick brown fox jumps over the lazy dog\n",
                     d->sent + 1, d->pieces);
    xHttpResponseWrite(d->res, line, (size_t)n);
    if (++d->sent < d->pieces) {
        xTimerStart(loop, &d->timer, d->ms);
        return;
    }
    xHttpResponseEnd(d->res);
    free(d);
}

static void on_drip(xHttpRequest *req, xHttpResponse *res, void *arg) {
    unsigned long pieces, ms;
    if (!query_size(req, "pieces", DRIP_MAX_PIECES, &pieces) || !pieces ||
        !query_size(req, "ms", DELAY_MAX_MS, &ms)) {
        bad_request(res, "pieces (1 to 1000) and ms (<= 60000) are required\n");
        return;
    }
    Drip *d = calloc(1, sizeof *d);
    if (!d) {
        xHttpResponseSetStatus(res, 503);
        xHttpResponseSend(res, NULL, 0);
        return;
    }
    *d = (Drip){.res = res, .loop = xHttpRequestLoop(req), .pieces = pieces, .ms = ms};
    xHttpResponseAddHeader(res, "Content-Type", "text/plain; charset=utf-8");
    xHttpResponseOnAbort(res, on_drip_abort, d);
    xTimerInit(&d->timer, on_drip_tick, d);
    on_drip_tick(d->loop, &d->timer, d);
}

/* Set by --test-routes (the integration tests' harness passes it), and --compress. */
static bool test_routes, compress;
/* --server-name NAME: the Server field ("" for none); --own-answers: the
 * server's own 404, 405 and error bodies replaced (on_not_found...). */
static const char *server_name;
static bool own_answers;

/* Set by --access-log PATH, --log-format, --metrics, --request-durations and
 * --user-metrics. */
static const char *access_log;
static xHttpLogFormat log_format = XHTTP_LOG_COMBINED;
static bool metrics, request_durations, user_metrics;
static unsigned long log_flush_ms = 100;

/* Turns on what --access-log, --metrics, --request-durations and
 * --user-metrics asked for. */
static bool add_observers(xHttpServer *server) {
    if (metrics) xHttpServerMetricsRoute(server, "/metrics");
    if (request_durations) xHttpServerRequestDurations(server, NULL, 0);
    if (user_metrics && !benchAddUserMetrics(server)) return false;
    if (!access_log) return true;
    xHttpAccessLogOpts opts;
    xHttpAccessLogOptsInit(&opts);
    opts.path = access_log;
    opts.format = log_format;
    opts.flush_ms = (uint32_t)log_flush_ms;
    if (xHttpServerAccessLog(server, &opts) == XOK) return true;
    fprintf(stderr, "%s\n", xHttpServerLastError(server));
    return false;
}

/* --static DIR and its options; files is made by benchAddRoutes. */
#define MAX_STATIC_TYPES 8
static xHttpStaticConf static_conf;
static xHttpStaticType static_types[MAX_STATIC_TYPES];
static xHttpStatic *static_files;

/* --static-type EXT=TYPE, split in place. */
static bool add_static_type(char *spec) {
    char *eq = strchr(spec, '=');
    if (!eq || static_conf.num_types == MAX_STATIC_TYPES) return false;
    *eq = '\0';
    static_types[static_conf.num_types++] = (xHttpStaticType){spec, eq + 1};
    static_conf.types = static_types;
    return true;
}

/* --own-answers: a JSON 404 naming the path, a 405 that lists what is
 * allowed, and bodies of our own for what the server refuses itself. */
static void on_not_found(xHttpRequest *req, xHttpResponse *res, void *arg) {
    xStr path = xHttpRequestPath(req);
    char body[256];
    int n = snprintf(body, sizeof body, "{\"error\":\"no route\",\"path_bytes\":%zu}\n", path.len);
    xHttpResponseAddHeader(res, "Content-Type", "application/json");
    xHttpResponseSend(res, body, (size_t)n);
}

static void on_not_allowed(xHttpRequest *req, xHttpResponse *res, void *arg) {
    xHttpResponseAddHeader(res, "Content-Type", "text/plain");
    xHttpResponseSend(res, "not with this method\n", 21);
}

static bool set_own_answers(xHttpServer *server) {
    static const char any[] = "<!doctype html><title>Refused</title><p>The server refused this request.\n";
    static const char too_large[] = "{\"error\":\"too large\"}\n";
    if (server_name && xHttpServerSetServerName(server, server_name) != XOK) {
        fprintf(stderr, "--server-name: not a field value\n");
        return false;
    }
    if (!own_answers) return true;
    xHttpServerRouteNotFound(server, on_not_found, NULL);
    xHttpServerRouteMethodNotAllowed(server, on_not_allowed, NULL);
    xHttpServerErrorBody(server, 0, "text/html; charset=utf-8", any, sizeof any - 1);
    xHttpServerErrorBody(server, 413, "application/json", too_large, sizeof too_large - 1);
    return true;
}

/* --upstream URL (repeatable), --upstream-timeout MS, --upstream-pool N:
 * what no route answers is proxied to the upstreams (buffered bodies), and
 * everything under /upstream/ too, with bodies streamed. */
#define BENCH_MAX_UPSTREAMS 8
static const char *upstream_urls[BENCH_MAX_UPSTREAMS];
static size_t num_upstreams;
static uint32_t upstream_timeout_ms;
static unsigned upstream_pool;
static uint32_t upstream_keepalive_ms; /* --upstream-keepalive MS: an idle pooled connection's life */
static uint32_t upstream_total_timeout_ms;
static const char *upstream_balance; /* --upstream-balance: rr, least-conn, hash-address, hash-header:NAME */
static const char *upstream_health;  /* --upstream-health PATH:MS */
static xHttpProxy *proxy;
/* --upstream-resolver IP[:PORT][,...], --upstream-resolve-interval MS: how upstream names are looked up. */
static const char *upstream_resolvers;
static uint32_t upstream_resolve_interval_ms;
/* --upstream-ca FILE, --upstream-server-name NAME, --upstream-insecure: https:// upstreams' checks. */
static const char *upstream_ca_file, *upstream_server_name;
static bool upstream_insecure;
static unsigned upstream_proxy_protocol; /* --upstream-proxy-protocol 1|2 */
static bool upstream_h2;                 /* --upstream-h2: HTTP/2 (h2c on http://, h2 on https://) */
/* --upstream-stream: every POST and PUT no other route takes is proxied with its body streamed (and
 * a large one spliced), not only under /upstream/; --upstream-splice-min BYTES: conf.splice_min (0: never
 * splice). */
static bool upstream_stream;
static const char *upstream_splice_min;
/* --upstream-auth URL, --upstream-auth-target PATH, --upstream-auth-method M, --upstream-auth-copy NAME
 * (repeatable): the auth subrequest. */
static const char *upstream_auth_url, *upstream_auth_target, *upstream_auth_method, *upstream_auth_copy[4];
static size_t upstream_num_auth_copy;

/* --upstream-balance and --upstream-health into conf; false when malformed. */
static bool proxy_choices(xHttpProxyConf *conf, char *check_path, size_t cap) {
    const char *b = upstream_balance ? upstream_balance : "rr";
    if (strncmp(b, "hash-header:", 12) == 0 && b[12]) {
        conf->balance = XHTTP_PROXY_HASH_HEADER;
        conf->hash_header = b + 12;
    } else if (strcmp(b, "least-conn") == 0 || strcmp(b, "hash-address") == 0 || strcmp(b, "rr") == 0) {
        conf->balance = b[0] == 'l' ? XHTTP_PROXY_LEAST_CONN : b[0] == 'h' ? XHTTP_PROXY_HASH_ADDRESS : 0;
    } else {
        return false;
    }
    if (!upstream_health) return true;
    const char *colon = strrchr(upstream_health, ':');
    if (!colon || (size_t)(colon - upstream_health) >= cap || upstream_health[0] != '/') return false;
    memcpy(check_path, upstream_health, (size_t)(colon - upstream_health));
    check_path[colon - upstream_health] = '\0';
    conf->health_path = check_path;
    conf->health_interval_ms = (uint32_t)strtoul(colon + 1, NULL, 10);
    return conf->health_interval_ms > 0;
}

static bool add_proxy(xHttpServer *server) {
    if (!num_upstreams) return true;
    xHttpProxyConf conf;
    xHttpProxyConfInit(&conf);
    conf.upstreams = upstream_urls;
    conf.num_upstreams = num_upstreams;
    if (upstream_timeout_ms) {
        conf.upstream.connect_timeout_ms = conf.upstream.send_timeout_ms = upstream_timeout_ms;
        conf.upstream.first_byte_timeout_ms = conf.upstream.idle_timeout_ms = upstream_timeout_ms;
    }
    if (upstream_pool) conf.upstream.max_conns = conf.upstream.max_idle = upstream_pool;
    if (upstream_keepalive_ms) conf.upstream.keepalive_ms = upstream_keepalive_ms;
    conf.upstream.total_timeout_ms = upstream_total_timeout_ms;
    char check_path[256];
    if (!proxy_choices(&conf, check_path, sizeof check_path)) {
        fprintf(
            stderr,
            "--upstream-balance rr|least-conn|hash-address|hash-header:NAME, --upstream-health /PATH:MS\n");
        return false;
    }
    conf.upstream.resolvers = upstream_resolvers;
    conf.upstream.resolve_interval_ms = upstream_resolve_interval_ms;
    conf.upstream.tls_ca_file = upstream_ca_file;
    conf.upstream.tls_server_name = upstream_server_name;
    conf.upstream.tls_verify = !upstream_insecure;
    conf.proxy_protocol = upstream_proxy_protocol;
    if (upstream_h2) conf.upstream.protocol = XHTTP_UPSTREAM_HTTP2;
    if (upstream_splice_min) conf.splice_min = (size_t)strtoull(upstream_splice_min, NULL, 10);
    conf.auth_url = upstream_auth_url;
    conf.auth_target = upstream_auth_target;
    conf.auth_method = upstream_auth_method;
    conf.auth_copy = upstream_auth_copy;
    conf.num_auth_copy = upstream_num_auth_copy;
    if (upstream_timeout_ms) conf.upstream.resolve_timeout_ms = upstream_timeout_ms;
    xErrno err = xHttpProxyCreate(server, &conf, &proxy);
    if (err == XOK) err = xHttpProxyUseWorkerHooks(server, proxy);
    if (err != XOK) {
        fprintf(stderr, "--upstream: %s (--worker-hooks cannot be given with it)\n", xErrnoString(err));
        return false;
    }
    xHttpServerRouteNotFound(server, xHttpProxyHandler, proxy);
    xHttpServerRouteMethodNotAllowed(server, xHttpProxyHandler, proxy);
    xHttpServerRouteStreaming(server, "/upstream/*", xHttpProxyHandler, proxy);
    if (upstream_stream) { /* uploads only: a GET costs less through the fallback than on a streaming route */
        xHttpServerRouteStreaming(server, "POST /*", xHttpProxyHandler, proxy);
        xHttpServerRouteStreaming(server, "PUT /*", xHttpProxyHandler, proxy);
    }
    return true;
}

bool benchAddRoutes(xHttpServer *server) {
    if (!set_own_answers(server)) return false;
    if (static_conf.root) {
        xErrno err = xHttpStaticCreate(&static_conf, &static_files);
        if (err != XOK) {
            fprintf(stderr, "--static %s: %s\n", static_conf.root, xErrnoString(err));
            return false;
        }
        xHttpServerRoute(server, "GET /static/*", xHttpStaticHandler, static_files);
    }
    memset(echo_bytes, 'x', sizeof echo_bytes);
    size_t unused;
    benchJsonBody(&unused);
    if (compress) {
        xErrno err = xHttpServerCompress(server, NULL);
        if (err != XOK) fprintf(stderr, "compression stays off: %s\n", xErrnoString(err));
    }
    if (compress || test_routes) xHttpServerRoute(server, "GET /json", on_json, NULL);
    xHttpServerRoute(server, "GET /ping", on_ping, NULL);
    xHttpServerRoute(server, "GET /echo", on_echo_get, NULL);
    xHttpServerRoute(server, "POST /echo", sharedEchoBody, NULL);
    xHttpServerRoute(server, "GET /", on_index, NULL);
    xHttpServerRoute(server, "POST /", on_index, NULL);
    if (!add_observers(server)) return false;
    benchAddWebSocket(server, ws_deflate, test_routes);
    if (!benchAddWorkerRoutes(server, test_routes) || !add_proxy(server)) return false;
    if (!test_routes) return true;
    /* Each literal first segment is one more edge at the router's root, which every request
     * searches: about 5 ns more per GET /ping (bench/README.md), so not in measured runs. */
    crc32_init();
    xHttpServerRoute(server, "GET /delay", on_delay, NULL);
    xHttpServerRoute(server, "GET /stream", on_stream, NULL);
    xHttpServerRoute(server, "GET /tls", on_tls, NULL);
    xHttpServerRoute(server, "GET /whoami", on_whoami, NULL);
    xHttpServerRouteStreaming(server, "POST /upload", on_upload, NULL);
    xHttpServerRoute(server, "POST /benchmark.BenchmarkService/GetSum", sharedGrpcGetSum, NULL);
    xHttpServerRoute(server, "GET /text", on_text, NULL);
    xHttpServerRoute(server, "GET /drip", on_drip, NULL);
    xHttpServerRouteUncompressed(server, "GET /uncompressed", on_uncompressed, NULL);
    return true;
}

void benchFreeRoutes(void) {
    xHttpStaticDestroy(static_files);
    static_files = NULL;
    xHttpProxyDestroy(proxy);
    proxy = NULL;
}

const char benchCommonUsage[] =
    "       [--workers N] [--host H] [--idle-timeout MS] [--header-timeout MS]\n"
    "       [--body-timeout MS] [--max-body BYTES] [--max-header-size BYTES]\n"
    "       [--max-connections N] [--shutdown-timeout MS] [--send-timeout MS]\n"
    "       [--lingering-time MS] [--lingering-timeout MS] [--lingering-max BYTES]\n"
    "       [--max-streams N] [--no-http2 | --http2-only] [--h2c-upgrade]\n"
    "       [--test-routes] [--proxy-protocol NETWORKS]\n"
    "       [--upstream URL]... [--upstream-timeout MS] [--upstream-pool N] [--upstream-keepalive MS]\n"
    "       [--upstream-resolver IP[:PORT],...] [--upstream-resolve-interval MS]\n"
    "       [--upstream-ca FILE] [--upstream-server-name NAME] [--upstream-insecure]\n"
    "       [--upstream-h2] [--upstream-proxy-protocol 1|2] [--upstream-auth URL [--upstream-auth-target "
    "PATH]\n"
    "       [--upstream-stream] [--upstream-splice-min BYTES]\n"
    "        [--upstream-auth-method M] [--upstream-auth-copy NAME]...]\n"
    "       [--upstream-total-timeout MS] [--upstream-health /PATH:MS]\n"
    "       [--upstream-balance rr|least-conn|hash-address|hash-header:NAME]\n"
    "       [--trust-forwarded NETWORKS] [--health PATH] [--stop-grace MS]\n"
    "       [--shared-port] [--listen-fd N] (systemd's LISTEN_FDS, when\n"
    "       set, are listened on instead of PORT and --listen-fd)\n"
    "       [--access-log PATH] [--log-format common|combined|json]\n"
    "       [--log-flush-ms MS] [--metrics] [--request-durations]\n"
    "       [--user-metrics]\n"
    "       [--compress] [--ws-deflate] [--server-name NAME] [--own-answers]\n"
    "       [--worker-hooks [--worker-fail-start N]] [--blocking-threads N]\n"
    "       [--blocking-queue N] [--blocking-own-busy]\n"
    "       [--static DIR [--static-no-twins] [--static-cache-ms MS]\n"
    "        [--static-cache-control VALUE] [--static-type EXT=TYPE]...\n"
    "        [--static-no-compress] [--static-compress-max BYTES]\n"
    "        [--static-compress-cache BYTES]]\n";

typedef struct Option {
    const char *flag;
    unsigned long max;
    unsigned long value;
    bool set;
} Option;

bool benchParseFlags(int argc, char **argv, int first, xHttpServerConf *conf, const char **host,
                     BenchExtraFlag extra, void *extra_arg) {
    enum {
        WORKERS,
        IDLE,
        HEADER,
        BODY,
        MAX_BODY,
        MAX_HEADER,
        MAX_CONNS,
        SHUTDOWN,
        SEND,
        STREAMS,
        GRACE,
        FD,
        LINGER_TIME,
        LINGER_TIMEOUT,
        LINGER_MAX,
        NOPTS
    };
    Option opts[NOPTS] = {
        {"--workers", 1024, 0, false},
        {"--idle-timeout", 86400000, 0, false},
        {"--header-timeout", 86400000, 0, false},
        {"--body-timeout", 86400000, 0, false},
        {"--max-body", 1ul << 34, 0, false},
        {"--max-header-size", 1u << 20, 0, false},
        {"--max-connections", 1u << 24, 0, false},
        {"--shutdown-timeout", 86400000, 0, false},
        {"--send-timeout", 86400000, 0, false},
        {"--max-streams", 1u << 20, 0, false},
        {"--stop-grace", 86400000, 0, false},
        {"--listen-fd", 1u << 20, 0, false},
        {"--lingering-time", 86400000, 0, false},
        {"--lingering-timeout", 86400000, 0, false},
        {"--lingering-max", 1ul << 34, 0, false},
    };
    xHttpServerConfInit(conf);
    conf->max_body_size = ECHO_MAX_BODY;
    xHttpStaticConfInit(&static_conf);
    *host = "0.0.0.0";
    unsigned long bytes;
    for (int i = first; i < argc; i++) {
        if (strcmp(argv[i], "--host") == 0 && i + 1 < argc) {
            *host = argv[++i];
            continue;
        }
        if (strcmp(argv[i], "--static") == 0 && i + 1 < argc) {
            static_conf.root = argv[++i];
            continue;
        }
        if (strcmp(argv[i], "--static-cache-control") == 0 && i + 1 < argc) {
            static_conf.cache_control = argv[++i];
            continue;
        }
        if (strcmp(argv[i], "--static-cache-ms") == 0 && i + 1 < argc) {
            unsigned long ms;
            if (!benchParseSize(xStrFromC(argv[++i]), 86400000, &ms)) return false;
            static_conf.cache_ms = (uint32_t)ms;
            continue;
        }
        if (strcmp(argv[i], "--static-type") == 0 && i + 1 < argc) {
            if (!add_static_type(argv[++i])) return false;
            continue;
        }
        if (strcmp(argv[i], "--static-no-twins") == 0) {
            static_conf.precompressed = false;
            continue;
        }
        if (strcmp(argv[i], "--static-no-compress") == 0) {
            static_conf.compress_on_the_fly = false;
            continue;
        }
        if (strcmp(argv[i], "--static-compress-max") == 0 && i + 1 < argc) {
            if (!benchParseSize(xStrFromC(argv[++i]), 1ul << 34, &bytes)) return false;
            static_conf.compress_file_max = bytes;
            continue;
        }
        if (strcmp(argv[i], "--static-compress-cache") == 0 && i + 1 < argc) {
            if (!benchParseSize(xStrFromC(argv[++i]), 1ul << 34, &bytes)) return false;
            static_conf.compress_bytes_max = bytes;
            continue;
        }
        if (strcmp(argv[i], "--server-name") == 0 && i + 1 < argc) {
            server_name = argv[++i];
            continue;
        }
        if (strcmp(argv[i], "--own-answers") == 0) {
            own_answers = true;
            continue;
        }
        if (strcmp(argv[i], "--upstream") == 0 && i + 1 < argc && num_upstreams < BENCH_MAX_UPSTREAMS) {
            upstream_urls[num_upstreams++] = argv[++i];
            continue;
        }
        if (strcmp(argv[i], "--upstream-timeout") == 0 && i + 1 < argc) {
            upstream_timeout_ms = (uint32_t)strtoul(argv[++i], NULL, 10);
            continue;
        }
        if (strcmp(argv[i], "--upstream-keepalive") == 0 && i + 1 < argc) {
            upstream_keepalive_ms = (uint32_t)strtoul(argv[++i], NULL, 10);
            continue;
        }
        if (strcmp(argv[i], "--upstream-pool") == 0 && i + 1 < argc) {
            upstream_pool = (unsigned)strtoul(argv[++i], NULL, 10);
            continue;
        }
        if (strcmp(argv[i], "--upstream-total-timeout") == 0 && i + 1 < argc) {
            upstream_total_timeout_ms = (uint32_t)strtoul(argv[++i], NULL, 10);
            continue;
        }
        if (strcmp(argv[i], "--upstream-balance") == 0 && i + 1 < argc) {
            upstream_balance = argv[++i];
            continue;
        }
        if (strcmp(argv[i], "--upstream-health") == 0 && i + 1 < argc) {
            upstream_health = argv[++i];
            continue;
        }
        if (strcmp(argv[i], "--upstream-resolver") == 0 && i + 1 < argc) {
            upstream_resolvers = argv[++i];
            continue;
        }
        if (strcmp(argv[i], "--upstream-resolve-interval") == 0 && i + 1 < argc) {
            upstream_resolve_interval_ms = (uint32_t)strtoul(argv[++i], NULL, 10);
            continue;
        }
        if (strcmp(argv[i], "--upstream-ca") == 0 && i + 1 < argc) {
            upstream_ca_file = argv[++i];
            continue;
        }
        if (strcmp(argv[i], "--upstream-server-name") == 0 && i + 1 < argc) {
            upstream_server_name = argv[++i];
            continue;
        }
        if (strcmp(argv[i], "--upstream-auth") == 0 && i + 1 < argc) {
            upstream_auth_url = argv[++i];
            continue;
        }
        if (strcmp(argv[i], "--upstream-auth-target") == 0 && i + 1 < argc) {
            upstream_auth_target = argv[++i];
            continue;
        }
        if (strcmp(argv[i], "--upstream-auth-method") == 0 && i + 1 < argc) {
            upstream_auth_method = argv[++i];
            continue;
        }
        if (strcmp(argv[i], "--upstream-auth-copy") == 0 && i + 1 < argc && upstream_num_auth_copy < 4) {
            upstream_auth_copy[upstream_num_auth_copy++] = argv[++i];
            continue;
        }
        if (strcmp(argv[i], "--upstream-proxy-protocol") == 0 && i + 1 < argc) {
            upstream_proxy_protocol = (unsigned)strtoul(argv[++i], NULL, 10);
            continue;
        }
        if (strcmp(argv[i], "--upstream-h2") == 0) {
            upstream_h2 = true;
            continue;
        }
        if (strcmp(argv[i], "--upstream-stream") == 0) {
            upstream_stream = true;
            continue;
        }
        if (strcmp(argv[i], "--upstream-splice-min") == 0 && i + 1 < argc) {
            upstream_splice_min = argv[++i];
            continue;
        }
        if (strcmp(argv[i], "--upstream-insecure") == 0) {
            upstream_insecure = true;
            continue;
        }
        if (strcmp(argv[i], "--test-routes") == 0) {
            test_routes = true;
            continue;
        }
        if (strcmp(argv[i], "--metrics") == 0) {
            metrics = true;
            continue;
        }
        if (strcmp(argv[i], "--request-durations") == 0) {
            request_durations = true;
            continue;
        }
        if (strcmp(argv[i], "--user-metrics") == 0) {
            user_metrics = true;
            continue;
        }
        if (strcmp(argv[i], "--access-log") == 0 && i + 1 < argc) {
            access_log = argv[++i];
            continue;
        }
        if (strcmp(argv[i], "--log-format") == 0 && i + 1 < argc) {
            static const char *const formats[] = {"common", "combined", "json"};
            const char *name = argv[++i];
            int f = 0;
            while (f < 3 && strcmp(name, formats[f]) != 0) f++;
            if (f == 3) return false;
            log_format = (xHttpLogFormat)f;
            continue;
        }
        if (strcmp(argv[i], "--log-flush-ms") == 0 && i + 1 < argc) {
            if (!benchParseSize(xStrFromC(argv[++i]), 86400000, &log_flush_ms)) return false;
            continue;
        }
        if (strcmp(argv[i], "--compress") == 0) {
            compress = true;
            continue;
        }
        if (strcmp(argv[i], "--ws-deflate") == 0) {
            ws_deflate = true;
            continue;
        }
        if (strcmp(argv[i], "--proxy-protocol") == 0 && i + 1 < argc) {
            proxy_networks = argv[++i];
            continue;
        }
        if (strcmp(argv[i], "--trust-forwarded") == 0 && i + 1 < argc) {
            forwarded_networks = argv[++i];
            continue;
        }
        if (strcmp(argv[i], "--health") == 0 && i + 1 < argc) {
            health_path = argv[++i];
            continue;
        }
        if (strcmp(argv[i], "--shared-port") == 0) {
            conf->shared_port = true;
            continue;
        }
        if (strcmp(argv[i], "--h2c-upgrade") == 0) {
            conf->h2c_upgrade = true;
            continue;
        }
        if (strcmp(argv[i], "--no-http2") == 0 || strcmp(argv[i], "--http2-only") == 0) {
            conf->protocols = argv[i][2] == 'n' ? XHTTP_PROTO_HTTP1 : XHTTP_PROTO_HTTP2;
            continue;
        }
        int taken = benchWorkersFlag(argc, argv, i);
        if (taken < 0) return false;
        if (taken > 0) {
            i += taken - 1;
            continue;
        }
        int k = 0;
        while (k < NOPTS && strcmp(argv[i], opts[k].flag) != 0) k++;
        if (k == NOPTS) {
            taken = extra ? extra(argc, argv, i, extra_arg) : 0;
            if (taken <= 0) return false;
            i += taken - 1;
            continue;
        }
        if (i + 1 >= argc || !benchParseSize(xStrFromC(argv[i + 1]), opts[k].max, &opts[k].value))
            return false;
        opts[k].set = true;
        i++;
    }
    if (opts[WORKERS].set) conf->workers = (int)opts[WORKERS].value;
    if (opts[IDLE].set) conf->idle_timeout_ms = (uint32_t)opts[IDLE].value;
    if (opts[HEADER].set) conf->header_timeout_ms = (uint32_t)opts[HEADER].value;
    if (opts[BODY].set) conf->body_timeout_ms = (uint32_t)opts[BODY].value;
    if (opts[MAX_BODY].set) conf->max_body_size = opts[MAX_BODY].value;
    if (opts[MAX_HEADER].set) conf->max_header_size = opts[MAX_HEADER].value;
    if (opts[MAX_CONNS].set) conf->max_connections = (uint32_t)opts[MAX_CONNS].value;
    if (opts[SHUTDOWN].set) conf->shutdown_timeout_ms = (uint32_t)opts[SHUTDOWN].value;
    if (opts[SEND].set) conf->send_timeout_ms = (uint32_t)opts[SEND].value;
    if (opts[STREAMS].set) conf->http2_max_streams = (uint32_t)opts[STREAMS].value;
    if (opts[GRACE].set) conf->stop_grace_ms = (uint32_t)opts[GRACE].value;
    if (opts[FD].set) listen_fd = (long)opts[FD].value;
    if (opts[LINGER_TIME].set) conf->lingering_time_ms = (uint32_t)opts[LINGER_TIME].value;
    if (opts[LINGER_TIMEOUT].set) conf->lingering_timeout_ms = (uint32_t)opts[LINGER_TIMEOUT].value;
    if (opts[LINGER_MAX].set) conf->lingering_max_bytes = opts[LINGER_MAX].value;
    return true;
}

/* The first listener: systemd's sockets, --listen-fd's, or host:port. */
static xErrno listen_first(xHttpServer *server, const char *host, uint16_t port, const xTlsConf *tls) {
    int taken = 0;
    xErrno err = tls ? xHttpServerListenTlsSystemd(server, NULL, tls, &taken)
                     : xHttpServerListenSystemd(server, NULL, &taken);
    if (err != XOK || taken > 0) return err;
    if (listen_fd >= 0)
        return tls ? xHttpServerListenTlsFd(server, (int)listen_fd, tls)
                   : xHttpServerListenFd(server, (int)listen_fd);
    return tls ? xHttpServerListenTls(server, host, port, tls) : xHttpServerListen(server, host, port);
}

bool benchListen(xHttpServer *server, const char *host, uint16_t port, const xTlsConf *tls) {
    if (health_path && xHttpServerHealthRoute(server, health_path) != XOK) {
        fprintf(stderr, "--health %s: not a path\n", health_path);
        return false;
    }
    /* The caller prints the server's last error, as for its other listeners. */
    if (listen_first(server, host, port, tls) != XOK) return false;
    if (forwarded_networks && xHttpServerTrustForwarded(server, forwarded_networks) != XOK) {
        fprintf(stderr, "--trust-forwarded: %s\n", xHttpServerLastError(server));
        return false;
    }
    return true;
}

bool benchProxyProtocol(xHttpServer *server) {
    if (!proxy_networks) return true;
    for (int i = 0; xHttpServerListenerPort(server, i) != 0; i++) {
        if (xHttpServerProxyProtocol(server, i, proxy_networks) != XOK) {
            fprintf(stderr, "--proxy-protocol: %s\n", xHttpServerLastError(server));
            return false;
        }
    }
    return true;
}

void benchPrintListening(const char *host, xHttpServer *server) {
    printf("listening on %s:%u (%d workers)\n", host, xHttpServerPort(server),
           xHttpServerWorkerCount(server));
    fflush(stdout);
}
