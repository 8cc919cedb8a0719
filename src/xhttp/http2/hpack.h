/* hpack.h — HPACK (RFC 7541), xKit's own: a decoder that yields header fields
 * with a token per well-known name and a verdict computed once, and an encoder
 * for response heads.
 *
 * Decoding works on one whole header block (HEADERS plus its CONTINUATIONs,
 * joined) and never allocates: plain literals are views into the block, Huffman
 * strings are decoded into the caller's scratch buffer, static fields point at
 * the static table, and fields taken from the dynamic table are views into it,
 * copied into scratch only where they wrap round its ring or before the block
 * adds an entry that could overwrite them. A block whose header
 * list is over the caller's limit is still decoded to its end, so the dynamic
 * table stays in sync, and reported as XHPACK_TOO_LARGE (answer 431).
 *
 * The encoder keeps a dynamic table of its own per connection (at most 4096 bytes,
 * within the peer's SETTINGS_HEADER_TABLE_SIZE) for the fields responses repeat
 * (server, date, content-type, ...): the first response sends them as literals the
 * peer's table takes, the next ones by index, a byte each, so clients neither
 * receive nor Huffman-decode them again. After the peer changes its setting the
 * next block starts with a dynamic table size update (RFC 7541 §4.2). */
#ifndef XHTTP_HTTP2_HPACK_H
#define XHTTP_HTTP2_HPACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <xbase/str.h>

#include "xhttp/core/tokens.h"

/** Well-known field names: every name of the static table (RFC 7541 Appendix A,
 *  in its order, pseudo-headers without the colon), then the connection-specific
 *  names RFC 9113 §8.2.2 forbids. hpack_gen.py names them, so they cannot drift. */
typedef enum xHpackToken {
    XHPACK_TOKEN_NONE,
    XHPACK_TOKEN_AUTHORITY,
    XHPACK_TOKEN_METHOD,
    XHPACK_TOKEN_PATH,
    XHPACK_TOKEN_SCHEME,
    XHPACK_TOKEN_STATUS,
    XHPACK_TOKEN_ACCEPT_CHARSET,
    XHPACK_TOKEN_ACCEPT_ENCODING,
    XHPACK_TOKEN_ACCEPT_LANGUAGE,
    XHPACK_TOKEN_ACCEPT_RANGES,
    XHPACK_TOKEN_ACCEPT,
    XHPACK_TOKEN_ACCESS_CONTROL_ALLOW_ORIGIN,
    XHPACK_TOKEN_AGE,
    XHPACK_TOKEN_ALLOW,
    XHPACK_TOKEN_AUTHORIZATION,
    XHPACK_TOKEN_CACHE_CONTROL,
    XHPACK_TOKEN_CONTENT_DISPOSITION,
    XHPACK_TOKEN_CONTENT_ENCODING,
    XHPACK_TOKEN_CONTENT_LANGUAGE,
    XHPACK_TOKEN_CONTENT_LENGTH,
    XHPACK_TOKEN_CONTENT_LOCATION,
    XHPACK_TOKEN_CONTENT_RANGE,
    XHPACK_TOKEN_CONTENT_TYPE,
    XHPACK_TOKEN_COOKIE,
    XHPACK_TOKEN_DATE,
    XHPACK_TOKEN_ETAG,
    XHPACK_TOKEN_EXPECT,
    XHPACK_TOKEN_EXPIRES,
    XHPACK_TOKEN_FROM,
    XHPACK_TOKEN_HOST,
    XHPACK_TOKEN_IF_MATCH,
    XHPACK_TOKEN_IF_MODIFIED_SINCE,
    XHPACK_TOKEN_IF_NONE_MATCH,
    XHPACK_TOKEN_IF_RANGE,
    XHPACK_TOKEN_IF_UNMODIFIED_SINCE,
    XHPACK_TOKEN_LAST_MODIFIED,
    XHPACK_TOKEN_LINK,
    XHPACK_TOKEN_LOCATION,
    XHPACK_TOKEN_MAX_FORWARDS,
    XHPACK_TOKEN_PROXY_AUTHENTICATE,
    XHPACK_TOKEN_PROXY_AUTHORIZATION,
    XHPACK_TOKEN_RANGE,
    XHPACK_TOKEN_REFERER,
    XHPACK_TOKEN_REFRESH,
    XHPACK_TOKEN_RETRY_AFTER,
    XHPACK_TOKEN_SERVER,
    XHPACK_TOKEN_SET_COOKIE,
    XHPACK_TOKEN_STRICT_TRANSPORT_SECURITY,
    XHPACK_TOKEN_TRANSFER_ENCODING,
    XHPACK_TOKEN_USER_AGENT,
    XHPACK_TOKEN_VARY,
    XHPACK_TOKEN_VIA,
    XHPACK_TOKEN_WWW_AUTHENTICATE,
    XHPACK_TOKEN_CONNECTION,
    XHPACK_TOKEN_KEEP_ALIVE,
    XHPACK_TOKEN_PROXY_CONNECTION,
    XHPACK_TOKEN_TE,
    XHPACK_TOKEN_UPGRADE,
    XHPACK_TOKEN_COUNT
} xHpackToken;

