/* fuzz_http1_connection.c — a whole cleartext connection, as a worker serves
 * it, fed a client's bytes.
 *
 * The server end of a socketpair is accepted with xUpgradeAccept under a plan
 * with both protocols (so the HTTP/2 preface and "Upgrade: h2c" switch
 * protocols), on a context set up like a worker's with small limits, and
 * routes that answer at once, echo the body, stream a response with a
 * trailer, answer from a later loop iteration, and read a streamed request
 * body. The real plain transport and the loop's epoll carry every byte.
 *
 * Input: byte 0 is the pace; the rest is what the client sends.
 *   - bits 0-3: 0 sends everything in one write; 15 sends a piece up to
 *     each "\r\n\r\n" (heads apart from their bodies); other n, pieces of
 *     1 to 2^(n-1) bytes (sizes drawn from byte 0); the loop turns after each;
 *   - bit 6: the client reads only once it has sent everything;
 *   - bit 7: the server's send buffer is as small as the kernel allows, so
 *     writes block and queued output waits.
 * The client then half-closes, reads until the server's end of stream, and
 * closes. Checked after every input:
 *   - the server ends its output after the client's FIN, and the connection
 *     is freed once the client closes: conn_count 0, no connection listed;
 *   - the buffer pool keeps at most its maximum, and no pooled exchange is
 *     lost (the pool never shrinks below what it held before);
 *   - unless the client spoke HTTP/2 from the start, the output is a
 *     sequence of whole HTTP/1.1 responses: a status line "HTTP/1.1 NNN
 *     reason", well-formed fields, Content-Length or chunked framing that
 *     matches the bytes (no body for 1xx, 204, 304, nor, where the input
 *     holds a HEAD, for any sized response), nothing after "Connection:
 *     close", and after a 101 an HTTP/2 SETTINGS frame; a response may be
 *     cut short only when writes could block (bit 7), since a connection
 *     that closes drops what it had not sent;
 *   - no more final responses than request heads the input could hold
 *     ("\r\n\r\n" count) plus one for garbage, no more 100s than heads.
 * Leaks are LeakSanitizer's (the replay exits with every pool reachable).
 * FUZZ_DUMP=1 in the environment prints each input and its output. */
#include <errno.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_check.h"
#include "fuzz_conn.h"
#include "worker.h"
#include "xhttp/core/context.h"
#include "xhttp/core/exchange.h"
#include "xhttp/http2/http2.h"
#include "xhttp/upgrade/upgrade.h"

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
    conf->max_request_line = 512;
    fuzzConnRoutes(targets);
    FUZZ_ASSERT(xTestWorkerInit(&worker, specs, targets, sizeof specs / sizeof specs[0]), "set-up failed");
    xUpgradePlanCleartext(&plan, XHTTP_PROTO_HTTP1 | XHTTP_PROTO_HTTP2);
}

/* ---- The client's end ---- */

/* One turn of the loop: whatever is ready, then due timers, without waiting. */
static void turn(void) { xTestTurn(ctx->net.loop); }

/* ---- What the server wrote ---- */

typedef struct Head {
    int status;
    size_t end; /* just past the empty line */
    bool sized, chunked, close;
    bool websocket; /* Upgrade: websocket */
    uint64_t length;
} Head;

typedef enum Parsed { PARSED_OK, PARSED_SHORT, PARSED_BAD } Parsed;

/* Where the line at pos ends (at its CR), or len when it does not. */
static size_t line_end(const char *b, size_t len, size_t pos) {
    for (size_t i = pos; i + 1 < len; i++)
        if (b[i] == '\r' && b[i + 1] == '\n') return i;
    return len;
}

static bool field_is(const char *line, size_t n, const char *name) {
    size_t k = strlen(name);
    return n > k + 1 && strncasecmp(line, name, k) == 0 && line[k] == ':' && line[k + 1] == ' ';
}

