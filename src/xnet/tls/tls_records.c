/* tls_records.c — TLS 1.2 and 1.3 records with AEAD ciphers, after
 * OpenSSL's handshake (see tls_records.h).
 *
 * Input is read into a block from the worker's cache, opened in place and
 * handed up record by record; the block goes back as soon as it is empty, so
 * an idle connection holds none, and a small partial record left waiting
 * moves to a block of its own size, so a peer that stops mid-record pins
 * little more than it sent. Output is gathered from the connection's queue
 * into records sealed in one block and written at once. A write the socket
 * takes only in part keeps the rest of the sealed bytes here; the plaintext
 * they carry is acknowledged to the queue only once they are all out, so the
 * queue offers the same bytes again and they are skipped, as OpenSSL's
 * partial writes work.
 *
 * What is here is the transport: reading, writing, alerts, KeyUpdate,
 * close_notify and the session's lifetime, with a sequence number each way.
 * Sealing and opening one record is tls_aead.c's, and the keys a KeyUpdate
 * moves to come from tls_keys.c. */
#include "xnet/tls/tls_records.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/crypto.h>
#include <openssl/err.h>

#include <xhttp/tls_conf.h>

/* The largest record body a peer may send (RFC 8446 §5.2, RFC 5246 §6.2.3). */
#define REC_BODY_MAX_13 (XTLS_PLAIN_MAX + 256)
#define REC_BODY_MAX_12 (XTLS_PLAIN_MAX + 2048)
/* Records in a row that carry no data (empty ones, ignored alerts, KeyUpdates)
 * allowed before the peer is taken to be spinning us, as OpenSSL does. */
#define IDLE_RECORDS_MAX 32
/* Input block: always room for one whole record and the start of the next. */
#define IN_CAP 32768
/* A partial record up to this size, left waiting after a read, moves to a
 * block of its own size; a larger one keeps the whole block (less than four
 * times what came) rather than be copied out and back at every read of a
 * bulk upload. */
#define IN_KEEP_MAX (IN_CAP / 4)
/* Output block: sealed records for up to this much, written at once. */
#define OUT_CAP 65536
/* Kept free in the output block for an alert or a KeyUpdate. */
#define CONTROL_ROOM 64

enum { ALERT_WARNING = 1, ALERT_FATAL = 2 };
enum {
    AD_CLOSE_NOTIFY = 0,
    AD_UNEXPECTED_MESSAGE = 10,
    AD_BAD_RECORD_MAC = 20,
    AD_RECORD_OVERFLOW = 22,
    AD_ILLEGAL_PARAMETER = 47,
    AD_DECODE_ERROR = 50,
    AD_PROTOCOL_VERSION = 70,
    AD_INTERNAL_ERROR = 80,
    AD_USER_CANCELED = 90,
    AD_NO_RENEGOTIATION = 100,
};
enum { HS_CLIENT_HELLO = 1, HS_KEY_UPDATE = 24 };
/* A TLS 1.3 KeyUpdate record: header, message, inner type, tag. */
#define KEY_UPDATE_RECORD (XTLS_RECORD_HEADER + 5 + 1 + XTLS_RECORD_TAG)

/* One direction of the session. */
typedef struct xTlsWay {
    xTlsAeadKeys keys;                     /* the cipher, keyed (the key itself is not kept), and the IV */
    uint64_t seq;                          /* of the next record */
    unsigned char secret[XTLS_SECRET_MAX]; /* TLS 1.3: the traffic secret a KeyUpdate moves on from */
} xTlsWay;

typedef struct xTlsRecords {
    xTlsWay read, write;
    size_t secret_len; /* TLS 1.3: the suite's hash length */
    char *in;          /* bytes read and not yet opened; NULL when none */
    size_t in_cap, in_start, in_end;
    const char *plain; /* an opened record's data not yet handed up (inside in) */
    size_t plain_len;
    char *out; /* sealed bytes not yet written; NULL when none */
    size_t out_cap, out_start, out_end;
    size_t out_covers;           /* plaintext those bytes carry, acknowledged once they are out */
    unsigned char key_update[5]; /* TLS 1.3: a KeyUpdate's pieces so far */
    size_t key_update_len;
    bool key_update_owed;  /* the peer asked for new keys: a KeyUpdate precedes our next record */
    unsigned idle_records; /* records in a row that carried no data */
    int error;             /* errno once the session broke */
    bool eof;              /* close_notify (or a bare FIN) came */
    bool close_notify_sent;
    bool fin_owed; /* the close_notify waits for the socket: the FIN follows it */
    xTlsSummary summary;
} xTlsRecords;

