/* connection.h — one accepted socket: its buffers, output queue, timer and
 * lifetime. Bytes cross the socket through a transport (plain here, TLS in
 * xnet/tls/); protocols sit on top through xConnProtocol and never touch the
 * socket, the transport or the loop's backend themselves.
 *
 * xnet knows nothing of HTTP: it may include xbase only. */
#ifndef XNET_CONNECTION_H
#define XNET_CONNECTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <xbase/buffer.h>
#include <xbase/event.h>

#include "xbase/mem/buffer_pool.h"
#include "xbase/mem/counter.h"
#include "xbase/mem/memcache.h"
#include "xnet/address.h"

/* Referenced bodies up to this size are copied: one contiguous send(2) costs
 * less than the extra iovec and sendmsg(2) a reference would need. */
#define XCONN_COPY_BELOW 2048

/* File ranges up to this size (an HTTP/2 DATA frame's default most) are read
 * into the buffer when queued: the response then leaves in one send with
 * what surrounds it, where sendfile(2) would need a send (and a packet) of
 * its own for the head. */
#define XCONN_FILE_COPY_MAX (16u << 10)

typedef struct xConn xConn;
struct xTlsInfo; /* <xhttp/tls_conf.h>: filled by a TLS transport */

/** What a worker's connections did, for metrics: written by the worker,
 *  read from any thread (xCounter). Open connections are accepted - closed. */
typedef struct xNetCounters {
    xCounter accepted;       /* connections wrapped by xConnCreate */
    xCounter closed;         /* connections freed */
    xCounter bytes_in;       /* read through xConnRecv (plaintext on TLS) */
    xCounter bytes_out;      /* sent by xConnFlush (plaintext on TLS) */
    xCounter tls_handshakes; /* TLS handshakes completed */
    xCounter tls_failures;   /* TLS handshakes failed or timed out */
} xNetCounters;

/** A pipe that spliced bytes pass through (xnet/splice.h): its ends, the
 *  bytes in it, and what it holds at most. rd -1: none. */
typedef struct xPipe {
    int rd, wr;
    size_t held;
    size_t cap;
} xPipe;

/* Empty pipes a worker keeps for its next spliced bodies. */
#define XNET_SPARE_PIPES 8

typedef struct xPipePool {
    xPipe spare[XNET_SPARE_PIPES];
    unsigned count;
} xPipePool;

/** How a closing connection reads what its peer still sends (XCONN_LINGERING),
 *  so that closing with unread input does not reset the connection and destroy
 *  the answer just sent: at most time_ms in all, at most timeout_ms with
 *  nothing new, at most max_bytes. xNetContextInit sets nginx-like defaults. */
typedef struct xConnLinger {
    uint32_t time_ms;    /* in all, from the end of the output (5 s); 0: close then */
    uint32_t timeout_ms; /* with nothing read (2 s) */
    size_t max_bytes;    /* read and dropped (64 MiB) */
} xConnLinger;

/** What every connection of one worker shares: its loop, pools and the list
 *  of open connections. One per worker thread, so nothing here needs a lock.
 *  A protocol layer embeds it as the first member of a context of its own. */
typedef struct xNetContext {
    xEventLoop *loop;
    xBufferPool buffers;      /* read and write buffers of idle-able size */
    xMemCache *mem;           /* small objects of libraries that allocate a lot */
    uint32_t send_timeout_ms; /* a blocked output queue gives up after this */
    xConnLinger linger;       /* how long, and how much, a closing connection reads */
    bool sends_by_completion; /* the loop's backend sends a turn's output itself (io_uring) */
    xConn *conns;             /* every open connection, for shutdown */
    size_t conn_count;
    void (*on_conn_gone)(struct xNetContext *net); /* after a connection is freed */
    xNetCounters counters;
    xPipePool pipes; /* spare pipes for splicing (xnet/splice.h) */
} xNetContext;

