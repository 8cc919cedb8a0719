/* json.c — the JSON writer: punctuation from a small container stack,
 * strings escaped in runs, integers formatted two digits at a time. */
#include <xbase/json.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xbase/text/utf8.h"

/* What a byte below 0x80 becomes inside a JSON string: 0 copies it, 'u'
 * writes \u00XX, anything else is the letter after a backslash (RFC 8259 §7:
 * the quote, the backslash and every control character must be escaped). */
static const char ESCAPE[128] = {
    ['\b'] = 'b', ['\t'] = 't', ['\n'] = 'n', ['\f'] = 'f', ['\r'] = 'r', ['"'] = '"',  ['\\'] = '\\',
    [0x00] = 'u', [0x01] = 'u', [0x02] = 'u', [0x03] = 'u', [0x04] = 'u', [0x05] = 'u', [0x06] = 'u',
    [0x07] = 'u', [0x0b] = 'u', [0x0e] = 'u', [0x0f] = 'u', [0x10] = 'u', [0x11] = 'u', [0x12] = 'u',
    [0x13] = 'u', [0x14] = 'u', [0x15] = 'u', [0x16] = 'u', [0x17] = 'u', [0x18] = 'u', [0x19] = 'u',
    [0x1a] = 'u', [0x1b] = 'u', [0x1c] = 'u', [0x1d] = 'u', [0x1e] = 'u', [0x1f] = 'u',
};

/* "00" to "99", so an integer takes one copy per two digits. */
static const char DIGIT_PAIRS[201] = "00010203040506070809101112131415161718192021222324"
                                     "25262728293031323334353637383940414243444546474849"
                                     "50515253545556575859606162636465666768697071727374"
                                     "75767778798081828384858687888990919293949596979899";

static void fail(xJsonWriter *w, xErrno err) {
    if (w->err == XOK) w->err = err;
}

/* Makes room for n more bytes; false (and the writer failed) when there is none. */
static bool room(xJsonWriter *w, size_t n) {
    if (w->out->cap - w->out->len >= n) return true;
    if (xBufferReserve(w->out, n) == XOK) return true;
    fail(w, XERR_NOMEM);
    return false;
}

static void put(xJsonWriter *w, const char *bytes, size_t n) {
    memcpy(w->out->data + w->out->len, bytes, n);
    w->out->len += n;
}

static uint64_t bit(unsigned depth) { return (uint64_t)1 << (depth - 1); }

static bool in_object(const xJsonWriter *w) { return w->depth && (w->is_object & bit(w->depth)); }

/* Checks that a value may come now and writes the comma before it: extra is
 * the room the value itself needs. */
static bool begin_value(xJsonWriter *w, size_t extra) {
    if (w->err != XOK) return false;
    if (w->done || (in_object(w) && !w->after_key)) {
        fail(w, XERR_STATE);
        return false;
    }
    if (!room(w, extra + 1)) return false;
    if (w->depth && !in_object(w)) {
        if (w->has_items & bit(w->depth)) put(w, ",", 1);
        w->has_items |= bit(w->depth);
    }
    w->after_key = false;
    return true;
}

/* A scalar or a closed container ends the document when nothing is open. */
static void end_value(xJsonWriter *w) {
    if (w->depth == 0) w->done = true;
}

void xJsonInit(xJsonWriter *w, xBuffer *out) {
    memset(w, 0, sizeof *w);
    w->out = out;
}

static void begin_container(xJsonWriter *w, char open, bool object) {
    if (!begin_value(w, 1)) return;
    if (w->depth == XJSON_MAX_DEPTH) {
        fail(w, XERR_LIMIT);
        return;
    }
    put(w, &open, 1);
    w->depth++;
    w->has_items &= ~bit(w->depth);
    if (object) {
        w->is_object |= bit(w->depth);
    } else {
        w->is_object &= ~bit(w->depth);
    }
}

