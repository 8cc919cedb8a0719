/* test_tls_records_close.c — how xKit's record layer ends a connection
 * whose socket is full: the close_notify waits for room and the FIN follows
 * it, so the peer never mistakes the end for a truncation, even behind
 * KeyUpdates that wait too; and a partial record is reported as held input.
 *
 * The server end of a socketpair is put on the record layer with keys known
 * here (TLS 1.3, AES-128-GCM); the test opens what it writes with OpenSSL's
 * EVP, and fills its socket by hand with bytes the client then skips. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <xhttp/tls_conf.h>

#include "check.h"
#include "worker.h"
#include "xnet/connection.h"
#include "xnet/tls/tls_records.h"

static xNetContext net;
static bool freed;

static void on_readable(xConn *conn) {
    char sink[4096];
    ssize_t n;
    while ((n = xConnRecv(conn, sink, sizeof sink)) > 0) {
    }
    if (n == 0 || errno != EAGAIN) xConnClose(conn);
}
static void on_free(xConn *conn) { freed = true; }
static void on_timeout(xConn *conn) {}
static const xConnProtocol protocol = {
    .on_readable = on_readable, .on_timeout = on_timeout, .on_free = on_free};

static void turn(void) { xTestTurn(net.loop); }

/* One direction's TLS 1.3 keys (AES-128-GCM, SHA-256). */
typedef struct Keys {
    unsigned char secret[32], key[16], iv[12];
    uint64_t seq; /* of the next record */
} Keys;

typedef struct Peer {
    int fd;           /* the client's end */
    Keys read, write; /* the server's write keys, and the client's */
} Peer;

static void keys_from_secret(Keys *k) {
    CHECK(xTlsTrafficKeys(XTLS_AEAD_AES_128_GCM, k->secret, sizeof k->secret, k->key, k->iv));
    k->seq = 0;
}

/* The next keys after a KeyUpdate: HKDF-Expand-Label(secret, "traffic upd",
 * "", 32) of RFC 8446 §7.2, one HMAC block. */
static void keys_update(Keys *k) {
    static const unsigned char info[] = "\x00\x20\x11tls13 traffic upd\x00\x01";
    unsigned char next[EVP_MAX_MD_SIZE];
    unsigned len;
    CHECK(HMAC(EVP_sha256(), k->secret, 32, info, sizeof info - 1, next, &len) != NULL);
    memcpy(k->secret, next, 32);
    keys_from_secret(k);
}

static void nonce_of(const Keys *k, unsigned char nonce[12]) {
    memcpy(nonce, k->iv, 12);
    for (int i = 0; i < 8; i++) nonce[4 + i] ^= (unsigned char)(k->seq >> (56 - 8 * i));
}

/* A server connection on the record layer and the client's end of it. */
static xConn *start(Peer *peer) {
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == 0);
    int small = 4096;
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
    xConn *conn = xConnCreate(&net, sv[0], NULL, &protocol, NULL);
    memset(peer->write.secret, 0x11, 32);
    memset(peer->read.secret, 0x22, 32);
    keys_from_secret(&peer->write);
    keys_from_secret(&peer->read);
    xTlsTraffic traffic = {.version = XTLS_VERSION_1_3, .aead = XTLS_AEAD_AES_128_GCM, .secret_len = 32};
    memcpy(traffic.read.secret, peer->write.secret, 32);
    memcpy(traffic.write.secret, peer->read.secret, 32);
    CHECK(xTlsTrafficKeys(traffic.aead, traffic.read.secret, 32, traffic.read.key, traffic.read.iv) &&
          xTlsTrafficKeys(traffic.aead, traffic.write.secret, 32, traffic.write.key, traffic.write.iv));
    peer->fd = sv[1];
    xTlsSummary summary = {.version = "TLSv1.3", .cipher = "TLS_AES_128_GCM_SHA256", .alpn = ""};
    CHECK(xTlsRecordsStart(conn, &traffic, &summary));
    freed = false;
    return conn;
}

