/* context.c — a worker's HTTP context, made and unmade the one way the server
 * and the tests both use (context.h). */
#include "xhttp/core/context.h"

#include "xhttp/core/exchange.h"

/* Idle pooled blocks a worker keeps; beyond this they go back to malloc. */
#define XCONTEXT_SPARE_BLOCKS 256
/* The smallest block: what a TLS record or a few pipelined requests need. */
#define XCONTEXT_MIN_BLOCK 16384

xErrno xHttpContextInit(xHttpContext *ctx, xEventLoop *loop, const xHttpServerConf *conf,
                        const xRouter *router, const xHttpUpgrades *upgrades) {
    *ctx = (xHttpContext){.conf = conf, .router = router, .upgrades = upgrades};
    /* A block holds a whole head with room behind it, so a head never spans two. */
    size_t block =
        conf->max_header_size + 4096 > XCONTEXT_MIN_BLOCK ? conf->max_header_size + 4096 : XCONTEXT_MIN_BLOCK;
    return xNetContextInit(&ctx->net, loop, block, XCONTEXT_SPARE_BLOCKS, conf->send_timeout_ms);
}

void xHttpContextDestroy(xHttpContext *ctx) {
    xHttpExchangePoolDestroy(ctx);
    xNetContextDestroy(&ctx->net);
}
