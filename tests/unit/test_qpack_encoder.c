/* test_qpack_encoder.c — the QPACK encoder's dynamic table (RFC 9204 §2.1) against
 * nghttp3's decoder and ours: a response head's repeated fields are inserted on the
 * encoder stream and referred to only once acknowledged, so neither decoder (both
 * allowing no blocked streams) ever blocks; many responses with the date changing,
 * evictions under a small capacity, capacity 0, and the decoder stream's errors. */
#include <nghttp3/nghttp3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "qpack_oracle.h"
#include "xhttp/http3/qpack.h"

/* The peer: nghttp3's decoder and ours, fed the same encoder stream and sections. Its
 * decoder stream bytes (nghttp3's) go back to our encoder only when the test says. */
typedef struct Peer {
    nghttp3_qpack_decoder *theirs;
    xQpackDecoder ours;
    uint8_t pending[4096]; /* decoder stream bytes not yet given to the encoder */
    size_t pending_len;
} Peer;

static void peer_init(Peer *peer, size_t capacity) {
    CHECK(nghttp3_qpack_decoder_new(&peer->theirs, capacity, 0, nghttp3_mem_default()) == 0);
    CHECK(xQpackDecoderInit(&peer->ours, capacity, 0) == 0);
    peer->pending_len = 0;
}

static void peer_free(Peer *peer) {
    nghttp3_qpack_decoder_del(peer->theirs);
    xQpackDecoderFree(&peer->ours);
}

/* The encoder stream bytes due, to both decoders; their count. */
static size_t deliver_encoder_stream(xQpackEncoder *e, Peer *peer) {
    xStr out = xQpackEncoderTakeOutput(e);
    if (!out.len) return 0;
    nghttp3_ssize n = nghttp3_qpack_decoder_read_encoder(peer->theirs, (const uint8_t *)out.data, out.len);
    CHECK_MSG(n == (nghttp3_ssize)out.len, "nghttp3 read %zd of %zu encoder stream bytes", (ssize_t)n,
              out.len);
    size_t used;
    CHECK_EQ_INT(xQpackDecoderReadEncoder(&peer->ours, (const uint8_t *)out.data, out.len, &used), XQPACK_OK);
    CHECK_EQ_INT(used, out.len);
    xQpackDecoderTakeOutput(&peer->ours); /* ours acknowledges too; nghttp3's are the ones sent */
    return out.len;
}

/* nghttp3's decoder stream bytes, kept until delivered. */
static void collect_decoder_stream(Peer *peer) {
    size_t len = nghttp3_qpack_decoder_get_decoder_streamlen(peer->theirs);
    CHECK(peer->pending_len + len <= sizeof peer->pending);
    if (!len || peer->pending_len + len > sizeof peer->pending) return;
    nghttp3_buf buf;
    nghttp3_buf_init(&buf);
    buf.begin = buf.pos = buf.last = peer->pending + peer->pending_len;
    buf.end = peer->pending + sizeof peer->pending;
    nghttp3_qpack_decoder_write_decoder(peer->theirs, &buf);
    peer->pending_len += (size_t)(buf.last - buf.pos);
}

static void deliver_decoder_stream(xQpackEncoder *e, Peer *peer) {
    size_t used;
    CHECK_EQ_INT(xQpackEncoderReadDecoder(e, peer->pending, peer->pending_len, &used), XQPACK_OK);
    CHECK_EQ_INT(used, peer->pending_len);
    peer->pending_len = 0;
}

/* Both decoders read the section to exactly the fields given, without blocking. */
static void decode_both(Peer *peer, uint64_t stream_id, const uint8_t *in, size_t len, const xStr *names,
                        const xStr *values, size_t n) {
    char why[XK_ORACLE_WHY];
    const char *wrong = xk_oracle_theirs(peer->theirs, (int64_t)stream_id, in, len, names, values, n, why);
    CHECK_MSG(!wrong, "%s", wrong);
    collect_decoder_stream(peer);

    xHpackField fields[16];
    char scratch[1024];
    xQpackSection s = {fields, 16, 0, scratch, sizeof scratch, 65536, 0, 0, 0};
    CHECK_EQ_INT(xQpackDecodeSection(&peer->ours, stream_id, in, len, &s), XQPACK_OK);
    wrong = xk_oracle_ours(s.fields, s.count, names, values, n, why);
    CHECK_MSG(!wrong, "%s", wrong);
    xQpackDecoderTakeOutput(&peer->ours);
}

