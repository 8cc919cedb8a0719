/* fuzz_json_reader.c — libFuzzer: the JSON reader against jansson.
 *
 * Input: the document itself (the corpus files are plain JSON). It is read
 * by xJsonDocParse (in 512 bytes of stack memory first when the input's
 * length is odd, else in a block of its own; depth limit jansson's,
 * JSON_PARSER_MAX_DEPTH) and by json_loadb with JSON_DECODE_ANY (any value at
 * the top, as ours), JSON_REJECT_DUPLICATES (ours refuses a name twice in one
 * object, RFC 7493) and JSON_ALLOW_NUL (ours keeps \u0000 in strings).
 *
 * Both read the same documents to the same trees, but for these, where
 * jansson departs from RFC 8259 or from ours:
 *   - numbers past int64 (integers) or DBL_MAX: jansson refuses the document
 *     (json_error_numeric_overflow); ours keeps the text, its getters say
 *     XERR_LIMIT;
 *   - a member name holding NUL (\u0000): jansson refuses it
 *     (json_error_null_byte_in_key); ours keeps it;
 *   - depth: jansson counts a scalar as a level, ours counts containers, so
 *     a scalar inside JSON_PARSER_MAX_DEPTH containers is too deep for
 *     jansson only (json_error_stack_overflow);
 *   - a NUL byte right after a number or true, false or null: jansson skips
 *     it ("[1\0]" reads as [1]: it pushes the byte back, and its stream takes
 *     a pushed-back NUL for the end of what it holds); ours refuses it.
 *
 * Checked: when ours refuses, XERR_INVALID or XERR_LIMIT at an offset within
 * the input, with a reason, and no root; jansson refuses too, or read the
 * document without such NUL bytes, which ours then reads to jansson's tree.
 * When ours accepts, jansson accepts, or refuses with the code of a
 * difference the document holds. When both accept, the same tree: types,
 * members in the order written with their names byte for byte, strings byte
 * for byte, integers equal as int64 and other numbers bit for bit as
 * doubles. And ours is coherent: sizes match the walks, each member is found
 * by its name and each element by its index, strings viewed in the input
 * lie between their quotes, numbers' texts in it. */
#include <jansson.h>
#include <string.h>

#include <xbase/json.h>

#include "fuzz_check.h"

/* What jansson refuses in a document ours accepts (bits). */
enum { NUMBER_OVERFLOW = 1, NUL_IN_NAME = 2, TOO_DEEP_FOR_JANSSON = 4 };

/* The differences the document holds, walking ours (level: jansson's count
 * of this value's depth, the top value being 1). */
static unsigned differences(const xJsonValue *v, unsigned level) {
    unsigned found = level > JSON_PARSER_MAX_DEPTH ? TOO_DEEP_FOR_JANSSON : 0;
    if (xJsonTypeOf(v) == XJSON_NUMBER) {
        int64_t i;
        double d;
        xErrno err = xJsonGetInt64(v, &i);
        if (err == XERR_INVALID) err = xJsonGetDouble(v, &d); /* not written as an integer */
        FUZZ_ASSERT(err == XOK || err == XERR_LIMIT, "a number ours accepted reads as %d", err);
        if (err == XERR_LIMIT) found |= NUMBER_OVERFLOW;
    }
    xJsonIter it;
    xStr key;
    const xJsonValue *child;
    xJsonIterInit(&it, v);
    while (xJsonIterNext(&it, &key, &child)) {
        if (key.len && memchr(key.data, 0, key.len)) found |= NUL_IN_NAME;
        found |= differences(child, level + 1);
    }
    return found;
}

static bool is_view_into(xStr s, const uint8_t *data, size_t size) {
    return fuzz_view_within(s, (const char *)data, size);
}

