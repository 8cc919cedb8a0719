/* buffer.c — growable buffers and the per-loop block pool. */
#include "xbase/mem/buffer_pool.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

xErrno xBufferReserve(xBuffer *buf, size_t extra) {
    if (buf->cap - buf->len >= extra) return XOK;
    if (extra > SIZE_MAX / 2 - buf->len) return XERR_NOMEM;
    size_t want = buf->len + extra;
    size_t cap = buf->cap ? buf->cap : 256;
    while (cap < want) cap *= 2;
    char *data = realloc(buf->data, cap);
    if (!data) return XERR_NOMEM;
    buf->data = data;
    buf->cap = cap;
    return XOK;
}

xErrno xBufferAppend(xBuffer *buf, const void *bytes, size_t n) {
    xErrno err = xBufferReserve(buf, n);
    if (err != XOK) return err;
    if (n) memcpy(buf->data + buf->len, bytes, n);
    buf->len += n;
    return XOK;
}

void xBufferConsume(xBuffer *buf, size_t n) {
    if (n >= buf->len) {
        buf->len = 0;
        return;
    }
    memmove(buf->data, buf->data + n, buf->len - n);
    buf->len -= n;
}

void xBufferFree(xBuffer *buf) {
    free(buf->data);
    buf->data = NULL;
    buf->len = buf->cap = 0;
}

void xBufferPoolInit(xBufferPool *pool, size_t block_size, size_t max_free) {
    *pool = (xBufferPool){.block_size = block_size, .max_free = max_free};
}

void xBufferPoolDestroy(xBufferPool *pool) {
    while (pool->free_list) {
        void *block = pool->free_list;
        pool->free_list = *(void **)block;
        free(block);
    }
    pool->free_count = 0;
    while (pool->large_count) free(pool->large[--pool->large_count].data);
}

xErrno xBufferPoolAcquire(xBufferPool *pool, xBuffer *buf) {
    if (buf->data) return XOK;
    void *block = pool->free_list;
    if (block) {
        pool->free_list = *(void **)block;
        pool->free_count--;
    } else if (!(block = malloc(pool->block_size))) {
        return XERR_NOMEM;
    }
    buf->data = block;
    buf->cap = pool->block_size;
    buf->len = 0;
    return XOK;
}

/* Room among the larger spares for one of cap bytes. */
static bool keep_large(xBufferPool *pool, size_t cap) {
    if (pool->large_count < XBUFFER_LARGE_SPARES) return true;
    size_t smallest = 0;
    for (size_t i = 1; i < pool->large_count; i++)
        if (pool->large[i].cap < pool->large[smallest].cap) smallest = i;
    if (pool->large[smallest].cap >= cap) return false;
    free(pool->large[smallest].data);
    pool->large[smallest] = pool->large[--pool->large_count];
    return true;
}

/* Keeps buf among the larger spares, in a free place or in the place of the
 * smallest, freed, where that is smaller (a larger buffer serves every
 * request a smaller one would); else frees it. Out of line: blocks, the
 * common case, are given back without it. */
__attribute__((noinline)) static void release_other(xBufferPool *pool, xBuffer *buf) {
    if (buf->cap > pool->block_size && buf->cap <= XBUFFER_LARGE_MAX && keep_large(pool, buf->cap))
        pool->large[pool->large_count++] = (xBuffer){buf->data, 0, buf->cap};
    else
        free(buf->data);
}

xErrno xBufferPoolAcquireLarge(xBufferPool *pool, xBuffer *buf, size_t cap) {
    if (cap <= pool->block_size) return xBufferPoolAcquire(pool, buf);
    size_t best = pool->large_count;
    for (size_t i = 0; i < pool->large_count; i++)
        if (pool->large[i].cap >= cap &&
            (best == pool->large_count || pool->large[i].cap < pool->large[best].cap))
            best = i;
    if (best < pool->large_count) {
        *buf = (xBuffer){pool->large[best].data, 0, pool->large[best].cap};
        pool->large[best] = pool->large[--pool->large_count];
        return XOK;
    }
    char *data = malloc(cap);
    if (!data) return XERR_NOMEM;
    *buf = (xBuffer){data, 0, cap};
    return XOK;
}

void xBufferPoolRelease(xBufferPool *pool, xBuffer *buf) {
    if (!buf->data) return;
    if (buf->cap == pool->block_size && pool->free_count < pool->max_free) {
        *(void **)buf->data = pool->free_list;
        pool->free_list = buf->data;
        pool->free_count++;
    } else {
        release_other(pool, buf);
    }
    buf->data = NULL;
    buf->len = buf->cap = 0;
}

bool xBufferPoolPark(xBufferPool *pool, xBuffer *buf, size_t from) {
    size_t len = buf->len - from;
    char *bytes = len ? malloc(len) : NULL;
    if (len && !bytes) return false;
    if (len) memcpy(bytes, buf->data + from, len);
    xBufferPoolRelease(pool, buf);
    *buf = (xBuffer){bytes, len, len};
    return true;
}

xErrno xBufferPoolUnpark(xBufferPool *pool, xBuffer *buf) {
    if (buf->data && buf->cap == pool->block_size) return XOK;
    xBuffer parked = *buf;
    *buf = (xBuffer){0};
    if (xBufferPoolAcquire(pool, buf) != XOK) {
        *buf = parked;
        return XERR_NOMEM;
    }
    if (parked.len) memcpy(buf->data, parked.data, parked.len);
    buf->len = parked.len;
    free(parked.data);
    return XOK;
}
