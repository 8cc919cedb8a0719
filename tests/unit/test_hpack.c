/* test_hpack.c — HPACK (RFC 7541): the Appendix C examples, every Huffman code,
 * malformed strings and integers, table size updates, eviction, and the header
 * list limit that leaves the decoder in sync. */
#include <stdlib.h>

#include "check.h"
#include "xhttp/http2/hpack.h"

/* "name: value" as the RFC prints a field; pseudo-headers start with ':'. */
static void split(const char *line, xStr *name, xStr *value) {
    const char *sep = strstr(line + 1, ": ");
    *name = (xStr){line, (size_t)(sep - line)};
    *value = xStrFromC(sep + 2);
}

static bool same(xStr a, xStr b) { return a.len == b.len && memcmp(a.data, b.data, a.len) == 0; }

typedef struct Vector {
    const char *section, *hex;
    const char *fields[8];
    const char *table[8]; /* newest first, as the RFC lists it */
    size_t table_size;
} Vector;

/* RFC 7541 Appendix C.2 to C.6, transcribed from the RFC's text. */
static const Vector vectors[] = {
    {"C.2.1",
     "400a637573746f6d2d6b65790d637573746f6d2d686561646572",
     {"custom-key: custom-header", NULL},
     {"custom-key: custom-header", NULL},
     55},
    {"C.2.2", "040c2f73616d706c652f70617468", {":path: /sample/path", NULL}, {NULL}, 0},
    {"C.2.3", "100870617373776f726406736563726574", {"password: secret", NULL}, {NULL}, 0},
    {"C.2.4", "82", {":method: GET", NULL}, {NULL}, 0},
    {"C.3.1",
     "828684410f7777772e6578616d706c652e636f6d",
     {":method: GET", ":scheme: http", ":path: /", ":authority: www.example.com", NULL},
     {":authority: www.example.com", NULL},
     57},
    {"C.3.2",
     "828684be58086e6f2d6361636865",
     {":method: GET", ":scheme: http", ":path: /", ":authority: www.example.com", "cache-control: no-cache",
      NULL},
     {"cache-control: no-cache", ":authority: www.example.com", NULL},
     110},
    {"C.3.3",
     "828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565",
     {":method: GET", ":scheme: https", ":path: /index.html", ":authority: www.example.com",
      "custom-key: custom-value", NULL},
     {"custom-key: custom-value", "cache-control: no-cache", ":authority: www.example.com", NULL},
     164},
    {"C.4.1",
     "828684418cf1e3c2e5f23a6ba0ab90f4ff",
     {":method: GET", ":scheme: http", ":path: /", ":authority: www.example.com", NULL},
     {":authority: www.example.com", NULL},
     57},
    {"C.4.2",
     "828684be5886a8eb10649cbf",
     {":method: GET", ":scheme: http", ":path: /", ":authority: www.example.com", "cache-control: no-cache",
      NULL},
     {"cache-control: no-cache", ":authority: www.example.com", NULL},
     110},
    {"C.4.3",
     "828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf",
     {":method: GET", ":scheme: https", ":path: /index.html", ":authority: www.example.com",
      "custom-key: custom-value", NULL},
     {"custom-key: custom-value", "cache-control: no-cache", ":authority: www.example.com", NULL},
     164},
    {"C.5.1",
     "4803333032580770726976617465611d4d6f6e2c203231204f637420323031332032303a31333a323120474d546e17687474707"
     "33a2f2f7777772e6578616d706c652e636f6d",
     {":status: 302", "cache-control: private", "date: Mon, 21 Oct 2013 20:13:21 GMT",
      "location: https://www.example.com", NULL},
     {"location: https://www.example.com", "date: Mon, 21 Oct 2013 20:13:21 GMT", "cache-control: private",
      ":status: 302", NULL},
     222},
    {"C.5.2",
     "4803333037c1c0bf",
     {":status: 307", "cache-control: private", "date: Mon, 21 Oct 2013 20:13:21 GMT",
      "location: https://www.example.com", NULL},
     {":status: 307", "location: https://www.example.com", "date: Mon, 21 Oct 2013 20:13:21 GMT",
      "cache-control: private", NULL},
     222},
    {"C.5.3",
     "88c1611d4d6f6e2c203231204f637420323031332032303a31333a323220474d54c05a04677a69707738666f6f3d4153444a4b4"
     "8514b425a584f5157454f50495541585157454f49553b206d61782d6167653d333630303b2076657273696f6e3d31",
     {":status: 200", "cache-control: private", "date: Mon, 21 Oct 2013 20:13:22 GMT",
      "location: https://www.example.com", "content-encoding: gzip",
      "set-cookie: foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1", NULL},
     {"set-cookie: foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1", "content-encoding: gzip",
      "date: Mon, 21 Oct 2013 20:13:22 GMT", NULL},
     215},
    {"C.6.1",
     "488264025885aec3771a4b6196d07abe941054d444a8200595040b8166e082a62d1bff6e919d29ad171863c78f0b97c8e9ae82a"
     "e43d3",
     {":status: 302", "cache-control: private", "date: Mon, 21 Oct 2013 20:13:21 GMT",
      "location: https://www.example.com", NULL},
     {"location: https://www.example.com", "date: Mon, 21 Oct 2013 20:13:21 GMT", "cache-control: private",
      ":status: 302", NULL},
     222},
    {"C.6.2",
     "4883640effc1c0bf",
     {":status: 307", "cache-control: private", "date: Mon, 21 Oct 2013 20:13:21 GMT",
      "location: https://www.example.com", NULL},
     {":status: 307", "location: https://www.example.com", "date: Mon, 21 Oct 2013 20:13:21 GMT",
      "cache-control: private", NULL},
     222},
    {"C.6.3",
     "88c16196d07abe941054d444a8200595040b8166e084a62d1bffc05a839bd9ab77ad94e7821dd7f2e6c7b335dfdfcd5b3960d5a"
     "f27087f3672c1ab270fb5291f9587316065c003ed4ee5b1063d5007",
     {":status: 200", "cache-control: private", "date: Mon, 21 Oct 2013 20:13:22 GMT",
      "location: https://www.example.com", "content-encoding: gzip",
      "set-cookie: foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1", NULL},
     {"set-cookie: foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1", "content-encoding: gzip",
      "date: Mon, 21 Oct 2013 20:13:22 GMT", NULL},
     215},
};

