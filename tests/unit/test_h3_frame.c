/* test_h3_frame.c — HTTP/3 framing (RFC 9114 §7): RFC 9000's variable-length
 * integer examples, frames read whole and byte by byte, DATA in pieces, unknown
 * and reserved types skipped, the frames each stream kind may carry with the
 * error each wrong one earns, size limits, and SETTINGS both ways. */
#include <stdlib.h>

#include "check.h"
#include "xhttp/http3/frame.h"

/* RFC 9000 Appendix A.1's examples, transcribed from the RFC, and the shortest forms. */
static void varints_read_and_write(void) {
    static const struct {
        const char *hex;
        uint64_t value;
    } examples[] = {
        {"c2197c5eff14e88c", UINT64_C(151288809941952652)},
        {"9d7f3e7d", 494878333},
        {"7bbd", 15293},
        {"25", 37},
        {"4025", 37},
    };
    for (size_t i = 0; i < sizeof examples / sizeof *examples; i++) {
        uint8_t in[8];
        size_t n = check_unhex(examples[i].hex, in);
        uint64_t v = 0;
        CHECK_EQ_INT(xH3VarintRead(in, n, &v), n);
        CHECK_MSG(v == examples[i].value, "example %zu", i);
        CHECK_EQ_INT(xH3VarintRead(in, n - 1, &v), 0); /* one byte short */
    }
    static const uint64_t edges[] = {0, 63, 64, 16383, 16384, (1u << 30) - 1, 1u << 30, XH3_VARINT_MAX};
    static const size_t sizes[] = {1, 1, 2, 2, 4, 4, 8, 8};
    for (size_t i = 0; i < sizeof edges / sizeof *edges; i++) {
        uint8_t out[8];
        uint64_t back;
        CHECK_EQ_INT(xH3VarintWrite(out, edges[i]) - out, sizes[i]);
        CHECK_EQ_INT(xH3VarintSize(edges[i]), sizes[i]);
        CHECK_EQ_INT(xH3VarintRead(out, sizes[i], &back), sizes[i]);
        CHECK(back == edges[i]);
    }
}

/* A request stream: HEADERS, DATA in two pieces, a reserved type, trailers. */
static const char request_stream[] = "0103000000"     /* HEADERS, 3 bytes */
                                     "000568656c6c6f" /* DATA "hello" */
                                     "21020000"       /* reserved type 0x21, 2 bytes: skipped */
                                     "4f4b00"         /* unknown type 0xf4b, empty: skipped */
                                     "0000"           /* empty DATA */
                                     "01020000";      /* HEADERS (trailers) */

static void request_frames_whole_and_byte_by_byte(void) {
    uint8_t in[64];
    size_t n = check_unhex(request_stream, in);
    for (int split = 0; split < 2; split++) {
        xH3FrameReader r;
        xH3FrameReaderInit(&r, XH3_STREAM_REQUEST, 1024);
        size_t at = 0, avail = split ? 0 : n, headers = 0, empty_data = 0;
        char body[16];
        size_t body_len = 0;
        while (at < n) {
            if (split && avail < n) avail++;
            size_t used;
            xH3Frame f;
            xH3ReadStatus s = xH3FrameRead(&r, in + at, avail - at, &used, &f);
            CHECK(used <= avail - at);
            at += used;
            if (s == XH3_READ_FRAME) {
                CHECK_EQ_INT(f.type, XH3_FRAME_HEADERS);
                CHECK_EQ_INT(f.payload.len, headers ? 2 : 3);
                headers++;
            } else if (s == XH3_READ_DATA) {
                memcpy(body + body_len, f.payload.data, f.payload.len);
                body_len += f.payload.len;
                if (f.payload.len == 0 && f.end_of_frame) empty_data++;
            } else {
                CHECK_EQ_INT(s, XH3_READ_MORE);
                if (!split) break;
            }
        }
        CHECK_EQ_INT(at, n);
        CHECK_EQ_INT(headers, 2);
        CHECK_EQ_INT(body_len, 5);
        CHECK(memcmp(body, "hello", 5) == 0);
        CHECK(empty_data >= 1);
    }
}

static xH3ReadStatus read_all(xH3StreamKind kind, size_t max_payload, const char *hex, xH3Frame *f) {
    uint8_t in[256];
    size_t n = check_unhex(hex, in), at = 0, used;
    xH3FrameReader r;
    xH3FrameReaderInit(&r, kind, max_payload);
    xH3ReadStatus s;
    do {
        s = xH3FrameRead(&r, in + at, n - at, &used, f);
        at += used;
    } while ((s == XH3_READ_FRAME || s == XH3_READ_DATA) && at < n);
    return s;
}

