/* proxy_wait.c — an accepted socket from a trusted network waiting for its
 * PROXY header before any connection is made of it (proxy.h).
 *
 * What has arrived is peeked at; while the header is incomplete every byte
 * there is the header's (v1 ends at its first CRLF, v2 says its length), so
 * those are read into the wait's own buffer, and once it is whole exactly
 * its remaining bytes are read. Nothing after the header is ever taken: a
 * TLS ClientHello (which OpenSSL reads itself) or an HTTP request stays in
 * the socket for the protocol that takes it. The socket is drained of what
 * it was given each time, so a watch of either mode wakes only for new
 * bytes; a sender that stops part-way is closed by the header timeout. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
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
    xNetAddr addr;
    size_t have;              /* header bytes read so far */
    uint8_t head[XPROXY_MAX]; /* they */
};

typedef enum xWaitStep {
    XWAIT_MORE,   /* the header is not whole yet: wait for more bytes */
    XWAIT_ADMIT,  /* hand the socket on with the address in *addr */
    XWAIT_REFUSE, /* close it */
} xWaitStep;

static ssize_t recv_retrying(int fd, uint8_t *buf, size_t len, int flags) {
    ssize_t n;
    do n = recv(fd, buf, len, flags);
    while (n < 0 && errno == EINTR);
    return n;
}

/* Takes what has arrived on fd after the *have bytes of head already read;
 * on XWAIT_ADMIT *addr is the client's. */
static xWaitStep step(int fd, uint8_t *head, size_t *have, const xNetAddr *peer, xNetAddr *addr) {
    ssize_t n = recv_retrying(fd, head + *have, XPROXY_MAX - *have, MSG_PEEK);
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? XWAIT_MORE : XWAIT_REFUSE;
    if (n == 0) return XWAIT_REFUSE; /* gone before its header was whole */
    xProxyHeader header;
    switch (xProxyParse(head, *have + (size_t)n, &header)) {
    case XPROXY_MORE:
        /* All of it is the header's: take it, so the socket is drained. */
        if (recv_retrying(fd, head + *have, (size_t)n, 0) != n) return XWAIT_REFUSE;
        *have += (size_t)n;
        return XWAIT_MORE;
    case XPROXY_NONE:
        XLOG_DEBUG("proxy protocol: a trusted address sent no header; closed");
        return XWAIT_REFUSE;
    case XPROXY_MALFORMED: XLOG_DEBUG("proxy protocol: %s; closed", header.error); return XWAIT_REFUSE;
    case XPROXY_OK: break;
    }
    /* The rest of the header is in the socket (peeked): take exactly it. */
    size_t rest = header.len - *have;
    if (recv_retrying(fd, head + *have, rest, 0) != (ssize_t)rest) return XWAIT_REFUSE;
    *addr = *peer;
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
    xWaitStep outcome = step(fd, w->head, &w->have, &w->addr, &addr);
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

void xProxyWaitStart(xProxyWaits *waits, int fd, const xNetAddr *addr, unsigned tag) {
    /* Most headers came with the connection: no watch, no allocation. */
    uint8_t head[XPROXY_MAX];
    size_t have = 0;
    xNetAddr client;
    switch (step(fd, head, &have, addr, &client)) {
    case XWAIT_ADMIT: waits->admit(waits->arg, tag, fd, &client); return;
    case XWAIT_REFUSE: close(fd); return;
    case XWAIT_MORE: break;
    }
    xProxyWait *w = malloc(sizeof *w);
    if (!w) {
        close(fd);
        return;
    }
    *w = (xProxyWait){.waits = waits, .next = waits->head, .fd = fd, .tag = tag, .addr = *addr, .have = have};
    memcpy(w->head, head, have);
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
