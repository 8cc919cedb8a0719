/* h2.c — HTTP/2 to an upstream (client_internal.h): h2c by prior knowledge
 * on http://, h2 by ALPN on https://. One connection per pool (the session)
 * carries every request as a stream, up to the peer's
 * SETTINGS_MAX_CONCURRENT_STREAMS; the rest wait in the pool's queue. One
 * past a GOAWAY finishes its streams while the next connection takes new
 * ones. Frames
 * and HPACK are xKit's own (http2/frame.h, http2/hpack.h): request heads are
 * encoded at Start without the dynamic table (so a block fits any
 * connection), responses decoded with the session's decoder.
 *
 * Flow control both ways: a request body leaves as DATA within the
 * stream's and the connection's send windows (WINDOW_UPDATE and SETTINGS
 * move them), and the response's window is given back as the caller takes
 * the data, never while a request is paused, so a slow caller holds its
 * stream and not the others. Each stream runs the request's timeouts; a
 * failed or cancelled stream is reset, not its connection. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "xhttp/client/client_internal.h"
#include "xhttp/core/tokens.h"
#include "xhttp/http2/frame.h"
#include "xhttp/http2/hpack.h"

#define H2_STREAM_WINDOW (256u << 10) /* our initial stream window */
#define H2_CONN_WINDOW (16u << 20)    /* our connection window */
#define H2_MAX_FIELDS 128             /* response fields (and trailers) decoded */
#define H2_SCRATCH (64u << 10)        /* decoded strings of one block */
#define H2_MAX_BLOCK (256u << 10)     /* a header block across CONTINUATIONs */
#define H2_MAX_REFUSALS 3             /* refused streams of one request retried: then RESET */

struct xH2Session {
    xClientConn *cc;
    xConn *conn;
    xUpstreamPool *pool;
    xHttpClientRequest *streams;
    unsigned active;
    uint32_t next_id;
    uint32_t peer_max_streams;
    uint32_t peer_initial_window;
    uint32_t peer_max_frame;
    int64_t send_window;
    uint32_t recv_unacked;
    bool goaway;
    xHpackDecoder decoder;
    xHpackEncoder encoder;
    xBuffer block; /* a header block being gathered */
    int32_t block_stream;
    uint8_t block_flags;
    bool in_block;
    xHpackField fields[H2_MAX_FIELDS];
    xHttpClientField out[H2_MAX_FIELDS];
    char scratch[H2_SCRATCH];
};

static const xConnProtocol h2_protocol;
static void pump(xH2Session *s);
static const char h2_preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/* ---- Streams ---- */

/* The session takes no stream again (a GOAWAY either way, or its close):
 * the pool's next request opens a new connection while this one finishes
 * the streams it has (counted in the pool's draining). */
static void stop_taking(xH2Session *s) {
    if (s->pool->h2 == s) s->pool->h2 = NULL;
    if (s->goaway) return;
    s->goaway = true;
    s->pool->draining++;
}

static void link_stream(xH2Session *s, xHttpClientRequest *req) {
    req->session = s;
    req->h2_prev = NULL;
    req->h2_next = s->streams;
    if (s->streams) s->streams->h2_prev = req;
    s->streams = req;
    s->active++;
    xConnSetTimeout(s->conn, 0);
}

static void unlink_stream(xHttpClientRequest *req) {
    xH2Session *s = req->session;
    if (!s) return;
    if (req->h2_prev)
        req->h2_prev->h2_next = req->h2_next;
    else
        s->streams = req->h2_next;
    if (req->h2_next) req->h2_next->h2_prev = req->h2_prev;
    req->session = NULL;
    s->active--;
    if (s->active || xConnClosed(s->conn)) return;
    /* A session past a GOAWAY takes no stream again: once it carries none,
     * its close lets the pool's queue open the next connection. */
    if (s->goaway)
        xConnCloseAfterFlush(s->conn);
    else
        xConnSetTimeout(s->conn, s->pool->upstream->conf.keepalive_ms);
}

