/* http1_parser.c — the strict HTTP/1.1 request and response parsers and chunked decoder.
 *
 * A head is handled in two steps. First a cheap scan for its end, LF by LF,
 * resumed at prev_len, checking only that each LF follows a CR and that
 * the request line and the head stay within their limits, so a slow client
 * costs no rescanning. Then, once the head is complete, one validating pass
 * that stops at the first violation. That pass needs no bounds checks in its
 * byte loops: the head is known to end in CRLFCRLF and every loop stops at CR. */
#include "xhttp/http1/http1_parser.h"
#include "xhttp/core/tokens.h"

#include <limits.h>
#include <string.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* ---- Character classes (RFC 9110 §5.5, §5.6) ---- */

enum {
    C_TCHAR = 1,   /* token */
    C_VCHAR = 2,   /* request-target byte: visible ASCII */
    C_FIELD = 4,   /* field-value byte: VCHAR, obs-text, SP, HTAB */
    C_HOST = 8,    /* Host and authority byte: VCHAR minus / ? # @ */
    C_QDTEXT = 16, /* quoted-string byte that needs no escape */
};

#define IS_VCHAR(c) ((c) >= 0x21 && (c) <= 0x7E)
#define IS_HOST(c) (IS_VCHAR(c) && (c) != '/' && (c) != '?' && (c) != '#' && (c) != '@')
#define IS_QDTEXT(c) (XHTTP_IS_FIELD_CHAR(c) && (c) != '"' && (c) != '\\')
#define CLASS(c)                                                                                             \
    (XHTTP_IS_TCHAR(c) * C_TCHAR | IS_VCHAR(c) * C_VCHAR | XHTTP_IS_FIELD_CHAR(c) * C_FIELD |                \
     IS_HOST(c) * C_HOST | IS_QDTEXT(c) * C_QDTEXT)
#define ROW(r)                                                                                               \
    CLASS(r), CLASS(r + 1), CLASS(r + 2), CLASS(r + 3), CLASS(r + 4), CLASS(r + 5), CLASS(r + 6),            \
        CLASS(r + 7), CLASS(r + 8), CLASS(r + 9), CLASS(r + 10), CLASS(r + 11), CLASS(r + 12),               \
        CLASS(r + 13), CLASS(r + 14), CLASS(r + 15)

/* Built by the compiler from the definitions above, so it cannot drift. */
static const uint8_t char_class[256] = {
    ROW(0x00), ROW(0x10), ROW(0x20), ROW(0x30), ROW(0x40), ROW(0x50), ROW(0x60), ROW(0x70),
    ROW(0x80), ROW(0x90), ROW(0xA0), ROW(0xB0), ROW(0xC0), ROW(0xD0), ROW(0xE0), ROW(0xF0),
};

#define HAS(c, cls) (char_class[(unsigned char)(c)] & (cls))
#define IS_OWS(c) ((c) == ' ' || (c) == '\t')

#define STR_IS(s, lit) ((s).len == sizeof(lit) - 1 && xHttpSameLower((s).data, lit, sizeof(lit) - 1))

/* ---- Byte scans over a complete head ----
 * Each returns the first byte of [p, end) outside its class. The caller
 * guarantees such a byte exists (the head's final CR), so the portable tails
 * need no bound. */

#ifdef __SSE2__
static inline int vchar_misses(__m128i x) {
    /* Signed compare: bytes >= 0x80 are negative, so they fall below 0x21 too. */
    __m128i low = _mm_cmplt_epi8(x, _mm_set1_epi8(0x21));
    __m128i del = _mm_cmpeq_epi8(x, _mm_set1_epi8(0x7F));
    return _mm_movemask_epi8(_mm_or_si128(low, del));
}

static inline int field_misses(__m128i x) {
    /* Flipping the top bit turns "unsigned < 0x20" into a signed compare. */
    __m128i flipped = _mm_xor_si128(x, _mm_set1_epi8((char)0x80));
    __m128i ctl = _mm_cmplt_epi8(flipped, _mm_set1_epi8((char)(0x20 ^ 0x80)));
    __m128i tab = _mm_cmpeq_epi8(x, _mm_set1_epi8('\t'));
    __m128i del = _mm_cmpeq_epi8(x, _mm_set1_epi8(0x7F));
    return _mm_movemask_epi8(_mm_or_si128(_mm_andnot_si128(tab, ctl), del));
}
#endif

