/* xhttp/static.h — serving files from a directory.
 *
 *   xHttpStaticConf conf;
 *   xHttpStaticConfInit(&conf);
 *   conf.root = "/srv/www";
 *   xHttpStatic *files;
 *   if (xHttpStaticCreate(&conf, &files) != XOK) ...;
 *   xHttpServerRoute(server, "GET /static/" "*", xHttpStaticHandler, files);
 *
 * The file is what the route's final "*" captures ("/static/css/a.css" →
 * root/css/a.css), or the whole path without its leading '/' on a route
 * without one. It is percent-decoded ("%2e", "%2f" and the like become what
 * they name, then face the same rules); a path with a "..", "." or empty
 * segment or a "%00" is 404, and so is a symbolic link that leads out of
 * root: openat2's RESOLVE_BENEATH (Linux 5.6) checks every lookup, and where
 * the kernel or a seccomp filter refuses openat2, no symbolic link is
 * followed at all. A file that may not be read, or is not a regular file, is
 * 403; neither answer says more than its status.
 *
 * What each worker keeps, for cache_ms (1 s), is the open file and its
 * metadata, as nginx's open_file_cache does, and the bytes of a small file
 * (keep_file_max, 16 KiB; at most keep_bytes_max, 4 MiB, per worker): a file
 * replaced or rewritten on disk is served new within that, at once with
 * cache_ms 0. A larger file is sent from the file as the client takes it
 * (xHttpResponseSendFile), never read into memory whole; one rewritten in
 * place meanwhile is read as it now is, under the length first seen (a
 * shorter one cuts the response short).
 *
 * Why small files are kept: over HTTP/2 and TLS their bytes are copied
 * through memory anyway (into DATA frames, into records), and a read(2) per
 * response cost more than the copy it saved, the file being in the page
 * cache. Plain HTTP/1.1 sends every file with sendfile(2), which copies
 * nothing.
 *
 * Responses carry Content-Type (from the name's extension), Last-Modified, a
 * strong ETag (the size and the modification time in nanoseconds), and
 * Accept-Ranges. If-None-Match (weak comparison) and If-Modified-Since (the
 * exact Last-Modified text, as nginx does by default) answer 304; one "bytes"
 * range in Range answers 206, or 416 when it starts beyond the end; several
 * ranges, or a Range that If-Range does not match, get the whole file.
 *
 * Compression: a twin (NAME.br, NAME.gz) the client takes is sent as it is.
 * Without one, where the server compresses (<xhttp/compress.h>: its types,
 * codings and min_size) and compress_on_the_fly is on, a file of up to
 * compress_file_max (1 MiB) is compressed in the coding the client prefers
 * (Brotli on a tie), once: each worker keeps the compressed bytes
 * (compress_bytes_max, 4 MiB, the least recently used dropped first), keyed
 * by the file's identity (device, inode, size, modification time), so a
 * changed file is compressed anew once the handler sees it changed (within
 * cache_ms). The answer has Content-Encoding, the compressed Content-Length,
 * Vary: Accept-Encoding and the file's ETag made weak (W/"…": the bytes are
 * not the file's), no Accept-Ranges; HEAD gets the same head and 304 the
 * weak ETag. A request with a Range that applies gets the file's own bytes
 * (206 or 416) as without compression: ranges are of the file, not of one
 * compression of it. A file that compression does not shrink goes as it is
 * (remembered with the kept bytes, not tried per request); a route added
 * with xHttpServerRouteUncompressed compresses nothing. A larger file is
 * sent as it is, from the file: kept, it would crowd out many small ones,
 * and compressed per request it costs about 25 us of CPU per KiB (gzip,
 * level 6; 14 for Brotli, quality 4) where sending it costs 0.3 over h2c and
 * less by sendfile. A large asset is better compressed ahead of time into a
 * twin. */
#ifndef XHTTP_STATIC_H
#define XHTTP_STATIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <xbase/errno.h>
#include <xhttp/server.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What this header declares is libxkit.so's API: exported, where the rest is hidden. */
#pragma GCC visibility push(default)

