/* fuzz_conn.c — the routes and the client the whole-connection harnesses
 * share (fuzz_conn.h). */
#define _GNU_SOURCE /* memmem */
#include "fuzz_conn.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_check.h"

/* ---- Routes ---- */

static void on_ws_message(xWebSocket *ws, const char *data, size_t len, bool binary, void *arg) {
    if (binary)
        xWebSocketSendBinary(ws, data, len);
    else
        xWebSocketSendText(ws, data, len);
}

void fuzzConnConfInit(xHttpServerConf *conf) {
    xHttpServerConfInit(conf);
    conf->max_header_size = 1024;
    conf->max_headers = 16;
    conf->max_body_size = 4096;
    conf->header_timeout_ms = conf->body_timeout_ms = conf->idle_timeout_ms = 600000;
    conf->send_timeout_ms = 600000;
}

void fuzzConnRoutes(xHttpRouteTarget *targets) {
    xWebSocketConf conf;
    xWebSocketConfInit(&conf);
    conf.on_message = on_ws_message;
    conf.deflate = true;
    conf.idle_timeout_ms = 0; /* no timer may fire within one input */
    conf.max_pending = 4096;  /* small, so backpressure holds the client */
    xErrno err;
    xWsRoute *route = xWsRouteCreate(&conf, NULL, &err);
    FUZZ_ASSERT(route, "WebSocket route: %d", (int)err);
    targets[FUZZ_CONN_ROUTES - 2].arg = targets[FUZZ_CONN_ROUTES - 1].arg = route;
}

void fuzzOnHello(xHttpRequest *req, xHttpResponse *res, void *arg) {
    xHttpResponseAddHeader(res, "Content-Type", "text/plain");
    xHttpResponseSend(res, FUZZ_CONN_HELLO, sizeof FUZZ_CONN_HELLO - 1);
}

void fuzzOnEcho(xHttpRequest *req, xHttpResponse *res, void *arg) {
    xStr body = xHttpRequestBody(req);
    xHttpResponseSend(res, body.data, body.len);
}

void fuzzOnStream(xHttpRequest *req, xHttpResponse *res, void *arg) {
    xHttpResponseAddHeader(res, "Trailer", "X-Sum");
    xHttpResponseWrite(res, "first ", 6);
    xHttpResponseWrite(res, "", 0);
    xHttpResponseWrite(res, "second\n", 7);
    xHttpResponseAddTrailer(res, "X-Sum", "13");
    xHttpResponseEnd(res);
}

/* Answers from the next loop turn, whether or not the client is still there. */
static void answer_later(xEventLoop *loop, void *res) { xHttpResponseSend(res, "later\n", 6); }

void fuzzOnLater(xHttpRequest *req, xHttpResponse *res, void *arg) {
    if (xEventLoopPost(xHttpRequestLoop(req), answer_later, res) != XOK) answer_later(NULL, res);
}

/* A streamed body is counted; the count is the answer. "?refuse" answers
 * from the head alone, leaving the body unread. */
typedef struct Upload {
    size_t bytes;
} Upload;

static void upload_gone(xHttpResponse *res, void *up) { free(up); }

static void upload_read(xHttpRequest *req, xHttpResponse *res, const char *data, size_t len, bool end,
                        void *arg) {
    Upload *up = arg;
    up->bytes += len;
    if (!end) return;
    char text[32];
    int n = snprintf(text, sizeof text, "%zu bytes\n", up->bytes);
    free(up);
    xHttpResponseOnAbort(res, NULL, NULL);
    xHttpResponseSend(res, text, (size_t)n);
}

void fuzzOnUpload(xHttpRequest *req, xHttpResponse *res, void *arg) {
    xStr query = xHttpRequestQuery(req);
    if (xStrEqualsC(query, "refuse")) {
        xHttpResponseSetStatus(res, 403);
        xHttpResponseSend(res, "no\n", 3);
        return;
    }
    Upload *up = calloc(1, sizeof *up);
    FUZZ_ASSERT(up != NULL, "out of memory");
    xHttpResponseOnAbort(res, upload_gone, up);
    if (xHttpRequestReadBody(req, upload_read, up) != XOK) {
        free(up);
        xHttpResponseOnAbort(res, NULL, NULL);
        xHttpResponseSend(res, "unread\n", 7);
    }
}

/* ---- The client ---- */

