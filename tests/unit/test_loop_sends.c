/* test_loop_sends.c — sends by completion (loop_internal.h), on io_uring,
 * the one backend that has them: a queued send, one segment or gathered, is
 * taken with the next wait and its result reported as XEV_SENT when the loop
 * next wakes (for anything: the wait sleeps past completions of its own
 * sends); a full socket
 * says EAGAIN and then XEV_WRITE once drained; a closed peer says EPIPE and
 * raises no SIGPIPE; a socket removed and closed with a send queued gets its
 * bytes before its end, and xEventLoopSubmit hands a send in at once, so the
 * memory either way may change after; more sends in one turn than the ring has
 * entries, gathered ones among them, all arrive. On epoll there are none. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <xbase/event.h>

#include "check.h"
#include "xbase/loop/loop_internal.h"

typedef struct Sender {
    int pair[2];
    int sent_reports;
    ssize_t results[4];
    int errors[4];
    bool writable; /* XEV_WRITE after the first result */
    char bytes[64];
    xTimer timer;
} Sender;

static xEventLoop *uring_loop(void) {
    xEventLoop *loop = xEventLoopCreateWith(XIO_URING);
    CHECK(loop != NULL);
    CHECK(strcmp(xEventLoopBackend(loop), "io_uring") == 0);
    CHECK(xEventLoopSendsByCompletion(loop));
    return loop;
}

static void stop_at(xEventLoop *loop, xTimer *timer, void *arg) { xEventLoopStop(loop); }

static void on_sender(xEventLoop *loop, int fd, unsigned events, void *arg) {
    Sender *s = arg;
    if ((events & XEV_WRITE) && s->sent_reports) s->writable = true;
    if (!(events & XEV_SENT) || s->sent_reports == 4) return;
    int i = s->sent_reports++;
    s->results[i] = xEventLoopSendResult(loop, fd);
    s->errors[i] = s->results[i] < 0 ? errno : 0;
}

static void queue_hello(xEventLoop *loop, xTimer *timer, void *arg) {
    Sender *s = arg;
    memcpy(s->bytes, "hello ", 6);
    struct iovec iov = {s->bytes, 6};
    CHECK_EQ_INT(xEventLoopSendQueue(loop, s->pair[0], &iov, 1), 0);
}

/* The next send, gathered, once the first is heard: one per socket at a time. */
static void queue_world(xEventLoop *loop, xTimer *timer, void *arg) {
    Sender *s = arg;
    CHECK_EQ_INT(s->sent_reports, 1);
    struct iovec iov[2] = {{"wor", 3}, {"ld", 2}};
    CHECK_EQ_INT(xEventLoopSendQueue(loop, s->pair[0], iov, 2), 0);
}

static void run_for(xEventLoop *loop, uint64_t ms) {
    xTimer stop;
    xTimerInit(&stop, stop_at, NULL);
    xTimerStart(loop, &stop, ms);
    xEventLoopRun(loop);
    xTimerStop(loop, &stop);
}

static void test_sends_are_taken_with_the_next_wait_and_reported(void) {
    xEventLoop *loop = uring_loop();
    Sender s = {0};
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, s.pair) == 0);
    CHECK_EQ_INT(xEventLoopAdd(loop, s.pair[0], XEV_READ | XEV_WRITE, on_sender, &s), XOK);
    xTimer second;
    xTimerInit(&s.timer, queue_hello, &s);
    xTimerInit(&second, queue_world, &s);
    xTimerStart(loop, &s.timer, 1);
    xTimerStart(loop, &second, 20); /* its wake-up reports the first */
    run_for(loop, 40);              /* and this one the second */
    CHECK_EQ_INT(s.sent_reports, 2);
    CHECK_EQ_INT(s.results[0], 6);
    CHECK_EQ_INT(s.results[1], 5);
    char got[32] = {0};
    ssize_t n = read(s.pair[1], got, sizeof got);
    CHECK_EQ_INT(n, 11);
    CHECK(strcmp(got, "hello world") == 0);
    xEventLoopRemove(loop, s.pair[0]);
    close(s.pair[0]);
    close(s.pair[1]);
    xEventLoopDestroy(loop);
}

static void queue_into_full(xEventLoop *loop, xTimer *timer, void *arg) {
    Sender *s = arg;
    static char fill[4096];
    while (send(s->pair[0], fill, sizeof fill, MSG_DONTWAIT) > 0) {
    }
    struct iovec iov = {fill, sizeof fill};
    CHECK_EQ_INT(xEventLoopSendQueue(loop, s->pair[0], &iov, 1), 0);
}

