/* test_qpack.c — QPACK (RFC 9204): Appendix B's examples byte for byte, every
 * Huffman code through literals, the dynamic table's capacity and eviction,
 * blocked streams, the decoder stream, malformed input with its named error,
 * the static-only encoder, and HTTP/2's field checks applied to QPACK fields. */
#include <stdlib.h>

#include "check.h"
#include "xhttp/http2/request.h"
#include "xhttp/http3/qpack.h"

static xHpackField fields[64];
static char scratch[4096];

static xQpackSection section(void) {
    return (xQpackSection){fields, 64, 0, scratch, sizeof scratch, 65536, 0, 0, 0};
}

static xQpackResult read_encoder(xQpackDecoder *d, const char *hex) {
    uint8_t in[512];
    size_t n = check_unhex(hex, in), used;
    xQpackResult r = xQpackDecoderReadEncoder(d, in, n, &used);
    if (r == XQPACK_OK) CHECK_EQ_INT(used, n);
    return r;
}

/* The section's bytes stay put until the next call: plain literals are views into them. */
static xQpackResult decode(xQpackDecoder *d, uint64_t stream, const char *hex, xQpackSection *s) {
    static uint8_t in[512];
    size_t n = check_unhex(hex, in);
    return xQpackDecodeSection(d, stream, in, n, s);
}

static bool field_is(const xQpackSection *s, size_t i, const char *name, const char *value) {
    return i < s->count && xStrEqualsC(s->fields[i].name, name) && xStrEqualsC(s->fields[i].value, value);
}

static bool entry_is(const xQpackDecoder *d, uint64_t abs, const char *name, const char *value) {
    char buf[256];
    xStr n, v;
    return xQpackDecoderEntry(d, abs, buf, sizeof buf, &n, &v) && xStrEqualsC(n, name) &&
           xStrEqualsC(v, value);
}

static bool output_is(xQpackDecoder *d, const char *hex) {
    uint8_t want[64];
    size_t n = check_unhex(hex, want);
    xStr out = xQpackDecoderTakeOutput(d);
    return out.len == n && (n == 0 || memcmp(out.data, want, n) == 0);
}

/* RFC 9204 Appendix B, transcribed from the RFC's text: the decoder's side of each
 * exchange, with the table and the decoder stream the RFC shows after it. */
static void appendix_b_examples(void) {
    xQpackDecoder d;
    CHECK(xQpackDecoderInit(&d, 220, 16) == 0);
    xQpackSection s = section();

    /* B.1 Literal Field Line with Name Reference */
    CHECK_EQ_INT(decode(&d, 0, "0000510b2f696e6465782e68746d6c", &s), XQPACK_OK);
    CHECK_EQ_INT(s.count, 1);
    CHECK(field_is(&s, 0, ":path", "/index.html"));
    CHECK_EQ_INT(d.size, 0);
    CHECK(output_is(&d, ""));

    /* B.2 Dynamic Table */
    CHECK_EQ_INT(read_encoder(&d, "3fbd01c00f7777772e6578616d706c652e636f6dc10c2f73616d706c652f70617468"),
                 XQPACK_OK);
    CHECK_EQ_INT(d.capacity, 220);
    CHECK(entry_is(&d, 0, ":authority", "www.example.com"));
    CHECK(entry_is(&d, 1, ":path", "/sample/path"));
    CHECK_EQ_INT(d.size, 106);
    CHECK_EQ_INT(decode(&d, 4, "03811011", &s), XQPACK_OK);
    CHECK_EQ_INT(s.required_insert_count, 2);
    CHECK_EQ_INT(s.count, 2);
    CHECK(field_is(&s, 0, ":authority", "www.example.com"));
    CHECK(field_is(&s, 1, ":path", "/sample/path"));
    CHECK(s.fields[0].token == XHPACK_TOKEN_AUTHORITY && s.fields[1].token == XHPACK_TOKEN_PATH);
    CHECK(output_is(&d, "84")); /* Section Acknowledgment (stream=4) */

    /* B.3 Speculative Insert */
    CHECK_EQ_INT(read_encoder(&d, "4a637573746f6d2d6b65790c637573746f6d2d76616c7565"), XQPACK_OK);
    CHECK(entry_is(&d, 2, "custom-key", "custom-value"));
    CHECK_EQ_INT(d.size, 160);
    CHECK(output_is(&d, "01")); /* Insert Count Increment (1) */

    /* B.4 Duplicate Instruction, Stream Cancellation: the section arrives before the
     * Duplicate it needs, so it blocks; the decoder cancels the stream. */
    CHECK_EQ_INT(decode(&d, 8, "050080c181", &s), XQPACK_BLOCKED);
    CHECK_EQ_INT(s.required_insert_count, 4);
    CHECK_EQ_INT(d.blocked_count, 1);
    CHECK_EQ_INT(xQpackDecoderCancelStream(&d, 8), XQPACK_OK);
    CHECK_EQ_INT(d.blocked_count, 0);
    CHECK(output_is(&d, "48")); /* Stream Cancellation (Stream=8) */
    CHECK_EQ_INT(read_encoder(&d, "02"), XQPACK_OK);
    CHECK(entry_is(&d, 3, ":authority", "www.example.com"));
    CHECK_EQ_INT(d.size, 217);
    /* Had it not been cancelled, the section decodes now to the RFC's fields. */
    CHECK_EQ_INT(decode(&d, 8, "050080c181", &s), XQPACK_OK);
    CHECK_EQ_INT(s.count, 3);
    CHECK(field_is(&s, 0, ":authority", "www.example.com"));
    CHECK(field_is(&s, 1, ":path", "/"));
    CHECK(field_is(&s, 2, "custom-key", "custom-value"));
    CHECK(output_is(&d, "88")); /* its acknowledgment covers the Duplicate: no increment */

    /* B.5 Dynamic Table Insert, Eviction */
    CHECK_EQ_INT(read_encoder(&d, "810d637573746f6d2d76616c756532"), XQPACK_OK);
    CHECK(!entry_is(&d, 0, ":authority", "www.example.com"));
    CHECK(entry_is(&d, 1, ":path", "/sample/path"));
    CHECK(entry_is(&d, 2, "custom-key", "custom-value"));
    CHECK(entry_is(&d, 3, ":authority", "www.example.com"));
    CHECK(entry_is(&d, 4, "custom-key", "custom-value2"));
    CHECK_EQ_INT(d.size, 215);
    CHECK(output_is(&d, "01"));
    xQpackDecoderFree(&d);
}

