/* work_pool.c — the blocking-work pool (see work_pool.h): one lock and one
 * condition over a queue, threads started on demand, and results posted back
 * to their loops through calls embedded in the work, so that a result can
 * never be lost for want of memory. */
#include "xbase/loop/work_pool.h"

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>

struct xWorkPool {
    pthread_mutex_t lock;
    pthread_cond_t wanted; /* work was queued, or the pool is closing */
    xWork *head, *tail;    /* waiting for a thread, oldest first */
    size_t queued;
    size_t max_queued;
    int idle;        /* threads waiting on wanted */
    int started;     /* entries of threads in use */
    int max_threads; /* entries of threads */
    pthread_t *threads;
    bool closing; /* being destroyed: nothing more is queued */
};

/* Runs done on the loop: what xWork.back calls. */
static void work_returned(xEventLoop *loop, void *arg) {
    xWork *work = arg;
    work->done(loop, work, work->status);
}

static void post_back(xWork *work, xErrno status) {
    work->status = status;
    work->back = (xLoopCall){.fn = work_returned, .arg = work};
    xEventLoopPostCall(work->loop, &work->back);
}

static void *pool_thread(void *arg) {
    xWorkPool *pool = arg;
    pthread_mutex_lock(&pool->lock);
    for (;;) {
        while (!pool->head && !pool->closing) {
            pool->idle++;
            pthread_cond_wait(&pool->wanted, &pool->lock);
            pool->idle--;
        }
        xWork *work = pool->head;
        if (!work) break; /* closing, and nothing is left */
        pool->head = work->next;
        if (!pool->head) pool->tail = NULL;
        pool->queued--;
        pthread_mutex_unlock(&pool->lock);
        work->run(work);
        post_back(work, XOK);
        pthread_mutex_lock(&pool->lock);
    }
    pthread_mutex_unlock(&pool->lock);
    return NULL;
}

/* Starts one more thread, with every signal blocked so that none of the
 * process's is delivered to it; under the lock. */
static bool start_thread(xWorkPool *pool) {
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous);
    bool ok = pthread_create(&pool->threads[pool->started], NULL, pool_thread, pool) == 0;
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
    if (ok) pool->started++;
    return ok;
}

xWorkPool *xWorkPoolCreate(int threads, size_t max_queued) {
    if (threads < 1 || max_queued < 1) return NULL;
    xWorkPool *pool = calloc(1, sizeof *pool);
    if (!pool) return NULL;
    pool->threads = calloc((size_t)threads, sizeof *pool->threads);
    if (!pool->threads) {
        free(pool);
        return NULL;
    }
    pool->max_threads = threads;
    pool->max_queued = max_queued;
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->wanted, NULL);
    return pool;
}

xErrno xWorkPoolLimit(xWorkPool *pool, int threads, size_t max_queued) {
    if (threads < 1 || max_queued < 1) return XERR_INVALID;
    xErrno err = XOK;
    pthread_mutex_lock(&pool->lock);
    pthread_t *room = pool->started ? NULL : realloc(pool->threads, (size_t)threads * sizeof *room);
    if (pool->started) {
        err = XERR_STATE;
    } else if (!room) {
        err = XERR_NOMEM;
    } else {
        pool->threads = room;
        pool->max_threads = threads;
        pool->max_queued = max_queued;
    }
    pthread_mutex_unlock(&pool->lock);
    return err;
}

xErrno xWorkPoolSubmit(xWorkPool *pool, xEventLoop *loop, xWork *work) {
    work->loop = loop;
    work->next = NULL;
    xErrno err = XOK;
    pthread_mutex_lock(&pool->lock);
    if (pool->closing) {
        err = XERR_CLOSED;
    } else if (pool->queued >= pool->max_queued) {
        err = XERR_BUSY;
    } else {
        if (pool->tail)
            pool->tail->next = work;
        else
            pool->head = work;
        pool->tail = work;
        pool->queued++;
        /* Each idle thread takes one piece; more than they can take wants
         * another thread, while the limit allows. */
        bool short_of_threads = pool->queued > (size_t)pool->idle && pool->started < pool->max_threads;
        if (short_of_threads && !start_thread(pool) && pool->started == 0) {
            pool->head = pool->tail = NULL; /* it was alone: nobody would ever run it */
            pool->queued = 0;
            err = XERR_SYS;
        } else {
            pthread_cond_signal(&pool->wanted);
        }
    }
    pthread_mutex_unlock(&pool->lock);
    return err;
}

/* Takes out of pool's queue the work of loop (every piece when loop is
 * NULL), in order, linked through next; under the lock. */
static xWork *take_queued(xWorkPool *pool, const xEventLoop *loop) {
    xWork *taken = NULL, **taken_end = &taken;
    xWork **at = &pool->head;
    pool->tail = NULL;
    while (*at) {
        xWork *work = *at;
        if (loop && work->loop != loop) {
            pool->tail = work;
            at = &work->next;
            continue;
        }
        *at = work->next;
        pool->queued--;
        *taken_end = work;
        taken_end = &work->next;
    }
    *taken_end = NULL;
    return taken;
}

static void post_cancelled(xWork *list) {
    while (list) {
        xWork *next = list->next; /* done may free list once posted */
        post_back(list, XERR_CLOSED);
        list = next;
    }
}

void xWorkPoolCancel(xWorkPool *pool, const xEventLoop *loop) {
    pthread_mutex_lock(&pool->lock);
    xWork *cancelled = take_queued(pool, loop);
    pthread_mutex_unlock(&pool->lock);
    post_cancelled(cancelled);
}

void xWorkPoolDestroy(xWorkPool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->lock);
    pool->closing = true;
    xWork *cancelled = take_queued(pool, NULL);
    pthread_cond_broadcast(&pool->wanted);
    int started = pool->started; /* final: a closing pool starts none */
    pthread_mutex_unlock(&pool->lock);
    post_cancelled(cancelled);
    for (int i = 0; i < started; i++) pthread_join(pool->threads[i], NULL);
    pthread_cond_destroy(&pool->wanted);
    pthread_mutex_destroy(&pool->lock);
    free(pool->threads);
    free(pool);
}
