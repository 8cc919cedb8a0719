/* fuzz_h2_upstream.c — the upstream client's HTTP/2 frame reader
 * (src/xhttp/client/h2.c) against a hostile upstream: an xHttpClient on a
 * loop of its own sends requests to an HTTP/2 upstream on a loopback port
 * the harness listens on, and the harness answers with the input's bytes.
 *
 * Byte 0: bits 0-1, requests started at once less one (1-4; stream ids 1,
 * 3, 5, 7); bit 2, the second is a POST with a 20,000-byte body (past the
 * default window: it waits for WINDOW_UPDATEs) instead of a GET; bit 3, the
 * first is a HEAD; bit 4, the first is paused at its head and resumed after
 * the input; bit 5, the input follows an empty SETTINGS frame; bits 6-7,
 * the pieces the rest is written in (1, 7, 100 bytes, or at once), each
 * followed by a turn of the loop. Then the upstream's socket is closed;
 * connections after the first (retries) are accepted and closed at once.
 * Checked:
 *   - each request hears on_head at most once and before any body, body
 *     bytes only after a head that said has_body, a status of 200-999, a
 *     body of the Content-Length given when it ends, and exactly one of
 *     on_end (after its head) or on_error, never anything after it;
 *   - the edge does not stall: once the upstream is gone every request has
 *     ended within FUZZ_PEER_SETTLE_TURNS turns and the pool holds no
 *     connection, and a client that sent a GOAWAY with an error closed its
 *     end by then (it does not wait for the upstream);
 *   - what the client wrote is its preface, then whole frames on odd or
 *     zero stream ids.
 * ASan and UBSan catch the rest (reads past a frame, use after free). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xhttp/client.h>

#include "fuzz_check.h"
#include "fuzz_peer.h"

#define MAX_REQUESTS 4
#define POST_BODY 20000
#define PREFACE "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

typedef enum CallState { CALL_WAITING, CALL_HEAD, CALL_ENDED, CALL_FAILED } CallState;

typedef struct Call {
    CallState state;
    bool has_body, pause_at_head;
    int64_t length; /* the head's Content-Length, or -1 */
    uint64_t body_len;
    xHttpClientRequest *req;
} Call;

static xEventLoop *loop;
static xHttpClient *client;
static xHttpUpstream *upstream;
static int listener = -1;
static Call calls[MAX_REQUESTS];

/* ---- The requests' callbacks ---- */

static void on_head(xHttpClientRequest *req, const xHttpClientResponse *res, void *arg) {
    Call *c = arg;
    FUZZ_ASSERT(c->state == CALL_WAITING, "a head in state %d", c->state);
    FUZZ_ASSERT(res->status >= 200 && res->status <= 999, "status %d", res->status);
    FUZZ_ASSERT(res->content_length >= -1, "content length %lld", (long long)res->content_length);
    for (size_t i = 0; i < res->num_fields; i++)
        FUZZ_ASSERT(res->fields[i].name.len == 0 || res->fields[i].name.data[0] != ':',
                    "a pseudo-field passed on");
    c->state = CALL_HEAD;
    c->has_body = res->has_body;
    c->length = res->has_body ? res->content_length : -1;
    if (c->pause_at_head) xHttpClientRequestPause(req);
}

static void on_body(xHttpClientRequest *req, const char *data, size_t len, void *arg) {
    (void)req, (void)data;
    Call *c = arg;
    FUZZ_ASSERT(c->state == CALL_HEAD, "body bytes in state %d", c->state);
    FUZZ_ASSERT(c->has_body, "%zu body bytes after a head that said none", len);
    c->body_len += len;
    FUZZ_ASSERT(c->length < 0 || c->body_len <= (uint64_t)c->length, "%llu body bytes of %lld",
                (unsigned long long)c->body_len, (long long)c->length);
}

static void on_end(xHttpClientRequest *req, const xHttpClientField *trailers, size_t n, void *arg) {
    (void)req, (void)trailers;
    Call *c = arg;
    FUZZ_ASSERT(c->state == CALL_HEAD, "an end in state %d", c->state);
    FUZZ_ASSERT(n == 0 || trailers != NULL, "%zu trailers, none given", n);
    FUZZ_ASSERT(c->length < 0 || c->body_len == (uint64_t)c->length, "ended after %llu body bytes of %lld",
                (unsigned long long)c->body_len, (long long)c->length);
    c->state = CALL_ENDED;
    c->req = NULL;
}

static void on_error(xHttpClientRequest *req, xHttpClientError error, bool started, void *arg) {
    (void)req;
    Call *c = arg;
    FUZZ_ASSERT(c->state == CALL_WAITING || c->state == CALL_HEAD, "an error in state %d", c->state);
    FUZZ_ASSERT(started == (c->state == CALL_HEAD), "started %d in state %d", started, c->state);
    FUZZ_ASSERT(error > 0, "error %d", (int)error);
    c->state = CALL_FAILED;
    c->req = NULL;
}

static const xHttpClientHandlers handlers = {
    .on_head = on_head, .on_body = on_body, .on_end = on_end, .on_error = on_error};

/* ---- Set-up, once ---- */

