/* connection.c — HTTP/3 on a QUIC connection (connection.h): streams typed
 * and read, requests decoded, checked and dispatched as exchanges, and the
 * exchange ops that frame a response as HEADERS and DATA on its stream.
 *
 * Flow control is QUIC's: every byte a stream delivers is given back as
 * credit once it is read, except a streaming route's body, whose bytes are
 * credited only as its reader takes them, so a reader that pauses holds the
 * client back. A whole body in memory is queued by reference and released
 * once acknowledged (a small one is copied into its head's write, and one
 * the handler asked to copy is referred to all the same when it is the
 * request's own body, an echo); a file is read a piece at a time as
 * acknowledgments make room; streamed pieces are copied. */
#include "xhttp/http3/connection.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "xhttp/core/exchange.h"
#include "xhttp/core/finished.h"
#include "xhttp/core/tokens.h"
#include "xhttp/http2/request.h"
#include "xhttp/http3/frame.h"
#include "xhttp/http3/qpack.h"

/* Our SETTINGS: the peer's encoder may use a dynamic table this large, but
 * may not block a stream on it, so a request never waits for its fields. */
#define XH3_QPACK_CAPACITY 4096
/* The most of the peer's table our encoder uses (for server and date, and the
 * dates of the seconds whose sections are not yet acknowledged); 0: static only. */
#define XH3_QPACK_ENCODER_CAPACITY 1024
/* The largest SETTINGS (or other control frame) payload kept whole. */
#define XH3_MAX_FRAME_WHOLE (16u << 10)
/* A HEADERS payload may exceed the field section it encodes by this much
 * (prefixes, literals' lengths); past it, the section could only be over
 * max_header_size, so the frame is refused as it arrives (H3_EXCESSIVE_LOAD)
 * instead of being held whole: a stream holds at most this much unread. */
#define XH3_HEADERS_SLACK 4096
/* The pseudo-fields a request may carry beside max_headers fields. */
#define XH3_PSEUDO_FIELDS 5
/* Response bytes queued on a stream and not yet acknowledged beyond which
 * a file is not read further until acknowledgments come. */
#define XH3_FILE_AHEAD (256u << 10)
#define XH3_FILE_PIECE (16u << 10)
/* A request's fields of up to this many bytes are kept in its stream's own
 * memory, not an allocation of their own. */
#define XH3_HEAD_ROOM 128
/* A response body below this is copied beside its head rather than referred
 * to (one piece of output for QUIC, not two). */
#define XH3_COPY_BELOW 256
/* The most room a request's declared length makes for its body at once. */
#define XH3_BODY_RESERVE (64u << 10)
#if defined(__SANITIZE_ADDRESS__)
#define XH3_SPARE_STREAMS 0 /* ASan sees a stream used after its end only if it is freed */
#else
/* Ended request streams a connection keeps for its next requests, as many
 * as a client has in flight: malloc's per-thread cache holds far fewer, so
 * with a hundred streams a turn each took its bins and gave back. */
#define XH3_SPARE_STREAMS 128
#endif

typedef struct xH3Conn xH3Conn;
typedef struct xH3Stream xH3Stream;

/* The last response head encoded whole (the HEADERS payload: prefix,
 * :status, server and date, the handler's lines, content-length) with the
 * server and date encoding of epoch: a response of the same status, lines
 * and length while that encoding holds is the same bytes, copied, as a
 * route's answers mostly are. */
typedef struct xH3HeadMemo {
    uint64_t epoch; /* xH3Conn.fixed_epoch when made; 0: none */
    int status;
    bool with_length;
    uint64_t length;
    uint8_t lines_len, len;
    char lines[128]; /* the handler's lines as given, before their names were folded */
    uint8_t bytes[192];
} xH3HeadMemo;

/* A request's head as its exchange takes it: the fields, what the request
 * check made of them (views into them), and the target split at its '?'. */
typedef struct xH3Head {
    const xHpackField *fields;
    size_t count;
    xH2RequestHead checked;
    xStr path, query;
    bool has_host; /* a host field beside :authority */
    /* A shared head's: the request's fields as handlers see them (the regular
     * ones, host from :authority, an extended CONNECT's :protocol), which its
     * exchanges refer to instead of each making the list. NULL otherwise. */
    const xHttpField *list;
    size_t list_count;
} xH3Head;

/* One head for every request stream whose field section is QPACK's kept
 * section again (xQpackSection.remembered: a client's streams of one request
 * bring the same bytes, whether they refer to the dynamic table or not), so
 * such a stream decodes, checks and copies nothing, and is routed as the
 * first was. Its fields and strings follow it in one allocation; it goes when
 * the last stream that holds it has gone and the connection has moved on to
 * another section. (HTTP/2's xH2SharedHead is the same idea.) */
typedef struct xH3SharedHead {
    size_t refs;      /* the streams that hold it, and the connection while it is h3->shared */
    uint64_t section; /* the kept section's number */
    xH3Head head;
    xHttpKeptRoute route; /* where its first stream was routed, for the rest */
} xH3SharedHead;

/* What a stream of the peer's carries. */
typedef enum xH3Kind {
    XH3_KIND_UNTYPED, /* a unidirectional stream before its type */
    XH3_KIND_REQUEST,
    XH3_KIND_CONTROL,
    XH3_KIND_ENCODER, /* the peer's QPACK encoder stream: it fills our decoder's table */
    XH3_KIND_DECODER, /* the peer's QPACK decoder stream */
    XH3_KIND_IGNORED, /* an unknown type (RFC 9114 §6.2): read and dropped */
} xH3Kind;

/* Where a request stream is in its frames (RFC 9114 §4.1). */
typedef enum xH3Phase {
    XH3_PHASE_HEAD,     /* awaiting HEADERS */
    XH3_PHASE_BODY,     /* DATA, or trailers */
    XH3_PHASE_TRAILERS, /* after the trailers: nothing more */
    XH3_PHASE_REFUSED,  /* answered early (413, 431, 400): the rest is dropped */
} xH3Phase;

struct xH3Stream {
    xH3Conn *h3;
    xQuicStream *qs;
    xH3Kind kind;
    xH3Phase phase;
    xH3FrameReader reader;
    xBuffer in;   /* bytes delivered and left in a frame not yet whole */
    bool reading; /* frames are being read: some of what came may not be yet */
    bool fin;     /* the peer's side ended */
    bool gone;    /* the QUIC stream closed */
    bool dispatched;
    bool streams_body;
    bool tunnel; /* an extended CONNECT (RFC 9220): its DATA is the tunnel's, both ways */
    xHttpExchange *ex;
    char *head;             /* the request's fields, copied out of the frame: head_room, or allocated */
    xH3SharedHead *shared;  /* or the head it shares: head is NULL then */
    xBuffer body;           /* a whole body, or what a streaming reader has not taken */
    size_t body_uncredited; /* of body: bytes the peer has not had credit back for */
    int64_t content_length;
    uint64_t body_seen;
    /* The response. */
    bool head_written;
    struct {
        int fd;
        off_t offset;
        size_t left;
        void (*release)(void *);
        void *arg;
    } file;                 /* fd -1: none */
    xH3Stream *next, *prev; /* h3->streams */
    char head_room[];       /* a request stream's: XH3_HEAD_ROOM bytes */
};

