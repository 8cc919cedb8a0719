/* hiredis_on_xkit.h — hiredis's asynchronous API on an xKit event loop: a
 * header to copy. hiredis says when it wants input and output (addRead,
 * delRead, addWrite, delWrite) and when its context goes (cleanup); one
 * level-triggered watch follows, modified as those change, and its callback
 * hands readiness to redisAsyncHandleRead/Write. hiredis 1.0's scheduleTimer
 * (a command or connect timeout) maps onto an xKit timer.
 *
 *   redisAsyncContext *ac = redisAsyncConnect("127.0.0.1", port);
 *   xRedisAttach(loop, ac);   // then redisAsyncCommand as usual */
#ifndef XK_HIREDIS_ON_XKIT_H
#define XK_HIREDIS_ON_XKIT_H

#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <stdlib.h>
#include <xbase/event.h>

typedef struct xRedisWatch {
    xEventLoop *loop;
    redisAsyncContext *ac; /* NULL once hiredis let it go (cleanup) */
    int fd;
    unsigned events; /* XEV_READ/XEV_WRITE hiredis asked for */
    bool watched;
    xTimer timer;
    xTurnEnd free_call; /* frees this at the end of the turn cleanup came in */
} xRedisWatch;

static void xredis_on_socket(xEventLoop *loop, int fd, unsigned events, void *arg) {
    xRedisWatch *w = arg;
    /* Reading may end the context (a disconnect): cleanup then clears w->ac,
     * and w itself lives until the end of the turn. */
    if (w->ac && (events & (XEV_READ | XEV_ERROR))) redisAsyncHandleRead(w->ac);
    if (w->ac && (events & XEV_WRITE)) redisAsyncHandleWrite(w->ac);
}

static void xredis_update(xRedisWatch *w, unsigned events) {
    if (events == w->events || !w->ac) return;
    w->events = events;
    if (!w->watched)
        w->watched = xEventLoopAdd(w->loop, w->fd, events, xredis_on_socket, w) == XOK;
    else
        xEventLoopModify(w->loop, w->fd, events);
}

static void xredis_add_read(void *data) { xredis_update(data, ((xRedisWatch *)data)->events | XEV_READ); }
static void xredis_del_read(void *data) { xredis_update(data, ((xRedisWatch *)data)->events & ~XEV_READ); }
static void xredis_add_write(void *data) { xredis_update(data, ((xRedisWatch *)data)->events | XEV_WRITE); }
static void xredis_del_write(void *data) { xredis_update(data, ((xRedisWatch *)data)->events & ~XEV_WRITE); }

static void xredis_free(xEventLoop *loop, xTurnEnd *call) {
    free((xRedisWatch *)((char *)call - offsetof(xRedisWatch, free_call)));
}

static void xredis_cleanup(void *data) {
    xRedisWatch *w = data;
    if (w->watched) xEventLoopRemove(w->loop, w->fd);
    xTimerStop(w->loop, &w->timer);
    w->watched = false;
    w->ac = NULL;
    xEventLoopAtTurnEnd(w->loop, &w->free_call);
}

#if HIREDIS_MAJOR >= 1
static void xredis_on_timer(xEventLoop *loop, xTimer *timer, void *arg) {
    xRedisWatch *w = arg;
    if (w->ac) redisAsyncHandleTimeout(w->ac);
}

static void xredis_schedule_timer(void *data, struct timeval tv) {
    xRedisWatch *w = data;
    xTimerStart(w->loop, &w->timer, (uint64_t)tv.tv_sec * 1000u + (uint64_t)tv.tv_usec / 1000u);
}
#endif

/* Returns REDIS_OK, or REDIS_ERR when ac already has an event library or
 * there is no memory. */
static int xRedisAttach(xEventLoop *loop, redisAsyncContext *ac) {
    if (ac->ev.data) return REDIS_ERR;
    xRedisWatch *w = calloc(1, sizeof *w);
    if (!w) return REDIS_ERR;
    *w = (xRedisWatch){.loop = loop, .ac = ac, .fd = ac->c.fd, .free_call = {.fn = xredis_free}};
    ac->ev.data = w;
    ac->ev.addRead = xredis_add_read;
    ac->ev.delRead = xredis_del_read;
    ac->ev.addWrite = xredis_add_write;
    ac->ev.delWrite = xredis_del_write;
    ac->ev.cleanup = xredis_cleanup;
#if HIREDIS_MAJOR >= 1
    xTimerInit(&w->timer, xredis_on_timer, w);
    ac->ev.scheduleTimer = xredis_schedule_timer;
#else
    xTimerInit(&w->timer, NULL, w);
#endif
    return REDIS_OK;
}

#endif
