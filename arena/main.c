/* main.c — xKit's HttpArena entry: every endpoint of the arena's contract
 * (../shared/arena/CONTRACT.md in the xKit workspace; the arena's own
 * scripts/validate.sh is the judge) on its four ports, written on xKit's
 * public API only, as a user would write it.
 *
 *   8080  HTTP/1.1 and h2c: /baseline11, /pipeline, /delay/{ms}, /json, /echo, gRPC GetSum, /ws
 *   8081  TLS, ALPN http/1.1: /json/{count}, /echo, /static/...
 *   8082  h2c with prior knowledge only: /baseline2, /json/{count}
 *   8443  TLS, ALPN h2: /baseline2, gRPC GetSum, /static/...; and HTTP/3 on UDP 8443 (baseline-h3,
 *         static-h3), both on IPv6 and IPv4
 * Every route answers on every port; the ports differ in protocol only.
 *
 * Environment: DATA_DIR (dataset.json and static/; default /data), CERTS_DIR (server.crt,
 * server.key; default /certs), ARENA_PORTS ("8080,8081,8082,8443", to run
 * beside other servers; a 0 after the first leaves that port out), DATABASE_URL (PostgreSQL with the arena's
 * seed, for /async-db and /fortunes; without it they answer 503), DATABASE_CONNECTIONS (per worker, default
 * 2) and DATABASE_PIPELINE_DEPTH (queries in flight per connection, default 64), DATABASE_QUEUE (queries
 * waiting for a connection per worker, default 1024; beyond it 503), DATABASE_DISPATCH (fill, the default:
 * the first connection with room; spread: the least busy), DATABASE_BATCHES_AHEAD (per connection, default
 * 1), REDIS_URL (redis://host:port: the production stack's cache, stack.c; without it a cache in this
 * process; ARENA_CACHE=off: none, every read from the database). Workers: one per CPU this process may run
 * on.
 *
 * The production stack's `server` (8080 behind its edge): /public/baseline,
 * /public/json/{count} here; /api/items/{id} and /api/me in stack.c.
 *
 * gRPC GetSum, POST /echo and the /ws echo are the bench servers' too: they live once, on the
 * same public API, in bench/servers/shared_handlers.c, which this entry is built with. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <xbase/json.h>
#include <xdb/pg.h>
#include <xhttp/compress.h>
#include <xhttp/server.h>
#include <xhttp/static.h>
#include <xhttp/tls.h>
#include <xhttp/websocket.h>

#include "shared_handlers.h"
#include "stack.h"

/* The longest /delay a client may ask for. */
#define MAX_DELAY_MS 60000

/* Connections a worker takes: the async profile holds 32,000 per server. */
#define MAX_CONNECTIONS_PER_WORKER 65536

/* ---- The dataset, read once at start ---- */

typedef struct Item {
    long long id, price, quantity, score, rating_count;
    const char *name, *category; /* views into the dataset's text or document, kept for the process */
    size_t name_len, category_len;
    bool active;
    const char **tags;
    size_t *tag_lens, num_tags;
} Item;

static Item *items;
static size_t num_items;
static char *dataset_text;   /* the file's bytes */
static xJsonDoc dataset_doc; /* parsed from them; the items' strings point into either */

static bool field_int(const xJsonValue *obj, const char *name, long long *out) {
    int64_t v;
    if (xJsonGetInt64(xJsonObjectGet(obj, name), &v) != XOK) return false;
    *out = v;
    return true;
}

static bool string_value(const xJsonValue *v, const char **out, size_t *len) {
    xStr s;
    if (xJsonGetString(v, &s) != XOK) return false;
    *out = s.data;
    *len = s.len;
    return true;
}

static bool field_str(const xJsonValue *obj, const char *name, const char **out, size_t *len) {
    return string_value(xJsonObjectGet(obj, name), out, len);
}

static bool read_item(const xJsonValue *obj, Item *it) {
    const xJsonValue *tags = xJsonObjectGet(obj, "tags"), *rating = xJsonObjectGet(obj, "rating");
    bool active;
    if (xJsonTypeOf(tags) != XJSON_ARRAY || xJsonTypeOf(rating) != XJSON_OBJECT ||
        xJsonGetBool(xJsonObjectGet(obj, "active"), &active) != XOK) {
        return false;
    }
    if (!field_int(obj, "id", &it->id) || !field_int(obj, "price", &it->price) ||
        !field_int(obj, "quantity", &it->quantity) || !field_str(obj, "name", &it->name, &it->name_len) ||
        !field_str(obj, "category", &it->category, &it->category_len) ||
        !field_int(rating, "score", &it->score) || !field_int(rating, "count", &it->rating_count)) {
        return false;
    }
    it->active = active;
    it->num_tags = xJsonSize(tags);
    it->tags = calloc(it->num_tags + 1, sizeof *it->tags);
    it->tag_lens = calloc(it->num_tags + 1, sizeof *it->tag_lens);
    if (!it->tags || !it->tag_lens) return false;
    xJsonIter walk;
    const xJsonValue *tag;
    xJsonIterInit(&walk, tags);
    for (size_t i = 0; xJsonIterNext(&walk, NULL, &tag); i++) {
        if (!string_value(tag, &it->tags[i], &it->tag_lens[i])) return false;
    }
    return true;
}