struct xH3Conn {
    xQuicConn *qc;
    xHttpContext *ctx;
    xQuicStream *control, *encoder_out, *decoder_out;
    bool peer_control, peer_encoder, peer_decoder;
    xQpackDecoder qpack;
    xQpackEncoder qpack_out; /* static-only until the peer's SETTINGS allow a table */
    xH3Settings peer;
    bool closed;   /* the QUIC connection is gone */
    bool draining; /* GOAWAY sent: requests past goaway_id are refused */
    int64_t goaway_id;
    int64_t next_request_id; /* past the highest request stream seen */
    xH3Stream *streams;
    size_t answered;  /* request streams answered in full, let go of, whose QUIC streams are open */
    xH3Stream *spare; /* ended request streams, linked by next, for the next ones */
    size_t spare_count;
    xHpackField *fields;    /* room for a field section's fields, max_headers + pseudo-fields */
    xH3SharedHead *shared;  /* the head of the section QPACK keeps, or NULL */
    uint64_t last_section;  /* the number of the last request section decoded (0: not kept) */
    char *scratch;          /* and for its decoded strings: max_header_size bytes */
    xTimer timer;           /* a request's head or body that stops arriving */
    uint64_t last_input_ms; /* loop time of the last request bytes */
    /* The handler's lines use the static table only, so the same lines always
     * encode the same: they are copied from the last encoding when they match.
     * server with date use the dynamic table too, so their encoding holds while
     * the second and the table (qpack_out.version) are the same. */
    xHpackLinesMemo lines;
    uint8_t fixed[XQPACK_FIELD_BOUND(6, sizeof(((xHttpOwnAnswers *)0)->server_line)) +
                  XQPACK_FIELD_BOUND(4, XHTTP_DATE_LEN)];
    uint8_t fixed_len; /* 0: not yet encoded */
    time_t fixed_second;
    uint64_t fixed_version, fixed_required, fixed_lowest;
    uint64_t fixed_epoch; /* counts fixed's encodings */
    xH3HeadMemo head_memo;
    /* The last content-length encoded: a route's answers are often all of
     * one size. */
    uint8_t length_coded[24]; /* its index byte, a length byte, up to 20 digits */
    uint8_t length_coded_len; /* 0: none yet */
    uint64_t length_of_coded;
};

static const xHttpExchangeOps h3_ops;

/* What a request stream's QUIC stream points to once its request was read
 * whole and its response queued whole (answer_settled): nothing is left to
 * do for it but to count its close, so its xH3Stream went at once, while in
 * the cache, instead of a round trip later with the acknowledgment. */
static const char answered_tag;
#define XH3_ANSWERED ((void *)&answered_tag)

/* ---- Connection-level ---- */

static void conn_error(xH3Conn *h3, uint64_t code) { xQuicConnClose(h3->qc, code, NULL); }

/* What the connection waits for from the client: the longest a request may
 * go without bytes, by the settings for a head or a whole body not yet
 * complete; 0: nothing (a streaming body's reader sets its own pace). */
static uint32_t input_timeout(const xH3Conn *h3) {
    const xHttpServerConf *conf = h3->ctx->conf;
    uint32_t ms = 0;
    for (const xH3Stream *s = h3->streams; s; s = s->next) {
        if (s->kind != XH3_KIND_REQUEST || s->fin) continue;
        if (s->phase == XH3_PHASE_HEAD) return conf->header_timeout_ms;
        if (s->phase == XH3_PHASE_BODY && !s->dispatched) ms = conf->body_timeout_ms;
    }
    return ms;
}

/* The header and body timeouts run from the last request bytes on the
 * connection: a client that stops sending a request mid-way is closed with
 * H3_REQUEST_INCOMPLETE. The timer is armed by input and looks at the
 * streams only when it fires. */
static void on_input_timer(xEventLoop *loop, xTimer *timer, void *arg) {
    xH3Conn *h3 = arg;
    uint32_t limit = input_timeout(h3);
    if (!limit || h3->closed) return; /* armed again by the next input */
    uint64_t idle = xEventLoopNowMs(loop) - h3->last_input_ms;
    if (idle >= limit)
        conn_error(h3, XH3_REQUEST_INCOMPLETE);
    else
        xTimerStart(loop, &h3->timer, limit - idle);
}

static void note_input(xH3Conn *h3) {
    xEventLoop *loop = h3->ctx->net.loop;
    h3->last_input_ms = xEventLoopNowMs(loop);
    const xHttpServerConf *conf = h3->ctx->conf;
    uint32_t first =
        conf->header_timeout_ms < conf->body_timeout_ms ? conf->header_timeout_ms : conf->body_timeout_ms;
    if (!xTimerActive(&h3->timer)) xTimerStart(loop, &h3->timer, first); /* the fire sees which applies */
}

static void shared_head_release(xH3SharedHead *shared) {
    if (shared && !--shared->refs) free(shared);
}

static void maybe_free_conn(xH3Conn *h3) {
    if (!h3->closed || h3->streams) return;
    shared_head_release(h3->shared);
    while (h3->spare) {
        xH3Stream *s = h3->spare;
        h3->spare = s->next;
        free(s);
    }
    xQpackDecoderFree(&h3->qpack);
    xQpackEncoderFree(&h3->qpack_out);
    free(h3->fields);
    free(h3->scratch);
    xQuicConnRelease(h3->qc);
    free(h3);
}

/* Sends the decoder stream instructions QPACK queued over the event (the
 * Section Acknowledgments of every request it read, an Insert Count
 * Increment): one write, not one per stream. */
static void on_settle(xQuicConn *qc) {
    xH3Conn *h3 = xQuicConnApp(qc);
    if (!h3) return;
    xStr out = xQpackDecoderTakeOutput(&h3->qpack);
    if (out.len && h3->decoder_out) xQuicStreamWrite(h3->decoder_out, out.data, out.len, false, NULL, NULL);
    out = xQpackEncoderTakeOutput(&h3->qpack_out); /* the inserts the responses made */
    if (out.len && h3->encoder_out) xQuicStreamWrite(h3->encoder_out, out.data, out.len, false, NULL, NULL);
}

static bool on_open(xQuicConn *qc) {
    xH3Conn *h3 = calloc(1, sizeof *h3);
    if (!h3) return false;
    h3->qc = qc;
    h3->ctx = xQuicEndpointArg(xQuicConnEndpoint(qc));
    xH3SettingsDefaults(&h3->peer);
    xTimerInit(&h3->timer, on_input_timer, h3);
    const xHttpServerConf *conf = h3->ctx->conf;
    h3->fields = malloc((conf->max_headers + XH3_PSEUDO_FIELDS) * sizeof *h3->fields);
    h3->scratch = malloc(conf->max_header_size + 1);
    if (!h3->fields || !h3->scratch || xQpackDecoderInit(&h3->qpack, XH3_QPACK_CAPACITY, 0) != 0) {
        free(h3->fields);
        free(h3->scratch);
        free(h3);
        return false;
    }
    xQuicConnRetain(qc);
    xQuicConnSetApp(qc, h3);
    /* Our control stream with SETTINGS, and QPACK's two (RFC 9204 §4.2). */
    uint8_t buf[1 + XH3_SETTINGS_FRAME_MAX];
    xH3Settings ours;
    xH3SettingsDefaults(&ours);
    ours.qpack_max_table_capacity = XH3_QPACK_CAPACITY;
    ours.max_field_section_size = h3->ctx->conf->max_header_size;
    ours.enable_connect_protocol = true; /* RFC 9220: WebSocket routes answer extended CONNECTs */
    buf[0] = 0x00;
    uint8_t *end = xH3SettingsWrite(buf + 1, &ours);
    static const uint8_t encoder_type = 0x02, decoder_type = 0x03;
    h3->control = xQuicOpenUni(qc);
    xQuicStream *encoder = h3->encoder_out = xQuicOpenUni(qc);
    h3->decoder_out = xQuicOpenUni(qc);
    if (!h3->control || !encoder || !h3->decoder_out) {
        conn_error(h3, XH3_INTERNAL_ERROR);
        return true; /* closes through on_close */
    }
    xQuicStreamWrite(h3->control, buf, (size_t)(end - buf), false, NULL, NULL);
    xQuicStreamWrite(encoder, &encoder_type, 1, false, NULL, NULL);
    xQuicStreamWrite(h3->decoder_out, &decoder_type, 1, false, NULL, NULL);
    return true;
}

