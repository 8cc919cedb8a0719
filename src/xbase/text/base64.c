/* base64.c — RFC 4648 base64 (base64.h). */
#include "xbase/text/base64.h"

#include <stdint.h>

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t xBase64Encode(const void *in, size_t len, char *out) {
    const uint8_t *p = in;
    char *o = out;
    for (; len >= 3; p += 3, len -= 3) {
        uint32_t v = (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
        *o++ = alphabet[v >> 18];
        *o++ = alphabet[(v >> 12) & 63];
        *o++ = alphabet[(v >> 6) & 63];
        *o++ = alphabet[v & 63];
    }
    if (len) {
        uint32_t v = (uint32_t)p[0] << 16 | (len == 2 ? (uint32_t)p[1] << 8 : 0);
        *o++ = alphabet[v >> 18];
        *o++ = alphabet[(v >> 12) & 63];
        *o++ = len == 2 ? alphabet[(v >> 6) & 63] : '=';
        *o++ = '=';
    }
    return (size_t)(o - out);
}

static int value_of(char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

long xBase64Decode(const char *text, size_t len, void *out, size_t cap) {
    if (len % 4) return -1;
    uint8_t *o = out;
    size_t n = 0;
    for (size_t i = 0; i < len; i += 4) {
        bool last = i + 4 == len;
        int pad = last && text[i + 3] == '=' ? (text[i + 2] == '=' ? 2 : 1) : 0;
        uint32_t v = 0;
        for (int k = 0; k < 4; k++) {
            int d = k >= 4 - pad ? 0 : value_of(text[i + k]);
            if (d < 0) return -1;
            v = v << 6 | (uint32_t)d;
        }
        size_t bytes = 3 - (size_t)pad;
        if (n + bytes > cap) return -1;
        if ((pad == 1 && (v & 0xFF)) || (pad == 2 && (v & 0xFFFF))) return -1; /* stray bits */
        o[n++] = (uint8_t)(v >> 16);
        if (bytes > 1) o[n++] = (uint8_t)(v >> 8);
        if (bytes > 2) o[n++] = (uint8_t)v;
    }
    return (long)n;
}
