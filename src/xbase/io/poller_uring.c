/* poller_uring.c — the io_uring backend: edge-triggered readiness from one
 * multishot poll per fd, every registration and removal of a loop turn
 * submitted together with the wait in one io_uring_enter. Sockets whose every
 * read goes through the loop (XEV_RECV) are not polled for input: a
 * multishot receive fills buffers from one ring per loop ahead of the reader,
 * whose xEventLoopRecv copies them out, so reading costs no system call.
 *
 * The ring belongs to one thread (SINGLE_ISSUER, DEFER_TASKRUN: completions
 * are reaped only when that thread waits). A loop is often created on one
 * thread and run on another, so the ring starts disabled and is enabled by
 * the first wait, which makes the running thread its issuer; until then
 * registrations only queue. */
#define _GNU_SOURCE /* POLLRDHUP */
#include "xbase/io/poller.h"

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <liburing.h>

#define XURING_SQ_ENTRIES 256
/* Each watched fd may have a completion waiting; a full completion queue ends
 * multishot requests (re-armed below), so make that rare. */
#define XURING_CQ_ENTRIES 16384
/* The provided buffers a loop receives into, shared by all its sockets: a
 * socket holds one only from the completion until its reader copies it out,
 * so an idle connection holds none. */
#define XURING_BUFS 512 /* a power of two */
#define XURING_BUF_SIZE 4096
#define XURING_GROUP 0
/* A socket's reader that leaves this many buffers unread (it waits for its
 * output to drain, say) stops the receiving ahead: the rest of its input stays
 * in the socket, as on epoll, where it pushes back on the client, and where
 * a close finds it and resets the connection. */
#define XURING_AHEAD_MAX 8

/* What a completion is for: the tag's top two bits. */
enum { KIND_POLL, KIND_RECV, KIND_POLLIN };
/* Cancellations' completions say nothing. */
#define CANCEL_TAG UINT64_MAX
#define NO_CHUNK (-1)

typedef struct xUringFd {
    uint32_t gen;       /* bumped by every add and remove: older completions are stale */
    unsigned events;    /* XEV_* asked for; 0: not watched */
    bool queued;        /* in the arm list */
    bool polling;       /* its multishot poll is submitted */
    bool ahead;         /* received ahead into provided buffers (XEV_RECV) */
    bool receiving;     /* its multishot recv is submitted */
    bool waiting_in;    /* starved: a one-shot POLLIN is submitted */
    bool starved;       /* the buffers ran out on it: reads use recv(2) until it drains */
    bool pausing;       /* its reader fell behind: its receive is being cancelled */
    bool ended;         /* the end of the stream came */
    int error;          /* what the receive failed with, after the chunks queued */
    int16_t head, tail; /* received chunks not yet read, linked through xUring.chunks */
    uint16_t unread;    /* how many */
} xUringFd;

typedef struct xChunk {
    uint16_t off, len; /* what is left of the buffer to read */
    int16_t next;
} xChunk;

typedef struct xUring {
    xPoller base;
    struct io_uring ring;
    bool enabled;
    xUringFd *fds; /* indexed by fd */
    size_t fd_cap;
    int *arm; /* fds with a request still to be submitted */
    size_t narm, arm_cap;
    uint64_t *cancel; /* requests of removed fds, to be cancelled */
    size_t ncancel, cancel_cap;
    struct io_uring_buf_ring *buf_ring; /* NULL: the kernel has no provided buffer rings */
    char *bufs;
    unsigned held;              /* buffers completions gave us and we have not given back */
    xChunk chunks[XURING_BUFS]; /* by buffer id */
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

static void give_back(xUring *u, unsigned bid) {
    io_uring_buf_ring_add(u->buf_ring, u->bufs + (size_t)bid * XURING_BUF_SIZE, XURING_BUF_SIZE,
                          (unsigned short)bid, io_uring_buf_ring_mask(XURING_BUFS), 0);
    io_uring_buf_ring_advance(u->buf_ring, 1);
    u->held--;
}

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
    bool queued = f->queued;
    uint32_t gen = f->gen + 1;
    *f = (xUringFd){.gen = gen, .events = events, .queued = queued, .head = NO_CHUNK, .tail = NO_CHUNK};
    f->ahead = (events & XEV_RECV) && u->buf_ring;
    want_arm(u, fd);
    return f->queued ? 0 : -1;
}

static void uring_remove(xPoller *poller, int fd) {
    xUring *u = (xUring *)poller;
    if ((size_t)fd >= u->fd_cap || !u->fds[fd].events) return;
    xUringFd *f = &u->fds[fd];
    /* A request holds a reference to the file, so the socket only really
     * closes (and its peer sees the FIN) once the cancellations are
     * submitted: at the end of this loop turn. */
    if (f->polling) want_cancel(u, tag_of(KIND_POLL, fd, f->gen));
    if (f->receiving) want_cancel(u, tag_of(KIND_RECV, fd, f->gen));
    if (f->waiting_in) want_cancel(u, tag_of(KIND_POLLIN, fd, f->gen));
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
    bool queued = f->queued;
    *f = (xUringFd){.gen = f->gen + 1, .queued = queued, .head = NO_CHUNK, .tail = NO_CHUNK};
}

