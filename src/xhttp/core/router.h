/* router.h — maps "METHOD /path" patterns to handlers.
 *
 * Patterns are split into '/'-separated segments and stored in a trie, so a
 * lookup costs the path's length, not the number of routes. A segment is a
 * literal, a parameter (":id", matches one non-empty segment), or a trailing
 * "*" (matches the rest of the path, possibly empty, captured as param "*").
 * Literal beats parameter beats wildcard; a failed branch backtracks.
 * The router is built once, then read concurrently without locks. */
#ifndef XHTTP_CORE_ROUTER_H
#define XHTTP_CORE_ROUTER_H

#include <stddef.h>

#include <xbase/errno.h>
#include <xbase/str.h>

#define XROUTER_MAX_PARAMS 16

typedef struct xRouter xRouter;

/** One captured parameter: the name (without ':') and the matched bytes,
 *  which point into the looked-up path. */
typedef struct xRouteParam {
    xStr name;
    xStr value;
} xRouteParam;

typedef enum xRouteResult {
    XROUTE_FOUND,
    XROUTE_NOT_FOUND,          /**< no pattern matches the path → 404 */
    XROUTE_METHOD_NOT_ALLOWED, /**< the path matches, the method does not → 405 */
} xRouteResult;

typedef struct xRouteMatch {
    void *handler; /**< what was registered, opaque to the router */
    void *arg;
    xRouteParam params[XROUTER_MAX_PARAMS];
    size_t num_params;
    xStr allow; /**< for 405: "GET, HEAD, POST" style list */
} xRouteMatch;

xRouter *xRouterCreate(void);
void xRouterDestroy(xRouter *router);

/** Adds a route. spec is "METHOD /pattern" or just "/pattern" (any method).
 *  A route for GET also answers HEAD unless HEAD has its own route.
 *  Returns XERR_INVALID for a malformed spec (no leading '/', empty ":" name,
 *  '*' not last, more than XROUTER_MAX_PARAMS parameters), XERR_EXISTS when the
 *  same method and pattern is already there, XERR_NOMEM. */
xErrno xRouterAdd(xRouter *router, const char *spec, void *handler, void *arg);

/** Looks up method and path (no query). On XROUTE_FOUND fills handler, arg and
 *  params; on XROUTE_METHOD_NOT_ALLOWED fills allow. */
xRouteResult xRouterMatch(const xRouter *router, xStr method, xStr path, xRouteMatch *match);

/** The last answer for a method and path, a route without parameters or none
 *  (404, or 405 with its Allow list): one per worker (the router itself is
 *  shared, and read-only once built, so nothing makes it stale). The same
 *  request again (a client's hundred streams of one GET, or a proxy's fallback
 *  asked for one path) is matched by comparing its bytes, not by a walk down
 *  the trie. Zeroed: empty. */
#define XROUTE_MEMO_METHOD 16
#define XROUTE_MEMO_PATH 128
typedef struct xRouteMemo {
    const xRouter *router; /* NULL: nothing remembered */
    xRouteResult result;
    void *handler; /* XROUTE_FOUND's */
    void *arg;
    xStr allow; /* XROUTE_METHOD_NOT_ALLOWED's: the router's own text */
    size_t method_len, path_len;
    char method[XROUTE_MEMO_METHOD];
    char path[XROUTE_MEMO_PATH];
} xRouteMemo;

/** xRouterMatch, through memo where one is given: what it gives is what
 *  xRouterMatch would. */
xRouteResult xRouterMatchMemo(const xRouter *router, xRouteMemo *memo, xStr method, xStr path,
                              xRouteMatch *match);

#endif