/* The whole file in memory, *len bytes; NULL when it cannot be read. */
static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *text = NULL;
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (size >= 0 && fseek(f, 0, SEEK_SET) == 0 && (text = malloc(size ? (size_t)size : 1))) {
        *len = fread(text, 1, (size_t)size, f);
        if (*len != (size_t)size) {
            free(text);
            text = NULL;
        }
    }
    fclose(f);
    return text;
}

static bool load_dataset(const char *path) {
    size_t len;
    if (!(dataset_text = read_file(path, &len))) {
        fprintf(stderr, "arena: cannot read %s\n", path);
        return false;
    }
    xJsonDocInit(&dataset_doc, NULL, 0);
    xJsonDocLimits(&dataset_doc, len, XJSON_MAX_DEPTH);
    if (xJsonDocParse(&dataset_doc, dataset_text, len) != XOK) {
        const xJsonError *e = xJsonDocError(&dataset_doc);
        fprintf(stderr, "arena: %s:%zu:%zu: %s\n", path, e->line, e->column, e->reason);
        return false;
    }
    const xJsonValue *root = xJsonDocRoot(&dataset_doc);
    if (xJsonTypeOf(root) != XJSON_ARRAY || !(items = calloc(xJsonSize(root) + 1, sizeof *items))) {
        fprintf(stderr, "arena: %s: not an array of items\n", path);
        return false;
    }
    xJsonIter walk;
    const xJsonValue *item;
    xJsonIterInit(&walk, root);
    for (num_items = 0; xJsonIterNext(&walk, NULL, &item); num_items++) {
        if (!read_item(item, &items[num_items])) {
            fprintf(stderr, "arena: %s: item %zu lacks a field of the contract's shape\n", path, num_items);
            return false;
        }
    }
    return true;
}

static void free_dataset(void) {
    for (size_t i = 0; items && i <= num_items; i++) { /* the item that failed to read too */
        free(items[i].tags);
        free(items[i].tag_lens);
    }
    free(items);
    xJsonDocFree(&dataset_doc);
    free(dataset_text);
}

/* ---- Handlers ---- */

static void send_text(xHttpResponse *res, int status, const char *text, size_t len) {
    xHttpResponseSetStatus(res, status);
    xHttpResponseAddHeader(res, "Content-Type", "text/plain");
    xHttpResponseSend(res, text, len);
}

/* A decimal integer, optionally signed, filling all of s. */
static bool parse_int(xStr s, long long *out) {
    size_t i = s.len && (s.data[0] == '-' || s.data[0] == '+') ? 1 : 0;
    if (i == s.len || s.len - i > 18) return false;
    long long v = 0;
    for (size_t k = i; k < s.len; k++) {
        if (s.data[k] < '0' || s.data[k] > '9') return false;
        v = v * 10 + (s.data[k] - '0');
    }
    *out = s.data[0] == '-' ? -v : v;
    return true;
}

/* v in decimal at text (room for 20 digits and a sign); returns its length.
 * Not snprintf: parsing "%lld" cost more than the rest of the handler (665
 * instructions of a baseline request's ~5,600 under callgrind). */
