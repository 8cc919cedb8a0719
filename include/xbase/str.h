/* xbase/str.h — a borrowed, length-delimited string. */
#ifndef XBASE_STR_H
#define XBASE_STR_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What this header declares is libxkit.so's API: exported, where the rest is hidden. */
#pragma GCC visibility push(default)

/** A view of bytes owned by someone else; not NUL-terminated. */
typedef struct xStr {
    const char *data;
    size_t len;
} xStr;

/** A view of a NUL-terminated C string. */
static inline xStr xStrFromC(const char *s) {
    xStr v = {s, s ? strlen(s) : 0};
    return v;
}

/** True when v holds exactly the bytes of the C string s. */
static inline bool xStrEqualsC(xStr v, const char *s) {
    size_t n = strlen(s);
    return v.len == n && memcmp(v.data, s, n) == 0;
}

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