FuzzClient fuzzClientConnect(xHttpContext *ctx, const xUpgradePlan *plan, bool small_sndbuf,
                             void (*turn)(void)) {
    int sv[2];
    FUZZ_ASSERT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0, "socketpair: %s",
                strerror(errno));
    if (small_sndbuf) {
        int one = 1;
        setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &one, sizeof one);
    }
    FUZZ_ASSERT(xUpgradeAccept(ctx, sv[0], NULL, plan), "accept failed");
    return (FuzzClient){.fd = sv[1], .turn = turn};
}

void fuzzClientRead(FuzzClient *c) {
    while (!c->eof) {
        if (c->out_cap - c->out_len < 4096) {
            c->out_cap = c->out_cap ? c->out_cap * 2 : 16384;
            c->out = realloc(c->out, c->out_cap);
            FUZZ_ASSERT(c->out != NULL, "out of memory");
        }
        ssize_t n = recv(c->fd, c->out + c->out_len, c->out_cap - c->out_len, MSG_DONTWAIT);
        if (n > 0) {
            c->out_len += (size_t)n;
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            c->eof = true; /* end of stream, or reset */
        } else if (errno == EAGAIN) {
            return;
        }
    }
}

/* Sends piece, turning the loop while the socket is full; false once the
 * server is gone. */
static bool send_piece(FuzzClient *c, const char *piece, size_t len, bool read_now) {
    for (int turns = 0; len > 0; turns++) {
        ssize_t n = send(c->fd, piece, len, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0 && errno != EAGAIN && errno != EINTR) return false;
        if (n > 0) {
            piece += n;
            len -= (size_t)n;
            continue;
        }
        FUZZ_ASSERT(turns < FUZZ_CONN_SETTLE_TURNS, "the server takes no input");
        c->turn();
        fuzzClientRead(c);
    }
    c->turn();
    if (read_now) fuzzClientRead(c);
    c->turn();
    if (read_now) fuzzClientRead(c);
    return true;
}

void fuzzClientSendAll(FuzzClient *c, const char *in, size_t n, unsigned pace, bool heads_apart,
                       bool read_now) {
    unsigned shift = pace & 15;
    uint32_t rng = pace * 2654435761u + 1;
    size_t pos = 0;
    for (int pieces = 1; pos < n; pieces++) {
        size_t take = n - pos;
        if (heads_apart && shift == 15 && pieces < FUZZ_CONN_MAX_PIECES) {
            const char *end = memmem(in + pos, n - pos, "\r\n\r\n", 4);
            if (end) take = (size_t)(end - in - pos) + 4;
        } else if (shift && pieces < FUZZ_CONN_MAX_PIECES) {
            rng ^= rng << 13, rng ^= rng >> 17, rng ^= rng << 5;
            size_t most = (size_t)1 << (shift - 1);
            if (take > 1 + rng % most) take = 1 + rng % most;
        }
        if (!send_piece(c, in + pos, take, read_now)) break;
        pos += take;
    }
}

void fuzzClientFinish(FuzzClient *c, xHttpContext *ctx, size_t pooled) {
    shutdown(c->fd, SHUT_WR);
    for (int i = 0; i < FUZZ_CONN_SETTLE_TURNS && !c->eof; i++) {
        c->turn();
        fuzzClientRead(c);
    }
    FUZZ_ASSERT(c->eof, "the server keeps the connection open after the client's FIN");
    close(c->fd);
    for (int i = 0; i < FUZZ_CONN_SETTLE_TURNS && ctx->net.conn_count; i++) c->turn();
    FUZZ_ASSERT(ctx->net.conn_count == 0 && ctx->net.conns == NULL, "%zu connections left",
                ctx->net.conn_count);
    FUZZ_ASSERT(ctx->net.buffers.free_count <= ctx->net.buffers.max_free, "%zu pooled buffers",
                ctx->net.buffers.free_count);
    FUZZ_ASSERT(ctx->free_exchange_count >= pooled, "exchanges lost: %zu pooled, %zu before",
                ctx->free_exchange_count, pooled);
}

void fuzzDump(const char *what, const char *b, size_t len, size_t limit) {
    fprintf(stderr, "%s (%zu bytes): \"", what, len);
    for (size_t i = 0; i < len && i < limit; i++) {
        unsigned char c = (unsigned char)b[i];
        if (c >= 32 && c < 127 && c != '"' && c != '\\')
            fputc(c, stderr);
        else
            fprintf(stderr, "\\x%02x", c);
    }
    fprintf(stderr, "\"%s\n", len > limit ? "..." : "");
}
