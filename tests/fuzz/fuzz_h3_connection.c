/* fuzz_h3_connection.c — a whole HTTP/3 connection (src/xhttp/http3/connection.c,
 * the xH3App a worker's QUIC endpoint serves) fed a client's stream bytes,
 * below QUIC: no packets, no TLS, no ngtcp2.
 *
 * The seam is quic.h itself. This file defines every function quic.h
 * declares, as a model of the QUIC layer that delivers the input's stream
 * bytes, records what the application writes, acknowledges it at the end of
 * each event and closes streams and the connection as ngtcp2 would; linked
 * before the library, it stands in for src/xnet/quic/quic.c, which is then
 * never pulled from the archive. connection.c is the library's own object.
 * The context is a worker's (xTestWorkerInit) with small limits and the
 * shared routes that answer at once, echo the body, stream a response with a
 * trailer, answer from a later loop turn and read a streamed body.
 *
 * Input: byte 0 is the set-up:
 *   - bit 0: the client's control stream (type and an empty SETTINGS) and
 *     QPACK's two streams (their types) are opened first, so the rest can be
 *     frames and instructions alone;
 *   - bit 1: the loop turns after every operation (else only at the end).
 * Then operations, each an opcode byte then, for data, a length byte and
 * that many bytes (fewer if the input ends):
 *   - bits 0-2: the stream: 0-5 request streams 0, 4, ... 20; 6, 7 client
 *     unidirectional streams 2 and 6 (with bit 0 of byte 0: the control
 *     stream and QPACK's encoder stream; 10 is the decoder stream);
 *   - bits 3-4: 0 data, 1 data with FIN, 2 RESET_STREAM from the peer (the
 *     length byte is its code's low byte, nothing follows), 3 the loop turns
 *     (1 + bits 5-7 times; no length byte).
 * Checked after every operation (every read):
 *   - the application touches no stream after its on_stream_close and no
 *     connection after its last release (each a use-after-free in quic.c);
 *   - credit given back on a stream never exceeds the bytes delivered on it;
 *   - nothing is written after a stream's FIN;
 *   - a connection error is an HTTP/3 or QPACK code (0x100-0x110, 0x200-0x202).
 * Checked after every input, before the connection is closed:
 *   - our control stream opens with its type and SETTINGS, QPACK's with theirs;
 *     our encoder stream is empty unless the client's SETTINGS allowed a table,
 *     and then sets its capacity first and decodes whole;
 *   - each request stream's output is whole frames: a HEADERS whose QPACK
 *     section decodes with :status first, in 100-599 (a head referring to the
 *     dynamic table only where one was set: its fields are test_qpack_encoder's),
 *     then DATA, then at most one HEADERS of trailers without pseudo-fields;
 *   - a request stream whose FIN came and which nobody reset is finished:
 *     our FIN sent and acknowledged, or reset by us (no request stalls).
 * After closing it: every stream and the connection told closed, the
 * connection's memory released (retains balanced), every write by reference
 * released once, and no pooled exchange lost. Leaks are LeakSanitizer's.
 * FUZZ_DUMP=1 prints what each stream received and sent. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"
#include "fuzz_conn.h"
#include "worker.h"
#include "xhttp/core/context.h"
#include "xhttp/http3/connection.h"
#include "xhttp/http3/frame.h"
#include "xhttp/http3/qpack.h"
#include "xnet/quic/quic.h"

#define MAX_STREAMS 16
#define SETTLE_TURNS 64
#define MAX_REFS 64

/* ---- The model of the QUIC layer ---- */

typedef struct Release {
    void (*fn)(void *);
    void *arg;
} Release;

struct xQuicEndpoint {
    void *arg;
};

struct xQuicStream {
    xQuicConn *qc;
    int64_t id;
    void *app;
    uint64_t delivered, credited;
    bool peer_fin, peer_reset, read_shut, write_shut, fin_queued;
    bool closed; /* on_stream_close told: the application must not touch it again */
    size_t unacked;
    Release releases[MAX_REFS];
    size_t nreleases;
    char *out; /* everything written */
    size_t out_len;
    char *in; /* FUZZ_DUMP: what was delivered */
    size_t in_len;
};

