/* ws_chat — a chat room over WebSocket: what one client says reaches every
 * client in the room, whichever worker serves it.
 *
 *   ws_chat [PORT [WORKERS]]       (8080; WORKERS 0, the default, is one per CPU)
 *   then open http://localhost:8080/ in two browser tabs, or
 *   websocat 'ws://localhost:8080/chat?name=alice'
 *
 * Every client gets the room's events as JSON text messages, its own included:
 *   {"type":"join","name":"alice"}
 *   {"type":"message","name":"alice","text":"hello"}
 *   {"type":"leave","name":"alice"}
 * and sends plain text of up to MAX_MESSAGE bytes (more is closed with 1009).
 *
 * Across workers: a connection lives on the worker that accepted it, and its
 * xWebSocket may be used on that worker's thread only. So each worker keeps
 * its own list of the room's clients, touched by its thread alone, with no
 * lock. A message is copied once into a reference-counted block and posted
 * (xEventLoopPost) to every worker's loop, which sends it to its clients by
 * reference (xWebSocketSendRef); the last send to go out frees it. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xkit.h>

#define MAX_MESSAGE 4096        /* bytes a client may send in one message */
#define MAX_NAME 32             /* bytes of ?name= */
#define MAX_BEHIND (256 * 1024) /* bytes queued for a client before it is dropped as too slow */
#define PING_MS 30000           /* browsers answer pings, so a quiet tab outlives the idle timeout */

typedef struct Room Room;
typedef struct Worker Worker;

/* A client in the room: its place in its worker's list, from on_open to on_close. */
typedef struct Member {
    xWebSocket *ws;
    struct Member *prev, *next;
    Worker *worker;
    char name[MAX_NAME + 1];
} Member;

/* One worker's part of the room: its clients, used on its thread only. */
struct Worker {
    Room *room;
    xEventLoop *loop; /* set by the worker's start hook */
    int index;
    Member *members;
};

struct Room {
    Worker *workers;
    int count;
};

/* One message on its way to every client. The last worker to let go frees it,
 * whichever that is, hence the atomic count. */
typedef struct Message {
    atomic_size_t refs;
    size_t len;
    char text[];
} Message;

/* The message's trip to one worker's loop. */
typedef struct Delivery {
    Worker *worker;
    Message *msg;
} Delivery;

static void message_release(void *arg) {
    Message *msg = arg;
    if (atomic_fetch_sub(&msg->refs, 1) == 1) free(msg);
}

/* On the worker's loop: sends the message to each of its clients. */
static void deliver(xEventLoop *loop, void *arg) {
    Delivery *d = arg;
    for (Member *m = d->worker->members, *next; m; m = next) {
        next = m->next;
        if (xWebSocketPending(m->ws) > MAX_BEHIND) {
            /* It has not taken what it was sent. Closing it stops its queue
             * growing (nothing more is queued once the close has begun), and
             * the others go on at their own pace. The close frame goes after
             * what is queued; a client that never reads again is cut off by
             * the server's send_timeout_ms. It may reconnect. */
            xWebSocketClose(m->ws, 1008, "too slow");
            continue;
        }
        atomic_fetch_add(&d->msg->refs, 1); /* released once this send is out, or has failed */
        xWebSocketSendRef(m->ws, d->msg->text, d->msg->len, false, message_release, d->msg);
    }
    message_release(d->msg);
    free(d);
}

/* Posts text to every worker, this one included: each worker then sends the
 * room's events in the order they were posted to it, and a client that joined
 * in this turn is on its connection by the time its own join reaches it. */
static void broadcast(Room *room, const char *text, size_t len) {
    Message *msg = malloc(sizeof *msg + len);
    if (!msg) return;
    atomic_init(&msg->refs, 1); /* ours, until every worker has been handed it */
    msg->len = len;
    memcpy(msg->text, text, len);
    for (int i = 0; i < room->count; i++) {
        Delivery *d = malloc(sizeof *d);
        if (!d) continue;
        *d = (Delivery){&room->workers[i], msg};
        atomic_fetch_add(&msg->refs, 1);
        if (xEventLoopPost(room->workers[i].loop, deliver, d) != XOK) {
            message_release(msg);
            free(d);
        }
    }
    message_release(msg);
}

/* {"type": type, "name": name, "text": text} to everyone; text may be NULL. */
static void announce(Room *room, const char *type, const char *name, const char *text, size_t len) {
    xBuffer out = {0};
    xJsonWriter w;
    xJsonInit(&w, &out);
    xJsonBeginObject(&w);
    xJsonKey(&w, "type", 4);
    xJsonString(&w, type, strlen(type));
    xJsonKey(&w, "name", 4);
    xJsonString(&w, name, strlen(name));
    if (text) {
        xJsonKey(&w, "text", 4);
        xJsonString(&w, text, len); /* the server has checked a text message is UTF-8 */
    }
    xJsonEndObject(&w);
    if (xJsonFinish(&w) == XOK) broadcast(room, out.data, out.len);
    xBufferFree(&out);
}

/* Letters, digits, '-' and '_' only: a name is then safe in any page or log line. */
static bool valid_name(xStr name) {
    if (name.len == 0 || name.len > MAX_NAME) return false;
    for (size_t i = 0; i < name.len; i++) {
        char c = name.data[i];
        if (!(c >= 'a' && c <= 'z') && !(c >= 'A' && c <= 'Z') && !(c >= '0' && c <= '9') && c != '-' &&
            c != '_')
            return false;
    }
    return true;
}

