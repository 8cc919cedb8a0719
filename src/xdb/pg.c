/* pg.c — a pool of pipelined PostgreSQL connections on one xEventLoop (see
 * <xdb/pg.h> for the behaviour a user sees).
 *
 * libpq opens each connection (conninfo, authentication, TLS); once it is up
 * the pool speaks the extended query protocol on the socket itself: a query
 * is Bind and Execute of its prepared statement (Parse and Describe ahead of
 * it where the statement is new on that connection), appended to the
 * connection's output; the replies are parsed from one read into rows kept
 * in two buffers per connection. libpq's way made a PGresult per query (and
 * its row description, column names and tuple blocks) in a dozen
 * allocations, and read its replies through PQconsumeInput, PQisBusy and
 * PQgetResult: most of the pool's cost per query.
 *
 * A query lives in one of three places: the pool's queue (waiting for a
 * connection), a connection's in-flight list (sent; its replies come back in
 * the order sent), or a batch being handed out. Queries sent to a connection
 * during a loop turn form a batch, closed at the turn's end by one Sync and
 * one write. The server answers each query's messages in order and, at the
 * batch's end, ReadyForQuery; the results are held until then because a
 * failure anywhere in the batch rolls back the whole implicit transaction
 * and the server skips the batch's later messages (those queries are sent
 * again).
 *
 * The socket's watch follows libpq while connecting (what PQconnectPoll asks
 * for); once up, input always and output while a write is left over. */
#include <xdb/pg.h>

#include <xbase/buffer.h>

#include <errno.h>
#include <libpq-fe.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "xbase/mem/sized.h"
#include "xdb/pg_text.h"

/* The most room made in the input buffer ahead of a long message's bytes
 * (each read then makes room again as they come). */
#define MESSAGE_AHEAD ((size_t)65536)

typedef enum ConnState {
    CONN_WAITING,    /* closed; its timer reconnects it (or it is being freed) */
    CONN_CONNECTING, /* PQconnectPoll in progress; its timer bounds the attempt */
    CONN_READY,      /* in pipeline mode, taking queries */
} ConnState;

typedef enum QueryKind { KIND_STATEMENT, KIND_BEGIN, KIND_COMMIT, KIND_ROLLBACK } QueryKind;

typedef enum QueryPlace { PLACE_QUEUED, PLACE_IN_FLIGHT, PLACE_HANDED_OUT } QueryPlace;

/* What the server owes an in-flight query next. A query the server skipped
 * (after another's error in its batch) stays where it was until ReadyForQuery. */
typedef enum QueryPhase {
    PHASE_PARSE,         /* ParseComplete: its statement's prepare (or BEGIN's) */
    PHASE_DESCRIBE,      /* ParameterDescription, from the prepare's Describe */
    PHASE_DESCRIBE_ROWS, /* RowDescription or NoData: the statement's columns */
    PHASE_BIND,          /* BindComplete */
    PHASE_ROWS,          /* DataRows, then CommandComplete */
    PHASE_ANSWERED,      /* nothing: its batch's ReadyForQuery is awaited */
} QueryPhase;

/* What came back for an in-flight query. */
typedef enum QueryOutcome {
    OUTCOME_NONE,          /* nothing (yet): skipped, if its batch has ended */
    OUTCOME_ROWS,          /* its rows (or none) and CommandComplete */
    OUTCOME_ERROR,         /* the server's error running it */
    OUTCOME_PREPARE_ERROR, /* the server's error preparing its statement */
} QueryOutcome;

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
    Oid *types;  /* nparams entries, or NULL */
    int columns; /* what its rows hold, from a prepare's RowDescription (for a result without rows) */
} Statement;

/* A value of a row: at bytes into its connection's row text (NUL-terminated
 * there), length bytes, or -1 for NULL. */
