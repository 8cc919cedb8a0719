/* context.c — a worker's HTTP context, made and unmade the one way the server
 * and the tests both use (context.h). */
#include "xhttp/core/context.h"

#include <string.h>

#include "xhttp/core/exchange.h"

/* Idle pooled blocks a worker keeps; beyond this they go back to malloc. */
#define XCONTEXT_SPARE_BLOCKS 256
/* The smallest block: what a TLS record or a few pipelined requests need. */
#define XCONTEXT_MIN_BLOCK 16384

xErrno xHttpContextInit(xHttpContext *ctx, xEventLoop *loop, const xHttpServerConf *conf,
                        const xRouter *router, const xHttpUpgrades *upgrades) {
    *ctx = (xHttpContext){.conf = conf,
                          .router = router,
                          .upgrades = upgrades,
                          .answers = &xHttpDefaultAnswers,
                          .worker = {.loop = loop}};
    /* A block holds a whole head with room behind it, so a head never spans two. */
    size_t block =
        conf->max_header_size + 4096 > XCONTEXT_MIN_BLOCK ? conf->max_header_size + 4096 : XCONTEXT_MIN_BLOCK;
    xErrno err = xNetContextInit(&ctx->net, loop, block, XCONTEXT_SPARE_BLOCKS, conf->send_timeout_ms);
    ctx->net.linger = (xConnLinger){.time_ms = conf->lingering_time_ms,
                                    .timeout_ms = conf->lingering_timeout_ms,
                                    .max_bytes = conf->lingering_max_bytes};
    return err;
}

void xHttpDrainFresh(xConn *conn) {
    uint32_t header_ms = xHttpContextOf(conn)->conf->header_timeout_ms;
    xConnSetTimeout(conn, header_ms && header_ms < XCONN_DRAIN_FRESH_MS ? header_ms : XCONN_DRAIN_FRESH_MS);
}

const xHttpOwnAnswers xHttpDefaultAnswers = {
    .server_line = "Server: xkit\r\n",
    .server_line_len = 14,
    .server_name = {"xkit", 4},
};

xStr xHttpOwnErrorBody(const xHttpOwnAnswers *answers, int status, char line[64], xStr *content_type) {
    const xHttpErrorBody *found = NULL; /* status's own, else the one for any status */
    for (size_t i = 0; i < answers->num_error_bodies && status >= 400; i++) {
        const xHttpErrorBody *b = &answers->error_bodies[i];
        if (b->status == status) {
            found = b;
            break;
        }
        if (b->status == 0 && !found) found = b;
    }
    if (found) {
        *content_type = (xStr){found->content_type, found->content_type_len};
        return (xStr){found->body, found->len};
    }
    const char *reason = xHttpStatusReason(status);
    size_t n = strlen(reason);
    memcpy(line, reason, n);
    line[n++] = '\n';
    *content_type = (xStr){"Content-Type: text/plain\r\n", 26};
    return (xStr){line, n};
}

void xHttpContextDestroy(xHttpContext *ctx) {
    xHttpExchangePoolDestroy(ctx);
    xNetContextDestroy(&ctx->net);
}
