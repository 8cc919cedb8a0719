/* frame.c — writing HTTP/2 frames into a connection's output queue, and the
 * padding rule every padded frame shares (frame.h). */
#include "xhttp/http2/frame.h"

#include <string.h>

bool xH2Unpad(const xH2Frame *f, size_t skip, const uint8_t **payload, size_t *len) {
    const uint8_t *p = f->payload;
    size_t n = f->length, pad = 0;
    if (f->flags & XH2_FLAG_PADDED) {
        if (n < 1) return false;
        pad = p[0];
        p++;
        n--;
    }
    /* §6.1, §6.2: padding as long as the rest of the payload or longer is an error. */
    if (n < skip || pad > n - skip) return false;
    *payload = p;
    *len = n - pad;
    return true;
}

xErrno xH2WriteFrame(xConn *conn, uint8_t type, uint8_t flags, int32_t stream_id, const void *payload,
                     size_t len) {
    uint8_t *p = (uint8_t *)xConnReserve(conn, XH2_FRAME_HEADER_LEN + len);
    if (!p) return XERR_NOMEM;
    p = xH2PutFrameHeader(p, (uint32_t)len, type, flags, stream_id);
    if (len) memcpy(p, payload, len);
    xConnCommit(conn, XH2_FRAME_HEADER_LEN + len);
    return XOK;
}

xErrno xH2WriteReset(xConn *conn, int32_t stream_id, xH2Error code) {
    uint8_t payload[4];
    xH2Put32(payload, code);
    return xH2WriteFrame(conn, XH2_RST_STREAM, 0, stream_id, payload, sizeof payload);
}

xErrno xH2WriteWindowUpdate(xConn *conn, int32_t stream_id, uint32_t increment) {
    uint8_t payload[4];
    xH2Put32(payload, increment);
    return xH2WriteFrame(conn, XH2_WINDOW_UPDATE, 0, stream_id, payload, sizeof payload);
}

xErrno xH2WriteGoaway(xConn *conn, int32_t last_stream_id, xH2Error code) {
    uint8_t payload[8];
    xH2Put32(xH2Put32(payload, (uint32_t)last_stream_id), code);
    return xH2WriteFrame(conn, XH2_GOAWAY, 0, 0, payload, sizeof payload);
}

xErrno xH2WriteSettings(xConn *conn, const uint32_t (*entries)[2], size_t count) {
    uint8_t payload[6 * 16];
    uint8_t *p = payload;
    for (size_t i = 0; i < count && i < 16; i++) {
        *p++ = (uint8_t)(entries[i][0] >> 8);
        *p++ = (uint8_t)entries[i][0];
        p = xH2Put32(p, entries[i][1]);
    }
    return xH2WriteFrame(conn, XH2_SETTINGS, 0, 0, payload, (size_t)(p - payload));
}
