/* tls_handover.c — after OpenSSL's handshake, the keys and sequence numbers
 * our record layer (tls_records.c) starts from: the TLS 1.3 traffic secrets
 * from OpenSSL's key log, TLS 1.2's key block from the master secret (both
 * made into keys by tls_keys.c), and the records each way since the Finished
 * messages. Then the SSL object goes. */
#include "xnet/tls/tls_conn.h"

#include <string.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>

#include "xnet/tls/tls_keys.h"
#include "xnet/tls/tls_records.h"

/* OpenSSL's key log hands over each secret as it is derived; the TLS 1.3
 * application traffic secrets are what our record layer starts from. */
void xTlsOnKeylog(const SSL *ssl, const char *line) {
    xConn *conn = SSL_get_app_data(ssl);
    xTlsConn *t = conn ? conn->transport_state : NULL;
    bool client = strncmp(line, "CLIENT_TRAFFIC_SECRET_0 ", 24) == 0;
    if (!t || (!client && strncmp(line, "SERVER_TRAFFIC_SECRET_0 ", 24) != 0)) return;
    const char *hex = strchr(line + 24, ' '); /* past the client random */
    if (!hex) return;
    long len = 0;
    unsigned char *secret = OPENSSL_hexstr2buf(hex + 1, &len);
    if (secret && len > 0 && len <= XTLS_SECRET_MAX) {
        memcpy(client ? t->handoff.client_secret : t->handoff.server_secret, secret, (size_t)len);
        *(client ? &t->handoff.client_secret_len : &t->handoff.server_secret_len) = (size_t)len;
    }
    OPENSSL_clear_free(secret, secret ? (size_t)len : 0);
}

/* Counts the records each way after the ChangeCipherSpec and after the
 * Finished message, and the tickets after the Finished: from these come the
 * sequence numbers our record layer starts from. */
void xTlsOnMessage(int write_p, int version, int content_type, const void *buf, size_t len, SSL *ssl,
                   void *arg) {
    xTlsHandoff *h = arg;
    int way = write_p ? 1 : 0;
    unsigned char first = len > 0 ? *(const unsigned char *)buf : 0;
    if (content_type == SSL3_RT_HEADER && first == SSL3_RT_CHANGE_CIPHER_SPEC) {
        /* A record header, seen both ways (a received ChangeCipherSpec
         * message is not). */
        h->changed_cipher[way] = true;
        h->records_after_ccs[way] = 0;
    } else if (content_type == SSL3_RT_HEADER) {
        if (h->changed_cipher[way]) h->records_after_ccs[way]++;
        if (h->finished[way]) h->records_after_finished[way]++;
    } else if (content_type == SSL3_RT_HANDSHAKE && first == SSL3_MT_FINISHED) {
        h->finished[way] = true;
        h->records_after_finished[way] = h->tickets_after_finished[way] = 0;
    } else if (content_type == SSL3_RT_HANDSHAKE && first == SSL3_MT_NEWSESSION_TICKET && h->finished[way]) {
        h->tickets_after_finished[way]++;
    }
}

/* The sequence numbers our record layer starts from, if the two counts
 * agree with what the handshake sent: in TLS 1.3 the server's tickets, one
 * record each, and nothing from the client; in TLS 1.2 nothing after the
 * Finished, which may have come in several records after the
 * ChangeCipherSpec (every one of them under the new keys). A count that is
 * wrong would reuse an AES-GCM nonce, so on any doubt OpenSSL keeps the
 * records. */
static bool starting_seqs(const xTlsHandoff *h, xTlsTraffic *traffic) {
    if (traffic->version == TLS1_3_VERSION) {
        /* Application records start at 0 after each side's Finished. */
        traffic->read.seq = h->records_after_finished[0];
        traffic->write.seq = h->records_after_finished[1];
        return h->records_after_finished[0] == 0 && h->tickets_after_finished[0] == 0 &&
               h->records_after_finished[1] == h->tickets_after_finished[1];
    }
    for (int way = 0; way < 2; way++) {
        if (!h->changed_cipher[way] || h->records_after_finished[way] != 0 || h->records_after_ccs[way] == 0)
            return false;
    }
    traffic->read.seq = h->records_after_ccs[0];
    traffic->write.seq = h->records_after_ccs[1];
    return true;
}

static bool ktls_active(SSL *ssl) {
#ifndef OPENSSL_NO_KTLS
    return BIO_get_ktls_send(SSL_get_wbio(ssl)) || BIO_get_ktls_recv(SSL_get_rbio(ssl));
#else
    return false;
#endif
}

