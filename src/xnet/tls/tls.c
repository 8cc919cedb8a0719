/* tls.c — TLS through OpenSSL 3: contexts built from an xTlsConf, the
 * handshake in the worker's loop, then a transport that the connection's
 * output queue and the protocols use like a socket.
 *
 * The socket stays OpenSSL's own socket BIO, so OpenSSL can hand records to
 * the kernel (kTLS) where the kernel offers it. A callback on that BIO sees
 * each read's result, which keeps the plain transport's saving: a short read
 * means the socket is drained, so no read is spent just to hear EAGAIN. */
#include "xnet/tls/tls.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
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
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <xbase/log.h>

#include "xnet/tls/tls_records.h"

#define XTLS_RECORD_MAX 16384
#define XTLS_ALPN_MAX 64
/* TLS 1.2 without a configured list: forward secrecy and AEAD only. */
#define XTLS_DEFAULT_CIPHERS "ECDHE+AESGCM:ECDHE+CHACHA20"
/* AES-128 first, as Go and BoringSSL order them: with AES-NI it encrypts as
 * fast as AES-256 or faster, and its SHA-256 key schedule makes a handshake
 * cheaper than SHA-384's (OpenSSL's own order puts AES-256 first). */
#define XTLS_DEFAULT_SUITES "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"

/* ---- Settings and contexts ---- */

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
    atomic_uint refs;  /* the server's, plus one per handshake in progress */
    SSL_CTX *main;     /* the default certificate */
    xTlsSniCtx *sni;
    size_t num_sni;
} xTlsBundle;

struct xTlsServer {
    xTlsConf conf;                    /* strings point at copies owned here */
    xTlsSniCert *sni;                 /* conf.sni, copied */
    unsigned char alpn[XTLS_ALPN_MAX];/* offered protocols, wire format */
    size_t alpn_len;
    bool alpn_http1;                  /* HTTP/1.1 is among them */
    pthread_mutex_t lock;             /* guards bundle and tickets */
    xTlsBundle *bundle;
    xTicketKey tickets[2];            /* [0] encrypts; [1], the one before, still decrypts */
};

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
    if (reason) snprintf(err, err_len, "tls: %s: %s", what, reason);
    else snprintf(err, err_len, "tls: %s", what);
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
        const char *why = cert->key_password ? "cannot decrypt it (wrong password?)"
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

static xTlsServer *server_of(SSL *ssl);

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

static int sni_select(SSL *ssl, int *alert, void *arg);
static void on_keylog(const SSL *ssl, const char *line);

static void rotate_tickets(xTlsServer *srv, time_t now) {
    if (srv->tickets[0].born && now - srv->tickets[0].born < (time_t)srv->conf.session_lifetime_s) return;
    xTicketKey fresh = {.born = now};
    if (RAND_bytes(fresh.name, sizeof fresh.name) != 1 || RAND_bytes(fresh.aes, sizeof fresh.aes) != 1 ||
        RAND_bytes(fresh.hmac, sizeof fresh.hmac) != 1)
        return;  /* keep the old key rather than issue a weak one */
    srv->tickets[1] = srv->tickets[0];
    srv->tickets[0] = fresh;
}

/* Session tickets under keys of our own, rotated every session lifetime; a
 * ticket under either key resumes. Every resumption is answered with a fresh
 * ticket (return 2): TLS 1.3 clients use a ticket once (RFC 8446 §C.4), and
 * without a new one their next connection would need a full handshake. */
