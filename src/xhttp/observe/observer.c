/* observer.c — a response's end, timed once for its route's histogram and
 * its access log line. */
#include "xhttp/observe/observer.h"

#include <time.h>

#include "xhttp/observe/access_log.h"
#include "xhttp/observe/metrics.h"

/* Now, to the microsecond, on the clock the loop samples each turn with
 * xEventLoopPreciseClock on (the start is that sample). */
static uint64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* The label index of the route ex matched, or the unmatched requests'. */
static uint32_t route_of(const xHttpExchange *ex) {
    if (!ex->routed || ex->route != XROUTE_FOUND) return XMETRICS_UNMATCHED;
    return ((const xHttpRouteTarget *)ex->match.handler)->route_index;
}

void xObserverFinished(void *arg, const xHttpExchange *ex, int status, uint64_t body_len) {
    uint64_t end = now_us(), start = ex->req.start_us;
    uint64_t duration_us = end > start ? end - start : 0;
    xHttpMetricShard *shard = xHttpContextOf(ex->req.conn)->metrics;
    if (shard && shard->durations) xMetricShardDuration(shard, route_of(ex), status, duration_us);
    if (arg) xAccessLogFinished(arg, ex, status, body_len, duration_us);
}
