/* respond.c — the exchange's side of an HTTP/2 stream: a complete request
 * handed to its handler (or a streamed body to its reader), the exchange ops
 * a handler's response calls arrive through, the response framed as HEADERS
 * (HPACK-encoded, split into CONTINUATIONs when large) and DATA as far as
 * flow control and the output's high-water mark allow, and tunnels (RFC 8441)
 * kept open past their head.
 *
 * A response body is a source (http2_internal.h): a whole body in memory or
 * in a file is framed by reference and released once the last of it is
 * queued, so a body is copied at most once (Send's copy); streamed pieces,
 * which grow the buffer they sit in, are copied into the queue. */
#include <string.h>

#include "xhttp/core/tokens.h"
#include "xhttp/http2/http2_internal.h"

/* The most of a held request body a streaming reader is given at once:
 * one piece past a proxy's high-water mark at most, in a few calls. */
#define XH2_BODY_PIECE (256u << 10)

/* The largest response header block we send (its frames included). */
#define XH2_MAX_SEND_BLOCK (64u << 10)

static const xHttpExchangeOps h2_ops;

/* ---- Handing requests over ---- */

/* Gives a streaming route's reader what has arrived, a piece at a time
 * while it wants more, and the client as much window back. A reader that
 * pauses leaves the rest held here: what it writes on (a proxy's upstream)
 * then holds no second copy of the client's window. Once the response has
 * ended, the body is only discarded. The caller is in a batch, so the
 * stream outlives the reader whatever it does. */
static void deliver_body(xHttp2 *h2, xH2Stream *s) {
    xHttpExchange *ex = s->ex;
    for (;;) {
        if (s->state == XH2_STATE_CLOSED || ex->body_ended) return;
        size_t held = xH2HeldBody(s);
        if (ex->res.ended) {
            /* A dropped body's stream gets no more window: the answer's
             * RST_STREAM(NO_ERROR) ends it. */
            if (held) xH2ReleaseHeld(h2, s);
            ex->body_ended = !xH2StreamReceives(s);
            return;
        }
        size_t piece = held < XH2_BODY_PIECE ? held : XH2_BODY_PIECE;
        bool end = piece == held && !xH2StreamReceives(s);
        if (!xHttpExchangeWantsBody(ex) || !(piece || end)) return;
        /* Taken before the reader runs: it may answer, and so come back here. */
        const char *data = piece ? xH2TakeHeld(h2, s, piece) : "";
        xHttpExchangeDeliverBody(ex, data, piece, end);
        if (end) return;
    }
}

static size_t tunnel_pending(const xHttpExchange *ex) { return xH2Pending(ex->proto); }

/* Builds the exchange's request from the stream's head: its views as they
 * are, the fields included (the stream outlives the exchange). */
static bool fill_request(xH2Stream *s, xHttpExchange *ex) {
    const xH2Head *h = &s->head;
    size_t max = s->h2->conf->max_headers;
    /* Host, the last field, is the one left out where only it is one too many. */
    size_t count = h->count;
    if (h->authority.len && count == max + 1) count = max;
    if (count > max) return false;
    ex->req.method = h->method;
    ex->req.path = h->path;
    ex->req.query = h->query;
    ex->req.headers = h->fields;
    ex->req.num_headers = count;
    ex->req.fields_plain = h->plain_fields; /* HPACK judged the names (tokens) and :authority */
    /* A streaming route's body goes to its reader; what has come so far
     * would move as more arrives. */
    bool whole = s->body.data && !s->streams_body;
    ex->req.body.data = whole ? s->body.data : "";
    ex->req.body.len = whole ? s->body.len : 0;
    ex->req.protocol = "HTTP/2";
    return true;
}

static void dispatch(xHttp2 *h2, xH2Stream *s) {
    xConn *conn = h2->conn;
    xHttpExchange *ex = s->ex ? s->ex : xHttpExchangeAcquire(xHttpContextOf(conn));
    if (ex) s->ex = ex; /* released with the stream */
    if (!ex) {
        xH2StreamError(h2, s->id, XH2_INTERNAL_ERROR);
        return;
    }
    ex->ops = &h2_ops;
    ex->proto = s;
    ex->req.conn = s->h2->conn;
    s->dispatched = true;
    xConnRetain(conn); /* released with the stream, however late the response */
    if (!fill_request(s, ex)) {
        xHttpExchangeSendStatus(ex, 431);
        return;
    }
    if (s->reject_status) {
        xHttpExchangeSendStatus(ex, s->reject_status);
        return;
    }
    if (s->head.tunnel) ex->tunnel.pending = tunnel_pending;
    xH2RouteByHead(s);
    xHttpExchangeDispatch(ex);
    if (ex->streams_body) deliver_body(h2, s);
}

