/* metrics.c — the application's metrics and the request duration
 * histograms: registering them (checked against the Prometheus data model),
 * updating a worker's cells, and summing every worker's for /metrics. */
#include "xhttp/observe/metrics.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xbase/mem/sized.h"
#include "xbase/text/utf8.h"

#include "xhttp/core/exchange.h"
#include "xhttp/observe/prometheus.h"

#define XMETRIC_MAX_NAME 128
#define XMETRIC_MAX_LABELS 8
#define XMETRIC_MAX_SERIES 4096
#define XMETRIC_MAX_BUCKETS 64

struct xHttpMetric {
    xHttpMetricType type;
    char *name;
    char *help;
    char **label_names;  /* num_labels */
    char **label_values; /* num_series rows of num_labels */
    size_t num_labels, num_series;
    double *buckets; /* a histogram's bounds */
    size_t num_buckets;
    size_t offset; /* its first cell in every shard */
    size_t stride; /* cells per series: 1, or a histogram's buckets, +Inf and sum */
};

struct xMetricRegistry {
    xHttpMetricShard *shards;
    int num_shards;
    xHttpMetric **metrics;
    size_t num_metrics;
    size_t num_cells; /* in each shard's cells */
    char **routes;    /* route i's label is routes[i - 1] */
    size_t num_routes;
    uint64_t *duration_bounds_us; /* NULL: the duration histograms are off */
    size_t duration_buckets;
};

/* Prometheus's own default buckets (client_golang's DefBuckets). */
static const double default_buckets[] = {.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10};
/* From a fast response on a loop to a slow upstream's, in microseconds. */
static const uint64_t default_duration_bounds_us[] = {100,     250,     500,     1000,    2500,   5000,
                                                      10000,   25000,   50000,   100000,  250000, 500000,
                                                      1000000, 2500000, 5000000, 10000000};

static const char *const type_names[] = {"counter", "gauge", "histogram"};

/* ---- Cells ---- */

/* A gauge's value and a histogram's sum are doubles, kept in a counter's
 * bits so their one writer and the readers use the same relaxed atomics. */
static double cell_double(const xCounter *cell) {
    uint64_t bits = xCounterRead(cell);
    double v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

static void cell_set_double(xCounter *cell, double v) {
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    atomic_store_explicit(cell, bits, memory_order_relaxed);
}

/* Grows *cells from old to count cells, the new ones zero (a double's zero
 * is all zero bits too). */
static bool grow_cells(xCounter **cells, size_t old, size_t count) {
    xCounter *grown = realloc(*cells, (count ? count : 1) * sizeof *grown);
    if (!grown) return false;
    for (size_t i = old; i < count; i++) atomic_init(&grown[i], 0);
    *cells = grown;
    return true;
}

/* ---- The registry ---- */

xMetricRegistry *xMetricRegistryCreate(int num_shards) {
    xMetricRegistry *reg = calloc(1, sizeof *reg);
    if (!reg) return NULL;
    reg->num_shards = num_shards;
    if (!(reg->shards = calloc((size_t)num_shards, sizeof *reg->shards))) {
        free(reg);
        return NULL;
    }
    return reg;
}

static void free_strings(char **strings, size_t n) {
    for (size_t i = 0; strings && i < n; i++) free(strings[i]);
    free(strings);
}

static void free_metric(xHttpMetric *m) {
    if (!m) return;
    free(m->name);
    free(m->help);
    free_strings(m->label_names, m->num_labels);
    free_strings(m->label_values, m->num_labels * m->num_series);
    free(m->buckets);
    free(m);
}

void xMetricRegistryDestroy(xMetricRegistry *reg) {
    if (!reg) return;
    for (int i = 0; i < reg->num_shards; i++) {
        free(reg->shards[i].cells);
        free(reg->shards[i].durations);
    }
    free(reg->shards);
    for (size_t i = 0; i < reg->num_metrics; i++) free_metric(reg->metrics[i]);
    free(reg->metrics);
    free_strings(reg->routes, reg->num_routes);
    free(reg->duration_bounds_us);
    free(reg);
}

xHttpMetricShard *xMetricRegistryShard(xMetricRegistry *reg, int i) {
    return reg && i >= 0 && i < reg->num_shards ? &reg->shards[i] : NULL;
}

/* ---- Registering ---- */

typedef struct Why {
    char *text;
    size_t len;
} Why;

static xErrno refuse(Why why, xErrno err, const char *what, const char *name) {
    snprintf(why.text, why.len, "metric %.128s: %s", name ? name : "(no name)", what);
    return err;
}

static bool is_utf8(const char *s) {
    const unsigned char *b = (const unsigned char *)s;
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        size_t len = b[i] < 0x80 ? 1 : xUtf8Sequence(b + i, n - i);
        if (!len) return false;
        i += len;
    }
    return true;
}

