/* pg.c — a pool of pipelined libpq connections on one xEventLoop (see
 * <xdb/pg.h> for the behaviour a user sees).
 *
 * A query lives in one of three places: the pool's queue (waiting for a
 * connection), a connection's in-flight list (sent; its results come back in
 * the order sent), or a batch being handed out. Queries sent to a connection
 * during a loop turn form a batch, closed at the turn's end by one Sync and
 * one flush. libpq reports, per query, its prepare's result (when it carries
 * one), its own result, then at the batch's end PGRES_PIPELINE_SYNC; the
 * results are held until then because a failure anywhere in the batch rolls
 * back the whole implicit transaction (those queries are sent again).
 *
 * The socket's watch follows libpq: while connecting, what PQconnectPoll asks
 * for; once up, input always and output while PQflush has more to send. */
#include <xdb/pg.h>

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xbase/mem/sized.h"
#include "xdb/pg_text.h"

/* Batches a connection may have in flight (synced, not yet answered): two
 * keep the server busy on the next while the oldest's results travel back. */
#define SYNCS_AHEAD 2

typedef enum ConnState {
    CONN_WAITING,    /* closed; its timer reconnects it (or it is being freed) */
    CONN_CONNECTING, /* PQconnectPoll in progress; its timer bounds the attempt */
    CONN_READY,      /* in pipeline mode, taking queries */
} ConnState;

typedef enum QueryKind { KIND_STATEMENT, KIND_BEGIN, KIND_COMMIT, KIND_ROLLBACK } QueryKind;

typedef enum QueryPlace { PLACE_QUEUED, PLACE_IN_FLIGHT, PLACE_HANDED_OUT } QueryPlace;

/* What libpq owes an in-flight query next. */
typedef enum QueryPhase {
    PHASE_PREPARE,     /* the result of its statement's prepare */
    PHASE_PREPARE_END, /* the NULL after it */
    PHASE_EXECUTE,     /* its own result */
    PHASE_EXECUTE_END, /* the NULL after it */
    PHASE_ANSWERED,    /* nothing: its batch's Sync is awaited */
} QueryPhase;

typedef enum TxState {
    TX_WAITING, /* BEGIN queued or in flight */
    TX_OPEN,    /* pinned to conn, taking queries */
    TX_ENDING,  /* COMMIT or ROLLBACK sent: freed when it is answered */
    TX_BROKEN,  /* its connection was lost */
} TxState;

typedef struct Conn Conn;

typedef struct Statement {
    char *name, *sql;
    int nparams;
    Oid *types; /* nparams entries, or NULL */
} Statement;

struct xPgQuery {
    xPgPool *pool;
    xPgQuery *prev, *next; /* in the queue, an in-flight list, or a batch */
    QueryKind kind;
    QueryPlace place;
    QueryPhase phase;
    bool dropped;    /* cancelled, timed out or answered: no callback (more) */
    bool prepares;   /* carries its statement's prepare ahead of it */
    bool resendable; /* sent outside a transaction: may go again if its batch fails */
    int stmt, nparams;
    const char **values; /* into this block */
    xPgResultFn fn;
    xPgTxFn tx_fn; /* KIND_BEGIN */
    void *arg;
    xPgTx *tx; /* the transaction it begins, runs in or ends; NULL outside one */
    Conn *conn;
    uint64_t batch;
    PGresult *result, *prepare_error;
    uint32_t timeout_ms;
    xTimer timer;
};

struct xPgTx {
    xPgPool *pool;
    Conn *conn; /* pinned; NULL while waiting or once broken */
    TxState state;
};

typedef struct QueryList {
    xPgQuery *head, *tail;
    int count;
} QueryList;

struct Conn {
    xPgPool *pool;
    PGconn *pg;
    int fd;          /* watched, or -1 */
    unsigned events; /* what fd is watched for */
    ConnState state;
    QueryList in_flight;
    xPgQuery *reading; /* the in-flight query whose results come next */
    int stray_nulls;   /* NULLs from PQgetResult that no query was owed */
    uint64_t prepared; /* statements prepared here (or sent to be) */
    uint64_t batch;    /* the batch queries sent now join */
    int syncs_out;     /* Syncs sent whose PGRES_PIPELINE_SYNC has not come back */
    bool unsynced;     /* queries sent and not yet synced: a Sync is owed */
    bool draining;     /* holds a timed-out query: no new ones until it empties */
    bool reserved;     /* set aside for a waiting BEGIN: no new queries */
    bool was_up;       /* has been ready before: the next success is a reconnect */
    xPgTx *tx;         /* the transaction pinned here */
    int failures;      /* attempts failed in a row, for the backoff */
    xTimer timer;
};

/* The end-of-turn call lives apart from the pool: the loop may still hold it
 * queued when the pool is freed, and then frees it itself. */
typedef struct TurnEnd {
    xTurnEnd call;
    xPgPool *pool;
} TurnEnd;

struct xPgPool {
    xEventLoop *loop;
    xPgConf conf;
    char *conninfo;
    char options[64]; /* "-c statement_timeout=N", or "" */
    Conn *conns;
    Statement statements[XPG_MAX_STATEMENTS];
    int nstatements;
    QueryList queue;
    int begins_queued; /* BEGINs in the queue: while any, a connection stays set aside */
    int ready;
    bool down;
    TurnEnd *turn_end;
    xPgStats stats;
    char message[256]; /* the last connection failure, for XPG_EDOWN results */
};