/** Prepares a worker's network context on loop: a buffer pool of
 *  block_size blocks keeping at most spare_blocks idle ones, a small-object
 *  cache, no connections; a blocked output queue gives up after
 *  send_timeout_ms. XERR_NOMEM leaves nothing to free. */
xErrno xNetContextInit(xNetContext *net, xEventLoop *loop, size_t block_size, size_t spare_blocks,
                       uint32_t send_timeout_ms);

/** Frees what xNetContextInit made, once every connection is freed. */
void xNetContextDestroy(xNetContext *net);

/** Closes net's spare pipes (xNetContextDestroy does). */
void xNetPipesClose(xNetContext *net);

/* What a protocol hears of its connection, filled by name; the hooks marked
 * optional may be NULL. */
typedef struct xConnProtocol {
    void (*on_readable)(xConn *conn); /**< bytes (or EOF) may be waiting */
    void (*on_flushed)(xConn *conn);  /**< optional: a blocked output queue drained */
    void (*on_timeout)(xConn *conn);  /**< the timer set by xConnSetTimeout fired */
    void (*on_drain)(xConn *conn);    /**< optional: the server is stopping gracefully */
    void (*on_close)(xConn *conn);    /**< optional: the socket closed; release what waits on it */
    void (*on_free)(xConn *conn);     /**< optional: last reference gone; free protocol state */
} xConnProtocol;

/* How bytes cross the socket. recv and sendv behave like recv(2) and
 * sendmsg(2) on the plaintext (-1 with errno EAGAIN when they would block);
 * recv clears conn->readable once nothing more can be read without a new
 * readiness edge. */
typedef struct xTransport {
    ssize_t (*recv)(xConn *conn, char *buf, size_t len);
    ssize_t (*sendv)(xConn *conn, const struct iovec *iov, int iovcnt);
    void (*shutdown_write)(xConn *conn); /**< no more output: FIN (and close_notify) */
    void (*close)(xConn *conn);          /**< optional: the socket is about to close */
    void (*free)(xConn *conn);           /**< optional: last reference gone */
    bool secure;                         /**< bytes on the wire are encrypted */
    /** Writes bytes the transport made on its own (a TLS alert or KeyUpdate)
     *  once the queue is empty: true when none are left, false with errno
     *  (EAGAIN: wait for the socket). NULL: it never makes any. */
    bool (*flush)(xConn *conn);
    /** Fills what a handler may learn of the connection's TLS session; NULL
     *  on a transport without one. */
    bool (*tls_info)(const xConn *conn, struct xTlsInfo *info);
    /** Sends up to len bytes of file fd from offset without them passing
     *  through user space, like sendfile(2): bytes sent, 0 when the file ends
     *  first, -1 with errno (EAGAIN; EOPNOTSUPP: not on this connection, so
     *  the bytes go through sendv instead). NULL: never. */
    ssize_t (*sendfile)(xConn *conn, int fd, off_t offset, size_t len);
    /** Whether bytes were read that are not plaintext yet (part of a TLS
     *  record): a peer that stops there is as slow as one that stops in a
     *  request head. NULL: the transport never holds any. */
    bool (*holds_input)(const xConn *conn);
    /** Reads what a lingering connection drops, like recv (clearing
     *  conn->readable once drained). NULL: the socket as the loop reads it,
     *  beneath any records, so none are opened or answered after the end. */
    ssize_t (*discard)(xConn *conn, char *buf, size_t len);
    /** Every read of the socket is xEventLoopRecv's, so a completion backend
     *  may receive ahead; false where a library reads the socket itself. */
    bool reads_through_loop;
    /** sendv is the socket's own gathered send, so a completion backend may
     *  send a turn's output itself (xEventLoopSendQueue). */
    bool sends_through_loop;
} xTransport;

/** The socket itself, every connection's transport until told otherwise. */
extern const xTransport xConnPlainTransport;

/* Bytes queued by reference rather than copied: sent after the buffered
 * bytes before position mark, then released. They are in memory at data, or
 * (data NULL) in file fd from offset. */
