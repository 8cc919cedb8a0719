/* poller_uring.c — the io_uring backend: readiness from one multishot poll
 * per edge-triggered fd, and from a one-shot poll armed again after each
 * report for a level-triggered one, every registration, re-arming and removal
 * of a loop turn submitted together with the wait in one io_uring_enter. Sockets whose every
 * read goes through the loop (XEV_RECV) are not polled for input: a
 * multishot receive fills buffers from one ring per loop ahead of the reader,
 * whose xEventLoopRecv copies them out, so reading costs no system call.
 *
 * The buffers' memory follows their use: they are reserved, not touched, at
 * start; a few are put in the ring and more as the ones in it run low; and a
 * loop that has been quiet for a moment gives the pages of the ones nobody
 * holds back to the kernel (they are faulted in again when next received
 * into). An idle connection holds none.
 *
 * Sends may go through the ring too (uring_send): the output a loop turn
 * gathered is handed in with the wait that ends it, MSG_DONTWAIT so that
 * the kernel takes what fits there and then (or fails with EAGAIN, as
 * send(2) would) and never holds on to the caller's memory afterwards; the
 * completion tells the socket's watch how much went (XPOLLER_SENT).
 *
 * The ring belongs to one thread (SINGLE_ISSUER, DEFER_TASKRUN: completions
 * are reaped only when that thread waits). A loop is often created on one
 * thread and run on another, so the ring starts disabled and is enabled by
 * the first wait, which makes the running thread its issuer; until then
 * registrations only queue. */
#define _GNU_SOURCE /* POLLRDHUP */
#include "xbase/io/poller.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <liburing.h>

#define XURING_SQ_ENTRIES 256
/* Each watched fd may have a completion waiting; a full completion queue ends
 * multishot requests (re-armed below), so make that rare. */
#define XURING_CQ_ENTRIES 16384
/* The provided buffers a loop receives into, shared by all its sockets: a
 * socket holds one only from the completion until its reader copies it out,
 * so an idle connection holds none. At most XURING_BUFS, put in the ring
 * XURING_BUFS_STEP at a time: the first at start, more whenever one wait's
 * completions needed more than half of those in it (they took them, or found
 * none left). */
#define XURING_BUFS 512 /* a power of two: the ring's entries */
#define XURING_BUFS_STEP 64
#define XURING_BUF_SIZE 4096 /* a page: each one's memory is given back alone */
#define XURING_GROUP 0
/* A socket's reader that leaves this many buffers unread (it waits for its
 * output to drain, say) stops the receiving ahead: the rest of its input stays
 * in the socket, as on epoll, where it pushes back on the client, and where
 * a close finds it and resets the connection. */
#define XURING_AHEAD_MAX 8
/* After this long with nothing to report, the pages of the buffers nobody
 * holds go back to the kernel. */
#define XURING_QUIET_MS 200

/* What a completion is for: the tag's top two bits. */
enum { KIND_POLL, KIND_RECV, KIND_POLLIN, KIND_SEND };
/* Cancellations' completions say nothing. */
#define CANCEL_TAG UINT64_MAX
#define NO_CHUNK (-1)

/* How a socket's input reaches its reader. One state rather than a flag per
 * question (is a receive in flight, may the reader take the socket itself, is
 * one to be armed, did the stream end), because every answer follows from
 * where the socket is in this cycle, and only these moves happen:
 *
 *   DIRECT → IDLE         recv_ahead(on): whoever read the socket itself is done
 *   IDLE → DIRECT         recv_ahead(off), before anything was armed
 *   IDLE → AHEAD          armed at the end of the turn (queue_changes)
 *   IDLE → POLLING_IN     the same, while more than half the buffers are held
 *   AHEAD → STOPPING      the reader fell XURING_AHEAD_MAX chunks behind
 *   AHEAD, STOPPING → IDLE  the receive ended (received): the buffers ran out or
 *                         it was stopped, so the reader drains the socket and then
 *                         re-arms (read_socket); or the completion queue filled,
 *                         and it is re-armed at once
 *   POLLING_IN → IDLE     input came (take): the reader drains, then re-arms
 *   → ENDED, → FAILED     the end of the stream, or an error, from a receive or a read
 *
 * Bulk reading (recv_bulk) moves AHEAD to STOPPING as falling behind does,
 * and arms the one-shot POLLIN instead of a receive until it is turned off.
 *
 * What keeps every byte in order: the reader takes the socket itself (after
 * what was received ahead) only where no receive is in flight: DIRECT, IDLE
 * and POLLING_IN. */
