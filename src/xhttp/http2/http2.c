/* http2.c — HTTP/2 over a connection, nghttp2 underneath.
 *
 * One read is fed to nghttp2 whole; the requests it completes are collected
 * and only then handed to their handlers, so handlers never run inside an
 * nghttp2 callback. Responses are submitted as handlers produce them, and the
 * frames of everything produced in one loop turn leave in one write.
 *
 * A stream holds its request's header fields (nghttp2's reference-counted
 * buffers, kept until the stream ends), its body, and the pending bytes of its
 * response. nghttp2 frames those without copying (NGHTTP2_DATA_FLAG_NO_COPY):
 * a whole body (xHttpResponseSend's copy, or SendRef's memory) is queued on
 * the connection by reference, and handed over for release once the last of
 * it is queued, so a response body is copied at most once. Streamed pieces,
 * which grow the buffer they sit in, are copied into the queue.
 *
 * Flow control is ours to drive (no automatic WINDOW_UPDATE): a buffered
 * request body counts as consumed as it arrives, bounded by max_body_size; a
 * streaming route's body only once its reader has taken it, so a paused or
 * slow reader holds the client to its stream's window; the connection's
 * window is accounted in held_window.h. */
#include "xhttp/http2/http2.h"

#include <errno.h>
#include <nghttp2/nghttp2.h>
#include <stdlib.h>
#include <string.h>

#include <xbase/log.h>

#include "xhttp/core/exchange.h"
#include "xhttp/core/tokens.h"
#include "xhttp/http2/held_window.h"

/* Stop framing into the output queue beyond this; resume once it drains. */
#define XH2_OUTPUT_HIGH_WATER (1u << 20)
/* Between the two GOAWAYs of a graceful stop. */
#define XH2_GOAWAY_GRACE_MS 1000
/* Ranges of stream ids a client skipped, remembered to reject their later use. */
#define XH2_SKIPPED_RANGES 8
/* Finished streams kept per connection, buffers and all, for the next ones. */
#define XH2_SPARE_STREAMS 32
/* A spare stream keeps a request body buffer up to this size. */
#define XH2_SPARE_BODY_CAP (64u << 10)
/* Fields in one response head or trailer block, ours included. */
#define XH2_MAX_RESPONSE_FIELDS 64

typedef struct xHttp2 xHttp2;

/* What a connection waits for, and so which timeout applies. */
typedef enum xH2Wait {
    XH2_WAIT_NOTHING, /* handlers are working: no timeout */
    XH2_WAIT_IDLE,    /* no streams: the idle timeout */
    XH2_WAIT_REQUEST, /* a request's headers or body: header/body timeout */
    XH2_WAIT_PEER,    /* flow control holds our output: the send timeout */
} xH2Wait;

/* A request header as handlers see it. Its bytes are nghttp2's own
 * (reference-counted buffers the stream holds until it ends, so nothing is
 * copied), or, for a request upgraded from HTTP/1.1, the stream's strings. */
typedef struct xH2Field {
    xStr name, value;
} xH2Field;

typedef struct xH2Stream {
    xHttp2 *h2;
    int32_t id;
    struct xH2Stream *prev, *next; /* h2->streams */
    struct xH2Stream *next_ready;  /* h2->ready: complete, awaiting dispatch */
    xHttpExchange *ex;             /* from dispatch (or a bodied request's head) until the stream is freed */

    xBuffer held;    /* nghttp2_rcbuf pointers the fields point into */
    xBuffer strings; /* an upgraded request's names and values */
    xBuffer fields;  /* xH2Field entries of regular headers */
    xH2Field method, path, authority;
    size_t header_bytes;
    int64_t declared_length; /* content-length, or -1 */
    xBuffer body;            /* the whole body, or a streamed one's undelivered part */
    xH2HeldShare held_share; /* a streamed body's part: its connection window (held_window.h) */
    int reject_status;       /* answer this instead of dispatching */
    bool streams_body;       /* a streaming route: dispatched at the head */
    bool body_done;          /* the client ended its side of the stream */
    bool waved_off;          /* RST_STREAM(NO_ERROR) sent for the rest of the body */

    char status[3]; /* the response's fields, kept until framed */
    char length[20];
    size_t length_len;
    xBuffer out; /* response bytes not yet framed */
    size_t out_framed;
    bool out_sealed;  /* out holds a whole body and never grows */
    const char *ref;  /* or: a body sent by reference, in memory or in a file */
    bool ref_is_file; /* ref is NULL: the body is ref_len bytes of file_fd at file_offset */
    int file_fd;
    off_t file_offset;
    size_t ref_len, ref_framed;
    void (*ref_release)(void *);
    void *ref_arg;
    bool headers_done; /* the request's header block ended */
    bool eof;          /* the response has no more bytes coming */
    bool deferred;     /* nghttp2 waits for xHttp2 to resume it */
    bool ready;
    bool dispatched;
    bool closed; /* nghttp2 closed the stream */
} xH2Stream;

/* Client stream ids never opened: [first, last], both odd. */
typedef struct xH2IdRange {
    int32_t first, last;
} xH2IdRange;

struct xHttp2 {
    xConn *conn;
    int32_t highest_id; /* highest client stream id opened */
    xH2IdRange skipped[XH2_SKIPPED_RANGES];
    size_t skipped_next; /* ring: the oldest range is forgotten */
    nghttp2_session *session;
    xH2Stream *streams;
    xH2Stream *spare; /* finished streams for reuse (next links) */
    size_t spare_count;
    xH2Stream *ready, *ready_tail;
    xH2Stream *receiving;      /* the stream whose request header block is being read */
    xTimer goaway_timer;       /* second step of a graceful GOAWAY */
    uint64_t progress;         /* request bytes taken plus response bytes framed */
    xH2HeldWindow held_window; /* held streamed bodies' connection window (held_window.h) */
    uint64_t progress_at_arm;
    xH2Wait waiting_for; /* what the armed timer measures */
    bool in_batch;
    bool draining;
};

static const xConnProtocol h2_protocol;
static const xHttpExchangeOps h2_ops;

