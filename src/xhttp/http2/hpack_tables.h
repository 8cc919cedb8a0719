/* hpack_tables.h — the tables hpack_gen.py builds from RFC 7541 (Appendix A, the
 * static table; Appendix B, the Huffman code) into hpack_tables.c, which is checked in. */
#ifndef XHTTP_HTTP2_HPACK_TABLES_H
#define XHTTP_HTTP2_HPACK_TABLES_H

#include <stdint.h>

#include "xhttp/http2/hpack.h"

/* One step of the Huffman decoder: 4 input bits from a state. */
enum { XHPACK_HUFF_EMIT = 1, XHPACK_HUFF_ACCEPT = 2, XHPACK_HUFF_FAIL = 4 };
typedef struct xHpackHuffStep {
    uint8_t next;  /* the state after the 4 bits (an internal node of the code tree) */
    uint8_t flags; /* EMIT: sym is decoded; ACCEPT: the string may end here; FAIL: EOS */
    uint8_t sym;
} xHpackHuffStep;

typedef struct xHpackStaticEntry {
    xStr name, value;
    xHpackToken token;
} xHpackStaticEntry;

extern const uint32_t xHpackHuffCode[257]; /* aligned to the LSB, as the RFC prints it */
extern const uint8_t xHpackHuffLen[257];
extern const xHpackHuffStep xHpackHuffDecode[256][16];
extern const xHpackStaticEntry xHpackStatic[62];           /* [0] is unused: indexes start at 1 */
extern const uint8_t xHpackTokenIndex[XHPACK_TOKEN_COUNT]; /* a name's first static index, or 0 */

#endif