static void drain_peer(xEventLoop *loop, xTimer *timer, void *arg) {
    Sender *s = arg;
    char sink[65536];
    while (recv(s->pair[1], sink, sizeof sink, MSG_DONTWAIT) > 0) {
    }
}

/* The send never waits for room: a full socket fails it at once, as send(2)
 * with MSG_DONTWAIT does, and the poll says when room comes. */
static void test_a_full_socket_says_eagain_then_writable_once_drained(void) {
    xEventLoop *loop = uring_loop();
    Sender s = {0};
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, s.pair) == 0);
    CHECK_EQ_INT(xEventLoopAdd(loop, s.pair[0], XEV_READ | XEV_WRITE, on_sender, &s), XOK);
    xTimer drain;
    xTimerInit(&s.timer, queue_into_full, &s);
    xTimerInit(&drain, drain_peer, &s);
    xTimerStart(loop, &s.timer, 1);
    xTimerStart(loop, &drain, 30);
    run_for(loop, 80);
    CHECK_EQ_INT(s.sent_reports, 1);
    CHECK_EQ_INT(s.results[0], -1);
    CHECK_EQ_INT(s.errors[0], EAGAIN);
    CHECK(s.writable);
    xEventLoopRemove(loop, s.pair[0]);
    close(s.pair[0]);
    close(s.pair[1]);
    xTimerStop(loop, &drain);
    xEventLoopDestroy(loop);
}

/* A peer gone: EPIPE, and no SIGPIPE, which would end this process. */
static void test_a_closed_peer_says_epipe_without_a_signal(void) {
    xEventLoop *loop = uring_loop();
    Sender s = {0};
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, s.pair) == 0);
    CHECK_EQ_INT(xEventLoopAdd(loop, s.pair[0], XEV_READ | XEV_WRITE, on_sender, &s), XOK);
    close(s.pair[1]);
    xTimerInit(&s.timer, queue_hello, &s);
    xTimerStart(loop, &s.timer, 1);
    run_for(loop, 40);
    CHECK_EQ_INT(s.sent_reports, 1);
    CHECK_EQ_INT(s.results[0], -1);
    CHECK_EQ_INT(s.errors[0], EPIPE);
    xEventLoopRemove(loop, s.pair[0]);
    close(s.pair[0]);
    xEventLoopDestroy(loop);
}

/* Queued, then the socket removed and closed, and the bytes overwritten, in
 * the same turn: the removal hands the send in first, so the peer gets the
 * bytes as they were, then the end of the stream. */
static void queue_then_close(xEventLoop *loop, xTimer *timer, void *arg) {
    Sender *s = arg;
    memcpy(s->bytes, "last ", 5);
    memcpy(s->bytes + 5, "words", 5);
    struct iovec iov[2] = {{s->bytes, 5}, {s->bytes + 5, 5}};
    CHECK_EQ_INT(xEventLoopSendQueue(loop, s->pair[0], iov, 2), 0);
    xEventLoopRemove(loop, s->pair[0]);
    close(s->pair[0]);
    memset(s->bytes, '#', sizeof s->bytes);
}

static void test_a_socket_closed_with_a_send_queued_gets_its_bytes_first(void) {
    xEventLoop *loop = uring_loop();
    Sender s = {0};
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, s.pair) == 0);
    CHECK_EQ_INT(xEventLoopAdd(loop, s.pair[0], XEV_READ | XEV_WRITE, on_sender, &s), XOK);
    xTimerInit(&s.timer, queue_then_close, &s);
    xTimerStart(loop, &s.timer, 1);
    run_for(loop, 40);
    CHECK_EQ_INT(s.sent_reports, 0); /* its completion is stale: the socket went */
    char got[32] = {0};
    ssize_t n = read(s.pair[1], got, sizeof got);
    CHECK_EQ_INT(n, 10);
    CHECK(strcmp(got, "last words") == 0);
    n = read(s.pair[1], got, sizeof got);
    CHECK_EQ_INT(n, 0);
    close(s.pair[1]);
    xEventLoopDestroy(loop);
}

static void queue_then_submit(xEventLoop *loop, xTimer *timer, void *arg) {
    Sender *s = arg;
    memcpy(s->bytes, "as it was", 9);
    struct iovec iov[3] = {{s->bytes, 3}, {s->bytes + 3, 3}, {s->bytes + 6, 3}};
    CHECK_EQ_INT(xEventLoopSendQueue(loop, s->pair[0], iov, 3), 0);
    xEventLoopSubmit(loop);
    memset(s->bytes, '#', sizeof s->bytes);
}

