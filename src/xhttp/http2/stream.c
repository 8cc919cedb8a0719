/* stream.c — HTTP/2 streams (RFC 9113 §5): made (or reused from a
 * connection's spares) and kept in the id table, moved through §5.1's states
 * by one table, their flow-control windows, the request each takes in (its
 * head copied out of the decoder's scratch, or shared with the streams of the
 * same remembered block; its body buffered, or held for a streaming route's
 * reader), and their end.
 *
 * A stream lives on after it closes for as long as a handler holds its
 * exchange or the ready queue holds it; then it becomes a spare. */
#include <stdlib.h>
#include <string.h>

#include "xhttp/http2/http2_internal.h"
#include "xhttp/http2/request.h"

/* A spare stream keeps a request body buffer up to this size. */
#define XH2_SPARE_BODY_CAP (64u << 10)

/* ---- States ---- */

/* RFC 9113 §5.1's moves, for the events a server sees. Where a move is not
 * in the RFC's figure the state stays: the frame handlers answer those
 * frames (DATA or trailers after END_STREAM: STREAM_CLOSED) before they get
 * here, and our side ends once. */
static const uint8_t transitions[XH2_STATES][XH2_EVENTS] = {
    [XH2_STATE_IDLE] =
        {
            [XH2_RECV_HEADERS] = XH2_STATE_OPEN,
            [XH2_RECV_END_STREAM] = XH2_STATE_IDLE,
            [XH2_SEND_END_STREAM] = XH2_STATE_IDLE,
            [XH2_RESET] = XH2_STATE_CLOSED,
        },
    [XH2_STATE_OPEN] =
        {
            [XH2_RECV_HEADERS] = XH2_STATE_OPEN,
            [XH2_RECV_END_STREAM] = XH2_STATE_HALF_CLOSED_REMOTE,
            [XH2_SEND_END_STREAM] = XH2_STATE_HALF_CLOSED_LOCAL,
            [XH2_RESET] = XH2_STATE_CLOSED,
        },
    [XH2_STATE_HALF_CLOSED_REMOTE] =
        {
            [XH2_RECV_HEADERS] = XH2_STATE_HALF_CLOSED_REMOTE,
            [XH2_RECV_END_STREAM] = XH2_STATE_HALF_CLOSED_REMOTE,
            [XH2_SEND_END_STREAM] = XH2_STATE_CLOSED,
            [XH2_RESET] = XH2_STATE_CLOSED,
        },
    [XH2_STATE_HALF_CLOSED_LOCAL] =
        {
            [XH2_RECV_HEADERS] = XH2_STATE_HALF_CLOSED_LOCAL,
            [XH2_RECV_END_STREAM] = XH2_STATE_CLOSED,
            [XH2_SEND_END_STREAM] = XH2_STATE_HALF_CLOSED_LOCAL,
            [XH2_RESET] = XH2_STATE_CLOSED,
        },
    [XH2_STATE_CLOSED] =
        {
            [XH2_RECV_HEADERS] = XH2_STATE_CLOSED,
            [XH2_RECV_END_STREAM] = XH2_STATE_CLOSED,
            [XH2_SEND_END_STREAM] = XH2_STATE_CLOSED,
            [XH2_RESET] = XH2_STATE_CLOSED,
        },
};

/* The stream leaves the table: frames on its id no longer reach it, and,
 * unless a handler or the ready queue still has it, it goes. */
static void on_closed(xH2Stream *s) {
    xH2TableRemove(&s->h2->table, s->id);
    /* Held body bytes will never be delivered now: their share of the
     * connection's window goes back, whoever still holds the exchange. */
    if (s->streams_body && xH2HeldBody(s)) xH2ReleaseHeld(s->h2, s);
    if (!s->ready && !s->in_op) xH2StreamSettle(s); /* otherwise xH2DispatchReady or the op does */
}

/* Every change of a stream's state is made here. */
static void move(xH2Stream *s, xH2StreamEvent event) {
    xH2StreamState from = s->state;
    s->state = (xH2StreamState)transitions[from][event];
    if (s->state == XH2_STATE_CLOSED && from != XH2_STATE_CLOSED) on_closed(s);
}

void xH2StreamClose(xH2Stream *s) { move(s, XH2_RESET); }

