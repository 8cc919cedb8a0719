/* test_worker_hooks.c — per-worker hooks and blocking work through the public
 * API, with real sockets. Start and stop run once per worker, on that
 * worker's own thread, and the pointer start sets reaches that worker's
 * handlers only; a start that fails makes Run return its error and words,
 * after the other workers ran their stops without serving; on a caller's loop
 * start runs within xHttpServerOnWorker and stop in Destroy. Blocking work
 * runs off the loop and its done back on the request's worker; a full queue
 * is answered 503 with Retry-After by the server (or refused to the handler,
 * which answers itself); a client that leaves while its work runs is told to
 * done, not to the abort callback; a graceful stop that runs out of time
 * cancels the work still queued (done told) and waits for the running one,
 * and the stop hook runs after both dones. Work waits on a latch the test
 * opens, so nothing here depends on timing. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <xhttp/observe.h>
#include <xhttp/server.h>

#include "check.h"
#include "latch.h"

enum { WORKERS = 3, CLIENTS = 24 };

static xHttpServer *new_server(xEventLoop *loop, int workers) {
    xHttpServerConf conf;
    xHttpServerConfInit(&conf);
    conf.workers = workers;
    conf.handle_signals = false;
    xHttpServer *server = xHttpServerCreate(loop, &conf);
    CHECK(server != NULL);
    CHECK_EQ_INT(xHttpServerListen(server, "127.0.0.1", 0), XOK);
    return server;
}

static void pause_ms(long ms) {
    struct timespec pause = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
    nanosleep(&pause, NULL);
}

/* ---- A small client ---- */

