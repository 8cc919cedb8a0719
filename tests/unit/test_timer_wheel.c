/* test_timer_wheel.c — the hashed timer wheel: firing times, re-arming,
 * removal from callbacks, far-future timers, long sleeps, NextTimeout, precise
 * timers to the microsecond, and
 * 100,000 random operations checked against a brute-force model. The loop
 * pointer only passes through the wheel, so these tests use NULL. */
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "xbase/loop/timer_wheel.h"

static xTimerWheel *new_wheel(uint64_t now) {
    xTimerWheel *w = malloc(sizeof *w);
    if (!w) abort();
    xTimerWheelInit(w, now);
    return w;
}

/* ---- Recording callbacks ---- */

typedef struct Item {
    xTimer timer;
    int id;
} Item;

enum { MAX_LOG = 64 };
static int fire_log[MAX_LOG];
static size_t fire_count;

static void record(xEventLoop *loop, xTimer *t, void *arg) {
    Item *it = arg;
    CHECK(&it->timer == t); /* the argument xTimerInit was given */
    if (fire_count < MAX_LOG) fire_log[fire_count] = it->id;
    fire_count++;
}

static void reset_log(void) { fire_count = 0; }

static void init_item(Item *it, int id, xTimerFn fn) {
    xTimerInit(&it->timer, fn, it);
    it->id = id;
}

/* ---- Basics ---- */

static void test_init_and_active(void) {
    xTimer t;
    t.next = t.prev = &t;
    int owner;
    xTimerInit(&t, record, &owner);
    CHECK(t.next == NULL && t.prev == NULL && t.fn == record && t.arg == &owner);
    CHECK(!xTimerActive(&t));

    xTimerWheel *w = new_wheel(0);
    CHECK_EQ_INT(xTimerWheelNextTimeout(w, 0), -1);
    xTimerWheelAdd(w, &t, 100);
    CHECK(xTimerActive(&t));
    CHECK_EQ_INT(w->count, 1);
    xTimerWheelRemove(w, &t);
    CHECK(!xTimerActive(&t));
    CHECK_EQ_INT(w->count, 0);
    xTimerWheelRemove(w, &t); /* harmless when disarmed */
    CHECK_EQ_INT(w->count, 0);
    CHECK_EQ_INT(xTimerWheelNextTimeout(w, 0), -1);
    free(w);
}

static void test_fires_at_its_deadline_never_before(void) {
    xTimerWheel *w = new_wheel(1000);
    Item a, b, c;
    init_item(&a, 1, record);
    init_item(&b, 2, record);
    init_item(&c, 3, record);
    xTimerWheelAdd(w, &a.timer, 1005); /* inside a tick */
    xTimerWheelAdd(w, &b.timer, 1016); /* on a tick boundary */
    xTimerWheelAdd(w, &c.timer, 1017);
    reset_log();
    CHECK_EQ_INT(xTimerWheelAdvance(w, 1004, NULL), 0);
    CHECK_EQ_INT(xTimerWheelAdvance(w, 1005, NULL), 1);
    CHECK(!xTimerActive(&a.timer));
    CHECK_EQ_INT(xTimerWheelAdvance(w, 1015, NULL), 0);
    CHECK_EQ_INT(xTimerWheelAdvance(w, 1016, NULL), 1);
    CHECK_EQ_INT(xTimerWheelAdvance(w, 1016, NULL), 0);
    CHECK_EQ_INT(xTimerWheelAdvance(w, 1018, NULL), 1);
    CHECK_EQ_INT(fire_count, 3);
    CHECK(fire_log[0] == 1 && fire_log[1] == 2 && fire_log[2] == 3);
    CHECK_EQ_INT(w->count, 0);
    free(w);
}

static void test_past_and_present_deadlines_fire_on_the_next_advance(void) {
    xTimerWheel *w = new_wheel(800);
    Item past, now, zero;
    init_item(&past, 1, record);
    init_item(&now, 2, record);
    init_item(&zero, 3, record);
    xTimerWheelAdd(w, &past.timer, 10);
    xTimerWheelAdd(w, &now.timer, 800);
    xTimerWheelAdd(w, &zero.timer, 0);
    CHECK_EQ_INT(xTimerWheelNextTimeout(w, 800), 0);
    reset_log();
    CHECK_EQ_INT(xTimerWheelAdvance(w, 800, NULL), 3);
    CHECK_EQ_INT(w->count, 0);

    xTimerWheelAdvance(w, 803, NULL);
    xTimerWheelAdd(w, &now.timer, 803); /* "now" in the middle of a tick */
    CHECK_EQ_INT(xTimerWheelNextTimeout(w, 803), 0);
    CHECK_EQ_INT(xTimerWheelAdvance(w, 803, NULL), 1);
    free(w);
}

