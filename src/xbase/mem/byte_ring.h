/* byte_ring.h — strings written into and read out of a ring of bytes, wrapping at
 * its end. HPACK's and QPACK's dynamic tables keep their entries' names and values
 * in one such ring each (each entry's offset and lengths kept beside it), so an
 * insert costs one or two copies and no allocation. */
#ifndef XBASE_MEM_BYTE_RING_H
#define XBASE_MEM_BYTE_RING_H

#include <stddef.h>
#include <string.h>

/** Writes s's n bytes (n <= cap, s not in the ring) at head into the ring of cap
 *  bytes; returns where the next string goes. */
static inline size_t xByteRingWrite(char *ring, size_t cap, size_t head, const char *s, size_t n) {
    size_t room = cap - head;
    if (n <= room) {
        memcpy(ring + head, s, n);
    } else {
        memcpy(ring + head, s, room);
        memcpy(ring, s + room, n - room);
    }
    return (head + n) % cap;
}

/** Copies the n bytes at offset at of the ring of cap bytes (n <= cap) into out. */
static inline void xByteRingRead(const char *ring, size_t cap, size_t at, char *out, size_t n) {
    size_t room = cap - at;
    if (n <= room) {
        memcpy(out, ring + at, n);
    } else {
        memcpy(out, ring + at, room);
        memcpy(out + room, ring, n - room);
    }
}

#endif