struct xQuicConn {
    xQuicEndpoint *ep;
    void *app;
    unsigned refs;
    bool close_owed, told_closed;
    uint64_t close_code;
    xConn view;
    xQuicStream streams[MAX_STREAMS];
    size_t nstreams;
    int64_t next_uni; /* ours: 3, 7, 11, ... */
};

static xQuicEndpoint endpoint;
static unsigned conns_alive;
static size_t releases_owed;

static xQuicStream *live(const xQuicStream *s) {
    FUZZ_ASSERT(!s->closed, "stream %lld touched after its on_stream_close", (long long)s->id);
    FUZZ_ASSERT(s->qc->refs > 0, "stream of a released connection touched");
    return (xQuicStream *)s;
}

static xQuicConn *held(const xQuicConn *qc) {
    FUZZ_ASSERT(qc->refs > 0, "connection touched after its last release");
    return (xQuicConn *)qc;
}

xQuicEndpoint *xQuicEndpointCreate(xNetContext *net, int fd, const xQuicEndpointConf *conf) {
    (void)net, (void)fd, (void)conf;
    FUZZ_ASSERT(false, "no endpoint in this harness");
    return NULL;
}
void xQuicEndpointDestroy(xQuicEndpoint *ep) { (void)ep; }
void xQuicEndpointDrain(xQuicEndpoint *ep) { (void)ep; }
void xQuicEndpointCloseAll(xQuicEndpoint *ep) { (void)ep; }
size_t xQuicEndpointConnections(const xQuicEndpoint *ep) { return (void)ep, conns_alive; }
void xQuicEndpointOnGone(xQuicEndpoint *ep, void (*fn)(void *arg), void *arg) {
    (void)ep, (void)fn, (void)arg;
}
void *xQuicEndpointArg(const xQuicEndpoint *ep) { return ep->arg; }
int xQuicSocketOpen(const struct sockaddr_storage *addr, socklen_t len, bool reuseport) {
    (void)addr, (void)len, (void)reuseport;
    return -1;
}
bool xQuicSocketSteer(int fd) { return (void)fd, false; }

void *xQuicConnApp(const xQuicConn *qc) { return held(qc)->app; }
void xQuicConnSetApp(xQuicConn *qc, void *app) { held(qc)->app = app; }
xQuicEndpoint *xQuicConnEndpoint(const xQuicConn *qc) { return held(qc)->ep; }
xConn *xQuicConnView(xQuicConn *qc) { return &held(qc)->view; }
void xQuicConnRetain(xQuicConn *qc) { held(qc)->refs++; }

static void conn_free(xQuicConn *qc) {
    for (size_t i = 0; i < qc->nstreams; i++) {
        free(qc->streams[i].out);
        free(qc->streams[i].in);
    }
    free(qc);
    conns_alive--;
}

void xQuicConnRelease(xQuicConn *qc) {
    if (--held(qc)->refs == 0) conn_free(qc);
}

bool xQuicConnClosed(const xQuicConn *qc) { return held(qc)->close_owed || qc->told_closed; }

void xQuicConnClose(xQuicConn *qc, uint64_t app_error, const char *reason) {
    (void)reason;
    if (xQuicConnClosed(qc)) return;
    FUZZ_ASSERT((app_error >= 0x100 && app_error <= 0x110) || (app_error >= 0x200 && app_error <= 0x202),
                "closed with 0x%llx", (unsigned long long)app_error);
    qc->close_owed = true;
    qc->close_code = app_error;
}

static xQuicStream *stream_of(xQuicConn *qc, int64_t id) {
    for (size_t i = 0; i < qc->nstreams; i++)
        if (qc->streams[i].id == id) return &qc->streams[i];
    if (qc->nstreams == MAX_STREAMS) return NULL;
    xQuicStream *s = &qc->streams[qc->nstreams++];
    *s = (xQuicStream){.qc = qc, .id = id};
    return s;
}

