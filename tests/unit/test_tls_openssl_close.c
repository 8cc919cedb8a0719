/* test_tls_openssl_close.c — how a connection that OpenSSL keeps after the
 * handshake (xkit_records off) ends: a close_notify that meets a full socket
 * waits for room and the FIN follows it, so the peer never mistakes the end
 * for a truncation; on an empty socket both go at once.
 *
 * A real handshake, in process: a throwaway EC key and self-signed
 * certificate, a listener from xTlsServerCreate, its server end of a
 * socketpair accepted by xTlsAccept, and an OpenSSL client on the other end
 * driven between turns of the loop. The test fills the server's socket by
 * hand with bytes the client then reads raw. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <xhttp/tls_conf.h>

#include "check.h"
#include "worker.h"
#include "xnet/connection.h"
#include "xnet/tls/tls.h"

static xNetContext net;
static xConn *server_conn; /* the connection on_established saw */
static bool freed;

static void on_readable(xConn *conn) {
    char sink[4096];
    ssize_t n;
    while ((n = xConnRecv(conn, sink, sizeof sink)) > 0) {
    }
    if (n == 0 || errno != EAGAIN) xConnClose(conn);
}
static void nothing(xConn *conn) {}
static void on_free(xConn *conn) { freed = true; }
static const xConnProtocol protocol = {on_readable, nothing, nothing, nothing, nothing, on_free};

static bool on_established(xConn *conn, int alpn, void *arg) {
    server_conn = conn;
    xConnSetProtocol(conn, &protocol, NULL);
    return true;
}

static void turn(void) { xTestTurn(net.loop); }

/* ---- A certificate for the listener ---- */

static char dir[] = "/tmp/xk-tls-close-XXXXXX";
static char cert_path[64], key_path[64];

static bool write_pem(const char *path, X509 *cert, EVP_PKEY *key) {
    FILE *f = fopen(path, "w");
    if (!f) return false;
    bool ok =
        cert ? PEM_write_X509(f, cert) == 1 : PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL) == 1;
    return fclose(f) == 0 && ok;
}

/* A P-256 key and a day's self-signed certificate for localhost, as PEM
 * files in a fresh directory. */
static bool make_certificate(void) {
    if (!mkdtemp(dir)) return false;
    snprintf(cert_path, sizeof cert_path, "%s/cert.pem", dir);
    snprintf(key_path, sizeof key_path, "%s/key.pem", dir);
    EVP_PKEY *key = EVP_EC_gen("P-256");
    X509 *cert = X509_new();
    bool ok = key && cert && X509_set_version(cert, 2) == 1 &&
              ASN1_INTEGER_set(X509_get_serialNumber(cert), 1) == 1 &&
              X509_gmtime_adj(X509_getm_notBefore(cert), -60) &&
              X509_gmtime_adj(X509_getm_notAfter(cert), 86400) && X509_set_pubkey(cert, key) == 1;
    X509_NAME *name = ok ? X509_get_subject_name(cert) : NULL;
    ok = ok &&
         X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"localhost", -1, -1,
                                    0) == 1 &&
         X509_set_issuer_name(cert, name) == 1 && X509_sign(cert, key, EVP_sha256()) > 0 &&
         write_pem(cert_path, cert, NULL) && write_pem(key_path, NULL, key);
    X509_free(cert);
    EVP_PKEY_free(key);
    return ok;
}

static void remove_certificate(void) {
    unlink(cert_path);
    unlink(key_path);
    rmdir(dir);
}

/* ---- A connection and its client ---- */

static xTlsServer *srv;
static SSL_CTX *client_ctx;

typedef struct Client {
    int fd;
    SSL *ssl;
} Client;

/* Handshakes a client with the listener over a socketpair whose server end
 * has a small send buffer (quick to fill); the server's connection, or NULL.
 * Then reads what the server sent after its Finished (TLS 1.3 tickets), so
 * the client's socket holds nothing. */
static xConn *start(Client *client) {
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == 0);
    int small = 4096;
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
    server_conn = NULL;
    freed = false;
    CHECK(xTlsAccept(&net, srv, sv[0], NULL));
    client->fd = sv[1];
    client->ssl = SSL_new(client_ctx);
    CHECK(client->ssl && SSL_set_fd(client->ssl, client->fd) == 1);
    SSL_set_connect_state(client->ssl);
    bool done = false;
    for (int i = 0; i < 1000 && !(done && server_conn); i++) {
        if (!done) {
            int r = SSL_do_handshake(client->ssl);
            int e = SSL_get_error(client->ssl, r);
            done = r == 1;
            CHECK_MSG(done || e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE, "handshake: %d", e);
            if (!done && e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) return NULL;
        }
        turn();
    }
    CHECK(done && server_conn);
    xTlsInfo info = {.struct_size = sizeof info};
    CHECK(server_conn && xConnTlsInfo(server_conn, &info) && !info.xkit_records);
    char byte;
    for (int i = 0; i < 100; i++) {
        int r = SSL_read(client->ssl, &byte, 1);
        CHECK_MSG(r <= 0, "the server sent data");
        if (SSL_get_error(client->ssl, r) == SSL_ERROR_WANT_READ) break;
    }
    ERR_clear_error();
    return server_conn;
}