static void on_close(xQuicConn *qc) {
    xH3Conn *h3 = xQuicConnApp(qc);
    if (!h3) return;
    h3->closed = true;
    xTimerStop(h3->ctx->net.loop, &h3->timer);
    maybe_free_conn(h3);
}

/* Closes the connection once a draining one has no request left. */
static void drain_done(xH3Conn *h3) {
    if (!h3->draining || h3->closed || h3->answered) return;
    for (xH3Stream *s = h3->streams; s; s = s->next)
        if (s->kind == XH3_KIND_REQUEST) return;
    conn_error(h3, XH3_NO_ERROR);
}

/* A tunnel never finishes by itself: on a graceful stop its holder ends it
 * its own way (a WebSocket with its close handshake), and the connection
 * closes once the last one has. */
static void stop_tunnels(xH3Conn *h3) {
    xH3Stream *next;
    for (xH3Stream *s = h3->streams; s; s = next) {
        next = s->next; /* s may end, and go, in its holder's hands */
        xHttpExchange *ex = s->ex;
        if (s->tunnel && s->dispatched && !ex->res.ended && ex->tunnel.stopping)
            ex->tunnel.stopping(ex, ex->tunnel.arg);
    }
}

/* RFC 9114 §5.2: GOAWAY names the first request stream not served. */
static void on_drain(xQuicConn *qc) {
    xH3Conn *h3 = xQuicConnApp(qc);
    if (!h3 || h3->draining) return;
    h3->draining = true;
    h3->goaway_id = h3->next_request_id;
    uint8_t buf[XH3_FRAME_HEADER_MAX + XH3_VARINT_MAX_SIZE];
    uint8_t *end = xH3FrameWriteId(buf, XH3_FRAME_GOAWAY, (uint64_t)h3->goaway_id);
    if (h3->control) xQuicStreamWrite(h3->control, buf, (size_t)(end - buf), false, NULL, NULL);
    stop_tunnels(h3);
    drain_done(h3);
}

/* ---- Streams ---- */

static xH3Stream *stream_new(xH3Conn *h3, xQuicStream *qs, xH3Kind kind) {
    xH3Stream *s;
    if (kind == XH3_KIND_REQUEST && h3->spare) { /* a request stream's size, head room and all */
        s = h3->spare;
        h3->spare = s->next;
        h3->spare_count--;
    } else if (!(s = malloc(sizeof *s + (kind == XH3_KIND_REQUEST ? XH3_HEAD_ROOM : 0)))) {
        return NULL;
    }
    *s = (xH3Stream){.h3 = h3, .qs = qs, .kind = kind, .file.fd = -1, .content_length = -1};
    if (kind == XH3_KIND_REQUEST)
        xH3FrameReaderInit(&s->reader, XH3_STREAM_REQUEST,
                           h3->ctx->conf->max_header_size + XH3_HEADERS_SLACK);
    s->next = h3->streams;
    if (h3->streams) h3->streams->prev = s;
    h3->streams = s;
    xQuicStreamSetApp(qs, s);
    return s;
}

static void file_release(xH3Stream *s) {
    if (s->file.fd < 0) return;
    s->file.fd = -1;
    if (s->file.release) s->file.release(s->file.arg);
}

static void stream_free(xH3Stream *s) {
    xH3Conn *h3 = s->h3;
    if (s->qs) xQuicStreamSetApp(s->qs, NULL);
    file_release(s);
    if (s->ex) xHttpExchangeRelease(h3->ctx, s->ex);
    xBufferFree(&s->in);
    xBufferFree(&s->body);
    if (s->head && s->head != s->head_room) free(s->head);
    shared_head_release(s->shared);
    if (s->prev)
        s->prev->next = s->next;
    else
        h3->streams = s->next;
    if (s->next) s->next->prev = s->prev;
    bool held = s->dispatched;
    if (s->kind == XH3_KIND_REQUEST && (int)h3->spare_count < XH3_SPARE_STREAMS) { /* int: 0 under ASan */
        s->next = h3->spare;
        h3->spare = s;
        h3->spare_count++;
    } else {
        free(s);
    }
    if (held) xQuicConnRelease(h3->qc);
    drain_done(h3);
    maybe_free_conn(h3);
}

/* The stream is done with when its QUIC stream is gone and no handler
 * holds its exchange. */
static void stream_settle(xH3Stream *s) {
    if (!s->gone) return;
    if (!s->dispatched || !s->ex || s->ex->res.ended || xHttpExchangeAbort(s->ex)) stream_free(s);
}

/* Gives the exchange back to the worker's pool as soon as nothing needs it
 * (the response ended and all of it queued: no file still being read, not
 * a tunnel), before QUIC has the response acknowledged and the stream
 * closes, a round trip later: the next request takes it while its memory is
 * still in the cache. (HTTP/2 lets go of it as the response ends too.) */
static void let_go_of_exchange(xH3Stream *s) {
    if (!s->ex || !s->ex->res.ended || s->file.fd >= 0 || s->tunnel) return;
    xHttpExchangeRelease(s->h3->ctx, s->ex);
    s->ex = NULL; /* answered: what else comes of the request is dropped */
}

/* Abandons a request stream: RESET_STREAM and STOP_SENDING with code. */
static void stream_error(xH3Stream *s, uint64_t code) {
    s->phase = XH3_PHASE_REFUSED;
    xQuicStreamReset(s->qs, code);
}

/* ---- The response ---- */

static bool response_has_body(const xHttpExchange *ex) {
    return xHttpStatusHasBody(ex->res.status) && !xStrEqualsC(ex->req.method, "HEAD");
}

/* Writes a response head's section prefix, :status, server (unless the handler
 * set its own) and date at p. server and date are encoded through the dynamic
 * table once per second and table version, and copied while both hold. */
static uint8_t *begin_response(xH3Stream *s, uint8_t *p, int status, const xEventLoop *loop, bool server) {
    xH3Conn *h3 = s->h3;
    xQpackEncoder *e = &h3->qpack_out;
    uint64_t stream_id = (uint64_t)xQuicStreamId(s->qs), required, lowest;
    xStr names[2] = {{"server", 6}, {"date", 4}};
    xStr values[2] = {h3->ctx->answers->server_name, {xHttpDate(&h3->ctx->date, loop), XHTTP_DATE_LEN}};
    if (!server || !values[0].len) {
        uint8_t dates[XQPACK_FIELD_BOUND(4, XHTTP_DATE_LEN)];
        uint8_t *end =
            xQpackEncodeFieldsWith(e, stream_id, dates, &names[1], &values[1], 1, &required, &lowest);
        p = xQpackEncodeStatus(xQpackEncodePrefix(e, p, required), status);
        memcpy(p, dates, (size_t)(end - dates));
        return p + (end - dates);
    }
    time_t now = xEventLoopWallSeconds(loop);
    if (!h3->fixed_len || now != h3->fixed_second || e->version != h3->fixed_version ||
        !xQpackEncoderNoteSection(e, stream_id, h3->fixed_required, h3->fixed_lowest)) {
        uint8_t *end = xQpackEncodeFieldsWith(e, stream_id, h3->fixed, names, values, 2, &required, &lowest);
        h3->fixed_len = (uint8_t)(end - h3->fixed);
        h3->fixed_second = now;
        h3->fixed_version = e->version;
        h3->fixed_required = required;
        h3->fixed_lowest = lowest;
        h3->fixed_epoch++;
    }
    p = xQpackEncodeStatus(xQpackEncodePrefix(e, p, h3->fixed_required), status);
    memcpy(p, h3->fixed, h3->fixed_len);
    return p + h3->fixed_len;
}

/* The response head of s again (xH3HeadMemo) at p, noted as a section sent
 * (it may refer to server and date in the dynamic table); NULL when it is
 * not the memo's. */
