/* http1.c — the HTTP/1.1 protocol over a connection.
 *
 * The read buffer holds requests back to back. `start` is where the current
 * one begins; its head is parsed in place and the views handed to the handler
 * point into the buffer, which therefore stays put until the response ends.
 * Requests are served strictly in order: while a handler has not answered,
 * later pipelined bytes wait in the buffer. Responses produced while handling
 * one read are flushed together at the end of it.
 *
 * A streaming route's handler gets the request as soon as its head is here;
 * the body is then read into the space behind the head, handed to the reader
 * piece by piece and forgotten, so it never needs more than that space, and
 * while the reader is paused the socket is simply not read. */
#include "xhttp/http1/http1.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "xhttp/core/exchange.h"
#include "xhttp/core/finished.h"
#include "xhttp/http1/http1_parser.h"
#include "xhttp/core/tokens.h"
#include "xnet/splice.h"

/* Flush mid-batch once this much output is queued, and stop taking requests
 * while the socket cannot take more, so a client that pipelines requests for
 * large responses without reading them cannot make us buffer without bound. */
#define XH1_OUTPUT_HIGH_WATER (1u << 20)
/* A response written outside the connection's turn waits for the turn's
 * end up to this much (a stream window's worth); more is sent at once. */
#define XH1_WRITE_SOON (64u << 10)
/* A chunk-size line with extensions, or a trailer line, beyond this is abuse. */
#define XH1_MAX_CHUNK_LINE 4096
/* Room behind a streamed request's head for reading its body into. */
#define XH1_STREAM_ROOM (32u << 10)
/* A partial head up to this size, left waiting after a read, moves out of
 * the pooled input block into an allocation of its own size (park_head). */
#define XH1_PARK_MAX 1024
/* A Content-Length body of at least this size is read in bulk, from the
 * socket straight into its place (xConnRecvBulk). */
#define XH1_BULK_MIN (32u << 10)
/* Room past the size of the last request read in bulk for the next one's
 * read: a request of the same size then comes up short of it, which tells
 * that the socket is drained (no read that fails EAGAIN after it), and a
 * somewhat longer head still fits. */
#define XH1_BULK_SLACK 4096
/* The most a connection reading in bulk reads its next request into before
 * it knows that request's size: a buffer the pool keeps (XBUFFER_LARGE_MAX),
 * whatever the last body was (a streamed upload may be of any length). */
#define XH1_BULK_ROOM_MAX (XBUFFER_LARGE_MAX - XH1_BULK_SLACK)
/* After a request whose body a taker moved on from the socket itself (the
 * proxy's splice), the next head is read this much at a time: a client that
 * sends one large body mostly sends another, and what a read takes past the
 * head is copied, where the taker would have moved it without a copy. */
#define XH1_TAKEN_HEAD_READ 4096

typedef enum xH1State {
    XH1_HEAD,      /* waiting for a complete request head */
    XH1_BODY,      /* reading a Content-Length body */
    XH1_CHUNKED,   /* decoding a chunked body */
    XH1_STREAMING, /* the handler has the request; its body goes to a reader */
    XH1_HANDLER,   /* the handler has the request; waiting for its response */
    XH1_CLOSING,   /* a final response is queued; nothing more is read */
    XH1_SWITCHING, /* another protocol takes the connection once the batch ends */
} xH1State;

/* Which timeout runs while the connection waits for a head. */
typedef enum xH1HeadWait {
    XH1_WAIT_FIRST, /* nothing served yet: the header timeout set at accept stands */
    XH1_WAIT_NEXT,  /* a response went out: the idle timeout, once nothing more is held */
    XH1_WAIT_HEAD,  /* a head has begun: the header timeout, armed once for it */
} xH1HeadWait;

/* How a streamed response's body is framed. */
typedef enum xH1Framing {
    XH1_FRAMED_NONE,     /* HEAD, or a status without a body: the head alone */
    XH1_FRAMED_CHUNKED,  /* chunked coding, trailers after the last chunk */
    XH1_FRAMED_BY_CLOSE, /* HTTP/1.0 has no chunks: the body ends with the connection */
    XH1_FRAMED_LENGTH,   /* a length declared before the head (xHttpResponseSetLength) */
} xH1Framing;

typedef struct xHttp1 {
    xConn *conn;
    xH1State state;
    size_t start;   /* offset of the current request in conn->in */
    size_t scanned; /* bytes of the head already scanned (parser's prev_len) */
    size_t head_len;
    uint64_t body_len;     /* Content-Length, or chunked payload decoded so far */
    size_t raw_pos;        /* chunked: first byte not yet decoded */
    size_t body_pos;       /* streamed, Content-Length: first byte not yet delivered */
    uint64_t body_left;    /* streamed, Content-Length: bytes still to come */
    bool chunked_body;     /* streamed: the body uses chunked coding */
    bool body_complete;    /* streamed: the reader's last piece is known */
    bool continue_owed;    /* streamed: 100 Continue waits for the reader to ask */
    bool reads_bulk;       /* since a request with a large body: xConnRecvBulk is on */
    bool small_head_reads; /* a body was taken off the socket (take_body): heads read in small reads */
    size_t bulk_room;      /* reads_bulk: that request's size, head and body */
    size_t next_start;     /* where the request after this one begins */
    const char *parsed_at; /* in.data + start when the head was parsed */
    xHttp1Chunked chunked;
    xHttpExchange *ex;
    bool keep_alive;
    bool http10;
    bool head_request;             /* HEAD: framing headers, no body */
    xH1Framing framing;            /* the streamed response's */
    bool in_batch;                 /* inside process(): leave flushing to its end */
    bool waiting_flush;            /* output over the high-water mark; paused */
    xH1HeadWait waiting;           /* the timeout a head is waited for under */
    uint64_t parked_start_us;      /* a parked head's exchange's start_us (park_head) */
    const xHttpTakeover *takeover; /* XH1_SWITCHING: who takes the connection after the batch */
    void *takeover_arg;
    int refusal;              /* xHttp1StartRefusing: every request gets this status … */
    const char *refusal_text; /* … with this text, and the connection closes */
} xHttp1;

static const xHttpExchangeOps h1_ops;
static const xConnProtocol h1_protocol;

/* Bulk reading on for a request with a Content-Length body of at least
 * XH1_BULK_MIN, and kept on after it until a request without one: a client
 * that uploads one large body mostly sends another, whose head and body then
 * come in one read, into a buffer of the last one's size (make_room). */