static int decode(xHpackDecoder *d, const uint8_t *in, size_t n, xHpackField *fields, size_t max,
                  size_t list_limit, size_t *count) {
    static char scratch[8192];
    xHpackBlock b = {fields, max, 0, scratch, sizeof scratch, list_limit, 0, 0};
    int rv = xHpackDecode(d, in, n, &b);
    *count = b.count;
    return rv;
}

static void check_vector(xHpackDecoder *d, const Vector *v) {
    uint8_t in[256];
    size_t n = check_unhex(v->hex, in), count;
    xHpackField f[16];
    CHECK_MSG(decode(d, in, n, f, 16, 65536, &count) == XHPACK_OK, "%s", v->section);
    size_t want = 0;
    while (v->fields[want]) want++;
    CHECK_MSG(count == want, "%s: %zu fields", v->section, count);
    for (size_t i = 0; i < count && i < want; i++) {
        xStr name, value;
        split(v->fields[i], &name, &value);
        CHECK_MSG(same(f[i].name, name) && same(f[i].value, value), "%s field %zu", v->section, i);
        CHECK_MSG(f[i].token == xHpackTokenOf(name.data, name.len), "%s token %zu", v->section, i);
    }
    size_t entries = 0;
    for (; v->table[entries]; entries++) {
        char buf[256];
        xStr name, value, want_name, want_value;
        split(v->table[entries], &want_name, &want_value);
        CHECK_MSG(xHpackDecoderEntry(d, 62 + entries, buf, sizeof buf, &name, &value) &&
                      same(name, want_name) && same(value, want_value),
                  "%s entry %zu", v->section, entries);
    }
    CHECK_MSG(d->table.count == entries, "%s: %u entries", v->section, d->table.count);
    CHECK_MSG(d->table.size == v->table_size, "%s: size %zu", v->section, d->table.size);
}

static void test_rfc7541_appendix_c_examples_decode_with_their_tables(void) {
    xHpackDecoder d;
    for (size_t i = 0; i < sizeof vectors / sizeof *vectors; i++) {
        const char *s = vectors[i].section;
        /* C.2.x stand alone; C.3 to C.6 are sequences on one decoder, C.5 and C.6 with 256 bytes. */
        bool first = strncmp(s, "C.2", 3) == 0 || s[4] == '1';
        if (first) {
            if (i) xHpackDecoderFree(&d);
            CHECK(xHpackDecoderInit(&d, s[2] >= '5' ? 256 : 4096) == 0);
        }
        check_vector(&d, &vectors[i]);
    }
    xHpackDecoderFree(&d);
}

static void test_integers_of_rfc7541_c1_and_overflow(void) {
    uint8_t buf[8], *end;
    const uint8_t *p;
    uint32_t v;
    end = xHpackWriteInt(buf, 0, 5, 10);
    CHECK(end - buf == 1 && buf[0] == 10);
    end = xHpackWriteInt(buf, 0, 5, 1337);
    CHECK(end - buf == 3 && buf[0] == 31 && buf[1] == 0x9a && buf[2] == 0x0a);
    p = buf;
    CHECK(xHpackReadInt(&p, end, 5, &v) && v == 1337 && p == end);
    end = xHpackWriteInt(buf, 0, 8, 42);
    CHECK(end - buf == 1 && buf[0] == 42);
    end = xHpackWriteInt(buf, 0, 5, UINT32_MAX);
    p = buf;
    CHECK(xHpackReadInt(&p, end, 5, &v) && v == UINT32_MAX);
    const uint8_t over[] = {0x1f, 0xe1, 0xff, 0xff, 0xff, 0x0f}; /* 31 + 0xffffffe1 = 2^32 */
    p = over;
    CHECK(!xHpackReadInt(&p, over + sizeof over, 5, &v));
    const uint8_t zeros[] = {0x1f, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00}; /* too many bytes */
    p = zeros;
    CHECK(!xHpackReadInt(&p, zeros + sizeof zeros, 5, &v));
    const uint8_t cut[] = {0x1f, 0x80};
    p = cut;
    CHECK(!xHpackReadInt(&p, cut + sizeof cut, 5, &v));
    /* In a block: an index past 2^32 - 1 is a compression error. */
    xHpackDecoder d;
    xHpackDecoderInit(&d, 4096);
    xHpackField f[4];
    size_t count;
    const uint8_t block[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0f};
    CHECK(decode(&d, block, sizeof block, f, 4, 65536, &count) == XHPACK_ERROR);
    xHpackDecoderFree(&d);
}