static const xTransport records_transport;

/* ---- Sealing and opening, our sequence numbers ---- */

static bool tls13(const xTlsRecords *r) { return r->write.keys.version == XTLS_VERSION_1_3; }

/* Where a record's plaintext starts after its header: TLS 1.2 AES-GCM sends
 * part of its nonce first. */
static size_t explicit_nonce(const xTlsRecords *r) { return xTlsAeadExplicitNonce(&r->write.keys); }

/* Bytes a record adds to its plaintext. */
static size_t record_overhead(const xTlsRecords *r) { return xTlsAeadOverhead(&r->write.keys); }

/* Seals the plain_len bytes already at rec + XTLS_RECORD_HEADER +
 * explicit_nonce(r) into our next record of content type type, in place;
 * *rec_len is its size. A sequence number, once tried, is never used again,
 * and the last one is never used, so none wraps. */
static bool seal(xTlsRecords *r, unsigned char *rec, size_t plain_len, int type, size_t *rec_len) {
    xTlsWay *write = &r->write;
    if (xTlsKeyUseAt(write->keys.aead, write->seq) == XTLS_KEYS_LAST) return false;
    return xTlsAeadSeal(&write->keys, write->seq++, rec, plain_len, type, rec_len);
}

/* The alert that answers a record that does not open (RFC 8446 §5.2, §5.4). */
static const unsigned char alert_for_unopened[] = {
    [XTLS_OPEN_FORGED] = AD_BAD_RECORD_MAC,
    [XTLS_OPEN_OVERFLOW] = AD_RECORD_OVERFLOW,
    [XTLS_OPEN_NO_TYPE] = AD_UNEXPECTED_MESSAGE,
};

/* Opens the peer's next record, at rec (body_len bytes after its header), in
 * place into *plain; false with *alert the alert to answer with. */
static bool open_record(xTlsRecords *r, unsigned char *rec, size_t body_len, xTlsPlaintext *plain,
                        int *alert) {
    xTlsWay *read = &r->read;
    if (xTlsKeyUseAt(read->keys.aead, read->seq) == XTLS_KEYS_LAST) { /* never wrap */
        *alert = AD_INTERNAL_ERROR;
        return false;
    }
    xTlsOpened opened = xTlsAeadOpen(&read->keys, read->seq++, rec, body_len, plain);
    if (opened == XTLS_OPENED) return true;
    *alert = alert_for_unopened[opened];
    return false;
}

/* A direction's keys after a KeyUpdate (RFC 8446 §7.2). */
typedef struct xTlsNextKeys {
    unsigned char secret[XTLS_SECRET_MAX];
    unsigned char key[XTLS_KEY_MAX];
    unsigned char iv[XTLS_IV_LEN];
} xTlsNextKeys;

/* Derives way's next keys into next, way unchanged. */
static bool next_keys(const xTlsRecords *r, const xTlsWay *way, xTlsNextKeys *next) {
    return xTlsNextTrafficSecret(way->secret, r->secret_len, next->secret) &&
           xTlsTrafficKeys(way->keys.aead, next->secret, r->secret_len, next->key, next->iv);
}

/* Moves way on to next: the cipher rekeyed, the IV and secret replaced, its
 * records counted from 0 again. */
static bool move_to_keys(const xTlsRecords *r, xTlsWay *way, const xTlsNextKeys *next) {
    if (!xTlsAeadKeysUpdate(&way->keys, next->key, next->iv)) return false;
    memcpy(way->secret, next->secret, r->secret_len);
    way->seq = 0;
    return true;
}

/* ---- Writing ---- */

static void release_out(xConn *conn, xTlsRecords *r) {
    xMemCacheFree(conn->net->mem, r->out);
    r->out = NULL;
    r->out_cap = r->out_start = r->out_end = 0;
}