static int connect_to(uint16_t port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval limit = {.tv_sec = 20};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static bool send_get(int fd, const char *path) {
    char request[256];
    int n = snprintf(request, sizeof request, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path);
    return write(fd, request, (size_t)n) == n;
}

/* Reads one response with a Content-Length into out (NUL-terminated); its
 * status, or 0 when none came whole. */
static int read_response(int fd, char *out, size_t cap) {
    size_t len = 0;
    ssize_t n;
    char *end = NULL;
    while (!(end = strstr(out, "\r\n\r\n")) && len < cap - 1 &&
           (n = read(fd, out + len, cap - 1 - len)) > 0) {
        len += (size_t)n;
        out[len] = '\0';
    }
    if (!end) return 0;
    const char *cl = strstr(out, "Content-Length: ");
    size_t want = (size_t)(end + 4 - out) + (cl ? strtoul(cl + 16, NULL, 10) : 0);
    while (len < want && len < cap - 1 && (n = read(fd, out + len, cap - 1 - len)) > 0) {
        len += (size_t)n;
        out[len] = '\0';
    }
    return len >= want ? atoi(out + 9) : 0;
}

/* ---- Hooks on the server's workers ---- */

typedef struct PerWorker {
    int index;
    pid_t tid;
} PerWorker;

/* What the hooks saw, slot by worker index: each slot is written by its
 * worker's thread and read after Run has joined it. */
typedef struct Seen {
    int fail_index; /* -1: every start succeeds */
    int starts[WORKERS], stops[WORKERS];
    pid_t start_tid[WORKERS], stop_tid[WORKERS];
    bool stop_saw_own_data[WORKERS];
    bool start_had_loop[WORKERS];
} Seen;

static xErrno on_start(xHttpWorker *worker, void *arg) {
    Seen *seen = arg;
    int i = xHttpWorkerIndex(worker);
    seen->starts[i]++;
    seen->start_tid[i] = gettid();
    seen->start_had_loop[i] = xHttpWorkerLoop(worker) != NULL;
    if (i == seen->fail_index) {
        xHttpWorkerSetError(worker, "no database");
        return XERR_SYS;
    }
    PerWorker *p = malloc(sizeof *p);
    *p = (PerWorker){i, gettid()};
    xHttpWorkerSetData(worker, p);
    return XOK;
}

static void on_stop(xHttpWorker *worker, void *arg) {
    Seen *seen = arg;
    int i = xHttpWorkerIndex(worker);
    PerWorker *p = xHttpWorkerData(worker);
    seen->stops[i]++;
    seen->stop_tid[i] = gettid();
    seen->stop_saw_own_data[i] = p && p->index == i && p->tid == gettid();
    free(p);
}

/* GET /who: the worker's data, as the handler finds it, and the handler's thread. */
static void on_who(xHttpRequest *req, xHttpResponse *res, void *arg) {
    PerWorker *p = xHttpRequestWorkerData(req);
    char body[96];
    int n = snprintf(body, sizeof body, "%d %d %d %d", p ? p->index : -1, p ? (int)p->tid : -1, (int)gettid(),
                     xHttpWorkerIndex(xHttpRequestWorker(req)));
    xHttpResponseSend(res, body, (size_t)n);
}

typedef struct Asker {
    xHttpServer *server;
    uint16_t port;
    int answered, mismatched;
    bool workers_seen[WORKERS];
} Asker;

/* CLIENTS connections open at once (so the kernel spreads them over the
 * workers), one GET /who each; then stops the server. */
static void *ask_who(void *arg) {
    Asker *a = arg;
    int fds[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) fds[i] = connect_to(a->port);
    for (int i = 0; i < CLIENTS; i++) {
        char got[1024] = "";
        if (fds[i] < 0 || !send_get(fds[i], "/who") || read_response(fds[i], got, sizeof got) != 200)
            continue;
        int index, data_tid, handler_tid, worker_index;
        const char *body = strstr(got, "\r\n\r\n") + 4;
        if (sscanf(body, "%d %d %d %d", &index, &data_tid, &handler_tid, &worker_index) != 4) continue;
        a->answered++;
        if (index < 0 || index >= WORKERS || data_tid != handler_tid || index != worker_index)
            a->mismatched++;
        else
            a->workers_seen[index] = true;
    }
    for (int i = 0; i < CLIENTS; i++)
        if (fds[i] >= 0) close(fds[i]);
    xHttpServerStop(a->server);
    return NULL;
}

static void test_each_worker_starts_and_stops_once_on_its_own_thread(void) {
    Seen seen = {.fail_index = -1};
    xHttpServer *server = new_server(NULL, WORKERS);
    CHECK_EQ_INT(xHttpServerOnWorker(server, on_start, on_stop, &seen), XOK);
    CHECK_EQ_INT(xHttpServerOnWorker(server, on_start, on_stop, &seen), XERR_EXISTS);
    CHECK_EQ_INT(xHttpServerRoute(server, "GET /who", on_who, NULL), XOK);
    Asker a = {.server = server, .port = xHttpServerPort(server)};
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, ask_who, &a) == 0);
    CHECK_EQ_INT(xHttpServerRun(server), XOK);
    pthread_join(thread, NULL);
    CHECK_EQ_INT(a.answered, CLIENTS);
    CHECK_EQ_INT(a.mismatched, 0);
    int workers_seen = 0;
    for (int i = 0; i < WORKERS; i++) {
        workers_seen += a.workers_seen[i];
        CHECK_EQ_INT(seen.starts[i], 1);
        CHECK_EQ_INT(seen.stops[i], 1);
        CHECK(seen.start_had_loop[i]);
        CHECK(seen.stop_saw_own_data[i]);
        CHECK_EQ_INT(seen.stop_tid[i], seen.start_tid[i]);
        CHECK(seen.start_tid[i] != gettid());
        for (int j = 0; j < i; j++) CHECK(seen.start_tid[i] != seen.start_tid[j]);
    }
    CHECK_MSG(workers_seen >= 2, "%d connections reached %d of %d workers", CLIENTS, workers_seen, WORKERS);
    xHttpServerDestroy(server);
}

