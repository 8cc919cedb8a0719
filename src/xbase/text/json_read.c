/* json_read.c — the JSON reader: one pass over the input that checks it
 * against RFC 8259 and lays its values out in one block, each 16 bytes,
 * in document order; then lookups and typed getters over that block.
 *
 * A container is followed by its elements (an object's by name, value,
 * name, value), and records how many slots its subtree takes, so a walk
 * steps over a whole member at once. Strings without escapes and numbers
 * point into the input; an escaped string's decoded bytes follow its slot.
 * While a container is open its slot links to the one around it, so the
 * parse needs no stack of its own at any depth and never recurses. */
#define _GNU_SOURCE /* strtod_l, newlocale */
#include <xbase/json.h>

#include <assert.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "xbase/text/utf8.h"

struct xJsonValue {
    uint32_t bits; /* xJsonType in the low bits, then the flags below */
    uint32_t len;  /* string and number: bytes; array: elements; object: members */
    union {
        const char *text; /* number, string: where its text starts in the input */
        size_t span;      /* a closed container: the slots its subtree takes, its own included */
        size_t parent;    /* an open container: the slot of the one around it (NO_PARENT at the top) */
    } u;
};
static_assert(sizeof(xJsonValue) == 16, "a value is two words");

enum {
    TYPE_MASK = 7,
    FLAG_TRUE = 8,       /* a boolean that is true */
    FLAG_INTEGER = 16,   /* a number written without fraction or exponent */
    FLAG_DECODED = 32,   /* a string whose decoded bytes follow its slot */
    FLAG_CONTAINER = 64, /* an array or object: u.span (u.parent while open) */
};

#define NO_PARENT SIZE_MAX

/* The most a document may hold: lengths and counts are 32 bits. */
#define LARGEST_INPUT ((size_t)UINT32_MAX)

/* Slots after a decoded string's own that hold its len bytes. */
static size_t payload_slots(size_t len) { return (len + sizeof(xJsonValue) - 1) / sizeof(xJsonValue); }

static size_t span_of(const xJsonValue *v) {
    if (!(v->bits & (FLAG_CONTAINER | FLAG_DECODED))) return 1;
    return v->bits & FLAG_CONTAINER ? v->u.span : 1 + payload_slots(v->len);
}

static xJsonType type_of(const xJsonValue *v) { return (xJsonType)(v->bits & TYPE_MASK); }

static xStr string_of(const xJsonValue *v) {
    return (xStr){(v->bits & FLAG_DECODED) ? (const char *)(v + 1) : v->u.text, v->len};
}

/* ---- Bytes ---- */

/* What a byte means inside a string: 0 is itself; the rest end a plain run. */
enum { PLAIN = 0, QUOTE, BACKSLASH, CONTROL, HIGH };

#define CONTROLS_16(base)                                                                                    \
    [base + 0] = CONTROL, [base + 1] = CONTROL, [base + 2] = CONTROL, [base + 3] = CONTROL,                  \
            [base + 4] = CONTROL, [base + 5] = CONTROL, [base + 6] = CONTROL, [base + 7] = CONTROL,          \
            [base + 8] = CONTROL, [base + 9] = CONTROL, [base + 10] = CONTROL, [base + 11] = CONTROL,        \
            [base + 12] = CONTROL, [base + 13] = CONTROL, [base + 14] = CONTROL, [base + 15] = CONTROL
#define HIGH_16(base)                                                                                        \
    [base + 0] = HIGH, [base + 1] = HIGH, [base + 2] = HIGH, [base + 3] = HIGH, [base + 4] = HIGH,           \
            [base + 5] = HIGH, [base + 6] = HIGH, [base + 7] = HIGH, [base + 8] = HIGH, [base + 9] = HIGH,   \
            [base + 10] = HIGH, [base + 11] = HIGH, [base + 12] = HIGH, [base + 13] = HIGH,                  \
            [base + 14] = HIGH, [base + 15] = HIGH

