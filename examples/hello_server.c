/* hello_server — the smallest useful xKit server, on a loop the caller owns.
 *
 *   hello_server PORT        then: curl http://127.0.0.1:PORT/hello/world
 */
#include <stdio.h>
#include <stdlib.h>

#include <xbase/event.h>
#include <xhttp/server.h>

static void on_hello(xHttpRequest *req, xHttpResponse *res, void *arg) {
    xStr name = xHttpRequestParam(req, "name");
    char body[256];
    int n = snprintf(body, sizeof body, "Hello, %.*s!\n", (int)name.len, name.data);
    xHttpResponseAddHeader(res, "Content-Type", "text/plain");
    xHttpResponseSend(res, body, n < (int)sizeof body ? (size_t)n : sizeof body - 1);
}

int main(int argc, char **argv) {
    int port = argc > 1 ? atoi(argv[1]) : 8080;
    xEventLoop *loop = xEventLoopCreate();
    xHttpServer *server = xHttpServerCreate(loop, NULL);
    xHttpServerRoute(server, "GET /hello/:name", on_hello, NULL);
    xErrno err = xHttpServerListen(server, "0.0.0.0", (uint16_t)port);
    if (err != XOK) {
        fprintf(stderr, "listen: %s\n", xErrnoString(err));
        return 1;
    }
    printf("listening on 0.0.0.0:%u (1 workers)\n", xHttpServerPort(server));
    fflush(stdout);
    xHttpServerRun(server); /* runs the loop until SIGINT or SIGTERM */
    xHttpServerDestroy(server);
    xEventLoopDestroy(loop);
    return 0;
}
