/* listener.c — listening sockets and accepting (listener.h). */
#define _GNU_SOURCE /* accept4 */
#include "xnet/listener.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <xbase/log.h>

xErrno xListenerResolve(const char *host, uint16_t port, struct sockaddr_storage *addr, socklen_t *len) {
    char service[8];
    snprintf(service, sizeof service, "%u", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *res;
    if (!host || !*host) host = "0.0.0.0";
    if (getaddrinfo(host, service, &hints, &res) != 0) return XERR_ADDR;
    memcpy(addr, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return XOK;
}

void xListenerSetPort(struct sockaddr_storage *addr, uint16_t port) {
    if (addr->ss_family == AF_INET6)
        ((struct sockaddr_in6 *)addr)->sin6_port = htons(port);
    else
        ((struct sockaddr_in *)addr)->sin_port = htons(port);
}

uint16_t xListenerPortOf(const struct sockaddr_storage *addr) {
    if (addr->ss_family == AF_INET6) return ntohs(((const struct sockaddr_in6 *)addr)->sin6_port);
    return ntohs(((const struct sockaddr_in *)addr)->sin_port);
}

uint16_t xListenerPort(int fd) {
    struct sockaddr_storage addr;
    socklen_t len = sizeof addr;
    if (getsockname(fd, (struct sockaddr *)&addr, &len) != 0) return 0;
    if (addr.ss_family == AF_INET6) return ntohs(((struct sockaddr_in6 *)&addr)->sin6_port);
    return ntohs(((struct sockaddr_in *)&addr)->sin_port);
}

int xListenerOpen(const struct sockaddr_storage *addr, socklen_t len, bool reuseport) {
    int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (reuseport) setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (bind(fd, (const struct sockaddr *)addr, len) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

/* One line a second at most: a flood at the limit must not flood the log too. */
static void warn_shed(void) {
    static _Thread_local time_t warned_at;
    static _Thread_local unsigned long shed;
    shed++;
    time_t now = time(NULL);
    if (now == warned_at) return;
    XLOG_WARN("out of file descriptors; refused %lu connection%s", shed, shed == 1 ? "" : "s");
    warned_at = now;
    shed = 0;
}

/* accept(2) takes a descriptor before it looks for a connection, so EMFILE does not mean one is pending.
 * Gives up the spare to accept one and close it; false when none was pending (or the spare is gone, taken
 * by another thread), and the caller must stop: retrying would spin. */
static bool shed_one(int listen_fd, int *spare_fd) {
    if (*spare_fd < 0) *spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (*spare_fd < 0) return false;
    close(*spare_fd);
    int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd >= 0) {
        close(fd);
        warn_shed();
    }
    *spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    return fd >= 0;
}

int xListenerAccept(int listen_fd, uint16_t port, int *spare_fd, xNetAddr *peer) {
    for (;;) {
        struct sockaddr_storage from;
        socklen_t len = sizeof from;
        int fd = accept4(listen_fd, (struct sockaddr *)&from, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            xNetAddrSet(peer, &from, port);
            return fd;
        }
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE) {
            if (shed_one(listen_fd, spare_fd)) continue;
            return -1;
        }
        if (errno != EAGAIN) XLOG_ERROR("accept: %s", strerror(errno));
        return -1;
    }
}