struct xPgResult {
    xPgStatus status;
    const PGresult *res; /* the rows (XPG_OK) or the server's error (XPG_ESERVER), or NULL */
    const char *sqlstate, *message;
};

static void conn_lost(Conn *conn, const char *why);
static void conn_failed(Conn *conn, const char *why);
static void dispatch(xPgPool *pool);
static void on_socket(xEventLoop *loop, int fd, unsigned events, void *arg);

const char *xPgStatusName(xPgStatus status) {
    static const char *const names[] = {
        [XPG_OK] = "XPG_OK",           [XPG_ESERVER] = "XPG_ESERVER", [XPG_ETIMEOUT] = "XPG_ETIMEOUT",
        [XPG_EDOWN] = "XPG_EDOWN",     [XPG_EBUSY] = "XPG_EBUSY",     [XPG_EPARAM] = "XPG_EPARAM",
        [XPG_ECLOSED] = "XPG_ECLOSED", [XPG_ENOMEM] = "XPG_ENOMEM",
    };
    return (unsigned)status < sizeof names / sizeof *names ? names[status] : "XPG_?";
}

/* ---- Lists ---- */

static void list_append(QueryList *list, xPgQuery *q) {
    q->next = NULL;
    q->prev = list->tail;
    if (list->tail)
        list->tail->next = q;
    else
        list->head = q;
    list->tail = q;
    list->count++;
}

static void list_unlink(QueryList *list, xPgQuery *q) {
    if (q->prev)
        q->prev->next = q->next;
    else
        list->head = q->next;
    if (q->next)
        q->next->prev = q->prev;
    else
        list->tail = q->prev;
    q->prev = q->next = NULL;
    list->count--;
}

/* Puts the queries of from, in their order, ahead of those in list. */
static void list_prepend_all(QueryList *list, QueryList *from) {
    if (!from->head) return;
    from->tail->next = list->head;
    if (list->head)
        list->head->prev = from->tail;
    else
        list->tail = from->tail;
    list->head = from->head;
    list->count += from->count;
    *from = (QueryList){0};
}

static void queue_append(xPgPool *pool, xPgQuery *q) {
    list_append(&pool->queue, q);
    if (q->kind == KIND_BEGIN) pool->begins_queued++;
}

static void queue_unlink(xPgPool *pool, xPgQuery *q) {
    list_unlink(&pool->queue, q);
    if (q->kind == KIND_BEGIN) pool->begins_queued--;
}

/* Takes the whole queue out of the pool. */
static QueryList queue_take(xPgPool *pool) {
    QueryList all = pool->queue;
    pool->queue = (QueryList){0};
    pool->begins_queued = 0;
    return all;
}

/* ---- Handing out outcomes ---- */

static void query_free(xPgQuery *q) {
    xTimerStop(q->pool->loop, &q->timer);
    PQclear(q->result);
    PQclear(q->prepare_error);
    free(q);
}

static void tx_end(xPgTx *tx) {
    if (tx->conn) tx->conn->tx = NULL;
    free(tx);
}

/* Calls q's callback (once: q is dropped from then on) with result. */
static void deliver(xPgQuery *q, const xPgResult *result) {
    if (q->dropped) return;
    q->dropped = true;
    xTimerStop(q->pool->loop, &q->timer);
    if (q->kind == KIND_BEGIN) {
        if (q->tx_fn) q->tx_fn(result->status == XPG_OK ? q->tx : NULL, result, q->arg);
    } else if (q->fn) {
        q->fn(result, q->arg);
    }
}

static void deliver_failure(xPgQuery *q, xPgStatus status, const char *message) {
    deliver(q, &(xPgResult){.status = status, .sqlstate = "", .message = message});
}

static void deliver_result(xPgQuery *q, const PGresult *res) {
    ExecStatusType type = PQresultStatus(res);
    if (type == PGRES_TUPLES_OK || type == PGRES_COMMAND_OK) {
        deliver(q, &(xPgResult){.status = XPG_OK, .res = res, .sqlstate = "", .message = ""});
        return;
    }
    const char *sqlstate = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    const char *message = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
    if (!message) message = PQresultErrorMessage(res);
    deliver(q,
            &(xPgResult){
                .status = XPG_ESERVER, .res = res, .sqlstate = sqlstate ? sqlstate : "", .message = message});
}

/* Ends q's life after its outcome was handed out (or it was dropped): a
 * BEGIN that did not open its transaction frees it; a COMMIT or ROLLBACK
 * gives the connection back. */
static void query_finish(xPgQuery *q, bool began) {
    xPgTx *tx = q->tx;
    if (tx && (q->kind == KIND_COMMIT || q->kind == KIND_ROLLBACK || (q->kind == KIND_BEGIN && !began)))
        tx_end(tx);
    query_free(q);
}

/* ---- Connections ---- */

