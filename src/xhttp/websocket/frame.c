/* frame.c — reading a client's frames and writing the server's (frame.h). */
#include "xhttp/websocket/frame.h"

#include <stdlib.h>
#include <string.h>

/* Above this the message buffer is freed once its message is delivered, so
 * an idle connection does not keep the memory of its largest message. */
#define XWS_KEEP_BUFFER 16384

static size_t fail(xWsEvent *ev, uint16_t code, size_t used) {
    ev->type = XWS_EV_FAIL;
    ev->code = code;
    return used;
}

static void unmask(char *p, size_t n, const uint8_t mask[4], uint8_t pos) {
    uint8_t m[4] = {mask[pos & 3], mask[(pos + 1) & 3], mask[(pos + 2) & 3], mask[(pos + 3) & 3]};
    size_t i = 0;
    uint32_t word;
    memcpy(&word, m, 4);
    uint64_t wide = (uint64_t)word << 32 | word;
    for (; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, p + i, 8);
        v ^= wide;
        memcpy(p + i, &v, 8);
    }
    if (i + 4 <= n) { /* most chat-sized messages end in a few words */
        uint32_t v;
        memcpy(&v, p + i, 4);
        v ^= word;
        memcpy(p + i, &v, 4);
        i += 4;
    }
    for (; i < n; i++) p[i] ^= m[i & 3];
}

bool xWsCloseCodeValid(unsigned code) {
    if (code >= 3000 && code <= 4999) return true;
    return code >= 1000 && code <= 1014 && code != 1004 && code != 1005 && code != 1006;
}

static bool is_control(unsigned opcode) { return opcode & 0x8; }

static bool known_opcode(unsigned opcode) {
    return opcode <= XWS_OP_BINARY || (opcode >= XWS_OP_CLOSE && opcode <= XWS_OP_PONG);
}

/* A control frame whose payload p[0, n) is whole. */
static void control(unsigned opcode, char *p, size_t n, xWsEvent *ev) {
    ev->data = p;
    ev->len = n;
    if (opcode == XWS_OP_PING) {
        ev->type = XWS_EV_PING;
    } else if (opcode == XWS_OP_PONG) {
        ev->type = XWS_EV_PONG;
    } else if (n == 0) {
        ev->type = XWS_EV_CLOSE;
        ev->code = 1005;
    } else if (n == 1) {
        fail(ev, 1002, 0);
    } else {
        unsigned code = (unsigned)(uint8_t)p[0] << 8 | (uint8_t)p[1];
        if (!xWsCloseCodeValid(code)) {
            fail(ev, 1002, 0);
        } else if (!xUtf8Valid(p + 2, n - 2)) {
            fail(ev, 1007, 0);
        } else {
            ev->type = XWS_EV_CLOSE;
            ev->code = (uint16_t)code;
        }
    }
}

static bool reserve(xWsReader *r, size_t more) {
    size_t need = r->msg_len + more;
    if (need <= r->msg_cap) return true;
    size_t cap = r->msg_cap ? r->msg_cap : 256;
    while (cap < need) cap *= 2;
    if (cap > r->max_message) cap = r->max_message;
    char *p = realloc(r->msg, cap);
    if (!p) return false;
    r->msg = p;
    r->msg_cap = cap;
    return true;
}

static bool checks_utf8(const xWsReader *r) { return r->msg_opcode == XWS_OP_TEXT && !r->msg_compressed; }

/* Hands over the reassembled message. */
static void deliver(xWsReader *r, xWsEvent *ev) {
    ev->type = XWS_EV_MESSAGE;
    ev->binary = r->msg_opcode == XWS_OP_BINARY;
    ev->compressed = r->msg_compressed;
    ev->data = r->msg;
    ev->len = r->msg_len;
    r->msg_opcode = 0;
}

/* Takes what has arrived of an open data frame's payload. */
static size_t take_payload(xWsReader *r, char *in, size_t len, xWsEvent *ev) {
    size_t n = r->frame_left < len ? (size_t)r->frame_left : len;
    if (n) { /* r->msg is NULL while every frame so far was empty */
        char *dst = r->msg + r->msg_len;
        memcpy(dst, in, n);
        unmask(dst, n, r->mask, r->mask_pos);
        r->mask_pos = (uint8_t)((r->mask_pos + n) & 3);
        r->msg_len += n;
        r->frame_left -= n;
        if (checks_utf8(r) && !xUtf8Feed(&r->utf8, (const uint8_t *)dst, n)) return fail(ev, 1007, n);
    }
    if (r->frame_left > 0) {
        ev->type = XWS_EV_NEED_MORE;
        return n;
    }
    r->frame_open = false;
    if (!r->frame_fin) {
        ev->type = XWS_EV_NEED_MORE;
        return n;
    }
    if (checks_utf8(r) && !xUtf8Complete(&r->utf8)) return fail(ev, 1007, n);
    deliver(r, ev);
    return n;
}