static xHttpClientRequest *stream_of(xH2Session *s, int32_t id) {
    for (xHttpClientRequest *r = s->streams; r; r = r->h2_next)
        if ((int32_t)r->stream_id == id) return r;
    return NULL;
}

/* Sends the stream's head: HEADERS, then CONTINUATIONs past the peer's frame size. */
static bool send_head(xH2Session *s, xHttpClientRequest *req) {
    uint8_t update[XHPACK_BEGIN_BOUND];
    size_t ulen = (size_t)(xHpackEncodeBegin(&s->encoder, update) - update);
    size_t total = ulen + req->h2_head.len;
    uint8_t *block = malloc(total ? total : 1);
    if (!block) return false;
    memcpy(block, update, ulen);
    memcpy(block + ulen, req->h2_head.data, req->h2_head.len);
    bool end = req->body_ended && req->out.len == 0;
    size_t at = 0;
    bool ok = true;
    do {
        size_t n = total - at < s->peer_max_frame ? total - at : s->peer_max_frame;
        uint8_t flags = at + n == total ? XH2_FLAG_END_HEADERS : 0;
        uint8_t type = at == 0 ? XH2_HEADERS : XH2_CONTINUATION;
        if (at == 0 && end) flags |= XH2_FLAG_END_STREAM;
        ok = xH2WriteFrame(s->conn, type, flags, (int32_t)req->stream_id, block + at, n) == XOK;
        at += n;
    } while (ok && at < total);
    free(block);
    if (end) req->end_sent = true;
    return ok;
}

bool xClientH2Take(xH2Session *s, xHttpClientRequest *req) {
    if (s->goaway || s->active >= s->peer_max_streams || xConnClosed(s->conn) || s->next_id > 0x7fffffffu)
        return false;
    req->stream_id = s->next_id;
    s->next_id += 2;
    req->send_window = s->peer_initial_window;
    link_stream(s, req);
    xClientEnter(req, XREQ_SENDING);
    if (!send_head(s, req)) {
        xClientFail(req, XHTTP_CLIENT_NO_MEMORY);
        return true;
    }
    xClientH2Push(req);
    return true;
}

void xClientH2Push(xHttpClientRequest *req) {
    xH2Session *s = req->session;
    if (!s || xConnClosed(s->conn)) return;
    bool moved = false;
    /* out keeps what was framed (out_given bytes) while the body is held
     * whole for a refused stream's retry. */
    while (!req->end_sent && req->out.len > req->out_given && req->send_window > 0 && s->send_window > 0) {
        size_t left = req->out.len - req->out_given, n = left;
        if ((int64_t)n > req->send_window) n = (size_t)req->send_window;
        if ((int64_t)n > s->send_window) n = (size_t)s->send_window;
        if (n > s->peer_max_frame) n = s->peer_max_frame;
        bool end = n == left && req->body_ended;
        if (xH2WriteFrame(s->conn, XH2_DATA, end ? XH2_FLAG_END_STREAM : 0, (int32_t)req->stream_id,
                          req->out.data + req->out_given, n) != XOK) {
            xClientFail(req, XHTTP_CLIENT_NO_MEMORY);
            return;
        }
        req->out_given += n;
        req->send_window -= (int64_t)n;
        s->send_window -= (int64_t)n;
        req->end_sent = end;
        moved = true;
    }
    if (req->held_whole && req->out.len > CLIENT_REPLAY_MAX) req->held_whole = false;
    if (!req->held_whole && req->out_given) {
        xBufferConsume(&req->out, req->out_given);
        req->out_given = 0;
    }
    if (!req->end_sent && req->out.len == req->out_given && req->body_ended) {
        xH2WriteFrame(s->conn, XH2_DATA, XH2_FLAG_END_STREAM, (int32_t)req->stream_id, NULL, 0);
        req->end_sent = moved = true;
    }
    if (req->end_sent && req->phase == XREQ_SENDING)
        xClientEnter(req, XREQ_WAITING);
    else if (moved && req->phase == XREQ_SENDING)
        xClientArm(req);
    xConnFlushSoon(s->conn);
}

