/* splice.c — socket → pipe → socket without copies (splice.h), and the
 * worker's spare pipes. */
#define _GNU_SOURCE /* splice, pipe2, F_SETPIPE_SZ */
#include "xnet/splice.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "xbase/loop/loop_internal.h"

xErrno xNetPipeAcquire(xNetContext *net, xPipe *pipe) {
    if (net->pipes.count) {
        *pipe = net->pipes.spare[--net->pipes.count];
        return XOK;
    }
    int fds[2];
    if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) return XERR_NOMEM;
    int cap = fcntl(fds[1], F_SETPIPE_SZ, (int)XPIPE_SIZE);
    if (cap < 0) cap = fcntl(fds[1], F_GETPIPE_SZ);
    if (cap <= 0) cap = 4096; /* a pipe holds a page at the least */
    *pipe = (xPipe){.rd = fds[0], .wr = fds[1], .held = 0, .cap = (size_t)cap};
    return XOK;
}

void xNetPipeRelease(xNetContext *net, xPipe *pipe) {
    if (pipe->rd < 0) return;
    if (pipe->held == 0 && net->pipes.count < XNET_SPARE_PIPES) {
        net->pipes.spare[net->pipes.count++] = *pipe;
    } else {
        close(pipe->rd);
        close(pipe->wr);
    }
    *pipe = (xPipe){.rd = -1, .wr = -1};
}

void xNetPipesClose(xNetContext *net) {
    while (net->pipes.count) {
        xPipe *p = &net->pipes.spare[--net->pipes.count];
        close(p->rd);
        close(p->wr);
    }
}

bool xConnSplices(const xConn *conn) { return conn->transport == &xConnPlainTransport && !xConnClosed(conn); }

ssize_t xConnSpliceIn(xConn *from, xPipe *pipe, size_t len) {
    size_t room = pipe->cap - pipe->held;
    if (len > room) len = room;
    if (len == 0) {
        errno = EAGAIN;
        return -1;
    }
    bool was_empty = pipe->held == 0;
    ssize_t n = xEventLoopSpliceRecv(from->net->loop, from->fd, pipe->wr, len);
    if (n > 0) {
        pipe->held += (size_t)n;
        xCounterAdd(&from->net->counters.bytes_in, (uint64_t)n);
    } else if (n < 0 && errno == EAGAIN && was_empty) {
        /* An empty pipe had room for any segment: the socket is drained,
         * and edge triggering says when more comes. */
        from->readable = false;
    }
    return n;
}

bool xConnSpliceReady(const xConn *conn) {
    return xConnOpen(conn) && conn->transport == &xConnPlainTransport && conn->send == XCONN_SEND_READY &&
           xConnPending(conn) == 0;
}

ssize_t xConnSpliceOut(xConn *to, xPipe *pipe) {
    if (pipe->held == 0) return 0;
    /* The server ignores SIGPIPE (splice has no MSG_NOSIGNAL): a closed
     * upstream fails this with EPIPE. */
    ssize_t n = splice(pipe->rd, NULL, to->fd, NULL, pipe->held, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n > 0) {
        pipe->held -= (size_t)n;
        xCounterAdd(&to->net->counters.bytes_out, (uint64_t)n);
    } else if (n < 0 && errno == EAGAIN) {
        xConnBlocked(to);
    }
    return n;
}
