/* client_internal.h — what the upstream client's files share (client.c,
 * h2.c): upstreams, pools, connections and requests, and the few steps of a
 * request's life that HTTP/2 streams take as HTTP/1.1 exchanges do. Nothing
 * outside src/xhttp/client/ includes this. */
#ifndef XHTTP_CLIENT_CLIENT_INTERNAL_H
#define XHTTP_CLIENT_CLIENT_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include <openssl/ssl.h>
#include <xhttp/client.h>

#include "xhttp/client/client_splice.h"
#include "xhttp/client/resolve.h"
#include "xhttp/client/tls.h"
#include "xhttp/http1/http1_parser.h"
#include "xnet/connection.h"

#define CLIENT_BLOCK (40u << 10)        /* a read buffer: the largest head and room behind it */
#define CLIENT_SPARE_BLOCKS 64          /* idle read/write blocks a client keeps */
#define CLIENT_REPLAY_MAX (64u << 10)   /* a request held whole for a retry up to this */
#define CLIENT_CHUNK_LINE 4096          /* a chunk-size line with its extensions */
#define CLIENT_TRAILERS_MAX (16u << 10) /* a trailer section */
#if defined(__SANITIZE_ADDRESS__)
#define CLIENT_SPARE_REQUESTS 0 /* ASan sees a request used after its end only if it is freed */
#else
/* Ended requests a client keeps for its next ones: as many as a worker has
 * in flight under a hundred clients (or h2's 100 streams), so a steady load
 * takes every request from here (at 64, a third of them came from malloc). */
#define CLIENT_SPARE_REQUESTS 128
#endif
#define CLIENT_SPARE_OUT (8u << 10) /* an ended request's out kept with it up to this */

struct xHttpUpstream {
    xHttpUpstreamConf conf; /* conf.resolvers points at a copy owned here */
    char host[256];         /* a name to look up, or the address literal */
    uint16_t port;
    bool literal;    /* host is an address: literal_addrs holds it */
    xClientTls *tls; /* https://: the context every connection's session comes from */
    bool h2;         /* conf.protocol: HTTP/2, one connection per pool */
    xResolvedAddrs literal_addrs;
    char authority[262];
};

/* Where a pool stands with its upstream's addresses. */
typedef enum xAddrState {
    XADDR_NONE,      /* never looked up (or the last lookup failed) */
    XADDR_RESOLVING, /* the first lookup is under way: new connections wait for it */
    XADDR_READY,     /* addrs holds addresses (a refresh may run: refreshing) */
} xAddrState;

typedef struct xClientConn xClientConn;
typedef struct xH2Session xH2Session;
typedef struct xUpstreamPool xUpstreamPool;

struct xUpstreamPool {
    xHttpUpstream *upstream;
    xHttpClient *client;
    xClientConn *idle;       /* most recently used first */
    xClientConn *connecting; /* connect(2) under way */
    unsigned idle_count, open;
    xHttpClientRequest *queue_head, *queue_tail;
    unsigned queued;
    uint64_t connections_opened, requests, reused;
    xAddrState addr_state;
    bool refreshing;     /* a lookup runs while addrs are still used */
    xResolver *resolver; /* made on first need */
    xResolvedAddrs addrs;
    SSL_SESSION *tls_session; /* the newest the upstream issued: offered by new connections */
    xH2Session *h2;           /* HTTP/2: the connection carrying the pool's streams, once made */
    unsigned draining;        /* HTTP/2: open connections past a GOAWAY, finishing their streams */
    unsigned addr_first;      /* the address a new connection tries first: the last that worked */
    uint64_t addrs_until_ms;  /* looked up again after this */
    unsigned lookup_gen;      /* counts lookups: a connection waits for the one it names */
    xUpstreamPool *next;
};

struct xHttpClient {
    xEventLoop *loop;
    bool destroying; /* xHttpClientDestroy under way: requests end untold */
    xNetContext net;
    xUpstreamPool *pools;
    /* Ended requests kept with their fields' room and out buffer: a request
     * each way costs no malloc, free or zeroing of them. */
    xHttpClientRequest *spare;
    unsigned spare_count;
};