/** Each token's name, lower case (pseudo-headers with their colon). */
extern const xStr xHpackTokenNames[XHPACK_TOKEN_COUNT];

/** The token of a lower-case name, or XHPACK_TOKEN_NONE. */
xHpackToken xHpackTokenOf(const char *name, size_t len);

/** A field's verdict, computed once when it is decoded or enters the table. */
enum {
    XHPACK_BAD_NAME = 1,      /* not lower-case tchars (after a leading ':'), RFC 9113 §8.2.1 */
    XHPACK_BAD_VALUE = 2,     /* NUL, CR or LF, or leading or trailing SP/HTAB */
    XHPACK_NEVER_INDEXED = 4, /* sent as "never indexed" (RFC 7541 §6.2.3): forward it so */
    XHPACK_BAD_SYNTAX = 8,    /* not of the syntax its name requires (xHpackSyntaxVerdict) */
    /* Not bad, but a control byte other than NUL, CR, LF and HTAB (or DEL)
     * lies in the value: RFC 9113 lets it by, HTTP/1.1's field-value (RFC
     * 9110 §5.5) does not, so a field with it is checked again before it is
     * passed on over HTTP/1.1. */
    XHPACK_CTL_VALUE = 16,
};

/** A value's verdict for its name: XHPACK_BAD_SYNTAX when a request's :method is no token,
 *  :scheme no scheme (RFC 3986 §3.1), :path has a control byte or space, or :authority or
 *  host a byte outside RFC 3986 §3.2's; 0 otherwise (and for every other name). HPACK
 *  judges a field once, so one the client sends by index again costs nothing more. */
uint8_t xHpackSyntaxVerdict(unsigned token, xStr value);

/** A name's verdict: XHPACK_BAD_NAME unless lower-case tchars after an optional leading ':'.
 *  Shared with QPACK (http3/), which holds fields to the same rules (RFC 9114 §4.2). */
static inline uint8_t xHpackNameVerdict(xStr name) {
    size_t i = name.len && name.data[0] == ':' ? 1 : 0;
    if (i == name.len) return XHPACK_BAD_NAME;
    for (; i < name.len; i++) {
        unsigned char c = (unsigned char)name.data[i];
        if (!xHttpIsTokenChar(c) || (c >= 'A' && c <= 'Z')) return XHPACK_BAD_NAME;
    }
    return 0;
}

/** A value's verdict: XHPACK_BAD_VALUE for NUL, CR, LF or leading or trailing SP/HTAB;
 *  XHPACK_CTL_VALUE for another control byte but HTAB, or DEL. */
static inline uint8_t xHpackValueVerdict(xStr v) {
    if (v.len &&
        (v.data[0] == ' ' || v.data[0] == '\t' || v.data[v.len - 1] == ' ' || v.data[v.len - 1] == '\t'))
        return XHPACK_BAD_VALUE;
    uint8_t verdict = 0;
    for (size_t i = 0; i < v.len; i++) {
        unsigned char c = (unsigned char)v.data[i];
        if (c >= 0x20 && c != 0x7F) continue;
        if (c == '\0' || c == '\r' || c == '\n') return XHPACK_BAD_VALUE;
        if (c != '\t') verdict = XHPACK_CTL_VALUE;
    }
    return verdict;
}

