/* test_listener_handover.c — listening sockets a restart depends on
 * (src/xnet/listener.h): what a closing SO_REUSEPORT socket does with the
 * connections queued on it, with and without the hand-over, measured on the
 * running kernel, and new connections steered to the newest copy's sockets; systemd's LISTEN_FDS read as
 * sd_listen_fds(3) says; and a socket adopted from elsewhere. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "xnet/listener.h"

#define QUEUED 64

static struct sockaddr_storage loopback(uint16_t port, socklen_t *len) {
    struct sockaddr_storage addr;
    CHECK(xListenerResolve("127.0.0.1", port, &addr, len) == XOK);
    return addr;
}

/* Two sockets of one group, QUEUED connections made to it and none accepted,
 * then the first closed: how many the second can accept. */
static int accepted_after_close(bool hand_over, xListenerHandover *how) {
    socklen_t len;
    struct sockaddr_storage addr = loopback(0, &len);
    int first = xListenerOpen(&addr, len, true);
    CHECK(first >= 0 && listen(first, 1024) == 0);
    xListenerSetPort(&addr, xListenerPort(first));
    int second = xListenerOpen(&addr, len, true);
    CHECK(second >= 0 && listen(second, 1024) == 0);
    *how = hand_over ? xListenerHandOverOnClose(&first, 1) : XLISTENER_HANDOVER_DROPPED;
    int clients[QUEUED];
    for (int i = 0; i < QUEUED; i++) {
        clients[i] = socket(AF_INET, SOCK_STREAM, 0);
        CHECK(connect(clients[i], (struct sockaddr *)&addr, len) == 0);
    }
    close(first);
    int accepted = 0, fd;
    struct pollfd ready = {.fd = second, .events = POLLIN};
    while (poll(&ready, 1, 200) > 0 && (fd = accept(second, NULL, NULL)) >= 0) {
        accepted++;
        close(fd);
    }
    for (int i = 0; i < QUEUED; i++) close(clients[i]);
    close(second);
    return accepted;
}

static void test_a_closing_socket_hands_its_queue_over(void) {
    xListenerHandover how;
    int without = accepted_after_close(false, &how);
    printf("  without the hand-over: %d of %d queued connections accepted after the close\n", without,
           QUEUED);
    int with = accepted_after_close(true, &how);
    printf("  with it (%s): %d of %d\n",
           how == XLISTENER_HANDOVER_PROGRAM  ? "reuseport program"
           : how == XLISTENER_HANDOVER_SYSCTL ? "net.ipv4.tcp_migrate_req=1"
                                              : "not available",
           with, QUEUED);
    if (how == XLISTENER_HANDOVER_DROPPED) {
        /* No CAP_BPF and no sysctl: what the server's warning says happens. */
        CHECK_MSG(errno == EPERM || errno == EACCES, "%s", strerror(errno));
        CHECK(with < QUEUED);
        return;
    }
    CHECK_EQ_INT(with, QUEUED);
}

/* Connections accepted on fd until none is queued, each closed. */
static int drain_queue(int fd) {
    int accepted = 0, conn;
    struct pollfd ready = {.fd = fd, .events = POLLIN};
    while (poll(&ready, 1, 50) > 0 && (conn = accept(fd, NULL, NULL)) >= 0) {
        accepted++;
        close(conn);
    }
    return accepted;
}

/* An older copy's two sockets and a newer one's two in one group, the newer
 * one's program attached: new connections all go to the newer copy's, both
 * of them; once those have closed, to the older copy's again. */
static void test_new_connections_go_to_the_newest_copy(void) {
    socklen_t len;
    struct sockaddr_storage addr = loopback(0, &len);
    int older[2], newer[2];
    for (int i = 0; i < 2; i++) {
        older[i] = xListenerOpen(&addr, len, true);
        CHECK(older[i] >= 0 && listen(older[i], 1024) == 0);
        xListenerSetPort(&addr, xListenerPort(older[i]));
    }
    for (int i = 0; i < 2; i++) {
        newer[i] = xListenerOpen(&addr, len, true);
        CHECK(newer[i] >= 0 && listen(newer[i], 1024) == 0);
    }
    if (xListenerHandOverOnClose(newer, 2) != XLISTENER_HANDOVER_PROGRAM) {
        printf("  no reuseport program here (%s): the kernel spreads connections over both copies\n",
               strerror(errno));
        CHECK_MSG(errno == EPERM || errno == EACCES, "%s", strerror(errno));
    } else {
        int clients[QUEUED];
        for (int i = 0; i < QUEUED; i++) {
            clients[i] = socket(AF_INET, SOCK_STREAM, 0);
            CHECK(connect(clients[i], (struct sockaddr *)&addr, len) == 0);
        }
        int to_newer[2] = {drain_queue(newer[0]), drain_queue(newer[1])};
        CHECK_EQ_INT(drain_queue(older[0]) + drain_queue(older[1]), 0);
        CHECK_EQ_INT(to_newer[0] + to_newer[1], QUEUED);
        CHECK(to_newer[0] > 0 && to_newer[1] > 0);
        for (int i = 0; i < QUEUED; i++) close(clients[i]);
        close(newer[0]);
        close(newer[1]);
        for (int i = 0; i < 8; i++) {
            clients[i] = socket(AF_INET, SOCK_STREAM, 0);
            CHECK(connect(clients[i], (struct sockaddr *)&addr, len) == 0);
        }
        CHECK_EQ_INT(drain_queue(older[0]) + drain_queue(older[1]), 8);
        for (int i = 0; i < 8; i++) close(clients[i]);
        newer[0] = newer[1] = -1;
    }
    for (int i = 0; i < 2; i++) {
        close(older[i]);
        if (newer[i] >= 0) close(newer[i]);
    }
}

