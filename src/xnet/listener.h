/* listener.h — listening sockets: an address resolved, one socket bound per
 * worker (SO_REUSEPORT, so the kernel spreads connections over workers), and
 * accepting that sheds connections at the descriptor limit instead of
 * stalling. No HTTP: what an accepted socket speaks is the caller's choice. */
#ifndef XNET_LISTENER_H
#define XNET_LISTENER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include <xbase/errno.h>

#include "xnet/address.h"

/** host:port as a socket address (host NULL or "": every IPv4 address).
 *  XERR_ADDR when it does not resolve. */
xErrno xListenerResolve(const char *host, uint16_t port, struct sockaddr_storage *addr, socklen_t *len);

/** A non-blocking TCP socket bound to addr (SO_REUSEPORT when reuseport), not
 *  yet listening; -1 with errno on failure. */
int xListenerOpen(const struct sockaddr_storage *addr, socklen_t len, bool reuseport);

/** The local port of a bound socket, or 0. */
uint16_t xListenerPort(int fd);

/** addr's port. */
uint16_t xListenerPortOf(const struct sockaddr_storage *addr);

/** Sets addr's port. */
void xListenerSetPort(struct sockaddr_storage *addr, uint16_t port);

/** The next pending connection, non-blocking with TCP_NODELAY, or -1 when
 *  none is left. *peer gets its address, from accept itself (no extra
 *  system call), and port, the listener's own, as the local port. At the descriptor limit a pending
 * connection would stay in the backlog and, edge-triggered, never be reported again: the spare descriptor
 * (*spare_fd, kept open for this) is given up to accept and close it, so its client sees a close rather than
 * a hang; -1 once none is pending, so a full server never spins. Refusals are logged once a second at most.
 */
int xListenerAccept(int listen_fd, uint16_t port, int *spare_fd, xNetAddr *peer);

#endif