static const char *skip_vchar(const char *p, const char *end) {
#ifdef __SSE2__
    for (; end - p >= 16; p += 16) {
        int m = vchar_misses(_mm_loadu_si128((const __m128i *)(const void *)p));
        if (m) return p + __builtin_ctz((unsigned)m);
    }
#else
    (void)end;
#endif
    while (HAS(*p, C_VCHAR)) p++;
    return p;
}

static const char *skip_field_value(const char *p, const char *end) {
#ifdef __SSE2__
    for (; end - p >= 16; p += 16) {
        int m = field_misses(_mm_loadu_si128((const __m128i *)(const void *)p));
        if (m) return p + __builtin_ctz((unsigned)m);
    }
#else
    (void)end;
#endif
    while (HAS(*p, C_FIELD)) p++;
    return p;
}

static const char *skip_token(const char *p) {
    while (HAS(*p, C_TCHAR)) p++;
    return p;
}

/* ---- Request line ---- */

/* What the fields say about framing and the connection, gathered in one pass
 * and judged once all are seen. */
typedef struct xHeadFacts {
    int hosts;
    bool host_from_target; /* absolute-form: its authority is the host (RFC 9112 §3.2.2) */
    bool content_length;
    bool transfer_encoding;
    bool other_coding; /* a transfer coding other than chunked */
    bool close, keep_alive, upgrade_token, upgrade_field, expect_continue;
} xHeadFacts;

static bool reject(xHttp1Request *req, int status) {
    req->error_status = status;
    return false;
}

static bool all_in_class(const char *p, size_t n, int cls) {
    for (size_t i = 0; i < n; i++) {
        if (!HAS(p[i], cls)) return false;
    }
    return true;
}

/* Splits p[0, n) at its first '?' into path and query. */
static void split_query(xHttp1Request *req, const char *p, size_t n) {
    const char *q = memchr(p, '?', n);
    size_t path_len = q ? (size_t)(q - p) : n;
    req->path = (xStr){p, path_len};
    req->query = q ? (xStr){q + 1, n - path_len - 1} : (xStr){p + n, 0};
}

/* "http://authority[/path][?query]" or https, scheme in any case. */
static bool parse_absolute_form(xHttp1Request *req, xHeadFacts *f) {
    const char *t = req->target.data, *end = t + req->target.len;
    size_t scheme = 0;
    if (req->target.len > 7 && xHttpSameLower(t, "http://", 7)) scheme = 7;
    if (req->target.len > 8 && xHttpSameLower(t, "https://", 8)) scheme = 8;
    if (!scheme) return false;
    const char *a = t + scheme, *p = a;
    while (p < end && *p != '/' && *p != '?') p++;
    if (p == a || !all_in_class(a, (size_t)(p - a), C_HOST)) return false;
    req->host = (xStr){a, (size_t)(p - a)};
    f->host_from_target = true;
    split_query(req, p, (size_t)(end - p));
    if (req->path.len == 0) req->path = (xStr){"/", 1};
    return true;
}

/* CONNECT's "host:port" (RFC 9110 §9.3.6): a host, a colon and 1*DIGIT. */
static bool valid_authority_form(xStr t) {
    size_t digits = 0;
    while (digits < t.len && (unsigned)(t.data[t.len - 1 - digits] - '0') < 10u) digits++;
    size_t colon = t.len - digits - 1;
    return digits > 0 && digits < t.len && colon > 0 && t.data[colon] == ':' &&
           all_in_class(t.data, colon, C_HOST);
}

/* Sorts the target into its form (RFC 9112 §3.2) and fills path and query. */
static bool parse_target(xHttp1Request *req, xHeadFacts *f) {
    xStr t = req->target;
    bool connect = xStrEqualsC(req->method, "CONNECT");
    if (connect) {
        req->path = req->query = (xStr){t.data + t.len, 0};
        return valid_authority_form(t);
    }
    if (t.data[0] == '/') {
        split_query(req, t.data, t.len);
        return true;
    }
    if (t.len == 1 && t.data[0] == '*') {
        req->path = t;
        req->query = (xStr){t.data + 1, 0};
        return xStrEqualsC(req->method, "OPTIONS");
    }
    return parse_absolute_form(req, f);
}

/* "HTTP/d.d" CRLF at p, which has at least 10 bytes: 1.0 and 1.1 are ours,
 * any other well-formed version is a 505. */
