/* xhttp/websocket.h — WebSocket (RFC 6455) routes of an xHttpServer, with
 * permessage-deflate (RFC 7692) when enabled.
 *
 * xHttpServerWebSocket makes a path a WebSocket endpoint. A client's
 * HTTP/1.1 "Upgrade: websocket" request, or its HTTP/2 extended CONNECT with
 * ":protocol websocket" (RFC 8441; h2c or TLS), goes to on_open,
 * which accepts (optionally picking a subprotocol) or refuses with a status;
 * once accepted the connection speaks WebSocket frames: whole messages come
 * to on_message, and the xWebSocket handle sends text, binary, pings and the
 * close. Over HTTP/2 the answer is :status 200 and the stream's DATA carries
 * the frames, within HTTP/2 flow control. A plain GET to the path is
 * answered 426 (with "Upgrade: websocket" on HTTP/1.1).
 *
 * Lifetimes: callbacks run on the loop of the worker that owns the
 * connection. An xWebSocket is valid from on_open until on_close returns.
 * To send later from that loop (a timer, deferred work), hold it with
 * xWebSocketRetain from on_message (or later) and let go with
 * xWebSocketRelease; sends after the connection closed return XERR_CLOSED.
 * A handle must not be used from other threads. */
#ifndef XHTTP_WEBSOCKET_H
#define XHTTP_WEBSOCKET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <xbase/errno.h>
#include <xbase/str.h>
#include <xhttp/server.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What this header declares is libxkit.so's API: exported, where the rest is hidden. */
#pragma GCC visibility push(default)

typedef struct xWebSocket xWebSocket;

/** Close status codes (RFC 6455 §7.4.1) the server sends on its own. */
enum {
    XWS_CLOSE_NORMAL = 1000,
    XWS_CLOSE_GOING_AWAY = 1001, /**< the server stops, or the peer was idle */
    XWS_CLOSE_PROTOCOL = 1002,   /**< a frame broke RFC 6455 */
    XWS_CLOSE_NO_STATUS = 1005,  /**< on_close: the peer's close had no code */
    XWS_CLOSE_ABNORMAL = 1006,   /**< on_close: the connection ended without a close */
    XWS_CLOSE_BAD_DATA = 1007,   /**< a text message was not UTF-8 */
    XWS_CLOSE_TOO_BIG = 1009,    /**< a message exceeded max_message_size */
    XWS_CLOSE_INTERNAL = 1011,   /**< the server could not go on (out of memory) */
};

/** What on_open sees of the client's request, and what it may choose. */
typedef struct xWebSocketOpen {
    const xHttpRequest *req; /**< the upgrade request: path, query, headers
                                  (valid during on_open only) */
    xStr protocols;          /**< Sec-WebSocket-Protocol as offered, e.g. "chat, superchat";
                                  empty when none was offered */
    const char *protocol;    /**< set to one of the offered names to answer with it
                                  (copied when on_open returns); NULL: no subprotocol */
} xWebSocketOpen;

/** A WebSocket route's callbacks and settings. Start from
 *  xWebSocketConfInit's defaults; fields are only ever added at the end. */
