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
#include "qpack_oracle.h"
#include "xhttp/http3/qpack.h"

#define MAX_FIELDS 32
#define MAX_STRING 4096
#define NGHTTP3_NAME_MAX 256 /* nghttp3 refuses longer names (NGHTTP3_ERR_QPACK_HEADER_TOO_LARGE) */

/* The fields a section is made of; a :status's digits lie in digits. */
typedef struct Fields {
    xStr names[MAX_FIELDS], values[MAX_FIELDS];
    char digits[MAX_FIELDS][4];
} Fields;

static uint8_t section[MAX_FIELDS * (2 * MAX_STRING + 24) + 8];
static xHpackField decoded[MAX_FIELDS];
static char scratch[MAX_FIELDS * 2 * MAX_STRING];

static uint8_t *encode_field(FuzzProgram *in, uint8_t *p, Fields *f, size_t i, size_t *bound) {
    unsigned kind = fuzz_take(in) % 4;
    if (kind == 0) {
        int status = (int)(fuzz_take(in) << 8 | fuzz_take(in)) % 1100;
        int shown = status < 100 || status > 999 ? 500 : status;
        snprintf(f->digits[i], sizeof f->digits[i], "%d", shown);
        f->names[i] = xStrFromC(":status");
        f->values[i] = (xStr){f->digits[i], 3};
        *bound += XQPACK_FIELD_BOUND(f->names[i].len, f->values[i].len);
        return xQpackEncodeStatus(p, status);
    }
    const xQpackStaticEntry *e = &xQpackStatic[fuzz_take(in) % XQPACK_STATIC_COUNT];
    f->names[i] = kind == 3 ? fuzz_take_string(in, MAX_STRING) : e->name;
    if (f->names[i].len > NGHTTP3_NAME_MAX) f->names[i].len = NGHTTP3_NAME_MAX;
    f->values[i] = kind == 1 ? e->value : fuzz_take_string(in, MAX_STRING);
    *bound += XQPACK_FIELD_BOUND(f->names[i].len, f->values[i].len);
    return xQpackEncodeField(p, f->names[i], f->values[i]);
}

static void check_theirs(nghttp3_qpack_decoder *dec, const uint8_t *in, size_t len, const Fields *want,
                         size_t n) {
    char why[XK_ORACLE_WHY];
    const char *wrong = xk_oracle_theirs(dec, 0, in, len, want->names, want->values, n, why);
    FUZZ_ASSERT(!wrong, "%s", wrong);
    FUZZ_ASSERT(nghttp3_qpack_decoder_get_decoder_streamlen(dec) == 0,
                "a static-only section needs acknowledging");
}

static void check_ours(xQpackDecoder *dec, const uint8_t *in, size_t len, const Fields *want, size_t n) {
    xQpackSection s = {decoded, MAX_FIELDS, 0, scratch, sizeof scratch, SIZE_MAX, 0, 0, 0};
    FUZZ_ASSERT(xQpackDecodeSection(dec, 0, in, len, &s) == XQPACK_OK, "ours refused our section");
    FUZZ_ASSERT(s.required_insert_count == 0, "a static-only section needs inserts");
    char why[XK_ORACLE_WHY];
    const char *wrong = xk_oracle_ours(s.fields, s.count, want->names, want->values, n, why);
    FUZZ_ASSERT(!wrong, "%s", wrong);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 65536) return 0;
    nghttp3_qpack_decoder *theirs;
    xQpackDecoder ours;
    FUZZ_ASSERT(nghttp3_qpack_decoder_new(&theirs, 0, 0, nghttp3_mem_default()) == 0, "nomem");
    FUZZ_ASSERT(xQpackDecoderInit(&ours, 0, 0) == 0, "nomem");
    FuzzProgram in = {data, data + size};
    while (in.p < in.end) {
        size_t n = fuzz_take(&in) % (MAX_FIELDS + 1), bound = XQPACK_PREFIX_SIZE;
        Fields want;
        uint8_t *p = xQpackEncodeBegin(section);
        for (size_t i = 0; i < n; i++) p = encode_field(&in, p, &want, i, &bound);
        size_t len = (size_t)(p - section);
        FUZZ_ASSERT(len <= bound, "section of %zu bytes over its bound %zu", len, bound);
        uint8_t *copy = (uint8_t *)fuzz_copy(section, len);
        check_theirs(theirs, copy, len, &want, n);
        check_ours(&ours, copy, len, &want, n);
        free(copy);
    }
    nghttp3_qpack_decoder_del(theirs);
    xQpackDecoderFree(&ours);
    return 0;
}
