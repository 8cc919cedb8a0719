/* test_tls_keys_openssl.c — what of xKit's TLS key schedule and record
 * protection (tls_keys.h, tls_aead.h) RFC 8448 has no trace of, checked
 * against OpenSSL computing it another way: the KeyUpdate's next traffic
 * secret against OpenSSL's HKDF (itself first checked against RFC 8448's
 * labels and keys), TLS 1.2's key block against OpenSSL's TLS1-PRF, and
 * records of every AEAD and version against ones sealed with EVP directly
 * from the RFCs' nonce and additional data. */
#include <stdint.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>

#include "check.h"
#include "xnet/tls/tls_aead.h"
#include "xnet/tls/tls_keys.h"

/* Bytes that differ from one position to the next, so a slice taken from the
 * wrong place shows. */
static void fill(unsigned char *p, size_t len, unsigned char seed) {
    for (size_t i = 0; i < len; i++) p[i] = (unsigned char)(seed + 7 * i);
}

/* ---- The KeyUpdate secret, against OpenSSL's HKDF ---- */

/* HkdfLabel (RFC 8446 §7.1) with an empty context: length, "tls13 " +
 * label, no context. */
static size_t hkdf_label(const char *label, size_t out_len, unsigned char *info) {
    size_t label_len = strlen(label), n = 0;
    info[n++] = (unsigned char)(out_len >> 8);
    info[n++] = (unsigned char)out_len;
    info[n++] = (unsigned char)(6 + label_len);
    memcpy(info + n, "tls13 ", 6);
    memcpy(info + n + 6, label, label_len);
    n += 6 + label_len;
    info[n++] = 0;
    return n;
}

/* HKDF-Expand-Label(secret, label, "", out_len) by OpenSSL's HKDF. */
static bool openssl_expand_label(const char *digest, const unsigned char *secret, size_t secret_len,
                                 const char *label, unsigned char *out, size_t out_len) {
    unsigned char info[64];
    size_t info_len = hkdf_label(label, out_len, info);
    int mode = EVP_KDF_HKDF_MODE_EXPAND_ONLY;
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, (char *)digest, 0),
        OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)secret, secret_len),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info, info_len),
        OSSL_PARAM_construct_end(),
    };
    EVP_KDF *hkdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
    EVP_KDF_CTX *ctx = hkdf ? EVP_KDF_CTX_new(hkdf) : NULL;
    bool ok = ctx && EVP_KDF_derive(ctx, out, out_len, params) == 1;
    EVP_KDF_CTX_free(ctx);
    EVP_KDF_free(hkdf);
    return ok;
}

/* Before the oracle is trusted with "traffic upd": RFC 8448 §3's "{server}
 * derive write traffic keys for application data" gives its key info, iv
 * info, key and iv. */
static void the_hkdf_oracle_gives_rfc8448s_labels_and_keys(void) {
    static const unsigned char secret[32] = {
        0xa1, 0x1a, 0xf9, 0xf0, 0x55, 0x31, 0xf8, 0x56, 0xad, 0x47, 0x11, 0x6b, 0x45, 0xa9, 0x50, 0x32,
        0x82, 0x04, 0xb4, 0xf4, 0x4b, 0xfb, 0x6b, 0x3a, 0x4b, 0x4f, 0x1f, 0x3f, 0xcb, 0x63, 0x16, 0x43,
    };
    static const unsigned char key_info[13] = {0x00, 0x10, 0x09, 0x74, 0x6c, 0x73, 0x31,
                                               0x33, 0x20, 0x6b, 0x65, 0x79, 0x00};
    static const unsigned char iv_info[12] = {0x00, 0x0c, 0x08, 0x74, 0x6c, 0x73,
                                              0x31, 0x33, 0x20, 0x69, 0x76, 0x00};
    static const unsigned char key[16] = {0x9f, 0x02, 0x28, 0x3b, 0x6c, 0x9c, 0x07, 0xef,
                                          0xc2, 0x6b, 0xb9, 0xf2, 0xac, 0x92, 0xe3, 0x56};
    static const unsigned char iv[12] = {0xcf, 0x78, 0x2b, 0x88, 0xdd, 0x83,
                                         0x54, 0x9a, 0xad, 0xf1, 0xe9, 0x84};
    unsigned char info[64], out[16];
    CHECK(hkdf_label("key", 16, info) == sizeof key_info && memcmp(info, key_info, sizeof key_info) == 0);
    CHECK(hkdf_label("iv", 12, info) == sizeof iv_info && memcmp(info, iv_info, sizeof iv_info) == 0);
    CHECK(openssl_expand_label("SHA256", secret, 32, "key", out, 16) && memcmp(out, key, 16) == 0);
    CHECK(openssl_expand_label("SHA256", secret, 32, "iv", out, 12) && memcmp(out, iv, 12) == 0);
}