xQuicStream *xQuicOpenUni(xQuicConn *qc) {
    if (xQuicConnClosed(qc)) return NULL;
    xQuicStream *s = stream_of(qc, qc->next_uni);
    qc->next_uni += 4;
    return s;
}

int64_t xQuicStreamId(const xQuicStream *s) { return live(s)->id; }
bool xQuicStreamEarly(const xQuicStream *s) {
    return live(s)->id % 8 == 4;
} /* some requests as if in 0-RTT */
void *xQuicStreamApp(const xQuicStream *s) { return live(s)->app; }
void xQuicStreamSetApp(xQuicStream *s, void *app) { live(s)->app = app; }

xErrno xQuicStreamWrite(xQuicStream *s, const void *data, size_t len, bool fin, void (*release)(void *),
                        void *arg) {
    live(s);
    if (s->write_shut || xQuicConnClosed(s->qc)) {
        if (release) release(arg);
        return XERR_CLOSED;
    }
    FUZZ_ASSERT(!s->fin_queued, "stream %lld written after its FIN", (long long)s->id);
    if (len) {
        char *out = realloc(s->out, s->out_len + len);
        FUZZ_ASSERT(out, "out of memory");
        memcpy(out + s->out_len, data, len);
        s->out = out;
        s->out_len += len;
        s->unacked += len;
    }
    if (release) {
        FUZZ_ASSERT(s->nreleases < MAX_REFS, "too many writes by reference held");
        s->releases[s->nreleases++] = (Release){release, arg};
        releases_owed++;
    }
    s->fin_queued = fin;
    return XOK;
}

size_t xQuicStreamUnacked(const xQuicStream *s) { return live(s)->unacked; }

void xQuicStreamConsumed(xQuicStream *s, size_t n) {
    live(s)->credited += n;
    FUZZ_ASSERT(s->credited <= s->delivered, "stream %lld: %llu bytes credited of %llu delivered",
                (long long)s->id, (unsigned long long)s->credited, (unsigned long long)s->delivered);
}

static void run_releases(xQuicStream *s) {
    for (size_t i = 0; i < s->nreleases; i++) {
        s->releases[i].fn(s->releases[i].arg);
        releases_owed--;
    }
    s->nreleases = 0;
}

void xQuicStreamReset(xQuicStream *s, uint64_t code) {
    (void)code;
    if (xQuicConnClosed(live(s)->qc)) return;
    s->write_shut = s->read_shut = true;
    s->unacked = 0;
    run_releases(s); /* what was queued is abandoned */
}

void xQuicStreamStopReading(xQuicStream *s, uint64_t code) {
    (void)code;
    if (xQuicConnClosed(live(s)->qc)) return;
    s->read_shut = true;
}

/* ---- Events ---- */

static xTestWorker worker;
static xHttpContext *const ctx = &worker.ctx;
static bool turn_each;

static bool client_stream(int64_t id) { return (id & 1) == 0; }
static bool bidi(int64_t id) { return (id & 2) == 0; }

static void close_stream(xQuicStream *s) {
    run_releases(s);
    xH3App.on_stream_close(s->qc, s); /* it may still read s, as quic.c allows */
    s->closed = true;
}

/* The end of an event, as quic.c's flush: the application writes what it
 * gathered over the event (on_settle), what was written is acknowledged,
 * streams done both ways close, an owed close closes everything. */
static void settle(xQuicConn *qc) {
    if (qc->told_closed) return;
    if (!qc->close_owed && xH3App.on_settle) xH3App.on_settle(qc);
    for (int round = 0; round < 64 && !qc->close_owed; round++) {
        bool acked = false;
        for (size_t i = 0; i < qc->nstreams; i++) {
            xQuicStream *s = &qc->streams[i];
            if (s->closed || (!s->unacked && !s->nreleases)) continue;
            s->unacked = 0;
            run_releases(s);
            acked = true;
            xH3App.on_stream_acked(qc, s);
        }
        if (!acked) break;
    }
    if (qc->close_owed) {
        qc->told_closed = true;
        for (size_t i = 0; i < qc->nstreams; i++)
            if (!qc->streams[i].closed) close_stream(&qc->streams[i]);
        xH3App.on_close(qc);
        xQuicConnRelease(qc); /* the teardown's reference */
        return;
    }
    for (size_t i = 0; i < qc->nstreams; i++) {
        xQuicStream *s = &qc->streams[i];
        if (s->closed || !client_stream(s->id)) continue; /* ours are unidirectional and never end */
        bool read_done = s->peer_fin || s->peer_reset || s->read_shut;
        bool write_done = !bidi(s->id) || s->write_shut || (s->fin_queued && !s->unacked);
        if (read_done && write_done) close_stream(s);
    }
}

