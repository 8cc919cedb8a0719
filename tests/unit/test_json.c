/* test_json.c — the JSON writer: exact output, escapes, UTF-8 checks,
 * numbers at their limits, and misuse refused. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include <xbase/json.h>

#include "check.h"

/* The writer's output so far as a view, for CHECK_STR. */
typedef struct {
    const char *data;
    size_t len;
} View;

static View view_of(const xBuffer *b) { return (View){b->data, b->len}; }

static void test_nested_document_has_commas_and_colons_in_place(void) {
    xBuffer b = {0};
    xJsonWriter w;
    xJsonInit(&w, &b);
    xJsonBeginObject(&w);
    xJsonKey(&w, "items", 5);
    xJsonBeginArray(&w);
    for (int i = 1; i <= 2; i++) {
        xJsonBeginObject(&w);
        xJsonKey(&w, "id", 2);
        xJsonInt(&w, i);
        xJsonKey(&w, "tags", 4);
        xJsonBeginArray(&w);
        xJsonString(&w, "a", 1);
        xJsonString(&w, "b", 1);
        xJsonEndArray(&w);
        xJsonKey(&w, "on", 2);
        xJsonBool(&w, i == 1);
        xJsonEndObject(&w);
    }
    xJsonEndArray(&w);
    xJsonKey(&w, "none", 4);
    xJsonNull(&w);
    xJsonKey(&w, "empty", 5);
    xJsonBeginObject(&w);
    xJsonEndObject(&w);
    xJsonEndObject(&w);
    CHECK_EQ_INT(xJsonFinish(&w), XOK);
    CHECK_STR(view_of(&b), "{\"items\":[{\"id\":1,\"tags\":[\"a\",\"b\"],\"on\":true},"
                           "{\"id\":2,\"tags\":[\"a\",\"b\"],\"on\":false}],\"none\":null,\"empty\":{}}");
    xBufferFree(&b);
}

static void test_existing_bytes_are_kept(void) {
    xBuffer b = {0};
    xBufferAppend(&b, "data: ", 6);
    xJsonWriter w;
    xJsonInit(&w, &b);
    xJsonInt(&w, 7);
    CHECK_EQ_INT(xJsonFinish(&w), XOK);
    CHECK_STR(view_of(&b), "data: 7");
    xBufferFree(&b);
}

static void test_strings_escape_quotes_backslashes_and_every_control_byte(void) {
    char in[40];
    size_t n = 0;
    for (int c = 0; c < 0x20; c++) in[n++] = (char)c;
    in[n++] = '"';
    in[n++] = '\\';
    in[n++] = '/';
    in[n++] = 0x7f;
    xBuffer b = {0};
    xJsonWriter w;
    xJsonInit(&w, &b);
    xJsonString(&w, in, n);
    CHECK_EQ_INT(xJsonFinish(&w), XOK);
    CHECK_STR(view_of(&b), "\"\\u0000\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007\\b\\t\\n\\u000b\\f\\r"
                           "\\u000e\\u000f\\u0010\\u0011\\u0012\\u0013\\u0014\\u0015\\u0016\\u0017\\u0018"
                           "\\u0019\\u001a\\u001b\\u001c\\u001d\\u001e\\u001f\\\"\\\\/\x7f\"");
    xBufferFree(&b);
}

static void test_long_strings_of_escapes_grow_the_buffer(void) {
    /* Every byte needs six: the writer must keep making room as it goes. */
    size_t n = 100000;
    char *in = calloc(n, 1);
    xBuffer b = {0};
    xJsonWriter w;
    xJsonInit(&w, &b);
    xJsonString(&w, in, n);
    CHECK_EQ_INT(xJsonFinish(&w), XOK);
    CHECK_EQ_INT(b.len, n * 6 + 2);
    CHECK(b.len > 8 && memcmp(b.data + b.len - 7, "\\u0000\"", 7) == 0);
    free(in);
    xBufferFree(&b);
}

