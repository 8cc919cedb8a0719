/* request.c — the request checks of request.h. HPACK computed each field's
 * verdict once (hpack.h); what is left is which fields may appear, how
 * often, and the pseudo-headers' own syntax. */
#include "xhttp/http2/request.h"

#include <string.h>

#include "xhttp/core/tokens.h"

/* Pseudo-headers seen, one bit each. */
enum { SEEN_METHOD = 1, SEEN_SCHEME = 2, SEEN_PATH = 4, SEEN_AUTHORITY = 8, SEEN_PROTOCOL = 16 };

static bool is_alpha(unsigned char c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; }
static bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

static bool all_tchars(xStr s) {
    for (size_t i = 0; i < s.len; i++)
        if (!xHttpIsTokenChar((unsigned char)s.data[i])) return false;
    return s.len > 0;
}

/* RFC 3986 §3.1. */
static bool valid_scheme(xStr s) {
    if (!s.len || !is_alpha((unsigned char)s.data[0])) return false;
    for (size_t i = 1; i < s.len; i++) {
        unsigned char c = (unsigned char)s.data[i];
        if (!is_alpha(c) && !is_digit(c) && c != '+' && c != '-' && c != '.') return false;
    }
    return true;
}

static bool target_byte(unsigned char c) { return c > 0x20 && c != 0x7f; }

/* Visible ASCII and obs-text: no controls, no spaces (RFC 9112 §3.2). Eight
 * bytes at a time: a byte below 0x21 leaves its top bit set in x - 0x21..21
 * where it was clear in x (obs-text's are set in x, so never counted), and
 * DEL is a zero byte of x ^ 0x7f..7f, so below 0x01 there. */
static bool valid_target(xStr s) {
    const uint64_t ones = 0x0101010101010101u, tops = 0x8080808080808080u;
    size_t i = 0;
    for (; i + 8 <= s.len; i += 8) {
        uint64_t x, del;
        memcpy(&x, s.data + i, 8);
        del = x ^ (0x7f * ones);
        if (((x - 0x21 * ones) & ~x & tops) || ((del - ones) & ~del & tops)) return false;
    }
    for (; i < s.len; i++)
        if (!target_byte((unsigned char)s.data[i])) return false;
    return true;
}

/* RFC 3986 §3.2's bytes; every request's :authority passes here. */
static bool valid_authority(xStr s) {
    for (size_t i = 0; i < s.len; i++)
        if (!xHttpIsAuthorityChar((unsigned char)s.data[i])) return false;
    return true;
}

static bool parse_length(xStr v, int64_t *out) {
    if (!v.len || v.len > 18) return false; /* 18 digits cannot overflow */
    int64_t n = 0;
    for (size_t i = 0; i < v.len; i++) {
        if (!is_digit((unsigned char)v.data[i])) return false;
        n = n * 10 + (v.data[i] - '0');
    }
    *out = n;
    return true;
}

static bool equals_nocase(xStr s, const char *want) {
    size_t n = strlen(want);
    if (s.len != n) return false;
    for (size_t i = 0; i < n; i++)
        if ((s.data[i] | 0x20) != want[i]) return false;
    return true;
}

/* A regular field: not connection-specific (§8.2.2), te only "trailers". */
static bool check_regular(const xHpackField *f, xH2RequestHead *head, bool *has_host) {
    switch (f->token) {
    case XHPACK_TOKEN_CONNECTION:
    case XHPACK_TOKEN_KEEP_ALIVE:
    case XHPACK_TOKEN_PROXY_CONNECTION:
    case XHPACK_TOKEN_TRANSFER_ENCODING:
    case XHPACK_TOKEN_UPGRADE: return false;
    case XHPACK_TOKEN_TE: return equals_nocase(f->value, "trailers");
    case XHPACK_TOKEN_CONTENT_LENGTH:
        if (!head) return true;
        if (head->content_length >= 0) return false; /* one at most */
        return parse_length(f->value, &head->content_length);
    case XHPACK_TOKEN_HOST:
        if (*has_host) return false;
        *has_host = true;
        return valid_authority(f->value);
    default: return true;
    }
}

static bool take_pseudo(const xHpackField *f, unsigned *seen, xH2RequestHead *head) {
    unsigned bit;
    xStr *slot;
    switch (f->token) {
    case XHPACK_TOKEN_METHOD: bit = SEEN_METHOD, slot = &head->method; break;
    case XHPACK_TOKEN_SCHEME: bit = SEEN_SCHEME, slot = &head->scheme; break;
    case XHPACK_TOKEN_PATH: bit = SEEN_PATH, slot = &head->path; break;
    case XHPACK_TOKEN_AUTHORITY: bit = SEEN_AUTHORITY, slot = &head->authority; break;
    default:
        if (f->name.len != 9 || memcmp(f->name.data, ":protocol", 9) != 0) return false;
        bit = SEEN_PROTOCOL, slot = &head->protocol;
        break;
    }
    if (*seen & bit) return false;
    *seen |= bit;
    *slot = f->value;
    return true;
}

/* §8.3.1, RFC 8441 §4: which pseudo-headers each kind of request carries. */
static bool complete(unsigned seen, bool has_host, bool connect_protocol, const xH2RequestHead *h) {
    if (!(seen & SEEN_METHOD) || !all_tchars(h->method)) return false;
    if ((seen & SEEN_AUTHORITY) && !valid_authority(h->authority)) return false;
    bool connect = xStrEqualsC(h->method, "CONNECT");
    if (connect && !(seen & SEEN_PROTOCOL))
        return (seen & SEEN_AUTHORITY) && !(seen & (SEEN_SCHEME | SEEN_PATH)) && h->authority.len;
    if ((seen & SEEN_PROTOCOL) && (!connect || !connect_protocol || !h->protocol.len)) return false;
    if ((seen & (SEEN_SCHEME | SEEN_PATH)) != (SEEN_SCHEME | SEEN_PATH)) return false;
    if (!valid_scheme(h->scheme) || !h->path.len || !valid_target(h->path)) return false;
    if (h->path.data[0] != '/' &&
        !(h->path.len == 1 && h->path.data[0] == '*' && xStrEqualsC(h->method, "OPTIONS")))
        return false;
    return (seen & SEEN_AUTHORITY) || has_host;
}

bool xH2CheckRequest(const xHpackField *fields, size_t count, bool connect_protocol, xH2RequestHead *head) {
    *head = (xH2RequestHead){.content_length = -1};
    unsigned seen = 0;
    bool regular = false, has_host = false;
    for (size_t i = 0; i < count; i++) {
        const xHpackField *f = &fields[i];
        if (f->flags & (XHPACK_BAD_NAME | XHPACK_BAD_VALUE)) return false;
        if (f->name.data[0] == ':') {
            if (regular || !take_pseudo(f, &seen, head)) return false;
        } else {
            regular = true;
            if (!check_regular(f, head, &has_host)) return false;
        }
    }
    return complete(seen, has_host, connect_protocol, head);
}

bool xH2CheckTrailers(const xHpackField *fields, size_t count) {
    bool has_host = false;
    for (size_t i = 0; i < count; i++) {
        const xHpackField *f = &fields[i];
        if ((f->flags & (XHPACK_BAD_NAME | XHPACK_BAD_VALUE)) || f->name.data[0] == ':' ||
            !check_regular(f, NULL, &has_host))
            return false;
    }
    return true;
}
