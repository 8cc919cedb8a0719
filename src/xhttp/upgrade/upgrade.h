/* upgrade.h — the one place a connection's protocol is chosen or changed.
 *
 * A listener's plan says, once at listen time, what a cleartext connection
 * and each ALPN protocol lead to. Then per connection: the cleartext preface
 * sniff (HTTP/1.1 or HTTP/2 with prior knowledge), the start of what ALPN
 * chose after a TLS handshake, plain HTTP on a TLS port, and HTTP/1.1's
 * "Upgrade:" (h2c, and WebSocket on its routes), which HTTP/1.1 reaches through the
 * context's xHttpUpgrades table since protocols sit above this module. */
#ifndef XHTTP_UPGRADE_UPGRADE_H
#define XHTTP_UPGRADE_UPGRADE_H

#include <stdbool.h>
#include <stddef.h>

#include "xnet/tls/tls.h"
#include "xhttp/core/context.h"

/** What a connection speaks. */
typedef enum xHttpProtocol {
    XHTTP_SPEAKS_HTTP1,
    XHTTP_SPEAKS_HTTP2,
    XHTTP_SPEAKS_EITHER, /**< cleartext with both: the first bytes decide */
} xHttpProtocol;

/** A listener's protocol choices, decided once. */
typedef struct xUpgradePlan {
    xHttpProtocol cleartext;                /**< on a plain listener */
    const char *alpn[XTLS_ALPN_NAMES];      /**< what TLS offers, most preferred first */
    xHttpProtocol by_alpn[XTLS_ALPN_NAMES]; /**< what each of those leads to */
    size_t num_alpn;
    xHttpProtocol without_alpn; /**< a TLS client that offered no ALPN */
} xUpgradePlan;

/** Fills plan for a plain listener of a server speaking protocols
 *  (XHTTP_PROTO_* bits). */
void xUpgradePlanCleartext(xUpgradePlan *plan, unsigned protocols);

/** Fills plan for a TLS listener; alpn is its list ("h2,http/1.1"), or NULL
 *  for the default. On a bad list returns false with the reason in err. */
bool xUpgradePlanListener(xUpgradePlan *plan, unsigned protocols, const char *alpn, char *err,
                          size_t err_len);

/** What a TLS listener with plan tells xnet/tls: the names to offer, and
 *  the callbacks that start the chosen protocol. plan must outlive it. */
xTlsListen xUpgradeTlsListen(const xUpgradePlan *plan);

/** Serves an accepted cleartext socket as plan says. Returns false (socket
 *  closed) on allocation failure. */
bool xUpgradeAccept(xHttpContext *ctx, int fd, const xNetAddr *addr, const xUpgradePlan *plan);

/** The protocol changes HTTP/1.1 may ask for, for xHttpContext.upgrades. */
extern const xHttpUpgrades xUpgradeRequests;

#endif
