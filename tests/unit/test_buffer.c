/* test_buffer.c — growable buffers (append, reserve, consume, overflow) and
 * the block pool (reuse, the spare limit, buffers that outgrew a block kept
 * apart, up to a size and a count, and handed out by size). */
#include <stdint.h>
#include <string.h>

#include <xbase/buffer.h>

#include "xbase/mem/buffer_pool.h"

#include "check.h"

static void append_grows_and_keeps_bytes(void) {
    xBuffer b = {0};
    char chunk[100];
    for (int i = 0; i < 100; i++) chunk[i] = (char)i;
    for (int i = 0; i < 50; i++) CHECK_EQ_INT(xBufferAppend(&b, chunk, sizeof chunk), XOK);
    CHECK_EQ_INT(b.len, 5000);
    CHECK(b.cap >= 5000);
    int same = 1;
    for (size_t i = 0; i < b.len; i++) same &= b.data[i] == (char)(i % 100);
    CHECK(same);
    xBufferFree(&b);
    CHECK(b.data == NULL && b.len == 0 && b.cap == 0);
}

static void reserve_refuses_sizes_that_overflow(void) {
    xBuffer b = {0};
    CHECK_EQ_INT(xBufferAppend(&b, "abc", 3), XOK);
    CHECK_EQ_INT(xBufferReserve(&b, SIZE_MAX - 1), XERR_NOMEM);
    CHECK_EQ_INT(b.len, 3); /* unchanged by the refusal */
    CHECK_EQ_INT(xBufferReserve(&b, 0), XOK);
    xBufferFree(&b);
}

static void consume_moves_the_rest_to_the_front(void) {
    xBuffer b = {0};
    xBufferAppend(&b, "hello world", 11);
    xBufferConsume(&b, 6);
    CHECK(b.len == 5 && memcmp(b.data, "world", 5) == 0);
    xBufferConsume(&b, 99);
    CHECK_EQ_INT(b.len, 0);
    xBufferFree(&b);
}

static void pool_reuses_blocks_up_to_its_limit(void) {
    xBufferPool pool;
    xBufferPoolInit(&pool, 4096, 1);
    xBuffer a = {0}, b = {0};
    CHECK_EQ_INT(xBufferPoolAcquire(&pool, &a), XOK);
    CHECK_EQ_INT(xBufferPoolAcquire(&pool, &b), XOK);
    CHECK(a.cap == 4096 && b.cap == 4096 && a.len == 0);
    char *first = a.data;
    xBufferPoolRelease(&pool, &a);
    xBufferPoolRelease(&pool, &b); /* over max_free: back to malloc */
    CHECK_EQ_INT(pool.free_count, 1);
    CHECK(a.data == NULL && b.data == NULL);
    xBuffer c = {0};
    CHECK_EQ_INT(xBufferPoolAcquire(&pool, &c), XOK);
    CHECK(c.data == first);
    CHECK_EQ_INT(pool.free_count, 0);
    /* A buffer that already has storage keeps it. */
    char *kept = c.data;
    CHECK_EQ_INT(xBufferPoolAcquire(&pool, &c), XOK);
    CHECK(c.data == kept);
    xBufferPoolRelease(&pool, &c);
    xBufferPoolDestroy(&pool);
    CHECK_EQ_INT(pool.free_count, 0);
}

static void pool_keeps_a_buffer_that_outgrew_its_block_apart(void) {
    xBufferPool pool;
    xBufferPoolInit(&pool, 256, 8);
    xBuffer a = {0};
    xBufferPoolAcquire(&pool, &a);
    char big[1000] = {0};
    CHECK_EQ_INT(xBufferAppend(&a, big, sizeof big), XOK);
    CHECK(a.cap > 256);
    char *grown = a.data;
    size_t grown_cap = a.cap;
    xBufferPoolRelease(&pool, &a);
    CHECK_EQ_INT(pool.free_count, 0); /* not a pool-sized block */
    CHECK_EQ_INT(pool.large_count, 1);
    xBuffer b = {0};
    CHECK_EQ_INT(xBufferPoolAcquire(&pool, &b), XOK); /* a block is asked for: a block is given */
    CHECK_EQ_INT(b.cap, 256);
    xBuffer c = {0};
    CHECK_EQ_INT(xBufferPoolAcquireLarge(&pool, &c, 900), XOK); /* the kept one fits */
    CHECK(c.data == grown && c.cap == grown_cap && c.len == 0);
    CHECK_EQ_INT(pool.large_count, 0);
    xBufferPoolRelease(&pool, &b);
    xBufferPoolRelease(&pool, &c);
    xBufferPoolDestroy(&pool); /* frees the kept ones (ASan: no leak) */
    CHECK_EQ_INT(pool.large_count, 0);
}

