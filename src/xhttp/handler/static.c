/* static.c — the static file handler: settings, and the answer for a file
 * (validators, ranges, twins, compression), sent from the file or from
 * memory (see <xhttp/static.h>). */
#include <xhttp/static.h>

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <xhttp/compress.h>

#include "xbase/mem/sized.h"

#include "xhttp/core/accept.h"
#include "xhttp/core/exchange.h"
#include "xhttp/core/finished.h"
#include "xhttp/core/tokens.h"
#include "xhttp/handler/static_headers.h"
#include "xhttp/handler/static_internal.h"

/* Files served as a twin, in the order a tie between the client's qvalues is
 * broken: brotli is the smaller. */
static const struct {
    const char *coding;
    const char *suffix;
} twins[] = {{"br", ".br"}, {"gzip", ".gz"}};

void xHttpStaticConfInitSized(xHttpStaticConf *conf, size_t size) {
    xHttpStaticConf defaults = {
        .index = "index.html",
        .precompressed = true,
        .cache_ms = 1000,
        .cache_entries = 1024,
        .keep_file_max = 16384,
        .keep_bytes_max = 4u << 20,
        .compress_on_the_fly = true,
        .compress_file_max = 1u << 20,
        .compress_bytes_max = 4u << 20,
    };
    xSizedInit(conf, size, &defaults, sizeof defaults);
}

/* True for a header value the handler may send as it is: no control
 * characters but tab (RFC 9110 §5.5), and not empty. */
static bool is_field_value(const char *value) {
    if (!value || !*value) return false;
    for (const unsigned char *p = (const unsigned char *)value; *p; p++)
        if (!xHttpIsFieldChar(*p)) return false;
    return true;
}

/* Copies the caller's media types: XERR_INVALID when one is not a plain
 * extension and a field value. */
static xErrno copy_types(xHttpStatic *files, const xHttpStaticType *types, size_t n) {
    if (n == 0) return XOK;
    if (!types) return XERR_INVALID;
    for (size_t i = 0; i < n; i++)
        if (!types[i].extension || !*types[i].extension || strpbrk(types[i].extension, "./") ||
            !is_field_value(types[i].type))
            return XERR_INVALID;
    if (!(files->types = calloc(n, sizeof *files->types))) return XERR_NOMEM;
    files->num_types = n;
    for (size_t i = 0; i < n; i++) {
        files->types[i].extension = strdup(types[i].extension);
        files->types[i].type = strdup(types[i].type);
        if (!files->types[i].extension || !files->types[i].type) return XERR_NOMEM;
    }
    return XOK;
}

static char *copy_or_null(const char *s, bool *failed) {
    if (!s) return NULL;
    char *copy = strdup(s);
    if (!copy) *failed = true;
    return copy;
}

xErrno xHttpStaticCreate(const xHttpStaticConf *user, xHttpStatic **out) {
    xHttpStaticConf conf;
    xHttpStaticConfInit(&conf);
    if (!user || !out) return XERR_INVALID;
    xSizedAdopt(&conf, user, sizeof conf);
    if (!conf.root || !*conf.root ||
        (conf.index && (!*conf.index || strchr(conf.index, '/') || strlen(conf.index) > NAME_MAX)) ||
        (conf.cache_control && !is_field_value(conf.cache_control)))
        return XERR_INVALID;
    xHttpStatic *files = calloc(1, sizeof *files);
    if (!files) return XERR_NOMEM;
    bool failed = false;
    files->root_fd = -1;
    files->index = copy_or_null(conf.index, &failed);
    files->cache_control = copy_or_null(conf.cache_control, &failed);
    files->precompressed = conf.precompressed;
    files->cache_ms = conf.cache_ms;
    files->cache_entries = conf.cache_entries;
    files->keep_file_max = conf.keep_file_max;
    files->keep_bytes_max = conf.keep_bytes_max;
    /* A Cache-Control of ours that says no-transform (RFC 9111 §5.2.2.6)
     * asks every cache on the way to keep the bytes as they are; we keep to
     * it too, as the compression filter does for a handler's no-transform. */
    files->compress_on_the_fly =
        conf.compress_on_the_fly &&
        !(conf.cache_control && xHttpListHasToken(xStrFromC(conf.cache_control), "no-transform"));
    files->compress_file_max = conf.compress_file_max;
    files->compress_bytes_max = conf.compress_bytes_max;
    xErrno err = failed ? XERR_NOMEM : copy_types(files, conf.types, conf.num_types);
    if (err == XOK) err = xHttpStaticCachesInit(files);
    if (err != XOK) {
        xHttpStaticDestroy(files);
        return err;
    }
    if (xHttpStaticOpenRoot(files, conf.root) != XOK) {
        int saved = errno;
        xHttpStaticDestroy(files);
        errno = saved;
        return XERR_SYS;
    }
    *out = files;
    return XOK;
}

