/* redis_cache.c — xdb/redis_cache.h: cache-aside on an xRedisClient.
 *
 * Each key being fetched has one flight: the GET, then (on a miss, or when
 * Redis cannot answer) the application's load and the SET. Gets of a key
 * with a flight under way wait on it, so overlapping misses load once. The
 * flights of a cache sit in a small hash table by key. */
#include <xdb/redis_cache.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A key's fetch: the load handle the application answers is the flight itself. */
typedef enum FlightStage {
    FLIGHT_GETTING, /* GET sent */
    FLIGHT_LOADING, /* the loader asked */
} FlightStage;

struct xRedisCacheGet {
    xRedisCacheGet *prev, *next; /* on the flight's waiters */
    xRedisCacheLoad *flight;
    xRedisCacheFn fn;
    void *arg;
};

struct xRedisCacheLoad {
    xRedisCacheLoad *next_in_bucket;
    xRedisCache *cache; /* NULL once the cache is gone or the flight left its table */
    xRedisCacheGet *waiters;
    xRedisCacheLoader loader;
    xRedisCall *get_call; /* the GET, until it answers */
    FlightStage stage;
    bool stale; /* invalidated while under way: not stored */
    uint64_t hash;
    size_t key_len;
    char key[];
};

struct xRedisCache {
    xRedisClient *client;
    xRedisCacheLoad **buckets;
    size_t bucket_count; /* a power of two */
    size_t flights;
};

enum { FIRST_BUCKETS = 16, DEFAULT_TTL_MS = 1000 };

static uint64_t key_hash(const void *key, size_t len) {
    uint64_t h = 0xcbf29ce484222325u; /* FNV-1a */
    for (size_t i = 0; i < len; i++) h = (h ^ ((const unsigned char *)key)[i]) * 0x100000001b3u;
    return h;
}

static xRedisCacheLoad **bucket_of(xRedisCache *cache, uint64_t hash) {
    return &cache->buckets[hash & (cache->bucket_count - 1)];
}

static xRedisCacheLoad *flight_find(xRedisCache *cache, const void *key, size_t len, uint64_t hash) {
    for (xRedisCacheLoad *f = *bucket_of(cache, hash); f; f = f->next_in_bucket)
        if (f->hash == hash && f->key_len == len && memcmp(f->key, key, len) == 0) return f;
    return NULL;
}

/* Doubles the table once it holds more flights than buckets; a failed
 * allocation leaves it as it is (longer chains, still correct). */
static void table_grow(xRedisCache *cache) {
    size_t count = cache->bucket_count * 2;
    xRedisCacheLoad **buckets = calloc(count, sizeof *buckets);
    if (!buckets) return;
    for (size_t i = 0; i < cache->bucket_count; i++) {
        while (cache->buckets[i]) {
            xRedisCacheLoad *f = cache->buckets[i];
            cache->buckets[i] = f->next_in_bucket;
            f->next_in_bucket = buckets[f->hash & (count - 1)];
            buckets[f->hash & (count - 1)] = f;
        }
    }
    free(cache->buckets);
    cache->buckets = buckets;
    cache->bucket_count = count;
}

/* Takes f out of its cache's table: gets of its key from now on start anew. */
static void flight_leave(xRedisCacheLoad *f) {
    xRedisCache *cache = f->cache;
    if (!cache) return;
    for (xRedisCacheLoad **at = bucket_of(cache, f->hash); *at; at = &(*at)->next_in_bucket) {
        if (*at == f) {
            *at = f->next_in_bucket;
            break;
        }
    }
    cache->flights--;
    f->cache = NULL;
}

static void waiter_unlink(xRedisCacheGet *w) {
    if (w->prev)
        w->prev->next = w->next;
    else
        w->flight->waiters = w->next;
    if (w->next) w->next->prev = w->prev;
}

/* Answers every get waiting on f, which has left its table (a callback may
 * start a get of the same key, free the cache, or cancel another waiter). */
static void flight_answer(xRedisCacheLoad *f, xRedisCacheOutcome outcome, const void *value, size_t len) {
    while (f->waiters) {
        xRedisCacheGet *w = f->waiters;
        waiter_unlink(w);
        xRedisCacheFn fn = w->fn;
        void *arg = w->arg;
        free(w);
        fn(outcome, value, len, arg);
    }
}

static void ignore_reply(xRedisClient *client, const xRedisReply *reply, void *arg) {}

