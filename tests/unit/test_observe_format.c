/* test_observe_format.c — access log lines (xhttp/observe/access_format.h)
 * and Prometheus text (xhttp/observe/prometheus.h, metrics.h): each format's
 * exact line, escaping that keeps hostile text inside its field (the
 * handler's own fields too), UTF-8 kept or escaped, absent values; the
 * exposition's HELP, TYPE and samples, the application's counters, gauges and
 * histograms summed over worker shards, the duration histograms by route,
 * and the names, labels and buckets the data model refuses. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "xhttp/core/exchange.h"
#include "xhttp/observe/access_format.h"
#include "xhttp/observe/metrics.h"
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
        .duration_us = 15250,
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
               "\"bytes\":1234,\"duration_ms\":15,\"duration_us\":15250,\"referer\":null,\"user_agent\":"
               "\"curl/7.88.1\","
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
    CHECK_LINE(
        XHTTP_LOG_JSON, &rec,
        "{\"time\":\"2026-11-24T11:35:36+00:00\",\"remote_addr\":\"192.0.2.7\",\"remote_port\":50000,"
        "\"method\":\"GET\",\"target\":\"/\\\"q\\\"\\\\\\n\\r\\t\\u0001\\u007f\",\"protocol\":"
        "\"HTTP/"
        "1.1\",\"status\":200,\"bytes\":1234,\"duration_ms\":15,\"duration_us\":15250,\"referer\":null,"
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

static void test_handler_fields_come_last_escaped_as_a_clients(void) {
    xAccessRecord rec = plain_record();
    static const char fields[] = "user\0"
                                 "42\0"
                                 "note\0"
                                 "a\"b\\ \n x=\"y\"\0";
    rec.fields = (xStr){fields, sizeof fields - 1};
    CHECK_LINE(
        XHTTP_LOG_COMMON, &rec,
        "192.0.2.7 - - [24/Nov/2026:11:35:36 +0000] \"GET /users/7?x=1 HTTP/1.1\" 200 1234 user=\"42\" "
        "note=\"a\\x22b\\x5c \\x0a x=\\x22y\\x22\"\n");
    CHECK_LINE(XHTTP_LOG_COMBINED, &rec,
               "192.0.2.7 - - [24/Nov/2026:11:35:36 +0000] \"GET /users/7?x=1 HTTP/1.1\" 200 1234 \"-\" "
               "\"curl/7.88.1\" user=\"42\" note=\"a\\x22b\\x5c \\x0a x=\\x22y\\x22\"\n");
    CHECK_LINE(XHTTP_LOG_JSON, &rec,
               "{\"time\":\"2026-11-24T11:35:36+00:00\",\"remote_addr\":\"192.0.2.7\",\"remote_port\":50000,"
               "\"method\":\"GET\",\"target\":\"/users/7?x=1\",\"protocol\":\"HTTP/1.1\",\"status\":200,"
               "\"bytes\":1234,\"duration_ms\":15,\"duration_us\":15250,\"referer\":null,"
               "\"user_agent\":\"curl/7.88.1\",\"tls\":null,\"user\":\"42\",\"note\":\"a\\\"b\\\\ \\n "
               "x=\\\"y\\\"\"}\n");
}

static void test_field_keys_are_tokens_not_the_formats_own_names(void) {
    CHECK(xAccessFieldKeyAllowed("user"));
    CHECK(xAccessFieldKeyAllowed("trace.id-2_x"));
    CHECK(xAccessFieldKeyAllowed("0123456789012345678901234567890123456789012345678901234567890123"));
    CHECK(!xAccessFieldKeyAllowed("01234567890123456789012345678901234567890123456789012345678901234"));
    CHECK(!xAccessFieldKeyAllowed(""));
    CHECK(!xAccessFieldKeyAllowed("a b"));
    CHECK(!xAccessFieldKeyAllowed("a=b"));
    CHECK(!xAccessFieldKeyAllowed("a\"b"));
    CHECK(!xAccessFieldKeyAllowed("status"));
    CHECK(!xAccessFieldKeyAllowed("duration_us"));
    CHECK(!xAccessFieldKeyAllowed("websocket"));
}

/* What one of the prometheus.h appenders writes, as a C string to free. */
static char *appended(xErrno (*fn)(xBuffer *, const void *), const void *arg) {
    xBuffer out = {0};
    CHECK_EQ_INT(fn(&out, arg), XOK);
    xBufferAppend(&out, "", 1);
    return out.data;
}

