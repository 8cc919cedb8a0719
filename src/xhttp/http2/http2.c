/* http2.c — HTTP/2 on a connection (RFC 9113): the session. Frames are read
 * in place from the connection's input and handled by a table indexed by
 * type; streams live in an id-indexed table (stream_table.h) and move through
 * RFC 9113's states; flow-control windows are plain integers; header blocks
 * are HPACK-decoded (hpack.h) and checked (request.h) before a stream opens.
 *
 * A read is handled whole; the requests it completes are collected and only
 * then handed to their handlers, so handlers never run in the middle of a
 * frame. Every frame of a loop turn (acks, resets, window updates, response
 * heads and bodies) is written straight into the connection's output queue
 * (frame.h), which is flushed once at the end of the turn.
 *
 * A stream holds its request's header fields (copied out of the decoder's
 * scratch into one buffer), its body, and the pending bytes of its response.
 * A whole body (xHttpResponseSend's copy, or SendRef's memory) is framed by
 * reference and handed over for release once the last of it is queued, so a
 * response body is copied at most once; streamed pieces, which grow the buffer
 * they sit in, are copied into the queue.
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

#include "xhttp/core/exchange.h"
#include "xhttp/core/tokens.h"
#include "xhttp/http2/frame.h"
#include "xhttp/http2/held_window.h"
#include "xhttp/http2/hpack.h"
#include "xhttp/http2/request.h"
#include "xhttp/http2/stream_table.h"

/* Stop framing into the output queue beyond this; resume once it drains. */
#define XH2_OUTPUT_HIGH_WATER (1u << 20)
/* Between the two GOAWAYs of a graceful stop. */
#define XH2_GOAWAY_GRACE_MS 1000
/* Ranges of stream ids a client skipped, remembered to reject their later use. */
#define XH2_SKIPPED_RANGES 8
/* Streams we reset, remembered so frames the client sent before it saw the
 * reset are dropped quietly (RFC 9113 §5.4.2). */
#define XH2_RESET_MEMORY 32
/* Finished streams kept per connection, buffers and all, for the next ones. */
#define XH2_SPARE_STREAMS 32
/* A spare stream keeps a request body buffer up to this size. */
#define XH2_SPARE_BODY_CAP (64u << 10)
/* The largest response header block we send (its frames included). */
#define XH2_MAX_SEND_BLOCK (64u << 10)
/* Entries of one SETTINGS frame before it counts as abuse. */
#define XH2_MAX_SETTINGS_ENTRIES 32
/* Frames that carry nothing (empty DATA, empty CONTINUATION) tolerated
 * between two requests: CVE-2019-9518. */
#define XH2_MAX_EMPTY_FRAMES 1024
/* Pseudo-headers a request may add to its regular fields. */
#define XH2_PSEUDO_FIELDS 8

typedef struct xHttp2 xHttp2;

/* What a connection waits for, and so which timeout applies. */
typedef enum xH2Wait {
    XH2_WAIT_NOTHING, /* handlers are working: no timeout */
    XH2_WAIT_IDLE,    /* no streams: the idle timeout */
    XH2_WAIT_REQUEST, /* a request's headers or body: header/body timeout */
    XH2_WAIT_PEER,    /* flow control holds our output: the send timeout */
} xH2Wait;

/* A request header as handlers see it: views into the stream's strings, or,
 * for a request upgraded from HTTP/1.1, the same. */
typedef struct xH2Field {
    xStr name, value;
} xH2Field;

typedef struct xH2Stream {
    xHttp2 *h2;
    int32_t id;
    struct xH2Stream *prev, *next; /* h2->streams */
    struct xH2Stream *next_ready;  /* h2->ready: complete, awaiting dispatch */
    xHttpExchange *ex;             /* from dispatch (or a bodied request's head) until the stream is freed */

    xBuffer strings; /* the request's names and values */
    xBuffer fields;  /* xH2Field entries of regular headers */
    xStr method, path, authority;
    int64_t declared_length; /* content-length, or -1 */
    uint64_t received;       /* DATA payload bytes so far */
    xBuffer body;            /* the whole body, or a streamed one's undelivered part */
    xH2HeldShare held_share; /* a streamed body's part: its connection window (held_window.h) */
    int64_t send_window;     /* what we may still send */
    int64_t recv_window;     /* what the client may still send */
    uint32_t recv_consumed;  /* consumed since the last WINDOW_UPDATE */
    int reject_status;       /* answer this instead of dispatching */
    bool streams_body;       /* a streaming route: dispatched at the head */
    bool tunnel;             /* an extended CONNECT (RFC 8441): answered at the head */
    bool body_done;          /* the client ended its side of the stream */
    bool waved_off;          /* RST_STREAM(NO_ERROR) sent for the rest of the body */

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
    bool head_written; /* the response's HEADERS is queued */
    bool eof;          /* the response has no more bytes coming */
    bool end_sent;     /* our side of the stream is ended */
    bool in_op;        /* inside an exchange op: closing waits for it */
    bool ready;
    bool dispatched;
    bool closed;
} xH2Stream;

/* Client stream ids never opened: [first, last], both odd. */
typedef struct xH2IdRange {
    int32_t first, last;
} xH2IdRange;

typedef bool (*xH2Handler)(xHttp2 *h2, const xH2Frame *f);

struct xHttp2 {
    xConn *conn;
    const xHttpServerConf *conf;
    xH2StreamTable table; /* streams not yet closed, by id */
    xH2Stream *streams;   /* every stream the connection holds, closed ones too */
    xH2Stream *spare;     /* finished streams for reuse (next links) */
    size_t spare_count;
    xH2Stream *ready, *ready_tail;
    int32_t highest_id; /* highest client stream id opened */
    int32_t last_id;    /* the last stream we serve, once the final GOAWAY is out */
    xH2IdRange skipped[XH2_SKIPPED_RANGES];
    size_t skipped_next;
    int32_t reset[XH2_RESET_MEMORY];
    size_t reset_next;
    xHpackDecoder decoder;
    xHpackEncoder encoder;
    /* server and date as HPACK fields, Huffman-coded once per second: every
     * response head of that second on this connection copies the same bytes */
    uint8_t fixed_fields[64];
    size_t fixed_len;
    time_t fixed_second;

    int32_t block_id;       /* the stream whose header block is open, 0 if none */
    uint8_t block_flags;    /* its HEADERS frame's flags */
    bool block_self_dep;    /* its priority names itself: a stream error once decoded */
    uint32_t continuations; /* CONTINUATION frames in the open block */
    xBuffer block;          /* the block's fragments, when it spans frames */

    size_t preface_left;    /* preface bytes still to match */
    bool settings_seen;     /* the client's first SETTINGS came */
    int64_t peer_window;    /* the client's SETTINGS_INITIAL_WINDOW_SIZE */
    int64_t send_window;    /* the connection's, for what we send */
    int64_t recv_window;    /* the connection's, for what the client sends */
    uint32_t recv_consumed; /* connection bytes consumed since the last WINDOW_UPDATE */
    uint32_t conn_window;   /* the connection window we keep open */
    uint32_t stream_window; /* our SETTINGS_INITIAL_WINDOW_SIZE */
    size_t control_queued;  /* acks and resets queued while output waits */
    size_t empty_frames;    /* frames with nothing in them since the last request */
    double reset_tokens;    /* client resets allowed now (a token bucket) */
    uint64_t reset_refill_ms;