static void test_a_failed_start_fails_run_and_the_others_stop(void) {
    Seen seen = {.fail_index = 1};
    xHttpServer *server = new_server(NULL, WORKERS);
    CHECK_EQ_INT(xHttpServerOnWorker(server, on_start, on_stop, &seen), XOK);
    CHECK_EQ_INT(xHttpServerRun(server), XERR_SYS);
    CHECK_MSG(strcmp(xHttpServerLastError(server), "worker 1: start failed: no database") == 0, "\"%s\"",
              xHttpServerLastError(server));
    for (int i = 0; i < WORKERS; i++) {
        CHECK_EQ_INT(seen.starts[i], 1);
        CHECK_EQ_INT(seen.stops[i], i == 1 ? 0 : 1);
        if (i != 1) CHECK_EQ_INT(seen.stop_tid[i], seen.start_tid[i]);
    }
    xHttpServerDestroy(server);
}

static void test_on_a_callers_loop_start_runs_at_once_and_stop_at_destroy(void) {
    Seen seen = {.fail_index = -1};
    xEventLoop *loop = xEventLoopCreate();
    xHttpServer *server = new_server(loop, 1);
    CHECK_EQ_INT(xHttpServerOnWorker(server, on_start, on_stop, &seen), XOK);
    CHECK_EQ_INT(seen.starts[0], 1);
    CHECK_EQ_INT(seen.start_tid[0], gettid());
    CHECK_EQ_INT(seen.stops[0], 0);
    xHttpServerDestroy(server);
    CHECK_EQ_INT(seen.stops[0], 1);
    CHECK(seen.stop_saw_own_data[0]);

    Seen failing = {.fail_index = 0};
    server = new_server(loop, 1);
    CHECK_EQ_INT(xHttpServerOnWorker(server, on_start, on_stop, &failing), XERR_SYS);
    CHECK_MSG(strcmp(xHttpServerLastError(server), "worker 0: start failed: no database") == 0, "\"%s\"",
              xHttpServerLastError(server));
    xHttpServerDestroy(server);
    CHECK_EQ_INT(failing.stops[0], 0);
    xEventLoopDestroy(loop);
}

/* ---- Blocking work ---- */

/* What the server side of the blocking tests did, in order of events. */
static struct {
    atomic_int submitted; /* RunBlocking said XOK (read by the client thread) */
    int refused;          /* RunBlocking said XERR_BUSY */
    int done_ok, done_cancelled, done_aborted, abort_callbacks;
    int order; /* a counter each event below takes a number from */
    int last_done_at, stop_at;
    bool done_on_handler_thread;
} blocking;

typedef struct Job {
    pid_t handler_tid, work_tid;
} Job;

static void wait_at_latch(void *arg) {
    Job *job = arg;
    job->work_tid = gettid();
    latch_pass();
}

static void on_block_done(xHttpRequest *req, xHttpResponse *res, xErrno status, void *arg) {
    Job *job = arg;
    blocking.done_on_handler_thread = job->handler_tid == gettid() && job->work_tid != gettid();
    blocking.done_ok += status == XOK;
    blocking.done_cancelled += status == XERR_CLOSED;
    blocking.done_aborted += xHttpResponseAborted(res);
    blocking.last_done_at = ++blocking.order;
    free(job);
    xHttpResponseSend(res, "done", 4);
}

static void on_abort(xHttpResponse *res, void *arg) { blocking.abort_callbacks++; }

/* GET /block: work that waits at the latch; arg non-NULL: the handler
 * answers a refusal itself (429), as with answer_busy off. */
static void on_block(xHttpRequest *req, xHttpResponse *res, void *arg) {
    Job *job = malloc(sizeof *job);
    *job = (Job){.handler_tid = gettid()};
    xHttpResponseOnAbort(res, on_abort, NULL);
    xErrno err = xHttpRequestRunBlocking(req, wait_at_latch, on_block_done, job);
    if (err == XOK) {
        atomic_fetch_add(&blocking.submitted, 1);
        return;
    }
    free(job);
    blocking.refused += err == XERR_BUSY;
    if (arg) {
        xHttpResponseSetStatus(res, 429);
        xHttpResponseSend(res, "full", 4);
    }
}