/* Ours' own coherence: what the lookups find is what the walk found. */
static void check_walk(const xJsonValue *v, const uint8_t *data, size_t size) {
    xJsonType type = xJsonTypeOf(v);
    FUZZ_ASSERT(type >= XJSON_NULL && type <= XJSON_OBJECT, "a value of type %d", type);
    if (type == XJSON_STRING) {
        xStr s;
        FUZZ_ASSERT(xJsonGetString(v, &s) == XOK, "a string that is none");
        /* A view into the input is exactly the text between its quotes. */
        if (is_view_into(s, data, size)) {
            size_t at = (size_t)(s.data - (const char *)data);
            FUZZ_ASSERT(at > 0 && at + s.len < size && data[at - 1] == '"' && data[at + s.len] == '"',
                        "a string view that is not between quotes");
        }
    }
    if (type == XJSON_NUMBER) FUZZ_ASSERT(is_view_into(xJsonNumberText(v), data, size), "a number's text");
    xJsonIter it;
    xStr key;
    const xJsonValue *child;
    size_t n = 0;
    xJsonIterInit(&it, v);
    while (xJsonIterNext(&it, &key, &child)) {
        if (type == XJSON_OBJECT) {
            FUZZ_ASSERT(xJsonObjectGetN(v, key.data, key.len) == child, "member %zu not found by its name",
                        n);
        } else {
            FUZZ_ASSERT(key.len == 0 && xJsonArrayGet(v, n) == child, "element %zu not found by its index",
                        n);
        }
        check_walk(child, data, size);
        n++;
    }
    FUZZ_ASSERT(n == xJsonSize(v), "%zu walked, size %zu", n, xJsonSize(v));
}

static bool same_bytes(xStr ours, const char *theirs, size_t len) {
    return ours.len == len && (len == 0 || memcmp(ours.data, theirs, len) == 0);
}

/* Whether ours and jansson's trees hold the same value. */
static bool same_value(const xJsonValue *v, json_t *j) {
    switch (xJsonTypeOf(v)) {
    case XJSON_NULL: return json_is_null(j);
    case XJSON_BOOL: {
        bool b;
        return xJsonGetBool(v, &b) == XOK && json_is_boolean(j) && b == json_is_true(j);
    }
    case XJSON_NUMBER:
        if (json_is_integer(j)) {
            int64_t i;
            return xJsonGetInt64(v, &i) == XOK && i == json_integer_value(j);
        } else {
            double d, theirs = json_real_value(j);
            /* jansson made a real: ours must not read it as an integer. */
            int64_t i;
            return json_is_real(j) && xJsonGetInt64(v, &i) == XERR_INVALID && xJsonGetDouble(v, &d) == XOK &&
                   memcmp(&d, &theirs, sizeof d) == 0;
        }
    case XJSON_STRING: {
        xStr s;
        return json_is_string(j) && xJsonGetString(v, &s) == XOK &&
               same_bytes(s, json_string_value(j), json_string_length(j));
    }
    case XJSON_ARRAY: {
        if (!json_is_array(j) || json_array_size(j) != xJsonSize(v)) return false;
        xJsonIter it;
        const xJsonValue *e;
        size_t i = 0;
        xJsonIterInit(&it, v);
        while (xJsonIterNext(&it, NULL, &e)) {
            if (!same_value(e, json_array_get(j, i++))) return false;
        }
        return true;
    }
    case XJSON_OBJECT: {
        if (!json_is_object(j) || json_object_size(j) != xJsonSize(v)) return false;
        xJsonIter it;
        xStr key;
        const xJsonValue *member;
        void *theirs = json_object_iter(j); /* jansson keeps the order written */
        xJsonIterInit(&it, v);
        while (xJsonIterNext(&it, &key, &member)) {
            if (!theirs || !same_bytes(key, json_object_iter_key(theirs), json_object_iter_key_len(theirs)) ||
                !same_value(member, json_object_iter_value(theirs))) {
                return false;
            }
            theirs = json_object_iter_next(j, theirs);
        }
        return theirs == NULL;
    }
    default: return false;
    }
}

