/* fuzz_qpack_diff.c — libFuzzer: our QPACK decoder against nghttp3's on the same
 * bytes. Byte 0 picks our SETTINGS_QPACK_MAX_TABLE_CAPACITY (low 3 bits) and
 * SETTINGS_QPACK_BLOCKED_STREAMS (next 2); the rest is a program, one opcode byte
 * at a time:
 *   - encoder stream bytes (a length byte, then the bytes); ours takes whole
 *     instructions and the harness gives it the rest again with more, nghttp3 gets
 *     the instructions ours took (all the bytes when ours refused them);
 *   - a field section on one of 8 request streams (a stream byte, a length byte, the
 *     bytes), each with a fresh nghttp3 stream context;
 *   - a stream cancelled;
 *   - the decoder stream taken from both.
 * Both must accept or reject each encoder chunk alike and keep the same insert count;
 * decode each section to the same verdict (blocked too) and the same fields, names,
 * values and never-indexed flags, byte for byte; a blocked section, retried after
 * every encoder chunk that reaches its count, must decode alike then; and both must
 * write the same decoder stream bytes. nghttp3's decoder leaves the blocked-stream
 * limit to its connection, so the harness counts blocked streams for it: ours must
 * fail the section that would be one too many. nghttp3 also refuses names over 256
 * encoded bytes and values over 65,536, which ours accepts: such a section ends the
 * run, ours having decoded a field that long. After a connection error both stop. */
#include <nghttp3/nghttp3.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"
#include "xhttp/http3/qpack.h"

#define STREAMS 8
#define MAX_FIELDS 4096

static xHpackField fields[MAX_FIELDS];
static char scratch[1 << 20];

static size_t take_bytes(FuzzProgram *in, size_t want, const uint8_t **at) {
    size_t left = (size_t)(in->end - in->p);
    if (want > left) want = left;
    *at = in->p;
    in->p += want;
    return want;
}

/* A section nghttp3 reported blocked, kept to be read again. */
typedef struct Pending {
    bool waiting;
    nghttp3_qpack_stream_context *sctx;
    uint8_t *bytes;
    size_t len, theirs_at; /* what nghttp3 has read of it */
    uint64_t required;
} Pending;

typedef struct Pair {
    xQpackDecoder ours;
    nghttp3_qpack_decoder *theirs;
    uint8_t *encoder; /* encoder stream bytes ours has not taken yet */
    size_t encoder_len;
    Pending pending[STREAMS];
    size_t max_blocked, blocked;
    bool dead;
} Pair;

/* V_OVER_ITS_LIMIT: nghttp3 refuses a name over 256 encoded bytes or a value over 65,536
 * (NGHTTP3_ERR_QPACK_HEADER_TOO_LARGE), a limit of its own that ours does not share. */
typedef enum Verdict { V_OK, V_BLOCKED, V_FAILED, V_OVER_ITS_LIMIT } Verdict;

/* A Huffman code is at most 30 bits a symbol: n encoded bytes decode to at least 8n / 30. */
#define SHORTEST_DECODED(n) ((n)*8 / 30)

static int their_error; /* nghttp3's last refusal, for the message */

/* Reads (the rest of) a section with nghttp3, checking each field against ours when
 * ours decoded it (ok_fields); returns nghttp3's verdict and counts its fields. */
static Verdict theirs_read(Pair *x, Pending *pend, const xQpackSection *s, bool ok_fields, size_t *n) {
    const uint8_t *p = pend->bytes + pend->theirs_at, *end = pend->bytes + pend->len;
    for (;;) {
        nghttp3_qpack_nv nv;
        uint8_t flags = 0;
        nghttp3_ssize used =
            nghttp3_qpack_decoder_read_request(x->theirs, pend->sctx, &nv, &flags, p, (size_t)(end - p), 1);
        if (used == NGHTTP3_ERR_QPACK_HEADER_TOO_LARGE) return V_OVER_ITS_LIMIT;
        if (used < 0) {
            their_error = (int)used;
            return V_FAILED;
        }
        p += used;
        pend->theirs_at = (size_t)(p - pend->bytes);
        if (flags & NGHTTP3_QPACK_DECODE_FLAG_EMIT) {
            nghttp3_vec name = nghttp3_rcbuf_get_buf(nv.name), value = nghttp3_rcbuf_get_buf(nv.value);
            if (ok_fields) {
                FUZZ_ASSERT(*n < s->count, "nghttp3 has more fields than our %zu", s->count);
                const xHpackField *f = &s->fields[*n];
                FUZZ_ASSERT(f->name.len == name.len && memcmp(f->name.data, name.base, name.len) == 0,
                            "field %zu's name differs", *n);
                FUZZ_ASSERT(f->value.len == value.len && memcmp(f->value.data, value.base, value.len) == 0,
                            "field %zu's value differs", *n);
                FUZZ_ASSERT(!(f->flags & XHPACK_NEVER_INDEXED) == !(nv.flags & NGHTTP3_NV_FLAG_NEVER_INDEX),
                            "field %zu's never-indexed flag differs", *n);
            }
            (*n)++;
            nghttp3_rcbuf_decref(nv.name);
            nghttp3_rcbuf_decref(nv.value);
        }
        if (flags & NGHTTP3_QPACK_DECODE_FLAG_BLOCKED) return V_BLOCKED;
        if (flags & NGHTTP3_QPACK_DECODE_FLAG_FINAL) return V_OK;
        FUZZ_ASSERT(used > 0, "nghttp3 read nothing and did not finish");
    }
}

