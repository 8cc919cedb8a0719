/* context.h — what every HTTP connection of one worker shares: the network
 * context below it (loop, pools, connections), the server's settings and
 * routes (read-only), and pooled exchanges. One per worker thread, so nothing
 * here needs a lock. */
#ifndef XHTTP_CORE_CONTEXT_H
#define XHTTP_CORE_CONTEXT_H

#include <stdbool.h>
#include <stddef.h>

#include <xhttp/server.h>

#include "xnet/connection.h"
#include "xhttp/core/router.h"

typedef struct xHttpExchange xHttpExchange;

typedef struct xHttpContext {
    xNetContext net;              /* first: a connection's net is its HTTP context */
    const xHttpServerConf *conf;
    const xRouter *router;
    xHttpExchange *free_exchanges;/* pooled request/response objects */
    size_t free_exchange_count;
    bool draining;                /* graceful stop in progress */
    void *owner;                  /* the worker that owns this context */
} xHttpContext;

/** The HTTP context of a connection an HTTP protocol serves. */
static inline xHttpContext *xHttpContextOf(const xConn *conn) { return (xHttpContext *)conn->net; }

#endif
