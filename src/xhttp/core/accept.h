/* accept.h — how much a request's Accept-Encoding wants a content coding. */
#ifndef XHTTP_CORE_ACCEPT_H
#define XHTTP_CORE_ACCEPT_H

#include <xbase/str.h>

/** The quality, in thousandths (0 to 1000), that an Accept-Encoding field
 *  value gives coding (RFC 9110 §12.5.3): the entry naming it (case-
 *  insensitively), else the "*" entry's, else 1000 for "identity" (always
 *  acceptable unless refused) and 0 for anything else. An entry without
 *  "q=" has 1000; an entry whose q-value is malformed counts as absent.
 *  A request without the field is the caller's to judge. */
int xHttpAcceptEncodingQuality(xStr field, const char *coding);

#endif