static uint8_t *repeat_head(xH3Stream *s, uint8_t *p, const xBuffer *lines, bool with_length,
                            uint64_t length) {
    xH3Conn *h3 = s->h3;
    const xH3HeadMemo *m = &h3->head_memo;
    const xHttpExchange *ex = s->ex;
    if (!m->epoch || m->epoch != h3->fixed_epoch || ex->res.status != m->status || ex->res.own_server ||
        with_length != m->with_length || (with_length && length != m->length) || lines->len != m->lines_len ||
        h3->qpack_out.version != h3->fixed_version ||
        xEventLoopWallSeconds(ex->req.loop) != h3->fixed_second ||
        (lines->len && memcmp(lines->data, m->lines, lines->len) != 0) ||
        !xQpackEncoderNoteSection(&h3->qpack_out, (uint64_t)xQuicStreamId(s->qs), h3->fixed_required,
                                  h3->fixed_lowest))
        return NULL;
    memcpy(p, m->bytes, m->len);
    return p + m->len;
}

/* Encodes the response head (:status, server, date, the handler's lines,
 * content-length when with_length) or the trailers at start; returns the
 * end. A head is kept for the next (xH3HeadMemo) where it fits. */
static uint8_t *encode_head(xH3Stream *s, uint8_t *start, bool trailers, xBuffer *lines, bool with_length,
                            uint64_t length) {
    xHttpExchange *ex = s->ex;
    xH3Conn *h3 = s->h3;
    xH3HeadMemo *memo = &h3->head_memo;
    bool remember = false;
    uint8_t *p;
    if (trailers) {
        p = xQpackEncodeBegin(start);
    } else {
        /* The lines kept as given: encoding folds their names where they lie. */
        memo->epoch = 0;
        remember =
            !ex->res.own_server && h3->ctx->answers->server_name.len && lines->len <= sizeof memo->lines;
        if (remember && lines->len) memcpy(memo->lines, lines->data, lines->len);
        p = begin_response(s, start, ex->res.status, ex->req.loop, !ex->res.own_server);
    }
    if (lines->len) p = xHpackEncodeLinesWith(&h3->lines, p, lines->data, lines->len, xQpackEncodeField);
    if (with_length && h3->length_coded_len && length == h3->length_of_coded) {
        memcpy(p, h3->length_coded, h3->length_coded_len);
        p += h3->length_coded_len;
    } else if (with_length) {
        uint8_t *from = p;
        p = xQpackEncodeContentLength(p, length);
        if ((size_t)(p - from) <= sizeof h3->length_coded) {
            memcpy(h3->length_coded, from, (size_t)(p - from));
            h3->length_coded_len = (uint8_t)(p - from);
            h3->length_of_coded = length;
        }
    }
    if (remember && (size_t)(p - start) <= sizeof memo->bytes) {
        memo->epoch = h3->fixed_epoch;
        memo->status = ex->res.status;
        memo->with_length = with_length;
        memo->length = length;
        memo->lines_len = (uint8_t)lines->len;
        memo->len = (uint8_t)(p - start);
        memcpy(memo->bytes, start, memo->len);
    }
    return p;
}

/* A HEADERS frame's room on the stack; a larger one is allocated. */
#define XH3_HEAD_STACK 1024

/* Queues a HEADERS frame on s: the response head (:status, server, date,
 * the handler's fields, content-length when with_length) or the trailers;
 * a small body given goes after it as DATA, in the same write.
 * The handler's "Name: value\r\n" lines have their names folded to lower
 * case where they lie (RFC 9114 §4.2), as HTTP/2 does. */
static xErrno write_headers(xH3Stream *s, bool trailers, bool with_length, uint64_t length, bool fin,
                            xStr body) {
    xHttpExchange *ex = s->ex;
    xH3Conn *h3 = s->h3;
    xBuffer *lines = trailers ? &ex->res.trailers : &ex->res.headers;
    size_t bound = XH3_FRAME_HEADER_MAX + XQPACK_PREFIX_MAX + 8 + sizeof h3->fixed +
                   XQPACK_FIELD_BOUND(14, XHTTP_DECIMAL_MAX) + lines->len * 4 + XH3_FRAME_HEADER_MAX +
                   body.len;
    uint8_t stack[XH3_HEAD_STACK];
    uint8_t *buf = bound <= sizeof stack ? stack : malloc(bound);
    if (!buf) return XERR_NOMEM;
    uint8_t *start = buf + XH3_FRAME_HEADER_MAX;
    uint8_t *p = trailers ? NULL : repeat_head(s, start, lines, with_length, length);
    if (!p) p = encode_head(s, start, trailers, lines, with_length, length);
    uint8_t header[XH3_FRAME_HEADER_MAX];
    size_t header_len =
        (size_t)(xH3FrameWriteHeader(header, XH3_FRAME_HEADERS, (uint64_t)(p - start)) - header);
    memcpy(start - header_len, header, header_len);
    if (body.len) {
        p = xH3FrameWriteHeader(p, XH3_FRAME_DATA, body.len);
        memcpy(p, body.data, body.len);
        p += body.len;
    }
    xErrno err =
        xQuicStreamWrite(s->qs, start - header_len, (size_t)(p - start) + header_len, fin, NULL, NULL);
    if (buf != stack) free(buf);
    return err;
}

static xErrno write_data_header(xH3Stream *s, uint64_t len) {
    uint8_t header[XH3_FRAME_HEADER_MAX];
    size_t n = (size_t)(xH3FrameWriteHeader(header, XH3_FRAME_DATA, len) - header);
    return xQuicStreamWrite(s->qs, header, n, false, NULL, NULL);
}

/* Ends the response's stream: the trailers, if any, carry the FIN. */
static void finish_output(xH3Stream *s) {
    if (s->ex->res.trailers.len)
        write_headers(s, true, false, 0, true, (xStr){NULL, 0});
    else
        xQuicStreamWrite(s->qs, NULL, 0, true, NULL, NULL);
}

/* Reads the file ahead of the acknowledgments, a piece at a time; the last
 * piece ends the stream. */
static void pump_file(xH3Stream *s) {
    while (s->file.fd >= 0 && s->file.left && xQuicStreamUnacked(s->qs) < XH3_FILE_AHEAD) {
        size_t n = s->file.left < XH3_FILE_PIECE ? s->file.left : XH3_FILE_PIECE;
        char *piece = malloc(n);
        ssize_t got = piece ? pread(s->file.fd, piece, n, s->file.offset) : -1;
        if (got <= 0) {
            /* The file ended early or failed: the client was promised more. */
            free(piece);
            file_release(s);
            xQuicStreamReset(s->qs, XH3_INTERNAL_ERROR);
            return;
        }
        s->file.offset += got;
        s->file.left -= (size_t)got;
        if (xQuicStreamWrite(s->qs, piece, (size_t)got, false, free, piece) != XOK) {
            file_release(s);
            return;
        }
    }
    if (s->file.fd >= 0 && !s->file.left) {
        file_release(s);
        finish_output(s);
        let_go_of_exchange(s);
    }
}

/* A tunnel's bytes written and not yet acknowledged: QUIC keeps them until
 * then, so they are what its holder's backpressure counts. */
static size_t tunnel_pending(const xHttpExchange *ex) {
    const xH3Stream *s = ex->proto;
    return s->qs ? xQuicStreamUnacked(s->qs) : 0;
}

static void on_stream_acked(xQuicConn *qc, xQuicStream *qs) {
    xH3Stream *s = xQuicStreamApp(qs);
    if (s == XH3_ANSWERED) return;
    if (s && s->file.fd >= 0) pump_file(s);
    /* A tunnel's holder that waits for its output to go may write again. */
    xHttpExchange *ex = s && s->tunnel && s->dispatched ? s->ex : NULL;
    if (ex && !ex->res.ended && ex->tunnel.drained && !xQuicStreamUnacked(qs)) {
        void (*drained)(xHttpExchange *, void *) = ex->tunnel.drained;
        ex->tunnel.drained = NULL;
        drained(ex, ex->tunnel.arg);
    }
}

