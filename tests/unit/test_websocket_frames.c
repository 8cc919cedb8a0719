/* test_websocket_frames.c — the WebSocket frame reader (xhttp/websocket/
 * frame.h), its UTF-8 validator, base64, and permessage-deflate's
 * negotiation: frames split at every byte, every rule a server must enforce
 * with the close code it leads to, and inputs placed against an unreadable
 * page so an over-read crashes. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "guard_page.h"
#include "xbase/text/base64.h"
#include "xhttp/websocket/deflate.h"
#include "xhttp/websocket/frame.h"
#include "xhttp/websocket/utf8.h"

static const uint8_t MASK[4] = {0x37, 0xfa, 0x21, 0x3d};

/* A masked client frame of opcode with payload p[0, n) into out; returns its length. */
static size_t client_frame(uint8_t *out, unsigned b0, const void *p, size_t n) {
    size_t h = xWsWriteHeader(out, b0 & 0x0F, b0 & 0x80, b0 & 0x40, n);
    out[0] = (uint8_t)b0;
    out[1] |= 0x80;
    memcpy(out + h, MASK, 4);
    for (size_t i = 0; i < n; i++) out[h + 4 + i] = ((const uint8_t *)p)[i] ^ MASK[i & 3];
    return h + 4 + n;
}

typedef struct Result {
    xWsEventType type;
    uint16_t code;
    char data[70000];
    size_t len;
    int events;
} Result;

/* Feeds in[0, n) in pieces of at most step bytes, as a connection would:
 * unconsumed bytes stay and the next piece is appended. Stops at the first
 * MESSAGE, control event or FAIL. */
static void feed(const uint8_t *in, size_t n, size_t step, size_t max, Result *r) {
    xWsReader reader = {.max_message = max};
    char *buf = malloc(n + 1);
    size_t have = 0, given = 0;
    memset(r, 0, sizeof *r);
    r->type = XWS_EV_NEED_MORE;
    while (given < n || have > 0) {
        size_t piece = n - given < step ? n - given : step;
        memcpy(buf + have, in + given, piece);
        have += piece;
        given += piece;
        xWsEvent ev;
        size_t used = xWsReaderNext(&reader, buf, have, &ev);
        CHECK(used <= have);
        memmove(buf, buf + used, have - used);
        have -= used;
        if (ev.type != XWS_EV_NEED_MORE) {
            r->type = ev.type;
            r->code = ev.code;
            r->len = ev.len < sizeof r->data ? ev.len : sizeof r->data;
            if (ev.type != XWS_EV_FAIL) memcpy(r->data, ev.data, r->len);
            break;
        }
        if (used == 0 && given == n) break;
    }
    free(buf);
    xWsReaderFree(&reader);
}

static void test_messages_arrive_whole_however_the_bytes_are_split(void) {
    static uint8_t in[70100], payload[65600];
    for (size_t i = 0; i < sizeof payload; i++) payload[i] = (uint8_t)('a' + i % 26);
    const size_t sizes[] = {0, 5, 125, 126, 65535, 65600};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = client_frame(in, 0x82, payload, sizes[s]);
        const size_t steps[] = {1, 7, 4096, n};
        for (size_t k = 0; k < 4; k++) {
            Result r;
            feed(in, n, steps[k], 1 << 20, &r);
            CHECK_EQ_INT(r.type, XWS_EV_MESSAGE);
            CHECK_EQ_INT(r.len, sizes[s]);
            CHECK(memcmp(r.data, payload, sizes[s]) == 0);
        }
    }
}

static void test_fragments_with_a_ping_between_come_out_as_ping_then_message(void) {
    uint8_t in[256];
    size_t n = client_frame(in, 0x01, "Hel", 3);
    n += client_frame(in + n, 0x89, "p", 1);
    n += client_frame(in + n, 0x80, "lo", 2);
    xWsReader reader = {.max_message = 100};
    xWsEvent ev;
    size_t at = 0;
    at += xWsReaderNext(&reader, (char *)in, n, &ev);
    CHECK_EQ_INT(ev.type, XWS_EV_NEED_MORE);
    at += xWsReaderNext(&reader, (char *)in + at, n - at, &ev);
    CHECK_EQ_INT(ev.type, XWS_EV_PING);
    CHECK(ev.len == 1 && ev.data[0] == 'p');
    at += xWsReaderNext(&reader, (char *)in + at, n - at, &ev);
    CHECK_EQ_INT(ev.type, XWS_EV_MESSAGE);
    CHECK(ev.len == 5 && memcmp(ev.data, "Hello", 5) == 0 && !ev.binary);
    CHECK_EQ_INT(at, n);
    xWsReaderFree(&reader);
}

static void check_fails(const uint8_t *in, size_t n, size_t max, uint16_t code) {
    Result r;
    feed(in, n, n, max, &r);
    CHECK_MSG(r.type == XWS_EV_FAIL && r.code == code, "type %d code %u, want FAIL %u", r.type, r.code, code);
}

