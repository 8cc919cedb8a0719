/* tls_records.h — TLS records after the handshake, without OpenSSL's
 * per-connection object.
 *
 * Once OpenSSL has finished a handshake, what a connection needs to go on is
 * small: the negotiated AEAD, a key, an IV and a sequence number each way
 * (and, in TLS 1.3, the traffic secrets, for KeyUpdate). This transport
 * keeps only that, seals and opens records itself (tls_aead.h, with OpenSSL's
 * EVP AEAD ciphers; KeyUpdate's keys from tls_keys.h), and lets the SSL
 * object (about 10 KiB) go: the same hand-over that kernel TLS makes, kept in
 * user space. AES-GCM and ChaCha20-Poly1305 over TLS 1.2 and 1.3 are covered;
 * other suites stay with OpenSSL. */
#ifndef XNET_TLS_TLS_RECORDS_H
#define XNET_TLS_TLS_RECORDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "xnet/connection.h"
#include "xnet/tls/tls_aead.h"
#include "xnet/tls/tls_keys.h"

/* One direction's keys. */
typedef struct xTlsDirection {
    unsigned char secret[XTLS_SECRET_MAX]; /* TLS 1.3 traffic secret (KeyUpdate derives from it) */
    unsigned char key[XTLS_KEY_MAX];
    unsigned char iv[XTLS_IV_LEN]; /* TLS 1.2 AES-GCM uses the first 4 (the salt) */
    uint64_t seq;                  /* of the next record */
} xTlsDirection;

/* What the handshake left: enough to carry on. */
typedef struct xTlsTraffic {
    int version; /* XTLS_VERSION_1_2 or XTLS_VERSION_1_3 */
    xTlsAead aead;
    size_t secret_len; /* TLS 1.3: the suite's hash length (32 or 48) */
    xTlsDirection read, write;
} xTlsTraffic;

/* What handlers may ask of a connection (xHttpRequestTls), copied out of the
 * SSL object before it goes. */
typedef struct xTlsSummary {
    const char *version; /* static strings */
    const char *cipher;
    const char *alpn;     /* the listener's name for it: lives as long as the listener */
    char *server_name;    /* owned; NULL when none was sent */
    char *client_subject; /* owned; NULL without a client certificate */
    bool resumed;
    bool client_verified;
} xTlsSummary;

/** Puts conn on this record layer. traffic (keys included) and summary are
 *  taken: traffic is wiped, summary's strings belong to conn from now on.
 *  False (nothing changed, summary still the caller's) on allocation failure. */
bool xTlsRecordsStart(xConn *conn, xTlsTraffic *traffic, xTlsSummary *summary);

/** For tests and fuzzers: the first invariant of conn's record layer that
 *  does not hold (NULL when all do), and the sequence number of the next
 *  record it will open under the keys of now. */
const char *xTlsRecordsBrokenInvariant(const xConn *conn, uint64_t *read_seq);

/** Frees summary's strings. */
void xTlsSummaryFree(xTlsSummary *summary);

#endif