/* The handler is done with the exchange. */
static void end_exchange(xH3Stream *s) {
    s->ex->res.ended = true;
    /* A streaming body nobody will read: the rest is dropped. */
    if (s->streams_body && !s->gone && !s->fin) xQuicStreamStopReading(s->qs, XH3_NO_ERROR);
    if (s->body_uncredited && !s->gone) xQuicStreamConsumed(s->qs, s->body_uncredited);
    s->body_uncredited = 0;
    let_go_of_exchange(s);
    stream_settle(s);
}

static bool stream_writes(const xH3Stream *s) { return !s->gone && !s->ex->res.aborted; }

/* True when [body, body + len) lies in s's whole request body, all of it
 * come: an echo. The body stays until the stream is freed, after the QUIC
 * stream closed, so a response may refer to it instead of copying. */
static bool in_request_body(const xH3Stream *s, const void *body, size_t len) {
    const char *at = body, *mine = s->body.data;
    return mine && s->fin && !s->streams_body && !s->tunnel && at >= mine && len <= s->body.len &&
           (size_t)(at - mine) <= s->body.len - len;
}

/* The release of a body whose owner keeps it (static bytes, or the
 * request's body, which the stream frees). */
static void keep_bytes(void *arg) { (void)arg; }

/* A whole body: by reference unless copy, or from a file. */
static xErrno send_whole(xHttpExchange *ex, const void *body, size_t len, bool copy, void (*release)(void *),
                         void *arg, int fd, off_t offset) {
    xH3Stream *s = ex->proto;
    xErrno err = stream_writes(s) ? XOK : XERR_CLOSED;
    bool with_body = len && response_has_body(ex);
    /* A small body from memory is copied into the head's write: one piece
     * of output, its end with it unless trailers follow. */
    bool beside = with_body && fd < 0 && len < XH3_COPY_BELOW;
    ex->res.head_sent = true;
    if (err == XOK) {
        bool fin = (!with_body || beside) && !ex->res.trailers.len;
        err = write_headers(s, false, xHttpStatusHasBody(ex->res.status), len, fin,
                            beside ? (xStr){body, len} : (xStr){NULL, 0});
        s->head_written = true;
        if ((!with_body || beside) && !fin) finish_output(s);
    }
    if (err == XOK && with_body && !beside) {
        write_data_header(s, len);
        if (fd >= 0) {
            s->file.fd = fd, s->file.offset = offset, s->file.left = len;
            s->file.release = release, s->file.arg = arg;
            release = NULL;
            pump_file(s);
        } else {
            /* Static bytes (a reference without release) and the request's
             * own body outlive the QUIC stream's use of them: referred to. */
            if (!release && (!copy || in_request_body(s, body, len))) {
                copy = false;
                release = keep_bytes;
            }
            err = xQuicStreamWrite(s->qs, body, len, false, copy ? NULL : release, arg);
            if (!copy) release = NULL; /* the QUIC stream's now */
            finish_output(s);
        }
    }
    if (release) release(arg);
    end_exchange(s);
    return err;
}

static xErrno h3_send(xHttpExchange *ex, const void *body, size_t len, bool copy, void (*release)(void *),
                      void *release_arg) {
    return send_whole(ex, body, len, copy, release, release_arg, -1, 0);
}

static xErrno h3_send_file(xHttpExchange *ex, int fd, off_t offset, size_t len, void (*release)(void *),
                           void *release_arg) {
    return send_whole(ex, NULL, len, false, release, release_arg, fd, offset);
}

static xErrno h3_write(xHttpExchange *ex, const void *data, size_t len) {
    xH3Stream *s = ex->proto;
    if (!stream_writes(s)) return XERR_CLOSED;
    xErrno err = XOK;
    if (!ex->res.head_sent) {
        ex->res.head_sent = true;
        err = write_headers(s, false, false, 0, false, (xStr){NULL, 0});
        s->head_written = true;
    }
    if (err == XOK && len && response_has_body(ex)) {
        err = write_data_header(s, len);
        if (err == XOK) err = xQuicStreamWrite(s->qs, data, len, false, NULL, NULL);
    }
    return err;
}

static xErrno h3_end(xHttpExchange *ex) {
    xH3Stream *s = ex->proto;
    xErrno err = XOK;
    if (stream_writes(s)) {
        if (!ex->res.head_sent) {
            ex->res.head_sent = true;
            err = write_headers(s, false, false, 0, !ex->res.trailers.len, (xStr){NULL, 0});
            if (ex->res.trailers.len) finish_output(s);
        } else {
            finish_output(s);
        }
    }
    end_exchange(s);
    return err;
}

/* Hands a streaming reader what has come, crediting it back to the peer as
 * the reader takes it. */
static void deliver_body(xH3Stream *s) {
    xHttpExchange *ex = s->ex;
    if (!s->streams_body || !ex || ex->body_ended || ex->res.ended) return;
    bool end = s->fin && !s->in.len && !s->reading; /* every frame read */
    size_t len = s->body.len;
    if (!xHttpExchangeWantsBody(ex) || (!len && !end)) return;
    size_t credit = s->body_uncredited;
    s->body_uncredited = 0;
    if (credit && !s->gone) xQuicStreamConsumed(s->qs, credit);
    xBuffer piece = s->body;
    s->body = (xBuffer){0};
    xHttpExchangeDeliverBody(ex, piece.data ? piece.data : "", piece.len, end);
    xBufferFree(&piece);
}

static void h3_body_wanted(xHttpExchange *ex) { deliver_body(ex->proto); }

static const xHttpExchangeOps h3_ops = {
    .send = h3_send,
    .send_file = h3_send_file,
    .write = h3_write,
    .end = h3_end,
    .body_wanted = h3_body_wanted,
};

/* ---- Requests ---- */

/* Copies the decoded fields out of the frame and scratch into one block of
 * the stream's own, so the request's views outlive the bytes they came in. */
static bool keep_fields(xH3Stream *s, xHpackField *f, size_t n) {
    size_t bytes = 0;
    /* QPACK's copy of a repeated section lays its strings out in a row, as
     * they are kept: those are taken in one copy. */
    const char *row = n ? f[0].name.data : NULL;
    bool in_a_row = true;
    for (size_t i = 0; i < n; i++) {
        in_a_row =
            in_a_row && f[i].name.data == row + bytes && f[i].value.data == row + bytes + f[i].name.len;
        bytes += f[i].name.len + f[i].value.len;
    }
    char *at = bytes < XH3_HEAD_ROOM ? s->head_room : malloc(bytes + 1);
    if (!at) return false;
    if (s->head && s->head != s->head_room) free(s->head);
    s->head = at;
    if (in_a_row && bytes) {
        memcpy(at, row, bytes);
        for (size_t i = 0; i < n; i++) {
            f[i].name.data = at + (f[i].name.data - row);
            f[i].value.data = at + (f[i].value.data - row);
        }
        return true;
    }
    for (size_t i = 0; i < n; i++) {
        if (f[i].name.len) memcpy(at, f[i].name.data, f[i].name.len);
        f[i].name.data = at, at += f[i].name.len;
        if (f[i].value.len) memcpy(at, f[i].value.data, f[i].value.len);
        f[i].value.data = at, at += f[i].value.len;
    }
    return true;
}

static xHttpExchange *take_exchange(xH3Stream *s) {
    xHttpContext *ctx = s->h3->ctx;
    xHttpExchange *ex = xHttpExchangeAcquire(ctx);
    if (!ex) return NULL;
    if (!xHttpExchangeReserveFields(ctx, ex)) {
        xHttpExchangeRelease(ctx, ex);
        return NULL;
    }
    s->ex = ex;
    ex->ops = &h3_ops;
    ex->proto = s;
    ex->req.conn = xQuicConnView(s->h3->qc);
    ex->req.protocol = "HTTP/3";
    return ex;
}

