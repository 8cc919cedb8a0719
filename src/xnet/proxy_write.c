/* proxy_write.c — the PROXY protocol's header as a sender writes it
 * (HAProxy's proxy-protocol.txt, versions 1 and 2), for a proxy that tells
 * its upstream whom a connection is for. proxy_header.c reads them. */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "xnet/proxy.h"

/* v2's signature (§2.2), the same 12 bytes a reader looks for. */
static const uint8_t v2_signature[12] = {0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D,
                                         0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A};

/* addr's 16 bytes as IPv6: as they are, or IPv4-mapped (::ffff:a.b.c.d). */
static void as_ipv6(const xNetAddr *addr, uint8_t out[16]) {
    if (addr->family == AF_INET6) {
        memcpy(out, addr->bytes, 16);
        return;
    }
    memset(out, 0, 10);
    out[10] = out[11] = 0xFF;
    memcpy(out + 12, addr->bytes, 4);
}

static size_t write_v1(bool v6, const xNetAddr *src, const xNetAddr *dst, uint8_t *out) {
    char s[INET6_ADDRSTRLEN], d[INET6_ADDRSTRLEN];
    if (v6) {
        uint8_t a[16], b[16];
        as_ipv6(src, a);
        as_ipv6(dst, b);
        inet_ntop(AF_INET6, a, s, sizeof s);
        inet_ntop(AF_INET6, b, d, sizeof d);
    } else {
        inet_ntop(AF_INET, src->bytes, s, sizeof s);
        inet_ntop(AF_INET, dst->bytes, d, sizeof d);
    }
    int n = snprintf((char *)out, XPROXY_WRITE_MAX, "PROXY %s %s %s %u %u\r\n", v6 ? "TCP6" : "TCP4", s, d,
                     (unsigned)src->port, (unsigned)dst->port);
    return n > 0 && n < XPROXY_WRITE_MAX ? (size_t)n : 0;
}

static size_t write_v2(bool v6, const xNetAddr *src, const xNetAddr *dst, uint8_t *out) {
    memcpy(out, v2_signature, sizeof v2_signature);
    out[12] = 0x21;             /* version 2, PROXY */
    out[13] = v6 ? 0x21 : 0x11; /* TCP over IPv6 or IPv4 */
    size_t body = v6 ? 36 : 12, at = 16;
    out[14] = (uint8_t)(body >> 8);
    out[15] = (uint8_t)body;
    if (v6) {
        as_ipv6(src, out + at);
        as_ipv6(dst, out + at + 16);
        at += 32;
    } else {
        memcpy(out + at, src->bytes, 4);
        memcpy(out + at + 4, dst->bytes, 4);
        at += 8;
    }
    out[at++] = (uint8_t)(src->port >> 8);
    out[at++] = (uint8_t)src->port;
    out[at++] = (uint8_t)(dst->port >> 8);
    out[at++] = (uint8_t)dst->port;
    return at;
}

size_t xProxyWrite(int version, const xNetAddr *source, const xNetAddr *destination, uint8_t *out) {
    if (version != 1 && version != 2) return 0;
    bool known = (source->family == AF_INET || source->family == AF_INET6) &&
                 (destination->family == AF_INET || destination->family == AF_INET6);
    if (!known && version == 1) {
        memcpy(out, "PROXY UNKNOWN\r\n", 15);
        return 15;
    }
    if (!known) { /* LOCAL: the connection's own addresses stand */
        memcpy(out, v2_signature, sizeof v2_signature);
        out[12] = 0x20;
        out[13] = out[14] = out[15] = 0;
        return 16;
    }
    bool v6 = source->family == AF_INET6 || destination->family == AF_INET6;
    return version == 1 ? write_v1(v6, source, destination, out) : write_v2(v6, source, destination, out);
}
