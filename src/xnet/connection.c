/* connection.c — socket I/O, the output queue, lingering close, lifetime. */
#include "xnet/connection.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include "xbase/loop/loop_internal.h"

#define XCONN_IOV_MAX 64
#define XCONN_LINE 64 /* a cache line: xConn's hot fields are laid out by them */

/* How much of queued files one send takes on a transport without sendfile:
 * two TLS records' worth. The transport has taken (sealed or copied) the
 * bytes when sendv returns, so one buffer per thread serves every
 * connection; off the stack, a flush without files pays nothing for it.
 * A lingering connection drops what it reads into it too. */
#define XCONN_FILE_PIECE (32u << 10)
static __thread char file_piece[XCONN_FILE_PIECE];

static void on_io(xEventLoop *loop, int fd, unsigned events, void *arg);
static void on_timer(xEventLoop *loop, xTimer *timer, void *arg);
static void flush_at_turn_end(xEventLoop *loop, xTurnEnd *call);

/* ---- The plain transport: the socket itself ---- */

static ssize_t plain_recv(xConn *conn, char *buf, size_t len) {
    ssize_t n = xEventLoopRecv(conn->net->loop, conn->fd, buf, len);
    /* A short read means the socket was drained at that moment; edge
     * triggering tells us when more arrives, so skip the extra EAGAIN read.
     * Not so once the peer has closed: its FIN came with the same edge as the
     * data, no further edge will follow, and only another read sees the end. */
    bool drained = n < 0 ? errno == EAGAIN : (size_t)n < len && !conn->peer_closed;
    if (drained) conn->readable = false;
    return n;
}

static ssize_t plain_sendv(xConn *conn, const struct iovec *iov, int iovcnt) {
    return xEventLoopSendv(conn->net->loop, conn->fd, iov, iovcnt);
}

static void plain_shutdown_write(xConn *conn) { shutdown(conn->fd, SHUT_WR); }

static ssize_t plain_sendfile(xConn *conn, int fd, off_t offset, size_t len) {
    return sendfile(conn->fd, fd, &offset, len);
}

const xTransport xConnPlainTransport = {
    .recv = plain_recv,
    .sendv = plain_sendv,
    .shutdown_write = plain_shutdown_write,
    .sendfile = plain_sendfile,
    .reads_through_loop = true,
    .sends_through_loop = true,
};

/* ---- Lifetime ---- */

xErrno xNetContextInit(xNetContext *net, xEventLoop *loop, size_t block_size, size_t spare_blocks,
                       uint32_t send_timeout_ms) {
    *net = (xNetContext){.loop = loop,
                         .send_timeout_ms = send_timeout_ms,
                         .linger = {.time_ms = XCONN_LINGER_TIME_MS,
                                    .timeout_ms = XCONN_LINGER_TIMEOUT_MS,
                                    .max_bytes = XCONN_LINGER_MAX_BYTES},
                         .sends_by_completion = xEventLoopSendsByCompletion(loop)};
    if (!(net->mem = xMemCacheCreate())) return XERR_NOMEM;
    xBufferPoolInit(&net->buffers, block_size, spare_blocks);
    return XOK;
}

void xNetContextDestroy(xNetContext *net) {
    xNetPipesClose(net);
    xBufferPoolDestroy(&net->buffers);
    xMemCacheDestroy(net->mem);
    net->mem = NULL;
}

xConn *xConnCreate(xNetContext *net, int fd, const xNetAddr *addr, const xConnProtocol *proto,
                   void *proto_state) {
    xConn *conn = aligned_alloc(XCONN_LINE, (sizeof *conn + XCONN_LINE - 1) & ~(size_t)(XCONN_LINE - 1));
    if (!conn) {
        close(fd);
        return NULL;
    }
    memset(conn, 0, sizeof *conn);
    conn->net = net;
    conn->fd = fd;
    conn->transport = &xConnPlainTransport;
    conn->proto = proto;
    conn->proto_state = proto_state;
    conn->refs = 1;
    if (addr) conn->addr = *addr;
    xTimerInit(&conn->timer, on_timer, conn);
    conn->flush_soon.fn = flush_at_turn_end;
    if (xEventLoopAdd(net->loop, fd, XEV_READ | XEV_WRITE | XEV_RECV | XEV_EDGE, on_io, conn) != XOK) {
        close(fd);
        free(conn);
        return NULL;
    }
    xEventLoopPrefetch(net->loop, fd, proto_state);
    conn->next = net->conns;
    if (net->conns) net->conns->prev = conn;
    net->conns = conn;
    net->conn_count++;
    xCounterAdd(&net->counters.accepted, 1);
    return conn;
}