void xH2DispatchReady(xHttp2 *h2) {
    while (h2->ready && !xConnClosed(h2->conn)) {
        xH2Stream *s = h2->ready;
        h2->ready = s->next_ready;
        if (!h2->ready) h2->ready_tail = NULL;
        s->ready = false;
        s->next_ready = NULL;
        if (s->state == XH2_STATE_CLOSED)
            xH2StreamSettle(s); /* reset before we got to it */
        else if (!s->dispatched)
            dispatch(h2, s);
        else
            deliver_body(h2, s); /* more of a streamed body */
    }
}

/* ---- Header blocks ---- */

/* Splits an encoded block of len bytes at p + 9 into HEADERS and
 * CONTINUATION frames in place (the room after it was reserved); returns
 * the bytes of all its frames. */
static size_t frame_block(uint8_t *p, size_t len, int32_t id, uint8_t flags) {
    size_t frames = len ? (len + XH2_DEFAULT_FRAME_SIZE - 1) / XH2_DEFAULT_FRAME_SIZE : 1;
    for (size_t i = frames; i-- > 1;) { /* the last piece moves furthest: move it first */
        size_t from = i * XH2_DEFAULT_FRAME_SIZE,
               n = len - from < XH2_DEFAULT_FRAME_SIZE ? len - from : XH2_DEFAULT_FRAME_SIZE;
        uint8_t *to = p + i * (XH2_FRAME_HEADER_LEN + XH2_DEFAULT_FRAME_SIZE);
        memmove(to + XH2_FRAME_HEADER_LEN, p + XH2_FRAME_HEADER_LEN + from, n);
        xH2PutFrameHeader(to, (uint32_t)n, XH2_CONTINUATION, i == frames - 1 ? XH2_FLAG_END_HEADERS : 0, id);
    }
    size_t first = len < XH2_DEFAULT_FRAME_SIZE ? len : XH2_DEFAULT_FRAME_SIZE;
    flags |= frames == 1 ? XH2_FLAG_END_HEADERS : 0;
    xH2PutFrameHeader(p, (uint32_t)first, XH2_HEADERS, flags, id);
    return len + frames * XH2_FRAME_HEADER_LEN;
}

_Static_assert(sizeof(((xHttp2 *)0)->fixed_fields) >=
                   XHPACK_FIELD_BOUND(0, sizeof(((xHttpOwnAnswers *)0)->server_line)) +
                       XHPACK_FIELD_BOUND(0, XHTTP_DATE_LEN) +
                       XHPACK_FIELD_BOUND(7, sizeof(((xHttpAltSvc *)0)->line)),
               "room for server, date and alt-svc, each at its worst");

/* Writes the port's alt-svc at p, where it has one. */
static uint8_t *put_alt_svc(xHttp2 *h2, uint8_t *p) {
    const xHttpContext *ctx = xHttpContextOf(h2->conn);
    const xHttpAltSvc *alt = ctx->alt_svc_count ? xHttpAltSvcOf(ctx, h2->conn) : NULL;
    if (!alt) return p;
    /* The line is "Alt-Svc: VALUE\r\n". */
    return xHpackEncodeIndexed(&h2->encoder, p, XHPACK_TOKEN_NONE, (xStr){"alt-svc", 7},
                               (xStr){alt->line + 9, (size_t)alt->len - 11});
}

/* Writes server (unless the handler set its own), date and the port's
 * alt-svc at p through the dynamic table. Their encoding is copied while the
 * second, the table and the choice of server are as they were: it is encoded
 * again only when one of them changed, and kept only when it added nothing to
 * the table (the next time, those fields go out by index). */
