/* tls.c — TLS to upstreams (tls.h): OpenSSL's client, non-blocking on the
 * worker's loop.
 *
 * The handshake runs on the socket's connecting watch (client.c asks for
 * what OpenSSL wants next). The transport then reads and writes through
 * SSL_read_ex and SSL_write_ex: OpenSSL reads the socket itself, so the
 * loop may not receive ahead (reads_through_loop false). Verification is
 * OpenSSL's: the chain against the trusted store, the name with
 * SSL_set1_host (or the address, for a literal), SNI for names only
 * (RFC 6066 §3 forbids addresses). */
#include "xhttp/client/tls.h"

#include "xnet/tls/tls.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/err.h>
#include <openssl/x509v3.h>

struct xClientTls {
    SSL_CTX *ctx;
    char name[256]; /* checked against the certificate; SNI when not an address */
    bool literal;
    bool verify;
};

/* Where an SSL's new sessions go: the pool's slot (ex_data), NULL once forgotten. */
static int slot_index = -1;
static CRYPTO_ONCE slot_once = CRYPTO_ONCE_STATIC_INIT;

static void make_slot_index(void) { slot_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL); }

/* TLS 1.3 issues sessions after the handshake (tickets), 1.2 at its end:
 * either way the newest one is kept for the next connection. */
static int on_new_session(SSL *ssl, SSL_SESSION *session) {
    SSL_SESSION **slot = SSL_get_ex_data(ssl, slot_index);
    if (!slot || !SSL_SESSION_is_resumable(session)) return 0;
    if (*slot) SSL_SESSION_free(*slot);
    *slot = session;
    return 1; /* the reference is ours */
}

