/* buffer_pool.h — a per-loop pool of buffer blocks (internal).
 *
 * Connections borrow blocks from their loop's pool while they have bytes in
 * flight and give them back when idle, so ten thousand idle keep-alive
 * connections hold no buffer memory and a busy loop never calls malloc.
 *
 * A few buffers larger than a block (a request read whole with its body, an
 * output queue grown) are kept too, up to XBUFFER_LARGE_MAX each: malloc
 * hands the top of a thread's heap back to the kernel once that much is
 * free, so a large buffer freed and made again at every request would be
 * paged in afresh each time (a page fault and a zeroed page per 4 KiB). */
#ifndef XBASE_MEM_BUFFER_POOL_H
#define XBASE_MEM_BUFFER_POOL_H

#include <stdbool.h>
#include <stddef.h>

#include <xbase/buffer.h>
#include <xbase/errno.h>

#define XBUFFER_LARGE_SPARES 8
#define XBUFFER_LARGE_MAX (256u << 10)

/** A free list of blocks of one size, and a few larger buffers.
 *  Single-threaded: one per loop. */
typedef struct xBufferPool {
    void *free_list;
    size_t block_size;
    size_t free_count;
    size_t max_free;                     /**< blocks kept beyond this are returned to malloc */
    xBuffer large[XBUFFER_LARGE_SPARES]; /**< kept larger buffers: data and cap */
    size_t large_count;
} xBufferPool;

/** Prepares a pool of block_size blocks keeping at most max_free spares. */
void xBufferPoolInit(xBufferPool *pool, size_t block_size, size_t max_free);

/** Frees every spare block. */
void xBufferPoolDestroy(xBufferPool *pool);

/** Gives buf a pooled block if it has no storage. XERR_NOMEM on failure. */
xErrno xBufferPoolAcquire(xBufferPool *pool, xBuffer *buf);

/** Gives buf (which has no storage) room for at least cap bytes: a block
 *  where one is enough, else the smallest kept larger buffer that is, else a
 *  new allocation of cap. XERR_NOMEM on failure. */
xErrno xBufferPoolAcquireLarge(xBufferPool *pool, xBuffer *buf, size_t cap);

/** Takes buf's storage back (to the pool if it is a pool-sized block, or
 *  among the larger spares while there is room and it is at most
 *  XBUFFER_LARGE_MAX, else to malloc); buf becomes empty. */
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