void xClientH2Detach(xHttpClientRequest *req) {
    xH2Session *s = req->session;
    if (!s) return;
    if (!(req->end_sent && req->end_received) && !xConnClosed(s->conn)) {
        xH2WriteReset(s->conn, (int32_t)req->stream_id, XH2_CANCEL);
        xConnFlushSoon(s->conn);
    }
    unlink_stream(req);
    pump(s); /* its stream's room goes to the next queued */
}

/* Starts what the pool queued while the session has room. */
static void pump(xH2Session *s) {
    while (!s->goaway && s->active < s->peer_max_streams && !xConnClosed(s->conn)) {
        xHttpClientRequest *req = xClientDequeue(s->pool);
        if (!req) break;
        xClientH2Take(s, req);
    }
}

/* The response ended: the caller hears on_end; its stream is gone. */
static void complete(xH2Session *s, xHttpClientRequest *req, const xHttpClientField *trailers, size_t n) {
    (void)s;
    unlink_stream(req);
    xTimerStop(req->client->loop, &req->timer);
    xTimerStop(req->client->loop, &req->total_timer);
    req->cancelled = true;
    CALL(req, req->handlers.on_end(req, trailers, n, req->arg));
    xClientRelease(req);
}

/* Gives back receive window for what the caller took. */
static void give_window(xH2Session *s, xHttpClientRequest *req, size_t n) {
    s->recv_unacked += (uint32_t)n;
    if (s->recv_unacked >= H2_CONN_WINDOW / 2) {
        xH2WriteWindowUpdate(s->conn, 0, s->recv_unacked);
        s->recv_unacked = 0;
    }
    if (!req) return;
    req->recv_unacked += (uint32_t)n;
    if (!req->paused && !req->end_received && req->recv_unacked >= H2_STREAM_WINDOW / 2) {
        xH2WriteWindowUpdate(s->conn, (int32_t)req->stream_id, req->recv_unacked);
        req->recv_unacked = 0;
    }
}

/* Hands data to the caller (or holds it while paused). False: the request is over. */
static bool deliver(xH2Session *s, xHttpClientRequest *req, const uint8_t *data, size_t len) {
    if (req->paused) {
        xBufferAppend(&req->h2_held, data, len);
        return true;
    }
    if (len && req->handlers.on_body)
        CALL(req, req->handlers.on_body(req, (const char *)data, len, req->arg));
    if (!xClientSurvived(req)) return false;
    give_window(s, req, 0);
    return true;
}

void xClientH2Resume(xHttpClientRequest *req) {
    xH2Session *s = req->session;
    if (!s || req->paused) return;
    if (req->h2_held.len) {
        xBuffer held = req->h2_held;
        req->h2_held = (xBuffer){0};
        bool on = deliver(s, req, (const uint8_t *)held.data, held.len);
        xBufferFree(&held);
        if (!on) return;
    }
    if (req->end_received) {
        xConn *conn = s->conn;
        xConnRetain(conn);
        complete(s, req, NULL, 0);
        pump(s);
        xConnRelease(conn);
        return;
    }
    give_window(s, req, 0);
    xConnFlushSoon(s->conn);
}

/* RFC 9113 §8.7: a stream the upstream refused (REFUSED_STREAM, or past a
 * GOAWAY's last stream id) was not processed, so it goes again whatever its
 * method while nothing of its answer came and its body is held whole: at
 * the head of the pool's queue, for this session's next free stream or the
 * next connection. False: it is not retried (the caller fails it). */
static bool retry_refused(xH2Session *s, xHttpClientRequest *req) {
    if (req->started || !req->held_whole || req->refusals >= H2_MAX_REFUSALS) return false;
    req->refusals++;
    unlink_stream(req); /* no RST_STREAM: the stream is closed, or was never processed */
    req->stream_id = 0;
    req->end_sent = req->end_received = false;
    req->out_given = 0;
    req->recv_unacked = 0;
    xClientRequeue(req);
    pump(s);
    return true;
}