__attribute__((noinline)) static void read_in_bulk(xHttp1 *h, const xHttp1Request *req, size_t head_len) {
    bool on = !req->chunked && req->content_length >= (int64_t)XH1_BULK_MIN;
    if (on) {
        uint64_t size = head_len + (uint64_t)req->content_length;
        h->bulk_room = size < XH1_BULK_ROOM_MAX ? (size_t)size : XH1_BULK_ROOM_MAX;
    }
    if (h->reads_bulk == on) return;
    h->reads_bulk = on;
    xConnRecvBulk(h->conn, on);
}

static void process(xHttp1 *h);

/* ---- Response heads ---- */

static char *put(char *p, const char *s, size_t n) {
    memcpy(p, s, n);
    return p + n;
}

/* The one writer of every HTTP/1.1 response head: the status line and the
 * server's own fields, then the handler's fields, the framing and what the
 * head says of the connection, then the empty line. framing:
 * "Content-Length: N\r\n" or the chunked field, or "". server_line: the
 * server's Server field goes in (not when the handler set its own). An
 * interim 100 is its status line alone; a 101 says the connection upgrades. */
static xErrno write_head(xHttp1 *h, int status, const xBuffer *fields, bool server_line, const char *framing,
                         size_t framing_len) {
    const xHttpContext *ctx = xHttpContextOf(h->conn);
    const xHttpOwnAnswers *answers = ctx->answers;
    const char *reason = xHttpStatusReason(status);
    size_t reason_len = strlen(reason);
    size_t cap = 16 + reason_len + sizeof answers->server_line + 40 + sizeof ctx->alt_svc[0].line +
                 (fields ? fields->len : 0) + framing_len + 32;
    char *p = xConnReserve(h->conn, cap), *begin = p;
    if (!p) return XERR_NOMEM;
    p = put(p, "HTTP/1.1 ", 9);
    p = xHttpPutDecimal(p, (uint64_t)status);
    *p++ = ' ';
    p = put(p, reason, reason_len);
    p = put(p, "\r\n", 2);
    if (status != 100) { /* an interim 100 is the status line alone */
        if (server_line) {
            /* Copied as one fixed block (the reservation has room for the whole
             * array) and the cursor moved by the line's length: a few moves where
             * a copy of a length known only at run time is a call. */
            memcpy(p, answers->server_line, XHTTP_SERVER_LINE_BLOCK);
            if (answers->server_line_len > XHTTP_SERVER_LINE_BLOCK)
                memcpy(p + XHTTP_SERVER_LINE_BLOCK, answers->server_line + XHTTP_SERVER_LINE_BLOCK,
                       answers->server_line_len - XHTTP_SERVER_LINE_BLOCK);
            p += answers->server_line_len;
        }
        p = put(p, "Date: ", 6);
        p = put(p, xHttpDate(&xHttpContextOf(h->conn)->date, h->conn->net->loop), XHTTP_DATE_LEN);
        p = put(p, "\r\n", 2);
        const xHttpAltSvc *alt = ctx->alt_svc_count && status >= 200 ? xHttpAltSvcOf(ctx, h->conn) : NULL;
        if (alt) p = put(p, alt->line, alt->len);
    }
    if (fields && fields->len) p = put(p, fields->data, fields->len);
    p = put(p, framing, framing_len);
    if (status == 101) {
        p = put(p, "Connection: Upgrade\r\n", 21);
    } else if (status >= 200) {
        if (xHttpContextOf(h->conn)->draining) h->keep_alive = false;
        /* A response that starts before its request's body has all arrived
         * may end before it too; the rest of the body is then not read at all. */
        if (h->state == XH1_STREAMING && !h->body_complete) h->keep_alive = false;
        if (!h->keep_alive)
            p = put(p, "Connection: close\r\n", 19);
        else if (h->http10)
            p = put(p, "Connection: keep-alive\r\n", 24);
    }
    p = put(p, "\r\n", 2);
    xConnCommit(h->conn, (size_t)(p - begin));
    return XOK;
}

static xErrno write_sized_head(xHttp1 *h, int status, const xBuffer *fields, bool server_line, uint64_t len) {
    char framing[40], *p = framing;
    if (xHttpStatusHasBody(status)) {
        p = put(p, "Content-Length: ", 16);
        p = xHttpPutDecimal(p, len);
        p = put(p, "\r\n", 2);
    }
    return write_head(h, status, fields, server_line, framing, (size_t)(p - framing));
}

/* The body of the server's own answer: the text the connection was started
 * to refuse with, else the server's for status (xHttpOwnErrorBody: the
 * reason phrase on a line unless configured), with its content type. */
static xStr status_body(const xHttp1 *h, int status, char line[64], xStr *content_type) {
    if (!h->refusal_text)
        return xHttpOwnErrorBody(xHttpContextOf(h->conn)->answers, status, line, content_type);
    *content_type = (xStr){"Content-Type: text/plain\r\n", 26};
    return xStrFromC(h->refusal_text);
}

/* Queues the server's own answer: status with its body, and "Connection:
 * close". HEAD gets the head alone. */
static void write_status(xHttp1 *h, int status) {
    char line[64];
    xStr content_type, body = status_body(h, status, line, &content_type);
    xBuffer fields = {(char *)content_type.data, content_type.len, content_type.len};
    h->keep_alive = false;
    if (write_sized_head(h, status, &fields, true, body.len) == XOK && !h->head_request)
        xConnWrite(h->conn, body.data, body.len);
}

/* Answers a request the server refuses, then closes: after a framing error
 * we can no longer tell where the next request would start. The refusal is
 * counted and logged as any response, with what the head gave of the request
 * (nothing, when the head itself was refused): malformed and oversized
 * requests are what an operator looks for. */
static void reject(xHttp1 *h, int status) {
    xHttpContext *ctx = xHttpContextOf(h->conn);
    if (!h->ex && h->state == XH1_HEAD && h->conn->in.len > h->start &&
        (h->ex = xHttpExchangeAcquire(ctx))) /* a parked head (park_head): logged from its first byte */
        h->ex->req.start_us = h->parked_start_us;
    if (h->ex) {
        xHttpRequest *req = &h->ex->req;
        req->conn = h->conn;
        if (!req->protocol) req->protocol = "HTTP/1.1";
        char line[64];
        xStr content_type;
        xHttpExchangeFinished(h->ex, status, status_body(h, status, line, &content_type).len);
        xHttpExchangeRelease(ctx, h->ex);
        h->ex = NULL;
    }
    h->state = XH1_CLOSING;
    write_status(h, status);
    xConnCloseAfterFlush(h->conn);
}