/* ---- Making and freeing ---- */

/* A stream for id, idle until its HEADERS is taken; NULL when out of memory. */
static xH2Stream *stream_new(xHttp2 *h2, int32_t id) {
    xH2Stream *s = h2->spare;
    if (s) {
        /* Reuse it whole: its buffers keep their storage, emptied. */
        h2->spare = s->next;
        h2->spare_count--;
        xBuffer strings = s->strings, fields = s->fields, body = s->body, pieces = s->kept_pieces;
        memset(s, 0, sizeof *s);
        s->kept_pieces = pieces;
        s->strings = (xBuffer){strings.data, 0, strings.cap};
        s->fields = (xBuffer){fields.data, 0, fields.cap};
        s->body = (xBuffer){body.data, 0, body.cap};
    } else if (!(s = calloc(1, sizeof *s))) {
        return NULL;
    }
    if (!xH2TableAdd(&h2->table, id, s)) {
        s->next = h2->spare; /* back where it came from, or onto the list */
        h2->spare = s;
        h2->spare_count++;
        return NULL;
    }
    s->h2 = h2;
    s->id = id;
    s->state = XH2_STATE_IDLE;
    s->head.declared_length = -1;
    s->head.fields = (const xHttpField *)s->fields.data;
    s->head.query = (xStr){"", 0}; /* a head never taken (431) has none */
    s->send_window = h2->peer_window;
    s->recv_window = h2->stream_window;
    s->next = h2->streams;
    if (h2->streams) h2->streams->prev = s;
    h2->streams = s;
    xCounterAdd(&xHttpContextOf(h2->conn)->counters.http2_streams, 1); /* metrics (observe/) */
    return s;
}

static void stream_destroy(xH2Stream *s) {
    xBufferFree(&s->strings);
    xBufferFree(&s->fields);
    xBufferFree(&s->body);
    xBufferFree(&s->kept_pieces);
    free(s);
}

/* Takes a stream out of the ready queue. */
static void unqueue(xHttp2 *h2, xH2Stream *s) {
    xH2Stream **link = &h2->ready, *prev = NULL;
    while (*link && *link != s) {
        prev = *link;
        link = &prev->next_ready;
    }
    if (!*link) return;
    *link = s->next_ready;
    if (h2->ready_tail == s) h2->ready_tail = prev;
    s->ready = false;
}

void xH2StreamFree(xH2Stream *s) {
    xHttp2 *h2 = s->h2;
    if (s->ready) unqueue(h2, s); /* rare: ended from another stream's handler */
    /* A streamed body nobody took may still hold the connection's window. */
    if (s->streams_body && xH2HeldBody(s)) xH2ReleaseHeld(h2, s);
    if (s->state != XH2_STATE_CLOSED) xH2TableRemove(&h2->table, s->id);
    if (s->prev)
        s->prev->next = s->next;
    else
        h2->streams = s->next;
    if (s->next) s->next->prev = s->prev;
    xH2SourceRelease(s);
    if (s->ex) xHttpExchangeRelease(xHttpContextOf(h2->conn), s->ex);
    xH2SharedHeadRelease(s->shared);
    s->shared = NULL;
    bool held_conn = s->dispatched;
    xConn *conn = h2->conn;
    if (s->body.cap > XH2_SPARE_BODY_CAP) xBufferFree(&s->body);
    if (s->kept_pieces.cap > XH2_SPARE_BODY_CAP) xBufferFree(&s->kept_pieces);
    if (h2->spare_count < XH2_SPARE_STREAMS) {
        s->next = h2->spare;
        h2->spare = s;
        h2->spare_count++;
    } else {
        stream_destroy(s);
    }
    if (held_conn) xConnRelease(conn); /* may free h2 */
}

void xH2SharedHeadRelease(xH2SharedHead *shared) {
    if (shared && !--shared->refs) free(shared);
}

void xH2StreamsFree(xHttp2 *h2) {
    while (h2->streams) xH2StreamFree(h2->streams);
    xH2SharedHeadRelease(h2->shared_head);
    h2->shared_head = NULL;
    while (h2->spare) {
        xH2Stream *s = h2->spare;
        h2->spare = s->next;
        stream_destroy(s);
    }
}

