/* proxy_wait.c — an accepted socket waiting for its PROXY header before any
 * connection is made of it (proxy.h).
 *
 * The header is peeked at (MSG_PEEK) until it is whole, then exactly its
 * bytes are read off, so what follows stays in the socket for TLS (which
 * OpenSSL reads itself) or HTTP. The socket is watched here with a plain
 * readiness watch, never received ahead, and handed on once known; a sender
 * that stops part-way is closed by the header timeout. */
#include <errno.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <xbase/log.h>

#include "xnet/proxy.h"

struct xProxyWait {
    xProxyWaits *waits;
    xProxyWait *prev, *next;
    xTimer timer;
    int fd;
    unsigned tag;
    bool trusted;
    xNetAddr addr;
};

typedef enum xWaitStep {
    XWAIT_MORE,   /* not known yet: wait for more bytes */
    XWAIT_ADMIT,  /* hand the socket on with the address in *addr */
    XWAIT_REFUSE, /* close it */
} xWaitStep;

/* Looks at what has arrived on fd; on XWAIT_ADMIT *addr is the client's. */
static xWaitStep step(int fd, bool trusted, const xNetAddr *peer, xNetAddr *addr) {
    uint8_t buf[XPROXY_MAX];
    ssize_t n;
    do n = recv(fd, buf, sizeof buf, MSG_PEEK);
    while (n < 0 && errno == EINTR);
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? XWAIT_MORE : XWAIT_REFUSE;
    if (n == 0) return XWAIT_REFUSE; /* gone before saying anything */
    *addr = *peer;
    if (!trusted) {
        /* Anyone may connect, but only a trusted proxy may say whom for. */
        switch (xProxySignature(buf, (size_t)n)) {
        case XPROXY_MORE: return XWAIT_MORE;
        case XPROXY_NONE: return XWAIT_ADMIT;
        default:
            XLOG_DEBUG("proxy protocol: a header from an untrusted address; closed");
            return XWAIT_REFUSE;
        }
    }
    xProxyHeader header;
    switch (xProxyParse(buf, (size_t)n, &header)) {
    case XPROXY_MORE: return XWAIT_MORE;
    case XPROXY_NONE:
        XLOG_DEBUG("proxy protocol: a trusted address sent no header; closed");
        return XWAIT_REFUSE;
    case XPROXY_MALFORMED: XLOG_DEBUG("proxy protocol: %s; closed", header.error); return XWAIT_REFUSE;
    case XPROXY_OK: break;
    }
    /* The header's bytes are all in the socket (peeked): take exactly them. */
    do n = recv(fd, buf, header.len, 0);
    while (n < 0 && errno == EINTR);
    if (n != (ssize_t)header.len) return XWAIT_REFUSE;
    if (header.has_address) {
        *addr = header.source;
        addr->local_port = peer->local_port; /* ours, the listener's, as ever */
    }
    return XWAIT_ADMIT;
}

static void finish(xProxyWait *w, xWaitStep outcome, const xNetAddr *addr) {
    xProxyWaits *waits = w->waits;
    if (w->prev)
        w->prev->next = w->next;
    else
        waits->head = w->next;
    if (w->next) w->next->prev = w->prev;
    waits->count--;
    xTimerStop(waits->loop, &w->timer);
    xEventLoopRemove(waits->loop, w->fd);
    int fd = w->fd;
    unsigned tag = w->tag;
    xNetAddr client = *addr;
    free(w);
    if (outcome == XWAIT_ADMIT)
        waits->admit(waits->arg, tag, fd, &client);
    else
        close(fd);
}

static void on_ready(xEventLoop *loop, int fd, unsigned events, void *arg) {
    xProxyWait *w = arg;
    xNetAddr addr = w->addr;
    xWaitStep outcome = step(fd, w->trusted, &w->addr, &addr);
    /* A peer that ended or failed part-way sends no more. */
    if (outcome == XWAIT_MORE && !(events & (XEV_EOF | XEV_ERROR))) return;
    finish(w, outcome == XWAIT_MORE ? XWAIT_REFUSE : outcome, &addr);
}

static void on_timeout(xEventLoop *loop, xTimer *timer, void *arg) {
    xProxyWait *w = arg;
    finish(w, XWAIT_REFUSE, &w->addr);
}

void xProxyWaitsInit(xProxyWaits *waits, xEventLoop *loop, uint32_t timeout_ms, xProxyAdmitFn admit,
                     void *arg) {
    *waits = (xProxyWaits){.loop = loop, .timeout_ms = timeout_ms, .admit = admit, .arg = arg};
}

void xProxyWaitStart(xProxyWaits *waits, int fd, const xNetAddr *addr, bool trusted, unsigned tag) {
    /* Most headers came with the connection: no watch, no allocation. */
    xNetAddr client;
    switch (step(fd, trusted, addr, &client)) {
    case XWAIT_ADMIT: waits->admit(waits->arg, tag, fd, &client); return;
    case XWAIT_REFUSE: close(fd); return;
    case XWAIT_MORE: break;
    }
    xProxyWait *w = malloc(sizeof *w);
    if (!w) {
        close(fd);
        return;
    }
    *w = (xProxyWait){
        .waits = waits, .next = waits->head, .fd = fd, .tag = tag, .trusted = trusted, .addr = *addr};
    if (xEventLoopAdd(waits->loop, fd, XEV_READ, on_ready, w) != XOK) {
        free(w);
        close(fd);
        return;
    }
    if (waits->head) waits->head->prev = w;
    waits->head = w;
    waits->count++;
    xTimerInit(&w->timer, on_timeout, w);
    xTimerStart(waits->loop, &w->timer, waits->timeout_ms);
}

void xProxyWaitsCloseAll(xProxyWaits *waits) {
    while (waits->head) finish(waits->head, XWAIT_REFUSE, &waits->head->addr);
}