static void turn(xQuicConn *qc, int times) {
    for (int i = 0; i < times; i++) {
        xTestTurn(ctx->net.loop);
        if (conns_alive) settle(qc);
    }
}

static void deliver(xQuicConn *qc, int64_t id, const uint8_t *data, size_t len, bool fin) {
    xQuicStream *s = stream_of(qc, id);
    if (!s || s->closed || s->peer_fin || s->peer_reset) return; /* QUIC delivers nothing more */
    if (s->read_shut) return; /* we sent STOP_SENDING (or reset it): ngtcp2 drops what comes */
    s->delivered += len;
    s->peer_fin = fin;
    if (getenv("FUZZ_DUMP") && len) {
        s->in = realloc(s->in, s->in_len + len);
        memcpy(s->in + s->in_len, data, len);
        s->in_len += len;
    }
    /* Each piece in its own block of its size, so ASan sees a read past it. */
    uint8_t *copy = malloc(len ? len : 1);
    FUZZ_ASSERT(copy, "out of memory");
    if (len) memcpy(copy, data, len);
    xH3App.on_stream_data(qc, s, copy, len, fin);
    free(copy);
    settle(qc);
}

static void peer_reset(xQuicConn *qc, int64_t id, uint64_t code) {
    xQuicStream *s = stream_of(qc, id);
    if (!s || s->closed || s->peer_reset || s->peer_fin) return;
    s->peer_reset = true;
    if (s->app) xH3App.on_stream_reset(qc, s, code);
    settle(qc);
}

/* ---- Checks on what was sent ---- */

/* table: our encoder has a dynamic table (the client's SETTINGS allowed one). */
static void check_request_output(const xQuicStream *s, bool table) {
    xH3FrameReader reader;
    xH3FrameReaderInit(&reader, XH3_STREAM_REQUEST, 1u << 20);
    xQpackDecoder dec;
    FUZZ_ASSERT(xQpackDecoderInit(&dec, 0, 0) == 0, "out of memory");
    enum { HEAD, BODY, AFTER_TRAILERS } phase = HEAD;
    const uint8_t *in = (const uint8_t *)s->out;
    size_t at = 0;
    while (at < s->out_len) {
        size_t used = 0;
        xH3Frame f;
        xH3ReadStatus st = xH3FrameRead(&reader, in + at, s->out_len - at, &used, &f);
        at += used;
        FUZZ_ASSERT(st != XH3_READ_ERROR, "stream %lld: our frames are refused (0x%x)", (long long)s->id,
                    (unsigned)f.error);
        if (st == XH3_READ_MORE) {
            /* A frame cut short is only ours to finish if we did not end the stream. */
            FUZZ_ASSERT(!s->fin_queued || s->write_shut, "stream %lld ends inside a frame", (long long)s->id);
            break;
        }
        FUZZ_ASSERT(phase != AFTER_TRAILERS, "stream %lld: a frame after the trailers", (long long)s->id);
        if (st == XH3_READ_DATA) {
            FUZZ_ASSERT(phase == BODY, "stream %lld: DATA before HEADERS", (long long)s->id);
            continue;
        }
        FUZZ_ASSERT(f.type == XH3_FRAME_HEADERS, "stream %lld: frame type 0x%llx", (long long)s->id,
                    (unsigned long long)f.type);
        if (f.payload.len && f.payload.data[0] != 0x00) {
            /* Required Insert Count > 0: a response head referring to entries the client
             * acknowledged (test_qpack_encoder checks their decoding against nghttp3). */
            FUZZ_ASSERT(table && phase == HEAD, "stream %lld: a section refers to a table never set",
                        (long long)s->id);
            phase = BODY;
            continue;
        }
        xHpackField fields[64];
        char scratch[8192];
        xQpackSection sec = {.fields = fields,
                             .max_fields = 64,
                             .scratch = scratch,
                             .scratch_size = sizeof scratch,
                             .max_size = 1 << 16};
        xQpackResult r =
            xQpackDecodeSection(&dec, (uint64_t)s->id, (const uint8_t *)f.payload.data, f.payload.len, &sec);
        FUZZ_ASSERT(r == XQPACK_OK, "stream %lld: our QPACK section does not decode (%d)", (long long)s->id,
                    (int)r);
        if (phase == HEAD) {
            FUZZ_ASSERT(sec.count && xStrEqualsC(fields[0].name, ":status") && fields[0].value.len == 3 &&
                            fields[0].value.data[0] >= '1' && fields[0].value.data[0] <= '5',
                        "stream %lld: no :status first", (long long)s->id);
            for (size_t i = 1; i < sec.count; i++)
                FUZZ_ASSERT(fields[i].name.len && fields[i].name.data[0] != ':',
                            "stream %lld: a pseudo-field after :status", (long long)s->id);
            phase = BODY;
        } else {
            for (size_t i = 0; i < sec.count; i++)
                FUZZ_ASSERT(fields[i].name.len && fields[i].name.data[0] != ':',
                            "stream %lld: a pseudo-field in trailers", (long long)s->id);
            phase = AFTER_TRAILERS;
        }
    }
    xQpackDecoderFree(&dec);
}

