/* http2_internal.h — what the three parts of an HTTP/2 connection share:
 *   http2.c    the session: frames in (a handler per type), settings, pings,
 *              GOAWAY, window updates, header blocks decoded, the input read,
 *              the pump and its timer, start and end;
 *   stream.c   streams: made, kept by id, moved through RFC 9113's states in
 *              one table, their flow-control windows, requests taken in, and
 *              their end;
 *   respond.c  the exchange's side: requests handed to handlers, the
 *              exchange ops (send, send_file, write, end, body delivery),
 *              responses framed as HEADERS and DATA, and tunnels.
 * Other layers include only http2.h. */
#ifndef XHTTP_HTTP2_HTTP2_INTERNAL_H
#define XHTTP_HTTP2_HTTP2_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "xhttp/core/exchange.h"
#include "xhttp/http2/frame.h"
#include "xhttp/http2/held_window.h"
#include "xhttp/http2/hpack.h"
#include "xhttp/http2/http2.h"
#include "xhttp/http2/stream_table.h"

/* Stop framing into the output queue beyond this; resume once it drains. */
#define XH2_OUTPUT_HIGH_WATER (1u << 20)
/* Ranges of stream ids a client skipped, remembered to reject their later use. */
#define XH2_SKIPPED_RANGES 8
/* Streams we reset, remembered so frames the client sent before it saw the
 * reset are dropped quietly (RFC 9113 §5.4.2). */
#define XH2_RESET_MEMORY 32
/* Finished streams kept per connection, buffers and all, for the next ones:
 * as many as clients keep open (100 concurrent streams is nghttp2's and the
 * browsers' custom), so a steady load takes every new stream from here, not
 * from malloc (at 32, 16 x 100 streams of h2load freed and made 68 of each
 * hundred, their buffers regrown: ~800 instructions a request). */
#define XH2_SPARE_STREAMS 128

typedef struct xHttp2 xHttp2;

/* A stream's state (RFC 9113 §5.1), as a server that never pushes sees it:
 * it never sends PUSH_PROMISE, so no stream is ever reserved (local), and a
 * client cannot push, so none is reserved (remote); those two states have no
 * name here. Every move is made in one place, stream.c's move(), by one
 * table of RFC 9113's arrows. */
typedef enum xH2StreamState {
    XH2_STATE_IDLE,               /* just made, its HEADERS not yet taken */
    XH2_STATE_OPEN,               /* both sides may send */
    XH2_STATE_HALF_CLOSED_REMOTE, /* the client ended its side; the response goes on */
    XH2_STATE_HALF_CLOSED_LOCAL,  /* we ended ours; the client may still send */
    XH2_STATE_CLOSED,             /* out of the table: frames on its id no longer reach it */
    XH2_STATES
} xH2StreamState;

/* What moves a stream from one state to the next. */
typedef enum xH2StreamEvent {
    XH2_RECV_HEADERS,    /* a request's HEADERS: idle -> open */
    XH2_RECV_END_STREAM, /* the client ended its side */
    XH2_SEND_END_STREAM, /* we ended ours */
    XH2_RESET,           /* RST_STREAM either way, or the connection ending */
    XH2_EVENTS
} xH2StreamEvent;

/* Where a response's body comes from: one kind per way a handler hands it
 * over, each with what it needs. */
typedef enum xH2SourceKind {
    XH2_SOURCE_NONE, /* none (yet), or all of it is queued */
    /* Whole, in memory, framed by reference and released once the last of
     * it is queued: the handler's (SendRef), or Send's copy in a block from
     * the worker's cache, whose release gives the block back. */
    XH2_SOURCE_MEMORY,
    /* Whole, in memory that is the handler's only while its Send runs (a
     * small body, which the queue would copy anyway): framed by copy within
     * the op, and what the windows hold back is copied to a block of the
     * worker's cache before the op returns (it is MEMORY from then on). So
     * the common small answer costs no block and no release marker in the
     * queue, whose markers split a turn's output into an iovec each. */
    XH2_SOURCE_BORROWED,
    /* Whole, a range of a file read into the queue a frame at a time; its
     * release (which closes the file) once the last frame is queued. */
    XH2_SOURCE_FILE,
    /* Pieces the handler writes (Write, or a tunnel's holder), gathered in a
     * buffer and copied into the queue as they are framed. */
    XH2_SOURCE_STREAMED,
} xH2SourceKind;

