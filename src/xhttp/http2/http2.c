/* http2.c — HTTP/2 on a connection (RFC 9113): the session. Frames are read
 * in place from the connection's input and handled by a table indexed by
 * type; header blocks are HPACK-decoded (hpack.h) here, for the connection's
 * one decoder, and handed to the stream they open or end (stream.c);
 * settings, pings, GOAWAY and window updates are the session's own. Streams
 * and their states are stream.c's; what handlers answer is framed by
 * respond.c (http2_internal.h says who does what).
 *
 * A read is handled whole; the requests it completes are collected and only
 * then handed to their handlers, so handlers never run in the middle of a
 * frame. Every frame of a loop turn (acks, resets, window updates, response
 * heads and bodies) is written straight into the connection's output queue
 * (frame.h), which is flushed once at the end of the turn, by the pump.
 *
 * Flow control: a buffered request body counts as consumed as it arrives,
 * bounded by max_body_size; a streaming route's body only once its reader has
 * taken it, so a paused or slow reader holds the client to its stream's
 * window; the connection's window is accounted in held_window.h. A window is
 * returned by WINDOW_UPDATE once half of it is consumed. */
#include "xhttp/http2/http2.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <xbase/log.h>

#include "xbase/text/base64.h"
#include "xhttp/http2/http2_internal.h"

/* Between the two GOAWAYs of a graceful stop. */
#define XH2_GOAWAY_GRACE_MS 1000
/* Entries of one SETTINGS frame before it counts as abuse. */
#define XH2_MAX_SETTINGS_ENTRIES 32
/* Frames that carry nothing (empty DATA, empty CONTINUATION) tolerated
 * between two requests: CVE-2019-9518. */
#define XH2_MAX_EMPTY_FRAMES 1024
/* Pseudo-headers a request may add to its regular fields. */
#define XH2_PSEUDO_FIELDS 8

typedef bool (*xH2Handler)(xHttp2 *h2, const xH2Frame *f);

static const xConnProtocol h2_protocol;

/* ---- Errors ---- */

bool xH2ConnError(xHttp2 *h2, xH2Error code) {
    if (h2->failed) return false;
    XLOG_DEBUG("http2: connection error %d", (int)code);
    h2->failed = true;
    xH2WriteGoaway(h2->conn, h2->highest_id, code);
    xConnCloseAfterFlush(h2->conn);
    return false;
}

bool xH2OweControl(xHttp2 *h2) {
    if (++h2->control_queued > h2->conf->http2_max_control_queue)
        return xH2ConnError(h2, XH2_ENHANCE_YOUR_CALM);
    return true;
}

/* ---- Stream ids ---- */

static bool was_skipped(const xHttp2 *h2, int32_t id) {
    for (size_t i = 0; i < XH2_SKIPPED_RANGES; i++)
        if (h2->skipped[i].first && id >= h2->skipped[i].first && id <= h2->skipped[i].last) return true;
    return false;
}

/* RFC 9113 §5.1: a stream id above every one the client opened is idle. */
static bool is_idle(const xHttp2 *h2, int32_t id) { return !(id & 1) || id > h2->highest_id; }

/* ---- Header blocks ---- */

/* A header block for an id not in the table: a new stream's, if the id may
 * open one and the stream limit allows it (rv from xHpackDecode). */
static bool new_stream_block(xHttp2 *h2, int32_t id, uint8_t flags, const xHpackBlock *b, int rv) {
    if (id <= h2->highest_id) {
        if (xH2WasReset(h2, id)) return true; /* sent before our reset reached it */
        return xH2ConnError(h2, was_skipped(h2, id) ? XH2_PROTOCOL_ERROR : XH2_STREAM_CLOSED);
    }
    if (h2->final_goaway && id > h2->last_id) return true; /* after our GOAWAY: ignored */
    if (id > h2->highest_id + 2) {
        h2->skipped[h2->skipped_next] = (xH2IdRange){h2->highest_id + 2, id - 2};
        h2->skipped_next = (h2->skipped_next + 1) % XH2_SKIPPED_RANGES;
    }
    h2->highest_id = id;
    h2->empty_frames = 0;
    if (h2->block_self_dep) return xH2StreamError(h2, id, XH2_PROTOCOL_ERROR);
    if (h2->table.count >= h2->conf->http2_max_streams) return xH2StreamError(h2, id, XH2_REFUSED_STREAM);
    return xH2StreamOpen(h2, id, flags, b, rv);
}