static void test_every_huffman_code_round_trips(void) {
    uint8_t enc[4096];
    char dec[1024];
    size_t len;
    for (int c = 0; c < 256; c++) {
        char s[3] = {(char)c, (char)c, (char)(255 - c)};
        for (size_t n = 1; n <= 3; n++) {
            uint8_t *end = xHpackHuffmanEncode(enc, (xStr){s, n});
            CHECK((size_t)(end - enc) == xHpackHuffmanLength((xStr){s, n}));
            CHECK_MSG(xHpackHuffmanDecode(enc, (size_t)(end - enc), dec, sizeof dec, &len) && len == n &&
                          memcmp(dec, s, n) == 0,
                      "symbol %d", c);
        }
    }
    char all[512];
    for (int i = 0; i < 512; i++) all[i] = (char)(i * 7 + i / 256);
    uint8_t *end = xHpackHuffmanEncode(enc, (xStr){all, 512});
    CHECK(xHpackHuffmanDecode(enc, (size_t)(end - enc), dec, sizeof dec, &len) && len == 512 &&
          memcmp(dec, all, 512) == 0);
}

static void test_huffman_rejects_eos_and_bad_padding(void) {
    char out[16];
    size_t len;
    const uint8_t eos[] = {0xff, 0xff, 0xff, 0xff}; /* 30 ones: EOS itself */
    CHECK(!xHpackHuffmanDecode(eos, sizeof eos, out, sizeof out, &len));
    const uint8_t long_pad[] = {0x1f, 0xff}; /* 'a' (00011) then 11 bits of ones */
    CHECK(!xHpackHuffmanDecode(long_pad, sizeof long_pad, out, sizeof out, &len));
    const uint8_t zero_pad[] = {0x18}; /* 'a' then 000: not EOS's prefix */
    CHECK(!xHpackHuffmanDecode(zero_pad, sizeof zero_pad, out, sizeof out, &len));
    const uint8_t good[] = {0x1f}; /* 'a' then 111 */
    CHECK(xHpackHuffmanDecode(good, sizeof good, out, sizeof out, &len) && len == 1 && out[0] == 'a');
    const uint8_t pad8[] = {0xff}; /* 8 bits of padding */
    CHECK(!xHpackHuffmanDecode(pad8, sizeof pad8, out, sizeof out, &len));
}

static void test_table_size_updates_only_first_and_within_limit(void) {
    xHpackDecoder d;
    xHpackDecoderInit(&d, 4096);
    xHpackField f[4];
    size_t count;
    const uint8_t late[] = {0x82, 0x3f, 0xe1, 0x1f}; /* GET, then an update to 4096 */
    CHECK(decode(&d, late, sizeof late, f, 4, 65536, &count) == XHPACK_ERROR);
    const uint8_t twice[] = {0x20, 0x3f, 0xe1, 0x1f, 0x82};
    CHECK(decode(&d, twice, sizeof twice, f, 4, 65536, &count) == XHPACK_OK && count == 1);
    const uint8_t over[] = {0x3f, 0xe2, 0x1f}; /* 4097 */
    CHECK(decode(&d, over, sizeof over, f, 4, 65536, &count) == XHPACK_ERROR);
    xHpackDecoderFree(&d);
    /* After we lower the limit, the next block must start with an update within it. */
    xHpackDecoderInit(&d, 4096);
    xHpackDecoderSetLimit(&d, 100);
    const uint8_t none[] = {0x82};
    CHECK(decode(&d, none, sizeof none, f, 4, 65536, &count) == XHPACK_ERROR);
    xHpackDecoderFree(&d);
    xHpackDecoderInit(&d, 4096);
    xHpackDecoderSetLimit(&d, 100);
    const uint8_t ok[] = {0x3f, 0x45, 0x82}; /* 100 */
    CHECK(decode(&d, ok, sizeof ok, f, 4, 65536, &count) == XHPACK_OK && d.table.max == 100);
    xHpackDecoderFree(&d);
}

/* A literal with incremental indexing, name and value raw. */
static uint8_t *add_literal(uint8_t *p, const char *name, const char *value) {
    *p++ = 0x40;
    *p++ = (uint8_t)strlen(name);
    memcpy(p, name, strlen(name));
    p += strlen(name);
    *p++ = (uint8_t)strlen(value);
    memcpy(p, value, strlen(value));
    return p + strlen(value);
}

static void test_eviction_drops_the_oldest_first(void) {
    xHpackDecoder d;
    xHpackDecoderInit(&d, 100); /* room for two 40-byte entries */
    uint8_t block[64], *p = block;
    p = add_literal(p, "a", "1234567"); /* 40 */
    p = add_literal(p, "b", "1234567");
    p = add_literal(p, "c", "1234567"); /* evicts a */
    xHpackField f[4];
    size_t count;
    CHECK(decode(&d, block, (size_t)(p - block), f, 4, 65536, &count) == XHPACK_OK && count == 3);
    char buf[64];
    xStr name, value;
    CHECK(d.table.count == 2 && d.table.size == 80);
    CHECK(xHpackDecoderEntry(&d, 62, buf, sizeof buf, &name, &value) && xStrEqualsC(name, "c"));
    CHECK(xHpackDecoderEntry(&d, 63, buf, sizeof buf, &name, &value) && xStrEqualsC(name, "b"));
    CHECK(!xHpackDecoderEntry(&d, 64, buf, sizeof buf, &name, &value));
    const uint8_t gone[] = {0x80 | 64};
    CHECK(decode(&d, gone, 1, f, 4, 65536, &count) == XHPACK_ERROR);
    xHpackDecoderFree(&d);
}

