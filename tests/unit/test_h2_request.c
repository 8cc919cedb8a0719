/* test_h2_request.c — RFC 9113 §8.3.1's checks of a request's :path and
 * :authority (request.h), byte by byte: every byte value at every place of
 * targets and authorities of many lengths, against the rules written out
 * plainly here (a target: no controls, space or DEL; an authority: RFC 3986
 * §3.2's characters); and the same rules through HPACK, which judges a
 * field's syntax once, for a field sent by index as for a literal. */
#include "check.h"
#include "xhttp/http2/request.h"

static bool target_byte(unsigned char c) { return c > 0x20 && c != 0x7f; }

static bool authority_byte(unsigned char c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
    return c && strchr("-._~!$&'()*+,;=:@[]%", c) != NULL;
}

static xHpackField field(const char *name, xStr value, xHpackToken token) {
    return (xHpackField){xStrFromC(name), value, (uint16_t)token, 0};
}

static bool check(xStr path, xStr authority) {
    xHpackField f[4] = {field(":method", xStrFromC("GET"), XHPACK_TOKEN_METHOD),
                        field(":scheme", xStrFromC("https"), XHPACK_TOKEN_SCHEME),
                        field(":path", path, XHPACK_TOKEN_PATH),
                        field(":authority", authority, XHPACK_TOKEN_AUTHORITY)};
    xH2RequestHead head;
    return xH2CheckRequest(f, 4, true, &head);
}

/* Calls judge with each byte value c at each place `at` from `first` on of
 * buf's first len bytes, for every len from first + 1 to size; the other
 * bytes past first are fill. */
static void every_byte_at_every_place(char *buf, size_t size, size_t first, char fill,
                                      void (*judge)(xStr s, size_t at, int c, void *arg), void *arg) {
    memset(buf + first, fill, size - first);
    for (size_t len = first + 1; len <= size; len++)
        for (size_t at = first; at < len; at++)
            for (int c = 0; c < 256; c++) {
                buf[at] = (char)c;
                judge((xStr){buf, len}, at, c, arg);
                buf[at] = fill;
            }
}

static void judge_target(xStr path, size_t at, int c, void *arg) {
    (void)arg;
    bool ok = check(path, xStrFromC("example.com"));
    CHECK_MSG(ok == target_byte((unsigned char)c), "len %zu at %zu byte 0x%02x", path.len, at, c);
}

static void test_every_byte_at_every_place_of_a_target(void) {
    char path[40] = "/";
    every_byte_at_every_place(path, sizeof path, 1, 'a', judge_target, NULL);
}

static void judge_authority(xStr authority, size_t at, int c, void *arg) {
    (void)arg;
    bool ok = check(xStrFromC("/"), authority);
    CHECK_MSG(ok == authority_byte((unsigned char)c), "len %zu at %zu byte 0x%02x", authority.len, at, c);
}

static void test_every_byte_at_every_place_of_an_authority(void) {
    char authority[24];
    every_byte_at_every_place(authority, sizeof authority, 0, 'h', judge_authority, NULL);
}

/* A GET of / with this :authority, as HPACK decodes it: sent as a literal
 * the table keeps, or (by_index) as the table's newest entry, whose syntax
 * was judged when it came in and is not judged again. */
static bool check_decoded(xHpackDecoder *d, xStr authority, bool by_index) {
    uint8_t block[64], *p = block;
    *p++ = 0x82; /* :method GET */
    *p++ = 0x87; /* :scheme https */
    *p++ = 0x84; /* :path / */
    if (by_index) {
        *p++ = 0xbe; /* index 62: the newest entry */
    } else {
        *p++ = 0x41; /* literal with incremental indexing, the name :authority's */
        *p++ = (uint8_t)authority.len;
        memcpy(p, authority.data, authority.len);
        p += authority.len;
    }
    xHpackField f[8];
    char scratch[256];
    xHpackBlock b = {f, 8, 0, scratch, sizeof scratch, 4096, 0, 0};
    CHECK(xHpackDecode(d, block, (size_t)(p - block), &b) == XHPACK_OK && b.count == 4);
    CHECK(f[3].token == XHPACK_TOKEN_AUTHORITY && f[3].value.len == authority.len &&
          memcmp(f[3].value.data, authority.data, authority.len) == 0);
    xH2RequestHead head;
    return xH2CheckHpackRequest(f, b.count, true, &head);
}

