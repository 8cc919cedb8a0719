/* fuzz_h3_frames.c — libFuzzer: the HTTP/3 frame reader (src/xhttp/http3/frame.h)
 * on one stream's bytes. Byte 0 picks the stream's kind (request or control) and the
 * largest whole frame (16, 256 or 4096 bytes); the rest is read twice, all at once
 * and in pieces of 1 to 16 bytes whose sizes byte 1 seeds. The caller keeps what the
 * reader did not consume and gives it again with the next piece, as a stream does.
 * Checked after every call: it consumes at most what it was given; views lie in the
 * bytes given; a whole frame's payload is within the limit and a known type's; an
 * error is one of the codes framing can give, and the reader stays failed. After the
 * input: read in pieces, the stream gives the same frames, ids, SETTINGS verdicts,
 * DATA bytes (joined per frame) and error as read at once. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"
#include "xhttp/http3/frame.h"

#define MAX_EVENTS 4096

/* What the stream said, independent of how it arrived. */
typedef struct Event {
    uint64_t type, id;
    size_t at, len; /* the payload's bytes in the input, or a DATA frame's in joined */
    int settings;   /* SETTINGS: xH3SettingsParse's verdict */
} Event;

typedef struct Log {
    Event events[MAX_EVENTS];
    size_t count;
    uint8_t *data; /* DATA payloads, joined */
    size_t data_len;
    bool in_data;
    xH3Error error;
} Log;

static Log whole, pieces;

static void record(Log *log, const uint8_t *base, xH3ReadStatus s, const xH3Frame *f) {
    if (s == XH3_READ_ERROR) {
        log->error = f->error;
        return;
    }
    if (s == XH3_READ_DATA) {
        if (!log->in_data && log->count < MAX_EVENTS)
            log->events[log->count++] = (Event){XH3_FRAME_DATA, 0, log->data_len, 0, 0};
        memcpy(log->data + log->data_len, f->payload.data, f->payload.len);
        log->data_len += f->payload.len;
        if (log->count) log->events[log->count - 1].len += f->payload.len;
        log->in_data = !f->end_of_frame;
        return;
    }
    if (s != XH3_READ_FRAME || log->count == MAX_EVENTS) return;
    xH3Settings settings;
    int verdict = f->type == XH3_FRAME_SETTINGS ? (int)xH3SettingsParse(f->payload, &settings) : 0;
    log->events[log->count++] =
        (Event){f->type, f->id, (size_t)((const uint8_t *)f->payload.data - base), f->payload.len, verdict};
}

static void check_call(const xH3FrameReader *r, xH3ReadStatus s, const xH3Frame *f, const uint8_t *in,
                       size_t len, size_t used) {
    FUZZ_ASSERT(used <= len, "consumed %zu of %zu", used, len);
    if (s == XH3_READ_FRAME || s == XH3_READ_DATA)
        FUZZ_ASSERT(fuzz_view_within(f->payload, (const char *)in, len) || f->payload.len == 0,
                    "payload outside the bytes given");
    if (s == XH3_READ_FRAME) {
        FUZZ_ASSERT(f->payload.len <= r->max_payload, "a whole frame over the limit");
        FUZZ_ASSERT(f->type != XH3_FRAME_DATA && f->type <= XH3_FRAME_MAX_PUSH_ID, "frame type %llu",
                    (unsigned long long)f->type);
    }
    if (s == XH3_READ_ERROR)
        FUZZ_ASSERT(f->error == XH3_FRAME_UNEXPECTED || f->error == XH3_FRAME_ERROR ||
                        f->error == XH3_EXCESSIVE_LOAD || f->error == XH3_MISSING_SETTINGS,
                    "error %#x", (unsigned)f->error);
}

/* Reads in[0, size) arriving in pieces (piece 0: all at once) into log. */
static void read_stream(Log *log, xH3StreamKind kind, size_t max_payload, const uint8_t *in, size_t size,
                        unsigned seed) {
    xH3FrameReader r;
    xH3FrameReaderInit(&r, kind, max_payload);
    *log = (Log){.data = log->data, .error = XH3_NO_ERROR};
    size_t at = 0, avail = 0;
    while (at < size || avail < size) {
        size_t piece = seed ? 1 + (seed = seed * 1103515245u + 12345u) % 16 : size;
        avail = avail + piece < size ? avail + piece : size;
        for (;;) {
            char *copy = fuzz_copy(in + at, avail - at); /* ASan sees a read past what arrived */
            size_t used;
            xH3Frame f;
            xH3ReadStatus s = xH3FrameRead(&r, (const uint8_t *)copy, avail - at, &used, &f);
            check_call(&r, s, &f, (const uint8_t *)copy, avail - at, used);
            if (s == XH3_READ_FRAME || s == XH3_READ_DATA)
                f.payload.data = (const char *)in + at + (f.payload.data - copy);
            record(log, in, s, &f);
            free(copy);
            at += used;
            if (s == XH3_READ_ERROR) {
                FUZZ_ASSERT(xH3FrameRead(&r, in, 0, &used, &f) == XH3_READ_ERROR && f.error == log->error,
                            "a failed reader read on");
                return;
            }
            if (s == XH3_READ_MORE || at == avail) break;
        }
        if (avail == size) break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2 || size > 65536) return 0;
    static const size_t limits[] = {16, 256, 4096, 4096};
    xH3StreamKind kind = data[0] & 1 ? XH3_STREAM_CONTROL : XH3_STREAM_REQUEST;
    size_t max_payload = limits[(data[0] >> 1) & 3];
    unsigned seed = 1u + data[1];
    const uint8_t *in = data + 2;
    size -= 2;
    whole.data = realloc(whole.data, size + 1);
    pieces.data = realloc(pieces.data, size + 1);
    FUZZ_ASSERT(whole.data && pieces.data, "out of memory");
    read_stream(&whole, kind, max_payload, in, size, 0);
    read_stream(&pieces, kind, max_payload, in, size, seed);
    FUZZ_ASSERT(whole.error == pieces.error, "error %#x at once, %#x in pieces", (unsigned)whole.error,
                (unsigned)pieces.error);
    FUZZ_ASSERT(whole.count == pieces.count, "%zu events at once, %zu in pieces", whole.count, pieces.count);
    for (size_t i = 0; i < whole.count; i++) {
        const Event *a = &whole.events[i], *b = &pieces.events[i];
        FUZZ_ASSERT(a->type == b->type && a->id == b->id && a->len == b->len && a->settings == b->settings,
                    "event %zu differs", i);
        if (a->type != XH3_FRAME_DATA) FUZZ_ASSERT(a->at == b->at, "event %zu's payload elsewhere", i);
    }
    FUZZ_ASSERT(whole.data_len == pieces.data_len && memcmp(whole.data, pieces.data, whole.data_len) == 0,
                "DATA bytes differ");
    return 0;
}