static void watch(Conn *conn, unsigned events) {
    int fd = PQsocket(conn->pg);
    if (fd != conn->fd) {
        if (conn->fd >= 0) xEventLoopRemove(conn->pool->loop, conn->fd);
        conn->fd = -1;
        if (fd >= 0 && xEventLoopAdd(conn->pool->loop, fd, events, on_socket, conn) == XOK) conn->fd = fd;
        conn->events = events;
        return;
    }
    /* Every flush asks again; on epoll an unchanged ask would still cost a system call. */
    if (fd >= 0 && events != conn->events && xEventLoopModify(conn->pool->loop, fd, events) == XOK)
        conn->events = events;
}

static void conn_close(Conn *conn) {
    if (conn->fd >= 0) xEventLoopRemove(conn->pool->loop, conn->fd);
    conn->fd = -1;
    if (conn->state == CONN_READY) conn->pool->ready--;
    PQfinish(conn->pg);
    conn->pg = NULL;
    conn->state = CONN_WAITING;
    conn->reading = NULL;
    conn->syncs_out = 0;
    conn->unsynced = conn->draining = conn->reserved = false;
    xTimerStop(conn->pool->loop, &conn->timer);
}

static void set_message(xPgPool *pool, const char *why) {
    snprintf(pool->message, sizeof pool->message, "%s", why && *why ? why : "connection failed");
    size_t n = strlen(pool->message);
    while (n && pool->message[n - 1] == '\n') pool->message[--n] = 0;
}

/* The pool is down: queries waiting for a connection fail now rather than
 * wait for one that may not come. */
static void pool_down(xPgPool *pool) {
    pool->down = true;
    QueryList waiting = queue_take(pool);
    for (xPgQuery *q = waiting.head; q; q = q->next) q->place = PLACE_HANDED_OUT;
    while (waiting.head) {
        xPgQuery *q = waiting.head;
        list_unlink(&waiting, q);
        deliver_failure(q, XPG_EDOWN, pool->message);
        query_finish(q, false);
    }
}

static void conn_connect(Conn *conn) {
    xPgPool *pool = conn->pool;
    const char *keys[3] = {"dbname"}, *values[3] = {pool->conninfo};
    if (pool->options[0]) keys[1] = "options", values[1] = pool->options;
    conn->pg = PQconnectStartParams(keys, values, 1);
    if (!conn->pg || PQstatus(conn->pg) == CONNECTION_BAD) {
        conn_failed(conn, conn->pg ? PQerrorMessage(conn->pg) : "out of memory");
        return;
    }
    conn->state = CONN_CONNECTING;
    xTimerStart(pool->loop, &conn->timer, pool->conf.connect_timeout_ms);
    watch(conn, XEV_WRITE); /* PQconnectStart's word: PGRES_POLLING_WRITING */
    if (conn->fd < 0) conn_failed(conn, "cannot watch the connection's socket");
}

static void on_conn_timer(xEventLoop *loop, xTimer *timer, void *arg) {
    Conn *conn = arg;
    if (conn->state == CONN_CONNECTING)
        conn_failed(conn, "connection attempt timed out");
    else if (conn->state == CONN_WAITING)
        conn_connect(conn);
}

static void schedule_reconnect(Conn *conn) {
    xPgConf *conf = &conn->pool->conf;
    uint64_t wait = conf->backoff_min_ms;
    for (int i = 1; i < conn->failures && wait < conf->backoff_max_ms; i++) wait *= 2;
    if (wait > conf->backoff_max_ms) wait = conf->backoff_max_ms;
    xTimerStart(conn->pool->loop, &conn->timer, wait);
}

/* An attempt to connect failed. */
static void conn_failed(Conn *conn, const char *why) {
    xPgPool *pool = conn->pool;
    set_message(pool, why);
    conn_close(conn);
    conn->failures++;
    schedule_reconnect(conn);
    if (pool->ready == 0) pool_down(pool);
}

static void conn_up(Conn *conn) {
    xPgPool *pool = conn->pool;
    if (PQsetnonblocking(conn->pg, 1) != 0 || PQenterPipelineMode(conn->pg) != 1) {
        conn_failed(conn, PQerrorMessage(conn->pg));
        return;
    }
    xTimerStop(pool->loop, &conn->timer);
    conn->state = CONN_READY;
    conn->prepared = 0;
    conn->failures = 0;
    if (conn->was_up) pool->stats.reconnects++;
    conn->was_up = true;
    pool->ready++;
    pool->down = false;
    watch(conn, XEV_READ);
    dispatch(pool);
}

/* A ready connection broke: what it had in flight fails (whether it ran is
 * unknown), its transaction is broken, and it reconnects after a while. */
static void conn_lost(Conn *conn, const char *why) {
    xPgPool *pool = conn->pool;
    set_message(pool, why);
    QueryList lost = conn->in_flight;
    conn->in_flight = (QueryList){0};
    if (conn->tx) {
        conn->tx->conn = NULL;
        if (conn->tx->state == TX_OPEN) conn->tx->state = TX_BROKEN;
        conn->tx = NULL;
    }
    conn_close(conn);
    conn->failures = 0;
    schedule_reconnect(conn);
    for (xPgQuery *q = lost.head; q; q = q->next) q->place = PLACE_HANDED_OUT;
    while (lost.head) {
        xPgQuery *q = lost.head;
        list_unlink(&lost, q);
        deliver_failure(q, XPG_EDOWN, pool->message);
        query_finish(q, false);
    }
    if (pool->ready == 0)
        pool_down(pool);
    else
        dispatch(pool);
}