/* One response head as HTTP/3 writes it: prefix, :status, server and date through the
 * table, then a static field; decoded by both. Returns the section's length. */
static size_t respond(xQpackEncoder *e, Peer *peer, uint64_t stream_id, const char *date) {
    xStr names[4] = {xStrFromC(":status"), xStrFromC("server"), xStrFromC("date"), xStrFromC("content-type")};
    xStr values[4] = {xStrFromC("200"), xStrFromC("xkit"), xStrFromC(date), xStrFromC("text/plain")};
    uint8_t fixed[128], section[256];
    uint64_t required, lowest;
    uint8_t *end = xQpackEncodeFieldsWith(e, stream_id, fixed, &names[1], &values[1], 2, &required, &lowest);
    uint8_t *p = xQpackEncodeStatus(xQpackEncodePrefix(e, section, required), 200);
    memcpy(p, fixed, (size_t)(end - fixed));
    p = xQpackEncodeField(p + (end - fixed), names[3], values[3]);
    CHECK(required <= e->known_received); /* never more than the peer has acknowledged */
    deliver_encoder_stream(e, peer);
    decode_both(peer, stream_id, section, (size_t)(p - section), names, values, 4);
    return (size_t)(p - section);
}

static void date_of(char *out, unsigned second) {
    snprintf(out, 30, "Sat, 28 Nov 2026 23:%02u:%02u GMT", second / 60 % 60, second % 60);
}

/* Many responses, a new date every few, the acknowledgments late by a few responses:
 * once acknowledged, server and date take a byte each. */
static void repeated_fields_become_references(void) {
    xQpackEncoder e;
    Peer peer;
    xQpackEncoderInit(&e);
    peer_init(&peer, 4096);
    xQpackEncoderSetPeerCapacity(&e, 4096, 1024);
    CHECK_EQ_INT(e.capacity, 1024);
    char date[32];
    size_t first = 0, smallest = SIZE_MAX;
    for (unsigned i = 0; i < 2000; i++) {
        date_of(date, i / 7);
        size_t len = respond(&e, &peer, 4 * (uint64_t)i, date);
        if (i == 0) first = len;
        if (len < smallest) smallest = len;
        if (i % 3 == 2) deliver_decoder_stream(&e, &peer);
    }
    deliver_decoder_stream(&e, &peer);
    /* The first is the static encoding: nothing acknowledged yet. */
    uint8_t want[128], *p = xQpackEncodeStatus(xQpackEncodeBegin(want), 200);
    date_of(date, 0);
    p = xQpackEncodeField(p, xStrFromC("server"), xStrFromC("xkit"));
    p = xQpackEncodeField(p, xStrFromC("date"), xStrFromC(date));
    p = xQpackEncodeField(p, xStrFromC("content-type"), xStrFromC("text/plain"));
    CHECK_EQ_INT(first, (size_t)(p - want));
    /* prefix 2, :status 1, server 1, date 1, content-type 1 */
    CHECK_EQ_INT(smallest, 6);
    CHECK_MSG(e.inserts > 250, "%llu inserts", (unsigned long long)e.inserts); /* every date went in */
    CHECK(e.size <= e.capacity);                                               /* the old ones evicted */
    CHECK_EQ_INT(e.section_count, 0); /* every section acknowledged */
    CHECK_EQ_INT(e.known_received, e.inserts);
    xQpackEncoderFree(&e);
    peer_free(&peer);
}

/* A capacity that holds server with one date: a new date waits for the old one to be
 * free of unacknowledged sections; none of it blocks or breaks either decoder. */
static void small_capacity_evicts_only_what_is_free(void) {
    for (size_t capacity = 64; capacity <= 260; capacity += 14) {
        xQpackEncoder e;
        Peer peer;
        xQpackEncoderInit(&e);
        peer_init(&peer, capacity);
        xQpackEncoderSetPeerCapacity(&e, capacity, 4096);
        char date[32];
        for (unsigned i = 0; i < 300; i++) {
            date_of(date, i / 5);
            respond(&e, &peer, 4 * (uint64_t)i, date);
            if (i % 4 == 3) deliver_decoder_stream(&e, &peer);
            CHECK(e.size <= e.capacity);
        }
        deliver_decoder_stream(&e, &peer);
        /* server, a date and a copy of server fit from 149 bytes: every date goes in */
        if (capacity >= 149)
            CHECK_MSG(e.inserts > 60, "capacity %zu: %llu inserts", capacity, (unsigned long long)e.inserts);
        else
            CHECK(e.inserts >= 1);
        xQpackEncoderFree(&e);
        peer_free(&peer);
    }
}

