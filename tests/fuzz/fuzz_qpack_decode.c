/* fuzz_qpack_decode.c — libFuzzer: our QPACK decoder alone, with small limits the
 * differential harness does not use. Byte 0 picks the table's maximum capacity, the
 * blocked-stream limit and the section limits (fields, bytes, scratch); the rest is
 * a program like fuzz_qpack_diff's: encoder stream chunks (partial instructions given
 * again with more), field sections on 8 streams, cancellations, and taking the
 * decoder stream. After every step:
 *   - the encoder stream consumes at most what it was given, and the table stays
 *     within its capacity, which stays within the maximum;
 *   - a section's fields are within the limits, each view inside the section, the
 *     scratch buffer or the static table, and its size counted past what was kept;
 *     BLOCKED only above the insert count and within the blocked-stream limit;
 *   - decoding the same section again gives the same verdict and fields (a section
 *     never changes the table);
 *   - the decoder stream parses as decoder instructions: acknowledgments only of
 *     streams whose section had a count, increments never past the inserts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"
#include "xhttp/http3/qpack.h"

#define STREAMS 8

static xHpackField fields[64], again[64];
static char scratch[8192], scratch2[8192];

typedef struct State {
    xQpackDecoder d;
    uint8_t *encoder;
    size_t encoder_len;
    size_t max_fields, max_size, scratch_size;
    uint64_t acknowledged; /* the count acknowledgments and increments told the encoder */
    bool acked_due[STREAMS];
    bool dead;
} State;

static bool inside(xStr v, const void *base, size_t len) { return fuzz_view_within(v, base, len); }

static bool same(xStr a, xStr b) {
    return a.len == b.len && (a.len == 0 || memcmp(a.data, b.data, a.len) == 0);
}

static bool in_static(xStr v) {
    for (int i = 0; i < XQPACK_STATIC_COUNT; i++)
        if (inside(v, xQpackStatic[i].name.data, xQpackStatic[i].name.len) ||
            inside(v, xQpackStatic[i].value.data, xQpackStatic[i].value.len))
            return true;
    return false;
}

static void check_fields(const xQpackSection *s, const char *in, size_t len, const char *scr) {
    FUZZ_ASSERT(s->count <= s->max_fields, "%zu fields over %zu", s->count, s->max_fields);
    size_t sum = 0;
    for (size_t i = 0; i < s->count; i++) {
        const xHpackField *f = &s->fields[i];
        for (int k = 0; k < 2; k++) {
            xStr v = k ? f->value : f->name;
            FUZZ_ASSERT(inside(v, in, len) || inside(v, scr, s->scratch_size) || in_static(v),
                        "field %zu's %s points nowhere it may", i, k ? "value" : "name");
        }
        FUZZ_ASSERT((f->flags & XHPACK_BAD_NAME) == xHpackNameVerdict(f->name), "field %zu's name verdict",
                    i);
        FUZZ_ASSERT((f->flags & (XHPACK_BAD_VALUE | XHPACK_CTL_VALUE)) == xHpackValueVerdict(f->value),
                    "field %zu's value verdict", i);
        FUZZ_ASSERT(f->token == xHpackTokenOf(f->name.data, f->name.len), "field %zu's token", i);
        sum += f->name.len + f->value.len + XQPACK_ENTRY_OVERHEAD;
    }
    FUZZ_ASSERT(sum <= s->size, "kept %zu bytes, counted %zu", sum, s->size);
}

static void section(State *st, FuzzProgram *in) {
    unsigned i = fuzz_take(in) % STREAMS;
    size_t len = fuzz_take(in), left = (size_t)(in->end - in->p);
    if (len > left) len = left;
    char *bytes = fuzz_copy(in->p, len);
    in->p += len;
    xQpackSection s = {fields, st->max_fields, 0, scratch, st->scratch_size, st->max_size, 0, 0, 0};
    size_t blocked_before = st->d.blocked_count;
    bool was_blocked = false; /* then its count is the one read before, which a second read may not give */
    for (size_t k = 0; k < st->d.blocked_count; k++) was_blocked |= st->d.blocked[k].stream_id == 4 * i;
    xQpackResult r = xQpackDecodeSection(&st->d, 4 * i, (const uint8_t *)bytes, len, &s);
    FUZZ_ASSERT(r == XQPACK_OK || r == XQPACK_TOO_LARGE || r == XQPACK_BLOCKED ||
                    r == XQPACK_DECOMPRESSION_FAILED,
                "verdict %d", (int)r);
    FUZZ_ASSERT(st->d.blocked_count <= st->d.max_blocked, "blocked over the limit");
    if (r == XQPACK_BLOCKED) {
        FUZZ_ASSERT(s.required_insert_count > xQpackDecoderInsertCount(&st->d), "blocked below its count");
        FUZZ_ASSERT(s.count == 0, "fields from a blocked section");
    } else if (r == XQPACK_DECOMPRESSION_FAILED) {
        st->dead = true;
    } else {
        FUZZ_ASSERT(st->d.blocked_count <= blocked_before, "a decoded section left its stream blocked");
        check_fields(&s, bytes, len, scratch);
        if (s.required_insert_count) st->acked_due[i] = true;
        /* The same bytes again decode the same way. */
        if (was_blocked) {
            free(bytes);
            return;
        }
        xQpackSection t = {again, st->max_fields, 0, scratch2, st->scratch_size, st->max_size, 0, 0, 0};
        xQpackResult r2 = xQpackDecodeSection(&st->d, 4 * i, (const uint8_t *)bytes, len, &t);
        FUZZ_ASSERT(r2 == r && t.count == s.count && t.size == s.size, "decoded again: %d", (int)r2);
        for (size_t k = 0; k < s.count; k++)
            FUZZ_ASSERT(same(t.fields[k].name, s.fields[k].name) &&
                            same(t.fields[k].value, s.fields[k].value) &&
                            t.fields[k].flags == s.fields[k].flags,
                        "field %zu decoded again differs", k);
        /* A kept section is the same one again, and may be taken as decoded. */
        FUZZ_ASSERT(t.remembered == s.remembered, "kept as another section");
        if (s.remembered && st->d.blocked_count == 0) {
            FUZZ_ASSERT(xQpackDecodeAgain(&st->d, s.remembered, 4 * i, (const uint8_t *)bytes, len),
                        "a kept section not taken again");
            FUZZ_ASSERT(!xQpackDecodeAgain(&st->d, s.remembered + 1, 4 * i, (const uint8_t *)bytes, len),
                        "taken again under another number");
        }
    }
    free(bytes);
}

