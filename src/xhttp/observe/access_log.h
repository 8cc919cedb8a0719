/* access_log.h — one worker's access log: lines gather in a buffer of the
 * worker's own and leave in batches, when it fills or a timer fires, so a
 * request never waits for the disk; reopened on the worker's thread for log
 * rotation, and flushed when the worker ends. */
#ifndef XHTTP_OBSERVE_ACCESS_LOG_H
#define XHTTP_OBSERVE_ACCESS_LOG_H

#include <stdbool.h>

#include <xbase/buffer.h>
#include <xbase/event.h>
#include <xhttp/observe.h>

#include "xhttp/core/exchange.h"
#include "xhttp/observe/access_format.h"

typedef struct xAccessLog {
    xTimer timer; /* flushes what waits */
    xEventLoop *loop;
    const xHttpAccessLogOpts *opts; /* the server's copy, path included */
    int fd;                         /* ours when opts->path, else the caller's */
    xBuffer lines;                  /* waiting to be written */
    xAccessClock clock;
    bool failed; /* a write failed: said once */
} xAccessLog;

/** Starts log for a worker on loop, opening opts->path if set (opts must
 *  outlive it). XERR_SYS (errno set) when the path cannot be opened. */
xErrno xAccessLogOpen(xAccessLog *log, xEventLoop *loop, const xHttpAccessLogOpts *opts);

/** Adds the line of ex, whose response ended with status after
 *  duration_us, body_len body bytes given (observer.c calls it). */
void xAccessLogFinished(xAccessLog *log, const xHttpExchange *ex, int status, uint64_t body_len,
                        uint64_t duration_us);

/** Writes what waits, then opens the path anew (its old file keeps what was
 *  written). On failure the old file stays in use. On log's own thread. */
void xAccessLogReopen(xAccessLog *log);

/** Writes what waits and closes the file; on log's own thread, its loop
 *  still alive. Harmless on a log never opened. */
void xAccessLogClose(xAccessLog *log);

#endif
