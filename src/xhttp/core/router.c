/* router.c — a trie of path segments with literal, parameter and wildcard edges.
 *
 * Literal edges are kept sorted so a node with thousands of children is a
 * binary search. A node reached by a complete pattern holds one route per
 * method (and at most one for any method) plus the Allow list a 405 needs, all
 * built by xRouterAdd so that xRouterMatch only reads and never allocates.
 * Parameter names live with each route, not in the trie: "/a/:x" and
 * "/a/:y/b" share the parameter node and still report their own names. */
#include "xhttp/core/router.h"
#include "xhttp/core/tokens.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct xRouteNode xRouteNode;

/* A literal segment as edges compare it: by length, then by its first 8 bytes
 * taken as one integer, then by the rest. The order only has to be consistent,
 * not alphabetical, and most comparisons end at the integers. */
typedef struct xSegKey {
    const char *data;
    size_t len;
    uint64_t head; /* first 8 bytes, zero-padded */
} xSegKey;

/* A literal edge: the child's key, so a binary search reads only this array
 * until the final check of bytes past the eighth. */
typedef struct xRouteEdge {
    xSegKey key;
    xRouteNode *child;
} xRouteEdge;

typedef struct xRoute {
    char *spec;  /* own copy; method and names point into it */
    xStr method; /* empty: any method */
    void *handler;
    void *arg;
    xStr names[XROUTER_MAX_PARAMS]; /* in path order; "*" for the wildcard */
    size_t num_params;
} xRoute;

struct xRouteNode {
    xRouteEdge *edges; /* sorted by compare_keys */
    size_t num_edges;
    size_t cap_edges;
    xRouteNode *param;
    xRouteNode *wildcard;
    xRoute *routes; /* none: no pattern ends here */
    size_t num_routes;
    char *allow;
    size_t allow_len;
    char key[]; /* the literal segment leading here */
};

struct xRouter {
    xRouteNode *root; /* the position before the first segment */
};

static const xStr WILDCARD_NAME = {"*", 1};

/* ---- Segments and specs ---- */

static int compare_str(xStr a, xStr b) {
    int c = memcmp(a.data, b.data, a.len < b.len ? a.len : b.len);
    if (c) return c;
    return a.len == b.len ? 0 : (a.len < b.len ? -1 : 1);
}

static bool str_eq(xStr a, xStr b) { return a.len == b.len && memcmp(a.data, b.data, a.len) == 0; }

/* The segment that starts at p, ending at the next '/' or at end. */
static xStr segment_at(const char *p, const char *end) {
    const char *slash = memchr(p, '/', (size_t)(end - p));
    xStr seg = {p, (size_t)((slash ? slash : end) - p)};
    return seg;
}

enum { SEG_LITERAL, SEG_PARAM, SEG_WILDCARD };

/* A segment that is exactly "*" is the wildcard; one starting with ':' is a
 * parameter. '*' anywhere else is refused rather than read as a literal, so a
 * glob like "*.css" fails loudly instead of never matching. */
static int segment_kind(xStr seg) {
    if (seg.len == 1 && seg.data[0] == '*') return SEG_WILDCARD;
    if (seg.len > 0 && seg.data[0] == ':') return SEG_PARAM;
    return SEG_LITERAL;
}

static xErrno parse_method(xRoute *route, const char **pattern) {
    const char *s = route->spec;
    route->method.data = s;
    route->method.len = 0;
    if (*s == '/') {
        *pattern = s;
        return XOK;
    }
    while (xHttpIsTokenChar((unsigned char)*s)) s++;
    if (s == route->spec || s[0] != ' ' || s[1] != '/') return XERR_INVALID;
    route->method.len = (size_t)(s - route->spec);
    *pattern = s + 1;
    return XOK;
}

static bool has_name(const xRoute *route, xStr name) {
    for (size_t i = 0; i < route->num_params; i++) {
        if (str_eq(route->names[i], name)) return true;
    }
    return false;
}

/* Checks the whole pattern before the trie is touched, collecting the
 * parameter names, so a rejected spec leaves the router unchanged. */
