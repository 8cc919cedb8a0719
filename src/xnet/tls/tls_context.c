/* tls_context.c — a TLS listener's settings and OpenSSL contexts: checked
 * once with names in the messages, built from the files, swapped whole on
 * reload; session-ticket keys, SNI and ALPN selection.
 *
 * The caller names the protocols ALPN may offer; which one a connection
 * speaks is the caller's decision (xnet/tls knows no HTTP). */
#include "xnet/tls/tls_conn.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/x509.h>

#include <xbase/log.h>

#include "xbase/mem/sized.h"

/* TLS 1.2 without a configured list: forward secrecy and AEAD only, AES-128
 * first for the reasons given for TLS 1.3 below ("ECDHE+AESGCM" alone would
 * put AES-256 first). */
#define XTLS_DEFAULT_CIPHERS "ECDHE+AES128+AESGCM:ECDHE+AES256+AESGCM:ECDHE+CHACHA20"
/* AES-128 first, as Go and BoringSSL order them: with AES-NI it encrypts as
 * fast as AES-256 or faster, and its SHA-256 key schedule makes a handshake
 * cheaper than SHA-384's (OpenSSL's own order puts AES-256 first). */
#define XTLS_DEFAULT_SUITES "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"

static void fail(char *err, size_t err_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* err = "tls: " + what + ": " + OpenSSL's reason, if it gave one. */
static void fail(char *err, size_t err_len, const char *fmt, ...) {
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    unsigned long e = ERR_peek_last_error();
    const char *reason = e ? ERR_reason_error_string(e) : NULL;
    if (reason)
        snprintf(err, err_len, "tls: %s: %s", what, reason);
    else
        snprintf(err, err_len, "tls: %s", what);
    ERR_clear_error();
}

static bool readable_file(const char *what, const char *path, char *err, size_t err_len) {
    if (!path || !*path) {
        snprintf(err, err_len, "tls: no %s file given", what);
        return false;
    }
    if (access(path, R_OK) != 0) {
        snprintf(err, err_len, "tls: %s file %s: %s", what, path, strerror(errno));
        return false;
    }
    return true;
}

/* Whether a (PEM, so text) file holds word in its first few KiB. */
static bool file_mentions(const char *path, const char *word) {
    char text[4096];
    FILE *f = fopen(path, "r");
    if (!f) return false;
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    return strstr(text, word) != NULL;
}

/* Never lets OpenSSL prompt on a terminal: no password, no key. */
static int password_cb(char *buf, int size, int rwflag, void *arg) {
    const char *password = arg;
    if (!password) return 0;
    size_t len = strlen(password);
    if (len > (size_t)size) return 0;
    memcpy(buf, password, len);
    return (int)len;
}

static bool load_cert(SSL_CTX *ctx, const xTlsCert *cert, char *err, size_t err_len) {
    const char *key_file = cert->key_file ? cert->key_file : cert->cert_file;
    if (!readable_file("certificate", cert->cert_file, err, err_len) ||
        !readable_file("key", key_file, err, err_len))
        return false;
    if (SSL_CTX_use_certificate_chain_file(ctx, cert->cert_file) != 1) {
        fail(err, err_len, "certificate %s: no usable PEM certificate in it", cert->cert_file);
        return false;
    }
    SSL_CTX_set_default_passwd_cb(ctx, password_cb);
    SSL_CTX_set_default_passwd_cb_userdata(ctx, (void *)cert->key_password);
    bool loaded = SSL_CTX_use_PrivateKey_file(ctx, key_file, SSL_FILETYPE_PEM) == 1;
    SSL_CTX_set_default_passwd_cb_userdata(ctx, NULL);
    if (!loaded) {
        const char *why = cert->key_password                     ? "cannot decrypt it (wrong password?)"
                          : file_mentions(key_file, "ENCRYPTED") ? "it is encrypted and no password was given"
                                                                 : "no usable PEM private key in it";
        fail(err, err_len, "key %s: %s", key_file, why);
        return false;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        fail(err, err_len, "key %s does not match certificate %s", key_file, cert->cert_file);
        return false;
    }
    return true;
}

/* ALPN (RFC 7301): the server's order decides; no protocol in common is a
 * fatal no_application_protocol alert. */
static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *out_len, const unsigned char *in,
                       unsigned in_len, void *arg) {
    xTlsServer *srv = arg;
    unsigned char *chosen;
    if (SSL_select_next_proto(&chosen, out_len, srv->alpn, (unsigned)srv->alpn_len, in, in_len) !=
        OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_ALERT_FATAL;
    *out = chosen;
    return SSL_TLSEXT_ERR_OK;
}

/* "*.example.com" stands for exactly one label. */
static bool name_matches(const char *pattern, const char *name) {
    if (strncmp(pattern, "*.", 2) != 0) return strcasecmp(pattern, name) == 0;
    const char *dot = strchr(name, '.');
    return dot && dot != name && strcasecmp(dot + 1, pattern + 2) == 0;
}

xTlsServer *xTlsServerOf(SSL *ssl) {
    xConn *conn = SSL_get_app_data(ssl);
    return ((xTlsConn *)conn->transport_state)->srv;
}

/* The kernel takes a TLS 1.3 connection's sending only when asked to:
 * OpenSSL 3.0 cannot give it new keys, so a KeyUpdate asking for ours would
 * leave the kernel sealing under the old ones (the client sees
 * bad_record_mac). Called once the version is chosen, before any key is. */
static void choose_record_path(SSL *ssl, const xTlsServer *srv) {
#ifdef SSL_OP_ENABLE_KTLS
    if (SSL_version(ssl) == TLS1_3_VERSION && !srv->conf.ktls_tls13)
        SSL_clear_options(ssl, SSL_OP_ENABLE_KTLS);
#else
    (void)ssl, (void)srv;
#endif
}

/* OpenSSL calls this for every ClientHello, with or without a name. */
static int sni_select(SSL *ssl, int *alert, void *arg) {
    const char *name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
    xConn *conn = SSL_get_app_data(ssl);
    xTlsConn *t = conn->transport_state;
    int verdict = SSL_TLSEXT_ERR_NOACK;
    if (name && t->bundle) {
        verdict = SSL_TLSEXT_ERR_OK;
        for (size_t i = 0; i < t->bundle->num_sni; i++) {
            if (name_matches(t->bundle->sni[i].name, name)) {
                SSL_set_SSL_CTX(ssl, t->bundle->sni[i].ctx);
                break;
            }
        }
    }
    choose_record_path(ssl, t->srv);
    return verdict;
}

static void rotate_tickets(xTlsServer *srv, time_t now) {
    if (srv->tickets[0].born && now - srv->tickets[0].born < (time_t)srv->conf.session_lifetime_s) return;
    xTicketKey fresh = {.born = now};
    if (RAND_bytes(fresh.name, sizeof fresh.name) != 1 || RAND_bytes(fresh.aes, sizeof fresh.aes) != 1 ||
        RAND_bytes(fresh.hmac, sizeof fresh.hmac) != 1) {
        ERR_clear_error();
        OPENSSL_cleanse(&fresh, sizeof fresh);
        return; /* keep the old key (if any) rather than issue a weak one */
    }
    srv->tickets[1] = srv->tickets[0];
    srv->tickets[0] = fresh;
    OPENSSL_cleanse(&fresh, sizeof fresh);
}

/* Session tickets under keys of our own, rotated every session lifetime; a
 * ticket under either key resumes. Every resumption is answered with a fresh
 * ticket (return 2): TLS 1.3 clients use a ticket once (RFC 8446 §C.4), and
 * without a new one their next connection would need a full handshake. Only
 * a key that was generated issues or opens tickets (never the zeros of a
 * slot RAND_bytes could not fill); the copy made here is wiped. */
static int ticket_cb(SSL *ssl, unsigned char name[16], unsigned char *iv, EVP_CIPHER_CTX *cipher,
                     EVP_MAC_CTX *mac, int encrypt) {
    xTlsServer *srv = xTlsServerOf(ssl);
    xTicketKey key;
    int status = 0;
    pthread_mutex_lock(&srv->lock);
    rotate_tickets(srv, time(NULL));
    for (int i = 0; i < (encrypt ? 1 : 2) && !status; i++) {
        if (srv->tickets[i].born && (encrypt || memcmp(name, srv->tickets[i].name, 16) == 0)) {
            key = srv->tickets[i];
            status = encrypt ? 1 : 2;
        }
    }
    pthread_mutex_unlock(&srv->lock);
    if (!status) return 0; /* no key, or an unknown or retired one: no ticket, or a full handshake */
    bool ok = !encrypt || RAND_bytes(iv, 16) == 1;
    if (ok && encrypt) memcpy(name, key.name, 16);
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_KEY, key.hmac, sizeof key.hmac),
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, "SHA256", 0),
        OSSL_PARAM_construct_end(),
    };
    ok = ok && EVP_MAC_CTX_set_params(mac, params) == 1 &&
         (encrypt ? EVP_EncryptInit_ex(cipher, EVP_aes_256_cbc(), NULL, key.aes, iv)
                  : EVP_DecryptInit_ex(cipher, EVP_aes_256_cbc(), NULL, key.aes, iv)) == 1;
    OPENSSL_cleanse(&key, sizeof key);
    if (!ok) ERR_clear_error(); /* OpenSSL ends this handshake; the next on the thread starts clean */
    return ok ? status : -1;
}

