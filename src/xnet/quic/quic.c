/* quic.c — QUIC connections through ngtcp2 (quic.h): the endpoint's socket
 * and connection ID table, a connection's packets in and out, its streams'
 * send queues kept until acknowledged, and its timer. TLS is quic_tls.c's. */
#define _GNU_SOURCE
#include "xnet/quic/quic.h"

#include <errno.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <ngtcp2/ngtcp2_crypto.h>

#include "xnet/quic/ngtcp2_compat.h"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

/* Our connection IDs: the worker's byte, then random. */
#define XQUIC_CID_LEN 18
/* Messages taken per recvmmsg, and the most bytes one may have: a single
 * datagram, or with UDP_GRO a train of one peer's datagrams of one size
 * (the last maybe shorter) that the kernel kept together, up to 64 KiB. A
 * slot's pages are touched only as far as datagrams fill them. */
#define XQUIC_RX_BATCH 32
#define XQUIC_RX_SIZE 2048
#define XQUIC_RX_GRO_SIZE 65536
/* recvmmsg calls per readiness report, and the datagrams after which no
 * further call is made (a round of GRO trains may hold far more than a
 * round's worth): the rest waits for the next turn, so that the loop's other
 * sockets and timers are not kept waiting. */
#define XQUIC_RX_ROUNDS 4
#define XQUIC_RX_TURN_MAX (XQUIC_RX_ROUNDS * XQUIC_RX_BATCH)
/* The receive buffer asked for: a burst from many connections at once (each
 * a congestion window of datagrams) overflows the kernel's default of about
 * 208 KiB, and each datagram dropped costs its sender a retransmission. The
 * kernel caps it at net.core.rmem_max. */
#define XQUIC_RCVBUF (4 << 20)
/* Packets of one connection sent together (one sendmsg with UDP_SEGMENT). */
#define XQUIC_GSO_MAX 40
#define XQUIC_TX_SIZE (XQUIC_GSO_MAX * NGTCP2_MAX_PMTUD_UDP_PAYLOAD_SIZE)
/* An expiry nearer than this takes a precise timer; later ones the wheel's. */
#define XQUIC_PRECISE_BELOW_NS (50 * NGTCP2_MILLISECONDS)
/* Stream data pieces handed to ngtcp2 at once. */
#define XQUIC_IOV_MAX 16
/* How long a client has to echo a Retry's token, and to bring back a
 * NEW_TOKEN one on a later connection. */
#define XQUIC_RETRY_TOKEN_LIFETIME (10 * NGTCP2_SECONDS)
#define XQUIC_REGULAR_TOKEN_LIFETIME (3600 * NGTCP2_SECONDS)

/* The least room a copied chunk is given: the small writes that follow it
 * (a response's frame headers and short body, QPACK's acknowledgments on
 * the decoder stream) are appended to it instead of taking a chunk each. */
#define XQUIC_CHUNK_ROOM 256

/* Spare stream records and small chunks an endpoint keeps for the next
 * ones: a request's stream and its response's chunk come and go by the
 * thousand a second, and taking them from a list costs less than malloc's
 * bins (with many streams in flight, its per-thread cache runs dry). */
#define XQUIC_SPARE_MAX 256

/* A list of spare blocks of one size, linked through their first bytes. */
typedef struct xQuicSpare {
    struct xQuicSpare *next;
} xQuicSpare;

typedef struct xQuicSpares {
    xQuicSpare *first;
    size_t count;
} xQuicSpares;

/* Where a chunk's bytes are, and so how it goes once acknowledged. */
typedef enum xQuicChunkKind {
    XQUIC_CHUNK_REF,      /* the writer's bytes, by reference: its release runs */
    XQUIC_CHUNK_SPARE,    /* a copy in a block of XQUIC_CHUNK_ROOM, kept for the next */
    XQUIC_CHUNK_OWN,      /* a copy in a block of its own size, freed */
    XQUIC_CHUNK_EMBEDDED, /* a copy in the stream's own record (first): free again */
} xQuicChunkKind;

/* A piece of a stream's output, kept until acknowledged. A copy's bytes
 * follow its header (or, embedded, lie in the stream's first_room). */
typedef struct xQuicChunk {
    struct xQuicChunk *next;
    const uint8_t *data;
    size_t len;
    size_t room;     /* of copy: bytes allocated (0: by reference) */
    uint64_t offset; /* of its first byte in the stream */
    void (*release)(void *);
    void *arg;
    xQuicChunkKind kind;
} xQuicChunk;

/* The room in a bidirectional stream's own record for a copied chunk: a
 * small response (head and body in one write) takes no block of its own, so
 * its acknowledgment, a round trip later, touches the stream's memory alone
 * instead of a chunk gone cold besides. (A unidirectional stream, long-lived
 * and mostly idle, has none: an idle connection holds six.) */
#define XQUIC_STREAM_ROOM 176

struct xQuicStream {
    /* What writes and acknowledgments touch, together. */
    xQuicConn *qc;
    xQuicChunk *head, *tail; /* oldest (least acknowledged) first */
    xQuicChunk *unsent;      /* the chunk holding the first byte not yet given to ngtcp2 */
    uint64_t queued, sent, acked;
    int64_t id;
    xQuicChunk first;       /* of kind XQUIC_CHUNK_EMBEDDED, in the chain while first_busy */
    size_t first_room_size; /* XQUIC_STREAM_ROOM, or 0: none */
    bool first_busy;
    bool fin_queued, fin_sent, write_shut;
    bool early;   /* some of its input came in 0-RTT */
    bool ended;   /* the peer's FIN came: its final size is known, it needs no more credit */
    bool sending; /* on qc's send list */
    void *app;
    xQuicStream *send_prev, *send_next;
    xQuicStream *prev, *next; /* qc->streams */
    uint8_t first_room[];     /* first_room_size bytes */
};

/* One connection ID naming a connection, in the endpoint's table. */
typedef struct xQuicCidEntry {
    ngtcp2_cid cid;
    xQuicConn *qc;
    struct xQuicCidEntry *next_in_bucket;
    struct xQuicCidEntry *next_of_conn;
} xQuicCidEntry;

/* Where a connection is in its life. */
typedef enum xQuicConnState {
    XQUIC_HANDSHAKING, /* packets flow; the application has not heard of it */
    XQUIC_OPEN,        /* the application has it (on_open) */
    XQUIC_GONE,        /* closed: ngtcp2's state freed, the memory waits for its last reference */
} xQuicConnState;

struct xQuicConn {
    ngtcp2_crypto_conn_ref ref; /* first: GnuTLS's session pointer finds the connection by it */
    xQuicEndpoint *ep;
    ngtcp2_conn *conn;
    void *tls;
    xQuicConnState state;
    unsigned refs;
    void *app;
    bool close_owed; /* xQuicConnClose was called: sent at the end of the event */
    bool settling;   /* in the application's on_settle: conn_settle writes next */
    uint64_t credit; /* bytes consumed over the event: the peer's connection credit, given at its end */
    uint64_t close_code;
    int fatal; /* an ngtcp2 error that ends the connection, else 0 */
    xQuicCidEntry *cids;
    struct sockaddr_storage local, remote; /* the path ngtcp2 sends on */
    socklen_t local_len, remote_len;
    const ngtcp2_path *rx_path; /* while a packet is read, until its sender is seen: where it came from */
    bool view_elsewhere;        /* the view names rx_path's peer, not remote */
    xQuicStream *streams;
    xQuicStream *send_first, *send_last;
    xTimer timer;
    xTurnEnd flush;
    xConn view;
    char server_name[256];
    xQuicConn *prev, *next; /* ep->conns */
};

struct xQuicEndpoint {
    xNetContext *net;
    int fd;
    bool wildcard;                 /* bound to every address: replies name their source */
    struct sockaddr_storage bound; /* the socket's own address, read once: every datagram's local one */
    socklen_t bound_len;           /* 0: unknown, datagrams are dropped */
    bool no_gso;                   /* the kernel refused UDP_SEGMENT: one packet per send */
    size_t rx_slot;                /* bytes per message in rx: XQUIC_RX_GRO_SIZE with UDP_GRO on */
    bool draining;
    xQuicEndpointConf conf;
    xQuicCidEntry **buckets;
    size_t nbuckets, nentries;
    xQuicConn *conns;
    size_t count;
    size_t handshaking; /* of count, those in XQUIC_HANDSHAKING: what an Initial flood fills */
    void (*on_gone)(void *arg);
    void *on_gone_arg;
    xQuicSpares spare_streams; /* bidirectional ones, with their room */
    xQuicSpares spare_chunks;  /* of XQUIC_CHUNK_ROOM */
    uint8_t *rx;               /* XQUIC_RX_BATCH slots of rx_slot bytes */
    struct sockaddr_storage rx_names[XQUIC_RX_BATCH];
    char rx_control[XQUIC_RX_BATCH][128]; /* TOS, PKTINFO, UDP_GRO */
    uint8_t tx[XQUIC_TX_SIZE];
};

