/* session.h — a WebSocket session: frames both ways (RFC 6455) over a
 * transport, whatever carries them.
 *
 * The frame logic (session.c) reads events from the transport's input,
 * answers pings and closes, delivers messages, keeps the idle and ping timers
 * and counts what went each way; it calls only the transport's table. Each
 * transport is a file of its own: an HTTP/1.1 connection taken over after its
 * 101 (over_connection.c), or an exchange kept open as a tunnel, which is how
 * HTTP/2 carries an RFC 8441 extended CONNECT (over_tunnel.c). A transport
 * calls back into the session through the functions at the end. */
#ifndef XHTTP_WEBSOCKET_SESSION_H
#define XHTTP_WEBSOCKET_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <xbase/buffer.h>
#include <xhttp/websocket.h>

#include "xnet/connection.h"
#include "xhttp/core/exchange.h"
#include "xhttp/websocket/deflate.h"
#include "xhttp/websocket/frame.h"
#include "xhttp/websocket/websocket.h"

#define XWS_MAX_PROTOCOL 64
#define XWS_MAX_EXTENSION 160

/* What carries a session's frames, filled by name. */
typedef struct xWsTransport {
    xBuffer *(*input)(xWebSocket *ws);          /* bytes received and not yet read; NULL once not open */
    bool (*fill)(xWebSocket *ws);               /* reads more into input; false: nothing more now */
    char *(*reserve)(xWebSocket *ws, size_t n); /* room to queue n bytes, or NULL */
    void (*commit)(xWebSocket *ws, size_t n);
    /* Queues data by reference; release(arg) runs once it is out, or at once. */
    xErrno (*write_ref)(xWebSocket *ws, const void *data, size_t len, void (*release)(void *), void *arg);
    void (*flush)(xWebSocket *ws);
    /* Flushes; true when output still waits for the peer: reading pauses
     * until the transport calls xWsOutputTaken. */
    bool (*hold)(xWebSocket *ws);
    size_t (*pending)(const xWebSocket *ws);          /* queued bytes the peer has not taken */
    bool (*open)(const xWebSocket *ws);               /* frames may still come and go */
    void (*set_timeout)(xWebSocket *ws, uint32_t ms); /* calls xWsTimeout(ws) then; 0: none */
    void (*finish)(xWebSocket *ws);                   /* ends once what is queued is out */
    void (*abort)(xWebSocket *ws);                    /* ends now */
    void (*retain)(xWebSocket *ws);
    void (*release)(xWebSocket *ws);
} xWsTransport;

/* Where a session's closing handshake stands (RFC 6455 §7). */
typedef enum xWsState {
    XWS_OPEN,       /* messages both ways */
    XWS_CLOSE_SENT, /* our close is queued: only the client's close is waited for */
    XWS_DONE,       /* the client closed or broke the protocol; our close went back: nothing is read */
} xWsState;

/* What every message touches comes first, in as few cache lines as it fits:
 * at hundreds of sessions a message's cost is mostly the lines of its
 * session's state that are no longer in the cache. */
struct xWebSocket {
    const xWsTransport *tr;
    xConn *conn; /* over a connection: the connection taken over */
    const xWsRoute *route;
    xEventLoop *loop;
    xWsState state;
    bool in_batch;      /* reading: sends are flushed once the batch is done */
    bool waiting_flush; /* reading stopped until the client takes our output */
    bool told;          /* on_close ran */
    bool ping_sent;     /* a keep-alive ping is out, not yet answered by any input */
    uint64_t last_input_ms;
    xWsDeflate *deflate;     /* permessage-deflate, when negotiated */
    xHttpSessionStats stats; /* for the log line of the exchange that became this session */
    xWsReader reader;
    xHttpExchange *ex; /* the request's exchange: finished when the session ends (a connection's),
                          or the tunnel's stream (until it ends) */
    xBuffer in, out;   /* over a tunnel: bytes from the stream not yet read; frames not yet written */
    xTimer timer;      /* over a tunnel: the idle, ping and close timer */
    unsigned refs;     /* over a tunnel: the stream's and xWebSocketRetain's */
    void *user;
    char protocol[XWS_MAX_PROTOCOL];
};

/** A session for route on tr, not yet open; NULL when out of memory. */
xWebSocket *xWsCreate(const xWsTransport *tr, xEventLoop *loop, const xWsRoute *route);

/** Frees ws and what it holds (not its transport). */
void xWsFree(xWebSocket *ws);

/** Asks on_open and negotiates what both sides agree on (subprotocol,
 *  permessage-deflate, whose response line goes into ext): 0, or the status
 *  to refuse with. A refused ws is freed here, its on_close run if on_open
 *  had said yes. */
int xWsOpen(xWebSocket *ws, const xHttpRequest *req, char ext[XWS_MAX_EXTENSION]);

/* ---- What a transport calls ---- */

/** Reads and handles what the transport's input holds, fills it and goes on
 *  while it may, then flushes. */
void xWsProcess(xWebSocket *ws);

/** The client's bytes came in: the idle count starts again. */
void xWsHeard(xWebSocket *ws);

/** The client took what was queued: timers restart, and reading resumes if
 *  backpressure had stopped it. */
void xWsOutputTaken(xWebSocket *ws);

/** The transport's timer fired. */
void xWsTimeout(xWebSocket *ws);

/** Arms the next idle or ping check, counted from the last input. */
void xWsArmTimer(xWebSocket *ws);

/** Tells on_close, once: code 1006 (XWS_CLOSE_ABNORMAL) when the transport
 *  went without a close. */
void xWsTell(xWebSocket *ws, uint16_t code, xStr reason);

/** The session cannot go on (the client broke the protocol, or memory ran
 *  out): our close with code goes out, and the transport finishes. */
void xWsFail(xWebSocket *ws, uint16_t code);

/** Sends our close (the server is stopping, or the application closes) and
 *  waits close_timeout_ms for the client's. */
xErrno xWsBeginClose(xWebSocket *ws, uint16_t code, const char *reason, size_t reason_len);

/* ---- The transports ---- */

/** Over an HTTP/1.1 connection after its 101 (over_connection.c), and over
 *  an exchange's tunnel (over_tunnel.c). */
extern const xWsTransport xWsConnectionTransport;
extern const xWsTransport xWsTunnelTransport;

/** Who takes an HTTP/1.1 connection over after a WebSocket's 101
 *  (over_connection.c); its start's arg is the accepted session. */
extern const xHttpTakeover xWsConnectionTakeover;

/** Starts ws on ex's tunnel (over_tunnel.c), with the response's fields set;
 *  false when the tunnel could not open (the caller answers 500). */
bool xWsTunnelStart(xWebSocket *ws, xHttpExchange *ex);

#endif
