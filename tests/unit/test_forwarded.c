/* test_forwarded.c — the client behind trusted proxies (src/xhttp/core/
 * forwarded.h): the right-most untrusted X-Forwarded-For entry, spread over
 * several fields; RFC 7239 Forwarded's for=; and every way a client could
 * try to name itself someone else: from an untrusted peer, left of an
 * untrusted hop, with garbage, with an empty entry. */
#include <arpa/inet.h>
#include <string.h>
#include <sys/socket.h>

#include "check.h"
#include "xhttp/core/forwarded.h"

static xNetAddr addr_of(const char *text, uint16_t port) {
    xNetAddr a = {.port = port, .local_port = 8080};
    if (inet_pton(AF_INET, text, a.bytes) == 1)
        a.family = AF_INET;
    else if (inet_pton(AF_INET6, text, a.bytes) == 1)
        a.family = AF_INET6;
    return a;
}

static xProxyTrust trust_of(const char *list) {
    xProxyTrust trust;
    char err[128];
    CHECK_MSG(xProxyTrustParse(&trust, list, err, sizeof err), "%s", err);
    return trust;
}

/* The client for fields (name, value pairs, NULL-ended) from peer, as text. */
static const char *client_of(const xProxyTrust *trust, const char *peer, const char *const *pairs,
                             uint16_t *port) {
    static char text[XNET_ADDR_TEXT];
    xHttpField fields[8];
    size_t n = 0;
    for (; pairs[2 * n]; n++) fields[n] = (xHttpField){xStrFromC(pairs[2 * n]), xStrFromC(pairs[2 * n + 1])};
    xNetAddr from = addr_of(peer, 40000), client;
    xHttpForwardedClient(fields, n, trust, &from, &client);
    CHECK_EQ_INT(client.local_port, 8080);
    if (port) *port = client.port;
    if (!xNetAddrFormat(&client, text, sizeof text)) return "?";
    return text;
}

#define CHECK_CLIENT(trust, peer, expected, ...)                                                             \
    do {                                                                                                     \
        const char *const pairs_[] = {__VA_ARGS__, NULL};                                                    \
        const char *got_ = client_of(trust, peer, pairs_, NULL);                                             \
        CHECK_MSG(strcmp(got_, expected) == 0, "%s, not %s", got_, expected);                                \
    } while (0)

static void test_the_right_most_untrusted_entry_is_the_client(void) {
    xProxyTrust t = trust_of("127.0.0.1, 10.0.0.0/8");
    CHECK_CLIENT(&t, "127.0.0.1", "203.0.113.7", "X-Forwarded-For", "203.0.113.7");
    /* A client's own entry to the left of what our proxies appended is skipped. */
    CHECK_CLIENT(&t, "127.0.0.1", "198.51.100.2", "X-Forwarded-For", "6.6.6.6, 198.51.100.2, 10.1.2.3");
    CHECK_CLIENT(&t, "127.0.0.1", "198.51.100.2", "x-forwarded-for", "6.6.6.6,198.51.100.2 ,\t10.1.2.3");
    /* Several fields are one list, in order. */
    CHECK_CLIENT(&t, "127.0.0.1", "198.51.100.2", "X-Forwarded-For", "6.6.6.6", "X-Forwarded-For",
                 "198.51.100.2", "Via", "1.1 lb", "X-Forwarded-For", "10.9.9.9");
    /* Every hop trusted: the left-most is the best known. */
    CHECK_CLIENT(&t, "127.0.0.1", "10.0.0.5", "X-Forwarded-For", "10.0.0.5, 10.0.0.6");
    /* IPv6, bracketed or not, with ports; IPv4-mapped is IPv4. */
    CHECK_CLIENT(&t, "127.0.0.1", "2001:db8::7", "X-Forwarded-For", "2001:db8::7");
    CHECK_CLIENT(&t, "127.0.0.1", "2001:db8::7", "X-Forwarded-For", "[2001:db8::7]:4711");
    CHECK_CLIENT(&t, "127.0.0.1", "192.0.2.1", "X-Forwarded-For", "::ffff:192.0.2.1");
    uint16_t port = 0;
    const char *const with_port[] = {"X-Forwarded-For", "192.0.2.1:5555", NULL};
    CHECK(strcmp(client_of(&t, "127.0.0.1", with_port, &port), "192.0.2.1") == 0);
    CHECK_EQ_INT(port, 5555);
    const char *const without_port[] = {"X-Forwarded-For", "192.0.2.1", NULL};
    client_of(&t, "127.0.0.1", without_port, &port);
    CHECK_EQ_INT(port, 0);
}

