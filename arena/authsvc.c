/* authsvc.c — the production stack's auth service (../shared/arena/CONTRACT.md
 * in the xKit workspace, "The stacks") on xKit: the contract of the arena's
 * shared `authsvc`, which its production entries run as it is, so that the
 * stack can be tested here and run whole where the arena's is not at hand.
 *
 *   /_auth     (any method) Authorization: Bearer <header>.<payload>.<signature>,
 *              a JWT signed with HMAC-SHA256 under JWT_SECRET (alg HS256): 200 with
 *              X-User-Id: <the payload's sub> and no body; 401 for anything
 *              else (no token, another scheme, a bad signature, no sub, an exp
 *              that has passed)
 *   GET /_health  200
 *
 * Environment: JWT_SECRET (default the arena's published bench secret),
 * AUTHSVC_LISTEN (host:port, default 0.0.0.0:9090). Workers: one per CPU
 * this process may run on. Nothing is cached: every request is verified. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <xbase/json.h>
#include <xhttp/server.h>

/* The arena's secret, published with it (frameworks/_shared/authsvc): a benchmark's, never a real one. */
#define ARENA_JWT_SECRET "httparena-bench-secret-do-not-use-in-production"

/* The longest token taken; the arena's is about 150 bytes. */
#define MAX_TOKEN 4096

static const char *secret;
static size_t secret_len;

/* Decodes base64url without padding (RFC 7515 §2) into out (cap bytes); -1 when it is not that. */
static long base64url_decode(const char *in, size_t len, unsigned char *out, size_t cap) {
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
    long n = base64url_decode(in, len, (unsigned char *)text, cap);
    return n > 0 && xJsonDocParse(doc, text, (size_t)n) == XOK &&
           xJsonTypeOf(xJsonDocRoot(doc)) == XJSON_OBJECT;
}

/* A field value of visible ASCII only: what X-User-Id may carry on. */
static bool printable(xStr s) {
    for (size_t i = 0; i < s.len; i++)
        if (s.data[i] <= ' ' || s.data[i] == 0x7f) return false;
    return s.len > 0;
}

/* The user the token names (sub, a string or an integer, as text in user), or false. */
static bool verify(xStr token, char *user, size_t cap) {
    const char *dot1 = token.len <= MAX_TOKEN ? memchr(token.data, '.', token.len) : NULL;
    const char *dot2 = dot1 ? memchr(dot1 + 1, '.', (size_t)(token.data + token.len - dot1 - 1)) : NULL;
    if (!dot2) return false;
    const char *sig = dot2 + 1;
    size_t signed_len = (size_t)(dot2 - token.data), sig_len = (size_t)(token.data + token.len - sig);
    unsigned char given[64], want[EVP_MAX_MD_SIZE];
    unsigned want_len = 0;
    long given_len = base64url_decode(sig, sig_len, given, sizeof given);
    if (!HMAC(EVP_sha256(), secret, (int)secret_len, (const unsigned char *)token.data, signed_len, want,
              &want_len) ||
        given_len != (long)want_len || CRYPTO_memcmp(given, want, want_len) != 0) {
        return false;
    }
    char text[MAX_TOKEN];
    _Alignas(16) unsigned char values[64 * 16]; /* a token's few claims parse here, no allocation */
    xJsonDoc doc;
    xJsonDocInit(&doc, values, sizeof values);
    xStr alg, sub_text;
    int64_t sub_number, exp;
    bool ok = json_part(token.data, (size_t)(dot1 - token.data), text, sizeof text, &doc) &&
              xJsonGetString(xJsonObjectGet(xJsonDocRoot(&doc), "alg"), &alg) == XOK && alg.len == 5 &&
              memcmp(alg.data, "HS256", 5) == 0;
    ok = ok && json_part(dot1 + 1, (size_t)(dot2 - dot1 - 1), text, sizeof text, &doc);
    const xJsonValue *claims = ok ? xJsonDocRoot(&doc) : NULL, *exp_value = xJsonObjectGet(claims, "exp");
    if (ok && exp_value && (xJsonGetInt64(exp_value, &exp) != XOK || exp <= (int64_t)time(NULL))) ok = false;
    if (ok && xJsonGetString(xJsonObjectGet(claims, "sub"), &sub_text) == XOK) {
        ok = sub_text.len < cap && printable(sub_text);
        if (ok) snprintf(user, cap, "%.*s", (int)sub_text.len, sub_text.data);
    } else if (ok && xJsonGetInt64(xJsonObjectGet(claims, "sub"), &sub_number) == XOK) {
        snprintf(user, cap, "%lld", (long long)sub_number);
    } else {
        ok = false;
    }
    xJsonDocFree(&doc);
    return ok;
}

static void on_auth(xHttpRequest *req, xHttpResponse *res, void *arg) {
    (void)arg;
    xStr value;
    char user[256];
    if (xHttpRequestHeader(req, "authorization", &value) && value.len > 7 &&
        memcmp(value.data, "Bearer ", 7) == 0 &&
        verify((xStr){value.data + 7, value.len - 7}, user, sizeof user)) {
        xHttpResponseAddHeader(res, "X-User-Id", user);
        xHttpResponseSend(res, "", 0);
        return;
    }
    xHttpResponseSetStatus(res, 401);
    xHttpResponseAddHeader(res, "WWW-Authenticate", "Bearer");
    xHttpResponseSend(res, "", 0);
}

static void on_health(xHttpRequest *req, xHttpResponse *res, void *arg) {
    (void)req;
    (void)arg;
    xHttpResponseSend(res, "", 0);
}

int main(void) {
    const char *env = getenv("JWT_SECRET");
    secret = env && *env ? env : ARENA_JWT_SECRET;
    secret_len = strlen(secret);
    env = getenv("AUTHSVC_LISTEN");
    char host[256];
    const char *listen_at = env && *env ? env : "0.0.0.0:9090", *colon = strrchr(listen_at, ':');
    unsigned port = colon ? (unsigned)atoi(colon + 1) : 0;
    if (!colon || port == 0 || port > 65535 || (size_t)(colon - listen_at) >= sizeof host) {
        fprintf(stderr, "authsvc: AUTHSVC_LISTEN must be host:port\n");
        return 2;
    }
    snprintf(host, sizeof host, "%.*s", (int)(colon - listen_at), listen_at);
    xHttpServerConf conf;
    xHttpServerConfInit(&conf);
    xHttpServer *server = xHttpServerCreate(NULL, &conf);
    bool ok = server && xHttpServerRoute(server, "/_auth", on_auth, NULL) == XOK &&
              xHttpServerRoute(server, "GET /_health", on_health, NULL) == XOK &&
              xHttpServerListen(server, host, (uint16_t)port) == XOK;
    xErrno err = XERR_STATE;
    if (ok) {
        printf("listening on %s:%u (%d workers)\n", host, port, xHttpServerWorkerCount(server));
        fflush(stdout);
        err = xHttpServerRun(server);
    } else if (server) {
        fprintf(stderr, "authsvc: %s\n", xHttpServerLastError(server));
    }
    if (server) xHttpServerDestroy(server);
    return err == XOK ? 0 : 1;
}
