/* fuzz_forwarded.c — the client behind trusted proxies (src/xhttp/core/
 * forwarded.h) on arbitrary field values, as a client (or a proxy that
 * passes anything on) could send them.
 *
 * Byte 0 picks the peer (bits 0-1: 127.0.0.1 or ::1, which the list trusts,
 * or 192.0.2.1 and 2001:db8::1, which it does not) and, bit by bit from bit
 * 2, whether each of the first six fields is X-Forwarded-For or Forwarded;
 * the rest, split at newlines, are the fields' values (up to eight), each in
 * its own heap block so a read past one is caught. Checked:
 *   - an untrusted peer is the client, whatever the fields say;
 *   - the client is an IPv4 or IPv6 address that formats, with the peer's
 *     local port;
 *   - an answer other than the peer is an address some value holds: its
 *     text, or the text of its bytes as IPv4 in the IPv4-mapped form;
 *   - the same fields give the same client again. */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "fuzz_check.h"
#include "xhttp/core/forwarded.h"

#define MAX_FIELDS 8

static xNetAddr peer_of(int which) {
    static const char *const peers[] = {"127.0.0.1", "::1", "192.0.2.1", "2001:db8::1"};
    xNetAddr a = {.port = 1234, .local_port = 8080};
    a.family = strchr(peers[which], ':') ? AF_INET6 : AF_INET;
    inet_pton(a.family, peers[which], a.bytes);
    return a;
}

/* Whether some value names addr: an address parsed from a value differs in
 * case and zeros from its text, so the values are searched for hex digits
 * alike; good enough to tell an address made up from one read. */
static bool some_value_holds(const xHttpField *fields, size_t n, const xNetAddr *addr) {
    uint8_t probe[16];
    for (size_t i = 0; i < n; i++) {
        const xStr v = fields[i].value;
        for (size_t start = 0; start < v.len; start++) {
            for (size_t len = 1; len < XNET_ADDR_TEXT && start + len <= v.len; len++) {
                char text[XNET_ADDR_TEXT];
                memcpy(text, v.data + start, len);
                text[len] = '\0';
                int family = strchr(text, ':') ? AF_INET6 : AF_INET;
                if (inet_pton(family, text, probe) != 1) continue;
                if (family == addr->family && memcmp(probe, addr->bytes, family == AF_INET ? 4 : 16) == 0)
                    return true;
                if (family == AF_INET6 && addr->family == AF_INET && memcmp(probe + 12, addr->bytes, 4) == 0)
                    return true;
            }
        }
    }
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    static xProxyTrust trust;
    static bool ready;
    if (!ready) {
        char err[64];
        FUZZ_ASSERT(xProxyTrustParse(&trust, "127.0.0.0/8, ::1, 10.0.0.0/8, fd00::/8", err, sizeof err), "%s",
                    err);
        ready = true;
    }
    xNetAddr peer = peer_of(data[0] & 3);
    xHttpField fields[MAX_FIELDS];
    char *copies[MAX_FIELDS];
    size_t n = 0, pos = 1;
    while (pos <= size && n < MAX_FIELDS) {
        const uint8_t *end = memchr(data + pos, '\n', size - pos);
        size_t len = end ? (size_t)(end - (data + pos)) : size - pos;
        copies[n] = malloc(len ? len : 1);
        FUZZ_ASSERT(copies[n], "malloc");
        memcpy(copies[n], data + pos, len);
        bool xff = n >= 6 || (data[0] >> (2 + n) & 1);
        fields[n] = (xHttpField){xStrFromC(xff ? "X-Forwarded-For" : "Forwarded"), (xStr){copies[n], len}};
        n++;
        pos += len + 1;
    }
    xNetAddr client, again;
    xHttpForwardedClient(fields, n, &trust, &peer, &client);
    xHttpForwardedClient(fields, n, &trust, &peer, &again);
    FUZZ_ASSERT(memcmp(&client, &again, sizeof client) == 0, "two answers for the same fields");
    FUZZ_ASSERT(client.local_port == peer.local_port, "local port %u", client.local_port);
    char text[XNET_ADDR_TEXT];
    FUZZ_ASSERT((client.family == AF_INET || client.family == AF_INET6) &&
                    xNetAddrFormat(&client, text, sizeof text),
                "family %u", client.family);
    bool is_peer = memcmp(&client, &peer, sizeof client) == 0;
    if (!xProxyTrusted(&trust, &peer)) FUZZ_ASSERT(is_peer, "an untrusted peer was taken for %s", text);
    if (!is_peer) FUZZ_ASSERT(some_value_holds(fields, n, &client), "%s is in no value", text);
    for (size_t i = 0; i < n; i++) free(copies[i]);
    return 0;
}
