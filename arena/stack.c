/* stack.c — the production stack's application endpoints (stack.h), on
 * xKit's public API:
 *
 *   GET  /api/items/{id}  the `items` row as JSON, cache-aside (X-Cache: HIT or MISS, TTL 1 s)
 *   POST /api/items/{id}  JSON {name, price, quantity}: UPDATE the row, invalidate its key, 204
 *   GET  /api/me          the `users` row of the X-User-Id header the edge sets (TTL 30 s)
 *
 * The cache is Redis at REDIS_URL (redis://host[:port], one client per
 * worker, <xdb/redis_cache.h>), or without REDIS_URL a table in this process
 * that every worker shares (one worker's invalidation must reach the
 * others' next read). With Redis down or slow the cache answers from the
 * database (MISS); with the database down the answer is 503. What is cached
 * is the answer's body; an id with no row is cached as an empty value and
 * answered 404, so a miss storm on a missing id reaches the database once
 * per TTL too. ARENA_CACHE=off reads every answer from the database (for
 * measuring the database path alone). A Redis load still out on another worker when a POST
 * invalidates may store the old row again: the TTL bounds that to 1 s. */
#define _GNU_SOURCE
#include "stack.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <xdb/redis.h>
#include <xdb/redis_cache.h>

/* How long a cached answer lives: the contract's bounds. */
#define ITEM_TTL_MS 1000
#define USER_TTL_MS 30000

/* The longest POST body read as JSON. */
#define MAX_UPDATE_BODY 16384

/* A cache key: "item:" or "user:" and an int4's digits. */
#define MAX_KEY 24

/* ---- Settings ---- */

static char redis_host[256];
static uint16_t redis_port;
static bool use_redis;
static bool cache_off; /* ARENA_CACHE=off: every read from the database (benchmarks: one row by id) */

/* ---- The in-process cache: a direct-mapped table every worker shares ---- */

/* Slots of the table; a key lives in the slot its hash names (a newer key evicts an older one). */
#define LOCAL_SLOTS 16384

typedef struct LocalSlot {
    pthread_mutex_t lock;
    char key[MAX_KEY];
    size_t key_len; /* 0: empty */
    char *value;
    size_t len;
    uint64_t expires_ms;
} LocalSlot;

static LocalSlot *local_slots;

static uint64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static LocalSlot *local_slot(const char *key, size_t len) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)key[i]) * 1099511628211ull;
    return &local_slots[h % LOCAL_SLOTS];
}

/* Key's live value copied into *out (malloc'd, *len bytes); false on a miss or no memory. */
static bool local_get(const char *key, size_t key_len, char **out, size_t *len) {
    LocalSlot *s = local_slot(key, key_len);
    bool hit = false;
    pthread_mutex_lock(&s->lock);
    if (s->key_len == key_len && memcmp(s->key, key, key_len) == 0 && now_ms() < s->expires_ms &&
        (*out = malloc(s->len ? s->len : 1))) {
        memcpy(*out, s->value, s->len);
        *len = s->len;
        hit = true;
    }
    pthread_mutex_unlock(&s->lock);
    return hit;
}

static void local_put(const char *key, size_t key_len, const char *value, size_t len, uint64_t ttl_ms) {
    char *copy = malloc(len ? len : 1);
    if (!copy) return;
    memcpy(copy, value, len);
    LocalSlot *s = local_slot(key, key_len);
    pthread_mutex_lock(&s->lock);
    char *old = s->value;
    memcpy(s->key, key, key_len);
    s->key_len = key_len;
    s->value = copy;
    s->len = len;
    s->expires_ms = now_ms() + ttl_ms;
    pthread_mutex_unlock(&s->lock);
    free(old);
}

static void local_drop(const char *key, size_t key_len) {
    LocalSlot *s = local_slot(key, key_len);
    pthread_mutex_lock(&s->lock);
    if (s->key_len == key_len && memcmp(s->key, key, key_len) == 0) s->key_len = 0;
    pthread_mutex_unlock(&s->lock);
}

/* ---- A worker's part ---- */

typedef struct RowKind RowKind;
/* Appends row's JSON to out; false when it cannot (a string not UTF-8, no memory). */
typedef bool (*RowWriter)(xBuffer *out, const xPgResult *r, int row);

