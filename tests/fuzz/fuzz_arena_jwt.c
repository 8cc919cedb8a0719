/* fuzz_arena_jwt.c — the production stack's token check (arena/jwt.h) on
 * tokens as a client could send them to the auth service, against models
 * built on OpenSSL's base64 and jansson.
 *
 * Byte 0: bit 0 picks the shape, bit 1 the signature, bits 2-7 the room for
 * the user (0: 256 bytes, else that many), so that a long sub is tried too.
 *   - shape 0, a raw token: the rest as it is; with bit 1, the rest taken
 *     as header.payload and the right signature appended, so that whatever
 *     the parts hold gets past the HMAC.
 *   - shape 1, JSON: the rest split at its first newline into the header's
 *     and the payload's JSON text, encoded here (OpenSSL's encoder) and
 *     signed; with bit 1, one bit of the signature flipped.
 * Checked:
 *   - every part between dots decodes as the model says: a part is taken
 *     exactly when it is the one spelling (no padding, zero leftover bits)
 *     of some bytes, and to those bytes;
 *   - a flipped signature is BAD_SIGNATURE, a raw token without the secret's
 *     signature never VALID;
 *   - a signed token gets the verdict a model of the same rules on jansson
 *     gives (HS256 header, exp an integer after now, sub printable text
 *     shorter than the room or an integer), and the same user, wherever
 *     the model knows: jansson reads both parts or a part holds a raw NUL
 *     byte, which JSON never does (jansson refuses some documents RFC 8259
 *     allows, fuzz_json_reader.c lists them; there only coherence is
 *     checked). */
#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <string.h>

#include "../../arena/jwt.h"
#include "fuzz_check.h"

#define SECRET "fuzz-secret"
#define NOW 1800000000 /* a fixed clock: exp is compared with it */

/* base64url of n bytes into out (room for 4 * (n / 3 + 1) + 1), without padding; its length. */
static size_t encode(const unsigned char *in, size_t n, char *out) {
    int len = EVP_EncodeBlock((unsigned char *)out, in, (int)n);
    while (len > 0 && out[len - 1] == '=') len--;
    for (int i = 0; i < len; i++) out[i] = out[i] == '+' ? '-' : out[i] == '/' ? '_' : out[i];
    out[len] = '\0';
    return (size_t)len;
}

/* The model's base64url decoder: OpenSSL's base64 after translating the alphabet, then the
 * one-spelling rule by encoding back. The decoded length, or -1. */
static long model_decode(const char *in, size_t len, unsigned char *out, size_t cap) {
    if (len % 4 == 1) return -1;
    char *padded = malloc(len + 4), *again = malloc(len + 8);
    unsigned char *bytes = malloc(len + 4);
    size_t plen = 0;
    long n = 0;
    for (size_t i = 0; i < len && n == 0; i++) {
        char c = in[i];
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))
            padded[plen++] = c;
        else if (c == '-' || c == '_')
            padded[plen++] = c == '-' ? '+' : '/';
        else
            n = -1;
    }
    if (n == 0) {
        size_t pads = (4 - plen % 4) % 4;
        memset(padded + plen, '=', pads);
        int got = EVP_DecodeBlock(bytes, (unsigned char *)padded, (int)(plen + pads));
        n = got < 0 ? -1 : got - (long)pads;
        if (n >= 0 && (encode(bytes, (size_t)n, again) != len || memcmp(again, in, len) != 0)) n = -1;
        if (n > (long)cap) n = -1;
        if (n >= 0) memcpy(out, bytes, (size_t)n);
    }
    free(padded), free(again), free(bytes);
    return n;
}

static void check_parts(const char *token, size_t len) {
    unsigned char *ours = malloc(len + 1), *model = malloc(len + 1);
    for (size_t start = 0; start <= len;) {
        const char *dot = memchr(token + start, '.', len - start);
        size_t end = dot ? (size_t)(dot - token) : len,
               cap = (end - start) % 7 == 0 ? (end - start) / 2 : len;
        long a = arenaBase64UrlDecode(token + start, end - start, ours, cap);
        long b = model_decode(token + start, end - start, model, cap);
        FUZZ_ASSERT(a == b, "part at %zu of %zu bytes: ours %ld, the model %ld", start, end - start, a, b);
        FUZZ_ASSERT(a <= 0 || memcmp(ours, model, (size_t)a) == 0, "part at %zu decodes to other bytes",
                    start);
        start = end + 1;
    }
    free(ours), free(model);
}

