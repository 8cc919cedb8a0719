/* redis.c — xdb/redis.h: hiredis's asynchronous context driven by an
 * xEventLoop, one per client, remade when it is lost.
 *
 * hiredis says what it waits for through its ev hooks (addRead, addWrite, …)
 * and we follow with one level-triggered watch. Writes are the exception once
 * connected: hiredis asks for a write after every command it buffers, and
 * instead of watching for writability we flush its buffer once, at the end of
 * the loop turn, so the commands of a turn leave together (the watch takes
 * over only when the socket would not take everything).
 *
 * hiredis 0.14 (Debian 12) has no timers and no RESP3: command and connect
 * timeouts are xTimers here. Replies come in order, so a command that times
 * out costs the connection: it is dropped (the commands behind it fail with
 * XREDIS_LOST) and made again. */
#include <xdb/redis.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <xbase/log.h>

#include "xbase/mem/sized.h"

/* Where the client's link to Redis stands. */
typedef enum LinkState {
    LINK_IDLE,       /* no connection: waiting out a backoff, or reconnecting at turn end */
    LINK_CONNECTING, /* a non-blocking connect under way */
    LINK_READY,      /* connected */
    LINK_CLOSED,     /* xRedisClientFree was called; the struct goes once nothing runs */
} LinkState;

struct xRedisCall {
    xRedisClient *client;
    xRedisReplyFn fn; /* NULL once cancelled or answered (a timeout): the reply is dropped */
    void *arg;
    xTimer timer;            /* the command's timeout */
    xRedisFailure failed_as; /* for a call failed at once */
    struct xRedisCall *next; /* on the client's list of calls failed at once */
};

struct xRedisClient {
    xEventLoop *loop;
    xRedisConfig conf;
    char *host;
    LinkState state;
    redisAsyncContext *ac; /* NULL without a connection */
    int fd;
    unsigned events; /* XEV_READ/XEV_WRITE the watch asks for */
    bool watched;
    bool in_write;      /* hiredis asks for more writing from within a write: watch for it */
    bool flush_due;     /* commands buffered this turn */
    bool reconnect_due; /* connect at the end of this turn */
    unsigned failed_connects;
    uint32_t backoff_ms;
    xRedisFailure lost_as; /* what a command gets when the connection goes under it */
    int dispatching;       /* user callbacks running: freeing waits for them */
    xRedisCall *failed_head, *failed_tail;
    xTimer link_timer; /* connect timeout, or the backoff before the next connect */
    xTurnEnd turn_end;
    xRedisStats stats;
};

static void link_connect(xRedisClient *c);

/* ---- replies ---- */

static xRedisReply view_of(const redisReply *r) {
    xRedisReply v = {.type = XREDIS_NIL, .impl = r};
    switch (r->type) {
    case REDIS_REPLY_STRING: v.type = XREDIS_STRING; break;
    case REDIS_REPLY_STATUS: v.type = XREDIS_STATUS; break;
    case REDIS_REPLY_ERROR: v.type = XREDIS_ERROR; break;
    case REDIS_REPLY_INTEGER:
        v.type = XREDIS_INTEGER;
        v.integer = r->integer;
        return v;
    case REDIS_REPLY_ARRAY:
        v.type = XREDIS_ARRAY;
        v.count = r->elements;
        return v;
    default: return v; /* nil */
    }
    v.str = r->str;
    v.len = r->len;
    return v;
}

xRedisReply xRedisReplyElement(const xRedisReply *reply, size_t i) {
    const redisReply *r = reply->impl;
    if (reply->type != XREDIS_ARRAY || !r || i >= r->elements) return (xRedisReply){.type = XREDIS_NIL};
    return view_of(r->element[i]);
}

static const char *failure_text(xRedisFailure failure) {
    switch (failure) {
    case XREDIS_TIMEOUT: return "xkit: redis command timed out";
    case XREDIS_DOWN: return "xkit: redis is down";
    case XREDIS_LOST: return "xkit: redis connection lost";
    case XREDIS_CLOSED: return "xkit: redis client closed";
    default: return "";
    }
}

/* Calls fn with reply, counting the call so that a free inside it waits. */
static void deliver(xRedisClient *c, xRedisReplyFn fn, void *arg, const xRedisReply *reply) {
    c->dispatching++;
    fn(c, reply, arg);
    c->dispatching--;
}

static void deliver_failure(xRedisClient *c, xRedisReplyFn fn, void *arg, xRedisFailure failure) {
    const char *text = failure_text(failure);
    xRedisReply reply = {.type = XREDIS_ERROR, .failure = failure, .str = text, .len = strlen(text)};
    deliver(c, fn, arg, &reply);
}

/* hiredis's callback for every command: the reply, or NULL when the
 * connection went first. */
