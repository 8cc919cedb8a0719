/* compress.c — gzip (zlib) and Brotli for responses, whole or streamed
 * (compress.h, <xhttp/compress.h>). */
#include "xhttp/filter/compress.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <brotli/encode.h>
#include <zlib.h>

#include "xbase/mem/sized.h"

#include "xhttp/core/accept.h"
#include "xhttp/core/exchange.h"
#include "xhttp/core/tokens.h"

#define XCOMPRESS_MAX_TYPES 64
/* Streamed output goes down to the protocol in pieces of at most this. */
#define XCOMPRESS_CHUNK 16384
/* Room for the fields a compressed response gains, reserved before deciding. */
#define XCOMPRESS_FIELDS_ROOM 64

static const char default_types[] =
    "text/*,application/json,application/javascript,application/xml,application/xhtml+xml,"
    "application/rss+xml,application/atom+xml,application/ld+json,application/manifest+json,"
    "application/wasm,image/svg+xml,image/x-icon,font/ttf,font/otf";

struct xCompressConf {
    xHttpCompressOptions opts;
    char *types;                    /* the list, lower-cased; type[] points into it */
    xStr type[XCOMPRESS_MAX_TYPES]; /* a star subtype matches by "type/" */
    size_t num_types;
};

typedef enum Coding { CODING_NONE, CODING_GZIP, CODING_BROTLI } Coding;

/* Where a whole body's Brotli encoder keeps its memory: the same block for
 * every body a worker compresses. The encoder clears its 512 KiB of hash
 * table for each body; in this block those lines are still in the caches
 * from the body before, where malloc, between a turn's other allocations,
 * would hand out different ones each time (1.12-1.17x the library's own time
 * per body became 1.05-1.09x). Handed out front to back, taken back all at once;
 * what does not fit comes from malloc. */
typedef struct Arena {
    char *base;
    size_t cap, used;
} Arena;

/* Quality 4's encoder for a body of a few KiB takes 660 KiB. */
#define XCOMPRESS_ARENA (1u << 20)

typedef struct Worker {
    xHttpFilter base; /* first: ex->filter points here */
    const xCompressConf *conf;
    z_stream whole; /* reset for every whole gzip body */
    bool whole_ready;
    Arena brotli;
} Worker;

/* A streamed response's compressor, from its first Write to its end. */
typedef struct Stream {
    Coding coding;
    z_stream z;
    BrotliEncoderState *br;
} Stream;

/* ---- Settings ---- */

void xHttpCompressOptionsInitSized(xHttpCompressOptions *opts, size_t size) {
    xHttpCompressOptions defaults = {
        .encodings = XHTTP_COMPRESS_GZIP | XHTTP_COMPRESS_BROTLI,
        .gzip_level = 6,
        .brotli_quality = 4,
        .min_size = 256,
        .types = NULL,
        .gzip_window_bits = 15,
        .gzip_mem_level = 8,
        .brotli_window_bits = 18,
    };
    xSizedInit(opts, size, &defaults, sizeof defaults);
}

static bool in_range(int v, int lo, int hi) { return v >= lo && v <= hi; }

/* Splits conf->types at commas into trimmed entries. */
static bool split_types(xCompressConf *conf) {
    for (char *c = conf->types; *c; c++)
        if ((unsigned)(*c - 'A') < 26u) *c += 'a' - 'A';
    const char *p = conf->types;
    while (*p) {
        const char *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        const char *a = p, *b = end;
        while (a < b && (*a == ' ' || *a == '\t')) a++;
        while (b > a && (b[-1] == ' ' || b[-1] == '\t')) b--;
        if (b > a) {
            if (conf->num_types == XCOMPRESS_MAX_TYPES || !memchr(a, '/', (size_t)(b - a))) return false;
            conf->type[conf->num_types++] = (xStr){a, (size_t)(b - a)};
        }
        p = *end ? end + 1 : end;
    }
    return conf->num_types > 0;
}