/* Three KeyUpdates in a row from secret (its suite's hash by name), each
 * next secret computed in place, and the keys of each. */
static void check_key_updates(const char *digest, xTlsAead aead, unsigned char *secret, size_t secret_len) {
    size_t key_len = xTlsAeadKeyLength(aead);
    for (int update = 1; update <= 3; update++) {
        unsigned char want[XTLS_SECRET_MAX], want_key[XTLS_KEY_MAX], want_iv[XTLS_IV_LEN];
        unsigned char key[XTLS_KEY_MAX], iv[XTLS_IV_LEN];
        CHECK(openssl_expand_label(digest, secret, secret_len, "traffic upd", want, secret_len));
        CHECK(xTlsNextTrafficSecret(secret, secret_len, secret));
        CHECK_MSG(memcmp(secret, want, secret_len) == 0, "%s: secret of update %d", digest, update);
        CHECK(openssl_expand_label(digest, secret, secret_len, "key", want_key, key_len) &&
              openssl_expand_label(digest, secret, secret_len, "iv", want_iv, XTLS_IV_LEN));
        CHECK(xTlsTrafficKeys(aead, secret, secret_len, key, iv));
        CHECK_MSG(memcmp(key, want_key, key_len) == 0 && memcmp(iv, want_iv, XTLS_IV_LEN) == 0,
                  "%s: keys of update %d", digest, update);
    }
}

static void key_update_secrets_match_openssl_hkdf(void) {
    unsigned char sha256_secret[32], sha384_secret[48];
    fill(sha256_secret, sizeof sha256_secret, 0x11);
    fill(sha384_secret, sizeof sha384_secret, 0x22);
    check_key_updates("SHA256", XTLS_AEAD_AES_128_GCM, sha256_secret, sizeof sha256_secret);
    check_key_updates("SHA256", XTLS_AEAD_CHACHA20_POLY1305, sha256_secret, sizeof sha256_secret);
    check_key_updates("SHA384", XTLS_AEAD_AES_256_GCM, sha384_secret, sizeof sha384_secret);
}

/* ---- TLS 1.2's key block, against OpenSSL's TLS1-PRF ---- */

/* key_block = PRF(master, "key expansion", server_random + client_random)
 * (RFC 5246 §6.3), taken apart here: an AEAD suite has no MAC keys, so the
 * client's key, the server's, the client's IV, the server's. */
