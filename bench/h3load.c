/* h3load: an HTTP/3 load generator for xkbench, since Debian's h2load has no HTTP/3.
 *
 * One thread, one epoll loop: -c QUIC connections (ngtcp2's client API, GnuTLS as its TLS, the
 * server's certificate not verified), -m concurrent request streams on each, -n requests in all or -D seconds
 * after --warm-up-time. GET, or POST with -d FILE or --body-size N; -H 'name: value' adds a header (as
 * h2load's -H), -i FILE takes the paths from a file of URIs, one a line, asked in turn (as h2load's -i:
 * scheme, host and port come from the first line, the command's URL is then left out). It prints h2load's
 * summary lines (finished in, requests, status codes, time for request) and its "Main benchmark duration"
 * markers, so xkbench's h2load parser and CPU window read it unchanged.
 *
 *   h3load -t1 -cC -mM (-n N | -D SECONDS [--warm-up-time=SECONDS]) [-d FILE | --body-size N]
 *          [-H 'NAME: VALUE']... [--hold=SECONDS] [--idle-timeout=SECONDS] [--no-gso] [--no-gro]
 *          [--qpack-capacity=BYTES] (https://HOST:PORT/PATH | -i URI_FILE)
 *
 * --qpack-capacity: the SETTINGS_QPACK_MAX_TABLE_CAPACITY the client announces (0 without it, as
 * nghttp3's clients: the server's responses then use the static table only, as h2load's do not);
 * with it, a server may keep repeated response fields in the dynamic table, as browsers (which
 * announce one) let it. Blocked streams are announced as 0: a section never waits for an insert.
 *
 * Its HTTP/3 is lean, as wrk's HTTP/1.1 is, so that one core of it outruns the servers it measures:
 * a server that waits for its client sleeps and wakes between turns, and pays for that per request.
 * Each path's request is encoded once (a HEADERS frame of static-table QPACK, and for a POST the DATA
 * frame's header) and every stream sends those same bytes; responses are read with xKit's own frame
 * reader and QPACK decoder (fuzzed against nghttp3's), which keep the server's dynamic table and
 * acknowledge its sections. It took nghttp3's place, which with its allocations was 73% of h3load's
 * CPU: h3load was the bottleneck at about 310,000 requests a second against xKit's one core.
 *
 * --hold: with -n, each connection takes an even share of the requests, and once all are answered
 * the connections stay open and idle for SECONDS ("all connections idle" is printed then), so a
 * bench can read the server's memory per idle QUIC connection.
 *
 * --idle-timeout: the max_idle_timeout the client announces (default 60 s). A connection idles
 * from its first answer until the last of the others has opened, which for thousands on a loaded
 * machine can take longer than that; a hold that must keep them all open raises it (the server's
 * own idle timeout counts too: the shorter one applies).
 *
 * Packets go out as browsers and quic-go send them: a run of same-size packets in one sendmsg with
 * UDP_SEGMENT (GSO), which a server with UDP_GRO on receives as one message; --no-gso sends one
 * packet per send(), as where the kernel refuses UDP_SEGMENT (which is then also the fall-back).
 * They come in with UDP_GRO on, as quic-go's client has it: on loopback the kernel's delivery of a
 * server's GSO run to a socket without it, cut into a datagram each, is work done in the server's
 * sendmsg and counted as the server's CPU, which across a network it is not; --no-gro leaves it off. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <math.h>
#include <netdb.h>
#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <netinet/udp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "xhttp/http3/frame.h" /* xKit's HTTP/3 frames and QPACK: the responses' reader */
#include "xhttp/http3/qpack.h"
#include "xnet/quic/ngtcp2_compat.h" /* the server's names for what ngtcp2 1.x renamed */

#define MAX_UDP_PAYLOAD 1452
#define GSO_MAX 40 /* packets per sendmsg, as the server's batches */
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif
#define MAX_EXTRA_HEADERS 8
#define TLS_PRIORITY "NORMAL:-VERS-ALL:+VERS-TLS1.3:%DISABLE_TLS13_COMPAT_MODE"

/* Where the run stands: requests are counted only in MEASURING. */
typedef enum { PHASE_WARMING_UP, PHASE_MEASURING, PHASE_DRAINING } Phase;

typedef struct {
    int connections, streams, threads;
    long long requests;            /* -n, or 0 with -D */
    double duration, warmup, hold; /* seconds */
    double idle_timeout;           /* seconds: the transport's max_idle_timeout */
    bool no_gso;                   /* --no-gso, or the kernel refused UDP_SEGMENT */
    bool no_gro;                   /* --no-gro */
    size_t qpack_capacity;         /* --qpack-capacity */
    const uint8_t *body;           /* POST body, or NULL for GET */
    size_t body_size;
    char host[256], port[16], authority[300], path[2048];
    xStr extra_names[MAX_EXTRA_HEADERS], extra_values[MAX_EXTRA_HEADERS]; /* -H, names lower-cased */
    size_t extra_count;
    char **paths; /* -i: the paths asked in turn, or NULL for path alone */
    size_t path_count;
} Options;

typedef struct Client Client;

/* Bytes a stream or a response keeps across reads: a frame or an instruction cut by a packet. */
typedef struct {
    uint8_t *data;
    size_t len, cap;
} Held;

typedef struct Request {
    Client *client;
    int64_t stream_id;
    uint64_t started_ns;
    struct Request *next; /* in the client's queue of requests with bytes left to send */
    ngtcp2_vec out[3];    /* what is left to send: the HEADERS frame, a DATA frame's header, the body */
    size_t nout;
    bool queued;
    xH3FrameReader reader; /* the response's frames */
    Held held;
    int status;
    bool counted; /* started while measuring */
} Request;

/* A piece of our QPACK decoder stream: kept until the server acknowledged it, as ngtcp2 asks. */
typedef struct Piece {
    struct Piece *next;
    size_t len, sent;
    uint8_t bytes[];
} Piece;