static Parsed parse_head(const char *b, size_t len, size_t pos, Head *h) {
    memset(h, 0, sizeof *h);
    size_t have = len - pos < 9 ? len - pos : 9;
    if (memcmp(b + pos, "HTTP/1.1 ", have) != 0) return PARSED_BAD;
    if (len - pos < 13) return PARSED_SHORT;
    const char *s = b + pos + 9;
    if (s[0] < '1' || s[0] > '5' || s[1] < '0' || s[1] > '9' || s[2] < '0' || s[2] > '9' || s[3] != ' ')
        return PARSED_BAD;
    h->status = (s[0] - '0') * 100 + (s[1] - '0') * 10 + (s[2] - '0');
    size_t at = line_end(b, len, pos);
    if (at == len) return PARSED_SHORT;
    bool seen_length = false;
    for (at += 2;;) {
        size_t e = line_end(b, len, at);
        if (e == len) return PARSED_SHORT;
        const char *line = b + at;
        size_t n = e - at;
        at = e + 2;
        if (n == 0) break;
        const char *colon = memchr(line, ':', n);
        if (!colon || colon == line || memchr(line, '\n', n)) return PARSED_BAD;
        if (field_is(line, n, "Content-Length")) {
            if (seen_length) return PARSED_BAD;
            seen_length = h->sized = true;
            for (size_t i = 16; i < n; i++) {
                if (line[i] < '0' || line[i] > '9') return PARSED_BAD;
                h->length = h->length * 10 + (uint64_t)(line[i] - '0');
            }
        } else if (field_is(line, n, "Transfer-Encoding")) {
            if (n != 26 || memcmp(line + 19, "chunked", 7) != 0) return PARSED_BAD;
            h->chunked = true;
        } else if (field_is(line, n, "Connection")) {
            h->close = n == 17 && strncasecmp(line + 12, "close", 5) == 0;
        } else if (field_is(line, n, "Upgrade")) {
            h->websocket = n == 18 && memcmp(line + 9, "websocket", 9) == 0;
        }
    }
    h->end = at;
    return h->sized && h->chunked ? PARSED_BAD : PARSED_OK;
}

/* A chunked body from pos: sets *end past its last CRLF. */
static Parsed parse_chunked(const char *b, size_t len, size_t pos, size_t *end) {
    for (;;) {
        size_t e = line_end(b, len, pos);
        if (e == len) return PARSED_SHORT;
        if (e == pos || e - pos > 15) return PARSED_BAD;
        uint64_t size = 0;
        for (size_t i = pos; i < e; i++) {
            int c = b[i], d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
            if (d < 0) return PARSED_BAD;
            size = size * 16 + (uint64_t)d;
        }
        pos = e + 2;
        if (size == 0) break;
        if (len - pos < size + 2) return PARSED_SHORT;
        if (b[pos + size] != '\r' || b[pos + size + 1] != '\n') return PARSED_BAD;
        pos += size + 2;
    }
    for (;;) { /* trailer fields, then the empty line */
        size_t e = line_end(b, len, pos);
        if (e == len) return PARSED_SHORT;
        bool empty = e == pos;
        if (!empty && !memchr(b + pos, ':', e - pos)) return PARSED_BAD;
        pos = e + 2;
        if (empty) break;
    }
    *end = pos;
    return PARSED_OK;
}

typedef struct Walk {
    const char *b;
    size_t len;
    bool head_seen;        /* the input holds a HEAD: a sized response may have no body */
    bool may_cut;          /* writes could block: the last response may be cut short */
    unsigned char *failed; /* positions from which no reading works */
    size_t finals, interims;
} Walk;

/* After a 101 to h2c, HTTP/2 speaks: its first frame is the server's SETTINGS. */
static bool h2_settings_at(const Walk *w, size_t pos) {
    if (w->len == pos) return true;
    if (w->len - pos < 9) return w->may_cut;
    return w->b[pos + 3] == 4;
}

/* True when the output from pos reads as whole responses; the counts of
 * the reading found are left in w. */