static size_t put_decimal(char *text, long long v) {
    if (v >= 0 && v < 10) { /* the usual sum: no divisions, no reversal */
        text[0] = (char)('0' + v);
        return 1;
    }
    unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
    char digits[20];
    size_t n = 0, len = 0;
    do {
        digits[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) text[len++] = '-';
    while (n) text[len++] = digits[--n];
    return len;
}

/* The sum of the query's values that are integers ("a=1&b=2": 3), in one pass:
 * each name=value pair ends at '&', its value starts after its first '=' and
 * counts when all of it is parse_int's integer (an optional sign, 1 to 18
 * digits), read as it is scanned. Not memchr and parse_int per pair, whose
 * calls and second pass over the value cost more than these few bytes. */
static long long query_sum(xStr q) {
    long long sum = 0;
    const char *p = q.data, *end = q.data + q.len;
    while (p < end) {
        while (p < end && *p != '=' && *p != '&') p++; /* the name */
        if (p < end && *p == '=') {
            p++;
            bool negative = p < end && *p == '-';
            if (p < end && (*p == '-' || *p == '+')) p++;
            const char *digits = p;
            unsigned long long v = 0;
            while (p < end && (unsigned char)(*p - '0') < 10) v = v * 10 + (unsigned char)(*p++ - '0');
            size_t n = (size_t)(p - digits);
            if (n && n <= 18 && (p == end || *p == '&')) sum += negative ? -(long long)v : (long long)v;
            while (p < end && *p != '&') p++; /* the rest of a value that is not an integer */
        }
        p++; /* past the '&' */
    }
    return sum;
}

/* The sum of every integer query value, plus the body's integer on a POST. */
static void on_baseline(xHttpRequest *req, xHttpResponse *res, void *arg) {
    (void)arg;
    long long sum = query_sum(xHttpRequestQuery(req)), v;
    xStr body = xHttpRequestBody(req);
    while (body.len && (body.data[body.len - 1] == '\n' || body.data[body.len - 1] == '\r')) body.len--;
    if (body.len && parse_int(body, &v)) sum += v;
    char text[24];
    send_text(res, 200, text, put_decimal(text, sum));
}

static void on_pipeline(xHttpRequest *req, xHttpResponse *res, void *arg) {
    (void)req;
    (void)arg;
    xHttpResponseAddHeader(res, "Content-Type", "text/plain");
    xHttpResponseSendRef(res, "ok", 2, NULL, NULL);
}

typedef struct Delayed {
    xTimer timer;
    xHttpResponse *res;
    xEventLoop *loop;
    unsigned ms;
} Delayed;

static void on_delay_abort(xHttpResponse *res, void *arg) {
    (void)res;
    Delayed *d = arg;
    xTimerStop(d->loop, &d->timer);
    free(d);
}

static void on_delay_done(xEventLoop *loop, xTimer *timer, void *arg) {
    (void)loop;
    Delayed *d = arg;
    char text[12];
    int n = snprintf(text, sizeof text, "%u", d->ms);
    send_text(d->res, 200, text, (size_t)n);
    free(d);
}

static void on_delay(xHttpRequest *req, xHttpResponse *res, void *arg) {
    (void)arg;
    long long ms;
    if (!parse_int(xHttpRequestParam(req, "ms"), &ms) || ms < 0 || ms > MAX_DELAY_MS) {
        static const char why[] = "ms must be an integer from 0 to 60000\n";
        send_text(res, 400, why, sizeof why - 1);
        return;
    }
    Delayed *d = malloc(sizeof *d);
    if (!d) {
        send_text(res, 503, "", 0);
        return;
    }
    d->res = res;
    d->loop = xHttpRequestLoop(req);
    d->ms = (unsigned)ms;
    xHttpResponseOnAbort(res, on_delay_abort, d);
    xTimerInit(&d->timer, on_delay_done, d);
    xTimerStart(d->loop, &d->timer, (uint64_t)ms);
}

static void write_item(xJsonWriter *w, const Item *it, long long m) {
    xJsonBeginObject(w);
    xJsonKey(w, "id", 2);
    xJsonInt(w, it->id);
    xJsonKey(w, "name", 4);
    xJsonString(w, it->name, it->name_len);
    xJsonKey(w, "category", 8);
    xJsonString(w, it->category, it->category_len);
    xJsonKey(w, "price", 5);
    xJsonInt(w, it->price);
    xJsonKey(w, "quantity", 8);
    xJsonInt(w, it->quantity);
    xJsonKey(w, "active", 6);
    xJsonBool(w, it->active);
    xJsonKey(w, "tags", 4);
    xJsonBeginArray(w);
    for (size_t i = 0; i < it->num_tags; i++) xJsonString(w, it->tags[i], it->tag_lens[i]);
    xJsonEndArray(w);
    xJsonKey(w, "rating", 6);
    xJsonBeginObject(w);
    xJsonKey(w, "score", 5);
    xJsonInt(w, it->score);
    xJsonKey(w, "count", 5);
    xJsonInt(w, it->rating_count);
    xJsonEndObject(w);
    xJsonKey(w, "total", 5);
    xJsonInt(w, it->price * it->quantity * m);
    xJsonEndObject(w);
}

/* The first count items with their totals, serialized for this request into
 * a buffer the response then owns (sent by reference, freed once sent). */
static void on_json(xHttpRequest *req, xHttpResponse *res, void *arg) {
    (void)arg;
    long long count, m = 1;
    xStr mv;
    if (!parse_int(xHttpRequestParam(req, "count"), &count) || count < 0 ||
        (xHttpRequestQueryParam(req, "m", &mv) && !parse_int(mv, &m))) {
        static const char why[] = "GET /json/{count}?m={m}: integers\n";
        send_text(res, 400, why, sizeof why - 1);
        return;
    }
    if ((size_t)count > num_items) count = (long long)num_items;
    xBuffer out = {0};
    xJsonWriter w;
    xJsonInit(&w, &out);
    xJsonBeginObject(&w);
    xJsonKey(&w, "items", 5);
    xJsonBeginArray(&w);
    for (long long i = 0; i < count; i++) write_item(&w, &items[i], m);
    xJsonEndArray(&w);
    xJsonKey(&w, "count", 5);
    xJsonInt(&w, count);
    xJsonEndObject(&w);
    if (xJsonFinish(&w) != XOK) {
        xBufferFree(&out);
        send_text(res, 500, "", 0);
        return;
    }
    xHttpResponseAddHeader(res, "Content-Type", "application/json");
    xHttpResponseSendRef(res, out.data, out.len, free, out.data);
}

/* ---- The database: a pool per worker (DATABASE_URL) ---- */

typedef struct Db {
    xPgPool *pool;
    int items_by_price, fortunes;
    ArenaStack *stack; /* the production stack's /api routes (stack.c) */
} Db;

static const char *database_url;
static int database_connections = 2, database_pipeline_depth = 64, database_queue = 1024;
/* One connection's batches carry the load until it is at its depth, one
 * batch in flight at a time: at wrk -c64 on GET /api/items/{id} (xkbench
 * compare db) that is ~26 queries per batch instead of ~8.5, a quarter of
 * the PostgreSQL sends and reads per request, and ~15% less of
 * PostgreSQL's CPU per request (xPgConf's dispatch and batches_ahead). */
static xPgDispatch database_dispatch = XPG_DISPATCH_FILL;
static int database_batches_ahead = 1;

static xErrno db_start(xHttpWorker *worker, void *arg) {
    (void)arg;
    xPgConf conf;
    xPgConfInit(&conf);
    conf.conninfo = database_url;
    conf.connections = database_connections;
    conf.pipeline_depth = database_pipeline_depth;
    conf.queue_limit = database_queue;
    conf.dispatch = database_dispatch;
    conf.batches_ahead = database_batches_ahead;
    Db *db = calloc(1, sizeof *db);
    if (db) db->pool = xPgPoolCreate(xHttpWorkerLoop(worker), &conf);
    if (!db || !db->pool) {
        free(db);
        xHttpWorkerSetError(worker, "arena: cannot make the database pool");
        return XERR_NOMEM;
    }
    db->items_by_price =
        xPgPoolPrepare(db->pool, "items_by_price",
                       "SELECT id, name, category, price, quantity, active, tags, rating_score, "
                       "rating_count FROM items WHERE price BETWEEN $1 AND $2 LIMIT $3",
                       3, NULL);
    db->fortunes = xPgPoolPrepare(db->pool, "fortunes", "SELECT id, message FROM fortune", 0, NULL);
    if (!(db->stack = arenaStackStart(xHttpWorkerLoop(worker), db->pool))) {
        xPgPoolFree(db->pool);
        free(db);
        xHttpWorkerSetError(worker, "arena: cannot start the production stack's cache");
        return XERR_NOMEM;
    }
    xHttpWorkerSetData(worker, db);
    return XOK;
}

static void db_stop(xHttpWorker *worker, void *arg) {
    (void)arg;
    Db *db = xHttpWorkerData(worker);
    if (!db) return;
    xPgStats stats;
    xPgPoolStats(db->pool, &stats);
    fprintf(stderr, "arena: worker %d: %llu queries in %llu batches, at most %d in flight on a connection\n",
            xHttpWorkerIndex(worker), (unsigned long long)stats.queries, (unsigned long long)stats.batches,
            stats.peak_in_flight);
    arenaStackStop(db->stack);
    xPgPoolFree(db->pool);
    arenaStackFree(db->stack);
    free(db);
}

ArenaStack *arenaWorkerStack(const xHttpRequest *req) {
    Db *db = xHttpRequestWorkerData(req);
    return db ? db->stack : NULL;
}

/* A request waiting for its query: the client leaving cancels the query. */
typedef struct DbWait {
    xHttpResponse *res;
    xPgQuery *query;
} DbWait;

static void db_abort(xHttpResponse *res, void *arg) {
    (void)res;
    DbWait *wait = arg;
    xPgQueryCancel(wait->query);
    free(wait);
}

/* Sends stmt with params for res, fn answering; false (nothing sent) when
 * there is no database or the pool refuses (busy or down). */
static bool db_send(xHttpRequest *req, xHttpResponse *res, int which, const xPgParam *params, int nparams,
                    xPgResultFn fn) {
    Db *db = xHttpRequestWorkerData(req);
    DbWait *wait = db ? malloc(sizeof *wait) : NULL;
    if (!wait) return false;
    wait->res = res;
    int stmt = which == 0 ? db->items_by_price : db->fortunes;
    if (xPgQuerySend(db->pool, stmt, params, nparams, 0, fn, wait, &wait->query) != XPG_OK) {
        free(wait);
        return false;
    }
    xHttpResponseOnAbort(res, db_abort, wait);
    return true;
}

static void send_no_items(xHttpResponse *res) {
    static const char body[] = "{\"items\":[],\"count\":0}";
    xHttpResponseSetStatus(res, 503);
    xHttpResponseAddHeader(res, "Content-Type", "application/json");
    xHttpResponseSend(res, body, sizeof body - 1);
}

/* The item's JSON is written straight into the body rather than through an
 * xJsonWriter: its keys are constants, PostgreSQL's integers are already
 * canonical JSON numbers, and its strings are plain ASCII but for a rare
 * one. Through the writer, keys, checks and number formatting were most of
 * /async-db's cost per row. The bytes are the writer's. */

static bool append(xBuffer *out, const char *bytes, size_t n) { return xBufferAppend(out, bytes, n) == XOK; }

/* A string literal and its length, for append and put. */
#define LIT(s) s, sizeof s - 1

static char *put(char *o, const char *bytes, size_t n) {
    memcpy(o, bytes, n);
    return o + n;
}

/* Room an integer takes at most (with snprintf's NUL). */
#define INT_ROOM 24

/* The value at row, col as a JSON integer at o (INT_ROOM bytes there): the
 * server's text where it is canonical (-?[1-9][0-9]* or 0, short enough for
 * int64), else as xPgGetInt64 reads it (0 for NULL or text not an int8). */
static char *put_int(char *o, const xPgResult *r, int row, int col) {
    size_t len;
    const char *text = xPgGetText(r, row, col, &len);
    size_t digits = len && text[0] == '-' ? len - 1 : len;
    bool canonical = digits >= 1 && digits <= 18 && (text[len - digits] != '0' || len == 1);
    for (size_t i = len - digits; canonical && i < len; i++) canonical = text[i] >= '0' && text[i] <= '9';
    if (canonical) return put(o, text, len);
    int64_t v;
    xPgGetInt64(r, row, col, &v);
    return o + snprintf(o, INT_ROOM, "%lld", (long long)v);
}

/* A JSON string of len bytes at out's end: copied between quotes where
 * nothing needs escaping or checking, else through a writer (false when not
 * UTF-8, or memory runs out). */
static bool append_string(xBuffer *out, const char *s, size_t len) {
    size_t i = 0;
    while (i < len && (unsigned char)s[i] >= 0x20 && (unsigned char)s[i] < 0x80 && s[i] != '"' &&
           s[i] != '\\')
        i++;
    if (i < len) {
        xJsonWriter w;
        xJsonInit(&w, out);
        xJsonString(&w, s, len);
        return xJsonFinish(&w) == XOK;
    }
    if (xBufferReserve(out, len + 2) != XOK) return false;
    char *o = out->data + out->len;
    o[0] = '"';
    memcpy(o + 1, s, len);
    o[len + 1] = '"';
    out->len += len + 2;
    return true;
}

bool arenaAppendDbItem(xBuffer *out, const xPgResult *r, int row) {
    size_t name_len, category_len, tags_len;
    const char *name = xPgGetText(r, row, 1, &name_len), *category = xPgGetText(r, row, 2, &category_len);
    const char *tags = xPgGetText(r, row, 6, &tags_len); /* jsonb's own text: one JSON value */
    bool active;
    xPgGetBool(r, row, 5, &active);
    /* Room for all of it (the keys counted generously), made once where the strings are plain. */
    if (xBufferReserve(out, 160 + 5 * INT_ROOM + name_len + category_len + tags_len) != XOK) return false;
    char *o = out->data + out->len;
    o = put(o, LIT("{\"id\":"));
    o = put_int(o, r, row, 0);
    o = put(o, LIT(",\"name\":"));
    out->len = (size_t)(o - out->data);
    if (!append_string(out, name, name_len) || !append(out, LIT(",\"category\":")) ||
        !append_string(out, category, category_len) ||
        xBufferReserve(out, 160 + 4 * INT_ROOM + tags_len) != XOK)
        return false;
    o = out->data + out->len;
    o = put(o, LIT(",\"price\":"));
    o = put_int(o, r, row, 3);
    o = put(o, LIT(",\"quantity\":"));
    o = put_int(o, r, row, 4);
    o = active ? put(o, LIT(",\"active\":true,\"tags\":")) : put(o, LIT(",\"active\":false,\"tags\":"));
    o = tags_len ? put(o, tags, tags_len) : put(o, LIT("null"));
    o = put(o, LIT(",\"rating\":{\"score\":"));
    o = put_int(o, r, row, 7);
    o = put(o, LIT(",\"count\":"));
    o = put_int(o, r, row, 8);
    o = put(o, LIT("}}"));
    out->len = (size_t)(o - out->data);
    return true;
}

static void on_items(const xPgResult *r, void *arg) {
    DbWait *wait = arg;
    xHttpResponse *res = wait->res;
    free(wait);
    if (xPgResultStatus(r) != XPG_OK) {
        send_no_items(res);
        return;
    }
    xBuffer out = {0};
    int rows = xPgRows(r);
    char count[24];
    /* An item takes ~160 bytes and asks for room for ~300: one allocation for all of them. */
    bool ok = xBufferReserve(&out, 32 + (size_t)rows * 320) == XOK && append(&out, LIT("{\"items\":["));
    for (int row = 0; ok && row < rows; row++)
        ok = (row == 0 || append(&out, LIT(","))) && arenaAppendDbItem(&out, r, row);
    ok = ok && append(&out, LIT("],\"count\":")) &&
         append(&out, count, (size_t)snprintf(count, sizeof count, "%d}", rows));
    if (!ok) {
        xBufferFree(&out);
        send_no_items(res);
        return;
    }
    xHttpResponseAddHeader(res, "Content-Type", "application/json");
    xHttpResponseSendRef(res, out.data, out.len, free, out.data);
}

/* GET /async-db?min&max&limit: items priced from min to max, at most limit
 * (defaults 10, 50, 50; limit clamped to 1-50). */
static void on_async_db(xHttpRequest *req, xHttpResponse *res, void *arg) {
    (void)arg;
    long long min = 10, max = 50, limit = 50, v;
    xStr value;
    if (xHttpRequestQueryParam(req, "min", &value) && parse_int(value, &v)) min = v;
    if (xHttpRequestQueryParam(req, "max", &value) && parse_int(value, &v)) max = v;
    if (xHttpRequestQueryParam(req, "limit", &value) && parse_int(value, &v)) limit = v;
    limit = limit < 1 ? 1 : limit > 50 ? 50 : limit;
    xPgParam params[] = {xPgInt(min), xPgInt(max), xPgInt(limit)};
    if (!db_send(req, res, 0, params, 3, on_items)) send_no_items(res);
}

typedef struct Fortune {
    int64_t id;
    const char *message;
    size_t len;
} Fortune;

/* Whether x's message sorts before y's (bytewise, a prefix first). */
static bool sorts_before(const Fortune *x, const Fortune *y) {
    int c = memcmp(x->message, y->message, x->len < y->len ? x->len : y->len);
    return c ? c < 0 : x->len < y->len;
}

/* Sorts the n pointers of a by message, tmp (n more) to work in; returns
 * whichever of the two holds the result. A bottom-up merge sort of pointers
 * with the comparison inlined: qsort's call per comparison and its moves of
 * whole structs cost more than writing the page. Stable. */
static const Fortune **sort_fortunes(const Fortune **a, const Fortune **tmp, size_t n) {
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) tmp[k++] = sorts_before(a[j], a[i]) ? a[j++] : a[i++];
            while (i < mid) tmp[k++] = a[i++];
            while (j < hi) tmp[k++] = a[j++];
        }
        const Fortune **swap = a;
        a = tmp;
        tmp = swap;
    }
    return a;
}