static bool parse_version(const char *p, xHttp1Request *req) {
    bool digits = (unsigned)(p[5] - '0') < 10u && (unsigned)(p[7] - '0') < 10u;
    if (memcmp(p, "HTTP/", 5) != 0 || !digits || p[6] != '.' || p[8] != '\r' || p[9] != '\n')
        return reject(req, 400);
    if (p[5] != '1' || (p[7] != '0' && p[7] != '1')) return reject(req, 505);
    req->minor_version = p[7] - '0';
    return true;
}

/* "method SP request-target SP HTTP-version CRLF" at *pp; moves past it. */
static bool parse_request_line(const char **pp, const char *end, xHttp1Request *req, xHeadFacts *f) {
    const char *p = *pp, *method = p;
    p = skip_token(p);
    if (p == method || *p != ' ') return reject(req, 400);
    req->method = (xStr){method, (size_t)(p - method)};
    const char *target = ++p;
    p = skip_vchar(p, end);
    if (p == target || *p != ' ') return reject(req, 400);
    req->target = (xStr){target, (size_t)(p - target)};
    p++;
    if (end - p < 10) return reject(req, 400);
    if (!parse_version(p, req)) return false;
    if (!parse_target(req, f)) return reject(req, 400);
    *pp = p + 10;
    return true;
}

/* ---- Header fields ---- */

/* The next non-empty element of a comma-separated list (RFC 9110 §5.6.1),
 * without its surrounding whitespace. */
static bool next_list_item(const char **pp, const char *end, xStr *item) {
    const char *p = *pp;
    while (p < end && (*p == ',' || IS_OWS(*p))) p++;
    if (p == end) return false;
    const char *start = p;
    while (p < end && *p != ',') p++;
    const char *stop = p;
    while (IS_OWS(stop[-1])) stop--; /* *start is not OWS, so this stops there */
    *item = (xStr){start, (size_t)(stop - start)};
    *pp = p;
    return true;
}

static bool note_host(xHttp1Request *req, xHeadFacts *f, xStr v) {
    if (++f->hosts > 1 || !all_in_class(v.data, v.len, C_HOST)) return reject(req, 400);
    if (!f->host_from_target) req->host = v;
    return true;
}

/* 1*DIGIT that fits int64; lists and repeats are refused, even identical ones,
 * so no two readers of this message can frame it differently. */
static bool note_content_length(xHttp1Request *req, xHeadFacts *f, xStr v) {
    if (f->content_length || v.len == 0) return reject(req, 400);
    int64_t n = 0;
    for (size_t i = 0; i < v.len; i++) {
        unsigned d = (unsigned)(v.data[i] - '0');
        if (d > 9 || n > (INT64_MAX - (int64_t)d) / 10) return reject(req, 400);
        n = n * 10 + (int64_t)d;
    }
    f->content_length = true;
    req->content_length = n;
    return true;
}

/* Codings accumulate across fields; chunked must come last and only once. */
static bool note_transfer_encoding(xHttp1Request *req, xHeadFacts *f, xStr v) {
    const char *p = v.data, *end = p + v.len;
    xStr coding;
    f->transfer_encoding = true;
    while (next_list_item(&p, end, &coding)) {
        if (req->chunked) return reject(req, 400);
        if (STR_IS(coding, "chunked")) {
            req->chunked = true;
        } else {
            f->other_coding = true;
        }
    }
    return true;
}

static void note_connection(xHeadFacts *f, xStr v) {
    const char *p = v.data, *end = p + v.len;
    xStr option;
    while (next_list_item(&p, end, &option)) {
        if (STR_IS(option, "close")) f->close = true;
        if (STR_IS(option, "keep-alive")) f->keep_alive = true;
        if (STR_IS(option, "upgrade")) f->upgrade_token = true;
    }
}

/* Records what a field means for framing and the connection; the switch on
 * length keeps ordinary fields to one comparison of an integer. */
static bool note_field(xHttp1Request *req, xHeadFacts *f, xStr name, xStr v) {
    switch (name.len) {
    case 4:
        if (STR_IS(name, "host")) return note_host(req, f, v);
        break;
    case 6:
        if (STR_IS(name, "expect") && STR_IS(v, "100-continue")) f->expect_continue = true;
        break;
    case 7:
        if (STR_IS(name, "upgrade")) f->upgrade_field = true;
        break;
    case 10:
        if (STR_IS(name, "connection")) note_connection(f, v);
        break;
    case 14:
        if (STR_IS(name, "content-length")) return note_content_length(req, f, v);
        break;
    case 17:
        if (STR_IS(name, "transfer-encoding")) return note_transfer_encoding(req, f, v);
        break;
    }
    return true;
}