static void uring_recv_ahead(xPoller *poller, int fd, bool on) {
    xUring *u = (xUring *)poller;
    xUringFd *f = (size_t)fd < u->fd_cap ? &u->fds[fd] : NULL;
    if (!f || !(f->events & XEV_RECV) || !u->buf_ring || f->ahead == on) return;
    if (!on) {
        /* Before fd's first wait (xConnSetTransport, before any I/O), when
         * nothing is submitted yet: the poll then watches for input itself. */
        if (!f->receiving) f->ahead = false;
        return;
    }
    /* Whoever read the socket itself (OpenSSL's handshake) is done with it.
     * The poll watching for input goes, and what it may still report is
     * stale (a new generation); the receive armed with its successor at the
     * end of the turn finds any bytes already waiting in the socket. */
    if (f->polling) want_cancel(u, tag_of(KIND_POLL, fd, f->gen));
    f->gen++;
    f->polling = false;
    f->ahead = true;
    want_arm(u, fd);
}

/* Reads what was received ahead; recv(2) on a socket the buffers ran out on. */
static ssize_t uring_recv(xPoller *poller, int fd, void *buf, size_t len) {
    xUring *u = (xUring *)poller;
    xUringFd *f = (size_t)fd < u->fd_cap ? &u->fds[fd] : NULL;
    if (!f || !f->ahead) return recv(fd, buf, len, 0);
    size_t n = 0;
    while (n < len && f->head != NO_CHUNK) {
        xChunk *c = &u->chunks[f->head];
        size_t take = c->len < len - n ? c->len : len - n;
        memcpy((char *)buf + n, u->bufs + (size_t)f->head * XURING_BUF_SIZE + c->off, take);
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
    if (n == len || !f->starved || f->receiving) {
        /* (A receive being cancelled may still queue bytes that came before
         * those in the socket: the socket waits for its last completion.) */
        if (n) return (ssize_t)n;
        if (f->ended) return 0;
        errno = f->error ? f->error : EAGAIN;
        return -1;
    }
    /* The buffers ran out on this socket: the rest waits in the socket. */
    ssize_t got = recv(fd, (char *)buf + n, len - n, 0);
    /* Drained (a short read, as a reader takes it, or EAGAIN): receive
     * ahead again, or wait for input, whichever the buffers allow. */
    if (got == 0)
        f->ended = true;
    else if ((got > 0 && (size_t)got < len - n) || (got < 0 && errno == EAGAIN))
        want_arm(u, fd);
    else if (got < 0 && errno != EINTR)
        f->error = errno; /* reported by the next read, after these bytes */
    if (n) return (ssize_t)n + (got > 0 ? got : 0);
    return got;
}

static struct io_uring_sqe *next_sqe(xUring *u) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
    if (sqe) return sqe;
    io_uring_submit(&u->ring);
    return io_uring_get_sqe(&u->ring);
}

static unsigned poll_mask(const xUringFd *f) {
    unsigned mask = 0;
    /* Input on a socket received ahead is told by its receive completions. */
    if ((f->events & XEV_READ) && !f->ahead) mask |= POLLIN | POLLRDHUP;
    if (f->events & XEV_WRITE) mask |= POLLOUT;
    return mask;
}

/* Whether a socket received ahead needs a receive submitted. */
static bool needs_receive(const xUringFd *f) {
    return f->events && f->ahead && !f->receiving && !f->waiting_in && !f->ended && !f->error;
}

/* Multishot into the buffers or, while they are short on a socket they ran
 * out on, a one-shot wait for input (its reader then uses recv(2)). */