static uint8_t *put_fixed_fields(xHttp2 *h2, uint8_t *p, const xEventLoop *loop, time_t now, bool server) {
    uint32_t version = h2->encoder.table.version;
    if (h2->fixed_len && now == h2->fixed_second && version == h2->fixed_version &&
        server == h2->fixed_server) {
        memcpy(p, h2->fixed_fields, h2->fixed_len);
        return p + h2->fixed_len;
    }
    const char *date = xHttpDate(&xHttpContextOf(h2->conn)->date, loop);
    xStr name = xHttpContextOf(h2->conn)->answers->server_name;
    uint8_t *end = p;
    if (server && name.len)
        end = xHpackEncodeIndexed(&h2->encoder, end, XHPACK_TOKEN_SERVER,
                                  xHpackTokenNames[XHPACK_TOKEN_SERVER], name);
    end = xHpackEncodeIndexed(&h2->encoder, end, XHPACK_TOKEN_DATE, xHpackTokenNames[XHPACK_TOKEN_DATE],
                              (xStr){date, XHTTP_DATE_LEN});
    end = put_alt_svc(h2, end);
    h2->fixed_len = 0;
    if (h2->encoder.table.version == version) {
        h2->fixed_len = (size_t)(end - p);
        memcpy(h2->fixed_fields, p, h2->fixed_len);
        h2->fixed_second = now;
        h2->fixed_version = version;
        h2->fixed_server = server;
    }
    return end;
}

/* Whether the head memo holds this response head's block: the same inputs,
 * within the same second and table version, and no size update due. */
static bool head_memo_hit(const xHttp2 *h2, const xHttpResponse *res, time_t now, bool with_length,
                          size_t length) {
    const xH2HeadMemo *m = &h2->head_memo;
    return m->coded_len && now == m->second && h2->encoder.table.version == m->version &&
           !h2->encoder.update_due && res->status == m->status && res->own_server != m->server &&
           with_length == m->with_length && (!with_length || length == m->length) &&
           res->headers.len == m->lines_len &&
           (!m->lines_len || memcmp(res->headers.data, m->lines, m->lines_len) == 0);
}

/* Writes a response head's fields at p (the frame's payload): the memo's
 * copy when it holds them, else encoded (:status, server, date, the
 * handler's lines, content-length when with_length), and kept for the next
 * response when encoding them left the encoder as it was. */
static uint8_t *put_head(xHttp2 *h2, xHttpExchange *ex, uint8_t *p, bool with_length, size_t length) {
    xH2HeadMemo *m = &h2->head_memo;
    xHpackEncoder *e = &h2->encoder;
    xBuffer *lines = &ex->res.headers;
    time_t now = xEventLoopWallSeconds(ex->req.loop);
    if (head_memo_hit(h2, &ex->res, now, with_length, length)) {
        memcpy(p, m->coded, m->coded_len);
        return p + m->coded_len;
    }
    uint32_t version = e->table.version;
    /* A content-length that goes out by index leaves the encoder's length memo as it is. */
    bool keep =
        !e->update_due && lines->len <= sizeof m->lines && (!with_length || xHpackLengthIndexed(e, length));
    m->coded_len = 0;
    if (keep && lines->len) memcpy(m->lines, lines->data, lines->len); /* before their names are folded */
    uint8_t *start = p;
    p = xHpackEncodeBegin(e, p);
    p = xHpackEncodeStatus(p, ex->res.status);
    p = put_fixed_fields(h2, p, ex->req.loop, now, !ex->res.own_server);
    /* Response field names must be lower case in HTTP/2 (RFC 9113 §8.2.1);
     * handlers write them as they like, so they are folded where they lie:
     * the exchange's header lines are HTTP/2's alone. */
    if (lines->len) p = xHpackEncodeLines(e, p, lines->data, lines->len);
    if (with_length) p = xHpackEncodeContentLengthIndexed(e, p, length);
    if (keep && e->table.version == version && (size_t)(p - start) <= sizeof m->coded) {
        m->coded_len = (uint8_t)(p - start);
        memcpy(m->coded, start, m->coded_len);
        m->lines_len = (uint8_t)lines->len;
        m->length = with_length ? length : 0;
        m->second = now;
        m->version = version;
        m->status = (uint16_t)ex->res.status;
        m->with_length = with_length;
        m->server = !ex->res.own_server;
    }
    return p;
}

/* Queues a header block for s: the response head (put_head) or, when
 * trailers, the trailer lines. */