/* The entities of the bytes a fortune's text may not hold as they are. */
static const struct {
    char text[7];
    unsigned char len;
} ENTITIES[] = {{"", 0}, {"&lt;", 4}, {"&gt;", 4}, {"&amp;", 5}, {"&quot;", 6}, {"&#39;", 5}};
#define LONGEST_ENTITY 6

/* Which of ENTITIES a byte becomes: 0 keeps it. */
static const unsigned char ENTITY_OF[256] = {['<'] = 1, ['>'] = 2, ['&'] = 3, ['"'] = 4, ['\''] = 5};

/* Nonzero when a byte of v is c (the zero-byte test of v ^ c, eight bytes at once). */
static uint64_t has_byte(uint64_t v, unsigned char c) {
    uint64_t x = v ^ (0x0101010101010101ull * c);
    return (x - 0x0101010101010101ull) & ~x & 0x8080808080808080ull;
}

/* Writes text at o with <>&"' as HTML entities (room for len * LONGEST_ENTITY
 * bytes is made); returns the end. Eight bytes with none of them go in one
 * copy: a fortune is mostly such runs, and a byte at a time cost the page
 * more than the query. */
static char *put_escaped(char *o, const char *text, size_t len) {
    size_t i = 0;
    while (i < len) {
        uint64_t v;
        if (len - i >= 8 &&
            (memcpy(&v, text + i, 8), !(has_byte(v, '<') | has_byte(v, '>') | has_byte(v, '&') |
                                        has_byte(v, '"') | has_byte(v, '\'')))) {
            memcpy(o, &v, 8);
            o += 8;
            i += 8;
            continue;
        }
        for (size_t stop = len - i >= 8 ? i + 8 : len; i < stop; i++) {
            unsigned entity = ENTITY_OF[(unsigned char)text[i]];
            if (!entity) {
                *o++ = text[i];
                continue;
            }
            memcpy(o, ENTITIES[entity].text, ENTITIES[entity].len);
            o += ENTITIES[entity].len;
        }
    }
    return o;
}