/** A decoded value's whole verdict for its name's token: xHpackSyntaxVerdict's (with
 *  XHPACK_BAD_VALUE too where that applies) for a name with a syntax, xHpackValueVerdict's
 *  for any other. What HPACK and QPACK give a field as it is decoded or enters their
 *  table, so that xH2CheckHpackRequest need not judge it again. (A value of any name with
 *  a syntax that has it holds no control byte and no space: a sound field value too.) */
static inline uint8_t xHpackFieldValueVerdict(unsigned token, xStr value) {
    switch (token) {
    case XHPACK_TOKEN_METHOD:
    case XHPACK_TOKEN_SCHEME:
    case XHPACK_TOKEN_PATH:
    case XHPACK_TOKEN_AUTHORITY:
    case XHPACK_TOKEN_HOST:
        if (!xHpackSyntaxVerdict(token, value)) return 0;
        return XHPACK_BAD_SYNTAX | xHpackValueVerdict(value);
    default: return xHpackValueVerdict(value);
    }
}

/** A decoded field: views that live as long as the block and the scratch buffer. */
typedef struct xHpackField {
    xStr name;
    xStr value;
    uint16_t token; /* xHpackToken */
    uint8_t flags;  /* the verdict (XHPACK_BAD_NAME ... XHPACK_CTL_VALUE), XHPACK_NEVER_INDEXED */
} xHpackField;

/** What xHpackDecode says of a block. */
enum {
    XHPACK_OK = 0,
    XHPACK_TOO_LARGE = 1, /* decoded, table in sync, but the list is over max_list_size: 431 */
    XHPACK_ERROR = -1,    /* malformed: a connection error of type COMPRESSION_ERROR */
};

/** One dynamic table entry; its bytes sit in the table's ring. */
typedef struct xHpackEntry {
    uint32_t at; /* offset of name then value in the ring */
    uint32_t name_len, value_len;
    uint16_t token;
    uint8_t flags;
} xHpackEntry;

/** The decoder's dynamic table: entry metadata and bytes, both rings. */
/** The dynamic table's size before any SETTINGS or size update (RFC 9113 §6.5.2). */
#define XHPACK_INITIAL_TABLE_SIZE 4096

typedef struct xHpackTable {
    char *bytes;          /* `limit` bytes: live entries never hold more (each costs 32 on top) */
    xHpackEntry *entries; /* limit / 32 slots */
    uint32_t slots, first, count;
    uint32_t head;    /* where the next entry's bytes go */
    size_t size;      /* RFC 7541 §4.1: name + value + 32 per entry */
    size_t max;       /* the size the encoder chose, at most our limit */
    uint32_t version; /* changes with every entry added or evicted, and with max */
} xHpackTable;

/** Coded bytes of a Huffman-coded value the decoder remembers with what they decode to. */
#define XHPACK_MEMO_CODED 48
/** The most a string of XHPACK_MEMO_CODED coded bytes decodes to (the shortest code is 5 bits). */
#define XHPACK_MEMO_PLAIN (XHPACK_MEMO_CODED * 8 / 5)

/** The last Huffman-coded value decoded, and its decoding. Clients send some values again
 *  and again unindexed (nghttp2 never indexes :path), so the next one is most often the
 *  same bytes: compared and copied, not decoded a nibble at a time. */
typedef struct xHpackHuffmanMemo {
    uint8_t coded_len; /* 0: nothing remembered */
    uint8_t plain_len;
    /* The last decode's output is plain (a hit, or remembered just now). */
    bool current;
    /* HPACK's decoder: the value's verdict for a field of this token + 1 (0: none
     * yet), which the same bytes under the same name get again (the target's
     * syntax of :path, checked once, not on every request). */
    uint16_t verdict_token;
    uint8_t verdict;
    uint8_t coded[XHPACK_MEMO_CODED];
    char plain[XHPACK_MEMO_PLAIN];
} xHpackHuffmanMemo;

/** The largest block the decoder remembers whole, the most fields, and the most bytes
 *  of decoded strings it may hold. */
#define XHPACK_BLOCK_MEMO_BYTES 128
#define XHPACK_BLOCK_MEMO_FIELDS 16
#define XHPACK_BLOCK_MEMO_SCRATCH 256