static void conn_flush(xEventLoop *loop, xTurnEnd *call);
static void conn_on_timer(xEventLoop *loop, xTimer *timer, void *arg);
static void on_readable(xEventLoop *loop, int fd, unsigned events, void *arg);
static void conn_follow_path(xQuicConn *qc);
static void view_see_sender(xQuicConn *qc);

static ngtcp2_tstamp now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (ngtcp2_tstamp)ts.tv_sec * NGTCP2_SECONDS + (ngtcp2_tstamp)ts.tv_nsec;
}

static void random_bytes(uint8_t *p, size_t len) { xQuicTlsRandom(p, len); }

/* ---- The connection ID table ---- */

static size_t cid_hash(const uint8_t *data, size_t len) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a: IDs are mostly random already */
    for (size_t i = 0; i < len; i++) h = (h ^ data[i]) * 1099511628211ull;
    return (size_t)h;
}

static bool table_grow(xQuicEndpoint *ep) {
    size_t n = ep->nbuckets ? ep->nbuckets * 2 : 256;
    xQuicCidEntry **b = calloc(n, sizeof *b);
    if (!b) return false;
    for (size_t i = 0; i < ep->nbuckets; i++) {
        xQuicCidEntry *e = ep->buckets[i], *next;
        for (; e; e = next) {
            next = e->next_in_bucket;
            size_t at = cid_hash(e->cid.data, e->cid.datalen) & (n - 1);
            e->next_in_bucket = b[at];
            b[at] = e;
        }
    }
    free(ep->buckets);
    ep->buckets = b;
    ep->nbuckets = n;
    return true;
}

static bool cid_add(xQuicConn *qc, const ngtcp2_cid *cid) {
    xQuicEndpoint *ep = qc->ep;
    if (ep->nentries >= ep->nbuckets && !table_grow(ep)) return false;
    xQuicCidEntry *e = malloc(sizeof *e);
    if (!e) return false;
    e->cid = *cid;
    e->qc = qc;
    size_t at = cid_hash(cid->data, cid->datalen) & (ep->nbuckets - 1);
    e->next_in_bucket = ep->buckets[at];
    ep->buckets[at] = e;
    e->next_of_conn = qc->cids;
    qc->cids = e;
    ep->nentries++;
    return true;
}

static xQuicConn *cid_find(xQuicEndpoint *ep, const uint8_t *data, size_t len) {
    if (!ep->nbuckets) return NULL;
    for (xQuicCidEntry *e = ep->buckets[cid_hash(data, len) & (ep->nbuckets - 1)]; e; e = e->next_in_bucket)
        if (e->cid.datalen == len && memcmp(e->cid.data, data, len) == 0) return e->qc;
    return NULL;
}

static void cid_unlink(xQuicEndpoint *ep, xQuicCidEntry *gone) {
    xQuicCidEntry **at = &ep->buckets[cid_hash(gone->cid.data, gone->cid.datalen) & (ep->nbuckets - 1)];
    while (*at != gone) at = &(*at)->next_in_bucket;
    *at = gone->next_in_bucket;
    ep->nentries--;
}

static void cid_remove(xQuicConn *qc, const ngtcp2_cid *cid) {
    for (xQuicCidEntry **at = &qc->cids; *at; at = &(*at)->next_of_conn) {
        xQuicCidEntry *e = *at;
        if (ngtcp2_cid_eq(&e->cid, cid)) {
            *at = e->next_of_conn;
            cid_unlink(qc->ep, e);
            free(e);
            return;
        }
    }
}

static void cid_remove_all(xQuicConn *qc) {
    while (qc->cids) {
        xQuicCidEntry *e = qc->cids;
        qc->cids = e->next_of_conn;
        cid_unlink(qc->ep, e);
        free(e);
    }
}

/* A new connection ID of ours: the worker's byte, random bytes, and the
 * stateless reset token derived from it with the listener's secret. */
static bool cid_make(const xQuicEndpoint *ep, ngtcp2_cid *cid, uint8_t *token) {
    cid->datalen = XQUIC_CID_LEN;
    random_bytes(cid->data, XQUIC_CID_LEN);
    cid->data[0] = ep->conf.worker_id;
    return ngtcp2_crypto_generate_stateless_reset_token(token, ep->conf.secret, 32, cid) == 0;
}

/* ---- Sending ---- */

/* Sends len bytes of packets of gso bytes each (the last may be shorter)
 * from ep's socket to remote, from local when the socket is bound to every
 * address. */
static void send_packets(xQuicEndpoint *ep, const xQuicConn *qc, const struct sockaddr *remote,
                         socklen_t remote_len, const uint8_t *data, size_t len, size_t gso, uint32_t ecn) {
    struct iovec iov = {(void *)data, len};
    union {
        char buf[CMSG_SPACE(sizeof(struct in6_pktinfo)) + CMSG_SPACE(sizeof(int)) +
                 CMSG_SPACE(sizeof(uint16_t))];
        struct cmsghdr align;
    } control;
    memset(&control, 0, sizeof control);
    struct msghdr m = {.msg_name = (void *)remote,
                       .msg_namelen = remote_len,
                       .msg_iov = &iov,
                       .msg_iovlen = 1,
                       .msg_control = control.buf,
                       .msg_controllen = sizeof control.buf};
    size_t used = 0;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
    if (ep->wildcard && qc && qc->local.ss_family == AF_INET) {
        struct in_pktinfo pi = {.ipi_spec_dst = ((const struct sockaddr_in *)&qc->local)->sin_addr};
        cm->cmsg_level = IPPROTO_IP, cm->cmsg_type = IP_PKTINFO, cm->cmsg_len = CMSG_LEN(sizeof pi);
        memcpy(CMSG_DATA(cm), &pi, sizeof pi);
        used += CMSG_SPACE(sizeof pi);
        cm = CMSG_NXTHDR(&m, cm);
    } else if (ep->wildcard && qc && qc->local.ss_family == AF_INET6) {
        struct in6_pktinfo pi = {.ipi6_addr = ((const struct sockaddr_in6 *)&qc->local)->sin6_addr};
        cm->cmsg_level = IPPROTO_IPV6, cm->cmsg_type = IPV6_PKTINFO, cm->cmsg_len = CMSG_LEN(sizeof pi);
        memcpy(CMSG_DATA(cm), &pi, sizeof pi);
        used += CMSG_SPACE(sizeof pi);
        cm = CMSG_NXTHDR(&m, cm);
    }
    if (ecn) { /* the ECN codepoint ngtcp2 chose, in the IP header's traffic class */
        int tos = (int)ecn;
        bool v6 = remote->sa_family == AF_INET6;
        cm->cmsg_level = v6 ? IPPROTO_IPV6 : IPPROTO_IP, cm->cmsg_type = v6 ? IPV6_TCLASS : IP_TOS;
        cm->cmsg_len = CMSG_LEN(sizeof tos);
        memcpy(CMSG_DATA(cm), &tos, sizeof tos);
        used += CMSG_SPACE(sizeof tos);
        cm = CMSG_NXTHDR(&m, cm);
    }
    if (len > gso && !ep->no_gso) { /* last: the fall-back below drops it */
        uint16_t segment = (uint16_t)gso;
        cm->cmsg_level = SOL_UDP, cm->cmsg_type = UDP_SEGMENT, cm->cmsg_len = CMSG_LEN(sizeof segment);
        memcpy(CMSG_DATA(cm), &segment, sizeof segment);
        used += CMSG_SPACE(sizeof segment);
    }
    m.msg_controllen = used;
    if (!used) m.msg_control = NULL;
    if (len <= gso || !ep->no_gso) {
        if (sendmsg(ep->fd, &m, MSG_DONTWAIT) >= 0 || len <= gso) return;
        if (errno != EIO && errno != EINVAL) return; /* a full socket: QUIC's recovery resends */
        ep->no_gso = true;
        m.msg_controllen = used - CMSG_SPACE(sizeof(uint16_t));
        if (!m.msg_controllen) m.msg_control = NULL;
    }
    for (size_t at = 0; at < len; at += gso) {
        iov.iov_base = (void *)(data + at);
        iov.iov_len = len - at < gso ? len - at : gso;
        if (sendmsg(ep->fd, &m, MSG_DONTWAIT) < 0) return;
    }
}

static void stream_send_unlink(xQuicStream *s) {
    xQuicConn *qc = s->qc;
    if (!s->sending) return;
    if (s->send_prev)
        s->send_prev->send_next = s->send_next;
    else
        qc->send_first = s->send_next;
    if (s->send_next)
        s->send_next->send_prev = s->send_prev;
    else
        qc->send_last = s->send_prev;
    s->send_prev = s->send_next = NULL;
    s->sending = false;
}