static void pump(xHttp2 *h2);
static size_t add_lines(nghttp2_nv *nv, size_t n, xBuffer *lines);

/* Every response field lives until nghttp2 has framed it (static strings,
 * the stream's, the exchange's, the worker's Date), so nghttp2 need not copy. */
#define NV_BORROWED (NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE)

/* ---- Streams ---- */

static xH2Stream *stream_new(xHttp2 *h2, int32_t id) {
    xH2Stream *s = h2->spare;
    if (s) {
        /* Reuse it whole: its buffers keep their storage, emptied. */
        h2->spare = s->next;
        h2->spare_count--;
        xBuffer held = s->held, strings = s->strings, fields = s->fields, body = s->body;
        memset(s, 0, sizeof *s);
        s->held = (xBuffer){held.data, 0, held.cap};
        s->strings = (xBuffer){strings.data, 0, strings.cap};
        s->fields = (xBuffer){fields.data, 0, fields.cap};
        s->body = (xBuffer){body.data, 0, body.cap};
    } else if (!(s = calloc(1, sizeof *s))) {
        return NULL;
    }
    s->h2 = h2;
    s->id = id;
    s->declared_length = -1;
    s->next = h2->streams;
    if (h2->streams) h2->streams->prev = s;
    h2->streams = s;
    return s;
}

/* Releases memory the connection's queue may still point into, once the
 * queue is past it. */
static void hand_over(xH2Stream *s, void (*release)(void *), void *arg) {
    if (release) xConnWriteRef(s->h2->conn, NULL, 0, release, arg);
}

static void release_ref(xH2Stream *s) {
    hand_over(s, s->ref_release, s->ref_arg);
    s->ref_release = NULL;
    s->ref = NULL;
}

static void release_out(xH2Stream *s) {
    if (s->out_sealed && s->out.data) {
        hand_over(s, xMemCacheRelease, s->out.data); /* from the worker's cache */
        s->out = (xBuffer){0};
    }
    xBufferFree(&s->out);
}

static void stream_destroy(xH2Stream *s) {
    xBufferFree(&s->held);
    xBufferFree(&s->strings);
    xBufferFree(&s->fields);
    xBufferFree(&s->body);
    free(s);
}

/* Lets go of the nghttp2 buffers the request's fields point into; before
 * the session goes, whose allocator they belong to. */