static xErrno parse_pattern(xRoute *route, const char *pattern, const char *end) {
    for (const char *p = pattern; *p; p++) {
        if ((unsigned char)*p <= ' ' || *p == 0x7f) return XERR_INVALID;
    }
    route->num_params = 0;
    for (const char *p = pattern + 1;;) {
        xStr seg = segment_at(p, end);
        const char *next = p + seg.len;
        int kind = segment_kind(seg);
        if (kind == SEG_LITERAL && memchr(seg.data, '*', seg.len)) return XERR_INVALID;
        if (kind == SEG_WILDCARD && next != end) return XERR_INVALID;
        if (kind != SEG_LITERAL) {
            xStr name = kind == SEG_WILDCARD ? WILDCARD_NAME : (xStr){seg.data + 1, seg.len - 1};
            if (name.len == 0 || has_name(route, name)) return XERR_INVALID;
            if (route->num_params == XROUTER_MAX_PARAMS) return XERR_INVALID;
            route->names[route->num_params++] = name;
        }
        if (next == end) return XOK;
        p = next + 1;
    }
}

/* ---- Building the trie ---- */

static xRouteNode *node_new(xStr key) {
    xRouteNode *node = calloc(1, sizeof *node + key.len);
    if (!node) return NULL;
    memcpy(node->key, key.data, key.len);
    return node;
}

static void node_free(xRouteNode *node) {
    if (!node) return;
    for (size_t i = 0; i < node->num_edges; i++) node_free(node->edges[i].child);
    node_free(node->param);
    node_free(node->wildcard);
    for (size_t i = 0; i < node->num_routes; i++) free(node->routes[i].spec);
    free(node->edges);
    free(node->routes);
    free(node->allow);
    free(node);
}

/* Never reads past len bytes: a path may end at the end of its buffer. */
static xSegKey seg_key(const char *data, size_t len) {
    xSegKey k = {data, len, 0};
    if (len >= 8)
        memcpy(&k.head, data, 8);
    else
        for (size_t i = 0; i < len; i++) k.head |= (uint64_t)(unsigned char)data[i] << (8 * i);
    return k;
}

static int compare_keys(const xSegKey *a, const xSegKey *b) {
    if (a->len != b->len) return a->len < b->len ? -1 : 1;
    if (a->head != b->head) return a->head < b->head ? -1 : 1;
    return a->len > 8 ? memcmp(a->data + 8, b->data + 8, a->len - 8) : 0;
}