/* jansson skips one NUL byte right after a number or true, false and null
 * (it pushes the byte back, and its stream then takes a pushed-back NUL for
 * the end of what it holds). Where ours stopped at such a byte, the
 * document without it is what jansson read: returns that copy (the caller
 * frees it), or NULL when ours stopped elsewhere. */
static uint8_t *without_skipped_nul(const uint8_t *data, size_t size, const xJsonError *e) {
    size_t at = e->offset;
    if (at == 0 || at >= size || data[at] != 0 || strstr(e->reason, "string")) return NULL;
    uint8_t last = data[at - 1];
    if (!((last >= '0' && last <= '9') || last == 'e' || last == 'l')) return NULL;
    uint8_t *copy = (uint8_t *)fuzz_copy(data, size);
    memmove(copy + at, copy + at + 1, size - at - 1);
    return copy;
}

/* Both accepted: one tree. */
static void check_same(const xJsonValue *root, json_t *theirs, const uint8_t *data, size_t size) {
    FUZZ_ASSERT(!differences(root, 1), "jansson read what it refuses: %.*s", (int)size, (const char *)data);
    FUZZ_ASSERT(same_value(root, theirs), "ours and jansson read different values: %.*s", (int)size,
                (const char *)data);
}

/* Ours refused data, and jansson read it as theirs: only where jansson
 * skipped NUL bytes, and then the document without them is theirs. */
static void check_skipped_nuls(xJsonDoc *doc, const uint8_t *data, size_t size, json_t *theirs) {
    uint8_t *stripped = NULL;
    size_t len = size;
    xErrno ours;
    do {
        uint8_t *shorter = without_skipped_nul(stripped ? stripped : data, len, xJsonDocError(doc));
        FUZZ_ASSERT(shorter, "ours refused what jansson reads (%s at byte %zu): %.*s",
                    xJsonDocError(doc)->reason, xJsonDocError(doc)->offset, (int)size, (const char *)data);
        free(stripped);
        stripped = shorter;
        ours = xJsonDocParse(doc, (const char *)stripped, --len);
    } while (ours != XOK);
    check_same(xJsonDocRoot(doc), theirs, stripped, len);
    xJsonDocFree(doc);
    free(stripped);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    _Alignas(16) char memory[512];
    xJsonDoc doc;
    xJsonDocInit(&doc, size % 2 ? memory : NULL, size % 2 ? sizeof memory : 0);
    xJsonDocLimits(&doc, size, JSON_PARSER_MAX_DEPTH);
    xErrno ours = xJsonDocParse(&doc, (const char *)data, size);
    json_error_t error;
    json_t *theirs = json_loadb((const char *)data, size,
                                JSON_DECODE_ANY | JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &error);
    if (ours != XOK) {
        const xJsonError *e = xJsonDocError(&doc);
        FUZZ_ASSERT(ours == XERR_INVALID || ours == XERR_LIMIT, "ours failed with %d", ours);
        FUZZ_ASSERT(e->err == ours && e->offset <= size && e->reason[0], "an error without its where or why");
        FUZZ_ASSERT(xJsonDocRoot(&doc) == NULL, "a root after a failed parse");
        if (theirs) check_skipped_nuls(&doc, data, size, theirs);
    } else {
        const xJsonValue *root = xJsonDocRoot(&doc);
        check_walk(root, data, size);
        if (theirs) {
            check_same(root, theirs, data, size);
        } else {
            unsigned found = differences(root, 1);
            enum json_error_code code = json_error_code(&error);
            bool documented = (code == json_error_numeric_overflow && (found & NUMBER_OVERFLOW)) ||
                              (code == json_error_null_byte_in_key && (found & NUL_IN_NAME)) ||
                              (code == json_error_stack_overflow && (found & TOO_DEEP_FOR_JANSSON));
            FUZZ_ASSERT(documented, "jansson refused what ours reads: %s (code %d, ours found %u): %.*s",
                        error.text, code, found, (int)size, (const char *)data);
        }
    }
    json_decref(theirs);
    xJsonDocFree(&doc);
    return 0;
}
