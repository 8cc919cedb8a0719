/* test_http1_chunked.c — the chunked body decoder: payload, extensions and
 * trailers, every rejection with its status, the same outcome however the
 * input is cut into calls, and decoding in place the way the server does.
 *
 * Input is decoded from the very end of a page followed by an inaccessible
 * page, so reading one byte past in_len crashes the test. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "guard_page.h"
#include "xhttp/http1/http1_parser.h"

#define CAP (256 * 1024)
#define MAX_LINE 4096
#define MAX_TRAILERS 8192

static char *guard_end; /* one past the last readable byte */

/* What decoding a whole body reported, summed over its calls. */
typedef struct Outcome {
    int status; /* 0 unless a call failed */
    bool done;
    bool left_input; /* a call neither finished nor used all it was given */
    size_t consumed; /* input bytes used, over all calls */
    size_t payload_len;
    char payload[CAP];
} Outcome;

typedef struct Limits {
    size_t max_line, max_trailers;
} Limits;

static const Limits DEFAULTS = {MAX_LINE, MAX_TRAILERS};

/* Feeds one piece from the guarded page; false once decoding stops. */
static bool feed(xHttp1Chunked *dec, const char *piece, size_t n, const Limits *lim, Outcome *o) {
    char *in = guard_end - n;
    memcpy(in, piece, n);
    size_t written = 0;
    ssize_t used = xHttp1ChunkedDecode(dec, in, n, o->payload + o->payload_len, &written, lim->max_line,
                                       lim->max_trailers);
    o->payload_len += written;
    if (used < 0) {
        o->status = dec->error_status;
        return false;
    }
    o->consumed += (size_t)used;
    o->done = dec->done;
    if (!dec->done && (size_t)used != n) o->left_input = true;
    return !dec->done;
}

/* Decodes raw cut before each of cuts[0..ncuts), which ascend. */
static void decode_cut(const char *raw, size_t len, const size_t *cuts, size_t ncuts, const Limits *lim,
                       Outcome *o) {
    xHttp1Chunked dec;
    memset(&dec, 0, sizeof dec);
    memset(o, 0, offsetof(Outcome, payload));
    size_t from = 0;
    for (size_t i = 0; i <= ncuts; i++) {
        size_t to = i < ncuts ? cuts[i] : len;
        if (!feed(&dec, raw + from, to - from, lim, o)) return;
        from = to;
    }
}

/* Failures compare by status alone: how much came out before one is moot. */
static bool same_outcome(const Outcome *a, const Outcome *b) {
    if (a->status || b->status) return a->status == b->status;
    return a->done == b->done && a->left_input == b->left_input && a->consumed == b->consumed &&
           a->payload_len == b->payload_len && memcmp(a->payload, b->payload, a->payload_len) == 0;
}

static Outcome whole, cut; /* too big for the stack */

/* Decodes raw whole, byte by byte, in two pieces at every offset and in three
 * at every pair of offsets; every way must give the whole's outcome. */
static void check_any_cut(const char *name, const char *raw, size_t len, const Limits *lim) {
    static size_t cuts[CAP];
    decode_cut(raw, len, NULL, 0, lim, &whole);
    for (size_t i = 0; i + 1 < len; i++) cuts[i] = i + 1;
    decode_cut(raw, len, cuts, len ? len - 1 : 0, lim, &cut);
    CHECK_MSG(same_outcome(&cut, &whole), "%s: byte by byte differs from whole", name);

    size_t bad_k = 0, bad_j = 0;
    for (size_t k = 1; k < len && !bad_k; k++) {
        decode_cut(raw, len, &k, 1, lim, &cut);
        if (!same_outcome(&cut, &whole)) bad_k = k;
        for (size_t j = k + 1; j < len && !bad_k && len <= 200; j++) {
            size_t two[2] = {k, j};
            decode_cut(raw, len, two, 2, lim, &cut);
            if (!same_outcome(&cut, &whole)) bad_k = k, bad_j = j;
        }
    }
    CHECK_MSG(bad_k == 0, "%s: cut at %zu,%zu differs from whole", name, bad_k, bad_j);
}

/* Decodes as the server does: payload written over the framing in the same
 * buffer, and after each call the framing it used is dropped, so the next
 * bytes arrive right behind the payload. Fed in pieces of `step` bytes. */
