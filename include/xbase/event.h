/* xbase/event.h — a single-threaded event loop: fd readiness, timers, I/O calls.
 *
 * One loop runs on one thread. Everything here except xEventLoopPost must
 * be called from the loop's own thread. The I/O backend
 * (io_uring where the kernel allows it, else epoll) sits behind an internal
 * interface; callers never touch it and do their socket I/O through
 * xEventLoopRecv / xEventLoopSendv, so either serves the same connection code. */
#ifndef XBASE_EVENT_H
#define XBASE_EVENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>
#include <sys/uio.h>

#include <xbase/errno.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What this header declares is libxkit.so's API: exported, where the rest is hidden. */
#pragma GCC visibility push(default)

typedef struct xEventLoop xEventLoop;

/** Readiness bits passed to and from watch callbacks. */
enum {
    XEV_READ = 1u << 0,  /**< readable */
    XEV_WRITE = 1u << 1, /**< writable */
    XEV_ERROR = 1u << 2, /**< error or hang-up on the descriptor */
    XEV_EOF = 1u << 3,   /**< the peer closed its side: reads will reach the end */
    /** For xEventLoopAdd: every read of fd goes through xEventLoopRecv, so a
     *  completion backend may receive ahead into its own buffers (XEV_READ
     *  then says bytes wait there). Never reported. */
    XEV_RECV = 1u << 4,
    /** For xEventLoopAdd: edge-triggered (see "Modes" below). Never reported. */
    XEV_EDGE = 1u << 5,
};

/** Called when fd becomes ready; events holds XEV_* bits. */
typedef void (*xEventFn)(xEventLoop *loop, int fd, unsigned events, void *arg);

/** Which I/O backend a loop runs on. */
typedef enum xIoBackend {
    XIO_DEFAULT = 0, /**< the XK_IO environment variable (io_uring or epoll), else io_uring */
    XIO_EPOLL,       /**< epoll */
    XIO_URING,       /**< io_uring; epoll where the kernel refuses it */
} xIoBackend;

/** Creates a loop on the default backend (see XIO_DEFAULT). Where io_uring
 *  is refused (an old kernel, a sysctl, a seccomp profile) the loop runs on
 *  epoll; the first loop of a process to run logs "io: <backend>" and, for epoll,
 *  why. Returns NULL when no backend can be set up. */
xEventLoop *xEventLoopCreate(void);

/** Creates a loop on the backend io asks for, as xEventLoopCreate does. */
xEventLoop *xEventLoopCreateWith(xIoBackend io);

/** "io_uring" or "epoll": the backend loop runs on. */
const char *xEventLoopBackend(const xEventLoop *loop);

/** Destroys a loop that is not running. Watched descriptors are not closed. */
void xEventLoopDestroy(xEventLoop *loop);

/** Runs until xEventLoopStop is called. Returns XOK, or XERR_SYS if waiting failed. */
xErrno xEventLoopRun(xEventLoop *loop);

/** Makes xEventLoopRun return after the current iteration; called before
 *  Run, makes that Run return at once. Loop thread only. */
void xEventLoopStop(xEventLoop *loop);

/* ---- Watching descriptors ----
 *
 * Modes. A watch is level-triggered unless added with XEV_EDGE:
 *
 *  - Level-triggered (the default): fd's callback is called every turn of the
 *    loop for as long as fd is ready for what the watch asks: a socket that
 *    stays writable reports XEV_WRITE turn after turn, one with unread input
 *    XEV_READ, whether the readiness came before or after the watch. This is
 *    what libraries written for poll(2)-style loops expect (libcurl's
 *    multi-socket API, libpq, hiredis, c-ares): they read or write a little,
 *    return, and count on hearing again. A callback that does not want to hear
 *    of a readiness again takes it out of the watch with xEventLoopModify
 *    (ask for XEV_READ only once the output is flushed, say).
 *  - Edge-triggered (XEV_EDGE): the callback hears of a readiness once, when it
 *    arrives, and not again until new readiness arrives, so it must drain what
 *    it reads (or write until EAGAIN), or remember that it did not. It costs
 *    nothing per turn: xKit's own connections, listeners and wake-up
 *    descriptors use it and ask for XEV_READ|XEV_WRITE once for good.
 *
 * XEV_RECV watches are edge-triggered whatever the flags say: their input is
 * told by what the backend received ahead.
 *
 * On epoll a level watch is an ordinary epoll registration and an edge one
 * EPOLLET. On io_uring an edge watch is one multishot poll for the watch's
 * life; a level watch is a one-shot poll armed again after each report (with
 * the next wait, in the same system call), which finds fd still ready and
 * reports it in the next turn: one submission entry per report. */

