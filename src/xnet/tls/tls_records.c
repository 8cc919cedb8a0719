/* tls_records.c — TLS 1.2 and 1.3 records with AEAD ciphers, after
 * OpenSSL's handshake (see tls_records.h).
 *
 * Input is read into a block from the worker's cache, opened in place and
 * handed up record by record; the block goes back as soon as it is empty, so
 * an idle connection holds none, and a small partial record left waiting
 * moves to a block of its own size, so a peer that stops mid-record pins
 * little more than it sent. Output is gathered from the connection's queue
 * into records sealed in one block and written at once. A write the socket
 * takes only in part keeps the rest of the sealed bytes here; the plaintext
 * they carry is acknowledged to the queue only once they are all out, so the
 * queue offers the same bytes again and they are skipped, as OpenSSL's
 * partial writes work. */
#include "xnet/tls/tls_records.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/kdf.h>
#include <openssl/params.h>

#include <xhttp/tls_conf.h>

#define REC_HEADER 5
#define REC_PLAIN_MAX 16384
#define REC_TAG 16
#define REC_EXPLICIT_NONCE 8 /* TLS 1.2 AES-GCM sends half its nonce */
/* The largest record body a peer may send (RFC 8446 §5.2, RFC 5246 §6.2.3). */
#define REC_BODY_MAX_13 (REC_PLAIN_MAX + 256)
#define REC_BODY_MAX_12 (REC_PLAIN_MAX + 2048)
/* Records in a row that carry no data (empty ones, ignored alerts, KeyUpdates)
 * allowed before the peer is taken to be spinning us, as OpenSSL does. */
#define IDLE_RECORDS_MAX 32
/* Input block: always room for one whole record and the start of the next. */
#define IN_CAP 32768
/* A partial record up to this size, left waiting after a read, moves to a
 * block of its own size; a larger one keeps the whole block (less than four
 * times what came) rather than be copied out and back at every read of a
 * bulk upload. */
#define IN_KEEP_MAX (IN_CAP / 4)
/* Output block: sealed records for up to this much, written at once. */
#define OUT_CAP 65536
/* Kept free in the output block for an alert or a KeyUpdate. */
#define CONTROL_ROOM 64
/* Records one AES-GCM key may seal: RFC 8446 §5.5 allows about 2^24.5. */
#define AES_GCM_RECORDS_MAX ((uint64_t)1 << 24)

enum { CT_ALERT = 21, CT_HANDSHAKE = 22, CT_APPLICATION_DATA = 23 };
enum { ALERT_WARNING = 1, ALERT_FATAL = 2 };
enum {
    AD_CLOSE_NOTIFY = 0,
    AD_UNEXPECTED_MESSAGE = 10,
    AD_BAD_RECORD_MAC = 20,
    AD_RECORD_OVERFLOW = 22,
    AD_ILLEGAL_PARAMETER = 47,
    AD_DECODE_ERROR = 50,
    AD_PROTOCOL_VERSION = 70,
    AD_INTERNAL_ERROR = 80,
    AD_USER_CANCELED = 90,
    AD_NO_RENEGOTIATION = 100,
};
enum { HS_CLIENT_HELLO = 1, HS_KEY_UPDATE = 24 };
/* A TLS 1.3 KeyUpdate record: header, message, inner type, tag. */
#define KEY_UPDATE_RECORD (REC_HEADER + 5 + 1 + REC_TAG)

typedef struct xTlsRecords {
    xTlsTraffic traffic; /* keys wiped once in the cipher contexts; IVs, seqs, secrets kept */
    EVP_CIPHER_CTX *open, *seal;
    char *in; /* bytes read and not yet opened; NULL when none */
    size_t in_cap, in_start, in_end;
    const char *plain; /* an opened record's data not yet handed up (inside in) */
    size_t plain_len;
    char *out; /* sealed bytes not yet written; NULL when none */
    size_t out_cap, out_start, out_end;
    size_t out_covers;           /* plaintext those bytes carry, acknowledged once they are out */
    unsigned char key_update[5]; /* TLS 1.3: a KeyUpdate's pieces so far */
    size_t key_update_len;
    bool key_update_owed;  /* the peer asked for new keys: a KeyUpdate precedes our next record */
    unsigned idle_records; /* records in a row that carried no data */
    int error;             /* errno once the session broke */
    bool eof;              /* close_notify (or a bare FIN) came */
    bool close_notify_sent;
    bool fin_owed; /* the close_notify waits for the socket: the FIN follows it */
    xTlsSummary summary;
} xTlsRecords;

static const xTransport records_transport;

/* ---- Algorithms, fetched once ---- */

/* OpenSSL 3 looks algorithms up by name, under a lock, whenever it is given
 * one; what is fetched here once is only copied afterwards. */
static struct {
    EVP_CIPHER *aead[3];
    EVP_MAC_CTX *hmac_sha256, *hmac_sha384; /* digest set, no key: templates to copy */
    EVP_KDF *tls12_prf;
    bool gcm_nonce_in_one_call; /* begin_record's shortcut, checked against the init call */
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

/* AES-GCM's whole nonce as its "TLS1 fixed IV" (length -1: all of it) and,
 * opening (tag not NULL), the tag to check, in one parameter call. */
static bool gcm_set_nonce(EVP_CIPHER_CTX *ctx, unsigned char *nonce, unsigned char *tag) {
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_octet_string(OSSL_CIPHER_PARAM_AEAD_TLS1_IV_FIXED, nonce, (size_t)-1),
        tag ? OSSL_PARAM_construct_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG, tag, REC_TAG)
            : OSSL_PARAM_construct_end(),
        OSSL_PARAM_construct_end(),
    };
    return EVP_CIPHER_CTX_set_params(ctx, params) == 1;
}

/* Reads a sealed record's tag into tag. */
static bool sealed_tag(EVP_CIPHER_CTX *ctx, unsigned char *tag) {
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG, tag, REC_TAG),
        OSSL_PARAM_construct_end(),
    };
    return EVP_CIPHER_CTX_get_params(ctx, params) == 1;
}