/* GET /chat?name=alice joins the room; without a valid name it is 400. The
 * handle is borrowed: the list holds it from here until on_close unlinks it,
 * the span it is valid, so it needs no xWebSocketRetain (a timer that sent
 * to it later, past on_close, would). */
static int on_open(xWebSocket *ws, xWebSocketOpen *open, void *arg) {
    Worker *worker = xHttpRequestWorkerData(open->req);
    xStr name;
    if (!xHttpRequestQueryParam(open->req, "name", &name) || !valid_name(name)) return 400;
    Member *m = calloc(1, sizeof *m);
    if (!m) return 503;
    m->ws = ws;
    m->worker = worker;
    memcpy(m->name, name.data, name.len);
    m->next = worker->members;
    if (m->next) m->next->prev = m;
    worker->members = m;
    xWebSocketSetUserData(ws, m);
    XLOG_INFO("%s joined on worker %d", m->name, worker->index);
    announce(worker->room, "join", m->name, NULL, 0);
    return 0;
}

static void on_message(xWebSocket *ws, const char *data, size_t len, bool binary, void *arg) {
    Member *m = xWebSocketUserData(ws);
    if (binary)
        xWebSocketClose(ws, 1003, "text only"); /* 1003: a kind of data this endpoint does not take */
    else
        announce(m->worker->room, "message", m->name, data, len);
}

static void on_close(xWebSocket *ws, uint16_t code, xStr reason, void *arg) {
    Member *m = xWebSocketUserData(ws);
    if (m->prev)
        m->prev->next = m->next;
    else
        m->worker->members = m->next;
    if (m->next) m->next->prev = m->prev;
    XLOG_INFO("%s left worker %d (%u)", m->name, m->worker->index, code);
    announce(m->worker->room, "leave", m->name, NULL, 0);
    free(m);
}

/* On each worker's thread before any worker accepts: by the time a client can
 * say anything, every worker's loop is known. No stop hook: a stopped worker's
 * loop lives until xHttpServerDestroy, which runs what was posted to it after
 * its clients had all left, and those deliveries only let go of the message. */
static xErrno on_worker_start(xHttpWorker *hw, void *arg) {
    Room *room = arg;
    Worker *worker = &room->workers[xHttpWorkerIndex(hw)];
    worker->loop = xHttpWorkerLoop(hw);
    xHttpWorkerSetData(hw, worker);
    return XOK;
}

/* A page to chat from: GET / in a browser. */
static const char page[] =
    "<!doctype html><meta charset=utf-8><title>xKit chat</title>\n"
    "<ul id=log></ul><form id=say><input id=text maxlength=1000 autofocus> <button>Send</button></form>\n"
    "<script>\n"
    "const [log, say, text] = ['log', 'say', 'text'].map((id) => document.getElementById(id));\n"
    "const me = (prompt('Your name (letters, digits, - and _)') || '').replace(/[^\\w-]/g, '') || 'guest';\n"
    "const ws = new WebSocket(`${location.protocol === 'https:' ? 'wss' : "
    "'ws'}://${location.host}/chat?name=${me}`);\n"
    "const show = (line) => log.append(Object.assign(document.createElement('li'), {textContent: line}));\n"
    "ws.onmessage = (e) => { const m = JSON.parse(e.data);\n"
    "  show(m.type === 'message' ? `${m.name}: ${m.text}` : `${m.name} ${m.type === 'join' ? 'joined' : "
    "'left'}`); };\n"
    "ws.onclose = (e) => show(`disconnected (${e.code})`);\n"
    "say.onsubmit = (e) => { e.preventDefault(); ws.send(text.value); text.value = ''; };\n"
    "</script>\n";

static void on_page(xHttpRequest *req, xHttpResponse *res, void *arg) {
    xHttpResponseAddHeader(res, "Content-Type", "text/html; charset=utf-8");
    xHttpResponseSendRef(res, page, sizeof page - 1, NULL, NULL); /* static: nothing to release */
}

int main(int argc, char **argv) {
    long port = argc > 1 ? strtol(argv[1], NULL, 10) : 8080; /* 0: any free port */
    xHttpServerConf conf;
    xHttpServerConfInit(&conf);
    conf.workers = argc > 2 ? atoi(argv[2]) : 0;
    xHttpServer *server = xHttpServerCreate(NULL, &conf);
    Room room = {.count = server ? xHttpServerWorkerCount(server) : 0};
    room.workers = server ? calloc((size_t)room.count, sizeof *room.workers) : NULL;
    if (!room.workers) return 1;
    for (int i = 0; i < room.count; i++) room.workers[i] = (Worker){.room = &room, .index = i};
    xHttpServerOnWorker(server, on_worker_start, NULL, &room);

    xWebSocketConf ws;
    xWebSocketConfInit(&ws);
    ws.on_open = on_open;
    ws.on_message = on_message;
    ws.on_close = on_close;
    ws.max_message_size = MAX_MESSAGE;
    ws.ping_interval_ms = PING_MS;
    xHttpServerWebSocket(server, "/chat", &ws, &room);
    xHttpServerRoute(server, "GET /", on_page, NULL);

    if (xHttpServerListen(server, NULL, (uint16_t)port) != XOK) {
        fprintf(stderr, "listen on port %ld: %s\n", port, xHttpServerLastError(server));
        return 1;
    }
    printf("listening on 0.0.0.0:%u (%d workers)\n", xHttpServerPort(server), room.count);
    fflush(stdout);
    xErrno err = xHttpServerRun(server); /* until SIGINT or SIGTERM: each client is closed with 1001 */
    xHttpServerDestroy(server);
    free(room.workers);
    return err == XOK ? 0 : 1;
}
