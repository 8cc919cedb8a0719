/* fuzz_tls_records.c — xKit's TLS record layer after the handshake, with
 * keys known to a client written here.
 *
 * The server end of a socketpair is put on the record layer
 * (xTlsRecordsStart) with fixed secrets; a minimal protocol reads what it
 * opens and answers the end of input by closing after its output. The
 * client seals and opens records on its own, with OpenSSL's EVP AEADs and
 * its own key schedule (RFC 8446 §7.1-7.3; TLS 1.2 keys are given as they
 * would come from the key block), so valid records reach past the MAC check
 * and the server's records are checked against an implementation that is
 * not the one under test.
 *
 * Input: byte 0 picks the suite and the pace:
 *   - bits 0-1: AES-128-GCM, AES-256-GCM, ChaCha20-Poly1305 (3: AES-128-GCM);
 *   - bit 2: TLS 1.2 instead of 1.3;
 *   - bit 3: the server's send buffer is as small as the kernel allows;
 *   - bit 4: the client reads only at the end (or when its writes block).
 * Then operations, each an opcode byte (its low 3 bits) and its operands:
 *   0 data: a length byte, then that many bytes sealed as application data
 *     (TLS 1.3: followed by opcode >> 3 zeros of padding);
 *   1 tampered: a position byte, a mask byte, a length byte and the bytes:
 *     a data record with one byte changed;
 *   2 KeyUpdate (TLS 1.3; the opcode's bit 3 asks for ours) or, in TLS 1.2,
 *     a ClientHello asking to renegotiate;
 *   3 alert: level and description bytes, sealed; with the opcode's bit 3,
 *     a record of the content type the first byte names, carrying the second;
 *   4 raw: a length byte and that many bytes, sent as they are;
 *   5 the server writes: two bytes of length (a known pattern);
 *   6 a turn of the loop (the client reads, unless bit 4); with the
 *     opcode's bit 3, the server first closes after its output, unasked;
 *   7 split: later writes of the client go in pieces of (operand + 1) bytes.
 * The client then half-closes, reads until the server's end of stream, and
 * closes. Checked after every operation and input:
 *   - xTlsRecordsBrokenInvariant: buffers within their blocks, no whole
 *     input block held for a small partial record, plaintext inside opened
 *     records, no FIN owed without a close_notify, no sequence number
 *     wrapped;
 *   - while every record sent was valid: what the server read is exactly
 *     the data sealed (every plaintext byte accounted for), and its read
 *     sequence number is the client's write one (one per record);
 *   - whatever came: what the server read is a prefix of the valid data;
 *   - every server record opens under the client's model of the server's
 *     keys and sequence numbers (sealing round-trips): application data is
 *     a prefix of what the server wrote, KeyUpdates move the keys on,
 *     nothing follows a close_notify or a fatal alert, and a session that
 *     ended well (the server read the end, or closed first and the client
 *     sent nothing bad) delivered every byte written and a close_notify
 *     before its FIN;
 *   - a tampered record (length untouched) or an unknown record type gets a
 *     fatal alert, where the server's output could not have filled its
 *     socket first;
 *   - the connection is freed once the client closes (LeakSanitizer finds
 *     anything else left). */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <xhttp/tls_conf.h>

#include "fuzz_check.h"
#include "worker.h"
#include "xnet/connection.h"
#include "xnet/tls/tls_records.h"

#define SETTLE_TURNS 256
#define SERVER_WRITE_MAX (1 << 20) /* total per input */
#define ALERT_SURE_BELOW 16384     /* server output that cannot have filled its socket */

enum { CT_ALERT = 21, CT_HANDSHAKE = 22, CT_APPLICATION_DATA = 23 };

static xNetContext net;

/* ---- The server's side: a protocol that reads everything ---- */

typedef struct Server {
    xConn *conn;
    char *in; /* plaintext read */
    size_t in_len, in_cap;
    bool freed, ended_well;
    bool closing; /* it closes after its output, unasked */
} Server;

static Server server;

