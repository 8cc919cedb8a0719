/* pg_pool.c — <xdb/pg.h>'s pool against a real PostgreSQL loaded with the
 * arena's seed, one scenario per run (tests/integration/test_xdb_pg.py starts
 * the server, picks the scenario and checks what this prints):
 *
 *   typed ID...   prints each item's row read through the typed getters, then
 *                 the getters on edge values (int8 limits, NaN, NULL, bool)
 *   pipeline N    N queries sent in one turn on one connection: each result to
 *                 its own callback, in order; prints the peak in flight
 *   restart       queries every few ms while the test stops and starts the
 *                 server: prints "down" once queries fail, "recovered" once
 *                 they succeed again; every query gets exactly one outcome
 *   timeout       a pg_sleep past its timeout while quick queries go on
 *   queue         one connection, depth 2, queue 3: the rest get XPG_EBUSY
 *   cancel        cancelled queries (queued, in flight, from another's
 *                 callback) whose callbacks never run
 *   inject        hostile text through parameters comes back byte for byte
 *                 and does nothing else; a NUL byte is refused
 *   batch         one turn's batch with a failing query in the middle: the
 *                 others commit exactly once, the failure carries SQLSTATE
 *   fill          XPG_DISPATCH_FILL, one batch ahead: a turn's queries fill
 *                 one connection up to its depth before the next takes any,
 *                 later turns' queries wait in one held batch, and a failing
 *                 query in a full connection's batch fails alone
 *   tx            transactions: rollback hides, commit shows (also when
 *                 used and committed from BEGIN's callback), the pinned
 *                 connection serves nobody else meanwhile
 *   unreachable   (CONNINFO names a port nothing listens on) queries sent
 *                 while connecting fail with XPG_EDOWN once the attempt
 *                 fails; later ones are refused at once
 *   hostile       (CONNINFO names a fake server that answers queries with a
 *                 broken stream) each query fails once with XPG_EDOWN;
 *                 prints why
 *
 * Prints "ok: SCENARIO on BACKEND" and exits 0, or says what went wrong and
 * exits 1. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xdb/pg.h>

static xEventLoop *loop;
static const char *conninfo_scenario = "";
static xPgPool *pool;
static int failures;
static int item_stmt, echo_stmt, sleep_stmt, double_stmt, edge_stmt, insert_stmt, count_stmt, divide_stmt,
    create_stmt, clear_stmt;

#define CHECK(cond, ...)                                                                                     \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            printf("line %d: ", __LINE__);                                                                   \
            printf(__VA_ARGS__);                                                                             \
            printf("\n");                                                                                    \
            failures++;                                                                                      \
        }                                                                                                    \
    } while (0)

/* ---- Running the loop until something holds ---- */

static bool (*until_fn)(void);
static xTimer until_timer;

static void check_until(xEventLoop *l, xTimer *t, void *arg) {
    if (until_fn()) {
        xEventLoopStop(l);
        return;
    }
    xTimerStart(l, t, 2);
}

static void give_up(xEventLoop *l, xTimer *t, void *arg) { xEventLoopStop(l); }

/* Runs the loop until done() or ms pass; returns done(). */
static bool run_until(bool (*done)(void), uint64_t ms) {
    xTimer deadline;
    xTimerInit(&deadline, give_up, NULL);
    xTimerStart(loop, &deadline, ms);
    until_fn = done;
    xTimerInit(&until_timer, check_until, NULL);
    xTimerStart(loop, &until_timer, 1);
    xEventLoopRun(loop);
    xTimerStop(loop, &deadline);
    xTimerStop(loop, &until_timer);
    return done();
}

static bool pool_ready(void) {
    xPgStats s;
    xPgPoolStats(pool, &s);
    return s.connections_ready > 0;
}

static void make_pool(const char *conninfo, xPgConf conf) {
    conf.conninfo = conninfo;
    pool = xPgPoolCreate(loop, &conf);
    if (!pool) {
        printf("xPgPoolCreate failed\n");
        exit(1);
    }
    item_stmt = xPgPoolPrepare(pool, "item",
                               "SELECT id, name, category, price, quantity, active, tags, rating_score, "
                               "rating_count FROM items WHERE id = $1",
                               1, (const uint32_t[]){23});
    echo_stmt = xPgPoolPrepare(pool, "echo",
                               "SELECT $1::text, length($1::text), $2::int8 * 2, pg_backend_pid()", 2, NULL);
    sleep_stmt = xPgPoolPrepare(pool, "sleep", "SELECT pg_sleep($1::float8), $2::int", 2, NULL);
    double_stmt = xPgPoolPrepare(pool, "double", "SELECT $1::float8, $2::bool, $3::int8, $4::text", 4, NULL);
    edge_stmt =
        xPgPoolPrepare(pool, "edge",
                       "SELECT 9223372036854775807::int8, (-9223372036854775807 - 1)::int8, "
                       "'NaN'::float8, '-Infinity'::float8, 1.5e-300::float8, NULL::int, true, false, "
                       "12.50::numeric, 'x'::text",
                       0, NULL);
    create_stmt = xPgPoolPrepare(pool, "create", "CREATE TABLE IF NOT EXISTS scratch (n int)", 0, NULL);
    clear_stmt = xPgPoolPrepare(pool, "clear", "DELETE FROM scratch", 0, NULL);
    insert_stmt = xPgPoolPrepare(pool, "insert", "INSERT INTO scratch VALUES ($1)", 1, NULL);
    count_stmt = xPgPoolPrepare(pool, "count", "SELECT count(*), coalesce(sum(n), 0) FROM scratch", 0, NULL);
    divide_stmt = xPgPoolPrepare(pool, "divide", "SELECT 1 / $1::int", 1, NULL);
    if (divide_stmt < 0 || xPgPoolPrepare(pool, "item", "SELECT 1", 0, NULL) != -1) {
        printf("xPgPoolPrepare refused a statement, or took a name twice\n");
        exit(1);
    }
    if (strcmp(conninfo_scenario, "unreachable") != 0 && !run_until(pool_ready, 10000)) {
        printf("no connection within 10 s\n");
        exit(1);
    }
}

