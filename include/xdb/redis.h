/* xdb/redis.h — a Redis client on an xEventLoop, over hiredis's asynchronous
 * API: one connection per loop, commands as arrays of byte strings (never a
 * format string), pipelined (the commands of one loop turn leave in one
 * write), each with a timeout, reconnected with backoff when Redis goes away.
 *
 * Threading: a client belongs to the loop it was created on; every call here,
 * and every callback, happens on that loop's thread. An HTTP server makes one
 * per worker in xHttpServerOnWorker's start hook and frees it in stop.
 *
 * Callbacks: a command's callback runs exactly once, never from within the
 * call that issued it, unless the command is cancelled first (xRedisCancel),
 * in which case it never runs. Failures (a timeout, Redis down, the
 * connection lost, the client freed) come to the callback as an error reply
 * whose failure field says which. */
#ifndef XDB_REDIS_H
#define XDB_REDIS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <xbase/event.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What this header declares is libxkit.so's API: exported, where the rest is hidden. */
#pragma GCC visibility push(default)

typedef struct xRedisClient xRedisClient;
typedef struct xRedisCall xRedisCall;

/** Settings for xRedisClientCreate. Start from xRedisConfigInit's defaults
 *  (a zero field takes its default too); fields are only ever added at the end. */
typedef struct xRedisConfig {
    size_t struct_size; /**< the caller's sizeof, set by xRedisConfigInit */
    /** An IPv4/IPv6 address ("127.0.0.1"), or a Unix socket's path (starting
     *  with '/'). A host name is resolved with getaddrinfo, which blocks: give
     *  an address. Copied. Default "127.0.0.1". */
    const char *host;
    uint16_t port;               /**< default 6379 */
    uint32_t connect_timeout_ms; /**< a connection not made by then is dropped and retried; default 1000 */
    uint32_t command_timeout_ms; /**< default timeout of a command; default 1000 */
    uint32_t reconnect_min_ms;   /**< first wait after a failed connect, doubled each failure; default 100 */
    uint32_t reconnect_max_ms;   /**< the longest wait between attempts; default 5000 */
} xRedisConfig;

/** Fills the first size bytes of conf with the defaults above; size is the
 *  caller's sizeof(xRedisConfig). Call xRedisConfigInit instead. */
void xRedisConfigInitSized(xRedisConfig *conf, size_t size);

/** Fills conf with the defaults noted above. */
static inline void xRedisConfigInit(xRedisConfig *conf) { xRedisConfigInitSized(conf, sizeof *conf); }

/** What a reply is. */
typedef enum xRedisReplyType {
    XREDIS_NIL,     /**< a nil bulk or nil array */
    XREDIS_INTEGER, /**< integer holds it */
    XREDIS_STRING,  /**< a bulk string: str and len (binary-safe) */
    XREDIS_ARRAY,   /**< count elements, read with xRedisReplyElement */
    XREDIS_ERROR,   /**< Redis's error reply, or the client's failure (see failure): str and len */
    XREDIS_STATUS,  /**< a status ("OK", "PONG"): str and len */
} xRedisReplyType;

/** Why a command got no reply from Redis. */
typedef enum xRedisFailure {
    XREDIS_ANSWERED = 0, /**< not a failure: the reply is Redis's (an error reply too) */
    XREDIS_TIMEOUT,      /**< no reply within the timeout; the connection was dropped and is being re-made */
    XREDIS_DOWN,         /**< not connected to Redis (a reconnection is under way): failed at once */
    XREDIS_LOST,         /**< the connection went while the command waited for its reply */
    XREDIS_CLOSED,       /**< the client was freed while the command waited */
} xRedisFailure;

/** A view of a reply, valid only during the callback it is given to (the
 *  strings point into the client's buffers). */
