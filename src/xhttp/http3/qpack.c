/* qpack.c — QPACK (RFC 9204): integers, the dynamic table the encoder stream
 * fills, the field-section decoder with blocked streams, the decoder stream's
 * instructions, and the encoder of qpack.h: static-table fields, and a dynamic table
 * it refers to only once the peer has acknowledged an entry. */
#include "xhttp/http3/qpack.h"

#include "xbase/mem/byte_ring.h"
#include "xhttp/core/tokens.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MAX_INT62 ((UINT64_C(1) << 62) - 1)

uint64_t xQpackErrorCode(xQpackResult r) {
    switch (r) {
    case XQPACK_DECOMPRESSION_FAILED: return 0x200;
    case XQPACK_ENCODER_STREAM_ERROR: return 0x201;
    case XQPACK_DECODER_STREAM_ERROR: return 0x202;
    default: return 0;
    }
}

/* ---- primitives ---- */

/* What reading a piece of an instruction found: the encoder stream tells a piece that
 * has not all arrived (SHORT) from one that is wrong. */
typedef enum Read { READ_OK, READ_SHORT, READ_BAD } Read;

static Read read_int(const uint8_t **p, const uint8_t *end, int prefix_bits, uint64_t *value) {
    const uint8_t *q = *p;
    if (q >= end) return READ_SHORT;
    uint64_t max = (UINT64_C(1) << prefix_bits) - 1;
    uint64_t v = *q++ & max;
    if (v == max) {
        for (int shift = 0;; shift += 7) {
            if (q >= end) return READ_SHORT;
            if (shift > 56) return READ_BAD; /* nine continuation bytes carry 63 bits */
            uint8_t b = *q++;
            v += (uint64_t)(b & 0x7f) << shift;
            if (v > MAX_INT62) return READ_BAD;
            if (!(b & 0x80)) break;
        }
    }
    *p = q;
    *value = v;
    return READ_OK;
}

bool xQpackReadInt(const uint8_t **p, const uint8_t *end, int prefix_bits, uint64_t *value) {
    return read_int(p, end, prefix_bits, value) == READ_OK;
}

/* ---- the dynamic table ---- */

static size_t ring_size(const xQpackDecoder *d) { return d->max_capacity + 1; }

static bool has_entry(const xQpackDecoder *d, uint64_t abs) {
    return abs < d->inserts && abs >= d->inserts - d->count;
}

static const xQpackEntry *entry_of(const xQpackDecoder *d, uint64_t abs) {
    uint64_t from_oldest = abs - (d->inserts - d->count);
    return &d->entries[(d->first + from_oldest) % d->slots];
}

static void evict_oldest(xQpackDecoder *d) {
    const xQpackEntry *e = &d->entries[d->first];
    d->size -= e->name_len + e->value_len + XQPACK_ENTRY_OVERHEAD;
    d->first = (d->first + 1) % d->slots;
    d->count--;
}

/* RFC 9204 §3.2.2: evicts until the entry fits; an entry over the capacity is an error.
 * name and value never point into the ring (a name taken from an entry this insert
 * evicts was copied to spill first). */
static xQpackResult table_insert(xQpackDecoder *d, xStr name, xStr value, uint16_t token, uint8_t flags) {
    size_t size = name.len + value.len + XQPACK_ENTRY_OVERHEAD;
    if (size > d->capacity) return XQPACK_ENCODER_STREAM_ERROR;
    while (d->size + size > d->capacity) evict_oldest(d);
    xQpackEntry *e = &d->entries[(d->first + d->count) % d->slots];
    *e = (xQpackEntry){d->head, (uint32_t)name.len, (uint32_t)value.len, token, flags};
    d->head = (uint32_t)xByteRingWrite(d->ring, ring_size(d), d->head, name.data, name.len);
    d->head = (uint32_t)xByteRingWrite(d->ring, ring_size(d), d->head, value.data, value.len);
    d->count++;
    d->size += size;
    d->inserts++;
    return XQPACK_OK;
}

int xQpackDecoderInit(xQpackDecoder *d, size_t max_capacity, size_t max_blocked) {
    memset(d, 0, sizeof *d);
    size_t slots = max_capacity / XQPACK_ENTRY_OVERHEAD + 1;
    d->ring = malloc(max_capacity + 1);
    d->spill = malloc(max_capacity + 1);
    d->entries = malloc(slots * sizeof *d->entries);
    d->blocked = malloc((max_blocked ? max_blocked : 1) * sizeof *d->blocked);
    if (!d->ring || !d->spill || !d->entries || !d->blocked) {
        xQpackDecoderFree(d);
        return -1;
    }
    d->slots = (uint32_t)slots;
    d->max_capacity = max_capacity;
    d->max_blocked = max_blocked;
    return 0;
}

void xQpackDecoderFree(xQpackDecoder *d) {
    free(d->ring);
    free(d->spill);
    free(d->entries);
    free(d->blocked);
    free(d->out);
    memset(d, 0, sizeof *d);
}

bool xQpackDecoderEntry(const xQpackDecoder *d, uint64_t abs, char *buf, size_t cap, xStr *name,
                        xStr *value) {
    if (!has_entry(d, abs)) return false;
    const xQpackEntry *e = entry_of(d, abs);
    if ((size_t)e->name_len + e->value_len > cap) return false;
    xByteRingRead(d->ring, ring_size(d), e->at, buf, (size_t)e->name_len + e->value_len);
    *name = (xStr){buf, e->name_len};
    *value = (xStr){buf + e->name_len, e->value_len};
    return true;
}

/* ---- the encoder stream (RFC 9204 §4.3) ---- */