void xHttpStaticDestroy(xHttpStatic *files) {
    if (!files) return;
    xHttpStaticCachesFree(files);
    if (files->root_fd >= 0) close(files->root_fd);
    free(files->index);
    free(files->cache_control);
    for (size_t i = 0; i < files->num_types; i++) {
        free((char *)files->types[i].extension);
        free((char *)files->types[i].type);
    }
    free(files->types);
    free(files);
}

/* The route's "*" capture, or the path without its '/' on a route without one. */
static xStr file_path(const xHttpRequest *req) {
    for (size_t i = 0; i < req->num_params; i++)
        if (xStrEqualsC(req->params[i].name, "*")) return req->params[i].value;
    xStr path = req->path;
    return path.len ? (xStr){path.data + 1, path.len - 1} : path;
}

/* What a request asks of a file, read in one pass over its fields. */
typedef struct Asked {
    xStr if_none_match, if_modified_since, range, if_range;
    bool has_if_none_match, has_if_modified_since, has_range, has_if_range;
    int q[3]; /* the qvalues of twins[0], twins[1] and identity */
} Asked;

/* Keeps value in *to when name (of lower's length) is lower and no field
 * of that name came before. */
static void take(xStr name, const char *lower, xStr value, xStr *to, bool *has) {
    if (*has || !xHttpSameLower(name.data, lower, name.len)) return;
    *to = value;
    *has = true;
}

/* The first of each field; each Accept-Encoding field until one states a
 * coding's qvalue (a client may split the list over several). */
static void read_request(const xHttpRequest *req, Asked *a) {
    static const char *const codings[3] = {"br", "gzip", "identity"};
    memset(a, 0, sizeof *a);
    for (int i = 0; i < 3; i++) a->q[i] = XHTTP_Q_UNSTATED;
    for (size_t i = 0; i < req->num_headers; i++) {
        xStr name = req->headers[i].name, value = req->headers[i].value;
        switch (name.len) {
        case 5: take(name, "range", value, &a->range, &a->has_range); break;
        case 8: take(name, "if-range", value, &a->if_range, &a->has_if_range); break;
        case 13: take(name, "if-none-match", value, &a->if_none_match, &a->has_if_none_match); break;
        case 17:
            take(name, "if-modified-since", value, &a->if_modified_since, &a->has_if_modified_since);
            break;
        case 15: {
            if (!xHttpSameLower(name.data, "accept-encoding", 15)) break;
            int q[3];
            xHttpAcceptQualities(value, codings, 3, q);
            for (int k = 0; k < 3; k++)
                if (a->q[k] == XHTTP_Q_UNSTATED) a->q[k] = q[k];
            break;
        }
        }
    }
}

/* Swaps f for its twin in the coding the client prefers, if there is one it
 * accepts that is a regular file not older than f: an older one would hide a
 * file replaced since. Whole seconds: `gzip -k` and `brotli -k` give the twin
 * the file's time, brotli to the second only. name has room for a suffix at
 * len. */
static xStaticFile *pick_twin(const xHttpStatic *files, const xHttpRequest *req, const Asked *a, char *name,
                              size_t len, xStaticFile *f) {
    const int *q = a->q, identity = a->q[2];
    int order[2] = {q[1] > q[0], q[1] <= q[0]};
    for (int k = 0; k < 2; k++) {
        int i = order[k];
        if (q[i] <= 0 || q[i] < identity) continue;
        memcpy(name + len, twins[i].suffix, 4);
        xStaticFile *twin = xHttpStaticGet(files, req->loop, name, len + 3, false, twins[i].coding);
        name[len] = '\0';
        if (twin && twin->status == 0 && twin->st.st_mtim.tv_sec >= f->st.st_mtim.tv_sec) {
            xHttpStaticPut(f);
            return twin;
        }
        if (twin) xHttpStaticPut(twin);
    }
    return f;
}