/* A callback's record of one outcome, for checks after the loop ran. */
typedef struct Outcome {
    int calls;
    xPgStatus status;
    char sqlstate[6];
    char text[256];
    int64_t number;
    int order; /* when it was called, counting from 1 */
} Outcome;

static int outcomes_seen, outcomes_wanted;

static bool all_seen(void) { return outcomes_seen >= outcomes_wanted; }

static void record(const xPgResult *r, void *arg) {
    Outcome *o = arg;
    o->calls++;
    o->order = ++outcomes_seen;
    o->status = xPgResultStatus(r);
    snprintf(o->sqlstate, sizeof o->sqlstate, "%s", xPgResultSqlState(r));
    if (o->status == XPG_OK) {
        size_t n;
        const char *t = xPgGetText(r, 0, 0, &n);
        snprintf(o->text, sizeof o->text, "%.*s", (int)n, t);
        if (xPgColumns(r) > 2) xPgGetInt64(r, 0, 2, &o->number);
    } else {
        snprintf(o->text, sizeof o->text, "%s", xPgResultMessage(r));
    }
}

static void send_or_fail(int stmt, const xPgParam *params, int n, uint32_t timeout, Outcome *o,
                         xPgQuery **h) {
    xPgStatus s = xPgQuerySend(pool, stmt, params, n, timeout, record, o, h);
    CHECK(s == XPG_OK, "xPgQuerySend: %s", xPgStatusName(s));
    if (s == XPG_OK) outcomes_wanted++;
}

/* ---- typed ---- */

static void print_item(const xPgResult *r, void *arg) {
    outcomes_seen++;
    if (xPgResultStatus(r) != XPG_OK || xPgRows(r) != 1 || xPgColumns(r) != 9) {
        CHECK(0, "item %s: %s %s, %d rows", (char *)arg, xPgStatusName(xPgResultStatus(r)),
              xPgResultMessage(r), xPgRows(r));
        return;
    }
    int64_t id, price, quantity, score, count;
    bool active;
    size_t name_len, category_len, tags_len;
    const char *name = xPgGetText(r, 0, 1, &name_len), *category = xPgGetText(r, 0, 2, &category_len);
    const char *tags = xPgGetText(r, 0, 6, &tags_len);
    bool ok = xPgGetInt64(r, 0, 0, &id) && xPgGetInt64(r, 0, 3, &price) && xPgGetInt64(r, 0, 4, &quantity) &&
              xPgGetBool(r, 0, 5, &active) && xPgGetInt64(r, 0, 7, &score) && xPgGetInt64(r, 0, 8, &count);
    CHECK(ok, "item %s: a getter refused its column", (char *)arg);
    CHECK(!xPgGetInt64(r, 0, 1, &id) && id == 0, "xPgGetInt64 read a name as a number");
    xPgGetInt64(r, 0, 0, &id);
    printf("item\t%" PRId64 "\t%.*s\t%.*s\t%" PRId64 "\t%" PRId64 "\t%s\t%.*s\t%" PRId64 "\t%" PRId64 "\n",
           id, (int)name_len, name, (int)category_len, category, price, quantity, active ? "true" : "false",
           (int)tags_len, tags, score, count);
}

static void check_edges(const xPgResult *r, void *arg) {
    outcomes_seen++;
    int64_t i;
    double d;
    bool b;
    CHECK(xPgResultStatus(r) == XPG_OK && xPgColumns(r) == 10, "edge query: %s", xPgResultMessage(r));
    CHECK(xPgGetInt64(r, 0, 0, &i) && i == INT64_MAX, "int8 max");
    CHECK(xPgGetInt64(r, 0, 1, &i) && i == INT64_MIN, "int8 min");
    CHECK(xPgGetDouble(r, 0, 2, &d) && d != d, "NaN");
    CHECK(xPgGetDouble(r, 0, 3, &d) && isinf(d) && d < 0, "-Infinity");
    CHECK(xPgGetDouble(r, 0, 4, &d) && d == 1.5e-300, "1.5e-300");
    CHECK(xPgIsNull(r, 0, 5) && !xPgGetInt64(r, 0, 5, &i) && i == 0, "NULL");
    CHECK(xPgGetBool(r, 0, 6, &b) && b && xPgGetBool(r, 0, 7, &b) && !b, "bools");
    CHECK(xPgGetDouble(r, 0, 8, &d) && d == 12.5 && !xPgGetInt64(r, 0, 8, &i), "numeric 12.50");
    CHECK(!xPgGetBool(r, 0, 9, &b) && !xPgGetDouble(r, 0, 9, &d), "text read as a bool or double");
    CHECK(xPgIsNull(r, 1, 0) && xPgIsNull(r, 0, 10) && *xPgGetText(r, 5, 5, NULL) == 0, "out of range");
}

static void check_params(const xPgResult *r, void *arg) {
    outcomes_seen++;
    double d;
    bool b;
    int64_t i;
    size_t n;
    CHECK(xPgResultStatus(r) == XPG_OK, "typed parameters: %s", xPgResultMessage(r));
    CHECK(xPgGetDouble(r, 0, 0, &d) && d == 0.1, "a double parameter came back as %s",
          xPgGetText(r, 0, 0, NULL));
    CHECK(xPgGetBool(r, 0, 1, &b) && b, "a bool parameter");
    CHECK(xPgGetInt64(r, 0, 2, &i) && i == INT64_MIN, "an int parameter");
    CHECK(xPgIsNull(r, 0, 3) && *xPgGetText(r, 0, 3, &n) == 0 && n == 0, "a NULL parameter");
}