/* The same, copied out to outlive the SSL object. */
static void summarize(SSL *ssl, xTlsSummary *summary) {
    xTlsInfo info;
    xTlsDescribe(ssl, &info);
    *summary = (xTlsSummary){
        .version = info.version,
        .cipher = info.cipher,
        .alpn = info.alpn,
        .server_name = *info.server_name ? strdup(info.server_name) : NULL,
        .client_subject = *info.client_subject ? strdup(info.client_subject) : NULL,
        .resumed = info.resumed,
        .client_verified = info.client_verified,
    };
}

/* TLS 1.2's keys, from the session's master secret and this handshake's randoms. */
static bool tls12_keys(SSL *ssl, const SSL_CIPHER *cipher, xTlsTraffic *traffic) {
    unsigned char master[SSL_MAX_MASTER_KEY_LENGTH], client_random[32], server_random[32];
    size_t master_len = SSL_SESSION_get_master_key(SSL_get_session(ssl), master, sizeof master);
    const EVP_MD *md = SSL_CIPHER_get_handshake_digest(cipher); /* the PRF's hash */
    SSL_get_client_random(ssl, client_random, sizeof client_random);
    SSL_get_server_random(ssl, server_random, sizeof server_random);
    xTlsKeyBlock block;
    bool ok = md && master_len &&
              xTlsTls12KeyBlock(traffic->aead, EVP_MD_get0_name(md), master, master_len, client_random,
                                server_random, &block);
    if (ok) { /* we are the server: we read what the client writes */
        memcpy(traffic->read.key, block.client_key, sizeof traffic->read.key);
        memcpy(traffic->read.iv, block.client_iv, sizeof traffic->read.iv);
        memcpy(traffic->write.key, block.server_key, sizeof traffic->write.key);
        memcpy(traffic->write.iv, block.server_iv, sizeof traffic->write.iv);
    }
    OPENSSL_cleanse(master, sizeof master);
    OPENSSL_cleanse(&block, sizeof block);
    return ok;
}

/* TLS 1.3's keys (RFC 8446 §7.3), from the traffic secrets the key log gave. */
static bool tls13_keys(const xTlsHandoff *h, const SSL_CIPHER *cipher, xTlsTraffic *traffic) {
    const EVP_MD *md = SSL_CIPHER_get_handshake_digest(cipher);
    traffic->secret_len = md ? (size_t)EVP_MD_get_size(md) : 0;
    if (!traffic->secret_len || h->client_secret_len != traffic->secret_len ||
        h->server_secret_len != traffic->secret_len)
        return false;
    memcpy(traffic->read.secret, h->client_secret, traffic->secret_len);
    memcpy(traffic->write.secret, h->server_secret, traffic->secret_len);
    return xTlsTrafficKeys(traffic->aead, traffic->read.secret, traffic->secret_len, traffic->read.key,
                           traffic->read.iv) &&
           xTlsTrafficKeys(traffic->aead, traffic->write.secret, traffic->secret_len, traffic->write.key,
                           traffic->write.iv);
}

/* Hands the connection's records to our record layer and frees the SSL
 * object (tls_records.h). False, with nothing changed, for what it does not
 * cover: other ciphers, a negotiated maximum fragment length, kTLS. */
bool xTlsHandOver(xConn *conn, xTlsConn *t) {
    SSL *ssl = t->ssl;
    const SSL_CIPHER *cipher = SSL_get_current_cipher(ssl);
    SSL_SESSION *session = SSL_get_session(ssl);
    const xTlsHandoff *h = &t->handoff;
    xTlsTraffic traffic = {.version = SSL_version(ssl)};
    if (!t->srv->conf.xkit_records || !cipher || !session || ktls_active(ssl) ||
        !xTlsAeadOfNid(SSL_CIPHER_get_cipher_nid(cipher), &traffic.aead) ||
        SSL_SESSION_get_max_fragment_length(session) != TLSEXT_max_fragment_length_DISABLED ||
        !h->finished[0] || !h->finished[1] || SSL_has_pending(ssl) || SSL_get_read_ahead(ssl))
        return false; /* (OpenSSL holding bytes past Finished would lose them) */
    if (!starting_seqs(h, &traffic)) return false;
    bool ok = traffic.version == TLS1_3_VERSION
                  ? tls13_keys(h, cipher, &traffic)
                  : traffic.version == TLS1_2_VERSION && tls12_keys(ssl, cipher, &traffic);
    xTlsSummary summary;
    summarize(ssl, &summary);
    if (!ok || !xTlsRecordsStart(conn, &traffic, &summary)) {
        OPENSSL_cleanse(&traffic, sizeof traffic);
        xTlsSummaryFree(&summary);
        ERR_clear_error();
        return false;
    }
    /* Not a broken session: freeing it must not drop it from the cache. */
    SSL_set_shutdown(ssl, SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
    xTlsConnFree(t);
    return true;
}