/* Writes v's decimal digits at o; returns the end. */
static char *put_id(char *o, int64_t v) {
    uint64_t magnitude = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    char digits[20], *at = digits + sizeof digits;
    do {
        *--at = (char)('0' + magnitude % 10);
        magnitude /= 10;
    } while (magnitude);
    if (v < 0) *o++ = '-';
    size_t n = (size_t)(digits + sizeof digits - at);
    memcpy(o, at, n);
    return o + n;
}

#define PUT_LITERAL(o, text) (memcpy((o), (text), sizeof(text) - 1), (o) + sizeof(text) - 1)

static const char FORTUNES_HEAD[] = "<!DOCTYPE html><html><head><title>Fortunes</title></head><body><table>"
                                    "<tr><th>id</th><th>message</th></tr>";
static const char FORTUNES_TAIL[] = "</table></body></html>";
static const char ROW_HEAD[] = "<tr><td>", ROW_MIDDLE[] = "</td><td>", ROW_TAIL[] = "</td></tr>";

static void on_fortune_rows(const xPgResult *r, void *arg) {
    DbWait *wait = arg;
    xHttpResponse *res = wait->res;
    free(wait);
    int rows = xPgResultStatus(r) == XPG_OK ? xPgRows(r) : -1;
    size_t count = (size_t)rows + 1; /* the rows and the one added */
    Fortune *all = rows >= 0 ? malloc(count * (sizeof *all + 2 * sizeof(Fortune *))) : NULL;
    if (!all) {
        send_text(res, 503, "", 0);
        return;
    }
    static const char added[] = "Additional fortune added at request time.";
    size_t text_bytes = sizeof added - 1;
    for (int i = 0; i < rows; i++) {
        xPgGetInt64(r, i, 0, &all[i].id);
        all[i].message = xPgGetText(r, i, 1, &all[i].len);
        text_bytes += all[i].len;
    }
    all[rows] = (Fortune){.id = 0, .message = added, .len = sizeof added - 1};
    const Fortune **order = (const Fortune **)(all + count);
    for (size_t i = 0; i < count; i++) order[i] = &all[i];
    order = sort_fortunes(order, order + count, count);
    /* The page's longest form, made room for once: every byte an entity. */
    size_t row_bytes = sizeof ROW_HEAD + 20 + sizeof ROW_MIDDLE + sizeof ROW_TAIL;
    size_t most = sizeof FORTUNES_HEAD + sizeof FORTUNES_TAIL + ((size_t)rows + 1) * row_bytes +
                  text_bytes * LONGEST_ENTITY;
    char *page = malloc(most), *o = page;
    if (!page) {
        free(all);
        send_text(res, 503, "", 0);
        return;
    }
    o = PUT_LITERAL(o, FORTUNES_HEAD);
    for (int i = 0; i <= rows; i++) {
        o = PUT_LITERAL(o, ROW_HEAD);
        o = put_id(o, order[i]->id);
        o = PUT_LITERAL(o, ROW_MIDDLE);
        o = put_escaped(o, order[i]->message, order[i]->len);
        o = PUT_LITERAL(o, ROW_TAIL);
    }
    o = PUT_LITERAL(o, FORTUNES_TAIL);
    free(all);
    xHttpResponseAddHeader(res, "Content-Type", "text/html; charset=utf-8");
    xHttpResponseSendRef(res, page, (size_t)(o - page), free, page);
}