/* Found by fuzz_hpack_diff against nghttp2: a limit above HTTP/2's initial 4096 lets
 * the encoder grow its table, but only with a size update; until then entries are
 * evicted at 4096. */
static void test_table_grows_past_4096_only_by_a_size_update(void) {
    xHpackDecoder d;
    xHpackDecoderInit(&d, 65536);
    CHECK_EQ_INT(d.table.max, XHPACK_INITIAL_TABLE_SIZE);
    static uint8_t block[8192];
    char value[101];
    memset(value, 'v', 100);
    value[100] = '\0';
    uint8_t *p = block;
    for (int i = 0; i < 40; i++) p = add_literal(p, "x", value); /* 133 bytes each: 30 fit in 4096 */
    static xHpackField f[64];
    size_t count;
    CHECK(decode(&d, block, (size_t)(p - block), f, 64, 1 << 20, &count) == XHPACK_OK && count == 40);
    CHECK_EQ_INT(d.table.count, 30);
    p = block;
    p = xHpackWriteInt(p, 0x20, 5, 8192); /* the encoder grows its table: 61 fit */
    for (int i = 0; i < 40; i++) p = add_literal(p, "x", value);
    CHECK(decode(&d, block, (size_t)(p - block), f, 64, 1 << 20, &count) == XHPACK_OK && count == 40);
    CHECK(d.table.max == 8192 && d.table.count == 61);
    xHpackDecoderFree(&d);
}

/* A field taken whole from the table is a view into its ring until the block adds an
 * entry: it is copied out first, as the new entry may overwrite its bytes. */
static void test_table_fields_outlive_an_entry_added_after_them(void) {
    xHpackDecoder d;
    xHpackDecoderInit(&d, 100); /* one 92-byte entry at a time, in a ring of 101 bytes */
    char a[60], b[60];
    memset(a, 'a', 59);
    memset(b, 'b', 59);
    a[59] = b[59] = '\0';
    uint8_t block[256], *p = block;
    p = add_literal(p, "x", a); /* the ring's bytes 0 to 60 */
    xHpackField f[4];
    size_t count;
    CHECK(decode(&d, block, (size_t)(p - block), f, 4, 65536, &count) == XHPACK_OK && count == 1);
    p = block;
    *p++ = 0x80 | 62;           /* x: a view into the ring */
    p = add_literal(p, "y", b); /* evicts x, and wraps round over its first bytes */
    *p++ = 0x80 | 62;           /* y, round the ring's end: copied */
    CHECK(decode(&d, block, (size_t)(p - block), f, 4, 65536, &count) == XHPACK_OK && count == 3);
    CHECK(d.table.count == 1);
    CHECK_STR(f[0].name, "x");
    CHECK_STR(f[0].value, a);
    CHECK_STR(f[1].name, "y");
    CHECK_STR(f[1].value, b);
    CHECK_STR(f[2].name, "y");
    CHECK_STR(f[2].value, b);
    xHpackDecoderFree(&d);
}

static void test_too_large_list_keeps_the_decoder_in_sync(void) {
    xHpackDecoder d;
    xHpackDecoderInit(&d, 4096);
    uint8_t block[256], *p = block;
    p = add_literal(p, "x-big", "0123456789012345678901234567890123456789");
    p = add_literal(p, "x-two", "v");
    xHpackField f[4];
    size_t count;
    CHECK(decode(&d, block, (size_t)(p - block), f, 4, 60, &count) == XHPACK_TOO_LARGE);
    CHECK(d.table.count == 2);                 /* both were inserted all the same */
    const uint8_t next[] = {0x82, 0xbf, 0xbe}; /* GET, then both entries by index */
    CHECK(decode(&d, next, sizeof next, f, 4, 4096, &count) == XHPACK_OK && count == 3);
    CHECK_STR(f[1].name, "x-big");
    CHECK_STR(f[1].value, "0123456789012345678901234567890123456789");
    CHECK_STR(f[2].name, "x-two");
    CHECK(f[0].token == XHPACK_TOKEN_METHOD && f[1].token == XHPACK_TOKEN_NONE);
    xHpackDecoderFree(&d);
}

static void test_verdicts_come_once_with_the_field(void) {
    xHpackDecoder d;
    xHpackDecoderInit(&d, 4096);
    uint8_t block[128], *p = block;
    p = add_literal(p, "X-Up", "ok");
    p = add_literal(p, "x-sp", " lead");
    p = add_literal(p, "connection", "close");
    p = add_literal(p, "x-ctl", "a\x01b\tc\x7f"); /* allowed on HTTP/2, not on HTTP/1.1 */
    xHpackField f[8];
    size_t count;
    CHECK(decode(&d, block, (size_t)(p - block), f, 8, 4096, &count) == XHPACK_OK && count == 4);
    CHECK(f[0].flags == XHPACK_BAD_NAME && f[1].flags == XHPACK_BAD_VALUE && f[2].flags == 0);
    CHECK(f[2].token == XHPACK_TOKEN_CONNECTION && f[3].flags == XHPACK_CTL_VALUE);
    const uint8_t again[] = {0xc1, 0xc0, 0xbf, 0xbe}; /* the same four by index */
    CHECK(decode(&d, again, sizeof again, f, 8, 4096, &count) == XHPACK_OK && count == 4);
    CHECK(f[0].flags == XHPACK_BAD_NAME && f[1].flags == XHPACK_BAD_VALUE &&
          f[2].token == XHPACK_TOKEN_CONNECTION && f[3].flags == XHPACK_CTL_VALUE);
    xHpackDecoderFree(&d);
}

