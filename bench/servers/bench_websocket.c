/* bench_websocket.c — the bench servers' WebSocket routes: /ws echoes every
 * message back as it came (text or binary), the endpoint our WebSocket
 * reports measure; with --test-routes, /ws-test adds what the integration
 * tests drive (a refusal, a subprotocol, a small limit, a server close, a
 * reply sent later from a timer) and /ws-idle (pings and the idle limit). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xhttp/websocket.h>

#include "bench_common.h"
#include "shared_handlers.h"

#define TEST_MAX_MESSAGE 65536
#define LATER_MS 20
#define TEST_PING_MS 200
#define TEST_IDLE_MS 1000

/* ?refuse=STATUS refuses; a client offering "chat" gets it. */
static int on_test_open(xWebSocket *ws, xWebSocketOpen *open, void *arg) {
    xStr refuse;
    if (xHttpRequestQueryParam(open->req, "refuse", &refuse)) return atoi(refuse.data);
    const char *p = open->protocols.data, *end = p + open->protocols.len;
    while (p < end) { /* a comma-separated list of tokens */
        while (p < end && (*p == ',' || *p == ' ')) p++;
        const char *name = p;
        while (p < end && *p != ',' && *p != ' ') p++;
        if (p - name == 4 && memcmp(name, "chat", 4) == 0) open->protocol = "chat";
    }
    return 0;
}

typedef struct Later {
    xTimer timer;
    xWebSocket *ws;
    size_t len;
    char data[];
} Later;

static void on_later(xEventLoop *loop, xTimer *timer, void *arg) {
    Later *later = arg;
    xWebSocketSendText(later->ws, later->data, later->len); /* XERR_CLOSED if it went */
    xWebSocketRelease(later->ws);
    free(later);
}

/* "big:N" sends N KiB of binary by reference, then "pending=BYTES": what
 * was still queued for the client right after. */
static void send_big(xWebSocket *ws, const char *count, size_t len) {
    size_t kib = 0;
    for (size_t i = 0; i < len && kib < 65536; i++) kib = kib * 10 + (size_t)(count[i] - '0');
    char *data = malloc(kib * 1024 + 1);
    if (!data) return;
    for (size_t i = 0; i < kib * 1024; i++) data[i] = (char)(i % 251);
    xWebSocketSendRef(ws, data, kib * 1024, true, free, data);
    char line[48];
    int n = snprintf(line, sizeof line, "pending=%zu", xWebSocketPending(ws));
    xWebSocketSendText(ws, line, (size_t)n);
}

/* "close" closes with 4000 "bye"; "later:TEXT" answers TEXT after a while;
 * "protocol" answers the chosen subprotocol; "big:N" see send_big;
 * anything else is echoed. */
static void on_test_message(xWebSocket *ws, const char *data, size_t len, bool binary, void *arg) {
    if (!binary && len == 5 && memcmp(data, "close", 5) == 0) {
        xWebSocketClose(ws, 4000, "bye");
    } else if (!binary && len == 8 && memcmp(data, "protocol", 8) == 0) {
        const char *p = xWebSocketProtocol(ws);
        xWebSocketSendText(ws, p, strlen(p));
    } else if (!binary && len >= 4 && memcmp(data, "big:", 4) == 0) {
        send_big(ws, data + 4, len - 4);
    } else if (!binary && len >= 6 && memcmp(data, "later:", 6) == 0) {
        Later *later = malloc(sizeof *later + len - 6);
        if (!later) return;
        later->ws = ws;
        later->len = len - 6;
        memcpy(later->data, data + 6, len - 6);
        xWebSocketRetain(ws);
        xTimerInit(&later->timer, on_later, later);
        xTimerStart(xWebSocketLoop(ws), &later->timer, LATER_MS);
    } else {
        sharedWebSocketEcho(ws, data, len, binary, arg);
    }
}

void benchAddWebSocket(xHttpServer *server, bool deflate, bool test_routes) {
    xWebSocketConf conf;
    xWebSocketConfInit(&conf);
    conf.on_message = sharedWebSocketEcho;
    conf.deflate = deflate;
    xHttpServerWebSocket(server, "/ws", &conf, NULL);
    if (!test_routes) return;
    conf.on_open = on_test_open;
    conf.on_message = on_test_message;
    conf.max_message_size = TEST_MAX_MESSAGE;
    conf.close_timeout_ms = 1000;
    xHttpServerWebSocket(server, "/ws-test", &conf, NULL);
    xWebSocketConfInit(&conf);
    conf.on_message = sharedWebSocketEcho;
    conf.ping_interval_ms = TEST_PING_MS;
    conf.idle_timeout_ms = TEST_IDLE_MS;
    xHttpServerWebSocket(server, "/ws-idle", &conf, NULL);
}
