/* access_format.c — access log lines: common, combined and JSON. */
#include "xhttp/observe/access_format.h"

#include <stdio.h>
#include <string.h>

#include "xbase/text/utf8.h"

static const char hex[] = "0123456789abcdef";

void xAccessClockSet(xAccessClock *clock, time_t second) {
    static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    if (clock->second == second) return;
    struct tm tm;
    localtime_r(&second, &tm);
    long off = tm.tm_gmtoff / 60;
    char sign = off < 0 ? '-' : '+';
    if (off < 0) off = -off;
    snprintf(clock->clf, sizeof clock->clf, "[%02d/%s/%04d:%02d:%02d:%02d %c%02ld%02ld]", tm.tm_mday,
             months[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec, sign, off / 60,
             off % 60);
    snprintf(clock->iso, sizeof clock->iso, "%04d-%02d-%02dT%02d:%02d:%02d%c%02ld:%02ld", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, sign, off / 60, off % 60);
    clock->second = second;
}

/* Lines are built in place: each writer gets room for its worst case. */
typedef struct Line {
    char *p;
} Line;

static void put(Line *l, const char *s, size_t n) {
    memcpy(l->p, s, n);
    l->p += n;
}

static void put_c(Line *l, const char *s) { put(l, s, strlen(s)); }

static void put_u64(Line *l, uint64_t v) {
    char digits[20];
    int n = 0;
    do digits[n++] = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    while (n) *l->p++ = digits[--n];
}

/* The common formats' escaping, nginx's: '"', '\', controls and bytes from
 * 0x7f as \xHH, so a quoted field ends only at its closing quote. At most 4
 * bytes per byte. */
static void put_clf(Line *l, xStr s) {
    for (size_t i = 0; i < s.len; i++) {
        unsigned char c = (unsigned char)s.data[i];
        if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') {
            *l->p++ = '\\';
            *l->p++ = 'x';
            *l->p++ = hex[c >> 4];
            *l->p++ = hex[c & 15];
        } else {
            *l->p++ = (char)c;
        }
    }
}

/* An unquoted common-format field: "-" when absent or empty. */
static void put_clf_bare(Line *l, xStr s) {
    if (!s.data || !s.len)
        *l->p++ = '-';
    else
        put_clf(l, s);
}

/* A quoted common-format field: "-" when absent. */
static void put_clf_quoted(Line *l, xStr s) {
    *l->p++ = '"';
    if (s.data)
        put_clf(l, s);
    else
        *l->p++ = '-';
    *l->p++ = '"';
}

/* A JSON string's content (RFC 8259): at most 6 bytes per byte. */
static void put_json_chars(Line *l, xStr s) {
    const unsigned char *b = (const unsigned char *)s.data;
    for (size_t i = 0; i < s.len;) {
        unsigned char c = b[i];
        size_t n = c >= 0x80 ? xUtf8Sequence(b + i, s.len - i) : 0;
        if (n) {
            put(l, s.data + i, n);
            i += n;
            continue;
        }
        i++;
        if (c == '"' || c == '\\') {
            *l->p++ = '\\';
            *l->p++ = (char)c;
        } else if (c == '\n') {
            put(l, "\\n", 2);
        } else if (c == '\r') {
            put(l, "\\r", 2);
        } else if (c == '\t') {
            put(l, "\\t", 2);
        } else if (c < 0x20 || c >= 0x7f) {
            put(l, "\\u00", 4);
            *l->p++ = hex[c >> 4];
            *l->p++ = hex[c & 15];
        } else {
            *l->p++ = (char)c;
        }
    }
}

/* A JSON string, or null when absent. */
static void put_json(Line *l, xStr s) {
    if (!s.data) {
        put(l, "null", 4);
        return;
    }
    *l->p++ = '"';
    put_json_chars(l, s);
    *l->p++ = '"';
}

/* The JSON format's own names, which a handler's field may not take. */
static const char *const json_names[] = {
    "time",  "remote_addr", "remote_port", "method",  "target",     "protocol", "status",
    "bytes", "duration_ms", "duration_us", "referer", "user_agent", "tls",      "websocket",
};

bool xAccessFieldKeyAllowed(const char *key) {
    size_t n = strlen(key);
    if (n == 0 || n > 64) return false;
    for (size_t i = 0; i < n; i++) {
        char c = key[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
              c == '.' || c == '-'))
            return false;
    }
    for (size_t i = 0; i < sizeof json_names / sizeof *json_names; i++)
        if (strcmp(key, json_names[i]) == 0) return false;
    return true;
}

