/* fuzz_websocket_frames.c — the WebSocket frame reader and reassembler
 * (xhttp/websocket/frame.h) on arbitrary client bytes.
 *
 * Input: byte 0 picks how the rest arrives (pieces of 1..64 bytes, or all
 * at once), byte 1 the message limit, byte 2 whether permessage-deflate is
 * on; the rest is what the client sends. It is fed as a connection feeds
 * it: unconsumed bytes stay, the next piece is appended. Checked after
 * every call:
 *   - no more bytes consumed than given; only a reader that needs more
 *     consumes nothing, and then fewer than XWS_MAX_HEADER + XWS_MAX_CONTROL
 *     bytes wait (a data frame's payload moves into the reader);
 *   - a message is no longer than the limit; a text message that is not
 *     compressed is valid UTF-8; a compressed one only with deflate on;
 *   - control payloads are at most 125 bytes; a close's code is one a peer
 *     may send (or 1005 with no payload) and its reason is UTF-8;
 *   - a failure's code is 1002, 1007, 1009 or 1011, and nothing follows it. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"
#include "xhttp/websocket/frame.h"
#include "xhttp/websocket/utf8.h"

#define MAX_WAITING (XWS_MAX_HEADER + XWS_MAX_CONTROL)

static void check_event(const xWsReader *r, const xWsEvent *ev) {
    switch (ev->type) {
    case XWS_EV_MESSAGE:
        FUZZ_ASSERT(ev->len <= r->max_message, "message of %zu over %zu", ev->len, r->max_message);
        FUZZ_ASSERT(!ev->compressed || r->allow_compressed, "compressed message without deflate");
        if (!ev->binary && !ev->compressed)
            FUZZ_ASSERT(xUtf8Valid(ev->data, ev->len), "text message of %zu bytes is not UTF-8", ev->len);
        break;
    case XWS_EV_PING:
    case XWS_EV_PONG: FUZZ_ASSERT(ev->len <= XWS_MAX_CONTROL, "control payload of %zu", ev->len); break;
    case XWS_EV_CLOSE:
        FUZZ_ASSERT(ev->len <= XWS_MAX_CONTROL, "close payload of %zu", ev->len);
        FUZZ_ASSERT(ev->len == 0 ? ev->code == 1005 : xWsCloseCodeValid(ev->code), "close code %u", ev->code);
        FUZZ_ASSERT(ev->len < 2 || xUtf8Valid(ev->data + 2, ev->len - 2), "close reason not UTF-8");
        break;
    case XWS_EV_FAIL:
        FUZZ_ASSERT(ev->code == 1002 || ev->code == 1007 || ev->code == 1009 || ev->code == 1011,
                    "fail code %u", ev->code);
        break;
    case XWS_EV_NEED_MORE: break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 3) return 0;
    size_t step = data[0] < 192 ? (size_t)(1 + data[0] % 64) : size;
    xWsReader reader = {.max_message = 1 + (size_t)data[1] * 97, .allow_compressed = data[2] & 1};
    data += 3;
    size -= 3;
    char *buf = malloc(size + 1);
    size_t have = 0, given = 0;
    bool failed = false;
    while (!failed && (given < size || have > 0)) {
        size_t piece = size - given < step ? size - given : step;
        memcpy(buf + have, data + given, piece);
        have += piece;
        given += piece;
        for (;;) {
            xWsEvent ev;
            size_t used = xWsReaderNext(&reader, buf, have, &ev);
            FUZZ_ASSERT(used <= have, "consumed %zu of %zu", used, have);
            check_event(&reader, &ev);
            memmove(buf, buf + used, have - used);
            have -= used;
            if (ev.type == XWS_EV_FAIL) {
                failed = true;
                break;
            }
            if (ev.type == XWS_EV_NEED_MORE && used == 0) {
                FUZZ_ASSERT(have < MAX_WAITING, "%zu bytes wait for more", have);
                break;
            }
            if (have == 0) break;
        }
        if (piece == 0) break;
    }
    free(buf);
    xWsReaderFree(&reader);
    return 0;
}