typedef enum xClientConnState {
    XCC_CONNECTING, /* connect(2) under way: fd watched for writability */
    XCC_IDLE,       /* in the pool */
    XCC_BUSY,       /* carrying req */
    XCC_GONE,       /* closed; freed with its xConn's last reference */
} xClientConnState;

struct xClientConn {
    xUpstreamPool *pool;
    xClientConnState state;
    int fd;              /* while connecting; -1 while waiting for the name's addresses */
    int connect_errno;   /* connect(2) failed at once with this */
    unsigned addr_index; /* into the pool's addrs: the one being tried */
    unsigned addr_tries; /* addresses tried so far */
    unsigned wait_gen;   /* the lookup it waits for, with fd -1 */
    SSL *ssl;            /* TLS: the handshake under way on fd, before the xConn takes it */
    uint8_t preface[XHTTP_CLIENT_PREFACE_MAX]; /* sent first (a PROXY header): only requests */
    uint8_t preface_len;                       /* with the same one reuse the connection */
    xH2Session *h2;                            /* HTTP/2: the session it carries */
    xConn *conn;
    xHttpClientRequest *req;
    xClientConn *prev, *next;     /* the pool's idle list */
    xHttpClientError close_error; /* what its request is told when it closes */
    bool carried;                 /* a request has been answered on it */
    /* In the pool since this loop millisecond; the connection's timer, once
     * armed for the keep-alive, is left running across the requests that
     * take it (on_timeout looks at this when it fires). */
    uint64_t idle_since_ms;
    bool keepalive_armed; /* the timer was last armed for the keep-alive */
};

/* Where a request stands; the phase timer runs the one it names. */
typedef enum xRequestPhase {
    XREQ_QUEUED,     /* waiting for a connection: only the total timeout */
    XREQ_CONNECTING, /* connect_timeout */
    XREQ_SENDING,    /* the request is not all queued, or the socket holds it: send_timeout */
    XREQ_WAITING,    /* all of it gone, no response byte yet: first_byte_timeout */
    XREQ_RECEIVING,  /* the response is arriving: idle_timeout */
    XREQ_TUNNEL,     /* after a 101: bytes both ways, only the total timeout */
} xRequestPhase;

/* How the response's body is being read. */
typedef enum xBodyRead {
    XBODY_HEAD,        /* no head yet */
    XBODY_LENGTH,      /* body_left bytes (HTTP/2: Content-Length's, checked) */
    XBODY_CHUNKED,     /* the chunked decoder */
    XBODY_TRAILERS,    /* the trailer section after the last chunk */
    XBODY_UNTIL_CLOSE, /* everything until the upstream closes (HTTP/2: its END_STREAM) */
    XBODY_DONE,        /* read whole */
} xBodyRead;

struct xHttpClientRequest {
    xHttpClient *client;
    xUpstreamPool *pool;
    xClientConn *cc;
    xHttpClientHandlers handlers;
    void *arg;
    xRequestPhase phase;
    xBodyRead body;
    xTimer timer, total_timer;

    xBuffer out;         /* head and body bytes not yet given to a connection (or held for a retry) */
    size_t out_given;    /* bytes of out given to the current connection */
    bool held_whole;     /* out still holds every byte written: a retry can resend them */
    int64_t body_length; /* as opts said: -1 chunked */
    uint64_t body_written;
    bool body_ended; /* End called (or no body) */
    bool retry_on_stale;
    bool retried;
    bool head_request;
    bool upgrade; /* asked to switch protocols */
    bool started; /* on_head called */
    bool paused;
    bool wants_body;      /* the writer passed BODY_HIGH: tell it at BODY_LOW */
    bool keep_alive;      /* the response lets the connection carry another */
    unsigned in_callback; /* calls into the caller under way: a free waits for them */
    bool cancelled;       /* over: nothing more reaches the caller */
    bool free_owed;       /* over while in a callback: freed when it returns */

