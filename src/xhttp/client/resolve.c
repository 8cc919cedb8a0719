/* resolve.c — c-ares on the worker's loop (resolve.h).
 *
 * c-ares tells which sockets it wants watched and for what through its
 * socket-state callback: each becomes a level-triggered watch of the loop
 * (c-ares reads until EAGAIN itself, but a level watch cannot lose a
 * readiness either way). After every call into c-ares its next deadline
 * (ares_timeout) is set on one loop timer, whose firing lets c-ares retry
 * or give up. A lookup's answer is handed on from a zero timer of its own,
 * never from within the call that started it: a name in /etc/hosts is
 * answered synchronously. */
#include "xhttp/client/resolve.h"

#include <ares.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

typedef struct xLookup xLookup;

struct xResolver {
    xEventLoop *loop;
    ares_channel channel;
    xTimer timer; /* c-ares' next deadline */
    xLookup *lookups;
};

struct xLookup {
    xResolver *r;
    xResolveDone done;
    void *arg;
    uint16_t port;
    bool answered;
    xResolvedAddrs addrs;
    char error[64];
    xTimer handoff; /* hands the answer on, on a later turn */
    xLookup *prev, *next;
};

static pthread_once_t library_once = PTHREAD_ONCE_INIT;
static int library_status;

static void library_init(void) { library_status = ares_library_init(ARES_LIB_INIT_ALL); }

/* Sets the timer to c-ares' next deadline, or stops it when none. */
static void rearm(xResolver *r) {
    struct timeval tv;
    if (!ares_timeout(r->channel, NULL, &tv)) {
        xTimerStop(r->loop, &r->timer);
        return;
    }
    uint64_t ms = (uint64_t)tv.tv_sec * 1000 + (uint64_t)(tv.tv_usec + 999) / 1000;
    xTimerStart(r->loop, &r->timer, ms ? ms : 1);
}

static void on_socket_io(xEventLoop *loop, int fd, unsigned events, void *arg) {
    (void)loop;
    xResolver *r = arg;
    bool in = events & (XEV_READ | XEV_ERROR | XEV_EOF), out = events & XEV_WRITE;
    ares_process_fd(r->channel, in ? fd : ARES_SOCKET_BAD, out ? fd : ARES_SOCKET_BAD);
    rearm(r);
}