typedef struct xOutRef {
    const char *data;
    size_t len;
    size_t mark;
    void (*release)(void *);
    void *arg;
    int fd;
    off_t offset;
} xOutRef;

/* Where a connection stands on its way out, in the order it goes. */
typedef enum xConnState {
    XCONN_OPEN,      /* reads and writes as its protocol asks */
    XCONN_FLUSHING,  /* closing after its output (xConnCloseAfterFlush): what is queued goes out */
    XCONN_LINGERING, /* output out and the write side shut: input is read and dropped until the
                        peer's end or a bound of net->linger, so a reset does not destroy the answer */
    XCONN_CLOSED,    /* the socket is closed; waiting for the last reference */
} xConnState;

/* Where a connection's output stands. A flush sends at once only when
 * READY; otherwise what it asks for happens when the wait ends. Whether a
 * protocol waits for on_flushed is xConn's flush_wait, apart from this. */
typedef enum xConnSend {
    XCONN_SEND_READY,
    /* The turn's output went to the loop's backend as one send
     * (xEventLoopSendQueue, io_uring): its bytes stay queued, and owned,
     * until the completion says how many went; a flush meanwhile waits for
     * it (and sets flush_wait: its protocol may wait for the queue to
     * drain, so the completion flushes and then tells on_flushed). */
    XCONN_SEND_IN_FLIGHT,
    /* The socket was full: waiting for XEV_WRITE (or the send timeout),
     * after which on_flushed always runs. */
    XCONN_SEND_BLOCKED,
} xConnSend;

/* Ordered by when an event touches it, hot first, on a line-aligned
 * allocation: what every event reads (the first line, which the loop
 * prefetches), the buffers and the queue's counts (the second), the queue's
 * references and the turn-end flush (the third); the timer, the list and the
 * address last. At hundreds of connections each line an event reaches is a
 * cache miss. */
struct xConn {
    xNetContext *net;
    const xTransport *transport;
    const xConnProtocol *proto;
    void *proto_state;
    int fd;
    unsigned refs;    /* one while open, one per pending async response, one per dispatch */
    xConnState state; /* on its way out, or not */
    bool readable;    /* an edge arrived and the socket is not known drained */
    bool hangup;      /* the peer reset or hung up */
    bool peer_closed; /* the peer sent FIN: read until end of stream */
    uint8_t send;     /* xConnSend: a send in flight, a full socket, or neither */
    bool send_armed;  /* the timer runs the send timeout, since the last progress */
    bool flush_wait;  /* a writer waits for on_flushed (xConnWaitFlushed): told once the queue drains */
    void *transport_state;

    xBuffer in;  /* owned by the protocol */
    xBuffer out; /* bytes to send */
    size_t out_sent;
    size_t out_pending; /* bytes queued, buffered and referenced, not yet sent */

    xOutRef *out_refs; /* grown on demand, kept until the connection goes */
    size_t out_refs_cap;
    size_t out_nrefs;
    size_t out_ref_index; /* first ref not fully sent */
    size_t out_ref_sent;  /* bytes of that ref already sent */
    xTurnEnd flush_soon;  /* queued by xConnFlushSoon */

    xTimer timer;
    xConn *prev, *next;       /* net->conns */
    xNetAddr addr;            /* the peer's address and port, our port; family 0: unknown */
    uint64_t linger_until_ms; /* XCONN_LINGERING: the loop's clock when it ends; 0: not begun */
    size_t linger_left;       /* XCONN_LINGERING: bytes it may still read */
};

/** True while conn takes new work: neither closed nor closing after its output. */
static inline bool xConnOpen(const xConn *conn) { return conn->state == XCONN_OPEN; }

/** True while a flush could not send and on_flushed will say when the
 *  output has gone: the socket is full, or a send in flight comes first. */
static inline bool xConnWriteBlocked(const xConn *conn) {
    return conn->send == XCONN_SEND_BLOCKED || (conn->send == XCONN_SEND_IN_FLIGHT && conn->flush_wait);
}