static void set_up(void) {
    loop = xEventLoopCreate();
    client = loop ? xHttpClientCreate(loop) : NULL;
    FUZZ_ASSERT(client != NULL, "no loop or client");
    uint16_t port;
    listener = fuzzPeerListen(&port);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%u", port);
    xHttpUpstreamConf conf;
    xHttpUpstreamConfInit(&conf);
    conf.protocol = XHTTP_UPSTREAM_HTTP2;
    /* No timer may fire within one input: ending is the upstream's close. */
    conf.connect_timeout_ms = conf.send_timeout_ms = conf.first_byte_timeout_ms = 600000;
    conf.idle_timeout_ms = conf.keepalive_ms = 600000;
    conf.max_fields = 16;
    FUZZ_ASSERT(xHttpUpstreamCreate(url, &conf, &upstream) == XOK, "no upstream");
}

/* ---- The upstream's end ---- */

/* The client's output: its preface, then whole frames on streams it may
 * use; true when it holds a GOAWAY with an error code. */
static bool check_client_output(const FuzzPeer *p) {
    size_t pre = sizeof PREFACE - 1;
    FUZZ_ASSERT(p->len >= pre && memcmp(p->out, PREFACE, pre) == 0, "no preface");
    bool failed = false;
    size_t at = pre;
    while (p->len - at >= 9) {
        const uint8_t *f = p->out + at;
        size_t len = (size_t)f[0] << 16 | (size_t)f[1] << 8 | f[2];
        uint32_t id =
            ((uint32_t)f[5] << 24 | (uint32_t)f[6] << 16 | (uint32_t)f[7] << 8 | f[8]) & 0x7fffffffu;
        FUZZ_ASSERT(len <= 16384, "a %zu-byte frame", len);
        FUZZ_ASSERT(id == 0 || (id & 1), "type %u on stream %u", f[3], id);
        if (p->len - at - 9 < len) break;
        if (f[3] == 7 && len >= 8) failed = failed || f[13] || f[14] || f[15] || f[16];
        at += 9 + len;
    }
    FUZZ_ASSERT(at == p->len || !p->eof || failed, "the client's output ends in a partial frame");
    return failed;
}

static bool all_over(unsigned n) {
    for (unsigned i = 0; i < n; i++)
        if (calls[i].state == CALL_WAITING || calls[i].state == CALL_HEAD) return false;
    return true;
}

/* ---- One input ---- */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static bool ready;
    if (!ready) {
        set_up();
        ready = true;
    }
    if (size < 1) return 0;
    unsigned mode = data[0];
    unsigned n = (mode & 3) + 1;
    bool post = mode & 4, head = mode & 8, pause = mode & 16, settings_first = mode & 32;
    static const size_t pieces[] = {1, 7, 100, SIZE_MAX};
    size_t piece = pieces[mode >> 6];
    /* The upstream's bytes in a block of exactly their size. */
    size_t pre = settings_first ? 9 : 0, len = pre + size - 1;
    uint8_t *in = malloc(len ? len : 1);
    FUZZ_ASSERT(in != NULL, "out of memory");
    if (pre) memcpy(in, "\0\0\0\4\0\0\0\0\0", pre);
    memcpy(in + pre, data + 1, size - 1);

    static char body[POST_BODY];
    memset(calls, 0, sizeof calls);
    for (unsigned i = 0; i < n; i++) {
        Call *c = &calls[i];
        c->pause_at_head = pause && i == 0;
        xHttpClientRequestOpts o;
        xHttpClientRequestOptsInit(&o);
        bool is_post = post && i == 1;
        o.method = is_post ? xStrFromC("POST") : head && i == 0 ? xStrFromC("HEAD") : xStrFromC("GET");
        o.target = xStrFromC("/fuzz");
        o.body_length = is_post ? POST_BODY : 0;
        o.handlers = &handlers;
        o.arg = c;
        FUZZ_ASSERT(xHttpClientStart(client, upstream, &o, &c->req) == XOK, "request %u not started", i);
        if (is_post)
            FUZZ_ASSERT(xHttpClientRequestWrite(c->req, body, sizeof body) == XOK, "body not written");
    }

    FuzzPeer p = {.loop = loop, .listener = listener, .fd = -1};
    fuzzPeerAccept(&p, "the client");
    fuzzPeerWritePieces(&p, in, len, piece);
    for (int t = 0; t < 8; t++) fuzzPeerTurn(&p);
    if (pause && calls[0].req && calls[0].state == CALL_HEAD) xHttpClientRequestResume(calls[0].req);
    for (int t = 0; t < 8; t++) fuzzPeerTurn(&p);
    if (check_client_output(&p)) {
        for (int t = 0; t < FUZZ_PEER_SETTLE_TURNS && !p.eof; t++) fuzzPeerTurn(&p);
        FUZZ_ASSERT(p.eof, "a GOAWAY with an error, and the connection kept open");
    }

    /* The upstream goes: everything ends, and nothing stays open. */
    fuzzPeerClose(&p);
    xHttpClientStats stats = {0};
    for (int t = 0; t < FUZZ_PEER_SETTLE_TURNS; t++) {
        xHttpClientGetStats(client, upstream, &stats);
        if (all_over(n) && stats.open == 0) break;
        fuzzPeerTurn(&p);
    }
    for (unsigned i = 0; i < n; i++)
        FUZZ_ASSERT(calls[i].state == CALL_ENDED || calls[i].state == CALL_FAILED,
                    "request %u never ended (%d)", i, calls[i].state);
    FUZZ_ASSERT(stats.open == 0 && stats.queued == 0,
                "%u connections open, %u queued after the upstream left", stats.open, stats.queued);
    fuzzPeerFree(&p);
    free(in);
    return 0;
}