static void check_key_block(xTlsAead aead, const char *digest, size_t iv_len) {
    unsigned char master[48], client_random[32], server_random[32], seed[13 + 64], want[2 * 32 + 2 * 12];
    fill(master, sizeof master, 0x30);
    fill(client_random, sizeof client_random, 0x40);
    fill(server_random, sizeof server_random, 0x50);
    memcpy(seed, "key expansion", 13);
    memcpy(seed + 13, server_random, 32);
    memcpy(seed + 45, client_random, 32);
    size_t key_len = xTlsAeadKeyLength(aead), want_len = 2 * key_len + 2 * iv_len;
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, (char *)digest, 0),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SECRET, master, sizeof master),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SEED, seed, sizeof seed),
        OSSL_PARAM_construct_end(),
    };
    EVP_KDF *prf = EVP_KDF_fetch(NULL, "TLS1-PRF", NULL);
    EVP_KDF_CTX *ctx = prf ? EVP_KDF_CTX_new(prf) : NULL;
    CHECK(ctx && EVP_KDF_derive(ctx, want, want_len, params) == 1);
    EVP_KDF_CTX_free(ctx);
    EVP_KDF_free(prf);
    xTlsKeyBlock block;
    CHECK(xTlsTls12KeyBlock(aead, digest, master, sizeof master, client_random, server_random, &block));
    CHECK_MSG(memcmp(block.client_key, want, key_len) == 0, "%s: client key", digest);
    CHECK_MSG(memcmp(block.server_key, want + key_len, key_len) == 0, "%s: server key", digest);
    CHECK_MSG(memcmp(block.client_iv, want + 2 * key_len, iv_len) == 0, "%s: client iv", digest);
    CHECK_MSG(memcmp(block.server_iv, want + 2 * key_len + iv_len, iv_len) == 0, "%s: server iv", digest);
}

static void tls12_key_blocks_match_openssl_prf(void) {
    check_key_block(XTLS_AEAD_AES_128_GCM, "SHA256", 4); /* the salt (RFC 5288 §3) */
    check_key_block(XTLS_AEAD_AES_256_GCM, "SHA384", 4);
    check_key_block(XTLS_AEAD_CHACHA20_POLY1305, "SHA256", 12); /* RFC 7905 §2 */
}

/* ---- Records, against EVP directly ---- */

#define PLAIN_LEN 40
#define RECORD_MAX (XTLS_RECORD_HEADER + XTLS_EXPLICIT_NONCE + PLAIN_LEN + 1 + XTLS_RECORD_TAG)

static void put_be64(unsigned char *p, uint64_t v) {
    for (int i = 7; i >= 0; i--, v >>= 8) p[i] = (unsigned char)v;
}

static const EVP_CIPHER *evp_cipher(xTlsAead aead) {
    return aead == XTLS_AEAD_AES_128_GCM   ? EVP_aes_128_gcm()
           : aead == XTLS_AEAD_AES_256_GCM ? EVP_aes_256_gcm()
                                           : EVP_chacha20_poly1305();
}

/* The record that carries plain as record seq of type: TLS 1.3 (RFC 8446
 * §5.2-5.3): the type inside, the IV XOR the sequence number, the header as
 * additional data; TLS 1.2 (RFC 5246 §6.2.3.3): sequence number, type,
 * version and length as additional data, and AES-GCM's nonce the salt and 8
 * explicit bytes it carries (RFC 5288 §3), ChaCha20-Poly1305's the IV XOR
 * the sequence number (RFC 7905 §2). */
static size_t model_record(int version, xTlsAead aead, const unsigned char *key, const unsigned char *iv,
                           uint64_t seq, int type, const unsigned char *plain, unsigned char *out) {
    bool tls13 = version == XTLS_VERSION_1_3, explicit = !tls13 && aead != XTLS_AEAD_CHACHA20_POLY1305;
    unsigned char seq_be[8], nonce[XTLS_IV_LEN], inner[PLAIN_LEN + 1], aad[13];
    put_be64(seq_be, seq);
    memcpy(nonce, iv, XTLS_IV_LEN);
    for (int i = 0; i < 8; i++) nonce[4 + i] = explicit ? seq_be[i] : nonce[4 + i] ^ seq_be[i];
    memcpy(inner, plain, PLAIN_LEN);
    inner[PLAIN_LEN] = (unsigned char)type;
    size_t inner_len = PLAIN_LEN + (tls13 ? 1 : 0), skip = explicit ? XTLS_EXPLICIT_NONCE : 0;
    size_t body = skip + inner_len + XTLS_RECORD_TAG;
    unsigned char header[XTLS_RECORD_HEADER] = {(unsigned char)(tls13 ? XTLS_CT_APPLICATION_DATA : type), 3,
                                                3, (unsigned char)(body >> 8), (unsigned char)body};
    memcpy(out, header, sizeof header);
    memcpy(out + XTLS_RECORD_HEADER, seq_be, skip);
    memcpy(aad, seq_be, 8);
    aad[8] = (unsigned char)type;
    aad[9] = aad[10] = 3;
    aad[11] = 0;
    aad[12] = PLAIN_LEN;
    unsigned char *cipher = out + XTLS_RECORD_HEADER + skip;
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int n, last;
    CHECK(ctx && EVP_EncryptInit_ex(ctx, evp_cipher(aead), NULL, key, nonce) == 1 &&
          EVP_EncryptUpdate(ctx, NULL, &n, tls13 ? header : aad, tls13 ? XTLS_RECORD_HEADER : 13) == 1 &&
          EVP_EncryptUpdate(ctx, cipher, &n, inner, (int)inner_len) == 1 &&
          EVP_EncryptFinal_ex(ctx, cipher + n, &last) == 1 &&
          EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, XTLS_RECORD_TAG, cipher + inner_len) == 1);
    EVP_CIPHER_CTX_free(ctx);
    return XTLS_RECORD_HEADER + body;
}

