/* test_http1_response.c — the upstream response parser: status lines,
 * fields, how each kind of response frames its body (RFC 9112 §6.3), every
 * shape it refuses, the same verdict however the head arrives, trailer
 * sections, and the chunked decoder stopping at them.
 *
 * Heads are parsed from the very end of a page followed by an inaccessible
 * one, so reading a byte past the input crashes the test. */
#include <stdbool.h>
#include <string.h>

#include "check.h"
#include "guard_page.h"
#include "xhttp/http1/http1_parser.h"

static char *guard_end;
static xHttp1Header fields[16];
static const xHttp1Limits LIMITS = {.max_request_line = 8192, .max_head = 4096, .max_headers = 16};

/* Parses text placed at the end of the guarded page. */
static int parse(const char *text, bool head_request, xHttp1Response *res) {
    size_t n = strlen(text);
    char *in = guard_end - n;
    memcpy(in, text, n);
    res->headers = fields;
    return xHttp1ParseResponse(in, n, 0, res, &LIMITS, head_request);
}

static void test_a_plain_response_gives_its_status_fields_and_length(void) {
    xHttp1Response r;
    const char *text = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello";
    CHECK_EQ_INT(parse(text, false, &r), strlen(text) - 5);
    CHECK_EQ_INT(r.status, 200);
    CHECK_EQ_INT(r.minor_version, 1);
    CHECK_STR(r.reason, "OK");
    CHECK_EQ_INT(r.num_headers, 2);
    CHECK_STR(r.headers[0].name, "Content-Type");
    CHECK_STR(r.headers[0].value, "text/plain");
    CHECK_EQ_INT(r.body, XHTTP1_BODY_LENGTH);
    CHECK_EQ_INT(r.content_length, 5);
    CHECK(r.keep_alive);
}