/* Seals the same two records (two nonces) through the init call and through
 * begin_record's shortcut: the shortcut is used only where every byte and tag
 * agrees, so a provider that reads the parameter otherwise (another one set
 * up in openssl.cnf) keeps the documented way. */
static bool probe_gcm_nonce_in_one_call(EVP_CIPHER *gcm) {
    static const unsigned char key[16] = {1};
    unsigned char sealed[2][2][16 + REC_TAG], nonce[12];
    EVP_CIPHER_CTX *ctx[2] = {EVP_CIPHER_CTX_new(), EVP_CIPHER_CTX_new()};
    bool ok = gcm && ctx[0] && ctx[1];
    for (int way = 0; ok && way < 2; way++) {
        ok = EVP_EncryptInit_ex(ctx[way], gcm, NULL, key, NULL) == 1;
        for (int record = 0; ok && record < 2; record++) {
            memset(nonce, 0x5a + record, sizeof nonce);
            unsigned char *out = sealed[way][record];
            int n, last;
            memset(out, 0, 16);
            ok = (way ? gcm_set_nonce(ctx[way], nonce, NULL)
                      : EVP_EncryptInit_ex(ctx[way], NULL, NULL, NULL, nonce) == 1) &&
                 EVP_EncryptUpdate(ctx[way], out, &n, out, 16) == 1 &&
                 EVP_EncryptFinal_ex(ctx[way], out + n, &last) == 1 && sealed_tag(ctx[way], out + 16);
        }
    }
    EVP_CIPHER_CTX_free(ctx[0]);
    EVP_CIPHER_CTX_free(ctx[1]);
    ERR_clear_error();
    return ok && memcmp(sealed[0], sealed[1], sizeof sealed[0]) == 0;
}

static void fetch_algorithms(void) {
    algorithms.aead[XTLS_AEAD_AES_128_GCM] = EVP_CIPHER_fetch(NULL, "AES-128-GCM", NULL);
    algorithms.aead[XTLS_AEAD_AES_256_GCM] = EVP_CIPHER_fetch(NULL, "AES-256-GCM", NULL);
    algorithms.aead[XTLS_AEAD_CHACHA20_POLY1305] = EVP_CIPHER_fetch(NULL, "ChaCha20-Poly1305", NULL);
    EVP_MAC *hmac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    algorithms.hmac_sha256 = hmac_template(hmac, "SHA256");
    algorithms.hmac_sha384 = hmac_template(hmac, "SHA384");
    EVP_MAC_free(hmac); /* the templates hold it */
    algorithms.tls12_prf = EVP_KDF_fetch(NULL, "TLS1-PRF", NULL);
    algorithms.gcm_nonce_in_one_call = probe_gcm_nonce_in_one_call(algorithms.aead[XTLS_AEAD_AES_128_GCM]);
}

bool xTlsAeadOfNid(int nid, xTlsAead *aead) {
    switch (nid) {
    case NID_aes_128_gcm: *aead = XTLS_AEAD_AES_128_GCM; return true;
    case NID_aes_256_gcm: *aead = XTLS_AEAD_AES_256_GCM; return true;
    case NID_chacha20_poly1305: *aead = XTLS_AEAD_CHACHA20_POLY1305; return true;
    default: return false;
    }
}

static size_t key_length(xTlsAead aead) { return aead == XTLS_AEAD_AES_128_GCM ? 16 : 32; }

/* HKDF-Expand-Label(secret, label, "", out_len) of RFC 8446 §7.1. Every
 * output here fits one hash block, where HKDF-Expand (RFC 5869 §2.3) is
 * T(1) = HMAC(secret, info || 0x01). */
static bool expand_label(const xTlsTraffic *traffic, const unsigned char *secret, const char *label,
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
    EVP_MAC_CTX *template = traffic->secret_len == 48 ? algorithms.hmac_sha384 : algorithms.hmac_sha256;
    EVP_MAC_CTX *hmac = template && out_len <= traffic->secret_len ? EVP_MAC_CTX_dup(template) : NULL;
    bool ok = hmac && EVP_MAC_init(hmac, secret, traffic->secret_len, NULL) == 1 &&
              EVP_MAC_update(hmac, info, n) == 1 && EVP_MAC_final(hmac, block, &block_len, sizeof block) == 1;
    EVP_MAC_CTX_free(hmac);
    if (ok) memcpy(out, block, out_len);
    OPENSSL_cleanse(block, sizeof block);
    return ok;
}

bool xTlsDeriveTrafficKeys(const xTlsTraffic *traffic, xTlsDirection *dir) {
    return expand_label(traffic, dir->secret, "key", dir->key, key_length(traffic->aead)) &&
           expand_label(traffic, dir->secret, "iv", dir->iv, sizeof dir->iv);
}

bool xTlsDeriveTls12Keys(xTlsTraffic *traffic, const char *digest, const unsigned char *master,
                         size_t master_len, const unsigned char client_random[32],
                         const unsigned char server_random[32]) {
    pthread_once(&algorithms_once, fetch_algorithms);
    unsigned char seed[13 + 64], block[2 * 32 + 2 * 12];
    size_t key_len = key_length(traffic->aead);
    size_t iv_len = traffic->aead == XTLS_AEAD_CHACHA20_POLY1305 ? 12 : 4; /* GCM: the salt */
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
    bool ok = kdf && EVP_KDF_derive(kdf, block, 2 * key_len + 2 * iv_len, params) == 1;
    EVP_KDF_CTX_free(kdf);
    if (ok) { /* client key, server key, client IV, server IV; we are the server */
        memcpy(traffic->read.key, block, key_len);
        memcpy(traffic->write.key, block + key_len, key_len);
        memcpy(traffic->read.iv, block + 2 * key_len, iv_len);
        memcpy(traffic->write.iv, block + 2 * key_len + iv_len, iv_len);
    }
    OPENSSL_cleanse(block, sizeof block);
    return ok;
}

