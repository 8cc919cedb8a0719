/* test_h2_stream_table.c — the HTTP/2 stream table (stream_table.h) against a
 * plain list of what it should hold: a client's rising window of streams, ids
 * that share a home slot (so entries sit away from home and must shift back on
 * removal), growth, and random adds and removes, checked by every lookup. */
#include <stdlib.h>

#include "check.h"
#include "xhttp/http2/stream_table.h"

#define MAX_IDS 4096

/* The reference: present[id / 2] says whether id is in the table. */
static bool present[MAX_IDS];

static void *value_of(int32_t id) { return (void *)(intptr_t)(id * 3); }

static bool agrees(const xH2StreamTable *t) {
    size_t count = 0;
    for (int32_t half = 0; half < MAX_IDS; half++) {
        int32_t id = half * 2 + 1;
        void *want = present[half] ? value_of(id) : NULL;
        if (xH2TableFind(t, id) != want) return false;
        count += present[half];
    }
    return count == t->count;
}

static void add(xH2StreamTable *t, int32_t id) {
    CHECK(xH2TableAdd(t, id, value_of(id)));
    present[id / 2] = true;
}

static void del(xH2StreamTable *t, int32_t id) {
    xH2TableRemove(t, id);
    present[id / 2] = false;
}

static void reset(xH2StreamTable *t) {
    xH2TableFree(t);
    memset(present, 0, sizeof present);
}

static void test_a_rising_window_keeps_every_stream_at_home(void) {
    xH2StreamTable t = {0};
    for (int32_t id = 1; id < 2 * 1000; id += 2) {
        add(&t, id);
        if (id > 2 * 100) del(&t, id - 2 * 100); /* 100 streams open at a time, oldest done first */
    }
    CHECK(t.displaced == 0);
    CHECK(agrees(&t));
    reset(&t);
}

static void test_ids_sharing_a_home_shift_back_when_one_goes(void) {
    xH2StreamTable t = {0};
    add(&t, 1);
    size_t slots = t.mask + 1; /* ids 2 * slots apart share a home */
    int32_t step = (int32_t)(2 * slots);
    add(&t, 1 + step);
    add(&t, 3); /* home taken by 1 + step: displaced too */
    CHECK(t.displaced == 2);
    CHECK(agrees(&t));
    del(&t, 1); /* 1 + step and 3 move back, each into its home */
    CHECK(t.displaced == 0);
    CHECK(agrees(&t));
    add(&t, 1); /* displaced behind 1 + step and 3 */
    CHECK(t.displaced == 1);
    del(&t, 1 + step); /* 3 stays home; 1 moves back into its home */
    CHECK(t.displaced == 0);
    CHECK(agrees(&t));
    del(&t, 1);
    del(&t, 3);
    CHECK(t.count == 0 && agrees(&t));
    reset(&t);
}

static void test_random_adds_and_removes_agree_with_the_list(void) {
    xH2StreamTable t = {0};
    srand(7);
    for (int round = 0; round < 20000; round++) {
        int32_t id = (rand() % MAX_IDS) * 2 + 1;
        if (present[id / 2])
            del(&t, id);
        else if (t.count < 600)
            add(&t, id);
        if (round % 500 == 0) CHECK_MSG(agrees(&t), "round %d", round);
    }
    CHECK(agrees(&t));
    for (int32_t half = 0; half < MAX_IDS; half++)
        if (present[half]) del(&t, half * 2 + 1);
    CHECK(t.count == 0 && t.displaced == 0 && agrees(&t));
    reset(&t);
}

int main(void) {
    RUN(test_a_rising_window_keeps_every_stream_at_home);
    RUN(test_ids_sharing_a_home_shift_back_when_one_goes);
    RUN(test_random_adds_and_removes_agree_with_the_list);
    return CHECK_SUMMARY();
}