static void check_records(int version, xTlsAead aead) {
    unsigned char key[XTLS_KEY_MAX], iv[XTLS_IV_LEN], plain[PLAIN_LEN], want[RECORD_MAX], rec[RECORD_MAX];
    fill(key, sizeof key, 0x60);
    fill(iv, sizeof iv, 0x70);
    fill(plain, sizeof plain, 0x80);
    xTlsAeadKeys seal, open;
    CHECK(xTlsAeadKeysInit(&seal, version, aead, true, key, iv) &&
          xTlsAeadKeysInit(&open, version, aead, false, key, iv));
    /* Every byte of the sequence number differs, so one out of place shows. */
    for (uint64_t seq = 0; seq < 3; seq++) {
        uint64_t number = 0x0102030405060708 + seq;
        size_t want_len = model_record(version, aead, key, iv, number, XTLS_CT_APPLICATION_DATA, plain, want);
        size_t rec_len = 0;
        memcpy(rec + XTLS_RECORD_HEADER + xTlsAeadExplicitNonce(&seal), plain, PLAIN_LEN);
        CHECK(xTlsAeadSeal(&seal, number, rec, PLAIN_LEN, XTLS_CT_APPLICATION_DATA, &rec_len));
        CHECK_MSG(rec_len == want_len && memcmp(rec, want, want_len) == 0,
                  "version %x, aead %d: sealed otherwise", version, (int)aead);
        xTlsPlaintext opened = {0};
        CHECK(xTlsAeadOpen(&open, number + 1, rec, rec_len - XTLS_RECORD_HEADER, &opened) ==
              XTLS_OPEN_FORGED);
        memcpy(rec, want, want_len); /* a failed open may have left its bytes in place */
        CHECK(xTlsAeadOpen(&open, number, rec, rec_len - XTLS_RECORD_HEADER, &opened) == XTLS_OPENED);
        CHECK(opened.type == XTLS_CT_APPLICATION_DATA && opened.len == PLAIN_LEN &&
              memcmp(opened.data, plain, PLAIN_LEN) == 0);
    }
    xTlsAeadKeysFree(&seal);
    xTlsAeadKeysFree(&open);
}

static void records_of_every_aead_and_version_match_evp(void) {
    for (xTlsAead aead = XTLS_AEAD_AES_128_GCM; aead <= XTLS_AEAD_CHACHA20_POLY1305; aead++) {
        check_records(XTLS_VERSION_1_2, aead);
        check_records(XTLS_VERSION_1_3, aead);
    }
}

int main(void) {
    RUN(the_hkdf_oracle_gives_rfc8448s_labels_and_keys);
    RUN(key_update_secrets_match_openssl_hkdf);
    RUN(tls12_key_blocks_match_openssl_prf);
    RUN(records_of_every_aead_and_version_match_evp);
    return CHECK_SUMMARY();
}
