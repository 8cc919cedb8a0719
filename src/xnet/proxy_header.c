/* proxy_header.c — the PROXY protocol's header, versions 1 and 2, read from
 * bytes that may stop anywhere, and the networks trusted to send it (proxy.h).
 * The formats are HAProxy's proxy-protocol.txt. */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "xnet/proxy.h"

static const char v1_signature[] = "PROXY ";
#define V1_SIGNATURE_LEN 6
static const uint8_t v2_signature[12] = {0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D,
                                         0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A};

/* v2's command (the low 4 bits of byte 12; the high ones are the version),
 * and its address family and transport (the high and low 4 bits of byte 13). */
enum { V2_LOCAL = 0x0, V2_PROXY = 0x1 };
enum { V2_AF_UNSPEC = 0x0, V2_AF_INET = 0x1, V2_AF_INET6 = 0x2, V2_AF_UNIX = 0x3 };
enum { V2_UNSPEC = 0x0, V2_STREAM = 0x1, V2_DGRAM = 0x2 };
/* The address block's size for each family: two addresses, then (INET and
 * INET6) two ports; UNIX's two paths of 108 bytes. */
static const size_t v2_address_len[] = {
    [V2_AF_UNSPEC] = 0, [V2_AF_INET] = 12, [V2_AF_INET6] = 36, [V2_AF_UNIX] = 216};

static xProxyVerdict malformed(xProxyHeader *out, const char *why) {
    out->error = why;
    return XPROXY_MALFORMED;
}

/* Whether the first len bytes agree with sig's first len. */
static bool agrees(const uint8_t *data, size_t len, const void *sig, size_t sig_len) {
    return memcmp(data, sig, len < sig_len ? len : sig_len) == 0;
}

/* ---- Version 1: "PROXY TCP4 192.0.2.1 198.51.100.1 56324 443\r\n" ---- */

/* A port: 1 to 5 digits, no leading zero (but "0"), at most 65535. */
static bool v1_port(const char *s, size_t n, uint16_t *port) {
    if (n == 0 || n > 5 || (s[0] == '0' && n > 1)) return false;
    unsigned v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    if (v > 65535) return false;
    *port = (uint16_t)v;
    return true;
}

static bool v1_address(const char *s, size_t n, int family, uint8_t bytes[16]) {
    char text[XNET_ADDR_TEXT];
    if (n == 0 || n >= sizeof text) return false;
    memcpy(text, s, n);
    text[n] = '\0';
    return inet_pton(family, text, bytes) == 1;
}

/* Sets addr from 16 bytes of IPv6, as accept would: an IPv4-mapped address
 * (::ffff:a.b.c.d) is IPv4. */
static void set_ipv6(xNetAddr *addr, const uint8_t bytes[16]) {
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    memset(addr->bytes, 0, sizeof addr->bytes);
    if (memcmp(bytes, mapped, sizeof mapped) == 0) {
        memcpy(addr->bytes, bytes + 12, 4);
        addr->family = AF_INET;
    } else {
        memcpy(addr->bytes, bytes, 16);
        addr->family = AF_INET6;
    }
}