static void on_reply(redisAsyncContext *ac, void *r, void *privdata) {
    xRedisCall *call = privdata;
    xRedisClient *c = call->client;
    xRedisReplyFn fn = call->fn;
    void *arg = call->arg;
    xTimerStop(c->loop, &call->timer);
    free(call);
    if (!fn) return;
    if (!r) {
        deliver_failure(c, fn, arg, c->lost_as);
        return;
    }
    xRedisReply reply = view_of(r);
    deliver(c, fn, arg, &reply);
}

/* ---- the watch: hiredis's ev hooks ---- */

static void on_socket(xEventLoop *loop, int fd, unsigned events, void *arg);

static void watch_set(xRedisClient *c, unsigned events) {
    if (events == c->events || !c->ac) return;
    c->events = events;
    if (!c->watched)
        c->watched = xEventLoopAdd(c->loop, c->fd, events, on_socket, c) == XOK;
    else
        xEventLoopModify(c->loop, c->fd, events);
}

static void write_now(xRedisClient *c) {
    c->in_write = true;
    if (c->state == LINK_READY) c->stats.writes++;
    redisAsyncHandleWrite(c->ac);
    c->in_write = false;
}

static void on_socket(xEventLoop *loop, int fd, unsigned events, void *arg) {
    xRedisClient *c = arg;
    redisAsyncContext *ac = c->ac;
    if (!ac) return;
    if (c->state == LINK_CONNECTING) { /* the connect's outcome: hiredis reads it on write */
        write_now(c);
        return;
    }
    if (events & (XEV_READ | XEV_ERROR | XEV_EOF)) redisAsyncHandleRead(ac);
    if (c->ac == ac && (events & XEV_WRITE)) write_now(c);
}

static void hook_add_read(void *data) {
    xRedisClient *c = data;
    watch_set(c, c->events | XEV_READ);
}

static void hook_del_read(void *data) {
    xRedisClient *c = data;
    watch_set(c, c->events & ~XEV_READ);
}

static void hook_add_write(void *data) {
    xRedisClient *c = data;
    if (c->state == LINK_READY && !c->in_write) {
        c->flush_due = true; /* a command was buffered: it leaves with the turn's others */
        xEventLoopAtTurnEnd(c->loop, &c->turn_end);
        return;
    }
    watch_set(c, c->events | XEV_WRITE);
}

static void hook_del_write(void *data) {
    xRedisClient *c = data;
    watch_set(c, c->events & ~XEV_WRITE);
}

/* hiredis lets the context go: forget the watch (the descriptor closes next). */
static void hook_cleanup(void *data) {
    xRedisClient *c = data;
    if (c->watched) xEventLoopRemove(c->loop, c->fd);
    c->watched = false;
    c->events = 0;
    c->ac = NULL;
    c->flush_due = false;
}

/* ---- the link ---- */

/* Logs a failed connect: the first of a streak as a warning, the rest (one per backoff) for debugging. */
static void retry_later(xRedisClient *c, const char *why) {
    if (c->failed_connects == 0)
        XLOG_WARN("redis: cannot connect to %s:%u (%s); retrying with backoff", c->host, c->conf.port, why);
    else
        XLOG_DEBUG("redis: cannot connect to %s:%u (%s); retrying in %u ms", c->host, c->conf.port, why,
                   c->backoff_ms);
    c->state = LINK_IDLE;
    c->failed_connects++;
    xTimerStart(c->loop, &c->link_timer, c->backoff_ms);
    c->backoff_ms =
        c->backoff_ms * 2 > c->conf.reconnect_max_ms ? c->conf.reconnect_max_ms : c->backoff_ms * 2;
}

static void reconnect_at_turn_end(xRedisClient *c) {
    c->state = LINK_IDLE;
    c->reconnect_due = true;
    xEventLoopAtTurnEnd(c->loop, &c->turn_end);
}

static void on_connect(const redisAsyncContext *ac, int status) {
    xRedisClient *c = ac->ev.data;
    if (c->state != LINK_CONNECTING) return;
    xTimerStop(c->loop, &c->link_timer);
    if (status != REDIS_OK) {
        retry_later(c, ac->errstr); /* hiredis frees the context next: its commands fail as DOWN */
        return;
    }
    if (c->failed_connects) XLOG_INFO("redis: connected to %s:%u", c->host, c->conf.port);
    c->state = LINK_READY;
    c->lost_as = XREDIS_LOST;
    c->failed_connects = 0;
    c->backoff_ms = c->conf.reconnect_min_ms;
    c->stats.connects++;
}

/* Redis closed the connection, or reading it failed (we learn of our own
 * drops here too, with the state already moved on). */
