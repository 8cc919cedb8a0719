/* The floor for reverse-proxy benchmarks (xkbench compare proxy): one epoll thread that reads a
 * request from a client, forwards its bytes unchanged on a kept-alive upstream connection, and relays
 * the answer's bytes back, parsing only what framing needs to find where each message ends (the end
 * of the head; Content-Length, chunked, or the close; HEAD, 1xx, 204 and 304 without a body). An
 * upstream connection goes back to an idle pool once both its request and its answer are whole, so
 * the floor pays what any proxy with upstream keep-alive pays: two exchanges per request. What a real
 * proxy costs beyond this is rewriting heads (hop-by-hop fields, X-Forwarded-*), limits, timeouts
 * and choosing an upstream.
 *
 * Usage: floor_proxy PORT UPSTREAM_IP:PORT. Bytes are forwarded as soon as they are read (a head only
 * once whole); a write the peer cannot take is kept and the side that sent it paused until it drains.
 * The next pipelined request waits, unread past the current one, until the answer is relayed. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

enum { MAX_FDS = 65536, READ_SIZE = 65536, MAX_HEAD = 32768, MAX_EVENTS = 256 };

/* Where a connection is in the message it is sending (requests on a client, answers on an upstream). */
enum phase {
    PHASE_HEAD,          /* gathering a head: nothing forwarded until it is whole */
    PHASE_LENGTH,        /* `remaining` body bytes by Content-Length */
    PHASE_CHUNK_SIZE,    /* a chunk's hex size */
    PHASE_CHUNK_EXT,     /* a chunk extension, up to its LF */
    PHASE_CHUNK_DATA,    /* `remaining` bytes of chunk data */
    PHASE_CHUNK_DATA_LF, /* the CRLF after a chunk's data */
    PHASE_TRAILER_START, /* the start of a trailer line, or the empty line that ends the message */
    PHASE_TRAILER,       /* a trailer field, up to its LF */
    PHASE_UNTIL_CLOSE,   /* an answer without length, or a tunnel after 101: everything until EOF */
    PHASE_DONE,          /* the message is whole; nothing more is read from this side for now */
};

struct buffer {
    char *bytes;
    size_t len;
};

struct conn {
    int fd;
    int is_upstream;
    struct conn *peer; /* the other side of the exchange in progress, or NULL */
    enum phase phase;
    uint64_t remaining;
    int request_is_head; /* upstream: the request was HEAD, so the answer has no body */
    int paused;          /* not read until the peer drains its output */
    int pool_index;      /* upstream: its place in the idle pool, or -1 */
    struct buffer in;    /* read, not yet forwarded: a partial head, or a pipelined next request */
    struct buffer out;   /* forwarded, not yet taken by the socket */
    struct conn *next_dead;
};

static int epfd;
static struct sockaddr_in upstream_addr;
static struct conn *idle_pool[MAX_FDS];
static int idle_count;
static char scratch[READ_SIZE];
static struct conn
    *dead; /* hung up on in this batch of events, freed after it: a later event may name them */

