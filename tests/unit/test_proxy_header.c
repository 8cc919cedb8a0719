/* test_proxy_header.c — the PROXY protocol header (src/xnet/proxy.h): the v1
 * examples of HAProxy's proxy-protocol.txt, v2 headers built byte by byte,
 * each malformed shape with its reason, headers cut at every byte, IPv4 text
 * (xNetAddrFormat), the trusted networks' lists and matching, and headers
 * xProxyWrite makes read back. */
#include <arpa/inet.h>
#include <string.h>
#include <sys/socket.h>

#include "check.h"
#include "xnet/proxy.h"

static xProxyVerdict parse_text(const char *text, xProxyHeader *h) {
    return xProxyParse((const uint8_t *)text, strlen(text), h);
}

static void check_address(const xProxyHeader *h, int family, const char *address, uint16_t port) {
    char text[XNET_ADDR_TEXT];
    CHECK(h->has_address);
    CHECK_EQ_INT(h->source.family, family);
    CHECK(xNetAddrFormat(&h->source, text, sizeof text));
    CHECK_MSG(strcmp(text, address) == 0, "%s, not %s", text, address);
    CHECK_EQ_INT(h->source.port, port);
}

/* Every prefix of a valid header waits for more. */
static void check_prefixes_wait(const uint8_t *data, size_t len) {
    xProxyHeader h;
    for (size_t n = 0; n < len; n++)
        CHECK_MSG(xProxyParse(data, n, &h) == XPROXY_MORE, "%zu of %zu bytes", n, len);
}

static void test_v1_examples_from_the_spec(void) {
    xProxyHeader h;
    /* proxy-protocol.txt §2.1's examples, and its longest lines. */
    const char *tcp4 = "PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\nGET / HTTP/1.1\r\n";
    CHECK_EQ_INT(parse_text(tcp4, &h), XPROXY_OK);
    CHECK_EQ_INT(h.len, strlen("PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n"));
    CHECK_EQ_INT(h.version, 1);
    check_address(&h, AF_INET, "192.168.0.1", 56324);
    CHECK_EQ_INT(h.destination_port, 443);
    check_prefixes_wait((const uint8_t *)tcp4, h.len);

    CHECK_EQ_INT(parse_text("PROXY TCP4 255.255.255.255 255.255.255.255 65535 65535\r\n", &h), XPROXY_OK);
    check_address(&h, AF_INET, "255.255.255.255", 65535);
    const char *tcp6 = "PROXY TCP6 ffff:f...f:ffff ffff:f...f:ffff 65535 65535\r\n";
    CHECK_EQ_INT(parse_text(tcp6, &h), XPROXY_MALFORMED); /* the spec's elided form is no address */
    const char *longest =
        "PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff "
        "65535 65535\r\n";
    CHECK_EQ_INT(strlen(longest), 104);
    CHECK_EQ_INT(parse_text(longest, &h), XPROXY_OK);
    check_address(&h, AF_INET6, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 65535);
    CHECK_EQ_INT(parse_text("PROXY TCP6 2001:db8::1 2001:db8::2 0 8080\r\n", &h), XPROXY_OK);
    check_address(&h, AF_INET6, "2001:db8::1", 0);
    /* An IPv4-mapped IPv6 address is IPv4, as accept would have given it. */
    CHECK_EQ_INT(parse_text("PROXY TCP6 ::ffff:192.0.2.9 ::1 1234 80\r\n", &h), XPROXY_OK);
    check_address(&h, AF_INET, "192.0.2.9", 1234);

    /* UNKNOWN: the connection's own address stands, and the rest of the line
     * (the spec's 107-byte worst case) is skipped. */
    CHECK_EQ_INT(parse_text("PROXY UNKNOWN\r\n", &h), XPROXY_OK);
    CHECK_EQ_INT(h.len, 15);
    CHECK(!h.has_address);
    const char *unknown =
        "PROXY UNKNOWN ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff "
        "65535 65535\r\n";
    CHECK_EQ_INT(strlen(unknown), XPROXY_V1_MAX);
    CHECK_EQ_INT(parse_text(unknown, &h), XPROXY_OK);
    CHECK_EQ_INT(h.len, XPROXY_V1_MAX);
    CHECK(!h.has_address);
}