static void pool_hands_out_the_smallest_large_buffer_that_fits_and_keeps_the_largest(void) {
    xBufferPool pool;
    xBufferPoolInit(&pool, 256, 8);
    xBuffer held[XBUFFER_LARGE_SPARES + 1];
    for (size_t i = 0; i <= XBUFFER_LARGE_SPARES; i++) {
        held[i] = (xBuffer){0};
        CHECK_EQ_INT(xBufferPoolAcquireLarge(&pool, &held[i], 1000 * (i + 1)), XOK);
        CHECK(held[i].cap >= 1000 * (i + 1));
    }
    for (size_t i = 0; i <= XBUFFER_LARGE_SPARES; i++) xBufferPoolRelease(&pool, &held[i]);
    /* One more than there is room for: the smallest (1000) made way. */
    CHECK_EQ_INT(pool.large_count, XBUFFER_LARGE_SPARES);
    for (size_t i = 0; i < pool.large_count; i++) CHECK(pool.large[i].cap >= 2000);
    xBuffer a = {0};
    CHECK_EQ_INT(xBufferPoolAcquireLarge(&pool, &a, 2500), XOK);
    CHECK_EQ_INT(a.cap, 3000); /* the smallest that fits */
    xBuffer b = {0};
    CHECK_EQ_INT(xBufferPoolAcquireLarge(&pool, &b, 20000), XOK); /* none fits: a new one */
    CHECK_EQ_INT(b.cap, 20000);
    xBufferPoolRelease(&pool, &a);
    xBufferPoolRelease(&pool, &b); /* replaces the smallest kept (2000) */
    CHECK_EQ_INT(pool.large_count, XBUFFER_LARGE_SPARES);
    xBuffer huge = {0};
    CHECK_EQ_INT(xBufferPoolAcquireLarge(&pool, &huge, XBUFFER_LARGE_MAX + 1), XOK);
    xBufferPoolRelease(&pool, &huge); /* past the most kept: freed */
    for (size_t i = 0; i < pool.large_count; i++) CHECK(pool.large[i].cap <= XBUFFER_LARGE_MAX);
    xBufferPoolDestroy(&pool);
}

static void parking_keeps_only_the_bytes_and_unparking_restores_a_block(void) {
    xBufferPool pool;
    xBufferPoolInit(&pool, 256, 8);
    xBuffer a = {0};
    CHECK_EQ_INT(xBufferPoolUnpark(&pool, &a), XOK); /* no storage: a block acquired */
    CHECK(a.cap == 256 && a.len == 0);
    CHECK_EQ_INT(xBufferAppend(&a, "done|partial", 12), XOK);
    CHECK(xBufferPoolPark(&pool, &a, 5));
    CHECK(a.len == 7 && a.cap == 7 && memcmp(a.data, "partial", 7) == 0);
    CHECK_EQ_INT(pool.free_count, 1); /* the block went back */
    CHECK_EQ_INT(xBufferPoolUnpark(&pool, &a), XOK);
    CHECK(a.cap == 256 && a.len == 7 && memcmp(a.data, "partial", 7) == 0);
    CHECK_EQ_INT(pool.free_count, 0);
    char *block = a.data;
    CHECK_EQ_INT(xBufferPoolUnpark(&pool, &a), XOK); /* already a block: unchanged */
    CHECK(a.data == block && a.len == 7);
    xBufferPoolRelease(&pool, &a);
    xBufferPoolDestroy(&pool);
}

int main(void) {
    RUN(append_grows_and_keeps_bytes);
    RUN(reserve_refuses_sizes_that_overflow);
    RUN(consume_moves_the_rest_to_the_front);
    RUN(pool_reuses_blocks_up_to_its_limit);
    RUN(pool_keeps_a_buffer_that_outgrew_its_block_apart);
    RUN(pool_hands_out_the_smallest_large_buffer_that_fits_and_keeps_the_largest);
    RUN(parking_keeps_only_the_bytes_and_unparking_restores_a_block);
    return CHECK_SUMMARY();
}