/* Answers a request refused before its handler, and drops the rest. */
static void refuse(xH3Stream *s, int status) {
    if (s->dispatched) { /* a streaming route's handler has it: no second answer */
        stream_error(s, XH3_REQUEST_REJECTED);
        return;
    }
    s->phase = XH3_PHASE_REFUSED;
    if (!s->ex && !take_exchange(s)) {
        stream_error(s, XH3_INTERNAL_ERROR);
        return;
    }
    s->dispatched = true;
    xQuicConnRetain(s->h3->qc);
    xQuicStreamStopReading(s->qs, XH3_NO_ERROR);
    xHttpExchangeSendStatus(s->ex, status);
}

/* Checks a request's fields (QPACK judged their syntax) into h, which views
 * them; false when malformed (RFC 9114 §4.1.2), a plain CONNECT (a TCP
 * tunnel, not served) among them. */
static bool check_head(const xHpackField *f, size_t n, xH3Head *h) {
    if (!xH2CheckHpackRequest(f, n, true, &h->checked) ||
        (xStrEqualsC(h->checked.method, "CONNECT") && !h->checked.protocol.len))
        return false;
    h->list = NULL;
    h->list_count = 0;
    h->fields = f;
    h->count = n;
    xStr target = h->checked.path;
    const char *q = memchr(target.data, '?', target.len);
    h->path = (xStr){target.data, q ? (size_t)(q - target.data) : target.len};
    h->query = q ? (xStr){q + 1, target.len - h->path.len - 1} : (xStr){"", 0};
    h->has_host = false;
    for (size_t i = 0; i < n; i++) h->has_host |= f[i].token == XHPACK_TOKEN_HOST; /* names are lower case */
    return true;
}

/* Writes the fields of h as handlers see them into out (room for cap);
 * returns how many, or SIZE_MAX when they are more than cap. */
static size_t list_fields(const xH3Head *h, xHttpField *out, size_t cap) {
    const xHpackField *f = h->fields;
    size_t count = 0;
    for (size_t i = 0; i < h->count; i++) {
        if (f[i].name.data[0] == ':') continue;
        if (count == cap) return SIZE_MAX;
        out[count++] = (xHttpField){f[i].name, f[i].value};
    }
    /* HTTP/3 carries the host in :authority; handlers look for Host. */
    if (h->checked.authority.len && !h->has_host) {
        if (count == cap) return SIZE_MAX;
        out[count++] = (xHttpField){{"host", 4}, h->checked.authority};
    }
    /* RFC 9220: an extended CONNECT's protocol reaches the handler as a
     * field, as on HTTP/2. */
    if (h->checked.protocol.len) {
        if (count == cap) return SIZE_MAX;
        out[count++] = (xHttpField){{":protocol", 9}, h->checked.protocol};
    }
    return count;
}

/* A shared copy, checked, of the fields of the section QPACK keeps (its
 * number section), which becomes the connection's (the one it held goes once
 * its streams have); NULL when out of memory or malformed (*malformed). */
static xH3SharedHead *share_head(xH3Conn *h3, const xHpackField *f, size_t n, uint64_t section,
                                 bool *malformed) {
    /* The list: the regular fields, host and :protocol, and at most max_headers
     * (more is refused, from the stream's own copy). */
    size_t bytes = 0, max = h3->ctx->conf->max_headers;
    if (max > n + 2) max = n + 2;
    for (size_t i = 0; i < n; i++) bytes += f[i].name.len + f[i].value.len;
    xH3SharedHead *shared = malloc(sizeof *shared + max * sizeof(xHttpField) + n * sizeof *f + bytes);
    if (!shared) return NULL;
    xHttpField *list = (xHttpField *)(shared + 1);
    xHpackField *fields = (xHpackField *)(list + max);
    char *at = (char *)(fields + n);
    for (size_t i = 0; i < n; i++) {
        fields[i] = f[i];
        if (f[i].name.len) memcpy(at, f[i].name.data, f[i].name.len);
        fields[i].name.data = at, at += f[i].name.len;
        if (f[i].value.len) memcpy(at, f[i].value.data, f[i].value.len);
        fields[i].value.data = at, at += f[i].value.len;
    }
    if (!check_head(fields, n, &shared->head)) {
        *malformed = true;
        free(shared);
        return NULL;
    }
    size_t count = list_fields(&shared->head, list, max);
    if (count == SIZE_MAX) { /* answered 431 from the stream's own copy */
        free(shared);
        return NULL;
    }
    shared->head.list = list;
    shared->head.list_count = count;
    shared->refs = 1;
    shared->section = section;
    shared->route = (xHttpKeptRoute){NULL, NULL, NULL};
    shared_head_release(h3->shared);
    h3->shared = shared;
    return shared;
}

static void hold_shared(xH3Stream *s, xH3SharedHead *shared, xH3Head *h) {
    shared->refs++;
    s->shared = shared;
    *h = shared->head;
}

/* Gives s the decoded fields f (remembered: QPACK's number for them, or 0),
 * checked into h: the connection's shared copy when they are the kept
 * section seen a second time in a row (made then, so a section sent once
 * costs no allocation), else a copy of s's own. Returns 0, or the stream
 * error to answer with (malformed, or out of memory). */
static uint64_t take_head(xH3Stream *s, xHpackField *f, size_t n, uint64_t remembered, xH3Head *h) {
    xH3Conn *h3 = s->h3;
    bool again = remembered && remembered == h3->last_section, malformed = false;
    h3->last_section = remembered;
    if (again) {
        xH3SharedHead *shared = share_head(h3, f, n, remembered, &malformed);
        if (malformed) return XH3_MESSAGE_ERROR;
        if (shared) {
            hold_shared(s, shared, h);
            return 0;
        }
    }
    if (!keep_fields(s, f, n)) return XH3_INTERNAL_ERROR; /* the request's views must outlive the frame */
    return check_head(f, n, h) ? 0 : XH3_MESSAGE_ERROR;
}

/* Fills the exchange from a checked head; the body comes later. A shared
 * head's list is referred to as it is (the stream holds the head until the
 * exchange has gone). */
static bool fill_request(xH3Stream *s, const xH3Head *h) {
    xHttpExchange *ex = s->ex;
    if (h->list) {
        ex->req.headers = h->list;
        ex->req.num_headers = h->list_count;
    } else {
        size_t count = list_fields(h, ex->fields, ex->fields_cap);
        if (count == SIZE_MAX) return false;
        ex->req.headers = ex->fields;
        ex->req.num_headers = count;
    }
    ex->req.method = h->checked.method;
    ex->req.path = h->path;
    ex->req.query = h->query;
    ex->req.body = (xStr){"", 0};
    s->content_length = h->checked.content_length;
    return true;
}

static void dispatch(xH3Stream *s) {
    xHttpExchange *ex = s->ex;
    s->dispatched = true;
    xQuicConnRetain(s->h3->qc); /* released with the stream, however late the response */
    if (!s->streams_body) ex->req.body = (xStr){s->body.data ? s->body.data : "", s->body.len};
    xHttpExchangeDispatch(ex);
    if (s->streams_body) deliver_body(s);
}

/* RFC 9110 §9.2.1: what a replay of cannot change anything. */
static bool method_is_safe(xStr method) {
    return xStrEqualsC(method, "GET") || xStrEqualsC(method, "HEAD") || xStrEqualsC(method, "OPTIONS") ||
           xStrEqualsC(method, "TRACE");
}

/* The request of a checked head, its fields s's own or shared: to its
 * exchange, and to its handler at once when it streams its body. */
