/* timer_wheel.c — a hashed timing wheel with a bitmap of busy slots.
 *
 * A timer with deadline d sits in the slot of tick ceil(d / XTW_TICK_MS), so
 * everything in a slot is due once its tick has fully passed. wheel->tick is
 * the last tick that has fully passed; the tick in progress is scanned for
 * timers already due, which lets a timer fire on the first advance at or after
 * its deadline rather than at the next tick boundary.
 *
 * Each slot's sentinel keeps, in its otherwise unused deadline field, a lower
 * bound of the deadlines in that slot: exact after a scan, lowered by inserts,
 * left as is by removals. A slot whose bound is still ahead holds nothing due,
 * so neither the tick in progress nor slots of far-future timers are walked
 * again and again. */
#include "xbase/loop/timer_wheel.h"

#define XTW_MASK (XTW_SLOTS - 1)

_Static_assert((XTW_SLOTS & XTW_MASK) == 0 && XTW_SLOTS % 64 == 0,
               "the slot count must be a power of two and fill whole bitmap words");
_Static_assert(XTW_SLOTS / 64 == 64, "busy_words has one bit per bitmap word");

void xTimerInit(xTimer *timer, xTimerFn fn, void *arg) {
    timer->next = NULL;
    timer->prev = NULL;
    timer->deadline = 0;
    timer->fn = fn;
    timer->arg = arg;
}

bool xTimerActive(const xTimer *timer) { return timer->next != NULL; }

/* Rounds up without the overflow of (ms + XTW_TICK_MS - 1), so a deadline of
 * UINT64_MAX ("never") does not wrap round to "now". */
static uint64_t tick_of(uint64_t ms) { return ms / XTW_TICK_MS + (ms % XTW_TICK_MS != 0); }

static void list_init(xTimer *head) { head->next = head->prev = head; }

static void list_append(xTimer *head, xTimer *timer) {
    timer->prev = head->prev;
    timer->next = head;
    head->prev->next = timer;
    head->prev = timer;
}

static void set_busy(xTimerWheel *wheel, size_t slot) {
    wheel->bitmap[slot / 64] |= (uint64_t)1 << (slot % 64);
    wheel->busy_words |= (uint64_t)1 << (slot / 64);
}

static void set_idle(xTimerWheel *wheel, size_t slot) {
    wheel->bitmap[slot / 64] &= ~((uint64_t)1 << (slot % 64));
    if (!wheel->bitmap[slot / 64]) wheel->busy_words &= ~((uint64_t)1 << (slot / 64));
}

/* The slot whose sentinel is head, or XTW_SLOTS when head is not a slot (the
 * local list of due timers inside xTimerWheelAdvance). Comparing addresses as
 * integers lets a timer be removed without knowing which list holds it. */
static size_t slot_of_head(const xTimerWheel *wheel, const xTimer *head) {
    uintptr_t offset = (uintptr_t)head - (uintptr_t)wheel->slots;
    return offset < sizeof wheel->slots ? offset / sizeof(xTimer) : XTW_SLOTS;
}

/* Unlinks timer from whichever list holds it and clears the slot's bit when
 * that leaves the slot empty. */
static void unlink_timer(xTimerWheel *wheel, xTimer *timer) {
    xTimer *prev = timer->prev;
    xTimer *next = timer->next;
    prev->next = next;
    next->prev = prev;
    timer->next = timer->prev = NULL;
    if (prev == next) { /* only the sentinel is left */
        size_t slot = slot_of_head(wheel, prev);
        if (slot < XTW_SLOTS) set_idle(wheel, slot);
    }
}

