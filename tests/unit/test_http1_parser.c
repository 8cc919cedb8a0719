/* test_http1_parser.c — the request-head parser: each accepted form with every
 * parsed field, each rejection with its exact status, the limits, and the same
 * verdict however the input is split into calls.
 *
 * Every parse reads its input from the very end of a page followed by an
 * inaccessible page, so reading one byte past len crashes the test. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "guard_page.h"
#include "xhttp/http1/http1_parser.h"

#define MAX_FIELDS 32
#define GUARDED_BYTES (64 * 1024)

static const xHttp1Limits DEFAULT_LIMITS = {1024, 4096, 16};

static char *guard_end; /* one past the last readable byte */

/* Fields land here; the slots past the limit must stay untouched. */
static xHttp1Header fields[MAX_FIELDS + 1];
static const xHttp1Header UNTOUCHED = {{"untouched", 9}, {"untouched", 9}};

/* Parses raw[0, n) placed right before the guard page. */
static int parse(const char *raw, size_t n, size_t prev_len, const xHttp1Limits *limits, xHttp1Request *req) {
    char *at = guard_end - n;
    memcpy(at, raw, n);
    for (size_t i = 0; i <= MAX_FIELDS; i++) fields[i] = UNTOUCHED;
    memset(req, 0x5A, sizeof *req); /* nothing may depend on what was there */
    req->headers = fields;
    int r = xHttp1ParseRequest(at, n, prev_len, req, limits);
    /* Counted only when broken, or it would swamp the totals. */
    if (fields[limits->max_headers].name.data != UNTOUCHED.name.data) {
        CHECK_MSG(false, "field %zu written past max_headers", limits->max_headers);
    }
    return r;
}

/* ---- Comparing parses ---- */

#define DESC_CAP 8192