/* ---- Sealing and opening ---- */

xTlsKeyUse xTlsKeyUseAt(xTlsAead aead, uint64_t seq) {
    if (seq == UINT64_MAX) return XTLS_KEYS_LAST;
    /* ChaCha20-Poly1305 keeps one number for the KeyUpdate that moves on. */
    uint64_t limit = aead == XTLS_AEAD_CHACHA20_POLY1305 ? UINT64_MAX - 1 : AES_GCM_RECORDS_MAX;
    return seq >= limit ? XTLS_KEYS_SPENT : XTLS_KEYS_USABLE;
}

static bool tls13(const xTlsRecords *r) { return r->traffic.version == XTLS_VERSION_1_3; }

/* TLS 1.2 AES-GCM carries 8 bytes of nonce before the ciphertext. */
static size_t explicit_nonce(const xTlsRecords *r) {
    return !tls13(r) && r->traffic.aead != XTLS_AEAD_CHACHA20_POLY1305 ? REC_EXPLICIT_NONCE : 0;
}

/* Bytes a record adds to its plaintext. */
static size_t record_overhead(const xTlsRecords *r) {
    return REC_HEADER + explicit_nonce(r) + REC_TAG + (tls13(r) ? 1 : 0);
}

static void put_be64(unsigned char *p, uint64_t v) {
    for (int i = 7; i >= 0; i--, v >>= 8) p[i] = (unsigned char)v;
}

/* The per-record nonce: the IV with the sequence number folded into its
 * last 8 bytes (TLS 1.3, and TLS 1.2 ChaCha20-Poly1305), or TLS 1.2 GCM's
 * 4-byte salt followed by the explicit part. */
static void make_nonce(const xTlsRecords *r, const xTlsDirection *dir, const unsigned char *explicit_part,
                       unsigned char nonce[12]) {
    if (explicit_nonce(r)) {
        memcpy(nonce, dir->iv, 4);
        memcpy(nonce + 4, explicit_part, REC_EXPLICIT_NONCE);
        return;
    }
    unsigned char seq[8];
    put_be64(seq, dir->seq);
    memcpy(nonce, dir->iv, 12);
    for (int i = 0; i < 8; i++) nonce[4 + i] ^= seq[i];
}

/* TLS 1.2's additional data: sequence number, type, version, plaintext length. */
static size_t tls12_aad(uint64_t seq, int type, size_t plain_len, unsigned char aad[13]) {
    put_be64(aad, seq);
    aad[8] = (unsigned char)type;
    aad[9] = 3;
    aad[10] = 3;
    aad[11] = (unsigned char)(plain_len >> 8);
    aad[12] = (unsigned char)plain_len;
    return 13;
}

/* Gives ctx the record's nonce and, opening (tag not NULL), the tag to check.
 *
 * EVP_CipherInit_ex, the documented way to set a nonce, asks the provider for
 * the IV length through a by-name parameter lookup on every call in OpenSSL
 * 3.0; for a small record that lookup cost a quarter of the seal (0.49 against
 * 0.37 µs) and a third of the open (0.48 against 0.31 µs). AES-GCM's provider
 * takes the nonce and the expected tag in one parameter call instead
 * (gcm_set_nonce), where a probe at start found it seals what the init call
 * seals. ChaCha20-Poly1305's gives
 * that parameter a TLS-only meaning, so it keeps the init call. */
static bool begin_record(const xTlsRecords *r, EVP_CIPHER_CTX *ctx, unsigned char *nonce,
                         unsigned char *tag) {
    if (r->traffic.aead == XTLS_AEAD_CHACHA20_POLY1305 || !algorithms.gcm_nonce_in_one_call)
        return EVP_CipherInit_ex(ctx, NULL, NULL, NULL, nonce, -1) == 1 &&
               (!tag || EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, REC_TAG, tag) == 1);
    return gcm_set_nonce(ctx, nonce, tag);
}

/* Seals the plain_len bytes already at rec + REC_HEADER + explicit_nonce(r)
 * into a record of content type type, in place; *rec_len is its size. */
static bool seal(xTlsRecords *r, unsigned char *rec, size_t plain_len, int type, size_t *rec_len) {
    xTlsDirection *dir = &r->traffic.write;
    if (xTlsKeyUseAt(r->traffic.aead, dir->seq) == XTLS_KEYS_LAST) return false; /* never wrap */
    unsigned char *data = rec + REC_HEADER + explicit_nonce(r);
    size_t inner = plain_len;
    if (tls13(r)) data[inner++] = (unsigned char)type; /* the real type rides inside */
    size_t body = explicit_nonce(r) + inner + REC_TAG;
    rec[0] = (unsigned char)(tls13(r) ? CT_APPLICATION_DATA : type);
    rec[1] = 3;
    rec[2] = 3;
    rec[3] = (unsigned char)(body >> 8);
    rec[4] = (unsigned char)body;
    unsigned char nonce[12], aad[13];
    size_t aad_len = REC_HEADER;
    if (explicit_nonce(r)) put_be64(rec + REC_HEADER, dir->seq);
    make_nonce(r, dir, rec + REC_HEADER, nonce);
    if (tls13(r))
        memcpy(aad, rec, REC_HEADER);
    else
        aad_len = tls12_aad(dir->seq, type, plain_len, aad);
    dir->seq++;
    int n, last;
    *rec_len = REC_HEADER + body;
    return begin_record(r, r->seal, nonce, NULL) &&
           EVP_EncryptUpdate(r->seal, NULL, &n, aad, (int)aad_len) == 1 &&
           EVP_EncryptUpdate(r->seal, data, &n, data, (int)inner) == 1 &&
           EVP_EncryptFinal_ex(r->seal, data + n, &last) == 1 && sealed_tag(r->seal, data + inner);
}