/* ---- Frames in ---- */

static void conn_error(xH2Session *s, xH2Error code) {
    stop_taking(s);
    xH2WriteGoaway(s->conn, 0, code);
    xConnCloseAfterFlush(s->conn);
}

/* The stream ends here: a body of a declared length came whole. */
static bool body_whole(const xHttpClientRequest *req) {
    return req->body != XBODY_LENGTH || req->body_left == 0;
}

static void on_data(xH2Session *s, const xH2Frame *f) {
    const uint8_t *payload = f->payload;
    size_t len = f->length;
    if ((f->flags & XH2_FLAG_PADDED) && !xH2Unpad(f, 0, &payload, &len)) {
        conn_error(s, XH2_PROTOCOL_ERROR);
        return;
    }
    xHttpClientRequest *req = stream_of(s, f->stream_id);
    give_window(s, NULL, f->length - len); /* padding counts, and is given back at once */
    if (!req || !req->started) {
        give_window(s, NULL, len);
        if (req) xClientFail(req, XHTTP_CLIENT_BAD_RESPONSE);
        return;
    }
    if (req->phase != XREQ_RECEIVING)
        xClientEnter(req, XREQ_RECEIVING);
    else
        xClientArm(req);
    s->recv_unacked += (uint32_t)len; /* the connection's window: the stream's is given as taken */
    if (s->recv_unacked >= H2_CONN_WINDOW / 2) {
        xH2WriteWindowUpdate(s->conn, 0, s->recv_unacked);
        s->recv_unacked = 0;
    }
    req->recv_unacked += (uint32_t)len;
    bool end = f->flags & XH2_FLAG_END_STREAM;
    /* RFC 9113 §8.1.1: DATA beyond what the head said, or after a head that
     * allows none (HEAD, 204, 304), is a malformed response. */
    if (len && (req->body == XBODY_DONE || (req->body == XBODY_LENGTH && (uint64_t)req->body_left < len))) {
        xClientFail(req, XHTTP_CLIENT_BAD_RESPONSE);
        return;
    }
    if (req->body == XBODY_LENGTH) req->body_left -= (int64_t)len;
    if (end && !body_whole(req)) {
        xClientFail(req, XHTTP_CLIENT_BAD_RESPONSE);
        return;
    }
    if (end) req->end_received = true;
    if (!deliver(s, req, payload, len)) return;
    if (end && !req->paused) complete(s, req, NULL, 0);
}