void xTimerWheelInit(xTimerWheel *wheel, uint64_t now_ms) {
    for (size_t i = 0; i < XTW_SLOTS; i++) {
        list_init(&wheel->slots[i]);
        wheel->slots[i].deadline = UINT64_MAX;
        wheel->slots[i].fn = NULL;
        wheel->slots[i].arg = NULL;
    }
    for (size_t i = 0; i < XTW_SLOTS / 64; i++) wheel->bitmap[i] = 0;
    wheel->busy_words = 0;
    wheel->tick = now_ms / XTW_TICK_MS;
    wheel->count = 0;
    list_init(&wheel->precise);
    wheel->precise.deadline = 0;
    wheel->precise.fn = NULL;
    wheel->precise.arg = NULL;
}

void xTimerWheelAdd(xTimerWheel *wheel, xTimer *timer, uint64_t deadline_ms) {
    if (!timer->next || (timer->deadline & XTW_PRECISE)) wheel->count++; /* new to the wheel */
    if (timer->next) unlink_timer(wheel, timer);
    if (deadline_ms >= XTW_PRECISE) deadline_ms = XTW_PRECISE - 1;
    uint64_t tick = tick_of(deadline_ms);
    /* A past deadline goes to the first slot the next advance scans. */
    if (tick <= wheel->tick) tick = wheel->tick + 1;
    size_t slot = (size_t)(tick & XTW_MASK);
    xTimer *head = &wheel->slots[slot];
    if (head->next == head || deadline_ms < head->deadline) head->deadline = deadline_ms;
    timer->deadline = deadline_ms;
    list_append(head, timer);
    set_busy(wheel, slot);
}

void xTimerWheelRemove(xTimerWheel *wheel, xTimer *timer) {
    if (!timer->next) return;
    unlink_timer(wheel, timer);
    if (!(timer->deadline & XTW_PRECISE)) wheel->count--;
}

void xTimerWheelAddPrecise(xTimerWheel *wheel, xTimer *timer, uint64_t deadline_us) {
    xTimerWheelRemove(wheel, timer);
    timer->deadline = XTW_PRECISE | deadline_us;
    /* From the latest back: a new deadline is most often the latest. */
    xTimer *after = wheel->precise.prev;
    while (after != &wheel->precise && after->deadline > timer->deadline) after = after->prev;
    timer->prev = after;
    timer->next = after->next;
    after->next->prev = timer;
    after->next = timer;
}

uint64_t xTimerWheelNextPrecise(const xTimerWheel *wheel, uint64_t now_us) {
    uint64_t at = wheel->precise.next->deadline & ~XTW_PRECISE;
    return at > now_us ? at - now_us : 0;
}

size_t xTimerWheelAdvancePrecise(xTimerWheel *wheel, uint64_t now_us, xEventLoop *loop) {
    /* The due ones move to a list of their own first, so one re-armed by a
     * callback for a deadline ≤ now fires on the next advance, not in a loop. */
    xTimer due;
    list_init(&due);
    while (wheel->precise.next != &wheel->precise &&
           (wheel->precise.next->deadline & ~XTW_PRECISE) <= now_us) {
        xTimer *t = wheel->precise.next;
        unlink_timer(wheel, t);
        list_append(&due, t);
    }
    size_t fired = 0;
    while (due.next != &due) {
        xTimer *t = due.next;
        unlink_timer(wheel, t);
        fired++;
        t->fn(loop, t, t->arg);
    }
    return fired;
}

/* Offset from tick `from` of the first tick within `span` ticks whose slot is
 * busy, or span when there is none. The rest of from's bitmap word first, then
 * the summary word says which later word holds the next busy slot, so the
 * answer costs the same whether it is 1 tick away or 4,000: the loop asks
 * before every wait, and a busy server's nearest timers (idle and header
 * timeouts) are seconds, hundreds of words, away. */