/* One of the server's unidirectional streams: its type once read (RFC 9114 §6.2). */
typedef struct {
    Client *client;
    int64_t id;
    uint64_t type;
    bool typed;
    Held held;
} UniIn;
#define MAX_UNI_IN 8
#define UNI_CONTROL 0x00
#define UNI_QPACK_ENCODER 0x02

/* One path's request, encoded once and sent by every stream that asks it. */
typedef struct {
    uint8_t *bytes;
    size_t len;
} Block;

/* NOT_STARTED first: calloc'ed clients start there; at most MAX_HANDSHAKING handshake at once, as a
 * burst of thousands of Initial packets overflows the server's socket buffer. */
typedef enum { CONN_NOT_STARTED, CONN_HANDSHAKING, CONN_READY, CONN_CLOSED } ConnState;
#define MAX_HANDSHAKING 64

struct Client {
    ngtcp2_crypto_conn_ref ref;
    int fd;
    ngtcp2_conn *conn;
    gnutls_session_t tls;
    ngtcp2_path_storage path;
    struct sockaddr_storage local, remote;
    socklen_t local_len, remote_len;
    ConnState state;
    /* ngtcp2_conn_get_expiry after the last flush (every read and timer ends with one): the loop
     * looks at each connection's on every turn, and asking ngtcp2 for it 10,000 times a turn was
     * a quarter of h3load's CPU while 10,000 connections opened. */
    uint64_t expiry;
    int in_flight;
    long long submitted;
    /* HTTP/3, once the handshake is done: */
    bool h3;
    int64_t control_id, decoder_id; /* our streams; decoder_id -1 without a dynamic table */
    size_t control_sent;
    Piece *pieces, *pieces_tail; /* the decoder stream's bytes: unacknowledged, then unsent */
    uint64_t decoder_acked;      /* of the first piece's bytes */
    Request *queue, *queue_tail; /* requests with bytes to send */
    xQpackDecoder qpack;         /* the server's sections, its table as its encoder stream says */
    uint64_t last_section;       /* the decoder's kept section (xQpackSection.remembered) */
    int last_status;             /* and its :status */
    UniIn uni[MAX_UNI_IN];
    size_t uni_count;
};

typedef struct {
    long long started, done, succeeded, failed, errored, statuses[6];
    double latency_sum, latency_sq_sum, latency_min, latency_max; /* µs */
} Tally;

static Options opts;
static Phase phase;
static Tally tally;
static long long issued; /* requests submitted, for -n */
static gnutls_certificate_credentials_t credentials;
static struct addrinfo *target; /* the server's address */
static Client *clients; /* global, so that what is still open at exit stays reachable (LeakSanitizer) */
static Block *blocks;   /* a request per path: opts.paths' order, or the one path */
static uint8_t data_header[XH3_FRAME_HEADER_MAX]; /* a POST body's DATA frame header */
static size_t data_header_len;
static uint8_t control_bytes[1 + XH3_SETTINGS_FRAME_MAX]; /* our control stream: its type, SETTINGS */
static size_t control_len;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void fill_random(uint8_t *dest, size_t len) { gnutls_rnd(GNUTLS_RND_RANDOM, dest, len); }

/* --- requests ------------------------------------------------------------------------------- */

/* Encodes each path's request once: :method, :scheme, :authority, :path, user-agent, the -H
 * fields and a POST's content-length, static-table QPACK in a HEADERS frame. */
static void encode_requests(void) {
    size_t count = opts.paths ? opts.path_count : 1;
    blocks = calloc(count, sizeof *blocks);
    char length[24];
    snprintf(length, sizeof length, "%zu", opts.body_size);
    for (size_t i = 0; i < count; i++) {
        const char *path = opts.paths ? opts.paths[i] : opts.path;
        xStr names[6 + MAX_EXTRA_HEADERS] = {xStrFromC(":method"), xStrFromC(":scheme"),
                                             xStrFromC(":authority"), xStrFromC(":path"),
                                             xStrFromC("user-agent")};
        xStr values[6 + MAX_EXTRA_HEADERS] = {xStrFromC(opts.body ? "POST" : "GET"), xStrFromC("https"),
                                              xStrFromC(opts.authority), xStrFromC(path),
                                              xStrFromC("h3load")};
        size_t n = 5, bound = XQPACK_PREFIX_SIZE;
        for (size_t k = 0; k < opts.extra_count; k++, n++)
            names[n] = opts.extra_names[k], values[n] = opts.extra_values[k];
        if (opts.body) names[n] = xStrFromC("content-length"), values[n++] = xStrFromC(length);
        for (size_t k = 0; k < n; k++) bound += XQPACK_FIELD_BOUND(names[k].len, values[k].len);
        uint8_t *section = malloc(bound), *end = xQpackEncodeBegin(section);
        for (size_t k = 0; k < n; k++) end = xQpackEncodeField(end, names[k], values[k]);
        size_t len = (size_t)(end - section);
        uint8_t *block = malloc(XH3_FRAME_HEADER_MAX + len);
        uint8_t *at = xH3FrameWriteHeader(block, XH3_FRAME_HEADERS, len);
        memcpy(at, section, len);
        blocks[i] = (Block){block, (size_t)(at - block) + len};
        free(section);
    }
    if (opts.body)
        data_header_len =
            (size_t)(xH3FrameWriteHeader(data_header, XH3_FRAME_DATA, opts.body_size) - data_header);
    xH3Settings settings;
    xH3SettingsDefaults(&settings);
    settings.qpack_max_table_capacity = opts.qpack_capacity;
    control_bytes[0] = UNI_CONTROL;
    control_len = (size_t)(xH3SettingsWrite(control_bytes + 1, &settings) - control_bytes);
}

static bool wants_more(const Client *client) {
    if (phase == PHASE_DRAINING) return false;
    if (opts.hold > 0 && client->submitted >= (opts.requests + opts.connections - 1) / opts.connections)
        return false;
    return opts.requests == 0 || issued < opts.requests;
}

static void enqueue(Client *client, Request *request) {
    request->queued = true;
    request->next = NULL;
    if (client->queue_tail)
        client->queue_tail->next = request;
    else
        client->queue = request;
    client->queue_tail = request;
}