xErrno xCompressConfCreate(const xHttpCompressOptions *opts, xCompressConf **out) {
    xCompressConf *conf = calloc(1, sizeof *conf);
    if (!conf) return XERR_NOMEM;
    xHttpCompressOptionsInit(&conf->opts);
    if (opts) xSizedAdopt(&conf->opts, opts, sizeof conf->opts);
    const xHttpCompressOptions *o = &conf->opts;
    bool valid = o->encodings && !(o->encodings & ~(unsigned)(XHTTP_COMPRESS_GZIP | XHTTP_COMPRESS_BROTLI)) &&
                 in_range(o->gzip_level, 1, 9) &&
                 in_range(o->brotli_quality, BROTLI_MIN_QUALITY, BROTLI_MAX_QUALITY) &&
                 in_range(o->gzip_window_bits, 9, 15) && in_range(o->gzip_mem_level, 1, 9) &&
                 in_range(o->brotli_window_bits, BROTLI_MIN_WINDOW_BITS, BROTLI_MAX_WINDOW_BITS);
    conf->types = valid ? strdup(o->types ? o->types : default_types) : NULL;
    conf->opts.types = NULL; /* the caller's; conf->types is ours */
    xErrno err = !valid ? XERR_INVALID : !conf->types ? XERR_NOMEM : split_types(conf) ? XOK : XERR_INVALID;
    if (err != XOK) {
        xCompressConfDestroy(conf);
        return err;
    }
    *out = conf;
    return XOK;
}

void xCompressConfDestroy(xCompressConf *conf) {
    if (!conf) return;
    free(conf->types);
    free(conf);
}

/* ---- The response's fields ---- */

/* The value of the first field called name (lower case) among lines (as
 * core writes them, "Name: value\r\n"), and where that value starts. */
static bool find_field(const xBuffer *lines, const char *name, xStr *value, size_t *value_at) {
    size_t n = strlen(name);
    const char *p = lines->data, *end = p + lines->len;
    while (p < end) {
        const char *eol = memchr(p, '\r', (size_t)(end - p)); /* values hold no CR */
        if (!eol) break;
        if ((size_t)(eol - p) >= n + 2 && p[n] == ':' && xHttpSameLower(p, name, n)) {
            *value = (xStr){p + n + 2, (size_t)(eol - p - n - 2)};
            if (value_at) *value_at = (size_t)(value->data - lines->data);
            return true;
        }
        p = eol + 2;
    }
    return false;
}

/* True when some field called name (lower case) among lines lists token
 * (in any case): fields that may come more than once, as lists. */
static bool some_field_lists(const xBuffer *lines, const char *name, const char *token) {
    size_t n = strlen(name);
    const char *p = lines->data, *end = p + lines->len;
    while (p < end) {
        const char *eol = memchr(p, '\r', (size_t)(end - p));
        if (!eol) break;
        if ((size_t)(eol - p) >= n + 2 && p[n] == ':' && xHttpSameLower(p, name, n) &&
            xHttpListHasToken((xStr){p + n + 2, (size_t)(eol - p - n - 2)}, token))
            return true;
        p = eol + 2;
    }
    return false;
}

/* True when some Vary field already names Accept-Encoding (or "*"). */
static bool varies_already(const xBuffer *lines) {
    return some_field_lists(lines, "vary", "accept-encoding") || some_field_lists(lines, "vary", "*");
}

/* The response depends on Accept-Encoding: say so to caches. The room was
 * reserved by choose(). */
static void add_vary(xHttpResponse *res) {
    static const char vary[] = "Vary: Accept-Encoding\r\n";
    if (!varies_already(&res->headers)) xBufferAppend(&res->headers, vary, sizeof vary - 1);
}

/* Marks the response as coded: Content-Encoding, Vary, and a strong ETag
 * made weak (RFC 9110 §8.8.1: it named the identity bytes). */
