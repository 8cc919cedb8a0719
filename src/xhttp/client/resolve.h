/* resolve.h — name resolution on a worker's loop for the upstream client:
 * c-ares with its sockets as level-triggered watches of the loop and its
 * timeouts as one loop timer, so a lookup never blocks the worker.
 *
 * One xResolver per pool (a client's upstream), so each may name servers
 * of its own. Nothing outside src/xhttp/client/ includes this. */
#ifndef XHTTP_CLIENT_RESOLVE_H
#define XHTTP_CLIENT_RESOLVE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include <xbase/event.h>

#define XRESOLVE_MAX_ADDRS 16

/** A name's addresses, each with the port already in it. */
typedef struct xResolvedAddrs {
    struct sockaddr_storage addr[XRESOLVE_MAX_ADDRS];
    socklen_t len[XRESOLVE_MAX_ADDRS];
    unsigned count;
    uint32_t ttl_s; /**< the smallest TTL among them (0 from /etc/hosts) */
} xResolvedAddrs;

typedef struct xResolver xResolver;

/** Called on the loop once a lookup ends: addrs NULL when it failed (error
 *  says why, in c-ares' words). Never called within xResolverLookup, nor
 *  for lookups still running at xResolverDestroy. */
typedef void (*xResolveDone)(void *arg, const xResolvedAddrs *addrs, const char *error);

/** A resolver on loop asking servers ("ip[:port],...", NULL: the system's
 *  /etc/resolv.conf), each try waiting timeout_ms. NULL when c-ares could
 *  not start (or servers is malformed). */
xResolver *xResolverCreate(xEventLoop *loop, const char *servers, uint32_t timeout_ms);

/** Whether servers ("ip[:port],...") is a list c-ares takes. */
bool xResolverServersValid(const char *servers);

/** Drops every lookup under way without a call, and frees r. */
void xResolverDestroy(xResolver *r);

/** Looks host up (A and AAAA, /etc/hosts first), port put into every
 *  address. False when the lookup could not start (no memory). */
bool xResolverLookup(xResolver *r, const char *host, uint16_t port, xResolveDone done, void *arg);

#endif