static void test_encoder_fast_paths_decode_back(void) {
    xHpackEncoder e;
    xHpackEncoderInit(&e);
    xHpackEncoderSetPeerTableSize(&e, 0);
    uint8_t out[512], *p = xHpackEncodeBegin(&e, out);
    CHECK(p - out == 1 && out[0] == 0x20);
    uint8_t *s = p;
    p = xHpackEncodeStatus(p, 200);
    CHECK(p - s == 1 && *s == 0x88);
    p = xHpackEncodeStatus(p, 302);
    p = xHpackEncodeToken(p, XHPACK_TOKEN_SERVER, xStrFromC("xkit"));
    p = xHpackEncodeToken(p, XHPACK_TOKEN_DATE, xStrFromC("Mon, 21 Oct 2013 20:13:21 GMT"));
    p = xHpackEncodeField(p, xStrFromC("content-type"), xStrFromC("text/plain"));
    p = xHpackEncodeContentLength(p, 12345);
    p = xHpackEncodeField(p, xStrFromC("x-custom"), xStrFromC("value"));
    CHECK(xHpackEncodeBegin(&e, p) == p);
    xHpackDecoder d;
    xHpackDecoderInit(&d, 4096);
    xHpackDecoderSetLimit(&d, 0);
    xHpackField f[8];
    size_t count;
    CHECK(decode(&d, out, (size_t)(p - out), f, 8, 4096, &count) == XHPACK_OK && count == 7);
    CHECK_STR(f[0].value, "200");
    CHECK_STR(f[1].value, "302");
    CHECK_STR(f[2].name, "server");
    CHECK_STR(f[2].value, "xkit");
    CHECK_STR(f[3].value, "Mon, 21 Oct 2013 20:13:21 GMT");
    CHECK(f[4].token == XHPACK_TOKEN_CONTENT_TYPE);
    CHECK_STR(f[4].value, "text/plain");
    CHECK_STR(f[5].value, "12345");
    CHECK_STR(f[6].name, "x-custom");
    CHECK(d.table.count == 0);
    xHpackDecoderFree(&d);
}

static void test_tokens_name_themselves(void) {
    for (int t = 1; t < XHPACK_TOKEN_COUNT; t++)
        CHECK_MSG(xHpackTokenOf(xHpackTokenNames[t].data, xHpackTokenNames[t].len) == (xHpackToken)t,
                  "token %d", t);
    CHECK(xHpackTokenOf("x-other", 7) == XHPACK_TOKEN_NONE);
}

/* A block of one field, x-path: value, its value Huffman-coded (xHpackEncodeField's choice);
 * *at is where the value's length byte is. */
static size_t path_block(uint8_t *out, const char *value, size_t *at) {
    size_t n = (size_t)(xHpackEncodeField(out, xStrFromC("x-path"), xStrFromC(value)) - out);
    *at = 2 + (out[1] & 0x7f); /* after the literal name (out[1] is its length) */
    return n;
}

/* The decoder remembers the last Huffman literal: the same bytes again decode alike,
 * other bytes of the same length are decoded (and fail where they are no code), and
 * a remembered string still counts against the list limit. */
static void test_repeated_huffman_literals_decode_alike(void) {
    static const char *const values[] = {
        "/baseline2?a=1&b=1",
        "/baseline2?a=2&b=1",
        "/baseline2?a=1&b=1",
        "/baseline2?a=1&b=1",
        "/a-path-well-over-forty-eight-coded-bytes/"
        "and-so-never-remembered-at-all",
        "/a-path-well-over-forty-eight-coded-bytes/and-so-never-remembered-at-all"};
    xHpackDecoder d;
    xHpackDecoderInit(&d, 4096);
    xHpackField f[2];
    size_t count;
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        uint8_t block[128];
        size_t at, n = path_block(block, values[i], &at);
        CHECK(block[at] & 0x80); /* Huffman-coded */
        CHECK_MSG(decode(&d, block, n, f, 2, 4096, &count) == XHPACK_OK && count == 1, "value %zu", i);
        CHECK_STR(f[0].value, values[i]);
        CHECK(f[0].flags == 0);
    }
    uint8_t block[128];
    size_t at, n = path_block(block, values[0], &at);
    CHECK(decode(&d, block, n, f, 2, 4096, &count) == XHPACK_OK);
    CHECK(decode(&d, block, n, f, 2, 30, &count) == XHPACK_TOO_LARGE && count == 0);
    CHECK(decode(&d, block, n, f, 2, 4096, &count) == XHPACK_OK && count == 1);
    CHECK_STR(f[0].value, values[0]);
    memset(block + at + 1, 0xff, n - (at + 1)); /* same length, but EOS's code: an error */
    CHECK(decode(&d, block, n, f, 2, 4096, &count) == XHPACK_ERROR);
    xHpackDecoderFree(&d);
}