static void submit_requests(Client *client) {
    while (client->state == CONN_READY && client->in_flight < opts.streams && wants_more(client) &&
           ngtcp2_conn_get_streams_bidi_left(client->conn) > 0) {
        int64_t stream_id;
        Request *request = calloc(1, sizeof *request);
        if (ngtcp2_conn_open_bidi_stream(client->conn, &stream_id, request) != 0) {
            free(request);
            return;
        }
        const Block *block = &blocks[opts.paths ? issued % (long long)opts.path_count : 0];
        *request = (Request){.client = client,
                             .stream_id = stream_id,
                             .started_ns = now_ns(),
                             .counted = phase == PHASE_MEASURING,
                             .out = {{block->bytes, block->len}},
                             .nout = 1};
        if (opts.body) {
            request->out[1] = (ngtcp2_vec){data_header, data_header_len};
            request->out[2] = (ngtcp2_vec){(uint8_t *)opts.body, opts.body_size};
            request->nout = opts.body_size ? 3 : 2;
        }
        xH3FrameReaderInit(&request->reader, XH3_STREAM_REQUEST, 64 << 10);
        enqueue(client, request);
        client->in_flight++;
        client->submitted++;
        issued++;
        if (request->counted) tally.started++;
    }
}

static void finish_request(Request *request, bool closed_cleanly) {
    request->client->in_flight--;
    if (request->counted && phase == PHASE_MEASURING) {
        double us = (double)(now_ns() - request->started_ns) / 1e3;
        tally.done++;
        if (!closed_cleanly || request->status == 0) {
            tally.failed++;
        } else {
            int klass = request->status / 100;
            tally.statuses[klass >= 1 && klass <= 5 ? klass : 0]++;
            if (klass == 2 || klass == 3) tally.succeeded++;
        }
        tally.latency_sum += us;
        tally.latency_sq_sum += us * us;
        if (tally.done == 1 || us < tally.latency_min) tally.latency_min = us;
        if (us > tally.latency_max) tally.latency_max = us;
    }
    free(request->held.data);
    free(request);
}

/* --- HTTP/3 ---------------------------------------------------------------------------------- */

static void consume(Client *client, int64_t stream_id, size_t n) {
    ngtcp2_conn_extend_max_stream_offset(client->conn, stream_id, n);
    ngtcp2_conn_extend_max_offset(client->conn, n);
}

/* Reads as much of in as parse takes, after what an earlier call held back; holds what it left.
 * -1 when parse failed (it returns SIZE_MAX). */
static int feed(Held *held, const uint8_t *in, size_t len, size_t (*parse)(void *, const uint8_t *, size_t),
                void *arg) {
    if (held->len) {
        if (held->len + len > held->cap) {
            held->cap = (held->len + len) * 2;
            held->data = realloc(held->data, held->cap);
        }
        memcpy(held->data + held->len, in, len);
        in = held->data, len = held->len + len;
    }
    size_t used = parse(arg, in, len);
    if (used == SIZE_MAX) return -1;
    size_t rest = len - used;
    if (held->len) {
        memmove(held->data, held->data + used, rest);
    } else if (rest) {
        if (rest > held->cap) {
            held->cap = rest * 2;
            held->data = realloc(held->data, held->cap);
        }
        memcpy(held->data, in + used, rest);
    }
    held->len = rest;
    return 0;
}

/* A response's HEADERS: its :status (the trailers' section is decoded for the table only). */
static int read_head(Request *request, xStr payload) {
    Client *client = request->client;
    const uint8_t *in = (const uint8_t *)payload.data;
    if (request->status == 0 && client->last_section &&
        xQpackDecodeAgain(&client->qpack, client->last_section, (uint64_t)request->stream_id, in,
                          payload.len)) {
        request->status = client->last_status;
        return 0;
    }
    xHpackField fields[64];
    char scratch[8192];
    xQpackSection section = {.fields = fields,
                             .max_fields = 64,
                             .scratch = scratch,
                             .scratch_size = sizeof scratch,
                             .max_size = 64 << 10};
    xQpackResult r =
        xQpackDecodeSection(&client->qpack, (uint64_t)request->stream_id, in, payload.len, &section);
    if (r != XQPACK_OK && r != XQPACK_TOO_LARGE) return -1; /* blocked too: we allow no blocked stream */
    if (request->status) return 0;
    for (size_t i = 0; i < section.count; i++) {
        if (!xStrEqualsC(section.fields[i].name, ":status")) continue;
        xStr v = section.fields[i].value;
        int status = 0;
        for (size_t k = 0; k < v.len && k < 3 && v.data[k] >= '0' && v.data[k] <= '9'; k++)
            status = status * 10 + v.data[k] - '0';
        request->status = status;
    }
    client->last_section = section.remembered;
    client->last_status = request->status;
    return 0;
}

static size_t read_response(void *arg, const uint8_t *in, size_t len) {
    Request *request = arg;
    size_t at = 0;
    while (at < len) {
        size_t used;
        xH3Frame frame;
        xH3ReadStatus status = xH3FrameRead(&request->reader, in + at, len - at, &used, &frame);
        at += used;
        if (status == XH3_READ_ERROR) return SIZE_MAX;
        if (status == XH3_READ_MORE) break;
        if (status == XH3_READ_FRAME && frame.type == XH3_FRAME_HEADERS &&
            read_head(request, frame.payload) != 0)
            return SIZE_MAX;
    }
    return at;
}

/* A server's unidirectional stream: its type, then for its QPACK encoder stream the instructions
 * that fill our table; its control stream and decoder stream (which has nothing for us: our
 * requests use no table) are only consumed, as are reserved types. */
static size_t read_uni(void *arg, const uint8_t *in, size_t len) {
    UniIn *uni = arg;
    size_t at = 0;
    if (!uni->typed) {
        if (!(at = xH3VarintRead(in, len, &uni->type))) return 0;
        uni->typed = true;
    }
    if (uni->type != UNI_QPACK_ENCODER) return len;
    size_t used;
    if (xQpackDecoderReadEncoder(&uni->client->qpack, in + at, len - at, &used) != XQPACK_OK) return SIZE_MAX;
    return at + used;
}

