/* client_splice.h — for a caller that moves a request's body to the
 * upstream's socket itself (the proxy's splice(2), xnet/splice.h) instead of
 * writing it: where the bytes may go, and telling the request they went;
 * and for one that takes a response's body off the upstream's socket
 * itself, the same way. HTTP/1.1 in cleartext with a Content-Length body
 * only. */
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

/** What a response body taker did (xHttpClientBodyTaker). */
typedef enum xClientTake {
    XCLIENT_TOOK,       /* bytes were taken off the socket (*took of them) */
    XCLIENT_TAKE_LATER, /* none now: the socket is drained, or the taker paused req until its sink has room */
    XCLIENT_TAKE_READ,  /* not this way now (bytes wait received ahead): read the socket as usual */
    XCLIENT_TAKE_ENDED, /* the socket ended or failed: the body is cut short */
} xClientTake;

/** Takes response body bytes off the upstream's socket (from) itself, at
 *  most left of them, and says how many in *took: they count as the body's,
 *  and on_body never hears them. Called where the client would read the
 *  socket for more of a Content-Length body, with none of it in the
 *  connection's buffer. It may pause or cancel req. */
typedef xClientTake (*xHttpClientBodyTaker)(xHttpClientRequest *req, xConn *from, uint64_t left, size_t *took,
                                            void *arg);

/** From now on, req's HTTP/1.1 response body of known length, over
 *  cleartext, is offered to taker (with arg) before it is read; NULL: read
 *  as usual. */
void xHttpClientRequestTakeBody(xHttpClientRequest *req, xHttpClientBodyTaker taker, void *arg);

#endif