static xErrno write_block(xH2Stream *s, bool trailers, bool with_length, size_t length, uint8_t flags) {
    xHttp2 *h2 = s->h2;
    xHttpExchange *ex = s->ex;
    xBuffer *lines = trailers ? &ex->res.trailers : &ex->res.headers;
    /* Each line takes at most its bytes plus 12 (XHPACK_FIELD_BOUND); a line is at least 4. */
    size_t bound = 128 + XHPACK_BEGIN_BOUND + sizeof h2->fixed_fields + XHTTP_DECIMAL_MAX + lines->len * 4;
    if (bound > XH2_MAX_SEND_BLOCK) return XERR_STATE;
    bound += (bound / XH2_DEFAULT_FRAME_SIZE + 1) * XH2_FRAME_HEADER_LEN;
    uint8_t *base = (uint8_t *)xConnReserve(h2->conn, bound);
    if (!base) return XERR_NOMEM;
    uint8_t *p;
    if (!trailers) {
        p = put_head(h2, ex, base + XH2_FRAME_HEADER_LEN, with_length, length);
    } else {
        p = xHpackEncodeBegin(&h2->encoder, base + XH2_FRAME_HEADER_LEN);
        if (lines->len) p = xHpackEncodeLines(&h2->encoder, p, lines->data, lines->len);
    }
    size_t len = (size_t)(p - base - XH2_FRAME_HEADER_LEN);
    xConnCommit(h2->conn, frame_block(base, len, s->id, flags));
    return XOK;
}

static xErrno submit_head(xH2Stream *s, bool with_length, size_t length, bool with_body) {
    s->ex->res.head_sent = true;
    xErrno err = write_block(s, false, with_length, length, with_body ? 0 : XH2_FLAG_END_STREAM);
    if (err != XOK) {
        xH2StreamError(s->h2, s->id, XH2_INTERNAL_ERROR);
        return err;
    }
    s->head_written = true;
    if (!with_body) xH2StreamLocalEnd(s);
    return XOK;
}

static bool response_has_body(const xHttpExchange *ex) {
    return xHttpStatusHasBody(ex->res.status) && !xStrEqualsC(ex->req.method, "HEAD");
}

/* A streamed response's head: content-length when the handler declared
 * the body's length (xHttpResponseSetLength). */
static xErrno submit_streamed_head(xH2Stream *s) {
    const xHttpResponse *res = &s->ex->res;
    bool with_length = res->length_declared && xHttpStatusHasBody(res->status);
    return submit_head(s, with_length, with_length ? res->declared_length : 0, response_has_body(s->ex));
}

/* ---- Bodies ---- */

/* Releases memory the connection's queue may still point into, once the
 * queue is past it. */
static void hand_over(xH2Stream *s, void (*release)(void *), void *arg) {
    if (release) xConnWriteRef(s->h2->conn, NULL, 0, release, arg);
}

void xH2SourceRelease(xH2Stream *s) {
    xH2BodySource *b = &s->out;
    if (b->kind == XH2_SOURCE_STREAMED) {
        /* Its room stays with the stream (a spare one too) for the next
         * streamed body: a proxied answer otherwise cost a malloc and a free. */
        if (s->kept_pieces.data) xBufferFree(&s->kept_pieces);
        s->kept_pieces = (xBuffer){b->pieces.data, 0, b->pieces.cap};
    } else {
        hand_over(s, b->release, b->release_arg);
    }
    *b = (xH2BodySource){.kind = XH2_SOURCE_NONE};
}

/* Queues n bytes of s's body, the next it has. */
static xErrno frame_body(xH2Stream *s, xConn *conn, size_t n) {
    xH2BodySource *b = &s->out;
    xErrno err;
    switch (b->kind) {
    case XH2_SOURCE_MEMORY: err = xConnWriteRef(conn, b->memory + b->framed, n, NULL, NULL); break;
    case XH2_SOURCE_BORROWED:
        err = XOK;
        break; /* copied with its frame's header (frame_stream) */
    /* A frame's worth of file (up to XCONN_FILE_COPY_MAX) is read into the
     * queue now; the file stays open until the last frame is out. */
    case XH2_SOURCE_FILE:
        err = xConnWriteFile(conn, b->file.fd, b->file.offset + (off_t)b->framed, n, NULL, NULL);
        break;
    case XH2_SOURCE_STREAMED: err = xConnWrite(conn, b->pieces.data + b->framed, n); break;
    default: return XERR_STATE;
    }
    b->framed += n;
    if (b->framed == b->len) {
        if (b->kind == XH2_SOURCE_STREAMED)
            b->len = b->framed = b->pieces.len = 0; /* the buffer is kept for the next pieces */
        else
            xH2SourceRelease(s);
    }
    return err;
}

