/* test_tls_rfc8448.c — xKit's TLS 1.3 key schedule and record protection
 * (tls_keys.h, tls_aead.h) against the known answers of RFC 8448 §3, "Simple
 * 1-RTT Handshake" (TLS_AES_128_GCM_SHA256): each traffic secret gives the
 * trace's write key and IV; each protected record the trace shows seals to
 * its exact bytes and opens back to its plaintext; and a record with any one
 * bit flipped, or opened under another sequence number, is refused.
 *
 * The hex is the RFC's own text, line for line as it prints it; a sequence
 * number is the record's place among those sent under the same keys. */
#include <ctype.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "xnet/tls/tls_aead.h"
#include "xnet/tls/tls_keys.h"

/* The largest value below: the NewSessionTicket's record. */
#define BYTES_MAX 256

typedef struct Bytes {
    unsigned char b[BYTES_MAX];
    size_t len;
} Bytes;

/* The bytes of hex as RFC 8448 prints them ("b6 7b 7d ..."). */
static Bytes unhex(const char *hex) {
    Bytes out = {.len = 0};
    for (const char *p = hex; *p; p++) {
        if (*p == ' ') continue;
        if (!isxdigit((unsigned char)p[0]) || !isxdigit((unsigned char)p[1]) || out.len == BYTES_MAX) {
            CHECK_MSG(false, "bad hex at \"%.8s\"", p);
            break;
        }
        unsigned byte;
        sscanf(p, "%2x", &byte);
        out.b[out.len++] = (unsigned char)byte;
        p++;
    }
    return out;
}

/* One direction's traffic secret, and the write key and IV the trace derives
 * from it: the step's "PRK", "key expanded" and "iv expanded". */
typedef struct Traffic {
    const char *name;
    const char *secret, *key, *iv;
} Traffic;

/* In the order of traffic[]. */
enum { SERVER_HANDSHAKE, CLIENT_HANDSHAKE, SERVER_APPLICATION, CLIENT_APPLICATION };

static const Traffic traffic[] = {
    /* SERVER_HANDSHAKE: "{server}  derive write traffic keys for handshake data" */
    {
        .name = "server handshake",
        .secret = "b6 7b 7d 69 0c c1 6c 4e 75 e5 42 13 cb 2d 37 b4"
                  "e9 c9 12 bc de d9 10 5d 42 be fd 59 d3 91 ad 38",
        .key = "3f ce 51 60 09 c2 17 27 d0 f2 e4 e8 6e"
               "e4 03 bc",
        .iv = "5d 31 3e b2 67 12 76 ee 13 00 0b 30",
    },
    /* CLIENT_HANDSHAKE: "{server}  derive read traffic keys for handshake data" */
    {
        .name = "client handshake",
        .secret = "b3 ed db 12 6e 06 7f 35 a7 80 b3 ab f4 5e 2d 8f"
                  "3b 1a 95 07 38 f5 2e 96 00 74 6a 0e 27 a5 5a 21",
        .key = "db fa a6 93 d1 76 2c 5b 66 6a f5 d9 50"
               "25 8d 01",
        .iv = "5b d3 c7 1b 83 6e 0b 76 bb 73 26 5f",
    },
    /* SERVER_APPLICATION: "{server}  derive write traffic keys for application data" */
    {
        .name = "server application",
        .secret = "a1 1a f9 f0 55 31 f8 56 ad 47 11 6b 45 a9 50 32"
                  "82 04 b4 f4 4b fb 6b 3a 4b 4f 1f 3f cb 63 16 43",
        .key = "9f 02 28 3b 6c 9c 07 ef c2 6b b9 f2 ac"
               "92 e3 56",
        .iv = "cf 78 2b 88 dd 83 54 9a ad f1 e9 84",
    },
    /* CLIENT_APPLICATION: "{client}  derive write traffic keys for application data" */
    {
        .name = "client application",
        .secret = "9e 40 64 6c e7 9a 7f 9d c0 5a f8 88 9b ce 65 52"
                  "87 5a fa 0b 06 df 00 87 f7 92 eb b7 c1 75 04 a5",
        .key = "17 42 2d da 59 6e d5 d9 ac d8 90 e3 c6"
               "3f 50 51",
        .iv = "5b 78 92 3d ee 08 57 90 33 e5 23 d9",
    },
};