static UniIn *uni_in(Client *client, int64_t stream_id) {
    for (size_t i = 0; i < client->uni_count; i++)
        if (client->uni[i].id == stream_id) return &client->uni[i];
    if (client->uni_count == MAX_UNI_IN) return NULL; /* more than a server opens: left unread */
    UniIn *uni = &client->uni[client->uni_count++];
    *uni = (UniIn){.client = client, .id = stream_id};
    return uni;
}

/* Queues the decoder stream's acknowledgments and increments due: once per flush, so that a read's
 * sections are acknowledged in one STREAM frame, as nghttp3 does, not one each. */
static void take_decoder_output(Client *client) {
    if (client->decoder_id < 0) return;
    xStr out = xQpackDecoderTakeOutput(&client->qpack);
    if (!out.len) return;
    Piece *piece = malloc(sizeof *piece + out.len);
    *piece = (Piece){.len = out.len};
    memcpy(piece->bytes, out.data, out.len);
    if (client->pieces_tail)
        client->pieces_tail->next = piece;
    else
        client->pieces = piece;
    client->pieces_tail = piece;
}

static int setup_h3(Client *client) {
    if (xQpackDecoderInit(&client->qpack, opts.qpack_capacity, 0) != 0) return -1;
    client->decoder_id = -1;
    if (ngtcp2_conn_open_uni_stream(client->conn, &client->control_id, NULL) != 0) return -1;
    if (opts.qpack_capacity) {
        if (ngtcp2_conn_open_uni_stream(client->conn, &client->decoder_id, NULL) != 0) return -1;
        static const uint8_t decoder_type = 0x03;
        Piece *piece = malloc(sizeof *piece + 1);
        *piece = (Piece){.len = 1};
        piece->bytes[0] = decoder_type;
        client->pieces = client->pieces_tail = piece;
    }
    client->h3 = true;
    return 0;
}

/* --- ngtcp2 callbacks ----------------------------------------------------------------------- */

static int on_handshake_completed(ngtcp2_conn *conn, void *user_data) {
    (void)conn;
    Client *client = user_data;
    if (setup_h3(client) != 0) return NGTCP2_ERR_CALLBACK_FAILURE;
    client->state = CONN_READY;
    submit_requests(client);
    return 0;
}

static int on_recv_stream_data(ngtcp2_conn *conn, uint32_t flags, int64_t stream_id, uint64_t offset,
                               const uint8_t *data, size_t len, void *user_data, void *stream_user_data) {
    (void)conn, (void)offset, (void)flags;
    Client *client = user_data;
    UniIn *uni;
    int rv = 0;
    if (stream_user_data)
        rv = feed(&((Request *)stream_user_data)->held, data, len, read_response, stream_user_data);
    else if (len && (stream_id & 0x3) == 0x3 && (uni = uni_in(client, stream_id)))
        rv = feed(&uni->held, data, len, read_uni, uni);
    if (rv != 0) return NGTCP2_ERR_CALLBACK_FAILURE;
    consume(client, stream_id, len);
    return 0;
}

static int on_acked_stream_data_offset(ngtcp2_conn *conn, int64_t stream_id, uint64_t offset, uint64_t len,
                                       void *user_data, void *stream_user_data) {
    (void)conn, (void)offset, (void)stream_user_data;
    Client *client = user_data;
    if (stream_id != client->decoder_id) return 0; /* requests and SETTINGS are static bytes */
    /* Acknowledged in order: the pieces wholly acknowledged go. */
    client->decoder_acked += len;
    while (client->pieces && client->pieces->sent == client->pieces->len &&
           client->decoder_acked >= client->pieces->len) {
        Piece *piece = client->pieces;
        client->decoder_acked -= piece->len;
        client->pieces = piece->next;
        if (!client->pieces) client->pieces_tail = NULL;
        free(piece);
    }
    return 0;
}

static int on_stream_close(ngtcp2_conn *conn, uint32_t flags, int64_t stream_id, uint64_t app_error_code,
                           void *user_data, void *stream_user_data) {
    (void)conn, (void)stream_id;
    Client *client = user_data;
    Request *request = stream_user_data;
    if (!request) return 0;
    bool clean = !(flags & NGTCP2_STREAM_CLOSE_FLAG_APP_ERROR_CODE_SET) || app_error_code == XH3_NO_ERROR;
    /* A response cut inside a frame is no clean one. */
    clean = clean && request->held.len == 0 && request->reader.state != XH3_READER_IN_DATA;
    if (request->queued) {
        Request **link = &client->queue, *prev = NULL;
        while (*link != request) prev = *link, link = &(*link)->next;
        *link = request->next;
        if (client->queue_tail == request) client->queue_tail = prev;
    }
    finish_request(request, clean);
    submit_requests(client);
    return 0;
}

static int on_extend_max_stream_data(ngtcp2_conn *conn, int64_t stream_id, uint64_t max_data, void *user_data,
                                     void *stream_user_data) {
    (void)conn, (void)stream_id, (void)max_data;
    Request *request = stream_user_data;
    if (request && !request->queued && request->nout) enqueue(user_data, request);
    return 0;
}

static int on_extend_max_local_streams_bidi(ngtcp2_conn *conn, uint64_t max_streams, void *user_data) {
    (void)conn, (void)max_streams;
    submit_requests(user_data);
    return 0;
}

static void on_rand(uint8_t *dest, size_t len, const ngtcp2_rand_ctx *ctx) {
    (void)ctx;
    fill_random(dest, len);
}

static int on_new_connection_id(ngtcp2_conn *conn, ngtcp2_cid *cid, uint8_t *token, size_t cidlen,
                                void *user_data) {
    (void)conn, (void)user_data;
    fill_random(cid->data, cidlen);
    cid->datalen = cidlen;
    fill_random(token, NGTCP2_STATELESS_RESET_TOKENLEN);
    return 0;
}