/* ---- The end of a response ---- */

static void finish(xHttp1 *h) {
    xConn *conn = h->conn;
    xHttpExchangeRelease(xHttpContextOf(conn), h->ex);
    h->ex = NULL;
    h->start = h->next_start;
    h->scanned = 0;
    h->waiting = XH1_WAIT_NEXT;
    h->continue_owed = false;
    if (xConnClosed(conn)) {
        h->state = XH1_CLOSING;
    } else if (!h->keep_alive) {
        h->state = XH1_CLOSING;
        xConnCloseAfterFlush(conn);
    } else {
        h->state = XH1_HEAD;
    }
    bool resume = !h->in_batch && !xConnClosed(conn);
    if (resume) {
        /* A response ended outside the connection's own turn (a database's
         * answer, a timer): process() queues its flush for the turn's end,
         * where on io_uring the responses of every connection answered in
         * this turn go out with the one wait, not a send(2) each. */
        process(h);
    }
    xConnRelease(conn); /* the reference taken at dispatch: held until here, past the flush */
}

/* Queues the head of a whole response of len body bytes: true when the
 * body is to follow it (not for HEAD, 204 or 304, nor after an error). */
static bool start_whole(xHttp1 *h, xHttpExchange *ex, size_t len, xErrno *err) {
    *err = ex->res.aborted ? XERR_CLOSED
                           : write_sized_head(h, ex->res.status, &ex->res.headers, !ex->res.own_server, len);
    return *err == XOK && len && !h->head_request && xHttpStatusHasBody(ex->res.status);
}

static void end_whole(xHttp1 *h, xHttpExchange *ex) {
    ex->res.head_sent = ex->res.ended = true;
    finish(h);
}

static xErrno h1_send(xHttpExchange *ex, const void *body, size_t len, bool copy, void (*release)(void *),
                      void *release_arg) {
    xHttp1 *h = ex->proto;
    xErrno err;
    if (start_whole(h, ex, len, &err)) {
        err = copy ? xConnWrite(h->conn, body, len) : xConnWriteRef(h->conn, body, len, release, release_arg);
        release = NULL; /* now the connection's to call */
    }
    if (!copy && release) release(release_arg);
    end_whole(h, ex);
    return err;
}

static xErrno h1_send_file(xHttpExchange *ex, int fd, off_t offset, size_t len, void (*release)(void *),
                           void *release_arg) {
    xHttp1 *h = ex->proto;
    xErrno err;
    if (start_whole(h, ex, len, &err)) {
        err = xConnWriteFile(h->conn, fd, offset, len, release, release_arg);
        release = NULL;
    }
    if (release) release(release_arg);
    end_whole(h, ex);
    return err;
}

static xErrno start_stream(xHttp1 *h, xHttpExchange *ex) {
    ex->res.head_sent = true;
    uint64_t declared = ex->res.length_declared ? ex->res.declared_length : 0;
    if (!xHttpStatusHasBody(ex->res.status) || h->head_request) {
        h->framing = XH1_FRAMED_NONE;
        return write_sized_head(h, ex->res.status, &ex->res.headers, !ex->res.own_server, declared);
    }
    if (ex->res.length_declared) {
        h->framing = XH1_FRAMED_LENGTH;
        return write_sized_head(h, ex->res.status, &ex->res.headers, !ex->res.own_server, declared);
    }
    if (h->http10) {
        h->framing = XH1_FRAMED_BY_CLOSE;
        h->keep_alive = false;
        return write_head(h, ex->res.status, &ex->res.headers, !ex->res.own_server, "", 0);
    }
    h->framing = XH1_FRAMED_CHUNKED;
    return write_head(h, ex->res.status, &ex->res.headers, !ex->res.own_server,
                      "Transfer-Encoding: chunked\r\n", 28);
}

static xErrno h1_write(xHttpExchange *ex, const void *data, size_t len) {
    xHttp1 *h = ex->proto;
    if (ex->res.aborted) return XERR_CLOSED;
    xErrno err = ex->res.head_sent ? XOK : start_stream(h, ex);
    if (err != XOK || !len || h->framing == XH1_FRAMED_NONE) return err;
    if (h->framing == XH1_FRAMED_CHUNKED) {
        char size_line[24];
        int n = 0;
        for (int shift = 60; shift >= 0; shift -= 4) {
            unsigned digit = (unsigned)(len >> shift) & 15u;
            if (digit || n) size_line[n++] = "0123456789abcdef"[digit];
        }
        size_line[n++] = '\r';
        size_line[n++] = '\n';
        err = xConnWrite(h->conn, size_line, (size_t)n);
    }
    if (err == XOK) err = xConnWrite(h->conn, data, len);
    if (err == XOK && h->framing == XH1_FRAMED_CHUNKED) err = xConnWrite(h->conn, "\r\n", 2);
    /* Outside the connection's turn (a proxied upstream's answer, a
     * timer's) the bytes leave at the turn's end, with the rest of the
     * response when it ends meanwhile (on io_uring in the loop's one
     * submission, not a send(2) of their own); past XH1_WRITE_SOON, now. */
    if (!h->in_batch && xConnPending(h->conn) < XH1_WRITE_SOON)
        xConnFlushSoon(h->conn);
    else if (!h->in_batch)
        xConnFlush(h->conn);
    return err;
}

static xErrno h1_end(xHttpExchange *ex) {
    xHttp1 *h = ex->proto;
    xErrno err = XOK;
    if (!ex->res.aborted) {
        if (!ex->res.head_sent) err = start_stream(h, ex);
        if (err == XOK && h->framing == XH1_FRAMED_CHUNKED) {
            err = xConnWrite(h->conn, "0\r\n", 3);
            if (err == XOK) err = xConnWrite(h->conn, ex->res.trailers.data, ex->res.trailers.len);
            if (err == XOK) err = xConnWrite(h->conn, "\r\n", 2);
        }
    }
    ex->res.ended = true;
    finish(h);
    return err;
}

static size_t h1_pending(const xHttpExchange *ex) {
    const xHttp1 *h = ex->proto;
    return xConnPending(h->conn);
}

/* on_flushed looks at the drain callback once what is queued has gone,
 * however it goes (never within the handler's own call). */
static void h1_watch_drain(xHttpExchange *ex) {
    xHttp1 *h = ex->proto;
    xConnWaitFlushed(h->conn);
}