static int scenario_typed(int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        xPgParam id = xPgText(argv[i], strlen(argv[i]));
        CHECK(xPgQuerySend(pool, item_stmt, &id, 1, 0, print_item, argv[i], NULL) == XPG_OK, "send");
        outcomes_wanted++;
    }
    CHECK(xPgQuerySend(pool, edge_stmt, NULL, 0, 0, check_edges, NULL, NULL) == XPG_OK, "send");
    xPgParam typed[] = {xPgFloat(0.1), xPgBool(true), xPgInt(INT64_MIN), xPgNull()};
    CHECK(xPgQuerySend(pool, double_stmt, typed, 4, 0, check_params, NULL, NULL) == XPG_OK, "send");
    outcomes_wanted += 2;
    CHECK(xPgQuerySend(pool, item_stmt, typed, 2, 0, print_item, NULL, NULL) == XPG_EPARAM,
          "wrong count taken");
    CHECK(xPgQuerySend(pool, 99, NULL, 0, 0, print_item, NULL, NULL) == XPG_EPARAM,
          "no such statement taken");
    CHECK(run_until(all_seen, 10000), "%d of %d answers", outcomes_seen, outcomes_wanted);
    return 0;
}

/* ---- pipeline ---- */

static int scenario_pipeline(int n) {
    Outcome *o = calloc((size_t)n, sizeof *o);
    char(*text)[32] = calloc((size_t)n, sizeof *text);
    for (int i = 0; i < n; i++) {
        snprintf(text[i], sizeof text[i], "query %d", i);
        xPgParam p[] = {xPgText(text[i], strlen(text[i])), xPgInt(i)};
        send_or_fail(echo_stmt, p, 2, 0, &o[i], NULL);
    }
    xPgStats s;
    xPgPoolStats(pool, &s);
    CHECK(s.in_flight + s.queued == n, "%d in flight and %d queued after sending %d", s.in_flight, s.queued,
          n);
    CHECK(run_until(all_seen, 20000), "%d of %d answers", outcomes_seen, outcomes_wanted);
    for (int i = 0; i < n; i++) {
        CHECK(o[i].calls == 1 && o[i].status == XPG_OK, "query %d: %d calls, %s %s", i, o[i].calls,
              xPgStatusName(o[i].status), o[i].text);
        CHECK(strcmp(o[i].text, text[i]) == 0 && o[i].number == 2 * i, "query %d got %s, %" PRId64, i,
              o[i].text, o[i].number);
        CHECK(o[i].order == i + 1, "query %d answered %d-th", i, o[i].order);
    }
    xPgPoolStats(pool, &s);
    printf("peak in flight on one connection: %d, batches: %" PRIu64 ", queries: %" PRIu64 "\n",
           s.peak_in_flight, s.batches, s.queries);
    free(o);
    free(text);
    return 0;
}

/* ---- restart ---- */

typedef enum Phase { PHASE_UP, PHASE_DOWN, PHASE_RECOVERED } Phase;

static struct {
    Phase phase;
    int sent, answered, ok, down_fast, failed_in_flight, ok_after;
    xTimer tick;
} restart;

static void restart_answer(const xPgResult *r, void *arg) {
    restart.answered++;
    xPgStatus s = xPgResultStatus(r);
    if (s == XPG_OK) {
        restart.ok++;
        if (restart.phase == PHASE_DOWN) {
            restart.phase = PHASE_RECOVERED;
            printf("recovered\n");
            fflush(stdout);
        }
        if (restart.phase == PHASE_RECOVERED) restart.ok_after++;
    } else {
        restart.failed_in_flight++;
        CHECK(s == XPG_EDOWN || s == XPG_ESERVER || s == XPG_ETIMEOUT, "a query failed with %s: %s",
              xPgStatusName(s), xPgResultMessage(r));
    }
}

static void restart_tick(xEventLoop *l, xTimer *t, void *arg) {
    for (int i = 0; i < 4; i++) {
        xPgParam p[] = {xPgText("x", 1), xPgInt(i)};
        xPgStatus s = xPgQuerySend(pool, echo_stmt, p, 2, 2000, restart_answer, NULL, NULL);
        if (s == XPG_OK) {
            restart.sent++;
        } else {
            CHECK(s == XPG_EDOWN, "refused with %s", xPgStatusName(s));
            restart.down_fast++;
            if (restart.phase == PHASE_UP && restart.ok > 0) {
                restart.phase = PHASE_DOWN;
                printf("down\n");
                fflush(stdout);
            }
        }
    }
    xTimerStart(l, t, 5);
}

/* Answered in full is checked once the ticks stop (restart_drained): while
 * they go on, a loaded machine may never catch the moment nothing is in flight. */
static bool restart_done(void) { return restart.ok_after >= 200; }

static bool restart_drained(void) { return restart.answered == restart.sent; }

static int scenario_restart(void) {
    printf("ready\n");
    fflush(stdout);
    xTimerInit(&restart.tick, restart_tick, NULL);
    xTimerStart(loop, &restart.tick, 1);
    bool done = run_until(restart_done, 60000);
    xTimerStop(loop, &restart.tick);
    CHECK(done, "phase %d: %d sent, %d answered, %d after recovery", restart.phase, restart.sent,
          restart.answered, restart.ok_after);
    CHECK(run_until(restart_drained, 5000), "%d queries never answered", restart.sent - restart.answered);
    xPgStats s;
    xPgPoolStats(pool, &s);
    printf("sent %d, ok %d, refused while down %d, failed %d, reconnects %" PRIu64 "\n", restart.sent,
           restart.ok, restart.down_fast, restart.failed_in_flight, s.reconnects);
    CHECK(restart.down_fast > 0, "no query was refused while the server was down");
    CHECK(s.reconnects > 0, "no reconnection counted");
    return 0;
}

