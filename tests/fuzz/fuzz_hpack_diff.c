/* fuzz_hpack_diff.c — libFuzzer: our HPACK decoder against nghttp2's inflater on
 * the same bytes. The first byte picks the table size both are told; the rest is
 * a run of header blocks, each preceded by a length byte, decoded on one context.
 * Both must accept or reject each block alike, give the same fields and keep the
 * same table size; after a rejection the context is gone, as on a connection. */
#include <nghttp2/nghttp2.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "xhttp/http2/hpack.h"

static xHpackField fields[512];
static char scratch[1 << 16];

/* Returns whether both accepted; aborts on any difference. */
static int same_block(xHpackDecoder *ours, nghttp2_hd_inflater *theirs, const uint8_t *in, size_t len) {
    xHpackBlock b = {fields, 512, 0, scratch, sizeof scratch, 1 << 20, 0, 0};
    int rv = xHpackDecode(ours, in, len, &b);
    size_t n = 0;
    int ok = 1;
    for (;;) {
        nghttp2_nv nv;
        int flags = 0;
        ssize_t used = nghttp2_hd_inflate_hd2(theirs, &nv, &flags, in, len, 1);
        if (used < 0) {
            ok = 0;
            break;
        }
        in += used;
        len -= (size_t)used;
        if ((flags & NGHTTP2_HD_INFLATE_EMIT) && rv == XHPACK_OK) {
            if (n >= b.count || fields[n].name.len != nv.namelen || fields[n].value.len != nv.valuelen ||
                memcmp(fields[n].name.data, nv.name, nv.namelen) ||
                memcmp(fields[n].value.data, nv.value, nv.valuelen))
                abort();
            n++;
        }
        if (flags & NGHTTP2_HD_INFLATE_FINAL) {
            nghttp2_hd_inflate_end_headers(theirs);
            break;
        }
    }
    if ((rv == XHPACK_OK) != ok) abort();
    if (ok && (n != b.count || ours->table.size != nghttp2_hd_inflate_get_dynamic_table_size(theirs)))
        abort();
    return ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 16384) return 0;
    static const size_t limits[] = {4096, 0, 64, 256, 1024, 4096, 8192, 65536};
    size_t limit = limits[data[0] & 7];
    data++, size--;
    xHpackDecoder ours;
    nghttp2_hd_inflater *theirs;
    /* Both start at 4096 and, told less, wait for the encoder's size update. */
    if (xHpackDecoderInit(&ours, limit > 4096 ? limit : 4096) != 0 || nghttp2_hd_inflate_new(&theirs) != 0)
        abort();
    xHpackDecoderSetLimit(&ours, limit);
    nghttp2_hd_inflate_change_table_size(theirs, limit);
    while (size) {
        size_t len = data[0] < size - 1 ? data[0] : size - 1;
        if (!same_block(&ours, theirs, data + 1, len)) break;
        data += 1 + len, size -= 1 + len;
    }
    xHpackDecoderFree(&ours);
    nghttp2_hd_inflate_del(theirs);
    return 0;
}
