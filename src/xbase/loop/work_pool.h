/* work_pool.h — a few threads that run blocking functions off the loops, and
 * hand each result back to the loop that asked, as a call posted to it.
 *
 * Work waits in one bounded queue, first in first out, for the first free
 * thread; threads start as work first needs them, up to a limit, and stay
 * until the pool is destroyed. A loop learns of its work only through done
 * calls on its own thread, so it needs no lock; every piece of work submitted
 * gets exactly one, whether it ran or was cancelled before it could.
 * Knows nothing of HTTP. */
#ifndef XBASE_LOOP_WORK_POOL_H
#define XBASE_LOOP_WORK_POOL_H

#include <stddef.h>

#include <xbase/errno.h>
#include <xbase/event.h>

#include "xbase/loop/loop_internal.h"

typedef struct xWorkPool xWorkPool;
typedef struct xWork xWork;

/** Runs on a pool thread. */
typedef void (*xWorkFn)(xWork *work);

/** Runs once on the loop the work was submitted from: status XOK when run
 *  has run, XERR_CLOSED when the work was cancelled before it began. The
 *  pool has let go of work: done may free it. */
typedef void (*xWorkDoneFn)(xEventLoop *loop, xWork *work, xErrno status);

/** One piece of work, embedded in its owner's struct so that submitting
 *  allocates nothing. The owner sets run and done; the rest is the pool's. */
struct xWork {
    xWorkFn run;
    xWorkDoneFn done;
    xEventLoop *loop; /* where done runs */
    xErrno status;    /* what done is told */
    xWork *next;      /* in the queue */
    xLoopCall back;   /* done's way back to loop */
};

/** Makes a pool of up to threads threads (none started yet) that holds at
 *  most max_queued pieces of work waiting for one. NULL when out of memory
 *  or for a limit below 1. */
xWorkPool *xWorkPoolCreate(int threads, size_t max_queued);

/** Changes the limits of a pool that has not started a thread yet:
 *  XERR_STATE once it has, XERR_INVALID for a limit below 1. */
xErrno xWorkPoolLimit(xWorkPool *pool, int threads, size_t max_queued);

/** Queues work (run and done set) for a pool thread; its done will run on
 *  loop's thread, which is the caller's. XERR_BUSY when max_queued pieces
 *  already wait, XERR_CLOSED once the pool is being destroyed, XERR_SYS when
 *  no thread runs and none could be started: then done will not run. */
xErrno xWorkPoolSubmit(xWorkPool *pool, xEventLoop *loop, xWork *work);

/** Cancels the work from loop that still waits for a thread: each is taken
 *  out of the queue and its done posted to loop with XERR_CLOSED. Work
 *  already running goes on. Any thread. */
void xWorkPoolCancel(xWorkPool *pool, const xEventLoop *loop);

/** Cancels every piece of work still waiting (as xWorkPoolCancel), waits for
 *  the running ones to end, joins the threads and frees the pool: when it
 *  returns, every done has been posted to its loop, and no pool thread will
 *  touch a loop again. NULL is ignored. */
void xWorkPoolDestroy(xWorkPool *pool);

#endif