/* Reading unless paused, writing while output waits: called only when either changes. */
static void rewatch(struct conn *c) {
    struct epoll_event ev = {.events = (c->paused ? 0 : EPOLLIN) | (c->out.len ? EPOLLOUT : 0),
                             .data.ptr = c};
    epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

static void pool_remove(struct conn *up) {
    if (up->pool_index < 0) return;
    idle_pool[up->pool_index] = idle_pool[--idle_count];
    idle_pool[up->pool_index]->pool_index = up->pool_index;
    up->pool_index = -1;
}

static void hang_up(struct conn *c) {
    if (c->fd < 0) return;
    struct conn *peer = c->peer;
    pool_remove(c);
    close(c->fd); /* also takes it out of the epoll set */
    c->fd = -1, c->peer = NULL;
    c->next_dead = dead, dead = c;
    if (peer) {
        peer->peer = NULL;
        hang_up(peer); /* an exchange cut in the middle cannot be resumed on either side */
    }
}

static int append(struct buffer *b, const char *bytes, size_t len) {
    char *grown = realloc(b->bytes, b->len + len);
    if (!grown) return -1;
    memcpy(grown + b->len, bytes, len);
    b->bytes = grown, b->len += len;
    return 0;
}

static void consume(struct buffer *b, size_t len) {
    b->len -= len;
    if (b->len) {
        memmove(b->bytes, b->bytes + len, b->len);
    } else {
        free(b->bytes);
        b->bytes = NULL;
    }
}

/* Writes to dst what src forwards; what the socket does not take waits in dst->out, src paused. */
static int forward(struct conn *src, struct conn *dst, const char *bytes, size_t len) {
    if (!len) return 0;
    if (!dst->out.len) {
        ssize_t n = write(dst->fd, bytes, len);
        if (n < 0 && errno != EAGAIN) return -1;
        if (n == (ssize_t)len) return 0;
        if (n > 0) bytes += n, len -= (size_t)n;
        if (append(&dst->out, bytes, len)) return -1;
        rewatch(dst);
    } else if (append(&dst->out, bytes, len)) {
        return -1;
    }
    if (!src->paused) src->paused = 1, rewatch(src);
    return 0;
}

/* The value of the field `name` (with its colon) in head, or NULL; *len is the value's length. */
static const char *field(const char *head, size_t head_len, const char *name, size_t *len) {
    size_t name_len = strlen(name);
    const char *end = head + head_len;
    for (const char *line = memchr(head, '\n', head_len); line && line + 1 < end;
         line = memchr(line + 1, '\n', (size_t)(end - line - 1))) {
        const char *start = line + 1;
        if ((size_t)(end - start) > name_len && strncasecmp(start, name, name_len) == 0) {
            const char *value = start + name_len, *eol = memchr(value, '\n', (size_t)(end - value));
            while (value < eol && (*value == ' ' || *value == '\t')) value++;
            *len = (size_t)(eol - value);
            return value;
        }
    }
    return NULL;
}

static int says_chunked(const char *value, size_t len) {
    for (size_t i = 0; i + 7 <= len; i++)
        if (strncasecmp(value + i, "chunked", 7) == 0) return 1;
    return 0;
}

/* Sets c's phase for the body that follows a whole head; -1 if the head cannot be framed. */
static int frame_head(struct conn *c, const char *head, size_t len) {
    size_t value_len;
    const char *value;
    if (c->is_upstream) {
        if (len < 12 || memcmp(head, "HTTP/1.", 7) != 0) return -1;
        int status = atoi(head + 9);
        if (status == 101) {
            c->phase = PHASE_UNTIL_CLOSE;
            if (c->peer) c->peer->phase = PHASE_UNTIL_CLOSE; /* a tunnel both ways */
            return 0;
        }
        if (status >= 100 && status < 200) return 0; /* an interim answer: another head follows */
        if (c->request_is_head || status == 204 || status == 304) {
            c->phase = PHASE_DONE;
            return 0;
        }
    } else {
        c->phase = PHASE_DONE;
        if (len > 5 && memcmp(head, "HEAD ", 5) == 0) c->request_is_head = 1;
    }
    if ((value = field(head, len, "transfer-encoding:", &value_len)) && says_chunked(value, value_len)) {
        c->phase = PHASE_CHUNK_SIZE, c->remaining = 0;
    } else if ((value = field(head, len, "content-length:", &value_len))) {
        c->remaining = strtoull(value, NULL, 10);
        c->phase = c->remaining ? PHASE_LENGTH : PHASE_DONE;
    } else if (c->is_upstream) {
        c->phase = PHASE_UNTIL_CLOSE;
    }
    return 0;
}

/* How many of len bytes belong to the body c is sending, moving its phase along; PHASE_DONE once
 * its last byte is counted. Chunk data and Content-Length bodies are skipped, not looked at. */
static size_t frame_body(struct conn *c, const char *p, size_t len) {
    size_t i = 0;
    while (i < len && c->phase != PHASE_DONE) {
        char ch = p[i];
        switch (c->phase) {
        case PHASE_LENGTH:
        case PHASE_CHUNK_DATA: {
            size_t take = len - i < c->remaining ? len - i : (size_t)c->remaining;
            i += take, c->remaining -= take;
            if (!c->remaining) c->phase = c->phase == PHASE_LENGTH ? PHASE_DONE : PHASE_CHUNK_DATA_LF;
            continue;
        }
        case PHASE_UNTIL_CLOSE: return len;
        case PHASE_CHUNK_SIZE:
            if (ch >= '0' && ch <= '9')
                c->remaining = c->remaining * 16 + (uint64_t)(ch - '0');
            else if ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'f')
                c->remaining = c->remaining * 16 + (uint64_t)((ch | 0x20) - 'a' + 10);
            else if (ch == '\n')
                c->phase = c->remaining ? PHASE_CHUNK_DATA : PHASE_TRAILER_START;
            else if (ch != '\r')
                c->phase = PHASE_CHUNK_EXT;
            break;
        case PHASE_CHUNK_EXT:
            if (ch == '\n') c->phase = c->remaining ? PHASE_CHUNK_DATA : PHASE_TRAILER_START;
            break;
        case PHASE_CHUNK_DATA_LF:
            if (ch == '\n') c->phase = PHASE_CHUNK_SIZE, c->remaining = 0;
            break;
        case PHASE_TRAILER_START:
            if (ch == '\n')
                c->phase = PHASE_DONE;
            else if (ch != '\r')
                c->phase = PHASE_TRAILER;
            break;
        case PHASE_TRAILER:
            if (ch == '\n') c->phase = PHASE_TRAILER_START;
            break;
        default: break;
        }
        i++;
    }
    return i;
}

