/* static.c — the static file handler: settings, and the answer for a file
 * (validators, ranges, twins), sent from the file (see <xhttp/static.h>). */
#include <xhttp/static.h>

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "xbase/mem/sized.h"

#include "xhttp/core/accept.h"
#include "xhttp/core/exchange.h"
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
    };
    xSizedInit(conf, size, &defaults, sizeof defaults);
}

/* Copies the caller's media types: XERR_INVALID when one is not a plain
 * extension and a one-line value. */
static xErrno copy_types(xHttpStatic *files, const xHttpStaticType *types, size_t n) {
    if (n == 0) return XOK;
    if (!types) return XERR_INVALID;
    for (size_t i = 0; i < n; i++)
        if (!types[i].extension || !*types[i].extension || strpbrk(types[i].extension, "./") ||
            !types[i].type || !*types[i].type || strpbrk(types[i].type, "\r\n"))
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
        (conf.index && (!*conf.index || strchr(conf.index, '/') || strlen(conf.index) > NAME_MAX)))
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

/* The qvalue the request's Accept-Encoding fields give coding: the first
 * field that states one (a client may split the list over several). */
static int accept_quality(const xHttpRequest *req, const char *coding) {
    for (size_t i = 0; i < req->num_headers; i++) {
        if (!xHttpNameEquals(req->headers[i].name, "accept-encoding")) continue;
        int q = xHttpAcceptQuality(req->headers[i].value, coding);
        if (q != XHTTP_Q_UNSTATED) return q;
    }
    return XHTTP_Q_UNSTATED;
}

/* Swaps f for its twin in the coding the client prefers, if there is one it
 * accepts that is a regular file not older than f: an older one would hide a
 * file replaced since. Whole seconds: `gzip -k` and `brotli -k` give the twin
 * the file's time, brotli to the second only. name has room for a suffix at
 * len. */
static xStaticFile *pick_twin(const xHttpStatic *files, const xHttpRequest *req, char *name, size_t len,
                              xStaticFile *f) {
    int q[2], identity = accept_quality(req, "identity");
    for (int i = 0; i < 2; i++) q[i] = accept_quality(req, twins[i].coding);
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

static void send_status(xHttpResponse *res, int status) {
    xHttpExchangeSendStatus(xHttpExchangeOf(res), status);
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
static bool not_modified(const xHttpRequest *req, const char *etag, const char *last_modified) {
    xStr value;
    if (xHttpRequestHeader(req, "if-none-match", &value))
        return xHttpStaticEtagListMatches(value, xStrFromC(etag));
    return xHttpRequestHeader(req, "if-modified-since", &value) && xStrEqualsC(value, last_modified);
}

/* RFC 9110 §13.1.5: a Range applies when If-Range is absent or names this
 * very version, by strong ETag or by the exact Last-Modified date. */
static bool range_applies(const xHttpRequest *req, const char *etag, const char *last_modified) {
    xStr value;
    return !xHttpRequestHeader(req, "if-range", &value) || xStrEqualsC(value, etag) ||
           xStrEqualsC(value, last_modified);
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

static const char *media_type(const xHttpStatic *files, const char *name) {
    xStr ext = xHttpStaticExtension(xStrFromC(name));
    for (size_t i = 0; i < files->num_types; i++)
        if (xHttpNameEquals(ext, files->types[i].extension)) return files->types[i].type;
    return xHttpStaticMediaType(ext);
}

/* Answers from f, whose name gives the type; the reference to f is the
 * response's. */
static void serve(const xHttpStatic *files, const xHttpRequest *req, xHttpResponse *res, xStaticFile *f,
                  const char *name) {
    xHttpResponseAddHeader(res, "ETag", f->etag);
    xHttpResponseAddHeader(res, "Last-Modified", f->last_modified);
    if (files->precompressed) xHttpResponseAddHeader(res, "Vary", "Accept-Encoding");
    if (files->cache_control) xHttpResponseAddHeader(res, "Cache-Control", files->cache_control);
    if (not_modified(req, f->etag, f->last_modified)) {
        xHttpStaticPut(f);
        xHttpResponseSetStatus(res, 304);
        xHttpResponseSend(res, NULL, 0);
        return;
    }

    uint64_t size = (uint64_t)f->st.st_size, start = 0, len = size;
    xHttpStaticRange range = XSTATIC_RANGE_WHOLE;
    xStr value;
    if (xStrEqualsC(req->method, "GET") && xHttpRequestHeader(req, "range", &value) &&
        range_applies(req, f->etag, f->last_modified))
        range = xHttpStaticParseRange(value, size, &start, &len);
    if (range == XSTATIC_RANGE_UNSATISFIABLE) {
        xHttpStaticPut(f);
        add_content_range(res, 0, 0, size);
        send_status(res, 416);
        return;
    }
    xHttpResponseAddHeader(res, "Content-Type", media_type(files, name));
    if (f->coding) xHttpResponseAddHeader(res, "Content-Encoding", f->coding);
    xHttpResponseAddHeader(res, "Accept-Ranges", "bytes");
    if (range == XSTATIC_RANGE_PART) {
        add_content_range(res, start, len, size);
        xHttpResponseSetStatus(res, 206);
    }
    xHttpResponseSendFile(res, f->fd, (off_t)start, (size_t)len, xHttpStaticPut, f);
}

xErrno xHttpResponseSendFile(xHttpResponse *res, int fd, off_t offset, size_t len, void (*release)(void *),
                             void *release_arg) {
    if (res->head_sent || res->ended) {
        if (release) release(release_arg);
        return XERR_STATE;
    }
    xHttpExchange *ex = xHttpExchangeOf(res);
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
    if (files->precompressed) f = pick_twin(files, req, name, len, f);
    serve(files, req, res, f, name);
}
