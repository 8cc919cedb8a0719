/* test_static_headers.c — what the static file handler reads from text: the
 * path rules, extensions and media types (xhttp/handler/static_headers.h),
 * Range values and If-None-Match lists, and Accept-Encoding qvalues
 * (xhttp/core/accept.h). Every input ends at an unreadable page. */
#include <string.h>

#include "check.h"
#include "guard_page.h"
#include "xhttp/core/accept.h"
#include "xhttp/handler/static_headers.h"

/* s copied to end right at an unreadable page. */
static xStr guarded(const char *s) {
    size_t n = strlen(s);
    char *end = guard_page_map(n + 1);
    memcpy(end - n, s, n);
    return (xStr){end - n, n};
}

static void test_safe_paths_stay_below_the_root(void) {
    const char *safe[] = {"",     "a",   "a/b.css",   "dir/", "a/b/c/", ".well-known/x",
                          "a..b", "...", "x/.hidden", "é"};
    for (size_t i = 0; i < sizeof safe / sizeof safe[0]; i++)
        CHECK_MSG(xHttpStaticPathIsSafe(guarded(safe[i])), "\"%s\" refused", safe[i]);
    const char *unsafe[] = {"..", "../a", "a/..", "a/../b", ".", "./a", "a/./b",
                            "/a", "a//b", "a//",  "//",     "/", "a/.", "a/../"};
    for (size_t i = 0; i < sizeof unsafe / sizeof unsafe[0]; i++)
        CHECK_MSG(!xHttpStaticPathIsSafe(guarded(unsafe[i])), "\"%s\" allowed", unsafe[i]);
    CHECK(!xHttpStaticPathIsSafe((xStr){"a\0b", 3}));
}

static void test_extensions_are_the_last_segment_s(void) {
    CHECK_STR(xHttpStaticExtension(guarded("a/b.min.css")), "css");
    CHECK_STR(xHttpStaticExtension(guarded("x.WOFF2")), "WOFF2");
    CHECK_STR(xHttpStaticExtension(guarded("dir.d/file")), "");
    CHECK_STR(xHttpStaticExtension(guarded(".profile")), "");
    CHECK_STR(xHttpStaticExtension(guarded("a/.profile")), "");
    CHECK_STR(xHttpStaticExtension(guarded("trailing.")), "");
    CHECK_STR(xHttpStaticExtension(guarded("")), "");
}

static void test_media_types_cover_the_web_s_files(void) {
    const char *table[][2] = {
        {"html", "text/html"},
        {"css", "text/css"},
        {"js", "application/javascript"},
        {"mjs", "application/javascript"},
        {"json", "application/json"},
        {"txt", "text/plain"},
        {"xml", "text/xml"},
        {"svg", "image/svg+xml"},
        {"png", "image/png"},
        {"jpg", "image/jpeg"},
        {"jpeg", "image/jpeg"},
        {"gif", "image/gif"},
        {"webp", "image/webp"},
        {"avif", "image/avif"},
        {"ico", "image/x-icon"},
        {"woff", "font/woff"},
        {"woff2", "font/woff2"},
        {"ttf", "font/ttf"},
        {"wasm", "application/wasm"},
        {"pdf", "application/pdf"},
        {"mp4", "video/mp4"},
        {"webm", "video/webm"},
        {"HTML", "text/html"},
        {"exe", "application/octet-stream"},
        {"", "application/octet-stream"},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        const char *got = xHttpStaticMediaType(guarded(table[i][0]));
        CHECK_MSG(strcmp(got, table[i][1]) == 0, ".%s: %s", table[i][0], got);
    }
}

#define CHECK_RANGE(value, size, want, want_start, want_len)                                                 \
    do {                                                                                                     \
        uint64_t start_ = 7777, len_ = 7777;                                                                 \
        xHttpStaticRange r_ = xHttpStaticParseRange(guarded(value), size, &start_, &len_);                   \
        CHECK_MSG(r_ == (want), "%s of %llu: %d", value, (unsigned long long)(size), (int)r_);               \
        if (r_ == XSTATIC_RANGE_PART && (want) == XSTATIC_RANGE_PART)                                        \
            CHECK_MSG(start_ == (want_start) && len_ == (want_len), "%s: %llu+%llu", value,                  \
                      (unsigned long long)start_, (unsigned long long)len_);                                 \
    } while (0)