typedef struct Field {
    uint32_t at;
    int32_t length;
} Field;

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
    int32_t *lengths;    /* of values, likewise */
    xPgResultFn fn;
    xPgTxFn tx_fn; /* KIND_BEGIN */
    void *arg;
    xPgTx *tx; /* the transaction it begins, runs in or ends; NULL outside one */
    Conn *conn;
    uint64_t batch;
    QueryOutcome outcome;
    uint32_t first_field; /* its rows' values in its connection's fields, from here */
    int rows, columns;
    int64_t affected;  /* from CommandComplete's tag */
    uint32_t error_at; /* OUTCOME_*ERROR: SQLSTATE then message, NUL-terminated, in the row text */
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
    PGconn *pg;      /* connects; then owns the socket (and its TLS) only */
    SSL *ssl;        /* libpq's TLS session, once up over TLS; else NULL */
    int fd;          /* watched, or -1 */
    unsigned events; /* what fd is watched for */
    ConnState state;
    QueryList in_flight;
    xPgQuery *reading; /* the in-flight query whose replies come next */
    xBuffer out;       /* messages not yet written; out_sent of them went */
    size_t out_sent;
    xBuffer in; /* bytes read; those from in_at on are not parsed yet */
    size_t in_at;
    xBuffer text;      /* the held batch's values (each NUL-terminated) and error texts */
    xBuffer fields;    /* its rows' Fields */
    bool fatal;        /* the server sent a FATAL error: it is closing */
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
    const char *text;    /* XPG_OK: where the Fields point into */
    const Field *fields; /* XPG_OK: rows × columns of them */
    int rows, columns;
    int64_t affected;
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

/* Hands out what the server answered q (OUTCOME_ROWS or an error), read
 * from conn's batch buffers. */
static void deliver_outcome(xPgQuery *q, const Conn *conn) {
    if (q->outcome == OUTCOME_ROWS) {
        deliver(q, &(xPgResult){.status = XPG_OK,
                                .text = conn->text.data,
                                /* No buffer yet where no batch has had a row. */
                                .fields = q->rows && q->columns
                                              ? (const Field *)conn->fields.data + q->first_field
                                              : NULL,
                                .rows = q->rows,
                                .columns = q->columns,
                                .affected = q->affected,
                                .sqlstate = "",
                                .message = ""});
        return;
    }
    const char *sqlstate = conn->text.data + q->error_at;
    deliver(q, &(xPgResult){
                   .status = XPG_ESERVER, .sqlstate = sqlstate, .message = sqlstate + strlen(sqlstate) + 1});
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
    conn->ssl = NULL;
    conn->state = CONN_WAITING;
    conn->reading = NULL;
    conn->syncs_out = 0;
    conn->unsynced = conn->draining = conn->reserved = conn->fatal = false;
    /* Emptied, not freed: a batch being handed out may still read its values. */
    conn->out.len = conn->out_sent = conn->in.len = conn->in_at = 0;
    xTimerStop(conn->pool->loop, &conn->timer);
}

static void set_message(xPgPool *pool, const char *why) {
    if (why == pool->message) return;
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
    /* GSSAPI encryption off unless conninfo (expanded after it) asks for it:
     * the pool cannot read or write through it. */
    const char *keys[4] = {"gssencmode", "dbname"}, *values[4] = {"disable", pool->conninfo};
    if (pool->options[0]) keys[2] = "options", values[2] = pool->options;
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
    /* From here the pool reads and writes the socket: in the clear, or
     * through the TLS session libpq set up (its own I/O on the socket). */
    if (PQgssEncInUse(conn->pg)) {
        conn_failed(conn, "GSSAPI-encrypted connections are not supported (gssencmode=disable)");
        return;
    }
    conn->ssl = PQsslInUse(conn->pg) ? PQgetssl(conn->pg) : NULL;
    if (PQsslInUse(conn->pg) && !conn->ssl) {
        conn_failed(conn, "the connection's TLS is not OpenSSL's");
        return;
    }
    /* The output buffer may move between a write that could not finish and its retry. */
    if (conn->ssl)
        SSL_set_mode(conn->ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    conn->out.len = conn->out_sent = conn->in.len = conn->in_at = conn->text.len = conn->fields.len = 0;
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

/* ---- The socket, in the clear or through libpq's TLS session ---- */

/* Like send(2): bytes taken, or -1 with errno (EAGAIN: the socket is full). */
static ssize_t conn_write(Conn *conn, const char *bytes, size_t n) {
    if (!conn->ssl) return send(conn->fd, bytes, n, MSG_NOSIGNAL);
    ERR_clear_error();
    int w = SSL_write(conn->ssl, bytes, n > INT32_MAX ? INT32_MAX : (int)n);
    if (w > 0) return w;
    int why = SSL_get_error(conn->ssl, w);
    errno = why == SSL_ERROR_WANT_WRITE || why == SSL_ERROR_WANT_READ ? EAGAIN : EPIPE;
    return -1;
}

/* Like recv(2): bytes read, 0 at the end, or -1 with errno (EAGAIN: nothing more now). */
static ssize_t conn_read(Conn *conn, char *bytes, size_t n) {
    if (!conn->ssl) return recv(conn->fd, bytes, n, 0);
    ERR_clear_error();
    int r = SSL_read(conn->ssl, bytes, n > INT32_MAX ? INT32_MAX : (int)n);
    if (r > 0) return r;
    int why = SSL_get_error(conn->ssl, r);
    if (why == SSL_ERROR_ZERO_RETURN) return 0;
    errno = why == SSL_ERROR_WANT_READ || why == SSL_ERROR_WANT_WRITE ? EAGAIN : ECONNRESET;
    return -1;
}

/* Writes what is queued; the watch asks for output while some is left. */
static void conn_flush(Conn *conn) {
    while (conn->out_sent < conn->out.len) {
        ssize_t w = conn_write(conn, conn->out.data + conn->out_sent, conn->out.len - conn->out_sent);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) break;
            char why[160];
            snprintf(why, sizeof why, "could not send data to server: %s", strerror(errno));
            conn_lost(conn, why);
            return;
        }
        conn->out_sent += (size_t)w;
    }
    bool more = conn->out_sent < conn->out.len;
    if (!more) conn->out.len = conn->out_sent = 0;
    watch(conn, XEV_READ | (more ? XEV_WRITE : 0));
}

