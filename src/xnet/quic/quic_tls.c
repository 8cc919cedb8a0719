/* quic_tls.c — GnuTLS for QUIC (quic_tls.h): the one file that includes it. */
#include "xnet/quic/quic_tls.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>

/* TLS 1.3 only (RFC 9001 §4.2), its AEAD suites, and no middlebox
 * compatibility records, which QUIC forbids (RFC 9001 §8.4). */
#define XQUIC_PRIORITY                                                                                       \
    "NORMAL:-VERS-ALL:+VERS-TLS1.3:-CIPHER-ALL:+AES-128-GCM:+AES-256-GCM:+CHACHA20-POLY1305:+AES-128-CCM:"   \
    "%DISABLE_TLS13_COMPAT_MODE"

/* One load of the certificate files: shared by the sessions made while it
 * was current, freed when the last of them ends after a reload replaced it. */
typedef struct xQuicCreds {
    gnutls_certificate_credentials_t creds;
    unsigned refs; /* under the listener's lock: xQuicTls's own, one per session */
} xQuicCreds;

/* A connection's session and the load it uses. */
typedef struct xQuicSession {
    gnutls_session_t session;
    xQuicCreds *creds;
    xQuicTls *tls;
} xQuicSession;

struct xQuicTls {
    pthread_mutex_t lock; /* workers start sessions while a reload may swap creds */
    xQuicCreds *creds;
    gnutls_priority_t priority;
    xTlsCert *certs; /* our copies of the files' names: the default first, then SNI's */
    size_t ncerts;
    xTlsVerify verify_client; /* client certificates, as the TCP side asks for them */
    char *client_ca_file;
};

static int add_cert(gnutls_certificate_credentials_t creds, const xTlsCert *cert, char *error,
                    size_t error_size) {
    const char *key = cert->key_file ? cert->key_file : cert->cert_file;
    int rv = gnutls_certificate_set_x509_key_file2(creds, cert->cert_file, key, GNUTLS_X509_FMT_PEM,
                                                   cert->key_password, 0);
    if (rv < 0)
        snprintf(error, error_size, "h3: cannot load %s / %s: %s", cert->cert_file, key, gnutls_strerror(rv));
    return rv;
}

/* Reads every certificate file; NULL with error filled. */
static xQuicCreds *load(const xQuicTls *tls, char *error, size_t error_size) {
    xQuicCreds *c = calloc(1, sizeof *c);
    if (!c || gnutls_certificate_allocate_credentials(&c->creds) < 0) {
        snprintf(error, error_size, "h3: out of memory");
        free(c);
        return NULL;
    }
    c->refs = 1;
    /* The first certificate added is the one served when SNI names none;
     * GnuTLS picks the others by the names they carry. */
    int rv = 0;
    for (size_t i = 0; rv >= 0 && i < tls->ncerts; i++)
        rv = add_cert(c->creds, &tls->certs[i], error, error_size);
    if (rv >= 0 && tls->verify_client != XTLS_VERIFY_NONE) {
        rv = tls->client_ca_file
                 ? gnutls_certificate_set_x509_trust_file(c->creds, tls->client_ca_file, GNUTLS_X509_FMT_PEM)
                 : -1;
        if (rv <= 0) {
            snprintf(error, error_size, "h3: client CA file %s holds no usable certificate",
                     tls->client_ca_file ? tls->client_ca_file : "(none)");
            rv = -1;
        }
    }
    if (rv < 0) {
        gnutls_certificate_free_credentials(c->creds);
        free(c);
        return NULL;
    }
    return c;
}

static void creds_release(xQuicTls *tls, xQuicCreds *c) {
    pthread_mutex_lock(&tls->lock);
    bool last = --c->refs == 0;
    pthread_mutex_unlock(&tls->lock);
    if (!last) return;
    gnutls_certificate_free_credentials(c->creds);
    free(c);
}

static char *copy(const char *s, bool *ok) {
    if (!s) return NULL;
    char *c = strdup(s);
    *ok &= c != NULL;
    return c;
}

static bool copy_cert(xTlsCert *to, const xTlsCert *from) {
    bool ok = true;
    *to = (xTlsCert){copy(from->cert_file, &ok), copy(from->key_file, &ok), copy(from->key_password, &ok)};
    return ok;
}

xQuicTls *xQuicTlsCreate(const xTlsConf *conf, char *error, size_t error_size) {
    xQuicTls *tls = calloc(1, sizeof *tls);
    if (!tls) {
        snprintf(error, error_size, "h3: out of memory");
        return NULL;
    }
    pthread_mutex_init(&tls->lock, NULL);
    tls->certs = calloc(conf->num_sni + 1, sizeof *tls->certs);
    bool ok = tls->certs && conf->cert.cert_file;
    if (ok) ok = copy_cert(&tls->certs[tls->ncerts++], &conf->cert);
    for (size_t i = 0; ok && i < conf->num_sni; i++)
        ok = copy_cert(&tls->certs[tls->ncerts++], &conf->sni[i].cert);
    tls->verify_client = conf->verify_client;
    tls->client_ca_file = copy(conf->client_ca_file, &ok);
    if (!ok) snprintf(error, error_size, "h3: out of memory, or no certificate");
    int rv = ok ? gnutls_priority_init(&tls->priority, XQUIC_PRIORITY, NULL) : -1;
    if (ok && rv < 0) snprintf(error, error_size, "h3: GnuTLS priorities: %s", gnutls_strerror(rv));
    if (rv < 0 || !(tls->creds = load(tls, error, error_size))) {
        xQuicTlsDestroy(tls);
        return NULL;
    }
    return tls;
}