static void test_one_range_is_read_and_clamped(void) {
    CHECK_RANGE("bytes=0-99", 1000, XSTATIC_RANGE_PART, 0, 100);
    CHECK_RANGE("bytes=990-", 1000, XSTATIC_RANGE_PART, 990, 10);
    CHECK_RANGE("bytes=-10", 1000, XSTATIC_RANGE_PART, 990, 10);
    CHECK_RANGE("bytes=-5000", 1000, XSTATIC_RANGE_PART, 0, 1000);
    CHECK_RANGE("bytes=500-99999", 1000, XSTATIC_RANGE_PART, 500, 500);
    CHECK_RANGE("  Bytes=1-1 ", 1000, XSTATIC_RANGE_PART, 1, 1);
    CHECK_RANGE("bytes=0-99999999999999999999999", 1000, XSTATIC_RANGE_PART, 0, 1000);
    CHECK_RANGE("bytes=999-999", 1000, XSTATIC_RANGE_PART, 999, 1);
}

static void test_ranges_beyond_the_end_are_unsatisfiable(void) {
    CHECK_RANGE("bytes=1000-", 1000, XSTATIC_RANGE_UNSATISFIABLE, 0, 0);
    CHECK_RANGE("bytes=1000-2000", 1000, XSTATIC_RANGE_UNSATISFIABLE, 0, 0);
    CHECK_RANGE("bytes=-0", 1000, XSTATIC_RANGE_UNSATISFIABLE, 0, 0);
    CHECK_RANGE("bytes=0-", 0, XSTATIC_RANGE_UNSATISFIABLE, 0, 0);
    CHECK_RANGE("bytes=-1", 0, XSTATIC_RANGE_UNSATISFIABLE, 0, 0);
    CHECK_RANGE("bytes=99999999999999999999999-", 1000, XSTATIC_RANGE_UNSATISFIABLE, 0, 0);
}

static void test_what_is_not_one_range_is_the_whole_file(void) {
    const char *whole[] = {
        "",          "bytes",      "bytes=",     "bytes=-",    "bytes=5-1", "bytes=0-1,3-4", "bytes=a-b",
        "items=0-1", "bytes=1-2x", "bytes =0-1", "bytes=0 -1", "bytes=--1", "bytes=1--2"};
    for (size_t i = 0; i < sizeof whole / sizeof whole[0]; i++)
        CHECK_RANGE(whole[i], 1000, XSTATIC_RANGE_WHOLE, 0, 0);
}

static void test_etag_lists_match_weakly(void) {
    xStr etag = xStrFromC("\"abc-1\"");
    CHECK(xHttpStaticEtagListMatches(guarded("\"abc-1\""), etag));
    CHECK(xHttpStaticEtagListMatches(guarded("W/\"abc-1\""), etag));
    CHECK(xHttpStaticEtagListMatches(guarded("\"x\", \"abc-1\""), etag));
    CHECK(xHttpStaticEtagListMatches(guarded("\"x\",W/\"abc-1\" ,"), etag));
    CHECK(xHttpStaticEtagListMatches(guarded("*"), etag));
    CHECK(!xHttpStaticEtagListMatches(guarded("\"abc\""), etag));
    CHECK(!xHttpStaticEtagListMatches(guarded("\"abc-1"), etag));
    CHECK(!xHttpStaticEtagListMatches(guarded("abc-1"), etag));
    CHECK(!xHttpStaticEtagListMatches(guarded(""), etag));
    CHECK(!xHttpStaticEtagListMatches(guarded("W/"), etag));
    CHECK(!xHttpStaticEtagListMatches(guarded("junk, \"abc-1\""), etag)); /* nothing after a fault */
}

