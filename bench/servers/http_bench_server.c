/* http_bench_server — the routes our published reports measure, plus
 * with --test-routes the diagnostic ones the integration tests use (bench_common.c).
 *
 *   http_bench_server PORT [--workers N] [--host H] [--idle-timeout MS]
 *       [--header-timeout MS] [--body-timeout MS] [--max-body BYTES]
 *       [--max-header-size BYTES] [--max-connections N] [--shutdown-timeout MS]
 *       [--send-timeout MS] [--max-streams N] [--no-http2 | --http2-only] [--test-routes]
 *       [--access-log PATH] [--log-format common|combined|json] [--log-flush-ms MS] [--metrics]
 *       [--compress]
 *       [--static DIR [--static-no-twins] [--static-cache-ms MS] [--static-cache-control V]
 *        [--static-type EXT=TYPE]...]
 *
 * HTTP/1.1 and cleartext HTTP/2 (prior knowledge, or Upgrade: h2c with --h2c-upgrade) share
 * the port; --proxy-protocol NETWORKS reads the PROXY header from load balancers there, and
 * --trust-forwarded NETWORKS their X-Forwarded-For. For restarts behind one: --health PATH,
 * --stop-grace MS, --shared-port, --listen-fd N, and systemd's LISTEN_FDS when set.
 * --upstream URL proxies what no route answers (and, bodies streamed, what is under /upstream/;
 * with --upstream-stream, every POST and PUT no other route takes, a large body spliced).
 */
#include <stdio.h>

#include <xhttp/server.h>

#include "bench_common.h"

static int usage(const char *argv0) {
    fprintf(stderr, "usage: %s PORT\n%s", argv0, benchCommonUsage);
    return 2;
}

int main(int argc, char **argv) {
    xHttpServerConf conf;
    const char *host;
    unsigned long port;
    if (argc < 2 || !benchParseSize(xStrFromC(argv[1]), 65535, &port) ||
        !benchParseFlags(argc, argv, 2, &conf, &host, NULL, NULL))
        return usage(argv[0]);

    xHttpServer *server = xHttpServerCreate(NULL, &conf);
    if (!server) {
        fprintf(stderr, "cannot create the server\n");
        return 1;
    }
    if (!benchAddRoutes(server)) {
        xHttpServerDestroy(server);
        return 1;
    }
    if (!benchListen(server, host, (uint16_t)port, NULL) || !benchProxyProtocol(server)) {
        fprintf(stderr, "http_bench_server: %s\n", xHttpServerLastError(server));
        xHttpServerDestroy(server);
        benchFreeRoutes();
        return 1;
    }
    benchPrintListening(host, server);
    xErrno err = xHttpServerRun(server);
    if (err != XOK) fprintf(stderr, "%s: %s\n", "http_bench_server", xHttpServerLastError(server));
    xHttpServerDestroy(server);
    benchFreeRoutes();
    return err == XOK ? 0 : 1;
}
