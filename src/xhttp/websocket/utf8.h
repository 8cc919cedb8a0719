/* utf8.h — UTF-8 validation that can stop anywhere and go on with the next
 * piece, as a text message's fragments arrive (RFC 3629: no overlongs, no
 * surrogates, nothing above U+10FFFF). */
#ifndef XHTTP_WEBSOCKET_UTF8_H
#define XHTTP_WEBSOCKET_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** Where validation stands between pieces; zero is the start of text. */
typedef struct xUtf8 {
    uint8_t need;  /* continuation bytes still owed by the current character */
    uint8_t lower; /* the range the next continuation byte must be in */
    uint8_t upper;
} xUtf8;

/** Checks the next len bytes of text. False as soon as they cannot be part
 *  of valid UTF-8, whatever follows. */
bool xUtf8Feed(xUtf8 *state, const uint8_t *bytes, size_t len);

/** True when the text fed so far ends on a character boundary. */
static inline bool xUtf8Complete(const xUtf8 *state) { return state->need == 0; }

/** Checks a whole text at once. */
static inline bool xUtf8Valid(const void *bytes, size_t len) {
    xUtf8 state = {0, 0, 0};
    return xUtf8Feed(&state, bytes, len) && xUtf8Complete(&state);
}

#endif