/* The connection goes at once, with what it had queued: a reader sees the
 * body cut (short of its Content-Length, or without its last chunk). */
static void h1_reset(xHttpExchange *ex) {
    xHttp1 *h = ex->proto;
    h->keep_alive = false;
    ex->res.aborted = true; /* nothing more is written; on_close tells no one */
    xConnFlush(h->conn);    /* what was written, as the socket takes it (h1_write may have left it) */
    xConnClose(h->conn);
    ex->res.ended = true;
    finish(h);
}

/* A body framed by its Content-Length, in cleartext: its bytes go to the
 * socket as they are, once what was written before has left. */
static xErrno h1_splice_sink(xHttpExchange *ex, xConn **sink) {
    xHttp1 *h = ex->proto;
    xConn *conn = h->conn;
    if (!xConnSplices(conn)) return XERR_INVALID;
    xErrno err = ex->res.head_sent ? XOK : start_stream(h, ex);
    if (err != XOK) return err;
    if (h->framing != XH1_FRAMED_LENGTH) return XERR_INVALID;
    if (!xConnSpliceReady(conn) && conn->send == XCONN_SEND_READY && xConnPending(conn)) {
        xConnRetain(conn); /* a failed send closes it */
        xConnFlush(conn);
        bool open = !xConnClosed(conn);
        xConnRelease(conn);
        if (!open) return XERR_STATE; /* the exchange was aborted within */
    }
    if (xConnSpliceReady(conn)) *sink = conn;
    return XOK;
}

static void send_continue(xHttp1 *h) {
    write_head(h, 100, NULL, false, "", 0);
    xConnFlush(h->conn);
}

static void h1_body_wanted(xHttpExchange *ex) {
    xHttp1 *h = ex->proto;
    if (h->state != XH1_STREAMING || xConnClosed(h->conn) || ex->res.aborted) return;
    /* Expect: 100-continue is answered only now that someone wants the body;
     * never after a final head (a client still waiting for the 100 sends the
     * body once its own wait runs out). */
    if (h->continue_owed && !ex->res.head_sent) send_continue(h);
    h->continue_owed = false;
    /* The body timeout runs again: the client, not the reader, is waited for. */
    if (!h->body_complete) xConnSetTimeout(h->conn, xHttpContextOf(h->conn)->conf->body_timeout_ms);
    if (!h->in_batch) process(h); /* otherwise the batch under way delivers */
}

/* Sends the 101 and has process() hand the connection over once its batch
 * is done: what follows the request is the new protocol's. */
static xErrno begin_switch(xHttp1 *h, xHttpExchange *ex, const xHttpTakeover *to, void *arg) {
    xErrno err = write_head(h, 101, &ex->res.headers, !ex->res.own_server, "", 0);
    if (err != XOK) return err;
    ex->res.head_sent = true;
    h->takeover = to;
    h->takeover_arg = arg;
    h->state = XH1_SWITCHING;
    return XOK;
}

/* A handler's switch (a WebSocket route's) while its request is being
 * dispatched: the batch under way makes it. Later (a proxy's, once its
 * upstream said 101): made now, the handler's request read whole. */
static xErrno h1_switch(xHttpExchange *ex, const xHttpTakeover *to, void *arg) {
    xHttp1 *h = ex->proto;
    if (h->state != XH1_HANDLER || h->http10 || xConnClosed(h->conn)) return XERR_STATE;
    xErrno err = begin_switch(h, ex, to, arg);
    if (err != XOK) return err;
    xConnRelease(h->conn);        /* dispatch's reference: no response will end */
    if (!h->in_batch) process(h); /* hands the connection over: h is gone */
    return XOK;
}

static const xHttpExchangeOps h1_ops = {
    .send = h1_send,
    .send_file = h1_send_file,
    .write = h1_write,
    .end = h1_end,
    .body_wanted = h1_body_wanted,
    .switch_protocols = h1_switch,
    .pending = h1_pending,
    .watch_drain = h1_watch_drain,
    .splice_sink = h1_splice_sink,
    .reset = h1_reset,
};

/* ---- Requests ---- */

static xHttp1Limits limits_of(const xHttpServerConf *conf) {
    xHttp1Limits limits = {conf->max_request_line, conf->max_header_size, conf->max_headers};
    return limits;
}

/* Parses the current head into the exchange's request. */
static int parse_head(xHttp1 *h, xHttp1Request *req) {
    xConn *conn = h->conn;
    xHttp1Limits limits = limits_of(xHttpContextOf(conn)->conf);
    req->headers = h->ex->fields;
    int r = xHttp1ParseRequest(conn->in.data + h->start, conn->in.len - h->start, h->scanned, req, &limits);
    if (r > 0) {
        xHttpRequest *out = &h->ex->req;
        out->method = req->method;
        out->path = req->path;
        out->query = req->query;
        out->headers = h->ex->fields;
        out->num_headers = req->num_headers;
        out->fields_plain = true; /* the parser held names to tokens, values to field-value */
        out->protocol = req->minor_version ? "HTTP/1.1" : "HTTP/1.0";
        h->parsed_at = conn->in.data + h->start;
    }
    return r;
}

/* Moves the current request to the front of the buffer. */
static void compact(xHttp1 *h) {
    xBuffer *in = &h->conn->in;
    if (h->start == 0) return;
    memmove(in->data, in->data + h->start, in->len - h->start);
    in->len -= h->start;
    if (h->state == XH1_CHUNKED) h->raw_pos -= h->start;
    h->start = 0;
}

/* Makes in's capacity at least cap (bodies can be far larger than a pooled
 * block), from the pool's larger spares where one fits. */
static bool resize_input(xHttp1 *h, size_t cap) {
    xBuffer *in = &h->conn->in;
    if (in->cap >= cap) return true;
    xBufferPool *pool = &h->conn->net->buffers;
    xBuffer grown = {0};
    if (xBufferPoolAcquireLarge(pool, &grown, cap) != XOK) return false;
    if (in->len) memcpy(grown.data, in->data, in->len);
    grown.len = in->len;
    xBufferPoolRelease(pool, in);
    *in = grown;
    return true;
}

/* Re-points the request's views after the buffer moved (compacted or grown
 * to fit a body). Returns the body's new start. */
static const char *refresh_views(xHttp1 *h) {
    xConn *conn = h->conn;
    if (h->parsed_at != conn->in.data + h->start) {
        xHttp1Request req;
        h->scanned = 0;
        parse_head(h, &req);
    }
    return conn->in.data + h->start + h->head_len;
}

