/* test_accept_encoding.c — Accept-Encoding's q-values
 * (xHttpAcceptEncodingQuality, xhttp/core/accept.h): explicit entries, "*",
 * identity's default, q=0 refusals, spacing and case, and malformed entries,
 * each value placed against an unreadable page so an over-read crashes. */
#include <string.h>

#include "check.h"
#include "guard_page.h"
#include "xhttp/core/accept.h"

static int quality(const char *field, const char *coding) {
    size_t n = strlen(field);
    char *end = guard_page_map(n + 1);
    memcpy(end - n, field, n);
    return xHttpAcceptEncodingQuality((xStr){end - n, n}, coding);
}

static void test_listed_codings_without_q_are_fully_wanted(void) {
    CHECK_EQ_INT(quality("gzip, br", "gzip"), 1000);
    CHECK_EQ_INT(quality("gzip, br", "br"), 1000);
    CHECK_EQ_INT(quality("deflate, gzip, br, zstd", "br"), 1000); /* what curl --compressed sends */
    CHECK_EQ_INT(quality("gzip", "br"), 0);
}

static void test_q_values_are_read_in_thousandths(void) {
    CHECK_EQ_INT(quality("br;q=1, gzip;q=0.8", "br"), 1000);
    CHECK_EQ_INT(quality("br;q=1, gzip;q=0.8", "gzip"), 800);
    CHECK_EQ_INT(quality("gzip;q=0.125", "gzip"), 125);
    CHECK_EQ_INT(quality("gzip;q=0.05", "gzip"), 50);
    CHECK_EQ_INT(quality("gzip;q=1.000", "gzip"), 1000);
    CHECK_EQ_INT(quality("gzip;q=0.", "gzip"), 0);
    CHECK_EQ_INT(quality("gzip;Q=0.5", "gzip"), 500);
}

static void test_q_zero_refuses(void) {
    CHECK_EQ_INT(quality("gzip;q=0, br", "gzip"), 0);
    CHECK_EQ_INT(quality("br;q=0.000", "br"), 0);
}

static void test_star_covers_what_is_not_listed(void) {
    CHECK_EQ_INT(quality("*", "br"), 1000);
    CHECK_EQ_INT(quality("gzip;q=0.5, *;q=0.2", "br"), 200);
    CHECK_EQ_INT(quality("gzip;q=0.5, *;q=0.2", "gzip"), 500);
    CHECK_EQ_INT(quality("*;q=0, gzip", "gzip"), 1000);
    CHECK_EQ_INT(quality("*;q=0, gzip", "br"), 0);
}

static void test_identity_is_acceptable_unless_refused(void) {
    CHECK_EQ_INT(quality("", "identity"), 1000);
    CHECK_EQ_INT(quality("gzip", "identity"), 1000);
    CHECK_EQ_INT(quality("identity;q=0", "identity"), 0);
    CHECK_EQ_INT(quality("*;q=0", "identity"), 0);
    CHECK_EQ_INT(quality("*;q=0, identity;q=0.5", "identity"), 500);
    CHECK_EQ_INT(quality("", "gzip"), 0);
}

static void test_codings_compare_without_case_and_around_spaces(void) {
    CHECK_EQ_INT(quality("GZip", "gzip"), 1000);
    CHECK_EQ_INT(quality("  br ;  q=0.7 ,gzip\t;q=0.3  ", "br"), 700);
    CHECK_EQ_INT(quality("  br ;  q=0.7 ,gzip\t;q=0.3  ", "gzip"), 300);
    CHECK_EQ_INT(quality(",, ,gzip,", "gzip"), 1000);
    CHECK_EQ_INT(quality("br;level=5;q=0.4", "br"), 400); /* other parameters are skipped */
}

static void test_names_must_match_whole(void) {
    CHECK_EQ_INT(quality("x-gzip, gzipx", "gzip"), 0);
    CHECK_EQ_INT(quality("brotli", "br"), 0);
}

static void test_malformed_q_values_make_the_entry_absent(void) {
    CHECK_EQ_INT(quality("gzip;q=2", "gzip"), 0);
    CHECK_EQ_INT(quality("gzip;q=1.5", "gzip"), 0);
    CHECK_EQ_INT(quality("gzip;q=0.1234", "gzip"), 0);
    CHECK_EQ_INT(quality("gzip;q=-1", "gzip"), 0);
    CHECK_EQ_INT(quality("gzip;q=", "gzip"), 0);
    CHECK_EQ_INT(quality("gzip;q", "gzip"), 0);
    CHECK_EQ_INT(quality("gzip;q=abc, *;q=0.3", "gzip"), 300); /* then "*" speaks for it */
    CHECK_EQ_INT(quality("gzip junk", "gzip"), 0);
    CHECK_EQ_INT(quality("gzip;q=0.5;", "gzip"), 0);
}

int main(void) {
    RUN(test_listed_codings_without_q_are_fully_wanted);
    RUN(test_q_values_are_read_in_thousandths);
    RUN(test_q_zero_refuses);
    RUN(test_star_covers_what_is_not_listed);
    RUN(test_identity_is_acceptable_unless_refused);
    RUN(test_codings_compare_without_case_and_around_spaces);
    RUN(test_names_must_match_whole);
    RUN(test_malformed_q_values_make_the_entry_absent);
    return CHECK_SUMMARY();
}