/* One "name: OWS value OWS CRLF" line at *pp, within a head that ends in
 * CRLFCRLF; moves past it. False when malformed. Requests, responses and
 * trailer sections share it, so every field is held to the same grammar. */
static inline bool split_field(const char **pp, const char *end, xStr *n, xStr *v) {
    const char *p = *pp, *name = p;
    p = skip_token(p);
    /* Also catches obs-fold and whitespace before the colon. */
    if (p == name || *p != ':') return false;
    *n = (xStr){name, (size_t)(p - name)};
    p++;
    while (IS_OWS(*p)) p++;
    const char *value = p;
    p = skip_field_value(p, end);
    if (*p != '\r' || p[1] != '\n') return false;
    const char *stop = p;
    while (stop > value && IS_OWS(stop[-1])) stop--;
    *v = (xStr){value, (size_t)(stop - value)};
    *pp = p + 2;
    return true;
}

static bool parse_field(const char **pp, const char *end, xHttp1Request *req, const xHttp1Limits *limits,
                        xHeadFacts *f) {
    xStr n, v;
    if (!split_field(pp, end, &n, &v)) return reject(req, 400);
    if (req->num_headers == limits->max_headers) return reject(req, 431);
    req->headers[req->num_headers++] = (xHttp1Header){n, v};
    return note_field(req, f, n, v);
}

/* Judges the facts once every field is known (RFC 9112 §6, §9.3). */
static bool check_semantics(xHttp1Request *req, const xHeadFacts *f) {
    bool http11 = req->minor_version == 1;
    if (http11 && f->hosts == 0) return reject(req, 400);
    if (f->transfer_encoding) {
        if (f->content_length || !http11) return reject(req, 400);
        if (f->other_coding) return reject(req, 501);
        if (!req->chunked) return reject(req, 400); /* an empty list */
    }
    req->keep_alive = !f->close && (http11 || f->keep_alive);
    /* HTTP/1.0 knows neither mechanism (RFC 9110 §7.8, §10.1.1). */
    req->upgrade = http11 && f->upgrade_token && f->upgrade_field;
    req->expect_continue = http11 && f->expect_continue;
    return true;
}

/* Validates the complete head [p, end), which ends in CRLFCRLF. */
static bool parse_head(const char *p, const char *end, xHttp1Request *req, const xHttp1Limits *limits) {
    xHeadFacts f = {0};
    if (!parse_request_line(&p, end, req, &f)) return false;
    while (p < end - 2) {
        if (!parse_field(&p, end, req, limits, &f)) return false;
    }
    return check_semantics(req, &f);
}

/* ---- Finding the head ---- */

/* A request line is too long once `probe` bytes from its start (the longest
 * line allowed and its CRLF) hold no LF. A previous call that saw as many
 * bytes has already looked. */
static bool request_line_too_long(const char *buf, size_t start, size_t len, size_t prev_len, size_t probe) {
    if (len - start < probe) return false;
    if (prev_len > start && prev_len - start >= probe) return false;
    return memchr(buf + start, '\n', probe) == NULL;
}

/* Judges the LF at p: -1 when bare, the head's length when it ends the head,
 * else 0. buf[start] is no LF, so p[-1] lies in the head. */
static inline ssize_t judge_lf(const char *buf, size_t start, const char *p) {
    if (p[-1] != '\r') return -1;
    if ((size_t)(p - buf) - start >= 3 && p[-2] == '\n' && p[-3] == '\r') return p + 1 - buf;
    return 0;
}

/* Finds the CRLFCRLF that ends the head in buf[from, window), checking that
 * each LF on the way follows a CR. Returns the head's length, 0 when it is not
 * there yet, or -1 on a bare LF. */
static ssize_t find_head_end(const char *buf, size_t start, size_t from, size_t window) {
    const char *p = buf + from, *w = buf + window;
    ssize_t r;
#ifdef __SSE2__
    /* Inline blocks beat a memchr call per line: heads have short lines. */
    for (; w - p >= 16; p += 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
        unsigned m = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(x, _mm_set1_epi8('\n')));
        for (; m; m &= m - 1) {
            if ((r = judge_lf(buf, start, p + __builtin_ctz(m)))) return r;
        }
    }