static void release_fields(xH2Stream *s) {
    nghttp2_rcbuf **held = (nghttp2_rcbuf **)s->held.data;
    for (size_t i = 0; i < s->held.len / sizeof *held; i++) nghttp2_rcbuf_decref(held[i]);
    s->held.len = 0;
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

/* A streamed body's held part leaves (taken, or dropped): the connection's
 * window comes back for what did not get it back on arrival. */
static void release_held(xHttp2 *h2, xH2Stream *s) {
    size_t due = xH2HeldRelease(&h2->held_window, &s->held_share, s->body.len);
    if (due && h2->session) nghttp2_session_consume_connection(h2->session, due);
    s->body.len = 0;
}

/* Ends a stream: what it holds is released, and it becomes a spare. */
static void stream_free(xH2Stream *s) {
    xHttp2 *h2 = s->h2;
    if (h2->receiving == s) h2->receiving = NULL;
    if (s->ready) unqueue(h2, s); /* rare: ended from another stream's handler */
    /* A streamed body nobody took may still hold the connection's window. */
    if (s->streams_body && s->body.len) release_held(h2, s);
    if (h2->session && !s->closed) nghttp2_session_set_stream_user_data(h2->session, s->id, NULL);
    if (s->prev)
        s->prev->next = s->next;
    else
        h2->streams = s->next;
    if (s->next) s->next->prev = s->prev;
    release_ref(s);
    release_out(s);
    if (s->ex) xHttpExchangeRelease(xHttpContextOf(h2->conn), s->ex);
    release_fields(s);
    bool held_conn = s->dispatched;
    xConn *conn = h2->conn;
    if (s->body.cap > XH2_SPARE_BODY_CAP) xBufferFree(&s->body);
    if (h2->spare_count < XH2_SPARE_STREAMS && h2->session) {
        s->next = h2->spare;
        h2->spare = s;
        h2->spare_count++;
    } else {
        stream_destroy(s);
    }
    if (held_conn) xConnRelease(conn); /* may free h2 */
}

/* Copies p into the stream's strings, which must have room (no move). */
static xStr append_string(xH2Stream *s, const char *p, size_t n) {
    xStr copy = {s->strings.data + s->strings.len, n};
    memcpy(s->strings.data + s->strings.len, p, n);
    s->strings.len += n;
    return copy;
}

/* ---- Requests ---- */

static void mark_ready(xHttp2 *h2, xH2Stream *s) {
    if (s->ready) return;
    s->ready = true;
    if (h2->ready_tail)
        h2->ready_tail->next_ready = s;
    else
        h2->ready = s;
    h2->ready_tail = s;
}

/* The path of a request target, without its query. */
static xStr path_of(xStr target) {
    const char *q = memchr(target.data, '?', target.len);
    return (xStr){target.data, q ? (size_t)(q - target.data) : target.len};
}

/* Builds the exchange's request from the stream's copies. */
static bool fill_request(xH2Stream *s, xHttpExchange *ex) {
    const xH2Field *f = (const xH2Field *)s->fields.data;
    size_t n = s->fields.len / sizeof *f;
    if (n > ex->fields_cap) return false;
    for (size_t i = 0; i < n; i++) {
        ex->fields[i].name = f[i].name;
        ex->fields[i].value = f[i].value;
    }
    xStr target = s->path.value;
    ex->req.method = s->method.value;
    ex->req.path = path_of(target);
    bool has_query = ex->req.path.len < target.len;
    ex->req.query.data = target.data + ex->req.path.len + has_query;
    ex->req.query.len = has_query ? target.len - ex->req.path.len - 1 : 0;
    /* HTTP/2 carries the host in :authority; handlers look for Host. */
    if (s->authority.value.len && n < ex->fields_cap) {
        ex->fields[n].name = (xStr){"host", 4};
        ex->fields[n++].value = s->authority.value;
    }
    ex->req.headers = ex->fields;
    ex->req.num_headers = n;
    /* A streaming route's body goes to its reader; what has come so far
     * would move as more arrives. */
    bool whole = s->body.data && !s->streams_body;
    ex->req.body.data = whole ? s->body.data : "";
    ex->req.body.len = whole ? s->body.len : 0;
    ex->req.protocol = "HTTP/2";
    return true;
}

/* Gives a streaming route's reader what has arrived, and the client as much
 * window back. Once the response has ended, the body is only discarded. The
 * caller is in a batch, so the stream outlives the reader whatever it does. */
static void deliver_body(xHttp2 *h2, xH2Stream *s) {
    xHttpExchange *ex = s->ex;
    size_t len = s->body.len;
    if (s->closed || ex->body_ended) return;
    bool discard = ex->res.ended;
    if (!discard && !(xHttpExchangeWantsBody(ex) && (len || s->body_done))) return;
    /* Taken before the reader runs: it may answer, and so come back here.
     * A dropped body's stream gets no more window: the answer's
     * RST_STREAM(NO_ERROR) ends it. */
    if (len && !discard) nghttp2_session_consume_stream(h2->session, s->id, len);
    if (len) release_held(h2, s);
    if (discard)
        ex->body_ended = s->body_done;
    else
        xHttpExchangeDeliverBody(ex, s->body.data ? s->body.data : "", len, s->body_done);
}

static void dispatch(xHttp2 *h2, xH2Stream *s) {
    xConn *conn = h2->conn;
    xHttpExchange *ex = s->ex ? s->ex : xHttpExchangeAcquire(xHttpContextOf(conn));
    if (ex) s->ex = ex; /* released with the stream */
    if (!ex || !xHttpExchangeReserveFields(xHttpContextOf(conn), ex)) {
        nghttp2_submit_rst_stream(h2->session, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
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
    xHttpExchangeDispatch(ex);
    if (ex->streams_body) deliver_body(h2, s);
}

/* Ends a closed stream, unless its handler still holds the exchange: then
 * its End frees the stream. */
static void settle_closed(xH2Stream *s) {
    if (!s->dispatched || s->ex->res.ended || xHttpExchangeAbort(s->ex)) stream_free(s);
}

static void dispatch_ready(xHttp2 *h2) {
    while (h2->ready && !h2->conn->closed) {
        xH2Stream *s = h2->ready;
        h2->ready = s->next_ready;
        if (!h2->ready) h2->ready_tail = NULL;
        s->ready = false;
        s->next_ready = NULL;
        if (s->closed)
            settle_closed(s); /* reset by the client before we got to it */
        else if (!s->dispatched)
            dispatch(h2, s);
        else
            deliver_body(h2, s); /* more of a streamed body */
    }
}

/* ---- nghttp2 callbacks: input ---- */

static xH2Stream *stream_of(nghttp2_session *session, int32_t id) {
    return nghttp2_session_get_stream_user_data(session, id);
}

static bool was_skipped(const xHttp2 *h2, int32_t id) {
    for (size_t i = 0; i < XH2_SKIPPED_RANGES; i++)
        if (h2->skipped[i].first && id >= h2->skipped[i].first && id <= h2->skipped[i].last) return true;
    return false;
}

/* RFC 9113 §5.1.1: a new stream's id must exceed every id the client used
 * before. nghttp2 ignores a HEADERS on a lower id it does not know, since
 * that may be a stream it forgot; a skipped id, though, was never opened, so
 * a HEADERS on one is the connection error the RFC asks for. */
static int on_begin_frame(nghttp2_session *session, const nghttp2_frame_hd *hd, void *user_data) {
    xHttp2 *h2 = user_data;
    if (hd->type != NGHTTP2_HEADERS || !(hd->stream_id & 1)) return 0;
    if (hd->stream_id > h2->highest_id) {
        if (hd->stream_id > h2->highest_id + 2) {
            h2->skipped[h2->skipped_next] = (xH2IdRange){h2->highest_id + 2, hd->stream_id - 2};
            h2->skipped_next = (h2->skipped_next + 1) % XH2_SKIPPED_RANGES;
        }
        h2->highest_id = hd->stream_id;
        return 0;
    }
    if (was_skipped(h2, hd->stream_id)) {
        nghttp2_session_terminate_session(session, NGHTTP2_PROTOCOL_ERROR);
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    return 0;
}

static int on_begin_headers(nghttp2_session *session, const nghttp2_frame *frame, void *user_data) {
    xHttp2 *h2 = user_data;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    xH2Stream *s = stream_new(h2, frame->hd.stream_id);
    if (!s) return NGHTTP2_ERR_CALLBACK_FAILURE;
    nghttp2_session_set_stream_user_data(session, frame->hd.stream_id, s);
    h2->receiving = s;
    return 0;
}

static bool name_is(const uint8_t *name, size_t len, const char *want) {
    size_t n = strlen(want);
    return len == n && memcmp(name, want, n) == 0;
}

/* Keeps an nghttp2 buffer for as long as the stream; static-table ones live forever. */
static bool hold(xH2Stream *s, nghttp2_rcbuf *buf) {
    if (nghttp2_rcbuf_is_static(buf)) return true;
    if (xBufferAppend(&s->held, &buf, sizeof buf) != XOK) return false;
    nghttp2_rcbuf_incref(buf);
    return true;
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, nghttp2_rcbuf *name_buf,
                     nghttp2_rcbuf *value_buf, uint8_t flags, void *user_data) {
    xHttp2 *h2 = user_data;
    /* A header block's fields arrive together: no stream lookup per field. */
    xH2Stream *s = h2->receiving && h2->receiving->id == frame->hd.stream_id
                       ? h2->receiving
                       : stream_of(session, frame->hd.stream_id);
    if (!s || frame->hd.type != NGHTTP2_HEADERS) return 0; /* trailers are dropped */
    nghttp2_vec name = nghttp2_rcbuf_get_buf(name_buf), value = nghttp2_rcbuf_get_buf(value_buf);
    /* Counted as HPACK would size them (RFC 9113 §6.5.2); past the limit we
     * stop storing and answer 431 once the block ends. */
    h2->progress += name.len + value.len;
    s->header_bytes += name.len + value.len + 32;
    if (s->header_bytes > xHttpContextOf(h2->conn)->conf->max_header_size) {
        s->reject_status = 431;
        return 0;
    }
    if (!hold(s, name_buf) || !hold(s, value_buf)) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    xH2Field f = {{(const char *)name.base, name.len}, {(const char *)value.base, value.len}};
    if (name.base[0] != ':') {
        if (xBufferAppend(&s->fields, &f, sizeof f) != XOK) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        /* nghttp2 has validated it: digits only, consistent with the DATA. */
        if (name_is(name.base, name.len, "content-length"))
            s->declared_length = strtoll((const char *)value.base, NULL, 10);
    } else if (name_is(name.base, name.len, ":method")) {
        s->method = f;
    } else if (name_is(name.base, name.len, ":path")) {
        s->path = f;
    } else if (name_is(name.base, name.len, ":authority")) {
        s->authority = f;
    }
    return 0;
}

/* Routes a request whose body is still to come: the stream takes its
 * exchange now (without a field array: that waits for dispatch), and
 * dispatch reuses the routing. */
static bool route_at_head(xHttp2 *h2, xH2Stream *s) {
    if (!s->ex && !(s->ex = xHttpExchangeAcquire(xHttpContextOf(h2->conn)))) return false;
    s->ex->req.method = s->method.value;
    s->ex->req.path = path_of(s->path.value);
    return true;
}

/* Answers early (413, or 500 when the request could not be routed for want
 * of memory) and tells the client to stop sending the body. */
static void refuse_body(xHttp2 *h2, xH2Stream *s, int status) {
    s->reject_status = status;
    xBufferFree(&s->body);
    mark_ready(h2, s);
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
    if (s->declared_length > (int64_t)xHttpContextOf(h2->conn)->conf->max_body_size) refuse_body(h2, s, 413);
    return false;
}

static int on_data_chunk(nghttp2_session *session, uint8_t flags, int32_t stream_id, const uint8_t *data,
                         size_t len, void *user_data) {
    xHttp2 *h2 = user_data;
    xH2Stream *s = stream_of(session, stream_id);
    h2->progress += len;
    if (s && s->streams_body && !(s->ex && s->ex->res.ended)) {
        /* Held until its reader takes it: the stream's window reopens then;
         * the connection's now, while the readers hold under one window. */
        if (xBufferAppend(&s->body, data, len) != XOK) return NGHTTP2_ERR_CALLBACK_FAILURE;
        if (xH2HeldArrive(&h2->held_window, &s->held_share, len))
            nghttp2_session_consume_connection(session, len);
        if (s->dispatched) mark_ready(h2, s);
        return 0;
    }
    /* Bytes nobody will read reopen only the connection's window. */
    if (s && (s->reject_status || (s->ex && s->ex->res.ended)))
        nghttp2_session_consume_connection(session, len);
    else
        nghttp2_session_consume(session, stream_id, len);
    if (!s || s->reject_status || s->streams_body) return 0;
    if (s->body.len + len > xHttpContextOf(h2->conn)->conf->max_body_size) {
        refuse_body(h2, s, 413);
        return 0;
    }
    if (xBufferAppend(&s->body, data, len) != XOK) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    return 0;
}

static int on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame, void *user_data) {
    xHttp2 *h2 = user_data;
    xH2Stream *s = stream_of(session, frame->hd.stream_id);
    if (!s) return 0;
    bool end_stream = (frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) &&
                      (frame->hd.flags & NGHTTP2_FLAG_END_STREAM);
    if (frame->hd.type == NGHTTP2_HEADERS) s->headers_done = true;
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST && !end_stream &&
        begin_body(h2, s))
        mark_ready(h2, s); /* a streaming route: dispatched now */
    if (end_stream) {
        s->body_done = true;
        if (!s->dispatched || s->streams_body) mark_ready(h2, s);
    }
    return 0;
}

static int on_stream_close(nghttp2_session *session, int32_t stream_id, uint32_t error_code,
                           void *user_data) {
    xH2Stream *s = stream_of(session, stream_id);
    if (!s) return 0;
    s->closed = true;
    nghttp2_session_set_stream_user_data(session, stream_id, NULL);
    /* Held body bytes will never be delivered now: their share of the
     * connection's window goes back, whoever still holds the exchange. */
    if (s->streams_body && s->body.len) release_held(s->h2, s);
    if (!s->ready) settle_closed(s); /* otherwise dispatch_ready does */
    return 0;
}

/* ---- nghttp2 callbacks: output ---- */

static ssize_t on_send(nghttp2_session *session, const uint8_t *data, size_t len, int flags,
                       void *user_data) {
    xHttp2 *h2 = user_data;
    if (xConnPending(h2->conn) > XH2_OUTPUT_HIGH_WATER) return NGHTTP2_ERR_WOULDBLOCK;
    if (xConnWrite(h2->conn, data, len) != XOK) return NGHTTP2_ERR_CALLBACK_FAILURE;
    return (ssize_t)len;
}

static size_t pending_out(const xH2Stream *s) {
    return (s->out.len - s->out_framed) + (s->ref_len - s->ref_framed);
}

/* RFC 9113 §8.1: a response complete before its request asks the client,
 * by RST_STREAM(NO_ERROR), to stop sending the rest of the body, which would
 * only be dropped here (a rejected upload, or a streaming handler that
 * answered early). Only once the frame that ends the response is out: a
 * reset submitted earlier makes nghttp2 drop the frames still queued. */
static void wave_off_body(xH2Stream *s) {
    if (s->body_done || s->waved_off) return;
    s->waved_off = nghttp2_submit_rst_stream(s->h2->session, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_NO_ERROR) == 0;
}

/* Responses that end on a HEADERS frame (no body, or trailers); those that
 * end on DATA are waved off as that frame is written (on_send_data). */
static int on_frame_sent(nghttp2_session *session, const nghttp2_frame *frame, void *user_data) {
    if (frame->hd.type != NGHTTP2_HEADERS || !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) return 0;
    xH2Stream *s = stream_of(session, frame->hd.stream_id);
    if (s) wave_off_body(s);
    return 0;
}

static int submit_trailers(xH2Stream *s) {
    nghttp2_nv nv[XH2_MAX_RESPONSE_FIELDS];
    size_t n = add_lines(nv, 0, &s->ex->res.trailers);
    return nghttp2_submit_trailer(s->h2->session, s->id, nv, n);
}

static ssize_t read_body(nghttp2_session *session, int32_t stream_id, uint8_t *buf, size_t length,
                         uint32_t *data_flags, nghttp2_data_source *source, void *user_data) {
    xH2Stream *s = source->ptr;
    size_t avail = pending_out(s);
    if (avail == 0 && !s->eof) {
        s->deferred = true;
        return NGHTTP2_ERR_DEFERRED;
    }
    size_t n = avail < length ? avail : length;
    *data_flags |= NGHTTP2_DATA_FLAG_NO_COPY;
    if (n == avail && s->eof) {
        *data_flags |= NGHTTP2_DATA_FLAG_EOF;
        if (s->ex && s->ex->res.trailers.len && submit_trailers(s) == 0)
            *data_flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM; /* the trailers end it */
    }
    return (ssize_t)n;
}

/* Frames n pending bytes: the buffered ones first, then the reference. */
static xErrno frame_body(xH2Stream *s, xConn *conn, size_t n) {
    size_t buffered = s->out.len - s->out_framed;
    size_t take = buffered < n ? buffered : n;
    const char *piece = s->out.data + s->out_framed;
    xErrno err = s->out_sealed ? xConnWriteRef(conn, piece, take, NULL, NULL) : xConnWrite(conn, piece, take);
    s->out_framed += take;
    if (s->out_framed == s->out.len) {
        if (s->out_sealed)
            release_out(s);
        else
            s->out.len = s->out_framed = 0;
    }
    if (err == XOK && n > take) {
        /* A frame's worth of file (up to XCONN_FILE_COPY_MAX) is read into
         * the queue now; the file stays open until the last frame is out. */
        err = s->ref_is_file ? xConnWriteFile(conn, s->file_fd, s->file_offset + (off_t)s->ref_framed,
                                              n - take, NULL, NULL)
                             : xConnWriteRef(conn, s->ref + s->ref_framed, n - take, NULL, NULL);
        s->ref_framed += n - take;
        if (s->ref_framed == s->ref_len) release_ref(s);
    }
    return err;
}

static int on_send_data(nghttp2_session *session, nghttp2_frame *frame, const uint8_t *framehd, size_t length,
                        nghttp2_data_source *source, void *user_data) {
    xHttp2 *h2 = user_data;
    xH2Stream *s = source->ptr;
    /* nghttp2 offers this frame again later; nothing has been queued yet. */
    if (xConnPending(h2->conn) > XH2_OUTPUT_HIGH_WATER) return NGHTTP2_ERR_WOULDBLOCK;
    if (xConnWrite(h2->conn, framehd, 9) != XOK || frame_body(s, h2->conn, length) != XOK)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    h2->progress += length;
    if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) wave_off_body(s);
    return 0;
}

/* ---- Responses ---- */

/* Response field names must be lower case in HTTP/2 (RFC 9113 §8.2.1);
 * handlers write them as they like, so they are folded where they lie: the
 * exchange's header lines are HTTP/2's alone and outlive the frame. */
static size_t add_lines(nghttp2_nv *nv, size_t n, xBuffer *lines) {
    char *p = lines->data, *end = p + lines->len;
    while (p < end && n < XH2_MAX_RESPONSE_FIELDS - 1) {
        char *colon = memchr(p, ':', (size_t)(end - p));
        char *eol = memchr(p, '\r', (size_t)(end - p));
        size_t name_len = (size_t)(colon - p);
        for (size_t i = 0; i < name_len; i++) p[i] = (char)(p[i] >= 'A' && p[i] <= 'Z' ? p[i] + 32 : p[i]);
        nv[n++] = (nghttp2_nv){(uint8_t *)p, (uint8_t *)colon + 2, name_len, (size_t)(eol - colon - 2),
                               NV_BORROWED};
        p = eol + 2;
    }
    return n;
}

static size_t response_fields(xH2Stream *s, nghttp2_nv *nv, bool with_length) {
    xHttpExchange *ex = s->ex;
    size_t n = 0;
    int code = ex->res.status;
    s->status[0] = (char)('0' + code / 100 % 10);
    s->status[1] = (char)('0' + code / 10 % 10);
    s->status[2] = (char)('0' + code % 10);
    nv[n++] = (nghttp2_nv){(uint8_t *)":status", (uint8_t *)s->status, 7, 3, NV_BORROWED};
    nv[n++] = (nghttp2_nv){(uint8_t *)"server", (uint8_t *)"xkit", 6, 4, NV_BORROWED};
    const char *date = xHttpDate(&xHttpContextOf(s->h2->conn)->date, ex->req.loop);
    nv[n++] = (nghttp2_nv){(uint8_t *)"date", (uint8_t *)date, 4, XHTTP_DATE_LEN, NV_BORROWED};
    n = add_lines(nv, n, &ex->res.headers);
    if (with_length)
        nv[n++] =
            (nghttp2_nv){(uint8_t *)"content-length", (uint8_t *)s->length, 14, s->length_len, NV_BORROWED};
    return n;
}

static bool response_has_body(const xHttpExchange *ex) {
    return xHttpStatusHasBody(ex->res.status) && !xStrEqualsC(ex->req.method, "HEAD");
}

static xErrno submit_head(xH2Stream *s, bool with_length, bool with_body) {
    nghttp2_nv nv[XH2_MAX_RESPONSE_FIELDS];
    size_t n = response_fields(s, nv, with_length);
    nghttp2_data_provider provider = {.source.ptr = s, .read_callback = read_body};
    s->ex->res.head_sent = true;
    int rv = nghttp2_submit_response(s->h2->session, s->id, nv, n, with_body ? &provider : NULL);
    return rv == 0 ? XOK : XERR_STATE;
}

/* The handler is done with the exchange; a closed stream can go now. */
static void end_exchange(xH2Stream *s) {
    xHttp2 *h2 = s->h2;
    s->ex->res.ended = true;
    s->eof = true;
    /* What came of a streamed body is dropped, and its window given back, so
     * the client can finish sending and the stream can close. */
    if (s->ex->streams_body) deliver_body(h2, s);
    if (s->deferred) {
        s->deferred = false;
        nghttp2_session_resume_data(h2->session, s->id);
    }
    bool in_batch = h2->in_batch;
    xConn *conn = h2->conn;
    xConnRetain(conn);
    if (s->closed) stream_free(s);
    if (!in_batch && !conn->closed) pump(h2);
    xConnRelease(conn);
}

static xErrno h2_send(xHttpExchange *ex, const void *body, size_t len, bool copy, void (*release)(void *),
                      void *release_arg) {
    xH2Stream *s = ex->proto;
    xErrno err = XOK;
    bool with_body = len && response_has_body(ex);
    if (ex->res.aborted || s->closed) {
        err = XERR_CLOSED;
    } else {
        s->length_len = (size_t)(xHttpPutDecimal(s->length, len) - s->length);
        if (with_body && copy) {
            /* A whole body: a block from the worker's cache, handed to the
             * output queue by reference and released by it. */
            char *block = xMemCacheAlloc(s->h2->conn->net->mem, len);
            if (block) {
                memcpy(block, body, len);
                s->out = (xBuffer){block, len, len};
                s->out_sealed = true;
            } else {
                err = XERR_NOMEM;
            }
        } else if (with_body) {
            s->ref = body;
            s->ref_len = len;
            s->ref_release = release;
            s->ref_arg = release_arg;
            release = NULL;
        }
        /* HEAD gets the length GET would have; 1xx, 204 and 304 get none. */
        if (err == XOK) err = submit_head(s, xHttpStatusHasBody(ex->res.status), with_body);
    }
    if (!copy && release) release(release_arg);
    end_exchange(s);
    return err;
}

static xErrno h2_send_file(xHttpExchange *ex, int fd, off_t offset, size_t len, void (*release)(void *),
                           void *release_arg) {
    xH2Stream *s = ex->proto;
    xErrno err = XOK;
    bool with_body = len && response_has_body(ex);
    if (ex->res.aborted || s->closed) {
        err = XERR_CLOSED;
    } else {
        s->length_len = (size_t)(xHttpPutDecimal(s->length, len) - s->length);
        if (with_body) {
            s->ref_is_file = true;
            s->file_fd = fd;
            s->file_offset = offset;
            s->ref_len = len;
            s->ref_release = release;
            s->ref_arg = release_arg;
            release = NULL;
        }
        err = submit_head(s, xHttpStatusHasBody(ex->res.status), with_body);
    }
    if (release) release(release_arg);
    end_exchange(s);
    return err;
}

static xErrno h2_write(xHttpExchange *ex, const void *data, size_t len) {
    xH2Stream *s = ex->proto;
    if (ex->res.aborted || s->closed) return XERR_CLOSED;
    xErrno err = XOK;
    if (!ex->res.head_sent) err = submit_head(s, false, response_has_body(ex));
    if (err != XOK || !len || !response_has_body(ex)) return err;
    err = xBufferAppend(&s->out, data, len);
    if (s->deferred) {
        s->deferred = false;
        nghttp2_session_resume_data(s->h2->session, s->id);
    }
    if (!s->h2->in_batch) pump(s->h2);
    return err;
}

static xErrno h2_end(xHttpExchange *ex) {
    xH2Stream *s = ex->proto;
    xErrno err = XOK;
    if (!ex->res.aborted && !s->closed && !ex->res.head_sent)
        err = submit_head(s, false, response_has_body(ex));
    end_exchange(s);
    return err;
}

static void h2_body_wanted(xHttpExchange *ex) {
    xH2Stream *s = ex->proto;
    xHttp2 *h2 = s->h2;
    if (h2->in_batch) {
        mark_ready(h2, s); /* the batch under way delivers */
        return;
    }
    xConn *conn = h2->conn;
    xConnRetain(conn);
    h2->in_batch = true;
    deliver_body(h2, s);
    h2->in_batch = false;
    if (!conn->closed) pump(h2);
    xConnRelease(conn);
}

static const xHttpExchangeOps h2_ops = {h2_send, h2_send_file, h2_write, h2_end, h2_body_wanted};

/* ---- Driving the session ---- */

/* The client owes a request, or the rest of a body someone takes. */
static bool awaits_request(const xH2Stream *s) {
    if (s->closed || s->waved_off) return false; /* a reset on its way ends it */
    if (!s->dispatched) return !s->ready;
    return s->streams_body && !s->body_done && (s->ex->res.ended || xHttpExchangeWantsBody(s->ex));
}

static xH2Wait current_wait(const xHttp2 *h2, bool *mid_headers) {
    xH2Wait wait = h2->streams ? XH2_WAIT_NOTHING : XH2_WAIT_IDLE;
    for (const xH2Stream *s = h2->streams; s; s = s->next) {
        if (awaits_request(s)) {
            *mid_headers |= !s->headers_done;
            wait = XH2_WAIT_REQUEST;
        } else if (wait == XH2_WAIT_NOTHING && pending_out(s) > 0 && !s->closed) {
            wait = XH2_WAIT_PEER;
        }
    }
    return wait;
}

/* Arms the one timer for what the connection waits for. The header, body
 * and send timeouts run from the last progress, not from the last byte, so
 * a client that only chats (PINGs, WINDOW_UPDATEs of nothing) is still
 * dropped; the timer is left alone while the same wait makes no progress. */
static void arm_timer(xHttp2 *h2) {
    xConn *conn = h2->conn;
    const xHttpServerConf *conf = xHttpContextOf(conn)->conf;
    if (conn->closed || conn->write_blocked || conn->lingering) return;
    bool mid_headers = false;
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

/* Frames whatever nghttp2 has to send, flushes, and closes when the session
 * is over (GOAWAY both ways, or a fatal error). */
static void pump(xHttp2 *h2) {
    xConn *conn = h2->conn;
    if (conn->closed) return;
    /* nghttp2 stops at our output high-water mark; when the socket takes it
     * all at once no writable event will come, so go round again. */
    for (int round = 0; round < 64; round++) {
        int rv = nghttp2_session_send(h2->session);
        if (rv != 0) {
            XLOG_DEBUG("nghttp2_session_send: %s", nghttp2_strerror(rv));
            xConnClose(conn);
            return;
        }
        xConnFlush(conn);
        if (conn->closed) return;
        if (conn->write_blocked || xConnPending(conn) || !nghttp2_session_want_write(h2->session)) break;
    }
    if (!nghttp2_session_want_read(h2->session) && !nghttp2_session_want_write(h2->session)) {
        xConnCloseAfterFlush(conn);
        return;
    }
    arm_timer(h2);
}

/* Feeds bytes to nghttp2. A fatal verdict (flood, bad preface, protocol
 * error) has nghttp2 queue a GOAWAY; it is sent, then the connection ends. */
static bool feed(xHttp2 *h2, const char *data, size_t len) {
    ssize_t rv = nghttp2_session_mem_recv(h2->session, (const uint8_t *)data, len);
    if (rv >= 0) return true;
    XLOG_DEBUG("nghttp2_session_mem_recv: %s", nghttp2_strerror((int)rv));
    /* A GOAWAY already queued (by nghttp2, or by on_begin_frame) stands. */
    nghttp2_session_terminate_session(h2->session, rv == NGHTTP2_ERR_FLOODED ? NGHTTP2_ENHANCE_YOUR_CALM
                                                                             : NGHTTP2_PROTOCOL_ERROR);
    nghttp2_session_send(h2->session);
    xConnCloseAfterFlush(h2->conn);
    return false;
}

static void on_readable(xConn *conn) {
    xHttp2 *h2 = conn->proto_state;
    xConnRetain(conn);
    h2->in_batch = true;
    bool ok = true;
    while (ok && conn->readable && !conn->closed && !conn->close_after_flush) {
        if (xBufferPoolAcquire(&conn->net->buffers, &conn->in) != XOK) break;
        ssize_t n = xConnRecv(conn, conn->in.data, conn->in.cap);
        if (n > 0) {
            ok = feed(h2, conn->in.data, (size_t)n);
            dispatch_ready(h2);
        } else if (n == 0) {
            xConnCloseAfterFlush(conn);
        } else if (errno != EAGAIN && errno != EINTR) {
            xConnClose(conn);
        }
    }
    h2->in_batch = false;
    if (!conn->closed) {
        xBufferPoolRelease(&conn->net->buffers, &conn->in);
        if (!conn->close_after_flush)
            pump(h2);
        else
            xConnFlush(conn);
    }
    xConnRelease(conn);
}

static void on_flushed(xConn *conn) { pump(conn->proto_state); }

static void on_timeout(xConn *conn) {
    xHttp2 *h2 = conn->proto_state;
    bool mid_headers = false;
    if (current_wait(h2, &mid_headers) == XH2_WAIT_REQUEST && !mid_headers) {
        /* Requests whose bodies stopped coming are cancelled; the
         * connection and its other streams go on. */
        for (xH2Stream *s = h2->streams; s; s = s->next)
            if (awaits_request(s))
                nghttp2_submit_rst_stream(h2->session, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_CANCEL);
        h2->waiting_for = XH2_WAIT_NOTHING;
        pump(h2);
        return;
    }
    /* Idle, a header block that never ends (nothing else may be sent in
     * its middle), or a peer that stopped taking the data it asked for. */
    nghttp2_session_terminate_session(h2->session, mid_headers ? NGHTTP2_PROTOCOL_ERROR : NGHTTP2_NO_ERROR);
    nghttp2_session_send(h2->session);
    xConnCloseAfterFlush(conn);
}

static void on_goaway_timer(xEventLoop *loop, xTimer *timer) {
    xHttp2 *h2 = (xHttp2 *)((char *)timer - offsetof(xHttp2, goaway_timer));
    nghttp2_submit_goaway(h2->session, NGHTTP2_FLAG_NONE,
                          nghttp2_session_get_last_proc_stream_id(h2->session), NGHTTP2_NO_ERROR, NULL, 0);
    pump(h2);
}

/* Graceful: announce (GOAWAY with the highest id), give requests in flight
 * a moment to arrive, then name the last stream we will serve. */
static void on_drain(xConn *conn) {
    xHttp2 *h2 = conn->proto_state;
    if (h2->draining) return;
    h2->draining = true;
    nghttp2_submit_shutdown_notice(h2->session);
    xTimerStart(conn->net->loop, &h2->goaway_timer,
                XH2_GOAWAY_GRACE_MS < xHttpContextOf(conn)->conf->shutdown_timeout_ms / 2
                    ? XH2_GOAWAY_GRACE_MS
                    : xHttpContextOf(conn)->conf->shutdown_timeout_ms / 2);
    pump(h2);
}

static void on_close(xConn *conn) {
    xHttp2 *h2 = conn->proto_state;
    xTimerStop(conn->net->loop, &h2->goaway_timer);
    h2->ready = h2->ready_tail = NULL;
    xH2Stream *next;
    for (xH2Stream *s = h2->streams; s; s = next) {
        next = s->next;
        s->closed = true;
        settle_closed(s);
    }
}

static void on_free(xConn *conn) {
    xHttp2 *h2 = conn->proto_state;
    while (h2->streams) stream_free(h2->streams); /* the session's buffers first */
    while (h2->spare) {
        xH2Stream *s = h2->spare;
        h2->spare = s->next;
        stream_destroy(s);
    }
    nghttp2_session_del(h2->session);
    free(h2);
}

static const xConnProtocol h2_protocol = {on_readable, on_flushed, on_timeout, on_drain, on_close, on_free};

/* ---- Starting ---- */

static nghttp2_session_callbacks *make_callbacks(void) {
    nghttp2_session_callbacks *cb;
    if (nghttp2_session_callbacks_new(&cb) != 0) return NULL;
    nghttp2_session_callbacks_set_send_callback(cb, on_send);
    nghttp2_session_callbacks_set_send_data_callback(cb, on_send_data);
    nghttp2_session_callbacks_set_on_begin_frame_callback(cb, on_begin_frame);
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback2(cb, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data_chunk);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    nghttp2_session_callbacks_set_on_frame_send_callback(cb, on_frame_sent);
    return cb;
}

/* nghttp2 allocates per stream and per header; the worker's cache serves it. */
static void *mem_malloc(size_t size, void *cache) { return xMemCacheAlloc(cache, size); }
static void mem_free(void *ptr, void *cache) { xMemCacheFree(cache, ptr); }
static void *mem_calloc(size_t n, size_t size, void *cache) { return xMemCacheCalloc(cache, n, size); }
static void *mem_realloc(void *ptr, size_t size, void *cache) { return xMemCacheRealloc(cache, ptr, size); }

static nghttp2_session *make_session(xHttp2 *h2, const xHttpServerConf *conf, xMemCache *cache) {
    nghttp2_session_callbacks *cb = make_callbacks();
    nghttp2_option *opt;
    nghttp2_session *session = NULL;
    if (!cb || nghttp2_option_new(&opt) != 0) {
        nghttp2_session_callbacks_del(cb);
        return NULL;
    }
    nghttp2_option_set_stream_reset_rate_limit(opt, conf->http2_reset_burst, conf->http2_reset_rate);
    nghttp2_option_set_max_continuations(opt, conf->http2_max_continuations);
    nghttp2_option_set_max_outbound_ack(opt, conf->http2_max_control_queue);
    nghttp2_option_set_max_settings(opt, 32);
    nghttp2_option_set_max_send_header_block_length(opt, 64 * 1024);
    nghttp2_option_set_no_auto_window_update(opt, 1);
    nghttp2_mem mem = {cache, mem_malloc, mem_free, mem_calloc, mem_realloc};
    nghttp2_session_server_new3(&session, cb, h2, opt, &mem);
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cb);
    if (!session) return NULL;
    nghttp2_settings_entry settings[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, conf->http2_max_streams},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, conf->http2_window},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, (uint32_t)conf->max_header_size},
    };
    if (nghttp2_submit_settings(session, NGHTTP2_FLAG_NONE, settings, sizeof settings / sizeof *settings) !=
            0 ||
        nghttp2_session_set_local_window_size(session, NGHTTP2_FLAG_NONE, 0, (int32_t)conf->http2_window) !=
            0) {
        nghttp2_session_del(session);
        return NULL;
    }
    return session;
}