static void on_disconnect(const redisAsyncContext *ac, int status) {
    xRedisClient *c = ac->ev.data;
    if (c->state != LINK_READY) return;
    XLOG_WARN("redis: connection to %s:%u lost (%s); reconnecting", c->host, c->conf.port,
              ac->errstr[0] ? ac->errstr : "closed");
    reconnect_at_turn_end(c);
}

/* Drops the connection now: hiredis runs its commands' callbacks (with
 * c->lost_as) and then cleanup. */
static void link_drop(xRedisClient *c) {
    if (c->ac) redisAsyncFree(c->ac);
}

static void link_connect(xRedisClient *c) {
    redisAsyncContext *ac =
        c->host[0] == '/' ? redisAsyncConnectUnix(c->host) : redisAsyncConnect(c->host, c->conf.port);
    if (!ac || ac->err) {
        retry_later(c, ac ? ac->errstr : "out of memory");
        if (ac) redisAsyncFree(ac);
        return;
    }
    c->ac = ac;
    c->fd = ac->c.fd;
    c->state = LINK_CONNECTING;
    c->lost_as = XREDIS_DOWN;
    ac->ev.data = c;
    ac->ev.addRead = hook_add_read;
    ac->ev.delRead = hook_del_read;
    ac->ev.addWrite = hook_add_write;
    ac->ev.delWrite = hook_del_write;
    ac->ev.cleanup = hook_cleanup;
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    redisAsyncSetConnectCallback(ac, on_connect); /* asks for writability: the connect's end */
    xTimerStart(c->loop, &c->link_timer, c->conf.connect_timeout_ms);
}

/* The link timer: a connect that took too long, or a backoff that is over. */
static void on_link_timer(xEventLoop *loop, xTimer *timer, void *arg) {
    xRedisClient *c = arg;
    if (c->state == LINK_CONNECTING) {
        retry_later(c, "timed out");
        link_drop(c);
    } else if (c->state == LINK_IDLE) {
        link_connect(c);
    }
}

/* ---- the end of a turn: failures told, reconnection, the pipeline's write ---- */

static void deliver_failed_calls(xRedisClient *c) {
    while (c->failed_head) {
        xRedisCall *call = c->failed_head;
        c->failed_head = call->next;
        if (!c->failed_head) c->failed_tail = NULL;
        xRedisReplyFn fn = call->fn;
        void *arg = call->arg;
        xRedisFailure failure = call->failed_as;
        free(call);
        if (fn) deliver_failure(c, fn, arg, failure);
    }
}

static void client_release(xRedisClient *c) {
    free(c->host);
    free(c);
}

static void on_turn_end(xEventLoop *loop, xTurnEnd *turn_end) {
    xRedisClient *c = (xRedisClient *)((char *)turn_end - offsetof(xRedisClient, turn_end));
    deliver_failed_calls(c);
    if (c->state == LINK_IDLE && c->reconnect_due) {
        c->reconnect_due = false;
        link_connect(c);
    }
    if (c->state == LINK_READY && c->flush_due && c->ac) {
        c->flush_due = false;
        write_now(c);
    }
    if (c->state == LINK_CLOSED && c->dispatching == 0 && !turn_end->queued) client_release(c);
}

/* ---- the API ---- */

static xRedisConfig config_defaults(void) {
    return (xRedisConfig){
        .struct_size = sizeof(xRedisConfig),
        .host = "127.0.0.1",
        .port = 6379,
        .connect_timeout_ms = 1000,
        .command_timeout_ms = 1000,
        .reconnect_min_ms = 100,
        .reconnect_max_ms = 5000,
    };
}

void xRedisConfigInitSized(xRedisConfig *conf, size_t size) {
    xRedisConfig defaults = config_defaults();
    xSizedInit(conf, size, &defaults, sizeof defaults);
}

/* The caller's settings over the defaults, a zero taking its default too. */
static xRedisConfig config_adopt(const xRedisConfig *given) {
    xRedisConfig conf = config_defaults(), mine = {0};
    if (given) xSizedAdopt(&mine, given, sizeof mine);
    if (mine.host) conf.host = mine.host;
    if (mine.port) conf.port = mine.port;
    if (mine.connect_timeout_ms) conf.connect_timeout_ms = mine.connect_timeout_ms;
    if (mine.command_timeout_ms) conf.command_timeout_ms = mine.command_timeout_ms;
    if (mine.reconnect_min_ms) conf.reconnect_min_ms = mine.reconnect_min_ms;
    if (mine.reconnect_max_ms) conf.reconnect_max_ms = mine.reconnect_max_ms;
    if (conf.reconnect_max_ms < conf.reconnect_min_ms) conf.reconnect_max_ms = conf.reconnect_min_ms;
    return conf;
}