/* Sends what libpq holds; the watch asks for output while more waits. */
static void conn_flush(Conn *conn) {
    int more = PQflush(conn->pg);
    if (more < 0) {
        conn_lost(conn, PQerrorMessage(conn->pg));
        return;
    }
    watch(conn, XEV_READ | (more ? XEV_WRITE : 0));
}

/* ---- Sending ---- */

static void on_turn_end(xEventLoop *loop, xTurnEnd *call) {
    TurnEnd *turn_end = (TurnEnd *)call;
    xPgPool *pool = turn_end->pool;
    if (!pool) { /* freed while this call was queued */
        free(turn_end);
        return;
    }
    for (int i = 0; i < pool->conf.connections; i++) {
        Conn *conn = &pool->conns[i];
        if (conn->state != CONN_READY || !conn->unsynced || conn->syncs_out >= SYNCS_AHEAD) continue;
        conn->unsynced = false;
        conn->syncs_out++;
        conn->batch++;
        pool->stats.batches++;
        if (PQpipelineSync(conn->pg) != 1) { /* it flushes, too */
            conn_lost(conn, PQerrorMessage(conn->pg));
            continue;
        }
        conn_flush(conn);
    }
}

static bool send_query(Conn *conn, xPgQuery *q) {
    xPgPool *pool = conn->pool;
    PGconn *pg = conn->pg;
    int ok;
    q->prepares = false;
    if (q->kind == KIND_STATEMENT) {
        Statement *s = &pool->statements[q->stmt];
        uint64_t bit = (uint64_t)1 << q->stmt;
        if (!(conn->prepared & bit)) {
            if (!PQsendPrepare(pg, s->name, s->sql, s->nparams, s->types)) return false;
            conn->prepared |= bit;
            q->prepares = true;
        }
        ok = PQsendQueryPrepared(pg, s->name, q->nparams, q->values, NULL, NULL, 0);
    } else {
        static const char *const sql[] = {
            [KIND_BEGIN] = "BEGIN", [KIND_COMMIT] = "COMMIT", [KIND_ROLLBACK] = "ROLLBACK"};
        ok = PQsendQueryParams(pg, sql[q->kind], 0, NULL, NULL, NULL, NULL, 0);
    }
    return ok == 1;
}

/* Sends q on conn, in this turn's batch. */
static void conn_send(Conn *conn, xPgQuery *q) {
    xPgPool *pool = conn->pool;
    q->place = PLACE_IN_FLIGHT;
    q->conn = conn;
    q->batch = conn->batch;
    q->resendable = q->kind == KIND_STATEMENT && !q->tx;
    list_append(&conn->in_flight, q);
    if (!send_query(conn, q)) {
        conn_lost(conn, PQerrorMessage(conn->pg));
        return;
    }
    q->phase = q->prepares ? PHASE_PREPARE : PHASE_EXECUTE;
    if (!conn->reading) conn->reading = q;
    if (conn->in_flight.count > pool->stats.peak_in_flight)
        pool->stats.peak_in_flight = conn->in_flight.count;
    conn->unsynced = true;
    xEventLoopAtTurnEnd(pool->loop, &pool->turn_end->call);
}

static bool takes_statements(const Conn *conn) {
    return conn->state == CONN_READY && !conn->tx && !conn->reserved && !conn->draining;
}

/* The ready connection with the fewest queries in flight, below the depth. */
static Conn *least_busy(xPgPool *pool) {
    Conn *best = NULL;
    for (int i = 0; i < pool->conf.connections; i++) {
        Conn *conn = &pool->conns[i];
        if (takes_statements(conn) && conn->in_flight.count < pool->conf.pipeline_depth &&
            (!best || conn->in_flight.count < best->in_flight.count))
            best = conn;
    }
    return best;
}

/* A connection for a BEGIN: one with nothing in flight, so that nobody
 * else's query shares its transaction. Where none is, the least busy is set
 * aside to drain; NULL then. */
static Conn *idle_for_begin(xPgPool *pool) {
    Conn *drain = NULL;
    for (int i = 0; i < pool->conf.connections; i++) {
        Conn *conn = &pool->conns[i];
        if (conn->state != CONN_READY || conn->tx || conn->draining) continue;
        if (conn->in_flight.count == 0 && !conn->unsynced) return conn;
        if (conn->reserved) return NULL; /* one is draining already */
        if (!drain || conn->in_flight.count < drain->in_flight.count) drain = conn;
    }
    if (drain) drain->reserved = true;
    return NULL;
}

/* Moves queued queries onto connections with room, in order. */
static void dispatch(xPgPool *pool) {
    if (!pool->begins_queued) /* the BEGIN a connection was set aside for left */
        for (int i = 0; i < pool->conf.connections; i++) pool->conns[i].reserved = false;
    for (xPgQuery *q = pool->queue.head, *next; q; q = next) {
        next = q->next;
        Conn *conn;
        if (q->kind == KIND_BEGIN) {
            conn = idle_for_begin(pool);
            if (!conn) continue;
            conn->reserved = false;
            conn->tx = q->tx;
            q->tx->conn = conn;
        } else {
            conn = least_busy(pool);
            if (!conn) return;
        }
        queue_unlink(pool, q);
        conn_send(conn, q);
        if (conn->state != CONN_READY) next = pool->queue.head; /* lost: the queue changed */
    }
}

