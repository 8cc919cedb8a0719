/* h3load: an HTTP/3 load generator for xkbench, since Debian's h2load has no HTTP/3.
 *
 * One thread, one epoll loop: -c QUIC connections (ngtcp2's client API, GnuTLS as its TLS, the
 * server's certificate not verified), -m concurrent request streams on each (nghttp3 frames the
 * requests and decodes the responses: this is a bench tool, not the server, so its HTTP/3 layer is
 * the reference one), -n requests in all or -D seconds after --warm-up-time. GET, or POST with
 * -d FILE or --body-size N; -H 'name: value' adds a header (as h2load's -H), -i FILE takes the paths
 * from a file of URIs, one a line, asked in turn (as h2load's -i: scheme, host and port come from
 * the first line, the command's URL is then left out). It prints h2load's summary lines (finished in,
 * requests, status codes, time for request) and its "Main benchmark duration" markers, so xkbench's h2load
 * parser and CPU window read it unchanged.
 *
 *   h3load -t1 -cC -mM (-n N | -D SECONDS [--warm-up-time=SECONDS]) [-d FILE | --body-size N]
 *          [-H 'NAME: VALUE']... [--hold=SECONDS] [--idle-timeout=SECONDS] [--no-gso] [--no-gro]
 *          [--qpack-capacity=BYTES] (https://HOST:PORT/PATH | -i URI_FILE)
 *
 * --qpack-capacity: the SETTINGS_QPACK_MAX_TABLE_CAPACITY the client announces (nghttp3's default,
 * 0, without it: the server's responses then use the static table only, as h2load's do not); with
 * it, a server may keep repeated response fields in the dynamic table, as browsers (which announce
 * one) let it.
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
#include <nghttp3/nghttp3.h>
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
    nghttp3_nv extra[MAX_EXTRA_HEADERS]; /* -H, lower-cased names as HTTP/3 wants */
    size_t extra_count;
    char **paths; /* -i: the paths asked in turn, or NULL for path alone */
    size_t path_count;
} Options;

typedef struct Client Client;

typedef struct {
    Client *client;
    uint64_t started_ns;
    size_t body_sent;
    int status;
    bool counted; /* started while measuring */
} Request;

/* NOT_STARTED first: calloc'ed clients start there; at most MAX_HANDSHAKING handshake at once, as a
 * burst of thousands of Initial packets overflows the server's socket buffer. */
typedef enum { CONN_NOT_STARTED, CONN_HANDSHAKING, CONN_READY, CONN_CLOSED } ConnState;
#define MAX_HANDSHAKING 64