static void drop(Pending *pend) {
    if (pend->sctx) nghttp3_qpack_stream_context_del(pend->sctx);
    free(pend->bytes);
    *pend = (Pending){0};
}

static void cancel_stream(Pair *x, unsigned i);

/* Decodes the section of stream i (new, or a blocked one again) in both. */
static void both_decode(Pair *x, unsigned i) {
    Pending *pend = &x->pending[i];
    xQpackSection s = {fields, MAX_FIELDS, 0, scratch, sizeof scratch, SIZE_MAX, 0, 0, 0};
    xQpackResult ours = xQpackDecodeSection(&x->ours, 4 * i, pend->bytes, pend->len, &s);
    size_t n = 0;
    Verdict theirs = theirs_read(x, pend, &s, ours == XQPACK_OK, &n);
    bool was_waiting = pend->waiting;
    if (theirs == V_BLOCKED && !was_waiting && x->blocked == x->max_blocked) {
        FUZZ_ASSERT(ours == XQPACK_DECOMPRESSION_FAILED, "one blocked stream too many gave %d", (int)ours);
        x->dead = true;
        return;
    }
    switch (theirs) {
    case V_OK:
        FUZZ_ASSERT(ours == XQPACK_OK || ours == XQPACK_TOO_LARGE, "nghttp3 decoded, ours said %d",
                    (int)ours);
        FUZZ_ASSERT(ours != XQPACK_OK || n == s.count, "nghttp3 gave %zu fields, ours %zu", n, s.count);
        break;
    case V_BLOCKED:
        FUZZ_ASSERT(ours == XQPACK_BLOCKED, "nghttp3 blocked, ours said %d", (int)ours);
        FUZZ_ASSERT(s.required_insert_count > xQpackDecoderInsertCount(&x->ours), "blocked below its count");
        pend->waiting = true;
        pend->required = s.required_insert_count;
        if (!was_waiting) x->blocked++;
        /* nghttp3 cannot resume a blocked section with nothing after its prefix: given no
         * more bytes, it fails it. Such a section is abandoned in both instead. */
        if (pend->theirs_at == pend->len) cancel_stream(x, i);
        return;
    case V_FAILED:
        FUZZ_ASSERT(ours == XQPACK_DECOMPRESSION_FAILED, "nghttp3 failed (%s), ours said %d",
                    nghttp3_strerror(their_error), (int)ours);
        x->dead = true;
        return;
    case V_OVER_ITS_LIMIT:
        FUZZ_ASSERT(ours != XQPACK_BLOCKED, "nghttp3 read past a prefix ours blocked on");
        if (ours == XQPACK_OK) {
            bool long_string = false;
            for (size_t k = 0; k < s.count; k++)
                long_string |= s.fields[k].name.len > SHORTEST_DECODED(256) ||
                               s.fields[k].value.len > SHORTEST_DECODED(65536);
            FUZZ_ASSERT(long_string, "nghttp3 called a section of short fields too large");
        }
        x->dead = true; /* nghttp3's decoder is done for */
        return;
    }
    if (was_waiting) x->blocked--;
    drop(pend);
}

static void new_section(Pair *x, FuzzProgram *in) {
    unsigned i = fuzz_take(in) % STREAMS;
    size_t want = fuzz_take(in);
    if (want == 255) want += fuzz_take(in) << 8;
    const uint8_t *at;
    size_t len = take_bytes(in, want, &at);
    if (x->pending[i].waiting) return; /* one section at a time on a stream */
    Pending *pend = &x->pending[i];
    pend->bytes = (uint8_t *)fuzz_copy(at, len);
    pend->len = len;
    FUZZ_ASSERT(nghttp3_qpack_stream_context_new(&pend->sctx, 4 * i, nghttp3_mem_default()) == 0, "nomem");
    both_decode(x, i);
}

/* Ours refuses a string whose declared length no table of ours could hold as soon as
 * it reads the length; nghttp3 waits for the bytes. Zeros (plain bytes, or '0's in
 * Huffman code, which may also end in bad padding) complete the instruction for nghttp3,
 * which must refuse it then: a plain string that fits
 * would be accepted, so a wrong bound of ours still shows. */
static nghttp3_ssize finish_instruction(Pair *x) {
    static const uint8_t zeros[4096];
    for (int i = 0; i < 20; i++) {
        nghttp3_ssize theirs = nghttp3_qpack_decoder_read_encoder(x->theirs, zeros, sizeof zeros);
        if (theirs < 0) return theirs;
    }
    return 0;
}