static bool walk(Walk *w, size_t pos, size_t finals, size_t interims) {
    if (pos == w->len) {
        w->finals = finals;
        w->interims = interims;
        return true;
    }
    if (w->failed[pos]) return false;
    Head h;
    Parsed r = parse_head(w->b, w->len, pos, &h);
    bool ok = false;
    if (r == PARSED_SHORT) {
        ok = w->may_cut;
    } else if (r == PARSED_OK && h.status < 200) {
        if (h.sized || h.chunked)
            ok = false;
        else if (h.status == 101 && h.websocket) /* the server's frames follow, to the end */
            ok = walk(w, w->len, finals + 1, interims);
        else if (h.status == 101)
            ok = h2_settings_at(w, h.end) && walk(w, w->len, finals, interims);
        else
            ok = h.status == 100 && walk(w, h.end, finals, interims + 1);
    } else if (r == PARSED_OK) {
        size_t next[2], nnext = 0, end;
        if (h.status == 204 || h.status == 304) {
            next[nnext++] = h.end;
        } else if (h.chunked) {
            Parsed c = parse_chunked(w->b, w->len, h.end, &end);
            if (c == PARSED_OK) next[nnext++] = end;
            ok = c == PARSED_SHORT && w->may_cut;
        } else if (h.sized) {
            if (w->len - h.end >= h.length)
                next[nnext++] = h.end + h.length;
            else
                ok = w->may_cut;
            if (w->head_seen && h.length > 0) next[nnext++] = h.end;
        } else {
            next[nnext++] = h.close ? w->len : w->len + 1; /* the body ends with the connection */
        }
        for (size_t i = 0; i < nnext && !ok; i++) {
            if (next[i] > w->len || (h.close && next[i] != w->len)) continue;
            ok = walk(w, next[i], finals + 1, interims);
        }
    }
    if (!ok) w->failed[pos] = 1;
    return ok;
}

static size_t count(const char *b, size_t len, const char *s) {
    size_t n = 0, k = strlen(s);
    for (size_t i = 0; i + k <= len; i++)
        if (memcmp(b + i, s, k) == 0) n++;
    return n;
}

static void check_output(const char *in, size_t in_len, const FuzzClient *c, bool may_cut) {
    if (getenv("FUZZ_DUMP")) {
        fuzzDump("input", in, in_len, 2048);
        fuzzDump("output", c->out, c->out_len, 2048);
    }
    if (in_len >= XHTTP2_PREFACE_LEN && memcmp(in, XHTTP2_PREFACE, XHTTP2_PREFACE_LEN) == 0) {
        Walk w = {c->out, c->out_len, false, may_cut, NULL, 0, 0};
        FUZZ_ASSERT(h2_settings_at(&w, 0), "HTTP/2 output does not open with SETTINGS");
        return;
    }
    Walk w = {c->out, c->out_len, count(in, in_len, "HEAD") > 0, may_cut, calloc(c->out_len + 1, 1), 0, 0};
    FUZZ_ASSERT(w.failed != NULL, "out of memory");
    bool ok = walk(&w, 0, 0, 0);
    free(w.failed);
    size_t heads = count(in, in_len, "\r\n\r\n");
    if (!ok || w.finals > heads + 1 || w.interims > heads) {
        fuzzDump("input", in, in_len, 2048);
        fuzzDump("output", c->out, c->out_len, 2048);
    }
    FUZZ_ASSERT(ok, "the output is not a sequence of HTTP/1.1 responses");
    FUZZ_ASSERT(w.finals <= heads + 1, "%zu responses to at most %zu requests", w.finals, heads + 1);
    FUZZ_ASSERT(w.interims <= heads, "%zu interim responses to at most %zu requests", w.interims, heads);
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
    bool read_as_we_go = !(mode & 0x40), small_sndbuf = mode & 0x80;
    size_t n = size - 1;
    char *in = fuzz_copy(data + 1, n);
    size_t pooled = ctx->free_exchange_count;

    FuzzClient c = fuzzClientConnect(ctx, &plan, small_sndbuf, turn);
    fuzzClientSendAll(&c, in, n, mode, true, read_as_we_go);
    fuzzClientFinish(&c, ctx, pooled);

    check_output(in, n, &c, small_sndbuf);
    free(c.out);
    free(in);
    return 0;
}