static const ngtcp2_callbacks QUIC_CALLBACKS = {
    .client_initial = ngtcp2_crypto_client_initial_cb,
    .recv_crypto_data = ngtcp2_crypto_recv_crypto_data_cb,
    .handshake_completed = on_handshake_completed,
    .encrypt = ngtcp2_crypto_encrypt_cb,
    .decrypt = ngtcp2_crypto_decrypt_cb,
    .hp_mask = ngtcp2_crypto_hp_mask_cb,
    .recv_stream_data = on_recv_stream_data,
    .acked_stream_data_offset = on_acked_stream_data_offset,
    .stream_close = on_stream_close,
    .recv_retry = ngtcp2_crypto_recv_retry_cb,
    .extend_max_local_streams_bidi = on_extend_max_local_streams_bidi,
    .rand = on_rand,
    .get_new_connection_id = on_new_connection_id,
    .update_key = ngtcp2_crypto_update_key_cb,
    .extend_max_stream_data = on_extend_max_stream_data,
    .delete_crypto_aead_ctx = ngtcp2_crypto_delete_crypto_aead_ctx_cb,
    .delete_crypto_cipher_ctx = ngtcp2_crypto_delete_crypto_cipher_ctx_cb,
    .get_path_challenge_data = ngtcp2_crypto_get_path_challenge_data_cb,
    .version_negotiation = ngtcp2_crypto_version_negotiation_cb,
};

/* --- connections ---------------------------------------------------------------------------- */

static ngtcp2_conn *conn_of_ref(ngtcp2_crypto_conn_ref *ref) { return ((Client *)ref)->conn; }

static void close_client(Client *client, int epfd, bool failed) {
    if (client->state == CONN_CLOSED || client->state == CONN_NOT_STARTED) return;
    if (failed && phase == PHASE_MEASURING) tally.errored += client->in_flight;
    client->state = CONN_CLOSED;
    epoll_ctl(epfd, EPOLL_CTL_DEL, client->fd, NULL);
}

