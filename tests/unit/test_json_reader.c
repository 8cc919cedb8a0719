/* test_json_reader.c — the JSON reader: RFC 8259's examples walked, every
 * rejection with its reason and position, strings decoded or viewed in
 * place, numbers exactly at their limits, lookups and iteration, limits,
 * memory (the caller's, grown, reused), and no read past the input's end. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <xbase/json.h>

#include "check.h"
#include "guard_page.h"

/* Parses a C string into doc, which xJsonDocInit filled. */
static xErrno parse(xJsonDoc *doc, const char *json) { return xJsonDocParse(doc, json, strlen(json)); }

static int64_t int_at(const xJsonValue *v) {
    int64_t n = -12345;
    CHECK_EQ_INT(xJsonGetInt64(v, &n), XOK);
    return n;
}

static void test_rfc8259_image_example_is_walked(void) {
    /* RFC 8259 §13, the first example. */
    const char *text = "{\n"
                       "  \"Image\": {\n"
                       "    \"Width\":  800,\n"
                       "    \"Height\": 600,\n"
                       "    \"Title\":  \"View from 15th Floor\",\n"
                       "    \"Thumbnail\": {\n"
                       "      \"Url\":    \"http://www.example.com/image/481989943\",\n"
                       "      \"Height\": 125,\n"
                       "      \"Width\":  100\n"
                       "    },\n"
                       "    \"Animated\" : false,\n"
                       "    \"IDs\": [116, 943, 234, 38793]\n"
                       "  }\n"
                       "}";
    xJsonDoc doc;
    xJsonDocInit(&doc, NULL, 0);
    CHECK_EQ_INT(parse(&doc, text), XOK);
    const xJsonValue *image = xJsonObjectGet(xJsonDocRoot(&doc), "Image");
    CHECK_EQ_INT(xJsonTypeOf(image), XJSON_OBJECT);
    CHECK_EQ_INT(xJsonSize(image), 6);
    CHECK_EQ_INT(int_at(xJsonObjectGet(image, "Width")), 800);
    CHECK_EQ_INT(int_at(xJsonObjectGet(image, "Height")), 600);
    xStr s = {0};
    CHECK_EQ_INT(xJsonGetString(xJsonObjectGet(image, "Title"), &s), XOK);
    CHECK_STR(s, "View from 15th Floor");
    const xJsonValue *thumb = xJsonObjectGet(image, "Thumbnail");
    CHECK_EQ_INT(xJsonGetString(xJsonObjectGet(thumb, "Url"), &s), XOK);
    CHECK_STR(s, "http://www.example.com/image/481989943");
    CHECK_EQ_INT(int_at(xJsonObjectGet(thumb, "Height")), 125);
    CHECK_EQ_INT(int_at(xJsonObjectGet(thumb, "Width")), 100);
    bool animated = true;
    CHECK_EQ_INT(xJsonGetBool(xJsonObjectGet(image, "Animated"), &animated), XOK);
    CHECK(!animated);
    const xJsonValue *ids = xJsonObjectGet(image, "IDs");
    CHECK_EQ_INT(xJsonSize(ids), 4);
    const int64_t want[] = {116, 943, 234, 38793};
    for (size_t i = 0; i < 4; i++) CHECK_EQ_INT(int_at(xJsonArrayGet(ids, i)), want[i]);
    CHECK(xJsonArrayGet(ids, 4) == NULL);
    /* Member names are compared exactly: case matters. */
    CHECK(xJsonObjectGet(image, "width") == NULL);
    xJsonDocFree(&doc);
}