static void encoder_chunk(Pair *x, FuzzProgram *in) {
    const uint8_t *at;
    size_t len = take_bytes(in, fuzz_take(in), &at);
    uint8_t *grown = realloc(x->encoder, x->encoder_len + len + 1);
    FUZZ_ASSERT(grown != NULL, "out of memory");
    x->encoder = grown;
    memcpy(x->encoder + x->encoder_len, at, len);
    x->encoder_len += len;
    char *mine = fuzz_copy(x->encoder, x->encoder_len);
    size_t used;
    xQpackResult ours = xQpackDecoderReadEncoder(&x->ours, (const uint8_t *)mine, x->encoder_len, &used);
    free(mine);
    /* nghttp3 gets the whole instructions ours took (it would judge a partial one early,
     * Huffman code by code, where ours waits for all of it), or everything when ours
     * refused: then it must refuse too. */
    nghttp3_ssize theirs =
        nghttp3_qpack_decoder_read_encoder(x->theirs, x->encoder, ours == XQPACK_OK ? used : x->encoder_len);
    if (ours != XQPACK_OK && theirs >= 0) theirs = finish_instruction(x);
    FUZZ_ASSERT((ours == XQPACK_OK) == (theirs >= 0), "encoder stream: ours %d, nghttp3 %zd", (int)ours,
                (ssize_t)theirs);
    if (ours != XQPACK_OK) {
        x->dead = true;
        return;
    }
    FUZZ_ASSERT(used <= x->encoder_len, "consumed more than given");
    memmove(x->encoder, x->encoder + used, x->encoder_len - used);
    x->encoder_len -= used;
    FUZZ_ASSERT(xQpackDecoderInsertCount(&x->ours) == nghttp3_qpack_decoder_get_icnt(x->theirs),
                "insert count: ours %llu, nghttp3 %llu",
                (unsigned long long)xQpackDecoderInsertCount(&x->ours),
                (unsigned long long)nghttp3_qpack_decoder_get_icnt(x->theirs));
    FUZZ_ASSERT(x->ours.size <= x->ours.capacity && x->ours.capacity <= x->ours.max_capacity, "table over");
    for (unsigned i = 0; i < STREAMS && !x->dead; i++)
        if (x->pending[i].waiting && x->pending[i].required <= xQpackDecoderInsertCount(&x->ours))
            both_decode(x, i);
}

static void cancel_stream(Pair *x, unsigned i) {
    FUZZ_ASSERT(xQpackDecoderCancelStream(&x->ours, 4 * i) == XQPACK_OK, "cancel failed");
    /* With no table, ours leaves the Stream Cancellation out, as RFC 9204 §4.4.2 allows;
     * nghttp3 would send it, so it is not told. */
    if (x->ours.max_capacity)
        FUZZ_ASSERT(nghttp3_qpack_decoder_cancel_stream(x->theirs, 4 * i) == 0, "nghttp3 cancel failed");
    if (x->pending[i].waiting) x->blocked--;
    drop(&x->pending[i]);
}

static void decoder_stream(Pair *x) {
    xStr ours = xQpackDecoderTakeOutput(&x->ours);
    size_t room = nghttp3_qpack_decoder_get_decoder_streamlen(x->theirs);
    uint8_t *mem = malloc(room + 1);
    nghttp3_buf b;
    nghttp3_buf_init(&b);
    b.begin = b.pos = b.last = mem;
    b.end = mem + room;
    nghttp3_qpack_decoder_write_decoder(x->theirs, &b);
    size_t n = nghttp3_buf_len(&b);
    FUZZ_ASSERT(ours.len == n && (n == 0 || memcmp(ours.data, b.pos, n) == 0),
                "decoder stream: ours %zu bytes, nghttp3 %zu", ours.len, n);
    free(mem);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 16384) return 0;
    static const size_t capacities[] = {0, 32, 63, 100, 220, 256, 1024, 4096};
    Pair x = {.max_blocked = (data[0] >> 3) & 3};
    size_t capacity = capacities[data[0] & 7];
    FUZZ_ASSERT(xQpackDecoderInit(&x.ours, capacity, x.max_blocked) == 0, "out of memory");
    FUZZ_ASSERT(nghttp3_qpack_decoder_new(&x.theirs, capacity, x.max_blocked, nghttp3_mem_default()) == 0,
                "out of memory");
    FuzzProgram in = {data + 1, data + size};
    while (in.p < in.end && !x.dead) {
        switch (fuzz_take(&in) % 4) {
        case 0: encoder_chunk(&x, &in); break;
        case 1: new_section(&x, &in); break;
        case 2: cancel_stream(&x, fuzz_take(&in) % STREAMS); break;
        default: decoder_stream(&x); break;
        }
    }
    for (unsigned i = 0; i < STREAMS; i++) drop(&x.pending[i]);
    free(x.encoder);
    xQpackDecoderFree(&x.ours);
    nghttp3_qpack_decoder_del(x.theirs);
    return 0;
}