#endif
    for (; (p = memchr(p, '\n', (size_t)(w - p))) != NULL; p++) {
        if ((r = judge_lf(buf, start, p))) return r;
    }
    return 0;
}

static void reset_request(xHttp1Request *req, const char *buf) {
    xStr empty = {buf, 0};
    req->method = req->target = req->path = req->query = req->host = empty;
    req->minor_version = 0;
    req->num_headers = 0;
    req->content_length = -1;
    req->chunked = req->keep_alive = req->expect_continue = req->upgrade = false;
    req->error_status = 0;
}

static int fail(xHttp1Request *req, int status) {
    req->error_status = status;
    return XHTTP1_ERROR;
}

int xHttp1ParseRequest(const char *buf, size_t len, size_t prev_len, xHttp1Request *req,
                       const xHttp1Limits *limits) {
    reset_request(req, buf);
    /* The head is judged by its first max_head bytes only and the request line
     * by its first `probe`, so the verdict is the same however the input was
     * split into calls. */
    size_t max_head = limits->max_head < INT_MAX ? limits->max_head : INT_MAX;
    size_t window = len < max_head ? len : max_head;
    size_t prev_window = prev_len < window ? prev_len : window;
    size_t max_line = limits->max_request_line;
    size_t probe = max_line < SIZE_MAX - 2 ? max_line + 2 : SIZE_MAX;

    /* Empty lines before the request line are skipped (RFC 9112 §2.2) and
     * count toward max_head, which bounds them. */
    size_t start = 0;
    while (start + 1 < window && buf[start] == '\r' && buf[start + 1] == '\n') start += 2;
    if (start < window && (buf[start] == '\n' || (buf[start] == '\r' && start + 1 < window)))
        return fail(req, 400);

    if (request_line_too_long(buf, start, len, prev_len, probe)) return fail(req, 414);
    /* The scan looks back from each LF, so it can resume exactly where the
     * previous call stopped: an end straddling that point is still found. */
    ssize_t end = find_head_end(buf, start, prev_window > start ? prev_window : start, window);
    if (end < 0) return fail(req, 400);
    if (end > 0) return parse_head(buf + start, buf + end, req, limits) ? (int)end : XHTTP1_ERROR;
    if (len == window) return XHTTP1_INCOMPLETE;
    /* Over max_head; but while the request line has no LF it may yet prove
     * too long, and then 414 names the problem. A previous call that was over
     * too saw no LF before prev_len. */
    size_t line_end = len - start < probe ? len : start + probe;
    size_t from = prev_len > window && prev_len < line_end ? prev_len : start;
    return memchr(buf + from, '\n', line_end - from) ? fail(req, 431) : XHTTP1_INCOMPLETE;
}

/* ---- Chunked bodies (RFC 9112 §7.1) ----
 * One state per grammar position, so any byte boundary is a valid place to
 * stop. Only payload is copied, in bulk; framing goes byte by byte. */

enum {
    CK_SIZE_FIRST,  /* the first hex digit of a chunk size */
    CK_SIZE,        /* more hex digits, or what may follow them */
    CK_EXT_WS,      /* BWS that must lead to ';' */
    CK_EXT_NAME_WS, /* after ';': BWS, then a name */
    CK_EXT_NAME,
    CK_EXT_AFTER_NAME, /* BWS after a name: '=' or ';' next */
    CK_EXT_VALUE_WS,   /* after '=': BWS, then a token or a quoted string */
    CK_EXT_TOKEN,
    CK_EXT_QUOTED,
    CK_EXT_QUOTED_PAIR, /* after a backslash */
    CK_EXT_AFTER_QUOTE,
    CK_SIZE_LF, /* the LF that ends the size line */
    CK_DATA,
    CK_DATA_CR,
    CK_DATA_LF,
    CK_TRAILER_START, /* a trailer field, or the CR of the final CRLF */
    CK_TRAILER_NAME,
    CK_TRAILER_VALUE,
    CK_TRAILER_LF,
    CK_FINAL_LF,
    CK_DONE,
    CK_FAILED,
};

/* Where a size or a complete extension may go next. */
static int after_ext_element(unsigned char c) {
    switch (c) {
    case ' ':
    case '\t': return CK_EXT_WS;
    case ';': return CK_EXT_NAME_WS;
    case '\r': return CK_SIZE_LF;
    default: return CK_FAILED;
    }
}

static int hex_digit(unsigned char c) {
    if ((unsigned)(c - '0') < 10u) return c - '0';
    c |= 0x20;
    return (unsigned)(c - 'a') < 6u ? c - 'a' + 10 : -1;
}