typedef enum xRecvMode {
    /* Read with recv(2), input told by the poll: sockets not added with
     * XEV_RECV, every socket where the kernel has no buffer rings, and one
     * that something else reads for now (OpenSSL's handshake). */
    RECV_DIRECT,
    /* Received ahead, nothing in flight for input. Queued, a receive is armed
     * at the end of the turn; after a receive stopped (the buffers ran out,
     * or the reader fell behind), the rest waits in the socket, which its
     * reader takes itself until drained, and then one is armed. */
    RECV_IDLE,
    /* A multishot receive is in flight: input arrives as chunks. */
    RECV_AHEAD,
    /* The reader fell XURING_AHEAD_MAX chunks behind: the receive is being
     * cancelled, and chunks may come until its last completion. */
    RECV_STOPPING,
    /* Armed while more than half the buffers were held: a one-shot POLLIN
     * instead, after which the reader takes the socket itself. */
    RECV_POLLING_IN,
    /* The end of the stream came: after the chunks, reads return 0. */
    RECV_ENDED,
    /* Receiving failed: after the chunks, reads fail with the error. */
    RECV_FAILED,
} xRecvMode;

/* In xUringFd.events: the fd is watched (it may wait for nothing, for now). */
#define WATCHED 0x80u
_Static_assert((WATCHED & (XEV_READ | XEV_WRITE | XEV_RECV | XEV_EDGE)) == 0, "a bit of its own");

typedef struct xUringFd {
    uint32_t gen;       /* bumped by every add and remove: older completions are stale */
    uint32_t poll_gen;  /* the same for its poll, bumped by modify too: a poll cancelled is stale */
    int32_t sent;       /* the last send's result, as its completion said it (-errno) */
    int16_t head, tail; /* received chunks not yet read, linked through xUring.chunks */
    uint16_t unread;    /* how many */
    uint8_t events;     /* XEV_* asked for, and WATCHED; 0: not watched */
    uint8_t recv;       /* xRecvMode */
    uint8_t error;      /* RECV_FAILED's errno (every errno value fits) */
    bool queued;        /* in the arm list */
    bool polling;       /* its multishot poll is submitted */
    bool bulk;          /* its reader takes the socket itself for now (recv_bulk) */
} xUringFd;

typedef struct xChunk {
    uint16_t off, len; /* what is left of the buffer to read */
    int16_t next;
} xChunk;

typedef struct xUring {
    xPoller base;
    struct io_uring ring;
    bool enabled;
    bool completions_in_wait; /* DEFER_TASKRUN: the kernel fills buffers only inside our waits */
    xUringFd *fds;            /* indexed by fd */
    size_t fd_cap;
    int *arm; /* fds with a request still to be submitted */
    size_t narm, arm_cap;
    uint64_t *cancel; /* requests of removed fds, to be cancelled */
    size_t ncancel, cancel_cap;
    /* The headers and iovecs of the gathered sends queued since the last
     * submission, which the kernel reads when they are handed in: reused
     * from the start after each, and grown only once none is queued. */
    struct msghdr *msgs;
    size_t nmsgs, msgs_cap;
    struct iovec *iovs;
    size_t niovs, iovs_cap;
    unsigned sends; /* queued since the last wait: their completions come as they are handed in */
    struct io_uring_buf_ring *buf_ring; /* NULL: the kernel has no provided buffer rings */
    char *bufs;                         /* XURING_BUFS reserved; pages appear as they are received into */
    unsigned provided;                  /* buffers put in the ring so far: ids below this */
    unsigned held;                      /* buffers completions gave us and we have not given back */
    unsigned short_by;                  /* receives this wait that found no buffer left */
    bool touched;                       /* received into since the pages were last given back */
    int quiet_ms;                       /* how long the waits since the last report have slept */
    xChunk chunks[XURING_BUFS];         /* by buffer id */
} xUring;

/* user_data: the kind, the fd and the generation that submitted it. */
static uint64_t tag_of(unsigned kind, int fd, uint32_t gen) {
    return (uint64_t)kind << 62 | (uint64_t)(gen & 0x3fffffff) << 32 | (uint32_t)fd;
}

static bool push(void **array, size_t *n, size_t *cap, size_t size, const void *item) {
    if (*n == *cap) {
        size_t grown = *cap ? *cap * 2 : 64;
        void *p = realloc(*array, grown * size);
        if (!p) return false;
        *array = p;
        *cap = grown;
    }
    memcpy((char *)*array + *n * size, item, size);
    (*n)++;
    return true;
}

/* Queues fd for queue_changes; without memory it is tried again at its next event. */
static void want_arm(xUring *u, int fd) {
    xUringFd *f = &u->fds[fd];
    if (!f->queued && push((void **)&u->arm, &u->narm, &u->arm_cap, sizeof fd, &fd)) f->queued = true;
}

static void want_cancel(xUring *u, uint64_t tag) {
    /* Without memory the request lives on until the ring goes, its
     * completions stale. */
    push((void **)&u->cancel, &u->ncancel, &u->cancel_cap, sizeof tag, &tag);
}

/* ---- The buffers ---- */

static void put_in_ring(xUring *u, unsigned bid, int offset) {
    io_uring_buf_ring_add(u->buf_ring, u->bufs + (size_t)bid * XURING_BUF_SIZE, XURING_BUF_SIZE,
                          (unsigned short)bid, io_uring_buf_ring_mask(XURING_BUFS), offset);
}

/* Puts the next step of buffers in the ring. */
static void provide_more(xUring *u) {
    unsigned step =
        XURING_BUFS - u->provided < XURING_BUFS_STEP ? XURING_BUFS - u->provided : XURING_BUFS_STEP;
    for (unsigned i = 0; i < step; i++) put_in_ring(u, u->provided + i, (int)i);
    io_uring_buf_ring_advance(u->buf_ring, (int)step);
    u->provided += step;
}

