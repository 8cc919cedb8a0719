/* redis_bench — what xdb's Redis client costs per command, and what
 * pipelining saves, against a redis-server on 127.0.0.1:PORT.
 *
 *   redis_bench PORT [DEPTH [SECONDS]]
 *
 * Keeps DEPTH GETs of a 64-byte value in flight (default 1: one at a time)
 * for SECONDS (default 2): each reply's callback sends the next, so the
 * commands a turn's replies call for leave in one write at its end. Prints
 * one line, this process's CPU and Redis's own (INFO cpu) per command:
 *   "depth 16: 412345 GETs/s, client 1.21 us/GET, redis 2.05 us/GET, 0.07 writes/GET". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <xbase/event.h>
#include <xdb/redis.h>

static xEventLoop *loop;
static xRedisClient *client;
static long completed, failed;
static bool running = true;
static int outstanding;

static double cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void send_get(void);

static void on_get(xRedisClient *c, const xRedisReply *reply, void *arg) {
    outstanding--;
    if (reply->type == XREDIS_STRING)
        completed++;
    else
        failed++;
    if (running) send_get();
}

static void send_get(void) {
    static const char *const argv[] = {"GET", "bench:value"};
    if (xRedisCommand(client, 2, argv, NULL, 0, on_get, NULL)) outstanding++;
}

/* ---- a few commands run to the end, one at a time, outside the measurement ---- */

static char info[4096];
static bool answered;

static void on_setup(xRedisClient *c, const xRedisReply *reply, void *arg) {
    if (reply->type == XREDIS_ERROR) {
        fprintf(stderr, "redis: %.*s\n", (int)reply->len, reply->str);
        exit(1);
    }
    if (reply->type == XREDIS_STRING) snprintf(info, sizeof info, "%.*s", (int)reply->len, reply->str);
    answered = true;
    xEventLoopStop(loop);
}

static void run_command(int argc, const char *const *argv) {
    answered = false;
    xRedisCommand(client, argc, argv, NULL, 5000, on_setup, NULL);
    while (!answered) xEventLoopRun(loop);
}

/* Redis's CPU seconds so far, user and system, from INFO cpu. */
static double redis_cpu_seconds(void) {
    static const char *const argv[] = {"INFO", "cpu"};
    run_command(2, argv);
    const char *user = strstr(info, "used_cpu_user:"), *sys = strstr(info, "used_cpu_sys:");
    return (user ? atof(user + 14) : 0) + (sys ? atof(sys + 13) : 0);
}

static void on_stop(xEventLoop *l, xTimer *timer, void *arg) { running = false; }

static void on_drained_check(xEventLoop *l, xTimer *timer, void *arg) {
    if (outstanding == 0)
        xEventLoopStop(l);
    else
        xTimerStart(l, timer, 1);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s PORT [DEPTH [SECONDS]]\n", argv[0]);
        return 2;
    }
    int depth = argc > 2 ? atoi(argv[2]) : 1;
    int seconds = argc > 3 ? atoi(argv[3]) : 2;
    loop = xEventLoopCreate();
    xRedisConfig conf;
    xRedisConfigInit(&conf);
    conf.port = (uint16_t)atoi(argv[1]);
    conf.command_timeout_ms = 5000;
    client = xRedisClientCreate(loop, &conf);
    static const char *const set[] = {"SET", "bench:value",
                                      "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"};
    run_command(3, set);

    xRedisStats before, after;
    xRedisClientStats(client, &before);
    double redis_before = redis_cpu_seconds(), cpu_before = cpu_seconds();
    struct timespec wall_start, wall_end;
    clock_gettime(CLOCK_MONOTONIC, &wall_start);
    xTimer stop, drained;
    xTimerInit(&stop, on_stop, NULL);
    xTimerInit(&drained, on_drained_check, NULL);
    xTimerStart(loop, &stop, (uint64_t)seconds * 1000);
    xTimerStart(loop, &drained, (uint64_t)seconds * 1000 + 1);
    for (int i = 0; i < depth; i++) send_get();
    xEventLoopRun(loop);
    clock_gettime(CLOCK_MONOTONIC, &wall_end);
    double cpu = cpu_seconds() - cpu_before;
    xRedisClientStats(client, &after);
    double redis_cpu = redis_cpu_seconds() - redis_before;
    double wall = (double)(wall_end.tv_sec - wall_start.tv_sec) +
                  (double)(wall_end.tv_nsec - wall_start.tv_nsec) * 1e-9;
    /* The INFO commands' writes are not the GETs': one each, before and after. */
    double writes = (double)(after.writes - before.writes - 1);
    printf("depth %d: %.0f GETs/s, client %.2f us/GET, redis %.2f us/GET, %.3f writes/GET%s\n", depth,
           (double)completed / wall, cpu * 1e6 / (double)completed, redis_cpu * 1e6 / (double)completed,
           writes / (double)completed, failed ? " (some failed)" : "");
    xRedisClientFree(client);
    xEventLoopDestroy(loop);
    return failed ? 1 : 0;
}