/* ---- Receiving ---- */

static xPgStatus tx_finish(xPgTx *tx, QueryKind kind, xPgResultFn fn, void *arg);

static bool failed(const PGresult *res) {
    ExecStatusType type = PQresultStatus(res);
    return type != PGRES_TUPLES_OK && type != PGRES_COMMAND_OK;
}

/* The batch at the head of conn's in-flight list is complete: hand its
 * results out, or, where one query failed, send the others again. */
static void complete_batch(Conn *conn) {
    xPgPool *pool = conn->pool;
    QueryList batch = {0}, again = {0};
    uint64_t id = conn->in_flight.head ? conn->in_flight.head->batch : 0;
    bool batch_failed = false;
    while (conn->in_flight.head && conn->in_flight.head->batch == id) {
        xPgQuery *q = conn->in_flight.head;
        list_unlink(&conn->in_flight, q);
        if (conn->reading == q) conn->reading = conn->in_flight.head;
        q->place = PLACE_HANDED_OUT;
        list_append(&batch, q);
        if (q->prepare_error || !q->result || failed(q->result)) batch_failed = true;
    }
    /* Those that did nothing lasting go first, ahead of the queue, before any
     * callback can queue more. */
    for (xPgQuery *q = batch.head, *next; q; q = next) {
        next = q->next;
        bool own_failure = q->prepare_error || (q->result && PQresultStatus(q->result) == PGRES_FATAL_ERROR);
        if (!batch_failed || !q->resendable || q->dropped || own_failure) continue;
        list_unlink(&batch, q);
        PQclear(q->result);
        q->result = NULL;
        q->place = PLACE_QUEUED;
        list_append(&again, q);
        pool->stats.resent++;
    }
    list_prepend_all(&pool->queue, &again);
    while (batch.head) {
        xPgQuery *q = batch.head;
        list_unlink(&batch, q);
        bool began = false, owner_gone = q->dropped;
        if (q->prepare_error) {
            deliver_result(q, q->prepare_error);
        } else if (!q->result) {
            deliver_failure(q, XPG_ESERVER, "not run: an earlier query on its connection failed");
        } else if (PQresultStatus(q->result) == PGRES_PIPELINE_ABORTED) {
            deliver_failure(q, XPG_ESERVER, "not run: an earlier query of its transaction failed");
        } else {
            pool->stats.queries++;
            began = q->kind == KIND_BEGIN && !failed(q->result);
            deliver_result(q, q->result);
        }
        if (began) {
            q->tx->state = TX_OPEN;
            /* Its owner left before BEGIN came back: end what nobody will. */
            if (owner_gone) tx_finish(q->tx, KIND_ROLLBACK, NULL, NULL);
        }
        query_finish(q, began);
    }
    if (conn->draining && conn->in_flight.count == 0) conn->draining = false;
    dispatch(pool);
}

/* Reads every result libpq has whole, matching each to its query. */
static void read_results(Conn *conn) {
    while (conn->state == CONN_READY && conn->in_flight.head && !PQisBusy(conn->pg)) {
        PGresult *res = PQgetResult(conn->pg);
        xPgQuery *q = conn->reading;
        if (!res) {
            if (q && q->phase == PHASE_PREPARE_END) {
                q->phase = PHASE_EXECUTE;
            } else if (q && q->phase == PHASE_EXECUTE_END) {
                q->phase = PHASE_ANSWERED;
                conn->reading = q->next;
            } else if (++conn->stray_nulls > 1) {
                return; /* libpq has nothing more for now */
            }
            continue;
        }
        conn->stray_nulls = 0;
        if (PQresultStatus(res) == PGRES_PIPELINE_SYNC) {
            PQclear(res);
            conn->syncs_out--;
            if (conn->unsynced) /* a batch held open for this one goes at this turn's end */
                xEventLoopAtTurnEnd(conn->pool->loop, &conn->pool->turn_end->call);
            complete_batch(conn);
            continue;
        }
        if (!q) {
            PQclear(res);
        } else if (q->phase == PHASE_PREPARE) {
            /* Refused: its query reports why. Skipped for another's failure:
             * both go again, prepare included. */
            if (failed(res)) conn->prepared &= ~((uint64_t)1 << q->stmt);
            if (PQresultStatus(res) == PGRES_FATAL_ERROR)
                q->prepare_error = res;
            else
                PQclear(res);
            q->phase = PHASE_PREPARE_END;
        } else if (q->phase == PHASE_EXECUTE) {
            q->result = res;
            q->phase = PHASE_EXECUTE_END;
        } else {
            PQclear(res);
        }
    }
}

static void on_socket(xEventLoop *loop, int fd, unsigned events, void *arg) {
    Conn *conn = arg;
    if (conn->state == CONN_CONNECTING) {
        switch (PQconnectPoll(conn->pg)) {
        case PGRES_POLLING_READING: watch(conn, XEV_READ); return;
        case PGRES_POLLING_WRITING: watch(conn, XEV_WRITE); return;
        case PGRES_POLLING_OK: conn_up(conn); return;
        default: conn_failed(conn, PQerrorMessage(conn->pg)); return;
        }
    }
    if (conn->state != CONN_READY) return;
    if (events & XEV_WRITE) {
        conn_flush(conn);
        if (conn->state != CONN_READY) return;
    }
    if (!(events & (XEV_READ | XEV_ERROR | XEV_EOF))) return;
    if (!PQconsumeInput(conn->pg)) {
        conn_lost(conn, PQerrorMessage(conn->pg));
        return;
    }
    read_results(conn);
}

