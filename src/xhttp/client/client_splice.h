/* client_splice.h — for a caller that moves a request's body to the
 * upstream's socket itself (the proxy's splice(2), xnet/splice.h) instead of
 * writing it: where the bytes may go, and telling the request they went.
 * HTTP/1.1 in cleartext with a Content-Length body only. */
#ifndef XHTTP_CLIENT_CLIENT_SPLICE_H
#define XHTTP_CLIENT_CLIENT_SPLICE_H

#include <stddef.h>

#include <xhttp/client.h>

#include "xnet/connection.h"

/** The connection req's next body bytes may be spliced to: *sink, once
 *  everything written before has left it (sent now where it can be); NULL
 *  when not now, and on_body_wanted says when to ask again. XERR_STATE: req
 *  is over (sending what waited failed it, and its on_error ran); XERR_INVALID: req cannot
 *  take spliced bytes (HTTP/2, TLS, a chunked body, a tunnel). */
xErrno xHttpClientRequestSpliceSink(xHttpClientRequest *req, xConn **sink);

/** n body bytes went to the connection past Write: they count as written,
 *  and req can no longer be sent again (a retry would lack them). */
void xHttpClientRequestSpliced(xHttpClientRequest *req, size_t n);

#endif