static int ticket_cb(SSL *ssl, unsigned char name[16], unsigned char *iv, EVP_CIPHER_CTX *cipher,
                     EVP_MAC_CTX *mac, int encrypt) {
    xTlsServer *srv = server_of(ssl);
    xTicketKey key;
    int status = 0;
    pthread_mutex_lock(&srv->lock);
    rotate_tickets(srv, time(NULL));
    for (int i = 0; i < 2 && !status; i++) {
        if (encrypt || (srv->tickets[i].born && memcmp(name, srv->tickets[i].name, 16) == 0)) {
            key = srv->tickets[i];
            status = encrypt ? 1 : 2;
        }
    }
    pthread_mutex_unlock(&srv->lock);
    if (!status) return 0;  /* unknown or retired key: a full handshake */
    if (encrypt) {
        if (RAND_bytes(iv, 16) != 1) return -1;
        memcpy(name, key.name, 16);
    }
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_KEY, key.hmac, sizeof key.hmac),
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, "SHA256", 0),
        OSSL_PARAM_construct_end(),
    };
    if (!EVP_MAC_CTX_set_params(mac, params)) return -1;
    int ok = encrypt ? EVP_EncryptInit_ex(cipher, EVP_aes_256_cbc(), NULL, key.aes, iv)
                     : EVP_DecryptInit_ex(cipher, EVP_aes_256_cbc(), NULL, key.aes, iv);
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
    int mode = SSL_VERIFY_PEER | (conf->verify_client == XTLS_VERIFY_REQUIRED ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0);
    SSL_CTX_set_verify(ctx, mode, NULL);
    return true;
}

/* Whether the kernel has the "tls" upper-layer protocol, asked once: setting
 * it on an unconnected TCP socket fails with ENOENT when the kernel has no
 * such module (after trying to load it), and with ENOTCONN when it has one.
 * Without it OpenSSL would try, and fail, twice per handshake. */
static bool kernel_has_tls(void) {
    static atomic_int known;  /* 0: not asked yet, 1: yes, 2: no */
    int answer = atomic_load(&known);
    if (answer) return answer == 1;
#if defined(OPENSSL_NO_KTLS) || !defined(TCP_ULP)
    answer = 2;
#else
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    answer = fd >= 0 && setsockopt(fd, IPPROTO_TCP, TCP_ULP, "tls", sizeof "tls") != 0 && errno == ENOENT ? 2 : 1;
    if (fd < 0) answer = 2;
    else close(fd);
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
    if (conf->ktls && kernel_has_tls()) options |= SSL_OP_ENABLE_KTLS;
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
    if (conf->xkit_records) SSL_CTX_set_keylog_callback(ctx, on_keylog);
    bool ok = SSL_CTX_set_min_proto_version(ctx, conf->min_version) == 1 &&
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
    SSL_CTX_set_session_cache_mode(ctx, conf->session_cache_size ? SSL_SESS_CACHE_SERVER : SSL_SESS_CACHE_OFF);
    if (conf->session_cache_size) SSL_CTX_sess_set_cache_size(ctx, conf->session_cache_size);
    /* TLS 1.3 resumes only through tickets (stateful ones when our keys are
     * off): one per handshake is enough for a client that reconnects. */
    SSL_CTX_set_num_tickets(ctx, conf->session_tickets || conf->session_cache_size ? 1 : 0);
    if (conf->session_tickets) SSL_CTX_set_tlsext_ticket_key_evp_cb(ctx, ticket_cb);
    return ctx;
}

static void bundle_release(xTlsBundle *bundle) {
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
        if (ok) bundle->num_sni++;
        else if (sni->ctx) snprintf(err, err_len, "tls: out of memory");
    }
    if (!ok) {
        bundle_release(bundle);
        return NULL;
    }
    return bundle;
}

/* ---- Settings checked once, with names in the messages ---- */

