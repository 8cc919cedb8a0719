/* xbase/log.h — leveled logging with a compile-time floor, for xKit's own
 * messages (a listener that failed, a TLS reload, the I/O backend chosen).
 *
 * Messages below XLOG_FLOOR compile to nothing, so debug logging costs nothing in
 * Release builds. The runtime level filters further. By default each message
 * is one line on stderr; xLogSetHandler sends them where the application's
 * own messages go instead. */
#ifndef XBASE_LOG_H
#define XBASE_LOG_H

#ifdef __cplusplus
extern "C" {
#endif

/* What this header declares is libxkit.so's API: exported, where the rest is hidden. */
#pragma GCC visibility push(default)

typedef enum xLogLevel {
    XLOG_DEBUG = 0,
    XLOG_INFO = 1,
    XLOG_WARN = 2,
    XLOG_ERROR = 3,
    XLOG_OFF = 4,
} xLogLevel;

#ifndef XLOG_FLOOR
#ifdef NDEBUG
#define XLOG_FLOOR XLOG_INFO
#else
#define XLOG_FLOOR XLOG_DEBUG
#endif
#endif

/** Sets the runtime level, from any thread; messages below it are dropped.
 *  Default XLOG_INFO. */
void xLogSetLevel(xLogLevel level);

/** The current runtime level. */
xLogLevel xLogGetLevel(void);

/** Takes one message: its level, the base name of the source file and the
 *  line that logged it, and the text (no newline; cut at 1023 bytes; valid
 *  during the call only); arg is what xLogSetHandler was given. Called on
 *  the thread that logs: the workers call it from theirs, at once, so it
 *  must be safe to call from several threads together. It may log (its
 *  message comes back to it) but not call xLogSetHandler. */
typedef void (*xLogHandler)(xLogLevel level, const char *file, int line, const char *message, void *arg);

/** Sends every message that passes the level to fn(..., arg) instead of
 *  stderr; fn NULL goes back to stderr (the default: "<UTC time> <level>
 *  <file>:<line>: <message>", one write(2) per line). From any thread: once
 *  it returns, the handler before it is neither running nor called again,
 *  so its arg may be freed. */
void xLogSetHandler(xLogHandler fn, void *arg);

/** Formats one message and hands it to the handler (stderr by default); use
 *  the XLOG_* macros instead. */
void xLogWrite(xLogLevel level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define XLOG_AT(level, ...)                                                                                  \
    do {                                                                                                     \
        if ((level) >= XLOG_FLOOR && (level) >= xLogGetLevel())                                              \
            xLogWrite((level), __FILE__, __LINE__, __VA_ARGS__);                                             \
    } while (0)

#define XLOG_DEBUG(...) XLOG_AT(XLOG_DEBUG, __VA_ARGS__)
#define XLOG_INFO(...) XLOG_AT(XLOG_INFO, __VA_ARGS__)
#define XLOG_WARN(...) XLOG_AT(XLOG_WARN, __VA_ARGS__)
#define XLOG_ERROR(...) XLOG_AT(XLOG_ERROR, __VA_ARGS__)

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
