/* tls_handshake.c — a TLS connection under OpenSSL: the non-blocking
 * handshake in the worker's loop, and the transport that carries records
 * when OpenSSL keeps them (other suites, kTLS, or our record layer off).
 *
 * The socket stays OpenSSL's own socket BIO, so OpenSSL can hand records to
 * the kernel (kTLS) where the kernel offers it. A callback on that BIO sees
 * each read's result, which keeps the plain transport's saving: a short read
 * means the socket is drained, so no read is spent just to hear EAGAIN. */
#include "xnet/tls/tls_conn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/x509.h>

#include <xbase/log.h>

#define XTLS_RECORD_MAX 16384

static long on_bio(BIO *bio, int oper, const char *argp, size_t len, int argi, long argl, int ret,
                   size_t *processed) {
    if (oper == (BIO_CB_READ | BIO_CB_RETURN)) {
        xTlsConn *t = (xTlsConn *)BIO_get_callback_arg(bio);
        t->drained = ret <= 0 || *processed < len;
    }
    return ret;
}

void xTlsConnFree(xTlsConn *t) {
    OPENSSL_cleanse(&t->handoff, sizeof t->handoff);
    SSL_free(t->ssl);
    xTlsBundleRelease(t->bundle);
    free(t);
}

static ssize_t tls_recv(xConn *conn, char *buf, size_t len) {
    xTlsConn *t = conn->transport_state;
    size_t n;
    t->drained = false;
    bool read = SSL_read_ex(t->ssl, buf, len, &n);
    if (t->rekey_impossible) {
        /* Nothing more may be sent: the kernel would seal it under keys the
         * peer has retired. The end is an EOF, not a record it cannot open. */
        ERR_clear_error();
        t->failed = true;
        errno = EPROTO;
        return -1;
    }
    if (read) {
        if (t->drained && !SSL_has_pending(t->ssl)) conn->readable = false;
        return (ssize_t)n;
    }
    int saved = errno;
    switch (SSL_get_error(t->ssl, 0)) {
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE:
        conn->readable = false;
        errno = EAGAIN;
        return -1;
    case SSL_ERROR_ZERO_RETURN:
        /* close_notify, or (IGNORE_UNEXPECTED_EOF) a bare FIN. For the FIN
         * OpenSSL replaces the shutdown state, forgetting that ours was sent:
         * the next SSL_shutdown would queue it again behind the one waiting
         * for the socket, and fail without saying it waits. */
        if (t->shut) SSL_set_shutdown(t->ssl, SSL_get_shutdown(t->ssl) | SSL_SENT_SHUTDOWN);
        return 0;
    case SSL_ERROR_SYSCALL:
        ERR_clear_error();
        t->failed = true;
        errno = saved ? saved : ECONNRESET;
        return -1;
    default:
        ERR_clear_error();
        t->failed = true;
        errno = EPROTO;
        return -1;
    }
}

ssize_t xTlsSslSendv(SSL *ssl, const struct iovec *iov, int iovcnt) {
    static __thread char gathered[XTLS_RECORD_MAX];
    const void *data = iov[0].iov_base;
    size_t len = iov[0].iov_len;
    if (iovcnt > 1 && len < XTLS_RECORD_MAX) {
        len = 0;
        for (int i = 0; i < iovcnt && len < XTLS_RECORD_MAX; i++) {
            size_t take = iov[i].iov_len < XTLS_RECORD_MAX - len ? iov[i].iov_len : XTLS_RECORD_MAX - len;
            memcpy(gathered + len, iov[i].iov_base, take);
            len += take;
        }
        data = gathered;
    }
    size_t n;
    ERR_clear_error();
    if (SSL_write_ex(ssl, data, len, &n)) return (ssize_t)n;
    int saved = errno;
    switch (SSL_get_error(ssl, 0)) {
    case SSL_ERROR_WANT_WRITE:
    case SSL_ERROR_WANT_READ: errno = EAGAIN; return -1;
    default:
        ERR_clear_error();
        errno = saved ? saved : EPIPE;
        return -1;
    }
}