xRedisClient *xRedisClientCreate(xEventLoop *loop, const xRedisConfig *given) {
    xRedisConfig conf = config_adopt(given);
    if (!loop || !conf.host[0]) return NULL;
    xRedisClient *c = calloc(1, sizeof *c);
    if (!c || !(c->host = strdup(conf.host))) {
        free(c);
        return NULL;
    }
    c->loop = loop;
    c->conf = conf;
    c->conf.host = c->host;
    c->backoff_ms = c->conf.reconnect_min_ms;
    c->turn_end.fn = on_turn_end;
    xTimerInit(&c->link_timer, on_link_timer, c);
    link_connect(c);
    return c;
}

void xRedisClientFree(xRedisClient *c) {
    if (!c || c->state == LINK_CLOSED) return;
    c->state = LINK_CLOSED;
    c->lost_as = XREDIS_CLOSED;
    xTimerStop(c->loop, &c->link_timer);
    link_drop(c); /* within a reply callback hiredis waits for it to return */
    deliver_failed_calls(c);
    if (c->dispatching == 0 && !c->turn_end.queued)
        client_release(c);
    else
        xEventLoopAtTurnEnd(c->loop, &c->turn_end);
}

static void fail_soon(xRedisClient *c, xRedisCall *call, xRedisFailure failure) {
    call->failed_as = failure;
    if (c->failed_tail)
        c->failed_tail->next = call;
    else
        c->failed_head = call;
    c->failed_tail = call;
    xEventLoopAtTurnEnd(c->loop, &c->turn_end);
}

static void on_call_timeout(xEventLoop *loop, xTimer *timer, void *arg) {
    xRedisCall *call = arg;
    xRedisClient *c = call->client;
    xRedisReplyFn fn = call->fn;
    void *fn_arg = call->arg;
    call->fn = NULL; /* its reply, or hiredis's farewell, finds nobody */
    c->stats.timeouts++;
    if (c->state == LINK_READY) { /* the replies behind it would be out of step: start over */
        XLOG_WARN("redis: a command to %s:%u timed out; reconnecting", c->host, c->conf.port);
        c->state = LINK_IDLE;
        link_drop(c); /* the commands behind it are told LOST; one may free the client */
        if (c->state == LINK_IDLE) link_connect(c); /* at once: fn may send again */
    }
    if (fn) deliver_failure(c, fn, fn_arg, XREDIS_TIMEOUT);
}

/* Commands wait in hiredis while connected, and while a first connect (or
 * one after a clean drop) is under way; after a failed connect they fail. */
static bool accepting(const xRedisClient *c) {
    return c->ac && (c->state == LINK_READY || (c->state == LINK_CONNECTING && c->failed_connects == 0));
}

/* Pub/sub and MONITOR turn a connection into a stream of pushes: hiredis
 * would call one command's callback many times. They need a connection of
 * their own, which this client is not. */
static bool is_streaming(const char *name, size_t len) {
    static const char *const refused[] = {"subscribe", "psubscribe", "ssubscribe", "monitor"};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
        if (len == strlen(refused[i]) && strncasecmp(name, refused[i], len) == 0) return true;
    return false;
}

xRedisCall *xRedisCommand(xRedisClient *c, int argc, const char *const *argv, const size_t *argv_len,
                          uint32_t timeout_ms, xRedisReplyFn fn, void *arg) {
    if (!c || argc < 1 || !argv || !argv[0] || !fn || c->state == LINK_CLOSED) return NULL;
    if (is_streaming(argv[0], argv_len ? argv_len[0] : strlen(argv[0]))) return NULL;
    xRedisCall *call = calloc(1, sizeof *call);
    if (!call) return NULL;
    *call = (xRedisCall){.client = c, .fn = fn, .arg = arg};
    xTimerInit(&call->timer, on_call_timeout, call);
    c->stats.commands++;
    if (!accepting(c) ||
        redisAsyncCommandArgv(c->ac, on_reply, call, argc, (const char **)argv, argv_len) != REDIS_OK) {
        c->stats.down++;
        fail_soon(c, call, XREDIS_DOWN);
        return call;
    }
    xTimerStart(c->loop, &call->timer, timeout_ms ? timeout_ms : c->conf.command_timeout_ms);
    return call;
}

void xRedisCancel(xRedisCall *call) {
    if (!call) return;
    call->fn = NULL;
    xTimerStop(call->client->loop, &call->timer);
}

bool xRedisClientConnected(const xRedisClient *c) { return c->state == LINK_READY; }

void xRedisClientStatsSized(const xRedisClient *c, xRedisStats *stats, size_t size) {
    xRedisStats full = c->stats;
    xSizedExport(stats, size, &full, sizeof full);
}