/* Sends a record of type carrying data, sealed under the client's keys. */
static void send_record(Peer *peer, int type, const unsigned char *data, size_t len) {
    unsigned char rec[5 + 64 + 1 + 16], nonce[12];
    size_t inner = len + 1, body = inner + 16;
    unsigned char header[5] = {23, 3, 3, (unsigned char)(body >> 8), (unsigned char)body};
    memcpy(rec, header, 5);
    memcpy(rec + 5, data, len);
    rec[5 + len] = (unsigned char)type;
    nonce_of(&peer->write, nonce);
    peer->write.seq++;
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int n, last;
    CHECK(EVP_EncryptInit_ex(ctx, EVP_aes_128_gcm(), NULL, peer->write.key, nonce) == 1 &&
          EVP_EncryptUpdate(ctx, NULL, &n, rec, 5) == 1 &&
          EVP_EncryptUpdate(ctx, rec + 5, &n, rec + 5, (int)inner) == 1 &&
          EVP_EncryptFinal_ex(ctx, rec + 5 + n, &last) == 1 &&
          EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, 16, rec + 5 + inner) == 1);
    EVP_CIPHER_CTX_free(ctx);
    CHECK(send(peer->fd, rec, 5 + body, 0) == (ssize_t)(5 + body));
}

/* Reads exactly len bytes, turning the loop while none are there; false at
 * end of stream. */
static bool read_exactly(Peer *peer, unsigned char *buf, size_t len) {
    for (size_t got = 0, turns = 0; got < len; turns++) {
        ssize_t n = recv(peer->fd, buf + got, len - got, MSG_DONTWAIT);
        if (n == 0 || turns > 1000) return false;
        if (n > 0)
            got += (size_t)n;
        else
            turn();
    }
    return true;
}

/* The server's next record, opened: its inner type (-1 at end of stream or
 * for one that does not open) and plaintext. */
static int next_record(Peer *peer, unsigned char *plain, size_t *plain_len) {
    unsigned char rec[5 + 16384 + 256];
    if (!read_exactly(peer, rec, 5)) return -1;
    size_t body = (size_t)rec[3] << 8 | rec[4];
    if (body < 17 || body > sizeof rec - 5 || !read_exactly(peer, rec + 5, body)) return -1;
    unsigned char nonce[12];
    nonce_of(&peer->read, nonce);
    peer->read.seq++;
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int n, last;
    size_t len = body - 16;
    bool ok = EVP_DecryptInit_ex(ctx, EVP_aes_128_gcm(), NULL, peer->read.key, nonce) == 1 &&
              EVP_DecryptUpdate(ctx, NULL, &n, rec, 5) == 1 &&
              EVP_DecryptUpdate(ctx, plain, &n, rec + 5, (int)len) == 1 &&
              EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, 16, rec + 5 + len) == 1 &&
              EVP_DecryptFinal_ex(ctx, plain + n, &last) == 1;
    EVP_CIPHER_CTX_free(ctx);
    while (ok && len > 0 && plain[len - 1] == 0) len--;
    if (!ok || len == 0) return -1;
    *plain_len = len - 1;
    return plain[len - 1];
}

/* Writes on the server's socket, behind the record layer's back, until it
 * is full; how many bytes that took. */
static size_t fill_socket(int fd) {
    static const char filler[4096];
    size_t total = 0;
    ssize_t n;
    while ((n = send(fd, filler, sizeof filler, MSG_DONTWAIT)) > 0) total += (size_t)n;
    return total;
}

/* The server closes while its socket is full; the peer may have ended its
 * side first. */
