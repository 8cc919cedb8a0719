/* fuzz_pg_text.c — the readers behind <xdb/pg.h>'s getters (src/xdb/pg_text.h)
 * on arbitrary bytes, as a column's text from the server, and the writers of
 * numeric parameters on numbers the input gives.
 *
 * The input, in its own heap block so any read past it is caught, goes to
 * each reader. Checked against a model written apart from them:
 *   - xPgParseInt64 accepts exactly -?[0-9]{1,19} within int64, with
 *     strtoll's value, and writing the value back gives the same digits
 *     (leading zeros and "-0" aside);
 *   - xPgParseDouble accepts exactly -?digits[.digits][e[+-]digits] (a digit
 *     somewhere before the exponent), NaN, Infinity and -Infinity, with
 *     strtod's value;
 *   - xPgParseBool accepts exactly "t" and "f";
 *   - the first 8 bytes as an int64 and as a double, written by
 *     xPgFormatInt64/xPgFormatDouble, read back to the same value. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"
#include "xdb/pg_text.h"

static bool digit(char c) { return c >= '0' && c <= '9'; }

static bool int_grammar(const char *s, size_t n) {
    size_t at = n && s[0] == '-';
    if (n == at || n - at > 19) return false;
    for (; at < n; at++)
        if (!digit(s[at])) return false;
    return true;
}

static bool double_grammar(const char *s, size_t n) {
    size_t at = n && s[0] == '-', digits = 0;
    while (at < n && digit(s[at])) at++, digits++;
    if (at < n && s[at] == '.')
        for (at++; at < n && digit(s[at]); at++) digits++;
    if (!digits) return false;
    if (at < n && (s[at] == 'e' || s[at] == 'E')) {
        size_t start = ++at;
        if (at < n && (s[at] == '+' || s[at] == '-')) start = ++at;
        while (at < n && digit(s[at])) at++;
        if (at == start) return false;
    }
    return at == n;
}

static void check_int(const char *s, size_t n, char *copy) {
    int64_t value = 42;
    bool ok = xPgParseInt64(s, n, &value);
    bool fits = false;
    long long model = 0;
    if (int_grammar(s, n)) {
        errno = 0;
        model = strtoll(copy, NULL, 10);
        fits = errno == 0;
    }
    FUZZ_ASSERT(ok == fits, "accepted %d, the model says %d", ok, fits);
    if (!ok) return;
    FUZZ_ASSERT(value == model, "%lld, not %lld", (long long)value, model);
    char out[24];
    size_t len = xPgFormatInt64(value, out);
    int64_t back;
    FUZZ_ASSERT(xPgParseInt64(out, len, &back) && back == value, "%s read back differently", out);
}

static void check_double(const char *s, size_t n, char *copy) {
    double value = 42;
    bool ok = xPgParseDouble(s, n, &value);
    bool words = (n == 3 && !memcmp(s, "NaN", 3)) || (n == 8 && !memcmp(s, "Infinity", 8)) ||
                 (n == 9 && !memcmp(s, "-Infinity", 9));
    bool model_ok = words || (n < 512 && double_grammar(s, n));
    FUZZ_ASSERT(ok == model_ok, "accepted %d, the model says %d", ok, model_ok);
    if (!ok || words) return;
    double model = strtod(copy, NULL);
    FUZZ_ASSERT(memcmp(&value, &model, sizeof value) == 0, "%.17g, not %.17g", value, model);
}

static void check_round_trips(const uint8_t *data, size_t size) {
    if (size < 8) return;
    int64_t i;
    double d;
    memcpy(&i, data, 8);
    memcpy(&d, data, 8);
    char out[32];
    int64_t i_back;
    size_t len = xPgFormatInt64(i, out);
    FUZZ_ASSERT(xPgParseInt64(out, len, &i_back) && i_back == i, "%s", out);
    double d_back;
    len = xPgFormatDouble(d, out);
    FUZZ_ASSERT(xPgParseDouble(out, len, &d_back), "%s refused", out);
    FUZZ_ASSERT(isnan(d) ? isnan(d_back) : d_back == d, "%s read back as %.17g", out, d_back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *bytes = malloc(size ? size : 1);
    char *copy = malloc(size + 1);
    if (size)
        memcpy(bytes, data, size);
    else
        bytes[0] = 0; /* never read: a length of 0 */
    memcpy(copy, data, size);
    copy[size] = 0;
    check_int(bytes, size, copy);
    check_double(bytes, size, copy);
    bool b = false;
    bool ok = xPgParseBool(bytes, size, &b);
    FUZZ_ASSERT(ok == (size == 1 && (bytes[0] == 't' || bytes[0] == 'f')), "bool accepted %d", ok);
    FUZZ_ASSERT(!ok || b == (bytes[0] == 't'), "bool value");
    check_round_trips(data, size);
    free(bytes);
    free(copy);
    return 0;
}