static xErrno put_double(xBuffer *out, const void *v) {
    return xPrometheusAppendDouble(out, *(const double *)v);
}

#define CHECK_APPENDS(fn, type, value, want)                                                                 \
    do {                                                                                                     \
        type v_ = (value);                                                                                   \
        char *got_ = appended(fn, &v_);                                                                      \
        CHECK_MSG(strcmp(got_, want) == 0, "got %s want %s", got_, want);                                    \
        free(got_);                                                                                          \
    } while (0)

static void test_prometheus_numbers_read_back_exactly(void) {
    CHECK_APPENDS(put_double, double, 0.1, "0.1");
    CHECK_APPENDS(put_double, double, 3, "3");
    CHECK_APPENDS(put_double, double, 10, "10");
    CHECK_APPENDS(put_double, double, 1e20, "1e+20");
    CHECK_APPENDS(put_double, double, -2.5, "-2.5");
    CHECK_APPENDS(put_double, double, 1.0 / 3, "0.3333333333333333");
    CHECK_APPENDS(put_double, double, 1e-7, "1e-07");
    CHECK_APPENDS(put_double, double, 1.0 / 0.0, "+Inf");
    CHECK_APPENDS(put_double, double, -1.0 / 0.0, "-Inf");
    CHECK_APPENDS(put_double, double, 0.0 / 0.0, "NaN");
}

static void test_prometheus_names_follow_the_data_model(void) {
    CHECK(xPrometheusIsMetricName("http_requests_total"));
    CHECK(xPrometheusIsMetricName("_x9"));
    CHECK(!xPrometheusIsMetricName("9x"));
    CHECK(!xPrometheusIsMetricName(""));
    CHECK(!xPrometheusIsMetricName("a:b")); /* recording rules' */
    CHECK(!xPrometheusIsMetricName("a-b"));
    CHECK(!xPrometheusIsMetricName("caf\xc3\xa9"));
    CHECK(xPrometheusIsLabelName("method"));
    CHECK(xPrometheusIsLabelName("_m"));
    CHECK(!xPrometheusIsLabelName("__name__"));
    CHECK(!xPrometheusIsLabelName("1m"));
    CHECK(!xPrometheusIsLabelName("a.b"));
}

/* The registry's text, as a C string to free. */
static char *registry_text(const xMetricRegistry *reg) {
    xBuffer out = {0};
    CHECK_EQ_INT(xMetricRegistryFormat(reg, &out), XOK);
    xBufferAppend(&out, "", 1);
    return out.data;
}

#define CHECK_TEXT(reg, want)                                                                                \
    do {                                                                                                     \
        char *got_ = registry_text(reg);                                                                     \
        CHECK_MSG(strcmp(got_, want) == 0, "\n got:\n%s want:\n%s", got_, want);                             \
        free(got_);                                                                                          \
    } while (0)

