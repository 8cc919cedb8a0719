/* base64.c — RFC 4648 base64 and base64url (base64.h). The two decoders
 * differ only in two digits and in whether padding may be left off. */
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

/* A digit's value, or -1; url picks RFC 4648 §5's two digits. */
static int value_of(char c, bool url) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == (url ? '-' : '+')) return 62;
    if (c == (url ? '_' : '/')) return 63;
    return -1;
}

/* The length of text[0, len) without its padding: one '=' or two closing a
 * whole group. An '=' anywhere else is left to fail as a digit. */
static size_t without_padding(const char *text, size_t len) {
    if (!len || len % 4 || text[len - 1] != '=') return len;
    return text[len - 2] == '=' ? len - 2 : len - 1;
}

/* Decodes len digits: whole groups of 4 (3 bytes), then 2 or 3 more (1 or
 * 2 bytes) whose bits past the last byte are zero. */
static long decode_digits(const char *text, size_t len, bool url, uint8_t *out, size_t cap) {
    if (len % 4 == 1) return -1; /* 6 bits make no byte */
    size_t n = len / 4 * 3 + (len % 4 ? len % 4 - 1 : 0);
    if (n > cap) return -1;
    uint32_t acc = 0;
    int bits = 0;
    size_t at = 0;
    for (size_t i = 0; i < len; i++) {
        int d = value_of(text[i], url);
        if (d < 0) return -1;
        acc = acc << 6 | (uint32_t)d;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[at++] = (uint8_t)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    return acc ? -1 : (long)n; /* stray bits: another encoding of the same bytes */
}

long xBase64Decode(const char *text, size_t len, void *out, size_t cap) {
    if (len % 4) return -1;
    return decode_digits(text, without_padding(text, len), false, out, cap);
}

long xBase64UrlDecode(const char *text, size_t len, void *out, size_t cap) {
    return decode_digits(text, without_padding(text, len), true, out, cap);
}