/* A remembered Huffman value keeps its verdict for the name it came under: a bad
 * :path stays bad when it repeats, and the same bytes under another name are
 * judged for that name (a path's syntax is no user-agent's concern, nor the other
 * way round). */
static void test_repeated_huffman_values_keep_their_verdict_per_name(void) {
    static const struct {
        xHpackToken token;
        const char *value;
        uint8_t verdict;
    } cases[] = {
        {XHPACK_TOKEN_PATH, "/ok?a=1", 0},
        {XHPACK_TOKEN_PATH, "/ok?a=1", 0},
        {XHPACK_TOKEN_PATH, "no-slash path", XHPACK_BAD_SYNTAX},
        {XHPACK_TOKEN_PATH, "no-slash path", XHPACK_BAD_SYNTAX},
        {XHPACK_TOKEN_USER_AGENT, "no-slash path", 0},
        {XHPACK_TOKEN_PATH, "no-slash path", XHPACK_BAD_SYNTAX},
        {XHPACK_TOKEN_USER_AGENT, "/ok?a=1", 0},
        {XHPACK_TOKEN_PATH, "/ok?a=1", 0},
        {XHPACK_TOKEN_USER_AGENT, " lead", XHPACK_BAD_VALUE},
        {XHPACK_TOKEN_USER_AGENT, " lead", XHPACK_BAD_VALUE},
        {XHPACK_TOKEN_PATH, " lead", XHPACK_BAD_SYNTAX | XHPACK_BAD_VALUE},
    };
    xHpackDecoder d;
    xHpackDecoderInit(&d, 4096);
    xHpackField f[2];
    size_t count;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t block[64];
        uint8_t *end = xHpackEncodeToken(block, cases[i].token, xStrFromC(cases[i].value));
        size_t at = (block[0] & 0x0f) == 0x0f ? 2 : 1; /* after the name's index */
        CHECK(block[at] & 0x80);                       /* the value Huffman-coded, so through the memo */
        CHECK_MSG(decode(&d, block, (size_t)(end - block), f, 2, 4096, &count) == XHPACK_OK && count == 1,
                  "case %zu", i);
        CHECK_STR(f[0].value, cases[i].value);
        CHECK_MSG(f[0].flags == cases[i].verdict, "case %zu: verdict %u", i, f[0].flags);
    }
    xHpackDecoderFree(&d);
}

static bool lies_in(xStr s, const void *base, size_t n) {
    return (const char *)s.data >= (const char *)base && s.data + s.len <= (const char *)base + n;
}

/* A block sent again decodes to the same fields while the table is as it was: its
 * raw literals view the new block's bytes and its Huffman strings the new scratch,
 * wherever the last ones were; once an entry is added, the same bytes name other
 * entries and decode to them; a block over the caller's limits is too large still. */
static void test_repeated_blocks_decode_alike_while_the_table_stays(void) {
    xHpackDecoder d;
    xHpackDecoderInit(&d, 4096);
    uint8_t first[64], *p = first;
    p = add_literal(p, "user-agent", "h2load");
    xHpackField f[8];
    size_t count;
    CHECK(decode(&d, first, (size_t)(p - first), f, 8, 4096, &count) == XHPACK_OK && count == 1);
    /* :method GET, user-agent from the table (62), x-raw: plain (literal, not indexed,
     * raw), :path Huffman-coded (not indexed) */
    uint8_t again[2][64];
    size_t n = 0;
    again[0][n++] = 0x82;
    again[0][n++] = 0xbe;
    again[0][n++] = 0x00;
    again[0][n++] = 5;
    memcpy(again[0] + n, "x-raw", 5);
    n += 5;
    again[0][n++] = 5;
    memcpy(again[0] + n, "plain", 5);
    n += 5;
    n = (size_t)(xHpackEncodeToken(again[0] + n, XHPACK_TOKEN_PATH, xStrFromC("/baseline2?a=1&b=1")) -
                 again[0]);
    memcpy(again[1], again[0], n);
    static char scratch[2][512];
    for (int round = 0; round < 4; round++) {
        const uint8_t *in = again[round % 2];
        char *sc = scratch[round % 2];
        memset(sc, 0, sizeof scratch[0]);
        xHpackBlock b = {f, 8, 0, sc, sizeof scratch[0], 4096, 0, 0};
        CHECK_MSG(xHpackDecode(&d, in, n, &b) == XHPACK_OK && b.count == 4, "round %d", round);
        CHECK_STR(f[0].value, "GET");
        CHECK(f[1].token == XHPACK_TOKEN_USER_AGENT);
        CHECK_STR(f[1].value, "h2load");
        CHECK_STR(f[2].name, "x-raw");
        CHECK_STR(f[2].value, "plain");
        CHECK(lies_in(f[2].name, in, n) && lies_in(f[2].value, in, n));
        CHECK(f[3].token == XHPACK_TOKEN_PATH && f[3].flags == 0);
        CHECK_STR(f[3].value, "/baseline2?a=1&b=1");
        CHECK(lies_in(f[3].value, sc, sizeof scratch[0]));
        CHECK(b.list_size == 3 + 7 + 10 + 6 + 5 + 5 + 5 + 18 + 4 * 32);
    }
    p = add_literal(first, "user-agent", "curl"); /* now entry 62; h2load is 63 */
    CHECK(decode(&d, first, (size_t)(p - first), f, 8, 4096, &count) == XHPACK_OK && count == 1);
    CHECK(decode(&d, again[0], n, f, 8, 4096, &count) == XHPACK_OK && count == 4);
    CHECK_STR(f[1].value, "curl");
    CHECK(decode(&d, again[1], n, f, 8, 4096, &count) == XHPACK_OK && count == 4);
    CHECK_STR(f[1].value, "curl");
    CHECK_STR(f[3].value, "/baseline2?a=1&b=1");
    CHECK(decode(&d, again[0], n, f, 3, 4096, &count) == XHPACK_TOO_LARGE);
    CHECK(decode(&d, again[0], n, f, 8, 100, &count) == XHPACK_TOO_LARGE);
    CHECK(decode(&d, again[0], n, f, 8, 4096, &count) == XHPACK_OK && count == 4);
    again[0][1] = 0xbf; /* one byte other: entry 63, h2load */
    CHECK(decode(&d, again[0], n, f, 8, 4096, &count) == XHPACK_OK && count == 4);
    CHECK_STR(f[1].value, "h2load");
    xHpackDecoderFree(&d);
}

