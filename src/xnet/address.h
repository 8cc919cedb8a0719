/* address.h — a connection's addresses in compact form: the peer's address
 * and port as accept(2) gave them, and the port it connected to. 22 bytes a
 * connection instead of a 128-byte sockaddr_storage; the text form is made
 * only when asked for. No HTTP. */
#ifndef XNET_ADDRESS_H
#define XNET_ADDRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/** Room for any address as text, with its NUL (INET6_ADDRSTRLEN). */
#define XNET_ADDR_TEXT 46

typedef struct xNetAddr {
    uint8_t bytes[16];   /* network order: the first 4 for IPv4, all 16 for IPv6 */
    uint16_t port;       /* the peer's, host order */
    uint16_t local_port; /* ours: the listener's */
    uint8_t family;      /* AF_INET, AF_INET6, or 0: unknown */
} xNetAddr;

/** Takes the peer's address from what accept(2) filled. An IPv4 client of a
 *  dual-stack IPv6 listener (::ffff:a.b.c.d) becomes plain IPv4; another
 *  family leaves family 0. local_port is set as given. */
void xNetAddrSet(xNetAddr *addr, const struct sockaddr_storage *peer, uint16_t local_port);

/** Writes the peer's address as text ("192.0.2.7", "2001:db8::1") into buf
 *  (size >= XNET_ADDR_TEXT suffices); false when the family is unknown or
 *  buf is too small. */
bool xNetAddrFormat(const xNetAddr *addr, char *buf, size_t size);

#endif