static void check_in_place(const char *name, const char *raw, size_t len, size_t step,
                           const Outcome *expect) {
    static char buf[CAP];
    xHttp1Chunked dec;
    memset(&dec, 0, sizeof dec);
    size_t fill = 0, body = 0, src = 0, raw_pos = 0;
    ssize_t used = 0;
    while (src < len && !dec.done && used >= 0) {
        size_t n = len - src < step ? len - src : step;
        memcpy(buf + fill, raw + src, n);
        fill += n;
        src += n;
        size_t written = 0;
        used = xHttp1ChunkedDecode(&dec, buf + raw_pos, fill - raw_pos, buf + body, &written, MAX_LINE,
                                   MAX_TRAILERS);
        body += written;
        if (used >= 0) raw_pos += (size_t)used;
        if (used >= 0 && !dec.done) fill = raw_pos = body;
    }
    bool ok = dec.done && body == expect->payload_len && memcmp(buf, expect->payload, body) == 0;
    /* The bytes that came in behind the body were never written to. */
    size_t behind = fill - raw_pos;
    ok = ok && behind == src - expect->consumed && memcmp(buf + raw_pos, raw + expect->consumed, behind) == 0;
    CHECK_MSG(ok, "%s: in place, %zu bytes a call", name, step);
}

/* ---- Accepted bodies ---- */

typedef struct ValidBody {
    const char *name;
    const char *raw;
    size_t len;
    const char *payload;
    size_t payload_len;
    size_t consumed; /* 0: all of raw */
    Limits limits;   /* all zero: DEFAULTS */
} ValidBody;

#define RAW(s) .raw = s, .len = sizeof(s) - 1
#define PAYLOAD(s) .payload = s, .payload_len = sizeof(s) - 1
#define TERMINATED(body) body "0\r\n\r\n"

static const ValidBody VALID[] = {
    {"one chunk", RAW("5\r\nhello\r\n0\r\n\r\n"), PAYLOAD("hello")},
    {"several chunks", RAW("5\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\n\r\n"), PAYLOAD("hello world")},
    {"empty body", RAW("0\r\n\r\n"), PAYLOAD("")},
    {"hex sizes in either case",
     RAW("a\r\n0123456789\r\nB\r\nabcdefghijk\r\n1f\r\nABCDEFGHIJKLMNOPQRSTUVWXYZ01234\r\n0\r\n\r\n"),
     PAYLOAD("0123456789abcdefghijkABCDEFGHIJKLMNOPQRSTUVWXYZ01234")},
    {"leading zeros, beyond 16 digits too",
     RAW("0005\r\nhello\r\n000000000000000000000001\r\n!\r\n0000\r\n\r\n"), PAYLOAD("hello!")},
    {"payload that looks like framing", RAW("4\r\n\r\n0\r\r\n1\r\n;\r\n0\r\n\r\n"), PAYLOAD("\r\n0\r;")},
    {"binary payload", RAW("4\r\n\0\xff\n\r\r\n0\r\n\r\n"), PAYLOAD("\0\xff\n\r")},
    {"extensions without values", RAW("5;a\r\nhello\r\n0;last;x\r\n\r\n"), PAYLOAD("hello")},
    {"extensions with token values", RAW("5;a=b;c=d\r\nhello\r\n0;e=!#$%&'*+-.^_`|~09AZaz\r\n\r\n"),
     PAYLOAD("hello")},
    {"extensions with quoted values",
     RAW("5;a=\"\";b=\"x y\\\"z\\\\ \\\t\t\xff\";c=\"=;,\"\r\nhello\r\n0\r\n\r\n"), PAYLOAD("hello")},
    {"BWS around ';' and '='", RAW("5 \t; a = b ;\tc\t=\t\"d\" ;e ; f\r\nhello\r\n0 ;g\r\n\r\n"),
     PAYLOAD("hello")},
    {"trailer fields are dropped",
     RAW("5\r\nhello\r\n0\r\nX-Checksum: abc\r\nx-empty:\r\nX-A: \t caf\xc3\xa9 \t\r\n\r\n"),
     PAYLOAD("hello")},
    {"bytes after the end are left", RAW("5\r\nhello\r\n0\r\n\r\nGET / HTTP/1.1\r\n\r\n"), PAYLOAD("hello"),
     .consumed = sizeof("5\r\nhello\r\n0\r\n\r\n") - 1},
    {"bytes after trailers are left", RAW("0\r\nA: b\r\n\r\n0\r\n\r\n"), PAYLOAD(""),
     .consumed = sizeof("0\r\nA: b\r\n\r\n") - 1},
    {"size line exactly max_line", RAW("5;abcdef\r\nhello\r\n0\r\n\r\n"), PAYLOAD("hello"),
     .limits = {8, MAX_TRAILERS}},
    {"trailer line exactly max_line", RAW("0\r\nA: 1234\r\n\r\n"), PAYLOAD(""), .limits = {7, MAX_TRAILERS}},
    {"trailers exactly max_trailers (lines with their CRLF)", RAW("0\r\nA: 1\r\nB: 2222\r\n\r\n"),
     PAYLOAD(""), .limits = {MAX_LINE, 15}},
};