static void dispatch(xHttp1 *h, xStr body) {
    xConn *conn = h->conn;
    xHttpExchange *ex = h->ex;
    body.data = refresh_views(h);
    ex->req.body = body;
    if (h->state != XH1_STREAMING) h->state = XH1_HANDLER;
    /* The timer is left armed: it does nothing while a handler works, and
     * the response's end re-arms it, so disarming would be wasted work. */
    xConnRetain(conn); /* released by finish(), however late the response */
    xHttpExchangeDispatch(ex);
    if (h->ex == ex && ex->streams_body && h->state == XH1_HANDLER) {
        /* A streaming route's request without a body: its reader is owed
         * the end, with nothing more to read. */
        h->state = XH1_STREAMING;
        h->chunked_body = false;
        h->body_complete = true;
        h->body_left = 0;
        h->body_pos = h->next_start;
    }
}

static bool route_exists(xHttp1 *h) {
    refresh_views(h);
    return xHttpExchangeRoute(h->ex) == XROUTE_FOUND;
}

static bool route_streams(xHttp1 *h) {
    refresh_views(h);
    return xHttpExchangeStreams(h->ex);
}

/* A streaming route: the handler gets the request now. Its head moves to the
 * front of the buffer, with room behind it for the body, before the handler
 * holds views into it, and stays put until the response ends. */
static void begin_streaming(xHttp1 *h, const xHttp1Request *req) {
    xBuffer *in = &h->conn->in;
    compact(h);
    if (!resize_input(h, h->head_len + XH1_STREAM_ROOM)) {
        reject(h, 500);
        return;
    }
    size_t body_start = h->head_len;
    h->chunked_body = req->chunked;
    h->body_complete = false;
    h->body_left = req->chunked ? 0 : (uint64_t)req->content_length;
    h->body_pos = h->raw_pos = h->next_start = body_start;
    memset(&h->chunked, 0, sizeof h->chunked);
    h->continue_owed = req->expect_continue && !h->http10 && in->len == body_start;
    xConnSetTimeout(h->conn, xHttpContextOf(h->conn)->conf->body_timeout_ms);
    h->state = XH1_STREAMING;
    xStr none = {in->data + body_start, 0};
    dispatch(h, none);
}

/* A request that asked for "Upgrade:": the upgrade module decides whether
 * another protocol takes the connection after this batch (h2c); if not, the
 * request is served here as it is, as RFC 9110 allows, and its route's
 * handler may still switch (WebSocket). */
static bool try_upgrade(xHttp1 *h, const xHttp1Request *req) {
    const xHttpUpgrades *upgrades = xHttpContextOf(h->conn)->upgrades;
    if (!req->upgrade || h->http10 || !upgrades) return false;
    bool has_body = req->chunked || req->content_length > 0;
    void *arg;
    const xHttpTakeover *to = upgrades->offer(h->conn, h->ex, has_body, &arg);
    if (!to) return false;
    h->next_start = h->start + h->head_len;
    if (begin_switch(h, h->ex, to, arg) != XOK) {
        to->drop(arg);
        reject(h, 500);
    }
    return true;
}

static void begin_request(xHttp1 *h, const xHttp1Request *req, size_t head_len) {
    const xHttpServerConf *conf = xHttpContextOf(h->conn)->conf;
    xBuffer *in = &h->conn->in;
    h->head_len = head_len;
    h->keep_alive = req->keep_alive;
    h->http10 = req->minor_version == 0;
    h->head_request = xStrEqualsC(req->method, "HEAD");
    /* Out of line, and only where it may change: not on a GET's way. */
    if (h->reads_bulk || req->content_length >= (int64_t)XH1_BULK_MIN) read_in_bulk(h, req, head_len);
    if (h->small_head_reads && req->content_length < (int64_t)XH1_BULK_MIN) h->small_head_reads = false;
    if (try_upgrade(h, req)) return;
    if ((req->chunked || req->content_length > 0) && route_streams(h)) {
        begin_streaming(h, req);
        return;
    }
    size_t body_start = h->start + head_len;
    if (req->chunked) {
        h->state = XH1_CHUNKED;
        h->body_len = 0;
        h->raw_pos = body_start;
        memset(&h->chunked, 0, sizeof h->chunked);
    } else if (req->content_length > 0) {
        if ((uint64_t)req->content_length > conf->max_body_size) {
            reject(h, 413);
            return;
        }
        h->state = XH1_BODY;
        h->body_len = (uint64_t)req->content_length;
        if (in->cap - h->start < head_len + h->body_len) {
            compact(h);
            if (!resize_input(h, head_len + h->body_len)) {
                reject(h, 500);
                return;
            }
        }
    } else {
        h->next_start = body_start;
        xStr none = {in->data + body_start, 0};
        dispatch(h, none);
        return;
    }
    bool body_waiting = h->state == XH1_CHUNKED || in->len - (h->start + head_len) < h->body_len;
    if (req->expect_continue && body_waiting && !h->http10) {
        if (!route_exists(h)) {
            /* Answer 404/405 now instead of inviting a body nobody wants; the
             * client may send it anyway, so this connection cannot go on. */
            h->keep_alive = false;
            h->next_start = in->len;
            xStr none = {in->data + body_start, 0};
            dispatch(h, none);
            return;
        }
        send_continue(h);
    }
    xConnSetTimeout(h->conn, conf->body_timeout_ms);
}

typedef enum xStep { XSTEP_AGAIN, XSTEP_NEED_INPUT, XSTEP_STOP } xStep;

static xStep step_head(xHttp1 *h) {
    xConn *conn = h->conn;
    size_t avail = conn->in.len - h->start;
    if (avail == h->scanned) return XSTEP_NEED_INPUT; /* none, or a partial head already scanned */
    if (!h->ex && !(h->ex = xHttpExchangeAcquire(xHttpContextOf(conn)))) {
        reject(h, 500);
        return XSTEP_STOP;
    }
    if (!xHttpExchangeReserveFields(xHttpContextOf(conn), h->ex)) {
        reject(h, 500);
        return XSTEP_STOP;
    }
    h->ex->ops = &h1_ops;
    h->ex->proto = h;
    h->ex->req.conn = conn;
    xHttp1Request req;
    int r = parse_head(h, &req);
    if (r == XHTTP1_INCOMPLETE) {
        h->scanned = avail;
        if (h->waiting != XH1_WAIT_HEAD) {
            h->waiting = XH1_WAIT_HEAD;
            xConnSetTimeout(conn, xHttpContextOf(conn)->conf->header_timeout_ms);
        }
        return XSTEP_NEED_INPUT;
    }
    if (r == XHTTP1_ERROR || h->refusal) {
        reject(h, h->refusal ? h->refusal : req.error_status);
        return XSTEP_STOP;
    }
    begin_request(h, &req, (size_t)r);
    return h->state == XH1_SWITCHING ? XSTEP_STOP : XSTEP_AGAIN;
}

