/* static_coded.c — the per-worker cache of static files' compressed bodies
 * (static_coded.h): a hash table by file for lookups, a list by use for
 * eviction, both touched by one worker only. */
#include "xhttp/handler/static_coded.h"

#include <stdlib.h>

struct xStaticCodedCache {
    xStaticCoded **buckets; /* a power of two of them */
    size_t mask, count;
    size_t bytes, bytes_max;
    xStaticCoded *newest, *oldest;
};

#define FIRST_BUCKETS 64

/* What an entry costs the bound: its body and its own header. */
static size_t cost(const xStaticCoded *e) { return sizeof *e + e->len; }

/* By file and coding, not version: another version of the same file lands
 * in the same bucket, where a lookup finds it stale and drops it. */
static uint32_t hash_of(const xStaticCodedKey *k) {
    uint64_t h = (k->device * 0x9e3779b97f4a7c15ull) ^ k->inode;
    h = (h ^ (h >> 29)) * 0xbf58476d1ce4e5b9ull;
    h ^= k->coding;
    return (uint32_t)(h ^ (h >> 32));
}

static bool same_file(const xStaticCodedKey *a, const xStaticCodedKey *b) {
    return a->device == b->device && a->inode == b->inode && a->coding == b->coding;
}

static bool same_version(const xStaticCodedKey *a, const xStaticCodedKey *b) {
    return a->size == b->size && a->mtime_sec == b->mtime_sec && a->mtime_nsec == b->mtime_nsec;
}

xStaticCodedKey xStaticCodedKeyOf(const struct stat *st, unsigned coding) {
    return (xStaticCodedKey){
        .device = (uint64_t)st->st_dev,
        .inode = (uint64_t)st->st_ino,
        .size = (uint64_t)st->st_size,
        .mtime_sec = (int64_t)st->st_mtim.tv_sec,
        .mtime_nsec = (int64_t)st->st_mtim.tv_nsec,
        .coding = coding,
    };
}

xStaticCodedCache *xStaticCodedCacheCreate(size_t bytes_max) {
    xStaticCodedCache *cache = calloc(1, sizeof *cache);
    if (!cache) return NULL;
    cache->buckets = calloc(FIRST_BUCKETS, sizeof *cache->buckets);
    if (!cache->buckets) {
        free(cache);
        return NULL;
    }
    cache->mask = FIRST_BUCKETS - 1;
    cache->bytes_max = bytes_max;
    return cache;
}

void xStaticCodedPut(void *coded) {
    xStaticCoded *e = coded;
    if (--e->refs) return;
    free(e->bytes);
    free(e);
}

static void unlist(xStaticCodedCache *cache, xStaticCoded *e) {
    if (e->newer)
        e->newer->older = e->older;
    else
        cache->newest = e->older;
    if (e->older)
        e->older->newer = e->newer;
    else
        cache->oldest = e->newer;
    e->newer = e->older = NULL;
}

static void list_first(xStaticCodedCache *cache, xStaticCoded *e) {
    e->older = cache->newest;
    e->newer = NULL;
    if (cache->newest)
        cache->newest->newer = e;
    else
        cache->oldest = e;
    cache->newest = e;
}

/* Takes e, already out of its bucket, out of the cache, and drops the
 * cache's reference: a response still sending it keeps it alive. */
static void forget(xStaticCodedCache *cache, xStaticCoded *e) {
    unlist(cache, e);
    cache->bytes -= cost(e);
    cache->count--;
    xStaticCodedPut(e);
}

static void drop_oldest(xStaticCodedCache *cache) {
    xStaticCoded *e = cache->oldest;
    for (xStaticCoded **link = &cache->buckets[e->hash & cache->mask]; *link; link = &(*link)->next) {
        if (*link == e) {
            *link = e->next;
            break;
        }
    }
    forget(cache, e);
}

/* Doubles the buckets once there are more entries than buckets; left as it
 * is without memory (the chains grow instead). */
static void grow(xStaticCodedCache *cache) {
    size_t n = (cache->mask + 1) * 2;
    xStaticCoded **buckets = calloc(n, sizeof *buckets);
    if (!buckets) return;
    for (size_t b = 0; b <= cache->mask; b++) {
        while (cache->buckets[b]) {
            xStaticCoded *e = cache->buckets[b];
            cache->buckets[b] = e->next;
            e->next = buckets[e->hash & (n - 1)];
            buckets[e->hash & (n - 1)] = e;
        }
    }
    free(cache->buckets);
    cache->buckets = buckets;
    cache->mask = n - 1;
}

xStaticCoded *xStaticCodedFind(xStaticCodedCache *cache, const xStaticCodedKey *key) {
    uint32_t h = hash_of(key);
    xStaticCoded **link = &cache->buckets[h & cache->mask];
    while (*link) {
        xStaticCoded *e = *link;
        if (e->hash != h || !same_file(&e->key, key)) {
            link = &e->next;
            continue;
        }
        if (!same_version(&e->key, key)) { /* the file changed since */
            *link = e->next;
            forget(cache, e);
            continue;
        }
        unlist(cache, e);
        list_first(cache, e);
        e->refs++;
        return e;
    }
    return NULL;
}

xStaticCoded *xStaticCodedKeep(xStaticCodedCache *cache, const xStaticCodedKey *key, void *bytes,
                               size_t len) {
    xStaticCoded *e = calloc(1, sizeof *e);
    if (!e) {
        free(bytes);
        return NULL;
    }
    e->key = *key;
    e->bytes = bytes;
    e->len = bytes ? len : 0;
    e->refs = 1;
    e->hash = hash_of(key);
    if (!cache || cost(e) > cache->bytes_max) return e;
    while (cache->bytes_max - cache->bytes < cost(e)) drop_oldest(cache);
    if (cache->count >= cache->mask + 1) grow(cache);
    xStaticCoded **bucket = &cache->buckets[e->hash & cache->mask];
    e->next = *bucket;
    *bucket = e;
    list_first(cache, e);
    e->refs++; /* the cache's */
    cache->bytes += cost(e);
    cache->count++;
    return e;
}

void xStaticCodedCacheDestroy(xStaticCodedCache *cache) {
    if (!cache) return;
    while (cache->oldest) forget(cache, cache->oldest);
    free(cache->buckets);
    free(cache);
}

size_t xStaticCodedCacheBytes(const xStaticCodedCache *cache) { return cache->bytes; }

size_t xStaticCodedCacheCount(const xStaticCodedCache *cache) { return cache->count; }