/* ---- timeout ---- */

static bool slow_answered(void) { return outcomes_seen >= 1; }

static bool drained(void) {
    xPgStats s;
    xPgPoolStats(pool, &s);
    return s.in_flight == 0;
}

static int scenario_timeout(void) {
    Outcome slow = {0}, quick[20] = {0};
    uint64_t start = xEventLoopNowMs(loop);
    xPgParam p[] = {xPgText("3", 1), xPgInt(1)};
    send_or_fail(sleep_stmt, p, 2, 300, &slow, NULL);
    CHECK(run_until(slow_answered, 5000), "the slow query never timed out");
    uint64_t waited = xEventLoopNowMs(loop) - start;
    CHECK(slow.calls == 1 && slow.status == XPG_ETIMEOUT, "the slow query: %d calls, %s", slow.calls,
          xPgStatusName(slow.status));
    CHECK(waited >= 290 && waited < 1200, "timed out after %" PRIu64 " ms, not about 300", waited);
    /* Its connection still runs pg_sleep; the other takes these meanwhile. */
    start = xEventLoopNowMs(loop);
    for (int i = 0; i < 20; i++) {
        xPgParam q[] = {xPgText("0", 1), xPgInt(i)};
        send_or_fail(sleep_stmt, q, 2, 5000, &quick[i], NULL);
    }
    CHECK(run_until(all_seen, 10000), "%d of %d answers", outcomes_seen, outcomes_wanted);
    uint64_t took = xEventLoopNowMs(loop) - start;
    for (int i = 0; i < 20; i++)
        CHECK(quick[i].calls == 1 && quick[i].status == XPG_OK, "quick query %d: %s %s", i,
              xPgStatusName(quick[i].status), quick[i].text);
    CHECK(took < 900, "the quick queries took %" PRIu64 " ms: they waited for the slow one", took);
    CHECK(slow.calls == 1, "the slow query's callback ran again");
    /* The server ends the slow one (statement_timeout); then every connection works. */
    CHECK(run_until(drained, 10000), "the slow query's connection never drained");
    Outcome after[8] = {0};
    for (int i = 0; i < 8; i++) {
        xPgParam q[] = {xPgText("a", 1), xPgInt(i)};
        send_or_fail(echo_stmt, q, 2, 5000, &after[i], NULL);
    }
    CHECK(run_until(all_seen, 10000), "%d of %d answers after the timeout", outcomes_seen, outcomes_wanted);
    for (int i = 0; i < 8; i++)
        CHECK(after[i].status == XPG_OK, "query %d after the timeout: %s", i, after[i].text);
    xPgStats s;
    xPgPoolStats(pool, &s);
    CHECK(s.connections_ready == 2, "%d connections ready", s.connections_ready);
    printf("slow query timed out after %" PRIu64 " ms; 20 quick queries answered in %" PRIu64 " ms\n", waited,
           took);
    return 0;
}

/* ---- queue ---- */

static int scenario_queue(void) {
    Outcome o[10] = {0};
    int accepted = 0, busy = 0;
    for (int i = 0; i < 10; i++) {
        xPgParam p[] = {xPgText("q", 1), xPgInt(i)};
        xPgStatus s = xPgQuerySend(pool, echo_stmt, p, 2, 0, record, &o[i], NULL);
        if (s == XPG_OK) {
            CHECK(busy == 0, "query %d taken after one was refused", i);
            accepted++;
            outcomes_wanted++;
        } else {
            CHECK(s == XPG_EBUSY, "query %d: %s", i, xPgStatusName(s));
            busy++;
        }
    }
    CHECK(accepted == 5 && busy == 5, "%d taken, %d refused; want 5 and 5 (depth 2, queue 3)", accepted,
          busy);
    CHECK(run_until(all_seen, 10000), "%d of %d answers", outcomes_seen, outcomes_wanted);
    for (int i = 0; i < accepted; i++) CHECK(o[i].status == XPG_OK && o[i].number == 2 * i, "query %d", i);
    Outcome later = {0};
    xPgParam p[] = {xPgText("q", 1), xPgInt(7)};
    send_or_fail(echo_stmt, p, 2, 0, &later, NULL);
    CHECK(run_until(all_seen, 10000) && later.status == XPG_OK, "a query after the queue drained");
    printf("taken %d, refused %d\n", accepted, busy);
    return 0;
}

/* ---- cancel ---- */

static xPgQuery *victim;
static Outcome cancel_outcomes[6];

static void cancel_victim(const xPgResult *r, void *arg) {
    record(r, arg);
    xPgQueryCancel(victim); /* answered in the same batch, right after this one */
}