/* Decodes a header block and hands it on: a new stream's head, or trailers. */
static bool decode_block(xHttp2 *h2, xH2Stream *s, int32_t id, uint8_t flags, const uint8_t *data,
                         size_t len) {
    xBufferPool *pool = &xHttpContextOf(h2->conn)->net.buffers;
    if (xBufferPoolAcquire(pool, &h2->block_fields) != XOK ||
        xBufferPoolAcquire(pool, &h2->block_scratch) != XOK)
        return xH2ConnError(h2, XH2_INTERNAL_ERROR);
    xBuffer fields = h2->block_fields, scratch = h2->block_scratch;
    size_t max_fields = h2->conf->max_headers + XH2_PSEUDO_FIELDS;
    if (max_fields > fields.cap / sizeof(xHpackField)) max_fields = fields.cap / sizeof(xHpackField);
    xHpackBlock b = {(xHpackField *)fields.data, max_fields, 0, scratch.data, scratch.cap,
                     h2->conf->max_header_size,  0,          0};
    int rv = xHpackDecode(&h2->decoder, data, len, &b);
    if (rv == XHPACK_ERROR) return xH2ConnError(h2, XH2_COMPRESSION_ERROR);
    h2->progress += len;
    return s ? xH2StreamTrailers(h2, s, flags, &b, rv) : new_stream_block(h2, id, flags, &b, rv);
}

static bool end_block(xHttp2 *h2, const uint8_t *data, size_t len) {
    int32_t id = h2->block_id;
    uint8_t flags = h2->block_flags;
    h2->block_id = 0;
    xH2Stream *s = xH2TableFind(&h2->table, id);
    bool ok;
    /* A new stream's block that is the shared head's again (the same bytes, the
     * table as it was) would decode to the same fields and leave the table as it
     * is: the stream takes the shared head, and nothing is decoded. */
    if (!s && h2->shared_head && xHpackRemembered(&h2->decoder, data, len) == h2->shared_head->block) {
        h2->progress += len;
        ok = new_stream_block(h2, id, flags, &(xHpackBlock){.remembered = h2->shared_head->block}, XHPACK_OK);
    } else {
        ok = decode_block(h2, s, id, flags, data, len);
    }
    h2->block.len = 0;
    if (h2->block.cap > XH2_DEFAULT_FRAME_SIZE) xBufferFree(&h2->block);
    return ok;
}

/* ---- Frame handlers: one per type, each given a whole frame ---- */

static bool on_data(xHttp2 *h2, const xH2Frame *f) {
    const uint8_t *p;
    size_t n;
    if (!f->stream_id || !xH2Unpad(f, 0, &p, &n)) return xH2ConnError(h2, XH2_PROTOCOL_ERROR);
    xH2Stream *s = xH2TableFind(&h2->table, f->stream_id);
    if (!s && is_idle(h2, f->stream_id)) return xH2ConnError(h2, XH2_PROTOCOL_ERROR);
    if (f->length > h2->recv_window) return xH2ConnError(h2, XH2_FLOW_CONTROL_ERROR);
    h2->recv_window -= f->length;
    if (!s || !xH2StreamReceives(s)) {
        xH2ConsumeConn(h2, f->length); /* counted, and given back */
        if (!s && xH2WasReset(h2, f->stream_id)) return true;
        return xH2StreamError(h2, f->stream_id, XH2_STREAM_CLOSED);
    }
    if (f->length > s->recv_window) {
        xH2ConsumeConn(h2, f->length);
        return xH2StreamError(h2, s->id, XH2_FLOW_CONTROL_ERROR);
    }
    s->recv_window -= f->length;
    if (f->length > n) { /* padding is consumed at once */
        xH2ConsumeConn(h2, f->length - n);
        xH2ConsumeStream(s, f->length - n);
    }
    bool end = f->flags & XH2_FLAG_END_STREAM;
    if (!n && !end && ++h2->empty_frames > XH2_MAX_EMPTY_FRAMES)
        return xH2ConnError(h2, XH2_ENHANCE_YOUR_CALM);
    s->received += n;
    if (s->head.declared_length >= 0 && (s->received > (uint64_t)s->head.declared_length ||
                                         (end && s->received != (uint64_t)s->head.declared_length))) {
        xH2ConsumeConn(h2, n);
        return xH2StreamError(h2, s->id, XH2_PROTOCOL_ERROR);
    }
    if (n && !xH2StreamTakeData(h2, s, p, n)) return false;
    if (end) xH2StreamRemoteEnd(h2, s);
    return true;
}