/* Writes what is sealed. False with errno (EAGAIN: the socket is full). */
static bool write_out(xConn *conn, xTlsRecords *r) {
    while (r->out_start < r->out_end) {
        struct iovec v = {r->out + r->out_start, r->out_end - r->out_start};
        ssize_t w = xEventLoopSendv(conn->net->loop, conn->fd, &v, 1);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN) r->error = errno;
            return false;
        }
        r->out_start += (size_t)w;
    }
    release_out(conn, r);
    return true;
}

static bool seal_key_update(xTlsRecords *r, unsigned char *rec, size_t *rec_len);

/* The KeyUpdate the peer asked for (see on_key_update): sealed at the end of
 * the output block, which has room for it, and our write keys move on. False
 * when the keys are unknown now: the session is over. */
static bool seal_owed_key_update(xTlsRecords *r) {
    if (!r->key_update_owed) return true;
    size_t rec_len;
    if (!seal_key_update(r, (unsigned char *)r->out + r->out_end, &rec_len)) {
        r->error = EPROTO;
        return false;
    }
    r->out_end += rec_len;
    r->key_update_owed = false;
    return true;
}

/* Moves the bytes [*start, *end) of *block to the start of a new block of
 * cap bytes from the worker's cache; false, with nothing changed, when none
 * can be had. */
static bool move_bytes(xConn *conn, char **block, size_t *block_cap, size_t *start, size_t *end, size_t cap) {
    size_t held = *end - *start;
    char *moved = xMemCacheAlloc(conn->net->mem, cap);
    if (!moved) return false;
    if (held) memcpy(moved, *block + *start, held);
    xMemCacheFree(conn->net->mem, *block);
    *block = moved;
    *block_cap = cap;
    *start = 0;
    *end = held;
    return true;
}

/* Makes room for need more bytes after what is sealed, moving them to a
 * larger block: for the close_notify, which goes once, after a KeyUpdate
 * answer that waits for the socket and the one owed after it. Other records
 * of our own that find no room are not sent, so a peer cannot grow the
 * block by asking again and again. */
static bool out_room(xConn *conn, xTlsRecords *r, size_t need) {
    if (r->out && r->out_cap - r->out_end >= need) return true;
    size_t cap = r->out_end - r->out_start + need;
    return move_bytes(conn, &r->out, &r->out_cap, &r->out_start, &r->out_end,
                      cap > CONTROL_ROOM ? cap : CONTROL_ROOM);
}

/* Seals a record of our own (an alert; with type 0, none) after whatever is
 * sealed already, preceded by an owed KeyUpdate, and tries to send them. */
static bool send_control(xConn *conn, xTlsRecords *r, int type, const unsigned char *payload, size_t len) {
    if (r->close_notify_sent) return true; /* it ended our side: nothing follows it, not even an alert */
    if (!r->out) {
        r->out = xMemCacheAlloc(conn->net->mem, CONTROL_ROOM);
        if (!r->out) return false;
        r->out_cap = CONTROL_ROOM;
    }
    size_t need = (type ? len + record_overhead(r) : 0) + (r->key_update_owed ? KEY_UPDATE_RECORD : 0);
    if (r->out_cap - r->out_end < need) return false;
    if (!seal_owed_key_update(r)) return false;
    if (type) {
        unsigned char *rec = (unsigned char *)r->out + r->out_end;
        memcpy(rec + XTLS_RECORD_HEADER + explicit_nonce(r), payload, len);
        size_t rec_len;
        if (!seal(r, rec, len, type, &rec_len)) return false;
        r->out_end += rec_len;
    }
    if (write_out(conn, r)) return true;
    if (errno != EAGAIN) return false;
    xConnBlocked(conn); /* the queue may be empty: this is what brings us back */
    return true;
}

/* Ends the session with a fatal alert (RFC 8446 §6.2); -1 with errno. */
static int fail(xConn *conn, xTlsRecords *r, int description) {
    ERR_clear_error(); /* what EVP left there would fail the next OpenSSL call on this thread */
    if (!r->error) {
        unsigned char alert[2] = {ALERT_FATAL, (unsigned char)description};
        send_control(conn, r, XTLS_CT_ALERT, alert, sizeof alert);
        r->error = EPROTO;
    }
    errno = r->error;
    return -1;
}

static void send_close_notify(xConn *conn, xTlsRecords *r);

/* TLS 1.3: announces new write keys in a KeyUpdate sealed at rec under the
 * old ones, then moves to them (RFC 8446 §4.6.3). False when the keys are
 * unknown now: the session is over. */