static void test_spoofing_is_ignored(void) {
    xProxyTrust t = trust_of("127.0.0.1, 10.0.0.0/8");
    /* An untrusted peer's fields are not read at all. */
    CHECK_CLIENT(&t, "192.0.2.50", "192.0.2.50", "X-Forwarded-For", "10.0.0.1");
    CHECK_CLIENT(&t, "192.0.2.50", "192.0.2.50", "Forwarded", "for=1.2.3.4");
    /* No list: no one is trusted. */
    CHECK_CLIENT(NULL, "127.0.0.1", "127.0.0.1", "X-Forwarded-For", "1.2.3.4");
    /* A client naming a trusted address for itself goes no further than the
     * untrusted hop that passed it on. */
    CHECK_CLIENT(&t, "127.0.0.1", "198.51.100.9", "X-Forwarded-For", "10.0.0.1, 198.51.100.9");
    /* Garbage, an obfuscated name or an empty entry stops the walk at the
     * hop before it: the trusted proxy that appended the one after it. */
    CHECK_CLIENT(&t, "127.0.0.1", "127.0.0.1", "X-Forwarded-For", "");
    CHECK_CLIENT(&t, "127.0.0.1", "127.0.0.1", "X-Forwarded-For", "evil.example");
    CHECK_CLIENT(&t, "127.0.0.1", "10.0.0.3", "X-Forwarded-For", "1.2.3.4, unknown, 10.0.0.3");
    CHECK_CLIENT(&t, "127.0.0.1", "10.0.0.3", "X-Forwarded-For", "1.2.3.4,, 10.0.0.3");
    CHECK_CLIENT(&t, "127.0.0.1", "127.0.0.1", "X-Forwarded-For", "1.2.3.4 10.0.0.3");
    CHECK_CLIENT(&t, "127.0.0.1", "127.0.0.1", "X-Forwarded-For", "1.2.3.4:99999");
    CHECK_CLIENT(&t, "127.0.0.1", "127.0.0.1", "X-Forwarded-For", "[2001:db8::1");
    CHECK_CLIENT(&t, "127.0.0.1", "127.0.0.1", "X-Forwarded-For", "1.2.3.4%00");
}

static void test_forwarded_for_when_there_is_no_x_forwarded_for(void) {
    xProxyTrust t = trust_of("127.0.0.1, 10.0.0.0/8");
    CHECK_CLIENT(&t, "127.0.0.1", "192.0.2.60", "Forwarded", "for=192.0.2.60;proto=http;by=203.0.113.43");
    CHECK_CLIENT(&t, "127.0.0.1", "2001:db8:cafe::17", "Forwarded",
                 "for=6.6.6.6, For=\"[2001:db8:cafe::17]:4711\", for=10.0.0.2;proto=https");
    CHECK_CLIENT(&t, "127.0.0.1", "10.0.0.2", "Forwarded", "for=_hidden, for=10.0.0.2");
    CHECK_CLIENT(&t, "127.0.0.1", "127.0.0.1", "Forwarded", "proto=https;by=10.0.0.1");
    /* X-Forwarded-For, where there is one, is the one read. */
    CHECK_CLIENT(&t, "127.0.0.1", "192.0.2.1", "Forwarded", "for=192.0.2.99", "X-Forwarded-For", "192.0.2.1");
}

int main(void) {
    RUN(test_the_right_most_untrusted_entry_is_the_client);
    RUN(test_spoofing_is_ignored);
    RUN(test_forwarded_for_when_there_is_no_x_forwarded_for);
    return CHECK_SUMMARY();
}