static void test_a_submitted_send_has_taken_its_bytes(void) {
    xEventLoop *loop = uring_loop();
    Sender s = {0};
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, s.pair) == 0);
    CHECK_EQ_INT(xEventLoopAdd(loop, s.pair[0], XEV_READ | XEV_WRITE, on_sender, &s), XOK);
    xTimerInit(&s.timer, queue_then_submit, &s);
    xTimerStart(loop, &s.timer, 1);
    run_for(loop, 40);
    CHECK_EQ_INT(s.sent_reports, 1);
    CHECK_EQ_INT(s.results[0], 9);
    char got[32] = {0};
    ssize_t n = read(s.pair[1], got, sizeof got);
    CHECK_EQ_INT(n, 9);
    CHECK(strcmp(got, "as it was") == 0);
    xEventLoopRemove(loop, s.pair[0]);
    close(s.pair[0]);
    close(s.pair[1]);
    xEventLoopDestroy(loop);
}

/* More sends in one turn than the ring has entries (256), every other one
 * gathered: the queue is handed in as it fills, and the gathered sends'
 * headers are kept until they are. */
#define MANY 300

static Sender many[MANY];

static void queue_many(xEventLoop *loop, xTimer *timer, void *arg) {
    for (int i = 0; i < MANY; i++) {
        Sender *s = &many[i];
        int len = snprintf(s->bytes, sizeof s->bytes, "socket %d says hello", i);
        struct iovec iov[3] = {{s->bytes, 7}, {s->bytes + 7, (size_t)len - 13}, {s->bytes + len - 6, 6}};
        if (i % 2)
            CHECK_EQ_INT(xEventLoopSendQueue(loop, s->pair[0], iov, 3), 0);
        else
            CHECK_EQ_INT(xEventLoopSendQueue(loop, s->pair[0], &(struct iovec){s->bytes, (size_t)len}, 1), 0);
    }
}

static void test_more_sends_in_a_turn_than_ring_entries_all_arrive(void) {
    xEventLoop *loop = uring_loop();
    for (int i = 0; i < MANY; i++) {
        CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, many[i].pair) == 0);
        CHECK_EQ_INT(xEventLoopAdd(loop, many[i].pair[0], XEV_READ | XEV_WRITE, on_sender, &many[i]), XOK);
    }
    xTimer start, wake;
    xTimerInit(&start, queue_many, NULL);
    xTimerInit(&wake, stop_at, NULL);
    xTimerStart(loop, &start, 1);
    xTimerStart(loop, &wake, 20);
    xEventLoopRun(loop); /* the wake-up reports 64 (a turn's most); the turns after it, the rest */
    run_for(loop, 40);
    int whole = 0;
    for (int i = 0; i < MANY; i++) {
        char want[64], got[64] = {0};
        int len = snprintf(want, sizeof want, "socket %d says hello", i);
        whole += many[i].sent_reports == 1 && many[i].results[0] == len &&
                 read(many[i].pair[1], got, sizeof got) == len && memcmp(got, want, (size_t)len) == 0;
        xEventLoopRemove(loop, many[i].pair[0]);
        close(many[i].pair[0]);
        close(many[i].pair[1]);
    }
    CHECK_EQ_INT(whole, MANY);
    xEventLoopDestroy(loop);
}

static void test_epoll_has_no_sends_by_completion(void) {
    xEventLoop *loop = xEventLoopCreateWith(XIO_EPOLL);
    CHECK(loop != NULL);
    CHECK(!xEventLoopSendsByCompletion(loop));
    int pair[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, pair) == 0);
    struct iovec iov = {"x", 1};
    errno = 0;
    CHECK_EQ_INT(xEventLoopSendQueue(loop, pair[0], &iov, 1), -1);
    CHECK_EQ_INT(errno, EOPNOTSUPP);
    xEventLoopSubmit(loop); /* nothing to hand in: harmless */
    close(pair[0]);
    close(pair[1]);
    xEventLoopDestroy(loop);
}

int main(void) {
    RUN(test_epoll_has_no_sends_by_completion);
    RUN(test_sends_are_taken_with_the_next_wait_and_reported);
    RUN(test_a_full_socket_says_eagain_then_writable_once_drained);
    RUN(test_a_closed_peer_says_epipe_without_a_signal);
    RUN(test_a_socket_closed_with_a_send_queued_gets_its_bytes_first);
    RUN(test_a_submitted_send_has_taken_its_bytes);
    RUN(test_more_sends_in_a_turn_than_ring_entries_all_arrive);
    return CHECK_SUMMARY();
}