static void static_table_is_rfc_9204s(void) {
    CHECK(xStrEqualsC(xQpackStatic[0].name, ":authority") && xQpackStatic[0].value.len == 0);
    CHECK(xStrEqualsC(xQpackStatic[17].name, ":method") && xStrEqualsC(xQpackStatic[17].value, "GET"));
    CHECK(xStrEqualsC(xQpackStatic[85].value, "script-src 'none'; object-src 'none'; base-uri 'none'"));
    CHECK(xStrEqualsC(xQpackStatic[98].name, "x-frame-options") &&
          xStrEqualsC(xQpackStatic[98].value, "sameorigin"));
    for (int i = 0; i < XQPACK_STATIC_COUNT; i++) {
        const xQpackStaticEntry *e = &xQpackStatic[i];
        CHECK_MSG(e->token == xHpackTokenOf(e->name.data, e->name.len), "entry %d", i);
        CHECK_MSG(xHpackNameVerdict(e->name) == 0 && xHpackValueVerdict(e->value) == 0, "entry %d", i);
    }
}

/* Every symbol, Huffman-coded by hand in a Literal With Literal Name, name and value
 * both, then through our encoder; each decodes back with the verdict its bytes earn. */
static void every_huffman_code_round_trips(void) {
    xQpackDecoder d;
    CHECK(xQpackDecoderInit(&d, 0, 0) == 0);
    xQpackSection s = section();
    for (int c = 0; c < 256; c++) {
        char sym[3] = {(char)c, (char)c, (char)c};
        xStr v = {sym, 3};
        uint8_t in[64], *p = xQpackEncodeBegin(in);
        p = xHpackHuffmanEncode(xHpackWriteInt(p, 0x28, 3, xHpackHuffmanLength(v)), v);
        p = xHpackHuffmanEncode(xHpackWriteInt(p, 0x80, 7, xHpackHuffmanLength(v)), v);
        CHECK_EQ_INT(xQpackDecodeSection(&d, 0, in, (size_t)(p - in), &s), XQPACK_OK);
        CHECK_MSG(s.count == 1 && s.fields[0].name.len == 3 && memcmp(s.fields[0].name.data, sym, 3) == 0 &&
                      s.fields[0].value.len == 3 && memcmp(s.fields[0].value.data, sym, 3) == 0,
                  "symbol %d", c);
        CHECK_EQ_INT(s.fields[0].flags & XHPACK_BAD_NAME, xHpackNameVerdict(v));
        CHECK_EQ_INT(s.fields[0].flags & (XHPACK_BAD_VALUE | XHPACK_CTL_VALUE), xHpackValueVerdict(v));

        char value[8] = {'a', (char)c, (char)c, (char)c, (char)c, (char)c, (char)c, 'z'};
        p = xQpackEncodeField(xQpackEncodeBegin(in), xStrFromC("x-sym"), (xStr){value, 8});
        CHECK_EQ_INT(xQpackDecodeSection(&d, 0, in, (size_t)(p - in), &s), XQPACK_OK);
        CHECK_MSG(field_is(&s, 0, "x-sym", "") || (s.count == 1 && s.fields[0].value.len == 8 &&
                                                   memcmp(s.fields[0].value.data, value, 8) == 0),
                  "encoded symbol %d", c);
    }
    /* EOS inside a string, and padding that is not EOS's prefix, are refused. */
    CHECK_EQ_INT(decode(&d, 0, "00002cffffffff", &s), XQPACK_DECOMPRESSION_FAILED);
    CHECK_EQ_INT(decode(&d, 0, "00002900", &s), XQPACK_DECOMPRESSION_FAILED);
    xQpackDecoderFree(&d);
}

