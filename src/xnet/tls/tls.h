/* tls.h — TLS listeners and connections, for the layer that accepts them.
 *
 * A listener's OpenSSL contexts are built from an xTlsConf (one set per TLS
 * listener, swapped whole on reload). Per connection, a non-blocking
 * handshake runs in the worker's loop; then the records go to xKit's record
 * layer (tls_records.h), or stay with OpenSSL or the kernel, under the
 * connection's output queue. xnet/tls knows no HTTP: the caller names the
 * protocols ALPN offers and decides what a connection then speaks. It uses
 * <xhttp/tls_conf.h> only for the public settings and info types. */
#ifndef XNET_TLS_TLS_H
#define XNET_TLS_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <xhttp/tls_conf.h>

#include "xnet/connection.h"

#define XTLS_ALPN_NAMES 4

/** One TLS listener's settings and current certificates; shared by every
 *  worker (its state is locked where workers meet: accept and tickets). */
typedef struct xTlsServer xTlsServer;

/** What the listener's owner says and hears. */
typedef struct xTlsListen {
    const char *alpn[XTLS_ALPN_NAMES]; /**< protocols ALPN may choose, most preferred first */
    size_t num_alpn;
    /** The handshake is done: alpn is the index of the protocol ALPN chose
     *  in alpn[], or -1 when the client offered none. False closes conn. */
    bool (*on_established)(xConn *conn, int alpn, void *arg);
    /** The first byte was plain text (a capital letter, as a request line
     *  starts), not a TLS record; conn is back on the plain transport with
     *  nothing read. Other bytes that are not TLS fail the handshake.
     *  NULL: close it. */
    void (*on_plaintext)(xConn *conn, void *arg);
    void *arg;
} xTlsListen;

/** Builds the contexts for conf, reading every file. conf is this library's
 *  own xTlsConf (its struct_size is sizeof(xTlsConf)), not a caller's, which
 *  xHttpServerListenTls adopts first; listen is copied. On failure returns
 *  NULL with the reason in err. */
xTlsServer *xTlsServerCreate(const xTlsConf *conf, const xTlsListen *listen, char *err, size_t err_len);

/** Reads the files again and swaps the contexts in for new connections;
 *  on failure nothing changes and err says why. */
xErrno xTlsServerReload(xTlsServer *srv, char *err, size_t err_len);

/** Frees srv; its connections must be gone. */
void xTlsServerDestroy(xTlsServer *srv);

/** Logs, once per process, whether the kernel can take over TLS records. */
void xTlsLogKernelSupport(const xTlsConf *conf);

/** Takes an accepted socket and handshakes; srv's callbacks say how it went.
 *  Returns false (socket closed) on allocation failure. */
bool xTlsAccept(xNetContext *net, xTlsServer *srv, int fd, const xNetAddr *addr);

struct ssl_st;

/** A transport's sendv where OpenSSL keeps the records (the server's
 *  connections on other suites or kTLS, and the HTTP client's): one record's
 *  worth per call, small pieces gathered into one record and a large first
 *  piece passed straight through (partial writes are on). The bytes taken,
 *  or -1 with errno EAGAIN while the socket is full, another when the
 *  session broke; OpenSSL's error queue is left empty. */
ssize_t xTlsSslSendv(struct ssl_st *ssl, const struct iovec *iov, int iovcnt);

#endif