static bool on_headers(xHttp2 *h2, const xH2Frame *f) {
    const uint8_t *p;
    size_t n;
    size_t skip = f->flags & XH2_FLAG_PRIORITY ? 5 : 0;
    if (!(f->stream_id & 1) || !xH2Unpad(f, skip, &p, &n)) return xH2ConnError(h2, XH2_PROTOCOL_ERROR);
    h2->block_id = f->stream_id;
    h2->block_flags = f->flags;
    h2->block_self_dep = skip && (int32_t)(xH2Get32(p) & 0x7fffffffu) == f->stream_id;
    h2->continuations = 0;
    if (f->flags & XH2_FLAG_END_HEADERS) return end_block(h2, p + skip, n - skip);
    if (xBufferAppend(&h2->block, p + skip, n - skip) != XOK) return xH2ConnError(h2, XH2_INTERNAL_ERROR);
    return true;
}

static bool on_continuation(xHttp2 *h2, const xH2Frame *f) {
    if (!h2->block_id || f->stream_id != h2->block_id) return xH2ConnError(h2, XH2_PROTOCOL_ERROR);
    /* CVE-2024-27316: a block may not go on and on. */
    if (++h2->continuations > h2->conf->http2_max_continuations)
        return xH2ConnError(h2, XH2_ENHANCE_YOUR_CALM);
    if (xBufferAppend(&h2->block, f->payload, f->length) != XOK) return xH2ConnError(h2, XH2_INTERNAL_ERROR);
    if (f->flags & XH2_FLAG_END_HEADERS) return end_block(h2, (const uint8_t *)h2->block.data, h2->block.len);
    return true;
}

/* RFC 9218 replaces RFC 7540's priorities, which we announce we ignore; a
 * PRIORITY frame is still checked. */
static bool on_priority(xHttp2 *h2, const xH2Frame *f) {
    xH2Error error = f->length != 5                                                  ? XH2_FRAME_SIZE_ERROR
                     : (int32_t)(xH2Get32(f->payload) & 0x7fffffffu) == f->stream_id ? XH2_PROTOCOL_ERROR
                                                                                     : XH2_NO_ERROR;
    if (!f->stream_id) return xH2ConnError(h2, XH2_PROTOCOL_ERROR);
    if (error == XH2_NO_ERROR) return true;
    /* A stream error, but never a reset of an id only we could open. */
    return f->stream_id & 1 ? xH2StreamError(h2, f->stream_id, error) : xH2ConnError(h2, error);
}

/* CVE-2023-44487: a token bucket of resets, burst and rate from the conf. */
static bool take_reset_token(xHttp2 *h2) {
    uint64_t now = xEventLoopNowMs(h2->conn->net->loop);
    h2->reset_tokens += (double)(now - h2->reset_refill_ms) * h2->conf->http2_reset_rate / 1000.0;
    h2->reset_refill_ms = now;
    if (h2->reset_tokens > h2->conf->http2_reset_burst) h2->reset_tokens = h2->conf->http2_reset_burst;
    if (h2->reset_tokens < 1) return false;
    h2->reset_tokens -= 1;
    return true;
}

static bool on_rst_stream(xHttp2 *h2, const xH2Frame *f) {
    if (f->length != 4) return xH2ConnError(h2, XH2_FRAME_SIZE_ERROR);
    if (!f->stream_id || is_idle(h2, f->stream_id)) return xH2ConnError(h2, XH2_PROTOCOL_ERROR);
    xH2Stream *s = xH2TableFind(&h2->table, f->stream_id);
    if (!s) return true;
    if (!take_reset_token(h2)) return xH2ConnError(h2, XH2_ENHANCE_YOUR_CALM);
    xH2StreamClose(s);
    return true;
}