static void stream_send_link(xQuicStream *s) {
    xQuicConn *qc = s->qc;
    if (s->sending || s->write_shut) return;
    s->send_prev = qc->send_last;
    s->send_next = NULL;
    if (qc->send_last)
        qc->send_last->send_next = s;
    else
        qc->send_first = s;
    qc->send_last = s;
    s->sending = true;
}

static bool stream_has_output(const xQuicStream *s) {
    return !s->write_shut && (s->sent < s->queued || (s->fin_queued && !s->fin_sent));
}

/* The unsent bytes of s as iovecs; returns how many. */
static size_t stream_unsent(const xQuicStream *s, ngtcp2_vec *v) {
    size_t n = 0;
    for (const xQuicChunk *c = s->unsent; c && n < XQUIC_IOV_MAX; c = c->next) {
        size_t skip = s->sent > c->offset ? (size_t)(s->sent - c->offset) : 0;
        if (skip >= c->len) continue;
        v[n].base = (uint8_t *)c->data + skip;
        v[n].len = c->len - skip;
        n++;
    }
    return n;
}

/* ngtcp2 took n more bytes of s (and its FIN, when fin and nothing is left). */
static void stream_advance(xQuicStream *s, size_t n, bool fin) {
    s->sent += n;
    while (s->unsent && s->unsent->offset + s->unsent->len <= s->sent && s->unsent->next)
        s->unsent = s->unsent->next;
    if (fin && s->sent == s->queued) s->fin_sent = true;
    if (!stream_has_output(s)) stream_send_unlink(s);
}

static void schedule_flush(xQuicConn *qc) {
    if (qc->flush.queued || qc->settling || qc->state == XQUIC_GONE) return;
    qc->refs++; /* released by the flush */
    xEventLoopAtTurnEnd(qc->ep->net->loop, &qc->flush);
}

/* Writes qc's packets as far as ngtcp2 allows: its own frames and the
 * streams' data, a batch of same-size packets per sendmsg. Returns an
 * ngtcp2 error that ends the connection, else 0. */
static int conn_write(xQuicConn *qc) {
    xQuicEndpoint *ep = qc->ep;
    ngtcp2_tstamp ts = now_ns();
    size_t mtu = ngtcp2_conn_get_max_tx_udp_payload_size(qc->conn);
    size_t quantum = ngtcp2_conn_get_send_quantum(qc->conn) / mtu;
    if (quantum > 64) quantum = 64;
    if (quantum < 1) quantum = 1;
    ngtcp2_path_storage ps;
    ngtcp2_path_storage_zero(&ps);
    ngtcp2_pkt_info pi;
    size_t off = 0, gso = 0, npkts = 0;
    uint32_t ecn = 0;
    /* Streams that ngtcp2 refused this round (flow control): tried again
     * the next time the connection writes. */
    xQuicStream *s = qc->send_first;
    for (;;) {
        ngtcp2_vec v[XQUIC_IOV_MAX];
        size_t nv = 0;
        uint32_t flags = NGTCP2_WRITE_STREAM_FLAG_MORE;
        int64_t id = -1;
        if (s) {
            id = s->id;
            nv = stream_unsent(s, v);
            if (s->fin_queued && !s->fin_sent) flags |= NGTCP2_WRITE_STREAM_FLAG_FIN;
        }
        ngtcp2_ssize taken = -1;
        ngtcp2_ssize n = ngtcp2_conn_writev_stream(qc->conn, &ps.path, &pi, ep->tx + off, mtu, &taken, flags,
                                                   id, nv ? v : NULL, nv, ts);
        if (n < 0) {
            if (!s && (n == NGTCP2_ERR_WRITE_MORE || n == NGTCP2_ERR_STREAM_DATA_BLOCKED))
                break; /* never so */
            if (n == NGTCP2_ERR_STREAM_DATA_BLOCKED || n == NGTCP2_ERR_STREAM_SHUT_WR ||
                n == NGTCP2_ERR_STREAM_NOT_FOUND) {
                xQuicStream *next = s->send_next;
                if (n != NGTCP2_ERR_STREAM_DATA_BLOCKED) {
                    s->write_shut = true;
                    stream_send_unlink(s);
                }
                s = next;
                continue;
            }
            if (n == NGTCP2_ERR_WRITE_MORE) {
                xQuicStream *next = s->send_next;
                stream_advance(s, (size_t)taken, flags & NGTCP2_WRITE_STREAM_FLAG_FIN);
                if (s->sending) next = s; /* the packet has room and s has more */
                s = next;
                continue;
            }
            return (int)n;
        }
        if (s && taken >= 0) {
            xQuicStream *next = s->send_next;
            stream_advance(s, (size_t)taken, flags & NGTCP2_WRITE_STREAM_FLAG_FIN);
            if (s->sending) next = s;
            s = next;
        }
        if (n == 0) break;
        if (off && pi.ecn != ecn) { /* a batch's packets share their ECN marking */
            send_packets(ep, qc, ps.path.remote.addr, (socklen_t)ps.path.remote.addrlen, ep->tx, off, gso,
                         ecn);
            memmove(ep->tx, ep->tx + off, (size_t)n);
            off = 0;
        }
        ecn = pi.ecn;
        if (off == 0) gso = (size_t)n;
        off += (size_t)n;
        npkts++;
        /* A batch is packets of one size, the last maybe shorter. */
        if ((size_t)n < gso || npkts % XQUIC_GSO_MAX == 0 || off + mtu > sizeof ep->tx) {
            send_packets(ep, qc, ps.path.remote.addr, (socklen_t)ps.path.remote.addrlen, ep->tx, off, gso,
                         ecn);
            off = 0;
        }
        if (npkts == quantum) break; /* pacing: the timer brings the rest */
    }
    if (off) {
        send_packets(ep, qc, ps.path.remote.addr, (socklen_t)ps.path.remote.addrlen, ep->tx, off, gso, ecn);
        ngtcp2_conn_update_pkt_tx_time(qc->conn, ts);
    }
    return 0;
}

/* Arms qc's timer for ngtcp2's next expiry. */
static void conn_arm(xQuicConn *qc) {
    xEventLoop *loop = qc->ep->net->loop;
    ngtcp2_tstamp expiry = ngtcp2_conn_get_expiry(qc->conn), now = now_ns();
    if (expiry == UINT64_MAX) {
        xTimerStop(loop, &qc->timer);
        return;
    }
    ngtcp2_tstamp wait = expiry > now ? expiry - now : 0;
    if (wait < XQUIC_PRECISE_BELOW_NS)
        xTimerStartPrecise(loop, &qc->timer, wait / 1000 + 1);
    else
        xTimerStart(loop, &qc->timer, wait / NGTCP2_MILLISECONDS + 1);
}

/* ---- Spare blocks ---- */

/* A block of l's size: a spare one, or a new one of size bytes (NULL when
 * out of memory). */
static void *spare_take(xQuicSpares *l, size_t size) {
    xQuicSpare *b = l->first;
    if (!b) return malloc(size);
    l->first = b->next;
    l->count--;
    return b;
}

static void spare_put(xQuicSpares *l, void *block) {
    if (l->count == XQUIC_SPARE_MAX) {
        free(block);
        return;
    }
    xQuicSpare *b = block;
    b->next = l->first;
    l->first = b;
    l->count++;
}

static void spare_free_all(xQuicSpares *l) {
    while (l->first) free(spare_take(l, 0));
}

/* Lets go of an acknowledged (or abandoned) chunk: its bytes' owner hears
 * of it, and a copy of the usual room is kept for the next. */
static void chunk_free(xQuicStream *s, xQuicChunk *c) {
    if (c->release) c->release(c->arg);
    switch (c->kind) {
    case XQUIC_CHUNK_EMBEDDED: s->first_busy = false; break;
    case XQUIC_CHUNK_SPARE: spare_put(&s->qc->ep->spare_chunks, c); break;
    case XQUIC_CHUNK_REF:
    case XQUIC_CHUNK_OWN: free(c); break;
    }
}

/* ---- Closing ---- */

static void stream_free(xQuicStream *s) {
    xQuicConn *qc = s->qc;
    stream_send_unlink(s);
    while (s->head) {
        xQuicChunk *c = s->head;
        s->head = c->next;
        chunk_free(s, c);
    }
    if (s->prev)
        s->prev->next = s->next;
    else
        qc->streams = s->next;
    if (s->next) s->next->prev = s->prev;
    if (s->first_room_size)
        spare_put(&qc->ep->spare_streams, s);
    else
        free(s);
}

/* Frees ngtcp2's and GnuTLS's state of qc, after the application has heard
 * of every stream's close and its own; the memory waits for the last
 * reference. */
