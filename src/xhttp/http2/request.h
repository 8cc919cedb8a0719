/* request.h — RFC 9113 §8 checks of a decoded request header block, as strict
 * as a conforming server must be: pseudo-headers (known, once each, before
 * every regular field, as the method requires), no connection-specific
 * fields, names and values as HPACK judged them, a well-formed content-length.
 * A block that fails is a malformed request: a stream error PROTOCOL_ERROR. */
#ifndef XHTTP_HTTP2_REQUEST_H
#define XHTTP_HTTP2_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "xhttp/http2/hpack.h"

/** What a valid request head says; views into the decoded fields. */
typedef struct xH2RequestHead {
    xStr method, scheme, path, authority;
    xStr protocol;          /* RFC 8441 extended CONNECT's :protocol; empty otherwise */
    int64_t content_length; /* -1 when absent */
} xH2RequestHead;

/** Checks a request's header block; connect_protocol: we announced
 *  SETTINGS_ENABLE_CONNECT_PROTOCOL, so :protocol may come with CONNECT.
 *  Fills head and returns true when the request is well-formed. The values'
 *  syntax is judged here (xHpackSyntaxVerdict): for fields no decoder judged. */
bool xH2CheckRequest(const xHpackField *fields, size_t count, bool connect_protocol, xH2RequestHead *head);

/** The same for fields from xHpackDecode or xQpackDecodeSection, whose verdicts
 *  carry their syntax's already (XHPACK_BAD_SYNTAX): a field sent by index is
 *  not judged again. */
bool xH2CheckHpackRequest(const xHpackField *fields, size_t count, bool connect_protocol,
                          xH2RequestHead *head);

/** Checks a trailer block: regular fields only, held to the same rules. */
bool xH2CheckTrailers(const xHpackField *fields, size_t count);

#endif