static void encoder_chunk(State *st, FuzzProgram *in) {
    size_t len = fuzz_take(in), left = (size_t)(in->end - in->p);
    if (len > left) len = left;
    uint8_t *grown = realloc(st->encoder, st->encoder_len + len + 1);
    FUZZ_ASSERT(grown != NULL, "out of memory");
    st->encoder = grown;
    memcpy(st->encoder + st->encoder_len, in->p, len);
    in->p += len;
    st->encoder_len += len;
    char *copy = fuzz_copy(st->encoder, st->encoder_len);
    size_t used = SIZE_MAX;
    xQpackResult r = xQpackDecoderReadEncoder(&st->d, (const uint8_t *)copy, st->encoder_len, &used);
    free(copy);
    FUZZ_ASSERT(used <= st->encoder_len, "consumed %zu of %zu", used, st->encoder_len);
    FUZZ_ASSERT(st->d.size <= st->d.capacity && st->d.capacity <= st->d.max_capacity,
                "table over its capacity");
    if (r != XQPACK_OK) {
        FUZZ_ASSERT(r == XQPACK_ENCODER_STREAM_ERROR, "encoder stream verdict %d", (int)r);
        st->dead = true;
        return;
    }
    memmove(st->encoder, st->encoder + used, st->encoder_len - used);
    st->encoder_len -= used;
}

/* Parses what the decoder stream says, as the peer's encoder would. */
static void decoder_stream(State *st) {
    xStr out = xQpackDecoderTakeOutput(&st->d);
    const uint8_t *p = (const uint8_t *)out.data, *end = out.len ? p + out.len : p;
    while (p < end) {
        uint8_t first = *p;
        uint64_t v;
        FUZZ_ASSERT(xQpackReadInt(&p, end, first & 0x80 ? 7 : 6, &v), "a decoder instruction cut short");
        if (first & 0x80) {
            FUZZ_ASSERT(v % 4 == 0 && v / 4 < STREAMS && st->acked_due[v / 4], "acknowledged stream %llu",
                        (unsigned long long)v);
        } else if (!(first & 0x40)) {
            FUZZ_ASSERT(v > 0, "an increment of 0");
            st->acknowledged += v;
        }
    }
    FUZZ_ASSERT(st->acknowledged <= xQpackDecoderInsertCount(&st->d), "increments past the inserts");
    memset(st->acked_due, 0, sizeof st->acked_due);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 16384) return 0;
    static const size_t capacities[] = {0, 32, 64, 96, 200, 1000, 4096, 65536};
    State st = {.max_fields = 1 + (data[0] >> 3) % 64,
                .max_size = data[0] & 0x80 ? 256 : SIZE_MAX,
                .scratch_size = data[0] & 0x40 ? 64 : sizeof scratch};
    FUZZ_ASSERT(xQpackDecoderInit(&st.d, capacities[data[0] & 7], (data[0] >> 3) & 3) == 0, "out of memory");
    FuzzProgram in = {data + 1, data + size};
    while (in.p < in.end && !st.dead) {
        switch (fuzz_take(&in) % 4) {
        case 0: encoder_chunk(&st, &in); break;
        case 1: section(&st, &in); break;
        case 2:
            FUZZ_ASSERT(xQpackDecoderCancelStream(&st.d, 4 * (fuzz_take(&in) % STREAMS)) == XQPACK_OK,
                        "cancel");
            break;
        default: decoder_stream(&st); break;
        }
    }
    free(st.encoder);
    xQpackDecoderFree(&st.d);
    return 0;
}
