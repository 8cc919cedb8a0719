/* http1.h — HTTP/1.1 (RFC 9112) on an xConn: requests parsed in place,
 * pipelined responses batched into one write, strict rejection. */
#ifndef XHTTP_HTTP1_HTTP1_H
#define XHTTP_HTTP1_HTTP1_H

#include "xnet/connection.h"
#include "xhttp/core/context.h"

/** Serves HTTP/1.1 on an accepted socket. Returns false (socket closed) on
 *  allocation failure. */
bool xHttp1Accept(xHttpContext *ctx, int fd, const xNetAddr *addr);

/** Serves HTTP/1.1 on a connection another layer set up (TLS after ALPN, or
 *  the cleartext sniff, which leaves the bytes it read in conn->in: they are
 *  served first). Returns false on allocation failure; the connection is
 *  still the caller's. */
bool xHttp1Start(xConn *conn);

/** Serves HTTP/1.1 on conn only to refuse it: the first request (or the
 *  bytes that are not one) is answered status with text (static, ending in
 *  a newline) as its body, counted and logged as any response, and the
 *  connection closes. For plain HTTP sent to a TLS port. */
bool xHttp1StartRefusing(xConn *conn, int status, const char *text);

#endif