static void test_fires_in_deadline_order_across_ticks(void) {
    xTimerWheel *w = new_wheel(0);
    static const int deadlines[] = {50, 10, 30, 20, 40, 44, 33};
    enum { N = sizeof deadlines / sizeof *deadlines };
    Item items[N];
    for (int i = 0; i < N; i++) {
        init_item(&items[i], deadlines[i], record);
        xTimerWheelAdd(w, &items[i].timer, (uint64_t)deadlines[i]);
    }
    reset_log();
    CHECK_EQ_INT(xTimerWheelAdvance(w, 100, NULL), N);
    /* 33 and 40 share the tick (32, 40]: within a tick, timers fire in arming order. */
    static const int order[] = {10, 20, 30, 40, 33, 44, 50};
    for (int i = 0; i < N; i++) CHECK_EQ_INT(fire_log[i], order[i]);
    free(w);
}

static void test_rearm_moves_the_timer(void) {
    xTimerWheel *w = new_wheel(0);
    Item a;
    init_item(&a, 1, record);
    xTimerWheelAdd(w, &a.timer, 100);
    xTimerWheelAdd(w, &a.timer, 500); /* later */
    CHECK_EQ_INT(w->count, 1);
    reset_log();
    CHECK_EQ_INT(xTimerWheelAdvance(w, 499, NULL), 0);
    CHECK_EQ_INT(xTimerWheelAdvance(w, 500, NULL), 1);

    xTimerWheelAdd(w, &a.timer, 5000);
    xTimerWheelAdd(w, &a.timer, 600); /* earlier */
    CHECK_EQ_INT(xTimerWheelNextTimeout(w, 500), 100);
    CHECK_EQ_INT(xTimerWheelAdvance(w, 600, NULL), 1);
    CHECK_EQ_INT(xTimerWheelAdvance(w, 6000, NULL), 0);
    CHECK_EQ_INT(w->count, 0);
    free(w);
}

static void test_removed_timer_never_fires(void) {
    xTimerWheel *w = new_wheel(0);
    Item a, b;
    init_item(&a, 1, record);
    init_item(&b, 2, record);
    xTimerWheelAdd(w, &a.timer, 50);
    xTimerWheelAdd(w, &b.timer, 50);
    xTimerWheelRemove(w, &a.timer);
    reset_log();
    CHECK_EQ_INT(xTimerWheelAdvance(w, 1000, NULL), 1);
    CHECK_EQ_INT(fire_log[0], 2);
    /* The slot emptied: its bit must be clear and nothing is pending. */
    for (size_t i = 0; i < XTW_SLOTS / 64; i++) CHECK_EQ_INT(w->bitmap[i], 0);
    CHECK_EQ_INT(xTimerWheelNextTimeout(w, 1000), -1);
    free(w);
}

/* ---- Callbacks that touch the wheel ---- */

static xTimerWheel *cb_wheel;
static uint64_t cb_now;
static uint64_t cb_rearm_after;
static Item *cb_victim;

static void rearm_self(xEventLoop *loop, xTimer *t, void *arg) {
    record(loop, t, arg);
    xTimerWheelAdd(cb_wheel, t, cb_now + cb_rearm_after);
}