/* "h2,http/1.1" → "\x02h2\x08http/1.1". Only what we serve may be offered. */
static bool parse_alpn(xTlsServer *srv, const char *list, unsigned protocols, char *err, size_t err_len) {
    srv->alpn_len = 0;
    for (const char *p = list; *p;) {
        size_t n = strcspn(p, ", ");
        bool h2 = n == 2 && memcmp(p, "h2", 2) == 0;
        bool h1 = n == 8 && memcmp(p, "http/1.1", 8) == 0;
        if (n > 0) {
            if ((!h2 && !h1) || (h2 && !(protocols & XHTTP_PROTO_HTTP2)) ||
                (h1 && !(protocols & XHTTP_PROTO_HTTP1))) {
                snprintf(err, err_len, "tls: ALPN protocol '%.*s' is not one this server speaks", (int)n, p);
                return false;
            }
            if (srv->alpn_len + 1 + n > sizeof srv->alpn) break;
            srv->alpn[srv->alpn_len++] = (unsigned char)n;
            memcpy(srv->alpn + srv->alpn_len, p, n);
            srv->alpn_len += n;
            srv->alpn_http1 |= h1;
        }
        p += n;
        p += strspn(p, ", ");
    }
    if (srv->alpn_len == 0) {
        snprintf(err, err_len, "tls: the ALPN list offers no protocol");
        return false;
    }
    return true;
}

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
        bool modifier = n > 0 && strchr("!-+@", *p);  /* "!aNULL", "@SECLEVEL=2": not a name */
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