static const Limits *limits_of(const Limits *l) { return l->max_line ? l : &DEFAULTS; }

static void test_valid_bodies_decode_whole(void) {
    for (size_t i = 0; i < sizeof VALID / sizeof VALID[0]; i++) {
        const ValidBody *c = &VALID[i];
        decode_cut(c->raw, c->len, NULL, 0, limits_of(&c->limits), &whole);
        size_t consumed = c->consumed ? c->consumed : c->len;
        CHECK_MSG(whole.status == 0 && whole.done, "%s: status %d, done %d", c->name, whole.status,
                  whole.done);
        CHECK_MSG(whole.consumed == consumed, "%s: consumed %zu, expected %zu", c->name, whole.consumed,
                  consumed);
        CHECK_MSG(whole.payload_len == c->payload_len &&
                      memcmp(whole.payload, c->payload, c->payload_len) == 0,
                  "%s: payload \"%.*s\"", c->name, (int)whole.payload_len, whole.payload);
    }
}

static void test_valid_bodies_decode_the_same_however_cut(void) {
    for (size_t i = 0; i < sizeof VALID / sizeof VALID[0]; i++) {
        const ValidBody *c = &VALID[i];
        check_any_cut(c->name, c->raw, c->len, limits_of(&c->limits));
    }
}

static void test_valid_bodies_decode_in_place(void) {
    for (size_t i = 0; i < sizeof VALID / sizeof VALID[0]; i++) {
        const ValidBody *c = &VALID[i];
        if (c->limits.max_line) continue; /* the server's limits only */
        decode_cut(c->raw, c->len, NULL, 0, &DEFAULTS, &whole);
        for (size_t step = 1; step <= c->len; step++) {
            check_in_place(c->name, c->raw, c->len, step, &whole);
        }
    }
}

/* ---- Rejected bodies ---- */

typedef struct InvalidBody {
    const char *name;
    const char *raw;
    size_t len;
    int status;
    Limits limits; /* all zero: DEFAULTS */
} InvalidBody;