void xConnSetTransport(xConn *conn, const xTransport *transport, void *state) {
    /* The TLS handshake is OpenSSL's, on the socket; xKit's record layer
     * after it reads through the loop again. */
    xEventLoopRecvAhead(conn->net->loop, conn->fd, transport->reads_through_loop);
    conn->transport = transport;
    conn->transport_state = state;
}

void xConnSetProtocol(xConn *conn, const xConnProtocol *proto, void *state) {
    conn->proto = proto;
    conn->proto_state = state;
    if (!xConnClosed(conn)) xEventLoopPrefetch(conn->net->loop, conn->fd, state);
    if ((conn->readable || conn->in.len) && !xConnClosed(conn)) {
        xConnRetain(conn);
        proto->on_readable(conn);
        xConnRelease(conn);
    }
}

void xConnRetain(xConn *conn) { conn->refs++; }

static void release_out_refs(xConn *conn) {
    for (size_t i = conn->out_ref_index; i < conn->out_nrefs; i++)
        if (conn->out_refs[i].release) conn->out_refs[i].release(conn->out_refs[i].arg);
    conn->out_nrefs = conn->out_ref_index = conn->out_ref_sent = 0;
}

void xConnRelease(xConn *conn) {
    if (--conn->refs) return;
    xNetContext *net = conn->net;
    xTimerStop(net->loop, &conn->timer); /* armed by a late call on a closed connection */
    xBufferPoolRelease(&net->buffers, &conn->in);
    if (conn->proto->on_free) conn->proto->on_free(conn);
    if (conn->transport->free) conn->transport->free(conn);
    if (conn->prev)
        conn->prev->next = conn->next;
    else
        net->conns = conn->next;
    if (conn->next) conn->next->prev = conn->prev;
    net->conn_count--;
    xCounterAddRelease(&net->counters.closed, 1); /* after this connection's accept, for /metrics */
    free(conn->out_refs);
    free(conn);
    if (net->on_conn_gone) net->on_conn_gone(net);
}

ssize_t xConnRecv(xConn *conn, char *buf, size_t len) {
    ssize_t n = conn->transport->recv(conn, buf, len);
    if (n > 0) xCounterAdd(&conn->net->counters.bytes_in, (uint64_t)n);
    return n;
}

void xConnRecvBulk(xConn *conn, bool on) {
    if (!xConnClosed(conn) && conn->transport->reads_through_loop)
        xEventLoopRecvBulk(conn->net->loop, conn->fd, on);
}

size_t xConnPending(const xConn *conn) { return conn->out_pending; }

/* Whether a send the loop's backend was given may still point at the output. */
static bool send_in_flight(const xConn *conn) { return conn->send == XCONN_SEND_IN_FLIGHT; }

/* xConnReserve without a block that has room: a block from the pool, grown
 * to len. Apart, so the common case stays small enough to inline. */
char *xConnReserveMore(xConn *conn, size_t len) {
    /* Past its output (lingering, closed), conn holds no block (out_reset
     * let it go), so a write never gets past here. */
    if (!xConnTakesOutput(conn)) return NULL;
    if (xBufferPoolAcquire(&conn->net->buffers, &conn->out) != XOK) return NULL;
    /* Growing moves the bytes a send in flight may not have handed in yet
     * (output queued by another connection's end of turn): hand it in first. */
    if (conn->out.cap - conn->out.len < len && send_in_flight(conn)) xEventLoopSubmit(conn->net->loop);
    if (xBufferReserve(&conn->out, len) != XOK) return NULL;
    return conn->out.data + conn->out.len;
}

xErrno xConnWrite(xConn *conn, const void *bytes, size_t len) {
    if (!xConnTakesOutput(conn)) return XERR_CLOSED;
    if (len == 0) return XOK;
    char *dst = xConnReserve(conn, len);
    if (!dst) return XERR_NOMEM;
    memcpy(dst, bytes, len);
    xConnCommit(conn, len);
    return XOK;
}