/* A kind of cached row: items or users. */
struct RowKind {
    ArenaStack *stack;
    const char *prefix; /* of its keys */
    uint64_t ttl_ms;
    int stmt; /* SELECT … WHERE id = $1 */
    RowWriter write;
};

enum { KIND_ITEM, KIND_USER, KIND_COUNT };

struct ArenaStack {
    xPgPool *pool;
    xRedisClient *redis; /* NULL: the in-process cache */
    xRedisCache *cache;
    RowKind kinds[KIND_COUNT];
    int update_item;
};

static bool write_user(xBuffer *out, const xPgResult *r, int row) {
    static const char *const names[] = {"id", "name", "email", "plan", "created_at"};
    xJsonWriter writer, *w = &writer;
    xJsonInit(w, out);
    xJsonBeginObject(w);
    for (int col = 0; col < 5; col++) {
        xJsonKey(w, names[col], strlen(names[col]));
        int64_t id;
        size_t len;
        const char *text = xPgGetText(r, row, col, &len);
        if (col == 0 && xPgGetInt64(r, row, col, &id))
            xJsonInt(w, id);
        else
            xJsonString(w, text, len);
    }
    xJsonEndObject(w);
    return xJsonFinish(w) == XOK;
}

bool arenaStackConfigure(void) {
    local_slots = calloc(LOCAL_SLOTS, sizeof *local_slots);
    if (!local_slots) return false;
    for (size_t i = 0; i < LOCAL_SLOTS; i++) pthread_mutex_init(&local_slots[i].lock, NULL);
    const char *cache = getenv("ARENA_CACHE");
    cache_off = cache && strcmp(cache, "off") == 0;
    const char *url = getenv("REDIS_URL");
    if (!url || !*url || cache_off) return true;
    /* redis://host[:port][/db]: an address, or localhost (a name would be resolved blocking, each connect).
     */
    const char *at = strncmp(url, "redis://", 8) == 0 ? url + 8 : url;
    size_t host_len = strcspn(at, ":/");
    unsigned port = 6379;
    if (at[host_len] == ':' && sscanf(at + host_len + 1, "%u", &port) != 1) port = 0;
    if (host_len == 0 || host_len >= sizeof redis_host || port == 0 || port > 65535 || strchr(at, '@')) {
        fprintf(stderr, "arena: REDIS_URL must be redis://host[:port] (no password), not %s\n", url);
        return false;
    }
    if (host_len == 9 && strncmp(at, "localhost", 9) == 0)
        strcpy(redis_host, "127.0.0.1");
    else
        memcpy(redis_host, at, host_len);
    redis_port = (uint16_t)port;
    use_redis = true;
    return true;
}

ArenaStack *arenaStackStart(xEventLoop *loop, xPgPool *pool) {
    ArenaStack *stack = calloc(1, sizeof *stack);
    if (!stack) return NULL;
    stack->pool = pool;
    stack->kinds[KIND_ITEM] = (RowKind){
        .stack = stack,
        .prefix = "item:",
        .ttl_ms = ITEM_TTL_MS,
        .stmt = xPgPoolPrepare(pool, "item_by_id",
                               "SELECT id, name, category, price, quantity, active, tags, rating_score, "
                               "rating_count FROM items WHERE id = $1",
                               1, NULL),
        .write = arenaAppendDbItem,
    };
    stack->kinds[KIND_USER] = (RowKind){
        .stack = stack,
        .prefix = "user:",
        .ttl_ms = USER_TTL_MS,
        .stmt = xPgPoolPrepare(pool, "user_by_id",
                               "SELECT id, name, email, plan, "
                               "to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') "
                               "FROM users WHERE id = $1",
                               1, NULL),
        .write = write_user,
    };
    stack->update_item = xPgPoolPrepare(
        pool, "update_item", "UPDATE items SET name = $2, price = $3, quantity = $4 WHERE id = $1", 4, NULL);
    if (use_redis) {
        xRedisConfig conf;
        xRedisConfigInit(&conf);
        conf.host = redis_host;
        conf.port = redis_port;
        conf.command_timeout_ms =
            200; /* a slow Redis costs a request 200 ms at most, then the database answers */
        stack->redis = xRedisClientCreate(loop, &conf);
        stack->cache = stack->redis ? xRedisCacheCreate(stack->redis) : NULL;
        if (!stack->cache) {
            xRedisClientFree(stack->redis);
            free(stack);
            return NULL;
        }
    }
    return stack;
}