/** The last block decoded that left the table as it was, and its fields. A client sends
 *  the same block again and again (h2load's every request; a browser's fetches of one
 *  page): while the table is the same, the same bytes decode to the same fields with
 *  the same verdicts, so they are compared and copied, not decoded a field at a time.
 *  Each string is kept as where it lies: an offset into the block's bytes or the
 *  decoded strings, or a view of the static table or of the dynamic table's ring,
 *  which stays put while the version does. */
typedef struct xHpackBlockMemo {
    size_t len;          /* the block's bytes; 0: none remembered */
    uint64_t generation; /* counts the blocks remembered, so each has its own (never 0) */
    uint32_t table_version;
    size_t count, list_size, used; /* fields, their list size, scratch bytes they take */
    uint8_t bytes[XHPACK_BLOCK_MEMO_BYTES];
    xHpackField fields[XHPACK_BLOCK_MEMO_FIELDS];
    /* The strings kept as offsets, field * 2 (+ 1 for its value) each, and where each lies
     * (XHPACK_LIES_*, hpack.c): only these are placed again, the rest copied as they are. */
    uint8_t moved[XHPACK_BLOCK_MEMO_FIELDS * 2], moved_where[XHPACK_BLOCK_MEMO_FIELDS * 2];
    size_t moved_count;
    char scratch[XHPACK_BLOCK_MEMO_SCRATCH];
} xHpackBlockMemo;

/** A decoding context: one per connection. */
typedef struct xHpackDecoder {
    xHpackTable table;
    xHpackHuffmanMemo memo;
    xHpackBlockMemo *block_memo; /* allocated at the first block it may keep */
    size_t capacity;             /* what Init allocated for */
    size_t limit;                /* our SETTINGS_HEADER_TABLE_SIZE, as acknowledged */
    size_t lowest;               /* the lowest limit since the encoder last updated */
    bool update_due;             /* the limit went down: the next block must start with an update */
    char *spill;                 /* `capacity` bytes: an entry's strings when scratch is full */
} xHpackDecoder;

/** Prepares d for a SETTINGS_HEADER_TABLE_SIZE of limit (4096 by default in HTTP/2);
 *  allocates the table once. The table itself starts at the smaller of limit and
 *  XHPACK_INITIAL_TABLE_SIZE: the encoder grows it only with a size update. Returns 0,
 *  or -1 when out of memory. */
int xHpackDecoderInit(xHpackDecoder *d, size_t limit);

/** Frees what Init allocated. */
void xHpackDecoderFree(xHpackDecoder *d);

/** Applies a new SETTINGS_HEADER_TABLE_SIZE once the peer acknowledged it; at most the
 *  size given to Init. A lower limit obliges the encoder to send a size update. */
void xHpackDecoderSetLimit(xHpackDecoder *d, size_t limit);

/** Where a block's fields go and the limits they meet. */
typedef struct xHpackBlock {
    xHpackField *fields; /* in: room for max_fields; out: count of them filled */
    size_t max_fields;
    size_t count;
    char *scratch;        /* Huffman-decoded strings and copies of table fields; give it at */
    size_t scratch_size;  /* least max_list_size bytes, so only a too-large list runs out */
    size_t max_list_size; /* SETTINGS_MAX_HEADER_LIST_SIZE: name + value + 32 per field */
    size_t list_size;     /* out: the whole block's list size, counted to its end */
    /* out: nonzero when the fields are the decoder's remembered block's (xHpackBlockMemo),
     * a number that names that block: the same number, the same fields, verdicts and
     * all, so what the caller concluded from them holds again. 0 otherwise. */
    uint64_t remembered;
} xHpackBlock;

/** Decodes one whole header block into b; returns XHPACK_OK, XHPACK_TOO_LARGE (too many
 *  fields or bytes; the block is consumed all the same) or XHPACK_ERROR. After an
 *  error the connection must end: the table is no longer in sync. A field taken whole
 *  from the dynamic table may be a view into the table itself: the fields live until
 *  the decoder's next block (and as long as the block and the scratch buffer). */
int xHpackDecode(xHpackDecoder *d, const uint8_t *in, size_t len, xHpackBlock *b);

/** The number of the decoder's remembered block (xHpackBlock.remembered) when in is that
 *  block and the table is as it was then, so that xHpackDecode would give its fields again
 *  (within the limits it met then) and leave the table as it is; 0 otherwise. Lets a
 *  caller that kept what it concluded from those fields skip decoding them. */