typedef struct xRedisReply {
    xRedisReplyType type;
    xRedisFailure failure; /**< XREDIS_ANSWERED unless type is XREDIS_ERROR from the client */
    long long integer;     /**< XREDIS_INTEGER */
    const char *str;       /**< XREDIS_STRING, XREDIS_ERROR, XREDIS_STATUS; NUL-terminated too */
    size_t len;            /**< bytes at str */
    size_t count;          /**< XREDIS_ARRAY: elements */
    const void *impl;      /* private: the parsed reply behind the view */
} xRedisReply;

/** A command's answer. client is the one it was sent on; arg is the caller's. */
typedef void (*xRedisReplyFn)(xRedisClient *client, const xRedisReply *reply, void *arg);

/** Creates a client on loop and starts connecting (without blocking);
 *  commands may be issued at once and go out when it connects. conf may be
 *  NULL (all defaults). Returns NULL for XERR_NOMEM or an empty host. */
xRedisClient *xRedisClientCreate(xEventLoop *loop, const xRedisConfig *conf);

/** Frees client: the connection is closed, timers stopped, and every pending
 *  command's callback runs, with XREDIS_CLOSED (or XREDIS_DOWN for those
 *  already failed), before this returns (or, called from within a reply
 *  callback, as soon as that callback returns).
 *  NULL is ignored. Loop thread only. */
void xRedisClientFree(xRedisClient *client);

/** Sends the command argv[0..argc) (argv_len[i] bytes each, binary-safe;
 *  argv_len NULL: NUL-terminated strings) and calls fn with its reply.
 *  timeout_ms 0 takes the client's command_timeout_ms. The bytes are copied
 *  before this returns. Commands wait for a first connect (or one after a
 *  drop) up to connect_timeout_ms; once a connect has failed, and until one
 *  succeeds, fn gets XREDIS_DOWN at the end of this loop turn (or when the
 *  loop next runs) instead of waiting. Returns a handle for xRedisCancel, valid until fn runs; NULL
 *  (and fn never runs) for argc < 1, no fn, no memory, or SUBSCRIBE,
 *  PSUBSCRIBE, SSUBSCRIBE and MONITOR (they stream replies, which this
 *  request-reply client does not take). Blocking commands (BLPOP, …) hold
 *  every command behind them: give them a client of their own. */
xRedisCall *xRedisCommand(xRedisClient *client, int argc, const char *const *argv, const size_t *argv_len,
                          uint32_t timeout_ms, xRedisReplyFn fn, void *arg);

/** Cancels call: its callback will never run (the command itself may still
 *  reach Redis; its reply is dropped). call must be a handle whose callback
 *  has not run yet; it is invalid afterwards. NULL is ignored. */
void xRedisCancel(xRedisCall *call);

/** Element i (0 to count - 1) of an XREDIS_ARRAY reply, as a view valid as
 *  long as reply; a nil view when i is out of range or reply not an array. */
xRedisReply xRedisReplyElement(const xRedisReply *reply, size_t i);

/** True while client has a connection to Redis that answers. */
bool xRedisClientConnected(const xRedisClient *client);

/** What a client did since it was created; fields are only ever added at the end. */
typedef struct xRedisStats {
    size_t struct_size; /**< the caller's sizeof, set by xRedisClientStats */
    uint64_t commands;  /**< commands issued (failed ones too) */
    uint64_t writes;    /**< writes to Redis's socket: pipelining puts many commands in one */
    uint64_t connects;  /**< connections made */
    uint64_t timeouts;  /**< commands that timed out */
    uint64_t down;      /**< commands failed at once because Redis was down */
} xRedisStats;

/** Copies client's counters into the first size bytes of *stats; size is the
 *  caller's sizeof(xRedisStats). Call xRedisClientStats instead. */
void xRedisClientStatsSized(const xRedisClient *client, xRedisStats *stats, size_t size);

/** Copies client's counters to *stats. */
static inline void xRedisClientStats(const xRedisClient *client, xRedisStats *stats) {
    xRedisClientStatsSized(client, stats, sizeof *stats);
}

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