static void on_blocking_stop(xHttpWorker *worker, void *arg) { blocking.stop_at = ++blocking.order; }

/* A server of one worker whose pool has one thread and room for one more
 * piece of work; own_answer: the handler answers refusals. */
static xHttpServer *blocking_server(bool own_answer, uint32_t shutdown_ms) {
    memset(&blocking, 0, sizeof blocking);
    latch_reset();
    xHttpServerConf conf;
    xHttpServerConfInit(&conf);
    conf.workers = 1;
    conf.handle_signals = false;
    conf.shutdown_timeout_ms = shutdown_ms;
    xHttpServer *server = xHttpServerCreate(NULL, &conf);
    CHECK_EQ_INT(xHttpServerListen(server, "127.0.0.1", 0), XOK);
    xHttpBlockingOpts opts;
    xHttpBlockingOptsInit(&opts);
    CHECK_EQ_INT(opts.threads, 4);
    CHECK_EQ_INT(opts.max_queued, 1024);
    opts.threads = 0;
    CHECK_EQ_INT(xHttpServerBlockingPool(server, &opts), XERR_INVALID);
    opts.threads = 1;
    opts.max_queued = 1;
    opts.answer_busy = !own_answer;
    CHECK_EQ_INT(xHttpServerBlockingPool(server, &opts), XOK);
    CHECK_EQ_INT(xHttpServerRoute(server, "GET /block", on_block, own_answer ? server : NULL), XOK);
    CHECK_EQ_INT(xHttpServerOnWorker(server, NULL, on_blocking_stop, NULL), XOK);
    return server;
}

static void wait_submitted(int n) {
    while (atomic_load(&blocking.submitted) < n) pause_ms(1);
}

typedef struct Client {
    xHttpServer *server;
    bool own_answer;
    int status[3];
    char refusal[1024];
} Client;

/* One running, one queued, one refused; then the first two are let through. */
static void *fill_the_pool(void *arg) {
    Client *c = arg;
    uint16_t port = xHttpServerPort(c->server);
    int fds[3];
    for (int i = 0; i < 3; i++) {
        fds[i] = connect_to(port);
        send_get(fds[i], "/block");
        if (i == 0) latch_wait_entered(1); /* the pool's thread has it: the queue is empty */
        if (i == 1) wait_submitted(2);
    }
    c->status[2] = read_response(fds[2], c->refusal, sizeof c->refusal); /* while the others wait */
    latch_open();
    for (int i = 0; i < 2; i++) {
        char got[1024] = "";
        c->status[i] = read_response(fds[i], got, sizeof got);
    }
    for (int i = 0; i < 3; i++) close(fds[i]);
    xHttpServerStop(c->server);
    return NULL;
}

static void run_fill_the_pool(bool own_answer) {
    xHttpServer *server = blocking_server(own_answer, 10000);
    Client c = {.server = server};
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, fill_the_pool, &c) == 0);
    CHECK_EQ_INT(xHttpServerRun(server), XOK);
    pthread_join(thread, NULL);
    CHECK_EQ_INT(c.status[0], 200);
    CHECK_EQ_INT(c.status[1], 200);
    CHECK_EQ_INT(c.status[2], own_answer ? 429 : 503);
    CHECK_MSG((strstr(c.refusal, "\r\nRetry-After: 1\r\n") != NULL) == !own_answer, "%s", c.refusal);
    CHECK_EQ_INT(blocking.refused, 1);
    CHECK_EQ_INT(blocking.done_ok, 2);
    CHECK(blocking.done_on_handler_thread);
    CHECK_EQ_INT(blocking.abort_callbacks, 0);
    CHECK(blocking.stop_at > blocking.last_done_at);
    xHttpServerDestroy(server);
}