static void test_user_metrics_are_summed_over_the_shards(void) {
    xMetricRegistry *reg = xMetricRegistryCreate(2);
    xHttpMetricShard *w0 = xMetricRegistryShard(reg, 0), *w1 = xMetricRegistryShard(reg, 1);
    CHECK(xMetricRegistryShard(reg, 2) == NULL && xMetricRegistryShard(reg, -1) == NULL);
    char why[256] = "";
    static const char *const label_names[] = {"kind", "region"};
    static const char *const rows[] = {"a", "eu", "b\"\\\n", "us"};
    xHttpMetricOpts opts;
    xHttpMetricOptsInit(&opts);
    opts.name = "orders_total";
    opts.help = "Orders taken,\nby kind \\ region.";
    opts.label_names = label_names;
    opts.num_labels = 2;
    opts.label_values = rows;
    opts.num_series = 2;
    xHttpMetric *orders, *queue, *sizes;
    CHECK_EQ_INT(xMetricRegistryAdd(reg, &opts, &orders, why, sizeof why), XOK);
    xHttpMetricOptsInit(&opts);
    opts.type = XHTTP_GAUGE;
    opts.name = "queue_depth";
    CHECK_EQ_INT(xMetricRegistryAdd(reg, &opts, &queue, why, sizeof why), XOK);
    static const double bounds[] = {1, 5};
    xHttpMetricOptsInit(&opts);
    opts.type = XHTTP_HISTOGRAM;
    opts.name = "size";
    opts.help = "Sizes.";
    opts.buckets = bounds;
    opts.num_buckets = 2;
    CHECK_EQ_INT(xMetricRegistryAdd(reg, &opts, &sizes, why, sizeof why), XOK);

    xHttpCounterAdd(w0, orders, 0, 3);
    xHttpCounterAdd(w1, orders, 0, 4);
    xHttpCounterAdd(w1, orders, 1, 1);
    xHttpCounterAdd(w1, orders, 2, 100);   /* no such series: ignored */
    xHttpGaugeSet(w0, orders, 0, 100);     /* not a gauge: ignored */
    xHttpCounterAdd(NULL, orders, 0, 100); /* no shard: ignored */
    xHttpGaugeSet(w0, queue, 0, 2.5);
    xHttpGaugeAdd(w1, queue, 0, -1);
    xHttpGaugeAdd(w1, queue, 0, -0.25);
    xHttpHistogramObserve(w0, sizes, 0, 1); /* le="1": bounds are inclusive */
    xHttpHistogramObserve(w1, sizes, 0, 0.5);
    xHttpHistogramObserve(w1, sizes, 0, 4);
    xHttpHistogramObserve(w0, sizes, 0, 7.25);
    xHttpHistogramObserve(w0, sizes, 0, 0.0 / 0.0); /* NaN: ignored */
    CHECK_TEXT(reg, "# HELP orders_total Orders taken,\\nby kind \\\\ region.\n"
                    "# TYPE orders_total counter\n"
                    "orders_total{kind=\"a\",region=\"eu\"} 7\n"
                    "orders_total{kind=\"b\\\"\\\\\\n\",region=\"us\"} 1\n"
                    "# HELP queue_depth\n"
                    "# TYPE queue_depth gauge\n"
                    "queue_depth 1.25\n"
                    "# HELP size Sizes.\n"
                    "# TYPE size histogram\n"
                    "size_bucket{le=\"1\"} 2\n"
                    "size_bucket{le=\"5\"} 3\n"
                    "size_bucket{le=\"+Inf\"} 4\n"
                    "size_sum 12.75\n"
                    "size_count 4\n");
    xMetricRegistryDestroy(reg);
}

