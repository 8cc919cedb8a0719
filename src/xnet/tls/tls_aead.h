/* tls_aead.h — sealing and opening one TLS record with an AEAD, in place:
 * the per-record nonce, the additional data, the TLS 1.3 inner content type
 * and its padding, and the tag (RFC 8446 §5.2-5.3; RFC 5288 §3 and RFC 5246
 * §6.2.3.3 for TLS 1.2 AES-GCM; RFC 7905 §2 for TLS 1.2 ChaCha20-Poly1305).
 *
 * A record and its keys go in, a record comes out: nothing here knows of a
 * connection, a socket or a sequence of records. Which sequence number a
 * record has, and when keys are spent (xTlsKeyUseAt), is the caller's to
 * track; tls_records.c does, over a connection. */
#ifndef XNET_TLS_TLS_AEAD_H
#define XNET_TLS_TLS_AEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <openssl/evp.h>

#include <xhttp/tls_conf.h>

/* The AEADs this record layer speaks. */
typedef enum xTlsAead {
    XTLS_AEAD_AES_128_GCM,
    XTLS_AEAD_AES_256_GCM,
    XTLS_AEAD_CHACHA20_POLY1305,
} xTlsAead;

/* Record content types (RFC 8446 §5.1, RFC 5246 §6.2.1). */
enum { XTLS_CT_ALERT = 21, XTLS_CT_HANDSHAKE = 22, XTLS_CT_APPLICATION_DATA = 23 };

#define XTLS_RECORD_HEADER 5
#define XTLS_RECORD_TAG 16
#define XTLS_PLAIN_MAX 16384 /* a record's plaintext, at most (RFC 8446 §5.1) */
#define XTLS_IV_LEN 12
#define XTLS_KEY_MAX 32
#define XTLS_EXPLICIT_NONCE 8 /* TLS 1.2 AES-GCM sends this much of its nonce */

/** The AEAD for OpenSSL's cipher NID (NID_aes_128_gcm, ...), or false when
 *  this record layer does not speak it. */
bool xTlsAeadOfNid(int nid, xTlsAead *aead);

/** The AEAD's key length: 16 or 32. */
static inline size_t xTlsAeadKeyLength(xTlsAead aead) { return aead == XTLS_AEAD_AES_128_GCM ? 16 : 32; }

/** What a direction's keys may still do before sealing or opening the
 *  record with sequence number seq: RFC 8446 §5.5 limits AES-GCM keys to
 *  about 2^24.5 full records (we stop at 2^24); ChaCha20-Poly1305's limit is
 *  past 2^64, so for it only the sequence number must not wrap. */
typedef enum xTlsKeyUse {
    XTLS_KEYS_USABLE, /* seal or open with them */
    XTLS_KEYS_SPENT,  /* TLS 1.3 moves to new keys (KeyUpdate); TLS 1.2 closes */
    XTLS_KEYS_LAST,   /* seq is the last one before a wrap: nothing may be sealed or opened under it */
} xTlsKeyUse;

xTlsKeyUse xTlsKeyUseAt(xTlsAead aead, uint64_t seq);

/** One direction's record protection: the AEAD, keyed for sealing or for
 *  opening, and the IV each record's nonce comes from. */
typedef struct xTlsAeadKeys {
    int version; /* XTLS_VERSION_1_2 or XTLS_VERSION_1_3 */
    xTlsAead aead;
    EVP_CIPHER_CTX *ctx;
    unsigned char iv[XTLS_IV_LEN]; /* TLS 1.2 AES-GCM uses the first 4 (the salt) */
} xTlsAeadKeys;

/** Keys keys with key (xTlsAeadKeyLength bytes) and iv, for sealing or for
 *  opening. False, keys left empty, when the cipher cannot be had. */
bool xTlsAeadKeysInit(xTlsAeadKeys *keys, int version, xTlsAead aead, bool sealing, const unsigned char *key,
                      const unsigned char iv[XTLS_IV_LEN]);

/** Moves keys to a new key and iv (a TLS 1.3 KeyUpdate). */
bool xTlsAeadKeysUpdate(xTlsAeadKeys *keys, const unsigned char *key, const unsigned char iv[XTLS_IV_LEN]);

/** Frees keys' cipher context and wipes the IV. */
void xTlsAeadKeysFree(xTlsAeadKeys *keys);

/** The nonce bytes a record carries before its ciphertext: 8 for TLS 1.2
 *  AES-GCM, none otherwise. A record's plaintext starts after them. */
static inline size_t xTlsAeadExplicitNonce(const xTlsAeadKeys *keys) {
    return keys->version != XTLS_VERSION_1_3 && keys->aead != XTLS_AEAD_CHACHA20_POLY1305
               ? XTLS_EXPLICIT_NONCE
               : 0;
}

/** Bytes a sealed record adds to its plaintext: header, explicit nonce, tag
 *  and, in TLS 1.3, the inner content type. */
static inline size_t xTlsAeadOverhead(const xTlsAeadKeys *keys) {
    return XTLS_RECORD_HEADER + xTlsAeadExplicitNonce(keys) + XTLS_RECORD_TAG +
           (keys->version == XTLS_VERSION_1_3 ? 1 : 0);
}

/** Seals, in place, the plain_len bytes at rec + XTLS_RECORD_HEADER +
 *  xTlsAeadExplicitNonce(keys) into the record numbered seq of content type
 *  type, header included; *rec_len is its size (plain_len +
 *  xTlsAeadOverhead). False when the cipher failed: seq may have been used. */
bool xTlsAeadSeal(xTlsAeadKeys *keys, uint64_t seq, unsigned char *rec, size_t plain_len, int type,
                  size_t *rec_len);

/** What opening a record found. */
typedef enum xTlsOpened {
    XTLS_OPENED,        /* authentic: the content is in the xTlsPlaintext */
    XTLS_OPEN_FORGED,   /* the tag does not match, or the record is too short to hold one: bad_record_mac */
    XTLS_OPEN_OVERFLOW, /* more plaintext than a record may carry: record_overflow */
    XTLS_OPEN_NO_TYPE,  /* TLS 1.3: only padding, no content type: unexpected_message */
} xTlsOpened;

/** An opened record's content: its real type and its data, inside the record. */
typedef struct xTlsPlaintext {
    int type;
    unsigned char *data;
    size_t len;
} xTlsPlaintext;

/** Opens, in place, the record numbered seq at rec, body_len bytes after its
 *  header, checking its tag. */
xTlsOpened xTlsAeadOpen(xTlsAeadKeys *keys, uint64_t seq, unsigned char *rec, size_t body_len,
                        xTlsPlaintext *plain);

#endif
