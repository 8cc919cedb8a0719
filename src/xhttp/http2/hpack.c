/* hpack.c — HPACK (RFC 7541): primitives, the dynamic table, the decoder and
 * the response encoder of hpack.h. The tables come from hpack_gen.py. */
#include "xhttp/http2/hpack.h"

#include <stdlib.h>
#include <string.h>

#include "xbase/mem/byte_ring.h"
#include "xhttp/core/tokens.h"
#include "xhttp/http2/hpack_tables.h"

#define ENTRY_OVERHEAD 32 /* RFC 7541 §4.1 */
#define STATIC_COUNT 61

/* ---- primitives ---- */

bool xHpackReadInt(const uint8_t **p, const uint8_t *end, int prefix_bits, uint32_t *value) {
    const uint8_t *q = *p;
    if (q >= end) return false;
    uint32_t max = (1u << prefix_bits) - 1;
    uint64_t v = *q++ & max;
    if (v == max) {
        for (int shift = 0;; shift += 7) {
            /* Five continuation bytes carry 35 bits: more cannot fit 32. */
            if (q >= end || shift > 28) return false;
            uint8_t b = *q++;
            v += (uint64_t)(b & 0x7f) << shift;
            if (v > UINT32_MAX) return false;
            if (!(b & 0x80)) break;
        }
    }
    *p = q;
    *value = (uint32_t)v;
    return true;
}

