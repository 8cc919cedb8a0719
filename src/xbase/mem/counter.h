/* counter.h — counters with one writer that other threads may read.
 *
 * A worker counts its own requests and connections; a reader on any thread
 * sums the workers' counters. Each counter is a relaxed atomic written only
 * by its owner with a plain load and store (no locked read-modify-write), so
 * counting costs what a plain increment costs on x86-64 and ARM64, yet a
 * reader never sees a torn value and the compiler may not cache or split the
 * store. The sum a reader makes is not one instant's: each counter is
 * exact, their totals may be a few requests apart. */
#ifndef XBASE_MEM_COUNTER_H
#define XBASE_MEM_COUNTER_H

#include <stdatomic.h>
#include <stdint.h>

typedef _Atomic uint64_t xCounter;

/** Adds n; only the counter's owning thread may call this. */
static inline void xCounterAdd(xCounter *c, uint64_t n) {
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n, memory_order_relaxed);
}

/** The counter's value, from any thread. */
static inline uint64_t xCounterRead(const xCounter *c) {
    return atomic_load_explicit((xCounter *)c, memory_order_relaxed);
}

/* Relaxed counters are each exact but unordered between them: a reader may
 * see one owner's later add before its earlier one to another counter. Where
 * one counter bounds another (a connection is accepted before it is closed),
 * the owner adds to the bounding one last with a release, and a reader
 * that loads it with an acquire before the other sees no fewer of the other's
 * adds. On x86-64 both are the same plain moves as above; ARM64 uses its
 * store-release and load-acquire instructions. */

/** Adds n after every add its owner made before, as seen by xCounterReadAcquire. */
static inline void xCounterAddRelease(xCounter *c, uint64_t n) {
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n, memory_order_release);
}

/** The counter's value, from any thread; the owner's adds that came before the
 *  ones it includes are visible to this thread's reads after it. */
static inline uint64_t xCounterReadAcquire(const xCounter *c) {
    return atomic_load_explicit((xCounter *)c, memory_order_acquire);
}

#endif