/* A protected record of the trace: the keys and sequence number it was sealed
 * under, its real content type, its plaintext and the record as sent. */
typedef struct Record {
    const char *name;
    int keys;
    uint64_t seq;
    int type;
    const char *payload, *record;
} Record;

static const Record records[] = {
    /* {client}  send handshake record (its Finished): the first under the client's handshake keys */
    {
        .name = "client Finished",
        .keys = CLIENT_HANDSHAKE,
        .seq = 0,
        .type = XTLS_CT_HANDSHAKE,
        .payload = "14 00 00 20 a8 ec 43 6d 67 76 34 ae 52 5a c1"
                   "fc eb e1 1a 03 9e c1 76 94 fa c6 e9 85 27 b6 42 f2 ed d5 ce 61",
        .record = "17 03 03 00 35 75 ec 4d c2 38 cc e6"
                  "0b 29 80 44 a7 1e 21 9c 56 cc 77 b0 51 7f e9 b9 3c 7a 4b fc 44"
                  "d8 7f 38 f8 03 38 ac 98 fc 46 de b3 84 bd 1c ae ac ab 68 67 d7"
                  "26 c4 05 46",
    },
    /* {server}  send handshake record (a NewSessionTicket): the first under the server's application keys */
    {
        .name = "server NewSessionTicket",
        .keys = SERVER_APPLICATION,
        .seq = 0,
        .type = XTLS_CT_HANDSHAKE,
        .payload = "04 00 00 c9 00 00 00 1e fa d6 aa c5 02 00"
                   "00 00 b2 2c 03 5d 82 93 59 ee 5f f7 af 4e c9 00 00 00 00 26 2a"
                   "64 94 dc 48 6d 2c 8a 34 cb 33 fa 90 bf 1b 00 70 ad 3c 49 88 83"
                   "c9 36 7c 09 a2 be 78 5a bc 55 cd 22 60 97 a3 a9 82 11 72 83 f8"
                   "2a 03 a1 43 ef d3 ff 5d d3 6d 64 e8 61 be 7f d6 1d 28 27 db 27"
                   "9c ce 14 50 77 d4 54 a3 66 4d 4e 6d a4 d2 9e e0 37 25 a6 a4 da"
                   "fc d0 fc 67 d2 ae a7 05 29 51 3e 3d a2 67 7f a5 90 6c 5b 3f 7d"
                   "8f 92 f2 28 bd a4 0d da 72 14 70 f9 fb f2 97 b5 ae a6 17 64 6f"
                   "ac 5c 03 27 2e 97 07 27 c6 21 a7 91 41 ef 5f 7d e6 50 5e 5b fb"
                   "c3 88 e9 33 43 69 40 93 93 4a e4 d3 57 00 08 00 2a 00 04 00 00"
                   "04 00",
        .record = "17 03 03 00 de 3a 6b 8f 90 41 4a 97"
                  "d6 95 9c 34 87 68 0d e5 13 4a 2b 24 0e 6c ff ac 11 6e 95 d4 1d"
                  "6a f8 f6 b5 80 dc f3 d1 1d 63 c7 58 db 28 9a 01 59 40 25 2f 55"
                  "71 3e 06 1d c1 3e 07 88 91 a3 8e fb cf 57 53 ad 8e f1 70 ad 3c"
                  "73 53 d1 6d 9d a7 73 b9 ca 7f 2b 9f a1 b6 c0 d4 a3 d0 3f 75 e0"
                  "9c 30 ba 1e 62 97 2a c4 6f 75 f7 b9 81 be 63 43 9b 29 99 ce 13"
                  "06 46 15 13 98 91 d5 e4 c5 b4 06 f1 6e 3f c1 81 a7 7c a4 75 84"
                  "00 25 db 2f 0a 77 f8 1b 5a b0 5b 94 c0 13 46 75 5f 69 23 2c 86"
                  "51 9d 86 cb ee ac 87 aa c3 47 d1 43 f9 60 5d 64 f6 50 db 4d 02"
                  "3e 70 e9 52 ca 49 fe 51 37 12 1c 74 bc 26 97 68 7e 24 87 46 d6"
                  "df 35 30 05 f3 bc e1 86 96 12 9c 81 53 55 6b 3b 6c 67 79 b3 7b"
                  "f1 59 85 68 4f",
    },
    /* {client}  send application_data record: the first under the client's application keys */
    {
        .name = "client application data",
        .keys = CLIENT_APPLICATION,
        .seq = 0,
        .type = XTLS_CT_APPLICATION_DATA,
        .payload = "00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e"
                   "0f 10 11 12 13 14 15 16 17 18 19 1a 1b 1c 1d 1e 1f 20 21 22 23"
                   "24 25 26 27 28 29 2a 2b 2c 2d 2e 2f 30 31",
        .record = "17 03 03 00 43 a2 3f 70 54 b6 2c 94"
                  "d0 af fa fe 82 28 ba 55 cb ef ac ea 42 f9 14 aa 66 bc ab 3f 2b"
                  "98 19 a8 a5 b4 6b 39 5b d5 4a 9a 20 44 1e 2b 62 97 4e 1f 5a 62"
                  "92 a2 97 70 14 bd 1e 3d ea e6 3a ee bb 21 69 49 15 e4",
    },
    /* {server}  send application_data record: the second, after the NewSessionTicket */
    {
        .name = "server application data",
        .keys = SERVER_APPLICATION,
        .seq = 1,
        .type = XTLS_CT_APPLICATION_DATA,
        .payload = "00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e"
                   "0f 10 11 12 13 14 15 16 17 18 19 1a 1b 1c 1d 1e 1f 20 21 22 23"
                   "24 25 26 27 28 29 2a 2b 2c 2d 2e 2f 30 31",
        .record = "17 03 03 00 43 2e 93 7e 11 ef 4a c7"
                  "40 e5 38 ad 36 00 5f c4 a4 69 32 fc 32 25 d0 5f 82 aa 1b 36 e3"
                  "0e fa f9 7d 90 e6 df fc 60 2d cb 50 1a 59 a8 fc c4 9c 4b f2 e5"
                  "f0 a2 1c 00 47 c2 ab f3 32 54 0d d0 32 e1 67 c2 95 5d",
    },
    /* {client}  send alert record: the second, after its application data */
    {
        .name = "client close_notify",
        .keys = CLIENT_APPLICATION,
        .seq = 1,
        .type = XTLS_CT_ALERT,
        .payload = "01 00",
        .record = "17 03 03 00 13 c9 87 27 60 65 56 66"
                  "b7 4d 7f f1 15 3e fd 6d b6 d0 b0 e3",
    },
    /* {server}  send alert record: the third */
    {
        .name = "server close_notify",
        .keys = SERVER_APPLICATION,
        .seq = 2,
        .type = XTLS_CT_ALERT,
        .payload = "01 00",
        .record = "17 03 03 00 13 b5 8f d6 71 66 eb f5"
                  "99 d2 47 20 cf be 7e fa 7a 88 64 a9",
    },
};