static xProxyVerdict parse_v1(const uint8_t *data, size_t len, xProxyHeader *out) {
    /* The line ends at CRLF within 107 bytes; until then, only printable
     * ASCII (the spec's fields are all that) may come. */
    size_t end = 0;
    for (size_t i = V1_SIGNATURE_LEN; i < len && !end; i++) {
        /* CR at 105 and LF at 106 is the last CRLF that fits in 107 bytes. */
        if (i + 1 >= XPROXY_V1_MAX) return malformed(out, "v1: no CRLF within 107 bytes");
        if (data[i] == '\r') {
            if (i + 1 == len) return XPROXY_MORE;
            if (data[i + 1] != '\n') return malformed(out, "v1: CR without LF");
            end = i;
        } else if (data[i] < 0x20 || data[i] > 0x7e) {
            return malformed(out, "v1: a byte that is not printable ASCII");
        }
    }
    if (!end) return len >= XPROXY_V1_MAX ? malformed(out, "v1: no CRLF within 107 bytes") : XPROXY_MORE;
    out->version = 1;
    out->len = end + 2;
    out->has_address = false;
    const char *line = (const char *)data + V1_SIGNATURE_LEN, *stop = (const char *)data + end;
    /* Fields one space apart: the protocol, then for TCP4 and TCP6 the source
     * and destination addresses and ports. */
    const char *field[5] = {0};
    size_t field_len[5] = {0}, count = 0;
    for (const char *p = line; p <= stop && count < 5;) {
        const char *space = memchr(p, ' ', (size_t)(stop - p));
        const char *field_end = space ? space : stop;
        field[count] = p;
        field_len[count++] = (size_t)(field_end - p);
        if (!space) break;
        p = space + 1;
        /* UNKNOWN: whatever follows is ignored (the spec's "any" case). */
        if (count == 1 && field_len[0] == 7 && memcmp(field[0], "UNKNOWN", 7) == 0) return XPROXY_OK;
        if (count == 5) return malformed(out, "v1: more than five fields");
    }
    if (count == 1 && field_len[0] == 7 && memcmp(field[0], "UNKNOWN", 7) == 0) return XPROXY_OK;
    int family;
    if (field_len[0] == 4 && memcmp(field[0], "TCP4", 4) == 0)
        family = AF_INET;
    else if (field_len[0] == 4 && memcmp(field[0], "TCP6", 4) == 0)
        family = AF_INET6;
    else
        return malformed(out, "v1: the protocol is not TCP4, TCP6 or UNKNOWN");
    if (count != 5) return malformed(out, "v1: TCP4 and TCP6 take two addresses and two ports");
    uint8_t source[16], destination[16];
    if (!v1_address(field[1], field_len[1], family, source) ||
        !v1_address(field[2], field_len[2], family, destination))
        return malformed(out, "v1: an address that is not of the protocol's family");
    if (!v1_port(field[3], field_len[3], &out->source.port) ||
        !v1_port(field[4], field_len[4], &out->destination_port))
        return malformed(out, "v1: a port that is not a decimal 0-65535");
    if (family == AF_INET) {
        memset(out->source.bytes, 0, sizeof out->source.bytes);
        memcpy(out->source.bytes, source, 4);
        out->source.family = AF_INET;
    } else {
        set_ipv6(&out->source, source);
    }
    out->has_address = true;
    return XPROXY_OK;
}

/* ---- Version 2: a 16-byte fixed part, addresses, TLVs ---- */

static xProxyVerdict parse_v2(const uint8_t *data, size_t len, xProxyHeader *out) {
    if (len < XPROXY_V2_FIXED) return XPROXY_MORE;
    unsigned version = data[12] >> 4, command = data[12] & 0xf;
    unsigned family = data[13] >> 4, transport = data[13] & 0xf;
    size_t body = (size_t)data[14] << 8 | data[15];
    if (version != 2) return malformed(out, "v2: a version other than 2");
    if (command != V2_LOCAL && command != V2_PROXY)
        return malformed(out, "v2: a command other than LOCAL or PROXY");
    if (family > V2_AF_UNIX || transport > V2_DGRAM)
        return malformed(out, "v2: an unknown family or transport");
    if (body > XPROXY_V2_MAX_BODY)
        return malformed(out, "v2: longer than the 512 bytes accepted after its fixed part");
    if (len < XPROXY_V2_FIXED + body) return XPROXY_MORE;
    out->version = 2;
    out->len = XPROXY_V2_FIXED + body;
    out->has_address = false;
    /* LOCAL: the proxy speaks for itself (a health check); the spec has the
     * receiver use the connection's own addresses and skip the rest. */
    if (command == V2_LOCAL) return XPROXY_OK;
    size_t addresses = v2_address_len[family];
    if (body < addresses) return malformed(out, "v2: shorter than its family's addresses");
    if (transport == V2_DGRAM) return malformed(out, "v2: a datagram's addresses on a stream listener");
    /* TLVs fill the rest (type, 16-bit length, value); none is used here,
     * but each must fit. */
    const uint8_t *p = data + XPROXY_V2_FIXED + addresses, *stop = data + XPROXY_V2_FIXED + body;
    while (p < stop) {
        if (stop - p < 3) return malformed(out, "v2: a TLV cut short");
        size_t n = (size_t)p[1] << 8 | p[2];
        if ((size_t)(stop - p - 3) < n) return malformed(out, "v2: a TLV longer than the header");
        p += 3 + n;
    }
    const uint8_t *a = data + XPROXY_V2_FIXED;
    if (transport != V2_STREAM || (family != V2_AF_INET && family != V2_AF_INET6))
        return XPROXY_OK; /* UNSPEC, or a UNIX socket's path: the connection's own address stands */
    if (family == V2_AF_INET) {
        memset(out->source.bytes, 0, sizeof out->source.bytes);
        memcpy(out->source.bytes, a, 4);
        out->source.family = AF_INET;
        out->source.port = (uint16_t)(a[8] << 8 | a[9]);
        out->destination_port = (uint16_t)(a[10] << 8 | a[11]);
    } else {
        set_ipv6(&out->source, a);
        out->source.port = (uint16_t)(a[32] << 8 | a[33]);
        out->destination_port = (uint16_t)(a[34] << 8 | a[35]);
    }
    out->has_address = true;
    return XPROXY_OK;
}