static void server_read(xConn *conn) {
    for (;;) {
        if (server.in_cap - server.in_len < 4096) {
            server.in_cap = server.in_cap ? server.in_cap * 2 : 16384;
            server.in = realloc(server.in, server.in_cap);
            FUZZ_ASSERT(server.in != NULL, "out of memory");
        }
        ssize_t n = xConnRecv(conn, server.in + server.in_len, server.in_cap - server.in_len);
        if (n > 0) {
            server.in_len += (size_t)n;
        } else if (n == 0) {
            server.ended_well = true;
            xConnCloseAfterFlush(conn);
            return;
        } else if (errno != EINTR) {
            if (errno != EAGAIN) xConnClose(conn);
            return;
        }
    }
}

static void on_timeout(xConn *conn) { FUZZ_ASSERT(false, "a timer fired within one input"); }
static void on_close(xConn *conn) { server.conn = NULL; }
static void on_free(xConn *conn) { server.freed = true; }
static const xConnProtocol protocol = {
    .on_readable = server_read, .on_timeout = on_timeout, .on_close = on_close, .on_free = on_free};

static void turn(void) { xTestTurn(net.loop); }

/* ---- The client's keys ---- */

typedef struct Keys {
    unsigned char secret[48];
    unsigned char key[32], iv[12];
    uint64_t seq;
} Keys;

typedef struct Suite {
    const EVP_CIPHER *cipher;
    const EVP_MD *md;
    size_t key_len, secret_len;
    bool tls13, explicit_nonce;
    xTlsAead aead;
} Suite;

static Suite suite;

/* HKDF-Expand-Label with no context, for outputs of one hash block. */
static void expand_label(const unsigned char *secret, const char *label, unsigned char *out, size_t len) {
    unsigned char info[64], block[EVP_MAX_MD_SIZE];
    size_t label_len = strlen(label), n = 0;
    info[n++] = 0;
    info[n++] = (unsigned char)len;
    info[n++] = (unsigned char)(6 + label_len);
    memcpy(info + n, "tls13 ", 6);
    memcpy(info + n + 6, label, label_len);
    n += 6 + label_len;
    info[n++] = 0;
    info[n++] = 1;
    unsigned block_len = 0;
    FUZZ_ASSERT(HMAC(suite.md, secret, (int)suite.secret_len, info, n, block, &block_len) != NULL, "HMAC");
    memcpy(out, block, len);
}

static void keys_from_secret(Keys *k) {
    expand_label(k->secret, "key", k->key, suite.key_len);
    expand_label(k->secret, "iv", k->iv, 12);
    k->seq = 0;
}

static void keys_update(Keys *k) {
    unsigned char next[48];
    expand_label(k->secret, "traffic upd", next, suite.secret_len);
    memcpy(k->secret, next, suite.secret_len);
    keys_from_secret(k);
}

static void nonce_of(const Keys *k, const unsigned char *explicit_part, unsigned char nonce[12]) {
    memcpy(nonce, k->iv, 12);
    if (suite.explicit_nonce) {
        memcpy(nonce + 4, explicit_part, 8);
        return;
    }
    for (int i = 0; i < 8; i++) nonce[4 + i] ^= (unsigned char)(k->seq >> (56 - 8 * i));
}

static size_t tls12_aad(uint64_t seq, int type, size_t len, unsigned char aad[13]) {
    for (int i = 0; i < 8; i++) aad[i] = (unsigned char)(seq >> (56 - 8 * i));
    aad[8] = (unsigned char)type;
    aad[9] = aad[10] = 3;
    aad[11] = (unsigned char)(len >> 8);
    aad[12] = (unsigned char)len;
    return 13;
}

/* Seals a record of type carrying data (TLS 1.3: then padding zeros) into
 * rec; its length. */
