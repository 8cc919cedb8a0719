/* check.h — the few assertions our C unit tests need.
 *
 * CHECK records a failure and carries on, so one run shows every broken case;
 * CHECK_MAIN ends with a "N passed, N failed" line and a matching exit code. */
#ifndef XK_TESTS_CHECK_H
#define XK_TESTS_CHECK_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int check_passed, check_failed;

#define CHECK(cond)                                                                                          \
    do {                                                                                                     \
        if (cond) {                                                                                          \
            check_passed++;                                                                                  \
        } else {                                                                                             \
            check_failed++;                                                                                  \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);                         \
        }                                                                                                    \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                                 \
    do {                                                                                                     \
        if (cond) {                                                                                          \
            check_passed++;                                                                                  \
        } else {                                                                                             \
            check_failed++;                                                                                  \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);                         \
            fprintf(stderr, __VA_ARGS__);                                                                    \
            fputc('\n', stderr);                                                                             \
        }                                                                                                    \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                                   \
    CHECK_MSG((long long)(a) == (long long)(b), "%lld != %lld", (long long)(a), (long long)(b))

#define CHECK_STR(view, lit)                                                                                 \
    CHECK_MSG((view).len == strlen(lit) && memcmp((view).data, lit, (view).len) == 0, "\"%.*s\" != \"%s\"",  \
              (int)(view).len, (view).data, lit)

/* The bytes of a string of hex digit pairs ("8286"), written to out; their count. */
static inline size_t check_unhex(const char *hex, uint8_t *out) {
    size_t n = 0;
    for (; hex[0] && hex[1]; hex += 2) {
        unsigned v;
        sscanf(hex, "%2x", &v);
        out[n++] = (uint8_t)v;
    }
    return n;
}

/* Runs a test function and names it in the output when it adds failures. */
#define RUN(test)                                                                                            \
    do {                                                                                                     \
        int before_ = check_failed;                                                                          \
        test();                                                                                              \
        if (check_failed != before_) fprintf(stderr, "FAIL %s\n", #test);                                    \
    } while (0)

#define CHECK_SUMMARY()                                                                                      \
    (printf("%d passed, %d failed\n", check_passed, check_failed), check_failed == 0 ? 0 : 1)

#endif
