/* worker.h — a worker as its hooks and handlers see it (<xhttp/server.h>'s
 * xHttpWorker), kept in its HTTP context: its index and loop, the pointer
 * its start hook made, and the blocking work it has handed to the server's
 * pool, which a stopping worker waits for. */
#ifndef XHTTP_CORE_WORKER_H
#define XHTTP_CORE_WORKER_H

#include <stddef.h>

#include <xhttp/server.h>

#include "xbase/loop/work_pool.h"

/** The longest message xHttpWorkerSetError keeps. */
#define XHTTP_WORKER_ERROR_MAX 200

struct xHttpWorker {
    xEventLoop *loop;
    int index;
    void *data;                              /* its start hook's, else NULL */
    char error[XHTTP_WORKER_ERROR_MAX + 1];  /* what a start that failed said, else "" */
    xWorkPool *pool;                         /* the server's, every worker's; NULL: none */
    const xHttpBlockingOpts *blocking;       /* the server's: how a refusal is answered */
    size_t jobs;                             /* handed to the pool, their done not yet run */
    void (*on_jobs_done)(xHttpWorker *self); /* the server's: jobs fell back to 0 */
};

#endif
