/* The floor for HTTP/1.1 benchmarks: one epoll thread that parses nothing. It counts "\r\n\r\n"
 * and answers each with xKit's own pong (floor_response.h), so what a real server costs beyond this
 * is being HTTP. With --websocket it is the floor for WebSocket instead (floor_websocket.h): a 101 to
 * the handshake, then an echo per "hello" frame of ws_load -raw, counted by length. With --bodies it
 * answers a request only once its Content-Length body has come, as an application would: the upstream
 * of xkbench compare proxy's uploads (a proxy may not reuse a connection answered mid-upload); there a
 * GET of /big is answered with BIG_BODY bytes instead (compare proxy's get256k), what the socket does
 * not take sent as it makes room. */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "floor_response.h"
#include "floor_websocket.h"

enum { MAX_FDS = 65536, READ_SIZE = 16384 };
#define RESPONSE floor_response
#define RESPONSE_LEN FLOOR_RESPONSE_LEN
static unsigned char matched[MAX_FDS];             /* terminator bytes seen at the end of the last read, or
                                                      (--websocket) bytes of a frame begun */
static char replies[READ_SIZE / 4 * RESPONSE_LEN]; /* worst case: a terminator every 4 bytes */
static int websocket;                              /* --websocket: floor_websocket.h's mode */
static struct floor_ws_head *heads[MAX_FDS];       /* --websocket: a handshake not yet whole */
static char echoes[(READ_SIZE / FLOOR_WS_FRAME_LEN + 1) * FLOOR_WS_ECHO_LEN]; /* as many as one read owes */
static int bodies; /* --bodies: each request's Content-Length body is read before it is answered */
enum { HEAD_MAX = 8192 };
struct head_text { /* --bodies: the head being read, to find its Content-Length */
    size_t len;
    unsigned long long body_left; /* of the body after it */
    char bytes[HEAD_MAX];
};
static struct head_text *head_texts[MAX_FDS];
enum { BIG_BODY = 256 << 10 };
static char big_answer[128 + BIG_BODY]; /* --bodies: the head and body of GET /big's answer */
static size_t big_answer_len;
static unsigned char bigs[MAX_FDS]; /* --bodies: GET /big requests among those a read completed */
static size_t big_owed[MAX_FDS];    /* --bodies: bytes of big answers the socket has not taken yet */
static int epoll_fd;

/* On a mismatch the match restarts, except that a '\r' may begin the next terminator. */
static size_t count_terminators(int fd, const char *buf, ssize_t len) {
    size_t count = 0;
    unsigned state = matched[fd];
    for (ssize_t i = 0; i < len; i++) {
        state = buf[i] == "\r\n\r\n"[state] ? state + 1 : buf[i] == '\r';
        if (state == 4) count++, state = 0;
    }
    matched[fd] = (unsigned char)state;
    return count;
}

static void hang_up(int fd) {
    big_owed[fd] = 0, bigs[fd] = 0;
    free(heads[fd]);
    heads[fd] = NULL;
    free(head_texts[fd]);
    head_texts[fd] = NULL;
    close(fd);
}

/* The handshake until its 101 is sent, then one write of an echo per whole frame. */
static void serve_websocket(int fd, const char *buf, size_t len) {
    struct floor_ws_head *head = heads[fd];
    if (head) {
        int complete;
        long took = floor_ws_gather(head, buf, len, &complete);
        if (took < 0 || (complete && !floor_ws_answer(head))) {
            hang_up(fd);
            return;
        }
        if (!complete) return;
        if (write(fd, head->bytes, head->len) != (ssize_t)head->len) {
            hang_up(fd);
            return;
        }
        free(head);
        heads[fd] = NULL;
        buf += took, len -= (size_t)took;
    }
    size_t bytes = floor_ws_frames(&matched[fd], len) * FLOOR_WS_ECHO_LEN;
    if (bytes && write(fd, echoes, bytes) != (ssize_t)bytes) hang_up(fd);
}

/* The Content-Length of a whole head (0 without one). */
static unsigned long long content_length(const char *head, size_t len) {
    static const char name[] = "\ncontent-length:";
    for (size_t i = 0; i + sizeof name - 1 < len; i++)
        if (strncasecmp(head + i, name, sizeof name - 1) == 0)
            return strtoull(head + i + sizeof name - 1, NULL, 10);
    return 0;
}

/* --bodies: how many requests this read completes, heads gathered and bodies skipped. */
static size_t count_requests(int fd, const char *buf, size_t len) {
    struct head_text *text = head_texts[fd];
    size_t count = 0;
    for (size_t i = 0; i < len;) {
        if (text->body_left) {
            size_t take = len - i < text->body_left ? len - i : (size_t)text->body_left;
            i += take, text->body_left -= take;
            count += !text->body_left;
            continue;
        }
        if (text->len == HEAD_MAX) return (size_t)-1;
        char byte = text->bytes[text->len++] = buf[i++];
        if (byte != '\n' || text->len < 4 || memcmp(text->bytes + text->len - 4, "\r\n\r\n", 4) != 0)
            continue;
        text->body_left = content_length(text->bytes, text->len);
        if (text->len > 9 && memcmp(text->bytes, "GET /big ", 9) == 0 && bigs[fd] < 255) bigs[fd]++;
        text->len = 0;
        count += !text->body_left;
    }
    return count;
}