static void on_deadline(xEventLoop *loop, xTimer *timer, void *arg) {
    (void)loop, (void)timer;
    xResolver *r = arg;
    ares_process_fd(r->channel, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
    rearm(r);
}

/* c-ares opens, changes or closes (both false) a socket's interest. */
static void on_socket_state(void *data, ares_socket_t fd, int readable, int writable) {
    xResolver *r = data;
    unsigned events = (readable ? XEV_READ : 0) | (writable ? XEV_WRITE : 0);
    if (!events) {
        xEventLoopRemove(r->loop, fd);
        return;
    }
    if (xEventLoopModify(r->loop, fd, events) != XOK) xEventLoopAdd(r->loop, fd, events, on_socket_io, r);
}

xResolver *xResolverCreate(xEventLoop *loop, const char *servers, uint32_t timeout_ms) {
    pthread_once(&library_once, library_init);
    if (library_status != ARES_SUCCESS) return NULL;
    xResolver *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->loop = loop;
    xTimerInit(&r->timer, on_deadline, r);
    struct ares_options opts = {.sock_state_cb = on_socket_state,
                                .sock_state_cb_data = r,
                                .timeout = timeout_ms ? (int)timeout_ms : 5000,
                                .tries = 2,
                                .lookups = (char *)"fb"};
    int mask = ARES_OPT_SOCK_STATE_CB | ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES | ARES_OPT_LOOKUPS;
    if (ares_init_options(&r->channel, &opts, mask) != ARES_SUCCESS) {
        free(r);
        return NULL;
    }
    if (servers && *servers && ares_set_servers_ports_csv(r->channel, servers) != ARES_SUCCESS) {
        ares_destroy(r->channel);
        free(r);
        return NULL;
    }
    return r;
}

bool xResolverServersValid(const char *servers) {
    pthread_once(&library_once, library_init);
    if (library_status != ARES_SUCCESS) return false;
    ares_channel channel;
    struct ares_options opts = {.lookups = (char *)"b"};
    if (ares_init_options(&channel, &opts, ARES_OPT_LOOKUPS) != ARES_SUCCESS) return false;
    bool valid = ares_set_servers_ports_csv(channel, servers) == ARES_SUCCESS;
    ares_destroy(channel);
    return valid;
}

static void unlink_lookup(xLookup *l) {
    xResolver *r = l->r;
    if (l->prev)
        l->prev->next = l->next;
    else
        r->lookups = l->next;
    if (l->next) l->next->prev = l->prev;
}

static void free_lookup(xLookup *l) {
    xTimerStop(l->r->loop, &l->handoff);
    unlink_lookup(l);
    free(l);
}

void xResolverDestroy(xResolver *r) {
    if (!r) return;
    /* Lookups c-ares still holds hear ARES_EDESTRUCTION and free themselves. */
    ares_destroy(r->channel);
    while (r->lookups) free_lookup(r->lookups);
    xTimerStop(r->loop, &r->timer);
    free(r);
}

static void on_handoff(xEventLoop *loop, xTimer *timer, void *arg) {
    (void)loop, (void)timer;
    xLookup *l = arg;
    xResolveDone done = l->done;
    void *done_arg = l->arg;
    xResolvedAddrs addrs = l->addrs;
    char error[sizeof l->error];
    memcpy(error, l->error, sizeof error);
    bool ok = addrs.count > 0;
    free_lookup(l);
    done(done_arg, ok ? &addrs : NULL, ok ? NULL : error);
}

/* Copies c-ares' answer, the port put in, into l->addrs. */
static void take_addresses(xLookup *l, const struct ares_addrinfo *ai) {
    xResolvedAddrs *a = &l->addrs;
    bool first = true;
    for (const struct ares_addrinfo_node *n = ai->nodes; n && a->count < XRESOLVE_MAX_ADDRS; n = n->ai_next) {
        if ((n->ai_family != AF_INET && n->ai_family != AF_INET6) || n->ai_addrlen > sizeof a->addr[0])
            continue;
        memcpy(&a->addr[a->count], n->ai_addr, n->ai_addrlen);
        a->len[a->count] = n->ai_addrlen;
        if (n->ai_family == AF_INET)
            ((struct sockaddr_in *)&a->addr[a->count])->sin_port = htons(l->port);
        else
            ((struct sockaddr_in6 *)&a->addr[a->count])->sin6_port = htons(l->port);
        uint32_t ttl = n->ai_ttl > 0 ? (uint32_t)n->ai_ttl : 0;
        if (first || ttl < a->ttl_s) a->ttl_s = ttl;
        first = false;
        a->count++;
    }
}

static void on_answer(void *arg, int status, int timeouts, struct ares_addrinfo *ai) {
    (void)timeouts;
    xLookup *l = arg;
    if (status == ARES_EDESTRUCTION) { /* the resolver is going: xResolverDestroy frees l */
        if (ai) ares_freeaddrinfo(ai);
        return;
    }
    l->answered = true;
    if (status == ARES_SUCCESS && ai) take_addresses(l, ai);
    if (ai) ares_freeaddrinfo(ai);
    if (!l->addrs.count) {
        const char *why = status == ARES_SUCCESS ? "no IPv4 or IPv6 address" : ares_strerror(status);
        strncpy(l->error, why, sizeof l->error - 1);
    }
    xTimerStart(l->r->loop, &l->handoff, 0);
}

bool xResolverLookup(xResolver *r, const char *host, uint16_t port, xResolveDone done, void *arg) {
    xLookup *l = calloc(1, sizeof *l);
    if (!l) return false;
    *l = (xLookup){.r = r, .done = done, .arg = arg, .port = port, .next = r->lookups};
    xTimerInit(&l->handoff, on_handoff, l);
    if (r->lookups) r->lookups->prev = l;
    r->lookups = l;
    /* In the order the server gave them: each is tried in turn anyway, and
     * sorting (RFC 6724) costs a socket per address. */
    struct ares_addrinfo_hints hints = {
        .ai_flags = ARES_AI_NOSORT, .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    ares_getaddrinfo(r->channel, host, NULL, &hints, on_answer, l);
    rearm(r);
    return true;
}
