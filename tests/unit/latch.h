/* latch.h — a latch that blocked work waits at until the test opens it, for the
 * tests of work on other threads (test_work_pool.c, test_worker_hooks.c): the test
 * waits until n pieces of work reached it, checks what it must while they are
 * held, then lets them all end. One per test program. */
#ifndef XK_TESTS_LATCH_H
#define XK_TESTS_LATCH_H

#include <pthread.h>
#include <stdbool.h>

static struct {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    bool open;
    int entered; /* pieces of work that reached it */
} latch = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, 0};

/* Closes the latch and forgets who reached it. */
static inline void latch_reset(void) {
    pthread_mutex_lock(&latch.lock);
    latch.open = false;
    latch.entered = 0;
    pthread_mutex_unlock(&latch.lock);
}

/* Waits until n pieces of work reached the latch. */
static inline void latch_wait_entered(int n) {
    pthread_mutex_lock(&latch.lock);
    while (latch.entered < n) pthread_cond_wait(&latch.changed, &latch.lock);
    pthread_mutex_unlock(&latch.lock);
}

/* Lets every piece of work at the latch, and any to come, through. */
static inline void latch_open(void) {
    pthread_mutex_lock(&latch.lock);
    latch.open = true;
    pthread_cond_broadcast(&latch.changed);
    pthread_mutex_unlock(&latch.lock);
}

/* Work: counts itself in, then waits until the latch is open. */
static inline void latch_pass(void) {
    pthread_mutex_lock(&latch.lock);
    latch.entered++;
    pthread_cond_broadcast(&latch.changed);
    while (!latch.open) pthread_cond_wait(&latch.changed, &latch.lock);
    pthread_mutex_unlock(&latch.lock);
}

#endif