/* The model's verdict for a token whose signature is right, from the decoded parts' JSON. */
static ArenaJwtVerdict model_verdict(const char *header, size_t hlen, const char *claims_text, size_t clen,
                                     size_t cap, char *user, bool *jansson_read_both) {
    unsigned flags = JSON_DECODE_ANY | JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL;
    json_error_t error;
    /* A raw NUL byte is never JSON; jansson takes one after a number for the end of the text. */
    bool head_nul = memchr(header, 0, hlen), claims_nul = memchr(claims_text, 0, clen);
    json_t *head = head_nul ? NULL : json_loadb(header, hlen, flags, &error);
    json_t *claims = claims_nul ? NULL : json_loadb(claims_text, clen, flags, &error);
    *jansson_read_both = (head || head_nul) && (claims || claims_nul);
    ArenaJwtVerdict verdict = ARENA_JWT_VALID;
    json_t *alg = json_object_get(head, "alg"), *exp = json_object_get(claims, "exp");
    json_t *sub = json_object_get(claims, "sub");
    if (hlen == 0 || !json_is_object(head) || !json_is_string(alg) || json_string_length(alg) != 5 ||
        memcmp(json_string_value(alg), "HS256", 5) != 0) {
        verdict = ARENA_JWT_BAD_HEADER;
    } else if (clen == 0 || !json_is_object(claims) || (exp && !json_is_integer(exp))) {
        verdict = ARENA_JWT_BAD_CLAIMS;
    } else if (exp && json_integer_value(exp) <= NOW) {
        verdict = ARENA_JWT_EXPIRED;
    } else if (json_is_string(sub)) {
        size_t n = json_string_length(sub);
        const char *s = json_string_value(sub);
        verdict = n > 0 && n < cap ? ARENA_JWT_VALID : ARENA_JWT_NO_SUBJECT;
        for (size_t i = 0; i < n && verdict == ARENA_JWT_VALID; i++)
            if ((unsigned char)s[i] <= ' ' || (unsigned char)s[i] >= 0x7f) verdict = ARENA_JWT_NO_SUBJECT;
        if (verdict == ARENA_JWT_VALID) memcpy(user, s, n), user[n] = '\0';
    } else if (json_is_integer(sub) &&
               snprintf(user, cap, "%lld", (long long)json_integer_value(sub)) < (int)cap) {
        verdict = ARENA_JWT_VALID;
    } else {
        verdict = ARENA_JWT_NO_SUBJECT;
    }
    json_decref(head);
    json_decref(claims);
    return verdict;
}

/* header.payload (len bytes at signed_part) with its signature appended; flip spoils one bit of it. */
static char *sign(const char *signed_part, size_t len, bool flip, size_t *token_len) {
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned mac_len = 0;
    HMAC(EVP_sha256(), SECRET, (int)strlen(SECRET), (const unsigned char *)signed_part, len, mac, &mac_len);
    if (flip) mac[(unsigned char)signed_part[0] % mac_len] ^= 1;
    char *token = malloc(len + 1 + 4 * (mac_len / 3 + 1) + 1);
    memcpy(token, signed_part, len);
    token[len] = '.';
    *token_len = len + 1 + encode(mac, mac_len, token + len + 1);
    return token;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 2 * ARENA_JWT_MAX_TOKEN) return 0;
    bool json_shape = data[0] & 1, signature_bit = data[0] & 2;
    size_t cap = data[0] >> 2 ? data[0] >> 2 : 256;
    const char *rest = (const char *)data + 1;
    size_t rest_len = size - 1, token_len = 0;
    char *token, user[256] = "", model_user[256] = "";
    const char *newline = json_shape ? memchr(rest, '\n', rest_len) : NULL;
    size_t hlen = newline ? (size_t)(newline - rest) : rest_len, clen = newline ? rest_len - hlen - 1 : 0;
    if (json_shape) { /* header.payload made here from the JSON texts */
        char *signed_part = malloc(4 * (rest_len / 3 + 2) + 2);
        size_t n = encode((const unsigned char *)rest, hlen, signed_part);
        signed_part[n++] = '.';
        n += encode((const unsigned char *)rest + hlen + (newline ? 1 : 0), clen, signed_part + n);
        token = sign(signed_part, n, signature_bit, &token_len);
        free(signed_part);
    } else if (signature_bit) {
        token = sign(rest, rest_len, false, &token_len);
    } else {
        token = malloc(rest_len ? rest_len : 1); /* a block of its own: a read past it is caught */
        memcpy(token, rest, rest_len);
        token_len = rest_len;
    }
    check_parts(token, token_len);
    ArenaJwtVerdict verdict =
        arenaJwtVerify((xStr){token, token_len}, (xStr){SECRET, strlen(SECRET)}, NOW, user, cap);
    FUZZ_ASSERT(verdict >= ARENA_JWT_VALID && verdict <= ARENA_JWT_NO_SUBJECT, "verdict %d", (int)verdict);
    if (verdict == ARENA_JWT_VALID) {
        size_t n = strlen(user);
        FUZZ_ASSERT(n > 0 && n < cap, "a user of %zu bytes with room for %zu", n, cap);
        for (size_t i = 0; i < n; i++)
            FUZZ_ASSERT(user[i] > ' ' && user[i] < 0x7f, "byte %zu of the user is %#x", i, (unsigned)user[i]);
    }
    if (json_shape && signature_bit) {
        FUZZ_ASSERT(verdict == ARENA_JWT_BAD_SIGNATURE, "a spoilt signature got verdict %d", (int)verdict);
    } else if (!json_shape && !signature_bit) {
        FUZZ_ASSERT(verdict != ARENA_JWT_VALID, "a token without the secret's signature was taken");
    } else if (json_shape && token_len <= ARENA_JWT_MAX_TOKEN) {
        bool jansson_read_both;
        ArenaJwtVerdict model = model_verdict(rest, hlen, rest + hlen + (newline ? 1 : 0), clen, cap,
                                              model_user, &jansson_read_both);
        if (jansson_read_both) {
            FUZZ_ASSERT(verdict == model, "verdict %d, the model's %d", (int)verdict, (int)model);
            FUZZ_ASSERT(verdict != ARENA_JWT_VALID || strcmp(user, model_user) == 0,
                        "user '%s', the model's '%s'", user, model_user);
        }
    } else if (json_shape) {
        FUZZ_ASSERT(verdict == ARENA_JWT_MALFORMED, "a token of %zu bytes got verdict %d", token_len,
                    (int)verdict);
    }
    free(token);
    return 0;
}