void xH2StreamSettle(xH2Stream *s) {
    if (!s->dispatched || s->ex->res.ended || xHttpExchangeAbort(s->ex)) xH2StreamFree(s);
}

/* ---- Flow control ---- */

void xH2ConsumeConn(xHttp2 *h2, size_t n) {
    h2->recv_consumed += (uint32_t)n;
    if (h2->recv_consumed < h2->conn_window / 2 || h2->failed) return;
    xH2WriteWindowUpdate(h2->conn, 0, h2->recv_consumed);
    h2->recv_window += h2->recv_consumed;
    h2->recv_consumed = 0;
}

void xH2ConsumeStream(xH2Stream *s, size_t n) {
    if (!xH2StreamReceives(s)) return; /* no more is coming */
    s->recv_consumed += (uint32_t)n;
    if (s->recv_consumed < s->h2->stream_window / 2 || s->h2->failed) return;
    xH2WriteWindowUpdate(s->h2->conn, s->id, s->recv_consumed);
    s->recv_window += s->recv_consumed;
    s->recv_consumed = 0;
}

void xH2ReleaseHeld(xHttp2 *h2, xH2Stream *s) {
    size_t due = xH2HeldLeave(&h2->held_window, &s->held_share, xH2HeldBody(s));
    if (due) xH2ConsumeConn(h2, due);
    s->body.len = s->body_taken = 0;
}

const char *xH2TakeHeld(xHttp2 *h2, xH2Stream *s, size_t n) {
    const char *at = s->body.data + s->body_taken;
    xH2ConsumeStream(s, n);
    size_t due = xH2HeldLeave(&h2->held_window, &s->held_share, n);
    if (due) xH2ConsumeConn(h2, due);
    s->body_taken += n;
    /* All taken: the next bytes start at the front again. The bytes handed
     * over stay where they are until then (nothing arrives while a reader
     * runs). */
    if (s->body_taken == s->body.len) s->body.len = s->body_taken = 0;
    return at;
}

/* Room for len more held bytes. What the reader took goes from the front
 * once it is as much as what is left, or where the buffer would otherwise
 * grow: a paused reader's body is held in one window's memory, and the
 * moves cost no more than the bytes taken. */
static xErrno hold_body(xH2Stream *s, const uint8_t *data, size_t len) {
    size_t held = xH2HeldBody(s);
    if (s->body_taken && (s->body_taken >= held || s->body.cap - s->body.len < len)) {
        memmove(s->body.data, s->body.data + s->body_taken, held);
        s->body.len = held;
        s->body_taken = 0;
    }
    return xBufferAppend(&s->body, data, len);
}

/* ---- Resets ---- */

static void remember_reset(xHttp2 *h2, int32_t id) {
    h2->reset[h2->reset_next] = id;
    h2->reset_next = (h2->reset_next + 1) % XH2_RESET_MEMORY;
}

bool xH2WasReset(const xHttp2 *h2, int32_t id) {
    for (size_t i = 0; i < XH2_RESET_MEMORY; i++)
        if (h2->reset[i] == id) return true;
    return false;
}

bool xH2StreamError(xHttp2 *h2, int32_t id, xH2Error code) {
    xH2WriteReset(h2->conn, id, code);
    remember_reset(h2, id);
    xH2Stream *s = xH2TableFind(&h2->table, id);
    if (s) xH2StreamClose(s);
    return xH2OweControl(h2);
}

/* ---- Ends ---- */

void xH2MarkReady(xHttp2 *h2, xH2Stream *s) {
    if (s->ready) return;
    s->ready = true;
    if (h2->ready_tail)
        h2->ready_tail->next_ready = s;
    else
        h2->ready = s;
    h2->ready_tail = s;
}

void xH2StreamRemoteEnd(xHttp2 *h2, xH2Stream *s) {
    if (s->state == XH2_STATE_CLOSED) return; /* reset while its last DATA was taken */
    if (!s->dispatched || s->streams_body) xH2MarkReady(h2, s);
    move(s, XH2_RECV_END_STREAM);
}

