/* interop_redis.c — hiredis's asynchronous API driven by an xKit loop (on
 * the backend XK_IO names) through hiredis_on_xkit.h, against the
 * redis-server on 127.0.0.1:PORT: COUNT SETs, GETs and INCRs pipelined at once
 * and every reply checked; a value of BIG bytes SET and read back whole (its
 * GET's reply fills many reads); then a second connection has the server kill
 * the first, whose disconnect callback must say so, and closes itself. Prints
 * what went wrong and exits 1, or "ok". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hiredis_on_xkit.h"

static xEventLoop *loop;
static redisAsyncContext *worker, *killer;
static int failures, replies, count, disconnects;
static long long worker_id;
static size_t big_bytes;
static char *big;

static void failed(const char *what, const redisReply *reply) {
    printf("%s: %s\n", what,
           reply ? (reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply") : "no reply");
    failures++;
}

static void on_set(redisAsyncContext *ac, void *r, void *arg) {
    redisReply *reply = r;
    if (!reply || reply->type != REDIS_REPLY_STATUS || strcmp(reply->str, "OK") != 0) failed("SET", reply);
    replies++;
}

static void on_get(redisAsyncContext *ac, void *r, void *arg) {
    redisReply *reply = r;
    char want[32];
    snprintf(want, sizeof want, "value-%d", (int)(intptr_t)arg);
    if (!reply || reply->type != REDIS_REPLY_STRING || strcmp(reply->str, want) != 0) failed("GET", reply);
    replies++;
}

static void on_incr(redisAsyncContext *ac, void *r, void *arg) {
    redisReply *reply = r;
    if (!reply || reply->type != REDIS_REPLY_INTEGER || reply->integer != (long long)(intptr_t)arg)
        failed("INCR", reply);
    replies++;
}

static void on_killed(redisAsyncContext *ac, void *r, void *arg) {
    redisReply *reply = r;
    if (!reply || reply->type != REDIS_REPLY_INTEGER || reply->integer != 1) failed("CLIENT KILL", reply);
    redisAsyncDisconnect(killer); /* after this reply: a clean close */
}

static void on_big_get(redisAsyncContext *ac, void *r, void *arg) {
    redisReply *reply = r;
    if (!reply || reply->type != REDIS_REPLY_STRING || reply->len != big_bytes ||
        memcmp(reply->str, big, big_bytes))
        failed("GET of the big value", reply);
    replies++;
    /* All answered: the other connection has the server drop this one. */
    redisAsyncCommand(killer, on_killed, NULL, "CLIENT KILL ID %lld", worker_id);
}

static void on_client_id(redisAsyncContext *ac, void *r, void *arg) {
    redisReply *reply = r;
    if (!reply || reply->type != REDIS_REPLY_INTEGER) failed("CLIENT ID", reply);
    worker_id = reply ? reply->integer : -1;
}

static void on_connect(const redisAsyncContext *ac, int status) {
    if (status != REDIS_OK) {
        printf("connect: %s\n", ac->errstr);
        failures++;
        xEventLoopStop(loop);
    }
}

static void on_disconnect(const redisAsyncContext *ac, int status) {
    if (ac == worker && status != REDIS_ERR) {
        printf("the killed connection's disconnect said %d, not REDIS_ERR\n", status);
        failures++;
    }
    if (ac == killer && status != REDIS_OK) {
        printf("the clean close said %d (%s), not REDIS_OK\n", status, ac->errstr);
        failures++;
    }
    if (++disconnects == 2) xEventLoopStop(loop);
}

static redisAsyncContext *connect_to(int port) {
    redisAsyncContext *ac = redisAsyncConnect("127.0.0.1", port);
    if (!ac || ac->err || xRedisAttach(loop, ac) != REDIS_OK) {
        printf("redisAsyncConnect: %s\n", ac ? ac->errstr : "no memory");
        exit(1);
    }
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    return ac;
}

static void give_up(xEventLoop *l, xTimer *timer, void *arg) {
    printf("gave up: %d replies, %d disconnects\n", replies, disconnects);
    failures++;
    xEventLoopStop(l);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s PORT COUNT BIG\n", argv[0]);
        return 2;
    }
    int port = atoi(argv[1]);
    count = atoi(argv[2]);
    big_bytes = (size_t)atol(argv[3]);
    big = malloc(big_bytes);
    for (size_t j = 0; j < big_bytes; j++) big[j] = (char)(j * 13 % 256); /* binary, NULs included */
    loop = xEventLoopCreate();
    worker = connect_to(port);
    killer = connect_to(port);

    /* Everything queued before the loop runs: one pipeline. */
    redisAsyncCommand(worker, on_client_id, NULL, "CLIENT ID");
    redisAsyncCommand(worker, NULL, NULL, "DEL counter");
    for (int i = 0; i < count; i++) {
        redisAsyncCommand(worker, on_set, NULL, "SET key-%d value-%d", i, i);
        redisAsyncCommand(worker, on_incr, (void *)(intptr_t)(i + 1), "INCR counter");
    }
    for (int i = 0; i < count; i++) redisAsyncCommand(worker, on_get, (void *)(intptr_t)i, "GET key-%d", i);
    redisAsyncCommand(worker, on_set, NULL, "SET big %b", big, big_bytes);
    redisAsyncCommand(worker, on_big_get, NULL, "GET big");

    xTimer deadline;
    xTimerInit(&deadline, give_up, NULL);
    xTimerStart(loop, &deadline, 60000);
    xEventLoopRun(loop);
    xTimerStop(loop, &deadline);
    int want = 3 * count + 2;
    if (replies != want) {
        printf("%d of %d replies\n", replies, want);
        failures++;
    }
    if (disconnects != 2) {
        printf("%d of 2 disconnects heard\n", disconnects);
        failures++;
    }
    printf("%s: %d replies, a %zu-byte value, and a disconnect, on %s\n", failures ? "FAILED" : "ok", replies,
           big_bytes, xEventLoopBackend(loop));
    xEventLoopDestroy(loop);
    free(big);
    return failures ? 1 : 0;
}