static const char vary_line[] = "Vary: Accept-Encoding\r\n";

static void send_status(xHttpResponse *res, int status) {
    xHttpExchangeSendStatus(xHttpExchangeOfResponse(res), status);
}

/* A directory named without its final '/': where its index is. */
static void redirect_to_directory(const xHttpRequest *req, xHttpResponse *res) {
    size_t cap = req->path.len + req->query.len + 3;
    char *location = malloc(cap);
    if (!location) {
        send_status(res, 500);
        return;
    }
    char *p = location;
    memcpy(p, req->path.data, req->path.len);
    p += req->path.len;
    *p++ = '/';
    if (req->query.len) {
        *p++ = '?';
        memcpy(p, req->query.data, req->query.len);
        p += req->query.len;
    }
    *p = '\0';
    xHttpResponseAddHeader(res, "Location", location);
    free(location);
    send_status(res, 301);
}

/* RFC 9110 §13.1.2 and §13.1.3: If-None-Match, or without it an
 * If-Modified-Since equal to our Last-Modified. */
static bool not_modified(const Asked *a, const xStaticFile *f) {
    if (a->has_if_none_match) return xHttpStaticEtagListMatches(a->if_none_match, xStrFromC(f->etag));
    return a->has_if_modified_since && xStrEqualsC(a->if_modified_since, f->last_modified);
}

/* RFC 9110 §13.1.5: a Range applies when If-Range is absent or names this
 * very version, by strong ETag or by the exact Last-Modified date. */
static bool range_applies(const Asked *a, const xStaticFile *f) {
    return !a->has_if_range || xStrEqualsC(a->if_range, f->etag) ||
           xStrEqualsC(a->if_range, f->last_modified);
}

static void add_content_range(xHttpResponse *res, uint64_t start, uint64_t len, uint64_t size) {
    char value[3 * XHTTP_DECIMAL_MAX + 16], *p = value;
    memcpy(p, "bytes ", 6);
    p += 6;
    if (len) {
        p = xHttpPutDecimal(p, start);
        *p++ = '-';
        p = xHttpPutDecimal(p, start + len - 1);
    } else {
        *p++ = '*';
    }
    *p++ = '/';
    p = xHttpPutDecimal(p, size);
    *p = '\0';
    xHttpResponseAddHeader(res, "Content-Range", value);
}

/* Sends len bytes from start of f's content by reference, until the
 * response lets go of f. Past the compression filter, as a file is: its
 * twins are what this handler offers instead. */
static void send_kept(xHttpResponse *res, xStaticFile *f, uint64_t start, uint64_t len) {
    xHttpExchange *ex = xHttpExchangeOfResponse(res);
    xHttpExchangeFinished(ex, res->status, len);
    ex->ops->send(ex, f->content + start, (size_t)len, false, xHttpStaticPut, f);
}

/* The first len bytes of f's head; with varies, "Vary: Accept-Encoding" too
 * where the head has none (files without twins): the answer would have been
 * compressed for another client. */
static void add_head(const xHttpStatic *files, xHttpResponse *res, const xStaticFile *f, size_t len,
                     bool varies) {
    xBufferAppend(&res->headers, f->head, len);
    if (varies && !files->precompressed) xBufferAppend(&res->headers, vary_line, sizeof vary_line - 1);
}

/* Answers from f's own bytes; the reference to f is the response's. */
static void serve(const xHttpStatic *files, const xHttpRequest *req, const Asked *a, xHttpResponse *res,
                  xStaticFile *f, bool varies) {
    if (not_modified(a, f)) {
        add_head(files, res, f, f->validators_len, varies);
        xHttpStaticPut(f);
        xHttpResponseSetStatus(res, 304);
        xHttpResponseSend(res, NULL, 0);
        return;
    }
    uint64_t size = (uint64_t)f->st.st_size, start = 0, len = size;
    xHttpStaticRange range = XSTATIC_RANGE_WHOLE;
    if (a->has_range && range_applies(a, f) && xStrEqualsC(req->method, "GET"))
        range = xHttpStaticParseRange(a->range, size, &start, &len);
    if (range == XSTATIC_RANGE_UNSATISFIABLE) {
        add_head(files, res, f, f->validators_len, varies);
        xHttpStaticPut(f);
        add_content_range(res, 0, 0, size);
        send_status(res, 416);
        return;
    }
    add_head(files, res, f, f->head_len, varies);
    if (range == XSTATIC_RANGE_PART) {
        add_content_range(res, start, len, size);
        xHttpResponseSetStatus(res, 206);
    }
    if (f->content)
        send_kept(res, f, start, len);
    else
        xHttpResponseSendFile(res, f->fd, (off_t)start, (size_t)len, xHttpStaticPut, f);
}

