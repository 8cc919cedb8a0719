/* xbase/log.h — leveled logging with a compile-time floor.
 *
 * Messages below XLOG_FLOOR compile to nothing, so debug logging costs nothing in
 * Release builds. The runtime level filters further. */
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

/** Writes one formatted line to stderr; use the XLOG_* macros instead. */
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
