/* splice.h — moving a socket's input to another socket without it passing
 * through user space: socket → pipe → socket with splice(2), for a body a
 * proxy passes on unchanged. A worker keeps a few pipes (xNetContext.pipes)
 * rather than making one per body. Cleartext sockets only: TLS needs the
 * bytes in user space. */
#ifndef XNET_SPLICE_H
#define XNET_SPLICE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "xnet/connection.h"

/* What a pipe is grown to (F_SETPIPE_SZ): 64 slots, so a body that arrives
 * in many small segments still goes in one splice each way. Where the
 * system's limits refuse it, the pipe keeps its size. */
#define XPIPE_SIZE (256u << 10)

/** Takes a pipe from net's spares, or makes one. XERR_NOMEM when no pipe can
 *  be made (out of descriptors). */
xErrno xNetPipeAcquire(xNetContext *net, xPipe *pipe);

/** Gives pipe back: kept as a spare when empty and there is room, else
 *  closed (bytes left in it are dropped). Nothing after a pipe with rd -1. */
void xNetPipeRelease(xNetContext *net, xPipe *pipe);

/** Whether conn's input may be spliced: its transport is the plain socket. */
bool xConnSplices(const xConn *conn);

/** Moves up to len bytes of from's input into pipe (as far as it has room).
 *  Returns bytes moved, 0 at the end of the stream, or -1 with errno: EAGAIN
 *  (the socket is drained, from->readable is then false; or, with bytes in
 *  the pipe, it may be full: empty it and try again), EALREADY (bytes the
 *  loop's backend received ahead come first: read them with xConnRecv), or
 *  another as recv(2) says it. */
ssize_t xConnSpliceIn(xConn *from, xPipe *pipe, size_t len);

/** Moves what pipe holds to to's socket, as far as it takes them; to's
 *  output queue must be empty, with no send in flight (xConnSpliceReady).
 *  Returns bytes moved, or -1 with errno: EAGAIN (the socket is full: to
 *  waits for room and its protocol hears on_flushed, or the send timeout
 *  closes it), or another as send(2) says it (the caller closes to). */
ssize_t xConnSpliceOut(xConn *to, xPipe *pipe);

/** Whether spliced bytes may go to conn now: open, in cleartext, nothing
 *  queued before them and no send in flight. */
bool xConnSpliceReady(const xConn *conn);

#endif