static int start_client(Client *client, const struct addrinfo *server, int epfd) {
    client->state = CONN_HANDSHAKING;
    client->ref.get_conn = conn_of_ref;
    client->ref.user_data = client;
    client->fd = socket(server->ai_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (client->fd < 0 || connect(client->fd, server->ai_addr, server->ai_addrlen) != 0) return -1;
    int one = 1;
    if (!opts.no_gro) setsockopt(client->fd, SOL_UDP, UDP_GRO, &one, sizeof one); /* else one at a time */
    memcpy(&client->remote, server->ai_addr, server->ai_addrlen);
    client->remote_len = server->ai_addrlen;
    client->local_len = sizeof client->local;
    getsockname(client->fd, (struct sockaddr *)&client->local, &client->local_len);
    ngtcp2_path_storage_init(&client->path, (struct sockaddr *)&client->local, client->local_len,
                             (struct sockaddr *)&client->remote, client->remote_len, NULL);

    ngtcp2_cid dcid = {.datalen = 18}, scid = {.datalen = 17};
    fill_random(dcid.data, dcid.datalen);
    fill_random(scid.data, scid.datalen);
    ngtcp2_settings settings;
    ngtcp2_settings_default(&settings);
    settings.initial_ts = now_ns();
    settings.handshake_timeout = 5 * NGTCP2_SECONDS; /* a server that never answers fails the run */
    ngtcp2_transport_params params;
    ngtcp2_transport_params_default(&params);
    params.initial_max_stream_data_bidi_local = 1 << 20;
    params.initial_max_stream_data_uni = 1 << 20;
    params.initial_max_data = 64 << 20;
    params.initial_max_streams_uni = 100;
    params.max_idle_timeout = (ngtcp2_duration)(opts.idle_timeout * NGTCP2_SECONDS);
    if (ngtcp2_conn_client_new(&client->conn, &dcid, &scid, &client->path.path, NGTCP2_PROTO_VER_V1,
                               &QUIC_CALLBACKS, &settings, &params, NULL, client) != 0)
        return -1;

    static const gnutls_datum_t h3 = {(unsigned char *)"h3", 2};
    if (gnutls_init(&client->tls, GNUTLS_CLIENT | GNUTLS_ENABLE_EARLY_DATA | GNUTLS_NO_END_OF_EARLY_DATA) <
            0 ||
        gnutls_priority_set_direct(client->tls, TLS_PRIORITY, NULL) < 0 ||
        ngtcp2_crypto_gnutls_configure_client_session(client->tls) != 0 ||
        gnutls_credentials_set(client->tls, GNUTLS_CRD_CERTIFICATE, credentials) < 0 ||
        gnutls_alpn_set_protocols(client->tls, &h3, 1, GNUTLS_ALPN_MANDATORY) < 0)
        return -1;
    gnutls_server_name_set(client->tls, GNUTLS_NAME_DNS, "localhost", strlen("localhost"));
    gnutls_session_set_ptr(client->tls, &client->ref);
    ngtcp2_conn_set_tls_native_handle(client->conn, client->tls);

    struct epoll_event event = {.events = EPOLLIN, .data.ptr = client};
    return epoll_ctl(epfd, EPOLL_CTL_ADD, client->fd, &event);
}

/* Sends len bytes of packets of segment bytes each (the last maybe shorter) on the client's
 * socket: one sendmsg with UDP_SEGMENT, or one send per packet without GSO. -1 when it failed. */
static int send_packets(Client *client, const uint8_t *data, size_t len, size_t segment) {
    if (len > segment && !opts.no_gso) {
        union {
            char buf[CMSG_SPACE(sizeof(uint16_t))];
            struct cmsghdr align;
        } control = {0};
        struct iovec iov = {(void *)data, len};
        struct msghdr m = {.msg_iov = &iov,
                           .msg_iovlen = 1,
                           .msg_control = control.buf,
                           .msg_controllen = sizeof control.buf};
        struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
        cm->cmsg_level = SOL_UDP, cm->cmsg_type = UDP_SEGMENT, cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
        uint16_t size = (uint16_t)segment;
        memcpy(CMSG_DATA(cm), &size, sizeof size);
        if (sendmsg(client->fd, &m, 0) >= 0 || errno == EAGAIN || errno == ENOBUFS) return 0;
        if (errno != EIO && errno != EINVAL) return -1;
        opts.no_gso = true; /* the kernel has no UDP_SEGMENT: a packet per send from now on */
    }
    for (size_t at = 0; at < len; at += segment) {
        size_t n = len - at < segment ? len - at : segment;
        if (send(client->fd, data + at, n, 0) < 0 && errno != EAGAIN && errno != ENOBUFS) return -1;
    }
    return 0;
}

/* The next stream bytes to send: the control stream's, then the decoder stream's, then the
 * queued requests'. Returns the stream (-1 for none) and fills vec. */
static int64_t next_source(Client *client, ngtcp2_vec *vec, size_t *count, bool *fin) {
    *count = 0, *fin = false;
    if (!client->h3 || !ngtcp2_conn_get_max_data_left(client->conn)) return -1;
    if (client->control_sent < control_len) {
        vec[0] = (ngtcp2_vec){control_bytes + client->control_sent, control_len - client->control_sent};
        *count = 1;
        return client->control_id;
    }
    for (Piece *piece = client->pieces; piece; piece = piece->next) {
        if (piece->sent == piece->len) continue;
        vec[0] = (ngtcp2_vec){piece->bytes + piece->sent, piece->len - piece->sent};
        *count = 1;
        return client->decoder_id;
    }
    Request *request = client->queue;
    if (!request) return -1;
    memcpy(vec, request->out, request->nout * sizeof *vec);
    *count = request->nout;
    *fin = true;
    return request->stream_id;
}

/* written bytes of stream_id's went into packets. */
static void sent(Client *client, int64_t stream_id, size_t written) {
    if (stream_id == client->control_id) {
        client->control_sent += written;
        return;
    }
    if (stream_id == client->decoder_id) {
        for (Piece *piece = client->pieces; piece && written; piece = piece->next) {
            size_t n = piece->len - piece->sent < written ? piece->len - piece->sent : written;
            piece->sent += n, written -= n;
        }
        return;
    }
    Request *request = client->queue;
    size_t i = 0;
    for (; i < request->nout && written >= request->out[i].len; i++) written -= request->out[i].len;
    memmove(request->out, request->out + i, (request->nout - i) * sizeof *request->out);
    request->nout -= i;
    if (request->nout) {
        request->out[0].base += written;
        request->out[0].len -= written;
    }
}

/* The queue's first request leaves it: all sent (FIN too), or blocked until its stream's window
 * opens (on_extend_max_stream_data queues it again). */
static void dequeue(Client *client) {
    Request *request = client->queue;
    client->queue = request->next;
    if (!client->queue) client->queue_tail = NULL;
    request->queued = false;
}

/* Sends what ngtcp2 and the streams have to send on the connection, a run of same-size packets per
 * sendmsg; -1 when it failed. */
static int flush_client(Client *client) {
    static uint8_t batch[GSO_MAX * MAX_UDP_PAYLOAD];
    size_t off = 0, segment = 0, npkts = 0;
    ngtcp2_path_storage ps;
    ngtcp2_path_storage_zero(&ps);
    ngtcp2_pkt_info pi;
    uint64_t ts = now_ns();
    take_decoder_output(client); /* what this read's sections owe, in one piece */
    for (;;) {
        ngtcp2_vec vec[3];
        size_t count;
        bool fin;
        int64_t stream_id = next_source(client, vec, &count, &fin);
        uint32_t flags = NGTCP2_WRITE_STREAM_FLAG_MORE | (fin ? NGTCP2_WRITE_STREAM_FLAG_FIN : 0);
        ngtcp2_ssize written = -1;
        ngtcp2_ssize n = ngtcp2_conn_writev_stream(client->conn, &ps.path, &pi, batch + off, MAX_UDP_PAYLOAD,
                                                   &written, flags, stream_id, vec, count, ts);
        bool request = stream_id >= 0 && stream_id != client->control_id && stream_id != client->decoder_id;
        if (written >= 0) {
            sent(client, stream_id, (size_t)written);
            if (request && client->queue->nout == 0) dequeue(client); /* its FIN went with the last */
        }
        if (n < 0) {
            if ((n == NGTCP2_ERR_STREAM_DATA_BLOCKED || n == NGTCP2_ERR_STREAM_SHUT_WR) && request) {
                dequeue(client);
                continue;
            }
            if (n == NGTCP2_ERR_WRITE_MORE) continue;
            return -1;
        }
        if (n == 0) break;
        if (off == 0) segment = (size_t)n;
        off += (size_t)n;
        npkts++;
        /* A run is packets of one size, the last maybe shorter. */
        if ((size_t)n < segment || npkts % GSO_MAX == 0) {
            if (send_packets(client, batch, off, segment) != 0) return -1;
            off = 0;
        }
    }
    if (off && send_packets(client, batch, off, segment) != 0) return -1;
    ngtcp2_conn_update_pkt_tx_time(client->conn, ts);
    client->expiry = ngtcp2_conn_get_expiry(client->conn);
    return 0;
}

/* Reads what arrived on the client's socket, a run of datagrams that UDP_GRO kept together handed
 * to ngtcp2 one datagram at a time. */
static int read_client(Client *client) {
    static uint8_t packet[65536];
    for (;;) {
        union {
            char buf[CMSG_SPACE(sizeof(int))];
            struct cmsghdr align;
        } control;
        struct iovec iov = {packet, sizeof packet};
        struct msghdr m = {.msg_iov = &iov,
                           .msg_iovlen = 1,
                           .msg_control = control.buf,
                           .msg_controllen = sizeof control.buf};
        ssize_t n = recvmsg(client->fd, &m, 0);
        if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
        size_t segment = (size_t)n;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm)) {
            if (cm->cmsg_level != SOL_UDP || cm->cmsg_type != UDP_GRO) continue;
            int size;
            memcpy(&size, CMSG_DATA(cm), sizeof size);
            if (size > 0) segment = (size_t)size;
        }
        for (size_t at = 0; at < (size_t)n; at += segment) {
            size_t len = (size_t)n - at < segment ? (size_t)n - at : segment;
            ngtcp2_pkt_info pi = {0};
            int rv = ngtcp2_conn_read_pkt(client->conn, &client->path.path, &pi, packet + at, len, now_ns());
            if (rv != 0) return -1;
        }
    }
}