/* Puts a listening socket at descriptor target. */
static void listening_at(int target) {
    socklen_t len;
    struct sockaddr_storage addr = loopback(0, &len);
    int fd = xListenerOpen(&addr, len, false);
    CHECK(fd >= 0 && listen(fd, 16) == 0);
    CHECK(dup2(fd, target) == target);
    close(fd);
    fcntl(target, F_SETFD, 0); /* as systemd passes it: inheritable */
}

static void set_env(const char *pid, const char *fds, const char *names) {
    char own[32];
    snprintf(own, sizeof own, "%ld", (long)getpid());
    setenv("LISTEN_PID", pid ? pid : own, 1);
    setenv("LISTEN_FDS", fds, 1);
    if (names)
        setenv("LISTEN_FDNAMES", names, 1);
    else
        unsetenv("LISTEN_FDNAMES");
}

static void test_systemd_sockets_are_read_as_sd_listen_fds_says(void) {
    listening_at(3);
    listening_at(4);
    xListenerPassed passed[XLISTENER_PASSED_MAX];
    set_env(NULL, "2", "web:admin");
    CHECK_EQ_INT(xListenerSystemd(passed, XLISTENER_PASSED_MAX), 2);
    CHECK_EQ_INT(passed[0].fd, 3);
    CHECK_EQ_INT(passed[1].fd, 4);
    CHECK(strcmp(passed[0].name, "web") == 0 && strcmp(passed[1].name, "admin") == 0);
    CHECK(fcntl(3, F_GETFD) & FD_CLOEXEC); /* not passed on to what we run */
    CHECK(getenv("LISTEN_FDS"));           /* left: a child's pid is not ours */
    set_env(NULL, "2", NULL);
    CHECK_EQ_INT(xListenerSystemd(passed, XLISTENER_PASSED_MAX), 2);
    CHECK(strcmp(passed[1].name, "unknown") == 0);
    set_env(NULL, "2", "web");
    CHECK_EQ_INT(xListenerSystemd(passed, XLISTENER_PASSED_MAX), 2);
    CHECK(strcmp(passed[0].name, "web") == 0 && strcmp(passed[1].name, "unknown") == 0);
    CHECK_EQ_INT(xListenerSystemd(passed, 1), 1);
    /* Another process's, or not a count: none are ours. */
    set_env("1", "2", NULL);
    CHECK_EQ_INT(xListenerSystemd(passed, XLISTENER_PASSED_MAX), 0);
    static const char *const bad[] = {"", "0", "2x", "-1", " 2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        set_env(NULL, bad[i], NULL);
        CHECK_MSG(xListenerSystemd(passed, XLISTENER_PASSED_MAX) == 0, "LISTEN_FDS='%s'", bad[i]);
    }
    set_env(NULL, "2", NULL);
    unsetenv("LISTEN_PID");
    CHECK_EQ_INT(xListenerSystemd(passed, XLISTENER_PASSED_MAX), 0);
    close(3);
    close(4);
}

static void test_an_adopted_socket_listens_and_does_not_block(void) {
    socklen_t len;
    struct sockaddr_storage addr = loopback(0, &len);
    int bound = xListenerOpen(&addr, len, false); /* bound, not listening */
    CHECK(bound >= 0);
    fcntl(bound, F_SETFL, fcntl(bound, F_GETFL) & ~O_NONBLOCK);
    CHECK(xListenerAdopt(bound, 16));
    int listening = 0;
    socklen_t size = sizeof listening;
    CHECK(getsockopt(bound, SOL_SOCKET, SO_ACCEPTCONN, &listening, &size) == 0 && listening);
    CHECK(fcntl(bound, F_GETFL) & O_NONBLOCK);
    CHECK(xListenerAdopt(bound, 16)); /* listening already: taken as it is */
    close(bound);
    int unbound = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(!xListenerAdopt(unbound, 16) && errno == EINVAL);
    close(unbound);
    int udp = socket(AF_INET, SOCK_DGRAM, 0);
    CHECK(!xListenerAdopt(udp, 16) && errno == EPROTOTYPE);
    close(udp);
    int pipes[2];
    CHECK(pipe(pipes) == 0);
    CHECK(!xListenerAdopt(pipes[0], 16) && errno == ENOTSOCK);
    close(pipes[0]);
    close(pipes[1]);
}

int main(void) {
    RUN(test_a_closing_socket_hands_its_queue_over);
    RUN(test_new_connections_go_to_the_newest_copy);
    RUN(test_systemd_sockets_are_read_as_sd_listen_fds_says);
    RUN(test_an_adopted_socket_listens_and_does_not_block);
    return CHECK_SUMMARY();
}
