/* prometheus.h — the Prometheus text exposition format (version 0.0.4): the
 * server's counters as a HELP and a TYPE line per metric, then its samples
 * with their labels; and the pieces every other metric is written with:
 * names checked against the data model, escaped label values and help text,
 * and numbers as a scraper parses them. */
#ifndef XHTTP_OBSERVE_PROMETHEUS_H
#define XHTTP_OBSERVE_PROMETHEUS_H

#include <stdbool.h>
#include <stdint.h>

#include <xbase/buffer.h>
#include <xbase/errno.h>
#include <xbase/str.h>
#include <xhttp/observe.h>

/** The Content-Type the text goes out with. */
#define XPROMETHEUS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/** Appends m as exposition text to out. XERR_NOMEM: out may hold part. */
xErrno xPrometheusFormat(const xHttpMetrics *m, xBuffer *out);

/** True for a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*) with no ':' (the data
 *  model keeps colons for recording rules) or a label name
 *  ([a-zA-Z_][a-zA-Z0-9_]*, not starting "__", which is Prometheus's own). */
bool xPrometheusIsMetricName(const char *name);
bool xPrometheusIsLabelName(const char *name);

/** Appends "# HELP name help\n# TYPE name type\n", help escaped (and
 *  without the space before it when empty). */
xErrno xPrometheusAppendHeader(xBuffer *out, const char *name, const char *help, const char *type);

/** Appends s escaped for inside a label value's quotes ('\\', '"' and line
 *  feed as \\, \" and \n). */
xErrno xPrometheusAppendLabelValue(xBuffer *out, xStr s);

/** Appends v as a sample value: the shortest decimal that reads back as v,
 *  "+Inf", "-Inf" or "NaN". */
xErrno xPrometheusAppendDouble(xBuffer *out, double v);

/** Appends v in decimal. */
xErrno xPrometheusAppendU64(xBuffer *out, uint64_t v);

#endif
