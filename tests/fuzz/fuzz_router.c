/* fuzz_router.c — route matching on arbitrary patterns and paths.
 *
 * Input: lines. A line that starts with '+' adds the rest as a route spec
 * (at most MAX_INPUT_ROUTES of them), on top of a fixed table; every other
 * line is a lookup, "METHOD PATH" or just "PATH" (then GET). Each path lives
 * in its own heap block, so reading past it is caught. Checked after every
 * lookup:
 *   - FOUND: the handler is one of the registered routes, its method fits
 *     (the same, any, or GET for HEAD), every parameter's value points into
 *     the path, and putting the values back into the route's pattern gives
 *     the path exactly;
 *   - METHOD_NOT_ALLOWED: the Allow list is non-empty, does not list the
 *     method asked for, and some registered pattern matches the path;
 *   - NOT_FOUND: no handler, no parameters, and no registered pattern
 *     matches the path. */
#include <string.h>

#include "fuzz_check.h"
#include "xhttp/core/router.h"

#define MAX_ROUTES 32
#define MAX_INPUT_ROUTES 8
#define MAX_SPEC 96
#define MAX_LOOKUPS 32

typedef struct Route {
    char spec[MAX_SPEC];
    xStr method; /* empty: any */
    xStr pattern;
} Route;

static const char *const FIXED[] = {
    "GET /",
    "GET /users/:id",
    "POST /users/:id/posts",
    "GET /users/:id/posts/:post",
    "/static/*",
    "GET /files/:bucket/*",
    "PUT /a/b",
    "GET /a/:x",
    "DELETE /a/*",
    "HEAD /h",
};

static Route routes[MAX_ROUTES];
static size_t num_routes;

static void add_route(xRouter *r, const char *spec, size_t len) {
    if (num_routes == MAX_ROUTES || len >= MAX_SPEC || memchr(spec, '\0', len)) return;
    Route *rt = &routes[num_routes];
    memcpy(rt->spec, spec, len);
    rt->spec[len] = '\0';
    if (xRouterAdd(r, rt->spec, rt, NULL) != XOK) return;
    const char *space = memchr(rt->spec, ' ', len);
    rt->method = space ? (xStr){rt->spec, (size_t)(space - rt->spec)} : (xStr){rt->spec, 0};
    rt->pattern = space ? xStrFromC(space + 1) : xStrFromC(rt->spec);
    FUZZ_ASSERT(rt->pattern.len > 0 && rt->pattern.data[0] == '/', "accepted \"%s\"", rt->spec);
    num_routes++;
}

/* The end of the segment starting at s[i]. */
static size_t seg_end(xStr s, size_t i) {
    while (i < s.len && s.data[i] != '/') i++;
    return i;
}

/* Does pattern match path, ignoring methods and priorities? */
static bool pattern_matches(xStr pat, xStr path) {
    size_t pi = 0, qi = 0;
    for (;;) {
        if (pi >= pat.len || pat.data[pi] != '/' || qi >= path.len || path.data[qi] != '/') return false;
        pi++, qi++;
        size_t pe = seg_end(pat, pi), qe = seg_end(path, qi);
        if (pe - pi == 1 && pat.data[pi] == '*' && pe == pat.len) return true;
        if (pi < pe && pat.data[pi] == ':') {
            if (qe == qi) return false;
        } else if (pe - pi != qe - qi || memcmp(pat.data + pi, path.data + qi, pe - pi) != 0) {
            return false;
        }
        pi = pe, qi = qe;
        if (pi == pat.len || qi == path.len) return pi == pat.len && qi == path.len;
    }
}

static bool any_pattern_matches(xStr path) {
    for (size_t i = 0; i < num_routes; i++) {
        if (pattern_matches(routes[i].pattern, path)) return true;
    }
    return false;
}

static bool str_eq(xStr a, xStr b) { return a.len == b.len && memcmp(a.data, b.data, a.len) == 0; }