static void test_histograms_default_to_prometheus_buckets_with_labels(void) {
    xMetricRegistry *reg = xMetricRegistryCreate(1);
    char why[256];
    static const char *const label_names[] = {"op"};
    static const char *const rows[] = {"read", "write"};
    xHttpMetricOpts opts;
    xHttpMetricOptsInit(&opts);
    opts.type = XHTTP_HISTOGRAM;
    opts.name = "op_seconds";
    opts.label_names = label_names;
    opts.num_labels = 1;
    opts.label_values = rows;
    opts.num_series = 2;
    xHttpMetric *ops;
    CHECK_EQ_INT(xMetricRegistryAdd(reg, &opts, &ops, why, sizeof why), XOK);
    xHttpHistogramObserve(xMetricRegistryShard(reg, 0), ops, 1, 0.03);
    char *text = registry_text(reg);
    CHECK(strstr(text, "op_seconds_bucket{op=\"read\",le=\"0.005\"} 0\n") != NULL);
    CHECK(strstr(text, "op_seconds_bucket{op=\"write\",le=\"0.025\"} 0\n"
                       "op_seconds_bucket{op=\"write\",le=\"0.05\"} 1\n") != NULL);
    CHECK_MSG(strstr(text, "op_seconds_bucket{op=\"write\",le=\"10\"} 1\n"
                           "op_seconds_bucket{op=\"write\",le=\"+Inf\"} 1\n"
                           "op_seconds_sum{op=\"write\"} 0.03\n"
                           "op_seconds_count{op=\"write\"} 1\n") != NULL,
              "%s", text);
    free(text);
    xMetricRegistryDestroy(reg);
}

/* Adds a metric of type named name with the given labels and rows; returns
 * the registry's answer. */
static xErrno add_metric(xMetricRegistry *reg, xHttpMetricType type, const char *name,
                         const char *const *labels, size_t num_labels, const char *const *rows,
                         size_t num_series, const double *buckets, size_t num_buckets) {
    char why[256] = "";
    xHttpMetricOpts opts;
    xHttpMetricOptsInit(&opts);
    opts.type = type;
    opts.name = name;
    opts.label_names = labels;
    opts.num_labels = num_labels;
    opts.label_values = rows;
    opts.num_series = num_series;
    opts.buckets = buckets;
    opts.num_buckets = num_buckets;
    xHttpMetric *m;
    xErrno err = xMetricRegistryAdd(reg, &opts, &m, why, sizeof why);
    CHECK_MSG((err == XOK) == (why[0] == '\0'), "%d: %s", err, why);
    return err;
}

