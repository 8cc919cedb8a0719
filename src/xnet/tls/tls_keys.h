/* tls_keys.h — the key schedule our record layer needs after a handshake:
 * TLS 1.3's traffic key and IV from a traffic secret (RFC 8446 §7.3) and the
 * next secret of a KeyUpdate (§7.2), and TLS 1.2's key block from the master
 * secret (RFC 5246 §6.3).
 *
 * Secrets in, keys out: nothing here knows of a connection, and nothing is
 * kept but the HMAC and PRF algorithms, fetched once. */
#ifndef XNET_TLS_TLS_KEYS_H
#define XNET_TLS_TLS_KEYS_H

#include <stdbool.h>
#include <stddef.h>

#include "xnet/tls/tls_aead.h"

#define XTLS_SECRET_MAX 48 /* SHA-384 */

/** TLS 1.3: the write key (xTlsAeadKeyLength(aead) bytes) and IV of a
 *  traffic secret of secret_len bytes, the suite's hash length (32 for
 *  SHA-256, 48 for SHA-384): HKDF-Expand-Label(secret, "key" and "iv"). */
bool xTlsTrafficKeys(xTlsAead aead, const unsigned char *secret, size_t secret_len, unsigned char *key,
                     unsigned char iv[XTLS_IV_LEN]);

/** TLS 1.3 KeyUpdate: the traffic secret that follows secret,
 *  HKDF-Expand-Label(secret, "traffic upd", "", secret_len). next may be
 *  secret itself. */
bool xTlsNextTrafficSecret(const unsigned char *secret, size_t secret_len, unsigned char *next);

/** TLS 1.2's keys for an AEAD suite: no MAC keys; an IV is AES-GCM's 4-byte
 *  salt (RFC 5288 §3) or ChaCha20-Poly1305's 12 bytes (RFC 7905 §2). */
typedef struct xTlsKeyBlock {
    unsigned char client_key[XTLS_KEY_MAX], server_key[XTLS_KEY_MAX];
    unsigned char client_iv[XTLS_IV_LEN], server_iv[XTLS_IV_LEN];
} xTlsKeyBlock;

/** TLS 1.2: the key block, PRF(master, "key expansion", server_random +
 *  client_random); digest is the suite's PRF hash by name ("SHA256"). */
bool xTlsTls12KeyBlock(xTlsAead aead, const char *digest, const unsigned char *master, size_t master_len,
                       const unsigned char client_random[32], const unsigned char server_random[32],
                       xTlsKeyBlock *block);

#endif
