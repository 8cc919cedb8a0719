/* quic.h — QUIC connections through ngtcp2 behind a small interface, so what
 * sits above (HTTP/3) sees streams of bytes and never ngtcp2 or GnuTLS.
 *
 * An endpoint is one worker's UDP socket on one port with the connections it
 * serves: packets in (recvmmsg), packets out (sendmsg, GSO batches), a table
 * of connection IDs, and one timer per connection on the loop (a precise one
 * while ngtcp2's next expiry is near: acknowledgments, loss recovery,
 * pacing). The application hears of a connection once its handshake is done
 * and of its streams through xQuicAppOps.
 *
 * Sending: what the application writes on a stream is queued here (copied,
 * or by reference with a release) and kept until the peer acknowledges it,
 * as QUIC's retransmission needs; on_stream_acked says when room was made.
 * Receiving: stream bytes are handed up as they arrive, and the peer gets
 * credit back (flow control) only as the application says it consumed them
 * (xQuicStreamConsumed), so an application that holds back holds the peer.
 *
 * Connection IDs name the worker in their first byte, so a packet that
 * reaches another worker's socket can be told apart from one for a
 * connection nobody knows (which gets a stateless reset).
 *
 * Address validation (RFC 9000 §8.1): a new client may be sent a Retry whose
 * token it must echo; tokens are sealed (AEAD) with the listener's token
 * secret over the client's address and a timestamp, so any worker can check
 * them and they expire. A finished handshake gives the client a NEW_TOKEN
 * token that spares it the Retry on a later connection. No HTTP here. */
#ifndef XNET_QUIC_QUIC_H
#define XNET_QUIC_QUIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <xbase/errno.h>

#include "xnet/connection.h"
#include "xnet/quic/quic_tls.h"

typedef struct xQuicEndpoint xQuicEndpoint;
typedef struct xQuicConn xQuicConn;
typedef struct xQuicStream xQuicStream;

/** What the application hears, filled by name. The connection and stream
 *  handles stay valid until on_close and on_stream_close return. */
typedef struct xQuicAppOps {
    /** qc finished its handshake; false refuses it (closed at once). */
    bool (*on_open)(xQuicConn *qc);
    /** len bytes of s arrived, in order; fin: they are its last. */
    void (*on_stream_data)(xQuicConn *qc, xQuicStream *s, const uint8_t *data, size_t len, bool fin);
    /** The peer reset s's sending side (RESET_STREAM), with its error code.
     *  (Its STOP_SENDING is answered by ngtcp2 with a RESET_STREAM of ours;
     *  writes on s fail from then on.) */
    void (*on_stream_reset)(xQuicConn *qc, xQuicStream *s, uint64_t code);
    /** s is closed both ways; what the application keeps for it goes now. */
    void (*on_stream_close)(xQuicConn *qc, xQuicStream *s);
    /** Some of what was written on s was acknowledged: room for more. */
    void (*on_stream_acked)(xQuicConn *qc, xQuicStream *s);
    /** The server stops gracefully: finish what is under way, then close. */
    void (*on_drain)(xQuicConn *qc);
    /** The end of an event on qc (packets read, a timer, a write), before
     *  its packets are written: what the application gathered over the
     *  event's streams (acknowledgments of its own) may be written now. */
    void (*on_settle)(xQuicConn *qc);
    /** qc is closing (peer, timeout, error or xQuicConnClose): every stream
     *  has had its on_stream_close; the application lets go of qc. */
    void (*on_close)(xQuicConn *qc);
} xQuicAppOps;

/** An endpoint's settings. */
typedef struct xQuicEndpointConf {
    xQuicTls *tls;                 /* the listener's certificates */
    const uint8_t *secret;         /* 32 bytes shared by the listener's workers: reset tokens */
    uint8_t worker_id;             /* the first byte of every connection ID we issue */
    const xQuicAppOps *app;        /* the application above */
    void *app_arg;                 /* xQuicEndpointArg's */
    uint16_t local_port;           /* the port bound, for the request's address */
    uint64_t max_streams_bidi;     /* requests at once per connection */
    uint64_t stream_window;        /* bytes a peer may send on a stream ahead of our reading */
    uint64_t conn_window;          /* the same, over all streams of a connection */
    uint32_t idle_timeout_ms;      /* a silent connection closes after this */
    uint32_t handshake_timeout_ms; /* a handshake not done by then is dropped */
    size_t max_connections;        /* beyond this, new connections are refused */
    uint64_t app_no_error;         /* the application's code for closing without error */
    const uint8_t *token_secret;   /* 32 bytes shared by the listener's workers: Retry and NEW_TOKEN tokens */
    size_t retry_from;             /* new clients are asked to prove their address by a Retry while this
                                      many handshakes are under way on the endpoint: 0 always, SIZE_MAX
                                      never; a token of ours from an earlier connection spares them */
} xQuicEndpointConf;

