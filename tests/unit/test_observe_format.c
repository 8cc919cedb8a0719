/* test_observe_format.c — access log lines (xhttp/observe/access_format.h)
 * and Prometheus text (xhttp/observe/prometheus.h): each format's exact
 * line, escaping that keeps hostile text inside its field, UTF-8 kept or
 * escaped, absent values, and the exposition's HELP, TYPE and samples. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "xhttp/observe/access_format.h"
#include "xhttp/observe/prometheus.h"

#define S(lit) ((xStr){lit, sizeof(lit) - 1})
#define NONE ((xStr){NULL, 0})

static xAccessClock clock_at_2026(void) {
    xAccessClock clock = {.second = -1};
    xAccessClockSet(&clock, 1795520136); /* 2026-11-24T11:35:36Z */
    return clock;
}

static xAccessRecord plain_record(void) {
    return (xAccessRecord){
        .address = S("192.0.2.7"),
        .port = 50000,
        .method = S("GET"),
        .path = S("/users/7"),
        .query = S("x=1"),
        .protocol = S("HTTP/1.1"),
        .status = 200,
        .bytes = 1234,
        .duration_ms = 15,
        .referer = NONE,
        .user_agent = S("curl/7.88.1"),
        .tls = NONE,
    };
}

/* Formats rec into a NUL-terminated string the caller frees. */
static char *line(xHttpLogFormat format, const xAccessRecord *rec) {
    xAccessClock clock = clock_at_2026();
    xBuffer out = {0};
    CHECK_EQ_INT(xAccessFormat(&out, format, &clock, rec), XOK);
    xBufferAppend(&out, "", 1);
    return out.data;
}

#define CHECK_LINE(format, rec, want)                                                                        \
    do {                                                                                                     \
        char *got_ = line(format, rec);                                                                      \
        CHECK_MSG(strcmp(got_, want) == 0, "\n got  %s want %s", got_, want);                                \
        free(got_);                                                                                          \
    } while (0)

static void test_common_line_has_the_seven_fields(void) {
    xAccessRecord rec = plain_record();
    CHECK_LINE(XHTTP_LOG_COMMON, &rec,
               "192.0.2.7 - - [24/Nov/2026:11:35:36 +0000] \"GET /users/7?x=1 HTTP/1.1\" 200 1234\n");
}

static void test_combined_line_adds_referer_and_user_agent(void) {
    xAccessRecord rec = plain_record();
    CHECK_LINE(XHTTP_LOG_COMBINED, &rec,
               "192.0.2.7 - - [24/Nov/2026:11:35:36 +0000] \"GET /users/7?x=1 HTTP/1.1\" 200 1234 \"-\" "
               "\"curl/7.88.1\"\n");
    rec.referer = S("https://example.com/");
    rec.user_agent = NONE;
    rec.query = NONE;
    CHECK_LINE(XHTTP_LOG_COMBINED, &rec,
               "192.0.2.7 - - [24/Nov/2026:11:35:36 +0000] \"GET /users/7 HTTP/1.1\" 200 1234 "
               "\"https://example.com/\" \"-\"\n");
}

static void test_json_line_has_every_field(void) {
    xAccessRecord rec = plain_record();
    rec.tls = S("TLSv1.3");
    rec.protocol = S("HTTP/2");
    CHECK_LINE(XHTTP_LOG_JSON, &rec,
               "{\"time\":\"2026-11-24T11:35:36+00:00\",\"remote_addr\":\"192.0.2.7\",\"remote_port\":50000,"
               "\"method\":\"GET\",\"target\":\"/users/7?x=1\",\"protocol\":\"HTTP/2\",\"status\":200,"
               "\"bytes\":1234,\"duration_ms\":15,\"referer\":null,\"user_agent\":\"curl/7.88.1\","
               "\"tls\":\"TLSv1.3\"}\n");
}

static void test_clf_escapes_quotes_backslashes_and_controls(void) {
    xAccessRecord rec = plain_record();
    rec.path = S("/a\"b\\c\n1.2.3.4 - - [x] \"GET / HTTP/1.1\" 200 0");
    rec.query = NONE;
    rec.user_agent = S("ua\" \"\r\n\x7f\x01\xc3\xa9");
    CHECK_LINE(XHTTP_LOG_COMBINED, &rec,
               "192.0.2.7 - - [24/Nov/2026:11:35:36 +0000] \"GET /a\\x22b\\x5cc\\x0a1.2.3.4 - - [x] "
               "\\x22GET / HTTP/1.1\\x22 200 0 HTTP/1.1\" 200 1234 \"-\" "
               "\"ua\\x22 \\x22\\x0d\\x0a\\x7f\\x01\\xc3\\xa9\"\n");
}

