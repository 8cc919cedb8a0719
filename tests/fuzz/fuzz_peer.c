/* fuzz_peer.c — the server end the client-side harnesses play (fuzz_peer.h). */
#define _GNU_SOURCE /* accept4 */
#include "fuzz_peer.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_check.h"
#include "worker.h"

int fuzzPeerListen(uint16_t *port) {
    int listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof addr;
    FUZZ_ASSERT(listener >= 0 && bind(listener, (struct sockaddr *)&addr, sizeof addr) == 0 &&
                    listen(listener, 8) == 0 && getsockname(listener, (struct sockaddr *)&addr, &len) == 0,
                "no listener: %s", strerror(errno));
    *port = ntohs(addr.sin_port);
    return listener;
}

void fuzzPeerAccept(FuzzPeer *p, const char *what) {
    for (int t = 0; t < FUZZ_PEER_SETTLE_TURNS && p->fd < 0; t++) {
        xTestTurn(p->loop);
        p->fd = accept4(p->listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    }
    FUZZ_ASSERT(p->fd >= 0, "%s never connected", what);
    p->accepted = true;
    int one = 1;
    if (p->nodelay) setsockopt(p->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void read_client(FuzzPeer *p) {
    while (!p->eof) {
        if (p->cap - p->len < 65536) {
            p->cap = p->cap * 2 + 65536;
            p->out = realloc(p->out, p->cap);
            FUZZ_ASSERT(p->out != NULL, "out of memory");
        }
        ssize_t n = recv(p->fd, p->out + p->len, p->cap - p->len, 0);
        if (n > 0) {
            p->len += (size_t)n;
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            p->eof = true;
        } else {
            return;
        }
    }
}

void fuzzPeerTurn(FuzzPeer *p) {
    xTestTurn(p->loop);
    if (p->fd >= 0) read_client(p);
    /* The client under test never reconnects within an input, unless it
     * retries a refused request: the upstream is gone by then. */
    if (!p->accepted) return;
    for (int fd; (fd = accept4(p->listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0;) close(fd);
}

void fuzzPeerWrite(FuzzPeer *p, const uint8_t *data, size_t len) {
    for (int stuck = 0; len && stuck < FUZZ_PEER_SETTLE_TURNS && !(p->stop_writing_at_eof && p->eof);) {
        ssize_t n = send(p->fd, data, len, MSG_NOSIGNAL);
        if (n > 0) {
            data += n, len -= (size_t)n, stuck = 0;
        } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
            return; /* the client closed */
        } else {
            stuck++;
        }
        fuzzPeerTurn(p);
    }
}

void fuzzPeerWritePieces(FuzzPeer *p, const uint8_t *data, size_t len, size_t piece) {
    for (size_t at = 0; at < len && !p->eof;) {
        size_t k = len - at < piece ? len - at : piece;
        fuzzPeerWrite(p, data + at, k);
        at += k;
        fuzzPeerTurn(p);
    }
}

void fuzzPeerClose(FuzzPeer *p) {
    close(p->fd);
    p->fd = -1;
}

void fuzzPeerFree(FuzzPeer *p) {
    free(p->out);
    p->out = NULL;
    p->len = p->cap = 0;
}