xProxyVerdict xProxyParse(const uint8_t *data, size_t len, xProxyHeader *out) {
    *out = (xProxyHeader){0};
    if (len > 0 && agrees(data, len, v1_signature, V1_SIGNATURE_LEN))
        return len < V1_SIGNATURE_LEN ? XPROXY_MORE : parse_v1(data, len, out);
    if (len > 0 && agrees(data, len, v2_signature, sizeof v2_signature))
        return len < sizeof v2_signature ? XPROXY_MORE : parse_v2(data, len, out);
    return len == 0 ? XPROXY_MORE : XPROXY_NONE;
}

/* ---- Trusted networks ---- */

static bool parse_network(xProxyNetwork *net, const char *s, size_t n) {
    char text[64];
    if (n == 0 || n >= sizeof text) return false;
    memcpy(text, s, n);
    text[n] = '\0';
    char *slash = strchr(text, '/');
    if (slash) *slash = '\0';
    *net = (xProxyNetwork){0};
    if (inet_pton(AF_INET, text, net->bytes) == 1)
        net->family = AF_INET;
    else if (inet_pton(AF_INET6, text, net->bytes) == 1)
        net->family = AF_INET6;
    else
        return false;
    unsigned bits = net->family == AF_INET ? 32 : 128, prefix = bits;
    if (slash) {
        const char *d = slash + 1;
        if (!*d || strlen(d) > 3 || (d[0] == '0' && d[1])) return false;
        prefix = 0;
        for (; *d; d++) {
            if (*d < '0' || *d > '9') return false;
            prefix = prefix * 10 + (unsigned)(*d - '0');
        }
        if (prefix > bits) return false;
    }
    net->prefix = (uint8_t)prefix;
    /* No bit may be set past the prefix: 10.0.0.1/8 is a typo for something. */
    for (unsigned i = prefix; i < bits; i++)
        if (net->bytes[i / 8] & (0x80 >> (i % 8))) return false;
    return true;
}

bool xProxyTrustParse(xProxyTrust *trust, const char *list, char *err, size_t err_len) {
    trust->count = 0;
    for (const char *p = list ? list : ""; *p;) {
        p += strspn(p, ", ");
        size_t n = strcspn(p, ", ");
        if (n == 0) break;
        if (trust->count == XPROXY_MAX_NETWORKS) {
            snprintf(err, err_len, "proxy protocol: more than %d trusted networks", XPROXY_MAX_NETWORKS);
            return false;
        }
        if (!parse_network(&trust->networks[trust->count], p, n)) {
            snprintf(err, err_len,
                     "proxy protocol: '%.*s' is not a network (an IPv4 or IPv6 address, /prefix, no bits set "
                     "past it)",
                     (int)(n > 64 ? 64 : n), p);
            return false;
        }
        trust->count++;
        p += n;
    }
    if (trust->count == 0) {
        snprintf(err, err_len, "proxy protocol: no trusted network given");
        return false;
    }
    return true;
}

bool xProxyTrusted(const xProxyTrust *trust, const xNetAddr *addr) {
    for (size_t k = 0; k < trust->count; k++) {
        const xProxyNetwork *net = &trust->networks[k];
        if (net->family != addr->family) continue;
        unsigned whole = net->prefix / 8, rest = net->prefix % 8;
        if (memcmp(net->bytes, addr->bytes, whole) != 0) continue;
        if (rest && ((net->bytes[whole] ^ addr->bytes[whole]) & (uint8_t)(0xff00 >> rest))) continue;
        return true;
    }
    return false;
}