static xStep step_body(xHttp1 *h) {
    size_t body_start = h->start + h->head_len;
    if (h->conn->in.len - body_start < h->body_len) return XSTEP_NEED_INPUT;
    h->next_start = body_start + h->body_len;
    xStr body = {h->conn->in.data + body_start, h->body_len};
    dispatch(h, body);
    return XSTEP_AGAIN;
}

static xStep step_chunked(xHttp1 *h) {
    xBuffer *in = &h->conn->in;
    const xHttpServerConf *conf = xHttpContextOf(h->conn)->conf;
    size_t body_start = h->start + h->head_len;
    size_t written = 0;
    ssize_t used = xHttp1ChunkedDecode(&h->chunked, in->data + h->raw_pos, in->len - h->raw_pos,
                                       in->data + body_start + h->body_len, &written, XH1_MAX_CHUNK_LINE,
                                       conf->max_header_size);
    if (used < 0) {
        reject(h, h->chunked.error_status);
        return XSTEP_STOP;
    }
    h->body_len += written;
    h->raw_pos += (size_t)used;
    if (h->body_len > conf->max_body_size) {
        reject(h, 413);
        return XSTEP_STOP;
    }
    if (h->chunked.done) {
        h->next_start = h->raw_pos;
        xStr body = {in->data + body_start, h->body_len};
        dispatch(h, body);
        return XSTEP_AGAIN;
    }
    /* Everything read so far is decoded: later bytes can land right after
     * the payload, reclaiming the space the chunk framing took. */
    in->len = h->raw_pos = body_start + h->body_len;
    return XSTEP_NEED_INPUT;
}

/* The streamed body turned out malformed, or stopped coming, while a handler
 * holds the request: answer status unless the handler has begun its own
 * response, and end the connection. The handler learns of it through its
 * abort callback, or finds its later calls refused. */
static void fail_stream(xHttp1 *h, int status) {
    xHttpExchange *ex = h->ex;
    h->keep_alive = false;
    if (!ex->res.head_sent) write_status(h, status);
    h->state = XH1_HANDLER;
    /* The handler hears first: the close may find the client gone at once
     * (its output taken, its FIN read) and abort the exchange itself. */
    if (xHttpExchangeAbort(ex))
        h1_end(ex); /* finish closes after the output */
    else
        xConnCloseAfterFlush(h->conn);
}

/* The reader's taker moves the rest of a Content-Length body on from the
 * socket itself (xHttpBodyTaker); the buffer holds none of it. */
static xStep take_body(xHttp1 *h, xHttpExchange *ex) {
    xConn *conn = h->conn;
    size_t took = 0;
    xHttpTake r = ex->taker(ex, conn, h->body_left, &took, ex->reader_arg);
    if (h->ex != ex || h->state != XH1_STREAMING || xConnClosed(conn)) return XSTEP_AGAIN;
    if (took) {
        h->small_head_reads = true;
        h->next_start = h->body_pos; /* the buffer's end: none of the body is in it */
        h->body_left -= took;
        h->body_complete = h->body_left == 0;
        xConnSetTimeout(conn, xHttpContextOf(conn)->conf->body_timeout_ms);
        if (h->body_complete) {
            h->state = XH1_HANDLER; /* before the reader, which may answer at once */
            xHttpExchangeDeliverBody(ex, conn->in.data + h->body_pos, 0, true);
            return XSTEP_AGAIN;
        }
    }
    switch (r) {
    case XHTTP_TOOK: return XSTEP_AGAIN;
    case XHTTP_TAKE_READ: return XSTEP_NEED_INPUT; /* fill reads it into the buffer */
    case XHTTP_TAKE_ENDED:
        xConnClose(conn); /* the body was cut short: the handler's request is void */
        return XSTEP_STOP;
    case XHTTP_TAKE_LATER: break;
    }
    /* Paused until the sink has room; or the socket is drained, and fill
     * finds it so. */
    return xHttpExchangeWantsBody(ex) ? XSTEP_NEED_INPUT : XSTEP_STOP;
}

/* Hands the reader what the buffer holds of the body, then forgets it. */
static xStep step_stream(xHttp1 *h) {
    xHttpExchange *ex = h->ex;
    if (!xHttpExchangeWantsBody(ex)) return XSTEP_STOP; /* held back: so is the socket */
    xBuffer *in = &h->conn->in;
    size_t body_start = h->start + h->head_len;
    const char *piece = in->data + body_start;
    size_t n = 0; /* and stays 0 for a request without a body, complete from the start */
    if (h->body_complete) {
        /* nothing to read: only the end is owed */
    } else if (h->chunked_body) {
        ssize_t used = xHttp1ChunkedDecode(&h->chunked, in->data + h->raw_pos, in->len - h->raw_pos,
                                           in->data + body_start, &n, XH1_MAX_CHUNK_LINE,
                                           xHttpContextOf(h->conn)->conf->max_header_size);
        if (used < 0) {
            fail_stream(h, h->chunked.error_status);
            return XSTEP_STOP;
        }
        h->raw_pos += (size_t)used;
        h->body_complete = h->chunked.done;
        h->next_start = h->raw_pos;
    } else if (in->len == h->body_pos && ex->taker && h->conn->readable && xConnSplices(h->conn)) {
        return take_body(h, ex);
    } else {
        size_t avail = in->len - h->body_pos;
        n = avail < h->body_left ? avail : (size_t)h->body_left;
        piece = in->data + h->body_pos;
        h->body_pos += n;
        h->body_left -= n;
        h->body_complete = h->body_left == 0;
        h->next_start = h->body_pos;
    }
    bool end = h->body_complete;
    if (n || end) {
        if (end) h->state = XH1_HANDLER; /* before the reader, which may answer at once */
        xHttpExchangeDeliverBody(ex, piece, n, end);
        if (end || h->ex != ex || h->state != XH1_STREAMING) return XSTEP_AGAIN;
    }
    /* Delivered, or only framing decoded: what is left (an undecoded piece
     * of chunk framing) moves up behind the head, and the rest is room. */
    size_t keep = h->chunked_body ? in->len - h->raw_pos : 0;
    memmove(in->data + body_start, in->data + in->len - keep, keep);
    in->len = body_start + keep;
    h->raw_pos = h->body_pos = body_start;
    return n ? XSTEP_AGAIN : XSTEP_NEED_INPUT;
}