static bool set_client_verification(SSL_CTX *ctx, const xTlsConf *conf, char *err, size_t err_len) {
    if (conf->verify_client == XTLS_VERIFY_NONE) return true;
    if (!readable_file("client CA", conf->client_ca_file, err, err_len)) return false;
    STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(conf->client_ca_file);
    if (!names || SSL_CTX_load_verify_locations(ctx, conf->client_ca_file, NULL) != 1) {
        if (names) sk_X509_NAME_pop_free(names, X509_NAME_free);
        fail(err, err_len, "client CA file %s holds no usable certificate", conf->client_ca_file);
        return false;
    }
    SSL_CTX_set_client_CA_list(ctx, names);
    int mode =
        SSL_VERIFY_PEER | (conf->verify_client == XTLS_VERIFY_REQUIRED ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0);
    SSL_CTX_set_verify(ctx, mode, NULL);
    return true;
}

/* Whether the kernel has the "tls" upper-layer protocol, asked once: setting
 * it on an unconnected TCP socket fails with ENOENT when the kernel has no
 * such module (after trying to load it), and with ENOTCONN when it has one.
 * Without it OpenSSL would try, and fail, twice per handshake. */
bool xTlsKernelHasTls(void) {
    static atomic_int known; /* 0: not asked yet, 1: yes, 2: no */
    int answer = atomic_load(&known);
    if (answer) return answer == 1;
#if defined(OPENSSL_NO_KTLS) || !defined(TCP_ULP)
    answer = 2;
#else
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    answer =
        fd >= 0 && setsockopt(fd, IPPROTO_TCP, TCP_ULP, "tls", sizeof "tls") != 0 && errno == ENOENT ? 2 : 1;
    if (fd < 0)
        answer = 2;
    else
        close(fd);
#endif
    atomic_store(&known, answer);
    return answer == 1;
}