/* One setting from the client (a SETTINGS frame or HTTP2-Settings). */
static bool apply_setting(xHttp2 *h2, uint16_t id, uint32_t value) {
    switch (id) {
    case XH2_SETTINGS_HEADER_TABLE_SIZE: xHpackEncoderSetPeerTableSize(&h2->encoder, value); return true;
    case XH2_SETTINGS_ENABLE_PUSH:
    case XH2_SETTINGS_ENABLE_CONNECT_PROTOCOL: return value <= 1 || xH2ConnError(h2, XH2_PROTOCOL_ERROR);
    case XH2_SETTINGS_MAX_FRAME_SIZE:
        return (value >= XH2_DEFAULT_FRAME_SIZE && value <= XH2_MAX_FRAME_SIZE_LIMIT) ||
               xH2ConnError(h2, XH2_PROTOCOL_ERROR);
    case XH2_SETTINGS_INITIAL_WINDOW_SIZE: {
        if (value > XH2_MAX_WINDOW) return xH2ConnError(h2, XH2_FLOW_CONTROL_ERROR);
        /* §6.9.2: every stream's window moves by the change, and may go negative. */
        int64_t delta = (int64_t)value - h2->peer_window;
        for (const xH2Stream *s = h2->streams; s; s = s->next)
            if (s->state != XH2_STATE_CLOSED && s->send_window + delta > XH2_MAX_WINDOW)
                return xH2ConnError(h2, XH2_FLOW_CONTROL_ERROR);
        h2->peer_window = value;
        for (xH2Stream *s = h2->streams; s; s = s->next)
            if (s->state != XH2_STATE_CLOSED) s->send_window += delta;
        return true;
    }
    default: return true; /* the rest is advice, and unknown ones are ignored */
    }
}

static bool apply_settings(xHttp2 *h2, const uint8_t *p, size_t len) {
    for (size_t at = 0; at + 6 <= len; at += 6)
        if (!apply_setting(h2, (uint16_t)(p[at] << 8 | p[at + 1]), xH2Get32(p + at + 2))) return false;
    return true;
}

static bool on_settings(xHttp2 *h2, const xH2Frame *f) {
    if (f->stream_id) return xH2ConnError(h2, XH2_PROTOCOL_ERROR);
    if (f->flags & XH2_FLAG_ACK) return f->length == 0 || xH2ConnError(h2, XH2_FRAME_SIZE_ERROR);
    if (f->length % 6) return xH2ConnError(h2, XH2_FRAME_SIZE_ERROR);
    if (f->length / 6 > XH2_MAX_SETTINGS_ENTRIES) return xH2ConnError(h2, XH2_ENHANCE_YOUR_CALM);
    if (!apply_settings(h2, f->payload, f->length)) return false;
    h2->settings_seen = true;
    xH2WriteFrame(h2->conn, XH2_SETTINGS, XH2_FLAG_ACK, 0, NULL, 0);
    return xH2OweControl(h2);
}

static bool on_push_promise(xHttp2 *h2, const xH2Frame *f) { return xH2ConnError(h2, XH2_PROTOCOL_ERROR); }

static bool on_ping(xHttp2 *h2, const xH2Frame *f) {
    if (f->stream_id) return xH2ConnError(h2, XH2_PROTOCOL_ERROR);
    if (f->length != 8) return xH2ConnError(h2, XH2_FRAME_SIZE_ERROR);
    if (f->flags & XH2_FLAG_ACK) return true;
    xH2WriteFrame(h2->conn, XH2_PING, XH2_FLAG_ACK, 0, f->payload, 8);
    return xH2OweControl(h2);
}

static bool on_goaway(xHttp2 *h2, const xH2Frame *f) {
    if (f->stream_id) return xH2ConnError(h2, XH2_PROTOCOL_ERROR);
    if (f->length < 8) return xH2ConnError(h2, XH2_FRAME_SIZE_ERROR);
    h2->peer_goaway = true; /* the streams in flight finish; then the connection ends */
    return true;
}

static bool on_window_update(xHttp2 *h2, const xH2Frame *f) {
    if (f->length != 4) return xH2ConnError(h2, XH2_FRAME_SIZE_ERROR);
    uint32_t inc = xH2Get32(f->payload) & 0x7fffffffu;
    if (!f->stream_id) {
        if (!inc) return xH2ConnError(h2, XH2_PROTOCOL_ERROR);
        if (h2->send_window + inc > XH2_MAX_WINDOW) return xH2ConnError(h2, XH2_FLOW_CONTROL_ERROR);
        h2->send_window += inc;
        return true;
    }
    xH2Stream *s = xH2TableFind(&h2->table, f->stream_id);
    if (!s && is_idle(h2, f->stream_id)) return xH2ConnError(h2, XH2_PROTOCOL_ERROR);
    /* §6.9: an increment of 0 is a stream error, on a stream we closed too:
     * whether the answer ended before the frame arrived must not decide it. */
    if (!inc) return xH2StreamError(h2, f->stream_id, XH2_PROTOCOL_ERROR);
    if (!s) return true; /* §5.1: a closed stream's late window is ignored */
    if (s->send_window + inc > XH2_MAX_WINDOW) return xH2StreamError(h2, s->id, XH2_FLOW_CONTROL_ERROR);
    s->send_window += inc;
    return true;
}

