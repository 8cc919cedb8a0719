/* frame.c — HTTP/3 framing (RFC 9114 §7): variable-length integers, the
 * per-stream frame reader, the frame writers and SETTINGS of frame.h. */
#include "xhttp/http3/frame.h"

#include <string.h>

/* ---- variable-length integers (RFC 9000 §16) ---- */

size_t xH3VarintSize(uint64_t v) {
    if (v < 64) return 1;
    if (v < 16384) return 2;
    if (v < (UINT64_C(1) << 30)) return 4;
    return 8;
}

uint8_t *xH3VarintWrite(uint8_t *p, uint64_t v) {
    size_t n = xH3VarintSize(v);
    static const uint8_t prefix[9] = {[1] = 0x00, [2] = 0x40, [4] = 0x80, [8] = 0xc0};
    for (size_t i = n; i-- > 0;) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
    p[0] |= prefix[n];
    return p + n;
}

size_t xH3VarintRead(const uint8_t *in, size_t len, uint64_t *v) {
    if (len == 0) return 0;
    size_t n = (size_t)1 << (in[0] >> 6);
    if (len < n) return 0;
    uint64_t x = in[0] & 0x3f;
    for (size_t i = 1; i < n; i++) x = x << 8 | in[i];
    *v = x;
    return n;
}

/* ---- the reader ---- */

void xH3FrameReaderInit(xH3FrameReader *r, xH3StreamKind kind, size_t max_payload) {
    *r = (xH3FrameReader){
        .state = kind == XH3_STREAM_CONTROL ? XH3_READER_AWAIT_SETTINGS : XH3_READER_FRAME_START,
        .kind = kind,
        .max_payload = max_payload,
    };
}

static bool is_known(uint64_t type) {
    switch (type) {
    case XH3_FRAME_DATA:
    case XH3_FRAME_HEADERS:
    case XH3_FRAME_CANCEL_PUSH:
    case XH3_FRAME_SETTINGS:
    case XH3_FRAME_PUSH_PROMISE:
    case XH3_FRAME_GOAWAY:
    case XH3_FRAME_MAX_PUSH_ID: return true;
    default: return false;
    }
}

/* RFC 9114 §7.2: which frames this stream may carry now; XH3_NO_ERROR when it may. */
static xH3Error unexpected(const xH3FrameReader *r, uint64_t type) {
    switch (type) {
    case 0x2: /* HTTP/2's PRIORITY, PING, WINDOW_UPDATE and CONTINUATION (§7.2.8) */
    case 0x6:
    case 0x8:
    case 0x9: return XH3_FRAME_UNEXPECTED;
    default: break;
    }
    if (r->kind == XH3_STREAM_CONTROL) {
        if (r->state == XH3_READER_AWAIT_SETTINGS)
            return type == XH3_FRAME_SETTINGS ? XH3_NO_ERROR : XH3_MISSING_SETTINGS; /* §6.2.1 */
        switch (type) {
        case XH3_FRAME_DATA:
        case XH3_FRAME_HEADERS:
        case XH3_FRAME_PUSH_PROMISE:
        case XH3_FRAME_SETTINGS: return XH3_FRAME_UNEXPECTED; /* SETTINGS only once (§7.2.4) */
        default: return XH3_NO_ERROR;
        }
    }
    switch (type) {
    case XH3_FRAME_CANCEL_PUSH:
    case XH3_FRAME_SETTINGS:
    case XH3_FRAME_GOAWAY:
    case XH3_FRAME_MAX_PUSH_ID:
    case XH3_FRAME_PUSH_PROMISE: return XH3_FRAME_UNEXPECTED; /* a client never pushes (§7.2.5) */
    default: return XH3_NO_ERROR;
    }
}

static xH3ReadStatus fail(xH3FrameReader *r, xH3Frame *f, xH3Error error) {
    r->state = XH3_READER_FAILED;
    r->error = error;
    f->error = error;
    return XH3_READ_ERROR;
}

