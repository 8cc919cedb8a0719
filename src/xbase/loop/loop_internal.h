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

#endif
