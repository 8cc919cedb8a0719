/* fuzz_http1_response.c — the upstream response parser (xHttp1ParseResponse,
 * src/xhttp/http1/http1_parser.h) and the body after it, against Node's
 * http-parser 2.9 (Debian's libhttp-parser-dev) as the oracle.
 *
 * Byte 0: bit 0 says the request was HEAD, the rest where the head is cut
 * for a first call (resumed with prev_len). The rest of the input is what an
 * upstream sent: a head, then a body. Checked:
 *   - a complete head ends in CRLFCRLF within the input and max_head, its
 *     views lie inside it, at most max_headers fields, a status of 100-599,
 *     framing coherent with the fields (NONE for HEAD, 1xx, 204, 304;
 *     UNTIL_CLOSE never keeps the connection); an error says why;
 *   - the first k bytes, then the whole with prev_len = k, give the whole's
 *     verdict and length;
 *   - differential: whatever head ours accepts, http-parser accepts too, with
 *     the same status, version, field names in order, content length and
 *     chunked framing, and keeps the connection wherever ours does; and a body ours reads to its end
 *     (Content-Length, or chunked with its trailers, decoded in place as the
 *     client does) is the body http-parser delivers, complete where ours is.
 * Ours is stricter: what only http-parser accepts is not a failure. */
#include <http_parser.h>
#include <string.h>
#include <strings.h>

#include "fuzz_check.h"
#include "xhttp/http1/http1_parser.h"

#define MAX_FIELDS 32
static const xHttp1Limits LIMITS = {.max_request_line = 8192, .max_head = 8192, .max_headers = MAX_FIELDS};

/* What http-parser reported for the first message. */
typedef struct Oracle {
    bool headers_done, complete;
    bool in_field; /* the last callback was a name: the next name is a new field */
    bool head_request;
    size_t fields;
    char names[4096];
    size_t names_len;
    char body[65536];
    size_t body_len;
    bool body_overflow;
    int status, minor;
    bool chunked, keep_alive;
    uint64_t content_length;
} Oracle;

static int on_field(http_parser *p, const char *at, size_t n) {
    Oracle *o = p->data;
    if (o->headers_done) return 0; /* a trailer field */
    if (!o->in_field) {
        o->fields++;
        if (o->names_len < sizeof o->names) o->names[o->names_len++] = '\n';
    }
    o->in_field = true;
    for (size_t i = 0; i < n && o->names_len < sizeof o->names; i++) o->names[o->names_len++] = at[i];
    return 0;
}

static int on_value(http_parser *p, const char *at, size_t n) {
    (void)at, (void)n;
    ((Oracle *)p->data)->in_field = false;
    return 0;
}

static int on_headers_complete(http_parser *p) {
    Oracle *o = p->data;
    o->headers_done = true;
    o->status = p->status_code;
    o->minor = p->http_minor;
    o->chunked = (p->flags & F_CHUNKED) != 0;
    o->content_length = p->content_length;
    o->keep_alive = http_should_keep_alive(p);
    return o->head_request ? 1 : 0;
}

static int on_body(http_parser *p, const char *at, size_t n) {
    Oracle *o = p->data;
    if (o->body_len + n > sizeof o->body) {
        o->body_overflow = true;
        return 0;
    }
    memcpy(o->body + o->body_len, at, n);
    o->body_len += n;
    return 0;
}

static int on_message_complete(http_parser *p) {
    ((Oracle *)p->data)->complete = true;
    return 1; /* the first message only */
}

