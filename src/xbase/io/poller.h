/* poller.h — the readiness backend under xEventLoop.
 *
 * One implementation is linked per build (poller_epoll.c today). The loop is
 * the only caller; connection code never sees this interface. */
#ifndef XBASE_IO_POLLER_H
#define XBASE_IO_POLLER_H

#include <stddef.h>

typedef struct xPoller xPoller;

typedef struct xPollerEvent {
    int fd;
    unsigned events; /* XEV_* bits */
} xPollerEvent;

xPoller *xPollerCreate(void);
void xPollerDestroy(xPoller *poller);

/** Registers fd, edge-triggered, for the XEV_* bits in events. 0 or -1/errno. */
int xPollerAdd(xPoller *poller, int fd, unsigned events);

/** Unregisters fd. */
void xPollerRemove(xPoller *poller, int fd);

/** Waits up to timeout_ms (-1: forever) and fills at most max events.
 *  Returns how many, or -1 with errno (EINTR is reported as 0). */
int xPollerWait(xPoller *poller, xPollerEvent *events, int max, int timeout_ms);

#endif