/* RFC 9113 §8.1: a response complete before its request asks the client,
 * by RST_STREAM(NO_ERROR), to stop sending the rest of the body, which would
 * only be dropped here (a rejected upload, or a streaming handler that
 * answered early). So half-closed (local) lasts only until that reset. */
void xH2StreamLocalEnd(xH2Stream *s) {
    if (s->state != XH2_STATE_OPEN) {
        move(s, XH2_SEND_END_STREAM); /* closed, s may go */
        return;
    }
    move(s, XH2_SEND_END_STREAM);
    xH2StreamError(s->h2, s->id, XH2_NO_ERROR);
}

/* ---- Requests ---- */

/* Routes a request whose body is still to come: the stream takes its
 * exchange now (without a field array: that waits for dispatch), and
 * dispatch reuses the routing. */
static bool route_at_head(xHttp2 *h2, xH2Stream *s) {
    if (!s->ex && !(s->ex = xHttpExchangeAcquire(xHttpContextOf(h2->conn)))) return false;
    s->ex->req.method = s->head.method;
    s->ex->req.path = s->head.path;
    xH2RouteByHead(s);
    return true;
}

/* Answers early (413, or 500 when the request could not be routed for want
 * of memory) and tells the client to stop sending the body. */
static void refuse_body(xHttp2 *h2, xH2Stream *s, int status) {
    s->reject_status = status;
    xBufferFree(&s->body);
    xH2MarkReady(h2, s);
}

/* A request head with a body to follow: a streaming route takes it in
 * pieces (returns true); otherwise a declared body that cannot fit is
 * refused before it is sent. */
static bool begin_body(xHttp2 *h2, xH2Stream *s) {
    if (s->reject_status) return false;
    if (!route_at_head(h2, s)) {
        refuse_body(h2, s, 500);
        return false;
    }
    if (xHttpExchangeStreams(s->ex)) {
        s->streams_body = true;
        return true;
    }
    /* A tunnel's bytes are no body to wait for: a route that does not
     * stream answers now, and the answer waves the rest off. */
    if (s->head.tunnel) return true;
    if (s->head.declared_length > (int64_t)h2->conf->max_body_size) refuse_body(h2, s, 413);
    return false;
}

bool xH2StreamTakeData(xHttp2 *h2, xH2Stream *s, const uint8_t *data, size_t len) {
    h2->progress += len;
    if (s->streams_body && !(s->ex && s->ex->res.ended)) {
        /* Held until its reader takes it: the stream's window reopens then;
         * the connection's now, while the readers hold under one window. */
        if (hold_body(s, data, len) != XOK) return xH2StreamError(h2, s->id, XH2_INTERNAL_ERROR);
        if (xH2HeldArrive(&h2->held_window, &s->held_share, len)) xH2ConsumeConn(h2, len);
        if (s->dispatched) xH2MarkReady(h2, s);
        return true;
    }
    /* Bytes nobody will read reopen only the connection's window. */
    xH2ConsumeConn(h2, len);
    if (s->reject_status || (s->ex && s->ex->res.ended) || s->streams_body) return true;
    xH2ConsumeStream(s, len);
    if (s->body.len + len > h2->conf->max_body_size) {
        refuse_body(h2, s, 413);
        return true;
    }
    if (xBufferAppend(&s->body, data, len) != XOK) return xH2StreamError(h2, s->id, XH2_INTERNAL_ERROR);
    return true;
}

/* The bytes a copy of a valid request's head takes: the strings (each
 * regular field's name and value, and the values of the pseudo-headers
 * kept: the checked :scheme is not, nor are the pseudo-headers' names), and
 * the fields handlers see (xH2Head), counted in *count. */
static size_t head_size(const xHpackField *f, size_t n, const xH2RequestHead *rh, size_t *count) {
    size_t bytes = rh->method.len + rh->path.len + rh->authority.len + rh->protocol.len, regular = 0;
    for (size_t i = 0; i < n; i++) {
        if (f[i].name.data[0] == ':') continue;
        bytes += f[i].name.len + f[i].value.len;
        regular++;
    }
    *count = regular + (rh->protocol.len > 0) + (rh->authority.len > 0);
    return bytes;
}

/* Splits h's target into its path and its query, once for every request
 * that shares the head. */
