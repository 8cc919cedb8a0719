/* fuzz_check.h — what every harness asserts with: an invariant that fails
 * prints where and why, then aborts, so libFuzzer keeps the input as a crash
 * and the replay driver's test fails. */
#ifndef XK_TESTS_FUZZ_CHECK_H
#define XK_TESTS_FUZZ_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <xbase/str.h>

#define FUZZ_ASSERT(cond, ...)                                                                               \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "%s:%d: invariant broken: %s: ", __FILE__, __LINE__, #cond);                     \
            fprintf(stderr, __VA_ARGS__);                                                                    \
            fputc('\n', stderr);                                                                             \
            abort();                                                                                         \
        }                                                                                                    \
    } while (0)

/* True when the view lies within [base, base + len); an empty view may also
 * sit right at the end. */
static inline bool fuzz_view_within(xStr v, const char *base, size_t len) {
    uintptr_t b = (uintptr_t)base, p = (uintptr_t)v.data;
    return v.data && p >= b && p <= b + len && v.len <= b + len - p;
}

/* Copies size bytes into their own heap block, so ASan sees a read of even
 * one byte past them. The caller frees it. */
static inline char *fuzz_copy(const uint8_t *data, size_t size) {
    char *p = malloc(size ? size : 1);
    FUZZ_ASSERT(p != NULL, "out of memory");
    for (size_t i = 0; i < size; i++) p[i] = (char)data[i];
    return p;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
