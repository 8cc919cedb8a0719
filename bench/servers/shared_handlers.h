/* shared_handlers.h — the handlers the bench servers and the HttpArena entry
 * (arena/main.c) answer alike, written once on xKit's public API only, as the
 * arena entry must be: gRPC GetSum, POST /echo and the WebSocket echo. The
 * arena builds this file from here (arena/CMakeLists.txt). */
#ifndef XKIT_SHARED_HANDLERS_H
#define XKIT_SHARED_HANDLERS_H

#include <stdbool.h>
#include <stddef.h>

#include <xhttp/server.h>
#include <xhttp/websocket.h>

/** POST /benchmark.BenchmarkService/GetSum, the arena's unary gRPC method:
 *  SumRequest{int32 a = 1; int32 b = 2} -> SumReply{int32 result = 1}, a + b
 *  wrapping as int32 does. Protobuf by hand: varint fields in any order, unknown
 *  ones skipped; any other wire type is INVALID_ARGUMENT. */
void sharedGrpcGetSum(xHttpRequest *req, xHttpResponse *res, void *arg);

/** POST /echo: the request body back, as application/octet-stream. */
void sharedEchoBody(xHttpRequest *req, xHttpResponse *res, void *arg);

/** A WebSocket route's on_message: every text or binary message back as it came. */
void sharedWebSocketEcho(xWebSocket *ws, const char *data, size_t len, bool binary, void *arg);

#endif
