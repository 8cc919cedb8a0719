/* static_coded.h — the compressed bodies of static files one worker keeps:
 * each file's bytes coded once (gzip or Brotli) and sent by reference to
 * every request for it, keyed by the file's identity (device, inode, size,
 * modification time in nanoseconds: what its ETag says) and the coding, so
 * a file changed on disk is coded anew as soon as the handler sees it
 * changed. Bounded in bytes, the least recently used dropped first. Knows
 * nothing of HTTP, for its unit test. */
#ifndef XHTTP_HANDLER_STATIC_CODED_H
#define XHTTP_HANDLER_STATIC_CODED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

/** Which file, in which version, coded how. */
typedef struct xStaticCodedKey {
    uint64_t device, inode, size;
    int64_t mtime_sec, mtime_nsec;
    unsigned coding; /**< an XHTTP_COMPRESS_* bit */
} xStaticCodedKey;

/** One coded body, shared by the cache and the responses sending it. */
typedef struct xStaticCoded {
    xStaticCodedKey key;
    void *bytes; /**< of malloc's; NULL: coding this file saves nothing */
    size_t len;
    unsigned refs;
    uint32_t hash;
    struct xStaticCoded *next;          /* its bucket */
    struct xStaticCoded *newer, *older; /* the cache's use order */
} xStaticCoded;

typedef struct xStaticCodedCache xStaticCodedCache;

/** The key of st's file in coding. */
xStaticCodedKey xStaticCodedKeyOf(const struct stat *st, unsigned coding);

/** A cache of at most bytes_max bytes (the bodies and their entries); NULL
 *  when out of memory. */
xStaticCodedCache *xStaticCodedCacheCreate(size_t bytes_max);

/** Frees the cache; bodies still being sent live on until their last
 *  reference goes. NULL is ignored. */
void xStaticCodedCacheDestroy(xStaticCodedCache *cache);

/** The body kept for key, made the most recently used, with a reference for
 *  the caller; NULL when none is. An entry of the same file in another
 *  version (size or time) is dropped on the way: it will not be asked for
 *  again. */
xStaticCoded *xStaticCodedFind(xStaticCodedCache *cache, const xStaticCodedKey *key);

/** An entry for key holding bytes (len of them, taken: freed with the entry;
 *  NULL: coding saves nothing), with a reference for the caller, and kept in
 *  cache (which may be NULL: kept nowhere) when it fits, older entries
 *  dropped to make room. NULL when out of memory (bytes freed). */
xStaticCoded *xStaticCodedKeep(xStaticCodedCache *cache, const xStaticCodedKey *key, void *bytes, size_t len);

/** Drops a reference (coded, so it may be a release callback); the last
 *  frees the entry and its bytes. */
void xStaticCodedPut(void *coded);

/** What the cache holds now, in the bytes its bound counts, and how many
 *  entries. */
size_t xStaticCodedCacheBytes(const xStaticCodedCache *cache);
size_t xStaticCodedCacheCount(const xStaticCodedCache *cache);

#endif
