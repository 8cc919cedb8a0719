/* test_hpack_diff.c — our HPACK against nghttp2's on the same bytes: blocks from
 * nghttp2's deflater at random table sizes, some with bytes mutated, must get the
 * same verdict, the same fields and the same table size from both inflaters; and
 * what our encoder writes must decode, in nghttp2, to the fields it was given, its
 * dynamic table entry for entry nghttp2's across many blocks of one connection. */
#include <nghttp2/nghttp2.h>
#include <stdlib.h>

#include "check.h"
#include "xhttp/http2/hpack.h"

#define ITERATIONS 20000

static uint64_t rng = 0x9e3779b97f4a7c15u;
static uint32_t next(void) { /* xorshift64: the same run every time */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static const char *names[] = {":method",       ":path",        ":authority", "cookie",
                              "user-agent",    "accept",       "x-custom",   "x-request-id",
                              "cache-control", "content-type", "date",       "server"};
static const char *values[] = {"GET",       "/", "/index.html", "www.example.com", "no-cache",
                               "text/html", "",  "xkit"};

static void random_value(char *buf, size_t *len) {
    if (next() % 2) {
        const char *v = values[next() % (sizeof values / sizeof *values)];
        *len = strlen(v);
        memcpy(buf, v, *len);
        return;
    }
    *len = next() % 40;
    for (size_t i = 0; i < *len; i++) buf[i] = (char)(next() % 3 ? 'a' + next() % 26 : next() % 256);
}

typedef struct Pair {
    xHpackDecoder ours;
    nghttp2_hd_inflater *theirs;
} Pair;

static void pair_init(Pair *p) {
    xHpackDecoderInit(&p->ours, 4096);
    nghttp2_hd_inflate_new(&p->theirs);
}

static void pair_free(Pair *p) {
    xHpackDecoderFree(&p->ours);
    nghttp2_hd_inflate_del(p->theirs);
}

/* Decodes with both; returns whether both accepted. Records a failure on any difference. */
static bool compare(Pair *p, const uint8_t *in, size_t len, long iteration) {
    static xHpackField fields[512];
    static char scratch[1 << 16];
    xHpackBlock b = {fields, 512, 0, scratch, sizeof scratch, 1 << 20, 0, 0};
    int ours = xHpackDecode(&p->ours, in, len, &b);
    bool theirs_ok = true, fields_same = true;
    size_t n = 0;
    const uint8_t *q = in;
    size_t left = len;
    for (;;) {
        nghttp2_nv nv;
        int flags = 0;
        ssize_t rv = nghttp2_hd_inflate_hd2(p->theirs, &nv, &flags, q, left, 1);
        if (rv < 0) {
            theirs_ok = false;
            break;
        }
        q += rv;
        left -= (size_t)rv;
        if (flags & NGHTTP2_HD_INFLATE_EMIT) {
            if (ours == XHPACK_OK &&
                (n >= b.count || fields[n].name.len != nv.namelen || fields[n].value.len != nv.valuelen ||
                 memcmp(fields[n].name.data, nv.name, nv.namelen) ||
                 memcmp(fields[n].value.data, nv.value, nv.valuelen)))
                fields_same = false;
            n++;
        }
        if (flags & NGHTTP2_HD_INFLATE_FINAL) {
            nghttp2_hd_inflate_end_headers(p->theirs);
            break;
        }
    }
    CHECK_MSG((ours == XHPACK_OK) == theirs_ok, "iteration %ld: ours %d, nghttp2 %s", iteration, ours,
              theirs_ok ? "accepts" : "rejects");
    if (ours == XHPACK_OK && theirs_ok) {
        CHECK_MSG(fields_same && n == b.count, "iteration %ld: fields differ", iteration);
        CHECK_MSG(p->ours.table.size == nghttp2_hd_inflate_get_dynamic_table_size(p->theirs),
                  "iteration %ld: table %zu vs %zu", iteration, p->ours.table.size,
                  nghttp2_hd_inflate_get_dynamic_table_size(p->theirs));
    }
    return ours == XHPACK_OK && theirs_ok;
}

static void test_decoders_agree_on_nghttp2_blocks_and_mutations(void) {
    static const size_t sizes[] = {0, 32, 64, 256, 1024, 4096};
    long accepted = 0, rejected = 0;
    Pair p;
    nghttp2_hd_deflater *def;
    pair_init(&p);
    nghttp2_hd_deflate_new(&def, 4096);
    for (long it = 0; it < ITERATIONS; it++) {
        if (next() % 50 == 0) nghttp2_hd_deflate_change_table_size(def, sizes[next() % 6]);
        nghttp2_nv nv[16];
        char bufs[16][64];
        size_t n = 1 + next() % 12;
        for (size_t i = 0; i < n; i++) {
            const char *name = names[next() % (sizeof names / sizeof *names)];
            size_t vlen;
            random_value(bufs[i], &vlen);
            uint8_t flags = next() % 8 == 0 ? NGHTTP2_NV_FLAG_NO_INDEX : NGHTTP2_NV_FLAG_NONE;
            nv[i] = (nghttp2_nv){(uint8_t *)name, (uint8_t *)bufs[i], strlen(name), vlen, flags};
        }
        uint8_t block[4096];
        ssize_t len = nghttp2_hd_deflate_hd(def, block, sizeof block, nv, n);
        CHECK(len >= 0);
        bool mutate = next() % 3 == 0;
        if (mutate && len > 0) {
            for (int m = 1 + next() % 3; m > 0; m--)
                block[next() % (size_t)len] ^= (uint8_t)(1u << next() % 8);
            if (next() % 4 == 0) len = next() % (len + 1);
        }
        bool ok = compare(&p, block, (size_t)len, it);
        ok ? accepted++ : rejected++;
        if (mutate) { /* the deflater's table no longer matches: start a new connection */
            pair_free(&p);
            pair_init(&p);
            nghttp2_hd_deflate_del(def);
            nghttp2_hd_deflate_new(&def, 4096);
        }
    }
    printf("decoders: %d blocks, %ld accepted by both, %ld rejected by both or disputed\n", ITERATIONS,
           accepted, rejected);
    nghttp2_hd_deflate_del(def);
    pair_free(&p);
}

/* Whether inf decodes block to :status status, then want_names[i]:
 * want_values[i] for i below n, and nothing more; *indexed (when given)
 * counts the fields sent by index other than :status 200's. */
static bool inflates_to(nghttp2_hd_inflater *inf, const uint8_t *block, size_t len, int status,
                        const xStr *want_names, const xStr *want_values, size_t n, long *indexed) {
    char st[4];
    snprintf(st, sizeof st, "%d", status);
    const uint8_t *q = block;
    size_t left = len, got = 0;
    bool same = true;
    for (;;) {
        nghttp2_nv nv;
        int flags = 0;
        ssize_t rv = nghttp2_hd_inflate_hd2(inf, &nv, &flags, q, left, 1);
        if (rv < 0) return false;
        if (indexed && left && (*q & 0x80) && *q != 0x88) (*indexed)++;
        q += rv;
        left -= (size_t)rv;
        if (flags & NGHTTP2_HD_INFLATE_EMIT) {
            if (got == 0) {
                same &= nv.namelen == 7 && memcmp(nv.name, ":status", 7) == 0 && nv.valuelen == 3 &&
                        memcmp(nv.value, st, 3) == 0;
            } else if (got <= n) {
                xStr wn = want_names[got - 1], wv = want_values[got - 1];
                same &= nv.namelen == wn.len && memcmp(nv.name, wn.data, wn.len) == 0 &&
                        nv.valuelen == wv.len && memcmp(nv.value, wv.data, wv.len) == 0;
            }
            got++;
        }
        if (flags & NGHTTP2_HD_INFLATE_FINAL) break;
    }
    return same && got == n + 1;
}

static void test_nghttp2_decodes_our_encoder(void) {
    static const int statuses[] = {200, 204, 206, 304, 400, 404, 500, 302, 101, 503};
    for (long it = 0; it < ITERATIONS / 4; it++) {
        xHpackEncoder e;
        xHpackEncoderInit(&e);
        nghttp2_hd_inflater *inf;
        nghttp2_hd_inflate_new(&inf);
        size_t size = next() % 5000;
        nghttp2_hd_inflate_change_table_size(inf, size);
        xHpackEncoderSetPeerTableSize(&e, size);
        uint8_t out[4096], *p = xHpackEncodeBegin(&e, out);
        int status = statuses[next() % 10];
        p = xHpackEncodeStatus(p, status);
        char bufs[8][64];
        xStr want_names[8], want_values[8];
        size_t n = next() % 8;
        for (size_t i = 0; i < n; i++) {
            want_names[i] = xStrFromC(names[2 + next() % 10]);
            size_t vlen;
            random_value(bufs[i], &vlen);
            want_values[i] = (xStr){bufs[i], vlen};
            p = xHpackEncodeField(p, want_names[i], want_values[i]);
        }
        CHECK_MSG(inflates_to(inf, out, (size_t)(p - out), status, want_names, want_values, n, NULL),
                  "encoder iteration %ld", it);
        nghttp2_hd_inflate_del(inf);
    }
    printf("encoder: %d blocks decoded by nghttp2\n", ITERATIONS / 4);
}

/* One connection's encoder and nghttp2's inflater over many blocks: fields through
 * the dynamic table (xHpackEncodeIndexed, and header lines through xHpackEncodeLines
 * and its memo), values most often repeated, some long enough to evict, and table
 * size changes between blocks (to 0, small ones, back up, past our maximum). */
static void test_nghttp2_tracks_our_dynamic_table(void) {
    static const size_t sizes[] = {0, 31, 32, 64, 100, 200, 1000, 4096, 5000, 65536};
    static xHpackEncoder e;
    long blocks = 0, indexed = 0;
    for (int conn = 0; conn < 40; conn++) {
        xHpackEncoderInit(&e);
        nghttp2_hd_inflater *inf;
        nghttp2_hd_inflate_new(&inf);
        for (int b = 0; b < 200; b++, blocks++) {
            if (next() % 16 == 0) {
                for (int c = 1 + next() % 2; c > 0; c--) {
                    size_t size = sizes[next() % (sizeof sizes / sizeof *sizes)];
                    nghttp2_hd_inflate_change_table_size(inf, size);
                    xHpackEncoderSetPeerTableSize(&e, size);
                }
            }
            uint8_t out[8192], *p = xHpackEncodeStatus(xHpackEncodeBegin(&e, out), 200);
            char bufs[8][300], lines[4096];
            xStr want_names[10], want_values[10];
            size_t n = next() % 8, lines_len = 0;
            bool as_lines = next() % 2;
            for (size_t i = 0; i < n; i++) {
                want_names[i] = xStrFromC(names[4 + next() % 8]);
                size_t vlen;
                if (next() % 8 == 0) { /* long: evicts */
                    vlen = 100 + next() % 200;
                    memset(bufs[i], 'a' + (int)(next() % 26), vlen);
                } else {
                    if (next() % 4) { /* few distinct values: they repeat */
                        const char *v = values[next() % (sizeof values / sizeof *values)];
                        vlen = strlen(v);
                        memcpy(bufs[i], v, vlen);
                    } else {
                        random_value(bufs[i], &vlen);
                    }
                    for (size_t j = 0; j < vlen; j++) /* sound as a header line's value */
                        if (bufs[i][j] == '\r' || bufs[i][j] == '\n' || bufs[i][j] == ' ' || !bufs[i][j])
                            bufs[i][j] = 'x';
                }
                want_values[i] = (xStr){bufs[i], vlen};
                if (as_lines) {
                    lines_len += (size_t)snprintf(lines + lines_len, sizeof lines - lines_len, "%s: %.*s\r\n",
                                                  want_names[i].data, (int)vlen, bufs[i]);
                } else {
                    xHpackToken token = xHpackTokenOf(want_names[i].data, want_names[i].len);
                    p = xHpackEncodeIndexed(&e, p, token, want_names[i], want_values[i]);
                }
            }
            if (as_lines) p = xHpackEncodeLines(&e, p, lines, lines_len);
            static const uint64_t lengths[] = {4, 4, 4, 12, 0, 123456789};
            char length_digits[24];
            bool with_length = next() % 2;
            if (with_length) { /* most often the last one again: it enters the table */
                uint64_t length = lengths[next() % 6];
                p = xHpackEncodeContentLengthIndexed(&e, p, length);
                want_names[n] = xStrFromC("content-length");
                want_values[n] = (xStr){length_digits, (size_t)snprintf(length_digits, sizeof length_digits,
                                                                        "%llu", (unsigned long long)length)};
            }
            bool same = inflates_to(inf, out, (size_t)(p - out), 200, want_names, want_values,
                                    n + with_length, &indexed);
            nghttp2_hd_inflate_end_headers(inf);
            CHECK_MSG(same, "connection %d block %d", conn, b);
            CHECK_MSG(nghttp2_hd_inflate_get_dynamic_table_size(inf) == e.table.size &&
                          nghttp2_hd_inflate_get_num_table_entries(inf) == 61 + e.table.count,
                      "connection %d block %d: tables differ", conn, b);
            const char *at = e.table.bytes + e.table.used;
            for (uint32_t i = e.table.count; i-- > 0;) {
                size_t nl = e.table.entries[i].name_len, vl = e.table.entries[i].value_len;
                at -= nl + vl;
                const nghttp2_nv *nv = nghttp2_hd_inflate_get_table_entry(inf, 61 + e.table.count - i);
                CHECK_MSG(nv && nv->namelen == nl && memcmp(nv->name, at, nl) == 0 && nv->valuelen == vl &&
                              memcmp(nv->value, at + nl, vl) == 0,
                          "connection %d block %d: entry %u", conn, b, (unsigned)(61 + e.table.count - i));
            }
            if (!same) break;
        }
        nghttp2_hd_inflate_del(inf);
    }
    CHECK(indexed > blocks / 4); /* the table is used, not only kept */
    printf("dynamic table: %ld blocks decoded by nghttp2, %ld fields by index\n", blocks, indexed);
}

int main(void) {
    RUN(test_decoders_agree_on_nghttp2_blocks_and_mutations);
    RUN(test_nghttp2_decodes_our_encoder);
    RUN(test_nghttp2_tracks_our_dynamic_table);
    return CHECK_SUMMARY();
}