struct Client {
    ngtcp2_crypto_conn_ref ref;
    int fd;
    ngtcp2_conn *conn;
    nghttp3_conn *h3;
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

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void fill_random(uint8_t *dest, size_t len) { gnutls_rnd(GNUTLS_RND_RANDOM, dest, len); }

/* --- requests ------------------------------------------------------------------------------- */

static nghttp3_ssize read_body(nghttp3_conn *h3, int64_t stream_id, nghttp3_vec *vec, size_t veccnt,
                               uint32_t *pflags, void *conn_user_data, void *stream_user_data) {
    (void)h3, (void)stream_id, (void)veccnt, (void)conn_user_data;
    Request *request = stream_user_data;
    size_t left = opts.body_size - request->body_sent;
    vec[0].base = (uint8_t *)opts.body + request->body_sent;
    vec[0].len = left;
    request->body_sent = opts.body_size;
    *pflags |= NGHTTP3_DATA_FLAG_EOF;
    return 1;
}

static bool wants_more(const Client *client) {
    if (phase == PHASE_DRAINING) return false;
    if (opts.hold > 0 && client->submitted >= (opts.requests + opts.connections - 1) / opts.connections)
        return false;
    return opts.requests == 0 || issued < opts.requests;
}

static void submit_requests(Client *client) {
    while (client->state == CONN_READY && client->in_flight < opts.streams && wants_more(client) &&
           ngtcp2_conn_get_streams_bidi_left(client->conn) > 0) {
        int64_t stream_id;
        if (ngtcp2_conn_open_bidi_stream(client->conn, &stream_id, NULL) != 0) return;
        Request *request = calloc(1, sizeof *request);
        request->client = client;
        request->started_ns = now_ns();
        request->counted = phase == PHASE_MEASURING;
        char length[24];
        snprintf(length, sizeof length, "%zu", opts.body_size);
#define NV(n, v)                                                                                             \
    { (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP3_NV_FLAG_NONE }
        const char *path = opts.paths ? opts.paths[issued % (long long)opts.path_count] : opts.path;
        nghttp3_nv headers[6 + MAX_EXTRA_HEADERS] = {
            NV(":method", opts.body ? "POST" : "GET"),
            NV(":scheme", "https"),
            NV(":authority", opts.authority),
            NV(":path", path),
            NV("user-agent", "h3load"),
        };
#undef NV
        size_t count = 5;
        for (size_t i = 0; i < opts.extra_count; i++) headers[count++] = opts.extra[i];
        if (opts.body)
            headers[count++] = (nghttp3_nv){(uint8_t *)"content-length", (uint8_t *)length, 14,
                                            strlen(length), NGHTTP3_NV_FLAG_NONE};
        nghttp3_data_reader reader = {.read_data = read_body};
        if (nghttp3_conn_submit_request(client->h3, stream_id, headers, count, opts.body ? &reader : NULL,
                                        request) != 0) {
            free(request);
            return;
        }
        ngtcp2_conn_set_stream_user_data(client->conn, stream_id, request);
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
    free(request);
}

/* --- nghttp3 callbacks ---------------------------------------------------------------------- */

static void consume(Client *client, int64_t stream_id, size_t n) {
    ngtcp2_conn_extend_max_stream_offset(client->conn, stream_id, n);
    ngtcp2_conn_extend_max_offset(client->conn, n);
}

static int h3_recv_data(nghttp3_conn *h3, int64_t stream_id, const uint8_t *data, size_t len, void *user_data,
                        void *stream_user_data) {
    (void)h3, (void)data, (void)stream_user_data;
    consume(user_data, stream_id, len);
    return 0;
}

static int h3_deferred_consume(nghttp3_conn *h3, int64_t stream_id, size_t consumed, void *user_data,
                               void *stream_user_data) {
    (void)h3, (void)stream_user_data;
    consume(user_data, stream_id, consumed);
    return 0;
}

static int h3_recv_header(nghttp3_conn *h3, int64_t stream_id, int32_t token, nghttp3_rcbuf *name,
                          nghttp3_rcbuf *value, uint8_t flags, void *user_data, void *stream_user_data) {
    (void)h3, (void)stream_id, (void)name, (void)flags, (void)user_data;
    Request *request = stream_user_data;
    if (token == NGHTTP3_QPACK_TOKEN__STATUS && request) {
        nghttp3_vec v = nghttp3_rcbuf_get_buf(value);
        int status = 0;
        for (size_t i = 0; i < v.len && v.base[i] >= '0' && v.base[i] <= '9'; i++)
            status = status * 10 + v.base[i] - '0';
        request->status = status;
    }
    return 0;
}

static int h3_stream_close(nghttp3_conn *h3, int64_t stream_id, uint64_t app_error_code, void *user_data,
                           void *stream_user_data) {
    (void)h3, (void)stream_id;
    Client *client = user_data;
    if (stream_user_data) {
        finish_request(stream_user_data, app_error_code == NGHTTP3_H3_NO_ERROR);
        submit_requests(client);
    }
    return 0;
}

static const nghttp3_callbacks H3_CALLBACKS = {
    .stream_close = h3_stream_close,
    .recv_data = h3_recv_data,
    .deferred_consume = h3_deferred_consume,
    .recv_header = h3_recv_header,
};

/* --- ngtcp2 callbacks ----------------------------------------------------------------------- */

static int setup_h3(Client *client) {
    nghttp3_settings settings;
    nghttp3_settings_default(&settings);
    settings.qpack_max_dtable_capacity = opts.qpack_capacity;
    if (nghttp3_conn_client_new(&client->h3, &H3_CALLBACKS, &settings, NULL, client) != 0) return -1;
    int64_t control, encoder, decoder;
    if (ngtcp2_conn_open_uni_stream(client->conn, &control, NULL) != 0 ||
        ngtcp2_conn_open_uni_stream(client->conn, &encoder, NULL) != 0 ||
        ngtcp2_conn_open_uni_stream(client->conn, &decoder, NULL) != 0 ||
        nghttp3_conn_bind_control_stream(client->h3, control) != 0 ||
        nghttp3_conn_bind_qpack_streams(client->h3, encoder, decoder) != 0)
        return -1;
    return 0;
}

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
    (void)conn, (void)offset, (void)stream_user_data;
    Client *client = user_data;
    nghttp3_ssize consumed =
        nghttp3_conn_read_stream(client->h3, stream_id, data, len, flags & NGTCP2_STREAM_DATA_FLAG_FIN);
    if (consumed < 0) return NGTCP2_ERR_CALLBACK_FAILURE;
    consume(client, stream_id, (size_t)consumed);
    return 0;
}

static int on_acked_stream_data_offset(ngtcp2_conn *conn, int64_t stream_id, uint64_t offset, uint64_t len,
                                       void *user_data, void *stream_user_data) {
    (void)conn, (void)offset, (void)stream_user_data;
    Client *client = user_data;
    return nghttp3_conn_add_ack_offset(client->h3, stream_id, len) == 0 ? 0 : NGTCP2_ERR_CALLBACK_FAILURE;
}

static int on_stream_close(ngtcp2_conn *conn, uint32_t flags, int64_t stream_id, uint64_t app_error_code,
                           void *user_data, void *stream_user_data) {
    (void)conn, (void)stream_user_data;
    Client *client = user_data;
    if (!(flags & NGTCP2_STREAM_CLOSE_FLAG_APP_ERROR_CODE_SET)) app_error_code = NGHTTP3_H3_NO_ERROR;
    int rv = client->h3 ? nghttp3_conn_close_stream(client->h3, stream_id, app_error_code) : 0;
    return rv == 0 || rv == NGHTTP3_ERR_STREAM_NOT_FOUND ? 0 : NGTCP2_ERR_CALLBACK_FAILURE;
}

static int on_extend_max_stream_data(ngtcp2_conn *conn, int64_t stream_id, uint64_t max_data, void *user_data,
                                     void *stream_user_data) {
    (void)conn, (void)max_data, (void)stream_user_data;
    Client *client = user_data;
    return nghttp3_conn_unblock_stream(client->h3, stream_id) == 0 ? 0 : NGTCP2_ERR_CALLBACK_FAILURE;
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

/* Sends what ngtcp2 and nghttp3 have to send on the connection, a run of same-size packets per
 * sendmsg; -1 when it failed. */
static int flush_client(Client *client) {
    static uint8_t batch[GSO_MAX * MAX_UDP_PAYLOAD];
    size_t off = 0, segment = 0, npkts = 0;
    ngtcp2_path_storage ps;
    ngtcp2_path_storage_zero(&ps);
    ngtcp2_pkt_info pi;
    uint64_t ts = now_ns();
    for (;;) {
        int64_t stream_id = -1;
        int fin = 0;
        nghttp3_vec vec[16];
        nghttp3_ssize count = 0;
        if (client->h3 && ngtcp2_conn_get_max_data_left(client->conn)) {
            count = nghttp3_conn_writev_stream(client->h3, &stream_id, &fin, vec, 16);
            if (count < 0) return -1;
        }
        uint32_t flags = NGTCP2_WRITE_STREAM_FLAG_MORE | (fin ? NGTCP2_WRITE_STREAM_FLAG_FIN : 0);
        ngtcp2_ssize written = 0;
        ngtcp2_ssize n =
            ngtcp2_conn_writev_stream(client->conn, &ps.path, &pi, batch + off, MAX_UDP_PAYLOAD, &written,
                                      flags, stream_id, (const ngtcp2_vec *)vec, (size_t)count, ts);
        if (n < 0) {
            if (n == NGTCP2_ERR_STREAM_DATA_BLOCKED) {
                nghttp3_conn_block_stream(client->h3, stream_id);
                continue;
            }
            if (n == NGTCP2_ERR_STREAM_SHUT_WR) {
                nghttp3_conn_shutdown_stream_write(client->h3, stream_id);
                continue;
            }
            if (n == NGTCP2_ERR_WRITE_MORE) {
                if (nghttp3_conn_add_write_offset(client->h3, stream_id, (size_t)written) != 0) return -1;
                continue;
            }
            return -1;
        }
        if (written >= 0 && nghttp3_conn_add_write_offset(client->h3, stream_id, (size_t)written) != 0)
            return -1;
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
    xq_close_error_set_application(&error, NGHTTP3_H3_NO_ERROR, NULL, 0);
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
    opts.extra[opts.extra_count++] =
        (nghttp3_nv){(uint8_t *)name, (uint8_t *)value, name_len, strlen(value), NGHTTP3_NV_FLAG_NONE};
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