bool xAccessNextField(xAccessField *f) {
    if (!f->rest.len) return false;
    f->key = (xStr){f->rest.data, strlen(f->rest.data)};
    f->value = (xStr){f->key.data + f->key.len + 1, strlen(f->key.data + f->key.len + 1)};
    size_t used = f->key.len + f->value.len + 2;
    f->rest = (xStr){f->rest.data + used, f->rest.len - used};
    return true;
}

/* The request's target, path and query, as one string field. */
static void put_target_clf(Line *l, const xAccessRecord *rec) {
    put_clf(l, rec->path);
    if (rec->query.len) {
        *l->p++ = '?';
        put_clf(l, rec->query);
    }
}

static void format_common(Line *l, const xAccessClock *clock, const xAccessRecord *rec, bool combined) {
    put_clf_bare(l, rec->address);
    put(l, " - - ", 5);
    put_c(l, clock->clf);
    put(l, " \"", 2);
    put_clf(l, rec->method);
    *l->p++ = ' ';
    put_target_clf(l, rec);
    *l->p++ = ' ';
    put_clf(l, rec->protocol);
    put(l, "\" ", 2);
    put_u64(l, (uint64_t)rec->status);
    *l->p++ = ' ';
    put_u64(l, rec->bytes);
    if (combined) {
        *l->p++ = ' ';
        put_clf_quoted(l, rec->referer);
        *l->p++ = ' ';
        put_clf_quoted(l, rec->user_agent);
    }
    for (xAccessField f = {.rest = rec->fields}; xAccessNextField(&f);) {
        *l->p++ = ' ';
        put(l, f.key.data, f.key.len);
        put(l, "=\"", 2);
        put_clf(l, f.value);
        *l->p++ = '"';
    }
}

static void format_json(Line *l, const xAccessClock *clock, const xAccessRecord *rec) {
    put_c(l, "{\"time\":\"");
    put_c(l, clock->iso);
    put_c(l, "\",\"remote_addr\":");
    put_json(l, rec->address.len ? rec->address : (xStr){NULL, 0});
    put_c(l, ",\"remote_port\":");
    put_u64(l, rec->port);
    put_c(l, ",\"method\":");
    put_json(l, rec->method);
    put_c(l, ",\"target\":\"");
    put_json_chars(l, rec->path);
    if (rec->query.len) {
        *l->p++ = '?';
        put_json_chars(l, rec->query);
    }
    put_c(l, "\",\"protocol\":");
    put_json(l, rec->protocol);
    put_c(l, ",\"status\":");
    put_u64(l, (uint64_t)rec->status);
    put_c(l, ",\"bytes\":");
    put_u64(l, rec->bytes);
    put_c(l, ",\"duration_ms\":");
    put_u64(l, rec->duration_us / 1000);
    put_c(l, ",\"duration_us\":");
    put_u64(l, rec->duration_us);
    put_c(l, ",\"referer\":");
    put_json(l, rec->referer);
    put_c(l, ",\"user_agent\":");
    put_json(l, rec->user_agent);
    put_c(l, ",\"tls\":");
    put_json(l, rec->tls);
    if (rec->session) {
        put_c(l, ",\"websocket\":{\"messages_in\":");
        put_u64(l, rec->messages_in);
        put_c(l, ",\"messages_out\":");
        put_u64(l, rec->messages_out);
        put_c(l, ",\"bytes_in\":");
        put_u64(l, rec->bytes_in);
        put_c(l, ",\"bytes_out\":");
        put_u64(l, rec->bytes_out);
        *l->p++ = '}';
    }
    for (xAccessField f = {.rest = rec->fields}; xAccessNextField(&f);) {
        put(l, ",\"", 2);
        put(l, f.key.data, f.key.len);
        put(l, "\":\"", 3);
        put_json_chars(l, f.value);
        *l->p++ = '"';
    }
    *l->p++ = '}';
}

xErrno xAccessFormat(xBuffer *out, xHttpLogFormat format, const xAccessClock *clock,
                     const xAccessRecord *rec) {
    size_t strings = rec->address.len + rec->method.len + rec->path.len + rec->query.len + rec->protocol.len +
                     rec->referer.len + rec->user_agent.len + rec->tls.len + rec->fields.len;
    /* 6 bytes per escaped byte, plus the names, times and numbers (and each
     * field's quotes and separators, fewer than 6 bytes per field's two NULs). */
    xErrno err = xBufferReserve(out, strings * 6 + 512);
    if (err != XOK) return err;
    Line l = {out->data + out->len};
    if (format == XHTTP_LOG_JSON)
        format_json(&l, clock, rec);
    else
        format_common(&l, clock, rec, format == XHTTP_LOG_COMBINED);
    *l.p++ = '\n';
    out->len = (size_t)(l.p - out->data);
    return XOK;
}