/** True once the socket is closed (xConnClose): nothing more is read or sent. */
static inline bool xConnClosed(const xConn *conn) { return conn->state == XCONN_CLOSED; }

/** True while the output is out and the peer's last bytes are read and dropped. */
static inline bool xConnLingering(const xConn *conn) { return conn->state == XCONN_LINGERING; }

/** True while what is written still goes out: open, or closing after its
 *  output. A lingering connection has shut its write side, and a closed one
 *  has no socket: writes to either are refused (XERR_CLOSED; xConnReserve
 *  gives NULL), so a late answer can neither queue behind the end nor fail
 *  against the shut socket, which would close it and cut the linger short. */
static inline bool xConnTakesOutput(const xConn *conn) {
    return conn->state == XCONN_OPEN || conn->state == XCONN_FLUSHING;
}

/** Wraps an accepted, non-blocking socket; addr (copied; NULL: unknown) is
 *  where it came from, as accept reported it. Returns NULL (socket closed)
 *  on failure. */
xConn *xConnCreate(xNetContext *net, int fd, const xNetAddr *addr, const xConnProtocol *proto,
                   void *proto_state);

/** Puts conn on another transport (before any I/O): TLS over the socket. */
void xConnSetTransport(xConn *conn, const xTransport *transport, void *state);

/** Hands conn to another protocol; the old one has freed its state. If
 *  input may be waiting (in the socket, or already read into conn->in), the
 *  new protocol's on_readable runs at once. */
void xConnSetProtocol(xConn *conn, const xConnProtocol *proto, void *state);

void xConnRetain(xConn *conn);
void xConnRelease(xConn *conn);

/** Fills info from conn's TLS session; false when conn is not on TLS. */
static inline bool xConnTlsInfo(const xConn *conn, struct xTlsInfo *info) {
    return conn && conn->transport->tls_info && conn->transport->tls_info(conn, info);
}

/** Whether the transport holds bytes read but not yet handed up as
 *  plaintext: a request may have begun though conn->in is empty. */
static inline bool xConnHoldsInput(const xConn *conn) {
    return conn->transport->holds_input && conn->transport->holds_input(conn);
}

/** Reads into buf. Returns bytes read, 0 at end of stream, or -1 with errno
 *  (EAGAIN once the socket is drained: conn->readable is then false). */
ssize_t xConnRecv(xConn *conn, char *buf, size_t len);

/** While on, the protocol expects much input (a body of known length) and
 *  reads it in large pieces: the loop's backend lets those reads take the
 *  socket itself instead of receiving ahead in small buffers
 *  (xEventLoopRecvBulk). Off once it is read. */
void xConnRecvBulk(xConn *conn, bool on);

/** Queues a copy of bytes for sending; XERR_CLOSED once conn takes no
 *  output (xConnTakesOutput), as for every write below. */
xErrno xConnWrite(xConn *conn, const void *bytes, size_t len);

/** Queues bytes by reference; release(arg) runs once they are sent or dropped.
 *  Small pieces are copied instead (and released at once). With len 0,
 *  release(arg) runs once everything queued before it is sent: how a
 *  protocol frees memory that earlier references still point into. */
xErrno xConnWriteRef(xConn *conn, const void *bytes, size_t len, void (*release)(void *), void *arg);

/** Sends what is queued and then the count pieces, as far as the socket
 *  takes them now, and queues a copy of only what it did not take: the
 *  pieces need live during the call alone, and a large body the socket
 *  takes whole is never copied in user space. Where the queue cannot send
 *  now (a full socket, a send in flight, a file's range or more pieces than
 *  one send gathers), the pieces are queued and flushed as xConnWrite and
 *  xConnFlush would. XERR_CLOSED, XERR_NOMEM. */
xErrno xConnWriteNow(xConn *conn, const struct iovec *pieces, int count);

