/* qpack_oracle.h — what the tests of our QPACK encoder (unit/test_qpack_encoder.c,
 * fuzz/fuzz_qpack_encode_diff.c) check a section they made with: nghttp3's decoder,
 * the oracle, and ours each read it whole to exactly the fields it was made of.
 * Each check says why it failed, or NULL, and the caller asserts in its own way
 * (CHECK, FUZZ_ASSERT). Header-only: only these two link nghttp3. */
#ifndef XK_TESTS_SUPPORT_QPACK_ORACLE_H
#define XK_TESTS_SUPPORT_QPACK_ORACLE_H

#include <nghttp3/nghttp3.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <xbase/str.h>

#include "xhttp/http2/hpack.h"

/* Room for a check's reason. */
#define XK_ORACLE_WHY 160

static inline bool xk_oracle_same(const void *a, size_t alen, xStr b) {
    return alen == b.len && (alen == 0 || memcmp(a, b.data, alen) == 0);
}

/* nghttp3's decoder dec reads the whole section in of stream_id: NULL when it gives the
 * n fields names[i]: values[i] in order without blocking, else why not, in why. */
static inline const char *xk_oracle_theirs(nghttp3_qpack_decoder *dec, int64_t stream_id, const uint8_t *in,
                                           size_t len, const xStr *names, const xStr *values, size_t n,
                                           char why[XK_ORACLE_WHY]) {
    nghttp3_qpack_stream_context *sctx;
    if (nghttp3_qpack_stream_context_new(&sctx, stream_id, nghttp3_mem_default()) != 0)
        return "out of memory";
    const char *wrong = NULL;
    size_t got = 0;
    const uint8_t *p = in, *end = in + len;
    while (!wrong) {
        nghttp3_qpack_nv nv;
        uint8_t flags = 0;
        nghttp3_ssize used =
            nghttp3_qpack_decoder_read_request(dec, sctx, &nv, &flags, p, (size_t)(end - p), 1);
        if (used < 0) {
            snprintf(why, XK_ORACLE_WHY, "nghttp3 refused stream %lld's section: %s", (long long)stream_id,
                     nghttp3_strerror((int)used));
            wrong = why;
            break;
        }
        p += used;
        if (flags & NGHTTP3_QPACK_DECODE_FLAG_EMIT) {
            nghttp3_vec name = nghttp3_rcbuf_get_buf(nv.name), value = nghttp3_rcbuf_get_buf(nv.value);
            if (got == n) {
                snprintf(why, XK_ORACLE_WHY, "nghttp3 decoded more fields than the %zu given", n);
                wrong = why;
            } else if (!xk_oracle_same(name.base, name.len, names[got]) ||
                       !xk_oracle_same(value.base, value.len, values[got])) {
                snprintf(why, XK_ORACLE_WHY, "nghttp3's field %zu differs from the one given", got);
                wrong = why;
            }
            got++;
            nghttp3_rcbuf_decref(nv.name);
            nghttp3_rcbuf_decref(nv.value);
        }
        if (flags & NGHTTP3_QPACK_DECODE_FLAG_BLOCKED) {
            wrong = "nghttp3 blocked on the section";
        } else if (flags & NGHTTP3_QPACK_DECODE_FLAG_FINAL) {
            break;
        } else if (used == 0) {
            wrong = "nghttp3 read nothing and did not finish";
        }
    }
    if (!wrong && got != n) {
        snprintf(why, XK_ORACLE_WHY, "nghttp3 decoded %zu fields of %zu", got, n);
        wrong = why;
    }
    nghttp3_qpack_stream_context_del(sctx);
    return wrong;
}

/* NULL when a decoded section's count fields are the n names[i]: values[i] given, in
 * order; else why not, in why. */
static inline const char *xk_oracle_ours(const xHpackField *fields, size_t count, const xStr *names,
                                         const xStr *values, size_t n, char why[XK_ORACLE_WHY]) {
    if (count != n) {
        snprintf(why, XK_ORACLE_WHY, "ours decoded %zu fields of %zu", count, n);
        return why;
    }
    for (size_t i = 0; i < n; i++) {
        if (!xk_oracle_same(fields[i].name.data, fields[i].name.len, names[i]) ||
            !xk_oracle_same(fields[i].value.data, fields[i].value.len, values[i])) {
            snprintf(why, XK_ORACLE_WHY, "our field %zu differs from the one given", i);
            return why;
        }
    }
    return NULL;
}

#endif
