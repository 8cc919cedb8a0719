/* xhttp/grpc.h — unary gRPC calls on an ordinary route.
 *
 * gRPC is HTTP/2 with a 5-byte frame around each message, the content type
 * application/grpc and its outcome in trailers (grpc-status, grpc-message).
 * A unary method is a POST route whose handler takes the one request message
 * and answers one reply message or a status; the messages themselves (protobuf
 * or anything else) stay the caller's to encode:
 *
 *     static void get_sum(xHttpRequest *req, xHttpResponse *res, void *arg) {
 *         xStr msg;
 *         if (!xGrpcRequestMessage(req, res, &msg)) return; // already answered
 *         ... decode msg, encode the reply into buf ...
 *         xGrpcReply(res, buf, n);
 *     }
 *     xHttpServerRoute(server, "POST /benchmark.BenchmarkService/GetSum", get_sum, NULL);
 *
 * The request body is read whole first, so max_body_size bounds a message
 * (HTTP 413 past it). Handlers may reply later from the loop, as any handler. */
#ifndef XHTTP_GRPC_H
#define XHTTP_GRPC_H

#include <stdbool.h>
#include <stddef.h>

#include <xbase/str.h>
#include <xhttp/server.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What this header declares is libxkit.so's API: exported, where the rest is hidden. */
#pragma GCC visibility push(default)

/** gRPC status codes (grpc/doc/statuscodes.md) used by this module. */
enum {
    XGRPC_OK = 0,
    XGRPC_INVALID_ARGUMENT = 3,
    XGRPC_UNIMPLEMENTED = 12,
    XGRPC_INTERNAL = 13,
};

/** Finds the one message of a unary call in req: *message gets a view of it
 *  inside the request body (valid until the response ends). When the request
 *  is not a well-formed unary call, answers it and returns false:
 *   - not HTTP/2: HTTP 505 (gRPC runs on HTTP/2 only);
 *   - a content type other than application/grpc (or application/grpc+x):
 *     HTTP 415, as the gRPC protocol asks;
 *   - a compressed message: grpc-status 12 (UNIMPLEMENTED; only identity is
 *     served, and grpc-accept-encoding says so);
 *   - a frame cut short, longer than the body, or followed by a second
 *     message: grpc-status 13 (INTERNAL). */
bool xGrpcRequestMessage(xHttpRequest *req, xHttpResponse *res, xStr *message);

/** Answers with one message (copied) and grpc-status 0; ends the response. */
xErrno xGrpcReply(xHttpResponse *res, const void *message, size_t len);

/** Answers with no message and grpc-status status (1–16) with an optional
 *  grpc-message (NULL: none), percent-encoded as gRPC requires; ends the
 *  response. XERR_INVALID for a status outside 1–16. */
xErrno xGrpcFail(xHttpResponse *res, int status, const char *message);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
