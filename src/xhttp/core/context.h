/* context.h — what every connection of one worker shares: its loop, the
 * server's settings and routes (read-only), and the worker's pools. One per
 * worker thread, so nothing here needs a lock. */
#ifndef XHTTP_CORE_CONTEXT_H
#define XHTTP_CORE_CONTEXT_H

#include <stdbool.h>
#include <stddef.h>

#include <xbase/buffer.h>
#include <xbase/memcache.h>
#include <xbase/event.h>
#include <xhttp/server.h>

#include "xhttp/core/router.h"

typedef struct xConn xConn;
typedef struct xHttpExchange xHttpExchange;

typedef struct xHttpContext {
    xEventLoop *loop;
    const xHttpServerConf *conf;
    const xRouter *router;
    xBufferPool buffers;          /* read and write buffers of idle-able size */
    xMemCache *mem;               /* small objects of libraries that allocate a lot */
    xHttpExchange *free_exchanges;/* pooled request/response objects */
    size_t free_exchange_count;
    xConn *conns;                 /* every open connection, for shutdown */
    size_t conn_count;
    bool draining;                /* graceful stop in progress */
    void (*on_conn_gone)(struct xHttpContext *ctx);  /* after a connection is freed */
    void *owner;                  /* the worker that owns this context */
} xHttpContext;

#endif