/* Reads a string literal whose length has a prefix_bits prefix and whose Huffman flag is
 * huffman_bit of the first byte, into spill at *used when Huffman-coded. A length that
 * could never fit the table is bad before its bytes arrive: a Huffman code is at most 30
 * bits a symbol, so n bytes decode to at least (8n - 7) / 30, more than n / 4 from 14 on
 * (and n / 4 cannot overflow, as 8n can). */
static Read read_insert_string(xQpackDecoder *d, const uint8_t **p, const uint8_t *end, uint8_t huffman_bit,
                               int prefix_bits, size_t *used, xStr *out) {
    if (*p >= end) return READ_SHORT;
    bool huffman = **p & huffman_bit;
    uint64_t n;
    Read r = read_int(p, end, prefix_bits, &n);
    if (r != READ_OK) return r;
    if ((huffman ? n / 4 : n) > d->max_capacity) return READ_BAD;
    if (n > (size_t)(end - *p)) return READ_SHORT;
    const uint8_t *s = *p;
    *p += n;
    if (!huffman) {
        *out = (xStr){(const char *)s, (size_t)n};
        return READ_OK;
    }
    size_t len;
    size_t left = d->max_capacity - *used;
    if (!xHpackHuffmanDecode(s, (size_t)n, d->spill + *used, left, &len) || len > left) return READ_BAD;
    *out = (xStr){d->spill + *used, len};
    *used += len;
    return READ_OK;
}

/* Copies entry abs's name (and value) into spill, so an insert that evicts it keeps them. */
static void spill_entry(xQpackDecoder *d, uint64_t abs, bool with_value, size_t *used, xStr *name,
                        xStr *value, uint16_t *token, uint8_t *flags) {
    const xQpackEntry *e = entry_of(d, abs);
    size_t n = e->name_len + (with_value ? e->value_len : 0);
    xByteRingRead(d->ring, ring_size(d), e->at, d->spill + *used, n);
    *name = (xStr){d->spill + *used, e->name_len};
    if (with_value) *value = (xStr){d->spill + *used + e->name_len, e->value_len};
    *used += n;
    *token = e->token;
    *flags = e->flags;
}

/* A relative index on the encoder stream: 0 is the newest entry. */
static bool relative_entry(const xQpackDecoder *d, uint64_t index, uint64_t *abs) {
    if (index >= d->inserts) return false;
    *abs = d->inserts - 1 - index;
    return has_entry(d, *abs);
}

/* Reads and applies one instruction. */
static Read encoder_instruction(xQpackDecoder *d, const uint8_t **p, const uint8_t *end) {
    uint8_t first = **p;
    uint64_t index;
    Read r;
    size_t used = 0;
    xStr name, value;
    uint16_t token;
    uint8_t flags;
    if (first & 0x80) { /* Insert With Name Reference: 1 T index(6), value */
        if ((r = read_int(p, end, 6, &index)) != READ_OK) return r;
        if (first & 0x40) {
            if (index >= XQPACK_STATIC_COUNT) return READ_BAD;
            name = xQpackStatic[index].name;
            token = (uint16_t)xQpackStatic[index].token;
            flags = 0;
        } else {
            uint64_t abs;
            if (!relative_entry(d, index, &abs)) return READ_BAD;
            spill_entry(d, abs, false, &used, &name, NULL, &token, &flags);
            flags &= XHPACK_BAD_NAME;
        }
        if ((r = read_insert_string(d, p, end, 0x80, 7, &used, &value)) != READ_OK) return r;
    } else if (first & 0x40) { /* Insert With Literal Name: 01 H len(5), name, value */
        if ((r = read_insert_string(d, p, end, 0x20, 5, &used, &name)) != READ_OK) return r;
        if ((r = read_insert_string(d, p, end, 0x80, 7, &used, &value)) != READ_OK) return r;
        token = (uint16_t)xHpackTokenOf(name.data, name.len);
        flags = xHpackNameVerdict(name);
    } else if (first & 0x20) { /* Set Dynamic Table Capacity: 001 capacity(5) */
        if ((r = read_int(p, end, 5, &index)) != READ_OK) return r;
        if (index > d->max_capacity) return READ_BAD;
        d->capacity = (size_t)index;
        while (d->size > d->capacity) evict_oldest(d);
        return READ_OK;
    } else { /* Duplicate: 000 index(5) */
        uint64_t abs;
        if ((r = read_int(p, end, 5, &index)) != READ_OK) return r;
        if (!relative_entry(d, index, &abs)) return READ_BAD;
        spill_entry(d, abs, true, &used, &name, &value, &token, &flags);
        return table_insert(d, name, value, token, flags) == XQPACK_OK ? READ_OK : READ_BAD;
    }
    flags |= xHpackFieldValueVerdict(token, value); /* judged once, for every section that refers to it */
    return table_insert(d, name, value, token, flags) == XQPACK_OK ? READ_OK : READ_BAD;
}

xQpackResult xQpackDecoderReadEncoder(xQpackDecoder *d, const uint8_t *in, size_t len, size_t *consumed) {
    const uint8_t *p = in, *end = in + len;
    *consumed = 0;
    /* The same section bytes may mean other fields now, unless they refer to no entry. */
    if (len && d->repeat.required) d->repeat.len = 0;
    while (p < end) {
        const uint8_t *q = p;
        Read r = encoder_instruction(d, &q, end);
        if (r == READ_BAD) return XQPACK_ENCODER_STREAM_ERROR;
        if (r == READ_SHORT) break; /* nothing of it applied: every change comes last */
        p = q;
        *consumed = (size_t)(p - in);
    }
    return XQPACK_OK;
}

/* ---- the decoder stream (RFC 9204 §4.4) ---- */

