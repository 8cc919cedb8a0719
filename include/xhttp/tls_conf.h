/* xhttp/tls_conf.h — TLS settings and the facts a handler may read, as plain
 * types: what a TLS listener is configured with (xTlsConf) and what it
 * reports of a connection (xTlsInfo). Apart from <xhttp/tls.h>, which adds the
 * server functions, so the TLS layer below HTTP (src/xnet/tls) can use them
 * without the HTTP server's API. Needs no OpenSSL headers. */
#ifndef XHTTP_TLS_CONF_H
#define XHTTP_TLS_CONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What this header declares is libxkit.so's API: exported, where the rest is hidden. */
#pragma GCC visibility push(default)

/** Protocol versions for xTlsConf.min_version / max_version. */
enum {
    XTLS_VERSION_1_2 = 0x0303,
    XTLS_VERSION_1_3 = 0x0304,
};

/** Client certificates (mTLS). */
typedef enum xTlsVerify {
    XTLS_VERIFY_NONE,     /**< not asked for */
    XTLS_VERIFY_OPTIONAL, /**< asked for; one that is sent must verify */
    XTLS_VERIFY_REQUIRED, /**< a client without a valid one is refused */
} xTlsVerify;

/** A certificate and its key, both PEM files. */
typedef struct xTlsCert {
    const char *cert_file;    /**< the chain, leaf first */
    const char *key_file;     /**< the private key (RSA or ECDSA); NULL: in cert_file */
    const char *key_password; /**< for an encrypted key; NULL when it is not */
} xTlsCert;

/** A certificate served to clients that ask for a name by SNI. */
typedef struct xTlsSniCert {
    const char *name; /**< "www.example.com", or "*.example.com" for one label */
    xTlsCert cert;
} xTlsSniCert;

/** TLS listener settings. Start from xTlsConfInit's defaults. Strings are
 *  copied by xHttpServerListenTls; files are read there and again on reload.
 *  Fields are only ever added at the end (see xHttpServerConf). */
typedef struct xTlsConf {
    size_t struct_size;     /**< the caller's sizeof, set by xTlsConfInit */
    xTlsCert cert;          /**< served when SNI names none of sni[] (required) */
    const xTlsSniCert *sni; /**< more certificates, chosen by SNI */
    size_t num_sni;
    const char *alpn;              /**< protocols offered, most preferred first, comma
                                        separated: "h2,http/1.1,http/1.0" (default;
                                        HTTP/2 left out when the server's conf.protocols
                                        lacks it; http/1.0 is served by HTTP/1.1) */
    int min_version;               /**< XTLS_VERSION_* (default 1.2) */
    int max_version;               /**< XTLS_VERSION_* (default 1.3) */
    const char *ciphersuites;      /**< TLS 1.3 suites, OpenSSL's names joined by ':',
                                        ours first; NULL: AES-128-GCM, AES-256-GCM,
                                        ChaCha20-Poly1305 */
    const char *ciphers;           /**< TLS 1.2 cipher list, OpenSSL syntax; NULL: ECDHE
                                        with AES-GCM or ChaCha20-Poly1305 only */
    const char *groups;            /**< key exchange groups, e.g. "X25519:P-256";
                                        NULL: OpenSSL's default */
    bool session_tickets;          /**< resumption by tickets, keys rotated in process (true) */
    uint32_t session_lifetime_s;   /**< how long a session may be resumed; ticket keys
                                       rotate this often (3600) */
    uint32_t session_cache_size;   /**< sessions kept for resumption by ID; 0: none (20480) */
    xTlsVerify verify_client;      /**< mTLS (XTLS_VERIFY_NONE) */
    const char *client_ca_file;    /**< CAs that client certificates must chain to (PEM) */
    uint32_t handshake_timeout_ms; /**< to finish a handshake (10 s) */
    bool ktls;                     /**< use kernel TLS where the kernel has it (true) */
    bool xkit_records;             /**< after the handshake, xKit seals and opens the records
                                        itself (AES-GCM and ChaCha20-Poly1305, TLS 1.2 and 1.3)
                                        and frees OpenSSL's per-connection object, about 10 KiB;
                                        other suites stay with OpenSSL, and kTLS comes first (true) */
    bool http3;                    /**< also serve HTTP/3 on the UDP port of the same number,
                                        QUIC through ngtcp2 and GnuTLS with the same certificate
                                        files (false) */
    bool http3_alt_svc;            /**< with http3: responses over TCP advertise it,
                                        Alt-Svc: h3=":PORT" (true) */
    bool ktls_tls13;               /**< with ktls: TLS 1.3 connections hand their sending to
                                        the kernel too (false). Off, TLS 1.3 goes to xKit's
                                        records and only TLS 1.2 to the kernel: OpenSSL 3.0
                                        cannot give the kernel new keys, so a client's KeyUpdate
                                        that asks the server to update its own ends the
                                        connection when this is on */
    bool http3_retry;              /**< with http3: every new client proves it owns its address by a
                                        Retry round trip first, unless it brings a token from an
                                        earlier connection (false) */
    uint32_t http3_retry_flood;    /**< otherwise Retry is asked of new clients while a worker has
                                        this many handshakes under way: an Initial flood (256; 0:
                                        never) */
    bool http3_early_data;         /**< with http3: 0-RTT. Session tickets are issued (none
                                        otherwise), and a resuming client's early requests are
                                        served when their method is safe (GET, HEAD, OPTIONS,
                                        TRACE) and answered 425 Too Early otherwise (RFC 8470);
                                        a replayed ClientHello has its early data refused (false) */
} xTlsConf;

/** Fills the first size bytes of conf with the defaults noted above; size is
 *  the caller's sizeof(xTlsConf). Call xTlsConfInit instead. */
void xTlsConfInitSized(xTlsConf *conf, size_t size);

/** Fills conf with the defaults noted above. */
static inline void xTlsConfInit(xTlsConf *conf) { xTlsConfInitSized(conf, sizeof *conf); }

/** How a request's connection is secured. Fields are only ever added at the
 *  end; the library writes only what the caller's version has. */
typedef struct xTlsInfo {
    size_t struct_size;       /**< the caller's sizeof, set by xHttpRequestTls */
    const char *version;      /**< "TLSv1.3", "TLSv1.2" */
    const char *cipher;       /**< e.g. "TLS_AES_128_GCM_SHA256" */
    const char *alpn;         /**< "h2", "http/1.1", or "" when none was chosen */
    const char *server_name;  /**< SNI the client sent, or "" */
    bool resumed;             /**< the handshake resumed an earlier session */
    bool ktls_send;           /**< the kernel encrypts what we send */
    bool ktls_recv;           /**< the kernel decrypts what we receive */
    bool xkit_records;        /**< xKit's record layer took over after the handshake */
    bool client_verified;     /**< a client certificate was sent and verified */
    char client_subject[256]; /**< its subject, one line, or "" */
} xTlsInfo;

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