static void begin_request(xH3Stream *s, const xH3Head *h) {
    const xHttpServerConf *conf = s->h3->ctx->conf;
    int64_t length = h->checked.content_length;
    if (!take_exchange(s)) {
        stream_error(s, XH3_INTERNAL_ERROR);
        return;
    }
    if (!fill_request(s, h)) {
        refuse(s, 431);
        return;
    }
    if (xQuicStreamEarly(s->qs) && !method_is_safe(h->checked.method)) {
        refuse(s, 425); /* in 0-RTT, which may be replayed: RFC 8470 §5.2 */
        return;
    }
    if (s->shared) xHttpExchangeRouteAsKept(s->ex, &s->shared->route);
    s->streams_body = xHttpExchangeStreams(s->ex);
    if (length > (int64_t)conf->max_body_size && !s->streams_body) {
        refuse(s, 413);
        return;
    }
    s->phase = XH3_PHASE_BODY;
    /* A whole body of a declared length has its room made at once (up to
     * XH3_BODY_RESERVE: a head alone holds no more), not doubled and copied
     * as it comes. */
    if (!s->streams_body && length > 0)
        xBufferReserve(&s->body, length < XH3_BODY_RESERVE ? (size_t)length : XH3_BODY_RESERVE);
    /* RFC 9220: an extended CONNECT is a tunnel, its DATA no body to wait
     * for: a route that does not stream answers at the head. */
    s->tunnel = h->checked.protocol.len > 0;
    if (s->tunnel) s->ex->tunnel.pending = tunnel_pending;
    if (s->streams_body || s->tunnel) dispatch(s);
}

/* A HEADERS frame: the request's head, or its trailers. */
static void on_headers(xH3Stream *s, xStr payload) {
    xH3Conn *h3 = s->h3;
    const xHttpServerConf *conf = h3->ctx->conf;
    if (s->phase == XH3_PHASE_TRAILERS) {
        conn_error(h3, XH3_FRAME_UNEXPECTED);
        return;
    }
    uint64_t id = (uint64_t)xQuicStreamId(s->qs);
    const uint8_t *in = (const uint8_t *)payload.data;
    xH3Head head;
    /* The shared head's section again, which QPACK would decode to the same
     * fields: the stream takes the shared head, and nothing is decoded. */
    if (s->phase == XH3_PHASE_HEAD && h3->shared &&
        xQpackDecodeAgain(&h3->qpack, h3->shared->section, id, in, payload.len)) {
        hold_shared(s, h3->shared, &head);
        begin_request(s, &head);
        return;
    }
    xHpackField *fields = h3->fields;
    xQpackSection sec = {.fields = fields,
                         .max_fields = conf->max_headers + XH3_PSEUDO_FIELDS,
                         .scratch = h3->scratch,
                         .scratch_size = conf->max_header_size,
                         .max_size = conf->max_header_size};
    xQpackResult r = xQpackDecodeSection(&h3->qpack, id, in, payload.len, &sec);
    uint64_t error;
    if (r != XQPACK_OK && r != XQPACK_TOO_LARGE) {
        conn_error(h3, xQpackErrorCode(r) ? xQpackErrorCode(r) : XH3_GENERAL_PROTOCOL_ERROR);
    } else if (s->phase == XH3_PHASE_BODY) {
        /* Trailers: checked, then let go (handlers read none, as on HTTP/2). */
        s->phase = XH3_PHASE_TRAILERS;
        if (r != XQPACK_OK || !xH2CheckTrailers(fields, sec.count)) stream_error(s, XH3_MESSAGE_ERROR);
    } else if (r == XQPACK_TOO_LARGE) {
        refuse(s, 431);
    } else if ((error = take_head(s, fields, sec.count, sec.remembered, &head))) {
        stream_error(s, error); /* RFC 9114 §4.1.2: malformed, or out of memory */
    } else {
        begin_request(s, &head);
    }
}

/* A piece of DATA; returns the bytes to credit back now. */
static size_t on_data(xH3Stream *s, xStr piece) {
    const xHttpServerConf *conf = s->h3->ctx->conf;
    if (s->phase == XH3_PHASE_HEAD || s->phase == XH3_PHASE_TRAILERS) {
        conn_error(s->h3, XH3_FRAME_UNEXPECTED); /* RFC 9114 §4.1 */
        return piece.len;
    }
    if (s->phase == XH3_PHASE_REFUSED) return piece.len;
    s->body_seen += piece.len;
    if (s->content_length >= 0 && s->body_seen > (uint64_t)s->content_length) {
        stream_error(s, XH3_MESSAGE_ERROR);
        return piece.len;
    }
    if (!s->streams_body && s->body_seen > conf->max_body_size) {
        refuse(s, 413);
        return piece.len;
    }
    if (s->dispatched && (!s->ex || s->ex->res.ended)) return piece.len; /* answered: dropped */
    xBufferAppend(&s->body, piece.data, piece.len);
    if (!s->streams_body) return piece.len;
    s->body_uncredited += piece.len; /* credited as the reader takes it */
    return 0;
}

/* The request stream ended: a whole request goes to its handler. */
static void on_request_end(xH3Stream *s) {
    if (s->phase == XH3_PHASE_HEAD) {
        stream_error(s, XH3_REQUEST_INCOMPLETE);
        return;
    }
    if (s->phase == XH3_PHASE_REFUSED) return;
    if (s->content_length >= 0 && s->body_seen != (uint64_t)s->content_length) {
        stream_error(s, XH3_MESSAGE_ERROR); /* RFC 9114 §4.1.2 */
        return;
    }
    if (!s->dispatched)
        dispatch(s);
    else
        deliver_body(s);
}

/* Reads the frames of in[0, len), crediting back what needs no keeping;
 * returns how many bytes were read (the rest is a frame not yet whole). */
static size_t read_frames(xH3Stream *s, const uint8_t *in, size_t len) {
    size_t at = 0, credit = 0;
    s->reading = true;
    while (at < len && s->phase != XH3_PHASE_REFUSED && !xQuicConnClosed(s->h3->qc)) {
        size_t used = 0;
        xH3Frame f;
        xH3ReadStatus st = xH3FrameRead(&s->reader, in + at, len - at, &used, &f);
        size_t start = at;
        at += used;
        if (st == XH3_READ_ERROR) {
            conn_error(s->h3, f.error);
            break;
        }
        if (st == XH3_READ_MORE) {
            credit += used;
            break;
        }
        if (st == XH3_READ_DATA) {
            size_t header = (size_t)((const uint8_t *)f.payload.data - in) - start;
            credit += header + on_data(s, f.payload);
            continue;
        }
        credit += used;
        if (f.type == XH3_FRAME_HEADERS) on_headers(s, f.payload);
        /* Others a request stream may carry are skipped by the reader. */
    }
    s->reading = false;
    if (s->phase == XH3_PHASE_REFUSED) {
        credit += len - at;
        at = len;
    }
    if (credit) xQuicStreamConsumed(s->qs, credit);
    return at;
}

/* Reads len bytes the request stream delivered: from where they lie when
 * nothing waits before them (a request in one packet is never copied), and
 * only a frame they leave unfinished is kept for the next bytes. */
static void read_request(xH3Stream *s, const uint8_t *data, size_t len) {
    if (!s->in.len) {
        size_t used = read_frames(s, data, len);
        if (used < len && xBufferAppend(&s->in, data + used, len - used) != XOK) {
            conn_error(s->h3, XH3_INTERNAL_ERROR);
            return;
        }
    } else if (xBufferAppend(&s->in, data, len) != XOK) {
        conn_error(s->h3, XH3_INTERNAL_ERROR);
        return;
    } else {
        xBufferConsume(&s->in, read_frames(s, (const uint8_t *)s->in.data, s->in.len));
    }
    if (s->fin && s->phase != XH3_PHASE_REFUSED && !xQuicConnClosed(s->h3->qc)) {
        /* RFC 9114 §7.1: a stream that ends inside a frame (its header, a
         * whole-read payload, or DATA cut short) is a connection error. */
        if (s->in.len || s->reader.state != XH3_READER_FRAME_START)
            conn_error(s->h3, XH3_FRAME_ERROR);
        else
            on_request_end(s);
    }
    if (s->dispatched && s->streams_body && !s->fin) deliver_body(s);
}

