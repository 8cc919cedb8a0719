/* stream_table.h — a connection's streams by id: open addressing with linear
 * probing, keyed by id / 2 (client ids are odd and rise one step at a time,
 * so consecutive streams take consecutive slots), grown by doubling at half
 * full and emptied by shifting back, so no tombstones pile up. */
#ifndef XHTTP_HTTP2_STREAM_TABLE_H
#define XHTTP_HTTP2_STREAM_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct xH2Slot {
    int32_t id; /* 0: empty */
    void *stream;
} xH2Slot;

typedef struct xH2StreamTable {
    xH2Slot *slots;
    size_t mask; /* slots - 1; the count is a power of two */
    size_t count;
    /* Entries away from their home slot. While there are none, a removal has
     * nothing to shift back: with ids rising one step at a time, a client's
     * window of streams sits each at its home, and the run after a removed
     * one need not be walked. */
    size_t displaced;
} xH2StreamTable;

/** The stream with id, or NULL. */
void *xH2TableFind(const xH2StreamTable *t, int32_t id);

/** Adds stream under id (not yet in t). False when out of memory. */
bool xH2TableAdd(xH2StreamTable *t, int32_t id, void *stream);

/** Removes id, if present. */
void xH2TableRemove(xH2StreamTable *t, int32_t id);

/** Frees the slots. */
void xH2TableFree(xH2StreamTable *t);

#endif
