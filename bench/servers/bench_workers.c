/* bench_workers.c — the bench servers' per-worker state and blocking work,
 * what the integration tests drive: with --worker-hooks each worker makes its
 * own state when it starts (a count of requests, a file it holds open) and
 * says so on stderr, GET /worker answers from it, and its stop reports what
 * the worker served; with --test-routes GET /blocking?ms=N sleeps N ms on a
 * thread of the blocking pool and answers from the worker's loop. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_common.h"

#define BLOCKING_MAX_MS 10000

/* Set by --worker-hooks, --worker-fail-start N, --blocking-threads N,
 * --blocking-queue N and --blocking-own-busy. */
static bool worker_hooks, fail_a_start, blocking_own_busy;
static unsigned long fail_start, blocking_threads, blocking_queue;

int benchWorkersFlag(int argc, char **argv, int i) {
    if (strcmp(argv[i], "--worker-hooks") == 0) {
        worker_hooks = true;
        return 1;
    }
    if (strcmp(argv[i], "--blocking-own-busy") == 0) {
        blocking_own_busy = true;
        return 1;
    }
    unsigned long *value = strcmp(argv[i], "--worker-fail-start") == 0  ? &fail_start
                           : strcmp(argv[i], "--blocking-threads") == 0 ? &blocking_threads
                           : strcmp(argv[i], "--blocking-queue") == 0   ? &blocking_queue
                                                                        : NULL;
    if (!value) return 0;
    if (i + 1 >= argc || !benchParseSize(xStrFromC(argv[i + 1]), 1u << 20, value)) return -1;
    fail_a_start |= value == &fail_start;
    return 2;
}

/* ---- Per-worker state ---- */

/* What one worker keeps, used only on its thread: no lock, no atomics. */
typedef struct WorkerState {
    int index;
    pid_t start_tid;
    int held_fd; /* a file the worker holds open from start to stop */
    unsigned long requests;
    unsigned long blocking_done, blocking_aborted, blocking_cancelled;
    long blocking_out; /* handed to the pool, not yet back */
} WorkerState;

static xErrno on_worker_start(xHttpWorker *worker, void *arg) {
    int index = xHttpWorkerIndex(worker);
    if (fail_a_start && (unsigned long)index == fail_start) {
        xHttpWorkerSetError(worker, "refused by --worker-fail-start");
        return XERR_INVALID;
    }
    WorkerState *state = calloc(1, sizeof *state);
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (!state || fd < 0) {
        free(state);
        if (fd >= 0) close(fd);
        xHttpWorkerSetError(worker, "out of memory or descriptors");
        return XERR_SYS;
    }
    *state = (WorkerState){.index = index, .start_tid = gettid(), .held_fd = fd};
    xHttpWorkerSetData(worker, state);
    fprintf(stderr, "worker-hooks: start worker=%d tid=%d\n", index, (int)state->start_tid);
    return XOK;
}

static void on_worker_stop(xHttpWorker *worker, void *arg) {
    WorkerState *state = xHttpWorkerData(worker);
    fprintf(stderr,
            "worker-hooks: stop worker=%d tid=%d start_tid=%d requests=%lu blocking_done=%lu "
            "blocking_aborted=%lu blocking_cancelled=%lu blocking_out=%ld\n",
            xHttpWorkerIndex(worker), (int)gettid(), (int)state->start_tid, state->requests,
            state->blocking_done, state->blocking_aborted, state->blocking_cancelled, state->blocking_out);
    close(state->held_fd);
    free(state);
}

/* GET /worker: this worker's state, as JSON. */
static void on_worker(xHttpRequest *req, xHttpResponse *res, void *arg) {
    WorkerState *state = xHttpRequestWorkerData(req);
    xHttpWorker *worker = xHttpRequestWorker(req);
    char body[256];
    int n =
        snprintf(body, sizeof body,
                 "{\"worker\":%d,\"index\":%d,\"tid\":%d,\"start_tid\":%d,\"requests\":%lu,\"loop\":%s}\n",
                 state->index, xHttpWorkerIndex(worker), (int)gettid(), (int)state->start_tid,
                 ++state->requests, xHttpWorkerLoop(worker) == xHttpRequestLoop(req) ? "true" : "false");
    xHttpResponseAddHeader(res, "Content-Type", "application/json");
    xHttpResponseSend(res, body, (size_t)n);
}