static bool grow_refs(xConn *conn) {
    if (conn->out_nrefs < conn->out_refs_cap) return true;
    size_t cap = conn->out_refs_cap ? conn->out_refs_cap * 2 : 8;
    xOutRef *refs = realloc(conn->out_refs, cap * sizeof *refs);
    if (!refs) return false;
    conn->out_refs = refs;
    conn->out_refs_cap = cap;
    return true;
}

xErrno xConnWriteRef(xConn *conn, const void *bytes, size_t len, void (*release)(void *), void *arg) {
    xErrno err = XOK;
    bool marker = len == 0;
    if (!xConnTakesOutput(conn)) {
        err = XERR_CLOSED;
    } else if (marker && conn->out_pending == 0) {
        /* nothing queued can point at the memory: release it now */
    } else if (!marker && len < XCONN_COPY_BELOW) {
        err = xConnWrite(conn, bytes, len);
    } else if (!grow_refs(conn)) {
        if (marker) return XERR_NOMEM; /* keep the memory: queued bytes may point into it */
        err = xConnWrite(conn, bytes, len);
    } else {
        conn->out_refs[conn->out_nrefs++] = (xOutRef){
            .data = bytes, .len = len, .mark = conn->out.len, .release = release, .arg = arg, .fd = -1};
        conn->out_pending += len;
        return XOK;
    }
    if (release) release(arg);
    return err;
}

/* Reads len bytes of fd from offset into buf; false when the file ended (or
 * failed) first, with *got what was read. */
