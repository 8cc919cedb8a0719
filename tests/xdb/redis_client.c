/* redis_client.c — xdb's Redis client and cache-aside helper against a real
 * redis-server on 127.0.0.1:PORT, one scenario per run, on the backend XK_IO
 * names (tests/integration/test_xdb_redis.py starts the server and drives
 * this):
 *
 *   redis_client types PORT      replies of every type, binary and 1 MB values, injection-shaped bytes
 *   redis_client pipeline PORT   thousands of commands in one turn leave in a few writes, answered in order
 *   redis_client timeout PORT    a blocked command times out, the connection is re-made, work goes on
 *   redis_client restart PORT    Redis killed under use (prints "kill", reads a line; "start", reads a line)
 *   redis_client cancel PORT     cancelled commands' callbacks never run
 *   redis_client free PORT       a client freed from its own callbacks answers the rest CLOSED
 *   redis_client cache PORT      cache-aside: miss, hit, coalesced misses, TTL expiry, invalidate
 *   redis_client cache-down PORT cache-aside with no Redis: the loader answers, nothing fails
 *   redis_client connect-timeout 0   a connect that hangs (a full backlog) is given up after
 * connect_timeout_ms
 *
 * Prints what went wrong and exits 1, or "ok SCENARIO on BACKEND: …". */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <xbase/event.h>
#include <xdb/redis.h>
#include <xdb/redis_cache.h>

#define CHECK(cond, ...)                                                                                     \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                                           \
            printf(__VA_ARGS__);                                                                             \
            printf("\n");                                                                                    \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

static xEventLoop *loop;
static uint16_t port;

/* ---- running the loop until something has happened ---- */

static const int *watched_count;
static int watched_target;
static uint64_t wait_deadline;
static xTimer tick;

static void on_tick(xEventLoop *l, xTimer *timer, void *arg) {
    if (*watched_count >= watched_target || xEventLoopNowMs(l) >= wait_deadline)
        xEventLoopStop(l);
    else
        xTimerStart(l, timer, 2);
}

/* Runs the loop until *count reaches target or ms pass; true if it did. */
static bool run_until(const int *count, int target, uint64_t ms) {
    watched_count = count;
    watched_target = target;
    wait_deadline = xEventLoopNowMs(loop) + ms;
    xTimerStart(loop, &tick, 1);
    xEventLoopRun(loop);
    xTimerStop(loop, &tick);
    return *count >= target;
}

/* Runs the loop for ms. */
static void run_for(uint64_t ms) {
    static const int never = 0;
    run_until(&never, 1, ms);
}

static xRedisClient *connect_client(const xRedisConfig *given) {
    xRedisConfig conf = given ? *given : (xRedisConfig){0};
    conf.host = "127.0.0.1";
    if (!conf.port) conf.port = port;
    xRedisClient *c = xRedisClientCreate(loop, &conf);
    CHECK(c, "xRedisClientCreate");
    return c;
}

static void wait_connected(xRedisClient *c) {
    for (int i = 0; i < 500 && !xRedisClientConnected(c); i++) run_for(10);
    CHECK(xRedisClientConnected(c), "not connected to 127.0.0.1:%u", port);
}

/* ---- replies kept for the checks ---- */

typedef struct Kept {
    int replies;
    xRedisReplyType type[8];
    xRedisFailure failure[8];
    long long integer[8];
    char *str[8];
    size_t len[8];
    size_t count[8];
} Kept;

static char *copy_bytes(const char *s, size_t len) {
    char *copy = malloc(len + 1);
    if (len) memcpy(copy, s, len);
    copy[len] = '\0';
    return copy;
}

static void keep(xRedisClient *c, const xRedisReply *r, void *arg) {
    Kept *k = arg;
    int i = k->replies++;
    if (i >= 8) return;
    k->type[i] = r->type;
    k->failure[i] = r->failure;
    k->integer[i] = r->integer;
    k->str[i] = r->str ? copy_bytes(r->str, r->len) : NULL;
    k->len[i] = r->len;
    k->count[i] = r->count;
}

static void kept_clear(Kept *k) {
    for (int i = 0; i < 8; i++) free(k->str[i]);
    memset(k, 0, sizeof *k);
}

static xRedisCall *send2(xRedisClient *c, const char *a, const char *b, xRedisReplyFn fn, void *arg) {
    const char *argv[] = {a, b};
    return xRedisCommand(c, b ? 2 : 1, argv, NULL, 0, fn, arg);
}

/* One command with binary arguments, its reply kept in k (which is cleared first). */
static void command(xRedisClient *c, Kept *k, int argc, const char *const *argv, const size_t *len) {
    kept_clear(k);
    CHECK(xRedisCommand(c, argc, argv, len, 0, keep, k), "xRedisCommand %s", argv[0]);
    CHECK(run_until(&k->replies, 1, 5000), "no reply to %s", argv[0]);
}

/* ---- types ---- */

static void check_array(xRedisClient *c, const xRedisReply *r, void *arg) {
    int *done = arg;
    CHECK(r->type == XREDIS_ARRAY && r->count == 3, "LRANGE: type %d count %zu", r->type, r->count);
    const char *want[] = {"c", "b", "a"};
    for (size_t i = 0; i < 3; i++) {
        xRedisReply e = xRedisReplyElement(r, i);
        CHECK(e.type == XREDIS_STRING && e.len == 1 && e.str[0] == want[i][0], "element %zu", i);
    }
    CHECK(xRedisReplyElement(r, 3).type == XREDIS_NIL, "element past the end is nil");
    (*done)++;
}