/* A completion gave us a buffer. */
static void take_buffer(xUring *u) {
    u->held++;
    u->touched = true;
}

static void give_back(xUring *u, unsigned bid) {
    put_in_ring(u, bid, 0);
    io_uring_buf_ring_advance(u->buf_ring, 1);
    u->held--;
}

/* Gives the pages of every buffer nobody holds back to the kernel, which
 * faults fresh ones in when it next receives into them. Safe only when no
 * buffer can be being filled and every one filled has been reported: between
 * waits of a ring whose completions run only inside them, with none left to
 * reap. Rare, so the held ones are found by walking the sockets' chunks. */
static void give_pages_back(xUring *u) {
    uint64_t held[XURING_BUFS / 64] = {0};
    for (size_t fd = 0; fd < u->fd_cap; fd++)
        for (int16_t c = u->fds[fd].events ? u->fds[fd].head : NO_CHUNK; c != NO_CHUNK; c = u->chunks[c].next)
            held[c / 64] |= (uint64_t)1 << (c % 64);
    unsigned from = 0;
    for (unsigned bid = 0; bid <= u->provided; bid++) {
        if (bid < u->provided && !(held[bid / 64] & (uint64_t)1 << (bid % 64))) continue;
        if (bid > from)
            madvise(u->bufs + (size_t)from * XURING_BUF_SIZE, (size_t)(bid - from) * XURING_BUF_SIZE,
                    MADV_DONTNEED);
        from = bid + 1;
    }
    u->touched = false;
}

/* The next wait may need as many buffers as this one's completions did
 * (those they took, and those they found missing): keep that under half of
 * those in the ring. */
static void provide_for_next_wait(xUring *u) {
    while ((u->held + u->short_by) * 2 > u->provided && u->provided < XURING_BUFS) provide_more(u);
    u->short_by = 0;
}

/* The wait's timeout (microseconds): the loop's, but at most XURING_QUIET_MS
 * while there are pages to give back, so that a loop going quiet wakes to
 * give them. */
static int64_t quiet_timeout(xUring *u, int64_t timeout_us) {
    if (!u->touched) return timeout_us;
    if (u->quiet_ms < XURING_QUIET_MS)
        return (uint64_t)timeout_us > XURING_QUIET_MS * 1000u ? XURING_QUIET_MS * 1000 : timeout_us;
    if (!u->completions_in_wait)
        u->touched = false; /* buffers may be filled whenever this thread leaves the kernel: never */
    else if (io_uring_cq_ready(&u->ring) == 0 && !io_uring_cq_has_overflow(&u->ring))
        give_pages_back(u);
    return timeout_us; /* (with completions left, it returns at once) */
}

/* ---- Handing in ---- */

/* After a submission: the sends' headers are read once none is left queued. */
static void forget_msgs(xUring *u) {
    if (io_uring_sq_ready(&u->ring) == 0) u->nmsgs = u->niovs = 0;
}

static void submit_queued(xUring *u) {
    if (!u->enabled) return; /* nothing is sent before the first wait */
    io_uring_submit(&u->ring);
    forget_msgs(u);
}

static struct io_uring_sqe *next_sqe(xUring *u) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
    if (sqe) return sqe;
    submit_queued(u);
    return io_uring_get_sqe(&u->ring);
}

/* ---- Registrations ---- */

static int uring_add(xPoller *poller, int fd, unsigned events) {
    xUring *u = (xUring *)poller;
    if ((size_t)fd >= u->fd_cap) {
        size_t cap = u->fd_cap ? u->fd_cap : 64;
        while (cap <= (size_t)fd) cap *= 2;
        xUringFd *fds = realloc(u->fds, cap * sizeof *fds);
        if (!fds) return -1;
        memset(fds + u->fd_cap, 0, (cap - u->fd_cap) * sizeof *fds);
        u->fds = fds;
        u->fd_cap = cap;
    }
    xUringFd *f = &u->fds[fd];
    if (f->events) {
        errno = EEXIST;
        return -1;
    }
    *f = (xUringFd){
        .gen = f->gen + 1,
        .poll_gen = f->poll_gen + 1,
        .events = (uint8_t)(events | WATCHED),
        .recv = (events & XEV_RECV) && u->buf_ring ? RECV_IDLE : RECV_DIRECT,
        .queued = f->queued,
        .head = NO_CHUNK,
        .tail = NO_CHUNK,
    };
    want_arm(u, fd);
    return f->queued ? 0 : -1;
}

/* A poll in flight is cancelled (its completions are stale from now on) and
 * one for the new events armed at the end of the turn; from fd's own callback
 * a level watch has none in flight, and its re-arming takes the new events. */
