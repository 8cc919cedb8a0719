/* compress_bench — what zlib or Brotli alone spends compressing GET /json's body
 * (bench_common.c) at xHttpCompressOptionsInit's settings: the floor that
 * on-the-fly compression in the server is measured against
 * (python3 bench/xkbench compress).
 *
 *   compress_bench gzip|br [SECONDS]
 *
 * Compresses the body over and over for SECONDS (default 2) of this process's
 * CPU time: gzip through one z_stream reset each time, as the server does;
 * Brotli with BrotliEncoderCompress, the library's one call for a whole
 * buffer, whose steps the server takes one by one to give the encoder memory
 * of its own (compress.c's arena). Prints one line:
 *   "gzip level 6: 12345 ops, 95.21 us/op, 8125 -> 1281 bytes". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <brotli/encode.h>
#include <zlib.h>

#include <xhttp/compress.h>

#include "servers/bench_common.h"

static double cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* One gzip of body into out; its size, or 0 on failure. */
static size_t gzip_once(z_stream *z, const char *body, size_t len, unsigned char *out, size_t cap) {
    if (deflateReset(z) != Z_OK) return 0;
    z->next_in = (Bytef *)body;
    z->avail_in = (uInt)len;
    z->next_out = out;
    z->avail_out = (uInt)cap;
    return deflate(z, Z_FINISH) == Z_STREAM_END ? z->total_out : 0;
}

int main(int argc, char **argv) {
    if (argc < 2 || (strcmp(argv[1], "gzip") != 0 && strcmp(argv[1], "br") != 0)) {
        fprintf(stderr, "usage: %s gzip|br [SECONDS]\n", argv[0]);
        return 2;
    }
    bool gzip = strcmp(argv[1], "gzip") == 0;
    double seconds = argc > 2 ? atof(argv[2]) : 2.0;
    xHttpCompressOptions o;
    xHttpCompressOptionsInit(&o);
    size_t len;
    const char *body = benchJsonBody(&len);
    z_stream z = {0};
    if (gzip && deflateInit2(&z, o.gzip_level, Z_DEFLATED, 16 + o.gzip_window_bits, o.gzip_mem_level,
                             Z_DEFAULT_STRATEGY) != Z_OK)
        return 1;
    size_t cap = gzip ? deflateBound(&z, len) : BrotliEncoderMaxCompressedSize(len);
    unsigned char *out = malloc(cap);
    if (!out) return 1;
    size_t ops = 0, out_len = 0;
    double start = cpu_seconds(), elapsed;
    do {
        for (int i = 0; i < 100; i++) {
            out_len = cap;
            if (gzip)
                out_len = gzip_once(&z, body, len, out, cap);
            else if (!BrotliEncoderCompress(o.brotli_quality, o.brotli_window_bits, BROTLI_MODE_GENERIC, len,
                                            (const uint8_t *)body, &out_len, out))
                out_len = 0;
            if (!out_len) return 1;
        }
        ops += 100;
        elapsed = cpu_seconds() - start;
    } while (elapsed < seconds);
    printf("%s %s %d: %zu ops, %.2f us/op, %zu -> %zu bytes\n", argv[1], gzip ? "level" : "quality",
           gzip ? o.gzip_level : o.brotli_quality, ops, elapsed * 1e6 / (double)ops, len, out_len);
    if (gzip) deflateEnd(&z);
    free(out);
    return 0;
}
