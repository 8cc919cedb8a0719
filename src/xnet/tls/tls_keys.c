/* tls_keys.c — TLS 1.3 traffic keys and KeyUpdate secrets, and TLS 1.2's key
 * block, with OpenSSL's HMAC and TLS1-PRF (see tls_keys.h). */
#include "xnet/tls/tls_keys.h"

#include <pthread.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/kdf.h>
#include <openssl/params.h>

/* ---- Algorithms, fetched once ---- */

/* OpenSSL 3 looks algorithms up by name, under a lock, whenever it is given
 * one; what is fetched here once is only copied afterwards. */
static struct {
    EVP_MAC_CTX *hmac_sha256, *hmac_sha384; /* digest set, no key: templates to copy */
    EVP_KDF *tls12_prf;
} algorithms;
static pthread_once_t algorithms_once = PTHREAD_ONCE_INIT;

static EVP_MAC_CTX *hmac_template(EVP_MAC *hmac, const char *digest) {
    EVP_MAC_CTX *ctx = hmac ? EVP_MAC_CTX_new(hmac) : NULL;
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)digest, 0),
        OSSL_PARAM_construct_end(),
    };
    if (ctx && EVP_MAC_CTX_set_params(ctx, params) != 1) {
        EVP_MAC_CTX_free(ctx);
        ctx = NULL;
    }
    return ctx;
}

static void fetch_algorithms(void) {
    EVP_MAC *hmac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    algorithms.hmac_sha256 = hmac_template(hmac, "SHA256");
    algorithms.hmac_sha384 = hmac_template(hmac, "SHA384");
    EVP_MAC_free(hmac); /* the templates hold it */
    algorithms.tls12_prf = EVP_KDF_fetch(NULL, "TLS1-PRF", NULL);
}

/* ---- TLS 1.3 ---- */

/* HKDF-Expand-Label(secret, label, "", out_len) of RFC 8446 §7.1, the hash
 * being the one of secret's length. Every output here fits one hash block,
 * where HKDF-Expand (RFC 5869 §2.3) is T(1) = HMAC(secret, info || 0x01). */
static bool expand_label(const unsigned char *secret, size_t secret_len, const char *label,
                         unsigned char *out, size_t out_len) {
    pthread_once(&algorithms_once, fetch_algorithms);
    unsigned char info[32], block[EVP_MAX_MD_SIZE];
    size_t label_len = strlen(label), n = 0, block_len = 0;
    info[n++] = (unsigned char)(out_len >> 8);
    info[n++] = (unsigned char)out_len;
    info[n++] = (unsigned char)(6 + label_len);
    memcpy(info + n, "tls13 ", 6);
    memcpy(info + n + 6, label, label_len);
    n += 6 + label_len;
    info[n++] = 0; /* no context */
    info[n++] = 1; /* the block counter */
    EVP_MAC_CTX *template = secret_len == 48 ? algorithms.hmac_sha384 : algorithms.hmac_sha256;
    EVP_MAC_CTX *hmac = template && out_len <= secret_len ? EVP_MAC_CTX_dup(template) : NULL;
    bool ok = hmac && EVP_MAC_init(hmac, secret, secret_len, NULL) == 1 &&
              EVP_MAC_update(hmac, info, n) == 1 && EVP_MAC_final(hmac, block, &block_len, sizeof block) == 1;
    EVP_MAC_CTX_free(hmac);
    if (ok) memcpy(out, block, out_len);
    OPENSSL_cleanse(block, sizeof block);
    return ok;
}

bool xTlsTrafficKeys(xTlsAead aead, const unsigned char *secret, size_t secret_len, unsigned char *key,
                     unsigned char iv[XTLS_IV_LEN]) {
    return expand_label(secret, secret_len, "key", key, xTlsAeadKeyLength(aead)) &&
           expand_label(secret, secret_len, "iv", iv, XTLS_IV_LEN);
}

bool xTlsNextTrafficSecret(const unsigned char *secret, size_t secret_len, unsigned char *next) {
    unsigned char out[XTLS_SECRET_MAX];
    bool ok = secret_len <= sizeof out && expand_label(secret, secret_len, "traffic upd", out, secret_len);
    if (ok) memcpy(next, out, secret_len); /* after the expansion read secret: next may be it */
    OPENSSL_cleanse(out, sizeof out);
    return ok;
}

/* ---- TLS 1.2 ---- */

bool xTlsTls12KeyBlock(xTlsAead aead, const char *digest, const unsigned char *master, size_t master_len,
                       const unsigned char client_random[32], const unsigned char server_random[32],
                       xTlsKeyBlock *block) {
    pthread_once(&algorithms_once, fetch_algorithms);
    unsigned char seed[13 + 64], bytes[2 * XTLS_KEY_MAX + 2 * XTLS_IV_LEN];
    size_t key_len = xTlsAeadKeyLength(aead);
    size_t iv_len = aead == XTLS_AEAD_CHACHA20_POLY1305 ? XTLS_IV_LEN : 4; /* GCM: the salt */
    memcpy(seed, "key expansion", 13);
    memcpy(seed + 13, server_random, 32);
    memcpy(seed + 45, client_random, 32);
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, (char *)digest, 0),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SECRET, (void *)master, master_len),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SEED, seed, sizeof seed),
        OSSL_PARAM_construct_end(),
    };
    EVP_KDF_CTX *kdf = algorithms.tls12_prf ? EVP_KDF_CTX_new(algorithms.tls12_prf) : NULL;
    bool ok = kdf && EVP_KDF_derive(kdf, bytes, 2 * key_len + 2 * iv_len, params) == 1;
    EVP_KDF_CTX_free(kdf);
    *block = (xTlsKeyBlock){0};
    if (ok) { /* client key, server key, client IV, server IV (no MAC keys for an AEAD) */
        memcpy(block->client_key, bytes, key_len);
        memcpy(block->server_key, bytes + key_len, key_len);
        memcpy(block->client_iv, bytes + 2 * key_len, iv_len);
        memcpy(block->server_iv, bytes + 2 * key_len + iv_len, iv_len);
    }
    OPENSSL_cleanse(bytes, sizeof bytes);
    return ok;
}