/* Appends to a description, which stops growing at DESC_CAP. */
static size_t put(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static size_t put(char *out, size_t n, const char *fmt, ...) {
    if (n >= DESC_CAP) return n;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(out + n, DESC_CAP - n, fmt, ap);
    va_end(ap);
    return k < 0 ? n : n + (size_t)k;
}

#define V(s) (int)(s).len, (s).data

/* Everything a parse reports, as text: two parses agree when these match. */
static void describe(char *out, int r, const xHttp1Request *req) {
    size_t n = put(out, 0, "r=%d", r);
    if (r == XHTTP1_ERROR) put(out, n, " status=%d", req->error_status);
    if (r <= 0) return;
    n = put(out, n,
            " [%.*s] [%.*s] [%.*s] [%.*s] 1.%d cl=%lld chunked=%d ka=%d expect=%d up=%d "
            "host=[%.*s]",
            V(req->method), V(req->target), V(req->path), V(req->query), req->minor_version,
            (long long)req->content_length, req->chunked, req->keep_alive, req->expect_continue, req->upgrade,
            V(req->host));
    for (size_t i = 0; i < req->num_headers; i++) {
        n = put(out, n, " {%.*s: %.*s}", V(req->headers[i].name), V(req->headers[i].value));
    }
}

/* Parses raw whole, byte by byte and split in two at every offset, carrying
 * prev_len, and checks that every way gives the whole's verdict: a prefix may
 * only be INCOMPLETE or fail as the whole does. Returns the whole's result. */
static int check_any_split(const char *name, const char *raw, size_t len, const xHttp1Limits *limits) {
    static char whole[DESC_CAP], got[DESC_CAP];
    xHttp1Request req;
    int w = parse(raw, len, 0, limits, &req);
    describe(whole, w, &req);

    size_t prev = 0, n;
    int r = XHTTP1_INCOMPLETE;
    for (n = 1; n <= len && r == XHTTP1_INCOMPLETE; n++) {
        r = parse(raw, n, prev, limits, &req);
        prev = n;
    }
    describe(got, r, &req);
    CHECK_MSG(strcmp(got, whole) == 0, "%s: byte by byte stopped at %zu with %s, whole gives %s", name, n - 1,
              got, whole);

    size_t bad_k = 0;
    for (size_t k = 1; k < len && !bad_k; k++) {
        r = parse(raw, k, 0, limits, &req);
        if (r == XHTTP1_INCOMPLETE) r = parse(raw, len, k, limits, &req);
        describe(got, r, &req);
        if (strcmp(got, whole) != 0) bad_k = k;
    }
    CHECK_MSG(bad_k == 0, "%s: split at %zu gives %s, whole gives %s", name, bad_k, got, whole);
    return w;
}

/* ---- Accepted requests ---- */

typedef struct ValidCase {
    const char *name;
    const char *raw;
    size_t len;
    size_t consumed; /* 0: all of raw */
    const char *method, *target, *path, *query;
    int minor;
    const char *fields[8][2];   /* name, value; ends at a NULL name */
    const char *content_length; /* NULL: absent */
    bool chunked, keep_alive, expect_continue, upgrade;
    const char *host;    /* NULL: empty */
    xHttp1Limits limits; /* all zero: DEFAULT_LIMITS */
} ValidCase;

#define RAW(s) .raw = s, .len = sizeof(s) - 1

#define LONG_PATH "/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define LONG_QUERY "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define UA "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko)"
#define REQ1 "GET /first HTTP/1.1\r\nHost: a\r\n\r\n"
#define REQ2 "GET /second HTTP/1.1\r\nHost: b\r\n\r\n"

static const ValidCase VALID[] = {
    {"simple GET", RAW("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"), .method = "GET", .target = "/",
     .path = "/", .query = "", .minor = 1, .fields = {{"Host", "example.com"}}, .keep_alive = true,
     .host = "example.com"},
    {"path and query", RAW("GET /search/all?q=a&b=c HTTP/1.1\r\nHost: h\r\n\r\n"), .method = "GET",
     .target = "/search/all?q=a&b=c", .path = "/search/all", .query = "q=a&b=c", .minor = 1,
     .fields = {{"Host", "h"}}, .keep_alive = true, .host = "h"},
    {"empty query", RAW("GET /a? HTTP/1.1\r\nHost: h\r\n\r\n"), .method = "GET", .target = "/a?",
     .path = "/a", .query = "", .minor = 1, .fields = {{"Host", "h"}}, .keep_alive = true, .host = "h"},
    {"second '?' belongs to the query", RAW("GET /a?b?c=/d HTTP/1.1\r\nHost: h\r\n\r\n"), .method = "GET",
     .target = "/a?b?c=/d", .path = "/a", .query = "b?c=/d", .minor = 1, .fields = {{"Host", "h"}},
     .keep_alive = true, .host = "h"},
    {"every visible byte in a target",
     RAW("GET /!\"#$%&'()*+,-.:;<=>@[\\]^_`{|}~09AZaz?!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~ "
         "HTTP/1.1\r\nHost: h\r\n\r\n"),
     .method = "GET", .target = "/!\"#$%&'()*+,-.:;<=>@[\\]^_`{|}~09AZaz?!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
     .path = "/!\"#$%&'()*+,-.:;<=>@[\\]^_`{|}~09AZaz", .query = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
     .minor = 1, .fields = {{"Host", "h"}}, .keep_alive = true, .host = "h"},
    {"HTTP/1.0 without Host closes by default", RAW("GET /x HTTP/1.0\r\n\r\n"), .method = "GET",
     .target = "/x", .path = "/x", .query = "", .minor = 0},
    {"HTTP/1.0 with Connection: Keep-Alive", RAW("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"),
     .method = "GET", .target = "/", .path = "/", .query = "", .minor = 0,
     .fields = {{"Connection", "Keep-Alive"}}, .keep_alive = true},
    {"HTTP/1.0 keep-alive loses to close", RAW("GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n"),
     .method = "GET", .target = "/", .path = "/", .query = "", .minor = 0,
     .fields = {{"Connection", "keep-alive, close"}}},
    {"HTTP/1.0 with a Host", RAW("GET / HTTP/1.0\r\nHost: h\r\n\r\n"), .method = "GET", .target = "/",
     .path = "/", .query = "", .minor = 0, .fields = {{"Host", "h"}}, .host = "h"},
    {"HTTP/1.1 Connection: close", RAW("GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"),
     .method = "GET", .target = "/", .path = "/", .query = "", .minor = 1,
     .fields = {{"Host", "h"}, {"Connection", "close"}}, .host = "h"},
    {"close found in a list in any case",
     RAW("GET / HTTP/1.1\r\nHost: h\r\nConnection: foo ,, CLOSE\t,bar\r\n\r\n"), .method = "GET",
     .target = "/", .path = "/", .query = "", .minor = 1,
     .fields = {{"Host", "h"}, {"Connection", "foo ,, CLOSE\t,bar"}}, .host = "h"},
    {"close found in a second Connection field",
     RAW("GET / HTTP/1.1\r\nHost: h\r\nConnection: foo\r\nconnection: close\r\n\r\n"), .method = "GET",
     .target = "/", .path = "/", .query = "", .minor = 1,
     .fields = {{"Host", "h"}, {"Connection", "foo"}, {"connection", "close"}}, .host = "h"},
    {"closed is not close", RAW("GET / HTTP/1.1\r\nHost: h\r\nConnection: closed\r\n\r\n"), .method = "GET",
     .target = "/", .path = "/", .query = "", .minor = 1, .fields = {{"Host", "h"}, {"Connection", "closed"}},
     .keep_alive = true, .host = "h"},
    {"Content-Length", RAW("POST /upload HTTP/1.1\r\nHost: h\r\nContent-Length: 42\r\n\r\n"),
     .method = "POST", .target = "/upload", .path = "/upload", .query = "", .minor = 1,
     .fields = {{"Host", "h"}, {"Content-Length", "42"}}, .content_length = "42", .keep_alive = true,
     .host = "h"},
    {"Content-Length zero with leading zeros and OWS",
     RAW("POST / HTTP/1.1\r\nHost: h\r\ncontent-length:\t 000 \r\n\r\n"), .method = "POST", .target = "/",
     .path = "/", .query = "", .minor = 1, .fields = {{"Host", "h"}, {"content-length", "000"}},
     .content_length = "0", .keep_alive = true, .host = "h"},
    {"largest Content-Length",
     RAW("PUT / HTTP/1.1\r\nHost: h\r\nContent-Length: 9223372036854775807\r\n\r\n"), .method = "PUT",
     .target = "/", .path = "/", .query = "", .minor = 1,
     .fields = {{"Host", "h"}, {"Content-Length", "9223372036854775807"}},
     .content_length = "9223372036854775807", .keep_alive = true, .host = "h"},
    {"Content-Length in HTTP/1.0", RAW("POST / HTTP/1.0\r\nContent-Length: 5\r\n\r\n"), .method = "POST",
     .target = "/", .path = "/", .query = "", .minor = 0, .fields = {{"Content-Length", "5"}},
     .content_length = "5"},
    {"chunked", RAW("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"), .method = "POST",
     .target = "/", .path = "/", .query = "", .minor = 1,
     .fields = {{"Host", "h"}, {"Transfer-Encoding", "chunked"}}, .chunked = true, .keep_alive = true,
     .host = "h"},
    {"chunked in any case, with empty list elements",
     RAW("POST / HTTP/1.1\r\nHost: h\r\nTRANSFER-ENCODING: , CHUNKED ,\r\n\r\n"), .method = "POST",
     .target = "/", .path = "/", .query = "", .minor = 1,
     .fields = {{"Host", "h"}, {"TRANSFER-ENCODING", ", CHUNKED ,"}}, .chunked = true, .keep_alive = true,
     .host = "h"},
    {"Expect: 100-continue",
     RAW("PUT / HTTP/1.1\r\nHost: h\r\nExpect: 100-Continue\r\n"
         "Content-Length: 1\r\n\r\n"),
     .method = "PUT", .target = "/", .path = "/", .query = "", .minor = 1,
     .fields = {{"Host", "h"}, {"Expect", "100-Continue"}, {"Content-Length", "1"}}, .content_length = "1",
     .keep_alive = true, .expect_continue = true, .host = "h"},
    {"other expectations are left alone", RAW("PUT / HTTP/1.1\r\nHost: h\r\nExpect: 100-continuex\r\n\r\n"),
     .method = "PUT", .target = "/", .path = "/", .query = "", .minor = 1,
     .fields = {{"Host", "h"}, {"Expect", "100-continuex"}}, .keep_alive = true, .host = "h"},
    {"HTTP/1.0 ignores Expect", RAW("PUT / HTTP/1.0\r\nExpect: 100-continue\r\n\r\n"), .method = "PUT",
     .target = "/", .path = "/", .query = "", .minor = 0, .fields = {{"Expect", "100-continue"}}},
    {"upgrade",
     RAW("GET /ws HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, Upgrade\r\n"
         "Upgrade: websocket\r\n\r\n"),
     .method = "GET", .target = "/ws", .path = "/ws", .query = "", .minor = 1,
     .fields = {{"Host", "h"}, {"Connection", "keep-alive, Upgrade"}, {"Upgrade", "websocket"}},
     .keep_alive = true, .upgrade = true, .host = "h"},
    {"Upgrade field without the Connection token",
     RAW("GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n\r\n"), .method = "GET", .target = "/",
     .path = "/", .query = "", .minor = 1, .fields = {{"Host", "h"}, {"Upgrade", "websocket"}},
     .keep_alive = true, .host = "h"},
    {"Connection token without an Upgrade field",
     RAW("GET / HTTP/1.1\r\nHost: h\r\nConnection: upgrade\r\n\r\n"), .method = "GET", .target = "/",
     .path = "/", .query = "", .minor = 1, .fields = {{"Host", "h"}, {"Connection", "upgrade"}},
     .keep_alive = true, .host = "h"},
    {"values lose surrounding whitespace only",
     RAW("GET / HTTP/1.1\r\nHost:h\r\nX-A: \t a  b\tc \t \r\nX-Empty:\r\nX-Blank: \t \r\n\r\n"),
     .method = "GET", .target = "/", .path = "/", .query = "", .minor = 1,
     .fields = {{"Host", "h"}, {"X-A", "a  b\tc"}, {"X-Empty", ""}, {"X-Blank", ""}}, .keep_alive = true,
     .host = "h"},
    {"obs-text and every visible byte in a value",
     RAW("GET / HTTP/1.1\r\nHost: h\r\n"
         "X-A: caf\xc3\xa9 \x80\xff !\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~\r\n\r\n"),
     .method = "GET", .target = "/", .path = "/", .query = "", .minor = 1,
     .fields = {{"Host", "h"}, {"X-A", "caf\xc3\xa9 \x80\xff !\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"}},
     .keep_alive = true, .host = "h"},
    {"every tchar in a name and a method",
     RAW("!#$%&'*+-.^_`|~09AZaz / HTTP/1.1\r\nHost: h\r\n!#$%&'*+-.^_`|~09AZaz: v\r\n\r\n"),
     .method = "!#$%&'*+-.^_`|~09AZaz", .target = "/", .path = "/", .query = "", .minor = 1,
     .fields = {{"Host", "h"}, {"!#$%&'*+-.^_`|~09AZaz", "v"}}, .keep_alive = true, .host = "h"},
    {"methods are case-sensitive tokens, kept as sent", RAW("get / HTTP/1.1\r\nHost: h\r\n\r\n"),
     .method = "get", .target = "/", .path = "/", .query = "", .minor = 1, .fields = {{"Host", "h"}},
     .keep_alive = true, .host = "h"},
    {"repeated ordinary fields are all kept, in order",
     RAW("GET / HTTP/1.1\r\nX-A: 1\r\nHost: h\r\nx-a: 2\r\nX-A: 3\r\n\r\n"), .method = "GET", .target = "/",
     .path = "/", .query = "", .minor = 1,
     .fields = {{"X-A", "1"}, {"Host", "h"}, {"x-a", "2"}, {"X-A", "3"}}, .keep_alive = true, .host = "h"},
    {"Host with a port", RAW("GET / HTTP/1.1\r\nhOsT: example.com:8080\r\n\r\n"), .method = "GET",
     .target = "/", .path = "/", .query = "", .minor = 1, .fields = {{"hOsT", "example.com:8080"}},
     .keep_alive = true, .host = "example.com:8080"},
    {"Host as an IPv6 literal", RAW("GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n"), .method = "GET",
     .target = "/", .path = "/", .query = "", .minor = 1, .fields = {{"Host", "[::1]:80"}},
     .keep_alive = true, .host = "[::1]:80"},
    {"empty Host (RFC 9112 §3.2)", RAW("GET / HTTP/1.1\r\nHost:\r\n\r\n"), .method = "GET", .target = "/",
     .path = "/", .query = "", .minor = 1, .fields = {{"Host", ""}}, .keep_alive = true},
    {"leading empty lines are skipped and consumed", RAW("\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n"),
     .method = "GET", .target = "/", .path = "/", .query = "", .minor = 1, .fields = {{"Host", "h"}},
     .keep_alive = true, .host = "h"},
    {"pipelined: stops at the end of the first head", RAW(REQ1 REQ2), .consumed = sizeof(REQ1) - 1,
     .method = "GET", .target = "/first", .path = "/first", .query = "", .minor = 1,
     .fields = {{"Host", "a"}}, .keep_alive = true, .host = "a"},
    {"body bytes after the head are not consumed",
     RAW("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n\r\n\r\n\r\n"),
     .consumed = sizeof("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n\r\n") - 1, .method = "POST",
     .target = "/", .path = "/", .query = "", .minor = 1, .fields = {{"Host", "h"}, {"Content-Length", "4"}},
     .content_length = "4", .keep_alive = true, .host = "h"},
    {"absolute-form: the target's authority is the host",
     RAW("GET http://example.com:8080/a/b?x=1 HTTP/1.1\r\nHost: other\r\n\r\n"), .method = "GET",
     .target = "http://example.com:8080/a/b?x=1", .path = "/a/b", .query = "x=1", .minor = 1,
     .fields = {{"Host", "other"}}, .keep_alive = true, .host = "example.com:8080"},
    {"absolute-form https without a path", RAW("GET HTTPS://example.com HTTP/1.1\r\nHost: x\r\n\r\n"),
     .method = "GET", .target = "HTTPS://example.com", .path = "/", .query = "", .minor = 1,
     .fields = {{"Host", "x"}}, .keep_alive = true, .host = "example.com"},
    {"absolute-form with a query and no path", RAW("GET http://example.com?x=/y HTTP/1.1\r\nHost: x\r\n\r\n"),
     .method = "GET", .target = "http://example.com?x=/y", .path = "/", .query = "x=/y", .minor = 1,
     .fields = {{"Host", "x"}}, .keep_alive = true, .host = "example.com"},
    {"absolute-form in HTTP/1.0 without Host", RAW("GET http://h/p HTTP/1.0\r\n\r\n"), .method = "GET",
     .target = "http://h/p", .path = "/p", .query = "", .minor = 0, .host = "h"},
    {"asterisk-form with OPTIONS", RAW("OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n"), .method = "OPTIONS",
     .target = "*", .path = "*", .query = "", .minor = 1, .fields = {{"Host", "h"}}, .keep_alive = true,
     .host = "h"},
    {"authority-form with CONNECT", RAW("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"),
     .method = "CONNECT", .target = "example.com:443", .path = "", .query = "", .minor = 1,
     .fields = {{"Host", "example.com:443"}}, .keep_alive = true, .host = "example.com:443"},
    {"authority-form with an IPv6 literal", RAW("CONNECT [::1]:8443 HTTP/1.1\r\nHost: h\r\n\r\n"),
     .method = "CONNECT", .target = "[::1]:8443", .path = "", .query = "", .minor = 1,
     .fields = {{"Host", "h"}}, .keep_alive = true, .host = "h"},
    {"long values and targets cross the 16-byte scan blocks",
     RAW("GET " LONG_PATH "?" LONG_QUERY " HTTP/1.1\r\nHost: h\r\nUser-Agent: " UA "\t \r\n\r\n"),
     .method = "GET", .target = LONG_PATH "?" LONG_QUERY, .path = LONG_PATH, .query = LONG_QUERY, .minor = 1,
     .fields = {{"Host", "h"}, {"User-Agent", UA}}, .keep_alive = true, .host = "h"},
    {"request line exactly at max_request_line", RAW("GET /0123456789 HTTP/1.1\r\nHost: h\r\n\r\n"),
     .method = "GET", .target = "/0123456789", .path = "/0123456789", .query = "", .minor = 1,
     .fields = {{"Host", "h"}}, .keep_alive = true, .host = "h", .limits = {24, 4096, 16}},
    {"head exactly at max_head", RAW("GET / HTTP/1.1\r\nHost: h\r\nX: 0123\r\n\r\n"), .method = "GET",
     .target = "/", .path = "/", .query = "", .minor = 1, .fields = {{"Host", "h"}, {"X", "0123"}},
     .keep_alive = true, .host = "h", .limits = {1024, 36, 16}},
    {"exactly max_headers fields", RAW("GET / HTTP/1.1\r\nHost: h\r\nA: 1\r\nB: 2\r\n\r\n"), .method = "GET",
     .target = "/", .path = "/", .query = "", .minor = 1, .fields = {{"Host", "h"}, {"A", "1"}, {"B", "2"}},
     .keep_alive = true, .host = "h", .limits = {1024, 4096, 3}},
    {"no fields allowed, none sent", RAW("GET / HTTP/1.0\r\n\r\n"), .method = "GET", .target = "/",
     .path = "/", .query = "", .minor = 0, .limits = {1024, 4096, 0}},
};

static const xHttp1Limits *limits_of(const xHttp1Limits *l) { return l->max_head ? l : &DEFAULT_LIMITS; }

/* Checks every field of one whole parse against what c expects. */
static void check_fields(const ValidCase *c, const char *buf, int r, const xHttp1Request *req) {
    size_t consumed = c->consumed ? c->consumed : c->len;
    CHECK_MSG(r == (int)consumed, "%s: returned %d (status %d), expected %zu", c->name, r, req->error_status,
              consumed);
    if (r <= 0) return;
    CHECK_STR(req->method, c->method);
    CHECK_STR(req->target, c->target);
    CHECK_STR(req->path, c->path);
    CHECK_STR(req->query, c->query);
    CHECK_STR(req->host, c->host ? c->host : "");
    CHECK_EQ_INT(req->minor_version, c->minor);
    CHECK_EQ_INT(req->content_length, c->content_length ? strtoll(c->content_length, NULL, 10) : -1);
    CHECK_MSG(req->chunked == c->chunked, "%s: chunked", c->name);
    CHECK_MSG(req->keep_alive == c->keep_alive, "%s: keep_alive", c->name);
    CHECK_MSG(req->expect_continue == c->expect_continue, "%s: expect_continue", c->name);
    CHECK_MSG(req->upgrade == c->upgrade, "%s: upgrade", c->name);
    size_t n = 0;
    while (n < 8 && c->fields[n][0]) n++;
    CHECK_MSG(req->num_headers == n, "%s: %zu fields, expected %zu", c->name, req->num_headers, n);
    for (size_t i = 0; i < n && i < req->num_headers; i++) {
        CHECK_STR(req->headers[i].name, c->fields[i][0]);
        CHECK_STR(req->headers[i].value, c->fields[i][1]);
    }
    /* Zero copies: the views point into the parsed bytes (the "/" of an
     * absolute-form target without a path is the one exception). */
    size_t lead = 0;
    while (c->raw[lead] == '\r') lead += 2;
    CHECK_MSG(req->method.data == buf + lead, "%s: method not a view of the input", c->name);
    CHECK_MSG(req->target.data > buf && req->target.data < buf + r, "%s: target not a view", c->name);
}

static void test_valid_requests_parse_whole_with_every_field(void) {
    for (size_t i = 0; i < sizeof VALID / sizeof VALID[0]; i++) {
        const ValidCase *c = &VALID[i];
        xHttp1Request req;
        int r = parse(c->raw, c->len, 0, limits_of(&c->limits), &req);
        check_fields(c, guard_end - c->len, r, &req);
    }
}

static void test_valid_requests_parse_the_same_however_split(void) {
    for (size_t i = 0; i < sizeof VALID / sizeof VALID[0]; i++) {
        const ValidCase *c = &VALID[i];
        int r = check_any_split(c->name, c->raw, c->len, limits_of(&c->limits));
        CHECK_MSG(r > 0, "%s: rejected", c->name);
    }
}

/* ---- Rejected requests ---- */

typedef struct InvalidCase {
    const char *name;
    const char *raw;
    size_t len;
    int status;
    xHttp1Limits limits; /* all zero: DEFAULT_LIMITS */
} InvalidCase;

#define GET_WITH(fields) "GET / HTTP/1.1\r\n" fields "\r\n"
#define POST_WITH(fields) "POST / HTTP/1.1\r\nHost: h\r\n" fields "\r\n"

static const InvalidCase INVALID[] = {
    /* Request line */
    {"empty method", RAW(" / HTTP/1.1\r\nHost: h\r\n\r\n"), 400},
    {"'(' in a method", RAW("GE(T / HTTP/1.1\r\nHost: h\r\n\r\n"), 400},
    {"control byte in a method", RAW("G\x01T / HTTP/1.1\r\nHost: h\r\n\r\n"), 400},
    {"NUL in a method", RAW("G\0T / HTTP/1.1\r\nHost: h\r\n\r\n"), 400},
    {"two spaces before the target", RAW("GET  / HTTP/1.1\r\nHost: h\r\n\r\n"), 400},
    {"two spaces before the version", RAW("GET /  HTTP/1.1\r\nHost: h\r\n\r\n"), 400},
    {"HTAB as a separator", RAW("GET\t/ HTTP/1.1\r\nHost: h\r\n\r\n"), 400},
    {"no target", RAW("GET HTTP/1.1\r\nHost: h\r\n\r\n"), 400},
    {"no version", RAW("GET /\r\nHost: h\r\n\r\n"), 400},
    {"empty version", RAW("GET / \r\nHost: h\r\n\r\n"), 400},
    {"request line alone without version", RAW("GET /\r\n\r\n"), 400},
    {"space after the version", RAW("GET / HTTP/1.1 \r\nHost: h\r\n\r\n"), 400},
    {"lower-case HTTP-name", RAW("GET / http/1.1\r\nHost: h\r\n\r\n"), 400},
    {"version without minor", RAW("GET / HTTP/1\r\nHost: h\r\n\r\n"), 400},
    {"two-digit major", RAW("GET / HTTP/11.1\r\nHost: h\r\n\r\n"), 400},
    {"three-part version", RAW("GET / HTTP/1.1.1\r\nHost: h\r\n\r\n"), 400},
    {"letter as minor", RAW("GET / HTTP/1.x\r\nHost: h\r\n\r\n"), 400},
    {"space inside the version", RAW("GET / HTTP /1.1\r\nHost: h\r\n\r\n"), 400},
    {"HTTP/1.2", RAW("GET / HTTP/1.2\r\nHost: h\r\n\r\n"), 505},
    {"HTTP/2.0", RAW("GET / HTTP/2.0\r\nHost: h\r\n\r\n"), 505},
    {"HTTP/3.0", RAW("GET / HTTP/3.0\r\nHost: h\r\n\r\n"), 505},
    {"HTTP/0.9", RAW("GET / HTTP/0.9\r\n\r\n"), 505},
    {"HTTP/9.9", RAW("GET / HTTP/9.9\r\nHost: h\r\n\r\n"), 505},
    /* Targets */
    {"control byte in a target", RAW("GET /a\x01 HTTP/1.1\r\nHost: h\r\n\r\n"), 400},
    {"NUL in a target", RAW("GET /pi\0ng HTTP/1.1\r\nHost: h\r\n\r\n"), 400},
    {"HTAB in a target", RAW("GET /a\tb HTTP/1.1\r\nHost: h\r\n\r\n"), 400},
    {"DEL in a target", RAW("GET /a\x7f HTTP/1.1\r\nHost: h\r\n\r\n"), 400},
    {"non-ASCII in a target", RAW("GET /caf\xc3\xa9 HTTP/1.1\r\nHost: h\r\n\r\n"), 400},
    {"relative target", RAW("GET a/b HTTP/1.1\r\nHost: h\r\n\r\n"), 400},
    {"query without a path", RAW("GET ?a HTTP/1.1\r\nHost: h\r\n\r\n"), 400},
    {"asterisk-form with GET", RAW("GET * HTTP/1.1\r\nHost: h\r\n\r\n"), 400},
    {"asterisk and more with OPTIONS", RAW("OPTIONS *x HTTP/1.1\r\nHost: h\r\n\r\n"), 400},
    {"origin-form with CONNECT", RAW("CONNECT / HTTP/1.1\r\nHost: h\r\n\r\n"), 400},
    {"CONNECT without a port", RAW("CONNECT example.com HTTP/1.1\r\nHost: h\r\n\r\n"), 400},
    {"CONNECT with an empty port", RAW("CONNECT example.com: HTTP/1.1\r\nHost: h\r\n\r\n"), 400},
    {"CONNECT without a host", RAW("CONNECT :443 HTTP/1.1\r\nHost: h\r\n\r\n"), 400},
    {"CONNECT with a letter in the port", RAW("CONNECT h:44a HTTP/1.1\r\nHost: h\r\n\r\n"), 400},
    {"CONNECT with userinfo", RAW("CONNECT u@h:443 HTTP/1.1\r\nHost: h\r\n\r\n"), 400},
    {"CONNECT with a path", RAW("CONNECT h:443/x HTTP/1.1\r\nHost: h\r\n\r\n"), 400},
    {"authority-form with GET", RAW("GET example.com:443 HTTP/1.1\r\nHost: h\r\n\r\n"), 400},
    {"absolute-form with another scheme", RAW("GET ftp://h/ HTTP/1.1\r\nHost: h\r\n\r\n"), 400},
    {"absolute-form with only a scheme", RAW("GET http:// HTTP/1.1\r\nHost: h\r\n\r\n"), 400},
    {"absolute-form with an empty host", RAW("GET http:///p HTTP/1.1\r\nHost: h\r\n\r\n"), 400},
    {"absolute-form with userinfo", RAW("GET http://u@h/p HTTP/1.1\r\nHost: h\r\n\r\n"), 400},
    {"absolute-form with a fragment in the host", RAW("GET http://h#f HTTP/1.1\r\nHost: h\r\n\r\n"), 400},
    /* Line endings and NUL */
    {"bare CR ending the request line", RAW("GET / HTTP/1.1\rHost: h\r\n\r\n"), 400},
    {"bare CR in a value", RAW(GET_WITH("Host: h\r\nX-A: a\rb\r\n")), 400},
    {"bare CR ending a value", RAW(GET_WITH("Host: h\rX-A: b\r\n")), 400},
    {"bare CR in a name", RAW(GET_WITH("Host: h\r\nX-A\r: b\r\n")), 400},
    {"bare CR before the request", RAW("\rGET / HTTP/1.1\r\nHost: h\r\n\r\n"), 400},
    {"bare CR among leading empty lines", RAW("\r\n\r\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n"), 400},
    {"CR CR LF ending the head", RAW("GET / HTTP/1.1\r\nHost: h\r\r\n\r\n"), 400},
    {"bare LF everywhere", RAW("GET / HTTP/1.1\nHost: h\n\n"), 400},
    {"bare LF after a field", RAW("GET / HTTP/1.1\r\nHost: h\nX-A: b\r\n\r\n"), 400},
    {"bare LF ending the head", RAW("GET / HTTP/1.1\r\nHost: h\r\n\n"), 400},
    {"bare LF before the request", RAW("\nGET / HTTP/1.1\r\nHost: h\r\n\r\n"), 400},
    {"bare LF after a leading empty line", RAW("\r\n\nGET / HTTP/1.1\r\nHost: h\r\n\r\n"), 400},
    {"bare LF in a request line", RAW("GET /a\nb HTTP/1.1\r\nHost: h\r\n\r\n"), 400},
    {"NUL in a value", RAW(GET_WITH("Host: h\r\nX-A: a\0b\r\n")), 400},
    {"NUL in a name", RAW(GET_WITH("Host: h\r\nX-\0A: b\r\n")), 400},
    {"NUL before the request", RAW("\0GET / HTTP/1.1\r\nHost: h\r\n\r\n"), 400},
    /* Field syntax */
    {"line without a colon", RAW(GET_WITH("Host: h\r\nX-No-Colon\r\n")), 400},
    {"line without a colon but a value", RAW(GET_WITH("Host: h\r\nX-No-Colon value\r\n")), 400},
    {"space before the colon", RAW(GET_WITH("Host : h\r\n")), 400},
    {"HTAB before the colon", RAW(GET_WITH("Host: h\r\nX-A\t: b\r\n")), 400},
    {"space before the colon of Content-Length", RAW(POST_WITH("Content-Length : 5\r\n")), 400},
    {"'(' in a name", RAW(GET_WITH("Host: h\r\nX(A): b\r\n")), 400},
    {"space in a name", RAW(GET_WITH("Host: h\r\nX A: b\r\n")), 400},
    {"DEL in a name",
     RAW(GET_WITH("Host: h\r\nX\x7f"
                  "A: b\r\n")),
     400},
    {"non-ASCII in a name", RAW(GET_WITH("Host: h\r\nX-\xc3\xa4: b\r\n")), 400},
    {"empty name", RAW(GET_WITH("Host: h\r\n: empty-name\r\n")), 400},
    {"obs-fold with SP", RAW(GET_WITH("Host: h\r\nX-A: a\r\n folded\r\n")), 400},
    {"obs-fold with HTAB", RAW(GET_WITH("Host: h\r\nX-A: a\r\n\tfolded\r\n")), 400},
    {"obs-fold continuing Transfer-Encoding", RAW(POST_WITH("Transfer-Encoding:\r\n chunked\r\n")), 400},
    {"whitespace before the first field", RAW("GET / HTTP/1.1\r\n Host: h\r\n\r\n"), 400},
    {"control byte in a value",
     RAW(GET_WITH("Host: h\r\nX-A: a\x01"
                  "b\r\n")),
     400},
    {"DEL in a value",
     RAW(GET_WITH("Host: h\r\nX-A: a\x7f"
                  "b\r\n")),
     400},
    {"ESC in a value", RAW(GET_WITH("Host: h\r\nX-A: \x1b[0m\r\n")), 400},
    /* Host */
    {"HTTP/1.1 without Host", RAW(GET_WITH("")), 400},
    {"HTTP/1.1 without Host but with fields", RAW(GET_WITH("X-Host: h\r\n")), 400},
    {"two Host fields", RAW(GET_WITH("Host: a\r\nHost: b\r\n")), 400},
    {"two identical Host fields in different case", RAW(GET_WITH("Host: a\r\nhost: a\r\n")), 400},
    {"two Host fields in HTTP/1.0", RAW("GET / HTTP/1.0\r\nHost: a\r\nHost: a\r\n\r\n"), 400},
    {"space inside Host", RAW(GET_WITH("Host: a b\r\n")), 400},
    {"HTAB inside Host", RAW(GET_WITH("Host: a\tb\r\n")), 400},
    {"'/' in Host", RAW(GET_WITH("Host: a/b\r\n")), 400},
    {"'?' in Host", RAW(GET_WITH("Host: a?b\r\n")), 400},
    {"'#' in Host", RAW(GET_WITH("Host: a#b\r\n")), 400},
    {"userinfo in Host", RAW(GET_WITH("Host: user@a\r\n")), 400},
    {"non-ASCII in Host", RAW(GET_WITH("Host: caf\xc3\xa9\r\n")), 400},
    /* Content-Length */
    {"Content-Length: abc", RAW(POST_WITH("Content-Length: abc\r\n")), 400},
    {"Content-Length: -1", RAW(POST_WITH("Content-Length: -1\r\n")), 400},
    {"Content-Length: +5", RAW(POST_WITH("Content-Length: +5\r\n")), 400},
    {"Content-Length: 0x5", RAW(POST_WITH("Content-Length: 0x5\r\n")), 400},
    {"Content-Length: 5.0", RAW(POST_WITH("Content-Length: 5.0\r\n")), 400},
    {"empty Content-Length", RAW(POST_WITH("Content-Length: \r\n")), 400},
    {"Content-Length: 5 5", RAW(POST_WITH("Content-Length: 5 5\r\n")), 400},
    {"Content-Length: 5a", RAW(POST_WITH("Content-Length: 5a\r\n")), 400},
    {"Content-Length: 1_0", RAW(POST_WITH("Content-Length: 1_0\r\n")), 400},
    {"Content-Length list of differing values", RAW(POST_WITH("Content-Length: 5, 6\r\n")), 400},
    {"Content-Length list of identical values (strict)", RAW(POST_WITH("Content-Length: 5, 5\r\n")), 400},
    {"two differing Content-Length fields", RAW(POST_WITH("Content-Length: 5\r\nContent-Length: 6\r\n")),
     400},
    {"two identical Content-Length fields (strict)",
     RAW(POST_WITH("Content-Length: 5\r\ncontent-length: 5\r\n")), 400},
    {"Content-Length one past INT64_MAX", RAW(POST_WITH("Content-Length: 9223372036854775808\r\n")), 400},
    {"Content-Length past UINT64_MAX", RAW(POST_WITH("Content-Length: 18446744073709551621\r\n")), 400},
    {"Content-Length of forty digits",
     RAW(POST_WITH("Content-Length: 1000000000000000000000000000000000000000\r\n")), 400},
    /* Transfer-Encoding */
    {"Content-Length then Transfer-Encoding",
     RAW(POST_WITH("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n")), 400},
    {"Transfer-Encoding then Content-Length",
     RAW(POST_WITH("Transfer-Encoding: chunked\r\nContent-Length: 5\r\n")), 400},
    {"Content-Length: 0 with Transfer-Encoding",
     RAW(POST_WITH("Content-Length: 0\r\nTransfer-Encoding: chunked\r\n")), 400},
    {"Content-Length with an unknown coding",
     RAW(POST_WITH("Content-Length: 5\r\nTransfer-Encoding: gzip\r\n")), 400},
    {"chunked, gzip", RAW(POST_WITH("Transfer-Encoding: chunked, gzip\r\n")), 400},
    {"chunked, chunked", RAW(POST_WITH("Transfer-Encoding: chunked, chunked\r\n")), 400},
    {"chunked in two fields", RAW(POST_WITH("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n")),
     400},
    {"chunked then gzip in two fields",
     RAW(POST_WITH("Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n")), 400},
    {"empty Transfer-Encoding", RAW(POST_WITH("Transfer-Encoding: \r\n")), 400},
    {"Transfer-Encoding of empty elements", RAW(POST_WITH("Transfer-Encoding: , ,\r\n")), 400},
    {"Transfer-Encoding in HTTP/1.0", RAW("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"), 400},
    {"unknown coding in HTTP/1.0", RAW("POST / HTTP/1.0\r\nTransfer-Encoding: gzip\r\n\r\n"), 400},
    {"gzip", RAW(POST_WITH("Transfer-Encoding: gzip\r\n")), 501},
    {"gzip, chunked", RAW(POST_WITH("Transfer-Encoding: gzip, chunked\r\n")), 501},
    {"gzip then chunked in two fields",
     RAW(POST_WITH("Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n")), 501},
    {"deflate", RAW(POST_WITH("Transfer-Encoding: deflate\r\n")), 501},
    {"identity", RAW(POST_WITH("Transfer-Encoding: identity\r\n")), 501},
    {"xchunked", RAW(POST_WITH("Transfer-Encoding: xchunked\r\n")), 501},
    {"chunked with a parameter", RAW(POST_WITH("Transfer-Encoding: chunked;q=1\r\n")), 501},
    /* Limits */
    {"request line one byte over max_request_line",
     RAW("GET /01234567890 HTTP/1.1\r\nHost: h\r\n\r\n"),
     414,
     {24, 4096, 16}},
    {"request line over the limit, still incomplete",
     RAW("GET /0123456789012345678901234567"),
     414,
     {24, 4096, 16}},
    {"request line over the limit before a bare LF",
     RAW("GET /0123456789012345678901234567\nHost: h\r\n\r\n"),
     414,
     {24, 4096, 16}},
    {"request line over the limit after leading empty lines",
     RAW("\r\n\r\nGET /01234567890 HTTP/1.1\r\n"),
     414,
     {24, 4096, 16}},
    {"head one byte over max_head",
     RAW("GET / HTTP/1.1\r\nHost: h\r\nX: 01234\r\n\r\n"),
     431,
     {1024, 36, 16}},
    {"head over max_head, still incomplete",
     RAW("GET / HTTP/1.1\r\nHost: h\r\nX: 0123456789012"),
     431,
     {1024, 36, 16}},
    {"request line within its limit, head over max_head",
     RAW("GET /0123456789012345678901234567890123 HTTP/1.1\r\nHost: h\r\n\r\n"),
     431,
     {1024, 36, 16}},
    {"request line over its limit and over max_head: 414 names it",
     RAW("GET /0123456789012345678901234567890123456789"),
     414,
     {40, 36, 16}},
    {"request line over equal limits is 414, not 431",
     RAW("GET /0123456789012345678901234567 HTTP/1.1\r\nHost: h\r\n\r\n"),
     414,
     {32, 32, 16}},
    {"request line exactly at equal limits, then the head is over",
     RAW("GET /0123456789 HTTP/1.1\r\nHost: h\r\n\r\n"),
     431,
     {24, 24, 16}},
    {"leading empty lines count toward max_head",
     RAW("\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n"),
     431,
     {1024, 36, 16}},
    {"one field past max_headers",
     RAW(GET_WITH("Host: h\r\nA: 1\r\nB: 2\r\nC: 3\r\n")),
     431,
     {1024, 4096, 3}},
    {"a field when none are allowed", RAW("GET / HTTP/1.0\r\nA: 1\r\n\r\n"), 431, {1024, 4096, 0}},
};

static void test_invalid_requests_get_their_status_however_split(void) {
    for (size_t i = 0; i < sizeof INVALID / sizeof INVALID[0]; i++) {
        const InvalidCase *c = &INVALID[i];
        const xHttp1Limits *limits = limits_of(&c->limits);
        xHttp1Request req;
        int r = parse(c->raw, c->len, 0, limits, &req);
        CHECK_MSG(r == XHTTP1_ERROR && req.error_status == c->status,
                  "%s: returned %d status %d, expected %d", c->name, r,
                  r == XHTTP1_ERROR ? req.error_status : 0, c->status);
        check_any_split(c->name, c->raw, c->len, limits);
    }
}

/* ---- Limits at their exact boundaries ---- */

static void test_414_comes_once_max_request_line_plus_crlf_bytes_hold_no_lf(void) {
    const xHttp1Limits limits = {24, 4096, 16};
    const char *line = "GET /0123456789 HTTP/1.1\r\nHost: h\r\n\r\n"; /* 24 bytes + CRLF */
    const char *longer = "GET /01234567890 HTTP/1.1\r\nHost: h\r\n\r\n";
    xHttp1Request req;
    CHECK_EQ_INT(parse(line, 25, 0, &limits, &req), XHTTP1_INCOMPLETE);
    CHECK_EQ_INT(parse(line, 26, 25, &limits, &req), XHTTP1_INCOMPLETE);
    CHECK_EQ_INT(parse(longer, 25, 0, &limits, &req), XHTTP1_INCOMPLETE);
    CHECK_EQ_INT(parse(longer, 26, 25, &limits, &req), XHTTP1_ERROR);
    CHECK_EQ_INT(req.error_status, 414);
    CHECK_EQ_INT(parse(longer, 26, 0, &limits, &req), XHTTP1_ERROR);
    CHECK_EQ_INT(req.error_status, 414);
}

static void test_over_max_head_an_open_request_line_waits_to_tell_414_from_431(void) {
    const xHttp1Limits limits = {24, 24, 16};
    const char *longer = "GET /01234567890 HTTP/1.1\r\nHost: h\r\n\r\n"; /* 25 bytes */
    const char *exact = "GET /0123456789 HTTP/1.1\r\nHost: h\r\n\r\n";   /* 24 bytes */
    xHttp1Request req;
    CHECK_EQ_INT(parse(longer, 25, 0, &limits, &req), XHTTP1_INCOMPLETE);
    CHECK_EQ_INT(parse(longer, 26, 25, &limits, &req), XHTTP1_ERROR);
    CHECK_EQ_INT(req.error_status, 414);
    CHECK_EQ_INT(parse(exact, 25, 0, &limits, &req), XHTTP1_INCOMPLETE);
    CHECK_EQ_INT(parse(exact, 26, 25, &limits, &req), XHTTP1_ERROR);
    CHECK_EQ_INT(req.error_status, 431);
}

static void test_431_comes_once_bytes_pass_max_head(void) {
    const xHttp1Limits limits = {1024, 36, 16};
    const char *raw = "GET / HTTP/1.1\r\nHost: h\r\nX: 01234\r\n\r\n"; /* 37 bytes */
    xHttp1Request req;
    CHECK_EQ_INT(parse(raw, 36, 0, &limits, &req), XHTTP1_INCOMPLETE);
    CHECK_EQ_INT(parse(raw, 37, 36, &limits, &req), XHTTP1_ERROR);
    CHECK_EQ_INT(req.error_status, 431);
}

static void test_more_fields_than_max_headers_is_431_with_none_written_past(void) {
    const xHttp1Limits limits = {1024, 4096, MAX_FIELDS};
    char raw[2048] = "GET / HTTP/1.1\r\nHost: h\r\n";
    for (int i = 1; i <= MAX_FIELDS; i++) {
        snprintf(raw + strlen(raw), sizeof raw - strlen(raw), "F%d: %d\r\n", i, i);
    }
    strcat(raw, "\r\n");
    xHttp1Request req;
    CHECK_EQ_INT(parse(raw, strlen(raw), 0, &limits, &req), XHTTP1_ERROR);
    CHECK_EQ_INT(req.error_status, 431);
    CHECK(fields[MAX_FIELDS].name.data == UNTOUCHED.name.data);
}

/* ---- Every byte value at every offset of each part ----
 * The expectations are written from the RFC, apart from the parser's tables,
 * and the offsets cross the 16-byte blocks of the vector scans. */

#define SWEEP 48

static bool tchar_ok(int b) {
    return (b >= '0' && b <= '9') || (b >= 'A' && b <= 'Z') || (b >= 'a' && b <= 'z') ||
           (b != 0 && strchr("!#$%&'*+-.^_`|~", b) != NULL);
}
static bool target_ok(int b) { return b > 0x20 && b < 0x7F; }
static bool value_ok(int b) { return b == '\t' || (b >= 0x20 && b != 0x7F); }

/* Parses prefix + SWEEP filler bytes with b at pos + suffix; true when the
 * verdict is success exactly when ok, and otherwise a 400. */
static bool sweep_one(const char *prefix, char filler, int b, size_t pos, const char *suffix, bool ok,
                      xHttp1Request *req) {
    char raw[256];
    size_t n = strlen(prefix);
    memcpy(raw, prefix, n);
    memset(raw + n, filler, SWEEP);
    raw[n + pos] = (char)b;
    memcpy(raw + n + SWEEP, suffix, strlen(suffix));
    size_t len = n + SWEEP + strlen(suffix);
    int r = parse(raw, len, 0, &DEFAULT_LIMITS, req);
    return ok ? r == (int)len : r == XHTTP1_ERROR && req->error_status == 400;
}

static void test_each_byte_in_a_method(void) {
    for (int b = 0; b < 256; b++) {
        size_t bad = SWEEP;
        xHttp1Request req;
        for (size_t pos = 0; pos < SWEEP && bad == SWEEP; pos++) {
            if (!sweep_one("", 'M', b, pos, " / HTTP/1.1\r\nHost: h\r\n\r\n", tchar_ok(b), &req)) bad = pos;
        }
        CHECK_MSG(bad == SWEEP, "byte 0x%02x at %zu of a method", b, bad);
    }
}

static void test_each_byte_in_a_target(void) {
    for (int b = 0; b < 256; b++) {
        size_t bad = SWEEP;
        xHttp1Request req;
        for (size_t pos = 0; pos < SWEEP && bad == SWEEP; pos++) {
            bool ok = target_ok(b);
            if (!sweep_one("GET /", 't', b, pos, " HTTP/1.1\r\nHost: h\r\n\r\n", ok, &req) ||
                (ok && req.target.len != SWEEP + 1))
                bad = pos;
        }
        CHECK_MSG(bad == SWEEP, "byte 0x%02x at %zu of a target", b, bad);
    }
}

static void test_each_byte_in_a_field_name(void) {
    for (int b = 0; b < 256; b++) {
        if (b == ':') continue; /* ends the name early: another valid field */
        size_t bad = SWEEP;
        xHttp1Request req;
        for (size_t pos = 0; pos < SWEEP && bad == SWEEP; pos++) {
            bool ok = tchar_ok(b);
            if (!sweep_one("GET / HTTP/1.1\r\nHost: h\r\n", 'n', b, pos, ": v\r\n\r\n", ok, &req) ||
                (ok && req.headers[1].name.len != SWEEP))
                bad = pos;
        }
        CHECK_MSG(bad == SWEEP, "byte 0x%02x at %zu of a field name", b, bad);
    }
}

static void test_each_byte_in_a_field_value(void) {
    for (int b = 0; b < 256; b++) {
        size_t bad = SWEEP;
        xHttp1Request req;
        for (size_t pos = 0; pos < SWEEP && bad == SWEEP; pos++) {
            bool ok = value_ok(b);
            /* Whitespace at either end is trimmed off the value. */
            bool edge = (b == ' ' || b == '\t') && (pos == 0 || pos == SWEEP - 1);
            if (!sweep_one("GET / HTTP/1.1\r\nHost: h\r\nX: ", 'v', b, pos, "\r\n\r\n", ok, &req) ||
                (ok && req.headers[1].value.len != SWEEP - (size_t)edge))
                bad = pos;
        }
        CHECK_MSG(bad == SWEEP, "byte 0x%02x at %zu of a field value", b, bad);
    }
}

/* ---- Mutants ---- */

static uint64_t rng = 0x2545F4914F6CDD1DULL;

static uint64_t next_random(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* raw, printable, for a failure message. */
static const char *escaped(const char *raw, size_t len) {
    static char out[4 * 512 + 1];
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)raw[i];
        n += (size_t)snprintf(out + n, sizeof out - n, c >= 0x20 && c < 0x7F ? "%c" : "\\x%02x", c);
    }
    return out;
}

