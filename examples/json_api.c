/* json_api — a REST API over JSON with its data in memory: to-do items that
 * clients list, create, read, replace and delete.
 *
 *   json_api [PORT [WORKERS]]      (8080; WORKERS 0, the default, is one per CPU)
 *   curl -i localhost:8080/items -H 'Content-Type: application/json' -d '{"title":"milk"}'
 *   curl 'localhost:8080/items?limit=10&offset=0'
 *   curl -X PUT localhost:8080/items/1 -H 'Content-Type: application/json' -d '{"title":"milk","done":true}'
 *   curl -X DELETE localhost:8080/items/1
 *
 * Every worker shares one store behind a mutex, so a client sees the same
 * items whichever worker its connection landed on. A lock is fine here: it is
 * held only to copy an item in or out or to write a page of the list into
 * memory, microseconds with no I/O and no waiting, so workers seldom meet at
 * it. (One store per worker would need no lock, but each worker would then
 * hold different items; a store that does I/O, a file or a database, belongs
 * off the loop, through xHttpRequestRunBlocking or an asynchronous client.)
 *
 * Run behind a load balancer, it restarts without dropping a request: GET
 * /healthz answers 503 from the moment SIGTERM arrives, while the server
 * serves on for two seconds (the balancer's check takes it out meanwhile)
 * before it stops accepting and drains. Started by systemd with socket
 * activation (LISTEN_FDS), it listens on the sockets passed instead of PORT. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <xkit.h>

#define MAX_ITEMS 10000      /* a full store answers 507 */
#define MAX_TITLE 200        /* bytes of UTF-8 */
#define MAX_BODY (16 * 1024) /* larger request bodies get the server's 413 */
#define DEFAULT_LIMIT 20     /* items per page of GET /items ... */
#define MAX_LIMIT 100        /* ... and the most a client may ask for */

typedef struct Item {
    int64_t id;
    bool done;
    size_t title_len;
    char title[MAX_TITLE];
} Item;

typedef struct Store {
    pthread_mutex_t lock;
    Item *items; /* MAX_ITEMS of room, sorted by id: ids only grow, so an append keeps the order */
    size_t count;
    int64_t last_id;
} Store;

/* Sends what w wrote into body, and frees body. */
static void send_json(xHttpResponse *res, int status, const xJsonWriter *w, xBuffer *body) {
    static const char no_memory[] = "{\"error\":\"out of memory\"}";
    bool written = xJsonFinish(w) == XOK; /* the writer keeps its first error: out of memory here */
    xHttpResponseSetStatus(res, written ? status : 500);
    xHttpResponseAddHeader(res, "Content-Type", "application/json");
    if (written)
        xHttpResponseSend(res, body->data, body->len);
    else
        xHttpResponseSend(res, no_memory, sizeof no_memory - 1);
    xBufferFree(body);
}