static const InvalidBody INVALID[] = {
    /* Sizes */
    {"not hex", RAW("zz\r\nhello\r\n0\r\n\r\n"), 400},
    {"signed", RAW("-5\r\nhello\r\n0\r\n\r\n"), 400},
    {"plus sign", RAW("+5\r\nhello\r\n0\r\n\r\n"), 400},
    {"C-style prefix", RAW("0x5\r\nhello\r\n0\r\n\r\n"), 400},
    {"empty size", RAW("\r\nhello\r\n0\r\n\r\n"), 400},
    {"space before the size", RAW(" 5\r\nhello\r\n0\r\n\r\n"), 400},
    {"space after the size, no extension", RAW("5 \r\nhello\r\n0\r\n\r\n"), 400},
    {"17 significant hex digits", RAW("10000000000000005\r\nhello\r\n0\r\n\r\n"), 400},
    {"2^63", RAW("8000000000000000\r\nhello\r\n0\r\n\r\n"), 400},
    {"2^64 - 1", RAW("ffffffffffffffff\r\nhello\r\n0\r\n\r\n"), 400},
    {"empty last chunk line", RAW("5\r\nhello\r\n\r\n\r\n"), 400},
    /* Line endings around data */
    {"data longer than its size", RAW("5\r\nhelloXX\r\n0\r\n\r\n"), 400},
    {"no CRLF after data", RAW("5\r\nhello0\r\n\r\n"), 400},
    {"LF alone after data", RAW("5\r\nhello\n0\r\n\r\n"), 400},
    {"CR alone after data", RAW("5\r\nhello\r0\r\n\r\n"), 400},
    {"bare LF after a size", RAW("5\nhello\n0\n\n"), 400},
    {"bare CR after a size", RAW("5\rhello\r\n0\r\n\r\n"), 400},
    {"bare LF ending the body", RAW("5\r\nhello\r\n0\r\n\n"), 400},
    {"bare CR ending the body", RAW("5\r\nhello\r\n0\r\n\rX"), 400},
    /* Extensions */
    {"';' without a name", RAW("5;\r\nhello\r\n0\r\n\r\n"), 400},
    {"'=' without a name", RAW("5;=a\r\nhello\r\n0\r\n\r\n"), 400},
    {"'=' without a value", RAW("5;a=\r\nhello\r\n0\r\n\r\n"), 400},
    {"whitespace after a name, no '='", RAW("5;a \r\nhello\r\n0\r\n\r\n"), 400},
    {"whitespace after a value", RAW("5;a=b \r\nhello\r\n0\r\n\r\n"), 400},
    {"two tokens as a value", RAW("5;a=b c\r\nhello\r\n0\r\n\r\n"), 400},
    {"'=' twice", RAW("5;a=b=c\r\nhello\r\n0\r\n\r\n"), 400},
    {"'@' in a name", RAW("5;a@b\r\nhello\r\n0\r\n\r\n"), 400},
    {"text after a quoted value", RAW("5;a=\"b\"c\r\nhello\r\n0\r\n\r\n"), 400},
    {"unterminated quoted value", RAW("5;a=\"b\r\nhello\r\n0\r\n\r\n"), 400},
    {"control byte in a quoted value", RAW("5;a=\"\x01\"\r\nhello\r\n0\r\n\r\n"), 400},
    {"control byte escaped in a quoted value", RAW("5;a=\"\\\x01\"\r\nhello\r\n0\r\n\r\n"), 400},
    {"extension without ';'", RAW("5 a\r\nhello\r\n0\r\n\r\n"), 400},
    {"bare LF ending an extension", RAW("5;a=b\nhello\r\n0\r\n\r\n"), 400},
    /* Trailers */
    {"trailer without a colon", RAW("5\r\nhello\r\n0\r\nbad trailer\r\n\r\n"), 400},
    {"space before a trailer's colon", RAW("0\r\nX : a\r\n\r\n"), 400},
    {"empty trailer name", RAW("0\r\n: a\r\n\r\n"), 400},
    {"folded trailer", RAW("0\r\nX: a\r\n b\r\n\r\n"), 400},
    {"control byte in a trailer", RAW("0\r\nX: a\x01\r\n\r\n"), 400},
    {"DEL in a trailer", RAW("0\r\nX: a\x7f\r\n\r\n"), 400},
    {"bare LF ending a trailer", RAW("0\r\nX: a\n\r\n"), 400},
    {"bare CR ending a trailer", RAW("0\r\nX: a\rY: b\r\n\r\n"), 400},
    /* Limits */
    {"size line over max_line", RAW("5;abcdefg\r\nhello\r\n0\r\n\r\n"), 400, {8, MAX_TRAILERS}},
    {"zeros over max_line", RAW("000000000\r\n\r\n"), 400, {8, MAX_TRAILERS}},
    {"trailer line over max_line", RAW("0\r\nA: 12345\r\n\r\n"), 431, {7, MAX_TRAILERS}},
    {"trailers over max_trailers", RAW("0\r\nA: 1\r\nB: 22222\r\n\r\n"), 431, {MAX_LINE, 15}},
};

static void test_invalid_bodies_fail_with_their_status_however_cut(void) {
    for (size_t i = 0; i < sizeof INVALID / sizeof INVALID[0]; i++) {
        const InvalidBody *c = &INVALID[i];
        const Limits *lim = limits_of(&c->limits);
        decode_cut(c->raw, c->len, NULL, 0, lim, &whole);
        CHECK_MSG(whole.status == c->status, "%s: status %d, expected %d", c->name, whole.status, c->status);
        check_any_cut(c->name, c->raw, c->len, lim);
    }
}

/* ---- Sizes, stopping, aliasing ---- */

static void test_largest_chunk_size_is_accepted(void) {
    static const char raw[] = "7fffffffffffffff\r\nabc";
    decode_cut(raw, sizeof raw - 1, NULL, 0, &DEFAULTS, &whole);
    CHECK_EQ_INT(whole.status, 0);
    CHECK(!whole.done);
    CHECK_EQ_INT(whole.consumed, sizeof raw - 1);
    CHECK_EQ_INT(whole.payload_len, 3);
}

static void test_partial_input_is_all_consumed_and_its_payload_delivered(void) {
    static const char raw[] = "5;a=\"b\"\r\nhel";
    decode_cut(raw, sizeof raw - 1, NULL, 0, &DEFAULTS, &whole);
    CHECK_EQ_INT(whole.status, 0);
    CHECK(!whole.done && !whole.left_input);
    CHECK_EQ_INT(whole.consumed, sizeof raw - 1);
    CHECK(whole.payload_len == 3 && memcmp(whole.payload, "hel", 3) == 0);
}

