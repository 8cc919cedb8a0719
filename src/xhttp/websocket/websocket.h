/* websocket.h — WebSocket connections (RFC 6455): the opening handshake's
 * checks and answer, then frames both ways (frame.h), with
 * permessage-deflate (deflate.h). Frames travel over a small transport
 * table with two members: an HTTP/1.1 connection taken over after its 101
 * (HTTP/1.1's Upgrade reaches it through the upgrade module), and an HTTP/2
 * stream opened by an extended CONNECT (RFC 8441), reached as a streaming
 * route through the exchange and its xHttpTunnel, so neither protocol's
 * code names the other. */
#ifndef XHTTP_WEBSOCKET_WEBSOCKET_H
#define XHTTP_WEBSOCKET_WEBSOCKET_H

#include <stdbool.h>
#include <stddef.h>

#include <xhttp/server.h>
#include <xhttp/websocket.h>

#include "xnet/connection.h"

/** A WebSocket route: its settings and the caller's argument. */
typedef struct xWsRoute {
    xWebSocketConf conf;
    void *arg;
} xWsRoute;

/** Checks conf and copies it (its first conf->struct_size bytes) into a new
 *  route. NULL with *err set: XERR_INVALID or XERR_NOMEM. */
xWsRoute *xWsRouteCreate(const xWebSocketConf *conf, void *arg, xErrno *err);
void xWsRouteFree(xWsRoute *route);

/** The handler of a WebSocket route, for requests that are not upgraded:
 *  426 with "Upgrade: websocket" for a plain request, 426 with
 *  "Sec-WebSocket-Version: 13" for another version, 400 for a bad key. */
void xWsRouteHandler(xHttpRequest *req, xHttpResponse *res, void *arg);

/** The handler of a WebSocket route's "CONNECT path" (a streaming route):
 *  an RFC 8441 extended CONNECT with :protocol websocket, on a protocol that
 *  carries tunnels (xHttpTunnel.pending set), becomes a WebSocket on its
 *  stream after on_open (200, no Sec-WebSocket-Accept); anything else is
 *  answered 400 (501 for another :protocol). arg is the route. */
void xWsTunnelHandler(xHttpRequest *req, xHttpResponse *res, void *arg);

/** What xWsOffer decided. */
typedef enum xWsOfferResult {
    XWS_DECLINED, /**< not a valid handshake: serve req as HTTP (xWsRouteHandler answers) */
    XWS_ACCEPTED, /**< 101 queued; *ws waits for xWsStart or xWsDrop */
    XWS_REFUSED,  /**< on_open refused: its status is queued; HTTP/1.1 goes on */
} xWsOfferResult;

/** An HTTP/1.1 request for route asks to upgrade: checks the handshake,
 *  asks on_open, and queues the answer on conn. */
xWsOfferResult xWsOffer(xConn *conn, const xWsRoute *route, const xHttpRequest *req, xWebSocket **ws);

/** Hands conn to an accepted ws (flushing the 101); conn->in[start,) holds
 *  what followed the request: the client's first frames. */
void xWsStart(xConn *conn, xWebSocket *ws, size_t start);

/** Frees an accepted ws that will not start (its on_close runs with 1006). */
void xWsDrop(xWebSocket *ws);

#endif