/* ---- Compressed on the fly ---- */

/* The coding f is compressed in for this request, an XHTTP_COMPRESS_* bit,
 * or 0: its own bytes go. *varies: whether that turned on Accept-Encoding.
 * Chosen as twins are (pick_twin): the higher qvalue above 0, not below
 * identity's, Brotli on a tie; a twin the client takes came first. */
static unsigned coding_for(const xHttpStatic *files, xHttpExchange *ex, const Asked *a, xStaticFile *f,
                           bool *varies) {
    xHttpFilter *filter = ex->filter;
    *varies = false;
    if (!files->compress_on_the_fly || !filter || !filter->codings_for || f->coding || f->st.st_size == 0 ||
        (uint64_t)f->st.st_size > files->compress_file_max)
        return 0;
    if (f->codings_of != filter) { /* once per opening: the type's lookup in the filter's list */
        f->codings = filter->codings_for(filter, xStrFromC(f->type), (uint64_t)f->st.st_size);
        f->codings_of = filter;
    }
    if (!f->codings) return 0;
    *varies = true;
    int br = f->codings & XHTTP_COMPRESS_BROTLI ? a->q[0] : 0;
    int gzip = f->codings & XHTTP_COMPRESS_GZIP ? a->q[1] : 0;
    int best = br >= gzip ? br : gzip;
    if (best <= 0 || best < a->q[2]) return 0;
    return br >= gzip ? XHTTP_COMPRESS_BROTLI : XHTTP_COMPRESS_GZIP;
}

/* True when a Range asks for a part of f, or for none of it: the file's own
 * bytes answer that (206, 416), since a range counts bytes of the file, not
 * of one compression of it (nor would a weak ETag hold a client's If-Range). */
static bool range_asked(const xHttpRequest *req, const Asked *a, const xStaticFile *f) {
    uint64_t start, len;
    return a->has_range && range_applies(a, f) && xStrEqualsC(req->method, "GET") &&
           xHttpStaticParseRange(a->range, (uint64_t)f->st.st_size, &start, &len) != XSTATIC_RANGE_WHOLE;
}

/* The validators of f compressed: its ETag made weak (RFC 9110 §8.8.1: the
 * bytes differ from the file's, as the filter does for handlers' bodies),
 * then the rest of head's, with Vary. */
static void add_coded_validators(const xHttpStatic *files, xHttpResponse *res, const xStaticFile *f) {
    static const char weak[] = "ETag: W/";
    xBufferAppend(&res->headers, weak, sizeof weak - 1);
    xBufferAppend(&res->headers, f->head + 6, f->validators_len - 6); /* past "ETag: " */
    if (!files->precompressed) xBufferAppend(&res->headers, vary_line, sizeof vary_line - 1);
}

/* The head of f compressed in coding: no Accept-Ranges (see range_asked). */
static void add_coded_head(const xHttpStatic *files, xHttpResponse *res, const xStaticFile *f,
                           unsigned coding) {
    static const char br[] = "Content-Encoding: br\r\n", gzip[] = "Content-Encoding: gzip\r\n";
    add_coded_validators(files, res, f);
    xBufferAppend(&res->headers, f->head + f->validators_len, f->type_end - f->validators_len);
    if (coding == XHTTP_COMPRESS_BROTLI)
        xBufferAppend(&res->headers, br, sizeof br - 1);
    else
        xBufferAppend(&res->headers, gzip, sizeof gzip - 1);
}