static bool seal_key_update(xTlsRecords *r, unsigned char *rec, size_t *rec_len) {
    static const unsigned char not_requested[] = {HS_KEY_UPDATE, 0, 0, 1, 0};
    xTlsNextKeys next;
    memcpy(rec + XTLS_RECORD_HEADER, not_requested, sizeof not_requested);
    bool ok = next_keys(r, &r->write, &next) &&
              seal(r, rec, sizeof not_requested, XTLS_CT_HANDSHAKE, rec_len) &&
              move_to_keys(r, &r->write, &next);
    OPENSSL_cleanse(&next, sizeof next);
    return ok;
}

static ssize_t records_sendv(xConn *conn, const struct iovec *iov, int iovcnt) {
    xTlsRecords *r = conn->transport_state;
    if (r->error) {
        errno = r->error;
        return -1;
    }
    if (r->out && !write_out(conn, r)) return -1;
    if (r->out_covers) {
        /* Records sealed on an earlier call are out: the queue may move on. */
        size_t done = r->out_covers;
        r->out_covers = 0;
        return (ssize_t)done;
    }
    size_t per_record = XTLS_PLAIN_MAX + record_overhead(r);
    size_t room = OUT_CAP - CONTROL_ROOM;
    size_t total = 0, records = 0;
    for (int i = 0; i < iovcnt; i++) total += iov[i].iov_len;
    if (total == 0) return 0;
    /* As much as fits in the output block, whole records first. */
    size_t fit = room / per_record * XTLS_PLAIN_MAX;
    size_t tail = room % per_record;
    if (tail > record_overhead(r)) fit += tail - record_overhead(r);
    if (total > fit) total = fit;
    records = (total + XTLS_PLAIN_MAX - 1) / XTLS_PLAIN_MAX;
    r->out_cap = total + records * record_overhead(r) + CONTROL_ROOM;
    r->out = xMemCacheAlloc(conn->net->mem, r->out_cap);
    if (!r->out) {
        r->out_cap = 0;
        errno = ENOMEM;
        return -1;
    }
    /* In the block's control room; our keys then start over, so no KeyUpdate
     * for spent keys joins it there. */
    if (!seal_owed_key_update(r)) {
        errno = r->error;
        return -1;
    }
    int v = 0;
    size_t v_off = 0, left = total;
    while (left > 0) {
        size_t plain_len = left < XTLS_PLAIN_MAX ? left : XTLS_PLAIN_MAX;
        unsigned char *rec = (unsigned char *)r->out + r->out_end;
        if (xTlsKeyUseAt(r->write.keys.aead, r->write.seq) != XTLS_KEYS_USABLE) {
            size_t rec_len;
            if (!tls13(r)) {
                /* TLS 1.2 cannot change keys: what is sealed goes, then the session ends. */
                total -= left;
                if (total > 0) break;
                release_out(conn, r);
                send_close_notify(conn, r);
                r->error = EPIPE;
                errno = r->error;
                return -1;
            }
            if (!seal_key_update(r, rec, &rec_len)) {
                r->error = EPROTO;
                errno = r->error;
                return -1;
            }
            r->out_end += rec_len; /* in the block's control room: one per block at most */
            rec += rec_len;
        }
        unsigned char *data = rec + XTLS_RECORD_HEADER + explicit_nonce(r);
        for (size_t copied = 0; copied < plain_len;) {
            size_t take = iov[v].iov_len - v_off;
            if (take > plain_len - copied) take = plain_len - copied;
            memcpy(data + copied, (const char *)iov[v].iov_base + v_off, take);
            copied += take;
            v_off += take;
            if (v_off == iov[v].iov_len) v++, v_off = 0;
        }
        size_t rec_len;
        if (!seal(r, rec, plain_len, XTLS_CT_APPLICATION_DATA, &rec_len))
            return fail(conn, r, AD_INTERNAL_ERROR);
        r->out_end += rec_len;
        left -= plain_len;
    }
    r->out_covers = total;
    if (!write_out(conn, r)) return -1; /* EAGAIN: they go on the next call */
    r->out_covers = 0;
    return (ssize_t)total;
}

/* ---- Reading ---- */