/* Frames what s has to send as far as the windows and the output's
 * high-water mark allow, ending the stream (END_STREAM, or trailers) once
 * the response is complete. May close s, and free it unless in an op. */
static void frame_stream(xH2Stream *s) {
    xHttp2 *h2 = s->h2;
    xConn *conn = h2->conn;
    if (!xH2StreamSends(s) || !s->head_written || xConnClosed(conn) || h2->failed) return;
    bool ended = s->ex->res.ended; /* no more body is coming */
    bool trailers = s->ex->res.trailers.len;
    for (;;) {
        size_t avail = xH2Pending(s);
        if (!avail && !ended) return;
        if (xConnPending(conn) > XH2_OUTPUT_HIGH_WATER) return;
        int64_t window = s->send_window < h2->send_window ? s->send_window : h2->send_window;
        size_t n = avail < XH2_DEFAULT_FRAME_SIZE ? avail : XH2_DEFAULT_FRAME_SIZE;
        if ((int64_t)n > window) n = window > 0 ? (size_t)window : 0;
        if (!n && avail) return; /* the client's window holds it */
        bool last = ended && n == avail;
        if (n || !trailers) {
            /* A borrowed body's bytes go in with the header, one reservation. */
            size_t copied = s->out.kind == XH2_SOURCE_BORROWED ? n : 0;
            uint8_t *p = (uint8_t *)xConnReserve(conn, XH2_FRAME_HEADER_LEN + copied);
            if (!p) return;
            xH2PutFrameHeader(p, (uint32_t)n, XH2_DATA, last && !trailers ? XH2_FLAG_END_STREAM : 0, s->id);
            if (copied) memcpy(p + XH2_FRAME_HEADER_LEN, s->out.memory + s->out.framed, copied);
            xConnCommit(conn, XH2_FRAME_HEADER_LEN + copied);
            if (n && frame_body(s, conn, n) != XOK) return;
            s->send_window -= (int64_t)n;
            h2->send_window -= (int64_t)n;
            h2->progress += n;
        }
        if (last) {
            if (trailers) write_block(s, true, false, 0, XH2_FLAG_END_STREAM);
            xH2StreamLocalEnd(s);
            return;
        }
    }
}

void xH2FrameAll(xHttp2 *h2) {
    xH2Stream *next;
    for (xH2Stream *s = h2->streams; s; s = next) {
        next = s->next;
        if (xH2StreamSends(s) && s->head_written && (xH2Pending(s) || s->ex->res.ended)) frame_stream(s);
    }
}

/* ---- The exchange's ops ---- */

/* A borrowed body's part the windows held back, copied to a block from the
 * worker's cache before the handler's memory goes (the stream is reset when
 * none can be had); it is an ordinary memory body from then on. A stream
 * that can no longer send drops it. */
static void keep_borrowed(xH2Stream *s) {
    xH2BodySource *b = &s->out;
    size_t left = xH2StreamSends(s) ? xH2Pending(s) : 0;
    char *block = left ? xMemCacheAlloc(s->h2->conn->net->mem, left) : NULL;
    if (!block) {
        xH2SourceRelease(s);
        if (left) xH2StreamError(s->h2, s->id, XH2_INTERNAL_ERROR);
        return;
    }
    memcpy(block, b->memory + b->framed, left);
    *b = (xH2BodySource){.kind = XH2_SOURCE_MEMORY,
                         .len = left,
                         .memory = block,
                         .release = xMemCacheRelease,
                         .release_arg = block};
}

/* The handler is done with the exchange: what is left is framed, and a
 * closed stream goes. */
static void end_exchange(xH2Stream *s) {
    xHttp2 *h2 = s->h2;
    s->ex->res.ended = true;
    /* What came of a streamed body is dropped, and its window given back, so
     * the client can finish sending and the stream can close. */
    if (s->ex->streams_body) deliver_body(h2, s);
    xConn *conn = h2->conn;
    xConnRetain(conn);
    frame_stream(s);
    if (s->out.kind == XH2_SOURCE_BORROWED) keep_borrowed(s);
    s->in_op = false;
    if (s->state == XH2_STATE_CLOSED) xH2StreamFree(s);
    xH2PumpSoon(h2);
    xConnRelease(conn);
}