static void test_callback_rearms_itself(void) {
    xTimerWheel *w = cb_wheel = new_wheel(0);
    Item a;
    init_item(&a, 1, rearm_self);
    xTimerWheelAdd(w, &a.timer, 10);
    reset_log();
    cb_rearm_after = 100;
    cb_now = 20;
    CHECK_EQ_INT(xTimerWheelAdvance(w, cb_now, NULL), 1);
    CHECK(xTimerActive(&a.timer));
    cb_now = 119;
    CHECK_EQ_INT(xTimerWheelAdvance(w, cb_now, NULL), 0);
    cb_now = 120;
    CHECK_EQ_INT(xTimerWheelAdvance(w, cb_now, NULL), 1);
    /* A long jump still fires it once: the re-armed deadline is ahead of now. */
    cb_now = 100000;
    CHECK_EQ_INT(xTimerWheelAdvance(w, cb_now, NULL), 1);

    /* Re-armed for "now": fires once per advance instead of looping. */
    cb_rearm_after = 0;
    cb_now = 100220;
    CHECK_EQ_INT(xTimerWheelAdvance(w, cb_now, NULL), 1);
    CHECK_EQ_INT(xTimerWheelAdvance(w, cb_now, NULL), 1);
    CHECK_EQ_INT(xTimerWheelNextTimeout(w, cb_now), 0);
    cb_now = 100223;
    CHECK_EQ_INT(xTimerWheelAdvance(w, cb_now, NULL), 1);
    CHECK_EQ_INT(fire_count, 6);
    CHECK_EQ_INT(w->count, 1);
    free(w);
}

static void remove_victim(xEventLoop *loop, xTimer *t, void *arg) {
    record(loop, t, arg);
    xTimerWheelRemove(cb_wheel, &cb_victim->timer);
}

static void remove_and_free_victim(xEventLoop *loop, xTimer *t, void *arg) {
    remove_victim(loop, t, arg);
    free(cb_victim);
}

static void test_callback_removes_a_timer_due_in_the_same_advance(void) {
    xTimerWheel *w = cb_wheel = new_wheel(0);
    Item a, b, c;
    init_item(&a, 1, remove_victim);
    init_item(&b, 2, record);
    init_item(&c, 3, record);
    cb_victim = &b;

    /* Same slot. */
    xTimerWheelAdd(w, &a.timer, 40);
    xTimerWheelAdd(w, &b.timer, 40);
    xTimerWheelAdd(w, &c.timer, 40);
    reset_log();
    CHECK_EQ_INT(xTimerWheelAdvance(w, 40, NULL), 2);
    CHECK(fire_log[0] == 1 && fire_log[1] == 3);
    CHECK(!xTimerActive(&b.timer));

    /* Different slots passed in one advance. */
    xTimerWheelAdd(w, &a.timer, 100);
    xTimerWheelAdd(w, &b.timer, 300);
    xTimerWheelAdd(w, &c.timer, 200);
    reset_log();
    CHECK_EQ_INT(xTimerWheelAdvance(w, 1000, NULL), 2);
    CHECK(fire_log[0] == 1 && fire_log[1] == 3);
    CHECK_EQ_INT(w->count, 0);

    /* The victim is freed by the callback: the wheel must not touch it again
     * (AddressSanitizer reports it if it does). */
    Item *heap = malloc(sizeof *heap);
    init_item(heap, 4, record);
    cb_victim = heap;
    a.timer.fn = remove_and_free_victim;
    xTimerWheelAdd(w, &a.timer, 1010);
    xTimerWheelAdd(w, &heap->timer, 1010);
    xTimerWheelAdd(w, &c.timer, 1020);
    reset_log();
    CHECK_EQ_INT(xTimerWheelAdvance(w, 1100, NULL), 2);
    CHECK(fire_log[0] == 1 && fire_log[1] == 3);
    CHECK_EQ_INT(w->count, 0);
    free(w);
}

static void rearm_victim_later(xEventLoop *loop, xTimer *t, void *arg) {
    record(loop, t, arg);
    xTimerWheelAdd(cb_wheel, &cb_victim->timer, cb_now + 50);
}

static void free_self(xEventLoop *loop, xTimer *t, void *arg) {
    record(loop, t, arg);
    xTimerWheelRemove(cb_wheel, t); /* harmless: already disarmed */
    free(t);
}

