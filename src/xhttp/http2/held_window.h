/* held_window.h — the connection's flow-control window for streamed request
 * bodies that wait for a paused (or slow) reader.
 *
 * A streaming route's body is held by its stream until the reader takes it;
 * its stream's window reopens only then, so a paused reader holds its client
 * back. The connection's window is shared by every stream, though: if it
 * waited too, one paused reader would stall every other upload on the
 * connection. So the connection's window reopens on arrival for held bytes,
 * up to one window's worth per connection, and at release for the rest.
 *
 * Three counters, and what must hold between them:
 *   held          bytes a stream holds for its reader (xH2HeldBody);
 *   returned      of those, the bytes whose connection window already went
 *                 back on arrival (per stream, xH2HeldShare.returned);
 *   conn returned the sum of every stream's returned (xH2HeldWindow.returned).
 * Invariants: returned <= held for each stream; conn returned = Σ returned
 * <= limit (one window). So the window the connection still withholds is
 * Σ (held - returned), and what readers hold stays under two windows: one
 * returned early, one the client could not send past.
 *
 * Only arithmetic lives here; http2.c sends the WINDOW_UPDATEs. */
#ifndef XHTTP_HTTP2_HELD_WINDOW_H
#define XHTTP_HTTP2_HELD_WINDOW_H

#include <stdbool.h>
#include <stddef.h>

/** One connection's account. */
typedef struct xH2HeldWindow {
    size_t returned; /**< Σ of its streams' returned */
    size_t limit;    /**< at most this much returned early: one window */
} xH2HeldWindow;

/** One stream's share of it. */
typedef struct xH2HeldShare {
    size_t returned; /**< of the bytes the stream holds, those already returned */
} xH2HeldShare;

/** len more bytes arrived for a stream to hold. True when their connection
 *  window goes back now (and is counted as returned); false when it waits
 *  for their release. */
static inline bool xH2HeldArrive(xH2HeldWindow *conn, xH2HeldShare *stream, size_t len) {
    if (conn->returned + len > conn->limit) return false;
    conn->returned += len;
    stream->returned += len;
    return true;
}

/** leaving of a stream's held bytes leave, taken by the reader (a piece at
 *  a time) or dropped (all of them); the first of them count as the ones
 *  returned. Returns the connection window still owed for them: the bytes
 *  that did not get it back on arrival. */
static inline size_t xH2HeldLeave(xH2HeldWindow *conn, xH2HeldShare *stream, size_t leaving) {
    size_t early = leaving < stream->returned ? leaving : stream->returned;
    conn->returned -= early;
    stream->returned -= early;
    return leaving - early;
}

#endif