static const http_parser_settings SETTINGS = {
    .on_header_field = on_field,
    .on_header_value = on_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

/* fuzz_copy's block, zeroed first (gcc cannot see that an empty one is never read). */
static char *copy_in(const uint8_t *data, size_t size) {
    char *p = calloc(1, size ? size : 1);
    FUZZ_ASSERT(p != NULL, "out of memory");
    if (size) memcpy(p, data, size);
    return p;
}

static void run_oracle(const char *buf, size_t len, bool head_request, Oracle *o) {
    http_parser p;
    http_parser_init(&p, HTTP_RESPONSE);
    p.data = o;
    o->head_request = head_request;
    http_parser_execute(&p, &SETTINGS, buf, len);
}

static void check_head(const char *buf, size_t len, int n, const xHttp1Response *r, bool head_request) {
    if (n == XHTTP1_INCOMPLETE) return;
    if (n == XHTTP1_ERROR) {
        FUZZ_ASSERT(r->error && *r->error, "an error without its reason");
        return;
    }
    FUZZ_ASSERT(n > 0 && (size_t)n <= len && (size_t)n <= LIMITS.max_head, "length %d of %zu", n, len);
    FUZZ_ASSERT(n >= 4 && memcmp(buf + n - 4, "\r\n\r\n", 4) == 0, "a head not ending in CRLFCRLF");
    FUZZ_ASSERT(r->status >= 100 && r->status <= 599, "status %d", r->status);
    FUZZ_ASSERT(r->num_headers <= MAX_FIELDS, "%zu fields", r->num_headers);
    FUZZ_ASSERT(fuzz_view_within(r->reason, buf, (size_t)n), "reason outside the head");
    for (size_t i = 0; i < r->num_headers; i++) {
        FUZZ_ASSERT(fuzz_view_within(r->headers[i].name, buf, (size_t)n) && r->headers[i].name.len > 0,
                    "field %zu's name", i);
        FUZZ_ASSERT(fuzz_view_within(r->headers[i].value, buf, (size_t)n), "field %zu's value", i);
    }
    bool bodiless = head_request || r->status < 200 || r->status == 204 || r->status == 304;
    if (bodiless) FUZZ_ASSERT(r->body == XHTTP1_BODY_NONE, "a body after status %d", r->status);
    if (r->body == XHTTP1_BODY_LENGTH)
        FUZZ_ASSERT(r->content_length > 0, "LENGTH of %lld", (long long)r->content_length);
    if (r->body == XHTTP1_BODY_UNTIL_CLOSE) FUZZ_ASSERT(!r->keep_alive, "kept after a body ended by close");
}

/* The body ours reads after the head, as the client does: Content-Length
 * bytes, or chunked decoded in place up to the trailers, then the trailer
 * section. True when it ended within the input. */
static bool read_body(char *rest, size_t len, const xHttp1Response *r, char *out, size_t *out_len) {
    *out_len = 0;
    if (r->body == XHTTP1_BODY_NONE) return true;
    if (r->body == XHTTP1_BODY_LENGTH) {
        if ((uint64_t)r->content_length > len) return false;
        memcpy(out, rest, (size_t)r->content_length);
        *out_len = (size_t)r->content_length;
        return true;
    }
    if (r->body != XHTTP1_BODY_CHUNKED) return false;
    xHttp1Chunked dec = {.stop_at_trailers = true};
    ssize_t used = xHttp1ChunkedDecode(&dec, rest, len, rest, out_len, 4096, 8192);
    if (used < 0) return false;
    FUZZ_ASSERT((size_t)used <= len && *out_len <= (size_t)used, "decoded %zu from %zd", *out_len, used);
    memcpy(out, rest, *out_len);
    if (!dec.at_trailers) return false;
    xHttp1Header trailers[MAX_FIELDS];
    size_t count;
    int t = xHttp1ParseTrailers(rest + used, len - (size_t)used, trailers, MAX_FIELDS, &count, 8192);
    /* http-parser gives trailer fields a head's meaning (an empty
     * Content-Length there fails it); ours takes them as plain fields, which
     * the proxy never lets frame anything: such bodies are not compared. */
    for (size_t i = 0; t > 0 && i < count; i++) {
        xStr name = trailers[i].name;
        if ((name.len == 14 && strncasecmp(name.data, "content-length", 14) == 0) ||
            (name.len == 17 && strncasecmp(name.data, "transfer-encoding", 17) == 0) ||
            (name.len == 10 && strncasecmp(name.data, "connection", 10) == 0))
            return false;
    }
    return t > 0;
}

/* http-parser 2.9 marks a message as using Transfer-Encoding once a name
 * begins with it ("Transfer-Encodingx"), then refuses a Content-Length
 * beside it, and misreads a tab around a framing field's value: its slips,
 * not ours, so such heads are not compared. */
static bool oracle_misreads(const xHttp1Response *r) {
    for (size_t i = 0; i < r->num_headers; i++) {
        xStr name = r->headers[i].name;
        if (name.len > 17 && strncasecmp(name.data, "transfer-encoding", 17) == 0) return true;
        /* It misreads a tab around a framing field's value, which RFC 9110 §5.5 allows as OWS. */
        xStr v = r->headers[i].value;
        bool tab = v.data[v.len] == '\t' || (v.len && v.data[-1] == '\t');
        bool framing = (name.len == 14 && strncasecmp(name.data, "content-length", 14) == 0) ||
                       (name.len == 17 && strncasecmp(name.data, "transfer-encoding", 17) == 0);
        if (framing && tab) return true;
    }
    return false;
}

static void compare(const char *input, size_t len, const xHttp1Response *r, int n, bool head_request) {
    static Oracle o;
    if (oracle_misreads(r)) return;
    memset(&o, 0, sizeof o);
    run_oracle(input, len, head_request, &o);
    FUZZ_ASSERT(o.headers_done, "http-parser refused a head ours accepted");
    FUZZ_ASSERT(o.status == r->status && o.minor == r->minor_version, "status %d/%d, ours %d/%d", o.status,
                o.minor, r->status, r->minor_version);
    FUZZ_ASSERT(o.fields == r->num_headers, "%zu fields, ours %zu", o.fields, r->num_headers);
    char names[4096];
    size_t names_len = 0;
    for (size_t i = 0; i < r->num_headers && names_len < sizeof names; i++) {
        names[names_len++] = '\n';
        for (size_t j = 0; j < r->headers[i].name.len && names_len < sizeof names; j++)
            names[names_len++] = r->headers[i].name.data[j];
    }
    FUZZ_ASSERT(names_len == o.names_len && memcmp(names, o.names, names_len) == 0, "field names differ");
    if (r->status < 200 || head_request)
        return; /* http-parser's keep-alive and framing then differ in kind */
    FUZZ_ASSERT(o.chunked == (r->body == XHTTP1_BODY_CHUNKED) || r->status == 204 || r->status == 304,
                "chunked %d, ours %d", o.chunked, r->body);
    if (r->body == XHTTP1_BODY_LENGTH)
        FUZZ_ASSERT(o.content_length == (uint64_t)r->content_length, "length %llu, ours %lld",
                    (unsigned long long)o.content_length, (long long)r->content_length);
    /* Closing is always safe; keeping a connection http-parser would close is not. */
    FUZZ_ASSERT(o.keep_alive || !r->keep_alive, "keep-alive %d, ours %d", o.keep_alive, r->keep_alive);
    /* http-parser 2.9 reads a 204's or 304's Content-Length as a body; RFC 9112 §6.3 says none. */
    if (r->status == 204 || r->status == 304) return;
    static char body[65536];
    char *rest = copy_in((const uint8_t *)input + n, len - (size_t)n);
    size_t body_len;
    bool ended = read_body(rest, len - (size_t)n, r, body, &body_len);
    free(rest);
    if (!ended || o.body_overflow) return;
    FUZZ_ASSERT(o.complete, "ours read a whole body, http-parser did not");
    FUZZ_ASSERT(o.body_len == body_len && memcmp(o.body, body, body_len) == 0, "bodies differ: %zu, ours %zu",
                o.body_len, body_len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 60000) return 0;
    bool head_request = data[0] & 1;
    size_t len = size - 1;
    char *input = copy_in(data + 1, len);
    xHttp1Header fields[MAX_FIELDS];
    xHttp1Response whole = {.headers = fields};
    int n = xHttp1ParseResponse(input, len, 0, &whole, &LIMITS, head_request);
    check_head(input, len, n, &whole, head_request);

    size_t k = len ? (size_t)(data[0] >> 1) * len / 128 : 0;
    char *prefix = copy_in(data + 1, k);
    xHttp1Header part_fields[MAX_FIELDS];
    xHttp1Response part = {.headers = part_fields};
    int first = xHttp1ParseResponse(prefix, k, 0, &part, &LIMITS, head_request);
    check_head(prefix, k, first, &part, head_request);
    free(prefix);
    if (first == XHTTP1_INCOMPLETE) {
        xHttp1Response resumed = {.headers = part_fields};
        int again = xHttp1ParseResponse(input, len, k, &resumed, &LIMITS, head_request);
        FUZZ_ASSERT(again == n, "resumed at %zu: %d, at once %d", k, again, n);
    } else {
        FUZZ_ASSERT(first == n, "a prefix of %zu decided %d, the whole %d", k, first, n);
    }
    if (n > 0) compare(input, len, &whole, n, head_request);
    free(input);
    return 0;
}