static int scenario_cancel(void) {
    /* One connection, depth 2: queries 0 and 1 in flight, 2-5 queued. */
    xPgQuery *h[6];
    for (int i = 0; i < 6; i++) {
        xPgParam p[] = {xPgText(i < 2 ? "0.2" : "0", i < 2 ? 3 : 1), xPgInt(i)};
        xPgStatus s = xPgQuerySend(pool, sleep_stmt, p, 2, 0, i == 4 ? cancel_victim : record,
                                   &cancel_outcomes[i], &h[i]);
        CHECK(s == XPG_OK, "send %d: %s", i, xPgStatusName(s));
    }
    victim = h[5];
    xPgQueryCancel(h[1]); /* in flight */
    xPgQueryCancel(h[3]); /* queued */
    outcomes_wanted = 3;  /* 0, 2, 4 */
    CHECK(run_until(all_seen, 10000), "%d of %d answers", outcomes_seen, outcomes_wanted);
    run_until(all_seen, 800); /* time for a wrong callback to come */
    xPgStats s;
    xPgPoolStats(pool, &s);
    for (int i = 0; i < 6; i++) {
        bool cancelled = i == 1 || i == 3 || i == 5;
        CHECK(cancel_outcomes[i].calls == (cancelled ? 0 : 1), "query %d: %d calls", i,
              cancel_outcomes[i].calls);
    }
    CHECK(s.in_flight == 0 && s.queued == 0, "%d in flight, %d queued at the end", s.in_flight, s.queued);
    printf("cancelled callbacks never ran\n");
    return 0;
}

/* ---- inject ---- */

static const char *const hostile[] = {
    "'; DROP TABLE items; --",
    "1; DELETE FROM users",
    "Robert'); DROP TABLE fortune;--",
    "\" OR \"1\"=\"1",
    "' OR '1'='1",
    "\\'; SELECT pg_sleep(10); --",
    "$1 $2 $$ $$",
    "E'\\x00'",
    "multi\nline\r\nand\ttab",
    "\xe2\x80\x99 unicode quote \xf0\x9f\x98\x80",
};

static int scenario_inject(void) {
    enum { N = sizeof hostile / sizeof *hostile };
    Outcome o[N] = {0}, ids[N] = {0};
    for (int i = 0; i < N; i++) {
        xPgParam p[] = {xPgText(hostile[i], strlen(hostile[i])), xPgInt(i)};
        send_or_fail(echo_stmt, p, 2, 0, &o[i], NULL);
        /* The same text where a number is expected: refused by the server, nothing run. */
        xPgParam id = xPgText(hostile[i], strlen(hostile[i]));
        send_or_fail(item_stmt, &id, 1, 0, &ids[i], NULL);
    }
    xPgParam nul[] = {xPgText("a\0b", 3), xPgInt(0)};
    CHECK(xPgQuerySend(pool, echo_stmt, nul, 2, 0, record, NULL, NULL) == XPG_EPARAM, "a NUL byte taken");
    CHECK(run_until(all_seen, 10000), "%d of %d answers", outcomes_seen, outcomes_wanted);
    for (int i = 0; i < N; i++) {
        CHECK(o[i].status == XPG_OK && strcmp(o[i].text, hostile[i]) == 0, "text %d came back as %s", i,
              o[i].text);
        CHECK(ids[i].status == XPG_ESERVER && strcmp(ids[i].sqlstate, "22P02") == 0,
              "text %d as an id: %s %s %s", i, xPgStatusName(ids[i].status), ids[i].sqlstate, ids[i].text);
    }
    printf("%d hostile texts came back unchanged\n", N);
    return 0;
}

/* ---- batch ---- */

static int scenario_batch(void) {
    Outcome created = {0}, cleared = {0};
    send_or_fail(create_stmt, NULL, 0, 0, &created, NULL);
    CHECK(run_until(all_seen, 10000), "create");
    send_or_fail(clear_stmt, NULL, 0, 0, &cleared, NULL);
    CHECK(run_until(all_seen, 10000), "clear");
    /* One turn: insert 1, divide by zero, insert 2, divide by one. The
     * inserts are the statement's first use on the connection: its prepare
     * rides in the failing batch too. */
    Outcome ins1 = {0}, zero = {0}, ins2 = {0}, one = {0}, counted = {0};
    xPgParam p1 = xPgInt(1), p0 = xPgInt(0), p2 = xPgInt(2);
    send_or_fail(insert_stmt, &p1, 1, 0, &ins1, NULL);
    send_or_fail(divide_stmt, &p0, 1, 0, &zero, NULL);
    send_or_fail(insert_stmt, &p2, 1, 0, &ins2, NULL);
    send_or_fail(divide_stmt, &p1, 1, 0, &one, NULL);
    CHECK(run_until(all_seen, 10000), "%d of %d answers", outcomes_seen, outcomes_wanted);
    CHECK(ins1.status == XPG_OK && ins2.status == XPG_OK, "inserts: %s %s; %s %s", xPgStatusName(ins1.status),
          ins1.text, xPgStatusName(ins2.status), ins2.text);
    CHECK(zero.status == XPG_ESERVER && strcmp(zero.sqlstate, "22012") == 0, "1/0: %s %s %s",
          xPgStatusName(zero.status), zero.sqlstate, zero.text);
    CHECK(strstr(zero.text, "division by zero") != NULL, "1/0's message: %s", zero.text);
    CHECK(one.status == XPG_OK && strcmp(one.text, "1") == 0, "1/1: %s", one.text);
    send_or_fail(count_stmt, NULL, 0, 0, &counted, NULL);
    CHECK(run_until(all_seen, 10000), "count");
    CHECK(strcmp(counted.text, "2") == 0, "%s rows in scratch, want 2 (each insert exactly once)",
          counted.text);
    xPgStats s;
    xPgPoolStats(pool, &s);
    CHECK(s.resent > 0, "nothing was sent again");
    printf("batch with a failure: the others committed once; resent %" PRIu64 "\n", s.resent);
    return 0;
}

/* ---- fill ---- */

/* One echo's outcome and the server process that ran it. */
typedef struct Placed {
    int calls, order;
    xPgStatus status;
    char text[32];
    int64_t pid;
} Placed;