/* An idle upstream connection, or a new one (connected before it is used: loopback answers at once). */
static struct conn *take_upstream(void) {
    if (idle_count) {
        struct conn *up = idle_pool[idle_count - 1];
        pool_remove(up);
        return up;
    }
    int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return NULL;
    if (fd >= MAX_FDS || connect(fd, (struct sockaddr *)&upstream_addr, sizeof upstream_addr)) {
        close(fd);
        return NULL;
    }
    struct conn *up = calloc(1, sizeof *up);
    if (!up) {
        close(fd);
        return NULL;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, O_NONBLOCK);
    *up = (struct conn){.fd = fd, .is_upstream = 1, .pool_index = -1};
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = up};
    epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
    return up;
}

/* Once both the request and its answer are whole and sent, the upstream goes back to the pool and
 * the client is free for its next request. */
static void message_done(struct conn *c) {
    struct conn *client = c->is_upstream ? c->peer : c, *up = c->is_upstream ? c : c->peer;
    if (!client || !up || client->phase != PHASE_DONE || up->phase != PHASE_DONE || client->out.len ||
        up->out.len)
        return;
    client->peer = up->peer = NULL;
    client->phase = PHASE_HEAD, client->request_is_head = 0;
    up->phase = PHASE_HEAD, up->request_is_head = 0;
    up->pool_index = idle_count;
    idle_pool[idle_count++] = up;
}

static void process(struct conn *c);

/* A client whose exchange ended from the upstream's side goes on with what it sent after its
 * request (a pipelined next one), if anything. */
static void resume(struct conn *client) {
    if (client && client->fd >= 0 && !client->peer && client->in.len && !client->paused) process(client);
}

/* Forwards what of c->in (or, with nothing held, of bytes) belongs to the message in progress;
 * keeps the rest in c->in. Returns -1 when c (and its exchange) must be hung up on. */
static int relay(struct conn *c, const char *bytes, size_t len) {
    size_t done = 0;
    int from_held = bytes == c->in.bytes;
    while (done < len && c->phase != PHASE_DONE) {
        const char *p = bytes + done;
        size_t avail = len - done, take;
        if (c->phase == PHASE_HEAD) {
            const char *end = memmem(p, avail, "\r\n\r\n", 4);
            if (!end) {
                if (avail > MAX_HEAD) return -1;
                break;
            }
            size_t head_len = (size_t)(end + 4 - p);
            if (!c->is_upstream) {
                if (!(c->peer = take_upstream())) return -1;
                c->peer->peer = c;
            } else if (!c->peer) {
                return -1; /* an answer nobody asked for */
            }
            if (frame_head(c, p, head_len)) return -1;
            if (!c->is_upstream) c->peer->request_is_head = c->request_is_head;
            take = head_len + frame_body(c, p + head_len, avail - head_len);
        } else {
            take = frame_body(c, p, avail);
        }
        if (forward(c, c->peer, p, take)) return -1;
        done += take;
        if (c->phase == PHASE_DONE) message_done(c);
    }
    if (from_held) {
        consume(&c->in, done);
    } else if (done < len && append(&c->in, bytes + done, len - done)) {
        return -1;
    }
    return 0;
}

static void process(struct conn *c) {
    if (c->in.len && relay(c, c->in.bytes, c->in.len)) hang_up(c);
}