static void test_json_escapes_and_keeps_valid_utf8(void) {
    xAccessRecord rec = plain_record();
    rec.query = NONE;
    rec.path = S("/\"q\"\\\n\r\t\x01\x7f");
    /* é and 😀 are valid UTF-8 and stay; a lone continuation byte, an
     * overlong '/', a surrogate and a cut-off sequence are escaped bytes. */
    rec.user_agent = S("\xc3\xa9\xf0\x9f\x98\x80|\x80|\xc0\xaf|\xed\xa0\x80|\xe2\x82");
    CHECK_LINE(XHTTP_LOG_JSON, &rec,
               "{\"time\":\"2026-11-24T11:35:36+00:00\",\"remote_addr\":\"192.0.2.7\",\"remote_port\":50000,"
               "\"method\":\"GET\",\"target\":\"/\\\"q\\\"\\\\\\n\\r\\t\\u0001\\u007f\",\"protocol\":"
               "\"HTTP/1.1\",\"status\":200,\"bytes\":1234,\"duration_ms\":15,\"referer\":null,"
               "\"user_agent\":\"\xc3\xa9\xf0\x9f\x98\x80|\\u0080|\\u00c0\\u00af|\\u00ed\\u00a0\\u0080|"
               "\\u00e2\\u0082\",\"tls\":null}\n");
}

static void test_lines_append_to_what_the_buffer_holds(void) {
    xAccessClock clock = clock_at_2026();
    xAccessRecord rec = plain_record();
    xBuffer out = {0};
    xAccessFormat(&out, XHTTP_LOG_COMMON, &clock, &rec);
    size_t one = out.len;
    xAccessFormat(&out, XHTTP_LOG_COMMON, &clock, &rec);
    CHECK_EQ_INT(out.len, 2 * one);
    CHECK(memcmp(out.data, out.data + one, one) == 0);
    xBufferFree(&out);
}

static void test_clock_shows_the_local_offset(void) {
    setenv("TZ", "XXX-05:30", 1); /* five and a half hours east of UTC */
    tzset();
    xAccessClock clock = clock_at_2026();
    CHECK(strcmp(clock.clf, "[24/Nov/2026:17:05:36 +0530]") == 0);
    CHECK(strcmp(clock.iso, "2026-11-24T17:05:36+05:30") == 0);
    setenv("TZ", "UTC0", 1);
    tzset();
}

static void test_prometheus_text_has_help_type_and_labelled_samples(void) {
    xHttpMetrics m = {.struct_size = sizeof m};
    m.requests[XHTTP_METRIC_HTTP11][1] = 42;
    m.requests[XHTTP_METRIC_HTTP2][3] = 3;
    m.bytes_in = 1000;
    m.connections_open = 2;
    m.tls_failures = 5;
    xBuffer out = {0};
    CHECK_EQ_INT(xPrometheusFormat(&m, &out), XOK);
    xBufferAppend(&out, "", 1);
    const char *text = out.data;
    CHECK(strstr(text, "# HELP xkit_requests_total ") != NULL);
    CHECK(strstr(text, "# TYPE xkit_requests_total counter\n") != NULL);
    CHECK(strstr(text, "\nxkit_requests_total{protocol=\"http/1.1\",status=\"2xx\"} 42\n") != NULL);
    CHECK(strstr(text, "\nxkit_requests_total{protocol=\"http/2\",status=\"4xx\"} 3\n") != NULL);
    CHECK(strstr(text, "\nxkit_requests_total{protocol=\"http/1.0\",status=\"5xx\"} 0\n") != NULL);
    CHECK(strstr(text, "# TYPE xkit_connections_open gauge\nxkit_connections_open 2\n") != NULL);
    CHECK(strstr(text, "\nxkit_received_bytes_total 1000\n") != NULL);
    CHECK(strstr(text, "\nxkit_tls_handshakes_total{result=\"failed\"} 5\n") != NULL);
    CHECK(text[out.len - 2] == '\n');
    xBufferFree(&out);
}

int main(void) {
    setenv("TZ", "UTC0", 1);
    tzset();
    RUN(test_common_line_has_the_seven_fields);
    RUN(test_combined_line_adds_referer_and_user_agent);
    RUN(test_json_line_has_every_field);
    RUN(test_clf_escapes_quotes_backslashes_and_controls);
    RUN(test_json_escapes_and_keeps_valid_utf8);
    RUN(test_lines_append_to_what_the_buffer_holds);
    RUN(test_clock_shows_the_local_offset);
    RUN(test_prometheus_text_has_help_type_and_labelled_samples);
    return CHECK_SUMMARY();
}
