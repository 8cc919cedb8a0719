/* accept.h — how much a client wants a content coding: the qvalues of an
 * Accept-Encoding field (RFC 9110 §12.5.3), read in place. */
#ifndef XHTTP_CORE_ACCEPT_H
#define XHTTP_CORE_ACCEPT_H

#include <stddef.h>
#include <string.h>

#include <xbase/str.h>

/** What a field says of a coding it does not name, nor "*". */
#define XHTTP_Q_UNSTATED (-1)

/** The qvalue, in thousandths (0 to 1000), that the Accept-Encoding value
 *  field gives coding (lower case, e.g. "br"): its own entry's, else the "*"
 *  entry's, else XHTTP_Q_UNSTATED. Names compare without regard to case; an
 *  entry without "q=" is 1000; an entry whose q is malformed counts as absent,
 *  so a client's typo never selects a coding it did not ask for. */
int xHttpAcceptQuality(xStr field, const char *coding);

/** The same for n codings at once, in one reading of field: q[i] is what
 *  xHttpAcceptQuality(field, codings[i]) would return. */
void xHttpAcceptQualities(xStr field, const char *const *codings, size_t n, int *q);

/** xHttpAcceptQuality with an unstated coding judged as RFC 9110 §12.5.3
 *  does: "identity" is acceptable (1000) unless refused, anything else is
 *  not (0). A request without the field is the caller's to judge. */
static inline int xHttpAcceptEncodingQuality(xStr field, const char *coding) {
    int q = xHttpAcceptQuality(field, coding);
    if (q != XHTTP_Q_UNSTATED) return q;
    return strcmp(coding, "identity") == 0 ? 1000 : 0;
}

#endif