/* Before the read that may complete it, a parked head goes back into a
 * pooled block, and has an exchange again, dated from its first byte. */
static bool unpark_head(xHttp1 *h) {
    xConn *conn = h->conn;
    xHttpExchange *ex = xHttpExchangeAcquire(xHttpContextOf(conn));
    if (!ex || xBufferPoolUnpark(&conn->net->buffers, &conn->in) != XOK) {
        if (ex) xHttpExchangeRelease(xHttpContextOf(conn), ex);
        return false;
    }
    ex->req.start_us = h->parked_start_us;
    h->ex = ex;
    return true;
}

/* Makes room to read into; false when the current request cannot grow. */
static bool make_room(xHttp1 *h) {
    xConn *conn = h->conn;
    xBuffer *in = &conn->in;
    if (!in->data) {
        h->start = h->scanned = 0;
        if (h->reads_bulk && h->bulk_room > conn->net->buffers.block_size)
            return resize_input(h, h->bulk_room + XH1_BULK_SLACK);
        return xBufferPoolAcquire(&conn->net->buffers, in) == XOK;
    }
    if (in->len < in->cap) return true;
    /* Only park_head makes a buffer smaller than a block, and full. */
    if (in->cap < conn->net->buffers.block_size) return unpark_head(h);
    if (h->start > 0) {
        compact(h);
        return true;
    }
    if (h->state != XH1_CHUNKED) return false;
    const xHttpServerConf *conf = xHttpContextOf(conn)->conf;
    size_t ceiling = conf->max_body_size + conf->max_header_size + 2 * XH1_MAX_CHUNK_LINE;
    size_t cap = in->cap * 2 < ceiling ? in->cap * 2 : ceiling;
    return cap > in->cap && resize_input(h, cap);
}

/* Reads what the socket has. Returns false when processing must stop. */
static bool fill(xHttp1 *h) {
    xConn *conn = h->conn;
    if (!conn->readable) return false;
    if (!make_room(h)) {
        if (h->state == XH1_STREAMING)
            fail_stream(h, 413);
        else
            reject(h, h->state == XH1_HEAD ? 431 : 413);
        return false;
    }
    xBuffer *in = &conn->in;
    size_t room = in->cap - in->len;
    if (h->small_head_reads && h->state == XH1_HEAD && room > XH1_TAKEN_HEAD_READ) room = XH1_TAKEN_HEAD_READ;
    ssize_t n = xConnRecv(conn, in->data + in->len, room);
    if (n > 0) {
        in->len += (size_t)n;
        if (h->state == XH1_BODY || h->state == XH1_CHUNKED || h->state == XH1_STREAMING)
            xConnSetTimeout(conn, xHttpContextOf(conn)->conf->body_timeout_ms);
        return true;
    }
    if (n < 0 && errno == EINTR) return true;
    if (n < 0 && errno == EAGAIN) return false;
    if (h->state == XH1_STREAMING) {
        xConnClose(conn); /* the body was cut short: the handler's request is void */
        return false;
    }
    /* End of stream or a reset: answer nothing more, but let queued
     * responses go out first. */
    h->state = XH1_CLOSING;
    if (n < 0)
        xConnReadFailed(conn);
    else
        xConnCloseAfterFlush(conn);
    return false;
}

static bool can_take_requests(const xHttp1 *h) {
    const xConn *conn = h->conn;
    return xConnOpen(conn) && !h->waiting_flush && h->state != XH1_HANDLER && h->state != XH1_CLOSING &&
           h->state != XH1_SWITCHING;
}

/* Hands the connection, and the exchange of the request that switched, to
 * the protocol it switched to, and frees this protocol's state. */
static void switch_protocol(xHttp1 *h) {
    xConn *conn = h->conn;
    const xHttpTakeover *to = h->takeover;
    xHttpExchange *ex = h->ex;
    h->takeover = NULL;
    h->ex = NULL;
    if (!to->start(conn, ex, h->next_start, h->takeover_arg)) {
        xHttpExchangeRelease(xHttpContextOf(conn), ex);
        h->state = XH1_CLOSING;
        xConnClose(conn); /* a 101 went: nothing else may be said */
        return;
    }
    free(h);
}

/* Arms the timer for what the connection now waits for. */
static void arm_timer(xHttp1 *h) {
    xConn *conn = h->conn;
    if (xConnClosed(conn) || xConnLingering(conn) || xConnWriteBlocked(conn)) return;
    /* Before the first request the accept-time header timeout stands, so a
     * client that connects and sends nothing is dropped as early as a slow one. */
    if (h->state != XH1_HEAD || h->start != conn->in.len || h->waiting == XH1_WAIT_FIRST) return;
    if (!xConnHoldsInput(conn)) {
        h->waiting = XH1_WAIT_NEXT;
        xConnSetTimeout(conn, xHttpContextOf(conn)->conf->idle_timeout_ms);
    } else if (h->waiting != XH1_WAIT_HEAD) {
        /* Part of a TLS record: a head has begun, and has as long as one. */
        h->waiting = XH1_WAIT_HEAD;
        xConnSetTimeout(conn, xHttpContextOf(conn)->conf->header_timeout_ms);
    }
}

/* A head that stopped part way may wait so until the header timeout (a slow
 * client, or a slowloris): its bytes move out of the pooled block into an
 * allocation of their own size, and the block and the exchange go back to
 * their pools, so such a connection pins little more than it sent. The next
 * read takes them again (make_room); step_head leaves the head alone until
 * then, as nothing new came. Only for bytes the parser has seen all of and
 * found no end in, with no more input waiting, and not for a head so large
 * that copying it out and back at every read would cost more than it saves. */
static void park_head(xHttp1 *h) {
    xConn *conn = h->conn;
    xBuffer *in = &conn->in;
    size_t held = in->len - h->start;
    if (held > XH1_PARK_MAX || held != h->scanned || in->cap < conn->net->buffers.block_size ||
        conn->readable)
        return;
    if (!xBufferPoolPark(&conn->net->buffers, in, h->start)) return; /* it stays in the block */
    h->start = 0; /* h->scanned counts from the head's start: it stays */
    if (h->ex) {
        h->parked_start_us = h->ex->req.start_us;
        xHttpExchangeRelease(xHttpContextOf(conn), h->ex);
        h->ex = NULL;
    }
}

