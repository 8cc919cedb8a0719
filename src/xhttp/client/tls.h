/* tls.h — TLS to an upstream (https://), for client.c: a context per
 * upstream (trust, verification, ALPN), a handshake driven by the
 * connecting socket's watch, then a transport under the connection's
 * output queue that reads and writes through OpenSSL. Sessions are kept
 * per pool and offered by each new connection, so a pool of connections
 * costs one full handshake. Nothing outside src/xhttp/client/ includes
 * this. */
#ifndef XHTTP_CLIENT_TLS_H
#define XHTTP_CLIENT_TLS_H

#include <stdbool.h>
#include <stddef.h>

#include <openssl/ssl.h>

#include "xnet/connection.h"

typedef struct xClientTls xClientTls;

/** Where a handshake stands after a step. */
typedef enum xClientTlsStep {
    XCTLS_DONE,
    XCTLS_WANT_READ,
    XCTLS_WANT_WRITE,
    XCTLS_FAILED,
} xClientTlsStep;

/** A context for an upstream reached as host (a name, or an address when
 *  literal) and checked as server_name (NULL: host). verify false trusts any
 *  certificate; ca_file NULL trusts the system's store; ALPN offers h2 when
 *  h2, else http/1.1. NULL with the reason
 *  in err on failure (an unreadable CA file). */
xClientTls *xClientTlsCreate(const char *host, bool literal, const char *server_name, const char *ca_file,
                             bool verify, bool h2, char *err, size_t err_len);

void xClientTlsDestroy(xClientTls *tls);

/** A client session on fd, offering *session (may be NULL) for resumption;
 *  new sessions the server issues land in *session (held by the caller,
 *  which frees it with SSL_SESSION_free) for as long as it lives. */
SSL *xClientTlsNew(xClientTls *tls, int fd, SSL_SESSION **session);

/** Moves the handshake on; on failure, why in words. */
xClientTlsStep xClientTlsHandshake(SSL *ssl, char *why, size_t why_len);

/** The session's slot is going (the pool is freed): sessions it issues
 *  later are dropped. */
void xClientTlsForget(SSL *ssl);

/** Puts conn, just made on the handshaken socket, on the TLS transport; it
 *  owns ssl from now on. */
void xClientTlsAttach(xConn *conn, SSL *ssl);

#endif
