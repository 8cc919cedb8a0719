/* shared_handlers.c — the handlers the bench servers and the arena entry share
 * (see shared_handlers.h); public headers only. */
#include "shared_handlers.h"

#include <stdint.h>

#include <xhttp/grpc.h>

/* Reads a protobuf varint at *p; false when it runs past end or past 10 bytes. */
static bool read_varint(const unsigned char **p, const unsigned char *end, uint64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 70 && *p < end; shift += 7) {
        unsigned char b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return true;
        }
    }
    return false;
}

void sharedGrpcGetSum(xHttpRequest *req, xHttpResponse *res, void *arg) {
    (void)arg;
    xStr msg;
    if (!xGrpcRequestMessage(req, res, &msg)) return;
    const unsigned char *p = (const unsigned char *)msg.data, *end = p + msg.len;
    int32_t a = 0, b = 0;
    while (p < end) {
        uint64_t key, value;
        if (!read_varint(&p, end, &key) || (key & 7) != 0 || !read_varint(&p, end, &value)) {
            xGrpcFail(res, XGRPC_INVALID_ARGUMENT, "SumRequest: only varint fields are expected");
            return;
        }
        if (key >> 3 == 1) a = (int32_t)value;
        if (key >> 3 == 2) b = (int32_t)value;
    }
    /* int32 is sign-extended to 64 bits on the wire: a negative result takes ten bytes. */
    uint64_t result = (uint64_t)(int64_t)(int32_t)((uint32_t)a + (uint32_t)b);
    unsigned char reply[11] = {0x08};
    size_t n = 1;
    do {
        reply[n++] = (unsigned char)((result & 0x7f) | (result > 0x7f ? 0x80 : 0));
        result >>= 7;
    } while (result);
    xGrpcReply(res, reply, n);
}

void sharedEchoBody(xHttpRequest *req, xHttpResponse *res, void *arg) {
    (void)arg;
    xStr body = xHttpRequestBody(req);
    xHttpResponseAddHeader(res, "Content-Type", "application/octet-stream");
    /* The body lives in the connection's buffer until the response ends. */
    xHttpResponseSend(res, body.data, body.len);
}

void sharedWebSocketEcho(xWebSocket *ws, const char *data, size_t len, bool binary, void *arg) {
    (void)arg;
    if (binary) {
        xWebSocketSendBinary(ws, data, len);
    } else {
        xWebSocketSendText(ws, data, len);
    }
}
