/* deflate.h — permessage-deflate (RFC 7692): choosing its parameters from a
 * client's offers, and compressing and inflating whole messages with zlib. */
#ifndef XHTTP_WEBSOCKET_DEFLATE_H
#define XHTTP_WEBSOCKET_DEFLATE_H

#include <stdbool.h>
#include <stddef.h>

#include <xbase/str.h>

/** What both sides agreed on. */
typedef struct xWsDeflateParams {
    int server_window_bits; /**< our compressor's window (9..15) */
    int client_window_bits; /**< the client's window, so our inflater's (8..15) */
    bool server_no_takeover;
    bool client_no_takeover;
} xWsDeflateParams;

/** Picks the first permessage-deflate offer in extensions (the
 *  Sec-WebSocket-Extensions values, joined by ", ") that the server can
 *  honour with windows of at most max_bits. Writes the response's extension
 *  line into out (cap bytes) and returns true; false when no offer fits. */
bool xWsDeflateNegotiate(xStr extensions, int max_bits, xWsDeflateParams *params, char *out, size_t cap);

typedef struct xWsDeflate xWsDeflate;

/** A connection's compressor and inflater; they are set up on first use.
 *  NULL on allocation failure. */
xWsDeflate *xWsDeflateCreate(const xWsDeflateParams *params, int level, int mem_level);
void xWsDeflateDestroy(xWsDeflate *d);

/** Compresses a whole message; *out points into d's buffer (valid until
 *  the next call). False on failure. */
bool xWsDeflateCompress(xWsDeflate *d, const void *data, size_t len, const char **out, size_t *out_len);

/** Inflates a whole message of at most max bytes. Returns 0 with *out
 *  pointing into d's buffer, 1009 when the message is bigger than max, 1007
 *  when it is not valid deflate data, 1011 when memory ran out. */
int xWsDeflateInflate(xWsDeflate *d, const char *data, size_t len, size_t max, char **out, size_t *out_len);

#endif