/* Counts a framing byte against the line and trailer limits; 0 or a status. */
static int count_framing_byte(xHttp1Chunked *d, unsigned char c, size_t max_line, size_t max_trailers) {
    int s = d->state;
    if (s <= CK_EXT_AFTER_QUOTE) {
        return c != '\r' && ++d->line_bytes > max_line ? 400 : 0;
    }
    if (s < CK_TRAILER_START || s > CK_TRAILER_LF || (s == CK_TRAILER_START && c == '\r')) return 0;
    if (++d->trailer_bytes > max_trailers) return 431;
    return s != CK_TRAILER_LF && c != '\r' && ++d->line_bytes > max_line ? 431 : 0;
}

/* Moves the size/extension state machine past c. */
static int size_line_step(xHttp1Chunked *d, unsigned char c) {
    int s = d->state;
    switch (s) {
    case CK_SIZE_FIRST:
    case CK_SIZE: {
        int v = hex_digit(c);
        if (v < 0) return s == CK_SIZE ? after_ext_element(c) : CK_FAILED;
        if (d->remaining > (uint64_t)(INT64_MAX - v) / 16) return CK_FAILED;
        d->remaining = d->remaining * 16 + (uint64_t)v;
        return CK_SIZE;
    }
    case CK_EXT_WS: return IS_OWS(c) ? s : c == ';' ? CK_EXT_NAME_WS : CK_FAILED;
    case CK_EXT_NAME_WS: return IS_OWS(c) ? s : HAS(c, C_TCHAR) ? CK_EXT_NAME : CK_FAILED;
    case CK_EXT_NAME:
        if (HAS(c, C_TCHAR)) return s;
        if (IS_OWS(c)) return CK_EXT_AFTER_NAME;
        return c == '=' ? CK_EXT_VALUE_WS : after_ext_element(c);
    case CK_EXT_AFTER_NAME:
        if (IS_OWS(c)) return s;
        return c == '=' ? CK_EXT_VALUE_WS : c == ';' ? CK_EXT_NAME_WS : CK_FAILED;
    case CK_EXT_VALUE_WS:
        if (IS_OWS(c)) return s;
        return c == '"' ? CK_EXT_QUOTED : HAS(c, C_TCHAR) ? CK_EXT_TOKEN : CK_FAILED;
    case CK_EXT_TOKEN: return HAS(c, C_TCHAR) ? s : after_ext_element(c);
    case CK_EXT_QUOTED:
        if (HAS(c, C_QDTEXT)) return s;
        return c == '"' ? CK_EXT_AFTER_QUOTE : c == '\\' ? CK_EXT_QUOTED_PAIR : CK_FAILED;
    case CK_EXT_QUOTED_PAIR: return HAS(c, C_FIELD) ? CK_EXT_QUOTED : CK_FAILED;
    default: /* CK_EXT_AFTER_QUOTE */ return after_ext_element(c);
    }
}

/* Moves past one framing byte: line ends, CRLF after data, trailers. */
static int framing_step(xHttp1Chunked *d, unsigned char c) {
    switch (d->state) {
    case CK_SIZE_LF:
        if (c != '\n') return CK_FAILED;
        d->line_bytes = 0;
        return d->remaining ? CK_DATA : CK_TRAILER_START;
    case CK_DATA_CR: return c == '\r' ? CK_DATA_LF : CK_FAILED;
    case CK_DATA_LF: return c == '\n' ? CK_SIZE_FIRST : CK_FAILED;
    case CK_TRAILER_START: return c == '\r' ? CK_FINAL_LF : HAS(c, C_TCHAR) ? CK_TRAILER_NAME : CK_FAILED;
    case CK_TRAILER_NAME: return HAS(c, C_TCHAR) ? CK_TRAILER_NAME : c == ':' ? CK_TRAILER_VALUE : CK_FAILED;
    case CK_TRAILER_VALUE: return HAS(c, C_FIELD) ? CK_TRAILER_VALUE : c == '\r' ? CK_TRAILER_LF : CK_FAILED;
    case CK_TRAILER_LF: d->line_bytes = 0; return c == '\n' ? CK_TRAILER_START : CK_FAILED;
    default: /* CK_FINAL_LF */ return c == '\n' ? CK_DONE : CK_FAILED;
    }
}