static uint64_t first_busy(const xTimerWheel *wheel, uint64_t from, uint64_t span) {
    size_t slot = (size_t)(from & XTW_MASK);
    size_t word = slot / 64;
    uint64_t here = wheel->bitmap[word] >> (slot % 64);
    if (here) {
        uint64_t offset = (uint64_t)__builtin_ctzll(here);
        return offset < span ? offset : span;
    }
    uint64_t offset = 64 - slot % 64; /* to the start of the next word */
    if (offset >= span) return span;
    /* Bit k of later is word (word + 1 + k) % 64; the last is this word again,
     * whose busy slots (all before slot) are a revolution away. */
    unsigned turn = (unsigned)((word + 1) % 64);
    uint64_t later = turn ? wheel->busy_words >> turn | wheel->busy_words << (64 - turn) : wheel->busy_words;
    if (!later) return span;
    unsigned k = (unsigned)__builtin_ctzll(later);
    offset += (uint64_t)k * 64 + (uint64_t)__builtin_ctzll(wheel->bitmap[(word + 1 + k) % 64]);
    return offset < span ? offset : span;
}

/* Moves the timers of slot that are due by now_ms to the end of due and makes
 * the slot's bound exact. Timers a revolution or more away share the slot and
 * stay where they are. */
static void collect_due(xTimerWheel *wheel, size_t slot, uint64_t now_ms, xTimer *due) {
    xTimer *head = &wheel->slots[slot];
    if (head->deadline > now_ms) return;
    uint64_t earliest = UINT64_MAX;
    for (xTimer *t = head->next, *next; t != head; t = next) {
        next = t->next;
        if (t->deadline > now_ms) {
            if (t->deadline < earliest) earliest = t->deadline;
            continue;
        }
        unlink_timer(wheel, t);
        list_append(due, t);
    }
    head->deadline = earliest;
}

size_t xTimerWheelAdvance(xTimerWheel *wheel, uint64_t now_ms, xEventLoop *loop) {
    /* Scan the ticks that have passed and the one in progress (or at least the
     * next slot, which holds timers armed with a past deadline); after a long
     * sleep, every slot once. */
    uint64_t from = wheel->tick + 1;
    uint64_t to = tick_of(now_ms);
    uint64_t span = to >= from ? to - from + 1 : 1;
    if (span > XTW_SLOTS) span = XTW_SLOTS;

    xTimer due;
    list_init(&due);
    for (uint64_t off = first_busy(wheel, from, span); off < span;
         off += 1 + first_busy(wheel, from + off + 1, span - off - 1)) {
        collect_due(wheel, (size_t)((from + off) & XTW_MASK), now_ms, &due);
    }
    /* Set before firing, so a callback re-arming for a deadline ≤ now lands in
     * a slot this call no longer scans and fires on the next advance. */
    if (now_ms / XTW_TICK_MS > wheel->tick) wheel->tick = now_ms / XTW_TICK_MS;

    /* Callbacks may remove or re-arm timers still waiting in due: those leave
     * the list through the ordinary unlink, so taking the head each time is safe. */
    size_t fired = 0;
    while (due.next != &due) {
        xTimer *t = due.next;
        unlink_timer(wheel, t);
        wheel->count--;
        fired++;
        t->fn(loop, t, t->arg);
    }
    return fired;
}

int64_t xTimerWheelNextTimeout(const xTimerWheel *wheel, uint64_t now_ms) {
    if (wheel->count == 0) return -1;
    uint64_t from = wheel->tick + 1;
    uint64_t off = first_busy(wheel, from, XTW_SLOTS);
    /* Armed but in no slot: called from a callback while the rest of this
     * advance's due timers wait to fire. */
    if (off == XTW_SLOTS) return 0;
    uint64_t at = (from + off) * XTW_TICK_MS;
    /* Later slots hold nothing due before at. The bound catches a timer due
     * already in this one: armed for a past deadline, or for an earlier moment
     * of the tick in progress. A bound made stale by a removal may say 0 once;
     * the advance that follows rescans the slot and makes it exact. */
    if (at <= now_ms || wheel->slots[(from + off) & XTW_MASK].deadline <= now_ms) return 0;
    /* The slot may hold only timers a revolution or more away: waking at its
     * tick is early, never late. */
    uint64_t wait = at - now_ms;
    return wait > INT32_MAX ? INT32_MAX : (int64_t)wait;
}