static void test_callback_postpones_another_or_frees_itself(void) {
    xTimerWheel *w = cb_wheel = new_wheel(0);
    Item a, b;
    init_item(&a, 1, rearm_victim_later);
    init_item(&b, 2, record);
    cb_victim = &b;
    cb_now = 100;
    xTimerWheelAdd(w, &a.timer, 30);
    xTimerWheelAdd(w, &b.timer, 60);
    reset_log();
    CHECK_EQ_INT(xTimerWheelAdvance(w, cb_now, NULL), 1);
    CHECK(xTimerActive(&b.timer));
    CHECK_EQ_INT(xTimerWheelAdvance(w, 149, NULL), 0);
    CHECK_EQ_INT(xTimerWheelAdvance(w, 150, NULL), 1);
    CHECK_EQ_INT(fire_log[1], 2);

    Item *heap = malloc(sizeof *heap);
    init_item(heap, 5, free_self);
    xTimerWheelAdd(w, &heap->timer, 160);
    CHECK_EQ_INT(xTimerWheelAdvance(w, 160, NULL), 1);
    CHECK_EQ_INT(w->count, 0);
    free(w);
}

/* ---- Far future and long sleeps ---- */

static void test_far_future_timer_fires_exactly_when_due(void) {
    const uint64_t start = 123457;
    const uint64_t revolution = (uint64_t)XTW_SLOTS * XTW_TICK_MS;
    xTimerWheel *w = new_wheel(start);
    Item a, b;
    init_item(&a, 1, record);
    init_item(&b, 2, record);
    xTimerWheelAdd(w, &a.timer, start + 100000);         /* three revolutions away */
    xTimerWheelAdd(w, &b.timer, start + revolution + 3); /* just over one */
    reset_log();
    size_t early = 0, late = 0;
    for (uint64_t now = start + 1; now <= start + 100010; now += 3) {
        /* A sleep of timeout would not have overslept a's tick. */
        int64_t timeout = xTimerWheelNextTimeout(w, now);
        if (xTimerActive(&a.timer) && (timeout < 0 || now + (uint64_t)timeout > start + 100000 + XTW_TICK_MS))
            late++;
        size_t before = fire_count;
        xTimerWheelAdvance(w, now, NULL);
        for (size_t i = before; i < fire_count; i++) {
            uint64_t deadline = fire_log[i] == 1 ? start + 100000 : start + revolution + 3;
            if (now < deadline) early++;
            if (now >= deadline + 3) late++; /* this walk advances 3 ms a step */
        }
    }
    CHECK_EQ_INT(fire_count, 2);
    CHECK_EQ_INT(early, 0);
    CHECK_EQ_INT(late, 0);
    free(w);
}

static void test_long_jump_fires_everything_due_once(void) {
    const uint64_t hour = 3600000;
    xTimerWheel *w = new_wheel(5);
    enum { N = 5000 };
    Item *items = malloc(N * sizeof *items);
    for (int i = 0; i < N; i++) {
        init_item(&items[i], i, record);
        /* Spread over two hours: half are due after the jump, half are not. */
        xTimerWheelAdd(w, &items[i].timer, 5 + (uint64_t)i * (2 * hour / N));
    }
    reset_log();
    CHECK_EQ_INT(xTimerWheelAdvance(w, 5 + hour, NULL), N / 2 + 1);
    int wrong = 0;
    for (int i = 0; i < N; i++) wrong += xTimerActive(&items[i].timer) != (i > N / 2);
    CHECK_EQ_INT(wrong, 0);
    CHECK_EQ_INT(w->count, N / 2 - 1);
    CHECK_EQ_INT(xTimerWheelAdvance(w, 5 + hour, NULL), 0);
    CHECK_EQ_INT(xTimerWheelAdvance(w, 5 + 3 * hour, NULL), N / 2 - 1);
    CHECK_EQ_INT(w->count, 0);
    free(items);
    free(w);
}

static void test_never_deadline_does_not_wrap(void) {
    xTimerWheel *w = new_wheel(1000);
    Item a;
    init_item(&a, 1, record);
    xTimerWheelAdd(w, &a.timer, UINT64_MAX);
    CHECK_EQ_INT(xTimerWheelAdvance(w, 1000 + 10 * 3600000ull, NULL), 0);
    int64_t timeout = xTimerWheelNextTimeout(w, 1000 + 10 * 3600000ull);
    CHECK(timeout > 0 && timeout <= XTW_SLOTS * XTW_TICK_MS);
    free(w);
}

/* ---- Driven like the event loop ---- */

static uint64_t loop_now;
static size_t loop_late, loop_early;

static void check_punctual(xEventLoop *loop, xTimer *t, void *arg) {
    if (loop_now < t->deadline) loop_early++;
    if (loop_now >= t->deadline + XTW_TICK_MS) loop_late++;
    fire_count++;
}

