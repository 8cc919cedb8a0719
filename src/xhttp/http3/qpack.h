/* qpack.h — QPACK (RFC 9204), xKit's own: a field-section decoder with the
 * dynamic table the peer's encoder stream fills, blocked-stream accounting and
 * the decoder stream's instructions, and a static-table-only encoder.
 *
 * QPACK is HPACK's sibling, so it reuses HPACK's pieces (http2/hpack.h): the
 * Huffman code, the field type with a token per well-known name, and the name
 * and value verdicts. A decoded field is an xHpackField, so HTTP/2's request
 * checks (http2/request.h) apply to it unchanged, as RFC 9114 §4.2-4.3 asks;
 * its verdict carries its value's syntax, as HPACK's does, judged once for a
 * dynamic table entry and never for a static one (xH2CheckHpackRequest).
 *
 * Decoding works on one whole encoded field section (a HEADERS frame's payload;
 * HTTP/3 frames are length-prefixed, so it is whole before it is read) and never
 * allocates: plain literals are views into it, Huffman strings and dynamic table
 * fields are copied into the caller's scratch buffer, static fields point at the
 * static table. Decoding a section never changes the table, so one that is over
 * the caller's limit is reported as XQPACK_TOO_LARGE without harming later ones.
 *
 * The encoder is static-only for most fields (xQpackEncodeField); the fields a
 * connection repeats on every response (server, date) go through xQpackEncoder's
 * dynamic table, referenced only once acknowledged, so the peer is never blocked. */
#ifndef XHTTP_HTTP3_QPACK_H
#define XHTTP_HTTP3_QPACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <xbase/str.h>

#include "xhttp/http2/hpack.h"

/** What a QPACK call says. The errors are RFC 9204 §6's, which end the connection;
 *  xQpackErrorCode gives the code to send. */
typedef enum xQpackResult {
    XQPACK_OK = 0,
    XQPACK_BLOCKED,              /* the section needs inserts not received yet: decode it again later */
    XQPACK_TOO_LARGE,            /* well-formed, but over the caller's field or size limit (431) */
    XQPACK_DECOMPRESSION_FAILED, /* a field section the decoder cannot interpret, or too many blocked */
    XQPACK_ENCODER_STREAM_ERROR, /* an encoder instruction the decoder cannot interpret */
    XQPACK_DECODER_STREAM_ERROR, /* a decoder instruction the encoder cannot interpret */
} xQpackResult;

/** The HTTP/3 error code of an error result (0x200, 0x201, 0x202); 0 for the others. */
uint64_t xQpackErrorCode(xQpackResult r);

/** The number of static table entries (RFC 9204 Appendix A). */
#define XQPACK_STATIC_COUNT 99

/** One static table entry: name, value, and the name's token. */
typedef struct xQpackStaticEntry {
    xStr name, value;
    xHpackToken token;
} xQpackStaticEntry;

/** RFC 9204 Appendix A, indexed from 0 as QPACK indexes it. */
extern const xQpackStaticEntry xQpackStatic[XQPACK_STATIC_COUNT];

/** The overhead RFC 9204 §3.2.1 counts per dynamic table entry. */
#define XQPACK_ENTRY_OVERHEAD 32

/** One dynamic table entry; its bytes sit in the table's ring. */
typedef struct xQpackEntry {
    uint32_t at; /* offset of name then value in the ring */
    uint32_t name_len, value_len;
    uint16_t token;
    uint8_t flags; /* the verdict: XHPACK_BAD_NAME | XHPACK_BAD_VALUE | XHPACK_BAD_SYNTAX */
} xQpackEntry;

/** A stream whose section waits for inserts, and the Required Insert Count it read: a
 *  count decoded later, against more inserts, could wrap to another value (§4.5.1.1). */
typedef struct xQpackBlocked {
    uint64_t stream_id, required;
} xQpackBlocked;

/** The most a section may hold to be kept for its repeats (xQpackRepeat). */
#define XQPACK_REPEAT_BYTES 96
#define XQPACK_REPEAT_FIELDS 8
#define XQPACK_REPEAT_STRINGS 160

/** The last section decoded whole, if it was small: a client's streams of one request
 *  (an API client's calls, a load generator's) bring the same bytes again, which are
 *  then copied from here instead of decoded, with the same fields, verdicts and Section
 *  Acknowledgment. Forgotten when the encoder stream changes the table, the only thing
 *  besides the bytes that a section's meaning depends on, unless it refers to no entry
 *  (Required Insert Count 0): then it means the same whatever the table holds. */