static const xH2Handler handlers[XH2_FRAME_TYPES] = {
    [XH2_DATA] = on_data,
    [XH2_HEADERS] = on_headers,
    [XH2_PRIORITY] = on_priority,
    [XH2_RST_STREAM] = on_rst_stream,
    [XH2_SETTINGS] = on_settings,
    [XH2_PUSH_PROMISE] = on_push_promise,
    [XH2_PING] = on_ping,
    [XH2_GOAWAY] = on_goaway,
    [XH2_WINDOW_UPDATE] = on_window_update,
    [XH2_CONTINUATION] = on_continuation,
};

static bool handle_frame(xHttp2 *h2, const xH2Frame *f) {
    /* §6.10: nothing may come between a block's frames. */
    if (h2->block_id && f->type != XH2_CONTINUATION) return xH2ConnError(h2, XH2_PROTOCOL_ERROR);
    /* §3.4: the preface's SETTINGS comes first. */
    if (!h2->settings_seen && (f->type != XH2_SETTINGS || (f->flags & XH2_FLAG_ACK)))
        return xH2ConnError(h2, XH2_PROTOCOL_ERROR);
    if (f->type >= XH2_FRAME_TYPES) return true; /* §5.5: unknown types are ignored */
    return handlers[f->type](h2, f);
}

/* Handles every whole frame in data[0, len): returns the bytes used, or -1
 * once the connection has failed. */
static long process(xHttp2 *h2, const uint8_t *data, size_t len) {
    size_t at = 0;
    if (!len) return 0;
    if (h2->preface_left) {
        size_t n = len < h2->preface_left ? len : h2->preface_left;
        const char *want = &XHTTP2_PREFACE[XHTTP2_PREFACE_LEN - h2->preface_left];
        if (memcmp(data, want, n) != 0) return xH2ConnError(h2, XH2_PROTOCOL_ERROR), -1;
        h2->preface_left -= n;
        at = n;
    }
    while (len - at >= XH2_FRAME_HEADER_LEN) {
        xH2Frame f = xH2ReadFrame(data + at);
        if (f.length > XH2_DEFAULT_FRAME_SIZE) return xH2ConnError(h2, XH2_FRAME_SIZE_ERROR), -1;
        if (len - at - XH2_FRAME_HEADER_LEN < f.length) break;
        at += XH2_FRAME_HEADER_LEN + f.length;
        if (!handle_frame(h2, &f) || h2->failed) return -1;
    }
    return (long)at;
}

/* ---- Driving the connection ---- */

/* The client owes a request, or the rest of a body someone takes. */
static bool awaits_request(const xH2Stream *s) {
    if (s->state == XH2_STATE_CLOSED) return false;
    if (s->head.tunnel && s->head_written) return false; /* an open tunnel times itself out */
    if (!s->dispatched) return !s->ready;
    return s->streams_body && xH2StreamReceives(s) && (s->ex->res.ended || xHttpExchangeWantsBody(s->ex));
}

static xH2Wait current_wait(const xHttp2 *h2, bool *mid_headers) {
    *mid_headers = h2->block_id != 0;
    xH2Wait wait = *mid_headers ? XH2_WAIT_REQUEST : h2->streams ? XH2_WAIT_NOTHING : XH2_WAIT_IDLE;
    if (wait == XH2_WAIT_IDLE && xConnHoldsInput(h2->conn)) {
        /* Part of a TLS record came: a frame has begun, as slow as a header block. */
        wait = XH2_WAIT_REQUEST;
        *mid_headers = true;
    }
    for (const xH2Stream *s = h2->streams; s; s = s->next) {
        if (awaits_request(s))
            wait = XH2_WAIT_REQUEST;
        else if (wait == XH2_WAIT_NOTHING && xH2Pending(s) > 0 && s->state != XH2_STATE_CLOSED)
            wait = XH2_WAIT_PEER;
    }
    return wait;
}

/* Arms the one timer for what the connection waits for. The header, body
 * and send timeouts run from the last progress, not from the last byte, so
 * a client that only chats (PINGs, WINDOW_UPDATEs of nothing) is still
 * dropped; the timer is left alone while the same wait makes no progress. */