/* xHpackRemembered names the remembered block (the number its decoding gave) for
 * the same bytes while the table is as it was, and nothing for other bytes, for
 * the same bytes once an entry was added, or while a size update is due. */
static void test_remembered_names_the_same_block_while_the_table_stays(void) {
    xHpackDecoder d;
    xHpackDecoderInit(&d, 4096);
    /* :method GET, x-raw: plain (literal, not indexed): a block that leaves the table as it is */
    uint8_t block[] = {0x82, 0x00, 5, 'x', '-', 'r', 'a', 'w', 5, 'p', 'l', 'a', 'i', 'n'};
    uint8_t other[sizeof block], entry[64];
    size_t n = sizeof block;
    memcpy(other, block, n);
    other[n - 1] = 'x';
    CHECK(xHpackRemembered(&d, block, n) == 0); /* nothing decoded yet */
    xHpackField f[8];
    static char scratch[512];
    xHpackBlock b = {f, 8, 0, scratch, sizeof scratch, 4096, 0, 0};
    CHECK(xHpackDecode(&d, block, n, &b) == XHPACK_OK && b.remembered != 0);
    uint64_t first = b.remembered;
    CHECK(xHpackRemembered(&d, block, n) == first);
    CHECK(xHpackRemembered(&d, other, n) == 0);
    CHECK(xHpackRemembered(&d, block, n - 1) == 0);
    CHECK(xHpackDecode(&d, block, n, &b) == XHPACK_OK && b.remembered == first);
    size_t count;
    uint8_t *p = add_literal(entry, "user-agent", "curl"); /* enters the table */
    CHECK(decode(&d, entry, (size_t)(p - entry), f, 8, 4096, &count) == XHPACK_OK);
    CHECK(xHpackRemembered(&d, block, n) == 0);
    CHECK(xHpackDecode(&d, block, n, &b) == XHPACK_OK && b.remembered != 0 && b.remembered != first);
    CHECK(xHpackRemembered(&d, block, n) == b.remembered);
    xHpackDecoderSetLimit(&d, 1024); /* the next block must start with a size update */
    CHECK(xHpackRemembered(&d, block, n) == 0);
    xHpackDecoderFree(&d);
}

/* xHpackEncodeLines folds names where they lie and encodes each line as
 * xHpackEncodeIndexed does on an encoder of the same table (a reference one, fed
 * field by field); the same lines again come from its memo, alike, and other lines
 * (of the same length, or too long to remember) are encoded afresh. */
static void test_header_lines_encode_alike_from_the_memo(void) {
    static const char *const blocks[] = {
        "Content-Type: text/plain\r\nX-A: bc\r\n",
        "Content-Type: text/plain\r\nX-A: bc\r\n",
        "content-type: text/plain\r\nx-a: bc\r\n",
        "Content-Type: text/plain\r\nX-A: bd\r\n",
        "X-Long: 0123456789012345678901234567890123456789012345678901234567890123456789"
        "0123456789012345678901234567890123456789012345678901234567890123456789\r\n",
        "X-Long: 0123456789012345678901234567890123456789012345678901234567890123456789"
        "0123456789012345678901234567890123456789012345678901234567890123456789\r\n",
        "Content-Type: text/plain\r\nX-A: bd\r\n"};
    static xHpackEncoder e, ref;
    xHpackEncoderInit(&e);
    xHpackEncoderInit(&ref);
    xHpackDecoder d;
    xHpackDecoderInit(&d, 4096);
    for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; i++) {
        char lines[256], folded[256];
        size_t len = strlen(blocks[i]);
        memcpy(lines, blocks[i], len + 1);
        for (size_t j = 0, in_name = 1; j <= len; j++) { /* what folding the names makes of it */
            char c = blocks[i][j];
            folded[j] = (char)(in_name && c >= 'A' && c <= 'Z' ? c + 32 : c);
            in_name = c == ':' ? 0 : c == '\n' ? 1 : in_name;
        }
        uint8_t out[512], want[512], *w = want;
        uint8_t *end = xHpackEncodeLines(&e, out, lines, len);
        CHECK_MSG(strcmp(lines, folded) == 0, "block %zu folded", i);
        for (const char *at = folded; *at;) { /* field by field, as xHpackEncodeIndexed writes them */
            const char *colon = strchr(at, ':'), *eol = strchr(at, '\r');
            xStr name = {at, (size_t)(colon - at)};
            w = xHpackEncodeIndexed(&ref, w, xHpackTokenOf(name.data, name.len), name,
                                    (xStr){colon + 2, (size_t)(eol - colon - 2)});
            at = eol + 2;
        }
        CHECK_MSG(end - out == w - want && memcmp(out, want, (size_t)(w - want)) == 0, "block %zu", i);
        xHpackField f[4];
        size_t count;
        CHECK(decode(&d, out, (size_t)(end - out), f, 4, 4096, &count) == XHPACK_OK);
        CHECK(count == (i == 4 || i == 5 ? 1u : 2u));
        CHECK_MSG(e.table.size == ref.table.size && d.table.size == e.table.size, "block %zu table", i);
        /* Fields sent before go out by index, a byte each. */
        if (i == 1 || i == 2) CHECK_MSG(end - out == 2 && out[0] >= 0x80 && out[1] >= 0x80, "block %zu", i);
    }
    char none[1] = "";
    uint8_t out[8];
    CHECK(xHpackEncodeLines(&e, out, none, 0) == out);
    xHpackDecoderFree(&d);
}