/* ---- Sending ---- */

/* Messages are written straight into conn->out: put_* after one reserve
 * that holds the whole message. */
static char *put_u32(char *at, uint32_t v) {
    at[0] = (char)(v >> 24), at[1] = (char)(v >> 16), at[2] = (char)(v >> 8), at[3] = (char)v;
    return at + 4;
}

static char *put_u16(char *at, unsigned v) {
    at[0] = (char)(v >> 8), at[1] = (char)v;
    return at + 2;
}

static char *put_text(char *at, const char *text, size_t n) {
    memcpy(at, text, n);
    return at + n;
}

/* A message's type and length (counting itself, not the type) ahead of body_len bytes. */
static char *put_head(char *at, char type, size_t body_len) {
    *at++ = type;
    return put_u32(at, (uint32_t)(body_len + 4));
}

/* Parse (of name, unnamed when ""), Bind of it with q's parameters as text,
 * Execute; with describe, a Describe of the statement after its Parse. */
static bool put_query(Conn *conn, const xPgQuery *q, const Statement *s, const char *sql, bool parse,
                      bool describe) {
    const char *name = s ? s->name : "";
    size_t name_len = strlen(name) + 1, bytes = 0;
    size_t parse_body = 0, bind_body = name_len + 1 + 2 + 2 + 2 + (size_t)q->nparams * 4;
    for (int i = 0; i < q->nparams; i++)
        if (q->lengths[i] > 0) bind_body += (size_t)q->lengths[i];
    if (parse) {
        int ntypes = s && s->types ? s->nparams : 0;
        parse_body = name_len + strlen(sql) + 1 + 2 + (size_t)ntypes * 4;
        bytes += 5 + parse_body + (describe ? 5 + 1 + name_len : 0);
    }
    bytes += 5 + bind_body + 5 + 1 + 4;
    if (bytes > INT32_MAX || xBufferReserve(&conn->out, bytes) != XOK) return false;
    char *at = conn->out.data + conn->out.len;
    if (parse) {
        int ntypes = s && s->types ? s->nparams : 0;
        at = put_head(at, 'P', parse_body);
        at = put_text(at, name, name_len);
        at = put_text(at, sql, strlen(sql) + 1);
        at = put_u16(at, (unsigned)ntypes);
        for (int i = 0; i < ntypes; i++) at = put_u32(at, s->types[i]);
        if (describe) {
            at = put_head(at, 'D', 1 + name_len);
            *at++ = 'S';
            at = put_text(at, name, name_len);
        }
    }
    at = put_head(at, 'B', bind_body);
    *at++ = 0; /* the unnamed portal */
    at = put_text(at, name, name_len);
    at = put_u16(at, 0); /* every parameter in text */
    at = put_u16(at, (unsigned)q->nparams);
    for (int i = 0; i < q->nparams; i++) {
        at = put_u32(at, (uint32_t)q->lengths[i]); /* -1: NULL */
        if (q->lengths[i] > 0) at = put_text(at, q->values[i], (size_t)q->lengths[i]);
    }
    at = put_u16(at, 0); /* every column in text */
    at = put_head(at, 'E', 1 + 4);
    *at++ = 0;
    at = put_u32(at, 0); /* all rows */
    conn->out.len = (size_t)(at - conn->out.data);
    return true;
}