static void test_a_full_pool_is_answered_503_by_the_server(void) { run_fill_the_pool(false); }

static void test_a_full_pool_is_the_handlers_to_answer_when_asked(void) { run_fill_the_pool(true); }

/* The client leaves while its work waits at the latch. */
static void *leave_mid_work(void *arg) {
    xHttpServer *server = arg;
    int fd = connect_to(xHttpServerPort(server));
    send_get(fd, "/block");
    latch_wait_entered(1);
    struct linger reset = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
    close(fd); /* with an RST, as a client that crashed: a FIN alone may still await the answer */
    /* The server counts the abandoned request as a 4xx (499) once it has
     * seen the close. */
    xHttpMetrics m;
    do {
        pause_ms(1);
        xHttpServerMetrics(server, &m);
    } while (m.requests[XHTTP_METRIC_HTTP11][3] == 0);
    latch_open();
    xHttpServerStop(server); /* which waits for the work to come back */
    return NULL;
}

static void test_a_client_that_leaves_mid_work_is_told_to_done(void) {
    xHttpServer *server = blocking_server(false, 10000);
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, leave_mid_work, server) == 0);
    CHECK_EQ_INT(xHttpServerRun(server), XOK);
    pthread_join(thread, NULL);
    CHECK_EQ_INT(blocking.done_ok, 1);
    CHECK_EQ_INT(blocking.done_aborted, 1);
    CHECK_EQ_INT(blocking.abort_callbacks, 0);
    CHECK(blocking.stop_at > blocking.last_done_at);
    xHttpServerDestroy(server);
}

/* One piece of work running, one queued, then a stop whose deadline passes
 * before the latch opens. */
static void *stop_with_work_out(void *arg) {
    xHttpServer *server = arg;
    int fds[2];
    for (int i = 0; i < 2; i++) {
        fds[i] = connect_to(xHttpServerPort(server));
        send_get(fds[i], "/block");
        if (i == 0) latch_wait_entered(1);
    }
    wait_submitted(2);
    xHttpServerStop(server);
    /* Past the 50 ms deadline the connections are closed: both reads end. */
    for (int i = 0; i < 2; i++) {
        char got[1024] = "";
        CHECK_EQ_INT(read_response(fds[i], got, sizeof got), 0);
        close(fds[i]);
    }
    latch_open();
    return NULL;
}

static void test_a_stop_past_its_deadline_cancels_queued_work_and_waits_for_running_work(void) {
    xHttpServer *server = blocking_server(false, 50);
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, stop_with_work_out, server) == 0);
    CHECK_EQ_INT(xHttpServerRun(server), XOK);
    pthread_join(thread, NULL);
    CHECK_EQ_INT(blocking.done_ok, 1);
    CHECK_EQ_INT(blocking.done_cancelled, 1);
    CHECK_EQ_INT(blocking.done_aborted, 2);
    CHECK_EQ_INT(blocking.abort_callbacks, 0);
    CHECK(blocking.stop_at > blocking.last_done_at);
    xHttpServerDestroy(server);
}

int main(void) {
    alarm(120); /* a Run that never returns fails the test instead of hanging it */
    RUN(test_each_worker_starts_and_stops_once_on_its_own_thread);
    RUN(test_a_failed_start_fails_run_and_the_others_stop);
    RUN(test_on_a_callers_loop_start_runs_at_once_and_stop_at_destroy);
    RUN(test_a_full_pool_is_answered_503_by_the_server);
    RUN(test_a_full_pool_is_the_handlers_to_answer_when_asked);
    RUN(test_a_client_that_leaves_mid_work_is_told_to_done);
    RUN(test_a_stop_past_its_deadline_cancels_queued_work_and_waits_for_running_work);
    return CHECK_SUMMARY();
}