/* ---- Queries ---- */

static void on_query_timeout(xEventLoop *loop, xTimer *timer, void *arg) {
    xPgQuery *q = arg;
    xPgPool *pool = q->pool;
    if (q->place == PLACE_QUEUED) {
        queue_unlink(pool, q);
        q->place = PLACE_HANDED_OUT;
        deliver_failure(q, XPG_ETIMEOUT, "query timed out waiting for a connection");
        query_finish(q, false);
        dispatch(pool);
        return;
    }
    if (q->place != PLACE_IN_FLIGHT) return;
    /* Its result is thrown away when it comes; until then nothing new joins
     * the queue behind it on that connection. */
    if (q->phase != PHASE_ANSWERED && q->conn) q->conn->draining = true;
    deliver_failure(q, XPG_ETIMEOUT, "query timed out");
}

/* A query in one block: the struct, the value pointers, then the values. */
static xPgStatus query_make(xPgPool *pool, QueryKind kind, int stmt, const xPgParam *params, int nparams,
                            uint32_t timeout_ms, xPgQuery **out) {
    size_t bytes = sizeof(xPgQuery) + (size_t)nparams * sizeof(char *);
    for (int i = 0; i < nparams; i++) {
        if (params[i].kind == XPG_TEXT) {
            if (params[i].length && (!params[i].text || memchr(params[i].text, 0, params[i].length)))
                return XPG_EPARAM;
            bytes += params[i].length + 1;
        } else if (params[i].kind != XPG_NULL) {
            bytes += 32;
        }
    }
    xPgQuery *q = calloc(1, bytes);
    if (!q) return XPG_ENOMEM;
    *q = (xPgQuery){.pool = pool, .kind = kind, .stmt = stmt, .nparams = nparams, .place = PLACE_QUEUED};
    q->values = (const char **)(q + 1);
    char *at = (char *)(q->values + nparams);
    for (int i = 0; i < nparams; i++) {
        const xPgParam *p = &params[i];
        q->values[i] = p->kind == XPG_NULL ? NULL : at;
        switch (p->kind) {
        case XPG_NULL: break;
        case XPG_TEXT:
            if (p->length) memcpy(at, p->text, p->length);
            at[p->length] = 0;
            at += p->length + 1;
            break;
        case XPG_INT: at += xPgFormatInt64(p->integer, at) + 1; break;
        case XPG_FLOAT: at += xPgFormatDouble(p->number, at) + 1; break;
        case XPG_BOOL: at += snprintf(at, 32, "%s", p->integer ? "true" : "false") + 1; break;
        }
    }
    q->timeout_ms = timeout_ms ? timeout_ms : pool->conf.query_timeout_ms;
    xTimerInit(&q->timer, on_query_timeout, q);
    if (q->timeout_ms) xTimerStart(pool->loop, &q->timer, q->timeout_ms);
    *out = q;
    return XPG_OK;
}

static bool statement_fits(const xPgPool *pool, int stmt, const xPgParam *params, int nparams) {
    return stmt >= 0 && stmt < pool->nstatements && nparams == pool->statements[stmt].nparams &&
           (nparams == 0 || params);
}

xPgStatus xPgQuerySend(xPgPool *pool, int stmt, const xPgParam *params, int nparams, uint32_t timeout_ms,
                       xPgResultFn fn, void *arg, xPgQuery **handle) {
    if (!pool || !statement_fits(pool, stmt, params, nparams)) return XPG_EPARAM;
    if (pool->down) return XPG_EDOWN;
    if (pool->queue.count >= pool->conf.queue_limit && !least_busy(pool)) return XPG_EBUSY;
    xPgQuery *q;
    xPgStatus status = query_make(pool, KIND_STATEMENT, stmt, params, nparams, timeout_ms, &q);
    if (status != XPG_OK) return status;
    q->fn = fn;
    q->arg = arg;
    if (handle) *handle = q;
    queue_append(pool, q);
    dispatch(pool);
    return XPG_OK;
}

void xPgQueryCancel(xPgQuery *q) {
    if (!q || q->dropped) return;
    q->dropped = true;
    xTimerStop(q->pool->loop, &q->timer);
    if (q->place != PLACE_QUEUED) return; /* in flight: its result is thrown away */
    queue_unlink(q->pool, q);
    query_finish(q, false);
}

/* ---- Transactions ---- */

xPgStatus xPgTxBegin(xPgPool *pool, xPgTxFn fn, void *arg, xPgQuery **handle) {
    if (!pool || !fn) return XPG_EPARAM;
    if (pool->down) return XPG_EDOWN;
    if (pool->queue.count >= pool->conf.queue_limit) return XPG_EBUSY;
    xPgTx *tx = calloc(1, sizeof *tx);
    if (!tx) return XPG_ENOMEM;
    *tx = (xPgTx){.pool = pool, .state = TX_WAITING};
    xPgQuery *q;
    xPgStatus status = query_make(pool, KIND_BEGIN, -1, NULL, 0, 0, &q);
    if (status != XPG_OK) {
        free(tx);
        return status;
    }
    q->tx_fn = fn;
    q->arg = arg;
    q->tx = tx;
    if (handle) *handle = q;
    queue_append(pool, q);
    dispatch(pool);
    return XPG_OK;
}

