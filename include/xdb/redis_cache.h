/* xdb/redis_cache.h — cache-aside over a Redis client: GET the key; on a hit
 * give the value; on a miss ask the application's loader (which answers
 * later, from wherever it reads: a database, a service), SET the value with
 * a TTL and give it; invalidate with DEL.
 *
 * The cache never fails a request for its own sake: with Redis down, slow or
 * erroring, the loader is asked and its value given (as a miss). Misses of
 * one key that overlap on one loop share one load: the loader runs once and
 * every waiting caller gets its value.
 *
 * A miss is answered as soon as the loader answers, without waiting for the
 * SET: a get of the same key right after it on another connection to Redis
 * (another worker's) may miss too and load again.
 *
 * Threading: a cache belongs to its client's loop; every call and callback
 * happens on that thread. */
#ifndef XDB_REDIS_CACHE_H
#define XDB_REDIS_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include <xdb/redis.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What this header declares is libxkit.so's API: exported, where the rest is hidden. */
#pragma GCC visibility push(default)

typedef struct xRedisCache xRedisCache;
typedef struct xRedisCacheGet xRedisCacheGet;
typedef struct xRedisCacheLoad xRedisCacheLoad;

/** Where a value came from. */
typedef enum xRedisCacheOutcome {
    XREDIS_CACHE_HIT,   /**< from Redis */
    XREDIS_CACHE_MISS,  /**< from the loader (Redis missed it, or could not be asked) */
    XREDIS_CACHE_ERROR, /**< the loader failed: no value */
} xRedisCacheOutcome;

/** Asks the application for key's value: it answers, now or later, with
 *  xRedisCacheLoaded or xRedisCacheLoadFailed on load (exactly one of them).
 *  arg is the loader's. key is valid until that answer. */
typedef void (*xRedisCacheLoadFn)(xRedisCacheLoad *load, const char *key, size_t key_len, void *arg);

/** How a key's value is loaded and kept; usually a static const per kind of key. */
typedef struct xRedisCacheLoader {
    xRedisCacheLoadFn load;
    void *arg;       /**< given to load */
    uint64_t ttl_ms; /**< how long Redis keeps a loaded value (SET … PX); 0: 1000 ms */
} xRedisCacheLoader;

/** A get's answer: value (len bytes; NULL for XREDIS_CACHE_ERROR) is valid
 *  during the call only. arg is xRedisCacheGet's. */
typedef void (*xRedisCacheFn)(xRedisCacheOutcome outcome, const void *value, size_t len, void *arg);

/** Creates a cache over client (which must outlive it). Returns NULL for no memory. */
xRedisCache *xRedisCacheCreate(xRedisClient *client);

/** Frees cache: gets still waiting are answered XREDIS_CACHE_ERROR first;
 *  loads still out may still be answered (their values are then dropped). */
void xRedisCacheFree(xRedisCache *cache);

/** Gets key (key_len bytes, binary-safe) through the cache, calling fn once
 *  with the value, never from within this call, unless cancelled first.
 *  loader (copied; its arg must last until the load answers) loads it on a
 *  miss; a get that joins a load of key already under way is served by that
 *  load's loader and TTL.
 *  Returns a handle for xRedisCacheCancel, valid until fn runs; NULL (fn
 *  never runs) for no loader or fn, or no memory. */
xRedisCacheGet *xRedisCacheGetValue(xRedisCache *cache, const void *key, size_t key_len,
                                    const xRedisCacheLoader *loader, xRedisCacheFn fn, void *arg);

/** Cancels get: its fn never runs (a load it started still completes and
 *  fills the cache). get must not have been answered; invalid afterwards. */
void xRedisCacheCancel(xRedisCacheGet *get);

/** The loader's answer: value (len bytes, copied) for the waiting gets and
 *  for Redis. load is invalid afterwards. */
void xRedisCacheLoaded(xRedisCacheLoad *load, const void *value, size_t len);

/** The loader's answer when it has no value: the waiting gets are answered
 *  XREDIS_CACHE_ERROR and nothing is stored. load is invalid afterwards. */
void xRedisCacheLoadFailed(xRedisCacheLoad *load);

/** Deletes key from Redis (DEL); a load of key under way is then not stored
 *  (its value may be older than the change that invalidates it). fn, if not
 *  NULL, gets DEL's reply as a command of xRedisCommand does (an error reply
 *  when Redis is down). Returns the handle for xRedisCancel when fn is given;
 *  NULL otherwise, or for no memory (fn then never runs). */
xRedisCall *xRedisCacheInvalidate(xRedisCache *cache, const void *key, size_t key_len, xRedisReplyFn fn,
                                  void *arg);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