/* A Stream Cancellation frees what the stream's sections held. */
static void cancellation_frees_entries(void) {
    xQpackEncoder e;
    Peer peer;
    xQpackEncoderInit(&e);
    peer_init(&peer, 4096);
    xQpackEncoderSetPeerCapacity(&e, 4096, 4096);
    respond(&e, &peer, 0, "Sat, 28 Nov 2026 23:00:00 GMT");
    deliver_decoder_stream(&e, &peer); /* the inserts acknowledged */
    uint8_t out[64];
    uint64_t required, lowest;
    xStr name = xStrFromC("date"), value = xStrFromC("Sat, 28 Nov 2026 23:00:00 GMT");
    xQpackEncodeFieldsWith(&e, 8, out, &name, &value, 1, &required, &lowest);
    CHECK_EQ_INT(required, 2);
    CHECK_EQ_INT(e.section_count, 1);
    uint8_t cancel[] = {0x48}; /* Stream Cancellation, stream 8 */
    size_t used;
    CHECK_EQ_INT(xQpackEncoderReadDecoder(&e, cancel, 1, &used), XQPACK_OK);
    CHECK_EQ_INT(e.section_count, 0);
    uint8_t ack[] = {0x88}; /* now nothing of stream 8 to acknowledge */
    CHECK_EQ_INT(xQpackEncoderReadDecoder(&e, ack, 1, &used), XQPACK_DECODER_STREAM_ERROR);
    xQpackEncoderFree(&e);
    peer_free(&peer);
}

/* Capacity 0 (the peer allows no table): no encoder stream, the static encoding. */
static void capacity_zero_stays_static(void) {
    xQpackEncoder e;
    Peer peer;
    xQpackEncoderInit(&e);
    peer_init(&peer, 0);
    xQpackEncoderSetPeerCapacity(&e, 0, 4096);
    CHECK_EQ_INT(e.capacity, 0);
    for (unsigned i = 0; i < 20; i++) {
        size_t len = respond(&e, &peer, 4 * (uint64_t)i, "Sat, 28 Nov 2026 23:00:00 GMT");
        CHECK_EQ_INT(e.out_len, 0);
        uint8_t want[128], *p = xQpackEncodeStatus(xQpackEncodeBegin(want), 200);
        p = xQpackEncodeField(p, xStrFromC("server"), xStrFromC("xkit"));
        p = xQpackEncodeField(p, xStrFromC("date"), xStrFromC("Sat, 28 Nov 2026 23:00:00 GMT"));
        p = xQpackEncodeField(p, xStrFromC("content-type"), xStrFromC("text/plain"));
        CHECK_EQ_INT(len, (size_t)(p - want));
    }
    CHECK_EQ_INT(peer.pending_len, 0);
    xQpackEncoderFree(&e);
    peer_free(&peer);
}

/* RFC 9204 §4.4: an increment of 0 or past the inserts, an acknowledgment of a section
 * never sent, are QPACK_DECODER_STREAM_ERROR; a partial instruction waits. */
static void decoder_stream_errors(void) {
    xQpackEncoder e;
    Peer peer;
    xQpackEncoderInit(&e);
    peer_init(&peer, 4096);
    xQpackEncoderSetPeerCapacity(&e, 4096, 4096);
    respond(&e, &peer, 0, "Sat, 28 Nov 2026 23:00:00 GMT"); /* two inserts */
    size_t used;
    uint8_t zero[] = {0x00}, three[] = {0x03}, two[] = {0x02}, ack4[] = {0x84}, partial[] = {0x3f};
    CHECK_EQ_INT(xQpackEncoderReadDecoder(&e, zero, 1, &used), XQPACK_DECODER_STREAM_ERROR);
    CHECK_EQ_INT(xQpackEncoderReadDecoder(&e, three, 1, &used), XQPACK_DECODER_STREAM_ERROR);
    CHECK_EQ_INT(xQpackEncoderReadDecoder(&e, ack4, 1, &used), XQPACK_DECODER_STREAM_ERROR);
    CHECK_EQ_INT(xQpackEncoderReadDecoder(&e, partial, 1, &used), XQPACK_OK);
    CHECK_EQ_INT(used, 0);
    CHECK_EQ_INT(xQpackEncoderReadDecoder(&e, two, 1, &used), XQPACK_OK);
    CHECK_EQ_INT(e.known_received, 2);
    CHECK_EQ_INT(xQpackEncoderReadDecoder(&e, two, 1, &used), XQPACK_DECODER_STREAM_ERROR); /* past 2 */
    xQpackEncoderFree(&e);
    peer_free(&peer);
}