/* GET /fortunes: the table, one fortune added, sorted by message, as HTML. */
static void on_fortunes(xHttpRequest *req, xHttpResponse *res, void *arg) {
    (void)arg;
    if (!db_send(req, res, 1, NULL, 0, on_fortune_rows)) send_text(res, 503, "", 0);
}

/* ---- Start ---- */

static const char *env_or(const char *name, const char *fallback) {
    const char *v = getenv(name);
    return v && *v ? v : fallback;
}

/* Opens as many files as the hard limit allows: each held connection is one. */
static void raise_fd_limit(void) {
    struct rlimit lim;
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
        lim.rlim_cur = lim.rlim_max;
        setrlimit(RLIMIT_NOFILE, &lim);
    }
}

static bool add_routes(xHttpServer *server) {
    static const struct {
        const char *spec;
        xHttpHandler handler;
    } routes[] = {
        {"GET /baseline11", on_baseline},
        {"POST /baseline11", on_baseline},
        {"GET /baseline2", on_baseline},
        {"POST /baseline2", on_baseline},
        {"GET /pipeline", on_pipeline},
        {"GET /delay/:ms", on_delay},
        {"GET /json/:count", on_json},
        {"GET /async-db", on_async_db},
        {"GET /fortunes", on_fortunes},
        {"GET /public/baseline", on_baseline},
        {"GET /public/json/:count", on_json},
        {"POST /echo", sharedEchoBody},
        {"POST /benchmark.BenchmarkService/GetSum", sharedGrpcGetSum},
    };
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        if (xHttpServerRoute(server, routes[i].spec, routes[i].handler, NULL) != XOK) {
            fprintf(stderr, "arena: cannot add route %s\n", routes[i].spec);
            return false;
        }
    }
    if (!arenaStackRoutes(server)) {
        fprintf(stderr, "arena: cannot add the /api routes\n");
        return false;
    }
    xWebSocketConf ws;
    xWebSocketConfInit(&ws);
    ws.on_message = sharedWebSocketEcho;
    if (xHttpServerWebSocket(server, "/ws", &ws, NULL) != XOK) {
        fprintf(stderr, "arena: cannot add the WebSocket route /ws\n");
        return false;
    }
    return true;
}