uint8_t *xHpackWriteInt(uint8_t *p, uint8_t high_bits, int prefix_bits, uint64_t v) {
    uint64_t max = (UINT64_C(1) << prefix_bits) - 1;
    if (v < max) {
        *p++ = (uint8_t)(high_bits | v);
        return p;
    }
    *p++ = (uint8_t)(high_bits | max);
    v -= max;
    while (v >= 0x80) {
        *p++ = (uint8_t)(0x80 | (v & 0x7f));
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

bool xHpackHuffmanDecode(const uint8_t *in, size_t n, char *out, size_t cap, size_t *len) {
    unsigned state = 0;
    bool accept = true;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        for (int half = 4; half >= 0; half -= 4) {
            const xHpackHuffStep *s = &xHpackHuffDecode[state][(in[i] >> half) & 0xf];
            if (s->flags & XHPACK_HUFF_FAIL) return false;
            if (s->flags & XHPACK_HUFF_EMIT) {
                if (k < cap) out[k] = (char)s->sym;
                k++;
            }
            state = s->next;
            accept = s->flags & XHPACK_HUFF_ACCEPT;
        }
    }
    *len = k;
    return accept;
}

size_t xHpackHuffmanLength(xStr s) {
    uint64_t bits = 0;
    for (size_t i = 0; i < s.len; i++) bits += xHpackHuffLen[(unsigned char)s.data[i]];
    return (size_t)((bits + 7) / 8);
}

uint8_t *xHpackHuffmanEncode(uint8_t *p, xStr s) {
    uint64_t acc = 0; /* pending bits in the low nbits, at most 31 + 30; those above are spent */
    unsigned nbits = 0;
    for (size_t i = 0; i < s.len; i++) {
        unsigned char c = (unsigned char)s.data[i];
        acc = (acc << xHpackHuffLen[c]) | xHpackHuffCode[c];
        nbits += xHpackHuffLen[c];
        /* Four bytes at a time: one test per code, not a loop per byte (a response's
         * date, server and content-type are Huffman-coded on every request). */
        if (nbits >= 32) {
            nbits -= 32;
            uint32_t word = (uint32_t)(acc >> nbits);
            p[0] = (uint8_t)(word >> 24);
            p[1] = (uint8_t)(word >> 16);
            p[2] = (uint8_t)(word >> 8);
            p[3] = (uint8_t)word;
            p += 4;
        }
    }
    while (nbits >= 8) {
        nbits -= 8;
        *p++ = (uint8_t)(acc >> nbits);
    }
    if (nbits) *p++ = (uint8_t)((acc << (8 - nbits)) | (0xffu >> nbits)); /* EOS's prefix pads */
    return p;
}

/* ---- the values' syntax (xHpackSyntaxVerdict) ---- */

static bool is_alpha(unsigned char c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; }
static bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

static bool all_tchars(xStr s) {
    for (size_t i = 0; i < s.len; i++)
        if (!xHttpIsTokenChar((unsigned char)s.data[i])) return false;
    return s.len > 0;
}

/* RFC 3986 §3.1. */
static bool valid_scheme(xStr s) {
    if (!s.len || !is_alpha((unsigned char)s.data[0])) return false;
    for (size_t i = 1; i < s.len; i++) {
        unsigned char c = (unsigned char)s.data[i];
        if (!is_alpha(c) && !is_digit(c) && c != '+' && c != '-' && c != '.') return false;
    }
    return true;
}

static bool target_byte(unsigned char c) { return c > 0x20 && c != 0x7f; }

/* Visible ASCII and obs-text: no controls, no spaces (RFC 9112 §3.2). Eight
 * bytes at a time: a byte below 0x21 leaves its top bit set in x - 0x21..21
 * where it was clear in x (obs-text's are set in x, so never counted), and
 * DEL is a zero byte of x ^ 0x7f..7f, so below 0x01 there. */
static bool valid_target(xStr s) {
    const uint64_t ones = 0x0101010101010101u, tops = 0x8080808080808080u;
    size_t i = 0;
    for (; i + 8 <= s.len; i += 8) {
        uint64_t x, del;
        memcpy(&x, s.data + i, 8);
        del = x ^ (0x7f * ones);
        if (((x - 0x21 * ones) & ~x & tops) || ((del - ones) & ~del & tops)) return false;
    }
    for (; i < s.len; i++)
        if (!target_byte((unsigned char)s.data[i])) return false;
    return true;
}

/* RFC 3986 §3.2's bytes. */
static bool valid_authority(xStr s) {
    for (size_t i = 0; i < s.len; i++)
        if (!xHttpIsAuthorityChar((unsigned char)s.data[i])) return false;
    return true;
}

uint8_t xHpackSyntaxVerdict(unsigned token, xStr value) {
    bool ok;
    switch (token) {
    case XHPACK_TOKEN_METHOD: ok = all_tchars(value); break;
    case XHPACK_TOKEN_SCHEME: ok = valid_scheme(value); break;
    case XHPACK_TOKEN_PATH: ok = valid_target(value); break;
    case XHPACK_TOKEN_AUTHORITY:
    case XHPACK_TOKEN_HOST: ok = valid_authority(value); break;
    default: ok = true; break;
    }
    return ok ? 0 : XHPACK_BAD_SYNTAX;
}

/* ---- the dynamic table ---- */

/* first + n wrapped into the ring of slots (n <= slots): a compare, not a
 * division, on every indexed field. */
static size_t slot_after(const xHpackTable *t, size_t n) {
    size_t at = t->first + n;
    return at >= t->slots ? at - t->slots : at;
}

static xHpackEntry *entry_at(const xHpackTable *t, size_t i) { /* i = 1 is the newest */
    return &t->entries[slot_after(t, t->count - i)];
}

static void evict_oldest(xHpackTable *t) {
    xHpackEntry *e = &t->entries[t->first];
    t->size -= e->name_len + e->value_len + ENTRY_OVERHEAD;
    t->first = (uint32_t)slot_after(t, 1);
    t->count--;
    t->version++;
}

static void table_resize(xHpackTable *t, size_t max) {
    t->max = max;
    t->version++;
    while (t->size > t->max) evict_oldest(t);
}

/* RFC 7541 §4.4: evict until the entry fits; one larger than the table empties it.
 * name and value never point into the ring. */
static void table_insert(xHpackDecoder *d, xStr name, xStr value, uint16_t token, uint8_t flags) {
    xHpackTable *t = &d->table;
    size_t size = name.len + value.len + ENTRY_OVERHEAD;
    while (t->count && t->size + size > t->max) evict_oldest(t);
    if (size > t->max) return;
    xHpackEntry *e = &t->entries[slot_after(t, t->count)];
    *e = (xHpackEntry){t->head, (uint32_t)name.len, (uint32_t)value.len, token, flags};
    t->head = (uint32_t)xByteRingWrite(t->bytes, d->capacity, t->head, name.data, name.len);
    t->head = (uint32_t)xByteRingWrite(t->bytes, d->capacity, t->head, value.data, value.len);
    t->count++;
    t->size += size;
    t->version++;
}

int xHpackDecoderInit(xHpackDecoder *d, size_t limit) {
    memset(d, 0, sizeof *d);
    size_t slots = limit / ENTRY_OVERHEAD + 1;
    d->table.bytes = malloc(limit + 1);
    d->spill = malloc(limit + 1);
    d->table.entries = malloc(slots * sizeof *d->table.entries);
    if (!d->table.bytes || !d->spill || !d->table.entries) {
        xHpackDecoderFree(d);
        return -1;
    }
    d->table.slots = (uint32_t)slots;
    d->capacity = limit + 1; /* the ring never needs to tell full from empty by offsets */
    d->limit = d->lowest = limit;
    /* The encoder starts from HTTP/2's initial size (RFC 9113 §6.5.2) and uses more only
     * after a size update, however much more our limit allows. */
    d->table.max = limit < XHPACK_INITIAL_TABLE_SIZE ? limit : XHPACK_INITIAL_TABLE_SIZE;
    return 0;
}

void xHpackDecoderFree(xHpackDecoder *d) {
    free(d->block_memo);
    free(d->table.bytes);
    free(d->table.entries);
    free(d->spill);
    memset(d, 0, sizeof *d);
}

void xHpackDecoderSetLimit(xHpackDecoder *d, size_t limit) {
    if (limit > d->capacity - 1) limit = d->capacity - 1;
    if (limit < d->limit) {
        d->update_due = true;
        if (limit < d->lowest) d->lowest = limit;
    }
    d->limit = limit;
}

bool xHpackDecoderEntry(const xHpackDecoder *d, size_t index, char *buf, size_t cap, xStr *name,
                        xStr *value) {
    if (index <= STATIC_COUNT || index - STATIC_COUNT > d->table.count) return false;
    const xHpackEntry *e = entry_at(&d->table, index - STATIC_COUNT);
    if ((size_t)e->name_len + e->value_len > cap) return false;
    xByteRingRead(d->table.bytes, d->capacity, e->at, buf, (size_t)e->name_len + e->value_len);
    *name = (xStr){buf, e->name_len};
    *value = (xStr){buf + e->name_len, e->value_len};
    return true;
}

/* ---- the decoder ---- */

/* Where decoded strings go while one block is decoded. */
typedef struct Sink {
    xHpackBlock *b;
    size_t used;     /* bytes of scratch used */
    size_t spilled;  /* bytes of the decoder's spill used by the entry being read */
    bool full;       /* the list is too large: fields are counted, not kept */
    bool ring_views; /* a field kept points into the table's ring (see copy_entry) */
} Sink;

/* A string of the block being read; data is NULL when its bytes were not kept. */
typedef xStr Str;

/* Room for a string: what is left of scratch, or (once the list is too large, for a
 * string the table needs) of spill. */
static char *room(xHpackDecoder *d, Sink *k, bool for_table, size_t *left) {
    if (!k->full) {
        *left = k->b->scratch_size - k->used;
        return k->b->scratch + k->used;
    }
    *left = for_table ? d->capacity - k->spilled : 0;
    return d->spill + k->spilled;
}

/* Takes n bytes of the room just asked for, or marks the list too large. */
static bool take(xHpackDecoder *d, Sink *k, size_t n, size_t left) {
    if (n > left) {
        k->full = true;
        return false;
    }
    if (!k->full)
        k->used += n;
    else
        k->spilled += n;
    return true;
}

/* Room for n bytes: scratch, else spill when the table needs them, else NULL. */
static char *place(xHpackDecoder *d, Sink *k, size_t n, bool for_table) {
    for (;;) {
        size_t left;
        bool was_full = k->full;
        char *dst = room(d, k, for_table, &left);
        if (take(d, k, n, left)) return dst;
        if (was_full) return NULL;
    }
}

bool xHpackHuffmanDecodeMemo(xHpackHuffmanMemo *m, const uint8_t *in, size_t n, char *out, size_t cap,
                             size_t *len) {
    if (n == m->coded_len && memcmp(in, m->coded, n) == 0) {
        size_t fits = m->plain_len < cap ? m->plain_len : cap;
        if (fits) memcpy(out, m->plain, fits); /* out may be NULL once nothing fits */
        *len = m->plain_len;
        m->current = true;
        return true;
    }
    m->current = false;
    if (!xHpackHuffmanDecode(in, n, out, cap, len)) return false;
    if (n <= XHPACK_MEMO_CODED && *len <= cap && *len <= XHPACK_MEMO_PLAIN) {
        m->coded_len = (uint8_t)n;
        m->plain_len = (uint8_t)*len;
        memcpy(m->coded, in, n);
        memcpy(m->plain, out, *len);
        m->current = true;
        m->verdict_token = 0;
    }
    return true;
}

/* xHpackHuffmanDecode, through the decoder's memo for a value. Names are not:
 * a literal name between two values would push the value out, and a name
 * sent again is most often indexed. */
static bool huffman_decode(xHpackDecoder *d, const uint8_t *in, size_t n, char *out, size_t cap, size_t *len,
                           bool value) {
    if (!value) return xHpackHuffmanDecode(in, n, out, cap, len);
    return xHpackHuffmanDecodeMemo(&d->memo, in, n, out, cap, len);
}

static bool read_string(xHpackDecoder *d, Sink *k, const uint8_t **p, const uint8_t *end, bool for_table,
                        bool value, Str *out) {
    if (*p >= end) return false;
    bool huffman = **p & 0x80;
    uint32_t n;
    if (!xHpackReadInt(p, end, 7, &n) || n > (size_t)(end - *p)) return false;
    const uint8_t *s = *p;
    *p += n;
    if (!huffman) {
        *out = (Str){(const char *)s, n};
        return true;
    }
    size_t left, len;
    bool was_full = k->full;
    char *dst = room(d, k, for_table, &left);
    if (!huffman_decode(d, s, n, dst, left, &len, value)) return false;
    if (take(d, k, len, left)) {
        *out = (Str){dst, len};
    } else if (!was_full && for_table) { /* scratch ran out just now: the table still needs it */
        dst = room(d, k, for_table, &left);
        huffman_decode(d, s, n, dst, left, &len, value);
        *out = (Str){take(d, k, len, left) ? dst : NULL, len};
    } else {
        *out = (Str){NULL, len};
    }
    return true;
}

/* A table entry's name (and value) where the block's fields can keep them: a view
 * into the ring where the entry's bytes lie in one piece there, as nothing
 * overwrites them until an entry is added (before which keep_ring_views copies
 * them out); else a copy. A name the table is to take again is always copied:
 * the ring is never written from itself. */
static void copy_entry(xHpackDecoder *d, Sink *k, const xHpackEntry *e, bool with_value, bool for_table,
                       Str *name, Str *value) {
    size_t n = e->name_len + (with_value ? e->value_len : 0);
    if (!for_table && e->at + n <= d->capacity) {
        const char *at = d->table.bytes + e->at;
        *name = (Str){at, e->name_len};
        if (with_value) *value = (Str){at + e->name_len, e->value_len};
        k->ring_views = true;
        return;
    }
    char *dst = place(d, k, n, for_table);
    if (dst) xByteRingRead(d->table.bytes, d->capacity, e->at, dst, n);
    *name = (Str){dst, e->name_len};
    if (with_value) *value = (Str){dst ? dst + e->name_len : NULL, e->value_len};
}

static void emit(Sink *k, xStr name, xStr value, uint16_t token, uint8_t flags) {
    xHpackBlock *b = k->b;
    b->list_size += name.len + value.len + ENTRY_OVERHEAD;
    if (b->list_size > b->max_list_size || b->count == b->max_fields || !name.data || !value.data)
        k->full = true;
    if (k->full) return;
    b->fields[b->count++] = (xHpackField){name, value, token, flags};
}

/* Copies into scratch the fields kept so far that are views into the ring, which
 * an entry about to be added may overwrite. Where scratch runs out the list is too
 * large: the fields from there on are dropped, as later ones are. */
static void keep_ring_views(xHpackDecoder *d, Sink *k) {
    xHpackBlock *b = k->b;
    uintptr_t ring = (uintptr_t)d->table.bytes, ring_end = ring + d->capacity;
    k->ring_views = false;
    for (size_t i = 0; i < b->count; i++) {
        xStr *strs[2] = {&b->fields[i].name, &b->fields[i].value};
        for (int j = 0; j < 2; j++) {
            xStr *str = strs[j];
            if ((uintptr_t)str->data < ring || (uintptr_t)str->data >= ring_end) continue;
            char *dst = place(d, k, str->len, false);
            if (!dst) {
                b->count = i;
                return;
            }
            memcpy(dst, str->data, str->len);
            str->data = dst;
        }
    }
}

static bool indexed(xHpackDecoder *d, Sink *k, uint32_t index) {
    if (index == 0) return false;
    if (index <= STATIC_COUNT) {
        const xHpackStaticEntry *s = &xHpackStatic[index];
        emit(k, s->name, s->value, (uint16_t)s->token, 0);
        return true;
    }
    if (index - STATIC_COUNT > d->table.count) return false;
    const xHpackEntry *e = entry_at(&d->table, index - STATIC_COUNT);
    Str name, value;
    copy_entry(d, k, e, true, false, &name, &value);
    emit(k, name, value, e->token, e->flags); /* the verdict came with the entry */
    return true;
}

/* xHpackFieldValueVerdict, through the memo when value is its plain (the same bytes as
 * before): a verdict depends on the bytes and the name's token alone. */
static uint8_t memo_verdict(xHpackHuffmanMemo *m, bool huffman, unsigned token, xStr value) {
    if (!huffman || !m->current) return xHpackFieldValueVerdict(token, value);
    if (m->verdict_token == token + 1) return m->verdict;
    m->verdict = xHpackFieldValueVerdict(token, value);
    m->verdict_token = (uint16_t)(token + 1);
    return m->verdict;
}

/* Literal representations (RFC 7541 §6.2): prefix bits 6 (incremental indexing) or 4. */
static bool literal(xHpackDecoder *d, Sink *k, const uint8_t **p, const uint8_t *end) {
    uint8_t first = **p;
    bool index_it = (first & 0xc0) == 0x40;
    uint8_t flags = (first & 0xf0) == 0x10 ? XHPACK_NEVER_INDEXED : 0;
    uint32_t index;
    if (!xHpackReadInt(p, end, index_it ? 6 : 4, &index)) return false;
    Str name, value;
    uint16_t token;
    uint8_t verdict;
    k->spilled = 0;
    if (index == 0) {
        if (!read_string(d, k, p, end, index_it, false, &name)) return false;
        token = name.data ? (uint16_t)xHpackTokenOf(name.data, name.len) : XHPACK_TOKEN_NONE;
        verdict = name.data ? xHpackNameVerdict(name) : XHPACK_BAD_NAME;
    } else if (index <= STATIC_COUNT) {
        name = xHpackStatic[index].name;
        token = (uint16_t)xHpackStatic[index].token;
        verdict = 0;
    } else if (index - STATIC_COUNT <= d->table.count) {
        const xHpackEntry *e = entry_at(&d->table, index - STATIC_COUNT);
        copy_entry(d, k, e, false, index_it, &name, NULL);
        token = e->token;
        verdict = e->flags & XHPACK_BAD_NAME;
    } else {
        return false;
    }
    bool huffman_value = *p < end && (**p & 0x80);
    if (!read_string(d, k, p, end, index_it, true, &value)) return false;
    verdict |= value.data ? memo_verdict(&d->memo, huffman_value, token, value) : XHPACK_BAD_VALUE;
    emit(k, name, value, token, verdict | flags);
    if (index_it) {
        if (k->ring_views) keep_ring_views(d, k); /* before the ring is written */
        if (name.data && value.data) {
            table_insert(d, name, value, token, verdict);
        } else { /* too big to hold, so bigger than the table: it empties it (§4.4) */
            xHpackTable *t = &d->table;
            while (t->count) evict_oldest(t);
        }
    }
    return true;
}

static bool size_update(xHpackDecoder *d, const uint8_t **p, const uint8_t *end) {
    uint32_t size;
    if (!xHpackReadInt(p, end, 5, &size) || size > d->limit) return false;
    if (d->update_due && size > d->lowest) return false; /* §4.2: the smallest change first */
    d->update_due = false;
    d->lowest = d->limit;
    table_resize(&d->table, size);
    return true;
}

/* ---- the block memo (hpack.h) ---- */

/* Where a remembered string lies. */
enum {
    XHPACK_LIES_FIXED,   /* in the static table or the ring: its view is kept as it is */
    XHPACK_LIES_BLOCK,   /* in the block's bytes (a literal not Huffman-coded): an offset */
    XHPACK_LIES_SCRATCH, /* in the decoded strings: an offset */
};

static bool within(xStr s, const void *base, size_t n) {
    uintptr_t at = (uintptr_t)s.data, from = (uintptr_t)base;
    return at >= from && at - from <= n && s.len <= n - (at - from);
}

/* s's place, and its data made an offset where it lies in the block or scratch. */
static uint8_t lies(xStr *s, const uint8_t *in, size_t len, const char *scratch, size_t used) {
    if (within(*s, in, len)) {
        s->data = (const char *)(uintptr_t)(s->data - (const char *)in);
        return XHPACK_LIES_BLOCK;
    }
    if (within(*s, scratch, used)) {
        s->data = (const char *)(uintptr_t)(s->data - scratch);
        return XHPACK_LIES_SCRATCH;
    }
    return XHPACK_LIES_FIXED;
}

static const char *placed(const char *offset, uint8_t where, const uint8_t *in, const char *scratch) {
    switch (where) {
    case XHPACK_LIES_BLOCK: return (const char *)in + (uintptr_t)offset;
    case XHPACK_LIES_SCRATCH: return scratch + (uintptr_t)offset;
    default: return offset;
    }
}

/* Remembers a block that decoded whole (XHPACK_OK) and left the table as it was. */
static void block_memo_keep(xHpackDecoder *d, const uint8_t *in, size_t len, xHpackBlock *b, size_t used) {
    if (!len || len > XHPACK_BLOCK_MEMO_BYTES || b->count > XHPACK_BLOCK_MEMO_FIELDS ||
        used > XHPACK_BLOCK_MEMO_SCRATCH)
        return;
    xHpackBlockMemo *m = d->block_memo;
    if (!m) {
        if (!(m = d->block_memo = malloc(sizeof *m))) return;
        m->generation = 0;
    }
    m->generation++;
    m->len = len;
    m->table_version = d->table.version;
    m->count = b->count;
    m->list_size = b->list_size;
    m->used = used;
    memcpy(m->bytes, in, len);
    memcpy(m->scratch, b->scratch, used);
    memcpy(m->fields, b->fields, b->count * sizeof *b->fields);
    m->moved_count = 0;
    for (size_t i = 0; i < 2 * b->count; i++) {
        xStr *str = i & 1 ? &m->fields[i / 2].value : &m->fields[i / 2].name;
        uint8_t where = lies(str, in, len, b->scratch, used);
        if (where == XHPACK_LIES_FIXED) continue;
        m->moved[m->moved_count] = (uint8_t)i;
        m->moved_where[m->moved_count++] = where;
    }
    b->remembered = m->generation;
}

uint64_t xHpackRemembered(const xHpackDecoder *d, const uint8_t *in, size_t len) {
    const xHpackBlockMemo *m = d->block_memo;
    if (!m || len != m->len || m->table_version != d->table.version || d->update_due ||
        memcmp(in, m->bytes, len) != 0)
        return 0;
    return m->generation;
}

/* The remembered fields, when in is the remembered block and the table is as it was
 * then: they are what decoding it would give. */
static bool block_memo_hit(const xHpackDecoder *d, const uint8_t *in, size_t len, xHpackBlock *b) {
    const xHpackBlockMemo *m = d->block_memo;
    if (!m || m->count > b->max_fields || m->list_size > b->max_list_size || m->used > b->scratch_size ||
        !xHpackRemembered(d, in, len))
        return false;
    memcpy(b->scratch, m->scratch, m->used);
    memcpy(b->fields, m->fields, m->count * sizeof *b->fields);
    for (size_t k = 0; k < m->moved_count; k++) {
        size_t i = m->moved[k];
        xStr *str = i & 1 ? &b->fields[i / 2].value : &b->fields[i / 2].name;
        str->data = placed(str->data, m->moved_where[k], in, b->scratch);
    }
    b->count = m->count;
    b->list_size = m->list_size;
    b->remembered = m->generation;
    return true;
}

/* ---- decoding a block ---- */

int xHpackDecode(xHpackDecoder *d, const uint8_t *in, size_t len, xHpackBlock *b) {
    b->remembered = 0;
    if (block_memo_hit(d, in, len, b)) return XHPACK_OK;
    const uint8_t *p = in, *end = in + len;
    Sink k = {b, 0, 0, false, false};
    uint32_t version = d->table.version;
    b->count = 0;
    b->list_size = 0;
    bool at_start = true;
    while (p < end) {
        uint8_t c = *p;
        if ((c & 0xe0) == 0x20) { /* §6.3: only before the first field */
            if (!at_start || !size_update(d, &p, end)) return XHPACK_ERROR;
            continue;
        }
        if (d->update_due) return XHPACK_ERROR;
        at_start = false;
        if (c & 0x80) {
            uint32_t index;
            if (!xHpackReadInt(&p, end, 7, &index) || !indexed(d, &k, index)) return XHPACK_ERROR;
        } else if (!literal(d, &k, &p, end)) {
            return XHPACK_ERROR;
        }
    }
    if (d->update_due) return XHPACK_ERROR;
    if (k.full) return XHPACK_TOO_LARGE;
    if (d->table.version == version) block_memo_keep(d, in, len, b, k.used);
    return XHPACK_OK;
}

/* ---- the encoder ---- */

/* The encoder's table: entries oldest first, evicted from the front (RFC 7541 §4.4)
 * by moving the rest down; at most a few thousand bytes, and only when an entry
 * is added to a full table. */
static void enc_evict_oldest(xHpackEncoderTable *t) {
    size_t n = (size_t)t->entries[0].name_len + t->entries[0].value_len;
    t->size -= (uint32_t)(n + ENTRY_OVERHEAD);
    t->used -= (uint32_t)n;
    t->count--;
    memmove(t->bytes, t->bytes + n, t->used);
    memmove(t->entries, t->entries + 1, t->count * sizeof t->entries[0]);
    t->version++;
}

static void enc_resize(xHpackEncoderTable *t, size_t max) {
    t->max = (uint32_t)max;
    while (t->size > t->max) enc_evict_oldest(t);
    t->version++; /* indices stay, but a memo must not outlive a size update it left out */
}

/* Adds name: value as the peer's decoder does for a literal with incremental
 * indexing; the caller checked it fits the table. */
static void enc_insert(xHpackEncoderTable *t, xStr name, xStr value) {
    size_t size = name.len + value.len + ENTRY_OVERHEAD;
    while (t->count && t->size + size > t->max) enc_evict_oldest(t);
    memcpy(t->bytes + t->used, name.data, name.len);
    memcpy(t->bytes + t->used + name.len, value.data, value.len);
    t->entries[t->count].name_len = (uint16_t)name.len;
    t->entries[t->count].value_len = (uint16_t)value.len;
    t->used += (uint32_t)(name.len + value.len);
    t->size += (uint32_t)size;
    t->count++;
    t->version++;
}

/* The HPACK index of the entry name: value (62 is the newest), or 0. */
static unsigned enc_find(const xHpackEncoderTable *t, xStr name, xStr value) {
    const char *at = t->bytes + t->used;
    for (uint32_t i = t->count; i-- > 0;) { /* newest first: the likeliest */
        size_t n = t->entries[i].name_len, v = t->entries[i].value_len;
        at -= n + v;
        if (n == name.len && v == value.len && memcmp(at, name.data, n) == 0 &&
            memcmp(at + n, value.data, v) == 0)
            return STATIC_COUNT + (t->count - i);
    }
    return 0;
}

void xHpackEncoderInit(xHpackEncoder *e) {
    e->peer_limit = e->lowest = XHPACK_INITIAL_TABLE_SIZE;
    e->update_due = false;
    e->table.count = e->table.used = e->table.size = e->table.version = 0;
    e->table.max = XHPACK_INITIAL_TABLE_SIZE < XHPACK_ENCODER_TABLE_MAX ? XHPACK_INITIAL_TABLE_SIZE
                                                                        : XHPACK_ENCODER_TABLE_MAX;
    e->lines.lines_len = e->lines.coded_len = 0;
    e->last_length = UINT64_MAX;
    e->length_index = 0;
}

void xHpackEncoderSetPeerTableSize(xHpackEncoder *e, size_t size) {
    if (size == e->peer_limit) return;
    e->update_due = true;
    if (size < e->lowest) e->lowest = size;
    e->peer_limit = size;
}

uint8_t *xHpackEncodeBegin(xHpackEncoder *e, uint8_t *p) {
    if (!e->update_due) return p;
    e->update_due = false;
    size_t target = e->peer_limit < XHPACK_ENCODER_TABLE_MAX ? e->peer_limit : XHPACK_ENCODER_TABLE_MAX;
    /* §4.2: a limit that went lower between blocks is signalled at its lowest first,
     * and the peer's decoder evicts down to it. */
    if (e->lowest < target) {
        p = xHpackWriteInt(p, 0x20, 5, e->lowest);
        enc_resize(&e->table, e->lowest);
    }
    p = xHpackWriteInt(p, 0x20, 5, target);
    enc_resize(&e->table, target);
    e->lowest = e->peer_limit;
    return p;
}

static uint8_t *put_string(uint8_t *p, xStr s) {
    size_t h = xHpackHuffmanLength(s);
    if (h < s.len) return xHpackHuffmanEncode(xHpackWriteInt(p, 0x80, 7, (uint32_t)h), s);
    p = xHpackWriteInt(p, 0, 7, (uint32_t)s.len);
    memcpy(p, s.data, s.len);
    return p + s.len;
}

uint8_t *xHpackEncodeStatus(uint8_t *p, int status) {
    switch (status) {
    case 200: *p++ = 0x80 | 8; return p;
    case 204: *p++ = 0x80 | 9; return p;
    case 206: *p++ = 0x80 | 10; return p;
    case 304: *p++ = 0x80 | 11; return p;
    case 400: *p++ = 0x80 | 12; return p;
    case 404: *p++ = 0x80 | 13; return p;
    case 500: *p++ = 0x80 | 14; return p;
    default: break;
    }
    /* Literal without indexing, name :status (index 8), three raw digits. */
    unsigned s = status < 100 || status > 999 ? 500u : (unsigned)status;
    *p++ = 0x08;
    *p++ = 3;
    *p++ = (uint8_t)('0' + s / 100);
    *p++ = (uint8_t)('0' + s / 10 % 10);
    *p++ = (uint8_t)('0' + s % 10);
    return p;
}

uint8_t *xHpackEncodeToken(uint8_t *p, xHpackToken token, xStr value) {
    unsigned index = token > XHPACK_TOKEN_NONE && token < XHPACK_TOKEN_COUNT ? xHpackTokenIndex[token] : 0;
    if (!index) {
        p = xHpackWriteInt(p, 0x00, 4, 0);
        p = put_string(p, xHpackTokenNames[token < XHPACK_TOKEN_COUNT ? token : 0]);
    } else {
        p = xHpackWriteInt(p, 0x00, 4, index); /* literal without indexing, indexed name */
    }
    return put_string(p, value);
}

uint8_t *xHpackEncodeField(uint8_t *p, xStr name, xStr value) {
    xHpackToken token = xHpackTokenOf(name.data, name.len);
    if (token != XHPACK_TOKEN_NONE) return xHpackEncodeToken(p, token, value);
    *p++ = 0x00;
    return put_string(put_string(p, name), value);
}

/* Whether a response field is worth a table entry: one that repeats across
 * responses. Credentials and cookies never are (RFC 7541 §7.1), nor values that
 * differ from response to response (content-length goes out raw), which would
 * only push the repeated ones out. */
static bool worth_indexing(xHpackToken token, xStr name, xStr value) {
    switch (token) {
    case XHPACK_TOKEN_AUTHORIZATION:
    case XHPACK_TOKEN_PROXY_AUTHORIZATION:
    case XHPACK_TOKEN_COOKIE:
    case XHPACK_TOKEN_SET_COOKIE:
    case XHPACK_TOKEN_CONTENT_LENGTH:
    case XHPACK_TOKEN_CONTENT_RANGE:
    case XHPACK_TOKEN_ETAG:
    case XHPACK_TOKEN_LAST_MODIFIED:
    case XHPACK_TOKEN_LOCATION:
    case XHPACK_TOKEN_AGE: return false;
    default: break;
    }
    /* A long value is likelier unique; an entry of a quarter of the table would
     * evict the rest within four responses. */
    return name.len + value.len + ENTRY_OVERHEAD <= XHPACK_INITIAL_TABLE_SIZE / 4;
}

uint8_t *xHpackEncodeIndexed(xHpackEncoder *e, uint8_t *p, xHpackToken token, xStr name, xStr value) {
    xHpackEncoderTable *t = &e->table;
    unsigned index = enc_find(t, name, value);
    if (index) return xHpackWriteInt(p, 0x80, 7, index);
    if (!worth_indexing(token, name, value) || name.len + value.len + ENTRY_OVERHEAD > t->max)
        return token != XHPACK_TOKEN_NONE ? xHpackEncodeToken(p, token, value)
                                          : xHpackEncodeField(p, name, value);
    unsigned name_index = token != XHPACK_TOKEN_NONE ? xHpackTokenIndex[token] : 0;
    p = xHpackWriteInt(p, 0x40, 6, name_index); /* literal with incremental indexing */
    if (!name_index) p = put_string(p, name);
    p = put_string(p, value);
    enc_insert(t, name, value);
    return p;
}

/* Writes one field of header lines: QPACK's writer, or HPACK's through a table. */
typedef struct LineWriter {
    xHpackFieldWriter plain;
    xHpackEncoder *indexed;
} LineWriter;

static uint8_t *encode_lines(xHpackLinesMemo *memo, uint8_t *p, char *lines, size_t len, LineWriter w) {
    /* The memo holds the lines as they were given, before their names were
     * folded: the same lines again are found without a pass over them. */
    uint32_t version = w.indexed ? w.indexed->table.version : 0;
    if (len && len == memo->lines_len && version == memo->table_version &&
        memcmp(lines, memo->lines, len) == 0) {
        memcpy(p, memo->coded, memo->coded_len);
        return p + memo->coded_len;
    }
    bool memo_fits = len <= XHPACK_MEMO_LINES;
    char given[XHPACK_MEMO_LINES];
    if (memo_fits) memcpy(given, lines, len);
    uint8_t *start = p;
    char *end = lines + len;
    for (char *at = lines; at < end;) {
        char *colon = memchr(at, ':', (size_t)(end - at));
        char *eol = memchr(colon, '\r', (size_t)(end - colon));
        for (char *c = at; c < colon; c++) *c = (char)(*c >= 'A' && *c <= 'Z' ? *c + 32 : *c);
        xStr name = {at, (size_t)(colon - at)}, value = {colon + 2, (size_t)(eol - colon - 2)};
        p = w.indexed ? xHpackEncodeIndexed(w.indexed, p, xHpackTokenOf(name.data, name.len), name, value)
                      : w.plain(p, name, value);
        at = eol + 2;
    }
    /* An encoding that added entries is not kept: the same lines go out by index next. */
    bool table_same = !w.indexed || w.indexed->table.version == version;
    if (table_same && memo_fits && (size_t)(p - start) <= XHPACK_MEMO_LINES_CODED) {
        memo->lines_len = (uint8_t)len;
        memo->coded_len = (uint8_t)(p - start);
        memo->table_version = version;
        memcpy(memo->lines, given, len);
        memcpy(memo->coded, start, memo->coded_len);
    }
    return p;
}

uint8_t *xHpackEncodeLinesWith(xHpackLinesMemo *memo, uint8_t *p, char *lines, size_t len,
                               xHpackFieldWriter write) {
    return encode_lines(memo, p, lines, len, (LineWriter){.plain = write});
}

uint8_t *xHpackEncodeLines(xHpackEncoder *e, uint8_t *p, char *lines, size_t len) {
    return encode_lines(&e->lines, p, lines, len, (LineWriter){.indexed = e});
}

/* The digits raw, written in place: Huffman codes a digit in 5 or 6 bits, so it
 * would save a byte in four at most, and its two passes cost more than that byte
 * on every response. */
uint8_t *xHpackEncodeContentLength(uint8_t *p, uint64_t n) {
    p = xHpackWriteInt(p, 0x00, 4, xHpackTokenIndex[XHPACK_TOKEN_CONTENT_LENGTH]);
    uint8_t *digits = p + 1; /* after the length, one byte: at most 20 digits */
    uint8_t *end = (uint8_t *)xHttpPutDecimal((char *)digits, n);
    *p = (uint8_t)(end - digits);
    return end;
}

uint8_t *xHpackEncodeContentLengthIndexed(xHpackEncoder *e, uint8_t *p, uint64_t n) {
    xHpackEncoderTable *t = &e->table;
    if (xHpackLengthIndexed(e, n)) return xHpackWriteInt(p, 0x80, 7, e->length_index);
    if (n != e->last_length) {
        e->last_length = n;
        return xHpackEncodeContentLength(p, n);
    }
    char digits[XHTTP_DECIMAL_MAX];
    xStr name = xHpackTokenNames[XHPACK_TOKEN_CONTENT_LENGTH];
    xStr value = {digits, (size_t)(xHttpPutDecimal(digits, n) - digits)};
    unsigned index = enc_find(t, name, value);
    if (!index) {
        if (name.len + value.len + ENTRY_OVERHEAD > t->max) return xHpackEncodeContentLength(p, n);
        p = xHpackWriteInt(p, 0x40, 6, xHpackTokenIndex[XHPACK_TOKEN_CONTENT_LENGTH]);
        *p++ = (uint8_t)value.len; /* the digits raw, as xHpackEncodeContentLength's */
        memcpy(p, digits, value.len);
        p += value.len;
        enc_insert(t, name, value);
        index = STATIC_COUNT + 1;
    } else {
        p = xHpackWriteInt(p, 0x80, 7, index);
    }
    e->length_index = index;
    e->length_value = n;
    e->length_version = t->version;
    return p;
}