static void placed(const xPgResult *r, void *arg) {
    Placed *p = arg;
    p->calls++;
    p->order = ++outcomes_seen;
    p->status = xPgResultStatus(r);
    size_t n;
    const char *t = xPgGetText(r, 0, 0, &n);
    snprintf(p->text, sizeof p->text, "%.*s", (int)n, t);
    xPgGetInt64(r, 0, 3, &p->pid);
}

static void send_echo(const char *text, int64_t i, Placed *p) {
    xPgParam params[] = {xPgText(text, strlen(text)), xPgInt(i)};
    xPgStatus s = xPgQuerySend(pool, echo_stmt, params, 2, 0, placed, p, NULL);
    CHECK(s == XPG_OK, "xPgQuerySend: %s", xPgStatusName(s));
    if (s == XPG_OK) outcomes_wanted++;
}

static struct {
    Placed slow, later[4];
    xTimer turns[2];
} held;

/* A later turn's two queries, while the slow query's batch is in flight. */
static void fill_later_turn(xEventLoop *l, xTimer *t, void *arg) {
    int turn = (int)(intptr_t)arg;
    send_echo(turn ? "turn 2" : "turn 1", 0, &held.later[2 * turn]);
    send_echo(turn ? "turn 2" : "turn 1", 0, &held.later[2 * turn + 1]);
}

static void check_placed(const Placed *p, const char *want, const char *what) {
    CHECK(p->calls == 1 && p->status == XPG_OK && strcmp(p->text, want) == 0, "%s: %d calls, %s, %s", what,
          p->calls, xPgStatusName(p->status), p->text);
}

static bool both_ready(void) {
    xPgStats s;
    xPgPoolStats(pool, &s);
    return s.connections_ready == 2;
}

/* XPG_DISPATCH_FILL on two connections, depth 8, one batch ahead. */
static int scenario_fill(void) {
    /* One turn's 12 queries: the first 8 fill the first connection, the
     * other 4 overflow to the second; each answers its own callback, in the
     * order sent on its connection. */
    enum { N = 12, DEPTH = 8 };
    Placed o[N] = {0};
    /* make_pool waited for one connection: the overflow needs the second. */
    CHECK(run_until(both_ready, 10000), "the second connection never came up");
    char text[N][16];
    for (int i = 0; i < N; i++) {
        snprintf(text[i], sizeof text[i], "query %d", i);
        send_echo(text[i], i, &o[i]);
    }
    CHECK(run_until(all_seen, 10000), "%d of %d answers", outcomes_seen, outcomes_wanted);
    for (int i = 0; i < N; i++) {
        check_placed(&o[i], text[i], text[i]);
        CHECK(o[i].pid == o[i < DEPTH ? 0 : DEPTH].pid, "query %d ran on server process %" PRId64, i,
              o[i].pid);
        CHECK(i == 0 || i == DEPTH || o[i].order > o[i - 1].order, "query %d answered before query %d", i,
              i - 1);
    }
    CHECK(o[0].pid != o[DEPTH].pid, "the overflow ran on the first connection's server process too");
    xPgStats s;
    xPgPoolStats(pool, &s);
    CHECK(s.peak_in_flight == DEPTH, "peak in flight %d, want %d", s.peak_in_flight, DEPTH);

    /* A slow query in flight on the first connection: two later turns'
     * queries join it there (it has room) and wait in one held batch until
     * the slow one's batch is answered. */
    uint64_t batches = s.batches;
    xPgParam sleep_params[] = {xPgFloat(0.5), xPgInt(1)};
    CHECK(xPgQuerySend(pool, sleep_stmt, sleep_params, 2, 0, placed, &held.slow, NULL) == XPG_OK, "send");
    outcomes_wanted++;
    for (int turn = 0; turn < 2; turn++) {
        xTimerInit(&held.turns[turn], fill_later_turn, (void *)(intptr_t)turn);
        xTimerStart(loop, &held.turns[turn], 20 + 40 * (uint64_t)turn);
    }
    CHECK(run_until(all_seen, 10000) && outcomes_wanted == N + 5, "%d of %d answers", outcomes_seen,
          outcomes_wanted);
    CHECK(held.slow.calls == 1 && held.slow.status == XPG_OK, "the slow query: %s", held.slow.text);
    for (int i = 0; i < 4; i++) {
        check_placed(&held.later[i], i < 2 ? "turn 1" : "turn 2", "a later turn's query");
        /* On the first connection, behind the slow query (answered after it). */
        CHECK(held.later[i].pid == o[0].pid, "a later turn's query left the connection with room");
        CHECK(held.later[i].order == held.slow.order + 1 + i, "later query %d answered %d-th", i,
              held.later[i].order);
    }
    xPgPoolStats(pool, &s);
    CHECK(s.batches - batches == 2, "%" PRIu64 " batches for the slow query and two later turns, want 2",
          s.batches - batches);
    printf("fill: %d queries on one connection, %d on the next; later turns held in one batch\n", DEPTH,
           N - DEPTH);
    /* A failing query in the middle of a full connection's batch fails alone. */
    return scenario_batch();
}

/* ---- tx ---- */

static struct {
    xPgTx *tx;
    int step;
    Outcome inside, outside, ended;
    bool began;
} txs;

static void tx_begun(xPgTx *tx, const xPgResult *r, void *arg) {
    CHECK(tx && xPgResultStatus(r) == XPG_OK, "BEGIN: %s", xPgResultMessage(r));
    txs.tx = tx;
    txs.began = true;
    outcomes_seen++;
}

static bool tx_began(void) { return txs.began; }