void arenaStackStop(ArenaStack *stack) {
    if (!stack) return;
    xRedisCacheFree(stack->cache);
    stack->cache = NULL;
}

void arenaStackFree(ArenaStack *stack) {
    if (!stack) return;
    xRedisClientFree(stack->redis);
    free(stack);
}

/* ---- A request's way through cache and database ---- */

/* What a request waits for: which handle the client leaving cancels. */
typedef enum PendingStep { WAIT_CACHE, WAIT_QUERY, WAIT_INVALIDATE } PendingStep;

typedef struct Pending {
    xHttpResponse *res;
    ArenaStack *stack;
    const RowKind *kind;
    PendingStep step;
    union {
        xRedisCacheGet *get;
        xPgQuery *query;
        xRedisCall *call;
    } handle;
    char key[MAX_KEY];
    size_t key_len;
} Pending;

static void pending_abort(xHttpResponse *res, void *arg) {
    (void)res;
    Pending *p = arg;
    switch (p->step) {
    case WAIT_CACHE: xRedisCacheCancel(p->handle.get); break;
    case WAIT_QUERY: xPgQueryCancel(p->handle.query); break;
    case WAIT_INVALIDATE: xRedisCancel(p->handle.call); break;
    }
    free(p);
}

static void send_status(xHttpResponse *res, int status, const char *why) {
    xHttpResponseSetStatus(res, status);
    if (!why) {
        xHttpResponseSend(res, "", 0);
        return;
    }
    xHttpResponseAddHeader(res, "Content-Type", "text/plain");
    xHttpResponseSend(res, why, strlen(why));
}

/* A cached or loaded body: empty is the cached "no such row". */
static void send_row(xHttpResponse *res, const char *body, size_t len, bool hit, bool owned) {
    xHttpResponseAddHeader(res, "X-Cache", hit ? "HIT" : "MISS");
    if (len == 0) {
        if (owned) free((void *)body);
        send_status(res, 404, "no such id\n");
        return;
    }
    xHttpResponseAddHeader(res, "Content-Type", "application/json");
    if (owned)
        xHttpResponseSendRef(res, body, len, free, (void *)body);
    else
        xHttpResponseSend(res, body, len);
}

/* The body a SELECT … WHERE id = $1 makes into *out: true with the row's
 * JSON, or empty for no row; false when the query failed. */
static bool row_body(const RowKind *kind, const xPgResult *r, xBuffer *out) {
    *out = (xBuffer){0};
    if (xPgResultStatus(r) != XPG_OK) return false;
    if (xPgRows(r) == 0) return true;
    if (!kind->write(out, r, 0)) {
        xBufferFree(out);
        return false;
    }
    return true;
}

/* The in-process cache's miss: the row from the database, kept for the next reads. */
static void on_local_row(const xPgResult *r, void *arg) {
    Pending *p = arg;
    xHttpResponse *res = p->res;
    xBuffer body;
    bool ok = row_body(p->kind, r, &body);
    /* With the cache off nothing reads it: a copy kept there would cost a
     * copy, a lock and a cold slot per request. */
    if (ok && !cache_off)
        local_put(p->key, p->key_len, body.data ? (const char *)body.data : "", body.len, p->kind->ttl_ms);
    free(p);
    if (!ok) {
        send_status(res, 503, "database unavailable\n");
        return;
    }
    send_row(res, (const char *)body.data, body.len, false, body.data != NULL);
}

/* The Redis cache's loader: one query for every get of the key waiting on this loop. */
typedef struct Load {
    xRedisCacheLoad *load;
    const RowKind *kind;
} Load;

static void on_loaded_row(const xPgResult *r, void *arg) {
    Load *l = arg;
    xBuffer body;
    if (row_body(l->kind, r, &body))
        xRedisCacheLoaded(l->load, body.data ? body.data : "", body.len);
    else
        xRedisCacheLoadFailed(l->load);
    xBufferFree(&body);
    free(l);
}