/* True when sample is name followed by suffix. */
static bool is_suffixed(const char *sample, const char *name, const char *suffix) {
    size_t len = strlen(name);
    return strncmp(sample, name, len) == 0 && strcmp(sample + len, suffix) == 0;
}

/* True when name is taken by a metric of reg, or one of them and a metric
 * of type named name would write the same sample name (a histogram writes
 * name_bucket, name_sum and name_count). */
static bool name_taken(const xMetricRegistry *reg, const char *name, xHttpMetricType type) {
    static const char *const suffixes[] = {"_bucket", "_sum", "_count"};
    for (size_t i = 0; i < reg->num_metrics; i++) {
        const xHttpMetric *m = reg->metrics[i];
        if (strcmp(m->name, name) == 0) return true;
        for (int s = 0; s < 3; s++)
            if ((m->type == XHTTP_HISTOGRAM && is_suffixed(name, m->name, suffixes[s])) ||
                (type == XHTTP_HISTOGRAM && is_suffixed(m->name, name, suffixes[s])))
                return true;
    }
    return false;
}

static xErrno check_labels(const xHttpMetricOpts *o, Why why) {
    for (size_t i = 0; i < o->num_labels; i++) {
        const char *label = o->label_names[i];
        if (!label || !xPrometheusIsLabelName(label))
            return refuse(why, XERR_INVALID, "a bad label name", o->name);
        if (o->type == XHTTP_HISTOGRAM && strcmp(label, "le") == 0)
            return refuse(why, XERR_INVALID, "\"le\" is a histogram's bucket label", o->name);
        for (size_t j = 0; j < i; j++)
            if (strcmp(label, o->label_names[j]) == 0)
                return refuse(why, XERR_INVALID, "a label name given twice", o->name);
    }
    if (o->num_labels == 0) return XOK;
    for (size_t row = 0; row < o->num_series; row++) {
        const char *const *values = o->label_values + row * o->num_labels;
        for (size_t i = 0; i < o->num_labels; i++)
            if (!values[i] || !is_utf8(values[i]))
                return refuse(why, XERR_INVALID, "a label value that is not UTF-8 text", o->name);
        for (size_t other = 0; other < row; other++) {
            const char *const *before = o->label_values + other * o->num_labels;
            size_t same = 0;
            while (same < o->num_labels && strcmp(values[same], before[same]) == 0) same++;
            if (same == o->num_labels) return refuse(why, XERR_INVALID, "a series given twice", o->name);
        }
    }
    return XOK;
}

static xErrno check_buckets(const double *b, size_t n, Why why, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(b[i]) || (i && b[i] <= b[i - 1]))
            return refuse(why, XERR_INVALID, "buckets must be finite and increasing", name);
    return XOK;
}

