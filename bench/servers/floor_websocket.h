/* floor_websocket.h — the least-work responders' WebSocket mode (baseline_responder.c and baseline_uring.c
 * with --websocket): the floor xKit's WebSocket echo is measured against under ws_load -raw.
 *
 * A connection's first bytes are the opening handshake, gathered until its blank line; the one header read
 * is Sec-WebSocket-Key, and the answer is a 101 with its Sec-WebSocket-Accept (RFC 6455 §4.2.2: base64 of
 * the SHA-1 of the key and the GUID). After it every FLOOR_WS_FRAME_LEN bytes received are taken as one
 * masked "hello" text frame, the only frame ws_load -raw sends, and answered with the unmasked echo,
 * without a look at the bytes: this serves ws_load -raw's frames and nothing else (a close frame, 8 bytes,
 * is left as a partial frame until the client hangs up). So what xKit's echo costs beyond it is being
 * WebSocket (frames read, unmasked, checked, delivered, written), not the two system calls a message takes.
 */
#ifndef BENCH_FLOOR_WEBSOCKET_H
#define BENCH_FLOOR_WEBSOCKET_H

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define FLOOR_WS_FRAME_LEN 11 /* FIN|text, MASK|5, a 4-byte key, "hello" masked */
static const char floor_ws_echo[] = "\x81\x05hello";
#define FLOOR_WS_ECHO_LEN (sizeof floor_ws_echo - 1)
#define FLOOR_WS_HEAD_MAX 4096 /* a handshake longer than this is refused (the connection closed) */

/* A connection's handshake head, gathered across reads; then the 101 answered to it. */
struct floor_ws_head {
    size_t len;
    char bytes[FLOOR_WS_HEAD_MAX];
};

/* Appends what fits of buf[0, len) to head up to the end of its blank line: the bytes of buf taken, and
 * *complete once the head is whole. Returns -1 for a head that does not fit. Only the bytes after the
 * blank line are left in buf: they are the first frames. */
static long floor_ws_gather(struct floor_ws_head *head, const char *buf, size_t len, int *complete) {
    size_t before = head->len, take = len < FLOOR_WS_HEAD_MAX - before ? len : FLOOR_WS_HEAD_MAX - before;
    memcpy(head->bytes + before, buf, take);
    head->len += take;
    /* The blank line may straddle reads: look from 3 bytes before what came. */
    size_t from = before > 3 ? before - 3 : 0;
    char *end = memmem(head->bytes + from, head->len - from, "\r\n\r\n", 4);
    *complete = end != NULL;
    if (!end) return head->len == FLOOR_WS_HEAD_MAX ? -1 : (long)take;
    head->len = (size_t)(end + 4 - head->bytes);
    return (long)(head->len - before);
}

/* Rewrites head, a whole handshake, into its 101; false when it has no Sec-WebSocket-Key. */
static int floor_ws_answer(struct floor_ws_head *head) {
    static const char guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11", name[] = "\r\nsec-websocket-key:";
    char key[64 + sizeof guid];
    size_t key_len = 0;
    for (size_t i = 0; i + sizeof name - 1 < head->len && !key_len; i++) {
        if (strncasecmp(head->bytes + i, name, sizeof name - 1)) continue;
        const char *p = head->bytes + i + sizeof name - 1, *end = head->bytes + head->len;
        while (p < end && *p == ' ') p++;
        while (p < end && *p != '\r' && *p != ' ' && key_len < 64) key[key_len++] = *p++;
    }
    if (!key_len) return 0;
    memcpy(key + key_len, guid, sizeof guid - 1);
    unsigned char digest[20];
    char accept[32];
    EVP_Digest(key, key_len + sizeof guid - 1, digest, NULL, EVP_sha1(), NULL);
    EVP_EncodeBlock((unsigned char *)accept, digest, sizeof digest);
    int n = snprintf(head->bytes, FLOOR_WS_HEAD_MAX,
                     "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     "Sec-WebSocket-Accept: %s\r\n\r\n",
                     accept);
    head->len = (size_t)n;
    return 1;
}

/* The whole frames that len more bytes complete, with *partial, the bytes of a frame begun before. */
static size_t floor_ws_frames(unsigned char *partial, size_t len) {
    size_t total = *partial + len;
    *partial = (unsigned char)(total % FLOOR_WS_FRAME_LEN);
    return total / FLOOR_WS_FRAME_LEN;
}

#endif
