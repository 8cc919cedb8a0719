/* buffer_pool.h — a per-loop pool of buffer blocks (internal).
 *
 * Connections borrow blocks from their loop's pool while they have bytes in
 * flight and give them back when idle, so ten thousand idle keep-alive
 * connections hold no buffer memory and a busy loop never calls malloc. */
#ifndef XBASE_MEM_BUFFER_POOL_H
#define XBASE_MEM_BUFFER_POOL_H

#include <stdbool.h>
#include <stddef.h>

#include <xbase/buffer.h>
#include <xbase/errno.h>

/** A free list of blocks of one size. Single-threaded: one per loop. */
typedef struct xBufferPool {
    void *free_list;
    size_t block_size;
    size_t free_count;
    size_t max_free; /**< blocks kept beyond this are returned to malloc */
} xBufferPool;

/** Prepares a pool of block_size blocks keeping at most max_free spares. */
void xBufferPoolInit(xBufferPool *pool, size_t block_size, size_t max_free);

/** Frees every spare block. */
void xBufferPoolDestroy(xBufferPool *pool);

/** Gives buf a pooled block if it has no storage. XERR_NOMEM on failure. */
xErrno xBufferPoolAcquire(xBufferPool *pool, xBuffer *buf);

/** Takes buf's storage back (to the pool if it is a pool-sized block, else
 *  to malloc); buf becomes empty. */
void xBufferPoolRelease(xBufferPool *pool, xBuffer *buf);

/** Moves buf's bytes from offset from on into an allocation of exactly their
 *  size and gives its block back: a connection that waits with a few bytes of
 *  a message (a slow client) pins no block. False, with buf unchanged, when
 *  out of memory. */
bool xBufferPoolPark(xBufferPool *pool, xBuffer *buf, size_t from);

/** Gives buf a whole pooled block with its bytes at the front: one acquired
 *  when it has no storage, its parked bytes moved into one when it is
 *  parked. XERR_NOMEM leaves buf as it was. */
xErrno xBufferPoolUnpark(xBufferPool *pool, xBuffer *buf);

#endif
