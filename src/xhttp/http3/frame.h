/* frame.h — HTTP/3 framing (RFC 9114 §7), xKit's own: QUIC's variable-length
 * integers (RFC 9000 §16), a frame reader fed a stream's bytes as they arrive,
 * frame writers, SETTINGS read and written, and the H3_* error codes.
 *
 * The reader keeps a few words of state per stream and never copies: a frame the
 * caller needs whole (HEADERS, SETTINGS, GOAWAY, ...) is returned once all of it is
 * in the bytes given, as a view into them, and until then nothing is consumed, so
 * the caller keeps the bytes and gives them again with more; DATA is returned in
 * pieces as they arrive; reserved and unknown frame types are skipped as they
 * arrive, whatever their length (RFC 9114 §9). Which frames a stream may carry is
 * checked here too, since it depends only on the stream's kind and what it carried
 * before; the order of HEADERS and DATA within a request is the request's concern.
 * No QUIC here: streams are byte sequences. */
#ifndef XHTTP_HTTP3_FRAME_H
#define XHTTP_HTTP3_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <xbase/str.h>

/** The largest value a variable-length integer holds (RFC 9000 §16). */
#define XH3_VARINT_MAX ((UINT64_C(1) << 62) - 1)

/** The most bytes a variable-length integer takes. */
#define XH3_VARINT_MAX_SIZE 8

/** The bytes v takes: 1, 2, 4 or 8 (v at most XH3_VARINT_MAX). */
size_t xH3VarintSize(uint64_t v);

/** Writes v (at most XH3_VARINT_MAX) in its shortest form at p; returns the end. */
uint8_t *xH3VarintWrite(uint8_t *p, uint64_t v);

/** Reads one integer from in[0, len) into *v; returns the bytes it took, or 0 when
 *  len holds only part of it. Any of the four lengths is accepted for any value. */
size_t xH3VarintRead(const uint8_t *in, size_t len, uint64_t *v);

/** HTTP/3's error codes (RFC 9114 §8.1), as sent in CONNECTION_CLOSE or RESET_STREAM. */
typedef enum xH3Error {
    XH3_NO_ERROR = 0x100,
    XH3_GENERAL_PROTOCOL_ERROR = 0x101,
    XH3_INTERNAL_ERROR = 0x102,
    XH3_STREAM_CREATION_ERROR = 0x103,
    XH3_CLOSED_CRITICAL_STREAM = 0x104,
    XH3_FRAME_UNEXPECTED = 0x105,
    XH3_FRAME_ERROR = 0x106,
    XH3_EXCESSIVE_LOAD = 0x107,
    XH3_ID_ERROR = 0x108,
    XH3_SETTINGS_ERROR = 0x109,
    XH3_MISSING_SETTINGS = 0x10a,
    XH3_REQUEST_REJECTED = 0x10b,
    XH3_REQUEST_CANCELLED = 0x10c,
    XH3_REQUEST_INCOMPLETE = 0x10d,
    XH3_MESSAGE_ERROR = 0x10e,
    XH3_CONNECT_ERROR = 0x10f,
    XH3_VERSION_FALLBACK = 0x110,
} xH3Error;

/** The frame types of RFC 9114 §7.2. */
typedef enum xH3FrameType {
    XH3_FRAME_DATA = 0x0,
    XH3_FRAME_HEADERS = 0x1,
    XH3_FRAME_CANCEL_PUSH = 0x3,
    XH3_FRAME_SETTINGS = 0x4,
    XH3_FRAME_PUSH_PROMISE = 0x5,
    XH3_FRAME_GOAWAY = 0x7,
    XH3_FRAME_MAX_PUSH_ID = 0xd,
} xH3FrameType;

/** What a stream carries, which decides the frames it may (RFC 9114 §6, §7.2). We are
 *  the server: request streams come from the client, push streams never do. */
typedef enum xH3StreamKind {
    XH3_STREAM_REQUEST, /* HEADERS, DATA, HEADERS (trailers); never PUSH_PROMISE from a client */
    XH3_STREAM_CONTROL, /* SETTINGS first and once, then CANCEL_PUSH, GOAWAY, MAX_PUSH_ID */
} xH3StreamKind;

/** Where a reader is within its stream's frames. */
typedef enum xH3ReaderState {
    XH3_READER_AWAIT_SETTINGS, /* a control stream before its first frame */
    XH3_READER_FRAME_START,    /* at a frame's type */
    XH3_READER_IN_DATA,        /* inside a DATA payload, `left` bytes to go */
    XH3_READER_SKIPPING,       /* inside an unknown frame's payload, `left` bytes to go */
    XH3_READER_FAILED,         /* a connection error was reported; nothing more is read */
} xH3ReaderState;

