/* redis_cache — Redis in front of a slow origin, one Redis client per worker:
 * cache-aside reads, invalidation, and requests whose clients leave early.
 *
 *   redis_cache [PORT [WORKERS [REDIS_PORT]]]   (8080, one worker per CPU, Redis on 127.0.0.1:6379)
 *   curl -i localhost:8080/quotes/7             X-Cache: MISS the first time (100 ms), HIT after
 *   curl -i -X DELETE localhost:8080/quotes/7   204: the next read goes to the origin again
 *   curl -i localhost:8080/wait/2               Redis holds the command 2 s (BLPOP), then 204
 *   curl -i localhost:8080/redis                200 PONG, or 503 while Redis is down
 *
 * The origin stands for a database: it answers 100 ms later, from a timer.
 * Replies come in order, so a command Redis holds (BLPOP) holds every command
 * behind it on its connection: each worker keeps a second client for those.
 * With Redis down every read still answers, from the origin. A request whose
 * client leaves cancels what it waits for (xHttpResponseOnAbort), so no reply
 * ever reaches a response that is gone. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xkit.h>

#define ORIGIN_MS 100 /* the origin's answer time */
#define QUOTE_TTL_MS 30000

typedef struct OriginLoad OriginLoad;

/* A worker's own: its Redis client and cache, and the origin's loads under way. */
typedef struct Worker {
    xEventLoop *loop;
    xRedisClient *redis;
    xRedisClient *blocking; /* for commands Redis holds, which would stall the cache's */
    xRedisCache *cache;
    xRedisCacheLoader quotes;
    OriginLoad *loads;
} Worker;

struct OriginLoad {
    OriginLoad *prev, *next;
    Worker *worker;
    xRedisCacheLoad *load;
    xTimer timer;
    char id[16];
};

static uint16_t redis_port = 6379;

/* ---- the origin ---- */

static void origin_forget(OriginLoad *o) {
    if (o->prev)
        o->prev->next = o->next;
    else
        o->worker->loads = o->next;
    if (o->next) o->next->prev = o->prev;
    free(o);
}

static void origin_answer(xEventLoop *loop, xTimer *timer, void *arg) {
    OriginLoad *o = arg;
    char body[128];
    int n = snprintf(body, sizeof body, "{\"id\":%s,\"quote\":\"Quote number %s\"}", o->id, o->id);
    xRedisCacheLoad *load = o->load;
    origin_forget(o);
    xRedisCacheLoaded(load, body, (size_t)n);
}

/* The cache's loader for "quote:<id>" keys (the handler checked the id). */
static void origin_load(xRedisCacheLoad *load, const char *key, size_t key_len, void *arg) {
    Worker *w = arg;
    OriginLoad *o = calloc(1, sizeof *o);
    if (!o || key_len - 6 >= sizeof o->id) {
        free(o);
        xRedisCacheLoadFailed(load);
        return;
    }
    *o = (OriginLoad){.worker = w, .load = load, .next = w->loads};
    memcpy(o->id, key + 6, key_len - 6);
    if (w->loads) w->loads->prev = o;
    w->loads = o;
    xTimerInit(&o->timer, origin_answer, o);
    xTimerStart(w->loop, &o->timer, ORIGIN_MS);
}

/* ---- requests waiting on Redis ---- */

typedef struct Pending {
    xHttpResponse *res;
    xRedisCacheGet *get; /* or */
    xRedisCall *call;
} Pending;

/* The client left: what the request waits for must never answer it. */
static void on_client_gone(xHttpResponse *res, void *arg) {
    Pending *p = arg;
    xRedisCacheCancel(p->get);
    xRedisCancel(p->call);
    free(p);
}

static Pending *pending_new(xHttpResponse *res) {
    Pending *p = calloc(1, sizeof *p);
    if (p) p->res = res;
    return p;
}

/* Registers p for the client's leaving once it waits on something, or answers 500. */
static void pending_wait(Pending *p, xHttpResponse *res, bool waiting) {
    if (waiting) {
        xHttpResponseOnAbort(res, on_client_gone, p);
        return;
    }
    free(p);
    xHttpResponseSetStatus(res, 500);
    xHttpResponseSend(res, NULL, 0);
}