static void close_with_a_full_socket(bool peer_ended_first) {
    Peer peer;
    xConn *conn = start(&peer);
    static const char response[] = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    CHECK(xConnWrite(conn, response, sizeof response - 1) == XOK);
    xConnFlush(conn);
    CHECK_EQ_INT(xConnPending(conn), 0);
    size_t filled = fill_socket(conn->fd);
    CHECK(filled > 0);
    if (peer_ended_first) shutdown(peer.fd, SHUT_WR);
    xConnCloseAfterFlush(conn);

    unsigned char plain[16384 + 256];
    size_t len = 0;
    CHECK_EQ_INT(next_record(&peer, plain, &len), 23);
    CHECK(len == sizeof response - 1 && memcmp(plain, response, len) == 0);
    unsigned char *skipped = malloc(filled);
    CHECK(read_exactly(&peer, skipped, filled));
    free(skipped);
    CHECK_EQ_INT(next_record(&peer, plain, &len), 21); /* an alert */
    CHECK(len == 2 && plain[0] == 1 && plain[1] == 0); /* close_notify */
    unsigned char after;
    CHECK(!read_exactly(&peer, &after, 1)); /* then the FIN */
    close(peer.fd);
    for (int i = 0; i < 100 && !freed; i++) turn();
    CHECK(freed);
}

static void a_close_notify_that_meets_a_full_socket_goes_before_the_fin(void) {
    close_with_a_full_socket(false);
}

/* Found by fuzz_tls_records: the lingering close read the peer's end and
 * closed before the close_notify could go. */
static void a_peer_that_ended_first_still_gets_the_close_notify(void) { close_with_a_full_socket(true); }

/* Found by fuzz_tls_records: a KeyUpdate answer waiting for the socket and
 * a second one owed left no room for the close_notify, which was dropped. */
static void a_close_notify_after_owed_key_updates_still_goes(void) {
    Peer peer;
    xConn *conn = start(&peer);
    size_t filled = fill_socket(conn->fd);
    static const unsigned char update_requested[5] = {24, 0, 0, 1, 1};
    for (int i = 0; i < 2; i++) { /* the first answer is sealed, and waits; the second is owed */
        send_record(&peer, 22, update_requested, sizeof update_requested);
        keys_update(&peer.write);
        turn();
    }
    CHECK(!xConnClosed(conn));
    xConnCloseAfterFlush(conn);
    unsigned char *skipped = malloc(filled);
    CHECK(read_exactly(&peer, skipped, filled));
    free(skipped);
    unsigned char plain[16384 + 256];
    size_t len = 0;
    for (int i = 0; i < 2; i++) { /* our KeyUpdates, not asking for the client's */
        CHECK_EQ_INT(next_record(&peer, plain, &len), 22);
        CHECK(len == 5 && plain[0] == 24 && plain[4] == 0);
        keys_update(&peer.read);
    }
    CHECK_EQ_INT(next_record(&peer, plain, &len), 21);
    CHECK(len == 2 && plain[0] == 1 && plain[1] == 0);
    unsigned char after;
    CHECK(!read_exactly(&peer, &after, 1));
    close(peer.fd);
    for (int i = 0; i < 100 && !freed; i++) turn();
    CHECK(freed);
}

static void a_partial_record_is_held_input_until_the_peer_goes(void) {
    Peer peer;
    xConn *conn = start(&peer);
    static const unsigned char header[5] = {23, 3, 3, 0x40, 0x00};
    CHECK(send(peer.fd, header, sizeof header, 0) == sizeof header);
    turn();
    CHECK(!xConnClosed(conn));
    CHECK(xConnHoldsInput(conn));
    close(peer.fd);
    for (int i = 0; i < 100 && !freed; i++) turn();
    CHECK(freed);
}

int main(void) {
    CHECK(xTestNetInit(&net));
    RUN(a_close_notify_that_meets_a_full_socket_goes_before_the_fin);
    RUN(a_peer_that_ended_first_still_gets_the_close_notify);
    RUN(a_close_notify_after_owed_key_updates_still_goes);
    RUN(a_partial_record_is_held_input_until_the_peer_goes);
    xTestNetDestroy(&net);
    return CHECK_SUMMARY();
}