static void mark_coded(xHttpResponse *res, Coding coding) {
    static const char gzip[] = "Content-Encoding: gzip\r\n", br[] = "Content-Encoding: br\r\n";
    if (coding == CODING_GZIP)
        xBufferAppend(&res->headers, gzip, sizeof gzip - 1);
    else
        xBufferAppend(&res->headers, br, sizeof br - 1);
    add_vary(res);
    xStr etag;
    size_t at;
    if (!find_field(&res->headers, "etag", &etag, &at) || etag.len == 0 || etag.data[0] != '"') return;
    if (xBufferReserve(&res->headers, 2) != XOK) return;
    char *p = res->headers.data + at;
    memmove(p + 2, p, res->headers.len - at);
    memcpy(p, "W/", 2);
    res->headers.len += 2;
}

/* True when the media type of a Content-Type value is on the list. */
static bool type_listed(const xCompressConf *conf, xStr type) {
    size_t n = 0;
    while (n < type.len && type.data[n] != ';' && type.data[n] != ' ' && type.data[n] != '\t') n++;
    for (size_t i = 0; i < conf->num_types; i++) {
        xStr t = conf->type[i];
        bool whole_type = t.len >= 2 && t.data[t.len - 2] == '/' && t.data[t.len - 1] == '*';
        size_t cmp = whole_type ? t.len - 1 : t.len;
        if ((whole_type ? n > cmp : n == cmp) && xHttpSameLower(type.data, t.data, cmp)) return true;
    }
    return false;
}

/* Which coding this response gets; *varies: whether the answer depended on
 * Accept-Encoding (so the response carries Vary either way). */
static Coding choose(const Worker *w, xHttpExchange *ex, bool *varies) {
    xHttpResponse *res = &ex->res;
    *varies = false;
    xStr type, coding;
    if (!xHttpStatusHasBody(res->status) || res->status == 206 ||
        !find_field(&res->headers, "content-type", &type, NULL) || !type_listed(w->conf, type) ||
        find_field(&res->headers, "content-encoding", &coding, NULL) ||
        some_field_lists(&res->headers, "cache-control", "no-transform") ||
        xBufferReserve(&res->headers, XCOMPRESS_FIELDS_ROOM) != XOK)
        return CODING_NONE;
    /* A HEAD's answer has no body to code, but has the Vary its GET's would
     * have (RFC 9110 §9.3.2), as the static handler's HEAD has. */
    *varies = true;
    xStr accept;
    if (xStrEqualsC(ex->req.method, "HEAD") || !xHttpRequestHeader(&ex->req, "accept-encoding", &accept))
        return CODING_NONE;
    unsigned encodings = w->conf->opts.encodings;
    int br = encodings & XHTTP_COMPRESS_BROTLI ? xHttpAcceptEncodingQuality(accept, "br") : 0;
    int gzip = encodings & XHTTP_COMPRESS_GZIP ? xHttpAcceptEncodingQuality(accept, "gzip") : 0;
    if (br > 0 && br >= gzip) return CODING_BROTLI;
    return gzip > 0 ? CODING_GZIP : CODING_NONE;
}

/* ---- Whole bodies ---- */

/* body gzipped into a buffer of its own (the caller frees it), or NULL when
 * that fails or saves nothing. */
static void *gzip_whole(Worker *w, const void *body, size_t len, size_t *out_len) {
    const xHttpCompressOptions *o = &w->conf->opts;
    z_stream *z = &w->whole;
    if (len > UINT32_MAX / 2) return NULL;
    if (!w->whole_ready) {
        if (deflateInit2(z, o->gzip_level, Z_DEFLATED, 16 + o->gzip_window_bits, o->gzip_mem_level,
                         Z_DEFAULT_STRATEGY) != Z_OK)
            return NULL;
        w->whole_ready = true;
    } else if (deflateReset(z) != Z_OK) {
        return NULL;
    }
    size_t bound = deflateBound(z, (uLong)len);
    unsigned char *out = malloc(bound);
    if (!out) return NULL;
    z->next_in = (Bytef *)body;
    z->avail_in = (uInt)len;
    z->next_out = out;
    z->avail_out = (uInt)bound;
    if (deflate(z, Z_FINISH) != Z_STREAM_END || z->total_out >= len) {
        free(out);
        return NULL;
    }
    *out_len = z->total_out;
    return out;
}

