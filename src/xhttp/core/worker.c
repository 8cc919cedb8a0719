/* worker.c — what handlers and hooks reach of their worker (worker.h), and
 * blocking work: a request's function handed to the server's pool, and its
 * done brought back to the request's worker while the exchange is held. */
#include "xhttp/core/worker.h"

#include <stdio.h>
#include <stdlib.h>

#include "xhttp/core/exchange.h"

int xHttpWorkerIndex(const xHttpWorker *worker) { return worker->index; }

xEventLoop *xHttpWorkerLoop(const xHttpWorker *worker) { return worker->loop; }

void *xHttpWorkerData(const xHttpWorker *worker) { return worker->data; }

void xHttpWorkerSetData(xHttpWorker *worker, void *data) { worker->data = data; }

void xHttpWorkerSetError(xHttpWorker *worker, const char *message) {
    snprintf(worker->error, sizeof worker->error, "%s", message ? message : "");
}

xHttpWorker *xHttpRequestWorker(const xHttpRequest *req) { return &xHttpContextOf(req->conn)->worker; }

void *xHttpRequestWorkerData(const xHttpRequest *req) { return xHttpContextOf(req->conn)->worker.data; }

/* ---- Blocking work ---- */

typedef struct xBlockingJob {
    xWork work;
    xHttpExchange *ex; /* held: its abort callback waits while the job is out */
    xHttpWorker *worker;
    xHttpBlockingWork run;
    xHttpBlockingDone done;
    void *arg;
} xBlockingJob;

static void job_run(xWork *work) {
    xBlockingJob *job = (xBlockingJob *)work;
    job->run(job->arg);
}

static void job_returned(xEventLoop *loop, xWork *work, xErrno status) {
    xBlockingJob *job = (xBlockingJob *)work;
    xBlockingJob back = *job;
    free(job);
    /* Counted down first: the done may end the response, which may let a
     * stopping worker end, and it must find nothing left out. */
    back.worker->jobs--;
    back.ex->res.blocking_jobs--;
    back.done(&back.ex->req, &back.ex->res, status, back.arg);
    if (back.worker->jobs == 0 && back.worker->on_jobs_done) back.worker->on_jobs_done(back.worker);
}

/* The server's own answer to work it could not take. */
static void answer_refused(xHttpExchange *ex, xErrno err, const xHttpBlockingOpts *opts) {
    if (ex->res.head_sent || ex->res.aborted) return;
    if (err == XERR_BUSY && opts->retry_after_s) {
        char seconds[16];
        snprintf(seconds, sizeof seconds, "%u", opts->retry_after_s);
        xHttpResponseAddHeader(&ex->res, "Retry-After", seconds);
    }
    xHttpExchangeSendStatus(ex, 503);
}

xErrno xHttpRequestRunBlocking(xHttpRequest *req, xHttpBlockingWork work, xHttpBlockingDone done, void *arg) {
    xHttpExchange *ex = (xHttpExchange *)req; /* the request is its exchange's first member */
    if (!work || !done) return XERR_INVALID;
    if (ex->res.ended || ex->res.blocking_jobs == UINT16_MAX) return XERR_STATE;
    xHttpWorker *worker = &xHttpContextOf(req->conn)->worker;
    if (!worker->pool) return XERR_SYS;
    xBlockingJob *job = malloc(sizeof *job);
    xErrno err = job ? XOK : XERR_NOMEM;
    if (job) {
        *job = (xBlockingJob){.work = {.run = job_run, .done = job_returned},
                              .ex = ex,
                              .worker = worker,
                              .run = work,
                              .done = done,
                              .arg = arg};
        err = xWorkPoolSubmit(worker->pool, worker->loop, &job->work);
    }
    if (err == XOK) {
        /* Its done runs on this thread, after this returns. */
        worker->jobs++;
        ex->res.blocking_jobs++;
        return XOK;
    }
    free(job);
    if (worker->blocking->answer_busy) answer_refused(ex, err, worker->blocking);
    return err;
}