static void test_what_the_data_model_refuses_is_refused(void) {
    xMetricRegistry *reg = xMetricRegistryCreate(1);
    static const char *const one[] = {"k"}, *const le[] = {"le"}, *const two_k[] = {"k", "k"};
    static const char *const under[] = {"__k"}, *const rows[] = {"x", "y"}, *const same[] = {"x", "x"};
    static const char *const bad_utf8[] = {"\xc0\xaf"}, *const nine[] = {"a", "b", "c", "d", "e",
                                                                         "f", "g", "h", "i"};
    static const double down[] = {1, 0.5}, *const none = NULL, nan_bound[] = {0.0 / 0.0};
    CHECK_EQ_INT(add_metric(reg, XHTTP_COUNTER, "hits_total", NULL, 0, NULL, 1, none, 0), XOK);
    CHECK_EQ_INT(add_metric(reg, XHTTP_COUNTER, "hits_total", NULL, 0, NULL, 1, none, 0), XERR_EXISTS);
    CHECK_EQ_INT(add_metric(reg, XHTTP_COUNTER, "9hits", NULL, 0, NULL, 1, none, 0), XERR_INVALID);
    CHECK_EQ_INT(add_metric(reg, XHTTP_COUNTER, "a:b", NULL, 0, NULL, 1, none, 0), XERR_INVALID);
    CHECK_EQ_INT(add_metric(reg, XHTTP_COUNTER, "xkit_mine", NULL, 0, NULL, 1, none, 0), XERR_INVALID);
    CHECK_EQ_INT(add_metric(reg, XHTTP_COUNTER, NULL, NULL, 0, NULL, 1, none, 0), XERR_INVALID);
    /* A histogram writes name_bucket, name_sum and name_count. */
    CHECK_EQ_INT(add_metric(reg, XHTTP_HISTOGRAM, "lat", NULL, 0, NULL, 1, none, 0), XOK);
    CHECK_EQ_INT(add_metric(reg, XHTTP_GAUGE, "lat_count", NULL, 0, NULL, 1, none, 0), XERR_EXISTS);
    CHECK_EQ_INT(add_metric(reg, XHTTP_GAUGE, "size_sum", NULL, 0, NULL, 1, none, 0), XOK);
    CHECK_EQ_INT(add_metric(reg, XHTTP_HISTOGRAM, "size", NULL, 0, NULL, 1, none, 0), XERR_EXISTS);
    CHECK_EQ_INT(add_metric(reg, XHTTP_HISTOGRAM, "h1", le, 1, rows, 1, none, 0), XERR_INVALID);
    CHECK_EQ_INT(add_metric(reg, XHTTP_COUNTER, "c1", le, 1, rows, 1, none, 0),
                 XOK); /* le is only a histogram's */
    CHECK_EQ_INT(add_metric(reg, XHTTP_COUNTER, "c2", under, 1, rows, 1, none, 0), XERR_INVALID);
    CHECK_EQ_INT(add_metric(reg, XHTTP_COUNTER, "c3", two_k, 2, rows, 1, none, 0), XERR_INVALID);
    CHECK_EQ_INT(add_metric(reg, XHTTP_COUNTER, "c4", one, 1, same, 2, none, 0), XERR_INVALID);
    CHECK_EQ_INT(add_metric(reg, XHTTP_COUNTER, "c5", one, 1, bad_utf8, 1, none, 0), XERR_INVALID);
    CHECK_EQ_INT(add_metric(reg, XHTTP_COUNTER, "c6", one, 1, rows, 0, none, 0), XERR_INVALID);
    CHECK_EQ_INT(add_metric(reg, XHTTP_COUNTER, "c7", NULL, 0, NULL, 2, none, 0), XERR_INVALID);
    CHECK_EQ_INT(add_metric(reg, XHTTP_COUNTER, "c8", nine, 9, nine, 1, none, 0), XERR_LIMIT);
    CHECK_EQ_INT(add_metric(reg, XHTTP_HISTOGRAM, "h2", NULL, 0, NULL, 1, down, 2), XERR_INVALID);
    CHECK_EQ_INT(add_metric(reg, XHTTP_HISTOGRAM, "h3", NULL, 0, NULL, 1, nan_bound, 1), XERR_INVALID);
    CHECK_EQ_INT(add_metric(reg, XHTTP_HISTOGRAM, "h4", NULL, 0, NULL, 1, down, 0), XERR_INVALID);
    CHECK_EQ_INT(add_metric(reg, XHTTP_HISTOGRAM, "h5", one, 1, rows, 2, down, 1), XOK);
    xMetricRegistryDestroy(reg);
}

