/* bench_common.h — what http_bench_server and https_bench_server share: the
 * routes our reports measure (plus, with --test-routes, the diagnostic ones the
 * tests use) and the server flags. */
#ifndef XKIT_BENCH_COMMON_H
#define XKIT_BENCH_COMMON_H

#include <stdbool.h>

#include <xbase/str.h>
#include <xhttp/server.h>
#include <xhttp/tls.h>

/** Parses a non-negative decimal no larger than max; false otherwise. */
bool benchParseSize(xStr s, unsigned long max, unsigned long *out);

/** Adds the measured routes to server (GET /ping, GET and POST /echo, the index at /,
 *  GET /static/… after --static DIR, with --compress GET /json and compression on with the
 *  defaults, /ws), GET /metrics after --metrics, the duration histograms after
 *  --request-durations, GET /observe and its metrics after --user-metrics, the access log
 *  after --access-log, the worker hooks and GET /worker after --worker-hooks, and the
 *  test-only routes (/delay, /stream, /upload, /tls, /whoami, /json, /text, /drip, /blocking,
 *  gRPC GetSum, /ws-test, ...) after --test-routes. False (said on stderr) when the access log
 *  cannot be opened or --static's directory cannot be served. */
bool benchAddRoutes(xHttpServer *server);

/** The 8 KiB JSON document GET /json answers with (static; *len its size), the same bytes
 *  in every process: what bench/compress_bench compresses beside the server. */
const char *benchJsonBody(size_t *len);

/** --user-metrics: registers the application metrics the tests check and adds GET /observe
 *  and GET /observe/tick, which update them (bench_metrics.c). False (said on stderr) when
 *  one is refused. */
bool benchAddUserMetrics(xHttpServer *server);

/** Adds /ws (echo; permessage-deflate offered when deflate) and, with
 *  test_routes, /ws-test and /ws-idle (bench_websocket.c). */
void benchAddWebSocket(xHttpServer *server, bool deflate, bool test_routes);

/** What --worker-hooks, --worker-fail-start N, --blocking-threads N, --blocking-queue N
 *  and --blocking-own-busy ask for (bench_workers.c): per-worker state made and freed by
 *  worker hooks, with GET /worker, the blocking pool's settings, and with test_routes
 *  GET /blocking?ms=N. False (said on stderr) for settings the server refuses. */
bool benchAddWorkerRoutes(xHttpServer *server, bool test_routes);

/** Takes those flags at argv[i]: how many arguments (1 or 2), 0 for another flag, -1 for
 *  a bad value. */
int benchWorkersFlag(int argc, char **argv, int i);

/** Frees what benchAddRoutes made, once the server is destroyed. */
void benchFreeRoutes(void);

/** A server flag the common parser does not know: the caller's. Returns how
 *  many arguments it took from argv[i] on (1 or more), or 0 for unknown. */
typedef int (*BenchExtraFlag)(int argc, char **argv, int i, void *arg);

/** Fills conf (from xHttpServerConfInit plus the bench defaults) and host
 *  from argv[first..]. Returns false on a bad flag. */
bool benchParseFlags(int argc, char **argv, int first, xHttpServerConf *conf, const char **host,
                     BenchExtraFlag extra, void *extra_arg);

/** The usage lines of the common flags. */
extern const char benchCommonUsage[];

/** Turns the PROXY protocol on for every listener of server when
 *  --proxy-protocol was given; false (with a message) for a bad list. */
bool benchProxyProtocol(xHttpServer *server);

/** Adds the first listener, where the flags say: on the sockets systemd
 *  passed (LISTEN_FDS) when there are any, else on --listen-fd's socket,
 *  else on host:port; TLS with tls, cleartext when it is NULL. Also adds
 *  --health's route and --trust-forwarded's networks. False (said on stderr)
 *  when any of it fails. */
bool benchListen(xHttpServer *server, const char *host, uint16_t port, const xTlsConf *tls);

/** Prints "listening on HOST:PORT (N workers)", the line tests wait for. */
void benchPrintListening(const char *host, xHttpServer *server);

#endif