/** Starts watching fd for the XEV_READ/XEV_WRITE bits in events, plus
 *  XEV_EDGE (edge-triggered; level-triggered without it) and XEV_RECV.
 *  Returns XERR_INVALID for a negative fd or no fn, XERR_SYS when the backend
 *  refuses fd (errno says why; EEXIST: already watched). */
xErrno xEventLoopAdd(xEventLoop *loop, int fd, unsigned events, xEventFn fn, void *arg);

/** Changes what the watch on fd waits for to the XEV_READ/XEV_WRITE bits in
 *  events (0: nothing, for now), keeping its callback, arg and mode; other bits
 *  are ignored. Safe within fd's own callback, and any other. A level watch
 *  reports a readiness newly asked for at the next turn if fd has it; so does
 *  an edge watch, once. Returns XERR_INVALID when fd is not watched,
 *  XERR_SYS when the backend refuses. */
xErrno xEventLoopModify(xEventLoop *loop, int fd, unsigned events);

/** Stops watching fd. Safe to call from within fd's own callback, which may
 *  then add fd (or a new descriptor with its number) again: an event of the
 *  old watch still due that turn may reach the new one, as a readiness it
 *  finds nothing behind (EAGAIN). */
void xEventLoopRemove(xEventLoop *loop, int fd);

/** recv() through the loop's backend. Returns bytes read, 0 at end of stream,
 *  or -1 with errno set (EAGAIN when nothing is there yet). */
ssize_t xEventLoopRecv(xEventLoop *loop, int fd, void *buf, size_t len);

/** Names memory fd's callback touches next after its arg (NULL: none): it is
 *  prefetched with arg before a turn's callbacks run, so the first touches of
 *  hundreds of connections' state overlap instead of stalling one by one. */
void xEventLoopPrefetch(xEventLoop *loop, int fd, const void *next);

/** Whether fd, added with XEV_RECV, may be received ahead. Off (only
 *  before the loop first waits on fd): something else (OpenSSL's handshake)
 *  reads the socket itself. On again (at any time): every read is
 *  xEventLoopRecv's from now on. */
void xEventLoopRecvAhead(xEventLoop *loop, int fd, bool on);

/** Whether the reader of fd (added with XEV_RECV) is about to take much
 *  input (a request body of known length): while on, the backend stops
 *  receiving ahead into its small buffers and the reader's xEventLoopRecv
 *  reads the socket itself, in large reads straight into its own memory.
 *  Off: receiving ahead resumes. Only a matter of cost: reads return the
 *  same bytes either way. */
void xEventLoopRecvBulk(xEventLoop *loop, int fd, bool on);

/** Gathered send through the loop's backend, never raising SIGPIPE. Same
 *  return convention as xEventLoopRecv. */
ssize_t xEventLoopSendv(xEventLoop *loop, int fd, const struct iovec *iov, int iovcnt);

/* ---- Time ---- */

/** Milliseconds on a monotonic clock, sampled once per loop iteration. */
uint64_t xEventLoopNowMs(const xEventLoop *loop);

/** Seconds since the epoch on the wall clock, sampled once per loop iteration. */
time_t xEventLoopWallSeconds(const xEventLoop *loop);

/** Microseconds on the same monotonic clock, sampled once per loop iteration:
 *  to the microsecond once xEventLoopPreciseClock(loop, true), else the
 *  millisecond sample times 1000. */
uint64_t xEventLoopNowUs(const xEventLoop *loop);

/** Whether each iteration samples the monotonic clock to the microsecond
 *  (CLOCK_MONOTONIC, about 20-40 ns through the vDSO) instead of at the
 *  coarse clock's tick (CLOCK_MONOTONIC_COARSE, a few ns, 1 to 4 ms steps).
 *  Off by default; the server turns it on for its access log and duration
 *  histograms. Loop thread only, or before the loop runs. */
void xEventLoopPreciseClock(xEventLoop *loop, bool on);