typedef struct xWebSocketConf {
    size_t struct_size; /**< the caller's sizeof, set by xWebSocketConfInit */
    /** A client asks to open: return 0 to accept, or an HTTP status
     *  (400..599) to refuse with (on_close then never runs for ws). NULL
     *  accepts every client. Must not retain ws. */
    int (*on_open)(xWebSocket *ws, xWebSocketOpen *open, void *arg);
    /** A whole message (reassembled, decompressed; text is valid UTF-8).
     *  data is valid during the call only. */
    void (*on_message)(xWebSocket *ws, const char *data, size_t len, bool binary, void *arg);
    /** The connection is over: code and reason from the peer's close frame,
     *  XWS_CLOSE_NO_STATUS when it had none, XWS_CLOSE_ABNORMAL when it broke
     *  off, or the code the server closed with. reason is valid during the
     *  call. Runs once for every accepted client; ws is not valid after it
     *  returns unless retained. NULL: nothing to do. */
    void (*on_close)(xWebSocket *ws, uint16_t code, xStr reason, void *arg);
    /** A ping arrived (the pong is sent by the server). NULL: not told. */
    void (*on_ping)(xWebSocket *ws, const char *data, size_t len, void *arg);
    size_t max_message_size;     /**< reassembled (and inflated) bytes, else close 1009 (1 MiB) */
    size_t max_pending;          /**< queued output bytes beyond which the client is no
                                      longer read from until it takes some (256 KiB) */
    uint32_t idle_timeout_ms;    /**< no frame from the client for this long: close 1001
                                      (60 s); 0: never */
    uint32_t ping_interval_ms;   /**< no frame from the client for this long: send a ping
                                      (0: never) */
    uint32_t close_timeout_ms;   /**< wait for the peer's close after ours (5 s) */
    bool deflate;                /**< negotiate permessage-deflate when the client offers it (false) */
    int deflate_level;           /**< zlib level for outgoing messages (1) */
    int deflate_max_window_bits; /**< the largest window (8..15) either side may use; a
                                      client's smaller request is honoured (15) */
    int deflate_mem_level;       /**< zlib memLevel (1..9) of the compressor: with the
                                      window it bounds memory per connection (8) */
} xWebSocketConf;

/** Fills the first size bytes of conf with the defaults above; size is the
 *  caller's sizeof(xWebSocketConf). Call xWebSocketConfInit instead. */
void xWebSocketConfInitSized(xWebSocketConf *conf, size_t size);

/** Fills conf with the defaults noted above. */
static inline void xWebSocketConfInit(xWebSocketConf *conf) { xWebSocketConfInitSized(conf, sizeof *conf); }

/** Makes "GET path" (a route pattern as in xHttpServerRoute) a WebSocket
 *  endpoint. conf is copied; arg is borrowed, passed to every callback, and
 *  must outlive the server. Returns XERR_INVALID (no on_message, or a bad
 *  setting), XERR_EXISTS or XERR_STATE (running). */
xErrno xHttpServerWebSocket(xHttpServer *server, const char *path, const xWebSocketConf *conf, void *arg);

/** Queues a text message (data must be UTF-8; copied). XERR_CLOSED once the
 *  close began, XERR_NOMEM. */
xErrno xWebSocketSendText(xWebSocket *ws, const char *data, size_t len);

/** Queues a binary message (copied). */
xErrno xWebSocketSendBinary(xWebSocket *ws, const void *data, size_t len);

/** Queues a message by reference: data stays the caller's until
 *  release(release_arg) runs, once it is sent or dropped (also on error).
 *  With permessage-deflate the message is compressed at once and released. */
xErrno xWebSocketSendRef(xWebSocket *ws, const void *data, size_t len, bool binary, void (*release)(void *),
                         void *release_arg);

/** Queues a ping with up to 125 bytes of payload (XERR_INVALID beyond). */
xErrno xWebSocketPing(xWebSocket *ws, const void *data, size_t len);

/** Begins the close handshake with code (1000..4999, not 1005/1006/1015)
 *  and a reason of up to 123 bytes; the connection ends when the client
 *  answers or close_timeout_ms passes. XERR_CLOSED when already closing. */
xErrno xWebSocketClose(xWebSocket *ws, uint16_t code, const char *reason);

/** Bytes queued for the client and not yet taken by its socket: how a
 *  sender learns it is ahead of a slow reader. */
size_t xWebSocketPending(const xWebSocket *ws);

/** The subprotocol chosen in on_open, or "" (valid while ws is). */
const char *xWebSocketProtocol(const xWebSocket *ws);

/** Sets or reads one pointer of the caller's, e.g. per-client state. */
void xWebSocketSetUserData(xWebSocket *ws, void *data);
void *xWebSocketUserData(const xWebSocket *ws);

/** The loop ws is served on, for timers and deferred sends. */
xEventLoop *xWebSocketLoop(const xWebSocket *ws);

/** Keeps ws valid past on_close; pair with xWebSocketRelease. */
void xWebSocketRetain(xWebSocket *ws);
void xWebSocketRelease(xWebSocket *ws);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
