/* fuzz_peer.h — what the harnesses that play a client's server share
 * (fuzz_h2_upstream, fuzz_pg_replies): a loopback listener the client under
 * test connects to, its one connection accepted, what the client writes
 * gathered, the harness's bytes written in pieces with a turn of the
 * client's loop after each, and connections beyond the first refused. */
#ifndef XK_TESTS_FUZZ_PEER_H
#define XK_TESTS_FUZZ_PEER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <xbase/event.h>

#define FUZZ_PEER_SETTLE_TURNS 256 /* loop turns allowed for the client to act */

/* Set up by the harness: {.loop, .listener, .fd = -1} and its choices. */
typedef struct FuzzPeer {
    xEventLoop *loop; /* the client's: turned between the peer's reads and writes */
    int listener;
    int fd;       /* the client's connection: -1 before it comes and once closed */
    uint8_t *out; /* what the client wrote */
    size_t len, cap;
    bool eof;                 /* the client closed its end */
    bool accepted;            /* the first connection came: any other is refused */
    bool nodelay;             /* each piece leaves at once (TCP_NODELAY), not held by Nagle */
    bool stop_writing_at_eof; /* writes end once the client has closed, not at the first error */
} FuzzPeer;

/* A listener on a loopback port (non-blocking); *port gets its number. */
int fuzzPeerListen(uint16_t *port);

/* Turns the loop until the client connects, then accepts it; what names the
 * client in the failure. */
void fuzzPeerAccept(FuzzPeer *p, const char *what);

/* One turn of the loop, then what the client wrote is read and any further
 * connection (a retry) accepted and closed at once. */
void fuzzPeerTurn(FuzzPeer *p);

/* Writes all of data, turning the loop while the socket is full (the client
 * reads as it goes; one that stopped has closed). */
void fuzzPeerWrite(FuzzPeer *p, const uint8_t *data, size_t len);

/* Writes data in pieces of piece bytes, each followed by a turn, until the
 * client closes. */
void fuzzPeerWritePieces(FuzzPeer *p, const uint8_t *data, size_t len, size_t piece);

/* Closes the client's connection (the peer goes); turns go on. */
void fuzzPeerClose(FuzzPeer *p);

/* Frees what was gathered; the connection must be closed. */
void fuzzPeerFree(FuzzPeer *p);

#endif