/* The route's pattern with m's values put back: it must be the path. */
static void check_found(const Route *rt, xStr method, xStr path, const xRouteMatch *m) {
    FUZZ_ASSERT(rt->method.len == 0 || str_eq(rt->method, method) ||
                    (xStrEqualsC(rt->method, "GET") && xStrEqualsC(method, "HEAD")),
                "route \"%s\" answered method %.*s", rt->spec, (int)method.len, method.data);
    FUZZ_ASSERT(m->num_params <= XROUTER_MAX_PARAMS, "%zu params", m->num_params);
    xStr pat = rt->pattern;
    size_t pi = 0, qi = 0, param = 0;
    while (pi < pat.len) {
        FUZZ_ASSERT(pat.data[pi] == '/' && qi < path.len && path.data[qi] == '/', "\"%s\" against path",
                    rt->spec);
        pi++, qi++;
        size_t pe = seg_end(pat, pi);
        bool wild = pe - pi == 1 && pat.data[pi] == '*', named = pi < pe && pat.data[pi] == ':';
        if (wild || named) {
            FUZZ_ASSERT(param < m->num_params, "\"%s\": too few params", rt->spec);
            const xRouteParam *p = &m->params[param++];
            xStr name = wild ? (xStr){"*", 1} : (xStr){pat.data + pi + 1, pe - pi - 1};
            FUZZ_ASSERT(str_eq(p->name, name), "\"%s\": param %zu misnamed", rt->spec, param - 1);
            FUZZ_ASSERT(fuzz_view_within(p->value, path.data, path.len), "param value outside the path");
            FUZZ_ASSERT(p->value.data == path.data + qi, "\"%s\": param %zu not at its segment", rt->spec,
                        param - 1);
            FUZZ_ASSERT(wild || (p->value.len > 0 && !memchr(p->value.data, '/', p->value.len)),
                        "named param empty or across segments");
            qi += p->value.len;
        } else {
            FUZZ_ASSERT(qi + (pe - pi) <= path.len && memcmp(pat.data + pi, path.data + qi, pe - pi) == 0,
                        "\"%s\": literal segment differs", rt->spec);
            qi += pe - pi;
        }
        pi = pe;
    }
    FUZZ_ASSERT(qi == path.len && param == m->num_params, "\"%s\" does not rebuild the path", rt->spec);
}

/* True when the comma-separated list names method. */
static bool lists(xStr allow, xStr method) {
    size_t i = 0;
    while (i < allow.len) {
        size_t e = i;
        while (e < allow.len && allow.data[e] != ',') e++;
        if (str_eq((xStr){allow.data + i, e - i}, method)) return true;
        i = e + 1;
        while (i < allow.len && allow.data[i] == ' ') i++;
    }
    return false;
}

static void lookup(const xRouter *r, const char *line, size_t len) {
    const char *space = memchr(line, ' ', len);
    xStr method = space ? (xStr){line, (size_t)(space - line)} : (xStr){"GET", 3};
    size_t off = space ? (size_t)(space - line) + 1 : 0;
    char *copy = fuzz_copy((const uint8_t *)line + off, len - off);
    xStr path = {copy, len - off};
    xRouteMatch m;
    memset(&m, 0x5A, sizeof m);
    xRouteResult res = xRouterMatch(r, method, path, &m);
    switch (res) {
    case XROUTE_FOUND: {
        const Route *rt = m.handler;
        FUZZ_ASSERT(rt >= routes && rt < routes + num_routes, "FOUND with an unknown handler");
        check_found(rt, method, path, &m);
        break;
    }
    case XROUTE_METHOD_NOT_ALLOWED:
        FUZZ_ASSERT(m.allow.len > 0 && m.allow.data, "405 with an empty Allow");
        FUZZ_ASSERT(!lists(m.allow, method), "405 for %.*s, yet Allow is %.*s", (int)method.len, method.data,
                    (int)m.allow.len, m.allow.data);
        FUZZ_ASSERT(any_pattern_matches(path), "405 for a path no pattern matches");
        break;
    case XROUTE_NOT_FOUND:
        FUZZ_ASSERT(m.handler == NULL && m.num_params == 0, "404 with a handler or params");
        FUZZ_ASSERT(!any_pattern_matches(path), "404 for a path a pattern matches");
        break;
    default: FUZZ_ASSERT(false, "result %d", (int)res);
    }
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *in = (const char *)data;
    xRouter *r = xRouterCreate();
    FUZZ_ASSERT(r != NULL, "out of memory");
    num_routes = 0;
    for (size_t i = 0; i < sizeof FIXED / sizeof FIXED[0]; i++) add_route(r, FIXED[i], strlen(FIXED[i]));
    size_t added = 0;
    for (size_t i = 0; i < size;) {
        const char *nl = memchr(in + i, '\n', size - i);
        size_t e = nl ? (size_t)(nl - in) : size;
        if (e > i && in[i] == '+' && added < MAX_INPUT_ROUTES) {
            add_route(r, in + i + 1, e - i - 1);
            added++;
        }
        i = e + 1;
    }
    size_t lookups = 0;
    for (size_t i = 0; i < size && lookups < MAX_LOOKUPS;) {
        const char *nl = memchr(in + i, '\n', size - i);
        size_t e = nl ? (size_t)(nl - in) : size;
        if (e == i || in[i] != '+') {
            lookup(r, in + i, e - i);
            lookups++;
        }
        i = e + 1;
    }
    xRouterDestroy(r);
    return 0;
}