static void test_durations_by_route_and_status_class(void) {
    xMetricRegistry *reg = xMetricRegistryCreate(2);
    uint32_t ping, user, late;
    CHECK_EQ_INT(xMetricRegistryAddRoute(reg, "GET /ping", &ping), XOK);
    CHECK_EQ_INT(xMetricRegistryAddRoute(reg, "GET /users/:id", &user), XOK);
    CHECK(ping != XMETRICS_UNMATCHED && user != ping);
    static const double under_a_us[] = {0.0000005}, same[] = {0.001, 0.001}, between[] = {0.0000015};
    CHECK_EQ_INT(xMetricRegistryDurations(reg, under_a_us, 1), XERR_INVALID);
    CHECK_EQ_INT(xMetricRegistryDurations(reg, same, 2), XERR_INVALID);
    CHECK_EQ_INT(xMetricRegistryDurations(reg, between, 1), XERR_INVALID);
    static const double bounds[] = {0.001, 0.01};
    CHECK_EQ_INT(xMetricRegistryDurations(reg, bounds, 2), XOK);
    CHECK_EQ_INT(xMetricRegistryDurations(reg, bounds, 2), XERR_STATE);
    CHECK_EQ_INT(xMetricRegistryAddRoute(reg, "POST /late", &late), XOK); /* after: counted too */
    xHttpMetricShard *w0 = xMetricRegistryShard(reg, 0), *w1 = xMetricRegistryShard(reg, 1);
    xMetricShardDuration(w0, user, 200, 500);
    xMetricShardDuration(w1, user, 204, 1000); /* le="0.001": bounds are inclusive */
    xMetricShardDuration(w1, user, 200, 20000);
    xMetricShardDuration(w0, user, 503, 7);
    xMetricShardDuration(w0, XMETRICS_UNMATCHED, 404, 1500);
    xMetricShardDuration(w1, late, 201, 2000000);
    CHECK_TEXT(
        reg, "# HELP xkit_request_duration_seconds Request durations, from the first byte read to the "
             "response's end, by route and status class.\n"
             "# TYPE xkit_request_duration_seconds histogram\n"
             "xkit_request_duration_seconds_bucket{route=\"unmatched\",status=\"4xx\",le=\"0.001\"} 0\n"
             "xkit_request_duration_seconds_bucket{route=\"unmatched\",status=\"4xx\",le=\"0.01\"} 1\n"
             "xkit_request_duration_seconds_bucket{route=\"unmatched\",status=\"4xx\",le=\"+Inf\"} 1\n"
             "xkit_request_duration_seconds_sum{route=\"unmatched\",status=\"4xx\"} 0.0015\n"
             "xkit_request_duration_seconds_count{route=\"unmatched\",status=\"4xx\"} 1\n"
             "xkit_request_duration_seconds_bucket{route=\"GET /users/:id\",status=\"2xx\",le=\"0.001\"} 2\n"
             "xkit_request_duration_seconds_bucket{route=\"GET /users/:id\",status=\"2xx\",le=\"0.01\"} 2\n"
             "xkit_request_duration_seconds_bucket{route=\"GET /users/:id\",status=\"2xx\",le=\"+Inf\"} 3\n"
             "xkit_request_duration_seconds_sum{route=\"GET /users/:id\",status=\"2xx\"} 0.0215\n"
             "xkit_request_duration_seconds_count{route=\"GET /users/:id\",status=\"2xx\"} 3\n"
             "xkit_request_duration_seconds_bucket{route=\"GET /users/:id\",status=\"5xx\",le=\"0.001\"} 1\n"
             "xkit_request_duration_seconds_bucket{route=\"GET /users/:id\",status=\"5xx\",le=\"0.01\"} 1\n"
             "xkit_request_duration_seconds_bucket{route=\"GET /users/:id\",status=\"5xx\",le=\"+Inf\"} 1\n"
             "xkit_request_duration_seconds_sum{route=\"GET /users/:id\",status=\"5xx\"} 7e-06\n"
             "xkit_request_duration_seconds_count{route=\"GET /users/:id\",status=\"5xx\"} 1\n"
             "xkit_request_duration_seconds_bucket{route=\"POST /late\",status=\"2xx\",le=\"0.001\"} 0\n"
             "xkit_request_duration_seconds_bucket{route=\"POST /late\",status=\"2xx\",le=\"0.01\"} 0\n"
             "xkit_request_duration_seconds_bucket{route=\"POST /late\",status=\"2xx\",le=\"+Inf\"} 1\n"
             "xkit_request_duration_seconds_sum{route=\"POST /late\",status=\"2xx\"} 2\n"
             "xkit_request_duration_seconds_count{route=\"POST /late\",status=\"2xx\"} 1\n");
    xMetricRegistryDestroy(reg);
}