/* Sends what is owed of big answers; 0 when all went, -1 on a failure. Watches for room meanwhile. */
static int send_big(int fd) {
    while (big_owed[fd]) {
        size_t at = (big_answer_len - big_owed[fd] % big_answer_len) % big_answer_len;
        size_t len = big_answer_len - at;
        if (len > big_owed[fd]) len = big_owed[fd];
        ssize_t n = write(fd, big_answer + at, len);
        if (n < 0 && errno == EAGAIN) break;
        if (n <= 0) return -1;
        big_owed[fd] -= (size_t)n;
    }
    struct epoll_event ev = {.events = EPOLLIN | (big_owed[fd] ? EPOLLOUT : 0), .data.fd = fd};
    epoll_ctl(epoll_fd, EPOLL_CTL_MOD, fd, &ev);
    return 0;
}

/* Level-triggered: one read per wakeup. A client too slow to take a write is hung up on, not queued for. */
static void serve(int fd) {
    char buf[READ_SIZE];
    ssize_t len = read(fd, buf, sizeof buf);
    if (len <= 0) {
        if (len == 0 || (errno != EAGAIN && errno != EINTR)) hang_up(fd);
        return;
    }
    if (websocket) {
        serve_websocket(fd, buf, (size_t)len);
        return;
    }
    size_t count = bodies ? count_requests(fd, buf, (size_t)len) : count_terminators(fd, buf, len);
    if (count == (size_t)-1) {
        hang_up(fd);
        return;
    }
    if (bodies && bigs[fd]) { /* a proxy sends one request at a time: the big answers after the pongs */
        count -= bigs[fd];
        big_owed[fd] += bigs[fd] * big_answer_len;
    }
    for (size_t i = 0; i < count; i++) memcpy(replies + i * RESPONSE_LEN, RESPONSE, RESPONSE_LEN);
    if (count && write(fd, replies, count * RESPONSE_LEN) != (ssize_t)(count * RESPONSE_LEN)) {
        hang_up(fd);
        return;
    }
    if (bigs[fd]) {
        bigs[fd] = 0;
        if (send_big(fd) < 0) hang_up(fd);
    }
}

/* Nothing is owed at a stop: SIGTERM and SIGINT end it with status 0, as the test harness expects. */
static void on_stop(int sig) { _exit(0); }

int main(int argc, char **argv) {
    websocket = argc == 3 && strcmp(argv[2], "--websocket") == 0;
    bodies = argc == 3 && strcmp(argv[2], "--bodies") == 0;
    if (argc != 2 && !websocket && !bodies) {
        fprintf(stderr, "usage: %s PORT [--websocket | --bodies]\n", argv[0]);
        return 2;
    }
    for (size_t i = 0; i < sizeof echoes / FLOOR_WS_ECHO_LEN; i++)
        memcpy(echoes + i * FLOOR_WS_ECHO_LEN, floor_ws_echo, FLOOR_WS_ECHO_LEN);
    big_answer_len =
        (size_t)snprintf(big_answer, 128, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", BIG_BODY);
    memset(big_answer + big_answer_len, 'x', BIG_BODY);
    big_answer_len += BIG_BODY;
    int one = 1, client, epfd = epoll_fd = epoll_create1(0),
        listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
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
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = listener}, events[256];
    epoll_ctl(epfd, EPOLL_CTL_ADD, listener, &ev);
    time_t shown = 0;
    for (;;) {
        int ready = epoll_wait(epfd, events, 256, -1);
        if (!websocket) floor_date_refresh(floor_response, &shown); /* after the wait: this second's */
        for (int i = 0; i < ready; i++) {
            if (events[i].data.fd != listener) {
                int fd = events[i].data.fd;
                if ((events[i].events & EPOLLOUT) && big_owed[fd] && send_big(fd) < 0) {
                    hang_up(fd);
                    continue;
                }
                if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) serve(fd);
                continue;
            }
            while ((client = accept4(listener, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                if (client >= MAX_FDS) {
                    close(client);
                    continue;
                }
                setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                matched[client] = 0, ev.data.fd = client;
                if ((websocket && !(heads[client] = calloc(1, sizeof *heads[client]))) ||
                    (bodies && !(head_texts[client] = calloc(1, sizeof *head_texts[client])))) {
                    close(client);
                    continue;
                }
                epoll_ctl(epfd, EPOLL_CTL_ADD, client, &ev);
            }
        }
    }
}