#define NUM(a) (sizeof(a) / sizeof((a)[0]))

static void traffic_secrets_give_the_traces_keys_and_ivs(void) {
    for (size_t i = 0; i < NUM(traffic); i++) {
        const Traffic *t = &traffic[i];
        Bytes secret = unhex(t->secret), key = unhex(t->key), iv = unhex(t->iv);
        unsigned char got_key[XTLS_KEY_MAX], got_iv[XTLS_IV_LEN];
        CHECK(secret.len == 32 && key.len == 16 && iv.len == XTLS_IV_LEN);
        CHECK(xTlsTrafficKeys(XTLS_AEAD_AES_128_GCM, secret.b, secret.len, got_key, got_iv));
        CHECK_MSG(memcmp(got_key, key.b, 16) == 0, "%s: key", t->name);
        CHECK_MSG(memcmp(got_iv, iv.b, XTLS_IV_LEN) == 0, "%s: iv", t->name);
    }
}

/* The trace's key and IV for a record, keyed for sealing or for opening. */
static xTlsAeadKeys keys_of(const Record *r, bool sealing) {
    xTlsAeadKeys keys;
    Bytes key = unhex(traffic[r->keys].key), iv = unhex(traffic[r->keys].iv);
    CHECK(xTlsAeadKeysInit(&keys, XTLS_VERSION_1_3, XTLS_AEAD_AES_128_GCM, sealing, key.b, iv.b));
    return keys;
}