/* Opens the record at rec (body_len bytes after its header) in place.
 * Returns its content type with *data, *len its plaintext, or -1 with
 * *alert the alert to answer with. */
static int open_record(xTlsRecords *r, unsigned char *rec, size_t body_len, unsigned char **data, size_t *len,
                       int *alert) {
    xTlsDirection *dir = &r->traffic.read;
    size_t skip = explicit_nonce(r);
    if (xTlsKeyUseAt(r->traffic.aead, dir->seq) == XTLS_KEYS_LAST) { /* never wrap */
        *alert = AD_INTERNAL_ERROR;
        return -1;
    }
    if (body_len < skip + REC_TAG + (tls13(r) ? 1 : 0)) {
        *alert = AD_BAD_RECORD_MAC; /* it cannot be authentic (RFC 8446 §5.2) */
        return -1;
    }
    unsigned char *cipher = rec + REC_HEADER + skip;
    size_t cipher_len = body_len - skip - REC_TAG;
    unsigned char nonce[12], aad[13];
    size_t aad_len = REC_HEADER;
    make_nonce(r, dir, rec + REC_HEADER, nonce);
    if (tls13(r))
        memcpy(aad, rec, REC_HEADER);
    else
        aad_len = tls12_aad(dir->seq, rec[0], cipher_len, aad);
    dir->seq++;
    int n, last;
    bool opened = begin_record(r, r->open, nonce, cipher + cipher_len) &&
                  EVP_DecryptUpdate(r->open, NULL, &n, aad, (int)aad_len) == 1 &&
                  EVP_DecryptUpdate(r->open, cipher, &n, cipher, (int)cipher_len) == 1 &&
                  EVP_DecryptFinal_ex(r->open, cipher + n, &last) == 1;
    if (!opened) {
        *alert = AD_BAD_RECORD_MAC;
        return -1;
    }
    int type = rec[0];
    if (tls13(r)) {
        /* The encoded inner plaintext, padding included, holds at most
         * 2^14 bytes and the type (RFC 8446 §5.4). */
        if (cipher_len > REC_PLAIN_MAX + 1) {
            *alert = AD_RECORD_OVERFLOW;
            return -1;
        }
        /* The real type is the last non-zero byte; zeros after it are padding. */
        while (cipher_len > 0 && cipher[cipher_len - 1] == 0) cipher_len--;
        if (cipher_len == 0) {
            *alert = AD_UNEXPECTED_MESSAGE;
            return -1;
        }
        type = cipher[--cipher_len];
    }
    if (cipher_len > REC_PLAIN_MAX) {
        *alert = AD_RECORD_OVERFLOW;
        return -1;
    }
    *data = cipher;
    *len = cipher_len;
    return type;
}

/* ---- Writing ---- */

static void release_out(xConn *conn, xTlsRecords *r) {
    xMemCacheFree(conn->net->mem, r->out);
    r->out = NULL;
    r->out_cap = r->out_start = r->out_end = 0;
}

/* Writes what is sealed. False with errno (EAGAIN: the socket is full). */
static bool write_out(xConn *conn, xTlsRecords *r) {
    while (r->out_start < r->out_end) {
        struct iovec v = {r->out + r->out_start, r->out_end - r->out_start};
        ssize_t w = xEventLoopSendv(conn->net->loop, conn->fd, &v, 1);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN) r->error = errno;
            return false;
        }
        r->out_start += (size_t)w;
    }
    release_out(conn, r);
    return true;
}

static bool seal_key_update(xTlsRecords *r, unsigned char *rec, size_t *rec_len);

/* The KeyUpdate the peer asked for (see on_key_update): sealed at the end of
 * the output block, which has room for it, and our write keys move on. False
 * when the keys are unknown now: the session is over. */
static bool seal_owed_key_update(xTlsRecords *r) {
    if (!r->key_update_owed) return true;
    size_t rec_len;
    if (!seal_key_update(r, (unsigned char *)r->out + r->out_end, &rec_len)) {
        r->error = EPROTO;
        return false;
    }
    r->out_end += rec_len;
    r->key_update_owed = false;
    return true;
}

/* Moves the bytes [*start, *end) of *block to the start of a new block of
 * cap bytes from the worker's cache; false, with nothing changed, when none
 * can be had. */
static bool move_bytes(xConn *conn, char **block, size_t *block_cap, size_t *start, size_t *end, size_t cap) {
    size_t held = *end - *start;
    char *moved = xMemCacheAlloc(conn->net->mem, cap);
    if (!moved) return false;
    if (held) memcpy(moved, *block + *start, held);
    xMemCacheFree(conn->net->mem, *block);
    *block = moved;
    *block_cap = cap;
    *start = 0;
    *end = held;
    return true;
}

/* Makes room for need more bytes after what is sealed, moving them to a
 * larger block: for the close_notify, which goes once, after a KeyUpdate
 * answer that waits for the socket and the one owed after it. Other records
 * of our own that find no room are not sent, so a peer cannot grow the
 * block by asking again and again. */
static bool out_room(xConn *conn, xTlsRecords *r, size_t need) {
    if (r->out && r->out_cap - r->out_end >= need) return true;
    size_t cap = r->out_end - r->out_start + need;
    return move_bytes(conn, &r->out, &r->out_cap, &r->out_start, &r->out_end,
                      cap > CONTROL_ROOM ? cap : CONTROL_ROOM);
}

/* Seals a record of our own (an alert; with type 0, none) after whatever is
 * sealed already, preceded by an owed KeyUpdate, and tries to send them. */