static void conn_teardown(xQuicConn *qc) {
    if (qc->state == XQUIC_GONE) return;
    xQuicEndpoint *ep = qc->ep;
    bool told = qc->state == XQUIC_OPEN;
    if (qc->state == XQUIC_HANDSHAKING) ep->handshaking--;
    qc->state = XQUIC_GONE;
    while (qc->streams) {
        if (told && ep->conf.app->on_stream_close) ep->conf.app->on_stream_close(qc, qc->streams);
        stream_free(qc->streams);
    }
    if (told && ep->conf.app->on_close) ep->conf.app->on_close(qc);
    cid_remove_all(qc);
    xTimerStop(ep->net->loop, &qc->timer);
    ngtcp2_conn_del(qc->conn);
    qc->conn = NULL;
    xQuicTlsSessionEnd(qc->tls);
    qc->tls = NULL;
    if (qc->prev)
        qc->prev->next = qc->next;
    else
        ep->conns = qc->next;
    if (qc->next) qc->next->prev = qc->prev;
    ep->count--;
    if (ep->on_gone) ep->on_gone(ep->on_gone_arg);
    xQuicConnRelease(qc);
}

/* Sends CONNECTION_CLOSE for err (an ngtcp2 error, or 0 with the
 * application's code) and tears qc down: the closing period's answers to
 * late packets are left out, which costs the peer a timeout at worst. */
static void conn_close_now(xQuicConn *qc, int liberr, uint64_t app_code) {
    if (qc->state == XQUIC_GONE) return;
    xQuicCloseError ccerr;
    xq_close_error_default(&ccerr);
    if (liberr == NGTCP2_ERR_CRYPTO)
        xq_close_error_set_tls_alert(&ccerr, ngtcp2_conn_get_tls_alert(qc->conn), NULL, 0);
    else if (liberr)
        xq_close_error_set_liberr(&ccerr, liberr, NULL, 0);
    else
        xq_close_error_set_application(&ccerr, app_code, NULL, 0);
    if (!xq_in_closing(qc->conn) && !xq_in_draining(qc->conn)) {
        ngtcp2_path_storage ps;
        ngtcp2_path_storage_zero(&ps);
        ngtcp2_pkt_info pi;
        ngtcp2_ssize n = ngtcp2_conn_write_connection_close(qc->conn, &ps.path, &pi, qc->ep->tx,
                                                            sizeof qc->ep->tx, &ccerr, now_ns());
        if (n > 0)
            send_packets(qc->ep, qc, ps.path.remote.addr, (socklen_t)ps.path.remote.addrlen, qc->ep->tx,
                         (size_t)n, (size_t)n, 0);
    }
    conn_teardown(qc);
}

/* The end of every event on qc: a close asked for or an error met goes
 * out; otherwise what is due is written and the timer re-armed. */
static void conn_settle(xQuicConn *qc) {
    if (qc->state == XQUIC_GONE) return;
    if (qc->state == XQUIC_OPEN && !qc->fatal && !qc->close_owed && qc->ep->conf.app->on_settle) {
        qc->settling = true; /* its writes go out below, not at another turn's end */
        qc->ep->conf.app->on_settle(qc);
        qc->settling = false;
    }
    if (qc->fatal) {
        conn_close_now(qc, qc->fatal, 0);
        return;
    }
    if (qc->close_owed) {
        conn_close_now(qc, 0, qc->close_code);
        return;
    }
    if (qc->credit) { /* one MAX_DATA's worth for every stream the event read */
        ngtcp2_conn_extend_max_offset(qc->conn, qc->credit);
        qc->credit = 0;
    }
    int rv = conn_write(qc);
    if (rv) {
        conn_close_now(qc, rv, 0);
        return;
    }
    conn_arm(qc);
}

static void conn_flush(xEventLoop *loop, xTurnEnd *call) {
    xQuicConn *qc = (xQuicConn *)((char *)call - offsetof(xQuicConn, flush));
    conn_settle(qc);
    xQuicConnRelease(qc);
}

static void conn_on_timer(xEventLoop *loop, xTimer *timer, void *arg) {
    xQuicConn *qc = arg;
    qc->refs++;
    int rv = ngtcp2_conn_handle_expiry(qc->conn, now_ns());
    if (rv == NGTCP2_ERR_IDLE_CLOSE)
        conn_teardown(qc);
    else if (rv)
        conn_close_now(qc, rv, 0);
    else
        conn_settle(qc);
    xQuicConnRelease(qc);
}

/* ---- ngtcp2's callbacks ---- */

static xQuicStream *stream_new(xQuicConn *qc, int64_t id) {
    bool roomy = (id & 0x2) == 0; /* bidirectional (RFC 9000 §2.1) */
    xQuicStream *s =
        roomy ? spare_take(&qc->ep->spare_streams, sizeof *s + XQUIC_STREAM_ROOM) : malloc(sizeof *s);
    if (!s) return NULL;
    /* All but the embedded chunk and its room, which are written before
     * they are read (first_busy). */
    memset(s, 0, offsetof(xQuicStream, first));
    memset(&s->first_room_size, 0, sizeof *s - offsetof(xQuicStream, first_room_size));
    s->qc = qc;
    s->id = id;
    s->first_room_size = roomy ? XQUIC_STREAM_ROOM : 0;
    s->next = qc->streams;
    if (qc->streams) qc->streams->prev = s;
    qc->streams = s;
    ngtcp2_conn_set_stream_user_data(qc->conn, id, s);
    return s;
}

static ngtcp2_conn *conn_of_ref(ngtcp2_crypto_conn_ref *ref) { return ((xQuicConn *)ref)->conn; }

static bool app_open(xQuicConn *qc) {
    if (qc->state != XQUIC_HANDSHAKING) return qc->state == XQUIC_OPEN;
    qc->state = XQUIC_OPEN;
    if (!qc->ep->conf.app->on_open(qc)) {
        qc->state = XQUIC_HANDSHAKING; /* the application never had it */
        qc->fatal = NGTCP2_ERR_CALLBACK_FAILURE;
        return false;
    }
    qc->ep->handshaking--;
    return true;
}

/* Gives the client a token for its next connection from this address
 * (RFC 9000 §8.1.3): with it, that one needs no Retry. */
static void offer_token(xQuicConn *qc) {
    uint8_t token[NGTCP2_CRYPTO_MAX_REGULAR_TOKENLEN];
    ngtcp2_ssize n = ngtcp2_crypto_generate_regular_token(token, qc->ep->conf.token_secret, 32,
                                                          (const ngtcp2_sockaddr *)&qc->remote,
                                                          (ngtcp2_socklen)qc->remote_len, now_ns());
    if (n > 0) ngtcp2_conn_submit_new_token(qc->conn, token, (size_t)n); /* out of memory: no token */
}

static int on_handshake_completed(ngtcp2_conn *conn, void *user_data) {
    xQuicConn *qc = user_data;
    xNetAddrSet(&qc->view.addr, &qc->remote, qc->ep->conf.local_port);
    if (!app_open(qc)) return NGTCP2_ERR_CALLBACK_FAILURE;
    offer_token(qc);
    return 0;
}

static int on_stream_open(ngtcp2_conn *conn, int64_t id, void *user_data) {
    return stream_new(user_data, id) ? 0 : NGTCP2_ERR_CALLBACK_FAILURE;
}

static int on_recv_stream_data(ngtcp2_conn *conn, uint32_t flags, int64_t id, uint64_t offset,
                               const uint8_t *data, size_t len, void *user_data, void *stream_user_data) {
    xQuicConn *qc = user_data;
    xQuicStream *s = stream_user_data ? stream_user_data : stream_new(qc, id);
    if (!s || !app_open(qc)) return NGTCP2_ERR_CALLBACK_FAILURE;
    if (flags & XQ_STREAM_DATA_EARLY) s->early = true;
    if (flags & NGTCP2_STREAM_DATA_FLAG_FIN) s->ended = true;
    if (qc->rx_path) { /* the packet's first stream data: the rest of it has the same sender */
        view_see_sender(qc);
        qc->rx_path = NULL;
    }
    qc->ep->conf.app->on_stream_data(qc, s, data, len, flags & NGTCP2_STREAM_DATA_FLAG_FIN);
    return 0;
}

static int on_acked_stream_data(ngtcp2_conn *conn, int64_t id, uint64_t offset, uint64_t len, void *user_data,
                                void *stream_user_data) {
    xQuicStream *s = stream_user_data;
    if (!s) return 0;
    s->acked = offset + len;
    while (s->head && s->head->offset + s->head->len <= s->acked) {
        xQuicChunk *c = s->head;
        /* The chunk writes start from, all acknowledged, is the last: the
         * next write starts a new one (an idle stream keeps none). */
        if (c == s->unsent) s->unsent = NULL;
        s->head = c->next;
        if (!s->head) s->tail = NULL;
        chunk_free(s, c);
    }
    xQuicConn *qc = user_data;
    if (qc->state == XQUIC_OPEN && qc->ep->conf.app->on_stream_acked)
        qc->ep->conf.app->on_stream_acked(qc, s);
    return 0;
}