static int uring_modify(xPoller *poller, int fd, unsigned events) {
    xUring *u = (xUring *)poller;
    xUringFd *f = &u->fds[fd]; /* the loop modifies only what it added */
    uint8_t wanted = (uint8_t)(events | WATCHED);
    if (wanted == f->events) return 0;
    f->events = wanted;
    if (f->polling) {
        want_cancel(u, tag_of(KIND_POLL, fd, f->poll_gen));
        f->poll_gen++;
        f->polling = false;
    }
    want_arm(u, fd);
    return f->queued ? 0 : -1;
}

static void uring_remove(xPoller *poller, int fd) {
    xUring *u = (xUring *)poller;
    if ((size_t)fd >= u->fd_cap || !u->fds[fd].events) return;
    xUringFd *f = &u->fds[fd];
    /* A send queued for fd points at memory its owner frees once the socket
     * goes, and must reach the socket before it closes: hand it in now (a
     * system call only where a turn's end closes a socket it sent on). Its
     * completion is stale, like the rest of fd's. */
    if (io_uring_sq_ready(&u->ring)) submit_queued(u);
    /* A request holds a reference to the file, so the socket only really
     * closes (and its peer sees the FIN) once the cancellations are
     * submitted: at the end of this loop turn. */
    if (f->polling) want_cancel(u, tag_of(KIND_POLL, fd, f->poll_gen));
    if (f->recv == RECV_AHEAD || f->recv == RECV_STOPPING) want_cancel(u, tag_of(KIND_RECV, fd, f->gen));
    if (f->recv == RECV_POLLING_IN) want_cancel(u, tag_of(KIND_POLLIN, fd, f->gen));
    if (f->head != NO_CHUNK) {
        /* The socket goes (a watched socket is removed to be closed) with
         * input its reader never took. Where that input waits in the socket,
         * as on epoll, the kernel resets the connection instead of a FIN
         * that would queue behind the output a client that does not read
         * never takes: do what it would. */
        struct linger reset = {.l_onoff = 1, .l_linger = 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
    }
    for (int16_t c = f->head; c != NO_CHUNK; c = u->chunks[c].next) give_back(u, (unsigned)c);
    *f = (xUringFd){.gen = f->gen + 1,
                    .poll_gen = f->poll_gen + 1,
                    .queued = f->queued,
                    .head = NO_CHUNK,
                    .tail = NO_CHUNK};
}

static void uring_recv_ahead(xPoller *poller, int fd, bool on) {
    xUring *u = (xUring *)poller;
    xUringFd *f = (size_t)fd < u->fd_cap ? &u->fds[fd] : NULL;
    if (!f || !(f->events & XEV_RECV) || !u->buf_ring) return;
    if (!on) {
        /* Before fd's first wait (xConnSetTransport, before any I/O), when
         * nothing is submitted yet: the poll then watches for input itself. */
        if (f->recv == RECV_IDLE) f->recv = RECV_DIRECT;
        return;
    }
    if (f->recv != RECV_DIRECT) return;
    /* Whoever read the socket itself (OpenSSL's handshake) is done with it.
     * The poll watching for input goes, and what it may still report is
     * stale (a new generation); the receive armed with its successor at the
     * end of the turn finds any bytes already waiting in the socket. */
    if (f->polling) want_cancel(u, tag_of(KIND_POLL, fd, f->poll_gen));
    f->poll_gen++;
    f->polling = false;
    f->recv = RECV_IDLE;
    want_arm(u, fd);
}

/* A large read into the reader's own memory costs one copy and one system
 * call; received ahead, the same bytes come as a completion per 4 KiB buffer
 * and are copied twice (into the buffers, then out of them). */
static void uring_recv_bulk(xPoller *poller, int fd, bool on) {
    xUring *u = (xUring *)poller;
    xUringFd *f = (size_t)fd < u->fd_cap ? &u->fds[fd] : NULL;
    if (!f || !(f->events & XEV_RECV) || !u->buf_ring) return;
    f->bulk = on;
    /* What the receive brings until its last completion is read first; then
     * the reader drains the socket itself (IDLE), and what is armed after
     * is the one-shot poll. */
    if (on && f->recv == RECV_AHEAD) {
        want_cancel(u, tag_of(KIND_RECV, fd, f->gen));
        f->recv = RECV_STOPPING;
    }
}

/* ---- Reading ---- */

/* Copies out what was received ahead for f, giving each buffer emptied back. */
static size_t take_chunks(xUring *u, xUringFd *f, char *buf, size_t len) {
    size_t n = 0;
    while (n < len && f->head != NO_CHUNK) {
        xChunk *c = &u->chunks[f->head];
        size_t take = c->len < len - n ? c->len : len - n;
        memcpy(buf + n, u->bufs + (size_t)f->head * XURING_BUF_SIZE + c->off, take);
        n += take;
        c->off += (uint16_t)take;
        c->len -= (uint16_t)take;
        if (c->len) break;
        int16_t done = f->head;
        f->head = c->next;
        f->unread--;
        if (f->head == NO_CHUNK) f->tail = NO_CHUNK;
        give_back(u, (unsigned)done);
    }
    return n;
}

/* The socket itself, after n bytes received ahead, where no receive is in
 * flight. Drained (a short read, as a reader takes it, or EAGAIN), a socket
 * received ahead is armed again. */
static ssize_t read_socket(xUring *u, int fd, char *buf, size_t n, size_t len) {
    xUringFd *f = &u->fds[fd];
    ssize_t got = recv(fd, buf + n, len - n, 0);
    if (got == 0) {
        f->recv = RECV_ENDED;
    } else if ((got > 0 && (size_t)got < len - n) || (got < 0 && errno == EAGAIN)) {
        if (f->recv == RECV_IDLE) want_arm(u, fd);
    } else if (got < 0 && errno != EINTR) {
        f->recv = RECV_FAILED; /* reported by the next read, after these bytes */
        f->error = (uint8_t)errno;
    }
    if (n) return (ssize_t)n + (got > 0 ? got : 0);
    return got;
}

/* Reads what was received ahead, then, where nothing more can be, the socket. */
static ssize_t uring_recv(xPoller *poller, int fd, void *buf, size_t len) {
    xUring *u = (xUring *)poller;
    xUringFd *f = (size_t)fd < u->fd_cap ? &u->fds[fd] : NULL;
    if (!f || f->recv == RECV_DIRECT) return recv(fd, buf, len, 0);
    size_t n = take_chunks(u, f, buf, len);
    if (n == len) return (ssize_t)n;
    /* Where no receive is in flight, nothing else can take the socket's bytes. */
    if (f->recv == RECV_IDLE || f->recv == RECV_POLLING_IN) return read_socket(u, fd, buf, n, len);
    if (n) return (ssize_t)n;
    if (f->recv == RECV_ENDED) return 0;
    errno = f->recv == RECV_FAILED ? f->error : EAGAIN; /* or the receive in flight has yet to bring more */
    return -1;
}

/* Moves socket bytes into a pipe without copying them; the caller made
 * sure the pipe has room, so EAGAIN says the socket is drained. */
static ssize_t splice_socket(int fd, int pipe_wr, size_t len) {
    return splice(fd, NULL, pipe_wr, NULL, len, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
}

/* The socket itself where recv would read it (no receive in flight and
 * nothing received ahead left), with read_socket's bookkeeping, except that
 * only EAGAIN says it is drained. */
static ssize_t uring_splice_recv(xPoller *poller, int fd, int pipe_wr, size_t len) {
    xUring *u = (xUring *)poller;
    xUringFd *f = (size_t)fd < u->fd_cap ? &u->fds[fd] : NULL;
    if (!f || f->recv == RECV_DIRECT) return splice_socket(fd, pipe_wr, len);
    if (f->head != NO_CHUNK) {
        errno = EALREADY;
        return -1;
    }
    if (f->recv == RECV_IDLE || f->recv == RECV_POLLING_IN) {
        ssize_t got = splice_socket(fd, pipe_wr, len);
        if (got == 0) {
            f->recv = RECV_ENDED;
        } else if (got < 0 && errno == EAGAIN) {
            if (f->recv == RECV_IDLE) want_arm(u, fd);
        } else if (got < 0 && errno != EINTR) {
            f->recv = RECV_FAILED;
            f->error = (uint8_t)errno;
        }
        return got;
    }
    if (f->recv == RECV_ENDED) return 0;
    errno = f->recv == RECV_FAILED ? f->error : EAGAIN;
    return -1;
}

/* ---- Sending ---- */

/* A copy of iov and a header for it that last until the send is handed in;
 * NULL with errno where there is no room and none can be made. */
static struct msghdr *keep_msg(xUring *u, const struct iovec *iov, int iovcnt) {
    if (u->nmsgs == u->msgs_cap || u->niovs + (size_t)iovcnt > u->iovs_cap) {
        /* Growing moves them: hand in the sends that point there first. */
        if (u->nmsgs) submit_queued(u);
        if (u->nmsgs) {
            errno = EBUSY;
            return NULL;
        }
        size_t msgs_cap = u->msgs_cap ? u->msgs_cap : 16;
        size_t iovs_cap = u->iovs_cap ? u->iovs_cap : 64;
        while (iovs_cap < (size_t)iovcnt) iovs_cap *= 2;
        if (msgs_cap != u->msgs_cap) {
            struct msghdr *msgs = realloc(u->msgs, msgs_cap * sizeof *msgs);
            if (!msgs) return NULL;
            u->msgs = msgs;
            u->msgs_cap = msgs_cap;
        }
        if (iovs_cap != u->iovs_cap) {
            struct iovec *iovs = realloc(u->iovs, iovs_cap * sizeof *iovs);
            if (!iovs) return NULL;
            u->iovs = iovs;
            u->iovs_cap = iovs_cap;
        }
    }
    struct iovec *kept = u->iovs + u->niovs;
    memcpy(kept, iov, (size_t)iovcnt * sizeof *iov);
    u->niovs += (size_t)iovcnt;
    struct msghdr *msg = &u->msgs[u->nmsgs++];
    *msg = (struct msghdr){.msg_iov = kept, .msg_iovlen = (size_t)iovcnt};
    return msg;
}

static int uring_send(xPoller *poller, int fd, const struct iovec *iov, int iovcnt) {
    xUring *u = (xUring *)poller;
    xUringFd *f = (size_t)fd < u->fd_cap ? &u->fds[fd] : NULL;
    if (!f || !f->events || !u->enabled) {
        errno = EBADF;
        return -1;
    }
    struct msghdr *msg = NULL;
    if (iovcnt > 1) {
        /* Room for the entry first: handing in a full queue after keeping
         * the header would forget the header this send points at. */
        if (io_uring_sq_space_left(&u->ring) == 0) submit_queued(u);
        if (!(msg = keep_msg(u, iov, iovcnt))) return -1;
    }
    struct io_uring_sqe *sqe = msg ? io_uring_get_sqe(&u->ring) : next_sqe(u);
    if (!sqe) {
        if (msg) {
            u->nmsgs--;
            u->niovs -= (size_t)iovcnt;
        }
        errno = EBUSY;
        return -1;
    }
    /* One segment needs no header (IORING_OP_SEND), as send(2) needs none. */
    const int flags = MSG_NOSIGNAL | MSG_DONTWAIT;
    if (msg)
        io_uring_prep_sendmsg(sqe, fd, msg, flags);
    else
        io_uring_prep_send(sqe, fd, iov[0].iov_base, iov[0].iov_len, flags);
    io_uring_sqe_set_data64(sqe, tag_of(KIND_SEND, fd, f->gen));
    u->sends++;
    return 0;
}

static ssize_t uring_sent(xPoller *poller, int fd) {
    const xUringFd *f = &((xUring *)poller)->fds[fd]; /* it reported XPOLLER_SENT: within fd_cap */
    if (f->sent >= 0) return f->sent;
    errno = -f->sent;
    return -1;
}

static void uring_submit(xPoller *poller) {
    xUring *u = (xUring *)poller;
    if (io_uring_sq_ready(&u->ring)) submit_queued(u);
}

/* ---- Submitting ---- */

static unsigned poll_mask(const xUringFd *f) {
    unsigned mask = 0;
    /* Input on a socket received ahead is told by its receive completions. */
    if ((f->events & XEV_READ) && f->recv == RECV_DIRECT) mask |= POLLIN | POLLRDHUP;
    if (f->events & XEV_WRITE) mask |= POLLOUT;
    return mask;
}

/* A multishot receive into the buffers or, while more than half of them are
 * held, a one-shot wait for input, after which the reader uses recv(2): a
 * socket armed then would most likely find none. The same wait for a reader
 * reading in bulk. */
static void prep_receive(xUring *u, int fd, struct io_uring_sqe *sqe) {
    xUringFd *f = &u->fds[fd];
    if (u->held > XURING_BUFS / 2 || f->bulk) {
        io_uring_prep_poll_add(sqe, fd, POLLIN | POLLRDHUP);
        io_uring_sqe_set_data64(sqe, tag_of(KIND_POLLIN, fd, f->gen));
        f->recv = RECV_POLLING_IN;
        return;
    }
    io_uring_prep_recv_multishot(sqe, fd, NULL, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = XURING_GROUP;
    io_uring_sqe_set_data64(sqe, tag_of(KIND_RECV, fd, f->gen));
    f->recv = RECV_AHEAD;
}

/* Turns this turn's removals and registrations into submission entries. */
static void queue_changes(xUring *u) {
    size_t i = 0;
    for (; i < u->ncancel; i++) {
        struct io_uring_sqe *sqe = next_sqe(u);
        if (!sqe) break;
        /* Not IORING_OP_POLL_REMOVE: it gives up (EALREADY) on a poll whose
         * wakeup is being handled, which then lives on; a cancellation
         * marks it and always ends it. */
        io_uring_prep_cancel64(sqe, u->cancel[i], 0);
        io_uring_sqe_set_data64(sqe, CANCEL_TAG);
    }
    if (i) memmove(u->cancel, u->cancel + i, (u->ncancel - i) * sizeof *u->cancel);
    u->ncancel -= i;
    for (i = 0; i < u->narm; i++) {
        int fd = u->arm[i];
        xUringFd *f = &u->fds[fd];
        struct io_uring_sqe *sqe = NULL;
        if (f->events && !f->polling && poll_mask(f)) {
            if (!(sqe = next_sqe(u))) break;
            /* Level: a multishot poll reports wakeups, not readiness (one
             * that came before it, or that a callback left unread, is never
             * told again), so a one-shot poll instead, armed again after each
             * report: arming looks at the fd and completes at once while it
             * is ready. That is one entry in the submission the wait makes
             * anyway, and no extra system call. */
            if (f->events & XEV_EDGE)
                io_uring_prep_poll_multishot(sqe, fd, poll_mask(f));
            else
                io_uring_prep_poll_add(sqe, fd, poll_mask(f));
            io_uring_sqe_set_data64(sqe, tag_of(KIND_POLL, fd, f->poll_gen));
            f->polling = true;
        }
        if (f->events && f->recv == RECV_IDLE) {
            if (!(sqe = next_sqe(u))) break;
            prep_receive(u, fd, sqe);
        }
        f->queued = false;
    }
    if (i) memmove(u->arm, u->arm + i, (u->narm - i) * sizeof *u->arm);
    u->narm -= i;
}

/* ---- Completions ---- */

static unsigned readiness(int res) {
    if (res < 0) return XEV_ERROR;
    unsigned bits = 0;
    if (res & (POLLIN | POLLRDHUP)) bits |= XEV_READ;
    if (res & POLLRDHUP) bits |= XEV_EOF;
    if (res & POLLOUT) bits |= XEV_WRITE;
    if (res & (POLLERR | POLLHUP)) bits |= XEV_ERROR;
    return bits;
}

/* A receive completion: bytes queued for the reader, or how receiving ended. */
static unsigned received(xUring *u, int fd, const struct io_uring_cqe *cqe) {
    xUringFd *f = &u->fds[fd];
    unsigned bits = XEV_READ;
    if (cqe->flags & IORING_CQE_F_BUFFER) {
        int16_t bid = (int16_t)(cqe->flags >> IORING_CQE_BUFFER_SHIFT);
        take_buffer(u);
        u->chunks[bid] = (xChunk){.off = 0, .len = (uint16_t)(cqe->res > 0 ? cqe->res : 0), .next = NO_CHUNK};
        if (f->tail != NO_CHUNK)
            u->chunks[f->tail].next = bid;
        else
            f->head = bid;
        f->tail = bid;
        if (++f->unread >= XURING_AHEAD_MAX && (cqe->flags & IORING_CQE_F_MORE) && f->recv == RECV_AHEAD) {
            want_cancel(u, tag_of(KIND_RECV, fd, f->gen));
            f->recv = RECV_STOPPING;
        }
    }
    if (cqe->flags & IORING_CQE_F_MORE) return bits;
    bool stopped = f->recv == RECV_STOPPING;
    f->recv = RECV_IDLE;
    if (cqe->res == 0) {
        f->recv = RECV_ENDED;
        bits |= XEV_EOF;
    } else if (cqe->res == -ENOBUFS || stopped) {
        /* The rest waits in the socket, which the reader takes until it
         * drains it. */
        if (cqe->res == -ENOBUFS) u->short_by++;
    } else if (cqe->res < 0) {
        f->recv = RECV_FAILED;
        f->error = (uint8_t)-cqe->res;
        bits |= XEV_ERROR;
    } else {
        want_arm(u, fd); /* ended by a full completion queue: receive on */
    }
    return bits;
}

/* One completion as an event; 0 when it says nothing about a watched fd. */
static unsigned take(xUring *u, const struct io_uring_cqe *cqe, int *fd_out) {
    uint64_t tag = io_uring_cqe_get_data64(cqe);
    if (tag == CANCEL_TAG) return 0;
    int fd = (int)(uint32_t)tag;
    unsigned kind = (unsigned)(tag >> 62);
    xUringFd *f = &u->fds[fd]; /* every tag names an fd that was added, so within fd_cap */
    uint32_t gen = kind == KIND_POLL ? f->poll_gen : f->gen;
    if (!f->events || (uint32_t)(tag >> 32 & 0x3fffffff) != (gen & 0x3fffffff)) {
        /* A removed fd's: what it was received into goes straight back. */
        if (cqe->flags & IORING_CQE_F_BUFFER) {
            take_buffer(u);
            give_back(u, cqe->flags >> IORING_CQE_BUFFER_SHIFT);
        }
        return 0;
    }
    *fd_out = fd;
    if (kind == KIND_SEND) {
        f->sent = cqe->res;
        return XPOLLER_SENT;
    }
    if (kind == KIND_RECV) return received(u, fd, cqe);
    if (kind == KIND_POLLIN) {
        f->recv = RECV_IDLE; /* the reader takes the socket, and arms a receive once drained */
        return readiness(cqe->res);
    }
    if (!(cqe->flags & IORING_CQE_F_MORE)) {
        /* A level watch's one-shot poll, or the kernel ended a multishot one
         * (a full completion queue does that): arm it again, unless it
         * failed, which the callback hears as an error. */
        f->polling = false;
        if (cqe->res >= 0) want_arm(u, fd);
    }
    return readiness(cqe->res);
}

static int uring_wait(xPoller *poller, xPollerEvent *events, int max, int64_t timeout_us) {
    xUring *u = (xUring *)poller;
    if (!u->enabled) {
        /* Debian's liburing 2.3 declares io_uring_enable_rings but exports
         * no such symbol: register the call ourselves. */
        if (syscall(__NR_io_uring_register, u->ring.ring_fd, IORING_REGISTER_ENABLE_RINGS, NULL, 0) < 0)
            return -1;
        u->enabled = true;
    }
    queue_changes(u);
    timeout_us = quiet_timeout(u, timeout_us);
    int ret;
    if (timeout_us == 0) {
        ret = io_uring_submit_and_get_events(&u->ring);
    } else {
        struct io_uring_cqe *cqe;
        struct __kernel_timespec ts = {.tv_sec = timeout_us / 1000000,
                                       .tv_nsec = timeout_us % 1000000 * 1000};
        /* The sends' completions are in the queue as soon as they are handed
         * in, before the wait: sleep until something more comes. What they
         * say (the socket took it all, mostly) waits as long; a full socket
         * wakes us with its POLLOUT. */
        ret =
            io_uring_submit_and_wait_timeout(&u->ring, &cqe, 1 + u->sends, timeout_us < 0 ? NULL : &ts, NULL);
    }
    u->sends = 0;
    forget_msgs(u);
    if (ret < 0 && ret != -ETIME && ret != -EINTR && ret != -EBUSY) {
        errno = -ret;
        return -1;
    }
    int n = 0;
    unsigned head, seen = 0;
    struct io_uring_cqe *cqe;
    io_uring_for_each_cqe(&u->ring, head, cqe) {
        if (n == max) break;
        seen++;
        if ((events[n].events = take(u, cqe, &events[n].fd))) n++;
    }
    io_uring_cq_advance(&u->ring, seen);
    if (u->short_by || u->held * 2 > u->provided) provide_for_next_wait(u);
    /* Quiet is a run of waits that slept their whole time and found nothing;
     * while pages wait to be given back, each sleeps at most XURING_QUIET_MS. */
    if (seen || ret != -ETIME)
        u->quiet_ms = 0;
    else if (u->touched)
        u->quiet_ms += (int)(timeout_us / 1000);
    return n;
}

static void uring_destroy(xPoller *poller) {
    xUring *u = (xUring *)poller;
    io_uring_queue_exit(&u->ring);
    free(u->buf_ring);
    if (u->bufs) munmap(u->bufs, (size_t)XURING_BUFS * XURING_BUF_SIZE);
    free(u->fds);
    free(u->arm);
    free(u->cancel);
    free(u->msgs);
    free(u->iovs);
    free(u);
}

static const xPollerOps uring_ops = {
    .name = "io_uring",
    .add = uring_add,
    .modify = uring_modify,
    .remove = uring_remove,
    .wait = uring_wait,
    .recv = uring_recv,
    .recv_ahead = uring_recv_ahead,
    .recv_bulk = uring_recv_bulk,
    .splice_recv = uring_splice_recv,
    .send = uring_send,
    .sent = uring_sent,
    .submit = uring_submit,
    .destroy = uring_destroy,
};

/* The provided buffer ring (Linux 5.19); without it sockets are only polled.
 * The buffers' memory is only reserved here: a page is paid for when the
 * kernel first receives into it. */
static void setup_buffers(xUring *u) {
    void *ring_mem = NULL;
    if (posix_memalign(&ring_mem, 4096, XURING_BUFS * sizeof(struct io_uring_buf)) != 0) return;
    void *bufs = mmap(NULL, (size_t)XURING_BUFS * XURING_BUF_SIZE, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    struct io_uring_buf_reg reg = {
        .ring_addr = (uintptr_t)ring_mem, .ring_entries = XURING_BUFS, .bgid = XURING_GROUP};
    if (bufs == MAP_FAILED || io_uring_register_buf_ring(&u->ring, &reg, 0) != 0) {
        free(ring_mem);
        if (bufs != MAP_FAILED) munmap(bufs, (size_t)XURING_BUFS * XURING_BUF_SIZE);
        return;
    }
    u->bufs = bufs;
    u->buf_ring = ring_mem;
    io_uring_buf_ring_init(u->buf_ring);
    provide_more(u);
}

/* Set-up flags, best first: a kernel that does not know one says EINVAL. */
static const unsigned setup_flags[] = {
    IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_R_DISABLED,
    IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_R_DISABLED,
    0,
};

xPoller *xPollerUringCreate(char *why, size_t why_len) {
    xUring *u = calloc(1, sizeof *u);
    if (!u) {
        snprintf(why, why_len, "out of memory");
        return NULL;
    }
    int err = -EINVAL;
    for (size_t i = 0; i < sizeof setup_flags / sizeof *setup_flags && err == -EINVAL; i++) {
        struct io_uring_params p = {.flags = setup_flags[i] | IORING_SETUP_CQSIZE,
                                    .cq_entries = XURING_CQ_ENTRIES};
        err = io_uring_queue_init_params(XURING_SQ_ENTRIES, &u->ring, &p);
        if (err == 0 && !(p.features & IORING_FEAT_EXT_ARG && p.features & IORING_FEAT_RSRC_TAGS)) {
            /* Before 5.13 there is no multishot poll, nor a wait with a timeout. */
            io_uring_queue_exit(&u->ring);
            snprintf(why, why_len, "io_uring of this kernel lacks multishot poll (Linux 5.13)");
            free(u);
            return NULL;
        }
        if (err == 0) {
            u->enabled = !(p.flags & IORING_SETUP_R_DISABLED);
            /* Elsewhere a buffer may be filled whenever this thread returns
             * from the kernel, so its pages are never given back. */
            u->completions_in_wait = p.flags & IORING_SETUP_DEFER_TASKRUN;
        }
    }
    if (err < 0) {
        snprintf(why, why_len, "io_uring_setup: %s", strerror(-err));
        free(u);
        return NULL;
    }
    setup_buffers(u);
    u->base.ops = &uring_ops;
    return &u->base;
}