static void arm_timer(xHttp2 *h2) {
    xConn *conn = h2->conn;
    const xHttpServerConf *conf = h2->conf;
    if (xConnClosed(conn) || xConnWriteBlocked(conn) || xConnLingering(conn)) return;
    bool mid_headers;
    xH2Wait wait = current_wait(h2, &mid_headers);
    if (wait == h2->waiting_for && h2->progress == h2->progress_at_arm && wait != XH2_WAIT_NOTHING) return;
    h2->waiting_for = wait;
    h2->progress_at_arm = h2->progress;
    uint32_t ms = wait == XH2_WAIT_IDLE      ? conf->idle_timeout_ms
                  : wait == XH2_WAIT_PEER    ? conf->send_timeout_ms
                  : wait == XH2_WAIT_REQUEST ? (mid_headers ? conf->header_timeout_ms : conf->body_timeout_ms)
                                             : 0;
    xConnSetTimeout(conn, ms);
}

/* The connection is over once no stream is left after a GOAWAY either way. */
static bool finished(const xHttp2 *h2) { return (h2->final_goaway || h2->peer_goaway) && !h2->streams; }

void xH2Pump(xHttp2 *h2) {
    xConn *conn = h2->conn;
    if (xConnClosed(conn)) return;
    xConnRetain(conn);
    /* Framing stops at our output high-water mark; when the socket takes it
     * all at once no writable event will come, so go round again. */
    for (int round = 0; round < 64 && !xConnClosed(conn); round++) {
        xH2FrameAll(h2);
        if (xH2WakeTunnels(h2)) xH2FrameAll(h2);
        xConnFlush(conn);
        if (xConnClosed(conn) || xConnWriteBlocked(conn) || xConnPending(conn)) break;
        h2->control_queued = 0;
        if (h2->send_window <= 0) break;
        bool more = false;
        for (const xH2Stream *s = h2->streams; s && !more; s = s->next)
            more = xH2StreamSends(s) && s->head_written && xH2Pending(s) && s->send_window > 0;
        if (!more) break;
    }
    if (xConnOpen(conn)) {
        if (finished(h2))
            xConnCloseAfterFlush(conn);
        else
            arm_timer(h2);
    }
    xConnRelease(conn);
}

static void pump_at_turn_end(xEventLoop *loop, xTurnEnd *call) {
    (void)loop;
    xHttp2 *h2 = (xHttp2 *)((char *)call - offsetof(xHttp2, pump_soon));
    xConn *conn = h2->conn;
    if (!xConnClosed(conn)) xH2Pump(h2);
    xConnRelease(conn); /* taken by xH2PumpSoon */
}

void xH2PumpSoon(xHttp2 *h2) {
    xConn *conn = h2->conn;
    if (h2->in_batch || h2->pump_soon.queued || xConnClosed(conn)) return;
    xConnRetain(conn); /* h2 lives as long as its connection */
    xEventLoopAtTurnEnd(conn->net->loop, &h2->pump_soon);
}

/* Handles what conn->in holds; a partial frame stays for the next read. */
static bool take_input(xHttp2 *h2) {
    xConn *conn = h2->conn;
    long used = process(h2, (const uint8_t *)conn->in.data, conn->in.len);
    xBufferPoolRelease(&conn->net->buffers, &h2->block_fields);
    xBufferPoolRelease(&conn->net->buffers, &h2->block_scratch);
    if (used < 0) return false;
    xBufferConsume(&conn->in, (size_t)used);
    /* A frame larger than the room left grows the buffer to hold it whole. */
    if (conn->in.len >= XH2_FRAME_HEADER_LEN) {
        size_t need = XH2_FRAME_HEADER_LEN + xH2ReadFrame((const uint8_t *)conn->in.data).length;
        if (need > conn->in.cap && xBufferReserve(&conn->in, need - conn->in.len) != XOK)
            return xH2ConnError(h2, XH2_INTERNAL_ERROR);
    }
    return true;
}

static void on_readable(xConn *conn) {
    xHttp2 *h2 = conn->proto_state;
    xConnRetain(conn);
    h2->in_batch = true;
    bool ok = true;
    while (ok && conn->readable && xConnOpen(conn)) {
        if (xBufferPoolAcquire(&conn->net->buffers, &conn->in) != XOK) break;
        ssize_t n = xConnRecv(conn, conn->in.data + conn->in.len, conn->in.cap - conn->in.len);
        if (n > 0) {
            conn->in.len += (size_t)n;
            ok = take_input(h2);
            xH2DispatchReady(h2);
            /* Owed acks go out while the client reads them; a client that
             * does not is found out by the count. */
            if (ok && h2->control_queued && !xConnClosed(conn)) {
                xConnFlush(conn);
                if (!xConnClosed(conn) && !xConnPending(conn)) h2->control_queued = 0;
            }
        } else if (n == 0) {
            xConnCloseAfterFlush(conn);
        } else if (errno != EAGAIN && errno != EINTR) {
            xConnReadFailed(conn);
        }
    }
    h2->in_batch = false;
    if (!xConnClosed(conn)) {
        if (!conn->in.len) xBufferPoolRelease(&conn->net->buffers, &conn->in);
        if (xConnOpen(conn))
            xH2Pump(h2);
        else
            xConnFlush(conn);
    }
    xConnRelease(conn);
}