xErrno xQuicTlsReload(xQuicTls *tls, char *error, size_t error_size) {
    xQuicCreds *fresh = load(tls, error, error_size);
    if (!fresh) return XERR_TLS;
    pthread_mutex_lock(&tls->lock);
    xQuicCreds *old = tls->creds;
    tls->creds = fresh;
    pthread_mutex_unlock(&tls->lock);
    creds_release(tls, old); /* sessions under way keep theirs */
    return XOK;
}

void xQuicTlsDestroy(xQuicTls *tls) {
    if (!tls) return;
    if (tls->priority) gnutls_priority_deinit(tls->priority);
    if (tls->creds) creds_release(tls, tls->creds);
    for (size_t i = 0; i < tls->ncerts; i++) {
        free((char *)tls->certs[i].cert_file);
        free((char *)tls->certs[i].key_file);
        free((char *)tls->certs[i].key_password);
    }
    free(tls->certs);
    free(tls->client_ca_file);
    pthread_mutex_destroy(&tls->lock);
    free(tls);
}

void *xQuicTlsSessionStart(xQuicTls *tls, ngtcp2_conn *conn, ngtcp2_crypto_conn_ref *ref) {
    xQuicSession *qs = calloc(1, sizeof *qs);
    if (!qs) return NULL;
    if (gnutls_init(&qs->session, GNUTLS_SERVER | GNUTLS_NO_END_OF_EARLY_DATA) < 0) {
        free(qs);
        return NULL;
    }
    pthread_mutex_lock(&tls->lock);
    qs->creds = tls->creds;
    qs->creds->refs++;
    pthread_mutex_unlock(&tls->lock);
    qs->tls = tls;
    static const gnutls_datum_t h3 = {(unsigned char *)"h3", 2};
    if (gnutls_priority_set(qs->session, tls->priority) < 0 ||
        ngtcp2_crypto_gnutls_configure_server_session(qs->session) != 0 ||
        gnutls_credentials_set(qs->session, GNUTLS_CRD_CERTIFICATE, qs->creds->creds) < 0 ||
        gnutls_alpn_set_protocols(qs->session, &h3, 1, GNUTLS_ALPN_MANDATORY) < 0) {
        xQuicTlsSessionEnd(qs);
        return NULL;
    }
    if (tls->verify_client != XTLS_VERIFY_NONE) {
        /* A certificate sent must verify against the client CAs; REQUIRED
         * fails the handshake of a client that sends none. */
        gnutls_certificate_server_set_request(qs->session, tls->verify_client == XTLS_VERIFY_REQUIRED
                                                               ? GNUTLS_CERT_REQUIRE
                                                               : GNUTLS_CERT_REQUEST);
        gnutls_session_set_verify_cert(qs->session, NULL, 0);
    }
    gnutls_session_set_ptr(qs->session, ref);
    ngtcp2_conn_set_tls_native_handle(conn, qs->session);
    return qs;
}

void xQuicTlsSessionEnd(void *session) {
    xQuicSession *qs = session;
    if (!qs) return;
    gnutls_deinit(qs->session);
    creds_release(qs->tls, qs->creds);
    free(qs);
}

void xQuicTlsDescribe(void *session, xTlsInfo *info, char *name, size_t size) {
    *info = (xTlsInfo){.struct_size = sizeof *info}; /* no kTLS, no record layer of ours */
    gnutls_session_t s = ((xQuicSession *)session)->session;
    unsigned type;
    size_t len = size;
    if (gnutls_server_name_get(s, name, &len, &type, 0) != 0 || type != GNUTLS_NAME_DNS) name[0] = '\0';
    const char *suite = gnutls_ciphersuite_get(s);
    info->version = "TLSv1.3";
    info->cipher = suite ? suite : "";
    info->alpn = "h3";
    info->server_name = name;
    info->resumed = gnutls_session_is_resumed(s) != 0;
    unsigned count = 0, status = 1;
    const gnutls_datum_t *chain = gnutls_certificate_get_peers(s, &count);
    info->client_verified = count && gnutls_certificate_verify_peers2(s, &status) == 0 && status == 0;
    gnutls_x509_crt_t leaf;
    if (count && gnutls_x509_crt_init(&leaf) == 0) {
        size_t subject_len = sizeof info->client_subject;
        if (gnutls_x509_crt_import(leaf, &chain[0], GNUTLS_X509_FMT_DER) != 0 ||
            gnutls_x509_crt_get_dn(leaf, info->client_subject, &subject_len) != 0)
            info->client_subject[0] = '\0';
        gnutls_x509_crt_deinit(leaf);
    }
}

void xQuicTlsRandom(uint8_t *p, size_t len) { gnutls_rnd(GNUTLS_RND_RANDOM, p, len); }