static void send_text(xHttpResponse *res, int status, const char *text) {
    xHttpResponseSetStatus(res, status);
    xHttpResponseAddHeader(res, "Content-Type", "text/plain");
    xHttpResponseSend(res, text, strlen(text));
}

/* ---- GET and DELETE /quotes/:id ---- */

/* "quote:<id>" in key, or false (and a 404) when :id is not 1 to 9 digits. */
static bool quote_key(xHttpRequest *req, xHttpResponse *res, char key[static 16], size_t *len) {
    xStr id = xHttpRequestParam(req, "id");
    bool digits = id.len >= 1 && id.len <= 9;
    for (size_t i = 0; digits && i < id.len; i++) digits = id.data[i] >= '0' && id.data[i] <= '9';
    if (!digits) {
        send_text(res, 404, "no such quote\n");
        return false;
    }
    *len = (size_t)snprintf(key, 16, "quote:%.*s", (int)id.len, id.data);
    return true;
}

static void on_quote(xRedisCacheOutcome outcome, const void *value, size_t len, void *arg) {
    Pending *p = arg;
    xHttpResponse *res = p->res;
    free(p);
    if (outcome == XREDIS_CACHE_ERROR) {
        send_text(res, 503, "origin unavailable\n");
        return;
    }
    xHttpResponseAddHeader(res, "Content-Type", "application/json");
    xHttpResponseAddHeader(res, "X-Cache", outcome == XREDIS_CACHE_HIT ? "HIT" : "MISS");
    xHttpResponseSend(res, value, len);
}

static void on_get_quote(xHttpRequest *req, xHttpResponse *res, void *arg) {
    Worker *w = xHttpRequestWorkerData(req);
    char key[16];
    size_t len;
    if (!quote_key(req, res, key, &len)) return;
    Pending *p = pending_new(res);
    pending_wait(p, res, p && (p->get = xRedisCacheGetValue(w->cache, key, len, &w->quotes, on_quote, p)));
}

static void on_deleted(xRedisClient *client, const xRedisReply *reply, void *arg) {
    Pending *p = arg;
    xHttpResponse *res = p->res;
    free(p);
    if (reply->type == XREDIS_ERROR)
        send_text(res, 503, "cache unavailable\n");
    else
        send_text(res, 204, "");
}

static void on_delete_quote(xHttpRequest *req, xHttpResponse *res, void *arg) {
    Worker *w = xHttpRequestWorkerData(req);
    char key[16];
    size_t len;
    if (!quote_key(req, res, key, &len)) return;
    Pending *p = pending_new(res);
    pending_wait(p, res, p && (p->call = xRedisCacheInvalidate(w->cache, key, len, on_deleted, p)));
}

/* ---- GET /wait/:seconds and GET /redis: commands of the application's own ---- */

static void on_waited(xRedisClient *client, const xRedisReply *reply, void *arg) {
    Pending *p = arg;
    xHttpResponse *res = p->res;
    free(p);
    send_text(res, reply->type == XREDIS_ERROR ? 503 : 204, "");
}

static void on_wait(xHttpRequest *req, xHttpResponse *res, void *arg) {
    Worker *w = xHttpRequestWorkerData(req);
    xStr seconds = xHttpRequestParam(req, "seconds");
    if (seconds.len != 1 || seconds.data[0] < '1' || seconds.data[0] > '9') {
        send_text(res, 404, "wait 1 to 9 seconds\n");
        return;
    }
    /* A list nobody pushes to: Redis answers nil when the seconds are up. */
    const char *argv[] = {"BLPOP", "example:nothing", seconds.data};
    const size_t argv_len[] = {5, 15, 1};
    /* Waits behind the blocking commands before it too: a generous timeout. */
    uint32_t timeout_ms = (uint32_t)(seconds.data[0] - '0') * 1000 + 10000;
    Pending *p = pending_new(res);
    pending_wait(p, res,
                 p && (p->call = xRedisCommand(w->blocking, 3, argv, argv_len, timeout_ms, on_waited, p)));
}