static int on_stream_close(ngtcp2_conn *conn, uint32_t flags, int64_t id, uint64_t code, void *user_data,
                           void *stream_user_data) {
    xQuicConn *qc = user_data;
    xQuicStream *s = stream_user_data;
    if (!ngtcp2_conn_is_local_stream(conn, id)) {
        /* The peer may open another in its place. */
        if (ngtcp2_is_bidi_stream(id))
            ngtcp2_conn_extend_max_streams_bidi(conn, 1);
        else
            ngtcp2_conn_extend_max_streams_uni(conn, 1);
    }
    if (!s) return 0;
    if (qc->state == XQUIC_OPEN && qc->ep->conf.app->on_stream_close)
        qc->ep->conf.app->on_stream_close(qc, s);
    stream_free(s);
    return 0;
}

static void tell_reset(xQuicConn *qc, xQuicStream *s, uint64_t code) {
    if (s && qc->state == XQUIC_OPEN && qc->ep->conf.app->on_stream_reset)
        qc->ep->conf.app->on_stream_reset(qc, s, code);
}

/* (ngtcp2's stream_stop_sending callback is not the peer's STOP_SENDING but
 * our own xQuicStreamStopReading: nothing to tell, and our sending side goes
 * on, so a response written after its request was let go still arrives.) */
static int on_stream_reset(ngtcp2_conn *conn, int64_t id, uint64_t final_size, uint64_t code, void *user_data,
                           void *stream_user_data) {
    tell_reset(user_data, stream_user_data, code);
    return 0;
}

static int on_extend_max_stream_data(ngtcp2_conn *conn, int64_t id, uint64_t max_data, void *user_data,
                                     void *stream_user_data) {
    xQuicStream *s = stream_user_data;
    if (s && stream_has_output(s)) stream_send_link(s);
    return 0;
}

static void on_rand(uint8_t *dest, size_t len, const ngtcp2_rand_ctx *ctx) { random_bytes(dest, len); }

static int on_get_new_cid(ngtcp2_conn *conn, ngtcp2_cid *cid, uint8_t *token, size_t cidlen,
                          void *user_data) {
    xQuicConn *qc = user_data;
    if (!cid_make(qc->ep, cid, token) || !cid_add(qc, cid)) return NGTCP2_ERR_CALLBACK_FAILURE;
    return 0;
}

static int on_remove_cid(ngtcp2_conn *conn, const ngtcp2_cid *cid, void *user_data) {
    cid_remove(user_data, cid);
    return 0;
}

static const ngtcp2_callbacks callbacks = {
    .recv_client_initial = ngtcp2_crypto_recv_client_initial_cb,
    .recv_crypto_data = ngtcp2_crypto_recv_crypto_data_cb,
    .handshake_completed = on_handshake_completed,
    .encrypt = ngtcp2_crypto_encrypt_cb,
    .decrypt = ngtcp2_crypto_decrypt_cb,
    .hp_mask = ngtcp2_crypto_hp_mask_cb,
    .recv_stream_data = on_recv_stream_data,
    .acked_stream_data_offset = on_acked_stream_data,
    .stream_open = on_stream_open,
    .stream_close = on_stream_close,
    .rand = on_rand,
    .get_new_connection_id = on_get_new_cid,
    .remove_connection_id = on_remove_cid,
    .update_key = ngtcp2_crypto_update_key_cb,
    .stream_reset = on_stream_reset,
    .extend_max_stream_data = on_extend_max_stream_data,
    .delete_crypto_aead_ctx = ngtcp2_crypto_delete_crypto_aead_ctx_cb,
    .delete_crypto_cipher_ctx = ngtcp2_crypto_delete_crypto_cipher_ctx_cb,
    .get_path_challenge_data = ngtcp2_crypto_get_path_challenge_data_cb,
    .version_negotiation = ngtcp2_crypto_version_negotiation_cb,
};

/* ---- A request's view of its connection ---- */

static bool view_tls_info(const xConn *view, struct xTlsInfo *info) {
    xQuicConn *qc = (xQuicConn *)((char *)view - offsetof(xQuicConn, view));
    if (!qc->tls) return false;
    xQuicTlsDescribe(qc->tls, info, qc->server_name, sizeof qc->server_name);
    return true;
}

/* Only what core reads of a request's connection: it is secure and has TLS
 * facts. Nothing sends through it. */
static const xTransport view_transport = {.secure = true, .tls_info = view_tls_info};

/* ---- Packets in ---- */

/* What a new client's first Initial says of it. */
typedef struct xQuicAdmission {
    ngtcp2_cid original_dcid; /* the DCID of its very first Initial, before any Retry */
    bool retried;             /* it echoes our Retry's token */
    const uint8_t *token;     /* a token of ours that checked out (its address is validated), or NULL */
    size_t token_len;
} xQuicAdmission;

static xQuicConn *conn_new(xQuicEndpoint *ep, const ngtcp2_pkt_hd *hd, const ngtcp2_path *path,
                           const xQuicAdmission *admission) {
    xQuicConn *qc = calloc(1, sizeof *qc);
    if (!qc) return NULL;
    qc->ep = ep;
    qc->refs = 1; /* dropped by the teardown */
    qc->ref.get_conn = conn_of_ref;
    qc->ref.user_data = qc;
    memcpy(&qc->local, path->local.addr, path->local.addrlen);
    qc->local_len = (socklen_t)path->local.addrlen;
    memcpy(&qc->remote, path->remote.addr, path->remote.addrlen);
    qc->remote_len = (socklen_t)path->remote.addrlen;
    xTimerInit(&qc->timer, conn_on_timer, qc);
    qc->flush.fn = conn_flush;
    qc->view.net = ep->net;
    qc->view.transport = &view_transport;
    qc->view.fd = -1;
    qc->view.refs = 1;
    xNetAddrSet(&qc->view.addr, &qc->remote, ep->conf.local_port);

    ngtcp2_cid scid;
    ngtcp2_settings settings;
    ngtcp2_settings_default(&settings);
    settings.initial_ts = now_ns();
    settings.max_tx_udp_payload_size = NGTCP2_MAX_PMTUD_UDP_PAYLOAD_SIZE;
    if (admission->token) XQ_SET_TOKEN(settings, admission->token, admission->token_len, admission->retried);
    if (ep->conf.handshake_timeout_ms) /* 0: ngtcp2's default */
        settings.handshake_timeout = (ngtcp2_duration)ep->conf.handshake_timeout_ms * NGTCP2_MILLISECONDS;
    ngtcp2_transport_params params;
    ngtcp2_transport_params_default(&params);
    params.initial_max_streams_bidi = ep->conf.max_streams_bidi;
    /* Control and QPACK's two, and room for the extensions' and grease streams a
     * client may open (RFC 9114 §6.2), which are read and dropped. */
    params.initial_max_streams_uni = 16;
    params.initial_max_data = ep->conf.conn_window;
    params.initial_max_stream_data_bidi_remote = ep->conf.stream_window;
    params.initial_max_stream_data_uni = ep->conf.stream_window;
    params.max_idle_timeout = (ngtcp2_duration)ep->conf.idle_timeout_ms * NGTCP2_MILLISECONDS;
    params.active_connection_id_limit = 4;
    params.stateless_reset_token_present = 1;
    XQ_SET_ORIGINAL_DCID(params, admission->original_dcid);
    if (admission->retried) {
        params.retry_scid = hd->dcid; /* the ID our Retry chose, which its token seals */
        params.retry_scid_present = 1;
    }
    if (!cid_make(ep, &scid, params.stateless_reset_token)) goto fail;
    if (ngtcp2_conn_server_new(&qc->conn, &hd->scid, &scid, path, hd->version, &callbacks, &settings, &params,
                               NULL, qc) != 0) {
        qc->conn = NULL;
        goto fail;
    }
    qc->tls = xQuicTlsSessionStart(ep->conf.tls, qc->conn, &qc->ref);
    if (!qc->tls || !cid_add(qc, &scid) || !cid_add(qc, &hd->dcid)) goto fail;
    qc->next = ep->conns;
    if (ep->conns) ep->conns->prev = qc;
    ep->conns = qc;
    ep->count++;
    ep->handshaking++;
    return qc;
fail:
    cid_remove_all(qc);
    if (qc->conn) ngtcp2_conn_del(qc->conn);
    xQuicTlsSessionEnd(qc->tls);
    free(qc);
    return NULL;
}

/* Answers a short-header packet for a connection nobody here knows with a
 * stateless reset (RFC 9000 §10.3), smaller than what came so two
 * endpoints cannot loop. A connection ID of another worker's is left alone:
 * its packets are for that worker (see README, "HTTP/3"). */