static void on_turn_end(xEventLoop *loop, xTurnEnd *call) {
    TurnEnd *turn_end = (TurnEnd *)call;
    xPgPool *pool = turn_end->pool;
    if (!pool) { /* freed while this call was queued */
        free(turn_end);
        return;
    }
    for (int i = 0; i < pool->conf.connections; i++) {
        Conn *conn = &pool->conns[i];
        if (conn->state != CONN_READY || !conn->unsynced || conn->syncs_out >= pool->conf.batches_ahead)
            continue;
        conn->unsynced = false;
        conn->syncs_out++;
        conn->batch++;
        pool->stats.batches++;
        if (xBufferReserve(&conn->out, 5) != XOK) {
            conn_lost(conn, "out of memory");
            continue;
        }
        put_head(conn->out.data + conn->out.len, 'S', 0);
        conn->out.len += 5;
        conn_flush(conn);
    }
}

static bool send_query(Conn *conn, xPgQuery *q) {
    xPgPool *pool = conn->pool;
    q->prepares = false;
    if (q->kind != KIND_STATEMENT) {
        static const char *const sql[] = {
            [KIND_BEGIN] = "BEGIN", [KIND_COMMIT] = "COMMIT", [KIND_ROLLBACK] = "ROLLBACK"};
        q->prepares = true; /* its Parse, of the unnamed statement */
        return put_query(conn, q, NULL, sql[q->kind], true, false);
    }
    Statement *s = &pool->statements[q->stmt];
    uint64_t bit = (uint64_t)1 << q->stmt;
    bool parse = !(conn->prepared & bit);
    if (!put_query(conn, q, s, s->sql, parse, parse)) return false;
    if (parse) {
        conn->prepared |= bit;
        q->prepares = true;
    }
    return true;
}

/* Sends q on conn, in this turn's batch. */
static void conn_send(Conn *conn, xPgQuery *q) {
    xPgPool *pool = conn->pool;
    q->place = PLACE_IN_FLIGHT;
    q->conn = conn;
    q->batch = conn->batch;
    q->resendable = q->kind == KIND_STATEMENT && !q->tx;
    q->outcome = OUTCOME_NONE;
    list_append(&conn->in_flight, q);
    if (!send_query(conn, q)) {
        conn_lost(conn, "out of memory");
        return;
    }
    q->phase = q->prepares ? PHASE_PARSE : PHASE_BIND;
    if (!conn->reading) conn->reading = q;
    if (conn->in_flight.count > pool->stats.peak_in_flight)
        pool->stats.peak_in_flight = conn->in_flight.count;
    conn->unsynced = true;
    xEventLoopAtTurnEnd(pool->loop, &pool->turn_end->call);
}

static bool takes_statements(const Conn *conn) {
    return conn->state == CONN_READY && !conn->tx && !conn->reserved && !conn->draining;
}

/* The connection for a statement, below the depth: the first with room
 * (XPG_DISPATCH_FILL) or the one with the fewest queries in flight. */
static Conn *conn_for_statement(xPgPool *pool) {
    bool fill = pool->conf.dispatch == XPG_DISPATCH_FILL;
    Conn *best = NULL;
    for (int i = 0; i < pool->conf.connections; i++) {
        Conn *conn = &pool->conns[i];
        if (!takes_statements(conn) || conn->in_flight.count >= pool->conf.pipeline_depth) continue;
        if (fill) return conn;
        if (!best || conn->in_flight.count < best->in_flight.count) best = conn;
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
            conn = conn_for_statement(pool);
            if (!conn) return;
        }
        queue_unlink(pool, q);
        conn_send(conn, q);
        if (conn->state != CONN_READY) next = pool->queue.head; /* lost: the queue changed */
    }
}

/* ---- Receiving ---- */

