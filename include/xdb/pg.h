/* xdb/pg.h — PostgreSQL on an xKit loop: a pool of pipelined libpq connections.
 *
 * A pool belongs to one xEventLoop and is used from that loop's thread only
 * (an HTTP server makes one per worker in xHttpServerOnWorker's start hook
 * and frees it in the stop hook). Nothing here blocks the loop: connections
 * open with libpq's PQconnectStart/PQconnectPoll (so conninfo, authentication
 * and TLS are libpq's), then the pool pipelines the extended query protocol
 * on the socket itself; every call returns at once; results come to
 * callbacks on the loop. GSSAPI encryption is not supported: gssencmode is
 * disable unless conninfo asks for it (then connecting fails).
 *
 * How a query travels. xPgQuerySend puts it on the least busy ready
 * connection (see `dispatch`) (or, when each has `pipeline_depth` queries in flight, in the
 * pool's bounded queue; beyond `queue_limit` the call fails with XPG_EBUSY:
 * answer 503). The statement is prepared on that connection first if it never
 * was (in the same pipeline, ahead of the query). At the end of the loop
 * turn each connection that took queries sends one Sync and flushes: the
 * queries of many requests go out in one write, and many are in flight on
 * one connection; results come back in order and each goes to its own
 * callback. A connection with `batches_ahead` (2) batches in flight holds
 * its next one open (later turns' queries join it) until the oldest is
 * answered, so that under load each write and read carries many queries.
 * With `dispatch` XPG_DISPATCH_FILL a query goes to the first connection
 * with room instead of the least busy one: one connection's batches carry
 * all of a moderate load.
 *
 * One Sync per batch makes a batch's queries one implicit transaction on the
 * server: when one of them fails, PostgreSQL rolls back the others and skips
 * those after it. The pool hides that: it hands results out only when the
 * batch's Sync arrives; in a batch that failed, the failing query gets its
 * error and the others are sent again (they had no effect). Outside a
 * transaction each query therefore commits or fails alone, as if sent alone
 * (what is not transactional, a sequence's nextval, may happen twice).
 *
 * Cancelling and timeouts. PQcancel blocks (it opens a new connection) and,
 * on a pipelined connection, cancels whatever statement runs at that moment,
 * which may be another request's query; so the pool never sends a cancel
 * request. A query cancelled by its owner, or past its timeout, is dropped
 * on our side at once: its callback gets XPG_ETIMEOUT (timeout) or never
 * runs (cancel), and its result is thrown away when it arrives. A connection
 * holding a timed-out query takes no new queries until it has drained; the
 * server's own bound on a statement is `statement_timeout_ms`, which the pool
 * sets on each connection so that a runaway query ends on the server too.
 *
 * When the server goes away, queries in flight on a broken connection fail
 * with XPG_EDOWN (whether they ran is unknown); the connection reconnects
 * after a backoff that doubles from `backoff_min_ms` to `backoff_max_ms`.
 * While no connection is up and the last attempt failed, the pool is down:
 * new queries fail at once with XPG_EDOWN and nothing waits in the queue. */
#ifndef XDB_PG_H
#define XDB_PG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <xbase/event.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What this header declares is libxkit.so's API: exported, where the rest is hidden. */
#pragma GCC visibility push(default)

typedef struct xPgPool xPgPool;
typedef struct xPgQuery xPgQuery;
typedef struct xPgTx xPgTx;
typedef struct xPgResult xPgResult;

/** What a call or a result says. XPG_OK is 0; the others are failures. */
typedef enum xPgStatus {
    XPG_OK = 0,       /**< done; a result's rows may be read */
    XPG_ESERVER = 1,  /**< the server refused the query: xPgResultSqlState says why */
    XPG_ETIMEOUT = 2, /**< the query's timeout passed first */
    XPG_EDOWN = 3,    /**< no connection to the server (down, or lost with the query in flight) */
    XPG_EBUSY = 4,    /**< every connection and the queue are full: try later (HTTP: 503) */
    XPG_EPARAM = 5,   /**< bad parameters: wrong count, a NUL byte in a text value, no such statement */
    XPG_ECLOSED = 6,  /**< the pool was freed, or the transaction had ended */
    XPG_ENOMEM = 7,   /**< out of memory */
} xPgStatus;

/** A short name for status ("XPG_EDOWN"), static storage. */
const char *xPgStatusName(xPgStatus status);

/** Which connection a statement goes to (a transaction takes one of its own either way). */
typedef enum xPgDispatch {
    /** The least busy: queries sent together run side by side on as many
     *  server processes, so a slow one holds up nobody else's. The default. */
    XPG_DISPATCH_SPREAD = 0,
    /** The first connection (in the pool's order) below pipeline_depth: a
     *  turn's queries share one write, one read and one server process's
     *  wake-up, and the next connection takes only what overflows. Fewer
     *  system calls per query on both sides, but a slow query holds up those
     *  behind it on its connection. */
    XPG_DISPATCH_FILL = 1,
} xPgDispatch;