static void test_rfc8259_array_example_is_walked(void) {
    /* RFC 8259 §13, the second example. */
    const char *text = "[\n"
                       "  {\n"
                       "     \"precision\": \"zip\",\n"
                       "     \"Latitude\":  37.7668,\n"
                       "     \"Longitude\": -122.3959,\n"
                       "     \"Address\":   \"\",\n"
                       "     \"City\":      \"SAN FRANCISCO\",\n"
                       "     \"State\":     \"CA\",\n"
                       "     \"Zip\":       \"94107\",\n"
                       "     \"Country\":   \"US\"\n"
                       "  },\n"
                       "  {\n"
                       "     \"precision\": \"zip\",\n"
                       "     \"Latitude\":  37.371991,\n"
                       "     \"Longitude\": -122.026020,\n"
                       "     \"Address\":   \"\",\n"
                       "     \"City\":      \"SUNNYVALE\",\n"
                       "     \"State\":     \"CA\",\n"
                       "     \"Zip\":       \"94085\",\n"
                       "     \"Country\":   \"US\"\n"
                       "  }\n"
                       "]";
    xJsonDoc doc;
    xJsonDocInit(&doc, NULL, 0);
    CHECK_EQ_INT(parse(&doc, text), XOK);
    const xJsonValue *root = xJsonDocRoot(&doc);
    CHECK_EQ_INT(xJsonSize(root), 2);
    double d = 0;
    CHECK_EQ_INT(xJsonGetDouble(xJsonObjectGet(xJsonArrayGet(root, 0), "Latitude"), &d), XOK);
    CHECK(d == 37.7668);
    CHECK_EQ_INT(xJsonGetDouble(xJsonObjectGet(xJsonArrayGet(root, 1), "Longitude"), &d), XOK);
    CHECK(d == -122.026020);
    /* A number with a fraction is no integer, even where a double would be. */
    int64_t n = 7;
    CHECK_EQ_INT(xJsonGetInt64(xJsonObjectGet(xJsonArrayGet(root, 1), "Latitude"), &n), XERR_INVALID);
    CHECK_EQ_INT(n, 7);
    xStr s;
    CHECK_EQ_INT(xJsonGetString(xJsonObjectGet(xJsonArrayGet(root, 0), "Address"), &s), XOK);
    CHECK_EQ_INT(s.len, 0);
    CHECK_EQ_INT(xJsonGetString(xJsonObjectGet(xJsonArrayGet(root, 1), "City"), &s), XOK);
    CHECK_STR(s, "SUNNYVALE");
    /* A ZIP code is a string, not a number. */
    CHECK_EQ_INT(xJsonGetInt64(xJsonObjectGet(xJsonArrayGet(root, 0), "Zip"), &n), XERR_INVALID);
    xJsonDocFree(&doc);
}

static void test_any_value_may_stand_alone(void) {
    /* RFC 8259 §13's three small texts, and whitespace around a value. */
    xJsonDoc doc;
    xJsonDocInit(&doc, NULL, 0);
    xStr s;
    CHECK_EQ_INT(parse(&doc, "\"Hello world!\""), XOK);
    CHECK_EQ_INT(xJsonGetString(xJsonDocRoot(&doc), &s), XOK);
    CHECK_STR(s, "Hello world!");
    CHECK_EQ_INT(parse(&doc, "42"), XOK);
    CHECK_EQ_INT(int_at(xJsonDocRoot(&doc)), 42);
    bool b = false;
    CHECK_EQ_INT(parse(&doc, "true"), XOK);
    CHECK_EQ_INT(xJsonGetBool(xJsonDocRoot(&doc), &b), XOK);
    CHECK(b);
    CHECK_EQ_INT(parse(&doc, " \t\r\n null \n"), XOK);
    CHECK(xJsonIsNull(xJsonDocRoot(&doc)));
    CHECK_EQ_INT(xJsonTypeOf(xJsonDocRoot(&doc)), XJSON_NULL);
    CHECK_EQ_INT(parse(&doc, "[]"), XOK);
    CHECK_EQ_INT(xJsonTypeOf(xJsonDocRoot(&doc)), XJSON_ARRAY);
    CHECK_EQ_INT(xJsonSize(xJsonDocRoot(&doc)), 0);
    CHECK_EQ_INT(parse(&doc, "{ }"), XOK);
    CHECK_EQ_INT(xJsonTypeOf(xJsonDocRoot(&doc)), XJSON_OBJECT);
    xJsonDocFree(&doc);
}

typedef struct Rejected {
    const char *text;
    size_t len; /* 0: strlen(text) */
    xErrno err;
    size_t offset;
    const char *reason; /* a part of the reason given */
} Rejected;

static void check_rejected(const Rejected *r) {
    size_t len = r->len ? r->len : strlen(r->text);
    xJsonDoc doc;
    xJsonDocInit(&doc, NULL, 0);
    xErrno err = xJsonDocParse(&doc, r->text, len);
    const xJsonError *e = xJsonDocError(&doc);
    CHECK_MSG(err == r->err && e->err == r->err, "%.*s: %d (%s), want %d", (int)len, r->text, err, e->reason,
              r->err);
    CHECK_MSG(e->offset == r->offset, "%.*s: offset %zu, want %zu (%s)", (int)len, r->text, e->offset,
              r->offset, e->reason);
    CHECK_MSG(strstr(e->reason, r->reason) != NULL, "%.*s: \"%s\" does not say \"%s\"", (int)len, r->text,
              e->reason, r->reason);
    CHECK(xJsonDocRoot(&doc) == NULL);
    xJsonDocFree(&doc);
}

