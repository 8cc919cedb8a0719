/* test_uri_cookie.c — percent-decoding (xHttpPercentDecode) and reading a
 * Cookie field (xhttp/core/cookie.h): valid and invalid escapes, '+' only
 * where asked, NUL, output room, and cookie-strings as clients send them. */
#include <string.h>

#include <xhttp/server.h>

#include "check.h"
#include "guard_page.h"
#include "xhttp/core/cookie.h"

/* Decodes s placed to end right at an unreadable page, so an over-read of a
 * truncated escape crashes instead of passing. */
static xErrno decode(const char *s, unsigned flags, char *out, size_t cap, size_t *len) {
    size_t n = strlen(s);
    char *end = guard_page_map(n + 1);
    memcpy(end - n, s, n);
    *len = (size_t)-1;
    return xHttpPercentDecode((xStr){end - n, n}, out, cap, flags, len);
}

#define CHECK_DECODES(in, flags, want)                                                                       \
    do {                                                                                                     \
        char out_[256];                                                                                      \
        size_t len_;                                                                                         \
        CHECK_EQ_INT(decode(in, flags, out_, sizeof out_, &len_), XOK);                                      \
        CHECK_STR(((xStr){out_, len_ == (size_t)-1 ? 0 : len_}), want);                                      \
    } while (0)

static void test_escapes_decode_in_either_case(void) {
    CHECK_DECODES("", 0, "");
    CHECK_DECODES("plain/path", 0, "plain/path");
    CHECK_DECODES("a%20b", 0, "a b");
    CHECK_DECODES("%2f%2F%7e", 0, "//~");
    CHECK_DECODES("%41%42%43", 0, "ABC");
    CHECK_DECODES("caf%C3%A9", 0, "caf\xc3\xa9");
    CHECK_DECODES("100%25", 0, "100%");
    CHECK_DECODES("%2541", 0, "%41"); /* decoded once, never twice */
}

static void test_bad_escapes_are_errors_not_kept(void) {
    char out[64];
    size_t len;
    CHECK_EQ_INT(decode("%G1", 0, out, sizeof out, &len), XERR_INVALID);
    CHECK_EQ_INT(decode("%1G", 0, out, sizeof out, &len), XERR_INVALID);
    CHECK_EQ_INT(decode("a% b", 0, out, sizeof out, &len), XERR_INVALID);
    CHECK_EQ_INT(decode("%-1", 0, out, sizeof out, &len), XERR_INVALID);
    CHECK_EQ_INT(decode("%:0", 0, out, sizeof out, &len), XERR_INVALID); /* ':' | 0x20 is not a hex digit */
    CHECK_EQ_INT(decode("%`1", 0, out, sizeof out, &len), XERR_INVALID);
}

static void test_truncated_escapes_are_errors_without_over_reading(void) {
    char out[64];
    size_t len;
    CHECK_EQ_INT(decode("%4", 0, out, sizeof out, &len), XERR_INVALID);
    CHECK_EQ_INT(decode("ab%", 0, out, sizeof out, &len), XERR_INVALID);
    CHECK_EQ_INT(decode("%", 0, out, sizeof out, &len), XERR_INVALID);
    CHECK_EQ_INT(decode("x%4", XHTTP_DECODE_PLUS_SPACE, out, sizeof out, &len), XERR_INVALID);
}

static void test_nul_decodes_unless_refused(void) {
    char out[16];
    size_t len;
    CHECK_EQ_INT(decode("a%00b", 0, out, sizeof out, &len), XOK);
    CHECK(len == 3 && memcmp(out, "a\0b", 3) == 0);
    CHECK_EQ_INT(decode("a%00b", XHTTP_DECODE_REFUSE_NUL, out, sizeof out, &len), XERR_INVALID);
    CHECK_EQ_INT(decode("../etc/passwd%00.png", XHTTP_DECODE_REFUSE_NUL, out, sizeof out, &len),
                 XERR_INVALID);
    CHECK_DECODES("a%01b", XHTTP_DECODE_REFUSE_NUL, "a\001b");
}

static void test_plus_is_space_only_when_asked(void) {
    CHECK_DECODES("a+b", 0, "a+b");
    CHECK_DECODES("a+b", XHTTP_DECODE_PLUS_SPACE, "a b");
    CHECK_DECODES("a%2Bb+c", XHTTP_DECODE_PLUS_SPACE, "a+b c"); /* an escaped '+' stays '+' */
    CHECK_DECODES("++", XHTTP_DECODE_PLUS_SPACE | XHTTP_DECODE_REFUSE_NUL, "  ");
}

static void test_output_room_is_never_exceeded(void) {
    char out[8];
    size_t len;
    memset(out, '#', sizeof out);
    CHECK_EQ_INT(decode("abcd", 0, out, 3, &len), XERR_LIMIT);
    CHECK(out[3] == '#');
    CHECK_EQ_INT(decode("abc", 0, out, 3, &len), XOK);
    CHECK_EQ_INT(len, 3);
    CHECK_EQ_INT(decode("%41%42%43%44", 0, out, 4, &len), XOK); /* 12 bytes in, 4 out */
    CHECK(len == 4 && memcmp(out, "ABCD", 4) == 0);
    memset(out, '#', sizeof out);
    CHECK_EQ_INT(decode("%41%42%43%44", 0, out, 3, &len), XERR_LIMIT);
    CHECK(out[3] == '#');
    CHECK_EQ_INT(decode("", 0, NULL, 0, &len), XOK);
    CHECK_EQ_INT(len, 0);
}