static void scenario_types(void) {
    xRedisClient *c = connect_client(NULL);
    Kept k = {0};
    const char *del[] = {"DEL", "xk:s", "xk:n", "xk:list", "xk:bin", "xk:big"};
    command(c, &k, 6, del, NULL);
    CHECK(k.type[0] == XREDIS_INTEGER, "DEL: an integer");

    const char *set[] = {"SET", "xk:s", "hello"};
    command(c, &k, 3, set, NULL);
    CHECK(k.type[0] == XREDIS_STATUS && strcmp(k.str[0], "OK") == 0, "SET: status OK, got %d", k.type[0]);
    const char *get[] = {"GET", "xk:s"};
    command(c, &k, 2, get, NULL);
    CHECK(k.type[0] == XREDIS_STRING && k.len[0] == 5 && memcmp(k.str[0], "hello", 5) == 0, "GET: hello");
    const char *missing[] = {"GET", "xk:missing"};
    command(c, &k, 2, missing, NULL);
    CHECK(k.type[0] == XREDIS_NIL, "GET of a missing key: nil, got %d", k.type[0]);
    const char *incrby[] = {"INCRBY", "xk:n", "-42"};
    command(c, &k, 3, incrby, NULL);
    CHECK(k.type[0] == XREDIS_INTEGER && k.integer[0] == -42, "INCRBY: -42, got %lld", k.integer[0]);
    const char *ping[] = {"PING"};
    command(c, &k, 1, ping, NULL);
    CHECK(k.type[0] == XREDIS_STATUS && strcmp(k.str[0], "PONG") == 0, "PING: PONG");
    const char *bad[] = {"INCR", "xk:s"};
    command(c, &k, 2, bad, NULL);
    CHECK(k.type[0] == XREDIS_ERROR && k.failure[0] == XREDIS_ANSWERED && strstr(k.str[0], "not an integer"),
          "INCR of a string: Redis's error, got %d %s", k.type[0], k.str[0] ? k.str[0] : "");
    const char *unknown[] = {"NO-SUCH-COMMAND"};
    command(c, &k, 1, unknown, NULL);
    CHECK(k.type[0] == XREDIS_ERROR && k.failure[0] == XREDIS_ANSWERED, "an unknown command: an error reply");

    const char *subscribe[] = {"subscribe", "xk:channel"};
    CHECK(!xRedisCommand(c, 2, subscribe, NULL, 0, keep, &k), "SUBSCRIBE is refused");
    const char *monitor[] = {"MONITOR"};
    CHECK(!xRedisCommand(c, 1, monitor, NULL, 0, keep, &k), "MONITOR is refused");

    const char *push[] = {"LPUSH", "xk:list", "a", "b", "c"};
    command(c, &k, 5, push, NULL);
    CHECK(k.type[0] == XREDIS_INTEGER && k.integer[0] == 3, "LPUSH: 3");
    int arrays = 0;
    const char *range[] = {"LRANGE", "xk:list", "0", "-1"};
    xRedisCommand(c, 4, range, NULL, 0, check_array, &arrays);
    CHECK(run_until(&arrays, 1, 5000), "LRANGE answered");
    const char *empty_range[] = {"LRANGE", "xk:missing", "0", "-1"};
    command(c, &k, 4, empty_range, NULL);
    CHECK(k.type[0] == XREDIS_ARRAY && k.count[0] == 0, "LRANGE of nothing: an empty array");

    /* Binary-safe: NUL bytes and CR LF in keys and values. */
    static const char bin_key[] = "xk:bin\0key\r\n";
    static const char bin_value[] = "\0\x01\r\n\0value\xff";
    const char *bset[] = {"SET", bin_key, bin_value};
    const size_t bset_len[] = {3, sizeof bin_key - 1, sizeof bin_value - 1};
    command(c, &k, 3, bset, bset_len);
    CHECK(k.type[0] == XREDIS_STATUS, "SET of binary bytes");
    const char *bget[] = {"GET", bin_key};
    const size_t bget_len[] = {3, sizeof bin_key - 1};
    command(c, &k, 2, bget, bget_len);
    CHECK(k.type[0] == XREDIS_STRING && k.len[0] == sizeof bin_value - 1 &&
              memcmp(k.str[0], bin_value, sizeof bin_value - 1) == 0,
          "GET of binary bytes: %zu bytes", k.len[0]);

    /* A 1 MiB value of every byte value. */
    size_t big_len = 1u << 20;
    char *big = malloc(big_len);
    for (size_t i = 0; i < big_len; i++) big[i] = (char)(i * 7 + i / 251);
    const char *big_set[] = {"SET", "xk:big", big};
    const size_t big_set_len[] = {3, 6, big_len};
    command(c, &k, 3, big_set, big_set_len);
    CHECK(k.type[0] == XREDIS_STATUS, "SET of 1 MiB");
    const char *big_get[] = {"GET", "xk:big"};
    command(c, &k, 2, big_get, NULL);
    CHECK(k.type[0] == XREDIS_STRING && k.len[0] == big_len && memcmp(k.str[0], big, big_len) == 0,
          "GET of 1 MiB: %zu bytes back", k.len[0]);
    free(big);

    /* Bytes shaped like RESP are data: nothing they spell runs. */
    const char *victim[] = {"SET", "xk:victim", "still here"};
    command(c, &k, 3, victim, NULL);
    static const char inj_key[] = "xk:inj\r\n*2\r\n$3\r\nDEL\r\n$9\r\nxk:victim\r\n";
    static const char inj_value[] = "v\r\n*1\r\n$8\r\nFLUSHALL\r\n";
    const char *inj_set[] = {"SET", inj_key, inj_value};
    command(c, &k, 3, inj_set, NULL);
    CHECK(k.type[0] == XREDIS_STATUS, "SET of an injection-shaped key");
    const char *inj_get[] = {"GET", inj_key};
    command(c, &k, 2, inj_get, NULL);
    CHECK(k.type[0] == XREDIS_STRING && strcmp(k.str[0], inj_value) == 0,
          "the injection-shaped value, as stored");
    const char *exists[] = {"EXISTS", "xk:victim", "xk:s", "xk:list"};
    command(c, &k, 4, exists, NULL);
    CHECK(k.type[0] == XREDIS_INTEGER && k.integer[0] == 3, "nothing was deleted or flushed: %lld",
          k.integer[0]);

    kept_clear(&k);
    xRedisClientFree(c);
    printf("ok types on %s: nil, integer, string, array, error, status; binary and 1 MiB values; "
           "injection-shaped bytes stored as they are\n",
           xEventLoopBackend(loop));
}

/* ---- pipeline ---- */

typedef struct Ordered {
    int replies;
    int out_of_order;
} Ordered;

static void check_incr(xRedisClient *c, const xRedisReply *r, void *arg) {
    Ordered *o = arg;
    o->replies++;
    if (r->type != XREDIS_INTEGER || r->integer != o->replies) o->out_of_order++;
}

