/* worker.c — a worker for unit tests and fuzz harnesses (worker.h). */
#include "worker.h"

#include "xhttp/upgrade/upgrade.h"

bool xTestWorkerInit(xTestWorker *w, const char *const *specs, xHttpRouteTarget *targets, size_t n) {
    xEventLoop *loop = xEventLoopCreate();
    w->router = xRouterCreate();
    if (!loop || !w->router) return false;
    for (size_t i = 0; i < n; i++)
        if (xRouterAdd(w->router, specs[i], &targets[i], NULL) != XOK) return false;
    return xHttpContextInit(&w->ctx, loop, &w->conf, w->router, &xUpgradeRequests) == XOK;
}

void xTestWorkerDestroy(xTestWorker *w) {
    xEventLoop *loop = w->ctx.net.loop;
    xHttpContextDestroy(&w->ctx);
    xRouterDestroy(w->router);
    xEventLoopDestroy(loop);
}

bool xTestNetInit(xNetContext *net) {
    xEventLoop *loop = xEventLoopCreate();
    return loop && xNetContextInit(net, loop, 16384, 8, 60000) == XOK;
}

void xTestNetDestroy(xNetContext *net) {
    xEventLoop *loop = net->loop;
    xNetContextDestroy(net);
    xEventLoopDestroy(loop);
}

static void stop(xEventLoop *loop, xTimer *timer, void *arg) { xEventLoopStop(loop); }

void xTestTurn(xEventLoop *loop) {
    static xTimer tick; /* tests run one loop at a time, on one thread */
    if (!tick.fn) xTimerInit(&tick, stop, NULL);
    xTimerStart(loop, &tick, 0);
    xEventLoopRun(loop);
}
