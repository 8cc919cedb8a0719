/* static_internal.h — the static file handler's state, how a request's path
 * becomes a name under the root, and the files opened for it: kept open per
 * worker for cache_ms, shared by the responses that send them. Apart from
 * the handler so the fuzz harness can drive the path rules and both lookups
 * (openat2 and the component walk) on any path. */
#ifndef XHTTP_HANDLER_STATIC_INTERNAL_H
#define XHTTP_HANDLER_STATIC_INTERNAL_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include <xbase/event.h>
#include <xhttp/static.h>

#include "xhttp/core/date.h"
#include "xhttp/handler/static_coded.h"

typedef struct xStaticCache xStaticCache;

struct xHttpStatic {
    int root_fd;
    bool beneath; /* openat2 keeps every lookup under root; else the component walk */
    bool precompressed;
    char *index; /* NULL: none */
    char *cache_control;
    xHttpStaticType *types; /* the caller's, before the built-in table */
    size_t num_types;
    uint32_t cache_ms;      /* 0: every request opens its file */
    uint32_t cache_entries; /* per worker */
    size_t keep_file_max;   /* files up to this long are read into memory in a cache */
    size_t keep_bytes_max;  /* per worker */
    bool compress_on_the_fly;
    size_t compress_file_max;
    size_t compress_bytes_max; /* per worker; 0: compressed per request */
    xStaticCache *caches;      /* XSTATIC_MAX_CACHES slots, one claimed per worker loop */
};

/* Room for a decoded path, then the index name or a twin's suffix. */
#define XSTATIC_NAME_ROOM (PATH_MAX + NAME_MAX + 4)

/* ETag "\"<size>-<seconds>.<nanoseconds>-<coding>\"" in hex. */
#define XSTATIC_ETAG_ROOM 64

/** Opens root for files, and finds whether openat2 may look under it.
 *  XERR_SYS (errno set) when it is not a directory that can be opened. */
xErrno xHttpStaticOpenRoot(xHttpStatic *files, const char *root);

/** Turns raw, the path as the request has it (not yet percent-decoded), into
 *  a name under the root in name (XSTATIC_NAME_ROOM bytes, NUL-terminated):
 *  decoded, checked (xHttpStaticPathIsSafe), with the index added where raw
 *  names a directory (*directory_named). 0, or the answer instead: 404, or
 *  403 for a directory when there is no index. */
int xHttpStaticName(const xHttpStatic *files, xStr raw, char *name, size_t *len, bool *directory_named);

/** A name opened under the root, shared by the responses that send it. */
typedef struct xStaticFile {
    int status;         /**< 0: a regular file, open at fd; else 301 (a directory
                             named without its '/', when there is an index), 403, 404 */
    int fd;             /**< -1 unless status is 0 */
    struct stat st;     /**< when status is 0 */
    const char *coding; /**< the Content-Encoding of a twin; NULL: the file itself */
    char etag[XSTATIC_ETAG_ROOM];
    char last_modified[XHTTP_DATE_LEN + 1];
    char *head; /**< the answer's header lines, made once per opening:
                     the validators (and Vary, Cache-Control), then
                     Content-Type, Content-Encoding, Accept-Ranges */
    size_t head_len;
    size_t validators_len;                /**< the part of head a 304 or 416 repeats */
    size_t type_end;                      /**< where head's Content-Type line ends */
    const char *type;                     /**< the Content-Type value (files' or a static string) */
    const struct xHttpFilter *codings_of; /**< the filter codings was asked of; NULL: none yet */
    unsigned codings;                     /**< what codings_of would code this file's body in */
    char *content;                        /**< the file's st_size bytes, read when it entered a
                                               cache (static.h says which); NULL: read from fd */
    unsigned refs;
    uint64_t expires_ms; /* in a cache: reused until the loop's clock reaches this */
    uint32_t hash;
    bool directory_named;
    struct xStaticFile *next; /* its cache bucket */
    size_t name_len;
    char name[];
} xStaticFile;

/** Opens name (len bytes; directory_named as xHttpStaticName said), as the
 *  file itself (coding NULL) or as its twin in coding, with no cache: a new
 *  entry holding one reference; NULL when out of memory. */
xStaticFile *xHttpStaticOpen(const xHttpStatic *files, const char *name, size_t len, bool directory_named,
                             const char *coding);

/** The same from loop's worker's cache: the entry opened within cache_ms,
 *  else one opened now (and kept, while the cache has room); a reference
 *  for the caller. NULL when out of memory. */
xStaticFile *xHttpStaticGet(const xHttpStatic *files, xEventLoop *loop, const char *name, size_t len,
                            bool directory_named, const char *coding);

/** Reads f's st_size bytes into to; false when the file is not that long
 *  now (being rewritten) or cannot be read. */
bool xHttpStaticReadWhole(const xStaticFile *f, char *to);

/** Drops a reference to an xStaticFile (arg, so it may be a release
 *  callback); the last one closes the file. */
void xHttpStaticPut(void *file);

/** loop's worker's cache of compressed bodies (static_coded.h), made on
 *  its first use; NULL when files keeps none (compress_bytes_max 0), every
 *  slot is taken, or out of memory. */
xStaticCodedCache *xHttpStaticCodedCacheOf(const xHttpStatic *files, xEventLoop *loop);

/** Makes files' per-worker cache slots; XERR_NOMEM. */
xErrno xHttpStaticCachesInit(xHttpStatic *files);

/** Closes every file the caches keep and frees them, once no worker runs. */
void xHttpStaticCachesFree(xHttpStatic *files);

#endif