static void capacity_limits_and_eviction(void) {
    xQpackDecoder d;
    CHECK(xQpackDecoderInit(&d, 100, 4) == 0);
    /* Over our maximum: 001 11111 + 70 = 101 */
    CHECK_EQ_INT(read_encoder(&d, "3f46"), XQPACK_ENCODER_STREAM_ERROR);
    xQpackDecoderFree(&d);

    CHECK(xQpackDecoderInit(&d, 100, 4) == 0);
    CHECK_EQ_INT(read_encoder(&d, "3f45"), XQPACK_OK); /* capacity 100 */
    /* Nothing is inserted at capacity 0, and the table starts there. */
    xQpackDecoder z;
    CHECK(xQpackDecoderInit(&z, 100, 4) == 0);
    CHECK_EQ_INT(read_encoder(&z, "41610162"), XQPACK_ENCODER_STREAM_ERROR); /* a=b: 34 > 0 */
    xQpackDecoderFree(&z);
    /* a: 1 + 33 = 34 each; the third evicts the first. */
    CHECK_EQ_INT(read_encoder(&d, "41610131"), XQPACK_OK);
    CHECK_EQ_INT(read_encoder(&d, "41610132"), XQPACK_OK);
    CHECK_EQ_INT(d.size, 68);
    CHECK_EQ_INT(read_encoder(&d, "41610133"), XQPACK_OK);
    CHECK_EQ_INT(d.count, 2);
    CHECK(!entry_is(&d, 0, "a", "1") && entry_is(&d, 1, "a", "2") && entry_is(&d, 2, "a", "3"));
    /* An insert whose name is the entry it evicts keeps the name (Insert With Name
     * Reference, relative 1 = abs 1, the oldest). */
    CHECK_EQ_INT(read_encoder(&d, "810134"), XQPACK_OK);
    CHECK(entry_is(&d, 3, "a", "4"));
    /* Duplicate of the newest; then lowering the capacity evicts. */
    CHECK_EQ_INT(read_encoder(&d, "00"), XQPACK_OK);
    CHECK(entry_is(&d, 4, "a", "4"));
    CHECK_EQ_INT(read_encoder(&d, "3f03"), XQPACK_OK); /* capacity 34 */
    CHECK_EQ_INT(d.count, 1);
    CHECK(entry_is(&d, 4, "a", "4") && !entry_is(&d, 3, "a", "4"));
    /* An entry bigger than the capacity, a reference to an evicted entry, a static
     * index past the table: each an encoder stream error. */
    xQpackDecoder e = d; /* shares d's table; a refused instruction changes nothing of it */
    CHECK_EQ_INT(read_encoder(&d, "4161023132"), XQPACK_ENCODER_STREAM_ERROR);
    CHECK_EQ_INT(read_encoder(&e, "01"), XQPACK_ENCODER_STREAM_ERROR);
    CHECK_EQ_INT(read_encoder(&e, "ff2401"), XQPACK_ENCODER_STREAM_ERROR);
    /* A section referring to an evicted entry (abs 3, RIC 5) fails. */
    xQpackSection s = section();
    CHECK_EQ_INT(decode(&e, 0, "060080", &s), XQPACK_OK);
    CHECK_EQ_INT(decode(&e, 0, "060081", &s), XQPACK_DECOMPRESSION_FAILED);
    free(e.out); /* the one thing e owns: the acknowledgment it queued */
    xQpackDecoderFree(&d);
}

/* Instructions cut anywhere are consumed whole or not at all. */
static void partial_encoder_instructions_wait(void) {
    xQpackDecoder d;
    CHECK(xQpackDecoderInit(&d, 220, 0) == 0);
    uint8_t in[64];
    size_t n = check_unhex("3fbd01c00f7777772e6578616d706c652e636f6d", in), used, at = 0;
    for (size_t end = 1; end <= n; end++) {
        CHECK_EQ_INT(xQpackDecoderReadEncoder(&d, in + at, end - at, &used), XQPACK_OK);
        at += used;
        CHECK(at == end || at == 3 || at == 0);
    }
    CHECK_EQ_INT(at, n);
    CHECK(entry_is(&d, 0, ":authority", "www.example.com"));
    /* A length no table of ours could hold is refused before its bytes come. */
    CHECK_EQ_INT(read_encoder(&d, "5fff01"), XQPACK_ENCODER_STREAM_ERROR);
    /* So is a Huffman length near 2^62, whose bit count would overflow. */
    uint8_t huge[16], *end = xHpackWriteInt(huge, 0x60, 5, (UINT64_C(1) << 62) - 1);
    CHECK_EQ_INT(xQpackDecoderReadEncoder(&d, huge, (size_t)(end - huge), &used),
                 XQPACK_ENCODER_STREAM_ERROR);
    end = xHpackWriteInt(huge, 0xc0, 6, 0); /* :authority = a Huffman value of 4 * 220 + 4 bytes */
    end = xHpackWriteInt(end, 0x80, 7, 4 * 220 + 4);
    CHECK_EQ_INT(xQpackDecoderReadEncoder(&d, huge, (size_t)(end - huge), &used),
                 XQPACK_ENCODER_STREAM_ERROR);
    end =
        xHpackWriteInt(huge, 0xc0, 6, 0); /* a little less waits for its bytes: the insert itself judges it */
    end = xHpackWriteInt(end, 0x80, 7, 4 * 220 + 3);
    CHECK_EQ_INT(xQpackDecoderReadEncoder(&d, huge, (size_t)(end - huge), &used), XQPACK_OK);
    CHECK_EQ_INT(used, 0);
    xQpackDecoderFree(&d);
}