/* f's bytes compressed as key says, by the worker's filter: from memory
 * when f keeps them, else read whole (f is at most compress_file_max long).
 * An entry for them, kept in cache when there is one and it fits; NULL when
 * the file is not as long as it was (being rewritten) or out of memory. */
static xStaticCoded *compress_file(xHttpFilter *filter, xStaticCodedCache *cache, const xStaticFile *f,
                                   const xStaticCodedKey *key) {
    size_t size = (size_t)f->st.st_size, len = 0;
    char *read = NULL;
    const char *bytes = f->content;
    if (!bytes) {
        if (!(read = malloc(size)) || !xHttpStaticReadWhole(f, read)) {
            free(read);
            return NULL;
        }
        bytes = read;
    }
    void *coded = filter->code_whole(filter, key->coding, bytes, size, &len);
    free(read);
    return xStaticCodedKeep(cache, key, coded, len);
}

/* Answers from f compressed in coding: the worker's kept bytes of this
 * version of f, else compressed now (and kept); the reference to f is the
 * response's. False, with nothing done, when compressing f does not shrink
 * it (or fails): its own bytes are the answer. */
static bool serve_coded(const xHttpStatic *files, const xHttpRequest *req, const Asked *a, xHttpResponse *res,
                        xStaticFile *f, unsigned coding) {
    xHttpExchange *ex = xHttpExchangeOfResponse(res);
    xStaticCodedCache *cache = xHttpStaticCodedCacheOf(files, req->loop);
    xStaticCodedKey key = xStaticCodedKeyOf(&f->st, coding);
    xStaticCoded *coded = cache ? xStaticCodedFind(cache, &key) : NULL;
    bool shrinks = !coded || coded->bytes; /* not yet compressed: presumed, as text nearly always does */
    if (shrinks && not_modified(a, f)) {
        if (coded) xStaticCodedPut(coded);
        add_coded_validators(files, res, f);
        xHttpStaticPut(f);
        xHttpResponseSetStatus(res, 304);
        xHttpResponseSend(res, NULL, 0);
        return true;
    }
    if (!coded) coded = compress_file(ex->filter, cache, f, &key);
    if (!coded || !coded->bytes) {
        if (coded) xStaticCodedPut(coded);
        return false;
    }
    add_coded_head(files, res, f, coding);
    xHttpStaticPut(f);
    xHttpExchangeFinished(ex, res->status, coded->len);
    ex->ops->send(ex, coded->bytes, coded->len, false, xStaticCodedPut, coded);
    return true;
}

xErrno xHttpResponseSendFile(xHttpResponse *res, int fd, off_t offset, size_t len, void (*release)(void *),
                             void *release_arg) {
    if (res->head_sent || res->ended) {
        if (release) release(release_arg);
        return XERR_STATE;
    }
    xHttpExchange *ex = xHttpExchangeOfResponse(res);
    xHttpExchangeFinished(ex, res->status, len); /* counted and logged as any response */
    return ex->ops->send_file(ex, fd, offset, len, release, release_arg);
}

void xHttpStaticHandler(xHttpRequest *req, xHttpResponse *res, void *arg) {
    const xHttpStatic *files = arg;
    if (!xStrEqualsC(req->method, "GET") && !xStrEqualsC(req->method, "HEAD")) {
        xHttpResponseAddHeader(res, "Allow", "GET, HEAD");
        send_status(res, 405);
        return;
    }
    char name[XSTATIC_NAME_ROOM];
    size_t len;
    bool directory_named;
    int status = xHttpStaticName(files, file_path(req), name, &len, &directory_named);
    xStaticFile *f = status ? NULL : xHttpStaticGet(files, req->loop, name, len, directory_named, NULL);
    if (!status) status = !f ? 500 : f->status;
    if (status) {
        if (f) xHttpStaticPut(f);
        if (status == 301)
            redirect_to_directory(req, res);
        else
            send_status(res, status);
        return;
    }
    Asked asked;
    read_request(req, &asked);
    if (files->precompressed) f = pick_twin(files, req, &asked, name, len, f);
    bool varies;
    unsigned coding = coding_for(files, xHttpExchangeOfResponse(res), &asked, f, &varies);
    if (!coding || range_asked(req, &asked, f) || !serve_coded(files, req, &asked, res, f, coding))
        serve(files, req, &asked, res, f, varies);
}