static void test_decodes_in_place(void) {
    char buf[] = "a%20b+c%2Fd";
    size_t len;
    CHECK_EQ_INT(xHttpPercentDecode(xStrFromC(buf), buf, sizeof buf - 1, XHTTP_DECODE_PLUS_SPACE, &len), XOK);
    CHECK_STR(((xStr){buf, len}), "a b c/d");
}

static bool cookie(const char *field, const char *name, xStr *value) {
    return xHttpCookieFind(xStrFromC(field), xStrFromC(name), value);
}

#define CHECK_COOKIE(field, name, want)                                                                      \
    do {                                                                                                     \
        xStr v_ = {"?", 1};                                                                                  \
        CHECK_MSG(cookie(field, name, &v_), "%s in %s", name, field);                                        \
        CHECK_STR(v_, want);                                                                                 \
    } while (0)

static void test_cookie_pairs_are_found_by_exact_name(void) {
    const char *field = "SID=31d4d96e407aad42; lang=en-US; theme=dark";
    CHECK_COOKIE(field, "SID", "31d4d96e407aad42");
    CHECK_COOKIE(field, "lang", "en-US");
    CHECK_COOKIE(field, "theme", "dark");
    xStr v;
    CHECK(!cookie(field, "sid", &v)); /* names are case-sensitive */
    CHECK(!cookie(field, "missing", &v));
    CHECK(!cookie(field, "", &v));
    CHECK(!cookie("", "SID", &v));
}

static void test_cookie_names_that_prefix_others_do_not_match_them(void) {
    const char *field = "session_id=1; session=2; sess=3";
    CHECK_COOKIE(field, "session", "2");
    CHECK_COOKIE(field, "sess", "3");
    CHECK_COOKIE(field, "session_id", "1");
    xStr v;
    CHECK(!cookie(field, "s", &v));
    CHECK(!cookie("a=x=y", "a=x", &v)); /* the name ends at the first '=' */
    CHECK_COOKIE("a=x=y", "a", "x=y");
}

static void test_cookie_spaces_around_pairs_are_ignored(void) {
    const char *field = "  a = 1 ;b=2;\tc=3\t;  d=4  ";
    CHECK_COOKIE(field, "a", "1");
    CHECK_COOKIE(field, "b", "2");
    CHECK_COOKIE(field, "c", "3");
    CHECK_COOKIE(field, "d", "4");
    CHECK_COOKIE("a=hello world", "a", "hello world"); /* inner spaces are the value's */
}

static void test_cookie_quoted_values_lose_their_quotes(void) {
    CHECK_COOKIE("a=\"quoted\"; b=2", "a", "quoted");
    CHECK_COOKIE("a=\"\"", "a", "");
    CHECK_COOKIE("a=\"", "a", "\"");         /* one quote is no pair of them */
    CHECK_COOKIE("a=\"half", "a", "\"half"); /* nor an opening one alone */
    CHECK_COOKIE("a=x\"y\"", "a", "x\"y\""); /* quotes inside stay */
    CHECK_COOKIE("a= \"spaced\" ", "a", "spaced");
}

static void test_cookie_empty_values_are_found(void) {
    CHECK_COOKIE("a=; b=2", "a", "");
    CHECK_COOKIE("b=2; a=", "a", "");
    CHECK_COOKIE("a= ; b=2", "a", "");
}

static void test_cookie_malformed_pairs_are_skipped(void) {
    const char *field = "garbage; =nameless; ;;; a; b=2; a=1";
    CHECK_COOKIE(field, "b", "2");
    CHECK_COOKIE(field, "a", "1"); /* "a" without '=' is not a cookie named a */
    xStr v;
    CHECK(!cookie(field, "garbage", &v));
    CHECK(!cookie("=x", "x", &v));
    CHECK(!cookie(";", "a", &v));
}

static void test_cookie_first_match_wins(void) { CHECK_COOKIE("a=1; a=2", "a", "1"); }

int main(void) {
    RUN(test_escapes_decode_in_either_case);
    RUN(test_bad_escapes_are_errors_not_kept);
    RUN(test_truncated_escapes_are_errors_without_over_reading);
    RUN(test_nul_decodes_unless_refused);
    RUN(test_plus_is_space_only_when_asked);
    RUN(test_output_room_is_never_exceeded);
    RUN(test_decodes_in_place);
    RUN(test_cookie_pairs_are_found_by_exact_name);
    RUN(test_cookie_names_that_prefix_others_do_not_match_them);
    RUN(test_cookie_spaces_around_pairs_are_ignored);
    RUN(test_cookie_quoted_values_lose_their_quotes);
    RUN(test_cookie_empty_values_are_found);
    RUN(test_cookie_malformed_pairs_are_skipped);
    RUN(test_cookie_first_match_wins);
    return CHECK_SUMMARY();
}