/* /static/<file> from DATA_DIR/static: sent from the file, .br/.gz twins when the client
 * prefers them, a file replaced on disk served new within the open-file cache's second.
 * The arena's rules want static bodies from disk, so no file's bytes are kept in memory
 * (keep_file_max 0), though the library would keep small ones for that second, and none
 * is compressed on the fly (compress_on_the_fly false): with the server's compression on,
 * the library would compress a text file without a twin once and keep the result. */
static xHttpStatic *static_files;

static bool add_static(xHttpServer *server, const char *data_dir) {
    char root[4096];
    snprintf(root, sizeof root, "%s/static", data_dir);
    xHttpStaticConf conf;
    xHttpStaticConfInit(&conf);
    conf.root = root;
    conf.index = NULL;
    conf.keep_file_max = 0;
    conf.compress_on_the_fly = false;
    if (xHttpStaticCreate(&conf, &static_files) != XOK) {
        fprintf(stderr, "arena: cannot serve %s\n", root);
        return false;
    }
    return xHttpServerRoute(server, "GET /static/*", xHttpStaticHandler, static_files) == XOK;
}

/* With h3, HTTP/3 on the UDP port of the same number, and both bound to "::" (IPv6 and IPv4
 * alike: net.ipv6.bindv6only is 0) so that localhost reaches them by either family, as the
 * arena's h3 profiles do. */
