/* fuzz_http1_parser.c — the HTTP/1.1 request-head parser on arbitrary bytes.
 *
 * Input: byte 0 picks the limits (low bit) and a split point (the rest,
 * scaled to the input); the remaining bytes are the request. Checked after
 * every input:
 *   - the verdict is complete (0 < consumed <= size, the head ends in CRLF
 *     CRLF), INCOMPLETE, or ERROR with one of the documented statuses;
 *   - every view (method, target, path, query, host, each field) points
 *     inside the parsed head; the field count stays within max_headers and
 *     no slot past it is written;
 *   - the derived framing is coherent (content_length >= -1, minor 0 or 1,
 *     not both chunked and a length); method, target and (but for
 *     CONNECT) path are non-empty;
 *   - parsing the first k bytes and then, if INCOMPLETE, the whole input
 *     with prev_len = k gives the same verdict and views as parsing whole,
 *     and a prefix never gives a verdict the whole does not. */
#include <string.h>

#include "fuzz_check.h"
#include "xhttp/http1/http1_parser.h"

#define MAX_FIELDS 64

static const xHttp1Limits LIMITS[2] = {
    {1024, 8192, 32}, /* roomy, like a server's */
    {24, 96, 3},      /* tiny, so the limits are reached often */
};

typedef struct Parse {
    const char *buf;
    size_t len;
    int r;
    xHttp1Request req;
    xHttp1Header fields[MAX_FIELDS + 1];
} Parse;

static const xHttp1Header UNTOUCHED = {{"untouched", 9}, {"untouched", 9}};

static void run_parse(Parse *p, const char *buf, size_t len, size_t prev_len, const xHttp1Limits *limits) {
    for (size_t i = 0; i <= MAX_FIELDS; i++) p->fields[i] = UNTOUCHED;
    memset(&p->req, 0x5A, sizeof p->req); /* nothing may depend on what was there */
    p->req.headers = p->fields;
    p->buf = buf;
    p->len = len;
    p->r = xHttp1ParseRequest(buf, len, prev_len, &p->req, limits);
}

/* A view of the head, or the one literal the parser may hand out instead:
 * the "/" of an absolute-form target without a path. */
static void check_view(const Parse *p, xStr v, const char *what) {
    if (v.data && v.len == 1 && v.data[0] == '/' && !fuzz_view_within(v, p->buf, (size_t)p->r)) return;
    FUZZ_ASSERT(fuzz_view_within(v, p->buf, (size_t)p->r), "%s lies outside the head", what);
}

static void check_parse(const Parse *p, const xHttp1Limits *limits) {
    FUZZ_ASSERT(p->fields[limits->max_headers].name.data == UNTOUCHED.name.data, "slot %zu written",
                limits->max_headers);
    if (p->r == XHTTP1_INCOMPLETE) return;
    if (p->r == XHTTP1_ERROR) {
        int s = p->req.error_status;
        FUZZ_ASSERT(s == 400 || s == 414 || s == 431 || s == 501 || s == 505, "error status %d", s);
        return;
    }
    FUZZ_ASSERT(p->r > 0 && (size_t)p->r <= p->len, "consumed %d of %zu", p->r, p->len);
    FUZZ_ASSERT(p->r >= 4 && memcmp(p->buf + p->r - 4, "\r\n\r\n", 4) == 0, "head does not end in CRLFCRLF");
    FUZZ_ASSERT((size_t)p->r <= limits->max_head, "head of %d over max_head", p->r);
    const xHttp1Request *q = &p->req;
    FUZZ_ASSERT(q->num_headers <= limits->max_headers, "%zu fields", q->num_headers);
    FUZZ_ASSERT(q->minor_version == 0 || q->minor_version == 1, "minor %d", q->minor_version);
    FUZZ_ASSERT(q->content_length >= -1, "content_length %lld", (long long)q->content_length);
    FUZZ_ASSERT(!(q->chunked && q->content_length >= 0), "both chunked and Content-Length");
    /* CONNECT's authority-form target has no path; every other target has one. */
    bool connect = q->method.len == 7 && memcmp(q->method.data, "CONNECT", 7) == 0;
    FUZZ_ASSERT(q->method.len > 0 && q->target.len > 0 && (connect || q->path.len > 0),
                "empty request line part");
    check_view(p, q->method, "method");
    check_view(p, q->target, "target");
    check_view(p, q->path, "path");
    check_view(p, q->query, "query");
    check_view(p, q->host, "host");
    for (size_t i = 0; i < q->num_headers; i++) {
        check_view(p, q->headers[i].name, "field name");
        check_view(p, q->headers[i].value, "field value");
        FUZZ_ASSERT(q->headers[i].name.len > 0, "empty field name");
    }
}

/* Same bytes at the same offset from each parse's buffer (the literal "/"
 * compares by content alone). */
static bool same_view(xStr a, const Parse *pa, xStr b, const Parse *pb) {
    if (a.len != b.len || memcmp(a.data, b.data, a.len) != 0) return false;
    bool ina = fuzz_view_within(a, pa->buf, pa->len), inb = fuzz_view_within(b, pb->buf, pb->len);
    return ina == inb && (!ina || a.data - pa->buf == b.data - pb->buf);
}

static bool same_parse(const Parse *a, const Parse *b) {
    if (a->r != b->r) return false;
    if (a->r == XHTTP1_ERROR) return a->req.error_status == b->req.error_status;
    if (a->r == XHTTP1_INCOMPLETE) return true;
    const xHttp1Request *x = &a->req, *y = &b->req;
    if (x->minor_version != y->minor_version || x->num_headers != y->num_headers ||
        x->content_length != y->content_length || x->chunked != y->chunked ||
        x->keep_alive != y->keep_alive || x->expect_continue != y->expect_continue ||
        x->upgrade != y->upgrade)
        return false;
    if (!same_view(x->method, a, y->method, b) || !same_view(x->target, a, y->target, b) ||
        !same_view(x->path, a, y->path, b) || !same_view(x->query, a, y->query, b) ||
        !same_view(x->host, a, y->host, b))
        return false;
    for (size_t i = 0; i < x->num_headers; i++) {
        if (!same_view(x->headers[i].name, a, y->headers[i].name, b) ||
            !same_view(x->headers[i].value, a, y->headers[i].value, b))
            return false;
    }
    return true;
}

static Parse whole, part, resumed; /* too big for the stack */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const xHttp1Limits *limits = &LIMITS[data[0] & 1];
    size_t n = size - 1;
    size_t k = (size_t)(data[0] >> 1) * n / 127;
    char *buf = fuzz_copy(data + 1, n);
    char *prefix = fuzz_copy(data + 1, k); /* its own block: reading past k is caught */

    run_parse(&whole, buf, n, 0, limits);
    check_parse(&whole, limits);

    run_parse(&part, prefix, k, 0, limits);
    check_parse(&part, limits);
    if (part.r == XHTTP1_INCOMPLETE) {
        run_parse(&resumed, buf, n, k, limits);
        check_parse(&resumed, limits);
        FUZZ_ASSERT(same_parse(&resumed, &whole), "resumed at %zu: r=%d status=%d, whole: r=%d status=%d", k,
                    resumed.r, resumed.req.error_status, whole.r, whole.req.error_status);
    } else {
        FUZZ_ASSERT(same_parse(&part, &whole), "prefix of %zu: r=%d status=%d, whole: r=%d status=%d", k,
                    part.r, part.req.error_status, whole.r, whole.req.error_status);
    }
    free(prefix);
    free(buf);
    return 0;
}