/* TLS 1.3 KeyUpdate (RFC 8446 §4.6.3): our read keys move on. If the peer
 * asks, we owe one KeyUpdate of our own, sealed just before the next record
 * we send (at once when nothing waits for the socket): requests that come
 * before it all get that one answer, which §4.6.3 allows, so a peer that
 * asks again and again while our socket is full costs no room. Nothing
 * changes unless every step succeeds, so no key is ever used twice with one
 * nonce. */
static int on_key_update(xConn *conn, xTlsRecords *r, bool update_requested) {
    xTlsNextKeys next;
    bool ok = next_keys(r, &r->read, &next) && move_to_keys(r, &r->read, &next);
    OPENSSL_cleanse(&next, sizeof next);
    if (!ok) {
        ERR_clear_error();
        r->error = EPROTO; /* the keys are unknown now: not even an alert can be sealed */
        errno = r->error;
        return -1;
    }
    if (!update_requested || r->close_notify_sent) return 1; /* nothing is sent after close_notify */
    r->key_update_owed = true;
    if (!r->out && !send_control(conn, r, 0, NULL, 0)) {
        ERR_clear_error();
        if (!r->error) r->error = ENOMEM;
        errno = r->error;
        return -1;
    }
    return 1;
}

/* After the handshake a client may only update its keys (TLS 1.3), in a
 * record of its own; a TLS 1.2 ClientHello asks to renegotiate, which we
 * decline with a warning (RFC 5246 §7.2.2: no_renegotiation is always one),
 * as OpenSSL does, and the session goes on. A warning that finds no room,
 * earlier ones still waiting for the socket, is left out: the ServerHello
 * that never comes tells the client as much. */
static int on_handshake(xConn *conn, xTlsRecords *r, const unsigned char *msg, size_t len) {
    if (!tls13(r) && len > 0 && msg[0] == HS_CLIENT_HELLO) {
        static const unsigned char no_renegotiation[2] = {ALERT_WARNING, AD_NO_RENEGOTIATION};
        if (send_control(conn, r, XTLS_CT_ALERT, no_renegotiation, sizeof no_renegotiation) || !r->error) {
            ERR_clear_error();
            return 1;
        }
        errno = r->error;
        return -1;
    }
    if (!tls13(r) || len == 0) return fail(conn, r, AD_UNEXPECTED_MESSAGE);
    /* A KeyUpdate may come in pieces over records (RFC 8446 §5.1); as it
     * changes the keys, nothing may follow it in its record. */
    size_t take = sizeof r->key_update - r->key_update_len;
    if (take > len) take = len;
    memcpy(r->key_update + r->key_update_len, msg, take);
    r->key_update_len += take;
    const unsigned char *m = r->key_update;
    if (m[0] != HS_KEY_UPDATE) return fail(conn, r, AD_UNEXPECTED_MESSAGE);
    if (r->key_update_len < sizeof r->key_update) return 1;
    r->key_update_len = 0;
    if (m[1] != 0 || m[2] != 0 || m[3] != 1) return fail(conn, r, AD_DECODE_ERROR);
    if (len > take) return fail(conn, r, AD_UNEXPECTED_MESSAGE);
    if (m[4] > 1) return fail(conn, r, AD_ILLEGAL_PARAMETER);
    return on_key_update(conn, r, m[4] == 1);
}

static int on_alert(xConn *conn, xTlsRecords *r, const unsigned char *alert, size_t len) {
    if (len == 0) return fail(conn, r, AD_UNEXPECTED_MESSAGE); /* as RFC 8446 §5.1 says of empty alerts */
    if (len != 2) return fail(conn, r, AD_DECODE_ERROR);
    if (alert[1] == AD_CLOSE_NOTIFY) {
        r->eof = true;
        return 1;
    }
    /* TLS 1.2 warnings may be ignored, though not without end; TLS 1.3 ends
     * on any other alert (user_canceled is followed by a close_notify). A
     * close_notify after a row of records without data still ends cleanly. */
    if ((alert[1] == AD_USER_CANCELED && alert[0] == ALERT_WARNING) ||
        (!tls13(r) && alert[0] == ALERT_WARNING))
        return ++r->idle_records > IDLE_RECORDS_MAX ? fail(conn, r, AD_UNEXPECTED_MESSAGE) : 1;
    r->error = ECONNRESET;
    errno = r->error;
    return -1;
}

/* Opens the next whole record in the input: 1 when one was handled
 * (application data is then in r->plain), 0 when more bytes are needed,
 * -1 (errno set) when the session is over. */