static void send_stateless_reset(xQuicEndpoint *ep, const uint8_t *dcid, size_t dcidlen, size_t len,
                                 const struct sockaddr *remote, socklen_t remote_len) {
    if (dcidlen != XQUIC_CID_LEN || dcid[0] != ep->conf.worker_id || len < 43) return;
    ngtcp2_cid cid;
    ngtcp2_cid_init(&cid, dcid, dcidlen);
    uint8_t token[NGTCP2_STATELESS_RESET_TOKENLEN], noise[64], out[128];
    if (ngtcp2_crypto_generate_stateless_reset_token(token, ep->conf.secret, 32, &cid) != 0) return;
    size_t noise_len = len - 1 - NGTCP2_STATELESS_RESET_TOKENLEN - 1;
    if (noise_len > sizeof noise) noise_len = sizeof noise;
    random_bytes(noise, noise_len);
    ngtcp2_ssize n = ngtcp2_pkt_write_stateless_reset(out, sizeof out, token, noise, noise_len);
    if (n > 0) send_packets(ep, NULL, remote, remote_len, out, (size_t)n, (size_t)n, 0);
}

static void send_version_negotiation(xQuicEndpoint *ep, const ngtcp2_version_cid *vc,
                                     const struct sockaddr *remote, socklen_t remote_len) {
    uint8_t out[256], unused;
    random_bytes(&unused, 1);
    static const uint32_t versions[] = {NGTCP2_PROTO_VER_V1};
    ngtcp2_ssize n = ngtcp2_pkt_write_version_negotiation(out, sizeof out, unused, vc->scid, vc->scidlen,
                                                          vc->dcid, vc->dcidlen, versions, 1);
    if (n > 0) send_packets(ep, NULL, remote, remote_len, out, (size_t)n, (size_t)n, 0);
}

/* Takes the path ngtcp2 now uses for qc: a client that moved (migration,
 * NAT rebinding, RFC 9000 §9) is answered at, and seen by its requests
 * from, its new address. */
static void conn_follow_path(xQuicConn *qc) {
    const ngtcp2_path *p = ngtcp2_conn_get_path(qc->conn);
    if (p->remote.addrlen == qc->remote_len && memcmp(p->remote.addr, &qc->remote, qc->remote_len) == 0 &&
        p->local.addrlen == qc->local_len && memcmp(p->local.addr, &qc->local, qc->local_len) == 0) {
        if (qc->view_elsewhere) xNetAddrSet(&qc->view.addr, &qc->remote, qc->ep->conf.local_port);
        qc->view_elsewhere = false;
        return;
    }
    memcpy(&qc->remote, p->remote.addr, p->remote.addrlen);
    qc->remote_len = (socklen_t)p->remote.addrlen;
    memcpy(&qc->local, p->local.addr, p->local.addrlen);
    qc->local_len = (socklen_t)p->local.addrlen;
    xNetAddrSet(&qc->view.addr, &qc->remote, qc->ep->conf.local_port);
    qc->view_elsewhere = false;
}

/* Requests see the address their packet came from: ngtcp2 moves to a new
 * path only once the packet that came on it has been read, and the
 * request in it is dispatched while it is read. */
static void view_see_sender(xQuicConn *qc) {
    const ngtcp2_addr *from = &qc->rx_path->remote;
    if (from->addrlen == qc->remote_len && memcmp(from->addr, &qc->remote, qc->remote_len) == 0 &&
        !qc->view_elsewhere)
        return;
    struct sockaddr_storage sender;
    memcpy(&sender, from->addr, from->addrlen);
    xNetAddrSet(&qc->view.addr, &sender, qc->ep->conf.local_port);
    qc->view_elsewhere = true;
}

/* Asks the client to prove its address (RFC 9000 §8.1.2): a Retry with a
 * token sealing the address, the DCID it chose and a new one of ours, which
 * its next Initial must carry. */
static void send_retry(xQuicEndpoint *ep, const ngtcp2_pkt_hd *hd, const struct sockaddr *remote,
                       socklen_t remote_len) {
    ngtcp2_cid scid = {.datalen = XQUIC_CID_LEN};
    random_bytes(scid.data, XQUIC_CID_LEN);
    scid.data[0] = ep->conf.worker_id;
    uint8_t token[NGTCP2_CRYPTO_MAX_RETRY_TOKENLEN], out[512];
    ngtcp2_ssize len = ngtcp2_crypto_generate_retry_token(
        token, ep->conf.token_secret, 32, hd->version, (const ngtcp2_sockaddr *)remote,
        (ngtcp2_socklen)remote_len, &scid, &hd->dcid, now_ns());
    if (len < 0) return;
    ngtcp2_ssize n = ngtcp2_crypto_write_retry(out, sizeof out, hd->version, &hd->scid, &scid, &hd->dcid,
                                               token, (size_t)len);
    if (n > 0) send_packets(ep, NULL, remote, remote_len, out, (size_t)n, (size_t)n, 0);
}

/* A Retry token that does not check out (forged, expired, or from another
 * address) closes the attempt with INVALID_TOKEN (RFC 9000 §8.1.2), keeping
 * no state. */
static void refuse_token(xQuicEndpoint *ep, const ngtcp2_pkt_hd *hd, const struct sockaddr *remote,
                         socklen_t remote_len) {
    uint8_t out[256];
    ngtcp2_ssize n = ngtcp2_crypto_write_connection_close(out, sizeof out, hd->version, &hd->scid, &hd->dcid,
                                                          NGTCP2_INVALID_TOKEN, NULL, 0);
    if (n > 0) send_packets(ep, NULL, remote, remote_len, out, (size_t)n, (size_t)n, 0);
}

/* Decides by a new client's Initial whether it may start a connection now
 * (admission filled), or is answered statelessly: a Retry when its address
 * needs proving, a close when its Retry token is bad. */
static bool admit(xQuicEndpoint *ep, const ngtcp2_pkt_hd *hd, const struct sockaddr *remote,
                  socklen_t remote_len, xQuicAdmission *admission) {
    *admission = (xQuicAdmission){.original_dcid = hd->dcid};
    const uint8_t *token = XQ_HD_TOKEN(hd);
    size_t token_len = XQ_HD_TOKENLEN(hd);
    ngtcp2_tstamp ts = now_ns();
    bool valid = false;
    if (token_len && token[0] == NGTCP2_CRYPTO_TOKEN_MAGIC_RETRY) {
        if (ngtcp2_crypto_verify_retry_token(&admission->original_dcid, token, token_len,
                                             ep->conf.token_secret, 32, hd->version,
                                             (const ngtcp2_sockaddr *)remote, (ngtcp2_socklen)remote_len,
                                             &hd->dcid, XQUIC_RETRY_TOKEN_LIFETIME, ts) != 0) {
            refuse_token(ep, hd, remote, remote_len);
            return false;
        }
        valid = admission->retried = true;
    } else if (token_len && token[0] == NGTCP2_CRYPTO_TOKEN_MAGIC_REGULAR) {
        /* One that fails (expired, another address) is as none (RFC 9000 §8.1.3). */
        valid = ngtcp2_crypto_verify_regular_token(
                    token, token_len, ep->conf.token_secret, 32, (const ngtcp2_sockaddr *)remote,
                    (ngtcp2_socklen)remote_len, XQUIC_REGULAR_TOKEN_LIFETIME, ts) == 0;
    }
    if (valid) {
        admission->token = token;
        admission->token_len = token_len;
        return true;
    }
    if (ep->handshaking >= ep->conf.retry_from) {
        send_retry(ep, hd, remote, remote_len);
        return false;
    }
    return true;
}

/* RFC 9000 §5.2.2: a server that stops gracefully refuses a new connection
 * with CONNECTION_REFUSED in an Initial of its own, smaller than the client's,
 * so the client hears at once instead of waiting out its handshake. */
static void send_refusal(xQuicEndpoint *ep, const ngtcp2_pkt_hd *hd, const struct sockaddr *remote,
                         socklen_t remote_len) {
    if (hd->type != NGTCP2_PKT_INITIAL) return;
    uint8_t out[256];
    ngtcp2_ssize n = ngtcp2_crypto_write_connection_close(out, sizeof out, hd->version, &hd->scid, &hd->dcid,
                                                          NGTCP2_CONNECTION_REFUSED, NULL, 0);
    if (n > 0) send_packets(ep, NULL, remote, remote_len, out, (size_t)n, (size_t)n, 0);
}

