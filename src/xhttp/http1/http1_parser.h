/* http1_parser.h — the strict, zero-copy HTTP/1.1 request parser (RFC 9112).
 *
 * Stateless for the request head, picohttpparser-style: the caller keeps the
 * bytes, the parser returns views into them and never allocates. A caller that
 * got XHTTP1_INCOMPLETE passes the previous length back as prev_len so the
 * completeness check resumes where it stopped instead of rescanning.
 * Chunked bodies are decoded by a small resumable state machine, in place. */
#ifndef XHTTP_HTTP1_HTTP1_PARSER_H
#define XHTTP_HTTP1_HTTP1_PARSER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <xbase/str.h>

#include "xhttp/core/field.h"

#define XHTTP1_INCOMPLETE (-2)
#define XHTTP1_ERROR (-1)

/** One header field; both sides point into the caller's buffer. The value
 *  has leading and trailing whitespace removed. */
typedef xHttpField xHttp1Header;

/** Limits the parser enforces; exceeding one yields the status noted. */
typedef struct xHttp1Limits {
    size_t max_request_line; /**< bytes in the request line, CRLF excluded → 414 */
    size_t max_head;         /**< bytes in the whole head, CRLFs included → 431 */
    size_t max_headers;      /**< number of header fields → 431; ≤ the array capacity */
} xHttp1Limits;

/** The parsed head. Views point into the parsed buffer. */
typedef struct xHttp1Request {
    xStr method;
    xStr target;           /**< the raw request-target as sent */
    xStr path;             /**< origin-form path ("/a/b"), also for absolute-form
                                targets; "*" for OPTIONS *; never the query */
    xStr query;            /**< bytes after '?', without it; empty when absent */
    int minor_version;     /**< 0 or 1 (HTTP/1.0 or HTTP/1.1) */
    xHttp1Header *headers; /**< caller-provided array (set before parsing) */
    size_t num_headers;    /**< out: fields stored in headers */

    /* Framing and semantics derived from the headers, validated per RFC 9112. */
    int64_t content_length; /**< -1 when absent */
    bool chunked;           /**< Transfer-Encoding: chunked */
    bool keep_alive;        /**< 1.1 unless "close"; 1.0 only with "keep-alive" */
    bool expect_continue;   /**< Expect: 100-continue */
    bool upgrade;           /**< Connection lists "upgrade" and Upgrade is present */
    xStr host;              /**< the Host value; empty when absent (1.0 only) */

    int error_status; /**< on XHTTP1_ERROR: 400, 414, 431, 501 or 505 */
} xHttp1Request;

/** Parses one request head from buf[0, len).
 *  Returns the head's length (request line, fields and the empty line) when
 *  complete, XHTTP1_INCOMPLETE when more bytes are needed, or XHTTP1_ERROR with
 *  req->error_status set. A head still incomplete after max_request_line bytes
 *  without a line end is a 414; after max_head bytes, a 431.
 *  prev_len: the len of the previous INCOMPLETE call on the same bytes, or 0. */
int xHttp1ParseRequest(const char *buf, size_t len, size_t prev_len, xHttp1Request *req,
                       const xHttp1Limits *limits);

/** Resumable decoder for a chunked body (RFC 9112 §7.1), extensions and
 *  trailer fields accepted and discarded. Zero-initialise before the body. */
typedef struct xHttp1Chunked {
    int state;            /* private */
    uint64_t remaining;   /* private: payload bytes left in this chunk */
    size_t line_bytes;    /* private: bytes in the current size/ext/trailer line */
    size_t trailer_bytes; /* private: total trailer bytes so far */
    bool done;            /**< true once the last chunk and trailers ended */
    int error_status;     /**< on error: 400 (framing) or 431 (trailers too big) */
} xHttp1Chunked;

/** Decodes in[0, in_len), appending payload to out. out may alias in (or lie
 *  before it): the payload never overtakes the input, so decoding in place is
 *  safe. Stops right after the final CRLF when done.
 *  Returns the bytes of input consumed, or XHTTP1_ERROR with error_status set.
 *  *out_len receives the payload bytes written by this call.
 *  max_line bounds a chunk-size line with its extensions and each trailer
 *  line; max_trailers bounds the trailer section in total. */
ssize_t xHttp1ChunkedDecode(xHttp1Chunked *dec, const char *in, size_t in_len, char *out, size_t *out_len,
                            size_t max_line, size_t max_trailers);

#endif