static SSL_CTX *build_ctx(xTlsServer *srv, const xTlsCert *cert, char *err, size_t err_len) {
    const xTlsConf *conf = &srv->conf;
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx) {
        fail(err, err_len, "cannot create a context");
        return NULL;
    }
    uint64_t options = SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_NO_COMPRESSION |
                       SSL_OP_IGNORE_UNEXPECTED_EOF;
    if (!conf->session_tickets) options |= SSL_OP_NO_TICKET;
#ifdef SSL_OP_ENABLE_KTLS
    if (conf->ktls && xTlsKernelHasTls()) options |= SSL_OP_ENABLE_KTLS;
#endif
    SSL_CTX_set_options(ctx, options);
    /* Buffers go back while a connection idles; writes may end mid-queue
     * and resume from a queue that has moved (our output queue reallocates). */
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS | SSL_MODE_ENABLE_PARTIAL_WRITE |
                              SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    /* One read takes whatever records have arrived, unless our record layer
     * takes over after the handshake: OpenSSL must then not have read past
     * the client's Finished, so that what follows is still in the socket. */
    SSL_CTX_set_read_ahead(ctx, conf->xkit_records ? 0 : 1);
    if (conf->xkit_records) SSL_CTX_set_keylog_callback(ctx, xTlsOnKeylog);
    bool ok =
        SSL_CTX_set_min_proto_version(ctx, conf->min_version) == 1 &&
        SSL_CTX_set_max_proto_version(ctx, conf->max_version) == 1 &&
        SSL_CTX_set_ciphersuites(ctx, conf->ciphersuites ? conf->ciphersuites : XTLS_DEFAULT_SUITES) == 1 &&
        SSL_CTX_set_cipher_list(ctx, conf->ciphers ? conf->ciphers : XTLS_DEFAULT_CIPHERS) == 1 &&
        (!conf->groups || SSL_CTX_set1_groups_list(ctx, conf->groups) == 1);
    if (!ok) {
        fail(err, err_len, "protocol versions, ciphers or groups refused");
        SSL_CTX_free(ctx);
        return NULL;
    }
    if (!load_cert(ctx, cert, err, err_len) || !set_client_verification(ctx, conf, err, err_len)) {
        SSL_CTX_free(ctx);
        return NULL;
    }
    SSL_CTX_set_alpn_select_cb(ctx, alpn_select, srv);
    SSL_CTX_set_tlsext_servername_callback(ctx, sni_select);
    SSL_CTX_set_session_id_context(ctx, (const unsigned char *)"xkit", 4);
    SSL_CTX_set_timeout(ctx, (long)conf->session_lifetime_s);
    SSL_CTX_set_session_cache_mode(ctx,
                                   conf->session_cache_size ? SSL_SESS_CACHE_SERVER : SSL_SESS_CACHE_OFF);
    if (conf->session_cache_size) SSL_CTX_sess_set_cache_size(ctx, conf->session_cache_size);
    /* TLS 1.3 resumes only through tickets (stateful ones when our keys are
     * off): one per handshake is enough for a client that reconnects. */
    SSL_CTX_set_num_tickets(ctx, conf->session_tickets || conf->session_cache_size ? 1 : 0);
    if (conf->session_tickets) SSL_CTX_set_tlsext_ticket_key_evp_cb(ctx, ticket_cb);
    return ctx;
}

