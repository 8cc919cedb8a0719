/* metrics.h — the application's metrics and the request duration
 * histograms: what each one is (the registry, built before the server runs
 * and only read after) and each worker's cells (its shard, written by that
 * worker alone with a plain load and store), summed and written as
 * Prometheus text when /metrics is asked for. */
#ifndef XHTTP_OBSERVE_METRICS_H
#define XHTTP_OBSERVE_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include <xbase/buffer.h>
#include <xbase/errno.h>
#include <xhttp/observe.h>

#include "xbase/mem/counter.h"

/** The route label of a request that matched no route. */
#define XMETRICS_UNMATCHED 0

struct xHttpMetricShard {
    xCounter *cells;         /* every metric's series, each at its metric's offset */
    xCounter *durations;     /* [route][status class][bucket..., +Inf, sum in us]; NULL: off */
    size_t duration_buckets; /* bounds, as the registry's (read on the request path) */
    const uint64_t *duration_bounds_us;
};

typedef struct xMetricRegistry xMetricRegistry;

/** A registry with a shard for each of num_shards workers; NULL when out of
 *  memory. */
xMetricRegistry *xMetricRegistryCreate(int num_shards);

void xMetricRegistryDestroy(xMetricRegistry *reg);

/** Shard i (0 <= i < num_shards), else NULL. */
xHttpMetricShard *xMetricRegistryShard(xMetricRegistry *reg, int i);

/** Registers a metric (xHttpServerAddMetric's rules and errors) and gives
 *  every shard its cells; why gets the reason for an XERR_INVALID. */
xErrno xMetricRegistryAdd(xMetricRegistry *reg, const xHttpMetricOpts *opts, xHttpMetric **metric, char *why,
                          size_t why_len);

/** Names a route by its spec for the duration histograms: *index is its
 *  label's (from 1; XMETRICS_UNMATCHED is 0), given to its route target. */
xErrno xMetricRegistryAddRoute(xMetricRegistry *reg, const char *spec, uint32_t *index);

/** Forgets the route added last (the router refused it). */
void xMetricRegistryDropRoute(xMetricRegistry *reg);

/** Turns the duration histograms on with these bounds (seconds; NULL: the
 *  defaults in observe.h). XERR_STATE when on already, XERR_INVALID. */
xErrno xMetricRegistryDurations(xMetricRegistry *reg, const double *buckets, size_t num_buckets);

/** Appends the duration histograms, then every metric, summed over the
 *  shards. XERR_NOMEM: out may hold part. */
xErrno xMetricRegistryFormat(const xMetricRegistry *reg, xBuffer *out);

/** Status classes, as xHttpMetrics.requests counts them. */
static inline int xMetricsStatusClass(int status) {
    int class = status / 100 - 1;
    if (class < 0) class = 0;
    return class > XHTTP_METRIC_STATUS_CLASSES - 1 ? XHTTP_METRIC_STATUS_CLASSES - 1 : class;
}

/** Counts one request of route (its label index) that got status and took
 *  us microseconds; on the shard's worker, its histograms on. */
static inline void xMetricShardDuration(xHttpMetricShard *shard, uint32_t route, int status, uint64_t us) {
    size_t n = shard->duration_buckets;
    size_t bucket = 0;
    while (bucket < n && us > shard->duration_bounds_us[bucket]) bucket++;
    xCounter *cells =
        shard->durations +
        ((size_t)route * XHTTP_METRIC_STATUS_CLASSES + (size_t)xMetricsStatusClass(status)) * (n + 2);
    xCounterAdd(&cells[bucket], 1);
    xCounterAdd(&cells[n + 1], us);
}

#endif
