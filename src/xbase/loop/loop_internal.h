/* loop_internal.h — what the library's own threads need of a loop beyond
 * <xbase/event.h>: a posted call whose memory the poster owns, so handing a
 * result back to a loop cannot fail for want of memory, and running the calls
 * posted so far without waiting for the loop to turn. */
#ifndef XBASE_LOOP_LOOP_INTERNAL_H
#define XBASE_LOOP_LOOP_INTERNAL_H

#include <xbase/event.h>

/** A call posted to a loop, embedded in its owner: fn(loop, arg) runs once on
 *  the loop's thread. The loop only links it (next is the loop's); the
 *  owner frees it, from fn or later. */
typedef struct xLoopCall {
    struct xLoopCall *next;
    xPostFn fn;
    void *arg;
} xLoopCall;

/** Queues call (fn and arg set) to run on loop's thread, after the calls
 *  posted before it; callable from any thread, as xEventLoopPost, and never
 *  fails. call must stay valid until its fn runs. */
void xEventLoopPostCall(xEventLoop *loop, xLoopCall *call);

/** Runs the calls posted to loop so far, in order. Loop thread only (or, as
 *  xEventLoopDestroy does, the thread that owns a loop that is not running). */
void xEventLoopRunPosted(xEventLoop *loop);

/** Moves up to len bytes of fd's input (a socket watched by loop) into the
 *  pipe pipe_wr with splice(2), in order with what xEventLoopRecv reads: the
 *  bytes go from socket to pipe without passing through user space. The
 *  caller makes sure the pipe has room (EAGAIN then means the socket is
 *  drained). Returns bytes moved, 0 at the end of the stream, or -1 with
 *  errno: EAGAIN, EALREADY (the backend received bytes ahead that come
 *  first: read them with xEventLoopRecv), or splice's own. */
ssize_t xEventLoopSpliceRecv(xEventLoop *loop, int fd, int pipe_wr, size_t len);

/* ---- Sends by completion ----
 * Where the backend has a completion queue (io_uring), a socket's output may
 * go as a request handed in with the loop's next wait, so the sends of a
 * whole turn cost the one io_uring_enter that waits instead of a system call
 * each. The connection layer uses it for the output a turn gathered. */

/** Reported to a watch whose send queued by xEventLoopSendQueue completed:
 *  read its result with xEventLoopSendResult. Beside the XEV_* bits of
 *  <xbase/event.h>, never asked for. */
#define XEV_SENT (1u << 7)

/** Whether loop's backend sends by completion: false on epoll, where
 *  xEventLoopSendQueue always fails. */
bool xEventLoopSendsByCompletion(const xEventLoop *loop);

/** Queues one gathered send of iov to fd (watched by loop), never raising
 *  SIGPIPE, handed to the kernel with the loop's next wait; the kernel never
 *  waits for room (a full socket fails it with EAGAIN), so it has taken what
 *  it takes once handed in. Only iov itself is copied: the bytes must stay
 *  where they are until then, which xEventLoopSubmit and xEventLoopRemove
 *  (fd) bring forward. fd's watch then hears XEV_SENT; one send per socket
 *  at a time (the next once that is heard). Returns 0, or -1 with errno
 *  where it cannot be queued: send through xEventLoopSendv then. */
int xEventLoopSendQueue(xEventLoop *loop, int fd, const struct iovec *iov, int iovcnt);

/** After XEV_SENT: the bytes fd's send took, or -1 with errno (EAGAIN: the
 *  socket was full; EPIPE, ECONNRESET, ... as send(2) says them). */
ssize_t xEventLoopSendResult(xEventLoop *loop, int fd);

/** Hands every queued send to the kernel now, so the memory they point at
 *  may be freed or moved; a system call where any is queued. */
void xEventLoopSubmit(xEventLoop *loop);

#endif