static void test_protocol_errors_fail_with_their_close_codes(void) {
    uint8_t in[512];
    size_t n = client_frame(in, 0x81, "hi", 2);
    in[1] &= 0x7F; /* unmasked */
    check_fails(in, n, 100, 1002);
    const unsigned bad_b0[] = {0xC1, 0xA1, 0x91, 0x83, 0x87, 0x8B, 0x8F, 0x80, 0x09, 0xC9};
    for (size_t i = 0; i < sizeof bad_b0 / sizeof bad_b0[0]; i++)
        check_fails(in, client_frame(in, bad_b0[i], "x", 1), 100, 1002);
    uint8_t big[200] = {0};
    check_fails(in, client_frame(in, 0x89, big, 126), 100, 1002);      /* control over 125 */
    check_fails(in, client_frame(in, 0x82, big, 101), 100, 1009);      /* over the limit */
    check_fails(in, client_frame(in, 0x88, "\x03", 1), 100, 1002);     /* 1-byte close */
    check_fails(in, client_frame(in, 0x88, "\x03\xed", 2), 100, 1002); /* code 1005 */
    check_fails(in, client_frame(in, 0x88, "\x03\xe8\xff", 3), 100, 1007);
    check_fails(in, client_frame(in, 0x81, "\xce", 1), 100, 1007); /* cut character */
    n = client_frame(in, 0x01, "ok", 2);
    n += client_frame(in + n, 0x82, "x", 1); /* a new message inside one */
    check_fails(in, n, 100, 1002);
    const uint8_t huge[] = {0x82, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4};
    check_fails(huge, sizeof huge, 100, 1002);
    const uint8_t large[] = {0x82, 0xFF, 0x40, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4};
    check_fails(large, sizeof large, 100, 1009);
}

static void test_bad_utf8_is_caught_in_the_first_fragment(void) {
    uint8_t in[64];
    size_t n = client_frame(in, 0x01, "ok\xed\xa0\x80", 5); /* a surrogate */
    xWsReader reader = {.max_message = 100};
    xWsEvent ev;
    xWsReaderNext(&reader, (char *)in, n, &ev);
    CHECK_EQ_INT(ev.type, XWS_EV_FAIL);
    CHECK_EQ_INT(ev.code, 1007);
    xWsReaderFree(&reader);
}

static void test_close_frames_carry_code_and_reason(void) {
    uint8_t in[64];
    Result r;
    feed(in,
         client_frame(in, 0x88,
                      "\x0f\xa0"
                      "bye",
                      5),
         3, 100, &r);
    CHECK_EQ_INT(r.type, XWS_EV_CLOSE);
    CHECK_EQ_INT(r.code, 4000);
    CHECK(r.len == 5 && memcmp(r.data + 2, "bye", 3) == 0);
    feed(in, client_frame(in, 0x88, "", 0), 1, 100, &r);
    CHECK_EQ_INT(r.code, 1005);
}

static bool utf8_pieces(const char *s, size_t cut) {
    xUtf8 st = {0, 0, 0};
    size_t n = strlen(s);
    return xUtf8Feed(&st, (const uint8_t *)s, cut) && xUtf8Feed(&st, (const uint8_t *)s + cut, n - cut) &&
           xUtf8Complete(&st);
}

