/* The floor for HTTP/1.1 benchmarks: one epoll thread that parses nothing. It counts "\r\n\r\n"
 * and answers each with a canned pong, so what a real server costs beyond this is being HTTP. */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
enum { MAX_FDS = 65536, READ_SIZE = 16384 };
static const char RESPONSE[] = "HTTP/1.1 200 OK\r\nContent-Length: 4\r\nContent-Type: text/plain\r\n\r\npong";
#define RESPONSE_LEN (sizeof RESPONSE - 1)
static unsigned char matched[MAX_FDS];             /* terminator bytes seen at the end of the last read */
static char replies[READ_SIZE / 4 * RESPONSE_LEN]; /* worst case: a terminator every 4 bytes */

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

/* Level-triggered: one read per wakeup. A client too slow to take a write is hung up on, not queued for. */
static void serve(int fd) {
    char buf[READ_SIZE];
    ssize_t len = read(fd, buf, sizeof buf);
    if (len <= 0) {
        if (len == 0 || (errno != EAGAIN && errno != EINTR)) close(fd);
        return;
    }
    size_t count = count_terminators(fd, buf, len);
    for (size_t i = 0; i < count; i++) memcpy(replies + i * RESPONSE_LEN, RESPONSE, RESPONSE_LEN);
    if (count && write(fd, replies, count * RESPONSE_LEN) != (ssize_t)(count * RESPONSE_LEN)) close(fd);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s PORT\n", argv[0]);
        return 2;
    }
    int one = 1, client, epfd = epoll_create1(0), listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1]))};
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(listener, (struct sockaddr *)&addr, sizeof addr) || listen(listener, SOMAXCONN)) {
        perror("listen");
        return 1;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = listener}, events[256];
    epoll_ctl(epfd, EPOLL_CTL_ADD, listener, &ev);
    for (;;) {
        for (int i = 0, ready = epoll_wait(epfd, events, 256, -1); i < ready; i++) {
            if (events[i].data.fd != listener) {
                serve(events[i].data.fd);
                continue;
            }
            while ((client = accept4(listener, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                if (client >= MAX_FDS) {
                    close(client);
                    continue;
                }
                setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                matched[client] = 0, ev.data.fd = client;
                epoll_ctl(epfd, EPOLL_CTL_ADD, client, &ev);
            }
        }
    }
}
