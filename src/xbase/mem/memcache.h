/* memcache.h — a per-thread cache of small allocations (internal).
 *
 * What is allocated and freed per connection at a high rate (the TLS record
 * layer's blocks) would otherwise spend its time in the allocator. A cache
 * keeps freed blocks in a few size classes and hands them out again without
 * locks. One cache belongs to one worker's thread. */
#ifndef XBASE_MEM_MEMCACHE_H
#define XBASE_MEM_MEMCACHE_H

#include <stddef.h>

typedef struct xMemCache xMemCache;

/** Creates an empty cache; NULL when out of memory. */
xMemCache *xMemCacheCreate(void);

/** Returns every cached block to malloc and frees the cache. Free every
 *  block it handed out first. */
void xMemCacheDestroy(xMemCache *cache);

/** malloc/calloc/realloc/free with cache's blocks; same contracts. */
void *xMemCacheAlloc(xMemCache *cache, size_t size);
void *xMemCacheCalloc(xMemCache *cache, size_t count, size_t size);
void *xMemCacheRealloc(xMemCache *cache, void *ptr, size_t size);
void xMemCacheFree(xMemCache *cache, void *ptr);

/** Frees ptr into the cache it came from; fits a void (*)(void *) callback.
 *  On that cache's thread only. */
void xMemCacheRelease(void *ptr);

#endif
