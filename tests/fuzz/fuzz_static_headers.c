/* fuzz_static_headers.c — the request fields the static file handler reads:
 * Range (xHttpStaticParseRange), If-None-Match (xHttpStaticEtagListMatches)
 * and Accept-Encoding (xHttpAcceptQuality, xHttpAcceptQualities).
 *
 * Input: bytes 0-7, little-endian, the file's size (taken modulo 2^40, and
 * some inputs land on 0); the rest, in its own heap block, is the field
 * value given to every reader. Checked:
 *   - a Range of one part lies within the file (start + len <= size, len >= 1),
 *     a file of 0 bytes never has one, and the reader never writes its
 *     outputs unless it answers PART;
 *   - a list matches its own first entity-tag (when it has a well-formed
 *     one), and "*" matches anything;
 *   - every qvalue is XHTTP_Q_UNSTATED or 0 to 1000, and the qualities read
 *     at once are those read one by one. */
#include <string.h>

#include "fuzz_check.h"
#include "xhttp/core/accept.h"
#include "xhttp/handler/static_headers.h"

static void check_range(xStr field, uint64_t size) {
    uint64_t start = 12345, len = 67890;
    xHttpStaticRange r = xHttpStaticParseRange(field, size, &start, &len);
    FUZZ_ASSERT(r == XSTATIC_RANGE_WHOLE || r == XSTATIC_RANGE_PART || r == XSTATIC_RANGE_UNSATISFIABLE, "%d",
                (int)r);
    if (r != XSTATIC_RANGE_PART) {
        FUZZ_ASSERT(start == 12345 && len == 67890, "outputs written for %d", (int)r);
        return;
    }
    FUZZ_ASSERT(size > 0 && len >= 1 && start < size && len <= size - start, "%llu+%llu of %llu",
                (unsigned long long)start, (unsigned long long)len, (unsigned long long)size);
}

static void check_etags(xStr field) {
    bool any = xHttpStaticEtagListMatches(field, xStrFromC("\"x\""));
    const char *p = field.data, *end = field.data + field.len;
    while (p < end && (*p == ' ' || *p == '\t' || *p == ',')) p++;
    if (p < end && *p == '*') FUZZ_ASSERT(any, "\"*\" first did not match");
    if (end - p >= 2 && p[0] == 'W' && p[1] == '/') p += 2;
    if (p < end && *p == '"') {
        const char *close = memchr(p + 1, '"', (size_t)(end - p - 1));
        if (close) {
            xStr first = {p, (size_t)(close - p + 1)};
            FUZZ_ASSERT(xHttpStaticEtagListMatches(field, first), "its own first tag did not match");
        }
    }
}

static void check_qualities(xStr field) {
    static const char *const codings[] = {"br", "gzip", "identity", "*"};
    int q[4];
    xHttpAcceptQualities(field, codings, 4, q);
    for (int i = 0; i < 4; i++) {
        FUZZ_ASSERT(q[i] == XHTTP_Q_UNSTATED || (q[i] >= 0 && q[i] <= 1000), "%s: %d", codings[i], q[i]);
        FUZZ_ASSERT(q[i] == xHttpAcceptQuality(field, codings[i]), "%s: at once %d, alone %d", codings[i],
                    q[i], xHttpAcceptQuality(field, codings[i]));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 8) return 0;
    uint64_t file_size = 0;
    for (int i = 7; i >= 0; i--) file_size = file_size << 8 | data[i];
    file_size &= (1ull << 40) - 1;
    if (data[0] & 1) file_size &= 0xff; /* small files, 0 included, are where edges are */
    size_t n = size - 8;
    char *copy = malloc(n ? n : 1);
    FUZZ_ASSERT(copy != NULL, "out of memory");
    memcpy(copy, data + 8, n);
    xStr field = {copy, n};
    check_range(field, file_size);
    check_etags(field);
    check_qualities(field);
    free(copy);
    return 0;
}