static void send_close(Client *client) {
    if (client->state == CONN_CLOSED || !client->conn) return;
    uint8_t packet[MAX_UDP_PAYLOAD];
    xQuicCloseError error;
    xq_close_error_default(&error);
    xq_close_error_set_application(&error, XH3_NO_ERROR, NULL, 0);
    ngtcp2_path_storage ps;
    ngtcp2_path_storage_zero(&ps);
    ngtcp2_ssize n = ngtcp2_conn_write_connection_close(client->conn, &ps.path, NULL, packet, sizeof packet,
                                                        &error, now_ns());
    if (n > 0) (void)send(client->fd, packet, (size_t)n, 0);
}

/* --- options and report --------------------------------------------------------------------- */

static void usage(void) {
    fprintf(stderr, "usage: h3load [-t1] -cC -mM (-n N | -D SECONDS [--warm-up-time=SECONDS])\n"
                    "              [-d FILE | --body-size N] [-H 'NAME: VALUE']... [--hold=SECONDS] "
                    "[--idle-timeout=SECONDS] [--no-gso] [--no-gro] [--qpack-capacity=BYTES]\n"
                    "              (https://HOST:PORT/PATH | -i URI_FILE)\n");
    exit(2);
}

static void parse_url(const char *url) {
    const char *rest = strncmp(url, "https://", 8) == 0 ? url + 8 : NULL;
    if (!rest) usage();
    const char *slash = strchr(rest, '/');
    size_t authority_len = slash ? (size_t)(slash - rest) : strlen(rest);
    if (authority_len >= sizeof opts.authority) usage();
    memcpy(opts.authority, rest, authority_len);
    opts.authority[authority_len] = '\0';
    snprintf(opts.path, sizeof opts.path, "%s", slash ? slash : "/");
    const char *colon = strrchr(opts.authority, ':');
    if (!colon) usage();
    snprintf(opts.host, sizeof opts.host, "%.*s", (int)(colon - opts.authority), opts.authority);
    snprintf(opts.port, sizeof opts.port, "%s", colon + 1);
}

static uint8_t *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *data = malloc(len > 0 ? (size_t)len : 1);
    *size = fread(data, 1, (size_t)len, f);
    fclose(f);
    return data;
}

/* -H 'Name: value': the name lower-cased (HTTP/3 field names are), the value from the first
 * non-blank after the colon. */
static void add_header(const char *arg) {
    const char *colon = strchr(arg + 1, ':'); /* + 1: a pseudo-header's own leading colon */
    if (!colon || opts.extra_count == MAX_EXTRA_HEADERS) usage();
    size_t name_len = (size_t)(colon - arg);
    char *name = strndup(arg, name_len);
    for (size_t i = 0; i < name_len; i++)
        if (name[i] >= 'A' && name[i] <= 'Z') name[i] = (char)(name[i] - 'A' + 'a');
    const char *value = colon + 1 + strspn(colon + 1, " \t");
    opts.extra_names[opts.extra_count] = (xStr){name, name_len};
    opts.extra_values[opts.extra_count++] = (xStr){value, strlen(value)};
}

/* -i FILE: one URI a line, each giving a path; the first sets host and port. */
static void read_uris(const char *file) {
    FILE *f = fopen(file, "r");
    if (!f) {
        perror(file);
        exit(2);
    }
    char line[2048], *first = NULL;
    size_t capacity = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (!line[0]) continue;
        parse_url(line);
        if (opts.path_count == capacity) {
            capacity = capacity ? capacity * 2 : 32;
            opts.paths = realloc(opts.paths, capacity * sizeof *opts.paths);
        }
        opts.paths[opts.path_count++] = strdup(opts.path);
        if (!first) first = strdup(line);
    }
    fclose(f);
    if (opts.path_count == 0) usage();
    parse_url(first);
    free(first);
}

static void parse_options(int argc, char **argv) {
    static const struct option long_options[] = {{"warm-up-time", required_argument, NULL, 'W'},
                                                 {"body-size", required_argument, NULL, 'B'},
                                                 {"hold", required_argument, NULL, 'O'},
                                                 {"idle-timeout", required_argument, NULL, 'I'},
                                                 {"no-gso", no_argument, NULL, 'G'},
                                                 {"no-gro", no_argument, NULL, 'R'},
                                                 {"qpack-capacity", required_argument, NULL, 'Q'},
                                                 {NULL, 0, NULL, 0}};
    opts.connections = 1, opts.streams = 1, opts.threads = 1, opts.idle_timeout = 60;
    const char *uri_file = NULL;
    int c;
    while ((c = getopt_long(argc, argv, "t:c:m:n:D:d:H:i:", long_options, NULL)) != -1) {
        switch (c) {
        case 't': opts.threads = atoi(optarg); break;
        case 'c': opts.connections = atoi(optarg); break;
        case 'm': opts.streams = atoi(optarg); break;
        case 'n': opts.requests = atoll(optarg); break;
        case 'D': opts.duration = atof(optarg); break;
        case 'W': opts.warmup = atof(optarg); break;
        case 'O': opts.hold = atof(optarg); break;
        case 'I': opts.idle_timeout = atof(optarg); break;
        case 'G': opts.no_gso = true; break;
        case 'R': opts.no_gro = true; break;
        case 'Q': opts.qpack_capacity = (size_t)atoll(optarg); break;
        case 'H': add_header(optarg); break;
        case 'i': uri_file = optarg; break;
        case 'd':
            if (!(opts.body = read_file(optarg, &opts.body_size))) {
                perror(optarg);
                exit(2);
            }
            break;
        case 'B': {
            opts.body_size = (size_t)atoll(optarg);
            uint8_t *body = malloc(opts.body_size ? opts.body_size : 1);
            memset(body, 'x', opts.body_size);
            opts.body = body;
            break;
        }
        default: usage();
        }
    }
    if (optind != argc - (uri_file ? 0 : 1) || opts.threads != 1 || opts.connections < 1 ||
        opts.streams < 1 || (opts.requests <= 0) == (opts.duration <= 0) || opts.idle_timeout <= 0)
        usage();
    if (uri_file)
        read_uris(uri_file);
    else
        parse_url(argv[optind]);
}