static void blocked_streams_are_limited(void) {
    xQpackDecoder d;
    CHECK(xQpackDecoderInit(&d, 220, 2) == 0);
    xQpackSection s = section();
    CHECK_EQ_INT(read_encoder(&d, "3fbd01"), XQPACK_OK);
    /* RIC 1 (encoded 2) while nothing is inserted: streams 0 and 4 wait, 8 is one too many. */
    CHECK_EQ_INT(decode(&d, 0, "020080", &s), XQPACK_BLOCKED);
    CHECK_EQ_INT(decode(&d, 0, "020080", &s), XQPACK_BLOCKED); /* the same stream counts once */
    CHECK_EQ_INT(decode(&d, 4, "020080", &s), XQPACK_BLOCKED);
    xQpackDecoder spare = d;
    xQpackBlocked blocked[2] = {d.blocked[0], d.blocked[1]};
    spare.blocked = blocked;
    CHECK_EQ_INT(decode(&spare, 8, "020080", &s), XQPACK_DECOMPRESSION_FAILED);
    CHECK_EQ_INT(xQpackErrorCode(XQPACK_DECOMPRESSION_FAILED), 0x200);
    /* The insert unblocks both. */
    CHECK_EQ_INT(read_encoder(&d, "c00178"), XQPACK_OK);
    CHECK_EQ_INT(decode(&d, 4, "020080", &s), XQPACK_OK);
    CHECK(field_is(&s, 0, ":authority", "x"));
    CHECK_EQ_INT(d.blocked_count, 1);
    CHECK_EQ_INT(decode(&d, 0, "020080", &s), XQPACK_OK);
    CHECK_EQ_INT(d.blocked_count, 0);
    CHECK(output_is(&d, "8480"));
    xQpackDecoderFree(&d);

    /* A blocked section keeps the Required Insert Count it read: with room for one entry
     * (the count wraps every 2), read again after three inserts it would say 3, not 1,
     * and find abs 2 where the encoder meant abs 0, long evicted. */
    CHECK(xQpackDecoderInit(&d, 32, 1) == 0);
    CHECK_EQ_INT(read_encoder(&d, "20"), XQPACK_OK);
    CHECK_EQ_INT(read_encoder(&d, "3f01"), XQPACK_OK); /* capacity 32 */
    CHECK_EQ_INT(decode(&d, 0, "020080", &s), XQPACK_BLOCKED);
    CHECK_EQ_INT(s.required_insert_count, 1);
    CHECK_EQ_INT(read_encoder(&d, "400040004000"), XQPACK_OK);
    CHECK_EQ_INT(decode(&d, 0, "020080", &s), XQPACK_DECOMPRESSION_FAILED);
    CHECK_EQ_INT(s.required_insert_count, 1);
    xQpackDecoderFree(&d);

    /* With no blocked streams allowed, any wait is an error. */
    CHECK(xQpackDecoderInit(&d, 220, 0) == 0);
    CHECK_EQ_INT(decode(&d, 0, "020080", &s), XQPACK_DECOMPRESSION_FAILED);
    xQpackDecoderFree(&d);
}

static void malformed_sections_fail_by_name(void) {
    xQpackDecoder d;
    CHECK(xQpackDecoderInit(&d, 220, 4) == 0);
    CHECK_EQ_INT(read_encoder(&d, "3fbd01c00178c10179"), XQPACK_OK); /* 2 inserts */
    xQpackSection s = section();
    static const char *const bad[] = {
        "",                             /* no prefix */
        "00",                           /* no Base */
        "0d00",                         /* encoded RIC 13 > 2 * MaxEntries (12) */
        "0381",                         /* RIC 2, Sign 1, Delta 1: Base 0 ... fine alone; with an index: */
        "0082",                         /* RIC 0 with a negative Base */
        "0000ff24",                     /* static index 99 */
        "000080",                       /* a dynamic reference in a section of RIC 0 */
        "030010",                       /* RIC 2, Base 2, post-base 0 = abs 2, not below RIC */
        "030082",                       /* RIC 2, Base 2, relative 2: below 0 */
        "0000510a2f",                   /* a value longer than the section */
        "0000ff8080808080808080808001", /* an index past 2^62 */
        "00005f",                       /* a name reference cut short */
        "000027",                       /* a literal name cut short */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        xQpackResult r = decode(&d, 0, bad[i], &s);
        if (i == 3)
            CHECK_EQ_INT(r, XQPACK_OK);
        else
            CHECK_MSG(r == XQPACK_DECOMPRESSION_FAILED, "case %zu (%s): %d", i, bad[i], (int)r);
    }
    CHECK_EQ_INT(xQpackErrorCode(XQPACK_ENCODER_STREAM_ERROR), 0x201);
    CHECK_EQ_INT(xQpackErrorCode(XQPACK_DECODER_STREAM_ERROR), 0x202);
    CHECK_EQ_INT(xQpackErrorCode(XQPACK_OK), 0);
    xQpackDecoderFree(&d);
}