/* A frame whose payload is one integer and nothing else (§7.1: no bytes more or fewer). */
static bool read_id(xStr payload, uint64_t *id) {
    size_t n = xH3VarintRead((const uint8_t *)payload.data, payload.len, id);
    return n != 0 && n == payload.len;
}

/* At a frame's start: reads its header and either returns it whole, starts its DATA or
 * its skipping, or asks for more (consuming nothing of it). */
static xH3ReadStatus frame_start(xH3FrameReader *r, const uint8_t *p, const uint8_t *end,
                                 const uint8_t **next, xH3Frame *f) {
    uint64_t type, length;
    size_t a = xH3VarintRead(p, (size_t)(end - p), &type), b;
    if (!a || !(b = xH3VarintRead(p + a, (size_t)(end - p) - a, &length))) return XH3_READ_MORE;
    xH3Error e = unexpected(r, type);
    if (e != XH3_NO_ERROR) return fail(r, f, e);
    const uint8_t *payload = p + a + b;
    if (type == XH3_FRAME_DATA || !is_known(type)) {
        r->state = type == XH3_FRAME_DATA ? XH3_READER_IN_DATA : XH3_READER_SKIPPING;
        r->left = length;
        *next = payload;
        return XH3_READ_MORE; /* the caller's loop goes on in the new state */
    }
    if (length > r->max_payload) return fail(r, f, XH3_EXCESSIVE_LOAD);
    if (length > (uint64_t)(end - payload)) return XH3_READ_MORE;
    *f = (xH3Frame){.type = type, .payload = {(const char *)payload, (size_t)length}};
    if ((type == XH3_FRAME_GOAWAY || type == XH3_FRAME_CANCEL_PUSH || type == XH3_FRAME_MAX_PUSH_ID) &&
        !read_id(f->payload, &f->id))
        return fail(r, f, XH3_FRAME_ERROR);
    r->state = XH3_READER_FRAME_START;
    *next = payload + length;
    return XH3_READ_FRAME;
}

xH3ReadStatus xH3FrameRead(xH3FrameReader *r, const uint8_t *in, size_t len, size_t *consumed, xH3Frame *f) {
    const uint8_t *p = in, *end = in + len;
    *consumed = 0;
    for (;;) {
        switch (r->state) {
        case XH3_READER_FAILED: f->error = r->error; return XH3_READ_ERROR;
        case XH3_READER_IN_DATA: {
            size_t n = r->left < (uint64_t)(end - p) ? (size_t)r->left : (size_t)(end - p);
            if (n == 0 && r->left) return XH3_READ_MORE;
            *f = (xH3Frame){.type = XH3_FRAME_DATA, .payload = {(const char *)p, n}};
            r->left -= n;
            f->end_of_frame = r->left == 0;
            if (f->end_of_frame) r->state = XH3_READER_FRAME_START;
            *consumed = (size_t)(p + n - in);
            return XH3_READ_DATA;
        }
        case XH3_READER_SKIPPING: {
            size_t n = r->left < (uint64_t)(end - p) ? (size_t)r->left : (size_t)(end - p);
            p += n;
            r->left -= n;
            *consumed = (size_t)(p - in);
            if (r->left) return XH3_READ_MORE;
            r->state = XH3_READER_FRAME_START;
            break;
        }
        case XH3_READER_AWAIT_SETTINGS:
        case XH3_READER_FRAME_START: {
            const uint8_t *next = p;
            xH3ReadStatus s = frame_start(r, p, end, &next, f);
            if (s != XH3_READ_MORE) {
                if (s == XH3_READ_FRAME) *consumed = (size_t)(next - in);
                return s;
            }
            if (next == p) return XH3_READ_MORE; /* a partial header or whole-frame */
            p = next;
            *consumed = (size_t)(p - in);
            break;
        }
        }
    }
}

/* ---- writers ---- */

uint8_t *xH3FrameWriteHeader(uint8_t *p, uint64_t type, uint64_t length) {
    return xH3VarintWrite(xH3VarintWrite(p, type), length);
}