static size_t seal(Keys *k, int type, const unsigned char *data, size_t len, size_t padding,
                   unsigned char *rec) {
    size_t skip = suite.explicit_nonce ? 8 : 0;
    unsigned char *body = rec + 5 + skip;
    memcpy(body, data, len);
    size_t inner = len;
    if (suite.tls13) {
        body[inner++] = (unsigned char)type;
        memset(body + inner, 0, padding);
        inner += padding;
    }
    size_t body_len = skip + inner + 16;
    rec[0] = (unsigned char)(suite.tls13 ? CT_APPLICATION_DATA : type);
    rec[1] = rec[2] = 3;
    rec[3] = (unsigned char)(body_len >> 8);
    rec[4] = (unsigned char)body_len;
    if (skip)
        for (int i = 0; i < 8; i++) rec[5 + i] = (unsigned char)(k->seq >> (56 - 8 * i));
    unsigned char nonce[12], aad[13];
    nonce_of(k, rec + 5, nonce);
    size_t aad_len = suite.tls13 ? 5 : tls12_aad(k->seq, type, len, aad);
    if (suite.tls13) memcpy(aad, rec, 5);
    k->seq++;
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int n, last;
    bool ok = ctx && EVP_EncryptInit_ex(ctx, suite.cipher, NULL, k->key, nonce) == 1 &&
              EVP_EncryptUpdate(ctx, NULL, &n, aad, (int)aad_len) == 1 &&
              EVP_EncryptUpdate(ctx, body, &n, body, (int)inner) == 1 &&
              EVP_EncryptFinal_ex(ctx, body + n, &last) == 1 &&
              EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, 16, body + inner) == 1;
    EVP_CIPHER_CTX_free(ctx);
    FUZZ_ASSERT(ok, "sealing failed");
    return 5 + body_len;
}

/* Opens a server record in place; its type, or -1 when it does not open. */
static int open_record(Keys *k, unsigned char *rec, size_t rec_len, unsigned char **data, size_t *len) {
    size_t skip = suite.explicit_nonce ? 8 : 0;
    if (rec_len < 5 + skip + 16 + (suite.tls13 ? 1 : 0)) return -1;
    unsigned char *body = rec + 5 + skip;
    size_t cipher_len = rec_len - 5 - skip - 16;
    unsigned char nonce[12], aad[13];
    nonce_of(k, rec + 5, nonce);
    size_t aad_len = suite.tls13 ? 5 : tls12_aad(k->seq, rec[0], cipher_len, aad);
    if (suite.tls13) memcpy(aad, rec, 5);
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int n, last;
    bool ok = ctx && EVP_DecryptInit_ex(ctx, suite.cipher, NULL, k->key, nonce) == 1 &&
              EVP_DecryptUpdate(ctx, NULL, &n, aad, (int)aad_len) == 1 &&
              EVP_DecryptUpdate(ctx, body, &n, body, (int)cipher_len) == 1 &&
              EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, 16, body + cipher_len) == 1 &&
              EVP_DecryptFinal_ex(ctx, body + n, &last) == 1;
    EVP_CIPHER_CTX_free(ctx);
    if (!ok) return -1;
    k->seq++;
    int type = rec[0];
    if (suite.tls13) {
        while (cipher_len > 0 && body[cipher_len - 1] == 0) cipher_len--;
        if (cipher_len == 0) return -1;
        type = body[--cipher_len];
    }
    *data = body;
    *len = cipher_len;
    return type;
}

/* ---- The client ---- */

typedef struct Client {
    int fd;
    Keys write, read; /* ours, and the model of the server's */
    size_t piece;     /* the largest write; 0: no limit */
    bool reads;       /* reads as it goes */
    /* What it sent */
    char *sent; /* valid application data, in order */
    size_t sent_len, sent_cap;
    bool broken;       /* bytes the server cannot take went (raw, tampered, a bad type) */
    bool alert_owed;   /* the first break was one the server must answer with a fatal alert */
    bool ended;        /* a close_notify or fatal alert of ours went */
    bool aborted;      /* it was a fatal alert, or records without data past the limit */
    bool unsure;       /* a record whose outcome is not modelled went: data is not checked after it */
    unsigned idle_run; /* valid records in a row without data */
    /* What it received */
    unsigned char *raw; /* server bytes not yet a whole record */
    size_t raw_len, raw_cap;
    size_t plain_len; /* application data opened */
    bool close_notify, fatal_alert, eof;
} Client;