static void limits_give_too_large(void) {
    xQpackDecoder d;
    CHECK(xQpackDecoderInit(&d, 0, 0) == 0);
    xQpackSection s = section();
    s.max_size = 40; /* :path / is 38 */
    CHECK_EQ_INT(decode(&d, 0, "0000c1c1", &s), XQPACK_TOO_LARGE);
    CHECK_EQ_INT(s.size, 76);
    s = section();
    s.scratch_size = 2; /* a Huffman value that does not fit scratch */
    CHECK_EQ_INT(decode(&d, 0, "0000518cf1e3c2e5f23a6ba0ab90f4ff", &s), XQPACK_TOO_LARGE);
    /* Too large still checks the rest. */
    CHECK_EQ_INT(decode(&d, 0, "0000518cf1e3c2e5f23a6ba0ab90f4ffff24", &s), XQPACK_DECOMPRESSION_FAILED);
    xQpackDecoderFree(&d);
}

/* What the encoder writes decodes back; known fields take the static table's shortest form. */
static void static_encoder_round_trips(void) {
    static const int statuses[] = {100, 103, 200, 204, 206, 302, 304, 400, 403,
                                   404, 421, 425, 500, 503, 201, 418, 99};
    uint8_t out[256], *p;
    xQpackDecoder d;
    CHECK(xQpackDecoderInit(&d, 0, 0) == 0);
    xQpackSection s = section();
    for (size_t i = 0; i < sizeof statuses / sizeof *statuses; i++) {
        p = xQpackEncodeStatus(xQpackEncodeBegin(out), statuses[i]);
        CHECK(p - out <= XQPACK_PREFIX_SIZE + 6);
        CHECK_EQ_INT(xQpackDecodeSection(&d, 0, out, (size_t)(p - out), &s), XQPACK_OK);
        char want[12];
        snprintf(want, sizeof want, "%d", statuses[i] < 100 ? 500 : statuses[i]);
        CHECK_MSG(field_is(&s, 0, ":status", want), "status %d", statuses[i]);
        if (statuses[i] == 200) CHECK_EQ_INT(p - out, 3);
    }
    p = xQpackEncodeBegin(out);
    CHECK(out[0] == 0 && out[1] == 0);
    p = xQpackEncodeField(p, xStrFromC("content-type"), xStrFromC("text/plain"));
    CHECK_EQ_INT(p - out, 3); /* index 53 */
    p = xQpackEncodeField(p, xStrFromC("content-type"), xStrFromC("text/x-thing"));
    p = xQpackEncodeField(p, xStrFromC("alt-svc"), xStrFromC("h3=\":443\""));
    p = xQpackEncodeField(p, xStrFromC("x-frame-options"), xStrFromC("sameorigin"));
    p = xQpackEncodeField(p, xStrFromC("x-custom"), xStrFromC("some value"));
    p = xQpackEncodeField(p, xStrFromC("x-empty"), xStrFromC(""));
    CHECK_EQ_INT(xQpackDecodeSection(&d, 0, out, (size_t)(p - out), &s), XQPACK_OK);
    CHECK_EQ_INT(s.count, 6);
    CHECK(field_is(&s, 0, "content-type", "text/plain"));
    CHECK(field_is(&s, 1, "content-type", "text/x-thing"));
    CHECK(field_is(&s, 2, "alt-svc", "h3=\":443\""));
    CHECK(field_is(&s, 3, "x-frame-options", "sameorigin"));
    CHECK(field_is(&s, 4, "x-custom", "some value"));
    CHECK(field_is(&s, 5, "x-empty", ""));
    CHECK(output_is(&d, "")); /* nothing dynamic: nothing to acknowledge */
    /* content-length's own writer gives the bytes xQpackEncodeField gives. */
    static const uint64_t lengths[] = {0, 1, 4, 9, 10, 99, 100, 12345, 1u << 20, 999999999, UINT64_MAX};
    for (size_t i = 0; i < sizeof lengths / sizeof *lengths; i++) {
        char digits[24];
        snprintf(digits, sizeof digits, "%llu", (unsigned long long)lengths[i]);
        uint8_t by_field[32];
        uint8_t *end = xQpackEncodeField(by_field, xStrFromC("content-length"), xStrFromC(digits));
        p = xQpackEncodeContentLength(out, lengths[i]);
        CHECK_MSG(p - out == end - by_field && memcmp(out, by_field, (size_t)(p - out)) == 0, "length %s",
                  digits);
    }
    xQpackDecoderFree(&d);
}