static xErrno check(const xMetricRegistry *reg, const xHttpMetricOpts *o, Why why) {
    if (!o->name || !xPrometheusIsMetricName(o->name) || strlen(o->name) > XMETRIC_MAX_NAME)
        return refuse(why, XERR_INVALID, "not a metric name ([a-zA-Z_][a-zA-Z0-9_]*, 128 bytes)", o->name);
    if (strncmp(o->name, "xkit_", 5) == 0)
        return refuse(why, XERR_INVALID, "names starting xkit_ are the server's", o->name);
    if ((unsigned)o->type > XHTTP_HISTOGRAM) return refuse(why, XERR_INVALID, "an unknown type", o->name);
    if (o->help && !is_utf8(o->help))
        return refuse(why, XERR_INVALID, "help that is not UTF-8 text", o->name);
    if (o->num_labels > XMETRIC_MAX_LABELS || o->num_series > XMETRIC_MAX_SERIES ||
        o->num_buckets > XMETRIC_MAX_BUCKETS)
        return refuse(why, XERR_LIMIT, "more labels, series or buckets than allowed", o->name);
    if (o->num_series == 0 || (o->num_labels == 0 && o->num_series != 1) ||
        (o->num_labels && (!o->label_names || !o->label_values)))
        return refuse(why, XERR_INVALID, "label names and rows of values do not agree", o->name);
    if (o->type == XHTTP_HISTOGRAM && o->buckets) {
        if (o->num_buckets == 0) return refuse(why, XERR_INVALID, "no buckets", o->name);
        xErrno err = check_buckets(o->buckets, o->num_buckets, why, o->name);
        if (err != XOK) return err;
    }
    xErrno err = check_labels(o, why);
    if (err != XOK) return err;
    if (name_taken(reg, o->name, o->type)) return refuse(why, XERR_EXISTS, "the name is taken", o->name);
    return XOK;
}

static char **copy_strings(const char *const *strings, size_t n, bool *ok) {
    if (n == 0) return NULL;
    char **copy = calloc(n, sizeof *copy);
    for (size_t i = 0; copy && i < n; i++)
        if (!(copy[i] = strdup(strings[i]))) *ok = false;
    if (!copy) *ok = false;
    return copy;
}

static xHttpMetric *copy_metric(const xHttpMetricOpts *o) {
    xHttpMetric *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    bool ok = true;
    m->type = o->type;
    m->num_labels = o->num_labels;
    m->num_series = o->num_series;
    m->name = strdup(o->name);
    m->help = strdup(o->help ? o->help : "");
    m->label_names = copy_strings((const char *const *)o->label_names, o->num_labels, &ok);
    m->label_values = copy_strings(o->label_values, o->num_labels * o->num_series, &ok);
    m->stride = 1;
    if (o->type == XHTTP_HISTOGRAM) {
        const double *bounds = o->buckets ? o->buckets : default_buckets;
        m->num_buckets = o->buckets ? o->num_buckets : sizeof default_buckets / sizeof *default_buckets;
        if ((m->buckets = malloc(m->num_buckets * sizeof *m->buckets)))
            memcpy(m->buckets, bounds, m->num_buckets * sizeof *m->buckets);
        ok = ok && m->buckets;
        m->stride = m->num_buckets + 2;
    }
    if (!ok || !m->name || !m->help) {
        free_metric(m);
        return NULL;
    }
    return m;
}

void xHttpMetricOptsInitSized(xHttpMetricOpts *opts, size_t size) {
    xHttpMetricOpts defaults = {.type = XHTTP_COUNTER, .num_series = 1};
    xSizedInit(opts, size, &defaults, sizeof defaults);
}

xErrno xMetricRegistryAdd(xMetricRegistry *reg, const xHttpMetricOpts *caller, xHttpMetric **metric,
                          char *why, size_t why_len) {
    xHttpMetricOpts opts;
    xHttpMetricOptsInit(&opts);
    if (!caller) return XERR_INVALID;
    xSizedAdopt(&opts, caller, sizeof opts);
    xErrno err = check(reg, &opts, (Why){why, why_len});
    if (err != XOK) return err;
    xHttpMetric *m = copy_metric(&opts);
    xHttpMetric **grown = m ? realloc(reg->metrics, (reg->num_metrics + 1) * sizeof *grown) : NULL;
    if (!grown) {
        free_metric(m);
        return XERR_NOMEM;
    }
    reg->metrics = grown;
    m->offset = reg->num_cells;
    size_t cells = reg->num_cells + m->num_series * m->stride;
    for (int i = 0; i < reg->num_shards; i++)
        if (!grow_cells(&reg->shards[i].cells, reg->num_cells, cells)) {
            free_metric(m); /* the shards grown so far keep their room, unused */
            return XERR_NOMEM;
        }
    reg->num_cells = cells;
    reg->metrics[reg->num_metrics++] = m;
    *metric = m;
    return XOK;
}