static bool queue_instruction(xQpackDecoder *d, uint8_t high_bits, int prefix_bits, uint64_t v) {
    if (d->out_cap - d->out_len < 10) {
        size_t cap = d->out_cap ? d->out_cap * 2 : 64;
        uint8_t *out = realloc(d->out, cap);
        if (!out) return false;
        d->out = out;
        d->out_cap = cap;
    }
    d->out_len = (size_t)(xHpackWriteInt(d->out + d->out_len, high_bits, prefix_bits, v) - d->out);
    return true;
}

xStr xQpackDecoderTakeOutput(xQpackDecoder *d) {
    if (d->inserts > d->known_received && queue_instruction(d, 0x00, 6, d->inserts - d->known_received))
        d->known_received = d->inserts; /* Insert Count Increment */
    xStr out = {(const char *)d->out, d->out_len};
    d->out_len = 0;
    return out;
}

/* Takes stream_id out of the blocked set; true, with the count it read, when it was there. */
static bool unblock(xQpackDecoder *d, uint64_t stream_id, uint64_t *required) {
    for (size_t i = 0; i < d->blocked_count; i++) {
        if (d->blocked[i].stream_id == stream_id) {
            *required = d->blocked[i].required;
            d->blocked[i] = d->blocked[--d->blocked_count];
            return true;
        }
    }
    return false;
}

xQpackResult xQpackDecoderCancelStream(xQpackDecoder *d, uint64_t stream_id) {
    uint64_t required;
    unblock(d, stream_id, &required);
    /* §4.4.2: a decoder whose table can hold nothing may leave cancellations out. */
    if (d->max_capacity && !queue_instruction(d, 0x40, 6, stream_id)) return XQPACK_DECOMPRESSION_FAILED;
    return XQPACK_OK;
}

/* ---- field sections (RFC 9204 §4.5) ---- */

/* Where one section's strings and fields go. */
typedef struct Sink {
    xQpackSection *s;
    size_t used; /* bytes of scratch used */
    bool full;   /* over a limit: the rest is checked and counted, not kept */
} Sink;

/* Room for n bytes of scratch, or NULL (and the section is too large). */
static char *place(Sink *k, size_t n) {
    if (k->full || n > k->s->scratch_size - k->used) {
        k->full = true;
        return NULL;
    }
    char *at = k->s->scratch + k->used;
    k->used += n;
    return at;
}

/* A field line's string: a view into the section, or Huffman-decoded into scratch;
 * data is NULL when it was not kept. */
/* A string literal; a Huffman-coded one through memo when given (a value:
 * clients send the same :path and the like unindexed again and again). */
static bool read_string(Sink *k, const uint8_t **p, const uint8_t *end, uint8_t huffman_bit, int prefix_bits,
                        xHpackHuffmanMemo *memo, xStr *out) {
    if (*p >= end) return false;
    bool huffman = **p & huffman_bit;
    uint64_t n;
    if (read_int(p, end, prefix_bits, &n) != READ_OK || n > (uint64_t)(end - *p)) return false;
    const uint8_t *s = *p;
    *p += n;
    if (!huffman) {
        *out = (xStr){(const char *)s, (size_t)n};
        return true;
    }
    size_t left = k->full ? 0 : k->s->scratch_size - k->used, len;
    char *dst = k->full ? NULL : k->s->scratch + k->used;
    if (!(memo ? xHpackHuffmanDecodeMemo(memo, s, (size_t)n, dst, left, &len)
               : xHpackHuffmanDecode(s, (size_t)n, dst, left, &len)))
        return false;
    if (k->full || len > left) {
        k->full = true;
        *out = (xStr){NULL, len};
    } else {
        k->used += len;
        *out = (xStr){dst, len};
    }
    return true;
}

static void emit(Sink *k, xStr name, xStr value, uint16_t token, uint8_t flags) {
    xQpackSection *s = k->s;
    s->size += name.len + value.len + XQPACK_ENTRY_OVERHEAD;
    if (s->size > s->max_size || s->count == s->max_fields || !name.data || !value.data) k->full = true;
    if (k->full) return;
    s->fields[s->count++] = (xHpackField){name, value, token, flags};
}

/* The section's view of the dynamic table: entries below Required Insert Count only. */
typedef struct Prefix {
    uint64_t required, base;
} Prefix;

static bool dynamic_entry(const xQpackDecoder *d, const Prefix *x, uint64_t abs) {
    return abs < x->required && has_entry(d, abs);
}

/* Copies entry abs's name (and value) into scratch. */
static void copy_entry(const xQpackDecoder *d, Sink *k, const xQpackEntry *e, bool with_value, xStr *name,
                       xStr *value) {
    size_t n = e->name_len + (with_value ? e->value_len : 0);
    char *dst = place(k, n);
    if (dst) xByteRingRead(d->ring, ring_size(d), e->at, dst, n);
    *name = (xStr){dst, e->name_len};
    if (with_value) *value = (xStr){dst ? dst + e->name_len : NULL, e->value_len};
}

/* Indexed Field Line (1 T index(6)) and With Post-Base Index (0001 index(4)). */
static bool indexed(const xQpackDecoder *d, const Prefix *x, Sink *k, const uint8_t **p, const uint8_t *end) {
    uint8_t first = **p;
    bool post_base = !(first & 0x80);
    uint64_t index, abs;
    if (read_int(p, end, post_base ? 4 : 6, &index) != READ_OK) return false;
    if (!post_base && (first & 0x40)) {
        if (index >= XQPACK_STATIC_COUNT) return false;
        const xQpackStaticEntry *s = &xQpackStatic[index];
        emit(k, s->name, s->value, (uint16_t)s->token, 0);
        return true;
    }
    if (post_base) {
        abs = x->base + index;
    } else {
        if (index >= x->base) return false;
        abs = x->base - 1 - index;
    }
    if (!dynamic_entry(d, x, abs)) return false;
    const xQpackEntry *e = entry_of(d, abs);
    xStr name, value;
    copy_entry(d, k, e, true, &name, &value);
    emit(k, name, value, e->token, e->flags); /* the verdict came with the entry */
    return true;
}

