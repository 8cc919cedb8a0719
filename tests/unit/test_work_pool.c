/* test_work_pool.c — the blocking-work pool under xKit's loops: work runs on
 * pool threads (no more of them than the limit, none before work needs one)
 * and its done on the loop that submitted it, once each; a full queue
 * refuses; cancelling takes only one loop's waiting work, whose done is told;
 * destroying cancels what waits, waits for what runs and posts every done
 * before it returns. The ThreadSanitizer build runs this too: what the work
 * wrote must reach its done through the post. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#include <xbase/event.h>

#include "xbase/loop/work_pool.h"

#include "check.h"
#include "latch.h"

typedef struct Job {
    xWork work;
    bool blocks;         /* waits at the latch */
    pthread_t ran_on;    /* written by run, read by done */
    bool ran;            /* the same */
    int done_calls;      /* done's, on the loop */
    xErrno status;       /* what done was told */
    pthread_t done_on;   /* where done ran */
    int *remaining;      /* the loop stops when it reaches 0 */
    atomic_int *running; /* how many run at once ... */
    atomic_int *most;    /* ... and the most ever */
} Job;

static void job_run(xWork *work) {
    Job *job = (Job *)work;
    job->ran_on = pthread_self();
    job->ran = true;
    if (job->running) {
        int now = atomic_fetch_add(job->running, 1) + 1;
        int most = atomic_load(job->most);
        while (now > most && !atomic_compare_exchange_weak(job->most, &most, now)) {
        }
    }
    if (job->blocks) {
        latch_pass();
    } else {
        struct timespec pause = {.tv_nsec = 200000};
        nanosleep(&pause, NULL);
    }
    if (job->running) atomic_fetch_sub(job->running, 1);
}

static void job_done(xEventLoop *loop, xWork *work, xErrno status) {
    Job *job = (Job *)work;
    job->done_calls++;
    job->status = status;
    job->done_on = pthread_self();
    if (job->remaining && --*job->remaining == 0) xEventLoopStop(loop);
}

static void job_init(Job *job, bool blocks, int *remaining) {
    *job = (Job){.work = {.run = job_run, .done = job_done}, .blocks = blocks, .remaining = remaining};
}

static void test_work_runs_on_pool_threads_and_its_done_on_the_loop(void) {
    enum { JOBS = 64, THREADS = 3 };
    xEventLoop *loop = xEventLoopCreate();
    xWorkPool *pool = xWorkPoolCreate(THREADS, JOBS);
    CHECK(loop && pool);
    static Job jobs[JOBS];
    atomic_int running = 0, most = 0;
    int remaining = JOBS;
    for (int i = 0; i < JOBS; i++) {
        job_init(&jobs[i], false, &remaining);
        jobs[i].running = &running;
        jobs[i].most = &most;
        CHECK_EQ_INT(xWorkPoolSubmit(pool, loop, &jobs[i].work), XOK);
    }
    CHECK_EQ_INT(xEventLoopRun(loop), XOK);
    pthread_t self = pthread_self();
    pthread_t seen[JOBS];
    int distinct = 0;
    for (int i = 0; i < JOBS; i++) {
        CHECK(jobs[i].ran);
        CHECK_EQ_INT(jobs[i].done_calls, 1);
        CHECK_EQ_INT(jobs[i].status, XOK);
        CHECK(pthread_equal(jobs[i].done_on, self));
        CHECK(!pthread_equal(jobs[i].ran_on, self));
        int k = 0;
        while (k < distinct && !pthread_equal(seen[k], jobs[i].ran_on)) k++;
        if (k == distinct) seen[distinct++] = jobs[i].ran_on;
    }
    CHECK_MSG(distinct >= 1 && distinct <= THREADS, "work ran on %d threads, the limit is %d", distinct,
              THREADS);
    CHECK_MSG(atomic_load(&most) <= THREADS, "%d ran at once", atomic_load(&most));
    xWorkPoolDestroy(pool);
    xEventLoopDestroy(loop);
}

static void test_a_full_queue_refuses_and_limits_apply_until_a_thread_starts(void) {
    xEventLoop *loop = xEventLoopCreate();
    xWorkPool *pool = xWorkPoolCreate(4, 4);
    CHECK_EQ_INT(xWorkPoolLimit(pool, 0, 2), XERR_INVALID);
    CHECK_EQ_INT(xWorkPoolLimit(pool, 1, 0), XERR_INVALID);
    CHECK_EQ_INT(xWorkPoolLimit(pool, 1, 2), XOK);
    latch_reset();
    int remaining = 3;
    Job running, waiting[2], refused;
    job_init(&running, true, &remaining);
    CHECK_EQ_INT(xWorkPoolSubmit(pool, loop, &running.work), XOK);
    latch_wait_entered(1); /* the one thread has it: the queue is empty again */
    CHECK_EQ_INT(xWorkPoolLimit(pool, 2, 2), XERR_STATE);
    for (int i = 0; i < 2; i++) {
        job_init(&waiting[i], false, &remaining);
        CHECK_EQ_INT(xWorkPoolSubmit(pool, loop, &waiting[i].work), XOK);
    }
    job_init(&refused, false, NULL);
    CHECK_EQ_INT(xWorkPoolSubmit(pool, loop, &refused.work), XERR_BUSY);
    latch_open();
    CHECK_EQ_INT(xEventLoopRun(loop), XOK);
    CHECK(running.ran && waiting[0].ran && waiting[1].ran && !refused.ran);
    CHECK_EQ_INT(refused.done_calls, 0);
    /* One thread ran all three, in order. */
    CHECK(pthread_equal(running.ran_on, waiting[0].ran_on) &&
          pthread_equal(running.ran_on, waiting[1].ran_on));
    xWorkPoolDestroy(pool);
    xEventLoopDestroy(loop);
}