void xTlsBundleRelease(xTlsBundle *bundle) {
    if (!bundle || atomic_fetch_sub(&bundle->refs, 1) != 1) return;
    SSL_CTX_free(bundle->main);
    for (size_t i = 0; i < bundle->num_sni; i++) {
        free(bundle->sni[i].name);
        SSL_CTX_free(bundle->sni[i].ctx);
    }
    free(bundle->sni);
    free(bundle);
}

static xTlsBundle *bundle_build(xTlsServer *srv, char *err, size_t err_len) {
    xTlsBundle *bundle = calloc(1, sizeof *bundle);
    if (bundle) bundle->sni = calloc(srv->conf.num_sni ? srv->conf.num_sni : 1, sizeof *bundle->sni);
    if (!bundle || !bundle->sni) {
        free(bundle);
        snprintf(err, err_len, "tls: out of memory");
        return NULL;
    }
    atomic_init(&bundle->refs, 1);
    bundle->main = build_ctx(srv, &srv->conf.cert, err, err_len);
    bool ok = bundle->main != NULL;
    for (size_t i = 0; ok && i < srv->conf.num_sni; i++) {
        xTlsSniCtx *sni = &bundle->sni[bundle->num_sni];
        sni->ctx = build_ctx(srv, &srv->sni[i].cert, err, err_len);
        sni->name = sni->ctx ? strdup(srv->sni[i].name) : NULL;
        if (sni->ctx && !sni->name) SSL_CTX_free(sni->ctx);
        ok = sni->name != NULL;
        if (ok)
            bundle->num_sni++;
        else if (sni->ctx)
            snprintf(err, err_len, "tls: out of memory");
    }
    if (!ok) {
        xTlsBundleRelease(bundle);
        return NULL;
    }
    return bundle;
}

/* ---- Settings checked once, with names in the messages ---- */

/* Each name of a ':'-separated list, tried alone, so that a typo is named
 * rather than silently dropped (OpenSSL ignores what it does not know in a
 * TLS 1.2 cipher list). */
static bool check_names(SSL_CTX *probe, const char *what, const char *list,
                        int (*set)(SSL_CTX *, const char *), char *err, size_t err_len) {
    if (!list) return true;
    if (!*list) {
        snprintf(err, err_len, "tls: empty %s list", what);
        return false;
    }
    char name[128];
    for (const char *p = list; *p;) {
        size_t n = strcspn(p, ":, ");
        bool modifier = n > 0 && strchr("!-+@", *p); /* "!aNULL", "@SECLEVEL=2": not a name */
        if (n > 0 && !modifier) {
            if (n >= sizeof name) n = sizeof name - 1;
            memcpy(name, p, n);
            name[n] = '\0';
            if (set(probe, name) != 1) {
                ERR_clear_error();
                snprintf(err, err_len, "tls: unknown %s '%s'", what, name);
                return false;
            }
        }
        p += strcspn(p, ":, ");
        p += strspn(p, ":, ");
    }
    return true;
}