/* Every static entry's name and value encode as the first entry with both, and its name
 * with another value as a reference to the first entry of that name: what a scan of the
 * whole table in order would choose. */
static void static_encoder_picks_the_first_entry(void) {
    for (unsigned i = 0; i < XQPACK_STATIC_COUNT; i++) {
        const xQpackStaticEntry *e = &xQpackStatic[i];
        unsigned exact = i, first_of_name = i;
        for (unsigned j = 0; j < i; j++) {
            const xQpackStaticEntry *o = &xQpackStatic[j];
            if (o->name.len != e->name.len || memcmp(o->name.data, e->name.data, e->name.len) != 0) continue;
            if (first_of_name == i) first_of_name = j;
            if (exact == i && o->value.len == e->value.len &&
                memcmp(o->value.data, e->value.data, e->value.len) == 0)
                exact = j;
        }
        uint8_t out[64], want[64];
        uint8_t *end = xQpackEncodeField(out, e->name, e->value);
        uint8_t *want_end = xHpackWriteInt(want, 0xc0, 6, exact);
        CHECK_MSG(end - out == want_end - want && memcmp(out, want, (size_t)(end - out)) == 0, "entry %u", i);
        if (e->name.data[0] == ':') continue; /* pseudo-fields: their values are fixed sets */
        end = xQpackEncodeField(out, e->name, xStrFromC("\x01 no entry has this"));
        want_end = xHpackWriteInt(want, 0x50, 4, first_of_name);
        CHECK_MSG(want_end - want <= end - out && memcmp(out, want, (size_t)(want_end - want)) == 0,
                  "name of %u", i);
    }
}

/* A static-only encoder (no table: the peer's capacity 0) never inserts: of the peer's
 * decoder instructions only cancellations fit. */
static void encoder_reads_the_decoder_stream(void) {
    xQpackEncoder enc;
    xQpackEncoderInit(&enc);
    uint8_t in[16];
    size_t used, n = check_unhex("48407f", in);
    CHECK_EQ_INT(xQpackEncoderReadDecoder(&enc, in, n, &used),
                 XQPACK_OK); /* streams 8, 0; then one cut short */
    CHECK_EQ_INT(used, 2);
    n = check_unhex("7f0a", in); /* stream 73 whole */
    CHECK_EQ_INT(xQpackEncoderReadDecoder(&enc, in, 1, &used), XQPACK_OK);
    CHECK_EQ_INT(used, 0);
    CHECK_EQ_INT(xQpackEncoderReadDecoder(&enc, in, n, &used), XQPACK_OK);
    CHECK_EQ_INT(used, 2);
    n = check_unhex("4884", in); /* Section Acknowledgment of stream 4 */
    CHECK_EQ_INT(xQpackEncoderReadDecoder(&enc, in, n, &used), XQPACK_DECODER_STREAM_ERROR);
    n = check_unhex("01", in); /* Insert Count Increment 1 */
    CHECK_EQ_INT(xQpackEncoderReadDecoder(&enc, in, n, &used), XQPACK_DECODER_STREAM_ERROR);
    n = check_unhex("00", in); /* Insert Count Increment 0: an error even with inserts */
    CHECK_EQ_INT(xQpackEncoderReadDecoder(&enc, in, n, &used), XQPACK_DECODER_STREAM_ERROR);
    CHECK_EQ_INT(xQpackErrorCode(XQPACK_DECODER_STREAM_ERROR), 0x202);
}

/* QPACK's fields meet HTTP/2's checks unchanged: verdicts, tokens, pseudo-headers. */
static void fields_meet_http2_checks(void) {
    xQpackDecoder d;
    CHECK(xQpackDecoderInit(&d, 0, 0) == 0);
    xQpackSection s = section();
    uint8_t in[256], *p = xQpackEncodeBegin(in);
    p = xQpackEncodeField(p, xStrFromC(":method"), xStrFromC("GET"));
    p = xQpackEncodeField(p, xStrFromC(":scheme"), xStrFromC("https"));
    p = xQpackEncodeField(p, xStrFromC(":authority"), xStrFromC("example.com"));
    p = xQpackEncodeField(p, xStrFromC(":path"), xStrFromC("/x"));
    CHECK_EQ_INT(xQpackDecodeSection(&d, 0, in, (size_t)(p - in), &s), XQPACK_OK);
    xH2RequestHead head;
    CHECK(xH2CheckRequest(s.fields, s.count, false, &head));
    CHECK_STR(head.path, "/x");
    /* A connection-specific field, by token. */
    uint8_t *q = xQpackEncodeField(p, xStrFromC("connection"), xStrFromC("close"));
    CHECK_EQ_INT(xQpackDecodeSection(&d, 0, in, (size_t)(q - in), &s), XQPACK_OK);
    CHECK(!xH2CheckRequest(s.fields, s.count, false, &head));
    /* An upper-case literal name, and a value with a CR, carry their verdicts. */
    CHECK_EQ_INT(decode(&d, 0, "000023582d41020d62", &s), XQPACK_OK);
    CHECK(s.fields[0].flags & XHPACK_BAD_NAME);
    CHECK(s.fields[0].flags & XHPACK_BAD_VALUE);
    CHECK(!xH2CheckTrailers(s.fields, s.count));
    CHECK_EQ_INT(decode(&d, 0, "0000750161", &s), XQPACK_OK); /* cookie: a, N set */
    CHECK(field_is(&s, 0, "cookie", "a") && (s.fields[0].flags & XHPACK_NEVER_INDEXED));
    CHECK(s.fields[0].token == XHPACK_TOKEN_COOKIE);
    xQpackDecoderFree(&d);
}