static xPgStatus tx_finish(xPgTx *tx, QueryKind kind, xPgResultFn fn, void *arg);

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
        if (q->outcome != OUTCOME_ROWS) batch_failed = true;
        /* Skipped before its Parse ran: its statement is not there. */
        if (q->outcome == OUTCOME_NONE && q->phase == PHASE_PARSE && q->kind == KIND_STATEMENT)
            conn->prepared &= ~((uint64_t)1 << q->stmt);
    }
    /* Those that did nothing lasting go first, ahead of the queue, before any
     * callback can queue more. */
    for (xPgQuery *q = batch.head, *next; q; q = next) {
        next = q->next;
        bool own_failure = q->outcome == OUTCOME_ERROR || q->outcome == OUTCOME_PREPARE_ERROR;
        if (!batch_failed || !q->resendable || q->dropped || own_failure) continue;
        list_unlink(&batch, q);
        q->place = PLACE_QUEUED;
        list_append(&again, q);
        pool->stats.resent++;
    }
    list_prepend_all(&pool->queue, &again);
    while (batch.head) {
        xPgQuery *q = batch.head;
        list_unlink(&batch, q);
        bool began = false, owner_gone = q->dropped;
        if (q->outcome == OUTCOME_NONE) {
            deliver_failure(q, XPG_ESERVER, "not run: an earlier query of its transaction failed");
        } else {
            if (q->outcome != OUTCOME_PREPARE_ERROR) pool->stats.queries++;
            began = q->kind == KIND_BEGIN && q->outcome == OUTCOME_ROWS;
            /* Open before its callback, which may use it (and end it: then
             * the transaction is the COMMIT's or ROLLBACK's to free). */
            if (began) q->tx->state = TX_OPEN;
            deliver_outcome(q, conn);
        }
        /* Its owner left before BEGIN came back: end what nobody will. */
        if (began && owner_gone) tx_finish(q->tx, KIND_ROLLBACK, NULL, NULL);
        query_finish(q, began);
    }
    /* Every batch before this one was handed out before it: what the buffers
     * hold was this batch's alone. */
    conn->text.len = conn->fields.len = 0;
    if (conn->draining && conn->in_flight.count == 0) conn->draining = false;
    dispatch(pool);
}

static uint32_t get_u32(const char *at) {
    const unsigned char *u = (const unsigned char *)at;
    return (uint32_t)u[0] << 24 | (uint32_t)u[1] << 16 | (uint32_t)u[2] << 8 | u[3];
}

static unsigned get_u16(const char *at) {
    const unsigned char *u = (const unsigned char *)at;
    return (unsigned)u[0] << 8 | u[1];
}

/* The fields of an ErrorResponse or NoticeResponse body: severity, SQLSTATE
 * and primary message ("" where missing). */
typedef struct ServerNotice {
    const char *severity, *sqlstate, *message;
} ServerNotice;

static ServerNotice parse_notice(const char *body, size_t len) {
    ServerNotice n = {"", "", ""};
    const char *end = body + len;
    while (body < end && *body) {
        char code = *body++;
        const char *value = body;
        const char *nul = memchr(body, 0, (size_t)(end - body));
        if (!nul) break;
        body = nul + 1;
        if (code == 'S' && !*n.severity) n.severity = value; /* localized; 'V' is not: prefer it */
        if (code == 'V') n.severity = value;
        if (code == 'C') n.sqlstate = value;
        if (code == 'M') n.message = value;
    }
    return n;
}

/* Five digits or upper-case letters, as every SQLSTATE is. */
static bool is_sqlstate(const char *s) {
    for (int i = 0; i < 5; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'A' && s[i] <= 'Z'))) return false;
    return s[5] == 0;
}

/* Appends a row (a DataRow's body) to the batch's buffers for q; false when
 * the row is malformed or memory runs out. */
static bool take_row(Conn *conn, xPgQuery *q, const char *body, size_t len) {
    if (len < 2) return false;
    unsigned columns = get_u16(body);
    /* As many values as the statement's RowDescription said (libpq's rule
     * too), each with at least its length: checked before any room is made. */
    if ((int)columns != q->columns || (size_t)columns * 4 > len - 2) return false;
    /* Every value's bytes and its NUL fit in the body's size plus one per column. */
    if (xBufferReserve(&conn->text, len + columns) != XOK ||
        xBufferReserve(&conn->fields, columns * sizeof(Field)) != XOK)
        return false;
    Field *field = columns ? (Field *)(conn->fields.data + conn->fields.len) : NULL;
    char *text = conn->text.data;
    size_t at = 2, text_len = conn->text.len;
    for (unsigned i = 0; i < columns; i++) {
        if (len - at < 4) return false;
        int32_t n = (int32_t)get_u32(body + at);
        at += 4;
        field[i] = (Field){.at = (uint32_t)text_len, .length = n};
        if (n < 0) continue;
        if ((size_t)n > len - at) return false;
        memcpy(text + text_len, body + at, (size_t)n);
        text_len += (size_t)n;
        text[text_len++] = 0;
        at += (size_t)n;
    }
    if (text_len > UINT32_MAX) return false;
    conn->text.len = text_len;
    conn->fields.len += columns * sizeof(Field);
    q->rows++;
    return true;
}

