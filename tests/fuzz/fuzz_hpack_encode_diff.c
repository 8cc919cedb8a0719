/* fuzz_hpack_encode_diff.c — libFuzzer: our HPACK encoder's blocks decoded by
 * nghttp2's inflater, with table sizes the input chooses. The input is a program,
 * one opcode byte at a time:
 *   - a table size change (the peer's SETTINGS_HEADER_TABLE_SIZE): two bytes pick
 *     a size, from a list of edge values or taken as is; our encoder and nghttp2's
 *     inflater are both told, as a server and its client are between blocks;
 *   - a response head: two bytes of :status, a count, then fields, each a kind byte
 *     (a token with a value, any name and value through xHpackEncodeField, a token's
 *     name spelled out, content-length from eight bytes (raw, or through the table
 *     when even: then 0-7, so that lengths repeat), or a token's or any name
 *     through the encoder's dynamic table, xHpackEncodeIndexed, the value then
 *     most often one of a few so that blocks repeat fields) and its strings (a
 *     length byte, 255 meaning two more length bytes, then the bytes).
 * Each block must decode in nghttp2 to exactly the fields given (:status as three
 * digits, 500 when out of range), fit in the bound the server sizes its buffer by
 * (XHPACK_FIELD_BOUND), and leave nghttp2's dynamic table of the size our encoder's
 * is, entry by entry as RFC 7541 §4.4 evicts; when the peer lowered its size,
 * nghttp2 itself insists on the update. */
#include <nghttp2/nghttp2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"
#include "xhttp/http2/hpack.h"

#define MAX_FIELDS 16
#define MAX_STRING 20000

typedef struct Field {
    xStr name, value;
    char digits[24];
} Field;

static uint8_t block[MAX_FIELDS * (2 * MAX_STRING + 12) + 64];

/* Encodes one field the input describes; records what nghttp2 must give back. */
static uint8_t *encode_field(FuzzProgram *in, xHpackEncoder *e, uint8_t *p, Field *f, size_t *bound) {
    static const char *const repeated[] = {"text/plain", "xkit", "Sat, 28 Nov 2026 20:00:00 GMT", "", "4"};
    unsigned kind = fuzz_take(in) % 6;
    if (kind == 3) {
        uint64_t n = 0;
        for (int i = 0; i < 8; i++) n = n << 8 | fuzz_take(in);
        f->name = xHpackTokenNames[XHPACK_TOKEN_CONTENT_LENGTH];
        uint64_t v = n & 1 ? n : n >> 1 & 7; /* odd: any, raw; even: one of a few, through the table */
        f->value =
            (xStr){f->digits, (size_t)snprintf(f->digits, sizeof f->digits, "%llu", (unsigned long long)v)};
        *bound += XHPACK_FIELD_BOUND(f->name.len, f->value.len);
        return n & 1 ? xHpackEncodeContentLength(p, n) : xHpackEncodeContentLengthIndexed(e, p, n >> 1 & 7);
    }
    xHpackToken token = (xHpackToken)(1 + fuzz_take(in) % (XHPACK_TOKEN_COUNT - 1));
    f->name = kind == 1 || kind == 5 ? fuzz_take_string(in, SIZE_MAX) : xHpackTokenNames[token];
    if (kind >= 4) {
        unsigned pick = fuzz_take(in) % 8;
        f->value = pick < 5 ? xStrFromC(repeated[pick]) : fuzz_take_string(in, SIZE_MAX);
    } else {
        f->value = fuzz_take_string(in, SIZE_MAX);
    }
    *bound += XHPACK_FIELD_BOUND(f->name.len, f->value.len);
    switch (kind) {
    case 0: return xHpackEncodeToken(p, token, f->value);
    case 4: return xHpackEncodeIndexed(e, p, token, f->name, f->value);
    case 5: return xHpackEncodeIndexed(e, p, XHPACK_TOKEN_NONE, f->name, f->value);
    default: return xHpackEncodeField(p, f->name, f->value);
    }
}

static bool same(const uint8_t *a, size_t alen, xStr b) {
    return alen == b.len && memcmp(a, b.data, alen) == 0;
}

