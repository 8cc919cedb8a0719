/* fuzz_http1_chunked.c — the chunked body decoder on arbitrary bytes.
 *
 * Input: byte 0 picks the limits (low bit) and a split point (the rest,
 * scaled to the input); the remaining bytes are the body as sent. Checked
 * after every input:
 *   - each call consumes at most what it was given, writes at most what it
 *     consumed (the payload never overtakes the framing), fails only with
 *     400 or 431;
 *   - decoded payload bytes never exceed the input; a finished body stops
 *     right after a CRLF;
 *   - decoding in two pieces, split at the chosen point, gives the same
 *     outcome as decoding whole (status, done, bytes consumed, payload);
 *   - decoding in place the way the server does (payload written over the
 *     framing, the next piece arriving right behind the payload) gives that
 *     outcome too and never touches the bytes that follow the body. */
#include <string.h>
#include <sys/types.h>

#include "fuzz_check.h"
#include "xhttp/http1/http1_parser.h"

typedef struct Limits {
    size_t max_line, max_trailers;
} Limits;

static const Limits LIMITS[2] = {{4096, 8192}, {8, 24}};

/* What decoding a whole body reported, summed over its calls. */
typedef struct Outcome {
    int status; /* 0 unless a call failed */
    bool done;
    bool left_input; /* a call neither finished nor used all it was given */
    size_t consumed;
    size_t payload_len;
    char *payload; /* at least as big as the input */
} Outcome;

/* One call on in[0, n), payload to out; false once decoding stops. */
static bool feed(xHttp1Chunked *dec, const char *in, size_t n, char *out, const Limits *lim, Outcome *o) {
    size_t written = 0;
    ssize_t used = xHttp1ChunkedDecode(dec, in, n, out, &written, lim->max_line, lim->max_trailers);
    if (used < 0) {
        FUZZ_ASSERT(used == XHTTP1_ERROR, "returned %zd", used);
        FUZZ_ASSERT(dec->error_status == 400 || dec->error_status == 431, "status %d", dec->error_status);
        o->status = dec->error_status;
        return false;
    }
    FUZZ_ASSERT((size_t)used <= n, "consumed %zd of %zu", used, n);
    FUZZ_ASSERT(written <= (size_t)used, "wrote %zu from %zd bytes", written, used);
    o->consumed += (size_t)used;
    o->payload_len += written;
    o->done = dec->done;
    if (!dec->done && (size_t)used != n) o->left_input = true;
    return !dec->done;
}

/* Decodes raw[0, len) in pieces [0, k) and [k, len), each in its own heap
 * block so that reading past a piece is caught. k == len: in one piece. */
static void decode_split(const uint8_t *raw, size_t len, size_t k, const Limits *lim, Outcome *o) {
    xHttp1Chunked dec;
    memset(&dec, 0, sizeof dec);
    o->status = 0;
    o->done = o->left_input = false;
    o->consumed = o->payload_len = 0;
    size_t cuts[2] = {k, len};
    size_t from = 0;
    for (int i = 0; i < 2; i++) {
        size_t to = cuts[i];
        if (to == from && i == 1) break;
        char *piece = fuzz_copy(raw + from, to - from);
        bool more = feed(&dec, piece, to - from, o->payload + o->payload_len, lim, o);
        free(piece);
        if (!more) return;
        from = to;
    }
}

static bool same_outcome(const Outcome *a, const Outcome *b) {
    if (a->status || b->status) return a->status == b->status;
    return a->done == b->done && a->left_input == b->left_input && a->consumed == b->consumed &&
           a->payload_len == b->payload_len && memcmp(a->payload, b->payload, a->payload_len) == 0;
}

/* As the server decodes: one buffer, payload over framing, the second piece
 * arriving right behind the payload decoded so far. */
static void check_in_place(const uint8_t *raw, size_t len, size_t k, const Limits *lim,
                           const Outcome *expect) {
    char *buf = fuzz_copy(raw, len);
    xHttp1Chunked dec;
    memset(&dec, 0, sizeof dec);
    size_t fill = 0, body = 0, raw_pos = 0, src = 0;
    ssize_t used = 0;
    size_t cuts[2] = {k, len};
    for (int i = 0; i < 2 && !dec.done && used >= 0; i++) {
        size_t n = cuts[i] - src;
        memmove(buf + fill, raw + src, n);
        fill += n;
        src += n;
        size_t written = 0;
        used = xHttp1ChunkedDecode(&dec, buf + raw_pos, fill - raw_pos, buf + body, &written, lim->max_line,
                                   lim->max_trailers);
        body += written;
        if (used >= 0) raw_pos += (size_t)used;
        if (used >= 0 && !dec.done) fill = raw_pos = body;
    }
    if (expect->status) {
        FUZZ_ASSERT(used < 0 && dec.error_status == expect->status, "in place: status %d, whole %d",
                    dec.error_status, expect->status);
    } else if (expect->done) {
        FUZZ_ASSERT(dec.done && body == expect->payload_len && memcmp(buf, expect->payload, body) == 0,
                    "in place: payload differs from whole");
        size_t behind = fill - raw_pos;
        FUZZ_ASSERT(behind == src - expect->consumed &&
                        memcmp(buf + raw_pos, raw + expect->consumed, behind) == 0,
                    "in place: the bytes after the body changed");
    } else {
        FUZZ_ASSERT(!dec.done && used >= 0 && body == expect->payload_len,
                    "in place: unfinished body differs");
    }
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const Limits *lim = &LIMITS[data[0] & 1];
    const uint8_t *raw = data + 1;
    size_t n = size - 1;
    size_t k = (size_t)(data[0] >> 1) * n / 127;

    Outcome whole = {.payload = malloc(n + 1)}, split = {.payload = malloc(n + 1)};
    FUZZ_ASSERT(whole.payload && split.payload, "out of memory");
    decode_split(raw, n, n, lim, &whole);
    FUZZ_ASSERT(whole.payload_len <= n && whole.consumed <= n, "payload %zu, consumed %zu of %zu",
                whole.payload_len, whole.consumed, n);
    if (whole.done)
        FUZZ_ASSERT(whole.consumed >= 5 && memcmp(raw + whole.consumed - 2, "\r\n", 2) == 0,
                    "done after %zu bytes, not right after a CRLF", whole.consumed);
    decode_split(raw, n, k, lim, &split);
    FUZZ_ASSERT(same_outcome(&split, &whole),
                "split at %zu: status %d done %d consumed %zu payload %zu; whole: %d %d %zu %zu", k,
                split.status, split.done, split.consumed, split.payload_len, whole.status, whole.done,
                whole.consumed, whole.payload_len);
    if (!whole.left_input) check_in_place(raw, n, k, lim, &whole);
    free(whole.payload);
    free(split.payload);
    return 0;
}