/* A transaction used and ended from its BEGIN's callback, where pg.h says it is usable. */
static void tx_begun_then_commit(xPgTx *tx, const xPgResult *r, void *arg) {
    CHECK(tx && xPgResultStatus(r) == XPG_OK, "BEGIN: %s", xPgResultMessage(r));
    outcomes_seen++;
    if (!tx) return;
    xPgParam p = xPgInt(9);
    CHECK(xPgTxQuery(tx, insert_stmt, &p, 1, 0, record, &txs.inside, NULL) == XPG_OK,
          "xPgTxQuery from BEGIN's callback");
    CHECK(xPgTxCommit(tx, record, &txs.ended) == XPG_OK, "xPgTxCommit from BEGIN's callback");
}

/* Inserts n inside a transaction, reads the count inside and (on another
 * connection) outside, then ends it with commit or rollback. */
static void tx_round(int n, bool commit) {
    txs.began = false;
    xPgQuery *h;
    CHECK(xPgTxBegin(pool, tx_begun, NULL, &h) == XPG_OK, "xPgTxBegin");
    outcomes_wanted++;
    CHECK(run_until(tx_began, 10000) && txs.tx, "no transaction began");
    if (!txs.tx) return;
    Outcome inserted = {0};
    xPgParam p = xPgInt(n);
    outcomes_wanted += 3;
    CHECK(xPgTxQuery(txs.tx, insert_stmt, &p, 1, 0, record, &inserted, NULL) == XPG_OK, "xPgTxQuery");
    CHECK(xPgTxQuery(txs.tx, count_stmt, NULL, 0, 0, record, &txs.inside, NULL) == XPG_OK, "xPgTxQuery");
    CHECK(xPgQuerySend(pool, count_stmt, NULL, 0, 0, record, &txs.outside, NULL) == XPG_OK, "xPgQuerySend");
    CHECK(run_until(all_seen, 10000), "%d of %d answers", outcomes_seen, outcomes_wanted);
    CHECK(inserted.status == XPG_OK, "insert in the transaction: %s", inserted.text);
    outcomes_wanted++;
    xPgStatus s = (commit ? xPgTxCommit : xPgTxRollback)(txs.tx, record, &txs.ended);
    CHECK(s == XPG_OK, "ending: %s", xPgStatusName(s));
    txs.tx = NULL;
    CHECK(run_until(all_seen, 10000) && txs.ended.status == XPG_OK, "ending: %s", txs.ended.text);
}

static int scenario_tx(void) {
    Outcome created = {0}, cleared = {0}, counted = {0};
    send_or_fail(create_stmt, NULL, 0, 0, &created, NULL);
    CHECK(run_until(all_seen, 10000), "create");
    send_or_fail(clear_stmt, NULL, 0, 0, &cleared, NULL);
    CHECK(run_until(all_seen, 10000), "clear");
    tx_round(5, false);
    CHECK(strcmp(txs.inside.text, "1") == 0 && strcmp(txs.outside.text, "0") == 0,
          "rolled back: %s inside, %s outside", txs.inside.text, txs.outside.text);
    send_or_fail(count_stmt, NULL, 0, 0, &counted, NULL);
    CHECK(run_until(all_seen, 10000) && strcmp(counted.text, "0") == 0, "after rollback: %s rows",
          counted.text);
    memset(&txs, 0, sizeof txs);
    tx_round(7, true);
    CHECK(strcmp(txs.inside.text, "1") == 0 && strcmp(txs.outside.text, "0") == 0,
          "before commit: %s inside, %s outside", txs.inside.text, txs.outside.text);
    memset(&counted, 0, sizeof counted);
    send_or_fail(count_stmt, NULL, 0, 0, &counted, NULL);
    CHECK(run_until(all_seen, 10000) && strcmp(counted.text, "1") == 0, "after commit: %s rows",
          counted.text);
    memset(&txs, 0, sizeof txs);
    CHECK(xPgTxBegin(pool, tx_begun_then_commit, NULL, NULL) == XPG_OK, "xPgTxBegin");
    outcomes_wanted += 3;
    CHECK(run_until(all_seen, 10000), "%d of %d answers", outcomes_seen, outcomes_wanted);
    CHECK(txs.inside.status == XPG_OK && txs.ended.status == XPG_OK, "from BEGIN's callback: %s, %s",
          txs.inside.text, txs.ended.text);
    memset(&counted, 0, sizeof counted);
    send_or_fail(count_stmt, NULL, 0, 0, &counted, NULL);
    CHECK(run_until(all_seen, 10000) && strcmp(counted.text, "2") == 0,
          "after a commit from BEGIN's callback: %s rows", counted.text);
    /* A begin cancelled in flight: the connection is rolled back and comes back. */
    xPgQuery *h;
    txs.began = false;
    CHECK(xPgTxBegin(pool, tx_begun, NULL, &h) == XPG_OK, "xPgTxBegin");
    xPgQueryCancel(h);
    Outcome after[4] = {0};
    for (int i = 0; i < 4; i++) send_or_fail(count_stmt, NULL, 0, 0, &after[i], NULL);
    CHECK(run_until(all_seen, 10000), "%d of %d answers", outcomes_seen, outcomes_wanted);
    run_until(all_seen, 200);
    CHECK(!txs.began, "a cancelled BEGIN's callback ran");
    xPgStats s;
    xPgPoolStats(pool, &s);
    CHECK(s.in_flight == 0 && s.connections_ready == 2, "%d in flight, %d ready", s.in_flight,
          s.connections_ready);
    /* A BEGIN while every connection has queries in flight waits for one to
     * drain (nobody else's query may share its transaction), then runs. */
    Outcome busy[4] = {0};
    for (int i = 0; i < 4; i++) {
        xPgParam sleep_params[] = {xPgText("0.2", 3), xPgInt(i)};
        send_or_fail(sleep_stmt, sleep_params, 2, 0, &busy[i], NULL);
    }
    memset(&txs, 0, sizeof txs);
    CHECK(xPgTxBegin(pool, tx_begun, NULL, NULL) == XPG_OK, "xPgTxBegin");
    outcomes_wanted++;
    CHECK(run_until(tx_began, 10000) && txs.tx, "no transaction began behind busy connections");
    int answered = 0;
    for (int i = 0; i < 4; i++) answered += busy[i].calls;
    CHECK(answered >= 2, "BEGIN ran with %d of the 4 queries ahead of it answered: it shared a pipeline",
          answered);
    if (txs.tx) {
        outcomes_wanted++;
        CHECK(xPgTxCommit(txs.tx, record, &txs.ended) == XPG_OK, "commit");
    }
    CHECK(run_until(all_seen, 10000), "%d of %d answers", outcomes_seen, outcomes_wanted);
    for (int i = 0; i < 4; i++) CHECK(busy[i].status == XPG_OK, "busy query %d: %s", i, busy[i].text);
    printf("transactions: rollback hid, commit showed\n");
    return 0;
}