/* RFC 8259 §7: the quote, the backslash and the controls below 0x20 may not
 * appear bare; bytes from 0x80 start UTF-8 sequences, checked one by one. */
static const unsigned char STRING_BYTE[256] = {
    CONTROLS_16(0x00), CONTROLS_16(0x10), ['"'] = QUOTE, ['\\'] = BACKSLASH, HIGH_16(0x80), HIGH_16(0x90),
    HIGH_16(0xa0),     HIGH_16(0xb0),     HIGH_16(0xc0), HIGH_16(0xd0),      HIGH_16(0xe0), HIGH_16(0xf0),
};

/* RFC 8259 §2: the four whitespace bytes. */
static const bool WHITESPACE[256] = {[' '] = true, ['\t'] = true, ['\n'] = true, ['\r'] = true};

static bool is_digit(unsigned char c) { return (unsigned)(c - '0') < 10u; }

/* Eight bytes as a little-endian word: the first byte is the lowest, which
 * the scans below rely on to find the first byte they flag. */
static uint64_t load64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, sizeof v);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

#define BYTES(b) (0x0101010101010101ull * (b))

/* Whether n bytes match: member names are short, so inline beats a call to memcmp. */
static bool same_bytes(const char *a, const char *b, size_t n) {
    for (; n >= 8; a += 8, b += 8, n -= 8) {
        if (load64((const unsigned char *)a) != load64((const unsigned char *)b)) return false;
    }
    while (n && *a == *b) a++, b++, n--;
    return n == 0;
}

/* Steps over whitespace. Indentation is runs of spaces, taken eight at a
 * time (the lowest byte that is not a space is the first). */
static const unsigned char *skip_whitespace(const unsigned char *p, const unsigned char *end) {
    while (p < end && WHITESPACE[*p]) {
        p++;
        while (end - p >= 8) {
            uint64_t other = load64(p) ^ BYTES(' ');
            if (other) {
                p += __builtin_ctzll(other) / 8;
                break;
            }
            p += 8;
        }
    }
    return p;
}

/* Steps over the bytes of a string that stand for themselves, eight at a
 * time: a byte needs a look when it is below 0x20, a quote, a backslash or
 * from 0x80. Each test flags exactly the first such byte (a borrow only
 * flags bytes after a true one), so the lowest flag is the first of them. */
static const unsigned char *skip_plain(const unsigned char *p, const unsigned char *end) {
    while (end - p >= 8) {
        uint64_t x = load64(p);
        uint64_t quote = x ^ BYTES('"'), backslash = x ^ BYTES('\\');
        uint64_t flags = (((x - BYTES(0x20)) & ~x) | ((quote - BYTES(1)) & ~quote) |
                          ((backslash - BYTES(1)) & ~backslash) | x) &
                         BYTES(0x80);
        if (flags) return p + __builtin_ctzll(flags) / 8;
        p += 8;
    }
    while (p < end && !STRING_BYTE[*p]) p++;
    return p;
}

/* ---- The parse ---- */

typedef struct Parse {
    xJsonDoc *doc;
    const unsigned char *start, *end;
    xJsonValue *values; /* doc->values, cached */
    size_t count, capacity;
} Parse;

/* Records the first error; returns NULL so a reader can return it. */
static const unsigned char *fail(Parse *ps, const unsigned char *at, xErrno err, const char *reason) {
    xJsonError *e = &ps->doc->error;
    e->err = err;
    e->offset = (size_t)(at - ps->start);
    e->reason = reason;
    e->line = 1;
    const unsigned char *line_start = ps->start;
    for (const unsigned char *p = ps->start; p < at; p++) {
        if (*p == '\n') {
            e->line++;
            line_start = p + 1;
        }
    }
    e->column = (size_t)(at - line_start) + 1;
    return NULL;
}

static bool owns_block(const xJsonDoc *doc) { return doc->values && doc->values != doc->caller_memory; }

/* Makes room for n more values: the first block of its own is the larger of
 * twice what there was and a guess from the input's size, copied from the
 * caller's memory; later ones double. */
