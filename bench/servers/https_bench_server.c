/* https_bench_server — the bench routes over TLS: HTTPS/1.1 and HTTPS/2 on
 * one port, chosen by ALPN. The command of our HTTPS reports:
 *
 *   https_bench_server PORT CERT KEY [--workers N] [http_bench_server's flags]
 *       [--key-password P] [--alpn h2,http/1.1] [--tls-min 1.2|1.3] [--tls-max 1.2|1.3]
 *       [--ciphersuites TLS13:LIST] [--ciphers TLS12:LIST] [--groups X25519:P-256]
 *       [--no-tickets] [--session-cache N] [--client-ca FILE]
 *       [--verify-client optional|required] [--sni NAME,CERT,KEY]...
 *       [--handshake-timeout MS] [--no-ktls] [--ktls-tls13] [--openssl-records] [--plain-port P]
 *       [--no-h3] [--h3-retry] [--h3-retry-flood HANDSHAKES] [--h3-0rtt]
 *
 * --ktls-tls13 hands TLS 1.3 records to the kernel too (xTlsConf.ktls_tls13). --openssl-records leaves the
 * records with OpenSSL after the handshake instead of xKit's record layer. SIGHUP rereads the certificate,
 * key and CA files. --plain-port also serves plain HTTP (and h2c) on a second port of the same server. HTTP/3
 * is served on UDP PORT as well (QUIC, the same certificate), unless --no-h3. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xhttp/server.h>
#include <xhttp/tls.h>

#include "bench_common.h"

#define MAX_SNI 16

typedef struct TlsFlags {
    xTlsConf tls;
    xTlsSniCert sni[MAX_SNI];
    char *sni_specs[MAX_SNI]; /* "NAME,CERT,KEY", split in place */
    long plain_port;          /* -1: none */
} TlsFlags;

static bool parse_version(const char *s, int *out) {
    if (strcmp(s, "1.2") == 0)
        *out = XTLS_VERSION_1_2;
    else if (strcmp(s, "1.3") == 0)
        *out = XTLS_VERSION_1_3;
    else
        return false;
    return true;
}

static bool parse_sni(TlsFlags *f, char *spec) {
    if (f->tls.num_sni == MAX_SNI) return false;
    char *cert = strchr(spec, ',');
    char *key = cert ? strchr(cert + 1, ',') : NULL;
    if (!key) return false;
    *cert++ = '\0';
    *key++ = '\0';
    f->sni[f->tls.num_sni++] = (xTlsSniCert){.name = spec, .cert = {.cert_file = cert, .key_file = key}};
    return true;
}

static int tls_flag(int argc, char **argv, int i, void *arg) {
    TlsFlags *f = arg;
    const char *flag = argv[i];
    if (strcmp(flag, "--no-tickets") == 0) return f->tls.session_tickets = false, 1;
    if (strcmp(flag, "--no-ktls") == 0) return f->tls.ktls = false, 1;
    if (strcmp(flag, "--ktls-tls13") == 0) return f->tls.ktls_tls13 = true, 1;
    if (strcmp(flag, "--openssl-records") == 0) return f->tls.xkit_records = false, 1;
    if (strcmp(flag, "--no-h3") == 0) return f->tls.http3 = false, 1;
    if (strcmp(flag, "--h3-retry") == 0) return f->tls.http3_retry = true, 1;
    if (strcmp(flag, "--h3-0rtt") == 0) return f->tls.http3_early_data = true, 1;
    if (i + 1 >= argc) return 0;
    char *value = argv[i + 1];
    unsigned long n;
    if (strcmp(flag, "--key-password") == 0)
        f->tls.cert.key_password = value;
    else if (strcmp(flag, "--alpn") == 0)
        f->tls.alpn = value;
    else if (strcmp(flag, "--ciphersuites") == 0)
        f->tls.ciphersuites = value;
    else if (strcmp(flag, "--ciphers") == 0)
        f->tls.ciphers = value;
    else if (strcmp(flag, "--groups") == 0)
        f->tls.groups = value;
    else if (strcmp(flag, "--client-ca") == 0)
        f->tls.client_ca_file = value;
    else if (strcmp(flag, "--tls-min") == 0) {
        if (!parse_version(value, &f->tls.min_version)) return 0;
    } else if (strcmp(flag, "--tls-max") == 0) {
        if (!parse_version(value, &f->tls.max_version)) return 0;
    } else if (strcmp(flag, "--sni") == 0) {
        if (!parse_sni(f, value)) return 0;
    } else if (strcmp(flag, "--verify-client") == 0) {
        if (strcmp(value, "optional") == 0)
            f->tls.verify_client = XTLS_VERIFY_OPTIONAL;
        else if (strcmp(value, "required") == 0)
            f->tls.verify_client = XTLS_VERIFY_REQUIRED;
        else
            return 0;
    } else if (strcmp(flag, "--h3-retry-flood") == 0) {
        if (!benchParseSize(xStrFromC(value), UINT32_MAX, &n)) return 0;
        f->tls.http3_retry_flood = (uint32_t)n;
    } else if (strcmp(flag, "--session-cache") == 0 || strcmp(flag, "--handshake-timeout") == 0 ||
               strcmp(flag, "--plain-port") == 0) {
        if (!benchParseSize(xStrFromC(value), flag[2] == 'p' ? 65535 : 86400000, &n)) return 0;
        if (flag[2] == 's')
            f->tls.session_cache_size = (uint32_t)n;
        else if (flag[2] == 'h')
            f->tls.handshake_timeout_ms = (uint32_t)n;
        else
            f->plain_port = (long)n;
    } else {
        return 0;
    }
    return 2;
}