uint64_t xHpackRemembered(const xHpackDecoder *d, const uint8_t *in, size_t len);

/** Copies the dynamic table's entry at index (62 is the newest) into buf, name then
 *  value; false when there is none or it does not fit. For tests and debugging. */
bool xHpackDecoderEntry(const xHpackDecoder *d, size_t index, char *buf, size_t cap, xStr *name, xStr *value);

/** Integer primitive (RFC 7541 §5.1) with an n-bit prefix: reads one at *p, moving *p
 *  past it; false when it runs past end or over 2^32 - 1. */
bool xHpackReadInt(const uint8_t **p, const uint8_t *end, int prefix_bits, uint32_t *value);

/** Writes v with an n-bit prefix after the bits already in *p's high bits; returns the end.
 *  At most 6 bytes for a value below 2^32 (HPACK's), 11 for any (QPACK's, below 2^62: 10). */
uint8_t *xHpackWriteInt(uint8_t *p, uint8_t high_bits, int prefix_bits, uint64_t v);

/** Huffman-decodes in into out (cap bytes), counting the whole length in *len even past
 *  cap; false on EOS, padding over 7 bits, or padding that is not EOS's prefix. */
bool xHpackHuffmanDecode(const uint8_t *in, size_t n, char *out, size_t cap, size_t *len);

/** xHpackHuffmanDecode through memo: the last value's coded bytes again are copied from
 *  what they decoded to; a value decoded whole (and short enough) becomes the one
 *  remembered. */
bool xHpackHuffmanDecodeMemo(xHpackHuffmanMemo *m, const uint8_t *in, size_t n, char *out, size_t cap,
                             size_t *len);

/** The Huffman-coded length of s in bytes. */
size_t xHpackHuffmanLength(xStr s);

/** Huffman-encodes s at p; returns the end (xHpackHuffmanLength(s) bytes later). */
uint8_t *xHpackHuffmanEncode(uint8_t *p, xStr s);

/** Header lines a lines memo remembers, and the most their encoding may take. */
#define XHPACK_MEMO_LINES 128
#define XHPACK_MEMO_LINES_CODED 160

/** The last header lines encoded (as given, before folding) and their encoding: handlers send the
 *  same few fields answer after answer, so the same lines are copied, not Huffman-coded.
 *  An encoding that names dynamic table entries holds only while the table is as it
 *  was (table_version), and one that added entries is never kept: sent again, those
 *  fields go out by index. QPACK's, static only, depends on no table. */
typedef struct xHpackLinesMemo {
    uint8_t lines_len, coded_len; /* 0: nothing remembered */
    uint32_t table_version;       /* the encoder table's version the encoding is for */
    char lines[XHPACK_MEMO_LINES];
    uint8_t coded[XHPACK_MEMO_LINES_CODED];
} xHpackLinesMemo;

/** Writes one field at p (a lower-case name) and returns the end: QPACK's. */
typedef uint8_t *(*xHpackFieldWriter)(uint8_t *p, xStr name, xStr value);

/** Writes the fields of len bytes of "Name: value\r\n" lines with write, folding each
 *  name to lower case where it lies (RFC 9113 §8.2.1, RFC 9114 §4.2). The same lines as
 *  the last call's on memo are copied from its encoding (and left unfolded). For
 *  encodings that use no dynamic table (QPACK's). */
uint8_t *xHpackEncodeLinesWith(xHpackLinesMemo *memo, uint8_t *p, char *lines, size_t len,
                               xHpackFieldWriter write);

/** The most the encoder's dynamic table holds, whatever the peer allows: the table is
 *  kept in the connection, and a response head's repeated fields take a few hundred. */
#define XHPACK_ENCODER_TABLE_MAX 4096

/** The encoder's dynamic table (RFC 7541 §2.3.2), a copy of what the peer's decoder
 *  holds: entries oldest first, their names and values one after another in bytes. */
typedef struct xHpackEncoderTable {
    uint32_t count;
    uint32_t used; /* bytes of names and values */
    uint32_t size; /* RFC 7541 §4.1: name + value + 32 per entry */
    uint32_t max;  /* the size the peer's decoder knows, at most XHPACK_ENCODER_TABLE_MAX */
    /* Changes with every entry added or evicted: an encoding that names entries by
     * index is for one version. */
    uint32_t version;
    struct {
        uint16_t name_len, value_len;
    } entries[XHPACK_ENCODER_TABLE_MAX / 32];
    char bytes[XHPACK_ENCODER_TABLE_MAX];
} xHpackEncoderTable;