/* Gives the read buffer back to the pool once nothing in it is needed, so an
 * idle keep-alive connection holds no buffer; a partial head keeps only its
 * own bytes. */
static void release_input(xHttp1 *h) {
    xConn *conn = h->conn;
    if (h->state != XH1_HEAD) return;
    if (h->start != conn->in.len) {
        park_head(h);
        return;
    }
    xBufferPoolRelease(&conn->net->buffers, &conn->in);
    h->start = h->scanned = 0;
    if (h->ex) {
        xHttpExchangeRelease(xHttpContextOf(conn), h->ex);
        h->ex = NULL;
    }
}

static void process(xHttp1 *h) {
    xConn *conn = h->conn;
    xConnRetain(conn);
    h->in_batch = true;
    while (can_take_requests(h)) {
        xStep step = h->state == XH1_HEAD        ? step_head(h)
                     : h->state == XH1_BODY      ? step_body(h)
                     : h->state == XH1_STREAMING ? step_stream(h)
                                                 : step_chunked(h);
        if (step == XSTEP_STOP) break;
        if (step == XSTEP_NEED_INPUT && !fill(h)) break;
        if (xConnPending(conn) > XH1_OUTPUT_HIGH_WATER) {
            xConnFlush(conn);
            if (xConnWriteBlocked(conn)) h->waiting_flush = true;
        }
    }
    h->in_batch = false;
    if (h->state == XH1_SWITCHING && !xConnClosed(conn)) {
        switch_protocol(h); /* h is gone after this */
        xConnRelease(conn);
        return;
    }
    if (!xConnClosed(conn)) {
        if (xConnPending(conn)) xConnFlushSoon(conn);
        release_input(h);
        arm_timer(h);
    }
    xConnRelease(conn);
}

/* ---- Connection events ---- */

static void on_readable(xConn *conn) {
    xHttp1 *h = conn->proto_state;
    if ((h->state == XH1_HANDLER || h->state == XH1_STREAMING) && conn->hangup) {
        /* The client is gone while its handler works; nothing to answer. */
        xConnClose(conn);
        return;
    }
    process(h);
}

static void on_flushed(xConn *conn) {
    xHttp1 *h = conn->proto_state;
    if (!h->waiting_flush) {
        arm_timer(h); /* the send timeout no longer applies */
    } else {
        h->waiting_flush = false;
        process(h);
    }
    if (h->ex && h->ex->res.on_drain && !xConnClosed(conn)) xHttpExchangeCheckDrain(h->ex);
}

static void on_timeout(xConn *conn) {
    xHttp1 *h = conn->proto_state;
    if (h->state == XH1_HEAD && h->start == conn->in.len) {
        xConnClose(conn); /* idle, or connected and silent: close quietly */
    } else if (h->state == XH1_HEAD || h->state == XH1_BODY || h->state == XH1_CHUNKED) {
        reject(h, 408);
    } else if (h->state == XH1_STREAMING && !h->body_complete && xHttpExchangeWantsBody(h->ex)) {
        fail_stream(h, 408); /* the body stopped coming; a paused reader is not the client's fault */
    }
}

static void on_drain(xConn *conn) {
    xHttp1 *h = conn->proto_state;
    h->keep_alive = false;
    if (h->state == XH1_HEAD && h->start == conn->in.len && h->waiting == XH1_WAIT_FIRST) {
        xHttpDrainFresh(conn); /* its first request may be on its way: answered, then closed */
        return;
    }
    if (h->state == XH1_HEAD && h->start == conn->in.len) {
        /* Behind a load balancer (a stop grace says there is one), an idle
         * connection is the balancer's to close: closing it ourselves races
         * a request it may be sending on it, and HAProxy answers such a
         * loss by closing its own client's connection without a word. Its
         * next request is answered with Connection: close; the keep-alive
         * timeout or the shutdown deadline ends one that is never used. */
        if (xHttpContextOf(conn)->conf->stop_grace_ms) return;
        h->state = XH1_CLOSING;
        xConnCloseAfterFlush(conn);
    }
}

static void on_close(xConn *conn) {
    xHttp1 *h = conn->proto_state;
    if (!h->ex) return;
    if (h->state == XH1_HANDLER || h->state == XH1_STREAMING) {
        /* Without an abort callback the handler still holds the exchange and
         * ends it later; with one, it has let go and we end it here. */
        if (xHttpExchangeAbort(h->ex)) h1_end(h->ex);
    } else {
        xHttpExchangeRelease(xHttpContextOf(conn), h->ex);
        h->ex = NULL;
    }
}

static void on_free(xConn *conn) {
    xHttp1 *h = conn->proto_state;
    if (h->takeover) h->takeover->drop(h->takeover_arg);
    free(h);
}

static const xConnProtocol h1_protocol = {
    .on_readable = on_readable,
    .on_flushed = on_flushed,
    .on_timeout = on_timeout,
    .on_drain = on_drain,
    .on_close = on_close,
    .on_free = on_free,
};

bool xHttp1Accept(xHttpContext *ctx, int fd, const xNetAddr *addr) {
    xHttp1 *h = calloc(1, sizeof *h);
    if (!h) return false;
    xConn *conn = xConnCreate(&ctx->net, fd, addr, &h1_protocol, h);
    if (!conn) {
        free(h);
        return false;
    }
    h->conn = conn;
    h->state = XH1_HEAD;
    xConnSetTimeout(conn, ctx->conf->header_timeout_ms);
    return true;
}

/* Takes conn over, serving at once what it already holds. */
static bool start(xConn *conn, int refusal, const char *refusal_text) {
    xHttp1 *h = calloc(1, sizeof *h);
    if (!h) return false;
    h->conn = conn;
    h->state = XH1_HEAD;
    h->refusal = refusal;
    h->refusal_text = refusal_text;
    xConnSetTimeout(conn, xHttpContextOf(conn)->conf->header_timeout_ms);
    xConnSetProtocol(conn, &h1_protocol, h);
    return true;
}

bool xHttp1Start(xConn *conn) { return start(conn, 0, NULL); }

bool xHttp1StartRefusing(xConn *conn, int status, const char *text) { return start(conn, status, text); }