    xTimer goaway_timer;       /* second step of a graceful GOAWAY */
    uint64_t progress;         /* request bytes taken plus response bytes framed */
    xH2HeldWindow held_window; /* held streamed bodies' connection window (held_window.h) */
    uint64_t progress_at_arm;
    xH2Wait waiting_for; /* what the armed timer measures */
    bool in_batch;
    bool draining;
    bool final_goaway; /* GOAWAY with last_id is out: no new streams */
    bool peer_goaway;  /* the client will open no more streams */
    bool failed;       /* a connection error ended it */
};

static const xConnProtocol h2_protocol;
static const xHttpExchangeOps h2_ops;

static void pump(xHttp2 *h2);
static void frame_stream(xH2Stream *s);
static void settle_closed(xH2Stream *s);
static size_t tunnel_pending(const xHttpExchange *ex);

/* ---- Streams ---- */

static xH2Stream *stream_new(xHttp2 *h2, int32_t id) {
    xH2Stream *s = h2->spare;
    if (s) {
        /* Reuse it whole: its buffers keep their storage, emptied. */
        h2->spare = s->next;
        h2->spare_count--;
        xBuffer strings = s->strings, fields = s->fields, body = s->body;
        memset(s, 0, sizeof *s);
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
    s->declared_length = -1;
    s->send_window = h2->peer_window;
    s->recv_window = h2->stream_window;
    s->next = h2->streams;
    if (h2->streams) h2->streams->prev = s;
    h2->streams = s;
    xCounterAdd(&xHttpContextOf(h2->conn)->counters.http2_streams, 1); /* metrics (observe/) */
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
    s->ref_is_file = false;
}

static void release_out(xH2Stream *s) {
    if (s->out_sealed && s->out.data) {
        hand_over(s, xMemCacheRelease, s->out.data); /* from the worker's cache */
        s->out = (xBuffer){0};
    }
    xBufferFree(&s->out);
}

static void stream_destroy(xH2Stream *s) {
    xBufferFree(&s->strings);
    xBufferFree(&s->fields);
    xBufferFree(&s->body);
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

/* ---- Flow control ---- */

/* The client's bytes were consumed: its window comes back once half of ours
 * is used up, in one WINDOW_UPDATE. */
static void consume_conn(xHttp2 *h2, size_t n) {
    h2->recv_consumed += (uint32_t)n;
    if (h2->recv_consumed < h2->conn_window / 2 || h2->failed) return;
    xH2WriteWindowUpdate(h2->conn, 0, h2->recv_consumed);
    h2->recv_window += h2->recv_consumed;
    h2->recv_consumed = 0;
}

static void consume_stream(xH2Stream *s, size_t n) {
    if (s->closed || s->body_done) return; /* no more is coming */
    s->recv_consumed += (uint32_t)n;
    if (s->recv_consumed < s->h2->stream_window / 2 || s->h2->failed) return;
    xH2WriteWindowUpdate(s->h2->conn, s->id, s->recv_consumed);
    s->recv_window += s->recv_consumed;
    s->recv_consumed = 0;
}

/* A streamed body's held part leaves (taken, or dropped): the connection's
 * window comes back for what did not get it back on arrival. */
static void release_held(xHttp2 *h2, xH2Stream *s) {
    size_t due = xH2HeldRelease(&h2->held_window, &s->held_share, s->body.len);
    if (due) consume_conn(h2, due);
    s->body.len = 0;
}

/* Ends a stream: what it holds is released, and it becomes a spare. */
static void stream_free(xH2Stream *s) {
    xHttp2 *h2 = s->h2;
    if (s->ready) unqueue(h2, s); /* rare: ended from another stream's handler */
    /* A streamed body nobody took may still hold the connection's window. */
    if (s->streams_body && s->body.len) release_held(h2, s);
    if (!s->closed) xH2TableRemove(&h2->table, s->id);
    if (s->prev)
        s->prev->next = s->next;
    else
        h2->streams = s->next;
    if (s->next) s->next->prev = s->prev;
    release_ref(s);
    release_out(s);
    if (s->ex) xHttpExchangeRelease(xHttpContextOf(h2->conn), s->ex);
    bool held_conn = s->dispatched;
    xConn *conn = h2->conn;
    if (s->body.cap > XH2_SPARE_BODY_CAP) xBufferFree(&s->body);
    if (h2->spare_count < XH2_SPARE_STREAMS) {
        s->next = h2->spare;
        h2->spare = s;
        h2->spare_count++;
    } else {
        stream_destroy(s);
    }
    if (held_conn) xConnRelease(conn); /* may free h2 */
}

/* The stream leaves RFC 9113's open states: frames on its id no longer
 * reach it, and, unless a handler or the ready queue still has it, it goes. */
static void close_stream(xH2Stream *s) {
    if (s->closed) return;
    s->closed = true;
    xH2TableRemove(&s->h2->table, s->id);
    /* Held body bytes will never be delivered now: their share of the
     * connection's window goes back, whoever still holds the exchange. */
    if (s->streams_body && s->body.len) release_held(s->h2, s);
    if (!s->ready && !s->in_op) settle_closed(s); /* otherwise dispatch_ready or the op does */
}

/* ---- Errors ---- */

/* A connection error (RFC 9113 §5.4.1): GOAWAY, then the connection ends
 * once it is out. Returns false, so handlers can return it. */
static bool conn_error(xHttp2 *h2, xH2Error code) {
    if (h2->failed) return false;
    XLOG_DEBUG("http2: connection error %d", (int)code);
    h2->failed = true;
    xH2WriteGoaway(h2->conn, h2->highest_id, code);
    xConnCloseAfterFlush(h2->conn);
    return false;
}

/* Acks and resets the client makes us owe: bounded while our output waits
 * (CVE-2019-9512, 9514, 9515). */
static bool owe_control(xHttp2 *h2) {
    if (++h2->control_queued > h2->conf->http2_max_control_queue)
        return conn_error(h2, XH2_ENHANCE_YOUR_CALM);
    return true;
}

static void remember_reset(xHttp2 *h2, int32_t id) {
    h2->reset[h2->reset_next] = id;
    h2->reset_next = (h2->reset_next + 1) % XH2_RESET_MEMORY;
}

static bool was_reset(const xHttp2 *h2, int32_t id) {
    for (size_t i = 0; i < XH2_RESET_MEMORY; i++)
        if (h2->reset[i] == id) return true;
    return false;
}

/* A stream error (RFC 9113 §5.4.2): RST_STREAM, and the stream (if we have
 * it) closes. False only when the reset itself was one too many. */
static bool stream_error(xHttp2 *h2, int32_t id, xH2Error code) {
    xH2WriteReset(h2->conn, id, code);
    remember_reset(h2, id);
    xH2Stream *s = xH2TableFind(&h2->table, id);
    if (s) close_stream(s);
    return owe_control(h2);
}

static bool was_skipped(const xHttp2 *h2, int32_t id) {
    for (size_t i = 0; i < XH2_SKIPPED_RANGES; i++)
        if (h2->skipped[i].first && id >= h2->skipped[i].first && id <= h2->skipped[i].last) return true;
    return false;
}

/* RFC 9113 §5.1: a stream id above every one the client opened is idle. */
static bool is_idle(const xHttp2 *h2, int32_t id) { return !(id & 1) || id > h2->highest_id; }

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
    const char *q = target.len ? memchr(target.data, '?', target.len) : NULL;
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
    xStr target = s->path;
    ex->req.method = s->method;
    ex->req.path = path_of(target);
    bool has_query = ex->req.path.len < target.len;
    ex->req.query.data = has_query ? target.data + ex->req.path.len + 1 : "";
    ex->req.query.len = has_query ? target.len - ex->req.path.len - 1 : 0;
    /* HTTP/2 carries the host in :authority; handlers look for Host. */
    if (s->authority.len && n < ex->fields_cap) {
        ex->fields[n].name = (xStr){"host", 4};
        ex->fields[n++].value = s->authority;
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
    if (len && !discard) consume_stream(s, len);
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
        stream_error(h2, s->id, XH2_INTERNAL_ERROR);
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
    if (s->tunnel) ex->tunnel.pending = tunnel_pending;
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
            settle_closed(s); /* reset before we got to it */
        else if (!s->dispatched)
            dispatch(h2, s);
        else
            deliver_body(h2, s); /* more of a streamed body */
    }
}

/* Routes a request whose body is still to come: the stream takes its
 * exchange now (without a field array: that waits for dispatch), and
 * dispatch reuses the routing. */
static bool route_at_head(xHttp2 *h2, xH2Stream *s) {
    if (!s->ex && !(s->ex = xHttpExchangeAcquire(xHttpContextOf(h2->conn)))) return false;
    s->ex->req.method = s->method;
    s->ex->req.path = path_of(s->path);
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
    /* A tunnel's bytes are no body to wait for: a route that does not
     * stream answers now, and the answer waves the rest off. */
    if (s->tunnel) return true;
    if (s->declared_length > (int64_t)h2->conf->max_body_size) refuse_body(h2, s, 413);
    return false;
}

/* Request body bytes for s, already counted against both windows. */
static bool take_data(xHttp2 *h2, xH2Stream *s, const uint8_t *data, size_t len) {
    h2->progress += len;
    if (s->streams_body && !(s->ex && s->ex->res.ended)) {
        /* Held until its reader takes it: the stream's window reopens then;
         * the connection's now, while the readers hold under one window. */
        if (xBufferAppend(&s->body, data, len) != XOK) return stream_error(h2, s->id, XH2_INTERNAL_ERROR);
        if (xH2HeldArrive(&h2->held_window, &s->held_share, len)) consume_conn(h2, len);
        if (s->dispatched) mark_ready(h2, s);
        return true;
    }
    /* Bytes nobody will read reopen only the connection's window. */
    consume_conn(h2, len);
    if (s->reject_status || (s->ex && s->ex->res.ended) || s->streams_body) return true;
    consume_stream(s, len);
    if (s->body.len + len > h2->conf->max_body_size) {
        refuse_body(h2, s, 413);
        return true;
    }
    if (xBufferAppend(&s->body, data, len) != XOK) return stream_error(h2, s->id, XH2_INTERNAL_ERROR);
    return true;
}

/* The client ended its side of s. */
static void remote_end(xHttp2 *h2, xH2Stream *s) {
    s->body_done = true;
    if (!s->dispatched || s->streams_body) mark_ready(h2, s);
    if (s->end_sent) close_stream(s);
}

/* ---- Header blocks ---- */

/* Copies a valid request's fields out of the decoder's scratch (and the
 * input) into the stream, which keeps them until it ends. */
static bool keep_fields(xH2Stream *s, const xHpackField *f, size_t n, const xH2RequestHead *head) {
    size_t total = 0, regular = 0;
    for (size_t i = 0; i < n; i++) {
        total += f[i].name.len + f[i].value.len;
        regular += f[i].name.data[0] != ':';
    }
    if (head->protocol.len) regular++;
    /* Room for everything first: the fields point into the strings. */
    if (xBufferReserve(&s->strings, total + 9) != XOK ||
        xBufferReserve(&s->fields, regular * sizeof(xH2Field)) != XOK)
        return false;
    xH2Field *out = (xH2Field *)s->fields.data;
    xStr protocol = {NULL, 0}; /* head->protocol's copy: head's views die with the input */
    for (size_t i = 0; i < n; i++) {
        char *at = s->strings.data + s->strings.len;
        memcpy(at, f[i].name.data, f[i].name.len);
        memcpy(at + f[i].name.len, f[i].value.data, f[i].value.len);
        s->strings.len += f[i].name.len + f[i].value.len;
        xStr name = {at, f[i].name.len}, value = {at + f[i].name.len, f[i].value.len};
        switch (f[i].token) {
        case XHPACK_TOKEN_METHOD: s->method = value; break;
        case XHPACK_TOKEN_PATH: s->path = value; break;
        case XHPACK_TOKEN_AUTHORITY: s->authority = value; break;
        default:
            if (name.data[0] != ':')
                *out++ = (xH2Field){name, value};
            else if (xStrEqualsC(name, ":protocol"))
                protocol = value;
            break;
        }
    }
    /* RFC 8441: an extended CONNECT's protocol reaches the handler as a field,
     * from the stream's copy: the block it came in may have moved (the input
     * compacted, or grown for a large frame) before the stream is dispatched. */
    if (head->protocol.len) *out++ = (xH2Field){{":protocol", 9}, protocol};
    s->fields.len = (size_t)((char *)out - s->fields.data);
    s->declared_length = head->content_length;
    s->tunnel = head->protocol.len > 0;
    return true;
}

/* A new stream's header block, decoded (rv from xHpackDecode). */
static bool open_stream(xHttp2 *h2, int32_t id, uint8_t flags, const xHpackBlock *b, int rv) {
    if (id <= h2->highest_id) {
        if (was_reset(h2, id)) return true; /* sent before our reset reached it */
        return conn_error(h2, was_skipped(h2, id) ? XH2_PROTOCOL_ERROR : XH2_STREAM_CLOSED);
    }
    if (h2->final_goaway && id > h2->last_id) return true; /* after our GOAWAY: ignored */
    if (id > h2->highest_id + 2) {
        h2->skipped[h2->skipped_next] = (xH2IdRange){h2->highest_id + 2, id - 2};
        h2->skipped_next = (h2->skipped_next + 1) % XH2_SKIPPED_RANGES;
    }
    h2->highest_id = id;
    h2->empty_frames = 0;
    if (h2->block_self_dep) return stream_error(h2, id, XH2_PROTOCOL_ERROR);
    if (h2->table.count >= h2->conf->http2_max_streams) return stream_error(h2, id, XH2_REFUSED_STREAM);
    xH2RequestHead head = {.content_length = -1};
    if (rv == XHPACK_OK && !xH2CheckRequest(b->fields, b->count, true, &head))
        return stream_error(h2, id, XH2_PROTOCOL_ERROR);
    xH2Stream *s = stream_new(h2, id);
    if (!s) return stream_error(h2, id, XH2_INTERNAL_ERROR);
    if (rv == XHPACK_TOO_LARGE)
        s->reject_status = 431; /* the decoder stayed in sync; the stream is answered */
    else if (!keep_fields(s, b->fields, b->count, &head))
        return stream_error(h2, id, XH2_INTERNAL_ERROR);
    if (flags & XH2_FLAG_END_STREAM)
        remote_end(h2, s);
    else if (begin_body(h2, s))
        mark_ready(h2, s); /* a streaming route, or a tunnel: dispatched now */
    return true;
}

/* A header block on a stream already open: trailers, which must end it. */
static bool take_trailers(xHttp2 *h2, xH2Stream *s, uint8_t flags, const xHpackBlock *b, int rv) {
    if (s->body_done) return stream_error(h2, s->id, XH2_STREAM_CLOSED);
    if (!(flags & XH2_FLAG_END_STREAM) || (rv == XHPACK_OK && !xH2CheckTrailers(b->fields, b->count)))
        return stream_error(h2, s->id, XH2_PROTOCOL_ERROR);
    if (s->declared_length >= 0 && s->received != (uint64_t)s->declared_length)
        return stream_error(h2, s->id, XH2_PROTOCOL_ERROR);
    remote_end(h2, s); /* the fields themselves are dropped */
    return true;
}

/* A whole header block: decoded whatever becomes of it, so the decoder's
 * table stays in step with the client's encoder. */
static bool end_block(xHttp2 *h2, const uint8_t *data, size_t len) {
    int32_t id = h2->block_id;
    uint8_t flags = h2->block_flags;
    h2->block_id = 0;
    xBufferPool *pool = &xHttpContextOf(h2->conn)->net.buffers;
    xBuffer fields = {0}, scratch = {0};
    if (xBufferPoolAcquire(pool, &fields) != XOK || xBufferPoolAcquire(pool, &scratch) != XOK) {
        xBufferPoolRelease(pool, &fields);
        return conn_error(h2, XH2_INTERNAL_ERROR);
    }
    size_t max_fields = h2->conf->max_headers + XH2_PSEUDO_FIELDS;
    if (max_fields > fields.cap / sizeof(xHpackField)) max_fields = fields.cap / sizeof(xHpackField);
    xHpackBlock b = {(xHpackField *)fields.data, max_fields, 0, scratch.data, scratch.cap,
                     h2->conf->max_header_size,  0};
    int rv = xHpackDecode(&h2->decoder, data, len, &b);
    bool ok;
    if (rv == XHPACK_ERROR) {
        ok = conn_error(h2, XH2_COMPRESSION_ERROR);
    } else {
        h2->progress += len;
        xH2Stream *s = xH2TableFind(&h2->table, id);
        ok = s ? take_trailers(h2, s, flags, &b, rv) : open_stream(h2, id, flags, &b, rv);
    }
    xBufferPoolRelease(pool, &fields);
    xBufferPoolRelease(pool, &scratch);
    h2->block.len = 0;
    if (h2->block.cap > XH2_DEFAULT_FRAME_SIZE) xBufferFree(&h2->block);
    return ok;
}

/* ---- Frame handlers: one per type, each given a whole frame ---- */

static bool on_data(xHttp2 *h2, const xH2Frame *f) {
    const uint8_t *p;
    size_t n;
    if (!f->stream_id || !xH2Unpad(f, 0, &p, &n)) return conn_error(h2, XH2_PROTOCOL_ERROR);
    xH2Stream *s = xH2TableFind(&h2->table, f->stream_id);
    if (!s && is_idle(h2, f->stream_id)) return conn_error(h2, XH2_PROTOCOL_ERROR);
    if (f->length > h2->recv_window) return conn_error(h2, XH2_FLOW_CONTROL_ERROR);
    h2->recv_window -= f->length;
    if (!s || s->body_done) {
        consume_conn(h2, f->length); /* counted, and given back */
        if (!s && was_reset(h2, f->stream_id)) return true;
        return stream_error(h2, f->stream_id, XH2_STREAM_CLOSED);
    }
    if (f->length > s->recv_window) {
        consume_conn(h2, f->length);
        return stream_error(h2, s->id, XH2_FLOW_CONTROL_ERROR);
    }
    s->recv_window -= f->length;
    if (f->length > n) { /* padding is consumed at once */
        consume_conn(h2, f->length - n);
        consume_stream(s, f->length - n);
    }
    bool end = f->flags & XH2_FLAG_END_STREAM;
    if (!n && !end && ++h2->empty_frames > XH2_MAX_EMPTY_FRAMES) return conn_error(h2, XH2_ENHANCE_YOUR_CALM);
    s->received += n;
    if (s->declared_length >= 0 && (s->received > (uint64_t)s->declared_length ||
                                    (end && s->received != (uint64_t)s->declared_length))) {
        consume_conn(h2, n);
        return stream_error(h2, s->id, XH2_PROTOCOL_ERROR);
    }
    if (n && !take_data(h2, s, p, n)) return false;
    if (end && !s->closed) remote_end(h2, s);
    return true;
}

static bool on_headers(xHttp2 *h2, const xH2Frame *f) {
    const uint8_t *p;
    size_t n;
    size_t skip = f->flags & XH2_FLAG_PRIORITY ? 5 : 0;
    if (!(f->stream_id & 1) || !xH2Unpad(f, skip, &p, &n)) return conn_error(h2, XH2_PROTOCOL_ERROR);
    h2->block_id = f->stream_id;
    h2->block_flags = f->flags;
    h2->block_self_dep = skip && (int32_t)(xH2Get32(p) & 0x7fffffffu) == f->stream_id;
    h2->continuations = 0;
    if (f->flags & XH2_FLAG_END_HEADERS) return end_block(h2, p + skip, n - skip);
    if (xBufferAppend(&h2->block, p + skip, n - skip) != XOK) return conn_error(h2, XH2_INTERNAL_ERROR);
    return true;
}

static bool on_continuation(xHttp2 *h2, const xH2Frame *f) {
    if (!h2->block_id || f->stream_id != h2->block_id) return conn_error(h2, XH2_PROTOCOL_ERROR);
    /* CVE-2024-27316: a block may not go on and on. */
    if (++h2->continuations > h2->conf->http2_max_continuations) return conn_error(h2, XH2_ENHANCE_YOUR_CALM);
    if (xBufferAppend(&h2->block, f->payload, f->length) != XOK) return conn_error(h2, XH2_INTERNAL_ERROR);
    if (f->flags & XH2_FLAG_END_HEADERS) return end_block(h2, (const uint8_t *)h2->block.data, h2->block.len);
    return true;
}

/* RFC 9218 replaces RFC 7540's priorities, which we announce we ignore; a
 * PRIORITY frame is still checked. */
static bool on_priority(xHttp2 *h2, const xH2Frame *f) {
    xH2Error error = f->length != 5                                                  ? XH2_FRAME_SIZE_ERROR
                     : (int32_t)(xH2Get32(f->payload) & 0x7fffffffu) == f->stream_id ? XH2_PROTOCOL_ERROR
                                                                                     : XH2_NO_ERROR;
    if (!f->stream_id) return conn_error(h2, XH2_PROTOCOL_ERROR);
    if (error == XH2_NO_ERROR) return true;
    /* A stream error, but never a reset of an id only we could open. */
    return f->stream_id & 1 ? stream_error(h2, f->stream_id, error) : conn_error(h2, error);
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
    if (f->length != 4) return conn_error(h2, XH2_FRAME_SIZE_ERROR);
    if (!f->stream_id || is_idle(h2, f->stream_id)) return conn_error(h2, XH2_PROTOCOL_ERROR);
    xH2Stream *s = xH2TableFind(&h2->table, f->stream_id);
    if (!s) return true;
    if (!take_reset_token(h2)) return conn_error(h2, XH2_ENHANCE_YOUR_CALM);
    close_stream(s);
    return true;
}

/* One setting from the client (a SETTINGS frame or HTTP2-Settings). */
static bool apply_setting(xHttp2 *h2, uint16_t id, uint32_t value) {
    switch (id) {
    case XH2_SETTINGS_HEADER_TABLE_SIZE: xHpackEncoderSetPeerTableSize(&h2->encoder, value); return true;
    case XH2_SETTINGS_ENABLE_PUSH:
    case XH2_SETTINGS_ENABLE_CONNECT_PROTOCOL: return value <= 1 || conn_error(h2, XH2_PROTOCOL_ERROR);
    case XH2_SETTINGS_MAX_FRAME_SIZE:
        return (value >= XH2_DEFAULT_FRAME_SIZE && value <= XH2_MAX_FRAME_SIZE_LIMIT) ||
               conn_error(h2, XH2_PROTOCOL_ERROR);
    case XH2_SETTINGS_INITIAL_WINDOW_SIZE: {
        if (value > XH2_MAX_WINDOW) return conn_error(h2, XH2_FLOW_CONTROL_ERROR);
        /* §6.9.2: every stream's window moves by the change, and may go negative. */
        int64_t delta = (int64_t)value - h2->peer_window;
        for (const xH2Stream *s = h2->streams; s; s = s->next)
            if (!s->closed && s->send_window + delta > XH2_MAX_WINDOW)
                return conn_error(h2, XH2_FLOW_CONTROL_ERROR);
        h2->peer_window = value;
        for (xH2Stream *s = h2->streams; s; s = s->next)
            if (!s->closed) s->send_window += delta;
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
    if (f->stream_id) return conn_error(h2, XH2_PROTOCOL_ERROR);
    if (f->flags & XH2_FLAG_ACK) return f->length == 0 || conn_error(h2, XH2_FRAME_SIZE_ERROR);
    if (f->length % 6) return conn_error(h2, XH2_FRAME_SIZE_ERROR);
    if (f->length / 6 > XH2_MAX_SETTINGS_ENTRIES) return conn_error(h2, XH2_ENHANCE_YOUR_CALM);
    if (!apply_settings(h2, f->payload, f->length)) return false;
    h2->settings_seen = true;
    xH2WriteFrame(h2->conn, XH2_SETTINGS, XH2_FLAG_ACK, 0, NULL, 0);
    return owe_control(h2);
}

static bool on_push_promise(xHttp2 *h2, const xH2Frame *f) { return conn_error(h2, XH2_PROTOCOL_ERROR); }

static bool on_ping(xHttp2 *h2, const xH2Frame *f) {
    if (f->stream_id) return conn_error(h2, XH2_PROTOCOL_ERROR);
    if (f->length != 8) return conn_error(h2, XH2_FRAME_SIZE_ERROR);
    if (f->flags & XH2_FLAG_ACK) return true;
    xH2WriteFrame(h2->conn, XH2_PING, XH2_FLAG_ACK, 0, f->payload, 8);
    return owe_control(h2);
}

static bool on_goaway(xHttp2 *h2, const xH2Frame *f) {
    if (f->stream_id) return conn_error(h2, XH2_PROTOCOL_ERROR);
    if (f->length < 8) return conn_error(h2, XH2_FRAME_SIZE_ERROR);
    h2->peer_goaway = true; /* the streams in flight finish; then the connection ends */
    return true;
}

static bool on_window_update(xHttp2 *h2, const xH2Frame *f) {
    if (f->length != 4) return conn_error(h2, XH2_FRAME_SIZE_ERROR);
    uint32_t inc = xH2Get32(f->payload) & 0x7fffffffu;
    if (!f->stream_id) {
        if (!inc) return conn_error(h2, XH2_PROTOCOL_ERROR);
        if (h2->send_window + inc > XH2_MAX_WINDOW) return conn_error(h2, XH2_FLOW_CONTROL_ERROR);
        h2->send_window += inc;
        return true;
    }
    xH2Stream *s = xH2TableFind(&h2->table, f->stream_id);
    if (!s) return !is_idle(h2, f->stream_id) || conn_error(h2, XH2_PROTOCOL_ERROR);
    if (!inc) return stream_error(h2, s->id, XH2_PROTOCOL_ERROR);
    if (s->send_window + inc > XH2_MAX_WINDOW) return stream_error(h2, s->id, XH2_FLOW_CONTROL_ERROR);
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
    if (h2->block_id && f->type != XH2_CONTINUATION) return conn_error(h2, XH2_PROTOCOL_ERROR);
    /* §3.4: the preface's SETTINGS comes first. */
    if (!h2->settings_seen && (f->type != XH2_SETTINGS || (f->flags & XH2_FLAG_ACK)))
        return conn_error(h2, XH2_PROTOCOL_ERROR);
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
        if (memcmp(data, want, n) != 0) return conn_error(h2, XH2_PROTOCOL_ERROR), -1;
        h2->preface_left -= n;
        at = n;
    }
    while (len - at >= XH2_FRAME_HEADER_LEN) {
        xH2Frame f = xH2ReadFrame(data + at);
        if (f.length > XH2_DEFAULT_FRAME_SIZE) return conn_error(h2, XH2_FRAME_SIZE_ERROR), -1;
        if (len - at - XH2_FRAME_HEADER_LEN < f.length) break;
        at += XH2_FRAME_HEADER_LEN + f.length;
        if (!handle_frame(h2, &f) || h2->failed) return -1;
    }
    return (long)at;
}

/* ---- Output ---- */

static size_t pending_out(const xH2Stream *s) {
    return (s->out.len - s->out_framed) + (s->ref_len - s->ref_framed);
}

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

/* Encodes "Name: value\r\n" lines. Response field names must be lower case
 * in HTTP/2 (RFC 9113 §8.2.1); handlers write them as they like, so they are
 * folded where they lie: the exchange's header lines are HTTP/2's alone. */
static uint8_t *encode_lines(uint8_t *p, xBuffer *lines) {
    if (!lines->len) return p; /* (data may be NULL: no pointer arithmetic on it) */
    char *at = lines->data, *end = at + lines->len;
    while (at < end) {
        char *colon = memchr(at, ':', (size_t)(end - at));
        char *eol = memchr(at, '\r', (size_t)(end - at));
        size_t name_len = (size_t)(colon - at);
        for (size_t i = 0; i < name_len; i++)
            at[i] = (char)(at[i] >= 'A' && at[i] <= 'Z' ? at[i] + 32 : at[i]);
        p = xHpackEncodeField(p, (xStr){at, name_len}, (xStr){colon + 2, (size_t)(eol - colon - 2)});
        at = eol + 2;
    }
    return p;
}

_Static_assert(sizeof(((xHttp2 *)0)->fixed_fields) >=
                   XHPACK_FIELD_BOUND(0, 4) + XHPACK_FIELD_BOUND(0, XHTTP_DATE_LEN),
               "room for server and date, each at its worst");

/* Writes server and date at p, encoding them only when the second changed. */
static uint8_t *put_fixed_fields(xHttp2 *h2, uint8_t *p, const xEventLoop *loop) {
    time_t now = xEventLoopWallSeconds(loop);
    if (!h2->fixed_len || now != h2->fixed_second) {
        const char *date = xHttpDate(&xHttpContextOf(h2->conn)->date, loop);
        uint8_t *end = xHpackEncodeToken(h2->fixed_fields, XHPACK_TOKEN_SERVER, (xStr){"xkit", 4});
        end = xHpackEncodeToken(end, XHPACK_TOKEN_DATE, (xStr){date, XHTTP_DATE_LEN});
        h2->fixed_len = (size_t)(end - h2->fixed_fields);
        h2->fixed_second = now;
    }
    memcpy(p, h2->fixed_fields, h2->fixed_len);
    return p + h2->fixed_len;
}

/* Queues a header block for s: the response head (:status, server, date,
 * the handler's fields, content-length when with_length) or, when trailers,
 * the trailer lines. */
static xErrno write_block(xH2Stream *s, bool trailers, bool with_length, size_t length, uint8_t flags) {
    xHttp2 *h2 = s->h2;
    xHttpExchange *ex = s->ex;
    xBuffer *lines = trailers ? &ex->res.trailers : &ex->res.headers;
    /* Each line takes at most its bytes plus 12 (XHPACK_FIELD_BOUND); a line is at least 4. */
    size_t bound = 128 + XHTTP_DATE_LEN + XHTTP_DECIMAL_MAX + lines->len * 4;
    if (bound > XH2_MAX_SEND_BLOCK) return XERR_STATE;
    bound += (bound / XH2_DEFAULT_FRAME_SIZE + 1) * XH2_FRAME_HEADER_LEN;
    uint8_t *base = (uint8_t *)xConnReserve(h2->conn, bound);
    if (!base) return XERR_NOMEM;
    uint8_t *p = xHpackEncodeBegin(&h2->encoder, base + XH2_FRAME_HEADER_LEN);
    if (!trailers) {
        p = xHpackEncodeStatus(p, ex->res.status);
        p = put_fixed_fields(h2, p, ex->req.loop);
    }
    p = encode_lines(p, lines);
    if (with_length) p = xHpackEncodeContentLength(p, length);
    size_t len = (size_t)(p - base - XH2_FRAME_HEADER_LEN);
    xConnCommit(h2->conn, frame_block(base, len, s->id, flags));
    return XOK;
}

/* RFC 9113 §8.1: a response complete before its request asks the client,
 * by RST_STREAM(NO_ERROR), to stop sending the rest of the body, which would
 * only be dropped here (a rejected upload, or a streaming handler that
 * answered early). It follows the frame that ended the response. */
static void local_end(xH2Stream *s) {
    s->end_sent = true;
    if (s->body_done) {
        close_stream(s);
    } else if (!s->waved_off) {
        s->waved_off = true;
        stream_error(s->h2, s->id, XH2_NO_ERROR);
    }
}

static xErrno submit_head(xH2Stream *s, bool with_length, size_t length, bool with_body) {
    s->ex->res.head_sent = true;
    xErrno err = write_block(s, false, with_length, length, with_body ? 0 : XH2_FLAG_END_STREAM);
    if (err != XOK) {
        stream_error(s->h2, s->id, XH2_INTERNAL_ERROR);
        return err;
    }
    s->head_written = true;
    if (!with_body) {
        s->eof = true;
        local_end(s);
    }
    return XOK;
}

/* Queues n pending bytes: the buffered ones first, then the reference. */
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

/* Frames what s has to send as far as the windows and the output's
 * high-water mark allow, ending the stream (END_STREAM, or trailers) once
 * the response is complete. May close s, and free it unless in an op. */
static void frame_stream(xH2Stream *s) {
    xHttp2 *h2 = s->h2;
    xConn *conn = h2->conn;
    if (s->closed || s->end_sent || !s->head_written || conn->closed || h2->failed) return;
    bool trailers = s->ex && s->ex->res.trailers.len;
    for (;;) {
        size_t avail = pending_out(s);
        if (!avail && !s->eof) return;
        if (xConnPending(conn) > XH2_OUTPUT_HIGH_WATER) return;
        int64_t window = s->send_window < h2->send_window ? s->send_window : h2->send_window;
        size_t n = avail < XH2_DEFAULT_FRAME_SIZE ? avail : XH2_DEFAULT_FRAME_SIZE;
        if ((int64_t)n > window) n = window > 0 ? (size_t)window : 0;
        if (!n && avail) return; /* the client's window holds it */
        bool last = s->eof && n == avail;
        if (n || !trailers) {
            uint8_t *p = (uint8_t *)xConnReserve(conn, XH2_FRAME_HEADER_LEN);
            if (!p) return;
            xH2PutFrameHeader(p, (uint32_t)n, XH2_DATA, last && !trailers ? XH2_FLAG_END_STREAM : 0, s->id);
            xConnCommit(conn, XH2_FRAME_HEADER_LEN);
            if (n && frame_body(s, conn, n) != XOK) return;
            s->send_window -= (int64_t)n;
            h2->send_window -= (int64_t)n;
            h2->progress += n;
        }
        if (last) {
            if (trailers) write_block(s, true, false, 0, XH2_FLAG_END_STREAM);
            local_end(s);
            return;
        }
    }
}

/* Frames every stream that has something to send. */
static void frame_all(xHttp2 *h2) {
    xH2Stream *next;
    for (xH2Stream *s = h2->streams; s; s = next) {
        next = s->next;
        if (!s->closed && s->head_written && !s->end_sent && (pending_out(s) || s->eof)) frame_stream(s);
    }
}

/* ---- The exchange's ops ---- */

static bool response_has_body(const xHttpExchange *ex) {
    return xHttpStatusHasBody(ex->res.status) && !xStrEqualsC(ex->req.method, "HEAD");
}

/* The handler is done with the exchange: what is left is framed, and a
 * closed stream goes. */
static void end_exchange(xH2Stream *s) {
    xHttp2 *h2 = s->h2;
    s->ex->res.ended = true;
    s->eof = true;
    /* What came of a streamed body is dropped, and its window given back, so
     * the client can finish sending and the stream can close. */
    if (s->ex->streams_body) deliver_body(h2, s);
    xConn *conn = h2->conn;
    xConnRetain(conn);
    frame_stream(s);
    s->in_op = false;
    if (s->closed) stream_free(s);
    if (!h2->in_batch && !conn->closed) pump(h2);
    xConnRelease(conn);
}

static xErrno h2_send(xHttpExchange *ex, const void *body, size_t len, bool copy, void (*release)(void *),
                      void *release_arg) {
    xH2Stream *s = ex->proto;
    xErrno err = XOK;
    bool with_body = len && response_has_body(ex);
    s->in_op = true;
    if (ex->res.aborted || s->closed) {
        err = XERR_CLOSED;
    } else {
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
        if (err == XOK) err = submit_head(s, xHttpStatusHasBody(ex->res.status), len, with_body);
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
    s->in_op = true;
    if (ex->res.aborted || s->closed) {
        err = XERR_CLOSED;
    } else {
        if (with_body) {
            /* Framed like a body by reference, read from the file as each DATA frame goes. */
            s->ref_is_file = true;
            s->file_fd = fd;
            s->file_offset = offset;
            s->ref_len = len;
            s->ref_release = release;
            s->ref_arg = release_arg;
            release = NULL;
        }
        err = submit_head(s, xHttpStatusHasBody(ex->res.status), len, with_body);
    }
    if (release) release(release_arg);
    end_exchange(s);
    return err;
}

static xErrno h2_write(xHttpExchange *ex, const void *data, size_t len) {
    xH2Stream *s = ex->proto;
    if (ex->res.aborted || s->closed) return XERR_CLOSED;
    xErrno err = XOK;
    s->in_op = true;
    if (!ex->res.head_sent) err = submit_head(s, false, 0, response_has_body(ex));
    if (err == XOK && len && response_has_body(ex)) {
        err = xBufferAppend(&s->out, data, len);
        if (!s->h2->in_batch) pump(s->h2);
    }
    s->in_op = false;
    if (s->closed) settle_closed(s);
    return err;
}

static xErrno h2_end(xHttpExchange *ex) {
    xH2Stream *s = ex->proto;
    xErrno err = XOK;
    s->in_op = true;
    if (!ex->res.aborted && !s->closed && !ex->res.head_sent)
        err = submit_head(s, false, 0, response_has_body(ex));
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

/* ---- Tunnels (RFC 8441): an extended CONNECT's holder (a WebSocket) ---- */

static size_t tunnel_pending(const xHttpExchange *ex) { return pending_out(ex->proto); }

/* Tells the holders of tunnels whose output is all framed that they may
 * write more; true when one was told. In a batch, so what they resume is
 * delivered here and what they write is framed by the caller. */
static bool wake_tunnels(xHttp2 *h2) {
    bool woke = false, was_in_batch = h2->in_batch;
    h2->in_batch = true;
    xH2Stream *next;
    for (xH2Stream *s = h2->streams; s; s = next) {
        next = s->next;
        xHttpExchange *ex = s->ex;
        if (s->closed || !s->dispatched || !ex->tunnel.drained || pending_out(s)) continue;
        void (*drained)(xHttpExchange *, void *) = ex->tunnel.drained;
        ex->tunnel.drained = NULL;
        drained(ex, ex->tunnel.arg);
        woke = true;
    }
    dispatch_ready(h2);
    h2->in_batch = was_in_batch;
    return woke;
}

/* A graceful stop: each tunnel's holder ends it its own way (a WebSocket
 * with its close handshake), since a tunnel never finishes by itself. */
static void stop_tunnels(xHttp2 *h2) {
    bool was_in_batch = h2->in_batch;
    h2->in_batch = true;
    xH2Stream *next;
    for (xH2Stream *s = h2->streams; s; s = next) {
        next = s->next;
        if (!s->closed && s->dispatched && !s->ex->res.ended && s->ex->tunnel.stopping)
            s->ex->tunnel.stopping(s->ex, s->ex->tunnel.arg);
    }
    h2->in_batch = was_in_batch;
}

/* ---- Driving the connection ---- */

/* The client owes a request, or the rest of a body someone takes. */
static bool awaits_request(const xH2Stream *s) {
    if (s->closed || s->waved_off) return false;    /* a reset on its way ends it */
    if (s->tunnel && s->head_written) return false; /* an open tunnel times itself out */
    if (!s->dispatched) return !s->ready;
    return s->streams_body && !s->body_done && (s->ex->res.ended || xHttpExchangeWantsBody(s->ex));
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
        else if (wait == XH2_WAIT_NOTHING && pending_out(s) > 0 && !s->closed)
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
    if (conn->closed || conn->write_blocked || conn->lingering) return;
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

/* Frames what waits, flushes, and closes when the connection is done. */
static void pump(xHttp2 *h2) {
    xConn *conn = h2->conn;
    if (conn->closed) return;
    xConnRetain(conn);
    /* Framing stops at our output high-water mark; when the socket takes it
     * all at once no writable event will come, so go round again. */
    for (int round = 0; round < 64 && !conn->closed; round++) {
        frame_all(h2);
        if (wake_tunnels(h2)) frame_all(h2);
        xConnFlush(conn);
        if (conn->closed || conn->write_blocked || xConnPending(conn)) break;
        h2->control_queued = 0;
        if (h2->send_window <= 0) break;
        bool more = false;
        for (const xH2Stream *s = h2->streams; s && !more; s = s->next)
            more = !s->closed && s->head_written && !s->end_sent && pending_out(s) && s->send_window > 0;
        if (!more) break;
    }
    if (!conn->closed && !conn->close_after_flush) {
        if (finished(h2))
            xConnCloseAfterFlush(conn);
        else
            arm_timer(h2);
    }
    xConnRelease(conn);
}

/* Handles what conn->in holds; a partial frame stays for the next read. */
static bool take_input(xHttp2 *h2) {
    xConn *conn = h2->conn;
    long used = process(h2, (const uint8_t *)conn->in.data, conn->in.len);
    if (used < 0) return false;
    xBufferConsume(&conn->in, (size_t)used);
    /* A frame larger than the room left grows the buffer to hold it whole. */
    if (conn->in.len >= XH2_FRAME_HEADER_LEN) {
        size_t need = XH2_FRAME_HEADER_LEN + xH2ReadFrame((const uint8_t *)conn->in.data).length;
        if (need > conn->in.cap && xBufferReserve(&conn->in, need - conn->in.len) != XOK)
            return conn_error(h2, XH2_INTERNAL_ERROR);
    }
    return true;
}

static void on_readable(xConn *conn) {
    xHttp2 *h2 = conn->proto_state;
    xConnRetain(conn);
    h2->in_batch = true;
    bool ok = true;
    while (ok && conn->readable && !conn->closed && !conn->close_after_flush) {
        if (xBufferPoolAcquire(&conn->net->buffers, &conn->in) != XOK) break;
        ssize_t n = xConnRecv(conn, conn->in.data + conn->in.len, conn->in.cap - conn->in.len);
        if (n > 0) {
            conn->in.len += (size_t)n;
            ok = take_input(h2);
            dispatch_ready(h2);
            /* Owed acks go out while the client reads them; a client that
             * does not is found out by the count. */
            if (ok && h2->control_queued && !conn->closed) {
                xConnFlush(conn);
                if (!conn->closed && !xConnPending(conn)) h2->control_queued = 0;
            }
        } else if (n == 0) {
            xConnCloseAfterFlush(conn);
        } else if (errno != EAGAIN && errno != EINTR) {
            xConnClose(conn);
        }
    }
    h2->in_batch = false;
    if (!conn->closed) {
        if (!conn->in.len) xBufferPoolRelease(&conn->net->buffers, &conn->in);
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
    bool mid_headers;
    if (current_wait(h2, &mid_headers) == XH2_WAIT_REQUEST && !mid_headers) {
        /* Requests whose bodies stopped coming are cancelled; the
         * connection and its other streams go on. */
        xConnRetain(conn);
        xH2Stream *next;
        for (xH2Stream *s = h2->streams; s; s = next) {
            next = s->next;
            if (awaits_request(s)) stream_error(h2, s->id, XH2_CANCEL);
        }
        h2->waiting_for = XH2_WAIT_NOTHING;
        pump(h2);
        xConnRelease(conn);
        return;
    }
    /* Idle, a header block that never ends (nothing else may be sent in
     * its middle), or a peer that stopped taking the data it asked for. */
    conn_error(h2, mid_headers ? XH2_PROTOCOL_ERROR : XH2_NO_ERROR);
}

static void on_goaway_timer(xEventLoop *loop, xTimer *timer) {
    xHttp2 *h2 = (xHttp2 *)((char *)timer - offsetof(xHttp2, goaway_timer));
    h2->final_goaway = true;
    h2->last_id = h2->highest_id;
    xH2WriteGoaway(h2->conn, h2->last_id, XH2_NO_ERROR);
    pump(h2);
}

/* Graceful: announce (GOAWAY with the highest id), give requests in flight
 * a moment to arrive, then name the last stream we will serve. */
static void on_drain(xConn *conn) {
    xHttp2 *h2 = conn->proto_state;
    if (h2->draining || h2->failed) return;
    h2->draining = true;
    xH2WriteGoaway(conn, XH2_MAX_WINDOW, XH2_NO_ERROR);
    stop_tunnels(h2);
    uint32_t half = h2->conf->shutdown_timeout_ms / 2;
    xTimerStart(conn->net->loop, &h2->goaway_timer, XH2_GOAWAY_GRACE_MS < half ? XH2_GOAWAY_GRACE_MS : half);
    pump(h2);
}

static void on_close(xConn *conn) {
    xHttp2 *h2 = conn->proto_state;
    xTimerStop(conn->net->loop, &h2->goaway_timer);
    h2->ready = h2->ready_tail = NULL;
    xH2Stream *next;
    for (xH2Stream *s = h2->streams; s; s = next) {
        next = s->next;
        s->ready = false;
        close_stream(s);
    }
}

static void on_free(xConn *conn) {
    xHttp2 *h2 = conn->proto_state;
    while (h2->streams) stream_free(h2->streams);
    while (h2->spare) {
        xH2Stream *s = h2->spare;
        h2->spare = s->next;
        stream_destroy(s);
    }
    xH2TableFree(&h2->table);
    xHpackDecoderFree(&h2->decoder);
    xBufferFree(&h2->block);
    free(h2);
}

static const xConnProtocol h2_protocol = {on_readable, on_flushed, on_timeout, on_drain, on_close, on_free};

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
    xH2Stream *s = stream_new(h2, 1);
    if (!s) return false;
    h2->highest_id = 1;
    /* The target is path and query as sent: contiguous in the request line. */
    size_t target_len =
        up->query.len ? (size_t)(up->query.data + up->query.len - up->path.data) : up->path.len;
    size_t total = up->method.len + target_len;
    for (size_t i = 0; i < up->num_headers; i++) total += up->headers[i].name.len + up->headers[i].value.len;
    /* Room for everything first: the fields point into the strings. */
    if (xBufferReserve(&s->strings, total) != XOK ||
        xBufferReserve(&s->fields, up->num_headers * sizeof(xH2Field)) != XOK)
        return false;
    char *at = s->strings.data;
    memcpy(at, up->method.data, up->method.len);
    s->method = (xStr){at, up->method.len};
    at += up->method.len;
    memcpy(at, up->path.data, target_len);
    s->path = (xStr){at, target_len};
    at += target_len;
    xH2Field *f = (xH2Field *)s->fields.data;
    for (size_t i = 0; i < up->num_headers; i++) {
        xStr name = up->headers[i].name, value = up->headers[i].value;
        memcpy(at, name.data, name.len);
        memcpy(at + name.len, value.data, value.len);
        f[i] = (xH2Field){{at, name.len}, {at + name.len, value.len}};
        at += name.len + value.len;
    }
    s->strings.len = total;
    s->fields.len = up->num_headers * sizeof(xH2Field);
    s->body_done = true; /* an upgrade carries no body */
    mark_ready(h2, s);
    return true;
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
    xTimerInit(&h2->goaway_timer, on_goaway_timer);
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
    dispatch_ready(h2);
    h2->in_batch = false;
    if (!conn->closed) {
        if (!conn->in.len) xBufferPoolRelease(&conn->net->buffers, &conn->in);
        if (ok) pump(h2);
        if (ok && conn->readable && !conn->closed) on_readable(conn);
    }
    xConnRelease(conn);
    return true;
}

static const char *stream_invariant(const xHttp2 *h2, const xH2Stream *s, size_t *open, size_t *returned) {
    if (!s->closed && xH2TableFind(&h2->table, s->id) != s) return "an open stream is not in the table";
    if (s->send_window > XH2_MAX_WINDOW) return "a stream's send window is over 2^31-1";
    if (s->recv_window < 0 || s->recv_window > h2->stream_window)
        return "a stream's receive window is out of range";
    if (s->held_share.returned > s->body.len) return "a stream returned more than it holds";
    if (s->out_framed > s->out.len || s->ref_framed > s->ref_len) return "framed past a body's end";
    if (s->id > h2->highest_id) return "a stream above the highest id";
    *open += !s->closed;
    *returned += s->held_share.returned;
    return NULL;
}

const char *xHttp2BrokenInvariant(const xConn *conn) {
    if (conn->proto != &h2_protocol) return NULL;
    const xHttp2 *h2 = conn->proto_state;
    size_t open = 0, returned = 0;
    for (const xH2Stream *s = h2->streams; s; s = s->next) {
        const char *broken = stream_invariant(h2, s, &open, &returned);
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