typedef struct xH2BodySource {
    xH2SourceKind kind;
    size_t len;    /* bytes in it so far */
    size_t framed; /* of them, queued */
    /* MEMORY and FILE: called once the queue is past the last byte. */
    void (*release)(void *);
    void *release_arg;
    union {
        const char *memory; /* MEMORY, BORROWED */
        struct {
            int fd;
            off_t offset;
        } file;         /* FILE */
        xBuffer pieces; /* STREAMED: len bytes, framed ones dropped from the front as more come */
    };
} xH2BodySource;

/* A request's head as its handler gets it: views of the method, target and
 * authority, and the fields, in the order handlers see them (the regular
 * ones, then an extended CONNECT's :protocol, then host from :authority,
 * as handlers look for Host), all into the stream's own copies or into a
 * shared head. The exchange takes the fields as they are: no second list. */
typedef struct xH2Head {
    xStr method, target, authority; /* target: :path as sent */
    xStr path, query;               /* the target's, split at its '?' once ("" when none) */
    const xHttpField *fields;
    size_t count;
    int64_t declared_length; /* content-length, or -1 */
    bool plain_fields;       /* no value holds a byte HTTP/1.1 refuses (XHPACK_CTL_VALUE) */
    bool tunnel;             /* an extended CONNECT (RFC 8441): answered at the head */
} xH2Head;

/* One copy of a head for every stream whose header block is the decoder's
 * remembered block again (xHpackBlock.remembered: h2load's every request, a
 * page's fetches of one origin), so such a stream copies no string. Its
 * fields and strings follow it in one allocation; it goes when the last
 * stream that holds it has gone and the connection has moved on to another
 * block. */
typedef struct xH2SharedHead {
    size_t refs;    /* the streams that hold it, and the connection while it is h2->shared_head */
    uint64_t block; /* the remembered block's number */
    xH2Head head;
    xHttpKeptRoute route; /* where its first stream was routed, for the rest */
} xH2SharedHead;

typedef struct xH2Stream {
    xHttp2 *h2;
    int32_t id;
    xH2StreamState state;
    struct xH2Stream *prev, *next; /* h2->streams */
    struct xH2Stream *next_ready;  /* h2->ready: complete, awaiting dispatch */
    xHttpExchange *ex;             /* from dispatch (or a bodied request's head) until the stream is freed */

    /* The request. */
    xH2Head head;            /* its views: into strings and fields, or shared's */
    xH2SharedHead *shared;   /* the head it shares, or NULL: its own copies */
    xBuffer strings;         /* its own names and values */
    xBuffer fields;          /* its own xHttpField entries */
    uint64_t received;       /* DATA payload bytes so far */
    xBuffer body;            /* the whole body, or a streamed one's undelivered part */
    size_t body_taken;       /* a streamed body's bytes at the front of body its reader has had */
    xBuffer kept_pieces;     /* a streamed response body's room, empty, for the next one */
    xH2HeldShare held_share; /* a streamed body's part: its connection window (held_window.h) */
    int64_t send_window;     /* what we may still send */
    int64_t recv_window;     /* what the client may still send */
    uint32_t recv_consumed;  /* consumed since the last WINDOW_UPDATE */
    int reject_status;       /* answer this instead of dispatching */
    /* A fact of the request, whatever its state: */
    bool streams_body; /* a streaming route: dispatched at the head */

    /* The response. */
    xH2BodySource out; /* its body */
    /* Its HEADERS is queued. Apart from the state: a stream is open or
     * half-closed (remote) both before and after its head goes. */
    bool head_written;
    /* Where it is with the exchange, which the state does not say: a stream
     * may close while it waits in the ready queue, while an op runs, or while
     * its handler still holds the exchange. */
    bool in_op;      /* inside an exchange op: its end waits for the op */
    bool ready;      /* in h2->ready */
    bool dispatched; /* handed to a handler: the stream holds the connection */
} xH2Stream;

/* A response head's whole block as last encoded, with what it was encoded from:
 * while a connection's responses repeat it (status, the handler's lines, the
 * content-length, the server choice) within one second and one table version,
 * they copy these bytes instead of encoding the head again. Kept only when
 * encoding it changed nothing the encoder remembers, so that it encodes the same
 * again (respond.c: head_memo_*). */
