/* The floor for HTTP/1.1 benchmarks: one epoll thread that parses nothing. It counts "\r\n\r\n"
 * and answers each with xKit's own pong (floor_response.h), so what a real server costs beyond this
 * is being HTTP. */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "floor_response.h"

enum { MAX_FDS = 65536, READ_SIZE = 16384 };
#define RESPONSE floor_response
#define RESPONSE_LEN FLOOR_RESPONSE_LEN
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

/* Nothing is owed at a stop: SIGTERM and SIGINT end it with status 0, as the test harness expects. */
static void on_stop(int sig) { _exit(0); }

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s PORT\n", argv[0]);
        return 2;
    }
    int one = 1, client, epfd = epoll_create1(0), listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
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
        floor_date_refresh(floor_response, &shown); /* after the wait, so answers carry this second */
        for (int i = 0; i < ready; i++) {
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
