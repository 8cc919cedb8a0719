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

bool xNetAddrFormat(const xNetAddr *addr, char *buf, size_t size) {
    if (addr->family != AF_INET && addr->family != AF_INET6) return false;
    return inet_ntop(addr->family, addr->bytes, buf, (socklen_t)size) != NULL;
}