static void test_utf8_is_copied_as_it_is(void) {
    const char *in = "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xef\xbf\xbf \xf4\x8f\xbf\xbf";
    xBuffer b = {0};
    xJsonWriter w;
    xJsonInit(&w, &b);
    xJsonString(&w, in, strlen(in));
    CHECK_EQ_INT(xJsonFinish(&w), XOK);
    CHECK(b.len == strlen(in) + 2 && memcmp(b.data + 1, in, strlen(in)) == 0);
    xBufferFree(&b);
}

static void test_bytes_that_are_not_utf8_are_refused(void) {
    static const char *const bad[] = {
        "\x80",             /* a continuation byte alone */
        "\xc0\x80",         /* overlong NUL */
        "\xc1\xbf",         /* overlong */
        "\xe0\x80\x80",     /* overlong three bytes */
        "\xed\xa0\x80",     /* a UTF-16 surrogate */
        "\xf0\x80\x80\x80", /* overlong four bytes */
        "\xf4\x90\x80\x80", /* past U+10FFFF */
        "\xf5\x80\x80\x80", /* no such lead byte */
        "\xff",
        "\xc3",     /* cut off */
        "\xe2\x82", /* cut off */
        "ok\xc3(",  /* lead byte, then no continuation */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        xBuffer b = {0};
        xJsonWriter w;
        xJsonInit(&w, &b);
        xJsonString(&w, bad[i], strlen(bad[i]));
        CHECK_MSG(xJsonFinish(&w) == XERR_INVALID, "case %zu", i);
        xBufferFree(&b);
    }
    /* A key is held to the same rule, and the error sticks. */
    xBuffer b = {0};
    xJsonWriter w;
    xJsonInit(&w, &b);
    xJsonBeginObject(&w);
    xJsonKey(&w, "\xff", 1);
    xJsonInt(&w, 1);
    xJsonEndObject(&w);
    CHECK_EQ_INT(xJsonFinish(&w), XERR_INVALID);
    xBufferFree(&b);
}

static void check_number(void (*write)(xJsonWriter *, const void *), const void *v, const char *expected) {
    xBuffer b = {0};
    xJsonWriter w;
    xJsonInit(&w, &b);
    write(&w, v);
    CHECK_EQ_INT(xJsonFinish(&w), XOK);
    CHECK_STR(view_of(&b), expected);
    xBufferFree(&b);
}

static void write_int(xJsonWriter *w, const void *v) { xJsonInt(w, *(const int64_t *)v); }
static void write_uint(xJsonWriter *w, const void *v) { xJsonUint(w, *(const uint64_t *)v); }
static void write_double(xJsonWriter *w, const void *v) { xJsonDouble(w, *(const double *)v); }

