/* test_conn_flush_wait.c — a writer that holds back until its connection's
 * queue has drained (xConnWaitFlushed) hears on_flushed however the queue
 * drains, on epoll and on io_uring: the turn's end's send taking it whole
 * (on io_uring a send by completion that takes it whole), a full socket
 * that drains, a flush of the writer's own that sends it all, or nothing
 * queued at all. Always from the loop, never within the writer's call, and
 * once. A connection whose writer did not ask hears nothing of a queue that
 * left whole, as before. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <xbase/event.h>

#include "check.h"
#include "xnet/connection.h"

#define BIG (1u << 20) /* well past a small socket buffer */

typedef struct Writer {
    xEventLoop *loop;
    xNetContext net;
    xConn *conn;
    int peer;
    int flushed;         /* on_flushed calls */
    size_t pending_told; /* xConnPending when on_flushed ran */
    size_t received;     /* bytes the peer read */
    size_t len;          /* what the writer queues */
    bool wait;           /* it calls xConnWaitFlushed */
    bool flush_now;      /* it flushes itself after asking */
    bool told_within;    /* on_flushed ran inside the writer's call */
    bool in_write;
    xTimer write_timer, tick, stop;
} Writer;

static char payload[BIG];

static void on_readable(xConn *conn) { (void)conn; }
static void on_timeout(xConn *conn) { (void)conn; }
static void on_flushed(xConn *conn) {
    Writer *w = conn->proto_state;
    if (w->in_write) w->told_within = true;
    w->flushed++;
    w->pending_told = xConnPending(conn);
}

static const xConnProtocol writer_protocol = {
    .on_readable = on_readable,
    .on_flushed = on_flushed,
    .on_timeout = on_timeout,
};

/* As the upstream client writes a body: queued, sent at the turn's end with
 * whatever else the turn adds, and (past its high-water mark) waiting. */
static void write_now(xEventLoop *loop, xTimer *timer, void *arg) {
    (void)loop;
    (void)timer;
    Writer *w = arg;
    w->in_write = true;
    if (w->len) CHECK_EQ_INT(xConnWrite(w->conn, payload, w->len), XOK);
    xConnFlushSoon(w->conn);
    if (w->wait) xConnWaitFlushed(w->conn);
    if (w->flush_now) xConnFlush(w->conn);
    w->in_write = false;
}

/* The peer reads what arrives; the loop wakes for it, as a busy server's
 * does for other connections (io_uring reports a completion then). */
static void tick(xEventLoop *loop, xTimer *timer, void *arg) {
    Writer *w = arg;
    char sink[65536];
    ssize_t n;
    while ((n = recv(w->peer, sink, sizeof sink, MSG_DONTWAIT)) > 0) w->received += (size_t)n;
    xTimerStart(loop, timer, 1);
}

static void stop(xEventLoop *loop, xTimer *timer, void *arg) {
    (void)timer;
    (void)arg;
    xEventLoopStop(loop);
}

static void run(xIoBackend io, Writer *w, int sndbuf) {
    w->loop = xEventLoopCreateWith(io);
    CHECK(w->loop != NULL);
    CHECK_EQ_INT(xNetContextInit(&w->net, w->loop, 16384, 4, 5000), XOK);
    int pair[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, pair) == 0);
    if (sndbuf) {
        CHECK(setsockopt(pair[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf) == 0);
        CHECK(setsockopt(pair[1], SOL_SOCKET, SO_RCVBUF, &sndbuf, sizeof sndbuf) == 0);
    }
    w->peer = pair[1];
    w->conn = xConnCreate(&w->net, pair[0], NULL, &writer_protocol, w);
    CHECK(w->conn != NULL);
    xTimerInit(&w->write_timer, write_now, w);
    xTimerInit(&w->tick, tick, w);
    xTimerInit(&w->stop, stop, w);
    xTimerStart(w->loop, &w->write_timer, 1);
    xTimerStart(w->loop, &w->tick, 2);
    xTimerStart(w->loop, &w->stop, 300); /* well past the whole exchange; once is checked too */
    xEventLoopRun(w->loop);
    xTimerStop(w->loop, &w->tick);
    xTimerStop(w->loop, &w->stop);
    xTimerStop(w->loop, &w->write_timer);
    xConnClose(w->conn);
    close(w->peer);
    xEventLoopDestroy(w->loop);
    xNetContextDestroy(&w->net);
}

static const char *name(xIoBackend io) { return io == XIO_EPOLL ? "epoll" : "io_uring"; }

static void check_told_once(xIoBackend io, const Writer *w, const char *what) {
    CHECK_MSG(w->flushed == 1, "%s, %s: on_flushed ran %d times", name(io), what, w->flushed);
    CHECK_MSG(w->pending_told == 0, "%s, %s: %zu bytes queued when told", name(io), what, w->pending_told);
    CHECK_MSG(!w->told_within, "%s, %s: told within the writer's call", name(io), what);
    CHECK_MSG(w->received == w->len, "%s, %s: the peer read %zu of %zu", name(io), what, w->received, w->len);
}

static const xIoBackend backends[] = {XIO_EPOLL, XIO_URING};

/* The case the upstream client met: the socket takes the queue whole at
 * the turn's end (on io_uring in a send by completion), so no full socket
 * ever brings on_flushed. */
static void test_a_queue_sent_whole_at_the_turns_end_tells_the_writer(void) {
    for (size_t i = 0; i < 2; i++) {
        Writer w = {.len = 60000, .wait = true};
        run(backends[i], &w, 0);
        check_told_once(backends[i], &w, "sent whole");
    }
}

static void test_a_full_socket_that_drains_tells_the_writer_once(void) {
    for (size_t i = 0; i < 2; i++) {
        Writer w = {.len = BIG, .wait = true};
        run(backends[i], &w, 16384);
        check_told_once(backends[i], &w, "full socket");
    }
}

static void test_a_flush_of_the_writers_own_that_sends_all_tells_it_after(void) {
    for (size_t i = 0; i < 2; i++) {
        Writer w = {.len = 3000, .wait = true, .flush_now = true};
        run(backends[i], &w, 0);
        check_told_once(backends[i], &w, "its own flush");
    }
}

static void test_nothing_queued_tells_the_writer_at_the_turns_end(void) {
    for (size_t i = 0; i < 2; i++) {
        Writer w = {.len = 0, .wait = true};
        run(backends[i], &w, 0);
        check_told_once(backends[i], &w, "nothing queued");
    }
}

/* Unchanged for a writer that does not wait: a queue that leaves whole says
 * nothing (the fast path). */
static void test_a_writer_that_does_not_wait_hears_nothing_of_a_whole_send(void) {
    for (size_t i = 0; i < 2; i++) {
        Writer w = {.len = 60000};
        run(backends[i], &w, 0);
        CHECK_MSG(w.flushed == 0, "%s: on_flushed ran %d times", name(backends[i]), w.flushed);
        CHECK_EQ_INT(w.received, w.len);
    }
}

int main(void) {
    for (size_t i = 0; i < BIG; i++) payload[i] = (char)('a' + i % 26);
    RUN(test_a_queue_sent_whole_at_the_turns_end_tells_the_writer);
    RUN(test_a_full_socket_that_drains_tells_the_writer_once);
    RUN(test_a_flush_of_the_writers_own_that_sends_all_tells_it_after);
    RUN(test_nothing_queued_tells_the_writer_at_the_turns_end);
    RUN(test_a_writer_that_does_not_wait_hears_nothing_of_a_whole_send);
    return CHECK_SUMMARY();
}
