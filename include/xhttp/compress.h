/* xhttp/compress.h — on-the-fly response compression (gzip and Brotli).
 *
 * Once xHttpServerCompress has turned it on, a response is compressed when
 * all of these hold: the request is not HEAD; the status has a body and is
 * not 206 (so never 1xx, 204, 206 or 304); the handler set a Content-Type on the
 * list, no Content-Encoding of its own and no Cache-Control: no-transform
 * (RFC 9111 §5.2.2.6: a proxied answer's is the upstream's); the client's Accept-Encoding
 * gives br or gzip a q-value above 0 (br wins a tie; a request without the
 * field gets the body as it is); and the body is at least min_size bytes
 * (xHttpResponseSend, xHttpResponseSendRef) or streamed (xHttpResponseWrite,
 * whose total size is unknown). Such a response, compressed or not because
 * of Accept-Encoding, carries "Vary: Accept-Encoding" (and so does a HEAD
 * whose GET would be such a response); a compressed one
 * carries "Content-Encoding" and its strong ETag, if the handler set one,
 * becomes weak (W/"…"), since the bytes differ from the identity ones.
 *
 * A whole body is compressed at once. A streamed one is compressed piece by
 * piece, each Write flushed (zlib's Z_SYNC_FLUSH, Brotli's FLUSH operation)
 * so the client can decode every piece as it comes.
 *
 * Memory: each worker keeps one zlib stream for whole gzip bodies, made on
 * first use (2^(gzip_window_bits+2) + 2^(gzip_mem_level+9) bytes: 256 KiB at
 * the defaults), and one 1 MiB block, made on first use, for the Brotli
 * encoder of each whole body, which lives for that call (an encoder that
 * needs more, at a high quality or for a large body, takes the rest from
 * malloc for the call). A streamed response holds its own compressor from its first Write
 * to its end (or the client's leaving): the same zlib size for gzip, and
 * for Brotli a ring buffer of 2^brotli_window_bits bytes plus hash tables
 * that grow with the quality. Compressed whole bodies are sent from a
 * buffer of the compressed size. */
#ifndef XHTTP_COMPRESS_H
#define XHTTP_COMPRESS_H

#include <stddef.h>

#include <xbase/errno.h>
#include <xhttp/server.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What this header declares is libxkit.so's API: exported, where the rest is hidden. */
#pragma GCC visibility push(default)

/** Content codings xHttpServerCompress may use. */
enum {
    XHTTP_COMPRESS_GZIP = 1u << 0,
    XHTTP_COMPRESS_BROTLI = 1u << 1,
};

/** Compression settings. Start from xHttpCompressOptionsInit's defaults;
 *  fields are only ever added at the end. */
typedef struct xHttpCompressOptions {
    size_t struct_size;     /**< the caller's sizeof, set by xHttpCompressOptionsInit */
    unsigned encodings;     /**< XHTTP_COMPRESS_* bits (both) */
    int gzip_level;         /**< zlib level, 1 (fastest) to 9 (6) */
    int brotli_quality;     /**< 0 (fastest) to 11 (4) */
    size_t min_size;        /**< whole bodies smaller than this go as they are (256) */
    const char *types;      /**< media types compressed, comma-separated, compared without
                                 parameters and case; a star for the subtype ("text/"
                                 then "*") covers a top-level type. NULL: every text
                                 type, application/json, application/javascript,
                                 application/xml, application/xhtml+xml, application/rss+xml,
                                 application/atom+xml, application/ld+json,
                                 application/manifest+json, application/wasm, image/svg+xml,
                                 image/x-icon, font/ttf, font/otf. Copied. */
    int gzip_window_bits;   /**< zlib's window, 9 to 15 (15) */
    int gzip_mem_level;     /**< zlib's hash memory, 1 to 9 (8) */
    int brotli_window_bits; /**< Brotli's window (lgwin), 10 to 24 (18) */
} xHttpCompressOptions;

/** Fills the first size bytes of opts with the defaults noted above; size is
 *  the caller's sizeof(xHttpCompressOptions). Call xHttpCompressOptionsInit. */
void xHttpCompressOptionsInitSized(xHttpCompressOptions *opts, size_t size);

/** Fills opts with the defaults noted above. */
static inline void xHttpCompressOptionsInit(xHttpCompressOptions *opts) {
    xHttpCompressOptionsInitSized(opts, sizeof *opts);
}

/** Turns on-the-fly compression on for every worker of server, as opts says
 *  (copied; NULL: the defaults). Before the server runs, at most once.
 *  Returns XERR_INVALID for a setting out of range or no encoding,
 *  XERR_STATE when running or already on, XERR_NOMEM. */
xErrno xHttpServerCompress(xHttpServer *server, const xHttpCompressOptions *opts);

/** Adds a route like xHttpServerRoute whose responses are never compressed
 *  (already compressed data, or bodies that must reach the client byte for
 *  byte). Same arguments, ownership and errors. */
xErrno xHttpServerRouteUncompressed(xHttpServer *server, const char *spec, xHttpHandler handler, void *arg);

/** Keeps this response's body as it is. Before the first Send or Write;
 *  later it changes nothing. */
void xHttpResponseNoCompress(xHttpResponse *res);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