static void frames_each_stream_may_not_carry(void) {
    static const struct {
        xH3StreamKind kind;
        const char *hex;
        xH3Error error;
    } cases[] = {
        {XH3_STREAM_CONTROL, "0000", XH3_MISSING_SETTINGS},       /* DATA first */
        {XH3_STREAM_CONTROL, "210100", XH3_MISSING_SETTINGS},     /* a reserved type first */
        {XH3_STREAM_CONTROL, "04000400", XH3_FRAME_UNEXPECTED},   /* SETTINGS twice */
        {XH3_STREAM_CONTROL, "04000100", XH3_FRAME_UNEXPECTED},   /* HEADERS */
        {XH3_STREAM_CONTROL, "04000000", XH3_FRAME_UNEXPECTED},   /* DATA */
        {XH3_STREAM_CONTROL, "0400050100", XH3_FRAME_UNEXPECTED}, /* PUSH_PROMISE */
        {XH3_STREAM_CONTROL, "04000600", XH3_FRAME_UNEXPECTED},   /* HTTP/2's PING */
        {XH3_STREAM_CONTROL, "0400070100", XH3_NO_ERROR},         /* GOAWAY 0 */
        {XH3_STREAM_CONTROL, "040007020000", XH3_FRAME_ERROR},    /* GOAWAY, a byte too many */
        {XH3_STREAM_CONTROL, "04000700", XH3_FRAME_ERROR},        /* GOAWAY, empty */
        {XH3_STREAM_CONTROL, "0400030140", XH3_FRAME_ERROR},      /* CANCEL_PUSH, cut varint */
        {XH3_STREAM_CONTROL, "04000d0105", XH3_NO_ERROR},         /* MAX_PUSH_ID 5 */
        {XH3_STREAM_REQUEST, "0400", XH3_FRAME_UNEXPECTED},       /* SETTINGS */
        {XH3_STREAM_REQUEST, "070100", XH3_FRAME_UNEXPECTED},     /* GOAWAY */
        {XH3_STREAM_REQUEST, "030100", XH3_FRAME_UNEXPECTED},     /* CANCEL_PUSH */
        {XH3_STREAM_REQUEST, "0d0100", XH3_FRAME_UNEXPECTED},     /* MAX_PUSH_ID */
        {XH3_STREAM_REQUEST, "050100", XH3_FRAME_UNEXPECTED},     /* PUSH_PROMISE from a client */
        {XH3_STREAM_REQUEST, "0200", XH3_FRAME_UNEXPECTED},       /* HTTP/2's PRIORITY */
        {XH3_STREAM_REQUEST, "0800", XH3_FRAME_UNEXPECTED},       /* WINDOW_UPDATE */
        {XH3_STREAM_REQUEST, "0900", XH3_FRAME_UNEXPECTED},       /* CONTINUATION */
        {XH3_STREAM_REQUEST, "014401", XH3_EXCESSIVE_LOAD},       /* HEADERS over the limit */
        {XH3_STREAM_REQUEST, "0080ffffff", XH3_NO_ERROR},         /* a huge DATA streams */
        {XH3_STREAM_REQUEST, "21bfffffffffffffff", XH3_NO_ERROR}, /* a huge unknown skips */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        xH3Frame f;
        xH3ReadStatus s = read_all(cases[i].kind, 256, cases[i].hex, &f);
        if (cases[i].error == XH3_NO_ERROR)
            CHECK_MSG(s != XH3_READ_ERROR, "case %zu (%s)", i, cases[i].hex);
        else
            CHECK_MSG(s == XH3_READ_ERROR && f.error == cases[i].error, "case %zu (%s): %d, %#x", i,
                      cases[i].hex, (int)s, (unsigned)f.error);
    }
    /* A failed reader stays failed. */
    xH3FrameReader r;
    xH3FrameReaderInit(&r, XH3_STREAM_REQUEST, 16);
    uint8_t bad[] = {0x04, 0x00, 0x01, 0x00};
    size_t used;
    xH3Frame f;
    CHECK_EQ_INT(xH3FrameRead(&r, bad, sizeof bad, &used, &f), XH3_READ_ERROR);
    CHECK_EQ_INT(xH3FrameRead(&r, bad + 2, 2, &used, &f), XH3_READ_ERROR);
    CHECK_EQ_INT(f.error, XH3_FRAME_UNEXPECTED);
}