    size_t head_scanned; /* the parser's prev_len */
    int64_t body_left;
    xHttpClientBodyTaker body_taker; /* xHttpClientRequestTakeBody's, or NULL */
    void *body_taker_arg;
    xHttp1Chunked chunked;
    xHttp1Header *fields; /* fields_cap of room: at least max_fields */
    size_t fields_cap;
    uint8_t preface_len; /* of preface */
    /* HTTP/2: the request as a stream of the pool's session. */
    bool h2;
    xH2Session *session; /* while it is a stream */
    uint32_t stream_id;
    int64_t send_window;                   /* the stream's, from the peer's settings and updates */
    bool end_sent;                         /* END_STREAM went */
    bool end_received;                     /* END_STREAM came */
    uint8_t refusals;                      /* times a stream of it was refused (RFC 9113 §8.7) */
    uint32_t recv_unacked;                 /* DATA bytes delivered, not yet given back as window */
    xBuffer h2_head;                       /* the HPACK block of its head, made at Start, kept for a
                                              refused stream's retry until the answer's head */
    xBuffer h2_held;                       /* DATA that came while paused */
    xHttpClientRequest *h2_prev, *h2_next; /* the session's streams */
    xHttpClientRequest *next_queued;       /* or the next spare */
    /* Not zeroed at Start (everything above is): written before they are read. */
    char detail[160]; /* on_error's more on what failed (xHttpClientRequestErrorDetail): "" until then */
    uint8_t preface[XHTTP_CLIENT_PREFACE_MAX]; /* opts.preface, preface_len bytes */
};

/* Calls into the caller, keeping req alive across a Cancel from within. */
#define CALL(req, expr)                                                                                      \
    do {                                                                                                     \
        (req)->in_callback++;                                                                                \
        expr;                                                                                                \
        (req)->in_callback--;                                                                                \
    } while (0)

/* The request is over: freed now, or once the callback under way returns. */
void xClientRelease(xHttpClientRequest *req);
/* After a call into the caller: false when the request is over. */
bool xClientSurvived(xHttpClientRequest *req);
/* Ends req with error (on_error), unless it is over already. */
void xClientFail(xHttpClientRequest *req, xHttpClientError error);
/* Moves req to phase, its timer running that phase's timeout. */
void xClientEnter(xHttpClientRequest *req, xRequestPhase phase);
/* Restarts the timer of req's phase (progress). */
void xClientArm(xHttpClientRequest *req);
/* A writer held back at BODY_HIGH hears when the queue is down to BODY_LOW. */
void xClientMaybeWantBody(xHttpClientRequest *req);
/* An HTTP/2 session's connection closed: counted out, the queue moves on. */
void xClientConnClosed(xClientConn *cc);
/* The next queued request of p (unqueued), or NULL. */
xHttpClientRequest *xClientDequeue(xUpstreamPool *p);
/* Opens connections for queued requests while the pool has room. */
void xClientStartQueued(xUpstreamPool *p);
/* Puts req, on no connection and no stream, back at the head of its pool's
 * queue (only the total timeout runs) and lets the queue move on. */
void xClientRequeue(xHttpClientRequest *req);

/* h2.c: HTTP/2 (h2c by prior knowledge, or h2 by ALPN) to an upstream, one
 * connection per pool carrying every request as a stream. */
/* The connection cc is made (TLS done): it becomes the pool's session and
 * takes cc->req and what is queued. False when it could not (cc closed). */
bool xClientH2Begin(xClientConn *cc);
/* Starts req as a stream on the pool's session if it has room; false: not. */
bool xClientH2Take(xH2Session *s, xHttpClientRequest *req);
/* Writes what req->out holds as DATA, as far as the windows allow. */
void xClientH2Push(xHttpClientRequest *req);
/* Takes req off its stream (RST_STREAM unless it ended) without a call. */
void xClientH2Detach(xHttpClientRequest *req);
/* Paused: received data waits, the window stays shut; resumed: delivered. */
void xClientH2Resume(xHttpClientRequest *req);
/* Encodes req's request head as an HPACK block (stateless) into req->h2_head. */
bool xClientH2EncodeHead(xHttpClientRequest *req, const xHttpClientRequestOpts *o);

#endif