xPgStatus xPgTxQuery(xPgTx *tx, int stmt, const xPgParam *params, int nparams, uint32_t timeout_ms,
                     xPgResultFn fn, void *arg, xPgQuery **handle) {
    if (!tx || !statement_fits(tx->pool, stmt, params, nparams)) return XPG_EPARAM;
    if (tx->state == TX_BROKEN) return XPG_EDOWN;
    if (tx->state != TX_OPEN || !tx->conn) return XPG_ECLOSED;
    xPgQuery *q;
    xPgStatus status = query_make(tx->pool, KIND_STATEMENT, stmt, params, nparams, timeout_ms, &q);
    if (status != XPG_OK) return status;
    q->fn = fn;
    q->arg = arg;
    q->tx = tx;
    if (handle) *handle = q;
    conn_send(tx->conn, q);
    return XPG_OK;
}

static xPgStatus tx_finish(xPgTx *tx, QueryKind kind, xPgResultFn fn, void *arg) {
    if (!tx) return XPG_EPARAM;
    if (tx->state != TX_OPEN || !tx->conn) {
        xPgStatus status = tx->state == TX_BROKEN ? XPG_EDOWN : XPG_ECLOSED;
        if (tx->state != TX_ENDING) tx_end(tx);
        return status;
    }
    xPgQuery *q;
    xPgStatus status = query_make(tx->pool, kind, -1, NULL, 0, 0, &q);
    if (status != XPG_OK) {
        /* The connection cannot be trusted with a transaction left open. */
        Conn *conn = tx->conn;
        tx_end(tx);
        conn_lost(conn, "out of memory ending a transaction");
        return status;
    }
    q->fn = fn;
    q->arg = arg;
    q->tx = tx;
    tx->state = TX_ENDING;
    conn_send(tx->conn, q);
    return XPG_OK;
}

xPgStatus xPgTxCommit(xPgTx *tx, xPgResultFn fn, void *arg) { return tx_finish(tx, KIND_COMMIT, fn, arg); }

xPgStatus xPgTxRollback(xPgTx *tx, xPgResultFn fn, void *arg) {
    return tx_finish(tx, KIND_ROLLBACK, fn, arg);
}

/* ---- The pool ---- */

int xPgPoolPrepare(xPgPool *pool, const char *name, const char *sql, int nparams, const uint32_t *types) {
    if (!pool || !name || !*name || !sql || nparams < 0 || pool->nstatements == XPG_MAX_STATEMENTS) return -1;
    for (int i = 0; i < pool->nstatements; i++)
        if (strcmp(pool->statements[i].name, name) == 0) return -1;
    Statement *s = &pool->statements[pool->nstatements];
    *s = (Statement){.name = strdup(name), .sql = strdup(sql), .nparams = nparams};
    if (types && nparams) {
        s->types = malloc((size_t)nparams * sizeof(Oid));
        if (s->types)
            for (int i = 0; i < nparams; i++) s->types[i] = types[i];
    }
    if (!s->name || !s->sql || (types && nparams && !s->types)) {
        free(s->name);
        free(s->sql);
        free(s->types);
        return -1;
    }
    return pool->nstatements++;
}

static const xPgConf defaults = {
    .struct_size = sizeof(xPgConf),
    .connections = 4,
    .pipeline_depth = 64,
    .queue_limit = 1024,
    .query_timeout_ms = 5000,
    .connect_timeout_ms = 5000,
    .backoff_min_ms = 50,
    .backoff_max_ms = 5000,
};

void xPgConfInitSized(xPgConf *conf, size_t size) {
    xPgConf full = defaults;
    xSizedInit(conf, size, &full, sizeof full);
}

xPgPool *xPgPoolCreate(xEventLoop *loop, const xPgConf *conf) {
    if (!loop || !conf || !conf->conninfo) return NULL;
    xPgPool *pool = calloc(1, sizeof *pool);
    if (!pool) return NULL;
    pool->loop = loop;
    pool->conf = defaults;
    xSizedAdopt(&pool->conf, conf, sizeof pool->conf);
    xPgConf *c = &pool->conf;
    /* Zeros (a struct filled by hand) take the defaults too. */
    if (c->connections <= 0) c->connections = defaults.connections;
    if (c->pipeline_depth <= 0) c->pipeline_depth = defaults.pipeline_depth;
    if (c->queue_limit <= 0) c->queue_limit = defaults.queue_limit;
    if (!c->query_timeout_ms) c->query_timeout_ms = defaults.query_timeout_ms;
    if (!c->connect_timeout_ms) c->connect_timeout_ms = defaults.connect_timeout_ms;
    if (!c->backoff_min_ms) c->backoff_min_ms = defaults.backoff_min_ms;
    if (!c->backoff_max_ms) c->backoff_max_ms = defaults.backoff_max_ms;
    if (c->backoff_max_ms < c->backoff_min_ms) c->backoff_max_ms = c->backoff_min_ms;
    if (c->statement_timeout_ms)
        snprintf(pool->options, sizeof pool->options, "-c statement_timeout=%u", c->statement_timeout_ms);
    pool->conninfo = strdup(conf->conninfo);
    pool->conns = calloc((size_t)c->connections, sizeof *pool->conns);
    pool->turn_end = calloc(1, sizeof *pool->turn_end);
    if (!pool->conninfo || !pool->conns || !pool->turn_end) {
        free(pool->conninfo);
        free(pool->conns);
        free(pool->turn_end);
        free(pool);
        return NULL;
    }
    c->conninfo = pool->conninfo;
    *pool->turn_end = (TurnEnd){.call = {.fn = on_turn_end}, .pool = pool};
    set_message(pool, "not connected yet");
    for (int i = 0; i < c->connections; i++) {
        Conn *conn = &pool->conns[i];
        *conn = (Conn){.pool = pool, .fd = -1, .state = CONN_WAITING};
        xTimerInit(&conn->timer, on_conn_timer, conn);
    }
    for (int i = 0; i < c->connections; i++) conn_connect(&pool->conns[i]);
    return pool;
}