/* Literal With Name Reference (01 N T index(4)), With Post-Base Name Reference
 * (0000 N index(3)) and With Literal Name (001 N H len(3)). */
static bool literal(xQpackDecoder *d, const Prefix *x, Sink *k, const uint8_t **p, const uint8_t *end) {
    uint8_t first = **p;
    xStr name, value;
    uint16_t token;
    uint8_t verdict;
    uint8_t never = 0;
    if (first & 0x40) { /* name reference */
        never = first & 0x20 ? XHPACK_NEVER_INDEXED : 0;
        uint64_t index;
        if (read_int(p, end, 4, &index) != READ_OK) return false;
        if (first & 0x10) {
            if (index >= XQPACK_STATIC_COUNT) return false;
            name = xQpackStatic[index].name;
            token = (uint16_t)xQpackStatic[index].token;
            verdict = 0;
        } else {
            if (index >= x->base || !dynamic_entry(d, x, x->base - 1 - index)) return false;
            const xQpackEntry *e = entry_of(d, x->base - 1 - index);
            copy_entry(d, k, e, false, &name, NULL);
            token = e->token;
            verdict = e->flags & XHPACK_BAD_NAME;
        }
    } else if (first & 0x20) { /* literal name */
        never = first & 0x10 ? XHPACK_NEVER_INDEXED : 0;
        if (!read_string(k, p, end, 0x08, 3, NULL, &name)) return false;
        token = name.data ? (uint16_t)xHpackTokenOf(name.data, name.len) : XHPACK_TOKEN_NONE;
        verdict = name.data ? xHpackNameVerdict(name) : XHPACK_BAD_NAME;
    } else { /* post-base name reference */
        never = first & 0x08 ? XHPACK_NEVER_INDEXED : 0;
        uint64_t index;
        if (read_int(p, end, 3, &index) != READ_OK || !dynamic_entry(d, x, x->base + index)) return false;
        const xQpackEntry *e = entry_of(d, x->base + index);
        copy_entry(d, k, e, false, &name, NULL);
        token = e->token;
        verdict = e->flags & XHPACK_BAD_NAME;
    }
    if (!read_string(k, p, end, 0x80, 7, &d->memo, &value)) return false;
    verdict |= value.data ? xHpackFieldValueVerdict(token, value) : XHPACK_BAD_VALUE;
    emit(k, name, value, token, verdict | never);
    return true;
}

/* §4.5.1.1: Required Insert Count from its encoding and the inserts so far. */
static bool required_insert_count(const xQpackDecoder *d, uint64_t encoded, uint64_t *required) {
    uint64_t max_entries = d->max_capacity / XQPACK_ENTRY_OVERHEAD, full_range = 2 * max_entries;
    if (encoded == 0) {
        *required = 0;
        return true;
    }
    if (encoded > full_range) return false;
    uint64_t max_value = d->inserts + max_entries;
    uint64_t r = max_value / full_range * full_range + encoded - 1;
    if (r > max_value) {
        if (r <= full_range) return false;
        r -= full_range;
    }
    *required = r;
    return r != 0;
}

/* §4.5.1: Required Insert Count (kept as it was read when the section blocked: known),
 * then Base. */
static bool read_prefix(const xQpackDecoder *d, const uint8_t **p, const uint8_t *end, bool known,
                        Prefix *x) {
    uint64_t encoded, delta;
    if (read_int(p, end, 8, &encoded) != READ_OK) return false;
    if (!known && !required_insert_count(d, encoded, &x->required)) return false;
    if (*p >= end) return false;
    bool negative = **p & 0x80;
    if (read_int(p, end, 7, &delta) != READ_OK) return false;
    if (negative) {
        if (x->required <= delta) return false;
        x->base = x->required - delta - 1;
    } else {
        x->base = x->required + delta;
    }
    return true;
}

/* Keeps a section decoded whole for its repeats, if it is small enough. */
static void remember(xQpackDecoder *d, const uint8_t *in, size_t len, xQpackSection *s) {
    xQpackRepeat *r = &d->repeat;
    /* The kept bytes again (decoded, not copied: they were over the caller's limits for
     * a copy, or a stream was blocked) are the same fields: the same number. */
    bool same = len == r->len && memcmp(in, r->bytes, len) == 0;
    r->len = 0;
    if (len > XQPACK_REPEAT_BYTES || s->count > XQPACK_REPEAT_FIELDS) return;
    size_t at = 0;
    for (size_t i = 0; i < s->count; i++) {
        const xHpackField *f = &s->fields[i];
        if (f->name.len + f->value.len > XQPACK_REPEAT_STRINGS - at) return;
        r->fields[i].name_at = (uint16_t)at, r->fields[i].name_len = (uint16_t)f->name.len;
        memcpy(r->strings + at, f->name.data, f->name.len);
        at += f->name.len;
        r->fields[i].value_at = (uint16_t)at, r->fields[i].value_len = (uint16_t)f->value.len;
        if (f->value.len) memcpy(r->strings + at, f->value.data, f->value.len);
        at += f->value.len;
        r->fields[i].token = f->token, r->fields[i].flags = f->flags;
    }
    memcpy(r->bytes, in, len);
    r->len = (uint16_t)len;
    r->strings_len = (uint16_t)at;
    r->count = (uint16_t)s->count;
    r->size = s->size;
    r->required = s->required_insert_count;
    if (!same) r->number++;
    s->remembered = r->number;
}

