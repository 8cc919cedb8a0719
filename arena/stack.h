/* stack.h — the production stack's application endpoints of the arena entry
 * (../shared/arena/CONTRACT.md, "The stacks": the `server` service behind
 * the edge): GET and POST /api/items/{id} and GET /api/me, read from
 * PostgreSQL through a cache, Redis at REDIS_URL or one in this process.
 * main.c owns the workers' database pools and hands each worker's pool in. */
#ifndef ARENA_STACK_H
#define ARENA_STACK_H

#include <stdbool.h>

#include <xbase/json.h>
#include <xdb/pg.h>
#include <xhttp/server.h>

typedef struct ArenaStack ArenaStack;

/** Reads the stack's settings from the environment (REDIS_URL) once, before
 *  the workers start; false (with a message on stderr) when REDIS_URL cannot
 *  be read or memory runs out. */
bool arenaStackConfigure(void);

/** A worker's part: prepares the stack's statements on pool and, with
 *  REDIS_URL, opens the worker's Redis client on loop. NULL for no memory. */
ArenaStack *arenaStackStart(xEventLoop *loop, xPgPool *pool);

/** Ends what is waiting on the cache (before the pool is freed)... */
void arenaStackStop(ArenaStack *stack);

/** ...and frees the rest (after the pool is freed: loads out on it answer into the cache). */
void arenaStackFree(ArenaStack *stack);

/** Adds GET and POST /api/items/:id and GET /api/me to server. */
bool arenaStackRoutes(xHttpServer *server);

/* ---- From main.c ---- */

/** The worker's stack for req; NULL without a database. */
ArenaStack *arenaWorkerStack(const xHttpRequest *req);

/** Appends row of an `items` result (the columns of async-db's SELECT, in
 *  that order) to out as the contract's item object; false when a string is
 *  not UTF-8 or memory runs out. */
bool arenaAppendDbItem(xBuffer *out, const xPgResult *r, int row);

#endif