static void load_row(xRedisCacheLoad *load, const char *key, size_t key_len, void *arg) {
    const RowKind *kind = arg;
    size_t prefix = strlen(kind->prefix);
    Load *l = malloc(sizeof *l);
    if (!l) {
        xRedisCacheLoadFailed(load);
        return;
    }
    *l = (Load){.load = load, .kind = kind};
    xPgParam id = xPgText(key + prefix, key_len - prefix); /* the digits the handler checked */
    if (xPgQuerySend(kind->stack->pool, kind->stmt, &id, 1, 0, on_loaded_row, l, NULL) != XPG_OK) {
        free(l);
        xRedisCacheLoadFailed(load);
    }
}

static void on_cached(xRedisCacheOutcome outcome, const void *value, size_t len, void *arg) {
    Pending *p = arg;
    xHttpResponse *res = p->res;
    free(p);
    if (outcome == XREDIS_CACHE_ERROR) {
        send_status(res, 503, "database unavailable\n");
        return;
    }
    send_row(res, value, len, outcome == XREDIS_CACHE_HIT, false);
}

/* An id in the range of PostgreSQL's integer: 1 to 2^31 - 1, digits only. */
static bool parse_id(xStr s, long long *out) {
    if (s.len == 0 || s.len > 10) return false;
    long long v = 0;
    for (size_t i = 0; i < s.len; i++) {
        if (s.data[i] < '0' || s.data[i] > '9') return false;
        v = v * 10 + (s.data[i] - '0');
    }
    if (v < 1 || v > INT32_MAX) return false;
    *out = v;
    return true;
}

