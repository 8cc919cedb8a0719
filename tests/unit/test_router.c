/* test_router.c — route matching: literals, parameters, wildcards, priority
 * with backtracking, 404 against 405, and a randomized comparison with a
 * brute-force matcher, directly and through a worker's memo.
 *
 * Every looked-up path is copied to the very end of a page followed by an
 * inaccessible page, so reading one byte past the path crashes the test. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "guard_page.h"
#include "xhttp/core/router.h"

static char *guard_page_end;  /* one past the last readable byte */
static xRouteMemo round_memo; /* test_random_tables_agree_with_brute_force's */

/* The path as the router will see it; valid until the next call. */
static xStr guarded(const char *s) {
    size_t n = strlen(s);
    char *p = guard_page_end - n;
    memcpy(p, s, n);
    return (xStr){p, n};
}

static xRouteResult lookup(const xRouter *r, const char *method, const char *path, xRouteMatch *m) {
    return xRouterMatch(r, xStrFromC(method), guarded(path), m);
}

/* Distinct handler values, so a test can tell which route answered. */
#define H(n) ((void *)(uintptr_t)(n))

static bool found_handler(const xRouter *r, const char *method, const char *path, uintptr_t h) {
    xRouteMatch m;
    return lookup(r, method, path, &m) == XROUTE_FOUND && m.handler == H(h);
}

