/* jwt.c — HS256 JSON Web Tokens (RFC 7519, signed as RFC 7515 says) as the
 * arena's shared auth service checks them: the signature first, then the
 * header's alg, then the claims. The decoded parts are parsed with xKit's
 * own JSON reader into a buffer on the stack: no allocation per token. */
#include "jwt.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <xbase/json.h>

long arenaBase64UrlDecode(const char *in, size_t len, unsigned char *out, size_t cap) {
    unsigned bits = 0, nbits = 0;
    size_t n = 0;
    if (len % 4 == 1) return -1;
    for (size_t i = 0; i < len; i++) {
        char c = in[i];
        unsigned v;
        if (c >= 'A' && c <= 'Z')
            v = (unsigned)(c - 'A');
        else if (c >= 'a' && c <= 'z')
            v = (unsigned)(c - 'a') + 26;
        else if (c >= '0' && c <= '9')
            v = (unsigned)(c - '0') + 52;
        else if (c == '-')
            v = 62;
        else if (c == '_')
            v = 63;
        else
            return -1;
        bits = (bits << 6) | v;
        nbits += 6;
        if (nbits >= 8) {
            nbits -= 8;
            if (n == cap) return -1;
            out[n++] = (unsigned char)(bits >> nbits);
            bits &= (1u << nbits) - 1;
        }
    }
    return bits ? -1 : (long)n; /* leftover bits must be zero: one spelling per token */
}

/* The decoded JSON object of a base64url part in doc; false when it is not one. */
static bool json_part(const char *in, size_t len, char *text, size_t cap, xJsonDoc *doc) {
    long n = arenaBase64UrlDecode(in, len, (unsigned char *)text, cap);
    return n > 0 && xJsonDocParse(doc, text, (size_t)n) == XOK &&
           xJsonTypeOf(xJsonDocRoot(doc)) == XJSON_OBJECT;
}

/* A field value of visible ASCII only: what X-User-Id may carry on. */
static bool printable(xStr s) {
    for (size_t i = 0; i < s.len; i++)
        if ((unsigned char)s.data[i] <= ' ' || (unsigned char)s.data[i] >= 0x7f) return false;
    return s.len > 0;
}

/* The claims' verdict, with sub in user when VALID. */
static ArenaJwtVerdict check_claims(const xJsonValue *claims, int64_t now, char *user, size_t cap) {
    const xJsonValue *exp_value = xJsonObjectGet(claims, "exp"), *sub = xJsonObjectGet(claims, "sub");
    int64_t exp, sub_number;
    xStr sub_text;
    if (exp_value && xJsonGetInt64(exp_value, &exp) != XOK) return ARENA_JWT_BAD_CLAIMS;
    if (exp_value && exp <= now) return ARENA_JWT_EXPIRED;
    if (xJsonGetString(sub, &sub_text) == XOK) {
        if (sub_text.len >= cap || !printable(sub_text)) return ARENA_JWT_NO_SUBJECT;
        snprintf(user, cap, "%.*s", (int)sub_text.len, sub_text.data);
        return ARENA_JWT_VALID;
    }
    if (xJsonGetInt64(sub, &sub_number) == XOK &&
        snprintf(user, cap, "%lld", (long long)sub_number) < (int)cap)
        return ARENA_JWT_VALID;
    return ARENA_JWT_NO_SUBJECT;
}

ArenaJwtVerdict arenaJwtVerify(xStr token, xStr secret, int64_t now, char *user, size_t cap) {
    const char *dot1 = token.len <= ARENA_JWT_MAX_TOKEN ? memchr(token.data, '.', token.len) : NULL;
    const char *dot2 = dot1 ? memchr(dot1 + 1, '.', (size_t)(token.data + token.len - dot1 - 1)) : NULL;
    if (!dot2 || cap == 0) return ARENA_JWT_MALFORMED;
    const char *sig = dot2 + 1;
    size_t signed_len = (size_t)(dot2 - token.data), sig_len = (size_t)(token.data + token.len - sig);
    unsigned char given[64], want[EVP_MAX_MD_SIZE];
    unsigned want_len = 0;
    long given_len = arenaBase64UrlDecode(sig, sig_len, given, sizeof given);
    if (given_len < 0) return ARENA_JWT_MALFORMED;
    if (!HMAC(EVP_sha256(), secret.data, (int)secret.len, (const unsigned char *)token.data, signed_len, want,
              &want_len) ||
        given_len != (long)want_len || CRYPTO_memcmp(given, want, want_len) != 0) {
        return ARENA_JWT_BAD_SIGNATURE;
    }
    char text[ARENA_JWT_MAX_TOKEN];
    _Alignas(16) unsigned char values[64 * 16]; /* a token's few claims parse here, no allocation */
    xJsonDoc doc;
    xJsonDocInit(&doc, values, sizeof values);
    xStr alg;
    ArenaJwtVerdict verdict = ARENA_JWT_VALID;
    if (!json_part(token.data, (size_t)(dot1 - token.data), text, sizeof text, &doc) ||
        xJsonGetString(xJsonObjectGet(xJsonDocRoot(&doc), "alg"), &alg) != XOK || alg.len != 5 ||
        memcmp(alg.data, "HS256", 5) != 0) {
        verdict = ARENA_JWT_BAD_HEADER;
    } else if (!json_part(dot1 + 1, (size_t)(dot2 - dot1 - 1), text, sizeof text, &doc)) {
        verdict = ARENA_JWT_BAD_CLAIMS;
    } else {
        verdict = check_claims(xJsonDocRoot(&doc), now, user, cap);
    }
    xJsonDocFree(&doc);
    return verdict;
}