static void end_container(xJsonWriter *w, char close, bool object) {
    if (w->err != XOK) return;
    if (!w->depth || in_object(w) != object || w->after_key) {
        fail(w, XERR_STATE);
        return;
    }
    if (!room(w, 1)) return;
    put(w, &close, 1);
    w->depth--;
    end_value(w);
}

void xJsonBeginObject(xJsonWriter *w) { begin_container(w, '{', true); }
void xJsonEndObject(xJsonWriter *w) { end_container(w, '}', true); }
void xJsonBeginArray(xJsonWriter *w) { begin_container(w, '[', false); }
void xJsonEndArray(xJsonWriter *w) { end_container(w, ']', false); }

/* Writes s quoted and escaped; the comma, if any, is already written. Runs
 * of bytes that need nothing are copied at once. */
static void put_escaped_string(xJsonWriter *w, const char *s, size_t len) {
    const unsigned char *p = (const unsigned char *)s, *end = p + len;
    if (!room(w, len + 2)) return;
    put(w, "\"", 1);
    while (p < end) {
        const unsigned char *run = p;
        while (p < end && (*p >= 0x80 ? true : !ESCAPE[*p])) {
            if (*p < 0x80) {
                p++;
                continue;
            }
            size_t n = xUtf8Sequence(p, (size_t)(end - p));
            if (!n) {
                fail(w, XERR_INVALID);
                return;
            }
            p += n;
        }
        /* The run fits: room for len + 2 was made, and escapes made more. */
        if (p > run) put(w, (const char *)run, (size_t)(p - run));
        if (p == end) break;
        /* One escaped byte: at most six characters, and the rest may still
         * need their own room (the len + 2 made above counted this one once). */
        if (!room(w, 6 + (size_t)(end - p) + 1)) return;
        char esc[6] = {'\\', ESCAPE[*p]};
        size_t n = 2;
        if (esc[1] == 'u') {
            esc[2] = '0';
            esc[3] = '0';
            esc[4] = "0123456789abcdef"[*p >> 4];
            esc[5] = "0123456789abcdef"[*p & 15];
            n = 6;
        }
        put(w, esc, n);
        p++;
    }
    if (!room(w, 1)) return;
    put(w, "\"", 1);
}

/* Nonzero when a byte of v needs more than a copy inside a JSON string: a
 * control character, the quote, the backslash, or a byte of a UTF-8
 * sequence (to be checked). The zero-byte test, eight bytes at once. */
static uint64_t needs_care(uint64_t v) {
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t quote = v ^ (ones * '"'), backslash = v ^ (ones * '\\');
    return (((v - ones * 0x20) & ~v) | ((quote - ones) & ~quote) | ((backslash - ones) & ~backslash) | v) &
           highs;
}

/* Copies s to o while no byte of it needs care, eight bytes at a time where
 * there are eight; returns the end, or NULL at the first byte that needs
 * escaping or UTF-8 checks (what was copied then does not count). */
static char *copy_plain(char *o, const char *s, size_t len) {
    const unsigned char *p = (const unsigned char *)s, *end = p + len;
    for (; end - p >= 8; p += 8, o += 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        if (needs_care(v)) return NULL;
        memcpy(o, &v, 8);
    }
    for (; p < end; p++) {
        if (*p >= 0x80 || ESCAPE[*p]) return NULL;
        *o++ = (char)*p;
    }
    return o;
}

/* put_escaped_string's result, made faster for the usual string (keys,
 * names: ASCII with nothing to escape) by copying while looking. */
static void put_string(xJsonWriter *w, const char *s, size_t len) {
    if (!room(w, len + 2)) return;
    char *out = w->out->data + w->out->len, *o = copy_plain(out + 1, s, len);
    if (!o) {
        put_escaped_string(w, s, len);
        return;
    }
    out[0] = '"';
    *o++ = '"';
    w->out->len = (size_t)(o - w->out->data);
}