static bool reserve(Parse *ps, size_t n, const unsigned char *at) {
    if (ps->capacity - ps->count >= n) return true;
    xJsonDoc *doc = ps->doc;
    size_t want = ps->capacity * 2;
    size_t guess = (size_t)(ps->end - ps->start) / 8 + 8;
    if (want < guess) want = guess;
    if (want - ps->count < n) want = ps->count + n;
    xJsonValue *block;
    if (owns_block(doc)) {
        block = want <= SIZE_MAX / sizeof *block ? realloc(doc->values, want * sizeof *block) : NULL;
    } else {
        block = want <= SIZE_MAX / sizeof *block ? malloc(want * sizeof *block) : NULL;
        if (block && ps->count) memcpy(block, doc->values, ps->count * sizeof *block);
    }
    if (!block) {
        fail(ps, at, XERR_NOMEM, "out of memory");
        return false;
    }
    doc->values = ps->values = block;
    doc->capacity = ps->capacity = want;
    return true;
}

static xJsonValue *add_value(Parse *ps, uint32_t bits, uint32_t len, const unsigned char *at) {
    if (ps->count == ps->capacity && !reserve(ps, 1, at)) return NULL;
    xJsonValue *v = &ps->values[ps->count++];
    v->bits = bits;
    v->len = len;
    v->u.text = (const char *)at;
    return v;
}

