/* fuzz_qpack_encode_diff.c — libFuzzer: our static-only QPACK encoder's sections
 * decoded by nghttp3's decoder (and by ours). The input is a run of sections, each
 * a field count byte then fields, each a kind byte and its operands:
 *   - :status from two bytes (xQpackEncodeStatus);
 *   - a static table entry, exactly (its index from a byte);
 *   - a static table name with a value from the input;
 *   - any name (of at most 256 bytes, nghttp3's limit) and value from the input (a
 *     length byte, 255 meaning two more).
 * Each section must decode in nghttp3 to exactly the fields given (:status as three
 * digits, 500 when out of range), with a decoder whose table can hold nothing (we
 * never insert), so nothing blocks and its decoder stream stays empty; it must fit
 * the bound the encoder promises (XQPACK_PREFIX_SIZE + XQPACK_FIELD_BOUND per field);
 * and our decoder must read back the same fields. */
#include <nghttp3/nghttp3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"
#include "xhttp/http3/qpack.h"

#define MAX_FIELDS 32
#define MAX_STRING 4096
#define NGHTTP3_NAME_MAX 256 /* nghttp3 refuses longer names (NGHTTP3_ERR_QPACK_HEADER_TOO_LARGE) */

typedef struct Program {
    const uint8_t *p, *end;
} Program;

static unsigned take(Program *in) { return in->p < in->end ? *in->p++ : 0; }

static xStr take_string(Program *in) {
    size_t len = take(in);
    if (len == 255) len = 255 + (take(in) << 8 | take(in));
    if (len > MAX_STRING) len = MAX_STRING;
    size_t left = (size_t)(in->end - in->p);
    if (len > left) len = left;
    xStr s = {(const char *)in->p, len};
    in->p += len;
    return s;
}

typedef struct Field {
    xStr name, value;
    char digits[4];
} Field;

static uint8_t section[MAX_FIELDS * (2 * MAX_STRING + 24) + 8];
static xHpackField decoded[MAX_FIELDS];
static char scratch[MAX_FIELDS * 2 * MAX_STRING];

static uint8_t *encode_field(Program *in, uint8_t *p, Field *f, size_t *bound) {
    unsigned kind = take(in) % 4;
    if (kind == 0) {
        int status = (int)(take(in) << 8 | take(in)) % 1100;
        int shown = status < 100 || status > 999 ? 500 : status;
        snprintf(f->digits, sizeof f->digits, "%d", shown);
        f->name = xStrFromC(":status");
        f->value = (xStr){f->digits, 3};
        *bound += XQPACK_FIELD_BOUND(f->name.len, f->value.len);
        return xQpackEncodeStatus(p, status);
    }
    const xQpackStaticEntry *e = &xQpackStatic[take(in) % XQPACK_STATIC_COUNT];
    f->name = kind == 3 ? take_string(in) : e->name;
    if (f->name.len > NGHTTP3_NAME_MAX) f->name.len = NGHTTP3_NAME_MAX;
    f->value = kind == 1 ? e->value : take_string(in);
    *bound += XQPACK_FIELD_BOUND(f->name.len, f->value.len);
    return xQpackEncodeField(p, f->name, f->value);
}

static bool same(const uint8_t *a, size_t alen, xStr b) {
    return alen == b.len && memcmp(a, b.data, alen) == 0;
}

static void check_theirs(nghttp3_qpack_decoder *dec, const uint8_t *in, size_t len, const Field *want,
                         size_t n) {
    nghttp3_qpack_stream_context *sctx;
    FUZZ_ASSERT(nghttp3_qpack_stream_context_new(&sctx, 0, nghttp3_mem_default()) == 0, "nomem");
    size_t got = 0;
    const uint8_t *p = in, *end = in + len;
    for (;;) {
        nghttp3_qpack_nv nv;
        uint8_t flags = 0;
        nghttp3_ssize used =
            nghttp3_qpack_decoder_read_request(dec, sctx, &nv, &flags, p, (size_t)(end - p), 1);
        FUZZ_ASSERT(used >= 0, "nghttp3 refused our section: %s", nghttp3_strerror((int)used));
        p += used;
        if (flags & NGHTTP3_QPACK_DECODE_FLAG_EMIT) {
            nghttp3_vec name = nghttp3_rcbuf_get_buf(nv.name), value = nghttp3_rcbuf_get_buf(nv.value);
            FUZZ_ASSERT(got < n, "nghttp3 decoded more fields than the %zu given", n);
            FUZZ_ASSERT(same(name.base, name.len, want[got].name), "field %zu's name differs", got);
            FUZZ_ASSERT(same(value.base, value.len, want[got].value), "field %zu's value differs", got);
            got++;
            nghttp3_rcbuf_decref(nv.name);
            nghttp3_rcbuf_decref(nv.value);
        }
        FUZZ_ASSERT(!(flags & NGHTTP3_QPACK_DECODE_FLAG_BLOCKED), "a static-only section blocked");
        if (flags & NGHTTP3_QPACK_DECODE_FLAG_FINAL) break;
        FUZZ_ASSERT(used > 0, "nghttp3 read nothing and did not finish");
    }
    FUZZ_ASSERT(got == n, "nghttp3 decoded %zu fields of %zu", got, n);
    FUZZ_ASSERT(nghttp3_qpack_decoder_get_decoder_streamlen(dec) == 0,
                "a static-only section needs acknowledging");
    nghttp3_qpack_stream_context_del(sctx);
}

static void check_ours(xQpackDecoder *dec, const uint8_t *in, size_t len, const Field *want, size_t n) {
    xQpackSection s = {decoded, MAX_FIELDS, 0, scratch, sizeof scratch, SIZE_MAX, 0, 0};
    FUZZ_ASSERT(xQpackDecodeSection(dec, 0, in, len, &s) == XQPACK_OK, "ours refused our section");
    FUZZ_ASSERT(s.count == n && s.required_insert_count == 0, "ours decoded %zu fields of %zu", s.count, n);
    for (size_t i = 0; i < n; i++) {
        FUZZ_ASSERT(same((const uint8_t *)decoded[i].name.data, decoded[i].name.len, want[i].name),
                    "name %zu", i);
        FUZZ_ASSERT(same((const uint8_t *)decoded[i].value.data, decoded[i].value.len, want[i].value),
                    "value %zu", i);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 65536) return 0;
    nghttp3_qpack_decoder *theirs;
    xQpackDecoder ours;
    FUZZ_ASSERT(nghttp3_qpack_decoder_new(&theirs, 0, 0, nghttp3_mem_default()) == 0, "nomem");
    FUZZ_ASSERT(xQpackDecoderInit(&ours, 0, 0) == 0, "nomem");
    Program in = {data, data + size};
    while (in.p < in.end) {
        size_t n = take(&in) % (MAX_FIELDS + 1), bound = XQPACK_PREFIX_SIZE;
        Field want[MAX_FIELDS];
        uint8_t *p = xQpackEncodeBegin(section);
        for (size_t i = 0; i < n; i++) p = encode_field(&in, p, &want[i], &bound);
        size_t len = (size_t)(p - section);
        FUZZ_ASSERT(len <= bound, "section of %zu bytes over its bound %zu", len, bound);
        uint8_t *copy = (uint8_t *)fuzz_copy(section, len);
        check_theirs(theirs, copy, len, want, n);
        check_ours(&ours, copy, len, want, n);
        free(copy);
    }
    nghttp3_qpack_decoder_del(theirs);
    xQpackDecoderFree(&ours);
    return 0;
}