/* Valid requests with a few bytes replaced, inserted or deleted, under limits
 * that are sometimes tiny: whatever the verdict, every split must agree. */
static void test_mutated_requests_get_one_verdict_however_split(void) {
    static const char interesting[] = "\r\n\0 \t:,;?/#@\x7f\x80\xff"
                                      "aZ09";
    size_t n_valid = sizeof VALID / sizeof VALID[0];
    for (int round = 0; round < 600; round++) {
        const ValidCase *base = &VALID[next_random() % n_valid];
        char raw[512];
        size_t len = base->len;
        memcpy(raw, base->raw, len);
        for (int edits = 1 + (int)(next_random() % 3); edits > 0 && len > 1; edits--) {
            size_t pos = next_random() % len;
            char c = interesting[next_random() % (sizeof interesting - 1)];
            switch (next_random() % 3) {
            case 0: raw[pos] = c; break;
            case 1:
                memmove(raw + pos + 1, raw + pos, len++ - pos);
                raw[pos] = c;
                break;
            default: memmove(raw + pos, raw + pos + 1, --len - pos); break;
            }
        }
        xHttp1Limits limits = *limits_of(&base->limits);
        if (round % 2) {
            limits = (xHttp1Limits){1 + next_random() % 64, 1 + next_random() % 160, next_random() % 6};
        }
        check_any_split(escaped(raw, len), raw, len, &limits);
    }
}

int main(void) {
    guard_end = guard_page_map(GUARDED_BYTES);
    RUN(test_valid_requests_parse_whole_with_every_field);
    RUN(test_valid_requests_parse_the_same_however_split);
    RUN(test_invalid_requests_get_their_status_however_split);
    RUN(test_414_comes_once_max_request_line_plus_crlf_bytes_hold_no_lf);
    RUN(test_over_max_head_an_open_request_line_waits_to_tell_414_from_431);
    RUN(test_431_comes_once_bytes_pass_max_head);
    RUN(test_more_fields_than_max_headers_is_431_with_none_written_past);
    RUN(test_each_byte_in_a_method);
    RUN(test_each_byte_in_a_target);
    RUN(test_each_byte_in_a_field_name);
    RUN(test_each_byte_in_a_field_value);
    RUN(test_mutated_requests_get_one_verdict_however_split);
    return CHECK_SUMMARY();
}