#define XH2_HEAD_MEMO_LINES 96
#define XH2_HEAD_MEMO_CODED 48
typedef struct xH2HeadMemo {
    uint64_t length;  /* the content-length, when with_length */
    time_t second;    /* the date's */
    uint32_t version; /* the encoder table's */
    uint16_t status;
    uint8_t lines_len, coded_len; /* coded_len 0: none kept */
    bool with_length, server;
    char lines[XH2_HEAD_MEMO_LINES]; /* the handler's lines as given, before their names were folded */
    uint8_t coded[XH2_HEAD_MEMO_CODED];
} xH2HeadMemo;

/* Client stream ids never opened: [first, last], both odd. */
typedef struct xH2IdRange {
    int32_t first, last;
} xH2IdRange;

/* What a connection waits for, and so which timeout applies. */
typedef enum xH2Wait {
    XH2_WAIT_NOTHING, /* handlers are working: no timeout */
    XH2_WAIT_IDLE,    /* no streams: the idle timeout */
    XH2_WAIT_REQUEST, /* a request's headers or body: header/body timeout */
    XH2_WAIT_PEER,    /* flow control holds our output: the send timeout */
} xH2Wait;

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
    /* The request check of the decoder's remembered block (xHpackBlock.remembered),
     * which its fields pass again: the field each view of the head is (-1: none), and
     * the content-length. */
    uint64_t checked_block; /* 0: none */
    int8_t checked_at[5];   /* method, scheme, path, authority, protocol */
    int64_t checked_length;
    xH2SharedHead *shared_head; /* the head of the block the decoder remembers, or NULL */
    /* The decoded fields' array and scratch, from the pool: taken at a read's
     * first header block and given back once its frames are handled (take_input),
     * not taken and given back for every block. */
    xBuffer block_fields, block_scratch;
    xHpackEncoder encoder;
    /* server, date and the port's alt-svc as HPACK fields, encoded once per
     * second and table version: every response head of that second on this
     * connection copies the same bytes (put_fixed_fields) */
    uint8_t fixed_fields[224];
    size_t fixed_len;
    time_t fixed_second;
    uint32_t fixed_version; /* the encoder table's version they are for */
    bool fixed_server;      /* with server (the handler did not set its own) */
    xH2HeadMemo head_memo;

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
    xTurnEnd pump_soon;        /* queued by xH2PumpSoon */
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

/* We may still send on s: open, or half-closed (remote). */
static inline bool xH2StreamSends(const xH2Stream *s) {
    return s->state == XH2_STATE_OPEN || s->state == XH2_STATE_HALF_CLOSED_REMOTE;
}

/* The client may still send on s: open, or half-closed (local). */
static inline bool xH2StreamReceives(const xH2Stream *s) {
    return s->state == XH2_STATE_OPEN || s->state == XH2_STATE_HALF_CLOSED_LOCAL;
}

/* Routes s's exchange (its method and path set) as its shared head's first
 * stream was routed (xHttpExchangeRouteAsKept). */
static inline void xH2RouteByHead(xH2Stream *s) {
    if (s->shared) xHttpExchangeRouteAsKept(s->ex, &s->shared->route);
}

/* Response bytes s holds that are not yet framed. */
static inline size_t xH2Pending(const xH2Stream *s) { return s->out.len - s->out.framed; }

/* The functions below are the connection's own, shared by its three files:
 * hidden from the library's users, so a call within a file may be inlined
 * as a static function's would (position-independent code may not inline
 * what another object could interpose). */
#pragma GCC visibility push(hidden)

/* ---- http2.c: the session ---- */

/* A connection error (RFC 9113 §5.4.1): GOAWAY, then the connection ends
 * once it is out. Returns false, so handlers can return it. */
bool xH2ConnError(xHttp2 *h2, xH2Error code);

/* An ack or reset the client made us owe: false (a connection error) when
 * too many wait while our output does (CVE-2019-9512, 9514, 9515). */
bool xH2OweControl(xHttp2 *h2);

/* Frames what waits, flushes, and closes when the connection is done. */
void xH2Pump(xHttp2 *h2);

/* The same at the end of the loop's turn, unless a batch under way pumps at
 * its own end: for output made outside the connection's turn (a proxied
 * upstream's answer, a timer's), so every stream answered in one turn goes
 * out in one TLS record and one send, and a response written then ended
 * leaves as HEADERS and one DATA with END_STREAM. */