static const xQuicStream *our_encoder_stream(const xQuicConn *qc) {
    for (size_t i = 0; i < qc->nstreams; i++)
        if (qc->streams[i].id == 7) return &qc->streams[i];
    return NULL;
}

static bool table_set(const xQuicConn *qc) {
    const xQuicStream *s = our_encoder_stream(qc);
    return s && s->out_len > 1;
}

/* Our encoder stream: its type, then nothing unless the client's SETTINGS allowed a
 * table; then Set Dynamic Table Capacity first, and instructions a decoder takes whole. */
static void check_encoder_stream(const xQuicStream *s) {
    FUZZ_ASSERT(s->out_len >= 1 && s->out[0] == 0x02, "our encoder stream's type");
    if (s->out_len == 1) return;
    FUZZ_ASSERT((s->out[1] & 0xe0) == 0x20, "our encoder stream does not open with a capacity");
    xQpackDecoder dec;
    FUZZ_ASSERT(xQpackDecoderInit(&dec, 1 << 16, 0) == 0, "out of memory");
    size_t used = 0;
    FUZZ_ASSERT(xQpackDecoderReadEncoder(&dec, (const uint8_t *)s->out + 1, s->out_len - 1, &used) ==
                        XQPACK_OK &&
                    used == s->out_len - 1,
                "our encoder stream does not decode");
    xQpackDecoderFree(&dec);
}

static void check_output(const xQuicConn *qc) {
    for (size_t i = 0; i < qc->nstreams; i++) {
        const xQuicStream *s = &qc->streams[i];
        if (getenv("FUZZ_DUMP")) {
            char what[64];
            snprintf(what, sizeof what, "stream %lld in", (long long)s->id);
            fuzzDump(what, s->in ? s->in : "", s->in_len, 4096);
            snprintf(what, sizeof what, "stream %lld out", (long long)s->id);
            fuzzDump(what, s->out ? s->out : "", s->out_len, 4096);
        }
        if (s->id == 3)
            FUZZ_ASSERT(s->out_len >= 2 && s->out[0] == 0x00 && s->out[1] == XH3_FRAME_SETTINGS,
                        "our control stream does not open with SETTINGS");
        if (s->id == 7) check_encoder_stream(s);
        if (s->id == 11) FUZZ_ASSERT(s->out_len >= 1 && s->out[0] == 0x03, "our decoder stream's type");
        if (!client_stream(s->id) || !bidi(s->id)) continue;
        check_request_output(s, table_set(qc));
        if (s->peer_fin && !s->peer_reset && !qc->told_closed)
            FUZZ_ASSERT(s->closed || s->write_shut,
                        "stream %lld: the request came whole and was not answered", (long long)s->id);
    }
}