static void count_ok(xRedisClient *c, const xRedisReply *r, void *arg) {
    int *n = arg;
    if (r->type == XREDIS_STATUS || r->type == XREDIS_STRING) (*n)++;
}

static void scenario_pipeline(int count) {
    xRedisClient *c = connect_client(NULL);
    Kept k = {0};
    const char *del[] = {"DEL", "xk:counter"};
    command(c, &k, 2, del, NULL);
    wait_connected(c);
    xRedisStats before, after;
    xRedisClientStats(c, &before);
    Ordered incrs = {0};
    int oks = 0;
    /* All issued before the loop turns: one turn's commands. */
    for (int i = 0; i < count; i++) {
        char key[32], value[32];
        snprintf(key, sizeof key, "xk:p%d", i);
        snprintf(value, sizeof value, "v%d", i);
        const char *set[] = {"SET", key, value};
        const char *incr[] = {"INCR", "xk:counter"};
        xRedisCommand(c, 3, set, NULL, 5000, count_ok, &oks);
        xRedisCommand(c, 2, incr, NULL, 5000, check_incr, &incrs);
    }
    CHECK(run_until(&incrs.replies, count, 10000), "%d of %d INCRs answered", incrs.replies, count);
    CHECK(run_until(&oks, count, 10000), "%d of %d SETs answered", oks, count);
    CHECK(incrs.out_of_order == 0, "%d INCR replies out of order", incrs.out_of_order);
    xRedisClientStats(c, &after);
    uint64_t writes = after.writes - before.writes;
    /* The turn's 2 x count commands are one buffer: one write, a few more if the socket
     * would not take it at once; one write per command would be 2 x count. */
    CHECK(writes >= 1 && writes <= 8, "%d commands took %llu writes", 2 * count, (unsigned long long)writes);
    const char *get[] = {"GET", "xk:p777"};
    command(c, &k, 2, get, NULL);
    CHECK(k.type[0] == XREDIS_STRING && strcmp(k.str[0], "v777") == 0, "a pipelined SET stored");
    kept_clear(&k);
    xRedisClientFree(c);
    printf("ok pipeline on %s: %d commands in one turn, answered in order, in %llu write(s)\n",
           xEventLoopBackend(loop), 2 * count, (unsigned long long)writes);
}

/* ---- timeout ---- */

static Kept retried;

/* Keeps the reply and, for a timeout, sends again at once: the client is reconnecting. */
static void keep_and_retry(xRedisClient *c, const xRedisReply *r, void *arg) {
    keep(c, r, arg);
    if (r->failure != XREDIS_TIMEOUT) return;
    const char *set[] = {"SET", "xk:retried", "yes"};
    CHECK(xRedisCommand(c, 3, set, NULL, 0, keep, &retried), "xRedisCommand from a timeout's callback");
}

static void scenario_timeout(void) {
    xRedisClient *c = connect_client(NULL);
    xRedisClient *other = connect_client(NULL);
    wait_connected(c);
    wait_connected(other);
    Kept blocked = {0}, behind = {0}, meanwhile = {0};
    /* BLPOP on an empty list holds this connection for 5 s; its 200 ms timeout ends that. */
    const char *blpop[] = {"BLPOP", "xk:empty-list", "5"};
    uint64_t start = xEventLoopNowMs(loop);
    xRedisCommand(c, 3, blpop, NULL, 200, keep_and_retry, &blocked);
    send2(c, "PING", NULL, keep, &behind);
    send2(other, "PING", NULL, keep, &meanwhile);
    CHECK(run_until(&meanwhile.replies, 1, 1000), "the other connection answers while the first waits");
    CHECK(meanwhile.type[0] == XREDIS_STATUS && blocked.replies == 0, "PING on the other connection first");
    CHECK(run_until(&blocked.replies, 1, 4000), "the blocked command did not time out");
    uint64_t took = xEventLoopNowMs(loop) - start;
    CHECK(blocked.type[0] == XREDIS_ERROR && blocked.failure[0] == XREDIS_TIMEOUT,
          "BLPOP: a timeout, got %d/%d", blocked.type[0], blocked.failure[0]);
    /* Bounds wide enough for a loaded machine, far from BLPOP's 5 s. */
    CHECK(took >= 200 && took < 3000, "the timeout came after %llu ms", (unsigned long long)took);
    CHECK(run_until(&behind.replies, 1, 1000), "the command behind it was answered");
    CHECK(behind.type[0] == XREDIS_ERROR && behind.failure[0] == XREDIS_LOST,
          "the command behind: LOST, got %d/%d", behind.type[0], behind.failure[0]);
    /* The connection is re-made at once; commands work long before BLPOP's 5 s. */
    Kept k = {0};
    const char *set[] = {"SET", "xk:after-timeout", "yes"};
    command(c, &k, 3, set, NULL);
    CHECK(k.type[0] == XREDIS_STATUS, "SET after the timeout: %d/%d %s", k.type[0], k.failure[0],
          k.str[0] ? k.str[0] : "");
    uint64_t recovered = xEventLoopNowMs(loop) - start;
    CHECK(recovered < 4000, "recovered after %llu ms", (unsigned long long)recovered);
    xRedisStats stats;
    xRedisClientStats(c, &stats);
    CHECK(stats.timeouts == 1 && stats.connects == 2, "timeouts %llu connects %llu",
          (unsigned long long)stats.timeouts, (unsigned long long)stats.connects);
    /* The old connection's BLPOP must not take a value pushed now. */
    const char *push[] = {"RPUSH", "xk:empty-list", "x"};
    command(other, &k, 3, push, NULL);
    run_for(50);
    const char *len[] = {"LLEN", "xk:empty-list"};
    command(other, &k, 2, len, NULL);
    CHECK(k.type[0] == XREDIS_INTEGER && k.integer[0] == 1, "the dropped connection's BLPOP is gone");
    const char *del[] = {"DEL", "xk:empty-list"};
    command(other, &k, 2, del, NULL);
    kept_clear(&k);
    kept_clear(&blocked);
    kept_clear(&behind);
    kept_clear(&meanwhile);
    kept_clear(&retried);
    xRedisClientFree(c);
    xRedisClientFree(other);
    printf("ok timeout on %s: timed out after %llu ms, the command behind it lost, recovered after %llu ms\n",
           xEventLoopBackend(loop), (unsigned long long)took, (unsigned long long)recovered);
}