/* A field's verdict carries its value's syntax (a dynamic entry's judged as it enters the
 * table), so HTTP/2's check for judged fields gives what the full check gives. */
static void verdicts_carry_the_syntax(void) {
    xQpackDecoder d;
    CHECK(xQpackDecoderInit(&d, 220, 0) == 0);
    xQpackSection s = section();
    xH2RequestHead head;
    /* Capacity 220; :authority (static 0) "a b", then "example.com". */
    CHECK_EQ_INT(read_encoder(&d, "3fbd01c003612062c00b6578616d706c652e636f6d"), XQPACK_OK);
    /* :method GET, :scheme https, :path /, :authority by dynamic index (Base 2). */
    CHECK_EQ_INT(decode(&d, 0, "0300d1d7c180", &s), XQPACK_OK);
    CHECK(field_is(&s, 3, ":authority", "example.com") && !s.fields[3].flags);
    CHECK(xH2CheckHpackRequest(s.fields, s.count, true, &head));
    CHECK_EQ_INT(decode(&d, 4, "0300d1d7c181", &s), XQPACK_OK);
    CHECK(field_is(&s, 3, ":authority", "a b") && (s.fields[3].flags & XHPACK_BAD_SYNTAX));
    CHECK(!xH2CheckHpackRequest(s.fields, s.count, true, &head));
    CHECK(!xH2CheckRequest(s.fields, s.count, true, &head));
    /* A literal :path with a space (static name 1), and one without. */
    CHECK_EQ_INT(decode(&d, 8, "0000d1d7c051082f6120623f783d31", &s), XQPACK_OK);
    CHECK(field_is(&s, 3, ":path", "/a b?x=1") && (s.fields[3].flags & XHPACK_BAD_SYNTAX));
    CHECK(!xH2CheckHpackRequest(s.fields, s.count, true, &head));
    CHECK_EQ_INT(decode(&d, 12, "0000d1d7c051082f6162633f783d31", &s), XQPACK_OK);
    CHECK(field_is(&s, 3, ":path", "/abc?x=1") && !s.fields[3].flags);
    CHECK(xH2CheckHpackRequest(s.fields, s.count, true, &head));
    CHECK_STR(head.path, "/abc?x=1");
    xQpackDecoderFree(&d);
}

/* The same section again is served from the decoder's copy of the last one: the same
 * fields and verdicts, a Section Acknowledgment each time, and none of it once the table
 * has changed under the same bytes. */
static void a_repeated_section_decodes_the_same(void) {
    xQpackDecoder d;
    CHECK(xQpackDecoderInit(&d, 220, 0) == 0);
    xQpackSection s = section();
    CHECK_EQ_INT(read_encoder(&d, "3fbd01c009612e6578616d706c65"), XQPACK_OK); /* :authority a.example */
    /* :method GET, :scheme https, :authority (dynamic), :path /a b (a literal, bad syntax),
     * x-h: a Huffman "custom-key". */
    const char *hex = "0200d1d780510a2f6120622f632f642f6523782d688825a849e95ba97d7f";
    for (int round = 0; round < 3; round++) {
        uint64_t stream = 4 * (uint64_t)round;
        CHECK_EQ_INT(decode(&d, stream, hex, &s), XQPACK_OK);
        CHECK_EQ_INT(s.count, 5);
        CHECK(field_is(&s, 2, ":authority", "a.example") && !s.fields[2].flags);
        CHECK(s.fields[2].token == XHPACK_TOKEN_AUTHORITY);
        CHECK(field_is(&s, 3, ":path", "/a b/c/d/e") && (s.fields[3].flags & XHPACK_BAD_SYNTAX));
        CHECK(field_is(&s, 4, "x-h", "custom-key"));
        CHECK_EQ_INT(s.required_insert_count, 1);
        CHECK_EQ_INT(s.size, 7 + 3 + 7 + 5 + 10 + 9 + 5 + 10 + 3 + 10 + 5 * 32);
        char ack[8];
        snprintf(ack, sizeof ack, "%02x", 0x80 | (unsigned)stream);
        CHECK_MSG(output_is(&d, ack), "round %d", round);
    }
    /* Limits are the caller's: one field fewer is too large, as decoding says. */
    s = section();
    s.max_fields = 4;
    CHECK_EQ_INT(decode(&d, 12, hex, &s), XQPACK_TOO_LARGE);
    CHECK(output_is(&d, "8c"));
    s = section();
    CHECK_EQ_INT(read_encoder(&d, "20"), XQPACK_OK); /* capacity 0: a.example is evicted */
    CHECK_EQ_INT(decode(&d, 16, hex, &s), XQPACK_DECOMPRESSION_FAILED);
    xQpackDecoderFree(&d);
}