static Client client;
static uint64_t server_written; /* bytes the server queued, pattern_at(i) each */

static char pattern_at(uint64_t i) { return (char)('a' + i % 23); }

static void sent_data(const unsigned char *data, size_t len) {
    if (client.broken || client.ended || len == 0) return;
    if (client.sent_cap - client.sent_len < len) {
        client.sent_cap = (client.sent_len + len) * 2;
        client.sent = realloc(client.sent, client.sent_cap);
        FUZZ_ASSERT(client.sent != NULL, "out of memory");
    }
    memcpy(client.sent + client.sent_len, data, len);
    client.sent_len += len;
}

static void take_record(unsigned char *rec, size_t rec_len) {
    FUZZ_ASSERT(!client.close_notify && !client.fatal_alert,
                "a server record after its close_notify or alert");
    unsigned char *data;
    size_t len;
    int type = open_record(&client.read, rec, rec_len, &data, &len);
    FUZZ_ASSERT(type >= 0, "a server record that does not open (seq %llu)",
                (unsigned long long)client.read.seq);
    if (type == CT_APPLICATION_DATA) {
        FUZZ_ASSERT(client.plain_len + len <= server_written, "more data than the server wrote");
        for (size_t i = 0; i < len; i++)
            FUZZ_ASSERT(data[i] == (unsigned char)pattern_at(client.plain_len + i), "data at %zu differs",
                        client.plain_len + i);
        client.plain_len += len;
    } else if (type == CT_ALERT) {
        FUZZ_ASSERT(len == 2, "an alert of %zu bytes", len);
        if (data[1] == 0)
            client.close_notify = true;
        else if (data[0] == 2)
            client.fatal_alert = true;
        else
            FUZZ_ASSERT(!suite.tls13 && data[1] == 100, "warning %d", data[1]); /* only no_renegotiation */
    } else {
        FUZZ_ASSERT(type == CT_HANDSHAKE && suite.tls13 && len == 5 && data[0] == 24 && data[4] == 0,
                    "a server record of type %d", type);
        keys_update(&client.read);
    }
}

static void client_read(void) {
    while (!client.eof) {
        if (client.raw_cap - client.raw_len < 32768) {
            client.raw_cap = client.raw_cap ? client.raw_cap * 2 : 65536;
            client.raw = realloc(client.raw, client.raw_cap);
            FUZZ_ASSERT(client.raw != NULL, "out of memory");
        }
        ssize_t n =
            recv(client.fd, client.raw + client.raw_len, client.raw_cap - client.raw_len, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) client.eof = true;
        if (n <= 0) break;
        client.raw_len += (size_t)n;
        size_t pos = 0;
        while (client.raw_len - pos >= 5) {
            size_t rec_len = 5 + ((size_t)client.raw[pos + 3] << 8 | client.raw[pos + 4]);
            if (client.raw_len - pos < rec_len) break;
            take_record(client.raw + pos, rec_len);
            pos += rec_len;
        }
        memmove(client.raw, client.raw + pos, client.raw_len - pos);
        client.raw_len -= pos;
    }
}

static void check_server(void) {
    if (!server.conn) return;
    uint64_t read_seq;
    const char *broken = xTlsRecordsBrokenInvariant(server.conn, &read_seq);
    FUZZ_ASSERT(broken == NULL, "%s", broken);
    if (client.unsure) return;
    FUZZ_ASSERT(server.in_len == 0 ||
                    (server.in_len <= client.sent_len && memcmp(server.in, client.sent, server.in_len) == 0),
                "the server read what was not sent");
    if (!client.broken && !client.ended && !server.ended_well && !server.closing) {
        FUZZ_ASSERT(server.in_len == client.sent_len, "the server read %zu of %zu bytes", server.in_len,
                    client.sent_len);
        FUZZ_ASSERT(read_seq == client.write.seq, "the server's read seq %llu, the client's %llu",
                    (unsigned long long)read_seq, (unsigned long long)client.write.seq);
    }
}