/* Sleeping exactly NextTimeout each time, as the loop does, every timer fires
 * at or after its deadline and less than one tick later. */
static void test_sleeping_next_timeout_fires_within_a_tick(void) {
    enum { N = 3000 };
    loop_now = 77;
    xTimerWheel *w = new_wheel(loop_now);
    Item *items = malloc(N * sizeof *items);
    srand(7);
    for (int i = 0; i < N; i++) {
        init_item(&items[i], i, check_punctual);
        xTimerWheelAdd(w, &items[i].timer, loop_now + (uint64_t)(rand() % 120000));
    }
    reset_log();
    loop_late = loop_early = 0;
    size_t wakeups = 0, idle_spins = 0;
    for (int64_t timeout; (timeout = xTimerWheelNextTimeout(w, loop_now)) >= 0 && wakeups < 10 * N;
         wakeups++) {
        loop_now += (uint64_t)timeout;
        size_t fired = xTimerWheelAdvance(w, loop_now, NULL);
        idle_spins += timeout == 0 && fired == 0;
    }
    CHECK_EQ_INT(fire_count, N);
    CHECK_EQ_INT(loop_early, 0);
    CHECK_EQ_INT(loop_late, 0);
    CHECK_EQ_INT(idle_spins, 0);
    free(items);
    free(w);
}

/* ---- Random operations against a brute-force model ----
 * Each fire is checked as it happens; the model's whole state, NextTimeout
 * against the true earliest deadline, and "nothing due left behind" are
 * checked every check_every operations (each costs a pass over all timers). */

typedef struct ModelTimer {
    xTimer timer;
    int id;
    bool armed;
    uint64_t deadline;
    uint64_t armed_in; /* the advance whose callback armed it, or 0 */
} ModelTimer;

static ModelTimer *model;
static int model_size;
static xTimerWheel *model_wheel;
static uint64_t model_now, model_advance, model_fired;
static size_t model_bad_fires;
static unsigned model_rng = 99;

static unsigned model_rand(unsigned n) {
    model_rng = model_rng * 1664525u + 1013904223u;
    return (model_rng >> 8) % n;
}

static void model_arm(ModelTimer *m, uint64_t deadline, uint64_t in_advance) {
    xTimerWheelAdd(model_wheel, &m->timer, deadline);
    m->armed = true;
    m->deadline = deadline;
    m->armed_in = in_advance;
}

static void model_remove(ModelTimer *m) {
    xTimerWheelRemove(model_wheel, &m->timer);
    m->armed = false;
}

/* Fires must be for armed, due timers not armed during this same advance.
 * Some timers then re-arm themselves, cancel one or re-arm another. */
static void model_fire(xEventLoop *loop, xTimer *t, void *arg) {
    ModelTimer *m = arg;
    if (!m->armed || m->deadline > model_now || m->armed_in == model_advance) model_bad_fires++;
    m->armed = false;
    model_fired++;
    if (m->id % 5 == 0) model_arm(m, model_now + 1 + model_rand(5000), model_advance);
    if (m->id % 7 == 0) model_remove(&model[(m->id + 1) % model_size]);
    if (m->id % 11 == 0)
        model_arm(&model[(m->id + 3) % model_size], model_now + model_rand(40) - 8, model_advance);
}

static uint64_t random_deadline(void) {
    unsigned kind = model_rand(10);
    if (kind < 4) return model_now + model_rand(100);
    if (kind < 6) return model_now + model_rand(2000);
    if (kind < 9) return model_now + model_rand(3 * XTW_SLOTS * XTW_TICK_MS);
    return model_now > 50 ? model_now - model_rand(50) : 0; /* already past */
}

/* After an advance nothing due is left, except what its callbacks armed. */
static size_t model_check_nothing_due(void) {
    size_t wrong = 0;
    for (int i = 0; i < model_size; i++) {
        const ModelTimer *m = &model[i];
        wrong += m->armed && m->deadline <= model_now && m->armed_in != model_advance;
    }
    return wrong;
}