typedef struct xQpackRepeat {
    uint64_t number; /* names the section kept: a new number for each (xQpackSection.remembered) */
    uint16_t len;    /* of bytes; 0: none kept */
    uint16_t strings_len;
    uint16_t count;
    size_t size;
    uint64_t required;
    uint8_t bytes[XQPACK_REPEAT_BYTES];
    struct {
        uint16_t name_at, name_len, value_at, value_len; /* in strings */
        uint16_t token;
        uint8_t flags;
    } fields[XQPACK_REPEAT_FIELDS];
    char strings[XQPACK_REPEAT_STRINGS];
} xQpackRepeat;

/** A decoding context, one per connection: the dynamic table, the streams blocked on
 *  it, and the decoder stream bytes waiting to be sent. */
typedef struct xQpackDecoder {
    char *ring;           /* max_capacity + 1 bytes: live entries never hold more */
    char *spill;          /* max_capacity bytes: a name copied before an insert evicts it */
    xQpackEntry *entries; /* max_capacity / 32 + 1 slots, oldest at first */
    uint32_t slots, first, count;
    uint32_t head;                     /* where the next entry's bytes go in the ring */
    size_t size;                       /* RFC 9204 §3.2.1: name + value + 32 per entry */
    size_t capacity;                   /* what the encoder set, at most max_capacity */
    size_t max_capacity;               /* our SETTINGS_QPACK_MAX_TABLE_CAPACITY */
    uint64_t inserts;                  /* every insert so far: the absolute index of the next */
    uint64_t known_received;           /* the encoder's Known Received Count, as our instructions set it */
    xQpackBlocked *blocked;            /* the streams blocked now, at most max_blocked */
    size_t blocked_count, max_blocked; /* max_blocked: our SETTINGS_QPACK_BLOCKED_STREAMS */
    uint8_t *out;                      /* decoder stream instructions not yet taken */
    size_t out_len, out_cap;
    xHpackHuffmanMemo memo; /* the last Huffman-coded value of a section, decoded */
    xQpackRepeat repeat;    /* the last small section decoded whole */
} xQpackDecoder;

/** Prepares d for our SETTINGS_QPACK_MAX_TABLE_CAPACITY and SETTINGS_QPACK_BLOCKED_STREAMS;
 *  allocates the table once. The table starts at capacity 0 until the encoder sets one.
 *  Returns 0, or -1 when out of memory. */
int xQpackDecoderInit(xQpackDecoder *d, size_t max_capacity, size_t max_blocked);

/** Frees what Init and the decoder stream output allocated. */
void xQpackDecoderFree(xQpackDecoder *d);

/** Reads encoder stream instructions (RFC 9204 §4.3) from in, applying each to the table.
 *  Only whole instructions are consumed: *consumed says how many bytes they took, and the
 *  caller gives the rest again with more. Returns XQPACK_OK or XQPACK_ENCODER_STREAM_ERROR
 *  (also for a partial instruction that could never fit the table). */
xQpackResult xQpackDecoderReadEncoder(xQpackDecoder *d, const uint8_t *in, size_t len, size_t *consumed);

/** Where a section's fields go and the limits they meet. */
typedef struct xQpackSection {
    xHpackField *fields; /* in: room for max_fields; out: count of them filled */
    size_t max_fields;
    size_t count;
    char *scratch; /* Huffman-decoded strings and copies of table fields */
    size_t scratch_size;
    size_t max_size;                /* SETTINGS_MAX_FIELD_SECTION_SIZE: name + value + 32 per field */
    size_t size;                    /* out: the whole section's size, counted to its end */
    uint64_t required_insert_count; /* out: the prefix's, once read */
    /* out: nonzero when the fields are the decoder's kept section's (xQpackRepeat), a
     * number that names it: the same number, the same fields, verdicts and all, so what
     * the caller concluded from them holds again. 0 otherwise. */
    uint64_t remembered;
} xQpackSection;

/** Decodes one whole encoded field section of stream_id into s. Returns XQPACK_OK,
 *  XQPACK_TOO_LARGE (fields, bytes or scratch ran out; the rest was still checked),
 *  XQPACK_BLOCKED (nothing read but the prefix: decode the same bytes again once
 *  xQpackDecoderInsertCount reaches s->required_insert_count; the stream counts as
 *  blocked until then) or XQPACK_DECOMPRESSION_FAILED (also when one stream more would
 *  be blocked than our SETTINGS_QPACK_BLOCKED_STREAMS allows). A section that referred
 *  to the dynamic table queues a Section Acknowledgment (out of memory for it is a
 *  XQPACK_DECOMPRESSION_FAILED too). */