/* A whole header block for a stream: a response head, or its trailers. */
static void on_block(xH2Session *s, int32_t id, uint8_t flags) {
    xHpackBlock b = {.fields = s->fields,
                     .max_fields = H2_MAX_FIELDS,
                     .scratch = s->scratch,
                     .scratch_size = sizeof s->scratch,
                     .max_list_size = sizeof s->scratch};
    /* An empty block (a HEADERS frame of no field) has no buffer yet. */
    const uint8_t *block = s->block.data ? (const uint8_t *)s->block.data : (const uint8_t *)"";
    int verdict = xHpackDecode(&s->decoder, block, s->block.len, &b);
    xBufferConsume(&s->block, s->block.len);
    if (verdict == XHPACK_ERROR) {
        conn_error(s, XH2_COMPRESSION_ERROR);
        return;
    }
    xHttpClientRequest *req = stream_of(s, id);
    if (!req) return;
    if (verdict != XHPACK_OK) {
        xClientFail(req, XHTTP_CLIENT_BAD_RESPONSE);
        return;
    }
    bool end = flags & XH2_FLAG_END_STREAM;
    int status = 0;
    size_t n = 0;
    int64_t length = -1;
    for (size_t i = 0; i < b.count; i++) {
        xHpackField *hf = &s->fields[i];
        if (hf->name.len && hf->name.data[0] == ':') {
            if (xStrEqualsC(hf->name, ":status") && hf->value.len == 3)
                status = (hf->value.data[0] - '0') * 100 + (hf->value.data[1] - '0') * 10 +
                         (hf->value.data[2] - '0');
            continue;
        }
        if (xStrEqualsC(hf->name, "content-length")) {
            length = 0;
            for (size_t k = 0; k < hf->value.len && length >= 0; k++)
                length = hf->value.data[k] >= '0' && hf->value.data[k] <= '9'
                             ? length * 10 + (hf->value.data[k] - '0')
                             : -1;
        }
        s->out[n++] = (xHttpClientField){hf->name, hf->value};
    }
    if (req->phase != XREQ_RECEIVING)
        xClientEnter(req, XREQ_RECEIVING);
    else
        xClientArm(req);
    if (req->started) { /* trailers */
        if (!end || !body_whole(req)) {
            xClientFail(req, XHTTP_CLIENT_BAD_RESPONSE);
            return;
        }
        req->end_received = true;
        complete(s, req, s->out, n);
        return;
    }
    if (status < 100 || status > 999) {
        xClientFail(req, XHTTP_CLIENT_BAD_RESPONSE);
        return;
    }
    if (status < 200) return; /* 1xx: the answer follows */
    req->started = true;
    xBufferFree(&req->h2_head); /* answered: never sent again */
    bool allowed = !req->head_request && status != 204 && status != 304,
         body = !end && allowed && length != 0;
    if (end && allowed && length > 0) { /* a declared body that never comes */
        xClientFail(req, XHTTP_CLIENT_BAD_RESPONSE);
        return;
    }
    req->body = !body ? XBODY_DONE : length >= 0 ? XBODY_LENGTH : XBODY_UNTIL_CLOSE;
    req->body_left = length;
    xHttpClientResponse head = {.status = status,
                                .minor_version = 1,
                                .reason = {"", 0},
                                .fields = s->out,
                                .num_fields = n,
                                .content_length = length,
                                .has_body = body};
    if (end) req->end_received = true;
    CALL(req, req->handlers.on_head(req, &head, req->arg));
    if (!xClientSurvived(req)) return;
    if (end) complete(s, req, NULL, 0);
}

static void on_headers(xH2Session *s, const xH2Frame *f) {
    const uint8_t *payload = f->payload;
    size_t len = f->length;
    size_t skip = f->flags & XH2_FLAG_PRIORITY ? 5 : 0;
    if (f->flags & XH2_FLAG_PADDED) {
        if (!xH2Unpad(f, skip, &payload, &len)) {
            conn_error(s, XH2_PROTOCOL_ERROR);
            return;
        }
    } else {
        if (len < skip) {
            conn_error(s, XH2_PROTOCOL_ERROR);
            return;
        }
        payload += skip;
        len -= skip;
    }
    xBufferAppend(&s->block, payload, len);
    s->block_stream = f->stream_id;
    s->block_flags = f->flags;
    s->in_block = !(f->flags & XH2_FLAG_END_HEADERS);
    if (!s->in_block) on_block(s, f->stream_id, f->flags);
}

static void on_continuation(xH2Session *s, const xH2Frame *f) {
    if (!s->in_block || f->stream_id != s->block_stream || s->block.len + f->length > H2_MAX_BLOCK) {
        conn_error(s, XH2_PROTOCOL_ERROR);
        return;
    }
    xBufferAppend(&s->block, f->payload, f->length);
    if (f->flags & XH2_FLAG_END_HEADERS) {
        s->in_block = false;
        on_block(s, s->block_stream, s->block_flags);
    }
}

/* Every stream with body to send tries again (a window opened). */
static void push_all(xH2Session *s) {
    for (xHttpClientRequest *r = s->streams, *next; r; r = next) {
        next = r->h2_next;
        xClientH2Push(r);
    }
    for (xHttpClientRequest *r = s->streams, *next; r; r = next) {
        next = r->h2_next;
        xClientMaybeWantBody(r);
    }
}