/* Send's copy: a block from the worker's cache, handed to the output queue
 * by reference and given back to the cache by it. */
static xErrno copy_body(xH2Stream *s, xH2BodySource *body) {
    char *block = xMemCacheAlloc(s->h2->conn->net->mem, body->len);
    if (!block) return XERR_NOMEM;
    memcpy(block, body->memory, body->len);
    body->memory = block;
    body->release = xMemCacheRelease;
    body->release_arg = block;
    return XOK;
}

/* A whole body, from memory or a file: the stream takes it (and its
 * release) when the answer has a body; otherwise it is released now. HEAD
 * gets the length GET would have; 1xx, 204 and 304 get none. copy: the
 * memory is the caller's, copied first. */
static xErrno send_whole(xHttpExchange *ex, xH2BodySource body, bool copy) {
    xH2Stream *s = ex->proto;
    xErrno err = XOK;
    bool with_body = body.len && response_has_body(ex);
    s->in_op = true;
    if (ex->res.aborted || s->state == XH2_STATE_CLOSED) {
        err = XERR_CLOSED;
    } else {
        /* A small body is framed by copy now (the queue would copy it
         * anyway), a larger one copied once to be framed by reference. */
        if (with_body && copy && body.len < XCONN_COPY_BELOW)
            body.kind = XH2_SOURCE_BORROWED;
        else if (with_body && copy)
            err = copy_body(s, &body);
        if (with_body && err == XOK) {
            s->out = body;
            body.release = NULL; /* the stream's now */
        }
        if (err == XOK) err = submit_head(s, xHttpStatusHasBody(ex->res.status), body.len, with_body);
    }
    if (body.release) body.release(body.release_arg);
    end_exchange(s);
    return err;
}

static xErrno h2_send(xHttpExchange *ex, const void *body, size_t len, bool copy, void (*release)(void *),
                      void *release_arg) {
    return send_whole(ex,
                      (xH2BodySource){.kind = XH2_SOURCE_MEMORY,
                                      .len = len,
                                      .memory = body,
                                      .release = copy ? NULL : release, /* a copied body stays the caller's */
                                      .release_arg = release_arg},
                      copy);
}

static xErrno h2_send_file(xHttpExchange *ex, int fd, off_t offset, size_t len, void (*release)(void *),
                           void *release_arg) {
    return send_whole(ex,
                      (xH2BodySource){.kind = XH2_SOURCE_FILE,
                                      .len = len,
                                      .file = {fd, offset},
                                      .release = release,
                                      .release_arg = release_arg},
                      false);
}

static xErrno h2_write(xHttpExchange *ex, const void *data, size_t len) {
    xH2Stream *s = ex->proto;
    if (ex->res.aborted || s->state == XH2_STATE_CLOSED) return XERR_CLOSED;
    xErrno err = XOK;
    s->in_op = true;
    if (!ex->res.head_sent) err = submit_streamed_head(s);
    if (err == XOK && len && response_has_body(ex)) {
        xH2BodySource *b = &s->out;
        if (b->kind == XH2_SOURCE_NONE) {
            *b = (xH2BodySource){.kind = XH2_SOURCE_STREAMED, .pieces = s->kept_pieces};
            s->kept_pieces = (xBuffer){NULL, 0, 0};
        }
        /* Framed bytes leave the front once they are half the buffer: a
         * writer that refills before the client's window lets all of it go
         * (a proxy waking at its low-water mark) would otherwise grow the
         * buffer by every byte it ever wrote. The bytes moved never outnumber
         * those dropped. */
        if (b->framed && b->framed >= b->len / 2) {
            xBufferConsume(&b->pieces, b->framed);
            b->len = b->pieces.len;
            b->framed = 0;
        }
        err = xBufferAppend(&b->pieces, data, len);
        b->len = b->pieces.len;
        /* Up to a stream window's worth waits for the turn's end, where it
         * leaves with the turn's other output (and with END_STREAM, when the
         * writer ends it meanwhile); more is framed and sent now. */
        if (xH2Pending(s) < XH2_DEFAULT_WINDOW)
            xH2PumpSoon(s->h2);
        else if (!s->h2->in_batch)
            xH2Pump(s->h2);
    }
    s->in_op = false;
    if (s->state == XH2_STATE_CLOSED) xH2StreamSettle(s);
    return err;
}