static void on_datagram(xQuicEndpoint *ep, uint8_t *data, size_t len, struct sockaddr_storage *remote,
                        socklen_t remote_len, struct sockaddr_storage *local, socklen_t local_len,
                        uint32_t ecn) {
    ngtcp2_version_cid vc;
    int rv = ngtcp2_pkt_decode_version_cid(&vc, data, len, XQUIC_CID_LEN);
    if (rv == NGTCP2_ERR_VERSION_NEGOTIATION) {
        send_version_negotiation(ep, &vc, (struct sockaddr *)remote, remote_len);
        return;
    }
    if (rv != 0) return;
    ngtcp2_path path = {.local = {(struct sockaddr *)local, local_len},
                        .remote = {(struct sockaddr *)remote, remote_len}};
    xQuicConn *qc = cid_find(ep, vc.dcid, vc.dcidlen);
    if (!qc) {
        if (!(data[0] & 0x80)) {
            send_stateless_reset(ep, vc.dcid, vc.dcidlen, len, (struct sockaddr *)remote, remote_len);
            return;
        }
        ngtcp2_pkt_hd hd;
        if (ep->count >= ep->conf.max_connections || ngtcp2_accept(&hd, data, len) != 0) return;
        if (ep->draining) {
            send_refusal(ep, &hd, (struct sockaddr *)remote, remote_len);
            return;
        }
        xQuicAdmission admission;
        if (!admit(ep, &hd, (struct sockaddr *)remote, remote_len, &admission)) return;
        qc = conn_new(ep, &hd, &path, &admission);
        if (!qc) return;
    }
    if (qc->state == XQUIC_GONE || xq_in_closing(qc->conn) || xq_in_draining(qc->conn)) return;
    qc->refs++;
    ngtcp2_pkt_info pi = {.ecn = ecn};
    qc->rx_path = &path;
    rv = ngtcp2_conn_read_pkt(qc->conn, &path, &pi, data, len, now_ns());
    qc->rx_path = NULL;
    if (rv == NGTCP2_ERR_DRAINING || rv == NGTCP2_ERR_DROP_CONN)
        conn_teardown(qc);
    else if (rv)
        conn_close_now(qc, qc->fatal ? qc->fatal : rv, 0);
    else if (qc->close_owed || qc->fatal)
        conn_settle(qc);
    else {
        conn_follow_path(qc);
        schedule_flush(qc);
    }
    xQuicConnRelease(qc);
}

/* What a message's control messages say: where its datagrams were sent to,
 * their ECN codepoint, and with UDP_GRO the size of each (0: one datagram). */
typedef struct {
    struct sockaddr_storage local;
    socklen_t local_len; /* 0: unknown, the message is dropped */
    uint32_t ecn;
    size_t segment;
} xQuicRxInfo;

static void read_control(const xQuicEndpoint *ep, struct msghdr *m, xQuicRxInfo *info) {
    info->local_len = ep->bound_len;
    info->ecn = 0;
    info->segment = 0;
    if (!info->local_len) return;
    struct sockaddr_storage *local = &info->local;
    memcpy(local, &ep->bound, info->local_len);
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(m); cm; cm = CMSG_NXTHDR(m, cm)) {
        if (cm->cmsg_level == IPPROTO_IP && cm->cmsg_type == IP_TOS) {
            info->ecn = *(const uint8_t *)CMSG_DATA(cm) & 0x3;
        } else if (cm->cmsg_level == IPPROTO_IPV6 && cm->cmsg_type == IPV6_TCLASS) {
            int tclass;
            memcpy(&tclass, CMSG_DATA(cm), sizeof tclass);
            info->ecn = (uint32_t)tclass & 0x3;
        } else if (cm->cmsg_level == SOL_UDP && cm->cmsg_type == UDP_GRO) {
            int segment;
            memcpy(&segment, CMSG_DATA(cm), sizeof segment);
            if (segment > 0) info->segment = (size_t)segment;
        } else if (!ep->wildcard) {
            continue;
        } else if (cm->cmsg_level == IPPROTO_IP && cm->cmsg_type == IP_PKTINFO &&
                   local->ss_family == AF_INET) {
            struct in_pktinfo pi;
            memcpy(&pi, CMSG_DATA(cm), sizeof pi);
            ((struct sockaddr_in *)local)->sin_addr = pi.ipi_addr;
        } else if (cm->cmsg_level == IPPROTO_IPV6 && cm->cmsg_type == IPV6_PKTINFO &&
                   local->ss_family == AF_INET6) {
            struct in6_pktinfo pi;
            memcpy(&pi, CMSG_DATA(cm), sizeof pi);
            ((struct sockaddr_in6 *)local)->sin6_addr = pi.ipi6_addr;
        }
    }
}

static void on_readable(xEventLoop *loop, int fd, unsigned events, void *arg) {
    xQuicEndpoint *ep = arg;
    struct mmsghdr msgs[XQUIC_RX_BATCH];
    struct iovec iov[XQUIC_RX_BATCH];
    size_t handled = 0;
    for (int round = 0; round < XQUIC_RX_ROUNDS; round++) {
        for (int i = 0; i < XQUIC_RX_BATCH; i++) {
            iov[i] = (struct iovec){ep->rx + (size_t)i * ep->rx_slot, ep->rx_slot};
            msgs[i].msg_hdr = (struct msghdr){.msg_name = &ep->rx_names[i],
                                              .msg_namelen = sizeof ep->rx_names[i],
                                              .msg_iov = &iov[i],
                                              .msg_iovlen = 1,
                                              .msg_control = ep->rx_control[i],
                                              .msg_controllen = sizeof ep->rx_control[i]};
        }
        int n = recvmmsg(fd, msgs, XQUIC_RX_BATCH, MSG_DONTWAIT, NULL);
        if (n <= 0) return;
        for (int i = 0; i < n; i++) {
            if (msgs[i].msg_hdr.msg_flags & MSG_TRUNC) continue; /* larger than any packet we allow */
            xQuicRxInfo info;
            read_control(ep, &msgs[i].msg_hdr, &info);
            if (!info.local_len) continue;
            /* A coalesced train is handed on a datagram at a time, each
             * with its own length: ngtcp2 reads one datagram per call. */
            uint8_t *data = ep->rx + (size_t)i * ep->rx_slot;
            size_t len = msgs[i].msg_len, segment = info.segment ? info.segment : len;
            for (size_t at = 0; at < len; at += segment, handled++)
                on_datagram(ep, data + at, len - at < segment ? len - at : segment, &ep->rx_names[i],
                            msgs[i].msg_hdr.msg_namelen, &info.local, info.local_len, info.ecn);
        }
        if (n < XQUIC_RX_BATCH || handled >= XQUIC_RX_TURN_MAX) return;
    }
}

/* ---- The endpoint ---- */

int xQuicSocketOpen(const struct sockaddr_storage *addr, socklen_t len, bool reuseport) {
    int fd = socket(addr->ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int one = 1;
    if (reuseport) setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    int rcvbuf = XQUIC_RCVBUF;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    /* ECN: each datagram's codepoint is reported (RFC 9000 §13.4). */
    setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &one, sizeof one);
    if (addr->ss_family == AF_INET6) {
        setsockopt(fd, IPPROTO_IPV6, IPV6_RECVTCLASS, &one, sizeof one);
        setsockopt(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &one, sizeof one);
        int probe = IPV6_PMTUDISC_PROBE; /* DF set; ngtcp2 finds the path's MTU itself */
        setsockopt(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &probe, sizeof probe);
    } else {
        setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &one, sizeof one);
        int probe = IP_PMTUDISC_PROBE;
        setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &probe, sizeof probe);
    }
    if (bind(fd, (const struct sockaddr *)addr, len) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

/* The reuseport group's program (classic BPF, which needs no privilege): it
 * returns the index of the socket a datagram goes to, the worker's, which
 * every connection ID of ours carries in its first byte (RFC 9000 §17: a
 * short header's DCID starts at byte 1; a long header's at byte 6, after
 * the version and the DCID's length). The client's Initial and 0-RTT
 * packets carry an ID of its own choosing: those return an index past the
 * group's, and the kernel hashes their addresses, as without a program. */
static const struct sock_filter steer_code[] = {
    BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 0),            /* A = the first byte */
    BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 0x80, 2, 0), /* a long header? */
    BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 1),            /* short: A = DCID[0] */
    BPF_STMT(BPF_RET | BPF_A, 0),
    BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0x30),       /* long: its type */
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x20, 1, 0), /* Handshake: our ID */
    BPF_STMT(BPF_RET | BPF_K, 0xffffffff),           /* Initial, 0-RTT, Retry: the hash */
    BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 6),           /* A = DCID[0] */
    BPF_STMT(BPF_RET | BPF_A, 0),
};

bool xQuicSocketSteer(int fd) {
    struct sock_fprog prog = {sizeof steer_code / sizeof steer_code[0], (struct sock_filter *)steer_code};
    return setsockopt(fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &prog, sizeof prog) == 0;
}