static void on_settings(xH2Session *s, const xH2Frame *f) {
    if (f->flags & XH2_FLAG_ACK) return;
    if (f->length % 6) {
        conn_error(s, XH2_FRAME_SIZE_ERROR);
        return;
    }
    for (size_t at = 0; at < f->length; at += 6) {
        uint16_t id = (uint16_t)(f->payload[at] << 8 | f->payload[at + 1]);
        uint32_t v = xH2Get32(f->payload + at + 2);
        switch (id) {
        case XH2_SETTINGS_HEADER_TABLE_SIZE: xHpackEncoderSetPeerTableSize(&s->encoder, v); break;
        case XH2_SETTINGS_MAX_CONCURRENT_STREAMS: s->peer_max_streams = v; break;
        case XH2_SETTINGS_INITIAL_WINDOW_SIZE:
            if (v > XH2_MAX_WINDOW) {
                conn_error(s, XH2_FLOW_CONTROL_ERROR);
                return;
            }
            for (xHttpClientRequest *r = s->streams; r; r = r->h2_next)
                r->send_window += (int64_t)v - (int64_t)s->peer_initial_window;
            s->peer_initial_window = v;
            break;
        case XH2_SETTINGS_MAX_FRAME_SIZE:
            if (v >= XH2_DEFAULT_FRAME_SIZE && v <= XH2_MAX_FRAME_SIZE_LIMIT) s->peer_max_frame = v;
            break;
        default: break;
        }
    }
    xH2WriteFrame(s->conn, XH2_SETTINGS, XH2_FLAG_ACK, 0, NULL, 0);
    push_all(s);
    pump(s);
}

static void on_window_update(xH2Session *s, const xH2Frame *f) {
    if (f->length != 4) {
        conn_error(s, XH2_FRAME_SIZE_ERROR);
        return;
    }
    uint32_t inc = xH2Get32(f->payload) & 0x7fffffffu;
    if (f->stream_id == 0) {
        s->send_window += inc;
    } else {
        xHttpClientRequest *req = stream_of(s, f->stream_id);
        if (req) req->send_window += inc;
    }
    push_all(s);
}

static void on_goaway(xH2Session *s, const xH2Frame *f) {
    if (f->length < 8) {
        conn_error(s, XH2_FRAME_SIZE_ERROR);
        return;
    }
    int32_t last = (int32_t)(xH2Get32(f->payload) & 0x7fffffffu);
    stop_taking(s);
    for (xHttpClientRequest *r = s->streams, *next; r; r = next) {
        next = r->h2_next;
        if ((int32_t)r->stream_id > last && !retry_refused(s, r)) xClientFail(r, XHTTP_CLIENT_RESET);
    }
}

/* One frame at *at in in; false when it waits for more bytes or the
 * connection is ending. The frames read are consumed together afterwards. */
static bool on_frame(xH2Session *s, xBuffer *in, size_t *at) {
    size_t have = in->len - *at;
    if (have < XH2_FRAME_HEADER_LEN) return false;
    xH2Frame f = xH2ReadFrame((const uint8_t *)in->data + *at);
    if (f.length > XH2_DEFAULT_FRAME_SIZE) {
        conn_error(s, XH2_FRAME_SIZE_ERROR);
        return false;
    }
    if (have < XH2_FRAME_HEADER_LEN + f.length) return false;
    if (s->in_block && f.type != XH2_CONTINUATION) {
        conn_error(s, XH2_PROTOCOL_ERROR);
        return false;
    }
    switch (f.type) {
    case XH2_DATA: on_data(s, &f); break;
    case XH2_HEADERS: on_headers(s, &f); break;
    case XH2_CONTINUATION: on_continuation(s, &f); break;
    case XH2_RST_STREAM: {
        if (f.length != 4) {
            conn_error(s, XH2_FRAME_SIZE_ERROR);
            return false;
        }
        xHttpClientRequest *req = stream_of(s, f.stream_id);
        bool refused = xH2Get32(f.payload) == XH2_REFUSED_STREAM;
        if (req && !(refused && retry_refused(s, req))) xClientFail(req, XHTTP_CLIENT_RESET);
        break;
    }
    case XH2_SETTINGS: on_settings(s, &f); break;
    case XH2_PING:
        if (!(f.flags & XH2_FLAG_ACK) && f.length == 8)
            xH2WriteFrame(s->conn, XH2_PING, XH2_FLAG_ACK, 0, f.payload, 8);
        break;
    case XH2_GOAWAY: on_goaway(s, &f); break;
    case XH2_WINDOW_UPDATE: on_window_update(s, &f); break;
    case XH2_PUSH_PROMISE: conn_error(s, XH2_PROTOCOL_ERROR); return false; /* we said no push */
    default: break;
    }
    *at += XH2_FRAME_HEADER_LEN + f.length;
    return xConnOpen(s->conn);
}

