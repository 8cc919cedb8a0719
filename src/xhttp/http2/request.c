/* request.c — the request checks of request.h. HPACK computed each field's
 * verdict once (hpack.h), the pseudo-headers' and host's syntax included;
 * QPACK's fields have their syntax judged here. What is left is which fields
 * may appear, and how often. */
#include "xhttp/http2/request.h"

#include <string.h>

#include "xhttp/core/tokens.h"

/* Pseudo-headers seen, one bit each. */
enum { SEEN_METHOD = 1, SEEN_SCHEME = 2, SEEN_PATH = 4, SEEN_AUTHORITY = 8, SEEN_PROTOCOL = 16 };

static bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

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
    case XHPACK_TOKEN_HOST: /* its syntax is the field's verdict */
        if (*has_host) return false;
        *has_host = true;
        return true;
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

/* §8.3.1, RFC 8441 §4: which pseudo-headers each kind of request carries
 * (their syntax was each field's verdict). */
static bool complete(unsigned seen, bool has_host, bool connect_protocol, const xH2RequestHead *h) {
    if (!(seen & SEEN_METHOD)) return false;
    bool connect = xStrEqualsC(h->method, "CONNECT");
    if (connect && !(seen & SEEN_PROTOCOL))
        return (seen & SEEN_AUTHORITY) && !(seen & (SEEN_SCHEME | SEEN_PATH)) && h->authority.len;
    if ((seen & SEEN_PROTOCOL) && (!connect || !connect_protocol || !h->protocol.len)) return false;
    if ((seen & (SEEN_SCHEME | SEEN_PATH)) != (SEEN_SCHEME | SEEN_PATH)) return false;
    if (!h->path.len) return false;
    if (h->path.data[0] != '/' &&
        !(h->path.len == 1 && h->path.data[0] == '*' && xStrEqualsC(h->method, "OPTIONS")))
        return false;
    return (seen & SEEN_AUTHORITY) || has_host;
}

/* judged: the fields' verdicts include their syntax (HPACK's). */
static bool check_request(const xHpackField *fields, size_t count, bool connect_protocol, bool judged,
                          xH2RequestHead *head) {
    *head = (xH2RequestHead){.content_length = -1};
    unsigned seen = 0;
    bool regular = false, has_host = false;
    for (size_t i = 0; i < count; i++) {
        const xHpackField *f = &fields[i];
        uint8_t verdict = judged ? f->flags : f->flags | xHpackSyntaxVerdict(f->token, f->value);
        if (verdict & (XHPACK_BAD_NAME | XHPACK_BAD_VALUE | XHPACK_BAD_SYNTAX)) return false;
        if (f->name.data[0] == ':') {
            if (regular || !take_pseudo(f, &seen, head)) return false;
        } else {
            regular = true;
            if (!check_regular(f, head, &has_host)) return false;
        }
    }
    return complete(seen, has_host, connect_protocol, head);
}

bool xH2CheckRequest(const xHpackField *fields, size_t count, bool connect_protocol, xH2RequestHead *head) {
    return check_request(fields, count, connect_protocol, false, head);
}

bool xH2CheckHpackRequest(const xHpackField *fields, size_t count, bool connect_protocol,
                          xH2RequestHead *head) {
    return check_request(fields, count, connect_protocol, true, head);
}

bool xH2CheckTrailers(const xHpackField *fields, size_t count) {
    bool has_host = false;
    for (size_t i = 0; i < count; i++) {
        const xHpackField *f = &fields[i];
        uint8_t verdict = f->flags | xHpackSyntaxVerdict(f->token, f->value);
        if ((verdict & (XHPACK_BAD_NAME | XHPACK_BAD_VALUE | XHPACK_BAD_SYNTAX)) || f->name.data[0] == ':' ||
            !check_regular(f, NULL, &has_host))
            return false;
    }
    return true;
}