static void split_target(xH2Head *h) {
    const char *q = h->target.len ? memchr(h->target.data, '?', h->target.len) : NULL;
    size_t path_len = q ? (size_t)(q - h->target.data) : h->target.len;
    h->path = (xStr){h->target.data, path_len};
    h->query = q ? (xStr){q + 1, h->target.len - path_len - 1} : (xStr){"", 0};
}

/* Copies s's bytes to *at and points s there; an absent one (no data) stays so. */
static void copy_str(xStr *s, char **at) {
    if (!s->data) return;
    memcpy(*at, s->data, s->len);
    s->data = *at;
    *at += s->len;
}

/* Copies a valid request's head out of the decoder's scratch (and the input
 * and the table, which the next block may change) into fields and strings,
 * sized by head_size, with h's views into them: each regular field's name
 * and value, in one copy where they lie together (a field from the dynamic
 * table); an extended CONNECT's :protocol as a field; host from :authority,
 * so handlers find the host where HTTP/1.1 has it. */
static void copy_head(xH2Head *h, xHttpField *fields, char *at, const xHpackField *f, size_t n,
                      const xH2RequestHead *rh) {
    uint8_t verdicts = 0;
    xHttpField *out = fields;
    for (size_t i = 0; i < n; i++) {
        verdicts |= f[i].flags;
        xStr name = f[i].name, value = f[i].value;
        if (name.data[0] == ':') continue;
        if (name.data + name.len == value.data) {
            memcpy(at, name.data, name.len + value.len);
        } else {
            memcpy(at, name.data, name.len);
            memcpy(at + name.len, value.data, value.len);
        }
        *out++ = (xHttpField){{at, name.len}, {at + name.len, value.len}};
        at += name.len + value.len;
    }
    *h = (xH2Head){.method = rh->method, .target = rh->path, .authority = rh->authority};
    copy_str(&h->method, &at);
    copy_str(&h->target, &at);
    copy_str(&h->authority, &at);
    split_target(h);
    if (rh->protocol.len) {
        xStr protocol = rh->protocol;
        copy_str(&protocol, &at);
        *out++ = (xHttpField){{":protocol", 9}, protocol};
    }
    if (h->authority.len) *out++ = (xHttpField){{"host", 4}, h->authority};
    h->fields = fields;
    h->count = (size_t)(out - fields);
    h->declared_length = rh->content_length;
    h->plain_fields = !(verdicts & XHPACK_CTL_VALUE);
    h->tunnel = rh->protocol.len > 0;
}

/* The stream's own copy of its head, in buffers it keeps for the next. */
static bool keep_head(xH2Stream *s, const xHpackField *f, size_t n, const xH2RequestHead *rh) {
    size_t count, bytes = head_size(f, n, rh, &count);
    /* Room for everything first: the fields point into the strings. */
    if (xBufferReserve(&s->strings, bytes) != XOK ||
        xBufferReserve(&s->fields, count * sizeof(xHttpField)) != XOK)
        return false;
    copy_head(&s->head, (xHttpField *)s->fields.data, s->strings.data, f, n, rh);
    s->strings.len = bytes;
    s->fields.len = count * sizeof(xHttpField);
    return true;
}

/* A shared copy of the head of the decoder's remembered block b, which
 * becomes the connection's (the one it held goes once its streams have). */
static xH2SharedHead *share_head(xHttp2 *h2, const xHpackBlock *b, const xH2RequestHead *rh) {
    size_t count, bytes = head_size(b->fields, b->count, rh, &count);
    xH2SharedHead *shared = malloc(sizeof *shared + count * sizeof(xHttpField) + bytes);
    if (!shared) return NULL;
    xHttpField *fields = (xHttpField *)(shared + 1);
    copy_head(&shared->head, fields, (char *)(fields + count), b->fields, b->count, rh);
    shared->refs = 1;
    shared->block = b->remembered;
    shared->route = (xHttpKeptRoute){NULL, NULL, NULL};
    xH2SharedHeadRelease(h2->shared_head);
    h2->shared_head = shared;
    return shared;
}

/* xH2CheckHpackRequest, once for a block the decoder remembers: the same fields
 * pass again, the head's views the same fields' values. Sets *again when b is
 * the remembered block checked before. */