static bool send_control(xConn *conn, xTlsRecords *r, int type, const unsigned char *payload, size_t len) {
    if (r->close_notify_sent) return true; /* it ended our side: nothing follows it, not even an alert */
    if (!r->out) {
        r->out = xMemCacheAlloc(conn->net->mem, CONTROL_ROOM);
        if (!r->out) return false;
        r->out_cap = CONTROL_ROOM;
    }
    size_t need = (type ? len + record_overhead(r) : 0) + (r->key_update_owed ? KEY_UPDATE_RECORD : 0);
    if (r->out_cap - r->out_end < need) return false;
    if (!seal_owed_key_update(r)) return false;
    if (type) {
        unsigned char *rec = (unsigned char *)r->out + r->out_end;
        memcpy(rec + REC_HEADER + explicit_nonce(r), payload, len);
        size_t rec_len;
        if (!seal(r, rec, len, type, &rec_len)) return false;
        r->out_end += rec_len;
    }
    if (write_out(conn, r)) return true;
    if (errno != EAGAIN) return false;
    xConnBlocked(conn); /* the queue may be empty: this is what brings us back */
    return true;
}

/* Ends the session with a fatal alert (RFC 8446 §6.2); -1 with errno. */
static int fail(xConn *conn, xTlsRecords *r, int description) {
    ERR_clear_error(); /* what EVP left there would fail the next OpenSSL call on this thread */
    if (!r->error) {
        unsigned char alert[2] = {ALERT_FATAL, (unsigned char)description};
        send_control(conn, r, CT_ALERT, alert, sizeof alert);
        r->error = EPROTO;
    }
    errno = r->error;
    return -1;
}

static bool next_keys(xTlsRecords *r, xTlsDirection *dir);
static void send_close_notify(xConn *conn, xTlsRecords *r);

/* TLS 1.3: announces new write keys in a KeyUpdate sealed at rec under the
 * old ones, then moves to them (RFC 8446 §4.6.3). False when the keys are
 * unknown now: the session is over. */
static bool seal_key_update(xTlsRecords *r, unsigned char *rec, size_t *rec_len) {
    static const unsigned char not_requested[] = {HS_KEY_UPDATE, 0, 0, 1, 0};
    xTlsDirection write = r->traffic.write;
    memcpy(rec + REC_HEADER, not_requested, sizeof not_requested);
    bool ok = next_keys(r, &write) && seal(r, rec, sizeof not_requested, CT_HANDSHAKE, rec_len) &&
              EVP_EncryptInit_ex(r->seal, NULL, NULL, write.key, NULL) == 1;
    OPENSSL_cleanse(write.key, sizeof write.key);
    if (ok) r->traffic.write = write;
    OPENSSL_cleanse(&write, sizeof write);
    return ok;
}

static ssize_t records_sendv(xConn *conn, const struct iovec *iov, int iovcnt) {
    xTlsRecords *r = conn->transport_state;
    if (r->error) {
        errno = r->error;
        return -1;
    }
    if (r->out && !write_out(conn, r)) return -1;
    if (r->out_covers) {
        /* Records sealed on an earlier call are out: the queue may move on. */
        size_t done = r->out_covers;
        r->out_covers = 0;
        return (ssize_t)done;
    }
    size_t per_record = REC_PLAIN_MAX + record_overhead(r);
    size_t room = OUT_CAP - CONTROL_ROOM;
    size_t total = 0, records = 0;
    for (int i = 0; i < iovcnt; i++) total += iov[i].iov_len;
    if (total == 0) return 0;
    /* As much as fits in the output block, whole records first. */
    size_t fit = room / per_record * REC_PLAIN_MAX;
    size_t tail = room % per_record;
    if (tail > record_overhead(r)) fit += tail - record_overhead(r);
    if (total > fit) total = fit;
    records = (total + REC_PLAIN_MAX - 1) / REC_PLAIN_MAX;
    r->out_cap = total + records * record_overhead(r) + CONTROL_ROOM;
    r->out = xMemCacheAlloc(conn->net->mem, r->out_cap);
    if (!r->out) {
        r->out_cap = 0;
        errno = ENOMEM;
        return -1;
    }
    /* In the block's control room; our keys then start over, so no KeyUpdate
     * for spent keys joins it there. */
    if (!seal_owed_key_update(r)) {
        errno = r->error;
        return -1;
    }
    int v = 0;
    size_t v_off = 0, left = total;
    while (left > 0) {
        size_t plain_len = left < REC_PLAIN_MAX ? left : REC_PLAIN_MAX;
        unsigned char *rec = (unsigned char *)r->out + r->out_end;
        if (xTlsKeyUseAt(r->traffic.aead, r->traffic.write.seq) != XTLS_KEYS_USABLE) {
            size_t rec_len;
            if (!tls13(r)) {
                /* TLS 1.2 cannot change keys: what is sealed goes, then the session ends. */
                total -= left;
                if (total > 0) break;
                release_out(conn, r);
                send_close_notify(conn, r);
                r->error = EPIPE;
                errno = r->error;
                return -1;
            }
            if (!seal_key_update(r, rec, &rec_len)) {
                r->error = EPROTO;
                errno = r->error;
                return -1;
            }
            r->out_end += rec_len; /* in the block's control room: one per block at most */
            rec += rec_len;
        }
        unsigned char *data = rec + REC_HEADER + explicit_nonce(r);
        for (size_t copied = 0; copied < plain_len;) {
            size_t take = iov[v].iov_len - v_off;
            if (take > plain_len - copied) take = plain_len - copied;
            memcpy(data + copied, (const char *)iov[v].iov_base + v_off, take);
            copied += take;
            v_off += take;
            if (v_off == iov[v].iov_len) v++, v_off = 0;
        }
        size_t rec_len;
        if (!seal(r, rec, plain_len, CT_APPLICATION_DATA, &rec_len)) return fail(conn, r, AD_INTERNAL_ERROR);
        r->out_end += rec_len;
        left -= plain_len;
    }
    r->out_covers = total;
    if (!write_out(conn, r)) return -1; /* EAGAIN: they go on the next call */
    r->out_covers = 0;
    return (ssize_t)total;
}

/* ---- Reading ---- */

