/* websocket.h — WebSocket routes (RFC 6455): their settings and the two
 * handlers a route is served by. An HTTP/1.1 GET with a valid handshake is
 * answered 101 through the exchange (xHttpExchangeSwitch), and the
 * connection becomes the session's; an extended CONNECT (RFC 8441) keeps its
 * exchange open as a tunnel (HTTP/2 carries it on a stream). Either way the
 * session that follows (session.h) sends and reads frames (frame.h), with
 * permessage-deflate (deflate.h), over a transport table, so neither
 * protocol's code names WebSocket, nor WebSocket a protocol. */
#ifndef XHTTP_WEBSOCKET_WEBSOCKET_H
#define XHTTP_WEBSOCKET_WEBSOCKET_H

#include <stdbool.h>
#include <stddef.h>

#include <xhttp/server.h>
#include <xhttp/websocket.h>

/** A WebSocket route: its settings and the caller's argument. */
typedef struct xWsRoute {
    xWebSocketConf conf;
    void *arg;
} xWsRoute;

/** Checks conf and copies it (its first conf->struct_size bytes) into a new
 *  route. NULL with *err set: XERR_INVALID or XERR_NOMEM. */
xWsRoute *xWsRouteCreate(const xWebSocketConf *conf, void *arg, xErrno *err);

/** Frees a route (an xWsRoute *, as a route target's free_arg). */
void xWsRouteFree(void *route);

/** The handler of a WebSocket route's GET: a valid HTTP/1.1 handshake goes
 *  to on_open, and accepted, is answered 101 and becomes a session, or is
 *  answered with on_open's refusal; anything else gets 426 with "Upgrade:
 *  websocket" (a plain request), 426 with "Sec-WebSocket-Version: 13"
 *  (another version), or 400 (a bad key, a body, not HTTP/1.1). */
void xWsRouteHandler(xHttpRequest *req, xHttpResponse *res, void *arg);

/** The handler of a WebSocket route's "CONNECT path" (a streaming route):
 *  an RFC 8441 extended CONNECT with :protocol websocket, on a protocol that
 *  carries tunnels (xHttpTunnel.pending set), becomes a WebSocket on its
 *  stream after on_open (200, no Sec-WebSocket-Accept); anything else is
 *  answered 400 (501 for another :protocol). arg is the route. */
void xWsTunnelHandler(xHttpRequest *req, xHttpResponse *res, void *arg);

#endif