/* The peer's control stream: SETTINGS first, then GOAWAY and push frames,
 * which a server only notes. */
static size_t read_control(xH3Stream *s, const uint8_t *in, size_t len) {
    size_t at = 0;
    while (at < len) {
        size_t used = 0;
        xH3Frame f;
        xH3ReadStatus st = xH3FrameRead(&s->reader, in + at, len - at, &used, &f);
        at += used;
        if (st == XH3_READ_ERROR) {
            conn_error(s->h3, f.error);
            return len;
        }
        if (st == XH3_READ_MORE) break;
        if (st == XH3_READ_FRAME && f.type == XH3_FRAME_SETTINGS) {
            xH3Error e = xH3SettingsParse(f.payload, &s->h3->peer);
            if (e != XH3_NO_ERROR) {
                conn_error(s->h3, e);
                return len;
            }
            xQpackEncoderSetPeerCapacity(&s->h3->qpack_out, s->h3->peer.qpack_max_table_capacity,
                                         XH3_QPACK_ENCODER_CAPACITY);
        }
    }
    return at;
}

/* A unidirectional stream's type (RFC 9114 §6.2), once its first byte or
 * bytes are in; false while more are needed. */
static bool take_type(xH3Stream *s, size_t *used) {
    uint64_t type;
    size_t n = xH3VarintRead((const uint8_t *)s->in.data, s->in.len, &type);
    if (!n) return false;
    *used = n;
    xH3Conn *h3 = s->h3;
    bool *seen = type == 0x00   ? &h3->peer_control
                 : type == 0x02 ? &h3->peer_encoder
                 : type == 0x03 ? &h3->peer_decoder
                                : NULL;
    if (type == 0x01 || (seen && *seen)) {
        conn_error(h3, XH3_STREAM_CREATION_ERROR); /* a client's push stream, or a second one */
        return true;
    }
    if (!seen) {
        s->kind = XH3_KIND_IGNORED;
        xQuicStreamStopReading(s->qs, XH3_STREAM_CREATION_ERROR);
        return true;
    }
    *seen = true;
    s->kind = type == 0x00 ? XH3_KIND_CONTROL : type == 0x02 ? XH3_KIND_ENCODER : XH3_KIND_DECODER;
    if (s->kind == XH3_KIND_CONTROL) xH3FrameReaderInit(&s->reader, XH3_STREAM_CONTROL, XH3_MAX_FRAME_WHOLE);
    return true;
}

static void read_unidirectional(xH3Stream *s) {
    xH3Conn *h3 = s->h3;
    size_t used = 0, credit = 0;
    if (s->kind == XH3_KIND_UNTYPED) {
        if (!take_type(s, &used)) return;
        xBufferConsume(&s->in, used);
        credit += used;
    }
    used = 0;
    const uint8_t *in = (const uint8_t *)s->in.data;
    switch (s->kind) {
    case XH3_KIND_CONTROL: used = read_control(s, in, s->in.len); break;
    case XH3_KIND_ENCODER:
        if (xQpackDecoderReadEncoder(&h3->qpack, in, s->in.len, &used) != XQPACK_OK)
            conn_error(h3, xQpackErrorCode(XQPACK_ENCODER_STREAM_ERROR));
        break;
    case XH3_KIND_DECODER:
        if (xQpackEncoderReadDecoder(&h3->qpack_out, in, s->in.len, &used) != XQPACK_OK)
            conn_error(h3, xQpackErrorCode(XQPACK_DECODER_STREAM_ERROR));
        break;
    default: used = s->in.len; break;
    }
    xBufferConsume(&s->in, used);
    credit += used;
    if (credit) xQuicStreamConsumed(s->qs, credit);
    /* RFC 9114 §6.2.1: the control stream, and QPACK's (RFC 9204 §4.2), never end. */
    if (s->fin && s->kind != XH3_KIND_IGNORED && s->kind != XH3_KIND_UNTYPED)
        conn_error(h3, XH3_CLOSED_CRITICAL_STREAM);
}

/* Lets go of a request stream read whole (its FIN came, every frame read)
 * whose response is queued whole (the exchange given back: no file still
 * read, no tunnel): its QUIC stream is left to finish alone. Not one with a
 * body: a response may refer to it (an echo) until acknowledged. */
static void answer_settled(xH3Stream *s) {
    if (!s->fin || s->in.len || s->ex || !s->dispatched || s->gone || s->phase == XH3_PHASE_REFUSED ||
        s->body.data)
        return;
    xQuicStream *qs = s->qs;
    s->h3->answered++;
    s->qs = NULL; /* not told of it any more */
    xQuicStreamSetApp(qs, XH3_ANSWERED);
    stream_free(s);
}

static void on_stream_data(xQuicConn *qc, xQuicStream *qs, const uint8_t *data, size_t len, bool fin) {
    xH3Conn *h3 = xQuicConnApp(qc);
    xH3Stream *s = xQuicStreamApp(qs);
    if (!h3 || xQuicConnClosed(qc)) return;
    if (s == XH3_ANSWERED) { /* nothing comes after a FIN; dropped all the same */
        xQuicStreamConsumed(qs, len);
        return;
    }
    int64_t id = xQuicStreamId(qs);
    if (!s) {
        bool bidi = (id & 0x2) == 0;
        if (bidi && h3->draining && id >= h3->goaway_id) {
            xQuicStreamReset(qs, XH3_REQUEST_REJECTED);
            return;
        }
        s = stream_new(h3, qs, bidi ? XH3_KIND_REQUEST : XH3_KIND_UNTYPED);
        if (!s) {
            xQuicStreamReset(qs, XH3_INTERNAL_ERROR);
            return;
        }
        if (bidi && id >= h3->next_request_id) h3->next_request_id = id + 4;
    }
    if (s->phase == XH3_PHASE_REFUSED || s->kind == XH3_KIND_IGNORED) {
        xQuicStreamConsumed(qs, len);
        return;
    }
    s->fin = fin;
    if (s->kind == XH3_KIND_REQUEST) {
        note_input(h3);
        read_request(s, data, len);
        answer_settled(s);
        return;
    }
    if (len && xBufferAppend(&s->in, data, len) != XOK) {
        conn_error(h3, XH3_INTERNAL_ERROR);
        return;
    }
    read_unidirectional(s);
}

static void on_stream_reset(xQuicConn *qc, xQuicStream *qs, uint64_t code) {
    xH3Stream *s = xQuicStreamApp(qs);
    if (s == XH3_ANSWERED) { /* cancelled: the response still queued goes no further */
        xQuicStreamReset(qs, XH3_REQUEST_CANCELLED);
        return;
    }
    if (!s) return;
    if (s->kind != XH3_KIND_REQUEST) {
        if (s->kind != XH3_KIND_IGNORED && s->kind != XH3_KIND_UNTYPED)
            conn_error(s->h3, XH3_CLOSED_CRITICAL_STREAM);
        return;
    }
    /* The client cancelled: what it sent no longer matters, nor what we send. */
    if (s->phase != XH3_PHASE_REFUSED) stream_error(s, XH3_REQUEST_CANCELLED);
}

static void on_stream_close(xQuicConn *qc, xQuicStream *qs) {
    xH3Stream *s = xQuicStreamApp(qs);
    if (s == XH3_ANSWERED) {
        xH3Conn *h3 = xQuicConnApp(qc);
        h3->answered--;
        drain_done(h3);
        return;
    }
    if (!s) return;
    s->gone = true;
    s->qs = NULL;
    file_release(s);
    stream_settle(s);
}

const xQuicAppOps xH3App = {
    .on_open = on_open,
    .on_stream_data = on_stream_data,
    .on_stream_reset = on_stream_reset,
    .on_stream_close = on_stream_close,
    .on_stream_acked = on_stream_acked,
    .on_drain = on_drain,
    .on_settle = on_settle,
    .on_close = on_close,
};