/* Sends bytes in pieces, turning the loop while the socket is full. */
static void client_send(const unsigned char *bytes, size_t len) {
    for (int turns = 0; len > 0;) {
        size_t piece = client.piece && client.piece < len ? client.piece : len;
        ssize_t n = send(client.fd, bytes, piece, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0 && errno != EAGAIN && errno != EINTR) return; /* the server is gone */
        if (n > 0) {
            bytes += n;
            len -= (size_t)n;
        } else {
            FUZZ_ASSERT(++turns < SETTLE_TURNS, "the server takes no input");
            client_read(); /* a server blocked on its output waits for us */
        }
        turn();
    }
    turn();
    if (client.reads) client_read();
    check_server();
}

/* A valid record without data counts toward the server's limit of 32. */
static void sent_idle_record(void) {
    if (++client.idle_run > 32 && !client.broken && !client.ended) /* it is cut off */
        client.ended = client.aborted = true;
}

static void send_record(int type, const unsigned char *data, size_t len, size_t padding) {
    unsigned char rec[5 + 8 + 255 + 1 + 31 + 16]; /* the most an operation seals */
    client_send(rec, seal(&client.write, type, data, len, padding, rec));
}

/* ---- The operations ---- */

typedef struct Input {
    const uint8_t *p, *end;
} Input;

static bool take(Input *in, size_t n, const uint8_t **out) {
    if ((size_t)(in->end - in->p) < n) return false;
    *out = in->p;
    in->p += n;
    return true;
}

static void op_data(Input *in, uint8_t op) {
    const uint8_t *len, *data;
    if (!take(in, 1, &len) || !take(in, *len, &data)) return;
    if (*len)
        client.idle_run = 0;
    else
        sent_idle_record();
    sent_data(data, *len);
    send_record(CT_APPLICATION_DATA, data, *len, suite.tls13 ? (size_t)(op >> 3) : 0);
}

/* Bytes the server must refuse: after them nothing is predicted exactly;
 * alert says whether a fatal alert must answer them. */
static void sent_break(bool alert) {
    if (!client.broken && !client.ended && !server.closing)
        client.alert_owed = alert; /* none after its close_notify */
    client.broken = true;
}

static void op_tampered(Input *in) {
    const uint8_t *where, *mask, *len, *data;
    if (!take(in, 1, &where) || !take(in, 1, &mask) || !take(in, 1, &len) || !take(in, *len, &data)) return;
    unsigned char rec[5 + 8 + 255 + 1 + 16];
    size_t rec_len = seal(&client.write, CT_APPLICATION_DATA, data, *len, 0, rec);
    size_t at = *where % rec_len;
    rec[at] ^= *mask ? *mask : 1;
    sent_break(at != 3 && at != 4); /* a changed length may leave the record waiting for more */
    client_send(rec, rec_len);
}

static void op_handshake(uint8_t op) {
    if (!suite.tls13) { /* a ClientHello: declined with a warning, and the session goes on */
        static const unsigned char hello[4] = {1, 0, 0, 0};
        sent_idle_record();
        send_record(CT_HANDSHAKE, hello, sizeof hello, 0);
        return;
    }
    const unsigned char update[5] = {24, 0, 0, 1, (op >> 3) & 1};
    unsigned char rec[5 + sizeof update + 1 + 16];
    size_t rec_len = seal(&client.write, CT_HANDSHAKE, update, sizeof update, 0, rec);
    keys_update(&client.write); /* what follows it, the server opens with the new keys */
    sent_idle_record();
    client_send(rec, rec_len);
}

/* A record of any content type carrying the byte c, and what the server
 * should make of it. */
static void other_record(int type, uint8_t c) {
    const unsigned char content[1] = {c};
    int seen = type; /* the type the server finds, and its content's length */
    size_t len = 1;
    if (suite.tls13 && type == 0) { /* mere padding: the last non-zero byte, c, is the type */
        seen = c;
        len = 0;
    }
    if (seen == CT_APPLICATION_DATA) {
        if (len)
            client.idle_run = 0;
        else
            sent_idle_record();
        sent_data(content, len);
    } else if (seen == CT_HANDSHAKE && len && c == 24 && suite.tls13) {
        client.unsure = true; /* the start of a KeyUpdate: what follows decides */
    } else if (seen == CT_HANDSHAKE && len && c == 1 && !suite.tls13) {
        sent_idle_record(); /* a ClientHello: declined with a warning */
    } else {
        sent_break(true); /* an alert of one byte, an empty record of a type, a type never sent */
    }
    send_record(type, content, 1, 0);
}