static void ids_read_back(void) {
    uint8_t out[32], *p = xH3FrameWriteId(out, XH3_FRAME_GOAWAY, 4000);
    xH3FrameReader r;
    xH3FrameReaderInit(&r, XH3_STREAM_CONTROL, 64);
    uint8_t settings[8],
        *q = xH3SettingsWrite(settings, &(xH3Settings){.max_field_section_size = XH3_VARINT_MAX});
    CHECK_EQ_INT(q - settings, 2); /* all defaults: an empty SETTINGS */
    size_t used;
    xH3Frame f;
    CHECK_EQ_INT(xH3FrameRead(&r, settings, 2, &used, &f), XH3_READ_FRAME);
    CHECK_EQ_INT(xH3FrameRead(&r, out, (size_t)(p - out), &used, &f), XH3_READ_FRAME);
    CHECK_EQ_INT(f.type, XH3_FRAME_GOAWAY);
    CHECK_EQ_INT(f.id, 4000);
    CHECK_EQ_INT(used, p - out);
}

static void settings_both_ways(void) {
    xH3Settings s, back;
    xH3SettingsDefaults(&s);
    CHECK(s.max_field_section_size == XH3_VARINT_MAX && s.qpack_max_table_capacity == 0);
    s = (xH3Settings){4096, 16384, 100, true, true};
    uint8_t out[XH3_SETTINGS_FRAME_MAX], *p = xH3SettingsWrite(out, &s);
    uint64_t type, length;
    size_t a = xH3VarintRead(out, (size_t)(p - out), &type);
    size_t b = xH3VarintRead(out + a, (size_t)(p - out) - a, &length);
    CHECK_EQ_INT(type, XH3_FRAME_SETTINGS);
    CHECK_EQ_INT(a + b + length, p - out);
    CHECK_EQ_INT(xH3SettingsParse((xStr){(const char *)out + a + b, length}, &back), XH3_NO_ERROR);
    CHECK(back.qpack_max_table_capacity == 4096 && back.max_field_section_size == 16384 &&
          back.qpack_blocked_streams == 100 && back.enable_connect_protocol && back.h3_datagram);

    static const struct {
        const char *hex;
        xH3Error error;
    } cases[] = {
        {"", XH3_NO_ERROR},
        {"0140640701", XH3_NO_ERROR}, /* capacity 100, blocked 1 */
        {"2100", XH3_NO_ERROR},       /* a reserved identifier is ignored */
        {"2101", XH3_NO_ERROR},
        {"4a0a0b4a0a0c", XH3_NO_ERROR},   /* unknown 0xa0a twice: ignored */
        {"01000100", XH3_SETTINGS_ERROR}, /* duplicate */
        {"0200", XH3_SETTINGS_ERROR},     /* HTTP/2's ENABLE_PUSH */
        {"0301", XH3_SETTINGS_ERROR},     /* MAX_CONCURRENT_STREAMS */
        {"0401", XH3_SETTINGS_ERROR},     /* INITIAL_WINDOW_SIZE */
        {"054000", XH3_SETTINGS_ERROR},   /* MAX_FRAME_SIZE */
        {"0802", XH3_SETTINGS_ERROR},     /* ENABLE_CONNECT_PROTOCOL 2 */
        {"3302", XH3_SETTINGS_ERROR},     /* H3_DATAGRAM 2 */
        {"01", XH3_FRAME_ERROR},          /* an identifier without its value */
        {"0140", XH3_FRAME_ERROR},        /* a value cut short */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint8_t in[32];
        size_t n = check_unhex(cases[i].hex, in);
        CHECK_MSG(xH3SettingsParse((xStr){(const char *)in, n}, &back) == cases[i].error, "case %zu (%s)", i,
                  cases[i].hex);
    }
    uint8_t in[8];
    size_t n = check_unhex("0140640701", in);
    CHECK_EQ_INT(xH3SettingsParse((xStr){(const char *)in, n}, &back), XH3_NO_ERROR);
    CHECK(back.qpack_max_table_capacity == 100 && back.qpack_blocked_streams == 1);
}

int main(void) {
    RUN(varints_read_and_write);
    RUN(request_frames_whole_and_byte_by_byte);
    RUN(frames_each_stream_may_not_carry);
    RUN(ids_read_back);
    RUN(settings_both_ways);
    return CHECK_SUMMARY();
}