/** Queues len bytes of file fd from offset by reference. They are read only
 *  as the socket takes them (sendfile(2) where the transport can, else read
 *  into the send path a piece at a time), so a large file costs no memory and
 *  a slow peer holds back the reading; up to XCONN_FILE_COPY_MAX bytes are
 *  read now instead. release(arg) runs once they are sent or dropped (the
 *  caller's fd stays open until then). The peer was promised len bytes: if
 *  the file ends before them, the connection closes, so the peer sees the
 *  response cut short rather than bytes that are not the file's. */
xErrno xConnWriteFile(xConn *conn, int fd, off_t offset, size_t len, void (*release)(void *), void *arg);

/** Room to format up to len bytes straight into the output queue; commit with
 *  xConnCommit. NULL on allocation failure, or once conn takes no output
 *  (lingering, closed: it holds no block then). Inline for the common case, a
 *  held block with room (a response's frames go into it one after another);
 *  xConnReserveMore gets or grows the block. */
char *xConnReserveMore(xConn *conn, size_t len);
static inline char *xConnReserve(xConn *conn, size_t len) {
    if (conn->out.data && conn->out.cap - conn->out.len >= len) return conn->out.data + conn->out.len;
    return xConnReserveMore(conn, len);
}
static inline void xConnCommit(xConn *conn, size_t len) {
    conn->out.len += len;
    conn->out_pending += len;
}

/** Bytes queued and not yet sent. */
size_t xConnPending(const xConn *conn);

/** Sends what is queued, as far as the socket takes it. */
void xConnFlush(xConn *conn);

/** The writer holds back until the queue has drained and waits to hear so:
 *  on_flushed runs once it has, however it drains (a full socket's room, a
 *  send in flight's completion, the turn's end's send taking it whole, or a
 *  flush of the writer's own), and at the latest at the turn's end when
 *  nothing is queued. Always from the loop, never from within a call of the
 *  writer's. Without it on_flushed follows only a full socket or a flush
 *  that met a send in flight; a writer that holds back on a queue that
 *  leaves whole would wait forever. */
void xConnWaitFlushed(xConn *conn);

/** Sends what is queued at the end of the loop's turn, after every ready
 *  connection has been served: the turn's work runs back to back and its
 *  sends follow together. */
void xConnFlushSoon(xConn *conn);

/** The socket is full: wait for it to drain (or the send timeout), then
 *  flush. For a transport whose own bytes met a full socket. */
void xConnBlocked(xConn *conn);

/** Sends what is queued, then half-closes and discards input for a moment
 *  before closing, so the peer reads our last response instead of a reset. */
void xConnCloseAfterFlush(xConn *conn);

/** Closes the socket now; queued output is dropped. */
void xConnClose(xConn *conn);

/** Ends conn after a read failed with errno: a reset or a socket error closes
 *  it at once; a transport's own failure (EPROTO: a TLS record it refused, a
 *  KeyUpdate it cannot follow) closes it after what is queued and a lingering
 *  close, so the peer meets our FIN (and any alert), not a reset. */
void xConnReadFailed(xConn *conn);

/** How long a connection that has sent nothing yet, or is still in its TLS
 *  handshake, when a graceful stop begins may still go on (to send its first
 *  request, answered with Connection: close): one accepted just before the
 *  stop, a load balancer's among them, has its bytes on the way, and closing
 *  it unread would fail that request. */
#define XCONN_DRAIN_FRESH_MS 250

/** A lingering close's defaults (xConnLinger), nginx's lingering_close in
 *  shorter form: 5 s in all, 2 s without input, 64 MiB: a client that sends
 *  tens of megabytes before it reads (a flood answered with GOAWAY, a large
 *  upload refused) still reads the answer, and dropping that much costs a
 *  worker milliseconds. */
#define XCONN_LINGER_TIME_MS 5000
#define XCONN_LINGER_TIMEOUT_MS 2000
#define XCONN_LINGER_MAX_BYTES ((size_t)64 << 20)

/** (Re)arms the connection's single timer; 0 disarms. */
void xConnSetTimeout(xConn *conn, uint32_t ms);

#endif