static void on_flushed(xConn *conn) { xH2Pump(conn->proto_state); }

static void on_timeout(xConn *conn) {
    xHttp2 *h2 = conn->proto_state;
    bool mid_headers;
    if (current_wait(h2, &mid_headers) == XH2_WAIT_REQUEST && !mid_headers) {
        /* Requests whose bodies stopped coming are cancelled; the
         * connection and its other streams go on. */
        xConnRetain(conn);
        xH2Stream *next;
        for (xH2Stream *s = h2->streams; s; s = next) {
            next = s->next;
            if (awaits_request(s)) xH2StreamError(h2, s->id, XH2_CANCEL);
        }
        h2->waiting_for = XH2_WAIT_NOTHING;
        xH2Pump(h2);
        xConnRelease(conn);
        return;
    }
    /* Idle, a header block that never ends (nothing else may be sent in
     * its middle), or a peer that stopped taking the data it asked for. */
    xH2ConnError(h2, mid_headers ? XH2_PROTOCOL_ERROR : XH2_NO_ERROR);
}

static void on_goaway_timer(xEventLoop *loop, xTimer *timer, void *arg) {
    xHttp2 *h2 = arg;
    h2->final_goaway = true;
    h2->last_id = h2->highest_id;
    xH2WriteGoaway(h2->conn, h2->last_id, XH2_NO_ERROR);
    xH2Pump(h2);
}

/* Graceful: announce (GOAWAY with the highest id), give requests in flight
 * a moment to arrive, then name the last stream we will serve. */
static void on_drain(xConn *conn) {
    xHttp2 *h2 = conn->proto_state;
    if (h2->draining || h2->failed) return;
    h2->draining = true;
    xH2WriteGoaway(conn, XH2_MAX_WINDOW, XH2_NO_ERROR);
    xH2StopTunnels(h2);
    uint32_t half = h2->conf->shutdown_timeout_ms / 2;
    xTimerStart(conn->net->loop, &h2->goaway_timer, XH2_GOAWAY_GRACE_MS < half ? XH2_GOAWAY_GRACE_MS : half);
    xH2Pump(h2);
}

static void on_close(xConn *conn) {
    xHttp2 *h2 = conn->proto_state;
    xTimerStop(conn->net->loop, &h2->goaway_timer);
    h2->ready = h2->ready_tail = NULL;
    xH2Stream *next;
    for (xH2Stream *s = h2->streams; s; s = next) {
        next = s->next;
        s->ready = false;
        xH2StreamClose(s);
    }
}

static void on_free(xConn *conn) {
    xHttp2 *h2 = conn->proto_state;
    xH2StreamsFree(h2);
    xH2TableFree(&h2->table);
    xHpackDecoderFree(&h2->decoder);
    xBufferFree(&h2->block);
    free(h2);
}

static const xConnProtocol h2_protocol = {
    .on_readable = on_readable,
    .on_flushed = on_flushed,
    .on_timeout = on_timeout,
    .on_drain = on_drain,
    .on_close = on_close,
    .on_free = on_free,
};

/* ---- Starting ---- */

/* Our SETTINGS, and the connection window opened to match the streams'. */
static bool greet(xHttp2 *h2) {
    const uint32_t settings[][2] = {
        {XH2_SETTINGS_MAX_CONCURRENT_STREAMS, h2->conf->http2_max_streams},
        {XH2_SETTINGS_INITIAL_WINDOW_SIZE, h2->stream_window},
        {XH2_SETTINGS_MAX_HEADER_LIST_SIZE, (uint32_t)h2->conf->max_header_size},
        {XH2_SETTINGS_ENABLE_CONNECT_PROTOCOL, 1},
        {XH2_SETTINGS_NO_RFC7540_PRIORITIES, 1},
    };
    if (xH2WriteSettings(h2->conn, settings, sizeof settings / sizeof *settings) != XOK) return false;
    if (h2->conn_window > XH2_DEFAULT_WINDOW &&
        xH2WriteWindowUpdate(h2->conn, 0, h2->conn_window - XH2_DEFAULT_WINDOW) != XOK)
        return false;
    return true;
}