static int next_record(xConn *conn, xTlsRecords *r) {
    size_t avail = r->in_end - r->in_start;
    if (avail < XTLS_RECORD_HEADER) return 0;
    unsigned char *rec = (unsigned char *)r->in + r->in_start;
    size_t body_len = (size_t)rec[3] << 8 | rec[4];
    if (body_len > (tls13(r) ? REC_BODY_MAX_13 : REC_BODY_MAX_12)) return fail(conn, r, AD_RECORD_OVERFLOW);
    if (avail < XTLS_RECORD_HEADER + body_len) return 0;
    r->in_start += XTLS_RECORD_HEADER + body_len;
    bool expected = tls13(r) ? rec[0] == XTLS_CT_APPLICATION_DATA
                             : rec[0] == XTLS_CT_APPLICATION_DATA || rec[0] == XTLS_CT_ALERT ||
                                   rec[0] == XTLS_CT_HANDSHAKE;
    if (!expected || rec[1] != 3) return fail(conn, r, AD_UNEXPECTED_MESSAGE);
    /* TLS 1.2 records carry the negotiated version (RFC 5246 §6.2.1); TLS
     * 1.3 authenticates its legacy one. */
    if (!tls13(r) && rec[2] != 3) return fail(conn, r, AD_PROTOCOL_VERSION);
    xTlsPlaintext plain;
    int alert;
    if (!open_record(r, rec, body_len, &plain, &alert)) return fail(conn, r, alert);
    if (plain.type == XTLS_CT_APPLICATION_DATA && plain.len > 0)
        r->idle_records = 0;
    else if (plain.type != XTLS_CT_ALERT && ++r->idle_records > IDLE_RECORDS_MAX) /* alerts: on_alert */
        return fail(conn, r, AD_UNEXPECTED_MESSAGE);
    /* Other records may not come between a handshake message's pieces. */
    if (plain.type != XTLS_CT_HANDSHAKE && r->key_update_len) return fail(conn, r, AD_UNEXPECTED_MESSAGE);
    switch (plain.type) {
    case XTLS_CT_APPLICATION_DATA:
        r->plain = (const char *)plain.data;
        r->plain_len = plain.len;
        return 1;
    case XTLS_CT_ALERT: return on_alert(conn, r, plain.data, plain.len);
    case XTLS_CT_HANDSHAKE: return on_handshake(conn, r, plain.data, plain.len);
    default: return fail(conn, r, AD_UNEXPECTED_MESSAGE);
    }
}

/* Moves the bytes not yet opened to a new block of cap bytes; nothing
 * opened may be waiting in the old one. */
static bool move_input(xConn *conn, xTlsRecords *r, size_t cap) {
    return move_bytes(conn, &r->in, &r->in_cap, &r->in_start, &r->in_end, cap);
}

/* Reads more of the socket into the input block. Like recv(2); *room is
 * what was asked for. */
static ssize_t fill_input(xConn *conn, xTlsRecords *r, size_t *room) {
    if (r->in_cap < IN_CAP) { /* none yet, or a partial record's own */
        if (!move_input(conn, r, IN_CAP)) {
            errno = ENOMEM;
            return -1;
        }
    } else if (r->in_start > 0) { /* nothing opened is waiting here: plain_len is 0 */
        memmove(r->in, r->in + r->in_start, r->in_end - r->in_start);
        r->in_end -= r->in_start;
        r->in_start = 0;
    }
    *room = IN_CAP - r->in_end;
    ssize_t n = xEventLoopRecv(conn->net->loop, conn->fd, r->in + r->in_end, *room);
    if (n > 0) r->in_end += (size_t)n;
    return n;
}

/* Once a read is over, the input block goes back when it is empty; a small
 * partial record keeps only its bytes (the next read moves them back into a
 * whole block), as a peer may leave it there until a timeout. */
static void trim_input(xConn *conn, xTlsRecords *r) {
    if (!r->in || r->plain_len) return;
    size_t held = r->in_end - r->in_start;
    if (held) {
        if (r->in_cap == IN_CAP && held <= IN_KEEP_MAX) move_input(conn, r, held); /* failing, it stays */
        return;
    }
    xMemCacheFree(conn->net->mem, r->in);
    r->in = NULL;
    r->in_cap = r->in_start = r->in_end = 0;
}