/* Queues a Section Acknowledgment (1 stream(7)) for a section that referred to the
 * dynamic table. */
static bool acknowledge(xQpackDecoder *d, uint64_t stream_id, uint64_t required) {
    if (!required) return true;
    if (!queue_instruction(d, 0x80, 7, stream_id)) return false;
    if (required > d->known_received) d->known_received = required;
    return true;
}

/* The kept section's fields again, their strings copied into scratch as a decoding
 * would have; false when they would not meet s's limits (decoded then, to say so). */
static bool decode_again(const xQpackDecoder *d, xQpackSection *s) {
    const xQpackRepeat *r = &d->repeat;
    if (r->count > s->max_fields || r->size > s->max_size || r->strings_len > s->scratch_size) return false;
    memcpy(s->scratch, r->strings, r->strings_len);
    for (size_t i = 0; i < r->count; i++)
        s->fields[i] = (xHpackField){{s->scratch + r->fields[i].name_at, r->fields[i].name_len},
                                     {s->scratch + r->fields[i].value_at, r->fields[i].value_len},
                                     r->fields[i].token,
                                     r->fields[i].flags};
    s->count = r->count;
    s->size = r->size;
    s->required_insert_count = r->required;
    s->remembered = r->number;
    return true;
}

/* The kept section, if in is it again. (While a stream is blocked, every section is
 * decoded: it may be that stream's, to be taken out of the set.) */
static bool is_repeat(const xQpackDecoder *d, const uint8_t *in, size_t len) {
    return len && len == d->repeat.len && !d->blocked_count && memcmp(in, d->repeat.bytes, len) == 0;
}

bool xQpackDecodeAgain(xQpackDecoder *d, uint64_t number, uint64_t stream_id, const uint8_t *in, size_t len) {
    return number == d->repeat.number && is_repeat(d, in, len) &&
           acknowledge(d, stream_id, d->repeat.required);
}

xQpackResult xQpackDecodeSection(xQpackDecoder *d, uint64_t stream_id, const uint8_t *in, size_t len,
                                 xQpackSection *s) {
    const uint8_t *p = in, *end = in + len;
    Prefix x;
    /* The same bytes as the last small section, the table unchanged since: the same
     * fields. */
    s->remembered = 0;
    if (is_repeat(d, in, len) && decode_again(d, s))
        return acknowledge(d, stream_id, s->required_insert_count) ? XQPACK_OK : XQPACK_DECOMPRESSION_FAILED;
    s->count = 0;
    s->size = 0;
    s->required_insert_count = 0;
    bool known = unblock(d, stream_id, &x.required); /* counted again below if it still waits */
    if (!read_prefix(d, &p, end, known, &x)) return XQPACK_DECOMPRESSION_FAILED;
    s->required_insert_count = x.required;
    if (x.required > d->inserts) { /* §2.1.2 */
        if (d->blocked_count == d->max_blocked) return XQPACK_DECOMPRESSION_FAILED;
        d->blocked[d->blocked_count++] = (xQpackBlocked){stream_id, x.required};
        return XQPACK_BLOCKED;
    }
    Sink k = {s, 0, false};
    while (p < end) {
        bool ok =
            (*p & 0x80) || (*p & 0xf0) == 0x10 ? indexed(d, &x, &k, &p, end) : literal(d, &x, &k, &p, end);
        if (!ok) return XQPACK_DECOMPRESSION_FAILED;
    }
    if (!acknowledge(d, stream_id, x.required)) return XQPACK_DECOMPRESSION_FAILED;
    if (k.full) return XQPACK_TOO_LARGE;
    remember(d, in, len, s);
    return XQPACK_OK;
}

/* ---- the encoder ---- */

uint8_t *xQpackEncodeBegin(uint8_t *p) {
    *p++ = 0x00; /* Required Insert Count 0 */
    *p++ = 0x00; /* Base 0 */
    return p;
}

/* A string with a prefix_bits length, Huffman-coded (huffman_bit set) where shorter. */
static uint8_t *put_string(uint8_t *p, uint8_t high_bits, uint8_t huffman_bit, int prefix_bits, xStr s) {
    size_t h = xHpackHuffmanLength(s);
    if (h < s.len) return xHpackHuffmanEncode(xHpackWriteInt(p, high_bits | huffman_bit, prefix_bits, h), s);
    p = xHpackWriteInt(p, high_bits, prefix_bits, s.len);
    memcpy(p, s.data, s.len);
    return p + s.len;
}

/* Indexed Field Line, static (11 index(6)): one byte below 63, as every
 * response's :status 200 is, without the general integer writer. */
static uint8_t *put_indexed_static(uint8_t *p, unsigned index) {
    if (index < 63) {
        *p = (uint8_t)(0xc0 | index);
        return p + 1;
    }
    return xHpackWriteInt(p, 0xc0, 6, index);
}

/* Literal With Name Reference to a static entry, N = 0: 0101 index(4), value. */
static uint8_t *put_static_name(uint8_t *p, unsigned index, xStr value) {
    return put_string(xHpackWriteInt(p, 0x50, 4, index), 0x00, 0x80, 7, value);
}

#define STATIC_STATUS 24 /* :status 103, the first of that name */

