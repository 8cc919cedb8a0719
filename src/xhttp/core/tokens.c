/* tokens.c — the shared HTTP facts of tokens.h. */
#include "xhttp/core/tokens.h"

#include <string.h>

#define T(c) XHTTP_IS_TCHAR(c)
#define ROW(r)                                                                                               \
    T(r), T(r + 1), T(r + 2), T(r + 3), T(r + 4), T(r + 5), T(r + 6), T(r + 7), T(r + 8), T(r + 9),          \
        T(r + 10), T(r + 11), T(r + 12), T(r + 13), T(r + 14), T(r + 15)

/* Built by the compiler from the definition, so it cannot drift. */
const bool xHttpTokenChars[256] = {
    ROW(0x00), ROW(0x10), ROW(0x20), ROW(0x30), ROW(0x40), ROW(0x50), ROW(0x60), ROW(0x70),
    ROW(0x80), ROW(0x90), ROW(0xA0), ROW(0xB0), ROW(0xC0), ROW(0xD0), ROW(0xE0), ROW(0xF0),
};

bool xHttpNameEquals(xStr name, const char *other) {
    if (name.len != strlen(other)) return false;
    for (size_t i = 0; i < name.len; i++) {
        unsigned x = (unsigned char)name.data[i], y = (unsigned char)other[i];
        if (x - 'A' < 26u) x += 32;
        if (y - 'A' < 26u) y += 32;
        if (x != y) return false;
    }
    return true;
}

bool xHttpListHasToken(xStr list, const char *token) {
    size_t n = strlen(token);
    const char *p = list.data, *end = p + list.len;
    while (p < end) {
        while (p < end && (*p == ' ' || *p == '\t' || *p == ',')) p++;
        const char *item = p;
        while (p < end && *p != ',' && *p != ' ' && *p != '\t') p++;
        if ((size_t)(p - item) == n && xHttpNameEquals((xStr){item, n}, token)) return true;
    }
    return false;
}
