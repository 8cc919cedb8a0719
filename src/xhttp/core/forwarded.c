/* forwarded.c — the client behind trusted proxies (forwarded.h). */
#include "xhttp/core/forwarded.h"

#include <arpa/inet.h>
#include <string.h>
#include <sys/socket.h>

#include "xhttp/core/tokens.h"

static xStr trim(xStr s) {
    while (s.len && (s.data[0] == ' ' || s.data[0] == '\t')) s.data++, s.len--;
    while (s.len && (s.data[s.len - 1] == ' ' || s.data[s.len - 1] == '\t')) s.len--;
    return s;
}

/* Takes the last comma-separated element off *list; false when none is left. */
static bool pop_last(xStr *list, xStr *element) {
    if (list->len == 0) return false;
    size_t i = list->len;
    while (i > 0 && list->data[i - 1] != ',') i--;
    *element = trim((xStr){list->data + i, list->len - i});
    list->len = i ? i - 1 : 0;
    return true;
}

static bool parse_port(xStr s, uint16_t *port) {
    if (s.len == 0 || s.len > 5) return false;
    unsigned value = 0;
    for (size_t i = 0; i < s.len; i++) {
        if (s.data[i] < '0' || s.data[i] > '9') return false;
        value = value * 10 + (unsigned)(s.data[i] - '0');
    }
    if (value > 65535) return false;
    *port = (uint16_t)value;
    return true;
}

/* "192.0.2.7", "192.0.2.7:80", "2001:db8::1", "[2001:db8::1]" or
 * "[2001:db8::1]:80" as an address; false for anything else. */
static bool parse_node(xStr s, xNetAddr *addr) {
    char text[XNET_ADDR_TEXT];
    xStr host = s;
    uint16_t port = 0;
    if (s.len && s.data[0] == '[') {
        const char *close = memchr(s.data, ']', s.len);
        if (!close) return false;
        host = (xStr){s.data + 1, (size_t)(close - s.data) - 1};
        xStr rest = {close + 1, s.len - (size_t)(close + 1 - s.data)};
        if (rest.len && (rest.data[0] != ':' || !parse_port((xStr){rest.data + 1, rest.len - 1}, &port)))
            return false;
    } else {
        const char *colon = memchr(s.data, ':', s.len);
        /* One colon: IPv4 with a port; more: IPv6 without brackets. */
        if (colon && !memchr(colon + 1, ':', s.len - (size_t)(colon + 1 - s.data))) {
            host = (xStr){s.data, (size_t)(colon - s.data)};
            if (!parse_port((xStr){colon + 1, s.len - host.len - 1}, &port)) return false;
        }
    }
    if (host.len == 0 || host.len >= sizeof text) return false;
    memcpy(text, host.data, host.len);
    text[host.len] = '\0';
    uint8_t bytes[16];
    int family = memchr(text, ':', host.len) ? AF_INET6 : AF_INET;
    if (inet_pton(family, text, bytes) != 1) return false;
    memset(addr->bytes, 0, sizeof addr->bytes);
    if (family == AF_INET6 && memcmp(bytes, "\0\0\0\0\0\0\0\0\0\0\xff\xff", 12) == 0) {
        family = AF_INET; /* IPv4-mapped, as accept gives it for a dual-stack listener */
        memcpy(addr->bytes, bytes + 12, 4);
    } else {
        memcpy(addr->bytes, bytes, family == AF_INET ? 4 : 16);
    }
    addr->family = (uint8_t)family;
    addr->port = port;
    return true;
}

/* Forwarded's element "for=...;proto=...": its for= node, unquoted. */
static bool forwarded_for(xStr element, xStr *node) {
    while (element.len) {
        const char *semi = memchr(element.data, ';', element.len);
        size_t len = semi ? (size_t)(semi - element.data) : element.len;
        xStr pair = trim((xStr){element.data, len});
        if (pair.len > 4 && xHttpNameEquals((xStr){pair.data, 4}, "for=")) {
            *node = (xStr){pair.data + 4, pair.len - 4};
            if (node->len >= 2 && node->data[0] == '"' && node->data[node->len - 1] == '"')
                *node = (xStr){node->data + 1, node->len - 2};
            return true;
        }
        element = semi ? (xStr){semi + 1, element.len - len - 1} : (xStr){NULL, 0};
    }
    return false;
}

void xHttpForwardedClient(const xHttpField *fields, size_t num_fields, const xProxyTrust *trust,
                          const xNetAddr *peer, xNetAddr *client) {
    *client = *peer;
    if (!trust || !xProxyTrusted(trust, peer)) return;
    bool has_xff = false;
    for (size_t i = 0; i < num_fields && !has_xff; i++)
        has_xff = xHttpNameEquals(fields[i].name, "x-forwarded-for");
    const char *name = has_xff ? "x-forwarded-for" : "forwarded";
    for (size_t i = num_fields; i-- > 0;) {
        if (!xHttpNameEquals(fields[i].name, name)) continue;
        xStr list = fields[i].value, element;
        while (pop_last(&list, &element)) {
            xStr node = element;
            xNetAddr hop;
            if ((!has_xff && !forwarded_for(element, &node)) || !parse_node(node, &hop)) return;
            hop.local_port = peer->local_port;
            *client = hop;
            if (!xProxyTrusted(trust, &hop)) return;
        }
    }
}
