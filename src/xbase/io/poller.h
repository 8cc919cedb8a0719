/* poller.h — the I/O backend under xEventLoop, picked when a loop is created:
 * io_uring (poller_uring.c) where the kernel allows it, else epoll
 * (poller_epoll.c). Both report level- or edge-triggered readiness (as each
 * watch asks, XEV_EDGE) through one small table, so the loop and the connection code above it never know
 * which one runs. The loop is the only caller. */
#ifndef XBASE_IO_POLLER_H
#define XBASE_IO_POLLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <xbase/event.h>

typedef struct xPoller xPoller;

/* Reported beside the XEV_* bits: fd's send (ops->send) completed. The loop
 * passes it on as XEV_SENT (loop_internal.h), the same bit. */
#define XPOLLER_SENT (1u << 7)

typedef struct xPollerEvent {
    int fd;
    unsigned events; /* XEV_* bits, and XPOLLER_SENT */
} xPollerEvent;

typedef struct xPollerOps {
    const char *name; /* "epoll" or "io_uring", as the start-up log line says */
    /** Registers fd for the XEV_READ/XEV_WRITE bits in events, edge-triggered
     *  with XEV_EDGE, else level-triggered (XEV_RECV comes with XEV_EDGE).
     *  0 or -1/errno. */
    int (*add)(xPoller *poller, int fd, unsigned events);
    /** Replaces what fd's registration waits for with events (add's bits, the
     *  mode and XEV_RECV unchanged); may be called from fd's own callback.
     *  0 or -1/errno. */
    int (*modify)(xPoller *poller, int fd, unsigned events);
    /** Unregisters fd; no event for it is reported after this. */
    void (*remove)(xPoller *poller, int fd);
    /** Waits up to timeout_us microseconds (-1: forever; never less) and
     *  fills at most max events. Returns how many, or -1 with errno (EINTR is
     *  reported as 0). */
    int (*wait)(xPoller *poller, xPollerEvent *events, int max, int64_t timeout_us);
    /** recv(2) for the loop's callers: on an fd added with XEV_RECV, what the
     *  backend received ahead. */
    ssize_t (*recv)(xPoller *poller, int fd, void *buf, size_t len);
    /** Turns receiving ahead for fd (added with XEV_RECV) on or off: off
     *  only before fd's first wait, on at any time. NULL where XEV_RECV
     *  means nothing. */
    void (*recv_ahead)(xPoller *poller, int fd, bool on);
    /** Turns bulk reading for fd (added with XEV_RECV) on or off, at any
     *  time: on, what is received ahead is drained and the reader then takes
     *  the socket itself, told of input by a one-shot poll, so a large read
     *  lands in its place with one copy; off, receiving ahead resumes at the
     *  next arming. NULL where XEV_RECV means nothing. */
    void (*recv_bulk)(xPoller *poller, int fd, bool on);
    /** splice(2) from fd (added with XEV_RECV) into the pipe pipe_wr, up to
     *  len bytes, for a reader that passes its input on without copying it:
     *  as recv, in order, so only once what was received ahead has been read
     *  (while some waits: -1 with errno EALREADY, read it with recv first).
     *  A socket received ahead is armed again only at EAGAIN: a short splice
     *  may mean a full pipe rather than a drained socket. NULL where fd is
     *  always the reader's own: splice(2) it directly. */
    ssize_t (*splice_recv)(xPoller *poller, int fd, int pipe_wr, size_t len);
    /** Queues one gathered send to fd (a watched socket), handed to the
     *  kernel with the next wait (or submit) and never waiting there for
     *  room (MSG_DONTWAIT): the kernel has taken what it takes, or failed
     *  with EAGAIN, once it is handed in. Only iov is copied: the bytes must
     *  stay until then. Its result is reported as XPOLLER_SENT and read with
     *  sent; one send per fd at a time. 0, or -1 with errno where it cannot be queued (send it
     *  yourself). NULL where sending is a system call (epoll); then so are
     *  sent and submit. */
    int (*send)(xPoller *poller, int fd, const struct iovec *iov, int iovcnt);
    /** After XPOLLER_SENT for fd: the bytes its send took, or -1 with errno. */
    ssize_t (*sent)(xPoller *poller, int fd);
    /** Hands the queued sends to the kernel now, so the memory they point
     *  at may change. */
    void (*submit)(xPoller *poller);
    void (*destroy)(xPoller *poller);
} xPollerOps;

/* Every backend's state begins with its table. */
struct xPoller {
    const xPollerOps *ops;
    char why[160]; /* why this backend and not the default; "" when it is the default */
};

/** The backend asked for (want; XIO_DEFAULT: the XK_IO environment variable,
 *  else io_uring), falling back to epoll when io_uring cannot be set up.
 *  NULL when no backend can be set up. */
xPoller *xPollerCreate(xIoBackend want);

/** Logs "io: <backend>" (and why, when it is not the default) the first time
 *  any loop of the process runs: a process that fails before serving says
 *  nothing of it. */
void xPollerAnnounce(const xPoller *poller);

/** An epoll backend, or NULL with errno. */
xPoller *xPollerEpollCreate(void);

/** An io_uring backend, or NULL with why (a sentence fragment for the log
 *  line) filled when the kernel refuses it. */
xPoller *xPollerUringCreate(char *why, size_t why_len);

#endif
