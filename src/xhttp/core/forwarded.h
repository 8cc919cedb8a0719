/* forwarded.h — who the client is behind a trusted HTTP proxy: the
 * right-most address of X-Forwarded-For (or of RFC 7239 Forwarded's for=)
 * that is not itself a trusted proxy. A proxy appends the address it got
 * the request from, so only the entries our trusted proxies appended are
 * known true; a client may write anything to the left of them. */
#ifndef XHTTP_CORE_FORWARDED_H
#define XHTTP_CORE_FORWARDED_H

#include <stddef.h>

#include "xnet/address.h"
#include "xnet/proxy.h"
#include "xhttp/core/field.h"

/** The client for a request from peer carrying fields: peer itself unless
 *  trust holds it (a NULL trust holds no one); else, walking X-Forwarded-For
 *  from its last entry back (its fields in order, as one list; Forwarded's
 *  for= when there is no X-Forwarded-For), the first address trust does not
 *  hold. An entry that is not an address (garbage, "unknown", an obfuscated
 *  name) ends the walk at the hop before it, as does running out of entries:
 *  nothing a client writes can stand in for what a trusted proxy saw. The
 *  port is the entry's where it carries one, else 0; local_port is peer's. */
void xHttpForwardedClient(const xHttpField *fields, size_t num_fields, const xProxyTrust *trust,
                          const xNetAddr *peer, xNetAddr *client);

#endif