/** A pool's settings: start from xPgConfInit's defaults (or zeros, which
 *  take the defaults named); fields are only ever added at the end. */
typedef struct xPgConf {
    size_t struct_size; /**< the caller's sizeof, set by xPgConfInit */
    /** libpq connection string or URI ("host=127.0.0.1 port=5432 dbname=app",
     *  "postgres://user@host/db"). Copied. Required. libpq resolves a host
     *  name with getaddrinfo, which blocks: give an address (or hostaddr=)
     *  where name service may be slow. */
    const char *conninfo;
    int connections;             /**< connections in the pool; 4 */
    int pipeline_depth;          /**< queries in flight on one connection at most; 64 */
    int queue_limit;             /**< queries waiting for a connection at most (then XPG_EBUSY); 1024 */
    uint32_t query_timeout_ms;   /**< default timeout of a query, from its sending; 5000 */
    uint32_t connect_timeout_ms; /**< one connection attempt at most; 5000 */
    uint32_t
        statement_timeout_ms; /**< the server's statement_timeout on each connection; 0: the server's own */
    uint32_t backoff_min_ms;  /**< first wait before reconnecting; 50 */
    uint32_t backoff_max_ms;  /**< longest wait before reconnecting; 5000 */
    xPgDispatch dispatch;     /**< which connection a statement goes to; XPG_DISPATCH_SPREAD */
    /** Batches a connection has sent and not yet seen answered, at most; 2.
     *  Queries sent meanwhile join its next batch, held until one is
     *  answered: 1 makes batches bigger (fewer writes and reads per query)
     *  and leaves the server idle for a round trip between them. */
    int batches_ahead;
} xPgConf;

/** Fills the first size bytes of *conf with the defaults; records size, the
 *  caller's sizeof(xPgConf). Call xPgConfInit instead. */
void xPgConfInitSized(xPgConf *conf, size_t size);

/** Fills *conf with the defaults (conninfo NULL: set it). */
static inline void xPgConfInit(xPgConf *conf) { xPgConfInitSized(conf, sizeof *conf); }

/** Makes a pool on loop (the caller's thread must be loop's) and starts
 *  connecting all its connections. conf is copied. Returns NULL when conf
 *  has no conninfo or memory runs out. */
xPgPool *xPgPoolCreate(xEventLoop *loop, const xPgConf *conf);

/** Frees pool: closes its connections; every query still queued or in
 *  flight gets its callback with XPG_ECLOSED first (an owner gone already
 *  must have cancelled its query). Not from within one of pool's callbacks. */
void xPgPoolFree(xPgPool *pool);

/** The most statements a pool holds. */
#define XPG_MAX_STATEMENTS 64

/** Registers a statement: name (its server-side name, unique in the pool),
 *  sql with $1…$n placeholders, nparams, and the parameters' type OIDs
 *  (types NULL or 0 entries: the server infers them). Copied. It is prepared
 *  on each connection once, lazily, ahead of its first use there. Returns
 *  its number (≥ 0) for xPgQuerySend, or -1: more than XPG_MAX_STATEMENTS,
 *  a name taken, or no memory. */
int xPgPoolPrepare(xPgPool *pool, const char *name, const char *sql, int nparams, const uint32_t *types);

/** One query parameter, made by the helpers below. Text is never copied by
 *  them: xPgQuerySend copies every parameter before it returns. */
typedef enum xPgParamKind { XPG_NULL, XPG_TEXT, XPG_INT, XPG_FLOAT, XPG_BOOL } xPgParamKind;
typedef struct xPgParam {
    xPgParamKind kind;
    const char *text; /**< XPG_TEXT: the bytes (no NUL among them: PostgreSQL text cannot hold one) */
    size_t length;    /**< XPG_TEXT: their count */
    int64_t integer;  /**< XPG_INT, and XPG_BOOL's 0 or 1 */
    double number;    /**< XPG_FLOAT */
} xPgParam;

/** SQL NULL. */
static inline xPgParam xPgNull(void) { return (xPgParam){.kind = XPG_NULL}; }
/** length bytes of text as a text value. */
static inline xPgParam xPgText(const char *text, size_t length) {
    return (xPgParam){.kind = XPG_TEXT, .text = text, .length = length};
}
/** An integer, sent as its decimal text. */
static inline xPgParam xPgInt(int64_t value) { return (xPgParam){.kind = XPG_INT, .integer = value}; }
/** A double, sent as its shortest exact text (NaN and infinities as PostgreSQL spells them). */
static inline xPgParam xPgFloat(double value) { return (xPgParam){.kind = XPG_FLOAT, .number = value}; }
/** A boolean. */
static inline xPgParam xPgBool(bool value) { return (xPgParam){.kind = XPG_BOOL, .integer = value}; }

/** Called once with a query's outcome, on the loop's thread. result (and
 *  everything read through it) is valid only during the call. After it the
 *  query's handle is gone. */
typedef void (*xPgResultFn)(const xPgResult *result, void *arg);