static void test_cancel_takes_only_that_loops_waiting_work(void) {
    xEventLoop *a = xEventLoopCreate(), *b = xEventLoopCreate();
    xWorkPool *pool = xWorkPoolCreate(1, 8);
    latch_reset();
    int remaining_a = 3, remaining_b = 1;
    Job blocker, a1, b1, a2;
    job_init(&blocker, true, &remaining_a);
    job_init(&a1, false, &remaining_a);
    job_init(&b1, false, &remaining_b);
    job_init(&a2, false, &remaining_a);
    CHECK_EQ_INT(xWorkPoolSubmit(pool, a, &blocker.work), XOK);
    latch_wait_entered(1);
    CHECK_EQ_INT(xWorkPoolSubmit(pool, a, &a1.work), XOK);
    CHECK_EQ_INT(xWorkPoolSubmit(pool, b, &b1.work), XOK);
    CHECK_EQ_INT(xWorkPoolSubmit(pool, a, &a2.work), XOK);
    xWorkPoolCancel(pool, a);
    latch_open();
    CHECK_EQ_INT(xEventLoopRun(a), XOK); /* the blocker's done and the two cancelled */
    CHECK_EQ_INT(xEventLoopRun(b), XOK);
    CHECK(!a1.ran && !a2.ran && blocker.ran && b1.ran);
    CHECK_EQ_INT(a1.status, XERR_CLOSED);
    CHECK_EQ_INT(a2.status, XERR_CLOSED);
    CHECK_EQ_INT(blocker.status, XOK);
    CHECK_EQ_INT(b1.status, XOK);
    CHECK(a1.done_calls == 1 && a2.done_calls == 1 && b1.done_calls == 1 && blocker.done_calls == 1);
    xWorkPoolDestroy(pool);
    xEventLoopDestroy(a);
    xEventLoopDestroy(b);
}

static void *open_latch_soon(void *arg) {
    struct timespec pause = {.tv_nsec = 50 * 1000000};
    nanosleep(&pause, NULL);
    latch_open();
    return NULL;
}

static void test_destroy_cancels_waiting_work_and_waits_for_running_work(void) {
    xEventLoop *loop = xEventLoopCreate();
    xWorkPool *pool = xWorkPoolCreate(1, 8);
    latch_reset();
    Job running, waiting[3];
    job_init(&running, true, NULL);
    CHECK_EQ_INT(xWorkPoolSubmit(pool, loop, &running.work), XOK);
    latch_wait_entered(1);
    for (int i = 0; i < 3; i++) {
        job_init(&waiting[i], false, NULL);
        CHECK_EQ_INT(xWorkPoolSubmit(pool, loop, &waiting[i].work), XOK);
    }
    pthread_t opener;
    CHECK(pthread_create(&opener, NULL, open_latch_soon, NULL) == 0);
    xWorkPoolDestroy(pool); /* returns once the running one has ended */
    pthread_join(opener, NULL);
    CHECK(running.ran);
    CHECK_EQ_INT(running.done_calls, 0); /* posted, not yet run: the loop has not turned */
    xEventLoopDestroy(loop);             /* runs what was posted to it */
    CHECK_EQ_INT(running.done_calls, 1);
    CHECK_EQ_INT(running.status, XOK);
    for (int i = 0; i < 3; i++) {
        CHECK(!waiting[i].ran);
        CHECK_EQ_INT(waiting[i].done_calls, 1);
        CHECK_EQ_INT(waiting[i].status, XERR_CLOSED);
    }
}

static void test_a_pool_that_never_worked_starts_no_thread(void) {
    xWorkPool *pool = xWorkPoolCreate(8, 8);
    CHECK(pool != NULL);
    CHECK_EQ_INT(xWorkPoolLimit(pool, 2, 16), XOK); /* possible only while no thread started */
    xWorkPoolDestroy(pool);
    CHECK(xWorkPoolCreate(0, 8) == NULL);
    CHECK(xWorkPoolCreate(1, 0) == NULL);
    xWorkPoolDestroy(NULL);
}

int main(void) {
    RUN(test_work_runs_on_pool_threads_and_its_done_on_the_loop);
    RUN(test_a_full_queue_refuses_and_limits_apply_until_a_thread_starts);
    RUN(test_cancel_takes_only_that_loops_waiting_work);
    RUN(test_destroy_cancels_waiting_work_and_waits_for_running_work);
    RUN(test_a_pool_that_never_worked_starts_no_thread);
    return CHECK_SUMMARY();
}