/* The index of key's edge, or where it would be inserted; *found says which. */
static size_t find_edge(const xRouteNode *node, const xSegKey *key, bool *found) {
    size_t lo = 0, hi = node->num_edges;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = compare_keys(&node->edges[mid].key, key);
        if (c == 0) {
            *found = true;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = false;
    return lo;
}

static xRouteNode *literal_child(xRouteNode *node, xStr seg) {
    xSegKey key = seg_key(seg.data, seg.len);
    bool found;
    size_t i = find_edge(node, &key, &found);
    if (found) return node->edges[i].child;
    if (node->num_edges == node->cap_edges) {
        size_t cap = node->cap_edges ? node->cap_edges * 2 : 4;
        xRouteEdge *edges = realloc(node->edges, cap * sizeof *edges);
        if (!edges) return NULL;
        node->edges = edges;
        node->cap_edges = cap;
    }
    xRouteNode *child = node_new(seg);
    if (!child) return NULL;
    memmove(&node->edges[i + 1], &node->edges[i], (node->num_edges - i) * sizeof *node->edges);
    node->edges[i] = (xRouteEdge){seg_key(child->key, seg.len), child};
    node->num_edges++;
    return child;
}

static xRouteNode *single_child(xRouteNode **slot) {
    if (!*slot) *slot = node_new((xStr){"", 0});
    return *slot;
}

/* The node for pattern, creating what is missing. A failure part-way leaves
 * nodes without routes behind; they never match anything. */
static xRouteNode *node_for_pattern(xRouteNode *node, const char *pattern, const char *end) {
    for (const char *p = pattern + 1; node;) {
        xStr seg = segment_at(p, end);
        switch (segment_kind(seg)) {
        case SEG_LITERAL: node = literal_child(node, seg); break;
        case SEG_PARAM: node = single_child(&node->param); break;
        default: node = single_child(&node->wildcard); break;
        }
        if (p + seg.len == end) break;
        p += seg.len + 1;
    }
    return node;
}

/* Rebuilds "GET, HEAD, POST": the node's methods sorted, with HEAD added when
 * GET answers it. */
static xErrno build_allow(xRouteNode *node) {
    xStr *methods = malloc((node->num_routes + 1) * sizeof *methods);
    if (!methods) return XERR_NOMEM;
    size_t n = 0, bytes = 0;
    bool get = false, head = false;
    for (size_t i = 0; i < node->num_routes; i++) {
        xStr m = node->routes[i].method;
        if (m.len == 0) continue;
        get |= xStrEqualsC(m, "GET");
        head |= xStrEqualsC(m, "HEAD");
        methods[n++] = m;
    }
    if (get && !head) methods[n++] = (xStr){"HEAD", 4};
    for (size_t i = 1; i < n; i++) {
        xStr m = methods[i];
        size_t j = i;
        for (; j > 0 && compare_str(methods[j - 1], m) > 0; j--) methods[j] = methods[j - 1];
        methods[j] = m;
    }
    for (size_t i = 0; i < n; i++) bytes += methods[i].len + 2;
    char *allow = malloc(bytes + 1);
    size_t len = 0;
    for (size_t i = 0; allow && i < n; i++) {
        if (i) {
            memcpy(allow + len, ", ", 2);
            len += 2;
        }
        memcpy(allow + len, methods[i].data, methods[i].len);
        len += methods[i].len;
    }
    free(methods);
    if (!allow) return XERR_NOMEM;
    free(node->allow);
    node->allow = allow;
    node->allow_len = len;
    return XOK;
}

static xErrno add_route(xRouteNode *node, const xRoute *route) {
    for (size_t i = 0; i < node->num_routes; i++) {
        if (str_eq(node->routes[i].method, route->method)) return XERR_EXISTS;
    }
    xRoute *routes = realloc(node->routes, (node->num_routes + 1) * sizeof *routes);
    if (!routes) return XERR_NOMEM;
    node->routes = routes;
    routes[node->num_routes++] = *route;
    xErrno err = build_allow(node);
    if (err != XOK) node->num_routes--;
    return err;
}

xRouter *xRouterCreate(void) {
    xRouter *router = malloc(sizeof *router);
    if (!router) return NULL;
    router->root = node_new((xStr){"", 0});
    if (!router->root) {
        free(router);
        return NULL;
    }
    return router;
}

void xRouterDestroy(xRouter *router) {
    if (!router) return;
    node_free(router->root);
    free(router);
}

xErrno xRouterAdd(xRouter *router, const char *spec, void *handler, void *arg) {
    if (!spec) return XERR_INVALID;
    xRoute route = {.handler = handler, .arg = arg};
    route.spec = strdup(spec);
    if (!route.spec) return XERR_NOMEM;
    const char *pattern;
    const char *end = route.spec + strlen(route.spec);
    xErrno err = parse_method(&route, &pattern);
    if (err == XOK) err = parse_pattern(&route, pattern, end);
    if (err == XOK) {
        xRouteNode *node = node_for_pattern(router->root, pattern, end);
        err = node ? add_route(node, &route) : XERR_NOMEM;
    }
    if (err != XOK) free(route.spec);
    return err;
}

/* ---- Matching ---- */

typedef struct xRouteSearch {
    xStr method;
    bool head;
    const char *end;              /* of the path */
    xRouteMatch *match;           /* params[].value filled on the way down */
    const xRouteNode *allow_node; /* first node whose pattern fit but no method did */
} xRouteSearch;

static const xRouteNode *find_literal(const xRouteNode *node, xStr seg) {
    if (node->num_edges == 0) return NULL;
    xSegKey key = seg_key(seg.data, seg.len);
    bool found;
    size_t i = find_edge(node, &key, &found);
    return found ? node->edges[i].child : NULL;
}

/* The route at node for the method: its own, else GET for HEAD, else the
 * any-method route. */
static const xRoute *pick_route(const xRouteNode *node, xRouteSearch *s) {
    const xRoute *get = NULL, *any = NULL;
    for (size_t i = 0; i < node->num_routes; i++) {
        const xRoute *r = &node->routes[i];
        if (r->method.len == 0)
            any = r;
        else if (str_eq(r->method, s->method))
            return r;
        else if (s->head && xStrEqualsC(r->method, "GET"))
            get = r;
    }
    const xRoute *r = get ? get : any;
    if (!r && node->num_routes && !s->allow_node) s->allow_node = node;
    return r;
}

/* Matches the path from seg (the start of a segment, or NULL once the path is
 * used up) below node, trying literal, then parameter, then wildcard edges.
 * A node stands for one segment position, so backtracking visits each node at
 * most once and the recursion is no deeper than the longest pattern.
 * depth counts the parameters captured so far; the trie holds no path with
 * more than XROUTER_MAX_PARAMS of them, since xRouterAdd refuses such routes. */
static const xRoute *descend(const xRouteNode *node, const char *seg, size_t depth, xRouteSearch *s) {
    if (!seg) return pick_route(node, s);
    xStr cur = segment_at(seg, s->end);
    const char *next = seg + cur.len < s->end ? seg + cur.len + 1 : NULL;
    const xRoute *r;

    const xRouteNode *child = find_literal(node, cur);
    if (child && (r = descend(child, next, depth, s))) return r;
    if (node->param && cur.len > 0) {
        s->match->params[depth].value = cur;
        if ((r = descend(node->param, next, depth + 1, s))) return r;
    }
    if (node->wildcard) {
        s->match->params[depth].value = (xStr){seg, (size_t)(s->end - seg)};
        return pick_route(node->wildcard, s);
    }
    return NULL;
}

xRouteResult xRouterMatch(const xRouter *router, xStr method, xStr path, xRouteMatch *match) {
    xRouteSearch s = {method, xStrEqualsC(method, "HEAD"), NULL, match, NULL};
    const xRoute *r = NULL;
    match->handler = NULL;
    match->arg = NULL;
    match->num_params = 0;
    match->allow = (xStr){"", 0};
    if (path.len > 0 && path.data[0] == '/') {
        s.end = path.data + path.len;
        r = descend(router->root, path.data + 1, 0, &s);
    }
    if (r) {
        match->handler = r->handler;
        match->arg = r->arg;
        match->num_params = r->num_params;
        for (size_t i = 0; i < r->num_params; i++) match->params[i].name = r->names[i];
        return XROUTE_FOUND;
    }
    if (s.allow_node) {
        match->allow = (xStr){s.allow_node->allow, s.allow_node->allow_len};
        return XROUTE_METHOD_NOT_ALLOWED;
    }
    return XROUTE_NOT_FOUND;
}

xRouteResult xRouterMatchMemo(const xRouter *router, xRouteMemo *memo, xStr method, xStr path,
                              xRouteMatch *match) {
    if (memo && memo->router == router && path.len == memo->path_len && method.len == memo->method_len &&
        memcmp(path.data, memo->path, path.len) == 0 && memcmp(method.data, memo->method, method.len) == 0) {
        match->handler = memo->handler;
        match->arg = memo->arg;
        match->num_params = 0;
        match->allow = memo->allow;
        return memo->result;
    }
    xRouteResult found = xRouterMatch(router, method, path, match);
    /* Only a route without parameters (their values would point into this
     * path), or none; never an empty path or method (a CONNECT has no path,
     * whose bytes may then be NULL), which the check above would compare. */
    if (memo && match->num_params == 0 && path.len && method.len && path.len <= XROUTE_MEMO_PATH &&
        method.len <= XROUTE_MEMO_METHOD) {
        memo->router = router;
        memo->result = found;
        memo->handler = match->handler;
        memo->arg = match->arg;
        memo->allow = match->allow;
        memo->method_len = method.len;
        memo->path_len = path.len;
        memcpy(memo->method, method.data, method.len);
        memcpy(memo->path, path.data, path.len);
    }
    return found;
}