void xTlsConfInit(xTlsConf *conf) {
    *conf = (xTlsConf){
        .min_version = XTLS_VERSION_1_2,
        .max_version = XTLS_VERSION_1_3,
        .session_tickets = true,
        .session_lifetime_s = 3600,
        .session_cache_size = 20480,
        .verify_client = XTLS_VERIFY_NONE,
        .handshake_timeout_ms = 10000,
        .ktls = true,
        .xkit_records = true,
    };
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

static bool copy_cert(xTlsCert *dst, const xTlsCert *src) {
    bool ok = true;
    dst->cert_file = copy(src->cert_file, &ok);
    dst->key_file = copy(src->key_file, &ok);
    dst->key_password = copy(src->key_password, &ok);
    return ok;
}

static void free_conf(xTlsServer *srv) {
    xTlsConf *conf = &srv->conf;
    free_cert(&conf->cert);
    for (size_t i = 0; srv->sni && i < conf->num_sni; i++) {
        free((char *)srv->sni[i].name);
        free_cert(&srv->sni[i].cert);
    }
    free(srv->sni);
    free((char *)conf->alpn);
    free((char *)conf->ciphersuites);
    free((char *)conf->ciphers);
    free((char *)conf->groups);
    free((char *)conf->client_ca_file);
}

static bool copy_conf(xTlsServer *srv, const xTlsConf *src) {
    xTlsConf *conf = &srv->conf;
    *conf = *src;
    bool ok = true;
    conf->alpn = copy(src->alpn, &ok);
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

xTlsServer *xTlsServerCreate(const xTlsConf *conf, unsigned protocols, char *err, size_t err_len) {
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
    const char *alpn = conf->alpn ? conf->alpn
                     : !(protocols & XHTTP_PROTO_HTTP2) ? "http/1.1"
                     : !(protocols & XHTTP_PROTO_HTTP1) ? "h2"
                                                        : "h2,http/1.1";
    bool ok = copy_conf(srv, conf);
    if (!ok) snprintf(err, err_len, "tls: out of memory");
    ok = ok && parse_alpn(srv, alpn, protocols, err, err_len) && check_conf(srv, err, err_len);
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
    bundle_release(old);
    return XOK;
}

void xTlsServerDestroy(xTlsServer *srv) {
    if (!srv) return;
    bundle_release(srv->bundle);
    free_conf(srv);
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
    if (!conf->ktls) XLOG_INFO("kTLS: off by configuration; records are encrypted in user space");
    else if (kernel_has_tls()) XLOG_INFO("kTLS: available; records move to the kernel after each handshake");
    else XLOG_INFO("kTLS: not available (this kernel has no tls module); records are encrypted in user space");
#endif
}

/* ---- Connections ---- */

/* What the handshake shows of its keys and records, for our record layer:
 * the TLS 1.3 traffic secrets (OpenSSL's key log), and per direction
 * (0 read, 1 write) how many records followed the Finished message. */
typedef struct xTlsHandoff {
    unsigned char client_secret[XTLS_SECRET_MAX], server_secret[XTLS_SECRET_MAX];
    size_t client_secret_len, server_secret_len;
    bool finished[2];
    uint64_t records_after_finished[2];
} xTlsHandoff;

typedef struct xTlsConn {
    SSL *ssl;
    xTlsServer *srv;
    xTlsBundle *bundle;  /* held while handshaking: SNI picks a context from it */
    xTlsStartFn start;
    xTlsHandoff handoff;
    bool drained;        /* the last socket read came back short or empty */
    bool sniffed;        /* the first byte was looked at: TLS, or plain HTTP? */
    bool established;
    bool failed;         /* the session broke: no close_notify */
    bool shut;           /* close_notify sent */
} xTlsConn;

static const xTransport tls_transport;

static xTlsServer *server_of(SSL *ssl) {
    xConn *conn = SSL_get_app_data(ssl);
    return ((xTlsConn *)conn->transport_state)->srv;
}

static int sni_select(SSL *ssl, int *alert, void *arg) {
    const char *name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
    xConn *conn = SSL_get_app_data(ssl);
    xTlsConn *t = conn->transport_state;
    if (!name || !t->bundle) return SSL_TLSEXT_ERR_NOACK;
    for (size_t i = 0; i < t->bundle->num_sni; i++) {
        if (name_matches(t->bundle->sni[i].name, name)) {
            SSL_set_SSL_CTX(ssl, t->bundle->sni[i].ctx);
            break;
        }
    }
    return SSL_TLSEXT_ERR_OK;
}

static long on_bio(BIO *bio, int oper, const char *argp, size_t len, int argi, long argl, int ret,
                   size_t *processed) {
    if (oper == (BIO_CB_READ | BIO_CB_RETURN)) {
        xTlsConn *t = (xTlsConn *)BIO_get_callback_arg(bio);
        t->drained = ret <= 0 || *processed < len;
    }
    return ret;
}

/* OpenSSL's key log hands over each secret as it is derived; the TLS 1.3
 * application traffic secrets are what our record layer starts from. */
static void on_keylog(const SSL *ssl, const char *line) {
    xConn *conn = SSL_get_app_data(ssl);
    xTlsConn *t = conn ? conn->transport_state : NULL;
    bool client = strncmp(line, "CLIENT_TRAFFIC_SECRET_0 ", 24) == 0;
    if (!t || (!client && strncmp(line, "SERVER_TRAFFIC_SECRET_0 ", 24) != 0)) return;
    const char *hex = strchr(line + 24, ' ');  /* past the client random */
    if (!hex) return;
    long len = 0;
    unsigned char *secret = OPENSSL_hexstr2buf(hex + 1, &len);
    if (secret && len > 0 && len <= XTLS_SECRET_MAX) {
        memcpy(client ? t->handoff.client_secret : t->handoff.server_secret, secret, (size_t)len);
        *(client ? &t->handoff.client_secret_len : &t->handoff.server_secret_len) = (size_t)len;
    }
    OPENSSL_clear_free(secret, secret ? (size_t)len : 0);
}

/* Counts the records each way after the Finished message: their number is
 * the sequence number our record layer starts from. */
static void on_message(int write_p, int version, int content_type, const void *buf, size_t len, SSL *ssl,
                       void *arg) {
    xTlsHandoff *h = arg;
    int way = write_p ? 1 : 0;
    if (content_type == SSL3_RT_HEADER && h->finished[way]) {
        h->records_after_finished[way]++;
    } else if (content_type == SSL3_RT_HANDSHAKE && len > 0 && *(const unsigned char *)buf == SSL3_MT_FINISHED) {
        h->finished[way] = true;
        h->records_after_finished[way] = 0;
    }
}

static void tls_state_free(xTlsConn *t) {
    OPENSSL_cleanse(&t->handoff, sizeof t->handoff);
    SSL_free(t->ssl);
    bundle_release(t->bundle);
    free(t);
}

static ssize_t tls_recv(xConn *conn, char *buf, size_t len) {
    xTlsConn *t = conn->transport_state;
    size_t n;
    t->drained = false;
    if (SSL_read_ex(t->ssl, buf, len, &n)) {
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
        return 0;  /* close_notify, or (IGNORE_UNEXPECTED_EOF) a bare FIN */
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

/* One record per call (partial writes): gathers small pieces into one
 * record, and passes a large one straight through. */
static ssize_t tls_sendv(xConn *conn, const struct iovec *iov, int iovcnt) {
    static __thread char gathered[XTLS_RECORD_MAX];
    xTlsConn *t = conn->transport_state;
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
    if (SSL_write_ex(t->ssl, data, len, &n)) return (ssize_t)n;
    int saved = errno;
    switch (SSL_get_error(t->ssl, 0)) {
    case SSL_ERROR_WANT_WRITE:
    case SSL_ERROR_WANT_READ:
        errno = EAGAIN;
        return -1;
    default:
        ERR_clear_error();
        t->failed = true;
        errno = saved ? saved : EPIPE;
        return -1;
    }
}

static void send_close_notify(xTlsConn *t) {
    if (!t->established || t->failed || t->shut) return;
    t->shut = true;
    SSL_shutdown(t->ssl);  /* queues and tries to send; whether it went does not matter now */
    ERR_clear_error();
}

static void tls_shutdown_write(xConn *conn) {
    send_close_notify(conn->transport_state);
    shutdown(conn->fd, SHUT_WR);
}

static void tls_close(xConn *conn) { send_close_notify(conn->transport_state); }

static void tls_free(xConn *conn) {
    if (conn->transport_state) tls_state_free(conn->transport_state);
}

static const xTransport tls_transport = {tls_recv, tls_sendv, tls_shutdown_write, tls_close, tls_free, true, NULL};

/* ---- The handshake ---- */

/* nginx's kindness: a browser pointed at http:// on our TLS port gets a
 * readable answer instead of a dead connection. The request itself is left
 * unread, and discarded while the connection lingers. */
static void answer_plaintext(xConn *conn, xTlsConn *t) {
    static const char response[] = "HTTP/1.1 400 Bad Request\r\n"
                                   "Content-Type: text/plain\r\n"
                                   "Content-Length: 35\r\n"
                                   "Connection: close\r\n"
                                   "\r\n"
                                   "This port expects HTTPS, not HTTP.\n";
    xConnSetTransport(conn, &xConnPlainTransport, NULL);
    tls_state_free(t);
    if (xConnWrite(conn, response, sizeof response - 1) == XOK) xConnCloseAfterFlush(conn);
    else xConnClose(conn);
}

static void handshake_failed(xConn *conn, xTlsConn *t) {
    unsigned long e = ERR_peek_error();
    XLOG_DEBUG("TLS handshake failed: %s", e ? ERR_reason_error_string(e) : strerror(errno));
    ERR_clear_error();
    t->failed = true;
    xConnClose(conn);
}

static bool ktls_active(SSL *ssl) {
#ifndef OPENSSL_NO_KTLS
    return BIO_get_ktls_send(SSL_get_wbio(ssl)) || BIO_get_ktls_recv(SSL_get_rbio(ssl));
#else
    return false;
#endif
}

static const char *alpn_name(SSL *ssl) {
    const unsigned char *alpn;
    unsigned alpn_len;
    SSL_get0_alpn_selected(ssl, &alpn, &alpn_len);
    return alpn_len == 2 && memcmp(alpn, "h2", 2) == 0         ? "h2"
         : alpn_len == 8 && memcmp(alpn, "http/1.1", 8) == 0 ? "http/1.1"
                                                             : "";
}

/* What a handler may ask of a connection, straight from its SSL object
 * (strings owned by it, or static). */
static void describe(SSL *ssl, xTlsInfo *info) {
    const char *name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
    *info = (xTlsInfo){
        .version = SSL_get_version(ssl),
        .cipher = SSL_CIPHER_get_name(SSL_get_current_cipher(ssl)),
        .alpn = alpn_name(ssl),
        .server_name = name ? name : "",
        .resumed = SSL_session_reused(ssl) == 1,
    };
    X509 *peer = SSL_get0_peer_certificate(ssl);
    if (peer) {
        info->client_verified = SSL_get_verify_result(ssl) == X509_V_OK;
        X509_NAME_oneline(X509_get_subject_name(peer), info->client_subject, sizeof info->client_subject);
    }
}

/* The same, copied out to outlive the SSL object. */
static void summarize(SSL *ssl, xTlsSummary *summary) {
    xTlsInfo info;
    describe(ssl, &info);
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
    const EVP_MD *md = SSL_CIPHER_get_handshake_digest(cipher);  /* the PRF's hash */
    SSL_get_client_random(ssl, client_random, sizeof client_random);
    SSL_get_server_random(ssl, server_random, sizeof server_random);
    bool ok = md && master_len && xTlsDeriveTls12Keys(traffic, EVP_MD_get0_name(md), master, master_len,
                                                      client_random, server_random);
    OPENSSL_cleanse(master, sizeof master);
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
    return xTlsDeriveTrafficKeys(traffic, &traffic->read) && xTlsDeriveTrafficKeys(traffic, &traffic->write);
}

/* Hands the connection's records to our record layer and frees the SSL
 * object (tls_records.h). False, with nothing changed, for what it does not
 * cover: other ciphers, a negotiated maximum fragment length, kTLS. */
static bool hand_over_records(xConn *conn, xTlsConn *t) {
    SSL *ssl = t->ssl;
    const SSL_CIPHER *cipher = SSL_get_current_cipher(ssl);
    SSL_SESSION *session = SSL_get_session(ssl);
    const xTlsHandoff *h = &t->handoff;
    xTlsTraffic traffic = {.version = SSL_version(ssl)};
    if (!t->srv->conf.xkit_records || !cipher || !session || ktls_active(ssl) ||
        !xTlsAeadOfNid(SSL_CIPHER_get_cipher_nid(cipher), &traffic.aead) ||
        SSL_SESSION_get_max_fragment_length(session) != TLSEXT_max_fragment_length_DISABLED ||
        !h->finished[0] || !h->finished[1] || SSL_has_pending(ssl) || SSL_get_read_ahead(ssl))
        return false;  /* (OpenSSL holding bytes past Finished would lose them) */
    bool ok;
    if (traffic.version == TLS1_3_VERSION) {
        /* Application records start at 0 after each side's Finished. */
        ok = tls13_keys(h, cipher, &traffic);
        traffic.read.seq = h->records_after_finished[0];
        traffic.write.seq = h->records_after_finished[1];
    } else {
        /* The Finished message is record 0 under the new keys. */
        ok = traffic.version == TLS1_2_VERSION && tls12_keys(ssl, cipher, &traffic);
        traffic.read.seq = 1 + h->records_after_finished[0];
        traffic.write.seq = 1 + h->records_after_finished[1];
    }
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
    tls_state_free(t);
    return true;
}

static void established(xConn *conn, xTlsConn *t) {
    t->established = true;
    bundle_release(t->bundle);
    t->bundle = NULL;
    xConnSetTimeout(conn, 0);
    const char *alpn = alpn_name(t->ssl);
    /* Without ALPN a client gets HTTP/1.1 if we offer it, else HTTP/2. */
    bool h2 = strcmp(alpn, "h2") == 0 || (!*alpn && !t->srv->alpn_http1);
    xTlsStartFn start = t->start;
    if (!hand_over_records(conn, t)) {
        /* OpenSSL keeps the records: let it read ahead again. */
        SSL_set_msg_callback(t->ssl, NULL);
        SSL_set_read_ahead(t->ssl, 1);
        OPENSSL_cleanse(&t->handoff, sizeof t->handoff);
    }
    if (!start(conn, h2 ? "h2" : "http/1.1")) xConnClose(conn);
}

/* A TLS record starts with a content type byte (0x14-0x17; an SSLv2 hello
 * with 0x80 or more); an HTTP request with a method in capitals. */
static bool sniff_plaintext(xConn *conn, xTlsConn *t) {
    unsigned char first;
    ssize_t n = recv(conn->fd, &first, 1, MSG_PEEK);
    if (n == 0 || (n < 0 && errno == EAGAIN)) return false;  /* nothing yet: OpenSSL finds out */
    t->sniffed = true;
    return n == 1 && first >= 'A' && first <= 'Z';
}

static void handshake(xConn *conn) {
    xTlsConn *t = conn->transport == &tls_transport ? conn->transport_state : NULL;
    if (!t || t->established) return;  /* answered in plaintext, or already handed on */
    if (!t->sniffed && sniff_plaintext(conn, t)) {
        answer_plaintext(conn, t);
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
    case SSL_ERROR_WANT_WRITE: conn->write_blocked = true; return;
    default: handshake_failed(conn, t); return;
    }
}

static void handshake_timeout(xConn *conn) {
    xTlsConn *t = conn->transport == &tls_transport ? conn->transport_state : NULL;
    if (t) t->failed = true;
    xConnClose(conn);
}

static void handshake_nothing(xConn *conn) {}

/* Until ALPN has chosen, the connection's protocol is the handshake. */
static const xConnProtocol handshake_protocol = {handshake, handshake, handshake_timeout,
                                                 handshake_timeout, handshake_nothing, handshake_nothing};

bool xTlsAccept(xNetContext *net, xTlsServer *srv, int fd, xTlsStartFn start) {
    xTlsConn *t = calloc(1, sizeof *t);
    if (!t) {
        close(fd);
        return false;
    }
    t->srv = srv;
    t->start = start;
    pthread_mutex_lock(&srv->lock);
    t->bundle = srv->bundle;
    atomic_fetch_add(&t->bundle->refs, 1);
    pthread_mutex_unlock(&srv->lock);
    t->ssl = SSL_new(t->bundle->main);
    if (!t->ssl || SSL_set_fd(t->ssl, fd) != 1) {
        ERR_clear_error();
        tls_state_free(t);
        close(fd);
        return false;
    }
    BIO *bio = SSL_get_rbio(t->ssl);
    BIO_set_callback_ex(bio, on_bio);
    BIO_set_callback_arg(bio, (char *)t);
    SSL_set_accept_state(t->ssl);
    if (srv->conf.xkit_records) {
        SSL_set_msg_callback(t->ssl, on_message);
        SSL_set_msg_callback_arg(t->ssl, &t->handoff);
    }
    xConn *conn = xConnCreate(net, fd, &handshake_protocol, NULL);
    if (!conn) {
        tls_state_free(t);
        return false;
    }
    SSL_set_app_data(t->ssl, conn);
    xConnSetTransport(conn, &tls_transport, t);
    xConnSetTimeout(conn, srv->conf.handshake_timeout_ms);
    return true;
}

bool xTlsConnInfo(const xConn *conn, xTlsInfo *info) {
    const xTlsSummary *s = xTlsRecordsSummary(conn);
    if (s) {
        *info = (xTlsInfo){
            .version = s->version,
            .cipher = s->cipher ? s->cipher : "",
            .alpn = s->alpn,
            .server_name = s->server_name ? s->server_name : "",
            .resumed = s->resumed,
            .client_verified = s->client_verified,
            .xkit_records = true,
        };
        if (s->client_subject) snprintf(info->client_subject, sizeof info->client_subject, "%s", s->client_subject);
        return true;
    }
    if (!conn || conn->transport != &tls_transport || !conn->transport_state) return false;
    SSL *ssl = ((const xTlsConn *)conn->transport_state)->ssl;
    describe(ssl, info);
    if (!info->cipher) info->cipher = "";
#ifndef OPENSSL_NO_KTLS
    info->ktls_send = BIO_get_ktls_send(SSL_get_wbio(ssl));
    info->ktls_recv = BIO_get_ktls_recv(SSL_get_rbio(ssl));
#endif
    return true;
}