/** A media type for files whose name ends in "." extension. */
typedef struct xHttpStaticType {
    const char *extension; /**< without the '.', compared without regard to case: "md" */
    const char *type;      /**< the Content-Type: "text/markdown; charset=utf-8" */
} xHttpStaticType;

/** Static file settings. Start from xHttpStaticConfInit's defaults; fields
 *  are only ever added at the end. */
typedef struct xHttpStaticConf {
    size_t struct_size;           /**< the caller's sizeof, set by xHttpStaticConfInit */
    const char *root;             /**< the directory served (no default: required);
                                       opened once, by xHttpStaticCreate */
    const char *index;            /**< served for a path ending in '/' ("index.html");
                                       a directory named without its '/' is redirected
                                       there (301). NULL: directories are 403 */
    bool precompressed;           /**< NAME.br and NAME.gz, when present and not older
                                       than NAME (in whole seconds), are served with
                                       Content-Encoding to a client whose
                                       Accept-Encoding prefers them, and every answer
                                       says "Vary: Accept-Encoding" (true) */
    const char *cache_control;    /**< a Cache-Control value for every file, e.g.
                                       "max-age=3600"; NULL: none (NULL) */
    const xHttpStaticType *types; /**< media types consulted before the built-in
                                       table (html, css, js, json, svg, png, jpg,
                                       webp, woff2, wasm, mp4, …; anything else is
                                       application/octet-stream); copied (NULL) */
    size_t num_types;             /**< how many types has (0) */
    uint32_t cache_ms;            /**< how long each worker keeps a file it opened (its
                                       descriptor, status and validators, or that it is
                                       missing) for the requests that follow, so a file
                                       replaced on disk is served new within this; 0:
                                       every request opens its file (1000) */
    uint32_t cache_entries;       /**< the most files each worker keeps open (1024) */
    size_t keep_file_max;         /**< a file kept open is read into memory too when it
                                       is at most this long, and served from there
                                       (16384); 0: never */
    size_t keep_bytes_max;        /**< the most bytes of files each worker keeps in
                                       memory (4 MiB) */
    bool compress_on_the_fly;     /**< where the server compresses (xHttpServerCompress,
                                       on a route that does not bypass it), a file of a
                                       type it compresses, from its min_size to
                                       compress_file_max bytes, with no twin the client
                                       takes, is sent compressed as the client prefers
                                       (true); false: the bytes on disk, or a twin, as
                                       also where cache_control says no-transform */
    size_t compress_file_max;     /**< the largest file compressed on the fly; a larger
                                       one is sent as it is, from the file (1 MiB) */
    size_t compress_bytes_max;    /**< the most bytes of compressed files each worker
                                       keeps, so a file is compressed once rather than
                                       per request (4 MiB); 0: per request */
} xHttpStaticConf;

/** Fills the first size bytes of conf with the defaults noted above; size is
 *  the caller's sizeof(xHttpStaticConf). Call xHttpStaticConfInit instead. */
void xHttpStaticConfInitSized(xHttpStaticConf *conf, size_t size);

/** Fills conf with the defaults noted above. */
static inline void xHttpStaticConfInit(xHttpStaticConf *conf) {
    xHttpStaticConfInitSized(conf, sizeof *conf);
}

/** A directory being served; read-only once made, so one serves every worker. */
typedef struct xHttpStatic xHttpStatic;

/** Opens conf->root and keeps what conf says (its strings are copied), for
 *  xHttpStaticHandler. XERR_INVALID when root is missing or the index is not
 *  a file name (empty, a '/' in it, longer than NAME_MAX); XERR_SYS (errno set) when root cannot be opened as
 * a directory; XERR_NOMEM. */
xErrno xHttpStaticCreate(const xHttpStaticConf *conf, xHttpStatic **out);

/** Frees what xHttpStaticCreate made, after the server that used it. */
void xHttpStaticDestroy(xHttpStatic *files);

/** The handler to route to, with the xHttpStatic as its arg: route it for
 *  GET, which brings HEAD; any other method it is routed with gets 405. */
void xHttpStaticHandler(xHttpRequest *req, xHttpResponse *res, void *arg);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