static void print_time(double us) {
    if (us >= 1e6)
        printf("%10.2fs ", us / 1e6);
    else if (us >= 1e3)
        printf("%9.2fms ", us / 1e3);
    else
        printf("%9.2fus ", us);
}

static void report(double seconds) {
    printf("\nfinished in %.2fs, %.2f req/s, 0B/s\n", seconds,
           seconds > 0 ? (double)tally.done / seconds : 0.0);
    printf("requests: %lld total, %lld started, %lld done, %lld succeeded, %lld failed, %lld errored, 0 "
           "timeout\n",
           opts.requests ? opts.requests : tally.done, tally.started, tally.done, tally.succeeded,
           tally.failed, tally.errored);
    printf("status codes: %lld 2xx, %lld 3xx, %lld 4xx, %lld 5xx\n", tally.statuses[2], tally.statuses[3],
           tally.statuses[4], tally.statuses[5]);
    double n = (double)tally.done, mean = n ? tally.latency_sum / n : 0;
    double sd = n ? sqrt(fmax(0, tally.latency_sq_sum / n - mean * mean)) : 0;
    printf("                     min         max         mean         sd        +/- sd\n");
    printf("time for request: ");
    print_time(tally.latency_min);
    print_time(tally.latency_max);
    print_time(mean);
    print_time(sd);
    printf("\n");
}

int main(int argc, char **argv) {
    parse_options(argc, argv);
    encode_requests();
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_DGRAM};
    if (getaddrinfo(opts.host, opts.port, &hints, &target) != 0) {
        fprintf(stderr, "h3load: cannot resolve %s\n", opts.host);
        return 1;
    }
    gnutls_certificate_allocate_credentials(&credentials); /* no trust store: nothing is verified */
    int epfd = epoll_create1(EPOLL_CLOEXEC);
    clients = calloc((size_t)opts.connections, sizeof *clients);
    int started = 0;
    printf("starting benchmark...\nspawning thread #0: %d total client(s). %s\nApplication protocol: h3\n",
           opts.connections, opts.duration > 0 ? "Timing-based test" : "");
    fflush(stdout);

    uint64_t start = now_ns(), measure_start = start, measure_end = 0;
    phase = opts.duration > 0 && opts.warmup > 0 ? PHASE_WARMING_UP : PHASE_MEASURING;
    if (phase == PHASE_WARMING_UP) {
        printf("Warm-up started for thread #0.\n");
        fflush(stdout);
    }
    bool announced = false;
    uint64_t hold_start = 0;
    struct epoll_event events[64];
    for (;;) {
        uint64_t now = now_ns();
        if (phase == PHASE_WARMING_UP && now - start >= (uint64_t)(opts.warmup * 1e9)) {
            printf("Warm-up phase is over for thread #0.\n");
            phase = PHASE_MEASURING, measure_start = now;
        }
        if (phase == PHASE_MEASURING && !announced && opts.duration > 0) {
            printf("Main benchmark duration is started for thread #0.\n");
            fflush(stdout);
            announced = true;
        }
        if (phase == PHASE_MEASURING && opts.duration > 0 &&
            now - measure_start >= (uint64_t)(opts.duration * 1e9)) {
            printf("Main benchmark duration is over for thread #0. Stopping all clients.\n");
            fflush(stdout);
            phase = PHASE_DRAINING, measure_end = now;
            break;
        }
        int live = 0, idle = 0, handshaking = 0;
        for (int i = 0; i < started; i++) handshaking += clients[i].state == CONN_HANDSHAKING;
        for (; started < opts.connections && handshaking < MAX_HANDSHAKING; started++, handshaking++) {
            if (start_client(&clients[started], target, epfd) != 0) {
                fprintf(stderr, "h3load: cannot start connection %d\n", started);
                return 1;
            }
            flush_client(&clients[started]);
        }
        uint64_t expiry = UINT64_MAX;
        for (int i = 0; i < started; i++) {
            Client *client = &clients[i];
            if (client->state == CONN_CLOSED) continue;
            live++;
            if (client->state == CONN_READY && client->in_flight == 0 && !wants_more(client)) idle++;
            if (client->expiry < expiry) expiry = client->expiry;
        }
        if (live == 0) break;
        if (opts.requests && idle == live && started == opts.connections) {
            if (opts.hold <= 0) break;
            if (!hold_start) {
                hold_start = now, measure_end = now;
                printf("all connections idle: %d\n", live);
                fflush(stdout);
            } else if (now - hold_start >= (uint64_t)(opts.hold * 1e9)) {
                break;
            }
        }
        int timeout = expiry == UINT64_MAX ? 100 : expiry <= now ? 0 : (int)((expiry - now) / 1000000 + 1);
        if (timeout > 100) timeout = 100;
        int ready = epoll_wait(epfd, events, 64, timeout);
        for (int i = 0; i < ready; i++) {
            Client *client = events[i].data.ptr;
            if (read_client(client) != 0 || flush_client(client) != 0) close_client(client, epfd, true);
        }
        now = now_ns();
        for (int i = 0; i < opts.connections; i++) {
            Client *client = &clients[i];
            if (client->state == CONN_CLOSED || client->state == CONN_NOT_STARTED || client->expiry > now)
                continue;
            if (ngtcp2_conn_handle_expiry(client->conn, now) != 0 || flush_client(client) != 0)
                close_client(client, epfd, true);
        }
    }
    if (!measure_end) measure_end = now_ns();
    for (int i = 0; i < opts.connections; i++) {
        send_close(&clients[i]);
        if (clients[i].state == CONN_HANDSHAKING && phase != PHASE_DRAINING) tally.errored++;
    }
    report((double)(measure_end - measure_start) / 1e9);
    return tally.done > 0 ? 0 : 1;
}
