/* fuzz_json_writer.c — libFuzzer: the JSON writer against jansson.
 *
 * Input: a program of writer calls, one opcode byte each (its value modulo
 * the number of calls), followed by its operand: a length byte and that many
 * bytes for a key or a string, 8 bytes for an integer or a double, 1 for a
 * boolean. The same calls build a jansson value beside the writer, and a
 * model of the grammar says which call must fail and how. Checked at the end:
 *   - the writer's error is the model's (a misplaced call: XERR_STATE; too
 *     deep: XERR_LIMIT; bytes that are not UTF-8 — judged by jansson — or
 *     NaN and infinities: XERR_INVALID; a value left open: XERR_STATE);
 *   - without an error, jansson parses the output back to the value the
 *     calls built: same members, same strings byte for byte, same numbers. */
#include <jansson.h>
#include <math.h>
#include <string.h>

#include <xbase/json.h>

#include "fuzz_check.h"

enum { BEGIN_OBJECT, END_OBJECT, BEGIN_ARRAY, END_ARRAY, KEY, STRING, INT, DOUBLE, BOOL, NUL, NUM_OPS };

/* The grammar and the value being built, as the writer should see them. */
typedef struct Model {
    json_t *stack[XJSON_MAX_DEPTH + 1]; /* stack[0] holds the document */
    bool is_object[XJSON_MAX_DEPTH + 1];
    int depth;
    char *key; /* a key waiting for its value */
    size_t key_len;
    bool done;
    xErrno err;
} Model;

static void model_fail(Model *m, xErrno err) {
    if (m->err == XOK) m->err = err;
}

/* Whether a value may come now (the writer's own order of checks). */
static bool value_allowed(const Model *m) {
    if (m->done) return false;
    if (m->depth && m->is_object[m->depth] && !m->key) return false;
    return true;
}

/* Places v (a new reference) where the grammar puts it. */
static void model_place(Model *m, json_t *v) {
    json_t *parent = m->stack[m->depth];
    if (m->depth == 0) {
        m->stack[0] = v;
        m->done = true;
    } else if (m->is_object[m->depth]) {
        /* json_object_setn_new copies the key, which may hold NUL bytes. */
        FUZZ_ASSERT(json_object_setn_new(parent, m->key, m->key_len, v) == 0, "jansson refused a key");
        free(m->key);
        m->key = NULL;
    } else {
        json_array_append_new(parent, v);
    }
}

static void model_begin(Model *m, bool object) {
    if (!value_allowed(m)) return model_fail(m, XERR_STATE);
    if (m->depth == XJSON_MAX_DEPTH) return model_fail(m, XERR_LIMIT);
    json_t *c = object ? json_object() : json_array();
    model_place(m, json_incref(c));
    m->done = false;
    m->stack[++m->depth] = c;
    m->is_object[m->depth] = object;
}

static void model_end(Model *m, bool object) {
    if (!m->depth || m->is_object[m->depth] != object || m->key) return model_fail(m, XERR_STATE);
    json_decref(m->stack[m->depth--]);
    if (m->depth == 0) m->done = true;
}

static void model_key(Model *m, const char *key, size_t len) {
    if (!m->depth || !m->is_object[m->depth] || m->key) return model_fail(m, XERR_STATE);
    json_t *probe = json_stringn(key, len); /* NULL: jansson says it is not UTF-8 */
    if (!probe) return model_fail(m, XERR_INVALID);
    json_decref(probe);
    m->key = malloc(len + 1);
    memcpy(m->key, key, len);
    m->key[len] = 0;
    m->key_len = len;
}

static void model_scalar(Model *m, json_t *v) {
    if (!value_allowed(m)) {
        json_decref(v);
        return model_fail(m, XERR_STATE);
    }
    model_place(m, v);
}

/* Numbers may come back as integers where a double was integral. */
static bool same_number(const json_t *want, const json_t *got) {
    double w = json_number_value(want), g = json_number_value(got);
    if (json_is_integer(want) && json_is_integer(got)) {
        return json_integer_value(want) == json_integer_value(got);
    }
    return w == g;
}

