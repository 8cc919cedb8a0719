/* poller_uring.c — the io_uring backend: edge-triggered readiness from one
 * multishot poll per fd, every registration and removal of a loop turn
 * submitted together with the wait in one io_uring_enter.
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
#include <sys/syscall.h>
#include <unistd.h>

#include <liburing.h>

#define XURING_SQ_ENTRIES 256
/* Each watched fd may have a completion waiting; a full completion queue ends
 * multishot polls (re-armed below), so make that rare. */
#define XURING_CQ_ENTRIES 16384

typedef struct xUringFd {
    uint32_t gen;    /* bumped by every add and remove: older completions are stale */
    unsigned events; /* XEV_* asked for; 0: not watched */
    bool armed;      /* its multishot poll is submitted or queued to be */
    bool queued;     /* in the arm list */
} xUringFd;

typedef struct xUring {
    xPoller base;
    struct io_uring ring;
    bool enabled;
    xUringFd *fds; /* indexed by fd */
    size_t fd_cap;
    int *arm; /* fds whose poll is still to be submitted */
    size_t narm, arm_cap;
    uint64_t *cancel; /* polls of removed fds, to be cancelled */
    size_t ncancel, cancel_cap;
} xUring;

/* user_data of a poll: the fd and the generation that armed it. 0 tags the
 * cancellations, whose completions say nothing. */
static uint64_t poll_tag(int fd, uint32_t gen) { return (uint64_t)gen << 32 | (uint32_t)fd; }

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
    if (!f->queued && !push((void **)&u->arm, &u->narm, &u->arm_cap, sizeof fd, &fd)) return -1;
    f->queued = true;
    f->gen++;
    f->events = events;
    f->armed = false;
    return 0;
}

static void uring_remove(xPoller *poller, int fd) {
    xUring *u = (xUring *)poller;
    if ((size_t)fd >= u->fd_cap || !u->fds[fd].events) return;
    xUringFd *f = &u->fds[fd];
    uint64_t tag = poll_tag(fd, f->gen);
    /* The poll holds a reference to the file, so the socket only really
     * closes (and its peer sees the FIN) once the cancellation is submitted:
     * at the end of this loop turn. Without memory for it, the poll lives
     * on until the ring goes, its completions ignored as stale. */
    if (f->armed) push((void **)&u->cancel, &u->ncancel, &u->cancel_cap, sizeof tag, &tag);
    f->gen++;
    f->events = 0;
    f->armed = false;
}

static struct io_uring_sqe *next_sqe(xUring *u) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
    if (sqe) return sqe;
    io_uring_submit(&u->ring);
    return io_uring_get_sqe(&u->ring);
}

static unsigned poll_mask(unsigned events) {
    unsigned mask = 0;
    if (events & XEV_READ) mask |= POLLIN | POLLRDHUP;
    if (events & XEV_WRITE) mask |= POLLOUT;
    return mask;
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
        io_uring_sqe_set_data64(sqe, 0);
    }
    if (i) memmove(u->cancel, u->cancel + i, (u->ncancel - i) * sizeof *u->cancel);
    u->ncancel -= i;
    for (i = 0; i < u->narm; i++) {
        int fd = u->arm[i];
        xUringFd *f = &u->fds[fd];
        if (f->events && !f->armed) {
            struct io_uring_sqe *sqe = next_sqe(u);
            if (!sqe) break;
            io_uring_prep_poll_multishot(sqe, fd, poll_mask(f->events));
            io_uring_sqe_set_data64(sqe, poll_tag(fd, f->gen));
            f->armed = true;
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

/* One completion as an event; false when it says nothing about a watched fd. */
static bool take(xUring *u, const struct io_uring_cqe *cqe, xPollerEvent *ev) {
    uint64_t tag = io_uring_cqe_get_data64(cqe);
    int fd = (int)(uint32_t)tag;
    if (!tag || (size_t)fd >= u->fd_cap) return false;
    xUringFd *f = &u->fds[fd];
    if (!f->events || (uint32_t)(tag >> 32) != f->gen) return false;
    if (!(cqe->flags & IORING_CQE_F_MORE)) {
        /* The kernel ended the poll (a full completion queue does that): arm
         * it again, unless it failed, which the callback hears as an error. */
        f->armed = false;
        if (cqe->res >= 0 && !f->queued && push((void **)&u->arm, &u->narm, &u->arm_cap, sizeof fd, &fd))
            f->queued = true;
    }
    ev->fd = fd;
    ev->events = readiness(cqe->res);
    return ev->events != 0;
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
        if (take(u, cqe, &events[n])) n++;
    }
    io_uring_cq_advance(&u->ring, seen);
    return n;
}

static void uring_destroy(xPoller *poller) {
    xUring *u = (xUring *)poller;
    io_uring_queue_exit(&u->ring);
    free(u->fds);
    free(u->arm);
    free(u->cancel);
    free(u);
}

static const xPollerOps uring_ops = {"io_uring", uring_add, uring_remove, uring_wait, uring_destroy};

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
    u->base.ops = &uring_ops;
    return &u->base;
}