static void test_every_rejection_says_where_and_why(void) {
    static const Rejected cases[] = {
        {"", 0, XERR_INVALID, 0, "no value"},
        {"  \n ", 0, XERR_INVALID, 4, "no value"},
        {"[1,]", 0, XERR_INVALID, 3, "expected a value"},
        {"[,1]", 0, XERR_INVALID, 1, "expected a value"},
        {"{\"a\":1,}", 0, XERR_INVALID, 7, "expected a member name"},
        {"{,}", 0, XERR_INVALID, 1, "expected a member name"},
        {"{1:2}", 0, XERR_INVALID, 1, "expected a member name"},
        {"{\"a\" 1}", 0, XERR_INVALID, 5, "expected :"},
        {"{\"a\":1 \"b\":2}", 0, XERR_INVALID, 7, "expected , or }"},
        {"[1 2]", 0, XERR_INVALID, 3, "expected , or ]"},
        {"[1}", 0, XERR_INVALID, 2, "expected , or ]"},
        {"{\"a\":1]", 0, XERR_INVALID, 6, "expected , or }"},
        {"[1,2", 0, XERR_INVALID, 4, "ends inside an array"},
        {"{\"a\":1", 0, XERR_INVALID, 6, "ends inside an object"},
        {"{\"a\":", 0, XERR_INVALID, 5, "ends where a value should be"},
        {"{", 0, XERR_INVALID, 1, "expected a member name"},
        {"[", 0, XERR_INVALID, 1, "ends where a value should be"},
        {"[1] x", 0, XERR_INVALID, 4, "more after the value"},
        {"1 2", 0, XERR_INVALID, 2, "more after the value"},
        {"[1]\0", 4, XERR_INVALID, 3, "more after the value"},
        {"\xef\xbb\xbf[]", 0, XERR_INVALID, 0, "expected a value"}, /* a byte-order mark */
        {"[/* no */]", 0, XERR_INVALID, 1, "expected a value"},
        {"'a'", 0, XERR_INVALID, 0, "expected a value"},
        {"tru", 0, XERR_INVALID, 0, "expected a value"},
        {"True", 0, XERR_INVALID, 0, "expected a value"},
        {"nul", 0, XERR_INVALID, 0, "expected a value"},
        {"falsey", 0, XERR_INVALID, 5, "more after the value"},
        {"NaN", 0, XERR_INVALID, 0, "expected a value"},
        {"-Infinity", 0, XERR_INVALID, 1, "minus sign with no digit"},
        {"01", 0, XERR_INVALID, 0, "leading zero"},
        {"-012", 0, XERR_INVALID, 0, "leading zero"},
        {"-", 0, XERR_INVALID, 1, "minus sign with no digit"},
        {"+1", 0, XERR_INVALID, 0, "expected a value"},
        {".5", 0, XERR_INVALID, 0, "expected a value"},
        {"1.", 0, XERR_INVALID, 2, "decimal point with no digit"},
        {"1.e5", 0, XERR_INVALID, 2, "decimal point with no digit"},
        {"1e", 0, XERR_INVALID, 2, "exponent with no digit"},
        {"1e+", 0, XERR_INVALID, 3, "exponent with no digit"},
        {"0x10", 0, XERR_INVALID, 1, "more after the value"},
        {"\"abc", 0, XERR_INVALID, 0, "no closing quote"},
        {"[\"ab\\\"]", 0, XERR_INVALID, 1, "no closing quote"},
        {"\"ab\\", 0, XERR_INVALID, 0, "no closing quote"},
        {"\"a\x01\"", 0, XERR_INVALID, 2, "control character"},
        {"\"a\tb\"", 0, XERR_INVALID, 2, "control character"},
        {"\"\\n\x1f\"", 0, XERR_INVALID, 3, "control character"},
        {"\"\\x\"", 0, XERR_INVALID, 1, "no escape"},
        {"\"\\U0041\"", 0, XERR_INVALID, 1, "no escape"},
        {"\"\\u12\"", 0, XERR_INVALID, 1, "four hex digits"},
        {"\"\\u12G4\"", 0, XERR_INVALID, 1, "four hex digits"},
        {"\"\\uD800\"", 0, XERR_INVALID, 1, "high surrogate"},
        {"\"\\uD800\\u0041\"", 0, XERR_INVALID, 1, "high surrogate"},
        {"\"\\uDBFF\\uD800\"", 0, XERR_INVALID, 1, "high surrogate"},
        {"\"x\\uDC00\"", 0, XERR_INVALID, 2, "low surrogate"},
        {"\"\xc0\xaf\"", 0, XERR_INVALID, 1, "not UTF-8"},         /* overlong '/' */
        {"\"\xe0\x80\xaf\"", 0, XERR_INVALID, 1, "not UTF-8"},     /* overlong, 3 bytes */
        {"\"\xed\xa0\x80\"", 0, XERR_INVALID, 1, "not UTF-8"},     /* a surrogate, encoded */
        {"\"\xf4\x90\x80\x80\"", 0, XERR_INVALID, 1, "not UTF-8"}, /* past U+10FFFF */
        {"\"ab\x80\"", 0, XERR_INVALID, 3, "not UTF-8"},           /* a lone continuation byte */
        {"\"\xe2\x82\"", 0, XERR_INVALID, 1, "not UTF-8"},         /* cut short */
        {"\"\\n\xff\"", 0, XERR_INVALID, 3, "not UTF-8"},          /* after an escape */
        {"{\"a\":1,\"a\":2}", 0, XERR_INVALID, 7, "repeated"},     /* RFC 7493 §2.3 */
        {"{\"a\":1,\"b\":{\"a\":2},\"\\u0061\":3}", 0, XERR_INVALID, 19, "repeated"}, /* decoded names */
        {"{\"\":1,\"\":2}", 0, XERR_INVALID, 6, "repeated"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_rejected(&cases[i]);
}

static void test_errors_give_line_and_column(void) {
    xJsonDoc doc;
    xJsonDocInit(&doc, NULL, 0);
    CHECK_EQ_INT(parse(&doc, "{\n  \"a\": 1,\n  \"b\": tru\n}"), XERR_INVALID);
    const xJsonError *e = xJsonDocError(&doc);
    CHECK_EQ_INT(e->offset, 19);
    CHECK_EQ_INT(e->line, 3);
    CHECK_EQ_INT(e->column, 8);
    CHECK_EQ_INT(parse(&doc, "x"), XERR_INVALID);
    CHECK_EQ_INT(xJsonDocError(&doc)->line, 1);
    CHECK_EQ_INT(xJsonDocError(&doc)->column, 1);
    /* A success clears the last error. */
    CHECK_EQ_INT(parse(&doc, "1"), XOK);
    CHECK_EQ_INT(xJsonDocError(&doc)->err, XOK);
    CHECK_STR(xStrFromC(xJsonDocError(&doc)->reason), "");
    xJsonDocFree(&doc);
}

/* n nested arrays around nothing: [[...]]. The caller frees it. */
static char *nested(size_t n) {
    char *s = malloc(2 * n + 1);
    memset(s, '[', n);
    memset(s + n, ']', n);
    s[2 * n] = 0;
    return s;
}

static void test_nesting_and_size_stop_at_the_limits(void) {
    xJsonDoc doc;
    xJsonDocInit(&doc, NULL, 0);
    char *deep = nested(XJSON_MAX_DEPTH);
    CHECK_EQ_INT(parse(&doc, deep), XOK);
    free(deep);
    deep = nested(XJSON_MAX_DEPTH + 1);
    CHECK_EQ_INT(parse(&doc, deep), XERR_LIMIT);
    CHECK_EQ_INT(xJsonDocError(&doc)->offset, XJSON_MAX_DEPTH);
    free(deep);
    /* Objects count as arrays do. */
    CHECK_EQ_INT(parse(&doc, "{\"a\":{\"b\":[1]}}"), XOK);
    xJsonDocLimits(&doc, 100, 2);
    CHECK_EQ_INT(xJsonDocParse(&doc, "{\"a\":{\"b\":[1]}}", 15), XERR_LIMIT);
    CHECK_EQ_INT(xJsonDocError(&doc)->offset, 10);
    CHECK_EQ_INT(xJsonDocParse(&doc, "{\"a\":{\"b\":1}}", 13), XOK);
    /* 0: scalars only. */
    xJsonDocLimits(&doc, 100, 0);
    CHECK_EQ_INT(xJsonDocParse(&doc, "7", 1), XOK);
    CHECK_EQ_INT(xJsonDocParse(&doc, "[]", 2), XERR_LIMIT);
    /* Size: judged before a byte is read. */
    xJsonDocLimits(&doc, 4, 8);
    CHECK_EQ_INT(xJsonDocParse(&doc, "1234", 4), XOK);
    CHECK_EQ_INT(xJsonDocParse(&doc, "12345", 5), XERR_LIMIT);
    CHECK_EQ_INT(xJsonDocError(&doc)->offset, 4);
    CHECK(strstr(xJsonDocError(&doc)->reason, "larger") != NULL);
    xJsonDocFree(&doc);
    /* Depth costs no stack: a parse never recurses. */
    size_t n = 200000;
    deep = nested(n);
    xJsonDocInit(&doc, NULL, 0);
    xJsonDocLimits(&doc, 2 * n, (unsigned)n);
    CHECK_EQ_INT(xJsonDocParse(&doc, deep, 2 * n), XOK);
    const xJsonValue *v = xJsonDocRoot(&doc);
    for (size_t i = 1; i < n; i++) v = xJsonArrayGet(v, 0);
    CHECK_EQ_INT(xJsonTypeOf(v), XJSON_ARRAY);
    CHECK_EQ_INT(xJsonSize(v), 0);
    xJsonDocFree(&doc);
    free(deep);
}

static void test_strings_are_views_or_decoded_copies(void) {
    const char *text = "[\"plain\", \"a\\nb\", \"\\\"\\\\\\/\\b\\f\\n\\r\\t\", \"\\u00e9\\u20AC\", "
                       "\"\\ud83d\\ude00\", \"nul\\u0000in\", \"caf\xc3\xa9 \xf0\x9f\x98\x80\", \"\"]";
    xJsonDoc doc;
    xJsonDocInit(&doc, NULL, 0);
    CHECK_EQ_INT(parse(&doc, text), XOK);
    const xJsonValue *root = xJsonDocRoot(&doc);
    xStr s;
    CHECK_EQ_INT(xJsonGetString(xJsonArrayGet(root, 0), &s), XOK);
    CHECK_STR(s, "plain");
    CHECK(s.data == text + 2); /* no escape: a view of the input */
    CHECK_EQ_INT(xJsonGetString(xJsonArrayGet(root, 1), &s), XOK);
    CHECK_STR(s, "a\nb");
    CHECK(s.data < text || s.data > text + strlen(text)); /* decoded elsewhere */
    CHECK_EQ_INT(xJsonGetString(xJsonArrayGet(root, 2), &s), XOK);
    CHECK_STR(s, "\"\\/\b\f\n\r\t");
    CHECK_EQ_INT(xJsonGetString(xJsonArrayGet(root, 3), &s), XOK);
    CHECK_STR(s, "\xc3\xa9\xe2\x82\xac");
    CHECK_EQ_INT(xJsonGetString(xJsonArrayGet(root, 4), &s), XOK);
    CHECK_STR(s, "\xf0\x9f\x98\x80"); /* U+1F600 from its surrogate pair */
    CHECK_EQ_INT(xJsonGetString(xJsonArrayGet(root, 5), &s), XOK);
    CHECK(s.len == 6 && memcmp(s.data, "nul\0in", 6) == 0);
    CHECK_EQ_INT(xJsonGetString(xJsonArrayGet(root, 6), &s), XOK);
    CHECK_STR(s, "caf\xc3\xa9 \xf0\x9f\x98\x80");
    CHECK_EQ_INT(xJsonGetString(xJsonArrayGet(root, 7), &s), XOK);
    CHECK_EQ_INT(s.len, 0);
    /* Strings after a decoded one are still found: its bytes are stepped over. */
    CHECK_EQ_INT(xJsonSize(root), 8);
    xJsonDocFree(&doc);
}

static void test_member_names_are_matched_decoded(void) {
    const char *text =
        "{\"pl\\u0061in\":1,\"n\\u0000l\":2,\"long name with \\\"quotes\\\" in it\":3,\"x\":{\"y\":[4]}}";
    xJsonDoc doc;
    xJsonDocInit(&doc, NULL, 0);
    CHECK_EQ_INT(parse(&doc, text), XOK);
    const xJsonValue *root = xJsonDocRoot(&doc);
    CHECK_EQ_INT(int_at(xJsonObjectGet(root, "plain")), 1);
    CHECK_EQ_INT(int_at(xJsonObjectGetN(root, "n\0l", 3)), 2);
    CHECK(xJsonObjectGet(root, "n") == NULL); /* NUL ends a C string; the name goes on */
    CHECK_EQ_INT(int_at(xJsonObjectGet(root, "long name with \"quotes\" in it")), 3);
    CHECK_EQ_INT(int_at(xJsonArrayGet(xJsonObjectGet(xJsonObjectGet(root, "x"), "y"), 0)), 4);
    xJsonDocFree(&doc);
}

static void test_lookups_chain_through_what_is_missing(void) {
    xJsonDoc doc;
    xJsonDocInit(&doc, NULL, 0);
    CHECK_EQ_INT(parse(&doc, "{\"a\":[1,\"two\",null],\"s\":\"x\"}"), XOK);
    const xJsonValue *root = xJsonDocRoot(&doc);
    CHECK(xJsonObjectGet(root, "missing") == NULL);
    CHECK(xJsonObjectGet(xJsonObjectGet(root, "missing"), "deeper") == NULL);
    CHECK(xJsonObjectGet(xJsonObjectGet(root, "a"), "0") == NULL); /* an array has no members */
    CHECK(xJsonArrayGet(root, 0) == NULL);                         /* an object has no elements */
    CHECK(xJsonArrayGet(xJsonObjectGet(root, "a"), 3) == NULL);
    CHECK_EQ_INT(xJsonTypeOf(NULL), XJSON_MISSING);
    CHECK_EQ_INT(xJsonSize(NULL), 0);
    CHECK_EQ_INT(xJsonSize(xJsonObjectGet(root, "s")), 0);
    CHECK(!xJsonIsNull(NULL));
    CHECK(xJsonIsNull(xJsonArrayGet(xJsonObjectGet(root, "a"), 2)));
    /* Each getter refuses NULL and other types, leaving *out alone. */
    int64_t i = 5;
    uint64_t u = 5;
    double d = 5;
    xStr s = {"keep", 4};
    bool b = true;
    const xJsonValue *two = xJsonArrayGet(xJsonObjectGet(root, "a"), 1);
    CHECK_EQ_INT(xJsonGetInt64(NULL, &i), XERR_INVALID);
    CHECK_EQ_INT(xJsonGetInt64(two, &i), XERR_INVALID);
    CHECK_EQ_INT(xJsonGetUint64(two, &u), XERR_INVALID);
    CHECK_EQ_INT(xJsonGetDouble(two, &d), XERR_INVALID);
    CHECK_EQ_INT(xJsonGetBool(two, &b), XERR_INVALID);
    CHECK_EQ_INT(xJsonGetString(root, &s), XERR_INVALID);
    CHECK_EQ_INT(xJsonGetString(NULL, &s), XERR_INVALID);
    CHECK(i == 5 && u == 5 && d == 5 && b && xStrEqualsC(s, "keep"));
    CHECK_EQ_INT(xJsonNumberText(two).len, 0);
    xJsonDocFree(&doc);
}

static void test_iteration_follows_the_order_written(void) {
    xJsonDoc doc;
    xJsonDocInit(&doc, NULL, 0);
    CHECK_EQ_INT(parse(&doc, "{\"z\":[1,{\"b\":2},[]],\"y\":\"x\\ty\",\"x\":{},\"w\":false}"), XOK);
    xJsonIter it;
    xStr key;
    const xJsonValue *v;
    const char *names[] = {"z", "y", "x", "w"};
    const xJsonType types[] = {XJSON_ARRAY, XJSON_STRING, XJSON_OBJECT, XJSON_BOOL};
    size_t n = 0;
    xJsonIterInit(&it, xJsonDocRoot(&doc));
    while (xJsonIterNext(&it, &key, &v)) {
        CHECK(n < 4);
        if (n >= 4) break;
        CHECK_STR(key, names[n]);
        CHECK_EQ_INT(xJsonTypeOf(v), types[n]);
        n++;
    }
    CHECK_EQ_INT(n, 4);
    CHECK(!xJsonIterNext(&it, &key, &v)); /* stays at the end */
    /* An array's elements, with no key asked for; then the key is empty when asked. */
    xJsonIterInit(&it, xJsonObjectGet(xJsonDocRoot(&doc), "z"));
    n = 0;
    while (xJsonIterNext(&it, NULL, &v)) n++;
    CHECK_EQ_INT(n, 3);
    xJsonIterInit(&it, xJsonObjectGet(xJsonDocRoot(&doc), "z"));
    key = (xStr){"x", 1};
    CHECK(xJsonIterNext(&it, &key, &v));
    CHECK_EQ_INT(key.len, 0);
    /* Scalars and NULL walk nothing. */
    xJsonIterInit(&it, xJsonObjectGet(xJsonDocRoot(&doc), "w"));
    CHECK(!xJsonIterNext(&it, &key, &v));
    xJsonIterInit(&it, NULL);
    CHECK(!xJsonIterNext(&it, &key, &v));
    xJsonDocFree(&doc);
}

/* Parses text as the lone value and checks what the integer getters say. */
static void check_integer(const char *text, xErrno want_int, int64_t want_i, xErrno want_uint,
                          uint64_t want_u) {
    xJsonDoc doc;
    xJsonDocInit(&doc, NULL, 0);
    CHECK_EQ_INT(parse(&doc, text), XOK);
    int64_t i = 0;
    uint64_t u = 0;
    CHECK_MSG(xJsonGetInt64(xJsonDocRoot(&doc), &i) == want_int && (want_int != XOK || i == want_i),
              "%s as int64", text);
    CHECK_MSG(xJsonGetUint64(xJsonDocRoot(&doc), &u) == want_uint && (want_uint != XOK || u == want_u),
              "%s as uint64", text);
    CHECK_STR(xJsonNumberText(xJsonDocRoot(&doc)), text);
    xJsonDocFree(&doc);
}

static void test_integers_convert_exactly_or_say_they_do_not_fit(void) {
    check_integer("0", XOK, 0, XOK, 0);
    check_integer("-0", XOK, 0, XOK, 0);
    check_integer("-1", XOK, -1, XERR_LIMIT, 0);
    check_integer("9223372036854775807", XOK, INT64_MAX, XOK, INT64_MAX);
    check_integer("9223372036854775808", XERR_LIMIT, 0, XOK, (uint64_t)INT64_MAX + 1);
    check_integer("-9223372036854775808", XOK, INT64_MIN, XERR_LIMIT, 0);
    check_integer("-9223372036854775809", XERR_LIMIT, 0, XERR_LIMIT, 0);
    check_integer("18446744073709551615", XERR_LIMIT, 0, XOK, UINT64_MAX);
    check_integer("18446744073709551616", XERR_LIMIT, 0, XERR_LIMIT, 0);
    check_integer("123456789012345678901234567890", XERR_LIMIT, 0, XERR_LIMIT, 0);
    check_integer("1.0", XERR_INVALID, 0, XERR_INVALID, 0);
    check_integer("1e2", XERR_INVALID, 0, XERR_INVALID, 0);
    check_integer("1E+2", XERR_INVALID, 0, XERR_INVALID, 0);
}

/* Parses text and checks that xJsonGetDouble gives strtod's value. */
static void check_double(const char *text) {
    xJsonDoc doc;
    xJsonDocInit(&doc, NULL, 0);
    CHECK_EQ_INT(parse(&doc, text), XOK);
    double d = 0, want = strtod(text, NULL);
    CHECK_MSG(xJsonGetDouble(xJsonDocRoot(&doc), &d) == XOK, "%s", text);
    CHECK_MSG(d == want && signbit(d) == signbit(want), "%s: %.17g, strtod %.17g", text, d, want);
    xJsonDocFree(&doc);
}

static void test_doubles_are_correctly_rounded(void) {
    /* The fast path (up to 15 digits, powers of ten to 22) and strtod beyond. */
    const char *texts[] = {
        "0",
        "-0",
        "-0.0",
        "1",
        "0.1",
        "0.3",
        "-2.5",
        "3.14159",
        "37.7668",
        "-122.026020",
        "1e22",
        "1e23",
        "1e-22",
        "1e-23",
        "123456789012345",
        "1234567890123456",
        "12345678901234567890",
        "0.1e1",
        "100e-2",
        "9007199254740993",
        "2.2250738585072011e-308",
        "2.2250738585072014e-308",
        "4.9e-324",
        "1e-400",
        "1.7976931348623157e308",
        "0.000000000000000000000000000001",
        "5e-1",
        "1E5",
        "1e+05",
        "1e0005",
        "1.00000000000000000000000000000000000000000000000000000000000000000000000000001",
        "4.35679e-10",
        "89255.0e-22",
        "8.589973e9",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) check_double(texts[i]);
    /* Beyond DBL_MAX: XERR_LIMIT, *out untouched. */
    xJsonDoc doc;
    xJsonDocInit(&doc, NULL, 0);
    double d = 7;
    CHECK_EQ_INT(parse(&doc, "1e400"), XOK);
    CHECK_EQ_INT(xJsonGetDouble(xJsonDocRoot(&doc), &d), XERR_LIMIT);
    CHECK_EQ_INT(parse(&doc, "-1.8e308"), XOK);
    CHECK_EQ_INT(xJsonGetDouble(xJsonDocRoot(&doc), &d), XERR_LIMIT);
    CHECK(d == 7);
    xJsonDocFree(&doc);
}

static void test_memory_is_the_callers_first_then_one_block(void) {
    const char *body = "{\"name\":\"validate-updated\",\"price\":777,\"quantity\":99}";
    _Alignas(16) char memory[1024];
    xJsonDoc doc;
    xJsonDocInit(&doc, memory, sizeof memory);
    CHECK_EQ_INT(xJsonDocParse(&doc, body, strlen(body)), XOK);
    const xJsonValue *root = xJsonDocRoot(&doc);
    CHECK((const char *)root >= memory && (const char *)root < memory + sizeof memory);
    CHECK_EQ_INT(int_at(xJsonObjectGet(root, "price")), 777);
    /* Too small for the next document: one block of its own, the caller's memory left. */
    char big[8192];
    size_t n = 0;
    big[n++] = '[';
    for (int i = 0; i < 500; i++)
        n += (size_t)snprintf(big + n, sizeof big - n, "%s\"s\\n%d\"", i ? "," : "", i);
    big[n++] = ']';
    CHECK_EQ_INT(xJsonDocParse(&doc, big, n), XOK);
    root = xJsonDocRoot(&doc);
    CHECK((const char *)root < memory || (const char *)root >= memory + sizeof memory);
    xStr s;
    CHECK_EQ_INT(xJsonGetString(xJsonArrayGet(root, 499), &s), XOK);
    CHECK_STR(s, "s\n499");
    /* The block is kept for the next parse. */
    CHECK_EQ_INT(xJsonDocParse(&doc, body, strlen(body)), XOK);
    CHECK(xJsonDocRoot(&doc) == root);
    xJsonDocFree(&doc);
    /* After a free the caller's memory serves again. */
    CHECK_EQ_INT(xJsonDocParse(&doc, body, strlen(body)), XOK);
    CHECK((const char *)xJsonDocRoot(&doc) >= memory &&
          (const char *)xJsonDocRoot(&doc) < memory + sizeof memory);
    xJsonDocFree(&doc);
    /* Memory that is not aligned is aligned; memory smaller than a value is not used. */
    xJsonDocInit(&doc, memory + 3, 100);
    CHECK_EQ_INT(xJsonDocParse(&doc, body, strlen(body)), XOK);
    CHECK(((uintptr_t)xJsonDocRoot(&doc) & 7) == 0);
    CHECK_EQ_INT(int_at(xJsonObjectGet(xJsonDocRoot(&doc), "quantity")), 99);
    xJsonDocFree(&doc);
    xJsonDocInit(&doc, memory + 1, 16);
    CHECK_EQ_INT(xJsonDocParse(&doc, body, strlen(body)), XOK);
    CHECK_EQ_INT(int_at(xJsonObjectGet(xJsonDocRoot(&doc), "quantity")), 99);
    xJsonDocFree(&doc);
}

static void test_large_objects_find_repeated_names_too(void) {
    /* Past 16 members names are sorted to be compared: both ways must agree. */
    char text[8192];
    for (int repeat = 0; repeat < 2; repeat++) {
        size_t n = 0;
        text[n++] = '{';
        for (int i = 0; i < 300; i++) {
            int name = repeat && i == 250 ? 17 : i;
            n += (size_t)snprintf(text + n, sizeof text - n, "%s\"k%d\":%d", i ? "," : "", name, i);
        }
        text[n++] = '}';
        xJsonDoc doc;
        xJsonDocInit(&doc, NULL, 0);
        xErrno err = xJsonDocParse(&doc, text, n);
        if (!repeat) {
            CHECK_EQ_INT(err, XOK);
            CHECK_EQ_INT(xJsonSize(xJsonDocRoot(&doc)), 300);
            CHECK_EQ_INT(int_at(xJsonObjectGet(xJsonDocRoot(&doc), "k299")), 299);
        } else {
            CHECK_EQ_INT(err, XERR_INVALID);
            const char *second = strstr(strstr(text, "\"k17\":") + 1, "\"k17\":");
            CHECK_EQ_INT(xJsonDocError(&doc)->offset, (size_t)(second - text));
        }
        xJsonDocFree(&doc);
    }
}

/* Parses len bytes placed so that the last one is followed by an unreadable
 * page: a read past the input crashes the test. */
static xErrno parse_at_guard(const char *text, size_t len) {
    static char *guard_end;
    if (!guard_end) guard_end = guard_page_map(1 << 16);
    char *at = guard_end - len;
    memcpy(at, text, len);
    xJsonDoc doc;
    xJsonDocInit(&doc, NULL, 0);
    xErrno err = xJsonDocParse(&doc, at, len);
    if (err == XOK) { /* the getters read the input too */
        xJsonIter it;
        const xJsonValue *v;
        double d;
        xJsonIterInit(&it, xJsonDocRoot(&doc));
        while (xJsonIterNext(&it, NULL, &v)) xJsonGetDouble(v, &d);
        xJsonGetDouble(xJsonDocRoot(&doc), &d);
    }
    xJsonDocFree(&doc);
    return err;
}

static void test_nothing_is_read_past_the_input(void) {
    const char *texts[] = {
        "{\"name\":\"validate-updated\",\"price\":777,\"quantity\":99}",
        "[1, -2.5e-3, \"s\\u00e9\\ud83d\\ude00\", true, false, null, {\"k\": [ ] }, \"caf\xc3\xa9\"]",
        "20",
        "1234567890.0987654321e-12",
        "\"abcdefghijklmnopqrstuvwxyz\"",
        "   \n\t   [   ]                    ",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        size_t len = strlen(texts[i]);
        CHECK_EQ_INT(parse_at_guard(texts[i], len), XOK);
        /* Every cut of a document ends somewhere a reader must stop at. */
        for (size_t cut = 0; cut < len; cut++) parse_at_guard(texts[i], cut);
    }
    const char *truncated[] = {"tru",        "fals",   "nul",  "-",         "1.",
                               "1e",         "1e-",    "\"\\", "\"\\u12",   "\"\\ud800\\u",
                               "\"\xe2\x82", "{\"a\"", "[1,",  "\"a\\ud83d"};
    for (size_t i = 0; i < sizeof truncated / sizeof truncated[0]; i++) {
        CHECK_EQ_INT(parse_at_guard(truncated[i], strlen(truncated[i])), XERR_INVALID);
    }
}

int main(void) {
    RUN(test_rfc8259_image_example_is_walked);
    RUN(test_rfc8259_array_example_is_walked);
    RUN(test_any_value_may_stand_alone);
    RUN(test_every_rejection_says_where_and_why);
    RUN(test_errors_give_line_and_column);
    RUN(test_nesting_and_size_stop_at_the_limits);
    RUN(test_strings_are_views_or_decoded_copies);
    RUN(test_member_names_are_matched_decoded);
    RUN(test_lookups_chain_through_what_is_missing);
    RUN(test_iteration_follows_the_order_written);
    RUN(test_integers_convert_exactly_or_say_they_do_not_fit);
    RUN(test_doubles_are_correctly_rounded);
    RUN(test_memory_is_the_callers_first_then_one_block);
    RUN(test_large_objects_find_repeated_names_too);
    RUN(test_nothing_is_read_past_the_input);
    return CHECK_SUMMARY();
}
