/* grpc.c — unary gRPC over the request and response API: the 5-byte message
 * frame, application/grpc and the grpc-status trailers (gRPC's
 * doc/PROTOCOL-HTTP2.md). Nothing here touches a protocol: HTTP/2 turns the
 * streamed body into DATA and the trailers into the last HEADERS frame. */
#include <xhttp/grpc.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* A message frame: a compressed flag, then the length, big-endian. */
#define FRAME_HEAD 5

/* Replies up to this size are framed on the stack. */
#define STACK_REPLY 512

/* grpc-message is UTF-8 percent-encoded; this much of it is kept. */
#define MAX_STATUS_MESSAGE 256

static const char CONTENT_TYPE[] = "application/grpc";

static void answer_http(xHttpResponse *res, int status, const char *text) {
    xHttpResponseSetStatus(res, status);
    xHttpResponseAddHeader(res, "Content-Type", "text/plain");
    xHttpResponseSend(res, text, strlen(text));
}

/* application/grpc, alone or with a "+format" or parameters after it. */
static bool is_grpc_type(xStr type) {
    size_t n = sizeof CONTENT_TYPE - 1;
    if (type.len < n || strncasecmp(type.data, CONTENT_TYPE, n) != 0) return false;
    return type.len == n || type.data[n] == '+' || type.data[n] == ';';
}

bool xGrpcRequestMessage(xHttpRequest *req, xHttpResponse *res, xStr *message) {
    xStr type = {0};
    if (strcmp(xHttpRequestProtocol(req), "HTTP/2") != 0) {
        answer_http(res, 505, "gRPC needs HTTP/2\n");
        return false;
    }
    if (!xHttpRequestHeader(req, "content-type", &type) || !is_grpc_type(type)) {
        answer_http(res, 415, "gRPC needs Content-Type: application/grpc\n");
        return false;
    }
    xStr body = xHttpRequestBody(req);
    if (body.len < FRAME_HEAD) {
        xGrpcFail(res, XGRPC_INTERNAL, "message frame cut short");
        return false;
    }
    const unsigned char *head = (const unsigned char *)body.data;
    uint32_t len = (uint32_t)head[1] << 24 | (uint32_t)head[2] << 16 | (uint32_t)head[3] << 8 | head[4];
    if (head[0] != 0) {
        xHttpResponseAddTrailer(res, "grpc-accept-encoding", "identity");
        xGrpcFail(res, XGRPC_UNIMPLEMENTED, "compressed messages are not served");
        return false;
    }
    if (len > body.len - FRAME_HEAD) {
        xGrpcFail(res, XGRPC_INTERNAL, "message longer than the request body");
        return false;
    }
    if (len < body.len - FRAME_HEAD) {
        xGrpcFail(res, XGRPC_INTERNAL, "a unary call takes one message");
        return false;
    }
    message->data = body.data + FRAME_HEAD;
    message->len = len;
    return true;
}

xErrno xGrpcReply(xHttpResponse *res, const void *message, size_t len) {
    if (len > UINT32_MAX - FRAME_HEAD) return XERR_INVALID;
    char stack[STACK_REPLY], *frame = stack;
    if (len > sizeof stack - FRAME_HEAD && !(frame = malloc(len + FRAME_HEAD))) return XERR_NOMEM;
    frame[0] = 0;
    frame[1] = (char)(len >> 24);
    frame[2] = (char)(len >> 16);
    frame[3] = (char)(len >> 8);
    frame[4] = (char)len;
    if (len) memcpy(frame + FRAME_HEAD, message, len);
    xErrno err = xHttpResponseAddHeader(res, "content-type", CONTENT_TYPE);
    if (err == XOK) err = xHttpResponseAddTrailer(res, "grpc-status", "0");
    /* One write: the message goes out as one DATA frame, then the trailers. */
    if (err == XOK) err = xHttpResponseWrite(res, frame, len + FRAME_HEAD);
    if (frame != stack) free(frame);
    if (err != XOK) return err;
    return xHttpResponseEnd(res);
}

/* Percent-encodes what gRPC asks for (bytes outside 0x20–0x7e, and '%'). */
static void percent_encode(const char *in, char *out, size_t cap) {
    static const char HEX[] = "0123456789ABCDEF";
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)in; *p && o + 4 <= cap; p++) {
        if (*p >= 0x20 && *p <= 0x7e && *p != '%') {
            out[o++] = (char)*p;
        } else {
            out[o++] = '%';
            out[o++] = HEX[*p >> 4];
            out[o++] = HEX[*p & 15];
        }
    }
    out[o] = 0;
}

xErrno xGrpcFail(xHttpResponse *res, int status, const char *message) {
    if (status < 1 || status > 16) return XERR_INVALID;
    char code[4];
    code[0] = (char)('0' + status / 10);
    code[1] = (char)('0' + status % 10);
    code[2] = 0;
    xErrno err = xHttpResponseAddHeader(res, "content-type", CONTENT_TYPE);
    if (err == XOK) err = xHttpResponseAddTrailer(res, "grpc-status", status < 10 ? code + 1 : code);
    if (err == XOK && message && *message) {
        char encoded[MAX_STATUS_MESSAGE * 3 + 1];
        percent_encode(message, encoded, sizeof encoded);
        err = xHttpResponseAddTrailer(res, "grpc-message", encoded);
    }
    if (err != XOK) return err;
    return xHttpResponseEnd(res);
}