/** An endpoint on net's loop serving the bound UDP socket fd (which it owns
 *  from now on, and closes). NULL when out of memory (fd closed). */
xQuicEndpoint *xQuicEndpointCreate(xNetContext *net, int fd, const xQuicEndpointConf *conf);

/** Closes every connection (CONNECTION_CLOSE sent), the socket, and frees ep. */
void xQuicEndpointDestroy(xQuicEndpoint *ep);

/** Stops taking new connections and tells every open one to drain. */
void xQuicEndpointDrain(xQuicEndpoint *ep);

/** Closes every connection now (CONNECTION_CLOSE sent) and, like Drain,
 *  refuses new ones; the socket stays open and read. */
void xQuicEndpointCloseAll(xQuicEndpoint *ep);

/** Connections open now. */
size_t xQuicEndpointConnections(const xQuicEndpoint *ep);

/** Called whenever a connection of ep goes (for a worker waiting to stop). */
void xQuicEndpointOnGone(xQuicEndpoint *ep, void (*fn)(void *arg), void *arg);

/** The endpoint's app_arg. */
void *xQuicEndpointArg(const xQuicEndpoint *ep);

/** Opens a UDP socket on addr (SO_REUSEPORT when reuseport) for an endpoint:
 *  non-blocking, local addresses reported per packet. -1 with errno. */
int xQuicSocketOpen(const struct sockaddr_storage *addr, socklen_t len, bool reuseport);

/** Steers the reuseport group fd belongs to (every worker's socket on one
 *  port, joined in worker order) by the worker byte of our connection IDs,
 *  so a connection's packets reach its worker whatever address they come
 *  from (migration, NAT rebinding). False where the kernel refuses. */
bool xQuicSocketSteer(int fd);

/* ---- A connection ---- */

/** The application's state for qc (NULL until set). */
void *xQuicConnApp(const xQuicConn *qc);
void xQuicConnSetApp(xQuicConn *qc, void *app);

/** The endpoint qc belongs to. */
xQuicEndpoint *xQuicConnEndpoint(const xQuicConn *qc);

/** What a request reads of its connection, as an xConn in name only: the
 *  worker's context (net), the peer's address, TLS facts (transport). No
 *  xConn call but xConnTlsInfo may be made on it. */
xConn *xQuicConnView(xQuicConn *qc);

/** Keeps qc's memory (and its view) past its close, for a request whose
 *  handler still holds it; xQuicConnRelease lets go. */
void xQuicConnRetain(xQuicConn *qc);
void xQuicConnRelease(xQuicConn *qc);

/** True once qc is closing: writes are dropped, nothing more arrives. */
bool xQuicConnClosed(const xQuicConn *qc);

/** Closes qc with an application error code (CONNECTION_CLOSE); its
 *  streams and then qc itself are closed for the application at the end of
 *  the current event. */
void xQuicConnClose(xQuicConn *qc, uint64_t app_error, const char *reason);

/** Opens a unidirectional stream of ours; NULL when the peer allows no more. */
xQuicStream *xQuicOpenUni(xQuicConn *qc);

/* ---- A stream ---- */

int64_t xQuicStreamId(const xQuicStream *s);

/** True when some of what s delivered came in 0-RTT (early data, which an
 *  attacker may replay: RFC 8470). */
bool xQuicStreamEarly(const xQuicStream *s);
void *xQuicStreamApp(const xQuicStream *s);
void xQuicStreamSetApp(xQuicStream *s, void *app);

/** Queues len bytes of data on s. release NULL: copied now. Otherwise kept
 *  by reference and release(arg) runs once they are acknowledged or the
 *  stream goes. fin: they are the last. XERR_CLOSED when s no longer sends
 *  (release has run). */
xErrno xQuicStreamWrite(xQuicStream *s, const void *data, size_t len, bool fin, void (*release)(void *),
                        void *arg);

/** Bytes written on s and not yet acknowledged. */
size_t xQuicStreamUnacked(const xQuicStream *s);

/** The application took n more bytes of what s delivered: the peer may send
 *  that many more, on s and on the connection. */
void xQuicStreamConsumed(xQuicStream *s, size_t n);

/** Abandons s both ways with an application error code (RESET_STREAM and
 *  STOP_SENDING). */
void xQuicStreamReset(xQuicStream *s, uint64_t code);

/** Stops reading s (STOP_SENDING with code), keeping its sending side. */
void xQuicStreamStopReading(xQuicStream *s, uint64_t code);

#endif