/* ---- restart ---- */

static void ask(const char *what) {
    char line[64];
    printf("%s\n", what);
    fflush(stdout);
    CHECK(fgets(line, sizeof line, stdin), "no answer to %s", what);
}

static void scenario_restart(void) {
    xRedisConfig conf = {.reconnect_min_ms = 20, .reconnect_max_ms = 200, .command_timeout_ms = 2000};
    xRedisClient *c = connect_client(&conf);
    wait_connected(c);
    Kept k = {0};
    const char *set[] = {"SET", "xk:restart", "before"};
    command(c, &k, 3, set, NULL);
    CHECK(k.type[0] == XREDIS_STATUS, "SET before the kill");
    /* Commands in flight when Redis dies fail as LOST. */
    const char *blpop[] = {"BLPOP", "xk:restart-list", "10"};
    Kept in_flight = {0};
    xRedisCommand(c, 3, blpop, NULL, 0, keep, &in_flight);
    run_for(50);
    ask("kill");
    CHECK(run_until(&in_flight.replies, 1, 1000), "the command in flight was answered when Redis died");
    CHECK(in_flight.type[0] == XREDIS_ERROR && in_flight.failure[0] == XREDIS_LOST,
          "in flight: LOST, got %d/%d", in_flight.type[0], in_flight.failure[0]);
    /* While down: every command fails, quickly, not after its timeout. */
    int failed = 0;
    for (int i = 0; i < 20; i++) {
        uint64_t start = xEventLoopNowMs(loop);
        command(c, &k, 3, set, NULL);
        uint64_t took = xEventLoopNowMs(loop) - start;
        CHECK(k.type[0] == XREDIS_ERROR && (k.failure[0] == XREDIS_DOWN || k.failure[0] == XREDIS_LOST),
              "while down: an error, got %d/%d", k.type[0], k.failure[0]);
        CHECK(took < 1500, "a command while down took %llu ms, its timeout is 2 s", (unsigned long long)took);
        failed++;
        run_for(20);
    }
    CHECK(!xRedisClientConnected(c), "connected while Redis is down");
    ask("start");
    /* It comes back by itself, within a backoff or two. */
    uint64_t start = xEventLoopNowMs(loop);
    bool back = false;
    while (!back && xEventLoopNowMs(loop) - start < 10000) {
        command(c, &k, 3, set, NULL);
        back = k.type[0] == XREDIS_STATUS;
        if (!back) run_for(20);
    }
    CHECK(back, "not recovered 10 s after Redis came back");
    uint64_t took = xEventLoopNowMs(loop) - start;
    const char *get[] = {"GET", "xk:restart"};
    command(c, &k, 2, get, NULL);
    CHECK(k.type[0] == XREDIS_STRING && strcmp(k.str[0], "before") == 0, "GET after the restart");
    xRedisStats stats;
    xRedisClientStats(c, &stats);
    CHECK(stats.connects >= 2, "connects %llu", (unsigned long long)stats.connects);
    kept_clear(&k);
    kept_clear(&in_flight);
    xRedisClientFree(c);
    printf("ok restart on %s: %d commands failed fast while down, recovered %llu ms after the restart\n",
           xEventLoopBackend(loop), failed, (unsigned long long)took);
}

/* ---- cancel ---- */

static int cancelled_ran;

static void must_not_run(xRedisClient *c, const xRedisReply *r, void *arg) { cancelled_ran++; }

static void scenario_cancel(void) {
    xRedisClient *c = connect_client(NULL);
    wait_connected(c);
    Kept k = {0};
    /* Cancelled in the turn it was sent: its reply comes and is dropped. */
    xRedisCancel(send2(c, "PING", NULL, must_not_run, NULL));
    /* Cancelled after it left, while Redis holds it. */
    const char *blpop[] = {"BLPOP", "xk:cancel-list", "1"};
    xRedisCall *held = xRedisCommand(c, 3, blpop, NULL, 3000, must_not_run, NULL);
    run_for(50);
    xRedisCancel(held);
    /* Cancelled, then timed out: neither reaches it. */
    const char *blpop_short[] = {"BLPOP", "xk:cancel-list", "1"};
    xRedisCall *doomed = xRedisCommand(c, 3, blpop_short, NULL, 100, must_not_run, NULL);
    xRedisCancel(doomed);
    /* Everything above answered before this (about 2 s): replies come in order. */
    const char *ping[] = {"PING"};
    xRedisCommand(c, 1, ping, NULL, 5000, keep, &k);
    CHECK(run_until(&k.replies, 1, 5000), "the PING after them was answered");
    CHECK(k.type[0] == XREDIS_STATUS, "PING after the cancelled ones: %d", k.type[0]);
    run_for(200);
    CHECK(cancelled_ran == 0, "%d cancelled callbacks ran", cancelled_ran);
    /* A client freed with a cancelled command pending: still nothing. */
    xRedisCancel(xRedisCommand(c, 3, blpop, NULL, 0, must_not_run, NULL));
    kept_clear(&k);
    xRedisClientFree(c);
    run_for(20);
    CHECK(cancelled_ran == 0, "a cancelled callback ran when the client was freed");
    printf("ok cancel on %s: no cancelled callback ran\n", xEventLoopBackend(loop));
}

/* ---- freeing from within ---- */

typedef struct Freeing {
    xRedisClient *client;
    int answers;
    int closed;
} Freeing;

static void free_on_first(xRedisClient *c, const xRedisReply *r, void *arg) {
    Freeing *f = arg;
    f->answers++;
    if (r->type == XREDIS_ERROR && r->failure == XREDIS_CLOSED) f->closed++;
    if (f->client) {
        xRedisClient *client = f->client;
        f->client = NULL;
        xRedisClientFree(client);
    }
}

