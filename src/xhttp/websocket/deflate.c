/* deflate.c — permessage-deflate on zlib (deflate.h). */
#include "xhttp/websocket/deflate.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

typedef struct xWsBuf {
    char *data;
    size_t cap;
} xWsBuf;

struct xWsDeflate {
    xWsDeflateParams params;
    int level, mem_level;
    bool deflating, inflating; /* streams set up */
    z_stream def, inf;
    xWsBuf zipped, inflated; /* the last output of each: a message being
                                inflated may be echoed, compressed, at once */
};

/* ---- Negotiation ---- */

static xStr trim(const char *p, size_t n) {
    while (n && (*p == ' ' || *p == '\t')) p++, n--;
    while (n && (p[n - 1] == ' ' || p[n - 1] == '\t')) n--;
    return (xStr){p, n};
}

static bool same(xStr s, const char *c) { return s.len == strlen(c) && strncasecmp(s.data, c, s.len) == 0; }

/* A window-bits value, maybe quoted; -1 when not 8..15. */
static int window_bits(xStr v) {
    if (v.len >= 2 && v.data[0] == '"' && v.data[v.len - 1] == '"') v = (xStr){v.data + 1, v.len - 2};
    if (v.len == 1 && v.data[0] >= '8' && v.data[0] <= '9') return v.data[0] - '0';
    if (v.len == 2 && v.data[0] == '1' && v.data[1] >= '0' && v.data[1] <= '5') return 10 + v.data[1] - '0';
    return -1;
}

/* One offer: "permessage-deflate; p; p=v". False when it cannot be taken. */
static bool take_offer(xStr offer, int max_bits, xWsDeflateParams *pp, char *out, size_t cap) {
    const char *p = offer.data, *end = offer.data + offer.len;
    const char *semi = memchr(p, ';', offer.len);
    if (!same(trim(p, (semi ? semi : end) - p), "permessage-deflate")) return false;
    int server_bits = 15, client_bits = 0; /* 0: the client did not say it can limit */
    bool server_bits_asked = false, seen[4] = {false};
    xWsDeflateParams params = {0};
    for (p = semi; p && p < end;) {
        p++;
        const char *next = memchr(p, ';', end - p);
        xStr item = trim(p, (next ? next : end) - p);
        p = next;
        const char *eq = memchr(item.data, '=', item.len);
        xStr name = trim(item.data, eq ? (size_t)(eq - item.data) : item.len);
        xStr value = eq ? trim(eq + 1, item.data + item.len - eq - 1) : (xStr){NULL, 0};
        int which = same(name, "server_no_context_takeover")   ? 0
                    : same(name, "client_no_context_takeover") ? 1
                    : same(name, "server_max_window_bits")     ? 2
                    : same(name, "client_max_window_bits")     ? 3
                                                               : -1;
        if (which < 0 || seen[which]) return false;
        seen[which] = true;
        if (which < 2 && eq) return false;
        if (which == 0) params.server_no_takeover = true;
        if (which == 1) params.client_no_takeover = true;
        if (which == 2) {
            server_bits = window_bits(value);
            server_bits_asked = true;
            if (server_bits < 0) return false;
        }
        if (which == 3) {
            client_bits = eq ? window_bits(value) : 15;
            if (client_bits < 0) return false;
        }
    }
    /* zlib cannot make a raw stream with a 256-byte window (it uses 512). */
    if (server_bits < 9) return false;
    params.server_window_bits = server_bits < max_bits ? server_bits : max_bits;
    if (params.server_window_bits < 9) params.server_window_bits = 9;
    if (client_bits == 0 && max_bits < 15) return false; /* it would use 15 */
    params.client_window_bits = client_bits == 0 ? 15 : client_bits < max_bits ? client_bits : max_bits;
    int n = snprintf(out, cap, "permessage-deflate");
    if (params.server_no_takeover) n += snprintf(out + n, cap - n, "; server_no_context_takeover");
    if (params.client_no_takeover) n += snprintf(out + n, cap - n, "; client_no_context_takeover");
    if (server_bits_asked || params.server_window_bits < 15)
        n += snprintf(out + n, cap - n, "; server_max_window_bits=%d", params.server_window_bits);
    if (client_bits)
        n += snprintf(out + n, cap - n, "; client_max_window_bits=%d", params.client_window_bits);
    if ((size_t)n >= cap) return false;
    *pp = params;
    return true;
}