static void *arena_alloc(void *opaque, size_t size) {
    Arena *a = opaque;
    size = (size + 63) & ~(size_t)63; /* each piece on its own cache lines */
    if (a->base && a->cap - a->used >= size) {
        void *p = a->base + a->used;
        a->used += size;
        return p;
    }
    return malloc(size);
}

static void arena_free(void *opaque, void *p) {
    Arena *a = opaque;
    if (p && (!a->base || (char *)p < a->base || (char *)p >= a->base + a->cap)) free(p);
}

/* An encoder at the settings' quality and window, its memory from alloc and
 * dealloc (NULL: malloc); NULL without memory. */
static BrotliEncoderState *brotli_encoder(const xHttpCompressOptions *o, brotli_alloc_func alloc,
                                          brotli_free_func dealloc, void *opaque) {
    BrotliEncoderState *br = BrotliEncoderCreateInstance(alloc, dealloc, opaque);
    if (br) {
        BrotliEncoderSetParameter(br, BROTLI_PARAM_QUALITY, (uint32_t)o->brotli_quality);
        BrotliEncoderSetParameter(br, BROTLI_PARAM_LGWIN, (uint32_t)o->brotli_window_bits);
    }
    return br;
}

/* The same with Brotli: what BrotliEncoderCompress does, with the worker's
 * arena for the encoder, which lives for this call only. */
static void *brotli_whole(Worker *w, const void *body, size_t len, size_t *out_len) {
    const xHttpCompressOptions *o = &w->conf->opts;
    size_t bound = BrotliEncoderMaxCompressedSize(len);
    unsigned char *out = bound ? malloc(bound) : NULL;
    if (!out) return NULL;
    if (!w->brotli.base && (w->brotli.base = aligned_alloc(64, XCOMPRESS_ARENA)))
        w->brotli.cap = XCOMPRESS_ARENA;
    w->brotli.used = 0; /* the last body's encoder is gone */
    BrotliEncoderState *br = brotli_encoder(o, arena_alloc, arena_free, &w->brotli);
    bool done = false;
    if (br) {
        BrotliEncoderSetParameter(br, BROTLI_PARAM_MODE, BROTLI_MODE_GENERIC);
        BrotliEncoderSetParameter(br, BROTLI_PARAM_SIZE_HINT,
                                  (uint32_t)(len < UINT32_MAX ? len : UINT32_MAX));
        size_t avail_in = len, avail_out = bound;
        const uint8_t *next_in = body;
        uint8_t *next_out = out;
        done = BrotliEncoderCompressStream(br, BROTLI_OPERATION_FINISH, &avail_in, &next_in, &avail_out,
                                           &next_out, NULL) &&
               BrotliEncoderIsFinished(br);
        *out_len = bound - avail_out;
        BrotliEncoderDestroyInstance(br);
    }
    if (!done || *out_len >= len) {
        free(out);
        return NULL;
    }
    return out;
}