static void scenario_free(void) {
    /* Freed from a reply's callback with more replies behind it in the same read. */
    xRedisClient *c = connect_client(NULL);
    wait_connected(c);
    Freeing f = {.client = c};
    for (int i = 0; i < 4; i++) send2(c, "PING", NULL, free_on_first, &f);
    CHECK(run_until(&f.answers, 4, 5000), "%d of 4 answered", f.answers);
    CHECK(f.closed == 3, "after the free in the first callback, %d of 3 were told CLOSED", f.closed);
    /* Freed from a timeout's callback, a command still waiting behind it. */
    c = connect_client(NULL);
    wait_connected(c);
    Freeing t = {.client = c};
    const char *blpop[] = {"BLPOP", "xk:free-list", "2"};
    xRedisCommand(c, 3, blpop, NULL, 100, free_on_first, &t);
    send2(c, "PING", NULL, free_on_first, &t);
    CHECK(run_until(&t.answers, 2, 5000), "%d of 2 answered", t.answers);
    /* Freed from a failure told at the end of a turn, other failures queued. */
    xRedisConfig nowhere = {.port = 1, .reconnect_min_ms = 1000}; /* nothing listens on port 1 */
    c = connect_client(&nowhere);
    run_for(50); /* its first connect is refused: down */
    Freeing d = {.client = c};
    for (int i = 0; i < 3; i++) send2(c, "PING", NULL, free_on_first, &d);
    CHECK(run_until(&d.answers, 3, 1000), "%d of 3 failures told", d.answers);
    /* Freed with commands waiting: each is told, before the free returns. */
    c = connect_client(NULL);
    wait_connected(c);
    Freeing w = {0};
    for (int i = 0; i < 3; i++) xRedisCommand(c, 3, blpop, NULL, 0, free_on_first, &w);
    run_for(20);
    xRedisClientFree(c);
    CHECK(w.answers == 3 && w.closed == 3, "freed with 3 waiting: %d answered, %d CLOSED", w.answers,
          w.closed);
    run_for(20);
    printf("ok free on %s: freed from a reply, a timeout and a failure; waiting commands told CLOSED\n",
           xEventLoopBackend(loop));
}

/* ---- cache-aside ---- */

typedef struct Loader {
    int loads;
    bool fail;
    xTimer timer; /* answers a load 20 ms later, as a database would */
    xRedisCacheLoad *pending[16];
    char *keys[16];
    int pending_count;
} Loader;

static void answer_loads(xEventLoop *l, xTimer *timer, void *arg) {
    Loader *loader = arg;
    for (int i = 0; i < loader->pending_count; i++) {
        char value[128];
        int n = snprintf(value, sizeof value, "loaded:%s#%d", loader->keys[i], loader->loads);
        if (loader->fail)
            xRedisCacheLoadFailed(loader->pending[i]);
        else
            xRedisCacheLoaded(loader->pending[i], value, (size_t)n);
        free(loader->keys[i]);
    }
    loader->pending_count = 0;
}

static void load(xRedisCacheLoad *handle, const char *key, size_t key_len, void *arg) {
    Loader *loader = arg;
    loader->loads++;
    loader->keys[loader->pending_count] = copy_bytes(key, key_len);
    loader->pending[loader->pending_count++] = handle;
    xTimerStart(loop, &loader->timer, 20);
}

typedef struct Got {
    int answers;
    xRedisCacheOutcome outcome[8];
    char *value[8];
} Got;

static void got(xRedisCacheOutcome outcome, const void *value, size_t len, void *arg) {
    Got *g = arg;
    int i = g->answers++;
    if (i >= 8) return;
    g->outcome[i] = outcome;
    g->value[i] = value ? copy_bytes(value, len) : NULL;
}

static void got_clear(Got *g) {
    for (int i = 0; i < 8; i++) free(g->value[i]);
    memset(g, 0, sizeof *g);
}

static void cache_get(xRedisCache *cache, const char *key, const xRedisCacheLoader *loader, Got *g) {
    got_clear(g);
    CHECK(xRedisCacheGetValue(cache, key, strlen(key), loader, got, g), "xRedisCacheGetValue");
    CHECK(run_until(&g->answers, 1, 5000), "no answer for %s", key);
}

static void cache_not_run(xRedisCacheOutcome outcome, const void *value, size_t len, void *arg) {
    cancelled_ran++;
}