static bool check_head(xHttp2 *h2, const xHpackBlock *b, xH2RequestHead *head, bool *again) {
    xStr *views[5] = {&head->method, &head->scheme, &head->path, &head->authority, &head->protocol};
    *again = b->remembered && b->remembered == h2->checked_block;
    if (*again) {
        for (size_t v = 0; v < 5; v++)
            if (h2->checked_at[v] >= 0) *views[v] = b->fields[h2->checked_at[v]].value;
        head->content_length = h2->checked_length;
        return true;
    }
    if (!xH2CheckHpackRequest(b->fields, b->count, true, head)) return false;
    if (!b->remembered || b->count > INT8_MAX) return true;
    for (size_t v = 0; v < 5; v++) {
        h2->checked_at[v] = -1;
        for (size_t i = 0; i < b->count && views[v]->data && h2->checked_at[v] < 0; i++)
            if (b->fields[i].value.data == views[v]->data && b->fields[i].value.len == views[v]->len)
                h2->checked_at[v] = (int8_t)i;
        if (views[v]->data && h2->checked_at[v] < 0) return true; /* not a field's value: not kept */
    }
    h2->checked_length = head->content_length;
    h2->checked_block = b->remembered;
    return true;
}

/* Gives s the head of a decoded, valid block: the connection's shared copy
 * when the block is the remembered one again (made the second time it
 * comes, so a block sent once costs no allocation), else a copy of its own. */
static bool take_head(xHttp2 *h2, xH2Stream *s, const xHpackBlock *b, const xH2RequestHead *rh, bool again) {
    xH2SharedHead *shared = h2->shared_head;
    if (again && !(shared && shared->block == b->remembered)) shared = share_head(h2, b, rh);
    if (!again || !shared) return keep_head(s, b->fields, b->count, rh);
    shared->refs++;
    s->shared = shared;
    s->head = shared->head;
    return true;
}

bool xH2StreamOpen(xHttp2 *h2, int32_t id, uint8_t flags, const xHpackBlock *b, int rv) {
    xH2RequestHead head = {.content_length = -1};
    /* The block of the shared head again: that head says all a check would. */
    bool again = rv == XHPACK_OK && h2->shared_head && b->remembered == h2->shared_head->block;
    if (rv == XHPACK_OK && !again && !check_head(h2, b, &head, &again))
        return xH2StreamError(h2, id, XH2_PROTOCOL_ERROR);
    xH2Stream *s = stream_new(h2, id);
    if (!s) return xH2StreamError(h2, id, XH2_INTERNAL_ERROR);
    move(s, XH2_RECV_HEADERS);
    if (rv == XHPACK_TOO_LARGE)
        s->reject_status = 431; /* the decoder stayed in sync; the stream is answered */
    else if (!take_head(h2, s, b, &head, again))
        return xH2StreamError(h2, id, XH2_INTERNAL_ERROR);
    if (flags & XH2_FLAG_END_STREAM)
        xH2StreamRemoteEnd(h2, s);
    else if (begin_body(h2, s))
        xH2MarkReady(h2, s); /* a streaming route, or a tunnel: dispatched now */
    return true;
}

bool xH2StreamTrailers(xHttp2 *h2, xH2Stream *s, uint8_t flags, const xHpackBlock *b, int rv) {
    if (!xH2StreamReceives(s)) return xH2StreamError(h2, s->id, XH2_STREAM_CLOSED);
    if (!(flags & XH2_FLAG_END_STREAM) || (rv == XHPACK_OK && !xH2CheckTrailers(b->fields, b->count)))
        return xH2StreamError(h2, s->id, XH2_PROTOCOL_ERROR);
    if (s->head.declared_length >= 0 && s->received != (uint64_t)s->head.declared_length)
        return xH2StreamError(h2, s->id, XH2_PROTOCOL_ERROR);
    xH2StreamRemoteEnd(h2, s); /* the fields themselves are dropped */
    return true;
}

