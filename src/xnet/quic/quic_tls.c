/* quic_tls.c — GnuTLS for QUIC (quic_tls.h): the one file that includes it. */
#include "xnet/quic/quic_tls.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>

/* TLS 1.3 only (RFC 9001 §4.2), its AEAD suites, and no middlebox
 * compatibility records, which QUIC forbids (RFC 9001 §8.4). */
#define XQUIC_PRIORITY                                                                                       \
    "NORMAL:-VERS-ALL:+VERS-TLS1.3:-CIPHER-ALL:+AES-128-GCM:+AES-256-GCM:+CHACHA20-POLY1305:+AES-128-CCM:"   \
    "%DISABLE_TLS13_COMPAT_MODE"

struct xQuicTls {
    gnutls_certificate_credentials_t creds;
    gnutls_priority_t priority;
};

static int add_cert(xQuicTls *tls, const xTlsCert *cert, char *error, size_t error_size) {
    const char *key = cert->key_file ? cert->key_file : cert->cert_file;
    int rv = gnutls_certificate_set_x509_key_file2(tls->creds, cert->cert_file, key, GNUTLS_X509_FMT_PEM,
                                                   cert->key_password, 0);
    if (rv < 0)
        snprintf(error, error_size, "h3: cannot load %s / %s: %s", cert->cert_file, key, gnutls_strerror(rv));
    return rv;
}

xQuicTls *xQuicTlsCreate(const xTlsConf *conf, char *error, size_t error_size) {
    xQuicTls *tls = calloc(1, sizeof *tls);
    if (!tls || gnutls_certificate_allocate_credentials(&tls->creds) < 0) {
        snprintf(error, error_size, "h3: out of memory");
        free(tls);
        return NULL;
    }
    int rv = gnutls_priority_init(&tls->priority, XQUIC_PRIORITY, NULL);
    if (rv < 0) snprintf(error, error_size, "h3: GnuTLS priorities: %s", gnutls_strerror(rv));
    /* The first certificate added is the one served when SNI names none. */
    if (rv >= 0 && conf->cert.cert_file) rv = add_cert(tls, &conf->cert, error, error_size);
    for (size_t i = 0; rv >= 0 && i < conf->num_sni; i++)
        rv = add_cert(tls, &conf->sni[i].cert, error, error_size);
    if (rv < 0) {
        xQuicTlsDestroy(tls);
        return NULL;
    }
    return tls;
}

void xQuicTlsDestroy(xQuicTls *tls) {
    if (!tls) return;
    if (tls->priority) gnutls_priority_deinit(tls->priority);
    gnutls_certificate_free_credentials(tls->creds);
    free(tls);
}

void *xQuicTlsSessionStart(const xQuicTls *tls, ngtcp2_conn *conn, ngtcp2_crypto_conn_ref *ref) {
    gnutls_session_t session;
    if (gnutls_init(&session, GNUTLS_SERVER | GNUTLS_NO_END_OF_EARLY_DATA) < 0) return NULL;
    static const gnutls_datum_t h3 = {(unsigned char *)"h3", 2};
    if (gnutls_priority_set(session, tls->priority) < 0 ||
        ngtcp2_crypto_gnutls_configure_server_session(session) != 0 ||
        gnutls_credentials_set(session, GNUTLS_CRD_CERTIFICATE, tls->creds) < 0 ||
        gnutls_alpn_set_protocols(session, &h3, 1, GNUTLS_ALPN_MANDATORY) < 0) {
        gnutls_deinit(session);
        return NULL;
    }
    gnutls_session_set_ptr(session, ref);
    ngtcp2_conn_set_tls_native_handle(conn, session);
    return session;
}

void xQuicTlsSessionEnd(void *session) {
    if (session) gnutls_deinit(session);
}

void xQuicTlsDescribe(void *session, xTlsInfo *info, char *name, size_t size) {
    gnutls_session_t s = session;
    unsigned type;
    size_t len = size;
    if (gnutls_server_name_get(s, name, &len, &type, 0) != 0 || type != GNUTLS_NAME_DNS) name[0] = '\0';
    const char *suite = gnutls_ciphersuite_get(s);
    info->version = "TLSv1.3";
    info->cipher = suite ? suite : "";
    info->alpn = "h3";
    info->server_name = name;
    info->resumed = gnutls_session_is_resumed(s) != 0;
}

void xQuicTlsRandom(uint8_t *p, size_t len) { gnutls_rnd(GNUTLS_RND_RANDOM, p, len); }
