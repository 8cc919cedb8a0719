/* address.c — a connection's addresses in compact form (address.h). */
#include "xnet/address.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

void xNetAddrSet(xNetAddr *addr, const struct sockaddr_storage *peer, uint16_t local_port) {
    memset(addr, 0, sizeof *addr);
    addr->local_port = local_port;
    if (peer->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)peer;
        memcpy(addr->bytes, &in->sin_addr, 4);
        addr->port = ntohs(in->sin_port);
        addr->family = AF_INET;
    } else if (peer->ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)peer;
        addr->port = ntohs(in6->sin6_port);
        if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
            memcpy(addr->bytes, &in6->sin6_addr.s6_addr[12], 4);
            addr->family = AF_INET;
        } else {
            memcpy(addr->bytes, &in6->sin6_addr, 16);
            addr->family = AF_INET6;
        }
    }
}

/* Dotted IPv4 by hand: glibc's inet_ntop formats it with sprintf, which a
 * proxy's X-Forwarded-For paid on every request. */
static bool format_ipv4(const uint8_t *b, char *buf, size_t size) {
    char text[16], *p = text;
    for (int i = 0; i < 4; i++) {
        unsigned v = b[i];
        if (v >= 100) *p++ = (char)('0' + v / 100);
        if (v >= 10) *p++ = (char)('0' + v / 10 % 10);
        *p++ = (char)('0' + v % 10);
        *p++ = i < 3 ? '.' : '\0';
    }
    if ((size_t)(p - text) > size) return false;
    memcpy(buf, text, (size_t)(p - text));
    return true;
}

bool xNetAddrFormat(const xNetAddr *addr, char *buf, size_t size) {
    if (addr->family == AF_INET) return format_ipv4(addr->bytes, buf, size);
    if (addr->family != AF_INET6) return false;
    return inet_ntop(addr->family, addr->bytes, buf, (socklen_t)size) != NULL;
}