/* Stream 1 is the HTTP/1.1 request that asked to upgrade. */
static bool adopt_upgrade(xHttp2 *h2, const xHttp2Upgrade *up) {
    bool head = xStrEqualsC(up->method, "HEAD");
    if (nghttp2_session_upgrade2(h2->session, (const uint8_t *)up->settings, up->settings_len, head, NULL) !=
        0)
        return false;
    xH2Stream *s = stream_new(h2, 1);
    if (!s) return false;
    nghttp2_session_set_stream_user_data(h2->session, 1, s);
    /* The target is path and query as sent: contiguous in the request line. */
    size_t target_len =
        up->query.len ? (size_t)(up->query.data + up->query.len - up->path.data) : up->path.len;
    size_t total = up->method.len + target_len;
    for (size_t i = 0; i < up->num_headers; i++) total += up->headers[i].name.len + up->headers[i].value.len;
    /* Room for everything first: the fields point into the strings. */
    bool ok = xBufferReserve(&s->strings, total) == XOK;
    if (ok) {
        s->method.value = append_string(s, up->method.data, up->method.len);
        s->path.value = append_string(s, up->path.data, target_len);
    }
    for (size_t i = 0; ok && i < up->num_headers; i++) {
        xH2Field f;
        f.name = append_string(s, up->headers[i].name.data, up->headers[i].name.len);
        f.value = append_string(s, up->headers[i].value.data, up->headers[i].value.len);
        ok = xBufferAppend(&s->fields, &f, sizeof f) == XOK;
    }
    s->body_done = true; /* an upgrade carries no body */
    if (ok) mark_ready(h2, s);
    return ok;
}

