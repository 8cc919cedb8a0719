/* accept.c — Accept-Encoding qvalues, read in place. */
#include "xhttp/core/accept.h"

#include <stdbool.h>
#include <string.h>

#include "xhttp/core/tokens.h"

static bool is_space(char c) { return c == ' ' || c == '\t'; }

static xStr trim(const char *p, const char *end) {
    while (p < end && is_space(*p)) p++;
    while (end > p && is_space(end[-1])) end--;
    return (xStr){p, (size_t)(end - p)};
}

/* RFC 9110 §12.4.2: qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] ).
 * Returns the thousandths, or -1 when v is not a qvalue. */
static int parse_qvalue(xStr v) {
    if (v.len == 0 || v.len > 5 || (v.data[0] != '0' && v.data[0] != '1')) return -1;
    if (v.len > 1 && v.data[1] != '.') return -1;
    int q = (v.data[0] - '0') * 1000, scale = 100;
    for (size_t i = 2; i < v.len; i++, scale /= 10) {
        if (v.data[i] < '0' || v.data[i] > '9') return -1;
        q += (v.data[i] - '0') * scale;
    }
    return q > 1000 ? -1 : q;
}

/* The qvalue of one entry's parameters, p just after its first ';' ("q=0.5"):
 * 1000 when none is q, -1 when q is malformed or a parameter is empty
 * ("gzip;", "gzip;;q=1"). */
static int entry_quality(const char *p, const char *end) {
    int q = 1000;
    for (;;) {
        const char *semi = memchr(p, ';', (size_t)(end - p));
        const char *param_end = semi ? semi : end;
        xStr param = trim(p, param_end);
        if (param.len == 0) return -1; /* a ';' promises a parameter and gives none */
        if (param.data[0] == 'q' || param.data[0] == 'Q') {
            xStr rest = trim(param.data + 1, param.data + param.len);
            if (rest.len == 0) return -1; /* "q" without its value */
            if (rest.data[0] == '=' && (q = parse_qvalue(trim(rest.data + 1, rest.data + rest.len))) < 0)
                return -1;
        }
        if (!semi) return q;
        p = semi + 1;
    }
}

void xHttpAcceptQualities(xStr field, const char *const *codings, size_t n, int *q) {
    int any = XHTTP_Q_UNSTATED;
    for (size_t i = 0; i < n; i++) q[i] = XHTTP_Q_UNSTATED;
    const char *p = field.data, *end = field.data + field.len;
    while (p < end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *entry_end = comma ? comma : end;
        const char *semi = memchr(p, ';', (size_t)(entry_end - p));
        xStr name = trim(p, semi ? semi : entry_end);
        int entry_q = !name.len ? -1 : semi ? entry_quality(semi + 1, entry_end) : 1000;
        if (entry_q >= 0) {
            if (name.len == 1 && name.data[0] == '*' && any == XHTTP_Q_UNSTATED) any = entry_q;
            for (size_t i = 0; i < n; i++)
                if (q[i] == XHTTP_Q_UNSTATED && name.len == strlen(codings[i]) &&
                    xHttpSameLower(name.data, codings[i], name.len))
                    q[i] = entry_q;
        }
        p = comma ? comma + 1 : end;
    }
    for (size_t i = 0; i < n; i++)
        if (q[i] == XHTTP_Q_UNSTATED) q[i] = any;
}

int xHttpAcceptQuality(xStr field, const char *coding) {
    int q;
    xHttpAcceptQualities(field, &coding, 1, &q);
    return q;
}
