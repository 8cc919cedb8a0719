/* poller_epoll.c — the epoll backend: one registration per fd, EPOLLET for
 * edge-triggered watches (xKit's connections, for their whole life, so the
 * hot path makes no epoll_ctl calls), level-triggered otherwise. */
#define _GNU_SOURCE /* epoll_pwait2 */
#include "xbase/io/poller.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <xbase/event.h>

#define XPOLLER_BATCH 256

typedef struct xEpoll {
    xPoller base;
    int epfd;
    bool pwait2; /* the kernel has epoll_pwait2 (until it says ENOSYS) */
    struct epoll_event raw[XPOLLER_BATCH];
} xEpoll;

static void epoll_destroy(xPoller *poller) {
    xEpoll *e = (xEpoll *)poller;
    close(e->epfd);
    free(e);
}

static int epoll_change(xPoller *poller, int op, int fd, unsigned events) {
    struct epoll_event ev = {.events = events & XEV_EDGE ? EPOLLET : 0, .data.fd = fd};
    if (events & XEV_READ) ev.events |= EPOLLIN | EPOLLRDHUP;
    if (events & XEV_WRITE) ev.events |= EPOLLOUT;
    return epoll_ctl(((xEpoll *)poller)->epfd, op, fd, &ev);
}

static int epoll_add(xPoller *poller, int fd, unsigned events) {
    return epoll_change(poller, EPOLL_CTL_ADD, fd, events);
}

/* EPOLL_CTL_MOD also reports, once, what an edge watch newly asks for and fd has. */
static int epoll_modify(xPoller *poller, int fd, unsigned events) {
    return epoll_change(poller, EPOLL_CTL_MOD, fd, events);
}

static void epoll_remove(xPoller *poller, int fd) {
    epoll_ctl(((xEpoll *)poller)->epfd, EPOLL_CTL_DEL, fd, NULL);
}

/* Waits for whole milliseconds (the wheel's timeouts) with epoll_wait, and
 * for a precise timer's microseconds with epoll_pwait2 (Linux 5.11); a kernel
 * without it waits the milliseconds rounded up. */
static int wait_for(xEpoll *e, int max, int64_t timeout_us) {
    if (timeout_us < 0 || timeout_us % 1000 == 0) {
        int64_t ms = timeout_us < 0 ? -1 : timeout_us / 1000;
        return epoll_wait(e->epfd, e->raw, max, ms > INT32_MAX ? INT32_MAX : (int)ms);
    }
    if (e->pwait2) {
        struct timespec ts = {.tv_sec = timeout_us / 1000000, .tv_nsec = timeout_us % 1000000 * 1000};
        int n = epoll_pwait2(e->epfd, e->raw, max, &ts, NULL);
        if (n >= 0 || errno != ENOSYS) return n;
        e->pwait2 = false;
    }
    int64_t ms = (timeout_us + 999) / 1000;
    return epoll_wait(e->epfd, e->raw, max, ms > INT32_MAX ? INT32_MAX : (int)ms);
}

static int epoll_poll(xPoller *poller, xPollerEvent *events, int max, int64_t timeout_us) {
    xEpoll *e = (xEpoll *)poller;
    if (max > XPOLLER_BATCH) max = XPOLLER_BATCH;
    int n = wait_for(e, max, timeout_us);
    if (n < 0) return errno == EINTR ? 0 : -1;
    for (int i = 0; i < n; i++) {
        uint32_t raw = e->raw[i].events;
        unsigned bits = 0;
        if (raw & (EPOLLIN | EPOLLRDHUP)) bits |= XEV_READ;
        if (raw & EPOLLRDHUP) bits |= XEV_EOF;
        if (raw & EPOLLOUT) bits |= XEV_WRITE;
        if (raw & (EPOLLERR | EPOLLHUP)) bits |= XEV_ERROR;
        events[i].fd = e->raw[i].data.fd;
        events[i].events = bits;
    }
    return n;
}

static ssize_t epoll_recv(xPoller *poller, int fd, void *buf, size_t len) { return recv(fd, buf, len, 0); }

/* Readiness only: XEV_RECV asks for nothing here, so no recv_ahead. */
static const xPollerOps epoll_ops = {
    .name = "epoll",
    .add = epoll_add,
    .modify = epoll_modify,
    .remove = epoll_remove,
    .wait = epoll_poll,
    .recv = epoll_recv,
    .destroy = epoll_destroy,
};

xPoller *xPollerEpollCreate(void) {
    xEpoll *e = malloc(sizeof *e);
    if (!e) return NULL;
    e->base.ops = &epoll_ops;
    e->pwait2 = true;
    e->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (e->epfd < 0) {
        free(e);
        return NULL;
    }
    return &e->base;
}