/* The outstanding sections (the order sent, each Section Acknowledgment taking its
 * stream's oldest, a Stream Cancellation all of a stream's) against a plain list,
 * through thousands of notes, acknowledgments in any order and cancellations: the
 * encoder moves the start past what is acknowledged first and makes room by moving
 * the rest down or growing, and must keep exactly the list's sections in its order. */
static void outstanding_sections_follow_acknowledgments_in_any_order(void) {
    enum { OPS = 20000, STREAMS = 40 };
    static xQpackOutstanding model[OPS];
    size_t count = 0;
    uint32_t seed = 12345;
    xQpackEncoder e;
    xQpackEncoderInit(&e);
    for (unsigned op = 0; op < OPS; op++) {
        seed = seed * 1103515245u + 12345u;
        unsigned r = (seed >> 8) % 100;
        uint64_t stream = 4 * (uint64_t)((seed >> 16) % STREAMS);
        size_t used;
        if (r < 50 || !count) { /* a section sent: a head, or a stream's trailers after it */
            uint64_t required = 1 + op % 7, lowest = op % 5;
            CHECK(xQpackEncoderNoteSection(&e, stream, required, lowest));
            model[count++] = (xQpackOutstanding){stream, required, lowest};
        } else if (r < 95) { /* acknowledged: mostly the oldest, else any */
            size_t at = r < 70 ? 0 : (seed >> 4) % count;
            stream = model[at].stream_id;
            size_t first = 0;
            while (model[first].stream_id != stream) first++;
            memmove(&model[first], &model[first + 1], (count - first - 1) * sizeof *model);
            count--;
            uint8_t ack[16], *end = xHpackWriteInt(ack, 0x80, 7, stream);
            CHECK_EQ_INT(xQpackEncoderReadDecoder(&e, ack, (size_t)(end - ack), &used), XQPACK_OK);
        } else { /* cancelled: every section of the stream goes */
            size_t kept = 0;
            for (size_t i = 0; i < count; i++)
                if (model[i].stream_id != stream) model[kept++] = model[i];
            count = kept;
            uint8_t cancel[16], *end = xHpackWriteInt(cancel, 0x40, 6, stream);
            CHECK_EQ_INT(xQpackEncoderReadDecoder(&e, cancel, (size_t)(end - cancel), &used), XQPACK_OK);
        }
        CHECK_EQ_INT(e.section_count, count);
        CHECK(e.section_first + e.section_count <= e.section_cap || !count);
        for (size_t i = 0; i < count && i < e.section_count; i++) {
            const xQpackOutstanding *x = &e.sections[e.section_first + i];
            CHECK_MSG(x->stream_id == model[i].stream_id && x->required == model[i].required &&
                          x->lowest == model[i].lowest,
                      "op %u: section %zu of %zu is stream %llu, not %llu", op, i, count,
                      (unsigned long long)x->stream_id, (unsigned long long)model[i].stream_id);
        }
        if (e.section_count != count) break;
    }
    /* Nothing outstanding for a stream: its acknowledgment is an error (§4.4.1). */
    while (count) {
        uint8_t ack[16], *end = xHpackWriteInt(ack, 0x80, 7, model[0].stream_id);
        size_t used;
        CHECK_EQ_INT(xQpackEncoderReadDecoder(&e, ack, (size_t)(end - ack), &used), XQPACK_OK);
        memmove(&model[0], &model[1], (count - 1) * sizeof *model);
        count--;
    }
    CHECK_EQ_INT(e.section_count, 0);
    uint8_t ack[] = {0x84};
    size_t used;
    CHECK_EQ_INT(xQpackEncoderReadDecoder(&e, ack, 1, &used), XQPACK_DECODER_STREAM_ERROR);
    xQpackEncoderFree(&e);
}

int main(void) {
    RUN(repeated_fields_become_references);
    RUN(small_capacity_evicts_only_what_is_free);
    RUN(cancellation_frees_entries);
    RUN(capacity_zero_stays_static);
    RUN(decoder_stream_errors);
    RUN(outstanding_sections_follow_acknowledgments_in_any_order);
    return CHECK_SUMMARY();
}