/* Moves one direction's keys on (RFC 8446 §7.2) into dir, a copy. */
static bool next_keys(xTlsRecords *r, xTlsDirection *dir) {
    unsigned char next[XTLS_SECRET_MAX];
    bool ok = expand_label(&r->traffic, dir->secret, "traffic upd", next, r->traffic.secret_len);
    memcpy(dir->secret, next, r->traffic.secret_len);
    OPENSSL_cleanse(next, sizeof next);
    dir->seq = 0;
    return ok && xTlsDeriveTrafficKeys(&r->traffic, dir);
}

/* TLS 1.3 KeyUpdate (RFC 8446 §4.6.3): our read keys move on. If the peer
 * asks, we owe one KeyUpdate of our own, sealed just before the next record
 * we send (at once when nothing waits for the socket): requests that come
 * before it all get that one answer, which §4.6.3 allows, so a peer that
 * asks again and again while our socket is full costs no room. Nothing
 * changes unless every step succeeds, so no key is ever used twice with one
 * nonce. */
static int on_key_update(xConn *conn, xTlsRecords *r, bool update_requested) {
    xTlsDirection read = r->traffic.read;
    bool ok = next_keys(r, &read) && EVP_DecryptInit_ex(r->open, NULL, NULL, read.key, NULL) == 1;
    OPENSSL_cleanse(read.key, sizeof read.key);
    if (ok) r->traffic.read = read;
    OPENSSL_cleanse(&read, sizeof read);
    if (!ok) {
        ERR_clear_error();
        r->error = EPROTO; /* the keys are unknown now: not even an alert can be sealed */
        errno = r->error;
        return -1;
    }
    if (!update_requested || r->close_notify_sent) return 1; /* nothing is sent after close_notify */
    r->key_update_owed = true;
    if (!r->out && !send_control(conn, r, 0, NULL, 0)) {
        ERR_clear_error();
        if (!r->error) r->error = ENOMEM;
        errno = r->error;
        return -1;
    }
    return 1;
}

/* After the handshake a client may only update its keys (TLS 1.3), in a
 * record of its own; a TLS 1.2 ClientHello asks to renegotiate, which we
 * decline with a warning (RFC 5246 §7.2.2: no_renegotiation is always one),
 * as OpenSSL does, and the session goes on. A warning that finds no room,
 * earlier ones still waiting for the socket, is left out: the ServerHello
 * that never comes tells the client as much. */
static int on_handshake(xConn *conn, xTlsRecords *r, const unsigned char *msg, size_t len) {
    if (!tls13(r) && len > 0 && msg[0] == HS_CLIENT_HELLO) {
        static const unsigned char no_renegotiation[2] = {ALERT_WARNING, AD_NO_RENEGOTIATION};
        if (send_control(conn, r, CT_ALERT, no_renegotiation, sizeof no_renegotiation) || !r->error) {
            ERR_clear_error();
            return 1;
        }
        errno = r->error;
        return -1;
    }
    if (!tls13(r) || len == 0) return fail(conn, r, AD_UNEXPECTED_MESSAGE);
    /* A KeyUpdate may come in pieces over records (RFC 8446 §5.1); as it
     * changes the keys, nothing may follow it in its record. */
    size_t take = sizeof r->key_update - r->key_update_len;
    if (take > len) take = len;
    memcpy(r->key_update + r->key_update_len, msg, take);
    r->key_update_len += take;
    const unsigned char *m = r->key_update;
    if (m[0] != HS_KEY_UPDATE) return fail(conn, r, AD_UNEXPECTED_MESSAGE);
    if (r->key_update_len < sizeof r->key_update) return 1;
    r->key_update_len = 0;
    if (m[1] != 0 || m[2] != 0 || m[3] != 1) return fail(conn, r, AD_DECODE_ERROR);
    if (len > take) return fail(conn, r, AD_UNEXPECTED_MESSAGE);
    if (m[4] > 1) return fail(conn, r, AD_ILLEGAL_PARAMETER);
    return on_key_update(conn, r, m[4] == 1);
}

static int on_alert(xConn *conn, xTlsRecords *r, const unsigned char *alert, size_t len) {
    if (len == 0) return fail(conn, r, AD_UNEXPECTED_MESSAGE); /* as RFC 8446 §5.1 says of empty alerts */
    if (len != 2) return fail(conn, r, AD_DECODE_ERROR);
    if (alert[1] == AD_CLOSE_NOTIFY) {
        r->eof = true;
        return 1;
    }
    /* TLS 1.2 warnings may be ignored, though not without end; TLS 1.3 ends
     * on any other alert (user_canceled is followed by a close_notify). A
     * close_notify after a row of records without data still ends cleanly. */
    if ((alert[1] == AD_USER_CANCELED && alert[0] == ALERT_WARNING) ||
        (!tls13(r) && alert[0] == ALERT_WARNING))
        return ++r->idle_records > IDLE_RECORDS_MAX ? fail(conn, r, AD_UNEXPECTED_MESSAGE) : 1;
    r->error = ECONNRESET;
    errno = r->error;
    return -1;
}

/* Opens the next whole record in the input: 1 when one was handled
 * (application data is then in r->plain), 0 when more bytes are needed,
 * -1 (errno set) when the session is over. */
