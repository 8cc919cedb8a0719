/* utf8.h — the one UTF-8 check the JSON writer and reader share: how long
 * the well-formed sequence at a byte is (RFC 3629), inline for their loops. */
#ifndef XBASE_TEXT_UTF8_H
#define XBASE_TEXT_UTF8_H

#include <stddef.h>

/* The length of the UTF-8 sequence at s (at most n bytes, n >= 1, s[0] >= 0x80), or 0 when
 * it is not one: overlong forms, surrogates and code points past U+10FFFF
 * are not (RFC 3629 §4). */
static inline size_t xUtf8Sequence(const unsigned char *s, size_t n) {
    unsigned char c = s[0];
    if (c >= 0xc2 && c <= 0xdf) return n >= 2 && (s[1] & 0xc0) == 0x80 ? 2 : 0;
    if (c >= 0xe0 && c <= 0xef) {
        if (n < 3 || (s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80) return 0;
        if (c == 0xe0 && s[1] < 0xa0) return 0; /* overlong */
        if (c == 0xed && s[1] > 0x9f) return 0; /* UTF-16 surrogate */
        return 3;
    }
    if (c >= 0xf0 && c <= 0xf4) {
        if (n < 4 || (s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80 || (s[3] & 0xc0) != 0x80) return 0;
        if (c == 0xf0 && s[1] < 0x90) return 0; /* overlong */
        if (c == 0xf4 && s[1] > 0x8f) return 0; /* past U+10FFFF */
        return 4;
    }
    return 0;
}

#endif