static void judge_decoded_authority(xStr authority, size_t at, int c, void *decoder) {
    bool want = authority_byte((unsigned char)c);
    CHECK_MSG(check_decoded(decoder, authority, false) == want, "literal: len %zu at %zu byte 0x%02x",
              authority.len, at, c);
    CHECK_MSG(check_decoded(decoder, authority, true) == want, "by index: len %zu at %zu byte 0x%02x",
              authority.len, at, c);
}

static void test_every_byte_of_an_authority_judged_once_by_hpack(void) {
    xHpackDecoder d;
    CHECK(xHpackDecoderInit(&d, 4096) == 0);
    char authority[24];
    every_byte_at_every_place(authority, sizeof authority, 0, 'h', judge_decoded_authority, &d);
    xHpackDecoderFree(&d);
}

/* A method that is no token and a scheme that is no scheme, sent as literals
 * and then by index, are refused both ways; good ones pass both ways. */
static void test_method_and_scheme_judged_once_by_hpack(void) {
    static const struct {
        uint8_t name_index; /* the static table's :method or :scheme */
        const char *value;
        bool ok;
    } cases[] = {{2, "GET", true},  {2, "G T", false},   {2, "", false},       {2, "M(1)", false},
                 {6, "http", true}, {6, "1http", false}, {6, "a+b-c.d", true}, {6, "ht tp", false}};
    xHpackDecoder d;
    CHECK(xHpackDecoderInit(&d, 4096) == 0);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = strlen(cases[i].value);
        uint8_t block[64], *p = block;
        *p++ = (uint8_t)(0x40 | cases[i].name_index); /* kept by the table */
        *p++ = (uint8_t)n;
        memcpy(p, cases[i].value, n);
        p += n;
        for (int by_index = 0; by_index < 2; by_index++) {
            uint8_t full[80], *q = full;
            if (cases[i].name_index != 2) *q++ = 0x82; /* :method GET */
            if (cases[i].name_index != 6) *q++ = 0x87; /* :scheme https */
            if (by_index) {
                *q++ = 0xbe;
            } else {
                memcpy(q, block, (size_t)(p - block));
                q += p - block;
            }
            *q++ = 0x84; /* :path / */
            *q++ = 0x01; /* :authority, literal without indexing */
            *q++ = 1;
            *q++ = 'h';
            xHpackField f[8];
            char scratch[256];
            xHpackBlock b = {f, 8, 0, scratch, sizeof scratch, 4096, 0, 0};
            CHECK(xHpackDecode(&d, full, (size_t)(q - full), &b) == XHPACK_OK && b.count == 4);
            xH2RequestHead head;
            CHECK_MSG(xH2CheckHpackRequest(f, b.count, true, &head) == cases[i].ok, "%s, %s", cases[i].value,
                      by_index ? "by index" : "literal");
            CHECK_MSG(xH2CheckRequest(f, b.count, true, &head) == cases[i].ok, "%s, judged here",
                      cases[i].value);
        }
    }
    xHpackDecoderFree(&d);
}

int main(void) {
    RUN(test_every_byte_at_every_place_of_a_target);
    RUN(test_every_byte_at_every_place_of_an_authority);
    RUN(test_every_byte_of_an_authority_judged_once_by_hpack);
    RUN(test_method_and_scheme_judged_once_by_hpack);
    return CHECK_SUMMARY();
}
