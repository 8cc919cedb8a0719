/* interop_pq.c — libpq's asynchronous API driven by an xKit loop (on the
 * backend XK_IO names): CONNS connections opened at once with
 * PQconnectStart/PQconnectPoll, each then running QUERIES queries one after
 * another, nonblocking, so that CONNS are in flight at any moment. Every
 * third query sends a parameter of BIG bytes (several MB fill the socket's
 * send buffer: PQflush says 1 and the watch asks for output until it says 0)
 * and gets it back; the others do arithmetic. Each result is checked. Prints
 * what went wrong and exits 1, or "ok".
 *
 * The adapter is the watch's events following what libpq asks for: while
 * connecting, PQconnectPoll's READING or WRITING; then input always, and
 * output while PQflush has more to send. Level-triggered, as libpq expects:
 * it reads what it can and returns, and hears again while more waits. */
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xbase/event.h>

typedef enum PqState { PQ_CONNECTING, PQ_QUERYING, PQ_DONE } PqState;

typedef struct Pq {
    PGconn *conn;
    int fd; /* watched, or -1 */
    PqState state;
    int index, query; /* this connection's number, and its query in flight */
} Pq;

static xEventLoop *loop;
static int conns_left, failures, queries, flush_waits, queries_per_conn;
static size_t big_bytes;
static char *big;

static void on_socket(xEventLoop *l, int fd, unsigned events, void *arg);

static void fail(Pq *pq, const char *what) {
    printf("connection %d, query %d: %s: %s\n", pq->index, pq->query, what, PQerrorMessage(pq->conn));
    failures++;
}

static void finish(Pq *pq) {
    if (pq->fd >= 0) xEventLoopRemove(loop, pq->fd);
    pq->fd = -1;
    pq->state = PQ_DONE;
    if (--conns_left == 0) xEventLoopStop(loop);
}

/* Watches libpq's socket for events, taking a new socket where libpq opened
 * one (it may, trying another address). */
static void watch(Pq *pq, unsigned events) {
    int fd = PQsocket(pq->conn);
    if (fd != pq->fd) {
        if (pq->fd >= 0) xEventLoopRemove(loop, pq->fd);
        pq->fd = fd;
        if (xEventLoopAdd(loop, fd, events, on_socket, pq) != XOK) fail(pq, "xEventLoopAdd");
        return;
    }
    if (xEventLoopModify(loop, fd, events) != XOK) fail(pq, "xEventLoopModify");
}

/* Sends what PQflush can; the watch asks for output while it has more. */
static void flush(Pq *pq) {
    int more = PQflush(pq->conn);
    if (more < 0) {
        fail(pq, "PQflush");
        finish(pq);
        return;
    }
    if (more) flush_waits++;
    watch(pq, XEV_READ | (more ? XEV_WRITE : 0));
}

static void send_query(Pq *pq) {
    char a[32], b[32];
    int ok;
    if (pq->query % 3 == 1) {
        const char *values[] = {big};
        int lengths[] = {(int)big_bytes};
        int formats[] = {0};
        ok = PQsendQueryParams(pq->conn, "SELECT length($1::text), $1::text", 1, NULL, values, lengths,
                               formats, 0);
    } else {
        snprintf(a, sizeof a, "%d", pq->index * 1000 + pq->query);
        snprintf(b, sizeof b, "%d", pq->query + 1);
        const char *values[] = {a, b};
        ok = PQsendQueryParams(pq->conn, "SELECT $1::int * $2::int, pg_backend_pid()", 2, NULL, values, NULL,
                               NULL, 0);
    }
    if (!ok) {
        fail(pq, "PQsendQueryParams");
        finish(pq);
        return;
    }
    flush(pq);
}

static void check_result(Pq *pq, PGresult *res) {
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        printf("connection %d, query %d: %s", pq->index, pq->query, PQresultErrorMessage(res));
        failures++;
        return;
    }
    if (pq->query % 3 == 1) {
        const char *echoed = PQgetvalue(res, 0, 1);
        if (atol(PQgetvalue(res, 0, 0)) != (long)big_bytes || (size_t)PQgetlength(res, 0, 1) != big_bytes ||
            memcmp(echoed, big, big_bytes) != 0) {
            printf("connection %d, query %d: the %zu-byte value came back as %d bytes, or changed\n",
                   pq->index, pq->query, big_bytes, PQgetlength(res, 0, 1));
            failures++;
        }
    } else {
        long want = (long)(pq->index * 1000 + pq->query) * (pq->query + 1);
        if (atol(PQgetvalue(res, 0, 0)) != want) {
            printf("connection %d, query %d: %s, not %ld\n", pq->index, pq->query, PQgetvalue(res, 0, 0),
                   want);
            failures++;
        }
    }
    queries++;
}

