/* stream_table.c — the id-indexed stream table of stream_table.h. */
#include "xhttp/http2/stream_table.h"

#include <stdlib.h>

#define INITIAL_SLOTS 16

static size_t home(const xH2StreamTable *t, int32_t id) { return ((uint32_t)id >> 1) & t->mask; }

void *xH2TableFind(const xH2StreamTable *t, int32_t id) {
    if (!t->slots) return NULL;
    for (size_t i = home(t, id);; i = (i + 1) & t->mask) {
        if (t->slots[i].id == id) return t->slots[i].stream;
        if (!t->slots[i].id) return NULL;
    }
}

static void place(xH2StreamTable *t, int32_t id, void *stream) {
    size_t i = home(t, id);
    size_t at = i;
    while (t->slots[at].id) at = (at + 1) & t->mask;
    t->slots[at] = (xH2Slot){id, stream};
    t->displaced += at != i;
}

/* Kept out of xH2TableAdd, which every stream runs: inlined, its rare call
 * made every add save and restore registers. */
__attribute__((noinline)) static bool grow(xH2StreamTable *t) {
    size_t n = t->slots ? (t->mask + 1) * 2 : INITIAL_SLOTS;
    xH2Slot *old = t->slots;
    size_t old_n = old ? t->mask + 1 : 0;
    if (!(t->slots = calloc(n, sizeof *t->slots))) {
        t->slots = old;
        return false;
    }
    t->mask = n - 1;
    t->displaced = 0;
    for (size_t i = 0; i < old_n; i++)
        if (old[i].id) place(t, old[i].id, old[i].stream);
    free(old);
    return true;
}

bool xH2TableAdd(xH2StreamTable *t, int32_t id, void *stream) {
    if ((!t->slots || (t->count + 1) * 2 > t->mask + 1) && !grow(t)) return false;
    place(t, id, stream);
    t->count++;
    return true;
}

void xH2TableRemove(xH2StreamTable *t, int32_t id) {
    if (!t->slots) return;
    size_t i = home(t, id);
    while (t->slots[i].id != id) {
        if (!t->slots[i].id) return;
        i = (i + 1) & t->mask;
    }
    t->count--;
    if (i != home(t, id)) {
        t->displaced--;
    } else if (!t->displaced) {
        t->slots[i] = (xH2Slot){0, NULL}; /* no entry waits to move back into it */
        return;
    }
    /* Backward shift: later entries of the run move up if their home allows. */
    for (size_t j = (i + 1) & t->mask; t->slots[j].id; j = (j + 1) & t->mask) {
        size_t h = home(t, t->slots[j].id);
        bool movable = i <= j ? (h <= i || h > j) : (h <= i && h > j);
        if (movable) {
            t->slots[i] = t->slots[j];
            t->displaced -= h == i; /* back home */
            i = j;
        }
    }
    t->slots[i] = (xH2Slot){0, NULL};
}

void xH2TableFree(xH2StreamTable *t) {
    free(t->slots);
    *t = (xH2StreamTable){0};
}
