/* tokens.h — HTTP facts every layer shares, defined once: the token
 * character class (RFC 9110 §5.6.2), case-insensitive field names, token
 * lists, which statuses carry a body, and decimal formatting. */
#ifndef XHTTP_CORE_TOKENS_H
#define XHTTP_CORE_TOKENS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <xbase/str.h>

/** RFC 9110 §5.6.2 tchar, as an expression (for tables built by the compiler). */
#define XHTTP_IS_TCHAR(c)                                                                                    \
    (((c) >= '0' && (c) <= '9') || ((c) >= 'A' && (c) <= 'Z') || ((c) >= 'a' && (c) <= 'z') || (c) == '!' || \
     (c) == '#' || (c) == '$' || (c) == '%' || (c) == '&' || (c) == '\'' || (c) == '*' || (c) == '+' ||      \
     (c) == '-' || (c) == '.' || (c) == '^' || (c) == '_' || (c) == '`' || (c) == '|' || (c) == '~')

/** RFC 9110 §5.5 field-value byte (VCHAR, obs-text, SP, HTAB): every byte but
 *  the control characters other than HTAB, so never NUL. */
#define XHTTP_IS_FIELD_CHAR(c) ((c) == '\t' || ((c) >= 0x20 && (c) != 0x7F))

/** RFC 3986 §3.2 authority byte: unreserved, sub-delims, ':', '@', the brackets
 *  of an IP literal and '%' of pct-encoding. */
#define XHTTP_IS_AUTHORITY_CHAR(c)                                                                           \
    (((c) >= '0' && (c) <= '9') || ((c) >= 'A' && (c) <= 'Z') || ((c) >= 'a' && (c) <= 'z') || (c) == '-' || \
     (c) == '.' || (c) == '_' || (c) == '~' || (c) == '!' || (c) == '$' || (c) == '&' || (c) == '\'' ||      \
     (c) == '(' || (c) == ')' || (c) == '*' || (c) == '+' || (c) == ',' || (c) == ';' || (c) == '=' ||       \
     (c) == ':' || (c) == '@' || (c) == '[' || (c) == ']' || (c) == '%')

extern const bool xHttpTokenChars[256];
extern const bool xHttpFieldChars[256];
extern const bool xHttpAuthorityChars[256];

/** True for a tchar. */
static inline bool xHttpIsTokenChar(unsigned char c) { return xHttpTokenChars[c]; }

/** True for a field-value byte. */
static inline bool xHttpIsFieldChar(unsigned char c) { return xHttpFieldChars[c]; }

/** True for an authority byte (a Host or :authority): one load, not a chain of tests. */
static inline bool xHttpIsAuthorityChar(unsigned char c) { return xHttpAuthorityChars[c]; }

/** True when p[0, n) equals lower[0, n), which is lower case, ignoring ASCII case in p. */
static inline bool xHttpSameLower(const char *p, const char *lower, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if ((unsigned)(c - 'A') < 26u) c += 'a' - 'A';
        if (c != (unsigned char)lower[i]) return false;
    }
    return true;
}

/** True when name equals other, ignoring ASCII case in both. */
bool xHttpNameEquals(xStr name, const char *other);

/** True when the comma-separated list (a Connection or Upgrade value) holds token. */
bool xHttpListHasToken(xStr list, const char *token);

/** True when a response with this status carries a body (RFC 9110 §6.4.1). */
static inline bool xHttpStatusHasBody(int status) { return status >= 200 && status != 204 && status != 304; }

/** The longest decimal xHttpPutDecimal writes. */
#define XHTTP_DECIMAL_MAX 20

/** Writes v in decimal at p; returns the end. */
static inline char *xHttpPutDecimal(char *p, uint64_t v) {
    char tmp[XHTTP_DECIMAL_MAX];
    int n = 0;
    do tmp[n++] = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    while (n) *p++ = tmp[--n];
    return p;
}

#endif
