/* test_http_core.c — the HTTP facts every layer shares (xhttp/core/tokens.h,
 * date.h): the token class against RFC 9110's list, case-insensitive names,
 * token lists, statuses with bodies, decimals, and the Date header's form; and
 * which fields a handler may add to a response (exchange.c). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "xhttp/core/date.h"
#include "xhttp/core/exchange.h"
#include "xhttp/core/tokens.h"

static void test_token_chars_are_rfc_9110_tchar(void) {
    static const char specials[] = "!#$%&'*+-.^_`|~";
    for (int c = 0; c < 256; c++) {
        bool alnum = (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
        bool expect = alnum || (c != 0 && strchr(specials, c) != NULL);
        CHECK_MSG(xHttpIsTokenChar((unsigned char)c) == expect, "byte 0x%02x", c);
    }
}

static void test_names_compare_ignoring_ascii_case_only(void) {
    CHECK(xHttpNameEquals((xStr){"Content-Length", 14}, "content-length"));
    CHECK(xHttpNameEquals((xStr){"HOST", 4}, "host"));
    CHECK(xHttpNameEquals((xStr){"", 0}, ""));
    CHECK(!xHttpNameEquals((xStr){"Hostx", 5}, "host"));
    CHECK(!xHttpNameEquals((xStr){"Hos", 3}, "host"));
    CHECK(!xHttpNameEquals((xStr){"host\0x", 6}, "host"));
    CHECK(!xHttpNameEquals((xStr){"X-@", 3}, "x-`")); /* 0x40 and 0x60 differ by case bit */
    CHECK(!xHttpNameEquals((xStr){"X-[", 3}, "x-{"));
    CHECK(!xHttpNameEquals((xStr){"\xc4", 1}, "\xe4")); /* Latin-1 case is not ASCII case */
    CHECK(xHttpNameEquals((xStr){"host", 4}, "HOST"));
    CHECK(xHttpSameLower("UpGrade", "upgrade", 7));
    CHECK(!xHttpSameLower("UpGrade", "upgrad3", 7));
}

static void test_token_lists_find_whole_tokens(void) {
    xStr list = xStrFromC("keep-alive, Upgrade,h2c");
    CHECK(xHttpListHasToken(list, "upgrade"));
    CHECK(xHttpListHasToken(list, "H2C"));
    CHECK(!xHttpListHasToken(list, "keep"));
    CHECK(!xHttpListHasToken(xStrFromC(""), "h2c"));
    CHECK(!xHttpListHasToken(xStrFromC("h2c-x"), "h2c"));
}

static void test_statuses_with_bodies(void) {
    CHECK(!xHttpStatusHasBody(100) && !xHttpStatusHasBody(101) && !xHttpStatusHasBody(204));
    CHECK(!xHttpStatusHasBody(304));
    CHECK(xHttpStatusHasBody(200) && xHttpStatusHasBody(404) && xHttpStatusHasBody(500));
}

static void test_decimals_match_printf(void) {
    uint64_t values[] = {0, 7, 10, 99, 4096, 1234567890123ull, UINT64_MAX};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        char got[XHTTP_DECIMAL_MAX + 1], want[32];
        *xHttpPutDecimal(got, values[i]) = '\0';
        snprintf(want, sizeof want, "%llu", (unsigned long long)values[i]);
        CHECK_MSG(strcmp(got, want) == 0, "%s vs %s", got, want);
    }
}