/* ---- Timers ----
 * A timer is embedded in the caller's own struct, so arming costs no malloc.
 * Re-arming an armed timer is O(1): it happens on every request.
 *
 * Resolution: deadlines fall on a wheel of 8 ms ticks. A timer never fires
 * before its deadline; a loop with nothing else to do sleeps until the end of
 * the tick that holds it, so a timer may fire up to 8 ms late (armed for 1 ms,
 * it fires after 1 to 8 ms; for 500 ms, after 500 to 507 ms), and a busy
 * loop, which looks at the wheel every turn, fires it sooner. The loop's
 * clock (xEventLoopNowMs) is sampled once per turn.
 *
 * Precise timers (xTimerStartPrecise) are for deadlines to the microsecond:
 * a protocol library's retransmission or pacing timer, say. The loop's wait
 * ends at the earliest of them (epoll_pwait2 on epoll, the wait's timespec on
 * io_uring), so on a loop with nothing else to do one fires some tens of
 * microseconds after its deadline (the kernel's timer slack and a wake-up),
 * never before. They cost more than wheel timers: arming reads the clock and
 * walks a sorted list of the precise timers armed (keep them few: tens, not
 * thousands), and while any is armed each turn reads the precise clock (as
 * xEventLoopPreciseClock(loop, true) does). Wheel timers pay nothing for them. */

typedef struct xTimer xTimer;

/** Called once when timer's deadline passes, on the loop's thread; arg is
 *  what xTimerInit was given. It may re-arm, stop or free any timer, its
 *  own included. */
typedef void (*xTimerFn)(xEventLoop *loop, xTimer *timer, void *arg);

/** Every field is private: set them with xTimerInit. Its size is part of the
 *  ABI of any struct that embeds it, which the library's soname versions
 *  (see CHANGELOG.md). */
struct xTimer {
    xTimer *next; /* wheel slot list */
    xTimer *prev;
    uint64_t deadline; /* loop milliseconds; a precise timer's microseconds, marked */
    xTimerFn fn;
    void *arg;
};

/** Prepares a timer before first use: fn(loop, timer, arg) runs each time it
 *  fires. */
void xTimerInit(xTimer *timer, xTimerFn fn, void *arg);

/** Arms (or re-arms) timer to fire after_ms from now. */
void xTimerStart(xEventLoop *loop, xTimer *timer, uint64_t after_ms);

/** Arms (or re-arms) timer to fire after_us microseconds from now (the
 *  moment of the call, read from CLOCK_MONOTONIC), never before; see
 *  "Precise timers" above. xTimerStart, xTimerStop and xTimerActive work on
 *  it as on any timer. */
void xTimerStartPrecise(xEventLoop *loop, xTimer *timer, uint64_t after_us);

/** Disarms timer; harmless when it is not armed. */
void xTimerStop(xEventLoop *loop, xTimer *timer);

/** True while timer is armed. */
bool xTimerActive(const xTimer *timer);

/* ---- Work at the end of a turn ---- */

/** A call the loop makes once, after the events of the turn it was queued in
 *  have all been dispatched: a connection's output gathered during a turn goes
 *  out then, so the turn's work runs back to back and its sends follow it
 *  together. Embedded in its owner, which must outlive the call, so queuing
 *  allocates nothing. */
typedef struct xTurnEnd xTurnEnd;
typedef void (*xTurnEndFn)(xEventLoop *loop, xTurnEnd *call);
struct xTurnEnd {
    xTurnEndFn fn;
    xTurnEnd *next;
    bool queued;
};

/** Queues call (call->fn set) for the end of this turn, after the calls
 *  queued before it; a call already queued stays where it is. One queued by
 *  an end-of-turn call runs in the same turn; one queued while the loop is not
 *  running runs when xEventLoopRun starts, before it waits; calls still queued
 *  when the loop is destroyed run then. */
void xEventLoopAtTurnEnd(xEventLoop *loop, xTurnEnd *call);

/* ---- Cross-thread calls ---- */

typedef void (*xPostFn)(xEventLoop *loop, void *arg);

/** Queues fn(loop, arg) to run on the loop's thread. Callable from any thread.
 *  Calls still queued when the loop is destroyed run then, on the destroying
 *  thread, so one that owns memory can release it; none may be posted after
 *  xEventLoopDestroy has begun. Returns XERR_NOMEM if the call could not be
 *  queued. */
xErrno xEventLoopPost(xEventLoop *loop, xPostFn fn, void *arg);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
