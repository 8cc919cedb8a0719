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

/* An input read as a program, a byte at a time: 0 once it ran out. */
typedef struct FuzzProgram {
    const uint8_t *p, *end;
} FuzzProgram;

static inline unsigned fuzz_take(FuzzProgram *in) { return in->p < in->end ? *in->p++ : 0; }

/* A string of the input: a length byte (255 meaning 255 plus the next two bytes,
 * high first), at most max, then that many bytes, fewer where the input ends. */
static inline xStr fuzz_take_string(FuzzProgram *in, size_t max) {
    size_t len = fuzz_take(in);
    if (len == 255) {
        size_t high = fuzz_take(in);
        len = 255 + (high << 8 | fuzz_take(in));
    }
    if (len > max) len = max;
    size_t left = (size_t)(in->end - in->p);
    if (len > left) len = left;
    xStr s = {(const char *)in->p, len};
    in->p += len;
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
