/* poller_epoll.c — the epoll backend: edge-triggered, one registration per fd
 * for its whole life, so the hot path makes no epoll_ctl calls. */
#include "xbase/io/poller.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <xbase/event.h>

#define XPOLLER_BATCH 256

struct xPoller {
    int epfd;
    struct epoll_event raw[XPOLLER_BATCH];
};

xPoller *xPollerCreate(void) {
    xPoller *poller = malloc(sizeof *poller);
    if (!poller) return NULL;
    poller->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (poller->epfd < 0) {
        free(poller);
        return NULL;
    }
    return poller;
}

void xPollerDestroy(xPoller *poller) {
    if (!poller) return;
    close(poller->epfd);
    free(poller);
}

int xPollerAdd(xPoller *poller, int fd, unsigned events) {
    struct epoll_event ev = {.events = EPOLLET, .data.fd = fd};
    if (events & XEV_READ) ev.events |= EPOLLIN | EPOLLRDHUP;
    if (events & XEV_WRITE) ev.events |= EPOLLOUT;
    return epoll_ctl(poller->epfd, EPOLL_CTL_ADD, fd, &ev);
}

void xPollerRemove(xPoller *poller, int fd) { epoll_ctl(poller->epfd, EPOLL_CTL_DEL, fd, NULL); }

int xPollerWait(xPoller *poller, xPollerEvent *events, int max, int timeout_ms) {
    if (max > XPOLLER_BATCH) max = XPOLLER_BATCH;
    int n = epoll_wait(poller->epfd, poller->raw, max, timeout_ms);
    if (n < 0) return errno == EINTR ? 0 : -1;
    for (int i = 0; i < n; i++) {
        uint32_t raw = poller->raw[i].events;
        unsigned bits = 0;
        if (raw & (EPOLLIN | EPOLLRDHUP)) bits |= XEV_READ;
        if (raw & EPOLLRDHUP) bits |= XEV_EOF;
        if (raw & EPOLLOUT) bits |= XEV_WRITE;
        if (raw & (EPOLLERR | EPOLLHUP)) bits |= XEV_ERROR;
        events[i].fd = poller->raw[i].data.fd;
        events[i].events = bits;
    }
    return n;
}