static bool read_file(int fd, off_t offset, char *buf, size_t len, size_t *got) {
    size_t done = 0;
    while (done < len) {
        ssize_t n = pread(fd, buf + done, len - done, offset + (off_t)done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        done += (size_t)n;
    }
    *got = done;
    return done == len;
}

xErrno xConnWriteFile(xConn *conn, int fd, off_t offset, size_t len, void (*release)(void *), void *arg) {
    xErrno err = XOK;
    if (!xConnTakesOutput(conn)) {
        err = XERR_CLOSED;
    } else if (len <= XCONN_FILE_COPY_MAX) {
        char *dst = len ? xConnReserve(conn, len) : NULL;
        size_t got = 0;
        if (len && !dst) {
            err = XERR_NOMEM;
        } else if (len && !read_file(fd, offset, dst, len, &got)) {
            xConnCommit(conn, got);
            xConnCloseAfterFlush(conn);
            err = XERR_CLOSED;
        } else {
            xConnCommit(conn, len);
        }
    } else if (!grow_refs(conn)) {
        err = XERR_NOMEM;
    } else {
        conn->out_refs[conn->out_nrefs++] = (xOutRef){
            .len = len, .mark = conn->out.len, .release = release, .arg = arg, .fd = fd, .offset = offset};
        conn->out_pending += len;
        return XOK;
    }
    if (release) release(arg);
    return err;
}

/* Gathers the unsent bytes in order: buffered bytes up to each ref's mark,
 * then the ref, then the buffered bytes after it; up to a file's range, which
 * send_file takes once everything before it is out. */
static inline int gather(const xConn *conn, struct iovec *iov) {
    int n = 0;
    size_t pos = conn->out_sent;
    size_t i = conn->out_ref_index;
    for (; i < conn->out_nrefs && n < XCONN_IOV_MAX - 1; i++) {
        const xOutRef *ref = &conn->out_refs[i];
        if (ref->mark > pos) {
            iov[n++] = (struct iovec){conn->out.data + pos, ref->mark - pos};
            pos = ref->mark;
        }
        size_t skip = i == conn->out_ref_index ? conn->out_ref_sent : 0;
        if (!ref->data && ref->len > skip) return n;
        if (ref->len > skip) iov[n++] = (struct iovec){(void *)(ref->data + skip), ref->len - skip};
    }
    /* The buffered tail only once every reference before it is gathered. */
    if (i == conn->out_nrefs && conn->out.len > pos && n < XCONN_IOV_MAX)
        iov[n++] = (struct iovec){conn->out.data + pos, conn->out.len - pos};
    return n;
}

/* Sends some of the file range at the queue's front (gather found nothing
 * before it): through the transport's sendfile where it has one and can on
 * this connection (*use_sendfile), else read into a piece for sendv. The
 * bytes sent; 0 when the file ended first; -1 with errno. */
static ssize_t send_file(xConn *conn, bool *use_sendfile) {
    const xOutRef *ref = &conn->out_refs[conn->out_ref_index];
    size_t skip = conn->out_ref_sent, left = ref->len - skip;
    off_t at = ref->offset + (off_t)skip;
    if (*use_sendfile) {
        ssize_t w = conn->transport->sendfile(conn, ref->fd, at, left);
        if (w >= 0 || errno != EOPNOTSUPP) return w;
        *use_sendfile = false; /* this connection's transport cannot now */
    }
    /* A short read sends what it got; the next call finds the end. */
    size_t got;
    read_file(ref->fd, at, file_piece, left < XCONN_FILE_PIECE ? left : XCONN_FILE_PIECE, &got);
    if (got == 0) return 0;
    struct iovec iov = {file_piece, got};
    return conn->transport->sendv(conn, &iov, 1);
}

/* Accounts for sent bytes, releasing each reference (and each marker) as
 * soon as everything up to its end has gone. */
static inline void advance(xConn *conn, size_t sent) {
    conn->out_pending -= sent;
    for (;;) {
        xOutRef *ref = conn->out_ref_index < conn->out_nrefs ? &conn->out_refs[conn->out_ref_index] : NULL;
        if (ref && conn->out_sent == ref->mark && conn->out_ref_sent == ref->len) {
            if (ref->release) ref->release(ref->arg);
            conn->out_ref_index++;
            conn->out_ref_sent = 0;
            continue;
        }
        if (!sent) break;
        if (!ref || conn->out_sent < ref->mark) {
            size_t limit = ref ? ref->mark : conn->out.len;
            size_t step = limit - conn->out_sent < sent ? limit - conn->out_sent : sent;
            conn->out_sent += step;
            sent -= step;
            continue;
        }
        size_t left = ref->len - conn->out_ref_sent;
        size_t step = left < sent ? left : sent;
        conn->out_ref_sent += step;
        sent -= step;
    }
}

static void start_linger(xConn *conn);
static void linger_from_now(xConn *conn);
static void discard_input(xConn *conn);

static void out_reset(xConn *conn) {
    release_out_refs(conn);
    conn->out_sent = conn->out_pending = 0;
    xBufferPoolRelease(&conn->net->buffers, &conn->out);
}

static void flush(xConn *conn, bool progressed);
static void blocked_after(xConn *conn, bool progressed);

/* The queue went out while its protocol waited for it (xConnWaitFlushed, a
 * full socket, a flush that met a send in flight): it hears on_flushed.
 * Only where the loop moved the bytes on, never within a protocol's call;
 * still waiting where the send went on to a full socket. */
static void tell_flushed(xConn *conn) {
    if (xConnClosed(conn) || xConnLingering(conn) || conn->send != XCONN_SEND_READY) return;
    conn->flush_wait = false;
    if (conn->proto->on_flushed) conn->proto->on_flushed(conn);
}

/* Hands the turn's output to the loop's backend as one send, which the
 * kernel takes with the wait that ends the turn: one system call for all of
 * a turn's sends. The completion (send_completed) carries on from there.
 * Where it cannot (a file's range comes first, no room), a flush. */
static void send_at_turn_end(xConn *conn) {
    /* In flight, or a full socket: its end sends what is queued. */
    if (conn->send != XCONN_SEND_READY) return;
    struct iovec iov[XCONN_IOV_MAX];
    int n = conn->transport->sends_through_loop && conn->state == XCONN_OPEN ? gather(conn, iov) : 0;
    size_t gathered = 0;
    for (int i = 0; i < n; i++) gathered += iov[i].iov_len;
    /* Only the whole queue: the loop hears a send's completion when it next
     * wakes for something else, so what would follow it (a file's range, the
     * iovecs past the most, a closing connection's next step) would wait as
     * long. A socket too full to take it all wakes the loop itself. */
    if (n > 0 && gathered == conn->out_pending && xEventLoopSendQueue(conn->net->loop, conn->fd, iov, n) == 0)
        conn->send = XCONN_SEND_IN_FLIGHT;
    else
        xConnFlush(conn);
}

static void flush_at_turn_end(xEventLoop *loop, xTurnEnd *call) {
    xConn *conn = (xConn *)((char *)call - offsetof(xConn, flush_soon));
    if (xConnPending(conn)) {
        if (conn->net->sends_by_completion)
            send_at_turn_end(conn);
        else
            xConnFlush(conn);
    }
    /* Gone whole (or nothing was left to send): a writer waiting hears it
     * now, as no event will follow. A send in flight tells at completion. */
    if (conn->flush_wait) tell_flushed(conn);
    xConnRelease(conn); /* taken by xConnFlushSoon */
}

/* The backend's send completed: account for what it took, then go on as a
 * flush does, synchronously (what is left: the rest of a short send, output
 * queued meanwhile; a closing connection's next step). A protocol waiting
 * (flush_wait: it asked, or flushed meanwhile) hears on_flushed once the
 * output is out, as after a full socket. */
/* Kept out of on_io, which every event of every connection runs, on epoll
 * too, where this never does: inlined, it made each of them dearer. */
__attribute__((noinline)) static void send_completed(xConn *conn) {
    conn->send = XCONN_SEND_READY;
    ssize_t w = xEventLoopSendResult(conn->net->loop, conn->fd);
    if (w < 0) {
        if (errno == EAGAIN)
            blocked_after(conn, false); /* the drained socket's XEV_WRITE flushes */
        else
            xConnClose(conn); /* EPIPE, ECONNRESET: as a failed send(2) */
        return;
    }
    xCounterAdd(&conn->net->counters.bytes_out, (uint64_t)w);
    if ((size_t)w == conn->out_pending && !conn->flush_wait && conn->state == XCONN_OPEN &&
        !conn->transport->flush) {
        out_reset(conn); /* all of it, mostly, and no one waits to hear so */
        return;
    }
    advance(conn, (size_t)w);
    flush(conn, w > 0);
    if (conn->flush_wait) tell_flushed(conn);
}

void xConnWaitFlushed(xConn *conn) {
    if (xConnClosed(conn)) return;
    conn->flush_wait = true;
    /* A full socket's room or a send in flight's completion tells it;
     * otherwise the turn's end sends what is queued, and tells it once out. */
    if (conn->send == XCONN_SEND_READY) xConnFlushSoon(conn);
}

void xConnFlushSoon(xConn *conn) {
    if (xConnClosed(conn) || conn->flush_soon.queued) return;
    xConnRetain(conn);
    xEventLoopAtTurnEnd(conn->net->loop, &conn->flush_soon);
}

void xConnBlocked(xConn *conn) {
    conn->send = XCONN_SEND_BLOCKED;
    xConnSetTimeout(conn, conn->net->send_timeout_ms);
    conn->send_armed = true;
}

/* The socket took nothing more. The send timeout counts from the last byte
 * it took: a wake-up that moved nothing (a completion backend may report
 * writability the socket no longer has) must not restart it. */
static void blocked_after(xConn *conn, bool progressed) {
    if (progressed || !conn->send_armed) {
        xConnBlocked(conn);
    } else {
        conn->send = XCONN_SEND_BLOCKED;
    }
}

void xConnFlush(xConn *conn) { flush(conn, false); }

xErrno xConnWriteNow(xConn *conn, const struct iovec *pieces, int count) {
    if (!xConnTakesOutput(conn)) return XERR_CLOSED;
    struct iovec iov[XCONN_IOV_MAX];
    int n = 0;
    size_t queued = 0;
    if (conn->send == XCONN_SEND_READY && conn->state == XCONN_OPEN) {
        n = gather(conn, iov);
        for (int i = 0; i < n; i++) queued += iov[i].iov_len;
        /* Only behind the whole queue, so the pieces leave after it. */
        if (queued != conn->out_pending || n + count > XCONN_IOV_MAX) n = -1;
    } else {
        n = -1;
    }
    size_t sent = 0;
    bool progressed = false;
    if (n >= 0) {
        memcpy(iov + n, pieces, (size_t)count * sizeof *pieces);
        ssize_t w = conn->transport->sendv(conn, iov, n + count);
        /* A failure or a full socket: the flush below meets it again and
         * acts on it as any flush does. */
        if (w > 0) {
            sent = (size_t)w;
            progressed = true;
            xCounterAdd(&conn->net->counters.bytes_out, sent);
            size_t of_queue = sent < queued ? sent : queued;
            advance(conn, of_queue);
            sent -= of_queue;
        }
    }
    /* What the socket did not take is copied behind the queue. */
    for (int i = 0; i < count; i++) {
        size_t len = pieces[i].iov_len, skip = sent < len ? sent : len;
        sent -= skip;
        if (len == skip) continue;
        char *dst =
            xConnReserve(conn, len - skip); /* not xConnWrite: a third caller kept it from being inlined */
        if (!dst) return XERR_NOMEM;
        memcpy(dst, (const char *)pieces[i].iov_base + skip, len - skip);
        xConnCommit(conn, len - skip);
    }
    /* A failed send closes the connection, and its protocol's on_close may
     * drop the last reference to it (an upstream client's): held until the
     * answer is read. */
    xConnRetain(conn);
    flush(conn, progressed);
    xErrno err = xConnClosed(conn) ? XERR_CLOSED : XOK;
    xConnRelease(conn);
    return err;
}

/* Sends what is queued as far as the socket takes it; progressed: bytes went
 * just before (the send timeout restarts if the socket fills now). */
static void flush(xConn *conn, bool progressed) {
    if (xConnClosed(conn)) return;
    if (conn->send != XCONN_SEND_READY) {
        /* Its protocol may wait for the queue to drain: the completion
         * flushes and tells it (a full socket's room always does). */
        if (conn->send == XCONN_SEND_IN_FLIGHT) conn->flush_wait = true;
        return;
    }
    struct iovec iov[XCONN_IOV_MAX];
    bool use_sendfile = conn->transport->sendfile != NULL;
    for (;;) {
        int n = gather(conn, iov);
        ssize_t w;
        if (n > 0) {
            w = conn->transport->sendv(conn, iov, n);
        } else if (conn->out_ref_index < conn->out_nrefs && !conn->out_refs[conn->out_ref_index].data &&
                   conn->out_sent == conn->out_refs[conn->out_ref_index].mark) {
            if ((w = send_file(conn, &use_sendfile)) == 0) {
                /* The file shrank under a response that promised its length:
                 * nothing true can follow what was sent of it. */
                xConnClose(conn);
                return;
            }
        } else {
            break;
        }
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN)
                blocked_after(conn, progressed);
            else
                xConnClose(conn);
            return;
        }
        progressed |= w > 0;
        advance(conn, (size_t)w);
        xCounterAdd(&conn->net->counters.bytes_out, (uint64_t)w);
    }
    if (conn->transport->flush && !conn->transport->flush(conn)) {
        if (errno == EAGAIN)
            blocked_after(conn, progressed);
        else
            xConnClose(conn);
        return;
    }
    out_reset(conn);
    if (conn->state == XCONN_OPEN) return;
    if (conn->state == XCONN_FLUSHING) {
        start_linger(conn);
        return;
    }
    /* The transport's last bytes are out: linger from now (not again from a
     * later flush), unless the input ended while they waited. */
    if (!conn->linger_until_ms) linger_from_now(conn);
    if (!xConnClosed(conn)) discard_input(conn);
}