/* Whether the input holds a whole record not yet opened. */
static bool whole_record_waiting(const xTlsRecords *r) {
    size_t avail = r->in_end - r->in_start;
    if (!r->in || avail < XTLS_RECORD_HEADER) return false;
    const unsigned char *rec = (const unsigned char *)r->in + r->in_start;
    return avail >= XTLS_RECORD_HEADER + ((size_t)rec[3] << 8 | rec[4]);
}

static ssize_t records_recv(xConn *conn, char *buf, size_t len) {
    xTlsRecords *r = conn->transport_state;
    size_t n = 0;
    bool drained = false; /* a read came back short: the socket is empty for now */
    while (n < len && !r->error && !r->eof) {
        if (r->plain_len) {
            size_t take = r->plain_len < len - n ? r->plain_len : len - n;
            memcpy(buf + n, r->plain, take);
            r->plain += take;
            r->plain_len -= take;
            n += take;
            continue;
        }
        int handled = next_record(conn, r);
        if (handled < 0) break;
        if (handled > 0) continue;
        if (drained) break;
        size_t room;
        ssize_t got = fill_input(conn, r, &room);
        if (got == 0) {
            r->eof = true; /* a FIN without close_notify ends the stream all the same */
        } else if (got < 0 && errno == EAGAIN) {
            drained = true;
        } else if (got < 0 && errno != EINTR) {
            r->error = errno;
        } else if (got > 0) {
            /* As with a plain socket, a short read means drained, unless
             * the peer has closed: only another read sees that end. */
            drained = (size_t)got < room && !conn->peer_closed;
        }
    }
    trim_input(conn, r);
    /* More could be read only after a new readiness edge; an end or error
     * found behind the data keeps the connection readable, so the next read
     * reports it and the connection closes now, not at a timeout. */
    bool end_pending = r->eof || r->error;
    if (drained && !r->plain_len && !whole_record_waiting(r) && !end_pending) conn->readable = false;
    if (n > 0) return (ssize_t)n;
    if (r->error) {
        errno = r->error;
        return -1;
    }
    if (r->eof) return 0;
    conn->readable = false;
    errno = EAGAIN;
    return -1;
}

/* ---- Lifetime ---- */

static void send_close_notify(xConn *conn, xTlsRecords *r) {
    if (r->error || r->close_notify_sent) return;
    static const unsigned char close_notify[2] = {ALERT_WARNING, AD_CLOSE_NOTIFY};
    size_t need = sizeof close_notify + record_overhead(r) + (r->key_update_owed ? KEY_UPDATE_RECORD : 0);
    if (out_room(conn, r, need))
        send_control(conn, r, XTLS_CT_ALERT, close_notify, sizeof close_notify); /* if it goes, it goes */
    r->close_notify_sent = true;
}

static void records_shutdown_write(xConn *conn) {
    xTlsRecords *r = conn->transport_state;
    send_close_notify(conn, r);
    /* A FIN now would cut off a close_notify that met a full socket (the
     * peer would see a truncation): it follows once records_flush wrote it. */
    if (r->out && !r->error)
        r->fin_owed = true;
    else
        shutdown(conn->fd, SHUT_WR);
}

static void records_close(xConn *conn) { send_close_notify(conn, conn->transport_state); }

void xTlsSummaryFree(xTlsSummary *summary) {
    free(summary->server_name);
    free(summary->client_subject);
    summary->server_name = summary->client_subject = NULL;
}

/* One way of the hand-over's traffic, its key now held by a cipher context
 * of its own (the caller wipes traffic). */
static bool start_way(xTlsWay *way, const xTlsTraffic *traffic, const xTlsDirection *dir, bool sealing) {
    way->seq = dir->seq;
    memcpy(way->secret, dir->secret, sizeof way->secret);
    return xTlsAeadKeysInit(&way->keys, traffic->version, traffic->aead, sealing, dir->key, dir->iv);
}

/* Frees r: both ways' ciphers, and its secrets wiped first. */
static void free_state(xTlsRecords *r) {
    xTlsAeadKeysFree(&r->read.keys);
    xTlsAeadKeysFree(&r->write.keys);
    OPENSSL_cleanse(r, sizeof *r);
    free(r);
}