static void test_literal_routes_match_exactly(void) {
    xRouter *r = xRouterCreate();
    CHECK_EQ_INT(xRouterAdd(r, "GET /ping", H(1), H(100)), XOK);
    CHECK_EQ_INT(xRouterAdd(r, "GET /", H(2), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(r, "GET /api/v1/status", H(3), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(r, "GET /ping/", H(4), NULL), XOK);

    xRouteMatch m;
    CHECK_EQ_INT(lookup(r, "GET", "/ping", &m), XROUTE_FOUND);
    CHECK(m.handler == H(1) && m.arg == H(100));
    CHECK_EQ_INT(m.num_params, 0);
    CHECK(found_handler(r, "GET", "/", 2));
    CHECK(found_handler(r, "GET", "/api/v1/status", 3));
    CHECK(found_handler(r, "GET", "/ping/", 4)); /* trailing slash is significant */
    CHECK_EQ_INT(lookup(r, "GET", "/pin", &m), XROUTE_NOT_FOUND);
    CHECK_EQ_INT(lookup(r, "GET", "/pingx", &m), XROUTE_NOT_FOUND);
    CHECK_EQ_INT(lookup(r, "GET", "/api/v1", &m), XROUTE_NOT_FOUND);
    CHECK_EQ_INT(lookup(r, "GET", "/api/v1/status/", &m), XROUTE_NOT_FOUND);
    CHECK_EQ_INT(lookup(r, "GET", "//ping", &m), XROUTE_NOT_FOUND);
    CHECK_EQ_INT(lookup(r, "GET", "", &m), XROUTE_NOT_FOUND);
    CHECK_EQ_INT(lookup(r, "GET", "*", &m), XROUTE_NOT_FOUND);
    CHECK_EQ_INT(lookup(r, "GET", "ping", &m), XROUTE_NOT_FOUND);
    CHECK(m.handler == NULL && m.num_params == 0 && m.allow.len == 0);
    xRouterDestroy(r);
}

static void test_long_literals_sharing_a_prefix(void) {
    xRouter *r = xRouterCreate();
    CHECK_EQ_INT(xRouterAdd(r, "GET /abcdefgh", H(1), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(r, "GET /abcdefgh1", H(2), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(r, "GET /abcdefgh2", H(3), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(r, "GET /abcdefgi1", H(4), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(r, "GET /abcdefgh-very-long-segment/x", H(5), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(r, "GET /abcdefgh2", H(6), NULL), XERR_EXISTS);
    xRouteMatch m;
    CHECK(found_handler(r, "GET", "/abcdefgh", 1));
    CHECK(found_handler(r, "GET", "/abcdefgh1", 2));
    CHECK(found_handler(r, "GET", "/abcdefgh2", 3));
    CHECK(found_handler(r, "GET", "/abcdefgi1", 4));
    CHECK(found_handler(r, "GET", "/abcdefgh-very-long-segment/x", 5));
    CHECK_EQ_INT(lookup(r, "GET", "/abcdefgh3", &m), XROUTE_NOT_FOUND);
    CHECK_EQ_INT(lookup(r, "GET", "/abcdefg", &m), XROUTE_NOT_FOUND);
    CHECK_EQ_INT(lookup(r, "GET", "/abcdefgh-very-long-segmenT/x", &m), XROUTE_NOT_FOUND);
    xRouterDestroy(r);
}

static void test_empty_segments_match_only_empty_literals(void) {
    xRouter *r = xRouterCreate();
    CHECK_EQ_INT(xRouterAdd(r, "GET /a//b", H(1), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(r, "GET /u/:id", H(2), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(r, "GET /u/:id/x", H(3), NULL), XOK);
    xRouteMatch m;
    CHECK(found_handler(r, "GET", "/a//b", 1));
    CHECK_EQ_INT(lookup(r, "GET", "/a/b", &m), XROUTE_NOT_FOUND);
    CHECK_EQ_INT(lookup(r, "GET", "/u/", &m), XROUTE_NOT_FOUND);
    CHECK_EQ_INT(lookup(r, "GET", "/u//x", &m), XROUTE_NOT_FOUND);
    CHECK(found_handler(r, "GET", "/u/7/x", 3));
    xRouterDestroy(r);
}

static void test_params_capture_segments_at_any_depth(void) {
    xRouter *r = xRouterCreate();
    CHECK_EQ_INT(xRouterAdd(r, "GET /users/:id", H(1), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(r, "GET /users/:id/posts/:post", H(2), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(r, "GET /:org/repos/:repo/issues/:n", H(3), NULL), XOK);

    xRouteMatch m;
    xStr path = guarded("/users/42");
    CHECK_EQ_INT(xRouterMatch(r, xStrFromC("GET"), path, &m), XROUTE_FOUND);
    CHECK(m.handler == H(1));
    CHECK_EQ_INT(m.num_params, 1);
    CHECK_STR(m.params[0].name, "id");
    CHECK_STR(m.params[0].value, "42");
    CHECK(m.params[0].value.data == path.data + 7); /* points into the path */

    path = guarded("/users/abc/posts/x-1");
    CHECK_EQ_INT(xRouterMatch(r, xStrFromC("GET"), path, &m), XROUTE_FOUND);
    CHECK(m.handler == H(2));
    CHECK_EQ_INT(m.num_params, 2);
    CHECK_STR(m.params[0].name, "id");
    CHECK_STR(m.params[0].value, "abc");
    CHECK_STR(m.params[1].name, "post");
    CHECK_STR(m.params[1].value, "x-1");
    CHECK(m.params[1].value.data == path.data + 17);

    CHECK_EQ_INT(lookup(r, "GET", "/xkit/repos/core/issues/17", &m), XROUTE_FOUND);
    CHECK(m.handler == H(3));
    CHECK_EQ_INT(m.num_params, 3);
    CHECK_STR(m.params[0].name, "org");
    CHECK_STR(m.params[0].value, "xkit");
    CHECK_STR(m.params[1].name, "repo");
    CHECK_STR(m.params[1].value, "core");
    CHECK_STR(m.params[2].name, "n");
    CHECK_STR(m.params[2].value, "17");

    CHECK_EQ_INT(lookup(r, "GET", "/users/42/posts", &m), XROUTE_NOT_FOUND);
    CHECK_EQ_INT(lookup(r, "GET", "/users/42/", &m), XROUTE_NOT_FOUND);
    CHECK_EQ_INT(lookup(r, "GET", "/users/", &m), XROUTE_NOT_FOUND);
    xRouterDestroy(r);
}

static void test_param_names_belong_to_each_route(void) {
    xRouter *r = xRouterCreate();
    CHECK_EQ_INT(xRouterAdd(r, "GET /a/:x", H(1), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(r, "GET /a/:y/b", H(2), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(r, "POST /a/:z", H(3), NULL), XOK);
    xRouteMatch m;
    CHECK_EQ_INT(lookup(r, "GET", "/a/1", &m), XROUTE_FOUND);
    CHECK_STR(m.params[0].name, "x");
    CHECK_EQ_INT(lookup(r, "GET", "/a/2/b", &m), XROUTE_FOUND);
    CHECK(m.handler == H(2));
    CHECK_STR(m.params[0].name, "y");
    CHECK_STR(m.params[0].value, "2");
    CHECK_EQ_INT(lookup(r, "POST", "/a/3", &m), XROUTE_FOUND);
    CHECK(m.handler == H(3));
    CHECK_STR(m.params[0].name, "z");
    xRouterDestroy(r);
}

static void test_wildcard_captures_the_remainder(void) {
    xRouter *r = xRouterCreate();
    CHECK_EQ_INT(xRouterAdd(r, "/static/*", H(1), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(r, "GET /files/:bucket/*", H(2), NULL), XOK);

    xRouteMatch m;
    xStr path = guarded("/static/css/site/main.css");
    CHECK_EQ_INT(xRouterMatch(r, xStrFromC("GET"), path, &m), XROUTE_FOUND);
    CHECK(m.handler == H(1));
    CHECK_EQ_INT(m.num_params, 1);
    CHECK_STR(m.params[0].name, "*");
    CHECK_STR(m.params[0].value, "css/site/main.css");
    CHECK(m.params[0].value.data == path.data + 8);

    CHECK_EQ_INT(lookup(r, "GET", "/static/", &m), XROUTE_FOUND);
    CHECK_STR(m.params[0].value, "");
    CHECK_EQ_INT(lookup(r, "GET", "/static//x/", &m), XROUTE_FOUND);
    CHECK_STR(m.params[0].value, "/x/");
    /* The wildcard takes what follows "/static/"; without the slash there is none. */
    CHECK_EQ_INT(lookup(r, "GET", "/static", &m), XROUTE_NOT_FOUND);

    CHECK_EQ_INT(lookup(r, "GET", "/files/b1/a/b/c", &m), XROUTE_FOUND);
    CHECK(m.handler == H(2));
    CHECK_EQ_INT(m.num_params, 2);
    CHECK_STR(m.params[0].name, "bucket");
    CHECK_STR(m.params[0].value, "b1");
    CHECK_STR(m.params[1].name, "*");
    CHECK_STR(m.params[1].value, "a/b/c");
    xRouterDestroy(r);
}

static void test_literal_beats_param_beats_wildcard(void) {
    xRouter *r = xRouterCreate();
    CHECK_EQ_INT(xRouterAdd(r, "GET /a/*", H(3), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(r, "GET /a/:x", H(2), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(r, "GET /a/b", H(1), NULL), XOK);
    xRouteMatch m;
    CHECK(found_handler(r, "GET", "/a/b", 1));
    CHECK(found_handler(r, "GET", "/a/c", 2));
    CHECK_EQ_INT(lookup(r, "GET", "/a/", &m), XROUTE_FOUND); /* ":x" needs a non-empty segment */
    CHECK(m.handler == H(3));
    CHECK_STR(m.params[0].value, "");
    CHECK_EQ_INT(lookup(r, "GET", "/a/b/c", &m), XROUTE_FOUND);
    CHECK(m.handler == H(3));
    CHECK_STR(m.params[0].value, "b/c");
    xRouterDestroy(r);
}

static void test_failed_branches_backtrack(void) {
    xRouter *r = xRouterCreate();
    CHECK_EQ_INT(xRouterAdd(r, "GET /a/b/c", H(1), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(r, "GET /a/:x/d", H(2), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(r, "GET /a/:x/:y/e", H(3), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(r, "GET /a/b/c/f", H(4), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(r, "GET /*", H(5), NULL), XOK);

    xRouteMatch m;
    CHECK(found_handler(r, "GET", "/a/b/c", 1));
    CHECK_EQ_INT(lookup(r, "GET", "/a/b/d", &m), XROUTE_FOUND);
    CHECK(m.handler == H(2));
    CHECK_EQ_INT(m.num_params, 1);
    CHECK_STR(m.params[0].name, "x");
    CHECK_STR(m.params[0].value, "b");
    CHECK_EQ_INT(lookup(r, "GET", "/a/b/c/e", &m), XROUTE_FOUND);
    CHECK(m.handler == H(3));
    CHECK_EQ_INT(m.num_params, 2);
    CHECK_STR(m.params[0].value, "b");
    CHECK_STR(m.params[1].value, "c");
    CHECK(found_handler(r, "GET", "/a/b/c/f", 4));
    /* Every deeper branch fails: the root wildcard takes the whole path. */
    CHECK_EQ_INT(lookup(r, "GET", "/a/b/c/g", &m), XROUTE_FOUND);
    CHECK(m.handler == H(5));
    CHECK_EQ_INT(m.num_params, 1);
    CHECK_STR(m.params[0].name, "*");
    CHECK_STR(m.params[0].value, "a/b/c/g");
    xRouterDestroy(r);
}

static void test_a_branch_with_the_method_wins_over_a_more_specific_one_without(void) {
    xRouter *r = xRouterCreate();
    CHECK_EQ_INT(xRouterAdd(r, "GET /a/b", H(1), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(r, "POST /a/:x", H(2), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(r, "PUT /a/*", H(3), NULL), XOK);
    xRouteMatch m;
    CHECK(found_handler(r, "GET", "/a/b", 1));
    CHECK_EQ_INT(lookup(r, "POST", "/a/b", &m), XROUTE_FOUND);
    CHECK(m.handler == H(2));
    CHECK_STR(m.params[0].name, "x");
    CHECK_STR(m.params[0].value, "b");
    CHECK_EQ_INT(lookup(r, "PUT", "/a/b", &m), XROUTE_FOUND);
    CHECK(m.handler == H(3));
    CHECK_STR(m.params[0].name, "*");
    CHECK_STR(m.params[0].value, "b");
    /* No branch has DELETE: the Allow comes from the most specific one. */
    CHECK_EQ_INT(lookup(r, "DELETE", "/a/b", &m), XROUTE_METHOD_NOT_ALLOWED);
    CHECK_STR(m.allow, "GET, HEAD");
    CHECK(m.handler == NULL && m.num_params == 0);
    CHECK_EQ_INT(lookup(r, "DELETE", "/a/c", &m), XROUTE_METHOD_NOT_ALLOWED);
    CHECK_STR(m.allow, "POST");
    CHECK_EQ_INT(lookup(r, "DELETE", "/a/c/d", &m), XROUTE_METHOD_NOT_ALLOWED);
    CHECK_STR(m.allow, "PUT");
    xRouterDestroy(r);
}

static void test_404_and_405_with_the_allow_list(void) {
    xRouter *r = xRouterCreate();
    CHECK_EQ_INT(xRouterAdd(r, "POST /res", H(1), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(r, "GET /res", H(2), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(r, "DELETE /res", H(3), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(r, "PATCH /only", H(4), NULL), XOK);

    xRouteMatch m;
    CHECK_EQ_INT(lookup(r, "PUT", "/res", &m), XROUTE_METHOD_NOT_ALLOWED);
    CHECK_STR(m.allow, "DELETE, GET, HEAD, POST");
    CHECK(m.handler == NULL);
    CHECK_EQ_INT(lookup(r, "get", "/res", &m), XROUTE_METHOD_NOT_ALLOWED); /* case-sensitive */
    CHECK_EQ_INT(lookup(r, "GE", "/res", &m), XROUTE_METHOD_NOT_ALLOWED);
    CHECK_EQ_INT(lookup(r, "GETX", "/res", &m), XROUTE_METHOD_NOT_ALLOWED);
    CHECK_EQ_INT(lookup(r, "HEAD", "/only", &m), XROUTE_METHOD_NOT_ALLOWED);
    CHECK_STR(m.allow, "PATCH");
    CHECK_EQ_INT(lookup(r, "PUT", "/nope", &m), XROUTE_NOT_FOUND);
    CHECK_EQ_INT(m.allow.len, 0);
    CHECK_EQ_INT(lookup(r, "PUT", "/res/", &m), XROUTE_NOT_FOUND);
    xRouterDestroy(r);
}

/* A 404 and a 405 come from the memo as they came the first time, and a
 * request without a path (a CONNECT's, whose bytes are NULL) is neither
 * remembered nor compared: the next lookup still walks the trie. */
static void test_memo_keeps_404_and_405(void) {
    xRouter *r = xRouterCreate();
    CHECK_EQ_INT(xRouterAdd(r, "POST /up", H(1), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(r, "GET /ping", H(2), NULL), XOK);
    xRouteMemo memo = {0};
    for (int k = 0; k < 2; k++) {
        xRouteMatch m;
        CHECK_EQ_INT(xRouterMatchMemo(r, &memo, xStrFromC("GET"), xStrFromC("/up"), &m),
                     XROUTE_METHOD_NOT_ALLOWED);
        CHECK_STR(m.allow, "POST");
        CHECK(m.handler == NULL);
    }
    for (int k = 0; k < 2; k++) {
        xRouteMatch m;
        CHECK_EQ_INT(xRouterMatchMemo(r, &memo, xStrFromC("GET"), xStrFromC("/nope"), &m), XROUTE_NOT_FOUND);
        CHECK_EQ_INT(m.allow.len, 0);
        CHECK(m.handler == NULL);
    }
    xRouteMatch m;
    CHECK_EQ_INT(xRouterMatchMemo(r, &memo, xStrFromC("CONNECT"), (xStr){NULL, 0}, &m), XROUTE_NOT_FOUND);
    CHECK_EQ_INT(xRouterMatchMemo(r, &memo, xStrFromC("CONNECT"), (xStr){NULL, 0}, &m), XROUTE_NOT_FOUND);
    CHECK_EQ_INT(xRouterMatchMemo(r, &memo, xStrFromC("GET"), xStrFromC("/ping"), &m), XROUTE_FOUND);
    CHECK(m.handler == H(2));
    CHECK_EQ_INT(xRouterMatchMemo(r, &memo, xStrFromC("GET"), xStrFromC("/ping"), &m), XROUTE_FOUND);
    CHECK(m.handler == H(2) && m.allow.len == 0);
    xRouterDestroy(r);
}

/* One memo taken by turns by every request of a worker: its answer is keyed
 * by router, method and path together, so a path that is 405 under one method
 * and routed under another, HEAD answered by GET, a 404 beside a route and the
 * same request to another router (a virtual host's) each get their own. */
static xRouteResult memo_lookup(const xRouter *r, xRouteMemo *memo, const char *method, const char *path,
                                xRouteMatch *m) {
    return xRouterMatchMemo(r, memo, xStrFromC(method), xStrFromC(path), m);
}

static void test_memo_keys_router_method_and_path(void) {
    xRouter *a = xRouterCreate(), *b = xRouterCreate();
    CHECK_EQ_INT(xRouterAdd(a, "POST /up", H(1), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(a, "PUT /up", H(2), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(a, "GET /page", H(3), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(b, "GET /up", H(4), NULL), XOK);
    xRouteMemo memo = {0};
    for (int round = 0; round < 2; round++) {
        xRouteMatch m;
        CHECK_EQ_INT(memo_lookup(a, &memo, "GET", "/up", &m), XROUTE_METHOD_NOT_ALLOWED);
        CHECK_STR(m.allow, "POST, PUT");
        CHECK_EQ_INT(memo_lookup(a, &memo, "GET", "/up", &m), XROUTE_METHOD_NOT_ALLOWED);
        CHECK_STR(m.allow, "POST, PUT");
        CHECK_EQ_INT(memo_lookup(a, &memo, "POST", "/up", &m), XROUTE_FOUND);
        CHECK(m.handler == H(1) && m.allow.len == 0);
        CHECK_EQ_INT(memo_lookup(a, &memo, "PUT", "/up", &m), XROUTE_FOUND);
        CHECK(m.handler == H(2));
        CHECK_EQ_INT(memo_lookup(b, &memo, "PUT", "/up", &m), XROUTE_METHOD_NOT_ALLOWED);
        CHECK_STR(m.allow, "GET, HEAD");
        CHECK_EQ_INT(memo_lookup(b, &memo, "GET", "/up", &m), XROUTE_FOUND);
        CHECK(m.handler == H(4));
        CHECK_EQ_INT(memo_lookup(a, &memo, "GET", "/up", &m), XROUTE_METHOD_NOT_ALLOWED);
        CHECK_STR(m.allow, "POST, PUT");
        CHECK_EQ_INT(memo_lookup(a, &memo, "HEAD", "/page", &m), XROUTE_FOUND);
        CHECK(m.handler == H(3));
        CHECK_EQ_INT(memo_lookup(a, &memo, "HEAD", "/page/", &m), XROUTE_NOT_FOUND);
        CHECK_EQ_INT(memo_lookup(a, &memo, "HEAD", "/pagE", &m), XROUTE_NOT_FOUND);
        CHECK_EQ_INT(memo_lookup(a, &memo, "DELETE", "/page", &m), XROUTE_METHOD_NOT_ALLOWED);
        CHECK_STR(m.allow, "GET, HEAD");
        CHECK_EQ_INT(memo_lookup(b, &memo, "DELETE", "/page", &m), XROUTE_NOT_FOUND);
        CHECK_EQ_INT(m.allow.len, 0);
    }
    xRouterDestroy(a);
    xRouterDestroy(b);
}

static void test_get_answers_head_unless_head_has_a_route(void) {
    xRouter *r = xRouterCreate();
    CHECK_EQ_INT(xRouterAdd(r, "GET /page", H(1), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(r, "GET /doc", H(2), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(r, "HEAD /doc", H(3), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(r, "POST /doc", H(4), NULL), XOK);
    xRouteMatch m;
    CHECK(found_handler(r, "HEAD", "/page", 1));
    CHECK(found_handler(r, "HEAD", "/doc", 3));
    CHECK(found_handler(r, "GET", "/doc", 2));
    CHECK_EQ_INT(lookup(r, "PUT", "/doc", &m), XROUTE_METHOD_NOT_ALLOWED);
    CHECK_STR(m.allow, "GET, HEAD, POST"); /* HEAD once */
    CHECK_EQ_INT(lookup(r, "PUT", "/page", &m), XROUTE_METHOD_NOT_ALLOWED);
    CHECK_STR(m.allow, "GET, HEAD");
    xRouterDestroy(r);
}

static void test_any_method_routes(void) {
    xRouter *r = xRouterCreate();
    CHECK_EQ_INT(xRouterAdd(r, "/any", H(1), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(r, "/mix", H(2), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(r, "GET /mix", H(3), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(r, "POST /mix", H(4), NULL), XOK);
    CHECK(found_handler(r, "GET", "/any", 1));
    CHECK(found_handler(r, "PURGE", "/any", 1));
    CHECK(found_handler(r, "get", "/any", 1));
    CHECK(found_handler(r, "GET", "/mix", 3));
    CHECK(found_handler(r, "HEAD", "/mix", 3)); /* GET before the any-method route */
    CHECK(found_handler(r, "POST", "/mix", 4));
    CHECK(found_handler(r, "DELETE", "/mix", 2));
    xRouterDestroy(r);
}

static void test_duplicate_routes_are_refused(void) {
    xRouter *r = xRouterCreate();
    CHECK_EQ_INT(xRouterAdd(r, "GET /x", H(1), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(r, "GET /x", H(2), NULL), XERR_EXISTS);
    CHECK_EQ_INT(xRouterAdd(r, "POST /x", H(3), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(r, "/x", H(4), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(r, "/x", H(5), NULL), XERR_EXISTS);
    CHECK_EQ_INT(xRouterAdd(r, "GET /u/:id", H(6), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(r, "GET /u/:name", H(7), NULL), XERR_EXISTS);
    CHECK_EQ_INT(xRouterAdd(r, "GET /f/*", H(8), NULL), XOK);
    CHECK_EQ_INT(xRouterAdd(r, "GET /f/*", H(9), NULL), XERR_EXISTS);
    CHECK(found_handler(r, "GET", "/x", 1));
    CHECK(found_handler(r, "GET", "/u/1", 6));
    CHECK(found_handler(r, "GET", "/f/1", 8));
    xRouterDestroy(r);
}

static void test_malformed_specs_are_refused(void) {
    static const char *const bad[] = {
        "",       "GET",     "GET ",   "GET x",   "GET  /x", " /x",      "GET/x",  "x",    ":id",
        "*",      "GET\t/x", "G(T /x", "GET /x ", "/a b",    "/a\tb",    "/a\x7f", "/a/:", "/:/b",
        "/a/*/b", "/a/**",   "/a*",    "/*a",     "/a/b*c",  "/a/:x/:x", "/:x/*/",
    };
    xRouter *r = xRouterCreate();
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        xErrno err = xRouterAdd(r, bad[i], H(1), NULL);
        CHECK_MSG(err == XERR_INVALID, "\"%s\" gave %d", bad[i], err);
    }
    CHECK_EQ_INT(xRouterAdd(r, NULL, H(1), NULL), XERR_INVALID);
    /* A refused spec leaves nothing behind. */
    xRouteMatch m;
    CHECK_EQ_INT(lookup(r, "GET", "/a/x/b", &m), XROUTE_NOT_FOUND);
    CHECK_EQ_INT(lookup(r, "GET", "/a/", &m), XROUTE_NOT_FOUND);
    /* ':' is special only at the start of a segment. */
    CHECK_EQ_INT(xRouterAdd(r, "POST /v1/items:batchGet", H(2), NULL), XOK);
    CHECK(found_handler(r, "POST", "/v1/items:batchGet", 2));
    CHECK_EQ_INT(xRouterAdd(r, "M-SEARCH /*", H(3), NULL), XOK);
    CHECK(found_handler(r, "M-SEARCH", "/", 3));
    xRouterDestroy(r);
}

/* Writes "/:p0/:p1/.../:p{n-1}" into buf. */
static void param_pattern(char *buf, size_t size, int n, const char *tail) {
    size_t len = (size_t)snprintf(buf, size, "GET ");
    for (int i = 0; i < n; i++) len += (size_t)snprintf(buf + len, size - len, "/:p%d", i);
    snprintf(buf + len, size - len, "%s", tail);
}

static void test_parameter_limit(void) {
    char spec[256];
    xRouter *r = xRouterCreate();
    param_pattern(spec, sizeof spec, XROUTER_MAX_PARAMS, "");
    CHECK_EQ_INT(xRouterAdd(r, spec, H(1), NULL), XOK);
    param_pattern(spec, sizeof spec, XROUTER_MAX_PARAMS + 1, "");
    CHECK_EQ_INT(xRouterAdd(r, spec, H(2), NULL), XERR_INVALID);
    param_pattern(spec, sizeof spec, XROUTER_MAX_PARAMS - 1, "/*");
    CHECK_EQ_INT(xRouterAdd(r, spec, H(3), NULL), XOK);
    param_pattern(spec, sizeof spec, XROUTER_MAX_PARAMS, "/*");
    CHECK_EQ_INT(xRouterAdd(r, spec, H(4), NULL), XERR_INVALID);

    char path[256];
    size_t len = 0;
    for (int i = 0; i < XROUTER_MAX_PARAMS; i++)
        len += (size_t)snprintf(path + len, sizeof path - len, "/v%d", i);
    xRouteMatch m;
    CHECK_EQ_INT(lookup(r, "GET", path, &m), XROUTE_FOUND);
    CHECK(m.handler == H(1));
    CHECK_EQ_INT(m.num_params, XROUTER_MAX_PARAMS);
    char want[16];
    for (int i = 0; i < XROUTER_MAX_PARAMS; i++) {
        snprintf(want, sizeof want, "p%d", i);
        CHECK_STR(m.params[i].name, want);
        snprintf(want, sizeof want, "v%d", i);
        CHECK_STR(m.params[i].value, want);
    }
    snprintf(path + len, sizeof path - len, "/more/x");
    CHECK_EQ_INT(lookup(r, "GET", path, &m), XROUTE_FOUND);
    CHECK(m.handler == H(3));
    CHECK_EQ_INT(m.num_params, XROUTER_MAX_PARAMS);
    CHECK_STR(m.params[XROUTER_MAX_PARAMS - 1].name, "*");
    CHECK_STR(m.params[XROUTER_MAX_PARAMS - 1].value, "v15/more/x");
    xRouterDestroy(r);
}

static void test_two_thousand_routes(void) {
    enum { N = 2000 };
    xRouter *r = xRouterCreate();
    char spec[64], path[64];
    for (int i = N - 1; i >= 0; i--) { /* reverse order exercises sorted insertion */
        snprintf(spec, sizeof spec, "GET /r/%d", i);
        CHECK_EQ_INT(xRouterAdd(r, spec, H(i + 1), NULL), XOK);
        snprintf(spec, sizeof spec, "GET /u/:id/p/%d", i);
        CHECK_EQ_INT(xRouterAdd(r, spec, H(N + i + 1), NULL), XOK);
    }
    int wrong = 0;
    for (int i = 0; i < N; i++) {
        xRouteMatch m;
        snprintf(path, sizeof path, "/r/%d", i);
        if (!found_handler(r, "GET", path, (uintptr_t)i + 1)) wrong++;
        snprintf(path, sizeof path, "/u/user%d/p/%d", i * 7, i);
        char id[32];
        snprintf(id, sizeof id, "user%d", i * 7);
        xStr p = guarded(path);
        if (xRouterMatch(r, xStrFromC("GET"), p, &m) != XROUTE_FOUND || m.handler != H(N + i + 1) ||
            m.num_params != 1 || !xStrEqualsC(m.params[0].name, "id") ||
            !xStrEqualsC(m.params[0].value, id) || m.params[0].value.data != p.data + 3) {
            wrong++;
        }
    }
    CHECK_EQ_INT(wrong, 0);
    xRouteMatch m;
    CHECK_EQ_INT(lookup(r, "GET", "/r/2000", &m), XROUTE_NOT_FOUND);
    CHECK_EQ_INT(lookup(r, "GET", "/r/01", &m), XROUTE_NOT_FOUND);
    CHECK_EQ_INT(lookup(r, "GET", "/u/x/p/2000", &m), XROUTE_NOT_FOUND);
    CHECK_EQ_INT(lookup(r, "POST", "/r/5", &m), XROUTE_METHOD_NOT_ALLOWED);
    CHECK_STR(m.allow, "GET, HEAD");
    xRouterDestroy(r);
}

/* ---- Randomized comparison with a brute-force matcher ----
 * Patterns and paths come from a tiny alphabet so they collide often. */

enum { MAX_SEGS = 4, ROUTES = 14 };

typedef struct Model {
    char spec[64];
    const char *method; /* NULL: any */
    char segs[MAX_SEGS][8];
    int num_segs;
    char shape[MAX_SEGS + 1]; /* per segment: 'a' literal, 'b' param, 'c' wildcard */
    uintptr_t handler;
} Model;

static unsigned rng_state = 12345;
static unsigned rnd(unsigned n) {
    rng_state = rng_state * 1103515245u + 12345u;
    return (rng_state >> 8) % n;
}

static void append(char *dst, size_t *len, const char *s) {
    size_t n = strlen(s);
    memcpy(dst + *len, s, n + 1);
    *len += n;
}

static void random_route(Model *m, uintptr_t handler) {
    static const char *const methods[] = {"GET", "POST", "HEAD", NULL, "GET", NULL};
    static const char *const segs[] = {"a", "b", "", ":x", ":y", "*"};
    m->method = methods[rnd(6)];
    m->num_segs = 1 + (int)rnd(MAX_SEGS - 1);
    m->handler = handler;
    size_t len = 0;
    m->spec[0] = '\0';
    if (m->method) {
        append(m->spec, &len, m->method);
        append(m->spec, &len, " ");
    }
    for (int i = 0; i < m->num_segs; i++) {
        unsigned k = rnd(i == m->num_segs - 1 ? 6 : 5);
        size_t seg_len = 0;
        m->segs[i][0] = '\0';
        append(m->segs[i], &seg_len, segs[k]);
        if (k == 3 || k == 4) { /* names differ by position, so never repeat in a route */
            char digit[2] = {(char)('0' + i), '\0'};
            append(m->segs[i], &seg_len, digit);
        }
        m->shape[i] = k < 3 ? 'a' : k < 5 ? 'b' : 'c';
        append(m->spec, &len, "/");
        append(m->spec, &len, m->segs[i]);
    }
    m->shape[m->num_segs] = '\0';
}

static bool same_pattern(const Model *a, const Model *b) {
    if (a->num_segs != b->num_segs || strcmp(a->shape, b->shape) != 0) return false;
    for (int i = 0; i < a->num_segs; i++) {
        if (a->shape[i] == 'a' && strcmp(a->segs[i], b->segs[i]) != 0) return false;
    }
    return true;
}

/* Matches path ("/..." split into segs) against the model; values get the captures. */
static bool model_matches(const Model *m, char segs[][8], int n, const char *path, xStr *values,
                          size_t *num_values) {
    *num_values = 0;
    const char *p = path + 1;
    for (int i = 0; i < m->num_segs; i++) {
        if (m->shape[i] == 'c') {
            values[(*num_values)++] = (xStr){p, strlen(p)};
            return i < n;
        }
        if (i >= n) return false;
        if (m->shape[i] == 'b') {
            if (segs[i][0] == '\0') return false;
            values[(*num_values)++] = (xStr){p, strlen(segs[i])};
        } else if (strcmp(m->segs[i], segs[i]) != 0) {
            return false;
        }
        p += strlen(segs[i]) + (i + 1 < n);
    }
    return n == m->num_segs;
}

/* How well the model's route serves method at its node: 3 exact, 2 GET for
 * HEAD, 1 any method, 0 not at all. */
static int method_fit(const Model *routes, int count, const Model *m, const char *method) {
    if (m->method && strcmp(m->method, method) == 0) return 3;
    if (m->method && strcmp(m->method, "GET") == 0 && strcmp(method, "HEAD") == 0) {
        for (int i = 0; i < count; i++) {
            if (same_pattern(&routes[i], m) && routes[i].method && strcmp(routes[i].method, "HEAD") == 0)
                return 0;
        }
        return 2;
    }
    return m->method ? 0 : 1;
}

static void expected_allow(const Model *routes, int count, const Model *m, char *out, size_t size) {
    static const char *const sorted[] = {"GET", "HEAD", "POST"};
    bool has[3] = {false, false, false};
    for (int i = 0; i < count; i++) {
        if (!same_pattern(&routes[i], m) || !routes[i].method) continue;
        for (int k = 0; k < 3; k++) has[k] |= strcmp(routes[i].method, sorted[k]) == 0;
    }
    has[1] |= has[0];
    size_t len = 0;
    out[0] = '\0';
    for (int k = 0; k < 3; k++) {
        if (has[k]) len += (size_t)snprintf(out + len, size - len, "%s%s", len ? ", " : "", sorted[k]);
    }
}

static void check_random_lookup(const xRouter *r, const Model *routes, int count) {
    static const char *const methods[] = {"GET", "HEAD", "POST", "PUT"};
    static const char *const literals[] = {"a", "b", "c", ""};
    char segs[MAX_SEGS + 1][8], path[64];
    int n = 1 + (int)rnd(MAX_SEGS + 1);
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        snprintf(segs[i], sizeof segs[i], "%s", literals[rnd(4)]);
        len += (size_t)snprintf(path + len, sizeof path - len, "/%s", segs[i]);
    }
    const char *method = methods[rnd(4)];

    /* The best route serving the method, else the best route for the path at all. */
    const Model *best = NULL, *best_path = NULL;
    int best_fit = 0;
    xStr want[XROUTER_MAX_PARAMS], tmp[XROUTER_MAX_PARAMS];
    size_t num_want = 0, num_tmp;
    for (int i = 0; i < count; i++) {
        if (!model_matches(&routes[i], segs, n, path, tmp, &num_tmp)) continue;
        if (!best_path || strcmp(routes[i].shape, best_path->shape) < 0) best_path = &routes[i];
        int fit = method_fit(routes, count, &routes[i], method);
        if (!fit) continue;
        int order = best ? strcmp(routes[i].shape, best->shape) : -1;
        if (order < 0 || (order == 0 && fit > best_fit)) {
            best = &routes[i];
            best_fit = fit;
            num_want = num_tmp;
            memcpy(want, tmp, sizeof tmp);
        }
    }

    xRouteMatch m;
    xStr p = guarded(path);
    xRouteResult res = xRouterMatch(r, xStrFromC(method), p, &m);
    if (best) {
        CHECK_MSG(res == XROUTE_FOUND && m.handler == H(best->handler), "%s %s: want %s, got %d", method,
                  path, best->spec, res);
        if (res != XROUTE_FOUND) return;
        CHECK_EQ_INT(m.num_params, num_want);
        for (size_t i = 0; i < num_want && i < m.num_params; i++) {
            CHECK(m.params[i].value.len == want[i].len &&
                  m.params[i].value.data == p.data + (want[i].data - path));
        }
    } else if (best_path) {
        char allow[32];
        expected_allow(routes, count, best_path, allow, sizeof allow);
        CHECK_MSG(res == XROUTE_METHOD_NOT_ALLOWED, "%s %s: want 405, got %d", method, path, res);
        CHECK_STR(m.allow, allow);
    } else {
        CHECK_MSG(res == XROUTE_NOT_FOUND, "%s %s: want 404, got %d", method, path, res);
    }
    /* Through the round's memo, twice (the second time from the memo where the
     * first filled it), the same answer. */
    for (int k = 0; k < 2; k++) {
        xRouteMatch mm;
        xRouteResult memo_res = xRouterMatchMemo(r, &round_memo, xStrFromC(method), p, &mm);
        CHECK_MSG(memo_res == res, "%s %s through the memo: %d, not %d", method, path, memo_res, res);
        if (memo_res != res) return;
        if (res == XROUTE_FOUND) {
            CHECK(mm.handler == m.handler && mm.num_params == m.num_params);
            for (size_t i = 0; i < m.num_params && i < mm.num_params; i++)
                CHECK(mm.params[i].value.data == m.params[i].value.data &&
                      mm.params[i].value.len == m.params[i].value.len);
        } else if (res == XROUTE_METHOD_NOT_ALLOWED) {
            CHECK(mm.allow.len == m.allow.len && memcmp(mm.allow.data, m.allow.data, m.allow.len) == 0);
        }
    }
}

static void test_random_tables_agree_with_brute_force(void) {
    for (int round = 0; round < 300; round++) {
        xRouter *r = xRouterCreate();
        round_memo = (xRouteMemo){0}; /* a worker's memo lives as long as its router */
        Model routes[ROUTES];
        int count = 0;
        for (int i = 0; i < ROUTES; i++) {
            random_route(&routes[count], (uintptr_t)i + 1);
            bool dup = false;
            for (int j = 0; j < count; j++) {
                dup |= same_pattern(&routes[j], &routes[count]) &&
                       (routes[j].method == routes[count].method ||
                        (routes[j].method && routes[count].method &&
                         strcmp(routes[j].method, routes[count].method) == 0));
            }
            xErrno err = xRouterAdd(r, routes[count].spec, H(routes[count].handler), NULL);
            CHECK_MSG(err == (dup ? XERR_EXISTS : XOK), "%s gave %d", routes[count].spec, err);
            if (err == XOK) count++;
        }
        for (int i = 0; i < 200; i++) check_random_lookup(r, routes, count);
        xRouterDestroy(r);
    }
}

int main(void) {
    guard_page_end = guard_page_map(1);
    RUN(test_literal_routes_match_exactly);
    RUN(test_long_literals_sharing_a_prefix);
    RUN(test_empty_segments_match_only_empty_literals);
    RUN(test_params_capture_segments_at_any_depth);
    RUN(test_param_names_belong_to_each_route);
    RUN(test_wildcard_captures_the_remainder);
    RUN(test_literal_beats_param_beats_wildcard);
    RUN(test_failed_branches_backtrack);
    RUN(test_a_branch_with_the_method_wins_over_a_more_specific_one_without);
    RUN(test_404_and_405_with_the_allow_list);
    RUN(test_memo_keeps_404_and_405);
    RUN(test_memo_keys_router_method_and_path);
    RUN(test_get_answers_head_unless_head_has_a_route);
    RUN(test_any_method_routes);
    RUN(test_duplicate_routes_are_refused);
    RUN(test_malformed_specs_are_refused);
    RUN(test_parameter_limit);
    RUN(test_two_thousand_routes);
    RUN(test_random_tables_agree_with_brute_force);
    return CHECK_SUMMARY();
}