/* The whole state: counts, links and bits. */
static size_t model_check_state(void) {
    size_t wrong = 0, armed = 0;
    for (int i = 0; i < model_size; i++) {
        const ModelTimer *m = &model[i];
        armed += m->armed;
        if (m->armed != xTimerActive(&m->timer)) wrong++;
    }
    if (armed != model_wheel->count) wrong++;
    size_t linked = 0;
    for (size_t s = 0; s < XTW_SLOTS; s++) {
        const xTimer *head = &model_wheel->slots[s];
        bool bit = (model_wheel->bitmap[s / 64] >> (s % 64)) & 1;
        if (bit != (head->next != head)) wrong++;
        for (const xTimer *t = head->next; t != head; t = t->next) {
            if (t->next->prev != t) wrong++;
            if (t->deadline < head->deadline) wrong++; /* the slot's bound is a lower bound */
            linked++;
        }
    }
    if (linked != armed) wrong++;
    return wrong;
}

/* NextTimeout never sleeps past the tick of the earliest deadline and is 0
 * when something is due. Right after an advance it is positive when nothing is
 * due, so the loop cannot spin; in between, a removal may leave it saying 0
 * once (an early wake-up). */
static size_t model_check_timeout(bool just_advanced) {
    bool any = false;
    uint64_t earliest = UINT64_MAX;
    for (int i = 0; i < model_size; i++) {
        if (model[i].armed && model[i].deadline < earliest) earliest = model[i].deadline;
        any |= model[i].armed;
    }
    int64_t timeout = xTimerWheelNextTimeout(model_wheel, model_now);
    if (!any) return timeout != -1;
    if (timeout < 0) return 1;
    if (earliest <= model_now) return timeout != 0;
    uint64_t tick_end = (earliest + XTW_TICK_MS - 1) / XTW_TICK_MS * XTW_TICK_MS;
    return (just_advanced && timeout == 0) || model_now + (uint64_t)timeout > tick_end;
}

static void run_model(int timers, int ops, int check_every) {
    model_size = timers;
    model = calloc((size_t)timers, sizeof *model);
    model_now = 1000000;
    model_wheel = new_wheel(model_now);
    for (int i = 0; i < model_size; i++) {
        xTimerInit(&model[i].timer, model_fire, &model[i]);
        model[i].id = i;
    }
    size_t bad_state = 0, bad_timeout = 0, bad_count = 0;
    model_advance = 0;
    model_fired = 0;
    model_bad_fires = 0;
    for (int op = 0; op < ops; op++) {
        unsigned kind = model_rand(1000);
        ModelTimer *m = &model[model_rand((unsigned)model_size)];
        bool advanced = kind >= 600;
        if (kind < 450) {
            model_arm(m, random_deadline(), 0);
        } else if (kind < 600) {
            model_remove(m);
        } else {
            /* Mostly a few ms; now and then a sleep of up to 200 s. */
            model_now += kind < 997 ? model_rand(25) : model_rand(200000);
            model_advance = (uint64_t)op + 1;
            uint64_t fired_before = model_fired;
            size_t returned = xTimerWheelAdvance(model_wheel, model_now, NULL);
            bad_count += returned != model_fired - fired_before;
        }
        if (op % check_every == 0) {
            if (advanced) bad_state += model_check_nothing_due();
            bad_timeout += model_check_timeout(advanced);
        }
        if (op % (check_every * 100) == 0) bad_state += model_check_state();
    }
    bad_state += model_check_state();
    CHECK_EQ_INT(model_bad_fires, 0);
    CHECK_EQ_INT(bad_count, 0);
    CHECK_EQ_INT(bad_state, 0);
    CHECK_EQ_INT(bad_timeout, 0);
    CHECK(model_fired > (uint64_t)ops / 10); /* the mix really exercises firing */
    free(model_wheel);
    free(model);
}

/* Few timers, so slots collide constantly; everything checked after every step. */
static void test_100k_operations_on_1000_timers_agree_with_a_model(void) { run_model(1000, 100000, 1); }

/* One timer at every distance up to a revolution, from moments at different
 * places in a bitmap word (a word's first slot, its middle, its last): the
 * wait ends at the start of the timer's tick, found through the busy words
 * however far away, the farthest in the same word as now, behind it. */