static int hex_value(unsigned char c) {
    if (is_digit(c)) return c - '0';
    c |= 0x20;
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* The code unit of the four hex digits at p (4 bytes known to be there), or -1. */
static long hex4(const unsigned char *p) {
    long v = 0;
    for (int i = 0; i < 4; i++) {
        int d = hex_value(p[i]);
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

static size_t put_utf8(char *out, unsigned long cp) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3f));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Decodes the \u escape at p (its backslash) and, for a high surrogate, the
 * low one that must follow, into out; returns the bytes after them, or NULL. */
static const unsigned char *decode_unicode(Parse *ps, const unsigned char *p, const unsigned char *close,
                                           char *out, size_t *written) {
    long unit = close - p >= 6 ? hex4(p + 2) : -1;
    if (unit < 0) return fail(ps, p, XERR_INVALID, "\\u must be followed by four hex digits");
    unsigned long cp = (unsigned long)unit;
    const unsigned char *next = p + 6;
    if (unit >= 0xdc00 && unit <= 0xdfff) {
        return fail(ps, p, XERR_INVALID, "a low surrogate escaped with no high one before it");
    }
    if (unit >= 0xd800 && unit <= 0xdbff) {
        long low = close - next >= 6 && next[0] == '\\' && next[1] == 'u' ? hex4(next + 2) : -1;
        if (low < 0xdc00 || low > 0xdfff) {
            return fail(ps, p, XERR_INVALID, "a high surrogate escaped with no low one after it");
        }
        cp = 0x10000 + ((cp - 0xd800) << 10) + (unsigned long)(low - 0xdc00);
        next += 6;
    }
    *written = put_utf8(out, cp);
    return next;
}

/* The byte each one-letter escape stands for (RFC 8259 §7); 0: not one. */
static const char ESCAPED[128] = {['"'] = '"',  ['\\'] = '\\', ['/'] = '/',  ['b'] = '\b',
                                  ['f'] = '\f', ['n'] = '\n',  ['r'] = '\r', ['t'] = '\t'};

/* A string with escapes, its contents starting at s: decoded into the slots
 * after its own. Returns the byte after its closing quote, or NULL. */
static const unsigned char *read_escaped_string(Parse *ps, const unsigned char *s) {
    const unsigned char *close = s, *end = ps->end;
    for (;;) { /* where it ends: a quote that no backslash escapes */
        while (close < end && *close != '"' && *close != '\\') close++;
        if (close == end) return fail(ps, s - 1, XERR_INVALID, "a string with no closing quote");
        if (*close == '"') break;
        if (end - close < 2) return fail(ps, s - 1, XERR_INVALID, "a string with no closing quote");
        close += 2;
    }
    /* Decoding never lengthens: "\n" is 2 bytes for 1, "\uXXXX" 6 for at most 3. */
    size_t at = ps->count;
    if (!reserve(ps, 1 + payload_slots((size_t)(close - s)), s - 1)) return NULL;
    char *out = (char *)(&ps->values[at] + 1), *o = out;
    const unsigned char *p = s;
    while (p < close) {
        const unsigned char *run = skip_plain(p, close);
        memcpy(o, p, (size_t)(run - p));
        o += run - p;
        if ((p = run) == close) break;
        unsigned char c = *p;
        if (c >= 0x80) {
            size_t n = xUtf8Sequence(p, (size_t)(close - p));
            if (!n) return fail(ps, p, XERR_INVALID, "bytes that are not UTF-8 in a string");
            memcpy(o, p, n);
            o += n;
            p += n;
        } else if (c != '\\') {
            return fail(ps, p, XERR_INVALID, "a control character in a string (it must be escaped)");
        } else if (p[1] == 'u') {
            size_t n;
            if (!(p = decode_unicode(ps, p, close, o, &n))) return NULL;
            o += n;
        } else {
            char e = p[1] < 0x80 ? ESCAPED[p[1]] : 0;
            if (!e) return fail(ps, p, XERR_INVALID, "a backslash before a letter that is no escape");
            *o++ = e;
            p += 2;
        }
    }
    xJsonValue *v = &ps->values[at];
    v->bits = XJSON_STRING | FLAG_DECODED;
    v->len = (uint32_t)(o - out);
    v->u.text = (const char *)s;
    ps->count = at + 1 + payload_slots(v->len);
    return close + 1;
}

/* The string whose opening quote is at q. Returns the byte after its closing
 * quote, or NULL. */
static const unsigned char *read_string(Parse *ps, const unsigned char *q) {
    const unsigned char *s = q + 1, *p = s, *end = ps->end;
    for (;;) {
        p = skip_plain(p, end);
        if (p == end) return fail(ps, q, XERR_INVALID, "a string with no closing quote");
        switch (STRING_BYTE[*p]) {
        case QUOTE: return add_value(ps, XJSON_STRING, (uint32_t)(p - s), s) ? p + 1 : NULL;
        case HIGH: {
            size_t n = xUtf8Sequence(p, (size_t)(end - p));
            if (!n) return fail(ps, p, XERR_INVALID, "bytes that are not UTF-8 in a string");
            p += n;
            break;
        }
        case BACKSLASH: return read_escaped_string(ps, s);
        default: return fail(ps, p, XERR_INVALID, "a control character in a string (it must be escaped)");
        }
    }
}

static const unsigned char *skip_digits(const unsigned char *p, const unsigned char *end) {
    while (p < end && is_digit(*p)) p++;
    return p;
}

/* The number starting at s (a minus or a digit), RFC 8259 §6's grammar.
 * Returns the byte after it, or NULL. */
static const unsigned char *read_number(Parse *ps, const unsigned char *s) {
    const unsigned char *p = s, *end = ps->end;
    uint32_t bits = XJSON_NUMBER | FLAG_INTEGER;
    if (*p == '-') p++;
    if (p == end || !is_digit(*p)) return fail(ps, p, XERR_INVALID, "a minus sign with no digit after it");
    if (*p == '0') {
        if (++p < end && is_digit(*p)) return fail(ps, s, XERR_INVALID, "a number with a leading zero");
    } else {
        p = skip_digits(p + 1, end);
    }
    if (p < end && *p == '.') {
        if (++p == end || !is_digit(*p))
            return fail(ps, p, XERR_INVALID, "a decimal point with no digit after it");
        p = skip_digits(p, end);
        bits = XJSON_NUMBER;
    }
    if (p < end && (*p | 0x20) == 'e') {
        if (++p < end && (*p == '+' || *p == '-')) p++;
        if (p == end || !is_digit(*p)) return fail(ps, p, XERR_INVALID, "an exponent with no digit");
        p = skip_digits(p, end);
        bits = XJSON_NUMBER;
    }
    return add_value(ps, bits, (uint32_t)(p - s), s) ? p : NULL;
}

/* true, false or null at p: the byte after it, or NULL. */
static const unsigned char *read_literal(Parse *ps, const unsigned char *p) {
    static const struct {
        const char *text;
        size_t len;
        uint32_t bits;
    } literals[] = {{"true", 4, XJSON_BOOL | FLAG_TRUE}, {"false", 5, XJSON_BOOL}, {"null", 4, XJSON_NULL}};
    for (size_t i = 0; i < sizeof literals / sizeof literals[0]; i++) {
        if (*p != literals[i].text[0]) continue;
        if ((size_t)(ps->end - p) < literals[i].len || memcmp(p, literals[i].text, literals[i].len) != 0)
            break;
        return add_value(ps, literals[i].bits, 0, p) ? p + literals[i].len : NULL;
    }
    return fail(ps, p, XERR_INVALID, "expected a value");
}

/* ---- Member names seen twice ---- */

typedef struct Name {
    const char *data;
    size_t len;
    const xJsonValue *at;
} Name;

static int compare_names(const void *a, const void *b) {
    const Name *x = a, *y = b;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    int c = memcmp(x->data, y->data, x->len);
    if (c) return c;
    return x->at < y->at ? -1 : x->at > y->at; /* the later one last */
}

static bool same_name(const Name *a, const Name *b) {
    return a->len == b->len && same_bytes(a->data, b->data, a->len);
}

/* Up to this many members, each name is compared with the ones before it;
 * beyond, they are sorted, so a huge object costs n log n, not n². */
#define FEW_MEMBERS 16

/* The second of two members of obj that share a name, or NULL. */
static const xJsonValue *repeated_name(const xJsonValue *obj, bool *out_of_memory) {
    size_t n = obj->len;
    Name few[FEW_MEMBERS], *names = n <= FEW_MEMBERS ? few : malloc(n * sizeof *names);
    if (!names) {
        *out_of_memory = true;
        return NULL;
    }
    const xJsonValue *k = obj + 1;
    for (size_t i = 0; i < n; i++) {
        xStr s = string_of(k);
        names[i] = (Name){s.data, s.len, k};
        const xJsonValue *value = k + span_of(k);
        k = value + span_of(value);
    }
    const xJsonValue *repeated = NULL;
    if (names == few) {
        for (size_t i = 1; i < n && !repeated; i++) {
            for (size_t j = 0; j < i; j++) {
                if (same_name(&names[i], &names[j])) {
                    repeated = names[i].at;
                    break;
                }
            }
        }
    } else {
        qsort(names, n, sizeof *names, compare_names);
        for (size_t i = 1; i < n; i++) {
            if (same_name(&names[i], &names[i - 1]) && (!repeated || names[i].at < repeated)) {
                repeated = names[i].at;
            }
        }
        free(names);
    }
    return repeated;
}

/* Closes the container at slot open, whose subtree ends here; false (and
 * the error set) for an object with a member name seen twice. */
static bool close_container(Parse *ps, size_t open, const unsigned char *at) {
    xJsonValue *c = &ps->values[open];
    c->u.span = ps->count - open;
    if (type_of(c) != XJSON_OBJECT || c->len < 2) return true;
    bool out_of_memory = false;
    const xJsonValue *repeated = repeated_name(c, &out_of_memory);
    if (out_of_memory) {
        fail(ps, at, XERR_NOMEM, "out of memory");
        return false;
    }
    if (repeated) {
        /* A name's text starts after its opening quote. */
        fail(ps, (const unsigned char *)repeated->u.text - 1, XERR_INVALID,
             "a member name repeated in one object");
        return false;
    }
    return true;
}

/* ---- The grammar ---- */

static xErrno failed(Parse *ps, const unsigned char *at, xErrno err, const char *reason) {
    fail(ps, at, err, reason);
    return err;
}

/* The document from ps->start: a value, then the elements or members of each
 * container opened, each container closed in the slot that opened it. */
static xErrno parse(Parse *ps) {
    const unsigned char *p = ps->start, *end = ps->end;
    size_t open = NO_PARENT; /* the innermost open container */
    bool in_object = false;
    unsigned depth = 0, max_depth = ps->doc->max_depth;

value:
    p = skip_whitespace(p, end);
    if (p == end)
        return failed(ps, p, XERR_INVALID, ps->count ? "the input ends where a value should be" : "no value");
    switch (*p) {
    case '[':
    case '{': {
        if (depth == max_depth) return failed(ps, p, XERR_LIMIT, "nested deeper than the limit");
        size_t slot = ps->count;
        bool object = *p == '{';
        xJsonValue *c = add_value(ps, (object ? XJSON_OBJECT : XJSON_ARRAY) | FLAG_CONTAINER, 0, p);
        if (!c) return ps->doc->error.err;
        c->u.parent = open;
        open = slot;
        in_object = object;
        depth++;
        p = skip_whitespace(p + 1, end);
        if (p < end && *p == (object ? '}' : ']')) {
            p++;
            goto close;
        }
        if (object) goto member;
        ps->values[open].len++;
        goto value;
    }
    case '"': p = read_string(ps, p); break;
    case '-':
    case '0':
    case '1':
    case '2':
    case '3':
    case '4':
    case '5':
    case '6':
    case '7':
    case '8':
    case '9': p = read_number(ps, p); break;
    default: p = read_literal(ps, p); break;
    }
    if (!p) return ps->doc->error.err;

after_value:
    p = skip_whitespace(p, end);
    if (open == NO_PARENT) return p == end ? XOK : failed(ps, p, XERR_INVALID, "more after the value");
    if (p == end) {
        return failed(ps, p, XERR_INVALID,
                      in_object ? "the input ends inside an object" : "the input ends inside an array");
    }
    if (*p == ',') {
        p = skip_whitespace(p + 1, end);
        if (in_object) goto member;
        ps->values[open].len++;
        goto value;
    }
    if (*p != (in_object ? '}' : ']')) {
        return failed(ps, p, XERR_INVALID,
                      in_object ? "expected , or } after a member" : "expected , or ] after an element");
    }
    p++;

close : {
    size_t parent = ps->values[open].u.parent;
    if (!close_container(ps, open, p - 1)) return ps->doc->error.err;
    open = parent;
    depth--;
    in_object = open != NO_PARENT && type_of(&ps->values[open]) == XJSON_OBJECT;
    goto after_value;
}

member:
    if (p == end || *p != '"') return failed(ps, p, XERR_INVALID, "expected a member name in quotes");
    if (!(p = read_string(ps, p))) return ps->doc->error.err;
    ps->values[open].len++;
    p = skip_whitespace(p, end);
    if (p == end || *p != ':') return failed(ps, p, XERR_INVALID, "expected : after a member name");
    p++;
    goto value;
}

void xJsonDocInit(xJsonDoc *doc, void *memory, size_t size) {
    memset(doc, 0, sizeof *doc);
    uintptr_t aligned =
        ((uintptr_t)memory + _Alignof(xJsonValue) - 1) & ~(uintptr_t)(_Alignof(xJsonValue) - 1);
    size_t skipped = (size_t)(aligned - (uintptr_t)memory);
    if (memory && size > skipped && (size - skipped) / sizeof(xJsonValue) > 0) {
        doc->caller_memory = doc->values = (xJsonValue *)aligned;
        doc->caller_capacity = doc->capacity = (size - skipped) / sizeof(xJsonValue);
    }
    doc->max_size = XJSON_READ_MAX_SIZE;
    doc->max_depth = XJSON_MAX_DEPTH;
}

void xJsonDocLimits(xJsonDoc *doc, size_t max_size, unsigned max_depth) {
    doc->max_size = max_size < LARGEST_INPUT ? max_size : LARGEST_INPUT;
    doc->max_depth = max_depth;
}

xErrno xJsonDocParse(xJsonDoc *doc, const char *json, size_t len) {
    Parse ps = {.doc = doc, .start = (const unsigned char *)json, .end = (const unsigned char *)json + len};
    doc->parsed = false;
    doc->count = 0;
    doc->error = (xJsonError){.err = XOK, .reason = ""};
    if (len > doc->max_size) {
        ps.end = ps.start + doc->max_size; /* where the line and column count stops */
        fail(&ps, ps.end, XERR_LIMIT, "larger than the limit");
        return XERR_LIMIT;
    }
    ps.values = doc->values;
    ps.capacity = doc->capacity;
    xErrno err = parse(&ps);
    doc->count = ps.count;
    doc->parsed = err == XOK;
    return err;
}

const xJsonValue *xJsonDocRoot(const xJsonDoc *doc) { return doc->parsed ? doc->values : NULL; }

const xJsonError *xJsonDocError(const xJsonDoc *doc) { return &doc->error; }

void xJsonDocFree(xJsonDoc *doc) {
    if (owns_block(doc)) free(doc->values);
    doc->values = doc->caller_memory;
    doc->capacity = doc->caller_capacity;
    doc->count = 0;
    doc->parsed = false;
}

/* ---- Walking ---- */

xJsonType xJsonTypeOf(const xJsonValue *v) { return v ? type_of(v) : XJSON_MISSING; }

size_t xJsonSize(const xJsonValue *v) { return v && (v->bits & FLAG_CONTAINER) ? v->len : 0; }

const xJsonValue *xJsonObjectGetN(const xJsonValue *obj, const char *key, size_t len) {
    if (xJsonTypeOf(obj) != XJSON_OBJECT) return NULL;
    const xJsonValue *k = obj + 1;
    for (uint32_t i = 0; i < obj->len; i++) {
        const xJsonValue *value = k + span_of(k);
        if (k->len == len) {
            xStr name = string_of(k);
            if (same_bytes(name.data, key, len)) return value;
        }
        k = value + span_of(value);
    }
    return NULL;
}

const xJsonValue *xJsonArrayGet(const xJsonValue *arr, size_t index) {
    if (xJsonTypeOf(arr) != XJSON_ARRAY || index >= arr->len) return NULL;
    const xJsonValue *e = arr + 1;
    while (index--) e += span_of(e);
    return e;
}

void xJsonIterInit(xJsonIter *it, const xJsonValue *v) {
    xJsonType t = xJsonTypeOf(v);
    bool container = t == XJSON_ARRAY || t == XJSON_OBJECT;
    *it = (xJsonIter){
        .next = container ? v + 1 : NULL, .left = container ? v->len : 0, .members = t == XJSON_OBJECT};
}

bool xJsonIterNext(xJsonIter *it, xStr *key, const xJsonValue **value) {
    if (!it->left) return false;
    it->left--;
    const xJsonValue *v = it->next;
    xStr name = {"", 0};
    if (it->members) {
        name = string_of(v);
        v += span_of(v);
    }
    if (key) *key = name;
    *value = v;
    it->next = v + span_of(v);
    return true;
}

/* ---- Getters ---- */

xErrno xJsonGetString(const xJsonValue *v, xStr *out) {
    if (xJsonTypeOf(v) != XJSON_STRING) return XERR_INVALID;
    *out = string_of(v);
    return XOK;
}

xErrno xJsonGetBool(const xJsonValue *v, bool *out) {
    if (xJsonTypeOf(v) != XJSON_BOOL) return XERR_INVALID;
    *out = (v->bits & FLAG_TRUE) != 0;
    return XOK;
}

bool xJsonIsNull(const xJsonValue *v) { return xJsonTypeOf(v) == XJSON_NULL; }

xStr xJsonNumberText(const xJsonValue *v) {
    return xJsonTypeOf(v) == XJSON_NUMBER ? (xStr){v->u.text, v->len} : (xStr){"", 0};
}

/* An integer's magnitude and sign; XERR_LIMIT past 2^64 - 1. */
static xErrno integer_of(const xJsonValue *v, uint64_t *magnitude, bool *negative) {
    if (xJsonTypeOf(v) != XJSON_NUMBER || !(v->bits & FLAG_INTEGER)) return XERR_INVALID;
    const char *p = v->u.text, *end = p + v->len;
    *negative = *p == '-';
    p += *negative;
    uint64_t m = 0;
    for (; p < end; p++) {
        if (__builtin_mul_overflow(m, 10, &m) || __builtin_add_overflow(m, (uint64_t)(*p - '0'), &m)) {
            return XERR_LIMIT;
        }
    }
    *magnitude = m;
    return XOK;
}

xErrno xJsonGetInt64(const xJsonValue *v, int64_t *out) {
    uint64_t m;
    bool negative;
    xErrno err = integer_of(v, &m, &negative);
    if (err != XOK) return err;
    if (m > (negative ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX)) return XERR_LIMIT;
    *out = negative ? (int64_t)(0 - m) : (int64_t)m;
    return XOK;
}

xErrno xJsonGetUint64(const xJsonValue *v, uint64_t *out) {
    uint64_t m;
    bool negative;
    xErrno err = integer_of(v, &m, &negative);
    if (err != XOK) return err;
    if (negative && m) return XERR_LIMIT;
    *out = m;
    return XOK;
}

/* Powers of ten a double holds exactly. */
static const double EXACT_POWERS[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                      1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* The common case without strtod: at most 15 significant digits (so the
 * digits are exactly a double) times or over a power of ten a double holds
 * exactly is one correctly rounded operation (Clinger's fast path). */
static bool fast_double(xStr text, double *out) {
    const char *p = text.data, *end = p + text.len;
    bool negative = *p == '-';
    p += negative;
    uint64_t digits = 0;
    int significant = 0, exponent = 0;
    for (; p < end && is_digit((unsigned char)*p); p++) {
        digits = digits * 10 + (uint64_t)(*p - '0');
        significant += digits != 0;
    }
    if (p < end && *p == '.') {
        for (p++; p < end && is_digit((unsigned char)*p); p++) {
            digits = digits * 10 + (uint64_t)(*p - '0');
            significant += digits != 0;
            exponent--;
        }
    }
    if (significant > 15) return false;
    if (p < end) { /* the exponent: more than three digits is out of any fast range */
        p++;
        bool minus = *p == '-';
        p += *p == '-' || *p == '+';
        if (end - p > 3) return false;
        int e = 0;
        for (; p < end; p++) e = e * 10 + (*p - '0');
        exponent += minus ? -e : e;
    }
    if (exponent < -22 || exponent > 22) return false;
    double d = (double)digits;
    d = exponent < 0 ? d / EXACT_POWERS[-exponent] : d * EXACT_POWERS[exponent];
    *out = negative ? -d : d;
    return true;
}

static locale_t c_locale;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;

static void make_c_locale(void) { c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0); }

xErrno xJsonGetDouble(const xJsonValue *v, double *out) {
    if (xJsonTypeOf(v) != XJSON_NUMBER) return XERR_INVALID;
    xStr text = {v->u.text, v->len};
    if (fast_double(text, out)) return XOK;
    /* strtod in the C locale (a program's locale may use a decimal comma), on
     * a NUL-terminated copy: the input may end right after the number. */
    pthread_once(&c_locale_once, make_c_locale);
    if (!c_locale) return XERR_NOMEM;
    char small[64], *copy = text.len < sizeof small ? small : malloc(text.len + 1);
    if (!copy) return XERR_NOMEM;
    memcpy(copy, text.data, text.len);
    copy[text.len] = 0;
    double d = strtod_l(copy, NULL, c_locale);
    if (copy != small) free(copy);
    if (isinf(d)) return XERR_LIMIT;
    *out = d;
    return XOK;
}