static int next_record(xConn *conn, xTlsRecords *r) {
    size_t avail = r->in_end - r->in_start;
    if (avail < REC_HEADER) return 0;
    unsigned char *rec = (unsigned char *)r->in + r->in_start;
    size_t body_len = (size_t)rec[3] << 8 | rec[4];
    if (body_len > (tls13(r) ? REC_BODY_MAX_13 : REC_BODY_MAX_12)) return fail(conn, r, AD_RECORD_OVERFLOW);
    if (avail < REC_HEADER + body_len) return 0;
    r->in_start += REC_HEADER + body_len;
    bool expected = tls13(r) ? rec[0] == CT_APPLICATION_DATA
                             : rec[0] == CT_APPLICATION_DATA || rec[0] == CT_ALERT || rec[0] == CT_HANDSHAKE;
    if (!expected || rec[1] != 3) return fail(conn, r, AD_UNEXPECTED_MESSAGE);
    /* TLS 1.2 records carry the negotiated version (RFC 5246 §6.2.1); TLS
     * 1.3 authenticates its legacy one. */
    if (!tls13(r) && rec[2] != 3) return fail(conn, r, AD_PROTOCOL_VERSION);
    unsigned char *data;
    size_t len;
    int alert;
    int type = open_record(r, rec, body_len, &data, &len, &alert);
    if (type == CT_APPLICATION_DATA && len > 0)
        r->idle_records = 0;
    else if (type != -1 && type != CT_ALERT && ++r->idle_records > IDLE_RECORDS_MAX) /* alerts: on_alert */
        return fail(conn, r, AD_UNEXPECTED_MESSAGE);
    /* Other records may not come between a handshake message's pieces. */
    if (type != -1 && type != CT_HANDSHAKE && r->key_update_len) return fail(conn, r, AD_UNEXPECTED_MESSAGE);
    switch (type) {
    case -1: return fail(conn, r, alert);
    case CT_APPLICATION_DATA:
        r->plain = (const char *)data;
        r->plain_len = len;
        return 1;
    case CT_ALERT: return on_alert(conn, r, data, len);
    case CT_HANDSHAKE: return on_handshake(conn, r, data, len);
    default: return fail(conn, r, AD_UNEXPECTED_MESSAGE);
    }
}

/* Moves the bytes not yet opened to a new block of cap bytes; nothing
 * opened may be waiting in the old one. */
static bool move_input(xConn *conn, xTlsRecords *r, size_t cap) {
    return move_bytes(conn, &r->in, &r->in_cap, &r->in_start, &r->in_end, cap);
}

/* Reads more of the socket into the input block. Like recv(2); *room is
 * what was asked for. */
static ssize_t fill_input(xConn *conn, xTlsRecords *r, size_t *room) {
    if (r->in_cap < IN_CAP) { /* none yet, or a partial record's own */
        if (!move_input(conn, r, IN_CAP)) {
            errno = ENOMEM;
            return -1;
        }
    } else if (r->in_start > 0) { /* nothing opened is waiting here: plain_len is 0 */
        memmove(r->in, r->in + r->in_start, r->in_end - r->in_start);
        r->in_end -= r->in_start;
        r->in_start = 0;
    }
    *room = IN_CAP - r->in_end;
    ssize_t n = xEventLoopRecv(conn->net->loop, conn->fd, r->in + r->in_end, *room);
    if (n > 0) r->in_end += (size_t)n;
    return n;
}

/* Once a read is over, the input block goes back when it is empty; a small
 * partial record keeps only its bytes (the next read moves them back into a
 * whole block), as a peer may leave it there until a timeout. */
static void trim_input(xConn *conn, xTlsRecords *r) {
    if (!r->in || r->plain_len) return;
    size_t held = r->in_end - r->in_start;
    if (held) {
        if (r->in_cap == IN_CAP && held <= IN_KEEP_MAX) move_input(conn, r, held); /* failing, it stays */
        return;
    }
    xMemCacheFree(conn->net->mem, r->in);
    r->in = NULL;
    r->in_cap = r->in_start = r->in_end = 0;
}

/* Whether the input holds a whole record not yet opened. */
static bool whole_record_waiting(const xTlsRecords *r) {
    size_t avail = r->in_end - r->in_start;
    if (!r->in || avail < REC_HEADER) return false;
    const unsigned char *rec = (const unsigned char *)r->in + r->in_start;
    return avail >= REC_HEADER + ((size_t)rec[3] << 8 | rec[4]);
}

static ssize_t records_recv(xConn *conn, char *buf, size_t len) {
    xTlsRecords *r = conn->transport_state;
    size_t n = 0;
    bool drained = false; /* a read came back short: the socket is empty for now */
    while (n < len && !r->error && !r->eof) {
        if (r->plain_len) {
            size_t take = r->plain_len < len - n ? r->plain_len : len - n;
            memcpy(buf + n, r->plain, take);
            r->plain += take;
            r->plain_len -= take;
            n += take;
            continue;
        }
        int handled = next_record(conn, r);
        if (handled < 0) break;
        if (handled > 0) continue;
        if (drained) break;
        size_t room;
        ssize_t got = fill_input(conn, r, &room);
        if (got == 0) {
            r->eof = true; /* a FIN without close_notify ends the stream all the same */
        } else if (got < 0 && errno == EAGAIN) {
            drained = true;
        } else if (got < 0 && errno != EINTR) {
            r->error = errno;
        } else if (got > 0) {
            /* As with a plain socket, a short read means drained, unless
             * the peer has closed: only another read sees that end. */
            drained = (size_t)got < room && !conn->peer_closed;
        }
    }
    trim_input(conn, r);
    /* More could be read only after a new readiness edge; an end or error
     * found behind the data keeps the connection readable, so the next read
     * reports it and the connection closes now, not at a timeout. */
    bool end_pending = r->eof || r->error;
    if (drained && !r->plain_len && !whole_record_waiting(r) && !end_pending) conn->readable = false;
    if (n > 0) return (ssize_t)n;
    if (r->error) {
        errno = r->error;
        return -1;
    }
    if (r->eof) return 0;
    conn->readable = false;
    errno = EAGAIN;
    return -1;
}

/* ---- Lifetime ---- */

static void send_close_notify(xConn *conn, xTlsRecords *r) {
    if (r->error || r->close_notify_sent) return;
    static const unsigned char close_notify[2] = {ALERT_WARNING, AD_CLOSE_NOTIFY};
    size_t need = sizeof close_notify + record_overhead(r) + (r->key_update_owed ? KEY_UPDATE_RECORD : 0);
    if (out_room(conn, r, need))
        send_control(conn, r, CT_ALERT, close_notify, sizeof close_notify); /* if it goes, it goes */
    r->close_notify_sent = true;
}

