/* date.h — the Date header's value (RFC 9110 §6.6.1), formatted at most once
 * a second per worker from the second its loop sampled. */
#ifndef XHTTP_CORE_DATE_H
#define XHTTP_CORE_DATE_H

#include <time.h>

#include <xbase/event.h>

/** The IMF-fixdate's length: "Sun, 06 Nov 1994 08:49:37 GMT". */
#define XHTTP_DATE_LEN 29

/** One worker's formatted second. */
typedef struct xHttpDateCache {
    time_t second;
    char text[XHTTP_DATE_LEN + 3];
} xHttpDateCache;

/** Writes the IMF-fixdate of t into out (NUL-terminated). */
void xHttpFormatDate(char out[XHTTP_DATE_LEN + 1], time_t t);

/** The Date value for loop's current second (XHTTP_DATE_LEN bytes,
 *  NUL-terminated), reformatted only when the second has changed. */
static inline const char *xHttpDate(xHttpDateCache *cache, const xEventLoop *loop) {
    time_t now = xEventLoopWallSeconds(loop);
    if (now != cache->second) {
        cache->second = now;
        xHttpFormatDate(cache->text, now);
    }
    return cache->text;
}

#endif