/* A response head sent again on the connection is a byte per field: server, date
 * and content-type enter the table the first time, content-length the second
 * time the same length goes out; set-cookie never does. A peer that lowers its table size (to 0, then back)
 * gets size updates before the next block, the table emptied, and the fields indexed again after. */
static void test_encoder_indexes_repeated_response_fields(void) {
    static xHpackEncoder e;
    xHpackEncoderInit(&e);
    xHpackDecoder d;
    xHpackDecoderInit(&d, 4096);
    size_t sizes[4];
    for (int i = 0; i < 4; i++) {
        if (i == 2) {
            xHpackEncoderSetPeerTableSize(&e, 0);
            xHpackEncoderSetPeerTableSize(&e, 4096);
            xHpackDecoderSetLimit(&d, 0);
            xHpackDecoderSetLimit(&d, 4096);
        }
        uint8_t out[512], *p = xHpackEncodeBegin(&e, out);
        if (i == 2) CHECK(p - out == 4 && out[0] == 0x20 && out[1] == 0x3f); /* 0, then 4096 */
        p = xHpackEncodeStatus(p, 200);
        p = xHpackEncodeIndexed(&e, p, XHPACK_TOKEN_SERVER, xStrFromC("server"), xStrFromC("xkit"));
        p = xHpackEncodeIndexed(&e, p, XHPACK_TOKEN_DATE, xStrFromC("date"),
                                xStrFromC("Mon, 21 Oct 2013 20:13:21 GMT"));
        p = xHpackEncodeIndexed(&e, p, XHPACK_TOKEN_CONTENT_TYPE, xStrFromC("content-type"),
                                xStrFromC("text/plain"));
        p = xHpackEncodeIndexed(&e, p, XHPACK_TOKEN_SET_COOKIE, xStrFromC("set-cookie"), xStrFromC("a=b"));
        p = xHpackEncodeContentLengthIndexed(&e, p, 4);
        sizes[i] = (size_t)(p - out);
        xHpackField f[8];
        size_t count;
        CHECK(decode(&d, out, (size_t)(p - out), f, 8, 4096, &count) == XHPACK_OK && count == 6);
        CHECK(xStrEqualsC(f[1].value, "xkit") && xStrEqualsC(f[3].value, "text/plain") &&
              xStrEqualsC(f[4].value, "a=b") && xStrEqualsC(f[5].value, "4"));
        CHECK(e.table.count == (i == 0 ? 3u : 4u) && d.table.count == e.table.count &&
              e.table.size == d.table.size);
    }
    /* 1 (:status) + 3 indexed + set-cookie (name index in 2, 1 + 3 raw) + content-length: 4
     * (2 + 1 + 1 raw; 1 + 1 + 1 as it enters the table; then 1 by index). */
    CHECK_MSG(sizes[1] == 13 && sizes[3] == 11, "repeated heads of %zu and %zu bytes", sizes[1], sizes[3]);
    CHECK(sizes[0] > 30 && sizes[2] == sizes[0] + 4 - 1);
    xHpackDecoderFree(&d);
}

int main(void) {
    RUN(test_rfc7541_appendix_c_examples_decode_with_their_tables);
    RUN(test_integers_of_rfc7541_c1_and_overflow);
    RUN(test_every_huffman_code_round_trips);
    RUN(test_huffman_rejects_eos_and_bad_padding);
    RUN(test_table_size_updates_only_first_and_within_limit);
    RUN(test_eviction_drops_the_oldest_first);
    RUN(test_table_grows_past_4096_only_by_a_size_update);
    RUN(test_table_fields_outlive_an_entry_added_after_them);
    RUN(test_too_large_list_keeps_the_decoder_in_sync);
    RUN(test_verdicts_come_once_with_the_field);
    RUN(test_encoder_fast_paths_decode_back);
    RUN(test_tokens_name_themselves);
    RUN(test_repeated_huffman_literals_decode_alike);
    RUN(test_repeated_huffman_values_keep_their_verdict_per_name);
    RUN(test_repeated_blocks_decode_alike_while_the_table_stays);
    RUN(test_remembered_names_the_same_block_while_the_table_stays);
    RUN(test_header_lines_encode_alike_from_the_memo);
    RUN(test_encoder_indexes_repeated_response_fields);
    return CHECK_SUMMARY();
}
