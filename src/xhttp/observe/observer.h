/* observer.h — what a worker does as each response ends, beyond counting it:
 * its route's duration histogram and its access log line, timed once. Core
 * calls it through the context's on_finished hook, which server.c sets when
 * either is on; with neither, core pays one branch and no clock. */
#ifndef XHTTP_OBSERVE_OBSERVER_H
#define XHTTP_OBSERVE_OBSERVER_H

#include <stdint.h>

#include "xhttp/core/exchange.h"

/** An xHttpFinishedFn: arg is the worker's xAccessLog, or NULL without an
 *  access log; the histograms are the worker's shard's, when on. */
void xObserverFinished(void *arg, const xHttpExchange *ex, int status, uint64_t body_len);

#endif