/** Encoding context: the peer's settings, the dynamic table, the lines memo. */
typedef struct xHpackEncoder {
    size_t peer_limit; /* the peer's SETTINGS_HEADER_TABLE_SIZE */
    size_t lowest;     /* the lowest peer_limit since the last size update */
    bool update_due;   /* peer_limit changed: the next block starts with a size update */
    xHpackEncoderTable table;
    xHpackLinesMemo lines;
    /* content-length enters the table only when it repeats the last response's (a
     * server of varied lengths never churns the table): the last length sent, and
     * the index it has at table version length_version (0: none). */
    uint64_t last_length;
    uint64_t length_value;
    uint32_t length_version;
    unsigned length_index;
} xHpackEncoder;

/** The most bytes one field can take (prefix and length integers included). */
#define XHPACK_FIELD_BOUND(name_len, value_len) ((name_len) + (value_len) + 12)

/** The most bytes xHpackEncodeBegin writes: two size updates. */
#define XHPACK_BEGIN_BOUND 8

/** Starts with the peer's default table size (4096) and an empty table. */
void xHpackEncoderInit(xHpackEncoder *e);

/** Records a SETTINGS_HEADER_TABLE_SIZE from the peer. */
void xHpackEncoderSetPeerTableSize(xHpackEncoder *e, size_t size);

/** Starts a block: writes the size updates the peer's settings call for (RFC 7541 §4.2:
 *  the lowest since the last block, then the new size; at most XHPACK_BEGIN_BOUND bytes)
 *  and evicts what the new size leaves no room for. */
uint8_t *xHpackEncodeBegin(xHpackEncoder *e, uint8_t *p);

/** Writes :status; 200, 204, 206, 304, 400, 404 and 500 take one byte. At most 5 bytes. */
uint8_t *xHpackEncodeStatus(uint8_t *p, int status);

/** Writes a field whose name is a token (server, date, content-type, ...): the name is a
 *  static index, the value a literal, Huffman-coded when shorter. Never indexed: for
 *  encoders without a table (the client's requests). */
uint8_t *xHpackEncodeToken(uint8_t *p, xHpackToken token, xStr value);

/** Writes any field; name must be lower case. Known names go through xHpackEncodeToken. */
uint8_t *xHpackEncodeField(uint8_t *p, xStr name, xStr value);

/** Writes a field through e's dynamic table: by index (1 or 2 bytes) when the table holds
 *  it; else a literal that the table (and the peer's) takes (RFC 7541 §6.2.1) when the
 *  field repeats across responses (server, date, content-type, ...: not credentials,
 *  cookies or per-response values such as content-length or etag) and fits; else as
 *  xHpackEncodeField. At most XHPACK_FIELD_BOUND. token may be XHPACK_TOKEN_NONE for a
 *  name of no token; name must be lower case. */
uint8_t *xHpackEncodeIndexed(xHpackEncoder *e, uint8_t *p, xHpackToken token, xStr name, xStr value);

/** xHpackEncodeLinesWith through e's dynamic table (xHpackEncodeIndexed) and memo; at most
 *  XHPACK_FIELD_BOUND of each line. */
uint8_t *xHpackEncodeLines(xHpackEncoder *e, uint8_t *p, char *lines, size_t len);

/** Writes content-length: n. */
uint8_t *xHpackEncodeContentLength(uint8_t *p, uint64_t n);

/** Writes content-length: n through e's dynamic table: as xHpackEncodeContentLength
 *  unless n is the length the last call wrote, which then enters the table (and goes
 *  out by index while it stays). At most XHPACK_FIELD_BOUND(14, 20). */
uint8_t *xHpackEncodeContentLengthIndexed(xHpackEncoder *e, uint8_t *p, uint64_t n);

/** Whether xHpackEncodeContentLengthIndexed writes n by its index, as it will again
 *  (changing nothing) while the table stays as it is. */
static inline bool xHpackLengthIndexed(const xHpackEncoder *e, uint64_t n) {
    return e->length_index && n == e->length_value && e->table.version == e->length_version;
}

#endif