uint8_t *xH3FrameWriteId(uint8_t *p, xH3FrameType type, uint64_t id) {
    return xH3VarintWrite(xH3FrameWriteHeader(p, type, xH3VarintSize(id)), id);
}

/* ---- SETTINGS (RFC 9114 §7.2.4, RFC 9204 §5, RFC 9220 §3, RFC 9297 §2.1.1) ---- */

enum {
    SETTING_QPACK_MAX_TABLE_CAPACITY = 0x01,
    SETTING_MAX_FIELD_SECTION_SIZE = 0x06,
    SETTING_QPACK_BLOCKED_STREAMS = 0x07,
    SETTING_ENABLE_CONNECT_PROTOCOL = 0x08,
    SETTING_H3_DATAGRAM = 0x33,
};

void xH3SettingsDefaults(xH3Settings *s) { *s = (xH3Settings){.max_field_section_size = XH3_VARINT_MAX}; }

xH3Error xH3SettingsParse(xStr payload, xH3Settings *s) {
    xH3SettingsDefaults(s);
    const uint8_t *p = (const uint8_t *)payload.data, *end = p + payload.len;
    unsigned seen = 0;
    while (p < end) {
        uint64_t id, value;
        size_t a = xH3VarintRead(p, (size_t)(end - p), &id), b;
        if (!a || !(b = xH3VarintRead(p + a, (size_t)(end - p) - a, &value))) return XH3_FRAME_ERROR;
        p += a + b;
        unsigned bit;
        switch (id) {
        case SETTING_QPACK_MAX_TABLE_CAPACITY: bit = 1, s->qpack_max_table_capacity = value; break;
        case SETTING_MAX_FIELD_SECTION_SIZE: bit = 2, s->max_field_section_size = value; break;
        case SETTING_QPACK_BLOCKED_STREAMS: bit = 4, s->qpack_blocked_streams = value; break;
        case SETTING_ENABLE_CONNECT_PROTOCOL:
            if (value > 1) return XH3_SETTINGS_ERROR;
            bit = 8, s->enable_connect_protocol = value;
            break;
        case SETTING_H3_DATAGRAM:
            if (value > 1) return XH3_SETTINGS_ERROR;
            bit = 16, s->h3_datagram = value;
            break;
        case 0x02: /* HTTP/2's ENABLE_PUSH, MAX_CONCURRENT_STREAMS, INITIAL_WINDOW_SIZE and */
        case 0x03: /* MAX_FRAME_SIZE are reserved in HTTP/3 (§7.2.4.1) */
        case 0x04:
        case 0x05: return XH3_SETTINGS_ERROR;
        default: continue; /* unknown and reserved identifiers are ignored */
        }
        if (seen & bit) return XH3_SETTINGS_ERROR;
        seen |= bit;
    }
    return XH3_NO_ERROR;
}

static uint8_t *put_setting(uint8_t *p, uint64_t id, uint64_t value) {
    return xH3VarintWrite(xH3VarintWrite(p, id), value);
}

uint8_t *xH3SettingsWrite(uint8_t *p, const xH3Settings *s) {
    uint8_t payload[5 * 2 * XH3_VARINT_MAX_SIZE], *q = payload;
    if (s->qpack_max_table_capacity)
        q = put_setting(q, SETTING_QPACK_MAX_TABLE_CAPACITY, s->qpack_max_table_capacity);
    if (s->max_field_section_size != XH3_VARINT_MAX)
        q = put_setting(q, SETTING_MAX_FIELD_SECTION_SIZE, s->max_field_section_size);
    if (s->qpack_blocked_streams) q = put_setting(q, SETTING_QPACK_BLOCKED_STREAMS, s->qpack_blocked_streams);
    if (s->enable_connect_protocol) q = put_setting(q, SETTING_ENABLE_CONNECT_PROTOCOL, 1);
    if (s->h3_datagram) q = put_setting(q, SETTING_H3_DATAGRAM, 1);
    size_t n = (size_t)(q - payload);
    p = xH3FrameWriteHeader(p, XH3_FRAME_SETTINGS, n);
    memcpy(p, payload, n);
    return p + n;
}