ssize_t xHttp1ChunkedDecode(xHttp1Chunked *dec, const char *in, size_t in_len, char *out, size_t *out_len,
                            size_t max_line, size_t max_trailers) {
    size_t i = 0, written = 0;
    int status = dec->state == CK_FAILED ? dec->error_status : 0;
    while (!status && i < in_len && dec->state != CK_DONE) {
        if (dec->state == CK_DATA) {
            size_t n = in_len - i < dec->remaining ? in_len - i : (size_t)dec->remaining;
            memmove(out + written, in + i, n); /* out never overtakes in */
            written += n;
            i += n;
            dec->remaining -= n;
            if (!dec->remaining) dec->state = CK_DATA_CR;
            continue;
        }
        unsigned char c = (unsigned char)in[i++];
        status = count_framing_byte(dec, c, max_line, max_trailers);
        if (status) break;
        dec->state = dec->state < CK_SIZE_LF ? size_line_step(dec, c) : framing_step(dec, c);
        if (dec->state == CK_FAILED) status = 400;
        if (dec->state == CK_TRAILER_START && dec->stop_at_trailers) {
            dec->at_trailers = true;
            break;
        }
    }
    *out_len = written;
    if (status) {
        dec->state = CK_FAILED;
        dec->error_status = status;
        return XHTTP1_ERROR;
    }
    dec->done = dec->state == CK_DONE;
    return (ssize_t)i;
}

/* ---- Responses (RFC 9112 §4, §6.3) ----
 * What an upstream sends is held to the request parser's grammar: the same
 * field lines, the same refusal of anything two readers could frame apart
 * (Content-Length repeated or beside Transfer-Encoding, codings after
 * chunked), since a proxy that guessed would pass the guess on. */

static int fail_response(xHttp1Response *res, const char *why) {
    res->error = why;
    return XHTTP1_ERROR;
}

/* What the fields say about framing, gathered in one pass. */
typedef struct xResponseFacts {
    bool content_length, transfer_encoding, chunked, close, keep_alive;
} xResponseFacts;

static const char *note_response_length(xHttp1Response *res, xResponseFacts *f, xStr v) {
    if (f->content_length) return "Content-Length repeated";
    int64_t n = 0;
    if (v.len == 0) return "Content-Length not a number";
    for (size_t i = 0; i < v.len; i++) {
        unsigned d = (unsigned)(v.data[i] - '0');
        if (d > 9 || n > (INT64_MAX - (int64_t)d) / 10) return "Content-Length not a number";
        n = n * 10 + (int64_t)d;
    }
    f->content_length = true;
    res->content_length = n;
    return NULL;
}

/* One Transfer-Encoding field whose value is "chunked", nothing else: an
 * upstream has no reason for lists, empty elements or repeats, and readers
 * differ on them. A proxy strips Transfer-Encoding and re-frames, so a body
 * in another coding would reach the client mislabelled. */
static const char *note_response_coding(xResponseFacts *f, xStr v) {
    if (f->transfer_encoding || !STR_IS(v, "chunked")) return "Transfer-Encoding other than one chunked";
    f->transfer_encoding = f->chunked = true;
    return NULL;
}

static const char *note_response_field(xHttp1Response *res, xResponseFacts *f, xStr name, xStr v) {
    if (name.len == 14 && STR_IS(name, "content-length")) return note_response_length(res, f, v);
    if (name.len == 17 && STR_IS(name, "transfer-encoding")) return note_response_coding(f, v);
    if (name.len == 10 && STR_IS(name, "connection")) {
        f->close |= xHttpListHasToken(v, "close");
        f->keep_alive |= xHttpListHasToken(v, "keep-alive");
    }
    return NULL;
}

/* "HTTP/1.x SP 3DIGIT [SP reason] CRLF" at *pp. A missing reason (with or
 * without its SP) is taken: the reason means nothing (RFC 9112 §4). */
static const char *parse_status_line(const char **pp, const char *end, xHttp1Response *res) {
    const char *p = *pp;
    if (end - p < 14 || memcmp(p, "HTTP/1.", 7) != 0) return "not an HTTP/1.x status line";
    if (p[7] != '0' && p[7] != '1') return "HTTP version other than 1.0 or 1.1";
    res->minor_version = p[7] - '0';
    if (p[8] != ' ') return "malformed status line";
    int status = 0;
    for (int i = 9; i < 12; i++) {
        unsigned d = (unsigned)(p[i] - '0');
        if (d > 9) return "status code is not three digits";
        status = status * 10 + (int)d;
    }
    if (status < 100 || status > 599) return "status code out of range";
    res->status = status;
    p += 12;
    if (*p == ' ') {
        const char *reason = ++p;
        p = skip_field_value(p, end);
        res->reason = (xStr){reason, (size_t)(p - reason)};
    }
    if (*p != '\r' || p[1] != '\n') return "malformed status line";
    *pp = p + 2;
    return NULL;
}

