/* static_headers.c — path rules, media types, Range and If-None-Match for the
 * static file handler. */
#include "xhttp/handler/static_headers.h"

#include <string.h>

#include "xhttp/core/tokens.h"

bool xHttpStaticPathIsSafe(xStr path) {
    if (memchr(path.data, '\0', path.len)) return false;
    const char *p = path.data, *end = path.data + path.len;
    while (p < end) {
        const char *slash = memchr(p, '/', (size_t)(end - p));
        size_t n = (size_t)((slash ? slash : end) - p);
        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.')) return false;
        if (!slash) break;
        p = slash + 1; /* a final '/' leaves p at end: allowed */
    }
    return true;
}

/* Extensions (lower case) and their types; what the common servers send, with
 * no charset parameter, as nginx's mime.types has them. */
static const struct {
    const char *ext;
    const char *type;
} media_types[] = {
    {"html", "text/html"},
    {"htm", "text/html"},
    {"css", "text/css"},
    {"js", "application/javascript"},
    {"mjs", "application/javascript"},
    {"json", "application/json"},
    {"map", "application/json"},
    {"txt", "text/plain"},
    {"xml", "text/xml"},
    {"csv", "text/csv"},
    {"md", "text/markdown"},
    {"svg", "image/svg+xml"},
    {"png", "image/png"},
    {"jpg", "image/jpeg"},
    {"jpeg", "image/jpeg"},
    {"gif", "image/gif"},
    {"webp", "image/webp"},
    {"avif", "image/avif"},
    {"ico", "image/x-icon"},
    {"woff", "font/woff"},
    {"woff2", "font/woff2"},
    {"ttf", "font/ttf"},
    {"otf", "font/otf"},
    {"wasm", "application/wasm"},
    {"pdf", "application/pdf"},
    {"zip", "application/zip"},
    {"gz", "application/gzip"},
    {"br", "application/x-brotli"},
    {"mp4", "video/mp4"},
    {"webm", "video/webm"},
    {"mp3", "audio/mpeg"},
    {"ogg", "audio/ogg"},
};

xStr xHttpStaticExtension(xStr name) {
    size_t dot = name.len;
    while (dot > 0 && name.data[dot - 1] != '.' && name.data[dot - 1] != '/') dot--;
    /* ".profile" is a name, not an extension */
    if (dot < 2 || name.data[dot - 1] != '.' || name.data[dot - 2] == '/') return (xStr){name.data, 0};
    return (xStr){name.data + dot, name.len - dot};
}

const char *xHttpStaticMediaType(xStr extension) {
    for (size_t i = 0; i < sizeof media_types / sizeof media_types[0]; i++)
        if (strlen(media_types[i].ext) == extension.len &&
            xHttpSameLower(extension.data, media_types[i].ext, extension.len))
            return media_types[i].type;
    return "application/octet-stream";
}

/* Reads 1*DIGIT at *p, saturating at UINT64_MAX; false when there is none. */
static bool take_number(const char **p, const char *end, uint64_t *out) {
    const char *s = *p;
    uint64_t v = 0;
    while (*p < end && **p >= '0' && **p <= '9') {
        unsigned d = (unsigned)(**p - '0');
        v = v > (UINT64_MAX - d) / 10 ? UINT64_MAX : v * 10 + d;
        (*p)++;
    }
    *out = v;
    return *p > s;
}

xHttpStaticRange xHttpStaticParseRange(xStr field, uint64_t size, uint64_t *start, uint64_t *len) {
    const char *p = field.data, *end = field.data + field.len;
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    while (end > p && (end[-1] == ' ' || end[-1] == '\t')) end--;
    if (end - p < 6 || !xHttpSameLower(p, "bytes=", 6)) return XSTATIC_RANGE_WHOLE;
    p += 6;
    uint64_t first, last;
    bool has_first = take_number(&p, end, &first);
    if (p == end || *p != '-') return XSTATIC_RANGE_WHOLE;
    p++;
    bool has_last = take_number(&p, end, &last);
    if (p != end || (!has_first && !has_last)) return XSTATIC_RANGE_WHOLE; /* several, or junk */
    if (!has_first) {                                                      /* the last `last` bytes */
        if (last == 0 || size == 0) return XSTATIC_RANGE_UNSATISFIABLE;
        *len = last < size ? last : size;
        *start = size - *len;
        return XSTATIC_RANGE_PART;
    }
    if (has_last && last < first) return XSTATIC_RANGE_WHOLE; /* invalid: ignored */
    if (first >= size) return XSTATIC_RANGE_UNSATISFIABLE;
    if (!has_last || last >= size) last = size - 1;
    *start = first;
    *len = last - first + 1;
    return XSTATIC_RANGE_PART;
}

/* The opaque part of an entity-tag ("\"abc\"" → abc), W/ dropped. */
static xStr opaque_tag(xStr etag) {
    if (etag.len >= 2 && etag.data[0] == 'W' && etag.data[1] == '/')
        etag = (xStr){etag.data + 2, etag.len - 2};
    if (etag.len >= 2) return (xStr){etag.data + 1, etag.len - 2};
    return (xStr){etag.data, 0};
}

bool xHttpStaticEtagListMatches(xStr list, xStr etag) {
    xStr want = opaque_tag(etag);
    const char *p = list.data, *end = list.data + list.len;
    while (p < end) {
        while (p < end && (*p == ' ' || *p == '\t' || *p == ',')) p++;
        if (p == end) break;
        if (*p == '*') return true;
        if (end - p >= 2 && p[0] == 'W' && p[1] == '/') p += 2;
        if (p == end || *p != '"') return false;
        const char *close = memchr(p + 1, '"', (size_t)(end - p - 1));
        if (!close) return false;
        size_t n = (size_t)(close - p - 1);
        if (n == want.len && memcmp(p + 1, want.data, n) == 0) return true;
        p = close + 1;
    }
    return false;
}
