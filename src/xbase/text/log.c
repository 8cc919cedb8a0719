/* log.c — one line per message on stderr, written with a single write(2) so
 * lines from different worker threads never interleave. */
#include <xbase/log.h>

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Set from any thread while workers log: a relaxed atomic, so each reads a
 * whole value and sees a change soon, at the cost of a plain load. */
static atomic_int runtime_level = XLOG_INFO;

void xLogSetLevel(xLogLevel level) {
    atomic_store_explicit(&runtime_level, (int)level, memory_order_relaxed);
}

xLogLevel xLogGetLevel(void) { return (xLogLevel)atomic_load_explicit(&runtime_level, memory_order_relaxed); }

void xLogWrite(xLogLevel level, const char *file, int line, const char *fmt, ...) {
    static const char *const names[] = {"debug", "info", "warn", "error"};
    char msg[1024];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    const char *base = strrchr(file, '/');
    int n = snprintf(msg, sizeof msg, "%04d-%02d-%02dT%02d:%02d:%02dZ %s %s:%d: ", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, names[level],
                     base ? base + 1 : file, line);
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof msg - 2) n = (int)sizeof msg - 2;
    msg[n++] = '\n';
    ssize_t ignored = write(STDERR_FILENO, msg, (size_t)n);
    (void)ignored;
}