static void client_end(Client *client) {
    SSL_free(client->ssl);
    close(client->fd);
}

/* Writes on the server's socket, behind OpenSSL's back, until it takes not
 * even a byte more; how many bytes that took. */
static size_t fill_socket(int fd) {
    static const char filler[4096];
    size_t total = 0;
    for (size_t piece = sizeof filler; piece > 0; piece /= 2) {
        ssize_t n;
        while ((n = send(fd, filler, piece, MSG_DONTWAIT)) > 0) total += (size_t)n;
        CHECK(n < 0 && errno == EAGAIN);
    }
    return total;
}

/* Reads exactly len raw bytes, turning the loop while none are there;
 * false at end of stream. */
static bool read_raw(Client *client, char *buf, size_t len) {
    for (size_t got = 0, turns = 0; got < len; turns++) {
        ssize_t n = recv(client->fd, buf + got, len - got, MSG_DONTWAIT);
        if (n == 0 || turns > 1000) return false;
        if (n > 0)
            got += (size_t)n;
        else
            turn();
    }
    return true;
}

/* What the client's next SSL_read says, turning the loop up to turns times
 * while it waits. */
static int client_read_error(Client *client, int turns) {
    char byte;
    for (int i = 0; i <= turns; i++) {
        int r = SSL_read(client->ssl, &byte, 1);
        int e = SSL_get_error(client->ssl, r);
        if (r > 0) return -1;
        if (e != SSL_ERROR_WANT_READ) {
            ERR_clear_error();
            return e;
        }
        turn();
    }
    return -1;
}

/* The close_notify comes (within turns of the loop), then the end of the
 * stream: nothing after it. */
static void client_sees_close_notify_then_fin(Client *client, int turns) {
    CHECK_EQ_INT(client_read_error(client, turns), SSL_ERROR_ZERO_RETURN);
    char after;
    CHECK_EQ_INT(recv(client->fd, &after, 1, MSG_DONTWAIT), 0);
}

static void server_conn_goes(Client *client) {
    client_end(client);
    for (int i = 0; i < 100 && !freed; i++) turn();
    CHECK(freed);
}

/* The server closes while its socket is full; the peer may have ended its
 * side first. */
static void close_with_a_full_socket(bool peer_ended_first) {
    Client client;
    xConn *conn = start(&client);
    if (!conn) return;
    size_t filled = fill_socket(conn->fd);
    CHECK(filled > 0);
    if (peer_ended_first) shutdown(client.fd, SHUT_WR);
    xConnCloseAfterFlush(conn);
    CHECK(!freed);
    char *skipped = malloc(filled);
    CHECK(read_raw(&client, skipped, filled));
    free(skipped);
    client_sees_close_notify_then_fin(&client, 1000);
    server_conn_goes(&client);
}

static void a_close_notify_that_meets_a_full_socket_goes_before_the_fin(void) {
    close_with_a_full_socket(false);
}

static void a_peer_that_ended_first_still_gets_the_close_notify(void) { close_with_a_full_socket(true); }

static void on_an_empty_socket_the_close_notify_and_fin_go_at_once(void) {
    Client client;
    xConn *conn = start(&client);
    if (!conn) return;
    xConnCloseAfterFlush(conn);
    client_sees_close_notify_then_fin(&client, 0); /* no turn of the loop needed */
    server_conn_goes(&client);
}

int main(void) {
    /* As the server does (OpenSSL writes with write(2)): a client whose
     * session broke sends an alert into its own shut socket. */
    signal(SIGPIPE, SIG_IGN);
    CHECK(xTestNetInit(&net));
    CHECK(make_certificate());

    xTlsConf conf;
    xTlsConfInit(&conf);
    conf.cert.cert_file = cert_path;
    conf.cert.key_file = key_path;
    conf.xkit_records = false; /* OpenSSL's transport keeps the records */
    conf.ktls = false;
    xTlsListen listen = {.on_established = on_established};
    char err[256] = "";
    srv = xTlsServerCreate(&conf, &listen, err, sizeof err);
    CHECK_MSG(srv != NULL, "%s", err);
    client_ctx = SSL_CTX_new(TLS_client_method());
    CHECK(client_ctx != NULL);
    if (srv && client_ctx) {
        RUN(a_close_notify_that_meets_a_full_socket_goes_before_the_fin);
        RUN(a_peer_that_ended_first_still_gets_the_close_notify);
        RUN(on_an_empty_socket_the_close_notify_and_fin_go_at_once);
    }
    SSL_CTX_free(client_ctx);
    xTlsServerDestroy(srv);
    remove_certificate();
    xTestNetDestroy(&net);
    return CHECK_SUMMARY();
}