static ssize_t tls_sendv(xConn *conn, const struct iovec *iov, int iovcnt) {
    xTlsConn *t = conn->transport_state;
    if (t->failed) {
        /* After a KeyUpdate the kernel cannot follow, its records would be
         * sealed under keys the peer has retired. */
        errno = EPIPE;
        return -1;
    }
    ssize_t n = xTlsSslSendv(t->ssl, iov, iovcnt);
    if (n < 0 && errno != EAGAIN) t->failed = true;
    return n;
}

/* Writes the close_notify: the first SSL_shutdown queues it, and once it
 * met a full socket, each later one sends what OpenSSL kept of it. False
 * while it waits for room; one that failed otherwise is given up. */
static bool write_close_notify(xTlsConn *t) {
    int r = SSL_shutdown(t->ssl);
    if (r >= 0) return true;
    bool waits = SSL_get_error(t->ssl, r) == SSL_ERROR_WANT_WRITE;
    ERR_clear_error();
    return !waits;
}

/* False when the close_notify waits for the socket. */
static bool send_close_notify(xTlsConn *t) {
    if (!t->established || t->failed || t->shut) return true;
    t->shut = true;
    return write_close_notify(t);
}

static void tls_shutdown_write(xConn *conn) {
    xTlsConn *t = conn->transport_state;
    /* A FIN now would cut off a close_notify that met a full socket (the
     * peer would see a truncation): it follows once tls_flush wrote it. */
    if (send_close_notify(t)) {
        shutdown(conn->fd, SHUT_WR);
        return;
    }
    t->fin_owed = true;
    xConnBlocked(conn); /* the queue is empty: this is what brings us back */
}

/* The socket is closing: the close_notify goes if the socket takes it. */
static void tls_close(xConn *conn) { send_close_notify(conn->transport_state); }

/* The close_notify that met a full socket, then the FIN that waited for it. */
static bool tls_flush(xConn *conn) {
    xTlsConn *t = conn->transport_state;
    if (!t->fin_owed) return true;
    if (!write_close_notify(t)) {
        errno = EAGAIN;
        return false;
    }
    t->fin_owed = false;
    shutdown(conn->fd, SHUT_WR);
    return true;
}

static void tls_free(xConn *conn) {
    if (conn->transport_state) xTlsConnFree(conn->transport_state);
}

/* The name ALPN chose, as the listener spelled it (it outlives the SSL
 * object); "" when none was. */
static const char *alpn_name(SSL *ssl, int *index) {
    const unsigned char *alpn;
    unsigned alpn_len;
    SSL_get0_alpn_selected(ssl, &alpn, &alpn_len);
    const xTlsServer *srv = xTlsServerOf(ssl);
    for (size_t i = 0; alpn_len && i < srv->num_alpn; i++) {
        if (strlen(srv->alpn_names[i]) == alpn_len && memcmp(srv->alpn_names[i], alpn, alpn_len) == 0) {
            if (index) *index = (int)i;
            return srv->alpn_names[i];
        }
    }
    if (index) *index = -1;
    return "";
}

/* What a handler may ask of a connection, straight from its SSL object
 * (strings owned by it, static, or the listener's ALPN names, which live as
 * long as the listener). */
void xTlsDescribe(SSL *ssl, xTlsInfo *info) {
    const char *name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
    *info = (xTlsInfo){
        .version = SSL_get_version(ssl),
        .cipher = SSL_CIPHER_get_name(SSL_get_current_cipher(ssl)),
        .alpn = alpn_name(ssl, NULL),
        .server_name = name ? name : "",
        .resumed = SSL_session_reused(ssl) == 1,
    };
    X509 *peer = SSL_get0_peer_certificate(ssl);
    if (peer) {
        info->client_verified = SSL_get_verify_result(ssl) == X509_V_OK;
        X509_NAME_oneline(X509_get_subject_name(peer), info->client_subject, sizeof info->client_subject);
    }
}

static bool tls_info(const xConn *conn, xTlsInfo *info) {
    SSL *ssl = ((const xTlsConn *)conn->transport_state)->ssl;
    xTlsDescribe(ssl, info);
    if (!info->cipher) info->cipher = "";
#ifndef OPENSSL_NO_KTLS
    info->ktls_send = BIO_get_ktls_send(SSL_get_wbio(ssl));
    info->ktls_recv = BIO_get_ktls_recv(SSL_get_rbio(ssl));
#endif
    return true;
}