/* Rows a command's tag says it touched, as libpq's PQcmdTuples reads them
 * ("INSERT 0 5", "UPDATE 3", "SELECT 10"; 0 for other commands). */
static int64_t tag_rows(const char *tag, size_t len) {
    static const struct {
        const char *word;
        size_t len;
    } counted[] = {{"SELECT", 6}, {"INSERT", 6}, {"UPDATE", 6}, {"DELETE", 6},
                   {"MOVE", 4},   {"FETCH", 5},  {"COPY", 4},   {"MERGE", 5}};
    const char *space = memchr(tag, ' ', len);
    size_t word = space ? (size_t)(space - tag) : 0;
    bool counts = false;
    for (size_t i = 0; i < sizeof counted / sizeof *counted && !counts; i++)
        counts = counted[i].len == word && memcmp(tag, counted[i].word, word) == 0;
    size_t last = len;
    while (counts && tag[last - 1] != ' ') last--;
    int64_t n;
    return counts && xPgParseInt64(tag + last, len - last, &n) ? n : 0;
}

/* Keeps an error for q (SQLSTATE and message, in the batch's text). */
static bool keep_error(Conn *conn, xPgQuery *q, ServerNotice n) {
    size_t state_len = strlen(n.sqlstate) + 1, message_len = strlen(n.message) + 1;
    if (conn->text.len + state_len + message_len > UINT32_MAX ||
        xBufferReserve(&conn->text, state_len + message_len) != XOK)
        return false;
    q->error_at = (uint32_t)conn->text.len;
    memcpy(conn->text.data + conn->text.len, n.sqlstate, state_len);
    memcpy(conn->text.data + conn->text.len + state_len, n.message, message_len);
    conn->text.len += state_len + message_len;
    return true;
}

typedef enum MessageVerdict { MESSAGE_TAKEN, MESSAGE_BAD, MESSAGE_NO_MEMORY } MessageVerdict;

/* One message from the server: the next step of the query being read, the
 * end of a batch, or something about the session. */
static MessageVerdict take_message(Conn *conn, char type, const char *body, size_t len) {
    xPgQuery *q = conn->reading;
    switch (type) {
    case 'D': /* DataRow */
        if (!q || q->phase != PHASE_ROWS) return MESSAGE_BAD;
        return take_row(conn, q, body, len) ? MESSAGE_TAKEN : MESSAGE_BAD;
    case '2': /* BindComplete */
        if (!q || q->phase != PHASE_BIND) return MESSAGE_BAD;
        q->phase = PHASE_ROWS;
        q->first_field = (uint32_t)(conn->fields.len / sizeof(Field));
        q->rows = 0;
        q->columns = q->kind == KIND_STATEMENT ? conn->pool->statements[q->stmt].columns : 0;
        return MESSAGE_TAKEN;
    case 'C':   /* CommandComplete */
    case 'I': { /* EmptyQueryResponse */
        if (!q || q->phase != PHASE_ROWS) return MESSAGE_BAD;
        size_t tag_len = type == 'C' && len ? strnlen(body, len) : 0;
        q->affected = tag_len ? tag_rows(body, tag_len) : 0;
        q->outcome = OUTCOME_ROWS;
        q->phase = PHASE_ANSWERED;
        conn->reading = q->next;
        return MESSAGE_TAKEN;
    }
    case '1': /* ParseComplete */
        if (!q || q->phase != PHASE_PARSE) return MESSAGE_BAD;
        q->phase = q->kind == KIND_STATEMENT ? PHASE_DESCRIBE : PHASE_BIND;
        return MESSAGE_TAKEN;
    case 't': /* ParameterDescription */
        if (!q || q->phase != PHASE_DESCRIBE) return MESSAGE_BAD;
        q->phase = PHASE_DESCRIBE_ROWS;
        return MESSAGE_TAKEN;
    case 'T':   /* RowDescription */
    case 'n': { /* NoData */
        if (!q || q->phase != PHASE_DESCRIBE_ROWS || (type == 'T' && len < 2)) return MESSAGE_BAD;
        conn->pool->statements[q->stmt].columns = type == 'T' ? (int)get_u16(body) : 0;
        q->phase = PHASE_BIND;
        return MESSAGE_TAKEN;
    }
    case 'E': { /* ErrorResponse: the server skips the rest of the batch */
        ServerNotice n = parse_notice(body, len);
        /* PostgreSQL always says which error: a reply without it is not one. */
        if (!is_sqlstate(n.sqlstate)) return MESSAGE_BAD;
        if (strcmp(n.severity, "FATAL") == 0 || strcmp(n.severity, "PANIC") == 0) {
            conn->fatal = true; /* the connection ends next: its message says why */
            set_message(conn->pool, n.message);
        }
        if (!q) return MESSAGE_TAKEN;
        if (!keep_error(conn, q, n)) return MESSAGE_NO_MEMORY;
        bool prepare =
            q->phase == PHASE_PARSE || q->phase == PHASE_DESCRIBE || q->phase == PHASE_DESCRIBE_ROWS;
        /* Refused by Parse: the statement is not there. (A Describe failing
         * after its Parse leaves it there, prepared.) */
        if (q->phase == PHASE_PARSE && q->kind == KIND_STATEMENT) conn->prepared &= ~((uint64_t)1 << q->stmt);
        q->outcome = prepare ? OUTCOME_PREPARE_ERROR : OUTCOME_ERROR;
        q->phase = PHASE_ANSWERED;
        conn->reading = q->next;
        return MESSAGE_TAKEN;
    }
    case 'Z': /* ReadyForQuery: a batch's end */
        if (conn->syncs_out <= 0) return MESSAGE_BAD;
        conn->syncs_out--;
        if (conn->unsynced) /* a batch held open for this one goes at this turn's end */
            xEventLoopAtTurnEnd(conn->pool->loop, &conn->pool->turn_end->call);
        complete_batch(conn);
        return MESSAGE_TAKEN;
    case 'N': { /* NoticeResponse: printed, as libpq's default notice processor does */
        ServerNotice n = parse_notice(body, len);
        fprintf(stderr, "%s:  %s\n", n.severity, n.message);
        return MESSAGE_TAKEN;
    }
    case 'S': /* ParameterStatus */
    case 'A': /* NotificationResponse */
    case 'K': /* BackendKeyData */ return MESSAGE_TAKEN;
    default: return MESSAGE_BAD;
    }
}