size_t xWsReaderNext(xWsReader *r, char *in, size_t len, xWsEvent *ev) {
    memset(ev, 0, sizeof *ev);
    if (r->msg_opcode == 0 && r->msg_cap > XWS_KEEP_BUFFER) {
        free(r->msg);
        r->msg = NULL;
        r->msg_cap = 0;
    }
    if (r->frame_open) return take_payload(r, in, len, ev);
    if (len < 2) return 0;
    const uint8_t *b = (const uint8_t *)in;
    bool fin = b[0] & 0x80, rsv1 = b[0] & 0x40;
    unsigned opcode = b[0] & 0x0F;
    if ((b[0] & 0x30) || !known_opcode(opcode)) return fail(ev, 1002, 0);
    if (!(b[1] & 0x80)) return fail(ev, 1002, 0); /* clients must mask (§5.1) */
    size_t head = 2;
    uint64_t plen = b[1] & 0x7F;
    if (plen == 126) {
        if (len < 4) return 0;
        plen = (uint64_t)b[2] << 8 | b[3];
        head = 4;
    } else if (plen == 127) {
        if (len < 10) return 0;
        plen = 0;
        for (int i = 2; i < 10; i++) plen = plen << 8 | b[i];
        if (plen >> 63) return fail(ev, 1002, 0);
        head = 10;
    }
    if (is_control(opcode)) {
        if (!fin || plen > XWS_MAX_CONTROL || rsv1) return fail(ev, 1002, 0);
    } else if (opcode == XWS_OP_CONTINUATION) {
        if (!r->msg_opcode || rsv1) return fail(ev, 1002, 0);
    } else if (r->msg_opcode || (rsv1 && !r->allow_compressed)) {
        return fail(ev, 1002, 0);
    }
    if (!is_control(opcode) && plen > r->max_message - (opcode ? 0 : r->msg_len)) return fail(ev, 1009, 0);
    if (len < head + 4) return 0;
    memcpy(r->mask, b + head, 4);
    head += 4;
    if (is_control(opcode)) {
        if (len - head < plen) return 0;
        unmask(in + head, (size_t)plen, r->mask, 0);
        control(opcode, in + head, (size_t)plen, ev);
        return head + (size_t)plen;
    }
    if (opcode != XWS_OP_CONTINUATION) {
        r->msg_opcode = (uint8_t)opcode;
        r->msg_compressed = rsv1;
        r->msg_len = 0;
        memset(&r->utf8, 0, sizeof r->utf8);
        if (fin && len - head >= plen) { /* the whole message is here: no copy */
            char *p = in + head;
            unmask(p, (size_t)plen, r->mask, 0);
            if (checks_utf8(r) && !xUtf8Valid(p, (size_t)plen)) return fail(ev, 1007, 0);
            deliver(r, ev);
            ev->data = p;
            ev->len = (size_t)plen;
            return head + (size_t)plen;
        }
    }
    if (!reserve(r, (size_t)plen)) return fail(ev, 1011, 0);
    r->frame_open = true;
    r->frame_fin = fin;
    r->frame_left = plen;
    r->mask_pos = 0;
    return head + take_payload(r, in + head, len - head, ev);
}

void xWsReaderFree(xWsReader *r) {
    free(r->msg);
    r->msg = NULL;
    r->msg_cap = r->msg_len = 0;
}

size_t xWsWriteHeader(uint8_t *out, unsigned opcode, bool fin, bool rsv1, uint64_t len) {
    out[0] = (uint8_t)((fin ? 0x80 : 0) | (rsv1 ? 0x40 : 0) | opcode);
    if (len < 126) {
        out[1] = (uint8_t)len;
        return 2;
    }
    if (len <= 0xFFFF) {
        out[1] = 126;
        out[2] = (uint8_t)(len >> 8);
        out[3] = (uint8_t)len;
        return 4;
    }
    out[1] = 127;
    for (int i = 0; i < 8; i++) out[2 + i] = (uint8_t)(len >> (56 - 8 * i));
    return 10;
}
