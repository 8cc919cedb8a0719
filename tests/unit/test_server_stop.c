/* test_server_stop.c — xHttpServerStop from threads other than the one in
 * xHttpServerRun, as server.h allows: from a thread started before Run, at
 * once (racing Run's start) or while it serves; from a handler, on a worker,
 * which still answers the request that asked; and before Run, which then
 * returns at once. Each Run must return XOK; the ThreadSanitizer build runs
 * this too, where what Stop reads must have been published to its thread. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <xhttp/server.h>

#include "check.h"

enum { WORKERS = 2, ROUNDS = 20 };

static xHttpServer *new_server(void) {
    xHttpServerConf conf;
    xHttpServerConfInit(&conf);
    conf.workers = WORKERS;
    conf.handle_signals = false;
    xHttpServer *server = xHttpServerCreate(NULL, &conf);
    CHECK(server != NULL);
    CHECK_EQ_INT(xHttpServerListen(server, "127.0.0.1", 0), XOK);
    return server;
}

typedef struct Stopper {
    xHttpServer *server;
    long delay_us; /* before the stop; 0: at once */
} Stopper;

static void *stop_later(void *arg) {
    Stopper *s = arg;
    if (s->delay_us) {
        struct timespec pause = {.tv_sec = 0, .tv_nsec = s->delay_us * 1000};
        nanosleep(&pause, NULL);
    }
    xHttpServerStop(s->server);
    return NULL;
}

static void test_a_stop_from_another_thread_ends_run_at_any_moment(void) {
    for (int round = 0; round < ROUNDS; round++) {
        Stopper s = {.server = new_server(), .delay_us = round % 2 ? 0 : round * 500};
        pthread_t thread;
        CHECK(pthread_create(&thread, NULL, stop_later, &s) == 0);
        CHECK_EQ_INT(xHttpServerRun(s.server), XOK);
        pthread_join(thread, NULL);
        xHttpServerDestroy(s.server);
    }
}

static void test_a_stop_before_run_makes_run_return_at_once(void) {
    xHttpServer *server = new_server();
    xHttpServerStop(server);
    CHECK_EQ_INT(xHttpServerRun(server), XOK);
    xHttpServerDestroy(server);
}

static void on_quit(xHttpRequest *req, xHttpResponse *res, void *arg) {
    xHttpServerStop(arg);
    xHttpResponseSend(res, "bye", 3);
}

typedef struct Client {
    uint16_t port;
    char got[512];
    size_t got_len;
} Client;

/* One GET /quit on a fresh connection; what comes back until the server closes. */
static void *ask_to_quit(void *arg) {
    Client *c = arg;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(c->port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0) {
        static const char request[] = "GET /quit HTTP/1.1\r\nHost: x\r\n\r\n";
        if (write(fd, request, sizeof request - 1) == (ssize_t)sizeof request - 1) {
            ssize_t n;
            while (c->got_len < sizeof c->got - 1 &&
                   (n = read(fd, c->got + c->got_len, sizeof c->got - 1 - c->got_len)) > 0)
                c->got_len += (size_t)n;
        }
    }
    close(fd);
    return NULL;
}

static void test_a_handler_that_stops_the_server_still_answers(void) {
    xHttpServer *server = new_server();
    CHECK_EQ_INT(xHttpServerRoute(server, "GET /quit", on_quit, server), XOK);
    Client c = {.port = xHttpServerPort(server)};
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, ask_to_quit, &c) == 0);
    CHECK_EQ_INT(xHttpServerRun(server), XOK);
    pthread_join(thread, NULL);
    c.got[c.got_len] = '\0';
    CHECK_MSG(strncmp(c.got, "HTTP/1.1 200 ", 13) == 0 && c.got_len >= 3 &&
                  memcmp(c.got + c.got_len - 3, "bye", 3) == 0,
              "got %zu bytes: %s", c.got_len, c.got);
    xHttpServerDestroy(server);
}

int main(void) {
    alarm(60); /* a Run that never returns fails the test instead of hanging it */
    RUN(test_a_stop_from_another_thread_ends_run_at_any_moment);
    RUN(test_a_stop_before_run_makes_run_return_at_once);
    RUN(test_a_handler_that_stops_the_server_still_answers);
    return CHECK_SUMMARY();
}
