/* timer_wheel.h — O(1) timers for the event loop.
 *
 * A hashed wheel of XTW_SLOTS slots, XTW_TICK_MS each. A timer lives in the
 * slot of its deadline's tick modulo the wheel size; one whose deadline is
 * more than a revolution away stays in its slot and is skipped until due.
 * Insert, re-arm and remove are list splices. A bitmap of non-empty slots
 * and a word saying which of its words are non-zero make finding the next
 * deadline cheap when the loop is about to sleep.
 *
 * Precise timers (deadlines in microseconds) are not on the wheel: they wait
 * in a list sorted by deadline, and their deadline field carries
 * XTW_PRECISE, so stopping or re-arming any timer knows where it is. */
#ifndef XBASE_LOOP_TIMER_WHEEL_H
#define XBASE_LOOP_TIMER_WHEEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <xbase/event.h>

#define XTW_SLOTS 4096
#define XTW_TICK_MS 8
/* Marks a precise timer's deadline (microseconds). Wheel deadlines stay
 * below it: "never" (UINT64_MAX) is kept as XTW_PRECISE - 1, 292 million years. */
#define XTW_PRECISE ((uint64_t)1 << 63)

typedef struct xTimerWheel {
    xTimer slots[XTW_SLOTS];         /* sentinel heads of circular lists */
    uint64_t bitmap[XTW_SLOTS / 64]; /* bit set ⇔ slot list non-empty */
    uint64_t busy_words;             /* bit w set ⇔ bitmap[w] non-zero */
    uint64_t tick;                   /* last tick processed (ms / XTW_TICK_MS) */
    size_t count;                    /* armed timers on the wheel */
    xTimer precise;                  /* sentinel of the precise timers, earliest first */
} xTimerWheel;

/** Prepares an empty wheel whose time starts at now_ms. */
void xTimerWheelInit(xTimerWheel *wheel, uint64_t now_ms);

/** Arms timer for deadline_ms (absolute), unlinking it first if armed.
 *  A deadline in the past fires on the next advance. */
void xTimerWheelAdd(xTimerWheel *wheel, xTimer *timer, uint64_t deadline_ms);

/** Arms timer, a precise one, for deadline_us (absolute, on the clock of
 *  xTimerWheelAdvancePrecise's now_us), unlinking it first if armed. */
void xTimerWheelAddPrecise(xTimerWheel *wheel, xTimer *timer, uint64_t deadline_us);

/** Whether any precise timer is armed. */
static inline bool xTimerWheelHasPrecise(const xTimerWheel *wheel) {
    return wheel->precise.next != &wheel->precise;
}

/** Microseconds from now_us until the earliest precise deadline (0 if due);
 *  only while xTimerWheelHasPrecise. */
uint64_t xTimerWheelNextPrecise(const xTimerWheel *wheel, uint64_t now_us);

/** Fires every precise timer whose deadline is ≤ now_us, as
 *  xTimerWheelAdvance does. Returns how many fired. */
size_t xTimerWheelAdvancePrecise(xTimerWheel *wheel, uint64_t now_us, xEventLoop *loop);

/** Disarms timer if armed. */
void xTimerWheelRemove(xTimerWheel *wheel, xTimer *timer);

/** Fires every timer whose deadline is ≤ now_ms, calling timer->fn(loop,
 *  timer, timer->arg) after unlinking it (the callback may re-arm or remove any timer).
 *  Returns how many fired. */
size_t xTimerWheelAdvance(xTimerWheel *wheel, uint64_t now_ms, xEventLoop *loop);

/** Milliseconds from now_ms until the next armed deadline (rounded up to a
 *  tick, 0 if already due), or -1 when nothing is armed. Capped at INT32_MAX. */
int64_t xTimerWheelNextTimeout(const xTimerWheel *wheel, uint64_t now_ms);

#endif