xQpackResult xQpackDecodeSection(xQpackDecoder *d, uint64_t stream_id, const uint8_t *in, size_t len,
                                 xQpackSection *s);

/** When in is section number again (xQpackSection.remembered), still the decoder's kept
 *  section (the same bytes, and the table as it was for it unless it refers to no
 *  entry), does what decoding it would do besides filling fields (queues its Section
 *  Acknowledgment) and returns true; otherwise does nothing and returns false (decode it;
 *  also when out of memory for the acknowledgment). Lets a caller that kept what it
 *  concluded from that section's fields skip decoding them. */
bool xQpackDecodeAgain(xQpackDecoder *d, uint64_t number, uint64_t stream_id, const uint8_t *in, size_t len);

/** How many inserts the table has had: a blocked section waits for this to reach its
 *  Required Insert Count. */
static inline uint64_t xQpackDecoderInsertCount(const xQpackDecoder *d) { return d->inserts; }

/** The stream was reset or abandoned before its section was decoded: it is no longer
 *  blocked, and a Stream Cancellation is queued when the table can hold anything.
 *  XQPACK_DECOMPRESSION_FAILED only when out of memory for the queue. */
xQpackResult xQpackDecoderCancelStream(xQpackDecoder *d, uint64_t stream_id);

/** Takes the decoder stream bytes due (RFC 9204 §4.4): the queued Section Acknowledgments
 *  and Stream Cancellations, then an Insert Count Increment for inserts no acknowledgment
 *  covered. The view lives until the next call on d; empty when nothing is due. */
xStr xQpackDecoderTakeOutput(xQpackDecoder *d);

/** Copies the dynamic table entry of absolute index abs into buf, name then value; false
 *  when there is none (never inserted or evicted) or it does not fit. For tests. */
bool xQpackDecoderEntry(const xQpackDecoder *d, uint64_t abs, char *buf, size_t cap, xStr *name, xStr *value);

/** Reads a prefixed integer (RFC 9204 §4.1.1, RFC 7541 §5.1) of up to 62 bits at *p,
 *  moving *p past it; false when it runs past end or over 2^62 - 1. */
bool xQpackReadInt(const uint8_t **p, const uint8_t *end, int prefix_bits, uint64_t *value);

/* Integers are written with HPACK's xHpackWriteInt: RFC 9204 §4.1.1 uses RFC 7541's. */

/** The most bytes one field can take in the encoder's output. */
#define XQPACK_FIELD_BOUND(name_len, value_len) ((name_len) + (value_len) + 24)

/** The section prefix of a static-only section: Required Insert Count 0, Base 0. */
#define XQPACK_PREFIX_SIZE 2

/** Starts a section: writes its prefix (XQPACK_PREFIX_SIZE bytes). */
uint8_t *xQpackEncodeBegin(uint8_t *p);

/** One entry of the encoder's dynamic table: name then value in one allocation. */
typedef struct xQpackEncoderEntry {
    char *bytes;
    uint32_t name_len, value_len;
} xQpackEncoderEntry;

/** A sent field section that refers to the dynamic table and is not yet acknowledged:
 *  the entries from lowest to required - 1 may be in use by the peer, so none of them
 *  is evicted until its Section Acknowledgment or Stream Cancellation. */
typedef struct xQpackOutstanding {
    uint64_t stream_id, required, lowest;
} xQpackOutstanding;

/** The encoder's side of one connection (RFC 9204 §2.1). The policy never blocks the
 *  peer: entries are inserted on the encoder stream, and a field section refers to one
 *  only once the peer has acknowledged it (Known Received Count), so a section's
 *  Required Insert Count never exceeds what the peer has. An insert that does not fit
 *  without evicting an entry in use is not made (the field goes as a literal). With a
 *  peer capacity of 0 it stays static-only and costs nothing. */
