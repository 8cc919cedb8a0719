/* fuzz_http2_connection.c — a whole HTTP/2 connection, as a worker serves it,
 * fed a client's bytes.
 *
 * The server end of a socketpair is accepted with xUpgradeAccept under an
 * HTTP/2-only plan, on a context set up like a worker's with small limits
 * (8 streams, 64 KiB windows, 1 KiB header lists), and routes that answer at
 * once, echo the body, stream a response with a trailer, answer from a later
 * loop iteration, read a streamed request body, and a WebSocket echo that
 * an extended CONNECT (RFC 8441) opens on its stream. The real plain transport
 * and the loop's epoll carry every byte.
 *
 * Input: byte 0 is the pace; the rest is what the client sends.
 *   - bits 0-3: 0 sends everything in one write; other n, pieces of 1 to
 *     2^(n-1) bytes (sizes drawn from byte 0); the loop turns after each;
 *   - bit 4: the input is sent as it is; otherwise the client preface and an
 *     empty SETTINGS go first, so the rest can be frames alone;
 *   - bit 6: the client reads only once it has sent everything;
 *   - bit 7: the server's send buffer is as small as the kernel allows, so
 *     writes block and queued output waits.
 * The client then half-closes, reads until the server's end of stream, and
 * closes. Checked after every piece: the session's own invariants
 * (xHttp2BrokenInvariant: windows within 0 and 2^31-1, the stream table
 * agreeing with the streams' states and within the stream limit, no stream
 * idle after its HEADERS or left half-closed (local) without its reset, no
 * body framed before its head, each body source's kind agreeing with its
 * counts, held body bytes accounted). Checked after every input:
 *   - the server ends its output after the client's FIN, and the connection
 *     is freed once the client closes: conn_count 0, no connection listed;
 *   - the buffer pool keeps at most its maximum, and no pooled exchange is
 *     lost;
 *   - the output is a sequence of whole frames, at most 16 KiB each, of the
 *     types a server sends, opening with SETTINGS; stream frames (HEADERS,
 *     CONTINUATION, DATA, RST_STREAM) on odd ids; nothing after a GOAWAY that
 *     reports an error but that GOAWAY. A frame may be cut short only when
 *     writes could block (bit 7).
 * Leaks are LeakSanitizer's. FUZZ_DUMP=1 prints each input and its output. */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_check.h"
#include "fuzz_conn.h"
#include "worker.h"
#include "xhttp/core/context.h"
#include "xhttp/core/exchange.h"
#include "xhttp/http2/http2.h"
#include "xhttp/upgrade/upgrade.h"

#define CLIENT_START XHTTP2_PREFACE "\0\0\0\4\0\0\0\0\0"

static xTestWorker worker;
static xHttpContext *const ctx = &worker.ctx;
static xUpgradePlan plan;

/* ---- Routes ---- */

static xHttpRouteTarget targets[] = {
    FUZZ_CONN_TARGETS,
};
static const char *const specs[] = {FUZZ_CONN_SPECS};

static void set_up(void) {
    xHttpServerConf *conf = &worker.conf;
    fuzzConnConfInit(conf);
    conf->http2_max_streams = 8;
    conf->http2_window = 65535;
    conf->http2_max_continuations = 4;
    conf->http2_max_control_queue = 64;
    fuzzConnRoutes(targets);
    FUZZ_ASSERT(xTestWorkerInit(&worker, specs, targets, sizeof specs / sizeof specs[0]), "set-up failed");
    xUpgradePlanCleartext(&plan, XHTTP_PROTO_HTTP2);
}

/* ---- The client's end ---- */

/* The session's invariants, on every connection the context holds. */
static void check_sessions(void) {
    for (xConn *conn = ctx->net.conns; conn; conn = conn->next) {
        const char *broken = xHttp2BrokenInvariant(conn);
        FUZZ_ASSERT(!broken, "%s", broken);
    }
}

/* One turn of the loop: whatever is ready, then due timers, without waiting. */
static void turn(void) {
    xTestTurn(ctx->net.loop);
    check_sessions();
}

/* ---- What the server wrote ---- */

static void check_output(const FuzzClient *c, bool may_cut) {
    const unsigned char *b = (const unsigned char *)c->out;
    size_t pos = 0;
    bool failed_goaway = false;
    for (int n = 0; pos < c->out_len; n++) {
        FUZZ_ASSERT(!failed_goaway, "frames after a GOAWAY with an error");
        if (c->out_len - pos < 9) break;
        size_t len = (size_t)b[pos] << 16 | (size_t)b[pos + 1] << 8 | b[pos + 2];
        unsigned type = b[pos + 3];
        uint32_t id = ((uint32_t)b[pos + 5] << 24 | (uint32_t)b[pos + 6] << 16 | (uint32_t)b[pos + 7] << 8 |
                       b[pos + 8]) &
                      0x7fffffffu;
        FUZZ_ASSERT(len <= 16384, "a %zu-byte frame", len);
        FUZZ_ASSERT(n > 0 || type == 4, "the output does not open with SETTINGS");
        FUZZ_ASSERT(type <= 9 && type != 2 && type != 5, "frame type %u from a server", type);
        bool on_stream = type == 0 || type == 1 || type == 3 || type == 9;
        FUZZ_ASSERT(!on_stream || (id & 1), "type %u on stream %u", type, id);
        FUZZ_ASSERT(on_stream || type == 8 || id == 0, "type %u on stream %u", type, id);
        if (c->out_len - pos - 9 < len) break;
        if (type == 7 && len >= 8) failed_goaway = b[pos + 15] || b[pos + 14] || b[pos + 13] || b[pos + 12];
        pos += 9 + len;
    }
    FUZZ_ASSERT(pos == c->out_len || may_cut, "the output ends in a partial frame");
}

/* ---- One connection ---- */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static bool ready;
    if (!ready) {
        set_up();
        ready = true;
    }
    if (size < 1) return 0;
    unsigned mode = data[0];
    bool raw = mode & 0x10, read_as_we_go = !(mode & 0x40), small_sndbuf = mode & 0x80;
    size_t start = raw ? 0 : sizeof CLIENT_START - 1, n = start + size - 1;
    char *in = malloc(n ? n : 1);
    FUZZ_ASSERT(in != NULL, "out of memory");
    memcpy(in, CLIENT_START, start);
    memcpy(in + start, data + 1, size - 1);
    size_t pooled = ctx->free_exchange_count;

    FuzzClient c = fuzzClientConnect(ctx, &plan, small_sndbuf, turn);
    fuzzClientSendAll(&c, in, n, mode, false, read_as_we_go);
    fuzzClientFinish(&c, ctx, pooled);
    if (getenv("FUZZ_DUMP")) {
        fuzzDump("input", in, n, 4096);
        fuzzDump("output", c.out, c.out_len, 4096);
    }
    check_output(&c, small_sndbuf);
    free(c.out);
    free(in);
    return 0;
}