static bool listen_tls(xHttpServer *server, uint16_t port, const char *alpn, bool h3, const char *certs_dir) {
    char cert[4096], key[4096];
    snprintf(cert, sizeof cert, "%s/server.crt", certs_dir);
    snprintf(key, sizeof key, "%s/server.key", certs_dir);
    xTlsConf tls;
    xTlsConfInit(&tls);
    tls.cert.cert_file = cert;
    tls.cert.key_file = key;
    tls.alpn = alpn;
    tls.http3 = h3;
    return xHttpServerListenTls(server, h3 ? "::" : "0.0.0.0", port, &tls) == XOK;
}

int main(void) {
    const char *data_dir = env_or("DATA_DIR", "/data"), *certs_dir = env_or("CERTS_DIR", "/certs");
    unsigned ports[4];
    if (sscanf(env_or("ARENA_PORTS", "8080,8081,8082,8443"), "%u,%u,%u,%u", &ports[0], &ports[1], &ports[2],
               &ports[3]) != 4) {
        fprintf(stderr, "arena: ARENA_PORTS must be four ports: h1+h2c,tls-h1,h2c,tls-h2\n");
        return 2;
    }
    char dataset[4096];
    snprintf(dataset, sizeof dataset, "%s/dataset.json", data_dir);
    raise_fd_limit();
    xHttpServerConf conf;
    xHttpServerConfInit(&conf);
    conf.max_connections = MAX_CONNECTIONS_PER_WORKER;
    xHttpServer *server = load_dataset(dataset) ? xHttpServerCreate(NULL, &conf) : NULL;
    database_url = getenv("DATABASE_URL");
    if (getenv("DATABASE_CONNECTIONS")) database_connections = atoi(getenv("DATABASE_CONNECTIONS"));
    if (getenv("DATABASE_PIPELINE_DEPTH")) database_pipeline_depth = atoi(getenv("DATABASE_PIPELINE_DEPTH"));
    if (getenv("DATABASE_QUEUE")) database_queue = atoi(getenv("DATABASE_QUEUE"));
    if (getenv("DATABASE_DISPATCH"))
        database_dispatch =
            strcmp(getenv("DATABASE_DISPATCH"), "spread") == 0 ? XPG_DISPATCH_SPREAD : XPG_DISPATCH_FILL;
    if (getenv("DATABASE_BATCHES_AHEAD")) database_batches_ahead = atoi(getenv("DATABASE_BATCHES_AHEAD"));
    if (server && !arenaStackConfigure()) {
        xHttpServerDestroy(server);
        server = NULL;
    }
    if (server && database_url && *database_url &&
        xHttpServerOnWorker(server, db_start, db_stop, NULL) != XOK) {
        fprintf(stderr, "arena: cannot set the workers' database hooks\n");
        xHttpServerDestroy(server);
        server = NULL;
    }
    /* gzip or Brotli where the client asks (JSON is compressible; the short text/plain
     * answers are under the size threshold, octet-stream and gRPC are not compressible types). */
    bool ok = server && add_routes(server) && add_static(server, data_dir) &&
              xHttpServerCompress(server, NULL) == XOK;
    /* 8080 always; the others may be 0: the stacks' server (compose.*.yml) leaves 8443 to the edge. */
    ok = ok && ports[0] && xHttpServerListen(server, "0.0.0.0", (uint16_t)ports[0]) == XOK &&
         (!ports[1] || listen_tls(server, (uint16_t)ports[1], "http/1.1", false, certs_dir)) &&
         (!ports[2] ||
          xHttpServerListenProtocols(server, "0.0.0.0", (uint16_t)ports[2], XHTTP_PROTO_HTTP2) == XOK) &&
         (!ports[3] || listen_tls(server, (uint16_t)ports[3], "h2", true, certs_dir));
    xErrno err = XERR_STATE;
    if (ok) {
        /* The first line in the form every xKit server prints (the tests read it). */
        printf("listening on 0.0.0.0:%u (%d workers)\n", ports[0], xHttpServerWorkerCount(server));
        printf("and on %u (TLS, http/1.1), %u (h2c only), %u (TLS, h2; h3 on UDP)\n", ports[1], ports[2],
               ports[3]);
        fflush(stdout);
        err = xHttpServerRun(server);
    } else if (server) {
        fprintf(stderr, "arena: %s\n", xHttpServerLastError(server));
    }
    if (server) xHttpServerDestroy(server);
    if (static_files) xHttpStaticDestroy(static_files);
    free_dataset();
    return err == XOK ? 0 : 1;
}