static bool same_value(const json_t *want, const json_t *got) {
    if (json_is_number(want)) return json_is_number(got) && same_number(want, got);
    if (json_typeof(want) != json_typeof(got)) return false;
    switch (json_typeof(want)) {
    case JSON_OBJECT: {
        if (json_object_size(want) != json_object_size(got)) return false;
        const char *key;
        size_t len;
        json_t *v;
        json_object_keylen_foreach((json_t *)want, key, len, v) {
            json_t *other = json_object_getn(got, key, len);
            if (!other || !same_value(v, other)) return false;
        }
        return true;
    }
    case JSON_ARRAY:
        if (json_array_size(want) != json_array_size(got)) return false;
        for (size_t i = 0; i < json_array_size(want); i++) {
            if (!same_value(json_array_get(want, i), json_array_get(got, i))) return false;
        }
        return true;
    case JSON_STRING:
        return json_string_length(want) == json_string_length(got) &&
               memcmp(json_string_value(want), json_string_value(got), json_string_length(want)) == 0;
    default: /* true, false, null */ return true;
    }
}

/* Takes n operand bytes, or none when the input ran out. */
static const uint8_t *operand(const uint8_t **p, const uint8_t *end, size_t n) {
    if ((size_t)(end - *p) < n) return NULL;
    const uint8_t *at = *p;
    *p += n;
    return at;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    xBuffer out = {0};
    xJsonWriter w;
    xJsonInit(&w, &out);
    Model m = {0};
    const uint8_t *p = data, *end = data + size;
    while (p < end) {
        int op = *p++ % NUM_OPS;
        const uint8_t *arg;
        switch (op) {
        case BEGIN_OBJECT:
        case BEGIN_ARRAY:
            if (op == BEGIN_OBJECT) {
                xJsonBeginObject(&w);
            } else {
                xJsonBeginArray(&w);
            }
            if (m.err == XOK) model_begin(&m, op == BEGIN_OBJECT);
            break;
        case END_OBJECT:
        case END_ARRAY:
            if (op == END_OBJECT) {
                xJsonEndObject(&w);
            } else {
                xJsonEndArray(&w);
            }
            if (m.err == XOK) model_end(&m, op == END_OBJECT);
            break;
        case KEY:
        case STRING: {
            const uint8_t *len = operand(&p, end, 1);
            if (!len || !(arg = operand(&p, end, *len))) goto done;
            char *s = fuzz_copy(arg, *len);
            if (op == KEY) {
                /* jansson parses no NUL in a member name (xJsonString's NULs are checked). */
                for (size_t i = 0; i < *len; i++) s[i] = s[i] ? s[i] : ' ';
                xJsonKey(&w, s, *len);
                if (m.err == XOK) model_key(&m, s, *len);
            } else {
                xJsonString(&w, s, *len);
                if (m.err == XOK) {
                    json_t *v = json_stringn(s, *len);
                    if (v) {
                        model_scalar(&m, v);
                    } else if (!value_allowed(&m)) {
                        model_fail(&m, XERR_STATE);
                    } else {
                        model_fail(&m, XERR_INVALID);
                    }
                }
            }
            free(s);
            break;
        }
        case INT: {
            if (!(arg = operand(&p, end, 8))) goto done;
            int64_t v;
            memcpy(&v, arg, 8);
            xJsonInt(&w, v);
            if (m.err == XOK) model_scalar(&m, json_integer(v));
            break;
        }
        case DOUBLE: {
            if (!(arg = operand(&p, end, 8))) goto done;
            double v;
            memcpy(&v, arg, 8);
            xJsonDouble(&w, v);
            /* The writer refuses what JSON cannot hold before it looks at the grammar. */
            if (m.err == XOK) {
                if (!isfinite(v)) {
                    model_fail(&m, XERR_INVALID);
                } else {
                    model_scalar(&m, json_real(v));
                }
            }
            break;
        }
        case BOOL:
            if (!(arg = operand(&p, end, 1))) goto done;
            xJsonBool(&w, *arg & 1);
            if (m.err == XOK) model_scalar(&m, json_boolean(*arg & 1));
            break;
        case NUL:
            xJsonNull(&w);
            if (m.err == XOK) model_scalar(&m, json_null());
            break;
        }
    }
done:;
    xErrno want = m.err != XOK ? m.err : m.done ? XOK : XERR_STATE;
    xErrno got = xJsonFinish(&w);
    FUZZ_ASSERT(got == want, "writer says %d, the model %d", got, want);
    if (got == XOK) {
        json_error_t error;
        json_t *back = json_loadb(out.data, out.len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &error);
        FUZZ_ASSERT(back, "jansson cannot parse the output: %s: %.*s", error.text, (int)out.len, out.data);
        FUZZ_ASSERT(same_value(m.stack[0], back), "the output parses to another value: %.*s", (int)out.len,
                    out.data);
        json_decref(back);
    }
    while (m.depth) json_decref(m.stack[m.depth--]);
    json_decref(m.stack[0]);
    free(m.key);
    xBufferFree(&out);
    return 0;
}
