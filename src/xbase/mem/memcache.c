/* memcache.c — size-classed free lists in front of malloc.
 *
 * Each block carries a 32-byte header naming its class, its size and its
 * cache, so free needs neither size nor cache and alignment stays that of
 * malloc. A class keeps a bounded number of spare blocks. Large classes
 * matter as much as small ones: a worker that mallocs and frees a 64 KiB body
 * per request makes glibc trim and refault its arena on every few requests. */
#include "xbase/mem/memcache.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define XMC_CLASSES 16 /* 32, 64, ..., 1 MiB */
#define XMC_MIN_SHIFT 5
#define XMC_LARGE UINT32_MAX       /* beyond the classes: plain malloc */
#define XMC_SPARE_BYTES (2u << 20) /* spare memory kept per class */

typedef struct xMemHeader {
    xMemCache *owner;
    size_t size; /* the usable size */
    uint32_t cls;
    uint32_t unused[3]; /* keeps the block 16-byte aligned */
} xMemHeader;

typedef struct xMemFree {
    struct xMemFree *next;
} xMemFree;

struct xMemCache {
    xMemFree *spare[XMC_CLASSES];
    size_t spare_count[XMC_CLASSES];
};

static uint32_t class_of(size_t size) {
    uint32_t cls = 0;
    while (cls < XMC_CLASSES && ((size_t)1 << (cls + XMC_MIN_SHIFT)) < size) cls++;
    return cls < XMC_CLASSES ? cls : XMC_LARGE;
}

static size_t class_size(uint32_t cls) { return (size_t)1 << (cls + XMC_MIN_SHIFT); }

static xMemHeader *header_of(void *ptr) { return (xMemHeader *)ptr - 1; }

xMemCache *xMemCacheCreate(void) { return calloc(1, sizeof(xMemCache)); }

void xMemCacheDestroy(xMemCache *cache) {
    if (!cache) return;
    for (int c = 0; c < XMC_CLASSES; c++) {
        while (cache->spare[c]) {
            xMemFree *block = cache->spare[c];
            cache->spare[c] = block->next;
            free(header_of(block));
        }
    }
    free(cache);
}

void *xMemCacheAlloc(xMemCache *cache, size_t size) {
    uint32_t cls = class_of(size);
    if (cls != XMC_LARGE && cache->spare[cls]) {
        xMemFree *block = cache->spare[cls];
        cache->spare[cls] = block->next;
        cache->spare_count[cls]--;
        return block;
    }
    size_t usable = cls == XMC_LARGE ? size : class_size(cls);
    if (usable > SIZE_MAX - sizeof(xMemHeader)) return NULL;
    xMemHeader *h = malloc(sizeof *h + usable);
    if (!h) return NULL;
    h->owner = cache;
    h->cls = cls;
    h->size = usable;
    return h + 1;
}

void *xMemCacheCalloc(xMemCache *cache, size_t count, size_t size) {
    if (size && count > SIZE_MAX / size) return NULL;
    void *p = xMemCacheAlloc(cache, count * size);
    if (p) memset(p, 0, count * size);
    return p;
}

void xMemCacheFree(xMemCache *cache, void *ptr) {
    if (!ptr) return;
    xMemHeader *h = header_of(ptr);
    if (h->cls == XMC_LARGE || cache->spare_count[h->cls] * h->size >= XMC_SPARE_BYTES) {
        free(h);
        return;
    }
    xMemFree *block = ptr;
    block->next = cache->spare[h->cls];
    cache->spare[h->cls] = block;
    cache->spare_count[h->cls]++;
}

void xMemCacheRelease(void *ptr) {
    if (ptr) xMemCacheFree(header_of(ptr)->owner, ptr);
}

void *xMemCacheRealloc(xMemCache *cache, void *ptr, size_t size) {
    if (!ptr) return xMemCacheAlloc(cache, size);
    xMemHeader *h = header_of(ptr);
    /* Fits: keep it, unless a large block would waste more than half. */
    if (size <= h->size && (h->cls != XMC_LARGE || size > h->size / 2)) return ptr;
    void *moved = xMemCacheAlloc(cache, size);
    if (!moved) return NULL;
    memcpy(moved, ptr, size < h->size ? size : h->size);
    xMemCacheFree(cache, ptr);
    return moved;
}
