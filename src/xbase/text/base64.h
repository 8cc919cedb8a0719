/* base64.h — RFC 4648 base64 with padding, for handshake keys and headers,
 * and base64url (RFC 4648 §5), for HTTP2-Settings. */
#ifndef XBASE_TEXT_BASE64_H
#define XBASE_TEXT_BASE64_H

#include <stdbool.h>
#include <stddef.h>

/** Characters xBase64Encode writes for len bytes (no NUL). */
static inline size_t xBase64EncodedLen(size_t len) { return (len + 2) / 3 * 4; }

/** Encodes in[0, len) into out (room for xBase64EncodedLen(len) bytes;
 *  no NUL is written) and returns the characters written. */
size_t xBase64Encode(const void *in, size_t len, char *out);

/** Decodes text[0, len) into out, which has room for cap bytes. Strict: the
 *  length is a multiple of 4, padding only at the end, unused bits zero.
 *  Returns the bytes decoded, or -1 when text is not canonical base64 or
 *  does not fit. */
long xBase64Decode(const char *text, size_t len, void *out, size_t cap);

/** Decodes base64url text[0, len) ('-' and '_' where base64 has '+' and '/')
 *  into out, which has room for cap bytes. The padding may be left off, as
 *  RFC 7540 §3.2.1 has it for HTTP2-Settings; when present it is whole (the
 *  length a multiple of 4). Strict otherwise: no other character, no length
 *  one past a group of 4, unused bits zero. Returns the bytes decoded, or -1
 *  when text is not canonical base64url or does not fit. */
long xBase64UrlDecode(const char *text, size_t len, void *out, size_t cap);

#endif