/* Hands ECLOSED to every query of list (the pool's callbacks must not call
 * into it then); free_tx: a waiting BEGIN's transaction, pinned nowhere. */
static void close_all(QueryList *list, bool free_tx) {
    for (xPgQuery *q = list->head; q; q = q->next) q->place = PLACE_HANDED_OUT;
    while (list->head) {
        xPgQuery *q = list->head;
        list_unlink(list, q);
        deliver_failure(q, XPG_ECLOSED, "the pool was freed");
        if (free_tx && q->kind == KIND_BEGIN) free(q->tx);
        query_free(q);
    }
}

void xPgPoolFree(xPgPool *pool) {
    if (!pool) return;
    QueryList waiting = queue_take(pool);
    close_all(&waiting, true);
    for (int i = 0; i < pool->conf.connections; i++) {
        Conn *conn = &pool->conns[i];
        QueryList sent = conn->in_flight;
        conn->in_flight = (QueryList){0};
        close_all(&sent, false);
        if (conn->tx) tx_end(conn->tx);
        conn_close(conn);
    }
    if (pool->turn_end->call.queued)
        pool->turn_end->pool = NULL; /* the loop frees it */
    else
        free(pool->turn_end);
    for (int i = 0; i < pool->nstatements; i++) {
        free(pool->statements[i].name);
        free(pool->statements[i].sql);
        free(pool->statements[i].types);
    }
    free(pool->conns);
    free(pool->conninfo);
    free(pool);
}

void xPgPoolStats(const xPgPool *pool, xPgStats *stats) {
    *stats = pool->stats;
    stats->connections_ready = pool->ready;
    stats->queued = pool->queue.count;
    stats->down = pool->down;
    stats->in_flight = 0;
    for (int i = 0; i < pool->conf.connections; i++) stats->in_flight += pool->conns[i].in_flight.count;
}

/* ---- Results ---- */

xPgStatus xPgResultStatus(const xPgResult *r) { return r->status; }
const char *xPgResultSqlState(const xPgResult *r) { return r->sqlstate ? r->sqlstate : ""; }
const char *xPgResultMessage(const xPgResult *r) { return r->message ? r->message : ""; }

static const PGresult *rows_of(const xPgResult *r) { return r->status == XPG_OK ? r->res : NULL; }

int xPgRows(const xPgResult *r) { return rows_of(r) ? PQntuples(r->res) : 0; }
int xPgColumns(const xPgResult *r) { return rows_of(r) ? PQnfields(r->res) : 0; }

int64_t xPgAffected(const xPgResult *r) {
    int64_t n;
    const char *text = rows_of(r) ? PQcmdTuples((PGresult *)r->res) : "";
    return xPgParseInt64(text, strlen(text), &n) ? n : 0;
}

/* PQgetisnull checks row and col itself: outside the result it answers 1. */
bool xPgIsNull(const xPgResult *r, int row, int col) { return !rows_of(r) || PQgetisnull(r->res, row, col); }

const char *xPgGetText(const xPgResult *r, int row, int col, size_t *length) {
    if (xPgIsNull(r, row, col)) {
        if (length) *length = 0;
        return "";
    }
    if (length) *length = (size_t)PQgetlength(r->res, row, col);
    return PQgetvalue(r->res, row, col);
}

bool xPgGetInt64(const xPgResult *r, int row, int col, int64_t *out) {
    *out = 0;
    if (xPgIsNull(r, row, col)) return false;
    return xPgParseInt64(PQgetvalue(r->res, row, col), (size_t)PQgetlength(r->res, row, col), out);
}

bool xPgGetDouble(const xPgResult *r, int row, int col, double *out) {
    *out = 0;
    if (xPgIsNull(r, row, col)) return false;
    return xPgParseDouble(PQgetvalue(r->res, row, col), (size_t)PQgetlength(r->res, row, col), out);
}

bool xPgGetBool(const xPgResult *r, int row, int col, bool *out) {
    *out = false;
    if (xPgIsNull(r, row, col)) return false;
    return xPgParseBool(PQgetvalue(r->res, row, col), (size_t)PQgetlength(r->res, row, col), out);
}