/* Arms the timer for whichever comes first, the linger's end or its timeout
 * without input; closes conn when the end has passed. */
static void linger_rearm(xConn *conn) {
    uint64_t now = xEventLoopNowMs(conn->net->loop);
    if (now >= conn->linger_until_ms) {
        xConnClose(conn);
        return;
    }
    uint64_t left = conn->linger_until_ms - now;
    uint32_t idle = conn->net->linger.timeout_ms;
    xConnSetTimeout(conn, idle && idle < left ? idle : (uint32_t)left);
}

static void linger_from_now(xConn *conn) {
    conn->linger_until_ms = xEventLoopNowMs(conn->net->loop) + conn->net->linger.time_ms;
    linger_rearm(conn);
}

/* What a lingering connection reads is dropped: by default beneath the
 * transport, so TLS records are neither opened nor answered (our
 * close_notify went), and a transport that failed (a KeyUpdate it cannot
 * follow, a bad record) still hears its peer's FIN. */
static ssize_t recv_discarded(xConn *conn, char *buf, size_t len) {
    if (conn->transport->discard) return conn->transport->discard(conn, buf, len);
    return plain_recv(conn, buf, len);
}

/* Drops what the peer sends, up to the linger's byte cap; the peer's end (or
 * a reset, or the cap) closes conn. Input restarts the timeout without input. */