/* Parses every whole message read; the part of one stays for the next read. */
static void take_messages(Conn *conn) {
    while (conn->state == CONN_READY) {
        size_t left = conn->in.len - conn->in_at;
        if (left < 5) break;
        const char *at = conn->in.data + conn->in_at;
        uint32_t length = get_u32(at + 1);
        /* Only rows, their description and the server's texts run long (as
         * libpq judges): a length past that is a broken stream, not a reason
         * to wait for (and make room for) gigabytes. */
        bool may_be_long = at[0] && strchr("DTENA", at[0]) != NULL;
        if (length < 4 || length > (may_be_long ? (uint32_t)INT32_MAX : 30000)) {
            conn_lost(conn, "the server sent a malformed message");
            return;
        }
        if (left < 1 + (size_t)length) {
            /* Room for the rest of the message, for the reads to come, but
             * no more than MESSAGE_AHEAD at a time: a length the server
             * states is not memory it gets before it sends the bytes. */
            size_t rest = 1 + (size_t)length - left;
            if (xBufferReserve(&conn->in, rest < MESSAGE_AHEAD ? rest : MESSAGE_AHEAD) != XOK) {
                conn_lost(conn, "out of memory");
                return;
            }
            break;
        }
        conn->in_at += 1 + (size_t)length;
        MessageVerdict verdict = take_message(conn, at[0], at + 5, length - 4);
        if (verdict == MESSAGE_BAD) {
            char why[96];
            snprintf(why, sizeof why, "unexpected message from the server (type '%c')", at[0]);
            conn_lost(conn, why);
            return;
        }
        if (verdict == MESSAGE_NO_MEMORY) {
            conn_lost(conn, "out of memory");
            return;
        }
    }
    if (conn->state != CONN_READY) return;
    /* What is left is part of a message: to the front, for the next read. */
    size_t left = conn->in.len - conn->in_at;
    if (left && conn->in_at) memmove(conn->in.data, conn->in.data + conn->in_at, left);
    conn->in.len = left;
    conn->in_at = 0;
}

