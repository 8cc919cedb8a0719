/* http1_parser.h — the strict, zero-copy HTTP/1.1 request and response parser (RFC 9112).
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
    int state;             /* private */
    uint64_t remaining;    /* private: payload bytes left in this chunk */
    size_t line_bytes;     /* private: bytes in the current size/ext/trailer line */
    size_t trailer_bytes;  /* private: total trailer bytes so far */
    bool stop_at_trailers; /**< in: stop after the last chunk's line instead of
                                reading the trailer section (xHttp1ParseTrailers) */
    bool at_trailers;      /**< out: stopped there; the trailer section follows */
    bool done;             /**< true once the last chunk and trailers ended */
    int error_status;      /**< on error: 400 (framing) or 431 (trailers too big) */
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

/** How a response's body is framed (RFC 9112 §6.3). */
typedef enum xHttp1BodyKind {
    XHTTP1_BODY_NONE,        /**< 1xx, 204, 304, the answer to HEAD, or Content-Length: 0 */
    XHTTP1_BODY_LENGTH,      /**< content_length bytes */
    XHTTP1_BODY_CHUNKED,     /**< Transfer-Encoding: chunked */
    XHTTP1_BODY_UNTIL_CLOSE, /**< neither field: the body ends when the connection does */
} xHttp1BodyKind;

/** A parsed response head (what an upstream sent). Views point into the
 *  parsed buffer. */
typedef struct xHttp1Response {
    int minor_version;      /**< 0 or 1 */
    int status;             /**< 100 to 599 */
    xStr reason;            /**< the reason phrase, possibly empty */
    xHttp1Header *headers;  /**< caller-provided array (set before parsing) */
    size_t num_headers;     /**< out: fields stored in headers */
    int64_t content_length; /**< -1 when absent */
    xHttp1BodyKind body;    /**< how the body that follows is framed */
    bool keep_alive;        /**< the connection may carry another request after this one */
    const char *error;      /**< on XHTTP1_ERROR: what was wrong, in words */
} xHttp1Response;

/** Parses one response head from buf[0, len): the status line and fields,
 *  held to the request parser's field grammar. Content-Length repeated or
 *  beside Transfer-Encoding, Transfer-Encoding other than one "chunked", or
 *  on HTTP/1.0, a version other than 1.0/1.1, a status outside 100-599 or a
 *  bare LF are errors. head_request: the request was HEAD (no body follows
 *  whatever the fields say). limits->max_head bounds the head,
 *  max_headers the fields; max_request_line is not used. Returns the head's
 *  length, XHTTP1_INCOMPLETE, or XHTTP1_ERROR with res->error set.
 *  prev_len: as for xHttp1ParseRequest. A 1xx head is returned like any
 *  other: the caller reads the next head after it. */
int xHttp1ParseResponse(const char *buf, size_t len, size_t prev_len, xHttp1Response *res,
                        const xHttp1Limits *limits, bool head_request);

/** Parses a trailer section (after a chunked body's last chunk, where
 *  xHttp1ChunkedDecode stopped with at_trailers): field lines and the empty
 *  line that ends them, in buf[0, len). Up to max_fields go into fields
 *  (*num_fields of them), views into buf. Returns the section's length,
 *  XHTTP1_INCOMPLETE, or XHTTP1_ERROR (a malformed line, more fields, or
 *  more than max_bytes without the end). */
int xHttp1ParseTrailers(const char *buf, size_t len, xHttp1Header *fields, size_t max_fields,
                        size_t *num_fields, size_t max_bytes);

#endif