/* ---- Routes and their durations ---- */

static size_t duration_cells(const xMetricRegistry *reg, size_t routes) {
    return (routes + 1) * XHTTP_METRIC_STATUS_CLASSES * (reg->duration_buckets + 2);
}

/* Gives every shard room for the histograms of the routes known and the
 * unmatched requests', where it had old cells. */
static xErrno grow_durations(xMetricRegistry *reg, size_t old) {
    if (!reg->duration_bounds_us) return XOK;
    for (int i = 0; i < reg->num_shards; i++) {
        xHttpMetricShard *shard = &reg->shards[i];
        if (!grow_cells(&shard->durations, old, duration_cells(reg, reg->num_routes))) return XERR_NOMEM;
        shard->duration_buckets = reg->duration_buckets;
        shard->duration_bounds_us = reg->duration_bounds_us;
    }
    return XOK;
}

xErrno xMetricRegistryAddRoute(xMetricRegistry *reg, const char *spec, uint32_t *index) {
    char **grown = realloc(reg->routes, (reg->num_routes + 1) * sizeof *grown);
    if (!grown) return XERR_NOMEM;
    reg->routes = grown;
    if (!(grown[reg->num_routes] = strdup(spec))) return XERR_NOMEM;
    reg->num_routes++;
    if (grow_durations(reg, duration_cells(reg, reg->num_routes - 1)) != XOK) {
        xMetricRegistryDropRoute(reg);
        return XERR_NOMEM;
    }
    *index = (uint32_t)reg->num_routes;
    return XOK;
}

void xMetricRegistryDropRoute(xMetricRegistry *reg) {
    if (reg->num_routes) free(reg->routes[--reg->num_routes]);
}

xErrno xMetricRegistryDurations(xMetricRegistry *reg, const double *buckets, size_t num_buckets) {
    if (reg->duration_bounds_us) return XERR_STATE;
    size_t n = buckets ? num_buckets : sizeof default_duration_bounds_us / sizeof *default_duration_bounds_us;
    if (n == 0 || n > XMETRIC_MAX_BUCKETS) return XERR_INVALID;
    uint64_t *bounds = malloc(n * sizeof *bounds);
    if (!bounds) return XERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        if (!buckets) {
            bounds[i] = default_duration_bounds_us[i];
            continue;
        }
        double us = buckets[i] * 1e6;
        /* Whole microseconds, from 1 us to a day: what the clock measures. */
        if (!(us >= 1 && us <= 86400e6) || fabs(us - round(us)) > 1e-6 * us ||
            (i && (uint64_t)round(us) <= bounds[i - 1])) {
            free(bounds);
            return XERR_INVALID;
        }
        bounds[i] = (uint64_t)round(us);
    }
    reg->duration_bounds_us = bounds;
    reg->duration_buckets = n;
    if (grow_durations(reg, 0) == XOK) return XOK;
    for (int i = 0; i < reg->num_shards; i++) { /* off again, as before the call */
        free(reg->shards[i].durations);
        reg->shards[i] = (xHttpMetricShard){.cells = reg->shards[i].cells};
    }
    free(bounds);
    reg->duration_bounds_us = NULL;
    reg->duration_buckets = 0;
    return XERR_NOMEM;
}

/* ---- Updating ---- */

/* The series' first cell, or NULL when the call names none of type. */
static xCounter *series_cells(xHttpMetricShard *shard, const xHttpMetric *m, size_t series,
                              xHttpMetricType type) {
    if (!shard || !m || m->type != type || series >= m->num_series) return NULL;
    return shard->cells + m->offset + series * m->stride;
}

void xHttpCounterAdd(xHttpMetricShard *shard, const xHttpMetric *metric, size_t series, uint64_t n) {
    xCounter *cell = series_cells(shard, metric, series, XHTTP_COUNTER);
    if (cell) xCounterAdd(cell, n);
}

void xHttpGaugeSet(xHttpMetricShard *shard, const xHttpMetric *metric, size_t series, double value) {
    xCounter *cell = series_cells(shard, metric, series, XHTTP_GAUGE);
    if (cell) cell_set_double(cell, value);
}