static void records_shutdown_write(xConn *conn) {
    xTlsRecords *r = conn->transport_state;
    send_close_notify(conn, r);
    /* A FIN now would cut off a close_notify that met a full socket (the
     * peer would see a truncation): it follows once records_flush wrote it. */
    if (r->out && !r->error)
        r->fin_owed = true;
    else
        shutdown(conn->fd, SHUT_WR);
}

static void records_close(xConn *conn) { send_close_notify(conn, conn->transport_state); }

void xTlsSummaryFree(xTlsSummary *summary) {
    free(summary->server_name);
    free(summary->client_subject);
    summary->server_name = summary->client_subject = NULL;
}

static void records_free(xConn *conn) {
    xTlsRecords *r = conn->transport_state;
    if (!r) return;
    EVP_CIPHER_CTX_free(r->open);
    EVP_CIPHER_CTX_free(r->seal);
    xMemCacheFree(conn->net->mem, r->in);
    xMemCacheFree(conn->net->mem, r->out);
    xTlsSummaryFree(&r->summary);
    OPENSSL_cleanse(&r->traffic, sizeof r->traffic);
    free(r);
}

/* Alerts and KeyUpdates that met a full socket go once it drains, then a
 * KeyUpdate still owed, or the FIN that waited for a close_notify. */
static bool records_flush(xConn *conn) {
    xTlsRecords *r = conn->transport_state;
    if (r->out && !write_out(conn, r)) return false;
    if (r->fin_owed) {
        r->fin_owed = false;
        shutdown(conn->fd, SHUT_WR);
        return true;
    }
    if (!r->key_update_owed || r->error) return true;
    if (!send_control(conn, r, 0, NULL, 0)) {
        ERR_clear_error();
        if (!r->error) r->error = ENOMEM;
        errno = r->error;
        return false;
    }
    if (!r->out) return true;
    errno = EAGAIN;
    return false;
}

/* Bytes of a record that has not all come yet: the protocol above times
 * them out as it would a partial request. */
static bool records_holds_input(const xConn *conn) {
    const xTlsRecords *r = conn->transport_state;
    return r->in_start < r->in_end;
}

/* The handshake's facts, copied out before its SSL object went. */
static bool records_tls_info(const xConn *conn, xTlsInfo *info) {
    const xTlsSummary *s = &((const xTlsRecords *)conn->transport_state)->summary;
    *info = (xTlsInfo){
        .version = s->version,
        .cipher = s->cipher ? s->cipher : "",
        .alpn = s->alpn,
        .server_name = s->server_name ? s->server_name : "",
        .resumed = s->resumed,
        .client_verified = s->client_verified,
        .xkit_records = true,
    };
    if (s->client_subject)
        snprintf(info->client_subject, sizeof info->client_subject, "%s", s->client_subject);
    return true;
}

static const xTransport records_transport = {
    .recv = records_recv,
    .sendv = records_sendv,
    .shutdown_write = records_shutdown_write,
    .close = records_close,
    .free = records_free,
    .secure = true,
    .flush = records_flush,
    .tls_info = records_tls_info,
    .holds_input = records_holds_input,
    .reads_through_loop = true, /* fill_input */
};

const char *xTlsRecordsBrokenInvariant(const xConn *conn, uint64_t *read_seq) {
    const xTlsRecords *r = conn->transport_state;
    *read_seq = r->traffic.read.seq;
    if (!r->in != !r->in_cap || r->in_start > r->in_end || r->in_end > r->in_cap || r->in_cap > IN_CAP)
        return "input outside its block";
    if (r->plain_len && (r->plain < r->in || r->plain + r->plain_len > r->in + r->in_start))
        return "plaintext handed up outside the opened records";
    if (r->in_cap == IN_CAP && !r->plain_len && r->in_end - r->in_start <= IN_KEEP_MAX)
        return "a whole input block kept for a small partial record";
    if (!r->out != !r->out_cap || r->out_start > r->out_end || r->out_end > r->out_cap ||
        r->out_cap > OUT_CAP + 2 * CONTROL_ROOM)
        return "output outside its block";
    if (r->out_covers && !r->out) return "plaintext acknowledged for records already out";
    if (r->key_update_len >= sizeof r->key_update) return "a whole KeyUpdate kept in pieces";
    if (r->idle_records > IDLE_RECORDS_MAX + 1) return "records without data past the limit";
    if (r->fin_owed && (!r->close_notify_sent || !r->out)) return "a FIN owed with no close_notify before it";
    if (r->traffic.read.seq == UINT64_MAX || r->traffic.write.seq == UINT64_MAX)
        return "a sequence number wrapped";
    return NULL;
}

bool xTlsRecordsStart(xConn *conn, xTlsTraffic *traffic, xTlsSummary *summary) {
    pthread_once(&algorithms_once, fetch_algorithms);
    EVP_CIPHER *cipher = algorithms.aead[traffic->aead];
    xTlsRecords *r = calloc(1, sizeof *r);
    if (r) {
        r->open = EVP_CIPHER_CTX_new();
        r->seal = EVP_CIPHER_CTX_new();
    }
    bool ok = r && cipher && r->open && r->seal &&
              EVP_DecryptInit_ex(r->open, cipher, NULL, traffic->read.key, NULL) == 1 &&
              EVP_EncryptInit_ex(r->seal, cipher, NULL, traffic->write.key, NULL) == 1;
    if (!ok) {
        if (r) {
            EVP_CIPHER_CTX_free(r->open);
            EVP_CIPHER_CTX_free(r->seal);
            free(r);
        }
        return false;
    }
    r->traffic = *traffic;
    OPENSSL_cleanse(traffic, sizeof *traffic);
    OPENSSL_cleanse(r->traffic.read.key, sizeof r->traffic.read.key); /* the contexts hold them now */
    OPENSSL_cleanse(r->traffic.write.key, sizeof r->traffic.write.key);
    r->summary = *summary;
    *summary = (xTlsSummary){0};
    xConnSetTransport(conn, &records_transport, r);
    return true;
}