typedef struct xQpackEncoder {
    size_t peer_max_capacity;    /* the peer's SETTINGS_QPACK_MAX_TABLE_CAPACITY: sets MaxEntries */
    size_t capacity;             /* what we set: at most the peer's and our limit; 0: static only */
    size_t size;                 /* RFC 9204 §3.2.1 */
    xQpackEncoderEntry *entries; /* capacity / 32 + 1 slots, oldest at first */
    uint32_t slots, first, count;
    uint64_t inserts;            /* every insert so far: the absolute index of the next */
    uint64_t known_received;     /* Known Received Count (§2.1.4) */
    xQpackOutstanding *sections; /* in the order sent, from section_first on */
    size_t section_first, section_count, section_cap;
    uint64_t version; /* changes whenever what a field encodes to may change */
    bool waiting;     /* an insert did not fit: an acknowledgment that frees entries changes version */
    uint8_t *out;     /* encoder stream instructions not yet taken */
    size_t out_len, out_cap;
} xQpackEncoder;

/** A static-only encoder (all zero is one too). */
void xQpackEncoderInit(xQpackEncoder *e);

/** Frees the table, the outstanding sections and the output. */
void xQpackEncoderFree(xQpackEncoder *e);

/** The peer's SETTINGS_QPACK_MAX_TABLE_CAPACITY arrived: uses min(peer_max, limit) and
 *  queues Set Dynamic Table Capacity. 0, or out of memory: stays static-only. Call once. */
void xQpackEncoderSetPeerCapacity(xQpackEncoder *e, uint64_t peer_max, size_t limit);

/** Reads the peer's decoder stream (RFC 9204 §4.4): Section Acknowledgment (raises the
 *  Known Received Count to the section's Required Insert Count, frees its entries),
 *  Stream Cancellation, Insert Count Increment. One that acknowledges a section never
 *  sent, or an increment of 0 or past our inserts, is XQPACK_DECODER_STREAM_ERROR.
 *  Only whole instructions are consumed (*consumed), as xQpackDecoderReadEncoder does. */
xQpackResult xQpackEncoderReadDecoder(xQpackEncoder *e, const uint8_t *in, size_t len, size_t *consumed);

/** The most bytes a section prefix takes. */
#define XQPACK_PREFIX_MAX 20

/** The most fields of one xQpackEncodeFieldsWith call that may use the dynamic table. */
#define XQPACK_WITH_MAX 8

/** Writes the n fields given (names lower case) of a section of stream_id, as
 *  xQpackEncodeField writes them or as references to dynamic entries the peer has
 *  acknowledged (the first XQPACK_WITH_MAX); the fields not in the table yet are
 *  inserted for the sections that follow, where they fit. At most XQPACK_FIELD_BOUND per
 *  field. *required: the Required Insert Count the section's prefix must carry
 *  (xQpackEncodePrefix; 0 when it refers to no entry), *lowest: the oldest entry it
 *  refers to. The section's other fields may use xQpackEncodeField and the like. */
uint8_t *xQpackEncodeFieldsWith(xQpackEncoder *e, uint64_t stream_id, uint8_t *p, const xStr *names,
                                const xStr *values, size_t n, uint64_t *required, uint64_t *lowest);

/** Writes a section prefix for Required Insert Count required, with Base equal to it;
 *  with 0, xQpackEncodeBegin's. At most XQPACK_PREFIX_MAX bytes. */
uint8_t *xQpackEncodePrefix(const xQpackEncoder *e, uint8_t *p, uint64_t required);

/** Notes a section sent again as bytes copied from an earlier one of the same version
 *  (required and lowest as xQpackEncodeFieldsWith gave them); false when out of memory, and then the
 *  copy must not be sent. */
bool xQpackEncoderNoteSection(xQpackEncoder *e, uint64_t stream_id, uint64_t required, uint64_t lowest);

/** Takes the encoder stream bytes due; the view lives until the next call on e. */
xStr xQpackEncoderTakeOutput(xQpackEncoder *e);

/** Writes :status; the static table's statuses take one byte. At most 6 bytes. */
uint8_t *xQpackEncodeStatus(uint8_t *p, int status);

/** Writes any field; name must be lower case. An exact static match is one index, a
 *  static name a reference, anything else a literal; strings are Huffman-coded where
 *  that is shorter. Never indexed by us, so nothing to acknowledge. */
uint8_t *xQpackEncodeField(uint8_t *p, xStr name, xStr value);

/** Writes content-length: length, as xQpackEncodeField writes it (the same bytes)
 *  without looking the name up: every response with a body has one. */
uint8_t *xQpackEncodeContentLength(uint8_t *p, uint64_t length);

#endif
