/* proxy.h — the PROXY protocol (HAProxy's proxy-protocol.txt, versions 1 and
 * 2) on accepted sockets: the header a load balancer sends before anything
 * else to say which client it is passing on, the networks trusted to send it,
 * and the wait for it before a connection is made. No HTTP, no TLS: the
 * header is read off the socket exactly, so whatever follows (a ClientHello,
 * a request) is still in the socket for the protocol that takes it. From an
 * untrusted network nothing is read here: a PROXY header there is refused by
 * the protocol it reaches (HTTP/1.1's 400, TLS's plaintext refusal, HTTP/2's
 * GOAWAY), never taken as an address. */
#ifndef XNET_PROXY_H
#define XNET_PROXY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <xbase/event.h>

#include "xnet/address.h"

/* ---- The header ---- */

/** v1's longest line, "PROXY UNKNOWN" with two IPv6 addresses and ports and
 *  its CRLF (the spec's 107 bytes). */
#define XPROXY_V1_MAX 107
/** v2's fixed part: the 12-byte signature, version and command, family and
 *  transport, and the length of what follows. */
#define XPROXY_V2_FIXED 16
/** The most v2 may carry after its fixed part here: the addresses (36 bytes
 *  for IPv6) and TLVs, which are skipped. Load balancers send a few dozen
 *  bytes of TLVs; a longer header is refused rather than buffered. */
#define XPROXY_V2_MAX_BODY 512
/** The most bytes a header may take: what a reader must be able to hold. */
#define XPROXY_MAX (XPROXY_V2_FIXED + XPROXY_V2_MAX_BODY)

typedef enum xProxyVerdict {
    XPROXY_MORE,      /* a header may still come: too few bytes to say */
    XPROXY_OK,        /* a whole, valid header of .len bytes */
    XPROXY_NONE,      /* the bytes start with neither version's signature */
    XPROXY_MALFORMED, /* a header, but not a valid one (.error says why) */
} xProxyVerdict;

typedef struct xProxyHeader {
    size_t len;       /* bytes the header takes (XPROXY_OK) */
    int version;      /* 1 or 2 */
    bool has_address; /* false: LOCAL, UNKNOWN, UNSPEC or a family we do not
                         carry (UNIX, datagrams): the connection's own address
                         stands */
    xNetAddr source;  /* the client's address and port (has_address) */
    uint16_t destination_port;
    const char *error; /* XPROXY_MALFORMED: why, in words */
} xProxyHeader;

/** Reads a header from the start of data (len bytes, all that has arrived).
 *  Never reads past len; XPROXY_MORE until the header is whole, or until
 *  the bytes cannot start one (XPROXY_NONE) or cannot be a valid one. */
xProxyVerdict xProxyParse(const uint8_t *data, size_t len, xProxyHeader *out);

/** Room enough for any header xProxyWrite makes (v2 with IPv6: 52 bytes;
 *  v1's longest line: 104). */
#define XPROXY_WRITE_MAX 108

/** Writes a version (1 or 2) header saying a TCP connection came from
 *  source to destination (both family AF_INET or AF_INET6; an IPv4 one
 *  beside an IPv6 one is written IPv4-mapped): "PROXY UNKNOWN" (v1) or
 *  LOCAL (v2) when source's family is 0. Returns its length (at most
 *  XPROXY_WRITE_MAX), 0 for another version. */
size_t xProxyWrite(int version, const xNetAddr *source, const xNetAddr *destination, uint8_t *out);

/* ---- Trusted networks ---- */

#define XPROXY_MAX_NETWORKS 32

typedef struct xProxyNetwork {
    uint8_t family; /* AF_INET or AF_INET6 */
    uint8_t prefix; /* bits that must match */
    uint8_t bytes[16];
} xProxyNetwork;

typedef struct xProxyTrust {
    size_t count;
    xProxyNetwork networks[XPROXY_MAX_NETWORKS];
} xProxyTrust;

/** Parses a list of networks, "127.0.0.0/8, 10.1.0.0/16 ::1/128" (commas or
 *  spaces between; an address alone is one host). false with words in err
 *  for anything else, including bits set past a prefix (a typo, most likely)
 *  and an empty list. */
bool xProxyTrustParse(xProxyTrust *trust, const char *list, char *err, size_t err_len);

/** Whether addr (as accept gave it; IPv4-mapped IPv6 already IPv4) is in one
 *  of trust's networks. */
bool xProxyTrusted(const xProxyTrust *trust, const xNetAddr *addr);

/* ---- Waiting for the header on an accepted socket ---- */

/** Called with a socket whose header has been read (or which was not to send
 *  one): addr is the client's, from the header where it carried one; tag is
 *  what xProxyWaitStart was given. The socket is the callee's. */
typedef void (*xProxyAdmitFn)(void *arg, unsigned tag, int fd, const xNetAddr *addr);

typedef struct xProxyWait xProxyWait;

/* A worker's sockets from trusted networks waiting for their header. */
typedef struct xProxyWaits {
    xEventLoop *loop;
    uint32_t timeout_ms; /* the header timeout: a slow sender is closed */
    xProxyAdmitFn admit;
    void *arg;
    xProxyWait *head;
    size_t count; /* sockets waiting: they count against max_connections */
} xProxyWaits;

void xProxyWaitsInit(xProxyWaits *waits, xEventLoop *loop, uint32_t timeout_ms, xProxyAdmitFn admit,
                     void *arg);

/** Takes the accepted socket fd, from a trusted network (addr): it must open
 *  with a valid header, which is read off it, and then admit gets it
 *  (perhaps at once, within this call). No header, a malformed one, an end
 *  before it is whole or the header timeout passing first close it. */
void xProxyWaitStart(xProxyWaits *waits, int fd, const xNetAddr *addr, unsigned tag);

/** Closes every socket still waiting (the worker stops). */
void xProxyWaitsCloseAll(xProxyWaits *waits);

#endif