static int usage(const char *argv0) {
    fprintf(stderr,
            "usage: %s PORT CERT KEY\n%s"
            "       [--key-password P] [--alpn h2,http/1.1] [--tls-min 1.2|1.3] [--tls-max 1.2|1.3]\n"
            "       [--ciphersuites LIST] [--ciphers LIST] [--groups LIST] [--no-tickets]\n"
            "       [--session-cache N] [--client-ca FILE] [--verify-client optional|required]\n"
            "       [--sni NAME,CERT,KEY]... [--handshake-timeout MS] [--no-ktls] [--ktls-tls13] "
            "[--openssl-records]\n"
            "       [--plain-port P] [--no-h3] [--h3-retry] [--h3-retry-flood HANDSHAKES]\n"
            "       [--h3-0rtt]\n",
            argv0, benchCommonUsage);
    return 2;
}

int main(int argc, char **argv) {
    static TlsFlags flags;
    xTlsConfInit(&flags.tls);
    flags.tls.http3 = true; /* HTTP/3 on UDP PORT too, unless --no-h3 */
    flags.plain_port = -1;
    xHttpServerConf conf;
    const char *host;
    unsigned long port;
    if (argc < 4 || !benchParseSize(xStrFromC(argv[1]), 65535, &port) ||
        !benchParseFlags(argc, argv, 4, &conf, &host, tls_flag, &flags))
        return usage(argv[0]);
    flags.tls.cert.cert_file = argv[2];
    flags.tls.cert.key_file = argv[3];
    flags.tls.sni = flags.sni;

    xHttpServer *server = xHttpServerCreate(NULL, &conf);
    if (!server) {
        fprintf(stderr, "https_bench_server: cannot create the server\n");
        return 1;
    }
    if (!benchAddRoutes(server)) {
        xHttpServerDestroy(server);
        return 1;
    }
    if (!benchListen(server, host, (uint16_t)port, &flags.tls) ||
        (flags.plain_port >= 0 && xHttpServerListen(server, host, (uint16_t)flags.plain_port) != XOK) ||
        !benchProxyProtocol(server)) {
        fprintf(stderr, "https_bench_server: %s\n", xHttpServerLastError(server));
        xHttpServerDestroy(server);
        benchFreeRoutes();
        return 1;
    }
    benchPrintListening(host, server);
    if (flags.plain_port >= 0) {
        printf("plain listening on %s:%u\n", host, xHttpServerListenerPort(server, 1));
        fflush(stdout);
    }
    xErrno err = xHttpServerRun(server);
    if (err != XOK) fprintf(stderr, "%s: %s\n", "https_bench_server", xHttpServerLastError(server));
    xHttpServerDestroy(server);
    benchFreeRoutes();
    return err == XOK ? 0 : 1;
}