static void test_date_has_the_imf_fixdate_form(void) {
    char date[XHTTP_DATE_LEN + 1];
    xHttpFormatDate(date, 784111777); /* RFC 9110's example */
    CHECK_MSG(strcmp(date, "Sun, 06 Nov 1994 08:49:37 GMT") == 0, "%s", date);
    time_t now = time(NULL);
    xHttpFormatDate(date, now);
    char expect[64];
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(expect, sizeof expect, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    CHECK_MSG(strcmp(date, expect) == 0, "%s vs %s", date, expect);
}

static void test_date_cache_follows_the_loops_second(void) {
    xEventLoop *loop = xEventLoopCreate();
    xHttpDateCache cache = {0};
    const char *date = xHttpDate(&cache, loop);
    char expect[XHTTP_DATE_LEN + 1];
    xHttpFormatDate(expect, xEventLoopWallSeconds(loop));
    CHECK_EQ_INT(strlen(date), XHTTP_DATE_LEN);
    CHECK(strcmp(date, expect) == 0);
    xEventLoopDestroy(loop);
}

/* Every byte a handler's field name or value may hold, and what the response's
 * head gets: a name of tchars, a value without control characters but HTAB, and
 * never a field the server frames itself. */
static void test_handler_fields_are_checked_byte_by_byte(void) {
    xHttpContext ctx;
    memset(&ctx, 0, sizeof ctx);
    xHttpExchange *ex = xHttpExchangeAcquire(&ctx);
    CHECK(ex != NULL);
    xHttpResponse *res = &ex->res;
    CHECK_EQ_INT(xHttpResponseAddHeader(res, "Content-Type", "text/plain"), XOK);
    CHECK_EQ_INT(xHttpResponseAddHeader(res, "X-Tab", "a\tb c~\x80\xff"), XOK);
    CHECK_EQ_INT(xHttpResponseAddHeader(res, "X-Empty", ""), XOK);
    static const char expect[] = "Content-Type: text/plain\r\nX-Tab: a\tb c~\x80\xff\r\nX-Empty: \r\n";
    CHECK_EQ_INT(res->headers.len, sizeof expect - 1);
    CHECK(memcmp(res->headers.data, expect, sizeof expect - 1) == 0);
    size_t kept = res->headers.len;
    char name[] = "X-Name?", value[] = "v?v";
    for (int c = 1; c < 256; c++) {
        name[6] = (char)c;
        value[1] = (char)c;
        bool tchar = XHTTP_IS_TCHAR(c), vchar = c == '\t' || (c >= 0x20 && c != 0x7f);
        CHECK_MSG((xHttpResponseAddHeader(res, name, "v") == XOK) == tchar, "name byte 0x%02x", c);
        CHECK_MSG((xHttpResponseAddHeader(res, "X-Value", value) == XOK) == vchar, "value byte 0x%02x", c);
    }
    res->headers.len = kept;
    static const char *const refused[][2] = {
        {"", "v"},
        {"Date", "now"},
        {"content-length", "5"},
        {"Transfer-Encoding", "chunked"},
        {"CONNECTION", "close"},
        {"X-A", "line\r\nX-Smuggled: 1"},
        {"X A", "v"},
        {"X-A:", "v"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
        CHECK_MSG(xHttpResponseAddHeader(res, refused[i][0], refused[i][1]) == XERR_INVALID, "%s: %s",
                  refused[i][0], refused[i][1]);
    CHECK_EQ_INT(xHttpResponseAddHeader(res, NULL, "v"), XERR_INVALID);
    CHECK_EQ_INT(xHttpResponseAddHeader(res, "X-A", NULL), XERR_INVALID);
    CHECK_EQ_INT(res->headers.len, kept); /* nothing refused was written */
    xHttpExchangeRelease(&ctx, ex);
    xHttpExchangePoolDestroy(&ctx);
}

int main(void) {
    RUN(test_token_chars_are_rfc_9110_tchar);
    RUN(test_names_compare_ignoring_ascii_case_only);
    RUN(test_token_lists_find_whole_tokens);
    RUN(test_statuses_with_bodies);
    RUN(test_decimals_match_printf);
    RUN(test_date_has_the_imf_fixdate_form);
    RUN(test_date_cache_follows_the_loops_second);
    RUN(test_handler_fields_are_checked_byte_by_byte);
    return CHECK_SUMMARY();
}
