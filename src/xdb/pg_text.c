/* pg_text.c — strict readers of PostgreSQL's text output for the result
 * getters, and the writers of numeric parameters (see pg_text.h). */
#include "xdb/pg_text.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool xPgParseInt64(const char *text, size_t length, int64_t *out) {
    size_t at = 0;
    bool negative = length > 0 && text[0] == '-';
    if (negative) at = 1;
    if (at == length || length - at > 19) return false;
    /* 19 digits stay below 2^64: the range is checked once, at the end,
     * rather than with a division per digit. */
    uint64_t magnitude = 0;
    for (; at < length; at++) {
        unsigned digit = (unsigned char)text[at] - '0';
        if (digit > 9) return false;
        magnitude = magnitude * 10 + digit;
    }
    if (magnitude > (uint64_t)INT64_MAX + negative) return false;
    /* INT64_MIN's magnitude has no positive twin: negated one short, then one less. */
    *out = negative ? (magnitude ? -(int64_t)(magnitude - 1) - 1 : 0) : (int64_t)magnitude;
    return true;
}

static bool is_word(const char *text, size_t length, const char *word) {
    return length == strlen(word) && memcmp(text, word, length) == 0;
}

bool xPgParseDouble(const char *text, size_t length, double *out) {
    if (is_word(text, length, "NaN")) return *out = NAN, true;
    if (is_word(text, length, "Infinity")) return *out = INFINITY, true;
    if (is_word(text, length, "-Infinity")) return *out = -INFINITY, true;
    /* The grammar first, so that strtod sees only what PostgreSQL writes (no
     * hex, no "inf", no spaces): -?digits[.digits][e[+-]digits]. */
    char copy[512];
    if (length == 0 || length >= sizeof copy) return false;
    size_t at = text[0] == '-' ? 1 : 0, digits = 0;
    for (; at < length && text[at] >= '0' && text[at] <= '9'; at++) digits++;
    if (at < length && text[at] == '.')
        for (at++; at < length && text[at] >= '0' && text[at] <= '9'; at++) digits++;
    if (digits == 0) return false;
    if (at < length && (text[at] == 'e' || text[at] == 'E')) {
        at++;
        if (at < length && (text[at] == '+' || text[at] == '-')) at++;
        size_t exponent_digits = 0;
        for (; at < length && text[at] >= '0' && text[at] <= '9'; at++) exponent_digits++;
        if (exponent_digits == 0) return false;
    }
    if (at != length) return false;
    memcpy(copy, text, length);
    copy[length] = 0;
    *out = strtod(copy, NULL);
    return true;
}

bool xPgParseBool(const char *text, size_t length, bool *out) {
    if (length != 1 || (text[0] != 't' && text[0] != 'f')) return false;
    *out = text[0] == 't';
    return true;
}

size_t xPgFormatInt64(int64_t value, char *out) {
    /* By hand: snprintf's format parsing cost more than the query's own
     * bookkeeping for each integer parameter. The magnitude of INT64_MIN fits
     * in uint64_t only. */
    uint64_t magnitude = value < 0 ? 0 - (uint64_t)value : (uint64_t)value;
    char digits[20], *at = digits + sizeof digits;
    do {
        *--at = (char)('0' + magnitude % 10);
        magnitude /= 10;
    } while (magnitude);
    size_t n = 0;
    if (value < 0) out[n++] = '-';
    size_t count = (size_t)(digits + sizeof digits - at);
    memcpy(out + n, at, count);
    n += count;
    out[n] = 0;
    return n;
}

size_t xPgFormatDouble(double value, char *out) {
    if (isnan(value)) return (size_t)snprintf(out, 32, "NaN");
    if (isinf(value)) return (size_t)snprintf(out, 32, value > 0 ? "Infinity" : "-Infinity");
    return (size_t)snprintf(out, 32, "%.17g", value);
}