static void test_utf8_validation(void) {
    const char *good[] = {"",
                          "plain ascii longer than eight bytes",
                          "\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5",
                          "\xf0\x90\x8d\x88",
                          "\xef\xbf\xbf",
                          "\xf4\x8f\xbf\xbf",
                          "\xed\x9f\xbf",
                          "four\xce\xba"};
    const char *bad[] = {"\x80",         "\xc0\xaf",         "\xc1\xbf",         "\xe0\x80\xaf",
                         "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xff",
                         "\xe2\x82",     "abc\xf0\x9f\x98",  "four\x80"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        for (size_t cut = 0; cut <= strlen(good[i]); cut++)
            CHECK_MSG(utf8_pieces(good[i], cut), "good %zu", i);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        for (size_t cut = 0; cut <= strlen(bad[i]); cut++) CHECK_MSG(!utf8_pieces(bad[i], cut), "bad %zu", i);
    /* At a page's end: a cut character must not be read past. */
    char *end = guard_page_map(3);
    memcpy(end - 2, "\xe2\x82", 2);
    CHECK(!xUtf8Valid(end - 2, 2));
}

static void test_base64_round_trips_and_refuses_non_canonical_text(void) {
    char out[64];
    CHECK_EQ_INT(xBase64Encode("", 0, out), 0);
    CHECK(xBase64Encode("f", 1, out) == 4 && memcmp(out, "Zg==", 4) == 0);
    CHECK(xBase64Encode("fo", 2, out) == 4 && memcmp(out, "Zm8=", 4) == 0);
    CHECK(xBase64Encode("foobar", 6, out) == 8 && memcmp(out, "Zm9vYmFy", 8) == 0);
    uint8_t raw[32];
    CHECK_EQ_INT(xBase64Decode("dGhlIHNhbXBsZSBub25jZQ==", 24, raw, sizeof raw), 16);
    CHECK(memcmp(raw, "the sample nonce", 16) == 0);
    CHECK_EQ_INT(xBase64Decode("Zm9=", 4, raw, sizeof raw), -1); /* stray bits */
    CHECK_EQ_INT(xBase64Decode("Zg=a", 4, raw, sizeof raw), -1);
    CHECK_EQ_INT(xBase64Decode("Zg", 2, raw, sizeof raw), -1);
    CHECK_EQ_INT(xBase64Decode("Zm9vYmFy", 8, raw, 5), -1);
}

static void test_deflate_negotiation(void) {
    char out[160];
    xWsDeflateParams p;
    CHECK(xWsDeflateNegotiate(xStrFromC("permessage-deflate"), 15, &p, out, sizeof out));
    CHECK(strcmp(out, "permessage-deflate") == 0 && p.server_window_bits == 15 && p.client_window_bits == 15);
    CHECK(xWsDeflateNegotiate(
        xStrFromC("permessage-deflate; client_max_window_bits; server_max_window_bits=10"), 15, &p, out,
        sizeof out));
    CHECK(strcmp(out, "permessage-deflate; server_max_window_bits=10; client_max_window_bits=15") == 0);
    CHECK(xWsDeflateNegotiate(xStrFromC("x-foo, permessage-deflate; server_no_context_takeover; "
                                        "client_no_context_takeover; client_max_window_bits=9"),
                              12, &p, out, sizeof out));
    CHECK(p.server_no_takeover && p.client_no_takeover && p.client_window_bits == 9 &&
          p.server_window_bits == 12);
    /* A window the server cannot keep to, unknown or repeated parameters: declined. */
    CHECK(!xWsDeflateNegotiate(xStrFromC("permessage-deflate; server_max_window_bits=8"), 15, &p, out, 160));
    CHECK(!xWsDeflateNegotiate(xStrFromC("permessage-deflate; foo"), 15, &p, out, sizeof out));
    CHECK(!xWsDeflateNegotiate(xStrFromC("permessage-deflate; client_max_window_bits=16"), 15, &p, out, 160));
    CHECK(!xWsDeflateNegotiate(xStrFromC("permessage-deflate; server_no_context_takeover; "
                                         "server_no_context_takeover"),
                               15, &p, out, sizeof out));
    CHECK(
        !xWsDeflateNegotiate(xStrFromC("permessage-deflate"), 12, &p, out, sizeof out)); /* client uses 15 */
}

static void test_deflate_round_trip_and_limit(void) {
    xWsDeflateParams p = {15, 15, false, false};
    xWsDeflate *d = xWsDeflateCreate(&p, 1, 8);
    static char text[50000];
    memset(text, 'q', sizeof text);
    const char *z;
    size_t zlen;
    char *out;
    size_t len;
    for (int round = 0; round < 3; round++) { /* the context carries over */
        CHECK(xWsDeflateCompress(d, text, sizeof text, &z, &zlen));
        CHECK(zlen < 1000);
        char *copy = malloc(zlen);
        memcpy(copy, z, zlen);
        CHECK_EQ_INT(xWsDeflateInflate(d, copy, zlen, sizeof text, &out, &len), 0);
        CHECK(len == sizeof text && memcmp(out, text, len) == 0);
        free(copy);
    }
    xWsDeflateDestroy(d);
    d = xWsDeflateCreate(&p, 1, 8);
    CHECK(xWsDeflateCompress(d, text, sizeof text, &z, &zlen));
    char *copy = malloc(zlen);
    memcpy(copy, z, zlen);
    xWsDeflate *other = xWsDeflateCreate(&p, 1, 8);
    CHECK_EQ_INT(xWsDeflateInflate(other, copy, zlen, sizeof text - 1, &out, &len), 1009);
    CHECK_EQ_INT(xWsDeflateInflate(d, "\xff\xff\xff", 3, 100, &out, &len), 1007);
    free(copy);
    xWsDeflateDestroy(other);
    xWsDeflateDestroy(d);
}

int main(void) {
    RUN(test_messages_arrive_whole_however_the_bytes_are_split);
    RUN(test_fragments_with_a_ping_between_come_out_as_ping_then_message);
    RUN(test_protocol_errors_fail_with_their_close_codes);
    RUN(test_bad_utf8_is_caught_in_the_first_fragment);
    RUN(test_close_frames_carry_code_and_reason);
    RUN(test_utf8_validation);
    RUN(test_base64_round_trips_and_refuses_non_canonical_text);
    RUN(test_deflate_negotiation);
    RUN(test_deflate_round_trip_and_limit);
    return CHECK_SUMMARY();
}
