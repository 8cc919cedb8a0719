/* event_loop.c — the loop: wait for readiness (on the backend poller.h
 * picked), dispatch, fire timers, run calls posted from other threads, then
 * the calls owed at the end of the turn. Watches live in an array indexed by
 * fd, so dispatch is one array load with no allocation per connection. */
#define _GNU_SOURCE /* splice */
#include <xbase/event.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "xbase/io/poller.h"
#include "xbase/loop/loop_internal.h"
#include "xbase/loop/timer_wheel.h"

/* Events taken per turn. A turn's connections keep their output (a pooled
 * block each) until its end, when it is sent, so this bounds what a burst of
 * ready connections pins at once; events past it wait for the next turn, a
 * wait that does not sleep. */
#define XLOOP_EVENTS 64

typedef struct xWatch {
    xEventFn fn;
    void *arg;
    const void *next; /* what fn touches after arg (xEventLoopPrefetch), or NULL */
    unsigned events;  /* as the backend has them: XEV_READ/WRITE asked for, XEV_EDGE, XEV_RECV */
} xWatch;

/* What xEventLoopPost allocates: a call that frees itself when it has run. */
typedef struct xPosted {
    xLoopCall call;
    xPostFn fn;
    void *arg;
} xPosted;

struct xEventLoop {
    xPoller *poller;
    xWatch *watches; /* indexed by fd */
    size_t watch_cap;
    bool stop_requested;
    bool precise_clock; /* now_us to the microsecond (xEventLoopPreciseClock) */
    uint64_t now_ms;
    uint64_t now_us;
    time_t wall_second;
    xTimerWheel wheel;
    xTurnEnd *turn_end_head; /* calls owed at the end of this turn, in order */
    xTurnEnd *turn_end_tail;

    int wake_fd; /* eventfd that other threads write to */
    pthread_mutex_t posted_lock;
    xLoopCall *posted_head;
    xLoopCall *posted_tail;
};

/* The coarse clock is the precise one read at the last tick: the same time
 * base, so a loop may switch between them. */