static void test_durations_default_from_100_us_to_10_s(void) {
    xMetricRegistry *reg = xMetricRegistryCreate(1);
    CHECK_EQ_INT(xMetricRegistryDurations(reg, NULL, 0), XOK);
    xMetricShardDuration(xMetricRegistryShard(reg, 0), XMETRICS_UNMATCHED, 200, 60);
    char *text = registry_text(reg);
    CHECK(strstr(text, "{route=\"unmatched\",status=\"2xx\",le=\"0.0001\"} 1\n") != NULL);
    CHECK(strstr(text, "{route=\"unmatched\",status=\"2xx\",le=\"0.00025\"} 1\n") != NULL);
    CHECK(
        strstr(text,
               "{route=\"unmatched\",status=\"2xx\",le=\"10\"} 1\n"
               "xkit_request_duration_seconds_bucket{route=\"unmatched\",status=\"2xx\",le=\"+Inf\"} 1\n") !=
        NULL);
    int buckets = 0;
    for (const char *p = text; (p = strstr(p, "_bucket{")); p++) buckets++;
    CHECK_EQ_INT(buckets, 17);
    free(text);
    xMetricRegistryDestroy(reg);
}

static void test_a_handler_adds_fields_once_each_up_to_4_kib(void) {
    xHttpExchange *ex = calloc(1, sizeof *ex);
    xHttpResponse *res = &ex->res;
    CHECK_EQ_INT(xHttpResponseLogField(res, "user", "42"), XOK);
    CHECK_EQ_INT(xHttpResponseLogField(res, "trace.id", ""), XOK);
    CHECK_EQ_INT(xHttpResponseLogField(res, "user", "43"), XERR_INVALID);    /* once each */
    CHECK_EQ_INT(xHttpResponseLogField(res, "status", "500"), XERR_INVALID); /* the format's own */
    CHECK_EQ_INT(xHttpResponseLogField(res, "a b", "x"), XERR_INVALID);
    CHECK_EQ_INT(xHttpResponseLogField(res, NULL, "x"), XERR_INVALID);
    CHECK_EQ_INT(xHttpResponseLogField(res, "x", NULL), XERR_INVALID);
    char big[4096];
    memset(big, 'v', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    CHECK_EQ_INT(xHttpResponseLogField(res, "big", big), XERR_LIMIT);
    big[4096 - 18 - 4 - 1] = '\0'; /* what the fields so far (18 bytes), "big" and two NULs leave */
    CHECK_EQ_INT(xHttpResponseLogField(res, "big", big), XOK);
    CHECK_EQ_INT(xHttpResponseLogField(res, "z", ""), XERR_LIMIT);
    xAccessRecord rec = plain_record();
    rec.fields = (xStr){ex->log_fields.data, ex->log_fields.len};
    char *got = line(XHTTP_LOG_COMMON, &rec);
    const char *want_end = "\" 200 1234 user=\"42\" trace.id=\"\" big=\"vvvv";
    /* the common line's 79 bytes, the fields' 28, the last value's 4,073, '"' and '\n' */
    CHECK_MSG(strstr(got, want_end) != NULL && strlen(got) == 79 + 28 + 4073 + 2, "%.120s (%zu)", got,
              strlen(got));
    free(got);
    res->finished = true; /* the response has ended: its line is written */
    CHECK_EQ_INT(xHttpResponseLogField(res, "late", "x"), XERR_STATE);
    xBufferFree(&ex->log_fields);
    free(ex);
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
    RUN(test_handler_fields_come_last_escaped_as_a_clients);
    RUN(test_field_keys_are_tokens_not_the_formats_own_names);
    RUN(test_a_handler_adds_fields_once_each_up_to_4_kib);
    RUN(test_prometheus_numbers_read_back_exactly);
    RUN(test_prometheus_names_follow_the_data_model);
    RUN(test_user_metrics_are_summed_over_the_shards);
    RUN(test_histograms_default_to_prometheus_buckets_with_labels);
    RUN(test_what_the_data_model_refuses_is_refused);
    RUN(test_durations_by_route_and_status_class);
    RUN(test_durations_default_from_100_us_to_10_s);
    return CHECK_SUMMARY();
}