static xErrno filter_send(xHttpExchange *ex, const void *body, size_t len, bool copy, void (*release)(void *),
                          void *release_arg) {
    Worker *w = (Worker *)ex->filter;
    bool varies = false;
    Coding coding = len >= w->conf->opts.min_size && !ex->res.aborted ? choose(w, ex, &varies) : CODING_NONE;
    size_t out_len = 0;
    void *out = coding == CODING_GZIP     ? gzip_whole(w, body, len, &out_len)
                : coding == CODING_BROTLI ? brotli_whole(w, body, len, &out_len)
                                          : NULL;
    if (!out) {
        if (varies) add_vary(&ex->res);
        return ex->ops->send(ex, body, len, copy, release, release_arg);
    }
    /* Smaller than deflateBound's worst case by far, usually: give the rest back. */
    void *fitted = out_len < len / 2 ? realloc(out, out_len) : NULL;
    if (fitted) out = fitted;
    mark_coded(&ex->res, coding);
    if (!copy && release) release(release_arg);
    return ex->ops->send(ex, out, out_len, false, free, out);
}

/* ---- Streamed bodies ---- */

static void stream_free(Stream *s) {
    if (s->coding == CODING_GZIP)
        deflateEnd(&s->z);
    else
        BrotliEncoderDestroyInstance(s->br);
    free(s);
}

/* A compressor for ex's streamed body, its fields set; NULL: the body goes
 * as it is (Vary set if that was Accept-Encoding's doing). */
static Stream *stream_start(Worker *w, xHttpExchange *ex) {
    const xHttpCompressOptions *o = &w->conf->opts;
    bool varies = false;
    Coding coding = ex->res.aborted ? CODING_NONE : choose(w, ex, &varies);
    Stream *s = coding != CODING_NONE ? calloc(1, sizeof *s) : NULL;
    bool ready = false;
    if (s && coding == CODING_GZIP) {
        ready = deflateInit2(&s->z, o->gzip_level, Z_DEFLATED, 16 + o->gzip_window_bits, o->gzip_mem_level,
                             Z_DEFAULT_STRATEGY) == Z_OK;
    } else if (s) {
        ready = (s->br = brotli_encoder(o, NULL, NULL, NULL)) != NULL;
    }
    if (!ready) {
        free(s);
        if (coding != CODING_NONE || varies) add_vary(&ex->res);
        return NULL;
    }
    s->coding = coding;
    mark_coded(&ex->res, coding);
    return s;
}

/* Compresses data into the protocol's writes: flushed so the client can
 * decode all of it now, or, with finish, the end of the coded body. */
static xErrno gzip_put(xHttpExchange *ex, Stream *s, const void *data, size_t len, bool finish) {
    unsigned char out[XCOMPRESS_CHUNK];
    xErrno err = XOK;
    while (len > 0 || finish) {
        size_t take = len > UINT32_MAX / 2 ? UINT32_MAX / 2 : len;
        s->z.next_in = (Bytef *)data;
        s->z.avail_in = (uInt)take;
        data = (const char *)data + take;
        len -= take;
        bool last = len == 0;
        int rc;
        do {
            s->z.next_out = out;
            s->z.avail_out = sizeof out;
            rc = deflate(&s->z, !last ? Z_NO_FLUSH : finish ? Z_FINISH : Z_SYNC_FLUSH);
            if (rc == Z_STREAM_ERROR) return XERR_INVALID;
            size_t n = sizeof out - s->z.avail_out;
            if (n && (err = ex->ops->write(ex, out, n)) != XOK) return err;
        } while (s->z.avail_out == 0 || s->z.avail_in > 0);
        if (last) break;
    }
    return err;
}

static xErrno brotli_put(xHttpExchange *ex, Stream *s, const void *data, size_t len, bool finish) {
    unsigned char out[XCOMPRESS_CHUNK];
    const uint8_t *next_in = data;
    size_t avail_in = len;
    BrotliEncoderOperation op = finish ? BROTLI_OPERATION_FINISH : BROTLI_OPERATION_FLUSH;
    for (;;) {
        uint8_t *next_out = out;
        size_t avail_out = sizeof out;
        if (!BrotliEncoderCompressStream(s->br, op, &avail_in, &next_in, &avail_out, &next_out, NULL))
            return XERR_INVALID;
        size_t n = sizeof out - avail_out;
        xErrno err = n ? ex->ops->write(ex, out, n) : XOK;
        if (err != XOK) return err;
        if (avail_in == 0 && !BrotliEncoderHasMoreOutput(s->br) &&
            (!finish || BrotliEncoderIsFinished(s->br)))
            return XOK;
    }
}

