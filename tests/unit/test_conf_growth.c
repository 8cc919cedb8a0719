/* test_conf_growth.c — settings structs grow without breaking callers built
 * against an older header. An "old caller" here is code compiled with a
 * shorter copy of each struct (a prefix of today's fields, as an older
 * header had them), holding it in a heap block of exactly its size: under
 * AddressSanitizer any read or write past it fails the test. */
#include <stdlib.h>
#include <string.h>

#include <xhttp/server.h>
#include <xhttp/tls.h>

#include "check.h"
#include "xhttp/core/exchange.h"
#include "xnet/connection.h"

/* xHttpServerConf as an older header declared it: everything up to protocols. */
typedef struct OldServerConf {
    size_t struct_size;
    int workers;
    size_t max_request_line, max_header_size, max_headers, max_body_size;
    uint32_t header_timeout_ms, body_timeout_ms, idle_timeout_ms, send_timeout_ms;
    uint32_t shutdown_timeout_ms, max_connections;
    unsigned protocols;
} OldServerConf;

/* xTlsConf as an older header declared it: everything up to groups. */
typedef struct OldTlsConf {
    size_t struct_size;
    xTlsCert cert;
    const xTlsSniCert *sni;
    size_t num_sni;
    const char *alpn;
    int min_version, max_version;
    const char *ciphersuites, *ciphers, *groups;
} OldTlsConf;

static void test_old_server_conf_gets_defaults_in_its_own_size_only(void) {
    OldServerConf *old = malloc(sizeof *old);
    memset(old, 0xAB, sizeof *old);
    xHttpServerConfInitSized((xHttpServerConf *)old, sizeof *old);
    CHECK_EQ_INT(old->struct_size, sizeof *old);
    CHECK_EQ_INT(old->max_body_size, 1u << 20);
    CHECK_EQ_INT(old->protocols, XHTTP_PROTO_HTTP1 | XHTTP_PROTO_HTTP2);
    free(old);
}

static void test_server_reads_only_what_an_old_conf_has(void) {
    OldServerConf *old = malloc(sizeof *old);
    xHttpServerConfInitSized((xHttpServerConf *)old, sizeof *old);
    old->workers = 3;
    xHttpServer *server = xHttpServerCreate(NULL, (const xHttpServerConf *)old);
    CHECK(server != NULL);
    if (server) CHECK_EQ_INT(xHttpServerWorkerCount(server), 3);
    if (server) CHECK_EQ_INT(xHttpServerListen(server, "127.0.0.1", 0), XOK);
    xHttpServerDestroy(server);
    free(old);
}

static void test_current_conf_records_its_size(void) {
    xHttpServerConf conf;
    xHttpServerConfInit(&conf);
    CHECK_EQ_INT(conf.struct_size, sizeof conf);
    CHECK(conf.handle_signals);
    CHECK(!conf.h2c_upgrade); /* h2c smuggling past a proxy: asked for, never by default */
    xTlsConf tls;
    xTlsConfInit(&tls);
    CHECK_EQ_INT(tls.struct_size, sizeof tls);
    CHECK(tls.xkit_records);
}

static void test_old_tls_conf_is_read_within_its_size(void) {
    OldTlsConf *old = malloc(sizeof *old);
    memset(old, 0xAB, sizeof *old);
    xTlsConfInitSized((xTlsConf *)old, sizeof *old);
    CHECK_EQ_INT(old->struct_size, sizeof *old);
    CHECK_EQ_INT(old->min_version, XTLS_VERSION_1_2);
    old->cert.cert_file = "/nonexistent/old-caller.pem";
    xHttpServerConf conf;
    xHttpServerConfInit(&conf);
    conf.handle_signals = false;
    xEventLoop *loop = xEventLoopCreate();
    xHttpServer *server = xHttpServerCreate(loop, &conf);
    /* The certificate named in the old struct is the one looked for. */
    CHECK_EQ_INT(xHttpServerListenTls(server, "127.0.0.1", 0, (const xTlsConf *)old), XERR_TLS);
    CHECK_MSG(strstr(xHttpServerLastError(server), "/nonexistent/old-caller.pem") != NULL, "%s",
              xHttpServerLastError(server));
    xHttpServerDestroy(server);
    xEventLoopDestroy(loop);
    free(old);
}

/* xHttpPeer as an older header might have declared it: no ports. */
typedef struct OldPeer {
    size_t struct_size;
    int family;
    char address[46];
} OldPeer;

static void test_old_peer_struct_is_written_within_its_size(void) {
    xConn conn = {.transport = &xConnPlainTransport};
    conn.addr = (xNetAddr){.bytes = {192, 0, 2, 7}, .port = 40000, .local_port = 8080, .family = AF_INET};
    xHttpRequest req = {.conn = &conn};
    OldPeer *old = malloc(sizeof *old);
    CHECK(xHttpRequestPeerSized(&req, (xHttpPeer *)old, sizeof *old));
    CHECK_EQ_INT(old->struct_size, sizeof *old);
    CHECK_EQ_INT(old->family, AF_INET);
    CHECK(strcmp(old->address, "192.0.2.7") == 0);
    free(old);

    xHttpPeer peer;
    CHECK(xHttpRequestPeer(&req, &peer));
    CHECK_EQ_INT(peer.struct_size, sizeof peer);
    CHECK(peer.port == 40000 && peer.local_port == 8080);
    CHECK(strcmp(xHttpRequestScheme(&req), "http") == 0);
    conn.addr.family = 0; /* not from accept: unknown */
    CHECK(!xHttpRequestPeer(&req, &peer));
}

int main(void) {
    RUN(test_old_server_conf_gets_defaults_in_its_own_size_only);
    RUN(test_server_reads_only_what_an_old_conf_has);
    RUN(test_current_conf_records_its_size);
    RUN(test_old_tls_conf_is_read_within_its_size);
    RUN(test_old_peer_struct_is_written_within_its_size);
    return CHECK_SUMMARY();
}