/* {"error": "..."}: what went wrong, in words a client's developer can act on. */
static void send_error(xHttpResponse *res, int status, const char *fmt, ...) {
    char message[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    xBuffer body = {0};
    xJsonWriter w;
    xJsonInit(&w, &body);
    xJsonBeginObject(&w);
    xJsonKey(&w, "error", 5);
    xJsonString(&w, message, strlen(message));
    xJsonEndObject(&w);
    send_json(res, status, &w, &body);
}

static void write_item(xJsonWriter *w, const Item *item) {
    xJsonBeginObject(w);
    xJsonKey(w, "id", 2);
    xJsonInt(w, item->id);
    xJsonKey(w, "title", 5);
    xJsonString(w, item->title, item->title_len);
    xJsonKey(w, "done", 4);
    xJsonBool(w, item->done);
    xJsonEndObject(w);
}

static void send_item(xHttpResponse *res, int status, const Item *item) {
    xBuffer body = {0};
    xJsonWriter w;
    xJsonInit(&w, &body);
    write_item(&w, item);
    send_json(res, status, &w, &body);
}

/* A whole decimal number of at most 18 digits (ids, limits, offsets), else -1. */
static int64_t parse_count(xStr s) {
    int64_t n = 0;
    if (s.len == 0 || s.len > 18) return -1;
    for (size_t i = 0; i < s.len; i++) {
        if (s.data[i] < '0' || s.data[i] > '9') return -1;
        n = n * 10 + (s.data[i] - '0');
    }
    return n;
}

/* Reads {"title": "...", "done": true|false} (done may be left out) into item,
 * or answers 400/415 saying why and returns false. The document is read in
 * full before anything is taken from it, so a bad body changes nothing. */
static bool read_item(xHttpRequest *req, xHttpResponse *res, Item *item) {
    xStr type, body = xHttpRequestBody(req), title;
    if (!xHttpRequestHeader(req, "Content-Type", &type) || type.len < 16 ||
        strncasecmp(type.data, "application/json", 16) != 0 || (type.len > 16 && type.data[16] != ';')) {
        send_error(res, 415, "send the item as application/json");
        return false;
    }
    char memory[512]; /* room for 32 values: an item has 3, a larger body gets a block of its own */
    xJsonDoc doc;
    xJsonDocInit(&doc, memory, sizeof memory);
    bool ok = false;
    if (xJsonDocParse(&doc, body.data, body.len) != XOK) {
        const xJsonError *e = xJsonDocError(&doc);
        send_error(res, 400, "the body is not JSON: %s (line %zu, column %zu)", e->reason, e->line,
                   e->column);
        goto done;
    }
    const xJsonValue *root = xJsonDocRoot(&doc), *done = xJsonObjectGet(root, "done");
    if (xJsonTypeOf(root) != XJSON_OBJECT || xJsonSize(root) != 1 + (done != NULL)) {
        send_error(res, 400, "send an object with \"title\" and optionally \"done\"");
    } else if (xJsonGetString(xJsonObjectGet(root, "title"), &title) != XOK || title.len == 0 ||
               title.len > MAX_TITLE) {
        send_error(res, 400, "\"title\" must be a string of 1 to %d bytes", MAX_TITLE);
    } else if (done && xJsonGetBool(done, &item->done) != XOK) {
        send_error(res, 400, "\"done\" must be true or false");
    } else {
        if (!done) item->done = false;
        memcpy(item->title, title.data, title.len);
        item->title_len = title.len;
        ok = true;
    }
done:
    xJsonDocFree(&doc);
    return ok;
}

static int compare_ids(const void *id, const void *item) {
    int64_t a = *(const int64_t *)id, b = ((const Item *)item)->id;
    return (a > b) - (a < b);
}

/* The stored item whose id the path names, or NULL. Under the lock. */
static Item *find(Store *store, xHttpRequest *req) {
    int64_t id = parse_count(xHttpRequestParam(req, "id"));
    return bsearch(&id, store->items, store->count, sizeof(Item), compare_ids); /* sorted by id */
}

/* GET /items?limit=N&offset=M: {"items": [...], "total": T}, in the order made. */
static void on_list(xHttpRequest *req, xHttpResponse *res, void *arg) {
    Store *store = arg;
    xStr value;
    int64_t limit = xHttpRequestQueryParam(req, "limit", &value) ? parse_count(value) : DEFAULT_LIMIT;
    int64_t offset = xHttpRequestQueryParam(req, "offset", &value) ? parse_count(value) : 0;
    if (limit < 1 || limit > MAX_LIMIT || offset < 0) {
        send_error(res, 400, "limit must be 1 to %d and offset 0 or more", MAX_LIMIT);
        return;
    }
    xBuffer body = {0};
    xJsonWriter w;
    xJsonInit(&w, &body);
    xJsonBeginObject(&w);
    xJsonKey(&w, "items", 5);
    xJsonBeginArray(&w);
    pthread_mutex_lock(&store->lock);
    for (size_t i = (size_t)offset; i < store->count && i < (size_t)(offset + limit); i++)
        write_item(&w, &store->items[i]);
    size_t total = store->count;
    pthread_mutex_unlock(&store->lock);
    xJsonEndArray(&w);
    xJsonKey(&w, "total", 5);
    xJsonUint(&w, total);
    xJsonEndObject(&w);
    send_json(res, 200, &w, &body);
}

static void on_get(xHttpRequest *req, xHttpResponse *res, void *arg) {
    Store *store = arg;
    pthread_mutex_lock(&store->lock);
    Item *found = find(store, req);
    Item copy = found ? *found : (Item){0};
    pthread_mutex_unlock(&store->lock);
    if (found)
        send_item(res, 200, &copy); /* answered from the copy: the lock is not held while sending */
    else
        send_error(res, 404, "no such item");
}

/* POST /items: 201 with the item as stored and its Location. */
static void on_create(xHttpRequest *req, xHttpResponse *res, void *arg) {
    Store *store = arg;
    Item item;
    if (!read_item(req, res, &item)) return;
    pthread_mutex_lock(&store->lock);
    bool full = store->count == MAX_ITEMS;
    if (!full) {
        item.id = ++store->last_id;
        store->items[store->count++] = item;
    }
    pthread_mutex_unlock(&store->lock);
    if (full) {
        send_error(res, 507, "the store is full (%d items)", MAX_ITEMS);
        return;
    }
    char location[32];
    snprintf(location, sizeof location, "/items/%lld", (long long)item.id);
    xHttpResponseAddHeader(res, "Location", location);
    send_item(res, 201, &item);
}

/* PUT /items/:id replaces the item's title and done (404 for an id never made). */
static void on_replace(xHttpRequest *req, xHttpResponse *res, void *arg) {
    Store *store = arg;
    Item item;
    if (!read_item(req, res, &item)) return;
    pthread_mutex_lock(&store->lock);
    Item *found = find(store, req);
    if (found) {
        item.id = found->id;
        *found = item;
    }
    pthread_mutex_unlock(&store->lock);
    if (found)
        send_item(res, 200, &item);
    else
        send_error(res, 404, "no such item");
}

static void on_delete(xHttpRequest *req, xHttpResponse *res, void *arg) {
    Store *store = arg;
    pthread_mutex_lock(&store->lock);
    Item *found = find(store, req);
    if (found) {
        store->count--;
        memmove(found, found + 1, (size_t)(store->items + store->count - found) * sizeof *found);
    }
    pthread_mutex_unlock(&store->lock);
    if (!found) {
        send_error(res, 404, "no such item");
        return;
    }
    xHttpResponseSetStatus(res, 204);
    xHttpResponseSend(res, NULL, 0);
}

static void refuse_in_json(xHttpServer *server, int status, const char *json) {
    xHttpServerErrorBody(server, status, "application/json", json, strlen(json));
}

int main(int argc, char **argv) {
    long port = argc > 1 ? strtol(argv[1], NULL, 10) : 8080; /* 0: any free port */
    Store store = {.lock = PTHREAD_MUTEX_INITIALIZER, .items = calloc(MAX_ITEMS, sizeof(Item))};
    xHttpServerConf conf;
    xHttpServerConfInit(&conf);
    conf.workers = argc > 2 ? atoi(argv[2]) : 0;
    conf.max_body_size = MAX_BODY;
    conf.stop_grace_ms = 2000;
    xHttpServer *server = store.items ? xHttpServerCreate(NULL, &conf) : NULL;
    if (!server) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    xHttpServerRoute(server, "GET /items", on_list, &store);
    xHttpServerRoute(server, "POST /items", on_create, &store);
    xHttpServerRoute(server, "GET /items/:id", on_get, &store);
    xHttpServerRoute(server, "PUT /items/:id", on_replace, &store);
    xHttpServerRoute(server, "DELETE /items/:id", on_delete, &store);
    xHttpServerHealthRoute(server, "/healthz");
    /* What the server answers itself (no route, another method, a body over
     * MAX_BODY, a malformed request) is plain text by default; an API answers
     * in JSON throughout. (xHttpServerRouteNotFound takes a handler instead,
     * for an answer that depends on the request.) */
    refuse_in_json(server, 404, "{\"error\":\"no such resource\"}");
    refuse_in_json(server, 405, "{\"error\":\"method not allowed here (see Allow)\"}");
    refuse_in_json(server, 413, "{\"error\":\"the body is over 16 KiB\"}");
    refuse_in_json(server, 0, "{\"error\":\"the request was refused (see the status)\"}"); /* the rest */
    int passed = 0;
    xErrno err = xHttpServerListenSystemd(server, NULL, &passed);
    if (err == XOK && passed == 0) err = xHttpServerListen(server, NULL, (uint16_t)port);
    if (err != XOK) {
        fprintf(stderr, "listen on port %ld: %s\n", port, xHttpServerLastError(server));
        return 1;
    }
    printf("listening on 0.0.0.0:%u (%d workers)\n", xHttpServerPort(server), xHttpServerWorkerCount(server));
    fflush(stdout);
    err = xHttpServerRun(server); /* until SIGINT or SIGTERM, then a graceful stop */
    xHttpServerDestroy(server);
    free(store.items);
    return err == XOK ? 0 : 1;
}