uint8_t *xQpackEncodeStatus(uint8_t *p, int status) {
    switch (status) {
    case 103: return put_indexed_static(p, 24);
    case 200: return put_indexed_static(p, 25);
    case 304: return put_indexed_static(p, 26);
    case 404: return put_indexed_static(p, 27);
    case 503: return put_indexed_static(p, 28);
    case 100: return put_indexed_static(p, 63);
    case 204: return put_indexed_static(p, 64);
    case 206: return put_indexed_static(p, 65);
    case 302: return put_indexed_static(p, 66);
    case 400: return put_indexed_static(p, 67);
    case 403: return put_indexed_static(p, 68);
    case 421: return put_indexed_static(p, 69);
    case 425: return put_indexed_static(p, 70);
    case 500: return put_indexed_static(p, 71);
    default: break;
    }
    unsigned s = status < 100 || status > 999 ? 500u : (unsigned)status;
    char digits[3] = {(char)('0' + s / 100), (char)('0' + s / 10 % 10), (char)('0' + s % 10)};
    return put_static_name(p, STATIC_STATUS, (xStr){digits, 3});
}

static bool same(xStr a, xStr b) { return a.len == b.len && memcmp(a.data, b.data, a.len) == 0; }

/* The static entries of each token, in table order (XHPACK_TOKEN_NONE's: those whose name
 * has none, 27 of them), made once: a field's lookup visits its name's entries, not the
 * whole table, whose 99 entries cost about 600 instructions a field (a third of an h3
 * GET's response head). */
#define XQPACK_ENTRIES_PER_TOKEN 32

static struct {
    uint8_t count;
    uint8_t index[XQPACK_ENTRIES_PER_TOKEN];
} static_by_token[XHPACK_TOKEN_COUNT];
static pthread_once_t static_by_token_made = PTHREAD_ONCE_INIT;

static void make_static_by_token(void) {
    for (unsigned i = 0; i < XQPACK_STATIC_COUNT; i++) {
        xHpackToken token = xQpackStatic[i].token;
        if (static_by_token[token].count < XQPACK_ENTRIES_PER_TOKEN)
            static_by_token[token].index[static_by_token[token].count++] = (uint8_t)i;
    }
}

/* Its name's static entries, in table order, give the exact match or the first entry of
 * the name. */
uint8_t *xQpackEncodeField(uint8_t *p, xStr name, xStr value) {
    pthread_once(&static_by_token_made, make_static_by_token);
    xHpackToken token = xHpackTokenOf(name.data, name.len);
    int name_index = -1;
    for (unsigned k = 0; k < static_by_token[token].count; k++) {
        unsigned i = static_by_token[token].index[k];
        const xQpackStaticEntry *e = &xQpackStatic[i];
        if (token == XHPACK_TOKEN_NONE && !same(e->name, name)) continue;
        if (same(e->value, value)) return put_indexed_static(p, i);
        if (name_index < 0) name_index = (int)i;
    }
    if (name_index >= 0) return put_static_name(p, (unsigned)name_index, value);
    p = put_string(p, 0x20, 0x08, 3, name); /* Literal With Literal Name, N = 0 */
    return put_string(p, 0x00, 0x80, 7, value);
}

#define STATIC_CONTENT_LENGTH 4 /* content-length: 0, the only entry of that name */

uint8_t *xQpackEncodeContentLength(uint8_t *p, uint64_t length) {
    if (!length) return put_indexed_static(p, STATIC_CONTENT_LENGTH);
    char digits[XHTTP_DECIMAL_MAX];
    size_t n = (size_t)(xHttpPutDecimal(digits, length) - digits);
    return put_static_name(p, STATIC_CONTENT_LENGTH, (xStr){digits, n});
}

/* ---- the encoder's dynamic table ---- */

void xQpackEncoderInit(xQpackEncoder *e) { *e = (xQpackEncoder){0}; }

void xQpackEncoderFree(xQpackEncoder *e) {
    for (uint32_t i = 0; i < e->count; i++) free(e->entries[(e->first + i) % e->slots].bytes);
    free(e->entries);
    free(e->sections);
    free(e->out);
    *e = (xQpackEncoder){0};
}

/* Makes room for one more instruction of up to extra bytes on the encoder stream. */
static bool out_room(xQpackEncoder *e, size_t extra) {
    if (e->out_cap - e->out_len >= extra) return true;
    size_t cap = e->out_cap ? e->out_cap : 64;
    while (cap - e->out_len < extra) cap *= 2;
    uint8_t *out = realloc(e->out, cap);
    if (!out) return false;
    e->out = out;
    e->out_cap = cap;
    return true;
}

void xQpackEncoderSetPeerCapacity(xQpackEncoder *e, uint64_t peer_max, size_t limit) {
    size_t capacity = peer_max < limit ? (size_t)peer_max : limit;
    if (!capacity || e->capacity) return;
    uint32_t slots = (uint32_t)(capacity / XQPACK_ENTRY_OVERHEAD + 1);
    e->entries = calloc(slots, sizeof *e->entries);
    if (!e->entries || !out_room(e, 10)) {
        free(e->entries);
        e->entries = NULL;
        return;
    }
    e->slots = slots;
    e->peer_max_capacity = (size_t)peer_max;
    e->capacity = capacity;
    e->out_len = (size_t)(xHpackWriteInt(e->out + e->out_len, 0x20, 5, capacity) - e->out); /* §4.3.1 */
    e->version++;
}

static const xQpackEncoderEntry *encoder_entry(const xQpackEncoder *e, uint64_t abs) {
    return &e->entries[(e->first + (abs - (e->inserts - e->count))) % e->slots];
}

/* The newest entry name: value the peer has acknowledged, or -1; *newest: the newest
 * of any, or -1. */
static int64_t encoder_find(const xQpackEncoder *e, xStr name, xStr value, int64_t *newest) {
    *newest = -1;
    for (uint64_t abs = e->inserts; abs-- > e->inserts - e->count;) {
        const xQpackEncoderEntry *x = encoder_entry(e, abs);
        if (x->name_len == name.len && x->value_len == value.len &&
            memcmp(x->bytes, name.data, name.len) == 0 &&
            memcmp(x->bytes + name.len, value.data, value.len) == 0) {
            if (*newest < 0) *newest = (int64_t)abs;
            if (abs < e->known_received) return (int64_t)abs;
        }
    }
    return -1;
}

