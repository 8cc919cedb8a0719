/* jwt.h — the HS256 JSON Web Tokens the production stack's auth service
 * (authsvc.c) accepts, apart from its HTTP side so that a fuzzer can take a
 * token apart as a client could send it (tests/fuzz/fuzz_arena_jwt.c). */
#ifndef ARENA_JWT_H
#define ARENA_JWT_H

#include <stddef.h>
#include <stdint.h>

#include <xbase/str.h>

/* The longest token taken; the arena's is about 150 bytes. */
#define ARENA_JWT_MAX_TOKEN 4096

/* What a token comes to: only ARENA_JWT_VALID lets a request through. */
typedef enum ArenaJwtVerdict {
    ARENA_JWT_VALID,
    ARENA_JWT_MALFORMED,     /* not three base64url parts, or longer than ARENA_JWT_MAX_TOKEN */
    ARENA_JWT_BAD_SIGNATURE, /* not HMAC-SHA256 of header.payload under the secret */
    ARENA_JWT_BAD_HEADER,    /* not a JSON object whose alg is "HS256" */
    ARENA_JWT_BAD_CLAIMS,    /* the payload is not a JSON object, or its exp is not an integer */
    ARENA_JWT_EXPIRED,       /* exp is at or before now */
    ARENA_JWT_NO_SUBJECT,    /* no sub, or one that cannot go on as X-User-Id */
} ArenaJwtVerdict;

/** Decodes len bytes of base64url without padding (RFC 7515 §2) into out
 *  (cap bytes): the decoded length, or -1 when in is not that (another
 *  character, a length of 4n + 1, leftover bits not zero) or needs more room. */
long arenaBase64UrlDecode(const char *in, size_t len, unsigned char *out, size_t cap);

/** Checks token (the text after "Bearer ") against secret at time now
 *  (seconds since the epoch). When VALID, user holds the token's sub as
 *  text: a string of visible ASCII shorter than cap, or an integer. */
ArenaJwtVerdict arenaJwtVerify(xStr token, xStr secret, int64_t now, char *user, size_t cap);

#endif