static void relay_read(struct conn *c, const char *bytes, size_t len) {
    struct conn *client = c->is_upstream ? c->peer : NULL;
    if (relay(c, bytes, len)) hang_up(c);
    resume(client);
}

/* Level-triggered: one read per wakeup. */
static void on_readable(struct conn *c) {
    if (c->phase == PHASE_DONE && c->in.len >= MAX_HEAD) { /* a pipelined request waits: stop reading */
        c->paused = 1, rewatch(c);
        return;
    }
    ssize_t n = read(c->fd, scratch, sizeof scratch);
    if (n <= 0) {
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
        struct conn *peer = c->peer;
        if (c->is_upstream && c->phase == PHASE_UNTIL_CLOSE && peer && !peer->out.len) {
            shutdown(peer->fd, SHUT_WR); /* the answer ends with the close: so does the client's */
        }
        hang_up(c);
        return;
    }
    if (c->is_upstream && !c->peer) { /* an idle upstream says something: it is closing, or confused */
        hang_up(c);
        return;
    }
    if (!c->in.len) {
        relay_read(c, scratch, (size_t)n);
    } else if (append(&c->in, scratch, (size_t)n)) {
        hang_up(c);
    } else {
        relay_read(c, c->in.bytes, c->in.len);
    }
}

/* c's output drained: the side that was paused for it reads again. */
static void on_writable(struct conn *c) {
    ssize_t n = write(c->fd, c->out.bytes, c->out.len);
    if (n < 0) {
        if (errno != EAGAIN && errno != EINTR) hang_up(c);
        return;
    }
    consume(&c->out, (size_t)n);
    if (c->out.len) return;
    rewatch(c);
    struct conn *src = c->peer;
    if (!src) return;
    if (src->paused) src->paused = 0, rewatch(src);
    message_done(c);
    resume(c->is_upstream ? src : c);
}

/* Nothing is owed at a stop: SIGTERM and SIGINT end it with status 0, as the test harness expects. */
static void on_stop(int sig) { _exit(0); }

int main(int argc, char **argv) {
    char host[64];
    unsigned upstream_port;
    if (argc != 3 || sscanf(argv[2], "%63[^:]:%u", host, &upstream_port) != 2 ||
        inet_pton(AF_INET, host, &upstream_addr.sin_addr) != 1) {
        fprintf(stderr, "usage: %s PORT UPSTREAM_IP:PORT\n", argv[0]);
        return 2;
    }
    upstream_addr.sin_family = AF_INET, upstream_addr.sin_port = htons((uint16_t)upstream_port);
    signal(SIGPIPE, SIG_IGN);
    int one = 1, client;
    epfd = epoll_create1(0);
    int listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1]))};
    socklen_t addr_len = sizeof addr;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(listener, (struct sockaddr *)&addr, sizeof addr) || listen(listener, SOMAXCONN) ||
        getsockname(listener, (struct sockaddr *)&addr, &addr_len)) {
        perror("listen");
        return 1;
    }
    signal(SIGTERM, on_stop);
    signal(SIGINT, on_stop);
    printf("listening on 0.0.0.0:%u (1 worker)\n", ntohs(addr.sin_port)); /* the test harness's format */
    fflush(stdout);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL}, events[MAX_EVENTS];
    epoll_ctl(epfd, EPOLL_CTL_ADD, listener, &ev);
    for (;;) {
        int ready = epoll_wait(epfd, events, MAX_EVENTS, -1);
        for (int i = 0; i < ready; i++) {
            struct conn *c = events[i].data.ptr;
            if (c) {
                if (c->fd < 0) continue; /* hung up on earlier in this batch */
                if (events[i].events & EPOLLOUT)
                    on_writable(c);
                else
                    on_readable(c);
                continue;
            }
            while ((client = accept4(listener, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                struct conn *fresh = client < MAX_FDS ? calloc(1, sizeof *fresh) : NULL;
                if (!fresh) {
                    close(client);
                    continue;
                }
                setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                *fresh = (struct conn){.fd = client, .pool_index = -1};
                ev = (struct epoll_event){.events = EPOLLIN, .data.ptr = fresh};
                epoll_ctl(epfd, EPOLL_CTL_ADD, client, &ev);
            }
        }
        while (dead) {
            struct conn *c = dead;
            dead = c->next_dead;
            free(c->in.bytes);
            free(c->out.bytes);
            free(c);
        }
    }
}