static xErrno stream_put(xHttpExchange *ex, Stream *s, const void *data, size_t len, bool finish) {
    return s->coding == CODING_GZIP ? gzip_put(ex, s, data, len, finish)
                                    : brotli_put(ex, s, data, len, finish);
}

static bool filter_start(xHttpExchange *ex, uint64_t len) {
    Worker *w = (Worker *)ex->filter;
    /* A body known to be smaller than min_size saves too little, as a whole one (filter_send). */
    Stream *s = len == UINT64_MAX || len >= w->conf->opts.min_size ? stream_start(w, ex) : NULL;
    if (!s) {
        ex->filter = NULL; /* decided: the rest goes straight to the protocol */
        return false;
    }
    ex->filter_state = s;
    return true;
}

static xErrno filter_write(xHttpExchange *ex, const void *data, size_t len) {
    if (!ex->filter_state && !filter_start(ex, UINT64_MAX)) return ex->ops->write(ex, data, len);
    Stream *s = ex->filter_state;
    if (ex->res.aborted) return XERR_CLOSED;
    if (len == 0) return ex->ops->write(ex, data, 0);
    return stream_put(ex, s, data, len, false);
}

static xErrno filter_end(xHttpExchange *ex) {
    Stream *s = ex->filter_state;
    xErrno err = XOK;
    if (s) {
        if (!ex->res.aborted) err = stream_put(ex, s, NULL, 0, true);
        stream_free(s);
        ex->filter_state = NULL;
    }
    xErrno ended = ex->ops->end(ex);
    return err != XOK ? err : ended;
}

static void filter_drop(xHttpExchange *ex) {
    stream_free(ex->filter_state);
    ex->filter_state = NULL;
}

/* ---- Bodies a handler keeps coded (static files) ---- */

static unsigned filter_codings_for(const xHttpFilter *filter, xStr content_type, uint64_t len) {
    const Worker *w = (const Worker *)filter;
    if (len < w->conf->opts.min_size || !type_listed(w->conf, content_type)) return 0;
    return w->conf->opts.encodings;
}

/* Fitted to its size: the handler keeps it, and counts what it keeps by
 * that size. */
static void *filter_code_whole(xHttpFilter *filter, unsigned coding, const void *body, size_t len,
                               size_t *out_len) {
    Worker *w = (Worker *)filter;
    void *out = coding == XHTTP_COMPRESS_GZIP     ? gzip_whole(w, body, len, out_len)
                : coding == XHTTP_COMPRESS_BROTLI ? brotli_whole(w, body, len, out_len)
                                                  : NULL;
    void *fitted = out ? realloc(out, *out_len) : NULL;
    return fitted ? fitted : out;
}

/* ---- Workers ---- */

xHttpFilter *xCompressFilterCreate(const xCompressConf *conf) {
    Worker *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->base = (xHttpFilter){
        .send = filter_send,
        .write = filter_write,
        .end = filter_end,
        .drop = filter_drop,
        .codings_for = filter_codings_for,
        .code_whole = filter_code_whole,
        .start = filter_start,
    };
    w->conf = conf;
    return &w->base;
}

void xCompressFilterDestroy(xHttpFilter *filter) {
    Worker *w = (Worker *)filter;
    if (!w) return;
    if (w->whole_ready) deflateEnd(&w->whole);
    free(w->brotli.base);
    free(w);
}

void xHttpResponseNoCompress(xHttpResponse *res) {
    xHttpExchange *ex = xHttpExchangeOfResponse(res);
    if (!ex->filter_state) ex->filter = NULL;
}
