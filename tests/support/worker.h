/* worker.h — a worker for unit tests and fuzz harnesses, made as the server
 * makes its own (xHttpContextInit, xNetContextInit), so a field the server
 * sets is set here too, and one turn of a loop at a time. */
#ifndef XK_TESTS_SUPPORT_WORKER_H
#define XK_TESTS_SUPPORT_WORKER_H

#include <stdbool.h>
#include <stddef.h>

#include <xhttp/server.h>

#include "xhttp/core/context.h"
#include "xhttp/core/exchange.h"

/* A worker's context on a loop of its own, with the routes it was given. */
typedef struct xTestWorker {
    xHttpServerConf conf; /* the context reads it: set before xTestWorkerInit, kept as is after */
    xRouter *router;
    xHttpContext ctx;
} xTestWorker;

/** Makes w's loop, routes (specs[i] leads to targets[i]) and context, with
 *  the server's HTTP/1.1 upgrades (h2c); w->conf must hold the settings
 *  (xHttpServerConfInit, then the caller's changes). False when any of it
 *  fails: a harness stops there. */
bool xTestWorkerInit(xTestWorker *w, const char *const *specs, xHttpRouteTarget *targets, size_t n);

/** Frees what xTestWorkerInit made, once every connection is freed. */
void xTestWorkerDestroy(xTestWorker *w);

/** Makes net as a worker's network context on a loop of its own, for a
 *  transport's tests that need no HTTP. False on failure. */
bool xTestNetInit(xNetContext *net);

/** Frees what xTestNetInit made. */
void xTestNetDestroy(xNetContext *net);

/** One turn of loop: whatever is ready, then the timers due, without waiting. */
void xTestTurn(xEventLoop *loop);

#endif