/* ---- The harness ---- */

static xHttpRouteTarget targets[] = {
    {.handler = fuzzOnHello},
    {.handler = fuzzOnEcho},
    {.handler = fuzzOnStream},
    {.handler = fuzzOnLater},
    {.handler = fuzzOnUpload, .streams_body = true},
};
static const char *const specs[] = {"GET /hello", "POST /echo", "GET /stream", "/later", "/upload"};

static void set_up(void) {
    xHttpServerConf *conf = &worker.conf;
    fuzzConnConfInit(conf);
    FUZZ_ASSERT(xTestWorkerInit(&worker, specs, targets, sizeof specs / sizeof specs[0]), "set-up failed");
    endpoint.arg = ctx;
}

static xQuicConn *conn_open(void) {
    xQuicConn *qc = calloc(1, sizeof *qc);
    FUZZ_ASSERT(qc, "out of memory");
    qc->ep = &endpoint;
    qc->refs = 1;
    qc->next_uni = 3;
    qc->view.net = &ctx->net;
    qc->view.fd = -1;
    qc->view.refs = 1;
    conns_alive++;
    return qc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static bool ready;
    if (!ready) {
        set_up();
        ready = true;
    }
    if (!size) return 0;
    size_t pooled = ctx->free_exchange_count;
    uint8_t setup = data[0];
    turn_each = setup & 2;
    xQuicConn *qc = conn_open();
    xQuicConnRetain(qc); /* the harness's, to read what was sent after the close */
    FUZZ_ASSERT(xH3App.on_open(qc), "the connection was refused");
    settle(qc);
    static const int64_t uni[2] = {2, 6};
    if (setup & 1) {
        static const uint8_t control[] = {0x00, XH3_FRAME_SETTINGS, 0x00}, encoder = 0x02, decoder = 0x03;
        deliver(qc, 2, control, sizeof control, false);
        deliver(qc, 6, &encoder, 1, false);
        deliver(qc, 10, &decoder, 1, false);
    }
    size_t at = 1;
    while (at < size && !qc->told_closed) {
        uint8_t op = data[at++];
        unsigned slot = op & 7, kind = (op >> 3) & 3;
        int64_t id = slot < 6 ? (int64_t)slot * 4 : uni[slot - 6];
        if (kind == 3) {
            turn(qc, 1 + (op >> 5));
            continue;
        }
        size_t len = at < size ? data[at++] : 0;
        if (kind == 2) {
            peer_reset(qc, id, 0x100 + len);
        } else {
            if (len > size - at) len = size - at;
            deliver(qc, id, data + at, len, kind == 1);
            at += len;
        }
        if (turn_each) turn(qc, 1);
    }
    turn(qc, SETTLE_TURNS);
    check_output(qc);
    /* The peer goes: everything closes, and every handler lets go. */
    if (!qc->told_closed) {
        qc->close_owed = true;
        settle(qc);
    }
    turn(qc, SETTLE_TURNS);
    for (size_t i = 0; i < qc->nstreams; i++)
        FUZZ_ASSERT(qc->streams[i].closed, "stream %lld never closed", (long long)qc->streams[i].id);
    FUZZ_ASSERT(qc->refs == 1, "%u references to the connection left (retains unbalanced)", qc->refs - 1);
    xQuicConnRelease(qc);
    FUZZ_ASSERT(!conns_alive, "the connection was not freed");
    FUZZ_ASSERT(!releases_owed, "%zu writes by reference never released", releases_owed);
    FUZZ_ASSERT(ctx->free_exchange_count >= pooled, "exchanges lost: %zu pooled, %zu before",
                ctx->free_exchange_count, pooled);
    return 0;
}