static int set_groups(SSL_CTX *ctx, const char *list) { return (int)SSL_CTX_set1_groups_list(ctx, list); }

static bool check_conf(xTlsServer *srv, char *err, size_t err_len) {
    const xTlsConf *conf = &srv->conf;
    bool versions = (conf->min_version == XTLS_VERSION_1_2 || conf->min_version == XTLS_VERSION_1_3) &&
                    (conf->max_version == XTLS_VERSION_1_2 || conf->max_version == XTLS_VERSION_1_3) &&
                    conf->min_version <= conf->max_version;
    if (!versions) {
        snprintf(err, err_len, "tls: protocol versions must be TLS 1.2 or 1.3, minimum first");
        return false;
    }
    if (conf->verify_client > XTLS_VERIFY_REQUIRED) {
        snprintf(err, err_len, "tls: unknown client verification mode");
        return false;
    }
    for (size_t i = 0; i < conf->num_sni; i++) {
        if (!srv->sni[i].name || !*srv->sni[i].name) {
            snprintf(err, err_len, "tls: SNI certificate %zu has no name", i + 1);
            return false;
        }
    }
    SSL_CTX *probe = SSL_CTX_new(TLS_server_method());
    if (!probe) {
        fail(err, err_len, "cannot create a context");
        return false;
    }
    bool ok = check_names(probe, "TLS 1.3 cipher suite", conf->ciphersuites, SSL_CTX_set_ciphersuites, err,
                          err_len) &&
              check_names(probe, "TLS 1.2 cipher", conf->ciphers, SSL_CTX_set_cipher_list, err, err_len) &&
              check_names(probe, "key exchange group", conf->groups, set_groups, err, err_len);
    SSL_CTX_free(probe);
    return ok;
}

/* ---- The server's lifetime ---- */

void xTlsConfInitSized(xTlsConf *conf, size_t size) {
    xTlsConf defaults = {
        .min_version = XTLS_VERSION_1_2,
        .max_version = XTLS_VERSION_1_3,
        .session_tickets = true,
        .session_lifetime_s = 3600,
        .session_cache_size = 20480,
        .verify_client = XTLS_VERIFY_NONE,
        .handshake_timeout_ms = 10000,
        .ktls = true,
        .xkit_records = true,
        .http3_alt_svc = true,
        .http3_retry_flood = 256,
    };
    xSizedInit(conf, size, &defaults, sizeof defaults);
}

static char *copy(const char *s, bool *ok) {
    if (!s) return NULL;
    char *c = strdup(s);
    if (!c) *ok = false;
    return c;
}

static void free_cert(xTlsCert *cert) {
    free((char *)cert->cert_file);
    free((char *)cert->key_file);
    free((char *)cert->key_password);
}

static void free_conf(xTlsServer *srv) {
    xTlsConf *conf = &srv->conf;
    free_cert(&conf->cert);
    for (size_t i = 0; srv->sni && i < conf->num_sni; i++) {
        free((char *)srv->sni[i].name);
        free_cert(&srv->sni[i].cert);
    }
    free(srv->sni);
    free((char *)conf->ciphersuites);
    free((char *)conf->ciphers);
    free((char *)conf->groups);
    free((char *)conf->client_ca_file);
}

static bool copy_cert(xTlsCert *dst, const xTlsCert *src) {
    bool ok = true;
    dst->cert_file = copy(src->cert_file, &ok);
    dst->key_file = copy(src->key_file, &ok);
    dst->key_password = copy(src->key_password, &ok);
    return ok;
}

static bool copy_conf(xTlsServer *srv, const xTlsConf *src) {
    xTlsConf *conf = &srv->conf;
    *conf = *src;
    bool ok = true;
    conf->alpn = NULL; /* the caller's listener plan chose the names (xTlsListen) */
    conf->ciphersuites = copy(src->ciphersuites, &ok);
    conf->ciphers = copy(src->ciphers, &ok);
    conf->groups = copy(src->groups, &ok);
    conf->client_ca_file = copy(src->client_ca_file, &ok);
    ok &= copy_cert(&conf->cert, &src->cert);
    srv->sni = calloc(src->num_sni ? src->num_sni : 1, sizeof *srv->sni);
    conf->sni = srv->sni;
    if (!srv->sni) {
        conf->num_sni = 0;
        return false;
    }
    for (size_t i = 0; i < src->num_sni; i++) {
        srv->sni[i].name = copy(src->sni[i].name, &ok);
        ok &= copy_cert(&srv->sni[i].cert, &src->sni[i].cert);
    }
    return ok;
}