static void test_integers_at_their_limits(void) {
    static const struct {
        int64_t v;
        const char *text;
    } ints[] = {
        {0, "0"},
        {9, "9"},
        {10, "10"},
        {-1, "-1"},
        {99, "99"},
        {100, "100"},
        {-1234567, "-1234567"},
        {INT64_MAX, "9223372036854775807"},
        {INT64_MIN, "-9223372036854775808"},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        check_number(write_int, &ints[i].v, ints[i].text);
    uint64_t max = UINT64_MAX;
    check_number(write_uint, &max, "18446744073709551615");
}

static void test_doubles_in_the_fewest_digits_that_read_back(void) {
    static const struct {
        double v;
        const char *text;
    } doubles[] = {
        {0.1, "0.1"},
        {1.5, "1.5"},
        {-2.0, "-2"},
        {1e300, "1e+300"},
        {0.1 + 0.2, "0.30000000000000004"},
        {-0.0, "-0"},
        {4503599627370497.0, "4503599627370497"},
    };
    for (size_t i = 0; i < sizeof doubles / sizeof doubles[0]; i++) {
        check_number(write_double, &doubles[i].v, doubles[i].text);
    }
    const double not_json[] = {NAN, INFINITY, -INFINITY};
    for (size_t i = 0; i < 3; i++) {
        xBuffer b = {0};
        xJsonWriter w;
        xJsonInit(&w, &b);
        xJsonDouble(&w, not_json[i]);
        CHECK_EQ_INT(xJsonFinish(&w), XERR_INVALID);
        xBufferFree(&b);
    }
}

static void test_nesting_stops_at_the_limit(void) {
    xBuffer b = {0};
    xJsonWriter w;
    xJsonInit(&w, &b);
    for (int i = 0; i < XJSON_MAX_DEPTH; i++) xJsonBeginArray(&w);
    for (int i = 0; i < XJSON_MAX_DEPTH; i++) xJsonEndArray(&w);
    CHECK_EQ_INT(xJsonFinish(&w), XOK);
    CHECK_EQ_INT(b.len, 2 * XJSON_MAX_DEPTH);
    xBufferFree(&b);

    xBuffer deep = {0};
    xJsonInit(&w, &deep);
    for (int i = 0; i <= XJSON_MAX_DEPTH; i++) xJsonBeginArray(&w);
    CHECK_EQ_INT(xJsonFinish(&w), XERR_LIMIT);
    xBufferFree(&deep);
}

/* Each sequence is a misuse the writer must refuse with XERR_STATE. */
static void test_misuse_is_refused(void) {
    enum { OBJ, END_OBJ, ARR, END_ARR, KEY, VAL, STOP };
    static const int cases[][6] = {
        {STOP},                    /* nothing written */
        {OBJ, STOP},               /* left open */
        {OBJ, VAL, STOP},          /* a value without a key */
        {OBJ, KEY, END_OBJ, STOP}, /* a key without a value */
        {OBJ, KEY, KEY, STOP},     /* two keys */
        {ARR, KEY, STOP},          /* a key in an array */
        {KEY, STOP},               /* a key at the top */
        {VAL, VAL, STOP},          /* two top-level values */
        {ARR, END_OBJ, STOP},      /* the wrong closer */
        {END_ARR, STOP},           /* nothing to close */
        {OBJ, END_OBJ, OBJ, STOP}, /* a second document */
        {OBJ, KEY, VAL, END_ARR, STOP},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        xBuffer b = {0};
        xJsonWriter w;
        xJsonInit(&w, &b);
        for (const int *op = cases[i]; *op != STOP; op++) {
            switch (*op) {
            case OBJ: xJsonBeginObject(&w); break;
            case END_OBJ: xJsonEndObject(&w); break;
            case ARR: xJsonBeginArray(&w); break;
            case END_ARR: xJsonEndArray(&w); break;
            case KEY: xJsonKey(&w, "k", 1); break;
            case VAL: xJsonInt(&w, 1); break;
            }
        }
        CHECK_MSG(xJsonFinish(&w) == XERR_STATE, "case %zu", i);
        xBufferFree(&b);
    }
}

static void test_raw_values_are_placed_like_any_other(void) {
    xBuffer b = {0};
    xJsonWriter w;
    xJsonInit(&w, &b);
    xJsonBeginArray(&w);
    xJsonRaw(&w, "{\"a\":1}", 7);
    xJsonRaw(&w, "[]", 2);
    xJsonEndArray(&w);
    CHECK_EQ_INT(xJsonFinish(&w), XOK);
    CHECK_STR(view_of(&b), "[{\"a\":1},[]]");
    xBufferFree(&b);
}

int main(void) {
    RUN(test_nested_document_has_commas_and_colons_in_place);
    RUN(test_existing_bytes_are_kept);
    RUN(test_strings_escape_quotes_backslashes_and_every_control_byte);
    RUN(test_long_strings_of_escapes_grow_the_buffer);
    RUN(test_utf8_is_copied_as_it_is);
    RUN(test_bytes_that_are_not_utf8_are_refused);
    RUN(test_integers_at_their_limits);
    RUN(test_doubles_in_the_fewest_digits_that_read_back);
    RUN(test_nesting_stops_at_the_limit);
    RUN(test_misuse_is_refused);
    RUN(test_raw_values_are_placed_like_any_other);
    return CHECK_SUMMARY();
}