/* Stream 1 is the HTTP/1.1 request that asked to upgrade; its
 * HTTP2-Settings are the client's first settings (RFC 7540 §3.2.1). */
static bool adopt_upgrade(xHttp2 *h2, const xHttp2Upgrade *up) {
    if (up->settings_len % 6 || !apply_settings(h2, (const uint8_t *)up->settings, up->settings_len))
        return false;
    h2->highest_id = 1;
    return xH2StreamFromUpgrade(h2, up);
}

static xHttp2 *session_new(xConn *conn) {
    xHttp2 *h2 = calloc(1, sizeof *h2);
    if (!h2) return NULL;
    if (xHpackDecoderInit(&h2->decoder, XHPACK_INITIAL_TABLE_SIZE) != 0) {
        free(h2);
        return NULL;
    }
    xHpackEncoderInit(&h2->encoder);
    h2->conn = conn;
    h2->conf = xHttpContextOf(conn)->conf;
    h2->preface_left = XHTTP2_PREFACE_LEN;
    h2->peer_window = h2->send_window = XH2_DEFAULT_WINDOW;
    h2->stream_window = h2->conf->http2_window < XH2_MAX_WINDOW ? h2->conf->http2_window : XH2_MAX_WINDOW;
    h2->conn_window = h2->stream_window > XH2_DEFAULT_WINDOW ? h2->stream_window : XH2_DEFAULT_WINDOW;
    h2->recv_window = h2->conn_window;
    h2->held_window.limit = h2->conn_window;
    h2->reset_tokens = h2->conf->http2_reset_burst;
    h2->reset_refill_ms = xEventLoopNowMs(conn->net->loop);
    xTimerInit(&h2->goaway_timer, on_goaway_timer, h2);
    h2->pump_soon.fn = pump_at_turn_end;
    return h2;
}

bool xHttp2Start(xConn *conn, size_t start, const xHttp2Upgrade *upgrade) {
    xHttp2 *h2 = session_new(conn);
    if (!h2) return false; /* the connection is still the caller's */
    conn->proto = &h2_protocol;
    conn->proto_state = h2;
    if (!greet(h2) || (upgrade && !adopt_upgrade(h2, upgrade))) {
        xConnClose(conn);
        return true;
    }
    xConnRetain(conn);
    h2->in_batch = true;
    xBufferConsume(&conn->in, start < conn->in.len ? start : conn->in.len);
    bool ok = take_input(h2);
    xH2DispatchReady(h2);
    h2->in_batch = false;
    if (!xConnClosed(conn)) {
        if (!conn->in.len) xBufferPoolRelease(&conn->net->buffers, &conn->in);
        if (ok) xH2Pump(h2);
        if (ok && conn->readable && !xConnClosed(conn)) on_readable(conn);
    }
    xConnRelease(conn);
    return true;
}

const char *xHttp2BrokenInvariant(const xConn *conn) {
    if (conn->proto != &h2_protocol) return NULL;
    const xHttp2 *h2 = conn->proto_state;
    size_t open = 0, returned = 0;
    for (const xH2Stream *s = h2->streams; s; s = s->next) {
        const char *broken = xH2StreamBrokenInvariant(h2, s, &open, &returned);
        if (broken) return broken;
    }
    if (open != h2->table.count) return "the table's count is not the open streams'";
    if (open > h2->conf->http2_max_streams) return "more open streams than allowed";
    if (h2->spare_count > XH2_SPARE_STREAMS) return "too many spare streams";
    if (h2->send_window > XH2_MAX_WINDOW) return "the connection's send window is over 2^31-1";
    if (h2->recv_window < 0 || h2->recv_window > h2->conn_window) return "the receive window is out of range";
    if (returned != h2->held_window.returned || returned > h2->held_window.limit)
        return "held bytes returned do not add up";
    if (h2->block.len > (size_t)(h2->conf->http2_max_continuations + 1) * XH2_DEFAULT_FRAME_SIZE)
        return "a header block grew past its frames";
    return NULL;
}

long xHttp2DecodeSettings(xStr in, char *out, size_t cap) {
    long n = xBase64UrlDecode(in.data, in.len, out, cap);
    return n < 0 || n % 6 ? -1 : n; /* whole (identifier, value) pairs */
}
