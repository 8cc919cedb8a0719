/* utf8.c — incremental UTF-8 validation (utf8.h). */
#include "xhttp/websocket/utf8.h"

#include <string.h>

/* ASCII runs are the common case: skip them eight bytes at a time. */
static size_t ascii_prefix(const uint8_t *p, size_t len) {
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t word;
        memcpy(&word, p + i, 8);
        if (word & 0x8080808080808080ull) break;
    }
    if (i + 4 <= len) {
        uint32_t word;
        memcpy(&word, p + i, 4);
        if (!(word & 0x80808080u)) i += 4;
    }
    while (i < len && p[i] < 0x80) i++;
    return i;
}

bool xUtf8Feed(xUtf8 *s, const uint8_t *p, size_t len) {
    size_t i = 0;
    while (i < len) {
        if (s->need) {
            uint8_t c = p[i++];
            if (c < s->lower || c > s->upper) return false;
            s->lower = 0x80, s->upper = 0xBF;
            s->need--;
            continue;
        }
        i += ascii_prefix(p + i, len - i);
        if (i == len) break;
        uint8_t c = p[i++];
        s->lower = 0x80, s->upper = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) {
            s->need = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            s->need = 2;
            if (c == 0xE0) s->lower = 0xA0; /* no overlong three-byte forms */
            if (c == 0xED) s->upper = 0x9F; /* no surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
            s->need = 3;
            if (c == 0xF0) s->lower = 0x90; /* no overlong four-byte forms */
            if (c == 0xF4) s->upper = 0x8F; /* nothing above U+10FFFF */
        } else {
            return false;
        }
    }
    return true;
}