static void prep_receive(xUring *u, int fd, struct io_uring_sqe *sqe) {
    xUringFd *f = &u->fds[fd];
    if (f->starved && u->held > XURING_BUFS / 2) {
        io_uring_prep_poll_add(sqe, fd, POLLIN | POLLRDHUP);
        io_uring_sqe_set_data64(sqe, tag_of(KIND_POLLIN, fd, f->gen));
        f->waiting_in = true;
        return;
    }
    io_uring_prep_recv_multishot(sqe, fd, NULL, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = XURING_GROUP;
    io_uring_sqe_set_data64(sqe, tag_of(KIND_RECV, fd, f->gen));
    f->receiving = true;
    f->starved = false;
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
            io_uring_prep_poll_multishot(sqe, fd, poll_mask(f));
            io_uring_sqe_set_data64(sqe, tag_of(KIND_POLL, fd, f->gen));
            f->polling = true;
        }
        if (needs_receive(f)) {
            if (!(sqe = next_sqe(u))) break;
            prep_receive(u, fd, sqe);
        }
        f->queued = false;
    }
    if (i) memmove(u->arm, u->arm + i, (u->narm - i) * sizeof *u->arm);
    u->narm -= i;
}

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
        u->held++;
        u->chunks[bid] = (xChunk){.off = 0, .len = (uint16_t)(cqe->res > 0 ? cqe->res : 0), .next = NO_CHUNK};
        if (f->tail != NO_CHUNK)
            u->chunks[f->tail].next = bid;
        else
            f->head = bid;
        f->tail = bid;
        if (++f->unread >= XURING_AHEAD_MAX && (cqe->flags & IORING_CQE_F_MORE) && !f->pausing) {
            want_cancel(u, tag_of(KIND_RECV, fd, f->gen));
            f->pausing = true;
        }
    }
    if (cqe->flags & IORING_CQE_F_MORE) return bits;
    f->receiving = false;
    bool paused = f->pausing;
    f->pausing = false;
    if (cqe->res == 0) {
        f->ended = true;
        bits |= XEV_EOF;
    } else if (cqe->res == -ENOBUFS || paused) {
        /* The reader finds the socket through recv(2) until it drains it. */
        f->starved = true;
    } else if (cqe->res < 0) {
        f->error = -cqe->res;
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
    if (!f->events || (uint32_t)(tag >> 32 & 0x3fffffff) != (f->gen & 0x3fffffff)) {
        /* A removed fd's: what it was received into goes straight back. */
        if (cqe->flags & IORING_CQE_F_BUFFER) {
            u->held++;
            give_back(u, cqe->flags >> IORING_CQE_BUFFER_SHIFT);
        }
        return 0;
    }
    *fd_out = fd;
    if (kind == KIND_RECV) return received(u, fd, cqe);
    if (kind == KIND_POLLIN) {
        f->waiting_in = false;
        return readiness(cqe->res);
    }
    if (!(cqe->flags & IORING_CQE_F_MORE)) {
        /* The kernel ended the poll (a full completion queue does that): arm
         * it again, unless it failed, which the callback hears as an error. */
        f->polling = false;
        if (cqe->res >= 0) want_arm(u, fd);
    }
    return readiness(cqe->res);
}

static int uring_wait(xPoller *poller, xPollerEvent *events, int max, int timeout_ms) {
    xUring *u = (xUring *)poller;
    if (!u->enabled) {
        /* Debian's liburing 2.3 declares io_uring_enable_rings but exports
         * no such symbol: register the call ourselves. */
        if (syscall(__NR_io_uring_register, u->ring.ring_fd, IORING_REGISTER_ENABLE_RINGS, NULL, 0) < 0)
            return -1;
        u->enabled = true;
    }
    queue_changes(u);
    int ret;
    if (timeout_ms == 0) {
        ret = io_uring_submit_and_get_events(&u->ring);
    } else {
        struct io_uring_cqe *cqe;
        struct __kernel_timespec ts = {.tv_sec = timeout_ms / 1000,
                                       .tv_nsec = (timeout_ms % 1000) * 1000000L};
        ret = io_uring_submit_and_wait_timeout(&u->ring, &cqe, 1, timeout_ms < 0 ? NULL : &ts, NULL);
    }
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
    return n;
}

static void uring_destroy(xPoller *poller) {
    xUring *u = (xUring *)poller;
    io_uring_queue_exit(&u->ring);
    free(u->buf_ring);
    free(u->bufs);
    free(u->fds);
    free(u->arm);
    free(u->cancel);
    free(u);
}

static const xPollerOps uring_ops = {"io_uring", uring_add,     uring_remove,    uring_wait,
                                     uring_recv, uring_destroy, uring_recv_ahead};

/* The provided buffer ring (Linux 5.19); without it sockets are only polled. */
static void setup_buffers(xUring *u) {
    void *ring_mem = NULL;
    if (posix_memalign(&ring_mem, 4096, XURING_BUFS * sizeof(struct io_uring_buf)) != 0) return;
    u->bufs = malloc((size_t)XURING_BUFS * XURING_BUF_SIZE);
    struct io_uring_buf_reg reg = {
        .ring_addr = (uintptr_t)ring_mem, .ring_entries = XURING_BUFS, .bgid = XURING_GROUP};
    if (!u->bufs || io_uring_register_buf_ring(&u->ring, &reg, 0) != 0) {
        free(ring_mem);
        free(u->bufs);
        u->bufs = NULL;
        return;
    }
    u->buf_ring = ring_mem;
    io_uring_buf_ring_init(u->buf_ring);
    u->held = XURING_BUFS;
    for (unsigned bid = 0; bid < XURING_BUFS; bid++) give_back(u, bid);
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
        if (err == 0) u->enabled = !(p.flags & IORING_SETUP_R_DISABLED);
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