void xJsonKey(xJsonWriter *w, const char *key, size_t len) {
    if (w->err != XOK) return;
    if (!in_object(w) || w->after_key) {
        fail(w, XERR_STATE);
        return;
    }
    /* The usual key in one go: the comma, the quotes, the colon and the key
     * copied as it is, room made once. */
    if (!room(w, len + 4)) return;
    bool comma = w->has_items & bit(w->depth);
    w->has_items |= bit(w->depth);
    char *out = w->out->data + w->out->len, *o = copy_plain(out + comma + 1, key, len);
    if (o) {
        out[0] = ',';
        out[comma] = '"';
        memcpy(o, "\":", 2);
        w->out->len = (size_t)(o + 2 - w->out->data);
    } else {
        if (comma) put(w, ",", 1);
        put_escaped_string(w, key, len);
        if (w->err != XOK || !room(w, 1)) return;
        put(w, ":", 1);
    }
    w->after_key = true;
}

void xJsonString(xJsonWriter *w, const char *s, size_t len) {
    if (!begin_value(w, 0)) return;
    put_string(w, s, len);
    end_value(w);
}

/* Formats v into the end of digits (20 bytes) and returns where it begins. */
static char *format_u64(uint64_t v, char *digits_end) {
    char *p = digits_end;
    while (v >= 100) {
        unsigned pair = (unsigned)(v % 100) * 2;
        v /= 100;
        p -= 2;
        memcpy(p, DIGIT_PAIRS + pair, 2);
    }
    if (v >= 10) {
        p -= 2;
        memcpy(p, DIGIT_PAIRS + v * 2, 2);
    } else {
        *--p = (char)('0' + v);
    }
    return p;
}

static void put_integer(xJsonWriter *w, uint64_t magnitude, bool negative) {
    char digits[21];
    char *end = digits + sizeof digits, *start = format_u64(magnitude, end);
    if (negative) *--start = '-';
    if (!begin_value(w, (size_t)(end - start))) return;
    put(w, start, (size_t)(end - start));
    end_value(w);
}

void xJsonInt(xJsonWriter *w, int64_t v) {
    /* The magnitude of INT64_MIN does not fit in int64_t; it does in uint64_t. */
    put_integer(w, v < 0 ? 0 - (uint64_t)v : (uint64_t)v, v < 0);
}

void xJsonUint(xJsonWriter *w, uint64_t v) { put_integer(w, v, false); }

void xJsonDouble(xJsonWriter *w, double v) {
    if (w->err != XOK) return;
    if (!isfinite(v)) {
        fail(w, XERR_INVALID);
        return;
    }
    /* Integral values below 2^53 are exact as integers and print fastest so. */
    if (v == floor(v) && fabs(v) < 9007199254740992.0 && !(v == 0 && signbit(v))) {
        xJsonInt(w, (int64_t)v);
        return;
    }
    /* The shortest of 15, 16 and 17 significant digits that reads back as v;
     * 17 always does (IEEE 754 binary64). */
    char text[32];
    int n = 0;
    for (int precision = 15; precision <= 17; precision++) {
        n = snprintf(text, sizeof text, "%.*g", precision, v);
        if (strtod(text, NULL) == v) break;
    }
    if (!begin_value(w, (size_t)n)) return;
    put(w, text, (size_t)n);
    end_value(w);
}

static void put_literal(xJsonWriter *w, const char *text, size_t n) {
    if (!begin_value(w, n)) return;
    put(w, text, n);
    end_value(w);
}

void xJsonBool(xJsonWriter *w, bool v) {
    if (v) {
        put_literal(w, "true", 4);
    } else {
        put_literal(w, "false", 5);
    }
}

void xJsonNull(xJsonWriter *w) { put_literal(w, "null", 4); }

void xJsonRaw(xJsonWriter *w, const char *json, size_t len) { put_literal(w, json, len); }

xErrno xJsonFinish(const xJsonWriter *w) {
    if (w->err != XOK) return w->err;
    return w->done ? XOK : XERR_STATE;
}
