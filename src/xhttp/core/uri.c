/* uri.c — percent-decoding of paths and query values (RFC 3986 §2.1):
 * xHttpPercentDecode in <xhttp/server.h>. */
#include <xhttp/server.h>

static int hex_value(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    c |= 0x20; /* ASCII lower case; leaves digits and most else apart */
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

xErrno xHttpPercentDecode(xStr in, char *out, size_t cap, unsigned flags, size_t *out_len) {
    size_t n = 0;
    for (size_t i = 0; i < in.len; i++) {
        unsigned char c = (unsigned char)in.data[i];
        if (c == '%') {
            if (in.len - i < 3) return XERR_INVALID;
            int hi = hex_value((unsigned char)in.data[i + 1]), lo = hex_value((unsigned char)in.data[i + 2]);
            if (hi < 0 || lo < 0) return XERR_INVALID;
            c = (unsigned char)(hi << 4 | lo);
            if (c == 0 && (flags & XHTTP_DECODE_REFUSE_NUL)) return XERR_INVALID;
            i += 2;
        } else if (c == '+' && (flags & XHTTP_DECODE_PLUS_SPACE)) {
            c = ' ';
        }
        if (n == cap) return XERR_LIMIT;
        out[n++] = (char)c;
    }
    *out_len = n;
    return XOK;
}