static void on_socket(xEventLoop *l, int fd, unsigned events, void *arg) {
    Pq *pq = arg;
    if (pq->state == PQ_CONNECTING) {
        switch (PQconnectPoll(pq->conn)) {
        case PGRES_POLLING_READING: watch(pq, XEV_READ); return;
        case PGRES_POLLING_WRITING: watch(pq, XEV_WRITE); return;
        case PGRES_POLLING_OK:
            PQsetnonblocking(pq->conn, 1);
            pq->state = PQ_QUERYING;
            send_query(pq);
            return;
        default:
            fail(pq, "PQconnectPoll");
            finish(pq);
            return;
        }
    }
    /* libpq's order: output first while it has some, then input. */
    if (events & XEV_WRITE) {
        flush(pq);
        if (pq->state == PQ_DONE) return;
    }
    if (!(events & (XEV_READ | XEV_ERROR))) return;
    if (!PQconsumeInput(pq->conn)) {
        fail(pq, "PQconsumeInput");
        finish(pq);
        return;
    }
    while (!PQisBusy(pq->conn)) {
        PGresult *res = PQgetResult(pq->conn);
        if (!res) { /* this query is done */
            if (++pq->query == queries_per_conn)
                finish(pq);
            else
                send_query(pq);
            return;
        }
        check_result(pq, res);
        PQclear(res);
    }
}

static void give_up(xEventLoop *l, xTimer *timer, void *arg) {
    printf("gave up with %d connections unfinished\n", conns_left);
    failures++;
    xEventLoopStop(l);
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s CONNINFO CONNS QUERIES BIG\n", argv[0]);
        return 2;
    }
    int nconns = atoi(argv[2]);
    queries_per_conn = atoi(argv[3]);
    big_bytes = (size_t)atol(argv[4]);
    big = malloc(big_bytes + 1);
    for (size_t j = 0; j < big_bytes; j++) big[j] = (char)('a' + j * 7 % 26);
    big[big_bytes] = 0;
    loop = xEventLoopCreate();
    Pq *pqs = calloc((size_t)nconns, sizeof *pqs);
    for (int i = 0; i < nconns; i++) {
        Pq *pq = &pqs[i];
        *pq = (Pq){.conn = PQconnectStart(argv[1]), .fd = -1, .index = i};
        conns_left++;
        if (!pq->conn || PQstatus(pq->conn) == CONNECTION_BAD) {
            fail(pq, "PQconnectStart");
            finish(pq);
            continue;
        }
        watch(pq, XEV_WRITE); /* PQconnectStart's word: PGRES_POLLING_WRITING */
    }
    xTimer deadline;
    xTimerInit(&deadline, give_up, NULL);
    xTimerStart(loop, &deadline, 60000);
    if (conns_left) xEventLoopRun(loop);
    xTimerStop(loop, &deadline);
    const char *backend = xEventLoopBackend(loop);
    for (int i = 0; i < nconns; i++) {
        if (pqs[i].fd >= 0) xEventLoopRemove(loop, pqs[i].fd);
        if (pqs[i].conn) PQfinish(pqs[i].conn);
    }
    if (queries != nconns * queries_per_conn) {
        printf("%d of %d queries answered\n", queries, nconns * queries_per_conn);
        failures++;
    }
    if (big_bytes >= 1 << 20 && flush_waits == 0) {
        printf("PQflush never had to wait for the socket: the test did not fill its send buffer\n");
        failures++;
    }
    printf("%s: %d queries on %d connections, %d waits for output, on %s\n", failures ? "FAILED" : "ok",
           queries, nconns, flush_waits, backend);
    xEventLoopDestroy(loop);
    free(pqs);
    free(big);
    return failures ? 1 : 0;
}