static void on_get_reply(xRedisClient *client, const xRedisReply *reply, void *arg) {
    xRedisCacheLoad *f = arg;
    f->get_call = NULL;
    if (reply->type == XREDIS_STRING) {
        flight_leave(f);
        flight_answer(f, XREDIS_CACHE_HIT, reply->str, reply->len);
        free(f);
        return;
    }
    /* Nil is a miss; anything else (Redis down or slow, an error reply, a
     * value of another type) must not fail the get either: load it. */
    f->stage = FLIGHT_LOADING;
    f->loader.load(f, f->key, f->key_len, f->loader.arg);
}

xRedisCache *xRedisCacheCreate(xRedisClient *client) {
    xRedisCache *cache = calloc(1, sizeof *cache);
    if (!cache || !(cache->buckets = calloc(FIRST_BUCKETS, sizeof *cache->buckets))) {
        free(cache);
        return NULL;
    }
    cache->client = client;
    cache->bucket_count = FIRST_BUCKETS;
    return cache;
}

void xRedisCacheFree(xRedisCache *cache) {
    if (!cache) return;
    for (size_t i = 0; i < cache->bucket_count; i++) {
        while (cache->buckets[i]) {
            xRedisCacheLoad *f = cache->buckets[i];
            flight_leave(f);
            bool getting = f->stage == FLIGHT_GETTING;
            if (getting) xRedisCancel(f->get_call);
            flight_answer(f, XREDIS_CACHE_ERROR, NULL, 0);
            if (getting) free(f); /* else the loader's answer frees it */
        }
    }
    free(cache->buckets);
    free(cache);
}

xRedisCacheGet *xRedisCacheGetValue(xRedisCache *cache, const void *key, size_t key_len,
                                    const xRedisCacheLoader *loader, xRedisCacheFn fn, void *arg) {
    if (!cache || !loader || !loader->load || !fn || (!key && key_len)) return NULL;
    xRedisCacheGet *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    *w = (xRedisCacheGet){.fn = fn, .arg = arg};
    uint64_t hash = key_hash(key, key_len);
    xRedisCacheLoad *f = flight_find(cache, key, key_len, hash);
    if (!f) {
        f = malloc(sizeof *f + key_len + 1);
        if (!f) {
            free(w);
            return NULL;
        }
        *f = (xRedisCacheLoad){.cache = cache, .loader = *loader, .hash = hash, .key_len = key_len};
        if (key_len) memcpy(f->key, key, key_len);
        f->key[key_len] = '\0';
        const char *argv[] = {"GET", f->key};
        const size_t argv_len[] = {3, key_len};
        f->get_call = xRedisCommand(cache->client, 2, argv, argv_len, 0, on_get_reply, f);
        if (!f->get_call) {
            free(f);
            free(w);
            return NULL;
        }
        if (cache->flights >= cache->bucket_count) table_grow(cache);
        xRedisCacheLoad **bucket = bucket_of(cache, hash);
        f->next_in_bucket = *bucket;
        *bucket = f;
        cache->flights++;
    }
    w->flight = f;
    w->next = f->waiters;
    if (f->waiters) f->waiters->prev = w;
    f->waiters = w;
    return w;
}

void xRedisCacheCancel(xRedisCacheGet *get) {
    if (!get) return;
    waiter_unlink(get);
    free(get);
}

void xRedisCacheLoaded(xRedisCacheLoad *f, const void *value, size_t len) {
    xRedisCache *cache = f->cache;
    if (cache && !f->stale) {
        char ttl[24];
        snprintf(ttl, sizeof ttl, "%llu",
                 (unsigned long long)(f->loader.ttl_ms ? f->loader.ttl_ms : DEFAULT_TTL_MS));
        const char *argv[] = {"SET", f->key, value ? value : "", "PX", ttl};
        const size_t argv_len[] = {3, f->key_len, len, 2, strlen(ttl)};
        xRedisCommand(cache->client, 5, argv, argv_len, 0, ignore_reply, NULL);
    }
    flight_leave(f);
    flight_answer(f, XREDIS_CACHE_MISS, value ? value : "", len);
    free(f);
}

void xRedisCacheLoadFailed(xRedisCacheLoad *f) {
    flight_leave(f);
    flight_answer(f, XREDIS_CACHE_ERROR, NULL, 0);
    free(f);
}

xRedisCall *xRedisCacheInvalidate(xRedisCache *cache, const void *key, size_t key_len, xRedisReplyFn fn,
                                  void *arg) {
    if (!cache || (!key && key_len)) return NULL;
    xRedisCacheLoad *f = flight_find(cache, key, key_len, key_hash(key, key_len));
    if (f) f->stale = true;
    const char *argv[] = {"DEL", key ? key : ""};
    const size_t argv_len[] = {3, key_len};
    xRedisCall *call = xRedisCommand(cache->client, 2, argv, argv_len, 0, fn ? fn : ignore_reply, arg);
    return fn ? call : NULL;
}