bool xH2StreamFromUpgrade(xHttp2 *h2, const xHttp2Upgrade *up) {
    xH2Stream *s = stream_new(h2, 1);
    if (!s) return false;
    move(s, XH2_RECV_HEADERS);
    /* The target is path and query as sent: contiguous in the request line. */
    size_t target_len =
        up->query.len ? (size_t)(up->query.data + up->query.len - up->path.data) : up->path.len;
    size_t total = up->method.len + target_len;
    for (size_t i = 0; i < up->num_headers; i++) total += up->headers[i].name.len + up->headers[i].value.len;
    /* Room for everything first: the fields point into the strings. */
    if (xBufferReserve(&s->strings, total) != XOK ||
        xBufferReserve(&s->fields, up->num_headers * sizeof(xHttpField)) != XOK)
        return false;
    char *at = s->strings.data;
    memcpy(at, up->method.data, up->method.len);
    s->head.method = (xStr){at, up->method.len};
    at += up->method.len;
    memcpy(at, up->path.data, target_len);
    s->head.target = (xStr){at, target_len};
    split_target(&s->head);
    at += target_len;
    xHttpField *f = (xHttpField *)s->fields.data;
    for (size_t i = 0; i < up->num_headers; i++) {
        xStr name = up->headers[i].name, value = up->headers[i].value;
        memcpy(at, name.data, name.len);
        memcpy(at + name.len, value.data, value.len);
        f[i] = (xHttpField){{at, name.len}, {at + name.len, value.len}};
        at += name.len + value.len;
    }
    s->strings.len = total;
    s->fields.len = up->num_headers * sizeof(xHttpField);
    s->head.fields = f;
    s->head.count = up->num_headers;
    s->head.plain_fields = true; /* HTTP/1.1's parser checked them */
    xH2StreamRemoteEnd(h2, s);   /* an upgrade carries no body: it is ready */
    return true;
}

/* ---- Invariants ---- */

/* The body source's kind and counts agree. */
static const char *source_invariant(const xH2BodySource *b) {
    if (b->framed > b->len) return "framed past a body's end";
    switch (b->kind) {
    case XH2_SOURCE_NONE: return b->len ? "a body with no source" : NULL;
    case XH2_SOURCE_MEMORY: return b->memory && b->len ? NULL : "a memory body with no memory";
    /* Borrowed only within a Send: once it returns, what is left is MEMORY. */
    case XH2_SOURCE_BORROWED: return "a borrowed body kept past its Send";
    case XH2_SOURCE_FILE: return b->file.fd >= 0 && b->len ? NULL : "a file body with no file";
    case XH2_SOURCE_STREAMED: return b->pieces.len == b->len ? NULL : "streamed pieces miscounted";
    }
    return "a body source of no kind";
}

/* The state agrees with the table and with the response. */
static const char *state_invariant(const xHttp2 *h2, const xH2Stream *s) {
    switch (s->state) {
    case XH2_STATE_IDLE: return "a stream idle after its HEADERS";
    case XH2_STATE_OPEN:
    case XH2_STATE_HALF_CLOSED_REMOTE: break;
    /* Our side ended with the whole response queued; the reset that waves
     * the rest of the request off follows at once. */
    case XH2_STATE_HALF_CLOSED_LOCAL: return "a stream half-closed (local) with no reset";
    case XH2_STATE_CLOSED:
        return xH2TableFind(&h2->table, s->id) == s ? "a closed stream in the table" : NULL;
    default: return "a stream in no state";
    }
    if (xH2TableFind(&h2->table, s->id) != s) return "an open stream is not in the table";
    if (xH2Pending(s) && !s->head_written) return "a body to frame before its head";
    return NULL;
}

const char *xH2StreamBrokenInvariant(const xHttp2 *h2, const xH2Stream *s, size_t *open, size_t *returned) {
    const char *broken = state_invariant(h2, s);
    if (!broken) broken = source_invariant(&s->out);
    if (broken) return broken;
    if (s->send_window > XH2_MAX_WINDOW) return "a stream's send window is over 2^31-1";
    if (s->recv_window < 0 || s->recv_window > h2->stream_window)
        return "a stream's receive window is out of range";
    if (s->body_taken > s->body.len) return "a stream's reader took more than it holds";
    if (s->held_share.returned > xH2HeldBody(s)) return "a stream returned more than it holds";
    if (s->id > h2->highest_id) return "a stream above the highest id";
    *open += s->state != XH2_STATE_CLOSED;
    *returned += s->held_share.returned;
    return NULL;
}