/* Decodes the block in nghttp2 and checks it against the fields. */
static void check_block(nghttp2_hd_inflater *inf, const xHpackEncoder *e, const uint8_t *in, size_t len,
                        const Field *want, size_t n) {
    size_t got = 0;
    for (;;) {
        nghttp2_nv nv;
        int flags = 0;
        ssize_t used = nghttp2_hd_inflate_hd2(inf, &nv, &flags, in, len, 1);
        FUZZ_ASSERT(used >= 0, "nghttp2 rejects our block: %s", nghttp2_strerror((int)used));
        in += used;
        len -= (size_t)used;
        if (flags & NGHTTP2_HD_INFLATE_EMIT) {
            FUZZ_ASSERT(got < n, "nghttp2 decodes more than %zu fields", n);
            FUZZ_ASSERT(
                same(nv.name, nv.namelen, want[got].name) && same(nv.value, nv.valuelen, want[got].value),
                "field %zu decodes to %.*s: %.*s", got, (int)nv.namelen, nv.name, (int)nv.valuelen, nv.value);
            got++;
        }
        if (flags & NGHTTP2_HD_INFLATE_FINAL) break;
    }
    nghttp2_hd_inflate_end_headers(inf);
    FUZZ_ASSERT(got == n, "nghttp2 decodes %zu fields of %zu", got, n);
    FUZZ_ASSERT(nghttp2_hd_inflate_get_dynamic_table_size(inf) == e->table.size,
                "nghttp2's table holds %zu bytes, ours %u", nghttp2_hd_inflate_get_dynamic_table_size(inf),
                (unsigned)e->table.size);
    FUZZ_ASSERT(nghttp2_hd_inflate_get_num_table_entries(inf) == 61 + e->table.count,
                "nghttp2's table holds %zu entries, ours %u",
                nghttp2_hd_inflate_get_num_table_entries(inf) - 61, (unsigned)e->table.count);
    const char *at = e->table.bytes + e->table.used;
    for (uint32_t i = e->table.count; i-- > 0;) { /* newest first: HPACK index 62 on */
        size_t nlen = e->table.entries[i].name_len, vlen = e->table.entries[i].value_len;
        at -= nlen + vlen;
        const nghttp2_nv *nv = nghttp2_hd_inflate_get_table_entry(inf, 61 + e->table.count - i);
        FUZZ_ASSERT(nv && same(nv->name, nv->namelen, (xStr){at, nlen}) &&
                        same(nv->value, nv->valuelen, (xStr){at + nlen, vlen}),
                    "nghttp2's table entry %u differs from ours", (unsigned)(61 + e->table.count - i));
    }
}

static void encode_block(FuzzProgram *in, xHpackEncoder *e, nghttp2_hd_inflater *inf) {
    static Field want[MAX_FIELDS + 1];
    unsigned status = fuzz_take(in) << 8 | fuzz_take(in);
    size_t n = 1 + fuzz_take(in) % MAX_FIELDS, bound = XHPACK_BEGIN_BOUND + 5;
    want[0].name = xHpackTokenNames[XHPACK_TOKEN_STATUS];
    want[0].value = (xStr){want[0].digits, 3};
    snprintf(want[0].digits, sizeof want[0].digits, "%03u", status >= 100 && status <= 999 ? status : 500);
    uint8_t *p = xHpackEncodeStatus(xHpackEncodeBegin(e, block), (int)status);
    for (size_t i = 1; i < n; i++) p = encode_field(in, e, p, &want[i], &bound);
    FUZZ_ASSERT((size_t)(p - block) <= bound, "block of %zu bytes over its bound %zu", (size_t)(p - block),
                bound);
    check_block(inf, e, block, (size_t)(p - block), want, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const size_t sizes[] = {0, 1, 31, 32, 33, 4095, 4096, 4097, 65535, 65536, 1 << 20, 255};
    FuzzProgram in = {data, data + size};
    xHpackEncoder e;
    nghttp2_hd_inflater *inf;
    xHpackEncoderInit(&e);
    if (nghttp2_hd_inflate_new(&inf) != 0) abort();
    while (in.p < in.end) {
        unsigned op = fuzz_take(&in);
        if (op & 1) {
            unsigned v = fuzz_take(&in) << 8 | fuzz_take(&in);
            size_t s = op & 2 ? sizes[v % (sizeof sizes / sizeof *sizes)] : v;
            xHpackEncoderSetPeerTableSize(&e, s);
            FUZZ_ASSERT(nghttp2_hd_inflate_change_table_size(inf, s) == 0, "nghttp2 refuses size %zu", s);
        } else {
            encode_block(&in, &e, inf);
        }
    }
    nghttp2_hd_inflate_del(inf);
    return 0;
}
