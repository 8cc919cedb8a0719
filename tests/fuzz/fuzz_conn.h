/* fuzz_conn.h — what the whole-connection harnesses (fuzz_http1_connection,
 * fuzz_http2_connection; fuzz_h3_connection the settings and routes) share: the
 * server settings they start from, routes that answer in each way a handler can
 * (at once, echoing the body, streamed with a trailer, from a later loop
 * turn, reading a streamed body) and a WebSocket echo (by its 101 on
 * HTTP/1.1, its extended CONNECT on HTTP/2), and the client on the other end of a
 * socketpair that sends the input in pieces, gathers what the server writes,
 * and checks that the connection and its memory are all given back. */
#ifndef XK_TESTS_FUZZ_CONN_H
#define XK_TESTS_FUZZ_CONN_H

#include <stdbool.h>
#include <stddef.h>

#include "xhttp/core/context.h"
#include "xhttp/core/exchange.h"
#include "xhttp/upgrade/upgrade.h"
#include "xhttp/websocket/websocket.h"

#define FUZZ_CONN_MAX_PIECES 256   /* more pieces than this: the last takes the rest */
#define FUZZ_CONN_SETTLE_TURNS 256 /* loop turns allowed for the server to finish */
#define FUZZ_CONN_HELLO "hello\n"  /* GET /hello's body */

void fuzzOnHello(xHttpRequest *req, xHttpResponse *res, void *arg);
void fuzzOnEcho(xHttpRequest *req, xHttpResponse *res, void *arg);
void fuzzOnStream(xHttpRequest *req, xHttpResponse *res, void *arg);
void fuzzOnLater(xHttpRequest *req, xHttpResponse *res, void *arg);
void fuzzOnUpload(xHttpRequest *req, xHttpResponse *res, void *arg);

/* The shared routes, as a harness's targets and specs; the WebSocket route's
 * two targets, as xHttpServerWebSocket makes them, get their argument from
 * fuzzConnRoutes. */
#define FUZZ_CONN_TARGETS                                                                                    \
    {.handler = fuzzOnHello}, {.handler = fuzzOnEcho}, {.handler = fuzzOnStream}, {.handler = fuzzOnLater},  \
        {.handler = fuzzOnUpload, .streams_body = true}, {.handler = xWsRouteHandler, .unfiltered = true}, { \
        .handler = xWsTunnelHandler, .streams_body = true, .unfiltered = true                                \
    }
#define FUZZ_CONN_SPECS                                                                                      \
    "GET /hello", "POST /echo", "GET /stream", "/later", "/upload", "GET /ws", "CONNECT /ws"
#define FUZZ_CONN_ROUTES 7

/* The server settings every whole-connection harness starts from: the defaults,
 * small limits (1 KiB of head in 16 fields, 4 KiB of body) an input reaches, and
 * timeouts no timer reaches within one input. */
void fuzzConnConfInit(xHttpServerConf *conf);

/* Gives targets (FUZZ_CONN_TARGETS) the WebSocket route they lead to: an
 * echo with permessage-deflate, no timers, and a small backpressure limit. */
void fuzzConnRoutes(xHttpRouteTarget *targets);

typedef struct FuzzClient {
    int fd;
    char *out; /* what the server wrote */
    size_t out_len, out_cap;
    bool eof;
    void (*turn)(void); /* one turn of the server's loop, with the harness's checks */
} FuzzClient;

/* Accepts the server end of a new socketpair on ctx under plan (its send
 * buffer as small as the kernel allows with small_sndbuf, so writes block). */
FuzzClient fuzzClientConnect(xHttpContext *ctx, const xUpgradePlan *plan, bool small_sndbuf,
                             void (*turn)(void));

/* Reads what the server wrote, until the socket is empty or ends. */
void fuzzClientRead(FuzzClient *c);

/* Sends in[0..n) in the pieces pace asks for (bits 0-3: 0 all at once;
 * other k, pieces of 1 to 2^(k-1) bytes drawn from pace; with heads_apart,
 * 15 sends up to each "\r\n\r\n"), turning the loop after each; reading as
 * it goes with read_now. Stops early once the server is gone. */
void fuzzClientSendAll(FuzzClient *c, const char *in, size_t n, unsigned pace, bool heads_apart,
                       bool read_now);

/* Half-closes, reads to the server's end of stream, closes, and checks that
 * ctx let go of everything: no connection left, the buffer pool within its
 * maximum, no pooled exchange lost (it held pooled before). */
void fuzzClientFinish(FuzzClient *c, xHttpContext *ctx, size_t pooled);

/* Prints b (at most limit bytes of it) escaped, for FUZZ_DUMP. */
void fuzzDump(const char *what, const char *b, size_t len, size_t limit);

#endif
