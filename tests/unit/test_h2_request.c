/* test_h2_request.c — RFC 9113 §8.3.1's checks of a request's :path and
 * :authority (request.h), byte by byte: every byte value at every place of
 * targets and authorities of many lengths, against the rules written out
 * plainly here (a target: no controls, space or DEL; an authority: RFC 3986
 * §3.2's characters). */
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

static void test_every_byte_at_every_place_of_a_target(void) {
    char path[40];
    memset(path, 'a', sizeof path);
    path[0] = '/';
    for (size_t len = 2; len <= sizeof path; len++)
        for (size_t at = 1; at < len; at++)
            for (int c = 0; c < 256; c++) {
                path[at] = (char)c;
                bool ok = check((xStr){path, len}, xStrFromC("example.com"));
                CHECK_MSG(ok == target_byte((unsigned char)c), "len %zu at %zu byte 0x%02x", len, at, c);
                path[at] = 'a';
            }
}

static void test_every_byte_at_every_place_of_an_authority(void) {
    char authority[24];
    memset(authority, 'h', sizeof authority);
    for (size_t len = 1; len <= sizeof authority; len++)
        for (size_t at = 0; at < len; at++)
            for (int c = 0; c < 256; c++) {
                authority[at] = (char)c;
                bool ok = check(xStrFromC("/"), (xStr){authority, len});
                CHECK_MSG(ok == authority_byte((unsigned char)c), "len %zu at %zu byte 0x%02x", len, at, c);
                authority[at] = 'h';
            }
}

int main(void) {
    RUN(test_every_byte_at_every_place_of_a_target);
    RUN(test_every_byte_at_every_place_of_an_authority);
    return CHECK_SUMMARY();
}