/* With kTLS sending, the kernel seals what sendfile(2) takes from the file. */
static ssize_t tls_sendfile(xConn *conn, int fd, off_t offset, size_t len) {
#ifndef OPENSSL_NO_KTLS
    xTlsConn *t = conn->transport_state;
    if (t->failed) {
        errno = EPIPE;
        return -1;
    }
    if (BIO_get_ktls_send(SSL_get_wbio(t->ssl))) {
        ossl_ssize_t n = SSL_sendfile(t->ssl, fd, offset, len, 0);
        if (n >= 0) return (ssize_t)n;
        int saved = errno;
        ERR_clear_error();
        errno = saved == EAGAIN || saved == EINTR ? saved : (saved ? saved : EPIPE);
        return -1;
    }
#endif
    errno = EOPNOTSUPP;
    return -1;
}

/* A lingering connection's input, read past OpenSSL, which would open it
 * (and might answer it). Except where the kernel opens the records (kTLS
 * receive), so every read decrypts: through OpenSSL while the session
 * stands; once it failed, nothing, as the kernel would fail (and count) the
 * record it refused again. */
static ssize_t tls_discard(xConn *conn, char *buf, size_t len) {
#ifndef OPENSSL_NO_KTLS
    xTlsConn *t = conn->transport_state;
    if (BIO_get_ktls_recv(SSL_get_rbio(t->ssl))) {
        if (!t->failed) return tls_recv(conn, buf, len);
        errno = EPROTO;
        return -1;
    }
#endif
    ssize_t n = recv(conn->fd, buf, len, 0);
    if (n < 0 && errno == EAGAIN) conn->readable = false;
    return n;
}

static const xTransport tls_transport = {
    .recv = tls_recv,
    .sendv = tls_sendv,
    .shutdown_write = tls_shutdown_write,
    .close = tls_close,
    .free = tls_free,
    .secure = true,
    .flush = tls_flush,
    .tls_info = tls_info,
    .sendfile = tls_sendfile,
    .discard = tls_discard,
};

/* ---- The handshake ---- */

/* The first bytes were not TLS: the connection goes back to the plain
 * transport and the listener's caller decides what to say. */
static void not_tls(xConn *conn, xTlsConn *t) {
    const xTlsListen *listen = &t->srv->listen;
    xConnSetTransport(conn, &xConnPlainTransport, NULL);
    xTlsConnFree(t);
    conn->proto_state = NULL;
    if (listen->on_plaintext)
        listen->on_plaintext(conn, listen->arg);
    else
        xConnClose(conn);
}

static void handshake_failed(xConn *conn, xTlsConn *t) {
    unsigned long e = ERR_peek_error();
    XLOG_DEBUG("TLS handshake failed: %s", e ? ERR_reason_error_string(e) : strerror(errno));
    ERR_clear_error();
    t->failed = true;
    xCounterAdd(&conn->net->counters.tls_failures, 1);
    xConnClose(conn);
}

#ifndef OPENSSL_NO_KTLS
/* A TLS 1.3 KeyUpdate received with update_requested set (RFC 8446 §4.6.3). */
static void watch_key_updates(int write_p, int version, int content_type, const void *buf, size_t len,
                              SSL *ssl, void *arg) {
    const unsigned char *msg = buf;
    if (!write_p && content_type == SSL3_RT_HANDSHAKE && len >= 5 && msg[0] == SSL3_MT_KEY_UPDATE &&
        msg[4] == 1) {
        XLOG_DEBUG(
            "kTLS: a KeyUpdate asks for new sending keys, which OpenSSL cannot give the kernel: closing");
        ((xTlsConn *)arg)->rekey_impossible = true;
    }
}
#endif

static void established(xConn *conn, xTlsConn *t) {
    t->established = true;
    xCounterAdd(&conn->net->counters.tls_handshakes, 1);
    xTlsBundleRelease(t->bundle);
    t->bundle = NULL;
    xConnSetTimeout(conn, 0);
    int alpn;
    alpn_name(t->ssl, &alpn);
    const xTlsListen *listen = &t->srv->listen;
    conn->proto_state = NULL;
    if (!xTlsHandOver(conn, t)) {
        /* OpenSSL keeps the records: let it read ahead again. */
        SSL_set_msg_callback(t->ssl, NULL);
#ifndef OPENSSL_NO_KTLS
        if (SSL_version(t->ssl) == TLS1_3_VERSION && BIO_get_ktls_send(SSL_get_wbio(t->ssl))) {
            SSL_set_msg_callback(t->ssl, watch_key_updates);
            SSL_set_msg_callback_arg(t->ssl, t);
        }
#endif
        SSL_set_read_ahead(t->ssl, 1);
        OPENSSL_cleanse(&t->handoff, sizeof t->handoff);
    }
    if (!listen->on_established(conn, alpn, listen->arg)) xConnClose(conn);
}

