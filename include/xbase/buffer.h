/* xbase/buffer.h — a growable byte buffer (what the JSON writer appends to). */
#ifndef XBASE_BUFFER_H
#define XBASE_BUFFER_H

#include <stdbool.h>
#include <stddef.h>

#include <xbase/errno.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What this header declares is libxkit.so's API: exported, where the rest is hidden. */
#pragma GCC visibility push(default)

/** Bytes data[0, len) of a cap-sized allocation (data NULL when cap is 0). */
typedef struct xBuffer {
    char *data;
    size_t len;
    size_t cap;
} xBuffer;

/** Makes room for at least extra more bytes after len. */
xErrno xBufferReserve(xBuffer *buf, size_t extra);

/** Appends n bytes. */
xErrno xBufferAppend(xBuffer *buf, const void *bytes, size_t n);

/** Drops the first n bytes, moving the rest to the front. */
void xBufferConsume(xBuffer *buf, size_t n);

/** Frees the storage; buf becomes empty. */
void xBufferFree(xBuffer *buf);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
