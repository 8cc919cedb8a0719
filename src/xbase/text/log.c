/* log.c — xKit's own messages: each formatted once, then handed to the
 * application's handler or written to stderr as one line with a single
 * write(2), so lines from different worker threads never interleave. */
#include <xbase/log.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Set from any thread while workers log: a relaxed atomic, so each reads a
 * whole value and sees a change soon, at the cost of a plain load. */
static atomic_int runtime_level = XLOG_INFO;

/* The handler and its argument change together, and a change waits for the
 * messages being handled (each holds the lock to read) to finish, so the
 * old handler's arg may be freed once xLogSetHandler returns. glibc's
 * default rwlock prefers readers, so a handler that logs takes it again. A
 * message is rare next to a request: its lock costs nothing that shows. */
static pthread_rwlock_t handler_lock = PTHREAD_RWLOCK_INITIALIZER;
static xLogHandler handler;
static void *handler_arg;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void xLogSetLevel(xLogLevel level) {
    atomic_store_explicit(&runtime_level, (int)level, memory_order_relaxed);
}

xLogLevel xLogGetLevel(void) { return (xLogLevel)atomic_load_explicit(&runtime_level, memory_order_relaxed); }

void xLogSetHandler(xLogHandler fn, void *arg) {
    pthread_rwlock_wrlock(&handler_lock);
    handler = fn;
    handler_arg = fn ? arg : NULL;
    pthread_rwlock_unlock(&handler_lock);
}

/* The default: "<UTC time> <level> <file>:<line>: <message>" on stderr. */
static void write_stderr(xLogLevel level, const char *file, int line, const char *message) {
    char text[1200];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02dZ %s %s:%d: %s", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, level_names[level], file,
                     line, message);
    if (n > (int)sizeof text - 2) n = (int)sizeof text - 2;
    text[n++] = '\n';
    ssize_t ignored = write(STDERR_FILENO, text, (size_t)n);
    (void)ignored;
}

void xLogWrite(xLogLevel level, const char *file, int line, const char *fmt, ...) {
    if (level < XLOG_DEBUG || level > XLOG_ERROR) return;
    char message[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    pthread_rwlock_rdlock(&handler_lock);
    if (handler)
        handler(level, base, line, message, handler_arg);
    else
        write_stderr(level, base, line, message);
    pthread_rwlock_unlock(&handler_lock);
}