/* Whether size more bytes fit after evicting what may go: entries the peer has, that no
 * unacknowledged section refers to, nor the section being written (from pinned up).
 * *evict: how many of the oldest to evict; *stuck: the oldest that could not go. */
static bool room_for(const xQpackEncoder *e, size_t size, uint64_t pinned, uint32_t *evict, uint64_t *stuck) {
    size_t freed = 0;
    *evict = 0;
    *stuck = UINT64_MAX;
    if (size > e->capacity) return false;
    while (e->size - freed + size > e->capacity) {
        uint64_t oldest = e->inserts - e->count + *evict;
        *stuck = oldest;
        if (*evict == e->count || oldest >= e->known_received || oldest >= pinned) return false;
        for (size_t i = e->section_first; i < e->section_first + e->section_count; i++)
            if (e->sections[i].lowest <= oldest) return false;
        const xQpackEncoderEntry *x = encoder_entry(e, oldest);
        freed += x->name_len + x->value_len + XQPACK_ENTRY_OVERHEAD;
        (*evict)++;
    }
    return true;
}

/* Evicts the evict oldest and appends name: value, with room for its instruction (of at
 * most instruction bytes) on the encoder stream; false when out of memory. */
static bool append_entry(xQpackEncoder *e, xStr name, xStr value, uint32_t evict, size_t instruction) {
    char *bytes = malloc(name.len + value.len + 1);
    if (!bytes || !out_room(e, instruction)) {
        free(bytes);
        return false;
    }
    while (evict--) {
        xQpackEncoderEntry *x = &e->entries[e->first];
        e->size -= x->name_len + x->value_len + XQPACK_ENTRY_OVERHEAD;
        free(x->bytes);
        e->first = (e->first + 1) % e->slots;
        e->count--;
    }
    memcpy(bytes, name.data, name.len);
    memcpy(bytes + name.len, value.data, value.len);
    e->entries[(e->first + e->count) % e->slots] =
        (xQpackEncoderEntry){bytes, (uint32_t)name.len, (uint32_t)value.len};
    e->count++;
    e->size += name.len + value.len + XQPACK_ENTRY_OVERHEAD;
    e->inserts++;
    e->version++;
    return true;
}

/* Inserts name: value (§4.3.2, §4.3.3), With Name Reference to a static entry
 * (1 T=1 index(6)) where its name has one, else With Literal Name (01 H len(5)). */
static void insert(xQpackEncoder *e, xStr name, xStr value, uint32_t evict) {
    if (!append_entry(e, name, value, evict, XQPACK_FIELD_BOUND(name.len, value.len))) return;
    pthread_once(&static_by_token_made, make_static_by_token);
    xHpackToken token = xHpackTokenOf(name.data, name.len);
    int name_index = -1;
    for (unsigned k = 0; k < static_by_token[token].count && name_index < 0; k++) {
        unsigned i = static_by_token[token].index[k];
        if (token != XHPACK_TOKEN_NONE || same(xQpackStatic[i].name, name)) name_index = (int)i;
    }
    uint8_t *p = e->out + e->out_len;
    if (name_index >= 0)
        p = xHpackWriteInt(p, 0xc0, 6, (uint64_t)name_index);
    else
        p = put_string(p, 0x40, 0x20, 5, name);
    p = put_string(p, 0x00, 0x80, 7, value);
    e->out_len = (size_t)(p - e->out);
}

/* Duplicates entry abs at the new end of the table (§4.3.4: 000 index(5), relative to
 * the inserts so far), so that the old copy can be evicted once no section needs it. */
static void duplicate(xQpackEncoder *e, uint64_t abs, uint32_t evict) {
    const xQpackEncoderEntry *x = encoder_entry(e, abs);
    uint64_t relative = e->inserts - 1 - abs;
    /* The copy is taken before evicting: abs is newer than all that is evicted. */
    xStr name = {x->bytes, x->name_len}, value = {x->bytes + x->name_len, x->value_len};
    char *keep = malloc(name.len + value.len + 1);
    if (!keep) return;
    memcpy(keep, x->bytes, name.len + value.len);
    name.data = keep, value.data = keep + name.len;
    if (append_entry(e, name, value, evict, 10))
        e->out_len = (size_t)(xHpackWriteInt(e->out + e->out_len, 0x00, 5, relative) - e->out);
    free(keep);
}

/* Room for one more outstanding section: the acknowledged ones' room at the
 * front taken back, or more. False when out of memory. */
static bool room_for_section(xQpackEncoder *e) {
    if (e->section_first) {
        memmove(e->sections, e->sections + e->section_first, e->section_count * sizeof *e->sections);
        e->section_first = 0;
        return true;
    }
    size_t cap = e->section_cap ? e->section_cap * 2 : 16;
    xQpackOutstanding *sections = realloc(e->sections, cap * sizeof *sections);
    if (!sections) return false;
    e->sections = sections;
    e->section_cap = cap;
    return true;
}

bool xQpackEncoderNoteSection(xQpackEncoder *e, uint64_t stream_id, uint64_t required, uint64_t lowest) {
    if (!required) return true;
    if (e->section_first + e->section_count == e->section_cap && !room_for_section(e)) return false;
    e->sections[e->section_first + e->section_count++] = (xQpackOutstanding){stream_id, required, lowest};
    return true;
}

