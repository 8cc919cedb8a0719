/* authsvc.c — the production stack's auth service (../shared/arena/CONTRACT.md
 * in the xKit workspace, "The stacks") on xKit: the contract of the arena's
 * shared `authsvc`, which its production entries run as it is, so that the
 * stack can be tested here and run whole where the arena's is not at hand.
 *
 *   /_auth     (any method) Authorization: Bearer <header>.<payload>.<signature>,
 *              a JWT signed with HMAC-SHA256 under JWT_SECRET (alg HS256): 200 with
 *              X-User-Id: <the payload's sub> and no body; 401 for anything
 *              else (no token, another scheme, a bad signature, no sub, an exp
 *              that has passed)
 *   GET /_health  200
 *
 * Environment: JWT_SECRET (default the arena's published bench secret),
 * AUTHSVC_LISTEN (host:port, default 0.0.0.0:9090). Workers: one per CPU
 * this process may run on. Nothing is cached: every request is verified. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <xhttp/server.h>

#include "jwt.h"

/* The arena's secret, published with it (frameworks/_shared/authsvc): a benchmark's, never a real one. */
#define ARENA_JWT_SECRET "httparena-bench-secret-do-not-use-in-production"

static xStr secret;

static void on_auth(xHttpRequest *req, xHttpResponse *res, void *arg) {
    (void)arg;
    xStr value;
    char user[256];
    if (xHttpRequestHeader(req, "authorization", &value) && value.len > 7 &&
        memcmp(value.data, "Bearer ", 7) == 0 &&
        arenaJwtVerify((xStr){value.data + 7, value.len - 7}, secret, (int64_t)time(NULL), user,
                       sizeof user) == ARENA_JWT_VALID) {
        xHttpResponseAddHeader(res, "X-User-Id", user);
        xHttpResponseSend(res, "", 0);
        return;
    }
    xHttpResponseSetStatus(res, 401);
    xHttpResponseAddHeader(res, "WWW-Authenticate", "Bearer");
    xHttpResponseSend(res, "", 0);
}

static void on_health(xHttpRequest *req, xHttpResponse *res, void *arg) {
    (void)req;
    (void)arg;
    xHttpResponseSend(res, "", 0);
}

int main(void) {
    const char *env = getenv("JWT_SECRET");
    secret.data = env && *env ? env : ARENA_JWT_SECRET;
    secret.len = strlen(secret.data);
    env = getenv("AUTHSVC_LISTEN");
    char host[256];
    const char *listen_at = env && *env ? env : "0.0.0.0:9090", *colon = strrchr(listen_at, ':');
    unsigned port = colon ? (unsigned)atoi(colon + 1) : 0;
    if (!colon || port == 0 || port > 65535 || (size_t)(colon - listen_at) >= sizeof host) {
        fprintf(stderr, "authsvc: AUTHSVC_LISTEN must be host:port\n");
        return 2;
    }
    snprintf(host, sizeof host, "%.*s", (int)(colon - listen_at), listen_at);
    xHttpServerConf conf;
    xHttpServerConfInit(&conf);
    xHttpServer *server = xHttpServerCreate(NULL, &conf);
    bool ok = server && xHttpServerRoute(server, "/_auth", on_auth, NULL) == XOK &&
              xHttpServerRoute(server, "GET /_health", on_health, NULL) == XOK &&
              xHttpServerListen(server, host, (uint16_t)port) == XOK;
    xErrno err = XERR_STATE;
    if (ok) {
        printf("listening on %s:%u (%d workers)\n", host, port, xHttpServerWorkerCount(server));
        fflush(stdout);
        err = xHttpServerRun(server);
    } else if (server) {
        fprintf(stderr, "authsvc: %s\n", xHttpServerLastError(server));
    }
    if (server) xHttpServerDestroy(server);
    return err == XOK ? 0 : 1;
}
