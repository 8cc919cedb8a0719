/* curl_on_xkit.h — libcurl's multi-socket API on an xKit event loop: a
 * header to copy. curl says, per socket, whether it waits for input, output
 * or both (CURLMOPT_SOCKETFUNCTION) and when it next needs to be called
 * (CURLMOPT_TIMERFUNCTION); the loop's level-triggered watches and a timer
 * say when, and curl_multi_socket_action does the work. Level-triggered
 * matters: curl reads or writes a little and returns, counting on hearing
 * again while the socket stays ready.
 *
 *   xCurlLoop cl;
 *   xCurlLoopInit(&cl, loop, multi, on_done, arg);  // on_done(arg, msg) per finished transfer
 *   curl_multi_add_handle(multi, easy);              // and run the loop */
#ifndef XK_CURL_ON_XKIT_H
#define XK_CURL_ON_XKIT_H

#include <curl/curl.h>
#include <xbase/event.h>

typedef void (*xCurlDoneFn)(void *arg, CURLMsg *msg);

typedef struct xCurlLoop {
    xEventLoop *loop;
    CURLM *multi;
    xTimer timer;
    int running;
    xCurlDoneFn done;
    void *arg;
} xCurlLoop;

/* Hands each finished transfer to done. */
static void xcurl_check_done(xCurlLoop *cl) {
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(cl->multi, &left)))
        if (msg->msg == CURLMSG_DONE) cl->done(cl->arg, msg);
}

static void xcurl_on_socket(xEventLoop *loop, int fd, unsigned events, void *arg) {
    xCurlLoop *cl = arg;
    int flags = (events & XEV_READ ? CURL_CSELECT_IN : 0) | (events & XEV_WRITE ? CURL_CSELECT_OUT : 0) |
                (events & XEV_ERROR ? CURL_CSELECT_ERR : 0);
    curl_multi_socket_action(cl->multi, fd, flags, &cl->running);
    xcurl_check_done(cl);
}

static void xcurl_on_timer(xEventLoop *loop, xTimer *timer, void *arg) {
    xCurlLoop *cl = arg;
    curl_multi_socket_action(cl->multi, CURL_SOCKET_TIMEOUT, 0, &cl->running);
    xcurl_check_done(cl);
}

/* CURLMOPT_SOCKETFUNCTION: the first word about a socket adds a watch (its
 * socketp, set by curl_multi_assign, says it has one), later ones modify it,
 * and CURL_POLL_REMOVE, which comes before curl closes it, removes it. */
static int xcurl_socket_fn(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp) {
    xCurlLoop *cl = userp;
    if (what == CURL_POLL_REMOVE) {
        xEventLoopRemove(cl->loop, s);
        curl_multi_assign(cl->multi, s, NULL);
        return 0;
    }
    unsigned events = (what & CURL_POLL_IN ? XEV_READ : 0) | (what & CURL_POLL_OUT ? XEV_WRITE : 0);
    if (socketp) return xEventLoopModify(cl->loop, s, events) == XOK ? 0 : -1;
    if (xEventLoopAdd(cl->loop, s, events, xcurl_on_socket, cl) != XOK) return -1;
    curl_multi_assign(cl->multi, s, cl);
    return 0;
}

/* CURLMOPT_TIMERFUNCTION: -1 stops the timer; 0 asks for a call as soon as
 * the loop can, which a timer due now gives (not a call from in here, which
 * curl forbids). */
static int xcurl_timer_fn(CURLM *multi, long timeout_ms, void *userp) {
    xCurlLoop *cl = userp;
    if (timeout_ms < 0)
        xTimerStop(cl->loop, &cl->timer);
    else
        xTimerStart(cl->loop, &cl->timer, (uint64_t)timeout_ms);
    return 0;
}

static void xCurlLoopInit(xCurlLoop *cl, xEventLoop *loop, CURLM *multi, xCurlDoneFn done, void *arg) {
    *cl = (xCurlLoop){.loop = loop, .multi = multi, .done = done, .arg = arg};
    xTimerInit(&cl->timer, xcurl_on_timer, cl);
    curl_multi_setopt(multi, CURLMOPT_SOCKETFUNCTION, xcurl_socket_fn);
    curl_multi_setopt(multi, CURLMOPT_SOCKETDATA, cl);
    curl_multi_setopt(multi, CURLMOPT_TIMERFUNCTION, xcurl_timer_fn);
    curl_multi_setopt(multi, CURLMOPT_TIMERDATA, cl);
}

#endif