/* A kept section taken again without decoding (xQpackDecodeAgain) does what decoding
 * it would: its Section Acknowledgment when it refers to the table; it is refused once
 * the table changed under a section that refers to it, or another section is kept. One
 * that refers to no entry (Required Insert Count 0) means the same whatever the table
 * holds, so it stays kept through the encoder stream's changes. */
static void a_kept_section_is_taken_again(void) {
    xQpackDecoder d;
    CHECK(xQpackDecoderInit(&d, 220, 0) == 0);
    xQpackSection s = section();
    uint8_t in[64];
    CHECK_EQ_INT(read_encoder(&d, "3fbd01c009612e6578616d706c65"), XQPACK_OK); /* :authority a.example */
    size_t n = check_unhex("0200d1d780", in);                                  /* ... :authority (dynamic) */
    CHECK_EQ_INT(xQpackDecodeSection(&d, 0, in, n, &s), XQPACK_OK);
    uint64_t dynamic = s.remembered;
    CHECK(dynamic != 0);
    CHECK(output_is(&d, "80"));
    CHECK(!xQpackDecodeAgain(&d, dynamic + 1, 4, in, n)); /* not that number */
    CHECK(!xQpackDecodeAgain(&d, dynamic, 4, in, n - 1)); /* not those bytes */
    CHECK(output_is(&d, ""));
    CHECK(xQpackDecodeAgain(&d, dynamic, 4, in, n));
    CHECK(output_is(&d, "84"));
    CHECK_EQ_INT(read_encoder(&d, "00"), XQPACK_OK); /* a duplicate: the table changed */
    CHECK(!xQpackDecodeAgain(&d, dynamic, 8, in, n));
    CHECK_EQ_INT(xQpackDecodeSection(&d, 8, in, n, &s), XQPACK_OK);
    CHECK(s.remembered != 0 && s.remembered != dynamic); /* decoded, and kept anew */

    /* :method GET, :scheme https, :path /a: static references and a literal. */
    n = check_unhex("0000d1d751022f61", in);
    CHECK_EQ_INT(xQpackDecodeSection(&d, 12, in, n, &s), XQPACK_OK);
    uint64_t plain = s.remembered;
    CHECK(plain != 0 && !xQpackDecodeAgain(&d, dynamic, 12, in, n));
    CHECK_EQ_INT(read_encoder(&d, "00"), XQPACK_OK);
    CHECK_EQ_INT(read_encoder(&d, "20"), XQPACK_OK); /* capacity 0: everything evicted */
    (void)xQpackDecoderTakeOutput(&d);               /* acknowledgments and increments so far */
    CHECK(xQpackDecodeAgain(&d, plain, 16, in, n));
    CHECK_EQ_INT(xQpackDecodeSection(&d, 20, in, n, &s), XQPACK_OK);
    CHECK(s.remembered == plain && field_is(&s, 2, ":path", "/a"));
    CHECK(output_is(&d, "")); /* nothing to acknowledge */
    in[n - 1] = 'b';          /* /b: another section, kept in its place */
    CHECK(!xQpackDecodeAgain(&d, plain, 24, in, n));
    CHECK_EQ_INT(xQpackDecodeSection(&d, 24, in, n, &s), XQPACK_OK);
    CHECK(s.remembered != plain && field_is(&s, 2, ":path", "/b"));
    in[n - 1] = 'a';
    CHECK(!xQpackDecodeAgain(&d, plain, 28, in, n));
    xQpackDecoderFree(&d);
}

int main(void) {
    RUN(appendix_b_examples);
    RUN(static_table_is_rfc_9204s);
    RUN(every_huffman_code_round_trips);
    RUN(capacity_limits_and_eviction);
    RUN(partial_encoder_instructions_wait);
    RUN(blocked_streams_are_limited);
    RUN(malformed_sections_fail_by_name);
    RUN(limits_give_too_large);
    RUN(static_encoder_round_trips);
    RUN(static_encoder_picks_the_first_entry);
    RUN(encoder_reads_the_decoder_stream);
    RUN(fields_meet_http2_checks);
    RUN(verdicts_carry_the_syntax);
    RUN(a_repeated_section_decodes_the_same);
    RUN(a_kept_section_is_taken_again);
    return CHECK_SUMMARY();
}
