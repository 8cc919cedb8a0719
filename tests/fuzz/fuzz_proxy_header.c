/* fuzz_proxy_header.c — the PROXY protocol header reader (src/xnet/proxy.h)
 * on arbitrary bytes, as a load balancer's (or an attacker's) first bytes.
 *
 * The input, in its own heap block so any read past it is caught, is read
 * whole and then again as every prefix of it, as bytes arriving across
 * reads would be. Checked:
 *   - a verdict is one of the four; XPROXY_OK's length is within the bytes
 *     given and the limits (107 bytes for v1, 16 + 512 for v2), and
 *     XPROXY_MALFORMED says why;
 *   - a prefix never decides differently from the whole, except by waiting:
 *     a prefix that says OK, NONE or MALFORMED says what the whole says
 *     (with the same length), and the whole never waits where a prefix
 *     did not;
 *   - an address taken from a header is IPv4 or IPv6, and a v1 header ends
 *     with CRLF. */
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "fuzz_check.h"
#include "xnet/proxy.h"

static void check_one(const uint8_t *data, size_t len, xProxyVerdict v, const xProxyHeader *h) {
    FUZZ_ASSERT(v == XPROXY_MORE || v == XPROXY_OK || v == XPROXY_NONE || v == XPROXY_MALFORMED, "verdict %d",
                v);
    if (v == XPROXY_MALFORMED) FUZZ_ASSERT(h->error && *h->error, "no reason given");
    if (v != XPROXY_OK) return;
    FUZZ_ASSERT(h->len > 0 && h->len <= len && h->len <= XPROXY_MAX, "length %zu of %zu", h->len, len);
    FUZZ_ASSERT(h->version == 1 || h->version == 2, "version %d", h->version);
    if (h->version == 1)
        FUZZ_ASSERT(h->len <= XPROXY_V1_MAX && data[h->len - 2] == '\r' && data[h->len - 1] == '\n',
                    "v1 header of %zu bytes not ending in CRLF", h->len);
    if (h->has_address)
        FUZZ_ASSERT(h->source.family == AF_INET || h->source.family == AF_INET6, "family %u",
                    h->source.family);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *copy = malloc(size ? size : 1);
    FUZZ_ASSERT(copy, "malloc");
    memcpy(copy, data, size);
    xProxyHeader whole;
    xProxyVerdict verdict = xProxyParse(copy, size, &whole);
    check_one(copy, size, verdict, &whole);
    for (size_t n = 0; n < size; n++) {
        uint8_t *prefix = malloc(n ? n : 1);
        FUZZ_ASSERT(prefix, "malloc");
        memcpy(prefix, copy, n);
        xProxyHeader part;
        xProxyVerdict v = xProxyParse(prefix, n, &part);
        check_one(prefix, n, v, &part);
        if (v != XPROXY_MORE) {
            FUZZ_ASSERT(v == verdict, "%zu bytes said %d, all %zu said %d", n, v, size, verdict);
            if (v == XPROXY_OK)
                FUZZ_ASSERT(part.len == whole.len, "lengths %zu and %zu", part.len, whole.len);
        }
        free(prefix);
        if (v != XPROXY_MORE) break; /* decided: longer prefixes decide the same */
    }
    free(copy);
    return 0;
}
