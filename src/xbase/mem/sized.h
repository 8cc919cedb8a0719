/* sized.h — settings structs that grow without breaking callers built
 * against an older header.
 *
 * Such a struct starts with `size_t struct_size`. Its Init function is
 * inline in the public header, so it passes the caller's sizeof to the
 * library, which writes defaults into that many bytes only and records the
 * size. When the library takes the struct, it copies what the caller's
 * version has over its own defaults, and reads nothing past it. */
#ifndef XBASE_MEM_SIZED_H
#define XBASE_MEM_SIZED_H

#include <stddef.h>
#include <string.h>

/** Writes the first size bytes of a full struct of defaults (full_size
 *  bytes, starting with struct_size) into a caller's struct of size bytes,
 *  and records that size in it. Too small to hold struct_size: nothing. */
static inline void xSizedInit(void *dst, size_t size, void *defaults, size_t full_size) {
    if (size < sizeof(size_t)) return;
    if (size > full_size) size = full_size;
    *(size_t *)defaults = size;
    memcpy(dst, defaults, size);
}

/** Copies a caller's struct over dst, which holds this library's defaults
 *  (full_size bytes): as many bytes as the caller's version has. A
 *  struct_size of 0 (filled by hand, no Init) counts as this version's. */
static inline void xSizedAdopt(void *dst, const void *src, size_t full_size) {
    size_t n = *(const size_t *)src;
    if (n == 0 || n > full_size) n = full_size;
    if (n >= sizeof(size_t)) memcpy(dst, src, n);
    *(size_t *)dst = full_size;
}

/** Writes a full struct (full_size bytes) out to a caller's struct of size
 *  bytes, as much of it as the caller's version has. */
static inline void xSizedExport(void *dst, size_t size, void *full, size_t full_size) {
    xSizedInit(dst, size, full, full_size);
}

#endif