/* The caller's protocol names → ALPN's wire format ("\x02h2\x08http/1.1"). */
static bool set_alpn(xTlsServer *srv, const char *const *names, size_t count, char *err, size_t err_len) {
    if (count > XTLS_ALPN_NAMES) count = XTLS_ALPN_NAMES;
    for (size_t i = 0; i < count; i++) {
        size_t n = strlen(names[i]);
        if (n == 0 || n > 255 || srv->alpn_len + 1 + n > sizeof srv->alpn) {
            snprintf(err, err_len, "tls: ALPN protocol '%s' does not fit", names[i]);
            return false;
        }
        if (!(srv->alpn_names[i] = strdup(names[i]))) {
            snprintf(err, err_len, "tls: out of memory");
            return false;
        }
        srv->alpn[srv->alpn_len++] = (unsigned char)n;
        memcpy(srv->alpn + srv->alpn_len, names[i], n);
        srv->alpn_len += n;
        srv->num_alpn = i + 1;
    }
    return true;
}

xTlsServer *xTlsServerCreate(const xTlsConf *conf, const xTlsListen *listen, char *err, size_t err_len) {
    if (!listen->on_established) {
        snprintf(err, err_len, "tls: the listener has no on_established callback");
        return NULL;
    }
    if (conf->num_sni && !conf->sni) {
        snprintf(err, err_len, "tls: num_sni is set but sni is NULL");
        return NULL;
    }
    xTlsServer *srv = calloc(1, sizeof *srv);
    if (!srv) {
        snprintf(err, err_len, "tls: out of memory");
        return NULL;
    }
    pthread_mutex_init(&srv->lock, NULL);
    srv->listen = *listen;
    bool ok = copy_conf(srv, conf);
    if (!ok) snprintf(err, err_len, "tls: out of memory");
    ok = ok && set_alpn(srv, listen->alpn, listen->num_alpn, err, err_len) && check_conf(srv, err, err_len);
    if (ok && conf->session_tickets) rotate_tickets(srv, time(NULL));
    if (ok) srv->bundle = bundle_build(srv, err, err_len);
    if (!srv->bundle) {
        xTlsServerDestroy(srv);
        return NULL;
    }
    return srv;
}

xErrno xTlsServerReload(xTlsServer *srv, char *err, size_t err_len) {
    xTlsBundle *fresh = bundle_build(srv, err, err_len);
    if (!fresh) return XERR_TLS;
    pthread_mutex_lock(&srv->lock);
    xTlsBundle *old = srv->bundle;
    srv->bundle = fresh;
    pthread_mutex_unlock(&srv->lock);
    xTlsBundleRelease(old);
    return XOK;
}

void xTlsServerDestroy(xTlsServer *srv) {
    if (!srv) return;
    xTlsBundleRelease(srv->bundle);
    free_conf(srv);
    for (size_t i = 0; i < srv->num_alpn; i++) free(srv->alpn_names[i]);
    pthread_mutex_destroy(&srv->lock);
    OPENSSL_cleanse(srv->tickets, sizeof srv->tickets);
    free(srv);
}

void xTlsLogKernelSupport(const xTlsConf *conf) {
    static atomic_bool logged;
    if (atomic_exchange(&logged, true)) return;
#ifdef OPENSSL_NO_KTLS
    XLOG_INFO("kTLS: this OpenSSL was built without it; records are encrypted in user space");
#else
    if (!conf->ktls)
        XLOG_INFO("kTLS: off by configuration; records are encrypted in user space");
    else if (xTlsKernelHasTls())
        XLOG_INFO("kTLS: available; %s records move to the kernel after each handshake",
                  conf->ktls_tls13 ? "TLS 1.2 and 1.3" : "TLS 1.2 (TLS 1.3: xKit's)");
    else
        XLOG_INFO("kTLS: not available (this kernel has no tls module); records are encrypted in user space");
#endif
}
