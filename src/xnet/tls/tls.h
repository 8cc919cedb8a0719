/* tls.h — the TLS transport: OpenSSL contexts built from an
 * xTlsConf (one set per TLS listener, swapped whole on reload), and per
 * connection a non-blocking handshake in the worker's loop, then records
 * read and written under the connection's output queue. */
#ifndef XNET_TLS_TLS_H
#define XNET_TLS_TLS_H

#include <stdbool.h>
#include <stddef.h>

#include <xhttp/tls.h>

#include "xnet/connection.h"

/** One TLS listener's settings and current certificates; shared by every
 *  worker (its state is locked where workers meet: accept and tickets). */
typedef struct xTlsServer xTlsServer;

/** Starts the protocol that ALPN chose ("h2", "http/1.1", or "" for none) on
 *  an established connection. Returns false when it could not (the
 *  connection is then closed by the caller). */
typedef bool (*xTlsStartFn)(xConn *conn, const char *alpn);

/** Builds the contexts for conf, reading every file. protocols are the
 *  server's XHTTP_PROTO_* bits, to trim the default ALPN list. On failure
 *  returns NULL with the reason in err. */
xTlsServer *xTlsServerCreate(const xTlsConf *conf, unsigned protocols, char *err, size_t err_len);

/** Reads the files again and swaps the contexts in for new connections;
 *  on failure nothing changes and err says why. */
xErrno xTlsServerReload(xTlsServer *srv, char *err, size_t err_len);

/** Frees srv once no connection uses it. */
void xTlsServerDestroy(xTlsServer *srv);

/** Logs, once per process, whether the kernel can take over TLS records. */
void xTlsLogKernelSupport(const xTlsConf *conf);

/** Takes an accepted socket: handshakes, then calls start. Returns false
 *  (socket closed) on allocation failure. */
bool xTlsAccept(xNetContext *net, xTlsServer *srv, int fd, xTlsStartFn start);

/** Fills info for a connection on the TLS transport; false for any other. */
bool xTlsConnInfo(const xConn *conn, xTlsInfo *info);

#endif