static Pending *pending_new(xHttpResponse *res, ArenaStack *stack, const RowKind *kind, long long id) {
    Pending *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->res = res;
    p->stack = stack;
    p->kind = kind;
    /* The key by hand: snprintf cost as much as the rest of the request's bookkeeping. */
    const char *prefix = kind ? kind->prefix : "item:";
    size_t n = strlen(prefix);
    memcpy(p->key, prefix, n);
    char digits[20], *at = digits + sizeof digits;
    unsigned long long v = (unsigned long long)id; /* 1 to 2^31 - 1: parse_id checked */
    do {
        *--at = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    memcpy(p->key + n, at, (size_t)(digits + sizeof digits - at));
    p->key_len = n + (size_t)(digits + sizeof digits - at);
    p->key[p->key_len] = 0;
    return p;
}

/* Answers the row of kind with id through the cache. */
static void get_row(xHttpRequest *req, xHttpResponse *res, int which, long long id) {
    ArenaStack *stack = arenaWorkerStack(req);
    const RowKind *kind = stack ? &stack->kinds[which] : NULL;
    Pending *p = kind ? pending_new(res, stack, kind, id) : NULL;
    if (!p) {
        send_status(res, 503, "database unavailable\n");
        return;
    }
    if (stack->cache) {
        xRedisCacheLoader loader = {.load = load_row, .arg = (void *)kind, .ttl_ms = kind->ttl_ms};
        p->step = WAIT_CACHE;
        p->handle.get = xRedisCacheGetValue(stack->cache, p->key, p->key_len, &loader, on_cached, p);
        if (!p->handle.get) {
            free(p);
            send_status(res, 503, "out of memory\n");
            return;
        }
        xHttpResponseOnAbort(res, pending_abort, p);
        return;
    }
    char *value;
    size_t len;
    if (!cache_off && local_get(p->key, p->key_len, &value, &len)) {
        free(p);
        send_row(res, value, len, true, true);
        return;
    }
    xPgParam param = xPgInt(id);
    p->step = WAIT_QUERY;
    if (xPgQuerySend(stack->pool, kind->stmt, &param, 1, 0, on_local_row, p, &p->handle.query) != XPG_OK) {
        free(p);
        send_status(res, 503, "database unavailable\n");
        return;
    }
    xHttpResponseOnAbort(res, pending_abort, p);
}

/* GET /api/items/:id */
static void on_get_item(xHttpRequest *req, xHttpResponse *res, void *arg) {
    (void)arg;
    long long id;
    if (!parse_id(xHttpRequestParam(req, "id"), &id)) {
        send_status(res, 404, "no such id\n");
        return;
    }
    get_row(req, res, KIND_ITEM, id);
}

/* GET /api/me: the edge has checked the token and names its user in X-User-Id. */
static void on_get_me(xHttpRequest *req, xHttpResponse *res, void *arg) {
    (void)arg;
    xStr user;
    long long id;
    if (!xHttpRequestHeader(req, "X-User-Id", &user)) {
        xHttpResponseAddHeader(res, "WWW-Authenticate", "Bearer");
        send_status(res, 401, "no X-User-Id\n");
        return;
    }
    if (!parse_id(user, &id)) {
        send_status(res, 400, "X-User-Id must be a user's id\n");
        return;
    }
    get_row(req, res, KIND_USER, id);
}

static void on_invalidated(xRedisClient *client, const xRedisReply *reply, void *arg) {
    (void)client;
    (void)reply; /* Redis down: nothing there to invalidate is read either (gets fall back to the database) */
    Pending *p = arg;
    xHttpResponse *res = p->res;
    free(p);
    send_status(res, 204, NULL);
}

static void on_updated(const xPgResult *r, void *arg) {
    Pending *p = arg;
    xHttpResponse *res = p->res;
    if (xPgResultStatus(r) != XPG_OK || xPgAffected(r) == 0) {
        bool down = xPgResultStatus(r) != XPG_OK && xPgResultStatus(r) != XPG_ESERVER;
        free(p);
        if (down)
            send_status(res, 503, "database unavailable\n");
        else if (xPgResultStatus(r) == XPG_ESERVER)
            send_status(res, 400, "the database refused the values\n");
        else
            send_status(res, 404, "no such id\n");
        return;
    }
    if (!p->stack->cache) {
        local_drop(p->key, p->key_len);
        free(p);
        send_status(res, 204, NULL);
        return;
    }
    p->step = WAIT_INVALIDATE;
    p->handle.call = xRedisCacheInvalidate(p->stack->cache, p->key, p->key_len, on_invalidated, p);
    if (!p->handle.call) {
        free(p);
        send_status(res, 204, NULL);
    }
}

/* POST /api/items/:id with {"name": string, "price": int, "quantity": int}: UPDATE, invalidate, 204. */
static void on_post_item(xHttpRequest *req, xHttpResponse *res, void *arg) {
    (void)arg;
    long long id;
    if (!parse_id(xHttpRequestParam(req, "id"), &id)) {
        send_status(res, 404, "no such id\n");
        return;
    }
    xStr body = xHttpRequestBody(req);
    xJsonDoc doc;
    xJsonDocInit(&doc, NULL, 0);
    xJsonDocLimits(&doc, MAX_UPDATE_BODY, 8);
    xStr name;
    int64_t price, quantity;
    const xJsonValue *root = xJsonDocParse(&doc, body.data, body.len) == XOK ? xJsonDocRoot(&doc) : NULL;
    bool valid = root && xJsonTypeOf(root) == XJSON_OBJECT &&
                 xJsonGetString(xJsonObjectGet(root, "name"), &name) == XOK &&
                 xJsonGetInt64(xJsonObjectGet(root, "price"), &price) == XOK &&
                 xJsonGetInt64(xJsonObjectGet(root, "quantity"), &quantity) == XOK && price >= 0 &&
                 price <= INT32_MAX && quantity >= 0 && quantity <= INT32_MAX &&
                 (name.len == 0 || !memchr(name.data, 0, name.len));
    ArenaStack *stack = valid ? arenaWorkerStack(req) : NULL;
    Pending *p = stack ? pending_new(res, stack, &stack->kinds[KIND_ITEM], id) : NULL;
    xPgStatus sent = XPG_EDOWN;
    if (p) {
        xPgParam params[] = {xPgInt(id), xPgText(name.data, name.len), xPgInt(price), xPgInt(quantity)};
        p->step = WAIT_QUERY;
        sent = xPgQuerySend(stack->pool, stack->update_item, params, 4, 0, on_updated, p, &p->handle.query);
    }
    xJsonDocFree(&doc); /* the parameters were copied */
    if (!valid) {
        send_status(res, 400, "want JSON {\"name\": string, \"price\": integer, \"quantity\": integer}\n");
        return;
    }
    if (sent != XPG_OK) {
        free(p);
        send_status(res, 503, "database unavailable\n");
        return;
    }
    xHttpResponseOnAbort(res, pending_abort, p);
}

bool arenaStackRoutes(xHttpServer *server) {
    return xHttpServerRoute(server, "GET /api/items/:id", on_get_item, NULL) == XOK &&
           xHttpServerRoute(server, "POST /api/items/:id", on_post_item, NULL) == XOK &&
           xHttpServerRoute(server, "GET /api/me", on_get_me, NULL) == XOK;
}