/** A stream's frame reader. */
typedef struct xH3FrameReader {
    xH3ReaderState state;
    xH3StreamKind kind;
    uint64_t left;      /* IN_DATA, SKIPPING: payload bytes still to come */
    xH3Error error;     /* FAILED: the error reported */
    size_t max_payload; /* the largest frame payload kept whole (HEADERS, SETTINGS, ...) */
} xH3FrameReader;

/** Starts a reader for a stream of this kind; frames the caller needs whole may have
 *  payloads of at most max_payload bytes (larger ones are H3_EXCESSIVE_LOAD). */
void xH3FrameReaderInit(xH3FrameReader *r, xH3StreamKind kind, size_t max_payload);

/** What xH3FrameRead found. */
typedef enum xH3ReadStatus {
    XH3_READ_MORE,  /* nothing whole yet: give the bytes not consumed again with more */
    XH3_READ_FRAME, /* a whole frame other than DATA: f->type, f->payload (and f->id) */
    XH3_READ_DATA,  /* a piece of a DATA payload in f->payload; f->end_of_frame on its last */
    XH3_READ_ERROR, /* a connection error, its code in f->error; the reader stays failed */
} xH3ReadStatus;

/** One result of the reader; the views point into the bytes given. */
typedef struct xH3Frame {
    uint64_t type;     /* an xH3FrameType */
    xStr payload;      /* HEADERS, PUSH_PROMISE, SETTINGS: the whole payload; DATA: a piece */
    uint64_t id;       /* GOAWAY: stream or push ID; CANCEL_PUSH, MAX_PUSH_ID: push ID */
    bool end_of_frame; /* DATA: this piece is the payload's last */
    xH3Error error;    /* XH3_READ_ERROR: the code to close with */
} xH3Frame;

/** Reads from in[0, len): at most one frame or DATA piece, skipping unknown frames on
 *  the way. *consumed says how many bytes it took (also for XH3_READ_MORE: skipped
 *  bytes and DATA pieces are consumed as they come, a partial frame header or a
 *  partial whole-frame is not). */
xH3ReadStatus xH3FrameRead(xH3FrameReader *r, const uint8_t *in, size_t len, size_t *consumed, xH3Frame *f);

/** The most bytes a frame header takes: type and length. */
#define XH3_FRAME_HEADER_MAX (2 * XH3_VARINT_MAX_SIZE)

/** Writes a frame header (type, payload length) at p; returns the end. */
uint8_t *xH3FrameWriteHeader(uint8_t *p, uint64_t type, uint64_t length);

/** Writes a frame whose payload is one integer (GOAWAY, CANCEL_PUSH, MAX_PUSH_ID); at
 *  most XH3_FRAME_HEADER_MAX + XH3_VARINT_MAX_SIZE bytes. */
uint8_t *xH3FrameWriteId(uint8_t *p, xH3FrameType type, uint64_t id);

/** The settings either side sends (RFC 9114 §7.2.4.1, RFC 9204 §5, RFC 9220, RFC 9297),
 *  with their defaults when absent. */
typedef struct xH3Settings {
    uint64_t qpack_max_table_capacity; /* 0x01, default 0 */
    uint64_t max_field_section_size;   /* 0x06, default unlimited: XH3_VARINT_MAX */
    uint64_t qpack_blocked_streams;    /* 0x07, default 0 */
    bool enable_connect_protocol;      /* 0x08, default off */
    bool h3_datagram;                  /* 0x33, default off */
} xH3Settings;

/** The settings a peer has before its SETTINGS frame arrives. */
void xH3SettingsDefaults(xH3Settings *s);

/** Reads a SETTINGS frame's payload into s (starting from the defaults). Returns
 *  XH3_NO_ERROR, or
 *  XH3_SETTINGS_ERROR for a duplicate identifier, an HTTP/2 setting (0x02-0x05) or a
 *  boolean other than 0 or 1, XH3_FRAME_ERROR for a payload cut inside a pair. Unknown
 *  identifiers are ignored. */
xH3Error xH3SettingsParse(xStr payload, xH3Settings *s);

/** The most bytes xH3SettingsWrite writes: a frame header and five settings. */
#define XH3_SETTINGS_FRAME_MAX (XH3_FRAME_HEADER_MAX + 5 * 2 * XH3_VARINT_MAX_SIZE)

/** Writes a whole SETTINGS frame with every setting that differs from its default;
 *  returns the end. */
uint8_t *xH3SettingsWrite(uint8_t *p, const xH3Settings *s);

#endif