static void op_alert(Input *in, uint8_t op) {
    const uint8_t *a;
    if (!take(in, 2, &a)) return;
    if (op & 8) {
        other_record(a[0], a[1]);
        return;
    }
    bool ignored = a[1] != 0 && a[0] == 1 && (!suite.tls13 || a[1] == 90);
    if (ignored) {
        sent_idle_record();
    } else if (!client.ended) { /* close_notify, or an alert that ends the session */
        client.ended = true;
        client.aborted = a[1] != 0;
    }
    send_record(CT_ALERT, a, 2, 0);
}

static void op_raw(Input *in) {
    const uint8_t *len, *data;
    if (!take(in, 1, &len) || !take(in, *len, &data)) return;
    if (*len) sent_break(false);
    client_send(data, *len);
}

static void op_server_write(Input *in) {
    const uint8_t *n;
    if (!take(in, 2, &n)) return;
    size_t len = (size_t)n[0] << 8 | n[1];
    if (!server.conn || server.ended_well || server.closing || server_written + len > SERVER_WRITE_MAX)
        return;
    char *bytes = xConnReserve(server.conn, len);
    FUZZ_ASSERT(bytes != NULL || len == 0, "out of memory");
    for (size_t i = 0; i < len; i++) bytes[i] = pattern_at(server_written + i);
    xConnCommit(server.conn, len);
    server_written += len;
    xConnFlush(server.conn);
    turn();
    if (client.reads) client_read();
    check_server();
}

/* ---- One input ---- */

static void on_first_input(void) { FUZZ_ASSERT(xTestNetInit(&net), "set-up failed"); }

static void choose_suite(uint8_t pace) {
    static const xTlsAead aeads[4] = {XTLS_AEAD_AES_128_GCM, XTLS_AEAD_AES_256_GCM,
                                      XTLS_AEAD_CHACHA20_POLY1305, XTLS_AEAD_AES_128_GCM};
    suite.aead = aeads[pace & 3];
    suite.tls13 = !(pace & 4);
    suite.cipher = suite.aead == XTLS_AEAD_AES_128_GCM   ? EVP_aes_128_gcm()
                   : suite.aead == XTLS_AEAD_AES_256_GCM ? EVP_aes_256_gcm()
                                                         : EVP_chacha20_poly1305();
    suite.key_len = suite.aead == XTLS_AEAD_AES_128_GCM ? 16 : 32;
    suite.md = suite.aead == XTLS_AEAD_AES_256_GCM ? EVP_sha384() : EVP_sha256();
    suite.secret_len = suite.aead == XTLS_AEAD_AES_256_GCM ? 48 : 32;
    suite.explicit_nonce = !suite.tls13 && suite.aead != XTLS_AEAD_CHACHA20_POLY1305;
}

/* The keys each way, the client's model and the server's traffic alike. */
static void make_keys(xTlsTraffic *traffic) {
    *traffic = (xTlsTraffic){
        .version = suite.tls13 ? XTLS_VERSION_1_3 : XTLS_VERSION_1_2,
        .aead = suite.aead,
        .secret_len = suite.tls13 ? suite.secret_len : 0,
    };
    client.write = client.read = (Keys){0};
    if (suite.tls13) {
        memset(client.write.secret, 0x11, suite.secret_len);
        memset(client.read.secret, 0x22, suite.secret_len);
        keys_from_secret(&client.write);
        keys_from_secret(&client.read);
        memcpy(traffic->read.secret, client.write.secret, suite.secret_len);
        memcpy(traffic->write.secret, client.read.secret, suite.secret_len);
    } else {
        memset(client.write.key, 0x33, suite.key_len);
        memset(client.write.iv, 0x44, sizeof client.write.iv);
        memset(client.read.key, 0x55, suite.key_len);
        memset(client.read.iv, 0x66, sizeof client.read.iv);
    }
    memcpy(traffic->read.key, client.write.key, sizeof traffic->read.key);
    memcpy(traffic->read.iv, client.write.iv, sizeof traffic->read.iv);
    memcpy(traffic->write.key, client.read.key, sizeof traffic->write.key);
    memcpy(traffic->write.iv, client.read.iv, sizeof traffic->write.iv);
}

