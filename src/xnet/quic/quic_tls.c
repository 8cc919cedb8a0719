/* quic_tls.c — GnuTLS for QUIC (quic_tls.h): the one file that includes it. */
#include "xnet/quic/quic_tls.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>

/* TLS 1.3 only (RFC 9001 §4.2), its AEAD suites, and no middlebox
 * compatibility records, which QUIC forbids (RFC 9001 §8.4). */
#define XQUIC_PRIORITY                                                                                       \
    "NORMAL:-VERS-ALL:+VERS-TLS1.3:-CIPHER-ALL:+AES-128-GCM:+AES-256-GCM:+CHACHA20-POLY1305:+AES-128-CCM:"   \
    "%DISABLE_TLS13_COMPAT_MODE"

/* ClientHellos that carried early data lately (GnuTLS's anti-replay
 * database, RFC 8446 §8.2): one seen twice within GnuTLS's window (10 s)
 * is a replay and has its early data refused. Shared by the listener's
 * workers, as a replay may come from anywhere. A full neighbourhood counts
 * as seen: early data refused is only a round trip lost. */
#define XQUIC_REPLAY_SLOTS 4096
#define XQUIC_REPLAY_PROBES 16
#define XQUIC_REPLAY_KEY_MAX 80 /* GnuTLS's: 12 bytes of window start and a hash of up to 64 */

typedef struct xQuicReplaySlot {
    time_t expires; /* 0: empty */
    uint8_t len;
    uint8_t key[XQUIC_REPLAY_KEY_MAX];
} xQuicReplaySlot;

typedef struct xQuicReplayCache {
    pthread_mutex_t lock;
    xQuicReplaySlot slots[XQUIC_REPLAY_SLOTS];
} xQuicReplayCache;

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
    /* 0-RTT (http3_early_data): session tickets sealed with ticket_key, early
     * data under GnuTLS's anti-replay with our database. */
    bool early_data;
    uint32_t ticket_lifetime_s;
    gnutls_datum_t ticket_key;
    gnutls_anti_replay_t anti_replay;
    xQuicReplayCache *replays;
};

/* GnuTLS's anti-replay asks whether key (a ClientHello's) was seen within
 * the window, and records it until exp_time. */
static int replay_add(void *arg, time_t exp_time, const gnutls_datum_t *key, const gnutls_datum_t *entry) {
    xQuicReplayCache *cache = arg;
    if (key->size > XQUIC_REPLAY_KEY_MAX) return GNUTLS_E_DB_ENTRY_EXISTS;
    uint64_t h = 1469598103934665603ull; /* FNV-1a: the key ends in a hash already */
    for (unsigned i = 0; i < key->size; i++) h = (h ^ key->data[i]) * 1099511628211ull;
    time_t now = time(NULL);
    int rv = GNUTLS_E_DB_ENTRY_EXISTS;
    pthread_mutex_lock(&cache->lock);
    xQuicReplaySlot *free_slot = NULL;
    for (unsigned i = 0; i < XQUIC_REPLAY_PROBES; i++) {
        xQuicReplaySlot *slot = &cache->slots[(h + i) % XQUIC_REPLAY_SLOTS];
        if (slot->expires < now) {
            if (!free_slot) free_slot = slot;
            continue;
        }
        if (slot->len == key->size && memcmp(slot->key, key->data, key->size) == 0) {
            free_slot = NULL; /* seen: a replay */
            break;
        }
    }
    if (free_slot) {
        free_slot->expires = exp_time;
        free_slot->len = (uint8_t)key->size;
        memcpy(free_slot->key, key->data, key->size);
        rv = 0;
    }
    pthread_mutex_unlock(&cache->lock);
    return rv;
}

/* Ticket keys and the anti-replay state, for a listener that takes 0-RTT. */
static bool early_data_init(xQuicTls *tls) {
    tls->replays = calloc(1, sizeof *tls->replays);
    if (!tls->replays || gnutls_session_ticket_key_generate(&tls->ticket_key) < 0) return false;
    pthread_mutex_init(&tls->replays->lock, NULL);
    if (gnutls_anti_replay_init(&tls->anti_replay) < 0) {
        tls->anti_replay = NULL;
        return false;
    }
    gnutls_anti_replay_set_add_function(tls->anti_replay, replay_add);
    gnutls_anti_replay_set_ptr(tls->anti_replay, tls->replays);
    return true;
}

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
    tls->early_data = conf->http3_early_data;
    tls->ticket_lifetime_s = conf->session_lifetime_s;
    if (!ok) snprintf(error, error_size, "h3: out of memory, or no certificate");
    if (ok && tls->early_data && !early_data_init(tls)) {
        snprintf(error, error_size, "h3: cannot set up 0-RTT");
        ok = false;
    }
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
    if (tls->anti_replay) gnutls_anti_replay_deinit(tls->anti_replay);
    if (tls->ticket_key.data) gnutls_memset(tls->ticket_key.data, 0, tls->ticket_key.size);
    gnutls_free(tls->ticket_key.data);
    if (tls->replays) pthread_mutex_destroy(&tls->replays->lock);
    free(tls->replays);
    pthread_mutex_destroy(&tls->lock);
    free(tls);
}

void *xQuicTlsSessionStart(xQuicTls *tls, ngtcp2_conn *conn, ngtcp2_crypto_conn_ref *ref) {
    xQuicSession *qs = calloc(1, sizeof *qs);
    if (!qs) return NULL;
    /* Tickets (resumption) are issued only with 0-RTT on, below. */
    unsigned flags =
        GNUTLS_SERVER | GNUTLS_NO_END_OF_EARLY_DATA | (tls->early_data ? GNUTLS_ENABLE_EARLY_DATA : 0);
    if (gnutls_init(&qs->session, flags) < 0) {
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
    if (tls->early_data) {
        /* QUIC's tickets say 0xffffffff: the limit is QUIC's flow control (RFC 9001 §4.6.1). */
        if (gnutls_session_ticket_enable_server(qs->session, &tls->ticket_key) < 0 ||
            gnutls_record_set_max_early_data_size(qs->session, 0xffffffffu) < 0) {
            xQuicTlsSessionEnd(qs);
            return NULL;
        }
        gnutls_anti_replay_enable(qs->session, tls->anti_replay);
        gnutls_db_set_cache_expiration(qs->session, (int)tls->ticket_lifetime_s);
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