static void records_seal_to_the_traces_bytes(void) {
    for (size_t i = 0; i < NUM(records); i++) {
        const Record *r = &records[i];
        xTlsAeadKeys keys = keys_of(r, true);
        Bytes payload = unhex(r->payload), want = unhex(r->record);
        unsigned char rec[XTLS_RECORD_HEADER + BYTES_MAX + 1 + XTLS_RECORD_TAG];
        size_t rec_len = 0;
        memcpy(rec + XTLS_RECORD_HEADER, payload.b, payload.len);
        CHECK(xTlsAeadSeal(&keys, r->seq, rec, payload.len, r->type, &rec_len));
        CHECK_MSG(rec_len == want.len && memcmp(rec, want.b, want.len) == 0, "%s: sealed otherwise", r->name);
        xTlsAeadKeysFree(&keys);
    }
}

/* Opens rec (len bytes, header included) under keys as record seq. */
static xTlsOpened open_copy(xTlsAeadKeys *keys, uint64_t seq, const Bytes *rec, xTlsPlaintext *plain) {
    static unsigned char copy[BYTES_MAX];
    memcpy(copy, rec->b, rec->len);
    return xTlsAeadOpen(keys, seq, copy, rec->len - XTLS_RECORD_HEADER, plain);
}

static void records_open_to_the_traces_plaintext(void) {
    for (size_t i = 0; i < NUM(records); i++) {
        const Record *r = &records[i];
        xTlsAeadKeys keys = keys_of(r, false);
        Bytes payload = unhex(r->payload), rec = unhex(r->record);
        xTlsPlaintext plain = {0};
        CHECK_MSG(open_copy(&keys, r->seq, &rec, &plain) == XTLS_OPENED, "%s: not opened", r->name);
        CHECK_MSG(plain.type == r->type && plain.len == payload.len &&
                      memcmp(plain.data, payload.b, payload.len) == 0,
                  "%s: opened to something else", r->name);
        xTlsAeadKeysFree(&keys);
    }
}

/* Every bit of the record counts: the header is the additional data, then
 * the ciphertext and the tag. */
static void a_record_with_any_bit_flipped_is_refused(void) {
    for (size_t i = 0; i < NUM(records); i++) {
        const Record *r = &records[i];
        xTlsAeadKeys keys = keys_of(r, false);
        Bytes rec = unhex(r->record);
        xTlsPlaintext plain;
        size_t accepted = 0, first = 0;
        for (size_t bit = 0; bit < rec.len * 8; bit++) {
            Bytes flipped = rec;
            flipped.b[bit / 8] ^= (unsigned char)(1u << bit % 8);
            if (open_copy(&keys, r->seq, &flipped, &plain) != XTLS_OPEN_FORGED && accepted++ == 0)
                first = bit;
        }
        CHECK_MSG(accepted == 0, "%s: %zu flipped bits not refused, the first at byte %zu", r->name, accepted,
                  first / 8);
        CHECK_MSG(open_copy(&keys, r->seq + 1, &rec, &plain) == XTLS_OPEN_FORGED,
                  "%s: opened as the next record", r->name);
        /* The refusals left the keys as they were. */
        CHECK_MSG(open_copy(&keys, r->seq, &rec, &plain) == XTLS_OPENED, "%s: not opened after", r->name);
        xTlsAeadKeysFree(&keys);
    }
}

int main(void) {
    RUN(traffic_secrets_give_the_traces_keys_and_ivs);
    RUN(records_seal_to_the_traces_bytes);
    RUN(records_open_to_the_traces_plaintext);
    RUN(a_record_with_any_bit_flipped_is_refused);
    return CHECK_SUMMARY();
}