void xH2PumpSoon(xHttp2 *h2);

/* ---- stream.c: streams ---- */

/* A new stream's request head, decoded (rv from xHpackDecode) and under the
 * stream limit: the stream opens, or is answered or reset. */
bool xH2StreamOpen(xHttp2 *h2, int32_t id, uint8_t flags, const xHpackBlock *b, int rv);

/* Stream 1 from a request that asked to upgrade (RFC 7540 §3.2). */
bool xH2StreamFromUpgrade(xHttp2 *h2, const xHttp2Upgrade *up);

/* A header block on an open stream: trailers, which must end it. */
bool xH2StreamTrailers(xHttp2 *h2, xH2Stream *s, uint8_t flags, const xHpackBlock *b, int rv);

/* n request body bytes for s, already counted against both windows. */
bool xH2StreamTakeData(xHttp2 *h2, xH2Stream *s, const uint8_t *data, size_t n);

/* The client ended its side of s. */
void xH2StreamRemoteEnd(xHttp2 *h2, xH2Stream *s);

/* Our side of s ended with the frame just queued. */
void xH2StreamLocalEnd(xH2Stream *s);

/* s is reset (by us or the client) or its connection ends: it closes. */
void xH2StreamClose(xH2Stream *s);

/* A stream error (RFC 9113 §5.4.2): RST_STREAM, and the stream (if we have
 * it) closes. False only when the reset itself was one too many. */
bool xH2StreamError(xHttp2 *h2, int32_t id, xH2Error code);

/* True when we reset id lately: frames the client sent before it knew are
 * dropped. */
bool xH2WasReset(const xHttp2 *h2, int32_t id);

/* Ends a closed stream, unless its handler still holds the exchange: then
 * its End frees the stream. */
void xH2StreamSettle(xH2Stream *s);

/* The stream goes: what it holds is released, and it becomes a spare. */
void xH2StreamFree(xH2Stream *s);

/* Lets go of a shared head (NULL: none); the last to let go frees it. */
void xH2SharedHeadRelease(xH2SharedHead *shared);

/* Frees every stream and spare of h2 (the connection is being freed). */
void xH2StreamsFree(xHttp2 *h2);

/* Queues s for xH2DispatchReady (its request is complete, or more of a
 * streamed body came). */
void xH2MarkReady(xHttp2 *h2, xH2Stream *s);

/* The client's bytes were consumed: its window comes back once half of ours
 * is used up, in one WINDOW_UPDATE; per connection, and per stream. */
void xH2ConsumeConn(xHttp2 *h2, size_t n);
void xH2ConsumeStream(xH2Stream *s, size_t n);

/* A streamed body's held part leaves (taken, or dropped): the connection's
 * window comes back for what did not get it back on arrival. */
void xH2ReleaseHeld(xHttp2 *h2, xH2Stream *s);

/* The bytes of a streamed body held for its reader, not yet taken. */
static inline size_t xH2HeldBody(const xH2Stream *s) { return s->body.len - s->body_taken; }

/* n of them go to the reader (the stream's window comes back as for
 * consumed bytes); returns where they start, valid until more arrive. */
const char *xH2TakeHeld(xHttp2 *h2, xH2Stream *s, size_t n);

/* The first broken invariant of s (its state, windows, body source), or
 * NULL; counts the open streams and the held bytes returned. */
const char *xH2StreamBrokenInvariant(const xHttp2 *h2, const xH2Stream *s, size_t *open, size_t *returned);

/* ---- respond.c: the exchange's side ---- */

/* Hands the streams that are ready to their handlers (or their readers). */
void xH2DispatchReady(xHttp2 *h2);

/* Gives a streaming route's reader what has arrived (or drops it once the
 * response has ended). The caller is in a batch. */
void xH2DeliverBody(xHttp2 *h2, xH2Stream *s);

/* Frames every stream that has something to send. */
void xH2FrameAll(xHttp2 *h2);

/* Releases what s's response body holds (the queue may still point into
 * it: the release waits for the queue). */
void xH2SourceRelease(xH2Stream *s);

/* Tells the holders of tunnels whose output is all framed that they may
 * write more; true when one was told. */
bool xH2WakeTunnels(xHttp2 *h2);

/* A graceful stop: each tunnel's holder ends it its own way. */
void xH2StopTunnels(xHttp2 *h2);

#pragma GCC visibility pop

#endif