static void on_readable(xConn *conn) {
    xClientConn *cc = conn->proto_state;
    xH2Session *s = cc->h2;
    xConnRetain(conn);
    while (!xConnClosed(conn) && xConnOpen(conn)) {
        size_t at = 0;
        while (on_frame(s, &conn->in, &at)) {
        }
        if (!xConnClosed(conn)) xBufferConsume(&conn->in, at);
        pump(s); /* streams that ended made room for queued requests */
        if (xConnClosed(conn) || !xConnOpen(conn)) break;
        if (xBufferPoolAcquire(&conn->net->buffers, &conn->in) != XOK) {
            xConnClose(conn);
            break;
        }
        xBuffer *in = &conn->in;
        ssize_t n = xConnRecv(conn, in->data + in->len, in->cap - in->len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) break;
        if (n <= 0) {
            xConnClose(conn);
            break;
        }
        in->len += (size_t)n;
    }
    if (!xConnClosed(conn)) {
        xConnFlushSoon(conn);
        if (conn->in.len == 0) xBufferPoolRelease(&conn->net->buffers, &conn->in);
    }
    xConnRelease(conn);
}

static void on_flushed(xConn *conn) {
    xClientConn *cc = conn->proto_state;
    if (cc->h2) push_all(cc->h2);
}

/* The connection's own timer: the session's keep-alive while it carries nothing. */
static void on_timeout(xConn *conn) {
    xClientConn *cc = conn->proto_state;
    if (cc->h2 && !cc->h2->active) xConnClose(conn);
}

static void on_close(xConn *conn) {
    xClientConn *cc = conn->proto_state;
    xH2Session *s = cc->h2;
    xUpstreamPool *p = s->pool;
    stop_taking(s);
    while (s->streams) {
        xHttpClientRequest *req = s->streams;
        unlink_stream(req);
        if (req->cancelled || p->client->destroying) {
            req->cancelled = true;
            xClientRelease(req);
        } else {
            xClientFail(req, XHTTP_CLIENT_RESET);
        }
    }
    p->draining--;
    xClientConnClosed(cc);
}

static void on_free(xConn *conn) {
    xClientConn *cc = conn->proto_state;
    xH2Session *s = cc->h2;
    xHpackDecoderFree(&s->decoder);
    xBufferFree(&s->block);
    free(s);
    free(cc);
}

static const xConnProtocol h2_protocol = {
    .on_readable = on_readable,
    .on_flushed = on_flushed,
    .on_timeout = on_timeout,
    .on_close = on_close,
    .on_free = on_free,
};