/* ---- Blocking work ---- */

typedef struct Sleep {
    unsigned long ms;
    pid_t handler_tid, pool_tid;
} Sleep;

static void sleep_off_the_loop(void *arg) {
    Sleep *s = arg;
    s->pool_tid = gettid();
    struct timespec pause = {.tv_sec = (time_t)(s->ms / 1000), .tv_nsec = (long)(s->ms % 1000) * 1000000};
    nanosleep(&pause, NULL);
}

static void on_sleep_done(xHttpRequest *req, xHttpResponse *res, xErrno status, void *arg) {
    Sleep *s = arg;
    WorkerState *state = xHttpRequestWorkerData(req);
    if (state) {
        state->blocking_out--;
        state->blocking_done += status == XOK;
        state->blocking_cancelled += status != XOK;
        state->blocking_aborted += xHttpResponseAborted(res);
    }
    char body[160];
    int n = snprintf(body, sizeof body, "{\"ms\":%lu,\"handler_tid\":%d,\"pool_tid\":%d,\"done_tid\":%d}\n",
                     s->ms, (int)s->handler_tid, (int)s->pool_tid, (int)gettid());
    free(s);
    if (status != XOK) {
        xHttpResponseSetStatus(res, 503);
        xHttpResponseSend(res, "cancelled\n", 10);
        return;
    }
    xHttpResponseAddHeader(res, "Content-Type", "application/json");
    xHttpResponseSend(res, body, (size_t)n); /* discarded, and the request released, if the client left */
}

/* GET /blocking?ms=N: N ms asleep on a pool thread, then the thread ids. */
static void on_blocking(xHttpRequest *req, xHttpResponse *res, void *arg) {
    xStr value;
    unsigned long ms;
    if (!xHttpRequestQueryParam(req, "ms", &value) || !benchParseSize(value, BLOCKING_MAX_MS, &ms)) {
        xHttpResponseSetStatus(res, 400);
        xHttpResponseSend(res, "ms must be an integer from 0 to 10000\n", 38);
        return;
    }
    Sleep *s = malloc(sizeof *s);
    if (!s) {
        xHttpResponseSetStatus(res, 503);
        xHttpResponseSend(res, NULL, 0);
        return;
    }
    *s = (Sleep){.ms = ms, .handler_tid = gettid()};
    xErrno err = xHttpRequestRunBlocking(req, sleep_off_the_loop, on_sleep_done, s);
    if (err == XOK) {
        WorkerState *state = xHttpRequestWorkerData(req);
        if (state) state->blocking_out++;
        return;
    }
    free(s);
    if (!blocking_own_busy) return; /* the server answered 503 */
    xHttpResponseSetStatus(res, err == XERR_BUSY ? 429 : 500);
    xHttpResponseAddHeader(res, "Content-Type", "text/plain");
    const char *why = err == XERR_BUSY ? "the pool is full\n" : "the pool refused\n";
    xHttpResponseSend(res, why, strlen(why));
}

bool benchAddWorkerRoutes(xHttpServer *server, bool test_routes) {
    if (blocking_threads || blocking_queue || blocking_own_busy) {
        xHttpBlockingOpts opts;
        xHttpBlockingOptsInit(&opts);
        if (blocking_threads) opts.threads = (int)blocking_threads;
        if (blocking_queue) opts.max_queued = blocking_queue;
        opts.answer_busy = !blocking_own_busy;
        if (xHttpServerBlockingPool(server, &opts) != XOK) {
            fprintf(stderr, "--blocking-threads and --blocking-queue must be 1 or more\n");
            return false;
        }
    }
    if (worker_hooks) {
        xHttpServerOnWorker(server, on_worker_start, on_worker_stop, NULL);
        xHttpServerRoute(server, "GET /worker", on_worker, NULL);
    }
    if (test_routes) xHttpServerRoute(server, "GET /blocking", on_blocking, NULL);
    return true;
}