/* A TLS record starts with a content type byte (0x14-0x17; an SSLv2 hello
 * with 0x80 or more); an HTTP request with a method in capitals. */
static bool sniff_plaintext(xConn *conn, xTlsConn *t) {
    unsigned char first;
    ssize_t n = recv(conn->fd, &first, 1, MSG_PEEK);
    if (n == 0 || (n < 0 && errno == EAGAIN)) return false; /* nothing yet: OpenSSL finds out */
    t->sniffed = true;
    return n == 1 && first >= 'A' && first <= 'Z';
}

/* Until the handshake ends the connection's protocol is the handshake, and
 * its state is the TLS connection. */
static void handshake(xConn *conn) {
    xTlsConn *t = conn->proto_state;
    if (!t || t->established) return; /* answered in plaintext, or already handed on */
    if (!t->sniffed && sniff_plaintext(conn, t)) {
        not_tls(conn, t);
        return;
    }
    t->drained = false;
    int r = SSL_do_handshake(t->ssl);
    if (r == 1) {
        established(conn, t);
        return;
    }
    switch (SSL_get_error(t->ssl, r)) {
    case SSL_ERROR_WANT_READ: conn->readable = false; return;
    case SSL_ERROR_WANT_WRITE: conn->send = XCONN_SEND_BLOCKED; return;
    default: handshake_failed(conn, t); return;
    }
}

static void handshake_timeout(xConn *conn) {
    xTlsConn *t = conn->proto_state;
    if (t) {
        t->failed = true;
        xCounterAdd(&conn->net->counters.tls_failures, 1);
    }
    xConnClose(conn);
}

/* A stop began: a handshake under way may finish, briefly (what comes after
 * it is told of the stop when it starts). */
static void handshake_drain(xConn *conn) {
    xTlsConn *t = conn->proto_state;
    uint32_t limit = t ? t->srv->conf.handshake_timeout_ms : 0;
    xConnSetTimeout(conn, limit && limit < XCONN_DRAIN_FRESH_MS ? limit : XCONN_DRAIN_FRESH_MS);
}

static const xConnProtocol handshake_protocol = {
    .on_readable = handshake,
    .on_flushed = handshake,
    .on_timeout = handshake_timeout,
    .on_drain = handshake_drain,
};

bool xTlsAccept(xNetContext *net, xTlsServer *srv, int fd, const xNetAddr *addr) {
    xTlsConn *t = calloc(1, sizeof *t);
    if (!t) {
        close(fd);
        return false;
    }
    t->srv = srv;
    pthread_mutex_lock(&srv->lock);
    t->bundle = srv->bundle;
    atomic_fetch_add(&t->bundle->refs, 1);
    pthread_mutex_unlock(&srv->lock);
    t->ssl = SSL_new(t->bundle->main);
    if (!t->ssl || SSL_set_fd(t->ssl, fd) != 1) {
        ERR_clear_error();
        xTlsConnFree(t);
        close(fd);
        return false;
    }
    BIO *bio = SSL_get_rbio(t->ssl);
    BIO_set_callback_ex(bio, on_bio);
    BIO_set_callback_arg(bio, (char *)t);
    SSL_set_accept_state(t->ssl);
    if (srv->conf.xkit_records) {
        SSL_set_msg_callback(t->ssl, xTlsOnMessage);
        SSL_set_msg_callback_arg(t->ssl, &t->handoff);
    }
    xConn *conn = xConnCreate(net, fd, addr, &handshake_protocol, t);
    if (!conn) {
        xTlsConnFree(t);
        return false;
    }
    SSL_set_app_data(t->ssl, conn);
    xConnSetTransport(conn, &tls_transport, t);
    xConnSetTimeout(conn, srv->conf.handshake_timeout_ms);
    return true;
}