uint8_t *xQpackEncodeFieldsWith(xQpackEncoder *e, uint64_t stream_id, uint8_t *p, const xStr *names,
                                const xStr *values, size_t n, uint64_t *required, uint64_t *lowest) {
    int64_t refs[XQPACK_WITH_MAX];
    bool missing[XQPACK_WITH_MAX];
    uint64_t req = 0, low = UINT64_MAX;
    size_t m = n < XQPACK_WITH_MAX ? n : XQPACK_WITH_MAX; /* the fields past these: static */
    for (size_t i = 0; i < m; i++) {
        int64_t newest = -1;
        refs[i] = e->capacity ? encoder_find(e, names[i], values[i], &newest) : -1;
        missing[i] = e->capacity && newest < 0;
        if (refs[i] < 0) continue;
        if ((uint64_t)refs[i] + 1 > req) req = (uint64_t)refs[i] + 1;
        if ((uint64_t)refs[i] < low) low = (uint64_t)refs[i];
    }
    /* Then the inserts for the sections to come, keeping what this one refers to. The
     * table is first-in first-out, so an entry every response refers to (server)
     * becomes the oldest and would stop every insert: when an insert and a copy of such
     * an entry would not fit without evicting it, it is duplicated first (§4.3.4), the
     * sections after refer to the copy, and the old one goes once they are
     * acknowledged. An insert held up by unacknowledged sections waits (waiting). */
    for (size_t i = 0; i < m; i++) {
        if (!missing[i]) continue;
        size_t size = names[i].len + values[i].len + XQPACK_ENTRY_OVERHEAD;
        uint32_t evict;
        uint64_t stuck;
        for (size_t j = 0; j < m; j++) {
            int64_t newest;
            if (refs[j] < 0 || encoder_find(e, names[j], values[j], &newest) < 0 || newest != refs[j])
                continue;
            size_t kept = names[j].len + values[j].len + XQPACK_ENTRY_OVERHEAD;
            if (room_for(e, size + kept, (uint64_t)refs[j], &evict, &stuck) || stuck != (uint64_t)refs[j])
                continue;
            if (room_for(e, kept, low, &evict, &stuck)) duplicate(e, (uint64_t)refs[j], evict);
        }
        if (room_for(e, size, low, &evict, &stuck))
            insert(e, names[i], values[i], evict);
        else if (stuck != UINT64_MAX) /* not larger than the table: it may fit later */
            e->waiting = true;
    }
    if (req && !xQpackEncoderNoteSection(e, stream_id, req, low)) { /* out of memory: static only */
        req = 0;
        for (size_t i = 0; i < m; i++) refs[i] = -1;
    }
    *required = req;
    *lowest = req ? low : 0;
    for (size_t i = 0; i < n; i++) {
        if (i < m && refs[i] >= 0)
            p = xHpackWriteInt(p, 0x80, 6, req - 1 - (uint64_t)refs[i]); /* Indexed, T = 0, Base = req */
        else
            p = xQpackEncodeField(p, names[i], values[i]);
    }
    return p;
}

uint8_t *xQpackEncodePrefix(const xQpackEncoder *e, uint8_t *p, uint64_t required) {
    if (!required) return xQpackEncodeBegin(p);
    uint64_t max_entries = e->peer_max_capacity / XQPACK_ENTRY_OVERHEAD; /* §4.5.1.1 */
    p = xHpackWriteInt(p, 0x00, 8, required % (2 * max_entries) + 1);
    *p++ = 0x00; /* Base = Required Insert Count: Sign 0, Delta Base 0 */
    return p;
}

xQpackResult xQpackEncoderReadDecoder(xQpackEncoder *e, const uint8_t *in, size_t len, size_t *consumed) {
    const uint8_t *p = in, *end = in + len;
    *consumed = 0;
    while (p < end) {
        uint8_t first = *p;
        uint64_t v;
        Read r = read_int(&p, end, first & 0x80 ? 7 : 6, &v);
        if (r == READ_BAD) return XQPACK_DECODER_STREAM_ERROR;
        if (r == READ_SHORT) break;
        if (first & 0x80) { /* Section Acknowledgment: the stream's oldest unacknowledged section */
            size_t at = e->section_first, i = at, past = at + e->section_count;
            while (i < past && e->sections[i].stream_id != v) i++;
            if (i == past) return XQPACK_DECODER_STREAM_ERROR; /* §4.4.1 */
            if (e->sections[i].required > e->known_received) {
                e->known_received = e->sections[i].required;
                e->version++;
            }
            /* Acknowledgments come mostly in the order sent: the sections before
             * this one (none, mostly) move up, not the ones after. */
            memmove(&e->sections[at + 1], &e->sections[at], (i - at) * sizeof *e->sections);
            e->section_first = --e->section_count ? at + 1 : 0;
            if (e->waiting) e->version++, e->waiting = false; /* an insert may fit now */
        } else if (first & 0x40) {                            /* Stream Cancellation */
            size_t at = e->section_first, kept = at;
            for (size_t i = at; i < at + e->section_count; i++)
                if (e->sections[i].stream_id != v) e->sections[kept++] = e->sections[i];
            e->section_count = kept - at;
            if (!e->section_count) e->section_first = 0;
            if (e->waiting) e->version++, e->waiting = false;
        } else { /* Insert Count Increment (§4.4.3) */
            if (v == 0 || v > e->inserts - e->known_received) return XQPACK_DECODER_STREAM_ERROR;
            e->known_received += v;
            e->version++;
            e->waiting = false;
        }
        *consumed = (size_t)(p - in);
    }
    return XQPACK_OK;
}

xStr xQpackEncoderTakeOutput(xQpackEncoder *e) {
    xStr out = {(const char *)e->out, e->out_len};
    e->out_len = 0;
    return out;
}