static void test_v1_malformed_each_with_its_reason(void) {
    static const struct {
        const char *text, *why;
    } cases[] = {
        {"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\n", "not printable"}, /* LF alone */
        {"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\rX", "CR without LF"},
        {"PROXY TCP5 192.168.0.1 192.168.0.11 56324 443\r\n", "not TCP4, TCP6 or UNKNOWN"},
        {"PROXY tcp4 192.168.0.1 192.168.0.11 56324 443\r\n", "not TCP4, TCP6 or UNKNOWN"},
        {"PROXY \r\n", "not TCP4, TCP6 or UNKNOWN"},
        {"PROXY TCP4 192.168.0.1 192.168.0.11 56324\r\n", "two addresses and two ports"},
        {"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443 9\r\n", "more than five fields"},
        {"PROXY TCP4  192.168.0.1 192.168.0.11 56324 443\r\n", "more than five fields"},
        {"PROXY TCP4 2001:db8::1 192.168.0.11 56324 443\r\n", "not of the protocol's family"},
        {"PROXY TCP6 192.168.0.1 2001:db8::1 56324 443\r\n", "not of the protocol's family"},
        {"PROXY TCP4 192.168.0.256 192.168.0.11 56324 443\r\n", "not of the protocol's family"},
        {"PROXY TCP4 192.168.0.1 192.168.0.11 65536 443\r\n", "a decimal 0-65535"},
        {"PROXY TCP4 192.168.0.1 192.168.0.11 056324 443\r\n", "a decimal 0-65535"},
        {"PROXY TCP4 192.168.0.1 192.168.0.11 -1 443\r\n", "a decimal 0-65535"},
        {"PROXY TCP4 192.168.0.1 192.168.0.11 443 \r\n", "a decimal 0-65535"},
        {"PROXY TCP4 192.168.0.1\t192.168.0.11 56324 443\r\n", "not printable"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        xProxyHeader h;
        CHECK_MSG(parse_text(cases[i].text, &h) == XPROXY_MALFORMED, "case %zu", i);
        CHECK_MSG(h.error && strstr(h.error, cases[i].why), "case %zu: %s", i, h.error ? h.error : "(none)");
    }
    /* No CRLF within 107 bytes: refused at the 107th, not waited for. */
    char line[200];
    memset(line, 'A', sizeof line);
    memcpy(line, "PROXY UNKNOWN ", 14);
    xProxyHeader h;
    CHECK_EQ_INT(xProxyParse((const uint8_t *)line, 106, &h), XPROXY_MORE);
    CHECK_EQ_INT(xProxyParse((const uint8_t *)line, 107, &h), XPROXY_MALFORMED);
    CHECK(strstr(h.error, "107"));
    CHECK_EQ_INT(xProxyParse((const uint8_t *)line, sizeof line, &h), XPROXY_MALFORMED);
}

static const uint8_t v2_sig[12] = {0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A};

/* A v2 header: signature, version/command, family/transport, body. */
static size_t v2(uint8_t *out, uint8_t ver_cmd, uint8_t fam, const uint8_t *body, size_t body_len) {
    memcpy(out, v2_sig, 12);
    out[12] = ver_cmd;
    out[13] = fam;
    out[14] = (uint8_t)(body_len >> 8);
    out[15] = (uint8_t)body_len;
    if (body_len) memcpy(out + 16, body, body_len);
    return 16 + body_len;
}

static void test_v2_proxy_over_ipv4_and_ipv6(void) {
    uint8_t buf[600], body[300];
    xProxyHeader h;
    /* TCP over IPv4: 192.0.2.7:40000 -> 198.51.100.1:443, then a request. */
    const uint8_t inet[12] = {192, 0, 2, 7, 198, 51, 100, 1, 0x9c, 0x40, 0x01, 0xbb};
    size_t n = v2(buf, 0x21, 0x11, inet, sizeof inet);
    memcpy(buf + n, "GET / HTTP/1.1\r\n", 16);
    CHECK_EQ_INT(xProxyParse(buf, n + 16, &h), XPROXY_OK);
    CHECK_EQ_INT(h.len, 28);
    CHECK_EQ_INT(h.version, 2);
    check_address(&h, AF_INET, "192.0.2.7", 40000);
    CHECK_EQ_INT(h.destination_port, 443);
    check_prefixes_wait(buf, n);

    /* TCP over IPv6 with TLVs after the addresses (ALPN, authority, NOOP). */
    uint8_t inet6[36] = {
        0x20,        0x01,        0x0d,        0xb8,        [15] = 0x05, [16] = 0x20, [17] = 0x01,
        [18] = 0x0d, [19] = 0xb8, [31] = 0x01, [32] = 0xd4, [33] = 0x31, [34] = 0x00, [35] = 0x50};
    memcpy(body, inet6, 36);
    const uint8_t tlvs[] = {0x01, 0x00, 0x02, 'h', '2', 0x02, 0x00, 0x03, 'a', '.', 'b', 0x04, 0x00, 0x00};
    memcpy(body + 36, tlvs, sizeof tlvs);
    n = v2(buf, 0x21, 0x21, body, 36 + sizeof tlvs);
    CHECK_EQ_INT(xProxyParse(buf, n, &h), XPROXY_OK);
    CHECK_EQ_INT(h.len, n);
    check_address(&h, AF_INET6, "2001:db8::5", 54321);
    CHECK_EQ_INT(h.destination_port, 80);
    check_prefixes_wait(buf, n);

    /* TLVs up to the bound are skipped; the length is the whole header. */
    memset(body, 0, sizeof body);
    memcpy(body, inet, 12);
    body[12] = 0xEE;
    body[13] = (uint8_t)((XPROXY_V2_MAX_BODY - 15) >> 8);
    body[14] = (uint8_t)(XPROXY_V2_MAX_BODY - 15);
    uint8_t big[XPROXY_MAX];
    memcpy(big, v2_sig, 12);
    big[12] = 0x21, big[13] = 0x11, big[14] = XPROXY_V2_MAX_BODY >> 8, big[15] = XPROXY_V2_MAX_BODY & 0xff;
    memset(big + 16, 0, XPROXY_V2_MAX_BODY);
    memcpy(big + 16, body, 15);
    CHECK_EQ_INT(xProxyParse(big, sizeof big, &h), XPROXY_OK);
    CHECK_EQ_INT(h.len, XPROXY_MAX);
}

static void test_v2_local_and_unspec_keep_the_connections_address(void) {
    uint8_t buf[64];
    xProxyHeader h;
    /* LOCAL (a health check): whatever follows the fixed part is skipped. */
    size_t n = v2(buf, 0x20, 0x00, NULL, 0);
    CHECK_EQ_INT(xProxyParse(buf, n, &h), XPROXY_OK);
    CHECK_EQ_INT(h.len, 16);
    CHECK(!h.has_address);
    const uint8_t inet[12] = {10, 0, 0, 1, 10, 0, 0, 2, 0, 1, 0, 2};
    n = v2(buf, 0x20, 0x11, inet, sizeof inet);
    CHECK_EQ_INT(xProxyParse(buf, n, &h), XPROXY_OK);
    CHECK(!h.has_address);
    /* PROXY with UNSPEC, and a UNIX socket's paths: no address we carry. */
    n = v2(buf, 0x21, 0x00, NULL, 0);
    CHECK_EQ_INT(xProxyParse(buf, n, &h), XPROXY_OK);
    CHECK(!h.has_address);
    uint8_t unix_paths[216] = {'/', 't', 'm', 'p'};
    uint8_t big[300];
    n = v2(big, 0x21, 0x31, unix_paths, sizeof unix_paths);
    CHECK_EQ_INT(xProxyParse(big, n, &h), XPROXY_OK);
    CHECK(!h.has_address);
}

static void test_v2_malformed_each_with_its_reason(void) {
    uint8_t buf[700];
    xProxyHeader h;
    const uint8_t inet[12] = {192, 0, 2, 7, 198, 51, 100, 1, 0, 80, 0, 80};
    static const struct {
        uint8_t ver_cmd, fam;
        size_t body_len;
        const char *why;
    } cases[] = {
        {0x11, 0x11, 12, "version other than 2"},
        {0x31, 0x11, 12, "version other than 2"},
        {0x22, 0x11, 12, "command other than LOCAL or PROXY"},
        {0x21, 0x41, 12, "unknown family or transport"},
        {0x21, 0x13, 12, "unknown family or transport"},
        {0x21, 0x11, 11, "shorter than its family's addresses"},
        {0x21, 0x21, 12, "shorter than its family's addresses"},
        {0x21, 0x12, 12, "datagram"},
        {0x21, 0x11, 14, "TLV cut short"},
        {0x21, 0x11, XPROXY_V2_MAX_BODY + 1, "longer than the 512 bytes"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t body[XPROXY_V2_MAX_BODY + 1] = {0};
        memcpy(body, inet, cases[i].body_len < 12 ? cases[i].body_len : 12);
        size_t n = v2(buf, cases[i].ver_cmd, cases[i].fam, body, cases[i].body_len);
        CHECK_MSG(xProxyParse(buf, n, &h) == XPROXY_MALFORMED, "case %zu", i);
        CHECK_MSG(h.error && strstr(h.error, cases[i].why), "case %zu: %s", i, h.error ? h.error : "(none)");
    }
    /* A TLV whose length runs past the header's. */
    uint8_t body[20];
    memcpy(body, inet, 12);
    body[12] = 0x01, body[13] = 0x00, body[14] = 0x09;
    memset(body + 15, 'x', 5);
    size_t n = v2(buf, 0x21, 0x11, body, sizeof body);
    CHECK_EQ_INT(xProxyParse(buf, n, &h), XPROXY_MALFORMED);
    CHECK(strstr(h.error, "TLV longer than the header"));
    /* The fixed part's faults are known from its 16 bytes, before the body. */
    v2(buf, 0x11, 0x11, inet, 12);
    CHECK_EQ_INT(xProxyParse(buf, 16, &h), XPROXY_MALFORMED);
    buf[12] = 0x21, buf[14] = 0x02, buf[15] = 0x01; /* 513 bytes to follow */
    CHECK_EQ_INT(xProxyParse(buf, 16, &h), XPROXY_MALFORMED);
}

static void test_other_first_bytes_are_no_header(void) {
    xProxyHeader h;
    static const char *const others[] = {"GET / HTTP/1.1\r\n",
                                         "PRI * HTTP/2.0\r\n",
                                         "\x16\x03\x01\x02\x00",
                                         "PROPFIND / HTTP/1.1\r\n",
                                         "PROXY",
                                         "\r\n\r\n\x01"};
    static const xProxyVerdict want[] = {XPROXY_NONE, XPROXY_NONE, XPROXY_NONE,
                                         XPROXY_NONE, XPROXY_MORE, XPROXY_NONE};
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
        CHECK_MSG(parse_text(others[i], &h) == want[i], "case %zu", i);
    /* The signatures alone wait; one byte off either is no header. */
    CHECK_EQ_INT(parse_text("PROXY ", &h), XPROXY_MORE);
    CHECK_EQ_INT(parse_text("PROXY_", &h), XPROXY_NONE);
    CHECK_EQ_INT(xProxyParse(v2_sig, 12, &h), XPROXY_MORE);
    CHECK_EQ_INT(xProxyParse(v2_sig, 0, &h), XPROXY_MORE);
}

static xNetAddr addr_of(const char *text) {
    xNetAddr a = {0};
    if (inet_pton(AF_INET, text, a.bytes) == 1)
        a.family = AF_INET;
    else if (inet_pton(AF_INET6, text, a.bytes) == 1)
        a.family = AF_INET6;
    return a;
}

static void test_trusted_networks(void) {
    xProxyTrust trust;
    char err[256];
    CHECK(xProxyTrustParse(&trust, "127.0.0.0/8, 10.1.0.0/16 ::1 2001:db8::/32,192.0.2.5", err, sizeof err));
    CHECK_EQ_INT(trust.count, 5);
    static const struct {
        const char *addr;
        bool trusted;
    } cases[] = {
        {"127.0.0.1", true},  {"127.255.255.255", true},  {"128.0.0.1", false},
        {"10.1.200.3", true}, {"10.2.0.1", false},        {"::1", true},
        {"::2", false},       {"2001:db8:ffff::1", true}, {"2001:db9::", false},
        {"192.0.2.5", true},  {"192.0.2.6", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        xNetAddr a = addr_of(cases[i].addr);
        CHECK_MSG(xProxyTrusted(&trust, &a) == cases[i].trusted, "%s", cases[i].addr);
    }
    CHECK(xProxyTrustParse(&trust, "0.0.0.0/0", err, sizeof err));
    xNetAddr any4 = addr_of("203.0.113.9"), any6 = addr_of("2001:db8::1");
    CHECK(xProxyTrusted(&trust, &any4));
    CHECK(!xProxyTrusted(&trust, &any6)); /* an IPv4 network holds no IPv6 address */
    CHECK(xProxyTrustParse(&trust, "10.0.0.0/6", err, sizeof err) == false); /* bits past the prefix */
    CHECK(strstr(err, "10.0.0.0/6"));
    static const char *const bad[] = {"",          " , ",         "10.0.0.1/8",   "10.0.0.0/33", "::/129",
                                      "10.0.0.0/", "10.0.0.0/08", "host.example", "10.0.0.0/8x", "1.2.3"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_MSG(!xProxyTrustParse(&trust, bad[i], err, sizeof err), "'%s' taken", bad[i]);
}

static xNetAddr written_addr(int family, const char *text, uint16_t port) {
    xNetAddr a = {.family = (uint8_t)family, .port = port};
    CHECK(inet_pton(family, text, a.bytes) == 1);
    return a;
}

/* What xProxyWrite makes, xProxyParse reads back: both versions, both
 * families, a mixed pair written IPv4-mapped, an unknown source. */
static void test_written_headers_read_back(void) {
    xNetAddr v4 = written_addr(AF_INET, "203.0.113.7", 4444), v4_dst = written_addr(AF_INET, "10.0.0.1", 80);
    xNetAddr v6 = written_addr(AF_INET6, "2001:db8::7", 5555),
             v6_dst = written_addr(AF_INET6, "2001:db8::1", 443);
    uint8_t out[XPROXY_WRITE_MAX];
    xProxyHeader h;
    for (int version = 1; version <= 2; version++) {
        size_t n = xProxyWrite(version, &v4, &v4_dst, out);
        CHECK_EQ_INT(xProxyParse(out, n, &h), XPROXY_OK);
        CHECK_EQ_INT(h.len, n);
        CHECK_EQ_INT(h.version, version);
        check_address(&h, AF_INET, "203.0.113.7", 4444);
        CHECK_EQ_INT(h.destination_port, 80);
        check_prefixes_wait(out, n);
        n = xProxyWrite(version, &v6, &v6_dst, out);
        CHECK_EQ_INT(xProxyParse(out, n, &h), XPROXY_OK);
        check_address(&h, AF_INET6, "2001:db8::7", 5555);
        CHECK_EQ_INT(h.destination_port, 443);
        n = xProxyWrite(version, &v4, &v6_dst, out);
        CHECK_EQ_INT(xProxyParse(out, n, &h), XPROXY_OK);
        CHECK_EQ_INT(h.len, n);
        CHECK_EQ_INT(h.source.port, 4444);
        xNetAddr unknown = {0};
        n = xProxyWrite(version, &unknown, &v4_dst, out);
        CHECK_EQ_INT(xProxyParse(out, n, &h), XPROXY_OK);
        CHECK(!h.has_address);
    }
    CHECK_EQ_INT(xProxyWrite(3, &v4, &v4_dst, out), 0);
    const char *line = "PROXY TCP4 203.0.113.7 10.0.0.1 4444 80\r\n";
    CHECK_EQ_INT(xProxyWrite(1, &v4, &v4_dst, out), strlen(line));
    CHECK(memcmp(out, line, strlen(line)) == 0);
}

/* IPv4 text is written by hand (not inet_ntop): every width of octet, and a
 * buffer one byte short of the text and its NUL. */
static void test_ipv4_text(void) {
    static const struct {
        uint8_t bytes[4];
        const char *text;
    } cases[] = {
        {{0, 0, 0, 0}, "0.0.0.0"},         {{255, 255, 255, 255}, "255.255.255.255"},
        {{10, 200, 3, 45}, "10.200.3.45"}, {{127, 0, 0, 1}, "127.0.0.1"},
        {{1, 99, 100, 9}, "1.99.100.9"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        xNetAddr a = {.family = AF_INET};
        memcpy(a.bytes, cases[i].bytes, 4);
        char text[XNET_ADDR_TEXT];
        CHECK(xNetAddrFormat(&a, text, sizeof text));
        CHECK_MSG(strcmp(text, cases[i].text) == 0, "%s, not %s", text, cases[i].text);
        CHECK(xNetAddrFormat(&a, text, strlen(cases[i].text) + 1));
        CHECK(!xNetAddrFormat(&a, text, strlen(cases[i].text)));
    }
}

int main(void) {
    RUN(test_ipv4_text);
    RUN(test_v1_examples_from_the_spec);
    RUN(test_written_headers_read_back);
    RUN(test_v1_malformed_each_with_its_reason);
    RUN(test_v2_proxy_over_ipv4_and_ipv6);
    RUN(test_v2_local_and_unspec_keep_the_connections_address);
    RUN(test_v2_malformed_each_with_its_reason);
    RUN(test_other_first_bytes_are_no_header);
    RUN(test_trusted_networks);
    return CHECK_SUMMARY();
}
