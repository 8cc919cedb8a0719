/* preface.h — what the proxy sends a new upstream connection first: the
 * PROXY protocol header for the front's client (preface.c). Nothing outside
 * src/xhttp/proxy/ includes this. */
#ifndef XHTTP_PROXY_PREFACE_H
#define XHTTP_PROXY_PREFACE_H

#include <stddef.h>
#include <stdint.h>

#include <xhttp/response.h>

#include "xnet/proxy.h"

/** Writes a PROXY header of version (1 or 2) for the client of res's
 *  request into out (XPROXY_WRITE_MAX bytes): its address and port as the
 *  front knows them (a trusted PROXY header at the front already applied),
 *  to the address and port it reached. Returns the length; 0 when version
 *  is neither. */
size_t xProxyPreface(xHttpResponse *res, int version, uint8_t *out);

#endif