static bool bound_to_any(int fd) {
    struct sockaddr_storage a;
    socklen_t len = sizeof a;
    if (getsockname(fd, (struct sockaddr *)&a, &len) != 0) return true;
    if (a.ss_family == AF_INET6) return IN6_IS_ADDR_UNSPECIFIED(&((struct sockaddr_in6 *)&a)->sin6_addr);
    return ((struct sockaddr_in *)&a)->sin_addr.s_addr == htonl(INADDR_ANY);
}

/* Asks the kernel to keep a peer's same-size datagrams together (UDP_GRO,
 * Linux 5.0): a client that sends with UDP_SEGMENT, as quic-go and Chromium
 * do, has its batch arrive in one message instead of being cut into one
 * per datagram on the way in. XK_UDP_GRO=0 in the environment leaves it off
 * (a kernel or NIC that mishandles it; the tests of the path without it). */
static bool enable_gro(int fd) {
    const char *env = getenv("XK_UDP_GRO");
    if (env && strcmp(env, "0") == 0) return false;
    int one = 1;
    return setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof one) == 0;
}

xQuicEndpoint *xQuicEndpointCreate(xNetContext *net, int fd, const xQuicEndpointConf *conf) {
    size_t rx_slot = enable_gro(fd) ? XQUIC_RX_GRO_SIZE : XQUIC_RX_SIZE;
    xQuicEndpoint *ep = calloc(1, sizeof *ep);
    uint8_t *rx = ep ? malloc(XQUIC_RX_BATCH * rx_slot) : NULL;
    if (!rx) {
        free(ep);
        close(fd);
        return NULL;
    }
    ep->rx = rx;
    ep->rx_slot = rx_slot;
    ep->net = net;
    ep->fd = fd;
    ep->conf = *conf;
    ep->wildcard = bound_to_any(fd);
    socklen_t bound_len = sizeof ep->bound;
    if (getsockname(fd, (struct sockaddr *)&ep->bound, &bound_len) == 0) ep->bound_len = bound_len;
    if (!table_grow(ep) || xEventLoopAdd(net->loop, fd, XEV_READ, on_readable, ep) != XOK) {
        free(ep->buckets);
        free(ep->rx);
        free(ep);
        close(fd);
        return NULL;
    }
    return ep;
}

void xQuicEndpointDestroy(xQuicEndpoint *ep) {
    if (!ep) return;
    ep->on_gone = NULL;
    while (ep->conns) conn_close_now(ep->conns, 0, ep->conf.app_no_error);
    xEventLoopRemove(ep->net->loop, ep->fd);
    close(ep->fd);
    free(ep->buckets);
    spare_free_all(&ep->spare_streams);
    spare_free_all(&ep->spare_chunks);
    free(ep->rx);
    free(ep);
}

void xQuicEndpointDrain(xQuicEndpoint *ep) {
    ep->draining = true;
    xQuicConn *next;
    for (xQuicConn *qc = ep->conns; qc; qc = next) {
        qc->refs++;
        if (qc->state == XQUIC_OPEN && ep->conf.app->on_drain)
            ep->conf.app->on_drain(qc);
        else if (qc->state == XQUIC_HANDSHAKING)
            qc->close_owed = true, qc->close_code = ep->conf.app_no_error;
        schedule_flush(qc);
        next = qc->next;
        xQuicConnRelease(qc);
    }
}

void xQuicEndpointCloseAll(xQuicEndpoint *ep) {
    ep->draining = true;
    while (ep->conns) conn_close_now(ep->conns, 0, ep->conf.app_no_error);
}

size_t xQuicEndpointConnections(const xQuicEndpoint *ep) { return ep->count; }

void xQuicEndpointOnGone(xQuicEndpoint *ep, void (*fn)(void *arg), void *arg) {
    ep->on_gone = fn;
    ep->on_gone_arg = arg;
}

void *xQuicEndpointArg(const xQuicEndpoint *ep) { return ep->conf.app_arg; }

/* ---- Connections and streams, for the application ---- */

void *xQuicConnApp(const xQuicConn *qc) { return qc->app; }
void xQuicConnSetApp(xQuicConn *qc, void *app) { qc->app = app; }
xQuicEndpoint *xQuicConnEndpoint(const xQuicConn *qc) { return qc->ep; }
xConn *xQuicConnView(xQuicConn *qc) { return &qc->view; }
void xQuicConnRetain(xQuicConn *qc) { qc->refs++; }

void xQuicConnRelease(xQuicConn *qc) {
    if (--qc->refs) return;
    free(qc);
}

bool xQuicConnClosed(const xQuicConn *qc) { return qc->state == XQUIC_GONE || qc->close_owed || qc->fatal; }

void xQuicConnClose(xQuicConn *qc, uint64_t app_error, const char *reason) {
    if (xQuicConnClosed(qc)) return;
    qc->close_owed = true;
    qc->close_code = app_error;
    schedule_flush(qc);
}

xQuicStream *xQuicOpenUni(xQuicConn *qc) {
    int64_t id;
    if (qc->state != XQUIC_OPEN || ngtcp2_conn_open_uni_stream(qc->conn, &id, NULL) != 0) return NULL;
    return stream_new(qc, id);
}

int64_t xQuicStreamId(const xQuicStream *s) { return s->id; }
bool xQuicStreamEarly(const xQuicStream *s) { return s->early; }
void *xQuicStreamApp(const xQuicStream *s) { return s->app; }
void xQuicStreamSetApp(xQuicStream *s, void *app) { s->app = app; }

xErrno xQuicStreamWrite(xQuicStream *s, const void *data, size_t len, bool fin, void (*release)(void *),
                        void *arg) {
    xQuicConn *qc = s->qc;
    if (s->write_shut || s->fin_queued || xQuicConnClosed(qc)) {
        if (release) release(arg);
        return XERR_CLOSED;
    }
    xQuicChunk *tail = s->tail;
    if (len && !release && tail && tail->len + len <= tail->room) { /* room 0: by reference */
        /* Appended to the last copy: bytes already handed to ngtcp2 stay
         * where they are, as its retransmissions need. */
        memcpy((uint8_t *)tail->data + tail->len, data, len);
        tail->len += len;
        s->queued += len;
    } else if (len) {
        xQuicChunk *c;
        size_t room = 0;
        xQuicChunkKind kind = XQUIC_CHUNK_REF;
        uint8_t *copy = NULL;
        if (release) {
            c = malloc(sizeof *c);
        } else if (!s->first_busy && len <= s->first_room_size) {
            c = &s->first, copy = s->first_room;
            room = s->first_room_size, kind = XQUIC_CHUNK_EMBEDDED;
            s->first_busy = true;
        } else {
            room = len > XQUIC_CHUNK_ROOM ? len : XQUIC_CHUNK_ROOM;
            kind = room == XQUIC_CHUNK_ROOM ? XQUIC_CHUNK_SPARE : XQUIC_CHUNK_OWN;
            c = kind == XQUIC_CHUNK_SPARE ? spare_take(&qc->ep->spare_chunks, sizeof *c + room)
                                          : malloc(sizeof *c + room);
            copy = c ? (uint8_t *)(c + 1) : NULL;
        }
        if (!c) {
            if (release) release(arg);
            return XERR_NOMEM;
        }
        *c = (xQuicChunk){.data = release ? data : copy,
                          .len = len,
                          .room = room,
                          .offset = s->queued,
                          .release = release,
                          .arg = arg,
                          .kind = kind};
        if (copy) memcpy(copy, data, len);
        if (s->tail)
            s->tail->next = c;
        else
            s->head = c;
        s->tail = c;
        if (!s->unsent || s->unsent->offset + s->unsent->len <= s->sent) s->unsent = c;
        s->queued += len;
    } else if (release) {
        release(arg);
    }
    s->fin_queued = fin;
    if (stream_has_output(s)) stream_send_link(s);
    schedule_flush(qc);
    return XOK;
}

size_t xQuicStreamUnacked(const xQuicStream *s) { return (size_t)(s->queued - s->acked); }

void xQuicStreamConsumed(xQuicStream *s, size_t n) {
    xQuicConn *qc = s->qc;
    if (!n || xQuicConnClosed(qc)) return;
    /* A stream whose end came has all its bytes: more credit on it would
     * never be used (RFC 9000 §4.5), the connection's would. */
    if (!s->ended) ngtcp2_conn_extend_max_stream_offset(qc->conn, s->id, n);
    qc->credit += n;
    schedule_flush(qc);
}

void xQuicStreamReset(xQuicStream *s, uint64_t code) {
    xQuicConn *qc = s->qc;
    if (xQuicConnClosed(qc)) return;
    xq_shutdown_stream(qc->conn, s->id, code);
    s->write_shut = true;
    stream_send_unlink(s);
    schedule_flush(qc);
}

void xQuicStreamStopReading(xQuicStream *s, uint64_t code) {
    xQuicConn *qc = s->qc;
    if (xQuicConnClosed(qc)) return;
    xq_shutdown_stream_read(qc->conn, s->id, code);
    schedule_flush(qc);
}