static void test_accept_encoding_qvalues(void) {
    CHECK_EQ_INT(xHttpAcceptQuality(guarded("br"), "br"), 1000);
    CHECK_EQ_INT(xHttpAcceptQuality(guarded("gzip;q=0.8, br;q=1"), "gzip"), 800);
    CHECK_EQ_INT(xHttpAcceptQuality(guarded("gzip;q=0.8, br;q=1"), "br"), 1000);
    CHECK_EQ_INT(xHttpAcceptQuality(guarded("gzip;q=0"), "gzip"), 0);
    CHECK_EQ_INT(xHttpAcceptQuality(guarded("GZip ; Q = 0.125"), "gzip"), 125);
    CHECK_EQ_INT(xHttpAcceptQuality(guarded("gzip;q=1.000"), "gzip"), 1000);
    CHECK_EQ_INT(xHttpAcceptQuality(guarded("gzip;level=1;q=0.5"), "gzip"), 500);
    CHECK_EQ_INT(xHttpAcceptQuality(guarded("br"), "gzip"), XHTTP_Q_UNSTATED);
    CHECK_EQ_INT(xHttpAcceptQuality(guarded(""), "gzip"), XHTTP_Q_UNSTATED);
    CHECK_EQ_INT(xHttpAcceptQuality(guarded("*;q=0.3"), "gzip"), 300);
    CHECK_EQ_INT(xHttpAcceptQuality(guarded("*;q=0.3, gzip;q=0.2"), "gzip"), 200);
    CHECK_EQ_INT(xHttpAcceptQuality(guarded("x-gzip"), "gzip"), XHTTP_Q_UNSTATED);
    CHECK_EQ_INT(xHttpAcceptQuality(guarded("gzipx, gzip;q=0.4"), "gzip"), 400);
    /* Malformed qvalues count as absent. */
    const char *bad[] = {"gzip;q=1.5", "gzip;q=2",  "gzip;q=0.1234", "gzip;q=",
                         "gzip;q=x",   "gzip;q=-1", "gzip;q=1.001",  "gzip;q=.5"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_MSG(xHttpAcceptQuality(guarded(bad[i]), "gzip") == XHTTP_Q_UNSTATED, "%s", bad[i]);
    CHECK_EQ_INT(xHttpAcceptQuality(guarded("gzip;q=1.5, *;q=0.1"), "gzip"), 100);
}

static void test_accept_encoding_qualities_at_once_match_one_by_one(void) {
    const char *const codings[] = {"br", "gzip", "identity", "zstd"};
    const char *fields[] = {
        "br;q=1, gzip;q=0.8", "*;q=0.2, gzip",           "gzip, gzip;q=0", "identity;q=0, *", "",
        "BR;q=0.5,br;q=1",    "x;q=9, gzip;q=0.7, *;q=0"};
    for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++) {
        int q[4];
        xHttpAcceptQualities(guarded(fields[f]), codings, 4, q);
        for (int i = 0; i < 4; i++)
            CHECK_MSG(q[i] == xHttpAcceptQuality(guarded(fields[f]), codings[i]), "%s / %s: %d", fields[f],
                      codings[i], q[i]);
    }
    int q[2];
    xHttpAcceptQualities(guarded("gzip;q=0.3"), codings, 2, q);
    CHECK(q[0] == XHTTP_Q_UNSTATED && q[1] == 300);
}

int main(void) {
    RUN(test_safe_paths_stay_below_the_root);
    RUN(test_extensions_are_the_last_segment_s);
    RUN(test_media_types_cover_the_web_s_files);
    RUN(test_one_range_is_read_and_clamped);
    RUN(test_ranges_beyond_the_end_are_unsatisfiable);
    RUN(test_what_is_not_one_range_is_the_whole_file);
    RUN(test_etag_lists_match_weakly);
    RUN(test_accept_encoding_qvalues);
    RUN(test_accept_encoding_qualities_at_once_match_one_by_one);
    return CHECK_SUMMARY();
}
