/* http2.h — HTTP/2 (RFC 9113) on an xConn, all of it xKit's own: framing
 * (frame.h), HPACK (hpack.h), streams by id (stream_table.h), request checks
 * (request.h), and a connection in http2.c (the session), stream.c (streams,
 * their states and flow control) and respond.c (the bridge to the exchange
 * API), which share http2_internal.h. Other layers include only this. */
#ifndef XHTTP_HTTP2_HTTP2_H
#define XHTTP_HTTP2_HTTP2_H

#include <stdbool.h>
#include <stddef.h>

#include "xnet/connection.h"
#include "xhttp/core/field.h"

/** The client connection preface every HTTP/2 connection starts with. */
#define XHTTP2_PREFACE "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#define XHTTP2_PREFACE_LEN 24

/** An HTTP/1.1 request that asked for "Upgrade: h2c"; it becomes stream 1. */
typedef struct xHttp2Upgrade {
    const char *settings; /**< decoded HTTP2-Settings payload */
    size_t settings_len;
    xStr method, path, query;
    const xHttpField *headers;
    size_t num_headers;
} xHttp2Upgrade;

/** Switches conn to HTTP/2. conn->in[start, len) holds bytes already read
 *  (the preface, or what followed an upgraded request). upgrade is NULL for
 *  prior knowledge. Returns true once HTTP/2 owns the connection (even if it
 *  then ended it, say for a bad preface); false when HTTP/2 could not be set
 *  up and the connection is still the caller's. */
bool xHttp2Start(xConn *conn, size_t start, const xHttp2Upgrade *upgrade);

/** For tests and fuzzers: the first invariant of conn's HTTP/2 session that
 *  does not hold (windows within their bounds, the stream table agreeing
 *  with the streams and their states, each state agreeing with the response,
 *  each response body's source with its counts, held request bytes
 *  accounted), or NULL when all hold or conn does not speak HTTP/2. */
const char *xHttp2BrokenInvariant(const xConn *conn);

/** Decodes an HTTP2-Settings value (RFC 7540 §3.2.1: a SETTINGS payload in
 *  base64url, its padding left off) into out, which has room for cap bytes.
 *  Returns the payload's length, a whole number of settings, or -1 when the
 *  text is not base64url, does not fit, or cuts a setting short. */
long xHttp2DecodeSettings(xStr in, char *out, size_t cap);

#endif
