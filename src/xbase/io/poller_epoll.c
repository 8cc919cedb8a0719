/* poller_epoll.c — the epoll backend: edge-triggered, one registration per fd
 * for its whole life, so the hot path makes no epoll_ctl calls. */
#include "xbase/io/poller.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <xbase/event.h>

#define XPOLLER_BATCH 256

typedef struct xEpoll {
    xPoller base;
    int epfd;
    struct epoll_event raw[XPOLLER_BATCH];
} xEpoll;

static void epoll_destroy(xPoller *poller) {
    xEpoll *e = (xEpoll *)poller;
    close(e->epfd);
    free(e);
}

static int epoll_add(xPoller *poller, int fd, unsigned events) {
    struct epoll_event ev = {.events = EPOLLET, .data.fd = fd};
    if (events & XEV_READ) ev.events |= EPOLLIN | EPOLLRDHUP;
    if (events & XEV_WRITE) ev.events |= EPOLLOUT;
    return epoll_ctl(((xEpoll *)poller)->epfd, EPOLL_CTL_ADD, fd, &ev);
}

static void epoll_remove(xPoller *poller, int fd) {
    epoll_ctl(((xEpoll *)poller)->epfd, EPOLL_CTL_DEL, fd, NULL);
}

static int epoll_poll(xPoller *poller, xPollerEvent *events, int max, int timeout_ms) {
    xEpoll *e = (xEpoll *)poller;
    if (max > XPOLLER_BATCH) max = XPOLLER_BATCH;
    int n = epoll_wait(e->epfd, e->raw, max, timeout_ms);
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
    .remove = epoll_remove,
    .wait = epoll_poll,
    .recv = epoll_recv,
    .destroy = epoll_destroy,
};

xPoller *xPollerEpollCreate(void) {
    xEpoll *e = malloc(sizeof *e);
    if (!e) return NULL;
    e->base.ops = &epoll_ops;
    e->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (e->epfd < 0) {
        free(e);
        return NULL;
    }
    return &e->base;
}
