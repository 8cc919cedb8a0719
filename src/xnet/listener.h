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

/** What becomes of the connections queued on a listening socket (accepted by
 *  the kernel, not yet by us) when it closes while other sockets of its
 *  SO_REUSEPORT group stay open. */
typedef enum xListenerHandover {
    XLISTENER_HANDOVER_DROPPED, /* reset: the kernel's default */
    XLISTENER_HANDOVER_SYSCTL,  /* moved to another socket: net.ipv4.tcp_migrate_req is 1 */
    XLISTENER_HANDOVER_PROGRAM, /* moved to the newest copy's sockets: our reuseport program */
} xListenerHandover;

/** Attaches to the SO_REUSEPORT group of fds (n listening sockets, one
 *  process's) a reuseport program that gives new connections to these
 *  sockets, spread by hash, until a later call gives them to another's, and
 *  hands a closing socket's queue (and its half-open handshakes) to them
 *  instead of resetting it (Linux 5.14's migration); once none of them
 *  listens, the kernel picks among those that do, as without the program.
 *  Loading it needs CAP_BPF or CAP_SYS_ADMIN; without, the queue is moved
 *  only when net.ipv4.tcp_migrate_req is 1 (XLISTENER_HANDOVER_SYSCTL), else
 *  XLISTENER_HANDOVER_DROPPED and errno. */
xListenerHandover xListenerHandOverOnClose(const int *fds, int n);

/** Closes a listening socket this process made and alone holds: it stops
 *  listening before this returns, its queue handed over (or reset) now. A
 *  close alone stops it only when the socket's last reference goes, and an
 *  io_uring request still in flight on it holds one until its cancellation
 *  is reaped, later, outside any lock the caller holds. Not for a socket
 *  inherited or passed by systemd: stopping it stops every holder's. */
void xListenerCloseOwn(int fd);

/** Takes a listening socket made elsewhere (inherited, passed by systemd):
 *  checks it is a TCP socket that listens (listen(2) on a bound one that
 *  does not yet, with backlog) and makes it non-blocking. false with errno
 *  (ENOTSOCK, EPROTOTYPE for another kind, EINVAL for one that is not bound). */
bool xListenerAdopt(int fd, int backlog);

/** The most sockets passed by systemd that are looked at, and the room for
 *  a name (systemd's FileDescriptorName= takes up to 255 characters). */
#define XLISTENER_PASSED_MAX 32
#define XLISTENER_NAME_MAX 256

/** A socket passed by systemd's socket activation. */
typedef struct xListenerPassed {
    int fd;
    char name[XLISTENER_NAME_MAX]; /* from LISTEN_FDNAMES; "unknown" without it */
} xListenerPassed;

/** The sockets systemd passed this process, as sd_listen_fds(3) and
 *  sd_listen_fds_with_names describe (our own reading, no libsystemd):
 *  LISTEN_PID must be this process's id and LISTEN_FDS counts descriptors
 *  from 3 (SD_LISTEN_FDS_START) on; LISTEN_FDNAMES names them, colons
 *  between. Fills up to max entries, marks them close-on-exec, and returns
 *  how many; 0 when none are for this process (a variable missing, another
 *  process's id, a malformed count). The variables are left as they are:
 *  a child's id differs, so none takes them twice. */
int xListenerSystemd(xListenerPassed *passed, int max);

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