static void test_next_timeout_finds_a_timer_at_any_distance(void) {
    const uint64_t starts[] = {0, 333, 8 * 64 * 5 + 8 * 63 + 5, 8 * 70 + 3, 8 * 4095};
    for (size_t i = 0; i < sizeof starts / sizeof *starts; i++) {
        uint64_t now = starts[i];
        xTimerWheel *w = new_wheel(now);
        Item it;
        init_item(&it, 1, record);
        for (uint64_t d = 1; d < (uint64_t)(XTW_SLOTS - 1) * XTW_TICK_MS; d += 7) {
            xTimerWheelAdd(w, &it.timer, now + d);
            uint64_t tick = (now + d + XTW_TICK_MS - 1) / XTW_TICK_MS;
            CHECK_MSG(xTimerWheelNextTimeout(w, now) == (int64_t)(tick * XTW_TICK_MS - now),
                      "now %llu, deadline +%llu: %lld", (unsigned long long)now, (unsigned long long)d,
                      (long long)xTimerWheelNextTimeout(w, now));
            xTimerWheelRemove(w, &it.timer);
        }
        CHECK_EQ_INT(xTimerWheelNextTimeout(w, now), -1);
        free(w);
    }
}

/* Precise timers on a virtual clock: the loop's wait is told exactly how many
 * microseconds remain until the earliest one (not rounded to a tick), and an
 * advance fires exactly those whose deadline has come, earliest first. */
static void test_precise_timers_wait_and_fire_to_the_microsecond(void) {
    xTimerWheel *w = new_wheel(0);
    Item a, b, c;
    init_item(&a, 1, record);
    init_item(&b, 2, record);
    init_item(&c, 3, record);
    reset_log();
    CHECK(!xTimerWheelHasPrecise(w));
    xTimerWheelAddPrecise(w, &b.timer, 1000550); /* armed out of order */
    xTimerWheelAddPrecise(w, &a.timer, 1000250);
    xTimerWheelAddPrecise(w, &c.timer, 1000850);
    CHECK(xTimerWheelHasPrecise(w));
    CHECK_EQ_INT(xTimerWheelNextPrecise(w, 1000000), 250);
    CHECK_EQ_INT(xTimerWheelAdvancePrecise(w, 1000249, NULL), 0);
    CHECK_EQ_INT(xTimerWheelNextPrecise(w, 1000249), 1);
    CHECK_EQ_INT(xTimerWheelAdvancePrecise(w, 1000250, NULL), 1);
    CHECK_EQ_INT(fire_log[0], 1);
    CHECK_EQ_INT(xTimerWheelNextPrecise(w, 1000250), 300);
    xTimerWheelRemove(w, &b.timer);
    CHECK_EQ_INT(xTimerWheelNextPrecise(w, 1000250), 600);
    CHECK_EQ_INT(xTimerWheelNextPrecise(w, 1000900), 0); /* overdue: wait not at all */
    CHECK_EQ_INT(xTimerWheelAdvancePrecise(w, 1000900, NULL), 1);
    CHECK_EQ_INT(fire_count, 2);
    CHECK_EQ_INT(fire_log[1], 3);
    CHECK(!xTimerWheelHasPrecise(w));
    free(w);
}

/* The scale of a busy server; full checks every 250 operations. */
static void test_100k_timers_agree_with_a_model(void) { run_model(100000, 300000, 250); }

int main(void) {
    RUN(test_init_and_active);
    RUN(test_fires_at_its_deadline_never_before);
    RUN(test_past_and_present_deadlines_fire_on_the_next_advance);
    RUN(test_fires_in_deadline_order_across_ticks);
    RUN(test_rearm_moves_the_timer);
    RUN(test_removed_timer_never_fires);
    RUN(test_callback_rearms_itself);
    RUN(test_callback_removes_a_timer_due_in_the_same_advance);
    RUN(test_callback_postpones_another_or_frees_itself);
    RUN(test_far_future_timer_fires_exactly_when_due);
    RUN(test_long_jump_fires_everything_due_once);
    RUN(test_never_deadline_does_not_wrap);
    RUN(test_sleeping_next_timeout_fires_within_a_tick);
    RUN(test_precise_timers_wait_and_fire_to_the_microsecond);
    RUN(test_next_timeout_finds_a_timer_at_any_distance);
    RUN(test_100k_operations_on_1000_timers_agree_with_a_model);
    RUN(test_100k_timers_agree_with_a_model);
    return CHECK_SUMMARY();
}