static void records_free(xConn *conn) {
    xTlsRecords *r = conn->transport_state;
    if (!r) return;
    xMemCacheFree(conn->net->mem, r->in);
    xMemCacheFree(conn->net->mem, r->out);
    xTlsSummaryFree(&r->summary);
    free_state(r);
}

/* Alerts and KeyUpdates that met a full socket go once it drains, then a
 * KeyUpdate still owed, or the FIN that waited for a close_notify. */
static bool records_flush(xConn *conn) {
    xTlsRecords *r = conn->transport_state;
    if (r->out && !write_out(conn, r)) return false;
    if (r->fin_owed) {
        r->fin_owed = false;
        shutdown(conn->fd, SHUT_WR);
        return true;
    }
    if (!r->key_update_owed || r->error) return true;
    if (!send_control(conn, r, 0, NULL, 0)) {
        ERR_clear_error();
        if (!r->error) r->error = ENOMEM;
        errno = r->error;
        return false;
    }
    if (!r->out) return true;
    errno = EAGAIN;
    return false;
}

/* Bytes of a record that has not all come yet: the protocol above times
 * them out as it would a partial request. */
static bool records_holds_input(const xConn *conn) {
    const xTlsRecords *r = conn->transport_state;
    return r->in_start < r->in_end;
}

/* The handshake's facts, copied out before its SSL object went. */
static bool records_tls_info(const xConn *conn, xTlsInfo *info) {
    const xTlsSummary *s = &((const xTlsRecords *)conn->transport_state)->summary;
    *info = (xTlsInfo){
        .version = s->version,
        .cipher = s->cipher ? s->cipher : "",
        .alpn = s->alpn,
        .server_name = s->server_name ? s->server_name : "",
        .resumed = s->resumed,
        .client_verified = s->client_verified,
        .xkit_records = true,
    };
    if (s->client_subject)
        snprintf(info->client_subject, sizeof info->client_subject, "%s", s->client_subject);
    return true;
}

static const xTransport records_transport = {
    .recv = records_recv,
    .sendv = records_sendv,
    .shutdown_write = records_shutdown_write,
    .close = records_close,
    .free = records_free,
    .secure = true,
    .flush = records_flush,
    .tls_info = records_tls_info,
    .holds_input = records_holds_input,
    .reads_through_loop = true, /* fill_input */
};

const char *xTlsRecordsBrokenInvariant(const xConn *conn, uint64_t *read_seq) {
    const xTlsRecords *r = conn->transport_state;
    *read_seq = r->read.seq;
    if (!r->in != !r->in_cap || r->in_start > r->in_end || r->in_end > r->in_cap || r->in_cap > IN_CAP)
        return "input outside its block";
    if (r->plain_len && (r->plain < r->in || r->plain + r->plain_len > r->in + r->in_start))
        return "plaintext handed up outside the opened records";
    if (r->in_cap == IN_CAP && !r->plain_len && r->in_end - r->in_start <= IN_KEEP_MAX)
        return "a whole input block kept for a small partial record";
    if (!r->out != !r->out_cap || r->out_start > r->out_end || r->out_end > r->out_cap ||
        r->out_cap > OUT_CAP + 2 * CONTROL_ROOM)
        return "output outside its block";
    if (r->out_covers && !r->out) return "plaintext acknowledged for records already out";
    if (r->key_update_len >= sizeof r->key_update) return "a whole KeyUpdate kept in pieces";
    if (r->idle_records > IDLE_RECORDS_MAX + 1) return "records without data past the limit";
    if (r->fin_owed && (!r->close_notify_sent || !r->out)) return "a FIN owed with no close_notify before it";
    if (r->read.seq == UINT64_MAX || r->write.seq == UINT64_MAX) return "a sequence number wrapped";
    return NULL;
}

bool xTlsRecordsStart(xConn *conn, xTlsTraffic *traffic, xTlsSummary *summary) {
    xTlsRecords *r = calloc(1, sizeof *r);
    if (!r) return false;
    if (!start_way(&r->read, traffic, &traffic->read, false) ||
        !start_way(&r->write, traffic, &traffic->write, true)) {
        free_state(r);
        return false;
    }
    r->secret_len = traffic->secret_len;
    OPENSSL_cleanse(traffic, sizeof *traffic);
    r->summary = *summary;
    *summary = (xTlsSummary){0};
    xConnSetTransport(conn, &records_transport, r);
    return true;
}