static uint64_t monotonic_us(bool precise) {
    struct timespec ts;
    clock_gettime(precise ? CLOCK_MONOTONIC : CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void update_clock(xEventLoop *loop) {
    /* A precise timer is judged on the precise clock: the coarse one, up to a
     * tick behind, would wake the loop to find it not yet due. */
    uint64_t us = monotonic_us(loop->precise_clock || xTimerWheelHasPrecise(&loop->wheel));
    /* Never back: a switch to the coarse clock finds it up to a tick behind. */
    if (us > loop->now_us) loop->now_us = us;
    loop->now_ms = loop->now_us / 1000u;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME_COARSE, &ts);
    loop->wall_second = ts.tv_sec;
}

void xEventLoopRunPosted(xEventLoop *loop) {
    pthread_mutex_lock(&loop->posted_lock);
    xLoopCall *list = loop->posted_head;
    loop->posted_head = loop->posted_tail = NULL;
    pthread_mutex_unlock(&loop->posted_lock);
    while (list) {
        xLoopCall *next = list->next; /* the call may free its node */
        list->fn(loop, list->arg);
        list = next;
    }
}

void xEventLoopAtTurnEnd(xEventLoop *loop, xTurnEnd *call) {
    if (call->queued) return;
    call->queued = true;
    call->next = NULL;
    if (loop->turn_end_tail)
        loop->turn_end_tail->next = call;
    else
        loop->turn_end_head = call;
    loop->turn_end_tail = call;
}

static void run_turn_end(xEventLoop *loop) {
    while (loop->turn_end_head) {
        xTurnEnd *call = loop->turn_end_head;
        loop->turn_end_head = call->next;
        if (!loop->turn_end_head) loop->turn_end_tail = NULL;
        call->queued = false;
        call->fn(loop, call);
    }
}

static void on_wake(xEventLoop *loop, int fd, unsigned events, void *arg) {
    uint64_t count;
    while (read(fd, &count, sizeof count) > 0) {
    }
    xEventLoopRunPosted(loop);
}

xEventLoop *xEventLoopCreate(void) { return xEventLoopCreateWith(XIO_DEFAULT); }

xEventLoop *xEventLoopCreateWith(xIoBackend io) {
    xEventLoop *loop = calloc(1, sizeof *loop);
    if (!loop) return NULL;
    loop->poller = xPollerCreate(io);
    loop->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    pthread_mutex_init(&loop->posted_lock, NULL);
    update_clock(loop);
    xTimerWheelInit(&loop->wheel, loop->now_ms);
    if (!loop->poller || loop->wake_fd < 0 ||
        xEventLoopAdd(loop, loop->wake_fd, XEV_READ | XEV_EDGE, on_wake, NULL) != XOK) {
        xEventLoopDestroy(loop);
        return NULL;
    }
    return loop;
}

void xEventLoopDestroy(xEventLoop *loop) {
    if (!loop) return;
    run_turn_end(loop);        /* their owners hold references until they run */
    xEventLoopRunPosted(loop); /* posted calls may own memory: let them release it */
    if (loop->wake_fd >= 0) close(loop->wake_fd);
    if (loop->poller) loop->poller->ops->destroy(loop->poller);
    pthread_mutex_destroy(&loop->posted_lock);
    free(loop->watches);
    free(loop);
}

static void dispatch(xEventLoop *loop, const xPollerEvent *events, int n) {
    /* Each callback's first touches of its arg (a connection) and of what it
     * touches next (the connection's protocol state) are cache misses when
     * hundreds are open: asked for all at once, the misses overlap. */
    for (int i = 0; i < n; i++) {
        if ((size_t)events[i].fd >= loop->watch_cap) continue;
        const xWatch *w = &loop->watches[events[i].fd];
        __builtin_prefetch(w->arg);
        if (w->next) __builtin_prefetch(w->next);
    }
    for (int i = 0; i < n; i++) {
        int fd = events[i].fd;
        /* A callback earlier in this batch may have removed this fd. */
        if ((size_t)fd >= loop->watch_cap || !loop->watches[fd].fn) continue;
        xWatch w = loop->watches[fd];
        w.fn(loop, fd, events[i].events, w.arg);
    }
}

xErrno xEventLoopRun(xEventLoop *loop) {
    xPollerEvent events[XLOOP_EVENTS];
    xPollerAnnounce(loop->poller);
    /* Calls queued while the loop was not running (a command sent from a
     * worker's start hook, say) would otherwise wait for the first wake-up. */
    run_turn_end(loop);
    while (!loop->stop_requested) {
        int64_t timeout_ms = xTimerWheelNextTimeout(&loop->wheel, loop->now_ms);
        int64_t timeout_us = timeout_ms < 0 ? -1 : timeout_ms * 1000;
        if (xTimerWheelHasPrecise(&loop->wheel)) {
            /* From the clock now: the turn's sample may be the coarse clock's,
             * behind, which would make the wait end late. */
            uint64_t precise_us = xTimerWheelNextPrecise(&loop->wheel, monotonic_us(true));
            if (timeout_us < 0 || precise_us < (uint64_t)timeout_us) timeout_us = (int64_t)precise_us;
        }
        int n = loop->poller->ops->wait(loop->poller, events, XLOOP_EVENTS, timeout_us);
        if (n < 0) return XERR_SYS;
        update_clock(loop);
        dispatch(loop, events, n);
        xTimerWheelAdvance(&loop->wheel, loop->now_ms, loop);
        if (xTimerWheelHasPrecise(&loop->wheel)) xTimerWheelAdvancePrecise(&loop->wheel, loop->now_us, loop);
        run_turn_end(loop);
    }
    loop->stop_requested = false;
    return XOK;
}

void xEventLoopStop(xEventLoop *loop) { loop->stop_requested = true; }

xErrno xEventLoopAdd(xEventLoop *loop, int fd, unsigned events, xEventFn fn, void *arg) {
    if (fd < 0 || !fn) return XERR_INVALID;
    if ((size_t)fd >= loop->watch_cap) {
        size_t cap = loop->watch_cap ? loop->watch_cap : 64;
        while (cap <= (size_t)fd) cap *= 2;
        xWatch *w = realloc(loop->watches, cap * sizeof *w);
        if (!w) return XERR_NOMEM;
        memset(w + loop->watch_cap, 0, (cap - loop->watch_cap) * sizeof *w);
        loop->watches = w;
        loop->watch_cap = cap;
    }
    /* Input received ahead is told once, as it arrives. */
    if (events & XEV_RECV) events |= XEV_EDGE;
    events &= XEV_READ | XEV_WRITE | XEV_RECV | XEV_EDGE;
    if (loop->poller->ops->add(loop->poller, fd, events) != 0) return XERR_SYS;
    loop->watches[fd] = (xWatch){.fn = fn, .arg = arg, .events = events};
    return XOK;
}

xErrno xEventLoopModify(xEventLoop *loop, int fd, unsigned events) {
    if (fd < 0 || (size_t)fd >= loop->watch_cap || !loop->watches[fd].fn) return XERR_INVALID;
    xWatch *w = &loop->watches[fd];
    unsigned wanted = (w->events & ~(XEV_READ | XEV_WRITE)) | (events & (XEV_READ | XEV_WRITE));
    if (loop->poller->ops->modify(loop->poller, fd, wanted) != 0) return XERR_SYS;
    w->events = wanted;
    return XOK;
}

void xEventLoopPrefetch(xEventLoop *loop, int fd, const void *next) {
    if (fd >= 0 && (size_t)fd < loop->watch_cap && loop->watches[fd].fn) loop->watches[fd].next = next;
}

void xEventLoopRemove(xEventLoop *loop, int fd) {
    if (fd < 0 || (size_t)fd >= loop->watch_cap || !loop->watches[fd].fn) return;
    loop->poller->ops->remove(loop->poller, fd);
    loop->watches[fd] = (xWatch){0};
}

ssize_t xEventLoopRecv(xEventLoop *loop, int fd, void *buf, size_t len) {
    return loop->poller->ops->recv(loop->poller, fd, buf, len);
}

ssize_t xEventLoopSpliceRecv(xEventLoop *loop, int fd, int pipe_wr, size_t len) {
    if (loop->poller->ops->splice_recv) return loop->poller->ops->splice_recv(loop->poller, fd, pipe_wr, len);
    return splice(fd, NULL, pipe_wr, NULL, len, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
}

void xEventLoopRecvAhead(xEventLoop *loop, int fd, bool on) {
    if (loop->poller->ops->recv_ahead) loop->poller->ops->recv_ahead(loop->poller, fd, on);
}

void xEventLoopRecvBulk(xEventLoop *loop, int fd, bool on) {
    if (loop->poller->ops->recv_bulk) loop->poller->ops->recv_bulk(loop->poller, fd, on);
}

ssize_t xEventLoopSendv(xEventLoop *loop, int fd, const struct iovec *iov, int iovcnt) {
    /* Most responses are one segment; send(2) skips sendmsg's header copy. */
    if (iovcnt == 1) return send(fd, iov[0].iov_base, iov[0].iov_len, MSG_NOSIGNAL);
    struct msghdr msg = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt};
    return sendmsg(fd, &msg, MSG_NOSIGNAL);
}

_Static_assert(XEV_SENT == XPOLLER_SENT, "the backend's bit is passed on as it is");

bool xEventLoopSendsByCompletion(const xEventLoop *loop) { return loop->poller->ops->send != NULL; }

int xEventLoopSendQueue(xEventLoop *loop, int fd, const struct iovec *iov, int iovcnt) {
    if (!loop->poller->ops->send) {
        errno = EOPNOTSUPP;
        return -1;
    }
    return loop->poller->ops->send(loop->poller, fd, iov, iovcnt);
}

ssize_t xEventLoopSendResult(xEventLoop *loop, int fd) { return loop->poller->ops->sent(loop->poller, fd); }

void xEventLoopSubmit(xEventLoop *loop) {
    if (loop->poller->ops->submit) loop->poller->ops->submit(loop->poller);
}

const char *xEventLoopBackend(const xEventLoop *loop) { return loop->poller->ops->name; }

uint64_t xEventLoopNowMs(const xEventLoop *loop) { return loop->now_ms; }

time_t xEventLoopWallSeconds(const xEventLoop *loop) { return loop->wall_second; }

uint64_t xEventLoopNowUs(const xEventLoop *loop) { return loop->now_us; }

void xEventLoopPreciseClock(xEventLoop *loop, bool on) { loop->precise_clock = on; }

void xTimerStart(xEventLoop *loop, xTimer *timer, uint64_t after_ms) {
    xTimerWheelAdd(&loop->wheel, timer, loop->now_ms + after_ms);
}

void xTimerStartPrecise(xEventLoop *loop, xTimer *timer, uint64_t after_us) {
    /* From the moment of the call, not the turn's sample, which may be the
     * coarse clock's, a tick behind: that would fire early. */
    uint64_t now = monotonic_us(true);
    xTimerWheelAddPrecise(&loop->wheel, timer, (now > loop->now_us ? now : loop->now_us) + after_us);
}

void xTimerStop(xEventLoop *loop, xTimer *timer) { xTimerWheelRemove(&loop->wheel, timer); }

void xEventLoopPostCall(xEventLoop *loop, xLoopCall *call) {
    call->next = NULL;
    pthread_mutex_lock(&loop->posted_lock);
    if (loop->posted_tail)
        loop->posted_tail->next = call;
    else
        loop->posted_head = call;
    loop->posted_tail = call;
    pthread_mutex_unlock(&loop->posted_lock);
    uint64_t one = 1;
    ssize_t ignored = write(loop->wake_fd, &one, sizeof one);
    (void)ignored;
}

static void run_posted_and_free(xEventLoop *loop, void *arg) {
    xPosted *p = arg;
    p->fn(loop, p->arg);
    free(p);
}

xErrno xEventLoopPost(xEventLoop *loop, xPostFn fn, void *arg) {
    xPosted *p = malloc(sizeof *p);
    if (!p) return XERR_NOMEM;
    p->fn = fn;
    p->arg = arg;
    p->call = (xLoopCall){.fn = run_posted_and_free, .arg = p};
    xEventLoopPostCall(loop, &p->call);
    return XOK;
}