bool xClientH2Begin(xClientConn *cc) {
    xUpstreamPool *p = cc->pool;
    xH2Session *s = calloc(1, sizeof *s);
    if (!s || xHpackDecoderInit(&s->decoder, XHPACK_INITIAL_TABLE_SIZE) != 0) {
        free(s);
        return false;
    }
    *s = (xH2Session){.cc = cc,
                      .conn = cc->conn,
                      .pool = p,
                      .next_id = 1,
                      .peer_max_streams = 100, /* until its SETTINGS say */
                      .peer_initial_window = XH2_DEFAULT_WINDOW,
                      .peer_max_frame = XH2_DEFAULT_FRAME_SIZE,
                      .send_window = XH2_DEFAULT_WINDOW,
                      .decoder = s->decoder};
    xHpackEncoderInit(&s->encoder);
    cc->h2 = s;
    p->h2 = s;
    static const uint32_t settings[][2] = {
        {XH2_SETTINGS_ENABLE_PUSH, 0},
        {XH2_SETTINGS_INITIAL_WINDOW_SIZE, H2_STREAM_WINDOW},
    };
    xConnWrite(cc->conn, h2_preface, sizeof h2_preface - 1);
    xH2WriteSettings(cc->conn, settings, sizeof settings / sizeof *settings);
    xH2WriteWindowUpdate(cc->conn, 0, H2_CONN_WINDOW - XH2_DEFAULT_WINDOW);
    xHttpClientRequest *first = cc->req;
    cc->req = NULL;
    xConnSetProtocol(cc->conn, &h2_protocol, cc);
    if (first) {
        first->cc = NULL;
        xClientH2Take(s, first);
    }
    pump(s);
    xConnFlush(s->conn);
    return true;
}

/* ---- The request head ---- */

static bool put_field(xBuffer *b, const char *name, size_t nlen, xStr value) {
    char lower[256];
    if (nlen >= sizeof lower) return false;
    for (size_t i = 0; i < nlen; i++)
        lower[i] = name[i] >= 'A' && name[i] <= 'Z' ? (char)(name[i] + 32) : name[i];
    if (xBufferReserve(b, XHPACK_FIELD_BOUND(nlen, value.len)) != XOK) return false;
    uint8_t *p = (uint8_t *)b->data + b->len;
    uint8_t *end = xHpackEncodeField(p, (xStr){lower, nlen}, value);
    b->len += (size_t)(end - p);
    return true;
}

/* RFC 9113 §8.2.2: fields of one connection never travel in HTTP/2. */
static bool connection_specific(xStr name, xStr value) {
    if (xHttpNameEquals(name, "te")) return !xHttpNameEquals(value, "trailers");
    return xHttpNameEquals(name, "connection") || xHttpNameEquals(name, "keep-alive") ||
           xHttpNameEquals(name, "proxy-connection") || xHttpNameEquals(name, "transfer-encoding") ||
           xHttpNameEquals(name, "upgrade") || xHttpNameEquals(name, "host");
}

bool xClientH2EncodeHead(xHttpClientRequest *req, const xHttpClientRequestOpts *o) {
    xBuffer *b = &req->h2_head;
    const xHttpUpstream *up = req->pool->upstream;
    xStr authority = xStrFromC(xHttpUpstreamAuthority(up));
    for (size_t i = 0; i < o->num_fields; i++)
        if (xHttpNameEquals(o->fields[i].name, "host")) authority = o->fields[i].value;
    bool ok = put_field(b, ":method", 7, o->method) &&
              put_field(b, ":scheme", 7, up->tls ? (xStr){"https", 5} : (xStr){"http", 4}) &&
              put_field(b, ":authority", 10, authority) && put_field(b, ":path", 5, o->target);
    for (size_t i = 0; ok && i < o->num_fields; i++) {
        const xHttpClientField *f = &o->fields[i];
        if (connection_specific(f->name, f->value) || xHttpNameEquals(f->name, "content-length")) continue;
        ok = put_field(b, f->name.data, f->name.len, f->value);
    }
    if (ok && o->body_length > 0) {
        char num[XHTTP_DECIMAL_MAX];
        size_t n = (size_t)(xHttpPutDecimal(num, (uint64_t)o->body_length) - num);
        ok = put_field(b, "content-length", 14, (xStr){num, n});
    }
    return ok;
}