void xHttpGaugeAdd(xHttpMetricShard *shard, const xHttpMetric *metric, size_t series, double delta) {
    xCounter *cell = series_cells(shard, metric, series, XHTTP_GAUGE);
    if (cell) cell_set_double(cell, cell_double(cell) + delta);
}

void xHttpHistogramObserve(xHttpMetricShard *shard, const xHttpMetric *metric, size_t series, double value) {
    xCounter *cells = series_cells(shard, metric, series, XHTTP_HISTOGRAM);
    if (!cells || isnan(value)) return;
    size_t bucket = 0;
    while (bucket < metric->num_buckets && value > metric->buckets[bucket]) bucket++;
    xCounterAdd(&cells[bucket], 1);
    cell_set_double(&cells[metric->num_buckets + 1], cell_double(&cells[metric->num_buckets + 1]) + value);
}

/* ---- Writing ---- */

/* Label pairs as written inside a sample's braces (without them). */
typedef struct Labels {
    const char *const *names;
    const char *const *values;
    size_t count;
} Labels;

static xErrno append_labels(xBuffer *out, Labels labels) {
    xErrno err = XOK;
    for (size_t i = 0; err == XOK && i < labels.count; i++) {
        if (i) err = xBufferAppend(out, ",", 1);
        if (err == XOK) err = xBufferAppend(out, labels.names[i], strlen(labels.names[i]));
        if (err == XOK) err = xBufferAppend(out, "=\"", 2);
        if (err == XOK) err = xPrometheusAppendLabelValue(out, xStrFromC(labels.values[i]));
        if (err == XOK) err = xBufferAppend(out, "\"", 1);
    }
    return err;
}

/* name{labels}, with le="bound" last when le is not NULL, then a space: a
 * sample's start. */
static xErrno sample_start(xBuffer *out, const char *name, const char *suffix, Labels labels,
                           const double *le) {
    xErrno err = xBufferAppend(out, name, strlen(name));
    if (err == XOK) err = xBufferAppend(out, suffix, strlen(suffix));
    if (err != XOK || (!labels.count && !le)) return err == XOK ? xBufferAppend(out, " ", 1) : err;
    err = xBufferAppend(out, "{", 1);
    if (err == XOK) err = append_labels(out, labels);
    if (err == XOK && le) err = xBufferAppend(out, labels.count ? ",le=\"" : "le=\"", labels.count ? 5 : 4);
    if (err == XOK && le) err = xPrometheusAppendDouble(out, *le);
    if (err == XOK && le) err = xBufferAppend(out, "\"", 1);
    if (err == XOK) err = xBufferAppend(out, "} ", 2);
    return err;
}

/* One series of a histogram, summed over the workers: counts[i] is bucket
 * i's (not yet cumulative), counts[num_buckets] the +Inf bucket's. */
typedef struct Histogram {
    const char *name;
    Labels labels;
    const double *bounds;
    size_t num_buckets;
    const uint64_t *counts;
    double sum;
} Histogram;

static xErrno append_histogram(xBuffer *out, const Histogram *h) {
    uint64_t total = 0;
    xErrno err = XOK;
    for (size_t i = 0; err == XOK && i <= h->num_buckets; i++) {
        total += h->counts[i];
        double le = i < h->num_buckets ? h->bounds[i] : INFINITY;
        err = sample_start(out, h->name, "_bucket", h->labels, &le);
        if (err == XOK) err = xPrometheusAppendU64(out, total);
        if (err == XOK) err = xBufferAppend(out, "\n", 1);
    }
    if (err == XOK) err = sample_start(out, h->name, "_sum", h->labels, NULL);
    if (err == XOK) err = xPrometheusAppendDouble(out, h->sum);
    if (err == XOK) err = xBufferAppend(out, "\n", 1);
    if (err == XOK) err = sample_start(out, h->name, "_count", h->labels, NULL);
    if (err == XOK) err = xPrometheusAppendU64(out, total);
    if (err == XOK) err = xBufferAppend(out, "\n", 1);
    return err;
}

