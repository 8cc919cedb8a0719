/* bench_metrics.c — --user-metrics: an application's own metrics, as the
 * integration tests check them. GET /observe counts, adds to a gauge,
 * observes a value in a histogram and adds access log fields, from its
 * handler; GET /observe/tick updates a counter from a timer on the worker's
 * loop after the response has gone, with the shard the request gave. Each
 * answers "worker=N", the worker that served it, so a test knows it reached
 * every worker. */
#include "bench_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xbase/event.h>
#include <xhttp/observe.h>

#define TICKS_MAX 1000

static xHttpServer *observed;
static xHttpMetric *requests, *level, *setting, *values, *ticks;

/* The value of query parameter name as a C string, or NULL. */
static const char *query(const xHttpRequest *req, const char *name, char *out, size_t cap) {
    xStr v;
    if (!xHttpRequestQueryParam(req, name, &v) || v.len >= cap) return NULL;
    memcpy(out, v.data, v.len);
    out[v.len] = '\0';
    return out;
}

/* The value of query parameter name percent-decoded ("%00" refused), as a
 * C string, or NULL. */
static const char *query_decoded(const xHttpRequest *req, const char *name, char *out, size_t cap) {
    xStr v;
    size_t len;
    if (!xHttpRequestQueryParam(req, name, &v) ||
        xHttpPercentDecode(v, out, cap - 1, XHTTP_DECODE_REFUSE_NUL, &len) != XOK)
        return NULL;
    out[len] = '\0';
    return out;
}

/* A number from the query, or fallback. */
static double query_number(const xHttpRequest *req, const char *name, double fallback) {
    char text[64];
    if (!query(req, name, text, sizeof text)) return fallback;
    char *end;
    double v = strtod(text, &end);
    return *end ? fallback : v;
}

/* Answers "worker=N": which of the server's workers shard belongs to. */
static void answer_worker(xHttpResponse *res, int status, xHttpMetricShard *shard) {
    int worker = 0;
    while (worker < xHttpServerWorkerCount(observed) && xHttpServerMetricShard(observed, worker) != shard)
        worker++;
    char body[32];
    int n = snprintf(body, sizeof body, "worker=%d\n", worker);
    xHttpResponseSetStatus(res, status);
    xHttpResponseAddHeader(res, "Content-Type", "text/plain");
    xHttpResponseSend(res, body, (size_t)n);
}

/* GET /observe?kind=a|b&value=V[&set=S][&user=U][&status=N]: U (percent-decoded)
 * and the kind become access log fields. */
static void on_observe(xHttpRequest *req, xHttpResponse *res, void *arg) {
    xHttpMetricShard *shard = xHttpRequestMetricShard(req);
    char kind[8] = "a", user[256];
    query(req, "kind", kind, sizeof kind);
    size_t series = strcmp(kind, "b") == 0 ? 1 : 0;
    double value = query_number(req, "value", 0);
    xHttpCounterAdd(shard, requests, series, 1);
    xHttpGaugeAdd(shard, level, 0, value);
    xHttpHistogramObserve(shard, values, series, value);
    if (xHttpRequestQueryParam(req, "set", &(xStr){0}))
        xHttpGaugeSet(shard, setting, 0, query_number(req, "set", 0));
    xHttpResponseLogField(res, "kind", series ? "b" : "a");
    if (query_decoded(req, "user", user, sizeof user)) xHttpResponseLogField(res, "user", user);
    answer_worker(res, (int)query_number(req, "status", 200), shard);
}

/* A counter a timer updates on the worker's loop, outside any request. */
typedef struct Tick {
    xTimer timer;
    xHttpMetricShard *shard; /* the worker's, kept from the request */
    unsigned left;
    unsigned ms;
} Tick;

static void on_tick(xEventLoop *loop, xTimer *timer, void *arg) {
    Tick *t = arg;
    xHttpCounterAdd(t->shard, ticks, 0, 1);
    if (--t->left == 0) {
        free(t);
        return;
    }
    xTimerStart(loop, &t->timer, t->ms);
}

/* GET /observe/tick?n=N&ms=M: N ticks, one every M ms, after the answer. */
static void on_observe_tick(xHttpRequest *req, xHttpResponse *res, void *arg) {
    double n = query_number(req, "n", 1), ms = query_number(req, "ms", 1);
    Tick *t = n >= 1 && n <= TICKS_MAX && ms >= 0 && ms <= 1000 ? malloc(sizeof *t) : NULL;
    if (!t) {
        xHttpResponseSetStatus(res, 400);
        xHttpResponseSend(res, "n (1 to 1000) and ms (0 to 1000)\n", 33);
        return;
    }
    *t = (Tick){.shard = xHttpRequestMetricShard(req), .left = (unsigned)n, .ms = (unsigned)ms};
    xTimerInit(&t->timer, on_tick, t);
    xTimerStart(xHttpRequestLoop(req), &t->timer, t->ms);
    answer_worker(res, 200, t->shard);
}

/* Registers one metric; false (said on stderr) when refused. */
static bool add(xHttpServer *server, const xHttpMetricOpts *opts, xHttpMetric **metric) {
    xErrno err = xHttpServerAddMetric(server, opts, metric);
    if (err == XOK) return true;
    fprintf(stderr, "--user-metrics: %s: %s\n", xErrnoString(err), xHttpServerLastError(server));
    return false;
}

bool benchAddUserMetrics(xHttpServer *server) {
    static const char *const kind[] = {"kind"};
    static const char *const kinds[] = {"a", "b"};
    static const double buckets[] = {1, 5, 10, 50};
    observed = server;
    xHttpMetricOpts opts;
    xHttpMetricOptsInit(&opts);
    opts.name = "bench_requests_total";
    opts.help = "GET /observe requests, by kind.";
    opts.label_names = kind;
    opts.num_labels = 1;
    opts.label_values = kinds;
    opts.num_series = 2;
    if (!add(server, &opts, &requests)) return false;
    opts.type = XHTTP_HISTOGRAM;
    opts.name = "bench_value";
    opts.help = "The values GET /observe was given, by kind.";
    opts.buckets = buckets;
    opts.num_buckets = 4;
    if (!add(server, &opts, &values)) return false;
    xHttpMetricOptsInit(&opts);
    opts.type = XHTTP_GAUGE;
    opts.name = "bench_level";
    opts.help = "The sum of the values GET /observe was given (each worker adds its own).";
    if (!add(server, &opts, &level)) return false;
    opts.name = "bench_setting";
    opts.help = "What GET /observe?set= set last, on each worker, summed.";
    if (!add(server, &opts, &setting)) return false;
    xHttpMetricOptsInit(&opts);
    opts.name = "bench_ticks_total";
    opts.help = "Ticks of the timers GET /observe/tick armed.";
    if (!add(server, &opts, &ticks)) return false;
    return xHttpServerRoute(server, "GET /observe", on_observe, NULL) == XOK &&
           xHttpServerRoute(server, "GET /observe/tick", on_observe_tick, NULL) == XOK;
}