bool xWsDeflateNegotiate(xStr extensions, int max_bits, xWsDeflateParams *params, char *out, size_t cap) {
    const char *p = extensions.data, *end = extensions.data + extensions.len;
    while (p && p < end) {
        const char *comma = memchr(p, ',', end - p);
        if (take_offer(trim(p, (comma ? comma : end) - p), max_bits, params, out, cap)) return true;
        p = comma ? comma + 1 : NULL;
    }
    return false;
}

/* ---- Compressing and inflating ---- */

xWsDeflate *xWsDeflateCreate(const xWsDeflateParams *params, int level, int mem_level) {
    xWsDeflate *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->params = *params;
    d->level = level;
    d->mem_level = mem_level;
    return d;
}

void xWsDeflateDestroy(xWsDeflate *d) {
    if (!d) return;
    if (d->deflating) deflateEnd(&d->def);
    if (d->inflating) inflateEnd(&d->inf);
    free(d->zipped.data);
    free(d->inflated.data);
    free(d);
}

static bool grow(xWsBuf *b, size_t need) {
    if (need <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < need) cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) return false;
    b->data = p;
    b->cap = cap;
    return true;
}

bool xWsDeflateCompress(xWsDeflate *d, const void *data, size_t len, const char **out, size_t *out_len) {
    if (!d->deflating) {
        if (deflateInit2(&d->def, d->level, Z_DEFLATED, -d->params.server_window_bits, d->mem_level,
                         Z_DEFAULT_STRATEGY) != Z_OK)
            return false;
        d->deflating = true;
    }
    size_t bound = deflateBound(&d->def, len) + 16;
    if (!grow(&d->zipped, bound)) return false;
    d->def.next_in = (Bytef *)data;
    d->def.avail_in = (uInt)len;
    d->def.next_out = (Bytef *)d->zipped.data;
    d->def.avail_out = (uInt)d->zipped.cap;
    if (deflate(&d->def, Z_SYNC_FLUSH) != Z_OK || d->def.avail_in != 0) return false;
    size_t n = d->zipped.cap - d->def.avail_out;
    if (n < 4) return false;
    *out = d->zipped.data;
    *out_len = n - 4; /* the sync flush's empty block 00 00 ff ff is implied (§7.2.1) */
    if (d->params.server_no_takeover) deflateReset(&d->def);
    return true;
}

int xWsDeflateInflate(xWsDeflate *d, const char *data, size_t len, size_t max, char **out, size_t *out_len) {
    static const uint8_t tail[4] = {0x00, 0x00, 0xff, 0xff};
    if (!d->inflating) {
        if (inflateInit2(&d->inf, -d->params.client_window_bits) != Z_OK) return 1011;
        d->inflating = true;
    }
    xWsBuf *b = &d->inflated;
    size_t n = 0;
    for (int part = 0; part < 2; part++) {
        d->inf.next_in = part ? (Bytef *)tail : (Bytef *)data;
        d->inf.avail_in = part ? 4 : (uInt)len;
        while (d->inf.avail_in > 0) {
            if (n == b->cap && !grow(b, n + 1 > max ? max + 1 : n * 2 + 1024)) return 1011;
            size_t room = (b->cap < max + 1 ? b->cap : max + 1) - n;
            d->inf.next_out = (Bytef *)b->data + n;
            d->inf.avail_out = (uInt)room;
            int rc = inflate(&d->inf, Z_SYNC_FLUSH);
            n += room - d->inf.avail_out;
            if (n > max) return 1009;
            if (rc == Z_BUF_ERROR && d->inf.avail_out > 0) break;
            if (rc != Z_OK && rc != Z_BUF_ERROR) return 1007;
        }
    }
    if (d->params.client_no_takeover) inflateReset(&d->inf);
    *out = b->data;
    *out_len = n;
    return 0;
}