static xErrno format_durations(const xMetricRegistry *reg, xBuffer *out) {
    static const char *const classes[XHTTP_METRIC_STATUS_CLASSES] = {"1xx", "2xx", "3xx", "4xx", "5xx"};
    static const char *const names[] = {"route", "status"};
    static const char name[] = "xkit_request_duration_seconds";
    xErrno err = xPrometheusAppendHeader(out, name,
                                         "Request durations, from the first byte read to the response's end, "
                                         "by route and status class.",
                                         "histogram");
    size_t n = reg->duration_buckets, stride = n + 2;
    double bounds[XMETRIC_MAX_BUCKETS];
    for (size_t i = 0; i < n; i++) bounds[i] = (double)reg->duration_bounds_us[i] / 1e6;
    uint64_t counts[XMETRIC_MAX_BUCKETS + 2];
    for (size_t route = 0; err == XOK && route <= reg->num_routes; route++) {
        for (int status_class = 0; err == XOK && status_class < XHTTP_METRIC_STATUS_CLASSES; status_class++) {
            size_t first = (route * XHTTP_METRIC_STATUS_CLASSES + (size_t)status_class) * stride;
            memset(counts, 0, sizeof counts);
            for (int s = 0; s < reg->num_shards; s++)
                for (size_t i = 0; i < stride; i++)
                    counts[i] += xCounterRead(&reg->shards[s].durations[first + i]);
            uint64_t seen = 0;
            for (size_t i = 0; i <= n; i++) seen += counts[i];
            if (!seen) continue; /* only the pairs seen: most routes answer one or two classes */
            const char *values[] = {route ? reg->routes[route - 1] : "unmatched", classes[status_class]};
            Histogram h = {name, {names, values, 2}, bounds, n, counts, (double)counts[n + 1] / 1e6};
            err = append_histogram(out, &h);
        }
    }
    return err;
}

static xErrno format_metric(const xMetricRegistry *reg, const xHttpMetric *m, xBuffer *out) {
    xErrno err = xPrometheusAppendHeader(out, m->name, m->help, type_names[m->type]);
    uint64_t counts[XMETRIC_MAX_BUCKETS + 2];
    for (size_t series = 0; err == XOK && series < m->num_series; series++) {
        Labels labels = {(const char *const *)m->label_names,
                         (const char *const *)m->label_values + series * m->num_labels, m->num_labels};
        size_t first = m->offset + series * m->stride;
        if (m->type == XHTTP_HISTOGRAM) {
            Histogram h = {m->name, labels, m->buckets, m->num_buckets, counts, 0};
            memset(counts, 0, sizeof counts);
            for (int s = 0; s < reg->num_shards; s++) {
                const xCounter *cells = reg->shards[s].cells + first;
                for (size_t i = 0; i <= m->num_buckets; i++) counts[i] += xCounterRead(&cells[i]);
                h.sum += cell_double(&cells[m->num_buckets + 1]);
            }
            err = append_histogram(out, &h);
            continue;
        }
        err = sample_start(out, m->name, "", labels, NULL);
        if (m->type == XHTTP_COUNTER) {
            uint64_t total = 0;
            for (int s = 0; s < reg->num_shards; s++) total += xCounterRead(&reg->shards[s].cells[first]);
            if (err == XOK) err = xPrometheusAppendU64(out, total);
        } else {
            double total = 0;
            for (int s = 0; s < reg->num_shards; s++) total += cell_double(&reg->shards[s].cells[first]);
            if (err == XOK) err = xPrometheusAppendDouble(out, total);
        }
        if (err == XOK) err = xBufferAppend(out, "\n", 1);
    }
    return err;
}

xErrno xMetricRegistryFormat(const xMetricRegistry *reg, xBuffer *out) {
    xErrno err = reg->duration_bounds_us ? format_durations(reg, out) : XOK;
    for (size_t i = 0; err == XOK && i < reg->num_metrics; i++)
        err = format_metric(reg, reg->metrics[i], out);
    return err;
}

xHttpMetricShard *xHttpRequestMetricShard(const xHttpRequest *req) {
    return xHttpContextOf(req->conn)->metrics;
}