static xErrno h2_end(xHttpExchange *ex) {
    xH2Stream *s = ex->proto;
    xErrno err = XOK;
    s->in_op = true;
    if (!ex->res.aborted && s->state != XH2_STATE_CLOSED && !ex->res.head_sent) {
        /* Ended before any body: the head alone ends the stream, not an
         * empty DATA after it (gRPC's trailers-only answer, which grpc-go
         * requires in one HEADERS frame, is this). Trailers follow it. */
        const xHttpResponse *res = &ex->res;
        bool with_length = res->length_declared && xHttpStatusHasBody(res->status);
        err = res->trailers.len ? submit_streamed_head(s)
                                : submit_head(s, with_length, with_length ? res->declared_length : 0, false);
    }
    end_exchange(s);
    return err;
}

static size_t h2_pending(const xHttpExchange *ex) { return xH2Pending(ex->proto); }

/* Each pump looks at armed streams (xH2WakeTunnels); one runs when the
 * client's WINDOW_UPDATE or the socket's drain moves output on. */
static void h2_watch_drain(xHttpExchange *ex) { (void)ex; }

/* RST_STREAM(INTERNAL_ERROR): this stream ends cut, the others go on. */
static void h2_reset(xHttpExchange *ex) {
    xH2Stream *s = ex->proto;
    s->in_op = true;
    /* What was written goes first as far as the windows allow, as it would
     * have had each write been sent at once (xH2PumpSoon leaves it to the
     * turn's end); what they hold back is never sent. */
    frame_stream(s);
    xH2SourceRelease(s);
    if (s->state != XH2_STATE_CLOSED) xH2StreamError(s->h2, s->id, XH2_INTERNAL_ERROR);
    end_exchange(s);
}

static void h2_body_wanted(xHttpExchange *ex) {
    xH2Stream *s = ex->proto;
    xHttp2 *h2 = s->h2;
    if (h2->in_batch) {
        xH2MarkReady(h2, s); /* the batch under way delivers */
        return;
    }
    xConn *conn = h2->conn;
    xConnRetain(conn);
    h2->in_batch = true;
    deliver_body(h2, s);
    h2->in_batch = false;
    if (!xConnClosed(conn)) xH2Pump(h2);
    xConnRelease(conn);
}

static const xHttpExchangeOps h2_ops = {
    .send = h2_send,
    .send_file = h2_send_file,
    .write = h2_write,
    .end = h2_end,
    .body_wanted = h2_body_wanted,
    .pending = h2_pending,
    .watch_drain = h2_watch_drain,
    .reset = h2_reset,
};

/* ---- Tunnels (RFC 8441): an extended CONNECT's holder (a WebSocket) ---- */

/* In a batch, so what the holders resume is delivered here and what they
 * write is framed by the caller. */
bool xH2WakeTunnels(xHttp2 *h2) {
    bool woke = false, was_in_batch = h2->in_batch;
    h2->in_batch = true;
    xH2Stream *next;
    for (xH2Stream *s = h2->streams; s; s = next) {
        next = s->next;
        xHttpExchange *ex = s->ex;
        if (s->state == XH2_STATE_CLOSED || !s->dispatched) continue;
        if (ex->res.on_drain && xH2Pending(s) <= ex->res.drain_low) {
            xHttpExchangeCheckDrain(ex); /* may end, and free, s */
            woke = true;
            continue;
        }
        if (!ex->tunnel.drained || xH2Pending(s)) continue;
        void (*drained)(xHttpExchange *, void *) = ex->tunnel.drained;
        ex->tunnel.drained = NULL;
        drained(ex, ex->tunnel.arg);
        woke = true;
    }
    xH2DispatchReady(h2);
    h2->in_batch = was_in_batch;
    return woke;
}

/* A tunnel never finishes by itself: its holder ends it (a WebSocket with
 * its close handshake). */
void xH2StopTunnels(xHttp2 *h2) {
    bool was_in_batch = h2->in_batch;
    h2->in_batch = true;
    xH2Stream *next;
    for (xH2Stream *s = h2->streams; s; s = next) {
        next = s->next;
        if (s->state != XH2_STATE_CLOSED && s->dispatched && !s->ex->res.ended && s->ex->tunnel.stopping)
            s->ex->tunnel.stopping(s->ex, s->ex->tunnel.arg);
    }
    h2->in_batch = was_in_batch;
}