/* ---- unreachable ---- */

static bool pool_down(void) {
    xPgStats s;
    xPgPoolStats(pool, &s);
    return s.down;
}

static int scenario_unreachable(void) {
    Outcome early[3] = {0};
    for (int i = 0; i < 3; i++) {
        xPgParam p[] = {xPgText("x", 1), xPgInt(i)};
        send_or_fail(echo_stmt, p, 2, 30000, &early[i], NULL);
    }
    CHECK(run_until(all_seen, 10000), "%d of %d answers: queries wait for a server that is not there",
          outcomes_seen, outcomes_wanted);
    for (int i = 0; i < 3; i++)
        CHECK(early[i].calls == 1 && early[i].status == XPG_EDOWN && early[i].text[0], "query %d: %s %s", i,
              xPgStatusName(early[i].status), early[i].text);
    CHECK(pool_down(), "the pool does not say it is down");
    xPgParam p[] = {xPgText("x", 1), xPgInt(0)};
    xPgStatus s = xPgQuerySend(pool, echo_stmt, p, 2, 0, record, &early[0], NULL);
    CHECK(s == XPG_EDOWN, "a query while down: %s", xPgStatusName(s));
    CHECK(xPgTxBegin(pool, tx_begun, NULL, NULL) == XPG_EDOWN, "a transaction while down");
    printf("queries failed with: %s\n", early[0].text);
    return 0;
}

/* ---- hostile ---- */

static int scenario_hostile(void) {
    Outcome sent[3] = {0};
    for (int i = 0; i < 3; i++) {
        xPgParam p[] = {xPgText("x", 1), xPgInt(i)};
        send_or_fail(echo_stmt, p, 2, 10000, &sent[i], NULL);
    }
    CHECK(run_until(all_seen, 10000), "%d of %d answers", outcomes_seen, outcomes_wanted);
    for (int i = 0; i < 3; i++)
        CHECK(sent[i].calls == 1 && sent[i].status == XPG_EDOWN && sent[i].text[0], "query %d: %s %s", i,
              xPgStatusName(sent[i].status), sent[i].text);
    printf("queries failed with: %s\n", sent[0].text);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s CONNINFO SCENARIO [ARGS...]\n", argv[0]);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    loop = xEventLoopCreate();
    const char *scenario = argv[2];
    conninfo_scenario = scenario;
    xPgConf conf;
    xPgConfInit(&conf);
    conf.connections = 2;
    if (strcmp(scenario, "pipeline") == 0) conf.connections = 1;
    if (strcmp(scenario, "queue") == 0)
        conf = (xPgConf){.connections = 1, .pipeline_depth = 2, .queue_limit = 3};
    if (strcmp(scenario, "cancel") == 0) conf = (xPgConf){.connections = 1, .pipeline_depth = 2};
    if (strcmp(scenario, "batch") == 0 || strcmp(scenario, "hostile") == 0) conf.connections = 1;
    if (strcmp(scenario, "restart") == 0) conf = (xPgConf){.connections = 4, .backoff_max_ms = 400};
    if (strcmp(scenario, "timeout") == 0) conf.statement_timeout_ms = 1500;
    if (strcmp(scenario, "fill") == 0)
        conf = (xPgConf){
            .connections = 2, .pipeline_depth = 8, .dispatch = XPG_DISPATCH_FILL, .batches_ahead = 1};
    make_pool(argv[1], conf);
    if (strcmp(scenario, "typed") == 0)
        scenario_typed(argc - 3, argv + 3);
    else if (strcmp(scenario, "pipeline") == 0)
        scenario_pipeline(argc > 3 ? atoi(argv[3]) : 50);
    else if (strcmp(scenario, "restart") == 0)
        scenario_restart();
    else if (strcmp(scenario, "timeout") == 0)
        scenario_timeout();
    else if (strcmp(scenario, "queue") == 0)
        scenario_queue();
    else if (strcmp(scenario, "cancel") == 0)
        scenario_cancel();
    else if (strcmp(scenario, "inject") == 0)
        scenario_inject();
    else if (strcmp(scenario, "batch") == 0)
        scenario_batch();
    else if (strcmp(scenario, "tx") == 0)
        scenario_tx();
    else if (strcmp(scenario, "fill") == 0)
        scenario_fill();
    else if (strcmp(scenario, "unreachable") == 0)
        scenario_unreachable();
    else if (strcmp(scenario, "hostile") == 0)
        scenario_hostile();
    else {
        fprintf(stderr, "no scenario %s\n", scenario);
        return 2;
    }
    const char *backend = xEventLoopBackend(loop);
    xPgPoolFree(pool);
    xEventLoopDestroy(loop);
    printf("%s: %s on %s\n", failures ? "FAILED" : "ok", scenario, backend);
    return failures ? 1 : 0;
}