static void discard_input(xConn *conn) {
    bool got = false;
    for (;;) {
        ssize_t n = recv_discarded(conn, file_piece, sizeof file_piece);
        if (n == 0 && conn->send != XCONN_SEND_READY) return; /* the last bytes wait: closed once out */
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) break;
        if (n <= 0 || (size_t)n >= conn->linger_left) {
            xConnClose(conn);
            return;
        }
        xCounterAdd(&conn->net->counters.bytes_in, (uint64_t)n);
        conn->linger_left -= (size_t)n;
        got = true;
    }
    /* While the transport's last bytes wait, the timer is the send timeout. */
    if (got && conn->send == XCONN_SEND_READY) linger_rearm(conn);
}

static void start_linger(xConn *conn) {
    conn->state = XCONN_LINGERING;
    out_reset(conn); /* all of it is out; the block goes back, and no write takes another */
    conn->linger_left = conn->net->linger.max_bytes;
    conn->transport->shutdown_write(conn);
    /* Bytes of the transport's own that met a full socket (a close_notify)
     * keep the send timeout; lingering starts once they are out. */
    if (conn->send != XCONN_SEND_BLOCKED) linger_from_now(conn);
    if (!xConnClosed(conn)) discard_input(conn);
}

void xConnCloseAfterFlush(xConn *conn) {
    if (conn->state != XCONN_OPEN) return;
    conn->state = XCONN_FLUSHING;
    if (xConnPending(conn) == 0)
        start_linger(conn);
    else
        xConnFlush(conn);
}

