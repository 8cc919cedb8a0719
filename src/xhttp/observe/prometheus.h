/* prometheus.h — the server's counters in the Prometheus text exposition
 * format (version 0.0.4): a HELP and a TYPE line per metric, then its
 * samples with their labels. */
#ifndef XHTTP_OBSERVE_PROMETHEUS_H
#define XHTTP_OBSERVE_PROMETHEUS_H

#include <xbase/buffer.h>
#include <xbase/errno.h>
#include <xhttp/observe.h>

/** The Content-Type the text goes out with. */
#define XPROMETHEUS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/** Appends m as exposition text to out. XERR_NOMEM: out may hold part. */
xErrno xPrometheusFormat(const xHttpMetrics *m, xBuffer *out);

#endif