static void scenario_cache(void) {
    xRedisClient *c = connect_client(NULL);
    wait_connected(c);
    Kept k = {0};
    const char *del[] = {"DEL", "xk:item:1", "xk:item:2", "xk:item:ttl", "xk:item:3", "xk:item:4"};
    command(c, &k, 6, del, NULL);
    xRedisCache *cache = xRedisCacheCreate(c);
    Loader items = {0};
    xTimerInit(&items.timer, answer_loads, &items);
    const xRedisCacheLoader item_loader = {.load = load, .arg = &items, .ttl_ms = 60000};
    Got g = {0};

    cache_get(cache, "xk:item:1", &item_loader, &g);
    CHECK(g.outcome[0] == XREDIS_CACHE_MISS && strcmp(g.value[0], "loaded:xk:item:1#1") == 0,
          "first get: a miss");
    CHECK(items.loads == 1, "loads %d", items.loads);
    cache_get(cache, "xk:item:1", &item_loader, &g);
    CHECK(g.outcome[0] == XREDIS_CACHE_HIT && strcmp(g.value[0], "loaded:xk:item:1#1") == 0,
          "second get: a hit");
    CHECK(items.loads == 1, "a hit loaded: %d", items.loads);
    const char *pttl[] = {"PTTL", "xk:item:1"};
    command(c, &k, 2, pttl, NULL);
    CHECK(k.type[0] == XREDIS_INTEGER && k.integer[0] > 50000 && k.integer[0] <= 60000,
          "stored with its TTL: %lld", k.integer[0]);

    /* Five gets of one missing key in one turn: one load, five misses with its value. */
    got_clear(&g);
    for (int i = 0; i < 5; i++) xRedisCacheGetValue(cache, "xk:item:2", 9, &item_loader, got, &g);
    /* A sixth, cancelled: never answered. */
    xRedisCacheCancel(xRedisCacheGetValue(cache, "xk:item:2", 9, &item_loader, cache_not_run, NULL));
    CHECK(run_until(&g.answers, 5, 5000), "%d of 5 coalesced gets answered", g.answers);
    CHECK(items.loads == 2, "coalesced misses loaded %d times", items.loads - 1);
    for (int i = 0; i < 5; i++)
        CHECK(g.outcome[i] == XREDIS_CACHE_MISS && strcmp(g.value[i], "loaded:xk:item:2#2") == 0,
              "coalesced get %d", i);

    /* TTL expiry: a value kept 150 ms is loaded again after. */
    const xRedisCacheLoader short_loader = {.load = load, .arg = &items, .ttl_ms = 150};
    cache_get(cache, "xk:item:ttl", &short_loader, &g);
    CHECK(g.outcome[0] == XREDIS_CACHE_MISS, "TTL: first a miss");
    cache_get(cache, "xk:item:ttl", &short_loader, &g);
    CHECK(g.outcome[0] == XREDIS_CACHE_HIT, "TTL: then a hit");
    run_for(300);
    cache_get(cache, "xk:item:ttl", &short_loader, &g);
    CHECK(g.outcome[0] == XREDIS_CACHE_MISS && strcmp(g.value[0], "loaded:xk:item:ttl#4") == 0,
          "TTL: a miss once expired, got %d", g.outcome[0]);

    /* Invalidate: the next get loads again. */
    Kept deleted = {0};
    xRedisCacheInvalidate(cache, "xk:item:1", 9, keep, &deleted);
    CHECK(run_until(&deleted.replies, 1, 5000), "DEL answered");
    CHECK(deleted.type[0] == XREDIS_INTEGER && deleted.integer[0] == 1, "DEL removed the key");
    cache_get(cache, "xk:item:1", &item_loader, &g);
    CHECK(g.outcome[0] == XREDIS_CACHE_MISS && strcmp(g.value[0], "loaded:xk:item:1#5") == 0,
          "after invalidate: a miss");

    /* Invalidated while loading: the (maybe stale) value is given but not stored. */
    got_clear(&g);
    xRedisCacheGetValue(cache, "xk:item:3", 9, &item_loader, got, &g);
    for (int i = 0; i < 50 && items.pending_count == 0; i++) run_for(2);
    CHECK(items.pending_count == 1, "the load of xk:item:3 is under way");
    xRedisCacheInvalidate(cache, "xk:item:3", 9, NULL, NULL);
    CHECK(run_until(&g.answers, 1, 5000), "the invalidated get answered");
    CHECK(g.outcome[0] == XREDIS_CACHE_MISS, "the invalidated load's value given");
    run_for(50);
    const char *exists[] = {"EXISTS", "xk:item:3"};
    command(c, &k, 2, exists, NULL);
    CHECK(k.type[0] == XREDIS_INTEGER && k.integer[0] == 0, "a load invalidated midway was not stored");

    /* A loader that fails: an error, nothing stored. */
    items.fail = true;
    cache_get(cache, "xk:item:4", &item_loader, &g);
    CHECK(g.outcome[0] == XREDIS_CACHE_ERROR && g.value[0] == NULL, "a failed load: an error");
    items.fail = false;

    /* Keys and values of any bytes. */
    static const char inj[] = "xk:item:\r\n*1\r\n$8\r\nFLUSHALL\r\n";
    cache_get(cache, inj, &item_loader, &g);
    cache_get(cache, inj, &item_loader, &g);
    CHECK(g.outcome[0] == XREDIS_CACHE_HIT && strncmp(g.value[0], "loaded:xk:item:\r\n*1", 19) == 0,
          "an injection-shaped key cached as bytes");
    const char *dbsize_key[] = {"EXISTS", "xk:item:2"};
    command(c, &k, 2, dbsize_key, NULL);
    CHECK(k.integer[0] == 1, "nothing flushed");
    xRedisCacheInvalidate(cache, inj, sizeof inj - 1, NULL, NULL);

    run_for(50);
    CHECK(cancelled_ran == 0, "a cancelled get was answered");
    int loads = items.loads;
    got_clear(&g);
    kept_clear(&k);
    kept_clear(&deleted);
    xRedisCacheFree(cache);
    xRedisClientFree(c);
    printf("ok cache on %s: miss, hit, 5 coalesced misses in 1 load, TTL expiry, invalidate, %d loads\n",
           xEventLoopBackend(loop), loads);
}

static void scenario_cache_down(void) {
    /* Nothing listens on port: every get is answered by the loader. */
    xRedisConfig conf = {.reconnect_min_ms = 50, .reconnect_max_ms = 100};
    xRedisClient *c = connect_client(&conf);
    xRedisCache *cache = xRedisCacheCreate(c);
    Loader items = {0};
    xTimerInit(&items.timer, answer_loads, &items);
    const xRedisCacheLoader item_loader = {.load = load, .arg = &items, .ttl_ms = 1000};
    Got g = {0};
    uint64_t start = xEventLoopNowMs(loop);
    for (int i = 0; i < 10; i++) {
        cache_get(cache, "xk:item:down", &item_loader, &g);
        CHECK(g.outcome[0] == XREDIS_CACHE_MISS && g.value[0] &&
                  strncmp(g.value[0], "loaded:xk:item:down#", 20) == 0,
              "get %d with Redis down: the loader's value, got %d", i, g.outcome[0]);
        run_for(30);
    }
    uint64_t took = xEventLoopNowMs(loop) - start;
    CHECK(items.loads == 10, "loads %d", items.loads);
    CHECK(!xRedisClientConnected(c), "connected with nothing listening");
    Kept deleted = {0};
    xRedisCacheInvalidate(cache, "xk:item:down", 12, keep, &deleted);
    CHECK(run_until(&deleted.replies, 1, 1000), "invalidate answered with Redis down");
    CHECK(deleted.type[0] == XREDIS_ERROR && deleted.failure[0] == XREDIS_DOWN, "invalidate: DOWN");
    got_clear(&g);
    kept_clear(&deleted);
    xRedisCacheFree(cache);
    xRedisClientFree(c);
    printf("ok cache-down on %s: 10 gets answered by the loader in %llu ms, invalidate failed as DOWN\n",
           xEventLoopBackend(loop), (unsigned long long)took);
}

/* ---- a Unix socket ---- */

