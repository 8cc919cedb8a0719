/* frame.h — HTTP/2 frames (RFC 9113 §4, §6): the 9-byte header read in place
 * from the connection's input, and frames written straight into its output
 * queue. Nothing here keeps state: a frame's payload is a view into the read
 * buffer, and a written frame is bytes in the queue. */
#ifndef XHTTP_HTTP2_FRAME_H
#define XHTTP_HTTP2_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "xnet/connection.h"

#define XH2_FRAME_HEADER_LEN 9
/* SETTINGS_MAX_FRAME_SIZE's floor: every frame we send or accept fits it. */
#define XH2_DEFAULT_FRAME_SIZE 16384
#define XH2_MAX_FRAME_SIZE_LIMIT 16777215u
#define XH2_MAX_WINDOW 2147483647
#define XH2_DEFAULT_WINDOW 65535

/** Frame types (RFC 9113 §6); handlers are indexed by them. */
enum {
    XH2_DATA,
    XH2_HEADERS,
    XH2_PRIORITY,
    XH2_RST_STREAM,
    XH2_SETTINGS,
    XH2_PUSH_PROMISE,
    XH2_PING,
    XH2_GOAWAY,
    XH2_WINDOW_UPDATE,
    XH2_CONTINUATION,
    XH2_FRAME_TYPES
};

/** Flags. */
enum {
    XH2_FLAG_END_STREAM = 0x1,
    XH2_FLAG_ACK = 0x1,
    XH2_FLAG_END_HEADERS = 0x4,
    XH2_FLAG_PADDED = 0x8,
    XH2_FLAG_PRIORITY = 0x20,
};

/** Error codes (RFC 9113 §7). */
typedef enum xH2Error {
    XH2_NO_ERROR,
    XH2_PROTOCOL_ERROR,
    XH2_INTERNAL_ERROR,
    XH2_FLOW_CONTROL_ERROR,
    XH2_SETTINGS_TIMEOUT,
    XH2_STREAM_CLOSED,
    XH2_FRAME_SIZE_ERROR,
    XH2_REFUSED_STREAM,
    XH2_CANCEL,
    XH2_COMPRESSION_ERROR,
    XH2_CONNECT_ERROR,
    XH2_ENHANCE_YOUR_CALM,
    XH2_INADEQUATE_SECURITY,
    XH2_HTTP_1_1_REQUIRED,
} xH2Error;

/** Settings (RFC 9113 §6.5.2, RFC 8441 §3, RFC 9218 §2.1). */
enum {
    XH2_SETTINGS_HEADER_TABLE_SIZE = 1,
    XH2_SETTINGS_ENABLE_PUSH = 2,
    XH2_SETTINGS_MAX_CONCURRENT_STREAMS = 3,
    XH2_SETTINGS_INITIAL_WINDOW_SIZE = 4,
    XH2_SETTINGS_MAX_FRAME_SIZE = 5,
    XH2_SETTINGS_MAX_HEADER_LIST_SIZE = 6,
    XH2_SETTINGS_ENABLE_CONNECT_PROTOCOL = 8,
    XH2_SETTINGS_NO_RFC7540_PRIORITIES = 9,
};

/** A frame as it lies in the input: header fields and a view of its payload. */
typedef struct xH2Frame {
    uint32_t length;
    uint8_t type;
    uint8_t flags;
    int32_t stream_id;
    const uint8_t *payload;
} xH2Frame;

static inline uint32_t xH2Get32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline uint8_t *xH2Put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
    return p + 4;
}

/** Reads the header at p (9 bytes); the payload follows it. */
static inline xH2Frame xH2ReadFrame(const uint8_t *p) {
    return (xH2Frame){(uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2], p[3], p[4],
                      (int32_t)(xH2Get32(p + 5) & 0x7fffffffu), p + XH2_FRAME_HEADER_LEN};
}

/** Writes a frame header at p; returns where the payload goes. */
static inline uint8_t *xH2PutFrameHeader(uint8_t *p, uint32_t length, uint8_t type, uint8_t flags,
                                         int32_t stream_id) {
    p[0] = (uint8_t)(length >> 16);
    p[1] = (uint8_t)(length >> 8);
    p[2] = (uint8_t)length;
    p[3] = type;
    p[4] = flags;
    return xH2Put32(p + 5, (uint32_t)stream_id);
}

/** Strips a padded frame's padding (RFC 9113 §6.1): payload and len become
 *  what lies between the Pad Length octet (plus skip bytes after it) and the
 *  padding. False when the padding does not fit: a PROTOCOL_ERROR. */
bool xH2Unpad(const xH2Frame *f, size_t skip, const uint8_t **payload, size_t *len);

/** Queues a frame whose payload is len bytes at payload. */
xErrno xH2WriteFrame(xConn *conn, uint8_t type, uint8_t flags, int32_t stream_id, const void *payload,
                     size_t len);

/** Queues RST_STREAM. */
xErrno xH2WriteReset(xConn *conn, int32_t stream_id, xH2Error code);

/** Queues WINDOW_UPDATE. */
xErrno xH2WriteWindowUpdate(xConn *conn, int32_t stream_id, uint32_t increment);

/** Queues GOAWAY with no debug data. */
xErrno xH2WriteGoaway(xConn *conn, int32_t last_stream_id, xH2Error code);

/** Queues SETTINGS with count (id, value) pairs. */
xErrno xH2WriteSettings(xConn *conn, const uint32_t (*entries)[2], size_t count);

#endif
