/* frame.h — RFC 6455 frames, apart from any transport: a reader that takes
 * a client's bytes and yields whole messages and control frames (checking
 * every rule a server must), and the header of a frame the server sends.
 * It reads and writes plain memory, so HTTP/1.1's upgrade and
 * an HTTP/2 stream (RFC 8441) can both feed it. */
#ifndef XHTTP_WEBSOCKET_FRAME_H
#define XHTTP_WEBSOCKET_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "xhttp/websocket/utf8.h"

enum {
    XWS_OP_CONTINUATION = 0x0,
    XWS_OP_TEXT = 0x1,
    XWS_OP_BINARY = 0x2,
    XWS_OP_CLOSE = 0x8,
    XWS_OP_PING = 0x9,
    XWS_OP_PONG = 0xA,
};

/** The longest frame header: 2 bytes, a 64-bit length, a mask. */
#define XWS_MAX_HEADER 14
/** Control frames carry at most this much (RFC 6455 §5.5). */
#define XWS_MAX_CONTROL 125

typedef enum xWsEventType {
    XWS_EV_NEED_MORE, /**< nothing complete: feed more bytes */
    XWS_EV_MESSAGE,   /**< a whole data message */
    XWS_EV_PING,
    XWS_EV_PONG,
    XWS_EV_CLOSE, /**< code (1005 when absent) and reason in data after the code */
    XWS_EV_FAIL,  /**< the client broke the protocol: close with code */
} xWsEventType;

typedef struct xWsEvent {
    xWsEventType type;
    bool binary;     /**< MESSAGE: binary rather than text */
    bool compressed; /**< MESSAGE: RSV1 was set; data still needs inflating
                          (and, for text, UTF-8 checking) */
    char *data;      /**< the payload, unmasked: in the fed bytes or the reader's
                          buffer; valid until the next call */
    size_t len;
    uint16_t code; /**< CLOSE: the peer's code; FAIL: the code to close with */
} xWsEvent;

/** A client's frames being read: the message being reassembled, and a data
 *  frame whose payload is still arriving. Zero it, then set the limits. */
typedef struct xWsReader {
    size_t max_message;    /**< reassembled bytes beyond which: FAIL 1009 */
    bool allow_compressed; /**< permessage-deflate is on: RSV1 may start a message */
    uint8_t msg_opcode;    /* TEXT or BINARY while a message is open, else 0 */
    bool msg_compressed;
    bool frame_open; /* a data frame's payload is still arriving */
    bool frame_fin;
    uint8_t mask[4];
    uint8_t mask_pos;
    uint64_t frame_left;
    xUtf8 utf8;
    char *msg; /* the reassembled message */
    size_t msg_len, msg_cap;
} xWsReader;

/** Reads from in[0, len), which it may change (payloads are unmasked in
 *  place), until one event: fills ev and returns the bytes consumed. A
 *  payload of a data frame that is not whole yet is taken into the reader,
 *  so in never needs more room than XWS_MAX_HEADER + XWS_MAX_CONTROL. After
 *  FAIL the reader must not be fed again. */
size_t xWsReaderNext(xWsReader *r, char *in, size_t len, xWsEvent *ev);

/** Frees the reader's buffer. */
void xWsReaderFree(xWsReader *r);

/** Writes the header of an unmasked server frame into out (room for
 *  XWS_MAX_HEADER - 4) and returns its length. */
size_t xWsWriteHeader(uint8_t *out, unsigned opcode, bool fin, bool rsv1, uint64_t len);

/** True for a close code a peer may send (RFC 6455 §7.4). */
bool xWsCloseCodeValid(unsigned code);

#endif