void xConnReadFailed(xConn *conn) {
    if (errno == EPROTO)
        xConnCloseAfterFlush(conn);
    else
        xConnClose(conn);
}

void xConnClose(xConn *conn) {
    if (conn->state == XCONN_CLOSED) return;
    conn->state = XCONN_CLOSED;
    xTimerStop(conn->net->loop, &conn->timer);
    xEventLoopRemove(conn->net->loop, conn->fd);
    if (conn->transport->close) conn->transport->close(conn);
    close(conn->fd);
    conn->fd = -1;
    out_reset(conn);
    /* The read buffer stays: a handler that still holds its request has
     * views into it until the response ends (xConnRelease frees it). */
    if (conn->proto->on_close) conn->proto->on_close(conn);
    xConnRelease(conn);
}

void xConnSetTimeout(xConn *conn, uint32_t ms) {
    conn->send_armed = false;
    if (ms)
        xTimerStart(conn->net->loop, &conn->timer, ms);
    else
        xTimerStop(conn->net->loop, &conn->timer);
}

static void on_timer(xEventLoop *loop, xTimer *timer, void *arg) {
    xConn *conn = arg;
    if (xConnLingering(conn) || conn->send == XCONN_SEND_BLOCKED) {
        xConnClose(conn);
        return;
    }
    xConnRetain(conn);
    conn->proto->on_timeout(conn);
    xConnRelease(conn);
}

static void on_io(xEventLoop *loop, int fd, unsigned events, void *arg) {
    xConn *conn = arg;
    xConnRetain(conn);
    /* Only while a send is in flight: one reported for an earlier socket
     * with this fd, closed in this turn, is not this connection's. */
    if ((events & XEV_SENT) && send_in_flight(conn)) send_completed(conn);
    if (events & XEV_ERROR) conn->hangup = true;
    if (events & XEV_EOF) conn->peer_closed = true;
    if (events & (XEV_READ | XEV_ERROR)) conn->readable = true;
    if ((events & (XEV_WRITE | XEV_ERROR)) && conn->send == XCONN_SEND_BLOCKED) {
        conn->send = XCONN_SEND_READY;
        xConnFlush(conn);
        tell_flushed(conn);
    }
    if (!xConnClosed(conn) && conn->readable) {
        if (xConnLingering(conn))
            discard_input(conn);
        else
            conn->proto->on_readable(conn);
    }
    xConnRelease(conn);
}
