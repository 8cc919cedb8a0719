/* tls_conn.h — what the TLS files share among themselves (tls_context.c,
 * tls_handshake.c, tls_handover.c): a listener's state and a connection's
 * while OpenSSL holds it. Nothing outside src/xnet/tls/ includes this. */
#ifndef XNET_TLS_TLS_CONN_H
#define XNET_TLS_TLS_CONN_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include <openssl/ssl.h>

#include "xnet/tls/tls.h"
#include "xnet/tls/tls_records.h"

#define XTLS_ALPN_MAX 64

typedef struct xTicketKey {
    unsigned char name[16];
    unsigned char aes[32];
    unsigned char hmac[32];
    time_t born;
} xTicketKey;

typedef struct xTlsSniCtx {
    char *name;
    SSL_CTX *ctx;
} xTlsSniCtx;

/* The contexts made from one reading of the files. A reload makes a new
 * bundle; handshakes still running keep theirs until they end. */
typedef struct xTlsBundle {
    atomic_uint refs; /* the server's, plus one per handshake in progress */
    SSL_CTX *main;    /* the default certificate */
    xTlsSniCtx *sni;
    size_t num_sni;
} xTlsBundle;

struct xTlsServer {
    xTlsConf conf;                     /* strings point at copies owned here */
    xTlsSniCert *sni;                  /* conf.sni, copied */
    xTlsListen listen;                 /* the caller's protocols and callbacks */
    char *alpn_names[XTLS_ALPN_NAMES]; /* listen.alpn, copied */
    size_t num_alpn;
    unsigned char alpn[XTLS_ALPN_MAX]; /* the same, in ALPN's wire format */
    size_t alpn_len;
    pthread_mutex_t lock; /* guards bundle and tickets */
    xTlsBundle *bundle;
    xTicketKey tickets[2]; /* [0] encrypts; [1], the one before, still decrypts */
};

/* What the handshake shows of its keys and records, for our record layer:
 * the TLS 1.3 traffic secrets (OpenSSL's key log), and per direction
 * (0 read, 1 write) how many records followed the ChangeCipherSpec and the
 * Finished message, and how many tickets followed the Finished: two counts
 * of the same records, checked against each other before they are trusted. */
typedef struct xTlsHandoff {
    unsigned char client_secret[XTLS_SECRET_MAX], server_secret[XTLS_SECRET_MAX];
    size_t client_secret_len, server_secret_len;
    bool changed_cipher[2], finished[2];
    uint64_t records_after_ccs[2], records_after_finished[2], tickets_after_finished[2];
} xTlsHandoff;

/* A connection while OpenSSL holds it: its handshake protocol's state, then
 * its transport's (unless the records were handed over). */
typedef struct xTlsConn {
    SSL *ssl;
    xTlsServer *srv;
    xTlsBundle *bundle; /* held while handshaking: SNI picks a context from it */
    xTlsHandoff handoff;
    bool drained; /* the last socket read came back short or empty */
    bool sniffed; /* the first byte was looked at: TLS, or plain text? */
    bool established;
    bool failed;   /* the session broke: no close_notify */
    bool shut;     /* close_notify sent */
    bool fin_owed; /* the close_notify waits for the socket: the FIN follows it */
    /* The peer asked for new sending keys, which the kernel sealing our
     * TLS 1.3 records cannot be given (ktls_tls13): the connection ends. */
    bool rekey_impossible;
} xTlsConn;

/* tls_context.c */
xTlsServer *xTlsServerOf(SSL *ssl);
void xTlsBundleRelease(xTlsBundle *bundle);
bool xTlsKernelHasTls(void);

/* tls_handshake.c */
void xTlsConnFree(xTlsConn *t);
void xTlsDescribe(SSL *ssl, xTlsInfo *info);

/* tls_handover.c */
void xTlsOnKeylog(const SSL *ssl, const char *line);
void xTlsOnMessage(int write_p, int version, int content_type, const void *buf, size_t len, SSL *ssl,
                   void *arg);
/** Moves conn's records to our record layer and frees t (and its SSL
 *  object). False, with nothing changed, for what the record layer does not
 *  cover: other ciphers, a negotiated maximum fragment length, kTLS. */
bool xTlsHandOver(xConn *conn, xTlsConn *t);

#endif
