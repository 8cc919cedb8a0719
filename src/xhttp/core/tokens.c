/* tokens.c — the shared HTTP facts of tokens.h. */
#include "xhttp/core/tokens.h"

#include <string.h>

#define ROW(F, r)                                                                                            \
    F(r), F(r + 1), F(r + 2), F(r + 3), F(r + 4), F(r + 5), F(r + 6), F(r + 7), F(r + 8), F(r + 9),          \
        F(r + 10), F(r + 11), F(r + 12), F(r + 13), F(r + 14), F(r + 15)
#define TABLE(F)                                                                                             \
    {                                                                                                        \
        ROW(F, 0x00), ROW(F, 0x10), ROW(F, 0x20), ROW(F, 0x30), ROW(F, 0x40), ROW(F, 0x50), ROW(F, 0x60),    \
            ROW(F, 0x70), ROW(F, 0x80), ROW(F, 0x90), ROW(F, 0xA0), ROW(F, 0xB0), ROW(F, 0xC0),              \
            ROW(F, 0xD0), ROW(F, 0xE0), ROW(F, 0xF0)                                                         \
    }

/* Built by the compiler from the definitions, so they cannot drift. */
const bool xHttpTokenChars[256] = TABLE(XHTTP_IS_TCHAR);
const bool xHttpFieldChars[256] = TABLE(XHTTP_IS_FIELD_CHAR);
const bool xHttpAuthorityChars[256] = TABLE(XHTTP_IS_AUTHORITY_CHAR);

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