static void scenario_unix(const char *path) {
    xRedisConfig conf = {.host = path};
    xRedisClient *c = xRedisClientCreate(loop, &conf);
    CHECK(c, "xRedisClientCreate");
    Kept k = {0};
    const char *set[] = {"SET", "xk:unix", "over a unix socket"};
    command(c, &k, 3, set, NULL);
    CHECK(k.type[0] == XREDIS_STATUS, "SET over %s: %d/%d %s", path, k.type[0], k.failure[0],
          k.str[0] ? k.str[0] : "");
    const char *get[] = {"GET", "xk:unix"};
    command(c, &k, 2, get, NULL);
    CHECK(k.type[0] == XREDIS_STRING && strcmp(k.str[0], "over a unix socket") == 0,
          "GET over the Unix socket");
    CHECK(xRedisClientConnected(c), "connected");
    kept_clear(&k);
    xRedisClientFree(c);
    printf("ok unix on %s: SET and GET over %s\n", xEventLoopBackend(loop), path);
}

/* ---- chaos ---- */

enum { CHAOS_MAX = 40000, CHAOS_PER_TICK = 20 };

typedef struct Tracked {
    xRedisCall *call;
    int calls;
    bool cancelled;
} Tracked;

static Tracked tracked[CHAOS_MAX];
static int issued, chaos_answers, chaos_ok, chaos_failed[XREDIS_CLOSED + 1];
static xRedisClient *chaos_client;
static bool chaos_issuing = true;
static xTimer chaos_tick;

static void on_chaos_reply(xRedisClient *c, const xRedisReply *r, void *arg) {
    Tracked *t = arg;
    CHECK(!t->cancelled, "a cancelled command's callback ran (#%d)", (int)(t - tracked));
    CHECK(++t->calls == 1, "a callback ran twice (#%d)", (int)(t - tracked));
    t->call = NULL;
    chaos_answers++;
    if (r->failure == XREDIS_ANSWERED)
        chaos_ok++;
    else
        chaos_failed[r->failure]++;
}

/* Cache gets beside the commands: each answered once, always with a value. */
enum { CHAOS_GETS_MAX = 4000 };

typedef struct TrackedGet {
    xRedisCacheGet *get;
    int calls;
    bool cancelled;
} TrackedGet;

static TrackedGet tracked_gets[CHAOS_GETS_MAX];
static int gets_issued, get_answers, get_hits, get_misses, loads_out;
static xRedisCache *chaos_cache;

typedef struct ChaosLoad {
    xTimer timer;
    xRedisCacheLoad *load;
} ChaosLoad;

static void chaos_load_answer(xEventLoop *l, xTimer *timer, void *arg) {
    ChaosLoad *load = arg;
    loads_out--;
    xRedisCacheLoaded(load->load, "loaded", 6);
    free(load);
}

/* The origin: answers 3 ms later, always. */
static void chaos_load(xRedisCacheLoad *handle, const char *key, size_t key_len, void *arg) {
    ChaosLoad *load = calloc(1, sizeof *load);
    CHECK(load, "calloc");
    load->load = handle;
    loads_out++;
    xTimerInit(&load->timer, chaos_load_answer, load);
    xTimerStart(loop, &load->timer, 3);
}

static const xRedisCacheLoader chaos_loader = {.load = chaos_load, .ttl_ms = 200};

static void on_chaos_get(xRedisCacheOutcome outcome, const void *value, size_t len, void *arg) {
    TrackedGet *t = arg;
    CHECK(!t->cancelled, "a cancelled get was answered (#%d)", (int)(t - tracked_gets));
    CHECK(++t->calls == 1, "a get was answered twice (#%d)", (int)(t - tracked_gets));
    CHECK(outcome != XREDIS_CACHE_ERROR && len == 6 && memcmp(value, "loaded", 6) == 0,
          "a get failed for the cache's sake: outcome %d", outcome);
    t->get = NULL;
    get_answers++;
    if (outcome == XREDIS_CACHE_HIT)
        get_hits++;
    else
        get_misses++;
}

static void chaos_get(void) {
    if (gets_issued >= CHAOS_GETS_MAX) return;
    int i = gets_issued++;
    TrackedGet *t = &tracked_gets[i];
    char key[32];
    int len = snprintf(key, sizeof key, "xk:chaos:item:%d", i % 20);
    t->get = xRedisCacheGetValue(chaos_cache, key, (size_t)len, &chaos_loader, on_chaos_get, t);
    CHECK(t->get, "xRedisCacheGetValue");
    if (i % 5 == 0) {
        t->cancelled = true;
        xRedisCacheCancel(t->get);
    }
}

static void chaos_cancel(Tracked *t) {
    if (t->calls || t->cancelled || !t->call) return;
    t->cancelled = true;
    xRedisCancel(t->call);
    t->call = NULL;
}

/* Every 5 ms: a batch of SETs, GETs and INCRs; a tenth cancelled at once, a
 * tenth on the next tick if still waiting; one in 250 a BLPOP Redis holds for
 * 1 s, which times out after 30 ms and costs the connection. */
static void on_chaos_tick(xEventLoop *l, xTimer *timer, void *arg) {
    for (int i = issued - CHAOS_PER_TICK; i >= 0 && i < issued; i++)
        if (i % 10 == 1) chaos_cancel(&tracked[i]);
    for (int n = 0; n < CHAOS_PER_TICK && chaos_issuing && issued < CHAOS_MAX; n++) {
        int i = issued++;
        Tracked *t = &tracked[i];
        char key[32];
        snprintf(key, sizeof key, "xk:chaos:%d", i % 100);
        const char *set[] = {"SET", key, "value"}, *get[] = {"GET", key}, *incr[] = {"INCR", "xk:chaos:n"};
        const char *blpop[] = {"BLPOP", "xk:chaos:list", "1"};
        bool held = i % 250 == 7;
        const char *const *argv = held ? blpop : i % 3 == 0 ? set : i % 3 == 1 ? get : incr;
        int argc = held || i % 3 == 0 ? 3 : 2;
        t->call = xRedisCommand(chaos_client, argc, argv, NULL, held ? 30 : 1000, on_chaos_reply, t);
        CHECK(t->call, "xRedisCommand");
        if (i % 10 == 0) chaos_cancel(t);
    }
    if (chaos_issuing) {
        chaos_get();
        chaos_get();
        xTimerStart(l, timer, 5);
    }
}