static void start(uint8_t pace) {
    int sv[2];
    FUZZ_ASSERT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == 0, "socketpair: %d", errno);
    if (pace & 8) {
        int tiny = 1;
        setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &tiny, sizeof tiny);
    }
    choose_suite(pace);
    server = (Server){.conn = xConnCreate(&net, sv[0], NULL, &protocol, NULL)};
    FUZZ_ASSERT(server.conn != NULL, "xConnCreate");
    client.fd = sv[1];
    client.reads = !(pace & 16);
    xTlsTraffic traffic;
    make_keys(&traffic);
    xTlsSummary summary = {.version = suite.tls13 ? "TLSv1.3" : "TLSv1.2", .cipher = "fuzz", .alpn = ""};
    FUZZ_ASSERT(xTlsRecordsStart(server.conn, &traffic, &summary), "xTlsRecordsStart");
}

/* The client half-closes, reads to the server's end, and closes. */
static void finish(uint8_t pace) {
    shutdown(client.fd, SHUT_WR);
    for (int turns = 0; !client.eof; turns++) {
        FUZZ_ASSERT(turns < SETTLE_TURNS, "the server never ended its output");
        turn();
        client_read();
    }
    bool clean = !client.broken && !client.unsure && !client.aborted;
    if (server.ended_well || (server.closing && clean)) {
        /* A session that broke closes at once, and may cut a record short. */
        FUZZ_ASSERT(client.raw_len == 0, "%zu bytes of a record before the end", client.raw_len);
        FUZZ_ASSERT(client.plain_len == server_written || client.fatal_alert,
                    "%zu of %llu bytes before the end", client.plain_len, (unsigned long long)server_written);
        FUZZ_ASSERT(client.close_notify || client.fatal_alert, "the end came without a close_notify");
    }
    if (client.alert_owed && !client.unsure && !(pace & 8) && server_written < ALERT_SURE_BELOW)
        FUZZ_ASSERT(client.fatal_alert, "bad input without a fatal alert");
    close(client.fd);
    for (int turns = 0; !server.freed; turns++) {
        FUZZ_ASSERT(turns < SETTLE_TURNS, "the connection was never freed");
        turn();
    }
    FUZZ_ASSERT(net.conn_count == 0 && net.conns == NULL, "a connection left listed");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!net.loop) on_first_input();
    if (size < 1) return 0;
    char *copy = fuzz_copy(data, size);
    Input in = {(const uint8_t *)copy + 1, (const uint8_t *)copy + size};
    uint8_t pace = (uint8_t)copy[0];
    start(pace);
    const uint8_t *op;
    while (take(&in, 1, &op)) {
        switch (*op & 7) {
        case 0: op_data(&in, *op); break;
        case 1: op_tampered(&in); break;
        case 2: op_handshake(*op); break;
        case 3: op_alert(&in, *op); break;
        case 4: op_raw(&in); break;
        case 5: op_server_write(&in); break;
        case 6:
            if ((*op & 8) && server.conn && !server.closing) {
                server.closing = true;
                xConnCloseAfterFlush(server.conn);
            }
            turn();
            if (client.reads) client_read();
            check_server();
            break;
        case 7: {
            const uint8_t *piece;
            if (take(&in, 1, &piece)) client.piece = (size_t)*piece + 1;
            break;
        }
        }
    }
    finish(pace);
    free(client.sent);
    free(client.raw);
    free(server.in);
    client = (Client){0};
    server = (Server){0};
    server_written = 0;
    free(copy);
    return 0;
}
