/* accept.c — Accept-Encoding's q-values (accept.h). */
#include "xhttp/core/accept.h"

#include <string.h>

#include "xhttp/core/tokens.h"

static const char *skip_space(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    return p;
}

/* qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] ), as
 * thousandths; -1 when v is not one. */
static int parse_qvalue(const char *p, const char *end) {
    if (p == end || (*p != '0' && *p != '1')) return -1;
    int q = (*p++ - '0') * 1000, scale = 100, digits = 0;
    if (p < end && *p == '.') {
        for (p++; p < end && *p >= '0' && *p <= '9' && digits < 3; p++, digits++, scale /= 10)
            q += (*p - '0') * scale;
    }
    return p == end && q <= 1000 ? q : -1;
}

/* The q-value among one entry's parameters (";q=0.5"): 1000 when none is
 * given, -1 when one is malformed. */
static int entry_quality(const char *p, const char *end) {
    int q = 1000;
    while (p < end) {
        p = skip_space(p, end);
        if (p == end) break;
        if (*p != ';') return -1;
        p = skip_space(p + 1, end);
        const char *name = p;
        while (p < end && *p != '=' && *p != ';' && *p != ' ' && *p != '\t') p++;
        const char *name_end = p;
        p = skip_space(p, end);
        if (p == end || *p != '=') return -1;
        p = skip_space(p + 1, end);
        const char *value = p;
        while (p < end && *p != ';' && *p != ' ' && *p != '\t') p++;
        if (name_end - name == 1 && (*name == 'q' || *name == 'Q') && (q = parse_qvalue(value, p)) < 0)
            return -1;
    }
    return q;
}

int xHttpAcceptEncodingQuality(xStr field, const char *coding) {
    size_t coding_len = strlen(coding);
    int star = -1;
    const char *p = field.data, *end = p + field.len;
    while (p < end) {
        const char *entry_end = memchr(p, ',', (size_t)(end - p));
        if (!entry_end) entry_end = end;
        const char *name = skip_space(p, entry_end), *name_end = name;
        while (name_end < entry_end && xHttpIsTokenChar((unsigned char)*name_end)) name_end++;
        xStr n = {name, (size_t)(name_end - name)};
        p = entry_end + 1;
        if (n.len == 0) continue;
        int q = entry_quality(name_end, entry_end);
        if (q < 0) continue;
        if (n.len == coding_len && xHttpNameEquals(n, coding)) return q;
        if (n.len == 1 && *name == '*') star = q;
    }
    if (star >= 0) return star;
    return xHttpNameEquals((xStr){coding, coding_len}, "identity") ? 1000 : 0;
}