static int chaos_expected(void) {
    int n = 0;
    for (int i = 0; i < issued; i++) n += !tracked[i].cancelled;
    return n;
}

static void scenario_chaos(void) {
    xRedisConfig conf = {.reconnect_min_ms = 20, .reconnect_max_ms = 200};
    chaos_client = connect_client(&conf);
    chaos_cache = xRedisCacheCreate(chaos_client);
    wait_connected(chaos_client);
    xTimerInit(&chaos_tick, on_chaos_tick, NULL);
    xTimerStart(loop, &chaos_tick, 5);
    run_for(4000);
    chaos_issuing = false;
    xTimerStop(loop, &chaos_tick);
    int expected = chaos_expected();
    CHECK(run_until(&chaos_answers, expected, 5000), "%d of %d commands answered", chaos_answers, expected);
    run_for(50);
    CHECK(chaos_answers == chaos_expected(), "%d answers for %d commands", chaos_answers, chaos_expected());
    int gets_expected = 0;
    for (int i = 0; i < gets_issued; i++) gets_expected += !tracked_gets[i].cancelled;
    CHECK(run_until(&get_answers, gets_expected, 5000), "%d of %d cache gets answered", get_answers,
          gets_expected);
    for (int i = 0; i < 100 && loads_out; i++) run_for(10);
    CHECK(loads_out == 0 && get_hits > 0 && get_misses > 0, "loads out %d, hits %d, misses %d", loads_out,
          get_hits, get_misses);
    /* Redis is back by now: the client is too, by itself. */
    Kept k = {0};
    bool back = false;
    for (int i = 0; i < 100 && !back; i++) {
        command(chaos_client, &k, 1, (const char *const[]){"PING"}, NULL);
        back = k.type[0] == XREDIS_STATUS;
        if (!back) run_for(50);
    }
    CHECK(back, "not recovered after the chaos");
    xRedisStats stats;
    xRedisClientStats(chaos_client, &stats);
    kept_clear(&k);
    xRedisCacheFree(chaos_cache);
    xRedisClientFree(chaos_client);
    printf("ok chaos on %s: %d commands, %d cancelled, %d answered (%d by Redis, %d timed out, %d lost, %d "
           "down), "
           "%llu connects; %d cache gets, %d hits, %d misses\n",
           xEventLoopBackend(loop), issued, issued - expected, chaos_answers, chaos_ok,
           chaos_failed[XREDIS_TIMEOUT], chaos_failed[XREDIS_LOST], chaos_failed[XREDIS_DOWN],
           (unsigned long long)stats.connects, gets_issued, get_hits, get_misses);
}

/* ---- a connect that hangs ---- */

static void scenario_connect_timeout(void) {
    /* A listener with a backlog of 0 that never accepts, its one place taken:
     * the kernel drops further SYNs, and a connect waits for nothing. */
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t addr_len = sizeof addr;
    CHECK(listener >= 0 && bind(listener, (struct sockaddr *)&addr, sizeof addr) == 0 &&
              listen(listener, 0) == 0 && getsockname(listener, (struct sockaddr *)&addr, &addr_len) == 0,
          "a listener");
    int filler = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(connect(filler, (struct sockaddr *)&addr, sizeof addr) == 0, "the backlog's one place");
    xRedisConfig conf = {.port = ntohs(addr.sin_port), .connect_timeout_ms = 200, .command_timeout_ms = 5000};
    xRedisClient *c = connect_client(&conf);
    Kept k = {0};
    uint64_t start = xEventLoopNowMs(loop);
    send2(c, "PING", NULL, keep, &k);
    CHECK(run_until(&k.replies, 1, 3000), "a command waiting for a connect that hangs was never answered");
    uint64_t took = xEventLoopNowMs(loop) - start;
    CHECK(k.type[0] == XREDIS_ERROR && k.failure[0] == XREDIS_DOWN, "DOWN, got %d/%d", k.type[0],
          k.failure[0]);
    CHECK(took >= 190 && took < 3000,
          "answered after %llu ms: the connect timeout is 200 ms, the command's 5 s",
          (unsigned long long)took);
    CHECK(!xRedisClientConnected(c), "connected to a listener that never accepts");
    /* While it retries, commands fail at once. */
    start = xEventLoopNowMs(loop);
    command(c, &k, 1, (const char *const[]){"PING"}, NULL);
    CHECK(k.failure[0] == XREDIS_DOWN && xEventLoopNowMs(loop) - start < 2000,
          "fail-fast after a failed connect");
    kept_clear(&k);
    xRedisClientFree(c);
    close(filler);
    close(listener);
    printf("ok connect-timeout on %s: the command waiting for the connect failed after %llu ms\n",
           xEventLoopBackend(loop), (unsigned long long)took);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr,
                "usage: %s types|pipeline|timeout|restart|cancel|free|cache|cache-down|connect-timeout|chaos "
                "PORT, "
                "or unix PATH\n",
                argv[0]);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    port = (uint16_t)atoi(argv[2]); /* "unix" takes a path there */
    loop = xEventLoopCreate();
    CHECK(loop, "xEventLoopCreate");
    xTimerInit(&tick, on_tick, NULL);
    const char *scenario = argv[1];
    if (strcmp(scenario, "types") == 0)
        scenario_types();
    else if (strcmp(scenario, "pipeline") == 0)
        scenario_pipeline(argc > 3 ? atoi(argv[3]) : 2000);
    else if (strcmp(scenario, "timeout") == 0)
        scenario_timeout();
    else if (strcmp(scenario, "restart") == 0)
        scenario_restart();
    else if (strcmp(scenario, "cancel") == 0)
        scenario_cancel();
    else if (strcmp(scenario, "free") == 0)
        scenario_free();
    else if (strcmp(scenario, "cache") == 0)
        scenario_cache();
    else if (strcmp(scenario, "cache-down") == 0)
        scenario_cache_down();
    else if (strcmp(scenario, "connect-timeout") == 0)
        scenario_connect_timeout();
    else if (strcmp(scenario, "chaos") == 0)
        scenario_chaos();
    else if (strcmp(scenario, "unix") == 0)
        scenario_unix(argv[2]);
    else
        CHECK(false, "no scenario %s", scenario);
    xEventLoopDestroy(loop);
    return 0;
}