static void test_a_finished_decoder_takes_nothing_more(void) {
    xHttp1Chunked dec;
    memset(&dec, 0, sizeof dec);
    char out[16];
    size_t written = 99;
    CHECK_EQ_INT(xHttp1ChunkedDecode(&dec, "0\r\n\r\nxyz", 8, out, &written, MAX_LINE, MAX_TRAILERS), 5);
    CHECK(dec.done);
    CHECK_EQ_INT(written, 0);
    written = 99;
    CHECK_EQ_INT(xHttp1ChunkedDecode(&dec, "1\r\nx\r\n", 6, out, &written, MAX_LINE, MAX_TRAILERS), 0);
    CHECK_EQ_INT(written, 0);
    CHECK(dec.done);
}

static void test_a_failed_decoder_keeps_failing(void) {
    xHttp1Chunked dec;
    memset(&dec, 0, sizeof dec);
    char out[16];
    size_t written;
    CHECK_EQ_INT(xHttp1ChunkedDecode(&dec, "0\r\nA: 12345\r\n", 13, out, &written, 7, MAX_TRAILERS),
                 XHTTP1_ERROR);
    CHECK_EQ_INT(dec.error_status, 431);
    CHECK_EQ_INT(xHttp1ChunkedDecode(&dec, "\r\n", 2, out, &written, 7, MAX_TRAILERS), XHTTP1_ERROR);
    CHECK_EQ_INT(dec.error_status, 431);
    CHECK(!dec.done);
}

static void test_payload_may_be_written_before_the_input(void) {
    static const char raw[] = "3\r\nabc\r\n4;x=y\r\ndefg\r\n0\r\n\r\nNEXT";
    char buf[64];
    memset(buf, '.', 8);
    memcpy(buf + 8, raw, sizeof raw - 1);
    xHttp1Chunked dec;
    memset(&dec, 0, sizeof dec);
    size_t written = 0;
    ssize_t used = xHttp1ChunkedDecode(&dec, buf + 8, sizeof raw - 1, buf, &written, MAX_LINE, MAX_TRAILERS);
    CHECK_EQ_INT(used, sizeof raw - 1 - 4);
    CHECK(dec.done);
    CHECK(written == 7 && memcmp(buf, "abcdefg", 7) == 0);
    CHECK(memcmp(buf + 8 + used, "NEXT", 4) == 0);
}

/* A 200 KB body in random chunks, some with extensions, then trailers,
 * decoded in place from pieces of random size. */
static void test_large_random_body_decodes_in_place(void) {
    static char raw[CAP], payload[CAP / 2];
    uint64_t rng = 0x9E3779B97F4A7C15ULL;
    size_t len = 0, total = 0;
    for (size_t i = 0; i < sizeof payload; i++) payload[i] = (char)(i * 131 + (i >> 7));
    while (total < sizeof payload) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        size_t n = rng % 9000;
        if (n > sizeof payload - total) n = sizeof payload - total;
        if (n == 0) continue;
        len += (size_t)sprintf(raw + len, rng & 0x10000 ? "%zX;ext=\"v\"\r\n" : "%zx\r\n", n);
        memcpy(raw + len, payload + total, n);
        len += n;
        total += n;
        raw[len++] = '\r';
        raw[len++] = '\n';
    }
    len += (size_t)sprintf(raw + len, "0\r\nDigest: x\r\n\r\nGET /next HTTP/1.1\r\n");
    decode_cut(raw, len, NULL, 0, &DEFAULTS, &whole);
    CHECK(whole.done && whole.payload_len == sizeof payload &&
          memcmp(whole.payload, payload, sizeof payload) == 0);
    for (size_t step = 1; step < 20000; step = step * 3 + 1) {
        check_in_place("large body", raw, len, step, &whole);
    }
}

int main(void) {
    guard_end = guard_page_map(CAP);
    RUN(test_valid_bodies_decode_whole);
    RUN(test_valid_bodies_decode_the_same_however_cut);
    RUN(test_valid_bodies_decode_in_place);
    RUN(test_invalid_bodies_fail_with_their_status_however_cut);
    RUN(test_largest_chunk_size_is_accepted);
    RUN(test_partial_input_is_all_consumed_and_its_payload_delivered);
    RUN(test_a_finished_decoder_takes_nothing_more);
    RUN(test_a_failed_decoder_keeps_failing);
    RUN(test_payload_may_be_written_before_the_input);
    RUN(test_large_random_body_decodes_in_place);
    return CHECK_SUMMARY();
}