static void on_pong(xRedisClient *client, const xRedisReply *reply, void *arg) {
    Pending *p = arg;
    xHttpResponse *res = p->res;
    free(p);
    char text[256];
    snprintf(text, sizeof text, "%.*s\n", (int)(reply->len < 200 ? reply->len : 200),
             reply->str ? reply->str : "");
    send_text(res, reply->type == XREDIS_STATUS ? 200 : 503, text);
}

static void on_redis(xHttpRequest *req, xHttpResponse *res, void *arg) {
    Worker *w = xHttpRequestWorkerData(req);
    const char *argv[] = {"PING"};
    Pending *p = pending_new(res);
    pending_wait(p, res, p && (p->call = xRedisCommand(w->redis, 1, argv, NULL, 0, on_pong, p)));
}

/* ---- workers ---- */

static xErrno on_worker_start(xHttpWorker *hw, void *arg) {
    Worker *w = calloc(1, sizeof *w);
    if (!w) return XERR_NOMEM;
    w->loop = xHttpWorkerLoop(hw);
    xRedisConfig conf;
    xRedisConfigInit(&conf);
    conf.port = redis_port;
    w->redis = xRedisClientCreate(w->loop, &conf);
    w->blocking = xRedisClientCreate(w->loop, &conf);
    w->cache = w->redis ? xRedisCacheCreate(w->redis) : NULL;
    w->quotes = (xRedisCacheLoader){.load = origin_load, .arg = w, .ttl_ms = QUOTE_TTL_MS};
    if (!w->cache || !w->blocking) {
        xRedisClientFree(w->redis);
        xRedisClientFree(w->blocking);
        free(w);
        return XERR_NOMEM;
    }
    xHttpWorkerSetData(hw, w);
    return XOK;
}

/* After the worker's connections are gone: loads of clients that left are
 * still out at the origin; they end here, unanswered. */
static void on_worker_stop(xHttpWorker *hw, void *arg) {
    Worker *w = xHttpWorkerData(hw);
    xRedisCacheFree(w->cache);
    while (w->loads) {
        OriginLoad *o = w->loads;
        xRedisCacheLoad *load = o->load;
        xTimerStop(w->loop, &o->timer);
        origin_forget(o);
        xRedisCacheLoadFailed(load);
    }
    xRedisClientFree(w->redis);
    xRedisClientFree(w->blocking);
    free(w);
}

int main(int argc, char **argv) {
    long port = argc > 1 ? strtol(argv[1], NULL, 10) : 8080; /* 0: any free port */
    xHttpServerConf conf;
    xHttpServerConfInit(&conf);
    conf.workers = argc > 2 ? atoi(argv[2]) : 0;
    redis_port = argc > 3 ? (uint16_t)atoi(argv[3]) : 6379;
    xHttpServer *server = xHttpServerCreate(NULL, &conf);
    if (!server) return 1;
    xHttpServerOnWorker(server, on_worker_start, on_worker_stop, NULL);
    xHttpServerRoute(server, "GET /quotes/:id", on_get_quote, NULL);
    xHttpServerRoute(server, "DELETE /quotes/:id", on_delete_quote, NULL);
    xHttpServerRoute(server, "GET /wait/:seconds", on_wait, NULL);
    xHttpServerRoute(server, "GET /redis", on_redis, NULL);
    if (xHttpServerListen(server, NULL, (uint16_t)port) != XOK) {
        fprintf(stderr, "listen on port %ld: %s\n", port, xHttpServerLastError(server));
        return 1;
    }
    printf("listening on 0.0.0.0:%u (%d workers)\n", xHttpServerPort(server), xHttpServerWorkerCount(server));
    fflush(stdout);
    xErrno err = xHttpServerRun(server); /* until SIGINT or SIGTERM */
    xHttpServerDestroy(server);
    return err == XOK ? 0 : 1;
}