xClientTls *xClientTlsCreate(const char *host, bool literal, const char *server_name, const char *ca_file,
                             bool verify, bool h2, char *err, size_t err_len) {
    CRYPTO_THREAD_run_once(&slot_once, make_slot_index);
    /* OpenSSL writes the socket with write(2): a peer gone must be EPIPE,
     * not a signal (as the server does, where nobody chose otherwise). */
    struct sigaction current;
    if (sigaction(SIGPIPE, NULL, &current) == 0 && current.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
    xClientTls *tls = calloc(1, sizeof *tls);
    if (!tls || slot_index < 0) {
        free(tls);
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    const char *name = server_name && *server_name ? server_name : host;
    snprintf(tls->name, sizeof tls->name, "%s", name);
    tls->literal = literal && !(server_name && *server_name);
    tls->verify = verify;
    tls->ctx = SSL_CTX_new(TLS_client_method());
    if (!tls->ctx) goto openssl_failed;
    SSL_CTX_set_min_proto_version(tls->ctx, TLS1_2_VERSION);
    /* The output queue hands a piece again from another address after a
     * short write; a write may take part of what it is given. */
    SSL_CTX_set_mode(tls->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                                   SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_session_cache_mode(tls->ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    SSL_CTX_sess_set_new_cb(tls->ctx, on_new_session);
    static const unsigned char http1[] = "\x08http/1.1", http2[] = "\x02h2";
    if (h2)
        SSL_CTX_set_alpn_protos(tls->ctx, http2, sizeof http2 - 1);
    else
        SSL_CTX_set_alpn_protos(tls->ctx, http1, sizeof http1 - 1);
    if (verify) {
        SSL_CTX_set_verify(tls->ctx, SSL_VERIFY_PEER, NULL);
        int ok = ca_file ? SSL_CTX_load_verify_locations(tls->ctx, ca_file, NULL)
                         : SSL_CTX_set_default_verify_paths(tls->ctx);
        if (!ok) goto openssl_failed;
    } else {
        SSL_CTX_set_verify(tls->ctx, SSL_VERIFY_NONE, NULL);
    }
    return tls;
openssl_failed : {
    unsigned long e = ERR_get_error();
    snprintf(err, err_len, "%s%s%s", ca_file ? ca_file : "TLS context", e ? ": " : "",
             e ? ERR_reason_error_string(e) : "");
    ERR_clear_error();
    xClientTlsDestroy(tls);
    return NULL;
}
}

void xClientTlsDestroy(xClientTls *tls) {
    if (!tls) return;
    SSL_CTX_free(tls->ctx);
    free(tls);
}

SSL *xClientTlsNew(xClientTls *tls, int fd, SSL_SESSION **session) {
    SSL *ssl = SSL_new(tls->ctx);
    if (!ssl) return NULL;
    bool ok = SSL_set_fd(ssl, fd) == 1 && SSL_set_ex_data(ssl, slot_index, session) == 1;
    if (ok && !tls->literal) ok = SSL_set_tlsext_host_name(ssl, tls->name) == 1;
    if (ok && tls->verify) {
        if (tls->literal)
            ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), tls->name) == 1;
        else
            ok = SSL_set1_host(ssl, tls->name) == 1;
    }
    if (ok && *session) SSL_set_session(ssl, *session);
    SSL_set_connect_state(ssl);
    if (!ok) {
        ERR_clear_error();
        SSL_free(ssl);
        return NULL;
    }
    return ssl;
}

void xClientTlsForget(SSL *ssl) { SSL_set_ex_data(ssl, slot_index, NULL); }

xClientTlsStep xClientTlsHandshake(SSL *ssl, char *why, size_t why_len) {
    ERR_clear_error();
    int r = SSL_do_handshake(ssl);
    if (r == 1) return XCTLS_DONE;
    int saved = errno;
    switch (SSL_get_error(ssl, r)) {
    case SSL_ERROR_WANT_READ: return XCTLS_WANT_READ;
    case SSL_ERROR_WANT_WRITE: return XCTLS_WANT_WRITE;
    default: break;
    }
    long verified = SSL_get_verify_result(ssl);
    unsigned long e = ERR_peek_error();
    if (verified != X509_V_OK)
        snprintf(why, why_len, "certificate verify failed: %s", X509_verify_cert_error_string(verified));
    else if (e)
        snprintf(why, why_len, "TLS handshake failed: %s", ERR_reason_error_string(e));
    else
        snprintf(why, why_len, "TLS handshake failed: %s", saved ? strerror(saved) : "connection closed");
    ERR_clear_error();
    return XCTLS_FAILED;
}

/* ---- The transport ---- */

static ssize_t tls_recv(xConn *conn, char *buf, size_t len) {
    SSL *ssl = conn->transport_state;
    size_t n;
    ERR_clear_error();
    if (SSL_read_ex(ssl, buf, len, &n)) return (ssize_t)n;
    int saved = errno;
    switch (SSL_get_error(ssl, 0)) {
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE:
        conn->readable = false; /* the socket is drained: the next edge brings more */
        errno = EAGAIN;
        return -1;
    case SSL_ERROR_ZERO_RETURN: return 0; /* close_notify */
    default:
        ERR_clear_error();
        errno = saved ? saved : ECONNRESET;
        return -1;
    }
}

static ssize_t tls_sendv(xConn *conn, const struct iovec *iov, int iovcnt) {
    return xTlsSslSendv(conn->transport_state, iov, iovcnt);
}

/* A close_notify if the socket takes it now; the FIN follows either way. */
static void tls_shutdown_write(xConn *conn) {
    SSL_shutdown(conn->transport_state);
    ERR_clear_error();
    shutdown(conn->fd, SHUT_WR);
}

static void tls_close(xConn *conn) {
    SSL *ssl = conn->transport_state;
    xClientTlsForget(ssl);
    /* A connection given up mid-exchange says close_notify only when whole. */
    if (SSL_is_init_finished(ssl) && !(SSL_get_shutdown(ssl) & SSL_SENT_SHUTDOWN)) SSL_shutdown(ssl);
    ERR_clear_error();
}

static void tls_free(xConn *conn) { SSL_free(conn->transport_state); }

static const xTransport client_tls_transport = {
    .recv = tls_recv,
    .sendv = tls_sendv,
    .shutdown_write = tls_shutdown_write,
    .close = tls_close,
    .free = tls_free,
    .secure = true,
};

void xClientTlsAttach(xConn *conn, SSL *ssl) { xConnSetTransport(conn, &client_tls_transport, ssl); }