/* Chooses the body's framing once every field is known (RFC 9112 §6.3). */
static const char *frame_response(xHttp1Response *res, const xResponseFacts *f, bool head_request) {
    if (f->transfer_encoding && f->content_length) return "both Content-Length and Transfer-Encoding";
    if (f->transfer_encoding && res->minor_version == 0) return "Transfer-Encoding in an HTTP/1.0 response";
    res->keep_alive = !f->close && (res->minor_version == 1 || f->keep_alive);
    if (head_request || res->status < 200 || res->status == 204 || res->status == 304) {
        res->body = XHTTP1_BODY_NONE;
    } else if (f->transfer_encoding) {
        if (!f->chunked) return "Transfer-Encoding without a coding";
        res->body = XHTTP1_BODY_CHUNKED;
    } else if (f->content_length) {
        res->body = res->content_length ? XHTTP1_BODY_LENGTH : XHTTP1_BODY_NONE;
    } else {
        /* No length: the end of the connection ends the body, so the
         * connection cannot be kept. */
        res->body = XHTTP1_BODY_UNTIL_CLOSE;
        res->keep_alive = false;
    }
    return NULL;
}

static const char *parse_response_head(const char *p, const char *end, xHttp1Response *res,
                                       const xHttp1Limits *limits, bool head_request) {
    xResponseFacts f = {0};
    const char *why = parse_status_line(&p, end, res);
    while (!why && p < end - 2) {
        xStr n, v;
        if (!split_field(&p, end, &n, &v)) return "malformed header field";
        if (res->num_headers == limits->max_headers) return "too many header fields";
        res->headers[res->num_headers++] = (xHttp1Header){n, v};
        why = note_response_field(res, &f, n, v);
    }
    return why ? why : frame_response(res, &f, head_request);
}

int xHttp1ParseResponse(const char *buf, size_t len, size_t prev_len, xHttp1Response *res,
                        const xHttp1Limits *limits, bool head_request) {
    *res = (xHttp1Response){.headers = res->headers, .reason = {buf, 0}, .content_length = -1};
    size_t max_head = limits->max_head < INT_MAX ? limits->max_head : INT_MAX;
    size_t window = len < max_head ? len : max_head;
    size_t prev_window = prev_len < window ? prev_len : window;
    if (window == 0) return XHTTP1_INCOMPLETE;
    /* No empty lines before a status line: a server has no excuse for them. */
    if (buf[0] != 'H') return fail_response(res, "not an HTTP/1.x status line");
    ssize_t end = find_head_end(buf, 0, prev_window, window);
    if (end < 0) return fail_response(res, "bare LF in the head");
    if (end > 0) {
        const char *why = parse_response_head(buf, buf + end, res, limits, head_request);
        return why ? fail_response(res, why) : (int)end;
    }
    return len == window ? XHTTP1_INCOMPLETE : fail_response(res, "head too large");
}

int xHttp1ParseTrailers(const char *buf, size_t len, xHttp1Header *fields, size_t max_fields,
                        size_t *num_fields, size_t max_bytes) {
    *num_fields = 0;
    size_t window = len < max_bytes ? len : max_bytes;
    if (window > 0 && buf[0] == '\n') return XHTTP1_ERROR;
    if (window < 2) return len > window ? XHTTP1_ERROR : XHTTP1_INCOMPLETE;
    if (buf[0] == '\r') return buf[1] == '\n' ? 2 : XHTTP1_ERROR;
    ssize_t end = find_head_end(buf, 0, 0, window);
    if (end == 0) return len > window ? XHTTP1_ERROR : XHTTP1_INCOMPLETE;
    if (end < 0) return XHTTP1_ERROR;
    const char *p = buf, *stop = buf + end;
    while (p < stop - 2) {
        xStr n, v;
        if (!split_field(&p, stop, &n, &v) || *num_fields == max_fields) return XHTTP1_ERROR;
        fields[(*num_fields)++] = (xHttp1Header){n, v};
    }
    return (int)end;
}