static void test_each_kind_of_response_frames_its_body(void) {
    xHttp1Response r;
    CHECK(parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", false, &r) > 0);
    CHECK_EQ_INT(r.body, XHTTP1_BODY_CHUNKED);
    CHECK(parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", true, &r) > 0);
    CHECK_EQ_INT(r.body, XHTTP1_BODY_NONE); /* a HEAD's answer has no body */
    CHECK(parse("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", true, &r) > 0);
    CHECK_EQ_INT(r.body, XHTTP1_BODY_NONE);
    CHECK(r.keep_alive);
    CHECK(parse("HTTP/1.1 204 No Content\r\nContent-Length: 9\r\n\r\n", false, &r) > 0);
    CHECK_EQ_INT(r.body, XHTTP1_BODY_NONE);
    CHECK(parse("HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n", false, &r) > 0);
    CHECK_EQ_INT(r.body, XHTTP1_BODY_NONE);
    CHECK(parse("HTTP/1.1 100 Continue\r\n\r\n", false, &r) > 0);
    CHECK_EQ_INT(r.status, 100);
    CHECK_EQ_INT(r.body, XHTTP1_BODY_NONE);
    CHECK(parse("HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n", false, &r) > 0);
    CHECK_EQ_INT(r.body, XHTTP1_BODY_NONE);
    CHECK(parse("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false, &r) > 0);
    CHECK_EQ_INT(r.body, XHTTP1_BODY_NONE);
    CHECK(parse("HTTP/1.1 200 OK\r\nServer: x\r\n\r\n", false, &r) > 0);
    CHECK_EQ_INT(r.body, XHTTP1_BODY_UNTIL_CLOSE);
    CHECK(!r.keep_alive); /* the body ends with the connection */
}

static void test_the_connection_is_kept_as_the_version_and_fields_say(void) {
    xHttp1Response r;
    CHECK(parse("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", false, &r) > 0);
    CHECK(!r.keep_alive);
    CHECK(parse("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", false, &r) > 0);
    CHECK(!r.keep_alive);
    CHECK(parse("HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n", false, &r) > 0);
    CHECK(r.keep_alive);
    CHECK(parse("HTTP/1.1 200 OK\r\nConnection: keep-alive, CLOSE\r\nContent-Length: 0\r\n\r\n", false, &r) >
          0);
    CHECK(!r.keep_alive);
}

static void test_a_missing_reason_is_taken(void) {
    xHttp1Response r;
    CHECK(parse("HTTP/1.1 404\r\nContent-Length: 0\r\n\r\n", false, &r) > 0);
    CHECK_EQ_INT(r.status, 404);
    CHECK_EQ_INT(r.reason.len, 0);
    CHECK(parse("HTTP/1.1 404 \r\nContent-Length: 0\r\n\r\n", false, &r) > 0);
    CHECK_EQ_INT(r.reason.len, 0);
    CHECK(parse("HTTP/1.1 500 Internal \xC3\xA9rror\r\nContent-Length: 0\r\n\r\n", false, &r) > 0);
}

static void test_ambiguous_or_malformed_heads_are_refused(void) {
    static const char *bad[] = {
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: \r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: ,chunked\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding:\r\nTransfer-Encoding: chunked\r\n\r\n",
        "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n", /* obs-fold */
        "HTTP/1.1 200 OK\r\nX : a\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX: a\x01b\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX: a\nY: b\r\n\r\n",
        "HTTP/1.1 200 OK\r\n: a\r\n\r\n",
        "HTTP/2.0 200 OK\r\n\r\n",
        "HTTP/1.2 200 OK\r\n\r\n",
        "HTTP/1.1 20 OK\r\n\r\n",
        "HTTP/1.1 2000 OK\r\n\r\n",
        "HTTP/1.1 099 OK\r\n\r\n",
        "HTTP/1.1 600 OK\r\n\r\n",
        "HTTP/1.1  200 OK\r\n\r\n",
        "HTTP/1.1 200 O\x01K\r\n\r\n",
        "http/1.1 200 OK\r\n\r\n",
        "\r\nHTTP/1.1 200 OK\r\n\r\n",
        "ICY 200 OK\r\n\r\n",
        "HTTP/1.1 200 OK\n\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        xHttp1Response r;
        int n = parse(bad[i], false, &r);
        CHECK_MSG(n == XHTTP1_ERROR && r.error != NULL, "case %zu: %d", i, n);
    }
}

static void test_limits_are_errors_not_waits(void) {
    xHttp1Response r;
    char big[5000];
    memcpy(big, "HTTP/1.1 200 OK\r\nX: ", 20);
    memset(big + 20, 'a', sizeof big - 21);
    big[sizeof big - 1] = '\0';
    CHECK_EQ_INT(parse(big, false, &r), XHTTP1_ERROR); /* over max_head without its end */
    char many[4096] = "HTTP/1.1 200 OK\r\n";
    for (int i = 0; i < 17; i++) strcat(many, "A: b\r\n");
    strcat(many, "\r\n");
    CHECK_EQ_INT(parse(many, false, &r), XHTTP1_ERROR);
    CHECK(r.error && strstr(r.error, "too many"));
}

/* Every prefix of a good head is INCOMPLETE (resumed with prev_len), and the
 * whole gives the same verdict as at once. */
static void test_every_prefix_waits_and_resuming_agrees(void) {
    const char *text = "HTTP/1.1 200 OK\r\nA: 1\r\nTransfer-Encoding: chunked\r\n\r\n";
    size_t len = strlen(text);
    size_t prev = 0;
    for (size_t k = 1; k < len; k++) {
        char *in = guard_end - k;
        memcpy(in, text, k);
        xHttp1Response r = {.headers = fields};
        int n = xHttp1ParseResponse(in, k, prev, &r, &LIMITS, false);
        CHECK_MSG(n == XHTTP1_INCOMPLETE, "prefix %zu: %d", k, n);
        prev = k;
    }
    char buf[256];
    memcpy(buf, text, len);
    xHttp1Response r = {.headers = fields};
    CHECK_EQ_INT(xHttp1ParseResponse(buf, len, prev, &r, &LIMITS, false), len);
    CHECK_EQ_INT(r.body, XHTTP1_BODY_CHUNKED);
    CHECK_EQ_INT(r.num_headers, 2);
}

static int parse_trailers(const char *text, size_t *n) {
    size_t len = strlen(text);
    char *in = guard_end - len;
    memcpy(in, text, len);
    return xHttp1ParseTrailers(in, len, fields, 4, n, 256);
}

static void test_trailer_sections_parse_and_refuse(void) {
    size_t n;
    CHECK_EQ_INT(parse_trailers("\r\n", &n), 2);
    CHECK_EQ_INT(n, 0);
    CHECK_EQ_INT(parse_trailers("grpc-status: 0\r\nX: y \r\n\r\nnext", &n), 25);
    CHECK_EQ_INT(n, 2);
    CHECK_STR(fields[0].name, "grpc-status");
    CHECK_STR(fields[1].value, "y");
    CHECK_EQ_INT(parse_trailers("", &n), XHTTP1_INCOMPLETE);
    CHECK_EQ_INT(parse_trailers("\r", &n), XHTTP1_INCOMPLETE);
    CHECK_EQ_INT(parse_trailers("a: b\r\n", &n), XHTTP1_INCOMPLETE);
    CHECK_EQ_INT(parse_trailers("a: b\r\n\n", &n), XHTTP1_ERROR);
    CHECK_EQ_INT(parse_trailers("\n", &n), XHTTP1_ERROR);
    CHECK_EQ_INT(parse_trailers("\rx", &n), XHTTP1_ERROR);
    CHECK_EQ_INT(parse_trailers("a b: c\r\n\r\n", &n), XHTTP1_ERROR);
    CHECK_EQ_INT(parse_trailers("a: 1\r\nb: 2\r\nc: 3\r\nd: 4\r\ne: 5\r\n\r\n", &n), XHTTP1_ERROR);
    char big[300];
    memset(big, 'a', sizeof big);
    memcpy(big, "x: ", 3);
    big[sizeof big - 1] = '\0';
    CHECK_EQ_INT(parse_trailers(big, &n), XHTTP1_ERROR);
}

static void test_the_chunked_decoder_stops_at_the_trailers_when_asked(void) {
    char body[] = "5\r\nhello\r\n0\r\ngrpc-status: 0\r\n\r\n";
    char out[64];
    size_t got = 0;
    xHttp1Chunked dec = {.stop_at_trailers = true};
    ssize_t used = xHttp1ChunkedDecode(&dec, body, strlen(body), out, &got, 256, 256);
    CHECK_EQ_INT(used, 13);
    CHECK(dec.at_trailers && !dec.done);
    CHECK_EQ_INT(got, 5);
    size_t n;
    CHECK_EQ_INT(xHttp1ParseTrailers(body + used, strlen(body) - (size_t)used, fields, 4, &n, 256), 18);
    CHECK_EQ_INT(n, 1);
}

int main(void) {
    guard_end = guard_page_map(16384);
    RUN(test_a_plain_response_gives_its_status_fields_and_length);
    RUN(test_each_kind_of_response_frames_its_body);
    RUN(test_the_connection_is_kept_as_the_version_and_fields_say);
    RUN(test_a_missing_reason_is_taken);
    RUN(test_ambiguous_or_malformed_heads_are_refused);
    RUN(test_limits_are_errors_not_waits);
    RUN(test_every_prefix_waits_and_resuming_agrees);
    RUN(test_trailer_sections_parse_and_refuse);
    RUN(test_the_chunked_decoder_stops_at_the_trailers_when_asked);
    return CHECK_SUMMARY();
}