/** Sends statement stmt with nparams params (copied) and calls fn(result,
 *  arg) once with its outcome, unless cancelled. timeout_ms: the query's
 *  timeout (0: the pool's query_timeout_ms). Returns XPG_OK, or at once
 *  XPG_EBUSY (queue full), XPG_EDOWN (the server is down), XPG_EPARAM or
 *  XPG_ENOMEM, and then fn never runs. handle (may be NULL) receives the
 *  query's handle for xPgQueryCancel, valid until fn is called or the query
 *  is cancelled. */
xPgStatus xPgQuerySend(xPgPool *pool, int stmt, const xPgParam *params, int nparams, uint32_t timeout_ms,
                       xPgResultFn fn, void *arg, xPgQuery **handle);

/** Cancels query: its callback will never run. For its owner going away (a
 *  client that hung up); see "Cancelling" above for what the server does. */
void xPgQueryCancel(xPgQuery *query);

/* ---- Results: valid during the callback only ---- */

/** The outcome: XPG_OK, or why not. */
xPgStatus xPgResultStatus(const xPgResult *result);
/** The five-character SQLSTATE of a server error ("23505"), else "". */
const char *xPgResultSqlState(const xPgResult *result);
/** The error message (the server's primary message, or why the pool failed
 *  the query), else "". */
const char *xPgResultMessage(const xPgResult *result);
/** Rows returned (0 for none or a failure). */
int xPgRows(const xPgResult *result);
/** Columns returned. */
int xPgColumns(const xPgResult *result);
/** Rows a command touched (UPDATE, INSERT, DELETE), else 0. */
int64_t xPgAffected(const xPgResult *result);
/** Whether the value at row, col is NULL (or out of range). */
bool xPgIsNull(const xPgResult *result, int row, int col);
/** The value at row, col as text (NUL-terminated; "" for NULL or out of
 *  range); *length (may be NULL) gets its byte count. */
const char *xPgGetText(const xPgResult *result, int row, int col, size_t *length);
/** The value at row, col as an integer into *out: false (and *out 0) for
 *  NULL, out of range, or text that is not a whole int8. */
bool xPgGetInt64(const xPgResult *result, int row, int col, int64_t *out);
/** The value as a double (PostgreSQL's NaN, Infinity and -Infinity too). */
bool xPgGetDouble(const xPgResult *result, int row, int col, double *out);
/** The value as a boolean (PostgreSQL's "t" and "f"). */
bool xPgGetBool(const xPgResult *result, int row, int col, bool *out);

/* ---- Transactions: one connection pinned from BEGIN to COMMIT or ROLLBACK ---- */

/** Called when BEGIN has run (result's status XPG_OK; tx is then usable) or
 *  failed (tx is NULL). */
typedef void (*xPgTxFn)(xPgTx *tx, const xPgResult *result, void *arg);

/** Starts a transaction: takes a connection with nothing in flight (waiting
 *  in the queue for one), sends BEGIN on it and calls fn. The connection
 *  serves only this transaction until xPgTxCommit or xPgTxRollback. Same
 *  immediate failures and handle as xPgQuerySend; cancelling the begin
 *  rolls back and releases the connection. */
xPgStatus xPgTxBegin(xPgPool *pool, xPgTxFn fn, void *arg, xPgQuery **handle);

/** Sends stmt within tx, as xPgQuerySend does (a failing query is not sent
 *  again here: the transaction is then failed, and the owner rolls back).
 *  XPG_ECLOSED when tx ended (its connection lost: XPG_EDOWN). */
xPgStatus xPgTxQuery(xPgTx *tx, int stmt, const xPgParam *params, int nparams, uint32_t timeout_ms,
                     xPgResultFn fn, void *arg, xPgQuery **handle);

/** Ends tx with COMMIT, calls fn (may be NULL) with its outcome, and gives
 *  the connection back. tx is freed by this call whatever it returns. */
xPgStatus xPgTxCommit(xPgTx *tx, xPgResultFn fn, void *arg);

/** Ends tx with ROLLBACK, as xPgTxCommit does. */
xPgStatus xPgTxRollback(xPgTx *tx, xPgResultFn fn, void *arg);

/* ---- Observing ---- */

/** What a pool is doing, for tests, benchmarks and metrics. */
typedef struct xPgStats {
    int connections_ready; /**< connections up */
    int in_flight;         /**< queries sent and not answered */
    int queued;            /**< queries waiting for a connection */
    int peak_in_flight;    /**< the most queries ever in flight on one connection at once */
    bool down;             /**< new queries fail with XPG_EDOWN */
    uint64_t queries;      /**< queries answered (ok or failed by the server) */
    uint64_t batches;      /**< Syncs sent: at most one per connection per turn that sent something */
    uint64_t resent;       /**< queries sent again after another in their batch failed */
    uint64_t reconnects;   /**< connections made again after one was lost */
} xPgStats;

/** Fills *stats with pool's figures. */
void xPgPoolStats(const xPgPool *pool, xPgStats *stats);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