bool xHttp2Start(xConn *conn, size_t start, const xHttp2Upgrade *upgrade) {
    xHttp2 *h2 = calloc(1, sizeof *h2);
    if (!h2 || !(h2->session = make_session(h2, xHttpContextOf(conn)->conf, conn->net->mem))) {
        free(h2);
        return false; /* the connection is still the caller's */
    }
    h2->conn = conn;
    h2->held_window.limit = xHttpContextOf(conn)->conf->http2_window;
    xTimerInit(&h2->goaway_timer, on_goaway_timer);
    conn->proto = &h2_protocol;
    conn->proto_state = h2;
    if (upgrade && !adopt_upgrade(h2, upgrade)) {
        xConnClose(conn);
        return true;
    }
    xConnRetain(conn);
    h2->in_batch = true;
    bool ok = conn->in.len <= start || feed(h2, conn->in.data + start, conn->in.len - start);
    if (ok) dispatch_ready(h2);
    h2->in_batch = false;
    conn->in.len = 0;
    if (!conn->closed) {
        xBufferPoolRelease(&conn->net->buffers, &conn->in);
        if (ok) pump(h2);
        if (ok && conn->readable && !conn->closed) on_readable(conn);
    }
    xConnRelease(conn);
    return true;
}

long xHttp2DecodeSettings(xStr in, char *out) {
    uint32_t acc = 0;
    int bits = 0;
    long n = 0;
    for (size_t i = 0; i < in.len; i++) {
        char c = in.data[i];
        int v = c >= 'A' && c <= 'Z'   ? c - 'A'
                : c >= 'a' && c <= 'z' ? c - 'a' + 26
                : c >= '0' && c <= '9' ? c - '0' + 52
                : c == '-'             ? 62
                : c == '_'             ? 63
                : c == '='             ? -2
                                       : -1;
        if (v == -2) break; /* padding ends it */
        if (v < 0) return -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[n++] = (char)((acc >> bits) & 0xff);
        }
    }
    return n;
}