/* Reads what the socket holds and parses it. */
static void conn_receive(Conn *conn) {
    for (;;) {
        if (xBufferReserve(&conn->in, 16384) != XOK) {
            conn_lost(conn, "out of memory");
            return;
        }
        size_t room = conn->in.cap - conn->in.len;
        ssize_t r = conn_read(conn, conn->in.data + conn->in.len, room);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && errno == EAGAIN) return;
        if (r <= 0) {
            char why[160];
            if (r < 0) snprintf(why, sizeof why, "could not receive data from server: %s", strerror(errno));
            /* After a FATAL error, its message (the pool's already) says why. */
            conn_lost(conn, r < 0         ? why
                            : conn->fatal ? conn->pool->message
                                          : "server closed the connection unexpectedly");
            return;
        }
        conn->in.len += (size_t)r;
        take_messages(conn);
        if (conn->state != CONN_READY) return;
        /* A short read emptied the socket; a TLS session may hold more than the socket shows. */
        if ((size_t)r < room && !(conn->ssl && SSL_pending(conn->ssl) > 0)) return;
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
    if (events & (XEV_READ | XEV_ERROR | XEV_EOF)) conn_receive(conn);
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
    size_t bytes = sizeof(xPgQuery) + (size_t)nparams * (sizeof(char *) + sizeof(int32_t));
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
    q->lengths = (int32_t *)(q->values + nparams);
    char *at = (char *)(q->lengths + nparams);
    for (int i = 0; i < nparams; i++) {
        const xPgParam *p = &params[i];
        q->values[i] = p->kind == XPG_NULL ? NULL : at;
        size_t n = 0;
        switch (p->kind) {
        case XPG_NULL: break;
        case XPG_TEXT:
            if (p->length) memcpy(at, p->text, p->length);
            at[p->length] = 0;
            n = p->length;
            break;
        case XPG_INT: n = xPgFormatInt64(p->integer, at); break;
        case XPG_FLOAT: n = xPgFormatDouble(p->number, at); break;
        case XPG_BOOL: n = (size_t)snprintf(at, 32, "%s", p->integer ? "true" : "false"); break;
        }
        if (n > INT32_MAX) {
            free(q);
            return XPG_EPARAM;
        }
        q->lengths[i] = p->kind == XPG_NULL ? -1 : (int32_t)n;
        if (p->kind != XPG_NULL) at += n + 1;
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
    if (pool->queue.count >= pool->conf.queue_limit && !conn_for_statement(pool)) return XPG_EBUSY;
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
    .dispatch = XPG_DISPATCH_SPREAD,
    /* Two keep the server busy on the next batch while the oldest's results travel back. */
    .batches_ahead = 2,
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
    if (c->batches_ahead <= 0) c->batches_ahead = defaults.batches_ahead;
    if (c->dispatch != XPG_DISPATCH_FILL) c->dispatch = XPG_DISPATCH_SPREAD;
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
        xBufferFree(&conn->out);
        xBufferFree(&conn->in);
        xBufferFree(&conn->text);
        xBufferFree(&conn->fields);
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

int xPgRows(const xPgResult *r) { return r->status == XPG_OK ? r->rows : 0; }
int xPgColumns(const xPgResult *r) { return r->status == XPG_OK ? r->columns : 0; }
int64_t xPgAffected(const xPgResult *r) { return r->status == XPG_OK ? r->affected : 0; }

/* The value at row, col, or NULL outside the result. */
static const Field *field_at(const xPgResult *r, int row, int col) {
    if (r->status != XPG_OK || row < 0 || row >= r->rows || col < 0 || col >= r->columns) return NULL;
    return &r->fields[(size_t)row * (size_t)r->columns + (size_t)col];
}

bool xPgIsNull(const xPgResult *r, int row, int col) {
    const Field *f = field_at(r, row, col);
    return !f || f->length < 0;
}

/* The value's text and length, or NULL for NULL (and outside the result). */
static const char *value_at(const xPgResult *r, int row, int col, size_t *length) {
    const Field *f = field_at(r, row, col);
    if (!f || f->length < 0) return NULL;
    *length = (size_t)f->length;
    return r->text + f->at;
}

const char *xPgGetText(const xPgResult *r, int row, int col, size_t *length) {
    size_t n = 0;
    const char *text = value_at(r, row, col, &n);
    if (length) *length = n;
    return text ? text : "";
}

bool xPgGetInt64(const xPgResult *r, int row, int col, int64_t *out) {
    *out = 0;
    size_t n;
    const char *text = value_at(r, row, col, &n);
    return text && xPgParseInt64(text, n, out);
}

bool xPgGetDouble(const xPgResult *r, int row, int col, double *out) {
    *out = 0;
    size_t n;
    const char *text = value_at(r, row, col, &n);
    return text && xPgParseDouble(text, n, out);
}

bool xPgGetBool(const xPgResult *r, int row, int col, bool *out) {
    *out = false;
    size_t n;
    const char *text = value_at(r, row, col, &n);
    return text && xPgParseBool(text, n, out);
}
